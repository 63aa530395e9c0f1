/*
 * Waiters and watchers, in buckets by run id (watchers of a tenant: by
 * tenant).  Each worker's pub/sub connection PSUBSCRIBEs to <prefix>run:*
 * and <prefix>tenant:*; the Redis layer hands each message to the
 * listeners here.
 */

#include "ngx_http_sandbox_mcp_waiter.h"
#include "ngx_http_sandbox_mcp_redis.h"
#include "ngx_http_sandbox_mcp_defaults.h"


static ngx_queue_t  ngx_http_sandbox_mcp_waiters[
                        NGX_HTTP_SANDBOX_MCP_WAITER_BUCKETS];

static ngx_queue_t  ngx_http_sandbox_mcp_watchers[
                        NGX_HTTP_SANDBOX_MCP_WAITER_BUCKETS];
static ngx_queue_t  ngx_http_sandbox_mcp_tenant_watchers[
                        NGX_HTTP_SANDBOX_MCP_WAITER_BUCKETS];

/* the channels' patterns, <prefix>run:* and <prefix>tenant:* (the run id
 * or tenant follows the byte before the *) */
static ngx_str_t    ngx_http_sandbox_mcp_waiter_pattern;
static ngx_str_t    ngx_http_sandbox_mcp_tenant_pattern;

/* waiters woken after a connection loss, on the next turn of the event
 * loop (not from inside hiredis): they fail fast now instead of at the end
 * of their wait, or catch pings missed while unsubscribed */
static ngx_event_t  ngx_http_sandbox_mcp_wake_event;


static ngx_uint_t
ngx_http_sandbox_mcp_waiter_hash(ngx_str_t *id)
{
    return ngx_crc32_short(id->data, id->len)
           % NGX_HTTP_SANDBOX_MCP_WAITER_BUCKETS;
}


static ngx_queue_t *
ngx_http_sandbox_mcp_waiter_bucket(ngx_str_t *run_id)
{
    return &ngx_http_sandbox_mcp_waiters[
                                   ngx_http_sandbox_mcp_waiter_hash(run_id)];
}


static ngx_queue_t *
ngx_http_sandbox_mcp_watch_bucket(ngx_str_t *id, ngx_uint_t tenant)
{
    return tenant ? &ngx_http_sandbox_mcp_tenant_watchers[
                                        ngx_http_sandbox_mcp_waiter_hash(id)]
                  : &ngx_http_sandbox_mcp_watchers[
                                        ngx_http_sandbox_mcp_waiter_hash(id)];
}


void
ngx_http_sandbox_mcp_waiter_watch(ngx_http_sandbox_mcp_watch_t *w)
{
    if (!w->watching) {
        w->watching = 1;
        ngx_queue_insert_tail(ngx_http_sandbox_mcp_watch_bucket(&w->id,
                                                                w->tenant),
                              &w->queue);
    }
}


void
ngx_http_sandbox_mcp_waiter_unwatch(ngx_http_sandbox_mcp_watch_t *w)
{
    if (w->watching) {
        ngx_queue_remove(&w->queue);
        w->watching = 0;
    }
}


/* the watchers of id; message NULL: all of them, to re-read */
static void
ngx_http_sandbox_mcp_watch_event(ngx_queue_t *bucket, ngx_str_t *id,
    ngx_str_t *message)
{
    ngx_queue_t                   *q, *next;
    ngx_http_sandbox_mcp_watch_t  *w;

    for (q = ngx_queue_head(bucket);
         q != ngx_queue_sentinel(bucket);
         q = next)
    {
        /* waking may end the stream and unlink it */
        next = ngx_queue_next(q);

        w = ngx_queue_data(q, ngx_http_sandbox_mcp_watch_t, queue);

        if (id == NULL
            || (w->id.len == id->len
                && ngx_strncmp(w->id.data, id->data, id->len) == 0))
        {
            w->wake(w, message);
        }
    }
}


static void
ngx_http_sandbox_mcp_waiter_expired(ngx_event_t *ev)
{
    ngx_http_sandbox_mcp_call_t *call = ev->data;

    call->expired = 1;
    call->wake(call);
}


void
ngx_http_sandbox_mcp_waiter_add(ngx_http_sandbox_mcp_call_t *call,
    ngx_msec_t timeout)
{
    call->waiting = 1;
    ngx_queue_insert_tail(ngx_http_sandbox_mcp_waiter_bucket(&call->run_id),
                          &call->waiter);

    call->wait.handler = ngx_http_sandbox_mcp_waiter_expired;
    call->wait.data = call;
    call->wait.log = call->ctx->request->connection->log;

    ngx_add_timer(&call->wait, timeout);
}


void
ngx_http_sandbox_mcp_waiter_remove(ngx_http_sandbox_mcp_call_t *call)
{
    if (call->waiting) {
        ngx_queue_remove(&call->waiter);
        call->waiting = 0;
    }

    if (call->wait.timer_set) {
        ngx_del_timer(&call->wait);
    }
}


static void
ngx_http_sandbox_mcp_waiter_run_event(ngx_str_t *run_id, ngx_str_t *message)
{
    ngx_queue_t                  *bucket, *q, *next;
    ngx_http_sandbox_mcp_call_t  *call;

    bucket = ngx_http_sandbox_mcp_waiter_bucket(run_id);

    for (q = ngx_queue_head(bucket);
         q != ngx_queue_sentinel(bucket);
         q = next)
    {
        /* waking may finish the call and unlink it */
        next = ngx_queue_next(q);

        call = ngx_queue_data(q, ngx_http_sandbox_mcp_call_t, waiter);

        if (call->run_id.len == run_id->len
            && ngx_strncmp(call->run_id.data, run_id->data, run_id->len) == 0)
        {
            call->wake(call);
        }
    }

    ngx_http_sandbox_mcp_watch_event(
                       ngx_http_sandbox_mcp_watch_bucket(run_id, 0), run_id,
                       message);
}


