/*
 * Who a GitHub user is now, for a sign-in (_oauth_github.c) and for every
 * refresh of its grant (_oauth_token.c): its numeric id and login (/user),
 * its organizations when a rule names one (/user/orgs), through
 * subrequests to the internal locations (the worker never waits on
 * GitHub), then the sandbox_mcp_oauth_github_allow rule that lets it in,
 * decided in Redis by what a rename cannot change (oauth_github.lua: a
 * login or organization rule is bound to the id it first let in; `id:N`
 * names the user's id).  The tenant is the id ("github-<id>"); the login
 * is a label.  The GitHub token a grant keeps for its refreshes is sealed
 * (AES-256-GCM under a key derived from the signing key, whose kid is
 * written before it: "KID:SEALED"; none: the legacy key's) before it goes
 * to Redis.
 */

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "ngx_http_sandbox_mcp_oauth.h"
#include "ngx_http_sandbox_mcp_scripts.h"

#include "smcp_validate.h"


#define NGX_HTTP_SANDBOX_MCP_GITHUB_ID_MAX      19      /* digits */
#define NGX_HTTP_SANDBOX_MCP_GITHUB_ORGS_MAX    100     /* read of /user/orgs */
#define NGX_HTTP_SANDBOX_MCP_GITHUB_TOKEN_MAX   255
#define NGX_HTTP_SANDBOX_MCP_GITHUB_IV          12
#define NGX_HTTP_SANDBOX_MCP_GITHUB_TAG         16
#define NGX_HTTP_SANDBOX_MCP_GITHUB_SEAL_INFO   "sandbox-mcp github token v1"
#define NGX_HTTP_SANDBOX_MCP_GITHUB_OVER                                      \
    (NGX_HTTP_SANDBOX_MCP_GITHUB_IV + NGX_HTTP_SANDBOX_MCP_GITHUB_TAG)
#define NGX_HTTP_SANDBOX_MCP_GITHUB_SEALED                                    \
    (NGX_HTTP_SANDBOX_MCP_GITHUB_OVER + NGX_HTTP_SANDBOX_MCP_GITHUB_TOKEN_MAX)


static ngx_int_t ngx_http_sandbox_mcp_github_user_next(void *data);


ngx_uint_t
ngx_http_sandbox_mcp_github_wants_orgs(ngx_http_sandbox_mcp_oauth_conf_t *oc)
{
    ngx_uint_t     i;
    ngx_keyval_t  *kv;

    if (oc->github_allow == NULL) {
        return 0;
    }

    kv = oc->github_allow->elts;

    for (i = 0; i < oc->github_allow->nelts; i++) {
        if (ngx_strncmp(kv[i].key.data, "org:", 4) == 0) {
            return 1;
        }
    }

    return 0;
}


ngx_int_t
ngx_http_sandbox_mcp_github_tenant(ngx_pool_t *pool, ngx_str_t *id,
    ngx_str_t *tenant)
{
    tenant->data = ngx_pnalloc(pool, sizeof("github-") - 1 + id->len);
    if (tenant->data == NULL) {
        return NGX_ERROR;
    }

    tenant->len = ngx_sprintf(tenant->data, "github-%V", id) - tenant->data;

    return NGX_OK;
}


/* the sealing key: HMAC-SHA256(the signing key's secret, what it is for) */
static ngx_int_t
ngx_http_sandbox_mcp_github_key(const smcp_key_t *k, u_char *key)
{
    unsigned int  len;

    return HMAC(EVP_sha256(), k->secret, (int) k->len,
                (u_char *) NGX_HTTP_SANDBOX_MCP_GITHUB_SEAL_INFO,
                sizeof(NGX_HTTP_SANDBOX_MCP_GITHUB_SEAL_INFO) - 1, key, &len)
           ? NGX_OK : NGX_ERROR;
}


