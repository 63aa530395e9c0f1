/*
 * The tools: their definitions, tools/list and tools/call, and what every
 * tool shares (its answer, its Redis step).  Each tool lives in its own
 * file (ngx_http_sandbox_mcp_tool_*.c).
 */

#include "ngx_http_sandbox_mcp_tools.h"
#include "ngx_http_sandbox_mcp_args.h"
#include "ngx_http_sandbox_mcp_http.h"
#include "ngx_http_sandbox_mcp_call.h"
#include "ngx_http_sandbox_mcp_tasks.h"
#include "ngx_http_sandbox_mcp_tool_cancel.h"
#include "ngx_http_sandbox_mcp_tool_diff.h"
#include "ngx_http_sandbox_mcp_tool_events.h"
#include "ngx_http_sandbox_mcp_tool_list.h"
#include "ngx_http_sandbox_mcp_tool_message.h"
#include "ngx_http_sandbox_mcp_tool_pick.h"
#include "ngx_http_sandbox_mcp_tool_sessions.h"
#include "ngx_http_sandbox_mcp_tool_result.h"
#include "ngx_http_sandbox_mcp_tool_run_task.h"

#include "smcp_validate.h"

#include "ngx_http_sandbox_mcp_tools_json.h"
#include "ngx_http_sandbox_mcp_defaults.h"


/*
 * A tool: its definition (tools/NAME.json: name, title, description,
 * input and output schema, annotations), embedded at build by smcp-embed
 * (checked there: a definition that does not parse stops the build), and
 * the function that starts a call of it.  The definitions are parsed once,
 * by the master, with the configuration.
 */
typedef struct {
    const char                  *definition;
    void                       (*start)(ngx_http_sandbox_mcp_call_t *call);

    json_t                      *json;          /* the definition */
    const char                  *name;
    json_t                      *properties;    /* of its inputSchema */
    json_t                      *required;
    char                        *accepted;      /* "a, b, c", for messages */
} ngx_http_sandbox_mcp_tool_t;


/* the tool opencode_NAME: its definition and ngx_http_sandbox_mcp_NAME() */
#define ngx_http_sandbox_mcp_tool(name)                                       \
    { smcp_tool_opencode_##name, ngx_http_sandbox_mcp_##name,                 \
      NULL, NULL, NULL, NULL, NULL }

/* in the order of tools/list */
static ngx_http_sandbox_mcp_tool_t  ngx_http_sandbox_mcp_tools[] = {
    ngx_http_sandbox_mcp_tool(run_task),
    ngx_http_sandbox_mcp_tool(get_result),
    ngx_http_sandbox_mcp_tool(list_runs),
    ngx_http_sandbox_mcp_tool(cancel_run),
    ngx_http_sandbox_mcp_tool(pick_attempt),
    ngx_http_sandbox_mcp_tool(send_message),
    ngx_http_sandbox_mcp_tool(get_diff),
    ngx_http_sandbox_mcp_tool(get_events),
    ngx_http_sandbox_mcp_tool(list_sessions)
};

#define NGX_HTTP_SANDBOX_MCP_NTOOLS                                           \
    (sizeof(ngx_http_sandbox_mcp_tools) / sizeof(ngx_http_sandbox_mcp_tool_t))


/* every definition, for tools/list */
static json_t  *ngx_http_sandbox_mcp_tools_json;


/* the names of the properties, "a, b, c" (malloc'd: kept for good) */
static char *
ngx_http_sandbox_mcp_tool_accepted(json_t *properties)
{
    char        *s, *p;
    json_t      *v;
    size_t       len;
    const char  *key;

    len = 1;

    json_object_foreach(properties, key, v) {
        len += ngx_strlen(key) + 2;
    }

    s = malloc(len);
    if (s == NULL) {
        return NULL;
    }

    p = s;

    json_object_foreach(properties, key, v) {
        p = (char *) ngx_sprintf((u_char *) p, "%s%s", p == s ? "" : ", ",
                                 key);
    }

    *p = '\0';

    return s;
}


static ngx_int_t
ngx_http_sandbox_mcp_tool_parse(ngx_conf_t *cf, ngx_http_sandbox_mcp_tool_t *t)
{
    json_t        *in;
    json_error_t   err;

    t->json = json_loads(t->definition, 0, &err);

    if (t->json == NULL) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "sandbox_mcp: a tool definition does not parse: "
                           "%s", err.text);
        return NGX_ERROR;
    }

    in = json_object_get(t->json, "inputSchema");

    t->name = json_string_value(json_object_get(t->json, "name"));
    t->properties = json_object_get(in, "properties");
    t->required = json_object_get(in, "required");
    t->accepted = ngx_http_sandbox_mcp_tool_accepted(t->properties);

    if (t->name == NULL || t->accepted == NULL) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "sandbox_mcp: a tool definition is incomplete");
        return NGX_ERROR;
    }

    return NGX_OK;
}


