/*
 * Model requests through the egress proxy: the provider's server-side
 * tools they ask for (sandbox_mcp_egress_model,
 * sandbox_mcp_egress_server_tools).
 */

#ifndef _NGX_HTTP_SANDBOX_MCP_EGRESS_MODEL_H_INCLUDED_
#define _NGX_HTTP_SANDBOX_MCP_EGRESS_MODEL_H_INCLUDED_


#include "ngx_http_sandbox_mcp_egress.h"


/* the read body of a model request: NGX_OK, or the refusal's status and
 * err */
ngx_uint_t ngx_http_sandbox_mcp_egress_model(ngx_http_request_t *r,
    char *err, size_t errlen);

/* sandbox_mcp_egress_server_tools off | all | NAME ... */
char *ngx_http_sandbox_mcp_egress_server_tools(ngx_conf_t *cf,
    ngx_command_t *cmd, void *conf);


#endif /* _NGX_HTTP_SANDBOX_MCP_EGRESS_MODEL_H_INCLUDED_ */
