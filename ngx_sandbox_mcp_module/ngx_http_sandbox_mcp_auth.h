/*
 * The bearer token of /mcp (HS256 JWT, scope "mcp").
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
 * A bearer token checked as /mcp checks it (signature, expiry, scope mcp,
 * subject, not revoked, grants, an "aud" naming this MCP URL): NGX_OK with
 * ctx->tenant, ctx->repos and ctx->jti set and, when claims is not NULL,
 * *claims (a new reference); NGX_DECLINED with *reason (safe to show);
 * NGX_ERROR.
 */
ngx_int_t ngx_http_sandbox_mcp_token_check(ngx_http_request_t *r,
    ngx_http_sandbox_mcp_ctx_t *ctx, u_char *token, size_t len,
    json_t **claims, const char **reason);

/* 401 with WWW-Authenticate (bad_token: error="invalid_token") */
ngx_int_t ngx_http_sandbox_mcp_unauthorized(ngx_http_request_t *r,
    const char *reason, ngx_uint_t bad_token);


#endif /* _NGX_HTTP_SANDBOX_MCP_AUTH_H_INCLUDED_ */
