/*
 * A session's held sandbox (--session-hold SECONDS): once a run of a
 * pooled image ends, a sandbox for its session's next run is made on the
 * session's workspace the way the pool makes one (pool.c: its OpenCode
 * server warmed, nothing of a run in it) and held that long.  The
 * session's next run takes it (runner_hold_take), whichever runner of
 * the store claims it: a follow-up starts on a warm server, where a
 * message sent to it reaches it.  It is a new container: nothing the
 * agent of the run before left running survives.
 *
 * It is created before the run's outcome is stored, so that the
 * session's next run, which may start the moment it is, finds it; and
 * started only after (runner_hold_start): what the agent left in the
 * workspace may run in it (a plugin, a hook), and by then the run's
 * token is refused.  Its run reaches it on its stdin, as a pooled one's
 * (runner_pool_assign): nothing the agent left in the workspace is read
 * as one.  Only sessions whose workspace is a pooled sandbox's volume
 * get one (their next run looks for it).
 *
 * Held ones are found by their labels (smcp.hold=<session>,
 * smcp.hold.runner, smcp.hold.tenant, smcp.hold.image, smcp.hold.until,
 * and smcp.handover: one without it waits for its run another way, and
 * is not taken), not in a list in memory: another runner, or this one
 * restarted, finds them.  A taker claims one by renaming it from its own
 * name to its run's (a second claim, or a removal, by that name then
 * finds none); every removal is by name, so a taken one is never
 * removed as held.  The session's next run removes any it does not take
 * (another image, past its time, stopped): one workspace, one sandbox.
 * The pool thread removes this runner's past their time, or whose
 * workspace outgrew --workspace-limit or --workspace-inodes while held
 * (nothing else watches it then), and all of them at stop or drain; the
 * runner at start those its name left; the janitor a session's before
 * its volume.  Only the container goes, never the volume: that is the
 * session's.
 *
 * At most --concurrency held at once by a runner, and no more of a
 * tenant's on it than the run's max_running: at a cap, the oldest goes
 * for the newest (its session's follow-up is the likeliest).
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runner.h"


#define RUNNER_HOLD_PREFIX      "smcp-hold-"
#define RUNNER_HOLD_MARGIN_MS   5000    /* one this close to its end is
                                           not taken */
#define RUNNER_HOLD_WS_MS       10000   /* a held workspace measured */


/* a held one's container goes, by its name (not its volume: the
 * session's) */
static void
runner_hold_remove(const char *name, const char *why)
{
    long  st;
    char  err[RUNNER_ERRLEN];

    st = runner_docker_remove(name, err, sizeof(err));

    if (st == 404) {
        return;                     /* taken, or gone meanwhile */
    }

    if (st != 204) {
        runner_log("error", NULL, "hold: %s", err);
        return;
    }

    runner_log("info", NULL, "hold: sandbox %s removed (%s)", name, why);
}


/* a listed container that is a held one of this store, not yet taken:
 * its name without Docker's "/" (its labels into *labels), else NULL */
static const char *
runner_hold_name(json_t *ct, json_t **labels)
{
    const char  *id, *name, *store;
    char         err[RUNNER_ERRLEN];

    id = json_string_value(json_object_get(ct, "Id"));
    name = json_string_value(json_array_get(json_object_get(ct, "Names"),
                                            0));
    *labels = json_object_get(ct, "Labels");
    store = json_string_value(json_object_get(*labels, "smcp.store"));

    if (id == NULL || name == NULL || store == NULL
        || !runner_docker_valid_id(id)
        || strcmp(store, runner_store_id()) != 0
        || strncmp(name, "/" RUNNER_HOLD_PREFIX,
                   sizeof(RUNNER_HOLD_PREFIX)) != 0
        || !runner_docker_ref_ok(name + 1, err, sizeof(err)))
    {
        return NULL;
    }

    return name + 1;
}


/* a held one's label */
static const char *
runner_hold_label(json_t *labels, const char *key)
{
    return json_string_value(json_object_get(labels, key));
}


/* the time a held one's labels give it (0: none) */
static int64_t
runner_hold_until(json_t *labels)
{
    const char  *v;

    v = runner_hold_label(labels, "smcp.hold.until");

    return v ? atoll(v) : 0;
}


/*
 * Room for another held one of tenant (its max_running, 0: no limit of
 * its own): at --concurrency held by this runner, or at max_running of
 * the tenant's on it, the oldest of those goes (the newest session's
 * follow-up is the likeliest).  0: no room (the list failed).
 */
