/*
 * Redis: the queue, run state and events; every Redis call of the runner
 * is in store*.c.  A connection (runner_store_t) is one thread's own
 * (hiredis is blocking here: the runner is a daemon with a thread per
 * run, not an event loop).  Every status change is one Lua script, one
 * atomic step: the shared .lua files, embedded at build, loaded with
 * SCRIPT LOAD on every connect and run with EVALSHA (NOSCRIPT, after a
 * SCRIPT FLUSH or a failover: loaded again and retried once).  A Redis
 * still loading its dataset is waited for, and the log says so.  Every
 * reply's type, and its elements' types, are checked before use.
 *
 * This file: a connection (AUTH, the scripts), the commands every part of
 * the store sends through (store.h), the store's identity and this
 * runner's heartbeat.  The rest by concern: store_queue.c (the queue and
 * its consumer group), store_run.c (a run's hash and the scripts that
 * change its status), store_event.c (a run's events), store_session.c
 * (sessions and the janitor's scripts), store_notify.c (completion
 * notifications: the runs due, an attempt's claim and result).
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/sha.h>

#include "store.h"
#include "smcp_scripts.h"
#include "smcp_sentinel.h"


typedef struct {
    const char  *name;
    const char  *lua;
    char         sha[2 * SHA_DIGEST_LENGTH + 1];
} runner_script_t;


/* in the order of store.h's RUNNER_LUA_* */
static runner_script_t  runner_scripts[] = {
    { "claim", smcp_lua_claim, "" },
    { "running", smcp_lua_running, "" },
    { "finish", smcp_lua_finish, "" },
    { "janitor_begin", smcp_lua_janitor_begin, "" },
    { "janitor_end", smcp_lua_janitor_end, "" },
    { "budget_release", smcp_lua_budget_release, "" },
    { "usage_disk", smcp_lua_usage_disk, "" },
    { "run_waiting", smcp_lua_run_waiting, "" },
    { "notify_claim", smcp_lua_notify_claim, "" },
    { "notify_result", smcp_lua_notify_result, "" },
    { "fork_hold", smcp_lua_fork_hold, "" },
    { "pick_done", smcp_lua_pick_done, "" },
};

#define RUNNER_NSCRIPTS  (sizeof(runner_scripts) / sizeof(runner_scripts[0]))

static pthread_once_t  runner_store_once = PTHREAD_ONCE_INIT;
static atomic_int      runner_store_loading;    /* "loading" was logged */
/* the scripts' SHA1 digests, as EVALSHA names them: made once */
static void
runner_store_digests(void)
{
    size_t          i, k;
    unsigned char   md[SHA_DIGEST_LENGTH];

    for (i = 0; i < RUNNER_NSCRIPTS; i++) {
        SHA1((const unsigned char *) runner_scripts[i].lua,
             strlen(runner_scripts[i].lua), md);

        for (k = 0; k < SHA_DIGEST_LENGTH; k++) {
            snprintf(runner_scripts[i].sha + 2 * k, 3, "%02x", md[k]);
        }
    }
}


/* an error reply with this code ("NOSCRIPT", "LOADING", "BUSYGROUP") */
int
runner_store_is(redisReply *r, const char *code)
{
    size_t  n;

    n = strlen(code);

    return r->type == REDIS_REPLY_ERROR && r->len >= n
           && memcmp(r->str, code, n) == 0
           && (r->len == n || r->str[n] == ' ');
}


/* a master turned replica (a failover) answers a write READONLY: the
 * connection is as good as lost, and the next connect asks the sentinels
 * where the master is now */
void
runner_store_demoted(runner_store_t *st, redisReply *r)
{
    if (runner_store_is(r, "READONLY")) {
        st->stale = 1;
    }
}


/* the sentinels said the master moved since this connection was made
 * (sentinel.c): nothing more is sent on it */
int
runner_store_moved(runner_store_t *st)
{
    if (st->epoch == atomic_load(&runner_sentinel_epoch)) {
        return 0;
    }

    st->stale = 1;
    snprintf(st->err, sizeof(st->err), "redis: the master moved "
             "(sentinel)");

    return 1;
}


