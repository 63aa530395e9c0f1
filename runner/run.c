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

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "runner.h"
#include "smcp_jwt.h"


/* queue entries of live runs are touched this often, and at least three
 * times within --claim-idle: a live run is never taken over */
#define RUNNER_TOUCH_MS      10000
#define RUNNER_GRACE_S       300     /* token outlives the deadline a bit */
#define RUNNER_FOLLOW_TRIES  5


static int64_t
runner_run_now_ms(void)
{
    struct timeval  tv;

    gettimeofday(&tv, NULL);

    return (int64_t) tv.tv_sec * 1000 + tv.tv_usec / 1000;
}


typedef struct {
    runner_run_t  *run;
    int64_t        last_touch;
    int64_t        last_check;
    int            skip;            /* lines at last_ts still to skip */
    int            killed;
} runner_follow_state_t;


static int
runner_run_line(void *data, int stream, const char *ts, const char *line,
    size_t len)
{
    runner_follow_state_t  *st = data;
    runner_run_t           *run = st->run;
    json_t                 *ev;
    const char             *type, *step;
    char                    marker[128], *copy;
    int                     cmp;

    /* re-attached: Docker's `since` is inclusive; drop what is stored */
    if (run->last_ts[0]) {
        cmp = strcmp(ts, run->last_ts);

        if (cmp < 0 || (cmp == 0 && st->skip > 0)) {
            if (cmp == 0) {
                st->skip--;
            }
            return RUNNER_OK;
        }
    }

    copy = strndup(line, len);
    if (copy == NULL) {
        return RUNNER_ERR;
    }

    smcp_utf8_sanitize(copy, len);

    ev = (stream == 1) ? json_loadb(copy, len, 0, NULL) : NULL;
    type = "log";

    if (json_is_object(ev)) {
        runner_outcome_event(&run->out, ev);

        type = "agent";
        step = NULL;

        if (strcmp(json_string_value(json_object_get(ev, "type")) ?: "",
                   "smcp") == 0)
        {
            type = "lifecycle";
            step = json_string_value(json_object_get(ev, "step"));
        }

        if (step && strcmp(step, "diff") == 0) {
            /* the diff goes to run:{id}:diff with the outcome; the event
             * stream gets a marker */
            snprintf(marker, sizeof(marker),
                     "{\"type\":\"smcp\",\"step\":\"diff\",\"bytes\":%zu}",
                     run->out.diff_len);
            free(copy);
            copy = strdup(marker);
            len = strlen(marker);
        }
    }

    json_decref(ev);

    if (copy && runner_store_event(run->redis, run->id, type, copy, len, ts)
                != RUNNER_OK)
    {
        runner_log("error", run->id, "storing an event failed: %s",
                   run->redis->errstr);
        free(copy);
        return RUNNER_ERR;
    }

    free(copy);

    return RUNNER_OK;
}


static int
runner_run_tick(void *data)
{
    runner_follow_state_t  *st = data;
    runner_run_t           *run = st->run;
    int64_t                 now;
    char                    v[16], err[RUNNER_ERRLEN];

    if (runner_stop) {
        /* detach: the container goes on; a restart re-attaches */
        return RUNNER_ERR;
    }

    now = runner_run_now_ms();

    if (now - st->last_touch >= RUNNER_TOUCH_MS
        || now - st->last_touch >= runner_config.claim_idle_ms / 3)
    {
        runner_store_touch(run->redis, run->stream_id);
        st->last_touch = now;
    }

    if (now - st->last_check < 1000 || st->killed) {
        return RUNNER_OK;
    }

    st->last_check = now;

    if (runner_store_hget(run->redis, run->id, "cancel_requested", v,
                          sizeof(v)) == RUNNER_OK
        && strcmp(v, "1") == 0)
    {
        run->cancelled = 1;

    } else if (run->deadline_ms && now >= run->deadline_ms) {
        run->deadline_hit = 1;

    } else {
        return RUNNER_OK;
    }

    runner_log("info", run->id, "%s: stopping the sandbox",
               run->cancelled ? "cancel requested" : "deadline reached");

    if (runner_docker_kill(run->container, err, sizeof(err)) != RUNNER_OK) {
        runner_log("error", run->id, "%s", err);
        return RUNNER_OK;
    }

    st->killed = 1;

    return RUNNER_OK;
}


