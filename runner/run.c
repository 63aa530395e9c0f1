/*
 * One run, from claim to outcome, on its own thread.
 *
 *   claim (atomic: still `started`, earlier runs of the session finished)
 *   → session volume → container create → start → `running` (atomic; a
 *   cancel that came first wins and the container goes) → follow the log
 *   into the event stream (follow.c; the watchdog of watchdog.c beside
 *   it) → exit code → outcome (atomic) → remove the container →
 *   acknowledge the queue entry.
 *
 * A runner that stops (SIGTERM) or dies leaves its containers running:
 * the run's queue entry stays unacknowledged, and this runner after a
 * restart, or another one after --claim-idle, re-attaches by following
 * the container's log from the last stored line.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runner.h"
#include "smcp_jwt.h"


static char *runner_run_token(runner_run_t *run, const char *tenant,
    int64_t timeout);


/* the network a session's sandboxes run on */
void
runner_run_network(runner_run_t *run, char *buf, size_t size)
{
    if (runner_config->egress_container[0]) {
        snprintf(buf, size, "smcp-net-%s", run->session);

    } else {
        snprintf(buf, size, "%s", runner_config->network);
    }
}


/*
 * The session's repositories, space-separated (the run hash's
 * `repositories`, a JSON array; its own repository when that is absent):
 * https URLs of printable bytes without spaces, at most
 * RUNNER_SANDBOX_REPOS of them; others left out.
 */
static void
runner_run_repositories(json_t *h, const char *repo, char *buf, size_t size)
{
    size_t       i, len, n;
    json_t      *list, *v;
    const char  *u, *p;

    list = json_loads(json_string_value(json_object_get(h, "repositories"))
                      ?: "", 0, NULL);

    if (!json_is_array(list) || json_array_size(list) == 0) {
        json_decref(list);
        list = json_pack("[s]", repo ? repo : "");
    }

    len = 0;
    buf[0] = '\0';

    json_array_foreach(list, i, v) {
        u = json_string_value(v);

        if (u == NULL || i >= RUNNER_SANDBOX_REPOS
            || strncmp(u, "https://", 8) != 0)
        {
            continue;
        }

        for (p = u; *p > 0x20 && *p < 0x7f; p++) { /* void */ }

        n = strlen(u);

        if (*p || len + n + 2 > size) {
            continue;
        }

        if (len) {
            buf[len++] = ' ';
        }

        memcpy(buf + len, u, n + 1);
        len += n;
    }

    json_decref(list);
}


/* the run's environment in its sandbox: ["NAME=value", ...] */
static json_t *
runner_run_env(runner_run_t *run, json_t *h, const char *token,
    const char *oc_session)
{
    char          buf[RUNNER_SANDBOX_ENV_MAX];
    char          repos[RUNNER_SANDBOX_ENV_MAX - 32];
    json_t       *env;
    const char   *task, *model, *repo, *branch, *create_pr, *v;

    task = json_string_value(json_object_get(h, "task"));
    model = json_string_value(json_object_get(h, "model"));
    repo = json_string_value(json_object_get(h, "repository"));
    branch = json_string_value(json_object_get(h, "branch"));
    create_pr = json_string_value(json_object_get(h, "create_pr"));

    runner_run_repositories(h, repo, repos, sizeof(repos));

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
    RUNNER_ENV("SMCP_AGENT", run->agent);
    /* an agent that keeps the run's spend cap itself (Claude Code) */
    v = json_string_value(json_object_get(h, "max_cost"));
    if (run->agent[0]) {
        RUNNER_ENV("SMCP_MAX_COST_USD", v);
    }
    RUNNER_ENV("SMCP_REPOSITORY", repo);
    v = repos;
    RUNNER_ENV("SMCP_REPOSITORIES", v);
    RUNNER_ENV("SMCP_BRANCH", branch);

    if (create_pr && strcmp(create_pr, "1") == 0 && repo && *repo) {
        RUNNER_ENV("SMCP_CREATE_PR", "1");
        RUNNER_ENV("SMCP_BASE_BRANCH",
                   json_string_value(json_object_get(h, "base_branch")));
    }

    v = runner_config->git_author_name;
    RUNNER_ENV("SMCP_GIT_AUTHOR_NAME", v);
    v = runner_config->git_author_email;
    RUNNER_ENV("SMCP_GIT_AUTHOR_EMAIL", v);
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

    return env;
}


