/*
 * Sessions: a field of a session's hash (the OpenCode conversation its
 * runs continue, its workspace's volume), the volumes they name (the
 * pool's leftovers), and the janitor's side: the sessions due, then
 * janitor_begin.lua and janitor_end.lua around the removal of a
 * session's sandbox resources.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store.h"


/* a field of a session's hash ("" when none): opencode_session (the
 * OpenCode conversation its runs continue), volume (its workspace's,
 * when not smcp-<id>: a pooled sandbox's) */
int
runner_store_session_get(runner_store_t *st, const char *session,
    const char *field, char *buf, size_t size)
{
    char         key[RUNNER_KEY_MAX];
    const char  *argv[3];
    redisReply  *r;

    RUNNER_KEY(key, SMCP_KEY_SESSION, session);
    argv[0] = "HGET";
    argv[1] = key;
    argv[2] = field;

    buf[0] = '\0';
    r = runner_store_argv(st, 3, argv, NULL);

    if (r == NULL) {
        return RUNNER_ERR;
    }

    if (runner_store_str(r) && r->len < size
        && memchr(r->str, '\0', r->len) == NULL)
    {
        memcpy(buf, r->str, r->len + 1);
    }

    freeReplyObject(r);

    return RUNNER_OK;
}


int
runner_store_session_set(runner_store_t *st, const char *session,
    const char *field, const char *value)
{
    char         key[RUNNER_KEY_MAX];
    const char  *argv[4];

    RUNNER_KEY(key, SMCP_KEY_SESSION, session);
    argv[0] = "HSET";
    argv[1] = key;
    argv[2] = field;
    argv[3] = value;

    return runner_store_do(st, 4, argv);
}


/*
 * A fork's copy ended (fork.c): made, its session's hash says
 * `forked_at`; made or not, the forked session's runs wait for it no
 * longer (its `forks` hold on them goes).
 */
int
runner_store_fork_done(runner_store_t *st, const char *forked,
    const char *session, const char *run_id, int made)
{
    int          rc;
    char         key[RUNNER_KEY_MAX], now[RUNNER_NUM_MAX];
    const char  *argv[4];

    rc = RUNNER_OK;

    if (made) {
        RUNNER_NUM(now, smcp_now_ms());
        rc = runner_store_session_set(st, session, "forked_at", now);
    }

    RUNNER_KEY(key, SMCP_KEY_SESSION_FORKS, forked);
    argv[0] = "ZREM";
    argv[1] = key;
    argv[2] = run_id;

    return (runner_store_do(st, 3, argv) == RUNNER_OK && rc == RUNNER_OK)
           ? RUNNER_OK : RUNNER_ERR;
}


/*
 * A fork's copy under way (fork_hold.lua): its hold on the forked
 * session's runs pushed hold_ms from now, its claim kept fresh.
 * RUNNER_OK; RUNNER_AGAIN with status "lost" or "lapsed"; RUNNER_ERR.
 */
int
runner_store_fork_hold(runner_store_t *st, const char *forked,
    const char *run_id, int64_t hold_ms, char *status, size_t slen)
{
    char         forks[RUNNER_KEY_MAX], run[RUNNER_KEY_MAX];
    char         now[RUNNER_NUM_MAX], hold[RUNNER_NUM_MAX];
    const char  *keys[2], *args[4];

    RUNNER_KEY(forks, SMCP_KEY_SESSION_FORKS, forked);
    RUNNER_KEY(run, SMCP_KEY_RUN, run_id);
    RUNNER_NUM(now, smcp_now_ms());
    RUNNER_NUM(hold, hold_ms);

    keys[0] = forks;
    keys[1] = run;
    args[0] = run_id;
    args[1] = runner_config->instance;
    args[2] = now;
    args[3] = hold;

    return runner_store_script_status(st,
               runner_store_script(st, RUNNER_LUA_FORK_HOLD, 2, keys, 4,
                                   args, NULL),
               status, slen);
}


/*
 * Of names (an object: a volume's name -> anything), those a live
 * session's hash names (`volume`) are taken out.  Every session in
 * `sessions` from the scan's start to its end is read (ZSCAN; a session
 * leaves it only once the janitor removed its volume), a page's hashes
 * pipelined; it stops once names is empty.  RUNNER_ERR (st->err): not
 * every session was read, names may hold one that a session names.
 */
