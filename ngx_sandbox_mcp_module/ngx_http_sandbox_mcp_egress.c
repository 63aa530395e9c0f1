/*
 * The egress proxy: an access-phase check in front of nginx's own proxy
 * module.  A sandbox holds only a token scoped to its run; here the token
 * is verified, the run is checked to be live in Redis, the token headers
 * are stripped, and the real credential of the route is offered through
 * $sandbox_mcp_credential for proxy_set_header.  Every request is recorded
 * in the run's event stream at the log phase.
 */

#include "ngx_http_sandbox_mcp_egress.h"
#include "ngx_http_sandbox_mcp_defaults.h"
#include "ngx_http_sandbox_mcp_egress_announce.h"
#include "ngx_http_sandbox_mcp_egress_credential.h"
#include "ngx_http_sandbox_mcp_egress_inbox.h"
#include "ngx_http_sandbox_mcp_egress_log.h"
#include "ngx_http_sandbox_mcp_egress_meter.h"
#include "ngx_http_sandbox_mcp_egress_model.h"
#include "ngx_http_sandbox_mcp_egress_push.h"
#include "ngx_http_sandbox_mcp_egress_token.h"
#include "ngx_http_sandbox_mcp_http.h"
#include "ngx_http_sandbox_mcp_metrics.h"
#include "ngx_http_sandbox_mcp_redis.h"

#include "smcp_path.h"
#include "smcp_validate.h"


static ngx_int_t ngx_http_sandbox_mcp_egress_add_variables(ngx_conf_t *cf);
static ngx_int_t ngx_http_sandbox_mcp_egress_init(ngx_conf_t *cf);
static void *ngx_http_sandbox_mcp_egress_create_main_conf(ngx_conf_t *cf);
static char *ngx_http_sandbox_mcp_egress_init_main_conf(ngx_conf_t *cf,
    void *conf);
static void *ngx_http_sandbox_mcp_egress_create_loc_conf(ngx_conf_t *cf);
static char *ngx_http_sandbox_mcp_egress_merge_loc_conf(ngx_conf_t *cf,
    void *parent, void *child);
static char *ngx_http_sandbox_mcp_egress(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static ngx_int_t ngx_http_sandbox_mcp_egress_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data);


static ngx_conf_enum_t  ngx_http_sandbox_mcp_egress_push_modes[] = {
    { ngx_string("off"), NGX_HTTP_SANDBOX_MCP_PUSH_OFF },
    { ngx_string("git"), NGX_HTTP_SANDBOX_MCP_PUSH_GIT },
    { ngx_string("pull_request"), NGX_HTTP_SANDBOX_MCP_PUSH_PULL_REQUEST },
    { ngx_null_string, 0 }
};


/* sandbox_mcp_egress_methods: what a read-only route allows */
static ngx_conf_bitmask_t  ngx_http_sandbox_mcp_egress_method_names[] = {
    { ngx_string("GET"), NGX_HTTP_GET },
    { ngx_string("HEAD"), NGX_HTTP_HEAD },
    { ngx_string("POST"), NGX_HTTP_POST },
    { ngx_null_string, 0 }
};


