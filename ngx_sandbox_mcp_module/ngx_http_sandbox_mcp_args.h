/*
 * Tool arguments, checked.  Each returns NGX_ERROR after answering the
 * call with a message a model can act on.
 */

#ifndef _NGX_HTTP_SANDBOX_MCP_ARGS_H_INCLUDED_
#define _NGX_HTTP_SANDBOX_MCP_ARGS_H_INCLUDED_


#include "ngx_http_sandbox_mcp_module.h"
#include "ngx_http_sandbox_mcp_defaults.h"


/*
 * A string without NUL, of at most max bytes (or the schema's maxLength if
 * smaller), one of the schema's enum if it has one; one the schema
 * requires is present and not empty.  Absent: out->len 0.
 */
ngx_int_t ngx_http_sandbox_mcp_arg_string(ngx_http_sandbox_mcp_call_t *call,
    const char *name, size_t max, ngx_str_t *out);

/*
 * An integer from the schema's minimum to its maximum (or max if smaller);
 * absent: the schema's default, else NGX_DECLINED.
 */
ngx_int_t ngx_http_sandbox_mcp_arg_integer(ngx_http_sandbox_mcp_call_t *call,
    const char *name, json_int_t max, json_int_t *out);

/* no bound but the schema's */
#define NGX_HTTP_SANDBOX_MCP_ARG_ANY_SIZE   NGX_MAX_SIZE_T_VALUE
#define NGX_HTTP_SANDBOX_MCP_ARG_ANY_INT    ((json_int_t) 1 << 53)


/* "runId" into call->run_id */
ngx_int_t ngx_http_sandbox_mcp_arg_run_id(ngx_http_sandbox_mcp_call_t *call);

/* answers "Run not found" (also for another tenant's run) */
void ngx_http_sandbox_mcp_run_not_found(ngx_http_sandbox_mcp_call_t *call);


#endif /* _NGX_HTTP_SANDBOX_MCP_ARGS_H_INCLUDED_ */
