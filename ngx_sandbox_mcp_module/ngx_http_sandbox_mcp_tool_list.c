/*
 * opencode_list_runs: the tenant's runs (or a session's), newest first, in
 * pages resumed by an opaque cursor "r:<runId>:<score>" (the last index
 * entry a page read).  No script: two steps.
 *
 *   1. a window of the index zset after the cursor (ZREVRANGEBYSCORE from
 *      the cursor's score down, the entries of that score at or before the
 *      cursor's run skipped: the zset orders equal scores by member);
 *   2. pipelined, the session hash's tenant (a session's list) and one
 *      HMGET per run of the window, filtered here by tenant and status.
 *
 * A page holds at most `limit` runs; it reads at most `limit` index
 * entries, or with a status filter NGX_HTTP_SANDBOX_MCP_LIST_SCAN per run
 * asked (at most NGX_HTTP_SANDBOX_MCP_LIST_BUDGET), so a filtered page can
 * be short and still carry a cursor.  No cursor: the index was read to its
 * end.
 */

#include "ngx_http_sandbox_mcp_tool_list.h"
#include "ngx_http_sandbox_mcp_args.h"
#include "ngx_http_sandbox_mcp_redis.h"
#include "ngx_http_sandbox_mcp_run.h"
#include "ngx_http_sandbox_mcp_tools.h"
#include "ngx_http_sandbox_mcp_defaults.h"

#include "smcp_validate.h"


/* the fields of a run a list shows, and the filter's */
#define NGX_HTTP_SANDBOX_MCP_LIST_FIELDS  8

static ngx_str_t  ngx_http_sandbox_mcp_list_fields[] = {
    ngx_string("tenant"),
    ngx_string("status"),
    ngx_string("session"),
    ngx_string("title"),
    ngx_string("created_at"),
    ngx_string("finished_at"),
    ngx_string("pr_url"),
    ngx_string("pr_status")
};


typedef struct {
    ngx_http_sandbox_mcp_call_t  *call;
    ngx_str_t                     index;      /* the zset */
    ngx_str_t                     session;    /* a session's list, or "" */
    ngx_str_t                     status;     /* the filter, or "" */
    ngx_uint_t                    limit;
    ngx_uint_t                    window;     /* index entries read */
    ngx_uint_t                    offset;     /* step 1: entries passed */
    ngx_str_t                     cid;        /* the cursor, or "" */
    ngx_str_t                     cscore;

    ngx_str_t                    *ids;        /* step 1's entries */
    ngx_str_t                    *scores;
    ngx_uint_t                    n;
    ngx_uint_t                    more;       /* entries after them */

    json_t                       *runs;       /* step 2 */
    ngx_uint_t                    first;      /* replies before the runs */
    ngx_uint_t                    last;       /* the last entry read + 1 */
    unsigned                      denied:1;   /* another tenant's session */
} ngx_http_sandbox_mcp_list_t;


static void ngx_http_sandbox_mcp_list_window(ngx_http_sandbox_mcp_list_t *l);


static ngx_uint_t
ngx_http_sandbox_mcp_list_is(redisReply *r, ngx_str_t *s)
{
    return r->type == REDIS_REPLY_STRING && r->len == s->len
           && ngx_strncmp(r->str, s->data, s->len) == 0;
}


/* the answer: the runs found, and a cursor after the last entry read */
static void
ngx_http_sandbox_mcp_list_answer(ngx_http_sandbox_mcp_list_t *l)
{
    json_t     *runs, *next;
    ngx_str_t  *id, *score;
    char        text[SMCP_CURSOR_TEXT_MAX + 1];

    runs = l->runs ? l->runs : json_array();
    l->runs = NULL;
    next = NULL;

    if (!l->denied && l->last > 0 && (l->last < l->n || l->more)) {
        id = &l->ids[l->last - 1];
        score = &l->scores[l->last - 1];

        if (3 + id->len + score->len <= SMCP_CURSOR_TEXT_MAX) {
            ngx_snprintf((u_char *) text, sizeof(text), "r:%V:%V%Z",
                         id, score);
            next = ngx_http_sandbox_mcp_cursor_encode(text);
        }
    }

    if (l->denied) {
        json_array_clear(runs);
    }

    ngx_http_sandbox_mcp_tool_output(l->call,
        json_pack("{s:o, s:o*}", "runs", runs, "nextCursor", next));
}