static json_t *
runner_run_spec(runner_run_t *run, json_t *h, const char *token,
    const char *volume, const char *oc_session, const char *image)
{
    char  net[128];

    runner_run_network(run, net, sizeof(net));

    return runner_sandbox_spec(image,
                               runner_run_env(run, h, token, oc_session),
                               json_pack("{s:s, s:s, s:s, s:s}",
                                         "smcp.run", run->id,
                                         "smcp.session", run->session,
                                         "smcp.runner", runner_config->name,
                                         "smcp.store", runner_store_id()),
                               volume, net);
}


/*
 * The pull request of a completed run that asked for one, once (pr.c),
 * with a token of the run, which is still running for the egress proxy;
 * its pr_opened event stored.
 */
static void
runner_run_pr(runner_run_t *run, const runner_diff_t *diff)
{
    char        *token, *ev;
    json_t      *h;
    const char  *tenant;

    if (run->pr_done) {
        return;
    }

    h = runner_store_run(run->store, run->id);
    if (h == NULL) {
        return;                     /* Redis: the finish is tried again */
    }

    run->pr_done = 1;
    token = NULL;

    if (run->out.pr_step == RUNNER_PR_PUSHED) {
        tenant = json_string_value(json_object_get(h, "tenant"));
        token = runner_run_token(run, tenant ? tenant : "",
                                 RUNNER_PR_TIMEOUT_S * 3);
    }

    ev = runner_pr_finish(run, h, token, diff);

    if (ev) {
        (void) runner_run_store(run, "lifecycle", ev, strlen(ev), NULL);
        runner_log("info", run->id, "pull request %s opened",
                   run->pr.number);
        free(ev);
    }

    if (run->pick_of[0]) {
        runner_pick_done(run);
    }

    free(token);
    json_decref(h);
}


/* RUNNER_ERR: the outcome could not be stored (Redis away): try later */
static int
runner_run_finish(runner_run_t *run, int exit_code, const char *why)
{
    int             cancel, opened, rc;
    const char     *status, *error;
    runner_spend_t  spend;
    char            msg[RUNNER_STDERR_TAIL + 128], stopmsg[256];
    char            tail[RUNNER_STDERR_TAIL];
    runner_diff_t   diff;

    status = SMCP_STATUS_COMPLETED;
    error = NULL;

    /* a run that spent past its cap says so, however it ended (its agent
     * may have finished before the watchdog looked) */
    if (runner_store_limits(run->store, run->id, &cancel, &spend)
        == RUNNER_OK)
    {
        runner_run_check_cost(run, &spend, run->out.cost);

    } else {
        cancel = 0;
    }

    /* a pick whose pull request is opened already: that is its end */
    opened = runner_pick_opened(run);

    switch (runner_run_stopped(run, stopmsg, sizeof(stopmsg))) {

    case RUNNER_STOP_CANCEL:
        status = SMCP_STATUS_CANCELLED;
        error = "cancelled";
        break;

    case RUNNER_STOP_DEADLINE:
    case RUNNER_STOP_LIMIT:
        status = SMCP_STATUS_FAILED;
        error = stopmsg;
        break;

    default:
        if (cancel && run->pick_of[0] && !opened) {
            /* a pick run has no watchdog: a cancel asked while it ran is
             * read here, before its pull request is opened */
            status = SMCP_STATUS_CANCELLED;
            error = "cancelled";

        } else if (why) {
            status = SMCP_STATUS_FAILED;
            error = why;

        } else if (exit_code != 0) {
            status = SMCP_STATUS_FAILED;

            if (run->out.error) {
                error = run->out.error;

            } else {
                /* its last words on stderr, when it had any */
                runner_outcome_stderr_text(&run->out, tail, sizeof(tail));
                snprintf(msg, sizeof(msg), "the agent exited with code %d%s%s",
                         exit_code, tail[0] ? ": " : "", tail);
                error = msg;
            }
        }
    }

    if (run->out.oc_session[0] && run->session[0]) {
        runner_store_session_set(run->store, run->session,
                                 "opencode_session", run->out.oc_session);
    }

    if (runner_outcome_diff(run->out.diff, run->out.diff_len, &diff)
        != RUNNER_OK)
    {
        runner_log("error", run->id, "out of memory");
        return RUNNER_ERR;
    }

    runner_budget_diff(run);

    if (strcmp(status, SMCP_STATUS_COMPLETED) == 0) {
        runner_run_pr(run, &diff);

        if (run->pr_cancelled) {
            /* a pick run cancelled right before its POST: the pick is
             * undone (pick_done.lua), the run has no pull request */
            memset(&run->pr, 0, sizeof(run->pr));
            status = SMCP_STATUS_CANCELLED;
            error = "cancelled";

        } else if (run->pr.status && strcmp(run->pr.status, "failed") == 0) {
            status = SMCP_STATUS_FAILED;
            error = run->pr.error;
        }

    } else if (run->pick_of[0]) {
        /* a pick run stopped before its pull request: the pick undone */
        runner_pick_abandon(run);
    }

    rc = runner_store_finish(run->store, run, status, exit_code, error,
                             &diff, &run->pr);
    runner_outcome_diff_free(&diff);

    if (rc != RUNNER_OK) {
        runner_log("error", run->id, "the outcome (%s) could not be stored; "
                   "will retry", status);
        return RUNNER_ERR;
    }

    runner_log("info", run->id, "%s (exit %d)%s%s", status, exit_code,
               error ? ": " : "", error ? error : "");
    runner_metrics_outcome(status);

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
    long  st;
    char  err[RUNNER_ERRLEN], net[128];

    if (run->container[0]) {
        if (kill) {
            (void) runner_backend->kill(run->container, err, sizeof(err));
        }

        st = runner_backend->remove(run->container, err, sizeof(err));

        /* 404: gone already */
        if (st != 204 && st != 404) {
            /* the main loop's reconciliation removes it later */
            runner_log("error", run->id, "%s", err);
            atomic_store(&runner_release_failed, 1);
        }
    }

    if (runner_config->egress_container[0] && run->session[0]) {
        runner_run_network(run, net, sizeof(net));
        runner_backend->net_drop(net, runner_config->egress_container,
                                       err, sizeof(err));
    }
}


