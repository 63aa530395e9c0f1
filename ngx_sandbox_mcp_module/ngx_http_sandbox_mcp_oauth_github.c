/*
 * "Sign in with GitHub" on the sign-in page: the module is a GitHub OAuth
 * client.  The pending authorization request waits in Redis (bound to the
 * browser's CSRF cookie) while the user is at GitHub; on the way back the
 * code exchange goes through a subrequest to an internal location (never
 * a blocking call in a worker), then who the user is and which rule lets
 * it in (_oauth_github_user.c): the tenant is its numeric id, the login a
 * label, and the code keeps GitHub's token (sealed) so that every refresh
 * asks GitHub again.
 *
 *   location = /_smcp_github/token {          # POST, parameters in the query
 *       internal;
 *       proxy_pass_request_headers off;
 *       proxy_method POST;
 *       proxy_set_header Accept application/json;
 *       proxy_pass https://github.com/login/oauth/access_token;
 *   }
 *   location = /_smcp_github/user {           # ?token=
 *       internal;
 *       proxy_pass_request_headers off;
 *       proxy_set_header Authorization "Bearer $arg_token";
 *       proxy_pass https://api.github.com/user;
 *   }
 *   location = /_smcp_github/orgs { ... https://api.github.com/user/orgs; }
 */

#include "ngx_http_sandbox_mcp_oauth.h"
#include "ngx_http_sandbox_mcp_http.h"
#include "ngx_http_sandbox_mcp_scripts.h"

#include "smcp_validate.h"


#define NGX_HTTP_SANDBOX_MCP_GITHUB_AUTHORIZE                                 \
    "https://github.com/login/oauth/authorize"
#define NGX_HTTP_SANDBOX_MCP_GITHUB_LOCATION     "/_smcp_github"


#define NGX_HTTP_SANDBOX_MCP_GITHUB_RULES_MAX    32


/* what the callback learns on its way */
typedef struct {
    ngx_http_sandbox_mcp_oauth_req_t     req;       /* first: ctx->step */
    ngx_str_t                            code;      /* GitHub's */
    ngx_http_sandbox_mcp_github_user_t   user;
} ngx_http_sandbox_mcp_github_t;


char *
ngx_http_sandbox_mcp_oauth_github_conf(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_sandbox_mcp_loc_conf_t *lcf = conf;

    int         rc;
    size_t      len;
    u_char     *buf;
    ngx_str_t  *value, name;
    char        err[NGX_HTTP_SANDBOX_MCP_ERR_MAX];

    if (lcf->oauth.github_client_id.data) {
        return "is duplicate";
    }

    value = cf->args->elts;

    buf = ngx_pnalloc(cf->pool, SMCP_SECRET_MAX);
    if (buf == NULL) {
        return NGX_CONF_ERROR;
    }

    /* the client secret: read here, by the master; never logged */

    if (value[2].len > 5 && ngx_strncmp(value[2].data, "file:", 5) == 0) {
        name.data = value[2].data + 5;
        name.len = value[2].len - 5;

        if (ngx_conf_full_name(cf->cycle, &name, 1) != NGX_OK) {
            return NGX_CONF_ERROR;
        }

        rc = smcp_secret_from_file((char *) name.data, 1, buf, &len, err,
                                   sizeof(err));

    } else if (value[2].len > 4
               && ngx_strncmp(value[2].data, "env:", 4) == 0)
    {
        rc = smcp_secret_from_env((char *) value[2].data + 4, 1, buf, &len,
                                  err, sizeof(err));

    } else {
        return "takes a client id and env:NAME or file:PATH (the secret)";
    }

    if (rc != SMCP_OK) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "sandbox_mcp_oauth_github: %s", err);
        return NGX_CONF_ERROR;
    }

    lcf->oauth.github_client_id = value[1];
    lcf->oauth.github_secret.data = buf;
    lcf->oauth.github_secret.len = len;

    return NGX_CONF_OK;
}


/*
 * A rule's subject as oauth_github.lua reads it: "id:<digits>" (a GitHub
 * user's numeric id), "login:<login>" or "org:<organization>" (lowercase:
 * GitHub's names are case-insensitive); NGX_DECLINED: not one.
 */
