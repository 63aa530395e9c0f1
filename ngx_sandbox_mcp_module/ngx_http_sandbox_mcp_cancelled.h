/*
 * notifications/cancelled: a waiting request of the session (a long-poll,
 * a tasks/result) stops waiting and ends without an answer; the run goes
 * on.  Sent to every worker on the session's channel run:mcp:{sid}.
 */

#ifndef _NGX_HTTP_SANDBOX_MCP_CANCELLED_H_INCLUDED_
#define _NGX_HTTP_SANDBOX_MCP_CANCELLED_H_INCLUDED_


#include "ngx_http_sandbox_mcp_module.h"


/* the notification (params {requestId, reason?}): published */
void ngx_http_sandbox_mcp_cancelled_notify(ngx_http_sandbox_mcp_ctx_t *ctx,
    json_t *params);

/* call starts waiting: a cancellation of its id ends it */
void ngx_http_sandbox_mcp_cancelled_watch(ngx_http_sandbox_mcp_call_t *call);


#endif /* _NGX_HTTP_SANDBOX_MCP_CANCELLED_H_INCLUDED_ */