ngx_int_t
ngx_http_sandbox_mcp_tools_init(ngx_conf_t *cf)
{
    json_t                       *all;
    ngx_uint_t                    i;
    ngx_http_sandbox_mcp_tool_t  *t;

    if (ngx_http_sandbox_mcp_tools_json) {
        /* parsed at an earlier configuration: the same, built in */
        return NGX_OK;
    }

    all = json_array();
    if (all == NULL) {
        return NGX_ERROR;
    }

    for (i = 0; i < NGX_HTTP_SANDBOX_MCP_NTOOLS; i++) {
        t = &ngx_http_sandbox_mcp_tools[i];

        if (ngx_http_sandbox_mcp_tool_parse(cf, t) != NGX_OK
            || json_array_append(all, t->json) != 0)
        {
            json_decref(all);
            return NGX_ERROR;
        }
    }

    ngx_http_sandbox_mcp_tools_json = all;

    return NGX_OK;
}


json_t *
ngx_http_sandbox_mcp_tool_definition(const char *name)
{
    ngx_uint_t  i;

    for (i = 0; i < NGX_HTTP_SANDBOX_MCP_NTOOLS; i++) {
        if (ngx_http_sandbox_mcp_tools[i].name
            && ngx_strcmp(ngx_http_sandbox_mcp_tools[i].name, name) == 0)
        {
            return ngx_http_sandbox_mcp_tools[i].json;
        }
    }

    return NULL;
}


json_t *
ngx_http_sandbox_mcp_tool_property(ngx_http_sandbox_mcp_call_t *call,
    const char *name)
{
    return json_object_get(ngx_http_sandbox_mcp_tools[call->tool].properties,
                           name);
}


ngx_uint_t
ngx_http_sandbox_mcp_tool_required(ngx_http_sandbox_mcp_call_t *call,
    const char *name)
{
    size_t   i;
    json_t  *v;

    json_array_foreach(ngx_http_sandbox_mcp_tools[call->tool].required, i, v)
    {
        if (ngx_strcmp(json_string_value(v), name) == 0) {
            return 1;
        }
    }

    return 0;
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

    all = ngx_http_sandbox_mcp_tools_json;
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
        /* run_task's: the location's own (sandbox_mcp_agents) */
        json_array_append(page,
                          lcf->agents_tool
                          && ngx_http_sandbox_mcp_tools[i].start
                             == ngx_http_sandbox_mcp_run_task
                          ? lcf->agents_tool : json_array_get(all, i));
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
    char       *text;
    json_t     *result;
    ngx_str_t   output;

    if (structured == NULL) {
        ngx_http_sandbox_mcp_call_error(call,
                                        NGX_HTTP_SANDBOX_MCP_INTERNAL_ERROR,
                                        "Internal error building the result");
        ngx_http_sandbox_mcp_call_done(call);
        return;
    }

    text = json_dumps(structured, JSON_COMPACT);

    output.len = text ? ngx_strlen(text) : 0;
    output.data = text ? ngx_pnalloc(call->ctx->request->pool, output.len)
                       : NULL;

    result = output.data
             ? json_pack("{s:[{s:s, s:s%}], s:o}",
                         "content", "type", "text", "text", text, output.len,
                         "structuredContent", structured)
             : NULL;

    if (output.data == NULL) {
        /* not handed to json_pack ("o" takes it, even on failure) */
        json_decref(structured);
    }

    if (result) {
        ngx_memcpy(output.data, text, output.len);
    }

    free(text);

    ngx_http_sandbox_mcp_call_output(call, result, &output);
    ngx_http_sandbox_mcp_call_done(call);
}


void
ngx_http_sandbox_mcp_tool_output_text(ngx_http_sandbox_mcp_call_t *call,
    ngx_str_t *text)
{
    if (text == NULL) {
        ngx_http_sandbox_mcp_tool_output(call, NULL);
        return;
    }

    switch (ngx_http_sandbox_mcp_call_output_text(call, text)) {

    case NGX_OK:
        ngx_http_sandbox_mcp_call_done(call);
        return;

    case NGX_ERROR:
        ngx_http_sandbox_mcp_tool_output(call, NULL);
        return;

    default: /* NGX_DECLINED: a batch, a filter, a progress stream */
        ngx_http_sandbox_mcp_tool_output(call,
                                    json_loadb((char *) text->data, text->len,
                                               0, NULL));
    }
}


