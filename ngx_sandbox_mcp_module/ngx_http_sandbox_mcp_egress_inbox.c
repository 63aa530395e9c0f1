/*
 * sandbox_mcp_egress_inbox: a location of the egress server where the
 * sandbox takes, one by one, the messages a person or a client sent to its
 * running agent (opencode_send_message, the run page's message box).  The
 * sandbox asks while its agent runs (GET, its run token where an API key
 * goes, checked by the egress access phase like any route's: its run, live);
 * the answer is the next message's text as it was sent (200, text/plain,
 * its number in Smcp-Message-Id), or 204 when none waits.  What is taken is
 * delivered: the script run_inbox writes so in the run's timeline, and
 * these requests are not in the egress audit record (a poll a second would
 * bury it).
 *
 *     location = /smcp/inbox { sandbox_mcp_egress_inbox; }
 */

#include "ngx_http_sandbox_mcp_egress_inbox.h"
#include "ngx_http_sandbox_mcp_defaults.h"
#include "ngx_http_sandbox_mcp_http.h"
#include "ngx_http_sandbox_mcp_redis.h"
#include "ngx_http_sandbox_mcp_run.h"
#include "ngx_http_sandbox_mcp_scripts.h"


static void
ngx_http_sandbox_mcp_egress_inbox_taken(void *data, redisReply *reply)
{
    ngx_http_sandbox_mcp_egress_ctx_t *ctx = data;

    u_char              *p;
    ngx_int_t            rc;
    ngx_str_t            id;
    redisReply         **e;
    ngx_http_request_t  *r;

    r = ctx->request;
    ctx->cmd = NULL;

    if (reply == NULL || reply->type == REDIS_REPLY_ERROR) {
        rc = ngx_http_sandbox_mcp_egress_refuse(r,
                          NGX_HTTP_SERVICE_UNAVAILABLE, "api_error",
                          "egress: the inbox cannot be read right now; "
                          "retry shortly");
        ngx_http_sandbox_mcp_end_request(r, rc);
        return;
    }

    if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2
        || reply->element[0]->type != REDIS_REPLY_INTEGER
        || reply->element[1]->type != REDIS_REPLY_STRING)
    {
        ngx_http_sandbox_mcp_end_request(r,
                 ngx_http_sandbox_mcp_send_body(r, NGX_HTTP_NO_CONTENT, NULL,
                                                NULL, 0));
        return;
    }

    e = reply->element;

    id = ngx_http_sandbox_mcp_redis_number(r->pool, e[0]->integer);
    p = ngx_pnalloc(r->pool, e[1]->len);

    if (id.len == 0 || (p == NULL && e[1]->len)
        || ngx_http_sandbox_mcp_add_header(r, "Smcp-Message-Id", &id)
           != NGX_OK)
    {
        ngx_http_sandbox_mcp_end_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    ngx_memcpy(p, e[1]->str, e[1]->len);

    ngx_http_sandbox_mcp_end_request(r,
             ngx_http_sandbox_mcp_send_body(r, NGX_HTTP_OK,
                                            "text/plain; charset=utf-8", p,
                                            e[1]->len));
}


static ngx_int_t
ngx_http_sandbox_mcp_egress_inbox_handler(ngx_http_request_t *r)
{
    ngx_int_t                           rc;
    ngx_str_t                           argv[7];
    ngx_http_sandbox_mcp_egress_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_sandbox_mcp_egress_module);

    if (ctx == NULL || !ctx->granted) {
        return NGX_HTTP_FORBIDDEN;
    }

    if (r->method != NGX_HTTP_GET) {
        return ngx_http_sandbox_mcp_egress_refuse(r, NGX_HTTP_NOT_ALLOWED,
                          "invalid_request_error",
                          "egress: the inbox is read with GET");
    }

    rc = ngx_http_discard_request_body(r);
    if (rc != NGX_OK) {
        return rc;
    }

    if (ngx_http_sandbox_mcp_redis_key(r->pool, &argv[0], SMCP_KEY_RUN,
                                       &ctx->run_id)
           != NGX_OK
        || ngx_http_sandbox_mcp_redis_key(r->pool, &argv[1],
                                          SMCP_KEY_RUN_INBOX, &ctx->run_id)
           != NGX_OK
        || ngx_http_sandbox_mcp_redis_key(r->pool, &argv[2],
                                          SMCP_KEY_RUN_EVENTS, &ctx->run_id)
           != NGX_OK
        || ngx_http_sandbox_mcp_redis_key(r->pool, &argv[3], SMCP_CHAN_RUN,
                                          &ctx->run_id)
           != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    argv[4] = ctx->tenant;
    argv[5] = ngx_http_sandbox_mcp_redis_number(r->pool,
                                                ngx_http_sandbox_mcp_now_ms());
    ngx_str_set(&argv[6], SMCP_EVENTS_MAXLEN);

    ctx->cmd = ngx_http_sandbox_mcp_redis_script(
                   &ngx_http_sandbox_mcp_script_run_inbox,
                   ngx_http_sandbox_mcp_egress_inbox_taken, ctx, 4, 7, argv);

    if (ctx->cmd == NULL) {
        return ngx_http_sandbox_mcp_egress_refuse(r,
                          NGX_HTTP_SERVICE_UNAVAILABLE, "api_error",
                          "egress: the inbox cannot be read right now; "
                          "retry shortly");
    }

    r->main->count++;

    return NGX_DONE;
}


char *
ngx_http_sandbox_mcp_egress_inbox(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_sandbox_mcp_egress_loc_conf_t *lcf = conf;

    char                      *rv;
    ngx_str_t                  name = ngx_string(
                                          NGX_HTTP_SANDBOX_MCP_INBOX_ROUTE);
    ngx_http_core_loc_conf_t  *clcf;

    rv = ngx_http_sandbox_mcp_egress_set_route(cf, lcf, &name);
    if (rv != NGX_CONF_OK) {
        return rv;
    }

    lcf->inbox = 1;

    clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);
    clcf->handler = ngx_http_sandbox_mcp_egress_inbox_handler;

    return NGX_CONF_OK;
}
