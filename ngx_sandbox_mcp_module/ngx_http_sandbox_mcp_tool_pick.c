/*
 * opencode_pick_attempt: the attempt of a group kept.  Its branch was
 * pushed when it ended, without a pull request (pr_status `pushed`); the
 * script run_pick queues a run in its session, `pr_of` the attempt, which
 * the runner takes without a sandbox to open the pull request of that
 * branch.  The token that picks must grant every repository of the
 * attempt, and the tenant's budgets hold as for any new run.  Two steps:
 * the attempt's tenant and session are read first, as the script is
 * handed every key it touches.  call->run_id is the attempt, call->path
 * its session, call->attempts[0] the group and [1] the new run.
 */

#include "ngx_http_sandbox_mcp_tool_pick.h"
#include "ngx_http_sandbox_mcp_args.h"
#include "ngx_http_sandbox_mcp_redis.h"
#include "ngx_http_sandbox_mcp_run.h"
#include "ngx_http_sandbox_mcp_scripts.h"
#include "ngx_http_sandbox_mcp_tools.h"
#include "ngx_http_sandbox_mcp_tool_run_task.h"

#include "smcp_validate.h"


static void
ngx_http_sandbox_mcp_pick_not_found(ngx_http_sandbox_mcp_call_t *call)
{
    ngx_http_sandbox_mcp_tool_error(call, "Attempt not found: %V is not an "
                                    "attempt of group %V (a groupId is the "
                                    "runId of a group's first attempt; "
                                    "opencode_get_result on any attempt "
                                    "lists them).", &call->run_id,
                                    &call->attempts[0]);
}


/* run_pick's answer {NAME, STRING...}: n strings, the first s */
static ngx_uint_t
ngx_http_sandbox_mcp_pick_is(redisReply *reply, size_t n, const char *s)
{
    redisReply  **e;

    if (reply->type != REDIS_REPLY_ARRAY || reply->elements != n) {
        return 0;
    }

    e = reply->element;

    while (n--) {
        if (e[n]->type != REDIS_REPLY_STRING) {
            return 0;
        }
    }

    return e[0]->len == ngx_strlen(s)
           && ngx_strncmp(e[0]->str, s, e[0]->len) == 0;
}


static void
ngx_http_sandbox_mcp_pick_reply(void *data, redisReply *reply)
{
    ngx_http_sandbox_mcp_call_t *call = data;

    json_t                           *out;
    ngx_str_t                         url, pr;
    redisReply                      **e;
    ngx_http_sandbox_mcp_loc_conf_t  *lcf;

    if (ngx_http_sandbox_mcp_reply_failed(call, reply)) {
        return;
    }

    lcf = ngx_http_get_module_loc_conf(call->ctx->request,
                                       ngx_http_sandbox_mcp_module);
    e = reply->element;

    if (ngx_http_sandbox_mcp_pick_is(reply, 2, "grant")) {
        ngx_http_sandbox_mcp_tool_error(call, "Attempt %V works on %*s, "
                                        "which this token does not grant: "
                                        "only a token granting every "
                                        "repository of the attempt may pick "
                                        "it.", &call->run_id,
                                        (size_t) ngx_min(e[1]->len, 200),
                                        e[1]->str);
        return;
    }

    if (ngx_http_sandbox_mcp_pick_is(reply, 2, "picked")) {
        ngx_http_sandbox_mcp_tool_error(call, "Group %V has its pick "
                                        "already: %*s (its pull request is "
                                        "opened once, for one attempt).",
                                        &call->attempts[0],
                                        (size_t) ngx_min(e[1]->len, 64),
                                        e[1]->str);
        return;
    }

    if (ngx_http_sandbox_mcp_pick_is(reply, 3, "state")) {
        pr.len = ngx_min(e[2]->len, 32);
        pr.data = (u_char *) e[2]->str;

        if (pr.len == 0) {
            ngx_str_set(&pr, "none");
        }

        ngx_http_sandbox_mcp_tool_error(call, "Attempt %V cannot be picked: "
                                        "it is %*s, its pull request status "
                                        "%V; only an attempt that completed "
                                        "with its branch pushed (\"pushed\": "
                                        "opencode_run_task with attempts and "
                                        "createPullRequest, no draft) can.",
                                        &call->run_id,
                                        (size_t) ngx_min(e[1]->len, 32),
                                        e[1]->str, &pr);
        return;
    }

    if (reply->type == REDIS_REPLY_INTEGER
        && ngx_http_sandbox_mcp_tool_budget_error(call, reply->integer)
           == NGX_OK)
    {
        return;
    }

    switch (reply->type == REDIS_REPLY_INTEGER ? reply->integer : 0) {

    case 1:
        break;

    case -1:
        ngx_http_sandbox_mcp_tool_error(call, "Session expired: the "
                                        "workspace of attempt %V was "
                                        "removed; its branch, pushed, is "
                                        "still there to open a pull request "
                                        "from by hand.", &call->run_id);
        return;

    case -2:
        ngx_http_sandbox_mcp_tool_error(call, "Too many runs waiting to "
                                        "start: you already have %ui queued "
                                        "runs, the limit (picking queues "
                                        "one). Try again once some started.",
                                        lcf->max_queued);
        return;

    default:
        ngx_http_sandbox_mcp_pick_not_found(call);
        return;
    }

    out = json_pack("{s:s%, s:s%, s:s%, s:s}",
                    "groupId", call->attempts[0].data, call->attempts[0].len,
                    "runId", call->run_id.data, call->run_id.len,
                    "pickRunId", call->attempts[1].data, call->attempts[1].len,
                    "status", SMCP_STATUS_STARTED);

    if (out && ngx_http_sandbox_mcp_watch_url_text(call, &call->attempts[1],
                                                   &url)
               == NGX_OK)
    {
        json_object_set_new(out, "watchUrl",
                            json_stringn((char *) url.data, url.len));
    }

    ngx_http_sandbox_mcp_tool_output(call, out);
}


