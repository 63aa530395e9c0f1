/*
 * The session's GET stream and resource subscriptions.
 *
 * resources/subscribe {uri} adds the URI (a run resource of the tenant's)
 * to the set mcp:{sid}:subs (at most NGX_HTTP_SANDBOX_MCP_SUBS_MAX, kept
 * as long as a session may live); unsubscribe removes it.
 *
 * GET /mcp (a session's) is a text/event-stream that carries
 * notifications/resources/updated {uri} for the subscribed URIs whose run
 * changes status: it hears the tenant's channel (every script that changes
 * a status PUBLISHes "<runId> <status>" there), and reads the session's
 * subscriptions for each change (one worker connection, however many
 * streams).  Event ids are milliseconds since the epoch, increasing; the
 * first event (no data) gives the client the moment it starts from.  A
 * client that comes back with Last-Event-ID T gets, first, an update of
 * every subscribed URI whose run changed (created, started or ended) after
 * T, oldest first: what it missed, coalesced, which is all "updated" says.
 * One stream per session: a new one tells the others (on the session's
 * channel) and they end.
 *
 * A session that set a logging level (logging/setLevel; info when none)
 * also gets notifications/message {runId, status} for each status change
 * of the runs it subscribed to and of the runs it started itself (the
 * newest NGX_HTTP_SANDBOX_MCP_SESSION_RUNS_MAX, mcp:{sid}:runs, which
 * run_create.lua keeps), whether or not it asked for progress.
 */

#include "ngx_http_sandbox_mcp_stream.h"
#include "ngx_http_sandbox_mcp_request.h"
#include "ngx_http_sandbox_mcp_http.h"
#include "ngx_http_sandbox_mcp_call.h"
#include "ngx_http_sandbox_mcp_metrics.h"
#include "ngx_http_sandbox_mcp_progress.h"
#include "ngx_http_sandbox_mcp_sse.h"
#include "ngx_http_sandbox_mcp_redis.h"
#include "ngx_http_sandbox_mcp_run.h"
#include "ngx_http_sandbox_mcp_scripts.h"
#include "ngx_http_sandbox_mcp_tools.h"
#include "ngx_http_sandbox_mcp_waiter.h"

#include "smcp_validate.h"


#define NGX_HTTP_SANDBOX_MCP_SUBS_MAX      100
#define NGX_HTTP_SANDBOX_MCP_STREAM_PEND   64      /* changes awaiting a read */
#define NGX_HTTP_SANDBOX_MCP_RUN_URI       "opencode://runs/"
#define NGX_HTTP_SANDBOX_MCP_URI_MAX       64      /* .../events */
#define NGX_HTTP_SANDBOX_MCP_STATUS_MAX    16      /* a status word */


/* a status a run changed to, until the subscriptions are read */
typedef struct {
    u_char                             run[SMCP_ID_LEN];
    u_char                             status[NGX_HTTP_SANDBOX_MCP_STATUS_MAX];
    size_t                             status_len;
    unsigned                           subscribed:1;
    unsigned                           own:1;     /* the session started it */
} ngx_http_sandbox_mcp_change_t;


typedef struct {
    ngx_http_sandbox_mcp_ctx_t        *ctx;
    ngx_http_sandbox_mcp_watch_t       tenant;
    ngx_http_sandbox_mcp_watch_t       session;
    ngx_http_sandbox_mcp_redis_cmd_t  *cmd;
    ngx_event_t                        heartbeat;
    int64_t                            last;       /* the last event id */
    int64_t                            resume;     /* Last-Event-ID, or -1 */
    ngx_uint_t                         npend;
    ngx_uint_t                         nread;      /* ... the read's */
    ngx_http_sandbox_mcp_change_t      pend[NGX_HTTP_SANDBOX_MCP_STREAM_PEND];
    ngx_int_t                          level;      /* the session's rank */
    ngx_str_t                          mark;       /* "stream <random>" */
    ngx_str_t                          subs;       /* mcp:{sid}:subs */
    ngx_str_t                          log;        /* mcp:{sid}:log */
    ngx_str_t                          runs;       /* mcp:{sid}:runs */
    ngx_buf_t                          beat;       /* the heartbeat's */

    ngx_str_t                         *members;    /* resume: the URIs */
    int64_t                           *changed;    /* ... and each's ms */
    ngx_uint_t                         nmembers;

    unsigned                           all:1;      /* pend overflowed */
    unsigned                           read_all:1; /* ... before the read */
    unsigned                           done:1;
} ngx_http_sandbox_mcp_stream_t;


