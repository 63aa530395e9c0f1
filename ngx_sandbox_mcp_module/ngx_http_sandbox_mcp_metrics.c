/*
 * Metrics: one shared memory zone of counters (atomics), the hooks that add
 * to it, and the Prometheus text format of it (sandbox_mcp_metrics).
 */

#include "ngx_http_sandbox_mcp_metrics.h"


#define NGX_HTTP_SANDBOX_MCP_METRICS_ROUTES     32
#define NGX_HTTP_SANDBOX_MCP_METRICS_ROUTE_LEN  32
#define NGX_HTTP_SANDBOX_MCP_METRICS_CLASSES    6   /* 1xx..5xx, other */
#define NGX_HTTP_SANDBOX_MCP_METRICS_BUF        16384
#define NGX_HTTP_SANDBOX_MCP_METRICS_LINE       512 /* one line at most */


/* label values: the known sets; "other" last */

static const char  *ngx_http_sandbox_mcp_metrics_methods[] = {
    "initialize", "ping", "tools/list", "tools/call",
    "resources/list", "resources/templates/list", "resources/read",
    "resources/subscribe", "resources/unsubscribe",
    "tasks/get", "tasks/list", "tasks/result", "tasks/cancel",
    "completion/complete", "logging/setLevel",
    "notifications/initialized", "notifications/cancelled", "other"
};

static const char  *ngx_http_sandbox_mcp_metrics_tools[] = {
    "", "opencode_run_task", "opencode_get_result", "opencode_list_runs",
    "opencode_cancel_run", "opencode_get_diff", "opencode_get_events",
    "opencode_list_sessions", "other"
};

static const char  *ngx_http_sandbox_mcp_metrics_outcomes[] = {
    "ok", "error", "tool_error", "accepted"
};

static const char  *ngx_http_sandbox_mcp_metrics_endpoints[] = {
    "mcp", "ui"
};

static const char  *ngx_http_sandbox_mcp_metrics_classes[] = {
    "1xx", "2xx", "3xx", "4xx", "5xx", "other"
};

static const char  *ngx_http_sandbox_mcp_metrics_reasons[] = {
    "authentication_error", "permission_error", "api_error",
    "invalid_request_error", "billing_error", "rate_limit_error", "other"
};

static const char  *ngx_http_sandbox_mcp_metrics_streams[] = {
    "dashboard", "mcp"
};

/* Redis command latency, upper bounds in ms (le in seconds) */
static const ngx_msec_t  ngx_http_sandbox_mcp_metrics_le[] = {
    1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000
};


#define ngx_http_sandbox_mcp_metrics_n(a)  (sizeof(a) / sizeof(a[0]))

#define NGX_HTTP_SANDBOX_MCP_METRICS_NMETHODS                                 \
    ngx_http_sandbox_mcp_metrics_n(ngx_http_sandbox_mcp_metrics_methods)
#define NGX_HTTP_SANDBOX_MCP_METRICS_NTOOLS                                   \
    ngx_http_sandbox_mcp_metrics_n(ngx_http_sandbox_mcp_metrics_tools)
#define NGX_HTTP_SANDBOX_MCP_METRICS_NOUTCOMES                                \
    ngx_http_sandbox_mcp_metrics_n(ngx_http_sandbox_mcp_metrics_outcomes)
#define NGX_HTTP_SANDBOX_MCP_METRICS_NREASONS                                 \
    ngx_http_sandbox_mcp_metrics_n(ngx_http_sandbox_mcp_metrics_reasons)
#define NGX_HTTP_SANDBOX_MCP_METRICS_NLE                                      \
    ngx_http_sandbox_mcp_metrics_n(ngx_http_sandbox_mcp_metrics_le)


