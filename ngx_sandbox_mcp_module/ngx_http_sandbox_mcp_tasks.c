/*
 * MCP tasks (protocol 2025-11-25).  A task is a run: taskId = runId, and
 * every method is a tool's call whose answer is shown as the task (see
 * call->filter), so a task is bound to its tenant exactly as a run is
 * (another tenant's taskId is "not found", like a run that does not
 * exist).  Statuses: started, running -> working; completed; failed;
 * cancelled, and any run whose cancel was asked -> cancelled (a terminal
 * status stays).
 */

#include "ngx_http_sandbox_mcp_tasks.h"
#include "ngx_http_sandbox_mcp_call.h"
#include "ngx_http_sandbox_mcp_run.h"
#include "ngx_http_sandbox_mcp_tools.h"
#include "ngx_http_sandbox_mcp_defaults.h"


#define NGX_HTTP_SANDBOX_MCP_RELATED_TASK                                     \
    "io.modelcontextprotocol/related-task"
#define NGX_HTTP_SANDBOX_MCP_IMMEDIATE                                        \
    "io.modelcontextprotocol/model-immediate-response"

#define NGX_HTTP_SANDBOX_MCP_TASKS_PAGE  100     /* runs a page lists */


ngx_uint_t
ngx_http_sandbox_mcp_is_error(json_t *result)
{
    return json_is_true(json_object_get(result, "isError"));
}


json_t *
ngx_http_sandbox_mcp_tool_failed(ngx_http_sandbox_mcp_call_t *call,
    json_t *result, ngx_int_t code)
{
    const char  *text;

    text = json_string_value(json_object_get(
               json_array_get(json_object_get(result, "content"), 0),
               "text"));

    ngx_http_sandbox_mcp_call_error(call, code, "%s",
                                    text ? text : "Not found");
    json_decref(result);

    return NULL;
}


static json_int_t
ngx_http_sandbox_mcp_task_ttl(ngx_http_sandbox_mcp_call_t *call)
{
    ngx_http_sandbox_mcp_loc_conf_t  *lcf;

    lcf = ngx_http_get_module_loc_conf(call->ctx->request,
                                       ngx_http_sandbox_mcp_module);

    /* a run's keys live its longest timeout, then the retention */
    return ((json_int_t) lcf->run_timeout_max + lcf->retention) * 1000;
}


static ngx_uint_t
ngx_http_sandbox_mcp_is(const char *s, const char *name)
{
    return s != NULL && ngx_strcmp(s, name) == 0;
}


/* a run's status as a task's; *message: a word on it, or NULL */
static const char *
ngx_http_sandbox_mcp_task_status(json_t *run, const char **message)
{
    const char  *status;

    status = json_string_value(json_object_get(run, "status"));
    *message = NULL;

    if (json_is_true(json_object_get(run, "cancelRequested"))) {
        if (!ngx_http_sandbox_mcp_is(status, SMCP_STATUS_CANCELLED)) {
            *message = "cancel requested: the sandbox is being stopped";
        }

        return SMCP_STATUS_CANCELLED;
    }

    if (ngx_http_sandbox_mcp_is(status, SMCP_STATUS_COMPLETED)
        || ngx_http_sandbox_mcp_is(status, SMCP_STATUS_CANCELLED))
    {
        return status;
    }

    if (ngx_http_sandbox_mcp_is(status, SMCP_STATUS_FAILED)) {
        *message = json_string_value(json_object_get(run, "error"));
        return status;
    }

    /* started (queued) or running */
    *message = status;

    return "working";
}


/* the run object (or a run list's entry) as a task */
static json_t *
ngx_http_sandbox_mcp_task_object(ngx_http_sandbox_mcp_call_t *call,
    json_t *run)
{
    json_t      *task, *updated;
    const char  *status, *message;

    status = ngx_http_sandbox_mcp_task_status(run, &message);

    updated = json_object_get(run, "finishedAt");

    if (!json_is_string(updated)) {
        updated = json_object_get(run, "startedAt");
    }

    if (!json_is_string(updated)) {
        updated = json_object_get(run, "createdAt");
    }

    task = json_pack("{s:O, s:s, s:O, s:O, s:I, s:I}",
                     "taskId", json_object_get(run, "runId"),
                     "status", status,
                     "createdAt", json_object_get(run, "createdAt"),
                     "lastUpdatedAt", updated,
                     "ttl", ngx_http_sandbox_mcp_task_ttl(call),
                     "pollInterval",
                     (json_int_t) NGX_HTTP_SANDBOX_MCP_TASK_POLL);

    if (task && message) {
        json_object_set_new(task, "statusMessage", json_string(message));
    }

    return task;
}