static ngx_command_t  ngx_http_sandbox_mcp_egress_commands[] = {

    { ngx_string("sandbox_mcp_egress"),
      NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_sandbox_mcp_egress,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("sandbox_mcp_egress_inbox"),
      NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS,
      ngx_http_sandbox_mcp_egress_inbox,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("sandbox_mcp_egress_credential"),
      NGX_HTTP_LOC_CONF|NGX_CONF_TAKE12,
      ngx_http_sandbox_mcp_egress_credential,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("sandbox_mcp_egress_repository"),
      NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_set_complex_value_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_sandbox_mcp_egress_loc_conf_t, repository),
      NULL },

    { ngx_string("sandbox_mcp_egress_push"),
      NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_enum_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_sandbox_mcp_egress_loc_conf_t, push),
      &ngx_http_sandbox_mcp_egress_push_modes },

    { ngx_string("sandbox_mcp_egress_deny"),
      NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_str_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_sandbox_mcp_egress_loc_conf_t, deny),
      NULL },

    { ngx_string("sandbox_mcp_egress_methods"),
      NGX_HTTP_LOC_CONF|NGX_CONF_1MORE,
      ngx_conf_set_bitmask_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_sandbox_mcp_egress_loc_conf_t, methods),
      &ngx_http_sandbox_mcp_egress_method_names },

    { ngx_string("sandbox_mcp_egress_strict_path"),
      NGX_HTTP_LOC_CONF|NGX_CONF_FLAG,
      ngx_conf_set_flag_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_sandbox_mcp_egress_loc_conf_t, strict_path),
      NULL },

    { ngx_string("sandbox_mcp_egress_model"),
      NGX_HTTP_LOC_CONF|NGX_CONF_FLAG,
      ngx_conf_set_flag_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_sandbox_mcp_egress_loc_conf_t, model),
      NULL },

    { ngx_string("sandbox_mcp_egress_server_tools"),
      NGX_HTTP_LOC_CONF|NGX_CONF_1MORE,
      ngx_http_sandbox_mcp_egress_server_tools,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("sandbox_mcp_egress_price"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF
                        |NGX_CONF_TAKE3|NGX_CONF_TAKE4|NGX_CONF_TAKE5,
      ngx_http_sandbox_mcp_egress_price,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("sandbox_mcp_egress_announce"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_FLAG,
      ngx_http_sandbox_mcp_egress_announce,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_sandbox_mcp_egress_main_conf_t, announce),
      NULL },

      ngx_null_command
};


static ngx_http_module_t  ngx_http_sandbox_mcp_egress_module_ctx = {
    ngx_http_sandbox_mcp_egress_add_variables, /* preconfiguration */
    ngx_http_sandbox_mcp_egress_init,          /* postconfiguration */

    ngx_http_sandbox_mcp_egress_create_main_conf,
    ngx_http_sandbox_mcp_egress_init_main_conf,

    NULL,                                      /* create server configuration */
    NULL,                                      /* merge server configuration */

    ngx_http_sandbox_mcp_egress_create_loc_conf,
    ngx_http_sandbox_mcp_egress_merge_loc_conf
};


ngx_module_t  ngx_http_sandbox_mcp_egress_module = {
    NGX_MODULE_V1,
    &ngx_http_sandbox_mcp_egress_module_ctx,   /* module context */
    ngx_http_sandbox_mcp_egress_commands,      /* module directives */
    NGX_HTTP_MODULE,                           /* module type */
    NULL,                                      /* init master */
    NULL,                                      /* init module */
    NULL,                                      /* init process */
    NULL,                                      /* init thread */
    NULL,                                      /* exit thread */
    NULL,                                      /* exit process */
    NULL,                                      /* exit master */
    NGX_MODULE_V1_PADDING
};


#define NGX_HTTP_SANDBOX_MCP_VAR_CREDENTIAL  0
#define NGX_HTTP_SANDBOX_MCP_VAR_RUN_ID      1
#define NGX_HTTP_SANDBOX_MCP_VAR_TENANT      2


static ngx_http_variable_t  ngx_http_sandbox_mcp_egress_vars[] = {

    { ngx_string("sandbox_mcp_credential"), NULL,
      ngx_http_sandbox_mcp_egress_variable,
      NGX_HTTP_SANDBOX_MCP_VAR_CREDENTIAL,
      NGX_HTTP_VAR_NOCACHEABLE|NGX_HTTP_VAR_NOHASH, 0 },

    { ngx_string("sandbox_mcp_run_id"), NULL,
      ngx_http_sandbox_mcp_egress_variable,
      NGX_HTTP_SANDBOX_MCP_VAR_RUN_ID, NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("sandbox_mcp_tenant"), NULL,
      ngx_http_sandbox_mcp_egress_variable,
      NGX_HTTP_SANDBOX_MCP_VAR_TENANT, NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("sandbox_mcp_token_run"), NULL,
      ngx_http_sandbox_mcp_egress_token_run, 0, 0, 0 },

      ngx_http_null_variable
};


ngx_int_t
ngx_http_sandbox_mcp_egress_refuse(ngx_http_request_t *r, ngx_uint_t status,
    const char *type, const char *message)
{
    json_t     *body;
    ngx_int_t   rc;

    ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                  "sandbox_mcp egress: refused (%ui): %s", status, message);
    ngx_http_sandbox_mcp_metrics_refused(type);

    body = json_pack("{s:s, s:{s:s, s:s}}", "type", "error",
                     "error", "type", type, "message", message);
    if (body == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    rc = ngx_http_sandbox_mcp_send_json(r, status, body);
    json_decref(body);

    return rc;
}


