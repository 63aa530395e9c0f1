/*
 * The dashboard: routes relative to the location's prefix P, the pages and
 * assets of ui/ (embedded at build by smcp-embed: a file the build cannot
 * read, or one of an unknown type, stops it).  The pages are static;
 * their scripts read the run id from the address and fetch the JSON and
 * streams below (ui_api, ui_sse).
 *
 *   P                       the run list (tenant)
 *   P static/NAME           an asset (no token); also P runs/static/NAME
 *   P runs/{id}             the run page (the run's token or the tenant's)
 *   P runs/{id}/data        JSON: the run, and the other runs of its session
 *   P runs/{id}/diff        JSON: its diff (?cursor=, ?path=)
 *   P runs/{id}/events      SSE: its events
 *   P runs/{id}/cancel      POST: cancel it (same origin, X-SMCP-CSRF)
 *   P runs/{id}/message     POST {"message": TEXT}: tell its running agent
 *                           (opencode_send_message; same origin,
 *                           X-SMCP-CSRF; the tenant's link, not a
 *                           watchUrl's)
 *   P api/runs              JSON: the tenant's runs (?status= ?cursor=
 *                           ?limit=); POST {opencode_run_task's
 *                           arguments}: start a run, a session's
 *                           follow-up with sessionId (same origin,
 *                           X-SMCP-CSRF; the tenant's link)
 *   P api/grants            JSON: the repositories the tenant's link
 *                           grants ({"repositories": [...]}, its "repos"
 *                           claim): what the new run form offers
 *   P api/stream            SSE: the tenant's status changes
 */

#include "ngx_http_sandbox_mcp_ui.h"
#include "ngx_http_sandbox_mcp_defaults.h"
#include "ngx_http_sandbox_mcp_request.h"
#include "ngx_http_sandbox_mcp_revoked.h"
#include "ngx_http_sandbox_mcp_http.h"
#include "ngx_http_sandbox_mcp_ui_api.h"
#include "ngx_http_sandbox_mcp_ui_auth.h"
#include "ngx_http_sandbox_mcp_ui_sse.h"
#include "ngx_http_sandbox_mcp_ui_http.h"

#include "ngx_http_sandbox_mcp_ui_files.h"


typedef enum {
    NGX_HTTP_SANDBOX_MCP_UI_LIST = 0,
    NGX_HTTP_SANDBOX_MCP_UI_ASSET,
    NGX_HTTP_SANDBOX_MCP_UI_RUN,
    NGX_HTTP_SANDBOX_MCP_UI_DATA,
    NGX_HTTP_SANDBOX_MCP_UI_DIFF,
    NGX_HTTP_SANDBOX_MCP_UI_EVENTS,
    NGX_HTTP_SANDBOX_MCP_UI_CANCEL,
    NGX_HTTP_SANDBOX_MCP_UI_MESSAGE,
    NGX_HTTP_SANDBOX_MCP_UI_RUNS,
    NGX_HTTP_SANDBOX_MCP_UI_STREAM,
    NGX_HTTP_SANDBOX_MCP_UI_START,
    NGX_HTTP_SANDBOX_MCP_UI_GRANTS,
    NGX_HTTP_SANDBOX_MCP_UI_NONE
} ngx_http_sandbox_mcp_ui_route_e;


/* the 401 of the JSON and stream routes, which the pages show: what to do
 * (ui/denied.html says the same for the pages) */
#define NGX_HTTP_SANDBOX_MCP_UI_DENIED                                        \
    "This link is not valid: it has expired, was changed, or does not open "  \
    "this page (a run's link opens that run only). For a new link to a run, " \
    "ask the assistant for the run's watchUrl again (opencode_get_result "    \
    "returns it); for the list of all runs, run "                             \
    "`make token SUB=<tenant> UI=1` on the server."


