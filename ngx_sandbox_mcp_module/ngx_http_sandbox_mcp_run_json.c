/*
 * The run object written straight as JSON text from the run hash, in the
 * order and the form jansson's json_dumps(JSON_COMPACT) gave it when it
 * was built as json_t values (one malloc each, then dumped): strings
 * escaped as jansson escapes them (ngx_escape_json: the same rules), reals
 * as jansson prints them ("%.17g", ".0" when neither a point nor an
 * exponent, no "+" or leading zeros in the exponent), filesChanged as
 * jansson dumps the stored array.  Two passes over the fields: the length
 * (strings measured exactly), then the text.
 */

#include "ngx_http_sandbox_mcp_run_json.h"
#include "ngx_http_sandbox_mcp_http.h"
#include "ngx_http_sandbox_mcp_run.h"

#include <math.h>


typedef enum {
    NGX_HTTP_SANDBOX_MCP_RUN_TEXT = 0,   /* a string, "" when absent */
    NGX_HTTP_SANDBOX_MCP_RUN_NTEXT,      /* a string, null when absent or
                                            empty */
    NGX_HTTP_SANDBOX_MCP_RUN_TIME,       /* ms since the epoch: ISO-8601,
                                            null when absent or not > 0 */
    NGX_HTTP_SANDBOX_MCP_RUN_INT,        /* an integer, 0 when absent */
    NGX_HTTP_SANDBOX_MCP_RUN_NINT,       /* an integer, null when absent or
                                            empty */
    NGX_HTTP_SANDBOX_MCP_RUN_FILES,      /* the stored JSON array, [] */
    NGX_HTTP_SANDBOX_MCP_RUN_REAL,       /* a real, 0.0 when absent */
    NGX_HTTP_SANDBOX_MCP_RUN_CAP,        /* a real > 0, else null */
    NGX_HTTP_SANDBOX_MCP_RUN_BOOL        /* an integer not 0 */
} ngx_http_sandbox_mcp_run_type_e;


typedef struct {
    ngx_str_t    key;       /* what comes before the value */
    ngx_str_t    field;     /* in the run hash */
    ngx_uint_t   type;
} ngx_http_sandbox_mcp_run_field_t;


