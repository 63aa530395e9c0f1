/*
 * opencode_run_task: every argument checked before anything is written,
 * then one script writes the run hash, the indexes, the first event and
 * the queue entry at once.
 */

#include "ngx_http_sandbox_mcp_tool_run_task.h"
#include "ngx_http_sandbox_mcp_agents.h"
#include "ngx_http_sandbox_mcp_args.h"
#include "ngx_http_sandbox_mcp_http.h"
#include "ngx_http_sandbox_mcp_notify.h"
#include "ngx_http_sandbox_mcp_providers.h"
#include "ngx_http_sandbox_mcp_redis.h"
#include "ngx_http_sandbox_mcp_run.h"
#include "ngx_http_sandbox_mcp_scripts.h"
#include "ngx_http_sandbox_mcp_tools.h"
#include "ngx_http_sandbox_mcp_defaults.h"

#include "smcp_validate.h"


/* the run_create script's answers */
#define NGX_HTTP_SANDBOX_MCP_CREATED           1
#define NGX_HTTP_SANDBOX_MCP_NO_SESSION        0
#define NGX_HTTP_SANDBOX_MCP_SESSION_EXPIRED   -1
#define NGX_HTTP_SANDBOX_MCP_QUEUE_FULL        -2
#define NGX_HTTP_SANDBOX_MCP_TOO_MANY_REPOS     -3
#define NGX_HTTP_SANDBOX_MCP_NO_REPOSITORY      -4
/* -5, -6, -7: the tenant's budgets (NGX_HTTP_SANDBOX_MCP_BUDGET_*) */
#define NGX_HTTP_SANDBOX_MCP_FORK_BUSY          -8
#define NGX_HTTP_SANDBOX_MCP_FORK_UNKNOWN       -9
#define NGX_HTTP_SANDBOX_MCP_FORK_EXPIRED       -10

/* how long a fork's run may hold the forked session's runs back (ms):
 * the runner's copy takes at most RUNNER_FORK_COPY_SECONDS (600 s) */
#define NGX_HTTP_SANDBOX_MCP_FORK_HOLD_MS       (15 * 60 * 1000)


/* the arguments of opencode_run_task, validated */
typedef struct {
    ngx_str_t                   task;
    ngx_str_t                   repo;       /* https://host/owner/name */
    ngx_str_t                   branch;
    ngx_str_t                   base_branch;
    ngx_str_t                   pr_title;
    ngx_str_t                   watch_base;
    ngx_str_t                   session;
    ngx_str_t                   fork;       /* forkSessionId, "": none */
    ngx_str_t                   model;
    ngx_str_t                   image;      /* "": the runner's */
    ngx_str_t                   agent;      /* "": the session's, or the
                                               first offered */
    ngx_uint_t                  model_named;
    ngx_str_t                   title;
    ngx_str_t                   grants;     /* as run_create reads them */
    ngx_str_t                   notify_url;     /* "": none */
    ngx_str_t                   notify_format;
    json_int_t                  timeout;
    json_int_t                  attempts;       /* 1: one run */
    ngx_uint_t                  create_pr;
    ngx_uint_t                  draft;
    ngx_int_t                   max_cost;       /* micro-USD, 0: no cap */
    u_char                      title_buf[NGX_HTTP_SANDBOX_MCP_AUTO_TITLE];
    u_char                      cost_buf[NGX_INT64_LEN + 2];
} ngx_http_sandbox_mcp_task_t;


static void ngx_http_sandbox_mcp_task_grant_text(
    ngx_http_sandbox_mcp_call_t *call, u_char *buf, size_t size);
static void ngx_http_sandbox_mcp_task_no_route(
    ngx_http_sandbox_mcp_call_t *call, redisReply *reply);
static ngx_int_t ngx_http_sandbox_mcp_task_agent_refused(
    ngx_http_sandbox_mcp_call_t *call, redisReply *reply);
static void ngx_http_sandbox_mcp_task_fork_text(
    ngx_http_sandbox_mcp_call_t *call, ngx_str_t *fork);


/*
 * The answer, as JSON text in the pool: {runId, sessionId, status, watchUrl}
 * (no watchUrl if it could not be made), as json_dumps() wrote it.
 */
static ngx_int_t
ngx_http_sandbox_mcp_run_started(ngx_http_sandbox_mcp_call_t *call,
    ngx_str_t *text)
{
    u_char     *p;
    size_t      len;
    ngx_str_t   url;

    if (ngx_http_sandbox_mcp_watch_url_text(call, &call->run_id, &url)
        != NGX_OK)
    {
        url.len = 0;
    }

    len = sizeof("{\"runId\":\"\",\"sessionId\":\"\",\"status\":\""
                 SMCP_STATUS_STARTED "\",\"watchUrl\":\"\"}") - 1
          + call->run_id.len
          + ngx_http_sandbox_mcp_escape_json(NULL, call->run_id.data,
                                             call->run_id.len)
          + call->path.len
          + ngx_http_sandbox_mcp_escape_json(NULL, call->path.data,
                                             call->path.len)
          + url.len + ngx_http_sandbox_mcp_escape_json(NULL, url.data, url.len);

    text->data = ngx_pnalloc(call->ctx->request->pool, len);
    if (text->data == NULL) {
        return NGX_ERROR;
    }

    p = ngx_cpymem(text->data, "{\"runId\":\"", sizeof("{\"runId\":\"") - 1);
    p = (u_char *) ngx_http_sandbox_mcp_escape_json(p, call->run_id.data,
                                                    call->run_id.len);
    p = ngx_cpymem(p, "\",\"sessionId\":\"",
                   sizeof("\",\"sessionId\":\"") - 1);
    p = (u_char *) ngx_http_sandbox_mcp_escape_json(p, call->path.data,
                                                    call->path.len);
    p = ngx_cpymem(p, "\",\"status\":\"" SMCP_STATUS_STARTED "\"",
                   sizeof("\",\"status\":\"" SMCP_STATUS_STARTED "\"") - 1);

    if (url.len) {
        p = ngx_cpymem(p, ",\"watchUrl\":\"", sizeof(",\"watchUrl\":\"") - 1);
        p = (u_char *) ngx_http_sandbox_mcp_escape_json(p, url.data, url.len);
        *p++ = '"';
    }

    *p++ = '}';

    text->len = p - text->data;

    return NGX_OK;
}