typedef struct {
    ngx_atomic_t    calls[NGX_HTTP_SANDBOX_MCP_METRICS_NMETHODS]
                         [NGX_HTTP_SANDBOX_MCP_METRICS_NTOOLS]
                         [NGX_HTTP_SANDBOX_MCP_METRICS_NOUTCOMES];
    ngx_atomic_t    http[2][NGX_HTTP_SANDBOX_MCP_METRICS_CLASSES];

    ngx_atomic_t    redis_le[NGX_HTTP_SANDBOX_MCP_METRICS_NLE];
    ngx_atomic_t    redis_count;
    ngx_atomic_t    redis_sum_ms;
    ngx_atomic_t    redis_reconnects;

    ngx_atomic_t    long_polls;             /* gauges: added to, taken */
    ngx_atomic_t    streams[2];             /* from */

    /* the egress routes met, in order; the last row is "other" */
    ngx_atomic_t    nroutes;
    u_char          route[NGX_HTTP_SANDBOX_MCP_METRICS_ROUTES]
                         [NGX_HTTP_SANDBOX_MCP_METRICS_ROUTE_LEN];
    ngx_atomic_t    route_len[NGX_HTTP_SANDBOX_MCP_METRICS_ROUTES];
    ngx_atomic_t    egress[NGX_HTTP_SANDBOX_MCP_METRICS_ROUTES + 1]
                          [NGX_HTTP_SANDBOX_MCP_METRICS_CLASSES];
    ngx_atomic_t    egress_in[NGX_HTTP_SANDBOX_MCP_METRICS_ROUTES + 1]
                             [NGX_HTTP_SANDBOX_MCP_METRICS_CLASSES];
    ngx_atomic_t    egress_out[NGX_HTTP_SANDBOX_MCP_METRICS_ROUTES + 1]
                              [NGX_HTTP_SANDBOX_MCP_METRICS_CLASSES];
    ngx_atomic_t    refused[NGX_HTTP_SANDBOX_MCP_METRICS_NREASONS];
} ngx_http_sandbox_mcp_metrics_shm_t;


typedef struct {
    ngx_pool_t     *pool;
    ngx_chain_t    *first;
    ngx_chain_t   **last;
    ngx_buf_t      *b;
} ngx_http_sandbox_mcp_metrics_out_t;


static ngx_int_t ngx_http_sandbox_mcp_metrics_init_zone(
    ngx_shm_zone_t *shm_zone, void *data);
static ngx_uint_t ngx_http_sandbox_mcp_metrics_find(const char **set,
    ngx_uint_t n, const char *value);
static ngx_uint_t ngx_http_sandbox_mcp_metrics_class(ngx_uint_t status);
static ngx_uint_t ngx_http_sandbox_mcp_metrics_route(ngx_str_t *route);
static void ngx_http_sandbox_mcp_metrics_call(ngx_http_sandbox_mcp_call_t
    *call, json_t *msg);
static ngx_int_t ngx_http_sandbox_mcp_metrics_printf(
    ngx_http_sandbox_mcp_metrics_out_t *out, const char *fmt, ...);
static ngx_int_t ngx_http_sandbox_mcp_metrics_text(
    ngx_http_sandbox_mcp_metrics_out_t *out,
    ngx_http_sandbox_mcp_metrics_shm_t *m);
static ngx_int_t ngx_http_sandbox_mcp_metrics_text_egress(
    ngx_http_sandbox_mcp_metrics_out_t *out,
    ngx_http_sandbox_mcp_metrics_shm_t *m);


static ngx_http_sandbox_mcp_metrics_shm_t  *ngx_http_sandbox_mcp_metrics;
static ngx_slab_pool_t                      *ngx_http_sandbox_mcp_metrics_pool;


ngx_int_t
ngx_http_sandbox_mcp_metrics_zone(ngx_conf_t *cf, ngx_module_t *module)
{
    size_t           size;
    ngx_shm_zone_t  *zone;

    static ngx_str_t  name = ngx_string("sandbox_mcp_metrics");

    size = ngx_align(sizeof(ngx_http_sandbox_mcp_metrics_shm_t),
                     ngx_pagesize) + 8 * ngx_pagesize;

    zone = ngx_shared_memory_add(cf, &name, size, module);
    if (zone == NULL) {
        return NGX_ERROR;
    }

    zone->init = ngx_http_sandbox_mcp_metrics_init_zone;

    return NGX_OK;
}


