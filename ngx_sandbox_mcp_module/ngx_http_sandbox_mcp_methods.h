/*
 * The MCP methods beyond tools: tasks (ngx_http_sandbox_mcp_tasks.c),
 * resources, logging and completions, and the capabilities declaring them.
 */

#ifndef _NGX_HTTP_SANDBOX_MCP_METHODS_H_INCLUDED_
#define _NGX_HTTP_SANDBOX_MCP_METHODS_H_INCLUDED_


#include "ngx_http_sandbox_mcp_module.h"


/* initialize's capabilities */
json_t *ngx_http_sandbox_mcp_methods_capabilities(void);

/* a request of one of these methods started (NGX_OK: answered, or pending
 * with call->pending set), or NGX_DECLINED: not one of them */
ngx_int_t ngx_http_sandbox_mcp_methods_start(
    ngx_http_sandbox_mcp_call_t *call, const char *method, json_t *params);


#endif /* _NGX_HTTP_SANDBOX_MCP_METHODS_H_INCLUDED_ */
