/*
 * The egress meter: what each model request through the egress cost, read
 * from the provider's answer (smcp_usage.h) and priced per model
 * (sandbox_mcp_egress_price); the run's metered totals in Redis, and its
 * maxCostUsd held against them.
 */

#ifndef _NGX_HTTP_SANDBOX_MCP_EGRESS_METER_H_INCLUDED_
#define _NGX_HTTP_SANDBOX_MCP_EGRESS_METER_H_INCLUDED_


#include "ngx_http_sandbox_mcp_egress.h"

#include <hiredis/hiredis.h>


/* sandbox_mcp_egress_price MODEL INPUT OUTPUT [CACHE_READ [CACHE_WRITE]] */
char *ngx_http_sandbox_mcp_egress_price(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);

/* a model request's body was read (request: what it said): NGX_OK, its
 * answer to be metered; or the refusal's status and err (a run with a cap
 * asking for a model no price covers) */
ngx_uint_t ngx_http_sandbox_mcp_egress_meter_begin(ngx_http_request_t *r,
    ngx_http_sandbox_mcp_egress_ctx_t *ctx, smcp_usage_t *request,
    ngx_uint_t path_model, char *err, size_t errlen);

/*
 * A capped run's model request (ctx->worst: what it could cost) holds that
 * while it goes, against the run's cost read again now (its body may have
 * come slowly): NGX_OK, and decided(r, NGX_OK or the refusal's status,
 * why) once Redis answers (429 when the run's requests in flight hold too
 * much of what it has left, 402 past its cap); NGX_ERROR.
 */
ngx_int_t ngx_http_sandbox_mcp_egress_meter_hold(ngx_http_request_t *r,
    ngx_http_sandbox_mcp_egress_ctx_t *ctx,
    ngx_http_sandbox_mcp_egress_decided_pt decided);

/* NULL, or the refusal of a model request: the run has spent its
 * maxCostUsd (the run hash's max_cost and metered_cost) */
const char *ngx_http_sandbox_mcp_egress_meter_check(ngx_http_request_t *r,
    ngx_http_sandbox_mcp_egress_ctx_t *ctx, redisReply *max,
    redisReply *metered);

/* at the log phase: the request's usage into the audit record (ev) and
 * into the run's totals */
void ngx_http_sandbox_mcp_egress_meter_log(ngx_http_request_t *r,
    ngx_http_sandbox_mcp_egress_ctx_t *ctx, json_t *ev);


extern ngx_module_t  ngx_http_sandbox_mcp_meter_module;


#endif /* _NGX_HTTP_SANDBOX_MCP_EGRESS_METER_H_INCLUDED_ */
