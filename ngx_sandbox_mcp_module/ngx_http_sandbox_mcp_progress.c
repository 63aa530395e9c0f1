/*
 * Progress of a waiting call, as text/event-stream.  Started once the run
 * is known to be the tenant's and not ended (a call answered at once stays
 * application/json), or, for tasks/result, ended too.  The session's log
 * level is read first, then the run's events from its start, 100 at a
 * time, again on every wake of the run's channel: an agent's tool call or
 * reply is a notifications/progress (progress 1, 2, 3 ...: "ran `npm
 * test`", "write /workspace/repo/x") when the call carries a
 * progressToken, a lifecycle line a notifications/message (info; "error"
 * for a failed step).  A call without a progressToken streams only when
 * its session set a level (logging/setLevel): its lifecycle lines, then
 * the answer; without either nothing changes (the answer as JSON).  When
 * the call has its answer, the events are read to their end and the
 * answer is the stream's last message.  At most
 * NGX_HTTP_SANDBOX_MCP_PROGRESS_MAX notifications a request.
 */

#include "ngx_http_sandbox_mcp_progress.h"
#include "ngx_http_sandbox_mcp_sse.h"
#include "ngx_http_sandbox_mcp_request.h"
#include "ngx_http_sandbox_mcp_http.h"
#include "ngx_http_sandbox_mcp_redis.h"
#include "ngx_http_sandbox_mcp_run.h"
#include "ngx_http_sandbox_mcp_call.h"

#include "smcp_validate.h"


#define NGX_HTTP_SANDBOX_MCP_PROGRESS_MAX    1000
#define NGX_HTTP_SANDBOX_MCP_PROGRESS_TEXT   200     /* a message's bytes */
#define NGX_HTTP_SANDBOX_MCP_TOKEN_MAX       256     /* a string token */


typedef struct {
    ngx_http_sandbox_mcp_call_t       *call;
    json_t                            *token;
    ngx_http_sandbox_mcp_redis_cmd_t  *cmd;
    u_char                             after[SMCP_STREAM_ID_MAX + 2];
    ngx_str_t                          start;      /* "-" or "(<after>" */
    ngx_int_t                          level;      /* rank sent from */
    ngx_uint_t                         progress;
    ngx_uint_t                         sent;

    unsigned                           again:1;    /* woken while reading */
    unsigned                           finishing:1;
    unsigned                           streaming:1; /* the header sent */
} ngx_http_sandbox_mcp_progress_t;


static const char  *ngx_http_sandbox_mcp_log_levels[] = {
    "debug", "info", "notice", "warning", "error", "critical", "alert",
    "emergency", NULL
};


static void ngx_http_sandbox_mcp_progress_read(
    ngx_http_sandbox_mcp_progress_t *p);


const char *
ngx_http_sandbox_mcp_log_name(ngx_int_t rank)
{
    return ngx_http_sandbox_mcp_log_levels[rank];
}


ngx_int_t
ngx_http_sandbox_mcp_log_rank(const char *level, size_t len)
{
    ngx_int_t  i;

    for (i = 0; ngx_http_sandbox_mcp_log_levels[i]; i++) {
        if (ngx_strlen(ngx_http_sandbox_mcp_log_levels[i]) == len
            && ngx_strncmp(ngx_http_sandbox_mcp_log_levels[i], level, len)
               == 0)
        {
            return i;
        }
    }

    return -1;
}


static ngx_int_t
ngx_http_sandbox_mcp_progress_notify(ngx_http_sandbox_mcp_progress_t *p,
    const char *method, json_t *params)
{
    if (params == NULL) {
        return NGX_OK;
    }

    if (p->sent++ >= NGX_HTTP_SANDBOX_MCP_PROGRESS_MAX) {
        json_decref(params);
        return NGX_OK;
    }

    if (p->call->until_end) {
        /* tasks/result: the task it is about (the run) */
        json_object_set_new(params, "_meta",
            json_pack("{s:{s:s%}}", "io.modelcontextprotocol/related-task",
                      "taskId", (char *) p->call->run_id.data,
                      p->call->run_id.len));
    }

    return ngx_http_sandbox_mcp_sse_send(p->call->ctx->request, -1,
               json_pack("{s:s, s:s, s:o}", "jsonrpc", "2.0",
                         "method", method, "params", params), 0);
}