static void ngx_http_sandbox_mcp_stream_check(
    ngx_http_sandbox_mcp_stream_t *s);


/* the run id of a run resource's URI, or NULL */
static u_char *
ngx_http_sandbox_mcp_uri_run(u_char *uri, size_t len)
{
    size_t  n;

    n = sizeof(NGX_HTTP_SANDBOX_MCP_RUN_URI) - 1;

    if (len < n + SMCP_ID_LEN
        || ngx_strncmp(uri, NGX_HTTP_SANDBOX_MCP_RUN_URI, n) != 0
        || !smcp_valid_id((char *) uri + n, SMCP_ID_LEN, SMCP_RUN_ID_PREFIX))
    {
        return NULL;
    }

    len -= n + SMCP_ID_LEN;
    uri += n + SMCP_ID_LEN;

    if (len == 0
        || (len == 5 && ngx_strncmp(uri, "/diff", 5) == 0)
        || (len == 7 && ngx_strncmp(uri, "/events", 7) == 0))
    {
        return uri - SMCP_ID_LEN;
    }

    return NULL;
}


/* subscriptions */

static void
ngx_http_sandbox_mcp_subscribed(void *data, redisReply *reply)
{
    ngx_http_sandbox_mcp_call_t *call = data;

    if (ngx_http_sandbox_mcp_reply_failed(call, reply)) {
        return;
    }

    if (reply->type == REDIS_REPLY_INTEGER && reply->integer < 0) {
        ngx_http_sandbox_mcp_call_error(call,
                                        NGX_HTTP_SANDBOX_MCP_INVALID_PARAMS,
                                        "Invalid params: a session "
                                        "subscribes to at most %d "
                                        "resources",
                                        NGX_HTTP_SANDBOX_MCP_SUBS_MAX);
        ngx_http_sandbox_mcp_call_done(call);
        return;
    }

    ngx_http_sandbox_mcp_call_result(call, json_object());
    ngx_http_sandbox_mcp_call_done(call);
}


/* the run is the tenant's (resources/read's answer): subscribe */
static json_t *
ngx_http_sandbox_mcp_subscribe_found(ngx_http_sandbox_mcp_call_t *call,
    json_t *result)
{
    ngx_str_t                         args[3];
    ngx_http_request_t               *r;
    ngx_http_sandbox_mcp_loc_conf_t  *lcf;
    ngx_http_sandbox_mcp_key_t        keys[] = {
        { SMCP_KEY_MCP_SUBS, &call->ctx->session_id }
    };

    r = call->ctx->request;
    lcf = ngx_http_get_module_loc_conf(r, ngx_http_sandbox_mcp_module);

    if (json_is_true(json_object_get(result, "isError"))) {
        json_decref(result);
        ngx_http_sandbox_mcp_call_error(call,
                                        NGX_HTTP_SANDBOX_MCP_RESOURCE_NOT_FOUND,
                                        "Resource not found: %V",
                                        &call->method_arg);
        return NULL;
    }

    json_decref(result);

    args[0] = call->method_arg;
    args[1] = ngx_http_sandbox_mcp_redis_number(r->pool,
                                          NGX_HTTP_SANDBOX_MCP_SUBS_MAX);
    args[2] = ngx_http_sandbox_mcp_redis_number(r->pool, lcf->session_ttl);

    /* the call goes on: answered by the script's reply */
    call->hold = 1;

    ngx_http_sandbox_mcp_call_script(call,
                                     &ngx_http_sandbox_mcp_script_subscribe,
                                     ngx_http_sandbox_mcp_subscribed,
                                     keys, 1, args, 3);

    return NULL;
}


