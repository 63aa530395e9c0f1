/*
 * "Sign in with GitHub" on the sign-in page: the module is a GitHub OAuth
 * client.  The pending authorization request waits in Redis (bound to the
 * browser's CSRF cookie) while the user is at GitHub; on the way back the
 * code exchange and the user lookup go through subrequests to an internal
 * location (never a blocking call in a worker); the GitHub login, if
 * allowed (by login or organization), becomes the tenant.
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
#define NGX_HTTP_SANDBOX_MCP_GITHUB_BODY_MAX     65536


typedef enum {
    NGX_HTTP_SANDBOX_MCP_GITHUB_TOKEN = 0,
    NGX_HTTP_SANDBOX_MCP_GITHUB_USER,
    NGX_HTTP_SANDBOX_MCP_GITHUB_ORGS
} ngx_http_sandbox_mcp_github_step_e;


/* what the callback learns on its way */
typedef struct {
    ngx_http_sandbox_mcp_oauth_req_t     req;       /* first: ctx->step */
    ngx_http_sandbox_mcp_github_step_e   step;
    ngx_str_t                            code;      /* GitHub's */
    ngx_str_t                            token;     /* GitHub's */
    ngx_str_t                            login;
} ngx_http_sandbox_mcp_github_t;


static ngx_int_t ngx_http_sandbox_mcp_github_next(void *data);


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