static ngx_int_t
ngx_http_sandbox_mcp_metrics_init_zone(ngx_shm_zone_t *shm_zone, void *data)
{
    ngx_slab_pool_t  *shpool;

    shpool = (ngx_slab_pool_t *) shm_zone->shm.addr;
    ngx_http_sandbox_mcp_metrics_pool = shpool;

    if (data) {
        /* a reload: the counters go on */
        shm_zone->data = data;
        ngx_http_sandbox_mcp_metrics = data;
        return NGX_OK;
    }

    if (shm_zone->shm.exists) {
        shm_zone->data = shpool->data;
        ngx_http_sandbox_mcp_metrics = shpool->data;
        return NGX_OK;
    }

    ngx_http_sandbox_mcp_metrics = ngx_slab_calloc(shpool,
                                   sizeof(ngx_http_sandbox_mcp_metrics_shm_t));
    if (ngx_http_sandbox_mcp_metrics == NULL) {
        return NGX_ERROR;
    }

    shpool->data = ngx_http_sandbox_mcp_metrics;
    shm_zone->data = ngx_http_sandbox_mcp_metrics;

    return NGX_OK;
}


static ngx_uint_t
ngx_http_sandbox_mcp_metrics_find(const char **set, ngx_uint_t n,
    const char *value)
{
    ngx_uint_t  i;

    for (i = 0; value && i < n - 1; i++) {
        if (ngx_strcmp(set[i], value) == 0) {
            return i;
        }
    }

    return n - 1;
}


static ngx_uint_t
ngx_http_sandbox_mcp_metrics_class(ngx_uint_t status)
{
    if (status < 100 || status > 599) {
        return NGX_HTTP_SANDBOX_MCP_METRICS_CLASSES - 1;
    }

    return status / 100 - 1;
}


/* a method's label: its own name when known, else "other" */
const char *
ngx_http_sandbox_mcp_metrics_method(const char *name)
{
    return ngx_http_sandbox_mcp_metrics_methods[
               ngx_http_sandbox_mcp_metrics_find(
                   ngx_http_sandbox_mcp_metrics_methods,
                   NGX_HTTP_SANDBOX_MCP_METRICS_NMETHODS, name)];
}


/* one message of an MCP request: its method, its tool, how it ended */
static void
ngx_http_sandbox_mcp_metrics_call(ngx_http_sandbox_mcp_call_t *call,
    json_t *msg)
{
    json_t      *result;
    ngx_uint_t   method, tool, outcome;
    const char  *name;

    name = json_string_value(json_object_get(msg, "method"));
    if (name == NULL) {
        return;                     /* a client's answer: not a call */
    }

    method = ngx_http_sandbox_mcp_metrics_find(
                 ngx_http_sandbox_mcp_metrics_methods,
                 NGX_HTTP_SANDBOX_MCP_METRICS_NMETHODS, name);

    tool = 0;

    if (ngx_strcmp(name, "tools/call") == 0) {
        name = json_string_value(json_object_get(
                   json_object_get(msg, "params"), "name"));
        tool = ngx_http_sandbox_mcp_metrics_find(
                   ngx_http_sandbox_mcp_metrics_tools + 1,
                   NGX_HTTP_SANDBOX_MCP_METRICS_NTOOLS - 1, name) + 1;
    }

    if (call->response == NULL) {
        outcome = 3;

    } else if (json_object_get(call->response, "error")) {
        outcome = 1;

    } else {
        result = json_object_get(call->response, "result");
        outcome = json_is_true(json_object_get(result, "isError")) ? 2 : 0;
    }

    (void) ngx_atomic_fetch_add(
               &ngx_http_sandbox_mcp_metrics->calls[method][tool][outcome], 1);
}


/* the log phase of an MCP or dashboard request */
void
ngx_http_sandbox_mcp_metrics_request(ngx_http_request_t *r)
{
    ngx_uint_t                        i, endpoint;
    ngx_http_sandbox_mcp_ctx_t       *ctx;
    ngx_http_sandbox_mcp_loc_conf_t  *lcf;

    if (ngx_http_sandbox_mcp_metrics == NULL) {
        return;
    }

    lcf = ngx_http_get_module_loc_conf(r, ngx_http_sandbox_mcp_module);

    if (lcf->enable == 1) {
        endpoint = 0;

    } else if (lcf->ui == 1) {
        endpoint = 1;

    } else {
        return;
    }

    (void) ngx_atomic_fetch_add(&ngx_http_sandbox_mcp_metrics->http[endpoint]
                   [ngx_http_sandbox_mcp_metrics_class(
                        r->headers_out.status)], 1);

    ctx = ngx_http_get_module_ctx(r, ngx_http_sandbox_mcp_module);

    if (endpoint != 0 || ctx == NULL || ctx->body == NULL
        || ctx->finish != NULL)
    {
        return;
    }

    for (i = 0; i < ctx->ncalls; i++) {
        ngx_http_sandbox_mcp_metrics_call(&ctx->calls[i],
                                          ctx->batch
                                          ? json_array_get(ctx->body, i)
                                          : ctx->body);
    }
}


