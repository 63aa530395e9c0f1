/*
 * opencode_list_sessions: the tenant's sessions, most recently active
 * first, in pages resumed by an opaque cursor "s:<sessionId>:<score>" (the
 * last index entry a page read).  No script: two steps.
 *
 *   1. a window of tenant:{tenant}:sessions (a zset scored by last
 *      activity, kept by run_create and the runner's finish) after the
 *      cursor: ZREVRANGEBYSCORE from the cursor's score down, the entries
 *      of that score at or before the cursor's session skipped;
 *   2. pipelined, per session: HMGET of its hash (tenant, created_at,
 *      last_active, state, repositories), ZCARD of its runs and of its
 *      unfinished runs (session:{id}:active).
 *
 * The state: expired when the runner expires or expired it, active with a
 * started or running run, else idle.  A session of another tenant, or one
 * whose keys are gone, is skipped.  With a state filter a page reads up to
 * NGX_HTTP_SANDBOX_MCP_LIST_SCAN entries per session asked, so it can be
 * short and still carry a cursor.
 */

#include "ngx_http_sandbox_mcp_tool_sessions.h"
#include "ngx_http_sandbox_mcp_args.h"
#include "ngx_http_sandbox_mcp_redis.h"
#include "ngx_http_sandbox_mcp_run.h"
#include "ngx_http_sandbox_mcp_tools.h"
#include "ngx_http_sandbox_mcp_defaults.h"

#include "smcp_validate.h"


#define NGX_HTTP_SANDBOX_MCP_SESSION_FIELDS  5
#define NGX_HTTP_SANDBOX_MCP_SESSION_CMDS    3     /* per session */

static ngx_str_t  ngx_http_sandbox_mcp_session_fields[] = {
    ngx_string("tenant"),
    ngx_string("created_at"),
    ngx_string("last_active"),
    ngx_string("state"),
    ngx_string("repositories")
};


typedef struct {
    ngx_http_sandbox_mcp_call_t  *call;
    ngx_str_t                     index;
    ngx_str_t                     state;      /* the filter, or "" */
    ngx_uint_t                    limit;
    ngx_uint_t                    window;     /* index entries read */
    ngx_str_t                     cid;        /* the cursor, or "" */
    ngx_str_t                     cscore;
    ngx_uint_t                    past;       /* below the cursor's score */

    ngx_str_t                    *ids;        /* step 1's entries */
    ngx_str_t                    *scores;
    ngx_uint_t                    n;
    ngx_uint_t                    more;       /* entries after them */

    json_t                       *sessions;   /* step 2 */
    json_t                       *entry;      /* the session being read */
    ngx_uint_t                    last;       /* the last entry read + 1 */
    unsigned                      failed:1;
} ngx_http_sandbox_mcp_sessions_t;


static void
ngx_http_sandbox_mcp_sessions_window(ngx_http_sandbox_mcp_sessions_t *l);


static ngx_uint_t
ngx_http_sandbox_mcp_sessions_is(redisReply *r, ngx_str_t *s)
{
    return r->type == REDIS_REPLY_STRING && r->len == s->len
           && ngx_strncmp(r->str, s->data, s->len) == 0;
}


static ngx_uint_t
ngx_http_sandbox_mcp_sessions_lit(redisReply *r, const char *s)
{
    ngx_str_t  v;

    v.data = (u_char *) s;
    v.len = ngx_strlen(s);

    return ngx_http_sandbox_mcp_sessions_is(r, &v);
}


static void
ngx_http_sandbox_mcp_sessions_answer(ngx_http_sandbox_mcp_sessions_t *l)
{
    json_t     *sessions, *next;
    ngx_str_t  *id, *score;
    char        text[SMCP_CURSOR_TEXT_MAX + 1];

    sessions = l->sessions ? l->sessions : json_array();
    l->sessions = NULL;
    next = NULL;

    if (l->failed) {
        json_array_clear(sessions);

    } else if (l->last > 0 && (l->last < l->n || l->more)) {
        id = &l->ids[l->last - 1];
        score = &l->scores[l->last - 1];

        if (3 + id->len + score->len <= SMCP_CURSOR_TEXT_MAX) {
            ngx_snprintf((u_char *) text, sizeof(text), "s:%V:%V%Z",
                         id, score);
            next = ngx_http_sandbox_mcp_cursor_encode(text);
        }
    }

    ngx_http_sandbox_mcp_tool_output(l->call,
        json_pack("{s:o, s:o*}", "sessions", sessions, "nextCursor", next));
}


