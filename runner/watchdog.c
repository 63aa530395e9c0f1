/*
 * The watchdog: a thread per live run, independent of the log.  It keeps
 * the run's queue entry touched, sees cancels, the deadline and the
 * limits, and kills the sandbox when the run must stop.  The first
 * reason to stop wins; the run (run.c) ends with it.  With
 * --egress-container (compose) it also keeps that container on the
 * session's network: a recreated one (an upgrade, a changed key) is a new
 * container, on none of them.
 */

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "runner.h"


/*
 * The sandbox must stop (cancel, deadline, a limit): the first reason
 * wins; the watchdog kills the container, the run ends with the reason.
 */
static void runner_run_stop(runner_run_t *run, int why, const char *fmt,
    ...) __attribute__((format(printf, 3, 4)));


static void
runner_run_stop(runner_run_t *run, int why, const char *fmt, ...)
{
    va_list  ap;

    pthread_mutex_lock(&run->stop_lock);

    if (run->stop == RUNNER_STOP_NONE) {
        run->stop = why;
        va_start(ap, fmt);
        vsnprintf(run->stop_error, sizeof(run->stop_error), fmt, ap);
        va_end(ap);
    }

    pthread_mutex_unlock(&run->stop_lock);
}


/* why the run must stop (RUNNER_STOP_NONE: it need not), msg its words */
int
runner_run_stopped(runner_run_t *run, char *msg, size_t size)
{
    int  why;

    pthread_mutex_lock(&run->stop_lock);
    why = run->stop;
    if (msg) {
        snprintf(msg, size, "%s", run->stop_error);
    }
    pthread_mutex_unlock(&run->stop_lock);

    return why;
}


/*
 * The cost so far against the cap (0: none): the egress's metered cost
 * (the provider's counts; a request is refused there once it reaches the
 * cap), or the agent's own report.
 */
void
runner_run_check_cost(runner_run_t *run, const runner_spend_t *spend,
    double cost)
{
    if (spend->max <= 0) {
        return;
    }

    if (spend->metered >= spend->max) {
        runner_run_stop(run, RUNNER_STOP_LIMIT, "spend cap exceeded: the "
                        "run's model requests have cost $%.6f as metered at "
                        "the egress, its maxCostUsd is $%.6f; the sandbox "
                        "was stopped", spend->metered, spend->max);

    } else if (cost > spend->max) {
        runner_run_stop(run, RUNNER_STOP_LIMIT, "spend cap exceeded: the run "
                        "has cost $%.6f, over its maxCostUsd of $%.6f; the "
                        "sandbox was stopped", cost, spend->max);
    }
}


static void
runner_run_check(runner_run_t *run, runner_store_t *st, int64_t now)
{
    int             cancel;
    runner_spend_t  spend;

    if (run->deadline_ms && now >= run->deadline_ms) {
        runner_run_stop(run, RUNNER_STOP_DEADLINE, "deadline exceeded: the "
                        "run took longer than its timeoutSeconds and was "
                        "stopped");
    }

    if (st == NULL
        || runner_store_limits(st, run->id, &cancel, &spend) != RUNNER_OK)
    {
        return;
    }

    if (cancel) {
        runner_run_stop(run, RUNNER_STOP_CANCEL, "cancelled");
    }

    runner_run_check_cost(run, &spend, atomic_load(&run->cost_micros) / 1e6);
}


static void
runner_run_kill(runner_run_t *run, int64_t now, int64_t *last_try)
{
    int   why;
    long  st;
    char  err[RUNNER_ERRLEN], msg[256];

    why = runner_run_stopped(run, msg, sizeof(msg));

    if (why == RUNNER_STOP_NONE || atomic_load(&run->killed_at)
        || now - *last_try < RUNNER_KILL_RETRY_MS)
    {
        return;
    }

    if (*last_try == 0) {
        runner_log("info", run->id, "%s: stopping the sandbox",
                   why == RUNNER_STOP_CANCEL ? "cancel requested"
                   : why == RUNNER_STOP_DEADLINE ? "deadline reached" : msg);
    }

    *last_try = now;

    st = runner_backend->kill(run->container, err, sizeof(err));

    /* 409: it is not running any more; 404: it is gone */
    if (st != 204 && st != 409 && st != 404) {
        runner_log("error", run->id, "%s", err);
        return;
    }

    atomic_store(&run->killed_at, now);
}


