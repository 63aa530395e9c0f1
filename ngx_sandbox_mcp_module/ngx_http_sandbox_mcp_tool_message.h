/*
 * The tool opencode_send_message.
 */

#ifndef _NGX_HTTP_SANDBOX_MCP_TOOL_MESSAGE_H_INCLUDED_
#define _NGX_HTTP_SANDBOX_MCP_TOOL_MESSAGE_H_INCLUDED_


#include "ngx_http_sandbox_mcp_module.h"


/* starts the call (its arguments are known to the tool's schema) */
void ngx_http_sandbox_mcp_send_message(ngx_http_sandbox_mcp_call_t *call);


#endif /* _NGX_HTTP_SANDBOX_MCP_TOOL_MESSAGE_H_INCLUDED_ */
