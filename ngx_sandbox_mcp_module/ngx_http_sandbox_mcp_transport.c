/*
 * MCP Streamable HTTP transport: request checks (Host, Origin, bearer
 * token, method, media types, size), JSON-RPC framing and batches, MCP
 * sessions in Redis, method dispatch and the response.
 */

#include "ngx_http_sandbox_mcp_module.h"
#include "ngx_http_sandbox_mcp_redis.h"
#include "ngx_http_sandbox_mcp_scripts.h"

#include "smcp_jsonrpc.h"
#include "smcp_jwt.h"
#include "smcp_revoked.h"
#include "smcp_validate.h"


#define NGX_HTTP_SANDBOX_MCP_SESSION_ID_LEN  64
#define NGX_HTTP_SANDBOX_MCP_MAX_GRANTS      256


static ngx_str_t  ngx_http_sandbox_mcp_versions[] = {
    ngx_string("2025-11-25"),
    ngx_string("2025-06-18"),
    ngx_string("2025-03-26"),
    ngx_null_string
};

static ngx_str_t  ngx_http_sandbox_mcp_batch_version =
    ngx_string("2025-03-26");


static void ngx_http_sandbox_mcp_body_handler(ngx_http_request_t *r);
static ngx_int_t ngx_http_sandbox_mcp_process(ngx_http_request_t *r,
    ngx_http_sandbox_mcp_ctx_t *ctx);
static ngx_int_t ngx_http_sandbox_mcp_dispatch(
    ngx_http_sandbox_mcp_ctx_t *ctx);
static ngx_int_t ngx_http_sandbox_mcp_finish(ngx_http_sandbox_mcp_ctx_t *ctx);
static void ngx_http_sandbox_mcp_finalize(ngx_http_sandbox_mcp_ctx_t *ctx,
    ngx_int_t rc);
static ngx_int_t ngx_http_sandbox_mcp_send_error(ngx_http_request_t *r,
    ngx_uint_t status, ngx_int_t code, const char *message);


/* helpers */


static ngx_table_elt_t *
ngx_http_sandbox_mcp_header(ngx_http_request_t *r, const char *name,
    size_t len)
{
    ngx_uint_t        i;
    ngx_list_part_t  *part;
    ngx_table_elt_t  *h;

    part = &r->headers_in.headers.part;
    h = part->elts;

    for (i = 0; /* void */ ; i++) {

        if (i >= part->nelts) {
            if (part->next == NULL) {
                return NULL;
            }

            part = part->next;
            h = part->elts;
            i = 0;
        }

        if (h[i].key.len == len
            && ngx_strncasecmp(h[i].key.data, (u_char *) name, len) == 0)
        {
            return &h[i];
        }
    }
}


static ngx_uint_t
ngx_http_sandbox_mcp_version_supported(ngx_str_t *v)
{
    ngx_str_t  *s;

    for (s = ngx_http_sandbox_mcp_versions; s->len; s++) {
        if (s->len == v->len && ngx_strncmp(s->data, v->data, v->len) == 0) {
            return 1;
        }
    }

    return 0;
}


static ngx_uint_t
ngx_http_sandbox_mcp_is_batch_version(ngx_str_t *v)
{
    return v->len == ngx_http_sandbox_mcp_batch_version.len
           && ngx_strncmp(v->data, ngx_http_sandbox_mcp_batch_version.data,
                          v->len) == 0;
}


static void
ngx_http_sandbox_mcp_json_cleanup(void *data)
{
    json_decref(data);
}


ngx_int_t
ngx_http_sandbox_mcp_add_cleanup(ngx_http_request_t *r, void *data,
    json_t *json)
{
    ngx_pool_cleanup_t  *cln;

    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (cln == NULL) {
        json_decref(json);
        return NGX_ERROR;
    }

    cln->handler = ngx_http_sandbox_mcp_json_cleanup;
    cln->data = json;

    return NGX_OK;
}


