/*
 * The worker's copy of the revoked token ids (the hash `revoked`), kept by
 * pub/sub: no Redis round trip per request.
 */

#ifndef _NGX_HTTP_SANDBOX_MCP_REVOKED_H_INCLUDED_
#define _NGX_HTTP_SANDBOX_MCP_REVOKED_H_INCLUDED_


#include "ngx_http_sandbox_mcp_module.h"


/* registers with the Redis layer: call before it starts */
ngx_int_t ngx_http_sandbox_mcp_revoked_init_worker(ngx_cycle_t *cycle);
void ngx_http_sandbox_mcp_revoked_exit_worker(ngx_cycle_t *cycle);

/*
 * Is the token id revoked?  NGX_DECLINED: yes; NGX_OK: no; NGX_AGAIN: the
 * worker's copy of the revoked set is not up to date (connecting, or
 * Redis was away): check in Redis.
 */
ngx_int_t ngx_http_sandbox_mcp_revoked(ngx_str_t *jti);


#endif /* _NGX_HTTP_SANDBOX_MCP_REVOKED_H_INCLUDED_ */
