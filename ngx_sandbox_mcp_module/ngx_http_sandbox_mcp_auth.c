/*
 * The bearer token of /mcp: an HS256 JWT with scope "mcp", a valid subject
 * (the tenant), a token id that is not revoked, and valid grants (the
 * "repos" claim).
 */

#include "ngx_http_sandbox_mcp_auth.h"
#include "ngx_http_sandbox_mcp_http.h"
#include "ngx_http_sandbox_mcp_oauth.h"
#include "ngx_http_sandbox_mcp_revoked.h"
#include "ngx_http_sandbox_mcp_token_cache.h"
#include "ngx_http_sandbox_mcp_defaults.h"

#include "smcp_jwt.h"
#include "smcp_revoked.h"
#include "smcp_validate.h"


ngx_int_t
ngx_http_sandbox_mcp_unauthorized(ngx_http_request_t *r, const char *reason,
    ngx_uint_t bad_token)
{
    u_char                           *p, *last;
    ngx_str_t                         v, meta;
    ngx_http_sandbox_mcp_loc_conf_t  *lcf;
    char                              msg[NGX_HTTP_SANDBOX_MCP_MESSAGE_MAX];

    lcf = ngx_http_get_module_loc_conf(r, ngx_http_sandbox_mcp_module);

    /* OAuth discovery (RFC 9728): where the client learns how to sign in */
    if (ngx_http_sandbox_mcp_oauth_metadata_url(r, lcf, &meta) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    v.data = ngx_pnalloc(r->pool, NGX_HTTP_SANDBOX_MCP_MESSAGE_MAX
                                  + meta.len);
    if (v.data == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    last = v.data + NGX_HTTP_SANDBOX_MCP_MESSAGE_MAX + meta.len;

    p = ngx_cpymem(v.data, "Bearer realm=\"sandbox-mcp\"",
                   sizeof("Bearer realm=\"sandbox-mcp\"") - 1);

    if (meta.len) {
        p = ngx_slprintf(p, last, ", resource_metadata=\"%V\"", &meta);
    }

    if (bad_token) {
        p = ngx_slprintf(p, last, ", error=\"invalid_token\", "
                         "error_description=\"%s\"", reason);
    }

    v.len = p - v.data;

    if (ngx_http_sandbox_mcp_add_header(r, "WWW-Authenticate", &v)
        != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_snprintf((u_char *) msg, sizeof(msg), "Unauthorized: %s%Z", reason);

    return ngx_http_sandbox_mcp_send_error(r, NGX_HTTP_UNAUTHORIZED,
                                           NGX_HTTP_SANDBOX_MCP_SERVER_ERROR,
                                           msg);
}


static ngx_int_t
ngx_http_sandbox_mcp_auth_failed(ngx_int_t *rc, ngx_http_request_t *r,
    const char *reason, ngx_uint_t bad_token)
{
    *rc = ngx_http_sandbox_mcp_unauthorized(r, reason, bad_token);

    return NGX_DONE;
}


/*
 * The token's "repos" claim: the repositories the tenant may name.  Absent:
 * none.  Anything but an array of valid grants refuses the token.
 */
ngx_int_t
ngx_http_sandbox_mcp_grants(ngx_http_request_t *r,
    ngx_http_sandbox_mcp_ctx_t *ctx, json_t *repos)
{
    size_t       i;
    json_t      *v;
    ngx_str_t   *g;
    const char  *s;

    if (repos == NULL) {
        return NGX_OK;
    }

    if (!json_is_array(repos)
        || json_array_size(repos) > NGX_HTTP_SANDBOX_MCP_MAX_GRANTS)
    {
        return NGX_DECLINED;
    }

    ctx->repos = ngx_array_create(r->pool, json_array_size(repos) + 1,
                                  sizeof(ngx_str_t));
    if (ctx->repos == NULL) {
        return NGX_ERROR;
    }

    json_array_foreach(repos, i, v) {
        s = json_string_value(v);

        if (s == NULL || !smcp_grant_valid(s, json_string_length(v))) {
            return NGX_DECLINED;
        }

        g = ngx_array_push(ctx->repos);
        if (g == NULL) {
            return NGX_ERROR;
        }

        g->len = json_string_length(v);
        g->data = ngx_pnalloc(r->pool, g->len);
        if (g->data == NULL) {
            return NGX_ERROR;
        }

        ngx_memcpy(g->data, s, g->len);
    }

    return NGX_OK;
}


/* the token's id: refused if revoked; kept in ctx->jti when the worker's
 * revoked set cannot tell (the session script asks Redis) */
static ngx_int_t
ngx_http_sandbox_mcp_jti(ngx_http_request_t *r,
    ngx_http_sandbox_mcp_ctx_t *ctx, json_t *jti, const char **reason)
{
    ngx_int_t  rc;
    ngx_str_t  id;

    if (jti == NULL) {
        /* minted before token ids: cannot be revoked one by one */
        return NGX_OK;
    }

    id.data = (u_char *) json_string_value(jti);
    id.len = json_string_length(jti);

    if (!smcp_valid_jti((char *) id.data, id.len)) {
        *reason = "token id (jti) must be 1-64 characters of A-Z a-z 0-9 - _";
        return NGX_DECLINED;
    }

    rc = ngx_http_sandbox_mcp_revoked(&id);

    if (rc == NGX_DECLINED) {
        *reason = "token revoked";
        return NGX_DECLINED;
    }

    if (rc == NGX_AGAIN) {
        ctx->jti.data = ngx_pnalloc(r->pool, id.len);
        if (ctx->jti.data == NULL) {
            return NGX_ERROR;
        }

        ngx_memcpy(ctx->jti.data, id.data, id.len);
        ctx->jti.len = id.len;
    }

    return NGX_OK;
}


/*
 * A token of the scope: HS256, not expired, a valid subject (the tenant,
 * into ctx->tenant), an id that is not revoked (ctx->jti when the
 * worker's revoked set cannot tell).  NGX_OK with *claims (the caller
 * releases them); NGX_DECLINED with the reason (err, a text safe to show);
 * NGX_ERROR (no memory).
 */
ngx_int_t
ngx_http_sandbox_mcp_verify_token(ngx_http_request_t *r,
    ngx_http_sandbox_mcp_ctx_t *ctx, u_char *token, size_t len,
    const char *scope_wanted, json_t **claims, char *err, size_t errlen)
{
    json_t                            *sub;
    ngx_int_t                          rc;
    const char                        *scope, *reason;
    ngx_http_sandbox_mcp_main_conf_t  *mcf;

    mcf = ngx_http_get_module_main_conf(r, ngx_http_sandbox_mcp_module);

    if (smcp_jwt_verify(mcf->keys, (char *) token, len, ngx_time(), claims,
                        err, errlen)
        != SMCP_OK)
    {
        return NGX_DECLINED;
    }

    reason = NULL;
    scope = json_string_value(json_object_get(*claims, "scope"));
    sub = json_object_get(*claims, "sub");

    if (scope == NULL || ngx_strcmp(scope, scope_wanted) != 0) {
        ngx_snprintf((u_char *) err, errlen, "token scope must be \"%s\"%Z",
                     scope_wanted);
        rc = NGX_DECLINED;

    } else if (!smcp_valid_tenant(json_string_value(sub),
                                  json_string_length(sub)))
    {
        reason = "token subject must be 1-128 characters of "
                 "A-Z a-z 0-9 . _ - @";
        rc = NGX_DECLINED;

    } else {
        rc = ngx_http_sandbox_mcp_jti(r, ctx,
                                      json_object_get(*claims, "jti"),
                                      &reason);
    }

    if (rc == NGX_OK) {
        ctx->tenant.len = json_string_length(sub);
        ctx->tenant.data = ngx_pnalloc(r->pool, ctx->tenant.len);

        if (ctx->tenant.data == NULL) {
            rc = NGX_ERROR;

        } else {
            ngx_memcpy(ctx->tenant.data, json_string_value(sub),
                       ctx->tenant.len);
        }
    }

    if (rc == NGX_DECLINED && reason) {
        ngx_snprintf((u_char *) err, errlen, "%s%Z", reason);
    }

    if (rc != NGX_OK) {
        json_decref(*claims);
        *claims = NULL;
    }

    return rc;
}


/* an "aud" claim (OAuth access tokens) must name this MCP server */
static ngx_int_t
ngx_http_sandbox_mcp_audience(ngx_http_request_t *r, json_t *aud,
    const char **reason)
{
    ngx_str_t                         issuer, resource;
    ngx_http_sandbox_mcp_loc_conf_t  *lcf;

    if (aud == NULL) {
        /* a token minted by smcp-token: for every server of the secret */
        return NGX_OK;
    }

    lcf = ngx_http_get_module_loc_conf(r, ngx_http_sandbox_mcp_module);

    if (ngx_http_sandbox_mcp_oauth_urls(r, lcf, &issuer, &resource)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    if (!json_is_string(aud) || json_string_length(aud) != resource.len
        || ngx_strncmp(json_string_value(aud), resource.data, resource.len)
           != 0)
    {
        *reason = "token audience is another server";
        return NGX_DECLINED;
    }

    return NGX_OK;
}


ngx_int_t
ngx_http_sandbox_mcp_token_check(ngx_http_request_t *r,
    ngx_http_sandbox_mcp_ctx_t *ctx, u_char *token, size_t len,
    json_t **claims, const char **reason)
{
    char       *err;
    json_t     *c;
    ngx_int_t   rc;

    err = ngx_pnalloc(r->pool, NGX_HTTP_SANDBOX_MCP_ERR_MAX);
    if (err == NULL) {
        return NGX_ERROR;
    }

    *reason = err;

    rc = ngx_http_sandbox_mcp_verify_token(r, ctx, token, len,
                                           SMCP_SCOPE_MCP, &c, err,
                                           NGX_HTTP_SANDBOX_MCP_ERR_MAX);
    if (rc != NGX_OK) {
        return rc;
    }

    rc = ngx_http_sandbox_mcp_grants(r, ctx, json_object_get(c, "repos"));

    if (rc == NGX_DECLINED) {
        *reason = "token repos claim must be an array of owner/repo, "
                  "owner/* or *";
    }

    if (rc == NGX_OK) {
        rc = ngx_http_sandbox_mcp_audience(r, json_object_get(c, "aud"),
                                           reason);
    }

    if (rc == NGX_OK && claims) {
        *claims = c;
        return NGX_OK;
    }

    json_decref(c);

    return rc;
}


/*
 * Returns NGX_OK with the tenant set; otherwise the 401 was sent and the
 * return value is NGX_DONE with *rc holding the sender's result.
 */
ngx_int_t
ngx_http_sandbox_mcp_authenticate(ngx_http_request_t *r,
    ngx_http_sandbox_mcp_ctx_t *ctx, ngx_int_t *rc)
{
    u_char           *p, *last;
    json_t           *claims;
    ngx_int_t         rc2;
    const char       *reason;
    ngx_table_elt_t  *auth;

    auth = r->headers_in.authorization;

    if (auth == NULL) {
        return ngx_http_sandbox_mcp_auth_failed(rc, r, "a bearer token "
                                                "is required", 0);
    }

    p = auth->value.data;
    last = p + auth->value.len;

    if (last - p < 7 || ngx_strncasecmp(p, (u_char *) "Bearer ", 7) != 0) {
        return ngx_http_sandbox_mcp_auth_failed(rc, r, "a bearer token "
                                                "is required", 0);
    }

    p += 7;

    while (p < last && *p == ' ') {
        p++;
    }

    /* verified before by this worker: only expiry and revocation */
    rc2 = ngx_http_sandbox_mcp_token_cache_get(r, ctx, p, last - p);

    if (rc2 == NGX_OK) {
        return NGX_OK;
    }

    if (rc2 == NGX_ABORT) {
        reason = "token revoked";
        rc2 = NGX_DECLINED;

    } else if (rc2 == NGX_DECLINED) {
        rc2 = ngx_http_sandbox_mcp_token_check(r, ctx, p, last - p, &claims,
                                               &reason);
        if (rc2 == NGX_OK) {
            ngx_http_sandbox_mcp_token_cache_put(r, ctx, p, last - p,
                                                 claims);
            json_decref(claims);
            return NGX_OK;
        }
    }

    if (rc2 == NGX_ERROR) {
        *rc = NGX_HTTP_INTERNAL_SERVER_ERROR;
        return NGX_DONE;
    }

    if (rc2 == NGX_DECLINED) {
        ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                      "sandbox_mcp: token refused: %s", reason);

        return ngx_http_sandbox_mcp_auth_failed(rc, r, reason, 1);
    }

    return NGX_OK;
}