/* the session's workspace, measured from the host every few seconds */
typedef struct {
    char        mountpoint[512];
    int         off;
    int         busy;               /* the last look met another's walk */
    int64_t     next;
} runner_ws_watch_t;

static atomic_int  runner_run_ws_warned;


/* last: the run is over, its measure only kept (nothing stops) */
static void
runner_run_workspace(runner_run_t *run, runner_store_t *st,
    runner_ws_watch_t *w, int64_t now, int last)
{
    int              rc;
    int64_t          took, total;
    char             err[RUNNER_ERRLEN];
    runner_usage_t   u;

    if (w->off || now < w->next || run->volume[0] == '\0') {
        return;
    }

    w->next = now + RUNNER_WS_CHECK_MS;

    if (w->mountpoint[0] == '\0') {
        if (runner_docker_volume_mountpoint(run->volume, w->mountpoint,
                                            sizeof(w->mountpoint), err,
                                            sizeof(err)) != 200)
        {
            runner_log("error", run->id, "workspace: %s", err);
            return;
        }
    }

    rc = runner_workspace_usage(w->mountpoint, runner_config->workspace_limit,
                                runner_config->workspace_inodes, &u, err,
                                sizeof(err));
    took = smcp_now_ms() - now;

    w->busy = (rc == RUNNER_AGAIN);

    if (rc == RUNNER_AGAIN) {
        w->next = now + RUNNER_WS_BUSY_MS;  /* another run's walk: soon */
        return;
    }

    if (rc == RUNNER_ERR) {
        w->off = 1;

        if (atomic_exchange(&runner_run_ws_warned, 1) == 0) {
            runner_log("warn", NULL, "workspace limits are not enforced: "
                       "%s (a runner in a container needs the engine's "
                       "volumes directory mounted, read-only, at the same "
                       "path)", err);
        }

        return;
    }

    /* a big tree is walked less often: a share of the time at most */
    if (took * RUNNER_WS_SHARE > RUNNER_WS_CHECK_MS) {
        w->next = now + took * RUNNER_WS_SHARE;
    }

    /* the session's share of its tenant's disk */
    if (runner_budget_disk(run, st, u.bytes, &total) && !last) {
        runner_run_stop(run, RUNNER_STOP_LIMIT, "tenant budget exceeded: "
                        "the workspaces of your sessions hold %lld bytes, "
                        "over sandbox_mcp_tenant_disk (%lld); the sandbox "
                        "was stopped", (long long) total,
                        (long long) run->tenant_disk_max);
    }

    if (last) {
        return;
    }

    if (u.too_deep) {
        runner_run_stop(run, RUNNER_STOP_LIMIT, "workspace limit exceeded: "
                        "the session's workspace nests more than %d "
                        "directories deep; the sandbox was stopped",
                        RUNNER_WS_DEPTH);

    } else if (u.bytes > runner_config->workspace_limit) {
        runner_run_stop(run, RUNNER_STOP_LIMIT, "workspace limit exceeded: "
                        "the session's workspace holds more than %lld bytes "
                        "(--workspace-limit); the sandbox was stopped",
                        (long long) runner_config->workspace_limit);

    } else if (u.inodes > runner_config->workspace_inodes) {
        runner_run_stop(run, RUNNER_STOP_LIMIT, "workspace limit exceeded: "
                        "the session's workspace holds more than %lld files "
                        "(--workspace-inodes); the sandbox was stopped",
                        (long long) runner_config->workspace_inodes);
    }
}


/* the run is over: its workspace measured once more, for its tenant's
 * disk (another run's walk is waited for, a little) */
