/*
 * The dashboard's live streams (text/event-stream).
 *
 * A run's stream: the stored events in order (ui_events.lua: a page of
 * XRANGE after the last id sent, with the run's status, for this tenant
 * only), then a new page each time the run's channel announces something;
 * `event: end` and the end of the answer once the run has ended and all
 * was sent.  Last-Event-ID resumes after that id.
 *
 * A tenant's stream: `event: run` {runId, status} for each message on
 * tenant:{tenant}.
 *
 * Watchers are woken by the waiter layer (the worker's one pub/sub
 * connection).  The streams of a run that are up to date read together:
 * one Redis round trip and one framing per worker and event, however many
 * watch.  Memory per watcher is bounded: a page is read only once
 * the previous one was sent, and is cut at sandbox_mcp_ui_stream_buffer
 * bytes; a tenant stream whose unsent messages pass that size, or a client
 * that reads nothing for send_timeout, is dropped (the browser reconnects
 * and resumes).  A comment every sandbox_mcp_ui_heartbeat keeps proxies
 * from closing an idle stream.  A worker that shuts down (reload) ends its
 * streams at once; the browser reconnects to a new worker and resumes.
 */

#include "ngx_http_sandbox_mcp_ui_sse.h"
#include "ngx_http_sandbox_mcp_request.h"
#include "ngx_http_sandbox_mcp_http.h"
#include "ngx_http_sandbox_mcp_metrics.h"
#include "ngx_http_sandbox_mcp_sse.h"
#include "ngx_http_sandbox_mcp_redis.h"
#include "ngx_http_sandbox_mcp_run.h"
#include "ngx_http_sandbox_mcp_scripts.h"
#include "ngx_http_sandbox_mcp_tool_events.h"
#include "ngx_http_sandbox_mcp_ui_http.h"
#include "ngx_http_sandbox_mcp_waiter.h"

#include "smcp_validate.h"


#define NGX_HTTP_SANDBOX_MCP_SSE_PAGE       100     /* events per read */
#define NGX_HTTP_SANDBOX_MCP_SSE_RETRY      1000    /* ms: Redis away */
#define NGX_HTTP_SANDBOX_MCP_SSE_TYPE_MAX   64


/*
 * A read that streams at the same place share (the same run, tenant, last
 * id and buffer size): one Redis round trip and one framing of the page
 * for all the watchers of a run that are up to date, however many.
 */
typedef struct {
    ngx_queue_t                         link;       /* in the worker's */
    ngx_queue_t                         readers;    /* the streams' */
    u_char                              run[SMCP_ID_LEN];
    u_char                              last[SMCP_STREAM_ID_MAX];
    size_t                              last_len;
    u_char                              tenant[SMCP_TENANT_MAX];
    size_t                              tenant_len;
    size_t                              limit;
} ngx_http_sandbox_mcp_sse_shared_t;


typedef struct {
    ngx_http_sandbox_mcp_ctx_t         *ctx;
    ngx_http_request_t                 *request;
    ngx_http_sandbox_mcp_watch_t        watch;
    ngx_http_sandbox_mcp_redis_cmd_t   *cmd;        /* a read in flight */
    ngx_http_sandbox_mcp_sse_shared_t  *shared;     /* ... or one shared */
    ngx_queue_t                         reader;     /* in its readers */

    ngx_str_t                           key_run;
    ngx_str_t                           key_events;
    u_char                              last[SMCP_STREAM_ID_MAX];
    size_t                              last_len;   /* 0: from the start */
    u_char                              start[SMCP_STREAM_ID_MAX + 1];

    /* bytes not yet given to nginx (malloc'd), and those given to it */
    u_char                             *pend;
    size_t                              pend_len;
    size_t                              pend_size;
    u_char                             *sending;
    ngx_buf_t                          *buf;
    ngx_chain_t                         out;

    ngx_event_t                         heartbeat;
    size_t                              limit;
    ngx_int_t                           rc;         /* ended in the
                                                       handler: its code */

    unsigned                            started:1;  /* headers sent */
    unsigned                            busy:1;     /* nginx holds bytes */
    unsigned                            again:1;    /* read once more */
    unsigned                            retry:1;    /* a read failed */
    unsigned                            ending:1;   /* end once sent */
    unsigned                            done:1;
    unsigned                            in_handler:1;
} ngx_http_sandbox_mcp_sse_t;


