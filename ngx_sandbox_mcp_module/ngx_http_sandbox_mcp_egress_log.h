/*
 * The egress audit record (log phase).
 */

#ifndef _NGX_HTTP_SANDBOX_MCP_EGRESS_LOG_H_INCLUDED_
#define _NGX_HTTP_SANDBOX_MCP_EGRESS_LOG_H_INCLUDED_


#include "ngx_http_sandbox_mcp_egress.h"


ngx_int_t ngx_http_sandbox_mcp_egress_log(ngx_http_request_t *r);


#endif /* _NGX_HTTP_SANDBOX_MCP_EGRESS_LOG_H_INCLUDED_ */
