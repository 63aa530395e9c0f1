/*
 * runner: turns queued runs into finished ones.
 *
 * It reads run ids from the Redis stream `queue` (consumer group
 * `runners`), starts one Docker container per run (the OpenCode agent is
 * the container's main process), follows the container's log stream into
 * the run's event stream as it happens, and records the outcome.  Several
 * runners, on one host or many, share one queue.
 *
 * Files, one concern each: main.c (signals, the loop), config.c (the
 * option table), log.c, store.c (every Redis call is in store*.c: a
 * connection, the commands and scripts, its scripts being the .lua files
 * in ngx_sandbox_mcp_module/common/scripts, embedded at build; store.h
 * is theirs alone), store_queue.c (the queue and its consumer group),
 * store_run.c (a run's hash and its status scripts), store_event.c (a
 * run's events), store_session.c (sessions, the janitor's scripts),
 * docker.c (Engine API over the unix socket: HTTP statuses back
 * to the caller), backend.c (what runs a sandbox: `docker`, docker.c's
 * containers, or `swarm`, swarm.c's one-replica services; run.c,
 * follow.c and watchdog.c call it), logstream.c (Docker's multiplexed
 * log frames to lines),
 * run.c (one run from claim to outcome), follow.c (its container's log
 * into its events, to the exit), watchdog.c (its watchdog thread:
 * cancel, deadline, limits), outcome.c (what the agent's events add up
 * to), workspace.c (a session volume's size), janitor.c (idle sessions
 * expired), pr.c (a run's pull request, through the egress proxy),
 * notify.c (runs' completion notifications, through the egress proxy:
 * their thread; store_notify.c their Redis side),
 * image.c (the sandbox image's contract, checked at start), pool.c (the
 * warm pool: --pool and --pool-images sandboxes made ahead, one given
 * to a new session's run of their image), spec.c (the container spec
 * and lock-down every sandbox gets, a run's or the pool's), relay.c (the
 * egress relay the runner keeps for a swarm stack: --egress-relay),
 * attach.c (a container's stdin, written once: how a pooled one is
 * given its run), metrics.c (the counters and their /metrics listener),
 * test_hooks.c (the test build's hooks: only `make runner-test` compiles
 * it in).  smcp_token.c is a tool of its own (smcp-token), not part of
 * the runner.
 *
 * Everything a sandbox prints, and every id read back from Redis, is
 * hostile input: bounded, validated, escaped before it is logged.
 */

#ifndef RUNNER_H
#define RUNNER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include <jansson.h>

#include "smcp_defaults.h"
#include "smcp_diff.h"
#include "smcp_keyring.h"
#include "smcp_keys.h"
#include "smcp_redis_addr.h"
#include "smcp_url.h"
#include "smcp_util.h"
#include "smcp_validate.h"
#include "smcp_version.h"

#define RUNNER_OK       0
#define RUNNER_ERR     -1
#define RUNNER_AGAIN   -2       /* try later: not an error */
#define RUNNER_RETRY   -3       /* the engine did not answer (yet): no
                                   verdict on the configuration */

#define RUNNER_ERRLEN   256


/*
 * Limits and intervals: fixed, in one place.  What an operator may change
 * is config.c's option table; what the module and the runner share is
 * common/smcp_defaults.h.
 */

/* Redis */
#define RUNNER_REDIS_CONNECT_S       5      /* connect timeout */
#define RUNNER_REDIS_REPLY_S         15     /* a reply: a blocking read's
                                               time plus a margin */
#define RUNNER_REDIS_LOADING_POLL_MS 200    /* Redis loading its dataset */
#define RUNNER_STORE_ARGS            64     /* arguments of one command */
#define RUNNER_KEY_MAX               512    /* a key name: prefix, tenant */
#define RUNNER_NUM_MAX               64     /* a number field as text */
#define RUNNER_STREAM_ID_SIZE        (SMCP_STREAM_ID_MAX + 1)
#define RUNNER_EVENTS_PAGE           100    /* events read at once */
#define RUNNER_SESSIONS_PAGE         500    /* sessions read at once
                                               (ZSCAN's COUNT) */
#define RUNNER_PRUNE_MAX             100    /* run set members checked */
#define RUNNER_CLAIM_TRIES           3      /* a claim, after clearing a
                                               set of ended runs */
#define RUNNER_EVENTS_LOOKBACK       1000   /* pages looked back for the
                                               last log line */
#define RUNNER_BACKOFF_MAX_S         8      /* reconnects: 1, 2, 4, 8 s */

/* the main loop */
#define RUNNER_BLOCK_MS              1000   /* one read of the queue */
#define RUNNER_PENDING_MAX           10000  /* own pending entries read */
#define RUNNER_AUTOCLAIM_S           5      /* silent runners looked for */
#define RUNNER_RECONCILE_S           60     /* ended runs' containers */
#define RUNNER_RECONCILE_FAILED_S    5      /* ... while a removal failed */
#define RUNNER_WAITING_RETRY_S       1      /* runs waiting for their turn */
#define RUNNER_IDLE_MS               200    /* nothing to do */

/* a run */
#define RUNNER_TOUCH_MS              10000  /* its queue entry; at least
                                               three times in --claim-idle */
#define RUNNER_TOKEN_GRACE_S         300    /* the token outlives the
                                               deadline a bit */
#define RUNNER_FOLLOW_TRIES          5
#define RUNNER_WAIT_S                10     /* one Docker wait, looped */
#define RUNNER_TICK_MS               100    /* the watchdog's and sleeps' */
#define RUNNER_CHECK_MS              1000   /* cancel, cost, deadline */
#define RUNNER_RECONNECT_MS          2000   /* the watchdog's Redis */
#define RUNNER_KILL_RETRY_MS         2000
#define RUNNER_KILL_GRACE_MS         30000  /* a killed sandbox's log ends */
#define RUNNER_WS_CHECK_MS           5000   /* the workspace measured */
#define RUNNER_EGRESS_CHECK_MS       2000   /* --egress-container on the
                                               session's network (a
                                               recreated one is not) */
