/*
 * smcp-runner: the loop.  Takes queued runs while it has room
 * (--concurrency), one thread per run; takes over runs of runners that
 * went silent; re-attaches to its own runs after a restart.  SIGTERM and
 * SIGINT only set a flag: the loop stops taking runs and the run threads
 * detach from their containers, which go on; a restarted runner picks them
 * up again.  SIGUSR1 drains: no new run is taken (nor one of a silent
 * runner) while the runs it has go on to their end; the runner then stays
 * up, idle, until it is stopped.  A second SIGUSR1 stops it as SIGTERM
 * does (its runs left to the next runner).
 */

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <curl/curl.h>

#include "runner.h"


static runner_config_t  runner_config_data;

const runner_config_t  *runner_config = &runner_config_data;
atomic_int              runner_stop;
atomic_int              runner_drain;
atomic_int              runner_release_failed;

static runner_run_t   *runner_runs;         /* threads, active or ended */
static int             runner_active;


/* when the main loop last did what it does now and then */
typedef struct {
    time_t      last_claim;         /* looked for silent runners' runs */
    time_t      last_reconcile;     /* looked for ended runs' containers */
    time_t      retry_at;           /* reads its pending entries again */
    int64_t     last_beat;          /* wrote the heartbeat (ms) */
    int64_t     last_queue;         /* measured the queue (ms) */
    int         drain_said;         /* 1: "draining" logged, 2: "drained" */
} runner_timers_t;


static void
runner_signal(int signo)
{
    /* lock-free: safe in a handler; the first SIGUSR1 drains, anything
     * else stops */
    if (signo == SIGUSR1 && atomic_exchange(&runner_drain, 1) == 0) {
        return;
    }

    atomic_store(&runner_stop, 1);
}


static int
runner_has(const char *run_id)
{
    runner_run_t  *r;

    for (r = runner_runs; r; r = r->next) {
        if (strcmp(r->id, run_id) == 0) {
            return 1;
        }
    }

    return 0;
}


static void
runner_spawn(const char *run_id, const char *stream_id, int reattach)
{
    runner_run_t  *run;

    if (runner_has(run_id)) {
        return;
    }

    run = calloc(1, sizeof(runner_run_t));
    if (run == NULL) {
        runner_log("error", run_id, "out of memory");
        return;
    }

    snprintf(run->id, sizeof(run->id), "%s", run_id);
    snprintf(run->stream_id, sizeof(run->stream_id), "%s", stream_id);
    run->reattach = reattach;
    atomic_init(&run->state, RUNNER_RUN_ACTIVE);
    pthread_mutex_init(&run->stop_lock, NULL);

    if (pthread_create(&run->thread, NULL, runner_run_thread, run) != 0) {
        runner_log("error", run_id, "cannot start a thread: %s",
                   strerror(errno));
        pthread_mutex_destroy(&run->stop_lock);
        free(run);
        return;
    }

    run->next = runner_runs;
    runner_runs = run;
    runner_active++;
    runner_metrics_active(runner_active);

    if (reattach) {
        runner_metrics_reattach();
    }
}


/* joins ended threads; runs that must wait are retried a bit later */
static void
runner_reap(int *waiting)
{
    runner_run_t  **pp, *run;
    int             state;

    *waiting = 0;

    for (pp = &runner_runs; (run = *pp) != NULL; /* void */) {

        state = atomic_load(&run->state);

        if (state == RUNNER_RUN_ACTIVE) {
            pp = &run->next;
            continue;
        }

        pthread_join(run->thread, NULL);
        *pp = run->next;
        runner_active--;
        runner_metrics_active(runner_active);

        if (state == RUNNER_RUN_WAIT || state == RUNNER_RUN_RETRY) {
            /* its queue entry stays ours, unacknowledged: read again from
             * our pending entries */
            (*waiting)++;
        }

        pthread_mutex_destroy(&run->stop_lock);
        free(run);
    }
}


