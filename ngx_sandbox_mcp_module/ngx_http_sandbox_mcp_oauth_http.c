/*
 * What the OAuth files share, below all of them: the issuer and the MCP
 * URL (also /mcp's 401), the form parameters (query or body, decoded,
 * bounded, each at most once), the answers (JSON with no-store and CORS,
 * OAuth errors, HTML pages from their templates; the authorization
 * endpoint's: an error at the redirect_uri, an error page, the browser's
 * CSRF cookie), an authorization code issued and sent to the client,
 * subrequests (in memory), and small helpers (escape, SHA-256, random
 * ids).  Nothing here calls up into an endpoint: where an endpoint must
 * go on, it leaves its next step in the context.
 */

#include <openssl/sha.h>

#include "ngx_http_sandbox_mcp_oauth.h"
#include "ngx_http_sandbox_mcp_http.h"
#include "ngx_http_sandbox_mcp_scripts.h"

#include "ngx_http_sandbox_mcp_oauth_html.h"


#define NGX_HTTP_SANDBOX_MCP_OAUTH_COOKIE      "smcp_oauth_csrf"
#define NGX_HTTP_SANDBOX_MCP_OAUTH_COOKIE_LEN  32      /* hex */


ngx_int_t
ngx_http_sandbox_mcp_oauth_urls(ngx_http_request_t *r,
    ngx_http_sandbox_mcp_loc_conf_t *lcf, ngx_str_t *issuer,
    ngx_str_t *resource)
{
    u_char     *p;
    ngx_str_t  *host;

    if (lcf->oauth.issuer.len) {
        *issuer = lcf->oauth.issuer;

    } else if (lcf->public_url.len) {
        *issuer = lcf->public_url;

    } else {
        /* the Host was checked against sandbox_mcp_allowed_hosts */
        host = r->headers_in.host ? &r->headers_in.host->value : NULL;

        issuer->data = ngx_pnalloc(r->pool, sizeof("https://localhost")
                                            + (host ? host->len : 0));
        if (issuer->data == NULL) {
            return NGX_ERROR;
        }

        p = ngx_sprintf(issuer->data, "%s://",
#if (NGX_HTTP_SSL)
                        r->connection->ssl ? "https" :
#endif
                        "http");

        if (host) {
            p = ngx_cpymem(p, host->data, host->len);

        } else {
            p = ngx_cpymem(p, "localhost", 9);
        }

        issuer->len = p - issuer->data;
    }

    if (lcf->oauth.resource.len) {
        *resource = lcf->oauth.resource;
        return NGX_OK;
    }

    resource->len = issuer->len + sizeof("/mcp") - 1;
    resource->data = ngx_pnalloc(r->pool, resource->len);
    if (resource->data == NULL) {
        return NGX_ERROR;
    }

    p = ngx_cpymem(resource->data, issuer->data, issuer->len);
    ngx_memcpy(p, "/mcp", 4);

    return NGX_OK;
}


/* the path of a URL ("" when it has none) */
void
ngx_http_sandbox_mcp_oauth_path(ngx_str_t *url, ngx_str_t *path)
{
    u_char  *p, *last;

    p = url->data;
    last = p + url->len;

    p = ngx_strlcasestrn(p, last, (u_char *) "://", 3 - 1);
    p = p ? p + 3 : url->data;

    while (p < last && *p != '/') {
        p++;
    }

    path->data = p;
    path->len = last - p;
}


