/*
 * A session's held sandbox (--session-hold SECONDS): once a run of a
 * pooled image ends, a sandbox for its session's next run is made on the
 * session's workspace the way the pool makes one (pool.c: its OpenCode
 * server warmed, nothing of a run in it) and held that long.  The
 * session's next run takes it (runner_hold_take), whichever runner of
 * the store claims it: a follow-up starts on a warm server, where a
 * message sent to it reaches it.  It is a new container: nothing the
 * agent of the run before left running survives.  It is made before the
 * run's outcome is stored, so the next run of the session finds it.
 *
 * Held ones are found by their labels (smcp.hold=<session>,
 * smcp.hold.runner, smcp.hold.tenant, smcp.hold.image, smcp.hold.until),
 * not in a list in memory: another runner, or this one restarted, finds
 * them.  A run of the session that does not take it (another image, past
 * its time, stopped) removes it first: one workspace, one sandbox.  The
 * pool thread removes its runner's held ones past their time, and all of
 * them at stop or drain (and at start those of a runner of its name); the
 * janitor a session's before its volume.  A taken one is renamed for its
 * run (smcp-<run id>): none of that touches it.  Only its container goes,
 * never the volume: that is the session's.
 *
 * At most --concurrency held at once by a runner, and no more of a
 * tenant's than the run's max_running.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runner.h"


#define RUNNER_HOLD_PREFIX   "smcp-hold-"
#define RUNNER_HOLD_MARGIN_MS  5000     /* one this close to its end is
                                           not taken: its runner may be
                                           removing it */


/* a held one's container goes (not its volume: the session's) */
static void
runner_hold_remove(const char *id, const char *why)
{
    long  st;
    char  err[RUNNER_ERRLEN];

    st = runner_docker_remove(id, err, sizeof(err));

    if (st != 204 && st != 404) {
        runner_log("error", NULL, "hold: %s", err);
        return;
    }

    runner_log("info", NULL, "hold: sandbox %.12s removed (%s)", id, why);
}


/* a listed container that is a held one of this store, not yet taken:
 * its id (its name, without Docker's "/", into *name), else NULL */
static const char *
runner_hold_id(json_t *ct, json_t **labels, const char **name)
{
    const char  *id, *store;

    id = json_string_value(json_object_get(ct, "Id"));
    *name = json_string_value(json_array_get(json_object_get(ct, "Names"),
                                             0));
    *labels = json_object_get(ct, "Labels");
    store = json_string_value(json_object_get(*labels, "smcp.store"));

    if (id == NULL || *name == NULL || store == NULL
        || !runner_docker_valid_id(id)
        || strcmp(store, runner_store_id()) != 0
        || strncmp(*name, "/" RUNNER_HOLD_PREFIX,
                   sizeof(RUNNER_HOLD_PREFIX)) != 0)
    {
        return NULL;
    }

    (*name)++;

    return id;
}


/* the time a held one's labels give it (0: none) */
static int64_t
runner_hold_until(json_t *labels)
{
    const char  *v;

    v = json_string_value(json_object_get(labels, "smcp.hold.until"));

    return v ? atoll(v) : 0;
}


/* 1: another held one may be made for tenant (its max_running, 0: no
 * limit of its own) */
static int
runner_hold_room(const char *tenant, long long max_running)
{
    int          mine, theirs;
    size_t       i;
    json_t      *list, *ct, *labels;
    const char  *t, *name;
    char         err[RUNNER_ERRLEN], label[192];

    snprintf(label, sizeof(label), "smcp.hold.runner=%s", runner_config->name);

    if (runner_docker_list(label, &list, err, sizeof(err)) != 200) {
        runner_log("error", NULL, "hold: %s", err);
        return 0;
    }

    mine = 0;
    theirs = 0;

    json_array_foreach(list, i, ct) {
        if (runner_hold_id(ct, &labels, &name) == NULL) {
            continue;
        }

        mine++;
        t = json_string_value(json_object_get(labels, "smcp.hold.tenant"));
        theirs += (t && strcmp(t, tenant) == 0);
    }

    json_decref(list);

    return mine < runner_config->concurrency
           && (max_running < 1 || theirs < max_running);
}


/*
 * After a run of session (on volume, of image) ended, before its outcome
 * is stored: its session's next run gets a held sandbox, when holds are
 * on, image has a pool, and there is room.  Nothing fails the run.
 */
