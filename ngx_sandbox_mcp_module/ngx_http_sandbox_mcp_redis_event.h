/*
 * hiredis async on nginx's event loop: the adapter that lets one hiredis
 * context live as an nginx connection.  Each rule followed here was seen
 * to break something when skipped; each is noted where it is followed.
 */

#ifndef _NGX_HTTP_SANDBOX_MCP_REDIS_EVENT_H_INCLUDED_
#define _NGX_HTTP_SANDBOX_MCP_REDIS_EVENT_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>

#include <hiredis/async.h>


/* one hiredis context as an nginx connection */
typedef struct {
    const char                 *role;       /* for log lines */
    redisAsyncContext          *ac;         /* NULL once hiredis let go */
    ngx_connection_t           *conn;
    unsigned                    connected:1;
    unsigned                    in_write:1;
} ngx_http_sandbox_mcp_redis_conn_t;


/*
 * Makes ac's socket an nginx connection and sets hiredis's event hooks,
 * before any callback is set (setting the connect callback arms the write
 * event).  ac->ev.data is rc; hiredis's cleanup resets rc (ac and conn
 * NULL, connected 0).
 */
ngx_int_t ngx_http_sandbox_mcp_redis_attach(
    ngx_http_sandbox_mcp_redis_conn_t *rc, redisAsyncContext *ac,
    ngx_log_t *log);


#endif /* _NGX_HTTP_SANDBOX_MCP_REDIS_EVENT_H_INCLUDED_ */
