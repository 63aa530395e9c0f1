/*
 * Following a run's container log into its event stream: each line
 * stored as an event (bounded by --max-line and --max-event-bytes) and
 * counted in the outcome; lines Docker sends again skipped; a re-attach
 * resumes from the last line stored (the stored events replayed into the
 * outcome first); the exit awaited in bounded waits; the end of the log
 * read once more after the exit.
 */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "runner.h"


/* sleeps, unless the runner is stopping */
static void
runner_run_sleep(int64_t ms)
{
    for ( /* void */ ; ms > 0 && !atomic_load(&runner_stop);
         ms -= RUNNER_TICK_MS)
    {
        usleep(RUNNER_TICK_MS * 1000);
    }
}


typedef struct {
    runner_run_t  *run;
    int            skip;            /* lines at last_ts still to skip */
} runner_follow_state_t;


/* the one warning after which nothing more of the run is stored */
static int
runner_run_budget_hit(runner_run_t *run, const char *warn, const char *what,
    int64_t limit)
{
    int64_t  usage;

    if (runner_store_event(run->store, run->id, run->tenant, "lifecycle",
                           warn, strlen(warn), NULL, 0, &usage)
        != RUNNER_OK)
    {
        runner_log("error", run->id, "storing an event failed: %s",
                   runner_store_error(run->store));
        return RUNNER_ERR;
    }

    run->budget_hit = 1;
    runner_log("info", run->id, "%s of %lld bytes reached: later output is "
               "not stored", what, (long long) limit);

    return RUNNER_OK;
}


/* the tenant's budget of Redis bytes reached: its warning */
static int
runner_run_tenant_hit(runner_run_t *run)
{
    char  warn[256];

    snprintf(warn, sizeof(warn), "{\"warning\":\"tenant budget exceeded\","
             "\"budget\":\"sandbox_mcp_tenant_redis_bytes\",\"limit\":%lld,"
             "\"held\":%lld}", (long long) run->tenant_bytes_max,
             (long long) run->tenant_bytes);

    return runner_run_budget_hit(run, warn, "the tenant's budget",
                                 run->tenant_bytes_max);
}


/*
 * An event of the run: counted in event_bytes, and in its tenant's usage;
 * past --max-event-bytes one warning is stored, and nothing more (the
 * outcome still counts every line); likewise once the tenant's runs hold
 * its budget of Redis bytes (the event that reaches it is stored: the
 * usage is at the budget, and opencode_run_task refuses the tenant).
 */
