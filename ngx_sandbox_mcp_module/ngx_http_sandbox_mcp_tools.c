/*
 * The MCP tools: definitions (schemas), argument validation, and each
 * tool's Redis step.  Tools answer through the call (transport), which
 * answers the HTTP request once every call of it is done.
 */

#include "ngx_http_sandbox_mcp_module.h"
#include "ngx_http_sandbox_mcp_redis.h"
#include "ngx_http_sandbox_mcp_scripts.h"

#include "smcp_diff.h"
#include "smcp_jwt.h"
#include "smcp_validate.h"


#define NGX_HTTP_SANDBOX_MCP_WAITER_BUCKETS   256
#define NGX_HTTP_SANDBOX_MCP_DIFF_PAGE        65536
#define NGX_HTTP_SANDBOX_MCP_DIFF_SCAN        (256 * 1024)  /* no index */
#define NGX_HTTP_SANDBOX_MCP_DIFF_MAX         ((uint64_t) 1 << 40)
#define NGX_HTTP_SANDBOX_MCP_LIST_BUDGET      "2000"
#define NGX_HTTP_SANDBOX_MCP_MAX_RUNS         100
#define NGX_HTTP_SANDBOX_MCP_MAX_EVENTS       1000

/* the run_create script's answers */
#define NGX_HTTP_SANDBOX_MCP_CREATED           1
#define NGX_HTTP_SANDBOX_MCP_NO_SESSION        0
#define NGX_HTTP_SANDBOX_MCP_SESSION_EXPIRED   -1
#define NGX_HTTP_SANDBOX_MCP_QUEUE_FULL        -2


typedef enum {
    NGX_HTTP_SANDBOX_MCP_RUN_TASK = 0,
    NGX_HTTP_SANDBOX_MCP_GET_RESULT,
    NGX_HTTP_SANDBOX_MCP_LIST_RUNS,
    NGX_HTTP_SANDBOX_MCP_CANCEL_RUN,
    NGX_HTTP_SANDBOX_MCP_GET_DIFF,
    NGX_HTTP_SANDBOX_MCP_GET_EVENTS
} ngx_http_sandbox_mcp_tool_e;


typedef struct {
    const char                  *name;
    const char                  *title;
    const char                  *description;
    const char                  *input_schema;
    const char                  *output_schema;
    const char                  *arguments;     /* accepted, for messages */
    void                       (*start)(ngx_http_sandbox_mcp_call_t *call);
} ngx_http_sandbox_mcp_tool_t;


static void ngx_http_sandbox_mcp_run_task(ngx_http_sandbox_mcp_call_t *call);
static void ngx_http_sandbox_mcp_get_result(
    ngx_http_sandbox_mcp_call_t *call);
static void ngx_http_sandbox_mcp_list_runs(ngx_http_sandbox_mcp_call_t *call);
static void ngx_http_sandbox_mcp_cancel_run(
    ngx_http_sandbox_mcp_call_t *call);
static void ngx_http_sandbox_mcp_get_diff(ngx_http_sandbox_mcp_call_t *call);
static void ngx_http_sandbox_mcp_get_events(
    ngx_http_sandbox_mcp_call_t *call);
static void ngx_http_sandbox_mcp_result_fetch(
    ngx_http_sandbox_mcp_call_t *call);


/* schemas: JSON Schema 2020-12 */

#define NGX_HTTP_SANDBOX_MCP_TS                                               \
    "{\"type\":[\"string\",\"null\"],\"description\":\"ISO-8601 time\"}"

#define NGX_HTTP_SANDBOX_MCP_RUN_SCHEMA                                       \
    "{\"type\":\"object\",\"properties\":{"                                   \
    "\"runId\":{\"type\":\"string\"},"                                        \
    "\"sessionId\":{\"type\":\"string\"},"                                    \
    "\"status\":{\"type\":\"string\",\"enum\":[\"started\",\"running\","      \
        "\"completed\",\"failed\",\"cancelled\"]},"                           \
    "\"title\":{\"type\":\"string\"},"                                        \
    "\"task\":{\"type\":\"string\"},"                                         \
    "\"repository\":{\"type\":[\"string\",\"null\"]},"                        \
    "\"branch\":{\"type\":[\"string\",\"null\"]},"                            \
    "\"model\":{\"type\":\"string\"},"                                        \
    "\"createdAt\":" NGX_HTTP_SANDBOX_MCP_TS ","                              \
    "\"startedAt\":" NGX_HTTP_SANDBOX_MCP_TS ","                              \
    "\"finishedAt\":" NGX_HTTP_SANDBOX_MCP_TS ","                             \
    "\"result\":{\"type\":[\"string\",\"null\"],"                             \
        "\"description\":\"the agent's final text\"},"                        \
    "\"error\":{\"type\":[\"string\",\"null\"]},"                             \
    "\"exitCode\":{\"type\":[\"integer\",\"null\"]},"                         \
    "\"filesChanged\":{\"type\":\"array\",\"items\":{\"type\":\"object\","    \
        "\"properties\":{\"path\":{\"type\":\"string\"},"                     \
        "\"additions\":{\"type\":\"integer\"},"                               \
        "\"deletions\":{\"type\":\"integer\"}}}},"                            \
    "\"diffStat\":{\"type\":[\"string\",\"null\"]},"                          \
    "\"pullRequestUrl\":{\"type\":[\"string\",\"null\"]},"                    \
    "\"tokens\":{\"type\":\"object\",\"properties\":{"                        \
        "\"input\":{\"type\":\"integer\"},\"output\":{\"type\":\"integer\"}," \
        "\"reasoning\":{\"type\":\"integer\"},"                               \
        "\"cacheRead\":{\"type\":\"integer\"},"                               \
        "\"cacheWrite\":{\"type\":\"integer\"}}},"                            \
    "\"cost\":{\"type\":\"number\",\"description\":\"USD\"},"                 \
    "\"maxCostUsd\":{\"type\":[\"number\",\"null\"],"                         \
        "\"description\":\"the run is stopped past this cost (USD)\"},"      \
    "\"timeoutSeconds\":{\"type\":\"integer\"},"                              \
    "\"cancelRequested\":{\"type\":\"boolean\"},"                             \
    "\"watchUrl\":{\"type\":\"string\","                                      \
        "\"description\":\"signed link to watch the run live\"}},"            \
    "\"required\":[\"runId\",\"sessionId\",\"status\",\"watchUrl\"]}"