/*
 * The answer of attempts: the first's {runId, sessionId, status, watchUrl},
 * groupId (the first's runId) and attempts, [{runId, sessionId, watchUrl}]
 * of each in turn.
 */
static json_t *
ngx_http_sandbox_mcp_attempts_started(ngx_http_sandbox_mcp_call_t *call)
{
    json_t      *o, *a, *list;
    ngx_str_t    url, *id;
    ngx_uint_t   i;

    list = json_array();
    o = json_pack("{s:s%, s:s%, s:s, s:s%, s:o}",
                  "runId", call->run_id.data, call->run_id.len,
                  "sessionId", call->path.data, call->path.len,
                  "status", SMCP_STATUS_STARTED,
                  "groupId", call->run_id.data, call->run_id.len,
                  "attempts", list);
    if (o == NULL) {
        return NULL;
    }

    for (i = 0; i < call->nattempts; i++) {
        id = &call->attempts[2 * i];

        a = json_pack("{s:s%, s:s%}", "runId", id[0].data, id[0].len,
                      "sessionId", id[1].data, id[1].len);

        if (a == NULL || json_array_append_new(list, a) != 0) {
            json_decref(o);
            return NULL;
        }

        if (ngx_http_sandbox_mcp_watch_url_text(call, &id[0], &url)
            == NGX_OK)
        {
            json_object_set_new(a, "watchUrl",
                                json_stringn((char *) url.data, url.len));

            if (i == 0) {
                json_object_set_new(o, "watchUrl",
                                    json_stringn((char *) url.data,
                                                 url.len));
            }
        }
    }

    return o;
}


static void
ngx_http_sandbox_mcp_run_created(void *data, redisReply *reply)
{
    ngx_http_sandbox_mcp_call_t *call = data;

    u_char                            grants[NGX_HTTP_SANDBOX_MCP_MESSAGE_MAX
                                                 / 2];
    ngx_str_t                         text, fork;
    ngx_http_sandbox_mcp_loc_conf_t  *lcf;

    if (ngx_http_sandbox_mcp_reply_failed(call, reply)) {
        return;
    }

    lcf = ngx_http_get_module_loc_conf(call->ctx->request,
                                       ngx_http_sandbox_mcp_module);

    if (reply->type == REDIS_REPLY_ARRAY) {
        /* the run's agent refused, or a route the run needs that the
         * egress does not have */
        if (ngx_http_sandbox_mcp_task_agent_refused(call, reply) != NGX_OK) {
            ngx_http_sandbox_mcp_task_no_route(call, reply);
        }

        return;
    }

    if (reply->type == REDIS_REPLY_STRING) {
        /* a repository of the session that the token does not grant */
        ngx_http_sandbox_mcp_task_grant_text(call, grants, sizeof(grants));
        ngx_http_sandbox_mcp_tool_error(call, "Session %V works on %*s, "
                                        "which this token does not grant (a "
                                        "run reaches every repository of its "
                                        "session). Omit sessionId to start a "
                                        "new session, or use a token that "
                                        "grants it; %s", &call->path,
                                        (size_t) ngx_min(reply->len, 200),
                                        reply->str, grants);
        return;
    }

    /* the session a fork names, for its refusals */
    ngx_http_sandbox_mcp_task_fork_text(call, &fork);

    switch (reply->type == REDIS_REPLY_INTEGER
            ? reply->integer : NGX_HTTP_SANDBOX_MCP_NO_SESSION)
    {

    case NGX_HTTP_SANDBOX_MCP_CREATED:
        break;

    case NGX_HTTP_SANDBOX_MCP_QUEUE_FULL:
        if (call->nattempts > 1) {
            ngx_http_sandbox_mcp_tool_error(call, "Too many runs waiting to "
                                            "start: %ui queued runs at "
                                            "most, and these %ui attempts "
                                            "would pass it. Ask for fewer "
                                            "attempts, or wait until some "
                                            "runs start or finish "
                                            "(opencode_list_runs with "
                                            "status started), or cancel "
                                            "some with opencode_cancel_run, "
                                            "then try again.",
                                            lcf->max_queued,
                                            call->nattempts);
            return;
        }

        ngx_http_sandbox_mcp_tool_error(call, "Too many runs waiting to "
                                        "start: you already have %ui queued "
                                        "runs, the limit. Wait until some "
                                        "start or finish (opencode_list_runs "
                                        "with status started), or cancel "
                                        "some with opencode_cancel_run, then "
                                        "try again.", lcf->max_queued);
        return;

    case NGX_HTTP_SANDBOX_MCP_TOO_MANY_REPOS:
        ngx_http_sandbox_mcp_tool_error(call, "Session %V already works on "
                                        "%d repositories, the most one "
                                        "session may: name one of them, or "
                                        "start a new session by omitting "
                                        "sessionId.", &call->path,
                                        NGX_HTTP_SANDBOX_MCP_SESSION_REPOS);
        return;

    case NGX_HTTP_SANDBOX_MCP_NO_REPOSITORY:
        ngx_http_sandbox_mcp_tool_error(call, "Session %V has no repository: "
                                        "'branch' and 'createPullRequest' "
                                        "need one; pass 'repository'.",
                                        &call->path);
        return;

    case NGX_HTTP_SANDBOX_MCP_BUDGET_BYTES:
    case NGX_HTTP_SANDBOX_MCP_BUDGET_SESSIONS:
    case NGX_HTTP_SANDBOX_MCP_BUDGET_DISK:
        ngx_http_sandbox_mcp_tool_budget_error(call, reply->integer);
        return;

    case NGX_HTTP_SANDBOX_MCP_FORK_BUSY:
        ngx_http_sandbox_mcp_tool_error(call, "Session %V has a run queued "
                                        "or going: a fork copies a session "
                                        "as its last run left it, so fork "
                                        "it once that run has ended "
                                        "(opencode_get_result waitSeconds), "
                                        "or cancel that run "
                                        "(opencode_cancel_run).", &fork);
        return;

    case NGX_HTTP_SANDBOX_MCP_FORK_UNKNOWN:
        ngx_http_sandbox_mcp_tool_error(call, "Unknown forkSessionId: %V "
                                        "(use a sessionId returned by "
                                        "opencode_run_task; "
                                        "opencode_list_sessions lists "
                                        "yours).", &fork);
        return;

    case NGX_HTTP_SANDBOX_MCP_FORK_EXPIRED:
        ngx_http_sandbox_mcp_tool_error(call, "Session expired: %V was idle "
                                        "longer than %T seconds and its "
                                        "workspace was removed; there is "
                                        "nothing left to fork.", &fork,
                                        lcf->session_idle);
        return;

    case NGX_HTTP_SANDBOX_MCP_SESSION_EXPIRED:
        ngx_http_sandbox_mcp_tool_error(call, "Session expired: %V was idle "
                                        "longer than %T seconds and its "
                                        "workspace was removed; start a new "
                                        "session by omitting sessionId.",
                                        &call->path, lcf->session_idle);
        return;

    default:
        ngx_http_sandbox_mcp_tool_error(call, "Unknown sessionId: %V (omit "
                                        "sessionId to start a new session, "
                                        "or use one returned by "
                                        "opencode_run_task).", &call->path);
        return;
    }

    if (call->nattempts > 1) {
        ngx_http_sandbox_mcp_tool_output(call,
                                  ngx_http_sandbox_mcp_attempts_started(call));
        return;
    }

    ngx_http_sandbox_mcp_tool_output_text(call,
        ngx_http_sandbox_mcp_run_started(call, &text) == NGX_OK ? &text
                                                                : NULL);
}