/* sandbox_mcp_oauth_github_allow login|@org [owner/repo,owner/NAME,...] */
char *
ngx_http_sandbox_mcp_oauth_github_allow(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_sandbox_mcp_loc_conf_t *lcf = conf;

    u_char        *p, *last, *end, *d;
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

    kv = ngx_array_push(lcf->oauth.github_allow);
    if (kv == NULL) {
        return NGX_CONF_ERROR;
    }

    kv->key = value[1];

    p = value[1].data + (value[1].data[0] == '@');

    if (!smcp_valid_tenant((char *) p, value[1].data + value[1].len - p)) {
        return "takes a GitHub login or @organization first";
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


static ngx_uint_t
ngx_http_sandbox_mcp_github_wants_orgs(ngx_http_sandbox_mcp_oauth_conf_t *oc)
{
    ngx_uint_t     i;
    ngx_keyval_t  *kv;

    if (oc->github_allow == NULL) {
        return 0;
    }

    kv = oc->github_allow->elts;

    for (i = 0; i < oc->github_allow->nelts; i++) {
        if (kv[i].key.data[0] == '@') {
            return 1;
        }
    }

    return 0;
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


/* a subrequest to {location}/{what}?{args}; the parent resumes after it */
static ngx_int_t
ngx_http_sandbox_mcp_github_subrequest(ngx_http_sandbox_mcp_oauth_ctx_t *ctx,
    const char *what, ngx_str_t *args)
{
    ngx_str_t                           uri;
    ngx_http_sandbox_mcp_oauth_conf_t  *oc;

    oc = &ctx->lcf->oauth;

    uri.data = ngx_pnalloc(ctx->request->pool, oc->github_location.len + 8);
    if (uri.data == NULL) {
        return NGX_ERROR;
    }

    uri.len = ngx_sprintf(uri.data, "%V/%s", &oc->github_location, what)
              - uri.data;

    return ngx_http_sandbox_mcp_oauth_subrequest(ctx, &uri, args,
                                       ngx_http_sandbox_mcp_github_next);
}


/* ?token=<the GitHub token> for the user and orgs lookups */
static ngx_int_t
ngx_http_sandbox_mcp_github_lookup(ngx_http_sandbox_mcp_oauth_ctx_t *ctx,
    ngx_http_sandbox_mcp_github_step_e step)
{
    u_char                         *p;
    ngx_str_t                       args;
    ngx_http_sandbox_mcp_github_t  *gh;

    gh = ctx->step;
    gh->step = step;

    args.data = ngx_pnalloc(ctx->request->pool, 6 + 3 * gh->token.len);
    if (args.data == NULL) {
        return NGX_ERROR;
    }

    p = ngx_cpymem(args.data, "token=", 6);
    p = ngx_http_sandbox_mcp_oauth_escape(p, &gh->token);
    args.len = p - args.data;

    return ngx_http_sandbox_mcp_github_subrequest(ctx,
               step == NGX_HTTP_SANDBOX_MCP_GITHUB_USER ? "user" : "orgs",
               &args);
}


/* the rule that lets the login in (its login, else one of its orgs) */
static ngx_keyval_t *
ngx_http_sandbox_mcp_github_rule(ngx_http_sandbox_mcp_oauth_conf_t *oc,
    ngx_str_t *login, json_t *orgs)
{
    size_t         k;
    json_t        *o;
    ngx_uint_t     i;
    const char    *name;
    ngx_keyval_t  *kv;

    if (oc->github_allow == NULL) {
        return NULL;
    }

    kv = oc->github_allow->elts;

    for (i = 0; i < oc->github_allow->nelts; i++) {
        if (kv[i].key.data[0] != '@'
            && kv[i].key.len == login->len
            && ngx_strncasecmp(kv[i].key.data, login->data, login->len) == 0)
        {
            return &kv[i];
        }
    }

    for (i = 0; i < oc->github_allow->nelts; i++) {
        if (kv[i].key.data[0] != '@') {
            continue;
        }

        json_array_foreach(orgs, k, o) {
            name = json_string_value(json_object_get(o, "login"));

            if (name && ngx_strlen(name) == kv[i].key.len - 1
                && ngx_strncasecmp(kv[i].key.data + 1, (u_char *) name,
                                   kv[i].key.len - 1) == 0)
            {
                return &kv[i];
            }
        }
    }

    return NULL;
}


/* the login known (and its orgs, when asked): a code, or access_denied */
static ngx_int_t
ngx_http_sandbox_mcp_github_decide(ngx_http_sandbox_mcp_oauth_ctx_t *ctx,
    json_t *orgs)
{
    ngx_str_t                       none;
    ngx_keyval_t                   *rule;
    ngx_http_sandbox_mcp_github_t  *gh;

    gh = ctx->step;

    rule = ngx_http_sandbox_mcp_github_rule(&ctx->lcf->oauth, &gh->login,
                                            orgs);

    if (rule == NULL) {
        if (orgs == NULL
            && ngx_http_sandbox_mcp_github_wants_orgs(&ctx->lcf->oauth))
        {
            return ngx_http_sandbox_mcp_github_lookup(ctx,
                                       NGX_HTTP_SANDBOX_MCP_GITHUB_ORGS)
                   == NGX_OK ? NGX_DONE : NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        ngx_log_error(NGX_LOG_INFO, ctx->request->connection->log, 0,
                      "sandbox_mcp: oauth: GitHub user \"%V\" is not "
                      "allowed", &gh->login);

        return ngx_http_sandbox_mcp_oauth_deny(ctx, "access_denied",
                                 "this GitHub account is not allowed here");
    }

    ngx_str_null(&none);

    /* a GitHub sign-in lasts as long as its refresh grant */
    return ngx_http_sandbox_mcp_oauth_grant_code(ctx, &gh->login,
               &rule->value, &none, ngx_time() + ctx->lcf->oauth.refresh_ttl);
}


/* a subrequest ended: the next step */
static ngx_int_t
ngx_http_sandbox_mcp_github_next(void *data)
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
                      "sandbox_mcp: oauth: GitHub answered %ui at step %d",
                      ctx->sub_status, (int) gh->step);

        return ngx_http_sandbox_mcp_oauth_deny(ctx, "server_error",
                                         "GitHub sign-in failed");
    }

    rc = NGX_HTTP_INTERNAL_SERVER_ERROR;

    switch (gh->step) {

    case NGX_HTTP_SANDBOX_MCP_GITHUB_TOKEN:
        v = json_object_get(j, "access_token");

        if (!json_is_string(v) || json_string_length(v) == 0
            || json_string_length(v) > 255)
        {
            rc = ngx_http_sandbox_mcp_oauth_deny(ctx, "access_denied",
                                   "GitHub refused the sign-in");
            break;
        }

        gh->token.len = json_string_length(v);
        gh->token.data = ngx_pnalloc(ctx->request->pool, gh->token.len);
        if (gh->token.data == NULL) {
            break;
        }

        ngx_memcpy(gh->token.data, json_string_value(v), gh->token.len);

        rc = ngx_http_sandbox_mcp_github_lookup(ctx,
                                           NGX_HTTP_SANDBOX_MCP_GITHUB_USER)
             == NGX_OK ? NGX_DONE : NGX_HTTP_INTERNAL_SERVER_ERROR;
        break;

    case NGX_HTTP_SANDBOX_MCP_GITHUB_USER:
        v = json_object_get(j, "login");

        if (!smcp_valid_tenant(json_string_value(v), json_string_length(v))) {
            rc = ngx_http_sandbox_mcp_oauth_deny(ctx, "server_error",
                                   "GitHub gave no usable login");
            break;
        }

        gh->login.len = json_string_length(v);
        gh->login.data = ngx_pnalloc(ctx->request->pool, gh->login.len);
        if (gh->login.data == NULL) {
            break;
        }

        ngx_memcpy(gh->login.data, json_string_value(v), gh->login.len);

        rc = ngx_http_sandbox_mcp_github_decide(ctx, NULL);
        break;

    default: /* NGX_HTTP_SANDBOX_MCP_GITHUB_ORGS */
        rc = json_is_array(j) ? ngx_http_sandbox_mcp_github_decide(ctx, j)
                              : ngx_http_sandbox_mcp_oauth_deny(ctx,
                                    "server_error", "GitHub sign-in failed");
        break;
    }

    json_decref(j);

    return rc;
}


/* the pending request is back from Redis: the browser's, then the code */
static ngx_int_t
ngx_http_sandbox_mcp_github_pending(ngx_http_sandbox_mcp_oauth_ctx_t *ctx,
    redisReply *reply)
{
    u_char                            *p;
    json_t                            *j;
    ngx_str_t                          args, cb, error, *f[6];
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

    gh->step = NGX_HTTP_SANDBOX_MCP_GITHUB_TOKEN;

    if (ngx_http_sandbox_mcp_github_subrequest(ctx, "token", &args)
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