/* a queue entry: start it, re-attach to it, or let it go */
static void
runner_dispatch(runner_store_t *st, const char *run_id, const char *stream_id)
{
    char  status[RUNNER_NUM_MAX], container[RUNNER_CONTAINER_SIZE];
    char  pick_of[SMCP_ID_LEN + 1];

    if (run_id[0] == '\0') {
        runner_store_ack(st, stream_id);
        return;
    }

    if (runner_store_hget(st, run_id, "status", status, sizeof(status))
        != RUNNER_OK)
    {
        return;
    }

    if (strcmp(status, SMCP_STATUS_RUNNING) == 0) {
        container[0] = '\0';
        pick_of[0] = '\0';
        runner_store_hget(st, run_id, "container_id", container,
                          sizeof(container));

        /* a pick run has none: taken up again all the same (pick.c) */
        if (container[0] == '\0') {
            runner_store_hget(st, run_id, "pr_of", pick_of, sizeof(pick_of));
        }

        runner_spawn(run_id, stream_id,
                     container[0] != '\0' || pick_of[0] != '\0');
        return;
    }

    if (strcmp(status, SMCP_STATUS_STARTED) == 0) {
        /* draining: not begun, so not ours to finish; the entry stays
         * pending for the next runner of this name (or another, after
         * --claim-idle) */
        if (!atomic_load(&runner_drain)) {
            runner_spawn(run_id, stream_id, 0);
        }

        return;
    }

    /* finished, cancelled or gone */
    runner_store_ack(st, stream_id);
}


/* our own unacknowledged entries: runs we had before a restart, and runs
 * waiting for their session */
static void
runner_pending(runner_store_t *st)
{
    char  run_id[SMCP_ID_LEN + 1], stream_id[RUNNER_STREAM_ID_SIZE];
    char  err[RUNNER_ERRLEN];
    int   n;

    stream_id[0] = '\0';

    for (n = 0; n < RUNNER_PENDING_MAX
                && runner_active < runner_config->concurrency;
         n++)
    {
        if (runner_store_next(st, 0, run_id, stream_id, 1, err, sizeof(err))
            != RUNNER_OK)
        {
            return;
        }

        runner_dispatch(st, run_id, stream_id);
    }
}


static runner_store_t *
runner_connect_wait(void)
{
    runner_store_t  *st;
    char           err[RUNNER_ERRLEN];
    int            delay;

    for (delay = 1; !atomic_load(&runner_stop);
         delay = delay < RUNNER_BACKOFF_MAX_S ? delay * 2 : delay)
    {
        st = runner_store_connect(1, err, sizeof(err));

        if (st && runner_store_init_group(st, err, sizeof(err)) == RUNNER_OK
            && runner_store_identity(st, err, sizeof(err)) == RUNNER_OK)
        {
            return st;
        }

        runner_store_close(st);

        runner_log("error", NULL, "%s; retrying in %d s", err, delay);
        sleep(delay);
    }

    return NULL;
}


/* the heartbeat /healthz reads, every SMCP_RUNNER_HEARTBEAT_MS; with
 * --metrics, the queue's depth and lag every RUNNER_CHECK_MS */
static void
runner_beat(runner_store_t *st, runner_timers_t *tm)
{
    int64_t  now, depth, lag;

    now = smcp_now_ms();

    if (runner_metrics_enabled() && now - tm->last_queue >= RUNNER_CHECK_MS) {
        tm->last_queue = now;

        if (runner_store_queue_stats(st, &depth, &lag) == RUNNER_OK) {
            runner_metrics_queue(depth, lag);
        }
    }

    if (now - tm->last_beat >= SMCP_RUNNER_HEARTBEAT_MS) {
        tm->last_beat = now;

        if (runner_store_heartbeat(st, atomic_load(&runner_drain))
            != RUNNER_OK)
        {
            runner_log("error", NULL, "heartbeat: %s",
                       runner_store_error(st));
        }
    }
}


/* draining: what it says once, then once drained (no run left, none
 * waiting to be read again) */
static void
runner_drain_say(runner_timers_t *tm)
{
    if (tm->drain_said == 0) {
        tm->drain_said = 1;
        tm->last_beat = 0;          /* the heartbeat says it at once */
        runner_log("info", NULL, "draining: %d run(s) to finish; no new run "
                   "is taken (SIGUSR1 again or SIGTERM: leave them to the "
                   "next runner)", runner_active);
    }

    if (tm->drain_said == 1 && runner_active == 0 && tm->retry_at == 0) {
        tm->drain_said = 2;
        runner_log("info", NULL, "drained: no run left; stop this runner "
                   "(SIGTERM) to replace it");
    }
}


/* one turn of the loop: a queue entry taken, or the reasons to wait
 * seen to; the connection may be replaced */
