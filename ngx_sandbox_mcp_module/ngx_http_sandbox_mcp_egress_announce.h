/*
 * sandbox_mcp_egress_announce: the routes of an egress instance, written
 * to Redis for opencode_run_task.
 */

#ifndef _NGX_HTTP_SANDBOX_MCP_EGRESS_ANNOUNCE_H_INCLUDED_
#define _NGX_HTTP_SANDBOX_MCP_EGRESS_ANNOUNCE_H_INCLUDED_


#include "ngx_http_sandbox_mcp_egress.h"


/* the route of a sandbox_mcp_egress location, at configuration time */
ngx_int_t ngx_http_sandbox_mcp_egress_announce_route(ngx_conf_t *cf,
    ngx_str_t *route);

char *ngx_http_sandbox_mcp_egress_announce(ngx_conf_t *cf,
    ngx_command_t *cmd, void *conf);

/* before the worker's Redis connections start (no I/O) */
ngx_int_t ngx_http_sandbox_mcp_egress_announce_init_worker(
    ngx_cycle_t *cycle);


#endif /* _NGX_HTTP_SANDBOX_MCP_EGRESS_ANNOUNCE_H_INCLUDED_ */
