/*
 * The OAuth 2.1 authorization server: configuration, the routes of
 * sandbox_mcp_oauth_endpoints and the discovery documents (RFC 9728, RFC
 * 8414).  What the endpoints share is in _oauth_http.c; each endpoint
 * lives in its own file: _oauth_register.c, _oauth_authorize.c (with
 * _oauth_github.c and _oauth_client_metadata.c), _oauth_token.c.
 */

#include "ngx_http_sandbox_mcp_oauth.h"
#include "ngx_http_sandbox_mcp_http.h"

#include "ngx_http_sandbox_mcp_oauth_css.h"


#define NGX_HTTP_SANDBOX_MCP_OAUTH_GET     0x01
#define NGX_HTTP_SANDBOX_MCP_OAUTH_POST    0x02


typedef enum {
    NGX_HTTP_SANDBOX_MCP_OAUTH_RESOURCE_META = 0,
    NGX_HTTP_SANDBOX_MCP_OAUTH_SERVER_META,
    NGX_HTTP_SANDBOX_MCP_OAUTH_CSS,
    NGX_HTTP_SANDBOX_MCP_OAUTH_REGISTER,
    NGX_HTTP_SANDBOX_MCP_OAUTH_AUTHORIZE,
    NGX_HTTP_SANDBOX_MCP_OAUTH_TOKEN,
    NGX_HTTP_SANDBOX_MCP_OAUTH_REVOKE,
    NGX_HTTP_SANDBOX_MCP_OAUTH_GITHUB
} ngx_http_sandbox_mcp_oauth_route_e;


typedef struct {
    ngx_str_t                           path;
    ngx_http_sandbox_mcp_oauth_route_e  route;
    ngx_uint_t                          methods;
    ngx_uint_t                          cors;   /* fetched by web clients */
} ngx_http_sandbox_mcp_oauth_route_t;


static ngx_http_sandbox_mcp_oauth_route_t  ngx_http_sandbox_mcp_oauth_routes[]
    = {
    { ngx_string("/.well-known/oauth-protected-resource"),
      NGX_HTTP_SANDBOX_MCP_OAUTH_RESOURCE_META,
      NGX_HTTP_SANDBOX_MCP_OAUTH_GET, 1 },
    { ngx_string("/.well-known/oauth-authorization-server"),
      NGX_HTTP_SANDBOX_MCP_OAUTH_SERVER_META,
      NGX_HTTP_SANDBOX_MCP_OAUTH_GET, 1 },
    { ngx_string("/.well-known/openid-configuration"),
      NGX_HTTP_SANDBOX_MCP_OAUTH_SERVER_META,
      NGX_HTTP_SANDBOX_MCP_OAUTH_GET, 1 },
    { ngx_string("/oauth/signin.css"),
      NGX_HTTP_SANDBOX_MCP_OAUTH_CSS,
      NGX_HTTP_SANDBOX_MCP_OAUTH_GET, 0 },
    { ngx_string("/oauth/register"),
      NGX_HTTP_SANDBOX_MCP_OAUTH_REGISTER,
      NGX_HTTP_SANDBOX_MCP_OAUTH_POST, 1 },
    { ngx_string("/oauth/authorize"),
      NGX_HTTP_SANDBOX_MCP_OAUTH_AUTHORIZE,
      NGX_HTTP_SANDBOX_MCP_OAUTH_GET|NGX_HTTP_SANDBOX_MCP_OAUTH_POST, 0 },
    { ngx_string("/oauth/token"),
      NGX_HTTP_SANDBOX_MCP_OAUTH_TOKEN,
      NGX_HTTP_SANDBOX_MCP_OAUTH_POST, 1 },
    { ngx_string("/oauth/revoke"),
      NGX_HTTP_SANDBOX_MCP_OAUTH_REVOKE,
      NGX_HTTP_SANDBOX_MCP_OAUTH_POST, 1 },
    { ngx_string("/oauth/github/callback"),
      NGX_HTTP_SANDBOX_MCP_OAUTH_GITHUB,
      NGX_HTTP_SANDBOX_MCP_OAUTH_GET, 0 },
    { ngx_null_string, 0, 0, 0 }
};