static ngx_int_t
ngx_http_sandbox_mcp_github_subject(ngx_conf_t *cf, ngx_str_t *v,
    ngx_str_t *subject)
{
    u_char      *p, *name;
    size_t       len;
    ngx_uint_t   i;
    const char  *kind;

    if (v->len > 3 && ngx_strncmp(v->data, "id:", 3) == 0) {
        kind = "id:";
        name = v->data + 3;
        len = v->len - 3;

        for (i = 0; i < len; i++) {
            if (name[i] < '0' || name[i] > '9') {
                return NGX_DECLINED;
            }
        }

        if (len > 19 || name[0] == '0') {
            return NGX_DECLINED;
        }

    } else {
        kind = (v->data[0] == '@') ? "org:" : "login:";
        name = v->data + (v->data[0] == '@');
        len = v->data + v->len - name;

        if (!smcp_valid_tenant((char *) name, len)) {
            return NGX_DECLINED;
        }
    }

    subject->data = ngx_pnalloc(cf->pool, ngx_strlen(kind) + len);
    if (subject->data == NULL) {
        return NGX_ERROR;
    }

    p = ngx_cpymem(subject->data, kind, ngx_strlen(kind));
    ngx_strlow(p, name, len);
    subject->len = p + len - subject->data;

    return NGX_OK;
}


/*
 * sandbox_mcp_oauth_github_allow login|@org|id:N [owner/repo,owner/NAME,...]
 * (a login or an organization: the account that first signs in with it,
 * by its numeric id; oauth_github.lua)
 */
char *
ngx_http_sandbox_mcp_oauth_github_allow(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_sandbox_mcp_loc_conf_t *lcf = conf;

    u_char        *p, *last, *end, *d;
    ngx_int_t      rc;
    ngx_str_t     *value;
    ngx_keyval_t  *kv;

    value = cf->args->elts;

    if (lcf->oauth.github_allow == NGX_CONF_UNSET_PTR) {
        lcf->oauth.github_allow = ngx_array_create(cf->pool, 4,
                                                   sizeof(ngx_keyval_t));
        if (lcf->oauth.github_allow == NULL) {
            return NGX_CONF_ERROR;
        }
    }

    if (lcf->oauth.github_allow->nelts
        == NGX_HTTP_SANDBOX_MCP_GITHUB_RULES_MAX)
    {
        return "takes at most 32 rules (name an organization instead)";
    }

    kv = ngx_array_push(lcf->oauth.github_allow);
    if (kv == NULL) {
        return NGX_CONF_ERROR;
    }

    rc = (value[1].len == 0)
         ? NGX_DECLINED
         : ngx_http_sandbox_mcp_github_subject(cf, &value[1], &kv->key);

    if (rc == NGX_ERROR) {
        return NGX_CONF_ERROR;
    }

    if (rc == NGX_DECLINED) {
        return "takes a GitHub login, @organization or id:N (a user's "
               "numeric id) first";
    }

    /* the grant as the JSON array the tokens carry */

    ngx_str_set(&kv->value, "");

    if (cf->args->nelts < 3) {
        return NGX_CONF_OK;
    }

    kv->value.data = ngx_pnalloc(cf->pool, 3 * value[2].len + 2);
    if (kv->value.data == NULL) {
        return NGX_CONF_ERROR;
    }

    d = kv->value.data;
    *d++ = '[';
    p = value[2].data;
    last = p + value[2].len;

    for ( /* void */ ; p < last; p = end + 1) {
        end = ngx_strlchr(p, last, ',');
        if (end == NULL) {
            end = last;
        }

        if (!smcp_grant_valid((char *) p, end - p)) {
            return "takes repositories as owner/repo,owner/*,* (comma "
                   "separated)";
        }

        if (d[-1] != '[') {
            *d++ = ',';
        }

        *d++ = '"';
        d = ngx_cpymem(d, p, end - p);
        *d++ = '"';
    }

    *d++ = ']';
    kv->value.len = d - kv->value.data;

    return NGX_CONF_OK;
}


void
ngx_http_sandbox_mcp_oauth_github_merge(ngx_http_sandbox_mcp_oauth_conf_t
    *prev, ngx_http_sandbox_mcp_oauth_conf_t *conf)
{
    if (conf->github_client_id.data == NULL) {
        conf->github_client_id = prev->github_client_id;
        conf->github_secret = prev->github_secret;
    }

    ngx_conf_merge_str_value(conf->github_authorize, prev->github_authorize,
                             NGX_HTTP_SANDBOX_MCP_GITHUB_AUTHORIZE);
    ngx_conf_merge_str_value(conf->github_location, prev->github_location,
                             NGX_HTTP_SANDBOX_MCP_GITHUB_LOCATION);
    ngx_conf_merge_ptr_value(conf->github_allow, prev->github_allow, NULL);
}


