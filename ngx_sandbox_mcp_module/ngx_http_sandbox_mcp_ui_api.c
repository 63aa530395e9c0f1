/*
 * The dashboard's JSON, answered by the tools themselves: the request's
 * context holds one call of the tool (its arguments from the address,
 * checked by the tool's schema like any client's), and the context's
 * finish hook turns the tool's answer into the dashboard's: the
 * structuredContent with 200, a tool error with 400 (404 for an unknown
 * run, or another tenant's), Redis away with 503.
 */

#include "ngx_http_sandbox_mcp_ui_api.h"
#include "ngx_http_sandbox_mcp_defaults.h"
#include "ngx_http_sandbox_mcp_http.h"
#include "ngx_http_sandbox_mcp_tools.h"
#include "ngx_http_sandbox_mcp_ui_http.h"


#define NGX_HTTP_SANDBOX_MCP_UI_SESSION_RUNS  100   /* listed at most */


typedef enum {
    NGX_HTTP_SANDBOX_MCP_UI_API_PLAIN = 0,  /* the tool's answer as it is */
    NGX_HTTP_SANDBOX_MCP_UI_API_RUN,        /* get_result, then the session */
    NGX_HTTP_SANDBOX_MCP_UI_API_SESSION     /* list_runs of the session */
} ngx_http_sandbox_mcp_ui_api_step_e;


typedef struct {
    ngx_http_sandbox_mcp_ui_api_step_e    step;
    json_t                               *run;      /* step RUN's answer */
    ngx_uint_t                            tenant_rights;
} ngx_http_sandbox_mcp_ui_api_t;


static ngx_int_t ngx_http_sandbox_mcp_ui_api_finish(
    ngx_http_sandbox_mcp_ctx_t *ctx);


static void
ngx_http_sandbox_mcp_ui_api_cleanup(void *data)
{
    ngx_http_sandbox_mcp_ui_api_t *api = data;

    if (api->run) {
        json_decref(api->run);
        api->run = NULL;
    }
}


/*
 * Starts the tool's call (args: stolen).  Returns the dashboard's answer
 * when the call ended at once, else NGX_DONE (the finish hook answers).
 */
