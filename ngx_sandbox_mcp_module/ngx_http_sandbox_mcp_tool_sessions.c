/*
 * opencode_list_sessions: the tenant's sessions, most recently active
 * first, in pages resumed by an opaque cursor "s:<sessionId>:<score>" (the
 * last index entry a page read).  No script: two steps.
 *
 *   1. a window of tenant:{tenant}:sessions (a zset scored by last
 *      activity, kept by run_create and the runner's finish) after the
 *      cursor, as the run list reads its index (ngx_http_sandbox_mcp_page.c);
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
#include "ngx_http_sandbox_mcp_page.h"
#include "ngx_http_sandbox_mcp_redis.h"
#include "ngx_http_sandbox_mcp_run.h"
#include "ngx_http_sandbox_mcp_tools.h"
#include "ngx_http_sandbox_mcp_defaults.h"

#include "smcp_validate.h"


#define NGX_HTTP_SANDBOX_MCP_SESSION_FIELDS  5
#define NGX_HTTP_SANDBOX_MCP_SESSION_CMDS    3     /* per session */
#define NGX_HTTP_SANDBOX_MCP_SESSION_ARGS                                     \
    (2 + NGX_HTTP_SANDBOX_MCP_SESSION_FIELDS + 2 + 2)  /* HMGET, 2 ZCARD */

static ngx_str_t  ngx_http_sandbox_mcp_session_fields[] = {
    ngx_string("tenant"),
    ngx_string("created_at"),
    ngx_string("last_active"),
    ngx_string("state"),
    ngx_string("repositories")
};


typedef struct {
    ngx_http_sandbox_mcp_page_t   page;       /* step 1 (first member) */
    ngx_str_t                     state;      /* the filter, or "" */
    ngx_uint_t                    limit;

    json_t                       *sessions;   /* step 2 */
    json_t                       *entry;      /* the session being read */
    unsigned                      failed:1;
} ngx_http_sandbox_mcp_sessions_t;


static void
ngx_http_sandbox_mcp_sessions_answer(ngx_http_sandbox_mcp_sessions_t *l)
{
    json_t  *sessions, *next;

    sessions = l->sessions ? l->sessions : json_array();
    l->sessions = NULL;
    next = NULL;

    if (l->failed) {
        json_array_clear(sessions);

    } else {
        next = ngx_http_sandbox_mcp_page_next(&l->page, 's');
    }

    ngx_http_sandbox_mcp_tool_output(l->page.call,
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

    l->page.last = i + 1;

    if (h->type != REDIS_REPLY_ARRAY
        || h->elements != NGX_HTTP_SANDBOX_MCP_SESSION_FIELDS
        || !ngx_http_sandbox_mcp_reply_eq(h->element[0],
                                             &l->page.call->ctx->tenant))
    {
        return;
    }

    e = h->element;

    state = (ngx_http_sandbox_mcp_reply_is(e[3], SMCP_SESSION_EXPIRING)
             || ngx_http_sandbox_mcp_reply_is(e[3], SMCP_SESSION_EXPIRED))
            ? "expired" : "idle";

    l->entry = json_pack("{s:s%, s:o, s:i, s:o, s:o, s:s}",
                         "sessionId", (char *) l->page.ids[i].data,
                         l->page.ids[i].len,
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

    call = l->page.call;

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

    if (i + 1 == l->page.n * NGX_HTTP_SANDBOX_MCP_SESSION_CMDS) {
        call->cmd = NULL;
        ngx_http_sandbox_mcp_sessions_answer(l);
    }
}


/* step 2: each session's hash and counts */
static void
ngx_http_sandbox_mcp_sessions_read(ngx_http_sandbox_mcp_page_t *p)
{
    ngx_http_sandbox_mcp_sessions_t *l = (ngx_http_sandbox_mcp_sessions_t *) p;

    ngx_str_t                    *argv, *a;
    ngx_uint_t                    i, k, *argc;
    ngx_pool_t                   *pool;
    ngx_http_sandbox_mcp_call_t  *call;

    if (p->n == 0) {
        ngx_http_sandbox_mcp_sessions_answer(l);
        return;
    }

    call = p->call;
    pool = call->ctx->request->pool;

    argc = ngx_palloc(pool, p->n * NGX_HTTP_SANDBOX_MCP_SESSION_CMDS
                            * sizeof(ngx_uint_t));
    argv = ngx_palloc(pool, p->n * NGX_HTTP_SANDBOX_MCP_SESSION_ARGS
                            * sizeof(ngx_str_t));
    l->sessions = json_array();

    if (argc == NULL || argv == NULL || l->sessions == NULL) {
        ngx_http_sandbox_mcp_tool_unavailable(call);
        return;
    }

    a = argv;
    k = 0;

    for (i = 0; i < p->n; i++) {
        argc[k++] = 2 + NGX_HTTP_SANDBOX_MCP_SESSION_FIELDS;
        argc[k++] = 2;
        argc[k++] = 2;

        ngx_str_set(&a[0], "HMGET");
        ngx_memcpy(&a[2], ngx_http_sandbox_mcp_session_fields,
                   sizeof(ngx_http_sandbox_mcp_session_fields));
        ngx_str_set(&a[7], "ZCARD");
        ngx_str_set(&a[9], "ZCARD");

        if (ngx_http_sandbox_mcp_redis_key(pool, &a[1], SMCP_KEY_SESSION,
                                           &p->ids[i])
            != NGX_OK
            || ngx_http_sandbox_mcp_redis_key(pool, &a[8],
                                              SMCP_KEY_SESSION_RUNS,
                                              &p->ids[i])
               != NGX_OK
            || ngx_http_sandbox_mcp_redis_key(pool, &a[10],
                                              SMCP_KEY_SESSION_ACTIVE,
                                              &p->ids[i])
               != NGX_OK)
        {
            ngx_http_sandbox_mcp_tool_unavailable(call);
            return;
        }

        a += NGX_HTTP_SANDBOX_MCP_SESSION_ARGS;
    }

    call->cmd = ngx_http_sandbox_mcp_redis_each(
                    ngx_http_sandbox_mcp_sessions_reply, l, k, argc, argv);

    if (call->cmd == NULL) {
        ngx_http_sandbox_mcp_tool_unavailable(call);
    }
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

    l->page.call = call;
    l->page.read = ngx_http_sandbox_mcp_sessions_read;

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
        || ngx_http_sandbox_mcp_page_cursor(&l->page, 's',
                                            SMCP_SESSION_ID_PREFIX)
           != NGX_OK)
    {
        return;
    }

    l->limit = (ngx_uint_t) limit;
    l->page.window = l->state.len
                     ? ngx_min(l->limit * NGX_HTTP_SANDBOX_MCP_LIST_SCAN,
                               NGX_HTTP_SANDBOX_MCP_LIST_BUDGET)
                     : l->limit;

    if (ngx_http_sandbox_mcp_redis_key(pool, &l->page.index,
                                       SMCP_KEY_TENANT_SESSIONS,
                                       &call->ctx->tenant)
        != NGX_OK)
    {
        ngx_http_sandbox_mcp_tool_unavailable(call);
        return;
    }

    ngx_http_sandbox_mcp_page_window(&l->page);
}
