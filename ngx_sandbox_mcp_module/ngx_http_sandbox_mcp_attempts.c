/*
 * The attempts of a group (opencode_run_task attempts): each run of a
 * group holds `group_runs`, the group's run ids in turn (the first is the
 * group's id).  A run of a group is answered with the run object and,
 * beside it, every attempt's state, read at once (run_attempts.lua), and
 * the link to its run page (signed for that run, as its own watchUrl:
 * who watches one attempt may watch the others); a run gone, or not the
 * tenant's, is listed by its id alone.
 */

#include "ngx_http_sandbox_mcp_attempts.h"
#include "ngx_http_sandbox_mcp_defaults.h"
#include "ngx_http_sandbox_mcp_redis.h"
#include "ngx_http_sandbox_mcp_run.h"
#include "ngx_http_sandbox_mcp_run_json.h"
#include "ngx_http_sandbox_mcp_scripts.h"
#include "ngx_http_sandbox_mcp_tools.h"

#include "smcp_validate.h"

#include <math.h>


/* an attempt's fields, as run_attempts.lua reads them, and as answered */
static const char  *ngx_http_sandbox_mcp_attempt_fields[] = {
    "session", "status", "diff_stat", "cost", "pr_url", "pr_status", "error"
};

static const char  *ngx_http_sandbox_mcp_attempt_keys[] = {
    "sessionId", "status", "diffStat", "cost", "pullRequestUrl",
    "pullRequestStatus", "error"
};

#define NGX_HTTP_SANDBOX_MCP_ATTEMPT_NFIELDS                                  \
    (sizeof(ngx_http_sandbox_mcp_attempt_fields) / sizeof(const char *))


ngx_int_t
ngx_http_sandbox_mcp_attempts_of(ngx_http_sandbox_mcp_call_t *call,
    redisReply *h)
{
    u_char      *p, *last, *end;
    size_t       i;
    ngx_str_t   *ids;
    ngx_uint_t   n;
    redisReply  *k, *v;

    v = NULL;

    for (i = 0; h->type == REDIS_REPLY_ARRAY && i + 1 < h->elements;
         i += 2)
    {
        k = h->element[i];

        if (k->type == REDIS_REPLY_STRING
            && k->len == sizeof("group_runs") - 1
            && ngx_strncmp(k->str, "group_runs", k->len) == 0)
        {
            v = h->element[i + 1];
            break;
        }
    }

    if (v == NULL || v->type != REDIS_REPLY_STRING || v->len == 0) {
        return NGX_DECLINED;
    }

    ids = ngx_palloc(call->ctx->request->pool,
                     NGX_HTTP_SANDBOX_MCP_ATTEMPTS_MAX * sizeof(ngx_str_t));
    p = ngx_pnalloc(call->ctx->request->pool, v->len);

    if (ids == NULL || p == NULL) {
        return NGX_ERROR;
    }

    /* the reply is freed after the handler: the ids are copied */
    ngx_memcpy(p, v->str, v->len);
    end = p + v->len;
    n = 0;

    while (p < end) {
        last = ngx_strlchr(p, end, ' ');
        if (last == NULL) {
            last = end;
        }

        if (n == NGX_HTTP_SANDBOX_MCP_ATTEMPTS_MAX
            || !smcp_valid_id((char *) p, last - p, SMCP_RUN_ID_PREFIX))
        {
            return NGX_DECLINED;        /* not as run_create wrote it */
        }

        ids[n].data = p;
        ids[n++].len = last - p;
        p = last + 1;
    }

    if (n < 2) {
        return NGX_DECLINED;
    }

    /* the run itself among them, as run_create wrote it */
    for (i = 0; i < n; i++) {
        if (ids[i].len == call->run_id.len
            && ngx_strncmp(ids[i].data, call->run_id.data, ids[i].len) == 0)
        {
            break;
        }
    }

    if (i == n) {
        return NGX_DECLINED;
    }

    call->attempts = ids;
    call->nattempts = n;

    return NGX_OK;
}


/* one attempt's object: its runId, then what Redis holds of it and its
 * run page's signed link (watchUrl) */