/* the one line saying what an agent event did, in buf; 0: none */
static ngx_uint_t
ngx_http_sandbox_mcp_progress_text(json_t *d, u_char *buf, size_t size)
{
    json_t      *part, *input;
    const char  *type, *tool, *arg;
    u_char      *p;

    type = json_string_value(json_object_get(d, "type"));
    part = json_object_get(d, "part");

    if (type == NULL) {
        return 0;
    }

    if (ngx_strcmp(type, "tool_use") == 0) {
        tool = json_string_value(json_object_get(part, "tool"));
        input = json_object_get(json_object_get(part, "state"), "input");

        if (tool == NULL) {
            tool = "a tool";
        }

        arg = json_string_value(json_object_get(input, "command"));

        if (arg && ngx_strcmp(tool, "bash") == 0) {
            p = ngx_snprintf(buf, size - 1, "ran `%s`", arg);

        } else {
            arg = json_string_value(json_object_get(input, "filePath"));
            if (arg == NULL) {
                arg = json_string_value(json_object_get(input, "pattern"));
            }

            p = arg ? ngx_snprintf(buf, size - 1, "%s %s", tool, arg)
                    : ngx_snprintf(buf, size - 1, "used %s", tool);
        }

    } else if (ngx_strcmp(type, "text") == 0) {
        p = ngx_snprintf(buf, size - 1, "replied");

    } else if (ngx_strcmp(type, "error") == 0) {
        p = ngx_snprintf(buf, size - 1, "the agent reported an error");

    } else {
        return 0;
    }

    *p = '\0';
    smcp_utf8_sanitize((char *) buf, p - buf);

    return 1;
}


/* one stored event: a progress step, a log line, or nothing */
static ngx_int_t
ngx_http_sandbox_mcp_progress_event(ngx_http_sandbox_mcp_progress_t *p,
    redisReply *type, redisReply *data)
{
    json_t      *d;
    ngx_int_t    rc, rank;
    const char  *step;
    u_char       text[NGX_HTTP_SANDBOX_MCP_PROGRESS_TEXT];

    if (type == NULL || data == NULL || data->type != REDIS_REPLY_STRING) {
        return NGX_OK;
    }

    d = json_loadb(data->str, data->len, 0, NULL);
    if (d == NULL) {
        return NGX_OK;
    }

    rc = NGX_OK;

    if (type->len == 5 && ngx_strncmp(type->str, "agent", 5) == 0) {
        if (p->token
            && ngx_http_sandbox_mcp_progress_text(d, text, sizeof(text)))
        {
            rc = ngx_http_sandbox_mcp_progress_notify(p,
                     "notifications/progress",
                     json_pack("{s:O, s:I, s:s}",
                               "progressToken", p->token,
                               "progress", (json_int_t) ++p->progress,
                               "message", (char *) text));
        }

    } else if (type->len == 9 && ngx_strncmp(type->str, "lifecycle", 9) == 0)
    {
        step = json_string_value(json_object_get(d, "step"));
        rank = (step && ngx_strstr(step, "fail"))
               ? ngx_http_sandbox_mcp_log_rank("error", 5)
               : ngx_http_sandbox_mcp_log_rank("info", 4);

        if (rank >= p->level) {
            rc = ngx_http_sandbox_mcp_progress_notify(p,
                     "notifications/message",
                     json_pack("{s:s, s:s, s:{s:s%, s:O}}",
                               "level", ngx_http_sandbox_mcp_log_name(rank),
                               "logger", "run",
                               "data",
                                   "runId",
                                   (char *) p->call->run_id.data,
                                   p->call->run_id.len,
                                   "event", d));
        }
    }

    json_decref(d);

    return rc;
}


/* the answer, last: the call is done and every event was read */
static void
ngx_http_sandbox_mcp_progress_end(ngx_http_sandbox_mcp_progress_t *p)
{
    ngx_int_t                     rc;
    ngx_http_sandbox_mcp_call_t  *call;

    call = p->call;

    rc = ngx_http_sandbox_mcp_sse_send(call->ctx->request, -1,
                                       json_incref(call->response), 1);

    ngx_http_sandbox_mcp_finalize(call->ctx, rc == NGX_OK ? NGX_OK
                                                          : NGX_ERROR);
}


