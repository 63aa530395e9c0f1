/*
 * opencode_cancel_run: a run not started is cancelled at once; a running
 * one is flagged for its runner.
 */

#include "ngx_http_sandbox_mcp_tool_cancel.h"
#include "ngx_http_sandbox_mcp_args.h"
#include "ngx_http_sandbox_mcp_redis.h"
#include "ngx_http_sandbox_mcp_run.h"
#include "ngx_http_sandbox_mcp_scripts.h"
#include "ngx_http_sandbox_mcp_tools.h"


static void
ngx_http_sandbox_mcp_cancel_reply(void *data, redisReply *reply)
{
    ngx_http_sandbox_mcp_call_t *call = data;

    if (ngx_http_sandbox_mcp_reply_failed(call, reply)) {
        return;
    }

    if (!ngx_http_sandbox_mcp_run_visible(call, reply)) {
        ngx_http_sandbox_mcp_run_not_found(call);
        return;
    }

    ngx_http_sandbox_mcp_tool_output(call,
                                  ngx_http_sandbox_mcp_run_object(call, reply));
}


void
ngx_http_sandbox_mcp_cancel_run(ngx_http_sandbox_mcp_call_t *call)
{
    ngx_str_t                         args[5];
    ngx_pool_t                       *pool;
    ngx_http_sandbox_mcp_key_t        keys[6];
    ngx_http_sandbox_mcp_loc_conf_t  *lcf;

    pool = call->ctx->request->pool;
    lcf = ngx_http_get_module_loc_conf(call->ctx->request,
                                       ngx_http_sandbox_mcp_module);

    if (ngx_http_sandbox_mcp_arg_run_id(call) != NGX_OK) {
        return;
    }

    keys[0].fmt = SMCP_KEY_RUN;
    keys[0].arg = &call->run_id;
    keys[1].fmt = SMCP_KEY_RUN_EVENTS;
    keys[1].arg = &call->run_id;
    keys[2].fmt = SMCP_CHAN_RUN;
    keys[2].arg = &call->run_id;
    keys[3].fmt = SMCP_CHAN_CANCEL;
    keys[3].arg = NULL;
    keys[4].fmt = SMCP_KEY_TENANT_ACTIVE;
    keys[4].arg = &call->ctx->tenant;
    keys[5].fmt = SMCP_KEY_RUN_DIFF;
    keys[5].arg = &call->run_id;

    args[0] = call->ctx->tenant;
    args[1] = ngx_http_sandbox_mcp_redis_number(pool,
                                                 ngx_http_sandbox_mcp_now_ms());
    args[2] = call->run_id;
    args[3] = ngx_http_sandbox_mcp_events_maxlen;
    args[4] = ngx_http_sandbox_mcp_redis_number(pool, lcf->retention);

    ngx_http_sandbox_mcp_call_script(call,
                                     &ngx_http_sandbox_mcp_script_run_cancel,
                                     ngx_http_sandbox_mcp_cancel_reply,
                                     keys, 6, args, 5);
}