static int
runner_hold_room(const char *tenant, long long max_running)
{
    int          mine, theirs, of_tenant;
    size_t       i, oldest;
    int64_t      until, min;
    json_t      *list, *ct, *labels;
    const char  *t, *name, *victim;
    char         err[RUNNER_ERRLEN], label[192];

    snprintf(label, sizeof(label), "smcp.hold.runner=%s", runner_config->name);

    if (runner_docker_list(label, &list, err, sizeof(err)) != 200) {
        runner_log("error", NULL, "hold: %s", err);
        return 0;
    }

    /* each turn removes one from the list: it ends */
    for ( ;; ) {
        mine = 0;
        theirs = 0;

        json_array_foreach(list, i, ct) {
            name = runner_hold_name(ct, &labels);

            if (name == NULL) {
                continue;
            }

            mine++;
            t = runner_hold_label(labels, "smcp.hold.tenant");
            theirs += (t && strcmp(t, tenant) == 0);
        }

        if (mine < runner_config->concurrency
            && (max_running < 1 || theirs < max_running))
        {
            break;
        }

        /* the oldest, of the tenant's when it is the tenant at its cap */
        of_tenant = mine < runner_config->concurrency;
        victim = NULL;
        min = INT64_MAX;
        oldest = 0;

        json_array_foreach(list, i, ct) {
            name = runner_hold_name(ct, &labels);
            t = runner_hold_label(labels, "smcp.hold.tenant");
            until = runner_hold_until(labels);

            if (name && until < min
                && (!of_tenant || (t && strcmp(t, tenant) == 0)))
            {
                min = until;
                victim = name;
                oldest = i;
            }
        }

        if (victim == NULL) {
            break;
        }

        runner_hold_remove(victim, "a newer session's takes its place");
        json_array_remove(list, oldest);
    }

    json_decref(list);

    return 1;
}


/*
 * After a run of session (on volume, of image) ended, before its outcome
 * is stored: its session's next run gets a held sandbox, created (not
 * started: runner_hold_start), when holds are on, image has a pool, the
 * volume is a pooled sandbox's and there is room.  RUNNER_OK with sb;
 * nothing fails the run.
 */
int
runner_hold_make(const char *session, const char *volume, const char *image,
    const char *tenant, long long max_running, runner_sandbox_t *sb)
{
    char     hex[17], until[32], err[RUNNER_ERRLEN];
    json_t  *labels;

    if (runner_config->session_hold == 0 || !runner_pool_has(image)
        || strncmp(volume, RUNNER_POOL_PREFIX,
                   sizeof(RUNNER_POOL_PREFIX) - 1) != 0
        || atomic_load(&runner_stop) || atomic_load(&runner_drain)
        || !runner_hold_room(tenant, max_running)
        || smcp_random_hex(hex, 8) != SMCP_OK)
    {
        return RUNNER_AGAIN;
    }

    snprintf(sb->name, sizeof(sb->name), RUNNER_HOLD_PREFIX "%s", hex);
    sb->net[0] = '\0';
    snprintf(until, sizeof(until), "%lld", (long long) (smcp_now_ms()
             + (int64_t) runner_config->session_hold * 1000));
    labels = json_pack("{s:s, s:s, s:s, s:s, s:s}", "smcp.hold", session,
                       "smcp.hold.runner", runner_config->name,
                       "smcp.hold.tenant", tenant, "smcp.hold.image", image,
                       "smcp.hold.until", until);

    if (runner_pool_sandbox(image, volume, labels, "SMCP_HOLD=1", 0, sb, err,
                            sizeof(err))
        != RUNNER_OK)
    {
        runner_log("error", NULL, "hold: session %s: %s", session, err);
        return RUNNER_ERR;
    }

    return RUNNER_OK;
}


/* once the run's outcome is stored (stored 0: it was not, the runner
 * stops: it goes), the held one starts */
void
runner_hold_start(const runner_sandbox_t *sb, int stored)
{
    long  st;
    char  err[RUNNER_ERRLEN];

    if (!stored) {
        runner_hold_remove(sb->name, "its run's outcome was not stored");
        return;
    }

    st = runner_docker_start(sb->name, err, sizeof(err));

    /* 404: a run of the session took it, or removed it, unstarted */
    if (st != 204 && st != 304) {
        if (st != 404) {
            runner_log("error", NULL, "hold: %s", err);
            runner_hold_remove(sb->name, "it could not be started");
        }

        return;
    }

    runner_log("info", NULL, "hold: sandbox %.12s (%s) started, %d s",
               sb->id, sb->name, runner_config->session_hold);
}


/*
 * The held one of session for a run (run_id) of image (NULL: none is
 * taken): RUNNER_OK with sb, renamed smcp-<run id>, the caller's now
 * (runner_pool_assign gives it the run); RUNNER_AGAIN: none.  Every
 * other held one of the session goes (one workspace, one sandbox).
 */