/*
 * run_create's {"agent", why, AGENT[, MODEL]}: the agent named is not the
 * session's, the session's is not offered, or the model is none the agent
 * runs.  NGX_DECLINED: not such a reply.
 */
static ngx_int_t
ngx_http_sandbox_mcp_task_agent_refused(ngx_http_sandbox_mcp_call_t *call,
    redisReply *reply)
{
    size_t        i;
    ngx_str_t     v[4];
    const char   *provider;

    if (reply->elements < 3 || reply->elements > 4) {
        return NGX_DECLINED;
    }

    for (i = 0; i < reply->elements; i++) {
        if (reply->element[i]->type != REDIS_REPLY_STRING) {
            return NGX_DECLINED;
        }

        v[i].data = (u_char *) reply->element[i]->str;
        v[i].len = ngx_min(reply->element[i]->len, SMCP_MODEL_MAX);
    }

    if (v[0].len != 5 || ngx_strncmp(v[0].data, "agent", 5) != 0) {
        return NGX_DECLINED;
    }

    if (v[1].len == 7 && ngx_strncmp(v[1].data, "session", 7) == 0) {
        ngx_http_sandbox_mcp_tool_error(call, "Session %V runs the agent "
                                        "%V: a session keeps its agent. "
                                        "Omit 'agent' to continue it, or "
                                        "omit sessionId to start a new "
                                        "session with another agent.",
                                        &call->path, &v[2]);
        return NGX_OK;
    }

    if (v[1].len == 7 && ngx_strncmp(v[1].data, "offered", 7) == 0) {
        ngx_http_sandbox_mcp_tool_error(call, "Session %V runs the agent "
                                        "%V, which this server no longer "
                                        "offers (sandbox_mcp_agents): start "
                                        "a new session by omitting "
                                        "sessionId.", &call->path, &v[2]);
        return NGX_OK;
    }

    if (reply->elements != 4) {
        return NGX_DECLINED;
    }

    provider = smcp_agent_provider((char *) v[2].data, v[2].len);

    ngx_http_sandbox_mcp_tool_error(call, "Argument 'model': the agent %V "
                                    "runs %s models (%s/...), not %V: pass "
                                    "one as 'model', or another 'agent'.",
                                    &v[2], provider ? provider : "other",
                                    provider ? provider : "?", &v[3]);
    return NGX_OK;
}


/* the forkSessionId of the call (checked before the script ran) */
static void
ngx_http_sandbox_mcp_task_fork_text(ngx_http_sandbox_mcp_call_t *call,
    ngx_str_t *fork)
{
    const char  *s;

    s = json_string_value(json_object_get(call->args, "forkSessionId"));

    fork->data = (u_char *) (s ? s : "");
    fork->len = s ? ngx_min(ngx_strlen(s), SMCP_ID_LEN) : 0;
}


/*
 * run_create's {"route", name, routes}: the run needs the egress route
 * name, which the egress's announced routes lack.  The refusal names the
 * setting that gives the egress that route, and what it can do instead.
 */