static void
ngx_http_sandbox_mcp_egress_cleanup(void *data)
{
    ngx_http_sandbox_mcp_egress_ctx_t *ctx = data;

    if (ctx->cmd) {
        ngx_http_sandbox_mcp_redis_cancel(ctx->cmd);
        ctx->cmd = NULL;
    }
}


ngx_http_sandbox_mcp_egress_ctx_t *
ngx_http_sandbox_mcp_egress_request_ctx(ngx_http_request_t *r)
{
    ngx_pool_cleanup_t                 *cln;
    ngx_http_sandbox_mcp_egress_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_sandbox_mcp_egress_module);

    if (ctx || r != r->main) {
        return ctx;
    }

    /* the lookup's cleanup (ngx_http_sandbox_mcp_egress_lookup) */
    for (cln = r->pool->cleanup; cln; cln = cln->next) {
        if (cln->handler == ngx_http_sandbox_mcp_egress_cleanup) {
            return cln->data;
        }
    }

    return NULL;
}


static ngx_uint_t
ngx_http_sandbox_mcp_egress_reply_is(redisReply *v, const char *s)
{
    size_t  n;

    n = ngx_strlen(s);

    return v->type == REDIS_REPLY_STRING && v->len == n
           && ngx_strncmp(v->str, s, n) == 0;
}


/* "owner/repo" of https://host/owner/repo[.git] */
static ngx_uint_t
ngx_http_sandbox_mcp_egress_repo_matches(const char *url, size_t len,
    ngx_str_t *want)
{
    u_char  *p, *last, *path;
    size_t   n;

    if (url == NULL || len < 9) {
        return 0;
    }

    p = (u_char *) url + 8;                     /* past "https://" */
    last = (u_char *) url + len;

    path = ngx_strlchr(p, last, '/');
    if (path == NULL) {
        return 0;
    }

    path++;

    if (last > path && last[-1] == '/') {
        last--;
    }

    n = last - path;

    if (n > 4 && ngx_strncmp(last - 4, ".git", 4) == 0) {
        n -= 4;
    }

    if (want->len > 4
        && ngx_strncmp(want->data + want->len - 4, ".git", 4) == 0)
    {
        return n == want->len - 4
               && ngx_strncasecmp(path, want->data, n) == 0;
    }

    return n == want->len && ngx_strncasecmp(path, want->data, n) == 0;
}


/*
 * May the run reach the repository of the request?  Its own (the run
 * hash's `repository`) for everything; one of its session's (the JSON
 * array `repositories`) for reads only.
 */
static const char *
ngx_http_sandbox_mcp_egress_repo_allowed(
    ngx_http_sandbox_mcp_egress_ctx_t *ctx, redisReply *own, redisReply *list)
{
    size_t       i;
    json_t      *a, *v;
    ngx_uint_t   found;

    if (own->type == REDIS_REPLY_STRING
        && ngx_http_sandbox_mcp_egress_repo_matches(own->str, own->len,
                                                    &ctx->repository))
    {
        return NULL;
    }

    found = 0;

    a = (list->type == REDIS_REPLY_STRING)
        ? json_loadb(list->str, list->len, 0, NULL) : NULL;

    json_array_foreach(a, i, v) {
        if (ngx_http_sandbox_mcp_egress_repo_matches(json_string_value(v),
                                                     json_string_length(v),
                                                     &ctx->repository))
        {
            found = 1;
            break;
        }
    }

    json_decref(a);

    if (!found) {
        return "egress: this run may only reach its session's "
               "repositories";
    }

    if (ctx->kind != NGX_HTTP_SANDBOX_MCP_KIND_READ) {
        return "egress: this run may push and open pull requests only on "
               "its own repository; its session's others it may only read";
    }

    return NULL;
}


