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

    /* sentinel://: where the master is, asked before each connect */
    ngx_http_sandbox_mcp_redis_conn_t   s;          /* a sentinel */
    ngx_event_t                         ask;        /* ask the next one */
    ngx_uint_t                          next;       /* ... its index */
    ngx_uint_t                          asked;      /* this round */
    ngx_uint_t                          epoch;      /* the moves heard
                                                       when it asked */
    smcp_hostport_t                     master;     /* its answer */
    ngx_str_t                           where;      /* for log lines: the
                                                       setting, or the
                                                       master's address */
    u_char                              where_buf[INET6_ADDRSTRLEN + 8];

    unsigned                            subscriber:1;
    unsigned                            auth_failed:1;
    unsigned                            resolved:1; /* master is set */
    unsigned                            verified:1; /* its ROLE: master,
                                                       no move heard since
                                                       the sentinels were
                                                       asked */
} ngx_http_sandbox_mcp_redis_link_t;


extern ngx_http_sandbox_mcp_main_conf_t   *ngx_http_sandbox_mcp_redis_conf;
extern ngx_log_t                          *ngx_http_sandbox_mcp_redis_log;
extern ngx_uint_t                          ngx_http_sandbox_mcp_redis_exiting;
extern ngx_http_sandbox_mcp_redis_link_t   ngx_http_sandbox_mcp_cmd_link;
extern ngx_http_sandbox_mcp_redis_link_t   ngx_http_sandbox_mcp_sub_link;
extern redisReplyObjectFunctions           ngx_http_sandbox_mcp_redis_reply_fns;


/* redis.c: the timer of the oldest pending command; an event for every
 * listener */
void ngx_http_sandbox_mcp_redis_arm(ngx_http_sandbox_mcp_redis_link_t *link);
void ngx_http_sandbox_mcp_redis_notify(
    ngx_http_sandbox_mcp_redis_event_e event);

/* redis.c: ac (connecting) as the link's connection; the link's next
 * connect, after its backoff */
void ngx_http_sandbox_mcp_redis_open(ngx_http_sandbox_mcp_redis_link_t *link,
    redisAsyncContext *ac);
void ngx_http_sandbox_mcp_redis_schedule(
    ngx_http_sandbox_mcp_redis_link_t *link);

/* redis.c: the connection is usable (READY for the commands link, the
 * subscriptions for the other): at connect, through Sentinel once ROLE
 * said master */
void ngx_http_sandbox_mcp_redis_ready(ngx_http_sandbox_mcp_redis_link_t *link,
    redisAsyncContext *ac);

/* redis_sentinel.c (sentinel://): a link's events; a sentinel asked where
 * the master is (then the link connects there); the master's ROLE asked
 * on a new connection; a sentinel that did not answer in time; the
 * worker's watch of +switch-master, started and stopped */
void ngx_http_sandbox_mcp_redis_sentinel_init(
    ngx_http_sandbox_mcp_redis_link_t *link);
void ngx_http_sandbox_mcp_redis_sentinel_close(
    ngx_http_sandbox_mcp_redis_link_t *link);
void ngx_http_sandbox_mcp_redis_sentinel_ask(
    ngx_http_sandbox_mcp_redis_link_t *link);
void ngx_http_sandbox_mcp_redis_sentinel_role(redisAsyncContext *ac,
    ngx_http_sandbox_mcp_redis_link_t *link);
void ngx_http_sandbox_mcp_redis_sentinel_timeout(
    ngx_http_sandbox_mcp_redis_link_t *link);
void ngx_http_sandbox_mcp_redis_sentinel_start(void);
void ngx_http_sandbox_mcp_redis_sentinel_stop(void);

/* redis_command.c: the scripts' digests; SCRIPT LOAD of each, queued on a
 * new connection; the command connection lost (or the worker exiting) */
void ngx_http_sandbox_mcp_redis_commands_init(ngx_cycle_t *cycle,
    ngx_http_sandbox_mcp_script_t **scripts);
void ngx_http_sandbox_mcp_redis_load_scripts(redisAsyncContext *ac);
void ngx_http_sandbox_mcp_redis_commands_lost(void);


#endif /* _NGX_HTTP_SANDBOX_MCP_REDIS_LINK_H_INCLUDED_ */