/* the network a session's sandboxes run on */
static void
runner_run_network(runner_run_t *run, char *buf, size_t size)
{
    if (runner_config.egress_container[0]) {
        snprintf(buf, size, "smcp-net-%s", run->session);

    } else {
        snprintf(buf, size, "%s", runner_config.network);
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

    RUNNER_ENV("SMCP_EGRESS_URL", runner_config.egress_url);
    RUNNER_ENV("SMCP_RUN_TOKEN", token);
    RUNNER_ENV("SMCP_RUN_ID", run->id);
    RUNNER_ENV("SMCP_MODEL", model);
    RUNNER_ENV("SMCP_REPOSITORY", repo);
    RUNNER_ENV("SMCP_BRANCH", branch);
    RUNNER_ENV("SMCP_GIT_HOST", runner_config.git_host);
    RUNNER_ENV("SMCP_SESSION", oc_session);
    RUNNER_ENV("SMCP_TITLE", json_string_value(json_object_get(h, "title")));

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
        "Image", runner_config.image,
        "User", "1000:1000",
        "WorkingDir", "/workspace",
        "Env", env,
        "Labels", "smcp.run", run->id, "smcp.session", run->session,
                  "smcp.runner", runner_config.name,
                  "smcp.store", runner_config.store,
        "HostConfig",
            "NetworkMode", net,
            "Dns", runner_config.dns[0]
                   ? json_pack("[s]", runner_config.dns) : json_array(),
            "DnsOptions", "timeout:1", "attempts:1",
            "Init", 1,
            "Memory", (json_int_t) runner_config.memory,
            "MemorySwap", (json_int_t) runner_config.memory,
            "NanoCpus", (json_int_t) runner_config.nano_cpus,
            "PidsLimit", (json_int_t) runner_config.pids,
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
    char         msg[512];

    status = "completed";
    error = NULL;

    if (run->cancelled) {
        status = "cancelled";
        error = "cancelled";

    } else if (run->deadline_hit) {
        status = "failed";
        error = "deadline exceeded: the run took longer than its "
                "timeoutSeconds and was stopped";

    } else if (why) {
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

    if (run->out.oc_session[0] && run->session[0]) {
        char         key[160];
        redisReply  *r;

        snprintf(key, sizeof(key), SMCP_KEY_SESSION, runner_config.prefix,
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
            runner_release_failed = 1;
        }
    }

    if (runner_config.egress_container[0] && run->session[0]) {
        runner_run_network(run, net, sizeof(net));
        runner_docker_session_net_drop(net, runner_config.egress_container,
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

        if (runner_stop) {
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
        timeout = 3600;
    }

    now = time(NULL);
    run->deadline_ms = runner_run_now_ms() + timeout * 1000;

    /* the sandbox's only credential: good for this run, while it lives */
    claims = json_pack("{s:s, s:s, s:s, s:I, s:I}", "sub", tenant,
                       "scope", SMCP_SCOPE_EGRESS, "run", run->id,
                       "iat", (json_int_t) now,
                       "exp", (json_int_t) (now + timeout + RUNNER_GRACE_S));

    if (claims == NULL
        || smcp_jwt_sign(runner_config.secret, runner_config.secret_len,
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

    if (runner_config.egress_container[0]) {
        char  net[128];

        runner_run_network(run, net, sizeof(net));

        if (runner_docker_session_net(net, session,
                                      runner_config.egress_container,
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
    snprintf(key, sizeof(key), SMCP_KEY_SESSION, runner_config.prefix,
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


/* a re-attached run: the outcome so far, from the stored events */
static void
runner_run_replay(runner_run_t *run)
{
    char         key[160];
    size_t       i, j;
    redisReply  *r, *f;
    json_t      *ev;

    snprintf(key, sizeof(key), SMCP_KEY_RUN_EVENTS, runner_config.prefix,
             run->id);

    r = redisCommand(run->redis, "XRANGE %s - +", key);
    if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
        if (r) {
            freeReplyObject(r);
        }
        return;
    }

    for (i = 0; i < r->elements; i++) {
        f = r->element[i]->element[1];

        for (j = 0; j + 1 < f->elements; j += 2) {
            if (strcmp(f->element[j]->str, "data") == 0) {
                ev = json_loadb(f->element[j + 1]->str,
                                f->element[j + 1]->len, 0, NULL);
                if (ev) {
                    runner_outcome_event(&run->out, ev);
                    json_decref(ev);
                }
            }
        }
    }

    freeReplyObject(r);
}


static void
runner_run_follow(runner_run_t *run)
{
    int                     tries, exit_code, running;
    char                    err[RUNNER_ERRLEN], since[64], *dot;
    runner_follow_state_t   st;

    memset(&st, 0, sizeof(st));
    st.run = run;
    st.last_touch = runner_run_now_ms();

    for (tries = 0; tries < RUNNER_FOLLOW_TRIES; tries++) {

        since[0] = '\0';

        if (run->last_ts[0]) {
            /* RFC 3339 → unix seconds.nanoseconds for `since` */
            struct tm  tm;
            long       ns;

            memset(&tm, 0, sizeof(tm));
            ns = 0;

            if (strptime(run->last_ts, "%Y-%m-%dT%H:%M:%S", &tm)) {
                dot = strchr(run->last_ts, '.');
                if (dot) {
                    char  frac[10] = "000000000";
                    size_t n = strspn(dot + 1, "0123456789");

                    memcpy(frac, dot + 1, n < 9 ? n : 9);
                    ns = atol(frac);
                }

                snprintf(since, sizeof(since), "%lld.%09ld",
                         (long long) timegm(&tm), ns);
            }

            st.skip = run->last_ts_count;
        }

        if (runner_docker_follow(run->container, since[0] ? since : NULL,
                                 runner_run_line, runner_run_tick, &st,
                                 err, sizeof(err))
            == RUNNER_OK)
        {
            break;
        }

        if (runner_stop) {
            return;
        }

        runner_log("error", run->id, "%s; retrying", err);
        sleep(1 << tries);

        /* resume after the last stored line, on a fresh connection if
         * Redis was the trouble */
        if (run->redis->err) {
            redisFree(run->redis);
            run->redis = runner_store_connect(err, sizeof(err));

            if (run->redis == NULL) {
                runner_log("error", run->id, "%s", err);
                run->state = RUNNER_RUN_RETRY;
                return;
            }
        }

        runner_store_last_log_ts(run->redis, run);
    }

    if (runner_stop) {
        return;
    }

    if (runner_docker_wait(run->container, &exit_code, err, sizeof(err))
        != RUNNER_OK)
    {
        running = 0;
        runner_docker_running(run->container, &running, err, sizeof(err));

        /* if dockerd comes back, the container must not live on */
        runner_run_release(run, 1);
        runner_run_conclude(run, -1, running == -1
                            ? "the sandbox container disappeared"
                            : "the sandbox could not be followed (dockerd "
                              "unreachable)");
        return;
    }

    runner_run_release(run, 0);
    runner_run_conclude(run, exit_code, run->out.clone_failed
                                        ? run->out.error : NULL);
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
    snprintf(label, sizeof(label), "smcp.store=%s", runner_config.store);

    runner_release_failed = 0;

    list = runner_docker_list(label, err, sizeof(err));
    if (list == NULL) {
        runner_log("error", NULL, "reconcile: %s", err);
        runner_release_failed = 1;
        return;
    }

    json_array_foreach(list, i, ct) {
        id = json_string_value(json_object_get(ct, "Id"));
        labels = json_object_get(ct, "Labels");
        run_id = json_string_value(json_object_get(labels, "smcp.run"));

        if (id == NULL || run_id == NULL
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
                runner_release_failed = 1;
            }
        }
    }

    json_decref(list);
}


void *
runner_run_thread(void *arg)
{
    runner_run_t  *run = arg;
    char           err[RUNNER_ERRLEN], status[64];
    int            rc;

    run->redis = runner_store_connect(err, sizeof(err));
    if (run->redis == NULL) {
        runner_log("error", run->id, "%s", err);
        run->state = RUNNER_RUN_RETRY;
        return NULL;
    }

    if (run->reattach) {
        runner_store_hget(run->redis, run->id, "container_id",
                          run->container, sizeof(run->container));
        runner_store_hget(run->redis, run->id, "session", run->session,
                          sizeof(run->session));

        /* the deadline goes on: it was stored when the run started */
        {
            char  v[32];

            if (runner_store_hget(run->redis, run->id, "deadline", v,
                                  sizeof(v)) == RUNNER_OK)
            {
                run->deadline_ms = atoll(v);
            }
        }
        runner_store_last_log_ts(run->redis, run);
        runner_run_replay(run);

        if (runner_config.egress_container[0] && run->session[0]) {
            /* an nginx container recreated meanwhile joins again */
            char  net[128];

            runner_run_network(run, net, sizeof(net));
            runner_docker_session_net(net, run->session,
                                      runner_config.egress_container,
                                      err, sizeof(err));
        }

        runner_log("info", run->id, "re-attached to container %.12s after "
                   "%s", run->container,
                   run->last_ts[0] ? run->last_ts : "(nothing stored)");

    } else {
        rc = runner_store_claim(run->redis, run->id, status, sizeof(status),
                                err, sizeof(err));

        if (rc == RUNNER_AGAIN && strcmp(status, "wait") == 0) {
            /* an earlier run of the session is still going */
            run->state = RUNNER_RUN_WAIT;
            goto done;
        }

        if (rc != RUNNER_OK) {
            if (rc == RUNNER_ERR) {
                runner_log("error", run->id, "claim: %s", status);
                run->state = RUNNER_RUN_RETRY;
                goto done;
            }

            if (strcmp(status, "claimed") == 0) {
                /* another live runner is starting it: not ours to ack */
                runner_log("info", run->id, "claimed by another runner");
                goto done;
            }

            /* cancelled before it started, finished, or gone */
            runner_log("info", run->id, "skipped: %s", status);
            runner_store_ack(run->redis, run->stream_id);
            goto done;
        }

        rc = runner_run_start(run, err, sizeof(err));

        if (rc == RUNNER_ERR) {
            runner_log("error", run->id, "%s", err);

            if (runner_run_conclude(run, -1, err) == RUNNER_OK) {
                runner_store_ack(run->redis, run->stream_id);
            }

            goto done;
        }

        if (rc == RUNNER_AGAIN) {
            runner_store_ack(run->redis, run->stream_id);
            goto done;
        }
    }

    runner_run_follow(run);

    if (!runner_stop && run->state == RUNNER_RUN_ACTIVE && run->redis) {
        runner_store_ack(run->redis, run->stream_id);
    }

done:

    runner_outcome_free(&run->out);

    if (run->redis) {
        redisFree(run->redis);
        run->redis = NULL;
    }

    if (run->state == RUNNER_RUN_ACTIVE) {
        run->state = RUNNER_RUN_DONE;
    }

    return NULL;
}
