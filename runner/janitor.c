/*
 * The janitor: sessions idle past their time (the `sessions` zset, scored
 * last_active + idle_ttl) with no started or running run lose their
 * workspace.  A thread per runner, every --janitor-interval seconds;
 * several runners may run it at once: a session is marked `expiring` by
 * one of them, atomically (ngx_sandbox_mcp_module/common/scripts/janitor_begin.lua), its volume
 * (and, in compose mode, its network) removed, then it is `expired` and
 * its keys live `retention` more (janitor_end.lua).  A runner that dies
 * between the two leaves the mark; after RUNNER_JANITOR_STALE_MS another
 * one takes it over.
 *
 * Each pass also takes the bytes of ended runs whose keys have expired off
 * their tenants' usage (budget:expiry: docs/architecture.md, "Tenant
 * budgets"), so a tenant's budget of Redis bytes frees up with the keys.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runner.h"


/*
 * A fork's copier (runner/fork.c: labelled smcp.fork) that mounts the
 * volume goes first: one a runner left when it died mid-copy would hold
 * the volume forever; one copying now copies a workspace that is going
 * (its run fails, saying the copy failed).
 */
static void
runner_janitor_copiers(const char *volume)
{
    size_t       i;
    json_t      *list, *ct;
    const char  *id;
    char         err[RUNNER_ERRLEN];

    if (runner_docker_filtered("/containers/json?all=1&", "volume", volume,
                               &list, err, sizeof(err))
        != 200)
    {
        return;                     /* the removal says what holds it */
    }

    json_array_foreach(list, i, ct) {
        id = json_string_value(json_object_get(ct, "Id"));

        if (id && runner_docker_valid_id(id)
            && json_object_get(json_object_get(ct, "Labels"), "smcp.fork"))
        {
            runner_log("info", NULL, "janitor: removing the fork copier "
                       "%.12s of the volume %s", id, volume);
            (void) runner_docker_remove(id, err, sizeof(err));
        }
    }

    json_decref(list);
}


/* 1 when the session was expired by this call */
static int
runner_janitor_session(runner_store_t *st, const char *id)
{
    long  st_docker;
    char  status[RUNNER_ERRLEN], err[RUNNER_ERRLEN], name[128];

    if (runner_store_janitor_begin(st, id, status, sizeof(status))
        != RUNNER_OK)
    {
        runner_log("error", NULL, "janitor: session %s: %s", id, status);
        return 0;
    }

    if (strcmp(status, "ok") != 0 && strcmp(status, "orphan") != 0) {
        return 0;                   /* not due, busy, taken, expired */
    }

    /* its first run's pooled sandbox's, or its own */
    if (runner_store_session_get(st, id, "volume", name, sizeof(name))
        != RUNNER_OK || strncmp(name, RUNNER_POOL_PREFIX,
                                sizeof(RUNNER_POOL_PREFIX) - 1) != 0
        || !runner_docker_ref_ok(name, err, sizeof(err)))
    {
        snprintf(name, sizeof(name), "smcp-%.*s", SMCP_ID_LEN, id);
    }

    /* a sandbox held for the session's next run uses the volume, and so
     * may a fork's copier */
    runner_hold_sweep(0, id);
    runner_janitor_copiers(name);

    st_docker = runner_docker_volume_remove(name, err, sizeof(err));

    /* 404: gone already; 409: a container still uses it.  Either way
     * but gone, the mark stays ours: the next pass tries again */
    if (st_docker != 204 && st_docker != 404) {
        runner_log(st_docker == 409 ? "info" : "error", NULL,
                   "janitor: session %s: the volume %s %s", id, name,
                   st_docker == 409 ? "is still in use" : err);
        return 0;
    }

    if (runner_config->egress_container[0]) {
        snprintf(name, sizeof(name), "smcp-net-%.*s", SMCP_ID_LEN, id);
        runner_backend->net_drop(name, runner_config->egress_container,
                                       err, sizeof(err));
    }

    if (runner_store_janitor_end(st, id, status, sizeof(status)) != RUNNER_OK
        || strcmp(status, "ok") != 0)
    {
        runner_log("error", NULL, "janitor: session %s: %s", id, status);
        return 0;
    }

    runner_log("info", NULL, "janitor: session %s expired: idle, its "
               "workspace removed", id);

    return 1;
}


/* one pass over the sessions due: RUNNER_AGAIN when there may be more */
static int
runner_janitor_pass(runner_store_t *st)
{
    int   i, n, rc;
    char  ids[RUNNER_JANITOR_BATCH][SMCP_ID_LEN + 1];

    rc = runner_store_sessions_due(st, smcp_now_ms(), ids,
                                   RUNNER_JANITOR_BATCH, &n);

    if (rc == RUNNER_ERR) {
        return RUNNER_ERR;
    }

    for (i = 0; i < n && !atomic_load(&runner_stop); i++) {
        runner_janitor_session(st, ids[i]);
    }

    return rc;
}


void *
runner_janitor_thread(void *arg)
{
    int              rc, rc2;
    runner_store_t  *st;
    int64_t          now, next;
    char             err[RUNNER_ERRLEN];

    st = NULL;
    next = smcp_now_ms() + RUNNER_CHECK_MS;

    while (!atomic_load(&runner_stop)) {
        now = smcp_now_ms();

        if (now < next) {
            usleep(RUNNER_IDLE_MS * 1000);
            continue;
        }

        next = now + runner_config->janitor_interval * 1000LL;

        if (runner_store_lost(st)) {
            runner_store_close(st);

            /* the main loop says when Redis is away */
            st = runner_store_connect(0, err, sizeof(err));

            if (st == NULL) {
                continue;
            }
        }

        rc = runner_janitor_pass(st);

        if (rc != RUNNER_ERR) {
            rc2 = runner_store_budget_release(st, now);

            if (rc2 == RUNNER_ERR) {
                runner_log("error", NULL, "janitor: budgets: %s",
                           runner_store_error(st));
            }

            if (rc == RUNNER_AGAIN || rc2 == RUNNER_AGAIN) {
                next = now + RUNNER_CHECK_MS;   /* a full batch: more due */
            }
        }
    }

    runner_store_close(st);

    return NULL;
}
