/*
 * ngx_http_sandbox_mcp_ops_module: operations.  Its directives:
 *
 *     sandbox_mcp_metrics;            location: Prometheus text format
 *     sandbox_mcp_health;             location: /healthz
 *     sandbox_mcp_log_format json;    http: one JSON line per MCP and
 *                                     egress request in the error log
 *
 * and the log phase that counts every MCP, dashboard and egress request
 * (ngx_http_sandbox_mcp_metrics.c) and writes its JSON line.
 */

#include "ngx_http_sandbox_mcp_module.h"
#include "ngx_http_sandbox_mcp_egress.h"
#include "ngx_http_sandbox_mcp_health.h"
#include "ngx_http_sandbox_mcp_metrics.h"

#include "smcp_validate.h"


#define NGX_HTTP_SANDBOX_MCP_LOG_TEXT   0
#define NGX_HTTP_SANDBOX_MCP_LOG_JSON   1

#define NGX_HTTP_SANDBOX_MCP_LOG_RUNS   16      /* run ids in one line */


typedef struct {
    ngx_uint_t                  log_format;
} ngx_http_sandbox_mcp_ops_main_conf_t;


static ngx_int_t ngx_http_sandbox_mcp_ops_init(ngx_conf_t *cf);
static void *ngx_http_sandbox_mcp_ops_create_main_conf(ngx_conf_t *cf);
static char *ngx_http_sandbox_mcp_ops_init_main_conf(ngx_conf_t *cf,
    void *conf);
static char *ngx_http_sandbox_mcp_ops_location(ngx_conf_t *cf,
    ngx_command_t *cmd, void *conf);
static ngx_int_t ngx_http_sandbox_mcp_ops_log(ngx_http_request_t *r);
static json_t *ngx_http_sandbox_mcp_ops_mcp_line(ngx_http_request_t *r);
static json_t *ngx_http_sandbox_mcp_ops_egress_line(ngx_http_request_t *r,
    ngx_str_t *route);
static void ngx_http_sandbox_mcp_ops_write(ngx_http_request_t *r,
    json_t *line);


static ngx_conf_enum_t  ngx_http_sandbox_mcp_log_formats[] = {
    { ngx_string("text"), NGX_HTTP_SANDBOX_MCP_LOG_TEXT },
    { ngx_string("json"), NGX_HTTP_SANDBOX_MCP_LOG_JSON },
    { ngx_null_string, 0 }
};


static ngx_command_t  ngx_http_sandbox_mcp_ops_commands[] = {

    { ngx_string("sandbox_mcp_metrics"),
      NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS,
      ngx_http_sandbox_mcp_ops_location,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      (void *) ngx_http_sandbox_mcp_metrics_handler },

    { ngx_string("sandbox_mcp_health"),
      NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS,
      ngx_http_sandbox_mcp_ops_location,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      (void *) ngx_http_sandbox_mcp_health_handler },

    { ngx_string("sandbox_mcp_log_format"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_enum_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_sandbox_mcp_ops_main_conf_t, log_format),
      &ngx_http_sandbox_mcp_log_formats },

      ngx_null_command
};


static ngx_http_module_t  ngx_http_sandbox_mcp_ops_module_ctx = {
    NULL,                                      /* preconfiguration */
    ngx_http_sandbox_mcp_ops_init,             /* postconfiguration */

    ngx_http_sandbox_mcp_ops_create_main_conf, /* create main configuration */
    ngx_http_sandbox_mcp_ops_init_main_conf,   /* init main configuration */

    NULL,                                      /* create server conf */
    NULL,                                      /* merge server conf */

    NULL,                                      /* create location conf */
    NULL                                       /* merge location conf */
};


ngx_module_t  ngx_http_sandbox_mcp_ops_module = {
    NGX_MODULE_V1,
    &ngx_http_sandbox_mcp_ops_module_ctx,      /* module context */
    ngx_http_sandbox_mcp_ops_commands,         /* module directives */
    NGX_HTTP_MODULE,                           /* module type */
    NULL,                                      /* init master */
    NULL,                                      /* init module */
    NULL,                                      /* init process */
    NULL,                                      /* init thread */
    NULL,                                      /* exit thread */
    NULL,                                      /* exit process */
    NULL,                                      /* exit master */
    NGX_MODULE_V1_PADDING
};


