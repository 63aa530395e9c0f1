/*
 * The attempts of a group (opencode_run_task attempts): a run of a group
 * is answered with every attempt beside it.
 */

#ifndef _NGX_HTTP_SANDBOX_MCP_ATTEMPTS_H_INCLUDED_
#define _NGX_HTTP_SANDBOX_MCP_ATTEMPTS_H_INCLUDED_


#include "ngx_http_sandbox_mcp_module.h"


/*
 * h, the run hash (HGETALL) of call->run_id, visible to the call: when it
 * names attempts (`group_runs`, the group's run ids), they go in
 * call->attempts (the first is the group's id) and NGX_OK; else
 * NGX_DECLINED
 */
ngx_int_t ngx_http_sandbox_mcp_attempts_of(ngx_http_sandbox_mcp_call_t *call,
    redisReply *h);

/*
 * The answer of a run of a group: the run object (h, as run_json writes
 * it) with groupId, attempt (1..N) and attempts ([{runId, sessionId,
 * status, diffStat, cost, pullRequestUrl, pullRequestStatus, error}]),
 * once Redis answered; NGX_DECLINED: h names no attempts (the caller
 * answers), NGX_OK: the call is answered (now or later)
 */
ngx_int_t ngx_http_sandbox_mcp_attempts_answer(
    ngx_http_sandbox_mcp_call_t *call, redisReply *h);


#endif /* _NGX_HTTP_SANDBOX_MCP_ATTEMPTS_H_INCLUDED_ */