static void
ngx_http_sandbox_mcp_progress_events(void *data, redisReply *reply)
{
    ngx_http_sandbox_mcp_progress_t *p = data;

    size_t       i, j;
    redisReply  *e, *f, *type, *d;

    p->cmd = NULL;

    if (p->call->ctx->done) {
        /* cancelled: the stream was closed */
        return;
    }

    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY) {
        /* Redis away: no more progress; the call answers on its own */
        if (p->finishing) {
            ngx_http_sandbox_mcp_progress_end(p);
        }

        return;
    }

    for (i = 0; i < reply->elements; i++) {
        e = reply->element[i];

        if (e->type != REDIS_REPLY_ARRAY || e->elements != 2
            || e->element[0]->type != REDIS_REPLY_STRING
            || e->element[0]->len > SMCP_STREAM_ID_MAX)
        {
            continue;
        }

        p->start.len = ngx_sprintf(p->after, "(%*s", e->element[0]->len,
                                   e->element[0]->str) - p->after;
        p->start.data = p->after;

        f = e->element[1];
        type = NULL;
        d = NULL;

        for (j = 0; f->type == REDIS_REPLY_ARRAY && j + 1 < f->elements;
             j += 2)
        {
            if (f->element[j]->len == 4
                && ngx_strncmp(f->element[j]->str, "type", 4) == 0)
            {
                type = f->element[j + 1];

            } else if (f->element[j]->len == 4
                       && ngx_strncmp(f->element[j]->str, "data", 4) == 0)
            {
                d = f->element[j + 1];
            }
        }

        if (ngx_http_sandbox_mcp_progress_event(p, type, d) != NGX_OK) {
            ngx_http_sandbox_mcp_finalize(p->call->ctx, NGX_ERROR);
            return;
        }
    }

    if (reply->elements == 100 || p->again) {
        ngx_http_sandbox_mcp_progress_read(p);
        return;
    }

    if (p->finishing) {
        ngx_http_sandbox_mcp_progress_end(p);
    }
}


static void
ngx_http_sandbox_mcp_progress_read(ngx_http_sandbox_mcp_progress_t *p)
{
    ngx_str_t  argv[6];

    p->again = 0;

    ngx_str_set(&argv[0], "XRANGE");
    argv[2] = p->start;
    ngx_str_set(&argv[3], "+");
    ngx_str_set(&argv[4], "COUNT");
    ngx_str_set(&argv[5], "100");

    if (ngx_http_sandbox_mcp_redis_key(p->call->ctx->request->pool, &argv[1],
                                       SMCP_KEY_RUN_EVENTS,
                                       &p->call->run_id)
        == NGX_OK)
    {
        p->cmd = ngx_http_sandbox_mcp_redis_command(
                     ngx_http_sandbox_mcp_progress_events, p, 6, argv);
    }

    if (p->cmd == NULL && p->finishing) {
        ngx_http_sandbox_mcp_progress_end(p);
    }
}


/* the answer becomes a stream: its header now */
static ngx_int_t
ngx_http_sandbox_mcp_progress_stream(ngx_http_sandbox_mcp_progress_t *p)
{
    ngx_http_request_t  *r;

    r = p->call->ctx->request;

    if (ngx_http_sandbox_mcp_sse_header(r) != NGX_OK) {
        return NGX_ERROR;
    }

    p->streaming = 1;
    r->write_event_handler = ngx_http_sandbox_mcp_sse_writer;

    return NGX_OK;
}


/* nothing to stream after all: the call answers as it would have, now if
 * it has its answer already */
static void
ngx_http_sandbox_mcp_progress_decline(ngx_http_sandbox_mcp_progress_t *p)
{
    ngx_int_t                    rc;
    ngx_http_sandbox_mcp_ctx_t  *ctx;

    ctx = p->call->ctx;

    ctx->finish = NULL;
    ctx->data = NULL;
    p->call->progress = 0;

    if (!p->finishing) {
        return;
    }

    rc = ngx_http_sandbox_mcp_call_finish(ctx);

    if (rc != NGX_DONE) {
        ngx_http_sandbox_mcp_finalize(ctx, rc);
    }
}