static void
ngx_http_sandbox_mcp_waiter_wake_all(void)
{
    ngx_uint_t                    i;
    ngx_queue_t                  *bucket, *q, *next;
    ngx_http_sandbox_mcp_call_t  *call;

    for (i = 0; i < NGX_HTTP_SANDBOX_MCP_WAITER_BUCKETS; i++) {
        bucket = &ngx_http_sandbox_mcp_waiters[i];

        for (q = ngx_queue_head(bucket);
             q != ngx_queue_sentinel(bucket);
             q = next)
        {
            next = ngx_queue_next(q);
            call = ngx_queue_data(q, ngx_http_sandbox_mcp_call_t, waiter);
            call->wake(call);
        }

        ngx_http_sandbox_mcp_watch_event(&ngx_http_sandbox_mcp_watchers[i],
                                         NULL, NULL);
    }
}


static void
ngx_http_sandbox_mcp_waiter_wake_handler(ngx_event_t *ev)
{
    ngx_http_sandbox_mcp_waiter_wake_all();
}


static void
ngx_http_sandbox_mcp_waiter_listener(ngx_http_sandbox_mcp_redis_event_e ev,
    ngx_str_t *channel, ngx_str_t *message)
{
    size_t     skip;
    ngx_str_t  id;

    switch (ev) {

    case NGX_HTTP_SANDBOX_MCP_REDIS_MESSAGE:
        /* the channel <prefix>run:<id> */
        skip = ngx_http_sandbox_mcp_waiter_pattern.len - 1;

        if (channel->len <= skip) {
            return;
        }

        id.data = channel->data + skip;
        id.len = channel->len - skip;

        ngx_http_sandbox_mcp_waiter_run_event(&id, message);
        break;

    case NGX_HTTP_SANDBOX_MCP_REDIS_SUBSCRIBED:
        /* pings may have been missed while unsubscribed: re-check */
        ngx_http_sandbox_mcp_waiter_wake_all();
        break;

    case NGX_HTTP_SANDBOX_MCP_REDIS_LOST:
    case NGX_HTTP_SANDBOX_MCP_REDIS_UNSUBSCRIBED:
        if (!ngx_http_sandbox_mcp_wake_event.posted) {
            ngx_post_event(&ngx_http_sandbox_mcp_wake_event,
                           &ngx_posted_events);
        }

        break;

    default: /* NGX_HTTP_SANDBOX_MCP_REDIS_READY */
        break;
    }
}


/* <prefix>tenant:<tenant>: "<runId> <status>" for the tenant's watchers
 * (they have nothing to re-read: a status missed shows on the next) */
static void
ngx_http_sandbox_mcp_waiter_tenant_listener(
    ngx_http_sandbox_mcp_redis_event_e ev, ngx_str_t *channel,
    ngx_str_t *message)
{
    size_t     skip;
    ngx_str_t  id;

    if (ev != NGX_HTTP_SANDBOX_MCP_REDIS_MESSAGE) {
        return;
    }

    skip = ngx_http_sandbox_mcp_tenant_pattern.len - 1;

    if (channel->len <= skip) {
        return;
    }

    id.data = channel->data + skip;
    id.len = channel->len - skip;

    ngx_http_sandbox_mcp_watch_event(ngx_http_sandbox_mcp_watch_bucket(&id, 1),
                                     &id, message);
}


ngx_int_t
ngx_http_sandbox_mcp_waiter_init_worker(ngx_cycle_t *cycle)
{
    ngx_str_t   any;
    ngx_uint_t  i;

    for (i = 0; i < NGX_HTTP_SANDBOX_MCP_WAITER_BUCKETS; i++) {
        ngx_queue_init(&ngx_http_sandbox_mcp_waiters[i]);
        ngx_queue_init(&ngx_http_sandbox_mcp_watchers[i]);
        ngx_queue_init(&ngx_http_sandbox_mcp_tenant_watchers[i]);
    }

    ngx_memzero(&ngx_http_sandbox_mcp_wake_event, sizeof(ngx_event_t));
    ngx_http_sandbox_mcp_wake_event.handler =
                                     ngx_http_sandbox_mcp_waiter_wake_handler;
    ngx_http_sandbox_mcp_wake_event.log = cycle->log;

    ngx_str_set(&any, "*");

    if (ngx_http_sandbox_mcp_redis_key(cycle->pool,
                                       &ngx_http_sandbox_mcp_waiter_pattern,
                                       SMCP_CHAN_RUN, &any)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    if (ngx_http_sandbox_mcp_redis_key(cycle->pool,
                                       &ngx_http_sandbox_mcp_tenant_pattern,
                                       SMCP_CHAN_TENANT, &any)
        != NGX_OK
        || ngx_http_sandbox_mcp_redis_listen(
                                  &ngx_http_sandbox_mcp_tenant_pattern, 1,
                                  ngx_http_sandbox_mcp_waiter_tenant_listener)
           != NGX_OK)
    {
        return NGX_ERROR;
    }

    return ngx_http_sandbox_mcp_redis_listen(
                                       &ngx_http_sandbox_mcp_waiter_pattern, 1,
                                       ngx_http_sandbox_mcp_waiter_listener);
}


void
ngx_http_sandbox_mcp_waiter_exit_worker(ngx_cycle_t *cycle)
{
    if (ngx_http_sandbox_mcp_wake_event.posted) {
        ngx_delete_posted_event(&ngx_http_sandbox_mcp_wake_event);
    }
}
