/*
 * opencode_list_runs: the tenant's runs (or a session's), newest first, in
 * pages resumed by an opaque cursor "r:<runId>:<score>" (the last index
 * entry a page read).  No script: two steps.
 *
 *   1. a window of the index zset after the cursor (ZREVRANGEBYSCORE from
 *      the cursor's score down, the entries of that score at or before the
 *      cursor's run skipped: the zset orders equal scores by member;
 *      ngx_http_sandbox_mcp_page.c);
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
#include "ngx_http_sandbox_mcp_page.h"
#include "ngx_http_sandbox_mcp_redis.h"
#include "ngx_http_sandbox_mcp_run.h"
#include "ngx_http_sandbox_mcp_run_json.h"
#include "ngx_http_sandbox_mcp_tools.h"
#include "ngx_http_sandbox_mcp_defaults.h"

#include "smcp_validate.h"


/* the fields of a run a list shows, and the filter's */
#define NGX_HTTP_SANDBOX_MCP_LIST_FIELDS  11

static ngx_str_t  ngx_http_sandbox_mcp_list_fields[] = {
    ngx_string("tenant"),
    ngx_string("status"),
    ngx_string("session"),
    ngx_string("title"),
    ngx_string("repository"),
    ngx_string("branch"),
    ngx_string("created_at"),
    ngx_string("finished_at"),
    ngx_string("cost"),
    ngx_string("pr_url"),
    ngx_string("pr_status")
};


typedef struct {
    ngx_http_sandbox_mcp_page_t   page;       /* step 1 (first member) */
    ngx_str_t                     session;    /* a session's list, or "" */
    ngx_str_t                     status;     /* the filter, or "" */
    ngx_uint_t                    limit;

    json_t                       *runs;       /* step 2 */
    ngx_uint_t                    first;      /* replies before the runs */
    unsigned                      denied:1;   /* another tenant's session */
} ngx_http_sandbox_mcp_list_t;


/* the stored cost (the runner's, once the run ended), else null */
static json_t *
ngx_http_sandbox_mcp_list_cost(redisReply *v)
{
    double  d;

    if (ngx_http_sandbox_mcp_run_number(v, &d) != NGX_OK) {
        return json_null();
    }

    return json_real(d);
}


/* the answer: the runs found, and a cursor after the last entry read */
static void
ngx_http_sandbox_mcp_list_answer(ngx_http_sandbox_mcp_list_t *l)
{
    json_t  *runs, *next;

    runs = l->runs ? l->runs : json_array();
    l->runs = NULL;
    next = NULL;

    if (l->denied) {
        json_array_clear(runs);

    } else {
        next = ngx_http_sandbox_mcp_page_next(&l->page, 'r');
    }

    ngx_http_sandbox_mcp_tool_output(l->page.call,
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

    l->page.last = i + 1;

    if (h->type != REDIS_REPLY_ARRAY
        || h->elements != NGX_HTTP_SANDBOX_MCP_LIST_FIELDS)
    {
        return;
    }

    ngx_memcpy(e, h->element, sizeof(e));

    /* the index holds ids only: the run must be the tenant's (a vanished
     * run is skipped) */
    if (!ngx_http_sandbox_mcp_reply_eq(e[0], &l->page.call->ctx->tenant)
        || (l->status.len && !ngx_http_sandbox_mcp_reply_eq(e[1], &l->status)))
    {
        return;
    }

    run = json_pack("{s:s%, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o,"
                    " s:o}",
                    "runId", (char *) l->page.ids[i].data,
                    l->page.ids[i].len,
                    "status", ngx_http_sandbox_mcp_json_text(e[1], 0),
                    "sessionId", ngx_http_sandbox_mcp_json_text(e[2], 0),
                    "title", ngx_http_sandbox_mcp_json_text(e[3], 0),
                    "repository", ngx_http_sandbox_mcp_json_text(e[4], 1),
                    "branch", ngx_http_sandbox_mcp_json_text(e[5], 1),
                    "createdAt", ngx_http_sandbox_mcp_json_time(e[6]),
                    "finishedAt", ngx_http_sandbox_mcp_json_time(e[7]),
                    "cost", ngx_http_sandbox_mcp_list_cost(e[8]),
                    "pullRequestUrl", ngx_http_sandbox_mcp_json_text(e[9], 1),
                    "pullRequestStatus",
                        ngx_http_sandbox_mcp_json_text(e[10], 1));

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

    call = l->page.call;

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
        if (!ngx_http_sandbox_mcp_reply_eq(reply, &call->ctx->tenant)) {
            l->denied = 1;
        }

    } else {
        ngx_http_sandbox_mcp_list_run(l, i - l->first, reply);
    }

    if (i + 1 == l->first + l->page.n) {
        call->cmd = NULL;
        ngx_http_sandbox_mcp_list_answer(l);
    }
}


/* step 2: the session's tenant, and each run's fields */
static void
ngx_http_sandbox_mcp_list_read(ngx_http_sandbox_mcp_page_t *p)
{
    ngx_http_sandbox_mcp_list_t *l = (ngx_http_sandbox_mcp_list_t *) p;

    ngx_str_t                    *argv, *a;
    ngx_uint_t                    i, k, *argc;
    ngx_pool_t                   *pool;
    ngx_http_sandbox_mcp_call_t  *call;

    if (p->n == 0) {
        ngx_http_sandbox_mcp_list_answer(l);
        return;
    }

    call = p->call;
    pool = call->ctx->request->pool;

    l->first = l->session.len ? 1 : 0;

    argc = ngx_palloc(pool, (l->first + p->n) * sizeof(ngx_uint_t));
    argv = ngx_palloc(pool, (3 + p->n * (2 + NGX_HTTP_SANDBOX_MCP_LIST_FIELDS))
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

    for (i = 0; i < p->n; i++) {
        argc[k++] = 2 + NGX_HTTP_SANDBOX_MCP_LIST_FIELDS;
        ngx_str_set(&a[0], "HMGET");

        if (ngx_http_sandbox_mcp_redis_key(pool, &a[1], SMCP_KEY_RUN,
                                           &p->ids[i])
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

    l->page.call = call;
    l->page.read = ngx_http_sandbox_mcp_list_read;

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
        || ngx_http_sandbox_mcp_page_cursor(&l->page, 'r',
                                            SMCP_RUN_ID_PREFIX)
           != NGX_OK)
    {
        return;
    }

    l->limit = (ngx_uint_t) limit;
    l->page.window = l->status.len
                     ? ngx_min(l->limit * NGX_HTTP_SANDBOX_MCP_LIST_SCAN,
                               NGX_HTTP_SANDBOX_MCP_LIST_BUDGET)
                     : l->limit;

    if (ngx_http_sandbox_mcp_redis_key(pool, &l->page.index,
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

    ngx_http_sandbox_mcp_page_window(&l->page);
}
