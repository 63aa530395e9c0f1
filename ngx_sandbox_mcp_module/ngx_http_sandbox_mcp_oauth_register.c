/*
 * Dynamic client registration (RFC 7591) for public clients: redirect
 * URIs https (on an allowed host) or loopback http, bounded metadata,
 * stored in Redis with an expiry.  Anyone may register, so what that
 * writes is bounded: a client no sign-in used yet lives
 * sandbox_mcp_oauth_unused_client_ttl, and there are at most
 * sandbox_mcp_oauth_unused_clients of them (then 503).
 */

#include "ngx_http_sandbox_mcp_oauth.h"
#include "ngx_http_sandbox_mcp_http.h"
#include "ngx_http_sandbox_mcp_scripts.h"


typedef struct {
    ngx_http_sandbox_mcp_oauth_ctx_t   *ctx;
    json_t                             *answer;
} ngx_http_sandbox_mcp_oauth_reg_t;


/* sandbox_mcp_oauth_redirect_hosts: "host" or "*.domain" */
static ngx_uint_t
ngx_http_sandbox_mcp_oauth_host_listed(ngx_array_t *hosts, u_char *host,
    size_t len)
{
    ngx_str_t   *h;
    ngx_uint_t   i;

    if (hosts == NULL) {
        return 1;
    }

    h = hosts->elts;

    for (i = 0; i < hosts->nelts; i++) {
        if (h[i].len == len && ngx_strncasecmp(h[i].data, host, len) == 0) {
            return 1;
        }

        if (h[i].len > 2 && h[i].data[0] == '*' && h[i].data[1] == '.'
            && len > h[i].len - 1
            && ngx_strncasecmp(h[i].data + 1, host + len - (h[i].len - 1),
                               h[i].len - 1) == 0)
        {
            return 1;
        }
    }

    return 0;
}


/*
 * https://HOST[:port]/... with HOST allowed, or http:// on a loopback
 * name; no fragment, no userinfo, nothing below 0x21 or above 0x7e, none
 * of " < > ` { } | ^ \.
 */
static ngx_uint_t
ngx_http_sandbox_mcp_oauth_redirect_ok(ngx_http_sandbox_mcp_loc_conf_t *lcf,
    u_char *s, size_t len)
{
    u_char      *p, *last, *host, *end;
    size_t       hlen;
    ngx_uint_t   https, i;

    static u_char     bad[] = "#\\\"<>`{}|^";
    static ngx_str_t  loopback[] = {
        ngx_string("127.0.0.1"), ngx_string("localhost"),
        ngx_string("[::1]"), ngx_null_string
    };

    if (len == 0 || len > NGX_HTTP_SANDBOX_MCP_OAUTH_URI_MAX) {
        return 0;
    }

    last = s + len;

    /* no fragment, and none of what a URI may not hold unescaped (RFC
     * 3986): what is stored is the URI's own bytes, JSON needs no escape */
    for (p = s; p < last; p++) {
        if (*p <= 0x20 || *p >= 0x7f
            || ngx_strlchr(bad, bad + sizeof(bad) - 1, *p))
        {
            return 0;
        }
    }

    if (len > 8 && ngx_strncmp(s, "https://", 8) == 0) {
        https = 1;
        host = s + 8;

    } else if (len > 7 && ngx_strncmp(s, "http://", 7) == 0) {
        https = 0;
        host = s + 7;

    } else {
        return 0;
    }

    for (end = host; end < last && *end != '/' && *end != '?'; end++) {
        if (*end == '@') {
            return 0;
        }
    }

    /* the host without its port */

    if (*host == '[') {
        p = ngx_strlchr(host, end, ']');
        if (p == NULL) {
            return 0;
        }

        p++;

    } else {
        p = ngx_strlchr(host, end, ':');
        if (p == NULL) {
            p = end;
        }
    }

    hlen = p - host;

    if (hlen == 0) {
        return 0;
    }

    if (p < end) {
        if (*p != ':' || p + 1 == end || end - p > 6) {
            return 0;
        }

        for (p++; p < end; p++) {
            if (*p < '0' || *p > '9') {
                return 0;
            }
        }
    }

    if (https) {
        return ngx_http_sandbox_mcp_oauth_host_listed(lcf->oauth.redirect_hosts,
                                                      host, hlen);
    }

    for (i = 0; loopback[i].len; i++) {
        if (loopback[i].len == hlen
            && ngx_strncasecmp(loopback[i].data, host, hlen) == 0)
        {
            return 1;
        }
    }

    return 0;
}


