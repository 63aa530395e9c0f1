/*
 * The tools: their definitions, tools/list and tools/call, and what every
 * tool shares (its answer, its Redis step).  Each tool lives in its own
 * file (ngx_http_sandbox_mcp_tool_*.c).
 */

#include "ngx_http_sandbox_mcp_tools.h"
#include "ngx_http_sandbox_mcp_args.h"
#include "ngx_http_sandbox_mcp_http.h"
#include "ngx_http_sandbox_mcp_jsonrpc.h"
#include "ngx_http_sandbox_mcp_tool_cancel.h"
#include "ngx_http_sandbox_mcp_tool_diff.h"
#include "ngx_http_sandbox_mcp_tool_events.h"
#include "ngx_http_sandbox_mcp_tool_list.h"
#include "ngx_http_sandbox_mcp_tool_result.h"
#include "ngx_http_sandbox_mcp_tool_run_task.h"

#include "smcp_validate.h"


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


json_t *
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


void
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


void
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


void
ngx_http_sandbox_mcp_tool_unavailable(ngx_http_sandbox_mcp_call_t *call)
{
    ngx_http_sandbox_mcp_call_unavailable(call);
    ngx_http_sandbox_mcp_call_done(call);
}


/* a reply that is an error, or none at all (connection lost) */
ngx_uint_t
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


/*
 * Sends a script for a call: KEYS from key formats, then ARGV.  When Redis
 * is away the call is answered "unavailable" at once.
 */
void
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