/* the outcome, stored come what may: Redis may be away for a while */
static int
runner_run_conclude(runner_run_t *run, int exit_code, const char *why)
{
    int   delay;
    char  err[RUNNER_ERRLEN];

    for (delay = 1; /* void */ ;
         delay = delay < RUNNER_BACKOFF_MAX_S ? delay * 2 : delay)
    {
        if (run->store && runner_run_finish(run, exit_code, why) == RUNNER_OK)
        {
            return RUNNER_OK;
        }

        if (atomic_load(&runner_stop)) {
            return RUNNER_ERR;
        }

        sleep(delay);

        if (runner_store_lost(run->store)) {
            runner_store_close(run->store);
            run->store = runner_store_connect(1, err, sizeof(err));

            if (run->store == NULL) {
                runner_log("error", run->id, "%s", err);
            }
        }
    }
}


/* the sandbox's only credential: good for this run, while it lives */
static char *
runner_run_token(runner_run_t *run, const char *tenant, int64_t timeout)
{
    time_t   now;
    json_t  *claims;

    now = time(NULL);

    claims = json_pack("{s:s, s:s, s:s, s:I, s:I}", "sub", tenant,
                       "scope", SMCP_SCOPE_EGRESS, "run", run->id,
                       "iat", (json_int_t) now,
                       "exp", (json_int_t) (now + timeout
                                            + RUNNER_TOKEN_GRACE_S));

    return runner_run_sign(claims);
}


/* a token of claims (taken: released here), signed with the first key;
 * malloc'd, NULL when it failed (claims NULL too) */
char *
runner_run_sign(json_t *claims)
{
    char  *token;

    if (claims == NULL
        || smcp_jwt_sign(&runner_config->keys.key[0], claims, &token)
           != SMCP_OK)
    {
        token = NULL;
    }

    json_decref(claims);

    return token;
}


/* the session's own network (--egress-container), the egress peer on it
 * as "egress"; the runner's relay (--egress-relay) checked first */
static int
runner_run_join(runner_run_t *run, char *err, size_t errlen)
{
    char  net[128];

    if (runner_config->egress_relay[0]
        && runner_relay_ensure(err, errlen) != RUNNER_OK)
    {
        return RUNNER_ERR;
    }

    runner_run_network(run, net, sizeof(net));

    return runner_backend->net(net, run->session,
                               runner_config->egress_container, err, errlen);
}


/* the session's volume and (compose) network */
static int
runner_run_session(runner_run_t *run, const char *volume, char *err,
    size_t errlen)
{
    long  st;

    st = runner_docker_volume_create(volume, run->session, err, errlen);

    /* 201: made; 200: it was there (an earlier run of the session) */
    if (st != 201 && st != 200) {
        return RUNNER_ERR;
    }

    if (runner_config->egress_container[0]) {
        return runner_run_join(run, err, errlen);
    }

    return RUNNER_OK;
}


