/*
 * The dashboard's tokens: "ui" JWTs of a run (claim "run") or of a tenant
 * (no "run"), from the watchUrl's ?token= moved into a cookie, then read
 * from the cookie.
 */

#ifndef _NGX_HTTP_SANDBOX_MCP_UI_AUTH_H_INCLUDED_
#define _NGX_HTTP_SANDBOX_MCP_UI_AUTH_H_INCLUDED_


#include "ngx_http_sandbox_mcp_module.h"


#define NGX_HTTP_SANDBOX_MCP_UI_COOKIE_RUN      "smcp_ui_run"
#define NGX_HTTP_SANDBOX_MCP_UI_COOKIE_TENANT   "smcp_ui"


/*
 * The request's cookies hold a valid ui token: for run_id, a token of that
 * run or the tenant's; without run_id (the tenant's pages), the tenant's
 * only.  NGX_OK with ctx->tenant set and *tenant_rights 1 when the tenant's
 * token is among them (its list and all of its runs open), 0 when only the
 * run's is (that run, nothing else); NGX_DECLINED: none (401); NGX_AGAIN:
 * whether the token is revoked only Redis can tell: ask it about
 * ctx->jti_ask, put its answer in ctx->jti_asked and ctx->jti_revoked and
 * call again; NGX_ERROR.
 */
ngx_int_t ngx_http_sandbox_mcp_ui_auth(ngx_http_request_t *r,
    ngx_http_sandbox_mcp_ctx_t *ctx, ngx_str_t *run_id,
    ngx_uint_t *tenant_rights);

/*
 * ?token= on a page (prefix: the location, run_id: the run page's run or
 * NULL for the list): a valid token goes into its cookie and the answer is
 * 303 to the page without it; NGX_DECLINED: not valid (401); NGX_AGAIN,
 * NGX_ERROR as above.
 */
ngx_int_t ngx_http_sandbox_mcp_ui_token(ngx_http_request_t *r,
    ngx_http_sandbox_mcp_ctx_t *ctx, ngx_str_t *token, ngx_str_t *prefix,
    ngx_str_t *run_id);


#endif /* _NGX_HTTP_SANDBOX_MCP_UI_AUTH_H_INCLUDED_ */
