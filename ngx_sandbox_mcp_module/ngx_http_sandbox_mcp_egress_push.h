/*
 * The writes a run may make through the egress proxy: pushes and pull
 * requests.
 */

#ifndef _NGX_HTTP_SANDBOX_MCP_EGRESS_PUSH_H_INCLUDED_
#define _NGX_HTTP_SANDBOX_MCP_EGRESS_PUSH_H_INCLUDED_


#include "ngx_http_sandbox_mcp_egress.h"


/*
 * What the request is (*kind) for a location's push mode; NULL, or the
 * refusal (*status) of a request no route carries.
 */
const char *ngx_http_sandbox_mcp_egress_classify(ngx_http_request_t *r,
    ngx_uint_t push, ngx_uint_t *kind, ngx_uint_t *status);

/* no Content-Encoding, or identity */
ngx_uint_t ngx_http_sandbox_mcp_egress_identity(ngx_http_request_t *r);

/* the body of a push, a pull request or a model request is read: it
 * decides (the body handler of ngx_http_read_client_request_body) */
void ngx_http_sandbox_mcp_egress_body(ngx_http_request_t *r);
void ngx_http_sandbox_mcp_egress_decided(ngx_http_request_t *r,
    ngx_uint_t status, const char *err);


#endif /* _NGX_HTTP_SANDBOX_MCP_EGRESS_PUSH_H_INCLUDED_ */
