/*
 * A run as the tools show it: Redis values as JSON, the watchUrl (the
 * run object is written in ngx_http_sandbox_mcp_run_json.c).
 */

#ifndef _NGX_HTTP_SANDBOX_MCP_RUN_H_INCLUDED_
#define _NGX_HTTP_SANDBOX_MCP_RUN_H_INCLUDED_


#include "ngx_http_sandbox_mcp_module.h"


/* XADD MAXLEN ~ of every event stream */
extern ngx_str_t  ngx_http_sandbox_mcp_events_maxlen;

int64_t ngx_http_sandbox_mcp_now_ms(void);

/* a field of a hash reply (HGETALL, field/value pairs), or NULL */
redisReply *ngx_http_sandbox_mcp_field(redisReply *h, const char *name);

/* r is the string s */
ngx_uint_t ngx_http_sandbox_mcp_reply_eq(redisReply *r, ngx_str_t *s);
ngx_uint_t ngx_http_sandbox_mcp_reply_is(redisReply *r, const char *s);

/* a string from Redis as JSON: null when absent or empty (if nullable);
 * invalid UTF-8 is repaired in place (the reply is the caller's) */
json_t *ngx_http_sandbox_mcp_json_text(redisReply *v, ngx_uint_t nullable);

/* milliseconds since the epoch as ISO-8601, or null */
json_t *ngx_http_sandbox_mcp_json_time(redisReply *v);

/* the run page's address, <base>/ui/runs/<runId> (no token), with
 * reserve bytes more allocated after it */
ngx_int_t ngx_http_sandbox_mcp_run_page(ngx_http_sandbox_mcp_call_t *call,
    ngx_str_t *run_id, size_t reserve, ngx_str_t *page);

/* the dashboard link for the run, signed for the call's tenant, in the
 * pool: NGX_OK or NGX_ERROR */
ngx_int_t ngx_http_sandbox_mcp_watch_url_text(
    ngx_http_sandbox_mcp_call_t *call, ngx_str_t *run_id, ngx_str_t *url);

/* h is a run of the call's tenant */
ngx_uint_t ngx_http_sandbox_mcp_run_visible(ngx_http_sandbox_mcp_call_t *call,
    redisReply *h);

/* h's status is completed, failed or cancelled */
ngx_uint_t ngx_http_sandbox_mcp_terminal(redisReply *h);


#endif /* _NGX_HTTP_SANDBOX_MCP_RUN_H_INCLUDED_ */