static void
ngx_http_sandbox_mcp_egress_checked(void *data, redisReply *reply)
{
    ngx_http_sandbox_mcp_egress_ctx_t *ctx = data;

    ngx_int_t                                rc;
    const char                              *msg;
    redisReply                             **e;
    ngx_connection_t                        *c;
    ngx_http_request_t                      *r;
    ngx_http_sandbox_mcp_egress_loc_conf_t  *lcf;

    r = ctx->request;
    c = r->connection;
    ctx->cmd = NULL;

    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY
        || reply->elements != 10)
    {
        rc = ngx_http_sandbox_mcp_egress_refuse(r,
                          NGX_HTTP_SERVICE_UNAVAILABLE, "api_error",
                          NGX_HTTP_SANDBOX_MCP_EGRESS_UNREAD);
        goto finalize;
    }

    e = reply->element;

    /* audit events go only to a run that exists and is the token's */
    ctx->known = e[0]->type == REDIS_REPLY_STRING
                 && e[0]->len == ctx->tenant.len
                 && ngx_strncmp(e[0]->str, ctx->tenant.data,
                                ctx->tenant.len) == 0;

    if (!ctx->known
        || !(ngx_http_sandbox_mcp_egress_reply_is(e[1], SMCP_STATUS_STARTED)
             || ngx_http_sandbox_mcp_egress_reply_is(e[1],
                                                     SMCP_STATUS_RUNNING)))
    {
        rc = ngx_http_sandbox_mcp_egress_refuse(r, NGX_HTTP_UNAUTHORIZED,
                          "authentication_error",
                          "egress: the token's run is not active (finished, "
                          "cancelled or unknown)");
        goto finalize;
    }

    lcf = ngx_http_get_module_loc_conf(r, ngx_http_sandbox_mcp_egress_module);

    msg = NULL;

    if (lcf->model) {
        msg = ngx_http_sandbox_mcp_egress_meter_check(r, ctx, e[8], e[9]);
    }

    if (msg) {
        rc = ngx_http_sandbox_mcp_egress_refuse(r,
                                        NGX_HTTP_SANDBOX_MCP_PAYMENT_REQUIRED,
                                        "billing_error", msg);
        goto finalize;
    }

    /* a pick run (run_pick.lua wrote pr_of; it has no sandbox) opens the
     * pull request of its attempt's branch */
    ctx->head = ctx->run_id;

    if (e[5]->type == REDIS_REPLY_STRING
        && smcp_valid_id(e[5]->str, e[5]->len, SMCP_RUN_ID_PREFIX))
    {
        ctx->head.data = ngx_pnalloc(r->pool, e[5]->len);
        if (ctx->head.data == NULL) {
            rc = NGX_HTTP_INTERNAL_SERVER_ERROR;
            goto finalize;
        }

        ngx_memcpy(ctx->head.data, e[5]->str, e[5]->len);
        ctx->head.len = e[5]->len;
    }

    if (lcf->deny.len) {
        rc = ngx_http_sandbox_mcp_egress_refuse(r, NGX_HTTP_FORBIDDEN,
                                                "permission_error",
                                                (char *) lcf->deny.data);
        goto finalize;
    }

    if ((lcf->methods & ~NGX_CONF_BITMASK_SET)
        && !(r->method & lcf->methods))
    {
        rc = ngx_http_sandbox_mcp_egress_refuse(r, NGX_HTTP_NOT_ALLOWED,
                          "invalid_request_error",
                          "egress: this route is read-only (GET and HEAD)");
        goto finalize;
    }

    msg = ctx->repository.len
          ? ngx_http_sandbox_mcp_egress_repo_allowed(ctx, e[2], e[4]) : NULL;

    if (msg) {
        rc = ngx_http_sandbox_mcp_egress_refuse(r, NGX_HTTP_FORBIDDEN,
                                                "permission_error", msg);
        goto finalize;
    }

    if (ctx->kind != NGX_HTTP_SANDBOX_MCP_KIND_READ
        && !ngx_http_sandbox_mcp_egress_reply_is(e[3], "1"))
    {
        rc = ngx_http_sandbox_mcp_egress_refuse(r, NGX_HTTP_FORBIDDEN,
                          "permission_error",
                          "egress: this run did not ask for a pull request "
                          "(createPr): it may read the repository but not "
                          "push or open pull requests");
        goto finalize;
    }

    /*
     * an attempt whose pull request waits for the pick (run_create.lua
     * wrote pr_pick): it pushes its branch, and only the pick run
     * (pr_of) opens its pull request
     */
    if (ctx->kind == NGX_HTTP_SANDBOX_MCP_KIND_PULL_REQUEST
        && ngx_http_sandbox_mcp_egress_reply_is(e[6], "1"))
    {
        rc = ngx_http_sandbox_mcp_egress_refuse(r, NGX_HTTP_FORBIDDEN,
                          "permission_error",
                          "egress: this run is an attempt whose pull "
                          "request waits for the pick: it may push its "
                          "branch, but its pull request is opened only "
                          "once it is picked (opencode_pick_attempt)");
        goto finalize;
    }

    ctx->draft = ngx_http_sandbox_mcp_egress_reply_is(e[7], "1");

    if (ctx->kind == NGX_HTTP_SANDBOX_MCP_KIND_PUSH
        || ctx->kind == NGX_HTTP_SANDBOX_MCP_KIND_PULL_REQUEST
        || lcf->model)
    {
        /* the body decides; ctx->done stays 0 while it is read */
        rc = ngx_http_read_client_request_body(r,
                                            ngx_http_sandbox_mcp_egress_body);

        if (rc >= NGX_HTTP_SPECIAL_RESPONSE) {
            goto finalize;
        }

        ngx_http_finalize_request(r, NGX_DONE);
        ngx_http_run_posted_requests(c);
        return;
    }

    /* granted: resume the phases where the access check stopped */
    ctx->done = 1;
    ctx->granted = 1;
    ctx->rc = NGX_OK;

    ngx_http_core_run_phases(r);
    ngx_http_run_posted_requests(c);
    return;

