/*
 * Waiters: calls that wait for something to happen to a run (a long-poll
 * of opencode_get_result), and watchers, the dashboard's streams, which
 * follow a run or a tenant for as long as they last.  Any PUBLISH on the
 * run's channel `run:{id}` wakes the waiters and watchers of that run, one
 * on `tenant:{tenant}` the tenant's watchers; a lost connection wakes them
 * all (they re-read: failing fast, or catching what was missed).  All of
 * it on the worker's one pub/sub connection, however many watch.
 */

#ifndef _NGX_HTTP_SANDBOX_MCP_WAITER_H_INCLUDED_
#define _NGX_HTTP_SANDBOX_MCP_WAITER_H_INCLUDED_


#include "ngx_http_sandbox_mcp_module.h"


typedef struct ngx_http_sandbox_mcp_watch_s  ngx_http_sandbox_mcp_watch_t;

struct ngx_http_sandbox_mcp_watch_s {
    ngx_queue_t                 queue;
    ngx_str_t                   id;         /* the run's, or the tenant */
    ngx_uint_t                  tenant;     /* id is a tenant */

    /* message: what was published (a run's channel: an event's word; a
     * tenant's: "<runId> <status>"); NULL: re-read, messages may have been
     * missed */
    void                      (*wake)(ngx_http_sandbox_mcp_watch_t *w,
                                      ngx_str_t *message);
    void                       *data;

    unsigned                    watching:1;
};


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


/* w (id, tenant, wake set) hears its run's or tenant's channel until
 * unwatched */
void ngx_http_sandbox_mcp_waiter_watch(ngx_http_sandbox_mcp_watch_t *w);
void ngx_http_sandbox_mcp_waiter_unwatch(ngx_http_sandbox_mcp_watch_t *w);


#endif /* _NGX_HTTP_SANDBOX_MCP_WAITER_H_INCLUDED_ */
