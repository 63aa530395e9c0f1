/*
 * JSON-RPC over /mcp: the body parsed (one message or a batch), the
 * session it needs, each message dispatched (initialize, ping, tools/list,
 * tools/call), and the answer once every call of the request is done.
 */

#include "ngx_http_sandbox_mcp_jsonrpc.h"
#include "ngx_http_sandbox_mcp_handler.h"
#include "ngx_http_sandbox_mcp_cancelled.h"
#include "ngx_http_sandbox_mcp_http.h"
#include "ngx_http_sandbox_mcp_methods.h"
#include "ngx_http_sandbox_mcp_redis.h"
#include "ngx_http_sandbox_mcp_session.h"
#include "ngx_http_sandbox_mcp_stream.h"
#include "ngx_http_sandbox_mcp_tools.h"
#include "ngx_http_sandbox_mcp_defaults.h"

#include "smcp_jsonrpc.h"


static ngx_int_t ngx_http_sandbox_mcp_finish(ngx_http_sandbox_mcp_ctx_t *ctx);


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
                         "version", NGX_HTTP_SANDBOX_MCP_VERSION,
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
        ngx_http_sandbox_mcp_call_result(call, json_object());
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


ngx_int_t
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

    return ngx_http_sandbox_mcp_finish(ctx);
}


void
ngx_http_sandbox_mcp_call_result(ngx_http_sandbox_mcp_call_t *call,
    json_t *result)
{
    json_t *(*filter)(ngx_http_sandbox_mcp_call_t *call, json_t *result);

    call->output.len = 0;

    if (result == NULL) {
        ngx_http_sandbox_mcp_call_error(call,
                                        NGX_HTTP_SANDBOX_MCP_INTERNAL_ERROR,
                                        "Internal error");
        return;
    }

    if (call->filter) {
        filter = call->filter;
        call->filter = NULL;

        result = filter(call, result);
        if (result == NULL) {
            /* the filter answered */
            return;
        }
    }

    if (call->response) {
        json_decref(call->response);
    }

    call->response = json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0",
                               "id", call->id, "result", result);
}


void
ngx_http_sandbox_mcp_call_output(ngx_http_sandbox_mcp_call_t *call,
    json_t *result, ngx_str_t *output)
{
    ngx_uint_t  filtered;

    filtered = call->filter != NULL;

    ngx_http_sandbox_mcp_call_result(call, result);

    /* kept as it came: a filter may have changed it in place */
    if (!filtered && result && call->response
        && json_object_get(call->response, "result") == result)
    {
        call->output = *output;
    }
}


ngx_int_t
ngx_http_sandbox_mcp_call_output_text(ngx_http_sandbox_mcp_call_t *call,
    ngx_str_t *output)
{
    json_t                      *response;
    ngx_http_sandbox_mcp_ctx_t  *ctx;

    ctx = call->ctx;

    if (ctx->batch || ctx->finish || call->filter || call->progress) {
        return NGX_DECLINED;
    }

    response = json_pack("{s:s, s:O, s:{}}", "jsonrpc", "2.0",
                         "id", call->id, "result");
    if (response == NULL) {
        return NGX_ERROR;
    }

    if (call->response) {
        json_decref(call->response);
    }

    call->response = response;
    call->output = *output;

    return NGX_OK;
}


/* what escaping adds to each byte */
static u_char  ngx_http_sandbox_mcp_json_extra[256] = {
    5, 5, 5, 5, 5, 5, 5, 5, 1, 1, 1, 5, 1, 1, 5, 5,     /* \b \t \n \f \r */
    5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5,
    0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,     /* " */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0      /* \ */
    /* the rest 0 */
};


uintptr_t
ngx_http_sandbox_mcp_escape_json(u_char *dst, u_char *src, size_t size)
{
    u_char  *last, *run;
    size_t   len;

    last = src + size;

    if (dst == NULL) {
        len = 0;

        while (src < last) {
            len += ngx_http_sandbox_mcp_json_extra[*src++];
        }

        return (uintptr_t) len;
    }

    while (src < last) {
        run = src;

        while (src < last && ngx_http_sandbox_mcp_json_extra[*src] == 0) {
            src++;
        }

        dst = ngx_cpymem(dst, run, src - run);

        if (src == last) {
            break;
        }

        dst = (u_char *) ngx_escape_json(dst, src++, 1);
    }

    return (uintptr_t) dst;
}


/*
 * A single answer that is a tool's output, written from its text: the
 * envelope and the result as json_dumps() writes them (same keys, same
 * order, compact), structuredContent verbatim and once escaped as the
 * text content, instead of serialising the result twice more.
 */
