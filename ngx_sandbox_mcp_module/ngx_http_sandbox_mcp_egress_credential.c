/*
 * sandbox_mcp_egress_credential: the real credential of a route, read by
 * the master at start and reload, formatted once as the header value
 * $sandbox_mcp_credential gives; never logged.
 */

#include "ngx_http_sandbox_mcp_egress_credential.h"
#include "ngx_http_sandbox_mcp_defaults.h"


typedef enum {
    NGX_HTTP_SANDBOX_MCP_CRED_RAW = 0,
    NGX_HTTP_SANDBOX_MCP_CRED_BEARER,
    NGX_HTTP_SANDBOX_MCP_CRED_BASIC,
    NGX_HTTP_SANDBOX_MCP_CRED_TOKEN
} ngx_http_sandbox_mcp_cred_format_e;


/* the credential's bytes, from env:NAME or file:PATH, into secret */
static char *
ngx_http_sandbox_mcp_egress_cred_read(ngx_conf_t *cf, ngx_str_t *from,
    u_char *secret, size_t *len)
{
    int        rc;
    ngx_str_t  src;
    char       err[NGX_HTTP_SANDBOX_MCP_ERR_MAX];

    src = *from;

    if (src.len > 4 && ngx_strncmp(src.data, "env:", 4) == 0) {
        rc = smcp_secret_from_env((char *) src.data + 4, 1, secret, len,
                                  err, sizeof(err));

    } else if (src.len > 5 && ngx_strncmp(src.data, "file:", 5) == 0) {
        src.data += 5;
        src.len -= 5;

        if (ngx_conf_full_name(cf->cycle, &src, 1) != NGX_OK) {
            return NGX_CONF_ERROR;
        }

        rc = smcp_secret_from_file((char *) src.data, 1, secret, len,
                                   err, sizeof(err));

    } else {
        return "takes env:NAME or file:PATH";
    }

    if (rc != SMCP_OK) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "sandbox_mcp_egress_credential: %s", err);
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


/* the header value: plain formatted, in the configuration's pool */
static ngx_int_t
ngx_http_sandbox_mcp_egress_cred_value(ngx_conf_t *cf, ngx_str_t *value,
    ngx_uint_t format, ngx_str_t *plain)
{
    u_char     *p;
    ngx_str_t   src, b64;

    switch (format) {

    case NGX_HTTP_SANDBOX_MCP_CRED_BEARER:
    case NGX_HTTP_SANDBOX_MCP_CRED_TOKEN:
        value->data = ngx_pnalloc(cf->pool, plain->len + 7);
        if (value->data == NULL) {
            return NGX_ERROR;
        }

        p = ngx_cpymem(value->data,
                       format == NGX_HTTP_SANDBOX_MCP_CRED_BEARER
                       ? "Bearer " : "token ",
                       format == NGX_HTTP_SANDBOX_MCP_CRED_BEARER ? 7 : 6);
        p = ngx_cpymem(p, plain->data, plain->len);
        value->len = p - value->data;
        return NGX_OK;

    case NGX_HTTP_SANDBOX_MCP_CRED_BASIC:
        /* git over HTTPS with a GitHub token: x-access-token:<token> */
        src.len = sizeof("x-access-token:") - 1 + plain->len;
        src.data = ngx_pnalloc(cf->pool, src.len);
        if (src.data == NULL) {
            return NGX_ERROR;
        }

        p = ngx_cpymem(src.data, "x-access-token:",
                       sizeof("x-access-token:") - 1);
        ngx_memcpy(p, plain->data, plain->len);

        b64.len = sizeof("Basic ") - 1 + ngx_base64_encoded_length(src.len);
        b64.data = ngx_pnalloc(cf->pool, b64.len);
        if (b64.data == NULL) {
            return NGX_ERROR;
        }

        p = ngx_cpymem(b64.data, "Basic ", sizeof("Basic ") - 1);

        b64.len = sizeof("Basic ") - 1;
        value->data = p;
        ngx_encode_base64(value, &src);

        ngx_explicit_memzero(src.data, src.len);

        value->data = b64.data;
        value->len += b64.len;
        return NGX_OK;

    default: /* raw */
        value->data = ngx_pnalloc(cf->pool, plain->len);
        if (value->data == NULL) {
            return NGX_ERROR;
        }

        ngx_memcpy(value->data, plain->data, plain->len);
        value->len = plain->len;
        return NGX_OK;
    }
}


/*
 * sandbox_mcp_egress_credential env:NAME|file:PATH [raw|bearer|basic|token];
 * read here, by the master, at start and reload; never logged.
 */
char *
ngx_http_sandbox_mcp_egress_credential(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_sandbox_mcp_egress_loc_conf_t *lcf = conf;

    char        *rv;
    size_t       len;
    ngx_str_t   *value, plain;
    ngx_uint_t   format;
    u_char       secret[SMCP_SECRET_MAX];

    static const char  *formats[] = { "raw", "bearer", "basic", "token",
                                      NULL };

    if (lcf->credential.len) {
        return "is duplicate";
    }

    value = cf->args->elts;
    format = NGX_HTTP_SANDBOX_MCP_CRED_RAW;

    if (cf->args->nelts == 3) {
        for (format = 0; formats[format]; format++) {
            if (ngx_strcmp(value[2].data, formats[format]) == 0) {
                break;
            }
        }

        if (formats[format] == NULL) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "unknown credential format \"%V\" (raw, "
                               "bearer, basic or token)", &value[2]);
            return NGX_CONF_ERROR;
        }
    }

    rv = ngx_http_sandbox_mcp_egress_cred_read(cf, &value[1], secret, &len);

    if (rv == NGX_CONF_OK) {
        plain.data = secret;
        plain.len = len;

        if (ngx_http_sandbox_mcp_egress_cred_value(cf, &lcf->credential,
                                                   format, &plain)
            != NGX_OK)
        {
            rv = NGX_CONF_ERROR;
        }
    }

    ngx_explicit_memzero(secret, sizeof(secret));

    return rv;
}