/* a dashboard request on its way to its route */
typedef struct {
    ngx_http_sandbox_mcp_ctx_t         *ctx;
    ngx_http_sandbox_mcp_ui_route_e     route;
    ngx_str_t                           run_id;     /* empty: none */
    ngx_str_t                           token;      /* ?token= */
    ngx_str_t                           prefix;     /* the location */
    unsigned                            token_page:1;   /* ?token= sent */
} ngx_http_sandbox_mcp_ui_req_t;


static ngx_int_t ngx_http_sandbox_mcp_ui_ask(
    ngx_http_sandbox_mcp_ui_req_t *u);
static ngx_int_t ngx_http_sandbox_mcp_ui_go(ngx_http_sandbox_mcp_ui_req_t *u);
static ngx_int_t ngx_http_sandbox_mcp_ui_read(ngx_http_request_t *r,
    ngx_http_sandbox_mcp_ui_req_t *u);
static void ngx_http_sandbox_mcp_ui_body(ngx_http_request_t *r);


static const smcp_ui_file_t *
ngx_http_sandbox_mcp_ui_file(u_char *path, size_t len)
{
    ngx_uint_t  i;

    for (i = 0; i < SMCP_UI_NFILES; i++) {
        if (ngx_strlen(smcp_ui_files[i].path) == len
            && ngx_strncmp(smcp_ui_files[i].path, path, len) == 0)
        {
            return &smcp_ui_files[i];
        }
    }

    return NULL;
}