json_t *
ngx_http_sandbox_mcp_method_view(ngx_http_sandbox_mcp_call_t *call,
    json_t *result, json_t *view)
{
    json_decref(result);

    if (view == NULL) {
        ngx_http_sandbox_mcp_call_error(call,
                                        NGX_HTTP_SANDBOX_MCP_INTERNAL_ERROR,
                                        "Internal error building the "
                                        "answer");
    }

    return view;
}


json_t *
ngx_http_sandbox_mcp_runs_view(ngx_http_sandbox_mcp_call_t *call,
    json_t *result, const char *name,
    json_t *(*each)(ngx_http_sandbox_mcp_call_t *call, json_t *run))
{
    size_t   i;
    json_t  *sc, *run, *list, *next;

    if (ngx_http_sandbox_mcp_is_error(result)) {
        return ngx_http_sandbox_mcp_tool_failed(call, result,
                                       NGX_HTTP_SANDBOX_MCP_INVALID_PARAMS);
    }

    sc = json_object_get(result, "structuredContent");

    list = json_array();
    if (list == NULL) {
        return ngx_http_sandbox_mcp_method_view(call, result, NULL);
    }

    json_array_foreach(json_object_get(sc, "runs"), i, run) {
        json_array_append_new(list, each(call, run));
    }

    next = json_object_get(sc, "nextCursor");

    return ngx_http_sandbox_mcp_method_view(call, result,
               json_is_string(next)
               ? json_pack("{s:o, s:O}", name, list, "nextCursor", next)
               : json_pack("{s:o}", name, list));
}


json_t *
ngx_http_sandbox_mcp_task_created(ngx_http_sandbox_mcp_call_t *call,
    json_t *result)
{
    char     now[40];
    json_t  *run;

    if (ngx_http_sandbox_mcp_is_error(result)) {
        return ngx_http_sandbox_mcp_tool_failed(call, result,
                                       NGX_HTTP_SANDBOX_MCP_INVALID_PARAMS);
    }

    run = json_object_get(result, "structuredContent");
    smcp_iso8601_ms(now, sizeof(now), ngx_http_sandbox_mcp_now_ms());

    return ngx_http_sandbox_mcp_method_view(call, result,
               json_pack("{s:{s:O, s:s, s:s, s:s, s:s, s:I, s:I},"
                         " s:{s:s}}",
                         "task",
                             "taskId", json_object_get(run, "runId"),
                             "status", "working",
                             "statusMessage", SMCP_STATUS_STARTED,
                             "createdAt", now,
                             "lastUpdatedAt", now,
                             "ttl", ngx_http_sandbox_mcp_task_ttl(call),
                             "pollInterval",
                             (json_int_t) NGX_HTTP_SANDBOX_MCP_TASK_POLL,
                         "_meta",
                             NGX_HTTP_SANDBOX_MCP_IMMEDIATE,
                             "The coding task was handed to an OpenCode "
                             "sandbox; it takes minutes. Its result comes "
                             "when the run ends."));
}


static json_t *
ngx_http_sandbox_mcp_task_get(ngx_http_sandbox_mcp_call_t *call,
    json_t *result)
{
    if (ngx_http_sandbox_mcp_is_error(result)) {
        return ngx_http_sandbox_mcp_tool_failed(call, result,
                                       NGX_HTTP_SANDBOX_MCP_INVALID_PARAMS);
    }

    return ngx_http_sandbox_mcp_method_view(call, result,
               ngx_http_sandbox_mcp_task_object(call,
                   json_object_get(result, "structuredContent")));
}


/* tasks/result: the run ended; its get_result answer, isError unless it
 * completed, with the related task */
static json_t *
ngx_http_sandbox_mcp_task_final(ngx_http_sandbox_mcp_call_t *call,
    json_t *result)
{
    json_t      *run;
    const char  *status;

    if (ngx_http_sandbox_mcp_is_error(result)) {
        return ngx_http_sandbox_mcp_tool_failed(call, result,
                                       NGX_HTTP_SANDBOX_MCP_INVALID_PARAMS);
    }

    run = json_object_get(result, "structuredContent");
    status = json_string_value(json_object_get(run, "status"));

    if (!ngx_http_sandbox_mcp_is(status, SMCP_STATUS_COMPLETED)
        && !ngx_http_sandbox_mcp_is(status, SMCP_STATUS_FAILED)
        && !ngx_http_sandbox_mcp_is(status, SMCP_STATUS_CANCELLED))
    {
        /* past the longest run timeout and still going */
        json_decref(result);
        ngx_http_sandbox_mcp_call_error(call,
                                        NGX_HTTP_SANDBOX_MCP_INTERNAL_ERROR,
                                        "The task is still working: ask "
                                        "for its result again");
        return NULL;
    }

    if (!ngx_http_sandbox_mcp_is(status, SMCP_STATUS_COMPLETED)) {
        json_object_set_new(result, "isError", json_true());
    }

    if (json_object_set_new(result, "_meta",
                            json_pack("{s:{s:O}}",
                                      NGX_HTTP_SANDBOX_MCP_RELATED_TASK,
                                      "taskId",
                                      json_object_get(run, "runId")))
        != 0)
    {
        return ngx_http_sandbox_mcp_method_view(call, result, NULL);
    }

    return result;
}