static void ngx_http_sandbox_mcp_oauth_body(ngx_http_request_t *r);


void
ngx_http_sandbox_mcp_oauth_init_conf(ngx_http_sandbox_mcp_oauth_conf_t *conf)
{
    conf->enable = NGX_CONF_UNSET;
    conf->token_ttl = NGX_CONF_UNSET;
    conf->refresh_ttl = NGX_CONF_UNSET;
    conf->code_ttl = NGX_CONF_UNSET;
    conf->client_ttl = NGX_CONF_UNSET;
    conf->unused_client_ttl = NGX_CONF_UNSET;
    conf->unused_clients = NGX_CONF_UNSET_UINT;
    conf->github_pending = NGX_CONF_UNSET_UINT;
    conf->revoke_rate = NGX_CONF_UNSET_UINT;
    conf->redirect_hosts = NGX_CONF_UNSET_PTR;
    conf->github_allow = NGX_CONF_UNSET_PTR;
}


char *
ngx_http_sandbox_mcp_oauth_merge(ngx_conf_t *cf,
    ngx_http_sandbox_mcp_oauth_conf_t *prev,
    ngx_http_sandbox_mcp_oauth_conf_t *conf)
{
    ngx_conf_merge_value(conf->enable, prev->enable, 0);
    ngx_conf_merge_str_value(conf->issuer, prev->issuer, "");
    ngx_conf_merge_str_value(conf->resource, prev->resource, "");
    ngx_conf_merge_sec_value(conf->token_ttl, prev->token_ttl,
                             NGX_HTTP_SANDBOX_MCP_OAUTH_TOKEN_TTL);
    ngx_conf_merge_sec_value(conf->refresh_ttl, prev->refresh_ttl,
                             NGX_HTTP_SANDBOX_MCP_OAUTH_REFRESH_TTL);
    ngx_conf_merge_sec_value(conf->code_ttl, prev->code_ttl,
                             NGX_HTTP_SANDBOX_MCP_OAUTH_CODE_TTL);
    ngx_conf_merge_sec_value(conf->client_ttl, prev->client_ttl,
                             NGX_HTTP_SANDBOX_MCP_OAUTH_CLIENT_TTL);
    ngx_conf_merge_sec_value(conf->unused_client_ttl,
                             prev->unused_client_ttl,
                             NGX_HTTP_SANDBOX_MCP_OAUTH_UNUSED_TTL);
    ngx_conf_merge_uint_value(conf->unused_clients, prev->unused_clients,
                              NGX_HTTP_SANDBOX_MCP_OAUTH_UNUSED_MAX);
    ngx_conf_merge_uint_value(conf->github_pending, prev->github_pending,
                              NGX_HTTP_SANDBOX_MCP_OAUTH_PENDING_MAX);
    ngx_conf_merge_uint_value(conf->revoke_rate, prev->revoke_rate,
                              NGX_HTTP_SANDBOX_MCP_OAUTH_REVOKE_RATE);
    ngx_conf_merge_ptr_value(conf->redirect_hosts, prev->redirect_hosts,
                             NULL);
    ngx_conf_merge_str_value(conf->metadata_location,
                             prev->metadata_location, "");

    ngx_http_sandbox_mcp_oauth_github_merge(prev, conf);

    if (conf->token_ttl == 0 || conf->refresh_ttl == 0
        || conf->code_ttl == 0 || conf->client_ttl == 0
        || conf->unused_client_ttl == 0)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "sandbox_mcp_oauth_*_ttl must be more than 0");
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


/* which route: /.well-known/oauth-protected-resource also under the
 * resource's path (RFC 9728: /.well-known/oauth-protected-resource/mcp) */
