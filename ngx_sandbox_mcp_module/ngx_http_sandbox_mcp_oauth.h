/*
 * The OAuth 2.1 authorization server of the MCP endpoint (docs/contracts.md
 * "OAuth 2.1"): discovery, client registration, the sign-in page and the
 * token endpoint, served by `sandbox_mcp_oauth_endpoints` locations, with
 * state in Redis.
 */

#ifndef _NGX_HTTP_SANDBOX_MCP_OAUTH_H_INCLUDED_
#define _NGX_HTTP_SANDBOX_MCP_OAUTH_H_INCLUDED_


#include "ngx_http_sandbox_mcp_module.h"
#include "ngx_http_sandbox_mcp_redis.h"
#include "ngx_http_sandbox_mcp_defaults.h"


#define NGX_HTTP_SANDBOX_MCP_OAUTH_BODY_MAX     16384
#define NGX_HTTP_SANDBOX_MCP_OAUTH_PARAMS_MAX   32
#define NGX_HTTP_SANDBOX_MCP_OAUTH_VALUE_MAX    8192    /* one parameter (an
                                                           access key: a JWT
                                                           up to 4 KiB) */
#define NGX_HTTP_SANDBOX_MCP_OAUTH_URIS_MAX     8       /* redirect_uris */
#define NGX_HTTP_SANDBOX_MCP_OAUTH_URI_MAX      512
#define NGX_HTTP_SANDBOX_MCP_OAUTH_NAME_MAX     128     /* client_name */
#define NGX_HTTP_SANDBOX_MCP_OAUTH_STATE_MAX    512
#define NGX_HTTP_SANDBOX_MCP_OAUTH_CSRF_TTL     600     /* s: a sign-in page
                                                           is good for */
#define NGX_HTTP_SANDBOX_MCP_OAUTH_CLIENT_ID_LEN  36    /* "mcp_" + 32 hex */
#define NGX_HTTP_SANDBOX_MCP_OAUTH_FAMILY_LEN   24      /* hex */
#define NGX_HTTP_SANDBOX_MCP_OAUTH_SHA256_HEX   64

/* directive defaults */
#define NGX_HTTP_SANDBOX_MCP_OAUTH_TOKEN_TTL    3600
#define NGX_HTTP_SANDBOX_MCP_OAUTH_REFRESH_TTL  (30 * 86400)
#define NGX_HTTP_SANDBOX_MCP_OAUTH_CODE_TTL     60
#define NGX_HTTP_SANDBOX_MCP_OAUTH_CLIENT_TTL   (30 * 86400)
#define NGX_HTTP_SANDBOX_MCP_OAUTH_UNUSED_TTL   3600    /* a client no
                                                           sign-in used */
#define NGX_HTTP_SANDBOX_MCP_OAUTH_UNUSED_MAX   10000   /* such clients at
                                                           once */
#define NGX_HTTP_SANDBOX_MCP_OAUTH_PENDING_MAX  10000   /* GitHub sign-ins
                                                           under way */
#define NGX_HTTP_SANDBOX_MCP_OAUTH_PENDING_TTL  600     /* s: one of them */
#define NGX_HTTP_SANDBOX_MCP_OAUTH_REVOKE_RATE  10      /* new revoked ids
                                                           a tenant makes a
                                                           minute */
#define NGX_HTTP_SANDBOX_MCP_OAUTH_REVOKE_WINDOW 60     /* s */


/* the parameters of an authorization request (query, form, or kept in
 * Redis while the user signs in at GitHub) */
typedef struct {
    ngx_str_t                           response_type;
    ngx_str_t                           method;
    ngx_str_t                           resource;
    ngx_str_t                           scope;
    ngx_str_t                           cookie;     /* the CSRF cookie */
    ngx_str_t                           client_name;
} ngx_http_sandbox_mcp_oauth_req_t;


typedef struct ngx_http_sandbox_mcp_oauth_ctx_s
    ngx_http_sandbox_mcp_oauth_ctx_t;
typedef struct ngx_http_sandbox_mcp_github_user_s
    ngx_http_sandbox_mcp_github_user_t;


/* what a code is issued for (a sign-in) */
typedef struct {
    ngx_str_t                           tenant;
    ngx_str_t                           repos;      /* the grant, JSON text
                                                       ("": none) */
    ngx_str_t                           key_jti;    /* the access key's id
                                                       ("": none) */
    time_t                              key_exp;
    ngx_str_t                           github;     /* a GitHub sign-in's
                                                       token, sealed ("":
                                                       none) */
    ngx_str_t                           label;      /* ... its login */
} ngx_http_sandbox_mcp_oauth_grant_t;


