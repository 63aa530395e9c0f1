/*
 * The run object of opencode_get_result and opencode_cancel_run written
 * straight as JSON text, and its reading of a decimal (opencode_list_runs'
 * cost).
 */

#ifndef _NGX_HTTP_SANDBOX_MCP_RUN_JSON_H_INCLUDED_
#define _NGX_HTTP_SANDBOX_MCP_RUN_JSON_H_INCLUDED_


#include "ngx_http_sandbox_mcp_module.h"


/*
 * The run hash h (HGETALL) as the run object of call->run_id, with its
 * watchUrl, in the request's pool: the text json_dumps(JSON_COMPACT)
 * writes for the same object, byte for byte.  Invalid UTF-8 in h is
 * repaired in place (the reply is the caller's).  NGX_OK or NGX_ERROR.
 */
ngx_int_t ngx_http_sandbox_mcp_run_json(ngx_http_sandbox_mcp_call_t *call,
    redisReply *h, ngx_str_t *text);

/* a decimal of the run hash (a cost, a cap) as the run object reads it:
 * NGX_DECLINED when absent, empty or not a number within +-1e15 */
ngx_int_t ngx_http_sandbox_mcp_run_number(redisReply *v, double *d);


#endif /* _NGX_HTTP_SANDBOX_MCP_RUN_JSON_H_INCLUDED_ */