void
runner_hold_make(const char *session, const char *volume, const char *image,
    const char *tenant, long long max_running)
{
    char              hex[17], until[32], err[RUNNER_ERRLEN];
    json_t           *labels;
    runner_sandbox_t  sb;

    if (runner_config->session_hold == 0 || !runner_pool_has(image)
        || volume[0] == '\0' || atomic_load(&runner_stop)
        || atomic_load(&runner_drain) || !runner_hold_room(tenant, max_running)
        || smcp_random_hex(hex, 8) != SMCP_OK)
    {
        return;
    }

    snprintf(sb.name, sizeof(sb.name), RUNNER_HOLD_PREFIX "%s", hex);
    snprintf(until, sizeof(until), "%lld", (long long) (smcp_now_ms()
             + (int64_t) runner_config->session_hold * 1000));

    labels = json_pack("{s:s, s:s, s:s, s:s, s:s}", "smcp.hold", session,
                       "smcp.hold.runner", runner_config->name,
                       "smcp.hold.tenant", tenant, "smcp.hold.image", image,
                       "smcp.hold.until", until);

    if (runner_pool_sandbox(image, volume, labels, "SMCP_HOLD=1", &sb, err,
                            sizeof(err))
        != RUNNER_OK)
    {
        runner_log("error", NULL, "hold: session %s: %s", session, err);
        return;
    }

    runner_log("info", NULL, "hold: sandbox %.12s for session %s, %d s",
               sb.id, session, runner_config->session_hold);
}


/*
 * The held sandbox of session for a run of image: RUNNER_OK with sb (now
 * the caller's: runner_pool_assign gives it the run); RUNNER_AGAIN: none.
 * Any other held one of the session goes (one workspace, one sandbox).
 */
int
runner_hold_take(const char *session, const char *image,
    runner_sandbox_t *sb)
{
    int          rc, running;
    size_t       i;
    json_t      *list, *ct, *labels;
    const char  *id, *img, *name;
    char         err[RUNNER_ERRLEN], label[128];

    snprintf(label, sizeof(label), "smcp.hold=%s", session);

    if (runner_docker_list(label, &list, err, sizeof(err)) != 200) {
        runner_log("error", NULL, "hold: %s", err);
        return RUNNER_AGAIN;
    }

    rc = RUNNER_AGAIN;

    json_array_foreach(list, i, ct) {
        id = runner_hold_id(ct, &labels, &name);

        if (id == NULL || strlen(id) >= sizeof(sb->id)
            || strlen(name) >= sizeof(sb->name))
        {
            continue;
        }

        img = json_string_value(json_object_get(labels, "smcp.hold.image"));

        if (rc == RUNNER_AGAIN && img && strcmp(img, image) == 0
            && runner_hold_until(labels)
               > smcp_now_ms() + RUNNER_HOLD_MARGIN_MS
            && runner_docker_running(id, &running, err, sizeof(err)) == 200
            && running)
        {
            snprintf(sb->id, sizeof(sb->id), "%s", id);
            snprintf(sb->name, sizeof(sb->name), "%s", name);
            rc = RUNNER_OK;
            continue;
        }

        runner_hold_remove(id, "its session's run did not take it");
    }

    json_decref(list);

    return rc;
}


/*
 * The held ones this runner made: those past their time (all: 1) go, the
 * session's own (session not NULL) likewise; a taken one was renamed and
 * is not among them.
 */
void
runner_hold_sweep(int all, const char *session)
{
    size_t       i;
    json_t      *list, *ct, *labels;
    const char  *id, *name;
    char         err[RUNNER_ERRLEN], label[192];

    if (session) {
        snprintf(label, sizeof(label), "smcp.hold=%s", session);

    } else {
        snprintf(label, sizeof(label), "smcp.hold.runner=%s",
                 runner_config->name);
    }

    if (runner_docker_list(label, &list, err, sizeof(err)) != 200) {
        runner_log("error", NULL, "hold: %s", err);
        return;
    }

    json_array_foreach(list, i, ct) {
        id = runner_hold_id(ct, &labels, &name);

        if (id && (all || session
                   || runner_hold_until(labels) <= smcp_now_ms()))
        {
            runner_hold_remove(id, session ? "its session expired"
                                   : all ? "the runner stops"
                                   : "its time is up");
        }
    }

    json_decref(list);
}
