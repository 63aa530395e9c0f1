/*
 * /healthz (sandbox_mcp_health): this module's version, Redis answers a
 * PING, and what the runners' heartbeats (SMCP_KEY_RUNNERS) say: how many
 * are alive, how many of them drain (SMCP_KEY_RUNNERS_DRAINING: they take
 * no new run), how old the newest is.  200 while Redis answers, 503 when it
 * does not; runners that are all stale or absent are reported, not a
 * failure of this nginx.
 */

#include "ngx_http_sandbox_mcp_health.h"
#include "ngx_http_sandbox_mcp_defaults.h"
#include "ngx_http_sandbox_mcp_http.h"
#include "ngx_http_sandbox_mcp_redis.h"
#include "ngx_http_sandbox_mcp_run.h"


typedef struct {
    ngx_http_request_t                 *request;
    ngx_http_sandbox_mcp_redis_cmd_t   *cmd;
    int64_t                             now;
    ngx_uint_t                          ok;         /* PONG */
    long long                           alive;
    long long                           draining;
    int64_t                             newest;     /* ms; -1: none */
} ngx_http_sandbox_mcp_health_t;


static void ngx_http_sandbox_mcp_health_reply(void *data, ngx_uint_t i,
    redisReply *reply);
static ngx_int_t ngx_http_sandbox_mcp_health_answer(
    ngx_http_sandbox_mcp_health_t *h);
static void ngx_http_sandbox_mcp_health_cleanup(void *data);


ngx_int_t
ngx_http_sandbox_mcp_health_handler(ngx_http_request_t *r)
{
    ngx_int_t                       rc;
    ngx_str_t                       argv[14];
    ngx_uint_t                      argc[4];
    ngx_pool_cleanup_t             *cln;
    ngx_http_sandbox_mcp_health_t  *h;

    if (!(r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD))) {
        return NGX_HTTP_NOT_ALLOWED;
    }

    rc = ngx_http_discard_request_body(r);
    if (rc != NGX_OK) {
        return rc;
    }

    h = ngx_pcalloc(r->pool, sizeof(ngx_http_sandbox_mcp_health_t));
    cln = ngx_pool_cleanup_add(r->pool, 0);

    if (h == NULL || cln == NULL
        || ngx_http_sandbox_mcp_redis_key(r->pool, &argv[2],
                                          SMCP_KEY_RUNNERS, NULL)
           != NGX_OK
        || ngx_http_sandbox_mcp_redis_key(r->pool, &argv[11],
                                          SMCP_KEY_RUNNERS_DRAINING, NULL)
           != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    h->request = r;
    h->now = ngx_http_sandbox_mcp_now_ms();
    h->newest = -1;

    cln->handler = ngx_http_sandbox_mcp_health_cleanup;
    cln->data = h;

    /* PING; ZCOUNT runners (now - stale) +inf; ZRANGE runners -1 -1
     * WITHSCORES: the newest heartbeat; ZCOUNT runners:draining (now -
     * stale) +inf */
    ngx_str_set(&argv[0], "PING");
    ngx_str_set(&argv[1], "ZCOUNT");
    argv[3] = ngx_http_sandbox_mcp_redis_number(r->pool,
                                                h->now - SMCP_RUNNER_STALE_MS);
    ngx_str_set(&argv[4], "+inf");
    ngx_str_set(&argv[5], "ZRANGE");
    argv[6] = argv[2];
    ngx_str_set(&argv[7], "-1");
    ngx_str_set(&argv[8], "-1");
    ngx_str_set(&argv[9], "WITHSCORES");
    ngx_str_set(&argv[10], "ZCOUNT");
    argv[12] = argv[3];
    ngx_str_set(&argv[13], "+inf");

    argc[0] = 1;
    argc[1] = 4;
    argc[2] = 5;
    argc[3] = 4;

    if (argv[3].len == 0) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    h->cmd = ngx_http_sandbox_mcp_redis_each(ngx_http_sandbox_mcp_health_reply,
                                             h, 4, argc, argv);

    if (h->cmd == NULL) {
        return ngx_http_sandbox_mcp_health_answer(h);
    }

    r->main->count++;

    return NGX_DONE;
}


static void
ngx_http_sandbox_mcp_health_reply(void *data, ngx_uint_t i, redisReply *reply)
{
    ngx_http_sandbox_mcp_health_t *h = data;

    switch (i) {

    case 0:
        h->ok = reply && reply->type == REDIS_REPLY_STATUS
                && ngx_strcmp(reply->str, "PONG") == 0;
        return;

    case 1:
        h->alive = (reply && reply->type == REDIS_REPLY_INTEGER)
                   ? reply->integer : 0;
        return;

    case 2:
        if (reply && reply->type == REDIS_REPLY_ARRAY
            && reply->elements == 2
            && reply->element[1]->type == REDIS_REPLY_STRING)
        {
            h->newest = ngx_atoi((u_char *) reply->element[1]->str,
                                 reply->element[1]->len);
        }

        return;

    default:
        h->draining = (reply && reply->type == REDIS_REPLY_INTEGER)
                      ? reply->integer : 0;
        h->cmd = NULL;
        break;
    }

    ngx_http_sandbox_mcp_end_request(h->request,
                                     ngx_http_sandbox_mcp_health_answer(h));
}


static ngx_int_t
ngx_http_sandbox_mcp_health_answer(ngx_http_sandbox_mcp_health_t *h)
{
    json_t     *j;
    ngx_int_t   rc;

    if (!h->ok) {
        j = json_pack("{s:s, s:s, s:s}", "status", "unavailable",
                      "version", SMCP_VERSION,
                      "redis", ngx_http_sandbox_mcp_redis_unavailable());
        rc = ngx_http_sandbox_mcp_send_json(h->request,
                                            NGX_HTTP_SERVICE_UNAVAILABLE, j);
        json_decref(j);
        return rc;
    }

    /* runners: "ok" (one alive at least that takes runs), "draining"
     * (alive, all draining), "stale" (heartbeats, all too old) or "none"
     * (no heartbeat at all) */
    j = json_pack("{s:s, s:s, s:s, s:s, s:I, s:I, s:o}", "status", "ok",
                  "version", SMCP_VERSION, "redis", "ok",
                  "runners", h->alive > h->draining ? "ok"
                             : h->alive > 0 ? "draining"
                             : h->newest >= 0 ? "stale" : "none",
                  "runnersAlive", (json_int_t) h->alive,
                  "runnersDraining", (json_int_t) ngx_min(h->draining,
                                                          h->alive),
                  "heartbeatAgeMs", h->newest >= 0
                                    ? json_integer(ngx_max(h->now - h->newest,
                                                           0))
                                    : json_null());

    rc = ngx_http_sandbox_mcp_send_json(h->request, NGX_HTTP_OK, j);
    json_decref(j);

    return rc;
}


static void
ngx_http_sandbox_mcp_health_cleanup(void *data)
{
    ngx_http_sandbox_mcp_health_t *h = data;

    if (h->cmd) {
        ngx_http_sandbox_mcp_redis_cancel(h->cmd);
        h->cmd = NULL;
    }
}