/* a list of strings, each among the allowed ones */
static ngx_uint_t
ngx_http_sandbox_mcp_oauth_subset(json_t *list, const char **allowed)
{
    size_t        i, k;
    json_t       *v;
    const char   *s;

    if (list == NULL) {
        return 1;
    }

    if (!json_is_array(list) || json_array_size(list) > 4) {
        return 0;
    }

    json_array_foreach(list, i, v) {
        s = json_string_value(v);
        if (s == NULL) {
            return 0;
        }

        for (k = 0; allowed[k]; k++) {
            if (ngx_strcmp(s, allowed[k]) == 0) {
                break;
            }
        }

        if (allowed[k] == NULL) {
            return 0;
        }
    }

    return 1;
}


const char *
ngx_http_sandbox_mcp_oauth_check_metadata(ngx_http_sandbox_mcp_oauth_ctx_t
    *ctx, json_t *md, const char **error)
{
    size_t       i, len;
    json_t      *uris, *v, *name;
    const char  *s;

    static const char  *grants[] = { "authorization_code", "refresh_token",
                                     NULL };
    static const char  *responses[] = { "code", NULL };

    *error = "invalid_client_metadata";

    if (!json_is_object(md)) {
        return "the body must be a JSON object";
    }

    uris = json_object_get(md, "redirect_uris");

    if (!json_is_array(uris) || json_array_size(uris) == 0
        || json_array_size(uris) > NGX_HTTP_SANDBOX_MCP_OAUTH_URIS_MAX)
    {
        *error = "invalid_redirect_uri";
        return "redirect_uris must be an array of 1 to 8 URIs";
    }

    json_array_foreach(uris, i, v) {
        s = json_string_value(v);

        if (s == NULL
            || !ngx_http_sandbox_mcp_oauth_redirect_ok(ctx->lcf, (u_char *) s,
                                                      json_string_length(v)))
        {
            *error = "invalid_redirect_uri";
            return "a redirect URI must be https (on an allowed host) or "
                   "http on a loopback address (127.0.0.1, localhost, "
                   "[::1]), without a fragment, at most 512 bytes";
        }
    }

    name = json_object_get(md, "client_name");

    if (name) {
        s = json_string_value(name);
        len = json_string_length(name);

        if (s == NULL || len == 0
            || len > NGX_HTTP_SANDBOX_MCP_OAUTH_NAME_MAX)
        {
            return "client_name must be a string of 1 to 128 bytes";
        }

        for (i = 0; i < len; i++) {
            if ((u_char) s[i] < 0x20 || s[i] == 0x7f) {
                return "client_name may not hold control characters";
            }
        }
    }

    if (!ngx_http_sandbox_mcp_oauth_subset(json_object_get(md,
                                                           "grant_types"),
                                           grants))
    {
        return "grant_types may list authorization_code and refresh_token "
               "only";
    }

    if (!ngx_http_sandbox_mcp_oauth_subset(json_object_get(md,
                                                          "response_types"),
                                           responses))
    {
        return "response_types may list code only";
    }

    return NULL;
}


static void
ngx_http_sandbox_mcp_oauth_registered(void *data, redisReply *reply)
{
    ngx_http_sandbox_mcp_oauth_reg_t *reg = data;

    ngx_int_t                          rc;
    ngx_http_request_t                *r;
    ngx_http_sandbox_mcp_oauth_ctx_t  *ctx;

    ctx = reg->ctx;
    r = ctx->request;
    ctx->cmd = NULL;

    if (reply && reply->type == REDIS_REPLY_INTEGER && reply->integer < 0) {
        rc = ngx_http_sandbox_mcp_oauth_full(r, -reply->integer,
                               "too many clients are registered and not "
                               "yet used for a sign-in: try again later");

    } else if (reply == NULL || reply->type != REDIS_REPLY_INTEGER
               || reply->integer != 1)
    {
        rc = ngx_http_sandbox_mcp_send_unavailable(r);

    } else {
        rc = ngx_http_sandbox_mcp_oauth_send_json(r, NGX_HTTP_CREATED,
                                                  json_incref(reg->answer));
    }

    ngx_http_sandbox_mcp_oauth_finalize(ctx, rc);
}


