/*
 * What every answer of the dashboard carries (Content-Security-Policy and
 * the other headers), and its JSON answers.
 */

#include "ngx_http_sandbox_mcp_ui_http.h"
#include "ngx_http_sandbox_mcp_http.h"


static ngx_str_t  ngx_http_sandbox_mcp_ui_csp = ngx_string(
    "default-src 'self'; script-src 'self'; style-src 'self'; "
    "img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; "
    "base-uri 'none'; form-action 'self'");


ngx_int_t
ngx_http_sandbox_mcp_ui_headers(ngx_http_request_t *r, ngx_uint_t no_store)
{
    ngx_uint_t  i;

    static struct {
        const char  *key;
        ngx_str_t    value;
    } headers[] = {
        { "Referrer-Policy", ngx_string("no-referrer") },
        { "X-Content-Type-Options", ngx_string("nosniff") },
        { "Cross-Origin-Opener-Policy", ngx_string("same-origin") },
        { "Cross-Origin-Resource-Policy", ngx_string("same-origin") },
        { "Cache-Control", ngx_string("no-store") }
    };

    if (ngx_http_sandbox_mcp_add_header(r, "Content-Security-Policy",
                                        &ngx_http_sandbox_mcp_ui_csp)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    for (i = 0; i < sizeof(headers) / sizeof(headers[0]); i++) {
        if (!no_store && i == sizeof(headers) / sizeof(headers[0]) - 1) {
            break;
        }

        if (ngx_http_sandbox_mcp_add_header(r, headers[i].key,
                                            &headers[i].value)
            != NGX_OK)
        {
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


ngx_int_t
ngx_http_sandbox_mcp_ui_send_json(ngx_http_request_t *r, ngx_uint_t status,
    json_t *json, const char *message)
{
    json_t     *err;
    ngx_int_t   rc;

    static ngx_str_t  one = ngx_string("1");

    if (ngx_http_sandbox_mcp_ui_headers(r, 1) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (json) {
        return ngx_http_sandbox_mcp_send_json(r, status, json);
    }

    if (status == NGX_HTTP_SERVICE_UNAVAILABLE
        && ngx_http_sandbox_mcp_add_header(r, "Retry-After", &one) != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    err = json_pack("{s:s}", "error", message ? message : "error");
    if (err == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    rc = ngx_http_sandbox_mcp_send_json(r, status, err);
    json_decref(err);

    return rc;
}