#define RUNNER_WS_BUSY_MS            300    /* another run's walk */
#define RUNNER_WS_SHARE              10     /* a walk: 1/10 of the time */
#define RUNNER_WS_DEPTH              128    /* directories open in a walk */
#define RUNNER_WS_LAST_TRIES         10     /* the last measure, when
                                               another walk is going on */
#define RUNNER_MAX_ATTEMPTS          3      /* takes (claims, re-attaches,
                                               less clean detaches) that
                                               crashed runners: failed */
#define RUNNER_ERROR_MAX             4096   /* bytes of a run's error */
#define RUNNER_EVENT_BYTES           64     /* what an event holds in Redis
                                               beside its data (its tenant's
                                               budget) */
#define RUNNER_STDERR_TAIL           2048   /* bytes of the agent's stderr
                                               kept for a failed run's
                                               error */

/* a pull request (pr.c) */
#define RUNNER_PR_ANSWER_MAX         (1024 * 1024)  /* GitHub's answer */
#define RUNNER_PR_TIMEOUT_S          30     /* one REST call */
#define RUNNER_PR_MESSAGE_MAX        512    /* GitHub's or git's words */
#define RUNNER_PR_URL_MAX            512
#define RUNNER_PR_TITLE_MAX          256
#define RUNNER_PR_RESULT_MAX         8192   /* the result in its body */
#define RUNNER_PR_FILES_MAX          100    /* files listed in its body */
#define RUNNER_STEP_TOKENS_MAX       1000000000LL   /* tokens in a step */
#define RUNNER_STEP_COST_MAX         1000.0         /* USD for a step */

/* a log line's buffer */
#define RUNNER_LINE_FIRST            4096   /* its first size (it doubles) */
#define RUNNER_LINE_KEEP             (64 * 1024)    /* kept between lines
                                               up to this size */

/* the sandbox */
#define RUNNER_SANDBOX_USER          "1000:1000"
#define RUNNER_SANDBOX_TMP           "rw,nosuid,nodev,exec,size=1g,mode=1777"
#define RUNNER_SANDBOX_HOME          "rw,nosuid,nodev,exec,size=256m," \
                                     "uid=1000,gid=1000,mode=0700"
#define RUNNER_SANDBOX_LOG_SIZE      "50m"  /* json-file: 5 files of it */
#define RUNNER_SANDBOX_LOG_FILES     "5"
#define RUNNER_SANDBOX_ENV_MAX       2048   /* one environment entry */
#define RUNNER_SANDBOX_REPOS         16     /* a session's repositories */

/* Docker */
#define RUNNER_DOCKER_PATH           "/v1.41"
#define RUNNER_DOCKER_API            "http://localhost" RUNNER_DOCKER_PATH
#define RUNNER_DOCKER_CONNECT_S      5
#define RUNNER_DOCKER_QUICK_S        30     /* most calls */
#define RUNNER_DOCKER_SLOW_S         60     /* create, start, remove */
#define RUNNER_DOCKER_ANSWER_MAX     (16 * 1024 * 1024)  /* one answer */
#define RUNNER_DOCKER_REF_MAX        128    /* a name or id in a path */
#define RUNNER_CONTAINER_ID_LEN      64     /* hex digits of a container id */
#define RUNNER_CONTAINER_SIZE        80     /* a buffer for one */

/* the warm pool (pool.c) */
#define RUNNER_POOL_MAX              64     /* the pooled sandboxes of
                                               all images, at most */
#define RUNNER_POOL_IMAGES           16     /* images with a pool */
#define RUNNER_POOL_CHECK_MS         2000   /* idle ones still running? */
#define RUNNER_POOL_RETRY_MS         2000   /* after a failed make */
#define RUNNER_POOL_REFILL_MS        4000   /* after a take: its run's
                                               first prompt goes first */
#define RUNNER_POOL_PREFIX           "smcp-pool-"   /* its container's and
                                               its volume's names */
#define RUNNER_POOL_DIR              "/workspace"   /* its volume */
#define RUNNER_POOL_HANDOVER         "stdin"        /* how its run reaches
                                               it: label smcp.handover */
#define RUNNER_FORK_COPY_SECONDS     600    /* a fork's workspace copy */
#define RUNNER_FORK_MEASURE_TRIES    25     /* RUNNER_IDLE_MS each: its
                                               measure waits for another */
#define RUNNER_FORK_HOLD_MS          120000 /* its hold on the forked
                                               session's runs, pushed on
                                               (at least 3 claim-idles) */
#define RUNNER_NET_SIZE              192    /* a network's name: the
                                               pool's, a session's */