static json_t *
ngx_http_sandbox_mcp_attempt_json(ngx_http_sandbox_mcp_call_t *call,
    ngx_str_t *id, ngx_uint_t n, redisReply *r)
{
    char         buf[64];
    double       d;
    json_t      *o, *v;
    ngx_str_t    url;
    ngx_uint_t   i;
    redisReply  *f;

    o = json_pack("{s:s%, s:i}", "runId", id->data, id->len,
                  "attempt", (int) n);
    if (o == NULL) {
        return NULL;
    }

    /* gone, or not the tenant's: its id alone */
    if (r->type != REDIS_REPLY_ARRAY
        || r->elements != NGX_HTTP_SANDBOX_MCP_ATTEMPT_NFIELDS)
    {
        return o;
    }

    for (i = 0; i < NGX_HTTP_SANDBOX_MCP_ATTEMPT_NFIELDS; i++) {
        f = r->element[i];

        if (ngx_strcmp(ngx_http_sandbox_mcp_attempt_fields[i], "cost") == 0) {
            d = 0.0;

            if (f->type == REDIS_REPLY_STRING && f->len < sizeof(buf)) {
                ngx_memcpy(buf, f->str, f->len);
                buf[f->len] = '\0';
                d = strtod(buf, NULL);
            }

            v = json_real(isfinite(d) && d >= 0.0 ? d : 0.0);

        } else {
            /* sessionId and status: strings; the others null when
             * absent */
            v = ngx_http_sandbox_mcp_json_text(f, i > 1);
        }

        json_object_set_new(o, ngx_http_sandbox_mcp_attempt_keys[i], v);
    }

    if (ngx_http_sandbox_mcp_watch_url_text(call, id, &url) == NGX_OK) {
        json_object_set_new(o, "watchUrl",
                            json_stringn((char *) url.data, url.len));
    }

    return o;
}


static void
ngx_http_sandbox_mcp_attempts_read(void *data, redisReply *reply)
{
    ngx_http_sandbox_mcp_call_t *call = data;

    char        *list;
    u_char      *p;
    size_t       len;
    json_t      *a, *o;
    ngx_str_t    text, *group;
    ngx_uint_t   i, mine;

    if (ngx_http_sandbox_mcp_reply_failed(call, reply)) {
        return;
    }

    if (reply->type != REDIS_REPLY_ARRAY
        || reply->elements != call->nattempts)
    {
        ngx_http_sandbox_mcp_tool_unavailable(call);
        return;
    }

    a = json_array();
    mine = 0;

    for (i = 0; a && i < call->nattempts; i++) {
        o = ngx_http_sandbox_mcp_attempt_json(call, &call->attempts[i],
                                              i + 1, reply->element[i]);

        if (o == NULL || json_array_append_new(a, o) != 0) {
            json_decref(a);
            a = NULL;
            break;
        }

        if (call->attempts[i].len == call->run_id.len
            && ngx_strncmp(call->attempts[i].data, call->run_id.data,
                           call->run_id.len) == 0)
        {
            mine = i + 1;
        }
    }

    list = a ? json_dumps(a, JSON_COMPACT) : NULL;
    json_decref(a);

    if (list == NULL) {
        ngx_http_sandbox_mcp_tool_output_text(call, NULL);
        return;
    }

    /* {run...,"groupId":"<id>","attempt":N,"attempts":[...]} */
    group = &call->attempts[0];
    len = call->run_text.len - 1
          + sizeof(",\"groupId\":\"\",\"attempt\":,\"attempts\":}") - 1
          + group->len + NGX_INT_T_LEN + ngx_strlen(list);

    text.data = ngx_pnalloc(call->ctx->request->pool, len);
    if (text.data == NULL) {
        free(list);
        ngx_http_sandbox_mcp_tool_output_text(call, NULL);
        return;
    }

    p = ngx_cpymem(text.data, call->run_text.data, call->run_text.len - 1);
    p = ngx_sprintf(p, ",\"groupId\":\"%V\",\"attempt\":%ui,\"attempts\":%s}",
                    group, mine, list);
    text.len = p - text.data;
    free(list);

    ngx_http_sandbox_mcp_tool_output_text(call, &text);
}


ngx_int_t
ngx_http_sandbox_mcp_attempts_answer(ngx_http_sandbox_mcp_call_t *call,
    redisReply *h)
{
    ngx_str_t                    args[1 + NGX_HTTP_SANDBOX_MCP_ATTEMPT_NFIELDS];
    ngx_int_t                    rc;
    ngx_uint_t                   i;
    ngx_http_sandbox_mcp_key_t   keys[NGX_HTTP_SANDBOX_MCP_ATTEMPTS_MAX];

    rc = ngx_http_sandbox_mcp_attempts_of(call, h);
    if (rc != NGX_OK) {
        return rc;
    }

    if (ngx_http_sandbox_mcp_run_json(call, h, &call->run_text) != NGX_OK) {
        return NGX_ERROR;
    }

    for (i = 0; i < call->nattempts; i++) {
        keys[i].fmt = SMCP_KEY_RUN;
        keys[i].arg = &call->attempts[i];
    }

    args[0] = call->ctx->tenant;

    for (i = 0; i < NGX_HTTP_SANDBOX_MCP_ATTEMPT_NFIELDS; i++) {
        args[1 + i].data = (u_char *) ngx_http_sandbox_mcp_attempt_fields[i];
        args[1 + i].len = ngx_strlen(ngx_http_sandbox_mcp_attempt_fields[i]);
    }

    ngx_http_sandbox_mcp_call_script(call,
                                     &ngx_http_sandbox_mcp_script_run_attempts,
                                     ngx_http_sandbox_mcp_attempts_read,
                                     keys, call->nattempts,
                                     args, sizeof(args) / sizeof(args[0]));

    return NGX_OK;
}