static void ngx_http_sandbox_mcp_sse_read(ngx_http_sandbox_mcp_sse_t *sse);
static void ngx_http_sandbox_mcp_sse_flush(ngx_http_sandbox_mcp_sse_t *sse);


static ngx_str_t  ngx_http_sandbox_mcp_sse_page_size = ngx_string("100");

/* the shared reads in flight (few: one per run and place) */
static ngx_queue_t  ngx_http_sandbox_mcp_sse_shared;
static ngx_uint_t   ngx_http_sandbox_mcp_sse_shared_init;


/* no more reading, waking or writing; the bytes nginx may still hold
 * stay until the request is freed */
static void
ngx_http_sandbox_mcp_sse_stop(ngx_http_sandbox_mcp_sse_t *sse)
{
    sse->done = 1;

    ngx_http_sandbox_mcp_waiter_unwatch(&sse->watch);

    if (sse->shared) {
        ngx_queue_remove(&sse->reader);
        sse->shared = NULL;
    }

    if (sse->cmd) {
        ngx_http_sandbox_mcp_redis_cancel(sse->cmd);
        sse->cmd = NULL;
    }

    if (sse->heartbeat.timer_set) {
        ngx_del_timer(&sse->heartbeat);
    }

    if (sse->pend) {
        ngx_free(sse->pend);
        sse->pend = NULL;
    }
}


static void
ngx_http_sandbox_mcp_sse_cleanup(void *data)
{
    ngx_http_sandbox_mcp_sse_t *sse = data;

    ngx_http_sandbox_mcp_metrics_stream(NGX_HTTP_SANDBOX_MCP_STREAM_DASHBOARD,
                                        -1);
    ngx_http_sandbox_mcp_sse_stop(sse);

    if (sse->sending) {
        ngx_free(sse->sending);
        sse->sending = NULL;
    }
}


/* the stream is over: the last chunk (ok) or the connection closed */
static void
ngx_http_sandbox_mcp_sse_end(ngx_http_sandbox_mcp_sse_t *sse, ngx_int_t rc)
{
    ngx_http_request_t  *r;

    if (sse->done) {
        return;
    }

    r = sse->request;

    ngx_http_sandbox_mcp_sse_stop(sse);

    if (rc == NGX_OK && sse->started) {
        rc = ngx_http_send_special(r, NGX_HTTP_LAST);
    }

    r->connection->idle = 0;

    if (sse->in_handler) {
        /* the content handler returns it: nginx finalizes */
        sse->rc = rc;
        return;
    }

    ngx_http_sandbox_mcp_finalize(sse->ctx, rc);
}


/* bytes for the client, kept until nginx can take them */
static ngx_int_t
ngx_http_sandbox_mcp_sse_append(ngx_http_sandbox_mcp_sse_t *sse,
    const void *data, size_t len)
{
    u_char  *p;
    size_t   size;

    if (sse->pend_len + len > sse->pend_size) {
        size = ngx_max(sse->pend_len + len, 2 * sse->pend_size);
        size = ngx_max(size, 1024);

        p = ngx_alloc(size, sse->request->connection->log);
        if (p == NULL) {
            return NGX_ERROR;
        }

        if (sse->pend) {
            ngx_memcpy(p, sse->pend, sse->pend_len);
            ngx_free(sse->pend);
        }

        sse->pend = p;
        sse->pend_size = size;
    }

    ngx_memcpy(sse->pend + sse->pend_len, data, len);
    sse->pend_len += len;

    return NGX_OK;
}


static ngx_int_t
ngx_http_sandbox_mcp_sse_send_header(ngx_http_sandbox_mcp_sse_t *sse)
{
    ngx_int_t  rc;

    static u_char  retry[] = "retry: 1000\n\n";

    if (ngx_http_sandbox_mcp_ui_headers(sse->request, 1) != NGX_OK) {
        return NGX_ERROR;
    }

    rc = ngx_http_sandbox_mcp_sse_head(sse->request);
    if (rc != NGX_OK) {
        /* NGX_DONE, a HEAD: the head was the answer */
        return rc;
    }

    sse->started = 1;

    return ngx_http_sandbox_mcp_sse_append(sse, retry, sizeof(retry) - 1);
}