static ngx_http_sandbox_mcp_tool_t  ngx_http_sandbox_mcp_tools[] = {

    { "opencode_run_task",
      "Run a coding task in a sandbox",
      "Start the OpenCode coding agent on a task in an isolated sandbox and "
      "return at once with a runId (fire-and-forget). The agent can clone a "
      "GitHub repository, edit many files, run tests and builds, and open a "
      "pull request; runs take minutes to hours. Check back with "
      "opencode_get_result (use waitSeconds to long-poll) or give the "
      "watchUrl to a person. Pass sessionId from an earlier run to continue "
      "in the same workspace and conversation.",

      "{\"type\":\"object\",\"properties\":{"
      "\"task\":{\"type\":\"string\",\"minLength\":1,"
          "\"description\":\"What the agent should do, in plain language\"},"
      "\"repository\":{\"type\":\"string\",\"description\":"
          "\"https URL of a GitHub repository to clone, e.g. "
          "https://github.com/owner/repo\"},"
      "\"branch\":{\"type\":\"string\",\"description\":"
          "\"Branch to check out (default: the repository's default)\"},"
      "\"sessionId\":{\"type\":\"string\",\"description\":"
          "\"Continue an earlier run's session (same workspace and "
          "conversation)\"},"
      "\"model\":{\"type\":\"string\",\"description\":"
          "\"provider/model, e.g. anthropic/claude-sonnet-4-5\"},"
      "\"title\":{\"type\":\"string\",\"maxLength\":200},"
      "\"createPullRequest\":{\"type\":\"boolean\",\"description\":"
          "\"Push a branch and open a pull request when done\"},"
      "\"timeoutSeconds\":{\"type\":\"integer\",\"minimum\":1,"
          "\"description\":\"Deadline for the run\"},"
      "\"maxCostUsd\":{\"type\":\"number\",\"exclusiveMinimum\":0,"
          "\"description\":\"Stop the run once its model cost passes this "
          "many US dollars (capped by the server)\"}},"
      "\"required\":[\"task\"],\"additionalProperties\":false}",

      "{\"type\":\"object\",\"properties\":{"
      "\"runId\":{\"type\":\"string\"},"
      "\"sessionId\":{\"type\":\"string\"},"
      "\"status\":{\"type\":\"string\"},"
      "\"watchUrl\":{\"type\":\"string\"}},"
      "\"required\":[\"runId\",\"sessionId\",\"status\",\"watchUrl\"]}",

      "task, repository, branch, sessionId, model, title, "
      "createPullRequest, timeoutSeconds, maxCostUsd",
      ngx_http_sandbox_mcp_run_task },

    { "opencode_get_result",
      "Get a run's status and result",
      "Get the status and outcome of a run: result text, error, files "
      "changed, pull request URL, tokens and cost. With waitSeconds the "
      "call waits (bounded) until the run finishes, so polling can be slow "
      "and cheap. Statuses: started, running, completed, failed, "
      "cancelled.",

      "{\"type\":\"object\",\"properties\":{"
      "\"runId\":{\"type\":\"string\"},"
      "\"waitSeconds\":{\"type\":\"number\",\"minimum\":0,\"description\":"
          "\"Wait up to this long for the run to finish (capped by the "
          "server)\"}},"
      "\"required\":[\"runId\"],\"additionalProperties\":false}",

      NGX_HTTP_SANDBOX_MCP_RUN_SCHEMA,

      "runId, waitSeconds",
      ngx_http_sandbox_mcp_get_result },

    { "opencode_list_runs",
      "List runs",
      "List your runs, newest first, optionally only those of one session "
      "or with one status. Pages with limit and the returned nextCursor.",

      "{\"type\":\"object\",\"properties\":{"
      "\"sessionId\":{\"type\":\"string\"},"
      "\"status\":{\"type\":\"string\",\"enum\":[\"started\",\"running\","
          "\"completed\",\"failed\",\"cancelled\"]},"
      "\"limit\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":100,"
          "\"default\":10},"
      "\"cursor\":{\"type\":\"string\"}},"
      "\"additionalProperties\":false}",

      "{\"type\":\"object\",\"properties\":{"
      "\"runs\":{\"type\":\"array\",\"items\":{\"type\":\"object\","
          "\"properties\":{\"runId\":{\"type\":\"string\"},"
          "\"sessionId\":{\"type\":\"string\"},"
          "\"status\":{\"type\":\"string\"},"
          "\"title\":{\"type\":\"string\"},"
          "\"createdAt\":" NGX_HTTP_SANDBOX_MCP_TS ","
          "\"finishedAt\":" NGX_HTTP_SANDBOX_MCP_TS "}}},"
      "\"nextCursor\":{\"type\":\"string\"}},"
      "\"required\":[\"runs\"]}",

      "sessionId, status, limit, cursor",
      ngx_http_sandbox_mcp_list_runs },

    { "opencode_cancel_run",
      "Cancel a run",
      "Cancel a run. A run still waiting for a sandbox is cancelled at "
      "once; a running one is stopped by its runner and shows cancelled "
      "once its processes are gone. Finished runs are left as they are.",

      "{\"type\":\"object\",\"properties\":{"
      "\"runId\":{\"type\":\"string\"}},"
      "\"required\":[\"runId\"],\"additionalProperties\":false}",

      NGX_HTTP_SANDBOX_MCP_RUN_SCHEMA,

      "runId",
      ngx_http_sandbox_mcp_cancel_run },

    { "opencode_get_diff",
      "Get a run's diff",
      "Get the unified diff of the changes a run made (available once it "
      "finished), optionally for one file, in pages of 64 KiB.",

      "{\"type\":\"object\",\"properties\":{"
      "\"runId\":{\"type\":\"string\"},"
      "\"path\":{\"type\":\"string\",\"description\":"
          "\"Only this file's part of the diff\"},"
      "\"cursor\":{\"type\":\"string\"}},"
      "\"required\":[\"runId\"],\"additionalProperties\":false}",

      "{\"type\":\"object\",\"properties\":{"
      "\"runId\":{\"type\":\"string\"},"
      "\"path\":{\"type\":[\"string\",\"null\"]},"
      "\"diff\":{\"type\":\"string\"},"
      "\"totalBytes\":{\"type\":\"integer\"},"
      "\"truncated\":{\"type\":\"boolean\",\"description\":"
          "\"more follows: call again with nextCursor\"},"
      "\"nextCursor\":{\"type\":\"string\"}},"
      "\"required\":[\"runId\",\"diff\",\"truncated\"]}",

      "runId, path, cursor",
      ngx_http_sandbox_mcp_get_diff },

    { "opencode_get_events",
      "Get a run's event log",
      "Read a run's event log (agent steps, tool calls, text, lifecycle "
      "and egress events) in order; pass nextAfter as after to read on.",

      "{\"type\":\"object\",\"properties\":{"
      "\"runId\":{\"type\":\"string\"},"
      "\"after\":{\"type\":\"string\",\"description\":"
          "\"Event id to read after (nextAfter of the previous page)\"},"
      "\"limit\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":1000,"
          "\"default\":100}},"
      "\"required\":[\"runId\"],\"additionalProperties\":false}",

      "{\"type\":\"object\",\"properties\":{"
      "\"runId\":{\"type\":\"string\"},"
      "\"events\":{\"type\":\"array\",\"items\":{\"type\":\"object\","
          "\"properties\":{\"id\":{\"type\":\"string\"},"
          "\"type\":{\"type\":\"string\"},"
          "\"time\":" NGX_HTTP_SANDBOX_MCP_TS ","
          "\"data\":{}}}},"
      "\"nextAfter\":{\"type\":[\"string\",\"null\"]}},"
      "\"required\":[\"runId\",\"events\"]}",

      "runId, after, limit",
      ngx_http_sandbox_mcp_get_events }
};

#define NGX_HTTP_SANDBOX_MCP_NTOOLS                                           \
    (sizeof(ngx_http_sandbox_mcp_tools) / sizeof(ngx_http_sandbox_mcp_tool_t))


static json_t      *ngx_http_sandbox_mcp_tools_json;
static ngx_queue_t  ngx_http_sandbox_mcp_waiters[
                        NGX_HTTP_SANDBOX_MCP_WAITER_BUCKETS];


void
ngx_http_sandbox_mcp_tools_init_worker(void)
{
    ngx_uint_t  i;

    for (i = 0; i < NGX_HTTP_SANDBOX_MCP_WAITER_BUCKETS; i++) {
        ngx_queue_init(&ngx_http_sandbox_mcp_waiters[i]);
    }
}


static json_t *
ngx_http_sandbox_mcp_tools_array(void)
{
    json_t                       *tools, *tool, *in, *out;
    ngx_uint_t                    i;
    json_error_t                  err;
    ngx_http_sandbox_mcp_tool_t  *t;

    if (ngx_http_sandbox_mcp_tools_json) {
        return ngx_http_sandbox_mcp_tools_json;
    }

    tools = json_array();
    if (tools == NULL) {
        return NULL;
    }

    for (i = 0; i < NGX_HTTP_SANDBOX_MCP_NTOOLS; i++) {
        t = &ngx_http_sandbox_mcp_tools[i];

        in = json_loads(t->input_schema, 0, &err);
        out = json_loads(t->output_schema, 0, &err);

        if (in == NULL || out == NULL) {
            ngx_log_error(NGX_LOG_ALERT, ngx_cycle->log, 0,
                          "sandbox_mcp: bad schema of %s: %s", t->name,
                          err.text);
            json_decref(in);
            json_decref(out);
            json_decref(tools);
            return NULL;
        }

        tool = json_pack("{s:s, s:s, s:s, s:o, s:o, s:{s:b, s:b, s:b}}",
                         "name", t->name, "title", t->title,
                         "description", t->description,
                         "inputSchema", in, "outputSchema", out,
                         "annotations",
                             "readOnlyHint",
                             (i != NGX_HTTP_SANDBOX_MCP_RUN_TASK
                              && i != NGX_HTTP_SANDBOX_MCP_CANCEL_RUN),
                             "idempotentHint",
                             (i != NGX_HTTP_SANDBOX_MCP_RUN_TASK),
                             "openWorldHint",
                             (i == NGX_HTTP_SANDBOX_MCP_RUN_TASK));

        if (tool == NULL || json_array_append_new(tools, tool) != 0) {
            json_decref(tools);
            return NULL;
        }
    }

    ngx_http_sandbox_mcp_tools_json = tools;

    return tools;
}


/* opaque cursors (common/smcp_validate.c): base64url of a short text */

static json_t *
ngx_http_sandbox_mcp_cursor_encode(const char *text)
{
    char  buf[SMCP_CURSOR_MAX + 1];

    if (smcp_cursor_encode(buf, text, ngx_strlen(text)) != SMCP_OK) {
        return NULL;
    }

    return json_string(buf);
}


json_t *
ngx_http_sandbox_mcp_tools_list(ngx_http_sandbox_mcp_loc_conf_t *lcf,
    json_t *params, char *err, size_t errlen)
{
    json_t      *all, *page, *cursor, *next;
    size_t       i, start;
    uint64_t     n;
    char         text[32];

    all = ngx_http_sandbox_mcp_tools_array();
    if (all == NULL) {
        ngx_snprintf((u_char *) err, errlen, "Internal error%Z");
        return NULL;
    }

    start = 0;
    cursor = json_object_get(params, "cursor");

    if (cursor && !json_is_null(cursor)) {
        if (smcp_cursor_number(json_string_value(cursor),
                               json_string_length(cursor), 't',
                               json_array_size(all) - 1, &n)
            != SMCP_OK
            || n == 0)
        {
            ngx_snprintf((u_char *) err, errlen,
                         "Invalid params: unknown cursor%Z");
            return NULL;
        }

        start = (size_t) n;
    }

    page = json_array();
    if (page == NULL) {
        return NULL;
    }

    for (i = start; i < json_array_size(all) && i < start + lcf->page_size;
         i++)
    {
        json_array_append(page, json_array_get(all, i));
    }

    if (i < json_array_size(all)) {
        ngx_sprintf((u_char *) text, "t:%uz%Z", i);
        next = ngx_http_sandbox_mcp_cursor_encode(text);

        return json_pack("{s:o, s:o*}", "tools", page, "nextCursor", next);
    }

    return json_pack("{s:o}", "tools", page);
}


/* results */


