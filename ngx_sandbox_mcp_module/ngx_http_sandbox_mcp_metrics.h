/*
 * Metrics (sandbox_mcp_metrics): counters every worker adds to, in one
 * shared memory zone, served in Prometheus' text format.
 *
 * A hook is one call from the code path it counts; none of them does I/O
 * or allocates.  Label values come from known sets (methods, tools,
 * refusal reasons), from the configuration (egress routes, the first
 * NGX_HTTP_SANDBOX_MCP_METRICS_ROUTES of them) or are bucketed (statuses
 * by class): the number of series is bounded whatever clients send.
 *
 * This file calls nothing of the module's: every layer may call it.
 */

#ifndef _NGX_HTTP_SANDBOX_MCP_METRICS_H_INCLUDED_
#define _NGX_HTTP_SANDBOX_MCP_METRICS_H_INCLUDED_


#include "ngx_http_sandbox_mcp_module.h"


/* live streams, by kind */
#define NGX_HTTP_SANDBOX_MCP_STREAM_DASHBOARD   0   /* sandbox_mcp_ui SSE */
#define NGX_HTTP_SANDBOX_MCP_STREAM_MCP         1   /* GET /mcp */


/* the zone, added once by the configuration (postconfiguration) */
ngx_int_t ngx_http_sandbox_mcp_metrics_zone(ngx_conf_t *cf,
    ngx_module_t *module);

/* the hooks */
void ngx_http_sandbox_mcp_metrics_request(ngx_http_request_t *r);
void ngx_http_sandbox_mcp_metrics_redis(ngx_msec_t sent);
void ngx_http_sandbox_mcp_metrics_redis_reconnect(void);
void ngx_http_sandbox_mcp_metrics_long_poll(ngx_int_t delta);
void ngx_http_sandbox_mcp_metrics_stream(ngx_uint_t kind, ngx_int_t delta);
void ngx_http_sandbox_mcp_metrics_egress(ngx_http_request_t *r,
    ngx_str_t *route);
void ngx_http_sandbox_mcp_metrics_refused(const char *type);

/* a method's label (the known set, else "other"), for log lines too */
const char *ngx_http_sandbox_mcp_metrics_method(const char *name);

/* the content handler of sandbox_mcp_metrics */
ngx_int_t ngx_http_sandbox_mcp_metrics_handler(ngx_http_request_t *r);


#endif /* _NGX_HTTP_SANDBOX_MCP_METRICS_H_INCLUDED_ */