/* AES-256-GCM in or out: NGX_OK, or NGX_ERROR (a bad tag included) */
static ngx_int_t
ngx_http_sandbox_mcp_github_gcm(const smcp_key_t *k, ngx_uint_t seal,
    u_char *iv, u_char *in, size_t len, u_char *out, u_char *tag)
{
    int              n, ok;
    u_char           key[EVP_MAX_MD_SIZE];
    EVP_CIPHER_CTX  *c;

    if (ngx_http_sandbox_mcp_github_key(k, key) != NGX_OK) {
        return NGX_ERROR;
    }

    c = EVP_CIPHER_CTX_new();
    if (c == NULL) {
        return NGX_ERROR;
    }

    ok = EVP_CipherInit_ex(c, EVP_aes_256_gcm(), NULL, key, iv, (int) seal)
         && EVP_CipherUpdate(c, out, &n, in, (int) len)
         && (seal || EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_TAG,
                                         NGX_HTTP_SANDBOX_MCP_GITHUB_TAG,
                                         tag))
         && EVP_CipherFinal_ex(c, out + n, &n)
         && (!seal || EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG,
                                          NGX_HTTP_SANDBOX_MCP_GITHUB_TAG,
                                          tag));

    EVP_CIPHER_CTX_free(c);
    ngx_explicit_memzero(key, sizeof(key));

    return ok ? NGX_OK : NGX_ERROR;
}


/* "KID:" (the signing key's, if it has one), then base64url(iv |
 * ciphertext | tag) */
ngx_int_t
ngx_http_sandbox_mcp_github_seal(ngx_http_request_t *r, ngx_str_t *token,
    ngx_str_t *sealed)
{
    u_char                            *p;
    size_t                             n;
    const smcp_key_t                  *k;
    ngx_http_sandbox_mcp_main_conf_t  *mcf;
    u_char                             buf[NGX_HTTP_SANDBOX_MCP_GITHUB_SEALED];

    mcf = ngx_http_get_module_main_conf(r, ngx_http_sandbox_mcp_module);
    k = &mcf->keys->key[0];

    if (token->len == 0 || token->len > NGX_HTTP_SANDBOX_MCP_GITHUB_TOKEN_MAX
        || RAND_bytes(buf, NGX_HTTP_SANDBOX_MCP_GITHUB_IV) != 1
        || ngx_http_sandbox_mcp_github_gcm(k, 1, buf, token->data,
                  token->len, buf + NGX_HTTP_SANDBOX_MCP_GITHUB_IV,
                  buf + NGX_HTTP_SANDBOX_MCP_GITHUB_IV + token->len)
           != NGX_OK)
    {
        return NGX_ERROR;
    }

    n = NGX_HTTP_SANDBOX_MCP_GITHUB_OVER + token->len;

    sealed->data = ngx_pnalloc(r->pool,
                               k->kid_len + 1 + smcp_b64url_encoded_len(n)
                               + 1);
    if (sealed->data == NULL) {
        return NGX_ERROR;
    }

    p = sealed->data;

    if (k->kid_len) {
        p = ngx_cpymem(p, k->kid, k->kid_len);
        *p++ = ':';
    }

    p += smcp_b64url_encode((char *) p, buf, n);
    sealed->len = p - sealed->data;

    return NGX_OK;
}


/* the key a sealed token names: "KID:...", else the legacy key */
static const smcp_key_t *
ngx_http_sandbox_mcp_github_sealer(ngx_http_request_t *r, ngx_str_t *sealed)
{
    u_char                            *colon;
    const smcp_key_t                  *k;
    ngx_http_sandbox_mcp_main_conf_t  *mcf;

    mcf = ngx_http_get_module_main_conf(r, ngx_http_sandbox_mcp_module);

    colon = ngx_strlchr(sealed->data, sealed->data + sealed->len, ':');

    if (colon == NULL) {
        return smcp_keyring_legacy(mcf->keys);
    }

    k = smcp_keyring_find(mcf->keys, (char *) sealed->data,
                          colon - sealed->data);

    sealed->len -= colon + 1 - sealed->data;
    sealed->data = colon + 1;

    return k;
}


