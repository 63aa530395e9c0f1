/*
 * The MCP methods beyond tools, each a view of a tool's answer (through
 * call->filter), so they see exactly what the tenant's tools see:
 * - resources: opencode://runs/{runId} (the run, JSON), .../diff (its
 *   diff's first page), .../events (its first events, JSON), the tenant's
 *   recent runs as the list;
 * - completion/complete: the tenant's recent runIds and sessionIds;
 * - logging/setLevel; and tasks/ (ngx_http_sandbox_mcp_tasks.c).
 */

#include "ngx_http_sandbox_mcp_methods.h"
#include "ngx_http_sandbox_mcp_call.h"
#include "ngx_http_sandbox_mcp_progress.h"
#include "ngx_http_sandbox_mcp_redis.h"
#include "ngx_http_sandbox_mcp_stream.h"
#include "ngx_http_sandbox_mcp_tasks.h"
#include "ngx_http_sandbox_mcp_tools.h"

#include "smcp_validate.h"


#define NGX_HTTP_SANDBOX_MCP_RUN_URI     "opencode://runs/"
#define NGX_HTTP_SANDBOX_MCP_RUNS_PAGE   100     /* resources/list, and the
                                                    runs completion reads */
#define NGX_HTTP_SANDBOX_MCP_EVENTS_READ 1000    /* .../events: the first */
#define NGX_HTTP_SANDBOX_MCP_COMPLETE_ARG 64     /* a longer value: none */

/* the resources of a run: "" (the run), "/diff", "/events" */
enum {
    NGX_HTTP_SANDBOX_MCP_RES_RUN = 0,
    NGX_HTTP_SANDBOX_MCP_RES_DIFF,
    NGX_HTTP_SANDBOX_MCP_RES_EVENTS
};


json_t *
ngx_http_sandbox_mcp_methods_capabilities(void)
{
    return json_pack("{s:{s:b}, s:{s:b, s:b}, s:{}, s:{},"
                     " s:{s:{}, s:{}, s:{s:{s:{}}}}}",
                     "tools", "listChanged", 0,
                     "resources", "subscribe", 1, "listChanged", 0,
                     "logging",
                     "completions",
                     "tasks", "list", "cancel",
                         "requests", "tools", "call");
}


static json_t *
ngx_http_sandbox_mcp_resource_templates(void)
{
    return json_pack("{s:[{s:s, s:s, s:s, s:s, s:s},"
                     " {s:s, s:s, s:s, s:s, s:s},"
                     " {s:s, s:s, s:s, s:s, s:s}]}",
        "resourceTemplates",
        "uriTemplate", NGX_HTTP_SANDBOX_MCP_RUN_URI "{runId}",
        "name", "run", "title", "A run",
        "description", "The run as opencode_get_result shows it",
        "mimeType", "application/json",
        "uriTemplate", NGX_HTTP_SANDBOX_MCP_RUN_URI "{runId}/diff",
        "name", "run-diff", "title", "A run's diff",
        "description", "The unified diff of the run's changes (its first "
                       "64 KiB; opencode_get_diff pages further)",
        "mimeType", "text/x-diff",
        "uriTemplate", NGX_HTTP_SANDBOX_MCP_RUN_URI "{runId}/events",
        "name", "run-events", "title", "A run's events",
        "description", "The run's first events, as opencode_get_events "
                       "shows them",
        "mimeType", "application/json");
}


/* the uri of the run's resource kind */
static json_t *
ngx_http_sandbox_mcp_resource_uri(json_t *run_id, ngx_uint_t kind)
{
    static const char  *tails[] = { "", "/diff", "/events" };

    return json_sprintf(NGX_HTTP_SANDBOX_MCP_RUN_URI "%s%s",
                        json_string_value(run_id), tails[kind]);
}


/* a run of the list as a resource */
static json_t *
ngx_http_sandbox_mcp_resource_of(ngx_http_sandbox_mcp_call_t *call,
    json_t *run)
{
    json_t      *title;
    const char  *status;

    title = json_object_get(run, "title");
    status = json_string_value(json_object_get(run, "status"));

    return json_pack("{s:o, s:O, s:O, s:s, s:s}",
                     "uri", ngx_http_sandbox_mcp_resource_uri(
                                json_object_get(run, "runId"),
                                NGX_HTTP_SANDBOX_MCP_RES_RUN),
                     "name", json_object_get(run, "runId"),
                     "title", json_string_length(title)
                              ? title : json_object_get(run, "runId"),
                     "description", status ? status : "",
                     "mimeType", "application/json");
}