/* the session hash's repositories: a JSON array of strings, else [] */
static json_t *
ngx_http_sandbox_mcp_sessions_repos(redisReply *v)
{
    size_t   i;
    json_t  *a, *s;

    a = (v->type == REDIS_REPLY_STRING)
        ? json_loadb(v->str, v->len, 0, NULL) : NULL;

    if (!json_is_array(a)) {
        json_decref(a);
        return json_array();
    }

    json_array_foreach(a, i, s) {
        if (!json_is_string(s)) {
            json_decref(a);
            return json_array();
        }
    }

    return a;
}


/* HMGET of session i: the entry, unless it is not the tenant's */
static void
ngx_http_sandbox_mcp_sessions_hash(ngx_http_sandbox_mcp_sessions_t *l,
    ngx_uint_t i, redisReply *h)
{
    const char   *state;
    redisReply  **e;

    l->entry = NULL;

    if (json_array_size(l->sessions) >= l->limit) {
        return;
    }

    l->last = i + 1;

    if (h->type != REDIS_REPLY_ARRAY
        || h->elements != NGX_HTTP_SANDBOX_MCP_SESSION_FIELDS
        || !ngx_http_sandbox_mcp_sessions_is(h->element[0],
                                             &l->call->ctx->tenant))
    {
        return;
    }

    e = h->element;

    state = (ngx_http_sandbox_mcp_sessions_lit(e[3], SMCP_SESSION_EXPIRING)
             || ngx_http_sandbox_mcp_sessions_lit(e[3], SMCP_SESSION_EXPIRED))
            ? "expired" : "idle";

    l->entry = json_pack("{s:s%, s:o, s:i, s:o, s:o, s:s}",
                         "sessionId", (char *) l->ids[i].data, l->ids[i].len,
                         "repositories",
                         ngx_http_sandbox_mcp_sessions_repos(e[4]),
                         "runs", 0,
                         "lastActivity", ngx_http_sandbox_mcp_json_time(e[2]),
                         "createdAt", ngx_http_sandbox_mcp_json_time(e[1]),
                         "state", state);

    if (l->entry == NULL || json_array_append_new(l->sessions, l->entry)) {
        l->failed = 1;
        l->entry = NULL;
    }
}


/* ZCARD of its runs (k 1) or of its unfinished runs (k 2) */
static void
ngx_http_sandbox_mcp_sessions_count(ngx_http_sandbox_mcp_sessions_t *l,
    ngx_uint_t k, redisReply *n)
{
    json_t  *state;

    if (l->entry == NULL || n->type != REDIS_REPLY_INTEGER) {
        return;
    }

    if (k == 1) {
        json_object_set_new(l->entry, "runs", json_integer(n->integer));
        return;
    }

    state = json_object_get(l->entry, "state");

    if (n->integer > 0 && ngx_strcmp(json_string_value(state), "idle") == 0) {
        json_object_set_new(l->entry, "state", json_string("active"));
    }

    if (l->state.len
        && ngx_strncmp(json_string_value(json_object_get(l->entry, "state")),
                       l->state.data, l->state.len + 1) != 0)
    {
        json_array_remove(l->sessions, json_array_size(l->sessions) - 1);
    }

    l->entry = NULL;
}


static void
ngx_http_sandbox_mcp_sessions_reply(void *data, ngx_uint_t i,
    redisReply *reply)
{
    ngx_http_sandbox_mcp_sessions_t *l = data;

    ngx_uint_t                    k;
    ngx_http_sandbox_mcp_call_t  *call;

    call = l->call;

    if (reply == NULL || reply->type == REDIS_REPLY_ERROR) {
        /* the replies still to come find nobody: the call ends now */
        ngx_http_sandbox_mcp_redis_cancel(call->cmd);

        json_decref(l->sessions);
        l->sessions = NULL;

        (void) ngx_http_sandbox_mcp_reply_failed(call, reply);
        return;
    }

    k = i % NGX_HTTP_SANDBOX_MCP_SESSION_CMDS;

    if (!l->failed) {
        if (k == 0) {
            ngx_http_sandbox_mcp_sessions_hash(l,
                                     i / NGX_HTTP_SANDBOX_MCP_SESSION_CMDS,
                                     reply);
        } else {
            ngx_http_sandbox_mcp_sessions_count(l, k, reply);
        }
    }

    if (i + 1 == l->n * NGX_HTTP_SANDBOX_MCP_SESSION_CMDS) {
        call->cmd = NULL;
        ngx_http_sandbox_mcp_sessions_answer(l);
    }
}


