/*
 * A run as the tools show it: the run hash (an HGETALL reply) as the run
 * object of opencode_get_result and opencode_cancel_run, the Redis values
 * as JSON, and the run's signed watchUrl.
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


/* a decimal from Redis as a JSON real; NULL when absent or not a number */
static json_t *
ngx_http_sandbox_mcp_json_number(redisReply *v)
{
    char    *end;
    double   d;
    char     buf[64];

    if (v == NULL || v->type != REDIS_REPLY_STRING || v->len == 0
        || v->len >= sizeof(buf))
    {
        return NULL;
    }

    ngx_memcpy(buf, v->str, v->len);
    buf[v->len] = '\0';

    d = strtod(buf, &end);

    if (*end != '\0' || d != d || d > 1e15 || d < -1e15) {
        return NULL;
    }

    return json_real(d);
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


static json_int_t
ngx_http_sandbox_mcp_int(redisReply *v)
{
    off_t  n;

    if (v == NULL || v->type != REDIS_REPLY_STRING || v->len == 0) {
        return 0;
    }

    if (v->str[0] == '-') {
        n = ngx_atoof((u_char *) v->str + 1, v->len - 1);
        return n == NGX_ERROR ? 0 : -(json_int_t) n;
    }

    n = ngx_atoof((u_char *) v->str, v->len);

    return n == NGX_ERROR ? 0 : (json_int_t) n;
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


json_t *
ngx_http_sandbox_mcp_watch_url(ngx_http_sandbox_mcp_call_t *call,
    ngx_str_t *run_id)
{
    u_char     *p;
    ngx_str_t   page, token;

    if (ngx_http_sandbox_mcp_watch_token(call, run_id, &token) != NGX_OK
        || ngx_http_sandbox_mcp_run_page(call, run_id,
                                         sizeof("?token=") - 1 + token.len,
                                         &page)
           != NGX_OK)
    {
        return NULL;
    }

    p = ngx_sprintf(page.data + page.len, "?token=%V", &token);

    return json_stringn((char *) page.data, p - page.data);
}


json_t *
ngx_http_sandbox_mcp_run_object(ngx_http_sandbox_mcp_call_t *call,
    redisReply *h)
{
    json_t      *files, *exit_code, *cost, *max_cost;
    redisReply  *v;

#define F(name)  ngx_http_sandbox_mcp_field(h, name)

    files = NULL;
    v = F("files_changed");

    if (v && v->type == REDIS_REPLY_STRING && v->len) {
        files = json_loadb(v->str, v->len, 0, NULL);
        if (!json_is_array(files)) {
            json_decref(files);
            files = NULL;
        }
    }

    if (files == NULL) {
        files = json_array();
    }

    v = F("exit_code");
    exit_code = (v && v->type == REDIS_REPLY_STRING && v->len)
                ? json_integer(ngx_http_sandbox_mcp_int(v)) : json_null();

    cost = ngx_http_sandbox_mcp_json_number(F("cost"));
    max_cost = ngx_http_sandbox_mcp_json_number(F("max_cost"));

    if (max_cost && json_real_value(max_cost) <= 0) {
        /* "0" or nothing: no cap */
        json_decref(max_cost);
        max_cost = NULL;
    }

    v = F("status");

    return json_pack("{s:s%, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o,"
                     " s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o,"
                     " s:{s:I, s:I, s:I, s:I, s:I}, s:o, s:o, s:I, s:b,"
                     " s:o*}",
        "runId", (char *) call->run_id.data, call->run_id.len,
        "sessionId", ngx_http_sandbox_mcp_json_text(F("session"), 0),
        "status", ngx_http_sandbox_mcp_json_text(v, 0),
        "title", ngx_http_sandbox_mcp_json_text(F("title"), 0),
        "task", ngx_http_sandbox_mcp_json_text(F("task"), 0),
        "repository", ngx_http_sandbox_mcp_json_text(F("repository"), 1),
        "branch", ngx_http_sandbox_mcp_json_text(F("branch"), 1),
        "model", ngx_http_sandbox_mcp_json_text(F("model"), 0),
        "createdAt", ngx_http_sandbox_mcp_json_time(F("created_at")),
        "startedAt", ngx_http_sandbox_mcp_json_time(F("started_at")),
        "finishedAt", ngx_http_sandbox_mcp_json_time(F("finished_at")),
        "result", ngx_http_sandbox_mcp_json_text(F("result"), 1),
        "error", ngx_http_sandbox_mcp_json_text(F("error"), 1),
        "exitCode", exit_code,
        "filesChanged", files,
        "diffStat", ngx_http_sandbox_mcp_json_text(F("diff_stat"), 1),
        "pullRequestUrl", ngx_http_sandbox_mcp_json_text(F("pr_url"), 1),
        "pullRequestStatus",
            ngx_http_sandbox_mcp_json_text(F("pr_status"), 1),
        "tokens",
            "input", ngx_http_sandbox_mcp_int(F("tokens_input")),
            "output", ngx_http_sandbox_mcp_int(F("tokens_output")),
            "reasoning", ngx_http_sandbox_mcp_int(F("tokens_reasoning")),
            "cacheRead", ngx_http_sandbox_mcp_int(F("tokens_cache_read")),
            "cacheWrite", ngx_http_sandbox_mcp_int(F("tokens_cache_write")),
        "cost", cost ? cost : json_real(0),
        "maxCostUsd", max_cost ? max_cost : json_null(),
        "timeoutSeconds", ngx_http_sandbox_mcp_int(F("timeout")),
        "cancelRequested", ngx_http_sandbox_mcp_int(F("cancel_requested"))
                           != 0,
        "watchUrl", ngx_http_sandbox_mcp_watch_url(call, &call->run_id));

#undef F
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