/* the look-up of a GitHub user ended: NGX_OK, u->rule lets it in;
 * NGX_DECLINED, no rule does, or GitHub refused the token; NGX_ERROR,
 * GitHub or Redis failed (u->status) */
typedef ngx_int_t (*ngx_http_sandbox_mcp_github_done_pt)(
    ngx_http_sandbox_mcp_oauth_ctx_t *ctx,
    ngx_http_sandbox_mcp_github_user_t *u, ngx_int_t rc);

#define NGX_HTTP_SANDBOX_MCP_GITHUB_USER    1       /* the look-up's steps */
#define NGX_HTTP_SANDBOX_MCP_GITHUB_ORGS    2

/* a GitHub user, looked up (_oauth_github_user.c) */
struct ngx_http_sandbox_mcp_github_user_s {
    ngx_str_t                           token;      /* GitHub's, to ask */
    ngx_str_t                           login;      /* found: its login */
    ngx_str_t                           id;         /* ... its id (decimal) */
    ngx_str_t                           orgs;       /* ... "id:login,..." */
    ngx_keyval_t                       *rule;       /* the rule it matched */
    ngx_uint_t                          status;     /* GitHub's, on failure */
    ngx_uint_t                          step;
    ngx_http_sandbox_mcp_github_done_pt done;
};


/* one request to the endpoints */
struct ngx_http_sandbox_mcp_oauth_ctx_s {
    ngx_http_request_t                 *request;
    ngx_http_sandbox_mcp_loc_conf_t    *lcf;
    ngx_http_sandbox_mcp_redis_cmd_t   *cmd;

    ngx_str_t                           issuer;
    ngx_str_t                           resource;
    ngx_array_t                        *params;     /* of ngx_keyval_t:
                                                       query or form */
    ngx_str_t                           body;
    void                               *step;       /* the endpoint's */

    /* authorize */
    ngx_str_t                           client_id;
    ngx_str_t                           redirect_uri;
    ngx_str_t                           challenge;
    ngx_str_t                           state;
    ngx_str_t                           key_error;  /* the page says */
    json_t                             *key;        /* the access key's
                                                       claims */

    /* a subrequest's answer (GitHub, client metadata documents) and the
     * step that reads it */
    ngx_uint_t                          sub_status;
    ngx_str_t                           sub_body;
    ngx_int_t                         (*sub_next)(void *ctx);

    /* the endpoint's next steps, for the shared code below it: the
     * client is known (its name and redirect URIs, JSON); the access key
     * a code was to be issued for is revoked */
    ngx_int_t                         (*client_known)(
                                          ngx_http_sandbox_mcp_oauth_ctx_t
                                          *ctx, ngx_str_t *name,
                                          ngx_str_t *uris_json);
    ngx_int_t                         (*key_revoked)(
                                          ngx_http_sandbox_mcp_oauth_ctx_t
                                          *ctx);

    /* the GitHub user being looked up */
    ngx_http_sandbox_mcp_github_user_t *github;

    /* token */
    ngx_str_t                           access_jti;
    ngx_str_t                           refresh;    /* the new one */
    time_t                              access_exp;

    /* the refresh of a GitHub sign-in: its tenant; once GitHub was asked
     * again, the grant its rules give now and the login now */
    ngx_str_t                           github_sub;
    ngx_str_t                           github_repos;
    ngx_str_t                           github_label;

    unsigned                            done:1;
    unsigned                            github_checked:1;
};


/*
 * _oauth.c, the top: configuration, the routes, the discovery documents
 */

/* the handler of sandbox_mcp_oauth_endpoints */
ngx_int_t ngx_http_sandbox_mcp_oauth_handler(ngx_http_request_t *r);
char *ngx_http_sandbox_mcp_oauth_merge(ngx_conf_t *cf,
    ngx_http_sandbox_mcp_oauth_conf_t *prev,
    ngx_http_sandbox_mcp_oauth_conf_t *conf);
void ngx_http_sandbox_mcp_oauth_init_conf(
    ngx_http_sandbox_mcp_oauth_conf_t *conf);


