/*
 * MCP tasks (protocol 2025-11-25): a task-augmented opencode_run_task and
 * tasks/get, tasks/result, tasks/list, tasks/cancel.  A task is a run:
 * taskId = runId, seen only by the run's tenant.
 */

#ifndef _NGX_HTTP_SANDBOX_MCP_TASKS_H_INCLUDED_
#define _NGX_HTTP_SANDBOX_MCP_TASKS_H_INCLUDED_


#include "ngx_http_sandbox_mcp_module.h"


/* call->filter of a task-augmented tools/call: the run started as a task */
json_t *ngx_http_sandbox_mcp_task_created(ngx_http_sandbox_mcp_call_t *call,
    json_t *result);

/* a tasks/ method started (NGX_OK: answered or pending), or NGX_DECLINED */
ngx_int_t ngx_http_sandbox_mcp_tasks_start(ngx_http_sandbox_mcp_call_t *call,
    const char *method, json_t *params);

/* a tool's isError answer as the method's error (code), result freed */
json_t *ngx_http_sandbox_mcp_tool_failed(ngx_http_sandbox_mcp_call_t *call,
    json_t *result, ngx_int_t code);

/* a method's answer built from a tool's (result freed; view NULL: the
 * call answers an internal error), NULL once answered */
json_t *ngx_http_sandbox_mcp_method_view(ngx_http_sandbox_mcp_call_t *call,
    json_t *result, json_t *view);

/* opencode_list_runs' answer as {name: [each(run)...], nextCursor?} */
json_t *ngx_http_sandbox_mcp_runs_view(ngx_http_sandbox_mcp_call_t *call,
    json_t *result, const char *name,
    json_t *(*each)(ngx_http_sandbox_mcp_call_t *call, json_t *run));

/* opencode_list_runs' arguments for a page of limit from params.cursor;
 * NULL: answered (a cursor that is no string) */
json_t *ngx_http_sandbox_mcp_runs_args(ngx_http_sandbox_mcp_call_t *call,
    json_t *params, ngx_int_t limit);

/* result is a tool's isError answer */
ngx_uint_t ngx_http_sandbox_mcp_is_error(json_t *result);


#endif /* _NGX_HTTP_SANDBOX_MCP_TASKS_H_INCLUDED_ */