/* a command's reply came: the time since it was sent */
void
ngx_http_sandbox_mcp_metrics_redis(ngx_msec_t sent)
{
    ngx_uint_t  i;
    ngx_msec_t  ms;

    if (ngx_http_sandbox_mcp_metrics == NULL) {
        return;
    }

    ms = ngx_current_msec - sent;

    for (i = 0; i < NGX_HTTP_SANDBOX_MCP_METRICS_NLE; i++) {
        if (ms <= ngx_http_sandbox_mcp_metrics_le[i]) {
            (void) ngx_atomic_fetch_add(
                       &ngx_http_sandbox_mcp_metrics->redis_le[i], 1);
            break;
        }
    }

    (void) ngx_atomic_fetch_add(&ngx_http_sandbox_mcp_metrics->redis_sum_ms,
                                ms);
    (void) ngx_atomic_fetch_add(&ngx_http_sandbox_mcp_metrics->redis_count,
                                1);
}


void
ngx_http_sandbox_mcp_metrics_redis_reconnect(void)
{
    if (ngx_http_sandbox_mcp_metrics) {
        (void) ngx_atomic_fetch_add(
                   &ngx_http_sandbox_mcp_metrics->redis_reconnects, 1);
    }
}


void
ngx_http_sandbox_mcp_metrics_long_poll(ngx_int_t delta)
{
    if (ngx_http_sandbox_mcp_metrics) {
        (void) ngx_atomic_fetch_add(&ngx_http_sandbox_mcp_metrics->long_polls,
                                    (ngx_atomic_int_t) delta);
    }
}


void
ngx_http_sandbox_mcp_metrics_stream(ngx_uint_t kind, ngx_int_t delta)
{
    if (ngx_http_sandbox_mcp_metrics && kind < 2) {
        (void) ngx_atomic_fetch_add(
                   &ngx_http_sandbox_mcp_metrics->streams[kind],
                   (ngx_atomic_int_t) delta);
    }
}


/* a route's row: found, or added while there is room, else "other" */
static ngx_uint_t
ngx_http_sandbox_mcp_metrics_route(ngx_str_t *route)
{
    ngx_uint_t                           i, n;
    ngx_http_sandbox_mcp_metrics_shm_t  *m;

    m = ngx_http_sandbox_mcp_metrics;

    if (route->len == 0
        || route->len > NGX_HTTP_SANDBOX_MCP_METRICS_ROUTE_LEN)
    {
        return NGX_HTTP_SANDBOX_MCP_METRICS_ROUTES;
    }

    for (i = 0; i < route->len; i++) {
        if (!(isalnum(route->data[i]) || route->data[i] == '_'
              || route->data[i] == '-' || route->data[i] == '.'))
        {
            return NGX_HTTP_SANDBOX_MCP_METRICS_ROUTES;
        }
    }

    /* rows are only ever added, each written before nroutes counts it:
     * look without the lock, add under it */

    n = m->nroutes;

    for (i = 0; i < n; i++) {
        if (m->route_len[i] == route->len
            && ngx_strncmp(m->route[i], route->data, route->len) == 0)
        {
            return i;
        }
    }

    ngx_shmtx_lock(&ngx_http_sandbox_mcp_metrics_pool->mutex);

    for (n = m->nroutes; i < n; i++) {
        if (m->route_len[i] == route->len
            && ngx_strncmp(m->route[i], route->data, route->len) == 0)
        {
            break;
        }
    }

    if (i == n && n < NGX_HTTP_SANDBOX_MCP_METRICS_ROUTES) {
        ngx_memcpy(m->route[n], route->data, route->len);
        m->route_len[n] = route->len;
        ngx_memory_barrier();
        m->nroutes = n + 1;
    }

    ngx_shmtx_unlock(&ngx_http_sandbox_mcp_metrics_pool->mutex);

    return i;
}