static ngx_http_sandbox_mcp_sse_t *
ngx_http_sandbox_mcp_sse_of(ngx_http_request_t *r)
{
    ngx_http_sandbox_mcp_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_sandbox_mcp_module);

    return ctx->data;
}


/* nginx took what it could: what is left is sent by the write handler */
static void
ngx_http_sandbox_mcp_sse_write_handler(ngx_http_request_t *r)
{
    ngx_http_sandbox_mcp_sse_t  *sse;

    sse = ngx_http_sandbox_mcp_sse_of(r);

    if (r->connection->write->timedout) {
        /* the client reads nothing: dropped, it resumes when it comes */
        r->connection->timedout = 1;
        ngx_http_sandbox_mcp_sse_end(sse, NGX_HTTP_REQUEST_TIME_OUT);
        return;
    }

    ngx_http_sandbox_mcp_sse_flush(sse);
}


/* the client went away, or the worker shuts down (reload) */
static void
ngx_http_sandbox_mcp_sse_read_handler(ngx_http_request_t *r)
{
    ngx_http_sandbox_mcp_sse_t  *sse;

    sse = ngx_http_sandbox_mcp_sse_of(r);

    if (r->connection->close || ngx_exiting || ngx_terminate) {
        ngx_http_sandbox_mcp_sse_end(sse, NGX_OK);
        return;
    }

    ngx_http_test_reading(r);
}


/* hands the pending bytes to nginx once it holds none */
static void
ngx_http_sandbox_mcp_sse_flush(ngx_http_sandbox_mcp_sse_t *sse)
{
    ngx_int_t                  rc;
    ngx_connection_t          *c;
    ngx_http_request_t        *r;
    ngx_http_core_loc_conf_t  *clcf;

    r = sse->request;
    c = r->connection;

    if (sse->done) {
        return;
    }

    if (sse->busy) {
        rc = ngx_http_output_filter(r, NULL);

    } else if (sse->pend_len) {
        if (sse->sending) {
            ngx_free(sse->sending);
        }

        sse->sending = sse->pend;
        sse->pend = NULL;

        ngx_memzero(sse->buf, sizeof(ngx_buf_t));
        sse->buf->pos = sse->sending;
        sse->buf->last = sse->sending + sse->pend_len;
        sse->buf->memory = 1;
        sse->buf->flush = 1;

        sse->pend_len = 0;
        sse->pend_size = 0;

        sse->out.buf = sse->buf;
        sse->out.next = NULL;

        rc = ngx_http_output_filter(r, &sse->out);

    } else {
        rc = NGX_OK;
    }

    if (rc == NGX_ERROR) {
        ngx_http_sandbox_mcp_sse_end(sse, NGX_ERROR);
        return;
    }

    if (r->out || c->buffered || rc == NGX_AGAIN) {
        sse->busy = 1;

        if (!c->write->timer_set) {
            clcf = ngx_http_get_module_loc_conf(r, ngx_http_core_module);
            ngx_add_timer(c->write, clcf->send_timeout);
        }

        if (ngx_handle_write_event(c->write, 0) != NGX_OK) {
            ngx_http_sandbox_mcp_sse_end(sse, NGX_ERROR);
        }

        return;
    }

    sse->busy = 0;

    if (c->write->timer_set) {
        ngx_del_timer(c->write);
    }

    /* level-triggered methods (poll): not woken by a writable socket */
    if (ngx_handle_write_event(c->write, 0) != NGX_OK) {
        ngx_http_sandbox_mcp_sse_end(sse, NGX_ERROR);
        return;
    }

    if (sse->sending) {
        ngx_free(sse->sending);
        sse->sending = NULL;
    }

    if (sse->pend_len) {
        /* messages came while nginx held bytes */
        ngx_http_sandbox_mcp_sse_flush(sse);
        return;
    }

    if (sse->ending) {
        ngx_http_sandbox_mcp_sse_end(sse, NGX_OK);
        return;
    }

    if (sse->again) {
        ngx_http_sandbox_mcp_sse_read(sse);
    }
}