/*
 * This run's sandbox, running, left by a runner that died between its
 * start and `running` (we hold the claim now): RUNNER_OK with
 * run->container set.  Its log holds every line of the run (none was
 * stored: lines are followed from `running` on), so following it from the
 * start loses nothing and repeats nothing, and the agent's work so far
 * (its model calls, its files) is kept.  One that is not running (made
 * and never started, or ended unobserved) is not adopted.
 */
static int
runner_run_adopt(runner_run_t *run, char *err, size_t errlen)
{
    int          rc, running;
    size_t       i;
    json_t      *list, *ct, *labels;
    const char  *id, *store;
    char         label[128];

    snprintf(label, sizeof(label), "smcp.run=%s", run->id);

    if (runner_backend->list(label, &list, err, errlen) != 200) {
        return RUNNER_ERR;
    }

    rc = RUNNER_AGAIN;

    json_array_foreach(list, i, ct) {
        id = json_string_value(json_object_get(ct, "Id"));
        labels = json_object_get(ct, "Labels");
        store = json_string_value(json_object_get(labels, "smcp.store"));

        /* only this deployment's: another store's run is not ours */
        if (id == NULL || store == NULL || !runner_backend->valid_id(id)
            || strcmp(store, runner_store_id()) != 0
            || strlen(id) >= sizeof(run->container))
        {
            continue;
        }

        if (runner_backend->running(id, &running, err, errlen) == 200
            && running)
        {
            snprintf(run->container, sizeof(run->container), "%s", id);
            rc = RUNNER_OK;
        }

        break;
    }

    json_decref(list);

    return rc;
}


/* the container, made and started: RUNNER_OK with run->container set */
static int
runner_run_container(runner_run_t *run, json_t *spec, char *err,
    size_t errlen)
{
    long  st;
    char  name[96];

    snprintf(name, sizeof(name), "smcp-%s", run->id);

    st = runner_backend->create(spec, name, run->container,
                              sizeof(run->container), err, errlen);

    if (st == 409) {
        /* the name is taken: a container of this run left by a runner
         * that died while starting it (we hold the claim now); a running
         * one goes on, any other goes and the run starts afresh */
        if (runner_run_adopt(run, err, errlen) == RUNNER_OK) {
            runner_log("info", run->id, "adopted container %.12s, started "
                       "by a runner that died before `running`",
                       run->container);
            return RUNNER_OK;
        }

        run->container[0] = '\0';

        st = runner_backend->remove(name, err, errlen);

        if (st == 204 || st == 404) {
            st = runner_backend->create(spec, name, run->container,
                                      sizeof(run->container), err, errlen);
        }
    }

    if (st != 201) {
        return RUNNER_ERR;
    }

    st = runner_backend->start(run->container, err, errlen);

    /* 304: it was running already */
    return (st == 204 || st == 304) ? RUNNER_OK : RUNNER_ERR;
}


/*
 * The session's workspace into run->volume: the one its hash names (its
 * first run's pooled sandbox's), else smcp-<session>; RUNNER_AGAIN: its
 * hash names none.
 */
static int
runner_run_stored_volume(runner_run_t *run, char *err, size_t errlen)
{
    char  v[sizeof(run->volume)];

    snprintf(run->volume, sizeof(run->volume), "smcp-%s", run->session);

    if (runner_store_session_get(run->store, run->session, "volume", v,
                                 sizeof(v))
        != RUNNER_OK)
    {
        snprintf(err, errlen, "%s", runner_store_error(run->store));
        return RUNNER_ERR;
    }

    if (v[0] == '\0') {
        return RUNNER_AGAIN;
    }

    /* read back from Redis: it goes into Docker API paths */
    if (strncmp(v, RUNNER_POOL_PREFIX, sizeof(RUNNER_POOL_PREFIX) - 1) != 0
        || !runner_docker_ref_ok(v, err, errlen))
    {
        snprintf(err, errlen, "the session's volume is malformed");
        return RUNNER_ERR;
    }

    snprintf(run->volume, sizeof(run->volume), "%s", v);

    return RUNNER_OK;
}


/*
 * The session's workspace (runner_run_stored_volume).  A run that starts
 * a new session on a pooled image takes a pooled sandbox of it, when one
 * is idle: sb, and the session's hash names its volume from now on.  A
 * later run of the session takes its held sandbox (hold.c), when there
 * is one of its image: sb; any other goes.
 */
