/*
 * The janitor: sessions idle past their time (the `sessions` zset, scored
 * last_active + idle_ttl) with no started or running run lose their
 * workspace.  A thread per runner, every --janitor-interval seconds;
 * several runners may run it at once: a session is marked `expiring` by
 * one of them, atomically (runner/scripts/janitor_begin.lua), its volume
 * (and, in compose mode, its network) removed, then it is `expired` and
 * its keys live `retention` more (janitor_end.lua).  A runner that dies
 * between the two leaves the mark; after RUNNER_JANITOR_STALE another one
 * takes it over.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runner.h"
#include "runner_scripts.h"


#define RUNNER_JANITOR_BATCH      100
#define RUNNER_JANITOR_STALE      (10 * 60 * 1000)


/* one of the scripts, on one session: its answer in status */
static int
runner_janitor_script(redisContext *c, const char *lua, const char *id,
    const char *extra, char *status, size_t slen)
{
    char         key[160], runs[160], sessions[160], now[32], stale[32];
    const char  *argv[12];
    int          n;
    redisReply  *r;

    snprintf(key, sizeof(key), SMCP_KEY_SESSION, runner_config->prefix, id);
    snprintf(runs, sizeof(runs), SMCP_KEY_SESSION_RUNS, runner_config->prefix,
             id);
    snprintf(sessions, sizeof(sessions), SMCP_KEY_SESSIONS,
             runner_config->prefix);
    snprintf(now, sizeof(now), "%lld", (long long) smcp_now_ms());
    snprintf(stale, sizeof(stale), "%d", RUNNER_JANITOR_STALE);

    n = 0;
    argv[n++] = "EVAL";
    argv[n++] = lua;
    argv[n++] = "3";
    argv[n++] = key;
    argv[n++] = runs;
    argv[n++] = sessions;
    argv[n++] = id;
    argv[n++] = now;
    argv[n++] = runner_config->instance;
    argv[n++] = extra;

    if (lua == runner_lua_janitor_begin) {
        argv[n++] = stale;
    }

    r = redisCommandArgv(c, n, argv, NULL);

    if (r == NULL || r->type != REDIS_REPLY_STRING) {
        snprintf(status, slen, "%s", r == NULL ? c->errstr
                 : r->type == REDIS_REPLY_ERROR ? r->str : "bad reply");
        if (r) {
            freeReplyObject(r);
        }
        return RUNNER_ERR;
    }

    snprintf(status, slen, "%s", r->str);
    freeReplyObject(r);

    return RUNNER_OK;
}


/* 1 when the session was expired by this call */
static int
runner_janitor_session(redisContext *c, const char *id)
{
    int   rc;
    char  status[128], err[RUNNER_ERRLEN], name[128], keep[32];

    if (runner_janitor_script(c, runner_lua_janitor_begin, id,
                              runner_config->prefix, status, sizeof(status))
        != RUNNER_OK)
    {
        runner_log("error", NULL, "janitor: session %s: %s", id, status);
        return 0;
    }

    if (strcmp(status, "ok") != 0 && strcmp(status, "orphan") != 0) {
        return 0;                   /* not due, busy, taken, expired */
    }

    snprintf(name, sizeof(name), "smcp-%s", id);
    rc = runner_docker_volume_remove(name, err, sizeof(err));

    if (rc != RUNNER_OK) {
        /* the mark stays ours: the next pass tries again */
        runner_log(rc == RUNNER_AGAIN ? "info" : "error", NULL,
                   "janitor: session %s: the volume %s %s", id, name,
                   rc == RUNNER_AGAIN ? "is still in use" : err);
        return 0;
    }

    if (runner_config->egress_container[0]) {
        snprintf(name, sizeof(name), "smcp-net-%s", id);
        runner_docker_session_net_drop(name, runner_config->egress_container,
                                       err, sizeof(err));
    }

    snprintf(keep, sizeof(keep), "%d", SMCP_DEFAULT_RETENTION);

    if (runner_janitor_script(c, runner_lua_janitor_end, id, keep, status,
                              sizeof(status))
        != RUNNER_OK || strcmp(status, "ok") != 0)
    {
        runner_log("error", NULL, "janitor: session %s: %s", id, status);
        return 0;
    }

    runner_log("info", NULL, "janitor: session %s expired: idle, its "
               "workspace removed", id);

    return 1;
}


/* one pass over the sessions due: RUNNER_AGAIN when there may be more */
int
runner_janitor_pass(redisContext *c, int *expired)
{
    char         sessions[160], now[32];
    size_t       i;
    redisReply  *r, *e;
    int          rc;

    *expired = 0;

    snprintf(sessions, sizeof(sessions), SMCP_KEY_SESSIONS,
             runner_config->prefix);
    snprintf(now, sizeof(now), "%lld", (long long) smcp_now_ms());

    r = redisCommand(c, "ZRANGEBYSCORE %s -inf %s LIMIT 0 %d", sessions, now,
                     RUNNER_JANITOR_BATCH);

    if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
        if (r) {
            freeReplyObject(r);
        }
        return RUNNER_ERR;
    }

    for (i = 0; i < r->elements && !atomic_load(&runner_stop); i++) {
        e = r->element[i];

        /* it names a Docker volume: only a session id */
        if (e->type != REDIS_REPLY_STRING
            || !smcp_valid_id(e->str, e->len, SMCP_SESSION_ID_PREFIX))
        {
            continue;
        }

        *expired += runner_janitor_session(c, e->str);
    }

    rc = (r->elements == RUNNER_JANITOR_BATCH) ? RUNNER_AGAIN : RUNNER_OK;
    freeReplyObject(r);

    return rc;
}


void *
runner_janitor_thread(void *arg)
{
    redisContext  *c;
    int64_t        now, next;
    int            rc, expired;
    char           err[RUNNER_ERRLEN];

    c = NULL;
    next = smcp_now_ms() + 1000;

    while (!atomic_load(&runner_stop)) {
        now = smcp_now_ms();

        if (now < next) {
            usleep(200 * 1000);
            continue;
        }

        next = now + runner_config->janitor_interval * 1000LL;

        if (c == NULL || c->err) {
            if (c) {
                redisFree(c);
            }

            c = runner_store_connect(err, sizeof(err));

            if (c == NULL) {
                continue;           /* the main loop says Redis is away */
            }
        }

        rc = runner_janitor_pass(c, &expired);

        if (rc == RUNNER_AGAIN) {
            next = now + 1000;      /* a full batch: more are due */
        }
    }

    if (c) {
        redisFree(c);
    }

    return NULL;
}