/* {issuer}/oauth/github/callback */
static ngx_int_t
ngx_http_sandbox_mcp_github_callback_url(ngx_http_sandbox_mcp_oauth_ctx_t
    *ctx, ngx_str_t *url)
{
    url->data = ngx_pnalloc(ctx->request->pool, ctx->issuer.len
                            + sizeof("/oauth/github/callback"));
    if (url->data == NULL) {
        return NGX_ERROR;
    }

    url->len = ngx_sprintf(url->data, "%V/oauth/github/callback",
                           &ctx->issuer) - url->data;

    return NGX_OK;
}


static void
ngx_http_sandbox_mcp_github_pending_stored(void *data, redisReply *reply)
{
    ngx_http_sandbox_mcp_oauth_ctx_t *ctx = data;

    u_char                             *p;
    ngx_int_t                           rc;
    ngx_str_t                           loc, cb;
    ngx_http_request_t                 *r;
    ngx_http_sandbox_mcp_oauth_conf_t  *oc;

    r = ctx->request;
    oc = &ctx->lcf->oauth;
    ctx->cmd = NULL;

    if (reply && reply->type == REDIS_REPLY_INTEGER && reply->integer < 0) {
        ngx_http_sandbox_mcp_oauth_finalize(ctx,
            ngx_http_sandbox_mcp_oauth_deny(ctx, "temporarily_unavailable",
                                  "too many GitHub sign-ins are under way: "
                                  "try again in a few minutes"));
        return;
    }

    if (reply == NULL || reply->type != REDIS_REPLY_INTEGER) {
        ngx_http_sandbox_mcp_oauth_finalize(ctx,
                                     ngx_http_sandbox_mcp_send_unavailable(r));
        return;
    }

    if (ngx_http_sandbox_mcp_github_callback_url(ctx, &cb) != NGX_OK) {
        ngx_http_sandbox_mcp_oauth_finalize(ctx,
                                            NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    loc.data = ngx_pnalloc(r->pool, oc->github_authorize.len
                                    + 3 * (oc->github_client_id.len + cb.len
                                           + ctx->refresh.len)
                                    + 128);
    if (loc.data == NULL) {
        ngx_http_sandbox_mcp_oauth_finalize(ctx,
                                            NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    p = ngx_cpymem(loc.data, oc->github_authorize.data,
                   oc->github_authorize.len);
    p = ngx_cpymem(p, "?client_id=", 11);
    p = ngx_http_sandbox_mcp_oauth_escape(p, &oc->github_client_id);
    p = ngx_cpymem(p, "&redirect_uri=", 14);
    p = ngx_http_sandbox_mcp_oauth_escape(p, &cb);
    p = ngx_cpymem(p, "&state=", 7);
    p = ngx_cpymem(p, ctx->refresh.data, ctx->refresh.len);
    p = ngx_cpymem(p, "&allow_signup=false", 19);

    if (ngx_http_sandbox_mcp_github_wants_orgs(oc)) {
        p = ngx_cpymem(p, "&scope=read%3Aorg", 17);
    }

    loc.len = p - loc.data;

    rc = ngx_http_sandbox_mcp_add_header(r, "Location", &loc);

    ngx_http_sandbox_mcp_oauth_finalize(ctx, rc != NGX_OK
        ? NGX_HTTP_INTERNAL_SERVER_ERROR
        : ngx_http_sandbox_mcp_send_json(r, NGX_HTTP_MOVED_TEMPORARILY,
                                         NULL));
}


/*
 * The sign-in page's "Sign in with GitHub" (a checked POST): the request
 * waits in Redis under a new state, then the browser goes to GitHub.
 */
ngx_int_t
ngx_http_sandbox_mcp_oauth_github_start(ngx_http_sandbox_mcp_oauth_ctx_t
    *ctx, ngx_http_sandbox_mcp_oauth_req_t *req)
{
    char                *s;
    json_t              *pending;
    ngx_str_t            argv[6];
    ngx_http_request_t  *r;

    r = ctx->request;

    if (ctx->lcf->oauth.github_client_id.len == 0) {
        return ngx_http_sandbox_mcp_oauth_page(ctx, NGX_HTTP_BAD_REQUEST,
                               "Not available", "Sign-in with GitHub is not "
                               "configured on this server.");
    }

    /* GitHub's state: ours, random; kept in ctx->refresh */
    if (ngx_http_sandbox_mcp_oauth_random(r->pool, &ctx->refresh, "", 16)
        != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    pending = json_pack("{s:s%, s:s%, s:s%, s:s%, s:s%, s:s%}",
                        "client_id", ctx->client_id.data, ctx->client_id.len,
                        "redirect_uri", ctx->redirect_uri.data,
                        ctx->redirect_uri.len,
                        "challenge", ctx->challenge.data, ctx->challenge.len,
                        "state", ctx->state.data, ctx->state.len,
                        "resource", req->resource.data, req->resource.len,
                        "cookie", req->cookie.data, req->cookie.len);
    if (pending == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    s = json_dumps(pending, JSON_COMPACT);
    json_decref(pending);

    if (s == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    argv[2].len = ngx_strlen(s);
    argv[2].data = ngx_pnalloc(r->pool, argv[2].len);
    if (argv[2].data == NULL) {
        free(s);
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_memcpy(argv[2].data, s, argv[2].len);
    free(s);

    /* anyone may start one: at most github_pending at once */
    argv[3] = ngx_http_sandbox_mcp_redis_number(r->pool,
                                       NGX_HTTP_SANDBOX_MCP_OAUTH_PENDING_TTL);
    argv[4] = ngx_http_sandbox_mcp_redis_number(r->pool, ngx_time());
    argv[5] = ngx_http_sandbox_mcp_redis_number(r->pool,
                                       ctx->lcf->oauth.github_pending);

    if (ngx_http_sandbox_mcp_redis_key(r->pool, &argv[0],
                                       SMCP_KEY_OAUTH_PENDING, &ctx->refresh)
        != NGX_OK
        || ngx_http_sandbox_mcp_redis_key(r->pool, &argv[1],
                                          SMCP_KEY_OAUTH_SIGNINS, NULL)
           != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ctx->cmd = ngx_http_sandbox_mcp_redis_script(
                   &ngx_http_sandbox_mcp_script_oauth_pending,
                   ngx_http_sandbox_mcp_github_pending_stored, ctx, 2, 6,
                   argv);

    if (ctx->cmd == NULL) {
        return ngx_http_sandbox_mcp_send_unavailable(r);
    }

    return NGX_DONE;
}


/* the user looked up: a code for its tenant, or refused */
static ngx_int_t
ngx_http_sandbox_mcp_github_signed_in(ngx_http_sandbox_mcp_oauth_ctx_t *ctx,
    ngx_http_sandbox_mcp_github_user_t *u, ngx_int_t rc)
{
    ngx_http_sandbox_mcp_oauth_grant_t  g;

    if (rc == NGX_ERROR) {
        return ngx_http_sandbox_mcp_oauth_deny(ctx, "server_error",
                                               "GitHub sign-in failed");
    }

    if (rc == NGX_DECLINED) {
        ngx_log_error(NGX_LOG_INFO, ctx->request->connection->log, 0,
                      "sandbox_mcp: oauth: GitHub user \"%V\" (id %V) is "
                      "not allowed", &u->login, &u->id);

        return ngx_http_sandbox_mcp_oauth_deny(ctx, "access_denied",
                                 "this GitHub account is not allowed here");
    }

    ngx_memzero(&g, sizeof(ngx_http_sandbox_mcp_oauth_grant_t));

    /* the tenant is the id: a rename changes the label only */
    if (ngx_http_sandbox_mcp_github_tenant(ctx->request->pool, &u->id,
                                           &g.tenant)
        != NGX_OK
        || ngx_http_sandbox_mcp_github_seal(ctx->request, &u->token,
                                            &g.github)
           != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    g.repos = u->rule->value;
    g.label = u->login;

    /* a GitHub sign-in lasts as long as its refresh grant, each refresh
     * asking GitHub again */
    g.key_exp = ngx_time() + ctx->lcf->oauth.refresh_ttl;

    ngx_log_error(NGX_LOG_INFO, ctx->request->connection->log, 0,
                  "sandbox_mcp: oauth: GitHub user \"%V\" signed in as "
                  "%V", &u->login, &g.tenant);

    return ngx_http_sandbox_mcp_oauth_grant_code(ctx, &g);
}


/* the code exchange ended: GitHub's token, then who the user is */
static ngx_int_t
ngx_http_sandbox_mcp_github_exchanged(void *data)
{
    ngx_http_sandbox_mcp_oauth_ctx_t *ctx = data;

    json_t                         *j, *v;
    ngx_int_t                       rc;
    ngx_http_sandbox_mcp_github_t  *gh;

    gh = ctx->step;

    j = (ctx->sub_status == NGX_HTTP_OK && ctx->sub_body.len)
        ? json_loadb((char *) ctx->sub_body.data, ctx->sub_body.len, 0, NULL)
        : NULL;

    if (j == NULL) {
        ngx_log_error(NGX_LOG_ERR, ctx->request->connection->log, 0,
                      "sandbox_mcp: oauth: GitHub answered %ui to the code "
                      "exchange", ctx->sub_status);

        return ngx_http_sandbox_mcp_oauth_deny(ctx, "server_error",
                                               "GitHub sign-in failed");
    }

    v = json_object_get(j, "access_token");

    if (!json_is_string(v) || json_string_length(v) == 0
        || json_string_length(v) > 255)
    {
        json_decref(j);
        return ngx_http_sandbox_mcp_oauth_deny(ctx, "access_denied",
                                               "GitHub refused the sign-in");
    }

    gh->user.token.len = json_string_length(v);
    gh->user.token.data = ngx_pnalloc(ctx->request->pool,
                                      gh->user.token.len);
    if (gh->user.token.data == NULL) {
        json_decref(j);
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_memcpy(gh->user.token.data, json_string_value(v),
               gh->user.token.len);
    json_decref(j);

    gh->user.done = ngx_http_sandbox_mcp_github_signed_in;

    rc = ngx_http_sandbox_mcp_github_user(ctx, &gh->user);

    return (rc == NGX_OK) ? NGX_DONE : NGX_HTTP_INTERNAL_SERVER_ERROR;
}


/* the pending request is back from Redis: the browser's, then the code */
static ngx_int_t
ngx_http_sandbox_mcp_github_pending(ngx_http_sandbox_mcp_oauth_ctx_t *ctx,
    redisReply *reply)
{
    u_char                            *p;
    json_t                            *j;
    ngx_str_t                          uri, args, cb, error, *f[6];
    ngx_uint_t                         i;
    ngx_http_sandbox_mcp_github_t     *gh;
    ngx_http_sandbox_mcp_oauth_conf_t *oc;
    ngx_http_sandbox_mcp_oauth_req_t   browser;

    static const char  *names[] = { "client_id", "redirect_uri", "challenge",
                                    "state", "resource", "cookie" };

    gh = ctx->step;
    oc = &ctx->lcf->oauth;

    j = json_loadb(reply->str, reply->len, 0, NULL);
    if (j == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    f[0] = &ctx->client_id;
    f[1] = &ctx->redirect_uri;
    f[2] = &ctx->challenge;
    f[3] = &ctx->state;
    f[4] = &gh->req.resource;
    f[5] = &gh->req.cookie;

    for (i = 0; i < 6; i++) {
        f[i]->len = json_string_length(json_object_get(j, names[i]));
        f[i]->data = ngx_pnalloc(ctx->request->pool, f[i]->len + 1);
        if (f[i]->data == NULL) {
            json_decref(j);
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        ngx_memcpy(f[i]->data,
                   json_string_value(json_object_get(j, names[i])),
                   f[i]->len);
    }

    json_decref(j);

    /* the browser that started the sign-in, not another one */
    if (ngx_http_sandbox_mcp_oauth_cookie(ctx, &browser, 0) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (browser.cookie.len != gh->req.cookie.len
        || gh->req.cookie.len == 0
        || ngx_strncmp(browser.cookie.data, gh->req.cookie.data,
                       gh->req.cookie.len) != 0)
    {
        return ngx_http_sandbox_mcp_oauth_page(ctx, NGX_HTTP_FORBIDDEN,
                               "Sign-in refused", "This GitHub sign-in was "
                               "started in another browser.");
    }

    if (ngx_http_sandbox_mcp_oauth_param(ctx, "error", &error) == NGX_OK
        || gh->code.len == 0)
    {
        return ngx_http_sandbox_mcp_oauth_deny(ctx, "access_denied",
                                  "the GitHub sign-in was not completed");
    }

    /* the code exchange: POST, its parameters in the query */

    if (ngx_http_sandbox_mcp_github_callback_url(ctx, &cb) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    args.data = ngx_pnalloc(ctx->request->pool,
                            64 + 3 * (oc->github_client_id.len
                                      + oc->github_secret.len
                                      + gh->code.len + cb.len));
    if (args.data == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    p = ngx_cpymem(args.data, "client_id=", 10);
    p = ngx_http_sandbox_mcp_oauth_escape(p, &oc->github_client_id);
    p = ngx_cpymem(p, "&client_secret=", 15);
    p = ngx_http_sandbox_mcp_oauth_escape(p, &oc->github_secret);
    p = ngx_cpymem(p, "&code=", 6);
    p = ngx_http_sandbox_mcp_oauth_escape(p, &gh->code);
    p = ngx_cpymem(p, "&redirect_uri=", 14);
    p = ngx_http_sandbox_mcp_oauth_escape(p, &cb);
    args.len = p - args.data;

    uri.data = ngx_pnalloc(ctx->request->pool,
                           oc->github_location.len + sizeof("/token"));
    if (uri.data == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    uri.len = ngx_sprintf(uri.data, "%V/token", &oc->github_location)
              - uri.data;

    if (ngx_http_sandbox_mcp_oauth_subrequest(ctx, &uri, &args,
                                         ngx_http_sandbox_mcp_github_exchanged)
        != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    return NGX_DONE;
}


static void
ngx_http_sandbox_mcp_github_pending_found(void *data, redisReply *reply)
{
    ngx_http_sandbox_mcp_oauth_ctx_t *ctx = data;

    ngx_int_t            rc;
    ngx_connection_t    *c;
    ngx_http_request_t  *r;

    r = ctx->request;
    c = r->connection;
    ctx->cmd = NULL;

    if (reply == NULL || reply->type == REDIS_REPLY_ERROR) {
        rc = ngx_http_sandbox_mcp_send_unavailable(r);

    } else if (reply->type != REDIS_REPLY_STRING) {
        rc = ngx_http_sandbox_mcp_oauth_page(ctx, NGX_HTTP_BAD_REQUEST,
                               "Sign-in expired", "This GitHub sign-in is "
                               "unknown, was used already, or is more than "
                               "ten minutes old.");

    } else {
        rc = ngx_http_sandbox_mcp_github_pending(ctx, reply);
    }

    if (rc == NGX_DONE) {
        /* the subrequest runs from the posted requests */
        ngx_http_run_posted_requests(c);
        return;
    }

    ngx_http_sandbox_mcp_oauth_finalize(ctx, rc);
}


/* GET /oauth/github/callback?code=&state= (or ?error=&state=) */
ngx_int_t
ngx_http_sandbox_mcp_oauth_github_callback(ngx_http_sandbox_mcp_oauth_ctx_t
    *ctx)
{
    size_t                          i;
    ngx_str_t                       state, argv[2];
    ngx_http_request_t             *r;
    ngx_http_sandbox_mcp_github_t  *gh;

    r = ctx->request;

    gh = ngx_pcalloc(r->pool, sizeof(ngx_http_sandbox_mcp_github_t));
    if (gh == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ctx->step = gh;

    (void) ngx_http_sandbox_mcp_oauth_param(ctx, "state", &state);
    (void) ngx_http_sandbox_mcp_oauth_param(ctx, "code", &gh->code);

    for (i = 0; i < state.len; i++) {
        if (!((state.data[i] >= '0' && state.data[i] <= '9')
              || (state.data[i] >= 'a' && state.data[i] <= 'f')))
        {
            break;
        }
    }

    if (ctx->params == NULL || state.len != 32 || i != 32
        || gh->code.len > 255)
    {
        return ngx_http_sandbox_mcp_oauth_page(ctx, NGX_HTTP_BAD_REQUEST,
                               "Bad request", "This is not a GitHub "
                               "sign-in this server started.");
    }

    /* one use: taken out of Redis */

    ngx_str_set(&argv[0], "GETDEL");

    if (ngx_http_sandbox_mcp_redis_key(r->pool, &argv[1],
                                       SMCP_KEY_OAUTH_PENDING, &state)
        != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ctx->cmd = ngx_http_sandbox_mcp_redis_command(
                   ngx_http_sandbox_mcp_github_pending_found, ctx, 2, argv);

    if (ctx->cmd == NULL) {
        return ngx_http_sandbox_mcp_send_unavailable(r);
    }

    return NGX_DONE;
}
