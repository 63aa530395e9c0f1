/*
 * The dashboard token of a run's watchUrl, kept by the worker while it is
 * young.
 */

#ifndef _NGX_HTTP_SANDBOX_MCP_WATCH_TOKEN_H_INCLUDED_
#define _NGX_HTTP_SANDBOX_MCP_WATCH_TOKEN_H_INCLUDED_


#include "ngx_http_sandbox_mcp_module.h"


/*
 * A ui token for the run, signed for the call's tenant, in the request's
 * pool: the one this worker minted for the same run, tenant and location
 * while less than half of its lifetime has passed and its id is not
 * revoked, else a new one (kept in its place).  NGX_OK or NGX_ERROR.
 */
ngx_int_t ngx_http_sandbox_mcp_watch_token(ngx_http_sandbox_mcp_call_t *call,
    ngx_str_t *run_id, ngx_str_t *token);


#endif /* _NGX_HTTP_SANDBOX_MCP_WATCH_TOKEN_H_INCLUDED_ */
