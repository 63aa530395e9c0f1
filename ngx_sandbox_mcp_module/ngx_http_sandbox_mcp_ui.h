/*
 * The dashboard (sandbox_mcp_ui): its routes under the location's prefix,
 * its pages and assets (ui/, embedded at build).  docs/contracts.md
 * "Dashboard (issue 10)".
 */

#ifndef _NGX_HTTP_SANDBOX_MCP_UI_H_INCLUDED_
#define _NGX_HTTP_SANDBOX_MCP_UI_H_INCLUDED_


#include "ngx_http_sandbox_mcp_module.h"


ngx_int_t ngx_http_sandbox_mcp_ui_handler(ngx_http_request_t *r);

/* the 401 page (ui/denied.html): no run data */
ngx_int_t ngx_http_sandbox_mcp_ui_denied(ngx_http_request_t *r);


#endif /* _NGX_HTTP_SANDBOX_MCP_UI_H_INCLUDED_ */