static int
runner_run_volume(runner_run_t *run, const char *image, runner_sandbox_t *sb,
    char *err, size_t errlen)
{
    int   rc;
    long  st;
    char  mp[512];

    rc = runner_run_stored_volume(run, err, errlen);

    /* a later run of a session on a pooled sandbox's volume: the one
     * held for it, if of its image; any other goes */
    if (rc == RUNNER_OK
        && runner_hold_take(run->session,
                            runner_pool_has(image) ? image : NULL, run->id,
                            sb)
           == RUNNER_OK)
    {
        /* the session's held sandbox, on its volume: the run's now */
        snprintf(run->container, sizeof(run->container), "%s", sb->id);
        run->pooled = 1;
        run->held = 1;
        return RUNNER_OK;
    }

    if (rc != RUNNER_AGAIN) {
        return rc;
    }

    if (!runner_pool_has(image)) {
        return RUNNER_OK;
    }

    /* a session of earlier runs without the pool keeps its workspace */
    st = runner_docker_volume_mountpoint(run->volume, mp, sizeof(mp), err,
                                         errlen);

    if (st != 404 || runner_pool_take(image, sb) != RUNNER_OK) {
        return RUNNER_OK;
    }

    /* its volume named by no session: it goes, volume and all (a session
     * that got the name all the same makes it again, empty) */
    if (runner_store_session_set(run->store, run->session, "volume",
                                 sb->name)
        != RUNNER_OK)
    {
        snprintf(err, errlen, "%s", runner_store_error(run->store));
        runner_pool_drop(sb);
        return RUNNER_ERR;
    }

    /* from now on the run's: it goes as the run's container goes */
    snprintf(run->container, sizeof(run->container), "%s", sb->id);
    run->pooled = 1;
    snprintf(run->volume, sizeof(run->volume), "%s", sb->name);

    return RUNNER_OK;
}


/* the run's sandbox, made and started, or a pooled one given the run:
 * RUNNER_OK with run->container set */
static int
runner_run_sandbox(runner_run_t *run, json_t *h, const char *token,
    const char *image, char *err, size_t errlen)
{
    int               rc;
    json_t           *spec;
    char              oc_session[sizeof(run->out.oc_session)];
    char              net[RUNNER_NET_SIZE];
    runner_sandbox_t  sb;

    /* a forked session's first run: the workspace copied first */
    if (runner_fork_copy(run, err, errlen) != RUNNER_OK
        || runner_run_volume(run, image, &sb, err, errlen) != RUNNER_OK)
    {
        return RUNNER_ERR;
    }

    if (!run->pooled
        && runner_run_session(run, run->volume, err, errlen) != RUNNER_OK)
    {
        return RUNNER_ERR;              /* err says why (volume, network) */
    }

    /* the OpenCode conversation of the session's earlier runs */
    if (runner_store_session_get(run->store, run->session,
                                 "opencode_session", oc_session,
                                 sizeof(oc_session))
        != RUNNER_OK)
    {
        snprintf(err, errlen, "%s", runner_store_error(run->store));
        return RUNNER_ERR;
    }

    /* compose: the session's network made, the pooled one moved onto it
     * (off the pool's) before the run goes into it */
    if (run->pooled && runner_config->egress_container[0]) {
        runner_run_network(run, net, sizeof(net));

        if (runner_run_join(run, err, errlen) != RUNNER_OK
            || runner_pool_move(&sb, net, err, errlen) != RUNNER_OK)
        {
            return RUNNER_ERR;
        }
    }

    if (run->pooled) {
        return runner_pool_assign(&sb, run->id,
                                  runner_run_env(run, h, token, oc_session),
                                  err, errlen);
    }

    spec = runner_run_spec(run, h, token, run->volume, oc_session, image);

    if (spec == NULL) {
        snprintf(err, errlen, "cannot build the container spec");
        return RUNNER_ERR;
    }

    rc = runner_run_container(run, spec, err, errlen);
    json_decref(spec);

    return rc;
}


/*
 * The run's sandbox, running: RUNNER_OK; RUNNER_AGAIN when the run was
 * cancelled meanwhile (its container gone); RUNNER_ERR (err says why).
 */