ngx_int_t
ngx_http_sandbox_mcp_github_unseal(ngx_http_request_t *r, ngx_str_t *sealed,
    ngx_str_t *token)
{
    size_t             n;
    ngx_str_t          b64;
    const smcp_key_t  *k;
    u_char             buf[NGX_HTTP_SANDBOX_MCP_GITHUB_SEALED];

    b64 = *sealed;
    k = ngx_http_sandbox_mcp_github_sealer(r, &b64);

    if (k == NULL
        || b64.len > smcp_b64url_encoded_len(sizeof(buf))
        || smcp_b64url_decode(buf, &n, (char *) b64.data, b64.len)
           != SMCP_OK
        || n <= NGX_HTTP_SANDBOX_MCP_GITHUB_OVER)
    {
        return NGX_ERROR;
    }

    n -= NGX_HTTP_SANDBOX_MCP_GITHUB_OVER;

    token->data = ngx_pnalloc(r->pool, n + 16);
    if (token->data == NULL) {
        return NGX_ERROR;
    }

    token->len = n;

    return ngx_http_sandbox_mcp_github_gcm(k, 0, buf,
               buf + NGX_HTTP_SANDBOX_MCP_GITHUB_IV, n, token->data,
               buf + NGX_HTTP_SANDBOX_MCP_GITHUB_IV + n);
}


/* ?token=<the GitHub token> to {location}/user or /orgs */
static ngx_int_t
ngx_http_sandbox_mcp_github_lookup(ngx_http_sandbox_mcp_oauth_ctx_t *ctx,
    ngx_http_sandbox_mcp_github_user_t *u, ngx_uint_t step)
{
    u_char                             *p;
    ngx_str_t                           uri, args;
    ngx_http_sandbox_mcp_oauth_conf_t  *oc;

    oc = &ctx->lcf->oauth;
    u->step = step;

    uri.data = ngx_pnalloc(ctx->request->pool, oc->github_location.len + 8);
    args.data = ngx_pnalloc(ctx->request->pool, 6 + 3 * u->token.len);

    if (uri.data == NULL || args.data == NULL) {
        return NGX_ERROR;
    }

    uri.len = ngx_sprintf(uri.data, "%V/%s", &oc->github_location,
                          step == NGX_HTTP_SANDBOX_MCP_GITHUB_USER
                          ? "user" : "orgs")
              - uri.data;

    p = ngx_cpymem(args.data, "token=", 6);
    p = ngx_http_sandbox_mcp_oauth_escape(p, &u->token);
    args.len = p - args.data;

    return ngx_http_sandbox_mcp_oauth_subrequest(ctx, &uri, &args,
                                       ngx_http_sandbox_mcp_github_user_next);
}


ngx_int_t
ngx_http_sandbox_mcp_github_user(ngx_http_sandbox_mcp_oauth_ctx_t *ctx,
    ngx_http_sandbox_mcp_github_user_t *u)
{
    ctx->github = u;

    return ngx_http_sandbox_mcp_github_lookup(ctx, u,
                                              NGX_HTTP_SANDBOX_MCP_GITHUB_USER);
}


/* a string copied into the pool, lowercase */
static ngx_int_t
ngx_http_sandbox_mcp_github_lower(ngx_pool_t *pool, const char *s,
    size_t len, ngx_str_t *out)
{
    out->data = ngx_pnalloc(pool, len);
    if (out->data == NULL) {
        return NGX_ERROR;
    }

    ngx_strlow(out->data, (u_char *) s, len);
    out->len = len;

    return NGX_OK;
}


/* /user: {login, id} */
static ngx_int_t
ngx_http_sandbox_mcp_github_user_read(ngx_http_sandbox_mcp_oauth_ctx_t *ctx,
    ngx_http_sandbox_mcp_github_user_t *u, json_t *j)
{
    json_t      *login, *id;
    json_int_t   n;

    login = json_object_get(j, "login");
    id = json_object_get(j, "id");
    n = json_integer_value(id);

    if (!smcp_valid_tenant(json_string_value(login),
                           json_string_length(login))
        || !json_is_integer(id) || n <= 0)
    {
        return NGX_DECLINED;
    }

    u->login.len = json_string_length(login);
    u->login.data = ngx_pnalloc(ctx->request->pool, u->login.len);
    u->id.data = ngx_pnalloc(ctx->request->pool, NGX_INT64_LEN);

    if (u->login.data == NULL || u->id.data == NULL) {
        return NGX_ERROR;
    }

    ngx_memcpy(u->login.data, json_string_value(login), u->login.len);
    u->id.len = ngx_sprintf(u->id.data, "%L", (int64_t) n) - u->id.data;

    return NGX_OK;
}


