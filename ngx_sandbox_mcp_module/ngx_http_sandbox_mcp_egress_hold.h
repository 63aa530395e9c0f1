/*
 * A capped run's model requests in flight, held against what it has left
 * under its maxCostUsd: each holds the most it could cost until it ends.
 */

#ifndef _NGX_HTTP_SANDBOX_MCP_EGRESS_HOLD_H_INCLUDED_
#define _NGX_HTTP_SANDBOX_MCP_EGRESS_HOLD_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>


/* the workers' shared memory zone of the holds (postconfiguration),
 * tagged by module */
ngx_shm_zone_t *ngx_http_sandbox_mcp_egress_hold_zone(ngx_conf_t *cf,
    void *tag);

/*
 * The request r of run holds worst (US dollars) until it ends (its pool's
 * cleanup): NGX_OK.  NGX_BUSY when the run has requests in flight and
 * what they hold and worst would pass left (*held and *n say theirs);
 * NGX_ERROR.
 */
ngx_int_t ngx_http_sandbox_mcp_egress_hold(ngx_http_request_t *r,
    ngx_shm_zone_t *zone, ngx_str_t *run, double worst, double left,
    double *held, ngx_uint_t *n);


#endif /* _NGX_HTTP_SANDBOX_MCP_EGRESS_HOLD_H_INCLUDED_ */
