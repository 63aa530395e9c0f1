/*
 * opencode_cancel_run: a run not started is cancelled at once; a running
 * one is flagged for its runner.  Two steps: the run's tenant and session
 * are read first, as the script is handed every key it touches (its
 * session's active set among them).  With groupId, every attempt of the
 * group in turn, then the run that opens the pull request of the attempt
 * picked (when there is one: a pick run not started yet is cancelled and
 * the pick undone), then the group's answer (its first run, every attempt
 * beside it).
 */

#include "ngx_http_sandbox_mcp_tool_cancel.h"
#include "ngx_http_sandbox_mcp_args.h"
#include "ngx_http_sandbox_mcp_attempts.h"
#include "ngx_http_sandbox_mcp_redis.h"
#include "ngx_http_sandbox_mcp_run.h"
#include "ngx_http_sandbox_mcp_run_json.h"
#include "ngx_http_sandbox_mcp_scripts.h"
#include "ngx_http_sandbox_mcp_tools.h"

#include "smcp_validate.h"


static void ngx_http_sandbox_mcp_cancel_next(
    ngx_http_sandbox_mcp_call_t *call);


static void
ngx_http_sandbox_mcp_cancel_reply(void *data, redisReply *reply)
{
    ngx_http_sandbox_mcp_call_t *call = data;

    ngx_str_t  text;

    if (ngx_http_sandbox_mcp_reply_failed(call, reply)) {
        return;
    }

    if (call->nattempts) {
        /* a group's: its next attempt */
        ngx_http_sandbox_mcp_cancel_next(call);
        return;
    }

    if (!ngx_http_sandbox_mcp_run_visible(call, reply)) {
        ngx_http_sandbox_mcp_run_not_found(call);
        return;
    }

    ngx_http_sandbox_mcp_tool_output_text(call,
        ngx_http_sandbox_mcp_run_json(call, reply, &text) == NGX_OK ? &text
                                                                    : NULL);
}


/* the run is the tenant's, of the session in call->path (or none) */
static void
ngx_http_sandbox_mcp_cancel_send(ngx_http_sandbox_mcp_call_t *call)
{
    ngx_str_t                         args[9];
    ngx_pool_t                       *pool;
    ngx_http_sandbox_mcp_loc_conf_t  *lcf;
    ngx_http_sandbox_mcp_key_t        keys[] = {
        { SMCP_KEY_RUN, &call->run_id },
        { SMCP_KEY_RUN_EVENTS, &call->run_id },
        { SMCP_KEY_RUN_DIFF, &call->run_id },
        { SMCP_KEY_TENANT_STARTED, &call->ctx->tenant },
        { SMCP_KEY_SESSION_ACTIVE, &call->path },
        { SMCP_CHAN_RUN, &call->run_id },
        { SMCP_CHAN_CANCEL, NULL },
        { SMCP_CHAN_TENANT, &call->ctx->tenant },
        { SMCP_KEY_TENANT_USAGE, &call->ctx->tenant },
        { SMCP_KEY_BUDGET_EXPIRY, NULL },
        { SMCP_KEY_NOTIFY, NULL },
        { SMCP_KEY_RUN, &call->pick[0] },      /* a pick's attempt */
        { SMCP_KEY_RUN, &call->pick[1] }       /* ... and its group */
    };

    pool = call->ctx->request->pool;
    lcf = ngx_http_get_module_loc_conf(call->ctx->request,
                                       ngx_http_sandbox_mcp_module);

    if (call->path.len == 0) {
        keys[4].fmt = "";                   /* KEYS[5] '': no session */
    }

    if (call->pick[0].len == 0 || call->pick[1].len == 0) {
        keys[11].fmt = "";                  /* KEYS[12], [13] '': no pick */
        keys[12].fmt = "";
    }

    args[0] = call->ctx->tenant;
    args[1] = ngx_http_sandbox_mcp_redis_number(pool,
                                                 ngx_http_sandbox_mcp_now_ms());
    args[2] = call->run_id;
    args[3] = ngx_http_sandbox_mcp_events_maxlen;
    args[4] = ngx_http_sandbox_mcp_redis_number(pool, lcf->retention);
    args[5] = call->path;
    ngx_str_set(&args[6], SMCP_STATUS_STARTED);
    ngx_str_set(&args[7], SMCP_STATUS_RUNNING);
    ngx_str_set(&args[8], SMCP_STATUS_CANCELLED);

    ngx_http_sandbox_mcp_call_script(call,
                                     &ngx_http_sandbox_mcp_script_run_cancel,
                                     ngx_http_sandbox_mcp_cancel_reply,
                                     keys, sizeof(keys) / sizeof(keys[0]),
                                     args, sizeof(args) / sizeof(args[0]));
}


