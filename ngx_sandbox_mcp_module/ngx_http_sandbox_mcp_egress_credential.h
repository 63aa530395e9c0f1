/*
 * The directive sandbox_mcp_egress_credential.
 */

#ifndef _NGX_HTTP_SANDBOX_MCP_EGRESS_CREDENTIAL_H_INCLUDED_
#define _NGX_HTTP_SANDBOX_MCP_EGRESS_CREDENTIAL_H_INCLUDED_


#include "ngx_http_sandbox_mcp_egress.h"


/* sandbox_mcp_egress_credential env:NAME|file:PATH [raw|bearer|basic|token] */
char *ngx_http_sandbox_mcp_egress_credential(ngx_conf_t *cf,
    ngx_command_t *cmd, void *conf);


#endif /* _NGX_HTTP_SANDBOX_MCP_EGRESS_CREDENTIAL_H_INCLUDED_ */
