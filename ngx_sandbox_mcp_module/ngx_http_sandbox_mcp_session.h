/*
 * MCP sessions (Mcp-Session-Id), kept in Redis.
 */

#ifndef _NGX_HTTP_SANDBOX_MCP_SESSION_H_INCLUDED_
#define _NGX_HTTP_SANDBOX_MCP_SESSION_H_INCLUDED_


#include "ngx_http_sandbox_mcp_module.h"


ngx_uint_t ngx_http_sandbox_mcp_version_supported(ngx_str_t *v);
ngx_uint_t ngx_http_sandbox_mcp_is_batch_version(ngx_str_t *v);

/*
 * Each sends its Redis step and returns NGX_DONE (the reply dispatches the
 * request's messages or answers it), or the rc of the answer sent already.
 * A lookup for a lone opencode_get_result reads the run in the same round
 * trip (ctx->run_read while the message is dispatched).
 */
ngx_int_t ngx_http_sandbox_mcp_session_create(ngx_http_sandbox_mcp_ctx_t *ctx);
ngx_int_t ngx_http_sandbox_mcp_session_lookup(ngx_http_sandbox_mcp_ctx_t *ctx);
ngx_int_t ngx_http_sandbox_mcp_session_delete(ngx_http_sandbox_mcp_ctx_t *ctx);


#endif /* _NGX_HTTP_SANDBOX_MCP_SESSION_H_INCLUDED_ */
