/*
 * Server-sent events on a request (text/event-stream).
 */

#ifndef _NGX_HTTP_SANDBOX_MCP_SSE_H_INCLUDED_
#define _NGX_HTTP_SANDBOX_MCP_SSE_H_INCLUDED_


#include "ngx_http_sandbox_mcp_module.h"


/* the head of a 200 text/event-stream answer; an empty one, closed */
ngx_int_t ngx_http_sandbox_mcp_sse_header(ngx_http_request_t *r);
/* the same after the caller's own Cache-Control (the dashboard's streams):
 * unbuffered, no length, no keep-alive; NGX_DONE: a HEAD, the head was the
 * answer */
ngx_int_t ngx_http_sandbox_mcp_sse_head(ngx_http_request_t *r);
/* a long stream, its head sent: beat(heartbeat) every so often (a cancelable
 * timer), the request's read and write handlers, the connection idle (the
 * worker's shutdown closes it) */
void ngx_http_sandbox_mcp_sse_keep(ngx_http_request_t *r,
    ngx_event_t *heartbeat, ngx_event_handler_pt beat, void *data,
    ngx_msec_t every, ngx_http_event_handler_pt read,
    ngx_http_event_handler_pt write);
ngx_int_t ngx_http_sandbox_mcp_sse_close(ngx_http_request_t *r);
/* an event (json freed; id < 0: none), or text as it is; nginx holding
 * bytes, the write handler sends them */
ngx_int_t ngx_http_sandbox_mcp_sse_send(ngx_http_request_t *r, int64_t id,
    json_t *json, ngx_uint_t last);
ngx_int_t ngx_http_sandbox_mcp_sse_text(ngx_http_request_t *r, u_char *text,
    size_t len);
/* the write handler of these streams */
void ngx_http_sandbox_mcp_sse_writer(ngx_http_request_t *r);


#endif /* _NGX_HTTP_SANDBOX_MCP_SSE_H_INCLUDED_ */