/* step 2: each session's hash and counts */
static void
ngx_http_sandbox_mcp_sessions_read(ngx_http_sandbox_mcp_sessions_t *l)
{
    ngx_str_t                    *argv, *a;
    ngx_uint_t                    i, k, *argc;
    ngx_pool_t                   *pool;
    ngx_http_sandbox_mcp_call_t  *call;

    call = l->call;
    pool = call->ctx->request->pool;

    argc = ngx_palloc(pool, l->n * NGX_HTTP_SANDBOX_MCP_SESSION_CMDS
                            * sizeof(ngx_uint_t));
    argv = ngx_palloc(pool, l->n * (2 + NGX_HTTP_SANDBOX_MCP_SESSION_FIELDS
                                    + 4)
                            * sizeof(ngx_str_t));
    l->sessions = json_array();

    if (argc == NULL || argv == NULL || l->sessions == NULL) {
        ngx_http_sandbox_mcp_tool_unavailable(call);
        return;
    }

    a = argv;
    k = 0;

    for (i = 0; i < l->n; i++) {
        argc[k++] = 2 + NGX_HTTP_SANDBOX_MCP_SESSION_FIELDS;
        argc[k++] = 2;
        argc[k++] = 2;

        ngx_str_set(&a[0], "HMGET");
        ngx_memcpy(&a[2], ngx_http_sandbox_mcp_session_fields,
                   sizeof(ngx_http_sandbox_mcp_session_fields));
        ngx_str_set(&a[7], "ZCARD");
        ngx_str_set(&a[9], "ZCARD");

        if (ngx_http_sandbox_mcp_redis_key(pool, &a[1], SMCP_KEY_SESSION,
                                           &l->ids[i])
            != NGX_OK
            || ngx_http_sandbox_mcp_redis_key(pool, &a[8],
                                              SMCP_KEY_SESSION_RUNS,
                                              &l->ids[i])
               != NGX_OK
            || ngx_http_sandbox_mcp_redis_key(pool, &a[10],
                                              SMCP_KEY_SESSION_ACTIVE,
                                              &l->ids[i])
               != NGX_OK)
        {
            ngx_http_sandbox_mcp_tool_unavailable(call);
            return;
        }

        a += 2 + NGX_HTTP_SANDBOX_MCP_SESSION_FIELDS + 4;
    }

    call->cmd = ngx_http_sandbox_mcp_redis_each(
                    ngx_http_sandbox_mcp_sessions_reply, l, k, argc, argv);

    if (call->cmd == NULL) {
        ngx_http_sandbox_mcp_tool_unavailable(call);
    }
}


static ngx_int_t
ngx_http_sandbox_mcp_sessions_copy(ngx_http_sandbox_mcp_sessions_t *l,
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
ngx_http_sandbox_mcp_sessions_window_reply(void *data, redisReply *reply)
{
    ngx_http_sandbox_mcp_sessions_t *l = data;

    ngx_uint_t    i, m, skipped;
    redisReply  **e;

    l->call->cmd = NULL;

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

        /* of the cursor's score, at or before its session: seen (equal
         * scores come by member, high to low) */
        if (l->n == 0 && l->cid.len && !l->past
            && ngx_http_sandbox_mcp_sessions_is(e[2 * i + 1], &l->cscore)
            && ngx_memn2cmp((u_char *) e[2 * i]->str, l->cid.data,
                            e[2 * i]->len, l->cid.len) >= 0)
        {
            skipped++;
            continue;
        }

        if (l->n == l->window) {
            l->more = 1;
            break;
        }

        if (ngx_http_sandbox_mcp_sessions_copy(l, e[2 * i], e[2 * i + 1])
            != NGX_OK)
        {
            ngx_http_sandbox_mcp_tool_unavailable(l->call);
            return;
        }
    }

    if (m == l->window + 1 + NGX_HTTP_SANDBOX_MCP_LIST_TIES) {
        l->more = 1;

        if (skipped == m && !l->past) {
            /* more sessions of the cursor's millisecond than the window:
             * the rest of that millisecond is passed over */
            l->past = 1;
            ngx_http_sandbox_mcp_sessions_window(l);
            return;
        }
    }

    if (l->n == 0) {
        ngx_http_sandbox_mcp_sessions_answer(l);
        return;
    }

    ngx_http_sandbox_mcp_sessions_read(l);
}


