/*
 * Server-sent events (text/event-stream) on a request: the head of the
 * answer, events and raw text flushed as they come, the write handler that
 * sends what nginx held back, a heartbeat timer for long streams, and the
 * end.  Used by progress (a waiting tool call), the MCP GET stream and the
 * dashboard's streams.
 */

#include "ngx_http_sandbox_mcp_sse.h"
#include "ngx_http_sandbox_mcp_http.h"


/* nginx held bytes: sent as the socket takes them */
void
ngx_http_sandbox_mcp_sse_writer(ngx_http_request_t *r)
{
    ngx_connection_t          *c;
    ngx_http_core_loc_conf_t  *clcf;

    c = r->connection;

    if (c->write->timedout) {
        c->timedout = 1;
        ngx_http_finalize_request(r, NGX_HTTP_REQUEST_TIME_OUT);
        return;
    }

    if (ngx_http_output_filter(r, NULL) == NGX_ERROR) {
        ngx_http_finalize_request(r, NGX_ERROR);
        return;
    }

    if (r->out || c->buffered) {
        if (!c->write->timer_set) {
            clcf = ngx_http_get_module_loc_conf(r, ngx_http_core_module);
            ngx_add_timer(c->write, clcf->send_timeout);
        }

    } else if (c->write->timer_set) {
        ngx_del_timer(c->write);
    }

    if (ngx_handle_write_event(c->write, 0) != NGX_OK) {
        ngx_http_finalize_request(r, NGX_ERROR);
    }
}


/* bytes on the stream; last: it ends with them */
static ngx_int_t
ngx_http_sandbox_mcp_sse_out(ngx_http_request_t *r, ngx_buf_t *b,
    ngx_uint_t last)
{
    ngx_int_t     rc;
    ngx_chain_t   out;

    b->flush = 1;
    b->last_buf = last;

    out.buf = b;
    out.next = NULL;

    rc = ngx_http_output_filter(r, &out);

    if (rc == NGX_AGAIN && !last) {
        ngx_http_sandbox_mcp_sse_writer(r);
        return NGX_OK;
    }

    return rc == NGX_ERROR ? NGX_ERROR : NGX_OK;
}


ngx_int_t
ngx_http_sandbox_mcp_sse_text(ngx_http_request_t *r, u_char *text,
    size_t len)
{
    ngx_buf_t  *b;

    b = ngx_create_temp_buf(r->pool, len);
    if (b == NULL) {
        return NGX_ERROR;
    }

    b->last = ngx_cpymem(b->last, text, len);

    return ngx_http_sandbox_mcp_sse_out(r, b, 0);
}


ngx_int_t
ngx_http_sandbox_mcp_sse_send(ngx_http_request_t *r, int64_t id,
    json_t *json, ngx_uint_t last)
{
    char       *s;
    size_t      len;
    ngx_buf_t  *b;

    s = json ? json_dumps(json, JSON_COMPACT) : NULL;
    json_decref(json);

    if (s == NULL) {
        return NGX_ERROR;
    }

    len = ngx_strlen(s);

    b = ngx_create_temp_buf(r->pool, len + NGX_INT64_LEN
                                     + sizeof("id: \nevent: message\ndata: "
                                              "\n\n"));
    if (b == NULL) {
        free(s);
        return NGX_ERROR;
    }

    if (id >= 0) {
        b->last = ngx_sprintf(b->last, "id: %L\n", id);
    }

    b->last = ngx_sprintf(b->last, "event: message\ndata: %*s\n\n", len, s);
    free(s);

    return ngx_http_sandbox_mcp_sse_out(r, b, last);
}



ngx_int_t
ngx_http_sandbox_mcp_sse_header(ngx_http_request_t *r)
{
    static ngx_str_t  no_cache = ngx_string("no-cache");

    if (ngx_http_sandbox_mcp_add_header(r, "Cache-Control", &no_cache)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    return ngx_http_sandbox_mcp_sse_head(r) == NGX_ERROR ? NGX_ERROR : NGX_OK;
}


ngx_int_t
ngx_http_sandbox_mcp_sse_head(ngx_http_request_t *r)
{
    ngx_int_t  rc;

    static ngx_str_t  no = ngx_string("no");

    if (ngx_http_sandbox_mcp_add_header(r, "X-Accel-Buffering", &no)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    r->headers_out.status = NGX_HTTP_OK;
    r->headers_out.content_length_n = -1;
    ngx_str_set(&r->headers_out.content_type, "text/event-stream");
    r->headers_out.content_type_len = r->headers_out.content_type.len;
    r->keepalive = 0;

    rc = ngx_http_send_header(r);

    if (rc == NGX_ERROR || rc > NGX_OK) {
        return NGX_ERROR;
    }

    return r->header_only ? NGX_DONE : NGX_OK;
}


void
ngx_http_sandbox_mcp_sse_keep(ngx_http_request_t *r, ngx_event_t *heartbeat,
    ngx_event_handler_pt beat, void *data, ngx_msec_t every,
    ngx_http_event_handler_pt read, ngx_http_event_handler_pt write)
{
    heartbeat->handler = beat;
    heartbeat->data = data;
    heartbeat->log = r->connection->log;
    heartbeat->cancelable = 1;

    /* the stream ends on the client's close and on the worker's shutdown
     * (nginx closes idle connections then: this one is marked so) */
    r->read_event_handler = read;
    r->write_event_handler = write;
    r->connection->idle = 1;

    ngx_add_timer(heartbeat, every);
}


ngx_int_t
ngx_http_sandbox_mcp_sse_close(ngx_http_request_t *r)
{
    ngx_buf_t    *b;
    ngx_chain_t   out;

    if (!r->header_sent && ngx_http_sandbox_mcp_sse_header(r) != NGX_OK) {
        return NGX_ERROR;
    }

    b = ngx_calloc_buf(r->pool);
    if (b == NULL) {
        return NGX_ERROR;
    }

    b->last_buf = 1;
    out.buf = b;
    out.next = NULL;

    return ngx_http_output_filter(r, &out) == NGX_ERROR ? NGX_ERROR : NGX_OK;
}
