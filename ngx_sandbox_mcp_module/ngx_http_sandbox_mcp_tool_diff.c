/*
 * opencode_get_diff: a run's diff in pages, or one file's section of it,
 * read through the run's diff index.
 */

#include "ngx_http_sandbox_mcp_tool_diff.h"
#include "ngx_http_sandbox_mcp_args.h"
#include "ngx_http_sandbox_mcp_redis.h"
#include "ngx_http_sandbox_mcp_run.h"
#include "ngx_http_sandbox_mcp_scripts.h"
#include "ngx_http_sandbox_mcp_tools.h"
#include "ngx_http_sandbox_mcp_defaults.h"

#include "smcp_diff.h"
#include "smcp_validate.h"


/* a page ends after its last newline, else after its last whole character */
static size_t
ngx_http_sandbox_mcp_page_end(u_char *p, size_t len)
{
    size_t  i, n;

    for (i = len; i > 0; i--) {
        if (p[i - 1] == '\n') {
            return i;
        }
    }

    for (i = len; i > 0 && len - i < 4; i--) {
        if ((p[i - 1] & 0xc0) != 0x80) {
            /* the last lead byte: is its sequence complete? */
            n = p[i - 1] < 0x80 ? 1 : p[i - 1] >= 0xf0 ? 4
                                    : p[i - 1] >= 0xe0 ? 3 : 2;

            return (i - 1 + n <= len || i == 1) ? len : i - 1;
        }
    }

    return len;
}


static void
ngx_http_sandbox_mcp_diff_page(ngx_http_sandbox_mcp_call_t *call,
    ngx_str_t *text, size_t total)
{
    size_t   keep;
    json_t  *next, *diff;
    char     cbuf[64];

    keep = text->len;

    if (call->offset + text->len < total) {
        keep = ngx_http_sandbox_mcp_page_end(text->data, text->len);
    }

    smcp_utf8_sanitize((char *) text->data, keep);
    diff = json_stringn((char *) text->data, keep);

    next = NULL;

    if (call->offset + keep < total) {
        ngx_snprintf((u_char *) cbuf, sizeof(cbuf), "d:%uz%Z",
                     call->offset + keep);
        next = ngx_http_sandbox_mcp_cursor_encode(cbuf);
    }

    ngx_http_sandbox_mcp_tool_output(call,
        json_pack("{s:s%, s:o, s:o, s:I, s:b, s:o*}",
                  "runId", (char *) call->run_id.data, call->run_id.len,
                  "path", call->path.len
                          ? json_stringn((char *) call->path.data,
                                         call->path.len)
                          : json_null(),
                  "diff", diff,
                  "totalBytes", (json_int_t) total,
                  "truncated", next != NULL,
                  "nextCursor", next));
}


static void
ngx_http_sandbox_mcp_diff_reply(void *data, redisReply *reply)
{
    ngx_http_sandbox_mcp_call_t *call = data;

    size_t      total, off, len;
    ngx_str_t   text;

    if (ngx_http_sandbox_mcp_reply_failed(call, reply)) {
        return;
    }

    if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 3
        || reply->element[0]->type != REDIS_REPLY_STRING
        || reply->element[1]->type != REDIS_REPLY_INTEGER
        || reply->element[1]->integer < 0)
    {
        ngx_http_sandbox_mcp_run_not_found(call);
        return;
    }

    text.data = (u_char *) reply->element[0]->str;
    text.len = reply->element[0]->len;
    total = (size_t) reply->element[1]->integer;

    if (ngx_http_sandbox_mcp_reply_is(reply->element[2], "noindex")) {
        ngx_http_sandbox_mcp_tool_error(call, "The file index of this run's "
                                        "diff is unavailable and the diff is "
                                        "too big (%uz bytes) to search for "
                                        "one file: read the whole diff page "
                                        "by page (omit 'path').", total);
        return;
    }

    if (ngx_http_sandbox_mcp_reply_is(reply->element[2], "whole")) {
        /* no index, a small diff: the section is searched for here */
        if (!smcp_diff_find((char *) text.data, text.len,
                            (char *) call->path.data, call->path.len, &off,
                            &len))
        {
            /* the file is not in the diff: nothing changed there */
            off = 0;
            len = 0;
        }

        total = len;
        call->offset = ngx_min(call->offset, len);

        text.data += off + call->offset;
        text.len = ngx_min(len - call->offset,
                           NGX_HTTP_SANDBOX_MCP_DIFF_PAGE);

    } else if (text.len > NGX_HTTP_SANDBOX_MCP_DIFF_PAGE) {
        text.len = NGX_HTTP_SANDBOX_MCP_DIFF_PAGE;
    }

    ngx_http_sandbox_mcp_diff_page(call, &text, total);
}


void
ngx_http_sandbox_mcp_get_diff(ngx_http_sandbox_mcp_call_t *call)
{
    uint64_t                     off;
    ngx_str_t                    args[5];
    ngx_pool_t                  *pool;
    json_t                      *cursor;
    ngx_http_sandbox_mcp_key_t   keys[2];

    pool = call->ctx->request->pool;

    if (ngx_http_sandbox_mcp_arg_run_id(call) != NGX_OK
        || ngx_http_sandbox_mcp_arg_string(call, "path",
                                           SMCP_DIFF_PATH_MAX, &call->path)
           != NGX_OK)
    {
        return;
    }

    call->offset = 0;
    cursor = json_object_get(call->args, "cursor");

    if (cursor && !json_is_null(cursor)) {
        if (smcp_cursor_number(json_string_value(cursor),
                               json_string_length(cursor), 'd',
                               NGX_HTTP_SANDBOX_MCP_DIFF_MAX, &off)
            != SMCP_OK)
        {
            ngx_http_sandbox_mcp_tool_error(call, "Argument 'cursor' is not "
                                            "a cursor this server gave "
                                            "(pass nextCursor unchanged).");
            return;
        }

        call->offset = (size_t) off;
    }

    keys[0].fmt = SMCP_KEY_RUN;
    keys[0].arg = &call->run_id;
    keys[1].fmt = SMCP_KEY_RUN_DIFF;
    keys[1].arg = &call->run_id;

    args[0] = call->ctx->tenant;
    args[1] = ngx_http_sandbox_mcp_redis_number(pool, call->offset);
    args[2] = ngx_http_sandbox_mcp_redis_number(pool,
                                              NGX_HTTP_SANDBOX_MCP_DIFF_PAGE);
    args[3] = call->path;
    args[4] = ngx_http_sandbox_mcp_redis_number(pool,
                                              NGX_HTTP_SANDBOX_MCP_DIFF_SCAN);

    ngx_http_sandbox_mcp_call_script(call,
                                     &ngx_http_sandbox_mcp_script_run_diff,
                                     ngx_http_sandbox_mcp_diff_reply,
                                     keys, 2, args, 5);
}