static json_t *
ngx_http_sandbox_mcp_resources_listed(ngx_http_sandbox_mcp_call_t *call,
    json_t *result)
{
    return ngx_http_sandbox_mcp_runs_view(call, result, "resources",
                                          ngx_http_sandbox_mcp_resource_of);
}


static json_t *
ngx_http_sandbox_mcp_resource_read(ngx_http_sandbox_mcp_call_t *call,
    json_t *result)
{
    char        *text;
    json_t      *sc, *content;
    ngx_uint_t   kind;

    if (ngx_http_sandbox_mcp_is_error(result)) {
        return ngx_http_sandbox_mcp_tool_failed(call, result,
                                 NGX_HTTP_SANDBOX_MCP_RESOURCE_NOT_FOUND);
    }

    sc = json_object_get(result, "structuredContent");
    kind = call->method_kind;

    if (kind == NGX_HTTP_SANDBOX_MCP_RES_DIFF) {
        content = json_pack("{s:o, s:s, s:O}",
                            "uri", ngx_http_sandbox_mcp_resource_uri(
                                       json_object_get(sc, "runId"), kind),
                            "mimeType", "text/x-diff",
                            "text", json_object_get(sc, "diff"));

    } else {
        text = json_dumps(sc, JSON_COMPACT);

        content = text ? json_pack("{s:o, s:s, s:s}",
                                   "uri", ngx_http_sandbox_mcp_resource_uri(
                                              json_object_get(sc, "runId"),
                                              kind),
                                   "mimeType", "application/json",
                                   "text", text)
                       : NULL;
        free(text);
    }

    return ngx_http_sandbox_mcp_method_view(call, result,
               content ? json_pack("{s:[o]}", "contents", content) : NULL);
}


/* resources/read {uri}: opencode://runs/{runId}[/diff|/events] */
static void
ngx_http_sandbox_mcp_resources_read(ngx_http_sandbox_mcp_call_t *call,
    json_t *params)
{
    size_t       len, n, id_len;
    json_t      *args;
    const char  *uri, *id, *tail, *tool;

    uri = json_string_value(json_object_get(params, "uri"));
    len = json_string_length(json_object_get(params, "uri"));
    n = sizeof(NGX_HTTP_SANDBOX_MCP_RUN_URI) - 1;
    id_len = SMCP_ID_LEN;

    if (uri == NULL) {
        ngx_http_sandbox_mcp_call_error(call,
                                        NGX_HTTP_SANDBOX_MCP_INVALID_PARAMS,
                                        "Invalid params: uri (a string) is "
                                        "required");
        return;
    }

    id = uri + n;
    tail = id + id_len;

    if (len < n + id_len
        || ngx_strncmp(uri, NGX_HTTP_SANDBOX_MCP_RUN_URI, n) != 0
        || !smcp_valid_id(id, id_len, SMCP_RUN_ID_PREFIX))
    {
        goto not_found;
    }

    if (len == n + id_len) {
        call->method_kind = NGX_HTTP_SANDBOX_MCP_RES_RUN;
        tool = "opencode_get_result";

    } else if (len == n + id_len + 5 && ngx_strcmp(tail, "/diff") == 0) {
        call->method_kind = NGX_HTTP_SANDBOX_MCP_RES_DIFF;
        tool = "opencode_get_diff";

    } else if (len == n + id_len + 7 && ngx_strcmp(tail, "/events") == 0) {
        call->method_kind = NGX_HTTP_SANDBOX_MCP_RES_EVENTS;
        tool = "opencode_get_events";

    } else {
        goto not_found;
    }

    args = call->method_kind == NGX_HTTP_SANDBOX_MCP_RES_EVENTS
           ? json_pack("{s:s%, s:i}", "runId", id, id_len, "limit",
                       NGX_HTTP_SANDBOX_MCP_EVENTS_READ)
           : json_pack("{s:s%}", "runId", id, id_len);

    call->pending = 1;
    call->ctx->pending++;
    call->filter = ngx_http_sandbox_mcp_resource_read;

    ngx_http_sandbox_mcp_tools_start(call, tool, args);
    return;

not_found:

    ngx_http_sandbox_mcp_call_error(call,
                                    NGX_HTTP_SANDBOX_MCP_RESOURCE_NOT_FOUND,
                                    "Resource not found: %*s",
                                    ngx_min(len, 200), uri);
}