/* HMGET of run i of the window (i counted from 0) */
static void
ngx_http_sandbox_mcp_list_run(ngx_http_sandbox_mcp_list_t *l, ngx_uint_t i,
    redisReply *h)
{
    json_t      *run;
    redisReply  *e[NGX_HTTP_SANDBOX_MCP_LIST_FIELDS];

    if (l->denied || json_array_size(l->runs) >= l->limit) {
        return;
    }

    l->last = i + 1;

    if (h->type != REDIS_REPLY_ARRAY
        || h->elements != NGX_HTTP_SANDBOX_MCP_LIST_FIELDS)
    {
        return;
    }

    ngx_memcpy(e, h->element, sizeof(e));

    /* the index holds ids only: the run must be the tenant's (a vanished
     * run is skipped) */
    if (!ngx_http_sandbox_mcp_list_is(e[0], &l->call->ctx->tenant)
        || (l->status.len && !ngx_http_sandbox_mcp_list_is(e[1], &l->status)))
    {
        return;
    }

    run = json_pack("{s:s%, s:o, s:o, s:o, s:o, s:o, s:o, s:o}",
                    "runId", (char *) l->ids[i].data, l->ids[i].len,
                    "status", ngx_http_sandbox_mcp_json_text(e[1], 0),
                    "sessionId", ngx_http_sandbox_mcp_json_text(e[2], 0),
                    "title", ngx_http_sandbox_mcp_json_text(e[3], 0),
                    "createdAt", ngx_http_sandbox_mcp_json_time(e[4]),
                    "finishedAt", ngx_http_sandbox_mcp_json_time(e[5]),
                    "pullRequestUrl", ngx_http_sandbox_mcp_json_text(e[6], 1),
                    "pullRequestStatus",
                        ngx_http_sandbox_mcp_json_text(e[7], 1));

    if (run == NULL || json_array_append_new(l->runs, run) != 0) {
        l->denied = 1;      /* out of memory: an empty page */
    }
}


static void
ngx_http_sandbox_mcp_list_runs_reply(void *data, ngx_uint_t i,
    redisReply *reply)
{
    ngx_http_sandbox_mcp_list_t *l = data;

    ngx_http_sandbox_mcp_call_t  *call;

    call = l->call;

    if (reply == NULL || reply->type == REDIS_REPLY_ERROR) {
        /* the replies still to come find nobody: the call ends now */
        ngx_http_sandbox_mcp_redis_cancel(call->cmd);

        json_decref(l->runs);
        l->runs = NULL;

        (void) ngx_http_sandbox_mcp_reply_failed(call, reply);
        return;
    }

    if (i < l->first) {
        /* the session's tenant */
        if (!ngx_http_sandbox_mcp_list_is(reply, &call->ctx->tenant)) {
            l->denied = 1;
        }

    } else {
        ngx_http_sandbox_mcp_list_run(l, i - l->first, reply);
    }

    if (i + 1 == l->first + l->n) {
        call->cmd = NULL;
        ngx_http_sandbox_mcp_list_answer(l);
    }
}


/* step 2: the session's tenant, and each run's fields */
static void
ngx_http_sandbox_mcp_list_read(ngx_http_sandbox_mcp_list_t *l)
{
    ngx_str_t                    *argv, *a;
    ngx_uint_t                    i, k, *argc;
    ngx_pool_t                   *pool;
    ngx_http_sandbox_mcp_call_t  *call;

    call = l->call;
    pool = call->ctx->request->pool;

    l->first = l->session.len ? 1 : 0;

    argc = ngx_palloc(pool, (l->first + l->n) * sizeof(ngx_uint_t));
    argv = ngx_palloc(pool, (3 + l->n * (2 + NGX_HTTP_SANDBOX_MCP_LIST_FIELDS))
                            * sizeof(ngx_str_t));
    l->runs = json_array();

    if (argc == NULL || argv == NULL || l->runs == NULL) {
        ngx_http_sandbox_mcp_tool_unavailable(call);
        return;
    }

    a = argv;
    k = 0;

    if (l->first) {
        argc[k++] = 3;
        ngx_str_set(&a[0], "HGET");
        ngx_str_set(&a[2], "tenant");

        if (ngx_http_sandbox_mcp_redis_key(pool, &a[1], SMCP_KEY_SESSION,
                                           &l->session)
            != NGX_OK)
        {
            ngx_http_sandbox_mcp_tool_unavailable(call);
            return;
        }

        a += 3;
    }

    for (i = 0; i < l->n; i++) {
        argc[k++] = 2 + NGX_HTTP_SANDBOX_MCP_LIST_FIELDS;
        ngx_str_set(&a[0], "HMGET");

        if (ngx_http_sandbox_mcp_redis_key(pool, &a[1], SMCP_KEY_RUN,
                                           &l->ids[i])
            != NGX_OK)
        {
            ngx_http_sandbox_mcp_tool_unavailable(call);
            return;
        }

        ngx_memcpy(&a[2], ngx_http_sandbox_mcp_list_fields,
                   sizeof(ngx_http_sandbox_mcp_list_fields));
        a += 2 + NGX_HTTP_SANDBOX_MCP_LIST_FIELDS;
    }

    call->cmd = ngx_http_sandbox_mcp_redis_each(
                    ngx_http_sandbox_mcp_list_runs_reply, l, k, argc, argv);

    if (call->cmd == NULL) {
        ngx_http_sandbox_mcp_tool_unavailable(call);
    }
}


