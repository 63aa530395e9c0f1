/*
 * The dashboard's answers: the headers of every one, its JSON.
 */

#ifndef _NGX_HTTP_SANDBOX_MCP_UI_HTTP_H_INCLUDED_
#define _NGX_HTTP_SANDBOX_MCP_UI_HTTP_H_INCLUDED_


#include "ngx_http_sandbox_mcp_module.h"


/* Content-Security-Policy and the other headers of every answer; with
 * no_store, Cache-Control: no-store */
ngx_int_t ngx_http_sandbox_mcp_ui_headers(ngx_http_request_t *r,
    ngx_uint_t no_store);

/* a JSON answer of the dashboard: {"error": message} when status is not
 * 200 and json is NULL */
ngx_int_t ngx_http_sandbox_mcp_ui_send_json(ngx_http_request_t *r,
    ngx_uint_t status, json_t *json, const char *message);


#endif /* _NGX_HTTP_SANDBOX_MCP_UI_HTTP_H_INCLUDED_ */
