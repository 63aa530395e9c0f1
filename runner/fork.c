/*
 * A fork's workspace (opencode_run_task's forkSessionId; run_create.lua).
 * A run of a forked session (its hash says `fork_of`, not yet
 * `forked_at`) first copies the forked session's workspace into its own
 * volume, smcp-<session>: in a container of the run's image that does
 * nothing but `cp -a` (symlinks copied as symlinks, none followed), the
 * forked volume read-only on /from, the new one on /workspace, the
 * sandbox's user, limits and lock-down, no network.  The forked session
 * stays as it was; its runs wait while the copy is made (its `forks`
 * hold, claim.lua), which this pushes on as it goes (fork_hold.lua, the
 * run's claim kept fresh too: no other runner takes the run meanwhile)
 * and takes out at the end, made or not.  A sandbox held for the forked
 * session's next run (hold.c: OpenCode's server on its workspace, its
 * warm-up writing there) goes first, so that nothing writes there while
 * it is copied.  Once the copy is whole the session's hash says
 * `forked_at`; a copy cut short (the runner died) is made again into an
 * empty volume, if the hold still stands: a hold run out means the
 * forked session may have gone on, and the run fails, saying so.
 */

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "runner.h"


/*
 * The forked workspace at mp within a run's limits (--workspace-limit,
 * --workspace-inodes): the copy, as big as it, is then bounded too.
 * Nothing writes to it meanwhile (the forked session's runs are held
 * back, its held sandbox gone).
 */
static int
runner_fork_measure(const char *forked, const char *mp, char *err,
    size_t errlen)
{
    int             rc, i;
    runner_usage_t  u;

    /* one walk at a time in the process: a watchdog's may be going */
    for (i = 0; i < RUNNER_FORK_MEASURE_TRIES; i++) {
        rc = runner_workspace_usage(mp, runner_config->workspace_limit,
                                    runner_config->workspace_inodes, &u,
                                    err, errlen);
        if (rc != RUNNER_AGAIN) {
            break;
        }

        usleep(RUNNER_IDLE_MS * 1000);
    }

    if (rc == RUNNER_AGAIN) {
        snprintf(err, errlen, "the workspace of session %s could not be "
                 "measured before its copy (the runner is busy measuring "
                 "others): fork it again", forked);
    }

    if (rc != RUNNER_OK) {
        return RUNNER_ERR;
    }

    if (u.too_deep || u.bytes > runner_config->workspace_limit
        || u.inodes > runner_config->workspace_inodes)
    {
        snprintf(err, errlen, "the workspace of session %s is over a "
                 "run's limits (%lld bytes, %lld files and directories "
                 "at most: --workspace-limit, --workspace-inodes%s): too "
                 "big to fork", forked,
                 (long long) runner_config->workspace_limit,
                 (long long) runner_config->workspace_inodes,
                 u.too_deep ? "; it nests too deep" : "");
        return RUNNER_ERR;
    }

    return RUNNER_OK;
}


/* the forked session's workspace: the volume its hash names (a pooled
 * sandbox's), else smcp-<session>, within a run's limits; RUNNER_ERR
 * when there is none left, or it is too big */
static int
runner_fork_source(runner_run_t *run, const char *forked, char *vol,
    size_t size, char *err, size_t errlen)
{
    long  st;
    char  v[128], mp[512];

    if (runner_store_session_get(run->store, forked, "volume", v, sizeof(v))
        != RUNNER_OK)
    {
        snprintf(err, errlen, "%s", runner_store_error(run->store));
        return RUNNER_ERR;
    }

    if (v[0] == '\0') {
        snprintf(vol, size, "smcp-%s", forked);

    } else if (strncmp(v, RUNNER_POOL_PREFIX, sizeof(RUNNER_POOL_PREFIX) - 1)
               == 0
               && runner_docker_ref_ok(v, err, errlen))
    {
        snprintf(vol, size, "%s", v);

    } else {
        snprintf(err, errlen, "the forked session's volume is malformed");
        return RUNNER_ERR;
    }

    st = runner_docker_volume_mountpoint(vol, mp, sizeof(mp), err, errlen);

    if (st == 404) {
        snprintf(err, errlen, "session %s has no workspace left to fork "
                 "(it expired, or its first run made none)", forked);
        return RUNNER_ERR;
    }

    if (st != 200) {
        return RUNNER_ERR;
    }

    return runner_fork_measure(forked, mp, err, errlen);
}