/* the attempt is the tenant's, of the session in call->path */
static void
ngx_http_sandbox_mcp_pick_send(ngx_http_sandbox_mcp_call_t *call)
{
    int64_t                           now;
    ngx_str_t                         args[17], *g, *n;
    ngx_pool_t                       *pool;
    ngx_http_sandbox_mcp_loc_conf_t  *lcf;
    ngx_http_sandbox_mcp_key_t        keys[14];

    pool = call->ctx->request->pool;
    lcf = ngx_http_get_module_loc_conf(call->ctx->request,
                                       ngx_http_sandbox_mcp_module);
    g = &call->attempts[0];
    n = &call->attempts[1];
    now = ngx_http_sandbox_mcp_now_ms();

    keys[0] = (ngx_http_sandbox_mcp_key_t) { SMCP_KEY_RUN, g };
    keys[1] = (ngx_http_sandbox_mcp_key_t) { SMCP_KEY_RUN, &call->run_id };
    keys[2] = (ngx_http_sandbox_mcp_key_t) { SMCP_KEY_RUN, n };
    keys[3] = (ngx_http_sandbox_mcp_key_t) { SMCP_KEY_RUN_EVENTS, n };
    keys[4] = (ngx_http_sandbox_mcp_key_t) { SMCP_KEY_SESSION, &call->path };
    keys[5] = (ngx_http_sandbox_mcp_key_t) { SMCP_KEY_SESSION_RUNS,
                                             &call->path };
    keys[6] = (ngx_http_sandbox_mcp_key_t) { SMCP_KEY_SESSION_ACTIVE,
                                             &call->path };
    keys[7] = (ngx_http_sandbox_mcp_key_t) { SMCP_KEY_TENANT_STARTED,
                                             &call->ctx->tenant };
    keys[8] = (ngx_http_sandbox_mcp_key_t) { SMCP_KEY_TENANT_RUNS,
                                             &call->ctx->tenant };
    keys[9] = (ngx_http_sandbox_mcp_key_t) { SMCP_KEY_QUEUE, NULL };
    keys[10] = (ngx_http_sandbox_mcp_key_t) { SMCP_CHAN_TENANT,
                                              &call->ctx->tenant };
    keys[11] = (ngx_http_sandbox_mcp_key_t) { SMCP_KEY_SESSIONS, NULL };
    keys[12] = (ngx_http_sandbox_mcp_key_t) { SMCP_KEY_TENANT_SESSIONS,
                                              &call->ctx->tenant };
    keys[13] = (ngx_http_sandbox_mcp_key_t) { SMCP_KEY_TENANT_USAGE,
                                              &call->ctx->tenant };

    args[0] = call->ctx->tenant;
    args[1] = ngx_http_sandbox_mcp_redis_number(pool, now);
    args[2] = *g;
    args[3] = call->run_id;
    args[4] = *n;
    args[5] = call->path;
    args[6] = ngx_http_sandbox_mcp_events_maxlen;

    if (ngx_http_sandbox_mcp_run_page(call, n, 0, &args[7]) != NGX_OK) {
        ngx_http_sandbox_mcp_tool_unavailable(call);
        return;
    }

    args[8] = ngx_http_sandbox_mcp_redis_number(pool, lcf->max_queued);
    args[9] = ngx_http_sandbox_mcp_redis_number(pool,
                                      now + (int64_t) lcf->session_idle * 1000);
    ngx_str_set(&args[10], SMCP_STATUS_STARTED);
    ngx_str_set(&args[11], SMCP_STATUS_COMPLETED);
    ngx_str_set(&args[12], SMCP_SESSION_EXPIRING);
    ngx_str_set(&args[13], SMCP_SESSION_EXPIRED);

    /* the tenant's budgets (docs/contracts.md, "Tenant budgets"): the pick
     * run is one more run, of no new session */
    args[14] = ngx_http_sandbox_mcp_redis_number(pool, lcf->tenant_bytes);
    args[15] = ngx_http_sandbox_mcp_redis_number(pool, lcf->tenant_disk);

    /* the run page acts for the tenant; a client, for its token's grants
     * (every repository of the attempt: as opencode_send_message) */
    if (call->ctx->dashboard) {
        ngx_str_set(&args[16], "*");

    } else if (ngx_http_sandbox_mcp_task_grants(call, &args[16]) != NGX_OK) {
        ngx_http_sandbox_mcp_tool_unavailable(call);
        return;
    }

    ngx_http_sandbox_mcp_call_script(call,
                                     &ngx_http_sandbox_mcp_script_run_pick,
                                     ngx_http_sandbox_mcp_pick_reply,
                                     keys, 14, args, 17);
}


