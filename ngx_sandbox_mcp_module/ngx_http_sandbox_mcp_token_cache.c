/*
 * A worker's cache of verified /mcp bearer tokens.  The full check (HMAC,
 * JSON parse of the claims, subject, grants, audience) runs once per token
 * and worker; later requests with the very same bytes take its outcome
 * until the token's expiry.
 *
 * - Keyed by the token's bytes: an entry is found by a hash of them and
 *   used only when all the bytes are equal, so a token that differs in any
 *   byte (a tampered signature or payload) is never served from here.
 * - Bounded: NGX_HTTP_SANDBOX_MCP_TOKEN_CACHE_SIZE slots, direct-mapped (a
 *   new token takes its slot's place), tokens longer than
 *   NGX_HTTP_SANDBOX_MCP_TOKEN_CACHE_TOKEN_MAX not kept.
 * - Expiry honoured: an entry serves while its exp (rounded down) is
 *   later than now.
 * - Revocation honoured: the token id is looked up in the worker's revoked
 *   set on every hit, as the full check does (ctx->jti set when the set
 *   cannot tell, for the session script to ask Redis).
 * - Per location configuration: the audience checked depends on it.
 */

#include "ngx_http_sandbox_mcp_token_cache.h"
#include "ngx_http_sandbox_mcp_revoked.h"
#include "ngx_http_sandbox_mcp_defaults.h"


typedef struct {
    void         *block;        /* one ngx_alloc(): grants, tenant, jti,
                                   token; NULL: a free slot */
    u_char       *token;
    size_t        len;
    time_t        exp;
    void         *lcf;
    ngx_str_t     tenant;
    ngx_str_t     jti;
    ngx_str_t    *repos;
    ngx_uint_t    nrepos;
    ngx_uint_t    has_repos;    /* the claim was there (none: NULL) */
} ngx_http_sandbox_mcp_token_entry_t;


static ngx_http_sandbox_mcp_token_entry_t
    ngx_http_sandbox_mcp_token_cache[NGX_HTTP_SANDBOX_MCP_TOKEN_CACHE_SIZE];


static ngx_http_sandbox_mcp_token_entry_t *
ngx_http_sandbox_mcp_token_slot(u_char *token, size_t len)
{
    return &ngx_http_sandbox_mcp_token_cache[ngx_murmur_hash2(token, len)
                                       % NGX_HTTP_SANDBOX_MCP_TOKEN_CACHE_SIZE];
}


static void
ngx_http_sandbox_mcp_token_drop(ngx_http_sandbox_mcp_token_entry_t *e)
{
    if (e->block) {
        ngx_free(e->block);
    }

    ngx_memzero(e, sizeof(ngx_http_sandbox_mcp_token_entry_t));
}


static ngx_int_t
ngx_http_sandbox_mcp_token_copy(ngx_pool_t *pool, ngx_str_t *dst,
    ngx_str_t *src)
{
    dst->len = src->len;
    dst->data = ngx_pnalloc(pool, src->len ? src->len : 1);

    if (dst->data == NULL) {
        return NGX_ERROR;
    }

    ngx_memcpy(dst->data, src->data, src->len);

    return NGX_OK;
}


