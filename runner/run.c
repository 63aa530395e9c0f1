/*
 * One run, from claim to outcome, on its own thread.
 *
 *   claim (atomic: still `started`, earlier runs of the session finished)
 *   → session volume → container create → start → `running` (atomic; a
 *   cancel that came first wins and the container goes) → follow the log
 *   into the event stream → exit code → outcome (atomic) → remove the
 *   container → acknowledge the queue entry.
 *
 * A runner that stops (SIGTERM) or dies leaves its containers running:
 * the run's queue entry stays unacknowledged, and this runner after a
 * restart, or another one after --claim-idle, re-attaches by following
 * the container's log from the last stored line.
 */

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runner.h"
#include "smcp_jwt.h"


/* queue entries of live runs are touched this often, and at least three
 * times within --claim-idle: a live run is never taken over */
#define RUNNER_TOUCH_MS      10000
#define RUNNER_GRACE_S       300     /* token outlives the deadline a bit */
#define RUNNER_FOLLOW_TRIES  5
#define RUNNER_WAIT_S        10      /* one Docker wait; waits are looped */
#define RUNNER_KILL_RETRY_MS 2000
#define RUNNER_KILL_GRACE_MS 30000   /* a killed sandbox's log ends by then */
#define RUNNER_WS_CHECK_MS   5000    /* the workspace is measured this often */


/* sleeps, unless the runner is stopping */
static void
runner_run_sleep(int64_t ms)
{
    for ( /* void */ ; ms > 0 && !atomic_load(&runner_stop); ms -= 100) {
        usleep(100 * 1000);
    }
}


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


static int
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
 * The watchdog: a thread per live run, independent of the log.  It keeps
 * the run's queue entry touched, sees cancels, the deadline and the
 * limits, and kills the sandbox when the run must stop.
 */
/* the run's spend cap: `max_cost` (USD text; absent or "0": none) */
static double
runner_run_max_cost(redisReply *v)
{
    char    *end;
    double   max;

    if (v->type != REDIS_REPLY_STRING || v->len == 0 || v->len > 32) {
        return 0;
    }

    max = strtod(v->str, &end);

    return (*end == '\0' && isfinite(max) && max > 0) ? max : 0;
}


/* the cost so far against the cap (max: its value in the run hash) */
static void
runner_run_check_cost(runner_run_t *run, redisReply *max_cost, double cost)
{
    double  max;

    max = runner_run_max_cost(max_cost);

    if (max > 0 && cost > max) {
        runner_run_stop(run, RUNNER_STOP_LIMIT, "spend cap exceeded: the run "
                        "has cost $%.6f, over its maxCostUsd of $%.6f; the "
                        "sandbox was stopped", cost, max);
    }
}


static void
runner_run_check(runner_run_t *run, redisContext *c, int64_t now)
{
    char         key[160];
    redisReply  *r;

    if (run->deadline_ms && now >= run->deadline_ms) {
        runner_run_stop(run, RUNNER_STOP_DEADLINE, "deadline exceeded: the "
                        "run took longer than its timeoutSeconds and was "
                        "stopped");
    }

    if (c == NULL) {
        return;
    }

    snprintf(key, sizeof(key), SMCP_KEY_RUN, runner_config->prefix, run->id);

    r = redisCommand(c, "HMGET %s cancel_requested max_cost", key);

    if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
        if (r) {
            freeReplyObject(r);
        }
        return;
    }

    if (r->element[0]->type == REDIS_REPLY_STRING
        && strcmp(r->element[0]->str, "1") == 0)
    {
        runner_run_stop(run, RUNNER_STOP_CANCEL, "cancelled");
    }

    runner_run_check_cost(run, r->element[1],
                          atomic_load(&run->cost_micros) / 1e6);

    freeReplyObject(r);
}


static void
runner_run_kill(runner_run_t *run, int64_t now, int64_t *last_try)
{
    int   why;
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

    if (runner_docker_kill(run->container, err, sizeof(err)) != RUNNER_OK) {
        runner_log("error", run->id, "%s", err);
        return;
    }

    atomic_store(&run->killed_at, now);
}


/* the session's workspace, measured from the host every few seconds */
typedef struct {
    char        mountpoint[512];
    int         off;
    int64_t     next;
} runner_ws_watch_t;

static atomic_int  runner_run_ws_warned;