static void *
ngx_http_sandbox_mcp_ops_create_main_conf(ngx_conf_t *cf)
{
    ngx_http_sandbox_mcp_ops_main_conf_t  *omcf;

    omcf = ngx_pcalloc(cf->pool, sizeof(ngx_http_sandbox_mcp_ops_main_conf_t));
    if (omcf == NULL) {
        return NULL;
    }

    omcf->log_format = NGX_CONF_UNSET_UINT;

    return omcf;
}


static char *
ngx_http_sandbox_mcp_ops_init_main_conf(ngx_conf_t *cf, void *conf)
{
    ngx_http_sandbox_mcp_ops_main_conf_t *omcf = conf;

    ngx_conf_init_uint_value(omcf->log_format, NGX_HTTP_SANDBOX_MCP_LOG_TEXT);

    return NGX_CONF_OK;
}


/* sandbox_mcp_metrics, sandbox_mcp_health: the location's content handler;
 * the workers connect to Redis (health asks it) */
static char *
ngx_http_sandbox_mcp_ops_location(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_core_loc_conf_t          *clcf;
    ngx_http_sandbox_mcp_main_conf_t  *mcf;

    clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);

    if (clcf->handler) {
        return "is duplicate";
    }

    clcf->handler = (ngx_http_handler_pt) cmd->post;

    if (clcf->handler == ngx_http_sandbox_mcp_health_handler) {
        mcf = ngx_http_conf_get_module_main_conf(cf,
                                                 ngx_http_sandbox_mcp_module);
        mcf->enabled = 1;
    }

    return NGX_CONF_OK;
}


static ngx_int_t
ngx_http_sandbox_mcp_ops_init(ngx_conf_t *cf)
{
    ngx_http_handler_pt        *h;
    ngx_http_core_main_conf_t  *cmcf;

    if (ngx_http_sandbox_mcp_metrics_zone(cf, &ngx_http_sandbox_mcp_ops_module)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    cmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_core_module);

    h = ngx_array_push(&cmcf->phases[NGX_HTTP_LOG_PHASE].handlers);
    if (h == NULL) {
        return NGX_ERROR;
    }

    *h = ngx_http_sandbox_mcp_ops_log;

    return NGX_OK;
}


static ngx_int_t
ngx_http_sandbox_mcp_ops_log(ngx_http_request_t *r)
{
    json_t                                  *line;
    ngx_http_sandbox_mcp_loc_conf_t         *lcf;
    ngx_http_sandbox_mcp_ops_main_conf_t    *omcf;
    ngx_http_sandbox_mcp_egress_loc_conf_t  *elcf;

    ngx_http_sandbox_mcp_metrics_request(r);

    elcf = ngx_http_get_module_loc_conf(r, ngx_http_sandbox_mcp_egress_module);

    if (elcf->route.len) {
        ngx_http_sandbox_mcp_metrics_egress(r, &elcf->route);
    }

    omcf = ngx_http_get_module_main_conf(r, ngx_http_sandbox_mcp_ops_module);

    if (omcf->log_format != NGX_HTTP_SANDBOX_MCP_LOG_JSON) {
        return NGX_OK;
    }

    lcf = ngx_http_get_module_loc_conf(r, ngx_http_sandbox_mcp_module);

    if (lcf->enable == 1) {
        line = ngx_http_sandbox_mcp_ops_mcp_line(r);

    } else if (elcf->route.len) {
        line = ngx_http_sandbox_mcp_ops_egress_line(r, &elcf->route);

    } else {
        return NGX_OK;
    }

    if (line) {
        ngx_http_sandbox_mcp_ops_write(r, line);
        json_decref(line);
    }

    return NGX_OK;
}


/* an MCP request: tenant, methods and the valid run ids of its calls;
 * never a header, a token or a session id */
