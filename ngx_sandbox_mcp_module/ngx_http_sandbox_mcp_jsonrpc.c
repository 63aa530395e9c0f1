/*
 * JSON-RPC over /mcp: the body parsed (one message or a batch), the
 * session it needs, each message dispatched (initialize, ping, tools/list,
 * tools/call ...).  The calls' answers are _call.c's.
 */

#include "ngx_http_sandbox_mcp_jsonrpc.h"
#include "ngx_http_sandbox_mcp_call.h"
#include "ngx_http_sandbox_mcp_request.h"
#include "ngx_http_sandbox_mcp_cancelled.h"
#include "ngx_http_sandbox_mcp_http.h"
#include "ngx_http_sandbox_mcp_methods.h"
#include "ngx_http_sandbox_mcp_redis.h"
#include "ngx_http_sandbox_mcp_session.h"
#include "ngx_http_sandbox_mcp_stream.h"
#include "ngx_http_sandbox_mcp_tools.h"
#include "ngx_http_sandbox_mcp_defaults.h"

#include "smcp_jsonrpc.h"


static ngx_int_t ngx_http_sandbox_mcp_dispatch(ngx_http_sandbox_mcp_ctx_t *ctx);


static ngx_uint_t
ngx_http_sandbox_mcp_is_method(json_t *msg, const char *name)
{
    const char  *m;

    m = json_string_value(json_object_get(msg, "method"));

    return m != NULL && ngx_strcmp(m, name) == 0;
}


/* a body that is no JSON-RPC message we take: 400 saying why */
static ngx_int_t
ngx_http_sandbox_mcp_bad_body(ngx_http_request_t *r, ngx_int_t rc)
{
    u_char  msg[NGX_HTTP_SANDBOX_MCP_MESSAGE_MAX];

    switch (rc) {

    case SMCP_JSONRPC_PARSE_ERROR:
        return ngx_http_sandbox_mcp_send_error(r, NGX_HTTP_BAD_REQUEST,
                                           NGX_HTTP_SANDBOX_MCP_PARSE_ERROR,
                                           "Parse error: the body is not "
                                           "valid JSON");

    case SMCP_JSONRPC_EMPTY_BATCH:
        return ngx_http_sandbox_mcp_send_error(r, NGX_HTTP_BAD_REQUEST,
                               NGX_HTTP_SANDBOX_MCP_INVALID_REQUEST,
                               "Invalid Request: empty batch");

    case SMCP_JSONRPC_BATCH_TOO_LONG:
        ngx_snprintf(msg, sizeof(msg), "Invalid Request: a batch holds at "
                     "most %d messages%Z", SMCP_JSONRPC_MAX_BATCH);

        return ngx_http_sandbox_mcp_send_error(r, NGX_HTTP_BAD_REQUEST,
                               NGX_HTTP_SANDBOX_MCP_INVALID_REQUEST,
                               (char *) msg);

    default: /* SMCP_JSONRPC_INVALID */
        return ngx_http_sandbox_mcp_send_error(r, NGX_HTTP_BAD_REQUEST,
                               NGX_HTTP_SANDBOX_MCP_INVALID_REQUEST,
                               "Invalid Request: not a JSON-RPC 2.0 message");
    }
}


