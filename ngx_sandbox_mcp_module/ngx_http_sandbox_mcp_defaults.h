/*
 * The module's defaults and limits, in one place: directive defaults, the
 * bounds of what a tenant or a sandbox may send, page sizes and the
 * worker's own limits.  What the runner shares (the Redis address, the
 * run timeout, the retention) comes from common/smcp_defaults.h, the event
 * stream cap from common/smcp_keys.h; the bounds and defaults
 * of tool arguments a client sees (limit, title length ...) are the
 * tools' schemas (tools/NAME.json), read from there.
 */

#ifndef _NGX_HTTP_SANDBOX_MCP_DEFAULTS_H_INCLUDED_
#define _NGX_HTTP_SANDBOX_MCP_DEFAULTS_H_INCLUDED_


#include "smcp_defaults.h"


/* directive defaults (docs/configuration.md): seconds,
 * bytes, counts */
#define NGX_HTTP_SANDBOX_MCP_REDIS_TIMEOUT      3000    /* ms */
#define NGX_HTTP_SANDBOX_MCP_REVOKED_MAX        50000   /* revoked token ids
                                                           a worker keeps:
                                                           its table takes
                                                           at most 20 MiB
                                                           (smcp_revoked_
                                                           max_bytes) */
#define NGX_HTTP_SANDBOX_MCP_MAX_BODY           (1024 * 1024)
#define NGX_HTTP_SANDBOX_MCP_SESSION_TTL        86400
#define NGX_HTTP_SANDBOX_MCP_GITHUB_HOST        SMCP_DEFAULT_GIT_HOST
#define NGX_HTTP_SANDBOX_MCP_MAX_WAIT           60
#define NGX_HTTP_SANDBOX_MCP_MAX_TASK_SIZE      (64 * 1024)
#define NGX_HTTP_SANDBOX_MCP_RUN_TIMEOUT        SMCP_DEFAULT_RUN_TIMEOUT
#define NGX_HTTP_SANDBOX_MCP_RUN_TIMEOUT_MAX    86400
#define NGX_HTTP_SANDBOX_MCP_UI_TOKEN_TTL       86400
#define NGX_HTTP_SANDBOX_MCP_DEFAULT_MODEL      "anthropic/claude-sonnet-4-5"
#define NGX_HTTP_SANDBOX_MCP_PAGE_SIZE          100     /* tools/list */
#define NGX_HTTP_SANDBOX_MCP_MAX_QUEUED         20
#define NGX_HTTP_SANDBOX_MCP_MAX_RUNNING        4
#define NGX_HTTP_SANDBOX_MCP_MAX_COST           25000000    /* micro-USD */
#define NGX_HTTP_SANDBOX_MCP_RETENTION          SMCP_DEFAULT_RETENTION
#define NGX_HTTP_SANDBOX_MCP_SESSION_IDLE       (7 * 86400)
#define NGX_HTTP_SANDBOX_MCP_TENANT_BYTES       (128 * 1024 * 1024)
#define NGX_HTTP_SANDBOX_MCP_TENANT_SESSIONS    16
#define NGX_HTTP_SANDBOX_MCP_TENANT_DISK        (20LL * 1024 * 1024 * 1024)
#define NGX_HTTP_SANDBOX_MCP_UI_HEARTBEAT       15000   /* ms */
#define NGX_HTTP_SANDBOX_MCP_UI_STREAM_BUFFER   (256 * 1024)
#define NGX_HTTP_SANDBOX_MCP_SESSION_RUNS_MAX   100     /* the runs an MCP
                                                           session's GET
                                                           stream logs: its
                                                           newest */

/* what the directives accept at most */
#define NGX_HTTP_SANDBOX_MCP_MAX_WAIT_LIMIT     3600
#define NGX_HTTP_SANDBOX_MCP_PAGE_SIZE_LIMIT    1000
#define NGX_HTTP_SANDBOX_MCP_RUNS_LIMIT         10000   /* max_queued,
                                                           max_running */
#define NGX_HTTP_SANDBOX_MCP_COST_LIMIT         1000000 /* USD */


/* Redis connections (per worker) */
#define NGX_HTTP_SANDBOX_MCP_BACKOFF_MIN        100     /* ms, reconnect */
#define NGX_HTTP_SANDBOX_MCP_BACKOFF_MAX        1000
#define NGX_HTTP_SANDBOX_MCP_READ_BURST         64      /* reads (16 KiB
                                                           each) per event
                                                           before yielding */
#define NGX_HTTP_SANDBOX_MCP_RUN_READ_MAX       8       /* fields of a
                                                           run a tool reads
                                                           at once */
#define NGX_HTTP_SANDBOX_MCP_MAX_ARGS           96      /* of one command
                                                           (run_create of
                                                           4 attempts: 84) */
#define NGX_HTTP_SANDBOX_MCP_REPLY_ELEMENTS     (4 * 1024 * 1024)
                                                /* of one reply's array (32
                                                   MiB of pointers): more
                                                   than any of the module's
                                                   replies, two million
                                                   revoked ids included */
#define NGX_HTTP_SANDBOX_MCP_SEND_PARTS        4       /* of one answer */
#define NGX_HTTP_SANDBOX_MCP_REDIS_FORMATTED    1024    /* bytes: a command
                                                           formatted on the
                                                           stack; longer:
                                                           hiredis's way */
#define NGX_HTTP_SANDBOX_MCP_LOADING_PROBE      100     /* ms: while Redis
                                                           loads its
                                                           dataset, the
                                                           scripts are tried
                                                           this often */