/* the copier's spec: a sandbox's, with /from and `cp -a` */
static json_t *
runner_fork_spec(runner_run_t *run, const char *from)
{
    char     bind[256];
    json_t  *spec, *labels, *hc;

    labels = json_pack("{s:s, s:s, s:s}", "smcp.runner", runner_config->name,
                       "smcp.fork", run->id, "smcp.session", run->session);
    if (labels == NULL) {
        return NULL;
    }

    spec = runner_sandbox_spec(run->image, json_array(), labels, run->volume,
                               "none");
    if (spec == NULL) {
        return NULL;
    }

    hc = json_object_get(spec, "HostConfig");
    snprintf(bind, sizeof(bind), "%s:/from:ro", from);

    if (hc == NULL
        || json_array_append_new(json_object_get(hc, "Binds"),
                                 json_string(bind))
           != 0
        || json_object_set_new(spec, "Entrypoint",
                               json_pack("[s, s, s, s]", "cp", "-a",
                                         "/from/.", "/workspace/"))
           != 0)
    {
        json_decref(spec);
        return NULL;
    }

    return spec;
}


/* the hold on the forked session's runs pushed on, the run's claim and
 * queue entry kept fresh (fork_hold.lua) */
static int
runner_fork_hold(runner_run_t *run, const char *forked, char *err,
    size_t errlen)
{
    int      rc;
    int64_t  hold;
    char     status[RUNNER_ERRLEN];

    hold = 3 * runner_config->claim_idle_ms;
    hold = hold > RUNNER_FORK_HOLD_MS ? hold : RUNNER_FORK_HOLD_MS;

    (void) runner_store_touch(run->store, run->stream_id);

    rc = runner_store_fork_hold(run->store, forked, run->id, hold, status,
                                sizeof(status));

    if (rc == RUNNER_AGAIN && strcmp(status, "lapsed") == 0) {
        snprintf(err, errlen, "the fork of session %s was not made before "
                 "its hold on that session ran out (its first run failed, "
                 "was cancelled, or waited too long), and the session may "
                 "have gone on since: fork it again", forked);

    } else if (rc != RUNNER_OK) {
        snprintf(err, errlen, "the fork's hold: %s", status);
    }

    return rc == RUNNER_OK ? RUNNER_OK : RUNNER_ERR;
}


/* the copy, in its container (left removed), the hold and the claim kept
 * alive meanwhile: RUNNER_OK when cp said 0 */
static int
runner_fork_cp(runner_run_t *run, const char *forked, const char *from,
    char *err, size_t errlen)
{
    int      code, waited, slice;
    long     st;
    char     name[RUNNER_CONTAINER_SIZE], id[RUNNER_CONTAINER_SIZE];
    char     scratch[RUNNER_ERRLEN];
    json_t  *spec;

    snprintf(name, sizeof(name), "smcp-fork-%s", run->id);
    spec = runner_fork_spec(run, from);
    if (spec == NULL) {
        snprintf(err, errlen, "cannot build the copy's container spec");
        return RUNNER_ERR;
    }

    st = runner_docker_create(spec, name, id, sizeof(id), err, errlen);
    json_decref(spec);

    if (st != 201) {
        return RUNNER_ERR;
    }

    code = -1;
    waited = 0;
    slice = (int) (runner_config->claim_idle_ms / 3000);
    slice = slice < 1 ? 1 : (slice > 20 ? 20 : slice);
    st = runner_docker_start(id, err, errlen);

    if (st == 204 || st == 304) {
        for ( /* void */ ; /* void */ ; waited += slice) {
            st = runner_docker_wait(id, slice, &code, err, errlen);

            if (st != RUNNER_DOCKER_TIMEOUT
                || waited + slice >= RUNNER_FORK_COPY_SECONDS
                || runner_fork_hold(run, forked, err, errlen) != RUNNER_OK)
            {
                break;
            }
        }
    }

    (void) runner_docker_remove(id, scratch, sizeof(scratch));

    if (st == RUNNER_DOCKER_TIMEOUT
        && waited + slice >= RUNNER_FORK_COPY_SECONDS)
    {
        snprintf(err, errlen, "copying the workspace of the forked session "
                 "took longer than %d s", RUNNER_FORK_COPY_SECONDS);
        return RUNNER_ERR;
    }

    if (st == 200 && code != 0) {
        snprintf(err, errlen, "copying the workspace of the forked session "
                 "failed (cp exited %d: a file its owner cannot read?)",
                 code);
        return RUNNER_ERR;
    }

    return st == 200 ? RUNNER_OK : RUNNER_ERR;
}