/* one event, framed: the type only when it is a plain word */
static ngx_int_t
ngx_http_sandbox_mcp_sse_event(ngx_http_sandbox_mcp_sse_t *sse,
    const char *id, size_t id_len, const char *type, const char *data)
{
    size_t       n;
    const char  *p;

    n = type ? ngx_strlen(type) : 0;

    for (p = type; p && *p; p++) {
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z')
              || (*p >= '0' && *p <= '9') || *p == '_' || *p == '-'
              || *p == '.' || *p == ':'))
        {
            n = 0;
            break;
        }
    }

    if (n == 0 || n > NGX_HTTP_SANDBOX_MCP_SSE_TYPE_MAX) {
        type = "unknown";
        n = sizeof("unknown") - 1;
    }

    if ((id && (ngx_http_sandbox_mcp_sse_append(sse, "id: ", 4) != NGX_OK
                || ngx_http_sandbox_mcp_sse_append(sse, id, id_len) != NGX_OK
                || ngx_http_sandbox_mcp_sse_append(sse, "\n", 1) != NGX_OK))
        || ngx_http_sandbox_mcp_sse_append(sse, "event: ", 7) != NGX_OK
        || ngx_http_sandbox_mcp_sse_append(sse, type, n) != NGX_OK
        || ngx_http_sandbox_mcp_sse_append(sse, "\ndata: ", 7) != NGX_OK
        || ngx_http_sandbox_mcp_sse_append(sse, data, ngx_strlen(data))
           != NGX_OK
        || ngx_http_sandbox_mcp_sse_append(sse, "\n\n", 2) != NGX_OK)
    {
        return NGX_ERROR;
    }

    return NGX_OK;
}


/* a page of events: framed until the buffer's size; the id of the last
 * one framed is where the next read starts */
static ngx_int_t
ngx_http_sandbox_mcp_sse_page(ngx_http_sandbox_mcp_sse_t *sse,
    redisReply *page)
{
    char        *data;
    size_t       i;
    json_t      *ev;
    ngx_int_t    rc;
    redisReply  *e;

    for (i = 0; i < page->elements; i++) {
        e = page->element[i];

        if (sse->pend_len >= sse->limit) {
            /* the rest after this part is sent */
            sse->again = 1;
            return NGX_OK;
        }

        ev = ngx_http_sandbox_mcp_event_object(e);

        if (ev == NULL
            || !smcp_valid_stream_id(e->element[0]->str,
                                     e->element[0]->len))
        {
            json_decref(ev);
            continue;
        }

        data = json_dumps(ev, JSON_COMPACT);

        rc = data ? ngx_http_sandbox_mcp_sse_event(sse, e->element[0]->str,
                                 e->element[0]->len,
                                 json_string_value(json_object_get(ev,
                                                                   "type")),
                                 data)
                  : NGX_ERROR;

        free(data);
        json_decref(ev);

        if (rc != NGX_OK) {
            return NGX_ERROR;
        }

        ngx_memcpy(sse->last, e->element[0]->str, e->element[0]->len);
        sse->last_len = e->element[0]->len;
    }

    if (page->elements >= NGX_HTTP_SANDBOX_MCP_SSE_PAGE) {
        sse->again = 1;
    }

    return NGX_OK;
}


static ngx_uint_t
ngx_http_sandbox_mcp_sse_ended(redisReply *status)
{
    ngx_uint_t  i;

    static const char  *ended[] = {
        SMCP_STATUS_COMPLETED, SMCP_STATUS_FAILED, SMCP_STATUS_CANCELLED
    };

    for (i = 0; i < sizeof(ended) / sizeof(ended[0]); i++) {
        if (status->len == ngx_strlen(ended[i])
            && ngx_strncmp(status->str, ended[i], status->len) == 0)
        {
            return 1;
        }
    }

    return 0;
}


/* {status, XRANGE} (its shape checked): the page framed into the pending
 * bytes, the end after it when the run has ended; NGX_ERROR */
static ngx_int_t
ngx_http_sandbox_mcp_sse_frame(ngx_http_sandbox_mcp_sse_t *sse,
    redisReply *reply)
{
    if (ngx_http_sandbox_mcp_sse_page(sse, reply->element[1]) != NGX_OK) {
        return NGX_ERROR;
    }

    if (!sse->again && ngx_http_sandbox_mcp_sse_ended(reply->element[0])) {
        /* ended, and everything was read: said once sent */
        if (ngx_http_sandbox_mcp_sse_event(sse, NULL, 0, "end", "{}")
            != NGX_OK)
        {
            return NGX_ERROR;
        }

        sse->ending = 1;
        ngx_http_sandbox_mcp_waiter_unwatch(&sse->watch);
    }

    return NGX_OK;
}


