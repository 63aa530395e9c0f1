/*
 * The session's GET stream (text/event-stream): notifications/resources/
 * updated for the resources the session subscribed, resumable with
 * Last-Event-ID; resources/subscribe and unsubscribe.
 */

#ifndef _NGX_HTTP_SANDBOX_MCP_STREAM_H_INCLUDED_
#define _NGX_HTTP_SANDBOX_MCP_STREAM_H_INCLUDED_


#include "ngx_http_sandbox_mcp_module.h"


/* GET with a session: the stream (NGX_DONE), or an nginx code */
ngx_int_t ngx_http_sandbox_mcp_stream_start(ngx_http_sandbox_mcp_ctx_t *ctx);

/* the session was deleted: its subscriptions and log level are deleted,
 * its stream told to end (fire and forget) */
void ngx_http_sandbox_mcp_stream_forget(ngx_http_sandbox_mcp_ctx_t *ctx);

/* resources/subscribe (on) and unsubscribe {uri} */
void ngx_http_sandbox_mcp_subscribe(ngx_http_sandbox_mcp_call_t *call,
    json_t *params, ngx_uint_t on);


#endif /* _NGX_HTTP_SANDBOX_MCP_STREAM_H_INCLUDED_ */