static void
runner_run_workspace(runner_run_t *run, runner_ws_watch_t *w, int64_t now)
{
    int              rc;
    int64_t          took;
    char             err[RUNNER_ERRLEN], volume[128];
    runner_usage_t   u;

    if (w->off || now < w->next || run->session[0] == '\0') {
        return;
    }

    w->next = now + RUNNER_WS_CHECK_MS;

    if (w->mountpoint[0] == '\0') {
        snprintf(volume, sizeof(volume), "smcp-%s", run->session);

        if (runner_docker_volume_mountpoint(volume, w->mountpoint,
                                            sizeof(w->mountpoint), err,
                                            sizeof(err)) != RUNNER_OK)
        {
            runner_log("error", run->id, "workspace: %s", err);
            return;
        }
    }

    rc = runner_workspace_usage(w->mountpoint, runner_config->workspace_limit,
                                runner_config->workspace_inodes, &u, err,
                                sizeof(err));
    took = smcp_now_ms() - now;

    if (rc == RUNNER_AGAIN) {
        w->next = now + 300;        /* another run's walk: soon */
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

    /* a big tree is walked less often: a tenth of the time at most */
    if (took * 10 > RUNNER_WS_CHECK_MS) {
        w->next = now + took * 10;
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


static void *
runner_run_watchdog(void *arg)
{
    runner_run_t       *run = arg;
    redisContext       *c;
    int64_t             now, last_touch, last_check, last_connect, last_kill;
    char                err[RUNNER_ERRLEN];
    runner_ws_watch_t   ws;

    c = NULL;
    last_touch = last_check = last_connect = last_kill = 0;
    memset(&ws, 0, sizeof(ws));

    while (!atomic_load(&run->watch_end) && !atomic_load(&runner_stop)) {
        now = smcp_now_ms();

        if ((c == NULL || c->err) && now - last_connect >= 2000) {
            last_connect = now;

            if (c) {
                redisFree(c);
            }

            c = runner_store_connect(err, sizeof(err));
        }

        if (c && !c->err
            && (now - last_touch >= RUNNER_TOUCH_MS
                || now - last_touch >= runner_config->claim_idle_ms / 3))
        {
            runner_store_touch(c, run->stream_id);
            last_touch = now;
        }

        if (now - last_check >= 1000) {
            last_check = now;
            runner_run_check(run, (c && !c->err) ? c : NULL, now);
        }

        runner_run_workspace(run, &ws, now);

        runner_run_kill(run, now, &last_kill);

        usleep(100 * 1000);
    }

    if (c) {
        redisFree(c);
    }

    return NULL;
}


static void
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


static void
runner_run_watch_end(runner_run_t *run)
{
    if (run->watching) {
        atomic_store(&run->watch_end, 1);
        pthread_join(run->watchdog, NULL);
        run->watching = 0;
    }
}


typedef struct {
    runner_run_t  *run;
    int            skip;            /* lines at last_ts still to skip */
} runner_follow_state_t;


/*
 * An event of the run: counted in event_bytes; past --max-event-bytes
 * one warning is stored, and nothing more (the outcome still counts every
 * line).
 */
static int
runner_run_store(runner_run_t *run, const char *type, const char *data,
    size_t len, const char *dts)
{
    char  warn[160];

    if (run->budget_hit) {
        return RUNNER_OK;
    }

    if (run->event_bytes + (int64_t) len > runner_config->max_event_bytes) {
        snprintf(warn, sizeof(warn), "{\"warning\":\"output budget "
                 "exceeded\",\"limit\":%lld,\"stored\":%lld}",
                 (long long) runner_config->max_event_bytes,
                 (long long) run->event_bytes);

        if (runner_store_event(run->redis, run->id, "lifecycle", warn,
                               strlen(warn), NULL, 0) != RUNNER_OK)
        {
            runner_log("error", run->id, "storing an event failed: %s",
                       run->redis->err ? run->redis->errstr : "error reply");
            return RUNNER_ERR;
        }

        run->budget_hit = 1;
        runner_log("info", run->id, "output budget of %lld bytes reached: "
                   "later output is not stored",
                   (long long) runner_config->max_event_bytes);

        return RUNNER_OK;
    }

    if (runner_store_event(run->redis, run->id, type, data, len, dts, len)
        != RUNNER_OK)
    {
        runner_log("error", run->id, "storing an event failed: %s",
                   run->redis->err ? run->redis->errstr : "error reply");
        return RUNNER_ERR;
    }

    run->event_bytes += len;

    return RUNNER_OK;
}


/*
 * Lines already seen: after a re-attach (Docker's `since` is inclusive),
 * and when Docker sends part of the log again (its follower does after a
 * json-file rotation).  Timestamps never go back in a container's log: a
 * line older than the last one is a repeat, and a repeat of the lines at
 * the last timestamp is told by their count.
 */
static int
runner_run_seen(runner_follow_state_t *st, const char *ts)
{
    runner_run_t  *run = st->run;
    int            cmp;

    if (run->last_ts[0] == '\0') {
        return 0;
    }

    cmp = runner_logstream_ts_cmp(ts, run->last_ts);

    if (cmp < 0) {
        /* going back: the lines at last_ts will come again */
        st->skip = run->last_ts_count;
        return 1;
    }

    if (cmp == 0 && st->skip > 0) {
        st->skip--;
        return 1;
    }

    return 0;
}


/* the line at ts is done with (stored, or deliberately not) */
static void
runner_run_done_with(runner_follow_state_t *st, const char *ts)
{
    runner_run_t  *run = st->run;

    if (run->last_ts[0] && runner_logstream_ts_cmp(ts, run->last_ts) == 0) {
        run->last_ts_count++;

    } else if (strlen(ts) < sizeof(run->last_ts)) {
        strcpy(run->last_ts, ts);
        run->last_ts_count = 1;
        st->skip = 0;
    }
}


/* the sandbox's diff line: to run:{id}:diff with the outcome; the event
 * stream gets a marker, without dts (a runner re-attaching reads the diff
 * line again, and must not store a second marker) */
static int
runner_run_diff_line(runner_run_t *run, json_t *ev)
{
    char  marker[160];

    runner_outcome_event(&run->out, ev);

    if (run->diff_marker) {
        return RUNNER_OK;
    }

    snprintf(marker, sizeof(marker), "{\"type\":\"smcp\",\"step\":\"diff\","
             "\"bytes\":%zu%s}", run->out.diff_len,
             run->out.diff_truncated ? ",\"truncated\":true" : "");

    if (runner_run_store(run, "lifecycle", marker, strlen(marker), NULL)
        != RUNNER_OK)
    {
        return RUNNER_ERR;
    }

    run->diff_marker = 1;

    return RUNNER_OK;
}


/* the type an event from the log is stored as */
static const char *
runner_run_type(json_t *ev, int *is_diff)
{
    const char  *step;

    *is_diff = 0;

    if (!json_is_object(ev)) {
        return "log";
    }

    if (strcmp(json_string_value(json_object_get(ev, "type")) ?: "", "smcp")
        != 0)
    {
        return "agent";
    }

    step = json_string_value(json_object_get(ev, "step"));
    *is_diff = (step && strcmp(step, "diff") == 0);

    return "lifecycle";
}


/*
 * A line of the container's log: bytes (NUL included, not necessarily
 * UTF-8), at most --max-line of them (the diff line more); `cut` more
 * were dropped.  Its event is stored, then counted in the outcome: a line
 * whose storing failed is read again, and counted once.
 */
static int
runner_run_line(void *data, int stream, const char *ts, const char *line,
    size_t len, size_t cut)
{
    runner_follow_state_t  *st = data;
    runner_run_t           *run = st->run;
    json_t                 *ev;
    const char             *type;
    char                    warn[160], *copy;
    int                     rc, is_diff;

    if (runner_run_seen(st, ts)) {
        return RUNNER_OK;
    }

    copy = malloc(len + 1);
    if (copy == NULL) {
        return RUNNER_ERR;
    }

    memcpy(copy, line, len);
    copy[len] = '\0';
    smcp_utf8_sanitize(copy, len);

    ev = (stream == 1 && cut == 0) ? json_loadb(copy, len, 0, NULL) : NULL;
    type = runner_run_type(ev, &is_diff);

    if (!is_diff && len > (size_t) runner_config->max_line) {
        /* a diff-sized line that is not the diff */
        cut += len - runner_config->max_line;
        len = runner_config->max_line;
    }

    if (is_diff) {
        rc = runner_run_diff_line(run, ev);

    } else {
        rc = runner_run_store(run, type, copy, len, ts);

        if (rc == RUNNER_OK && json_is_object(ev)) {
            runner_outcome_event(&run->out, ev);
            atomic_store(&run->cost_micros,
                         (long long) llround(run->out.cost * 1e6));
        }
    }

    json_decref(ev);
    free(copy);

    if (rc != RUNNER_OK) {
        return rc;
    }

    runner_run_done_with(st, ts);

    if (cut) {
        /* without dts: re-attaching counts only the log's own lines */
        snprintf(warn, sizeof(warn), "{\"warning\":\"line truncated\","
                 "\"bytes\":%zu,\"kept\":%zu}", len + cut, len);
        rc = runner_run_store(run, "lifecycle", warn, strlen(warn), NULL);
    }

    return rc;
}


static int
runner_run_tick(void *data)
{
    runner_follow_state_t  *st = data;
    int64_t                 killed;

    if (atomic_load(&runner_stop)) {
        /* detach: the container goes on; a restart re-attaches */
        return RUNNER_ERR;
    }

    /* a killed sandbox's log ends; if it does not, stop reading it */
    killed = atomic_load(&st->run->killed_at);

    if (killed && smcp_now_ms() - killed > RUNNER_KILL_GRACE_MS) {
        return RUNNER_ERR;
    }

    return RUNNER_OK;
}


/* the network a session's sandboxes run on */
static void
runner_run_network(runner_run_t *run, char *buf, size_t size)
{
    if (runner_config->egress_container[0]) {
        snprintf(buf, size, "smcp-net-%s", run->session);

    } else {
        snprintf(buf, size, "%s", runner_config->network);
    }
}


static json_t *
runner_run_spec(runner_run_t *run, json_t *h, const char *token,
    const char *volume, const char *oc_session)
{
    char          net[128];

    json_t       *env, *spec, *binds;
    const char   *task, *model, *repo, *branch;
    char          buf[2048];

    task = json_string_value(json_object_get(h, "task"));
    model = json_string_value(json_object_get(h, "model"));
    repo = json_string_value(json_object_get(h, "repository"));
    branch = json_string_value(json_object_get(h, "branch"));

    env = json_array();

#define RUNNER_ENV(k, v)                                                      \
    if ((v) && *(v)) {                                                        \
        snprintf(buf, sizeof(buf), "%s=%s", k, v);                            \
        json_array_append_new(env, json_string(buf));                         \
    }

    RUNNER_ENV("SMCP_EGRESS_URL", runner_config->egress_url);
    RUNNER_ENV("SMCP_RUN_TOKEN", token);
    RUNNER_ENV("SMCP_RUN_ID", run->id);
    RUNNER_ENV("SMCP_MODEL", model);
    RUNNER_ENV("SMCP_REPOSITORY", repo);
    RUNNER_ENV("SMCP_BRANCH", branch);
    RUNNER_ENV("SMCP_GIT_HOST", runner_config->git_host);
    RUNNER_ENV("SMCP_SESSION", oc_session);
    RUNNER_ENV("SMCP_TITLE", json_string_value(json_object_get(h, "title")));

    /* the diff line the sandbox prints stays within what is kept */
    snprintf(buf, sizeof(buf), "SMCP_DIFF_MAX=%lld",
             (long long) runner_config->diff_max);
    json_array_append_new(env, json_string(buf));

#undef RUNNER_ENV

    /* the task can be long: not through snprintf's buffer */
    if (task) {
        char  *t = malloc(strlen(task) + sizeof("SMCP_TASK="));

        if (t) {
            strcpy(t, "SMCP_TASK=");
            strcat(t, task);
            json_array_append_new(env, json_string(t));
            free(t);
        }
    }

    runner_run_network(run, net, sizeof(net));

    binds = json_array();
    snprintf(buf, sizeof(buf), "%s:/workspace", volume);
    json_array_append_new(binds, json_string(buf));

    spec = json_pack(
        "{s:s, s:s, s:s, s:o, s:{s:s, s:s, s:s, s:s},"
        " s:{s:s, s:o, s:[s,s], s:b, s:I, s:I, s:I, s:I, s:b,"
        "    s:{s:s, s:s}, s:o, s:[s], s:[s],"
        "    s:{s:s, s:{s:s, s:s}}}}",
        "Image", runner_config->image,
        "User", "1000:1000",
        "WorkingDir", "/workspace",
        "Env", env,
        "Labels", "smcp.run", run->id, "smcp.session", run->session,
                  "smcp.runner", runner_config->name,
                  "smcp.store", runner_store_id(),
        "HostConfig",
            "NetworkMode", net,
            "Dns", runner_config->dns[0]
                   ? json_pack("[s]", runner_config->dns) : json_array(),
            "DnsOptions", "timeout:1", "attempts:1",
            "Init", 1,
            "Memory", (json_int_t) runner_config->memory,
            "MemorySwap", (json_int_t) runner_config->memory,
            "NanoCpus", (json_int_t) runner_config->nano_cpus,
            "PidsLimit", (json_int_t) runner_config->pids,
            "ReadonlyRootfs", 1,
            "Tmpfs",
                "/tmp", "rw,nosuid,nodev,exec,size=1g,mode=1777",
                "/home/sandbox",
                "rw,nosuid,nodev,exec,size=256m,uid=1000,gid=1000,mode=0700",
            "Binds", binds,
            "CapDrop", "ALL",
            "SecurityOpt", "no-new-privileges",
            "LogConfig", "Type", "json-file", "Config",
                "max-size", "50m", "max-file", "5");

    return spec;
}


/* RUNNER_ERR: the outcome could not be stored (Redis away): try later */
static int
runner_run_finish(runner_run_t *run, int exit_code, const char *why)
{
    const char  *status, *error;
    char         msg[512], stopmsg[256], key[160];
    redisReply  *r;

    status = "completed";
    error = NULL;

    /* a run that spent past its cap says so, however it ended (its agent
     * may have finished before the watchdog looked) */
    snprintf(key, sizeof(key), SMCP_KEY_RUN, runner_config->prefix, run->id);
    r = redisCommand(run->redis, "HGET %s max_cost", key);

    if (r) {
        runner_run_check_cost(run, r, run->out.cost);
        freeReplyObject(r);
    }

    switch (runner_run_stopped(run, stopmsg, sizeof(stopmsg))) {

    case RUNNER_STOP_CANCEL:
        status = "cancelled";
        error = "cancelled";
        break;

    case RUNNER_STOP_DEADLINE:
    case RUNNER_STOP_LIMIT:
        status = "failed";
        error = stopmsg;
        break;

    default:
        if (why) {
            status = "failed";
            error = why;

        } else if (exit_code != 0) {
            status = "failed";

            if (run->out.error) {
                error = run->out.error;

            } else {
                snprintf(msg, sizeof(msg), "the agent exited with code %d",
                         exit_code);
                error = msg;
            }
        }
    }

    if (run->out.oc_session[0] && run->session[0]) {
        snprintf(key, sizeof(key), SMCP_KEY_SESSION, runner_config->prefix,
                 run->session);
        r = redisCommand(run->redis, "HSET %s opencode_session %s", key,
                         run->out.oc_session);
        if (r) {
            freeReplyObject(r);
        }
    }

    if (runner_store_finish(run->redis, run, status, exit_code, error)
        != RUNNER_OK)
    {
        runner_log("error", run->id, "the outcome (%s) could not be stored; "
                   "will retry", status);
        return RUNNER_ERR;
    }

    runner_log("info", run->id, "%s (exit %d)%s%s", status, exit_code,
               error ? ": " : "", error ? error : "");

    return RUNNER_OK;
}


/*
 * The sandbox goes: its container (killed first when it may still run)
 * and, in compose mode, the session's network.  Before the outcome is
 * stored: the session's next run may start the moment it is.
 */
static void
runner_run_release(runner_run_t *run, int kill)
{
    char  err[RUNNER_ERRLEN], net[128];

    if (run->container[0]) {
        if (kill) {
            runner_docker_kill(run->container, err, sizeof(err));
        }

        if (runner_docker_remove(run->container, err, sizeof(err))
            != RUNNER_OK)
        {
            /* the main loop's reconciliation removes it later */
            runner_log("error", run->id, "%s", err);
            atomic_store(&runner_release_failed, 1);
        }
    }

    if (runner_config->egress_container[0] && run->session[0]) {
        runner_run_network(run, net, sizeof(net));
        runner_docker_session_net_drop(net, runner_config->egress_container,
                                       err, sizeof(err));
    }
}


/* the outcome, stored come what may: Redis may be away for a while */
static int
runner_run_conclude(runner_run_t *run, int exit_code, const char *why)
{
    int   delay;
    char  err[RUNNER_ERRLEN];

    for (delay = 1; /* void */ ; delay = delay < 8 ? delay * 2 : 8) {

        if (run->redis && runner_run_finish(run, exit_code, why) == RUNNER_OK)
        {
            return RUNNER_OK;
        }

        if (atomic_load(&runner_stop)) {
            return RUNNER_ERR;
        }

        sleep(delay);

        if (run->redis == NULL || run->redis->err) {
            if (run->redis) {
                redisFree(run->redis);
            }

            run->redis = runner_store_connect(err, sizeof(err));

            if (run->redis == NULL) {
                runner_log("error", run->id, "%s", err);
            }
        }
    }
}


static int
runner_run_start(runner_run_t *run, char *err, size_t errlen)
{
    json_t        *h, *claims, *spec;
    char          *token, volume[128], name[96], status[64], key[160];
    char           oc_session[96];
    redisReply    *r;
    const char    *tenant, *session;
    int64_t        timeout;
    time_t         now;

    h = runner_store_run(run->redis, run->id);
    if (h == NULL) {
        snprintf(err, errlen, "the run vanished from Redis");
        return RUNNER_ERR;
    }

    tenant = json_string_value(json_object_get(h, "tenant"));
    session = json_string_value(json_object_get(h, "session"));
    timeout = atoll(json_string_value(json_object_get(h, "timeout")) ?: "0");

    if (tenant == NULL || session == NULL
        || !smcp_valid_id(session, strlen(session), SMCP_SESSION_ID_PREFIX))
    {
        json_decref(h);
        snprintf(err, errlen, "the run has no valid tenant or session");
        return RUNNER_ERR;
    }

    snprintf(run->session, sizeof(run->session), "%s", session);

    if (timeout <= 0) {
        timeout = SMCP_DEFAULT_RUN_TIMEOUT;
    }

    now = time(NULL);
    run->deadline_ms = smcp_now_ms() + timeout * 1000;

    /* the sandbox's only credential: good for this run, while it lives */
    claims = json_pack("{s:s, s:s, s:s, s:I, s:I}", "sub", tenant,
                       "scope", SMCP_SCOPE_EGRESS, "run", run->id,
                       "iat", (json_int_t) now,
                       "exp", (json_int_t) (now + timeout + RUNNER_GRACE_S));

    if (claims == NULL
        || smcp_jwt_sign(runner_config->secret.data,
                         runner_config->secret.len,
                         claims, &token) != SMCP_OK)
    {
        json_decref(claims);
        json_decref(h);
        snprintf(err, errlen, "cannot sign the run token");
        return RUNNER_ERR;
    }

    json_decref(claims);

    snprintf(volume, sizeof(volume), "smcp-%s", session);

    if (runner_docker_volume(volume, session, err, errlen) != RUNNER_OK) {
        free(token);
        json_decref(h);
        return RUNNER_ERR;
    }

    if (runner_config->egress_container[0]) {
        char  net[128];

        runner_run_network(run, net, sizeof(net));

        if (runner_docker_session_net(net, session,
                                      runner_config->egress_container,
                                      err, errlen)
            != RUNNER_OK)
        {
            free(token);
            json_decref(h);
            return RUNNER_ERR;
        }
    }

    /* the OpenCode conversation of the session's earlier runs */
    oc_session[0] = '\0';
    snprintf(key, sizeof(key), SMCP_KEY_SESSION, runner_config->prefix,
             session);
    r = redisCommand(run->redis, "HGET %s opencode_session", key);
    if (r && r->type == REDIS_REPLY_STRING && r->len < sizeof(oc_session)) {
        strcpy(oc_session, r->str);
    }
    if (r) {
        freeReplyObject(r);
    }

    spec = runner_run_spec(run, h, token, volume, oc_session);
    free(token);
    json_decref(h);

    if (spec == NULL) {
        snprintf(err, errlen, "cannot build the container spec");
        return RUNNER_ERR;
    }

    snprintf(name, sizeof(name), "smcp-%s", run->id);

    if (runner_docker_create(spec, name, run->container,
                             sizeof(run->container), err, errlen)
        != RUNNER_OK)
    {
        /* a container of this run left by a runner that died while
         * starting it (we hold the claim now): replace it */
        if (strstr(err, " 409 ") == NULL
            || runner_docker_remove(name, err, errlen) != RUNNER_OK
            || runner_docker_create(spec, name, run->container,
                                    sizeof(run->container), err, errlen)
               != RUNNER_OK)
        {
            json_decref(spec);
            runner_run_release(run, 0);
            return RUNNER_ERR;
        }
    }

    json_decref(spec);

    if (runner_docker_start(run->container, err, errlen) != RUNNER_OK) {
        runner_run_release(run, 0);
        return RUNNER_ERR;
    }

    if (runner_store_set_running(run->redis, run->id, run->container,
                                 run->deadline_ms, status, sizeof(status))
        != RUNNER_OK)
    {
        /* cancelled while the container was starting */
        runner_log("info", run->id, "not started: the run is %s", status);
        runner_run_release(run, 1);
        return RUNNER_AGAIN;
    }

    runner_log("info", run->id, "running in container %.12s",
               run->container);

    return RUNNER_OK;
}


/* a stored event's field, or NULL */
static redisReply *
runner_run_field(redisReply *e, const char *name)
{
    size_t       j;
    redisReply  *f;

    if (e->type != REDIS_REPLY_ARRAY || e->elements != 2
        || e->element[1]->type != REDIS_REPLY_ARRAY)
    {
        return NULL;
    }

    f = e->element[1];

    for (j = 0; j + 1 < f->elements; j += 2) {
        if (f->element[j]->type == REDIS_REPLY_STRING
            && f->element[j + 1]->type == REDIS_REPLY_STRING
            && strcmp(f->element[j]->str, name) == 0)
        {
            return f->element[j + 1];
        }
    }

    return NULL;
}


/* a re-attached run: the outcome so far, from the stored events, a page
 * at a time */
static void
runner_run_replay(runner_run_t *run)
{
    char         key[160], from[80];
    size_t       i;
    redisReply  *r, *d, *e;
    json_t      *ev;
    const char  *step;

    snprintf(key, sizeof(key), SMCP_KEY_RUN_EVENTS, runner_config->prefix,
             run->id);
    strcpy(from, "-");

    for ( ;; ) {
        r = redisCommand(run->redis, "XRANGE %s %s + COUNT 100", key, from);

        if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements == 0) {
            break;
        }

        for (i = 0; i < r->elements; i++) {
            e = r->element[i];
            d = runner_run_field(e, "data");

            if (d == NULL) {
                continue;
            }

            ev = json_loadb(d->str, d->len, 0, NULL);

            if (json_is_object(ev)) {
                runner_outcome_event(&run->out, ev);

                step = json_string_value(json_object_get(ev, "step"));
                if (step && strcmp(step, "diff") == 0
                    && runner_run_field(e, "dts") == NULL)
                {
                    run->diff_marker = 1;
                }

                step = json_string_value(json_object_get(ev, "warning"));
                if (step && strcmp(step, "output budget exceeded") == 0
                    && runner_run_field(e, "dts") == NULL)
                {
                    run->budget_hit = 1;
                }
            }

            json_decref(ev);
        }

        e = r->element[r->elements - 1];

        if (e->type != REDIS_REPLY_ARRAY || e->elements != 2
            || e->element[0]->type != REDIS_REPLY_STRING
            || e->element[0]->len > 60)
        {
            break;
        }

        /* exclusive: after the last one read */
        snprintf(from, sizeof(from), "(%s", e->element[0]->str);
        freeReplyObject(r);
    }

    if (r) {
        freeReplyObject(r);
    }
}


/* RFC 3339 -> unix seconds.nanoseconds, for Docker's `since` */
static void
runner_run_since(const char *ts, char *since, size_t size)
{
    struct tm    tm;
    long         ns;
    size_t       n;
    const char  *dot;
    char         frac[10] = "000000000";

    since[0] = '\0';
    memset(&tm, 0, sizeof(tm));

    if (strptime(ts, "%Y-%m-%dT%H:%M:%S", &tm) == NULL) {
        return;
    }

    ns = 0;
    dot = strchr(ts, '.');

    if (dot) {
        n = strspn(dot + 1, "0123456789");
        memcpy(frac, dot + 1, n < 9 ? n : 9);
        ns = atol(frac);
    }

    snprintf(since, size, "%lld.%09ld", (long long) timegm(&tm), ns);
}


/* a fresh connection, however long Redis is away (unless we stop) */
static int
runner_run_reconnect(runner_run_t *run)
{
    int   delay;
    char  err[RUNNER_ERRLEN];

    for (delay = 1; !atomic_load(&runner_stop); delay = delay < 8 ? delay * 2 : 8) {

        if (run->redis) {
            redisFree(run->redis);
        }

        run->redis = runner_store_connect(err, sizeof(err));

        if (run->redis) {
            return RUNNER_OK;
        }

        runner_log("error", run->id, "%s; retrying in %d s", err, delay);
        runner_run_sleep(delay * 1000);
    }

    return RUNNER_ERR;
}


/* the container's exit, in bounded waits (the watchdog stops it when it
 * must): RUNNER_AGAIN when the runner is stopping */
static int
runner_run_wait(runner_run_t *run, int *exit_code, char *err, size_t errlen)
{
    int  rc, fails;

    for (fails = 0; /* void */ ; /* void */) {

        if (atomic_load(&runner_stop)) {
            return RUNNER_AGAIN;
        }

        rc = runner_docker_wait(run->container, RUNNER_WAIT_S, exit_code,
                                err, errlen);

        if (rc == RUNNER_OK) {
            return RUNNER_OK;
        }

        if (rc == RUNNER_ERR && ++fails >= 2) {
            return RUNNER_ERR;
        }

        if (rc == RUNNER_ERR) {
            runner_run_sleep(1000);
        }
    }
}


/*
 * The log of an exited container, read once more from the last line done
 * with: Docker's follower loses lines across json-file rotations (a
 * reader slower than the writer can miss whole files and the end of the
 * log, seen on 20.10 with 200 MB written at once), while the files of an
 * exited container read back whole.  Lines already done with are skipped.
 */
static void
runner_run_catch_up(runner_run_t *run, runner_follow_state_t *st)
{
    char  err[RUNNER_ERRLEN], since[64];

    since[0] = '\0';

    if (run->last_ts[0]) {
        runner_run_since(run->last_ts, since, sizeof(since));
        st->skip = run->last_ts_count;
    }

    if (runner_docker_follow(run->container, since[0] ? since : NULL, 0,
                             runner_run_line, runner_run_tick, st,
                             err, sizeof(err))
        != RUNNER_OK && !atomic_load(&runner_stop))
    {
        runner_log("error", run->id, "reading the end of the log: %s", err);
    }
}


/*
 * Follows the log into the event stream until it ends, then waits for the
 * exit: RUNNER_OK (exit_code set), RUNNER_AGAIN (the runner is stopping:
 * detach), RUNNER_ERR (Docker lost the sandbox: *why says how).
 */
static int
runner_run_follow(runner_run_t *run, int *exit_code, const char **why)
{
    int                     tries, running, rc;
    char                    err[RUNNER_ERRLEN], since[64];
    runner_follow_state_t   st;

    memset(&st, 0, sizeof(st));
    st.run = run;

    for (tries = 0; tries < RUNNER_FOLLOW_TRIES; /* void */) {

        since[0] = '\0';

        if (run->last_ts[0]) {
            runner_run_since(run->last_ts, since, sizeof(since));
            st.skip = run->last_ts_count;
        }

        if (runner_docker_follow(run->container, since[0] ? since : NULL, 1,
                                 runner_run_line, runner_run_tick, &st,
                                 err, sizeof(err))
            == RUNNER_OK)
        {
            break;
        }

        if (atomic_load(&runner_stop)) {
            return RUNNER_AGAIN;
        }

        if (atomic_load(&run->killed_at)) {
            /* stopped: what is left of the log matters less than the end */
            break;
        }

        /* a fresh connection if Redis was the trouble (that does not
         * count as a try) */
        if (run->redis->err) {
            runner_log("error", run->id, "redis: %s; reconnecting",
                       run->redis->errstr);

            if (runner_run_reconnect(run) != RUNNER_OK) {
                return RUNNER_AGAIN;
            }

        } else {
            runner_log("error", run->id, "%s; retrying", err);
            runner_run_sleep(1000 << tries);
            tries++;
        }

        /* on from the last line done with (this thread's own count: lines
         * not stored on purpose are not read twice either) */
    }

    if (atomic_load(&runner_stop)) {
        return RUNNER_AGAIN;
    }

    rc = runner_run_wait(run, exit_code, err, sizeof(err));

    if (rc == RUNNER_OK) {
        runner_run_catch_up(run, &st);
    }

    if (rc != RUNNER_ERR) {
        return rc;
    }

    runner_log("error", run->id, "%s", err);

    running = 0;
    runner_docker_running(run->container, &running, err, sizeof(err));

    *why = (running == -1) ? "the sandbox container disappeared"
                           : "the sandbox could not be followed (dockerd "
                             "unreachable)";

    return RUNNER_ERR;
}


/*
 * At start: containers of runs that ended (or vanished from Redis) are
 * removed: left behind by a runner that died between the outcome and the
 * cleanup, or while dockerd was away.
 */
void
runner_run_reconcile(redisContext *c)
{
    size_t       i;
    json_t      *list, *ct, *labels;
    const char  *id, *run_id;
    char         status[32], err[RUNNER_ERRLEN], label[400];

    /* only this deployment's containers: another store's runs are not
     * ours to judge */
    snprintf(label, sizeof(label), "smcp.store=%s", runner_store_id());

    atomic_store(&runner_release_failed, 0);

    list = runner_docker_list(label, err, sizeof(err));
    if (list == NULL) {
        runner_log("error", NULL, "reconcile: %s", err);
        atomic_store(&runner_release_failed, 1);
        return;
    }

    json_array_foreach(list, i, ct) {
        id = json_string_value(json_object_get(ct, "Id"));
        labels = json_object_get(ct, "Labels");
        run_id = json_string_value(json_object_get(labels, "smcp.run"));

        if (id == NULL || run_id == NULL
            || !runner_docker_valid_id(id)
            || !smcp_valid_id(run_id, strlen(run_id), SMCP_RUN_ID_PREFIX)
            || runner_store_hget(c, run_id, "status", status, sizeof(status))
               != RUNNER_OK)
        {
            continue;
        }

        if (status[0] == '\0' || strcmp(status, "completed") == 0
            || strcmp(status, "failed") == 0
            || strcmp(status, "cancelled") == 0)
        {
            runner_log("info", run_id, "removing the container of an ended "
                       "run (%.12s)", id);
            runner_docker_kill(id, err, sizeof(err));

            if (runner_docker_remove(id, err, sizeof(err)) != RUNNER_OK) {
                atomic_store(&runner_release_failed, 1);
            }
        }
    }

    json_decref(list);
}


/*
 * A run whose every take ended with its runner gone (not a clean detach:
 * a crash, a kill, a host lost) is failed rather than taken again: it may
 * be what crashes them.
 */
static int
runner_run_crashed(runner_run_t *run, long long attempts, char *err,
    size_t errlen)
{
    if (attempts <= RUNNER_MAX_ATTEMPTS) {
        return 0;
    }

    snprintf(err, errlen, "the run crashed its runner %lld times; it is "
             "not started again", attempts - 1);

    return 1;
}


/* a run this runner had, or took over: its container and its state so
 * far from Redis; RUNNER_ERR (err set) when it cannot be followed */
static int
runner_run_reattach(runner_run_t *run, char *err, size_t errlen)
{
    char       v[32], net[128];
    long long  attempts;

    runner_store_hget(run->redis, run->id, "container_id", run->container,
                      sizeof(run->container));
    runner_store_hget(run->redis, run->id, "session", run->session,
                      sizeof(run->session));

    /* they go into Docker API paths */
    if (!runner_docker_valid_id(run->container)) {
        run->container[0] = '\0';
        snprintf(err, errlen, "the run's container_id is malformed");
        return RUNNER_ERR;
    }

    if (!smcp_valid_id(run->session, strlen(run->session),
                       SMCP_SESSION_ID_PREFIX))
    {
        run->session[0] = '\0';
        snprintf(err, errlen, "the run has no valid session");
        return RUNNER_ERR;
    }

    if (runner_store_attempts(run->redis, run->id, 1, &attempts)
        == RUNNER_OK
        && runner_run_crashed(run, attempts, err, errlen))
    {
        return RUNNER_ERR;
    }

    /* the deadline goes on: it was stored when the run started */
    if (runner_store_hget(run->redis, run->id, "deadline", v, sizeof(v))
        == RUNNER_OK)
    {
        run->deadline_ms = atoll(v);
    }

    if (runner_store_hget(run->redis, run->id, "event_bytes", v, sizeof(v))
        == RUNNER_OK)
    {
        run->event_bytes = atoll(v);
    }

    runner_store_last_log_ts(run->redis, run);
    runner_run_replay(run);

    if (runner_config->egress_container[0]) {
        /* an nginx container recreated meanwhile joins again */
        runner_run_network(run, net, sizeof(net));
        runner_docker_session_net(net, run->session,
                                  runner_config->egress_container,
                                  err, errlen);
    }

    runner_log("info", run->id, "re-attached to container %.12s after %s",
               run->container,
               run->last_ts[0] ? run->last_ts : "(nothing stored)");

    return RUNNER_OK;
}


/* claims a queued run and starts its sandbox: RUNNER_OK when it runs;
 * otherwise the run thread is done (state and queue entry seen to) */
static int
runner_run_begin(runner_run_t *run)
{
    char       err[RUNNER_ERRLEN], status[64];
    int        rc;
    long long  attempts;

    rc = runner_store_claim(run->redis, run->id, status, sizeof(status),
                            err, sizeof(err));

    if (rc == RUNNER_AGAIN && strcmp(status, "wait") == 0) {
        /* an earlier run of the session is still going */
        atomic_store(&run->state, RUNNER_RUN_WAIT);
        return RUNNER_ERR;
    }

    if (rc != RUNNER_OK) {
        if (rc == RUNNER_ERR) {
            runner_log("error", run->id, "claim: %s", status);
            atomic_store(&run->state, RUNNER_RUN_RETRY);
            return RUNNER_ERR;
        }

        if (strcmp(status, "claimed") == 0) {
            /* another live runner is starting it: not ours to ack */
            runner_log("info", run->id, "claimed by another runner");
            return RUNNER_ERR;
        }

        /* cancelled before it started, finished, or gone */
        runner_log("info", run->id, "skipped: %s", status);
        runner_store_ack(run->redis, run->stream_id);
        return RUNNER_ERR;
    }

    if (runner_store_attempts(run->redis, run->id, 0, &attempts) == RUNNER_OK
        && runner_run_crashed(run, attempts, err, sizeof(err)))
    {
        rc = RUNNER_ERR;

    } else {
        rc = runner_run_start(run, err, sizeof(err));
    }

    if (rc == RUNNER_ERR) {
        runner_log("error", run->id, "%s", err);

        if (runner_run_conclude(run, -1, err) == RUNNER_OK) {
            runner_store_ack(run->redis, run->stream_id);
        }

        return RUNNER_ERR;
    }

    if (rc == RUNNER_AGAIN) {
        runner_store_ack(run->redis, run->stream_id);
        return RUNNER_ERR;
    }

    return RUNNER_OK;
}


void *
runner_run_thread(void *arg)
{
    runner_run_t  *run = arg;
    char           err[RUNNER_ERRLEN];
    const char    *why;
    int            rc, exit_code;

    run->redis = runner_store_connect(err, sizeof(err));
    if (run->redis == NULL) {
        runner_log("error", run->id, "%s", err);
        atomic_store(&run->state, RUNNER_RUN_RETRY);
        return NULL;
    }

    if (run->reattach) {
        if (runner_run_reattach(run, err, sizeof(err)) != RUNNER_OK) {
            runner_log("error", run->id, "%s", err);
            runner_run_release(run, 1);

            if (runner_run_conclude(run, -1, err) == RUNNER_OK) {
                runner_store_ack(run->redis, run->stream_id);
            }

            goto done;
        }

    } else if (runner_run_begin(run) != RUNNER_OK) {
        goto done;
    }

    why = NULL;
    exit_code = -1;

    runner_run_watch_start(run);
    rc = runner_run_follow(run, &exit_code, &why);
    runner_run_watch_end(run);

    if (rc == RUNNER_AGAIN) {
        /* detached cleanly: the container goes on, and this take does not
         * count as a crash */
        runner_store_attempts(run->redis, run->id, -1, NULL);
        goto done;
    }

    /* if dockerd comes back, a lost sandbox must not live on */
    runner_run_release(run, rc == RUNNER_ERR);

    if (runner_run_conclude(run, exit_code,
                            rc == RUNNER_ERR ? why
                            : run->out.clone_failed ? run->out.error : NULL)
        == RUNNER_OK && !atomic_load(&runner_stop))
    {
        runner_store_ack(run->redis, run->stream_id);
    }

done:

    runner_outcome_free(&run->out);

    if (run->redis) {
        redisFree(run->redis);
        run->redis = NULL;
    }

    if (atomic_load(&run->state) == RUNNER_RUN_ACTIVE) {
        atomic_store(&run->state, RUNNER_RUN_DONE);
    }

    return NULL;
}