static json_t *
ngx_http_sandbox_mcp_ops_mcp_line(ngx_http_request_t *r)
{
    json_t                       *line, *runs, *methods, *msg, *m;
    ngx_uint_t                    i;
    ngx_http_sandbox_mcp_ctx_t   *ctx;
    ngx_http_sandbox_mcp_call_t  *call;

    line = json_pack("{s:s, s:s, s:s%, s:i}", "event", "mcp_request",
                     "level", "info",
                     "method", (char *) r->method_name.data,
                     r->method_name.len,
                     "status", (int) r->headers_out.status);
    if (line == NULL) {
        return NULL;
    }

    ctx = ngx_http_get_module_ctx(r, ngx_http_sandbox_mcp_module);

    if (ctx == NULL) {
        return line;
    }

    if (ctx->tenant.len
        && smcp_valid_tenant((char *) ctx->tenant.data, ctx->tenant.len))
    {
        json_object_set_new(line, "tenant",
                            json_stringn((char *) ctx->tenant.data,
                                         ctx->tenant.len));
    }

    runs = json_array();
    methods = json_array();

    for (i = 0; ctx->body && i < ctx->ncalls; i++) {
        call = &ctx->calls[i];
        msg = ctx->batch ? json_array_get(ctx->body, i) : ctx->body;
        m = json_object_get(msg, "method");

        if (json_is_string(m)) {
            json_array_append_new(methods, json_string(
                ngx_http_sandbox_mcp_metrics_method(json_string_value(m))));
        }

        if (call->run_id.len
            && json_array_size(runs) < NGX_HTTP_SANDBOX_MCP_LOG_RUNS
            && smcp_valid_id((char *) call->run_id.data, call->run_id.len,
                             SMCP_RUN_ID_PREFIX))
        {
            json_array_append_new(runs,
                                  json_stringn((char *) call->run_id.data,
                                               call->run_id.len));
        }
    }

    json_object_set_new(line, "calls", methods);

    if (json_array_size(runs) == 1) {
        json_object_set(line, "runId", json_array_get(runs, 0));
    }

    json_object_set_new(line, "runIds", runs);

    return line;
}


/* an egress request: the run, its tenant, the route, what went through */
static json_t *
ngx_http_sandbox_mcp_ops_egress_line(ngx_http_request_t *r, ngx_str_t *route)
{
    json_t                             *line;
    ngx_http_sandbox_mcp_egress_ctx_t  *ctx;

    line = json_pack("{s:s, s:s, s:s%, s:s%, s:i, s:I, s:I}",
                     "event", "egress", "level", "info",
                     "route", (char *) route->data, route->len,
                     "method", (char *) r->method_name.data,
                     r->method_name.len,
                     "status", (int) r->headers_out.status,
                     "bytesIn", (json_int_t) r->request_length,
                     "bytesOut", (json_int_t) r->connection->sent);
    if (line == NULL) {
        return NULL;
    }

    ctx = ngx_http_get_module_ctx(r, ngx_http_sandbox_mcp_egress_module);

    if (ctx && ctx->run_id.len
        && smcp_valid_id((char *) ctx->run_id.data, ctx->run_id.len,
                         SMCP_RUN_ID_PREFIX))
    {
        json_object_set_new(line, "runId",
                            json_stringn((char *) ctx->run_id.data,
                                         ctx->run_id.len));
    }

    if (ctx && ctx->tenant.len
        && smcp_valid_tenant((char *) ctx->tenant.data, ctx->tenant.len))
    {
        json_object_set_new(line, "tenant",
                            json_stringn((char *) ctx->tenant.data,
                                         ctx->tenant.len));
    }

    return line;
}


/* the line, with the time, in one write to the location's error log */
static void
ngx_http_sandbox_mcp_ops_write(ngx_http_request_t *r, json_t *line)
{
    char                      *text;
    size_t                     len;
    u_char                    *buf, *p;
    ngx_log_t                 *log;
    ngx_http_core_loc_conf_t  *clcf;

    json_object_set_new(line, "time",
                        json_stringn((char *) ngx_cached_http_log_iso8601.data,
                                     ngx_cached_http_log_iso8601.len));
    json_object_set_new(line, "pid", json_integer(ngx_pid));

    text = json_dumps(line, JSON_COMPACT|JSON_SORT_KEYS);
    if (text == NULL) {
        return;
    }

    len = ngx_strlen(text);
    buf = ngx_pnalloc(r->pool, len + 1);

    if (buf) {
        p = ngx_cpymem(buf, text, len);
        *p++ = '\n';

        clcf = ngx_http_get_module_loc_conf(r, ngx_http_core_module);
        log = clcf->error_log;

        if (log && log->file && log->file->fd != NGX_INVALID_FILE) {
            (void) ngx_write_fd(log->file->fd, buf, p - buf);
        }
    }

    free(text);
}
