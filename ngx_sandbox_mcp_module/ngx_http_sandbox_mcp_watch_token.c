/*
 * The dashboard token of a run's watchUrl (scope ui, the run, a jti per
 * link), kept by the worker.  A client polling opencode_get_result used to
 * get a freshly signed link on every poll (a JSON claims object, HMAC,
 * base64: an eighth of a worker's time); now it gets the same link for a
 * while:
 *
 * - Per run, tenant and location (whose ui token lifetime it is): an entry
 *   is found by a hash of the run id and used only when all three match.
 * - Young links only: an entry serves while less than half of its
 *   lifetime has passed, so every link handed out is valid for at least
 *   half of sandbox_mcp_ui_token_ttl.
 * - Revocation honoured: its jti is looked up in the worker's revoked set
 *   on every hit; a revoked link (or a set that cannot tell) is replaced
 *   by a new one.
 * - Bounded: NGX_HTTP_SANDBOX_MCP_WATCH_CACHE_SIZE slots, direct-mapped,
 *   in the worker's memory (no allocation); a token that does not fit a
 *   slot is handed out, not kept.
 */

#include "ngx_http_sandbox_mcp_watch_token.h"
#include "ngx_http_sandbox_mcp_revoked.h"
#include "ngx_http_sandbox_mcp_defaults.h"

#include "smcp_jwt.h"


#define NGX_HTTP_SANDBOX_MCP_WATCH_JTI_LEN  32


typedef struct {
    void         *lcf;          /* NULL: a free slot */
    time_t        iat;
    time_t        exp;
    size_t        run_len;
    size_t        tenant_len;
    size_t        len;
    u_char        run[NGX_HTTP_SANDBOX_MCP_WATCH_RUN_MAX];
    u_char        tenant[NGX_HTTP_SANDBOX_MCP_WATCH_TENANT_MAX];
    u_char        jti[NGX_HTTP_SANDBOX_MCP_WATCH_JTI_LEN];
    u_char        token[NGX_HTTP_SANDBOX_MCP_WATCH_TOKEN_MAX];
} ngx_http_sandbox_mcp_watch_entry_t;


static ngx_http_sandbox_mcp_watch_entry_t
    ngx_http_sandbox_mcp_watch_cache[NGX_HTTP_SANDBOX_MCP_WATCH_CACHE_SIZE];


static ngx_int_t
ngx_http_sandbox_mcp_watch_copy(ngx_pool_t *pool, ngx_str_t *dst,
    u_char *src, size_t len)
{
    dst->data = ngx_pnalloc(pool, len);
    if (dst->data == NULL) {
        return NGX_ERROR;
    }

    ngx_memcpy(dst->data, src, len);
    dst->len = len;

    return NGX_OK;
}


/* the slot's link serves this call */
static ngx_uint_t
ngx_http_sandbox_mcp_watch_hit(ngx_http_sandbox_mcp_watch_entry_t *e,
    void *lcf, ngx_str_t *tenant, ngx_str_t *run_id)
{
    ngx_str_t  jti;

    if (e->lcf != lcf
        || e->run_len != run_id->len
        || e->tenant_len != tenant->len
        || ngx_memcmp(e->run, run_id->data, run_id->len) != 0
        || ngx_memcmp(e->tenant, tenant->data, tenant->len) != 0)
    {
        return 0;
    }

    /* young: less than half of its lifetime gone */
    if (ngx_time() - e->iat >= (e->exp - e->iat) / 2) {
        return 0;
    }

    jti.len = NGX_HTTP_SANDBOX_MCP_WATCH_JTI_LEN;
    jti.data = e->jti;

    return ngx_http_sandbox_mcp_revoked(&jti) == NGX_OK;
}


ngx_int_t
ngx_http_sandbox_mcp_watch_token(ngx_http_sandbox_mcp_call_t *call,
    ngx_str_t *run_id, ngx_str_t *token)
{
    char                                *tok;
    size_t                               len;
    json_t                              *claims;
    time_t                               now;
    ngx_int_t                            rc;
    ngx_str_t                           *tenant;
    ngx_http_request_t                  *r;
    ngx_http_sandbox_mcp_loc_conf_t     *lcf;
    ngx_http_sandbox_mcp_main_conf_t    *mcf;
    ngx_http_sandbox_mcp_watch_entry_t  *e;
    char                                 jti[NGX_HTTP_SANDBOX_MCP_WATCH_JTI_LEN
                                             + 1];

    r = call->ctx->request;
    lcf = ngx_http_get_module_loc_conf(r, ngx_http_sandbox_mcp_module);
    mcf = ngx_http_get_module_main_conf(r, ngx_http_sandbox_mcp_module);
    tenant = &call->ctx->tenant;

    e = &ngx_http_sandbox_mcp_watch_cache[
            ngx_murmur_hash2(run_id->data, run_id->len)
            % NGX_HTTP_SANDBOX_MCP_WATCH_CACHE_SIZE];

    if (ngx_http_sandbox_mcp_watch_hit(e, lcf, tenant, run_id)) {
        return ngx_http_sandbox_mcp_watch_copy(r->pool, token, e->token,
                                               e->len);
    }

    /* a token id: `make revoke` can withdraw one link */
    if (smcp_random_id_hex(jti, NGX_HTTP_SANDBOX_MCP_WATCH_JTI_LEN / 2)
        != SMCP_OK)
    {
        return NGX_ERROR;
    }

    now = ngx_time();

    claims = json_pack("{s:s%, s:s, s:s%, s:I, s:I, s:s}",
                       "sub", (char *) tenant->data, tenant->len,
                       "scope", SMCP_SCOPE_UI,
                       "run", (char *) run_id->data, run_id->len,
                       "iat", (json_int_t) now,
                       "exp", (json_int_t) (now + lcf->ui_token_ttl),
                       "jti", jti);

    if (claims == NULL) {
        return NGX_ERROR;
    }

    if (smcp_jwt_sign(&mcf->keys->key[0], claims, &tok) != SMCP_OK) {
        json_decref(claims);
        return NGX_ERROR;
    }

    json_decref(claims);

    len = ngx_strlen(tok);
    rc = ngx_http_sandbox_mcp_watch_copy(r->pool, token, (u_char *) tok, len);

    if (rc == NGX_OK
        && len <= NGX_HTTP_SANDBOX_MCP_WATCH_TOKEN_MAX
        && run_id->len <= NGX_HTTP_SANDBOX_MCP_WATCH_RUN_MAX
        && tenant->len <= NGX_HTTP_SANDBOX_MCP_WATCH_TENANT_MAX)
    {
        e->lcf = lcf;
        e->iat = now;
        e->exp = now + lcf->ui_token_ttl;
        e->run_len = run_id->len;
        e->tenant_len = tenant->len;
        e->len = len;
        ngx_memcpy(e->run, run_id->data, run_id->len);
        ngx_memcpy(e->tenant, tenant->data, tenant->len);
        ngx_memcpy(e->jti, jti, NGX_HTTP_SANDBOX_MCP_WATCH_JTI_LEN);
        ngx_memcpy(e->token, tok, len);

    } else {
        /* whatever the slot held was for another run or older */
        e->lcf = NULL;
    }

    free(tok);

    return rc;
}
