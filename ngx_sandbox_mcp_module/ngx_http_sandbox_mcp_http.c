/*
 * HTTP for /mcp: the request checks (Host, Origin, Accept, Content-Type,
 * size), the body, and the JSON answers (with their JSON-RPC error shape).
 */

#include "ngx_http_sandbox_mcp_http.h"
#include "ngx_http_sandbox_mcp_redis.h"
#include "ngx_http_sandbox_mcp_defaults.h"


ngx_table_elt_t *
ngx_http_sandbox_mcp_header(ngx_http_request_t *r, const char *name,
    size_t len)
{
    ngx_uint_t        i;
    ngx_list_part_t  *part;
    ngx_table_elt_t  *h;

    part = &r->headers_in.headers.part;
    h = part->elts;

    for (i = 0; /* void */ ; i++) {

        if (i >= part->nelts) {
            if (part->next == NULL) {
                return NULL;
            }

            part = part->next;
            h = part->elts;
            i = 0;
        }

        if (h[i].key.len == len
            && ngx_strncasecmp(h[i].key.data, (u_char *) name, len) == 0)
        {
            return &h[i];
        }
    }
}


static void
ngx_http_sandbox_mcp_json_cleanup(void *data)
{
    json_decref(data);
}


ngx_int_t
ngx_http_sandbox_mcp_add_cleanup(ngx_http_request_t *r, void *data,
    json_t *json)
{
    ngx_pool_cleanup_t  *cln;

    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (cln == NULL) {
        json_decref(json);
        return NGX_ERROR;
    }

    cln->handler = ngx_http_sandbox_mcp_json_cleanup;
    cln->data = json;

    return NGX_OK;
}


ngx_int_t
ngx_http_sandbox_mcp_send_body(ngx_http_request_t *r, ngx_uint_t status,
    const char *type, u_char *data, size_t len)
{
    ngx_str_t  part;

    part.data = data;
    part.len = len;

    return ngx_http_sandbox_mcp_send_parts(r, status, type, &part, 1);
}


