/*
 * The egress proxy (ngx_http_sandbox_mcp_egress_module): types its files
 * share.
 */

#ifndef _NGX_HTTP_SANDBOX_MCP_EGRESS_H_INCLUDED_
#define _NGX_HTTP_SANDBOX_MCP_EGRESS_H_INCLUDED_


#include "ngx_http_sandbox_mcp_module.h"

#include "smcp_usage.h"


/* sandbox_mcp_egress_push: what writes a location carries */
#define NGX_HTTP_SANDBOX_MCP_PUSH_OFF           0
#define NGX_HTTP_SANDBOX_MCP_PUSH_GIT           1
#define NGX_HTTP_SANDBOX_MCP_PUSH_PULL_REQUEST  2

/* what a request is, for the write rules */
#define NGX_HTTP_SANDBOX_MCP_KIND_READ          0
#define NGX_HTTP_SANDBOX_MCP_KIND_ADVERTISE     1   /* receive-pack refs */
#define NGX_HTTP_SANDBOX_MCP_KIND_PUSH          2   /* git-receive-pack */
#define NGX_HTTP_SANDBOX_MCP_KIND_PULL_REQUEST  3   /* POST .../pulls */

/* the refusal (503) when Redis cannot say the run's state */
#define NGX_HTTP_SANDBOX_MCP_EGRESS_UNREAD                                   \
    "egress: the run's state cannot be read right now; retry shortly"

/* a model request past the run's maxCostUsd (nginx names no 402) */
#define NGX_HTTP_SANDBOX_MCP_PAYMENT_REQUIRED   402

/* the one branch a run may write: opencode/<runId> */
#define NGX_HTTP_SANDBOX_MCP_BRANCH_PREFIX      "opencode/"


/* a request's body decided: granted (NGX_OK) or refused (status, why) */
typedef void (*ngx_http_sandbox_mcp_egress_decided_pt)(ngx_http_request_t *r,
    ngx_uint_t status, const char *err);


typedef struct {
    ngx_flag_t                  announce;       /* the routes, in Redis */
    ngx_array_t                *routes;         /* ngx_str_t: every
                                                   sandbox_mcp_egress name,
                                                   once */
} ngx_http_sandbox_mcp_egress_main_conf_t;


typedef struct {
    ngx_str_t                   route;
    ngx_str_t                   credential;     /* formatted header value */
    ngx_http_complex_value_t   *repository;     /* expected owner/repo */
    ngx_uint_t                  push;
    ngx_str_t                   deny;           /* refusal of the route */
    ngx_uint_t                  methods;        /* allowed; 0: any */
    ngx_flag_t                  strict_path;    /* plain segments only */
    ngx_flag_t                  model;          /* bodies checked */
    ngx_array_t                *server_tools;   /* allowed (ngx_str_t) */
    ngx_flag_t                  inbox;          /* sandbox_mcp_egress_inbox:
                                                   not in the audit record */
    ngx_array_t                *prices;         /* sandbox_mcp_egress_price
                                                   (..._egress_price_t) */
} ngx_http_sandbox_mcp_egress_loc_conf_t;


typedef struct {
    ngx_http_request_t                 *request;
    ngx_http_sandbox_mcp_egress_loc_conf_t  *lcf;       /* the route's */
    ngx_str_t                           run_id;
    ngx_str_t                           tenant;
    ngx_str_t                           repository;     /* expected */
    ngx_str_t                           head;   /* a pull request's head
                                                   branch's run: the run's,
                                                   a pick run's attempt */
    ngx_http_sandbox_mcp_redis_cmd_t   *cmd;
    ngx_int_t                           rc;
    ngx_uint_t                          status;         /* refusal */
    ngx_uint_t                          kind;
    smcp_usage_t                       *usage;  /* a model request's
                                                   answer, as read */
    ngx_str_t                           model;  /* the request's */
    off_t                               answer_bytes;
    double                              cap;    /* its maxCostUsd ... */
    double                              spent;  /* ... its metered cost */
    double                              worst;  /* what it holds */
    ngx_http_sandbox_mcp_egress_decided_pt  decided;    /* once held */
    unsigned                            done:1;
    unsigned                            known:1;        /* run of tenant */
    unsigned                            granted:1;
    unsigned                            draft:1;        /* its pull
                                                           request: a
                                                           draft only */
    unsigned                            answered:1;     /* the answer's
                                                           last byte */
    unsigned                            capped:1;       /* the run has a
                                                           maxCostUsd */
    unsigned                            opaque:1;       /* an answer the
                                                           meter cannot
                                                           read */
} ngx_http_sandbox_mcp_egress_ctx_t;


/* a refusal the agent can read (Anthropic's error shape, which OpenAI
 * clients also parse) */
ngx_int_t ngx_http_sandbox_mcp_egress_refuse(ngx_http_request_t *r,
    ngx_uint_t status, const char *type, const char *message);


/* the request's context: the module's, or once an internal redirect
 * (error_page) has dropped it, the one its pool cleanup holds; NULL */
ngx_http_sandbox_mcp_egress_ctx_t *ngx_http_sandbox_mcp_egress_request_ctx(
    ngx_http_request_t *r);


/* a location's route (sandbox_mcp_egress NAME), announced */
char *ngx_http_sandbox_mcp_egress_set_route(ngx_conf_t *cf,
    ngx_http_sandbox_mcp_egress_loc_conf_t *lcf, ngx_str_t *name);


extern ngx_module_t  ngx_http_sandbox_mcp_egress_module;


#endif /* _NGX_HTTP_SANDBOX_MCP_EGRESS_H_INCLUDED_ */