static void
ngx_http_sandbox_mcp_tool_output(ngx_http_sandbox_mcp_call_t *call,
    json_t *structured)
{
    char    *text;
    json_t  *result;

    if (structured == NULL) {
        ngx_http_sandbox_mcp_call_error(call,
                                        NGX_HTTP_SANDBOX_MCP_INTERNAL_ERROR,
                                        "Internal error building the result");
        ngx_http_sandbox_mcp_call_done(call);
        return;
    }

    text = json_dumps(structured, JSON_COMPACT);

    result = text ? json_pack("{s:[{s:s, s:s}], s:o}",
                              "content", "type", "text", "text", text,
                              "structuredContent", structured)
                  : NULL;

    if (text == NULL) {
        json_decref(structured);
    }

    free(text);

    ngx_http_sandbox_mcp_call_result(call, result);
    ngx_http_sandbox_mcp_call_done(call);
}


static void
ngx_http_sandbox_mcp_tool_error(ngx_http_sandbox_mcp_call_t *call,
    const char *fmt, ...)
{
    u_char   *p;
    va_list   args;
    u_char    msg[512];

    /* nginx's formats: %V, %uz, %L, %*s ... */
    va_start(args, fmt);
    p = ngx_vslprintf(msg, msg + sizeof(msg) - 1, fmt, args);
    va_end(args);

    *p = '\0';

    ngx_http_sandbox_mcp_call_result(call,
                          json_pack("{s:[{s:s, s:s}], s:b}",
                                    "content", "type", "text",
                                    "text", (char *) msg, "isError", 1));
    ngx_http_sandbox_mcp_call_done(call);
}


static void
ngx_http_sandbox_mcp_tool_unavailable(ngx_http_sandbox_mcp_call_t *call)
{
    ngx_http_sandbox_mcp_call_unavailable(call);
    ngx_http_sandbox_mcp_call_done(call);
}


typedef struct {
    const char                  *fmt;       /* SMCP_KEY_* / SMCP_CHAN_* */
    ngx_str_t                   *arg;       /* NULL: the format has none */
} ngx_http_sandbox_mcp_key_t;


/*
 * Sends a script for a call: KEYS from key formats, then ARGV.  When Redis
 * is away the call is answered "unavailable" at once.
 */
static void
ngx_http_sandbox_mcp_call_script(ngx_http_sandbox_mcp_call_t *call,
    ngx_http_sandbox_mcp_script_t *script,
    ngx_http_sandbox_mcp_redis_handler_pt handler,
    ngx_http_sandbox_mcp_key_t *keys, ngx_uint_t nkeys, ngx_str_t *args,
    ngx_uint_t nargs)
{
    ngx_uint_t  i;
    ngx_str_t   argv[32];

    if (nkeys + nargs > 32) {
        ngx_http_sandbox_mcp_tool_unavailable(call);
        return;
    }

    for (i = 0; i < nkeys; i++) {
        if (ngx_http_sandbox_mcp_redis_key(call->ctx->request->pool,
                                           &argv[i], keys[i].fmt, keys[i].arg)
            != NGX_OK)
        {
            ngx_http_sandbox_mcp_tool_unavailable(call);
            return;
        }
    }

    for (i = 0; i < nargs; i++) {
        argv[nkeys + i] = args[i];
    }

    call->cmd = ngx_http_sandbox_mcp_redis_script(script, handler, call,
                                                  nkeys, nkeys + nargs, argv);

    if (call->cmd == NULL) {
        ngx_http_sandbox_mcp_tool_unavailable(call);
    }
}


static int64_t
ngx_http_sandbox_mcp_now_ms(void)
{
    ngx_time_t  *tp;

    tp = ngx_timeofday();

    return (int64_t) tp->sec * 1000 + tp->msec;
}


static ngx_str_t  ngx_http_sandbox_mcp_events_maxlen =
    ngx_string(SMCP_EVENTS_MAXLEN);


/* a reply that is an error, or none at all (connection lost) */
static ngx_uint_t
ngx_http_sandbox_mcp_reply_failed(ngx_http_sandbox_mcp_call_t *call,
    redisReply *reply)
{
    call->cmd = NULL;

    if (reply == NULL) {
        ngx_http_sandbox_mcp_tool_unavailable(call);
        return 1;
    }

    if (reply->type == REDIS_REPLY_ERROR) {
        ngx_log_error(NGX_LOG_ERR, call->ctx->request->connection->log, 0,
                      "sandbox_mcp: redis: %s", reply->str);
        ngx_http_sandbox_mcp_call_error(call,
                                        NGX_HTTP_SANDBOX_MCP_INTERNAL_ERROR,
                                        "Internal error: storage refused the "
                                        "request");
        ngx_http_sandbox_mcp_call_done(call);
        return 1;
    }

    return 0;
}


/* argument validation */


static ngx_int_t
ngx_http_sandbox_mcp_arg_string(ngx_http_sandbox_mcp_call_t *call,
    const char *name, ngx_uint_t required, size_t max, ngx_str_t *out)
{
    json_t  *v;

    ngx_str_null(out);

    v = json_object_get(call->args, name);

    if (v == NULL || json_is_null(v)) {
        if (required) {
            ngx_http_sandbox_mcp_tool_error(call, "Missing required argument "
                                            "'%s' (a string).", name);
            return NGX_ERROR;
        }

        return NGX_OK;
    }

    if (!json_is_string(v)) {
        ngx_http_sandbox_mcp_tool_error(call, "Argument '%s' must be a "
                                        "string.", name);
        return NGX_ERROR;
    }

    out->data = (u_char *) json_string_value(v);
    out->len = json_string_length(v);

    if (required && out->len == 0) {
        ngx_http_sandbox_mcp_tool_error(call, "Argument '%s' must not be "
                                        "empty.", name);
        return NGX_ERROR;
    }

    if (out->len > max) {
        ngx_http_sandbox_mcp_tool_error(call, "Argument '%s' is too long "
                                        "(%uz bytes; at most %uz).", name,
                                        out->len, max);
        return NGX_ERROR;
    }

    if (ngx_strlchr(out->data, out->data + out->len, '\0') != NULL) {
        ngx_http_sandbox_mcp_tool_error(call, "Argument '%s' must not "
                                        "contain NUL characters.", name);
        return NGX_ERROR;
    }

    return NGX_OK;
}


