/*
 * The dashboard (sandbox_mcp_ui): its routes under the location's prefix,
 * its pages and assets (ui/, embedded at build), and the headers of every
 * answer.  docs/contracts.md "Dashboard (issue 10)".
 */

#ifndef _NGX_HTTP_SANDBOX_MCP_UI_H_INCLUDED_
#define _NGX_HTTP_SANDBOX_MCP_UI_H_INCLUDED_


#include "ngx_http_sandbox_mcp_module.h"


ngx_int_t ngx_http_sandbox_mcp_ui_handler(ngx_http_request_t *r);

/* Content-Security-Policy and the other headers of every answer; with
 * no_store, Cache-Control: no-store */
ngx_int_t ngx_http_sandbox_mcp_ui_headers(ngx_http_request_t *r,
    ngx_uint_t no_store);

/* the 401 page (ui/denied.html): no run data */
ngx_int_t ngx_http_sandbox_mcp_ui_denied(ngx_http_request_t *r);

/* a JSON answer of the dashboard: {"error": message} when status is not
 * 200 and json is NULL */
ngx_int_t ngx_http_sandbox_mcp_ui_send_json(ngx_http_request_t *r,
    ngx_uint_t status, json_t *json, const char *message);


#endif /* _NGX_HTTP_SANDBOX_MCP_UI_H_INCLUDED_ */