ngx_int_t
ngx_http_sandbox_mcp_send_parts(ngx_http_request_t *r, ngx_uint_t status,
    const char *type, ngx_str_t *parts, ngx_uint_t n)
{
    off_t         len;
    ngx_int_t     rc;
    ngx_buf_t    *b;
    ngx_uint_t    i, k;
    ngx_chain_t  *cl, out[NGX_HTTP_SANDBOX_MCP_SEND_PARTS];

    if (n > NGX_HTTP_SANDBOX_MCP_SEND_PARTS) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    /* an unread body on a keep-alive connection would be taken for the
     * next request */
    rc = ngx_http_discard_request_body(r);
    if (rc != NGX_OK) {
        return rc;
    }

    len = 0;

    for (i = 0; i < n; i++) {
        len += parts[i].len;
    }

    r->headers_out.status = status;
    r->headers_out.content_length_n = len;

    if (type) {
        r->headers_out.content_type.data = (u_char *) type;
        r->headers_out.content_type.len = ngx_strlen(type);
        r->headers_out.content_type_len = r->headers_out.content_type.len;
    }

    if (len == 0 || r->method == NGX_HTTP_HEAD) {
        /* no body: a zero-size buffer is no output */
        r->header_only = 1;
        return ngx_http_send_header(r);
    }

    /* one buffer per part, no copy: the header and every part go out in
     * one writev */

    cl = NULL;

    for (i = 0, k = 0; i < n; i++) {
        if (parts[i].len == 0) {
            continue;
        }

        b = ngx_calloc_buf(r->pool);
        if (b == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        b->pos = parts[i].data;
        b->last = parts[i].data + parts[i].len;
        b->memory = 1;

        out[k].buf = b;
        out[k].next = NULL;

        if (cl) {
            cl->next = &out[k];
        }

        cl = &out[k++];
    }

    cl->buf->last_buf = (r == r->main) ? 1 : 0;
    cl->buf->last_in_chain = 1;

    rc = ngx_http_send_header(r);

    if (rc == NGX_ERROR || rc > NGX_OK || r->header_only) {
        return rc;
    }

    return ngx_http_output_filter(r, &out[0]);
}


ngx_int_t
ngx_http_sandbox_mcp_send_json(ngx_http_request_t *r, ngx_uint_t status,
    json_t *json)
{
    char    *s;
    size_t   len;
    u_char  *p;

    if (json == NULL) {
        return ngx_http_sandbox_mcp_send_body(r, status, NULL, NULL, 0);
    }

    s = json_dumps(json, JSON_COMPACT);
    if (s == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    len = ngx_strlen(s);

    p = ngx_pnalloc(r->pool, len + 1);
    if (p == NULL) {
        free(s);
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_memcpy(p, s, len);
    p[len] = '\n';
    free(s);

    return ngx_http_sandbox_mcp_send_body(r, status, "application/json", p,
                                          len + 1);
}


/* outside nginx's request flow (Redis callbacks, timers): the request
 * finalized, then what it posted run */
void
ngx_http_sandbox_mcp_end_request(ngx_http_request_t *r, ngx_int_t rc)
{
    ngx_connection_t  *c;

    c = r->connection;

    ngx_http_finalize_request(r, rc);
    ngx_http_run_posted_requests(c);
}


ngx_int_t
ngx_http_sandbox_mcp_add_header(ngx_http_request_t *r, const char *key,
    ngx_str_t *value)
{
    ngx_table_elt_t  *h;

    h = ngx_list_push(&r->headers_out.headers);
    if (h == NULL) {
        return NGX_ERROR;
    }

    h->hash = 1;
    h->key.data = (u_char *) key;
    h->key.len = ngx_strlen(key);
    h->value = *value;

    return NGX_OK;
}


json_t *
ngx_http_sandbox_mcp_error_object(json_t *id, ngx_int_t code,
    const char *message)
{
    return json_pack("{s:s, s:{s:I, s:s}, s:O?}", "jsonrpc", "2.0",
                     "error", "code", (json_int_t) code, "message", message,
                     "id", id ? id : json_null());
}


ngx_int_t
ngx_http_sandbox_mcp_send_error(ngx_http_request_t *r, ngx_uint_t status,
    ngx_int_t code, const char *message)
{
    json_t     *err;
    ngx_int_t   rc;

    err = ngx_http_sandbox_mcp_error_object(NULL, code, message);
    if (err == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    rc = ngx_http_sandbox_mcp_send_json(r, status, err);
    json_decref(err);

    return rc;
}


ngx_int_t
ngx_http_sandbox_mcp_send_unavailable(ngx_http_request_t *r)
{
    static ngx_str_t  one = ngx_string("1");

    if (ngx_http_sandbox_mcp_add_header(r, "Retry-After", &one) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    return ngx_http_sandbox_mcp_send_error(r, NGX_HTTP_SERVICE_UNAVAILABLE,
                                    NGX_HTTP_SANDBOX_MCP_INTERNAL_ERROR,
                                    ngx_http_sandbox_mcp_redis_unavailable());
}


static ngx_uint_t
ngx_http_sandbox_mcp_host_listed(ngx_array_t *hosts, u_char *host,
    size_t len)
{
    ngx_str_t   *h;
    ngx_uint_t   i;

    h = hosts->elts;

    for (i = 0; i < hosts->nelts; i++) {
        if ((h[i].len == 1 && h[i].data[0] == '*')
            || (h[i].len == len && ngx_strncasecmp(h[i].data, host, len) == 0))
        {
            return 1;
        }
    }

    return 0;
}


ngx_uint_t
ngx_http_sandbox_mcp_host_allowed(ngx_http_request_t *r,
    ngx_http_sandbox_mcp_loc_conf_t *lcf)
{
    ngx_str_t  *host;

    host = &r->headers_in.server;

    if (host->len == 0) {
        /* HTTP/1.0 without Host: nothing a browser would send */
        return 1;
    }

    return ngx_http_sandbox_mcp_host_listed(lcf->allowed_hosts, host->data,
                                            host->len);
}


static ngx_uint_t
ngx_http_sandbox_mcp_origin_allowed(ngx_http_request_t *r,
    ngx_http_sandbox_mcp_loc_conf_t *lcf)
{
    u_char           *p, *last, *host;
    ngx_str_t        *o;
    ngx_uint_t        i;
    ngx_table_elt_t  *origin;

    origin = ngx_http_sandbox_mcp_header(r, "Origin", sizeof("Origin") - 1);

    if (origin == NULL) {
        /* not a browser: CLI and SDK clients send none */
        return 1;
    }

    if (lcf->allowed_origins) {
        o = lcf->allowed_origins->elts;

        for (i = 0; i < lcf->allowed_origins->nelts; i++) {
            if ((o[i].len == 1 && o[i].data[0] == '*')
                || (o[i].len == origin->value.len
                    && ngx_strncasecmp(o[i].data, origin->value.data,
                                       o[i].len) == 0))
            {
                return 1;
            }
        }

        return 0;
    }

    /* default: http(s)://<an allowed host>[:port] */

    p = origin->value.data;
    last = p + origin->value.len;

    if (last - p > 7 && ngx_strncasecmp(p, (u_char *) "http://", 7) == 0) {
        p += 7;

    } else if (last - p > 8
               && ngx_strncasecmp(p, (u_char *) "https://", 8) == 0)
    {
        p += 8;

    } else {
        return 0;
    }

    host = p;

    if (*p == '[') {
        p = ngx_strlchr(p, last, ']');
        if (p == NULL) {
            return 0;
        }

        p++;

    } else {
        while (p < last && *p != ':' && *p != '/') {
            p++;
        }
    }

    if (p < last && *p != ':') {
        return 0;
    }

    return ngx_http_sandbox_mcp_host_listed(lcf->allowed_hosts, host,
                                            p - host);
}


/* the Accept header lists the media type (a substring match, as before) */
static ngx_uint_t
ngx_http_sandbox_mcp_accept_lists(ngx_table_elt_t *accept, const char *type)
{
    return ngx_strlcasestrn(accept->value.data,
                            accept->value.data + accept->value.len,
                            (u_char *) type, ngx_strlen(type) - 1)
           != NULL;
}


/* GET: the stream's media type is listed */
ngx_uint_t
ngx_http_sandbox_mcp_accepts_stream(ngx_http_request_t *r)
{
    ngx_table_elt_t  *accept;

    accept = ngx_http_sandbox_mcp_header(r, "Accept", sizeof("Accept") - 1);

    return accept != NULL
           && ngx_http_sandbox_mcp_accept_lists(accept, "text/event-stream");
}


/* POST: both media types are listed */
static ngx_uint_t
ngx_http_sandbox_mcp_accepts(ngx_http_request_t *r)
{
    ngx_table_elt_t  *accept;

    accept = ngx_http_sandbox_mcp_header(r, "Accept", sizeof("Accept") - 1);

    return accept != NULL
           && ngx_http_sandbox_mcp_accept_lists(accept, "application/json")
           && ngx_http_sandbox_mcp_accept_lists(accept, "text/event-stream");
}


static ngx_uint_t
ngx_http_sandbox_mcp_json_content(ngx_http_request_t *r)
{
    ngx_table_elt_t  *ct;
    size_t            n;

    ct = r->headers_in.content_type;
    n = sizeof("application/json") - 1;

    if (ct == NULL || ct->value.len < n
        || ngx_strncasecmp(ct->value.data, (u_char *) "application/json", n)
           != 0)
    {
        return 0;
    }

    return ct->value.len == n || ct->value.data[n] == ';'
           || ct->value.data[n] == ' ';
}


/* Host and Origin: NGX_DECLINED when allowed, else the 403 sent */
ngx_int_t
ngx_http_sandbox_mcp_check_origin(ngx_http_request_t *r,
    ngx_http_sandbox_mcp_loc_conf_t *lcf)
{
    if (!ngx_http_sandbox_mcp_host_allowed(r, lcf)) {
        ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                      "sandbox_mcp: Host \"%V\" not allowed",
                      &r->headers_in.server);
        return ngx_http_sandbox_mcp_send_error(r, NGX_HTTP_FORBIDDEN,
                                     NGX_HTTP_SANDBOX_MCP_SERVER_ERROR,
                                     "Forbidden: Host header not allowed");
    }

    if (!ngx_http_sandbox_mcp_origin_allowed(r, lcf)) {
        ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                      "sandbox_mcp: Origin not allowed");
        return ngx_http_sandbox_mcp_send_error(r, NGX_HTTP_FORBIDDEN,
                                     NGX_HTTP_SANDBOX_MCP_SERVER_ERROR,
                                     "Forbidden: Origin not allowed");
    }

    return NGX_DECLINED;
}


/* a POST's Accept, Content-Type and size: NGX_DECLINED, else the error */
ngx_int_t
ngx_http_sandbox_mcp_check_post(ngx_http_request_t *r,
    ngx_http_sandbox_mcp_loc_conf_t *lcf)
{
    if (!ngx_http_sandbox_mcp_accepts(r)) {
        return ngx_http_sandbox_mcp_send_error(r,
                           NGX_HTTP_SANDBOX_MCP_NOT_ACCEPTABLE,
                           NGX_HTTP_SANDBOX_MCP_SERVER_ERROR,
                           "Not Acceptable: Accept must list both "
                           "application/json and text/event-stream");
    }

    if (!ngx_http_sandbox_mcp_json_content(r)) {
        return ngx_http_sandbox_mcp_send_error(r,
                           NGX_HTTP_UNSUPPORTED_MEDIA_TYPE,
                           NGX_HTTP_SANDBOX_MCP_SERVER_ERROR,
                           "Unsupported Media Type: Content-Type must be "
                           "application/json");
    }

    if (r->headers_in.content_length_n > (off_t) lcf->max_body) {
        return ngx_http_sandbox_mcp_send_error(r,
                           NGX_HTTP_REQUEST_ENTITY_TOO_LARGE,
                           NGX_HTTP_SANDBOX_MCP_SERVER_ERROR,
                           "Payload Too Large: the body exceeds "
                           "sandbox_mcp_max_body");
    }

    return NGX_DECLINED;
}


ngx_int_t
ngx_http_sandbox_mcp_read_body(ngx_http_request_t *r, ngx_str_t *body,
    size_t max)
{
    size_t        len;
    u_char       *p;
    ssize_t       n;
    ngx_buf_t    *b;
    ngx_chain_t  *cl;

    len = 0;

    if (r->request_body == NULL || r->request_body->bufs == NULL) {
        ngx_str_null(body);
        return NGX_OK;
    }

    for (cl = r->request_body->bufs; cl; cl = cl->next) {
        b = cl->buf;
        len += b->in_file ? (size_t) (b->file_last - b->file_pos)
                          : (size_t) (b->last - b->pos);
    }

    if (len > max) {
        return NGX_DECLINED;
    }

    body->data = ngx_pnalloc(r->pool, len + 1);
    if (body->data == NULL) {
        return NGX_ERROR;
    }

    p = body->data;

    for (cl = r->request_body->bufs; cl; cl = cl->next) {
        b = cl->buf;

        if (b->in_file) {
            /* bodies beyond client_body_buffer_size were spooled to disk */
            n = ngx_read_file(b->file, p, b->file_last - b->file_pos,
                              b->file_pos);
            if (n != b->file_last - b->file_pos) {
                return NGX_ERROR;
            }

            p += n;

        } else if (b->last > b->pos) {
            /* (an empty body's buffer may have no memory at all) */
            p = ngx_cpymem(p, b->pos, b->last - b->pos);
        }
    }

    body->len = p - body->data;

    return NGX_OK;
}


/* what escaping adds to each byte */
static u_char  ngx_http_sandbox_mcp_json_extra[256] = {
    5, 5, 5, 5, 5, 5, 5, 5, 1, 1, 1, 5, 1, 1, 5, 5,     /* \b \t \n \f \r */
    5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5,
    0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,     /* " */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0      /* \ */
    /* the rest 0 */
};


/* the letter of a two-byte escape (ngx_escape_json()'s) */
static u_char  ngx_http_sandbox_mcp_json_short[256] = {
    ['"'] = '"', ['\\'] = '\\', ['\b'] = 'b', ['\t'] = 't', ['\n'] = 'n',
    ['\f'] = 'f', ['\r'] = 'r'
};


#define ngx_http_sandbox_mcp_ones   0x0101010101010101ULL
#define ngx_http_sandbox_mcp_highs  0x8080808080808080ULL


/* 0 when none of the 8 bytes of w needs escaping (none below 0x20, no '"',
 * no '\\'): the bit tricks "hasless" and "haszero", exact as a yes/no */
static ngx_inline uint64_t
ngx_http_sandbox_mcp_json_special(uint64_t w)
{
    uint64_t  q, b;

    q = w ^ (ngx_http_sandbox_mcp_ones * '"');
    b = w ^ (ngx_http_sandbox_mcp_ones * '\\');

    return (((w - ngx_http_sandbox_mcp_ones * 0x20) & ~w)
            | ((q - ngx_http_sandbox_mcp_ones) & ~q)
            | ((b - ngx_http_sandbox_mcp_ones) & ~b))
           & ngx_http_sandbox_mcp_highs;
}


/* one byte escaped as ngx_escape_json() escapes it */
static ngx_inline u_char *
ngx_http_sandbox_mcp_escape_byte(u_char *dst, u_char *src)
{
    switch (ngx_http_sandbox_mcp_json_extra[*src]) {

    case 0:
        *dst++ = *src;
        return dst;

    case 1:
        *dst++ = '\\';
        *dst++ = ngx_http_sandbox_mcp_json_short[*src];
        return dst;

    default:
        return (u_char *) ngx_escape_json(dst, src, 1);
    }
}


/* the end of the run of whole words from src that need no escaping */
static ngx_inline u_char *
ngx_http_sandbox_mcp_json_plain(u_char *src, u_char *last)
{
    uint64_t  w;

    while (last - src >= 8) {
        ngx_memcpy(&w, src, 8);

        if (ngx_http_sandbox_mcp_json_special(w)) {
            break;
        }

        src += 8;
    }

    return src;
}


/*
 * ngx_escape_json()'s contract (dst NULL: the bytes escaping adds), 8
 * bytes at a time where none needs escaping (long runs of text), byte by
 * byte in the words that hold one and in the tail
 */
uintptr_t
ngx_http_sandbox_mcp_escape_json(u_char *dst, u_char *src, size_t size)
{
    u_char  *last, *end, *plain;
    size_t   len;

    last = src + size;
    len = 0;

    while (src < last) {
        plain = ngx_http_sandbox_mcp_json_plain(src, last);

        if (dst) {
            dst = ngx_cpymem(dst, src, plain - src);
        }

        src = plain;
        end = (last - src >= 8) ? src + 8 : last;

        if (dst == NULL) {
            while (src < end) {
                len += ngx_http_sandbox_mcp_json_extra[*src++];
            }

            continue;
        }

        while (src < end) {
            dst = ngx_http_sandbox_mcp_escape_byte(dst, src++);
        }
    }

    return dst ? (uintptr_t) dst : (uintptr_t) len;
}


ngx_int_t
ngx_http_sandbox_mcp_add_variables(ngx_conf_t *cf, ngx_http_variable_t *vars)
{
    ngx_http_variable_t  *var, *v;

    for (v = vars; v->name.len; v++) {
        var = ngx_http_add_variable(cf, &v->name, v->flags);
        if (var == NULL) {
            return NGX_ERROR;
        }

        var->get_handler = v->get_handler;
        var->data = v->data;
    }

    return NGX_OK;
}