static runner_store_t *
runner_turn(runner_store_t *st, runner_timers_t *tm)
{
    int     rc, waiting;
    char    err[RUNNER_ERRLEN], run_id[SMCP_ID_LEN + 1];
    char    stream_id[RUNNER_STREAM_ID_SIZE];
    time_t  now;

    runner_reap(&waiting);
    now = time(NULL);

    runner_beat(st, tm);
    runner_floor_update(st);

    /* runs waiting for their turn (or for Redis): read our pending
     * entries again a second later */
    if (waiting && tm->retry_at == 0) {
        tm->retry_at = now + RUNNER_WAITING_RETRY_S;
    }

    if (tm->retry_at && now >= tm->retry_at) {
        tm->retry_at = 0;
        runner_pending(st);
    }

    /* sandboxes whose removal failed (dockerd away at the time):
     * every few seconds while there are some, else every minute */
    if (now - tm->last_reconcile >= (atomic_load(&runner_release_failed)
                                     ? RUNNER_RECONCILE_FAILED_S
                                     : RUNNER_RECONCILE_S))
    {
        tm->last_reconcile = now;
        runner_run_reconcile(st);
    }

    if (atomic_load(&runner_drain)) {
        runner_drain_say(tm);
        usleep(RUNNER_IDLE_MS * 1000);
        return st;
    }

    if (runner_active >= runner_config->concurrency) {
        usleep(RUNNER_IDLE_MS * 1000);
        return st;
    }

    if (now - tm->last_claim >= RUNNER_AUTOCLAIM_S) {
        tm->last_claim = now;

        if (runner_store_autoclaim(st, run_id, stream_id, err, sizeof(err))
            == RUNNER_OK && !runner_has(run_id))
        {
            runner_log("info", run_id[0] ? run_id : NULL,
                       "taking over from a silent runner");
            runner_dispatch(st, run_id, stream_id);
            return st;
        }
    }

    rc = runner_store_next(st, RUNNER_BLOCK_MS, run_id, stream_id, 0, err,
                           sizeof(err));

    if (rc == RUNNER_OK) {
        runner_dispatch(st, run_id, stream_id);

    } else if (rc == RUNNER_ERR && !atomic_load(&runner_stop)) {
        runner_log("error", NULL, "%s; reconnecting", err);
        runner_store_close(st);
        st = runner_connect_wait();
    }

    return st;
}


/* the backend (swarm: the engine a manager) */
static int
runner_backend_init_check(char *err, size_t errlen)
{
    return runner_backend_init(runner_config->backend, err, errlen);
}


/* --image, then every --allowed-images */
static int
runner_images_check(char *err, size_t errlen)
{
    int  rc;

    rc = runner_image_check(runner_config->image, err, errlen);

    if (rc == RUNNER_ERR || rc == RUNNER_RETRY) {
        return rc;
    }

    switch (runner_image_check_allowed(err, errlen)) {

    case RUNNER_ERR:
        return RUNNER_ERR;

    case RUNNER_RETRY:
        return RUNNER_RETRY;

    default:
        return rc;
    }
}


/*
 * A start check, asked again with backoff while the engine does not
 * answer (RUNNER_RETRY): only its verdict (RUNNER_OK, RUNNER_AGAIN,
 * RUNNER_ERR) is returned; RUNNER_OK when the runner stops meanwhile.
 */
static int
runner_start_check(int (*check)(char *err, size_t errlen), char *err,
    size_t errlen)
{
    int  rc, delay;

    for (delay = 1; !atomic_load(&runner_stop);
         delay = delay < RUNNER_BACKOFF_MAX_S ? delay * 2 : delay)
    {
        rc = check(err, errlen);

        if (rc != RUNNER_RETRY) {
            return rc;
        }

        runner_log("error", NULL, "%s; retrying in %d s", err, delay);
        sleep(delay);
    }

    return RUNNER_OK;
}


