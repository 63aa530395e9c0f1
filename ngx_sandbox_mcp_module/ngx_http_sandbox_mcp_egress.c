/*
 * The egress proxy: an access-phase check in front of nginx's own proxy
 * module.  A sandbox holds only a token scoped to its run; here the token
 * is verified, the run is checked to be live in Redis, the token headers
 * are stripped, and the real credential of the route is offered through
 * $sandbox_mcp_credential for proxy_set_header.  Every request is recorded
 * in the run's event stream at the log phase.
 */

#include "ngx_http_sandbox_mcp_module.h"
#include "ngx_http_sandbox_mcp_redis.h"

#include "smcp_jwt.h"
#include "smcp_pktline.h"


typedef enum {
    NGX_HTTP_SANDBOX_MCP_CRED_RAW = 0,
    NGX_HTTP_SANDBOX_MCP_CRED_BEARER,
    NGX_HTTP_SANDBOX_MCP_CRED_BASIC,
    NGX_HTTP_SANDBOX_MCP_CRED_TOKEN
} ngx_http_sandbox_mcp_cred_format_e;


/* sandbox_mcp_egress_push: what writes a location carries */
#define NGX_HTTP_SANDBOX_MCP_PUSH_OFF           0
#define NGX_HTTP_SANDBOX_MCP_PUSH_GIT           1
#define NGX_HTTP_SANDBOX_MCP_PUSH_PULL_REQUEST  2

/* what a request is, for the write rules */
#define NGX_HTTP_SANDBOX_MCP_KIND_READ          0
#define NGX_HTTP_SANDBOX_MCP_KIND_ADVERTISE     1   /* receive-pack refs */
#define NGX_HTTP_SANDBOX_MCP_KIND_PUSH          2   /* git-receive-pack */
#define NGX_HTTP_SANDBOX_MCP_KIND_PULL_REQUEST  3   /* POST .../pulls */

/* the command list of a push is read from the first this many bytes */
#define NGX_HTTP_SANDBOX_MCP_PUSH_HEAD          (64 * 1024)
#define NGX_HTTP_SANDBOX_MCP_PULL_REQUEST_MAX   (1024 * 1024)

/* the one branch a run may write: opencode/<runId> */
#define NGX_HTTP_SANDBOX_MCP_BRANCH_PREFIX      "opencode/"


typedef struct {
    ngx_str_t                   route;
    ngx_str_t                   credential;     /* formatted header value */
    ngx_http_complex_value_t   *repository;     /* expected owner/repo */
    ngx_uint_t                  push;
    ngx_str_t                   deny;           /* refusal of the route */
} ngx_http_sandbox_mcp_egress_loc_conf_t;


typedef struct {
    ngx_http_request_t                 *request;
    ngx_str_t                           run_id;
    ngx_str_t                           tenant;
    ngx_str_t                           repository;     /* expected */
    ngx_http_sandbox_mcp_redis_cmd_t   *cmd;
    ngx_int_t                           rc;
    ngx_uint_t                          status;         /* refusal */
    ngx_uint_t                          kind;
    unsigned                            done:1;
    unsigned                            known:1;        /* run of tenant */
    unsigned                            granted:1;
} ngx_http_sandbox_mcp_egress_ctx_t;


static ngx_int_t ngx_http_sandbox_mcp_egress_add_variables(ngx_conf_t *cf);
static ngx_int_t ngx_http_sandbox_mcp_egress_init(ngx_conf_t *cf);
static void *ngx_http_sandbox_mcp_egress_create_loc_conf(ngx_conf_t *cf);
static char *ngx_http_sandbox_mcp_egress_merge_loc_conf(ngx_conf_t *cf,
    void *parent, void *child);
static char *ngx_http_sandbox_mcp_egress(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_sandbox_mcp_egress_credential(ngx_conf_t *cf,
    ngx_command_t *cmd, void *conf);
static ngx_int_t ngx_http_sandbox_mcp_egress_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data);
static ngx_int_t ngx_http_sandbox_mcp_egress_token_run(
    ngx_http_request_t *r, ngx_http_variable_value_t *v, uintptr_t data);
static void ngx_http_sandbox_mcp_egress_body(ngx_http_request_t *r);


static ngx_conf_enum_t  ngx_http_sandbox_mcp_egress_push_modes[] = {
    { ngx_string("off"), NGX_HTTP_SANDBOX_MCP_PUSH_OFF },
    { ngx_string("git"), NGX_HTTP_SANDBOX_MCP_PUSH_GIT },
    { ngx_string("pull_request"), NGX_HTTP_SANDBOX_MCP_PUSH_PULL_REQUEST },
    { ngx_null_string, 0 }
};


