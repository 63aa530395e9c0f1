/*
 * Completion notifications (ngx_http_sandbox_mcp_notify_module): where a
 * run's webhook may go.  The operator lists URL prefixes
 * (sandbox_mcp_notify_allow); opencode_run_task checks a run's `notify`
 * URL against them, and the egress proxy checks every delivery again
 * (sandbox_mcp_egress_notify, ngx_http_sandbox_mcp_notify_egress.c)
 * before it sends it on.  The runner delivers them (runner/notify.c).
 */

#ifndef _NGX_HTTP_SANDBOX_MCP_NOTIFY_H_INCLUDED_
#define _NGX_HTTP_SANDBOX_MCP_NOTIFY_H_INCLUDED_


#include "ngx_http_sandbox_mcp_module.h"
#include "smcp_url.h"


/* the header the runner names the destination in (not sent on) */
#define NGX_HTTP_SANDBOX_MCP_NOTIFY_TO          "X-SMCP-Notify-To"


/* a notify URL, parsed (common/smcp_url.c) */
typedef struct {
    ngx_str_t                   text;       /* the whole URL */
    ngx_str_t                   scheme;     /* "http" or "https" */
    ngx_str_t                   host;       /* a name, or an address
                                               (IPv6 without brackets) */
    ngx_str_t                   authority;  /* host[:port] as written */
    ngx_str_t                   path;       /* "/..." with the query */
    in_port_t                   port;
    ngx_uint_t                  literal;    /* host is an address */
} ngx_http_sandbox_mcp_notify_url_t;


typedef struct {
    ngx_str_t                   tenant;
    ngx_str_t                   url;
    ngx_str_t                   format;
} ngx_http_sandbox_mcp_notify_default_t;


typedef struct {
    ngx_array_t                *allow;      /* of ngx_str_t; NULL: none */
    ngx_array_t                *tenants;    /* of ..._notify_default_t */
    ngx_flag_t                  egress;     /* sandbox_mcp_egress_notify */
} ngx_http_sandbox_mcp_notify_loc_conf_t;


/*
 * url, parsed into *u, is one the location's sandbox_mcp_notify_allow
 * lists: NULL, else why not (a sentence for the caller).
 */
const char *ngx_http_sandbox_mcp_notify_allowed(ngx_http_request_t *r,
    ngx_str_t *url, ngx_http_sandbox_mcp_notify_url_t *u);

/* the tenant's own destination (sandbox_mcp_tenant_notify), or NULL */
ngx_http_sandbox_mcp_notify_default_t *ngx_http_sandbox_mcp_notify_tenant(
    ngx_http_request_t *r, ngx_str_t *tenant);

/* the egress's access handler and variables (notify_egress.c) */
ngx_int_t ngx_http_sandbox_mcp_notify_egress_handler(ngx_http_request_t *r);
ngx_int_t ngx_http_sandbox_mcp_notify_egress_variables(ngx_conf_t *cf);


extern ngx_module_t  ngx_http_sandbox_mcp_notify_module;


#endif /* _NGX_HTTP_SANDBOX_MCP_NOTIFY_H_INCLUDED_ */