/*
 * the endpoints, each in its file: _oauth_register.c, _oauth_authorize.c
 * (which goes on in _oauth_github.c and _oauth_client_metadata.c),
 * _oauth_token.c (token and revocation); a GitHub user looked up
 * (_oauth_github_user.c) below the sign-in and the token endpoint
 */

ngx_int_t ngx_http_sandbox_mcp_oauth_register(
    ngx_http_sandbox_mcp_oauth_ctx_t *ctx);
ngx_int_t ngx_http_sandbox_mcp_oauth_authorize(
    ngx_http_sandbox_mcp_oauth_ctx_t *ctx);
ngx_int_t ngx_http_sandbox_mcp_oauth_token(
    ngx_http_sandbox_mcp_oauth_ctx_t *ctx);
ngx_int_t ngx_http_sandbox_mcp_oauth_revoke(
    ngx_http_sandbox_mcp_oauth_ctx_t *ctx);

/* registration's checks of client metadata: NULL, or why not (and the
 * OAuth error in *error); client metadata documents are held to them */
const char *ngx_http_sandbox_mcp_oauth_check_metadata(
    ngx_http_sandbox_mcp_oauth_ctx_t *ctx, json_t *md, const char **error);

/* GitHub sign-in: directives, the start (from the sign-in page), the
 * callback */
char *ngx_http_sandbox_mcp_oauth_github_conf(ngx_conf_t *cf,
    ngx_command_t *cmd, void *conf);
char *ngx_http_sandbox_mcp_oauth_github_allow(ngx_conf_t *cf,
    ngx_command_t *cmd, void *conf);
void ngx_http_sandbox_mcp_oauth_github_merge(
    ngx_http_sandbox_mcp_oauth_conf_t *prev,
    ngx_http_sandbox_mcp_oauth_conf_t *conf);
ngx_int_t ngx_http_sandbox_mcp_oauth_github_start(
    ngx_http_sandbox_mcp_oauth_ctx_t *ctx,
    ngx_http_sandbox_mcp_oauth_req_t *req);
ngx_int_t ngx_http_sandbox_mcp_oauth_github_callback(
    ngx_http_sandbox_mcp_oauth_ctx_t *ctx);

/* who a GitHub user is now (a sign-in, a refresh of its grant): a
 * subrequest is started (NGX_OK), then u->done(); its tenant; the GitHub
 * token sealed for Redis and back; whether a rule names an organization */
ngx_int_t ngx_http_sandbox_mcp_github_user(
    ngx_http_sandbox_mcp_oauth_ctx_t *ctx,
    ngx_http_sandbox_mcp_github_user_t *u);
ngx_int_t ngx_http_sandbox_mcp_github_tenant(ngx_pool_t *pool, ngx_str_t *id,
    ngx_str_t *tenant);
ngx_int_t ngx_http_sandbox_mcp_github_seal(ngx_http_request_t *r,
    ngx_str_t *token, ngx_str_t *sealed);
ngx_int_t ngx_http_sandbox_mcp_github_unseal(ngx_http_request_t *r,
    ngx_str_t *sealed, ngx_str_t *token);
ngx_uint_t ngx_http_sandbox_mcp_github_wants_orgs(
    ngx_http_sandbox_mcp_oauth_conf_t *oc);

/* client ID metadata documents: client_id an https URL (and the server
 * configured for them); its document fetched, checked and cached, then
 * ctx->client_known() */
ngx_uint_t ngx_http_sandbox_mcp_oauth_metadata_client(
    ngx_http_sandbox_mcp_oauth_ctx_t *ctx);
ngx_int_t ngx_http_sandbox_mcp_oauth_fetch_metadata(
    ngx_http_sandbox_mcp_oauth_ctx_t *ctx);


/*
 * _oauth_http.c, below them all
 */

/* the issuer and the MCP URL (the resource) this request is served for */
ngx_int_t ngx_http_sandbox_mcp_oauth_urls(ngx_http_request_t *r,
    ngx_http_sandbox_mcp_loc_conf_t *lcf, ngx_str_t *issuer,
    ngx_str_t *resource);

/* the resource_metadata URL of /mcp's 401 (empty when OAuth is off) */
ngx_int_t ngx_http_sandbox_mcp_oauth_metadata_url(ngx_http_request_t *r,
    ngx_http_sandbox_mcp_loc_conf_t *lcf, ngx_str_t *url);

