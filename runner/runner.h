/*
 * runner: turns queued runs into finished ones.
 *
 * It reads run ids from the Redis stream `queue` (consumer group
 * `runners`), starts one Docker container per run (the OpenCode agent is
 * the container's main process), follows the container's log stream into
 * the run's event stream as it happens, and records the outcome.  Several
 * runners, on one host or many, share one queue.
 *
 * Files, one concern each: main.c (flags, signals, the loop), config.c,
 * log.c, store.c (Redis; its scripts are the .lua files in
 * runner/scripts, embedded at build), docker.c (Engine API over the unix
 * socket), logstream.c (Docker's multiplexed log frames to lines), run.c
 * (one run from claim to outcome, and its watchdog), outcome.c (what the
 * agent's events add up to), workspace.c (a session volume's size),
 * janitor.c (idle sessions expired).
 *
 * Everything a sandbox prints, and every id read back from Redis, is
 * hostile input: bounded, validated, escaped before it is logged.
 */

#ifndef RUNNER_H
#define RUNNER_H

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include <hiredis/hiredis.h>
#include <jansson.h>

#include "smcp_defaults.h"
#include "smcp_keys.h"
#include "smcp_util.h"

#define RUNNER_OK       0
#define RUNNER_ERR     -1
#define RUNNER_AGAIN   -2       /* try later: not an error */

#define RUNNER_ERRLEN   256
#define RUNNER_VERSION  "0.1.0"


typedef struct {
    unsigned char   data[SMCP_SECRET_MAX];
    size_t          len;
} runner_secret_t;


/*
 * The configuration (config.c's option table): loaded once, before any
 * thread starts, and never written again; everything else reads it
 * through the const pointer runner_config.  What is found out while
 * running (the store's identity) lives with whoever finds it.
 */
typedef struct {
    char             redis_host[256];
    int              redis_port;
    char             redis_unix[256];
    runner_secret_t  redis_password;        /* AUTH; never logged */
    char             prefix[64];
    char             name[128];             /* consumer name: stable per
                                               host */
    char             instance[192];         /* name + pid + random: claims */
    char             docker_socket[256];
    char             image[256];
    char             network[128];
    char             egress_url[256];       /* as seen from the sandbox */
    char             dns[64];               /* the sandbox network's gateway */
    char             egress_container[128]; /* compose: nginx joins each
                                               session's own network */
    char             git_host[128];
    int              concurrency;
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
    runner_secret_t  secret;                /* signs the run tokens */
} runner_config_t;


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
    char        oc_session[96];         /* OpenCode's own session id */
} runner_outcome_t;


/* how a run thread ended, for the main loop */
#define RUNNER_RUN_ACTIVE   0
#define RUNNER_RUN_DONE     1
#define RUNNER_RUN_WAIT     2       /* session busy: try again later */
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
    char                 stream_id[64];     /* its queue entry */
    char                 session[SMCP_ID_LEN + 1];
    char                 container[80];
    char                 last_ts[48];       /* last stored log timestamp */
    int                  last_ts_count;     /* lines stored at last_ts */
    int64_t              deadline_ms;
    int                  reattach;
    int                  diff_marker;       /* the diff's marker is stored */
    int64_t              event_bytes;       /* stored, of the budget */
    int                  budget_hit;        /* later output is not stored */
    atomic_int           state;
    runner_outcome_t     out;
    redisContext        *redis;
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

    struct runner_run_s *next;
} runner_run_t;


/* main.c: the globals every thread reads */
extern const runner_config_t  *runner_config;
extern atomic_int              runner_stop;     /* SIGTERM, SIGINT */
extern atomic_int              runner_release_failed;   /* reconcile soon */

/* config.c */
int runner_config_load(runner_config_t *cfg, int argc, char **argv,
    char *err, size_t errlen);
void runner_config_usage(FILE *f);
void runner_config_markdown(FILE *f);

/* log.c: one line per event, key=value, never a secret; the message is
 * escaped (quotes, backslashes, anything but printable ASCII): text from a
 * sandbox cannot forge a line */