int
runner_run_store(runner_run_t *run, const char *type, const char *data,
    size_t len, const char *dts)
{
    char     warn[256];
    int64_t  usage;

    if (run->budget_hit) {
        return RUNNER_OK;
    }

    if (run->event_bytes + (int64_t) len > runner_config->max_event_bytes) {
        snprintf(warn, sizeof(warn), "{\"warning\":\"output budget "
                 "exceeded\",\"limit\":%lld,\"stored\":%lld}",
                 (long long) runner_config->max_event_bytes,
                 (long long) run->event_bytes);

        return runner_run_budget_hit(run, warn, "output budget",
                                     runner_config->max_event_bytes);
    }

    /* at the tenant's budget already (its other runs): nothing more */
    if (runner_budget_event(run)) {
        return runner_run_tenant_hit(run);
    }

    if (runner_store_event(run->store, run->id, run->tenant, type, data, len,
                           dts, len, &usage)
        != RUNNER_OK)
    {
        runner_log("error", run->id, "storing an event failed: %s",
                   runner_store_error(run->store));
        return RUNNER_ERR;
    }

    run->event_bytes += len;

    if (usage >= 0) {
        run->tenant_bytes = usage;
    }

    /* this one reached it: the last stored */
    if (runner_budget_event(run)) {
        return runner_run_tenant_hit(run);
    }

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

    if (len == 0 && cut == 0) {
        /* an empty line says nothing (the entry script's before
         * agent_exit ends whatever line the agent left unfinished) */
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

        if (rc == RUNNER_OK && stream == 2) {
            runner_outcome_stderr(&run->out, copy, len);
        }

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


/* a stored event of a re-attached run: counted in the outcome so far;
 * the runner's own diff marker, budget warning and opened pull request
 * (no dts) noted */
void
runner_run_replayed(void *data, const char *json, size_t len, int from_log)
{
    runner_run_t  *run = data;
    json_t        *ev;
    const char    *s;

    ev = json_loadb(json, len, 0, NULL);

    if (json_is_object(ev)) {
        runner_outcome_event(&run->out, ev);

        s = json_string_value(json_object_get(ev, "step"));
        if (s && strcmp(s, "diff") == 0 && !from_log) {
            run->diff_marker = 1;
        }

        s = json_string_value(json_object_get(ev, "warning"));
        if (s && (strcmp(s, "output budget exceeded") == 0
                  || (strcmp(s, "tenant budget exceeded") == 0
                      && !json_is_false(json_object_get(ev, "stored"))))
            && !from_log)
        {
            run->budget_hit = 1;
        }

        /* the pull request this runner's predecessor opened: not again */
        s = json_string_value(json_object_get(ev, "step"));
        if (s && strcmp(s, "pr_opened") == 0 && !from_log) {
            s = json_string_value(json_object_get(ev, "url"));

            if (s && strlen(s) < sizeof(run->pr.url)) {
                run->pr.status = "opened";
                run->pr_done = 1;
                strcpy(run->pr.url, s);
                snprintf(run->pr.number, sizeof(run->pr.number), "%lld",
                         (long long) json_integer_value(
                             json_object_get(ev, "number")));
            }
        }
    }

    json_decref(ev);
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


/*
 * What the run stored so far, read back from its store: its event bytes,
 * where its log goes on from, and the outcome of its stored events
 * (runner_run_replayed); its budgets are re-attach's (the watchdog reads
 * them while a run is followed).  A re-attached run starts from it.  A run
 * whose connection was lost reads it again from the server it reaches
 * now, which may be a promoted replica without the last writes the old
 * master took (a failover): the log is then followed again from the last
 * line that server has, what is missing is stored again, and the outcome
 * counts exactly what is stored.  The agent's stderr tail is kept (its
 * lines are not replayed).
 */
int
runner_run_stored_state(runner_run_t *run)
{
    int     rc;
    char    v[RUNNER_NUM_MAX], tail[RUNNER_STDERR_TAIL];
    size_t  tail_len;

    run->event_bytes = 0;

    if (runner_store_hget(run->store, run->id, "event_bytes", v, sizeof(v))
        == RUNNER_OK)
    {
        run->event_bytes = atoll(v);
    }

    tail_len = run->out.stderr_len;
    memcpy(tail, run->out.stderr_tail, sizeof(tail));

    runner_outcome_free(&run->out);
    run->diff_marker = 0;
    run->budget_hit = 0;

    rc = (runner_store_last_log_ts(run->store, run) == RUNNER_OK
          && runner_store_replay(run->store, run->id, runner_run_replayed,
                                 run) == RUNNER_OK) ? RUNNER_OK : RUNNER_ERR;

    /* kept whatever the read gave: the next try keeps it again */
    memcpy(run->out.stderr_tail, tail, sizeof(tail));
    run->out.stderr_len = tail_len;
    atomic_store(&run->cost_micros, (long long) llround(run->out.cost * 1e6));

    return rc;
}


/* a fresh connection, however long Redis is away (unless we stop), and
 * the run's state read again through it */
static int
runner_run_reconnect(runner_run_t *run)
{
    int   delay;
    char  err[RUNNER_ERRLEN];

    for (delay = 1; !atomic_load(&runner_stop);
         delay = delay < RUNNER_BACKOFF_MAX_S ? delay * 2 : delay)
    {
        runner_store_close(run->store);
        run->store = runner_store_connect(1, err, sizeof(err));

        if (run->store && runner_run_stored_state(run) == RUNNER_OK) {
            runner_log("info", run->id, "reconnected: going on after %s",
                       run->last_ts[0] ? run->last_ts : "(nothing stored)");
            return RUNNER_OK;
        }

        if (run->store) {
            snprintf(err, sizeof(err), "reading the run's state again: %s",
                     runner_store_error(run->store));
        }

        runner_log("error", run->id, "%s; retrying in %d s", err, delay);
        runner_run_sleep(delay * 1000);
    }

    return RUNNER_ERR;
}


/*
 * The container's exit, in bounded waits (the watchdog stops it when it
 * must): RUNNER_AGAIN when the runner is stopping.  An engine that is not
 * reached, or answers 5xx (dockerd restarting: its shutdown ends the log
 * stream first, and stopping the containers can take their stop
 * timeouts), is asked again with the tries the follow left of its
 * RUNNER_FOLLOW_TRIES (about half a minute in all); any other answer
 * (404: the container is gone) once more only.
 */
static int
runner_run_wait(runner_run_t *run, int tries, int *exit_code, char *err,
    size_t errlen)
{
    int   away, asked;
    long  st;

    for (asked = 0; /* void */ ; /* void */) {

        if (atomic_load(&runner_stop)) {
            return RUNNER_AGAIN;
        }

        st = runner_backend->wait(run->container, RUNNER_WAIT_S, exit_code,
                                err, errlen);

        if (st == 200) {
            return RUNNER_OK;
        }

        /* still running: wait on */
        if (st == RUNNER_DOCKER_TIMEOUT) {
            continue;
        }

        away = (st == RUNNER_DOCKER_DOWN || st >= 500);

        if (away ? ++tries > RUNNER_FOLLOW_TRIES : ++asked > 1) {
            return RUNNER_ERR;
        }

        runner_log("error", run->id, "%s; asking again", err);
        runner_run_sleep(RUNNER_CHECK_MS << (away ? tries - 1 : 0));
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

    if (runner_backend->follow(run->container, since[0] ? since : NULL, 0,
                             runner_run_line, runner_run_tick, st,
                             err, sizeof(err))
        != 200 && !atomic_load(&runner_stop))
    {
        runner_log("error", run->id, "reading the end of the log: %s", err);
    }
}


/*
 * Follows the log into the event stream until it ends, then waits for the
 * exit: RUNNER_OK (exit_code set), RUNNER_AGAIN (the runner is stopping:
 * detach), RUNNER_ERR (Docker lost the sandbox: *why says how).
 */
int
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

        if (runner_backend->follow(run->container, since[0] ? since : NULL, 1,
                                 runner_run_line, runner_run_tick, &st,
                                 err, sizeof(err))
            == 200)
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
        if (runner_store_lost(run->store)) {
            runner_log("error", run->id, "%s; reconnecting",
                       runner_store_error(run->store));

            if (runner_run_reconnect(run) != RUNNER_OK) {
                return RUNNER_AGAIN;
            }

        } else {
            runner_log("error", run->id, "%s; retrying", err);
            runner_run_sleep(RUNNER_CHECK_MS << tries);
            tries++;
        }

        /* on from the last line done with: this thread's own count
         * (lines not stored on purpose are not read twice either), or
         * after a reconnect the last line stored */
    }

    if (atomic_load(&runner_stop)) {
        return RUNNER_AGAIN;
    }

    rc = runner_run_wait(run, tries, exit_code, err, sizeof(err));

    if (rc == RUNNER_OK) {
        runner_run_catch_up(run, &st);
    }

    if (rc != RUNNER_ERR) {
        return rc;
    }

    runner_log("error", run->id, "%s", err);

    *why = (runner_backend->running(run->container, &running, err,
                                  sizeof(err)) == 404)
           ? "the sandbox container disappeared"
           : "the sandbox could not be followed (dockerd unreachable)";

    return RUNNER_ERR;
}
