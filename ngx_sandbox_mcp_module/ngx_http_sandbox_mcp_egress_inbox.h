/*
 * sandbox_mcp_egress_inbox: where a sandbox takes the messages sent to
 * its running agent (opencode_send_message).
 */

#ifndef _NGX_HTTP_SANDBOX_MCP_EGRESS_INBOX_H_INCLUDED_
#define _NGX_HTTP_SANDBOX_MCP_EGRESS_INBOX_H_INCLUDED_


#include "ngx_http_sandbox_mcp_egress.h"


/* the route name the directive gives its location, announced */
#define NGX_HTTP_SANDBOX_MCP_INBOX_ROUTE        "inbox"


char *ngx_http_sandbox_mcp_egress_inbox(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);


#endif /* _NGX_HTTP_SANDBOX_MCP_EGRESS_INBOX_H_INCLUDED_ */