/* an entry the cursor's page read already: the cursor's score, and a
 * member at or after the cursor's run (equal scores go by member, high to
 * low) */
static ngx_uint_t
ngx_http_sandbox_mcp_list_seen(ngx_http_sandbox_mcp_list_t *l,
    redisReply *id, redisReply *score)
{
    if (l->cid.len == 0 || !ngx_http_sandbox_mcp_list_is(score, &l->cscore))
    {
        return 0;
    }

    return ngx_memn2cmp((u_char *) id->str, l->cid.data, id->len,
                        l->cid.len)
           >= 0;
}


static ngx_int_t
ngx_http_sandbox_mcp_list_copy(ngx_http_sandbox_mcp_list_t *l,
    redisReply *id, redisReply *score)
{
    u_char  *p;

    p = ngx_pnalloc(l->call->ctx->request->pool, id->len + score->len);
    if (p == NULL) {
        return NGX_ERROR;
    }

    l->ids[l->n].data = p;
    l->ids[l->n].len = id->len;
    l->scores[l->n].data = ngx_cpymem(p, id->str, id->len);
    l->scores[l->n].len = score->len;
    ngx_memcpy(l->scores[l->n].data, score->str, score->len);

    l->n++;

    return NGX_OK;
}


/* step 1's reply: member, score, member, score ... */
static void
ngx_http_sandbox_mcp_list_window_reply(void *data, redisReply *reply)
{
    ngx_http_sandbox_mcp_list_t *l = data;

    ngx_uint_t    i, m, skipped;
    redisReply  **e;

    if (ngx_http_sandbox_mcp_reply_failed(l->call, reply)) {
        return;
    }

    m = reply->type == REDIS_REPLY_ARRAY ? reply->elements / 2 : 0;
    e = reply->element;

    l->ids = ngx_palloc(l->call->ctx->request->pool,
                        2 * (ngx_min(m, l->window) + 1) * sizeof(ngx_str_t));
    if (l->ids == NULL) {
        ngx_http_sandbox_mcp_tool_unavailable(l->call);
        return;
    }

    l->scores = l->ids + ngx_min(m, l->window) + 1;
    l->n = 0;
    skipped = 0;

    for (i = 0; i < m; i++) {
        if (e[2 * i]->type != REDIS_REPLY_STRING
            || e[2 * i + 1]->type != REDIS_REPLY_STRING)
        {
            continue;
        }

        if (l->n == 0 && ngx_http_sandbox_mcp_list_seen(l, e[2 * i],
                                                        e[2 * i + 1]))
        {
            skipped++;
            continue;
        }

        if (l->n == l->window) {
            l->more = 1;
            break;
        }

        if (ngx_http_sandbox_mcp_list_copy(l, e[2 * i], e[2 * i + 1])
            != NGX_OK)
        {
            ngx_http_sandbox_mcp_tool_unavailable(l->call);
            return;
        }
    }

    if (m == l->window + 1 + NGX_HTTP_SANDBOX_MCP_LIST_TIES) {
        /* the window was full: there may be entries after it */
        l->more = 1;

        if (skipped == m) {
            /* only runs of the cursor's millisecond seen already: on */
            l->offset += m;
            ngx_http_sandbox_mcp_list_window(l);
            return;
        }
    }

    if (l->n == 0) {
        ngx_http_sandbox_mcp_list_answer(l);
        return;
    }

    ngx_http_sandbox_mcp_list_read(l);
}


/* step 1: the index after the cursor, newest first */
static void
ngx_http_sandbox_mcp_list_window(ngx_http_sandbox_mcp_list_t *l)
{
    ngx_str_t    argv[8];
    ngx_pool_t  *pool;

    static ngx_str_t  newest = ngx_string("+inf");

    pool = l->call->ctx->request->pool;

    ngx_str_set(&argv[0], "ZREVRANGEBYSCORE");
    argv[1] = l->index;
    argv[2] = l->cid.len ? l->cscore : newest;
    ngx_str_set(&argv[3], "-inf");
    ngx_str_set(&argv[4], "WITHSCORES");
    ngx_str_set(&argv[5], "LIMIT");
    argv[6] = ngx_http_sandbox_mcp_redis_number(pool, l->offset);

    /* one more: are there entries after the window?  And some: runs of
     * the cursor's millisecond the cursor's page read already */
    argv[7] = ngx_http_sandbox_mcp_redis_number(pool,
                          l->window + 1 + NGX_HTTP_SANDBOX_MCP_LIST_TIES);

    l->call->cmd = ngx_http_sandbox_mcp_redis_command(
                 ngx_http_sandbox_mcp_list_window_reply, l, 8, argv);

    if (l->call->cmd == NULL) {
        ngx_http_sandbox_mcp_tool_unavailable(l->call);
    }
}


