/*
 * opencode_send_message: a message for the agent of a run that is still
 * going, queued in the run's inbox (the script run_message) until its
 * sandbox takes it (sandbox_mcp_egress_inbox) and hands it to OpenCode's
 * server in the run's session, where it reaches the model with the next
 * request.  Bounded: a message's bytes, the messages waiting, the
 * messages a run is ever sent.  A run that has ended is refused with the
 * way to go on (opencode_run_task with its sessionId).
 */

#include "ngx_http_sandbox_mcp_tool_message.h"
#include "ngx_http_sandbox_mcp_args.h"
#include "ngx_http_sandbox_mcp_redis.h"
#include "ngx_http_sandbox_mcp_run.h"
#include "ngx_http_sandbox_mcp_scripts.h"
#include "ngx_http_sandbox_mcp_tools.h"

#include "smcp_validate.h"
#include "ngx_http_sandbox_mcp_tool_run_task.h"


static ngx_uint_t
ngx_http_sandbox_mcp_message_is(redisReply *v, const char *s)
{
    return v->type == REDIS_REPLY_STRING && v->len == ngx_strlen(s)
           && ngx_strncmp(v->str, s, v->len) == 0;
}


static void
ngx_http_sandbox_mcp_message_reply(void *data, redisReply *reply)
{
    ngx_http_sandbox_mcp_call_t *call = data;

    json_t       *out;
    redisReply  **e;

    if (ngx_http_sandbox_mcp_reply_failed(call, reply)) {
        return;
    }

    if (reply->type != REDIS_REPLY_ARRAY || reply->elements == 0) {
        ngx_http_sandbox_mcp_run_not_found(call);
        return;
    }

    e = reply->element;

    if (ngx_http_sandbox_mcp_message_is(e[0], "ok") && reply->elements == 3
        && e[1]->type == REDIS_REPLY_INTEGER
        && e[2]->type == REDIS_REPLY_INTEGER)
    {
        out = json_pack("{s:s%, s:I, s:s, s:I}",
                        "runId", (char *) call->run_id.data,
                        call->run_id.len,
                        "messageId", (json_int_t) e[1]->integer,
                        "status", "queued",
                        "waiting", (json_int_t) e[2]->integer);

        ngx_http_sandbox_mcp_tool_output(call, out);
        return;
    }

    if (ngx_http_sandbox_mcp_message_is(e[0], "ended")
        && reply->elements == 2 && e[1]->type == REDIS_REPLY_STRING)
    {
        ngx_http_sandbox_mcp_tool_error(call,
            "Run %V has ended (%*s): its agent takes no more messages. To "
            "go on from where it stopped, call opencode_run_task with the "
            "run's sessionId (opencode_get_result shows it) and the message "
            "as the task.", &call->run_id, e[1]->len, e[1]->str);
        return;
    }

    if (ngx_http_sandbox_mcp_message_is(e[0], "full")) {
        ngx_http_sandbox_mcp_tool_error(call,
            "Run %V already has %d messages its agent has not taken yet; "
            "send this one once they are taken (opencode_get_events shows "
            "each one delivered).", &call->run_id,
            NGX_HTTP_SANDBOX_MCP_STEER_WAITING);
        return;
    }

    if (ngx_http_sandbox_mcp_message_is(e[0], "limit")) {
        ngx_http_sandbox_mcp_tool_error(call,
            "Run %V has been sent %d messages, the most a run takes; cancel "
            "it (opencode_cancel_run) and start a new one if it needs more "
            "steering.", &call->run_id, NGX_HTTP_SANDBOX_MCP_STEER_PER_RUN);
        return;
    }

    if (ngx_http_sandbox_mcp_message_is(e[0], "grant")
        && reply->elements == 2 && e[1]->type == REDIS_REPLY_STRING)
    {
        ngx_http_sandbox_mcp_tool_error(call,
            "Run %V works on %*s, which this token does not grant: only a "
            "token granting every repository of the run may steer it.",
            &call->run_id, e[1]->len, e[1]->str);
        return;
    }

    if (ngx_http_sandbox_mcp_message_is(e[0], "agent")
        && reply->elements == 2 && e[1]->type == REDIS_REPLY_STRING)
    {
        ngx_http_sandbox_mcp_tool_error(call,
            "Run %V runs the agent %*s, which takes no message while it "
            "runs (only OpenCode's runs are steered). Cancel the run and "
            "start a new one with the change, or continue its session "
            "once it ends (opencode_run_task with its sessionId).",
            &call->run_id, ngx_min(e[1]->len, SMCP_AGENT_MAX), e[1]->str);
        return;
    }

    if (ngx_http_sandbox_mcp_message_is(e[0], "noroute")) {
        ngx_http_sandbox_mcp_tool_error(call,
            "This deployment's egress has no inbox for sandboxes "
            "(sandbox_mcp_egress_inbox): messages cannot reach a running "
            "agent. Cancel the run and start a new one with the change.");
        return;
    }

    ngx_http_sandbox_mcp_tool_unavailable(call);
}