/* the log phase of an egress request */
void
ngx_http_sandbox_mcp_metrics_egress(ngx_http_request_t *r, ngx_str_t *route)
{
    ngx_uint_t                           i, c;
    ngx_http_sandbox_mcp_metrics_shm_t  *m;

    m = ngx_http_sandbox_mcp_metrics;

    if (m == NULL) {
        return;
    }

    i = ngx_http_sandbox_mcp_metrics_route(route);
    c = ngx_http_sandbox_mcp_metrics_class(r->headers_out.status);

    (void) ngx_atomic_fetch_add(&m->egress[i][c], 1);
    (void) ngx_atomic_fetch_add(&m->egress_in[i][c], r->request_length);
    (void) ngx_atomic_fetch_add(&m->egress_out[i][c], r->connection->sent);
}


/* an egress refusal, by its error type */
void
ngx_http_sandbox_mcp_metrics_refused(const char *type)
{
    if (ngx_http_sandbox_mcp_metrics) {
        (void) ngx_atomic_fetch_add(&ngx_http_sandbox_mcp_metrics->refused[
                   ngx_http_sandbox_mcp_metrics_find(
                       ngx_http_sandbox_mcp_metrics_reasons,
                       NGX_HTTP_SANDBOX_MCP_METRICS_NREASONS, type)], 1);
    }
}


/* appends one line (at most NGX_HTTP_SANDBOX_MCP_METRICS_LINE bytes) */
static ngx_int_t
ngx_http_sandbox_mcp_metrics_printf(ngx_http_sandbox_mcp_metrics_out_t *out,
    const char *fmt, ...)
{
    va_list       args;
    ngx_buf_t    *b;
    ngx_chain_t  *cl;

    b = out->b;

    if (b == NULL
        || (size_t) (b->end - b->last) < NGX_HTTP_SANDBOX_MCP_METRICS_LINE)
    {
        b = ngx_create_temp_buf(out->pool, NGX_HTTP_SANDBOX_MCP_METRICS_BUF);
        cl = ngx_alloc_chain_link(out->pool);

        if (b == NULL || cl == NULL) {
            return NGX_ERROR;
        }

        cl->buf = b;
        cl->next = NULL;
        *out->last = cl;
        out->last = &cl->next;
        out->b = b;
    }

    va_start(args, fmt);
    b->last = ngx_vslprintf(b->last, b->last
                                     + NGX_HTTP_SANDBOX_MCP_METRICS_LINE - 1,
                            fmt, args);
    va_end(args);

    *b->last++ = '\n';

    return NGX_OK;
}


#define ngx_http_sandbox_mcp_metrics_line(out, ...)                           \
    if (ngx_http_sandbox_mcp_metrics_printf(out, __VA_ARGS__) != NGX_OK) {    \
        return NGX_ERROR;                                                     \
    }