static void
ngx_http_sandbox_mcp_task_no_route(ngx_http_sandbox_mcp_call_t *call,
    redisReply *reply)
{
    u_char      *p, *last;
    ngx_str_t    route, routes;
    const char  *setting;
    u_char       models[NGX_HTTP_SANDBOX_MCP_MESSAGE_MAX / 4];

    if (reply->elements != 3
        || reply->element[1]->type != REDIS_REPLY_STRING
        || reply->element[2]->type != REDIS_REPLY_STRING)
    {
        ngx_http_sandbox_mcp_tool_unavailable(call);
        return;
    }

    route.data = (u_char *) reply->element[1]->str;
    route.len = ngx_min(reply->element[1]->len, 64);
    routes.data = (u_char *) reply->element[2]->str;
    routes.len = reply->element[2]->len;
    setting = ngx_http_sandbox_mcp_route_setting(&route);

    if (route.len == sizeof(NGX_HTTP_SANDBOX_MCP_GITHUB_ROUTE) - 1
        && ngx_strncmp(route.data, NGX_HTTP_SANDBOX_MCP_GITHUB_ROUTE,
                       route.len) == 0)
    {
        ngx_http_sandbox_mcp_tool_error(call, "This server cannot run tasks "
                                        "on repositories: its egress proxy "
                                        "has no GitHub route, so the sandbox "
                                        "could not clone one. The operator "
                                        "sets %s where the egress proxy runs "
                                        "(make up's environment, or "
                                        "docker-compose's egress service) "
                                        "and restarts it. Until then, leave "
                                        "out 'repository' (and the sessionId "
                                        "of a session with one).", setting);
        return;
    }

    last = models + sizeof(models) - 1;
    p = ngx_http_sandbox_mcp_route_models(models, last, &routes);
    *p = '\0';

    ngx_http_sandbox_mcp_tool_error(call, "This server cannot reach the "
                                    "model's provider: its egress proxy "
                                    "has no %V route, so the agent could "
                                    "not call the model. %s%s%s%s%s%s",
                                    &route,
                                    *setting ? "The operator sets " : "",
                                    setting,
                                    *setting ? " where the egress proxy "
                                               "runs (make up's environment,"
                                               " or docker-compose's egress "
                                               "service) and restarts it. "
                                             : "",
                                    p == models
                                    ? "It serves no model provider yet: no "
                                      "run can start until it does."
                                    : "Models it serves: ",
                                    p == models ? "" : (char *) models,
                                    p == models ? "" : " (pass one as "
                                                       "'model').");
}


/*
 * What the token grants, the end of a refusal: "it may name only: a/b,
 * c/d." or "this token grants no repositories (...)."; NUL-terminated.
 */
static void
ngx_http_sandbox_mcp_task_grant_text(ngx_http_sandbox_mcp_call_t *call,
    u_char *buf, size_t size)
{
    u_char      *p, *last;
    ngx_str_t   *g;
    ngx_uint_t   i, n;

    g = call->ctx->repos ? call->ctx->repos->elts : NULL;
    n = call->ctx->repos ? call->ctx->repos->nelts : 0;
    last = buf + size - 5;

    if (n == 0) {
        p = ngx_slprintf(buf, buf + size - 1, "this token grants no "
                         "repositories (its \"repos\" claim is missing). Ask "
                         "for a token minted with --repos owner/repo.");
        *p = '\0';
        return;
    }

    p = ngx_slprintf(buf, last, "it may name only: ");

    for (i = 0; i < n && p < last; i++) {
        p = ngx_slprintf(p, last, "%s%V", i ? ", " : "", &g[i]);
    }

    if (i < n || p == last) {
        p = ngx_cpymem(p, "...", 3);
    }

    *p++ = '.';
    *p = '\0';
}


/* is the repository among the token's grants (its "repos" claim)? */
static ngx_int_t
ngx_http_sandbox_mcp_task_granted(ngx_http_sandbox_mcp_call_t *call,
    smcp_repo_t *repo)
{
    ngx_str_t   *g;
    ngx_uint_t   i, n;
    u_char       text[NGX_HTTP_SANDBOX_MCP_MESSAGE_MAX / 2];

    g = call->ctx->repos ? call->ctx->repos->elts : NULL;
    n = call->ctx->repos ? call->ctx->repos->nelts : 0;

    for (i = 0; i < n; i++) {
        if (smcp_grant_match((char *) g[i].data, g[i].len, repo)) {
            return NGX_OK;
        }
    }

    ngx_http_sandbox_mcp_task_grant_text(call, text, sizeof(text));

    ngx_http_sandbox_mcp_tool_error(call, "Repository %*s/%*s is not granted"
                                    "%s %s", repo->owner_len, repo->owner,
                                    repo->name_len, repo->name,
                                    n ? " to this token;" : ":", text);
    return NGX_ERROR;
}


/*
 * The token's grants as run_create compares them: lower case, without
 * ".git", ',' between them ("" grants none).  The script checks every
 * repository the run reaches against them, its session's included.
 */
ngx_int_t
ngx_http_sandbox_mcp_task_grants(ngx_http_sandbox_mcp_call_t *call,
    ngx_str_t *out)
{
    u_char      *p;
    size_t       len;
    ngx_str_t   *g;
    ngx_uint_t   i, n;

    g = call->ctx->repos ? call->ctx->repos->elts : NULL;
    n = call->ctx->repos ? call->ctx->repos->nelts : 0;

    len = 0;

    for (i = 0; i < n; i++) {
        len += g[i].len + 1;
    }

    ngx_str_set(out, "");

    if (len == 0) {
        return NGX_OK;
    }

    out->data = ngx_pnalloc(call->ctx->request->pool, len);
    if (out->data == NULL) {
        return NGX_ERROR;
    }

    p = out->data;

    for (i = 0; i < n; i++) {
        if (i) {
            *p++ = ',';
        }

        len = g[i].len;

        /* checked when the token was read (smcp_grant_valid) */
        if (len > 4 && ngx_strncasecmp(g[i].data + len - 4,
                                       (u_char *) ".git", 4) == 0)
        {
            len -= 4;
        }

        ngx_strlow(p, g[i].data, len);
        p += len;
    }

    out->len = p - out->data;

    return NGX_OK;
}