finalize:

    ctx->done = 1;
    ctx->rc = NGX_DONE;
    ngx_http_finalize_request(r, rc);
    ngx_http_run_posted_requests(c);
}


static ngx_int_t
ngx_http_sandbox_mcp_egress_copy(ngx_pool_t *pool, ngx_str_t *dst, json_t *s)
{
    dst->len = json_string_length(s);
    dst->data = ngx_pnalloc(pool, dst->len + 1);

    if (dst->data == NULL) {
        return NGX_ERROR;
    }

    ngx_memcpy(dst->data, json_string_value(s), dst->len);
    dst->data[dst->len] = '\0';

    return NGX_OK;
}


/*
 * The request's context from its token: NULL when the token is refused
 * (*rc: NGX_DONE, the refusal sent) or on an error (*rc: the status).
 */
static ngx_http_sandbox_mcp_egress_ctx_t *
ngx_http_sandbox_mcp_egress_ctx(ngx_http_request_t *r, ngx_int_t *rc)
{
    json_t                             *claims;
    ngx_str_t                           token;
    const char                         *msg;
    ngx_http_sandbox_mcp_egress_ctx_t  *ctx;

    *rc = ngx_http_sandbox_mcp_egress_token(r, &token);

    if (*rc == NGX_ERROR) {
        *rc = NGX_HTTP_INTERNAL_SERVER_ERROR;
        return NULL;
    }

    if (*rc == NGX_DECLINED) {
        ngx_http_finalize_request(r, ngx_http_sandbox_mcp_egress_refuse(r,
                          NGX_HTTP_UNAUTHORIZED, "authentication_error",
                          "egress: no sandbox token (send it where the API "
                          "key goes)"));
        *rc = NGX_DONE;
        return NULL;
    }

    claims = ngx_http_sandbox_mcp_egress_claims(r, &token, SMCP_SCOPE_EGRESS,
                                            &msg);

    if (claims == NULL) {
        ngx_http_finalize_request(r, ngx_http_sandbox_mcp_egress_refuse(r,
                          NGX_HTTP_UNAUTHORIZED, "authentication_error",
                          msg));
        *rc = NGX_DONE;
        return NULL;
    }

    *rc = NGX_HTTP_INTERNAL_SERVER_ERROR;

    ctx = ngx_pcalloc(r->pool, sizeof(ngx_http_sandbox_mcp_egress_ctx_t));

    if (ctx == NULL
        || ngx_http_sandbox_mcp_egress_copy(r->pool, &ctx->run_id,
                                            json_object_get(claims, "run"))
           != NGX_OK
        || ngx_http_sandbox_mcp_egress_copy(r->pool, &ctx->tenant,
                                            json_object_get(claims, "sub"))
           != NGX_OK)
    {
        json_decref(claims);
        return NULL;
    }

    json_decref(claims);

    ctx->request = r;

    return ctx;
}