static ngx_command_t  ngx_http_sandbox_mcp_egress_commands[] = {

    { ngx_string("sandbox_mcp_egress"),
      NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_sandbox_mcp_egress,
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

      ngx_null_command
};


static ngx_http_module_t  ngx_http_sandbox_mcp_egress_module_ctx = {
    ngx_http_sandbox_mcp_egress_add_variables, /* preconfiguration */
    ngx_http_sandbox_mcp_egress_init,          /* postconfiguration */

    NULL,                                      /* create main configuration */
    NULL,                                      /* init main configuration */

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


/*
 * Where sandbox SDKs put their API key: the run token arrives in one of
 * these, and every one of them is removed before proxying.
 */
static ngx_str_t  ngx_http_sandbox_mcp_token_headers[] = {
    ngx_string("authorization"),            /* Bearer, Basic, token */
    ngx_string("x-api-key"),                /* Anthropic */
    ngx_string("api-key"),                  /* Azure OpenAI */
    ngx_string("x-goog-api-key"),           /* Google Gemini */
    ngx_string("cf-aig-authorization"),     /* Cloudflare AI Gateway */
    ngx_null_string
};


/* responses the agent can read: Anthropic's error shape, which OpenAI
 * clients also parse (error.message) */

static ngx_int_t
ngx_http_sandbox_mcp_egress_refuse(ngx_http_request_t *r, ngx_uint_t status,
    const char *type, const char *message)
{
    json_t     *body;
    ngx_int_t   rc;

    ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                  "sandbox_mcp egress: refused (%ui): %s", status, message);

    body = json_pack("{s:s, s:{s:s, s:s}}", "type", "error",
                     "error", "type", type, "message", message);
    if (body == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    rc = ngx_http_sandbox_mcp_send_json(r, status, body);
    json_decref(body);

    return rc;
}


/* the run token: the first JWT-shaped value in the known headers */
static ngx_int_t
ngx_http_sandbox_mcp_egress_token(ngx_http_request_t *r, ngx_str_t *token)
{
    u_char           *p, *last, *colon;
    size_t            n;
    ngx_str_t        *name, v;
    ngx_uint_t        i;
    ngx_list_part_t  *part;
    ngx_table_elt_t  *h;
    u_char            buf[SMCP_JWT_MAX_LEN];

    part = &r->headers_in.headers.part;
    h = part->elts;

    for (i = 0; /* void */ ; i++) {

        if (i >= part->nelts) {
            if (part->next == NULL) {
                return NGX_DECLINED;
            }

            part = part->next;
            h = part->elts;
            i = 0;
        }

        for (name = ngx_http_sandbox_mcp_token_headers; name->len; name++) {
            if (h[i].key.len == name->len
                && ngx_strncasecmp(h[i].key.data, name->data, name->len)
                   == 0)
            {
                break;
            }
        }

        if (name->len == 0) {
            continue;
        }

        v = h[i].value;
        p = v.data;
        last = p + v.len;

        if (v.len > 7 && ngx_strncasecmp(p, (u_char *) "Bearer ", 7) == 0) {
            p += 7;

        } else if (v.len > 6 && ngx_strncasecmp(p, (u_char *) "token ", 6)
                                == 0)
        {
            p += 6;

        } else if (v.len > 6 && ngx_strncasecmp(p, (u_char *) "Basic ", 6)
                                == 0)
        {
            /* git: "x-access-token:<token>" (the password carries it) */
            p += 6;

            if ((size_t) (last - p) > sizeof(buf) * 3 / 4
                || smcp_b64url_decode(buf, &n, (char *) p, last - p)
                   != SMCP_OK)
            {
                /* standard base64 may use + and /: decode with nginx */
                ngx_str_t  src, dst;

                src.data = p;
                src.len = last - p;
                dst.data = buf;

                if (src.len > sizeof(buf) * 3 / 4
                    || ngx_decode_base64(&dst, &src) != NGX_OK)
                {
                    continue;
                }

                n = dst.len;
            }

            colon = ngx_strlchr(buf, buf + n, ':');
            if (colon == NULL) {
                continue;
            }

            token->len = buf + n - colon - 1;
            token->data = ngx_pnalloc(r->pool, token->len);
            if (token->data == NULL) {
                return NGX_ERROR;
            }

            ngx_memcpy(token->data, colon + 1, token->len);
            return NGX_OK;
        }

        while (p < last && *p == ' ') {
            p++;
        }

        if (p < last) {
            token->data = p;
            token->len = last - p;
            return NGX_OK;
        }
    }
}


/* no token header reaches the upstream: rebuild the list without them */
static ngx_int_t
ngx_http_sandbox_mcp_egress_strip(ngx_http_request_t *r)
{
    ngx_str_t        *name;
    ngx_uint_t        i, n;
    ngx_list_t        headers;
    ngx_list_part_t  *part;
    ngx_table_elt_t  *h, *nh;

    n = 0;

    for (part = &r->headers_in.headers.part; part; part = part->next) {
        n += part->nelts;
    }

    if (ngx_list_init(&headers, r->pool, n ? n : 1, sizeof(ngx_table_elt_t))
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    for (part = &r->headers_in.headers.part; part; part = part->next) {
        h = part->elts;

        for (i = 0; i < part->nelts; i++) {

            for (name = ngx_http_sandbox_mcp_token_headers; name->len; name++)
            {
                if (h[i].key.len == name->len
                    && ngx_strncasecmp(h[i].key.data, name->data, name->len)
                       == 0)
                {
                    break;
                }
            }

            if (name->len) {
                continue;
            }

            nh = ngx_list_push(&headers);
            if (nh == NULL) {
                return NGX_ERROR;
            }

            *nh = h[i];
        }
    }

    r->headers_in.headers = headers;
    r->headers_in.authorization = NULL;

    return NGX_OK;
}


/*
 * The claims of a valid egress token: signature, expiry, scope "egress"
 * and a run id; NULL and *refusal otherwise.
 */
static json_t *
ngx_http_sandbox_mcp_egress_claims(ngx_http_request_t *r, ngx_str_t *token,
    const char **refusal)
{
    char                               err[128];
    json_t                            *claims, *run, *scope;
    ngx_http_sandbox_mcp_main_conf_t  *mcf;

    mcf = ngx_http_get_module_main_conf(r, ngx_http_sandbox_mcp_module);

    if (mcf->secret == NULL
        || smcp_jwt_verify(mcf->secret, mcf->secret_len, (char *) token->data,
                           token->len, ngx_time(), &claims, err, sizeof(err))
           != SMCP_OK)
    {
        *refusal = "egress: sandbox token refused";
        return NULL;
    }

    scope = json_object_get(claims, "scope");
    run = json_object_get(claims, "run");

    if (!json_is_string(scope)
        || ngx_strcmp(json_string_value(scope), SMCP_SCOPE_EGRESS) != 0
        || !json_is_string(run)
        || !smcp_valid_id(json_string_value(run), json_string_length(run),
                          SMCP_RUN_ID_PREFIX))
    {
        json_decref(claims);
        *refusal = "egress: not a sandbox token";
        return NULL;
    }

    return claims;
}


/*
 * $sandbox_mcp_token_run: the run of a valid egress token, checked without
 * Redis, so that limit_req (before the access phase) can key on it; not
 * found for anything else.  Cached for the request.
 */
static ngx_int_t
ngx_http_sandbox_mcp_egress_token_run(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    json_t      *claims, *run;
    ngx_str_t    token;
    const char  *refusal;

    v->not_found = 1;

    if (ngx_http_sandbox_mcp_egress_token(r, &token) != NGX_OK) {
        return NGX_OK;
    }

    claims = ngx_http_sandbox_mcp_egress_claims(r, &token, &refusal);
    if (claims == NULL) {
        return NGX_OK;
    }

    run = json_object_get(claims, "run");

    v->len = json_string_length(run);
    v->data = ngx_pnalloc(r->pool, v->len);

    if (v->data == NULL) {
        json_decref(claims);
        return NGX_ERROR;
    }

    ngx_memcpy(v->data, json_string_value(run), v->len);
    json_decref(claims);

    v->valid = 1;
    v->no_cacheable = 0;
    v->not_found = 0;

    return NGX_OK;
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
ngx_http_sandbox_mcp_egress_repo_matches(redisReply *url, ngx_str_t *want)
{
    u_char  *p, *last, *path;
    size_t   n;

    if (url->type != REDIS_REPLY_STRING || url->len < 9) {
        return 0;
    }

    p = (u_char *) url->str + 8;                /* past "https://" */
    last = (u_char *) url->str + url->len;

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


/* no Content-Encoding, or identity: the body is what it says */
static ngx_uint_t
ngx_http_sandbox_mcp_egress_identity(ngx_http_request_t *r)
{
    u_char           *p, *last;
    ngx_uint_t        i;
    ngx_list_part_t  *part;
    ngx_table_elt_t  *h;

    for (part = &r->headers_in.headers.part; part; part = part->next) {
        h = part->elts;

        for (i = 0; i < part->nelts; i++) {

            if (h[i].key.len != sizeof("Content-Encoding") - 1
                || ngx_strncasecmp(h[i].key.data,
                                   (u_char *) "Content-Encoding",
                                   sizeof("Content-Encoding") - 1)
                   != 0)
            {
                continue;
            }

            p = h[i].value.data;
            last = p + h[i].value.len;

            while (p < last && (*p == ' ' || *p == '\t')) {
                p++;
            }

            while (last > p && (last[-1] == ' ' || last[-1] == '\t')) {
                last--;
            }

            if (last - p != sizeof("identity") - 1
                || ngx_strncasecmp(p, (u_char *) "identity",
                                   sizeof("identity") - 1)
                   != 0)
            {
                return 0;
            }
        }
    }

    return 1;
}


/*
 * What a request is, for the write rules of its location: git smart HTTP
 * (info/refs of a service, upload-pack, receive-pack) or the pull request
 * API.  NULL, or the refusal (*status) of a request no route carries.
 */
static const char *
ngx_http_sandbox_mcp_egress_classify(ngx_http_request_t *r,
    ngx_uint_t push, ngx_uint_t *kind, ngx_uint_t *status)
{
    ngx_str_t  *uri;

    *kind = NGX_HTTP_SANDBOX_MCP_KIND_READ;
    *status = NGX_HTTP_FORBIDDEN;
    uri = &r->uri;

#define ngx_http_sandbox_mcp_ends_with(s)                                     \
    (uri->len >= sizeof(s) - 1                                                \
     && ngx_strncmp(uri->data + uri->len - (sizeof(s) - 1), s,                \
                    sizeof(s) - 1) == 0)

#define ngx_http_sandbox_mcp_args_are(s)                                      \
    (r->args.len == sizeof(s) - 1                                             \
     && ngx_strncmp(r->args.data, s, sizeof(s) - 1) == 0)

    switch (push) {

    case NGX_HTTP_SANDBOX_MCP_PUSH_GIT:

        if (ngx_http_sandbox_mcp_ends_with("/info/refs")) {

            if (ngx_http_sandbox_mcp_args_are("service=git-upload-pack")) {
                return NULL;
            }

            if (ngx_http_sandbox_mcp_args_are("service=git-receive-pack")) {
                *kind = NGX_HTTP_SANDBOX_MCP_KIND_ADVERTISE;
                return NULL;
            }

            return "egress: info/refs is served for ?service=git-upload-pack "
                   "or ?service=git-receive-pack only (smart HTTP)";
        }

        if (ngx_http_sandbox_mcp_ends_with("/git-upload-pack")) {
            return NULL;
        }

        if (ngx_http_sandbox_mcp_ends_with("/git-receive-pack")) {
            *kind = NGX_HTTP_SANDBOX_MCP_KIND_PUSH;
            break;
        }

        return "egress: only git smart HTTP is allowed";

    case NGX_HTTP_SANDBOX_MCP_PUSH_PULL_REQUEST:

        if (r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD)) {
            return NULL;
        }

        *kind = NGX_HTTP_SANDBOX_MCP_KIND_PULL_REQUEST;
        break;

    default:
        return NULL;
    }

#undef ngx_http_sandbox_mcp_ends_with
#undef ngx_http_sandbox_mcp_args_are

    if (r->method != NGX_HTTP_POST) {
        *status = NGX_HTTP_NOT_ALLOWED;
        return "egress: method not allowed here";
    }

    /* the body is checked as sent: no other coding than identity */
    if (!ngx_http_sandbox_mcp_egress_identity(r)) {
        *status = NGX_HTTP_UNSUPPORTED_MEDIA_TYPE;
        return "egress: pushes and pull requests are accepted without "
               "Content-Encoding only";
    }

    return NULL;
}


static void
ngx_http_sandbox_mcp_egress_checked(void *data, redisReply *reply)
{
    ngx_http_sandbox_mcp_egress_ctx_t *ctx = data;

    ngx_int_t                                rc;
    redisReply                             **e;
    ngx_connection_t                        *c;
    ngx_http_request_t                      *r;
    ngx_http_sandbox_mcp_egress_loc_conf_t  *lcf;

    r = ctx->request;
    c = r->connection;
    ctx->cmd = NULL;

    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY
        || reply->elements != 4)
    {
        rc = ngx_http_sandbox_mcp_egress_refuse(r,
                          NGX_HTTP_SERVICE_UNAVAILABLE, "api_error",
                          "egress: the run's state cannot be read right now; "
                          "retry shortly");
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

    if (lcf->deny.len) {
        rc = ngx_http_sandbox_mcp_egress_refuse(r, NGX_HTTP_FORBIDDEN,
                                                "permission_error",
                                                (char *) lcf->deny.data);
        goto finalize;
    }

    if (ctx->repository.len
        && !ngx_http_sandbox_mcp_egress_repo_matches(e[2], &ctx->repository))
    {
        rc = ngx_http_sandbox_mcp_egress_refuse(r, NGX_HTTP_FORBIDDEN,
                          "permission_error",
                          "egress: this run may only reach its own "
                          "repository");
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

    if (ctx->kind == NGX_HTTP_SANDBOX_MCP_KIND_PUSH
        || ctx->kind == NGX_HTTP_SANDBOX_MCP_KIND_PULL_REQUEST)
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


/*
 * The first bytes of the request body, in memory or in its temporary
 * file: up to size into buf.  Returns the bytes copied (*total: the whole
 * body's length) or NGX_ERROR.
 */
static ssize_t
ngx_http_sandbox_mcp_egress_body_head(ngx_http_request_t *r, u_char *buf,
    size_t size, off_t *total)
{
    off_t         len;
    size_t        n, want;
    ssize_t       got;
    ngx_buf_t    *b;
    ngx_chain_t  *cl;

    n = 0;
    *total = 0;

    if (r->request_body == NULL) {
        return 0;
    }

    for (cl = r->request_body->bufs; cl; cl = cl->next) {
        b = cl->buf;
        len = b->in_file ? b->file_last - b->file_pos : b->last - b->pos;
        *total += len;

        want = (size_t) ngx_min((off_t) (size - n), len);

        if (want == 0) {
            continue;
        }

        if (b->in_file) {
            got = ngx_read_file(b->file, buf + n, want, b->file_pos);
            if (got != (ssize_t) want) {
                return NGX_ERROR;
            }

        } else {
            ngx_memcpy(buf + n, b->pos, want);
        }

        n += want;
    }

    return n;
}


/* the command list of a push: only the run's branch, never a delete */
static ngx_uint_t
ngx_http_sandbox_mcp_egress_check_push(ngx_http_request_t *r,
    ngx_http_sandbox_mcp_egress_ctx_t *ctx, char *err, size_t errlen)
{
    u_char    *buf, *p;
    off_t      total;
    ssize_t    n;
    unsigned   ncommands;
    ngx_int_t  rc;
    u_char     ref[sizeof("refs/heads/" NGX_HTTP_SANDBOX_MCP_BRANCH_PREFIX)
                   + SMCP_ID_LEN];
    char       why[256];

    buf = ngx_pnalloc(r->pool, NGX_HTTP_SANDBOX_MCP_PUSH_HEAD);
    if (buf == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    n = ngx_http_sandbox_mcp_egress_body_head(r, buf,
                                           NGX_HTTP_SANDBOX_MCP_PUSH_HEAD,
                                           &total);
    if (n == NGX_ERROR) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    p = ngx_cpymem(ref, "refs/heads/" NGX_HTTP_SANDBOX_MCP_BRANCH_PREFIX,
                   sizeof("refs/heads/" NGX_HTTP_SANDBOX_MCP_BRANCH_PREFIX)
                   - 1);
    p = ngx_cpymem(p, ctx->run_id.data, ctx->run_id.len);

    rc = smcp_pkt_check_push(buf, n, (char *) ref, p - ref, &ncommands,
                             why, sizeof(why));

    if (rc == SMCP_OK) {
        return NGX_OK;
    }

    if (rc == SMCP_PKT_MORE) {
        ngx_snprintf((u_char *) err, errlen, "egress: push refused: %s%Z",
                     total > n ? "its command list is too long"
                               : "malformed push: the command list does not "
                                 "end");
        return NGX_HTTP_BAD_REQUEST;
    }

    ngx_snprintf((u_char *) err, errlen, "egress: push refused: %s%Z", why);

    return (rc == SMCP_PKT_BAD) ? NGX_HTTP_BAD_REQUEST : NGX_HTTP_FORBIDDEN;
}


/*
 * A pull request: its head must be the run's branch, "opencode/<runId>"
 * or "<owner>:opencode/<runId>" with the repository's owner.
 */
static ngx_uint_t
ngx_http_sandbox_mcp_egress_check_pull(ngx_http_request_t *r,
    ngx_http_sandbox_mcp_egress_ctx_t *ctx, char *err, size_t errlen)
{
    u_char        *buf, *slash;
    off_t          total;
    size_t         len, olen, blen;
    json_t        *body, *head;
    ssize_t        n;
    const char    *h, *msg;
    json_error_t   jerr;

    buf = ngx_pnalloc(r->pool, NGX_HTTP_SANDBOX_MCP_PULL_REQUEST_MAX);
    if (buf == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    n = ngx_http_sandbox_mcp_egress_body_head(r, buf,
                                       NGX_HTTP_SANDBOX_MCP_PULL_REQUEST_MAX,
                                       &total);
    if (n == NGX_ERROR) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (total > n) {
        ngx_snprintf((u_char *) err, errlen, "egress: a pull request body "
                     "is limited to %uz bytes%Z",
                     (size_t) NGX_HTTP_SANDBOX_MCP_PULL_REQUEST_MAX);
        return NGX_HTTP_REQUEST_ENTITY_TOO_LARGE;
    }

    body = json_loadb((char *) buf, n, JSON_REJECT_DUPLICATES, &jerr);

    if (!json_is_object(body)) {
        json_decref(body);
        ngx_snprintf((u_char *) err, errlen, "egress: a pull request body "
                     "must be one JSON object (without duplicate keys)%Z");
        return NGX_HTTP_BAD_REQUEST;
    }

    head = json_object_get(body, "head");
    h = json_string_value(head);
    len = json_string_length(head);

    blen = sizeof(NGX_HTTP_SANDBOX_MCP_BRANCH_PREFIX) - 1 + ctx->run_id.len;
    slash = ngx_strlchr(ctx->repository.data,
                        ctx->repository.data + ctx->repository.len, '/');
    olen = slash ? (size_t) (slash - ctx->repository.data) : 0;

    msg = NULL;

    if (json_object_get(body, "head_repo")) {
        msg = "egress: head_repo is refused: a pull request's head is the "
              "run's branch in the run's repository";

    } else if (h == NULL
               || !((len == blen)
                    || (olen && len == olen + 1 + blen && h[olen] == ':'
                        && ngx_strncasecmp((u_char *) h,
                                           ctx->repository.data, olen)
                           == 0)))
    {
        msg = "";

    } else {
        h += len - blen;

        if (ngx_strncmp(h, NGX_HTTP_SANDBOX_MCP_BRANCH_PREFIX,
                        sizeof(NGX_HTTP_SANDBOX_MCP_BRANCH_PREFIX) - 1)
            != 0
            || ngx_strncmp(h + sizeof(NGX_HTTP_SANDBOX_MCP_BRANCH_PREFIX) - 1,
                           ctx->run_id.data, ctx->run_id.len)
               != 0)
        {
            msg = "";
        }
    }

    json_decref(body);

    if (msg == NULL) {
        return NGX_OK;
    }

    if (*msg) {
        ngx_snprintf((u_char *) err, errlen, "%s%Z", msg);

    } else {
        ngx_snprintf((u_char *) err, errlen, "egress: a pull request's head "
                     "must be the run's branch "
                     NGX_HTTP_SANDBOX_MCP_BRANCH_PREFIX "%V%Z", &ctx->run_id);
    }

    return NGX_HTTP_FORBIDDEN;
}


/* the body of a push or a pull request is read: it decides */
static void
ngx_http_sandbox_mcp_egress_body(ngx_http_request_t *r)
{
    char                                err[512];
    const char                         *type;
    ngx_int_t                           rc;
    ngx_uint_t                          status;
    ngx_http_sandbox_mcp_egress_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_sandbox_mcp_egress_module);

    if (ctx->kind == NGX_HTTP_SANDBOX_MCP_KIND_PUSH) {
        status = ngx_http_sandbox_mcp_egress_check_push(r, ctx, err,
                                                         sizeof(err));
    } else {
        status = ngx_http_sandbox_mcp_egress_check_pull(r, ctx, err,
                                                         sizeof(err));
    }

    ctx->done = 1;

    if (status == NGX_OK) {
        ctx->granted = 1;
        ctx->rc = NGX_OK;

        r->write_event_handler = ngx_http_core_run_phases;
        ngx_http_core_run_phases(r);
        return;
    }

    ctx->rc = NGX_DONE;

    if (status == NGX_HTTP_INTERNAL_SERVER_ERROR) {
        ngx_http_finalize_request(r, status);
        return;
    }

    type = (status == NGX_HTTP_FORBIDDEN) ? "permission_error"
                                          : "invalid_request_error";

    rc = ngx_http_sandbox_mcp_egress_refuse(r, status, type, err);
    ngx_http_finalize_request(r, rc);
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


static ngx_int_t
ngx_http_sandbox_mcp_egress_handler(ngx_http_request_t *r)
{
    json_t                                  *claims, *run;
    ngx_int_t                                rc;
    ngx_str_t                                token, argv[6];
    ngx_uint_t                               status;
    const char                              *msg;
    ngx_pool_cleanup_t                      *cln;
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

    rc = ngx_http_sandbox_mcp_egress_token(r, &token);

    if (rc == NGX_ERROR) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (rc == NGX_DECLINED) {
        rc = ngx_http_sandbox_mcp_egress_refuse(r, NGX_HTTP_UNAUTHORIZED,
                          "authentication_error",
                          "egress: no sandbox token (send it where the API "
                          "key goes)");
        ngx_http_finalize_request(r, rc);
        return NGX_DONE;
    }

    claims = ngx_http_sandbox_mcp_egress_claims(r, &token, &msg);

    if (claims == NULL) {
        rc = ngx_http_sandbox_mcp_egress_refuse(r, NGX_HTTP_UNAUTHORIZED,
                                                "authentication_error", msg);
        ngx_http_finalize_request(r, rc);
        return NGX_DONE;
    }

    run = json_object_get(claims, "run");

    ctx = ngx_pcalloc(r->pool, sizeof(ngx_http_sandbox_mcp_egress_ctx_t));
    if (ctx == NULL) {
        json_decref(claims);
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ctx->request = r;

    if (ngx_http_sandbox_mcp_egress_copy(r->pool, &ctx->run_id, run)
        != NGX_OK
        || ngx_http_sandbox_mcp_egress_copy(r->pool, &ctx->tenant,
                                            json_object_get(claims, "sub"))
           != NGX_OK)
    {
        json_decref(claims);
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    json_decref(claims);

    ngx_http_set_ctx(r, ctx, ngx_http_sandbox_mcp_egress_module);

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
        ctx->done = 1;
        ctx->rc = NGX_DONE;
        rc = ngx_http_sandbox_mcp_egress_refuse(r, NGX_HTTP_FORBIDDEN,
                          "permission_error",
                          "egress: no repository in the request path");
        ngx_http_finalize_request(r, rc);
        return NGX_DONE;
    }

    msg = ngx_http_sandbox_mcp_egress_classify(r, lcf->push, &ctx->kind,
                                               &status);
    if (msg) {
        ctx->done = 1;
        ctx->rc = NGX_DONE;
        rc = ngx_http_sandbox_mcp_egress_refuse(r, status,
                          (status == NGX_HTTP_FORBIDDEN) ? "permission_error"
                                                    : "invalid_request_error",
                          msg);
        ngx_http_finalize_request(r, rc);
        return NGX_DONE;
    }

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

    if (ngx_http_sandbox_mcp_redis_key(r->pool, &argv[1], SMCP_KEY_RUN,
                                       &ctx->run_id)
        != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ctx->cmd = ngx_http_sandbox_mcp_redis_command(
                   ngx_http_sandbox_mcp_egress_checked, ctx, 6, argv);

    if (ctx->cmd == NULL) {
        ctx->done = 1;
        ctx->rc = NGX_DONE;
        rc = ngx_http_sandbox_mcp_egress_refuse(r,
                          NGX_HTTP_SERVICE_UNAVAILABLE, "api_error",
                          "egress: the run's state cannot be read right now; "
                          "retry shortly");
        ngx_http_finalize_request(r, rc);
        return NGX_DONE;
    }

    return NGX_AGAIN;
}


/* the audit record: what went where, never headers or bodies */
static ngx_int_t
ngx_http_sandbox_mcp_egress_log(ngx_http_request_t *r)
{
    char                                    *data;
    u_char                                  *q;
    json_t                                  *ev;
    int64_t                                  now, start;
    ngx_str_t                                chan, path, argv[12];
    ngx_time_t                              *tp;
    ngx_http_sandbox_mcp_egress_ctx_t       *ctx;
    ngx_http_sandbox_mcp_egress_loc_conf_t  *lcf;

    ctx = ngx_http_get_module_ctx(r, ngx_http_sandbox_mcp_egress_module);

    if (ctx == NULL || !ctx->known) {
        return NGX_OK;
    }

    lcf = ngx_http_get_module_loc_conf(r, ngx_http_sandbox_mcp_egress_module);

    tp = ngx_timeofday();
    now = (int64_t) tp->sec * 1000 + tp->msec;
    start = (int64_t) r->start_sec * 1000 + r->start_msec;

    /* the path as the sandbox sent it (before any rewrite), without the
     * query string: queries can carry keys */
    path = r->unparsed_uri;
    q = ngx_strlchr(path.data, path.data + path.len, '?');
    if (q) {
        path.len = q - path.data;
    }

    ev = json_pack("{s:s%, s:s%, s:s%, s:i, s:I, s:I, s:I, s:b}",
                   "route", (char *) lcf->route.data, lcf->route.len,
                   "method", (char *) r->method_name.data,
                   r->method_name.len,
                   "path", (char *) path.data, path.len,
                   "status", (int) r->headers_out.status,
                   "bytesIn", (json_int_t) r->request_length,
                   "bytesOut", (json_int_t) r->connection->sent,
                   "durationMs", (json_int_t) (now - start),
                   "granted", ctx->granted);

    if (ev == NULL) {
        /* a path that is not UTF-8: record it without the path */
        ev = json_pack("{s:s%, s:s%, s:i, s:b}",
                       "route", (char *) lcf->route.data, lcf->route.len,
                       "method", (char *) r->method_name.data,
                       r->method_name.len,
                       "status", (int) r->headers_out.status,
                       "granted", ctx->granted);
    }

    data = ev ? json_dumps(ev, JSON_COMPACT) : NULL;
    json_decref(ev);

    if (data == NULL
        || ngx_http_sandbox_mcp_redis_key(r->pool, &argv[1],
                                          SMCP_KEY_RUN_EVENTS, &ctx->run_id)
           != NGX_OK
        || ngx_http_sandbox_mcp_redis_key(r->pool, &chan, SMCP_CHAN_RUN,
                                          &ctx->run_id)
           != NGX_OK)
    {
        free(data);
        return NGX_OK;
    }

    ngx_str_set(&argv[0], "XADD");
    ngx_str_set(&argv[2], "MAXLEN");
    ngx_str_set(&argv[3], "~");
    ngx_str_set(&argv[4], SMCP_EVENTS_MAXLEN);
    ngx_str_set(&argv[5], "*");
    ngx_str_set(&argv[6], "type");
    ngx_str_set(&argv[7], "egress");
    ngx_str_set(&argv[8], "data");
    argv[9].data = (u_char *) data;
    argv[9].len = ngx_strlen(data);
    ngx_str_set(&argv[10], "ts");
    argv[11] = ngx_http_sandbox_mcp_redis_number(r->pool, now);

    /* fire and forget: nothing waits for the replies */
    (void) ngx_http_sandbox_mcp_redis_command(NULL, NULL, 12, argv);

    free(data);

    ngx_str_set(&argv[0], "PUBLISH");
    argv[1] = chan;
    ngx_str_set(&argv[2], "egress");

    (void) ngx_http_sandbox_mcp_redis_command(NULL, NULL, 3, argv);

    return NGX_OK;
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
    ngx_http_variable_t  *var, *v;

    for (v = ngx_http_sandbox_mcp_egress_vars; v->name.len; v++) {
        var = ngx_http_add_variable(cf, &v->name, v->flags);
        if (var == NULL) {
            return NGX_ERROR;
        }

        var->get_handler = v->get_handler;
        var->data = v->data;
    }

    return NGX_OK;
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
     */

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

    return NGX_CONF_OK;
}


static char *
ngx_http_sandbox_mcp_egress(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_sandbox_mcp_egress_loc_conf_t *lcf = conf;

    u_char                            *p;
    ngx_str_t                         *value;
    ngx_http_sandbox_mcp_main_conf_t  *mcf;

    if (lcf->route.len) {
        return "is duplicate";
    }

    value = cf->args->elts;

    for (p = value[1].data; p < value[1].data + value[1].len; p++) {
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z')
              || (*p >= '0' && *p <= '9') || *p == '-' || *p == '_'
              || *p == '.'))
        {
            return "needs a route name of letters, digits, \"-_.\"";
        }
    }

    lcf->route = value[1];

    /* the workers need their Redis connections */
    mcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_sandbox_mcp_module);
    mcf->enabled = 1;

    return NGX_CONF_OK;
}


/*
 * sandbox_mcp_egress_credential env:NAME|file:PATH [raw|bearer|basic|token];
 * read here, by the master, at start and reload; never logged.
 */
static char *
ngx_http_sandbox_mcp_egress_credential(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_sandbox_mcp_egress_loc_conf_t *lcf = conf;

    u_char      *p;
    size_t       len;
    ngx_str_t   *value, src, plain, b64;
    ngx_uint_t   format;
    char         err[256];
    u_char       secret[SMCP_SECRET_MAX];
    int          rc;

    if (lcf->credential.len) {
        return "is duplicate";
    }

    value = cf->args->elts;
    format = NGX_HTTP_SANDBOX_MCP_CRED_RAW;

    if (cf->args->nelts == 3) {
        if (ngx_strcmp(value[2].data, "raw") == 0) {
            format = NGX_HTTP_SANDBOX_MCP_CRED_RAW;

        } else if (ngx_strcmp(value[2].data, "bearer") == 0) {
            format = NGX_HTTP_SANDBOX_MCP_CRED_BEARER;

        } else if (ngx_strcmp(value[2].data, "basic") == 0) {
            format = NGX_HTTP_SANDBOX_MCP_CRED_BASIC;

        } else if (ngx_strcmp(value[2].data, "token") == 0) {
            format = NGX_HTTP_SANDBOX_MCP_CRED_TOKEN;

        } else {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "unknown credential format \"%V\" (raw, "
                               "bearer, basic or token)", &value[2]);
            return NGX_CONF_ERROR;
        }
    }

    src = value[1];

    if (src.len > 4 && ngx_strncmp(src.data, "env:", 4) == 0) {
        rc = smcp_secret_from_env((char *) src.data + 4, 1, secret, &len,
                                  err, sizeof(err));

    } else if (src.len > 5 && ngx_strncmp(src.data, "file:", 5) == 0) {
        src.data += 5;
        src.len -= 5;

        if (ngx_conf_full_name(cf->cycle, &src, 1) != NGX_OK) {
            return NGX_CONF_ERROR;
        }

        rc = smcp_secret_from_file((char *) src.data, 1, secret, &len,
                                   err, sizeof(err));

    } else {
        return "takes env:NAME or file:PATH";
    }

    if (rc != SMCP_OK) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "sandbox_mcp_egress_credential: %s", err);
        return NGX_CONF_ERROR;
    }

    plain.data = secret;
    plain.len = len;

    switch (format) {

    case NGX_HTTP_SANDBOX_MCP_CRED_BEARER:
    case NGX_HTTP_SANDBOX_MCP_CRED_TOKEN:
        lcf->credential.data = ngx_pnalloc(cf->pool, len + 7);
        if (lcf->credential.data == NULL) {
            return NGX_CONF_ERROR;
        }

        p = ngx_cpymem(lcf->credential.data,
                       format == NGX_HTTP_SANDBOX_MCP_CRED_BEARER
                       ? "Bearer " : "token ",
                       format == NGX_HTTP_SANDBOX_MCP_CRED_BEARER ? 7 : 6);
        p = ngx_cpymem(p, plain.data, plain.len);
        lcf->credential.len = p - lcf->credential.data;
        break;

    case NGX_HTTP_SANDBOX_MCP_CRED_BASIC:
        /* git over HTTPS with a GitHub token: x-access-token:<token> */
        src.len = sizeof("x-access-token:") - 1 + len;
        src.data = ngx_pnalloc(cf->pool, src.len);
        if (src.data == NULL) {
            return NGX_CONF_ERROR;
        }

        p = ngx_cpymem(src.data, "x-access-token:",
                       sizeof("x-access-token:") - 1);
        ngx_memcpy(p, plain.data, plain.len);

        b64.len = sizeof("Basic ") - 1 + ngx_base64_encoded_length(src.len);
        b64.data = ngx_pnalloc(cf->pool, b64.len);
        if (b64.data == NULL) {
            return NGX_CONF_ERROR;
        }

        p = ngx_cpymem(b64.data, "Basic ", sizeof("Basic ") - 1);

        plain.data = p;
        ngx_encode_base64(&plain, &src);

        ngx_explicit_memzero(src.data, src.len);

        lcf->credential.data = b64.data;
        lcf->credential.len = sizeof("Basic ") - 1 + plain.len;
        break;

    default: /* raw */
        lcf->credential.data = ngx_pnalloc(cf->pool, len);
        if (lcf->credential.data == NULL) {
            return NGX_CONF_ERROR;
        }

        ngx_memcpy(lcf->credential.data, plain.data, len);
        lcf->credential.len = len;
        break;
    }

    ngx_explicit_memzero(secret, sizeof(secret));

    return NGX_CONF_OK;
}
