/*
 * Client ID metadata documents (the MCP authorization spec of 2025-11-25):
 * a client_id that is an https URL names a JSON document describing the
 * client.  It is fetched through a subrequest to an internal location
 * (sandbox_mcp_oauth_client_metadata_location; the worker never blocks),
 * bounded (8 KiB, the location's timeouts), checked like a registration
 * (it must name itself as client_id), and cached as the client for an hour.
 *
 *   location = /_smcp_client_metadata {       # ?url=<the client_id>
 *       internal;
 *       resolver 127.0.0.53;
 *       proxy_pass_request_headers off;
 *       proxy_pass_request_body off;
 *       proxy_method GET;
 *       proxy_connect_timeout 3s;
 *       proxy_read_timeout 3s;
 *       proxy_ssl_server_name on;
 *       subrequest_output_buffer_size 8k;
 *       proxy_pass $arg_url;
 *   }
 */

#include "ngx_http_sandbox_mcp_oauth.h"
#include "ngx_http_sandbox_mcp_http.h"
#include "ngx_http_sandbox_mcp_scripts.h"


#define NGX_HTTP_SANDBOX_MCP_OAUTH_CIMD_MAX   8192
#define NGX_HTTP_SANDBOX_MCP_OAUTH_CIMD_TTL   3600


typedef struct {
    ngx_http_sandbox_mcp_oauth_ctx_t   *ctx;
    ngx_str_t                           name;
    ngx_str_t                           uris;
} ngx_http_sandbox_mcp_oauth_cimd_t;


/*
 * https://HOST[:port]/PATH, PATH not "/", of [A-Za-z0-9-._~/:] only (no
 * query, fragment, escape or userinfo: it goes into a URL as it is), no
 * dot segment.
 */
ngx_uint_t
ngx_http_sandbox_mcp_oauth_metadata_client(ngx_http_sandbox_mcp_oauth_ctx_t
    *ctx)
{
    u_char     *p, *last, *path;
    ngx_str_t  *id;

    id = &ctx->client_id;

    if (ctx->lcf->oauth.metadata_location.len == 0
        || id->len <= 8 || id->len > NGX_HTTP_SANDBOX_MCP_OAUTH_URI_MAX
        || ngx_strncmp(id->data, "https://", 8) != 0)
    {
        return 0;
    }

    last = id->data + id->len;
    path = ngx_strlchr(id->data + 8, last, '/');

    if (path == NULL || path == id->data + 8 || path + 1 == last) {
        return 0;
    }

    for (p = id->data + 8; p < last; p++) {
        if (!(isalnum(*p) || *p == '-' || *p == '.' || *p == '_'
              || *p == '~' || *p == '/' || *p == ':'))
        {
            return 0;
        }

        if (*p == '/' && p + 1 < last && p[1] == '.'
            && (p + 2 == last || p[2] == '/'
                || (p[2] == '.' && (p + 3 == last || p[3] == '/'))))
        {
            return 0;
        }
    }

    return 1;
}


static void
ngx_http_sandbox_mcp_oauth_cimd_stored(void *data, redisReply *reply)
{
    ngx_http_sandbox_mcp_oauth_cimd_t *cm = data;

    ngx_int_t                          rc;
    ngx_http_sandbox_mcp_oauth_ctx_t  *ctx;

    ctx = cm->ctx;
    ctx->cmd = NULL;

    /* 0: another worker cached it meanwhile; the same document */
    if (reply == NULL || reply->type != REDIS_REPLY_INTEGER) {
        rc = ngx_http_sandbox_mcp_send_unavailable(ctx->request);

    } else if (reply->integer < 0) {
        /* the unused clients' bound is reached: nothing was cached */
        rc = ngx_http_sandbox_mcp_oauth_retry_after(ctx->request,
                                                    -reply->integer)
             != NGX_OK
             ? NGX_HTTP_INTERNAL_SERVER_ERROR
             : ngx_http_sandbox_mcp_oauth_page(ctx,
                               NGX_HTTP_SERVICE_UNAVAILABLE,
                               "Try again later", "Too many new clients "
                               "are signing in now "
                               "(temporarily_unavailable): try again in a "
                               "while.");

    } else {
        rc = ctx->client_known(ctx, &cm->name, &cm->uris);
    }

    if (rc != NGX_DONE) {
        ngx_http_sandbox_mcp_oauth_finalize(ctx, rc);
    }
}


static ngx_int_t
ngx_http_sandbox_mcp_oauth_cimd_refused(ngx_http_sandbox_mcp_oauth_ctx_t
    *ctx, const char *why)
{
    ngx_log_error(NGX_LOG_INFO, ctx->request->connection->log, 0,
                  "sandbox_mcp: oauth: client metadata document \"%V\" "
                  "refused: %s", &ctx->client_id, why);

    return ngx_http_sandbox_mcp_oauth_page(ctx, NGX_HTTP_BAD_REQUEST,
                                           "Client refused", why);
}