ngx_int_t
ngx_http_sandbox_mcp_process(ngx_http_request_t *r,
    ngx_http_sandbox_mcp_ctx_t *ctx)
{
    int                               batch;
    ngx_int_t                         rc;
    ngx_str_t                         body;
    ngx_http_sandbox_mcp_loc_conf_t  *lcf;

    lcf = ngx_http_get_module_loc_conf(r, ngx_http_sandbox_mcp_module);
    ctx->next = ngx_http_sandbox_mcp_dispatch;

    if (r->method == NGX_HTTP_DELETE) {
        return ngx_http_sandbox_mcp_session_delete(ctx);
    }

    if (r->method == NGX_HTTP_GET) {
        /* the session's stream, once the session is known */
        return ngx_http_sandbox_mcp_session_lookup(ctx);
    }

    rc = ngx_http_sandbox_mcp_read_body(r, &body, lcf->max_body);

    if (rc == NGX_DECLINED) {
        return ngx_http_sandbox_mcp_send_error(r,
                               NGX_HTTP_REQUEST_ENTITY_TOO_LARGE,
                               NGX_HTTP_SANDBOX_MCP_SERVER_ERROR,
                               "Payload Too Large: the body exceeds "
                               "sandbox_mcp_max_body");
    }

    if (rc != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    rc = smcp_jsonrpc_parse((char *) body.data, body.len, &ctx->body,
                            &batch);
    if (rc != SMCP_JSONRPC_OK) {
        return ngx_http_sandbox_mcp_bad_body(r, rc);
    }

    ctx->batch = batch;

    if (!batch && ngx_http_sandbox_mcp_is_method(ctx->body, "initialize")) {
        ctx->initialize = 1;

        if (json_object_get(ctx->body, "id") == NULL) {
            return ngx_http_sandbox_mcp_send_error(r, NGX_HTTP_BAD_REQUEST,
                               NGX_HTTP_SANDBOX_MCP_INVALID_REQUEST,
                               "Invalid Request: initialize needs an id");
        }

        if (ctx->session_id.len == 0) {
            return ngx_http_sandbox_mcp_session_create(ctx);
        }
    }

    if (ctx->session_id.len == 0) {
        return ngx_http_sandbox_mcp_send_error(r, NGX_HTTP_BAD_REQUEST,
                               NGX_HTTP_SANDBOX_MCP_SERVER_ERROR,
                               "Bad Request: Mcp-Session-Id header is "
                               "required (send initialize first)");
    }

    return ngx_http_sandbox_mcp_session_lookup(ctx);
}


static json_t *
ngx_http_sandbox_mcp_initialize_result(ngx_http_sandbox_mcp_ctx_t *ctx)
{
    return json_pack("{s:s%, s:o, s:{s:s, s:s, s:s}, s:s}",
                     "protocolVersion", (char *) ctx->version.data,
                     ctx->version.len,
                     "capabilities",
                     ngx_http_sandbox_mcp_methods_capabilities(),
                     "serverInfo",
                         "name", NGX_HTTP_SANDBOX_MCP_SERVER_NAME,
                         "title", "OpenCode sandboxes",
                         "version", SMCP_VERSION,
                     "instructions",
                     "Delegate long coding tasks to the OpenCode agent in an "
                     "isolated sandbox. opencode_run_task returns a runId at "
                     "once (or a task, for clients that speak tasks); poll "
                     "opencode_get_result (waitSeconds long-polls) or share "
                     "the watchUrl. Pass the returned sessionId to continue "
                     "in the same workspace and conversation.");
}


static void
ngx_http_sandbox_mcp_start_call(ngx_http_sandbox_mcp_call_t *call,
    json_t *msg)
{
    char                              err[NGX_HTTP_SANDBOX_MCP_ERR_MAX];
    json_t                           *params, *result;
    const char                       *method;
    ngx_http_sandbox_mcp_ctx_t       *ctx;
    ngx_http_sandbox_mcp_loc_conf_t  *lcf;

    ctx = call->ctx;
    lcf = ngx_http_get_module_loc_conf(ctx->request,
                                       ngx_http_sandbox_mcp_module);

    if (!smcp_jsonrpc_valid(msg)) {
        call->id = json_null();
        ngx_http_sandbox_mcp_call_error(call,
                                        NGX_HTTP_SANDBOX_MCP_INVALID_REQUEST,
                                        "Invalid Request: not a JSON-RPC 2.0 "
                                        "message");
        return;
    }

    method = json_string_value(json_object_get(msg, "method"));
    call->id = json_object_get(msg, "id");

    if (method == NULL) {
        /* a response to a request of ours: nothing to answer */
        call->id = NULL;
        return;
    }

    params = json_object_get(msg, "params");

    if (call->id == NULL) {
        /* notifications (initialized, cancelled, ...) are never answered */
        if (ngx_strcmp(method, "notifications/cancelled") == 0) {
            ngx_http_sandbox_mcp_cancelled_notify(ctx, params);
        }

        return;
    }

    call->progress_token = json_object_get(json_object_get(params, "_meta"),
                                           "progressToken");

    if (ngx_strcmp(method, "initialize") == 0) {
        if (!ctx->initialize || ctx->batch) {
            ngx_http_sandbox_mcp_call_error(call,
                                       NGX_HTTP_SANDBOX_MCP_INVALID_REQUEST,
                                       "Invalid Request: initialize must be "
                                       "sent alone, once per session");
            return;
        }

        ngx_http_sandbox_mcp_call_result(call,
                                 ngx_http_sandbox_mcp_initialize_result(ctx));
        return;
    }

    if (ngx_strcmp(method, "ping") == 0) {
        ngx_http_sandbox_mcp_call_empty_result(call);
        return;
    }

    if (ngx_strcmp(method, "tools/list") == 0) {
        result = ngx_http_sandbox_mcp_tools_list(lcf, params, err,
                                                 sizeof(err));
        if (result == NULL) {
            ngx_http_sandbox_mcp_call_error(call,
                                       NGX_HTTP_SANDBOX_MCP_INVALID_PARAMS,
                                       "%s", err);
            return;
        }

        ngx_http_sandbox_mcp_call_result(call, result);
        return;
    }

    if (ngx_strcmp(method, "tools/call") == 0) {
        call->pending = 1;
        ctx->pending++;
        ngx_http_sandbox_mcp_tools_call(call, params);
        return;
    }

    /* tasks, resources, logging, completions */
    if (ngx_http_sandbox_mcp_methods_start(call, method, params)
        != NGX_DECLINED)
    {
        return;
    }

    ngx_http_sandbox_mcp_call_error(call, NGX_HTTP_SANDBOX_MCP_METHOD_NOT_FOUND,
                                    "Method not found: %s", method);
}


static ngx_int_t
ngx_http_sandbox_mcp_dispatch(ngx_http_sandbox_mcp_ctx_t *ctx)
{
    size_t               i, n;
    ngx_http_request_t  *r;

    r = ctx->request;

    if (r->method == NGX_HTTP_GET) {
        return ngx_http_sandbox_mcp_stream_start(ctx);
    }

    if (ctx->batch
        && !(ctx->batch_session
             && ngx_http_sandbox_mcp_is_batch_version(&ctx->version)))
    {
        return ngx_http_sandbox_mcp_send_error(r, NGX_HTTP_BAD_REQUEST,
                               NGX_HTTP_SANDBOX_MCP_INVALID_REQUEST,
                               "Invalid Request: batches are only allowed in "
                               "sessions that negotiated protocol version "
                               "2025-03-26");
    }

    n = ctx->batch ? json_array_size(ctx->body) : 1;

    ctx->calls = ngx_pcalloc(r->pool, n * sizeof(ngx_http_sandbox_mcp_call_t));
    if (ctx->calls == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ctx->ncalls = n;

    /* held while starting the calls: one finishing early must not answer */
    ctx->pending = 1;

    for (i = 0; i < n; i++) {
        ctx->calls[i].ctx = ctx;
        ngx_queue_init(&ctx->calls[i].waiter);

        ngx_http_sandbox_mcp_start_call(&ctx->calls[i],
                                        ctx->batch
                                        ? json_array_get(ctx->body, i)
                                        : ctx->body);
    }

    if (--ctx->pending) {
        return NGX_DONE;
    }

    return ngx_http_sandbox_mcp_call_finish(ctx);
}
