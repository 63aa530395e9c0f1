/*
 * A fork's workspace (opencode_run_task's forkSessionId; run_create.lua).
 * The run that starts a forked session (its hash says `fork_of`) first
 * copies the forked session's workspace into its own volume,
 * smcp-<session>: in a container of the run's image that does nothing but
 * `cp -a` (symlinks copied as symlinks, none followed), the forked volume
 * read-only on /from, the new one on /workspace, the sandbox's user,
 * limits and lock-down, no network.  The forked session stays as it was;
 * its runs wait until the copy is made (its `forks` hold, claim.lua),
 * which this takes out, made or not, and a sandbox held for its next run
 * (hold.c: OpenCode's server on its workspace, its warm-up writing) goes
 * first, so that nothing writes there while it is copied.  The session's hash says
 * `forked_at` once the copy is whole: a copy cut short (the runner died)
 * is made again from an empty volume.
 */

#include <stdio.h>
#include <string.h>

#include "runner.h"


/* the forked session's workspace: the volume its hash names (a pooled
 * sandbox's), else smcp-<session>; RUNNER_ERR when there is none left */
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

    return st == 200 ? RUNNER_OK : RUNNER_ERR;
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


/* the copy, in its container (left removed): RUNNER_OK when cp said 0 */
static int
runner_fork_cp(runner_run_t *run, const char *from, char *err, size_t errlen)
{
    int      code;
    long     st;
    char     name[RUNNER_CONTAINER_SIZE], id[RUNNER_CONTAINER_SIZE];
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
    st = runner_docker_start(id, err, errlen);

    if (st == 204 || st == 304) {
        st = runner_docker_wait(id, RUNNER_FORK_COPY_SECONDS, &code, err,
                                errlen);
    }

    (void) runner_docker_remove(id, err, errlen);

    if (st == RUNNER_DOCKER_TIMEOUT) {
        snprintf(err, errlen, "copying the workspace of the forked session "
                 "took longer than %d s", RUNNER_FORK_COPY_SECONDS);
        return RUNNER_ERR;
    }

    if (st != 200 || code != 0) {
        snprintf(err, errlen, "copying the workspace of the forked session "
                 "failed (cp exited %d: a file its owner cannot read?)",
                 code);
        return RUNNER_ERR;
    }

    return RUNNER_OK;
}


/*
 * RUNNER_OK: the run's session is a fork whose workspace is now copied
 * (run->volume its own), or no fork to copy; RUNNER_ERR: err says why.
 */
int
runner_fork_copy(runner_run_t *run, json_t *h, char *err, size_t errlen)
{
    int                rc;
    long               st;
    char               done[RUNNER_NUM_MAX], from[128];
    char               name[RUNNER_CONTAINER_SIZE];
    runner_sandbox_t   sb;
    const char        *forked;

    forked = json_string_value(json_object_get(h, "fork_of"));

    if (forked == NULL || forked[0] == '\0') {
        return RUNNER_OK;
    }

    if (!smcp_valid_id(forked, strlen(forked), SMCP_SESSION_ID_PREFIX)) {
        snprintf(err, errlen, "the run's fork_of is malformed");
        return RUNNER_ERR;
    }

    if (runner_store_session_get(run->store, run->session, "forked_at", done,
                                 sizeof(done))
        != RUNNER_OK)
    {
        snprintf(err, errlen, "%s", runner_store_error(run->store));
        return RUNNER_ERR;
    }

    if (done[0]) {
        return RUNNER_OK;               /* copied by an earlier attempt */
    }

    snprintf(run->volume, sizeof(run->volume), "smcp-%s", run->session);

    /* (image NULL: none taken, every held one of the session goes) */
    (void) runner_hold_take(forked, NULL, run->id, &sb);

    rc = runner_fork_source(run, forked, from, sizeof(from), err, errlen);

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
        rc = runner_fork_cp(run, from, err, errlen);
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
