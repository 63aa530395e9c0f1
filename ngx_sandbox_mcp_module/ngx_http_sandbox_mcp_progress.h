/*
 * Progress: a waiting opencode_get_result (waitSeconds) or tasks/result
 * answers as text/event-stream when it carries _meta.progressToken
 * (notifications/progress for each agent step of the run) or when its
 * session set a level with logging/setLevel: notifications/message for
 * the run's lifecycle lines (those of a run that ended too, for
 * tasks/result), then the answer.
 */

#ifndef _NGX_HTTP_SANDBOX_MCP_PROGRESS_H_INCLUDED_
#define _NGX_HTTP_SANDBOX_MCP_PROGRESS_H_INCLUDED_


#include "ngx_http_sandbox_mcp_module.h"


/* the call waits on a run of its tenant (ended: tasks/result of a run
 * that ended): stream if it asked for progress (a single request, a valid
 * token) or its session set a log level; else nothing changes */
void ngx_http_sandbox_mcp_progress_start(ngx_http_sandbox_mcp_call_t *call,
    ngx_uint_t ended);

/* the run's channel spoke: read its new events */
void ngx_http_sandbox_mcp_progress_wake(ngx_http_sandbox_mcp_call_t *call);

/* the level logging/setLevel stored for the session ("" : the default);
 * the rank of a level name, or -1 */
ngx_int_t ngx_http_sandbox_mcp_log_rank(const char *level, size_t len);
const char *ngx_http_sandbox_mcp_log_name(ngx_int_t rank);


#endif /* _NGX_HTTP_SANDBOX_MCP_PROGRESS_H_INCLUDED_ */