/* the run's state in Redis: the reply decides (NGX_AGAIN) */
static ngx_int_t
ngx_http_sandbox_mcp_egress_lookup(ngx_http_request_t *r,
    ngx_http_sandbox_mcp_egress_ctx_t *ctx)
{
    ngx_str_t            argv[12];
    ngx_pool_cleanup_t  *cln;

    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (cln == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    cln->handler = ngx_http_sandbox_mcp_egress_cleanup;
    cln->data = ctx;

    ngx_str_set(&argv[0], "HMGET");
    ngx_str_set(&argv[2], "tenant");
    ngx_str_set(&argv[3], "status");
    ngx_str_set(&argv[4], "repository");
    ngx_str_set(&argv[5], "create_pr");
    ngx_str_set(&argv[6], "repositories");
    ngx_str_set(&argv[7], "pr_of");
    ngx_str_set(&argv[8], "pr_pick");
    ngx_str_set(&argv[9], "draft");
    ngx_str_set(&argv[10], "max_cost");
    ngx_str_set(&argv[11], "metered_cost");

    if (ngx_http_sandbox_mcp_redis_key(r->pool, &argv[1], SMCP_KEY_RUN,
                                       &ctx->run_id)
        != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ctx->cmd = ngx_http_sandbox_mcp_redis_command(
                   ngx_http_sandbox_mcp_egress_checked, ctx, 12, argv);

    if (ctx->cmd == NULL) {
        ctx->done = 1;
        ctx->rc = NGX_DONE;
        ngx_http_finalize_request(r, ngx_http_sandbox_mcp_egress_refuse(r,
                          NGX_HTTP_SERVICE_UNAVAILABLE, "api_error",
                          NGX_HTTP_SANDBOX_MCP_EGRESS_UNREAD));
        return NGX_DONE;
    }

    return NGX_AGAIN;
}


/* a refusal before Redis was asked */
static ngx_int_t
ngx_http_sandbox_mcp_egress_refused(ngx_http_request_t *r,
    ngx_http_sandbox_mcp_egress_ctx_t *ctx, ngx_uint_t status,
    const char *message)
{
    ctx->done = 1;
    ctx->rc = NGX_DONE;

    ngx_http_finalize_request(r, ngx_http_sandbox_mcp_egress_refuse(r, status,
                              (status == NGX_HTTP_FORBIDDEN)
                              ? "permission_error" : "invalid_request_error",
                              message));
    return NGX_DONE;
}


/*
 * sandbox_mcp_egress_strict_path: the path as the sandbox sent it, every
 * segment plain (smcp_path.h); NULL, or the refusal
 */
static const char *
ngx_http_sandbox_mcp_egress_path(ngx_http_request_t *r)
{
    u_char      *msg, *last;
    const char  *why;

    why = smcp_path_check(r->unparsed_uri.data, r->unparsed_uri.len);
    if (why == NULL) {
        return NULL;
    }

    msg = ngx_pnalloc(r->pool, NGX_HTTP_SANDBOX_MCP_MESSAGE_MAX);
    if (msg == NULL) {
        return "egress: path refused";
    }

    last = ngx_snprintf(msg, NGX_HTTP_SANDBOX_MCP_MESSAGE_MAX - 1,
                        "egress: path refused: %s", why);
    *last = '\0';

    return (const char *) msg;
}


static ngx_int_t
ngx_http_sandbox_mcp_egress_handler(ngx_http_request_t *r)
{
    ngx_int_t                                rc;
    ngx_uint_t                               status;
    const char                              *msg;
    ngx_http_sandbox_mcp_egress_ctx_t       *ctx;
    ngx_http_sandbox_mcp_egress_loc_conf_t  *lcf;

    lcf = ngx_http_get_module_loc_conf(r, ngx_http_sandbox_mcp_egress_module);

    if (lcf->route.len == 0) {
        return NGX_DECLINED;
    }

    ctx = ngx_http_get_module_ctx(r, ngx_http_sandbox_mcp_egress_module);

    if (ctx) {
        /* re-entered by run_phases: the Redis answer decides */
        return ctx->done ? ctx->rc : NGX_AGAIN;
    }

    ctx = ngx_http_sandbox_mcp_egress_ctx(r, &rc);
    if (ctx == NULL) {
        return rc;
    }

    ngx_http_set_ctx(r, ctx, ngx_http_sandbox_mcp_egress_module);
    ctx->lcf = lcf;

    if (ngx_http_sandbox_mcp_egress_strip(r) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (lcf->repository
        && ngx_http_complex_value(r, lcf->repository, &ctx->repository)
           != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (lcf->repository && ctx->repository.len == 0) {
        return ngx_http_sandbox_mcp_egress_refused(r, ctx, NGX_HTTP_FORBIDDEN,
                                   "egress: no repository in the request "
                                   "path");
    }

    if (lcf->strict_path) {
        msg = ngx_http_sandbox_mcp_egress_path(r);
        if (msg) {
            return ngx_http_sandbox_mcp_egress_refused(r, ctx,
                                                       NGX_HTTP_BAD_REQUEST,
                                                       msg);
        }
    }

    msg = ngx_http_sandbox_mcp_egress_classify(r, lcf->push, &ctx->kind,
                                               &status);
    if (msg) {
        return ngx_http_sandbox_mcp_egress_refused(r, ctx, status, msg);
    }

    return ngx_http_sandbox_mcp_egress_lookup(r, ctx);
}


static ngx_int_t
ngx_http_sandbox_mcp_egress_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    ngx_str_t                               *s;
    ngx_http_sandbox_mcp_egress_ctx_t       *ctx;
    ngx_http_sandbox_mcp_egress_loc_conf_t  *lcf;

    ctx = ngx_http_get_module_ctx(r, ngx_http_sandbox_mcp_egress_module);

    /* nothing before the run was found live */
    if (ctx == NULL || !ctx->granted) {
        v->not_found = 1;
        return NGX_OK;
    }

    switch (data) {

    case NGX_HTTP_SANDBOX_MCP_VAR_CREDENTIAL:
        lcf = ngx_http_get_module_loc_conf(r,
                                           ngx_http_sandbox_mcp_egress_module);
        s = &lcf->credential;
        break;

    case NGX_HTTP_SANDBOX_MCP_VAR_RUN_ID:
        s = &ctx->run_id;
        break;

    default: /* NGX_HTTP_SANDBOX_MCP_VAR_TENANT */
        s = &ctx->tenant;
        break;
    }

    v->data = s->data;
    v->len = s->len;
    v->valid = 1;
    v->no_cacheable = 1;
    v->not_found = 0;

    return NGX_OK;
}


static ngx_int_t
ngx_http_sandbox_mcp_egress_add_variables(ngx_conf_t *cf)
{
    return ngx_http_sandbox_mcp_add_variables(cf,
                                              ngx_http_sandbox_mcp_egress_vars);
}


static ngx_int_t
ngx_http_sandbox_mcp_egress_init(ngx_conf_t *cf)
{
    ngx_http_handler_pt        *h;
    ngx_http_core_main_conf_t  *cmcf;

    cmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_core_module);

    h = ngx_array_push(&cmcf->phases[NGX_HTTP_ACCESS_PHASE].handlers);
    if (h == NULL) {
        return NGX_ERROR;
    }

    *h = ngx_http_sandbox_mcp_egress_handler;

    h = ngx_array_push(&cmcf->phases[NGX_HTTP_LOG_PHASE].handlers);
    if (h == NULL) {
        return NGX_ERROR;
    }

    *h = ngx_http_sandbox_mcp_egress_log;

    return NGX_OK;
}


static void *
ngx_http_sandbox_mcp_egress_create_main_conf(ngx_conf_t *cf)
{
    ngx_http_sandbox_mcp_egress_main_conf_t  *emcf;

    emcf = ngx_pcalloc(cf->pool,
                       sizeof(ngx_http_sandbox_mcp_egress_main_conf_t));
    if (emcf == NULL) {
        return NULL;
    }

    /*
     * set by ngx_pcalloc():
     *
     *     emcf->routes = NULL;
     */

    emcf->announce = NGX_CONF_UNSET;

    return emcf;
}


static char *
ngx_http_sandbox_mcp_egress_init_main_conf(ngx_conf_t *cf, void *conf)
{
    ngx_http_sandbox_mcp_egress_main_conf_t *emcf = conf;

    ngx_conf_init_value(emcf->announce, 0);

    return NGX_CONF_OK;
}


static void *
ngx_http_sandbox_mcp_egress_create_loc_conf(ngx_conf_t *cf)
{
    ngx_http_sandbox_mcp_egress_loc_conf_t  *conf;

    conf = ngx_pcalloc(cf->pool,
                       sizeof(ngx_http_sandbox_mcp_egress_loc_conf_t));
    if (conf == NULL) {
        return NULL;
    }

    /*
     * set by ngx_pcalloc():
     *
     *     conf->route = { 0, NULL };
     *     conf->credential = { 0, NULL };
     *     conf->deny = { 0, NULL };
     *     conf->methods = 0;
     */

    conf->strict_path = NGX_CONF_UNSET;
    conf->model = NGX_CONF_UNSET;
    conf->inbox = NGX_CONF_UNSET;
    conf->server_tools = NGX_CONF_UNSET_PTR;
    conf->prices = NGX_CONF_UNSET_PTR;

    conf->repository = NGX_CONF_UNSET_PTR;
    conf->push = NGX_CONF_UNSET_UINT;

    return conf;
}


static char *
ngx_http_sandbox_mcp_egress_merge_loc_conf(ngx_conf_t *cf, void *parent,
    void *child)
{
    ngx_http_sandbox_mcp_egress_loc_conf_t *prev = parent;
    ngx_http_sandbox_mcp_egress_loc_conf_t *conf = child;

    ngx_conf_merge_str_value(conf->route, prev->route, "");
    ngx_conf_merge_str_value(conf->credential, prev->credential, "");
    ngx_conf_merge_ptr_value(conf->repository, prev->repository, NULL);
    ngx_conf_merge_uint_value(conf->push, prev->push,
                              NGX_HTTP_SANDBOX_MCP_PUSH_OFF);
    ngx_conf_merge_str_value(conf->deny, prev->deny, "");
    ngx_conf_merge_bitmask_value(conf->methods, prev->methods,
                                 NGX_CONF_BITMASK_SET);
    ngx_conf_merge_value(conf->strict_path, prev->strict_path, 0);
    ngx_conf_merge_value(conf->model, prev->model, 0);
    ngx_conf_merge_ptr_value(conf->server_tools, prev->server_tools, NULL);
    ngx_conf_merge_value(conf->inbox, prev->inbox, 0);
    ngx_conf_merge_ptr_value(conf->prices, prev->prices, NULL);

    return NGX_CONF_OK;
}


static char *
ngx_http_sandbox_mcp_egress(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_str_t  *value;

    value = cf->args->elts;

    if (value[1].len == sizeof(NGX_HTTP_SANDBOX_MCP_INBOX_ROUTE) - 1
        && ngx_strncmp(value[1].data, NGX_HTTP_SANDBOX_MCP_INBOX_ROUTE,
                       value[1].len)
           == 0)
    {
        return "cannot name a route \"" NGX_HTTP_SANDBOX_MCP_INBOX_ROUTE
               "\": it is sandbox_mcp_egress_inbox's";
    }

    return ngx_http_sandbox_mcp_egress_set_route(cf, conf, &value[1]);
}


char *
ngx_http_sandbox_mcp_egress_set_route(ngx_conf_t *cf,
    ngx_http_sandbox_mcp_egress_loc_conf_t *lcf, ngx_str_t *name)
{
    u_char                            *p;
    ngx_http_sandbox_mcp_main_conf_t  *mcf;

    if (lcf->route.len) {
        return "is duplicate";
    }

    for (p = name->data; p < name->data + name->len; p++) {
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z')
              || (*p >= '0' && *p <= '9') || *p == '-' || *p == '_'
              || *p == '.'))
        {
            return "needs a route name of letters, digits, \"-_.\"";
        }
    }

    lcf->route = *name;

    /* the instance's routes, for sandbox_mcp_egress_announce */
    if (ngx_http_sandbox_mcp_egress_announce_route(cf, &lcf->route)
        != NGX_OK)
    {
        return NGX_CONF_ERROR;
    }

    /* the workers need their Redis connections */
    mcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_sandbox_mcp_module);
    mcf->enabled = 1;

    return NGX_CONF_OK;
}