/* step 1: the index after the cursor, most recent first */
static void
ngx_http_sandbox_mcp_sessions_window(ngx_http_sandbox_mcp_sessions_t *l)
{
    u_char      *p;
    ngx_str_t    argv[8];
    ngx_pool_t  *pool;

    pool = l->call->ctx->request->pool;

    ngx_str_set(&argv[0], "ZREVRANGEBYSCORE");
    argv[1] = l->index;
    ngx_str_set(&argv[2], "+inf");

    if (l->cid.len) {
        argv[2] = l->cscore;

        if (l->past) {
            p = ngx_pnalloc(pool, l->cscore.len + 1);
            if (p == NULL) {
                ngx_http_sandbox_mcp_tool_unavailable(l->call);
                return;
            }

            *p = '(';
            ngx_memcpy(p + 1, l->cscore.data, l->cscore.len);
            argv[2].data = p;
            argv[2].len = l->cscore.len + 1;
        }
    }

    ngx_str_set(&argv[3], "-inf");
    ngx_str_set(&argv[4], "WITHSCORES");
    ngx_str_set(&argv[5], "LIMIT");
    ngx_str_set(&argv[6], "0");
    argv[7] = ngx_http_sandbox_mcp_redis_number(pool,
                          l->window + 1 + NGX_HTTP_SANDBOX_MCP_LIST_TIES);

    l->call->cmd = ngx_http_sandbox_mcp_redis_command(
                 ngx_http_sandbox_mcp_sessions_window_reply, l, 8, argv);

    if (l->call->cmd == NULL) {
        ngx_http_sandbox_mcp_tool_unavailable(l->call);
    }
}


/* the cursor of a page: "s:<session id>:<score>" */
static ngx_int_t
ngx_http_sandbox_mcp_sessions_cursor(ngx_http_sandbox_mcp_sessions_t *l)
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

    if (smcp_cursor_id(json_string_value(cursor), json_string_length(cursor),
                       's', SMCP_SESSION_ID_PREFIX, id, score)
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
ngx_http_sandbox_mcp_list_sessions(ngx_http_sandbox_mcp_call_t *call)
{
    json_int_t                        limit;
    ngx_pool_t                       *pool;
    ngx_http_sandbox_mcp_sessions_t  *l;

    pool = call->ctx->request->pool;

    l = ngx_pcalloc(pool, sizeof(ngx_http_sandbox_mcp_sessions_t));
    if (l == NULL) {
        ngx_http_sandbox_mcp_tool_unavailable(call);
        return;
    }

    l->call = call;

    /* the schema's enum, bounds and default
     * (tools/opencode_list_sessions.json) */
    if (ngx_http_sandbox_mcp_arg_string(call, "state",
                                        NGX_HTTP_SANDBOX_MCP_STATUS_ARG_MAX,
                                        &l->state)
        != NGX_OK
        || ngx_http_sandbox_mcp_arg_integer(call, "limit",
                                            NGX_HTTP_SANDBOX_MCP_ARG_ANY_INT,
                                            &limit)
           != NGX_OK
        || ngx_http_sandbox_mcp_sessions_cursor(l) != NGX_OK)
    {
        return;
    }

    l->limit = (ngx_uint_t) limit;
    l->window = l->state.len
                ? ngx_min(l->limit * NGX_HTTP_SANDBOX_MCP_LIST_SCAN,
                          NGX_HTTP_SANDBOX_MCP_LIST_BUDGET)
                : l->limit;

    if (ngx_http_sandbox_mcp_redis_key(pool, &l->index,
                                       SMCP_KEY_TENANT_SESSIONS,
                                       &call->ctx->tenant)
        != NGX_OK)
    {
        ngx_http_sandbox_mcp_tool_unavailable(call);
        return;
    }

    ngx_http_sandbox_mcp_sessions_window(l);
}