static ngx_uint_t
ngx_http_sandbox_mcp_sse_reply_ok(redisReply *reply)
{
    return reply->type == REDIS_REPLY_ARRAY && reply->elements == 2
           && reply->element[0]->type == REDIS_REPLY_STRING
           && reply->element[1]->type == REDIS_REPLY_ARRAY;
}


/* {status, XRANGE}, or nil: not this tenant's run */
static void
ngx_http_sandbox_mcp_sse_reply(void *data, redisReply *reply)
{
    ngx_http_sandbox_mcp_sse_t *sse = data;

    ngx_int_t            rc;
    ngx_http_request_t  *r;

    sse->cmd = NULL;
    r = sse->request;

    if (reply == NULL || reply->type == REDIS_REPLY_ERROR) {
        if (reply) {
            ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                          "sandbox_mcp: redis: %s", reply->str);
        }

        if (!sse->started) {
            ngx_http_sandbox_mcp_sse_end(sse,
                    ngx_http_sandbox_mcp_ui_send_json(r,
                                 NGX_HTTP_SERVICE_UNAVAILABLE, NULL,
                                 ngx_http_sandbox_mcp_redis_unavailable()));
            return;
        }

        /* tried again soon: the heartbeat's timer */
        sse->retry = 1;
        ngx_add_timer(&sse->heartbeat, NGX_HTTP_SANDBOX_MCP_SSE_RETRY);
        return;
    }

    if (!ngx_http_sandbox_mcp_sse_reply_ok(reply)) {
        if (!sse->started) {
            ngx_http_sandbox_mcp_sse_end(sse,
                    ngx_http_sandbox_mcp_ui_send_json(r, NGX_HTTP_NOT_FOUND,
                                                      NULL, "run not found"));
            return;
        }

        /* the run went away (retention) */
        sse->ending = 1;
        ngx_http_sandbox_mcp_sse_flush(sse);
        return;
    }

    if (!sse->started) {
        rc = ngx_http_sandbox_mcp_sse_send_header(sse);

        if (rc != NGX_OK) {
            ngx_http_sandbox_mcp_sse_end(sse, rc == NGX_DONE ? NGX_OK
                                                             : NGX_ERROR);
            return;
        }
    }

    if (ngx_http_sandbox_mcp_sse_frame(sse, reply) != NGX_OK) {
        ngx_http_sandbox_mcp_sse_end(sse, NGX_ERROR);
        return;
    }

    ngx_http_sandbox_mcp_sse_flush(sse);
}


/*
 * A shared read's reply: framed once, by the first stream; the others
 * (which had nothing pending either: a read starts only then) get the same
 * bytes and the same place.  Anything but a page: each stream as alone.
 */
static void
ngx_http_sandbox_mcp_sse_shared_reply(void *data, redisReply *reply)
{
    ngx_http_sandbox_mcp_sse_shared_t *sh = data;

    ngx_queue_t                 *q;
    ngx_http_sandbox_mcp_sse_t  *sse, *first;

    ngx_queue_remove(&sh->link);

    first = NULL;

    while (!ngx_queue_empty(&sh->readers)) {
        q = ngx_queue_head(&sh->readers);
        ngx_queue_remove(q);

        sse = ngx_queue_data(q, ngx_http_sandbox_mcp_sse_t, reader);
        sse->shared = NULL;

        if (reply == NULL || reply->type == REDIS_REPLY_ERROR
            || !ngx_http_sandbox_mcp_sse_reply_ok(reply))
        {
            ngx_http_sandbox_mcp_sse_reply(sse, reply);
            continue;
        }

        if (first == NULL) {
            if (ngx_http_sandbox_mcp_sse_frame(sse, reply) != NGX_OK) {
                ngx_http_sandbox_mcp_sse_end(sse, NGX_ERROR);
                continue;
            }

            first = sse;
            continue;
        }

        ngx_memcpy(sse->last, first->last, first->last_len);
        sse->last_len = first->last_len;
        sse->again = first->again;

        if (ngx_http_sandbox_mcp_sse_append(sse, first->pend, first->pend_len)
            != NGX_OK)
        {
            ngx_http_sandbox_mcp_sse_end(sse, NGX_ERROR);
            continue;
        }

        if (first->ending) {
            sse->ending = 1;
            ngx_http_sandbox_mcp_waiter_unwatch(&sse->watch);
        }

        ngx_http_sandbox_mcp_sse_flush(sse);
    }

    if (first) {
        ngx_http_sandbox_mcp_sse_flush(first);
    }

    ngx_free(sh);
}


