/*
 * Tool arguments, checked.  Each returns NGX_ERROR after answering the
 * call with a message a model can act on.
 */

#ifndef _NGX_HTTP_SANDBOX_MCP_ARGS_H_INCLUDED_
#define _NGX_HTTP_SANDBOX_MCP_ARGS_H_INCLUDED_


#include "ngx_http_sandbox_mcp_module.h"


/* a string of at most max bytes, no NUL; required: present, not empty */
ngx_int_t ngx_http_sandbox_mcp_arg_string(ngx_http_sandbox_mcp_call_t *call,
    const char *name, ngx_uint_t required, size_t max, ngx_str_t *out);

/* an integer in min..max; NGX_DECLINED when absent */
ngx_int_t ngx_http_sandbox_mcp_arg_integer(ngx_http_sandbox_mcp_call_t *call,
    const char *name, json_int_t min, json_int_t max, json_int_t *out);

/* "runId" into call->run_id */
ngx_int_t ngx_http_sandbox_mcp_arg_run_id(ngx_http_sandbox_mcp_call_t *call);

/* answers "Run not found" (also for another tenant's run) */
void ngx_http_sandbox_mcp_run_not_found(ngx_http_sandbox_mcp_call_t *call);


#endif /* _NGX_HTTP_SANDBOX_MCP_ARGS_H_INCLUDED_ */