#define NGX_HTTP_SANDBOX_MCP_REDIS_LISTENERS    6       /* layers that hear
                                                           pub/sub or the
                                                           connection */
#define NGX_HTTP_SANDBOX_MCP_REVOKED_RETRY      10000   /* ms: the ids read
                                                           again while they
                                                           do not fit */
#define NGX_HTTP_SANDBOX_MCP_REVOKED_PRUNE      1000    /* expired ids
                                                           dropped per
                                                           read */

/* /mcp requests */
#define NGX_HTTP_SANDBOX_MCP_SESSION_ID_LEN     64      /* hex: 256 bits */
#define NGX_HTTP_SANDBOX_MCP_MAX_GRANTS         256     /* a token's repos */
#define NGX_HTTP_SANDBOX_MCP_TOKEN_CACHE_SIZE   1024    /* verified tokens a
                                                           worker keeps */
#define NGX_HTTP_SANDBOX_MCP_TOKEN_CACHE_TOKEN_MAX  4096  /* longer: never
                                                           cached */
#define NGX_HTTP_SANDBOX_MCP_WATCH_CACHE_SIZE   256     /* watchUrl tokens
                                                           a worker keeps */
#define NGX_HTTP_SANDBOX_MCP_WATCH_TOKEN_MAX    640     /* longer: not
                                                           kept */
#define NGX_HTTP_SANDBOX_MCP_WATCH_RUN_MAX      64
#define NGX_HTTP_SANDBOX_MCP_WATCH_TENANT_MAX   128
#define NGX_HTTP_SANDBOX_MCP_MESSAGE_MAX        512     /* an error text
                                                           for a client */
#define NGX_HTTP_SANDBOX_MCP_ERR_MAX            256     /* a library's
                                                           error text */
#define NGX_HTTP_SANDBOX_MCP_AUTO_TITLE         80      /* a title taken
                                                           from the task */

/* long-polls */
#define NGX_HTTP_SANDBOX_MCP_WAITER_BUCKETS     256

/* tools */
#define NGX_HTTP_SANDBOX_MCP_TASK_POLL          1000    /* ms: the tasks'
                                                   pollInterval */
#define NGX_HTTP_SANDBOX_MCP_TASK_GRACE         600     /* s: tasks/result
                                                   waits the longest run
                                                   timeout and this */
#define NGX_HTTP_SANDBOX_MCP_DIFF_PAGE          65536   /* get_diff page */
#define NGX_HTTP_SANDBOX_MCP_DIFF_SCAN          (256 * 1024)  /* a diff
                                                           without an index
                                                           searched here at
                                                           most */
#define NGX_HTTP_SANDBOX_MCP_DIFF_MAX           ((uint64_t) 1 << 40)
                                                        /* cursor bound */
#define NGX_HTTP_SANDBOX_MCP_LIST_BUDGET        2000    /* index entries
                                                           one list page
                                                           reads at most */
#define NGX_HTTP_SANDBOX_MCP_LIST_SCAN          20      /* ... per run
                                                           asked, with a
                                                           status filter */
#define NGX_HTTP_SANDBOX_MCP_LIST_TIES          16      /* read beyond: runs
                                                           of the cursor's
                                                           millisecond */

/* tool arguments: bounds before their shape is checked (the bounds a
 * client sees are in the tools' schemas) */
#define NGX_HTTP_SANDBOX_MCP_ID_ARG_MAX         64      /* runId, sessionId */
#define NGX_HTTP_SANDBOX_MCP_IMAGE_MAX          255     /* image: a name
                                                           a runner takes */
#define NGX_HTTP_SANDBOX_MCP_REPOSITORY_MAX     512     /* a repository URL */
#define NGX_HTTP_SANDBOX_MCP_ATTEMPTS_MAX       4       /* runs of one
                                                           task side by
                                                           side (attempts) */
#define NGX_HTTP_SANDBOX_MCP_SESSION_REPOS      8       /* repositories one
                                                           session may name */
#define NGX_HTTP_SANDBOX_MCP_STATUS_ARG_MAX     16
#define NGX_HTTP_SANDBOX_MCP_STEER_MAX          16384   /* a message to a
                                                           running agent */

#define NGX_HTTP_SANDBOX_MCP_UI_BODY_MAX       (64 * 1024)   /* the run
                                                           page's message,
                                                           as JSON */

/* opencode_send_message: a run's inbox */
#define NGX_HTTP_SANDBOX_MCP_STEER_WAITING      10      /* messages not yet
                                                           taken */
#define NGX_HTTP_SANDBOX_MCP_STEER_PER_RUN      100     /* messages a run
                                                           is ever sent */
#define NGX_HTTP_SANDBOX_MCP_STEER_TTL                                        \
    (2 * NGX_HTTP_SANDBOX_MCP_RUN_TIMEOUT_MAX)     /* an inbox, from its last
                                                      message: longer than a
                                                      run lasts */

/* egress */
#define NGX_HTTP_SANDBOX_MCP_PUSH_HEAD          (64 * 1024)   /* a push's
                                                           command list is
                                                           read from these
                                                           first bytes */
#define NGX_HTTP_SANDBOX_MCP_PULL_REQUEST_MAX   (1024 * 1024) /* a pull
                                                           request's body */


#endif /* _NGX_HTTP_SANDBOX_MCP_DEFAULTS_H_INCLUDED_ */