static int
runner_run_start(runner_run_t *run, char *err, size_t errlen)
{
    int            rc;
    json_t        *h;
    char          *token, status[RUNNER_ERRLEN];
    char           image[sizeof(runner_config->image)];
    const char    *tenant, *session, *agent;
    int64_t        timeout;

    h = runner_store_run(run->store, run->id);
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
    runner_log_tenant(tenant);

    /* a tenant over a budget already: no sandbox */
    if (runner_budget_start(run, h, err, errlen) != RUNNER_OK) {
        json_decref(h);
        return RUNNER_ERR;
    }

    /* the run's own image: one this runner offers, following the
     * contract; an agent other than OpenCode runs in its own */
    agent = json_string_value(json_object_get(h, "agent"));

    if (agent && *agent && strcmp(agent, SMCP_AGENT_DEFAULT) != 0) {
        if (strlen(agent) >= sizeof(run->agent)
            || runner_image_for_agent(agent, image, sizeof(image), err,
                                      errlen)
               != RUNNER_OK)
        {
            if (strlen(agent) >= sizeof(run->agent)) {
                snprintf(err, errlen, "the run names no agent this runner "
                         "knows");
            }

            json_decref(h);
            return RUNNER_ERR;
        }

        snprintf(run->agent, sizeof(run->agent), "%s", agent);

    } else if (runner_image_for_run(json_string_value(json_object_get(h,
                                                                "image")),
                                    image, sizeof(image), err, errlen)
               != RUNNER_OK)
    {
        json_decref(h);
        return RUNNER_ERR;
    }

    if (timeout <= 0) {
        timeout = SMCP_DEFAULT_RUN_TIMEOUT;
    }

    run->deadline_ms = smcp_now_ms() + timeout * 1000;
    snprintf(run->image, sizeof(run->image), "%s", image);
    run->max_running = atoll(json_string_value(json_object_get(h,
                                                   "max_running")) ?: "0");

    /* a pick (opencode_pick_attempt): no sandbox (pick.c) */
    if (json_object_get(h, "pr_of")) {
        rc = runner_pick_start(run, h, err, errlen);
        json_decref(h);
        return rc;
    }

    token = runner_run_token(run, tenant, timeout);
    if (token == NULL) {
        json_decref(h);
        snprintf(err, errlen, "cannot sign the run token");
        return RUNNER_ERR;
    }

    rc = runner_run_sandbox(run, h, token, image, err, errlen);

    free(token);
    json_decref(h);

    if (rc != RUNNER_OK) {
        runner_run_release(run, 0);
        return RUNNER_ERR;
    }

#ifdef RUNNER_TEST_HOOKS
    runner_test_hold_running(run);
#endif

    rc = runner_store_set_running(run->store, run->id, run->container,
                                  run->deadline_ms, status, sizeof(status));

    if (rc != RUNNER_OK) {
        runner_run_release(run, 1);

        if (rc == RUNNER_ERR) {
            snprintf(err, errlen, "the run could not be marked running: %.200s",
                     status);
            return RUNNER_ERR;
        }

        /* cancelled while the container was starting */
        runner_log("info", run->id, "not started: the run is %s", status);
        return RUNNER_AGAIN;
    }

    runner_log("info", run->id, "running in container %.12s%s",
               run->container, run->held ? " (held for its session)"
               : run->pooled ? " (pooled)" : "");

    return RUNNER_OK;
}

/*
 * At start: containers of runs that ended (or vanished from Redis) are
 * removed: left behind by a runner that died between the outcome and the
 * cleanup, or while dockerd was away.
 */
