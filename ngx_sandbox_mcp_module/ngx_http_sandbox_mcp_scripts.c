/*
 * The module's Lua scripts (the NAME.lua files of common/scripts/, embedded
 * at build by smcp-embed into ngx_http_sandbox_mcp_lua.h): each is one
 * atomic Redis step, so no reader ever sees half a run.  "Another
 * tenant's object" and "no such object" give the same answer on purpose.
 */

#include "ngx_http_sandbox_mcp_scripts.h"

#include "ngx_http_sandbox_mcp_lua.h"


#define NGX_HTTP_SANDBOX_MCP_SCRIPT(name)                                     \
    ngx_http_sandbox_mcp_script_t  ngx_http_sandbox_mcp_script_##name =       \
        { #name, smcp_lua_##name, "" }


NGX_HTTP_SANDBOX_MCP_SCRIPT(session_create);
NGX_HTTP_SANDBOX_MCP_SCRIPT(session_touch);
NGX_HTTP_SANDBOX_MCP_SCRIPT(session_delete);
NGX_HTTP_SANDBOX_MCP_SCRIPT(run_create);
NGX_HTTP_SANDBOX_MCP_SCRIPT(run_cancel);
NGX_HTTP_SANDBOX_MCP_SCRIPT(run_attempts);
NGX_HTTP_SANDBOX_MCP_SCRIPT(run_pick);
NGX_HTTP_SANDBOX_MCP_SCRIPT(run_message);
NGX_HTTP_SANDBOX_MCP_SCRIPT(run_inbox);
NGX_HTTP_SANDBOX_MCP_SCRIPT(run_diff);
NGX_HTTP_SANDBOX_MCP_SCRIPT(run_events);
NGX_HTTP_SANDBOX_MCP_SCRIPT(run_meter);
NGX_HTTP_SANDBOX_MCP_SCRIPT(ui_events);
NGX_HTTP_SANDBOX_MCP_SCRIPT(subscribe);
NGX_HTTP_SANDBOX_MCP_SCRIPT(revoke);
NGX_HTTP_SANDBOX_MCP_SCRIPT(revoked_load);
NGX_HTTP_SANDBOX_MCP_SCRIPT(oauth_client);
NGX_HTTP_SANDBOX_MCP_SCRIPT(oauth_code);
NGX_HTTP_SANDBOX_MCP_SCRIPT(oauth_grant);
NGX_HTTP_SANDBOX_MCP_SCRIPT(oauth_pending);
NGX_HTTP_SANDBOX_MCP_SCRIPT(oauth_github);


ngx_http_sandbox_mcp_script_t  *ngx_http_sandbox_mcp_scripts[] = {
    &ngx_http_sandbox_mcp_script_session_create,
    &ngx_http_sandbox_mcp_script_session_touch,
    &ngx_http_sandbox_mcp_script_session_delete,
    &ngx_http_sandbox_mcp_script_run_create,
    &ngx_http_sandbox_mcp_script_run_cancel,
    &ngx_http_sandbox_mcp_script_run_attempts,
    &ngx_http_sandbox_mcp_script_run_pick,
    &ngx_http_sandbox_mcp_script_run_message,
    &ngx_http_sandbox_mcp_script_run_inbox,
    &ngx_http_sandbox_mcp_script_run_diff,
    &ngx_http_sandbox_mcp_script_run_events,
    &ngx_http_sandbox_mcp_script_run_meter,
    &ngx_http_sandbox_mcp_script_ui_events,
    &ngx_http_sandbox_mcp_script_subscribe,
    &ngx_http_sandbox_mcp_script_revoke,
    &ngx_http_sandbox_mcp_script_revoked_load,
    &ngx_http_sandbox_mcp_script_oauth_client,
    &ngx_http_sandbox_mcp_script_oauth_code,
    &ngx_http_sandbox_mcp_script_oauth_grant,
    &ngx_http_sandbox_mcp_script_oauth_pending,
    &ngx_http_sandbox_mcp_script_oauth_github,
    NULL
};
