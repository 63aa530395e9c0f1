/*
 * The tools: tools/list, tools/call, and what every tool shares.
 */

#ifndef _NGX_HTTP_SANDBOX_MCP_TOOLS_H_INCLUDED_
#define _NGX_HTTP_SANDBOX_MCP_TOOLS_H_INCLUDED_


#include "ngx_http_sandbox_mcp_module.h"
#include "ngx_http_sandbox_mcp_redis.h"


/* run_create's and run_pick's answers for a tenant at a budget */
#define NGX_HTTP_SANDBOX_MCP_BUDGET_BYTES       -5
#define NGX_HTTP_SANDBOX_MCP_BUDGET_SESSIONS    -6
#define NGX_HTTP_SANDBOX_MCP_BUDGET_DISK        -7


/* a key of a tool's script: an SMCP_KEY_* or SMCP_CHAN_* format */
typedef struct {
    const char                  *fmt;
    ngx_str_t                   *arg;       /* NULL: the format has none */
} ngx_http_sandbox_mcp_key_t;


/* the tools' definitions parsed, with the configuration */
ngx_int_t ngx_http_sandbox_mcp_tools_init(ngx_conf_t *cf);

/* tools/list (NULL: err says why) and tools/call */
json_t *ngx_http_sandbox_mcp_tools_list(ngx_http_sandbox_mcp_loc_conf_t *lcf,
    json_t *params, char *err, size_t errlen);
void ngx_http_sandbox_mcp_tools_call(ngx_http_sandbox_mcp_call_t *call,
    json_t *params);
/* the tool name with args (taken: freed with the request) for a method
 * that answers with a view of it (call->pending set, call->filter too) */
void ngx_http_sandbox_mcp_tools_start(ngx_http_sandbox_mcp_call_t *call,
    const char *name, json_t *args);

/* a tool's definition, as parsed with the configuration (NULL: none) */
json_t *ngx_http_sandbox_mcp_tool_definition(const char *name);

/* the schema of an argument of the call's tool (NULL: none); required? */
json_t *ngx_http_sandbox_mcp_tool_property(ngx_http_sandbox_mcp_call_t *call,
    const char *name);
ngx_uint_t ngx_http_sandbox_mcp_tool_required(
    ngx_http_sandbox_mcp_call_t *call, const char *name);

/*
 * A tool's answer, each ending the call: its structuredContent (NULL: an
 * internal error), an error a model can act on (isError, nginx's formats:
 * %V, %uz ...), or Redis unavailable.
 */
void ngx_http_sandbox_mcp_tool_output(ngx_http_sandbox_mcp_call_t *call,
    json_t *structured);
/* its structuredContent as JSON text, in the pool (NULL: an internal
 * error): written as it is when nothing needs it as a value */
void ngx_http_sandbox_mcp_tool_output_text(ngx_http_sandbox_mcp_call_t *call,
    ngx_str_t *text);
void ngx_http_sandbox_mcp_tool_error(ngx_http_sandbox_mcp_call_t *call,
    const char *fmt, ...);
void ngx_http_sandbox_mcp_tool_unavailable(ngx_http_sandbox_mcp_call_t *call);
/* a NGX_HTTP_SANDBOX_MCP_BUDGET_* code answered with the refusal that
 * names the budget and the way out: NGX_OK; NGX_DECLINED: none of them */
ngx_int_t ngx_http_sandbox_mcp_tool_budget_error(
    ngx_http_sandbox_mcp_call_t *call, ngx_int_t code);

/*
 * Sends a script for a call: KEYS from key formats, then ARGV.  When Redis
 * is away the call is answered "unavailable" at once.
 */
void ngx_http_sandbox_mcp_call_script(ngx_http_sandbox_mcp_call_t *call,
    ngx_http_sandbox_mcp_script_t *script,
    ngx_http_sandbox_mcp_redis_handler_pt handler,
    ngx_http_sandbox_mcp_key_t *keys, ngx_uint_t nkeys, ngx_str_t *args,
    ngx_uint_t nargs);

/*
 * Reads the hash of the run call->run_id for handler: HMGET of the n
 * fields, HGETALL when there are none.  When Redis is away the call is
 * answered "unavailable" at once.
 */
void ngx_http_sandbox_mcp_call_run_read(ngx_http_sandbox_mcp_call_t *call,
    ngx_http_sandbox_mcp_redis_handler_pt handler, const char **fields,
    ngx_uint_t n);

/*
 * An id Redis answered (v), copied into the call's pool as *id when it
 * is a string and a valid id of prefix: NGX_OK; NGX_DECLINED (*id
 * empty): it is not; NGX_ERROR: no memory
 */
ngx_int_t ngx_http_sandbox_mcp_reply_id(ngx_http_sandbox_mcp_call_t *call,
    redisReply *v, const char *prefix, ngx_str_t *id);

/* a reply that is an error, or none: the call is answered, returns 1 */
ngx_uint_t ngx_http_sandbox_mcp_reply_failed(
    ngx_http_sandbox_mcp_call_t *call, redisReply *reply);

/* an opaque cursor (base64url of a short text), or NULL */
json_t *ngx_http_sandbox_mcp_cursor_encode(const char *text);


#endif /* _NGX_HTTP_SANDBOX_MCP_TOOLS_H_INCLUDED_ */