static ngx_http_sandbox_mcp_oauth_route_t *
ngx_http_sandbox_mcp_oauth_route(ngx_http_sandbox_mcp_oauth_ctx_t *ctx)
{
    ngx_str_t                           *uri, path;
    ngx_http_sandbox_mcp_oauth_route_t  *rt;

    uri = &ctx->request->uri;

    for (rt = ngx_http_sandbox_mcp_oauth_routes; rt->path.len; rt++) {
        if (uri->len < rt->path.len
            || ngx_strncmp(uri->data, rt->path.data, rt->path.len) != 0)
        {
            continue;
        }

        if (uri->len == rt->path.len) {
            return rt;
        }

        if (rt->route != NGX_HTTP_SANDBOX_MCP_OAUTH_RESOURCE_META) {
            continue;
        }

        ngx_http_sandbox_mcp_oauth_path(&ctx->resource, &path);

        if (uri->len == rt->path.len + path.len
            && ngx_strncmp(uri->data + rt->path.len, path.data, path.len)
               == 0)
        {
            return rt;
        }
    }

    return NULL;
}



static void
ngx_http_sandbox_mcp_oauth_cleanup(void *data)
{
    ngx_http_sandbox_mcp_oauth_ctx_t *ctx = data;

    ctx->done = 1;

    if (ctx->cmd) {
        ngx_http_sandbox_mcp_redis_cancel(ctx->cmd);
        ctx->cmd = NULL;
    }

    if (ctx->key) {
        json_decref(ctx->key);
        ctx->key = NULL;
    }
}


static ngx_int_t
ngx_http_sandbox_mcp_oauth_resource_meta(
    ngx_http_sandbox_mcp_oauth_ctx_t *ctx)
{
    return ngx_http_sandbox_mcp_oauth_send_json(ctx->request, NGX_HTTP_OK,
        json_pack("{s:s%, s:[s%], s:[s], s:[s], s:s}",
                  "resource", ctx->resource.data, ctx->resource.len,
                  "authorization_servers", ctx->issuer.data, ctx->issuer.len,
                  "scopes_supported", SMCP_SCOPE_MCP,
                  "bearer_methods_supported", "header",
                  "resource_name", NGX_HTTP_SANDBOX_MCP_SERVER_NAME));
}