/* a string reply (or element) */
int
runner_store_str(redisReply *r)
{
    return r != NULL && r->type == REDIS_REPLY_STRING;
}


/* an array of n elements (n < 0: any number) */
int
runner_store_array(redisReply *r, long n)
{
    return r != NULL && r->type == REDIS_REPLY_ARRAY
           && (n < 0 || r->elements == (size_t) n);
}


/*
 * One command; NULL when the connection failed or the reply is an error
 * (st->err says which, the reply freed).  lens NULL: C strings.
 */
redisReply *
runner_store_argv(runner_store_t *st, int argc, const char **argv,
    const size_t *lens)
{
    int          i;
    size_t       l[RUNNER_STORE_ARGS];
    redisReply  *r;

    if (argc > RUNNER_STORE_ARGS) {
        snprintf(st->err, sizeof(st->err), "redis: %s: too many arguments",
                 argv[0]);
        return NULL;
    }

    if (lens == NULL) {
        for (i = 0; i < argc; i++) {
            l[i] = strlen(argv[i]);
        }

        lens = l;
    }

    if (runner_store_moved(st)) {
        return NULL;
    }

    r = redisCommandArgv(st->c, argc, argv, lens);

    if (r == NULL) {
        snprintf(st->err, sizeof(st->err), "redis: %s", st->c->errstr);
        return NULL;
    }

    if (r->type == REDIS_REPLY_ERROR) {
        runner_store_demoted(st, r);
        snprintf(st->err, sizeof(st->err), "redis: %s: %.200s", argv[0],
                 r->str);
        freeReplyObject(r);
        return NULL;
    }

    return r;
}


/* a command whose reply only matters as success */
int
runner_store_do(runner_store_t *st, int argc, const char **argv)
{
    redisReply  *r;

    r = runner_store_argv(st, argc, argv, NULL);

    if (r == NULL) {
        return RUNNER_ERR;
    }

    freeReplyObject(r);

    return RUNNER_OK;
}


/*
 * The members of a sorted set scored up to now, at most max of them
 * (ZRANGEBYSCORE): an array reply; NULL on failure (st->err).
 */
redisReply *
runner_store_due(runner_store_t *st, const char *key, int64_t now, long max)
{
    char         until[32], count[32];
    const char  *argv[7];
    redisReply  *r;

    RUNNER_NUM(until, now);
    RUNNER_NUM(count, max);

    argv[0] = "ZRANGEBYSCORE";
    argv[1] = key;
    argv[2] = "-inf";
    argv[3] = until;
    argv[4] = "LIMIT";
    argv[5] = "0";
    argv[6] = count;

    r = runner_store_argv(st, 7, argv, NULL);

    if (!runner_store_array(r, -1)) {
        if (r) {
            snprintf(st->err, sizeof(st->err), "redis: ZRANGEBYSCORE: not "
                     "an array");
            freeReplyObject(r);
        }
        return NULL;
    }

    return r;
}


/*
 * The ids (prefix: run_, ses_) of a sorted set's members scored up to now,
 * at most max of them, into ids (*n of them); other members are passed
 * over, or with drop taken out of the set.  RUNNER_AGAIN: a full batch,
 * more may be due.
 */
int
runner_store_due_ids(runner_store_t *st, const char *key, const char *prefix,
    int drop, int64_t now, char ids[][SMCP_ID_LEN + 1], int max, int *n)
{
    size_t       i, lens[3];
    const char  *argv[3];
    redisReply  *r, *e, *z;

    *n = 0;
    r = runner_store_due(st, key, now, max);

    if (r == NULL) {
        return RUNNER_ERR;
    }

    if (r->elements > (size_t) max) {       /* ids holds max */
        freeReplyObject(r);
        return RUNNER_ERR;
    }

    for (i = 0; i < r->elements; i++) {
        e = r->element[i];

        if (runner_store_str(e) && smcp_valid_id(e->str, e->len, prefix)) {
            memcpy(ids[(*n)++], e->str, e->len + 1);

        } else if (drop && runner_store_str(e)) {
            argv[0] = "ZREM";
            argv[1] = key;
            argv[2] = e->str;
            lens[0] = 4;
            lens[1] = strlen(key);
            lens[2] = e->len;

            z = runner_store_argv(st, 3, argv, lens);
            if (z) {
                freeReplyObject(z);
            }

            runner_log("warn", NULL, "dropped from %s: a member that is "
                       "no id", key);
        }
    }

    i = r->elements;
    freeReplyObject(r);

    return i == (size_t) max ? RUNNER_AGAIN : RUNNER_OK;
}