/* HMGET run tenant session */
static void
ngx_http_sandbox_mcp_pick_found(void *data, redisReply *reply)
{
    ngx_http_sandbox_mcp_call_t *call = data;

    redisReply  *t, *s;

    if (ngx_http_sandbox_mcp_reply_failed(call, reply)) {
        return;
    }

    if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2) {
        ngx_http_sandbox_mcp_pick_not_found(call);
        return;
    }

    t = reply->element[0];
    s = reply->element[1];

    if (t->type != REDIS_REPLY_STRING || t->len != call->ctx->tenant.len
        || ngx_strncmp(t->str, call->ctx->tenant.data, t->len) != 0)
    {
        ngx_http_sandbox_mcp_pick_not_found(call);
        return;
    }

    switch (ngx_http_sandbox_mcp_reply_id(call, s, SMCP_SESSION_ID_PREFIX,
                                          &call->path))
    {
    case NGX_OK:
        break;

    case NGX_DECLINED:
        ngx_http_sandbox_mcp_pick_not_found(call);
        return;

    default:
        ngx_http_sandbox_mcp_tool_unavailable(call);
        return;
    }

    ngx_http_sandbox_mcp_pick_send(call);
}


void
ngx_http_sandbox_mcp_pick_attempt(ngx_http_sandbox_mcp_call_t *call)
{
    u_char             *p;
    char                id[SMCP_ID_LEN + 1];
    static const char  *fields[] = { "tenant", "session" };

    call->attempts = ngx_palloc(call->ctx->request->pool,
                                2 * sizeof(ngx_str_t));
    p = ngx_pnalloc(call->ctx->request->pool, SMCP_ID_LEN);

    if (call->attempts == NULL || p == NULL
        || smcp_make_id(id, SMCP_RUN_ID_PREFIX) != SMCP_OK)
    {
        ngx_http_sandbox_mcp_tool_unavailable(call);
        return;
    }

    ngx_memcpy(p, id, SMCP_ID_LEN);
    call->attempts[1].data = p;
    call->attempts[1].len = SMCP_ID_LEN;

    if (ngx_http_sandbox_mcp_arg_string(call, "groupId",
                                        NGX_HTTP_SANDBOX_MCP_ID_ARG_MAX,
                                        &call->attempts[0])
        != NGX_OK
        || ngx_http_sandbox_mcp_arg_run_id(call) != NGX_OK)
    {
        return;
    }

    if (!smcp_valid_id((char *) call->attempts[0].data, call->attempts[0].len,
                       SMCP_RUN_ID_PREFIX))
    {
        ngx_http_sandbox_mcp_pick_not_found(call);
        return;
    }

    ngx_http_sandbox_mcp_call_run_read(call, ngx_http_sandbox_mcp_pick_found,
                                       fields, 2);
}