static void
runner_run_workspace_last(runner_run_t *run, runner_store_t *st,
    runner_ws_watch_t *w)
{
    int  i;

    if (st == NULL || w->mountpoint[0] == '\0' || atomic_load(&runner_stop))
    {
        return;
    }

    for (i = 0; i < RUNNER_WS_LAST_TRIES; i++) {
        w->next = 0;
        runner_run_workspace(run, st, w, smcp_now_ms(), 1);

        if (w->off || !w->busy) {
            return;
        }

        usleep(RUNNER_WS_BUSY_MS * 1000);
    }
}


/*
 * The egress container on the session's network, every
 * RUNNER_EGRESS_CHECK_MS: joined again when it is not (docker-compose
 * recreated it); *lost remembers a failed join, said once until one works.
 */
static void
runner_run_egress(runner_run_t *run, int64_t now, int64_t *next, int *lost)
{
    int   member;
    long  st;
    char  net[128], err[RUNNER_ERRLEN];

    if (runner_config->egress_container[0] == '\0' || run->session[0] == '\0'
        || now < *next)
    {
        return;
    }

    *next = now + RUNNER_EGRESS_CHECK_MS;

    runner_run_network(run, net, sizeof(net));

    st = runner_docker_network_member(net, runner_config->egress_container,
                                      &member, err, sizeof(err));

    if (st != 200 || member) {
        return;
    }

    if (runner_backend->net(net, run->session,
                            runner_config->egress_container, err, sizeof(err))
        != RUNNER_OK)
    {
        if (!*lost) {
            runner_log("error", run->id, "the egress container %s is not on "
                       "%s and cannot join it: %s",
                       runner_config->egress_container, net, err);
        }

        *lost = 1;
        return;
    }

    runner_log("info", run->id, "the egress container %s was not on %s "
               "(recreated): joined it again",
               runner_config->egress_container, net);
    *lost = 0;
}


static void *
runner_run_watchdog(void *arg)
{
    runner_run_t       *run = arg;
    runner_store_t     *st;
    int                 egress_lost;
    int64_t             now, last_touch, last_check, last_connect, last_kill;
    int64_t             next_egress;
    char                err[RUNNER_ERRLEN];
    runner_ws_watch_t   ws;

    st = NULL;
    last_touch = last_check = last_connect = last_kill = 0;
    next_egress = smcp_now_ms() + RUNNER_EGRESS_CHECK_MS;
    egress_lost = 0;
    memset(&ws, 0, sizeof(ws));

    while (!atomic_load(&run->watch_end) && !atomic_load(&runner_stop)) {
        now = smcp_now_ms();

        /* never waits for Redis: the deadline and kills go on without */
        if (runner_store_lost(st) && now - last_connect >= RUNNER_RECONNECT_MS)
        {
            last_connect = now;
            runner_store_close(st);
            st = runner_store_connect(0, err, sizeof(err));
        }

        if (!runner_store_lost(st)
            && (now - last_touch >= RUNNER_TOUCH_MS
                || now - last_touch >= runner_config->claim_idle_ms / 3))
        {
            runner_store_touch(st, run->stream_id);
            last_touch = now;
        }

        if (now - last_check >= RUNNER_CHECK_MS) {
            last_check = now;
            runner_run_check(run, runner_store_lost(st) ? NULL : st, now);
        }

        runner_run_workspace(run, runner_store_lost(st) ? NULL : st, &ws,
                             now, 0);

        runner_run_egress(run, now, &next_egress, &egress_lost);

        runner_run_kill(run, now, &last_kill);

        usleep(RUNNER_TICK_MS * 1000);
    }

    runner_run_workspace_last(run, runner_store_lost(st) ? NULL : st, &ws);

    runner_store_close(st);

    return NULL;
}


void
runner_run_watch_start(runner_run_t *run)
{
    atomic_store(&run->watch_end, 0);
    atomic_store(&run->cost_micros, (long long) llround(run->out.cost * 1e6));

    if (pthread_create(&run->watchdog, NULL, runner_run_watchdog, run) != 0)
    {
        runner_log("error", run->id, "cannot start the watchdog thread");
        return;
    }

    run->watching = 1;
}


void
runner_run_watch_end(runner_run_t *run)
{
    if (run->watching) {
        atomic_store(&run->watch_end, 1);
        pthread_join(run->watchdog, NULL);
        run->watching = 0;
    }
}