/* SCRIPT LOAD: RUNNER_AGAIN while Redis loads its dataset */
static int
runner_store_load(runner_store_t *st, size_t i)
{
    redisReply  *r;
    int          rc;

    r = redisCommand(st->c, "SCRIPT LOAD %s", runner_scripts[i].lua);

    if (r == NULL) {
        snprintf(st->err, sizeof(st->err), "redis: %s", st->c->errstr);
        return RUNNER_ERR;
    }

    rc = RUNNER_OK;

    if (runner_store_is(r, "LOADING")) {
        snprintf(st->err, sizeof(st->err), "redis is loading its dataset "
                 "into memory");
        rc = RUNNER_AGAIN;

    } else if (!runner_store_str(r)
               || strcmp(r->str, runner_scripts[i].sha) != 0)
    {
        snprintf(st->err, sizeof(st->err), "redis: SCRIPT LOAD %s: %.200s",
                 runner_scripts[i].name,
                 r->type == REDIS_REPLY_ERROR ? r->str : "an unexpected "
                 "digest");
        rc = RUNNER_ERR;
    }

    freeReplyObject(r);

    return rc;
}


/*
 * Every script, SCRIPT LOADed; while Redis loads its dataset (LOADING),
 * waited for when wait is set (one log line for the whole process, and
 * one when it is over).
 */
static int
runner_store_load_all(runner_store_t *st, int wait)
{
    size_t  i;
    int     rc;

    for (i = 0; i < RUNNER_NSCRIPTS; /* void */) {
        rc = runner_store_load(st, i);

        if (rc == RUNNER_OK) {
            i++;
            continue;
        }

        if (rc == RUNNER_ERR || !wait || atomic_load(&runner_stop)) {
            return RUNNER_ERR;
        }

        if (atomic_exchange(&runner_store_loading, 1) == 0) {
            runner_log("warn", NULL, "redis is loading its dataset into "
                       "memory (LOADING): waiting for it");
        }

        usleep(RUNNER_REDIS_LOADING_POLL_MS * 1000);
    }

    if (atomic_exchange(&runner_store_loading, 0) == 1) {
        runner_log("info", NULL, "redis has loaded its dataset: going on");
    }

    return RUNNER_OK;
}


/*
 * A connection, authenticated, with the scripts loaded.  wait: a Redis
 * loading its dataset is waited for (else it is an error, err saying so).
 */
runner_store_t *
runner_store_connect(int wait, char *err, size_t errlen)
{
    runner_store_t  *st;
    struct timeval   tv = { RUNNER_REDIS_CONNECT_S, 0 };

    pthread_once(&runner_store_once, runner_store_digests);

    st = calloc(1, sizeof(runner_store_t));
    if (st == NULL) {
        snprintf(err, errlen, "redis: out of memory");
        return NULL;
    }

    /* before asking the sentinels: a move heard meanwhile makes it again */
    st->epoch = atomic_load(&runner_sentinel_epoch);

    st->c = smcp_redis_connect(&runner_config->redis, tv,
                               runner_config->redis_password.len
                               ? runner_config->redis_password.data : NULL,
                               runner_config->redis_password.len,
                               st->err, sizeof(st->err));

    if (st->c == NULL) {
        snprintf(err, errlen, "redis: %s", st->err);
        runner_store_close(st);
        return NULL;
    }

    /* replies may take a blocking read's time plus a margin */
    tv.tv_sec = RUNNER_REDIS_REPLY_S;
    redisSetTimeout(st->c, tv);

    if (runner_store_load_all(st, wait) != RUNNER_OK) {
        snprintf(err, errlen, "%s", st->err);
        runner_store_close(st);
        return NULL;
    }

    return st;
}


