/*
 * sandbox_mcp_egress_notify: the egress location every completion
 * notification leaves the machine through.  The runner POSTs it with a
 * token of scope "notify" for the run (a sandbox's own token, scope
 * "egress", is refused) and the destination in X-SMCP-Notify-To; here the
 * token is verified, the destination checked against this location's
 * sandbox_mcp_notify_allow, and a name resolved with the location's
 * resolver: every address it has must be public, and the request goes to
 * the first one, so that what was checked is what is reached (no second
 * lookup).  nginx's proxy module sends it on:
 *
 *     location = /notify {
 *         sandbox_mcp_egress_notify on;
 *         sandbox_mcp_notify_allow https://hooks.slack.com/services/;
 *         proxy_set_header Host $sandbox_mcp_notify_host;
 *         proxy_set_header X-SMCP-Notify-To "";
 *         proxy_ssl_name $sandbox_mcp_notify_name;
 *         proxy_ssl_server_name on;
 *         proxy_pass $sandbox_mcp_notify_upstream;
 *     }
 *
 * $sandbox_mcp_notify_upstream is the URL with the host's address in
 * place of its name; $sandbox_mcp_notify_host the URL's host[:port];
 * $sandbox_mcp_notify_name its host.  The token headers never go on.
 */

#include "ngx_http_sandbox_mcp_notify.h"
#include "ngx_http_sandbox_mcp_egress.h"
#include "ngx_http_sandbox_mcp_egress_token.h"
#include "ngx_http_sandbox_mcp_defaults.h"
#include "ngx_http_sandbox_mcp_http.h"


typedef struct {
    ngx_http_request_t                 *request;
    ngx_http_sandbox_mcp_notify_url_t   url;
    ngx_resolver_ctx_t                 *resolving;
    ngx_str_t                           upstream;
    ngx_int_t                           rc;
    unsigned                            done:1;
    unsigned                            granted:1;
    unsigned                            sync:1;     /* in resolve_name */
    ngx_uint_t                          status;     /* its refusal, when
                                                       answered at once */
    const char                         *msg;
} ngx_http_sandbox_mcp_notify_ctx_t;


#define NGX_HTTP_SANDBOX_MCP_NOTIFY_VAR_UPSTREAM  0
#define NGX_HTTP_SANDBOX_MCP_NOTIFY_VAR_HOST      1
#define NGX_HTTP_SANDBOX_MCP_NOTIFY_VAR_NAME      2


static ngx_int_t ngx_http_sandbox_mcp_notify_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data);
static u_char *ngx_http_sandbox_mcp_notify_log_error(ngx_http_request_t *r,
    ngx_http_request_t *sr, u_char *buf, size_t len);


static ngx_http_variable_t  ngx_http_sandbox_mcp_notify_vars[] = {

    { ngx_string("sandbox_mcp_notify_upstream"), NULL,
      ngx_http_sandbox_mcp_notify_variable,
      NGX_HTTP_SANDBOX_MCP_NOTIFY_VAR_UPSTREAM, NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("sandbox_mcp_notify_host"), NULL,
      ngx_http_sandbox_mcp_notify_variable,
      NGX_HTTP_SANDBOX_MCP_NOTIFY_VAR_HOST, NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("sandbox_mcp_notify_name"), NULL,
      ngx_http_sandbox_mcp_notify_variable,
      NGX_HTTP_SANDBOX_MCP_NOTIFY_VAR_NAME, NGX_HTTP_VAR_NOCACHEABLE, 0 },

      ngx_http_null_variable
};


/* a refusal in the egress's JSON shape; the request ends */
static ngx_int_t
ngx_http_sandbox_mcp_notify_refuse(ngx_http_sandbox_mcp_notify_ctx_t *ctx,
    ngx_uint_t status, const char *fmt, ngx_str_t *arg)
{
    u_char  msg[NGX_HTTP_SANDBOX_MCP_MESSAGE_MAX], *last;

    last = arg ? ngx_snprintf(msg, sizeof(msg) - 1, fmt, arg)
               : ngx_snprintf(msg, sizeof(msg) - 1, "%s", fmt);
    *last = '\0';

    ctx->done = 1;
    ctx->rc = NGX_DONE;

    ngx_http_finalize_request(ctx->request,
        ngx_http_sandbox_mcp_egress_refuse(ctx->request, status,
            status == NGX_HTTP_UNAUTHORIZED ? "authentication_error"
            : status == NGX_HTTP_FORBIDDEN ? "permission_error" : "api_error",
            (char *) msg));

    return NGX_DONE;
}