static ngx_int_t
ngx_http_sandbox_mcp_task_strings(ngx_http_sandbox_mcp_call_t *call,
    ngx_http_sandbox_mcp_loc_conf_t *lcf, ngx_http_sandbox_mcp_task_t *t)
{
    if (ngx_http_sandbox_mcp_arg_string(call, "task", lcf->max_task_size,
                                        &t->task)
        != NGX_OK
        || ngx_http_sandbox_mcp_arg_string(call, "repository",
                                           NGX_HTTP_SANDBOX_MCP_REPOSITORY_MAX,
                                           &t->repo)
           != NGX_OK
        || ngx_http_sandbox_mcp_arg_string(call, "branch",
                                           SMCP_BRANCH_MAX, &t->branch)
           != NGX_OK
        || ngx_http_sandbox_mcp_arg_string(call, "baseBranch",
                                           SMCP_BRANCH_MAX, &t->base_branch)
           != NGX_OK
        || ngx_http_sandbox_mcp_arg_string(call, "prTitle",
                                           NGX_HTTP_SANDBOX_MCP_ARG_ANY_SIZE,
                                           &t->pr_title)
           != NGX_OK
        || ngx_http_sandbox_mcp_arg_string(call, "sessionId",
                                           NGX_HTTP_SANDBOX_MCP_ID_ARG_MAX,
                                           &t->session)
           != NGX_OK
        || ngx_http_sandbox_mcp_arg_string(call, "forkSessionId",
                                           NGX_HTTP_SANDBOX_MCP_ID_ARG_MAX,
                                           &t->fork)
           != NGX_OK
        || ngx_http_sandbox_mcp_arg_string(call, "model",
                                           SMCP_MODEL_MAX, &t->model)
           != NGX_OK
        || ngx_http_sandbox_mcp_arg_string(call, "image",
                                           NGX_HTTP_SANDBOX_MCP_IMAGE_MAX,
                                           &t->image)
           != NGX_OK
        || ngx_http_sandbox_mcp_arg_string(call, "title",
                                           NGX_HTTP_SANDBOX_MCP_ARG_ANY_SIZE,
                                           &t->title)
           != NGX_OK)
    {
        return NGX_ERROR;
    }

    return NGX_OK;
}


/* a run naming no image: its tenant's (sandbox_mcp_tenant_image), if it
 * has one; else "" (the runner's) */
static void
ngx_http_sandbox_mcp_tenant_image(ngx_http_sandbox_mcp_call_t *call,
    ngx_http_sandbox_mcp_loc_conf_t *lcf, ngx_str_t *image)
{
    ngx_str_t     *tenant;
    ngx_uint_t     i;
    ngx_keyval_t  *kv;

    if (lcf->tenant_images == NULL) {
        return;
    }

    tenant = &call->ctx->tenant;
    kv = lcf->tenant_images->elts;

    for (i = 0; i < lcf->tenant_images->nelts; i++) {
        if (kv[i].key.len == tenant->len
            && ngx_strncmp(kv[i].key.data, tenant->data, tenant->len) == 0)
        {
            *image = kv[i].value;
            return;
        }
    }
}


/* a run's own image: one of sandbox_mcp_images (the runners check it
 * again against theirs) */
static ngx_int_t
ngx_http_sandbox_mcp_task_image(ngx_http_sandbox_mcp_call_t *call,
    ngx_http_sandbox_mcp_loc_conf_t *lcf, ngx_str_t *image)
{
    u_char      *p, *last;
    ngx_str_t   *names;
    ngx_uint_t   i;
    u_char       list[NGX_HTTP_SANDBOX_MCP_MESSAGE_MAX / 2];

    if (lcf->images == NULL) {
        ngx_http_sandbox_mcp_tool_error(call, "Argument 'image': this server "
                                        "offers no choice of sandbox image "
                                        "(leave it out).");
        return NGX_ERROR;
    }

    names = lcf->images->elts;
    p = list;
    last = list + sizeof(list) - 1;

    for (i = 0; i < lcf->images->nelts; i++) {
        if (names[i].len == image->len
            && ngx_strncmp(names[i].data, image->data, image->len) == 0)
        {
            return NGX_OK;
        }

        p = ngx_slprintf(p, last, "%s%V", i ? ", " : "", &names[i]);
    }

    *p = '\0';

    ngx_http_sandbox_mcp_tool_error(call, "Argument 'image' must be one of "
                                    "%s (or left out: the default image).",
                                    list);
    return NGX_ERROR;
}


static ngx_int_t
ngx_http_sandbox_mcp_task_branch(ngx_http_sandbox_mcp_call_t *call,
    const char *name, ngx_str_t *branch)
{
    if (branch->len
        && !smcp_valid_branch((char *) branch->data, branch->len))
    {
        ngx_http_sandbox_mcp_tool_error(call, "Argument '%s' is not a "
                                        "valid git branch name (ASCII; no "
                                        "spaces, '..', '~^:?*[\\', leading "
                                        "'-' or trailing '.lock').", name);
        return NGX_ERROR;
    }

    return NGX_OK;
}


/*
 * The repository named (checked, granted, then written as
 * https://<host>/<owner>/<name>); a follow-up may name none: the session's
 * first is the run's (the script finds it).
 */
