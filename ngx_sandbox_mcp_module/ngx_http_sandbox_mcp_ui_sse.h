/*
 * The dashboard's live streams (text/event-stream): a run's events (stored
 * ones, then new ones as the run's channel announces them) and a tenant's
 * status changes (its channel tenant:{tenant}).  Every watcher of a worker
 * is woken through the worker's one pub/sub connection (the waiter layer).
 */

#ifndef _NGX_HTTP_SANDBOX_MCP_UI_SSE_H_INCLUDED_
#define _NGX_HTTP_SANDBOX_MCP_UI_SSE_H_INCLUDED_


#include "ngx_http_sandbox_mcp_module.h"


/* ctx->tenant is authorized (for run_id); returns an nginx code or
 * NGX_DONE (the stream goes on) */
ngx_int_t ngx_http_sandbox_mcp_ui_run_events(ngx_http_sandbox_mcp_ctx_t *ctx,
    ngx_str_t *run_id);
ngx_int_t ngx_http_sandbox_mcp_ui_tenant_stream(
    ngx_http_sandbox_mcp_ctx_t *ctx);


#endif /* _NGX_HTTP_SANDBOX_MCP_UI_SSE_H_INCLUDED_ */