void
ngx_http_sandbox_mcp_subscribe(ngx_http_sandbox_mcp_call_t *call,
    json_t *params, ngx_uint_t on)
{
    u_char      *uri, *run;
    size_t       len;
    ngx_str_t    argv[3];
    const char  *s;

    s = json_string_value(json_object_get(params, "uri"));
    len = json_string_length(json_object_get(params, "uri"));
    uri = (u_char *) s;
    run = uri ? ngx_http_sandbox_mcp_uri_run(uri, len) : NULL;

    if (run == NULL) {
        ngx_http_sandbox_mcp_call_error(call,
                                s ? NGX_HTTP_SANDBOX_MCP_RESOURCE_NOT_FOUND
                                  : NGX_HTTP_SANDBOX_MCP_INVALID_PARAMS,
                                s ? "Resource not found: %*s"
                                  : "Invalid params: uri (a string) is "
                                    "required%*s",
                                s ? ngx_min(len, 200) : 0, s ? s : "");
        return;
    }

    call->method_arg.data = uri;
    call->method_arg.len = len;
    call->pending = 1;
    call->ctx->pending++;

    if (on) {
        /* only a run the tenant can read */
        call->filter = ngx_http_sandbox_mcp_subscribe_found;
        ngx_http_sandbox_mcp_tools_start(call, "opencode_get_result",
                                         json_pack("{s:s%}", "runId",
                                                   (char *) run,
                                                   (size_t) SMCP_ID_LEN));
        return;
    }

    ngx_str_set(&argv[0], "SREM");
    argv[2] = call->method_arg;

    if (ngx_http_sandbox_mcp_redis_key(call->ctx->request->pool, &argv[1],
                                       SMCP_KEY_MCP_SUBS,
                                       &call->ctx->session_id)
        != NGX_OK)
    {
        ngx_http_sandbox_mcp_tool_unavailable(call);
        return;
    }

    call->cmd = ngx_http_sandbox_mcp_redis_command(
                    ngx_http_sandbox_mcp_subscribed, call, 3, argv);

    if (call->cmd == NULL) {
        ngx_http_sandbox_mcp_tool_unavailable(call);
    }
}


/* the stream */

static void
ngx_http_sandbox_mcp_stream_stop(ngx_http_sandbox_mcp_stream_t *s)
{
    s->done = 1;

    ngx_http_sandbox_mcp_waiter_unwatch(&s->tenant);
    ngx_http_sandbox_mcp_waiter_unwatch(&s->session);

    if (s->cmd) {
        ngx_http_sandbox_mcp_redis_cancel(s->cmd);
        s->cmd = NULL;
    }

    if (s->heartbeat.timer_set) {
        ngx_del_timer(&s->heartbeat);
    }
}


static void
ngx_http_sandbox_mcp_stream_cleanup(void *data)
{
    ngx_http_sandbox_mcp_metrics_stream(NGX_HTTP_SANDBOX_MCP_STREAM_MCP, -1);
    ngx_http_sandbox_mcp_stream_stop(data);
}


static void
ngx_http_sandbox_mcp_stream_end(ngx_http_sandbox_mcp_stream_t *s,
    ngx_int_t rc)
{
    ngx_http_request_t  *r;

    if (s->done) {
        return;
    }

    r = s->ctx->request;

    ngx_http_sandbox_mcp_stream_stop(s);
    r->connection->idle = 0;

    if (rc == NGX_OK) {
        rc = ngx_http_sandbox_mcp_sse_close(r);
    }

    ngx_http_sandbox_mcp_finalize(s->ctx, rc);
}


/* notifications/resources/updated {uri}, the next id */
static ngx_int_t
ngx_http_sandbox_mcp_stream_updated(ngx_http_sandbox_mcp_stream_t *s,
    u_char *uri, size_t len, int64_t at)
{
    s->last = ngx_max(at, s->last + 1);

    return ngx_http_sandbox_mcp_sse_send(s->ctx->request, s->last,
               json_pack("{s:s, s:s, s:{s:s%}}", "jsonrpc", "2.0",
                         "method", "notifications/resources/updated",
                         "params", "uri", (char *) uri, len), 0);
}


/* mark the changes of run the read in flight covers: subscribed (flag 1)
 * or started by the session (flag 2); 0 when it covers none of them */
static ngx_uint_t
ngx_http_sandbox_mcp_stream_mark(ngx_http_sandbox_mcp_stream_t *s,
    u_char *run, ngx_uint_t flag)
{
    ngx_uint_t  i, found;

    found = 0;

    for (i = 0; i < s->nread; i++) {
        if (ngx_strncmp(s->pend[i].run, run, SMCP_ID_LEN) != 0) {
            continue;
        }

        found = 1;

        if (flag == 1) {
            s->pend[i].subscribed = 1;

        } else {
            s->pend[i].own = 1;
        }
    }

    return found;
}