void
runner_run_reconcile(runner_store_t *st)
{
    long         rc;
    size_t       i;
    json_t      *list, *ct, *labels;
    const char  *id, *run_id;
    char         status[RUNNER_NUM_MAX], err[RUNNER_ERRLEN], label[400];

    /* only this deployment's containers: another store's runs are not
     * ours to judge */
    snprintf(label, sizeof(label), "smcp.store=%s", runner_store_id());

    atomic_store(&runner_release_failed, 0);

    if (runner_backend->list(label, &list, err, sizeof(err)) != 200) {
        runner_log("error", NULL, "reconcile: %s", err);
        atomic_store(&runner_release_failed, 1);
        return;
    }

    json_array_foreach(list, i, ct) {
        id = json_string_value(json_object_get(ct, "Id"));
        labels = json_object_get(ct, "Labels");
        run_id = json_string_value(json_object_get(labels, "smcp.run"));

        if (run_id == NULL && (json_object_get(labels, "smcp.pool")
                               || json_object_get(labels, "smcp.hold")))
        {
            /* a pooled or held sandbox: renamed smcp-<run id> when a run
             * took it */
            run_id = json_string_value(json_array_get(
                                     json_object_get(ct, "Names"), 0));
            run_id = (run_id && strncmp(run_id, "/smcp-", 6) == 0)
                     ? run_id + 6 : NULL;
        }

        if (id == NULL || run_id == NULL
            || !runner_backend->valid_id(id)
            || !smcp_valid_id(run_id, strlen(run_id), SMCP_RUN_ID_PREFIX)
            || runner_store_hget(st, run_id, "status", status, sizeof(status))
               != RUNNER_OK)
        {
            continue;
        }

        if (status[0] == '\0' || strcmp(status, SMCP_STATUS_COMPLETED) == 0
            || strcmp(status, SMCP_STATUS_FAILED) == 0
            || strcmp(status, SMCP_STATUS_CANCELLED) == 0)
        {
            runner_log("info", run_id, "removing the container of an ended "
                       "run (%.12s)", id);
            (void) runner_backend->kill(id, err, sizeof(err));

            rc = runner_backend->remove(id, err, sizeof(err));

            if (rc != 204 && rc != 404) {
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
    int        rc;
    char       v[RUNNER_NUM_MAX];
    long long  attempts;

    /* a pick run has no container: its pull request is tried again */
    rc = runner_pick_resume(run, err, errlen);

    if (rc != RUNNER_AGAIN) {
        if (rc == RUNNER_OK
            && runner_store_attempts(run->store, run->id, 1, &attempts)
               == RUNNER_OK
            && runner_run_crashed(run, attempts, err, errlen))
        {
            return RUNNER_ERR;
        }

        return rc;
    }

    runner_store_hget(run->store, run->id, "container_id", run->container,
                      sizeof(run->container));
    runner_store_hget(run->store, run->id, "session", run->session,
                      sizeof(run->session));

    /* they go into Docker API paths */
    if (!runner_backend->valid_id(run->container)) {
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

    if (runner_store_attempts(run->store, run->id, 1, &attempts)
        == RUNNER_OK
        && runner_run_crashed(run, attempts, err, errlen))
    {
        return RUNNER_ERR;
    }

    if (runner_run_stored_volume(run, err, errlen) == RUNNER_ERR) {
        return RUNNER_ERR;
    }

    /* the deadline goes on: it was stored when the run started */
    if (runner_store_hget(run->store, run->id, "deadline", v, sizeof(v))
        == RUNNER_OK)
    {
        run->deadline_ms = atoll(v);
    }

    (void) runner_budget_resume(run);

    if (runner_run_stored_state(run) != RUNNER_OK) {
        snprintf(err, errlen, "%s", runner_store_error(run->store));
        return RUNNER_ERR;
    }

    if (runner_config->egress_container[0]) {
        /* an nginx container recreated meanwhile joins again */
        (void) runner_run_join(run, err, errlen);
    }

    runner_log("info", run->id, "re-attached to container %.12s after %s",
               run->container,
               run->last_ts[0] ? run->last_ts : "(nothing stored)");

    return RUNNER_OK;
}


/* whether the run's claim names another process of this runner's --name
 * (claimed_by is "name/pid/random": config.c) */
static int
runner_run_predecessor(runner_run_t *run)
{
    size_t  n;
    char    by[sizeof(runner_config->instance)];

    if (runner_store_hget(run->store, run->id, "claimed_by", by, sizeof(by))
        != RUNNER_OK)
    {
        return 0;
    }

    n = strlen(runner_config->name);

    return strncmp(by, runner_config->name, n) == 0 && by[n] == '/'
           && strcmp(by, runner_config->instance) != 0;
}


/* claims a queued run and starts its sandbox: RUNNER_OK when it runs;
 * otherwise the run thread is done (state and queue entry seen to) */
static int
runner_run_begin(runner_run_t *run)
{
    char       err[RUNNER_ERRLEN], status[RUNNER_ERRLEN];
    int        rc;
    int64_t    started;
    long long  attempts;

    /* the host's floor: the run stays queued, saying why */
    if (runner_floor_check(err, sizeof(err)) == RUNNER_AGAIN) {
        if (runner_store_waiting(run->store, run->id, err) != RUNNER_OK) {
            runner_log("error", run->id, "%s",
                       runner_store_error(run->store));
        }

        atomic_store(&run->state, RUNNER_RUN_WAIT);
        return RUNNER_ERR;
    }

    rc = runner_store_claim(run->store, run->id, status, sizeof(status));

    if (rc == RUNNER_AGAIN
        && (strcmp(status, "wait") == 0 || strcmp(status, "limit") == 0
            || strcmp(status, "unlisted") == 0
            || strcmp(status, "forking") == 0))
    {
        /* an earlier run of the session is still going, a fork of it is
         * being copied, or the tenant has its runs running: its turn
         * comes */
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
            if (runner_run_predecessor(run)) {
                /* a process of our name, not this one: the one we
                 * replace, dead while starting it; its claim goes stale
                 * after --claim-idle, and the run is ours then */
                runner_log("info", run->id, "claimed by an earlier runner "
                           "of this name: waiting for its claim to go stale");
                atomic_store(&run->state, RUNNER_RUN_WAIT);
                return RUNNER_ERR;
            }

            /* another live runner is starting it: not ours to ack */
            runner_log("info", run->id, "claimed by another runner");
            return RUNNER_ERR;
        }

        /* cancelled before it started, finished, or gone */
        runner_log("info", run->id, "skipped: %s", status);
        runner_store_ack(run->store, run->stream_id);
        return RUNNER_ERR;
    }

    if (runner_store_attempts(run->store, run->id, 0, &attempts) == RUNNER_OK
        && runner_run_crashed(run, attempts, err, sizeof(err)))
    {
        rc = RUNNER_ERR;

    } else {
        started = smcp_now_ms();
        rc = runner_run_start(run, err, sizeof(err));

        if (rc == RUNNER_OK) {
            runner_metrics_started(smcp_now_ms() - started);
        }
    }

    if (rc == RUNNER_ERR) {
        runner_log("error", run->id, "%s", err);

        /* a pick run failing before its pull request: the pick undone */
        runner_pick_abandon(run);

        if (runner_run_conclude(run, -1, err) == RUNNER_OK) {
            runner_store_ack(run->store, run->stream_id);
        }

        return RUNNER_ERR;
    }

    if (rc == RUNNER_AGAIN) {
        runner_store_ack(run->store, run->stream_id);
        return RUNNER_ERR;
    }

    return RUNNER_OK;
}


void *
runner_run_thread(void *arg)
{
    runner_run_t      *run = arg;
    char               err[RUNNER_ERRLEN];
    const char        *why;
    int                rc, exit_code, held, stored;
    runner_sandbox_t   hold;

    run->store = runner_store_connect(1, err, sizeof(err));
    if (run->store == NULL) {
        runner_log("error", run->id, "%s", err);
        atomic_store(&run->state, RUNNER_RUN_RETRY);
        return NULL;
    }

    if (run->reattach) {
        if (runner_run_reattach(run, err, sizeof(err)) != RUNNER_OK) {
            runner_log("error", run->id, "%s", err);
            runner_run_release(run, 1);
            runner_pick_abandon(run);

            if (runner_run_conclude(run, -1, err) == RUNNER_OK) {
                runner_store_ack(run->store, run->stream_id);
            }

            goto done;
        }

    } else if (runner_run_begin(run) != RUNNER_OK) {
        goto done;
    }

    why = NULL;
    exit_code = -1;

    if (run->pick_of[0]) {
        /* a pick: nothing runs, its pull request is its end */
        rc = RUNNER_OK;
        exit_code = 0;

    } else {
        runner_run_watch_start(run);
        rc = runner_run_follow(run, &exit_code, &why);
        runner_run_watch_end(run);
    }

    if (rc == RUNNER_AGAIN) {
        /* detached cleanly: the container goes on, and this take does not
         * count as a crash */
        runner_store_attempts(run->store, run->id, -1, NULL);
        goto done;
    }

    /* if dockerd comes back, a lost sandbox must not live on (a pick has
     * none, nor a network of its own) */
    if (run->pick_of[0] == '\0') {
        runner_run_release(run, rc == RUNNER_ERR);
    }

    /* the session's next run finds a warm sandbox held for it: made now,
     * started once the outcome is stored (hold.c) */
    held = rc == RUNNER_OK && run->image[0] && run->agent[0] == '\0'
           && runner_hold_make(run->session, run->volume, run->image,
                               run->tenant, run->max_running, &hold)
              == RUNNER_OK;

    stored = runner_run_conclude(run, exit_code,
                                 rc == RUNNER_ERR ? why
                                 : run->out.clone_failed ? run->out.error
                                 : NULL) == RUNNER_OK;

    if (held) {
        runner_hold_start(&hold, stored);
    }

    if (stored && !atomic_load(&runner_stop)) {
        runner_store_ack(run->store, run->stream_id);
    }

done:

    runner_outcome_free(&run->out);

    runner_store_close(run->store);
    run->store = NULL;

    if (atomic_load(&run->state) == RUNNER_RUN_ACTIVE) {
        atomic_store(&run->state, RUNNER_RUN_DONE);
    }

    return NULL;
}
