/*
 * A pick run (opencode_pick_attempt; run_pick.lua queued it): no
 * sandbox.  It opens the pull request of an attempt whose branch
 * opencode/<attempt's run id> its sandbox pushed when it ended: the run
 * is marked running (the egress proxy takes its token only then), its
 * outcome is the attempt's result and diff (the pull request's body, and
 * what its page shows), and the pull request, once open, is the
 * attempt's too (store_pick.c).  A pull request that could not be opened
 * undoes the pick, for another try.  A pick run whose runner went away is
 * taken up again like any run (reattach): it opens the pull request
 * again, and pr.c finds the one its predecessor opened if it did.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runner.h"


/* a pick run's attempt and group, from its hash h (0: not a pick run, or
 * malformed ids) */
static int
runner_pick_note(runner_run_t *run, json_t *h)
{
    const char  *of, *group;

    of = json_string_value(json_object_get(h, "pr_of"));
    group = json_string_value(json_object_get(h, "group"));

    if (of == NULL || group == NULL
        || !smcp_valid_id(of, strlen(of), SMCP_RUN_ID_PREFIX)
        || !smcp_valid_id(group, strlen(group), SMCP_RUN_ID_PREFIX))
    {
        return 0;
    }

    snprintf(run->pick_of, sizeof(run->pick_of), "%s", of);
    snprintf(run->pick_group, sizeof(run->pick_group), "%s", group);

    return 1;
}


/* the pick run's attempt, group, result and diff: RUNNER_OK, or
 * RUNNER_ERR (err says why).  h: the run hash. */
static int
runner_pick_load(runner_run_t *run, json_t *h, char *err, size_t errlen)
{
    if (!runner_pick_note(run, h)) {
        snprintf(err, errlen, "the pick's attempt or group is malformed");
        return RUNNER_ERR;
    }

    if (runner_store_pick_load(run->store, run->pick_of, &run->out.result,
                               &run->out.diff, &run->out.diff_len)
        != RUNNER_OK)
    {
        snprintf(err, errlen, "%s", runner_store_error(run->store));
        return RUNNER_ERR;
    }

    /* what the attempt's sandbox did: its branch pushed */
    run->out.pr_step = RUNNER_PR_PUSHED;
    run->image[0] = '\0';
    run->container[0] = '\0';

    return RUNNER_OK;
}


/*
 * RUNNER_OK: a pick run, running (run->pick_of set); RUNNER_AGAIN:
 * cancelled meanwhile; RUNNER_ERR: err says why.  h: the run hash.
 */
int
runner_pick_start(runner_run_t *run, json_t *h, char *err, size_t errlen)
{
    int   rc;
    char  status[RUNNER_ERRLEN];

    if (runner_pick_load(run, h, err, errlen) != RUNNER_OK) {
        return RUNNER_ERR;
    }

    rc = runner_store_set_running(run->store, run->id, "", run->deadline_ms,
                                  status, sizeof(status));

    if (rc == RUNNER_ERR) {
        snprintf(err, errlen, "the run could not be marked running: %.200s",
                 status);
        return RUNNER_ERR;
    }

    if (rc != RUNNER_OK) {
        runner_log("info", run->id, "not started: the run is %s", status);
        return RUNNER_AGAIN;
    }

    runner_log("info", run->id, "opening the pull request of attempt %s",
               run->pick_of);

    return RUNNER_OK;
}


/*
 * A run taken up again after its runner went away (reattach), when it is
 * a pick run: RUNNER_OK (run->pick_of set: its pull request is tried
 * again); RUNNER_AGAIN: not a pick run; RUNNER_ERR: err says why.
 */
int
runner_pick_resume(runner_run_t *run, char *err, size_t errlen)
{
    int      rc;
    json_t  *h;

    h = runner_store_run(run->store, run->id);
    if (h == NULL) {
        snprintf(err, errlen, "%s", runner_store_error(run->store));
        return RUNNER_ERR;
    }

    if (json_object_get(h, "pr_of") == NULL) {
        json_decref(h);
        return RUNNER_AGAIN;
    }

    rc = runner_pick_load(run, h, err, errlen);
    json_decref(h);

    if (rc == RUNNER_OK) {
        runner_log("info", run->id, "taken up again: opening the pull "
                   "request of attempt %s", run->pick_of);
    }

    return rc;
}


/*
 * 1 when the pick's pull request is opened already, run->pr saying it (a
 * pick run taken up again after its runner went away, or finished again
 * after its outcome could not be stored): that is its end, whatever came
 * since (a cancel); opened is final (pick_done.lua).  Else 0.
 */
int
runner_pick_opened(runner_run_t *run)
{
    char  by[SMCP_ID_LEN + 1], status[16];

    if (run->pick_of[0] == '\0'
        || runner_store_hget(run->store, run->pick_of, "pr_pick_run", by,
                             sizeof(by))
           != RUNNER_OK
        || strcmp(by, run->id) != 0
        || runner_store_hget(run->store, run->pick_of, "pr_status", status,
                             sizeof(status))
           != RUNNER_OK
        || strcmp(status, "opened") != 0
        || runner_store_hget(run->store, run->pick_of, "pr_url", run->pr.url,
                             sizeof(run->pr.url))
           != RUNNER_OK
        || runner_store_hget(run->store, run->pick_of, "pr_number",
                             run->pr.number, sizeof(run->pr.number))
           != RUNNER_OK)
    {
        return 0;
    }

    run->pr.status = "opened";
    run->pr_done = 1;

    runner_log("info", run->id, "the pull request of attempt %s is opened "
               "already: %s", run->pick_of, run->pr.url);

    return 1;
}


/* the pull request tried (run->pr): the attempt's, or the pick undone */
void
runner_pick_done(runner_run_t *run)
{
    if (runner_store_pick_done(run->store, run->id, run->pick_of,
                               run->pick_group, &run->pr)
        != RUNNER_OK)
    {
        runner_log("error", run->id, "the attempt %s could not be told of "
                   "its pull request: %s", run->pick_of,
                   runner_store_error(run->store));
    }
}


/*
 * A run that fails before its pull request was tried (its start refused,
 * a budget, its runner gone meanwhile): when it is a pick run, the pick
 * is undone, for another try (pick_done.lua: only while the pick is its)
 */
void
runner_pick_abandon(runner_run_t *run)
{
    json_t  *h;

    if (run->pick_of[0] == '\0') {
        h = runner_store_run(run->store, run->id);

        if (h == NULL || !runner_pick_note(run, h)) {
            json_decref(h);
            return;
        }

        json_decref(h);
    }

    memset(&run->pr, 0, sizeof(run->pr));
    runner_pick_done(run);
}
