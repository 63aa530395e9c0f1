/*
 * The sandbox's run token, at the egress proxy.
 */

#ifndef _NGX_HTTP_SANDBOX_MCP_EGRESS_TOKEN_H_INCLUDED_
#define _NGX_HTTP_SANDBOX_MCP_EGRESS_TOKEN_H_INCLUDED_


#include "ngx_http_sandbox_mcp_egress.h"


/* the first JWT-shaped value of the token headers; NGX_DECLINED: none */
ngx_int_t ngx_http_sandbox_mcp_egress_token(ngx_http_request_t *r,
    ngx_str_t *token);

/* every token header removed from the request */
ngx_int_t ngx_http_sandbox_mcp_egress_strip(ngx_http_request_t *r);

/* the claims of a valid token of scope want, or NULL and *refusal */
json_t *ngx_http_sandbox_mcp_egress_claims(ngx_http_request_t *r,
    ngx_str_t *token, const char *want, const char **refusal);

/* $sandbox_mcp_token_run: the run of a valid token, without Redis */
ngx_int_t ngx_http_sandbox_mcp_egress_token_run(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data);


#endif /* _NGX_HTTP_SANDBOX_MCP_EGRESS_TOKEN_H_INCLUDED_ */