/* the tenant's recent runIds or sessionIds starting with method_arg */
static json_t *
ngx_http_sandbox_mcp_completed(ngx_http_sandbox_mcp_call_t *call,
    json_t *result)
{
    size_t       i, j;
    json_t      *values, *run, *v, *seen;
    const char  *s, *field;

    if (ngx_http_sandbox_mcp_is_error(result)) {
        return ngx_http_sandbox_mcp_tool_failed(call, result,
                                       NGX_HTTP_SANDBOX_MCP_INVALID_PARAMS);
    }

    field = call->method_kind ? "sessionId" : "runId";

    values = json_array();
    if (values == NULL) {
        return ngx_http_sandbox_mcp_method_view(call, result, NULL);
    }

    json_array_foreach(json_object_get(
                           json_object_get(result, "structuredContent"),
                           "runs"), i, run)
    {
        v = json_object_get(run, field);
        s = json_string_value(v);

        if (s == NULL || json_string_length(v) < call->method_arg.len
            || ngx_strncmp(s, call->method_arg.data, call->method_arg.len)
               != 0)
        {
            continue;
        }

        json_array_foreach(values, j, seen) {
            if (json_equal(seen, v)) {
                break;
            }
        }

        if (j == json_array_size(values)) {
            json_array_append(values, v);
        }
    }

    return ngx_http_sandbox_mcp_method_view(call, result,
               json_pack("{s:{s:o, s:I, s:b}}", "completion",
                         "values", values,
                         "total", (json_int_t) json_array_size(values),
                         "hasMore", 0));
}


/* completion/complete {ref, argument {name, value}} */
static void
ngx_http_sandbox_mcp_complete(ngx_http_sandbox_mcp_call_t *call,
    json_t *params)
{
    json_t      *arg, *value;
    const char  *name;

    arg = json_object_get(params, "argument");
    name = json_string_value(json_object_get(arg, "name"));
    value = json_object_get(arg, "value");

    if (name == NULL || !json_is_string(value)
        || !json_is_object(json_object_get(params, "ref")))
    {
        ngx_http_sandbox_mcp_call_error(call,
                                        NGX_HTTP_SANDBOX_MCP_INVALID_PARAMS,
                                        "Invalid params: ref and argument "
                                        "{name, value} are required");
        return;
    }

    if ((ngx_strcmp(name, "runId") != 0 && ngx_strcmp(name, "sessionId") != 0)
        || json_string_length(value) > NGX_HTTP_SANDBOX_MCP_COMPLETE_ARG)
    {
        /* nothing we complete */
        ngx_http_sandbox_mcp_call_result(call,
            json_pack("{s:{s:[], s:i, s:b}}", "completion", "values",
                      "total", 0, "hasMore", 0));
        return;
    }

    call->method_kind = ngx_strcmp(name, "sessionId") == 0;
    call->method_arg.data = (u_char *) json_string_value(value);
    call->method_arg.len = json_string_length(value);

    call->pending = 1;
    call->ctx->pending++;
    call->filter = ngx_http_sandbox_mcp_completed;

    ngx_http_sandbox_mcp_tools_start(call, "opencode_list_runs",
                                     json_pack("{s:i}", "limit",
                                               NGX_HTTP_SANDBOX_MCP_RUNS_PAGE));
}


static void
ngx_http_sandbox_mcp_resources_list(ngx_http_sandbox_mcp_call_t *call,
    json_t *params)
{
    json_t  *args;

    args = ngx_http_sandbox_mcp_runs_args(call, params,
                                          NGX_HTTP_SANDBOX_MCP_RUNS_PAGE);
    if (args == NULL) {
        return;
    }

    call->pending = 1;
    call->ctx->pending++;
    call->filter = ngx_http_sandbox_mcp_resources_listed;

    ngx_http_sandbox_mcp_tools_start(call, "opencode_list_runs", args);
}