/* a started stream reads with the others at its place, or starts such a
 * read; NGX_DECLINED: it reads alone */
static ngx_int_t
ngx_http_sandbox_mcp_sse_share(ngx_http_sandbox_mcp_sse_t *sse,
    ngx_str_t *argv)
{
    ngx_queue_t                        *q;
    ngx_http_sandbox_mcp_sse_shared_t  *sh;

    if (!sse->started || sse->watch.id.len != SMCP_ID_LEN
        || sse->ctx->tenant.len > SMCP_TENANT_MAX)
    {
        return NGX_DECLINED;
    }

    if (!ngx_http_sandbox_mcp_sse_shared_init) {
        ngx_queue_init(&ngx_http_sandbox_mcp_sse_shared);
        ngx_http_sandbox_mcp_sse_shared_init = 1;
    }

    for (q = ngx_queue_head(&ngx_http_sandbox_mcp_sse_shared);
         q != ngx_queue_sentinel(&ngx_http_sandbox_mcp_sse_shared);
         q = ngx_queue_next(q))
    {
        sh = ngx_queue_data(q, ngx_http_sandbox_mcp_sse_shared_t, link);

        if (sh->limit == sse->limit && sh->last_len == sse->last_len
            && sh->tenant_len == sse->ctx->tenant.len
            && ngx_memcmp(sh->run, sse->watch.id.data, SMCP_ID_LEN) == 0
            && ngx_memcmp(sh->last, sse->last, sse->last_len) == 0
            && ngx_memcmp(sh->tenant, sse->ctx->tenant.data,
                          sh->tenant_len) == 0)
        {
            goto join;
        }
    }

    sh = ngx_alloc(sizeof(ngx_http_sandbox_mcp_sse_shared_t),
                   sse->request->connection->log);
    if (sh == NULL) {
        return NGX_DECLINED;
    }

    ngx_memcpy(sh->run, sse->watch.id.data, SMCP_ID_LEN);
    ngx_memcpy(sh->last, sse->last, sse->last_len);
    sh->last_len = sse->last_len;
    ngx_memcpy(sh->tenant, sse->ctx->tenant.data, sse->ctx->tenant.len);
    sh->tenant_len = sse->ctx->tenant.len;
    sh->limit = sse->limit;
    ngx_queue_init(&sh->readers);

    /* the reply frees it, also when every stream went away meanwhile */
    if (ngx_http_sandbox_mcp_redis_script(
                               &ngx_http_sandbox_mcp_script_ui_events,
                               ngx_http_sandbox_mcp_sse_shared_reply, sh, 2, 5,
                               argv)
        == NULL)
    {
        ngx_free(sh);
        return NGX_DECLINED;
    }

    ngx_queue_insert_tail(&ngx_http_sandbox_mcp_sse_shared, &sh->link);

join:

    ngx_queue_insert_tail(&sh->readers, &sse->reader);
    sse->shared = sh;

    return NGX_OK;
}


static void
ngx_http_sandbox_mcp_sse_read(ngx_http_sandbox_mcp_sse_t *sse)
{
    u_char     *p;
    ngx_str_t   argv[5];

    if (sse->done || sse->ending) {
        return;
    }

    if (sse->cmd || sse->shared || sse->busy) {
        /* after this read, or once the client took the last page */
        sse->again = 1;
        return;
    }

    sse->again = 0;
    sse->retry = 0;

    /* no allocation per read: a long stream must not grow its pool */

    argv[0] = sse->key_run;
    argv[1] = sse->key_events;
    argv[2] = sse->ctx->tenant;

    if (sse->last_len) {
        p = sse->start;
        *p++ = '(';
        p = ngx_cpymem(p, sse->last, sse->last_len);
        argv[3].data = sse->start;
        argv[3].len = p - sse->start;

    } else {
        ngx_str_set(&argv[3], "-");
    }

    argv[4] = ngx_http_sandbox_mcp_sse_page_size;

    if (ngx_http_sandbox_mcp_sse_share(sse, argv) == NGX_OK) {
        return;
    }

    sse->cmd = ngx_http_sandbox_mcp_redis_script(
                                  &ngx_http_sandbox_mcp_script_ui_events,
                                  ngx_http_sandbox_mcp_sse_reply, sse, 2, 5,
                                  argv);

    if (sse->cmd == NULL) {
        ngx_http_sandbox_mcp_sse_reply(sse, NULL);
    }
}


