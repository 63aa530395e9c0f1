/*
 * A run as the tools show it: fields of the run hash (an HGETALL reply),
 * Redis values as JSON, and the run's signed watchUrl.  The run object of
 * opencode_get_result and opencode_cancel_run is written as text by
 * ngx_http_sandbox_mcp_run_json.c.
 */

#include "ngx_http_sandbox_mcp_run.h"
#include "ngx_http_sandbox_mcp_watch_token.h"


ngx_str_t  ngx_http_sandbox_mcp_events_maxlen =
    ngx_string(SMCP_EVENTS_MAXLEN);


int64_t
ngx_http_sandbox_mcp_now_ms(void)
{
    ngx_time_t  *tp;

    tp = ngx_timeofday();

    return (int64_t) tp->sec * 1000 + tp->msec;
}


redisReply *
ngx_http_sandbox_mcp_field(redisReply *h, const char *name)
{
    size_t  i, n;

    n = ngx_strlen(name);

    for (i = 0; i + 1 < h->elements; i += 2) {
        if (h->element[i]->len == n
            && ngx_strncmp(h->element[i]->str, name, n) == 0)
        {
            return h->element[i + 1];
        }
    }

    return NULL;
}


ngx_uint_t
ngx_http_sandbox_mcp_reply_eq(redisReply *r, ngx_str_t *s)
{
    return r->type == REDIS_REPLY_STRING && r->len == s->len
           && ngx_strncmp(r->str, s->data, s->len) == 0;
}


ngx_uint_t
ngx_http_sandbox_mcp_reply_is(redisReply *r, const char *s)
{
    return r->type == REDIS_REPLY_STRING && r->len == ngx_strlen(s)
           && ngx_strncmp(r->str, s, r->len) == 0;
}


/* a string from Redis as JSON: null when absent or empty (if nullable) */
json_t *
ngx_http_sandbox_mcp_json_text(redisReply *v, ngx_uint_t nullable)
{
    json_t  *s;

    if (v == NULL || v->type != REDIS_REPLY_STRING
        || (v->len == 0 && nullable))
    {
        return nullable ? json_null() : json_string("");
    }

    s = json_stringn(v->str, v->len);

    if (s == NULL) {
        /* not UTF-8: the bytes are replaced in place, the reply is ours */
        smcp_utf8_sanitize(v->str, v->len);
        s = json_stringn(v->str, v->len);
    }

    return s;
}


json_t *
ngx_http_sandbox_mcp_json_time(redisReply *v)
{
    int64_t  ms;
    char     buf[40];

    if (v == NULL || v->type != REDIS_REPLY_STRING || v->len == 0) {
        return json_null();
    }

    ms = ngx_atoof((u_char *) v->str, v->len);
    if (ms <= 0) {
        return json_null();
    }

    smcp_iso8601_ms(buf, sizeof(buf), ms);

    return json_string(buf);
}


ngx_int_t
ngx_http_sandbox_mcp_run_page(ngx_http_sandbox_mcp_call_t *call,
    ngx_str_t *run_id, size_t reserve, ngx_str_t *page)
{
    u_char                            *p;
    size_t                             len;
    ngx_str_t                         *host, ui;
    ngx_http_request_t                *r;
    ngx_http_sandbox_mcp_loc_conf_t   *lcf;
    ngx_http_sandbox_mcp_main_conf_t  *mcf;

    static ngx_str_t  localhost = ngx_string("localhost");

    r = call->ctx->request;
    lcf = ngx_http_get_module_loc_conf(r, ngx_http_sandbox_mcp_module);
    mcf = ngx_http_get_module_main_conf(r, ngx_http_sandbox_mcp_module);

    host = r->headers_in.host ? &r->headers_in.host->value : &localhost;

    /* the dashboard's location (sandbox_mcp_ui), /ui/ when none is */
    ui = mcf->ui_location;

    if (ui.len == 0) {
        ngx_str_set(&ui, "/ui/");
    }

    len = ngx_max(lcf->public_url.len, sizeof("https://") - 1 + host->len)
          + ui.len + sizeof("runs/") - 1 + run_id->len;

    page->data = ngx_pnalloc(r->pool, len + reserve);
    if (page->data == NULL) {
        return NGX_ERROR;
    }

    if (lcf->public_url.len) {
        p = ngx_cpymem(page->data, lcf->public_url.data,
                       lcf->public_url.len);

    } else {
        p = ngx_sprintf(page->data, "%s://%V",
#if (NGX_HTTP_SSL)
                        r->connection->ssl ? "https" :
#endif
                        "http", host);
    }

    p = ngx_sprintf(p, "%Vruns/%V", &ui, run_id);
    page->len = p - page->data;

    return NGX_OK;
}


ngx_int_t
ngx_http_sandbox_mcp_watch_url_text(ngx_http_sandbox_mcp_call_t *call,
    ngx_str_t *run_id, ngx_str_t *url)
{
    u_char     *p;
    ngx_str_t   token;

    if (ngx_http_sandbox_mcp_watch_token(call, run_id, &token) != NGX_OK
        || ngx_http_sandbox_mcp_run_page(call, run_id,
                                         sizeof("?token=") - 1 + token.len,
                                         url)
           != NGX_OK)
    {
        return NGX_ERROR;
    }

    p = ngx_sprintf(url->data + url->len, "?token=%V", &token);
    url->len = p - url->data;

    return NGX_OK;
}


/* the HGETALL reply is this tenant's run */
ngx_uint_t
ngx_http_sandbox_mcp_run_visible(ngx_http_sandbox_mcp_call_t *call,
    redisReply *h)
{
    redisReply  *t;

    if (h->type != REDIS_REPLY_ARRAY || h->elements == 0) {
        return 0;
    }

    t = ngx_http_sandbox_mcp_field(h, "tenant");

    return t && t->type == REDIS_REPLY_STRING
           && t->len == call->ctx->tenant.len
           && ngx_strncmp(t->str, call->ctx->tenant.data, t->len) == 0;
}


ngx_uint_t
ngx_http_sandbox_mcp_terminal(redisReply *h)
{
    redisReply  *s;

    s = ngx_http_sandbox_mcp_field(h, "status");

    if (s == NULL || s->type != REDIS_REPLY_STRING) {
        return 0;
    }

    return (s->len == sizeof(SMCP_STATUS_COMPLETED) - 1
            && ngx_strncmp(s->str, SMCP_STATUS_COMPLETED, s->len) == 0)
           || (s->len == sizeof(SMCP_STATUS_FAILED) - 1
               && ngx_strncmp(s->str, SMCP_STATUS_FAILED, s->len) == 0)
           || (s->len == sizeof(SMCP_STATUS_CANCELLED) - 1
               && ngx_strncmp(s->str, SMCP_STATUS_CANCELLED, s->len) == 0);
}
