/*
 * ngx_sandbox_mcp_module: an MCP server (Streamable HTTP) inside nginx,
 * backed by Redis, that hands coding tasks to OpenCode sandboxes.
 *
 * The module's private common header: the configuration, the request
 * context and the JSON-RPC call, which every file of the module shares.
 * Each file's functions are declared in its own header.
 */

#ifndef _NGX_HTTP_SANDBOX_MCP_MODULE_H_INCLUDED_
#define _NGX_HTTP_SANDBOX_MCP_MODULE_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include <jansson.h>
#include <hiredis/hiredis.h>

#include "smcp_keyring.h"
#include "smcp_keys.h"
#include "smcp_redis_addr.h"
#include "smcp_util.h"
#include "smcp_version.h"


#define NGX_HTTP_SANDBOX_MCP_SERVER_NAME    "sandbox-mcp"

/* JSON-RPC and MCP error codes */
#define NGX_HTTP_SANDBOX_MCP_PARSE_ERROR        -32700
#define NGX_HTTP_SANDBOX_MCP_INVALID_REQUEST    -32600
#define NGX_HTTP_SANDBOX_MCP_METHOD_NOT_FOUND   -32601
#define NGX_HTTP_SANDBOX_MCP_INVALID_PARAMS     -32602
#define NGX_HTTP_SANDBOX_MCP_INTERNAL_ERROR     -32603
#define NGX_HTTP_SANDBOX_MCP_SERVER_ERROR       -32000
#define NGX_HTTP_SANDBOX_MCP_SESSION_NOT_FOUND  -32001
#define NGX_HTTP_SANDBOX_MCP_RESOURCE_NOT_FOUND -32002

/* not among nginx's NGX_HTTP_* codes */
#define NGX_HTTP_SANDBOX_MCP_NOT_ACCEPTABLE     406


/* a location of sandbox_mcp: its server and its configuration (the
 * dashboard starts runs with it: ngx_http_sandbox_mcp_ui_run_start) */
typedef struct {
    void                       *server;         /* its core srv conf */
    void                      **loc_conf;
} ngx_http_sandbox_mcp_at_t;


typedef struct {
    ngx_str_t                   redis;          /* host:port, unix:path or
                                                   sentinel://... */
    ngx_str_t                   redis_host;
    ngx_int_t                   redis_port;
    ngx_str_t                   redis_unix;
    smcp_redis_addr_t          *sentinel;       /* sentinel://: the
                                                   sentinels (addresses
                                                   resolved), the master */
    ngx_str_t                   prefix;
    ngx_msec_t                  redis_timeout;
    ngx_uint_t                  revoked_max;    /* revoked ids a worker
                                                   keeps */
    ngx_str_t                   redis_password_from;    /* env:N | file:P */
    u_char                     *redis_password;         /* NULL: no AUTH */
    size_t                      redis_password_len;

    ngx_str_t                   secret_file;
    ngx_str_t                   secret_env;
    ngx_str_t                   keys_file;
    smcp_keyring_t             *keys;           /* key[0] signs; read by
                                                   the master at start and
                                                   reload */

    ngx_flag_t                  enabled;        /* some location uses us */
    ngx_array_t                *mcp_locations;  /* of
                                                   ngx_http_sandbox_mcp_at_t:
                                                   the sandbox_mcp locations */
    ngx_str_t                   ui_location;    /* the first location of
                                                   sandbox_mcp_ui: the
                                                   watchUrl's path */
} ngx_http_sandbox_mcp_main_conf_t;