static ngx_int_t
ngx_http_sandbox_mcp_ui_api_call(ngx_http_sandbox_mcp_ctx_t *ctx,
    const char *tool, json_t *args)
{
    json_t                       *params;
    ngx_http_request_t           *r;
    ngx_http_sandbox_mcp_call_t  *call;

    r = ctx->request;

    params = args ? json_pack("{s:s, s:o}", "name", tool, "arguments", args)
                  : NULL;

    if (params == NULL
        || ngx_http_sandbox_mcp_add_cleanup(r, params, params) != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    call = ngx_pcalloc(r->pool, sizeof(ngx_http_sandbox_mcp_call_t));
    if (call == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    call->ctx = ctx;
    call->id = json_null();
    call->pending = 1;
    ngx_queue_init(&call->waiter);

    ctx->calls = call;
    ctx->ncalls = 1;
    ctx->finish = ngx_http_sandbox_mcp_ui_api_finish;
    ctx->dashboard = 1;

    /* held while starting: an answer at once must not finalize */
    ctx->pending = 2;

    ngx_http_sandbox_mcp_tools_call(call, params);

    if (--ctx->pending) {
        return NGX_DONE;
    }

    return ngx_http_sandbox_mcp_ui_api_finish(ctx);
}


/* the call's answer: its structuredContent (a new reference), or NULL
 * with *status and *message set */
static json_t *
ngx_http_sandbox_mcp_ui_api_result(ngx_http_sandbox_mcp_ctx_t *ctx,
    ngx_uint_t *status, const char **message)
{
    json_t       *res, *out, *text;
    const char   *s;

    res = ctx->calls[0].response;

    *status = NGX_HTTP_INTERNAL_SERVER_ERROR;
    *message = "internal error";

    if (res == NULL) {
        return NULL;
    }

    if (json_object_get(res, "error")) {
        if (ctx->status == NGX_HTTP_SERVICE_UNAVAILABLE) {
            *status = NGX_HTTP_SERVICE_UNAVAILABLE;
            *message = "storage unavailable: try again in a moment";
        }

        return NULL;
    }

    res = json_object_get(res, "result");
    out = json_object_get(res, "structuredContent");

    if (out && !json_is_true(json_object_get(res, "isError"))) {
        return json_incref(out);
    }

    text = json_object_get(json_array_get(json_object_get(res, "content"),
                                          0), "text");
    s = json_string_value(text);

    *status = NGX_HTTP_BAD_REQUEST;
    *message = s ? s : "bad request";

    if (s && ngx_strncmp(s, "Run not found", 13) == 0) {
        *status = NGX_HTTP_NOT_FOUND;
        *message = "run not found";
    }

    return NULL;
}


/* the run's session's other runs: [{runId, status, title, createdAt}] */
static json_t *
ngx_http_sandbox_mcp_ui_api_session_runs(json_t *list, json_t *run)
{
    size_t       i;
    json_t      *out, *e;
    const char  *id, *s;

    out = json_array();
    id = json_string_value(json_object_get(run, "runId"));

    json_array_foreach(json_object_get(list, "runs"), i, e) {
        s = json_string_value(json_object_get(e, "runId"));

        if (s == NULL || (id && ngx_strcmp(s, id) == 0)) {
            continue;
        }

        json_array_append_new(out, json_pack("{s:O?, s:O?, s:O?, s:O?}",
                                    "runId", json_object_get(e, "runId"),
                                    "status", json_object_get(e, "status"),
                                    "title", json_object_get(e, "title"),
                                    "createdAt",
                                    json_object_get(e, "createdAt")));
    }

    return out;
}


/*
 * A run link's view of the run's attempts (opencode_run_task attempts):
 * each one's number and status, nothing more (no link, no session, no
 * words of its agent): the link opens its run only.
 */
static void
ngx_http_sandbox_mcp_ui_api_attempts(json_t *run)
{
    size_t   i;
    json_t  *list, *a, *e;

    list = json_object_get(run, "attempts");

    if (!json_is_array(list)) {
        return;
    }

    a = json_array();

    json_array_foreach(list, i, e) {
        json_array_append_new(a, json_pack("{s:O?, s:O?, s:O?}",
                                  "runId", json_object_get(e, "runId"),
                                  "attempt", json_object_get(e, "attempt"),
                                  "status", json_object_get(e, "status")));
    }

    json_object_set_new(run, "attempts", a);
}


static ngx_int_t
ngx_http_sandbox_mcp_ui_api_finish(ngx_http_sandbox_mcp_ctx_t *ctx)
{
    json_t                         *out, *args, *list;
    ngx_int_t                       rc;
    ngx_uint_t                      status;
    const char                     *message, *session;
    ngx_http_sandbox_mcp_ui_api_t  *api;

    api = ctx->data;

    /* the message is the answer's: sent before the answer is released */
    out = ngx_http_sandbox_mcp_ui_api_result(ctx, &status, &message);

    if (api == NULL || api->step == NGX_HTTP_SANDBOX_MCP_UI_API_PLAIN
        || (out == NULL && api->step == NGX_HTTP_SANDBOX_MCP_UI_API_RUN))
    {
        rc = ngx_http_sandbox_mcp_ui_send_json(ctx->request,
                                               out ? NGX_HTTP_OK : status,
                                               out, message);
        json_decref(out);
        return rc;
    }

    json_decref(ctx->calls[0].response);
    ctx->calls[0].response = NULL;

    if (api->step == NGX_HTTP_SANDBOX_MCP_UI_API_RUN) {

        api->run = out;

        if (json_object_set_new(out, "access",
                                json_string(api->tenant_rights ? "tenant"
                                                               : "run"))
            != 0)
        {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        if (!api->tenant_rights) {
            /*
             * A watchUrl's token opens its run only: the session's other
             * runs are not read.  Reading them would widen one leaked
             * link to every run of the session, later ones too, for the
             * link's lifetime (sandbox_mcp_ui_token_ttl); and their pages
             * would not open with it anyway (its cookie's path is this
             * run's page).  Of the run's other attempts, as little.
             */
            ngx_http_sandbox_mcp_ui_api_attempts(out);

            return ngx_http_sandbox_mcp_ui_send_json(ctx->request,
                                                     NGX_HTTP_OK, api->run,
                                                     NULL);
        }

        session = json_string_value(json_object_get(out, "sessionId"));

        if (session && *session) {
            api->step = NGX_HTTP_SANDBOX_MCP_UI_API_SESSION;
            args = json_pack("{s:s, s:i}", "sessionId", session, "limit",
                             NGX_HTTP_SANDBOX_MCP_UI_SESSION_RUNS);

            return ngx_http_sandbox_mcp_ui_api_call(ctx,
                                                    "opencode_list_runs",
                                                    args);
        }

        list = NULL;

    } else {
        /* the session's list: best effort, the run is what was asked */
        list = out;
    }

    json_object_set_new(api->run, "sessionRuns",
                        ngx_http_sandbox_mcp_ui_api_session_runs(list,
                                                                 api->run));
    json_decref(list);

    return ngx_http_sandbox_mcp_ui_send_json(ctx->request, NGX_HTTP_OK,
                                             api->run, NULL);
}


/* an argument from the address (?name=), unescaped, as a JSON string or
 * (number) integer; nothing when absent */
static ngx_int_t
ngx_http_sandbox_mcp_ui_api_arg(ngx_http_request_t *r, json_t *args,
    const char *name, ngx_uint_t number)
{
    u_char     *dst, *src;
    json_t     *v;
    ngx_str_t   raw;
    ngx_int_t   n;

    if (ngx_http_arg(r, (u_char *) name, ngx_strlen(name), &raw) != NGX_OK)
    {
        return NGX_OK;
    }

    dst = ngx_pnalloc(r->pool, raw.len + 1);
    if (dst == NULL) {
        return NGX_ERROR;
    }

    src = raw.data;
    raw.data = dst;
    ngx_unescape_uri(&dst, &src, raw.len, 0);
    raw.len = dst - raw.data;

    n = number ? ngx_atoi(raw.data, raw.len) : NGX_ERROR;

    /* not a number: the tool's schema refuses it with its message; bytes
     * that are not UTF-8 are refused here */
    v = (n != NGX_ERROR) ? json_integer(n)
                         : json_stringn((char *) raw.data, raw.len);

    if (v == NULL) {
        return NGX_DECLINED;
    }

    if (v == NULL || json_object_set_new(args, name, v) != 0) {
        return NGX_ERROR;
    }

    return NGX_OK;
}


/* the tool called with args (stolen) and the address's arguments of
 * those names ("#name": a number) */
static ngx_int_t
ngx_http_sandbox_mcp_ui_api_query(ngx_http_sandbox_mcp_ctx_t *ctx,
    const char *tool, json_t *args, const char **names)
{
    ngx_int_t  rc;

    rc = args ? NGX_OK : NGX_ERROR;

    for ( /* void */ ; rc == NGX_OK && *names; names++) {
        rc = ngx_http_sandbox_mcp_ui_api_arg(ctx->request, args,
                                             *names + (**names == '#'),
                                             **names == '#');
    }

    if (rc == NGX_OK) {
        return ngx_http_sandbox_mcp_ui_api_call(ctx, tool, args);
    }

    json_decref(args);

    if (rc == NGX_DECLINED) {
        return ngx_http_sandbox_mcp_ui_send_json(ctx->request,
                                                 NGX_HTTP_BAD_REQUEST, NULL,
                                                 "an argument is not UTF-8");
    }

    return NGX_HTTP_INTERNAL_SERVER_ERROR;
}


static json_t *
ngx_http_sandbox_mcp_ui_api_run_args(ngx_str_t *run_id)
{
    return json_pack("{s:s%}", "runId", (char *) run_id->data, run_id->len);
}


static ngx_http_sandbox_mcp_ui_api_t *
ngx_http_sandbox_mcp_ui_api_create(ngx_http_sandbox_mcp_ctx_t *ctx,
    ngx_http_sandbox_mcp_ui_api_step_e step)
{
    ngx_pool_cleanup_t             *cln;
    ngx_http_sandbox_mcp_ui_api_t  *api;

    api = ngx_pcalloc(ctx->request->pool,
                      sizeof(ngx_http_sandbox_mcp_ui_api_t));
    if (api == NULL) {
        return NULL;
    }

    cln = ngx_pool_cleanup_add(ctx->request->pool, 0);
    if (cln == NULL) {
        return NULL;
    }

    cln->handler = ngx_http_sandbox_mcp_ui_api_cleanup;
    cln->data = api;

    api->step = step;
    ctx->data = api;

    return api;
}


ngx_int_t
ngx_http_sandbox_mcp_ui_run_data(ngx_http_sandbox_mcp_ctx_t *ctx,
    ngx_str_t *run_id, ngx_uint_t tenant_rights)
{
    ngx_http_sandbox_mcp_ui_api_t  *api;

    api = ngx_http_sandbox_mcp_ui_api_create(ctx,
                                             NGX_HTTP_SANDBOX_MCP_UI_API_RUN);
    if (api == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    api->tenant_rights = tenant_rights;

    return ngx_http_sandbox_mcp_ui_api_call(ctx, "opencode_get_result",
                                 ngx_http_sandbox_mcp_ui_api_run_args(run_id));
}


ngx_int_t
ngx_http_sandbox_mcp_ui_run_diff(ngx_http_sandbox_mcp_ctx_t *ctx,
    ngx_str_t *run_id)
{
    static const char  *names[] = { "cursor", "path", NULL };

    return ngx_http_sandbox_mcp_ui_api_query(ctx, "opencode_get_diff",
                                 ngx_http_sandbox_mcp_ui_api_run_args(run_id),
                                 names);
}


ngx_int_t
ngx_http_sandbox_mcp_ui_run_cancel(ngx_http_sandbox_mcp_ctx_t *ctx,
    ngx_str_t *run_id)
{
    return ngx_http_sandbox_mcp_ui_api_call(ctx, "opencode_cancel_run",
                                 ngx_http_sandbox_mcp_ui_api_run_args(run_id));
}


/*
 * The body read, a JSON object (duplicate members refused): *json (the
 * caller's), else *json NULL and the answer's code (413 saying too_long;
 * 400 saying what the body is, shape).
 */
static ngx_int_t
ngx_http_sandbox_mcp_ui_api_body(ngx_http_sandbox_mcp_ctx_t *ctx,
    json_t **json, const char *too_long, const char *shape)
{
    ngx_int_t      rc;
    ngx_str_t      raw;
    json_error_t   err;

    *json = NULL;

    rc = ngx_http_sandbox_mcp_read_body(ctx->request, &raw,
                                        NGX_HTTP_SANDBOX_MCP_UI_BODY_MAX);

    if (rc == NGX_ERROR) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (rc != NGX_OK) {
        return ngx_http_sandbox_mcp_ui_send_json(ctx->request,
                                  NGX_HTTP_REQUEST_ENTITY_TOO_LARGE, NULL,
                                  too_long);
    }

    *json = json_loadb((char *) raw.data, raw.len, JSON_REJECT_DUPLICATES,
                       &err);

    if (!json_is_object(*json)) {
        json_decref(*json);
        *json = NULL;
        return ngx_http_sandbox_mcp_ui_send_json(ctx->request,
                                  NGX_HTTP_BAD_REQUEST, NULL, shape);
    }

    return NGX_OK;
}


/* the body read: {"message": TEXT}, the tool checks TEXT */
ngx_int_t
ngx_http_sandbox_mcp_ui_run_message(ngx_http_sandbox_mcp_ctx_t *ctx,
    ngx_str_t *run_id)
{
    json_t     *body, *args, *text;
    ngx_int_t   rc;

    rc = ngx_http_sandbox_mcp_ui_api_body(ctx, &body,
                                          "the message is too long",
                                          "the body is {\"message\": \"...\"}");
    if (body == NULL) {
        return rc;
    }

    text = json_object_get(body, "message");

    if (!json_is_string(text) || json_object_size(body) != 1) {
        json_decref(body);
        return ngx_http_sandbox_mcp_ui_send_json(ctx->request,
                                  NGX_HTTP_BAD_REQUEST, NULL,
                                  "the body is {\"message\": \"...\"}");
    }

    args = ngx_http_sandbox_mcp_ui_api_run_args(run_id);

    if (args == NULL
        || json_object_set(args, "message", text) != 0)
    {
        json_decref(args);
        json_decref(body);
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    json_decref(body);

    return ngx_http_sandbox_mcp_ui_api_call(ctx, "opencode_send_message",
                                            args);
}


/*
 * The request goes on with the configuration of its server's first
 * sandbox_mcp location (the MCP endpoint's: its defaults, images, quotas
 * and budgets), as an internal redirect to a named location does: a run
 * started here is checked as one started through MCP.  NGX_DECLINED: the
 * server has none.
 */
static ngx_int_t
ngx_http_sandbox_mcp_ui_mcp_conf(ngx_http_request_t *r)
{
    void                              *server;
    ngx_uint_t                         i;
    ngx_http_sandbox_mcp_at_t         *at;
    ngx_http_sandbox_mcp_main_conf_t  *mcf;

    mcf = ngx_http_get_module_main_conf(r, ngx_http_sandbox_mcp_module);
    server = ngx_http_get_module_srv_conf(r, ngx_http_core_module);

    if (mcf->mcp_locations == NULL) {
        return NGX_DECLINED;
    }

    at = mcf->mcp_locations->elts;

    for (i = 0; i < mcf->mcp_locations->nelts; i++) {
        if (at[i].server == server) {
            r->loc_conf = at[i].loc_conf;
            ngx_http_update_location_config(r);
            return NGX_OK;
        }
    }

    return NGX_DECLINED;
}


/*
 * The body read: opencode_run_task's arguments, a JSON object the tool
 * checks as it checks a client's (its schema, the token's grants, the
 * tenant's quotas, with the MCP endpoint's settings): a new run, or a
 * session's follow-up with sessionId.
 */
ngx_int_t
ngx_http_sandbox_mcp_ui_run_start(ngx_http_sandbox_mcp_ctx_t *ctx)
{
    json_t     *args;
    ngx_int_t   rc;

    rc = ngx_http_sandbox_mcp_ui_api_body(ctx, &args,
                                  "the run's arguments are too long "
                                  "(64 KiB at most)",
                                  "the body is opencode_run_task's "
                                  "arguments: {\"task\": \"...\", ...}");
    if (args == NULL) {
        return rc;
    }

    if (ngx_http_sandbox_mcp_ui_mcp_conf(ctx->request) != NGX_OK) {
        json_decref(args);
        return ngx_http_sandbox_mcp_ui_send_json(ctx->request,
                                  NGX_HTTP_FORBIDDEN, NULL,
                                  "this server has no MCP endpoint (a "
                                  "location of sandbox_mcp), whose settings "
                                  "a run from the dashboard takes");
    }

    return ngx_http_sandbox_mcp_ui_api_call(ctx, "opencode_run_task", args);
}


/* the repositories the tenant's link grants (its "repos" claim, as the
 * tool compares them) and the base of a repository's URL on the git host
 * the MCP endpoint names: what the new run form offers
 * ({"repositories": [...], "repositoryBase": "https://github.com/"}) */
ngx_int_t
ngx_http_sandbox_mcp_ui_grants(ngx_http_sandbox_mcp_ctx_t *ctx)
{
    u_char                           *p;
    json_t                           *out, *list;
    ngx_int_t                         rc;
    ngx_str_t                        *g, host;
    ngx_uint_t                        i;
    ngx_http_sandbox_mcp_loc_conf_t  *lcf;
    u_char                            base[sizeof("https:///") + 256];

    rc = ngx_http_discard_request_body(ctx->request);
    if (rc != NGX_OK) {
        return rc;
    }

    ngx_str_set(&host, "github.com");

    if (ngx_http_sandbox_mcp_ui_mcp_conf(ctx->request) == NGX_OK) {
        lcf = ngx_http_get_module_loc_conf(ctx->request,
                                           ngx_http_sandbox_mcp_module);
        if (lcf->github_host.len) {
            host = lcf->github_host;
        }
    }

    if (host.len > 256) {
        ngx_str_set(&host, "github.com");
    }

    p = ngx_sprintf(base, "https://%V/", &host);

    list = json_array();
    out = list ? json_pack("{s:o, s:s%}", "repositories", list,
                           "repositoryBase", (char *) base,
                           (size_t) (p - base))
               : NULL;

    if (out == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    g = ctx->repos ? ctx->repos->elts : NULL;

    for (i = 0; ctx->repos && i < ctx->repos->nelts; i++) {
        if (json_array_append_new(list, json_stringn((char *) g[i].data,
                                                     g[i].len))
            != 0)
        {
            json_decref(out);
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }
    }

    rc = ngx_http_sandbox_mcp_ui_send_json(ctx->request, NGX_HTTP_OK, out,
                                           NULL);
    json_decref(out);

    return rc;
}


ngx_int_t
ngx_http_sandbox_mcp_ui_runs(ngx_http_sandbox_mcp_ctx_t *ctx)
{
    static const char  *names[] = { "status", "cursor", "#limit", NULL };

    return ngx_http_sandbox_mcp_ui_api_query(ctx, "opencode_list_runs",
                                             json_object(), names);
}