/* the document came back: checked, cached, then the request goes on */
static ngx_int_t
ngx_http_sandbox_mcp_oauth_cimd_check(void *data)
{
    ngx_http_sandbox_mcp_oauth_ctx_t *ctx = data;

    char                               *s;
    json_t                             *md, *v;
    ngx_str_t                           argv[7];
    const char                         *why, *error;
    ngx_http_request_t                 *r;
    ngx_http_sandbox_mcp_oauth_cimd_t  *cm;

    r = ctx->request;

    if (ctx->sub_status != NGX_HTTP_OK || ctx->sub_body.len == 0
        || ctx->sub_body.len > NGX_HTTP_SANDBOX_MCP_OAUTH_CIMD_MAX)
    {
        return ngx_http_sandbox_mcp_oauth_cimd_refused(ctx, "The client's "
                               "metadata document could not be fetched "
                               "(invalid_client).");
    }

    md = json_loadb((char *) ctx->sub_body.data, ctx->sub_body.len,
                    JSON_REJECT_DUPLICATES, NULL);

    if (md == NULL || ngx_http_sandbox_mcp_add_cleanup(r, md, md) != NGX_OK)
    {
        return ngx_http_sandbox_mcp_oauth_cimd_refused(ctx, "The client's "
                               "metadata document is not JSON "
                               "(invalid_client_metadata).");
    }

    v = json_object_get(md, "client_id");

    if (json_string_length(v) != ctx->client_id.len
        || ngx_strncmp(json_string_value(v), ctx->client_id.data,
                       ctx->client_id.len) != 0)
    {
        return ngx_http_sandbox_mcp_oauth_cimd_refused(ctx, "The client's "
                               "metadata document names another client_id "
                               "(invalid_client_metadata).");
    }

    v = json_object_get(md, "token_endpoint_auth_method");

    if (v && !(json_is_string(v)
               && ngx_strcmp(json_string_value(v), "none") == 0))
    {
        return ngx_http_sandbox_mcp_oauth_cimd_refused(ctx, "Only public "
                               "clients (token_endpoint_auth_method none) "
                               "are served (invalid_client_metadata).");
    }

    why = ngx_http_sandbox_mcp_oauth_check_metadata(ctx, md, &error);
    if (why) {
        return ngx_http_sandbox_mcp_oauth_cimd_refused(ctx, why);
    }

    cm = ngx_palloc(r->pool, sizeof(ngx_http_sandbox_mcp_oauth_cimd_t));
    s = json_dumps(json_object_get(md, "redirect_uris"), JSON_COMPACT);

    if (cm == NULL || s == NULL) {
        free(s);
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    cm->ctx = ctx;
    cm->uris.len = ngx_strlen(s);
    cm->uris.data = ngx_pnalloc(r->pool, cm->uris.len);
    if (cm->uris.data == NULL) {
        free(s);
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_memcpy(cm->uris.data, s, cm->uris.len);
    free(s);

    /* no name: the document's URL names it */
    v = json_object_get(md, "client_name");
    cm->name.data = (u_char *) (v ? json_string_value(v)
                                  : (char *) ctx->client_id.data);
    cm->name.len = v ? json_string_length(v) : ctx->client_id.len;

    if (ngx_http_sandbox_mcp_redis_key(r->pool, &argv[0],
                                       SMCP_KEY_OAUTH_CLIENT, &ctx->client_id)
        != NGX_OK
        || ngx_http_sandbox_mcp_redis_key(r->pool, &argv[1],
                                          SMCP_KEY_OAUTH_UNUSED, NULL)
           != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    /* anyone may name a document: it counts among the unused clients */
    argv[2] = cm->name;
    argv[3] = cm->uris;
    argv[4] = ngx_http_sandbox_mcp_redis_number(r->pool, ngx_time());
    argv[5] = ngx_http_sandbox_mcp_redis_number(r->pool,
                                         NGX_HTTP_SANDBOX_MCP_OAUTH_CIMD_TTL);
    argv[6] = ngx_http_sandbox_mcp_redis_number(r->pool,
                                         ctx->lcf->oauth.unused_clients);

    ctx->cmd = ngx_http_sandbox_mcp_redis_script(
                   &ngx_http_sandbox_mcp_script_oauth_client,
                   ngx_http_sandbox_mcp_oauth_cimd_stored, cm, 2, 7, argv);

    if (ctx->cmd == NULL) {
        return ngx_http_sandbox_mcp_send_unavailable(r);
    }

    return NGX_DONE;
}


ngx_int_t
ngx_http_sandbox_mcp_oauth_fetch_metadata(ngx_http_sandbox_mcp_oauth_ctx_t
    *ctx)
{
    u_char     *p;
    ngx_str_t   args;

    /* the URL's characters need no escape (checked) */
    args.data = ngx_pnalloc(ctx->request->pool, 4 + ctx->client_id.len);
    if (args.data == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    p = ngx_cpymem(args.data, "url=", 4);
    p = ngx_cpymem(p, ctx->client_id.data, ctx->client_id.len);
    args.len = p - args.data;

    if (ngx_http_sandbox_mcp_oauth_subrequest(ctx,
                                       &ctx->lcf->oauth.metadata_location,
                                       &args,
                                       ngx_http_sandbox_mcp_oauth_cimd_check)
        != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    return NGX_DONE;
}
