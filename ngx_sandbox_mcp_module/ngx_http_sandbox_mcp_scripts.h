/*
 * The Lua scripts behind every multi-key step: each one is a single atomic
 * Redis step, so no reader ever sees half a run.
 */

#ifndef _NGX_HTTP_SANDBOX_MCP_SCRIPTS_H_INCLUDED_
#define _NGX_HTTP_SANDBOX_MCP_SCRIPTS_H_INCLUDED_


#include "ngx_http_sandbox_mcp_redis.h"


extern ngx_http_sandbox_mcp_script_t
    ngx_http_sandbox_mcp_script_session_create;
extern ngx_http_sandbox_mcp_script_t
    ngx_http_sandbox_mcp_script_session_touch;
extern ngx_http_sandbox_mcp_script_t
    ngx_http_sandbox_mcp_script_session_delete;
extern ngx_http_sandbox_mcp_script_t
    ngx_http_sandbox_mcp_script_run_create;
extern ngx_http_sandbox_mcp_script_t
    ngx_http_sandbox_mcp_script_run_cancel;
extern ngx_http_sandbox_mcp_script_t
    ngx_http_sandbox_mcp_script_run_attempts;
extern ngx_http_sandbox_mcp_script_t
    ngx_http_sandbox_mcp_script_run_pick;
extern ngx_http_sandbox_mcp_script_t
    ngx_http_sandbox_mcp_script_run_message;
extern ngx_http_sandbox_mcp_script_t
    ngx_http_sandbox_mcp_script_run_inbox;
extern ngx_http_sandbox_mcp_script_t
    ngx_http_sandbox_mcp_script_run_diff;
extern ngx_http_sandbox_mcp_script_t
    ngx_http_sandbox_mcp_script_run_events;
extern ngx_http_sandbox_mcp_script_t
    ngx_http_sandbox_mcp_script_run_meter;
extern ngx_http_sandbox_mcp_script_t
    ngx_http_sandbox_mcp_script_ui_events;
extern ngx_http_sandbox_mcp_script_t
    ngx_http_sandbox_mcp_script_revoke;
extern ngx_http_sandbox_mcp_script_t
    ngx_http_sandbox_mcp_script_revoked_load;
extern ngx_http_sandbox_mcp_script_t
    ngx_http_sandbox_mcp_script_oauth_client;
extern ngx_http_sandbox_mcp_script_t
    ngx_http_sandbox_mcp_script_oauth_code;
extern ngx_http_sandbox_mcp_script_t
    ngx_http_sandbox_mcp_script_oauth_grant;
extern ngx_http_sandbox_mcp_script_t
    ngx_http_sandbox_mcp_script_oauth_pending;
extern ngx_http_sandbox_mcp_script_t
    ngx_http_sandbox_mcp_script_oauth_github;

/* NULL-terminated: the scripts the Redis layer loads (on every connect,
 * once Redis has loaded its dataset, after a NOSCRIPT) */
extern ngx_http_sandbox_mcp_script_t  *ngx_http_sandbox_mcp_scripts[];
extern ngx_http_sandbox_mcp_script_t
    ngx_http_sandbox_mcp_script_subscribe;


#endif /* _NGX_HTTP_SANDBOX_MCP_SCRIPTS_H_INCLUDED_ */
