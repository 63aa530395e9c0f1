/*
 * The dashboard's JSON: a run (with the other runs of its session for the
 * tenant's token), its diff, the tenant's list, and cancel, each answered
 * by the tool that answers it over MCP (the same Redis reads and scripts,
 * the same checks).
 */

#ifndef _NGX_HTTP_SANDBOX_MCP_UI_API_H_INCLUDED_
#define _NGX_HTTP_SANDBOX_MCP_UI_API_H_INCLUDED_


#include "ngx_http_sandbox_mcp_module.h"


/*
 * ctx->tenant is authorized (for run_id when given); each returns an nginx
 * code, or NGX_DONE (the answer comes later).  run_data: the run as
 * get_result answers it, plus "access": "tenant" (tenant_rights: the
 * request holds the tenant's token; "sessionRuns", the other runs of its
 * session) or "run" (a run's token only: nothing of its session).
 */
ngx_int_t ngx_http_sandbox_mcp_ui_run_data(ngx_http_sandbox_mcp_ctx_t *ctx,
    ngx_str_t *run_id, ngx_uint_t tenant_rights);
ngx_int_t ngx_http_sandbox_mcp_ui_run_diff(ngx_http_sandbox_mcp_ctx_t *ctx,
    ngx_str_t *run_id);
/* the request's body read */
ngx_int_t ngx_http_sandbox_mcp_ui_run_message(
    ngx_http_sandbox_mcp_ctx_t *ctx, ngx_str_t *run_id);
ngx_int_t ngx_http_sandbox_mcp_ui_run_cancel(ngx_http_sandbox_mcp_ctx_t *ctx,
    ngx_str_t *run_id);
ngx_int_t ngx_http_sandbox_mcp_ui_runs(ngx_http_sandbox_mcp_ctx_t *ctx);
ngx_int_t ngx_http_sandbox_mcp_ui_run_start(ngx_http_sandbox_mcp_ctx_t *ctx);
ngx_int_t ngx_http_sandbox_mcp_ui_grants(ngx_http_sandbox_mcp_ctx_t *ctx);


#endif /* _NGX_HTTP_SANDBOX_MCP_UI_API_H_INCLUDED_ */