/* the run's new status as a log line, the session's level permitting */
static ngx_int_t
ngx_http_sandbox_mcp_stream_log(ngx_http_sandbox_mcp_stream_t *s,
    ngx_http_sandbox_mcp_change_t *c)
{
    ngx_int_t  rank;

    rank = (c->status_len == sizeof(SMCP_STATUS_FAILED) - 1
            && ngx_strncmp(c->status, SMCP_STATUS_FAILED, c->status_len)
               == 0)
           ? ngx_http_sandbox_mcp_log_rank("error", 5)
           : ngx_http_sandbox_mcp_log_rank("info", 4);

    if (rank < s->level) {
        return NGX_OK;
    }

    return ngx_http_sandbox_mcp_sse_send(s->ctx->request, -1,
               json_pack("{s:s, s:s, s:{s:s, s:s, s:{s:s%, s:s%}}}",
                         "jsonrpc", "2.0", "method", "notifications/message",
                         "params",
                             "level", ngx_http_sandbox_mcp_log_name(rank),
                             "logger", "run",
                             "data",
                                 "runId", (char *) c->run,
                                 (size_t) SMCP_ID_LEN,
                                 "status", (char *) c->status,
                                 c->status_len), 0);
}


/* mark the changes of the runs the session started (ZRANGE
 * mcp:{sid}:runs): they are logged too */
static void
ngx_http_sandbox_mcp_stream_own(ngx_http_sandbox_mcp_stream_t *s,
    redisReply *reply)
{
    size_t       i;
    redisReply  *m;

    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY) {
        return;
    }

    for (i = 0; i < reply->elements; i++) {
        m = reply->element[i];

        if (m->type == REDIS_REPLY_STRING && m->len == SMCP_ID_LEN) {
            (void) ngx_http_sandbox_mcp_stream_mark(s, (u_char *) m->str, 2);
        }
    }
}


/* GET mcp:{sid}:log, ZRANGE mcp:{sid}:runs, SMEMBERS mcp:{sid}:subs: for
 * the runs heard, an update of each subscribed URI, and a log line of
 * each run subscribed to or started by the session */
static void
ngx_http_sandbox_mcp_stream_members(void *data, ngx_uint_t n,
    redisReply *reply)
{
    ngx_http_sandbox_mcp_stream_t *s = data;

    size_t       i;
    int64_t      now;
    u_char      *run;
    ngx_int_t    rank;
    redisReply  *m;

    if (n == 0) {
        s->level = ngx_http_sandbox_mcp_log_rank("info", 4);

        if (reply && reply->type == REDIS_REPLY_STRING) {
            rank = ngx_http_sandbox_mcp_log_rank(reply->str, reply->len);
            s->level = rank >= 0 ? rank : s->level;
        }

        return;
    }

    if (n == 1) {
        ngx_http_sandbox_mcp_stream_own(s, reply);
        return;
    }

    s->cmd = NULL;

    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY) {
        /* Redis away: the client resumes with its Last-Event-ID */
        ngx_http_sandbox_mcp_stream_end(s, NGX_OK);
        return;
    }

    now = ngx_http_sandbox_mcp_now_ms();

    for (i = 0; i < reply->elements; i++) {
        m = reply->element[i];

        if (m->type != REDIS_REPLY_STRING) {
            continue;
        }

        run = ngx_http_sandbox_mcp_uri_run((u_char *) m->str, m->len);

        if (run == NULL
            || (!ngx_http_sandbox_mcp_stream_mark(s, run, 1) && !s->read_all))
        {
            continue;
        }

        if (ngx_http_sandbox_mcp_stream_updated(s, (u_char *) m->str,
                                                m->len, now)
            != NGX_OK)
        {
            ngx_http_sandbox_mcp_stream_end(s, NGX_ERROR);
            return;
        }
    }

    for (i = 0; i < s->nread; i++) {
        if ((s->pend[i].subscribed || s->pend[i].own)
            && ngx_http_sandbox_mcp_stream_log(s, &s->pend[i]) != NGX_OK)
        {
            ngx_http_sandbox_mcp_stream_end(s, NGX_ERROR);
            return;
        }
    }

    /* the changes heard while reading: the next read's */

    s->npend -= s->nread;
    ngx_memmove(s->pend, &s->pend[s->nread],
                s->npend * sizeof(ngx_http_sandbox_mcp_change_t));
    s->nread = 0;

    if (s->npend || s->all) {
        ngx_http_sandbox_mcp_stream_check(s);
    }
}


static void
ngx_http_sandbox_mcp_stream_check(ngx_http_sandbox_mcp_stream_t *s)
{
    ngx_str_t   argv[8];
    ngx_uint_t  argc[3];

    s->nread = s->npend;
    s->read_all = s->all;
    s->all = 0;

    ngx_str_set(&argv[0], "GET");
    argv[1] = s->log;
    ngx_str_set(&argv[2], "ZRANGE");
    argv[3] = s->runs;
    ngx_str_set(&argv[4], "0");
    ngx_str_set(&argv[5], "-1");
    ngx_str_set(&argv[6], "SMEMBERS");
    argv[7] = s->subs;
    argc[0] = 2;
    argc[1] = 4;
    argc[2] = 2;

    s->cmd = ngx_http_sandbox_mcp_redis_each(
                 ngx_http_sandbox_mcp_stream_members, s, 3, argc, argv);

    if (s->cmd == NULL) {
        ngx_http_sandbox_mcp_stream_end(s, NGX_OK);
    }
}


