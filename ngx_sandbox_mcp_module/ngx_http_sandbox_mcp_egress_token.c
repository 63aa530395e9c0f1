/*
 * The sandbox's run token: found where its SDK puts an API key, verified
 * (HS256, scope "egress", a run id), and stripped from the request.
 */

#include "ngx_http_sandbox_mcp_egress_token.h"
#include "ngx_http_sandbox_mcp_defaults.h"

#include "smcp_jwt.h"


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


/* the run token: the first JWT-shaped value in the known headers */
ngx_int_t
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
ngx_int_t
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
 * The claims of a valid token of scope want ("egress": a sandbox's;
 * "notify": a runner's, for a run's notification): signature, expiry,
 * the scope and a run id; NULL and *refusal otherwise.
 */
json_t *
ngx_http_sandbox_mcp_egress_claims(ngx_http_request_t *r, ngx_str_t *token,
    const char *want, const char **refusal)
{
    char                               err[NGX_HTTP_SANDBOX_MCP_ERR_MAX];
    json_t                            *claims, *run, *scope;
    ngx_http_sandbox_mcp_main_conf_t  *mcf;

    mcf = ngx_http_get_module_main_conf(r, ngx_http_sandbox_mcp_module);

    if (mcf->keys == NULL
        || smcp_jwt_verify(mcf->keys, (char *) token->data, token->len,
                           ngx_time(), &claims, err, sizeof(err))
           != SMCP_OK)
    {
        *refusal = "egress: sandbox token refused";
        return NULL;
    }

    scope = json_object_get(claims, "scope");
    run = json_object_get(claims, "run");

    if (!json_is_string(scope)
        || ngx_strcmp(json_string_value(scope), want) != 0
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
ngx_int_t
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

    claims = ngx_http_sandbox_mcp_egress_claims(r, &token, SMCP_SCOPE_EGRESS,
                                                &refusal);
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
