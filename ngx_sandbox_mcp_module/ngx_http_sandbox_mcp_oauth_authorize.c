/*
 * The authorization endpoint: the request checked (client, exact
 * redirect_uri, PKCE S256, resource, state if any), the sign-in page with its
 * consent line and access-key form (CSRF: a cookie and an HMAC of it and
 * of the request in the form), and the code issued to the redirect_uri.
 * Nothing is ever sent to a redirect_uri the client did not register.
 */

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "ngx_http_sandbox_mcp_oauth.h"
#include "ngx_http_sandbox_mcp_auth.h"
#include "ngx_http_sandbox_mcp_http.h"
#include "ngx_http_sandbox_mcp_scripts.h"

#include "ngx_http_sandbox_mcp_oauth_html.h"



/* "<ts>.<b64url HMAC-SHA256(secret, csrf|ts|cookie|request)>" */
static ngx_int_t
ngx_http_sandbox_mcp_oauth_csrf(ngx_http_sandbox_mcp_oauth_ctx_t *ctx,
    ngx_http_sandbox_mcp_oauth_req_t *req, time_t ts, ngx_str_t *out)
{
    u_char                            *p, *msg;
    size_t                             len;
    unsigned int                       mdlen;
    ngx_http_request_t                *r;
    ngx_http_sandbox_mcp_main_conf_t  *mcf;
    u_char                             md[EVP_MAX_MD_SIZE];

    r = ctx->request;
    mcf = ngx_http_get_module_main_conf(r, ngx_http_sandbox_mcp_module);

    len = sizeof("csrf|") + NGX_TIME_T_LEN + req->cookie.len
          + ctx->client_id.len + ctx->redirect_uri.len + ctx->challenge.len
          + ctx->state.len + req->resource.len + 6;

    msg = ngx_pnalloc(r->pool, len);
    out->data = ngx_pnalloc(r->pool, NGX_TIME_T_LEN + 1 + 44);

    if (msg == NULL || out->data == NULL) {
        return NGX_ERROR;
    }

    p = ngx_sprintf(msg, "csrf|%T|%V|%V|%V|%V|%V|%V", ts, &req->cookie,
                    &ctx->client_id, &ctx->redirect_uri, &ctx->challenge,
                    &ctx->state, &req->resource);

    if (HMAC(EVP_sha256(), mcf->keys->key[0].secret,
             (int) mcf->keys->key[0].len, msg, p - msg, md, &mdlen)
        == NULL)
    {
        return NGX_ERROR;
    }

    p = ngx_sprintf(out->data, "%T.", ts);
    p += smcp_b64url_encode((char *) p, md, mdlen);
    out->len = p - out->data;

    return NGX_OK;
}


/* the form came from our page, in this browser, lately */
static ngx_uint_t
ngx_http_sandbox_mcp_oauth_csrf_ok(ngx_http_sandbox_mcp_oauth_ctx_t *ctx,
    ngx_http_sandbox_mcp_oauth_req_t *req)
{
    time_t      ts;
    u_char     *dot;
    ngx_str_t   sent, want;

    if (req->cookie.len == 0
        || ngx_http_sandbox_mcp_oauth_param(ctx, "csrf", &sent) != NGX_OK)
    {
        return 0;
    }

    dot = ngx_strlchr(sent.data, sent.data + sent.len, '.');
    if (dot == NULL) {
        return 0;
    }

    ts = ngx_atotm(sent.data, dot - sent.data);

    if (ts == NGX_ERROR || ts > ngx_time()
        || ngx_time() - ts > NGX_HTTP_SANDBOX_MCP_OAUTH_CSRF_TTL)
    {
        return 0;
    }

    if (ngx_http_sandbox_mcp_oauth_csrf(ctx, req, ts, &want) != NGX_OK) {
        return 0;
    }

    return want.len == sent.len
           && CRYPTO_memcmp(want.data, sent.data, sent.len) == 0;
}