static ngx_int_t
ngx_http_sandbox_mcp_metrics_text(ngx_http_sandbox_mcp_metrics_out_t *out,
    ngx_http_sandbox_mcp_metrics_shm_t *m)
{
    ngx_uint_t        i, j, k;
    ngx_atomic_uint_t  v, sum;

    ngx_http_sandbox_mcp_metrics_line(out,
        "# HELP smcp_mcp_requests_total MCP messages by method, tool and "
        "outcome");
    ngx_http_sandbox_mcp_metrics_line(out,
        "# TYPE smcp_mcp_requests_total counter");

    for (i = 0; i < NGX_HTTP_SANDBOX_MCP_METRICS_NMETHODS; i++) {
        for (j = 0; j < NGX_HTTP_SANDBOX_MCP_METRICS_NTOOLS; j++) {
            for (k = 0; k < NGX_HTTP_SANDBOX_MCP_METRICS_NOUTCOMES; k++) {
                v = m->calls[i][j][k];
                if (v == 0) {
                    continue;
                }

                ngx_http_sandbox_mcp_metrics_line(out,
                    "smcp_mcp_requests_total{method=\"%s\",tool=\"%s\","
                    "status=\"%s\"} %uA",
                    ngx_http_sandbox_mcp_metrics_methods[i],
                    ngx_http_sandbox_mcp_metrics_tools[j],
                    ngx_http_sandbox_mcp_metrics_outcomes[k], v);
            }
        }
    }

    ngx_http_sandbox_mcp_metrics_line(out,
        "# HELP smcp_http_responses_total HTTP responses by endpoint and "
        "status class");
    ngx_http_sandbox_mcp_metrics_line(out,
        "# TYPE smcp_http_responses_total counter");

    for (i = 0; i < 2; i++) {
        for (j = 0; j < NGX_HTTP_SANDBOX_MCP_METRICS_CLASSES; j++) {
            if (m->http[i][j]) {
                ngx_http_sandbox_mcp_metrics_line(out,
                    "smcp_http_responses_total{endpoint=\"%s\","
                    "status=\"%s\"} %uA",
                    ngx_http_sandbox_mcp_metrics_endpoints[i],
                    ngx_http_sandbox_mcp_metrics_classes[j], m->http[i][j]);
            }
        }
    }

    ngx_http_sandbox_mcp_metrics_line(out,
        "# HELP smcp_redis_command_duration_seconds Redis commands, sent to "
        "answered");
    ngx_http_sandbox_mcp_metrics_line(out,
        "# TYPE smcp_redis_command_duration_seconds histogram");

    for (i = 0, sum = 0; i < NGX_HTTP_SANDBOX_MCP_METRICS_NLE; i++) {
        sum += m->redis_le[i];
        ngx_http_sandbox_mcp_metrics_line(out,
            "smcp_redis_command_duration_seconds_bucket{le=\"%ui.%03ui\"} "
            "%uA", ngx_http_sandbox_mcp_metrics_le[i] / 1000,
            ngx_http_sandbox_mcp_metrics_le[i] % 1000, sum);
    }

    v = m->redis_count;
    ngx_http_sandbox_mcp_metrics_line(out,
        "smcp_redis_command_duration_seconds_bucket{le=\"+Inf\"} %uA", v);
    ngx_http_sandbox_mcp_metrics_line(out,
        "smcp_redis_command_duration_seconds_sum %uA.%03uA",
        m->redis_sum_ms / 1000, m->redis_sum_ms % 1000);
    ngx_http_sandbox_mcp_metrics_line(out,
        "smcp_redis_command_duration_seconds_count %uA", v);

    ngx_http_sandbox_mcp_metrics_line(out,
        "# HELP smcp_redis_reconnects_total Redis connections retried");
    ngx_http_sandbox_mcp_metrics_line(out,
        "# TYPE smcp_redis_reconnects_total counter");
    ngx_http_sandbox_mcp_metrics_line(out,
        "smcp_redis_reconnects_total %uA", m->redis_reconnects);

    ngx_http_sandbox_mcp_metrics_line(out,
        "# HELP smcp_long_polls Calls waiting for a run to end");
    ngx_http_sandbox_mcp_metrics_line(out, "# TYPE smcp_long_polls gauge");
    ngx_http_sandbox_mcp_metrics_line(out, "smcp_long_polls %A",
                                      (ngx_atomic_int_t) m->long_polls);

    ngx_http_sandbox_mcp_metrics_line(out,
        "# HELP smcp_streams Open event streams by kind");
    ngx_http_sandbox_mcp_metrics_line(out, "# TYPE smcp_streams gauge");

    for (i = 0; i < 2; i++) {
        ngx_http_sandbox_mcp_metrics_line(out,
            "smcp_streams{kind=\"%s\"} %A",
            ngx_http_sandbox_mcp_metrics_streams[i],
            (ngx_atomic_int_t) m->streams[i]);
    }

    return ngx_http_sandbox_mcp_metrics_text_egress(out, m);
}


