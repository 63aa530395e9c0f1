/*
 * opencode_list_runs: the tenant's runs (or a session's), newest first, in
 * pages resumed by an opaque cursor.
 */

#include "ngx_http_sandbox_mcp_tool_list.h"
#include "ngx_http_sandbox_mcp_args.h"
#include "ngx_http_sandbox_mcp_redis.h"
#include "ngx_http_sandbox_mcp_run.h"
#include "ngx_http_sandbox_mcp_scripts.h"
#include "ngx_http_sandbox_mcp_tools.h"
#include "ngx_http_sandbox_mcp_defaults.h"

#include "smcp_validate.h"


static void
ngx_http_sandbox_mcp_list_reply(void *data, redisReply *reply)
{
    ngx_http_sandbox_mcp_call_t *call = data;

    size_t       i;
    json_t      *runs, *run, *next;
    redisReply  *items, *it;
    char         text[128];

    if (ngx_http_sandbox_mcp_reply_failed(call, reply)) {
        return;
    }

    if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 3
        || reply->element[2]->type != REDIS_REPLY_ARRAY)
    {
        ngx_http_sandbox_mcp_tool_unavailable(call);
        return;
    }

    runs = json_array();
    items = reply->element[2];

    for (i = 0; runs && i < items->elements; i++) {
        it = items->element[i];

        if (it->type != REDIS_REPLY_ARRAY || it->elements != 6) {
            continue;
        }

        run = json_pack("{s:o, s:o, s:o, s:o, s:o, s:o}",
                        "runId", ngx_http_sandbox_mcp_json_text(
                                     it->element[0], 0),
                        "status", ngx_http_sandbox_mcp_json_text(
                                      it->element[1], 0),
                        "sessionId", ngx_http_sandbox_mcp_json_text(
                                         it->element[2], 0),
                        "title", ngx_http_sandbox_mcp_json_text(
                                     it->element[3], 0),
                        "createdAt", ngx_http_sandbox_mcp_json_time(
                                         it->element[4]),
                        "finishedAt", ngx_http_sandbox_mcp_json_time(
                                          it->element[5]));

        json_array_append_new(runs, run);
    }

    next = NULL;

    if (reply->element[0]->type == REDIS_REPLY_STRING
        && reply->element[0]->len > 0 && reply->element[0]->len < 64
        && reply->element[1]->type == REDIS_REPLY_STRING
        && reply->element[1]->len < 32)
    {
        ngx_snprintf((u_char *) text, sizeof(text), "r:%*s:%*s%Z",
                     reply->element[0]->len, reply->element[0]->str,
                     reply->element[1]->len, reply->element[1]->str);
        next = ngx_http_sandbox_mcp_cursor_encode(text);
    }

    ngx_http_sandbox_mcp_tool_output(call,
        json_pack("{s:o, s:o*}", "runs", runs, "nextCursor", next));
}


void
ngx_http_sandbox_mcp_list_runs(ngx_http_sandbox_mcp_call_t *call)
{
    json_int_t                   limit;
    ngx_str_t                    session, status, cid, cscore, args[7];
    ngx_pool_t                  *pool;
    json_t                      *cursor;
    ngx_http_sandbox_mcp_key_t   keys[2];
    char                         id[SMCP_ID_LEN + 1], score[20];

    pool = call->ctx->request->pool;

    if (ngx_http_sandbox_mcp_arg_string(call, "sessionId",
                                        NGX_HTTP_SANDBOX_MCP_ID_ARG_MAX,
                                        &session)
        != NGX_OK
        || ngx_http_sandbox_mcp_arg_string(call, "status",
                                           NGX_HTTP_SANDBOX_MCP_STATUS_ARG_MAX,
                                           &status)
           != NGX_OK)
    {
        return;
    }

    if (session.len
        && !smcp_valid_id((char *) session.data, session.len,
                          SMCP_SESSION_ID_PREFIX))
    {
        ngx_http_sandbox_mcp_tool_error(call, "Unknown sessionId: sessionIds "
                                        "look like ses_ followed by 24 hex "
                                        "digits.");
        return;
    }

    /* the schema's bounds and default (tools/opencode_list_runs.json) */
    if (ngx_http_sandbox_mcp_arg_integer(call, "limit",
                                         NGX_HTTP_SANDBOX_MCP_ARG_ANY_INT,
                                         &limit)
        != NGX_OK)
    {
        return;
    }

    ngx_str_null(&cid);
    ngx_str_null(&cscore);

    cursor = json_object_get(call->args, "cursor");

    if (cursor && !json_is_null(cursor)) {
        /* r:<run id>:<score> */
        if (smcp_cursor_run(json_string_value(cursor),
                            json_string_length(cursor), id, score)
            != SMCP_OK)
        {
            ngx_http_sandbox_mcp_tool_error(call, "Argument 'cursor' is not "
                                            "a cursor this server gave "
                                            "(pass nextCursor unchanged).");
            return;
        }

        cid.len = SMCP_ID_LEN;
        cscore.len = ngx_strlen(score);
        cid.data = ngx_pnalloc(pool, cid.len + cscore.len);
        if (cid.data == NULL) {
            ngx_http_sandbox_mcp_tool_unavailable(call);
            return;
        }

        cscore.data = ngx_cpymem(cid.data, id, cid.len);
        ngx_memcpy(cscore.data, score, cscore.len);
    }

    if (session.len) {
        keys[0].fmt = SMCP_KEY_SESSION_RUNS;
        keys[0].arg = &session;
        keys[1].fmt = SMCP_KEY_SESSION;
        keys[1].arg = &session;

    } else {
        keys[0].fmt = SMCP_KEY_TENANT_RUNS;
        keys[0].arg = &call->ctx->tenant;
        keys[1].fmt = "";               /* no session to check */
        keys[1].arg = NULL;
    }

    if (ngx_http_sandbox_mcp_redis_key(pool, &args[5], SMCP_KEY_RUN, NULL)
        != NGX_OK)
    {
        ngx_http_sandbox_mcp_tool_unavailable(call);
        return;
    }

    args[0] = call->ctx->tenant;
    args[1] = ngx_http_sandbox_mcp_redis_number(pool, limit);
    args[2] = cid;
    args[3] = cscore;
    args[4] = status;
    ngx_str_set(&args[6], NGX_HTTP_SANDBOX_MCP_LIST_BUDGET);

    ngx_http_sandbox_mcp_call_script(call,
                                     &ngx_http_sandbox_mcp_script_run_list,
                                     ngx_http_sandbox_mcp_list_reply,
                                     keys, 2, args, 7);
}
