/*
 * Tokens: the bearer token of /mcp (HS256 JWT, scope "mcp"), and the
 * verification every scope shares (the dashboard's "ui").
 */

#ifndef _NGX_HTTP_SANDBOX_MCP_AUTH_H_INCLUDED_
#define _NGX_HTTP_SANDBOX_MCP_AUTH_H_INCLUDED_


#include "ngx_http_sandbox_mcp_module.h"


/*
 * Returns NGX_OK with ctx->tenant, ctx->repos and ctx->jti set; otherwise
 * the 401 was sent and the return value is NGX_DONE with *rc holding the
 * sender's result.
 */
ngx_int_t ngx_http_sandbox_mcp_authenticate(ngx_http_request_t *r,
    ngx_http_sandbox_mcp_ctx_t *ctx, ngx_int_t *rc);

/*
 * A token of the scope (SMCP_SCOPE_*): HS256, not expired, a valid subject
 * (set as ctx->tenant), an id not revoked (ctx->jti set when Redis must
 * tell).  NGX_OK with *claims (released by the caller); NGX_DECLINED with
 * err, a reason safe to show; NGX_ERROR.
 */
ngx_int_t ngx_http_sandbox_mcp_verify_token(ngx_http_request_t *r,
    ngx_http_sandbox_mcp_ctx_t *ctx, u_char *token, size_t len,
    const char *scope, json_t **claims, char *err, size_t errlen);

/*
 * A bearer token checked as /mcp checks it (signature, expiry, scope mcp,
 * subject, not revoked, grants, an "aud" naming this MCP URL): NGX_OK with
 * ctx->tenant, ctx->repos and ctx->jti set and, when claims is not NULL,
 * *claims (a new reference); NGX_DECLINED with *reason (safe to show);
 * NGX_ERROR.
 */
ngx_int_t ngx_http_sandbox_mcp_grants(ngx_http_request_t *r,
    ngx_http_sandbox_mcp_ctx_t *ctx, json_t *repos);
ngx_int_t ngx_http_sandbox_mcp_token_check(ngx_http_request_t *r,
    ngx_http_sandbox_mcp_ctx_t *ctx, u_char *token, size_t len,
    json_t **claims, const char **reason);

/* 401 with WWW-Authenticate (bad_token: error="invalid_token") */
ngx_int_t ngx_http_sandbox_mcp_unauthorized(ngx_http_request_t *r,
    const char *reason, ngx_uint_t bad_token);


#endif /* _NGX_HTTP_SANDBOX_MCP_AUTH_H_INCLUDED_ */