int
runner_store_session_unnamed(runner_store_t *st, json_t *names)
{
    int          rc;
    char         sessions[RUNNER_KEY_MAX], key[RUNNER_KEY_MAX];
    char         cursor[RUNNER_NUM_MAX], count[RUNNER_NUM_MAX];
    size_t       i, n;
    const char  *argv[5];
    redisReply  *r, *m, *e;

    RUNNER_KEY0(sessions, SMCP_KEY_SESSIONS);
    RUNNER_NUM(count, RUNNER_SESSIONS_PAGE);
    strcpy(cursor, "0");

    do {
        argv[0] = "ZSCAN";
        argv[1] = sessions;
        argv[2] = cursor;
        argv[3] = "COUNT";
        argv[4] = count;

        r = runner_store_argv(st, 5, argv, NULL);

        if (r == NULL) {
            return RUNNER_ERR;
        }

        if (!runner_store_array(r, 2) || !runner_store_str(r->element[0])
            || r->element[0]->len >= sizeof(cursor)
            || !runner_store_array(r->element[1], -1))
        {
            snprintf(st->err, sizeof(st->err), "redis: ZSCAN: not a page");
            freeReplyObject(r);
            return RUNNER_ERR;
        }

        memcpy(cursor, r->element[0]->str, r->element[0]->len + 1);
        m = r->element[1];
        n = 0;

        /* member, score, member, score... */
        for (i = 0; i < m->elements; i += 2) {
            e = m->element[i];

            if (runner_store_str(e)
                && smcp_valid_id(e->str, e->len, SMCP_SESSION_ID_PREFIX))
            {
                RUNNER_KEY(key, SMCP_KEY_SESSION, e->str);
                redisAppendCommand(st->c, "HGET %s volume", key);
                n++;
            }
        }

        freeReplyObject(r);
        rc = RUNNER_OK;

        for (i = 0; i < n; i++) {
            if (redisGetReply(st->c, (void **) &e) != REDIS_OK) {
                snprintf(st->err, sizeof(st->err), "redis: %s",
                         st->c->errstr);
                return RUNNER_ERR;
            }

            if (e->type == REDIS_REPLY_ERROR) {
                snprintf(st->err, sizeof(st->err), "redis: HGET: %.200s",
                         e->str);
                rc = RUNNER_ERR;

            } else if (runner_store_str(e)
                       && memchr(e->str, '\0', e->len) == NULL)
            {
                (void) json_object_del(names, e->str);
            }

            freeReplyObject(e);
        }

        if (rc != RUNNER_OK) {
            return RUNNER_ERR;
        }
    } while (strcmp(cursor, "0") != 0 && json_object_size(names) > 0);

    return RUNNER_OK;
}


/* the janitor: sessions due by now (at most max of them, ids valid) */
int
runner_store_sessions_due(runner_store_t *st, int64_t now,
    char ids[][SMCP_ID_LEN + 1], int max, int *n)
{
    char  sessions[RUNNER_KEY_MAX];

    RUNNER_KEY0(sessions, SMCP_KEY_SESSIONS);

    /* it names a Docker volume: only a session id */
    return runner_store_due_ids(st, sessions, SMCP_SESSION_ID_PREFIX, 0,
                                now, ids, max, n);
}


/* janitor_begin.lua / janitor_end.lua on one session: the answer */
static int
runner_store_janitor(runner_store_t *st, int script, const char *id,
    char *status, size_t slen)
{
    int          nkeys;
    char         key[RUNNER_KEY_MAX], second[RUNNER_KEY_MAX];
    char         sessions[RUNNER_KEY_MAX], now[32], arg[32];
    char         tenant[SMCP_TENANT_MAX + 1], usage[RUNNER_KEY_MAX];
    const char  *keys[4], *args[4];

    RUNNER_KEY(key, SMCP_KEY_SESSION, id);
    RUNNER_KEY0(sessions, SMCP_KEY_SESSIONS);
    RUNNER_NUM(now, smcp_now_ms());

    nkeys = 3;
    usage[0] = '\0';

    if (script == RUNNER_LUA_JANITOR_BEGIN) {
        RUNNER_KEY(second, SMCP_KEY_SESSION_ACTIVE, id);
        RUNNER_NUM(arg, RUNNER_JANITOR_STALE_MS);

    } else {
        RUNNER_KEY(second, SMCP_KEY_SESSION_RUNS, id);
        RUNNER_NUM(arg, SMCP_DEFAULT_RETENTION);

        /* the session leaves its tenant's usage (checked: a key name) */
        if (runner_store_session_get(st, id, "tenant", tenant,
                                     sizeof(tenant)) == RUNNER_OK
            && smcp_valid_tenant(tenant, strlen(tenant)))
        {
            RUNNER_KEY(usage, SMCP_KEY_TENANT_USAGE, tenant);
        }

        nkeys = 4;
    }

    keys[0] = key;
    keys[1] = second;
    keys[2] = sessions;
    keys[3] = usage;
    args[0] = id;
    args[1] = now;
    args[2] = runner_config->instance;
    args[3] = arg;

    return runner_store_script_status(st,
               runner_store_script(st, script, nkeys, keys, 4, args, NULL),
               status, slen) == RUNNER_ERR ? RUNNER_ERR : RUNNER_OK;
}


/* "busy" because of a member whose run ended (what a status change
 * missed) is cleared, and the mark tried again */
int
runner_store_janitor_begin(runner_store_t *st, const char *id, char *status,
    size_t slen)
{
    int   rc;
    char  active[RUNNER_KEY_MAX];

    rc = runner_store_janitor(st, RUNNER_LUA_JANITOR_BEGIN, id, status,
                              slen);

    if (rc == RUNNER_OK && strcmp(status, "busy") == 0) {
        RUNNER_KEY(active, SMCP_KEY_SESSION_ACTIVE, id);

        if (runner_store_prune(st, active, 1) > 0) {
            rc = runner_store_janitor(st, RUNNER_LUA_JANITOR_BEGIN, id,
                                      status, slen);
        }
    }

    return rc;
}


int
runner_store_janitor_end(runner_store_t *st, const char *id, char *status,
    size_t slen)
{
    return runner_store_janitor(st, RUNNER_LUA_JANITOR_END, id, status,
                                slen);
}
