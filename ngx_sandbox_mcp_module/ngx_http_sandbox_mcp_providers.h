/*
 * The egress routes a run needs, and what gives the egress each one.
 */

#ifndef _NGX_HTTP_SANDBOX_MCP_PROVIDERS_H_INCLUDED_
#define _NGX_HTTP_SANDBOX_MCP_PROVIDERS_H_INCLUDED_


#include "ngx_http_sandbox_mcp_module.h"


/* a run on a repository clones, fetches and pushes through this route */
#define NGX_HTTP_SANDBOX_MCP_GITHUB_ROUTE    "github"
#define NGX_HTTP_SANDBOX_MCP_GITHUB_SETTING  "GITHUB_TOKEN"


/* the egress route of a model's provider (provider/model) */
void ngx_http_sandbox_mcp_model_route(ngx_str_t *model, ngx_str_t *route);

/* the setting that gives the egress a route ("" for an unknown one) */
const char *ngx_http_sandbox_mcp_route_setting(ngx_str_t *route);

/* "anthropic/..., openai/..." for the model routes among routes (the
 * egress's, space-separated): the end; p itself when there is none */
u_char *ngx_http_sandbox_mcp_route_models(u_char *p, u_char *last,
    ngx_str_t *routes);


#endif /* _NGX_HTTP_SANDBOX_MCP_PROVIDERS_H_INCLUDED_ */
