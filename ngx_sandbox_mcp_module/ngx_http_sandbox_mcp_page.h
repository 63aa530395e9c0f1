/*
 * A page of an index zset, newest (highest score) first, resumed by an
 * opaque cursor "<kind>:<id>:<score>" (the last entry a page read): the
 * first step of opencode_list_runs and opencode_list_sessions.
 */

#ifndef _NGX_HTTP_SANDBOX_MCP_PAGE_H_INCLUDED_
#define _NGX_HTTP_SANDBOX_MCP_PAGE_H_INCLUDED_


#include "ngx_http_sandbox_mcp_module.h"


typedef struct ngx_http_sandbox_mcp_page_s  ngx_http_sandbox_mcp_page_t;

/* the window is read: ids[0 .. n - 1] (n may be 0) */
typedef void (*ngx_http_sandbox_mcp_page_pt)(ngx_http_sandbox_mcp_page_t *p);

struct ngx_http_sandbox_mcp_page_s {
    ngx_http_sandbox_mcp_call_t    *call;
    ngx_str_t                       index;      /* the zset */
    ngx_uint_t                      window;     /* entries to read */
    ngx_http_sandbox_mcp_page_pt    read;

    ngx_uint_t                      offset;     /* entries passed */
    ngx_str_t                       cid;        /* the cursor, or "" */
    ngx_str_t                       cscore;

    ngx_str_t                      *ids;        /* the window */
    ngx_str_t                      *scores;
    ngx_uint_t                      n;
    ngx_uint_t                      more;       /* entries after them */
    ngx_uint_t                      last;       /* the last entry the page
                                                   used + 1: the cursor */
};


/* the call's "cursor" argument: kind and the ids' prefix ("run_",
 * "ses_"); NGX_ERROR after answering the call */
ngx_int_t ngx_http_sandbox_mcp_page_cursor(ngx_http_sandbox_mcp_page_t *p,
    char kind, const char *prefix);

/* step 1: reads the window, then calls p->read */
void ngx_http_sandbox_mcp_page_window(ngx_http_sandbox_mcp_page_t *p);

/* the nextCursor after entry p->last - 1, or NULL at the end */
json_t *ngx_http_sandbox_mcp_page_next(ngx_http_sandbox_mcp_page_t *p,
    char kind);


#endif /* _NGX_HTTP_SANDBOX_MCP_PAGE_H_INCLUDED_ */
