/*
 * hiredis async driven by nginx's event loop: hiredis's event hooks
 * (addRead, delRead, addWrite, delWrite, cleanup) and the connection's read
 * and write handlers.
 */

#include <sys/socket.h>

#include "ngx_http_sandbox_mcp_redis_event.h"
#include "ngx_http_sandbox_mcp_defaults.h"


static void
ngx_http_sandbox_mcp_redis_add_read(void *privdata)
{
    ngx_http_sandbox_mcp_redis_conn_t  *rc = privdata;
    ngx_event_t                        *rev;

    rev = rc->conn->read;

    if (!rev->active) {
        if (ngx_add_event(rev, NGX_READ_EVENT,
                          (ngx_event_flags & NGX_USE_CLEAR_EVENT)
                          ? NGX_CLEAR_EVENT : NGX_LEVEL_EVENT)
            != NGX_OK)
        {
            ngx_log_error(NGX_LOG_ALERT, rev->log, 0,
                          "sandbox_mcp: redis %s: adding read event failed",
                          rc->role);
        }
    }
}


static void
ngx_http_sandbox_mcp_redis_del_read(void *privdata)
{
    ngx_http_sandbox_mcp_redis_conn_t  *rc = privdata;
    ngx_event_t                        *rev;

    rev = rc->conn->read;

    /* edge-triggered methods keep the event armed; level-triggered ones
     * would report the readable socket forever */
    if ((ngx_event_flags & NGX_USE_LEVEL_EVENT) && rev->active) {
        ngx_del_event(rev, NGX_READ_EVENT, 0);
    }
}


static void
ngx_http_sandbox_mcp_redis_add_write(void *privdata)
{
    ngx_http_sandbox_mcp_redis_conn_t  *rc = privdata;
    ngx_event_t                        *wev;

    wev = rc->conn->write;

    if (rc->in_write) {
        /* the write handler re-arms itself after a partial write */
        return;
    }

    if (wev->ready) {
        /* no new edge will come for a socket that is already writable:
         * post the event; this also batches every command of one loop
         * iteration into one write */
        if (!wev->posted) {
            ngx_post_event(wev, &ngx_posted_events);
        }

        return;
    }

    if (!wev->active) {
        if (ngx_add_event(wev, NGX_WRITE_EVENT,
                          (ngx_event_flags & NGX_USE_CLEAR_EVENT)
                          ? NGX_CLEAR_EVENT : NGX_LEVEL_EVENT)
            != NGX_OK)
        {
            ngx_log_error(NGX_LOG_ALERT, wev->log, 0,
                          "sandbox_mcp: redis %s: adding write event failed",
                          rc->role);
        }
    }
}


static void
ngx_http_sandbox_mcp_redis_del_write(void *privdata)
{
    ngx_http_sandbox_mcp_redis_conn_t  *rc = privdata;
    ngx_event_t                        *wev;

    wev = rc->conn->write;

    if ((ngx_event_flags & NGX_USE_LEVEL_EVENT) && wev->active) {
        ngx_del_event(wev, NGX_WRITE_EVENT, 0);
    }
}


static void
ngx_http_sandbox_mcp_redis_cleanup(void *privdata)
{
    ngx_http_sandbox_mcp_redis_conn_t  *rc = privdata;
    ngx_connection_t                   *c;

    /* ngx_close_connection() without the close(): hiredis closes the fd */

    c = rc->conn;
    rc->conn = NULL;
    rc->ac = NULL;
    rc->connected = 0;

    if (c == NULL) {
        return;
    }

    if (c->read->timer_set) {
        ngx_del_timer(c->read);
    }

    if (c->write->timer_set) {
        ngx_del_timer(c->write);
    }

    if (c->read->active || c->read->disabled) {
        ngx_del_event(c->read, NGX_READ_EVENT, NGX_CLOSE_EVENT);
    }

    if (c->write->active || c->write->disabled) {
        ngx_del_event(c->write, NGX_WRITE_EVENT, NGX_CLOSE_EVENT);
    }

    if (c->read->posted) {
        ngx_delete_posted_event(c->read);
    }

    if (c->write->posted) {
        ngx_delete_posted_event(c->write);
    }

    ngx_free_connection(c);

    c->fd = (ngx_socket_t) -1;
}


static void
ngx_http_sandbox_mcp_redis_read_handler(ngx_event_t *rev)
{
    ngx_connection_t                   *c;
    ngx_http_sandbox_mcp_redis_conn_t  *rc;
    redisAsyncContext                  *ac;
    ngx_uint_t                          i;
    ssize_t                             n;
    char                                b;

    c = rev->data;
    rc = c->data;
    ac = rc->ac;

    /* a stale ready flag makes level-triggered methods drop the event */
    rev->ready = 0;

    /*
     * hiredis reads at most 16 KiB per call; under edge-triggered epoll a
     * single read per event leaves the rest of a big reply stuck, so drain
     * until the socket would block.
     */

    for (i = 0; i < NGX_HTTP_SANDBOX_MCP_READ_BURST; i++) {

        redisAsyncHandleRead(ac);

        if (rc->ac != ac) {
            /* the context was freed inside the call: stop touching it */
            return;
        }

        n = recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);

        if (n == -1 && (ngx_socket_errno == NGX_EAGAIN
                        || ngx_socket_errno == NGX_EINTR))
        {
            return;
        }

        /* data, EOF or an error: let hiredis see it */
    }

    /* more to read: come back after the other connections had a turn */
    ngx_post_event(rev, &ngx_posted_events);
}


static void
ngx_http_sandbox_mcp_redis_write_handler(ngx_event_t *wev)
{
    ngx_http_sandbox_mcp_redis_conn_t  *rc;
    redisAsyncContext                  *ac;

    rc = ((ngx_connection_t *) wev->data)->data;
    ac = rc->ac;

    if (rc->connected && sdslen(ac->c.obuf) == 0) {
        return;
    }

    rc->in_write = 1;
    redisAsyncHandleWrite(ac);

    if (rc->ac != ac) {
        return;
    }

    rc->in_write = 0;

    if (sdslen(ac->c.obuf) > 0) {
        /* partial write: wait for the socket to drain */
        wev->ready = 0;
        ngx_http_sandbox_mcp_redis_add_write(rc);
    }
}


ngx_int_t
ngx_http_sandbox_mcp_redis_attach(ngx_http_sandbox_mcp_redis_conn_t *rc,
    redisAsyncContext *ac, ngx_log_t *log)
{
    ngx_connection_t  *c;

    c = ngx_get_connection(ac->c.fd, log);
    if (c == NULL) {
        return NGX_ERROR;
    }

    /* ngx_get_connection() leaves the event logs NULL; --with-debug event
     * methods dereference them */
    c->data = rc;
    c->read->handler = ngx_http_sandbox_mcp_redis_read_handler;
    c->write->handler = ngx_http_sandbox_mcp_redis_write_handler;
    c->read->log = log;
    c->write->log = log;

    rc->ac = ac;
    rc->conn = c;
    rc->connected = 0;
    rc->in_write = 0;

    /* attach before the connect callback: setting it arms the write event */
    ac->ev.data = rc;
    ac->ev.addRead = ngx_http_sandbox_mcp_redis_add_read;
    ac->ev.delRead = ngx_http_sandbox_mcp_redis_del_read;
    ac->ev.addWrite = ngx_http_sandbox_mcp_redis_add_write;
    ac->ev.delWrite = ngx_http_sandbox_mcp_redis_del_write;
    ac->ev.cleanup = ngx_http_sandbox_mcp_redis_cleanup;

    return NGX_OK;
}
