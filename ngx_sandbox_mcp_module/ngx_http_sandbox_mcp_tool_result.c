/*
 * opencode_get_result, and its long-poll (waitSeconds): the call waits on
 * the run's channel until the run ends or the wait is over.
 */

#include "ngx_http_sandbox_mcp_tool_result.h"
#include "ngx_http_sandbox_mcp_args.h"
#include "ngx_http_sandbox_mcp_attempts.h"
#include "ngx_http_sandbox_mcp_cancelled.h"
#include "ngx_http_sandbox_mcp_progress.h"
#include "ngx_http_sandbox_mcp_redis.h"
#include "ngx_http_sandbox_mcp_run.h"
#include "ngx_http_sandbox_mcp_run_json.h"
#include "ngx_http_sandbox_mcp_tools.h"
#include "ngx_http_sandbox_mcp_waiter.h"
#include "ngx_http_sandbox_mcp_defaults.h"


static void ngx_http_sandbox_mcp_result_fetch(
    ngx_http_sandbox_mcp_call_t *call);


/* the runId of a lone opencode_get_result with no wait and no task */
static ngx_int_t
ngx_http_sandbox_mcp_get_result_run(ngx_http_sandbox_mcp_ctx_t *ctx,
    ngx_str_t *run_id)
{
    json_t      *params, *args, *v;
    const char  *s;

    if (ctx->batch || ctx->initialize
        || ctx->request->method != NGX_HTTP_POST)
    {
        return NGX_DECLINED;
    }

    s = json_string_value(json_object_get(ctx->body, "method"));
    if (s == NULL || ngx_strcmp(s, "tools/call") != 0) {
        return NGX_DECLINED;
    }

    params = json_object_get(ctx->body, "params");
    s = json_string_value(json_object_get(params, "name"));

    if (s == NULL || ngx_strcmp(s, "opencode_get_result") != 0
        || json_object_get(params, "task") != NULL)
    {
        return NGX_DECLINED;
    }

    args = json_object_get(params, "arguments");
    v = json_object_get(args, "waitSeconds");

    if (v && !json_is_null(v)
        && !(json_is_number(v) && json_number_value(v) == 0))
    {
        return NGX_DECLINED;
    }

    v = json_object_get(args, "runId");
    s = json_string_value(v);

    if (s == NULL
        || !smcp_valid_id(s, json_string_length(v), SMCP_RUN_ID_PREFIX))
    {
        return NGX_DECLINED;
    }

    run_id->data = (u_char *) s;
    run_id->len = json_string_length(v);

    return NGX_OK;
}


ngx_int_t
ngx_http_sandbox_mcp_get_result_key(ngx_http_sandbox_mcp_ctx_t *ctx,
    ngx_str_t *key)
{
    ngx_str_t  run_id;

    if (ngx_http_sandbox_mcp_get_result_run(ctx, &run_id) != NGX_OK) {
        return NGX_DECLINED;
    }

    return ngx_http_sandbox_mcp_redis_key(ctx->request->pool, key,
                                          SMCP_KEY_RUN, &run_id);
}


static void
ngx_http_sandbox_mcp_result_reply(void *data, redisReply *reply)
{
    ngx_http_sandbox_mcp_call_t *call = data;

    ngx_str_t  text;

    if (reply == NULL || reply->type == REDIS_REPLY_ERROR) {
        ngx_http_sandbox_mcp_waiter_remove(call);
        (void) ngx_http_sandbox_mcp_reply_failed(call, reply);
        return;
    }

    call->cmd = NULL;

    if (!ngx_http_sandbox_mcp_run_visible(call, reply)) {
        ngx_http_sandbox_mcp_waiter_remove(call);
        ngx_http_sandbox_mcp_run_not_found(call);
        return;
    }

    if (call->waiting && !call->expired
        && !ngx_http_sandbox_mcp_terminal(reply))
    {
        if (!call->progress) {
            /* the tenant's run, not ended: progress if it was asked, its
             * lifecycle if the session set a log level */
            ngx_http_sandbox_mcp_progress_start(call, 0);
        }

        if (call->recheck) {
            call->recheck = 0;
            ngx_http_sandbox_mcp_result_fetch(call);
        }

        /* keep waiting: a ping or the timer will read again */
        return;
    }

    ngx_http_sandbox_mcp_waiter_remove(call);

    if (call->until_end && !call->progress) {
        /* tasks/result of a run that ended: its lifecycle first, if the
         * session set a log level */
        ngx_http_sandbox_mcp_progress_start(call, 1);
    }

    /* a run of a group: every attempt beside it */
    switch (ngx_http_sandbox_mcp_attempts_answer(call, reply)) {

    case NGX_OK:
        return;

    case NGX_ERROR:
        ngx_http_sandbox_mcp_tool_output_text(call, NULL);
        return;

    default:
        break;
    }

    ngx_http_sandbox_mcp_tool_output_text(call,
        ngx_http_sandbox_mcp_run_json(call, reply, &text) == NGX_OK ? &text
                                                                    : NULL);
}


