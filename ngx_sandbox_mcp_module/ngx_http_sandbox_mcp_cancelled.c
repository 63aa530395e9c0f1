/*
 * notifications/cancelled {requestId}: PUBLISHed (the requestId as
 * compact JSON) on the session's channel <prefix>run:mcp:{sid}, which
 * every worker hears through its run:* pattern.  A waiting call of that
 * session watches the channel; one whose id it names stops waiting (its
 * read in flight dropped, the run untouched) and its HTTP answer ends
 * with no JSON-RPC response: an empty event stream (the client gave the
 * request up; the stream of a call that was sending progress just ends).
 */

#include "ngx_http_sandbox_mcp_cancelled.h"
#include "ngx_http_sandbox_mcp_request.h"
#include "ngx_http_sandbox_mcp_sse.h"
#include "ngx_http_sandbox_mcp_redis.h"
#include "ngx_http_sandbox_mcp_waiter.h"


#define NGX_HTTP_SANDBOX_MCP_REQUEST_ID_MAX  256     /* a string id */


typedef struct {
    ngx_http_sandbox_mcp_watch_t   watch;
    ngx_http_sandbox_mcp_call_t   *call;
    ngx_str_t                      id;          /* the call's id, JSON */
} ngx_http_sandbox_mcp_cancelled_t;


/* the id as compact JSON in the pool, or NULL (not an id we take) */
static u_char *
ngx_http_sandbox_mcp_request_id(ngx_pool_t *pool, json_t *id, size_t *len)
{
    char    *s;
    u_char  *p;

    if (!json_is_integer(id)
        && !(json_is_string(id)
             && json_string_length(id) <= NGX_HTTP_SANDBOX_MCP_REQUEST_ID_MAX))
    {
        return NULL;
    }

    s = json_dumps(id, JSON_ENCODE_ANY | JSON_COMPACT);
    if (s == NULL) {
        return NULL;
    }

    *len = ngx_strlen(s);
    p = ngx_pnalloc(pool, *len);

    if (p) {
        ngx_memcpy(p, s, *len);
    }

    free(s);

    return p;
}


static ngx_int_t
ngx_http_sandbox_mcp_channel(ngx_pool_t *pool, ngx_str_t *key,
    ngx_http_sandbox_mcp_ctx_t *ctx)
{
    return ngx_http_sandbox_mcp_redis_key(pool, key, SMCP_CHAN_MCP_CANCELLED,
                                          &ctx->session_id);
}


static void
ngx_http_sandbox_mcp_cancelled_sent(void *data, redisReply *reply)
{
    /* fire and forget: a lost notification leaves the wait as it was */
}


void
ngx_http_sandbox_mcp_cancelled_notify(ngx_http_sandbox_mcp_ctx_t *ctx,
    json_t *params)
{
    ngx_str_t            argv[3];
    ngx_http_request_t  *r;

    r = ctx->request;

    argv[2].data = ngx_http_sandbox_mcp_request_id(r->pool,
                                     json_object_get(params, "requestId"),
                                     &argv[2].len);

    if (argv[2].data == NULL
        || ngx_http_sandbox_mcp_channel(r->pool, &argv[1], ctx) != NGX_OK)
    {
        return;
    }

    ngx_str_set(&argv[0], "PUBLISH");

    (void) ngx_http_sandbox_mcp_redis_command(
                         ngx_http_sandbox_mcp_cancelled_sent, NULL, 3, argv);
}


static void
ngx_http_sandbox_mcp_cancelled_cleanup(void *data)
{
    ngx_http_sandbox_mcp_cancelled_t *cw = data;

    ngx_http_sandbox_mcp_waiter_unwatch(&cw->watch);
}


static void
ngx_http_sandbox_mcp_cancelled_wake(ngx_http_sandbox_mcp_watch_t *w,
    ngx_str_t *message)
{
    ngx_http_sandbox_mcp_cancelled_t *cw = w->data;

    ngx_http_sandbox_mcp_call_t  *call;
    ngx_http_sandbox_mcp_ctx_t   *ctx;

    call = cw->call;
    ctx = call->ctx;

    if (message == NULL || ctx->done || !call->pending
        || message->len != cw->id.len
        || ngx_strncmp(message->data, cw->id.data, cw->id.len) != 0)
    {
        return;
    }

    ngx_http_sandbox_mcp_waiter_unwatch(w);
    ngx_http_sandbox_mcp_waiter_remove(call);

    if (call->cmd) {
        ngx_http_sandbox_mcp_redis_cancel(call->cmd);
        call->cmd = NULL;
    }

    /* nothing more may answer */
    ctx->done = 1;

    ngx_http_sandbox_mcp_finalize(ctx,
                        ngx_http_sandbox_mcp_sse_close(ctx->request));
}


void
ngx_http_sandbox_mcp_cancelled_watch(ngx_http_sandbox_mcp_call_t *call)
{
    u_char                            *p;
    ngx_pool_t                        *pool;
    ngx_pool_cleanup_t                *cln;
    ngx_http_sandbox_mcp_cancelled_t  *cw;

    pool = call->ctx->request->pool;

    if (call->ctx->batch || call->ctx->session_id.len == 0) {
        return;
    }

    cw = ngx_pcalloc(pool, sizeof(ngx_http_sandbox_mcp_cancelled_t));
    cln = ngx_pool_cleanup_add(pool, 0);

    if (cw == NULL || cln == NULL) {
        return;
    }

    cw->id.data = ngx_http_sandbox_mcp_request_id(pool, call->id,
                                                  &cw->id.len);

    p = ngx_pnalloc(pool, sizeof("mcp:") - 1 + call->ctx->session_id.len);

    if (cw->id.data == NULL || p == NULL) {
        return;
    }

    cw->call = call;
    cw->watch.id.data = p;
    cw->watch.id.len = ngx_sprintf(p, "mcp:%V", &call->ctx->session_id) - p;
    cw->watch.wake = ngx_http_sandbox_mcp_cancelled_wake;
    cw->watch.data = cw;

    cln->handler = ngx_http_sandbox_mcp_cancelled_cleanup;
    cln->data = cw;

    ngx_http_sandbox_mcp_waiter_watch(&cw->watch);
}