static ngx_int_t
ngx_http_sandbox_mcp_metrics_text_egress(
    ngx_http_sandbox_mcp_metrics_out_t *out,
    ngx_http_sandbox_mcp_metrics_shm_t *m)
{
    ngx_str_t    route;
    ngx_uint_t   i, j, n;

    n = m->nroutes;

    ngx_http_sandbox_mcp_metrics_line(out,
        "# HELP smcp_egress_requests_total Egress requests by route and "
        "status class");
    ngx_http_sandbox_mcp_metrics_line(out,
        "# TYPE smcp_egress_requests_total counter");
    ngx_http_sandbox_mcp_metrics_line(out,
        "# HELP smcp_egress_bytes_total Egress bytes by route, status class "
        "and direction");
    ngx_http_sandbox_mcp_metrics_line(out,
        "# TYPE smcp_egress_bytes_total counter");

    for (i = 0; i <= NGX_HTTP_SANDBOX_MCP_METRICS_ROUTES; i++) {
        if (i < n) {
            route.data = m->route[i];
            route.len = m->route_len[i];

        } else if (i == NGX_HTTP_SANDBOX_MCP_METRICS_ROUTES) {
            ngx_str_set(&route, "other");

        } else {
            continue;
        }

        for (j = 0; j < NGX_HTTP_SANDBOX_MCP_METRICS_CLASSES; j++) {
            if (m->egress[i][j] == 0) {
                continue;
            }

            ngx_http_sandbox_mcp_metrics_line(out,
                "smcp_egress_requests_total{route=\"%V\",status=\"%s\"} %uA",
                &route, ngx_http_sandbox_mcp_metrics_classes[j],
                m->egress[i][j]);
            ngx_http_sandbox_mcp_metrics_line(out,
                "smcp_egress_bytes_total{route=\"%V\",status=\"%s\","
                "direction=\"in\"} %uA",
                &route, ngx_http_sandbox_mcp_metrics_classes[j],
                m->egress_in[i][j]);
            ngx_http_sandbox_mcp_metrics_line(out,
                "smcp_egress_bytes_total{route=\"%V\",status=\"%s\","
                "direction=\"out\"} %uA",
                &route, ngx_http_sandbox_mcp_metrics_classes[j],
                m->egress_out[i][j]);
        }
    }

    ngx_http_sandbox_mcp_metrics_line(out,
        "# HELP smcp_egress_refused_total Egress requests refused by reason");
    ngx_http_sandbox_mcp_metrics_line(out,
        "# TYPE smcp_egress_refused_total counter");

    for (i = 0; i < NGX_HTTP_SANDBOX_MCP_METRICS_NREASONS; i++) {
        ngx_http_sandbox_mcp_metrics_line(out,
            "smcp_egress_refused_total{reason=\"%s\"} %uA",
            ngx_http_sandbox_mcp_metrics_reasons[i], m->refused[i]);
    }

    return NGX_OK;
}


ngx_int_t
ngx_http_sandbox_mcp_metrics_handler(ngx_http_request_t *r)
{
    off_t                               len;
    ngx_int_t                           rc;
    ngx_chain_t                        *cl;
    ngx_http_sandbox_mcp_metrics_out_t  out;

    if (!(r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD))) {
        return NGX_HTTP_NOT_ALLOWED;
    }

    rc = ngx_http_discard_request_body(r);
    if (rc != NGX_OK) {
        return rc;
    }

    if (ngx_http_sandbox_mcp_metrics == NULL) {
        return NGX_HTTP_SERVICE_UNAVAILABLE;
    }

    out.pool = r->pool;
    out.first = NULL;
    out.last = &out.first;
    out.b = NULL;

    if (ngx_http_sandbox_mcp_metrics_text(&out, ngx_http_sandbox_mcp_metrics)
        != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    len = 0;

    for (cl = out.first; cl; cl = cl->next) {
        len += cl->buf->last - cl->buf->pos;

        if (cl->next == NULL) {
            cl->buf->last_buf = (r == r->main) ? 1 : 0;
            cl->buf->last_in_chain = 1;
        }
    }

    r->headers_out.status = NGX_HTTP_OK;
    r->headers_out.content_length_n = len;
    ngx_str_set(&r->headers_out.content_type,
                "text/plain; version=0.0.4; charset=utf-8");
    r->headers_out.content_type_len = r->headers_out.content_type.len;

    rc = ngx_http_send_header(r);

    if (rc == NGX_ERROR || rc > NGX_OK || r->header_only) {
        return rc;
    }

    return ngx_http_output_filter(r, out.first);
}