/* the OAuth 2.1 authorization server (sandbox_mcp_oauth_*) */
typedef struct {
    ngx_flag_t                  enable;
    ngx_str_t                   issuer;         /* "": public_url/Host */
    ngx_str_t                   resource;       /* "": {issuer}/mcp */
    time_t                      token_ttl;
    time_t                      refresh_ttl;
    time_t                      code_ttl;
    time_t                      client_ttl;
    time_t                      unused_client_ttl;  /* until a sign-in */
    ngx_uint_t                  unused_clients;     /* such clients, at
                                                       most */
    ngx_uint_t                  github_pending;     /* GitHub sign-ins
                                                       under way, at most */
    ngx_uint_t                  revoke_rate;        /* new revoked ids a
                                                       tenant makes a
                                                       minute */
    ngx_array_t                *redirect_hosts; /* of ngx_str_t; NULL:
                                                   any https host */
    ngx_str_t                   metadata_location;  /* "": no client
                                                       metadata documents */
    ngx_str_t                   github_client_id;   /* "": no GitHub */
    ngx_str_t                   github_secret;
    ngx_str_t                   github_authorize;   /* GitHub's URL */
    ngx_str_t                   github_location;    /* internal, ours */
    ngx_array_t                *github_allow;       /* of ngx_keyval_t:
                                                       login or @org ->
                                                       grant (JSON) */
} ngx_http_sandbox_mcp_oauth_conf_t;


typedef struct {
    ngx_flag_t                  enable;
    ngx_array_t                *allowed_hosts;      /* of ngx_str_t */
    ngx_array_t                *allowed_origins;    /* of ngx_str_t */
    size_t                      max_body;
    time_t                      session_ttl;
    ngx_str_t                   github_host;
    ngx_str_t                   public_url;
    time_t                      max_wait;
    size_t                      max_task_size;
    time_t                      run_timeout;
    time_t                      run_timeout_max;
    time_t                      ui_token_ttl;
    ngx_str_t                   default_model;
    ngx_array_t                *images;         /* a run may choose */
    ngx_array_t                *tenant_images;  /* ngx_keyval_t: a tenant's
                                                   default image */
    ngx_array_t                *agents;         /* ngx_keyval_t: offered
                                                   agent -> its model */
    ngx_str_t                   agents_argv;    /* "NAME=MODEL ..." */
    json_t                     *agents_tool;    /* run_task, listing them */
    ngx_uint_t                  page_size;
    ngx_uint_t                  max_queued;     /* a tenant's started runs */
    ngx_uint_t                  max_running;    /* ... claimed by runners */
    ngx_int_t                   max_cost;       /* micro-USD, 0: no cap */
    time_t                      retention;      /* ended runs' keys live */
    time_t                      session_idle;   /* idle sessions expire */
    off_t                       tenant_bytes;   /* a tenant's budgets (0:
                                                   none): Redis bytes */
    ngx_uint_t                  tenant_sessions;    /* ... live sessions */
    off_t                       tenant_disk;    /* ... workspaces' bytes */

    ngx_flag_t                  ui;             /* sandbox_mcp_ui */
    ngx_msec_t                  ui_heartbeat;   /* event streams' comment */
    size_t                      ui_stream_buffer;  /* a watcher's unsent
                                                      bytes at most */

    ngx_http_sandbox_mcp_oauth_conf_t  oauth;
} ngx_http_sandbox_mcp_loc_conf_t;


typedef struct ngx_http_sandbox_mcp_ctx_s   ngx_http_sandbox_mcp_ctx_t;
typedef struct ngx_http_sandbox_mcp_call_s  ngx_http_sandbox_mcp_call_t;
typedef struct ngx_http_sandbox_mcp_redis_cmd_s
    ngx_http_sandbox_mcp_redis_cmd_t;


/* one JSON-RPC message of the request body (a batch has several) */
struct ngx_http_sandbox_mcp_call_s {
    ngx_http_sandbox_mcp_ctx_t         *ctx;
    json_t                             *id;         /* NULL: notification */
    json_t                             *response;   /* result or error */

    ngx_http_sandbox_mcp_redis_cmd_t   *cmd;        /* Redis reply awaited */

    /* tools/call state */
    json_t                             *args;
    ngx_str_t                           run_id;
    ngx_uint_t                          tool;
    ngx_str_t                           path;       /* get_diff filter */
    size_t                              offset;     /* get_diff page */

    /* opencode_run_task's attempts: run id, session id of each, in turn
     * (2 * nattempts); opencode_cancel_run's group: the run ids */
    ngx_str_t                          *attempts;
    ngx_uint_t                          nattempts;
    ngx_uint_t                          next;       /* the group's next */
    ngx_str_t                           pick[2];    /* cancel_run of a pick
                                                       run: its attempt and
                                                       group ("": none) */
    ngx_str_t                           pick_run;   /* cancel_run of a
                                                       group: its pick run,
                                                       cancelled last */
    ngx_str_t                           run_text;   /* the run's answer
                                                       while its attempts
                                                       are read */

