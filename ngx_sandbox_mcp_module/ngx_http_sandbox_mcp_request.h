/*
 * A request's life: its context and its end from callbacks (/mcp and the
 * dashboard).
 */

#ifndef _NGX_HTTP_SANDBOX_MCP_REQUEST_H_INCLUDED_
#define _NGX_HTTP_SANDBOX_MCP_REQUEST_H_INCLUDED_


#include "ngx_http_sandbox_mcp_module.h"


/* the request's context (the module's ctx of r), released with the
 * request: pending Redis commands cancelled, waits ended, answers freed */
ngx_http_sandbox_mcp_ctx_t *ngx_http_sandbox_mcp_ctx_create(
    ngx_http_request_t *r);

/* finalizes the request from a Redis callback or a timer (outside nginx's
 * request flow), then runs the posted requests */
void ngx_http_sandbox_mcp_finalize(ngx_http_sandbox_mcp_ctx_t *ctx,
    ngx_int_t rc);


#endif /* _NGX_HTTP_SANDBOX_MCP_REQUEST_H_INCLUDED_ */
