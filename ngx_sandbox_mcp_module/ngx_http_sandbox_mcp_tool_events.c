/*
 * opencode_get_events: a run's event log in pages.
 */

#include "ngx_http_sandbox_mcp_tool_events.h"
#include "ngx_http_sandbox_mcp_args.h"
#include "ngx_http_sandbox_mcp_redis.h"
#include "ngx_http_sandbox_mcp_run.h"
#include "ngx_http_sandbox_mcp_scripts.h"
#include "ngx_http_sandbox_mcp_tools.h"
#include "ngx_http_sandbox_mcp_defaults.h"

#include "smcp_validate.h"


/* an entry of XRANGE: {id, type, time, data}; NULL when malformed */
json_t *
ngx_http_sandbox_mcp_event_object(redisReply *e)
{
    json_t      *payload;
    redisReply  *fields, *type, *d;

    if (e->type != REDIS_REPLY_ARRAY || e->elements != 2
        || e->element[0]->type != REDIS_REPLY_STRING
        || e->element[1]->type != REDIS_REPLY_ARRAY)
    {
        return NULL;
    }

    fields = e->element[1];
    type = ngx_http_sandbox_mcp_field(fields, "type");
    d = ngx_http_sandbox_mcp_field(fields, "data");

    payload = NULL;

    if (d && d->type == REDIS_REPLY_STRING) {
        payload = json_loadb(d->str, d->len, JSON_DECODE_ANY, NULL);
        if (payload == NULL) {
            payload = ngx_http_sandbox_mcp_json_text(d, 0);
        }
    }

    return json_pack("{s:o, s:o, s:o, s:o}",
                     "id", ngx_http_sandbox_mcp_json_text(e->element[0], 0),
                     "type", ngx_http_sandbox_mcp_json_text(type, 0),
                     "time", ngx_http_sandbox_mcp_json_time(
                                 ngx_http_sandbox_mcp_field(fields, "ts")),
                     "data", payload ? payload : json_null());
}


static void
ngx_http_sandbox_mcp_events_reply(void *data, redisReply *reply)
{
    ngx_http_sandbox_mcp_call_t *call = data;

    size_t       i;
    json_t      *events, *ev, *last;
    redisReply  *e, *id;

    if (ngx_http_sandbox_mcp_reply_failed(call, reply)) {
        return;
    }

    if (reply->type != REDIS_REPLY_ARRAY) {
        ngx_http_sandbox_mcp_run_not_found(call);
        return;
    }

    events = json_array();
    id = NULL;

    for (i = 0; events && i < reply->elements; i++) {
        e = reply->element[i];

        ev = ngx_http_sandbox_mcp_event_object(e);

        if (ev == NULL) {
            continue;
        }

        json_array_append_new(events, ev);

        if (e->element[0]->type == REDIS_REPLY_STRING) {
            id = e->element[0];
        }
    }

    if (id) {
        last = json_stringn(id->str, id->len);

    } else {
        /* nothing new: reading on starts where this page did */
        last = call->path.len ? json_stringn((char *) call->path.data,
                                             call->path.len)
                              : json_null();
    }

    ngx_http_sandbox_mcp_tool_output(call,
        json_pack("{s:s%, s:o, s:o}",
                  "runId", (char *) call->run_id.data, call->run_id.len,
                  "events", events, "nextAfter", last));
}


void
ngx_http_sandbox_mcp_get_events(ngx_http_sandbox_mcp_call_t *call)
{
    u_char                      *p;
    json_int_t                   limit;
    ngx_str_t                    start, args[3];
    ngx_pool_t                  *pool;
    ngx_http_sandbox_mcp_key_t   keys[2];

    pool = call->ctx->request->pool;

    /* call->path holds "after" */
    if (ngx_http_sandbox_mcp_arg_run_id(call) != NGX_OK
        || ngx_http_sandbox_mcp_arg_string(call, "after",
                                           SMCP_STREAM_ID_MAX, &call->path)
           != NGX_OK)
    {
        return;
    }

    if (call->path.len
        && !smcp_valid_stream_id((char *) call->path.data, call->path.len))
    {
        ngx_http_sandbox_mcp_tool_error(call, "Argument 'after' must be an "
                                        "event id such as 1764430000000-0 "
                                        "(pass nextAfter unchanged).");
        return;
    }

    /* the schema's bounds and default (tools/opencode_get_events.json) */
    if (ngx_http_sandbox_mcp_arg_integer(call, "limit",
                                         NGX_HTTP_SANDBOX_MCP_ARG_ANY_INT,
                                         &limit)
        != NGX_OK)
    {
        return;
    }

    if (call->path.len) {
        start.data = ngx_pnalloc(pool, call->path.len + 1);
        if (start.data == NULL) {
            ngx_http_sandbox_mcp_tool_unavailable(call);
            return;
        }

        p = start.data;
        *p++ = '(';
        p = ngx_cpymem(p, call->path.data, call->path.len);
        start.len = p - start.data;

    } else {
        ngx_str_set(&start, "-");
    }

    keys[0].fmt = SMCP_KEY_RUN;
    keys[0].arg = &call->run_id;
    keys[1].fmt = SMCP_KEY_RUN_EVENTS;
    keys[1].arg = &call->run_id;

    args[0] = call->ctx->tenant;
    args[1] = start;
    args[2] = ngx_http_sandbox_mcp_redis_number(pool, limit);

    ngx_http_sandbox_mcp_call_script(call,
                                     &ngx_http_sandbox_mcp_script_run_events,
                                     ngx_http_sandbox_mcp_events_reply,
                                     keys, 2, args, 3);
}