#define T(key, field, type)                                                   \
    { ngx_string(key), ngx_string(field), NGX_HTTP_SANDBOX_MCP_RUN_ ## type }

static ngx_http_sandbox_mcp_run_field_t  ngx_http_sandbox_mcp_run_fields[] = {
    T(",\"sessionId\":", "session", TEXT),
    T(",\"status\":", "status", TEXT),
    T(",\"title\":", "title", TEXT),
    T(",\"task\":", "task", TEXT),
    T(",\"repository\":", "repository", NTEXT),
    T(",\"branch\":", "branch", NTEXT),
    T(",\"model\":", "model", TEXT),
    T(",\"agent\":", "agent", NTEXT),
    T(",\"createdAt\":", "created_at", TIME),
    T(",\"startedAt\":", "started_at", TIME),
    T(",\"finishedAt\":", "finished_at", TIME),
    T(",\"result\":", "result", NTEXT),
    T(",\"error\":", "error", NTEXT),
    T(",\"exitCode\":", "exit_code", NINT),
    T(",\"filesChanged\":", "files_changed", FILES),
    T(",\"diffStat\":", "diff_stat", NTEXT),
    T(",\"pullRequestUrl\":", "pr_url", NTEXT),
    T(",\"pullRequestStatus\":", "pr_status", NTEXT),
    T(",\"tokens\":{\"input\":", "tokens_input", INT),
    T(",\"output\":", "tokens_output", INT),
    T(",\"reasoning\":", "tokens_reasoning", INT),
    T(",\"cacheRead\":", "tokens_cache_read", INT),
    T(",\"cacheWrite\":", "tokens_cache_write", INT),
    T("},\"cost\":", "cost", REAL),
    T(",\"meteredCostUsd\":", "metered_cost", REAL),
    T(",\"maxCostUsd\":", "max_cost", CAP),
    T(",\"timeoutSeconds\":", "timeout", INT),
    T(",\"createPullRequest\":", "create_pr", BOOL),
    T(",\"baseBranch\":", "base_branch", NTEXT),
    T(",\"prTitle\":", "pr_title", NTEXT),
    T(",\"draft\":", "draft", BOOL),
    T(",\"image\":", "image", NTEXT),
    T(",\"cancelRequested\":", "cancel_requested", BOOL)
};

#undef T

#define NGX_HTTP_SANDBOX_MCP_RUN_NFIELDS                                      \
    (sizeof(ngx_http_sandbox_mcp_run_fields)                                  \
     / sizeof(ngx_http_sandbox_mcp_run_field_t))

/* the longest a value other than a string or the files can be */
#define NGX_HTTP_SANDBOX_MCP_RUN_SCALAR_MAX  64


/* a string of the hash, or NULL */
static ngx_inline ngx_uint_t
ngx_http_sandbox_mcp_run_has(redisReply *v)
{
    return v != NULL && v->type == REDIS_REPLY_STRING;
}


/* as jansson's jsonp_dtostr() (precision 17) */
static u_char *
ngx_http_sandbox_mcp_run_real(u_char *p, double d)
{
    int    n;
    char  *e, *start, *end;
    char   buf[NGX_HTTP_SANDBOX_MCP_RUN_SCALAR_MAX];

    if (d > -1e15 && d < 1e15 && d == (double) (int64_t) d
        && !(d == 0 && signbit(d)))
    {
        /* a whole number (most costs and caps): "%.17g" and ".0" */
        return ngx_sprintf(p, "%L.0", (int64_t) d);
    }

    n = snprintf(buf, sizeof(buf), "%.17g", d);

    if (n <= 0 || n >= (int) sizeof(buf) - 2) {
        return ngx_cpymem(p, "0.0", 3);
    }

    buf[n] = '\0';

    /* a point or an exponent: a real it stays when read back */
    if (strchr(buf, '.') == NULL && strchr(buf, 'e') == NULL) {
        buf[n++] = '.';
        buf[n++] = '0';
        buf[n] = '\0';
    }

    /* no "+" and no leading zeros in the exponent */
    e = strchr(buf, 'e');

    if (e) {
        start = e + 1;
        end = start + 1;

        if (*start == '-') {
            start++;
        }

        while (*end == '0') {
            end++;
        }

        if (end != start) {
            ngx_memmove(start, end, n - (end - buf));
            n -= end - start;
        }
    }

    return ngx_cpymem(p, buf, n);
}


/* a decimal of the hash, as ngx_http_sandbox_mcp_run.c has always read
 * them: NGX_DECLINED when absent or not a number */
ngx_int_t
ngx_http_sandbox_mcp_run_number(redisReply *v, double *d)
{
    char  *end;
    char   buf[NGX_HTTP_SANDBOX_MCP_RUN_SCALAR_MAX];

    if (!ngx_http_sandbox_mcp_run_has(v) || v->len == 0
        || v->len >= sizeof(buf))
    {
        return NGX_DECLINED;
    }

    ngx_memcpy(buf, v->str, v->len);
    buf[v->len] = '\0';

    *d = strtod(buf, &end);

    if (*end != '\0' || *d != *d || *d > 1e15 || *d < -1e15) {
        return NGX_DECLINED;
    }

    return NGX_OK;
}


static int64_t
ngx_http_sandbox_mcp_run_int(redisReply *v)
{
    off_t  n;

    if (!ngx_http_sandbox_mcp_run_has(v) || v->len == 0) {
        return 0;
    }

    if (v->str[0] == '-') {
        n = ngx_atoof((u_char *) v->str + 1, v->len - 1);
        return n == NGX_ERROR ? 0 : -(int64_t) n;
    }

    n = ngx_atoof((u_char *) v->str, v->len);

    return n == NGX_ERROR ? 0 : (int64_t) n;
}


/* the stored filesChanged as jansson dumps it, malloc()ed; NULL: [] */
static char *
ngx_http_sandbox_mcp_run_files(redisReply *v)
{
    char    *s;
    json_t  *files;

    if (!ngx_http_sandbox_mcp_run_has(v) || v->len == 0) {
        return NULL;
    }

    files = json_loadb(v->str, v->len, 0, NULL);

    s = json_is_array(files) ? json_dumps(files, JSON_COMPACT) : NULL;

    json_decref(files);

    return s;
}


/* the value's length at most; a string's, exactly (repaired first) */
static size_t
ngx_http_sandbox_mcp_run_value_len(ngx_uint_t type, redisReply *v,
    char *files)
{
    switch (type) {

    case NGX_HTTP_SANDBOX_MCP_RUN_TEXT:
    case NGX_HTTP_SANDBOX_MCP_RUN_NTEXT:

        if (!ngx_http_sandbox_mcp_run_has(v)) {
            return sizeof("null") - 1;
        }

        /* not UTF-8: the bytes are replaced in place, the reply is ours */
        smcp_utf8_sanitize(v->str, v->len);

        return 2 + v->len
               + ngx_http_sandbox_mcp_escape_json(NULL, (u_char *) v->str,
                                                  v->len);

    case NGX_HTTP_SANDBOX_MCP_RUN_FILES:
        return files ? ngx_strlen(files) : sizeof("[]") - 1;

    default:
        return NGX_HTTP_SANDBOX_MCP_RUN_SCALAR_MAX;
    }
}


static u_char *
ngx_http_sandbox_mcp_run_value(u_char *p, ngx_uint_t type, redisReply *v,
    char *files)
{
    char     buf[NGX_HTTP_SANDBOX_MCP_RUN_SCALAR_MAX];
    double   d;
    int64_t  ms;

    switch (type) {

    case NGX_HTTP_SANDBOX_MCP_RUN_TEXT:
    case NGX_HTTP_SANDBOX_MCP_RUN_NTEXT:

        if (!ngx_http_sandbox_mcp_run_has(v)
            || (v->len == 0 && type == NGX_HTTP_SANDBOX_MCP_RUN_NTEXT))
        {
            return type == NGX_HTTP_SANDBOX_MCP_RUN_NTEXT
                   ? ngx_cpymem(p, "null", 4) : ngx_cpymem(p, "\"\"", 2);
        }

        *p++ = '"';
        p = (u_char *) ngx_http_sandbox_mcp_escape_json(p, (u_char *) v->str,
                                                        v->len);
        *p++ = '"';

        return p;

    case NGX_HTTP_SANDBOX_MCP_RUN_TIME:

        ms = ngx_http_sandbox_mcp_run_has(v) && v->len
             ? ngx_atoof((u_char *) v->str, v->len) : 0;

        if (ms <= 0) {
            return ngx_cpymem(p, "null", 4);
        }

        smcp_iso8601_ms(buf, sizeof(buf), ms);

        return ngx_sprintf(p, "\"%s\"", buf);

    case NGX_HTTP_SANDBOX_MCP_RUN_INT:
        return ngx_sprintf(p, "%L", ngx_http_sandbox_mcp_run_int(v));

    case NGX_HTTP_SANDBOX_MCP_RUN_NINT:

        if (!ngx_http_sandbox_mcp_run_has(v) || v->len == 0) {
            return ngx_cpymem(p, "null", 4);
        }

        return ngx_sprintf(p, "%L", ngx_http_sandbox_mcp_run_int(v));

    case NGX_HTTP_SANDBOX_MCP_RUN_FILES:
        return files ? ngx_cpymem(p, files, ngx_strlen(files))
                     : ngx_cpymem(p, "[]", 2);

    case NGX_HTTP_SANDBOX_MCP_RUN_REAL:

        if (ngx_http_sandbox_mcp_run_number(v, &d) != NGX_OK) {
            d = 0;
        }

        return ngx_http_sandbox_mcp_run_real(p, d);

    case NGX_HTTP_SANDBOX_MCP_RUN_CAP:

        /* "0" or nothing: no cap */
        if (ngx_http_sandbox_mcp_run_number(v, &d) != NGX_OK || d <= 0) {
            return ngx_cpymem(p, "null", 4);
        }

        return ngx_http_sandbox_mcp_run_real(p, d);

    default: /* NGX_HTTP_SANDBOX_MCP_RUN_BOOL */
        return ngx_http_sandbox_mcp_run_int(v) != 0
               ? ngx_cpymem(p, "true", 4) : ngx_cpymem(p, "false", 5);
    }
}


/* the hash's values in the order of the fields: one pass over the reply */
static void
ngx_http_sandbox_mcp_run_values(redisReply *h, redisReply **values)
{
    size_t                             i;
    ngx_uint_t                         k;
    redisReply                        *name;
    ngx_http_sandbox_mcp_run_field_t  *f;

    ngx_memzero(values, NGX_HTTP_SANDBOX_MCP_RUN_NFIELDS
                        * sizeof(redisReply *));

    for (i = 0; i + 1 < h->elements; i += 2) {
        name = h->element[i];

        for (k = 0; k < NGX_HTTP_SANDBOX_MCP_RUN_NFIELDS; k++) {
            f = &ngx_http_sandbox_mcp_run_fields[k];

            if (f->field.len == name->len
                && ngx_strncmp(f->field.data, name->str, name->len) == 0)
            {
                /* the first of a name, as a lookup finds it */
                if (values[k] == NULL) {
                    values[k] = h->element[i + 1];
                }

                break;
            }
        }
    }
}


ngx_int_t
ngx_http_sandbox_mcp_run_json(ngx_http_sandbox_mcp_call_t *call,
    redisReply *h, ngx_str_t *text)
{
    char                              *files;
    u_char                            *p;
    size_t                             len;
    ngx_str_t                          url;
    ngx_uint_t                         k;
    redisReply                        *values[NGX_HTTP_SANDBOX_MCP_RUN_NFIELDS];
    ngx_http_sandbox_mcp_run_field_t  *f;

    static u_char  head[] = "{\"runId\":";
    static u_char  watch[] = ",\"watchUrl\":";

    ngx_http_sandbox_mcp_run_values(h, values);

    files = NULL;

    if (ngx_http_sandbox_mcp_watch_url_text(call, &call->run_id, &url)
        != NGX_OK)
    {
        /* as before: a run object without its link */
        url.len = 0;
    }

    len = sizeof(head) - 1 + 2 + call->run_id.len
          + ngx_http_sandbox_mcp_escape_json(NULL, call->run_id.data,
                                             call->run_id.len)
          + sizeof(watch) - 1 + 2 + url.len
          + ngx_http_sandbox_mcp_escape_json(NULL, url.data, url.len)
          + sizeof("}") - 1;

    for (k = 0; k < NGX_HTTP_SANDBOX_MCP_RUN_NFIELDS; k++) {
        f = &ngx_http_sandbox_mcp_run_fields[k];

        if (f->type == NGX_HTTP_SANDBOX_MCP_RUN_FILES) {
            files = ngx_http_sandbox_mcp_run_files(values[k]);
        }

        len += f->key.len
               + ngx_http_sandbox_mcp_run_value_len(f->type, values[k], files);
    }

    text->data = ngx_pnalloc(call->ctx->request->pool, len);
    if (text->data == NULL) {
        free(files);
        return NGX_ERROR;
    }

    p = ngx_cpymem(text->data, head, sizeof(head) - 1);
    *p++ = '"';
    p = (u_char *) ngx_http_sandbox_mcp_escape_json(p, call->run_id.data,
                                                    call->run_id.len);
    *p++ = '"';

    for (k = 0; k < NGX_HTTP_SANDBOX_MCP_RUN_NFIELDS; k++) {
        f = &ngx_http_sandbox_mcp_run_fields[k];
        p = ngx_cpymem(p, f->key.data, f->key.len);
        p = ngx_http_sandbox_mcp_run_value(p, f->type, values[k], files);
    }

    if (url.len) {
        p = ngx_cpymem(p, watch, sizeof(watch) - 1);
        *p++ = '"';
        p = (u_char *) ngx_http_sandbox_mcp_escape_json(p, url.data, url.len);
        *p++ = '"';
    }

    *p++ = '}';

    text->len = p - text->data;

    free(files);

    return NGX_OK;
}