/* "<runId> <status>" on the tenant's channel */
static void
ngx_http_sandbox_mcp_stream_tenant(ngx_http_sandbox_mcp_watch_t *w,
    ngx_str_t *message)
{
    ngx_http_sandbox_mcp_stream_t *s = w->data;

    size_t                          len;
    ngx_uint_t                      i;
    ngx_http_sandbox_mcp_change_t  *c;

    /* NULL: the connection was lost; what it missed, the client's
     * Last-Event-ID recovers */

    if (message == NULL || s->done || message->len < SMCP_ID_LEN
        || !smcp_valid_id((char *) message->data, SMCP_ID_LEN,
                          SMCP_RUN_ID_PREFIX))
    {
        return;
    }

    /* "<runId> <status>": each status a run goes through is a change of
     * its own (started, then running, both heard before a read: two log
     * lines); the same status heard again since the read is one */

    len = 0;

    if (message->len > SMCP_ID_LEN + 1) {
        len = ngx_min(message->len - SMCP_ID_LEN - 1,
                      NGX_HTTP_SANDBOX_MCP_STATUS_MAX);
    }

    for (i = s->nread; i < s->npend; i++) {
        c = &s->pend[i];

        if (ngx_strncmp(c->run, message->data, SMCP_ID_LEN) == 0
            && c->status_len == len
            && ngx_strncmp(c->status, message->data + SMCP_ID_LEN + 1, len)
               == 0)
        {
            return;
        }
    }

    if (s->npend < NGX_HTTP_SANDBOX_MCP_STREAM_PEND) {
        c = &s->pend[s->npend++];
        ngx_memcpy(c->run, message->data, SMCP_ID_LEN);
        ngx_memcpy(c->status, message->data + SMCP_ID_LEN + 1, len);
        c->status_len = len;
        c->subscribed = 0;
        c->own = 0;

    } else {
        /* too many at once: every subscription is updated */
        s->all = 1;
    }

    if (s->cmd || s->resume >= 0) {
        /* read once the read in flight (or the resume) is over */
        return;
    }

    ngx_http_sandbox_mcp_stream_check(s);
}


/* on the session's channel: a newer stream of the session */
static void
ngx_http_sandbox_mcp_stream_session(ngx_http_sandbox_mcp_watch_t *w,
    ngx_str_t *message)
{
    ngx_http_sandbox_mcp_stream_t *s = w->data;

    if (message == NULL || message->len < sizeof("stream ") - 1
        || ngx_strncmp(message->data, "stream ", 7) != 0
        || (message->len == s->mark.len
            && ngx_strncmp(message->data, s->mark.data, s->mark.len) == 0))
    {
        return;
    }

    ngx_http_sandbox_mcp_stream_end(s, NGX_OK);
}


static void
ngx_http_sandbox_mcp_stream_heartbeat(ngx_event_t *ev)
{
    ngx_http_sandbox_mcp_stream_t    *s = ev->data;

    ngx_chain_t                       out;
    ngx_http_request_t               *r;
    ngx_http_sandbox_mcp_loc_conf_t  *lcf;

    static u_char  comment[] = ":\n\n";

    if (s->done) {
        return;
    }

    if (ngx_exiting) {
        ngx_http_sandbox_mcp_stream_end(s, NGX_OK);
        return;
    }

    r = s->ctx->request;

    if (r->out == NULL && !r->connection->buffered) {
        /* nothing held: the one buffer serves every heartbeat */
        ngx_memzero(&s->beat, sizeof(ngx_buf_t));
        s->beat.pos = comment;
        s->beat.last = comment + sizeof(comment) - 1;
        s->beat.memory = 1;
        s->beat.flush = 1;

        out.buf = &s->beat;
        out.next = NULL;

        if (ngx_http_output_filter(r, &out) == NGX_ERROR) {
            ngx_http_sandbox_mcp_stream_end(s, NGX_ERROR);
            return;
        }

        if (r->out || r->connection->buffered) {
            ngx_http_sandbox_mcp_sse_writer(r);
        }
    }

    lcf = ngx_http_get_module_loc_conf(s->ctx->request,
                                       ngx_http_sandbox_mcp_module);
    ngx_add_timer(&s->heartbeat, lcf->ui_heartbeat);
}


