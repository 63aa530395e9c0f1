/*
 * A page of an index zset after a cursor: ZREVRANGEBYSCORE from the
 * cursor's score down, the entries of that score at or before the cursor's
 * id skipped (the zset orders equal scores by member, high to low first
 * here).  It reads NGX_HTTP_SANDBOX_MCP_LIST_TIES entries beyond the
 * window: entries of the cursor's millisecond the previous page read; when
 * all of them were, it reads on from there.
 */

#include "ngx_http_sandbox_mcp_page.h"
#include "ngx_http_sandbox_mcp_redis.h"
#include "ngx_http_sandbox_mcp_run.h"
#include "ngx_http_sandbox_mcp_tools.h"
#include "ngx_http_sandbox_mcp_defaults.h"

#include "smcp_validate.h"



/* an entry the cursor's page read already */
static ngx_uint_t
ngx_http_sandbox_mcp_page_seen(ngx_http_sandbox_mcp_page_t *p,
    redisReply *id, redisReply *score)
{
    if (p->cid.len == 0 || !ngx_http_sandbox_mcp_reply_eq(score, &p->cscore))
    {
        return 0;
    }

    return ngx_memn2cmp((u_char *) id->str, p->cid.data, id->len,
                        p->cid.len)
           >= 0;
}


static ngx_int_t
ngx_http_sandbox_mcp_page_copy(ngx_http_sandbox_mcp_page_t *p,
    redisReply *id, redisReply *score)
{
    u_char  *s;

    s = ngx_pnalloc(p->call->ctx->request->pool, id->len + score->len);
    if (s == NULL) {
        return NGX_ERROR;
    }

    p->ids[p->n].data = s;
    p->ids[p->n].len = id->len;
    p->scores[p->n].data = ngx_cpymem(s, id->str, id->len);
    p->scores[p->n].len = score->len;
    ngx_memcpy(p->scores[p->n].data, score->str, score->len);

    p->n++;

    return NGX_OK;
}


/* member, score, member, score ... */
static void
ngx_http_sandbox_mcp_page_reply(void *data, redisReply *reply)
{
    ngx_http_sandbox_mcp_page_t *p = data;

    ngx_uint_t    i, m, skipped;
    redisReply  **e;

    p->call->cmd = NULL;

    if (ngx_http_sandbox_mcp_reply_failed(p->call, reply)) {
        return;
    }

    m = reply->type == REDIS_REPLY_ARRAY ? reply->elements / 2 : 0;
    e = reply->element;

    p->ids = ngx_palloc(p->call->ctx->request->pool,
                        2 * (ngx_min(m, p->window) + 1) * sizeof(ngx_str_t));
    if (p->ids == NULL) {
        ngx_http_sandbox_mcp_tool_unavailable(p->call);
        return;
    }

    p->scores = p->ids + ngx_min(m, p->window) + 1;
    p->n = 0;
    skipped = 0;

    for (i = 0; i < m; i++) {
        if (e[2 * i]->type != REDIS_REPLY_STRING
            || e[2 * i + 1]->type != REDIS_REPLY_STRING)
        {
            continue;
        }

        if (p->n == 0
            && ngx_http_sandbox_mcp_page_seen(p, e[2 * i], e[2 * i + 1]))
        {
            skipped++;
            continue;
        }

        if (p->n == p->window) {
            p->more = 1;
            break;
        }

        if (ngx_http_sandbox_mcp_page_copy(p, e[2 * i], e[2 * i + 1])
            != NGX_OK)
        {
            ngx_http_sandbox_mcp_tool_unavailable(p->call);
            return;
        }
    }

    if (m == p->window + 1 + NGX_HTTP_SANDBOX_MCP_LIST_TIES) {
        /* the window was full: there may be entries after it */
        p->more = 1;

        if (skipped == m) {
            /* only entries of the cursor's millisecond seen already: on */
            p->offset += m;
            ngx_http_sandbox_mcp_page_window(p);
            return;
        }
    }

    p->read(p);
}


void
ngx_http_sandbox_mcp_page_window(ngx_http_sandbox_mcp_page_t *p)
{
    ngx_str_t    argv[8];
    ngx_pool_t  *pool;

    static ngx_str_t  newest = ngx_string("+inf");

    pool = p->call->ctx->request->pool;

    ngx_str_set(&argv[0], "ZREVRANGEBYSCORE");
    argv[1] = p->index;
    argv[2] = p->cid.len ? p->cscore : newest;
    ngx_str_set(&argv[3], "-inf");
    ngx_str_set(&argv[4], "WITHSCORES");
    ngx_str_set(&argv[5], "LIMIT");
    argv[6] = ngx_http_sandbox_mcp_redis_number(pool, p->offset);

    /* one more: are there entries after the window?  And some: entries of
     * the cursor's millisecond the cursor's page read already */
    argv[7] = ngx_http_sandbox_mcp_redis_number(pool,
                          p->window + 1 + NGX_HTTP_SANDBOX_MCP_LIST_TIES);

    p->call->cmd = ngx_http_sandbox_mcp_redis_command(
                 ngx_http_sandbox_mcp_page_reply, p, 8, argv);

    if (p->call->cmd == NULL) {
        ngx_http_sandbox_mcp_tool_unavailable(p->call);
    }
}


ngx_int_t
ngx_http_sandbox_mcp_page_cursor(ngx_http_sandbox_mcp_page_t *p, char kind,
    const char *prefix)
{
    u_char                       *s;
    json_t                       *cursor;
    ngx_http_sandbox_mcp_call_t  *call;
    char                          id[SMCP_ID_LEN + 1];
    char                          score[SMCP_CURSOR_TEXT_MAX + 1];

    call = p->call;
    cursor = json_object_get(call->args, "cursor");

    if (cursor == NULL || json_is_null(cursor)) {
        return NGX_OK;
    }

    if (smcp_cursor_id(json_string_value(cursor), json_string_length(cursor),
                       kind, prefix, id, score)
        != SMCP_OK)
    {
        ngx_http_sandbox_mcp_tool_error(call, "Argument 'cursor' is not a "
                                        "cursor this server gave (pass "
                                        "nextCursor unchanged).");
        return NGX_ERROR;
    }

    p->cid.len = SMCP_ID_LEN;
    p->cscore.len = ngx_strlen(score);

    s = ngx_pnalloc(call->ctx->request->pool, p->cid.len + p->cscore.len);
    if (s == NULL) {
        ngx_http_sandbox_mcp_tool_unavailable(call);
        return NGX_ERROR;
    }

    p->cid.data = s;
    p->cscore.data = ngx_cpymem(s, id, p->cid.len);
    ngx_memcpy(p->cscore.data, score, p->cscore.len);

    return NGX_OK;
}


json_t *
ngx_http_sandbox_mcp_page_next(ngx_http_sandbox_mcp_page_t *p, char kind)
{
    ngx_str_t  *id, *score;
    char        text[SMCP_CURSOR_TEXT_MAX + 1];

    if (p->last == 0 || (p->last >= p->n && !p->more)) {
        return NULL;
    }

    id = &p->ids[p->last - 1];
    score = &p->scores[p->last - 1];

    if (3 + id->len + score->len > SMCP_CURSOR_TEXT_MAX) {
        return NULL;
    }

    ngx_snprintf((u_char *) text, sizeof(text), "%c:%V:%V%Z",
                 kind, id, score);

    return ngx_http_sandbox_mcp_cursor_encode(text);
}