static void
ngx_http_sandbox_mcp_result_fetch(ngx_http_sandbox_mcp_call_t *call)
{
    ngx_str_t  argv[2];

    ngx_str_set(&argv[0], "HGETALL");

    if (ngx_http_sandbox_mcp_redis_key(call->ctx->request->pool, &argv[1],
                                       SMCP_KEY_RUN, &call->run_id)
        != NGX_OK)
    {
        ngx_http_sandbox_mcp_waiter_remove(call);
        ngx_http_sandbox_mcp_tool_unavailable(call);
        return;
    }

    call->recheck = 0;
    call->cmd = ngx_http_sandbox_mcp_redis_command(
                    ngx_http_sandbox_mcp_result_reply, call, 2, argv);

    if (call->cmd == NULL) {
        ngx_http_sandbox_mcp_waiter_remove(call);
        ngx_http_sandbox_mcp_tool_unavailable(call);
    }
}


/* an event of the run, a lost connection, or the end of the wait */
static void
ngx_http_sandbox_mcp_result_wake(ngx_http_sandbox_mcp_call_t *call)
{
    if (call->progress && !call->expired) {
        ngx_http_sandbox_mcp_progress_wake(call);
    }

    if (call->cmd) {
        /* a read is in flight; read once more after it */
        call->recheck = 1;
        return;
    }

    ngx_http_sandbox_mcp_result_fetch(call);
}


void
ngx_http_sandbox_mcp_get_result(ngx_http_sandbox_mcp_call_t *call)
{
    json_t                           *v;
    double                            wait;
    ngx_str_t                         run_id;
    redisReply                       *reply;
    ngx_http_sandbox_mcp_loc_conf_t  *lcf;

    lcf = ngx_http_get_module_loc_conf(call->ctx->request,
                                       ngx_http_sandbox_mcp_module);

    if (ngx_http_sandbox_mcp_arg_run_id(call) != NGX_OK) {
        return;
    }

    wait = 0;
    v = json_object_get(call->args, "waitSeconds");

    if (v && !json_is_null(v)) {
        if (!json_is_number(v) || json_number_value(v) < 0) {
            ngx_http_sandbox_mcp_tool_error(call, "Argument 'waitSeconds' "
                                            "must be a number of seconds, "
                                            "0 or more (at most %T is "
                                            "used).", lcf->max_wait);
            return;
        }

        wait = ngx_min(json_number_value(v), (double) lcf->max_wait);
    }

    if (wait == 0 && !call->until_end && call->ctx->run_read
        && ngx_http_sandbox_mcp_get_result_run(call->ctx, &run_id) == NGX_OK
        && run_id.len == call->run_id.len
        && ngx_strncmp(run_id.data, call->run_id.data, run_id.len) == 0)
    {
        /* read along with the session: no second round trip */
        reply = call->ctx->run_read;
        call->ctx->run_read = NULL;
        ngx_http_sandbox_mcp_result_reply(call, reply);
        return;
    }

    if (call->until_end) {
        /* tasks/result: until the run ends, which its deadline bounds */
        wait = (double) (lcf->run_timeout_max
                         + NGX_HTTP_SANDBOX_MCP_TASK_GRACE);
    }

    if (wait > 0) {
        /*
         * Listen before the first read: a ping between the read and the
         * registration would otherwise be lost.
         */
        call->wake = ngx_http_sandbox_mcp_result_wake;
        ngx_http_sandbox_mcp_waiter_add(call, (ngx_msec_t) (wait * 1000));
        ngx_http_sandbox_mcp_cancelled_watch(call);

        /* a client that goes away ends the wait */
        call->ctx->request->read_event_handler = ngx_http_test_reading;
    }

    ngx_http_sandbox_mcp_result_fetch(call);
}
