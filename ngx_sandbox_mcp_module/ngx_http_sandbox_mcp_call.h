/*
 * A call's answer, and the request's once every call is done.
 */

#ifndef _NGX_HTTP_SANDBOX_MCP_CALL_H_INCLUDED_
#define _NGX_HTTP_SANDBOX_MCP_CALL_H_INCLUDED_


#include "ngx_http_sandbox_mcp_module.h"


/* a call's answer; call_done once it is set (the last one answers) */
void ngx_http_sandbox_mcp_call_result(ngx_http_sandbox_mcp_call_t *call,
    json_t *result);
/* a tool's answer {content: [{type: text, text}], structuredContent}
 * whose text is output, the JSON text of structuredContent (in r->pool) */
void ngx_http_sandbox_mcp_call_output(ngx_http_sandbox_mcp_call_t *call,
    json_t *result, ngx_str_t *output);
/*
 * The same when only its text is needed: a lone answer (no batch, no
 * filter, no progress stream, no finish of its own) is written from the
 * text, and call->response is json_null(), a marker (answered; the
 * metrics read no error in it).  NGX_DECLINED: the result is needed as a value
 * (call_output then).
 */
ngx_int_t ngx_http_sandbox_mcp_call_output_text(
    ngx_http_sandbox_mcp_call_t *call, ngx_str_t *output);
/* the result {} (ping): a lone answer is written as text, no value built
 * (call->response is json_null(), a marker) */
void ngx_http_sandbox_mcp_call_empty_result(ngx_http_sandbox_mcp_call_t *call);
/* an answer's text: fmt (nginx's formats: %V, %uz, %L, %*s ...) into buf,
 * cut to fit, NUL-terminated */
void ngx_http_sandbox_mcp_call_message(u_char *buf, size_t size,
    const char *fmt, va_list args);
void ngx_http_sandbox_mcp_call_error(ngx_http_sandbox_mcp_call_t *call,
    ngx_int_t code, const char *fmt, ...);
void ngx_http_sandbox_mcp_call_unavailable(ngx_http_sandbox_mcp_call_t *call);
void ngx_http_sandbox_mcp_call_done(ngx_http_sandbox_mcp_call_t *call);

/* every call is done: the request's answer (rc), or NGX_DONE */
ngx_int_t ngx_http_sandbox_mcp_call_finish(ngx_http_sandbox_mcp_ctx_t *ctx);


#endif /* _NGX_HTTP_SANDBOX_MCP_CALL_H_INCLUDED_ */
