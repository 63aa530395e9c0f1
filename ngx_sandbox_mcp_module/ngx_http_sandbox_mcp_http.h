/*
 * HTTP for /mcp: request checks and JSON answers.
 */

#ifndef _NGX_HTTP_SANDBOX_MCP_HTTP_H_INCLUDED_
#define _NGX_HTTP_SANDBOX_MCP_HTTP_H_INCLUDED_


#include "ngx_http_sandbox_mcp_module.h"


/* a request header by name (case-insensitive), or NULL */
ngx_table_elt_t *ngx_http_sandbox_mcp_header(ngx_http_request_t *r,
    const char *name, size_t len);

/* Host (port stripped) among sandbox_mcp_allowed_hosts */
ngx_uint_t ngx_http_sandbox_mcp_host_allowed(ngx_http_request_t *r,
    ngx_http_sandbox_mcp_loc_conf_t *lcf);

/* the checks: NGX_DECLINED when passed, else what sending the error gave */
ngx_int_t ngx_http_sandbox_mcp_check_origin(ngx_http_request_t *r,
    ngx_http_sandbox_mcp_loc_conf_t *lcf);
ngx_uint_t ngx_http_sandbox_mcp_accepts_stream(ngx_http_request_t *r);
ngx_int_t ngx_http_sandbox_mcp_check_post(ngx_http_request_t *r,
    ngx_http_sandbox_mcp_loc_conf_t *lcf);

/* the whole body in the pool; NGX_DECLINED when larger than max */
ngx_int_t ngx_http_sandbox_mcp_read_body(ngx_http_request_t *r,
    ngx_str_t *body, size_t max);

/* json freed with the request's pool (freed at once if that fails) */
ngx_int_t ngx_http_sandbox_mcp_add_cleanup(ngx_http_request_t *r,
    void *data, json_t *json);

ngx_int_t ngx_http_sandbox_mcp_add_header(ngx_http_request_t *r,
    const char *key, ngx_str_t *value);

/* finalizes r from outside nginx's request flow (a Redis callback, a
 * timer), then runs the posted requests */
void ngx_http_sandbox_mcp_end_request(ngx_http_request_t *r, ngx_int_t rc);

/* the answer: len bytes of data of a type (len 0, or HEAD: the headers
 * only; type NULL: none set) */
ngx_int_t ngx_http_sandbox_mcp_send_body(ngx_http_request_t *r,
    ngx_uint_t status, const char *type, u_char *data, size_t len);
/* the same, the body in n parts (at most NGX_HTTP_SANDBOX_MCP_SEND_PARTS),
 * sent as they are: they must live as long as the request */
ngx_int_t ngx_http_sandbox_mcp_send_parts(ngx_http_request_t *r,
    ngx_uint_t status, const char *type, ngx_str_t *parts, ngx_uint_t n);

/* the answer: json (NULL: no body), as application/json */
ngx_int_t ngx_http_sandbox_mcp_send_json(ngx_http_request_t *r,
    ngx_uint_t status, json_t *json);

/* {"jsonrpc":"2.0","error":{code,message},"id":id or null} */
json_t *ngx_http_sandbox_mcp_error_object(json_t *id, ngx_int_t code,
    const char *message);
ngx_int_t ngx_http_sandbox_mcp_send_error(ngx_http_request_t *r,
    ngx_uint_t status, ngx_int_t code, const char *message);

/* 503 with Retry-After: Redis cannot serve the request now */
ngx_int_t ngx_http_sandbox_mcp_send_unavailable(ngx_http_request_t *r);

/*
 * ngx_escape_json() as fast as memcpy() where nothing is escaped (the same
 * output: \" \\ \n \r \t \b \f, \u00XX for other control characters):
 * with dst NULL, how many bytes escaping adds.
 */
uintptr_t ngx_http_sandbox_mcp_escape_json(u_char *dst, u_char *src,
    size_t size);

/* a module's variables (a table ending in ngx_http_null_variable) added */
ngx_int_t ngx_http_sandbox_mcp_add_variables(ngx_conf_t *cf,
    ngx_http_variable_t *vars);


#endif /* _NGX_HTTP_SANDBOX_MCP_HTTP_H_INCLUDED_ */
