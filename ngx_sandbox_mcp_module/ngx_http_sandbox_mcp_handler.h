/*
 * The /mcp content handler.
 */

#ifndef _NGX_HTTP_SANDBOX_MCP_HANDLER_H_INCLUDED_
#define _NGX_HTTP_SANDBOX_MCP_HANDLER_H_INCLUDED_


#include "ngx_http_sandbox_mcp_module.h"


ngx_int_t ngx_http_sandbox_mcp_handler(ngx_http_request_t *r);


#endif /* _NGX_HTTP_SANDBOX_MCP_HANDLER_H_INCLUDED_ */