/* the run's channel said something, or the connection came back */
static void
ngx_http_sandbox_mcp_sse_wake(ngx_http_sandbox_mcp_watch_t *w,
    ngx_str_t *message)
{
    ngx_http_sandbox_mcp_sse_read(w->data);
}


/* the tenant's channel: "<runId> <status>" */
static void
ngx_http_sandbox_mcp_sse_tenant_wake(ngx_http_sandbox_mcp_watch_t *w,
    ngx_str_t *message)
{
    u_char                      *sp;
    json_t                      *j;
    char                        *data;
    ngx_int_t                    rc;
    ngx_str_t                    id, st;
    ngx_http_sandbox_mcp_sse_t  *sse;

    sse = w->data;

    if (message == NULL || sse->done) {
        /* nothing to re-read: a missed status shows with the next */
        return;
    }

    sp = ngx_strlchr(message->data, message->data + message->len, ' ');
    if (sp == NULL) {
        return;
    }

    id.data = message->data;
    id.len = sp - message->data;
    st.data = sp + 1;
    st.len = message->data + message->len - st.data;

    if (!smcp_valid_id((char *) id.data, id.len, SMCP_RUN_ID_PREFIX)
        || st.len == 0 || st.len > 16)
    {
        return;
    }

    for (sp = st.data; sp < st.data + st.len; sp++) {
        if (*sp < 'a' || *sp > 'z') {
            return;
        }
    }

    j = json_pack("{s:s%, s:s%}", "runId", (char *) id.data, id.len,
                  "status", (char *) st.data, st.len);
    data = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);

    if (data == NULL) {
        ngx_http_sandbox_mcp_sse_end(sse, NGX_ERROR);
        return;
    }

    if (sse->pend_len + ngx_strlen(data) > sse->limit) {
        /* the client reads too slowly: dropped (it reconnects) */
        free(data);
        ngx_log_error(NGX_LOG_INFO, sse->request->connection->log, 0,
                      "sandbox_mcp: ui stream dropped: the client reads "
                      "too slowly");
        ngx_http_sandbox_mcp_sse_end(sse, NGX_ERROR);
        return;
    }

    rc = ngx_http_sandbox_mcp_sse_event(sse, NULL, 0, "run", data);
    free(data);

    if (rc != NGX_OK) {
        ngx_http_sandbox_mcp_sse_end(sse, NGX_ERROR);
        return;
    }

    ngx_http_sandbox_mcp_sse_flush(sse);
}


/* a comment now and then; a failed read tried again */
static void
ngx_http_sandbox_mcp_sse_heartbeat(ngx_event_t *ev)
{
    ngx_http_sandbox_mcp_sse_t  *sse;
    ngx_http_sandbox_mcp_loc_conf_t  *lcf;

    sse = ev->data;

    if (sse->done) {
        return;
    }

    lcf = ngx_http_get_module_loc_conf(sse->request,
                                       ngx_http_sandbox_mcp_module);

    if (ngx_exiting) {
        /* a stream begun after the shutdown's close of idle connections
         * (a kept-alive connection): it ends here, the browser resumes */
        ngx_http_sandbox_mcp_sse_end(sse, NGX_OK);
        return;
    }

    if (sse->retry) {
        ngx_http_sandbox_mcp_sse_read(sse);

    } else if (sse->started && !sse->busy && sse->pend_len == 0) {
        if (ngx_http_sandbox_mcp_sse_append(sse, ":\n\n", 3) != NGX_OK) {
            ngx_http_sandbox_mcp_sse_end(sse, NGX_ERROR);
            return;
        }

        ngx_http_sandbox_mcp_sse_flush(sse);
    }

    if (!sse->done && !sse->heartbeat.timer_set) {
        ngx_add_timer(&sse->heartbeat, lcf->ui_heartbeat);
    }
}


