/*
 * A worker's cache of verified /mcp bearer tokens, kept until their expiry.
 */

#ifndef _NGX_HTTP_SANDBOX_MCP_TOKEN_CACHE_H_INCLUDED_
#define _NGX_HTTP_SANDBOX_MCP_TOKEN_CACHE_H_INCLUDED_


#include "ngx_http_sandbox_mcp_module.h"


/*
 * The token's bytes verified before at this location and not expired:
 * NGX_OK with ctx->tenant, ctx->repos and ctx->jti set as the full check
 * sets them; NGX_DECLINED when it is not in the cache; NGX_ABORT when its
 * id is revoked now (the entry dropped); NGX_ERROR.
 */
ngx_int_t ngx_http_sandbox_mcp_token_cache_get(ngx_http_request_t *r,
    ngx_http_sandbox_mcp_ctx_t *ctx, u_char *token, size_t len);

/* a token the full check accepted, with its claims (exp, jti) */
void ngx_http_sandbox_mcp_token_cache_put(ngx_http_request_t *r,
    ngx_http_sandbox_mcp_ctx_t *ctx, u_char *token, size_t len,
    json_t *claims);


#endif /* _NGX_HTTP_SANDBOX_MCP_TOKEN_CACHE_H_INCLUDED_ */