/* the client went away, or the worker shuts down */
static void
ngx_http_sandbox_mcp_stream_read(ngx_http_request_t *r)
{
    ngx_http_sandbox_mcp_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_sandbox_mcp_module);

    if (r->connection->close || ngx_exiting || ngx_terminate) {
        ngx_http_sandbox_mcp_stream_end(ctx->data, NGX_OK);
        return;
    }

    ngx_http_test_reading(r);
}


/* the resume over: the changes heard meanwhile */
static void
ngx_http_sandbox_mcp_stream_resumed(ngx_http_sandbox_mcp_stream_t *s)
{
    s->resume = -1;

    if (s->npend || s->all) {
        ngx_http_sandbox_mcp_stream_check(s);
    }
}


/* the resume: each subscribed run's last change (HMGET created_at
 * started_at finished_at tenant); after the last, the URIs changed since
 * the resume, oldest first */
static void
ngx_http_sandbox_mcp_stream_changed(void *data, ngx_uint_t i,
    redisReply *reply)
{
    ngx_http_sandbox_mcp_stream_t *s = data;

    size_t       k;
    int64_t      at, ms;
    ngx_uint_t   j, next;
    redisReply  *v, *t;

    if (reply && reply->type == REDIS_REPLY_ARRAY && reply->elements == 4) {
        t = reply->element[3];
        at = -1;

        if (t->type == REDIS_REPLY_STRING && t->len == s->ctx->tenant.len
            && ngx_strncmp(t->str, s->ctx->tenant.data, t->len) == 0)
        {
            for (k = 0; k < 3; k++) {
                v = reply->element[k];
                ms = (v->type == REDIS_REPLY_STRING && v->len)
                     ? ngx_atoof((u_char *) v->str, v->len) : -1;
                at = ngx_max(at, ms);
            }
        }

        s->changed[i] = at;
    }

    if (i + 1 < s->nmembers) {
        return;
    }

    s->cmd = NULL;

    for ( ;; ) {
        next = s->nmembers;

        for (j = 0; j < s->nmembers; j++) {
            if (s->changed[j] > s->resume
                && (next == s->nmembers || s->changed[j] < s->changed[next]))
            {
                next = j;
            }
        }

        if (next == s->nmembers) {
            break;
        }

        if (ngx_http_sandbox_mcp_stream_updated(s, s->members[next].data,
                                                s->members[next].len,
                                                s->changed[next])
            != NGX_OK)
        {
            ngx_http_sandbox_mcp_stream_end(s, NGX_ERROR);
            return;
        }

        s->changed[next] = -1;
    }

    ngx_http_sandbox_mcp_stream_resumed(s);
}


/* the resume: SMEMBERS, then one HMGET per run, pipelined */
static void
ngx_http_sandbox_mcp_stream_resume(void *data, redisReply *reply)
{
    ngx_http_sandbox_mcp_stream_t *s = data;

    size_t        i, n;
    u_char       *run;
    ngx_str_t    *argv, id;
    ngx_uint_t   *argc;
    ngx_pool_t   *pool;
    redisReply   *m;

    s->cmd = NULL;

    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY) {
        ngx_http_sandbox_mcp_stream_end(s, NGX_OK);
        return;
    }

    pool = s->ctx->request->pool;
    n = ngx_min(reply->elements, NGX_HTTP_SANDBOX_MCP_SUBS_MAX);

    s->members = ngx_pcalloc(pool, (n + 1) * sizeof(ngx_str_t));
    s->changed = ngx_pcalloc(pool, (n + 1) * sizeof(int64_t));
    argc = ngx_palloc(pool, (n + 1) * sizeof(ngx_uint_t));
    argv = ngx_palloc(pool, (n + 1) * 6 * sizeof(ngx_str_t));

    if (s->members == NULL || s->changed == NULL || argc == NULL
        || argv == NULL)
    {
        ngx_http_sandbox_mcp_stream_end(s, NGX_ERROR);
        return;
    }

    s->nmembers = 0;

    for (i = 0; i < n; i++) {
        m = reply->element[i];

        if (m->type != REDIS_REPLY_STRING
            || m->len > NGX_HTTP_SANDBOX_MCP_URI_MAX)
        {
            continue;
        }

        run = ngx_http_sandbox_mcp_uri_run((u_char *) m->str, m->len);
        if (run == NULL) {
            continue;
        }

        /* the reply is freed after this callback: the URI is copied */
        s->members[s->nmembers].data = ngx_pnalloc(pool, m->len);
        if (s->members[s->nmembers].data == NULL) {
            ngx_http_sandbox_mcp_stream_end(s, NGX_ERROR);
            return;
        }

        ngx_memcpy(s->members[s->nmembers].data, m->str, m->len);
        s->members[s->nmembers].len = m->len;

        id.data = s->members[s->nmembers].data + (run - (u_char *) m->str);
        id.len = SMCP_ID_LEN;

        s->changed[s->nmembers] = -1;
        argc[s->nmembers] = 6;

        ngx_str_set(&argv[s->nmembers * 6], "HMGET");
        ngx_str_set(&argv[s->nmembers * 6 + 2], "created_at");
        ngx_str_set(&argv[s->nmembers * 6 + 3], "started_at");
        ngx_str_set(&argv[s->nmembers * 6 + 4], "finished_at");
        ngx_str_set(&argv[s->nmembers * 6 + 5], "tenant");

        if (ngx_http_sandbox_mcp_redis_key(pool, &argv[s->nmembers * 6 + 1],
                                           SMCP_KEY_RUN, &id)
            != NGX_OK)
        {
            ngx_http_sandbox_mcp_stream_end(s, NGX_ERROR);
            return;
        }

        s->nmembers++;
    }

    if (s->nmembers == 0) {
        ngx_http_sandbox_mcp_stream_resumed(s);
        return;
    }

    s->cmd = ngx_http_sandbox_mcp_redis_each(
                 ngx_http_sandbox_mcp_stream_changed, s, s->nmembers, argc,
                 argv);

    if (s->cmd == NULL) {
        ngx_http_sandbox_mcp_stream_end(s, NGX_OK);
    }
}