static ngx_int_t
ngx_http_sandbox_mcp_oauth_signin(ngx_http_sandbox_mcp_oauth_ctx_t *ctx,
    ngx_http_sandbox_mcp_oauth_req_t *req, ngx_uint_t status)
{
    u_char        *p, *last;
    ngx_str_t      csrf, host, github;
    ngx_uint_t     i;
    ngx_keyval_t   vars[10];

    /* the page's variables, in the order of names[] */
    ngx_str_t     *values[10] = {
        &req->client_name, &host, &ctx->key_error, &ctx->client_id,
        &ctx->redirect_uri, &ctx->challenge, &ctx->state, &req->resource,
        &csrf, &github
    };

    static ngx_str_t  names[10] = {
        ngx_string("client_name"), ngx_string("redirect_host"),
        ngx_string("error"), ngx_string("client_id"),
        ngx_string("redirect_uri"), ngx_string("code_challenge"),
        ngx_string("state"), ngx_string("resource"), ngx_string("csrf"),
        ngx_string("github")
    };

    if (ngx_http_sandbox_mcp_oauth_cookie(ctx, req, 1) != NGX_OK
        || ngx_http_sandbox_mcp_oauth_csrf(ctx, req, ngx_time(), &csrf)
           != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    /* the consent line names where the browser goes back to */
    p = ngx_strlcasestrn(ctx->redirect_uri.data,
                     ctx->redirect_uri.data + ctx->redirect_uri.len,
                     (u_char *) "://", 3 - 1) + 3;
    last = ctx->redirect_uri.data + ctx->redirect_uri.len;
    host.data = p;

    while (p < last && *p != '/' && *p != '?') {
        p++;
    }

    host.len = p - host.data;

    if (ctx->lcf->oauth.github_client_id.len) {
        ngx_str_set(&github, "on");

    } else {
        ngx_str_set(&github, "off");
    }

    for (i = 0; i < 10; i++) {
        vars[i].key = names[i];
        vars[i].value = *values[i];
    }

    return ngx_http_sandbox_mcp_oauth_send_html(ctx->request, status,
                                                smcp_html_signin, vars, 10);
}


/* the access key was revoked before its code was stored: the page again */
static ngx_int_t
ngx_http_sandbox_mcp_oauth_key_revoked(ngx_http_sandbox_mcp_oauth_ctx_t *ctx)
{
    ngx_str_set(&ctx->key_error, "That access key was revoked.");

    return ngx_http_sandbox_mcp_oauth_signin(ctx, ctx->step,
                                             NGX_HTTP_UNAUTHORIZED);
}


/* the access key's tenant and grant, into a code */
static ngx_int_t
ngx_http_sandbox_mcp_oauth_issue(ngx_http_sandbox_mcp_oauth_ctx_t *ctx,
    ngx_http_sandbox_mcp_oauth_req_t *req)
{
    char                                *s;
    json_t                              *key, *jti;
    ngx_int_t                            rc;
    ngx_str_t                            sent;
    const char                          *reason;
    ngx_http_request_t                  *r;
    ngx_http_sandbox_mcp_ctx_t           mctx;
    ngx_http_sandbox_mcp_oauth_grant_t   g;

    r = ctx->request;

    (void) ngx_http_sandbox_mcp_oauth_param(ctx, "access_key", &sent);

    while (sent.len && sent.data[sent.len - 1] == ' ') {
        sent.len--;     /* pasted with a trailing blank */
    }

    ngx_memzero(&mctx, sizeof(ngx_http_sandbox_mcp_ctx_t));
    mctx.request = r;

    rc = ngx_http_sandbox_mcp_token_check(r, &mctx, sent.data, sent.len,
                                          &key, &reason);
    if (rc == NGX_ERROR) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (rc == NGX_OK && json_object_get(key, "aud")) {
        /* an access token of ours is not an access key */
        json_decref(key);
        rc = NGX_DECLINED;
    }

    if (rc == NGX_DECLINED) {
        ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                      "sandbox_mcp: oauth: access key refused: %s", reason);

        ngx_str_set(&ctx->key_error, "That access key was not accepted.");
        return ngx_http_sandbox_mcp_oauth_signin(ctx, req,
                                                 NGX_HTTP_UNAUTHORIZED);
    }

    ctx->key = key;
    ngx_memzero(&g, sizeof(ngx_http_sandbox_mcp_oauth_grant_t));

    if (json_object_get(key, "repos")) {
        s = json_dumps(json_object_get(key, "repos"), JSON_COMPACT);
        if (s == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        g.repos.len = ngx_strlen(s);
        g.repos.data = ngx_pnalloc(r->pool, g.repos.len);
        if (g.repos.data == NULL) {
            free(s);
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        ngx_memcpy(g.repos.data, s, g.repos.len);
        free(s);
    }

    jti = json_object_get(key, "jti");
    g.key_jti.data = (u_char *) (jti ? json_string_value(jti) : "");
    g.key_jti.len = jti ? json_string_length(jti) : 0;
    g.key_exp = (time_t) json_integer_value(json_object_get(key, "exp"));
    g.tenant = mctx.tenant;

    ctx->key_revoked = ngx_http_sandbox_mcp_oauth_key_revoked;

    return ngx_http_sandbox_mcp_oauth_grant_code(ctx, &g);
}


/* the checks whose failure the client hears at its redirect_uri */
static ngx_int_t
ngx_http_sandbox_mcp_oauth_check_request(
    ngx_http_sandbox_mcp_oauth_ctx_t *ctx,
    ngx_http_sandbox_mcp_oauth_req_t *req)
{
    size_t  i;

    if (req->response_type.len != 4
        || ngx_strncmp(req->response_type.data, "code", 4) != 0)
    {
        return ngx_http_sandbox_mcp_oauth_deny(ctx,
                               "unsupported_response_type",
                               "response_type must be code");
    }

    /*
     * state is optional (OAuth 2.1, section 4.1.1): PKCE, required below,
     * carries the CSRF protection; when sent, it is echoed
     */
    if (ctx->state.len > NGX_HTTP_SANDBOX_MCP_OAUTH_STATE_MAX) {
        ngx_str_null(&ctx->state);
        return ngx_http_sandbox_mcp_oauth_deny(ctx, "invalid_request",
                               "state is at most 512 bytes");
    }

    if (req->method.len != 4 || ngx_strncmp(req->method.data, "S256", 4) != 0)
    {
        return ngx_http_sandbox_mcp_oauth_deny(ctx, "invalid_request",
                               "PKCE is required: code_challenge_method "
                               "must be S256");
    }

    for (i = 0; i < ctx->challenge.len; i++) {
        if (!(isalnum(ctx->challenge.data[i])
              || ctx->challenge.data[i] == '-'
              || ctx->challenge.data[i] == '_'))
        {
            break;
        }
    }

    if (ctx->challenge.len != 43 || i != 43) {
        return ngx_http_sandbox_mcp_oauth_deny(ctx, "invalid_request",
                               "code_challenge must be the base64url "
                               "SHA-256 of the code_verifier (43 characters)");
    }

    if (req->resource.len == 0) {
        req->resource = ctx->resource;  /* RFC 8707: this server's */

    } else if (req->resource.len != ctx->resource.len
               || ngx_strncmp(req->resource.data, ctx->resource.data,
                              ctx->resource.len) != 0)
    {
        return ngx_http_sandbox_mcp_oauth_deny(ctx, "invalid_target",
                               "resource is not this MCP server");
    }

    if (req->scope.len
        && !(req->scope.len == 3
             && ngx_strncmp(req->scope.data, SMCP_SCOPE_MCP, 3) == 0))
    {
        return ngx_http_sandbox_mcp_oauth_deny(ctx, "invalid_scope",
                                               "the only scope is mcp");
    }

    return NGX_DECLINED;
}


/*
 * The client is known (registered, or its metadata document fetched): its
 * name and redirect URIs (a JSON array); the request goes on from here.
 */
static ngx_int_t
ngx_http_sandbox_mcp_oauth_client_known(ngx_http_sandbox_mcp_oauth_ctx_t
    *ctx, ngx_str_t *name, ngx_str_t *uris_json)
{
    json_t                            *uris, *v;
    size_t                             i;
    ngx_int_t                          rc;
    ngx_str_t                          action;
    ngx_uint_t                         found;
    ngx_http_request_t                *r;
    ngx_http_sandbox_mcp_oauth_req_t  *req;

    r = ctx->request;
    req = ctx->step;
    found = 0;

    uris = json_loadb((char *) uris_json->data, uris_json->len, 0, NULL);

    json_array_foreach(uris, i, v) {
        if (json_string_length(v) == ctx->redirect_uri.len
            && ngx_strncmp(json_string_value(v), ctx->redirect_uri.data,
                           ctx->redirect_uri.len) == 0)
        {
            found = 1;
        }
    }

    json_decref(uris);

    req->client_name.len = name->len;
    req->client_name.data = ngx_pnalloc(r->pool, name->len);
    if (req->client_name.data == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_memcpy(req->client_name.data, name->data, name->len);

    if (!found) {
        return ngx_http_sandbox_mcp_oauth_page(ctx, NGX_HTTP_BAD_REQUEST,
                               "Wrong redirect URI", "redirect_uri is not "
                               "one this client registered "
                               "(invalid_redirect_uri).");
    }

    /* from here on, the client hears of errors at its redirect_uri */

    rc = ngx_http_sandbox_mcp_oauth_check_request(ctx, req);

    if (rc != NGX_DECLINED) {
        return rc;
    }

    if (r->method == NGX_HTTP_GET) {
        return ngx_http_sandbox_mcp_oauth_signin(ctx, req, NGX_HTTP_OK);
    }

    (void) ngx_http_sandbox_mcp_oauth_param(ctx, "action", &action);

    if (action.len == 4 && ngx_strncmp(action.data, "deny", 4) == 0) {
        return ngx_http_sandbox_mcp_oauth_deny(ctx, "access_denied",
                                               "the user denied the request");
    }

    if (action.len == 6 && ngx_strncmp(action.data, "github", 6) == 0) {
        return ngx_http_sandbox_mcp_oauth_github_start(ctx, req);
    }

    return ngx_http_sandbox_mcp_oauth_issue(ctx, req);
}


static void
ngx_http_sandbox_mcp_oauth_client_found(void *data, redisReply *reply)
{
    ngx_http_sandbox_mcp_oauth_ctx_t *ctx = data;

    ngx_int_t            rc;
    ngx_str_t            name, uris;
    ngx_connection_t    *c;
    ngx_http_request_t  *r;

    r = ctx->request;
    c = r->connection;
    ctx->cmd = NULL;

    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY
        || reply->elements != 2)
    {
        ngx_http_sandbox_mcp_oauth_finalize(ctx,
                                     ngx_http_sandbox_mcp_send_unavailable(r));
        return;
    }

    if (reply->element[0]->type == REDIS_REPLY_STRING
        && reply->element[1]->type == REDIS_REPLY_STRING)
    {
        name.data = (u_char *) reply->element[0]->str;
        name.len = reply->element[0]->len;
        uris.data = (u_char *) reply->element[1]->str;
        uris.len = reply->element[1]->len;

        rc = ngx_http_sandbox_mcp_oauth_client_known(ctx, &name, &uris);

    } else if (ngx_http_sandbox_mcp_oauth_metadata_client(ctx)) {
        /* not cached: its client metadata document */
        rc = ngx_http_sandbox_mcp_oauth_fetch_metadata(ctx);

        if (rc == NGX_DONE) {
            ngx_http_run_posted_requests(c);
            return;
        }

    } else {
        rc = ngx_http_sandbox_mcp_oauth_page(ctx, NGX_HTTP_BAD_REQUEST,
                               "Unknown client", "This client is not "
                               "registered (invalid_client), or no longer.");
    }

    if (rc != NGX_DONE) {
        ngx_http_sandbox_mcp_oauth_finalize(ctx, rc);
    }
}


/* a POST whose Origin is another site's is nobody's consent */
static ngx_uint_t
ngx_http_sandbox_mcp_oauth_same_origin(ngx_http_sandbox_mcp_oauth_ctx_t *ctx)
{
    u_char           *p, *last;
    ngx_table_elt_t  *origin;

    origin = ngx_http_sandbox_mcp_header(ctx->request, "Origin",
                                         sizeof("Origin") - 1);
    if (origin == NULL) {
        return 1;
    }

    /* the issuer's scheme://authority */
    p = ngx_strlcasestrn(ctx->issuer.data, ctx->issuer.data + ctx->issuer.len,
                     (u_char *) "://", 3 - 1);
    last = ctx->issuer.data + ctx->issuer.len;

    for (p = p ? p + 3 : last; p < last && *p != '/'; p++) {
        /* void */
    }

    return origin->value.len == (size_t) (p - ctx->issuer.data)
           && ngx_strncasecmp(origin->value.data, ctx->issuer.data,
                              origin->value.len) == 0;
}


ngx_int_t
ngx_http_sandbox_mcp_oauth_authorize(ngx_http_sandbox_mcp_oauth_ctx_t *ctx)
{
    ngx_str_t                          argv[4];
    ngx_http_request_t                *r;
    ngx_http_sandbox_mcp_oauth_req_t  *req;

    r = ctx->request;

    req = ngx_pcalloc(r->pool, sizeof(ngx_http_sandbox_mcp_oauth_req_t));
    if (req == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ctx->step = req;
    ctx->client_known = ngx_http_sandbox_mcp_oauth_client_known;

    if (ctx->params == NULL
        || ngx_http_sandbox_mcp_oauth_param(ctx, "client_id",
                                            &ctx->client_id) != NGX_OK
        || ngx_http_sandbox_mcp_oauth_param(ctx, "redirect_uri",
                                            &ctx->redirect_uri) != NGX_OK
        || ngx_strlcasestrn(ctx->redirect_uri.data,
                        ctx->redirect_uri.data + ctx->redirect_uri.len,
                        (u_char *) "://", 3 - 1) == NULL)
    {
        return ngx_http_sandbox_mcp_oauth_page(ctx, NGX_HTTP_BAD_REQUEST,
                               "Bad request", "The authorization request "
                               "is malformed, names a parameter twice, or "
                               "lacks client_id or redirect_uri "
                               "(invalid_request).");
    }

    (void) ngx_http_sandbox_mcp_oauth_param(ctx, "response_type",
                                            &req->response_type);
    (void) ngx_http_sandbox_mcp_oauth_param(ctx, "code_challenge",
                                            &ctx->challenge);
    (void) ngx_http_sandbox_mcp_oauth_param(ctx, "code_challenge_method",
                                            &req->method);
    if (ngx_http_sandbox_mcp_oauth_param(ctx, "state", &ctx->state)
        != NGX_OK)
    {
        ngx_str_set(&ctx->state, "");       /* none: none echoed */
    }

    (void) ngx_http_sandbox_mcp_oauth_param(ctx, "resource", &req->resource);
    (void) ngx_http_sandbox_mcp_oauth_param(ctx, "scope", &req->scope);

    if (r->method == NGX_HTTP_POST) {
        if (ngx_http_sandbox_mcp_oauth_cookie(ctx, req, 0) != NGX_OK) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        if (!ngx_http_sandbox_mcp_oauth_same_origin(ctx)
            || !ngx_http_sandbox_mcp_oauth_csrf_ok(ctx, req))
        {
            ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                          "sandbox_mcp: oauth: consent refused: missing or "
                          "invalid CSRF token or cross-site Origin");

            return ngx_http_sandbox_mcp_oauth_page(ctx, NGX_HTTP_FORBIDDEN,
                               "Form refused", "This form was not sent from "
                               "the sign-in page of this server in this "
                               "browser, or it is more than ten minutes "
                               "old.");
        }
    }

    if ((ctx->client_id.len != NGX_HTTP_SANDBOX_MCP_OAUTH_CLIENT_ID_LEN
         || ngx_strncmp(ctx->client_id.data, "mcp_", 4) != 0)
        && !ngx_http_sandbox_mcp_oauth_metadata_client(ctx))
    {
        return ngx_http_sandbox_mcp_oauth_page(ctx, NGX_HTTP_BAD_REQUEST,
                               "Unknown client", "This client is not "
                               "registered (invalid_client), or no longer.");
    }

    ngx_str_set(&argv[0], "HMGET");

    if (ngx_http_sandbox_mcp_redis_key(r->pool, &argv[1],
                                       SMCP_KEY_OAUTH_CLIENT, &ctx->client_id)
        != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_str_set(&argv[2], "name");
    ngx_str_set(&argv[3], "redirect_uris");

    ctx->cmd = ngx_http_sandbox_mcp_redis_command(
                   ngx_http_sandbox_mcp_oauth_client_found, ctx, 4, argv);

    if (ctx->cmd == NULL) {
        return ngx_http_sandbox_mcp_send_unavailable(r);
    }

    return NGX_DONE;
}
