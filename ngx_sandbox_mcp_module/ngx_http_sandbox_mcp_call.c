/*
 * A call's answer (a result, a tool's output, an error), and the request's
 * answer once every call of it is done: one message, a batch, or a tool's
 * output written from its text.
 */

#include "ngx_http_sandbox_mcp_call.h"
#include "ngx_http_sandbox_mcp_http.h"
#include "ngx_http_sandbox_mcp_redis.h"
#include "ngx_http_sandbox_mcp_request.h"
#include "ngx_http_sandbox_mcp_defaults.h"

#include "smcp_jsonrpc.h"


void
ngx_http_sandbox_mcp_call_result(ngx_http_sandbox_mcp_call_t *call,
    json_t *result)
{
    json_t *(*filter)(ngx_http_sandbox_mcp_call_t *call, json_t *result);

    call->output.len = 0;
    call->result_text = 0;

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


void
ngx_http_sandbox_mcp_call_empty_result(ngx_http_sandbox_mcp_call_t *call)
{
    ngx_http_sandbox_mcp_ctx_t  *ctx;

    ctx = call->ctx;

    if (ctx->batch || ctx->finish || call->filter || call->progress) {
        ngx_http_sandbox_mcp_call_result(call, json_object());
        return;
    }

    if (call->response) {
        json_decref(call->response);
    }

    /* answered (json_null() is never freed): the text is written at the
     * end, as json_dumps() writes {"jsonrpc":"2.0","id":ID,"result":{}} */
    call->response = json_null();
    ngx_str_set(&call->output, "{}");
    call->result_text = 1;
}


ngx_int_t
ngx_http_sandbox_mcp_call_output_text(ngx_http_sandbox_mcp_call_t *call,
    ngx_str_t *output)
{
    ngx_http_sandbox_mcp_ctx_t  *ctx;

    ctx = call->ctx;

    if (ctx->batch || ctx->finish || call->filter || call->progress) {
        return NGX_DECLINED;
    }

    if (call->response) {
        json_decref(call->response);
    }

    /* answered, no error (json_null() is never freed): the metrics' */
    call->response = json_null();
    call->output = *output;
    call->result_text = 0;

    return NGX_OK;
}


/*
 * A single answer written from its text: a tool's output (the envelope
 * and the result as json_dumps() writes them: same keys, same order,
 * compact; structuredContent verbatim and once escaped as the text
 * content) instead of serialising the result twice more, or a result
 * given as text (result_text: ping's {}).  Sent in three parts, the
 * output itself not copied.
 */
static ngx_int_t
ngx_http_sandbox_mcp_send_output(ngx_http_request_t *r, ngx_uint_t status,
    ngx_http_sandbox_mcp_call_t *call)
{
    char        *id;
    size_t       len, idlen;
    u_char      *b, *p;
    ngx_str_t   *out, parts[3];
    json_int_t   v;
    u_char       num[NGX_INT64_LEN + 1];

    static u_char  head[] = "{\"jsonrpc\":\"2.0\",\"id\":";
    static u_char  result[] = ",\"result\":";
    static u_char  text[] = ",\"result\":{\"content\":[{\"type\":\"text\","
                            "\"text\":\"";
    static u_char  sc[] = "\"}],\"structuredContent\":";
    static u_char  tail[] = "}}\n";

    out = &call->output;

    if (json_is_integer(call->id)) {
        /* as jansson writes it: "%" JSON_INTEGER_FORMAT (the magnitude
         * unsigned: -2^63 has no positive int64_t) */
        id = NULL;
        v = json_integer_value(call->id);
        p = num;

        if (v < 0) {
            *p++ = '-';
        }

        idlen = ngx_sprintf(p, "%uL", v < 0 ? 0 - (uint64_t) v : (uint64_t) v)
                - num;

    } else {
        id = json_dumps(call->id, JSON_COMPACT | JSON_ENCODE_ANY);
        if (id == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        idlen = ngx_strlen(id);
    }

    /* written here: the envelope up to the verbatim output (and the text
     * content before it); the output itself and the tail are sent as they
     * are */

    if (call->result_text) {
        len = sizeof(head) - 1 + idlen + sizeof(result) - 1;

    } else {
        len = sizeof(head) - 1 + idlen + sizeof(text) - 1
              + out->len + ngx_http_sandbox_mcp_escape_json(NULL, out->data,
                                                            out->len)
              + sizeof(sc) - 1;
    }

    b = ngx_pnalloc(r->pool, len);
    if (b == NULL) {
        free(id);
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    p = ngx_cpymem(b, head, sizeof(head) - 1);
    p = ngx_cpymem(p, id ? (u_char *) id : num, idlen);

    free(id);

    if (call->result_text) {
        p = ngx_cpymem(p, result, sizeof(result) - 1);

        parts[2].data = tail + 1;
        parts[2].len = sizeof(tail) - 2;

    } else {
        p = ngx_cpymem(p, text, sizeof(text) - 1);
        p = (u_char *) ngx_http_sandbox_mcp_escape_json(p, out->data,
                                                        out->len);
        p = ngx_cpymem(p, sc, sizeof(sc) - 1);

        parts[2].data = tail;
        parts[2].len = sizeof(tail) - 1;
    }

    parts[0].data = b;
    parts[0].len = p - b;
    parts[1] = *out;

    return ngx_http_sandbox_mcp_send_parts(r, status, "application/json",
                                           parts, 3);
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
    call->result_text = 0;

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

    rc = ctx->finish ? ctx->finish(ctx) : ngx_http_sandbox_mcp_call_finish(ctx);

    if (rc != NGX_DONE) {
        ngx_http_sandbox_mcp_finalize(ctx, rc);
    }
}


ngx_int_t
ngx_http_sandbox_mcp_call_finish(ngx_http_sandbox_mcp_ctx_t *ctx)
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