static json_t *
ngx_http_sandbox_mcp_task_list(ngx_http_sandbox_mcp_call_t *call,
    json_t *result)
{
    return ngx_http_sandbox_mcp_runs_view(call, result, "tasks",
                                          ngx_http_sandbox_mcp_task_object);
}


static json_t *
ngx_http_sandbox_mcp_task_cancel(ngx_http_sandbox_mcp_call_t *call,
    json_t *result)
{
    json_t      *run;
    const char  *status, *message;

    if (ngx_http_sandbox_mcp_is_error(result)) {
        return ngx_http_sandbox_mcp_tool_failed(call, result,
                                       NGX_HTTP_SANDBOX_MCP_INVALID_PARAMS);
    }

    run = json_object_get(result, "structuredContent");
    status = ngx_http_sandbox_mcp_task_status(run, &message);

    if (!ngx_http_sandbox_mcp_is(status, SMCP_STATUS_CANCELLED)) {
        /* it had ended: the cancel changed nothing */
        ngx_http_sandbox_mcp_call_error(call,
                                        NGX_HTTP_SANDBOX_MCP_INVALID_PARAMS,
                                        "Invalid params: task %s is already "
                                        "%s and cannot be cancelled",
                                        json_string_value(
                                            json_object_get(run, "runId")),
                                        status);
        json_decref(result);
        return NULL;
    }

    return ngx_http_sandbox_mcp_method_view(call, result,
               ngx_http_sandbox_mcp_task_object(call, run));
}


json_t *
ngx_http_sandbox_mcp_runs_args(ngx_http_sandbox_mcp_call_t *call,
    json_t *params, ngx_int_t limit)
{
    json_t  *cursor, *args;

    cursor = json_object_get(params, "cursor");

    if (cursor && !json_is_null(cursor) && !json_is_string(cursor)) {
        ngx_http_sandbox_mcp_call_error(call,
                                        NGX_HTTP_SANDBOX_MCP_INVALID_PARAMS,
                                        "Invalid params: cursor must be a "
                                        "string");
        return NULL;
    }

    args = json_is_string(cursor)
           ? json_pack("{s:O, s:I}", "cursor", cursor, "limit",
                       (json_int_t) limit)
           : json_pack("{s:I}", "limit", (json_int_t) limit);

    if (args == NULL) {
        ngx_http_sandbox_mcp_call_error(call,
                                        NGX_HTTP_SANDBOX_MCP_INTERNAL_ERROR,
                                        "Internal error");
    }

    return args;
}


ngx_int_t
ngx_http_sandbox_mcp_tasks_start(ngx_http_sandbox_mcp_call_t *call,
    const char *method, json_t *params)
{
    json_t      *id, *args;
    const char  *tool;

    if (ngx_strncmp(method, "tasks/", 6) != 0) {
        return NGX_DECLINED;
    }

    method += 6;

    if (ngx_strcmp(method, "list") == 0) {
        args = ngx_http_sandbox_mcp_runs_args(call, params,
                                              NGX_HTTP_SANDBOX_MCP_TASKS_PAGE);
        if (args == NULL) {
            return NGX_OK;
        }

        call->filter = ngx_http_sandbox_mcp_task_list;
        tool = "opencode_list_runs";

    } else {
        if (ngx_strcmp(method, "get") == 0) {
            call->filter = ngx_http_sandbox_mcp_task_get;
            tool = "opencode_get_result";

        } else if (ngx_strcmp(method, "result") == 0) {
            call->filter = ngx_http_sandbox_mcp_task_final;
            call->until_end = 1;
            tool = "opencode_get_result";

        } else if (ngx_strcmp(method, "cancel") == 0) {
            call->filter = ngx_http_sandbox_mcp_task_cancel;
            tool = "opencode_cancel_run";

        } else {
            return NGX_DECLINED;
        }

        id = json_object_get(params, "taskId");

        if (!json_is_string(id)) {
            call->filter = NULL;
            ngx_http_sandbox_mcp_call_error(call,
                                       NGX_HTTP_SANDBOX_MCP_INVALID_PARAMS,
                                       "Invalid params: taskId (a string) "
                                       "is required");
            return NGX_OK;
        }

        args = json_pack("{s:O}", "runId", id);
    }

    call->pending = 1;
    call->ctx->pending++;

    ngx_http_sandbox_mcp_tools_start(call, tool, args);

    return NGX_OK;
}