/* an embedded file: pages no-store, assets revalidated by their ETag */
static ngx_int_t
ngx_http_sandbox_mcp_ui_send_file(ngx_http_request_t *r, ngx_uint_t status,
    const smcp_ui_file_t *f, ngx_uint_t page)
{
    ngx_int_t         rc;
    ngx_str_t         etag;
    ngx_table_elt_t  *inm;

    static ngx_str_t  no_cache = ngx_string("no-cache");

    rc = ngx_http_discard_request_body(r);
    if (rc != NGX_OK) {
        return rc;
    }

    if (ngx_http_sandbox_mcp_ui_headers(r, page) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (!page) {
        etag.data = (u_char *) f->etag;
        etag.len = ngx_strlen(f->etag);

        if (ngx_http_sandbox_mcp_add_header(r, "ETag", &etag) != NGX_OK
            || ngx_http_sandbox_mcp_add_header(r, "Cache-Control", &no_cache)
               != NGX_OK)
        {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        inm = ngx_http_sandbox_mcp_header(r, "If-None-Match",
                                          sizeof("If-None-Match") - 1);

        if (inm && inm->value.len == etag.len
            && ngx_strncmp(inm->value.data, etag.data, etag.len) == 0)
        {
            r->headers_out.status = NGX_HTTP_NOT_MODIFIED;
            r->header_only = 1;
            return ngx_http_send_header(r);
        }
    }

    return ngx_http_sandbox_mcp_send_body(r, status, f->type,
                                          (u_char *) f->data, f->len);
}


static ngx_int_t
ngx_http_sandbox_mcp_ui_page(ngx_http_request_t *r, ngx_uint_t status,
    const char *name)
{
    const smcp_ui_file_t  *f;

    f = ngx_http_sandbox_mcp_ui_file((u_char *) name, ngx_strlen(name));
    if (f == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    return ngx_http_sandbox_mcp_ui_send_file(r, status, f, 1);
}


ngx_int_t
ngx_http_sandbox_mcp_ui_denied(ngx_http_request_t *r)
{
    return ngx_http_sandbox_mcp_ui_page(r, NGX_HTTP_UNAUTHORIZED,
                                        "denied.html");
}


/* the route of the address under the prefix; run_id and name set */
static ngx_http_sandbox_mcp_ui_route_e
ngx_http_sandbox_mcp_ui_route(ngx_str_t *rel, ngx_str_t *run_id,
    ngx_str_t *name)
{
    u_char  *p, *last, *slash;

    static const struct {
        const char                       *suffix;
        ngx_http_sandbox_mcp_ui_route_e   route;
    } sub[] = {
        { "", NGX_HTTP_SANDBOX_MCP_UI_RUN },
        { "/data", NGX_HTTP_SANDBOX_MCP_UI_DATA },
        { "/diff", NGX_HTTP_SANDBOX_MCP_UI_DIFF },
        { "/events", NGX_HTTP_SANDBOX_MCP_UI_EVENTS },
        { "/cancel", NGX_HTTP_SANDBOX_MCP_UI_CANCEL },
        { "/message", NGX_HTTP_SANDBOX_MCP_UI_MESSAGE }
    };

    ngx_uint_t  i;

    p = rel->data;
    last = p + rel->len;

    if (rel->len == 0) {
        return NGX_HTTP_SANDBOX_MCP_UI_LIST;
    }

    if (rel->len == sizeof("api/runs") - 1
        && ngx_strncmp(p, "api/runs", rel->len) == 0)
    {
        return NGX_HTTP_SANDBOX_MCP_UI_RUNS;
    }

    if (rel->len == sizeof("api/stream") - 1
        && ngx_strncmp(p, "api/stream", rel->len) == 0)
    {
        return NGX_HTTP_SANDBOX_MCP_UI_STREAM;
    }

    if (rel->len == sizeof("api/grants") - 1
        && ngx_strncmp(p, "api/grants", rel->len) == 0)
    {
        return NGX_HTTP_SANDBOX_MCP_UI_GRANTS;
    }

    if (rel->len > 5 && ngx_strncmp(p, "runs/", 5) == 0) {
        p += 5;
    }

    if (last - p > 7 && ngx_strncmp(p, "static/", 7) == 0) {
        name->data = p;
        name->len = last - p;
        return NGX_HTTP_SANDBOX_MCP_UI_ASSET;
    }

    if (p == rel->data) {
        return NGX_HTTP_SANDBOX_MCP_UI_NONE;
    }

    slash = ngx_strlchr(p, last, '/');

    run_id->data = p;
    run_id->len = (slash ? slash : last) - p;

    if (!smcp_valid_id((char *) run_id->data, run_id->len,
                       SMCP_RUN_ID_PREFIX))
    {
        return NGX_HTTP_SANDBOX_MCP_UI_NONE;
    }

    p += run_id->len;

    for (i = 0; i < sizeof(sub) / sizeof(sub[0]); i++) {
        if ((size_t) (last - p) == ngx_strlen(sub[i].suffix)
            && ngx_strncmp(p, sub[i].suffix, last - p) == 0)
        {
            return sub[i].route;
        }
    }

    return NGX_HTTP_SANDBOX_MCP_UI_NONE;
}


/*
 * POST cancel, message and a new run: from the dashboard's own pages
 * only.  Origin, when sent, must be this server's (scheme://Host, or
 * sandbox_mcp_public_url); without it, Sec-Fetch-Site must say
 * same-origin; and the header
 * X-SMCP-CSRF: 1, which a form or a simple cross-site request cannot set.
 */
static ngx_uint_t
ngx_http_sandbox_mcp_ui_same_origin(ngx_http_request_t *r)
{
    u_char                           *p;
    size_t                            len;
    ngx_table_elt_t                  *h;
    ngx_http_sandbox_mcp_loc_conf_t  *lcf;
    u_char                            buf[512];

    lcf = ngx_http_get_module_loc_conf(r, ngx_http_sandbox_mcp_module);

    h = ngx_http_sandbox_mcp_header(r, "X-SMCP-CSRF",
                                    sizeof("X-SMCP-CSRF") - 1);
    if (h == NULL || h->value.len != 1 || h->value.data[0] != '1') {
        return 0;
    }

    h = ngx_http_sandbox_mcp_header(r, "Origin", sizeof("Origin") - 1);

    if (h == NULL) {
        h = ngx_http_sandbox_mcp_header(r, "Sec-Fetch-Site",
                                        sizeof("Sec-Fetch-Site") - 1);

        return h && h->value.len == sizeof("same-origin") - 1
               && ngx_strncmp(h->value.data, "same-origin", h->value.len)
                  == 0;
    }

    if (lcf->public_url.len) {
        /* scheme://host[:port] of the configured address */
        p = ngx_strlchr(lcf->public_url.data + 8,
                        lcf->public_url.data + lcf->public_url.len, '/');
        len = (p ? p : lcf->public_url.data + lcf->public_url.len)
              - lcf->public_url.data;

        if (h->value.len == len
            && ngx_strncasecmp(h->value.data, lcf->public_url.data, len)
               == 0)
        {
            return 1;
        }
    }

    if (r->headers_in.host == NULL
        || r->headers_in.host->value.len > sizeof(buf) - sizeof("https://"))
    {
        return 0;
    }

    p = ngx_sprintf(buf, "%s://%V",
#if (NGX_HTTP_SSL)
                    r->connection->ssl ? "https" :
#endif
                    "http", &r->headers_in.host->value);

    return h->value.len == (size_t) (p - buf)
           && ngx_strncasecmp(h->value.data, buf, p - buf) == 0;
}


/* the page asked with ?token=: moved into a cookie (303) or refused */
static ngx_int_t
ngx_http_sandbox_mcp_ui_token_page(ngx_http_request_t *r,
    ngx_http_sandbox_mcp_ctx_t *ctx, ngx_str_t *token, ngx_str_t *prefix,
    ngx_str_t *run_id)
{
    ngx_int_t  rc;

    rc = ngx_http_sandbox_mcp_ui_token(r, ctx, token, prefix, run_id);

    switch (rc) {

    case NGX_OK:
        if (ngx_http_sandbox_mcp_ui_headers(r, 1) != NGX_OK) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        r->headers_out.status = NGX_HTTP_SEE_OTHER;
        r->headers_out.content_length_n = 0;
        r->header_only = 1;

        rc = ngx_http_discard_request_body(r);
        if (rc != NGX_OK) {
            return rc;
        }

        return ngx_http_send_header(r);

    case NGX_DECLINED:
        return ngx_http_sandbox_mcp_ui_denied(r);

    case NGX_AGAIN:
        /* only Redis can tell whether the token is revoked */
        return NGX_AGAIN;

    default:
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }
}


/* the authorized request, by route */
static ngx_int_t
ngx_http_sandbox_mcp_ui_serve(ngx_http_request_t *r,
    ngx_http_sandbox_mcp_ctx_t *ctx, ngx_http_sandbox_mcp_ui_route_e route,
    ngx_str_t *run_id, ngx_uint_t tenant_rights)
{
    switch (route) {

    case NGX_HTTP_SANDBOX_MCP_UI_LIST:
        return ngx_http_sandbox_mcp_ui_page(r, NGX_HTTP_OK, "runs.html");

    case NGX_HTTP_SANDBOX_MCP_UI_RUN:
        return ngx_http_sandbox_mcp_ui_page(r, NGX_HTTP_OK, "run.html");

    case NGX_HTTP_SANDBOX_MCP_UI_DATA:
        return ngx_http_sandbox_mcp_ui_run_data(ctx, run_id, tenant_rights);

    case NGX_HTTP_SANDBOX_MCP_UI_DIFF:
        return ngx_http_sandbox_mcp_ui_run_diff(ctx, run_id);

    case NGX_HTTP_SANDBOX_MCP_UI_CANCEL:
        if (!ngx_http_sandbox_mcp_ui_same_origin(r)) {
            return ngx_http_sandbox_mcp_ui_send_json(r, NGX_HTTP_FORBIDDEN,
                                  NULL, "cancel needs a same-origin request "
                                  "with the header X-SMCP-CSRF: 1");
        }

        if (ngx_http_discard_request_body(r) != NGX_OK) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        return ngx_http_sandbox_mcp_ui_run_cancel(ctx, run_id);

    case NGX_HTTP_SANDBOX_MCP_UI_MESSAGE:
        if (!ngx_http_sandbox_mcp_ui_same_origin(r)) {
            return ngx_http_sandbox_mcp_ui_send_json(r, NGX_HTTP_FORBIDDEN,
                                  NULL, "a message needs a same-origin "
                                  "request with the header X-SMCP-CSRF: 1");
        }

        if (!tenant_rights) {
            return ngx_http_sandbox_mcp_ui_send_json(r, NGX_HTTP_FORBIDDEN,
                                  NULL, "a message to the agent needs the "
                                  "tenant's link (a run's watchUrl only "
                                  "watches): make token SUB=<tenant> UI=1");
        }

        return ngx_http_sandbox_mcp_ui_run_message(ctx, run_id);

    case NGX_HTTP_SANDBOX_MCP_UI_START:
        if (!ngx_http_sandbox_mcp_ui_same_origin(r)) {
            return ngx_http_sandbox_mcp_ui_send_json(r, NGX_HTTP_FORBIDDEN,
                                  NULL, "a new run needs a same-origin "
                                  "request with the header X-SMCP-CSRF: 1");
        }

        if (!tenant_rights) {
            return ngx_http_sandbox_mcp_ui_send_json(r, NGX_HTTP_FORBIDDEN,
                                  NULL, "a new run needs the tenant's link "
                                  "(a run's watchUrl only watches): make "
                                  "token SUB=<tenant> UI=1");
        }

        return ngx_http_sandbox_mcp_ui_run_start(ctx);

    case NGX_HTTP_SANDBOX_MCP_UI_EVENTS:
        return ngx_http_sandbox_mcp_ui_run_events(ctx, run_id);

    case NGX_HTTP_SANDBOX_MCP_UI_RUNS:
        return ngx_http_sandbox_mcp_ui_runs(ctx);

    case NGX_HTTP_SANDBOX_MCP_UI_GRANTS:
        if (!tenant_rights) {
            return ngx_http_sandbox_mcp_ui_send_json(r, NGX_HTTP_FORBIDDEN,
                                  NULL, "the tenant's link only");
        }

        return ngx_http_sandbox_mcp_ui_grants(ctx);

    default: /* NGX_HTTP_SANDBOX_MCP_UI_STREAM */
        return ngx_http_sandbox_mcp_ui_tenant_stream(ctx);
    }
}


/* the token checked (in Redis too, when the worker's revoked set cannot
 * tell), then the route served */
static ngx_int_t
ngx_http_sandbox_mcp_ui_go(ngx_http_sandbox_mcp_ui_req_t *u)
{
    ngx_int_t                    rc;
    ngx_str_t                   *rid;
    ngx_uint_t                   tenant_rights;
    ngx_http_request_t          *r;
    ngx_http_sandbox_mcp_ctx_t  *ctx;

    ctx = u->ctx;
    r = ctx->request;
    rid = u->run_id.len ? &u->run_id : NULL;
    tenant_rights = 0;

    rc = u->token_page
         ? ngx_http_sandbox_mcp_ui_token_page(r, ctx, &u->token, &u->prefix,
                                              rid)
         : ngx_http_sandbox_mcp_ui_auth(r, ctx, rid, &tenant_rights);

    if (rc == NGX_AGAIN) {
        return ngx_http_sandbox_mcp_ui_ask(u);
    }

    if (u->token_page) {
        return rc;
    }

    if (rc == NGX_DECLINED) {
        if (u->route == NGX_HTTP_SANDBOX_MCP_UI_LIST
            || u->route == NGX_HTTP_SANDBOX_MCP_UI_RUN)
        {
            return ngx_http_sandbox_mcp_ui_denied(r);
        }

        return ngx_http_sandbox_mcp_ui_send_json(r, NGX_HTTP_UNAUTHORIZED,
                                  NULL, NGX_HTTP_SANDBOX_MCP_UI_DENIED);
    }

    if (rc != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    return ngx_http_sandbox_mcp_ui_serve(r, ctx, u->route, rid,
                                         tenant_rights);
}


static void
ngx_http_sandbox_mcp_ui_asked(void *data, ngx_int_t revoked)
{
    ngx_http_sandbox_mcp_ui_req_t *u = data;

    ngx_int_t                    rc;
    ngx_http_sandbox_mcp_ctx_t  *ctx;

    ctx = u->ctx;
    ctx->cmd = NULL;

    if (revoked == NGX_ERROR) {
        rc = ngx_http_sandbox_mcp_ui_send_json(ctx->request,
                                        NGX_HTTP_SERVICE_UNAVAILABLE, NULL,
                                        "try again in a moment");

    } else {
        ctx->jti_asked = ctx->jti_ask;
        ctx->jti_revoked = (revoked == NGX_DECLINED);
        ngx_str_null(&ctx->jti_ask);

        rc = ngx_http_sandbox_mcp_ui_go(u);

        if (rc == NGX_DONE) {
            /* the route's own Redis step finalizes the request */
            return;
        }
    }

    ngx_http_sandbox_mcp_finalize(ctx, rc);
}


/* the worker's revoked set cannot tell: Redis is asked, once */
static ngx_int_t
ngx_http_sandbox_mcp_ui_ask(ngx_http_sandbox_mcp_ui_req_t *u)
{
    ngx_http_sandbox_mcp_ctx_t  *ctx;

    ctx = u->ctx;

    if (ctx->jti_asked.len == 0) {
        ctx->cmd = ngx_http_sandbox_mcp_revoked_ask(ctx->request->pool,
                                          &ctx->jti_ask,
                                          ngx_http_sandbox_mcp_ui_asked, u);
        if (ctx->cmd) {
            return NGX_DONE;
        }
    }

    /* Redis is away, or another cookie's token came up */
    return ngx_http_sandbox_mcp_ui_send_json(ctx->request,
                                        NGX_HTTP_SERVICE_UNAVAILABLE, NULL,
                                        "try again in a moment");
}


ngx_int_t
ngx_http_sandbox_mcp_ui_handler(ngx_http_request_t *r)
{
    ngx_int_t                         rc;
    ngx_str_t                         rel, run_id, name;
    ngx_http_core_loc_conf_t         *clcf;
    ngx_http_sandbox_mcp_ctx_t       *ctx;
    const smcp_ui_file_t             *f;
    ngx_http_sandbox_mcp_ui_req_t    *u;
    ngx_uint_t                        posted;
    ngx_http_sandbox_mcp_ui_route_e   route;

    static ngx_str_t  get = ngx_string("GET, HEAD");
    static ngx_str_t  post = ngx_string("POST");
    static ngx_str_t  get_post = ngx_string("GET, HEAD, POST");

    clcf = ngx_http_get_module_loc_conf(r, ngx_http_core_module);

    if (r->uri.len < clcf->name.len) {
        return NGX_HTTP_NOT_FOUND;
    }

    rel.data = r->uri.data + clcf->name.len;
    rel.len = r->uri.len - clcf->name.len;

    ngx_str_null(&run_id);
    ngx_str_null(&name);

    route = ngx_http_sandbox_mcp_ui_route(&rel, &run_id, &name);

    if (route == NGX_HTTP_SANDBOX_MCP_UI_NONE) {
        return ngx_http_sandbox_mcp_ui_send_json(r, NGX_HTTP_NOT_FOUND, NULL,
                                                 "not found");
    }

    if (route == NGX_HTTP_SANDBOX_MCP_UI_RUNS && r->method == NGX_HTTP_POST) {
        route = NGX_HTTP_SANDBOX_MCP_UI_START;
    }

    posted = (route == NGX_HTTP_SANDBOX_MCP_UI_CANCEL
              || route == NGX_HTTP_SANDBOX_MCP_UI_MESSAGE
              || route == NGX_HTTP_SANDBOX_MCP_UI_START);

    if (posted ? r->method != NGX_HTTP_POST
               : !(r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD)))
    {
        if (ngx_http_sandbox_mcp_add_header(r, "Allow",
                                     route == NGX_HTTP_SANDBOX_MCP_UI_RUNS
                                     ? &get_post : posted ? &post : &get)
            != NGX_OK)
        {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        return ngx_http_sandbox_mcp_ui_send_json(r, NGX_HTTP_NOT_ALLOWED,
                                                 NULL, "method not allowed");
    }

    if (route == NGX_HTTP_SANDBOX_MCP_UI_ASSET) {
        f = ngx_http_sandbox_mcp_ui_file(name.data, name.len);

        if (f == NULL) {
            return ngx_http_sandbox_mcp_ui_send_json(r, NGX_HTTP_NOT_FOUND,
                                                     NULL, "not found");
        }

        return ngx_http_sandbox_mcp_ui_send_file(r, NGX_HTTP_OK, f, 0);
    }

    ctx = ngx_http_sandbox_mcp_ctx_create(r);
    u = ngx_pcalloc(r->pool, sizeof(ngx_http_sandbox_mcp_ui_req_t));

    if (ctx == NULL || u == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    u->ctx = ctx;
    u->route = route;
    u->run_id = run_id;
    u->prefix = clcf->name;

    u->token_page = (route == NGX_HTTP_SANDBOX_MCP_UI_LIST
                     || route == NGX_HTTP_SANDBOX_MCP_UI_RUN)
                    && ngx_http_arg(r, (u_char *) "token", 5, &u->token)
                       == NGX_OK;

    if (route == NGX_HTTP_SANDBOX_MCP_UI_MESSAGE
        || route == NGX_HTTP_SANDBOX_MCP_UI_START)
    {
        return ngx_http_sandbox_mcp_ui_read(r, u);
    }

    rc = ngx_http_sandbox_mcp_ui_go(u);

    if (rc == NGX_DONE) {
        /* a Redis reply (or the stream's end) finalizes the request */
        r->main->count++;
    }

    return rc;
}


/*
 * A message's or a new run's body is read before its token is looked at
 * (bounded: a longer one is refused unread); the request then goes on as
 * any other, the body reader's hold standing for the Redis step's.
 */
static ngx_int_t
ngx_http_sandbox_mcp_ui_read(ngx_http_request_t *r,
    ngx_http_sandbox_mcp_ui_req_t *u)
{
    ngx_int_t  rc;

    ngx_uint_t  run;

    run = (u->route == NGX_HTTP_SANDBOX_MCP_UI_START);

    if (r->headers_in.content_length_n < 0) {
        return ngx_http_sandbox_mcp_ui_send_json(r,
                                  NGX_HTTP_LENGTH_REQUIRED, NULL,
                                  run ? "a new run needs a Content-Length"
                                      : "a message needs a Content-Length");
    }

    if (r->headers_in.content_length_n > NGX_HTTP_SANDBOX_MCP_UI_BODY_MAX) {
        return ngx_http_sandbox_mcp_ui_send_json(r,
                                  NGX_HTTP_REQUEST_ENTITY_TOO_LARGE, NULL,
                                  run ? "the run's arguments are too long "
                                        "(64 KiB at most)"
                                      : "the message is too long");
    }

    u->ctx->data = u;
    r->request_body_in_single_buf = 1;

    rc = ngx_http_read_client_request_body(r, ngx_http_sandbox_mcp_ui_body);

    if (rc >= NGX_HTTP_SPECIAL_RESPONSE) {
        return rc;
    }

    return NGX_DONE;
}


static void
ngx_http_sandbox_mcp_ui_body(ngx_http_request_t *r)
{
    ngx_int_t                       rc;
    ngx_http_sandbox_mcp_ctx_t     *ctx;
    ngx_http_sandbox_mcp_ui_req_t  *u;

    ctx = ngx_http_get_module_ctx(r, ngx_http_sandbox_mcp_module);
    u = ctx->data;
    ctx->data = NULL;

    rc = ngx_http_sandbox_mcp_ui_go(u);

    if (rc == NGX_DONE) {
        /* a Redis reply finalizes the request */
        return;
    }

    ngx_http_finalize_request(r, rc);
}