void runner_log(const char *level, const char *run, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
size_t runner_log_escape(char *dst, size_t size, const char *src,
    size_t len);

/* store.c */
redisContext *runner_store_connect(char *err, size_t errlen);
int runner_store_init_group(redisContext *c, char *err, size_t errlen);
int runner_store_identity(redisContext *c, char *err, size_t errlen);
const char *runner_store_id(void);
int runner_store_next(redisContext *c, int block_ms, char *run_id,
    char *stream_id, int pending, char *err, size_t errlen);
int runner_store_autoclaim(redisContext *c, char *run_id, char *stream_id,
    char *err, size_t errlen);
int runner_store_touch(redisContext *c, const char *stream_id);
int runner_store_ack(redisContext *c, const char *stream_id);
int runner_store_claim(redisContext *c, const char *run_id,
    char *status, size_t slen, char *err, size_t errlen);
int runner_store_set_running(redisContext *c, const char *run_id,
    const char *container, int64_t deadline_ms, char *status, size_t slen);
int runner_store_finish(redisContext *c, runner_run_t *run,
    const char *status, int exit_code, const char *error);
int runner_store_event(redisContext *c, const char *run_id,
    const char *type, const char *data, size_t len, const char *dts,
    size_t count);
int runner_store_attempts(redisContext *c, const char *run_id, int delta,
    long long *n);
int runner_store_hget(redisContext *c, const char *run_id,
    const char *field, char *buf, size_t size);
json_t *runner_store_run(redisContext *c, const char *run_id);
int runner_store_last_log_ts(redisContext *c, runner_run_t *run);

/* docker.c */
int runner_docker_ping(char *err, size_t errlen);
int runner_docker_volume(const char *name, const char *session,
    char *err, size_t errlen);
int runner_docker_volume_mountpoint(const char *name, char *buf,
    size_t size, char *err, size_t errlen);
int runner_docker_volume_remove(const char *name, char *err, size_t errlen);
int runner_docker_session_net(const char *name, const char *session,
    const char *peer, char *err, size_t errlen);
int runner_docker_session_net_drop(const char *name, const char *peer,
    char *err, size_t errlen);
int runner_docker_create(json_t *spec, const char *name, char *id,
    size_t idlen, char *err, size_t errlen);
int runner_docker_start(const char *id, char *err, size_t errlen);
int runner_docker_kill(const char *id, char *err, size_t errlen);
int runner_docker_wait(const char *id, long timeout, int *exit_code,
    char *err, size_t errlen);
int runner_docker_remove(const char *id, char *err, size_t errlen);
int runner_docker_running(const char *id, int *running, char *err,
    size_t errlen);
json_t *runner_docker_list(const char *label, char *err, size_t errlen);
int runner_docker_valid_id(const char *id);

/* a log line: its bytes (any byte but '\n', NUL included), and how many
 * more the line had beyond its cap (cut off, not delivered) */
typedef int (*runner_line_pt)(void *data, int stream, const char *ts,
    const char *line, size_t len, size_t cut);
typedef int (*runner_tick_pt)(void *data);

int runner_docker_follow(const char *id, const char *since, int follow,
    runner_line_pt on_line, runner_tick_pt on_tick, void *data,
    char *err, size_t errlen);

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

/* outcome.c */
void runner_outcome_event(runner_outcome_t *out, json_t *ev);
void runner_outcome_free(runner_outcome_t *out);
json_t *runner_outcome_files(const char *diff, size_t len);
json_t *runner_outcome_diff_walk(const char *diff, size_t len,
    json_t **index);

/* workspace.c */
#define RUNNER_WS_DEPTH  128        /* directories open in one walk */

typedef struct {
    int64_t     bytes;              /* allocated (st_blocks) */
    int64_t     inodes;
    int         too_deep;
} runner_usage_t;

int runner_workspace_usage(const char *root, int64_t max_bytes,
    int64_t max_inodes, runner_usage_t *u, char *err, size_t errlen);

/* janitor.c: idle sessions expired, by any number of runners at once */
void *runner_janitor_thread(void *arg);
int runner_janitor_pass(redisContext *c, int *expired);

/* run.c: a run taken this many times (claims, re-attaches, less clean
 * detaches) crashed its runners: it is failed */
#define RUNNER_MAX_ATTEMPTS  3

/* run.c */
void *runner_run_thread(void *arg);
void runner_run_reconcile(redisContext *c);

#endif /* RUNNER_H */
