/*
 * The tool opencode_get_result.
 */

#ifndef _NGX_HTTP_SANDBOX_MCP_TOOL_RESULT_H_INCLUDED_
#define _NGX_HTTP_SANDBOX_MCP_TOOL_RESULT_H_INCLUDED_


#include "ngx_http_sandbox_mcp_module.h"


/*
 * The run a request's one message will read at once, if it is a plain
 * opencode_get_result (no wait, no task): its key, for the session lookup
 * to read in the same round trip (ctx->run_read).  NGX_OK, NGX_DECLINED
 * (nothing to read ahead) or NGX_ERROR.
 */
ngx_int_t ngx_http_sandbox_mcp_get_result_key(ngx_http_sandbox_mcp_ctx_t *ctx,
    ngx_str_t *key);

/* starts the call (its arguments are known to the tool's schema) */
void ngx_http_sandbox_mcp_get_result(ngx_http_sandbox_mcp_call_t *call);


#endif /* _NGX_HTTP_SANDBOX_MCP_TOOL_RESULT_H_INCLUDED_ */
