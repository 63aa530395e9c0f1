/*
 * The tool opencode_get_events, and a run's event as JSON.
 */

#ifndef _NGX_HTTP_SANDBOX_MCP_TOOL_EVENTS_H_INCLUDED_
#define _NGX_HTTP_SANDBOX_MCP_TOOL_EVENTS_H_INCLUDED_


#include "ngx_http_sandbox_mcp_module.h"


/* starts the call (its arguments are known to the tool's schema) */
void ngx_http_sandbox_mcp_get_events(ngx_http_sandbox_mcp_call_t *call);

/* an entry of an XRANGE reply of a run's events as the tools (and the
 * dashboard's stream) show it: {id, type, time, data}; NULL if malformed */
json_t *ngx_http_sandbox_mcp_event_object(redisReply *e);


#endif /* _NGX_HTTP_SANDBOX_MCP_TOOL_EVENTS_H_INCLUDED_ */
