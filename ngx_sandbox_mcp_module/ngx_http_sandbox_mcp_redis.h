/*
 * Redis for nginx workers: hiredis async on nginx's own event loop.
 *
 * Each worker holds two connections: one for commands and one for pub/sub.
 * A worker never blocks: commands are queued and answered through
 * callbacks; a command that waits longer than sandbox_mcp_redis_timeout
 * marks the connection broken (Redis answers in order, so the oldest
 * pending command is the one to watch), which fails every pending command
 * at once and reconnects with backoff.
 *
 * This layer calls nothing above it: pub/sub messages and connection
 * events go to the listeners the layers above register.
 */

#ifndef _NGX_HTTP_SANDBOX_MCP_REDIS_H_INCLUDED_
#define _NGX_HTTP_SANDBOX_MCP_REDIS_H_INCLUDED_


#include "ngx_http_sandbox_mcp_module.h"


/*
 * Called exactly once per command: with the reply, or with NULL when Redis
 * could not serve it (the connection was lost before it came, or Redis is
 * loading its dataset: ngx_http_sandbox_mcp_redis_unavailable() says
 * which).  The reply is freed after the call.
 */
typedef void (*ngx_http_sandbox_mcp_redis_handler_pt)(void *data,
    redisReply *reply);


/*
 * One reply of n commands sent at once (ngx_http_sandbox_mcp_redis_each):
 * called n times, in order (i from 0), each reply NULL when the connection
 * was lost before it came.
 */
typedef void (*ngx_http_sandbox_mcp_redis_each_pt)(void *data, ngx_uint_t i,
    redisReply *reply);


/*
 * A Lua script sent with EVALSHA; loaded (SCRIPT LOAD) on every connect,
 * once Redis has loaded its dataset, and whenever Redis answers NOSCRIPT
 * (restarted, SCRIPT FLUSH, a failover): the command that met NOSCRIPT is
 * sent once more.
 */
typedef struct {
    const char                             *name;
    const char                             *source;
    char                                    sha1[41];
} ngx_http_sandbox_mcp_script_t;


/* what listeners hear */
typedef enum {
    NGX_HTTP_SANDBOX_MCP_REDIS_READY = 0,   /* commands can be served */
    NGX_HTTP_SANDBOX_MCP_REDIS_LOST,        /* the command connection was
                                               lost: pending commands
                                               failed */
    NGX_HTTP_SANDBOX_MCP_REDIS_UNSUBSCRIBED,  /* the pub/sub connection was
                                               lost: messages from now on
                                               are missed */
    NGX_HTTP_SANDBOX_MCP_REDIS_SUBSCRIBED,  /* this listener's channel is
                                               listened to (again) */
    NGX_HTTP_SANDBOX_MCP_REDIS_MESSAGE      /* a message on it */
} ngx_http_sandbox_mcp_redis_event_e;


/*
 * A listener hears every event but MESSAGE and SUBSCRIBED, which only the
 * listener of that channel (or pattern) hears, with the channel and the
 * message.  LOST and UNSUBSCRIBED come from inside hiredis: a listener
 * only sets flags or posts events then, it sends no command.
 */
typedef void (*ngx_http_sandbox_mcp_redis_listener_pt)(
    ngx_http_sandbox_mcp_redis_event_e event, ngx_str_t *channel,
    ngx_str_t *message);


/* the worker's connections: init (no I/O), listeners, then start; a
 * listener of an empty channel subscribes to nothing */
ngx_int_t ngx_http_sandbox_mcp_redis_init_worker(ngx_cycle_t *cycle,
    ngx_http_sandbox_mcp_main_conf_t *mcf,
    ngx_http_sandbox_mcp_script_t **scripts);
ngx_int_t ngx_http_sandbox_mcp_redis_listen(ngx_str_t *channel,
    ngx_uint_t pattern, ngx_http_sandbox_mcp_redis_listener_pt listener);
void ngx_http_sandbox_mcp_redis_start(void);
void ngx_http_sandbox_mcp_redis_exit_worker(ngx_cycle_t *cycle);

/*
 * Sends a command.  Returns NULL when Redis is unavailable (the caller
 * answers at once: fail fast); otherwise the command, whose data the caller
 * sets to NULL (ngx_http_sandbox_mcp_redis_cancel) if it goes away first.
 */
ngx_http_sandbox_mcp_redis_cmd_t *ngx_http_sandbox_mcp_redis_command(
    ngx_http_sandbox_mcp_redis_handler_pt handler, void *data,
    ngx_uint_t argc, ngx_str_t *argv);

/* EVALSHA script->sha1 nkeys argv...: the first nkeys of argv are keys */
ngx_http_sandbox_mcp_redis_cmd_t *ngx_http_sandbox_mcp_redis_script(
    ngx_http_sandbox_mcp_script_t *script,
    ngx_http_sandbox_mcp_redis_handler_pt handler, void *data,
    ngx_uint_t nkeys, ngx_uint_t argc, ngx_str_t *argv);

/* n commands, pipelined: command k has argc[k] arguments, which follow
 * those of command k - 1 in argv */
ngx_http_sandbox_mcp_redis_cmd_t *ngx_http_sandbox_mcp_redis_each(
    ngx_http_sandbox_mcp_redis_each_pt handler, void *data, ngx_uint_t n,
    ngx_uint_t *argc, ngx_str_t *argv);

void ngx_http_sandbox_mcp_redis_cancel(ngx_http_sandbox_mcp_redis_cmd_t *cmd);

/* why Redis cannot serve commands: the text of a 503 for a client */
const char *ngx_http_sandbox_mcp_redis_unavailable(void);

/* builds "<prefix><fmt args>" in the pool */
ngx_int_t ngx_http_sandbox_mcp_redis_key(ngx_pool_t *pool, ngx_str_t *key,
    const char *fmt, ngx_str_t *arg);

ngx_str_t *ngx_http_sandbox_mcp_redis_prefix(void);

/* a number as a command argument, in the pool (len 0 if out of memory) */
ngx_str_t ngx_http_sandbox_mcp_redis_number(ngx_pool_t *pool, int64_t n);


#endif /* _NGX_HTTP_SANDBOX_MCP_REDIS_H_INCLUDED_ */