static ngx_int_t
ngx_http_sandbox_mcp_send_output(ngx_http_request_t *r, ngx_uint_t status,
    ngx_http_sandbox_mcp_call_t *call)
{
    char       *id;
    size_t      len, idlen;
    u_char     *b, *p;
    ngx_str_t  *out;

    static u_char  head[] = "{\"jsonrpc\":\"2.0\",\"id\":";
    static u_char  text[] = ",\"result\":{\"content\":[{\"type\":\"text\","
                            "\"text\":\"";
    static u_char  sc[] = "\"}],\"structuredContent\":";
    static u_char  tail[] = "}}\n";

    out = &call->output;

    id = json_dumps(call->id, JSON_COMPACT | JSON_ENCODE_ANY);
    if (id == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    idlen = ngx_strlen(id);

    len = sizeof(head) - 1 + idlen + sizeof(text) - 1
          + out->len + ngx_http_sandbox_mcp_escape_json(NULL, out->data,
                                                        out->len)
          + sizeof(sc) - 1 + out->len + sizeof(tail) - 1;

    b = ngx_pnalloc(r->pool, len);
    if (b == NULL) {
        free(id);
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    p = ngx_cpymem(b, head, sizeof(head) - 1);
    p = ngx_cpymem(p, id, idlen);
    p = ngx_cpymem(p, text, sizeof(text) - 1);
    p = (u_char *) ngx_http_sandbox_mcp_escape_json(p, out->data, out->len);
    p = ngx_cpymem(p, sc, sizeof(sc) - 1);
    p = ngx_cpymem(p, out->data, out->len);
    p = ngx_cpymem(p, tail, sizeof(tail) - 1);

    free(id);

    return ngx_http_sandbox_mcp_send_body(r, status, "application/json", b,
                                          p - b);
}


void
ngx_http_sandbox_mcp_call_message(u_char *buf, size_t size, const char *fmt,
    va_list args)
{
    u_char  *p;

    p = ngx_vslprintf(buf, buf + size - 1, fmt, args);
    *p = '\0';
}


void
ngx_http_sandbox_mcp_call_error(ngx_http_sandbox_mcp_call_t *call,
    ngx_int_t code, const char *fmt, ...)
{
    va_list  args;
    u_char   msg[NGX_HTTP_SANDBOX_MCP_MESSAGE_MAX];

    va_start(args, fmt);
    ngx_http_sandbox_mcp_call_message(msg, sizeof(msg), fmt, args);
    va_end(args);

    call->output.len = 0;

    if (call->response) {
        json_decref(call->response);
    }

    call->response = ngx_http_sandbox_mcp_error_object(call->id, code,
                                                       (char *) msg);
}


void
ngx_http_sandbox_mcp_call_unavailable(ngx_http_sandbox_mcp_call_t *call)
{
    if (!call->ctx->batch) {
        call->ctx->status = NGX_HTTP_SERVICE_UNAVAILABLE;
    }

    ngx_http_sandbox_mcp_call_error(call, NGX_HTTP_SANDBOX_MCP_INTERNAL_ERROR,
                                    "%s",
                                    ngx_http_sandbox_mcp_redis_unavailable());
}


void
ngx_http_sandbox_mcp_call_done(ngx_http_sandbox_mcp_call_t *call)
{
    ngx_int_t                    rc;
    ngx_http_sandbox_mcp_ctx_t  *ctx;

    ctx = call->ctx;

    if (!call->pending || ctx->done) {
        return;
    }

    if (call->hold) {
        /* a filter went on with another step, which ends the call */
        call->hold = 0;
        return;
    }

    call->pending = 0;

    if (--ctx->pending) {
        return;
    }

    rc = ctx->finish ? ctx->finish(ctx) : ngx_http_sandbox_mcp_finish(ctx);

    if (rc != NGX_DONE) {
        ngx_http_sandbox_mcp_finalize(ctx, rc);
    }
}


static ngx_int_t
ngx_http_sandbox_mcp_finish(ngx_http_sandbox_mcp_ctx_t *ctx)
{
    json_t                       *out, *one;
    ngx_int_t                     rc;
    ngx_uint_t                    i, n;
    ngx_http_request_t           *r;
    ngx_http_sandbox_mcp_call_t  *call;

    static ngx_str_t  one_sec = ngx_string("1");

    r = ctx->request;

    out = ctx->batch ? json_array() : NULL;
    one = NULL;
    call = NULL;
    n = 0;

    for (i = 0; i < ctx->ncalls; i++) {
        if (ctx->calls[i].response == NULL) {
            continue;
        }

        n++;
        one = ctx->calls[i].response;
        call = &ctx->calls[i];

        if (out) {
            json_array_append(out, one);
        }
    }

    if (n == 0) {
        json_decref(out);
        /* only notifications or responses */
        return ngx_http_sandbox_mcp_send_json(r, NGX_HTTP_ACCEPTED, NULL);
    }

    if (ctx->initialize
        && ngx_http_sandbox_mcp_add_header(r, "Mcp-Session-Id",
                                           &ctx->session_id)
           != NGX_OK)
    {
        json_decref(out);
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (ctx->status == NGX_HTTP_SERVICE_UNAVAILABLE
        && ngx_http_sandbox_mcp_add_header(r, "Retry-After", &one_sec)
           != NGX_OK)
    {
        json_decref(out);
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (out == NULL && call->output.len) {
        return ngx_http_sandbox_mcp_send_output(r, ctx->status ? ctx->status
                                                               : NGX_HTTP_OK,
                                                call);
    }

    rc = ngx_http_sandbox_mcp_send_json(r, ctx->status ? ctx->status
                                                       : NGX_HTTP_OK,
                                        out ? out : one);
    json_decref(out);

    return rc;
}
