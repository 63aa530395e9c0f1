/*
 * The token endpoint (authorization_code with PKCE, refresh_token with
 * rotation and reuse detection) and the revocation endpoint (RFC 7009).
 * Access tokens are the module's HS256 JWTs with an audience: this MCP
 * URL.  Codes and refresh tokens are stored as SHA-256 hashes only.
 */

#include <openssl/sha.h>

#include "ngx_http_sandbox_mcp_oauth.h"
#include "ngx_http_sandbox_mcp_http.h"
#include "ngx_http_sandbox_mcp_scripts.h"
#include "ngx_http_sandbox_mcp_defaults.h"

#include "smcp_jwt.h"
#include "smcp_validate.h"


#define NGX_HTTP_SANDBOX_MCP_OAUTH_RT_LEN                                    \
    (3 + NGX_HTTP_SANDBOX_MCP_OAUTH_FAMILY_LEN + 1 + 64)


static void ngx_http_sandbox_mcp_oauth_revoked(void *data,
    redisReply *reply);
static ngx_int_t ngx_http_sandbox_mcp_oauth_github_refresh(
    ngx_http_sandbox_mcp_oauth_ctx_t *ctx, redisReply *reply);


/* code_verifier (RFC 7636 4.1): 43-128 of [A-Za-z0-9-._~] */
static ngx_uint_t
ngx_http_sandbox_mcp_oauth_verifier_ok(ngx_str_t *v)
{
    size_t  i;
    u_char  c;

    if (v->len < 43 || v->len > 128) {
        return 0;
    }

    for (i = 0; i < v->len; i++) {
        c = v->data[i];

        if (!(isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~')) {
            return 0;
        }
    }

    return 1;
}


/* rt_<family>_<64 hex>: its family */
static ngx_int_t
ngx_http_sandbox_mcp_oauth_family(ngx_str_t *rt, ngx_str_t *family)
{
    size_t  i;

    if (rt->len != NGX_HTTP_SANDBOX_MCP_OAUTH_RT_LEN
        || ngx_strncmp(rt->data, "rt_", 3) != 0
        || rt->data[3 + NGX_HTTP_SANDBOX_MCP_OAUTH_FAMILY_LEN] != '_')
    {
        return NGX_DECLINED;
    }

    for (i = 3; i < rt->len; i++) {
        if (i != 3 + NGX_HTTP_SANDBOX_MCP_OAUTH_FAMILY_LEN
            && !((rt->data[i] >= '0' && rt->data[i] <= '9')
                 || (rt->data[i] >= 'a' && rt->data[i] <= 'f')))
        {
            return NGX_DECLINED;
        }
    }

    family->data = rt->data + 3;
    family->len = NGX_HTTP_SANDBOX_MCP_OAUTH_FAMILY_LEN;

    return NGX_OK;
}


/* the access token: the grant's tenant and repositories, for this MCP URL */
static ngx_int_t
ngx_http_sandbox_mcp_oauth_answer(ngx_http_sandbox_mcp_oauth_ctx_t *ctx,
    redisReply *reply)
{
    char                              *tok;
    time_t                             exp, key_exp;
    json_t                            *claims, *repos, *answer;
    ngx_int_t                          rc;
    ngx_http_request_t                *r;
    ngx_http_sandbox_mcp_main_conf_t  *mcf;

    r = ctx->request;
    mcf = ngx_http_get_module_main_conf(r, ngx_http_sandbox_mcp_module);

    key_exp = ngx_atotm((u_char *) reply->element[3]->str,
                        reply->element[3]->len);
    exp = ngx_min(ctx->access_exp, key_exp);

    claims = json_pack("{s:s#, s:s#, s:s, s:s#, s:I, s:I, s:s#}",
                       "sub", reply->element[1]->str,
                       (int) reply->element[1]->len,
                       "aud", ctx->resource.data, (int) ctx->resource.len,
                       "scope", SMCP_SCOPE_MCP,
                       "client_id", ctx->client_id.data,
                       (int) ctx->client_id.len,
                       "iat", (json_int_t) ngx_time(),
                       "exp", (json_int_t) exp,
                       "jti", ctx->access_jti.data,
                       (int) ctx->access_jti.len);
    if (claims == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (reply->element[2]->len) {
        repos = json_loadb(reply->element[2]->str, reply->element[2]->len, 0,
                           NULL);

        if (repos == NULL || json_object_set_new(claims, "repos", repos)) {
            json_decref(claims);
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }
    }

    rc = smcp_jwt_sign(&mcf->keys->key[0], claims, &tok);
    json_decref(claims);

    if (rc != SMCP_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    answer = json_pack("{s:s, s:s, s:I, s:s%, s:s}",
                       "access_token", tok,
                       "token_type", "Bearer",
                       "expires_in", (json_int_t) (exp - ngx_time()),
                       "refresh_token", ctx->refresh.data, ctx->refresh.len,
                       "scope", SMCP_SCOPE_MCP);
    free(tok);

    return ngx_http_sandbox_mcp_oauth_send_json(r, NGX_HTTP_OK, answer);
}


static void
ngx_http_sandbox_mcp_oauth_granted(void *data, redisReply *reply)
{
    ngx_http_sandbox_mcp_oauth_ctx_t *ctx = data;

    ngx_int_t            rc;
    ngx_uint_t           i;
    ngx_http_request_t  *r;

    r = ctx->request;
    ctx->cmd = NULL;

    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY
        || reply->elements < 3)
    {
        ngx_http_sandbox_mcp_oauth_finalize(ctx,
                                     ngx_http_sandbox_mcp_send_unavailable(r));
        return;
    }

    for (i = 0; i < reply->elements; i++) {
        if (reply->element[i]->type != REDIS_REPLY_STRING) {
            ngx_http_sandbox_mcp_oauth_finalize(ctx,
                                     ngx_http_sandbox_mcp_send_unavailable(r));
            return;
        }
    }

    if (ngx_strcmp(reply->element[0]->str, "OK") == 0
        && reply->elements == 4)
    {
        rc = ngx_http_sandbox_mcp_oauth_answer(ctx, reply);

    } else if (ngx_strcmp(reply->element[0]->str, "GITHUB") == 0
               && reply->elements == 3 && !ctx->github_checked)
    {
        rc = ngx_http_sandbox_mcp_oauth_github_refresh(ctx, reply);

        if (rc == NGX_DONE) {
            /* the subrequest runs from the posted requests */
            ngx_http_run_posted_requests(r->connection);
            return;
        }

    } else {
        ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                      "sandbox_mcp: oauth: token refused: %s: %s",
                      reply->element[1]->str, reply->element[2]->str);

        rc = ngx_http_sandbox_mcp_oauth_error(r, NGX_HTTP_BAD_REQUEST,
                                              reply->element[1]->str,
                                              reply->element[2]->str);
    }

    ngx_http_sandbox_mcp_oauth_finalize(ctx, rc);
}


/* a new refresh token of the family, its hash, the access token's id */
static ngx_int_t
ngx_http_sandbox_mcp_oauth_new_tokens(ngx_http_sandbox_mcp_oauth_ctx_t *ctx,
    ngx_str_t *family, u_char *hash)
{
    u_char              *p;
    ngx_str_t            secret;
    ngx_http_request_t  *r;

    r = ctx->request;

    if (ngx_http_sandbox_mcp_oauth_random(r->pool, &secret, "", 32)
        != NGX_OK
        || ngx_http_sandbox_mcp_oauth_random(r->pool, &ctx->access_jti, "",
                                             16)
           != NGX_OK)
    {
        return NGX_ERROR;
    }

    ctx->refresh.data = ngx_pnalloc(r->pool,
                                    NGX_HTTP_SANDBOX_MCP_OAUTH_RT_LEN);
    if (ctx->refresh.data == NULL) {
        return NGX_ERROR;
    }

    p = ngx_sprintf(ctx->refresh.data, "rt_%V_%V", family, &secret);
    ctx->refresh.len = p - ctx->refresh.data;

    ngx_http_sandbox_mcp_oauth_sha256_hex(hash, ctx->refresh.data,
                                          ctx->refresh.len);

    ctx->access_exp = ngx_time() + ctx->lcf->oauth.token_ttl;

    return NGX_OK;
}


/*
 * oauth_grant.lua: KEYS family, revoked, its channel, the code's key (''),
 * revoked:exp; ARGV mode, client_id, proof, resource, now, new refresh
 * hash, access jti, its exp, refresh ttl, redirect_uri, then whether
 * GitHub was asked again (a GitHub grant's refresh) and what it gives now
 * (repos, label).  new_hash NULL: revoke.
 */
static ngx_int_t
ngx_http_sandbox_mcp_oauth_grant(ngx_http_sandbox_mcp_oauth_ctx_t *ctx,
    const char *mode, ngx_str_t *family, ngx_str_t *code, ngx_str_t *proof,
    ngx_str_t *resource, u_char *new_hash,
    ngx_http_sandbox_mcp_redis_handler_pt handler)
{
    ngx_uint_t           i;
    ngx_str_t            argv[18], *a;
    ngx_http_request_t  *r;

    r = ctx->request;

    for (i = 0; i < 18; i++) {
        ngx_str_null(&argv[i]);
    }

    if (ngx_http_sandbox_mcp_redis_key(r->pool, &argv[0],
                                       SMCP_KEY_OAUTH_FAMILY, family)
        != NGX_OK
        || ngx_http_sandbox_mcp_redis_key(r->pool, &argv[1],
                                          SMCP_KEY_REVOKED, NULL) != NGX_OK
        || ngx_http_sandbox_mcp_redis_key(r->pool, &argv[2],
                                          SMCP_CHAN_REVOKED, NULL) != NGX_OK
        || (code
            && ngx_http_sandbox_mcp_redis_key(r->pool, &argv[3],
                                              SMCP_KEY_OAUTH_CODE, code)
               != NGX_OK)
        || ngx_http_sandbox_mcp_redis_key(r->pool, &argv[4],
                                          SMCP_KEY_REVOKED_EXP, NULL)
           != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    a = &argv[5];   /* ARGV */

    a[0].data = (u_char *) mode;
    a[0].len = ngx_strlen(mode);
    a[1] = ctx->client_id;
    a[2] = *proof;

    if (new_hash) {
        a[3] = *resource;
        a[4] = ngx_http_sandbox_mcp_redis_number(r->pool, ngx_time());
        a[5].data = new_hash;
        a[5].len = NGX_HTTP_SANDBOX_MCP_OAUTH_SHA256_HEX;
        a[6] = ctx->access_jti;
        a[7] = ngx_http_sandbox_mcp_redis_number(r->pool, ctx->access_exp);
        a[8] = ngx_http_sandbox_mcp_redis_number(r->pool,
                                           ctx->lcf->oauth.refresh_ttl);
        a[9] = ctx->redirect_uri;

        if (ctx->github_checked) {
            ngx_str_set(&a[10], "1");
            a[11] = ctx->github_repos;
            a[12] = ctx->github_label;
        }
    }

    ctx->cmd = ngx_http_sandbox_mcp_redis_script(
                   &ngx_http_sandbox_mcp_script_oauth_grant, handler, ctx,
                   5, new_hash ? 18 : 8, argv);

    if (ctx->cmd == NULL) {
        return ngx_http_sandbox_mcp_send_unavailable(r);
    }

    return NGX_DONE;
}


static ngx_int_t
ngx_http_sandbox_mcp_oauth_code_grant(ngx_http_sandbox_mcp_oauth_ctx_t *ctx,
    ngx_str_t *resource)
{
    u_char              *p;
    ngx_str_t            code, verifier, family, hash, challenge;
    ngx_http_request_t  *r;
    u_char               md[32];
    u_char               fam[NGX_HTTP_SANDBOX_MCP_OAUTH_SHA256_HEX + 1];
    u_char               rth[NGX_HTTP_SANDBOX_MCP_OAUTH_SHA256_HEX + 1];
    u_char               ch[NGX_HTTP_SANDBOX_MCP_OAUTH_SHA256_HEX + 1];
    u_char               chal[44];

    r = ctx->request;

    if (ngx_http_sandbox_mcp_oauth_param(ctx, "code", &code) != NGX_OK
        || ngx_http_sandbox_mcp_oauth_param(ctx, "redirect_uri",
                                            &ctx->redirect_uri) != NGX_OK
        || ngx_http_sandbox_mcp_oauth_param(ctx, "code_verifier", &verifier)
           != NGX_OK
        || code.len == 0 || code.len > 128)
    {
        return ngx_http_sandbox_mcp_oauth_error(r, NGX_HTTP_BAD_REQUEST,
                               "invalid_request", "code, redirect_uri and "
                               "code_verifier are required");
    }

    if (!ngx_http_sandbox_mcp_oauth_verifier_ok(&verifier)) {
        return ngx_http_sandbox_mcp_oauth_error(r, NGX_HTTP_BAD_REQUEST,
                               "invalid_request", "code_verifier must be "
                               "43-128 characters of A-Z a-z 0-9 - . _ ~");
    }

    /* the S256 challenge of the verifier */
    SHA256(verifier.data, verifier.len, md);
    challenge.data = chal;
    challenge.len = smcp_b64url_encode((char *) chal, md, 32);

    /* the family's id follows from the code: a reused code finds it */
    p = ngx_pnalloc(r->pool, code.len + 7);
    if (p == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_memcpy(ngx_cpymem(p, "family:", 7), code.data, code.len);
    ngx_http_sandbox_mcp_oauth_sha256_hex(fam, p, code.len + 7);

    family.data = fam;
    family.len = NGX_HTTP_SANDBOX_MCP_OAUTH_FAMILY_LEN;

    ngx_http_sandbox_mcp_oauth_sha256_hex(ch, code.data, code.len);
    hash.data = ch;
    hash.len = NGX_HTTP_SANDBOX_MCP_OAUTH_SHA256_HEX;

    if (ngx_http_sandbox_mcp_oauth_new_tokens(ctx, &family, rth) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    return ngx_http_sandbox_mcp_oauth_grant(ctx, "code", &family, &hash,
                                            &challenge, resource, rth,
                                            ngx_http_sandbox_mcp_oauth_granted);
}


/* the presented refresh token: its family and its hash (hash: 65 bytes);
 * NGX_DECLINED: not one of ours */
static ngx_int_t
ngx_http_sandbox_mcp_oauth_presented(ngx_http_sandbox_mcp_oauth_ctx_t *ctx,
    ngx_str_t *family, ngx_str_t *hash)
{
    ngx_str_t  rt;

    if (ngx_http_sandbox_mcp_oauth_param(ctx, "refresh_token", &rt) != NGX_OK
        || ngx_http_sandbox_mcp_oauth_family(&rt, family) != NGX_OK)
    {
        return NGX_DECLINED;
    }

    ngx_http_sandbox_mcp_oauth_sha256_hex(hash->data, rt.data, rt.len);
    hash->len = NGX_HTTP_SANDBOX_MCP_OAUTH_SHA256_HEX;

    return NGX_OK;
}


static ngx_int_t
ngx_http_sandbox_mcp_oauth_refresh_grant(
    ngx_http_sandbox_mcp_oauth_ctx_t *ctx, ngx_str_t *resource)
{
    ngx_str_t            rt, family, scope, hash;
    ngx_http_request_t  *r;
    u_char               old[NGX_HTTP_SANDBOX_MCP_OAUTH_SHA256_HEX + 1];
    u_char               rth[NGX_HTTP_SANDBOX_MCP_OAUTH_SHA256_HEX + 1];

    r = ctx->request;

    if (ngx_http_sandbox_mcp_oauth_param(ctx, "refresh_token", &rt)
        != NGX_OK)
    {
        return ngx_http_sandbox_mcp_oauth_error(r, NGX_HTTP_BAD_REQUEST,
                               "invalid_request", "refresh_token is "
                               "required");
    }

    if (ngx_http_sandbox_mcp_oauth_param(ctx, "scope", &scope) == NGX_OK
        && !(scope.len == 3
             && ngx_strncmp(scope.data, SMCP_SCOPE_MCP, 3) == 0))
    {
        return ngx_http_sandbox_mcp_oauth_error(r, NGX_HTTP_BAD_REQUEST,
                               "invalid_scope", "the only scope is mcp");
    }

    hash.data = old;

    if (ngx_http_sandbox_mcp_oauth_presented(ctx, &family, &hash) != NGX_OK)
    {
        return ngx_http_sandbox_mcp_oauth_error(r, NGX_HTTP_BAD_REQUEST,
                               "invalid_grant", "unknown, expired or "
                               "revoked refresh token");
    }

    if (ngx_http_sandbox_mcp_oauth_new_tokens(ctx, &family, rth) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    return ngx_http_sandbox_mcp_oauth_grant(ctx, "refresh", &family, NULL,
                                            &hash, resource, rth,
                                            ngx_http_sandbox_mcp_oauth_granted);
}


/* a GitHub grant its account lost: the family revoked, then refused */
static void
ngx_http_sandbox_mcp_oauth_github_lost(void *data, redisReply *reply)
{
    ngx_http_sandbox_mcp_oauth_ctx_t *ctx = data;

    ctx->cmd = NULL;

    ngx_http_sandbox_mcp_oauth_finalize(ctx,
        (reply == NULL || reply->type == REDIS_REPLY_ERROR)
        ? ngx_http_sandbox_mcp_send_unavailable(ctx->request)
        : ngx_http_sandbox_mcp_oauth_error(ctx->request,
                               NGX_HTTP_BAD_REQUEST, "invalid_grant",
                               "this GitHub account is no longer allowed "
                               "here: the grant is revoked"));
}


/* GitHub asked again at a refresh: the refresh goes on, or the grant ends */
static ngx_int_t
ngx_http_sandbox_mcp_oauth_github_rechecked(
    ngx_http_sandbox_mcp_oauth_ctx_t *ctx,
    ngx_http_sandbox_mcp_github_user_t *u, ngx_int_t rc)
{
    ngx_str_t            family, hash, tenant, resource;
    ngx_http_request_t  *r;
    u_char               h[NGX_HTTP_SANDBOX_MCP_OAUTH_SHA256_HEX + 1];

    r = ctx->request;

    if (rc == NGX_ERROR) {
        /* GitHub could not tell: the grant stays, the client retries */
        return ngx_http_sandbox_mcp_oauth_full(r, 5, "GitHub cannot be "
                               "asked about this account now: retry "
                               "shortly");
    }

    if (rc == NGX_OK
        && ngx_http_sandbox_mcp_github_tenant(r->pool, &u->id, &tenant)
           != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (rc == NGX_OK && tenant.len == ctx->github_sub.len
        && ngx_strncmp(tenant.data, ctx->github_sub.data, tenant.len) == 0)
    {
        /* still allowed: the refresh again, with what the rules give now */
        ctx->github_checked = 1;
        ctx->github_repos = u->rule->value;
        ctx->github_label = u->login;

        (void) ngx_http_sandbox_mcp_oauth_param(ctx, "resource", &resource);

        return ngx_http_sandbox_mcp_oauth_refresh_grant(ctx, &resource);
    }

    ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                  "sandbox_mcp: oauth: the GitHub grant of %V ends: the "
                  "account is no longer allowed", &ctx->github_sub);

    hash.data = h;

    if (ngx_http_sandbox_mcp_oauth_presented(ctx, &family, &hash) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    return ngx_http_sandbox_mcp_oauth_grant(ctx, "revoke", &family, NULL,
                                            &hash, NULL, NULL,
                                        ngx_http_sandbox_mcp_oauth_github_lost);
}


/* the refresh of a GitHub sign-in: who the user is now, first */
static ngx_int_t
ngx_http_sandbox_mcp_oauth_github_refresh(
    ngx_http_sandbox_mcp_oauth_ctx_t *ctx, redisReply *reply)
{
    ngx_str_t                            sealed;
    ngx_http_request_t                  *r;
    ngx_http_sandbox_mcp_github_user_t  *u;

    r = ctx->request;

    u = ngx_pcalloc(r->pool, sizeof(ngx_http_sandbox_mcp_github_user_t));
    if (u == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    sealed.data = (u_char *) reply->element[1]->str;
    sealed.len = reply->element[1]->len;

    ctx->github_sub.len = reply->element[2]->len;
    ctx->github_sub.data = ngx_pnalloc(r->pool, ctx->github_sub.len);
    if (ctx->github_sub.data == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_memcpy(ctx->github_sub.data, reply->element[2]->str,
               ctx->github_sub.len);

    u->done = ngx_http_sandbox_mcp_oauth_github_rechecked;

    if (ngx_http_sandbox_mcp_github_unseal(r, &sealed, &u->token) != NGX_OK)
    {
        /* not sealed with this secret: nobody can ask GitHub for it */
        return u->done(ctx, u, NGX_DECLINED);
    }

    return ngx_http_sandbox_mcp_github_user(ctx, u) == NGX_OK
           ? NGX_DONE : NGX_HTTP_INTERNAL_SERVER_ERROR;
}


ngx_int_t
ngx_http_sandbox_mcp_oauth_token(ngx_http_sandbox_mcp_oauth_ctx_t *ctx)
{
    ngx_str_t            grant, resource;
    ngx_http_request_t  *r;

    r = ctx->request;

    if (ngx_http_sandbox_mcp_oauth_param(ctx, "client_id", &ctx->client_id)
        != NGX_OK
        || ctx->client_id.len == 0)
    {
        return ngx_http_sandbox_mcp_oauth_error(r, NGX_HTTP_UNAUTHORIZED,
                               "invalid_client", "client_id is required "
                               "(public clients: token_endpoint_auth_method "
                               "none)");
    }

    (void) ngx_http_sandbox_mcp_oauth_param(ctx, "grant_type", &grant);
    (void) ngx_http_sandbox_mcp_oauth_param(ctx, "resource", &resource);

    if (resource.len
        && (resource.len != ctx->resource.len
            || ngx_strncmp(resource.data, ctx->resource.data, resource.len)
               != 0))
    {
        return ngx_http_sandbox_mcp_oauth_error(r, NGX_HTTP_BAD_REQUEST,
                               "invalid_target", "resource is not this MCP "
                               "server");
    }

    if (grant.len == sizeof("authorization_code") - 1
        && ngx_strncmp(grant.data, "authorization_code", grant.len) == 0)
    {
        return ngx_http_sandbox_mcp_oauth_code_grant(ctx, &resource);
    }

    if (grant.len == sizeof("refresh_token") - 1
        && ngx_strncmp(grant.data, "refresh_token", grant.len) == 0)
    {
        return ngx_http_sandbox_mcp_oauth_refresh_grant(ctx, &resource);
    }

    return ngx_http_sandbox_mcp_oauth_error(r, NGX_HTTP_BAD_REQUEST,
                               "unsupported_grant_type", "grant_type must "
                               "be authorization_code or refresh_token");
}


/* RFC 7009 2.2: 200, whatever the token was */
static ngx_int_t
ngx_http_sandbox_mcp_oauth_revoke_done(ngx_http_request_t *r)
{
    return ngx_http_sandbox_mcp_oauth_send_json(r, NGX_HTTP_OK,
                                                json_object());
}


static void
ngx_http_sandbox_mcp_oauth_revoked(void *data, redisReply *reply)
{
    ngx_http_sandbox_mcp_oauth_ctx_t *ctx = data;

    ngx_int_t  rc;

    ctx->cmd = NULL;

    if (reply == NULL || reply->type == REDIS_REPLY_ERROR) {
        rc = ngx_http_sandbox_mcp_send_unavailable(ctx->request);

    } else if (reply->type == REDIS_REPLY_INTEGER && reply->integer < 0) {
        /* RFC 7009 2.2.1: 503, the client must assume the token still
         * exists (until its exp) and may retry */
        rc = ngx_http_sandbox_mcp_oauth_full(ctx->request, -reply->integer,
                               "too many revocations for this tenant this "
                               "minute: the token is not revoked, retry "
                               "later");

    } else {
        rc = ngx_http_sandbox_mcp_oauth_revoke_done(ctx->request);
    }

    ngx_http_sandbox_mcp_oauth_finalize(ctx, rc);
}


/* a JSON string claim into the pool; NGX_DECLINED: not a string */
static ngx_int_t
ngx_http_sandbox_mcp_oauth_claim(ngx_pool_t *pool, json_t *claims,
    const char *name, ngx_str_t *out)
{
    json_t  *v;

    v = json_object_get(claims, name);

    if (!json_is_string(v)) {
        return NGX_DECLINED;
    }

    out->len = json_string_length(v);
    out->data = ngx_pnalloc(pool, out->len + 1);
    if (out->data == NULL) {
        return NGX_ERROR;
    }

    ngx_memcpy(out->data, json_string_value(v), out->len);

    return NGX_OK;
}


/*
 * RFC 7009: a refresh token revokes its family (and its access token), an
 * access token of ours its id; anything else (a token not ours, one
 * already expired: no entry) is worthless already: 200.  A new revoked id
 * is a worker's memory: a tenant makes at most
 * sandbox_mcp_oauth_revoke_rate a minute, then 503 (revoke.lua).
 */
ngx_int_t
ngx_http_sandbox_mcp_oauth_revoke(ngx_http_sandbox_mcp_oauth_ctx_t *ctx)
{
    json_t                            *claims;
    ngx_int_t                          rc, rc2;
    ngx_str_t                          tok, family, hash, sub, argv[9];
    ngx_http_request_t                *r;
    ngx_http_sandbox_mcp_main_conf_t  *mcf;
    char                               err[NGX_HTTP_SANDBOX_MCP_ERR_MAX];
    u_char                             h[NGX_HTTP_SANDBOX_MCP_OAUTH_SHA256_HEX
                                         + 1];

    r = ctx->request;
    mcf = ngx_http_get_module_main_conf(r, ngx_http_sandbox_mcp_module);

    if (ngx_http_sandbox_mcp_oauth_param(ctx, "token", &tok) != NGX_OK) {
        return ngx_http_sandbox_mcp_oauth_error(r, NGX_HTTP_BAD_REQUEST,
                               "invalid_request", "token is required");
    }

    if (ngx_http_sandbox_mcp_oauth_family(&tok, &family) == NGX_OK) {
        ngx_http_sandbox_mcp_oauth_sha256_hex(h, tok.data, tok.len);
        hash.data = h;
        hash.len = NGX_HTTP_SANDBOX_MCP_OAUTH_SHA256_HEX;

        return ngx_http_sandbox_mcp_oauth_grant(ctx, "revoke", &family, NULL,
                                                &hash, NULL, NULL,
                                            ngx_http_sandbox_mcp_oauth_revoked);
    }

    if (smcp_jwt_verify(mcf->keys, (char *) tok.data, tok.len, ngx_time(),
                        &claims, err, sizeof(err))
        != SMCP_OK)
    {
        /* not ours, or expired: worth nothing already */
        return ngx_http_sandbox_mcp_oauth_revoke_done(r);
    }

    /* an access token of the authorization server: aud, jti, exp, sub */

    rc = ngx_http_sandbox_mcp_oauth_claim(r->pool, claims, "jti", &argv[4]);
    rc2 = ngx_http_sandbox_mcp_oauth_claim(r->pool, claims, "sub", &sub);
    argv[5] = ngx_http_sandbox_mcp_redis_number(r->pool,
                 json_integer_value(json_object_get(claims, "exp")));

    if (rc == NGX_DECLINED || rc2 == NGX_DECLINED
        || !json_is_integer(json_object_get(claims, "exp"))
        || json_object_get(claims, "aud") == NULL
        || !smcp_valid_tenant((char *) sub.data, sub.len))
    {
        json_decref(claims);
        return ngx_http_sandbox_mcp_oauth_revoke_done(r);
    }

    json_decref(claims);

    if (rc == NGX_ERROR || rc2 == NGX_ERROR
        || ngx_http_sandbox_mcp_redis_key(r->pool, &argv[0],
                                          SMCP_KEY_REVOKED, NULL) != NGX_OK
        || ngx_http_sandbox_mcp_redis_key(r->pool, &argv[1],
                                          SMCP_KEY_REVOKED_EXP, NULL)
           != NGX_OK
        || ngx_http_sandbox_mcp_redis_key(r->pool, &argv[2],
                                          SMCP_CHAN_REVOKED, NULL) != NGX_OK
        || ngx_http_sandbox_mcp_redis_key(r->pool, &argv[3],
                                          SMCP_KEY_OAUTH_REVOKES, &sub)
           != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    argv[6] = ngx_http_sandbox_mcp_redis_number(r->pool, ngx_time());
    argv[7] = ngx_http_sandbox_mcp_redis_number(r->pool,
                                            ctx->lcf->oauth.revoke_rate);
    argv[8] = ngx_http_sandbox_mcp_redis_number(r->pool,
                                     NGX_HTTP_SANDBOX_MCP_OAUTH_REVOKE_WINDOW);

    /* the token's id revoked in every worker (revoke.lua, as smcp-token),
     * within the tenant's budget */
    ctx->cmd = ngx_http_sandbox_mcp_redis_script(
                   &ngx_http_sandbox_mcp_script_revoke,
                   ngx_http_sandbox_mcp_oauth_revoked, ctx, 4, 9, argv);

    if (ctx->cmd == NULL) {
        return ngx_http_sandbox_mcp_send_unavailable(r);
    }

    return NGX_DONE;
}