int
main(int argc, char **argv)
{
    int                rc, delay, waiting, janitor_up, sentinel_up;
    int                notify_up;
    char               err[RUNNER_ERRLEN];
    pthread_t          janitor, sentinel;
    runner_store_t    *st;
    runner_timers_t    tm;
    struct sigaction   sa;

    if (runner_config_test_hooks(err, sizeof(err)) != RUNNER_OK) {
        fprintf(stderr, "smcp-runner: %s\n", err);
        return 2;
    }

    rc = runner_config_load(&runner_config_data, argc, argv, err,
                            sizeof(err));

    if (rc == RUNNER_AGAIN) {
        return 0;                   /* --help, --version */
    }

    if (rc != RUNNER_OK) {
        fprintf(stderr, "smcp-runner: %s (--help lists the options)\n", err);
        return 2;
    }

    if (runner_pool_check(err, sizeof(err)) != RUNNER_OK
        || runner_relay_check(err, sizeof(err)) != RUNNER_OK)
    {
        fprintf(stderr, "smcp-runner: %s\n", err);
        return 2;
    }

    if (strcmp(runner_config->log_format, "text") != 0
        && strcmp(runner_config->log_format, "json") != 0)
    {
        fprintf(stderr, "smcp-runner: --log-format: \"text\" or \"json\"\n");
        return 2;
    }

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = runner_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    curl_global_init(CURL_GLOBAL_DEFAULT);

    if (runner_metrics_start(runner_config->metrics, err, sizeof(err))
        != RUNNER_OK)
    {
        fprintf(stderr, "smcp-runner: %s\n", err);
        return 2;
    }
    janitor_up = 0;
    sentinel_up = 0;
    notify_up = 0;

    runner_log("info", NULL, "smcp-runner %s starting: name=%s "
               "backend=%s concurrency=%d pool=%d image=%s network=%s",
               SMCP_VERSION, runner_config->name, runner_config->backend,
               runner_config->concurrency, runner_config->pool_total,
               runner_config->image,
               runner_config->network);

    for (delay = 1; !atomic_load(&runner_stop)
                    && runner_docker_ping(err, sizeof(err)) != 200;
         delay = delay < RUNNER_BACKOFF_MAX_S ? delay * 2 : delay)
    {
        runner_log("error", NULL, "%s; retrying in %d s", err, delay);
        sleep(delay);
    }

    /* exit status 2 says the configuration is wrong (.ci/supervise then
     * stops): an engine that does not answer (yet) is asked again */
    rc = runner_start_check(runner_backend_init_check, err, sizeof(err));

    if (rc == RUNNER_ERR) {
        runner_log("error", NULL, "%s", err);
        curl_global_cleanup();
        return 2;
    }

    if (!atomic_load(&runner_stop)
        && runner_floor_init(err, sizeof(err)) != RUNNER_OK)
    {
        runner_log("warn", NULL, "the host floor's free disk is not "
                   "measured: %s (--disk-path names it)", err);
    }

    /* an image of one's own must follow the sandbox contract */
    rc = runner_start_check(runner_images_check, err, sizeof(err));

    if (rc == RUNNER_ERR) {
        runner_log("error", NULL, "%s", err);
        curl_global_cleanup();
        return 2;
    }

    if (rc == RUNNER_AGAIN) {
        runner_log("warn", NULL, "%s", err);
    }

    /* the relay at once (each run checks it again before its join) */
    if (runner_config->egress_relay[0] && !atomic_load(&runner_stop)
        && runner_relay_ensure(err, sizeof(err)) != RUNNER_OK)
    {
        runner_log("error", NULL, "egress relay: %s", err);
    }

    if (runner_config->redis.kind == SMCP_REDIS_SENTINEL) {
        if (pthread_create(&sentinel, NULL, runner_sentinel_thread, NULL)
            == 0)
        {
            sentinel_up = 1;

        } else {
            runner_log("error", NULL, "cannot start the sentinel thread: "
                       "a failover is followed only when a connection "
                       "fails");
        }
    }

    st = runner_connect_wait();

    if (st) {
        runner_floor_update(st);
        runner_run_reconcile(st);
        runner_hold_sweep(1, NULL);     /* held by a runner of this name
                                           that died */
        runner_pending(st);

        (void) runner_pool_start();

        if (pthread_create(&janitor, NULL, runner_janitor_thread, NULL) == 0)
        {
            janitor_up = 1;

        } else {
            runner_log("error", NULL, "cannot start the janitor thread");
        }

        if (runner_notify_start(err, sizeof(err)) == RUNNER_OK) {
            notify_up = 1;

        } else {
            runner_log("error", NULL, "%s: no completion notification is "
                       "sent by this runner", err);
        }
    }

    tm.last_claim = tm.last_reconcile = time(NULL);
    tm.retry_at = 0;
    tm.last_beat = tm.last_queue = 0;
    tm.drain_said = 0;

    while (!atomic_load(&runner_stop) && st) {
        st = runner_turn(st, &tm);
    }

    runner_log("info", NULL, "stopping: %d run(s) detach and go on in "
               "their containers", runner_active);

    while (runner_runs) {
        runner_reap(&waiting);
        usleep(RUNNER_TICK_MS * 1000);
    }

    runner_pool_stop();

    if (janitor_up) {
        pthread_join(janitor, NULL);
    }

    if (notify_up) {
        runner_notify_stop();
    }

    if (sentinel_up) {
        pthread_join(sentinel, NULL);
    }

    runner_store_close(st);
    runner_metrics_stop();
    curl_global_cleanup();

    runner_log("info", NULL, "stopped");

    return 0;
}