void
runner_store_close(runner_store_t *st)
{
    if (st) {
        if (st->c) {
            redisFree(st->c);
        }

        free(st);
    }
}


/* the connection is broken (or its server no longer the master): close
 * it and connect again */
int
runner_store_lost(runner_store_t *st)
{
    return st == NULL || st->c->err != 0 || st->stale;
}


const char *
runner_store_error(runner_store_t *st)
{
    return st->err[0] ? st->err : "no error";
}


/*
 * A script by EVALSHA: keys, then args (lens NULL: C strings).  NOSCRIPT
 * (a SCRIPT FLUSH, a failover): loaded again and tried once more.  NULL
 * on failure (st->err).
 */
redisReply *
runner_store_script(runner_store_t *st, int script, int nkeys,
    const char **keys, int nargs, const char **args, const size_t *lens)
{
    int          i, n, try;
    char         nk[16];
    size_t       l[RUNNER_STORE_ARGS];
    const char  *argv[RUNNER_STORE_ARGS];
    redisReply  *r;

    if (3 + nkeys + nargs > RUNNER_STORE_ARGS) {
        snprintf(st->err, sizeof(st->err), "redis: %s: too many arguments",
                 runner_scripts[script].name);
        return NULL;
    }

    if (runner_store_moved(st)) {
        return NULL;
    }

    RUNNER_NUM(nk, nkeys);
    n = 0;
    argv[n++] = "EVALSHA";
    argv[n++] = runner_scripts[script].sha;
    argv[n++] = nk;

    for (i = 0; i < nkeys; i++) {
        argv[n++] = keys[i];
    }

    for (i = 0; i < n; i++) {
        l[i] = strlen(argv[i]);
    }

    for (i = 0; i < nargs; i++, n++) {
        argv[n] = args[i];
        l[n] = lens ? lens[i] : strlen(args[i]);
    }

    for (try = 0; /* void */ ; try++) {
        r = redisCommandArgv(st->c, n, argv, l);

        if (r == NULL) {
            snprintf(st->err, sizeof(st->err), "redis: %s", st->c->errstr);
            return NULL;
        }

        if (!runner_store_is(r, "NOSCRIPT") || try > 0) {
            break;
        }

        freeReplyObject(r);
        runner_log("info", NULL, "redis has lost the script %s "
                   "(NOSCRIPT): loading it again",
                   runner_scripts[script].name);

        if (runner_store_load(st, script) != RUNNER_OK) {
            return NULL;
        }
    }

    if (r->type == REDIS_REPLY_ERROR) {
        runner_store_demoted(st, r);
        snprintf(st->err, sizeof(st->err), "redis: script %s: %.200s",
                 runner_scripts[script].name, r->str);
        freeReplyObject(r);
        return NULL;
    }

    return r;
}


/* a script whose reply only matters as success */
int
runner_store_script_do(runner_store_t *st, int script, int nkeys,
    const char **keys, int nargs, const char **args)
{
    redisReply  *r;

    r = runner_store_script(st, script, nkeys, keys, nargs, args, NULL);

    if (r == NULL) {
        return RUNNER_ERR;
    }

    freeReplyObject(r);

    return RUNNER_OK;
}


/* a script answering a status word: RUNNER_OK for "ok", RUNNER_AGAIN for
 * another word (in status), RUNNER_ERR (status: the error) */
int
runner_store_script_status(runner_store_t *st, redisReply *r, char *status,
    size_t slen)
{
    if (r == NULL) {
        snprintf(status, slen, "%s", st->err);
        return RUNNER_ERR;
    }

    if (!runner_store_str(r)) {
        snprintf(status, slen, "redis: a script answered no status");
        freeReplyObject(r);
        return RUNNER_ERR;
    }

    snprintf(status, slen, "%s", r->str);
    freeReplyObject(r);

    return strcmp(status, "ok") == 0 ? RUNNER_OK : RUNNER_AGAIN;
}