/* a reply nobody waits for */
static void
ngx_http_sandbox_mcp_stream_gone(void *data, ngx_uint_t i, redisReply *reply)
{
}


/* "stream <random>" on the session's channel: the others end */
static void
ngx_http_sandbox_mcp_stream_announced(void *data, redisReply *reply)
{
}


void
ngx_http_sandbox_mcp_stream_forget(ngx_http_sandbox_mcp_ctx_t *ctx)
{
    ngx_str_t    argv[7];
    ngx_uint_t   argc[2];
    ngx_pool_t  *pool;

    pool = ctx->request->pool;

    ngx_str_set(&argv[0], "DEL");
    ngx_str_set(&argv[4], "PUBLISH");
    ngx_str_set(&argv[6], "stream ended");
    argc[0] = 4;
    argc[1] = 3;

    if (ngx_http_sandbox_mcp_redis_key(pool, &argv[1], SMCP_KEY_MCP_SUBS,
                                       &ctx->session_id)
        != NGX_OK
        || ngx_http_sandbox_mcp_redis_key(pool, &argv[2], SMCP_KEY_MCP_LOG,
                                          &ctx->session_id)
           != NGX_OK
        || ngx_http_sandbox_mcp_redis_key(pool, &argv[3], SMCP_KEY_MCP_RUNS,
                                          &ctx->session_id)
           != NGX_OK
        || ngx_http_sandbox_mcp_redis_key(pool, &argv[5],
                                          SMCP_CHAN_MCP_CANCELLED,
                                          &ctx->session_id)
           != NGX_OK)
    {
        return;
    }

    (void) ngx_http_sandbox_mcp_redis_each(ngx_http_sandbox_mcp_stream_gone,
                                           NULL, 2, argc, argv);
}