ngx_int_t
ngx_http_sandbox_mcp_token_cache_get(ngx_http_request_t *r,
    ngx_http_sandbox_mcp_ctx_t *ctx, u_char *token, size_t len)
{
    ngx_int_t                            rc;
    ngx_str_t                           *g;
    ngx_uint_t                           i;
    ngx_http_sandbox_mcp_token_entry_t  *e;

    e = ngx_http_sandbox_mcp_token_slot(token, len);

    if (e->block == NULL || e->len != len
        || e->lcf != ngx_http_get_module_loc_conf(r,
                                              ngx_http_sandbox_mcp_module)
        || ngx_memcmp(e->token, token, len) != 0)
    {
        return NGX_DECLINED;
    }

    if (e->exp <= ngx_time()) {
        ngx_http_sandbox_mcp_token_drop(e);
        return NGX_DECLINED;
    }

    if (e->jti.len) {
        rc = ngx_http_sandbox_mcp_revoked(&e->jti);

        if (rc == NGX_DECLINED) {
            ngx_http_sandbox_mcp_token_drop(e);
            return NGX_ABORT;
        }

        if (rc == NGX_AGAIN
            && ngx_http_sandbox_mcp_token_copy(r->pool, &ctx->jti, &e->jti)
               != NGX_OK)
        {
            return NGX_ERROR;
        }
    }

    if (ngx_http_sandbox_mcp_token_copy(r->pool, &ctx->tenant, &e->tenant)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    if (!e->has_repos) {
        return NGX_OK;
    }

    ctx->repos = ngx_array_create(r->pool, e->nrepos + 1, sizeof(ngx_str_t));
    if (ctx->repos == NULL) {
        return NGX_ERROR;
    }

    for (i = 0; i < e->nrepos; i++) {
        g = ngx_array_push(ctx->repos);
        if (g == NULL) {
            return NGX_ERROR;
        }

        if (ngx_http_sandbox_mcp_token_copy(r->pool, g, &e->repos[i])
            != NGX_OK)
        {
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


void
ngx_http_sandbox_mcp_token_cache_put(ngx_http_request_t *r,
    ngx_http_sandbox_mcp_ctx_t *ctx, u_char *token, size_t len,
    json_t *claims)
{
    u_char                              *p;
    double                               v;
    size_t                               size;
    json_t                              *exp, *jti;
    ngx_str_t                           *g, id;
    ngx_uint_t                           i, n;
    ngx_http_sandbox_mcp_token_entry_t  *e;

    exp = json_object_get(claims, "exp");
    jti = json_object_get(claims, "jti");

    if (len > NGX_HTTP_SANDBOX_MCP_TOKEN_CACHE_TOKEN_MAX
        || !json_is_number(exp))
    {
        return;
    }

    id.data = (u_char *) json_string_value(jti);
    id.len = id.data ? json_string_length(jti) : 0;

    n = ctx->repos ? ctx->repos->nelts : 0;
    g = ctx->repos ? ctx->repos->elts : NULL;

    size = n * sizeof(ngx_str_t) + len + ctx->tenant.len + id.len;

    for (i = 0; i < n; i++) {
        size += g[i].len;
    }

    e = ngx_http_sandbox_mcp_token_slot(token, len);
    ngx_http_sandbox_mcp_token_drop(e);

    p = ngx_alloc(size, r->connection->log);
    if (p == NULL) {
        return;
    }

    e->block = p;
    e->repos = n ? (ngx_str_t *) p : NULL;
    p += n * sizeof(ngx_str_t);

    e->len = len;
    /* any number later than now passed the check: bounded before the
     * conversion */
    v = json_number_value(exp);
    e->exp = v < (double) NGX_MAX_TIME_T_VALUE ? (time_t) v
                                                : NGX_MAX_TIME_T_VALUE;
    e->lcf = ngx_http_get_module_loc_conf(r, ngx_http_sandbox_mcp_module);
    e->has_repos = ctx->repos != NULL;
    e->nrepos = n;

    for (i = 0; i < n; i++) {
        e->repos[i].data = p;
        e->repos[i].len = g[i].len;
        p = ngx_cpymem(p, g[i].data, g[i].len);
    }

    e->tenant.data = p;
    e->tenant.len = ctx->tenant.len;
    p = ngx_cpymem(p, ctx->tenant.data, ctx->tenant.len);

    e->jti.data = p;
    e->jti.len = id.len;

    if (id.len) {                   /* a token without jti: no data */
        p = ngx_cpymem(p, id.data, id.len);
    }

    /* the slot's key */
    e->token = p;
    ngx_memcpy(p, token, len);
}
