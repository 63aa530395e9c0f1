/*
 * The dashboard's tokens.  A token is an HS256 JWT of scope "ui" (checked
 * like every token: ngx_http_sandbox_mcp_verify_token); one with a "run"
 * claim opens that run only, one without opens the tenant's pages, and
 * the runs it starts may name the repositories of its "repos" claim.  The
 * watchUrl's ?token= is moved into an HttpOnly, SameSite=Strict cookie
 * scoped to the page's path, so it leaves the address bar (and the
 * history) at once.
 */

#include "ngx_http_sandbox_mcp_ui_auth.h"
#include "ngx_http_sandbox_mcp_auth.h"
#include "ngx_http_sandbox_mcp_http.h"
#include "ngx_http_sandbox_mcp_defaults.h"

#include "smcp_jwt.h"


/*
 * One token: NGX_OK (a run token when *is_run), NGX_DECLINED, NGX_AGAIN
 * (revocation unknown), NGX_ERROR; *exp its expiry.
 */
static ngx_int_t
ngx_http_sandbox_mcp_ui_check(ngx_http_request_t *r,
    ngx_http_sandbox_mcp_ctx_t *ctx, u_char *token, size_t len,
    ngx_str_t *run_id, ngx_uint_t *is_run, time_t *exp)
{
    json_t      *claims, *run;
    ngx_int_t    rc;
    const char  *s;
    char         err[NGX_HTTP_SANDBOX_MCP_ERR_MAX];

    ngx_str_null(&ctx->tenant);
    ngx_str_null(&ctx->jti);

    rc = ngx_http_sandbox_mcp_verify_token(r, ctx, token, len, SMCP_SCOPE_UI,
                                           &claims, err, sizeof(err));
    if (rc != NGX_OK) {
        if (rc == NGX_DECLINED) {
            ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                          "sandbox_mcp: ui token refused: %s", err);
        }

        return rc;
    }

    run = json_object_get(claims, "run");
    *exp = (time_t) json_number_value(json_object_get(claims, "exp"));
    *is_run = (run != NULL);

    /* the tenant's link grants what its "repos" claim says (the runs it
     * starts: ui_api); a run's link starts none */
    rc = run ? NGX_OK
             : ngx_http_sandbox_mcp_grants(r, ctx,
                                           json_object_get(claims, "repos"));

    if (rc == NGX_DECLINED) {
        ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                      "sandbox_mcp: ui token refused: its repos claim must "
                      "be an array of owner/repo, owner/* or *");
    }

    if (run) {
        s = json_string_value(run);

        if (s == NULL || run_id == NULL
            || run_id->len != json_string_length(run)
            || ngx_strncmp(s, run_id->data, run_id->len) != 0)
        {
            ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                          "sandbox_mcp: ui token refused: another run's");
            rc = NGX_DECLINED;
        }
    }

    json_decref(claims);

    if (rc == NGX_OK && ctx->jti.len) {
        /* the worker's revoked set cannot tell: Redis's word, once asked
         * (fail closed until then) */
        if (ctx->jti_asked.len == ctx->jti.len
            && ngx_memcmp(ctx->jti_asked.data, ctx->jti.data, ctx->jti.len)
               == 0)
        {
            rc = ctx->jti_revoked ? NGX_DECLINED : NGX_OK;

        } else {
            rc = NGX_AGAIN;

            if (ctx->jti_ask.len == 0) {
                ctx->jti_ask = ctx->jti;
            }
        }
    }

    if (rc != NGX_OK) {
        ngx_str_null(&ctx->tenant);
    }

    return rc;
}


/* every value of the cookie name, in the order sent, tried until one is
 * valid: the most specific path comes first, but a stale one may */
static ngx_int_t
ngx_http_sandbox_mcp_ui_cookie(ngx_http_request_t *r,
    ngx_http_sandbox_mcp_ctx_t *ctx, const char *name, ngx_str_t *run_id)
{
    u_char            *p, *last, *v;
    size_t             nlen;
    time_t             exp;
    ngx_int_t          rc, result;
    ngx_uint_t         i, n, is_run;
    ngx_table_elt_t  **h;

    nlen = ngx_strlen(name);
    result = NGX_DECLINED;

    h = r->headers_in.cookies.elts;
    n = r->headers_in.cookies.nelts;

    for (i = 0; i < n; i++) {
        p = h[i]->value.data;
        last = p + h[i]->value.len;

        while (p < last) {
            while (p < last && (*p == ' ' || *p == ';')) {
                p++;
            }

            v = p;

            while (p < last && *p != ';') {
                p++;
            }

            if ((size_t) (p - v) <= nlen + 1 || v[nlen] != '='
                || ngx_strncmp(v, name, nlen) != 0)
            {
                continue;
            }

            v += nlen + 1;

            rc = ngx_http_sandbox_mcp_ui_check(r, ctx, v, p - v, run_id,
                                               &is_run, &exp);

            if (rc == NGX_OK || rc == NGX_ERROR) {
                return rc;
            }

            if (rc == NGX_AGAIN) {
                result = NGX_AGAIN;
            }
        }
    }

    return result;
}