/* /user/orgs: [{login, id}, ...] into "id:login,..." (lowercase) */
static ngx_int_t
ngx_http_sandbox_mcp_github_orgs_read(ngx_http_sandbox_mcp_oauth_ctx_t *ctx,
    ngx_http_sandbox_mcp_github_user_t *u, json_t *j)
{
    u_char      *p;
    size_t       i;
    json_t      *o, *login, *id;
    ngx_str_t    low;

    if (!json_is_array(j)) {
        return NGX_DECLINED;
    }

    u->orgs.data = ngx_pnalloc(ctx->request->pool,
                               NGX_HTTP_SANDBOX_MCP_GITHUB_ORGS_MAX
                               * (NGX_INT64_LEN + SMCP_TENANT_MAX + 2));
    if (u->orgs.data == NULL) {
        return NGX_ERROR;
    }

    p = u->orgs.data;

    json_array_foreach(j, i, o) {
        if (i == NGX_HTTP_SANDBOX_MCP_GITHUB_ORGS_MAX) {
            break;
        }

        login = json_object_get(o, "login");
        id = json_object_get(o, "id");

        if (!smcp_valid_tenant(json_string_value(login),
                               json_string_length(login))
            || !json_is_integer(id) || json_integer_value(id) <= 0)
        {
            continue;
        }

        if (ngx_http_sandbox_mcp_github_lower(ctx->request->pool,
                                              json_string_value(login),
                                              json_string_length(login),
                                              &low)
            != NGX_OK)
        {
            return NGX_ERROR;
        }

        p = ngx_sprintf(p, "%s%L:%V", p == u->orgs.data ? "" : ",",
                        (int64_t) json_integer_value(id), &low);
    }

    u->orgs.len = p - u->orgs.data;

    return NGX_OK;
}


static void
ngx_http_sandbox_mcp_github_matched(void *data, redisReply *reply)
{
    ngx_http_sandbox_mcp_oauth_ctx_t *ctx = data;

    ngx_int_t                            rc;
    ngx_keyval_t                        *kv;
    ngx_connection_t                    *c;
    ngx_http_sandbox_mcp_github_user_t  *u;

    u = ctx->github;
    c = ctx->request->connection;
    ctx->cmd = NULL;

    if (reply == NULL || reply->type != REDIS_REPLY_INTEGER
        || reply->integer < 0
        || (ngx_uint_t) reply->integer > ctx->lcf->oauth.github_allow->nelts)
    {
        u->status = NGX_HTTP_SERVICE_UNAVAILABLE;
        rc = u->done(ctx, u, NGX_ERROR);

    } else if (reply->integer == 0) {
        rc = u->done(ctx, u, NGX_DECLINED);

    } else {
        kv = ctx->lcf->oauth.github_allow->elts;
        u->rule = &kv[reply->integer - 1];
        rc = u->done(ctx, u, NGX_OK);
    }

    if (rc == NGX_DONE) {
        /* a subrequest, if one was started, runs from the posted ones */
        ngx_http_run_posted_requests(c);
        return;
    }

    ngx_http_sandbox_mcp_oauth_finalize(ctx, rc);
}