/* the session's level (GET mcp:{sid}:log) */
static void
ngx_http_sandbox_mcp_progress_level(void *data, redisReply *reply)
{
    ngx_http_sandbox_mcp_progress_t *p = data;

    ngx_int_t  rank;

    p->cmd = NULL;

    if (p->call->ctx->done) {
        return;
    }

    rank = -1;

    if (reply && reply->type == REDIS_REPLY_STRING) {
        rank = ngx_http_sandbox_mcp_log_rank(reply->str, reply->len);
        if (rank >= 0) {
            p->level = rank;
        }
    }

    if (!p->streaming) {
        /* no progressToken: a stream only for a session that set a
         * level */
        if (rank < 0 || ngx_http_sandbox_mcp_progress_stream(p) != NGX_OK) {
            ngx_http_sandbox_mcp_progress_decline(p);
            return;
        }
    }

    ngx_http_sandbox_mcp_progress_read(p);
}


/* the call has its answer: the events to their end, then the answer */
static ngx_int_t
ngx_http_sandbox_mcp_progress_finish(ngx_http_sandbox_mcp_ctx_t *ctx)
{
    ngx_http_sandbox_mcp_progress_t *p = ctx->data;

    p->finishing = 1;

    if (p->cmd == NULL) {
        ngx_http_sandbox_mcp_progress_read(p);
    }

    return NGX_DONE;
}


static void
ngx_http_sandbox_mcp_progress_cleanup(void *data)
{
    ngx_http_sandbox_mcp_progress_t *p = data;

    if (p->cmd) {
        ngx_http_sandbox_mcp_redis_cancel(p->cmd);
        p->cmd = NULL;
    }
}


void
ngx_http_sandbox_mcp_progress_start(ngx_http_sandbox_mcp_call_t *call,
    ngx_uint_t ended)
{
    json_t                           *token;
    ngx_str_t                         argv[2];
    ngx_pool_cleanup_t               *cln;
    ngx_http_request_t               *r;
    ngx_http_sandbox_mcp_ctx_t       *ctx;
    ngx_http_sandbox_mcp_progress_t  *p;

    ctx = call->ctx;
    r = ctx->request;

    /* a run that ended has no progress to tell, only its lifecycle */
    token = ended ? NULL : call->progress_token;

    if (token
        && !(json_is_integer(token)
             || (json_is_string(token)
                 && json_string_length(token)
                    <= NGX_HTTP_SANDBOX_MCP_TOKEN_MAX)))
    {
        return;
    }

    if (ctx->batch || ctx->finish || ctx->data || r->header_sent) {
        return;
    }

    p = ngx_pcalloc(r->pool, sizeof(ngx_http_sandbox_mcp_progress_t));
    cln = ngx_pool_cleanup_add(r->pool, 0);

    if (p == NULL || cln == NULL) {
        return;
    }

    p->call = call;
    p->token = token;
    p->level = ngx_http_sandbox_mcp_log_rank("info", 4);
    ngx_str_set(&p->start, "-");

    if (token && ngx_http_sandbox_mcp_progress_stream(p) != NGX_OK) {
        return;
    }

    cln->handler = ngx_http_sandbox_mcp_progress_cleanup;
    cln->data = p;

    /* the answer waits for the stream, or for the level's reply that
     * decides whether there is one */
    ctx->finish = ngx_http_sandbox_mcp_progress_finish;
    ctx->data = p;
    call->progress = 1;

    ngx_str_set(&argv[0], "GET");

    if (ngx_http_sandbox_mcp_redis_key(r->pool, &argv[1], SMCP_KEY_MCP_LOG,
                                       &ctx->session_id)
        == NGX_OK)
    {
        p->cmd = ngx_http_sandbox_mcp_redis_command(
                     ngx_http_sandbox_mcp_progress_level, p, 2, argv);
    }

    if (p->cmd == NULL) {
        if (!p->streaming) {
            ngx_http_sandbox_mcp_progress_decline(p);
            return;
        }

        ngx_http_sandbox_mcp_progress_read(p);
    }
}


void
ngx_http_sandbox_mcp_progress_wake(ngx_http_sandbox_mcp_call_t *call)
{
    ngx_http_sandbox_mcp_progress_t *p = call->ctx->data;

    if (p->cmd) {
        p->again = 1;
        return;
    }

    ngx_http_sandbox_mcp_progress_read(p);
}
