/*
 * The worker's copy of the revoked token ids (the hash `revoked`), kept by
 * pub/sub: no Redis round trip per request while it holds them all; when
 * it cannot tell (not loaded yet, Redis was away, more ids than
 * sandbox_mcp_revoked_max), Redis is asked instead.
 */

#ifndef _NGX_HTTP_SANDBOX_MCP_REVOKED_H_INCLUDED_
#define _NGX_HTTP_SANDBOX_MCP_REVOKED_H_INCLUDED_


#include "ngx_http_sandbox_mcp_module.h"
#include "ngx_http_sandbox_mcp_redis.h"


/* Redis's answer: NGX_OK not revoked, NGX_DECLINED revoked, NGX_ERROR
 * Redis failed */
typedef void (*ngx_http_sandbox_mcp_revoked_ask_pt)(void *data,
    ngx_int_t rc);


/* registers with the Redis layer: call before it starts; max: the most
 * ids the worker keeps (0: none, every token is checked in Redis) */
ngx_int_t ngx_http_sandbox_mcp_revoked_init_worker(ngx_cycle_t *cycle,
    ngx_uint_t max);
void ngx_http_sandbox_mcp_revoked_exit_worker(ngx_cycle_t *cycle);

/*
 * Is the token id revoked?  NGX_DECLINED: yes; NGX_OK: no; NGX_AGAIN: the
 * worker's copy of the revoked set cannot tell (not loaded since the last
 * connect, or more ids than it holds): check in Redis.
 */
ngx_int_t ngx_http_sandbox_mcp_revoked(ngx_str_t *jti);

/* Redis asked whether jti is revoked (HEXISTS), handler(data, rc) with the
 * answer; NULL: Redis is away (answer 503) */
ngx_http_sandbox_mcp_redis_cmd_t *ngx_http_sandbox_mcp_revoked_ask(
    ngx_pool_t *pool, ngx_str_t *jti,
    ngx_http_sandbox_mcp_revoked_ask_pt handler, void *data);


#endif /* _NGX_HTTP_SANDBOX_MCP_REVOKED_H_INCLUDED_ */
