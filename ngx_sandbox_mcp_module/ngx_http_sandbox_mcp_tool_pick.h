/*
 * The tool opencode_pick_attempt.
 */

#ifndef _NGX_HTTP_SANDBOX_MCP_TOOL_PICK_H_INCLUDED_
#define _NGX_HTTP_SANDBOX_MCP_TOOL_PICK_H_INCLUDED_


#include "ngx_http_sandbox_mcp_module.h"


/* starts the call (its arguments are known to the tool's schema) */
void ngx_http_sandbox_mcp_pick_attempt(ngx_http_sandbox_mcp_call_t *call);


#endif /* _NGX_HTTP_SANDBOX_MCP_TOOL_PICK_H_INCLUDED_ */
