/*
 * A request's life, for /mcp and the dashboard alike: its context (the
 * module's ctx of r), released with the request (pending Redis commands
 * cancelled, waits ended, answers freed), and its end from Redis
 * callbacks and timers.
 */

#include "ngx_http_sandbox_mcp_request.h"
#include "ngx_http_sandbox_mcp_http.h"
#include "ngx_http_sandbox_mcp_redis.h"
#include "ngx_http_sandbox_mcp_waiter.h"


static void
ngx_http_sandbox_mcp_cleanup(void *data)
{
    ngx_http_sandbox_mcp_ctx_t *ctx = data;

    ngx_uint_t  i;

    /* the request is going away: no callback may reach it any more */

    ctx->done = 1;

    if (ctx->cmd) {
        ngx_http_sandbox_mcp_redis_cancel(ctx->cmd);
        ctx->cmd = NULL;
    }

    for (i = 0; i < ctx->ncalls; i++) {
        if (ctx->calls[i].cmd) {
            ngx_http_sandbox_mcp_redis_cancel(ctx->calls[i].cmd);
            ctx->calls[i].cmd = NULL;
        }

        ngx_http_sandbox_mcp_waiter_remove(&ctx->calls[i]);

        if (ctx->calls[i].response) {
            json_decref(ctx->calls[i].response);
            ctx->calls[i].response = NULL;
        }
    }

    if (ctx->body) {
        json_decref(ctx->body);
        ctx->body = NULL;
    }
}


/* the request's context, released with the request */
ngx_http_sandbox_mcp_ctx_t *
ngx_http_sandbox_mcp_ctx_create(ngx_http_request_t *r)
{
    ngx_pool_cleanup_t          *cln;
    ngx_http_sandbox_mcp_ctx_t  *ctx;

    ctx = ngx_pcalloc(r->pool, sizeof(ngx_http_sandbox_mcp_ctx_t));
    if (ctx == NULL) {
        return NULL;
    }

    ctx->request = r;

    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (cln == NULL) {
        return NULL;
    }

    cln->handler = ngx_http_sandbox_mcp_cleanup;
    cln->data = ctx;

    ngx_http_set_ctx(r, ctx, ngx_http_sandbox_mcp_module);

    return ctx;
}


/* called from Redis callbacks and timers: outside nginx's request flow */
void
ngx_http_sandbox_mcp_finalize(ngx_http_sandbox_mcp_ctx_t *ctx, ngx_int_t rc)
{
    ngx_http_sandbox_mcp_end_request(ctx->request, rc);
}