/*
 * RUNNER_OK: the run's session is a fork whose workspace is now copied
 * (run->volume its own), or no fork to copy; RUNNER_ERR: err says why.
 * Any run of a fork not yet copied tries it (the first one failed: its
 * hold has gone, and so does this one, saying why).
 */
int
runner_fork_copy(runner_run_t *run, char *err, size_t errlen)
{
    int                rc;
    long               st;
    char               forked[SMCP_ID_LEN + 8], done[RUNNER_NUM_MAX];
    char               name[RUNNER_CONTAINER_SIZE], from[128];
    runner_sandbox_t   sb;

    done[0] = '\0';

    if (runner_store_session_get(run->store, run->session, "fork_of", forked,
                                 sizeof(forked))
        != RUNNER_OK
        || (forked[0]
            && runner_store_session_get(run->store, run->session,
                                        "forked_at", done, sizeof(done))
               != RUNNER_OK))
    {
        snprintf(err, errlen, "%s", runner_store_error(run->store));
        return RUNNER_ERR;
    }

    if (forked[0] == '\0' || done[0]) {
        return RUNNER_OK;               /* no fork, or copied already */
    }

    if (!smcp_valid_id(forked, strlen(forked), SMCP_SESSION_ID_PREFIX)) {
        snprintf(err, errlen, "the session's fork_of is malformed");
        return RUNNER_ERR;
    }

    /* the hold still the run's: the forked session has not gone on */
    if (runner_fork_hold(run, forked, err, errlen) != RUNNER_OK) {
        return RUNNER_ERR;
    }

    snprintf(run->volume, sizeof(run->volume), "smcp-%s", run->session);

    /* (image NULL: none taken, every held one of the session goes) */
    (void) runner_hold_take(forked, NULL, run->id, &sb);

    rc = runner_fork_source(run, forked, from, sizeof(from), err, errlen);

    /* measured: the hold and the claim fresh again before the copy */
    if (rc == RUNNER_OK) {
        rc = runner_fork_hold(run, forked, err, errlen);
    }

    if (rc == RUNNER_OK) {
        /* a copy cut short goes (its container, then what it made): the
         * copy is made into an empty volume */
        snprintf(name, sizeof(name), "smcp-fork-%s", run->id);
        (void) runner_docker_remove(name, err, errlen);
        st = runner_docker_volume_remove(run->volume, err, errlen);
        rc = (st == 204 || st == 404) ? RUNNER_OK : RUNNER_ERR;
    }

    if (rc == RUNNER_OK) {
        st = runner_docker_volume_create(run->volume, run->session, err,
                                         errlen);
        rc = (st == 201 || st == 200) ? RUNNER_OK : RUNNER_ERR;
    }

    if (rc == RUNNER_OK) {
        runner_log("info", run->id, "forking session %s: copying its "
                   "workspace", forked);
        rc = runner_fork_cp(run, forked, from, err, errlen);
    }

    /* made or not, the forked session's runs wait no longer */
    if (runner_store_fork_done(run->store, forked, run->session, run->id,
                               rc == RUNNER_OK)
        != RUNNER_OK && rc == RUNNER_OK)
    {
        snprintf(err, errlen, "%s", runner_store_error(run->store));
        return RUNNER_ERR;
    }

    return rc;
}