void
ngx_http_sandbox_mcp_send_message(ngx_http_sandbox_mcp_call_t *call)
{
    ngx_str_t                   text, args[12];
    ngx_pool_t                 *pool;
    ngx_http_sandbox_mcp_key_t  keys[] = {
        { SMCP_KEY_RUN, &call->run_id },
        { SMCP_KEY_RUN_INBOX, &call->run_id },
        { SMCP_KEY_RUN_EVENTS, &call->run_id },
        { SMCP_CHAN_RUN, &call->run_id },
        { SMCP_KEY_EGRESS_ROUTES, NULL },
        { SMCP_KEY_TENANT_USAGE, &call->ctx->tenant }
    };

    if (ngx_http_sandbox_mcp_arg_run_id(call) != NGX_OK
        || ngx_http_sandbox_mcp_arg_string(call, "message",
                                           NGX_HTTP_SANDBOX_MCP_STEER_MAX,
                                           &text)
           != NGX_OK)
    {
        return;
    }

    pool = call->ctx->request->pool;

    args[0] = call->ctx->tenant;
    args[1] = ngx_http_sandbox_mcp_redis_number(pool,
                                                ngx_http_sandbox_mcp_now_ms());
    args[2] = text;
    args[3] = call->ctx->tenant;
    ngx_str_set(&args[4], SMCP_EVENTS_MAXLEN);
    args[5] = ngx_http_sandbox_mcp_redis_number(pool,
                                          NGX_HTTP_SANDBOX_MCP_STEER_WAITING);
    args[6] = ngx_http_sandbox_mcp_redis_number(pool,
                                          NGX_HTTP_SANDBOX_MCP_STEER_PER_RUN);
    ngx_str_set(&args[7], SMCP_STATUS_STARTED);
    ngx_str_set(&args[8], SMCP_STATUS_RUNNING);

    args[10] = ngx_http_sandbox_mcp_redis_number(pool,
                                          NGX_HTTP_SANDBOX_MCP_STEER_TTL);

    /* the run page acts for the tenant (its link opens every run of the
     * tenant, which it may cancel too); a client, for its token's grants */
    if (call->ctx->dashboard) {
        ngx_str_set(&args[9], "dashboard");
        ngx_str_set(&args[11], "*");

    } else {
        ngx_str_set(&args[9], "mcp");

        if (ngx_http_sandbox_mcp_task_grants(call, &args[11]) != NGX_OK) {
            ngx_http_sandbox_mcp_tool_unavailable(call);
            return;
        }
    }

    ngx_http_sandbox_mcp_call_script(call,
                                     &ngx_http_sandbox_mcp_script_run_message,
                                     ngx_http_sandbox_mcp_message_reply,
                                     keys, sizeof(keys) / sizeof(keys[0]),
                                     args, sizeof(args) / sizeof(args[0]));
}