static ngx_int_t
ngx_http_sandbox_mcp_task_repository(ngx_http_sandbox_mcp_call_t *call,
    ngx_http_sandbox_mcp_loc_conf_t *lcf, ngx_http_sandbox_mcp_task_t *t)
{
    u_char       *p;
    smcp_repo_t   repo;

    if (ngx_http_sandbox_mcp_task_branch(call, "branch", &t->branch)
        != NGX_OK
        || ngx_http_sandbox_mcp_task_branch(call, "baseBranch",
                                            &t->base_branch)
           != NGX_OK)
    {
        return NGX_ERROR;
    }

    if (t->repo.len == 0) {
        if (t->branch.len && t->session.len == 0) {
            ngx_http_sandbox_mcp_tool_error(call, "Argument 'branch' needs "
                                            "'repository' (or the sessionId "
                                            "of a session with one).");
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

    if (ngx_http_sandbox_mcp_task_granted(call, &repo) != NGX_OK) {
        return NGX_ERROR;
    }

    p = ngx_pnalloc(call->ctx->request->pool,
                    sizeof("https:///") + lcf->github_host.len
                    + repo.owner_len + repo.name_len);
    if (p == NULL) {
        ngx_http_sandbox_mcp_tool_unavailable(call);
        return NGX_ERROR;
    }

    t->repo.data = p;
    t->repo.len = ngx_sprintf(p, "https://%V/%*s/%*s", &lcf->github_host,
                              repo.owner_len, repo.owner,
                              repo.name_len, repo.name)
                  - p;

    return NGX_OK;
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


/* a boolean argument, absent: false */
static ngx_int_t
ngx_http_sandbox_mcp_task_flag(ngx_http_sandbox_mcp_call_t *call,
    const char *name, ngx_uint_t *flag)
{
    json_t  *v;

    v = json_object_get(call->args, name);

    if (v && !json_is_null(v) && !json_is_boolean(v)) {
        ngx_http_sandbox_mcp_tool_error(call, "Argument '%s' must be true "
                                        "or false.", name);
        return NGX_ERROR;
    }

    *flag = json_is_true(v);

    return NGX_OK;
}


/*
 * notify: {"url": a destination sandbox_mcp_notify_allow lists, "format":
 * "json" (default), "slack" or "ntfy"}; absent: the tenant's
 * (sandbox_mcp_tenant_notify), else none
 */
static ngx_int_t
ngx_http_sandbox_mcp_task_notify(ngx_http_sandbox_mcp_call_t *call,
    ngx_http_sandbox_mcp_task_t *t)
{
    json_t                             *n, *v, *url, *format;
    ngx_str_t                           text;
    const char                             *key, *why;
    ngx_http_sandbox_mcp_notify_url_t       u;
    ngx_http_sandbox_mcp_notify_default_t  *d;

    static const char  *formats[] = { "json", "slack", "ntfy", NULL };
    const char        **f;

    n = json_object_get(call->args, "notify");

    if (n == NULL || json_is_null(n)) {
        d = ngx_http_sandbox_mcp_notify_tenant(call->ctx->request,
                                               &call->ctx->tenant);
        if (d) {
            t->notify_url = d->url;
            t->notify_format = d->format;
        }

        return NGX_OK;
    }

    if (!json_is_object(n)) {
        goto shape;
    }

    json_object_foreach(n, key, v) {
        if (ngx_strcmp(key, "url") != 0 && ngx_strcmp(key, "format") != 0) {
            goto shape;
        }
    }

    url = json_object_get(n, "url");
    format = json_object_get(n, "format");

    if (!json_is_string(url) || (format && !json_is_string(format))) {
        goto shape;
    }

    f = formats;

    if (format) {
        for ( /* void */ ; *f; f++) {
            if (ngx_strcmp(json_string_value(format), *f) == 0) {
                break;
            }
        }

        if (*f == NULL) {
            goto shape;
        }
    }

    text.len = json_string_length(url);
    text.data = ngx_pnalloc(call->ctx->request->pool, text.len + 1);
    if (text.data == NULL) {
        return NGX_ERROR;
    }

    ngx_memcpy(text.data, json_string_value(url), text.len);

    why = ngx_http_sandbox_mcp_notify_allowed(call->ctx->request, &text, &u);

    if (why) {
        ngx_http_sandbox_mcp_tool_error(call, "Argument 'notify.url' %s.",
                                        why);
        return NGX_ERROR;
    }

    t->notify_url = text;
    t->notify_format.data = (u_char *) *f;
    t->notify_format.len = ngx_strlen(*f);

    return NGX_OK;

shape:

    ngx_http_sandbox_mcp_tool_error(call, "Argument 'notify' must be "
                                    "{\"url\": \"https://...\", \"format\": "
                                    "\"json\" | \"slack\" | \"ntfy\"} (format "
                                    "optional: json).");
    return NGX_ERROR;
}


/* attempts: 1 to NGX_HTTP_SANDBOX_MCP_ATTEMPTS_MAX, each a new session */
static ngx_int_t
ngx_http_sandbox_mcp_task_attempts(ngx_http_sandbox_mcp_call_t *call,
    ngx_http_sandbox_mcp_task_t *t)
{
    ngx_int_t  rc;

    rc = ngx_http_sandbox_mcp_arg_integer(call, "attempts",
                                          NGX_HTTP_SANDBOX_MCP_ATTEMPTS_MAX,
                                          &t->attempts);
    if (rc == NGX_ERROR) {
        return NGX_ERROR;
    }

    if (rc == NGX_DECLINED) {
        t->attempts = 1;
    }

    if (t->attempts > 1 && (t->session.len || t->fork.len)) {
        ngx_http_sandbox_mcp_tool_error(call, "Argument 'attempts' starts "
                                        "each attempt in a new session of "
                                        "its own: not with sessionId or "
                                        "forkSessionId (fork the session "
                                        "once for each direction instead).");
        return NGX_ERROR;
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_sandbox_mcp_task_options(ngx_http_sandbox_mcp_call_t *call,
    ngx_http_sandbox_mcp_loc_conf_t *lcf, ngx_http_sandbox_mcp_task_t *t)
{
    size_t      i;
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

    if (t->fork.len
        && !smcp_valid_id((char *) t->fork.data, t->fork.len,
                          SMCP_SESSION_ID_PREFIX))
    {
        ngx_http_sandbox_mcp_tool_error(call, "Unknown forkSessionId: "
                                        "sessionIds look like ses_ followed "
                                        "by 24 hex digits.");
        return NGX_ERROR;
    }

    if (t->fork.len && t->session.len) {
        ngx_http_sandbox_mcp_tool_error(call, "Pass sessionId or "
                                        "forkSessionId, not both: sessionId "
                                        "continues a session, forkSessionId "
                                        "starts a new one from a copy of "
                                        "it.");
        return NGX_ERROR;
    }

    if (ngx_http_sandbox_mcp_task_attempts(call, t) != NGX_OK) {
        return NGX_ERROR;
    }

    if (ngx_http_sandbox_mcp_agents_arg(call, lcf, &t->agent) != NGX_OK) {
        return NGX_ERROR;
    }

    t->model_named = (t->model.len != 0);

    if (t->model.len == 0) {
        t->model = lcf->default_model;

    } else if (!smcp_valid_model((char *) t->model.data, t->model.len)) {
        ngx_http_sandbox_mcp_tool_error(call, "Argument 'model' must look "
                                        "like provider/model, e.g. "
                                        "anthropic/claude-sonnet-4-5.");
        return NGX_ERROR;
    }

    if (t->image.len && t->agent.len
        && ngx_strncmp(t->agent.data, SMCP_AGENT_DEFAULT, t->agent.len) != 0)
    {
        ngx_http_sandbox_mcp_tool_error(call, "Argument 'image' is for "
                                        "OpenCode's runs: %V runs in its own "
                                        "image.", &t->agent);
        return NGX_ERROR;
    }

    if (t->image.len) {
        if (ngx_http_sandbox_mcp_task_image(call, lcf, &t->image) != NGX_OK) {
            return NGX_ERROR;
        }

    } else {
        ngx_http_sandbox_mcp_tenant_image(call, lcf, &t->image);
    }

    if (ngx_http_sandbox_mcp_task_flag(call, "createPullRequest",
                                       &t->create_pr)
        != NGX_OK
        || ngx_http_sandbox_mcp_task_flag(call, "draft", &t->draft) != NGX_OK)
    {
        return NGX_ERROR;
    }

    if (t->create_pr && t->repo.len == 0 && t->session.len == 0
        && t->fork.len == 0)
    {
        ngx_http_sandbox_mcp_tool_error(call, "Argument 'createPullRequest' "
                                        "needs 'repository' (or the "
                                        "sessionId of a session with one).");
        return NGX_ERROR;
    }

    for (i = 0; i < t->pr_title.len; i++) {
        if (t->pr_title.data[i] < 0x20 || t->pr_title.data[i] == 0x7f) {
            ngx_http_sandbox_mcp_tool_error(call, "Argument 'prTitle' must "
                                            "be one line of text (no "
                                            "control characters).");
            return NGX_ERROR;
        }
    }

    rc = ngx_http_sandbox_mcp_arg_integer(call, "timeoutSeconds",
                                          lcf->run_timeout_max, &t->timeout);
    if (rc == NGX_ERROR) {
        return NGX_ERROR;
    }

    if (rc == NGX_DECLINED) {
        t->timeout = lcf->run_timeout;
    }

    if (ngx_http_sandbox_mcp_task_notify(call, t) != NGX_OK) {
        return NGX_ERROR;
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

    for (i = 0;
         i < t->task.len && t->task.data[i] != '\n'
         && i < NGX_HTTP_SANDBOX_MCP_AUTO_TITLE;
         i++)
    {
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


/* the attempts' run and session ids, the first's those of the call */
static ngx_int_t
ngx_http_sandbox_mcp_task_attempt_ids(ngx_http_sandbox_mcp_call_t *call,
    ngx_http_sandbox_mcp_task_t *t)
{
    u_char      *p;
    ngx_uint_t   i;
    char         id[SMCP_ID_LEN + 1];

    call->attempts = ngx_palloc(call->ctx->request->pool,
                                2 * t->attempts * sizeof(ngx_str_t));
    p = ngx_pnalloc(call->ctx->request->pool, 2 * t->attempts * SMCP_ID_LEN);

    if (call->attempts == NULL || p == NULL) {
        return NGX_ERROR;
    }

    call->nattempts = t->attempts;
    call->attempts[0] = call->run_id;
    call->attempts[1] = call->path;

    for (i = 2; i < 2 * call->nattempts; i++) {
        if (smcp_make_id(id, (i % 2) ? SMCP_SESSION_ID_PREFIX
                                     : SMCP_RUN_ID_PREFIX)
            != SMCP_OK)
        {
            return NGX_ERROR;
        }

        call->attempts[i].data = p;
        call->attempts[i].len = SMCP_ID_LEN;
        p = ngx_cpymem(p, id, SMCP_ID_LEN);
    }

    return NGX_OK;
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

    return t->attempts > 1 ? ngx_http_sandbox_mcp_task_attempt_ids(call, t)
                           : NGX_OK;
}


static void
ngx_http_sandbox_mcp_task_send(ngx_http_sandbox_mcp_call_t *call,
    ngx_http_sandbox_mcp_loc_conf_t *lcf, ngx_http_sandbox_mcp_task_t *t)
{
    int64_t                      now;
    ngx_str_t                    args[46 + 3 * (
                                          NGX_HTTP_SANDBOX_MCP_ATTEMPTS_MAX
                                          - 1)];
    ngx_str_t                   *id;
    ngx_uint_t                   nkeys, nargs, i;
    ngx_pool_t                  *pool;
    ngx_http_sandbox_mcp_key_t   keys[17 + 5 * (
                                          NGX_HTTP_SANDBOX_MCP_ATTEMPTS_MAX
                                          - 1)] = {
        { SMCP_KEY_RUN, &call->run_id },
        { SMCP_KEY_RUN_EVENTS, &call->run_id },
        { SMCP_KEY_TENANT_RUNS, &call->ctx->tenant },
        { SMCP_KEY_SESSION, &call->path },
        { SMCP_KEY_SESSION_RUNS, &call->path },
        { SMCP_KEY_SESSION_ACTIVE, &call->path },
        { SMCP_KEY_TENANT_STARTED, &call->ctx->tenant },
        { SMCP_KEY_SESSIONS, NULL },
        { SMCP_KEY_QUEUE, NULL },
        { SMCP_KEY_TENANT_SESSIONS, &call->ctx->tenant },
        { SMCP_CHAN_TENANT, &call->ctx->tenant },
        { SMCP_KEY_TENANT_USAGE, &call->ctx->tenant },
        { SMCP_KEY_EGRESS_ROUTES, NULL }
    };

    pool = call->ctx->request->pool;
    now = ngx_http_sandbox_mcp_now_ms();

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
    args[13] = ngx_http_sandbox_mcp_redis_number(pool, lcf->max_queued);
    args[14] = ngx_http_sandbox_mcp_redis_number(pool, lcf->max_running);
    args[15].data = t->cost_buf;
    args[15].len = ngx_http_sandbox_mcp_usd(t->cost_buf, t->max_cost)
                   - t->cost_buf;
    args[16] = ngx_http_sandbox_mcp_redis_number(pool, lcf->retention);
    args[17] = ngx_http_sandbox_mcp_redis_number(pool, lcf->session_idle);
    args[18] = ngx_http_sandbox_mcp_redis_number(pool,
                                      now + (int64_t) lcf->session_idle * 1000);

    /* no run older than this has keys left: its index entries go */
    args[19] = ngx_http_sandbox_mcp_redis_number(pool,
                   now - ((int64_t) lcf->retention + lcf->run_timeout_max)
                         * 1000);

    ngx_str_set(&args[20], SMCP_STATUS_STARTED);
    ngx_str_set(&args[21], SMCP_SESSION_EXPIRING);
    ngx_str_set(&args[22], SMCP_SESSION_EXPIRED);
    args[23] = t->base_branch;
    args[24] = t->pr_title;
    ngx_str_set(&args[25], "0");
    if (t->draft) {
        ngx_str_set(&args[25], "1");
    }
    args[26] = t->watch_base;
    args[27] = ngx_http_sandbox_mcp_redis_number(pool,
                                         NGX_HTTP_SANDBOX_MCP_SESSION_REPOS);

    /* a session idle longer than this expired and its keys are gone */
    args[28] = ngx_http_sandbox_mcp_redis_number(pool,
                   now - ((int64_t) lcf->retention + lcf->session_idle)
                         * 1000);
    args[29] = t->image;
    args[30] = t->grants;

    /* the tenant's budgets (docs/contracts.md, "Tenant budgets") */
    args[31] = ngx_http_sandbox_mcp_redis_number(pool, lcf->tenant_bytes);
    args[32] = ngx_http_sandbox_mcp_redis_number(pool, lcf->tenant_sessions);
    args[33] = ngx_http_sandbox_mcp_redis_number(pool, lcf->tenant_disk);

    /* the route its model is reached through (GitHub's: the script) */
    ngx_http_sandbox_mcp_model_route(&t->model, &args[34]);

    /* a fork: the session forked (run_create.lua) */
    nkeys = 13;
    if (t->fork.len) {
        keys[nkeys].fmt = SMCP_KEY_SESSION;
        keys[nkeys++].arg = &t->fork;
        keys[nkeys].fmt = SMCP_KEY_SESSION_ACTIVE;
        keys[nkeys++].arg = &t->fork;
        keys[nkeys].fmt = SMCP_KEY_SESSION_FORKS;
        keys[nkeys++].arg = &t->fork;
    }

    /* the MCP session that asks remembers the run: its GET stream logs
     * the run's lifecycle */
    if (call->ctx->session_id.len) {
        keys[nkeys].fmt = SMCP_KEY_MCP_RUNS;
        keys[nkeys++].arg = &call->ctx->session_id;
    }

    args[35] = ngx_http_sandbox_mcp_redis_number(pool, lcf->session_ttl);
    args[36] = ngx_http_sandbox_mcp_redis_number(pool,
                                       NGX_HTTP_SANDBOX_MCP_SESSION_RUNS_MAX);

    /* its completion notification ("": none), and how long the watch
     * link in it lives */
    args[37] = t->notify_url;
    args[38] = t->notify_format;
    args[39] = ngx_http_sandbox_mcp_redis_number(pool, lcf->ui_token_ttl);

    /* the session forked ("": none), how long its runs wait for the copy
     * at most */
    args[40] = t->fork;
    args[41] = ngx_http_sandbox_mcp_redis_number(pool,
                                          NGX_HTTP_SANDBOX_MCP_FORK_HOLD_MS);
    /* how many attempts; the agent named ("": the session's, else the
     * first offered), the agents offered with their models, whether the
     * call named its model */
    args[42] = ngx_http_sandbox_mcp_redis_number(pool,
                                 call->nattempts ? call->nattempts : 1);
    args[43] = t->agent;
    args[44] = lcf->agents_argv;
    ngx_str_set(&args[45], "0");
    if (t->model_named) {
        ngx_str_set(&args[45], "1");
    }
    nargs = 46;

    /* each attempt after the first: its ids and run page, its keys after
     * all the others */
    if (call->nattempts > 1) {
        for (i = 1; i < call->nattempts; i++) {
            id = &call->attempts[2 * i];
            args[nargs++] = id[0];
            args[nargs++] = id[1];

            if (ngx_http_sandbox_mcp_run_page(call, &id[0], 0,
                                              &args[nargs++])
                != NGX_OK)
            {
                ngx_http_sandbox_mcp_tool_unavailable(call);
                return;
            }

            keys[nkeys].fmt = SMCP_KEY_RUN;
            keys[nkeys++].arg = &id[0];
            keys[nkeys].fmt = SMCP_KEY_RUN_EVENTS;
            keys[nkeys++].arg = &id[0];
            keys[nkeys].fmt = SMCP_KEY_SESSION;
            keys[nkeys++].arg = &id[1];
            keys[nkeys].fmt = SMCP_KEY_SESSION_RUNS;
            keys[nkeys++].arg = &id[1];
            keys[nkeys].fmt = SMCP_KEY_SESSION_ACTIVE;
            keys[nkeys++].arg = &id[1];
        }
    }

    ngx_http_sandbox_mcp_call_script(call,
                                     &ngx_http_sandbox_mcp_script_run_create,
                                     ngx_http_sandbox_mcp_run_created,
                                     keys, nkeys, args, nargs);
}


/* every check before anything is written: the script checks the rest */
void
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

    if (ngx_http_sandbox_mcp_task_grants(call, &t.grants) != NGX_OK
        || ngx_http_sandbox_mcp_task_ids(call, &t) != NGX_OK
        || ngx_http_sandbox_mcp_run_page(call, &call->run_id, 0,
                                         &t.watch_base)
           != NGX_OK)
    {
        ngx_http_sandbox_mcp_tool_unavailable(call);
        return;
    }

    ngx_http_sandbox_mcp_task_send(call, lcf, &t);
}