static ngx_http_sandbox_mcp_sse_t *
ngx_http_sandbox_mcp_sse_create(ngx_http_sandbox_mcp_ctx_t *ctx)
{
    ngx_http_request_t               *r;
    ngx_pool_cleanup_t               *cln;
    ngx_http_sandbox_mcp_sse_t       *sse;
    ngx_http_sandbox_mcp_loc_conf_t  *lcf;

    r = ctx->request;

    if (ngx_http_discard_request_body(r) != NGX_OK) {
        return NULL;
    }

    sse = ngx_pcalloc(r->pool, sizeof(ngx_http_sandbox_mcp_sse_t));
    if (sse == NULL) {
        return NULL;
    }

    sse->buf = ngx_calloc_buf(r->pool);
    if (sse->buf == NULL) {
        return NULL;
    }

    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (cln == NULL) {
        return NULL;
    }

    cln->handler = ngx_http_sandbox_mcp_sse_cleanup;
    cln->data = sse;
    ngx_http_sandbox_mcp_metrics_stream(NGX_HTTP_SANDBOX_MCP_STREAM_DASHBOARD,
                                        1);

    lcf = ngx_http_get_module_loc_conf(r, ngx_http_sandbox_mcp_module);

    sse->ctx = ctx;
    sse->request = r;
    sse->limit = lcf->ui_stream_buffer;
    sse->watch.data = sse;

    ctx->data = sse;

    ngx_http_sandbox_mcp_sse_keep(r, &sse->heartbeat,
                                  ngx_http_sandbox_mcp_sse_heartbeat, sse,
                                  lcf->ui_heartbeat,
                                  ngx_http_sandbox_mcp_sse_read_handler,
                                  ngx_http_sandbox_mcp_sse_write_handler);

    return sse;
}


ngx_int_t
ngx_http_sandbox_mcp_ui_run_events(ngx_http_sandbox_mcp_ctx_t *ctx,
    ngx_str_t *run_id)
{
    ngx_table_elt_t             *h;
    ngx_http_request_t          *r;
    ngx_http_sandbox_mcp_sse_t  *sse;

    r = ctx->request;

    sse = ngx_http_sandbox_mcp_sse_create(ctx);
    if (sse == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    h = ngx_http_sandbox_mcp_header(r, "Last-Event-ID",
                                    sizeof("Last-Event-ID") - 1);

    /* an id that is not one is ignored: everything is sent */
    if (h && smcp_valid_stream_id((char *) h->value.data, h->value.len)) {
        ngx_memcpy(sse->last, h->value.data, h->value.len);
        sse->last_len = h->value.len;
    }

    sse->watch.id = *run_id;
    sse->watch.wake = ngx_http_sandbox_mcp_sse_wake;

    if (ngx_http_sandbox_mcp_redis_key(r->pool, &sse->key_run, SMCP_KEY_RUN,
                                       run_id)
        != NGX_OK
        || ngx_http_sandbox_mcp_redis_key(r->pool, &sse->key_events,
                                          SMCP_KEY_RUN_EVENTS, run_id)
           != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    /* listening before the first read: nothing falls between */
    ngx_http_sandbox_mcp_waiter_watch(&sse->watch);

    sse->in_handler = 1;
    ngx_http_sandbox_mcp_sse_read(sse);
    sse->in_handler = 0;

    return sse->done ? sse->rc : NGX_DONE;
}


ngx_int_t
ngx_http_sandbox_mcp_ui_tenant_stream(ngx_http_sandbox_mcp_ctx_t *ctx)
{
    ngx_http_sandbox_mcp_sse_t  *sse;

    sse = ngx_http_sandbox_mcp_sse_create(ctx);
    if (sse == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    sse->watch.id = ctx->tenant;
    sse->watch.tenant = 1;
    sse->watch.wake = ngx_http_sandbox_mcp_sse_tenant_wake;

    sse->in_handler = 1;

    switch (ngx_http_sandbox_mcp_sse_send_header(sse)) {

    case NGX_OK:
        ngx_http_sandbox_mcp_waiter_watch(&sse->watch);
        ngx_http_sandbox_mcp_sse_flush(sse);
        break;

    case NGX_DONE:
        ngx_http_sandbox_mcp_sse_end(sse, NGX_OK);
        break;

    default:
        ngx_http_sandbox_mcp_sse_end(sse, NGX_ERROR);
    }

    sse->in_handler = 0;

    return sse->done ? sse->rc : NGX_DONE;
}