static void
ngx_http_sandbox_mcp_notify_cleanup(void *data)
{
    ngx_http_sandbox_mcp_notify_ctx_t *ctx = data;

    if (ctx->resolving) {
        ngx_resolve_name_done(ctx->resolving);
        ctx->resolving = NULL;
    }
}


/* the one X-SMCP-Notify-To; NGX_DECLINED: none, or more than one */
static ngx_int_t
ngx_http_sandbox_mcp_notify_to(ngx_http_request_t *r, ngx_str_t *to)
{
    ngx_uint_t        i, n;
    ngx_list_part_t  *part;
    ngx_table_elt_t  *h;

    n = 0;

    for (part = &r->headers_in.headers.part; part; part = part->next) {
        h = part->elts;

        for (i = 0; i < part->nelts; i++) {
            if (h[i].key.len == sizeof(NGX_HTTP_SANDBOX_MCP_NOTIFY_TO) - 1
                && ngx_strncasecmp(h[i].key.data,
                                   (u_char *) NGX_HTTP_SANDBOX_MCP_NOTIFY_TO,
                                   h[i].key.len)
                   == 0)
            {
                *to = h[i].value;
                n++;
            }
        }
    }

    return n == 1 ? NGX_OK : NGX_DECLINED;
}


/*
 * The request's error log context, as nginx's own (server, request,
 * upstream, host) but for the upstream's URI: a destination's path may be
 * its secret (a Slack webhook's), so "upstream" names its scheme and
 * address only, whatever nginx logs (a refused connection, a timeout).
 */
static u_char *
ngx_http_sandbox_mcp_notify_log_error(ngx_http_request_t *r,
    ngx_http_request_t *sr, u_char *buf, size_t len)
{
    u_char                    *p;
    ngx_http_upstream_t       *u;
    ngx_http_core_srv_conf_t  *cscf;

    cscf = ngx_http_get_module_srv_conf(r, ngx_http_core_module);

    p = ngx_snprintf(buf, len, ", server: %V", &cscf->server_name);
    len -= p - buf;
    buf = p;

    if (r->request_line.len) {
        p = ngx_snprintf(buf, len, ", request: \"%V\"", &r->request_line);
        len -= p - buf;
        buf = p;
    }

    u = sr->upstream;

    if (u && u->peer.name) {
        p = ngx_snprintf(buf, len, ", upstream: \"%V%V/...\"", &u->schema,
                         u->peer.name);
        len -= p - buf;
        buf = p;
    }

    if (r->headers_in.host) {
        buf = ngx_snprintf(buf, len, ", host: \"%V\"",
                           &r->headers_in.host->value);
    }

    return buf;
}


/* the upstream URL: the checked address in place of the host */
static ngx_int_t
ngx_http_sandbox_mcp_notify_upstream(ngx_http_sandbox_mcp_notify_ctx_t *ctx,
    ngx_resolver_addr_t *addr)
{
    u_char     *p;
    size_t      len;
    ngx_uint_t  v6;
    u_char      text[NGX_SOCKADDR_STRLEN];

    len = ngx_sock_ntop(addr->sockaddr, addr->socklen, text,
                        NGX_SOCKADDR_STRLEN, 0);
    v6 = addr->sockaddr->sa_family != AF_INET;

    ctx->upstream.data = ngx_pnalloc(ctx->request->pool,
                                     ctx->url.scheme.len + sizeof("://[]:")
                                     + len + NGX_INT_T_LEN
                                     + ctx->url.path.len);
    if (ctx->upstream.data == NULL) {
        return NGX_ERROR;
    }

    p = ngx_sprintf(ctx->upstream.data, "%V://%s%*s%s:%ud%V",
                    &ctx->url.scheme, v6 ? "[" : "", len, text,
                    v6 ? "]" : "", (ngx_uint_t) ctx->url.port,
                    &ctx->url.path);
    ctx->upstream.len = p - ctx->upstream.data;

    return NGX_OK;
}


