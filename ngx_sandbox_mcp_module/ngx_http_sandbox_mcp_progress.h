/*
 * Progress: a waiting opencode_get_result (waitSeconds) or tasks/result
 * that carries _meta.progressToken answers as text/event-stream:
 * notifications/progress for each agent step of the run and
 * notifications/message for its lifecycle lines (the session's
 * logging/setLevel permitting), then the answer.
 */

#ifndef _NGX_HTTP_SANDBOX_MCP_PROGRESS_H_INCLUDED_
#define _NGX_HTTP_SANDBOX_MCP_PROGRESS_H_INCLUDED_


#include "ngx_http_sandbox_mcp_module.h"


/* the call waits on a run of its tenant: stream if it asked for progress
 * (a single request, a valid token); else nothing changes */
void ngx_http_sandbox_mcp_progress_start(ngx_http_sandbox_mcp_call_t *call);

/* the run's channel spoke: read its new events */
void ngx_http_sandbox_mcp_progress_wake(ngx_http_sandbox_mcp_call_t *call);

/* the level logging/setLevel stored for the session ("" : the default);
 * the rank of a level name, or -1 */
ngx_int_t ngx_http_sandbox_mcp_log_rank(const char *level, size_t len);
const char *ngx_http_sandbox_mcp_log_name(ngx_int_t rank);


#endif /* _NGX_HTTP_SANDBOX_MCP_PROGRESS_H_INCLUDED_ */