/* the rule that lets the user in (oauth_github.lua) */
static ngx_int_t
ngx_http_sandbox_mcp_github_match(ngx_http_sandbox_mcp_oauth_ctx_t *ctx,
    ngx_http_sandbox_mcp_github_user_t *u)
{
    ngx_str_t                           *argv;
    ngx_uint_t                           i, n;
    ngx_keyval_t                        *kv;
    ngx_http_sandbox_mcp_oauth_conf_t   *oc;

    oc = &ctx->lcf->oauth;

    if (oc->github_allow == NULL) {
        return u->done(ctx, u, NGX_DECLINED);
    }

    n = oc->github_allow->nelts;
    kv = oc->github_allow->elts;

    argv = ngx_palloc(ctx->request->pool, (4 + n) * sizeof(ngx_str_t));
    if (argv == NULL
        || ngx_http_sandbox_mcp_redis_key(ctx->request->pool, &argv[0],
                                          SMCP_KEY_OAUTH_GITHUB_BOUND, NULL)
           != NGX_OK
        || ngx_http_sandbox_mcp_github_lower(ctx->request->pool,
                                             (char *) u->login.data,
                                             u->login.len, &argv[2])
           != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    argv[1] = u->id;
    argv[3] = u->orgs;

    for (i = 0; i < n; i++) {
        argv[4 + i] = kv[i].key;
    }

    ctx->cmd = ngx_http_sandbox_mcp_redis_script(
                   &ngx_http_sandbox_mcp_script_oauth_github,
                   ngx_http_sandbox_mcp_github_matched, ctx, 1, 4 + n, argv);

    if (ctx->cmd == NULL) {
        u->status = NGX_HTTP_SERVICE_UNAVAILABLE;
        return u->done(ctx, u, NGX_ERROR);
    }

    return NGX_DONE;
}


/* a lookup ended: the next one, or the rules */
static ngx_int_t
ngx_http_sandbox_mcp_github_user_next(void *data)
{
    ngx_http_sandbox_mcp_oauth_ctx_t *ctx = data;

    json_t                              *j;
    ngx_int_t                            rc;
    ngx_http_sandbox_mcp_github_user_t  *u;

    u = ctx->github;
    u->status = ctx->sub_status;

    j = (ctx->sub_status == NGX_HTTP_OK && ctx->sub_body.len)
        ? json_loadb((char *) ctx->sub_body.data, ctx->sub_body.len, 0, NULL)
        : NULL;

    if (j == NULL) {
        ngx_log_error(NGX_LOG_ERR, ctx->request->connection->log, 0,
                      "sandbox_mcp: oauth: GitHub answered %ui to the %s "
                      "look-up", ctx->sub_status,
                      u->step == NGX_HTTP_SANDBOX_MCP_GITHUB_USER
                      ? "user" : "organizations");

        /* 401: the token is no good any more (the user took the app's
         * access back); else GitHub failed */
        return u->done(ctx, u, ctx->sub_status == NGX_HTTP_UNAUTHORIZED
                               ? NGX_DECLINED : NGX_ERROR);
    }

    rc = (u->step == NGX_HTTP_SANDBOX_MCP_GITHUB_USER)
         ? ngx_http_sandbox_mcp_github_user_read(ctx, u, j)
         : ngx_http_sandbox_mcp_github_orgs_read(ctx, u, j);

    json_decref(j);

    if (rc == NGX_ERROR) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (rc == NGX_DECLINED) {
        ngx_log_error(NGX_LOG_ERR, ctx->request->connection->log, 0,
                      "sandbox_mcp: oauth: GitHub's answer to the %s "
                      "look-up is not usable",
                      u->step == NGX_HTTP_SANDBOX_MCP_GITHUB_USER
                      ? "user" : "organizations");
        u->status = NGX_HTTP_BAD_GATEWAY;
        return u->done(ctx, u, NGX_ERROR);
    }

    if (u->step == NGX_HTTP_SANDBOX_MCP_GITHUB_USER
        && ngx_http_sandbox_mcp_github_wants_orgs(&ctx->lcf->oauth))
    {
        return ngx_http_sandbox_mcp_github_lookup(ctx, u,
                                       NGX_HTTP_SANDBOX_MCP_GITHUB_ORGS)
               == NGX_OK ? NGX_DONE : NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    return ngx_http_sandbox_mcp_github_match(ctx, u);
}