static ngx_int_t
ngx_http_sandbox_mcp_oauth_server_meta(ngx_http_sandbox_mcp_oauth_ctx_t *ctx)
{
    u_char      *p, *e[4];
    ngx_uint_t   i;

    static const char  *paths[] = {
        "/oauth/authorize", "/oauth/token", "/oauth/register",
        "/oauth/revoke"
    };

    for (i = 0; i < 4; i++) {
        e[i] = ngx_pnalloc(ctx->request->pool, ctx->issuer.len + 17);
        if (e[i] == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        p = ngx_sprintf(e[i], "%V%s", &ctx->issuer, paths[i]);
        *p = '\0';
    }

    return ngx_http_sandbox_mcp_oauth_send_json(ctx->request, NGX_HTTP_OK,
        json_pack("{s:s%, s:s, s:s, s:s, s:s, s:[s], s:[s,s], s:[s], s:[s],"
                  " s:[s], s:[s], s:b, s:b}",
                  "issuer", ctx->issuer.data, ctx->issuer.len,
                  "authorization_endpoint", e[0],
                  "token_endpoint", e[1],
                  "registration_endpoint", e[2],
                  "revocation_endpoint", e[3],
                  "response_types_supported", "code",
                  "grant_types_supported", "authorization_code",
                  "refresh_token",
                  "code_challenge_methods_supported", "S256",
                  "token_endpoint_auth_methods_supported", "none",
                  "revocation_endpoint_auth_methods_supported", "none",
                  "scopes_supported", SMCP_SCOPE_MCP,
                  "authorization_response_iss_parameter_supported", 1,
                  "client_id_metadata_document_supported",
                  ctx->lcf->oauth.metadata_location.len != 0));
}


static ngx_int_t
ngx_http_sandbox_mcp_oauth_css(ngx_http_request_t *r)
{
    static ngx_str_t  cache = ngx_string("public, max-age=3600");

    if (ngx_http_sandbox_mcp_add_header(r, "Cache-Control", &cache)
        != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    return ngx_http_sandbox_mcp_send_body(r, NGX_HTTP_OK,
                                          "text/css; charset=utf-8",
                                          (u_char *) smcp_css_signin,
                                          sizeof(smcp_css_signin) - 1);
}


/* answers without a body to read, or reads it */
static ngx_int_t
ngx_http_sandbox_mcp_oauth_start(ngx_http_sandbox_mcp_oauth_ctx_t *ctx,
    ngx_http_sandbox_mcp_oauth_route_t *rt)
{
    ngx_int_t            rc;
    ngx_http_request_t  *r;

    r = ctx->request;

    switch (rt->route) {

    case NGX_HTTP_SANDBOX_MCP_OAUTH_RESOURCE_META:
        return ngx_http_sandbox_mcp_oauth_resource_meta(ctx);

    case NGX_HTTP_SANDBOX_MCP_OAUTH_SERVER_META:
        return ngx_http_sandbox_mcp_oauth_server_meta(ctx);

    case NGX_HTTP_SANDBOX_MCP_OAUTH_CSS:
        return ngx_http_sandbox_mcp_oauth_css(r);

    default:
        break;
    }

    if (r->method == NGX_HTTP_GET) {
        /* the authorization request, or GitHub sending the user back */
        rc = ngx_http_sandbox_mcp_oauth_parse(ctx, r->args.data, r->args.len);

        if (rc == NGX_ERROR) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        if (rc == NGX_DECLINED) {
            ctx->params = NULL;
        }

        rc = (rt->route == NGX_HTTP_SANDBOX_MCP_OAUTH_GITHUB)
             ? ngx_http_sandbox_mcp_oauth_github_callback(ctx)
             : ngx_http_sandbox_mcp_oauth_authorize(ctx);

        if (rc == NGX_DONE) {
            /* a Redis reply will finalize the request */
            r->main->count++;
        }

        return rc;
    }

    if (r->headers_in.content_length_n > NGX_HTTP_SANDBOX_MCP_OAUTH_BODY_MAX)
    {
        return ngx_http_sandbox_mcp_oauth_error(r,
                               NGX_HTTP_REQUEST_ENTITY_TOO_LARGE,
                               "invalid_request", "the body is too large");
    }

    r->request_body_in_single_buf = 1;

    rc = ngx_http_read_client_request_body(r,
                                           ngx_http_sandbox_mcp_oauth_body);

    if (rc >= NGX_HTTP_SPECIAL_RESPONSE) {
        return rc;
    }

    return NGX_DONE;
}


static void
ngx_http_sandbox_mcp_oauth_body(ngx_http_request_t *r)
{
    ngx_int_t                            rc;
    ngx_http_sandbox_mcp_oauth_ctx_t    *ctx;
    ngx_http_sandbox_mcp_oauth_route_t  *rt;

    ctx = ngx_http_get_module_ctx(r, ngx_http_sandbox_mcp_module);
    rt = ngx_http_sandbox_mcp_oauth_route(ctx);

    rc = ngx_http_sandbox_mcp_read_body(r, &ctx->body,
                                        NGX_HTTP_SANDBOX_MCP_OAUTH_BODY_MAX);

    if (rc == NGX_ERROR) {
        ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    if (rc == NGX_DECLINED) {
        ngx_http_finalize_request(r, ngx_http_sandbox_mcp_oauth_error(r,
                               NGX_HTTP_REQUEST_ENTITY_TOO_LARGE,
                               "invalid_request", "the body is too large"));
        return;
    }

    if (rt->route == NGX_HTTP_SANDBOX_MCP_OAUTH_REGISTER) {
        rc = ngx_http_sandbox_mcp_oauth_register(ctx);

    } else {
        rc = ngx_http_sandbox_mcp_oauth_parse(ctx, ctx->body.data,
                                              ctx->body.len);

        if (rc == NGX_ERROR) {
            rc = NGX_HTTP_INTERNAL_SERVER_ERROR;

        } else if (rc == NGX_DECLINED
                   && rt->route != NGX_HTTP_SANDBOX_MCP_OAUTH_AUTHORIZE)
        {
            rc = ngx_http_sandbox_mcp_oauth_error(r, NGX_HTTP_BAD_REQUEST,
                               "invalid_request", "the form is malformed, "
                               "too large or names a parameter twice");

        } else if (rt->route == NGX_HTTP_SANDBOX_MCP_OAUTH_AUTHORIZE) {
            if (rc == NGX_DECLINED) {
                ctx->params = NULL;
            }

            rc = ngx_http_sandbox_mcp_oauth_authorize(ctx);

        } else if (rt->route == NGX_HTTP_SANDBOX_MCP_OAUTH_TOKEN) {
            rc = ngx_http_sandbox_mcp_oauth_token(ctx);

        } else {
            rc = ngx_http_sandbox_mcp_oauth_revoke(ctx);
        }
    }

    if (rc == NGX_DONE) {
        /* a Redis reply will finish the request */
        return;
    }

    ngx_http_finalize_request(r, rc);
}


ngx_int_t
ngx_http_sandbox_mcp_oauth_handler(ngx_http_request_t *r)
{
    ngx_uint_t                           method;
    ngx_pool_cleanup_t                  *cln;
    ngx_http_sandbox_mcp_oauth_ctx_t    *ctx;
    ngx_http_sandbox_mcp_loc_conf_t     *lcf;
    ngx_http_sandbox_mcp_oauth_route_t  *rt;

    static ngx_str_t  allow_get = ngx_string("GET, HEAD, OPTIONS");
    static ngx_str_t  allow_post = ngx_string("POST, OPTIONS");
    static ngx_str_t  allow_both = ngx_string("GET, POST");

    lcf = ngx_http_get_module_loc_conf(r, ngx_http_sandbox_mcp_module);

    if (!lcf->oauth.enable) {
        return NGX_HTTP_NOT_FOUND;
    }

    if (!ngx_http_sandbox_mcp_host_allowed(r, lcf)) {
        return ngx_http_sandbox_mcp_oauth_error(r, NGX_HTTP_FORBIDDEN,
                                                "invalid_request",
                                                "Host not allowed");
    }

    ctx = ngx_pcalloc(r->pool, sizeof(ngx_http_sandbox_mcp_oauth_ctx_t));
    if (ctx == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ctx->request = r;
    ctx->lcf = lcf;

    if (ngx_http_sandbox_mcp_oauth_urls(r, lcf, &ctx->issuer, &ctx->resource)
        != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    rt = ngx_http_sandbox_mcp_oauth_route(ctx);
    if (rt == NULL) {
        return NGX_HTTP_NOT_FOUND;
    }

    if (r->method == NGX_HTTP_OPTIONS && rt->cors) {
        if (ngx_http_sandbox_mcp_oauth_cors(r) != NGX_OK) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        return ngx_http_sandbox_mcp_send_json(r, NGX_HTTP_NO_CONTENT, NULL);
    }

    method = (r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD))
             ? NGX_HTTP_SANDBOX_MCP_OAUTH_GET
             : (r->method == NGX_HTTP_POST)
               ? NGX_HTTP_SANDBOX_MCP_OAUTH_POST : 0;

    if (!(method & rt->methods)) {
        if (ngx_http_sandbox_mcp_add_header(r, "Allow",
                        rt->methods == NGX_HTTP_SANDBOX_MCP_OAUTH_GET
                        ? &allow_get
                        : rt->methods == NGX_HTTP_SANDBOX_MCP_OAUTH_POST
                          ? &allow_post : &allow_both)
            != NGX_OK)
        {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        return ngx_http_sandbox_mcp_oauth_error(r, NGX_HTTP_NOT_ALLOWED,
                                                "invalid_request",
                                                "method not allowed");
    }

    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (cln == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    cln->handler = ngx_http_sandbox_mcp_oauth_cleanup;
    cln->data = ctx;

    ngx_http_set_ctx(r, ctx, ngx_http_sandbox_mcp_module);

    return ngx_http_sandbox_mcp_oauth_start(ctx, rt);
}