/* completion notifications (notify.c) */
#define RUNNER_NOTIFY_SENDERS        4      /* threads: attempts at once */
#define RUNNER_NOTIFY_TICK_MS        500    /* due ones looked for */
#define RUNNER_NOTIFY_BATCH          8      /* ... at most this many */
#define RUNNER_NOTIFY_LEASE_MS       60000  /* a claimed attempt's */
#define RUNNER_NOTIFY_TIMEOUT_S      10     /* one attempt, all of it */
#define RUNNER_NOTIFY_BACKOFF_MAX_S  300    /* 1, 2, 4 ... 256, 300 s */
#define RUNNER_NOTIFY_URL_MAX        SMCP_URL_MAX  /* notify_url, notify_page */
#define RUNNER_NOTIFY_TEXT_MAX       4096   /* bytes read of a text field */
#define RUNNER_NOTIFY_TASK_CHARS     200    /* the task's first line */
#define RUNNER_NOTIFY_ERROR_CHARS    500    /* the run's error */
#define RUNNER_NOTIFY_ANSWER_MAX     4096   /* bytes read of an answer */
#define RUNNER_NOTIFY_TOKEN_S        60     /* the notify token's life */
#define RUNNER_NOTIFY_TTL_MIN        60     /* a watch link's life */
#define RUNNER_NOTIFY_TTL_MAX        2592000
#define RUNNER_NOTIFY_TTL_DEFAULT    86400  /* none stored: the module's
                                               default ui token ttl */
#define RUNNER_NOTIFY_ID_LEN         32     /* hex digits of a delivery */

/* the janitor */
#define RUNNER_JANITOR_BATCH         100    /* sessions, expired runs'
                                               bytes, per look */
#define RUNNER_JANITOR_STALE_MS      (10 * 60 * 1000)   /* a dead runner's
                                               mark is taken over */


typedef struct {
    unsigned char   data[SMCP_SECRET_MAX];
    size_t          len;
} runner_secret_t;


/* an image's warm pool: n sandboxes of it kept idle */
typedef struct {
    char            image[256];
    int             n;
} runner_pool_size_t;


/*
 * The configuration (config.c's option table): loaded once, before any
 * thread starts, and never written again; everything else reads it
 * through the const pointer runner_config.  What is found out while
 * running (the store's identity) lives with whoever finds it.
 */
typedef struct {
    smcp_redis_addr_t redis;                /* host:port, unix:/path or
                                               sentinel://...: where */
    runner_secret_t  redis_password;        /* AUTH; never logged */
    char             prefix[64];
    char             name[128];             /* consumer name: stable per
                                               host */
    char             instance[192];         /* name + pid + random: claims */
    char             docker_socket[256];
    char             image[256];
    char             allowed_images[1024];  /* comma list: a run's choice */
    char             agent_images[1024];    /* comma list of AGENT=IMAGE */
    char             network[128];
    char             egress_url[256];       /* as seen from the sandbox */
    char             dns[64];               /* the sandbox network's gateway */
    char             egress_container[128]; /* compose: nginx joins each
                                               session's own network */
    char             egress_relay[256];     /* HOST:PORT: the runner keeps
                                               egress_container, a relay
                                               to it */
    char             backend[16];           /* docker | swarm */
    char             constraints[512];      /* swarm: placement, ';'
                                               between them */
    char             git_host[128];
    char             git_author_name[128];  /* a run's commits (--git-author) */
    char             git_author_email[128];
    int              concurrency;
    int              session_hold;          /* --session-hold: seconds a
                                               session's next sandbox is
                                               held (0: none) */
    int              pool;                  /* --pool: idle sandboxes of
                                               the default image */
    char             pool_images[1024];     /* --pool-images, as given */
    /* the pools: --pool's (the default image), then --pool-images' */
    runner_pool_size_t  pools[RUNNER_POOL_IMAGES];
    int              npools;
    int              pool_total;            /* their n, added up: 0 no
                                               pool */
    int64_t          memory;                /* bytes */
    int64_t          nano_cpus;
    int64_t          pids;
    int64_t          diff_max;              /* bytes kept of a run's diff */
    int64_t          max_line;              /* longer log lines are cut */
    int64_t          max_event_bytes;       /* a run's stored events */
    int64_t          max_result;            /* bytes kept of a run's result */
    int              claim_idle_ms;         /* take over a dead runner's
                                               runs */
    int64_t          workspace_limit;       /* bytes of a session's volume */
    int64_t          workspace_inodes;
    int              janitor_interval;      /* s between idle-session
                                               passes */
    int64_t          tenant_bytes;          /* a tenant's budgets (0: none):
                                               Redis bytes of its runs */
    int64_t          tenant_disk;           /* ... its workspaces' bytes */
    int64_t          min_free_disk;         /* the host floor: no sandbox
                                               starts below it */
    int64_t          min_free_redis;        /* ... nor below this much of
                                               Redis' maxmemory free */
    char             disk_path[256];        /* whose free disk: "" the
                                               engine's volumes */
    char             metrics[256];          /* --metrics ADDR; "": off */
    char             log_format[8];         /* "text" or "json" */
    runner_secret_t  notify_secret;         /* --notify-secret-file: signs
                                               completion notifications
                                               (len 0: unsigned) */
    int              notify_window;         /* s: retried this long */
    runner_secret_t  secret;                /* --secret-file: into keys,
                                               then wiped */
    smcp_keyring_t   keys;                  /* key[0] signs the run
                                               tokens */
} runner_config_t;


/* a Redis connection (store.c), one thread's own */
typedef struct runner_store_s  runner_store_t;

/* a run's spend: its cap and what the egress metered (USD; 0: none) */
typedef struct {
    double      max;
    double      metered;
} runner_spend_t;


/* what the agent's events add up to */
typedef struct {
    char       *result;                 /* last text event */
    char       *error;                  /* last error event's message */
    int64_t     tokens_input;
    int64_t     tokens_output;
    int64_t     tokens_reasoning;
    int64_t     tokens_cache_read;
    int64_t     tokens_cache_write;
    double      cost;
    char       *diff;
    size_t      diff_len;
    int         diff_truncated;
    int         clone_failed;
    int         pr_step;                /* RUNNER_PR_* the sandbox said */
    char       *push_error;             /* push_failed: git's words */
    char        stderr_tail[RUNNER_STDERR_TAIL];    /* the agent's last
                                           stderr bytes */
    size_t      stderr_len;
    char        oc_session[96];         /* OpenCode's own session id */
} runner_outcome_t;

