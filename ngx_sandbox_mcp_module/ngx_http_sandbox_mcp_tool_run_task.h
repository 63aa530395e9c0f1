/*
 * The tool opencode_run_task.
 */

#ifndef _NGX_HTTP_SANDBOX_MCP_TOOL_RUN_TASK_H_INCLUDED_
#define _NGX_HTTP_SANDBOX_MCP_TOOL_RUN_TASK_H_INCLUDED_


#include "ngx_http_sandbox_mcp_module.h"


/* starts the call (its arguments are known to the tool's schema) */
void ngx_http_sandbox_mcp_run_task(ngx_http_sandbox_mcp_call_t *call);

/* the token's grants as the scripts compare them: lower case, without
 * ".git", ',' between them ("" grants none) */
ngx_int_t ngx_http_sandbox_mcp_task_grants(ngx_http_sandbox_mcp_call_t *call,
    ngx_str_t *out);


#endif /* _NGX_HTTP_SANDBOX_MCP_TOOL_RUN_TASK_H_INCLUDED_ */