static void
ngx_http_sandbox_mcp_level_set(void *data, redisReply *reply)
{
    ngx_http_sandbox_mcp_call_t *call = data;

    if (ngx_http_sandbox_mcp_reply_failed(call, reply)) {
        return;
    }

    ngx_http_sandbox_mcp_call_result(call, json_object());
    ngx_http_sandbox_mcp_call_done(call);
}


/* logging/setLevel {level}: kept for the session (mcp:{sid}:log, living
 * as long as a session may), read by the progress streams */
static void
ngx_http_sandbox_mcp_set_level(ngx_http_sandbox_mcp_call_t *call,
    json_t *params)
{
    json_t                           *level;
    ngx_str_t                         argv[5];
    ngx_http_request_t               *r;
    ngx_http_sandbox_mcp_loc_conf_t  *lcf;

    r = call->ctx->request;
    lcf = ngx_http_get_module_loc_conf(r, ngx_http_sandbox_mcp_module);
    level = json_object_get(params, "level");

    if (!json_is_string(level)
        || ngx_http_sandbox_mcp_log_rank(json_string_value(level),
                                         json_string_length(level))
           < 0)
    {
        ngx_http_sandbox_mcp_call_error(call,
                                        NGX_HTTP_SANDBOX_MCP_INVALID_PARAMS,
                                        "Invalid params: level must be one "
                                        "of debug, info, notice, warning, "
                                        "error, critical, alert, emergency");
        return;
    }

    call->pending = 1;
    call->ctx->pending++;

    ngx_str_set(&argv[0], "SET");
    argv[2].data = (u_char *) json_string_value(level);
    argv[2].len = json_string_length(level);
    ngx_str_set(&argv[3], "EX");
    argv[4] = ngx_http_sandbox_mcp_redis_number(r->pool, lcf->session_ttl);

    if (ngx_http_sandbox_mcp_redis_key(r->pool, &argv[1], SMCP_KEY_MCP_LOG,
                                       &call->ctx->session_id)
        != NGX_OK
        || argv[4].data == NULL)
    {
        ngx_http_sandbox_mcp_tool_unavailable(call);
        return;
    }

    call->cmd = ngx_http_sandbox_mcp_redis_command(
                    ngx_http_sandbox_mcp_level_set, call, 5, argv);

    if (call->cmd == NULL) {
        ngx_http_sandbox_mcp_tool_unavailable(call);
    }
}


ngx_int_t
ngx_http_sandbox_mcp_methods_start(ngx_http_sandbox_mcp_call_t *call,
    const char *method, json_t *params)
{
    if (params && !json_is_object(params)) {
        ngx_http_sandbox_mcp_call_error(call,
                                        NGX_HTTP_SANDBOX_MCP_INVALID_PARAMS,
                                        "Invalid params: params must be an "
                                        "object");
        return NGX_OK;
    }

    if (ngx_http_sandbox_mcp_tasks_start(call, method, params)
        != NGX_DECLINED)
    {
        return NGX_OK;
    }

    if (ngx_strcmp(method, "resources/templates/list") == 0) {
        ngx_http_sandbox_mcp_call_result(call,
                                  ngx_http_sandbox_mcp_resource_templates());

    } else if (ngx_strcmp(method, "resources/list") == 0) {
        ngx_http_sandbox_mcp_resources_list(call, params);

    } else if (ngx_strcmp(method, "resources/read") == 0) {
        ngx_http_sandbox_mcp_resources_read(call, params);

    } else if (ngx_strcmp(method, "resources/subscribe") == 0) {
        ngx_http_sandbox_mcp_subscribe(call, params, 1);

    } else if (ngx_strcmp(method, "resources/unsubscribe") == 0) {
        ngx_http_sandbox_mcp_subscribe(call, params, 0);

    } else if (ngx_strcmp(method, "completion/complete") == 0) {
        ngx_http_sandbox_mcp_complete(call, params);

    } else if (ngx_strcmp(method, "logging/setLevel") == 0) {
        ngx_http_sandbox_mcp_set_level(call, params);

    } else {
        return NGX_DECLINED;
    }

    return NGX_OK;
}