ngx_int_t
ngx_http_sandbox_mcp_ui_auth(ngx_http_request_t *r,
    ngx_http_sandbox_mcp_ctx_t *ctx, ngx_str_t *run_id,
    ngx_uint_t *tenant_rights)
{
    ngx_int_t  rc, rc2;
    ngx_str_t  tenant;

    *tenant_rights = 0;
    rc = NGX_DECLINED;

    if (run_id) {
        rc = ngx_http_sandbox_mcp_ui_cookie(r, ctx,
                                            NGX_HTTP_SANDBOX_MCP_UI_COOKIE_RUN,
                                            run_id);
        if (rc == NGX_ERROR) {
            return rc;
        }

        if (rc == NGX_OK) {
            /* the run's token opens this run only; the tenant's, held
             * too, opens the rest (the list, the session's other runs)
             * when it is of the same tenant */
            tenant = ctx->tenant;

            rc2 = ngx_http_sandbox_mcp_ui_cookie(r, ctx,
                                         NGX_HTTP_SANDBOX_MCP_UI_COOKIE_TENANT,
                                         NULL);
            if (rc2 == NGX_ERROR) {
                return rc2;
            }

            *tenant_rights = (rc2 == NGX_OK
                              && ctx->tenant.len == tenant.len
                              && ngx_memcmp(ctx->tenant.data, tenant.data,
                                            tenant.len)
                                 == 0);

            ctx->tenant = tenant;
            ngx_str_null(&ctx->jti);

            return NGX_OK;
        }
    }

    /* the tenant's token: no "run" claim (one with it is refused: a run
     * token must not open the list by being set as the other cookie) */
    rc2 = ngx_http_sandbox_mcp_ui_cookie(r, ctx,
                                         NGX_HTTP_SANDBOX_MCP_UI_COOKIE_TENANT,
                                         NULL);

    if (rc2 == NGX_OK) {
        *tenant_rights = 1;
    }

    if (rc2 == NGX_DECLINED && rc == NGX_AGAIN) {
        return NGX_AGAIN;
    }

    return rc2;
}


static ngx_int_t
ngx_http_sandbox_mcp_ui_set_cookie(ngx_http_request_t *r, ngx_str_t *token,
    ngx_uint_t is_run, ngx_str_t *path, time_t exp)
{
    u_char                           *p;
    size_t                            len;
    time_t                            age;
    ngx_str_t                         v;
    ngx_uint_t                        secure;
    ngx_http_sandbox_mcp_loc_conf_t  *lcf;

    lcf = ngx_http_get_module_loc_conf(r, ngx_http_sandbox_mcp_module);

    secure = (lcf->public_url.len > 8
              && ngx_strncmp(lcf->public_url.data, "https://", 8) == 0);
#if (NGX_HTTP_SSL)
    secure = secure || r->connection->ssl != NULL;
#endif

    age = exp - ngx_time();
    if (age < 1) {
        age = 1;
    }

    len = sizeof(NGX_HTTP_SANDBOX_MCP_UI_COOKIE_RUN "=") - 1 + token->len
          + sizeof("; Path=") - 1 + path->len
          + sizeof("; Max-Age=") - 1 + NGX_TIME_T_LEN
          + sizeof("; HttpOnly; SameSite=Strict; Secure") - 1;

    v.data = ngx_pnalloc(r->pool, len);
    if (v.data == NULL) {
        return NGX_ERROR;
    }

    p = ngx_sprintf(v.data, "%s=%V; Path=%V; Max-Age=%T; HttpOnly; "
                    "SameSite=Strict",
                    is_run ? NGX_HTTP_SANDBOX_MCP_UI_COOKIE_RUN
                           : NGX_HTTP_SANDBOX_MCP_UI_COOKIE_TENANT,
                    token, path, age);

    if (secure) {
        p = ngx_cpymem(p, "; Secure", sizeof("; Secure") - 1);
    }

    v.len = p - v.data;

    return ngx_http_sandbox_mcp_add_header(r, "Set-Cookie", &v);
}


ngx_int_t
ngx_http_sandbox_mcp_ui_token(ngx_http_request_t *r,
    ngx_http_sandbox_mcp_ctx_t *ctx, ngx_str_t *token, ngx_str_t *prefix,
    ngx_str_t *run_id)
{
    u_char                           *p;
    size_t                            len, base;
    time_t                            exp;
    ngx_int_t                         rc;
    ngx_str_t                         page, cookie_path, location;
    ngx_uint_t                        is_run;
    ngx_http_sandbox_mcp_loc_conf_t  *lcf;

    if (token->len == 0 || token->len > SMCP_JWT_MAX_LEN) {
        return NGX_DECLINED;
    }

    rc = ngx_http_sandbox_mcp_ui_check(r, ctx, token->data, token->len,
                                       run_id, &is_run, &exp);
    if (rc != NGX_OK) {
        return rc;
    }

    /* the page: P or P runs/{id}; a run token's cookie is that page's */

    lcf = ngx_http_get_module_loc_conf(r, ngx_http_sandbox_mcp_module);

    base = lcf->public_url.len;
    len = base + prefix->len
          + (run_id ? sizeof("runs/") - 1 + run_id->len : 0);

    location.data = ngx_pnalloc(r->pool, len);
    if (location.data == NULL) {
        return NGX_ERROR;
    }

    p = ngx_cpymem(location.data, lcf->public_url.data, base);
    p = ngx_cpymem(p, prefix->data, prefix->len);

    if (run_id) {
        p = ngx_cpymem(p, "runs/", sizeof("runs/") - 1);
        p = ngx_cpymem(p, run_id->data, run_id->len);
    }

    location.len = p - location.data;

    page.data = location.data + base;
    page.len = location.len - base;

    cookie_path = is_run ? page : *prefix;

    if (ngx_http_sandbox_mcp_ui_set_cookie(r, token, is_run, &cookie_path,
                                           exp)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    /* behind a proxy that terminates TLS, sandbox_mcp_public_url is the
     * address the browser knows; without it nginx completes the path */
    r->headers_out.location = ngx_list_push(&r->headers_out.headers);
    if (r->headers_out.location == NULL) {
        return NGX_ERROR;
    }

    r->headers_out.location->hash = 1;
    ngx_str_set(&r->headers_out.location->key, "Location");
    r->headers_out.location->value = location;

    return NGX_OK;
}
