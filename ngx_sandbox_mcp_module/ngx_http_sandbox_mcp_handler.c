/*
 * The /mcp content handler: the checks, in the order of docs/contracts.md
 * ("HTTP behaviour"), then the body.
 */

#include "ngx_http_sandbox_mcp_handler.h"
#include "ngx_http_sandbox_mcp_auth.h"
#include "ngx_http_sandbox_mcp_http.h"
#include "ngx_http_sandbox_mcp_jsonrpc.h"
#include "ngx_http_sandbox_mcp_session.h"
#include "ngx_http_sandbox_mcp_request.h"


static void ngx_http_sandbox_mcp_body_handler(ngx_http_request_t *r);


ngx_int_t
ngx_http_sandbox_mcp_handler(ngx_http_request_t *r)
{
    ngx_int_t                         rc;
    ngx_table_elt_t                  *h;
    ngx_http_sandbox_mcp_ctx_t       *ctx;
    ngx_http_sandbox_mcp_loc_conf_t  *lcf;

    static ngx_str_t  allow = ngx_string("GET, POST, DELETE");

    lcf = ngx_http_get_module_loc_conf(r, ngx_http_sandbox_mcp_module);

    /* DNS rebinding: a page on another name must not reach us */

    rc = ngx_http_sandbox_mcp_check_origin(r, lcf);
    if (rc != NGX_DECLINED) {
        return rc;
    }

    ctx = ngx_http_sandbox_mcp_ctx_create(r);
    if (ctx == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (ngx_http_sandbox_mcp_authenticate(r, ctx, &rc) != NGX_OK) {
        return rc;
    }

    if (r->method != NGX_HTTP_POST && r->method != NGX_HTTP_DELETE
        && r->method != NGX_HTTP_GET)
    {
        if (ngx_http_sandbox_mcp_add_header(r, "Allow", &allow) != NGX_OK) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        return ngx_http_sandbox_mcp_send_error(r, NGX_HTTP_NOT_ALLOWED,
                               NGX_HTTP_SANDBOX_MCP_SERVER_ERROR,
                               "Method not allowed: use POST (GET for the "
                               "session's stream, DELETE to end it)");
    }

    h = ngx_http_sandbox_mcp_header(r, "MCP-Protocol-Version",
                                    sizeof("MCP-Protocol-Version") - 1);
    if (h) {
        if (!ngx_http_sandbox_mcp_version_supported(&h->value)) {
            return ngx_http_sandbox_mcp_send_error(r, NGX_HTTP_BAD_REQUEST,
                               NGX_HTTP_SANDBOX_MCP_SERVER_ERROR,
                               "Bad Request: unsupported MCP-Protocol-Version "
                               "(supported: 2025-11-25, 2025-06-18, "
                               "2025-03-26)");
        }

        ctx->header_version = h->value;
    }

    h = ngx_http_sandbox_mcp_header(r, "Mcp-Session-Id",
                                    sizeof("Mcp-Session-Id") - 1);
    if (h) {
        ctx->session_id = h->value;
    }

    if (r->method == NGX_HTTP_POST) {
        rc = ngx_http_sandbox_mcp_check_post(r, lcf);
        if (rc != NGX_DECLINED) {
            return rc;
        }

    } else if (r->method == NGX_HTTP_GET
               && !ngx_http_sandbox_mcp_accepts_stream(r))
    {
        return ngx_http_sandbox_mcp_send_error(r,
                               NGX_HTTP_SANDBOX_MCP_NOT_ACCEPTABLE,
                               NGX_HTTP_SANDBOX_MCP_SERVER_ERROR,
                               "Not Acceptable: Accept must list "
                               "text/event-stream");

    } else if (ctx->session_id.len == 0) {
        return ngx_http_sandbox_mcp_send_error(r, NGX_HTTP_BAD_REQUEST,
                               NGX_HTTP_SANDBOX_MCP_SERVER_ERROR,
                               "Bad Request: Mcp-Session-Id header is "
                               "required");
    }

    /* the body is kept whole in memory up to sandbox_mcp_max_body */
    r->request_body_in_single_buf = 1;

    rc = ngx_http_read_client_request_body(r,
                                           ngx_http_sandbox_mcp_body_handler);

    if (rc >= NGX_HTTP_SPECIAL_RESPONSE) {
        return rc;
    }

    return NGX_DONE;
}


static void
ngx_http_sandbox_mcp_body_handler(ngx_http_request_t *r)
{
    ngx_int_t  rc;

    rc = ngx_http_sandbox_mcp_process(r,
                       ngx_http_get_module_ctx(r, ngx_http_sandbox_mcp_module));

    if (rc == NGX_DONE) {
        /* a Redis reply will finish the request */
        return;
    }

    ngx_http_finalize_request(r, rc);
}