/*
 * This runner's heartbeat: its name's score in SMCP_KEY_RUNNERS set to now
 * (ms); the key lives SMCP_RUNNER_STALE_MS past the newest heartbeat, and
 * names silent for a day are dropped from it.  A draining runner's name is
 * in SMCP_KEY_RUNNERS_DRAINING too, the same way; any other's is taken out
 * of it (a runner restarted under the name of a drained one).
 */
int
runner_store_heartbeat(runner_store_t *st, int draining)
{
    int64_t      now;
    char         key[RUNNER_KEY_MAX], dkey[RUNNER_KEY_MAX];
    char         ms[RUNNER_NUM_MAX], old[RUNNER_NUM_MAX], ttl[RUNNER_NUM_MAX];
    const char  *zadd[] = { "ZADD", key, ms, runner_config->name };
    const char  *prune[] = { "ZREMRANGEBYSCORE", key, "-inf", old };
    const char  *expire[] = { "PEXPIRE", key, ttl };
    const char  *zrem[] = { "ZREM", dkey, runner_config->name };

    now = smcp_now_ms();

    RUNNER_KEY0(dkey, SMCP_KEY_RUNNERS_DRAINING);
    RUNNER_NUM(ms, now);
    RUNNER_NUM(old, now - 86400000LL);
    RUNNER_NUM(ttl, SMCP_RUNNER_STALE_MS);

    if (draining) {
        RUNNER_KEY0(key, SMCP_KEY_RUNNERS_DRAINING);

        if (runner_store_do(st, 4, zadd) != RUNNER_OK
            || runner_store_do(st, 4, prune) != RUNNER_OK
            || runner_store_do(st, 3, expire) != RUNNER_OK)
        {
            return RUNNER_ERR;
        }

    } else if (runner_store_do(st, 3, zrem) != RUNNER_OK) {
        return RUNNER_ERR;
    }

    RUNNER_KEY0(key, SMCP_KEY_RUNNERS);

    if (runner_store_do(st, 4, zadd) != RUNNER_OK
        || runner_store_do(st, 4, prune) != RUNNER_OK
        || runner_store_do(st, 3, expire) != RUNNER_OK)
    {
        return RUNNER_ERR;
    }

    return RUNNER_OK;
}


/*
 * The store's identity: random, made once, kept in Redis.  Several
 * deployments may share one Docker engine (and reach their Redis by the
 * same address, e.g. "redis:6379" in every compose project): each runner
 * only ever judges containers labelled with its own store's identity.
 * Read at the first connect, before any run thread starts, and kept: a
 * Redis found with another identity later (wiped, replaced) is logged,
 * and this process goes on labelling and judging by the first.
 */
static char  runner_store_ident[64];


const char *
runner_store_id(void)
{
    return runner_store_ident;
}


int
runner_store_identity(runner_store_t *st, char *err, size_t errlen)
{
    char         key[RUNNER_KEY_MAX], rnd[33];
    const char  *argv[4];
    redisReply  *r;

    RUNNER_KEY0(key, SMCP_KEY_STORE_ID);

    if (smcp_random_hex(rnd, 16) != SMCP_OK) {
        snprintf(err, errlen, "no randomness");
        return RUNNER_ERR;
    }

    argv[0] = "SET";
    argv[1] = key;
    argv[2] = rnd;
    argv[3] = "NX";

    if (runner_store_do(st, 4, argv) != RUNNER_OK) {
        snprintf(err, errlen, "%s", st->err);
        return RUNNER_ERR;
    }

    argv[0] = "GET";
    r = runner_store_argv(st, 2, argv, NULL);

    if (!runner_store_str(r) || r->len == 0
        || r->len >= sizeof(runner_store_ident))
    {
        snprintf(err, errlen, "%s", r ? "redis: no store id" : st->err);
        if (r) {
            freeReplyObject(r);
        }
        return RUNNER_ERR;
    }

    if (runner_store_ident[0] == '\0') {
        memcpy(runner_store_ident, r->str, r->len);

    } else if (strcmp(runner_store_ident, r->str) != 0) {
        runner_log("warn", NULL, "the store's identity changed (Redis was "
                   "emptied or replaced): this runner keeps labelling its "
                   "sandboxes with the one it started with");
    }

    freeReplyObject(r);

    return RUNNER_OK;
}