static void
ngx_http_sandbox_mcp_notify_resolved(ngx_resolver_ctx_t *rctx)
{
    ngx_http_sandbox_mcp_notify_ctx_t *ctx = rctx->data;

    ngx_uint_t           i, sync, status;
    const char          *msg;
    ngx_connection_t    *c;
    ngx_http_request_t  *r;

    /* (ctx lives in the request's pool: not read once it may be gone) */
    r = ctx->request;
    c = r->connection;
    sync = ctx->sync;
    ctx->resolving = NULL;
    status = 0;
    msg = NULL;

    if (rctx->state || rctx->naddrs == 0) {
        ngx_log_error(NGX_LOG_INFO, c->log, 0,
                      "sandbox_mcp notify: %V could not be resolved (%i: %s)",
                      &ctx->url.host, rctx->state,
                      ngx_resolver_strerror(rctx->state));
        status = NGX_HTTP_BAD_GATEWAY;
        msg = "notify: the destination's host %V does not resolve";

    } else {
        for (i = 0; i < rctx->naddrs; i++) {
            if (smcp_addr_private(rctx->addrs[i].sockaddr)) {
                status = NGX_HTTP_FORBIDDEN;
                msg = "notify: the destination's host %V resolves to a "
                      "private address (list the address itself to reach "
                      "it)";
                break;
            }
        }

        if (status == 0
            && ngx_http_sandbox_mcp_notify_upstream(ctx, &rctx->addrs[0])
               != NGX_OK)
        {
            status = NGX_HTTP_INTERNAL_SERVER_ERROR;
        }
    }

    ngx_resolve_name_done(rctx);

    if (sync) {
        /* a cached answer, within ngx_resolve_name(): the access handler
         * goes on from here (notify_resolve) */
        ctx->status = status;
        ctx->msg = msg;

        if (status == 0) {
            ctx->done = 1;
            ctx->granted = 1;
            ctx->rc = NGX_OK;
        }

        return;
    }

    if (status == NGX_HTTP_INTERNAL_SERVER_ERROR) {
        ctx->done = 1;
        ctx->rc = NGX_DONE;
        ngx_http_finalize_request(r, status);

    } else if (status) {
        (void) ngx_http_sandbox_mcp_notify_refuse(ctx, status, msg,
                                                  &ctx->url.host);

    } else {
        /* checked: resume the phases where the access check stopped */
        ctx->done = 1;
        ctx->granted = 1;
        ctx->rc = NGX_OK;
        ngx_http_core_run_phases(r);
    }

    ngx_http_run_posted_requests(c);
}