ngx_int_t
ngx_http_sandbox_mcp_send_json(ngx_http_request_t *r, ngx_uint_t status,
    json_t *json)
{
    char         *s;
    size_t        len;
    ngx_int_t     rc;
    ngx_buf_t    *b;
    ngx_chain_t   out;

    /* an unread body on a keep-alive connection would be taken for the
     * next request */
    rc = ngx_http_discard_request_body(r);
    if (rc != NGX_OK) {
        return rc;
    }

    r->headers_out.status = status;

    if (json == NULL) {
        r->headers_out.content_length_n = 0;
        r->header_only = 1;
        return ngx_http_send_header(r);
    }

    s = json_dumps(json, JSON_COMPACT);
    if (s == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    len = ngx_strlen(s);

    b = ngx_create_temp_buf(r->pool, len + 1);
    if (b == NULL) {
        free(s);
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    b->last = ngx_cpymem(b->last, s, len);
    *b->last++ = '\n';
    free(s);

    b->last_buf = (r == r->main) ? 1 : 0;
    b->last_in_chain = 1;

    ngx_str_set(&r->headers_out.content_type, "application/json");
    r->headers_out.content_type_len = r->headers_out.content_type.len;
    r->headers_out.content_length_n = b->last - b->pos;

    rc = ngx_http_send_header(r);

    if (rc == NGX_ERROR || rc > NGX_OK || r->header_only) {
        return rc;
    }

    out.buf = b;
    out.next = NULL;

    return ngx_http_output_filter(r, &out);
}


static ngx_int_t
ngx_http_sandbox_mcp_add_header(ngx_http_request_t *r, const char *key,
    ngx_str_t *value)
{
    ngx_table_elt_t  *h;

    h = ngx_list_push(&r->headers_out.headers);
    if (h == NULL) {
        return NGX_ERROR;
    }

    h->hash = 1;
    h->key.data = (u_char *) key;
    h->key.len = ngx_strlen(key);
    h->value = *value;

    return NGX_OK;
}


static json_t *
ngx_http_sandbox_mcp_error_object(json_t *id, ngx_int_t code,
    const char *message)
{
    return json_pack("{s:s, s:{s:I, s:s}, s:O?}", "jsonrpc", "2.0",
                     "error", "code", (json_int_t) code, "message", message,
                     "id", id ? id : json_null());
}


static ngx_int_t
ngx_http_sandbox_mcp_send_error(ngx_http_request_t *r, ngx_uint_t status,
    ngx_int_t code, const char *message)
{
    json_t     *err;
    ngx_int_t   rc;

    err = ngx_http_sandbox_mcp_error_object(NULL, code, message);
    if (err == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    rc = ngx_http_sandbox_mcp_send_json(r, status, err);
    json_decref(err);

    return rc;
}


static ngx_int_t
ngx_http_sandbox_mcp_send_unavailable(ngx_http_request_t *r)
{
    static ngx_str_t  one = ngx_string("1");

    if (ngx_http_sandbox_mcp_add_header(r, "Retry-After", &one) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    return ngx_http_sandbox_mcp_send_error(r, NGX_HTTP_SERVICE_UNAVAILABLE,
                                           NGX_HTTP_SANDBOX_MCP_INTERNAL_ERROR,
                                           "Storage unavailable: Redis is "
                                           "not reachable; retry shortly");
}


/* request checks */


static ngx_uint_t
ngx_http_sandbox_mcp_host_listed(ngx_array_t *hosts, u_char *host,
    size_t len)
{
    ngx_str_t   *h;
    ngx_uint_t   i;

    h = hosts->elts;

    for (i = 0; i < hosts->nelts; i++) {
        if ((h[i].len == 1 && h[i].data[0] == '*')
            || (h[i].len == len && ngx_strncasecmp(h[i].data, host, len) == 0))
        {
            return 1;
        }
    }

    return 0;
}


static ngx_uint_t
ngx_http_sandbox_mcp_host_allowed(ngx_http_request_t *r,
    ngx_http_sandbox_mcp_loc_conf_t *lcf)
{
    ngx_str_t  *host;

    host = &r->headers_in.server;

    if (host->len == 0) {
        /* HTTP/1.0 without Host: nothing a browser would send */
        return 1;
    }

    return ngx_http_sandbox_mcp_host_listed(lcf->allowed_hosts, host->data,
                                            host->len);
}


static ngx_uint_t
ngx_http_sandbox_mcp_origin_allowed(ngx_http_request_t *r,
    ngx_http_sandbox_mcp_loc_conf_t *lcf)
{
    u_char           *p, *last, *host;
    ngx_str_t        *o;
    ngx_uint_t        i;
    ngx_table_elt_t  *origin;

    origin = ngx_http_sandbox_mcp_header(r, "Origin", sizeof("Origin") - 1);

    if (origin == NULL) {
        /* not a browser: CLI and SDK clients send none */
        return 1;
    }

    if (lcf->allowed_origins) {
        o = lcf->allowed_origins->elts;

        for (i = 0; i < lcf->allowed_origins->nelts; i++) {
            if ((o[i].len == 1 && o[i].data[0] == '*')
                || (o[i].len == origin->value.len
                    && ngx_strncasecmp(o[i].data, origin->value.data,
                                       o[i].len) == 0))
            {
                return 1;
            }
        }

        return 0;
    }

    /* default: http(s)://<an allowed host>[:port] */

    p = origin->value.data;
    last = p + origin->value.len;

    if (last - p > 7 && ngx_strncasecmp(p, (u_char *) "http://", 7) == 0) {
        p += 7;

    } else if (last - p > 8
               && ngx_strncasecmp(p, (u_char *) "https://", 8) == 0)
    {
        p += 8;

    } else {
        return 0;
    }

    host = p;

    if (*p == '[') {
        p = ngx_strlchr(p, last, ']');
        if (p == NULL) {
            return 0;
        }

        p++;

    } else {
        while (p < last && *p != ':' && *p != '/') {
            p++;
        }
    }

    if (p < last && *p != ':') {
        return 0;
    }

    return ngx_http_sandbox_mcp_host_listed(lcf->allowed_hosts, host,
                                            p - host);
}


static ngx_int_t
ngx_http_sandbox_mcp_unauthorized(ngx_http_request_t *r, const char *reason,
    ngx_uint_t bad_token)
{
    u_char     *p;
    ngx_str_t   v;
    char        msg[256];

    v.data = ngx_pnalloc(r->pool, 256);
    if (v.data == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (bad_token) {
        p = ngx_snprintf(v.data, 256, "Bearer realm=\"sandbox-mcp\", "
                         "error=\"invalid_token\", "
                         "error_description=\"%s\"", reason);

    } else {
        p = ngx_cpymem(v.data, "Bearer realm=\"sandbox-mcp\"",
                       sizeof("Bearer realm=\"sandbox-mcp\"") - 1);
    }

    v.len = p - v.data;

    if (ngx_http_sandbox_mcp_add_header(r, "WWW-Authenticate", &v)
        != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_snprintf((u_char *) msg, sizeof(msg), "Unauthorized: %s%Z", reason);

    return ngx_http_sandbox_mcp_send_error(r, NGX_HTTP_UNAUTHORIZED,
                                           NGX_HTTP_SANDBOX_MCP_SERVER_ERROR,
                                           msg);
}


static ngx_int_t
ngx_http_sandbox_mcp_auth_failed(ngx_int_t *rc, ngx_http_request_t *r,
    const char *reason, ngx_uint_t bad_token)
{
    *rc = ngx_http_sandbox_mcp_unauthorized(r, reason, bad_token);

    return NGX_DONE;
}


/*
 * The token's "repos" claim: the repositories the tenant may name.  Absent:
 * none.  Anything but an array of valid grants refuses the token.
 */
static ngx_int_t
ngx_http_sandbox_mcp_grants(ngx_http_request_t *r,
    ngx_http_sandbox_mcp_ctx_t *ctx, json_t *repos)
{
    size_t       i;
    json_t      *v;
    ngx_str_t   *g;
    const char  *s;

    if (repos == NULL) {
        return NGX_OK;
    }

    if (!json_is_array(repos)
        || json_array_size(repos) > NGX_HTTP_SANDBOX_MCP_MAX_GRANTS)
    {
        return NGX_DECLINED;
    }

    ctx->repos = ngx_array_create(r->pool, json_array_size(repos) + 1,
                                  sizeof(ngx_str_t));
    if (ctx->repos == NULL) {
        return NGX_ERROR;
    }

    json_array_foreach(repos, i, v) {
        s = json_string_value(v);

        if (s == NULL || !smcp_grant_valid(s, json_string_length(v))) {
            return NGX_DECLINED;
        }

        g = ngx_array_push(ctx->repos);
        if (g == NULL) {
            return NGX_ERROR;
        }

        g->len = json_string_length(v);
        g->data = ngx_pnalloc(r->pool, g->len);
        if (g->data == NULL) {
            return NGX_ERROR;
        }

        ngx_memcpy(g->data, s, g->len);
    }

    return NGX_OK;
}


/* the token's id: refused if revoked; kept in ctx->jti when the worker's
 * revoked set cannot tell (the session script asks Redis) */
static ngx_int_t
ngx_http_sandbox_mcp_jti(ngx_http_request_t *r,
    ngx_http_sandbox_mcp_ctx_t *ctx, json_t *jti, const char **reason)
{
    ngx_int_t  rc;
    ngx_str_t  id;

    if (jti == NULL) {
        /* minted before token ids: cannot be revoked one by one */
        return NGX_OK;
    }

    id.data = (u_char *) json_string_value(jti);
    id.len = json_string_length(jti);

    if (!smcp_valid_jti((char *) id.data, id.len)) {
        *reason = "token id (jti) must be 1-64 characters of A-Z a-z 0-9 - _";
        return NGX_DECLINED;
    }

    rc = ngx_http_sandbox_mcp_redis_revoked(&id);

    if (rc == NGX_DECLINED) {
        *reason = "token revoked";
        return NGX_DECLINED;
    }

    if (rc == NGX_AGAIN) {
        ctx->jti.data = ngx_pnalloc(r->pool, id.len);
        if (ctx->jti.data == NULL) {
            return NGX_ERROR;
        }

        ngx_memcpy(ctx->jti.data, id.data, id.len);
        ctx->jti.len = id.len;
    }

    return NGX_OK;
}


/*
 * The claims of a verified token: scope "mcp", a valid subject (the
 * tenant), not revoked, valid grants.  NGX_DECLINED with the reason, or
 * NGX_ERROR (no memory).
 */
static ngx_int_t
ngx_http_sandbox_mcp_claims(ngx_http_request_t *r,
    ngx_http_sandbox_mcp_ctx_t *ctx, json_t *claims, const char **reason)
{
    json_t      *sub;
    ngx_int_t    rc;
    const char  *scope;

    scope = json_string_value(json_object_get(claims, "scope"));

    if (scope == NULL || ngx_strcmp(scope, SMCP_SCOPE_MCP) != 0) {
        *reason = "token scope must be \"mcp\"";
        return NGX_DECLINED;
    }

    sub = json_object_get(claims, "sub");

    if (!smcp_valid_tenant(json_string_value(sub), json_string_length(sub)))
    {
        *reason = "token subject must be 1-128 characters of "
                  "A-Z a-z 0-9 . _ - @";
        return NGX_DECLINED;
    }

    rc = ngx_http_sandbox_mcp_jti(r, ctx, json_object_get(claims, "jti"),
                                  reason);
    if (rc != NGX_OK) {
        return rc;
    }

    rc = ngx_http_sandbox_mcp_grants(r, ctx, json_object_get(claims, "repos"));

    if (rc == NGX_DECLINED) {
        *reason = "token repos claim must be an array of owner/repo, "
                  "owner/* or *";
    }

    if (rc != NGX_OK) {
        return rc;
    }

    ctx->tenant.len = json_string_length(sub);
    ctx->tenant.data = ngx_pnalloc(r->pool, ctx->tenant.len);
    if (ctx->tenant.data == NULL) {
        return NGX_ERROR;
    }

    ngx_memcpy(ctx->tenant.data, json_string_value(sub), ctx->tenant.len);

    return NGX_OK;
}


/*
 * Returns NGX_OK with the tenant set; otherwise the 401 was sent and the
 * return value is NGX_DONE with *rc holding the sender's result.
 */
static ngx_int_t
ngx_http_sandbox_mcp_authenticate(ngx_http_request_t *r,
    ngx_http_sandbox_mcp_ctx_t *ctx, ngx_int_t *rc)
{
    u_char                            *p, *last;
    json_t                            *claims;
    ngx_int_t                          rc2;
    const char                        *reason;
    ngx_table_elt_t                   *auth;
    ngx_http_sandbox_mcp_main_conf_t  *mcf;
    char                               err[128];

    mcf = ngx_http_get_module_main_conf(r, ngx_http_sandbox_mcp_module);

    auth = r->headers_in.authorization;

    if (auth == NULL) {
        return ngx_http_sandbox_mcp_auth_failed(rc, r, "a bearer token "
                                                "is required", 0);
    }

    p = auth->value.data;
    last = p + auth->value.len;

    if (last - p < 7 || ngx_strncasecmp(p, (u_char *) "Bearer ", 7) != 0) {
        return ngx_http_sandbox_mcp_auth_failed(rc, r, "a bearer token "
                                                "is required", 0);
    }

    p += 7;

    while (p < last && *p == ' ') {
        p++;
    }

    if (smcp_jwt_verify(mcf->secret, mcf->secret_len, (char *) p, last - p,
                        ngx_time(), &claims, err, sizeof(err))
        != SMCP_OK)
    {
        ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                      "sandbox_mcp: token refused: %s", err);

        return ngx_http_sandbox_mcp_auth_failed(rc, r, err, 1);
    }

    reason = "token refused";
    rc2 = ngx_http_sandbox_mcp_claims(r, ctx, claims, &reason);

    json_decref(claims);

    if (rc2 == NGX_ERROR) {
        *rc = NGX_HTTP_INTERNAL_SERVER_ERROR;
        return NGX_DONE;
    }

    if (rc2 == NGX_DECLINED) {
        ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                      "sandbox_mcp: token refused: %s", reason);

        return ngx_http_sandbox_mcp_auth_failed(rc, r, reason, 1);
    }

    return NGX_OK;
}


static ngx_uint_t
ngx_http_sandbox_mcp_accepts(ngx_http_request_t *r)
{
    ngx_table_elt_t  *accept;

    accept = ngx_http_sandbox_mcp_header(r, "Accept", sizeof("Accept") - 1);

    if (accept == NULL) {
        return 0;
    }

    return ngx_strlcasestrn(accept->value.data,
                            accept->value.data + accept->value.len,
                            (u_char *) "application/json",
                            sizeof("application/json") - 2) != NULL
           && ngx_strlcasestrn(accept->value.data,
                               accept->value.data + accept->value.len,
                               (u_char *) "text/event-stream",
                               sizeof("text/event-stream") - 2) != NULL;
}


static ngx_uint_t
ngx_http_sandbox_mcp_json_content(ngx_http_request_t *r)
{
    ngx_table_elt_t  *ct;
    size_t            n;

    ct = r->headers_in.content_type;
    n = sizeof("application/json") - 1;

    if (ct == NULL || ct->value.len < n
        || ngx_strncasecmp(ct->value.data, (u_char *) "application/json", n)
           != 0)
    {
        return 0;
    }

    return ct->value.len == n || ct->value.data[n] == ';'
           || ct->value.data[n] == ' ';
}


/* request life cycle */


static void
ngx_http_sandbox_mcp_cleanup(void *data)
{
    ngx_http_sandbox_mcp_ctx_t *ctx = data;

    ngx_uint_t  i;

    /* the request is going away: no callback may reach it any more */

    ctx->done = 1;

    if (ctx->cmd) {
        ngx_http_sandbox_mcp_redis_cancel(ctx->cmd);
        ctx->cmd = NULL;
    }

    for (i = 0; i < ctx->ncalls; i++) {
        if (ctx->calls[i].cmd) {
            ngx_http_sandbox_mcp_redis_cancel(ctx->calls[i].cmd);
            ctx->calls[i].cmd = NULL;
        }

        ngx_http_sandbox_mcp_tools_cleanup(&ctx->calls[i]);

        if (ctx->calls[i].response) {
            json_decref(ctx->calls[i].response);
            ctx->calls[i].response = NULL;
        }
    }

    if (ctx->body) {
        json_decref(ctx->body);
        ctx->body = NULL;
    }
}


ngx_int_t
ngx_http_sandbox_mcp_handler(ngx_http_request_t *r)
{
    ngx_int_t                         rc;
    ngx_table_elt_t                  *h;
    ngx_pool_cleanup_t               *cln;
    ngx_http_sandbox_mcp_ctx_t       *ctx;
    ngx_http_sandbox_mcp_loc_conf_t  *lcf;

    static ngx_str_t  allow = ngx_string("POST, DELETE");

    lcf = ngx_http_get_module_loc_conf(r, ngx_http_sandbox_mcp_module);

    /* DNS rebinding: a page on another name must not reach us */

    if (!ngx_http_sandbox_mcp_host_allowed(r, lcf)) {
        ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                      "sandbox_mcp: Host \"%V\" not allowed",
                      &r->headers_in.server);
        return ngx_http_sandbox_mcp_send_error(r, NGX_HTTP_FORBIDDEN,
                                     NGX_HTTP_SANDBOX_MCP_SERVER_ERROR,
                                     "Forbidden: Host header not allowed");
    }

    if (!ngx_http_sandbox_mcp_origin_allowed(r, lcf)) {
        ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                      "sandbox_mcp: Origin not allowed");
        return ngx_http_sandbox_mcp_send_error(r, NGX_HTTP_FORBIDDEN,
                                     NGX_HTTP_SANDBOX_MCP_SERVER_ERROR,
                                     "Forbidden: Origin not allowed");
    }

    ctx = ngx_pcalloc(r->pool, sizeof(ngx_http_sandbox_mcp_ctx_t));
    if (ctx == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ctx->request = r;

    if (ngx_http_sandbox_mcp_authenticate(r, ctx, &rc) != NGX_OK) {
        return rc;
    }

    if (r->method != NGX_HTTP_POST && r->method != NGX_HTTP_DELETE) {
        /* no server-initiated stream is offered */
        if (ngx_http_sandbox_mcp_add_header(r, "Allow", &allow) != NGX_OK) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        return ngx_http_sandbox_mcp_send_error(r, NGX_HTTP_NOT_ALLOWED,
                               NGX_HTTP_SANDBOX_MCP_SERVER_ERROR,
                               "Method not allowed: use POST (or DELETE to "
                               "end a session)");
    }

    h = ngx_http_sandbox_mcp_header(r, "MCP-Protocol-Version",
                                    sizeof("MCP-Protocol-Version") - 1);
    if (h) {
        if (!ngx_http_sandbox_mcp_version_supported(&h->value)) {
            return ngx_http_sandbox_mcp_send_error(r, NGX_HTTP_BAD_REQUEST,
                               NGX_HTTP_SANDBOX_MCP_SERVER_ERROR,
                               "Bad Request: unsupported MCP-Protocol-Version "
                               "(supported: 2025-11-25, 2025-06-18, "
                               "2025-03-26)");
        }

        ctx->header_version = h->value;
    }

    h = ngx_http_sandbox_mcp_header(r, "Mcp-Session-Id",
                                    sizeof("Mcp-Session-Id") - 1);
    if (h) {
        ctx->session_id = h->value;
    }

    if (r->method == NGX_HTTP_POST) {
        if (!ngx_http_sandbox_mcp_accepts(r)) {
            return ngx_http_sandbox_mcp_send_error(r,
                               NGX_HTTP_SANDBOX_MCP_NOT_ACCEPTABLE,
                               NGX_HTTP_SANDBOX_MCP_SERVER_ERROR,
                               "Not Acceptable: Accept must list both "
                               "application/json and text/event-stream");
        }

        if (!ngx_http_sandbox_mcp_json_content(r)) {
            return ngx_http_sandbox_mcp_send_error(r,
                               NGX_HTTP_UNSUPPORTED_MEDIA_TYPE,
                               NGX_HTTP_SANDBOX_MCP_SERVER_ERROR,
                               "Unsupported Media Type: Content-Type must be "
                               "application/json");
        }

        if (r->headers_in.content_length_n > (off_t) lcf->max_body) {
            return ngx_http_sandbox_mcp_send_error(r,
                               NGX_HTTP_REQUEST_ENTITY_TOO_LARGE,
                               NGX_HTTP_SANDBOX_MCP_SERVER_ERROR,
                               "Payload Too Large: the body exceeds "
                               "sandbox_mcp_max_body");
        }

    } else if (ctx->session_id.len == 0) {
        return ngx_http_sandbox_mcp_send_error(r, NGX_HTTP_BAD_REQUEST,
                               NGX_HTTP_SANDBOX_MCP_SERVER_ERROR,
                               "Bad Request: Mcp-Session-Id header is "
                               "required");
    }

    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (cln == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    cln->handler = ngx_http_sandbox_mcp_cleanup;
    cln->data = ctx;

    ngx_http_set_ctx(r, ctx, ngx_http_sandbox_mcp_module);

    /* the body is kept whole in memory up to sandbox_mcp_max_body */
    r->request_body_in_single_buf = 1;

    rc = ngx_http_read_client_request_body(r,
                                           ngx_http_sandbox_mcp_body_handler);

    if (rc >= NGX_HTTP_SPECIAL_RESPONSE) {
        return rc;
    }

    return NGX_DONE;
}


static void
ngx_http_sandbox_mcp_body_handler(ngx_http_request_t *r)
{
    ngx_int_t                    rc;
    ngx_http_sandbox_mcp_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_sandbox_mcp_module);

    rc = ngx_http_sandbox_mcp_process(r, ctx);

    if (rc == NGX_DONE) {
        /* a Redis reply will finish the request */
        return;
    }

    ngx_http_finalize_request(r, rc);
}


static ngx_int_t
ngx_http_sandbox_mcp_read_body(ngx_http_request_t *r, ngx_str_t *body,
    size_t max)
{
    size_t        len;
    u_char       *p;
    ssize_t       n;
    ngx_buf_t    *b;
    ngx_chain_t  *cl;

    len = 0;

    if (r->request_body == NULL || r->request_body->bufs == NULL) {
        ngx_str_null(body);
        return NGX_OK;
    }

    for (cl = r->request_body->bufs; cl; cl = cl->next) {
        b = cl->buf;
        len += b->in_file ? (size_t) (b->file_last - b->file_pos)
                          : (size_t) (b->last - b->pos);
    }

    if (len > max) {
        return NGX_DECLINED;
    }

    body->data = ngx_pnalloc(r->pool, len + 1);
    if (body->data == NULL) {
        return NGX_ERROR;
    }

    p = body->data;

    for (cl = r->request_body->bufs; cl; cl = cl->next) {
        b = cl->buf;

        if (b->in_file) {
            /* bodies beyond client_body_buffer_size were spooled to disk */
            n = ngx_read_file(b->file, p, b->file_last - b->file_pos,
                              b->file_pos);
            if (n != b->file_last - b->file_pos) {
                return NGX_ERROR;
            }

            p += n;

        } else if (b->last > b->pos) {
            /* (an empty body's buffer may have no memory at all) */
            p = ngx_cpymem(p, b->pos, b->last - b->pos);
        }
    }

    body->len = p - body->data;

    return NGX_OK;
}


static ngx_uint_t
ngx_http_sandbox_mcp_is_method(json_t *msg, const char *name)
{
    const char  *m;

    m = json_string_value(json_object_get(msg, "method"));

    return m != NULL && ngx_strcmp(m, name) == 0;
}


/* a session script found the token in the hash `revoked`: 401 */
static ngx_uint_t
ngx_http_sandbox_mcp_reply_revoked(ngx_http_sandbox_mcp_ctx_t *ctx,
    redisReply *reply)
{
    if (reply == NULL || reply->type != REDIS_REPLY_STATUS
        || reply->len != sizeof("REVOKED") - 1
        || ngx_strncmp(reply->str, "REVOKED", reply->len) != 0)
    {
        return 0;
    }

    ngx_log_error(NGX_LOG_INFO, ctx->request->connection->log, 0,
                  "sandbox_mcp: token refused: token revoked");

    ngx_http_sandbox_mcp_finalize(ctx,
        ngx_http_sandbox_mcp_unauthorized(ctx->request, "token revoked", 1));

    return 1;
}


static void
ngx_http_sandbox_mcp_session_created(void *data, redisReply *reply)
{
    ngx_http_sandbox_mcp_ctx_t *ctx = data;

    ngx_int_t  rc;

    ctx->cmd = NULL;

    if (ngx_http_sandbox_mcp_reply_revoked(ctx, reply)) {
        return;
    }

    if (reply == NULL || reply->type != REDIS_REPLY_INTEGER
        || reply->integer != 1)
    {
        if (reply && reply->type == REDIS_REPLY_ERROR) {
            ngx_log_error(NGX_LOG_ERR, ctx->request->connection->log, 0,
                          "sandbox_mcp: redis: %s", reply->str);
        }

        ngx_http_sandbox_mcp_finalize(ctx,
                          ngx_http_sandbox_mcp_send_unavailable(ctx->request));
        return;
    }

    rc = ngx_http_sandbox_mcp_dispatch(ctx);

    if (rc != NGX_DONE) {
        ngx_http_sandbox_mcp_finalize(ctx, rc);
    }
}


static ngx_int_t
ngx_http_sandbox_mcp_initialize(ngx_http_sandbox_mcp_ctx_t *ctx)
{
    json_t                           *params, *client, *pv;
    const char                       *name, *version;
    ngx_str_t                         key, v, argv[9];
    ngx_http_request_t               *r;
    ngx_http_sandbox_mcp_loc_conf_t  *lcf;
    char                              sid[NGX_HTTP_SANDBOX_MCP_SESSION_ID_LEN
                                          + 1];

    r = ctx->request;
    lcf = ngx_http_get_module_loc_conf(r, ngx_http_sandbox_mcp_module);

    params = json_object_get(ctx->body, "params");
    pv = json_object_get(params, "protocolVersion");
    client = json_object_get(params, "clientInfo");

    /* the client's version if we speak it, else our latest */

    v.data = (u_char *) json_string_value(pv);
    v.len = v.data ? json_string_length(pv) : 0;

    ctx->version = (v.len && ngx_http_sandbox_mcp_version_supported(&v))
                   ? v : ngx_http_sandbox_mcp_versions[0];

    /* 256 random bits */
    if (smcp_random_hex(sid, NGX_HTTP_SANDBOX_MCP_SESSION_ID_LEN / 2)
        != SMCP_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ctx->session_id.len = NGX_HTTP_SANDBOX_MCP_SESSION_ID_LEN;
    ctx->session_id.data = ngx_pnalloc(r->pool, ctx->session_id.len);
    if (ctx->session_id.data == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_memcpy(ctx->session_id.data, sid, ctx->session_id.len);

    if (ngx_http_sandbox_mcp_redis_key(r->pool, &key, SMCP_KEY_MCP_SESSION,
                                       &ctx->session_id)
        != NGX_OK
        || ngx_http_sandbox_mcp_redis_key(r->pool, &argv[1], SMCP_KEY_REVOKED,
                                          NULL)
           != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    name = json_string_value(json_object_get(client, "name"));
    version = json_string_value(json_object_get(client, "version"));

    argv[0] = key;
    argv[2] = ctx->tenant;
    argv[3] = ctx->version;
    argv[4].data = (u_char *) (name ? name : "");
    argv[4].len = ngx_strlen(argv[4].data);
    argv[5].data = (u_char *) (version ? version : "");
    argv[5].len = ngx_strlen(argv[5].data);
    argv[6] = ngx_http_sandbox_mcp_redis_number(r->pool,
                                                (int64_t) ngx_time() * 1000);
    argv[7] = ngx_http_sandbox_mcp_redis_number(r->pool,
                                        (int64_t) lcf->session_ttl * 1000);
    argv[8] = ctx->jti;

    ctx->cmd = ngx_http_sandbox_mcp_redis_script(
                   &ngx_http_sandbox_mcp_script_session_create,
                   ngx_http_sandbox_mcp_session_created, ctx, 2, 9, argv);

    if (ctx->cmd == NULL) {
        return ngx_http_sandbox_mcp_send_unavailable(r);
    }

    return NGX_DONE;
}


static void
ngx_http_sandbox_mcp_session_found(void *data, redisReply *reply)
{
    ngx_http_sandbox_mcp_ctx_t *ctx = data;

    ngx_int_t            rc;
    ngx_http_request_t  *r;

    r = ctx->request;
    ctx->cmd = NULL;

    if (ngx_http_sandbox_mcp_reply_revoked(ctx, reply)) {
        return;
    }

    if (reply == NULL || reply->type == REDIS_REPLY_ERROR) {
        if (reply) {
            ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                          "sandbox_mcp: redis: %s", reply->str);
        }

        ngx_http_sandbox_mcp_finalize(ctx,
                                      ngx_http_sandbox_mcp_send_unavailable(r));
        return;
    }

    if (reply->type != REDIS_REPLY_STRING) {
        /* unknown, expired, deleted, or another tenant's */
        ngx_http_sandbox_mcp_finalize(ctx,
            ngx_http_sandbox_mcp_send_error(r, NGX_HTTP_NOT_FOUND,
                                      NGX_HTTP_SANDBOX_MCP_SESSION_NOT_FOUND,
                                      "Session not found"));
        return;
    }

    if (ctx->initialize) {
        ngx_http_sandbox_mcp_finalize(ctx,
            ngx_http_sandbox_mcp_send_error(r, NGX_HTTP_BAD_REQUEST,
                                      NGX_HTTP_SANDBOX_MCP_INVALID_REQUEST,
                                      "Invalid Request: this session is "
                                      "already initialized"));
        return;
    }

    /* the negotiated version, or the spec's fallback */
    ctx->version.len = reply->len;
    ctx->version.data = ngx_pnalloc(r->pool, reply->len);
    if (ctx->version.data == NULL) {
        ngx_http_sandbox_mcp_finalize(ctx, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    ngx_memcpy(ctx->version.data, reply->str, reply->len);

    if (!ngx_http_sandbox_mcp_version_supported(&ctx->version)) {
        ctx->version = ngx_http_sandbox_mcp_batch_version;
    }

    /* batches belong to the negotiated 2025-03-26 only: no header turns
     * them on in a later version's session */
    ctx->batch_session = ngx_http_sandbox_mcp_is_batch_version(&ctx->version);

    if (ctx->header_version.len) {
        ctx->version = ctx->header_version;
    }

    rc = ngx_http_sandbox_mcp_dispatch(ctx);

    if (rc != NGX_DONE) {
        ngx_http_sandbox_mcp_finalize(ctx, rc);
    }
}


static void
ngx_http_sandbox_mcp_session_deleted(void *data, redisReply *reply)
{
    ngx_http_sandbox_mcp_ctx_t *ctx = data;

    ngx_http_request_t  *r;

    r = ctx->request;
    ctx->cmd = NULL;

    if (ngx_http_sandbox_mcp_reply_revoked(ctx, reply)) {
        return;
    }

    if (reply == NULL || reply->type != REDIS_REPLY_INTEGER) {
        ngx_http_sandbox_mcp_finalize(ctx,
                                      ngx_http_sandbox_mcp_send_unavailable(r));
        return;
    }

    if (reply->integer == 0) {
        ngx_http_sandbox_mcp_finalize(ctx,
            ngx_http_sandbox_mcp_send_error(r, NGX_HTTP_NOT_FOUND,
                                      NGX_HTTP_SANDBOX_MCP_SESSION_NOT_FOUND,
                                      "Session not found"));
        return;
    }

    ngx_http_sandbox_mcp_finalize(ctx,
                      ngx_http_sandbox_mcp_send_json(r, NGX_HTTP_OK, NULL));
}


static ngx_int_t
ngx_http_sandbox_mcp_session_command(ngx_http_sandbox_mcp_ctx_t *ctx,
    ngx_http_sandbox_mcp_script_t *script,
    ngx_http_sandbox_mcp_redis_handler_pt handler)
{
    u_char                           *p;
    ngx_str_t                         argv[5];
    ngx_http_request_t               *r;
    ngx_http_sandbox_mcp_loc_conf_t  *lcf;

    r = ctx->request;
    lcf = ngx_http_get_module_loc_conf(r, ngx_http_sandbox_mcp_module);

    /* ids we issue are 64 hex digits; anything else is unknown */

    if (ctx->session_id.len != NGX_HTTP_SANDBOX_MCP_SESSION_ID_LEN) {
        goto not_found;
    }

    for (p = ctx->session_id.data;
         p < ctx->session_id.data + ctx->session_id.len;
         p++)
    {
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f'))) {
            goto not_found;
        }
    }

    if (ngx_http_sandbox_mcp_redis_key(r->pool, &argv[0],
                                       SMCP_KEY_MCP_SESSION, &ctx->session_id)
        != NGX_OK
        || ngx_http_sandbox_mcp_redis_key(r->pool, &argv[1], SMCP_KEY_REVOKED,
                                          NULL)
           != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    argv[2] = ctx->tenant;
    argv[3] = ngx_http_sandbox_mcp_redis_number(r->pool,
                                        (int64_t) lcf->session_ttl * 1000);
    argv[4] = ctx->jti;

    ctx->cmd = ngx_http_sandbox_mcp_redis_script(script, handler, ctx, 2, 5,
                                                 argv);

    if (ctx->cmd == NULL) {
        return ngx_http_sandbox_mcp_send_unavailable(r);
    }

    return NGX_DONE;

not_found:

    if (ctx->initialize) {
        /* a stale id on initialize: start afresh */
        return ngx_http_sandbox_mcp_initialize(ctx);
    }

    return ngx_http_sandbox_mcp_send_error(r, NGX_HTTP_NOT_FOUND,
                                      NGX_HTTP_SANDBOX_MCP_SESSION_NOT_FOUND,
                                      "Session not found");
}


static ngx_int_t
ngx_http_sandbox_mcp_process(ngx_http_request_t *r,
    ngx_http_sandbox_mcp_ctx_t *ctx)
{
    int                               batch;
    ngx_int_t                         rc;
    ngx_str_t                         body;
    ngx_http_sandbox_mcp_loc_conf_t  *lcf;

    lcf = ngx_http_get_module_loc_conf(r, ngx_http_sandbox_mcp_module);

    if (r->method == NGX_HTTP_DELETE) {
        return ngx_http_sandbox_mcp_session_command(ctx,
                                  &ngx_http_sandbox_mcp_script_session_delete,
                                  ngx_http_sandbox_mcp_session_deleted);
    }

    rc = ngx_http_sandbox_mcp_read_body(r, &body, lcf->max_body);

    if (rc == NGX_DECLINED) {
        return ngx_http_sandbox_mcp_send_error(r,
                               NGX_HTTP_REQUEST_ENTITY_TOO_LARGE,
                               NGX_HTTP_SANDBOX_MCP_SERVER_ERROR,
                               "Payload Too Large: the body exceeds "
                               "sandbox_mcp_max_body");
    }

    if (rc != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    switch (smcp_jsonrpc_parse((char *) body.data, body.len, &ctx->body,
                               &batch))
    {
    case SMCP_JSONRPC_OK:
        break;

    case SMCP_JSONRPC_PARSE_ERROR:
        return ngx_http_sandbox_mcp_send_error(r, NGX_HTTP_BAD_REQUEST,
                                           NGX_HTTP_SANDBOX_MCP_PARSE_ERROR,
                                           "Parse error: the body is not "
                                           "valid JSON");

    case SMCP_JSONRPC_EMPTY_BATCH:
        return ngx_http_sandbox_mcp_send_error(r, NGX_HTTP_BAD_REQUEST,
                               NGX_HTTP_SANDBOX_MCP_INVALID_REQUEST,
                               "Invalid Request: empty batch");

    case SMCP_JSONRPC_BATCH_TOO_LONG:
        return ngx_http_sandbox_mcp_send_error(r, NGX_HTTP_BAD_REQUEST,
                               NGX_HTTP_SANDBOX_MCP_INVALID_REQUEST,
                               "Invalid Request: a batch holds at most 32 "
                               "messages");

    default: /* SMCP_JSONRPC_INVALID */
        return ngx_http_sandbox_mcp_send_error(r, NGX_HTTP_BAD_REQUEST,
                               NGX_HTTP_SANDBOX_MCP_INVALID_REQUEST,
                               "Invalid Request: not a JSON-RPC 2.0 message");
    }

    ctx->batch = batch;

    if (!batch && ngx_http_sandbox_mcp_is_method(ctx->body, "initialize")) {
        ctx->initialize = 1;

        if (json_object_get(ctx->body, "id") == NULL) {
            return ngx_http_sandbox_mcp_send_error(r, NGX_HTTP_BAD_REQUEST,
                               NGX_HTTP_SANDBOX_MCP_INVALID_REQUEST,
                               "Invalid Request: initialize needs an id");
        }

        if (ctx->session_id.len == 0) {
            return ngx_http_sandbox_mcp_initialize(ctx);
        }
    }

    if (ctx->session_id.len == 0) {
        return ngx_http_sandbox_mcp_send_error(r, NGX_HTTP_BAD_REQUEST,
                               NGX_HTTP_SANDBOX_MCP_SERVER_ERROR,
                               "Bad Request: Mcp-Session-Id header is "
                               "required (send initialize first)");
    }

    return ngx_http_sandbox_mcp_session_command(ctx,
                                   &ngx_http_sandbox_mcp_script_session_touch,
                                   ngx_http_sandbox_mcp_session_found);
}


/* dispatch */


static json_t *
ngx_http_sandbox_mcp_initialize_result(ngx_http_sandbox_mcp_ctx_t *ctx)
{
    return json_pack("{s:s%, s:{s:{s:b}}, s:{s:s, s:s, s:s}, s:s}",
                     "protocolVersion", (char *) ctx->version.data,
                     ctx->version.len,
                     "capabilities", "tools", "listChanged", 0,
                     "serverInfo",
                         "name", NGX_HTTP_SANDBOX_MCP_SERVER_NAME,
                         "title", "OpenCode sandboxes",
                         "version", NGX_HTTP_SANDBOX_MCP_VERSION,
                     "instructions",
                     "Delegate long coding tasks to the OpenCode agent in an "
                     "isolated sandbox. opencode_run_task returns a runId at "
                     "once; poll opencode_get_result (waitSeconds long-polls) "
                     "or share the watchUrl. Pass the returned sessionId to "
                     "continue in the same workspace and conversation.");
}


static void
ngx_http_sandbox_mcp_start_call(ngx_http_sandbox_mcp_call_t *call,
    json_t *msg)
{
    char                              err[128];
    json_t                           *params, *result;
    const char                       *method;
    ngx_http_sandbox_mcp_ctx_t       *ctx;
    ngx_http_sandbox_mcp_loc_conf_t  *lcf;

    ctx = call->ctx;
    lcf = ngx_http_get_module_loc_conf(ctx->request,
                                       ngx_http_sandbox_mcp_module);

    if (!smcp_jsonrpc_valid(msg)) {
        call->id = json_null();
        ngx_http_sandbox_mcp_call_error(call,
                                        NGX_HTTP_SANDBOX_MCP_INVALID_REQUEST,
                                        "Invalid Request: not a JSON-RPC 2.0 "
                                        "message");
        return;
    }

    method = json_string_value(json_object_get(msg, "method"));
    call->id = json_object_get(msg, "id");

    if (method == NULL) {
        /* a response to a request of ours: nothing to answer */
        call->id = NULL;
        return;
    }

    if (call->id == NULL) {
        /* notifications (initialized, cancelled, ...) are never answered */
        return;
    }

    params = json_object_get(msg, "params");

    if (ngx_strcmp(method, "initialize") == 0) {
        if (!ctx->initialize || ctx->batch) {
            ngx_http_sandbox_mcp_call_error(call,
                                       NGX_HTTP_SANDBOX_MCP_INVALID_REQUEST,
                                       "Invalid Request: initialize must be "
                                       "sent alone, once per session");
            return;
        }

        ngx_http_sandbox_mcp_call_result(call,
                                 ngx_http_sandbox_mcp_initialize_result(ctx));
        return;
    }

    if (ngx_strcmp(method, "ping") == 0) {
        ngx_http_sandbox_mcp_call_result(call, json_object());
        return;
    }

    if (ngx_strcmp(method, "tools/list") == 0) {
        result = ngx_http_sandbox_mcp_tools_list(lcf, params, err,
                                                 sizeof(err));
        if (result == NULL) {
            ngx_http_sandbox_mcp_call_error(call,
                                       NGX_HTTP_SANDBOX_MCP_INVALID_PARAMS,
                                       "%s", err);
            return;
        }

        ngx_http_sandbox_mcp_call_result(call, result);
        return;
    }

    if (ngx_strcmp(method, "tools/call") == 0) {
        call->pending = 1;
        ctx->pending++;
        ngx_http_sandbox_mcp_tools_call(call, params);
        return;
    }

    ngx_http_sandbox_mcp_call_error(call, NGX_HTTP_SANDBOX_MCP_METHOD_NOT_FOUND,
                                    "Method not found: %s", method);
}


static ngx_int_t
ngx_http_sandbox_mcp_dispatch(ngx_http_sandbox_mcp_ctx_t *ctx)
{
    size_t               i, n;
    ngx_http_request_t  *r;

    r = ctx->request;

    if (ctx->batch
        && !(ctx->batch_session
             && ngx_http_sandbox_mcp_is_batch_version(&ctx->version)))
    {
        return ngx_http_sandbox_mcp_send_error(r, NGX_HTTP_BAD_REQUEST,
                               NGX_HTTP_SANDBOX_MCP_INVALID_REQUEST,
                               "Invalid Request: batches are only allowed in "
                               "sessions that negotiated protocol version "
                               "2025-03-26");
    }

    n = ctx->batch ? json_array_size(ctx->body) : 1;

    ctx->calls = ngx_pcalloc(r->pool, n * sizeof(ngx_http_sandbox_mcp_call_t));
    if (ctx->calls == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ctx->ncalls = n;

    /* held while starting the calls: one finishing early must not answer */
    ctx->pending = 1;

    for (i = 0; i < n; i++) {
        ctx->calls[i].ctx = ctx;
        ngx_queue_init(&ctx->calls[i].waiter);

        ngx_http_sandbox_mcp_start_call(&ctx->calls[i],
                                        ctx->batch
                                        ? json_array_get(ctx->body, i)
                                        : ctx->body);
    }

    if (--ctx->pending) {
        return NGX_DONE;
    }

    return ngx_http_sandbox_mcp_finish(ctx);
}


void
ngx_http_sandbox_mcp_call_result(ngx_http_sandbox_mcp_call_t *call,
    json_t *result)
{
    if (result == NULL) {
        ngx_http_sandbox_mcp_call_error(call,
                                        NGX_HTTP_SANDBOX_MCP_INTERNAL_ERROR,
                                        "Internal error");
        return;
    }

    if (call->response) {
        json_decref(call->response);
    }

    call->response = json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0",
                               "id", call->id, "result", result);
}


void
ngx_http_sandbox_mcp_call_error(ngx_http_sandbox_mcp_call_t *call,
    ngx_int_t code, const char *fmt, ...)
{
    u_char   *p;
    va_list   args;
    u_char    msg[512];

    va_start(args, fmt);
    p = ngx_vslprintf(msg, msg + sizeof(msg) - 1, fmt, args);
    va_end(args);

    *p = '\0';

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
                                    "Storage unavailable: Redis is not "
                                    "reachable; retry shortly");
}


void
ngx_http_sandbox_mcp_call_done(ngx_http_sandbox_mcp_call_t *call)
{
    ngx_http_sandbox_mcp_ctx_t  *ctx;

    ctx = call->ctx;

    if (!call->pending || ctx->done) {
        return;
    }

    call->pending = 0;

    if (--ctx->pending == 0) {
        ngx_http_sandbox_mcp_finalize(ctx, ngx_http_sandbox_mcp_finish(ctx));
    }
}


static ngx_int_t
ngx_http_sandbox_mcp_finish(ngx_http_sandbox_mcp_ctx_t *ctx)
{
    json_t              *out, *one;
    ngx_int_t            rc;
    ngx_uint_t           i, n;
    ngx_http_request_t  *r;

    static ngx_str_t  one_sec = ngx_string("1");

    r = ctx->request;

    out = ctx->batch ? json_array() : NULL;
    one = NULL;
    n = 0;

    for (i = 0; i < ctx->ncalls; i++) {
        if (ctx->calls[i].response == NULL) {
            continue;
        }

        n++;
        one = ctx->calls[i].response;

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

    rc = ngx_http_sandbox_mcp_send_json(r, ctx->status ? ctx->status
                                                       : NGX_HTTP_OK,
                                        out ? out : one);
    json_decref(out);

    return rc;
}


/* called from Redis callbacks and timers: outside nginx's request flow */
static void
ngx_http_sandbox_mcp_finalize(ngx_http_sandbox_mcp_ctx_t *ctx, ngx_int_t rc)
{
    ngx_connection_t    *c;
    ngx_http_request_t  *r;

    r = ctx->request;
    c = r->connection;

    ngx_http_finalize_request(r, rc);
    ngx_http_run_posted_requests(c);
}
