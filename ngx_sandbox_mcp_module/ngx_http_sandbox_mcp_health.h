/*
 * /healthz (sandbox_mcp_health): Redis reachable, runners' heartbeats.
 */

#ifndef _NGX_HTTP_SANDBOX_MCP_HEALTH_H_INCLUDED_
#define _NGX_HTTP_SANDBOX_MCP_HEALTH_H_INCLUDED_


#include "ngx_http_sandbox_mcp_module.h"


ngx_int_t ngx_http_sandbox_mcp_health_handler(ngx_http_request_t *r);


#endif /* _NGX_HTTP_SANDBOX_MCP_HEALTH_H_INCLUDED_ */