void
ngx_http_sandbox_mcp_tool_error(ngx_http_sandbox_mcp_call_t *call,
    const char *fmt, ...)
{
    va_list  args;
    u_char   msg[NGX_HTTP_SANDBOX_MCP_MESSAGE_MAX];

    va_start(args, fmt);
    ngx_http_sandbox_mcp_call_message(msg, sizeof(msg), fmt, args);
    va_end(args);

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


/*
 * A tenant at one of its budgets (docs/contracts.md, "Tenant budgets"),
 * as run_create and run_pick answer it: the refusal says which and the
 * way out.
 */
ngx_int_t
ngx_http_sandbox_mcp_tool_budget_error(ngx_http_sandbox_mcp_call_t *call,
    ngx_int_t code)
{
    ngx_http_sandbox_mcp_loc_conf_t  *lcf;

    lcf = ngx_http_get_module_loc_conf(call->ctx->request,
                                       ngx_http_sandbox_mcp_module);

    switch (code) {

    case NGX_HTTP_SANDBOX_MCP_BUDGET_BYTES:
        ngx_http_sandbox_mcp_tool_error(call, "Tenant budget exceeded: your "
                                        "runs, their events and diffs hold "
                                        "%O bytes of storage or more, your "
                                        "budget (sandbox_mcp_tenant_redis_"
                                        "bytes). An ended run frees what it "
                                        "holds when its keys expire, %T "
                                        "seconds after it ended "
                                        "(sandbox_mcp_retention); try again "
                                        "then.", lcf->tenant_bytes,
                                        lcf->retention);
        return NGX_OK;

    case NGX_HTTP_SANDBOX_MCP_BUDGET_SESSIONS:
        ngx_http_sandbox_mcp_tool_error(call, "Tenant budget exceeded: you "
                                        "have %ui live sessions, your budget "
                                        "(sandbox_mcp_tenant_sessions). "
                                        "Continue one of them (sessionId; "
                                        "opencode_list_sessions lists them), "
                                        "or wait until an idle one expires, "
                                        "%T seconds after its last run "
                                        "(sandbox_mcp_session_idle).",
                                        lcf->tenant_sessions,
                                        lcf->session_idle);
        return NGX_OK;

    case NGX_HTTP_SANDBOX_MCP_BUDGET_DISK:
        ngx_http_sandbox_mcp_tool_error(call, "Tenant budget exceeded: the "
                                        "workspaces of your sessions hold "
                                        "%O bytes of disk or more, your "
                                        "budget (sandbox_mcp_tenant_disk). "
                                        "An idle session's workspace is "
                                        "removed %T seconds after its last "
                                        "run (sandbox_mcp_session_idle; "
                                        "opencode_list_sessions lists "
                                        "them); try again then.",
                                        lcf->tenant_disk, lcf->session_idle);
        return NGX_OK;

    default:
        return NGX_DECLINED;
    }
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
    ngx_str_t   argv[NGX_HTTP_SANDBOX_MCP_MAX_ARGS];

    /* the Redis layer adds EVALSHA, the script and the number of keys */
    if (nkeys + nargs + 3 > NGX_HTTP_SANDBOX_MCP_MAX_ARGS) {
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


void
ngx_http_sandbox_mcp_call_run_read(ngx_http_sandbox_mcp_call_t *call,
    ngx_http_sandbox_mcp_redis_handler_pt handler, const char **fields,
    ngx_uint_t n)
{
    ngx_uint_t  i;
    ngx_str_t   argv[2 + NGX_HTTP_SANDBOX_MCP_RUN_READ_MAX];

    if (n > NGX_HTTP_SANDBOX_MCP_RUN_READ_MAX) {
        ngx_http_sandbox_mcp_tool_unavailable(call);
        return;
    }

    if (n) {
        ngx_str_set(&argv[0], "HMGET");

    } else {
        ngx_str_set(&argv[0], "HGETALL");
    }

    for (i = 0; i < n; i++) {
        argv[2 + i].data = (u_char *) fields[i];
        argv[2 + i].len = ngx_strlen(fields[i]);
    }

    if (ngx_http_sandbox_mcp_redis_key(call->ctx->request->pool, &argv[1],
                                       SMCP_KEY_RUN, &call->run_id)
        != NGX_OK)
    {
        ngx_http_sandbox_mcp_tool_unavailable(call);
        return;
    }

    call->cmd = ngx_http_sandbox_mcp_redis_command(handler, call, 2 + n,
                                                   argv);

    if (call->cmd == NULL) {
        ngx_http_sandbox_mcp_tool_unavailable(call);
    }
}


ngx_int_t
ngx_http_sandbox_mcp_reply_id(ngx_http_sandbox_mcp_call_t *call,
    redisReply *v, const char *prefix, ngx_str_t *id)
{
    ngx_str_null(id);

    if (v->type != REDIS_REPLY_STRING
        || !smcp_valid_id(v->str, v->len, prefix))
    {
        return NGX_DECLINED;
    }

    id->data = ngx_pnalloc(call->ctx->request->pool, v->len);
    if (id->data == NULL) {
        return NGX_ERROR;
    }

    ngx_memcpy(id->data, v->str, v->len);
    id->len = v->len;

    return NGX_OK;
}


/* every argument is a property of the tool's inputSchema */
static ngx_int_t
ngx_http_sandbox_mcp_args_known(ngx_http_sandbox_mcp_call_t *call,
    ngx_http_sandbox_mcp_tool_t *tool)
{
    json_t      *v;
    const char  *key;

    json_object_foreach(call->args, key, v) {

        if (json_object_get(tool->properties, key) == NULL) {
            ngx_http_sandbox_mcp_tool_error(call, "Unknown argument '%*s' "
                                            "for %s; accepted: %s.",
                                            ngx_min(ngx_strlen(key), 64), key,
                                            tool->name, tool->accepted);
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


/* a tool started for another method: args are the call's from now on */
void
ngx_http_sandbox_mcp_tools_start(ngx_http_sandbox_mcp_call_t *call,
    const char *name, json_t *args)
{
    json_t  *params;

    params = args ? json_pack("{s:s, s:o}", "name", name, "arguments", args)
                  : NULL;

    if (params == NULL
        || ngx_http_sandbox_mcp_add_cleanup(call->ctx->request, params,
                                            params)
           != NGX_OK)
    {
        ngx_http_sandbox_mcp_tool_unavailable(call);
        return;
    }

    ngx_http_sandbox_mcp_tools_call(call, params);
}


/*
 * A task-augmented call (params.task, protocol 2025-11-25): only a tool
 * whose execution.taskSupport allows it; its answer becomes the task.
 */
static ngx_int_t
ngx_http_sandbox_mcp_tool_task(ngx_http_sandbox_mcp_call_t *call,
    ngx_http_sandbox_mcp_tool_t *tool, json_t *task)
{
    const char  *support;

    support = json_string_value(json_object_get(
                  json_object_get(tool->json, "execution"), "taskSupport"));

    if (task == NULL || json_is_null(task)) {
        if (support && ngx_strcmp(support, "required") == 0) {
            ngx_http_sandbox_mcp_call_error(call,
                                       NGX_HTTP_SANDBOX_MCP_METHOD_NOT_FOUND,
                                       "Tool %s must be called as a task",
                                       tool->name);
            ngx_http_sandbox_mcp_call_done(call);
            return NGX_ERROR;
        }

        return NGX_OK;
    }

    if (!json_is_object(task)) {
        ngx_http_sandbox_mcp_call_error(call,
                                        NGX_HTTP_SANDBOX_MCP_INVALID_PARAMS,
                                        "Invalid params: task must be an "
                                        "object");
        ngx_http_sandbox_mcp_call_done(call);
        return NGX_ERROR;
    }

    if (support == NULL || ngx_strcmp(support, "forbidden") == 0) {
        ngx_http_sandbox_mcp_call_error(call,
                                        NGX_HTTP_SANDBOX_MCP_METHOD_NOT_FOUND,
                                        "Tool %s cannot be called as a task",
                                        tool->name);
        ngx_http_sandbox_mcp_call_done(call);
        return NGX_ERROR;
    }

    call->filter = ngx_http_sandbox_mcp_task_created;

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

    if (ngx_http_sandbox_mcp_tool_task(call, &ngx_http_sandbox_mcp_tools[i],
                                       json_object_get(params, "task"))
        != NGX_OK)
    {
        return;
    }

    if (ngx_http_sandbox_mcp_args_known(call, &ngx_http_sandbox_mcp_tools[i])
        != NGX_OK)
    {
        return;
    }

    ngx_http_sandbox_mcp_tools[i].start(call);
}