/* the destination's name, resolved: the answer decides (NGX_AGAIN) */
static ngx_int_t
ngx_http_sandbox_mcp_notify_resolve(ngx_http_sandbox_mcp_notify_ctx_t *ctx)
{
    ngx_resolver_ctx_t        *rctx, temp;
    ngx_pool_cleanup_t        *cln;
    ngx_http_request_t        *r;
    ngx_http_core_loc_conf_t  *clcf;

    r = ctx->request;
    clcf = ngx_http_get_module_loc_conf(r, ngx_http_core_module);

    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (cln == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    cln->handler = ngx_http_sandbox_mcp_notify_cleanup;
    cln->data = ctx;

    temp.name = ctx->url.host;

    rctx = ngx_resolve_start(clcf->resolver, &temp);
    if (rctx == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (rctx == NGX_NO_RESOLVER) {
        return ngx_http_sandbox_mcp_notify_refuse(ctx, NGX_HTTP_BAD_GATEWAY,
                          "notify: no resolver for the destination's host "
                          "%V (the egress's resolver directive)",
                          &ctx->url.host);
    }

    rctx->name = ctx->url.host;
    rctx->handler = ngx_http_sandbox_mcp_notify_resolved;
    rctx->data = ctx;
    rctx->timeout = clcf->resolver_timeout;

    ctx->resolving = rctx;
    ctx->sync = 1;

    if (ngx_resolve_name(rctx) != NGX_OK) {
        ctx->resolving = NULL;
        ctx->sync = 0;
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ctx->sync = 0;

    if (ctx->status == NGX_HTTP_INTERNAL_SERVER_ERROR) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (ctx->status) {
        return ngx_http_sandbox_mcp_notify_refuse(ctx, ctx->status, ctx->msg,
                                                  &ctx->url.host);
    }

    return ctx->done ? ctx->rc : NGX_AGAIN;
}


ngx_int_t
ngx_http_sandbox_mcp_notify_egress_handler(ngx_http_request_t *r)
{
    json_t                                  *claims;
    ngx_int_t                                rc;
    ngx_str_t                                token, to;
    const char                              *why;
    ngx_http_sandbox_mcp_notify_ctx_t       *ctx;
    ngx_http_sandbox_mcp_notify_loc_conf_t  *nlcf;

    nlcf = ngx_http_get_module_loc_conf(r, ngx_http_sandbox_mcp_notify_module);

    if (!nlcf->egress) {
        return NGX_DECLINED;
    }

    ctx = ngx_http_get_module_ctx(r, ngx_http_sandbox_mcp_notify_module);

    if (ctx) {
        /* re-entered by run_phases: the resolver's answer decides */
        return ctx->done ? ctx->rc : NGX_AGAIN;
    }

    ctx = ngx_pcalloc(r->pool, sizeof(ngx_http_sandbox_mcp_notify_ctx_t));
    if (ctx == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ctx->request = r;
    ngx_http_set_ctx(r, ctx, ngx_http_sandbox_mcp_notify_module);
    r->log_handler = ngx_http_sandbox_mcp_notify_log_error;

    if (r->method != NGX_HTTP_POST) {
        return ngx_http_sandbox_mcp_notify_refuse(ctx, NGX_HTTP_NOT_ALLOWED,
                                                  "notify: POST only", NULL);
    }

    rc = ngx_http_sandbox_mcp_egress_token(r, &token);
    if (rc == NGX_ERROR) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    claims = (rc == NGX_OK)
             ? ngx_http_sandbox_mcp_egress_claims(r, &token,
                                                  SMCP_SCOPE_NOTIFY, &why)
             : NULL;

    if (claims == NULL) {
        return ngx_http_sandbox_mcp_notify_refuse(ctx, NGX_HTTP_UNAUTHORIZED,
                          "notify: a runner's notify token is needed", NULL);
    }

    json_decref(claims);

    if (ngx_http_sandbox_mcp_notify_to(r, &to) != NGX_OK) {
        return ngx_http_sandbox_mcp_notify_refuse(ctx, NGX_HTTP_BAD_REQUEST,
                          "notify: one " NGX_HTTP_SANDBOX_MCP_NOTIFY_TO
                          " header names the destination", NULL);
    }

    why = ngx_http_sandbox_mcp_notify_allowed(r, &to, &ctx->url);
    if (why) {
        to.len = ngx_strlen(why);
        to.data = (u_char *) why;
        return ngx_http_sandbox_mcp_notify_refuse(ctx, NGX_HTTP_FORBIDDEN,
                          "notify: the destination %V", &to);
    }

    if (ngx_http_sandbox_mcp_egress_strip(r) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (!ctx->url.literal) {
        return ngx_http_sandbox_mcp_notify_resolve(ctx);
    }

    /* an address the operator listed: as written */
    ctx->upstream = ctx->url.text;
    ctx->done = 1;
    ctx->granted = 1;
    ctx->rc = NGX_OK;

    return NGX_OK;
}


static ngx_int_t
ngx_http_sandbox_mcp_notify_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    ngx_str_t                          *s;
    ngx_http_sandbox_mcp_notify_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_sandbox_mcp_notify_module);

    if (ctx == NULL || !ctx->granted) {
        v->not_found = 1;
        return NGX_OK;
    }

    switch (data) {

    case NGX_HTTP_SANDBOX_MCP_NOTIFY_VAR_UPSTREAM:
        s = &ctx->upstream;
        break;

    case NGX_HTTP_SANDBOX_MCP_NOTIFY_VAR_HOST:
        s = &ctx->url.authority;
        break;

    default: /* NGX_HTTP_SANDBOX_MCP_NOTIFY_VAR_NAME */
        s = &ctx->url.host;
        break;
    }

    v->data = s->data;
    v->len = s->len;
    v->valid = 1;
    v->no_cacheable = 1;
    v->not_found = 0;

    return NGX_OK;
}


ngx_int_t
ngx_http_sandbox_mcp_notify_egress_variables(ngx_conf_t *cf)
{
    return ngx_http_sandbox_mcp_add_variables(cf,
                                              ngx_http_sandbox_mcp_notify_vars);
}