ngx_int_t
ngx_http_sandbox_mcp_oauth_metadata_url(ngx_http_request_t *r,
    ngx_http_sandbox_mcp_loc_conf_t *lcf, ngx_str_t *url)
{
    ngx_str_t  issuer, resource, path;

    ngx_str_null(url);

    if (!lcf->oauth.enable) {
        return NGX_OK;
    }

    if (ngx_http_sandbox_mcp_oauth_urls(r, lcf, &issuer, &resource)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    ngx_http_sandbox_mcp_oauth_path(&resource, &path);

    url->data = ngx_pnalloc(r->pool, issuer.len + path.len
                            + sizeof("/.well-known/oauth-protected-resource"));
    if (url->data == NULL) {
        return NGX_ERROR;
    }

    url->len = ngx_sprintf(url->data, "%V/.well-known/oauth-protected-resource"
                           "%V", &issuer, &path)
               - url->data;

    return NGX_OK;
}


ngx_int_t
ngx_http_sandbox_mcp_oauth_cors(ngx_http_request_t *r)
{
    static ngx_str_t  any = ngx_string("*");
    static ngx_str_t  methods = ngx_string("GET, POST, OPTIONS");
    static ngx_str_t  headers = ngx_string("Authorization, Content-Type, "
                                           "MCP-Protocol-Version");
    static ngx_str_t  age = ngx_string("86400");

    if (ngx_http_sandbox_mcp_add_header(r, "Access-Control-Allow-Origin",
                                        &any) != NGX_OK
        || ngx_http_sandbox_mcp_add_header(r, "Access-Control-Allow-Methods",
                                           &methods) != NGX_OK
        || ngx_http_sandbox_mcp_add_header(r, "Access-Control-Allow-Headers",
                                           &headers) != NGX_OK
        || ngx_http_sandbox_mcp_add_header(r, "Access-Control-Max-Age",
                                           &age) != NGX_OK)
    {
        return NGX_ERROR;
    }

    return NGX_OK;
}


ngx_int_t
ngx_http_sandbox_mcp_oauth_send_json(ngx_http_request_t *r,
    ngx_uint_t status, json_t *json)
{
    ngx_int_t  rc;

    static ngx_str_t  no_store = ngx_string("no-store");
    static ngx_str_t  no_cache = ngx_string("no-cache");

    if (json == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (ngx_http_sandbox_mcp_add_header(r, "Cache-Control", &no_store)
        != NGX_OK
        || ngx_http_sandbox_mcp_add_header(r, "Pragma", &no_cache) != NGX_OK
        || ngx_http_sandbox_mcp_oauth_cors(r) != NGX_OK)
    {
        json_decref(json);
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    rc = ngx_http_sandbox_mcp_send_json(r, status, json);
    json_decref(json);

    return rc;
}


ngx_int_t
ngx_http_sandbox_mcp_oauth_error(ngx_http_request_t *r, ngx_uint_t status,
    const char *error, const char *description)
{
    static ngx_str_t  basic = ngx_string("Basic realm=\"sandbox-mcp\"");

    if (status == NGX_HTTP_UNAUTHORIZED
        && ngx_http_sandbox_mcp_add_header(r, "WWW-Authenticate", &basic)
           != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    return ngx_http_sandbox_mcp_oauth_send_json(r, status,
               json_pack("{s:s, s:s}", "error", error, "error_description",
                         description));
}


/* a bounded store is full: 503, Retry-After (seconds), the OAuth error
 * temporarily_unavailable */
ngx_int_t
ngx_http_sandbox_mcp_oauth_full(ngx_http_request_t *r, time_t retry,
    const char *description)
{
    if (ngx_http_sandbox_mcp_oauth_retry_after(r, retry) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    return ngx_http_sandbox_mcp_oauth_error(r, NGX_HTTP_SERVICE_UNAVAILABLE,
                                            "temporarily_unavailable",
                                            description);
}


ngx_int_t
ngx_http_sandbox_mcp_oauth_retry_after(ngx_http_request_t *r, time_t retry)
{
    ngx_str_t  v;

    v.data = ngx_pnalloc(r->pool, NGX_TIME_T_LEN);
    if (v.data == NULL) {
        return NGX_ERROR;
    }

    v.len = ngx_sprintf(v.data, "%T", ngx_max(retry, 1)) - v.data;

    return ngx_http_sandbox_mcp_add_header(r, "Retry-After", &v);
}


/* the page with its {{name}} placeholders filled in, HTML-escaped */
ngx_int_t
ngx_http_sandbox_mcp_oauth_send_html(ngx_http_request_t *r,
    ngx_uint_t status, const char *page, ngx_keyval_t *vars, ngx_uint_t n)
{
    u_char      *buf, *p, *last;
    size_t       len, size;
    ngx_uint_t   i;
    const char  *s, *q;

    static ngx_str_t  headers[] = {
        ngx_string("Content-Security-Policy"),
        ngx_string("default-src 'none'; style-src 'self'; "
                   "frame-ancestors 'none'; base-uri 'none'"),
        ngx_string("X-Frame-Options"), ngx_string("DENY"),
        ngx_string("Referrer-Policy"), ngx_string("same-origin"),
        ngx_string("X-Content-Type-Options"), ngx_string("nosniff"),
        ngx_string("Cache-Control"), ngx_string("no-store"),
        ngx_null_string
    };

    size = ngx_strlen(page);

    for (i = 0; i < n; i++) {
        /* "&quot;" is the longest escape: at most 6 bytes a byte */
        size += 6 * vars[i].value.len;
    }

    buf = ngx_pnalloc(r->pool, size);
    if (buf == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    p = buf;

    for (s = page; *s; s = q + 2) {
        q = ngx_strstr(s, "{{");

        if (q == NULL) {
            p = ngx_cpymem(p, s, ngx_strlen(s));
            break;
        }

        p = ngx_cpymem(p, s, q - s);
        s = q + 2;
        q = ngx_strstr(s, "}}");   /* checked at build: always there */
        len = q - s;

        for (i = 0; i < n; i++) {
            if (vars[i].key.len == len
                && ngx_strncmp(vars[i].key.data, s, len) == 0)
            {
                p = (u_char *) ngx_escape_html(p, vars[i].value.data,
                                               vars[i].value.len);
                break;
            }
        }
    }

    last = p;

    for (i = 0; headers[i].len; i += 2) {
        if (ngx_http_sandbox_mcp_add_header(r, (char *) headers[i].data,
                                            &headers[i + 1])
            != NGX_OK)
        {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }
    }

    return ngx_http_sandbox_mcp_send_body(r, status,
                                          "text/html; charset=utf-8", buf,
                                          last - buf);
}


void
ngx_http_sandbox_mcp_oauth_finalize(ngx_http_sandbox_mcp_oauth_ctx_t *ctx,
    ngx_int_t rc)
{
    ngx_http_sandbox_mcp_end_request(ctx->request, rc);
}


static ngx_int_t
ngx_http_sandbox_mcp_oauth_subrequest_done(ngx_http_request_t *sr,
    void *data, ngx_int_t rc)
{
    ngx_http_sandbox_mcp_oauth_ctx_t *ctx = data;

    ngx_buf_t         *b;
    ngx_connection_t  *c;

    ctx->sub_status = sr->headers_out.status;
    ngx_str_null(&ctx->sub_body);

    c = sr->connection;

    if (rc == NGX_ERROR || c->error) {
        /*
         * the subrequest failed: any filter's error marks the connection
         * broken (ngx_http_output_filter()), and an answer that overflows
         * subrequest_output_buffer_size is such an error, so nginx would
         * end the client's request unanswered.  While the client's side
         * is sound the parent answers instead; if it is not, writing the
         * answer finds out.
         */
        ctx->sub_status = NGX_HTTP_BAD_GATEWAY;

        if (c->read->eof || c->read->error || c->write->error) {
            return NGX_ERROR;
        }

        c->error = 0;
        return NGX_OK;
    }

    if (sr->out && sr->out->buf) {
        b = sr->out->buf;

        ctx->sub_body.data = ngx_pnalloc(ctx->request->pool,
                                         b->last - b->pos + 1);
        if (ctx->sub_body.data) {
            ctx->sub_body.len = b->last - b->pos;
            ngx_memcpy(ctx->sub_body.data, b->pos, ctx->sub_body.len);
        }
    }

    return rc;
}


/* the parent again, its subrequest done */
static void
ngx_http_sandbox_mcp_oauth_resume(ngx_http_request_t *r)
{
    ngx_int_t                          rc;
    ngx_http_sandbox_mcp_oauth_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_sandbox_mcp_module);

    if (ctx == NULL || ctx->done) {
        return;
    }

    r->write_event_handler = ngx_http_request_empty_handler;

    rc = ctx->sub_next(ctx);

    if (rc != NGX_DONE) {
        ngx_http_finalize_request(r, rc);
    }
}


ngx_int_t
ngx_http_sandbox_mcp_oauth_subrequest(ngx_http_sandbox_mcp_oauth_ctx_t *ctx,
    ngx_str_t *uri, ngx_str_t *args, ngx_int_t (*next)(void *ctx))
{
    ngx_http_request_t          *r, *sr;
    ngx_http_post_subrequest_t  *ps;

    r = ctx->request;

    ps = ngx_palloc(r->pool, sizeof(ngx_http_post_subrequest_t));
    if (ps == NULL) {
        return NGX_ERROR;
    }

    ps->handler = ngx_http_sandbox_mcp_oauth_subrequest_done;
    ps->data = ctx;

    ctx->sub_status = 0;
    ngx_str_null(&ctx->sub_body);

    if (ngx_http_subrequest(r, uri, args, &sr, ps,
                            NGX_HTTP_SUBREQUEST_IN_MEMORY
                            |NGX_HTTP_SUBREQUEST_WAITED)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    /* a subrequest shares its parent's body (a form with a refresh token
     * or an access key, for the token endpoint and the consent): it goes
     * upstream with none, whatever the location says */
    sr->request_body = NULL;
    sr->headers_in.content_length = NULL;
    sr->headers_in.content_length_n = -1;
    sr->headers_in.chunked = 0;

    ctx->sub_next = next;
    r->write_event_handler = ngx_http_sandbox_mcp_oauth_resume;

    return NGX_OK;
}


/* a name and a value, from C strings */
static void
ngx_http_sandbox_mcp_oauth_kv(ngx_keyval_t *kv, const char *key,
    const char *value)
{
    kv->key.data = (u_char *) key;
    kv->key.len = ngx_strlen(key);
    kv->value.data = (u_char *) value;
    kv->value.len = ngx_strlen(value);
}


/* the answer through the user agent: redirect_uri?name=value&... */
static ngx_int_t
ngx_http_sandbox_mcp_oauth_redirect(ngx_http_sandbox_mcp_oauth_ctx_t *ctx,
    ngx_keyval_t *kv, ngx_uint_t n)
{
    u_char              *p;
    size_t               len;
    ngx_str_t            loc;
    ngx_uint_t           i;
    ngx_http_request_t  *r;

    static ngx_str_t  no_store = ngx_string("no-store");

    r = ctx->request;

    len = ctx->redirect_uri.len + 3 * ctx->issuer.len + sizeof("&iss=");

    for (i = 0; i < n; i++) {
        len += kv[i].key.len + 3 * kv[i].value.len + 2;
    }

    loc.data = ngx_pnalloc(r->pool, len);
    if (loc.data == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    p = ngx_cpymem(loc.data, ctx->redirect_uri.data, ctx->redirect_uri.len);
    *p++ = ngx_strlchr(ctx->redirect_uri.data,
                       ctx->redirect_uri.data + ctx->redirect_uri.len, '?')
           ? '&' : '?';

    for (i = 0; i < n; i++) {
        if (kv[i].value.len == 0) {
            continue;
        }

        p = ngx_cpymem(p, kv[i].key.data, kv[i].key.len);
        *p++ = '=';
        p = ngx_http_sandbox_mcp_oauth_escape(p, &kv[i].value);
        *p++ = '&';
    }

    /* RFC 9207: the issuer of the answer */
    p = ngx_cpymem(p, "iss=", 4);
    p = ngx_http_sandbox_mcp_oauth_escape(p, &ctx->issuer);

    loc.len = p - loc.data;

    /* the code is in the address: nothing keeps it */
    if (ngx_http_sandbox_mcp_add_header(r, "Location", &loc) != NGX_OK
        || ngx_http_sandbox_mcp_add_header(r, "Cache-Control", &no_store)
           != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    return ngx_http_sandbox_mcp_send_json(r, NGX_HTTP_MOVED_TEMPORARILY,
                                          NULL);
}


ngx_int_t
ngx_http_sandbox_mcp_oauth_deny(ngx_http_sandbox_mcp_oauth_ctx_t *ctx,
    const char *error, const char *description)
{
    ngx_keyval_t  kv[3];

    ngx_http_sandbox_mcp_oauth_kv(&kv[0], "error", error);
    ngx_http_sandbox_mcp_oauth_kv(&kv[1], "error_description", description);
    ngx_str_set(&kv[2].key, "state");
    kv[2].value = ctx->state;

    return ngx_http_sandbox_mcp_oauth_redirect(ctx, kv, 3);
}


/* the browser's CSRF cookie, or a new one (set on the page's answer) */
ngx_int_t
ngx_http_sandbox_mcp_oauth_cookie(ngx_http_sandbox_mcp_oauth_ctx_t *ctx,
    ngx_http_sandbox_mcp_oauth_req_t *req, ngx_uint_t create)
{
    u_char              *p;
    ngx_str_t            name, v;
    ngx_uint_t           i;
    ngx_http_request_t  *r;

    r = ctx->request;
    ngx_str_set(&name, NGX_HTTP_SANDBOX_MCP_OAUTH_COOKIE);

    if (ngx_http_parse_multi_header_lines(&r->headers_in.cookies, &name,
                                          &req->cookie)
        != NGX_DECLINED)
    {
        for (i = 0; i < req->cookie.len; i++) {
            if (!((req->cookie.data[i] >= '0' && req->cookie.data[i] <= '9')
                  || (req->cookie.data[i] >= 'a'
                      && req->cookie.data[i] <= 'f')))
            {
                break;
            }
        }

        if (req->cookie.len == NGX_HTTP_SANDBOX_MCP_OAUTH_COOKIE_LEN
            && i == req->cookie.len)
        {
            return NGX_OK;
        }
    }

    ngx_str_null(&req->cookie);

    if (!create) {
        return NGX_OK;
    }

    if (ngx_http_sandbox_mcp_oauth_random(r->pool, &req->cookie, "",
                                    NGX_HTTP_SANDBOX_MCP_OAUTH_COOKIE_LEN / 2)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    v.data = ngx_pnalloc(r->pool, 128);
    if (v.data == NULL) {
        return NGX_ERROR;
    }

    p = ngx_sprintf(v.data, NGX_HTTP_SANDBOX_MCP_OAUTH_COOKIE "=%V; "
                    "Path=/oauth/; HttpOnly; SameSite=Lax%s", &req->cookie,
                    ngx_strncmp(ctx->issuer.data, "https:", 6) == 0
                    ? "; Secure" : "");
    v.len = p - v.data;

    return ngx_http_sandbox_mcp_add_header(r, "Set-Cookie", &v);
}


ngx_int_t
ngx_http_sandbox_mcp_oauth_page(ngx_http_sandbox_mcp_oauth_ctx_t *ctx,
    ngx_uint_t status, const char *title, const char *message)
{
    ngx_keyval_t  vars[2];

    ngx_http_sandbox_mcp_oauth_kv(&vars[0], "title", title);
    ngx_http_sandbox_mcp_oauth_kv(&vars[1], "message", message);

    return ngx_http_sandbox_mcp_oauth_send_html(ctx->request, status,
                                                smcp_html_error, vars, 2);
}


static void
ngx_http_sandbox_mcp_oauth_code_stored(void *data, redisReply *reply)
{
    ngx_http_sandbox_mcp_oauth_ctx_t *ctx = data;

    ngx_int_t     rc;
    ngx_keyval_t  kv[2];

    ctx->cmd = NULL;

    if (reply == NULL || reply->type != REDIS_REPLY_STATUS) {
        rc = ngx_http_sandbox_mcp_send_unavailable(ctx->request);

    } else if (ngx_strcmp(reply->str, "OK") == 0) {
        ngx_str_set(&kv[0].key, "code");
        kv[0].value = ctx->refresh;     /* the code, here */
        ngx_str_set(&kv[1].key, "state");
        kv[1].value = ctx->state;

        rc = ngx_http_sandbox_mcp_oauth_redirect(ctx, kv, 2);

    } else if (ngx_strcmp(reply->str, "REVOKED") == 0
               && ctx->key_revoked)
    {
        /* the endpoint that took the access key says so */
        rc = ctx->key_revoked(ctx);

    } else {
        rc = ngx_http_sandbox_mcp_oauth_page(ctx, NGX_HTTP_BAD_REQUEST,
                               "Unknown client", "This client is not "
                               "registered (invalid_client), or no longer.");
    }

    ngx_http_sandbox_mcp_oauth_finalize(ctx, rc);
}


ngx_int_t
ngx_http_sandbox_mcp_oauth_grant_code(ngx_http_sandbox_mcp_oauth_ctx_t *ctx,
    ngx_http_sandbox_mcp_oauth_grant_t *g)
{
    time_t                             client_ttl;
    ngx_str_t                          hash, argv[17];
    ngx_http_request_t                *r;
    ngx_http_sandbox_mcp_oauth_req_t  *req;

    r = ctx->request;
    req = ctx->step;

    /* a registered client lives on from its sign-ins; a client metadata
     * document stays cached no longer than it was */
    client_ttl = (ctx->client_id.len == NGX_HTTP_SANDBOX_MCP_OAUTH_CLIENT_ID_LEN
                  && ngx_strncmp(ctx->client_id.data, "mcp_", 4) == 0)
                 ? ctx->lcf->oauth.client_ttl : 0;

    /* the code: only its hash is stored */
    if (ngx_http_sandbox_mcp_oauth_random(r->pool, &ctx->refresh, "ac_", 32)
        != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    hash.len = NGX_HTTP_SANDBOX_MCP_OAUTH_SHA256_HEX;
    hash.data = ngx_pnalloc(r->pool, hash.len + 1);
    if (hash.data == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_http_sandbox_mcp_oauth_sha256_hex(hash.data, ctx->refresh.data,
                                          ctx->refresh.len);

    if (ngx_http_sandbox_mcp_redis_key(r->pool, &argv[0],
                                       SMCP_KEY_OAUTH_CLIENT, &ctx->client_id)
           != NGX_OK
        || ngx_http_sandbox_mcp_redis_key(r->pool, &argv[1],
                                          SMCP_KEY_OAUTH_CODE, &hash)
           != NGX_OK
        || ngx_http_sandbox_mcp_redis_key(r->pool, &argv[2],
                                          SMCP_KEY_REVOKED, NULL)
           != NGX_OK
        || ngx_http_sandbox_mcp_redis_key(r->pool, &argv[3],
                                          SMCP_KEY_OAUTH_UNUSED, NULL)
           != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    argv[4] = ctx->client_id;
    argv[5] = ctx->redirect_uri;
    argv[6] = ctx->challenge;
    argv[7] = req->resource;
    argv[8] = g->tenant;
    argv[9] = g->repos;
    argv[10] = g->key_jti;
    argv[11] = ngx_http_sandbox_mcp_redis_number(r->pool, g->key_exp);
    argv[12] = ngx_http_sandbox_mcp_redis_number(r->pool,
                   ngx_time() + ctx->lcf->oauth.code_ttl);
    argv[13] = ngx_http_sandbox_mcp_redis_number(r->pool,
                                                 ctx->lcf->oauth.code_ttl);
    argv[14] = ngx_http_sandbox_mcp_redis_number(r->pool, client_ttl);
    argv[15] = g->github;
    argv[16] = g->label;

    ctx->cmd = ngx_http_sandbox_mcp_redis_script(
                   &ngx_http_sandbox_mcp_script_oauth_code,
                   ngx_http_sandbox_mcp_oauth_code_stored, ctx, 4, 17, argv);

    if (ctx->cmd == NULL) {
        return ngx_http_sandbox_mcp_send_unavailable(r);
    }

    return NGX_DONE;
}


/* one form-encoded name or value, decoded in place; NGX_DECLINED: a bad
 * escape or a control character */
static ngx_int_t
ngx_http_sandbox_mcp_oauth_decode(u_char *p, size_t len, ngx_str_t *out)
{
    u_char     *d, *last;
    ngx_int_t   hi, lo;

    d = p;
    out->data = p;
    last = p + len;

    while (p < last) {
        if (*p == '+') {
            *d++ = ' ';
            p++;
            continue;
        }

        if (*p == '%') {
            if (last - p < 3) {
                return NGX_DECLINED;
            }

            hi = smcp_hex_value(p[1]);
            lo = smcp_hex_value(p[2]);

            if (hi < 0 || lo < 0) {
                return NGX_DECLINED;
            }

            *d = (u_char) (hi * 16 + lo);
            p += 3;

        } else {
            *d = *p++;
        }

        if (*d < 0x20 || *d == 0x7f) {
            return NGX_DECLINED;
        }

        d++;
    }

    out->len = d - out->data;

    return NGX_OK;
}


static ngx_int_t ngx_http_sandbox_mcp_oauth_find(
    ngx_http_sandbox_mcp_oauth_ctx_t *ctx, u_char *name, size_t len,
    ngx_str_t *value);


ngx_int_t
ngx_http_sandbox_mcp_oauth_parse(ngx_http_sandbox_mcp_oauth_ctx_t *ctx,
    u_char *p, size_t len)
{
    u_char        *last, *end, *eq, *copy;
    ngx_str_t      v;
    ngx_keyval_t  *kv;

    ctx->params = ngx_array_create(ctx->request->pool, 8,
                                   sizeof(ngx_keyval_t));
    if (ctx->params == NULL) {
        return NGX_ERROR;
    }

    /* decoded in a copy: the query stays as it came for the logs */
    copy = ngx_pnalloc(ctx->request->pool, len);
    if (copy == NULL) {
        return NGX_ERROR;
    }

    ngx_memcpy(copy, p, len);
    p = copy;
    last = p + len;

    for ( /* void */ ; p < last; p = end + 1) {
        end = ngx_strlchr(p, last, '&');
        if (end == NULL) {
            end = last;
        }

        if (end == p) {
            continue;
        }

        if (ctx->params->nelts == NGX_HTTP_SANDBOX_MCP_OAUTH_PARAMS_MAX
            || end - p > NGX_HTTP_SANDBOX_MCP_OAUTH_VALUE_MAX)
        {
            return NGX_DECLINED;
        }

        eq = ngx_strlchr(p, end, '=');
        if (eq == NULL) {
            eq = end;
        }

        kv = ngx_array_push(ctx->params);
        if (kv == NULL) {
            return NGX_ERROR;
        }

        if (ngx_http_sandbox_mcp_oauth_decode(p, eq - p, &kv->key) != NGX_OK
            || ngx_http_sandbox_mcp_oauth_decode(eq + (eq < end),
                                                 end - eq - (eq < end),
                                                 &kv->value)
               != NGX_OK)
        {
            return NGX_DECLINED;
        }

        /* RFC 6749 3.1: no parameter more than once */
        ctx->params->nelts--;

        if (ngx_http_sandbox_mcp_oauth_find(ctx, kv->key.data, kv->key.len,
                                            &v)
            == NGX_OK)
        {
            return NGX_DECLINED;
        }

        ctx->params->nelts++;
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_sandbox_mcp_oauth_find(ngx_http_sandbox_mcp_oauth_ctx_t *ctx,
    u_char *name, size_t len, ngx_str_t *value)
{
    ngx_uint_t     i;
    ngx_keyval_t  *kv;

    ngx_str_null(value);

    if (ctx->params == NULL) {
        return NGX_DECLINED;
    }

    kv = ctx->params->elts;

    for (i = 0; i < ctx->params->nelts; i++) {
        if (kv[i].key.len == len
            && ngx_strncmp(kv[i].key.data, name, len) == 0)
        {
            *value = kv[i].value;
            return NGX_OK;
        }
    }

    return NGX_DECLINED;
}


ngx_int_t
ngx_http_sandbox_mcp_oauth_param(ngx_http_sandbox_mcp_oauth_ctx_t *ctx,
    const char *name, ngx_str_t *value)
{
    return ngx_http_sandbox_mcp_oauth_find(ctx, (u_char *) name,
                                           ngx_strlen(name), value);
}


u_char *
ngx_http_sandbox_mcp_oauth_escape(u_char *dst, ngx_str_t *s)
{
    u_char      c;
    size_t      i;

    static u_char  hex[] = "0123456789ABCDEF";

    for (i = 0; i < s->len; i++) {
        c = s->data[i];

        if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z')
            || (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_'
            || c == '~')
        {
            *dst++ = c;

        } else {
            *dst++ = '%';
            *dst++ = hex[c >> 4];
            *dst++ = hex[c & 0xf];
        }
    }

    return dst;
}


void
ngx_http_sandbox_mcp_oauth_sha256_hex(u_char *dst, u_char *s, size_t len)
{
    u_char  md[SHA256_DIGEST_LENGTH];

    SHA256(s, len, md);
    ngx_hex_dump(dst, md, SHA256_DIGEST_LENGTH);
    dst[2 * SHA256_DIGEST_LENGTH] = '\0';
}


ngx_int_t
ngx_http_sandbox_mcp_oauth_random(ngx_pool_t *pool, ngx_str_t *out,
    const char *prefix, size_t nbytes)
{
    size_t  plen;

    plen = ngx_strlen(prefix);

    out->data = ngx_pnalloc(pool, plen + 2 * nbytes + 1);
    if (out->data == NULL) {
        return NGX_ERROR;
    }

    ngx_memcpy(out->data, prefix, plen);

    if (smcp_random_hex((char *) out->data + plen, nbytes) != SMCP_OK) {
        return NGX_ERROR;
    }

    out->len = plen + 2 * nbytes;

    return NGX_OK;
}