ngx_int_t
ngx_http_sandbox_mcp_oauth_register(ngx_http_sandbox_mcp_oauth_ctx_t *ctx)
{
    char                              *uris;
    json_t                            *md, *name, *answer;
    ngx_str_t                          id, argv[7];
    const char                        *why, *error;
    json_error_t                       jerr;
    ngx_http_request_t                *r;
    ngx_http_sandbox_mcp_oauth_reg_t  *reg;

    r = ctx->request;

    md = json_loadb((char *) ctx->body.data, ctx->body.len,
                    JSON_REJECT_DUPLICATES, &jerr);

    if (md == NULL) {
        return ngx_http_sandbox_mcp_oauth_error(r, NGX_HTTP_BAD_REQUEST,
                                                "invalid_client_metadata",
                                                "the body is not JSON");
    }

    if (ngx_http_sandbox_mcp_add_cleanup(r, md, md) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    why = ngx_http_sandbox_mcp_oauth_check_metadata(ctx, md, &error);

    if (why) {
        return ngx_http_sandbox_mcp_oauth_error(r, NGX_HTTP_BAD_REQUEST,
                                                error, why);
    }

    if (ngx_http_sandbox_mcp_oauth_random(r->pool, &id, "mcp_", 16)
        != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    name = json_object_get(md, "client_name");

    answer = json_pack("{s:s%, s:I, s:s, s:O, s:[s,s], s:[s], s:s}",
                       "client_id", id.data, id.len,
                       "client_id_issued_at", (json_int_t) ngx_time(),
                       "client_name", name ? json_string_value(name)
                                           : "MCP client",
                       "redirect_uris", json_object_get(md, "redirect_uris"),
                       "grant_types", "authorization_code", "refresh_token",
                       "response_types", "code",
                       "token_endpoint_auth_method", "none");

    if (answer == NULL
        || ngx_http_sandbox_mcp_add_cleanup(r, answer, answer) != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    uris = json_dumps(json_object_get(md, "redirect_uris"), JSON_COMPACT);
    if (uris == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    argv[3].len = ngx_strlen(uris);
    argv[3].data = ngx_pnalloc(r->pool, argv[3].len);
    if (argv[3].data == NULL) {
        free(uris);
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_memcpy(argv[3].data, uris, argv[3].len);
    free(uris);

    reg = ngx_palloc(r->pool, sizeof(ngx_http_sandbox_mcp_oauth_reg_t));
    if (reg == NULL
        || ngx_http_sandbox_mcp_redis_key(r->pool, &argv[0],
                                          SMCP_KEY_OAUTH_CLIENT, &id)
           != NGX_OK
        || ngx_http_sandbox_mcp_redis_key(r->pool, &argv[1],
                                          SMCP_KEY_OAUTH_UNUSED, NULL)
           != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    reg->ctx = ctx;
    reg->answer = answer;

    /* anyone may register: a client lives unused_client_ttl (and counts
     * among the unused ones, at most unused_clients) until a sign-in */
    argv[2].data = (u_char *) json_string_value(json_object_get(answer,
                                                             "client_name"));
    argv[2].len = ngx_strlen(argv[2].data);
    argv[4] = ngx_http_sandbox_mcp_redis_number(r->pool, ngx_time());
    argv[5] = ngx_http_sandbox_mcp_redis_number(r->pool,
                                        ctx->lcf->oauth.unused_client_ttl);
    argv[6] = ngx_http_sandbox_mcp_redis_number(r->pool,
                                        ctx->lcf->oauth.unused_clients);

    ctx->cmd = ngx_http_sandbox_mcp_redis_script(
                   &ngx_http_sandbox_mcp_script_oauth_client,
                   ngx_http_sandbox_mcp_oauth_registered, reg, 2, 7, argv);

    if (ctx->cmd == NULL) {
        return ngx_http_sandbox_mcp_send_unavailable(r);
    }

    return NGX_DONE;
}