/* what the sandbox did about a pull request (its lifecycle lines) */
#define RUNNER_PR_NONE          0
#define RUNNER_PR_PUSHED        1
#define RUNNER_PR_PUSH_FAILED   2
#define RUNNER_PR_SKIPPED       3       /* no changes */

/* a run's pull request, as stored (pr_status, pr_url, pr_number) */
typedef struct {
    const char *status;                 /* opened | no_changes | failed |
                                           pushed (an attempt waiting for
                                           its pick);
                                           NULL: none asked for */
    char        url[RUNNER_PR_URL_MAX];
    char        number[32];
    char        error[RUNNER_PR_MESSAGE_MAX + 64];
} runner_pr_t;


/* what a diff adds up to (common/smcp_diff.c's sections): they agree */
typedef struct {
    json_t     *files;                  /* [{path, additions, deletions}] */
    json_t     *index;                  /* {path: [offset, length]} */
    char        stat[SMCP_DIFF_STAT_MAX];   /* git's --shortstat, or "" */
} runner_diff_t;


/* how a run thread ended, for the main loop */
#define RUNNER_RUN_ACTIVE   0
#define RUNNER_RUN_DONE     1
#define RUNNER_RUN_WAIT     2       /* not its turn (its session, its
                                       tenant's limit): try again later */
#define RUNNER_RUN_RETRY    3       /* Redis trouble: try again later */

/* why a run's sandbox is stopped before its agent is done */
#define RUNNER_STOP_NONE      0
#define RUNNER_STOP_CANCEL    1
#define RUNNER_STOP_DEADLINE  2
#define RUNNER_STOP_LIMIT     3     /* a limit: the message says which */

/* one run, owned by one thread; its watchdog shares what is atomic and
 * what stop_lock guards */
typedef struct runner_run_s {
    char                 id[SMCP_ID_LEN + 1];
    char                 stream_id[RUNNER_STREAM_ID_SIZE];  /* in queue */
    char                 session[SMCP_ID_LEN + 1];
    char                 container[RUNNER_CONTAINER_SIZE];
    char                 volume[128];       /* the session's workspace */
    char                 last_ts[48];       /* last stored log timestamp */
    int                  last_ts_count;     /* lines stored at last_ts */
    int64_t              deadline_ms;
    int                  reattach;
    int                  pooled;            /* its sandbox came from the
                                               pool, or was its session's
                                               held one */
    int                  held;              /* the latter */
    char                 image[256];        /* its sandbox's ("": not
                                               known, re-attached) */
    long long            max_running;       /* its tenant's, as the run
                                               says (0: none) */
    int                  diff_marker;       /* the diff's marker is stored */
    int64_t              event_bytes;       /* stored, of the budget */
    int                  budget_hit;        /* later output is not stored */
    char                 tenant[SMCP_TENANT_MAX + 1];  /* "": unknown */
    int64_t              tenant_bytes_max;  /* its budgets (0: none) */
    int64_t              tenant_disk_max;
    int64_t              tenant_bytes;      /* its usage, as last seen */
    int                  diff_dropped;      /* its diff is not stored: the
                                               tenant's budget */
    atomic_int           state;
    runner_outcome_t     out;
    runner_store_t      *store;             /* the run thread's */
    pthread_t            thread;

    /* the watchdog: cancel, deadline and limits, whatever the log does */
    pthread_t            watchdog;
    int                  watching;
    atomic_int           watch_end;         /* the run thread: stop now */
    atomic_llong         killed_at;         /* ms: the sandbox was killed */
    atomic_llong         cost_micros;       /* the outcome's cost so far */
    pthread_mutex_t      stop_lock;
    int                  stop;              /* RUNNER_STOP_* */
    char                 stop_error[256];

    runner_pr_t          pr;                /* its pull request */
    int                  pr_done;           /* tried once: not again */
    int                  pr_cancelled;      /* a pick run's cancel, read
                                               right before its POST */
    char                 agent[SMCP_AGENT_MAX + 1]; /* "": OpenCode */
    char                 pick_of[SMCP_ID_LEN + 1];  /* a pick run: the
                                               attempt whose pull request
                                               it opens ("": none) */
    char                 pick_group[SMCP_ID_LEN + 1];

    struct runner_run_s *next;
} runner_run_t;


/* main.c: the globals every thread reads */
extern const runner_config_t  *runner_config;
extern atomic_int              runner_stop;     /* SIGTERM, SIGINT, a
                                                   second SIGUSR1 */
extern atomic_int              runner_drain;    /* SIGUSR1: no new run */
extern atomic_int              runner_release_failed;   /* reconcile soon */

/* sentinel.c: --redis sentinel://...: the moves of the master the
 * sentinels told of (store connections made before are stale), and the
 * thread that listens */
extern atomic_uint             runner_sentinel_epoch;
void *runner_sentinel_thread(void *arg);

/* config.c */
int runner_config_load(runner_config_t *cfg, int argc, char **argv,
    char *err, size_t errlen);
int runner_config_list_next(const char **p, char *buf, size_t size);
int runner_config_offers(const runner_config_t *cfg, const char *image);
void runner_config_usage(FILE *f);
void runner_config_markdown(FILE *f);
int runner_config_test_hooks(char *err, size_t errlen);

/* log.c: one line per event, key=value, never a secret; the message is
 * escaped (quotes, backslashes, anything but printable ASCII): text from a
 * sandbox cannot forge a line */