/* the path of a URL ("" when it has none) */
void ngx_http_sandbox_mcp_oauth_path(ngx_str_t *url, ngx_str_t *path);

/* a parameter of the query or the form: NGX_OK, or NGX_DECLINED (absent) */
ngx_int_t ngx_http_sandbox_mcp_oauth_param(
    ngx_http_sandbox_mcp_oauth_ctx_t *ctx, const char *name,
    ngx_str_t *value);

/* application/x-www-form-urlencoded into ctx->params; NGX_DECLINED: bad
 * encoding, a parameter twice, too many or too long */
ngx_int_t ngx_http_sandbox_mcp_oauth_parse(
    ngx_http_sandbox_mcp_oauth_ctx_t *ctx, u_char *p, size_t len);

/* answers: CORS headers, JSON (no-store, CORS; json is taken over: NULL
 * answers 500), an OAuth error, an HTML page */
ngx_int_t ngx_http_sandbox_mcp_oauth_cors(ngx_http_request_t *r);
ngx_int_t ngx_http_sandbox_mcp_oauth_send_json(ngx_http_request_t *r,
    ngx_uint_t status, json_t *json);
ngx_int_t ngx_http_sandbox_mcp_oauth_error(ngx_http_request_t *r,
    ngx_uint_t status, const char *error, const char *description);
ngx_int_t ngx_http_sandbox_mcp_oauth_send_html(ngx_http_request_t *r,
    ngx_uint_t status, const char *page, ngx_keyval_t *vars, ngx_uint_t n);

/* a bounded store is full: 503 with Retry-After (seconds) and the error
 * temporarily_unavailable; the header alone */
ngx_int_t ngx_http_sandbox_mcp_oauth_full(ngx_http_request_t *r,
    time_t retry, const char *description);
ngx_int_t ngx_http_sandbox_mcp_oauth_retry_after(ngx_http_request_t *r,
    time_t retry);

/* a subrequest (in memory) to uri?args: its answer in ctx->sub_status
 * and ctx->sub_body; then next(ctx) runs, whose result (unless NGX_DONE)
 * finalizes the request */
ngx_int_t ngx_http_sandbox_mcp_oauth_subrequest(
    ngx_http_sandbox_mcp_oauth_ctx_t *ctx, ngx_str_t *uri, ngx_str_t *args,
    ngx_int_t (*next)(void *ctx));

/* from Redis callbacks */
void ngx_http_sandbox_mcp_oauth_finalize(
    ngx_http_sandbox_mcp_oauth_ctx_t *ctx, ngx_int_t rc);

/* s escaped for a URL's query: unreserved characters kept, others %XX */
u_char *ngx_http_sandbox_mcp_oauth_escape(u_char *dst, ngx_str_t *s);

/* lowercase hex of SHA-256(s) into dst (65 bytes, NUL-terminated) */
void ngx_http_sandbox_mcp_oauth_sha256_hex(u_char *dst, u_char *s,
    size_t len);

/* "<prefix><nbytes random bytes in hex>" in the pool */
ngx_int_t ngx_http_sandbox_mcp_oauth_random(ngx_pool_t *pool,
    ngx_str_t *out, const char *prefix, size_t nbytes);

/* the authorization endpoint's answers: an error at the redirect_uri,
 * an HTML page, the browser's CSRF cookie (create: a new one if absent) */
ngx_int_t ngx_http_sandbox_mcp_oauth_deny(
    ngx_http_sandbox_mcp_oauth_ctx_t *ctx, const char *error,
    const char *description);
ngx_int_t ngx_http_sandbox_mcp_oauth_page(
    ngx_http_sandbox_mcp_oauth_ctx_t *ctx, ngx_uint_t status,
    const char *title, const char *message);
ngx_int_t ngx_http_sandbox_mcp_oauth_cookie(
    ngx_http_sandbox_mcp_oauth_ctx_t *ctx,
    ngx_http_sandbox_mcp_oauth_req_t *req, ngx_uint_t create);

/* a code for the grant stored, then the browser sent to the client (a
 * revoked key: ctx->key_revoked(), else an error page) */
ngx_int_t ngx_http_sandbox_mcp_oauth_grant_code(
    ngx_http_sandbox_mcp_oauth_ctx_t *ctx,
    ngx_http_sandbox_mcp_oauth_grant_t *g);


#endif /* _NGX_HTTP_SANDBOX_MCP_OAUTH_H_INCLUDED_ */
