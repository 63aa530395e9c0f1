/*
 * The agents a location offers (sandbox_mcp_agents): which a run may name
 * (opencode_run_task's `agent`), the default model of each, and the
 * run_task definition tools/list shows there (its `agent` lists only
 * those).
 */

#ifndef _NGX_HTTP_SANDBOX_MCP_AGENTS_H_INCLUDED_
#define _NGX_HTTP_SANDBOX_MCP_AGENTS_H_INCLUDED_


#include "ngx_http_sandbox_mcp_module.h"


/* sandbox_mcp_agents NAME[=MODEL] ...; */
char *ngx_http_sandbox_mcp_agents_set(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);

/* inherited, else opencode alone; the ARGV run_create.lua takes and the
 * location's run_task definition made */
char *ngx_http_sandbox_mcp_agents_merge(ngx_conf_t *cf,
    ngx_http_sandbox_mcp_loc_conf_t *prev,
    ngx_http_sandbox_mcp_loc_conf_t *conf);

/* the call's `agent` (absent: "", the session's or the first offered),
 * one the location offers; NGX_ERROR: the call is answered */
ngx_int_t ngx_http_sandbox_mcp_agents_arg(ngx_http_sandbox_mcp_call_t *call,
    ngx_http_sandbox_mcp_loc_conf_t *lcf, ngx_str_t *agent);


#endif /* _NGX_HTTP_SANDBOX_MCP_AGENTS_H_INCLUDED_ */