/* the cursor of a page: "r:<run id>:<score>" */
static ngx_int_t
ngx_http_sandbox_mcp_list_cursor(ngx_http_sandbox_mcp_list_t *l)
{
    u_char                       *p;
    json_t                       *cursor;
    ngx_http_sandbox_mcp_call_t  *call;
    char                          id[SMCP_ID_LEN + 1];
    char                          score[SMCP_CURSOR_TEXT_MAX + 1];

    call = l->call;
    cursor = json_object_get(call->args, "cursor");

    if (cursor == NULL || json_is_null(cursor)) {
        return NGX_OK;
    }

    if (smcp_cursor_run(json_string_value(cursor),
                        json_string_length(cursor), id, score)
        != SMCP_OK)
    {
        ngx_http_sandbox_mcp_tool_error(call, "Argument 'cursor' is not a "
                                        "cursor this server gave (pass "
                                        "nextCursor unchanged).");
        return NGX_ERROR;
    }

    l->cid.len = SMCP_ID_LEN;
    l->cscore.len = ngx_strlen(score);

    p = ngx_pnalloc(call->ctx->request->pool, l->cid.len + l->cscore.len);
    if (p == NULL) {
        ngx_http_sandbox_mcp_tool_unavailable(call);
        return NGX_ERROR;
    }

    l->cid.data = p;
    l->cscore.data = ngx_cpymem(p, id, l->cid.len);
    ngx_memcpy(l->cscore.data, score, l->cscore.len);

    return NGX_OK;
}


void
ngx_http_sandbox_mcp_list_runs(ngx_http_sandbox_mcp_call_t *call)
{
    json_int_t                    limit;
    ngx_pool_t                   *pool;
    ngx_http_sandbox_mcp_list_t  *l;

    pool = call->ctx->request->pool;

    l = ngx_pcalloc(pool, sizeof(ngx_http_sandbox_mcp_list_t));
    if (l == NULL) {
        ngx_http_sandbox_mcp_tool_unavailable(call);
        return;
    }

    l->call = call;

    if (ngx_http_sandbox_mcp_arg_string(call, "sessionId",
                                        NGX_HTTP_SANDBOX_MCP_ID_ARG_MAX,
                                        &l->session)
        != NGX_OK
        || ngx_http_sandbox_mcp_arg_string(call, "status",
                                           NGX_HTTP_SANDBOX_MCP_STATUS_ARG_MAX,
                                           &l->status)
           != NGX_OK)
    {
        return;
    }

    if (l->session.len
        && !smcp_valid_id((char *) l->session.data, l->session.len,
                          SMCP_SESSION_ID_PREFIX))
    {
        ngx_http_sandbox_mcp_tool_error(call, "Unknown sessionId: sessionIds "
                                        "look like ses_ followed by 24 hex "
                                        "digits.");
        return;
    }

    /* the schema's bounds and default (tools/opencode_list_runs.json) */
    if (ngx_http_sandbox_mcp_arg_integer(call, "limit",
                                         NGX_HTTP_SANDBOX_MCP_ARG_ANY_INT,
                                         &limit)
        != NGX_OK
        || ngx_http_sandbox_mcp_list_cursor(l) != NGX_OK)
    {
        return;
    }

    l->limit = (ngx_uint_t) limit;
    l->window = l->status.len
                ? ngx_min(l->limit * NGX_HTTP_SANDBOX_MCP_LIST_SCAN,
                          NGX_HTTP_SANDBOX_MCP_LIST_BUDGET)
                : l->limit;

    if (ngx_http_sandbox_mcp_redis_key(pool, &l->index,
                                       l->session.len
                                       ? SMCP_KEY_SESSION_RUNS
                                       : SMCP_KEY_TENANT_RUNS,
                                       l->session.len ? &l->session
                                                      : &call->ctx->tenant)
        != NGX_OK)
    {
        ngx_http_sandbox_mcp_tool_unavailable(call);
        return;
    }

    ngx_http_sandbox_mcp_list_window(l);
}
