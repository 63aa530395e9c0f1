/*
 * The egress audit record, at the log phase: what went where (route,
 * method, path without the query, status, bytes, duration, and on a cached
 * route whether the cache answered), never headers or bodies, appended to
 * the run's event stream.
 */

#include "ngx_http_sandbox_mcp_egress_log.h"
#include "ngx_http_sandbox_mcp_egress_meter.h"
#include "ngx_http_sandbox_mcp_redis.h"


#if (NGX_HTTP_CACHE)

/* $upstream_cache_status in lower case, by NGX_HTTP_CACHE_* */
static const char  *ngx_http_sandbox_mcp_egress_cache_status[] = {
    NULL, "miss", "bypass", "expired", "stale", "updating", "revalidated",
    "hit", "scarce"
};


/* "cache": how a cached route answered; nothing on other routes */
static void
ngx_http_sandbox_mcp_egress_log_cache(ngx_http_request_t *r, json_t *ev)
{
    ngx_uint_t  s;

    if (r->upstream == NULL) {
        return;
    }

    s = r->upstream->cache_status;

    if (s == 0
        || s >= sizeof(ngx_http_sandbox_mcp_egress_cache_status)
                / sizeof(ngx_http_sandbox_mcp_egress_cache_status[0]))
    {
        return;
    }

    json_object_set_new(ev, "cache",
                  json_string(ngx_http_sandbox_mcp_egress_cache_status[s]));
}

#endif


/* the audit record: what went where, never headers or bodies */
ngx_int_t
ngx_http_sandbox_mcp_egress_log(ngx_http_request_t *r)
{
    char                                    *data;
    u_char                                  *q;
    json_t                                  *ev;
    int64_t                                  now, start;
    ngx_str_t                                chan, path, argv[12];
    ngx_time_t                              *tp;
    ngx_http_sandbox_mcp_egress_ctx_t       *ctx;
    ngx_http_sandbox_mcp_egress_loc_conf_t  *lcf;

    /* after an error_page too: the route's context and configuration */
    ctx = ngx_http_sandbox_mcp_egress_request_ctx(r);

    if (ctx == NULL || !ctx->known) {
        return NGX_OK;
    }

    lcf = ctx->lcf;

    if (lcf->inbox) {
        /* the inbox's polls: the messages taken are in the timeline */
        return NGX_OK;
    }

    tp = ngx_timeofday();
    now = (int64_t) tp->sec * 1000 + tp->msec;
    start = (int64_t) r->start_sec * 1000 + r->start_msec;

    /* the path as the sandbox sent it (before any rewrite), without the
     * query string: queries can carry keys */
    path = r->unparsed_uri;
    q = ngx_strlchr(path.data, path.data + path.len, '?');
    if (q) {
        path.len = q - path.data;
    }

    ev = json_pack("{s:s%, s:s%, s:s%, s:i, s:I, s:I, s:I, s:b}",
                   "route", (char *) lcf->route.data, lcf->route.len,
                   "method", (char *) r->method_name.data,
                   r->method_name.len,
                   "path", (char *) path.data, path.len,
                   "status", (int) r->headers_out.status,
                   "bytesIn", (json_int_t) r->request_length,
                   "bytesOut", (json_int_t) r->connection->sent,
                   "durationMs", (json_int_t) (now - start),
                   "granted", ctx->granted);

    if (ev == NULL) {
        /* a path that is not UTF-8: record it without the path */
        ev = json_pack("{s:s%, s:s%, s:i, s:b}",
                       "route", (char *) lcf->route.data, lcf->route.len,
                       "method", (char *) r->method_name.data,
                       r->method_name.len,
                       "status", (int) r->headers_out.status,
                       "granted", ctx->granted);
    }

#if (NGX_HTTP_CACHE)
    if (ev) {
        ngx_http_sandbox_mcp_egress_log_cache(r, ev);
    }
#endif

    /* a model request: its usage, metered */
    ngx_http_sandbox_mcp_egress_meter_log(r, ctx, ev);

    data = ev ? json_dumps(ev, JSON_COMPACT) : NULL;
    json_decref(ev);

    if (data == NULL
        || ngx_http_sandbox_mcp_redis_key(r->pool, &argv[1],
                                          SMCP_KEY_RUN_EVENTS, &ctx->run_id)
           != NGX_OK
        || ngx_http_sandbox_mcp_redis_key(r->pool, &chan, SMCP_CHAN_RUN,
                                          &ctx->run_id)
           != NGX_OK)
    {
        free(data);
        return NGX_OK;
    }

    ngx_str_set(&argv[0], "XADD");
    ngx_str_set(&argv[2], "MAXLEN");
    ngx_str_set(&argv[3], "~");
    ngx_str_set(&argv[4], SMCP_EVENTS_MAXLEN);
    ngx_str_set(&argv[5], "*");
    ngx_str_set(&argv[6], "type");
    ngx_str_set(&argv[7], "egress");
    ngx_str_set(&argv[8], "data");
    argv[9].data = (u_char *) data;
    argv[9].len = ngx_strlen(data);
    ngx_str_set(&argv[10], "ts");
    argv[11] = ngx_http_sandbox_mcp_redis_number(r->pool, now);

    /* fire and forget: nothing waits for the replies */
    (void) ngx_http_sandbox_mcp_redis_command(NULL, NULL, 12, argv);

    free(data);

    ngx_str_set(&argv[0], "PUBLISH");
    argv[1] = chan;
    ngx_str_set(&argv[2], "egress");

    (void) ngx_http_sandbox_mcp_redis_command(NULL, NULL, 3, argv);

    return NGX_OK;
}