/* HMGET run tenant session pr_of group pr_pick_run */
static void
ngx_http_sandbox_mcp_cancel_found(void *data, redisReply *reply)
{
    ngx_http_sandbox_mcp_call_t *call = data;

    ngx_uint_t   i;
    redisReply  *t, *s;

    if (ngx_http_sandbox_mcp_reply_failed(call, reply)) {
        return;
    }

    if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 5) {
        ngx_http_sandbox_mcp_run_not_found(call);
        return;
    }

    t = reply->element[0];
    s = reply->element[1];

    /* a pick run's attempt and group (run_pick.lua wrote them) */
    for (i = 0; i < 2; i++) {
        if (ngx_http_sandbox_mcp_reply_id(call, reply->element[2 + i],
                                          SMCP_RUN_ID_PREFIX, &call->pick[i])
            == NGX_ERROR)
        {
            ngx_http_sandbox_mcp_tool_unavailable(call);
            return;
        }
    }

    if (t->type != REDIS_REPLY_STRING || t->len != call->ctx->tenant.len
        || ngx_strncmp(t->str, call->ctx->tenant.data, t->len) != 0)
    {
        if (call->nattempts) {
            /* an attempt gone meanwhile: the others */
            ngx_http_sandbox_mcp_cancel_next(call);
            return;
        }

        ngx_http_sandbox_mcp_run_not_found(call);
        return;
    }

    if (ngx_http_sandbox_mcp_reply_id(call, s, SMCP_SESSION_ID_PREFIX,
                                      &call->path)
        == NGX_ERROR)
    {
        ngx_http_sandbox_mcp_tool_unavailable(call);
        return;
    }

    /* a group's attempt picked: the run opening its pull request, last */
    if (call->nattempts && call->pick_run.len == 0
        && call->pick[0].len == 0
        && ngx_http_sandbox_mcp_reply_id(call, reply->element[4],
                                         SMCP_RUN_ID_PREFIX, &call->pick_run)
           == NGX_ERROR)
    {
        ngx_http_sandbox_mcp_tool_unavailable(call);
        return;
    }

    ngx_http_sandbox_mcp_cancel_send(call);
}


/* the run call->run_id: its tenant and session first */
static void
ngx_http_sandbox_mcp_cancel_one(ngx_http_sandbox_mcp_call_t *call)
{
    static const char  *fields[] = { "tenant", "session", "pr_of", "group",
                                     "pr_pick_run" };

    ngx_http_sandbox_mcp_call_run_read(call, ngx_http_sandbox_mcp_cancel_found,
                                       fields, 5);
}


static void
ngx_http_sandbox_mcp_group_not_found(ngx_http_sandbox_mcp_call_t *call)
{
    ngx_http_sandbox_mcp_tool_error(call, "Group not found: %V (a groupId "
                                    "is the runId of a group's first "
                                    "attempt, as opencode_run_task with "
                                    "attempts answered).", &call->run_id);
}


/* the group's answer, once every attempt was cancelled */
static void
ngx_http_sandbox_mcp_cancel_group_done(void *data, redisReply *reply)
{
    ngx_http_sandbox_mcp_call_t *call = data;

    if (ngx_http_sandbox_mcp_reply_failed(call, reply)) {
        return;
    }

    if (!ngx_http_sandbox_mcp_run_visible(call, reply)
        || ngx_http_sandbox_mcp_attempts_answer(call, reply) != NGX_OK)
    {
        ngx_http_sandbox_mcp_tool_output_text(call, NULL);
    }
}


/* the group's run hash (HGETALL): its attempts, each cancelled in turn */
static void
ngx_http_sandbox_mcp_cancel_group_found(void *data, redisReply *reply)
{
    ngx_http_sandbox_mcp_call_t *call = data;

    if (ngx_http_sandbox_mcp_reply_failed(call, reply)) {
        return;
    }

    if (!ngx_http_sandbox_mcp_run_visible(call, reply)
        || ngx_http_sandbox_mcp_attempts_of(call, reply) != NGX_OK
        || call->attempts[0].len != call->run_id.len
        || ngx_strncmp(call->attempts[0].data, call->run_id.data,
                       call->run_id.len) != 0)
    {
        call->nattempts = 0;
        ngx_http_sandbox_mcp_group_not_found(call);
        return;
    }

    call->next = 0;
    ngx_http_sandbox_mcp_cancel_next(call);
}


/* the group's next attempt, its pick run, or its answer */
static void
ngx_http_sandbox_mcp_cancel_next(ngx_http_sandbox_mcp_call_t *call)
{
    if (call->next < call->nattempts) {
        call->run_id = call->attempts[call->next++];
        ngx_http_sandbox_mcp_cancel_one(call);
        return;
    }

    if (call->next == call->nattempts && call->pick_run.len) {
        call->next++;
        call->run_id = call->pick_run;
        ngx_http_sandbox_mcp_cancel_one(call);
        return;
    }

    call->run_id = call->attempts[0];
    ngx_http_sandbox_mcp_call_run_read(call,
                                       ngx_http_sandbox_mcp_cancel_group_done,
                                       NULL, 0);
}


void
ngx_http_sandbox_mcp_cancel_run(ngx_http_sandbox_mcp_call_t *call)
{
    json_t  *run, *group;

    run = json_object_get(call->args, "runId");
    group = json_object_get(call->args, "groupId");

    if ((run == NULL) == (group == NULL)) {
        ngx_http_sandbox_mcp_tool_error(call, "Pass runId (one run) or "
                                        "groupId (every attempt of a "
                                        "group), one of them.");
        return;
    }

    if (run) {
        if (ngx_http_sandbox_mcp_arg_run_id(call) == NGX_OK) {
            ngx_http_sandbox_mcp_cancel_one(call);
        }

        return;
    }

    if (ngx_http_sandbox_mcp_arg_string(call, "groupId",
                                        NGX_HTTP_SANDBOX_MCP_ID_ARG_MAX,
                                        &call->run_id)
        != NGX_OK)
    {
        return;
    }

    if (!smcp_valid_id((char *) call->run_id.data, call->run_id.len,
                       SMCP_RUN_ID_PREFIX))
    {
        ngx_http_sandbox_mcp_group_not_found(call);
        return;
    }

    ngx_http_sandbox_mcp_call_run_read(call,
                                       ngx_http_sandbox_mcp_cancel_group_found,
                                       NULL, 0);
}
