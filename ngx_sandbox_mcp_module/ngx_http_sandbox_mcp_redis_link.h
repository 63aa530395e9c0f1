/*
 * The Redis layer's own: its connections, shared by its files (redis.c:
 * the connections; redis_command.c: the commands and scripts).  Nothing
 * outside the Redis layer includes this.
 */

#ifndef _NGX_HTTP_SANDBOX_MCP_REDIS_LINK_H_INCLUDED_
#define _NGX_HTTP_SANDBOX_MCP_REDIS_LINK_H_INCLUDED_


#include "ngx_http_sandbox_mcp_redis.h"
#include "ngx_http_sandbox_mcp_redis_event.h"


/* a command, or n pipelined, in the pending queue of the command link */
struct ngx_http_sandbox_mcp_redis_cmd_s {
    ngx_queue_t                             queue;
    ngx_msec_t                              sent;
    ngx_http_sandbox_mcp_redis_handler_pt   handler;
    ngx_http_sandbox_mcp_redis_each_pt      each;   /* or this, n times */
    void                                   *data;   /* NULL: owner gone */
    ngx_uint_t                              n;      /* replies awaited */
    ngx_uint_t                              i;
    sds                                     script; /* EVALSHA ..., kept
                                                       to send it again */
    ngx_uint_t                              loads;  /* scripts loaded
                                                       before it was sent */
    unsigned                                retried:1;
};


typedef struct {
    ngx_http_sandbox_mcp_redis_conn_t   c;          /* first: hiredis's
                                                       ev.data */
    ngx_event_t                         reconnect;
    ngx_event_t                         timer;      /* connect / command */
    ngx_queue_t                         pending;
    ngx_msec_t                          backoff;
    ngx_msec_t                          connect_start;
    ngx_uint_t                          failures;
    ngx_uint_t                          loads;      /* times the scripts
                                                       were sent to load */
    unsigned                            subscriber:1;
    unsigned                            auth_failed:1;
} ngx_http_sandbox_mcp_redis_link_t;


extern ngx_http_sandbox_mcp_main_conf_t   *ngx_http_sandbox_mcp_redis_conf;
extern ngx_log_t                          *ngx_http_sandbox_mcp_redis_log;
extern ngx_uint_t                          ngx_http_sandbox_mcp_redis_exiting;
extern ngx_http_sandbox_mcp_redis_link_t   ngx_http_sandbox_mcp_cmd_link;


/* redis.c: the timer of the oldest pending command; an event for every
 * listener */
void ngx_http_sandbox_mcp_redis_arm(ngx_http_sandbox_mcp_redis_link_t *link);
void ngx_http_sandbox_mcp_redis_notify(
    ngx_http_sandbox_mcp_redis_event_e event);

/* redis_command.c: the scripts' digests; SCRIPT LOAD of each, queued on a
 * new connection; the command connection lost (or the worker exiting) */
void ngx_http_sandbox_mcp_redis_commands_init(ngx_cycle_t *cycle,
    ngx_http_sandbox_mcp_script_t **scripts);
void ngx_http_sandbox_mcp_redis_load_scripts(redisAsyncContext *ac);
void ngx_http_sandbox_mcp_redis_commands_lost(void);


#endif /* _NGX_HTTP_SANDBOX_MCP_REDIS_LINK_H_INCLUDED_ */