    /* long-poll (opencode_get_result waitSeconds): see the waiter */
    ngx_event_t                         wait;
    ngx_queue_t                         waiter;
    void                              (*wake)(ngx_http_sandbox_mcp_call_t
                                              *call);

    /* not NULL: the call's result passes here before it is kept (the
     * task and resource views of a tool's answer, see _methods.c); it
     * returns the result to keep, or NULL having answered the call */
    json_t                           *(*filter)(ngx_http_sandbox_mcp_call_t
                                                *call, json_t *result);
    ngx_str_t                           method_arg;     /* the filter's */
    json_t                             *progress_token; /* params._meta's */
    ngx_uint_t                          method_kind;

    /* a tool's answer as it stands in response: the JSON text of its
     * structuredContent (also its text content), from which a single
     * answer is written without serialising it again; len 0: none */
    ngx_str_t                           output;

    unsigned                            pending:1;
    unsigned                            waiting:1;
    unsigned                            recheck:1;
    unsigned                            expired:1;
    unsigned                            until_end:1;    /* tasks/result */
    unsigned                            progress:1;     /* streams progress */
    unsigned                            hold:1;         /* its filter took
                                                           another step: not
                                                           done yet */
    unsigned                            result_text:1;  /* output is the
                                                           result's JSON text
                                                           (response a
                                                           marker) */
};


struct ngx_http_sandbox_mcp_ctx_s {
    ngx_http_request_t                 *request;
    ngx_str_t                           tenant;
    ngx_array_t                        *repos;      /* of ngx_str_t: the
                                                       token's grants */
    ngx_str_t                           jti;        /* to check in Redis:
                                                       the worker's revoked
                                                       set cannot tell */
    ngx_str_t                           jti_ask;    /* the dashboard: such
                                                       an id to ask Redis
                                                       about */
    ngx_str_t                           jti_asked;  /* ... and the one it
                                                       answered for */
    ngx_str_t                           session_id;     /* Mcp-Session-Id */
    ngx_str_t                           version;        /* effective */
    ngx_str_t                           header_version; /* as sent */

    json_t                             *body;
    ngx_http_sandbox_mcp_call_t        *calls;
    ngx_uint_t                          ncalls;
    ngx_uint_t                          pending;

    ngx_http_sandbox_mcp_redis_cmd_t   *cmd;        /* session lookup etc. */
    redisReply                         *run_read;   /* the run the session
                                                       lookup read with it,
                                                       while it dispatches */

    ngx_uint_t                          status;     /* 503 on Redis loss */

    /* not NULL: the calls' answers go here instead of a JSON-RPC answer
     * (the dashboard); returns an nginx code, NGX_DONE: not finished */
    ngx_int_t                         (*finish)(ngx_http_sandbox_mcp_ctx_t
                                                *ctx);
    void                               *data;      /* of finish */

    /* the session is known: the request's messages go (the JSON-RPC
     * layer's dispatch, set before the session's Redis step) */
    ngx_int_t                         (*next)(ngx_http_sandbox_mcp_ctx_t
                                              *ctx);

    unsigned                            batch:1;
    unsigned                            dashboard:1;    /* the tool calls
                                                           are the run
                                                           pages' */
    unsigned                            batch_session:1;   /* negotiated
                                                              2025-03-26 */
    unsigned                            initialize:1;
    unsigned                            done:1;
    unsigned                            jti_revoked:1;  /* Redis's answer
                                                           for jti_asked */

    /* the session lookup's commands: HEXISTS revoked first; HGETALL of
     * the run last */
    unsigned                            lookup_revoked:1;
    unsigned                            lookup_run:1;
};


extern ngx_module_t  ngx_http_sandbox_mcp_module;


#endif /* _NGX_HTTP_SANDBOX_MCP_MODULE_H_INCLUDED_ */