static ngx_int_t
ngx_http_sandbox_mcp_stream_announce(ngx_http_sandbox_mcp_stream_t *s)
{
    u_char              *p;
    char                 hex[33];
    ngx_str_t            argv[3];
    ngx_http_request_t  *r;

    r = s->ctx->request;

    if (smcp_random_hex(hex, 16) != SMCP_OK) {
        return NGX_ERROR;
    }

    p = ngx_pnalloc(r->pool, sizeof("stream ") - 1 + 32);
    if (p == NULL) {
        return NGX_ERROR;
    }

    s->mark.data = p;
    s->mark.len = ngx_sprintf(p, "stream %*s", (size_t) 32, hex) - p;

    ngx_str_set(&argv[0], "PUBLISH");
    argv[2] = s->mark;

    if (ngx_http_sandbox_mcp_redis_key(r->pool, &argv[1],
                                       SMCP_CHAN_MCP_CANCELLED,
                                       &s->ctx->session_id)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    (void) ngx_http_sandbox_mcp_redis_command(
                      ngx_http_sandbox_mcp_stream_announced, NULL, 3, argv);

    return NGX_OK;
}


/* Last-Event-ID: milliseconds; anything else is no resume */
static int64_t
ngx_http_sandbox_mcp_stream_last_id(ngx_http_request_t *r)
{
    off_t             n;
    ngx_table_elt_t  *h;

    h = ngx_http_sandbox_mcp_header(r, "Last-Event-ID",
                                    sizeof("Last-Event-ID") - 1);

    if (h == NULL || h->value.len == 0 || h->value.len > 15) {
        return -1;
    }

    n = ngx_atoof(h->value.data, h->value.len);

    return n == NGX_ERROR ? -1 : (int64_t) n;
}


ngx_int_t
ngx_http_sandbox_mcp_stream_start(ngx_http_sandbox_mcp_ctx_t *ctx)
{
    u_char                           *p;
    ngx_str_t                         argv[2];
    ngx_pool_cleanup_t               *cln;
    ngx_http_request_t               *r;
    ngx_http_sandbox_mcp_stream_t    *s;
    ngx_http_sandbox_mcp_loc_conf_t  *lcf;

    r = ctx->request;
    lcf = ngx_http_get_module_loc_conf(r, ngx_http_sandbox_mcp_module);

    s = ngx_pcalloc(r->pool, sizeof(ngx_http_sandbox_mcp_stream_t));
    cln = ngx_pool_cleanup_add(r->pool, 0);
    p = ngx_pnalloc(r->pool, sizeof("mcp:") - 1 + ctx->session_id.len);

    if (s == NULL || cln == NULL || p == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    s->ctx = ctx;
    s->resume = ngx_http_sandbox_mcp_stream_last_id(r);
    s->last = ngx_max(ngx_http_sandbox_mcp_now_ms(), s->resume);

    s->tenant.id = ctx->tenant;
    s->tenant.tenant = 1;
    s->tenant.wake = ngx_http_sandbox_mcp_stream_tenant;
    s->tenant.data = s;

    s->session.id.data = p;
    s->session.id.len = ngx_sprintf(p, "mcp:%V", &ctx->session_id) - p;
    s->session.wake = ngx_http_sandbox_mcp_stream_session;
    s->session.data = s;

    cln->handler = ngx_http_sandbox_mcp_stream_cleanup;
    cln->data = s;
    ngx_http_sandbox_mcp_metrics_stream(NGX_HTTP_SANDBOX_MCP_STREAM_MCP, 1);

    if (ngx_http_sandbox_mcp_redis_key(r->pool, &s->subs, SMCP_KEY_MCP_SUBS,
                                       &ctx->session_id)
        != NGX_OK
        || ngx_http_sandbox_mcp_redis_key(r->pool, &s->log, SMCP_KEY_MCP_LOG,
                                          &ctx->session_id)
           != NGX_OK
        || ngx_http_sandbox_mcp_redis_key(r->pool, &s->runs,
                                          SMCP_KEY_MCP_RUNS, &ctx->session_id)
           != NGX_OK
        || ngx_http_sandbox_mcp_stream_announce(s) != NGX_OK
        || ngx_http_sandbox_mcp_sse_header(r) != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ctx->data = s;
    ctx->done = 1;          /* no JSON-RPC answer is built for it */

    ngx_http_sandbox_mcp_sse_keep(r, &s->heartbeat,
                                  ngx_http_sandbox_mcp_stream_heartbeat, s,
                                  lcf->ui_heartbeat,
                                  ngx_http_sandbox_mcp_stream_read,
                                  ngx_http_sandbox_mcp_sse_writer);

    ngx_http_sandbox_mcp_waiter_watch(&s->tenant);
    ngx_http_sandbox_mcp_waiter_watch(&s->session);

    /* where the client starts from: its next Last-Event-ID */
    p = ngx_pnalloc(r->pool, sizeof("retry: 1000\nid: \ndata: \n\n")
                             + NGX_INT64_LEN);
    if (p == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (ngx_http_sandbox_mcp_sse_text(r, p,
                                      ngx_sprintf(p, "retry: 1000\nid: %L\n"
                                                  "data: \n\n", s->last)
                                      - p)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    if (s->resume < 0) {
        return NGX_DONE;
    }

    ngx_str_set(&argv[0], "SMEMBERS");
    argv[1] = s->subs;

    s->cmd = ngx_http_sandbox_mcp_redis_command(
                 ngx_http_sandbox_mcp_stream_resume, s, 2, argv);

    if (s->cmd == NULL) {
        s->resume = -1;
    }

    return NGX_DONE;
}
