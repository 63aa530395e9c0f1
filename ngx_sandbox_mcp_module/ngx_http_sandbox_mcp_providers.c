/*
 * The model providers a run may name, the egress route each one's models
 * are reached through (the sandbox's entry script points OpenCode at
 * <egress>/<route>/...), and the setting that gives the egress that route
 * (conf/egress-routes.sh renders it when the setting is there;
 * t/config_reference.t holds this table against it).  A provider not
 * named here is reached on a route of its own name.
 */

#include "ngx_http_sandbox_mcp_providers.h"


typedef struct {
    ngx_str_t                   provider;   /* a model's, before its '/' */
    ngx_str_t                   route;
    const char                 *setting;
} ngx_http_sandbox_mcp_provider_t;


static ngx_http_sandbox_mcp_provider_t  ngx_http_sandbox_mcp_providers[] = {

    { ngx_string("anthropic"), ngx_string("anthropic"),
      "ANTHROPIC_API_KEY" },

    { ngx_string("openai"), ngx_string("openai"),
      "OPENAI_API_KEY" },

    { ngx_string("azure"), ngx_string("azure"),
      "AZURE_OPENAI_API_KEY and AZURE_OPENAI_BASE_URL" },

    { ngx_string("google"), ngx_string("google"),
      "GOOGLE_API_KEY" },

    { ngx_string("cloudflare-ai-gateway"), ngx_string("cloudflare"),
      "CF_AIG_TOKEN and CF_AIG_BASE_URL" },

    { ngx_string("compat"), ngx_string("compat"),
      "COMPAT_API_KEY and COMPAT_BASE_URL" },

    { ngx_null_string, ngx_null_string, NULL }
};


void
ngx_http_sandbox_mcp_model_route(ngx_str_t *model, ngx_str_t *route)
{
    u_char                           *slash;
    ngx_http_sandbox_mcp_provider_t  *p;

    slash = ngx_strlchr(model->data, model->data + model->len, '/');

    route->data = model->data;
    route->len = slash ? (size_t) (slash - model->data) : model->len;

    for (p = ngx_http_sandbox_mcp_providers; p->setting; p++) {
        if (p->provider.len == route->len
            && ngx_strncmp(p->provider.data, route->data, route->len) == 0)
        {
            *route = p->route;
            return;
        }
    }
}


const char *
ngx_http_sandbox_mcp_route_setting(ngx_str_t *route)
{
    ngx_http_sandbox_mcp_provider_t  *p;

    if (route->len == sizeof(NGX_HTTP_SANDBOX_MCP_GITHUB_ROUTE) - 1
        && ngx_strncmp(route->data, NGX_HTTP_SANDBOX_MCP_GITHUB_ROUTE,
                       route->len) == 0)
    {
        return NGX_HTTP_SANDBOX_MCP_GITHUB_SETTING;
    }

    for (p = ngx_http_sandbox_mcp_providers; p->setting; p++) {
        if (p->route.len == route->len
            && ngx_strncmp(p->route.data, route->data, route->len) == 0)
        {
            return p->setting;
        }
    }

    return "";
}


u_char *
ngx_http_sandbox_mcp_route_models(u_char *p, u_char *last, ngx_str_t *routes)
{
    u_char                           *s, *e, *end, *start;
    ngx_http_sandbox_mcp_provider_t  *pv;

    start = p;
    end = routes->data + routes->len;

    for (s = routes->data; s < end; s = e + 1) {
        e = ngx_strlchr(s, end, ' ');
        if (e == NULL) {
            e = end;
        }

        for (pv = ngx_http_sandbox_mcp_providers; pv->setting; pv++) {
            if (pv->route.len == (size_t) (e - s)
                && ngx_strncmp(pv->route.data, s, e - s) == 0)
            {
                p = ngx_slprintf(p, last, "%s%V/...", p == start ? "" : ", ",
                                 &pv->provider);
            }
        }
    }

    return p;
}
