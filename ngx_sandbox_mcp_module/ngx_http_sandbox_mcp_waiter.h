/*
 * Waiters: calls that wait for something to happen to a run (a long-poll
 * of opencode_get_result today).  Any PUBLISH on the run's channel
 * `run:{id}` wakes the waiters of that run; a lost connection wakes them
 * all (they re-read: failing fast, or catching what was missed).
 */

#ifndef _NGX_HTTP_SANDBOX_MCP_WAITER_H_INCLUDED_
#define _NGX_HTTP_SANDBOX_MCP_WAITER_H_INCLUDED_


#include "ngx_http_sandbox_mcp_module.h"


/* registers with the Redis layer: call before it starts */
ngx_int_t ngx_http_sandbox_mcp_waiter_init_worker(ngx_cycle_t *cycle);
void ngx_http_sandbox_mcp_waiter_exit_worker(ngx_cycle_t *cycle);

/*
 * call waits on call->run_id for at most timeout ms: call->wake(call) on
 * every event of the run (and on a connection loss); when the time is up,
 * call->expired is set and call->wake(call) called once more.
 */
void ngx_http_sandbox_mcp_waiter_add(ngx_http_sandbox_mcp_call_t *call,
    ngx_msec_t timeout);

/* no more waiting (any time, also for a call that never waited) */
void ngx_http_sandbox_mcp_waiter_remove(ngx_http_sandbox_mcp_call_t *call);


#endif /* _NGX_HTTP_SANDBOX_MCP_WAITER_H_INCLUDED_ */