int
runner_hold_take(const char *session, const char *image, const char *run_id,
    runner_sandbox_t *sb)
{
    int          rc;
    long         st;
    size_t       i;
    json_t      *list, *ct, *labels;
    const char  *name, *img, *state, *by, *how;
    char         err[RUNNER_ERRLEN], label[128], to[64];

    snprintf(label, sizeof(label), "smcp.hold=%s", session);

    if (runner_docker_list(label, &list, err, sizeof(err)) != 200) {
        runner_log("error", NULL, "hold: %s", err);
        return RUNNER_AGAIN;
    }

    rc = RUNNER_AGAIN;
    snprintf(to, sizeof(to), "smcp-%s", run_id);

    json_array_foreach(list, i, ct) {
        name = runner_hold_name(ct, &labels);

        if (name == NULL) {
            continue;
        }

        img = runner_hold_label(labels, "smcp.hold.image");
        by = runner_hold_label(labels, "smcp.hold.runner");
        how = runner_hold_label(labels, "smcp.handover");
        state = json_string_value(json_object_get(ct, "State"));

        if (rc == RUNNER_AGAIN && image && img && strcmp(img, image) == 0
            && by && runner_docker_ref_ok(by, err, sizeof(err))
            && how && strcmp(how, RUNNER_POOL_HANDOVER) == 0
            && state && (strcmp(state, "running") == 0
                         || strcmp(state, "created") == 0)
            && runner_hold_until(labels)
               > smcp_now_ms() + RUNNER_HOLD_MARGIN_MS)
        {
            /* the claim: a second taker's rename, or a sweep's removal,
             * by the old name finds none; one not started yet (its run's
             * outcome just stored: its maker starts it by the old name,
             * and finds none) is started here */
            st = runner_docker_rename(name, to, err, sizeof(err));

            if (st == 204 && strcmp(state, "created") == 0) {
                st = runner_docker_start(to, err, sizeof(err));
                st = (st == 204 || st == 304) ? 204 : st;

                if (st != 204) {
                    runner_log("error", NULL, "hold: %s", err);
                    runner_hold_remove(to, "it could not be started");
                    continue;
                }
            }

            if (st == 204) {
                snprintf(sb->id, sizeof(sb->id), "%s",
                         json_string_value(json_object_get(ct, "Id")));
                snprintf(sb->name, sizeof(sb->name), "%s", to);
                sb->net[0] = '\0';

                if (runner_config->egress_container[0]) {
                    snprintf(sb->net, sizeof(sb->net), "smcp-pool-%s", by);
                }

                rc = RUNNER_OK;
                continue;
            }

            if (st == 404) {
                continue;           /* another took it, or removed it */
            }
        }

        runner_hold_remove(name, "its session's run did not take it");
    }

    json_decref(list);

    return rc;
}


/* 1: the held one's workspace outgrew the limits a run has */
static int
runner_hold_outgrown(json_t *ct)
{
    size_t          i;
    json_t         *m;
    const char     *vol;
    char            mp[512], err[RUNNER_ERRLEN];
    runner_usage_t  u;

    vol = NULL;

    json_array_foreach(json_object_get(ct, "Mounts"), i, m) {
        if (strcmp(json_string_value(json_object_get(m, "Destination"))
                   ?: "", RUNNER_POOL_DIR) == 0)
        {
            vol = json_string_value(json_object_get(m, "Name"));
        }
    }

    if (vol == NULL || !runner_docker_ref_ok(vol, err, sizeof(err))
        || runner_docker_volume_mountpoint(vol, mp, sizeof(mp), err,
                                           sizeof(err)) != 200
        || runner_workspace_usage(mp, runner_config->workspace_limit,
                                  runner_config->workspace_inodes, &u, err,
                                  sizeof(err)) != RUNNER_OK)
    {
        return 0;                   /* not measured: the run's watchdog
                                       says so once */
    }

    return u.too_deep || u.bytes > runner_config->workspace_limit
           || u.inodes > runner_config->workspace_inodes;
}


/*
 * The held ones this runner made: those past their time, or whose
 * workspace outgrew a run's limits (measured every RUNNER_HOLD_WS_MS),
 * go; all (all: 1); the session's own (session not NULL, any runner's)
 * likewise.  A taken one was renamed and is not among them.  Called by
 * the pool thread, the janitor's and at start.
 */
void
runner_hold_sweep(int all, const char *session)
{
    int             measure;
    size_t          i;
    int64_t         now;
    json_t         *list, *ct, *labels;
    const char     *name;
    char            err[RUNNER_ERRLEN], label[192];
    static int64_t  next_measure;       /* the pool thread's */

    now = smcp_now_ms();
    measure = 0;

    if (!all && session == NULL && now >= next_measure) {
        next_measure = now + RUNNER_HOLD_WS_MS;
        measure = 1;
    }

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
        name = runner_hold_name(ct, &labels);

        if (name == NULL) {
            continue;
        }

        if (all || session) {
            runner_hold_remove(name, session ? "its session expired"
                                             : "the runner stops or starts");

        } else if (runner_hold_until(labels) <= now) {
            runner_hold_remove(name, "its time is up");

        } else if (measure && runner_hold_outgrown(ct)) {
            runner_hold_remove(name, "its workspace outgrew "
                               "--workspace-limit or --workspace-inodes");
        }
    }

    json_decref(list);
}
