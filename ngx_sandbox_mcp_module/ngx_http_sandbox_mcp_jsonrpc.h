/*
 * JSON-RPC over /mcp: framing and dispatch.
 */

#ifndef _NGX_HTTP_SANDBOX_MCP_JSONRPC_H_INCLUDED_
#define _NGX_HTTP_SANDBOX_MCP_JSONRPC_H_INCLUDED_


#include "ngx_http_sandbox_mcp_module.h"


/* the body read: parse it, find the session (NGX_DONE) or answer (rc) */
ngx_int_t ngx_http_sandbox_mcp_process(ngx_http_request_t *r,
    ngx_http_sandbox_mcp_ctx_t *ctx);


#endif /* _NGX_HTTP_SANDBOX_MCP_JSONRPC_H_INCLUDED_ */