/* returns NGX_DECLINED when absent */
static ngx_int_t
ngx_http_sandbox_mcp_arg_integer(ngx_http_sandbox_mcp_call_t *call,
    const char *name, json_int_t min, json_int_t max, json_int_t *out)
{
    json_t  *v;
    double   d;

    v = json_object_get(call->args, name);

    if (v == NULL || json_is_null(v)) {
        return NGX_DECLINED;
    }

    if (json_is_integer(v)) {
        *out = json_integer_value(v);

    } else if (json_is_real(v)
               && json_real_value(v) > -9.0e15 && json_real_value(v) < 9.0e15
               && (d = json_real_value(v), d == (double) (json_int_t) d))
    {
        *out = (json_int_t) d;

    } else {
        ngx_http_sandbox_mcp_tool_error(call, "Argument '%s' must be an "
                                        "integer.", name);
        return NGX_ERROR;
    }

    if (*out < min || *out > max) {
        ngx_http_sandbox_mcp_tool_error(call, "Argument '%s' must be between "
                                        "%L and %L (got %L).", name,
                                        (int64_t) min, (int64_t) max,
                                        (int64_t) *out);
        return NGX_ERROR;
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_sandbox_mcp_args_known(ngx_http_sandbox_mcp_call_t *call,
    ngx_http_sandbox_mcp_tool_t *tool)
{
    size_t       n;
    const char  *key, *p;
    json_t      *v;

    json_object_foreach(call->args, key, v) {
        n = ngx_strlen(key);

        /* is key one of the comma-separated names? */
        for (p = tool->arguments; p; p = ngx_strchr(p, ',')) {
            while (*p == ',' || *p == ' ') {
                p++;
            }

            if (ngx_strncmp(p, key, n) == 0 && (p[n] == ',' || p[n] == '\0'))
            {
                break;
            }
        }

        if (p == NULL) {
            ngx_http_sandbox_mcp_tool_error(call, "Unknown argument '%*s' "
                                            "for %s; accepted: %s.",
                                            ngx_min(n, 64), key,
                                            tool->name, tool->arguments);
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_sandbox_mcp_arg_run_id(ngx_http_sandbox_mcp_call_t *call)
{
    if (ngx_http_sandbox_mcp_arg_string(call, "runId", 1, 64, &call->run_id)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    if (!smcp_valid_id((char *) call->run_id.data, call->run_id.len,
                       SMCP_RUN_ID_PREFIX))
    {
        ngx_http_sandbox_mcp_tool_error(call, "Run not found: '%*s' is not "
                                        "a runId (they look like run_ "
                                        "followed by 24 hex digits).",
                                        call->run_id.len, call->run_id.data);
        return NGX_ERROR;
    }

    return NGX_OK;
}


static void
ngx_http_sandbox_mcp_run_not_found(ngx_http_sandbox_mcp_call_t *call)
{
    ngx_http_sandbox_mcp_tool_error(call, "Run not found: %V (check the "
                                    "runId, or list your runs with "
                                    "opencode_list_runs).", &call->run_id);
}


void
ngx_http_sandbox_mcp_tools_call(ngx_http_sandbox_mcp_call_t *call,
    json_t *params)
{
    json_t       *name, *args;
    ngx_uint_t    i;
    const char   *s;

    name = json_object_get(params, "name");
    s = json_string_value(name);

    for (i = 0; s && i < NGX_HTTP_SANDBOX_MCP_NTOOLS; i++) {
        if (ngx_strcmp(s, ngx_http_sandbox_mcp_tools[i].name) == 0) {
            break;
        }
    }

    if (s == NULL || i == NGX_HTTP_SANDBOX_MCP_NTOOLS) {
        ngx_http_sandbox_mcp_call_error(call,
                                        NGX_HTTP_SANDBOX_MCP_INVALID_PARAMS,
                                        "Unknown tool: %*s",
                                        s ? ngx_min(ngx_strlen(s), 100) : 0,
                                        s ? s : "");
        ngx_http_sandbox_mcp_call_done(call);
        return;
    }

    args = json_object_get(params, "arguments");

    if (args == NULL || json_is_null(args)) {
        args = json_object();
        if (args == NULL
            || ngx_http_sandbox_mcp_add_cleanup(call->ctx->request, args,
                                                args)
               != NGX_OK)
        {
            ngx_http_sandbox_mcp_tool_unavailable(call);
            return;
        }

    } else if (!json_is_object(args)) {
        ngx_http_sandbox_mcp_tool_error(call, "Arguments must be an object.");
        return;
    }

    call->args = args;
    call->tool = i;

    if (ngx_http_sandbox_mcp_args_known(call, &ngx_http_sandbox_mcp_tools[i])
        != NGX_OK)
    {
        return;
    }

    ngx_http_sandbox_mcp_tools[i].start(call);
}


/* watchUrl: a dashboard link signed for this run */

static json_t *
ngx_http_sandbox_mcp_watch_url(ngx_http_sandbox_mcp_call_t *call,
    ngx_str_t *run_id)
{
    char                              *tok;
    u_char                            *p, *url;
    size_t                             len;
    json_t                            *claims, *s;
    ngx_str_t                          base;
    ngx_http_request_t                *r;
    ngx_http_sandbox_mcp_loc_conf_t   *lcf;
    ngx_http_sandbox_mcp_main_conf_t  *mcf;

    r = call->ctx->request;
    lcf = ngx_http_get_module_loc_conf(r, ngx_http_sandbox_mcp_module);
    mcf = ngx_http_get_module_main_conf(r, ngx_http_sandbox_mcp_module);

    claims = json_pack("{s:s%, s:s, s:s%, s:I, s:I}",
                       "sub", (char *) call->ctx->tenant.data,
                       call->ctx->tenant.len,
                       "scope", SMCP_SCOPE_UI,
                       "run", (char *) run_id->data, run_id->len,
                       "iat", (json_int_t) ngx_time(),
                       "exp", (json_int_t) (ngx_time() + lcf->ui_token_ttl));

    if (claims == NULL) {
        return NULL;
    }

    if (smcp_jwt_sign(mcf->secret, mcf->secret_len, claims, &tok) != SMCP_OK)
    {
        json_decref(claims);
        return NULL;
    }

    json_decref(claims);

    if (lcf->public_url.len) {
        base = lcf->public_url;

    } else {
        base.len = 0;
        base.data = NULL;
    }

    len = base.len + sizeof("https://") - 1
          + (r->headers_in.host ? r->headers_in.host->value.len : 9)
          + sizeof("/ui/runs/") - 1 + run_id->len + sizeof("?token=") - 1
          + ngx_strlen(tok);

    url = ngx_pnalloc(r->pool, len);
    if (url == NULL) {
        free(tok);
        return NULL;
    }

    if (base.len) {
        p = ngx_cpymem(url, base.data, base.len);

    } else {
        p = ngx_sprintf(url, "%s://",
#if (NGX_HTTP_SSL)
                        r->connection->ssl ? "https" :
#endif
                        "http");

        if (r->headers_in.host) {
            p = ngx_cpymem(p, r->headers_in.host->value.data,
                           r->headers_in.host->value.len);

        } else {
            p = ngx_cpymem(p, "localhost", 9);
        }
    }

    p = ngx_sprintf(p, "/ui/runs/%V?token=%s", run_id, tok);

    free(tok);

    s = json_stringn((char *) url, p - url);

    return s;
}


/* opencode_run_task */


static void
ngx_http_sandbox_mcp_run_created(void *data, redisReply *reply)
{
    ngx_http_sandbox_mcp_call_t *call = data;

    json_t                           *session;
    ngx_http_sandbox_mcp_loc_conf_t  *lcf;

    if (ngx_http_sandbox_mcp_reply_failed(call, reply)) {
        return;
    }

    lcf = ngx_http_get_module_loc_conf(call->ctx->request,
                                       ngx_http_sandbox_mcp_module);

    if (reply->type == REDIS_REPLY_INTEGER
        && reply->integer == NGX_HTTP_SANDBOX_MCP_QUEUE_FULL)
    {
        ngx_http_sandbox_mcp_tool_error(call, "Too many runs waiting to "
                                        "start: you already have %ui queued "
                                        "runs, the limit. Wait until some "
                                        "start or finish (opencode_list_runs "
                                        "with status started), or cancel "
                                        "some with opencode_cancel_run, then "
                                        "try again.", lcf->max_queued);
        return;
    }

    if (reply->type == REDIS_REPLY_INTEGER
        && reply->integer == NGX_HTTP_SANDBOX_MCP_SESSION_EXPIRED)
    {
        ngx_http_sandbox_mcp_tool_error(call, "Session expired: %V was idle "
                                        "longer than %T seconds and its "
                                        "workspace was removed; start a new "
                                        "session by omitting sessionId.",
                                        &call->path, lcf->session_idle);
        return;
    }

    if (reply->type != REDIS_REPLY_INTEGER
        || reply->integer != NGX_HTTP_SANDBOX_MCP_CREATED)
    {
        ngx_http_sandbox_mcp_tool_error(call, "Unknown sessionId: %V (omit "
                                        "sessionId to start a new session, "
                                        "or use one returned by "
                                        "opencode_run_task).", &call->path);
        return;
    }

    session = json_stringn((char *) call->path.data, call->path.len);

    ngx_http_sandbox_mcp_tool_output(call,
        json_pack("{s:s%, s:o, s:s, s:o*}",
                  "runId", (char *) call->run_id.data, call->run_id.len,
                  "sessionId", session,
                  "status", SMCP_STATUS_STARTED,
                  "watchUrl",
                  ngx_http_sandbox_mcp_watch_url(call, &call->run_id)));
}


/* the arguments of opencode_run_task, validated */
typedef struct {
    ngx_str_t                   task;
    ngx_str_t                   repo;
    ngx_str_t                   branch;
    ngx_str_t                   session;
    ngx_str_t                   model;
    ngx_str_t                   title;
    json_int_t                  timeout;
    ngx_uint_t                  create_pr;
    ngx_int_t                   max_cost;       /* micro-USD, 0: no cap */
    u_char                      title_buf[128];
    u_char                      cost_buf[NGX_INT64_LEN + 2];
} ngx_http_sandbox_mcp_task_t;


/* is the repository among the token's grants (its "repos" claim)? */
static ngx_int_t
ngx_http_sandbox_mcp_task_granted(ngx_http_sandbox_mcp_call_t *call,
    smcp_repo_t *repo)
{
    u_char      *p, *last;
    ngx_str_t   *g;
    ngx_uint_t   i, n;
    u_char       list[256];

    g = call->ctx->repos ? call->ctx->repos->elts : NULL;
    n = call->ctx->repos ? call->ctx->repos->nelts : 0;

    for (i = 0; i < n; i++) {
        if (smcp_grant_match((char *) g[i].data, g[i].len, repo)) {
            return NGX_OK;
        }
    }

    if (n == 0) {
        ngx_http_sandbox_mcp_tool_error(call, "Repository %*s/%*s is not "
                                        "granted: this token grants no "
                                        "repositories (its \"repos\" claim "
                                        "is missing). Ask for a token "
                                        "minted with --repos owner/repo.",
                                        repo->owner_len, repo->owner,
                                        repo->name_len, repo->name);
        return NGX_ERROR;
    }

    p = list;
    last = list + sizeof(list) - 4;

    for (i = 0; i < n && p < last; i++) {
        p = ngx_slprintf(p, last, "%s%V", i ? ", " : "", &g[i]);
    }

    if (i < n || p == last) {
        p = ngx_cpymem(p, "...", 3);
    }

    *p = '\0';

    ngx_http_sandbox_mcp_tool_error(call, "Repository %*s/%*s is not granted "
                                    "to this token; it may name only: %s.",
                                    repo->owner_len, repo->owner,
                                    repo->name_len, repo->name, list);
    return NGX_ERROR;
}


static ngx_int_t
ngx_http_sandbox_mcp_task_strings(ngx_http_sandbox_mcp_call_t *call,
    ngx_http_sandbox_mcp_loc_conf_t *lcf, ngx_http_sandbox_mcp_task_t *t)
{
    if (ngx_http_sandbox_mcp_arg_string(call, "task", 1, lcf->max_task_size,
                                        &t->task)
        != NGX_OK
        || ngx_http_sandbox_mcp_arg_string(call, "repository", 0, 512,
                                           &t->repo)
           != NGX_OK
        || ngx_http_sandbox_mcp_arg_string(call, "branch", 0,
                                           SMCP_BRANCH_MAX, &t->branch)
           != NGX_OK
        || ngx_http_sandbox_mcp_arg_string(call, "sessionId", 0, 64,
                                           &t->session)
           != NGX_OK
        || ngx_http_sandbox_mcp_arg_string(call, "model", 0,
                                           SMCP_MODEL_MAX, &t->model)
           != NGX_OK
        || ngx_http_sandbox_mcp_arg_string(call, "title", 0, 200, &t->title)
           != NGX_OK)
    {
        return NGX_ERROR;
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_sandbox_mcp_task_repository(ngx_http_sandbox_mcp_call_t *call,
    ngx_http_sandbox_mcp_loc_conf_t *lcf, ngx_http_sandbox_mcp_task_t *t)
{
    smcp_repo_t  repo;

    if (t->repo.len == 0) {
        if (t->branch.len) {
            ngx_http_sandbox_mcp_tool_error(call, "Argument 'branch' needs "
                                            "'repository'.");
            return NGX_ERROR;
        }

        return NGX_OK;
    }

    if (smcp_repo_parse((char *) t->repo.data, t->repo.len,
                        (char *) lcf->github_host.data, lcf->github_host.len,
                        &repo)
        != SMCP_OK)
    {
        ngx_http_sandbox_mcp_tool_error(call, "Argument 'repository' must be "
                                        "an https URL of a repository on %V, "
                                        "like https://%V/owner/repo (no "
                                        "credentials, port, query or "
                                        "fragment).",
                                        &lcf->github_host, &lcf->github_host);
        return NGX_ERROR;
    }

    if (t->branch.len
        && !smcp_valid_branch((char *) t->branch.data, t->branch.len))
    {
        ngx_http_sandbox_mcp_tool_error(call, "Argument 'branch' is not a "
                                        "valid git branch name (ASCII; no "
                                        "spaces, '..', '~^:?*[\\', leading "
                                        "'-' or trailing '.lock').");
        return NGX_ERROR;
    }

    return ngx_http_sandbox_mcp_task_granted(call, &repo);
}


/* micro-USD as decimal dollars ("25", "2.5"); returns the end (no NUL) */
static u_char *
ngx_http_sandbox_mcp_usd(u_char *p, ngx_int_t micro)
{
    ngx_int_t  frac;

    p = ngx_sprintf(p, "%i", micro / 1000000);
    frac = micro % 1000000;

    if (frac) {
        p = ngx_sprintf(p, ".%06i", frac);

        while (p[-1] == '0') {
            p--;
        }
    }

    return p;
}


/* maxCostUsd: more than 0 and at most sandbox_mcp_max_cost_usd (if set) */
static ngx_int_t
ngx_http_sandbox_mcp_task_cost(ngx_http_sandbox_mcp_call_t *call,
    ngx_http_sandbox_mcp_loc_conf_t *lcf, ngx_http_sandbox_mcp_task_t *t)
{
    json_t  *v;
    double   d, max;
    u_char   buf[NGX_INT64_LEN + 2], *p;

    t->max_cost = lcf->max_cost;

    v = json_object_get(call->args, "maxCostUsd");

    if (v == NULL || json_is_null(v)) {
        return NGX_OK;
    }

    d = json_is_number(v) ? json_number_value(v) : -1;
    max = lcf->max_cost ? lcf->max_cost / 1e6 : 1e6;

    if (!(d * 1e6 >= 1) || d > max) {
        p = ngx_http_sandbox_mcp_usd(buf, (ngx_int_t) (max * 1e6));
        *p = '\0';

        ngx_http_sandbox_mcp_tool_error(call, "Argument 'maxCostUsd' must be "
                                        "a number of US dollars more than 0 "
                                        "and at most %s.", buf);
        return NGX_ERROR;
    }

    t->max_cost = (ngx_int_t) (d * 1e6 + 0.5);

    return NGX_OK;
}


static ngx_int_t
ngx_http_sandbox_mcp_task_options(ngx_http_sandbox_mcp_call_t *call,
    ngx_http_sandbox_mcp_loc_conf_t *lcf, ngx_http_sandbox_mcp_task_t *t)
{
    json_t     *v;
    ngx_int_t   rc;

    if (t->session.len
        && !smcp_valid_id((char *) t->session.data, t->session.len,
                          SMCP_SESSION_ID_PREFIX))
    {
        ngx_http_sandbox_mcp_tool_error(call, "Unknown sessionId: sessionIds "
                                        "look like ses_ followed by 24 hex "
                                        "digits (omit it to start a new "
                                        "session).");
        return NGX_ERROR;
    }

    if (t->model.len == 0) {
        t->model = lcf->default_model;

    } else if (!smcp_valid_model((char *) t->model.data, t->model.len)) {
        ngx_http_sandbox_mcp_tool_error(call, "Argument 'model' must look "
                                        "like provider/model, e.g. "
                                        "anthropic/claude-sonnet-4-5.");
        return NGX_ERROR;
    }

    v = json_object_get(call->args, "createPullRequest");

    if (v && !json_is_null(v) && !json_is_boolean(v)) {
        ngx_http_sandbox_mcp_tool_error(call, "Argument 'createPullRequest' "
                                        "must be true or false.");
        return NGX_ERROR;
    }

    t->create_pr = json_is_true(v);

    if (t->create_pr && t->repo.len == 0) {
        ngx_http_sandbox_mcp_tool_error(call, "Argument 'createPullRequest' "
                                        "needs 'repository'.");
        return NGX_ERROR;
    }

    rc = ngx_http_sandbox_mcp_arg_integer(call, "timeoutSeconds", 1,
                                          lcf->run_timeout_max, &t->timeout);
    if (rc == NGX_ERROR) {
        return NGX_ERROR;
    }

    if (rc == NGX_DECLINED) {
        t->timeout = lcf->run_timeout;
    }

    return ngx_http_sandbox_mcp_task_cost(call, lcf, t);
}


/* no title: the task's first line, shortened on a character boundary */
static void
ngx_http_sandbox_mcp_task_title(ngx_http_sandbox_mcp_task_t *t)
{
    size_t  i, n;

    if (t->title.len) {
        return;
    }

    n = 0;

    for (i = 0; i < t->task.len && t->task.data[i] != '\n' && i < 80; i++) {
        if ((t->task.data[i] & 0xc0) != 0x80) {
            n = i;
        }
    }

    if (i == t->task.len || t->task.data[i] == '\n') {
        n = i;
    }

    ngx_memcpy(t->title_buf, t->task.data, n);
    t->title.data = t->title_buf;
    t->title.len = n;
}


/* a new run id in call->run_id, the session's (new or given) in call->path */
static ngx_int_t
ngx_http_sandbox_mcp_task_ids(ngx_http_sandbox_mcp_call_t *call,
    ngx_http_sandbox_mcp_task_t *t)
{
    ngx_pool_t  *pool;
    char         id[SMCP_ID_LEN + 1];

    pool = call->ctx->request->pool;

    call->run_id.data = ngx_pnalloc(pool, SMCP_ID_LEN);
    call->path.data = ngx_pnalloc(pool, SMCP_ID_LEN);

    if (call->run_id.data == NULL || call->path.data == NULL
        || smcp_make_id(id, SMCP_RUN_ID_PREFIX) != SMCP_OK)
    {
        return NGX_ERROR;
    }

    call->run_id.len = SMCP_ID_LEN;
    ngx_memcpy(call->run_id.data, id, SMCP_ID_LEN);

    if (t->session.len == 0) {
        if (smcp_make_id(id, SMCP_SESSION_ID_PREFIX) != SMCP_OK) {
            return NGX_ERROR;
        }

        ngx_memcpy(call->path.data, id, SMCP_ID_LEN);

    } else {
        ngx_memcpy(call->path.data, t->session.data, SMCP_ID_LEN);
    }

    call->path.len = SMCP_ID_LEN;

    return NGX_OK;
}


static void
ngx_http_sandbox_mcp_task_send(ngx_http_sandbox_mcp_call_t *call,
    ngx_http_sandbox_mcp_loc_conf_t *lcf, ngx_http_sandbox_mcp_task_t *t)
{
    int64_t                      now;
    ngx_str_t                    args[21];
    ngx_pool_t                  *pool;
    ngx_http_sandbox_mcp_key_t   keys[9];

    pool = call->ctx->request->pool;
    now = ngx_http_sandbox_mcp_now_ms();

    keys[0].fmt = SMCP_KEY_RUN;
    keys[0].arg = &call->run_id;
    keys[1].fmt = SMCP_KEY_RUN_EVENTS;
    keys[1].arg = &call->run_id;
    keys[2].fmt = SMCP_KEY_TENANT_RUNS;
    keys[2].arg = &call->ctx->tenant;
    keys[3].fmt = SMCP_KEY_SESSION;
    keys[3].arg = &call->path;
    keys[4].fmt = SMCP_KEY_SESSION_RUNS;
    keys[4].arg = &call->path;
    keys[5].fmt = SMCP_KEY_QUEUE;
    keys[5].arg = NULL;
    keys[6].fmt = SMCP_CHAN_RUN;
    keys[6].arg = &call->run_id;
    keys[7].fmt = SMCP_KEY_TENANT_ACTIVE;
    keys[7].arg = &call->ctx->tenant;
    keys[8].fmt = SMCP_KEY_SESSIONS;
    keys[8].arg = NULL;

    args[0] = call->run_id;
    args[1] = call->ctx->tenant;
    args[2] = call->path;
    ngx_str_set(&args[3], "1");
    if (t->session.len) {
        ngx_str_set(&args[3], "0");
    }
    args[4] = ngx_http_sandbox_mcp_redis_number(pool, now);
    args[5] = t->task;
    args[6] = t->repo;
    args[7] = t->branch;
    args[8] = t->model;
    args[9] = t->title;
    ngx_str_set(&args[10], "0");
    if (t->create_pr) {
        ngx_str_set(&args[10], "1");
    }
    args[11] = ngx_http_sandbox_mcp_redis_number(pool, t->timeout);
    args[12] = ngx_http_sandbox_mcp_events_maxlen;

    if (ngx_http_sandbox_mcp_redis_key(pool, &args[13], SMCP_KEY_RUN, NULL)
        != NGX_OK)
    {
        ngx_http_sandbox_mcp_tool_unavailable(call);
        return;
    }

    args[14] = ngx_http_sandbox_mcp_redis_number(pool, lcf->max_queued);
    args[15] = ngx_http_sandbox_mcp_redis_number(pool, lcf->max_running);
    args[16].data = t->cost_buf;
    args[16].len = ngx_http_sandbox_mcp_usd(t->cost_buf, t->max_cost)
                   - t->cost_buf;
    args[17] = ngx_http_sandbox_mcp_redis_number(pool, lcf->retention);
    args[18] = ngx_http_sandbox_mcp_redis_number(pool, lcf->session_idle);
    args[19] = ngx_http_sandbox_mcp_redis_number(pool,
                                      now + (int64_t) lcf->session_idle * 1000);

    /* no run older than this has keys left: its index entries go */
    args[20] = ngx_http_sandbox_mcp_redis_number(pool,
                   now - ((int64_t) lcf->retention + lcf->run_timeout_max)
                         * 1000);

    ngx_http_sandbox_mcp_call_script(call,
                                     &ngx_http_sandbox_mcp_script_run_create,
                                     ngx_http_sandbox_mcp_run_created,
                                     keys, 9, args, 21);
}


/* every check before anything is written: the script checks the rest */
static void
ngx_http_sandbox_mcp_run_task(ngx_http_sandbox_mcp_call_t *call)
{
    ngx_http_sandbox_mcp_task_t       t;
    ngx_http_sandbox_mcp_loc_conf_t  *lcf;

    lcf = ngx_http_get_module_loc_conf(call->ctx->request,
                                       ngx_http_sandbox_mcp_module);

    ngx_memzero(&t, sizeof(ngx_http_sandbox_mcp_task_t));

    if (ngx_http_sandbox_mcp_task_strings(call, lcf, &t) != NGX_OK
        || ngx_http_sandbox_mcp_task_repository(call, lcf, &t) != NGX_OK
        || ngx_http_sandbox_mcp_task_options(call, lcf, &t) != NGX_OK)
    {
        return;
    }

    ngx_http_sandbox_mcp_task_title(&t);

    if (ngx_http_sandbox_mcp_task_ids(call, &t) != NGX_OK) {
        ngx_http_sandbox_mcp_tool_unavailable(call);
        return;
    }

    ngx_http_sandbox_mcp_task_send(call, lcf, &t);
}


/* a run hash (HGETALL reply) as the tools' run object */


static redisReply *
ngx_http_sandbox_mcp_field(redisReply *h, const char *name)
{
    size_t  i, n;

    n = ngx_strlen(name);

    for (i = 0; i + 1 < h->elements; i += 2) {
        if (h->element[i]->len == n
            && ngx_strncmp(h->element[i]->str, name, n) == 0)
        {
            return h->element[i + 1];
        }
    }

    return NULL;
}


/* a string from Redis as JSON: null when absent or empty (if nullable) */
static json_t *
ngx_http_sandbox_mcp_json_text(redisReply *v, ngx_uint_t nullable)
{
    json_t  *s;

    if (v == NULL || v->type != REDIS_REPLY_STRING
        || (v->len == 0 && nullable))
    {
        return nullable ? json_null() : json_string("");
    }

    s = json_stringn(v->str, v->len);

    if (s == NULL) {
        /* not UTF-8: the bytes are replaced in place, the reply is ours */
        smcp_utf8_sanitize(v->str, v->len);
        s = json_stringn(v->str, v->len);
    }

    return s;
}


/* a decimal from Redis as a JSON real; NULL when absent or not a number */
static json_t *
ngx_http_sandbox_mcp_json_number(redisReply *v)
{
    char    *end;
    double   d;
    char     buf[64];

    if (v == NULL || v->type != REDIS_REPLY_STRING || v->len == 0
        || v->len >= sizeof(buf))
    {
        return NULL;
    }

    ngx_memcpy(buf, v->str, v->len);
    buf[v->len] = '\0';

    d = strtod(buf, &end);

    if (*end != '\0' || d != d || d > 1e15 || d < -1e15) {
        return NULL;
    }

    return json_real(d);
}


static json_t *
ngx_http_sandbox_mcp_json_time(redisReply *v)
{
    int64_t  ms;
    char     buf[40];

    if (v == NULL || v->type != REDIS_REPLY_STRING || v->len == 0) {
        return json_null();
    }

    ms = ngx_atoof((u_char *) v->str, v->len);
    if (ms <= 0) {
        return json_null();
    }

    smcp_iso8601_ms(buf, sizeof(buf), ms);

    return json_string(buf);
}


static json_int_t
ngx_http_sandbox_mcp_int(redisReply *v)
{
    off_t  n;

    if (v == NULL || v->type != REDIS_REPLY_STRING || v->len == 0) {
        return 0;
    }

    if (v->str[0] == '-') {
        n = ngx_atoof((u_char *) v->str + 1, v->len - 1);
        return n == NGX_ERROR ? 0 : -(json_int_t) n;
    }

    n = ngx_atoof((u_char *) v->str, v->len);

    return n == NGX_ERROR ? 0 : (json_int_t) n;
}


static json_t *
ngx_http_sandbox_mcp_run_object(ngx_http_sandbox_mcp_call_t *call,
    redisReply *h)
{
    json_t      *files, *exit_code, *cost, *max_cost;
    redisReply  *v;

#define F(name)  ngx_http_sandbox_mcp_field(h, name)

    files = NULL;
    v = F("files_changed");

    if (v && v->type == REDIS_REPLY_STRING && v->len) {
        files = json_loadb(v->str, v->len, 0, NULL);
        if (!json_is_array(files)) {
            json_decref(files);
            files = NULL;
        }
    }

    if (files == NULL) {
        files = json_array();
    }

    v = F("exit_code");
    exit_code = (v && v->type == REDIS_REPLY_STRING && v->len)
                ? json_integer(ngx_http_sandbox_mcp_int(v)) : json_null();

    cost = ngx_http_sandbox_mcp_json_number(F("cost"));
    max_cost = ngx_http_sandbox_mcp_json_number(F("max_cost"));

    if (max_cost && json_real_value(max_cost) <= 0) {
        /* "0" or nothing: no cap */
        json_decref(max_cost);
        max_cost = NULL;
    }

    v = F("status");

    return json_pack("{s:s%, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o,"
                     " s:o, s:o, s:o, s:o, s:o, s:o, s:o,"
                     " s:{s:I, s:I, s:I, s:I, s:I}, s:o, s:o, s:I, s:b,"
                     " s:o*}",
        "runId", (char *) call->run_id.data, call->run_id.len,
        "sessionId", ngx_http_sandbox_mcp_json_text(F("session"), 0),
        "status", ngx_http_sandbox_mcp_json_text(v, 0),
        "title", ngx_http_sandbox_mcp_json_text(F("title"), 0),
        "task", ngx_http_sandbox_mcp_json_text(F("task"), 0),
        "repository", ngx_http_sandbox_mcp_json_text(F("repository"), 1),
        "branch", ngx_http_sandbox_mcp_json_text(F("branch"), 1),
        "model", ngx_http_sandbox_mcp_json_text(F("model"), 0),
        "createdAt", ngx_http_sandbox_mcp_json_time(F("created_at")),
        "startedAt", ngx_http_sandbox_mcp_json_time(F("started_at")),
        "finishedAt", ngx_http_sandbox_mcp_json_time(F("finished_at")),
        "result", ngx_http_sandbox_mcp_json_text(F("result"), 1),
        "error", ngx_http_sandbox_mcp_json_text(F("error"), 1),
        "exitCode", exit_code,
        "filesChanged", files,
        "diffStat", ngx_http_sandbox_mcp_json_text(F("diff_stat"), 1),
        "pullRequestUrl", ngx_http_sandbox_mcp_json_text(F("pr_url"), 1),
        "tokens",
            "input", ngx_http_sandbox_mcp_int(F("tokens_input")),
            "output", ngx_http_sandbox_mcp_int(F("tokens_output")),
            "reasoning", ngx_http_sandbox_mcp_int(F("tokens_reasoning")),
            "cacheRead", ngx_http_sandbox_mcp_int(F("tokens_cache_read")),
            "cacheWrite", ngx_http_sandbox_mcp_int(F("tokens_cache_write")),
        "cost", cost ? cost : json_real(0),
        "maxCostUsd", max_cost ? max_cost : json_null(),
        "timeoutSeconds", ngx_http_sandbox_mcp_int(F("timeout")),
        "cancelRequested", ngx_http_sandbox_mcp_int(F("cancel_requested"))
                           != 0,
        "watchUrl", ngx_http_sandbox_mcp_watch_url(call, &call->run_id));

#undef F
}


/* the HGETALL reply is this tenant's run */
static ngx_uint_t
ngx_http_sandbox_mcp_run_visible(ngx_http_sandbox_mcp_call_t *call,
    redisReply *h)
{
    redisReply  *t;

    if (h->type != REDIS_REPLY_ARRAY || h->elements == 0) {
        return 0;
    }

    t = ngx_http_sandbox_mcp_field(h, "tenant");

    return t && t->type == REDIS_REPLY_STRING
           && t->len == call->ctx->tenant.len
           && ngx_strncmp(t->str, call->ctx->tenant.data, t->len) == 0;
}


static ngx_uint_t
ngx_http_sandbox_mcp_terminal(redisReply *h)
{
    redisReply  *s;

    s = ngx_http_sandbox_mcp_field(h, "status");

    if (s == NULL || s->type != REDIS_REPLY_STRING) {
        return 0;
    }

    return (s->len == sizeof(SMCP_STATUS_COMPLETED) - 1
            && ngx_strncmp(s->str, SMCP_STATUS_COMPLETED, s->len) == 0)
           || (s->len == sizeof(SMCP_STATUS_FAILED) - 1
               && ngx_strncmp(s->str, SMCP_STATUS_FAILED, s->len) == 0)
           || (s->len == sizeof(SMCP_STATUS_CANCELLED) - 1
               && ngx_strncmp(s->str, SMCP_STATUS_CANCELLED, s->len) == 0);
}


/* opencode_get_result and its long-poll */


static ngx_queue_t *
ngx_http_sandbox_mcp_bucket(ngx_str_t *run_id)
{
    return &ngx_http_sandbox_mcp_waiters[ngx_crc32_short(run_id->data,
                                                         run_id->len)
                                         % NGX_HTTP_SANDBOX_MCP_WAITER_BUCKETS];
}


static void
ngx_http_sandbox_mcp_unwait(ngx_http_sandbox_mcp_call_t *call)
{
    if (call->waiting) {
        ngx_queue_remove(&call->waiter);
        call->waiting = 0;
    }

    if (call->wait.timer_set) {
        ngx_del_timer(&call->wait);
    }
}


void
ngx_http_sandbox_mcp_tools_cleanup(ngx_http_sandbox_mcp_call_t *call)
{
    ngx_http_sandbox_mcp_unwait(call);
}


static void
ngx_http_sandbox_mcp_wake(ngx_http_sandbox_mcp_call_t *call)
{
    if (call->cmd) {
        /* a read is in flight; read once more after it */
        call->recheck = 1;
        return;
    }

    ngx_http_sandbox_mcp_result_fetch(call);
}


void
ngx_http_sandbox_mcp_tools_run_event(ngx_str_t *run_id)
{
    ngx_queue_t                  *bucket, *q, *next;
    ngx_http_sandbox_mcp_call_t  *call;

    bucket = ngx_http_sandbox_mcp_bucket(run_id);

    for (q = ngx_queue_head(bucket);
         q != ngx_queue_sentinel(bucket);
         q = next)
    {
        /* waking may finish the call and unlink it */
        next = ngx_queue_next(q);

        call = ngx_queue_data(q, ngx_http_sandbox_mcp_call_t, waiter);

        if (call->run_id.len == run_id->len
            && ngx_strncmp(call->run_id.data, run_id->data, run_id->len) == 0)
        {
            ngx_http_sandbox_mcp_wake(call);
        }
    }
}


void
ngx_http_sandbox_mcp_tools_wake_all(void)
{
    ngx_uint_t                    i;
    ngx_queue_t                  *bucket, *q, *next;
    ngx_http_sandbox_mcp_call_t  *call;

    for (i = 0; i < NGX_HTTP_SANDBOX_MCP_WAITER_BUCKETS; i++) {
        bucket = &ngx_http_sandbox_mcp_waiters[i];

        for (q = ngx_queue_head(bucket);
             q != ngx_queue_sentinel(bucket);
             q = next)
        {
            next = ngx_queue_next(q);
            call = ngx_queue_data(q, ngx_http_sandbox_mcp_call_t, waiter);
            ngx_http_sandbox_mcp_wake(call);
        }
    }
}


static void
ngx_http_sandbox_mcp_result_reply(void *data, redisReply *reply)
{
    ngx_http_sandbox_mcp_call_t *call = data;

    if (reply == NULL || reply->type == REDIS_REPLY_ERROR) {
        ngx_http_sandbox_mcp_unwait(call);
        (void) ngx_http_sandbox_mcp_reply_failed(call, reply);
        return;
    }

    call->cmd = NULL;

    if (!ngx_http_sandbox_mcp_run_visible(call, reply)) {
        ngx_http_sandbox_mcp_unwait(call);
        ngx_http_sandbox_mcp_run_not_found(call);
        return;
    }

    if (call->waiting && !call->expired
        && !ngx_http_sandbox_mcp_terminal(reply))
    {
        if (call->recheck) {
            call->recheck = 0;
            ngx_http_sandbox_mcp_result_fetch(call);
        }

        /* keep waiting: a ping or the timer will read again */
        return;
    }

    ngx_http_sandbox_mcp_unwait(call);
    ngx_http_sandbox_mcp_tool_output(call,
                                  ngx_http_sandbox_mcp_run_object(call, reply));
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
        ngx_http_sandbox_mcp_unwait(call);
        ngx_http_sandbox_mcp_tool_unavailable(call);
        return;
    }

    call->recheck = 0;
    call->cmd = ngx_http_sandbox_mcp_redis_command(
                    ngx_http_sandbox_mcp_result_reply, call, 2, argv);

    if (call->cmd == NULL) {
        ngx_http_sandbox_mcp_unwait(call);
        ngx_http_sandbox_mcp_tool_unavailable(call);
    }
}


static void
ngx_http_sandbox_mcp_wait_expired(ngx_event_t *ev)
{
    ngx_http_sandbox_mcp_call_t *call = ev->data;

    call->expired = 1;

    if (call->cmd == NULL) {
        ngx_http_sandbox_mcp_result_fetch(call);
    }
}


static void
ngx_http_sandbox_mcp_get_result(ngx_http_sandbox_mcp_call_t *call)
{
    json_t                           *v;
    double                            wait;
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

    if (wait > 0) {
        /*
         * Listen before the first read: a ping between the read and the
         * registration would otherwise be lost.
         */
        call->waiting = 1;
        ngx_queue_insert_tail(ngx_http_sandbox_mcp_bucket(&call->run_id),
                              &call->waiter);

        call->wait.handler = ngx_http_sandbox_mcp_wait_expired;
        call->wait.data = call;
        call->wait.log = call->ctx->request->connection->log;

        ngx_add_timer(&call->wait, (ngx_msec_t) (wait * 1000));

        /* a client that goes away ends the wait */
        call->ctx->request->read_event_handler = ngx_http_test_reading;
    }

    ngx_http_sandbox_mcp_result_fetch(call);
}


/* opencode_cancel_run */


static void
ngx_http_sandbox_mcp_cancel_reply(void *data, redisReply *reply)
{
    ngx_http_sandbox_mcp_call_t *call = data;

    if (ngx_http_sandbox_mcp_reply_failed(call, reply)) {
        return;
    }

    if (!ngx_http_sandbox_mcp_run_visible(call, reply)) {
        ngx_http_sandbox_mcp_run_not_found(call);
        return;
    }

    ngx_http_sandbox_mcp_tool_output(call,
                                  ngx_http_sandbox_mcp_run_object(call, reply));
}


static void
ngx_http_sandbox_mcp_cancel_run(ngx_http_sandbox_mcp_call_t *call)
{
    ngx_str_t                         args[5];
    ngx_pool_t                       *pool;
    ngx_http_sandbox_mcp_key_t        keys[6];
    ngx_http_sandbox_mcp_loc_conf_t  *lcf;

    pool = call->ctx->request->pool;
    lcf = ngx_http_get_module_loc_conf(call->ctx->request,
                                       ngx_http_sandbox_mcp_module);

    if (ngx_http_sandbox_mcp_arg_run_id(call) != NGX_OK) {
        return;
    }

    keys[0].fmt = SMCP_KEY_RUN;
    keys[0].arg = &call->run_id;
    keys[1].fmt = SMCP_KEY_RUN_EVENTS;
    keys[1].arg = &call->run_id;
    keys[2].fmt = SMCP_CHAN_RUN;
    keys[2].arg = &call->run_id;
    keys[3].fmt = SMCP_CHAN_CANCEL;
    keys[3].arg = NULL;
    keys[4].fmt = SMCP_KEY_TENANT_ACTIVE;
    keys[4].arg = &call->ctx->tenant;
    keys[5].fmt = SMCP_KEY_RUN_DIFF;
    keys[5].arg = &call->run_id;

    args[0] = call->ctx->tenant;
    args[1] = ngx_http_sandbox_mcp_redis_number(pool,
                                                 ngx_http_sandbox_mcp_now_ms());
    args[2] = call->run_id;
    args[3] = ngx_http_sandbox_mcp_events_maxlen;
    args[4] = ngx_http_sandbox_mcp_redis_number(pool, lcf->retention);

    ngx_http_sandbox_mcp_call_script(call,
                                     &ngx_http_sandbox_mcp_script_run_cancel,
                                     ngx_http_sandbox_mcp_cancel_reply,
                                     keys, 6, args, 5);
}


/* opencode_list_runs */


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


static void
ngx_http_sandbox_mcp_list_runs(ngx_http_sandbox_mcp_call_t *call)
{
    json_int_t                   limit;
    ngx_int_t                    rc;
    ngx_str_t                    session, status, cid, cscore, args[7];
    ngx_pool_t                  *pool;
    json_t                      *cursor;
    ngx_http_sandbox_mcp_key_t   keys[2];
    char                         id[SMCP_ID_LEN + 1], score[20];

    pool = call->ctx->request->pool;

    if (ngx_http_sandbox_mcp_arg_string(call, "sessionId", 0, 64, &session)
        != NGX_OK
        || ngx_http_sandbox_mcp_arg_string(call, "status", 0, 16, &status)
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

    if (status.len
        && !(status.len == 7 && ngx_strncmp(status.data, "started", 7) == 0)
        && !(status.len == 7 && ngx_strncmp(status.data, "running", 7) == 0)
        && !(status.len == 9 && ngx_strncmp(status.data, "completed", 9) == 0)
        && !(status.len == 6 && ngx_strncmp(status.data, "failed", 6) == 0)
        && !(status.len == 9 && ngx_strncmp(status.data, "cancelled", 9) == 0))
    {
        ngx_http_sandbox_mcp_tool_error(call, "Argument 'status' must be one "
                                        "of started, running, completed, "
                                        "failed, cancelled.");
        return;
    }

    rc = ngx_http_sandbox_mcp_arg_integer(call, "limit", 1,
                                          NGX_HTTP_SANDBOX_MCP_MAX_RUNS,
                                          &limit);
    if (rc == NGX_ERROR) {
        return;
    }

    if (rc == NGX_DECLINED) {
        limit = 10;
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


/* opencode_get_diff */


/* a page ends after its last newline, else after its last whole character */
static size_t
ngx_http_sandbox_mcp_page_end(u_char *p, size_t len)
{
    size_t  i, n;

    for (i = len; i > 0; i--) {
        if (p[i - 1] == '\n') {
            return i;
        }
    }

    for (i = len; i > 0 && len - i < 4; i--) {
        if ((p[i - 1] & 0xc0) != 0x80) {
            /* the last lead byte: is its sequence complete? */
            n = p[i - 1] < 0x80 ? 1 : p[i - 1] >= 0xf0 ? 4
                                    : p[i - 1] >= 0xe0 ? 3 : 2;

            return (i - 1 + n <= len || i == 1) ? len : i - 1;
        }
    }

    return len;
}


static void
ngx_http_sandbox_mcp_diff_page(ngx_http_sandbox_mcp_call_t *call,
    ngx_str_t *text, size_t total)
{
    size_t   keep;
    json_t  *next, *diff;
    char     cbuf[64];

    keep = text->len;

    if (call->offset + text->len < total) {
        keep = ngx_http_sandbox_mcp_page_end(text->data, text->len);
    }

    smcp_utf8_sanitize((char *) text->data, keep);
    diff = json_stringn((char *) text->data, keep);

    next = NULL;

    if (call->offset + keep < total) {
        ngx_snprintf((u_char *) cbuf, sizeof(cbuf), "d:%uz%Z",
                     call->offset + keep);
        next = ngx_http_sandbox_mcp_cursor_encode(cbuf);
    }

    ngx_http_sandbox_mcp_tool_output(call,
        json_pack("{s:s%, s:o, s:o, s:I, s:b, s:o*}",
                  "runId", (char *) call->run_id.data, call->run_id.len,
                  "path", call->path.len
                          ? json_stringn((char *) call->path.data,
                                         call->path.len)
                          : json_null(),
                  "diff", diff,
                  "totalBytes", (json_int_t) total,
                  "truncated", next != NULL,
                  "nextCursor", next));
}


static ngx_uint_t
ngx_http_sandbox_mcp_reply_is(redisReply *r, const char *s)
{
    return r->type == REDIS_REPLY_STRING && r->len == ngx_strlen(s)
           && ngx_strncmp(r->str, s, r->len) == 0;
}


static void
ngx_http_sandbox_mcp_diff_reply(void *data, redisReply *reply)
{
    ngx_http_sandbox_mcp_call_t *call = data;

    size_t      total, off, len;
    ngx_str_t   text;

    if (ngx_http_sandbox_mcp_reply_failed(call, reply)) {
        return;
    }

    if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 3
        || reply->element[0]->type != REDIS_REPLY_STRING
        || reply->element[1]->type != REDIS_REPLY_INTEGER
        || reply->element[1]->integer < 0)
    {
        ngx_http_sandbox_mcp_run_not_found(call);
        return;
    }

    text.data = (u_char *) reply->element[0]->str;
    text.len = reply->element[0]->len;
    total = (size_t) reply->element[1]->integer;

    if (ngx_http_sandbox_mcp_reply_is(reply->element[2], "noindex")) {
        ngx_http_sandbox_mcp_tool_error(call, "The file index of this run's "
                                        "diff is unavailable and the diff is "
                                        "too big (%uz bytes) to search for "
                                        "one file: read the whole diff page "
                                        "by page (omit 'path').", total);
        return;
    }

    if (ngx_http_sandbox_mcp_reply_is(reply->element[2], "whole")) {
        /* no index, a small diff: the section is searched for here */
        if (!smcp_diff_find((char *) text.data, text.len,
                            (char *) call->path.data, call->path.len, &off,
                            &len))
        {
            /* the file is not in the diff: nothing changed there */
            off = 0;
            len = 0;
        }

        total = len;
        call->offset = ngx_min(call->offset, len);

        text.data += off + call->offset;
        text.len = ngx_min(len - call->offset,
                           NGX_HTTP_SANDBOX_MCP_DIFF_PAGE);

    } else if (text.len > NGX_HTTP_SANDBOX_MCP_DIFF_PAGE) {
        text.len = NGX_HTTP_SANDBOX_MCP_DIFF_PAGE;
    }

    ngx_http_sandbox_mcp_diff_page(call, &text, total);
}


static void
ngx_http_sandbox_mcp_get_diff(ngx_http_sandbox_mcp_call_t *call)
{
    uint64_t                     off;
    ngx_str_t                    args[5];
    ngx_pool_t                  *pool;
    json_t                      *cursor;
    ngx_http_sandbox_mcp_key_t   keys[2];

    pool = call->ctx->request->pool;

    if (ngx_http_sandbox_mcp_arg_run_id(call) != NGX_OK
        || ngx_http_sandbox_mcp_arg_string(call, "path", 0,
                                           SMCP_DIFF_PATH_MAX, &call->path)
           != NGX_OK)
    {
        return;
    }

    call->offset = 0;
    cursor = json_object_get(call->args, "cursor");

    if (cursor && !json_is_null(cursor)) {
        if (smcp_cursor_number(json_string_value(cursor),
                               json_string_length(cursor), 'd',
                               NGX_HTTP_SANDBOX_MCP_DIFF_MAX, &off)
            != SMCP_OK)
        {
            ngx_http_sandbox_mcp_tool_error(call, "Argument 'cursor' is not "
                                            "a cursor this server gave "
                                            "(pass nextCursor unchanged).");
            return;
        }

        call->offset = (size_t) off;
    }

    keys[0].fmt = SMCP_KEY_RUN;
    keys[0].arg = &call->run_id;
    keys[1].fmt = SMCP_KEY_RUN_DIFF;
    keys[1].arg = &call->run_id;

    args[0] = call->ctx->tenant;
    args[1] = ngx_http_sandbox_mcp_redis_number(pool, call->offset);
    args[2] = ngx_http_sandbox_mcp_redis_number(pool,
                                              NGX_HTTP_SANDBOX_MCP_DIFF_PAGE);
    args[3] = call->path;
    args[4] = ngx_http_sandbox_mcp_redis_number(pool,
                                              NGX_HTTP_SANDBOX_MCP_DIFF_SCAN);

    ngx_http_sandbox_mcp_call_script(call,
                                     &ngx_http_sandbox_mcp_script_run_diff,
                                     ngx_http_sandbox_mcp_diff_reply,
                                     keys, 2, args, 5);
}


/* opencode_get_events */


static void
ngx_http_sandbox_mcp_events_reply(void *data, redisReply *reply)
{
    ngx_http_sandbox_mcp_call_t *call = data;

    size_t       i;
    json_t      *events, *ev, *payload, *last;
    redisReply  *e, *fields, *type, *d, *id;

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

        if (e->type != REDIS_REPLY_ARRAY || e->elements != 2
            || e->element[1]->type != REDIS_REPLY_ARRAY)
        {
            continue;
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

        ev = json_pack("{s:o, s:o, s:o, s:o}",
                       "id", ngx_http_sandbox_mcp_json_text(e->element[0], 0),
                       "type", ngx_http_sandbox_mcp_json_text(type, 0),
                       "time", ngx_http_sandbox_mcp_json_time(
                                   ngx_http_sandbox_mcp_field(fields, "ts")),
                       "data", payload ? payload : json_null());

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


static void
ngx_http_sandbox_mcp_get_events(ngx_http_sandbox_mcp_call_t *call)
{
    u_char                      *p;
    json_int_t                   limit;
    ngx_int_t                    rc;
    ngx_str_t                    start, args[3];
    ngx_pool_t                  *pool;
    ngx_http_sandbox_mcp_key_t   keys[2];

    pool = call->ctx->request->pool;

    /* call->path holds "after" */
    if (ngx_http_sandbox_mcp_arg_run_id(call) != NGX_OK
        || ngx_http_sandbox_mcp_arg_string(call, "after", 0,
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

    rc = ngx_http_sandbox_mcp_arg_integer(call, "limit", 1,
                                          NGX_HTTP_SANDBOX_MCP_MAX_EVENTS,
                                          &limit);
    if (rc == NGX_ERROR) {
        return;
    }

    if (rc == NGX_DECLINED) {
        limit = 100;
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