void runner_log(const char *level, const char *run, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
size_t runner_log_escape(char *dst, size_t size, const char *src,
    size_t len);
/* the tenant this thread's lines are about (JSON lines); NULL: none */
void runner_log_tenant(const char *tenant);

/* metrics.c: counters (atomics) any thread adds to, and --metrics ADDR's
 * listener thread, which serves them in Prometheus' text format */
int runner_metrics_start(const char *addr, char *err, size_t errlen);
void runner_metrics_stop(void);
int runner_metrics_enabled(void);
void runner_metrics_outcome(const char *status);
void runner_metrics_started(int64_t ms);
void runner_metrics_docker_error(void);
void runner_metrics_reattach(void);
void runner_metrics_pool(int idle, int empty);
void runner_metrics_queue(int64_t depth, int64_t lag_ms);
void runner_metrics_active(int n);
void runner_metrics_notify(const char *result);

/*
 * store*.c: every Redis call of the runner.  A connection is one thread's
 * own; RUNNER_ERR with runner_store_lost() true means it broke (close it,
 * connect again).  wait: a Redis loading its dataset is waited for.
 */

/* a stored event's data, and whether it came from the container's log */
typedef void (*runner_event_pt)(void *data, const char *json, size_t len,
    int from_log);

runner_store_t *runner_store_connect(int wait, char *err, size_t errlen);
void runner_store_close(runner_store_t *st);
int runner_store_lost(runner_store_t *st);
const char *runner_store_error(runner_store_t *st);
int runner_store_init_group(runner_store_t *st, char *err, size_t errlen);
/* this runner's heartbeat (SMCP_KEY_RUNNERS), for /healthz */
int runner_store_heartbeat(runner_store_t *st, int draining);
/* queued runs no runner took yet, and the age of the oldest (ms, 0: none) */
int runner_store_queue_stats(runner_store_t *st, int64_t *depth,
    int64_t *lag_ms);
int runner_store_identity(runner_store_t *st, char *err, size_t errlen);
const char *runner_store_id(void);
int runner_store_next(runner_store_t *st, int block_ms, char *run_id,
    char *stream_id, int pending, char *err, size_t errlen);
int runner_store_autoclaim(runner_store_t *st, char *run_id,
    char *stream_id, char *err, size_t errlen);
int runner_store_touch(runner_store_t *st, const char *stream_id);
int runner_store_ack(runner_store_t *st, const char *stream_id);
int runner_store_claim(runner_store_t *st, const char *run_id,
    char *status, size_t slen);
int runner_store_set_running(runner_store_t *st, const char *run_id,
    const char *container, int64_t deadline_ms, char *status, size_t slen);
int runner_store_finish(runner_store_t *st, runner_run_t *run,
    const char *status, int exit_code, const char *error,
    const runner_diff_t *diff, const runner_pr_t *pr);
int runner_store_event(runner_store_t *st, const char *run_id,
    const char *tenant, const char *type, const char *data, size_t len,
    const char *dts, size_t count, int64_t *usage);
/* the tenant's usage (tenant:{t}:usage): bytes of Redis, workspaces */
int runner_store_usage(runner_store_t *st, const char *tenant,
    int64_t *bytes, int64_t *disk);
/* a session's workspace measured: the tenant's disk usage, into *disk */
int runner_store_usage_disk(runner_store_t *st, const char *tenant,
    const char *session, int64_t bytes, int64_t *disk);
/* ended runs whose keys expired: their bytes off their tenants' usage
 * (RUNNER_AGAIN: a full batch, more may be due) */
int runner_store_budget_release(runner_store_t *st, int64_t now);
/* Redis' used_memory and maxmemory (0: no cap) */
int runner_store_memory(runner_store_t *st, int64_t *used, int64_t *max);
/* a queued run held back: why, as its error and an event (when it
 * changed); "" once it goes on */
int runner_store_waiting(runner_store_t *st, const char *run_id,
    const char *why);
int runner_store_attempts(runner_store_t *st, const char *run_id,
    int delta, long long *n);
int runner_store_hget(runner_store_t *st, const char *run_id,
    const char *field, char *buf, size_t size);
int runner_store_limits(runner_store_t *st, const char *run_id,
    int *cancel, runner_spend_t *spend);
json_t *runner_store_run(runner_store_t *st, const char *run_id);
int runner_store_session_get(runner_store_t *st, const char *session,
    const char *field, char *buf, size_t size);
int runner_store_session_set(runner_store_t *st, const char *session,
    const char *field, const char *value);
int runner_store_fork_done(runner_store_t *st, const char *forked,
    const char *session, const char *run_id, int made);
int runner_store_fork_hold(runner_store_t *st, const char *forked,
    const char *run_id, int64_t hold_ms, char *status, size_t slen);
int runner_store_last_log_ts(runner_store_t *st, runner_run_t *run);
int runner_store_replay(runner_store_t *st, const char *run_id,
    runner_event_pt on_event, void *data);
int runner_store_sessions_due(runner_store_t *st, int64_t now,
    char ids[][SMCP_ID_LEN + 1], int max, int *n);
/* of names (volume name -> anything), those a live session names taken
 * out */
int runner_store_session_unnamed(runner_store_t *st, json_t *names);
int runner_store_janitor_begin(runner_store_t *st, const char *id,
    char *status, size_t slen);
int runner_store_janitor_end(runner_store_t *st, const char *id,
    char *status, size_t slen);

/* store_notify.c: completion notifications (notify.c) */

/* an attempt claimed (notify_claim.lua) */
typedef struct {
    long long   attempt;                /* 1 for the first */
    char        delivery[RUNNER_NOTIFY_ID_LEN + 2];    /* as stored: one
                                           byte over its length when
                                           longer */
    int64_t     first;                  /* ms; 0: not a number */
} runner_notify_claim_t;

/* what a message is made of, read back from the run hash: each value cut
 * to its buffer (a text at a character's boundary, valid UTF-8), NUL bytes
 * made spaces; a URL or an id longer than its cap is one byte over it */
typedef struct {
    char        url[RUNNER_NOTIFY_URL_MAX + 2];     /* notify_url */
    char        format[16];                         /* notify_format */
    char        page[RUNNER_NOTIFY_URL_MAX + 2];    /* watch_base: the
                                                       run page without a
                                                       token */
    char        ttl[RUNNER_NUM_MAX];                /* notify_ttl */
    char        status[RUNNER_NUM_MAX];
    char        task[RUNNER_NOTIFY_TEXT_MAX];
    char        title[RUNNER_NOTIFY_TEXT_MAX];
    char        error[RUNNER_NOTIFY_TEXT_MAX];
    char        diff_stat[SMCP_DIFF_STAT_MAX];
    char        pr_url[RUNNER_PR_URL_MAX + 2];
    char        session[SMCP_ID_LEN + 2];
    char        tenant[SMCP_TENANT_MAX + 2];
    char        finished_at[RUNNER_NUM_MAX];
} runner_notify_run_t;

/* runs due by now (at most max; members that are no run id dropped):
 * RUNNER_AGAIN when there may be more */
int runner_store_notify_due(runner_store_t *st, int64_t now,
    char ids[][SMCP_ID_LEN + 1], int max, int *n);
/* RUNNER_OK: claimed (c); RUNNER_AGAIN: status says why not ("gone",
 * "taken"); RUNNER_ERR: status the error */
int runner_store_notify_claim(runner_store_t *st, const char *run_id,
    int64_t now, const char *delivery, runner_notify_claim_t *c,
    char *status, size_t slen);
int runner_store_notify_read(runner_store_t *st, const char *run_id,
    runner_notify_run_t *m);
/* the attempt's result and its event (notify_result.lua): RUNNER_OK, or
 * RUNNER_AGAIN ("stale", "gone" in status), RUNNER_ERR */
int runner_store_notify_result(runner_store_t *st, const char *run_id,
    long long attempt, const char *result, int64_t next, const char *data,
    char *status, size_t slen);

/*
 * docker.c: each call returns the HTTP status of Docker's answer, or one
 * of these; the caller decides what it means (err: words for the log).
 */
#define RUNNER_DOCKER_DOWN      0   /* dockerd not reached */
#define RUNNER_DOCKER_TIMEOUT  -1   /* no answer within the call's time */
#define RUNNER_DOCKER_INVALID  -2   /* refused before asking, or an answer
                                       without what it must hold */
#define RUNNER_DOCKER_CUT      -3   /* a log transfer stopped early */

/* an answer read by libcurl, at most max bytes (runner_buf_collect) */
typedef struct {
    char    *data;
    size_t   len;
    size_t   max;
    int      over;                  /* it was longer: cut */
} runner_buf_t;

size_t runner_buf_collect(char *ptr, size_t size, size_t nmemb, void *ud);

long runner_docker_ping(char *err, size_t errlen);
long runner_docker_image_inspect(const char *image, json_t **out,
    char *err, size_t errlen);
long runner_docker_volume_create(const char *name, const char *session,
    char *err, size_t errlen);
long runner_docker_volume_make(const char *name, json_t *labels,
    char *err, size_t errlen);
long runner_docker_volumes_unused(json_t *labels, json_t **list,
    char *err, size_t errlen);
long runner_docker_volume_mountpoint(const char *name, char *buf,
    size_t size, char *err, size_t errlen);
long runner_docker_volume_remove(const char *name, char *err,
    size_t errlen);
long runner_docker_network_create(const char *name, const char *session,
    char *err, size_t errlen);
long runner_docker_network_connect(const char *name, const char *container,
    const char *alias, char *err, size_t errlen);
long runner_docker_network_member(const char *name, const char *container,
    int *member, char *err, size_t errlen);
long runner_docker_network_disconnect(const char *name,
    const char *container, char *err, size_t errlen);
long runner_docker_network_remove(const char *name, char *err,
    size_t errlen);
long runner_docker_create(json_t *spec, const char *name, char *id,
    size_t idlen, char *err, size_t errlen);
long runner_docker_start(const char *id, char *err, size_t errlen);
long runner_docker_kill(const char *id, char *err, size_t errlen);
long runner_docker_wait(const char *id, long timeout, int *exit_code,
    char *err, size_t errlen);
long runner_docker_remove(const char *id, char *err, size_t errlen);
long runner_docker_running(const char *id, int *running, char *err,
    size_t errlen);
long runner_docker_list(const char *label, json_t **list, char *err,
    size_t errlen);
long runner_docker_filtered(const char *path, const char *key,
    const char *value, json_t **list, char *err, size_t errlen);
int runner_docker_valid_id(const char *id);

/* the session network (compose), made of the calls above: RUNNER_OK,
 * RUNNER_ERR; the drop RUNNER_AGAIN while a sandbox is still on it */
int runner_docker_session_net(const char *name, const char *session,
    const char *peer, char *err, size_t errlen);
int runner_docker_session_net_drop(const char *name, const char *peer,
    char *err, size_t errlen);
int runner_docker_net_join(const char *name, const char *peer, char *err,
    size_t errlen);

/* a log line: its bytes (any byte but '\n', NUL included), and how many
 * more the line had beyond its cap (cut off, not delivered) */
typedef int (*runner_line_pt)(void *data, int stream, const char *ts,
    const char *line, size_t len, size_t cut);
typedef int (*runner_tick_pt)(void *data);

long runner_docker_follow(const char *id, const char *since, int follow,
    runner_line_pt on_line, runner_tick_pt on_tick, void *data,
    char *err, size_t errlen);

long runner_docker_call(const char *method, const char *path, json_t *body,
    long timeout, json_t **out, char *err, size_t errlen);
long runner_docker_send(const char *method, const char *path,
    const char *ctype, const char *data, size_t len, long timeout,
    json_t **out, char *err, size_t errlen);
long runner_docker_rename(const char *id, const char *name, char *err,
    size_t errlen);
int runner_docker_ref_ok(const char *ref, char *err, size_t errlen);
long runner_docker_stream(const char *path, runner_line_pt on_line,
    void *data, runner_tick_pt on_tick, void *tick_data, char *err,
    size_t errlen);


/*
 * The backend (backend.c, swarm.c): how a run's sandbox is made, followed
 * and ended.  Redis style, a table of functions; each answers with the
 * Engine API's statuses, as docker.c does, whatever it does underneath:
 *
 *   create    201 with id set, 409 (the name is taken), 404 (no image)
 *   start     204 (started), 304 (it was running)
 *   kill      204 (killed), 409 (not running), 404 (none)
 *   wait      200 with *exit_code (it ended), RUNNER_DOCKER_TIMEOUT, 404
 *   remove    204 (removed, killed first), 404 (none)
 *   running   200 with *running, 404 (none)
 *   list      200 with *list: [{"Id": id, "Labels": {...}}] by a label
 *   follow    200 (the log read to its end), RUNNER_DOCKER_CUT, status
 *   valid_id  whether an id read back from Redis is one of its ids
 *
 * `docker` makes one container per run; `swarm` one service of one
 * replica (docs/contracts.md, "Backends").  The session's volume is the
 * engine's on both; its network is the backend's (net, net_drop).
 */
typedef struct {
    const char  *name;
    long       (*create)(json_t *spec, const char *name, char *id,
                         size_t idlen, char *err, size_t errlen);
    long       (*start)(const char *id, char *err, size_t errlen);
    long       (*kill)(const char *id, char *err, size_t errlen);
    long       (*wait)(const char *id, long timeout, int *exit_code,
                       char *err, size_t errlen);
    long       (*remove)(const char *id, char *err, size_t errlen);
    long       (*running)(const char *id, int *running, char *err,
                          size_t errlen);
    long       (*list)(const char *label, json_t **list, char *err,
                       size_t errlen);
    long       (*follow)(const char *id, const char *since, int follow,
                         runner_line_pt on_line, runner_tick_pt on_tick,
                         void *data, char *err, size_t errlen);
    int        (*valid_id)(const char *id);
    int        (*net)(const char *name, const char *session,
                      const char *peer, char *err, size_t errlen);
    int        (*net_drop)(const char *name, const char *peer, char *err,
                           size_t errlen);
} runner_backend_t;

extern const runner_backend_t  *runner_backend;

/* backend.c: the one --backend names (main.c, before any thread) */
int runner_backend_init(const char *name, char *err, size_t errlen);

/* swarm.c */
extern const runner_backend_t  runner_backend_swarm;
int runner_swarm_init(char *err, size_t errlen);

/* logstream.c: a streaming parser; memory per stream is bounded by the
 * line caps, whatever size a frame declares */
#define RUNNER_DIFF_PREFIX    "{\"type\":\"smcp\",\"step\":\"diff\","
#define RUNNER_DIFF_SLACK     4096

typedef struct {
    unsigned char   hdr[8];
    size_t          hdr_len;
    uint64_t        frame_left;         /* payload bytes still to come */
    int             stream;
    int             in_ts;              /* reading the frame's timestamp */
    char            tsbuf[48];
    size_t          ts_len;
    char           *line[3];            /* per stream: the line so far */
    size_t          line_len[3];
    size_t          line_cap[3];
    size_t          cut[3];             /* bytes over the cap, dropped */
    int             open[3];            /* a line is in progress */
    char            ts[3][48];          /* its timestamp (first frame's) */
    size_t          max_line;
    size_t          max_diff;           /* the sandbox's diff line (stdout) */
    runner_line_pt  on_line;
    void           *data;
} runner_logstream_t;

/* caps from runner_config (defaults when unset) */
void runner_logstream_init(runner_logstream_t *ls, runner_line_pt on_line,
    void *data);
int runner_logstream_feed(runner_logstream_t *ls, const char *buf,
    size_t len);
void runner_logstream_free(runner_logstream_t *ls);
/* Docker's timestamps in time order (<0, 0, >0) */
int runner_logstream_ts_cmp(const char *a, const char *b);

/* pr.c: a completed run's pull request into run->pr; the pr_opened
 * event (malloc'd) or NULL */
/* pick.c: a pick run (opencode_pick_attempt), without a sandbox */
int runner_pick_start(runner_run_t *run, json_t *h, char *err,
    size_t errlen);
int runner_pick_resume(runner_run_t *run, char *err, size_t errlen);
int runner_pick_opened(runner_run_t *run);
void runner_pick_done(runner_run_t *run);
void runner_pick_abandon(runner_run_t *run);

/* store_pick.c */
int runner_store_pick_load(runner_store_t *st, const char *attempt,
    char **result, char **diff, size_t *diff_len);
int runner_store_pick_done(runner_store_t *st, const char *pick,
    const char *attempt, const char *group, const runner_pr_t *pr);

char *runner_pr_finish(runner_run_t *run, json_t *h, const char *token,
    const runner_diff_t *diff);
/* words from elsewhere, fit for an error: bounded (RUNNER_PR_MESSAGE_MAX),
 * printable, UTF-8 (dst may be src) */
void runner_pr_words(char *dst, size_t size, const char *src, size_t len);

/* outcome.c */
void runner_outcome_event(runner_outcome_t *out, json_t *ev);
void runner_outcome_free(runner_outcome_t *out);
void runner_outcome_stderr(runner_outcome_t *out, const char *line,
    size_t len);
void runner_outcome_stderr_text(const runner_outcome_t *out, char *buf,
    size_t size);

int runner_outcome_diff(const char *diff, size_t len, runner_diff_t *d);
void runner_outcome_diff_free(runner_diff_t *d);
json_t *runner_outcome_files(const char *diff, size_t len);

/* workspace.c */

typedef struct {
    int64_t     bytes;              /* allocated (st_blocks) */
    int64_t     inodes;
    int         too_deep;
} runner_usage_t;

int runner_workspace_usage(const char *root, int64_t max_bytes,
    int64_t max_inodes, runner_usage_t *u, char *err, size_t errlen);

/* attach.c: a container's stdin, written once */
long runner_attach_stdin(const char *id, const char *data, size_t len,
    char *err, size_t errlen);

/* pool.c: the warm pool, its thread from start to stop (docker backend) */
typedef struct {
    char         id[RUNNER_CONTAINER_SIZE];
    char         name[64];          /* RUNNER_POOL_PREFIX + hex: its
                                       volume's name too; a held one's
                                       own, then its run's once taken */
    char         net[RUNNER_NET_SIZE];  /* the pool network it waits on
                                       ("": this runner's) */
} runner_sandbox_t;

int runner_pool_check(char *err, size_t errlen);
int runner_pool_start(void);
void runner_pool_stop(void);
int runner_pool_has(const char *image);
int runner_pool_take(const char *image, runner_sandbox_t *sb);
void runner_pool_drop(const runner_sandbox_t *sb);
void runner_pool_network(char *buf, size_t size);
int runner_pool_move(const runner_sandbox_t *sb, const char *net, char *err,
    size_t errlen);
int runner_pool_assign(const runner_sandbox_t *sb, const char *run_id,
    json_t *env, char *err, size_t errlen);
int runner_pool_sandbox(const char *image, const char *volume,
    json_t *labels, const char *env_more, int start, runner_sandbox_t *sb,
    char *err, size_t errlen);

/* hold.c: a session's held sandbox, for its next run (--session-hold) */
int runner_hold_make(const char *session, const char *volume,
    const char *image, const char *tenant, long long max_running,
    runner_sandbox_t *sb);
void runner_hold_start(const runner_sandbox_t *sb, int stored);
int runner_hold_take(const char *session, const char *image,
    const char *run_id, runner_sandbox_t *sb);
void runner_hold_sweep(int all, const char *session);

/* budget.c: the tenant's budgets, as a run meets them */
int runner_budget_start(runner_run_t *run, json_t *h, char *err,
    size_t errlen);
int runner_budget_resume(runner_run_t *run);
int runner_budget_event(runner_run_t *run);
void runner_budget_diff(runner_run_t *run);
int runner_budget_disk(runner_run_t *run, runner_store_t *st,
    int64_t bytes, int64_t *total);

/* floor.c: the host's floor (free disk, Redis headroom), measured by the
 * main loop; a run thread's check: RUNNER_OK, or RUNNER_AGAIN with why no
 * sandbox may start now */
int runner_floor_init(char *err, size_t errlen);
void runner_floor_update(runner_store_t *st);
int runner_floor_check(char *why, size_t size);

/* relay.c: the egress relay of --egress-relay, kept by the runner */
int runner_relay_check(char *err, size_t errlen);
int runner_relay_ensure(char *err, size_t errlen);

/* janitor.c: idle sessions expired, by any number of runners at once */
void *runner_janitor_thread(void *arg);

/* notify.c: runs' completion notifications delivered, by any number of
 * runners at once, RUNNER_NOTIFY_SENDERS threads each */
int runner_notify_start(char *err, size_t errlen);
void runner_notify_stop(void);

/* image.c */
int runner_image_check(const char *image, char *err, size_t errlen);
int runner_image_check_allowed(char *err, size_t errlen);
int runner_image_for_agent(const char *agent, char *image, size_t size,
    char *err, size_t errlen);
int runner_image_for_run(const char *wanted, char *image, size_t size,
    char *err, size_t errlen);

/* run.c */
void *runner_run_thread(void *arg);
void runner_run_reconcile(runner_store_t *st);
void runner_run_network(runner_run_t *run, char *buf, size_t size);
char *runner_run_sign(json_t *claims);

#ifdef RUNNER_TEST_HOOKS
/* test_hooks.c: the test build only */
void runner_test_hold_running(runner_run_t *run);
#endif

/* fork.c: a forked session's workspace copied before its first run */
int runner_fork_copy(runner_run_t *run, char *err, size_t errlen);

/* spec.c: the container spec every sandbox gets (run.c, pool.c) */
json_t *runner_sandbox_spec(const char *image, json_t *env, json_t *labels,
    const char *volume, const char *net);

/* follow.c: the container's log into the run's events, to the exit */
int runner_run_follow(runner_run_t *run, int *exit_code, const char **why);
int runner_run_store(runner_run_t *run, const char *type, const char *data,
    size_t len, const char *dts);
void runner_run_replayed(void *data, const char *json, size_t len,
    int from_log);
int runner_run_stored_state(runner_run_t *run);

/* watchdog.c: the run's watchdog thread, from start to end of the follow */
void runner_run_watch_start(runner_run_t *run);
void runner_run_watch_end(runner_run_t *run);
int runner_run_stopped(runner_run_t *run, char *msg, size_t size);
void runner_run_check_cost(runner_run_t *run, const runner_spend_t *spend,
    double cost);

#endif /* RUNNER_H */
