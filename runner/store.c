/*
 * Redis: the queue, run state and events; every Redis call of the runner
 * is here.  A connection (runner_store_t) is one thread's own (hiredis is
 * blocking here: the runner is a daemon with a thread per run, not an
 * event loop).  Every status change is one Lua script, one atomic step:
 * the .lua files of runner/scripts, embedded at build, loaded with SCRIPT
 * LOAD on every connect and run with EVALSHA (NOSCRIPT, after a SCRIPT
 * FLUSH or a failover: loaded again and retried once).  A Redis still
 * loading its dataset is waited for, and the log says so.  Every reply's
 * type, and its elements' types, are checked before use.
 */

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>
#include <openssl/sha.h>

#include "runner.h"
#include "smcp_scripts.h"


struct runner_store_s {
    redisContext  *c;
    char           err[RUNNER_ERRLEN];      /* the last failure */
};


typedef struct {
    const char  *name;
    const char  *lua;
    char         sha[2 * SHA_DIGEST_LENGTH + 1];
} runner_script_t;


#define RUNNER_LUA_CLAIM          0
#define RUNNER_LUA_RUNNING        1
#define RUNNER_LUA_FINISH         2
#define RUNNER_LUA_JANITOR_BEGIN  3
#define RUNNER_LUA_JANITOR_END    4

static runner_script_t  runner_scripts[] = {
    { "claim", smcp_lua_claim, "" },
    { "running", smcp_lua_running, "" },
    { "finish", smcp_lua_finish, "" },
    { "janitor_begin", smcp_lua_janitor_begin, "" },
    { "janitor_end", smcp_lua_janitor_end, "" },
};

#define RUNNER_NSCRIPTS  (sizeof(runner_scripts) / sizeof(runner_scripts[0]))

static pthread_once_t  runner_store_once = PTHREAD_ONCE_INIT;
static atomic_int      runner_store_loading;    /* "loading" was logged */


#define RUNNER_KEY(buf, fmt, arg)                                             \
    snprintf(buf, sizeof(buf), fmt, runner_config->prefix, arg)
#define RUNNER_KEY0(buf, fmt)                                                 \
    snprintf(buf, sizeof(buf), fmt, runner_config->prefix)
#define RUNNER_NUM(buf, v)                                                    \
    snprintf(buf, sizeof(buf), "%lld", (long long) (v))


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
static int
runner_store_is(redisReply *r, const char *code)
{
    size_t  n;

    n = strlen(code);

    return r->type == REDIS_REPLY_ERROR && r->len >= n
           && memcmp(r->str, code, n) == 0
           && (r->len == n || r->str[n] == ' ');
}


/* a string reply (or element) */
static int
runner_store_str(redisReply *r)
{
    return r != NULL && r->type == REDIS_REPLY_STRING;
}


/* an array of n elements (n < 0: any number) */
static int
runner_store_array(redisReply *r, long n)
{
    return r != NULL && r->type == REDIS_REPLY_ARRAY
           && (n < 0 || r->elements == (size_t) n);
}


/*
 * One command; NULL when the connection failed or the reply is an error
 * (st->err says which, the reply freed).  lens NULL: C strings.
 */
static redisReply *
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

    r = redisCommandArgv(st->c, argc, argv, lens);

    if (r == NULL) {
        snprintf(st->err, sizeof(st->err), "redis: %s", st->c->errstr);
        return NULL;
    }

    if (r->type == REDIS_REPLY_ERROR) {
        snprintf(st->err, sizeof(st->err), "redis: %s: %.200s", argv[0],
                 r->str);
        freeReplyObject(r);
        return NULL;
    }

    return r;
}


/* a command whose reply only matters as success */
static int
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


/* AUTH with the configured password (its bytes, never in an error) */
static int
runner_store_auth(runner_store_t *st)
{
    const char  *argv[2];
    size_t       lens[2];
    redisReply  *r;
    int          rc;

    argv[0] = "AUTH";
    lens[0] = 4;
    argv[1] = (const char *) runner_config->redis_password.data;
    lens[1] = runner_config->redis_password.len;

    r = redisCommandArgv(st->c, 2, argv, lens);

    if (r == NULL) {
        snprintf(st->err, sizeof(st->err), "redis: AUTH: %s",
                 st->c->errstr);
        return RUNNER_ERR;
    }

    rc = RUNNER_OK;

    if (r->type == REDIS_REPLY_ERROR) {
        /* the server's words ("WRONGPASS invalid username-password
         * pair"), never the password */
        snprintf(st->err, sizeof(st->err), "redis: AUTH refused: %.100s",
                 r->str);
        rc = RUNNER_ERR;
    }

    freeReplyObject(r);

    return rc;
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

    if (runner_config->redis_unix[0]) {
        st->c = redisConnectUnixWithTimeout(runner_config->redis_unix, tv);

    } else {
        st->c = redisConnectWithTimeout(runner_config->redis_host,
                                        runner_config->redis_port, tv);
    }

    if (st->c == NULL || st->c->err) {
        snprintf(err, errlen, "redis: %s",
                 st->c ? st->c->errstr : "out of memory");
        runner_store_close(st);
        return NULL;
    }

    /* replies may take a blocking read's time plus a margin */
    tv.tv_sec = RUNNER_REDIS_REPLY_S;
    redisSetTimeout(st->c, tv);

    if ((runner_config->redis_password.len
         && runner_store_auth(st) != RUNNER_OK)
        || runner_store_load_all(st, wait) != RUNNER_OK)
    {
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


/* the connection is broken: close it and connect again */
int
runner_store_lost(runner_store_t *st)
{
    return st == NULL || st->c->err != 0;
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
static redisReply *
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
        snprintf(st->err, sizeof(st->err), "redis: script %s: %.200s",
                 runner_scripts[script].name, r->str);
        freeReplyObject(r);
        return NULL;
    }

    return r;
}


/* a script answering a status word: RUNNER_OK for "ok", RUNNER_AGAIN for
 * another word (in status), RUNNER_ERR (status: the error) */
static int
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


int
runner_store_init_group(runner_store_t *st, char *err, size_t errlen)
{
    char         queue[RUNNER_KEY_MAX];
    redisReply  *r;

    RUNNER_KEY0(queue, SMCP_KEY_QUEUE);

    /* from the start of the stream: runs queued before any runner existed
     * are not lost */
    r = redisCommand(st->c, "XGROUP CREATE %s %s 0 MKSTREAM", queue,
                     SMCP_QUEUE_GROUP);

    if (r == NULL) {
        snprintf(err, errlen, "redis: %s", st->c->errstr);
        return RUNNER_ERR;
    }

    if (r->type == REDIS_REPLY_ERROR && !runner_store_is(r, "BUSYGROUP")) {
        snprintf(err, errlen, "redis: XGROUP CREATE: %.200s", r->str);
        freeReplyObject(r);
        return RUNNER_ERR;
    }

    freeReplyObject(r);

    return RUNNER_OK;
}


/*
 * This runner's heartbeat: its name's score in SMCP_KEY_RUNNERS set to now
 * (ms); the key lives SMCP_RUNNER_STALE_MS past the newest heartbeat, and
 * names silent for a day are dropped from it.
 */
int
runner_store_heartbeat(runner_store_t *st)
{
    int64_t      now;
    char         key[RUNNER_KEY_MAX], ms[RUNNER_NUM_MAX], old[RUNNER_NUM_MAX];
    char         ttl[RUNNER_NUM_MAX];
    const char  *zadd[] = { "ZADD", key, ms, runner_config->name };
    const char  *prune[] = { "ZREMRANGEBYSCORE", key, "-inf", old };
    const char  *expire[] = { "PEXPIRE", key, ttl };

    now = smcp_now_ms();

    RUNNER_KEY0(key, SMCP_KEY_RUNNERS);
    RUNNER_NUM(ms, now);
    RUNNER_NUM(old, now - 86400000LL);
    RUNNER_NUM(ttl, SMCP_RUNNER_STALE_MS);

    if (runner_store_do(st, 4, zadd) != RUNNER_OK
        || runner_store_do(st, 4, prune) != RUNNER_OK
        || runner_store_do(st, 3, expire) != RUNNER_OK)
    {
        return RUNNER_ERR;
    }

    return RUNNER_OK;
}


/* a field of a flat key/value reply (XINFO's): NULL when absent */
static redisReply *
runner_store_info_field(redisReply *r, const char *name)
{
    size_t  i;

    for (i = 0; i + 1 < r->elements; i += 2) {
        if (runner_store_str(r->element[i])
            && strcmp(r->element[i]->str, name) == 0)
        {
            return r->element[i + 1];
        }
    }

    return NULL;
}


/*
 * The queue seen from the group: entries not yet delivered to any runner
 * (XINFO GROUPS' lag) and the age of the oldest of them (its id's time).
 */
int
runner_store_queue_stats(runner_store_t *st, int64_t *depth, int64_t *lag_ms)
{
    size_t       i;
    char         queue[RUNNER_KEY_MAX], from[RUNNER_STREAM_ID_SIZE + 1];
    redisReply  *r, *g, *v, *last;
    const char  *info[] = { "XINFO", "GROUPS", queue };
    const char  *range[] = { "XRANGE", queue, from, "+", "COUNT", "1" };

    RUNNER_KEY0(queue, SMCP_KEY_QUEUE);

    *depth = -1;
    *lag_ms = 0;
    from[0] = '\0';

    r = runner_store_argv(st, 3, info, NULL);
    if (r == NULL) {
        return RUNNER_ERR;
    }

    for (i = 0; runner_store_array(r, -1) && i < r->elements; i++) {
        g = r->element[i];

        if (!runner_store_array(g, -1)
            || !runner_store_str(v = runner_store_info_field(g, "name"))
            || strcmp(v->str, SMCP_QUEUE_GROUP) != 0)
        {
            continue;
        }

        v = runner_store_info_field(g, "lag");
        if (v && v->type == REDIS_REPLY_INTEGER) {
            *depth = v->integer;
        }

        last = runner_store_info_field(g, "last-delivered-id");
        if (runner_store_str(last) && last->len < RUNNER_STREAM_ID_SIZE
            && smcp_valid_stream_id(last->str, last->len))
        {
            snprintf(from, sizeof(from), "(%s", last->str);
        }
    }

    freeReplyObject(r);

    if (*depth <= 0 || from[0] == '\0') {
        return RUNNER_OK;
    }

    r = runner_store_argv(st, 6, range, NULL);
    if (r == NULL) {
        return RUNNER_ERR;
    }

    if (runner_store_array(r, 1) && runner_store_array(r->element[0], 2)
        && runner_store_str(r->element[0]->element[0]))
    {
        *lag_ms = smcp_now_ms()
                  - strtoll(r->element[0]->element[0]->str, NULL, 10);
        if (*lag_ms < 0) {
            *lag_ms = 0;
        }
    }

    freeReplyObject(r);

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


/* a stream entry [id, [field, value...] or nil]: its id and run id ("" when
 * it has none, or none that is valid) */
static int
runner_store_entry(redisReply *e, char *run_id, char *stream_id)
{
    size_t       i;
    redisReply  *f;

    if (!runner_store_array(e, 2) || !runner_store_str(e->element[0])
        || e->element[0]->len >= RUNNER_STREAM_ID_SIZE)
    {
        return RUNNER_ERR;
    }

    memcpy(stream_id, e->element[0]->str, e->element[0]->len + 1);
    run_id[0] = '\0';

    f = e->element[1];

    if (!runner_store_array(f, -1)) {
        /* deleted from the stream meanwhile */
        return RUNNER_OK;
    }

    for (i = 0; i + 1 < f->elements; i += 2) {
        if (runner_store_str(f->element[i])
            && runner_store_str(f->element[i + 1])
            && strcmp(f->element[i]->str, "run") == 0
            && smcp_valid_id(f->element[i + 1]->str, f->element[i + 1]->len,
                             SMCP_RUN_ID_PREFIX))
        {
            memcpy(run_id, f->element[i + 1]->str,
                   f->element[i + 1]->len + 1);
        }
    }

    return RUNNER_OK;
}


/*
 * The next queue entry for this consumer: a new one (waiting block_ms at
 * most), or (pending) our own unacknowledged one after stream_id.
 * RUNNER_AGAIN when there is none.
 */
int
runner_store_next(runner_store_t *st, int block_ms, char *run_id,
    char *stream_id, int pending, char *err, size_t errlen)
{
    char         queue[RUNNER_KEY_MAX], block[32];
    redisReply  *r, *s;
    int          rc, n;
    const char  *argv[11];

    RUNNER_KEY0(queue, SMCP_KEY_QUEUE);
    RUNNER_NUM(block, block_ms);

    n = 0;
    argv[n++] = "XREADGROUP";
    argv[n++] = "GROUP";
    argv[n++] = SMCP_QUEUE_GROUP;
    argv[n++] = runner_config->name;
    argv[n++] = "COUNT";
    argv[n++] = "1";

    if (!pending) {
        argv[n++] = "BLOCK";
        argv[n++] = block;
    }

    argv[n++] = "STREAMS";
    argv[n++] = queue;

    /* pending: our own entries not acknowledged (runs we were running) */
    argv[n++] = pending ? (stream_id[0] ? stream_id : "0") : ">";

    r = runner_store_argv(st, n, argv, NULL);

    if (r == NULL) {
        snprintf(err, errlen, "%s", st->err);
        return RUNNER_ERR;
    }

    rc = RUNNER_AGAIN;

    /* nil (nothing within block_ms) or [[queue, [entry...]]] */
    s = runner_store_array(r, 1) ? r->element[0] : NULL;

    if (runner_store_array(s, 2) && runner_store_array(s->element[1], -1)
        && s->element[1]->elements > 0
        && runner_store_entry(s->element[1]->element[0], run_id, stream_id)
           == RUNNER_OK)
    {
        rc = RUNNER_OK;
    }

    freeReplyObject(r);

    return rc;
}


int
runner_store_autoclaim(runner_store_t *st, char *run_id, char *stream_id,
    char *err, size_t errlen)
{
    char         queue[RUNNER_KEY_MAX], idle[32];
    const char  *argv[9];
    redisReply  *r;
    int          rc;

    RUNNER_KEY0(queue, SMCP_KEY_QUEUE);
    RUNNER_NUM(idle, runner_config->claim_idle_ms);

    /* entries whose runner went silent (it touches its own entries while
     * it lives): a runner killed with -9, a host that died */
    argv[0] = "XAUTOCLAIM";
    argv[1] = queue;
    argv[2] = SMCP_QUEUE_GROUP;
    argv[3] = runner_config->name;
    argv[4] = idle;
    argv[5] = "0-0";
    argv[6] = "COUNT";
    argv[7] = "1";

    r = runner_store_argv(st, 8, argv, NULL);

    if (r == NULL) {
        snprintf(err, errlen, "%s", st->err);
        return RUNNER_ERR;
    }

    rc = RUNNER_AGAIN;

    /* [next id, [entry...], (7.0: deleted ids)] */
    if (runner_store_array(r, -1) && r->elements >= 2
        && runner_store_array(r->element[1], -1)
        && r->element[1]->elements > 0
        && runner_store_entry(r->element[1]->element[0], run_id, stream_id)
           == RUNNER_OK)
    {
        rc = RUNNER_OK;
    }

    freeReplyObject(r);

    return rc;
}


/*
 * One of our queue entries: touched (XCLAIM to ourselves, JUSTID: resets
 * its idle time, "this run is alive, leave it"), or acknowledged (XACK).
 */
static int
runner_store_entry_cmd(runner_store_t *st, int touch, const char *stream_id)
{
    int          n;
    char         queue[RUNNER_KEY_MAX];
    const char  *argv[7];

    RUNNER_KEY0(queue, SMCP_KEY_QUEUE);

    n = 0;
    argv[n++] = touch ? "XCLAIM" : "XACK";
    argv[n++] = queue;
    argv[n++] = SMCP_QUEUE_GROUP;

    if (touch) {
        argv[n++] = runner_config->name;
        argv[n++] = "0";
    }

    argv[n++] = stream_id;

    if (touch) {
        argv[n++] = "JUSTID";
    }

    return runner_store_do(st, n, argv);
}


int
runner_store_touch(runner_store_t *st, const char *stream_id)
{
    return runner_store_entry_cmd(st, 1, stream_id);
}


int
runner_store_ack(runner_store_t *st, const char *stream_id)
{
    return runner_store_entry_cmd(st, 0, stream_id);
}


/*
 * Fields of a run hash (HMGET): vals[i] gets field i's value: "" when
 * absent, "?" when too long for its buffer of size or holding a NUL (no
 * field takes "?": it reads as malformed, never as absent or cut short).
 */
static int
runner_store_fields(runner_store_t *st, const char *run_id, int n,
    const char **fields, char **vals, size_t size)
{
    int          i;
    char         key[RUNNER_KEY_MAX];
    const char  *argv[RUNNER_STORE_ARGS];
    redisReply  *r, *v;

    if (n + 2 > RUNNER_STORE_ARGS) {
        return RUNNER_ERR;
    }

    RUNNER_KEY(key, SMCP_KEY_RUN, run_id);
    argv[0] = "HMGET";
    argv[1] = key;

    for (i = 0; i < n; i++) {
        argv[2 + i] = fields[i];
        vals[i][0] = '\0';
    }

    r = runner_store_argv(st, n + 2, argv, NULL);

    if (!runner_store_array(r, n)) {
        if (r) {
            snprintf(st->err, sizeof(st->err), "redis: HMGET: not an array "
                     "of %d", n);
            freeReplyObject(r);
        }
        return RUNNER_ERR;
    }

    for (i = 0; i < n; i++) {
        v = r->element[i];

        if (!runner_store_str(v)) {
            continue;
        }

        if (v->len < size && memchr(v->str, '\0', v->len) == NULL) {
            memcpy(vals[i], v->str, v->len + 1);

        } else if (size > 1) {
            /* there, but no value this code takes: "?" is none */
            strcpy(vals[i], "?");
        }
    }

    freeReplyObject(r);

    return RUNNER_OK;
}


int
runner_store_hget(runner_store_t *st, const char *run_id, const char *field,
    char *buf, size_t size)
{
    return runner_store_fields(st, run_id, 1, &field, &buf, size);
}


/* the run's spend cap and its cancel (the watchdog's look, every second):
 * max_cost 0 when there is none */
int
runner_store_limits(runner_store_t *st, const char *run_id, int *cancel,
    double *max_cost)
{
    char         v[2][RUNNER_NUM_MAX], *vals[2], *end;
    double       max;
    const char  *fields[2] = { "cancel_requested", "max_cost" };

    vals[0] = v[0];
    vals[1] = v[1];

    if (runner_store_fields(st, run_id, 2, fields, vals, sizeof(v[0]))
        != RUNNER_OK)
    {
        return RUNNER_ERR;
    }

    *cancel = strcmp(v[0], "1") == 0;

    /* USD as text; absent or "0": no cap */
    max = strtod(v[1], &end);
    *max_cost = (v[1][0] && *end == '\0' && isfinite(max) && max > 0)
                ? max : 0;

    return RUNNER_OK;
}


/* the times runners took the run (claims, re-attaches), less clean
 * detaches: *n the new count */
int
runner_store_attempts(runner_store_t *st, const char *run_id, int delta,
    long long *n)
{
    char         key[RUNNER_KEY_MAX], d[32];
    const char  *argv[4];
    redisReply  *r;
    int          rc;

    RUNNER_KEY(key, SMCP_KEY_RUN, run_id);
    RUNNER_NUM(d, delta);

    argv[0] = "HINCRBY";
    argv[1] = key;
    argv[2] = "attempts";
    argv[3] = d;

    r = runner_store_argv(st, 4, argv, NULL);
    if (r == NULL) {
        return RUNNER_ERR;
    }

    rc = (r->type == REDIS_REPLY_INTEGER) ? RUNNER_OK : RUNNER_ERR;

    if (rc == RUNNER_OK && n) {
        *n = r->integer;
    }

    freeReplyObject(r);

    return rc;
}


/* the run hash as a JSON object of strings; NULL when it is gone */
json_t *
runner_store_run(runner_store_t *st, const char *run_id)
{
    char         key[RUNNER_KEY_MAX];
    size_t       i;
    json_t      *o;
    const char  *argv[2];
    redisReply  *r, *f, *v;

    RUNNER_KEY(key, SMCP_KEY_RUN, run_id);
    argv[0] = "HGETALL";
    argv[1] = key;

    r = runner_store_argv(st, 2, argv, NULL);

    if (!runner_store_array(r, -1) || r->elements == 0) {
        if (r) {
            freeReplyObject(r);
        }
        return NULL;
    }

    o = json_object();

    for (i = 0; o && i + 1 < r->elements; i += 2) {
        f = r->element[i];
        v = r->element[i + 1];

        /* a field name is a C string; a value may hold anything */
        if (!runner_store_str(f) || !runner_store_str(v)
            || memchr(f->str, '\0', f->len) != NULL)
        {
            continue;
        }

        smcp_utf8_sanitize(v->str, v->len);
        json_object_set_new(o, f->str, json_stringn(v->str, v->len));
    }

    freeReplyObject(r);

    return o;
}


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


/* the keys of a run's scripts, from its hash (tenant, session checked:
 * they are part of key names; '' when absent or malformed) */
typedef struct {
    char        run[RUNNER_KEY_MAX];
    char        events[RUNNER_KEY_MAX];
    char        chan[RUNNER_KEY_MAX];
    char        diff[RUNNER_KEY_MAX];
    char        active[RUNNER_KEY_MAX];     /* session:{id}:active */
    char        runs[RUNNER_KEY_MAX];       /* session:{id}:runs */
    char        session[RUNNER_KEY_MAX];    /* session:{id} */
    char        started[RUNNER_KEY_MAX];    /* tenant:{t}:started */
    char        claimed[RUNNER_KEY_MAX];    /* tenant:{t}:claimed */
    char        sessions[RUNNER_KEY_MAX];   /* tenant:{t}:sessions */
    char        tchan[RUNNER_KEY_MAX];      /* channel tenant:{t} */
    char        tenant[SMCP_TENANT_MAX + 1];
    char        session_id[SMCP_ID_LEN + 1];
    char        created_at[RUNNER_NUM_MAX];
} runner_run_keys_t;


static int
runner_store_run_keys(runner_store_t *st, const char *run_id,
    runner_run_keys_t *k)
{
    char         v[3][SMCP_TENANT_MAX + 1], *vals[3];
    const char  *fields[3] = { "tenant", "session", "created_at" };

    vals[0] = v[0];
    vals[1] = v[1];
    vals[2] = v[2];

    if (runner_store_fields(st, run_id, 3, fields, vals, sizeof(v[0]))
        != RUNNER_OK)
    {
        return RUNNER_ERR;
    }

    RUNNER_KEY(k->run, SMCP_KEY_RUN, run_id);
    RUNNER_KEY(k->events, SMCP_KEY_RUN_EVENTS, run_id);
    RUNNER_KEY(k->chan, SMCP_CHAN_RUN, run_id);
    RUNNER_KEY(k->diff, SMCP_KEY_RUN_DIFF, run_id);

    k->active[0] = k->runs[0] = k->session[0] = k->session_id[0] = '\0';
    k->started[0] = k->claimed[0] = k->tenant[0] = k->created_at[0] = '\0';
    k->sessions[0] = '\0';
    k->tchan[0] = '\0';

    if (smcp_valid_id(v[1], strlen(v[1]), SMCP_SESSION_ID_PREFIX)) {
        strcpy(k->session_id, v[1]);
        RUNNER_KEY(k->active, SMCP_KEY_SESSION_ACTIVE, v[1]);
        RUNNER_KEY(k->runs, SMCP_KEY_SESSION_RUNS, v[1]);
        RUNNER_KEY(k->session, SMCP_KEY_SESSION, v[1]);
    }

    if (smcp_valid_tenant(v[0], strlen(v[0]))) {
        strcpy(k->tenant, v[0]);
        RUNNER_KEY(k->started, SMCP_KEY_TENANT_STARTED, v[0]);
        RUNNER_KEY(k->claimed, SMCP_KEY_TENANT_CLAIMED, v[0]);
        RUNNER_KEY(k->sessions, SMCP_KEY_TENANT_SESSIONS, v[0]);
        RUNNER_KEY(k->tchan, SMCP_CHAN_TENANT, v[0]);
    }

    if (strlen(v[2]) < sizeof(k->created_at)
        && strspn(v[2], "0123456789") == strlen(v[2]))
    {
        strcpy(k->created_at, v[2]);
    }

    return RUNNER_OK;
}


/* whether a status is an ended run's ("" too: the run is gone) */
static int
runner_store_ended(const char *status)
{
    return status[0] == '\0' || strcmp(status, SMCP_STATUS_COMPLETED) == 0
           || strcmp(status, SMCP_STATUS_FAILED) == 0
           || strcmp(status, SMCP_STATUS_CANCELLED) == 0;
}


/* the statuses of runs (ids from a reply's elements), pipelined: each
 * one's into status[i] ("" when gone; "?" when not a run id) */
static int
runner_store_statuses(runner_store_t *st, redisReply *ids, size_t step,
    char (*status)[RUNNER_NUM_MAX], size_t n)
{
    size_t       i, k;
    char         key[RUNNER_KEY_MAX];
    redisReply  *e, *r;

    for (i = 0; i < n; i++) {
        e = ids->element[i * step];
        strcpy(status[i], "?");

        if (runner_store_str(e)
            && smcp_valid_id(e->str, e->len, SMCP_RUN_ID_PREFIX))
        {
            RUNNER_KEY(key, SMCP_KEY_RUN, e->str);
            redisAppendCommand(st->c, "HGET %s status", key);
            status[i][0] = '\0';
        }
    }

    for (i = 0; i < n; i++) {
        if (strcmp(status[i], "?") == 0) {
            continue;
        }

        if (redisGetReply(st->c, (void **) &r) != REDIS_OK) {
            snprintf(st->err, sizeof(st->err), "redis: %s", st->c->errstr);
            return RUNNER_ERR;
        }

        k = runner_store_str(r) ? r->len : 0;

        if (k > 0 && k < RUNNER_NUM_MAX) {
            memcpy(status[i], r->str, k + 1);

        } else if (k > 0) {
            strcpy(status[i], "?");
        }

        freeReplyObject(r);
    }

    return RUNNER_OK;
}


/*
 * Members of a run set whose run ended or is gone, dropped: what a status
 * change missed (a run cancelled while a dead runner held its claim).
 * zset: the first RUNNER_PRUNE_MAX members of a zset, else of a set.
 * Returns how many were dropped (-1: Redis trouble).
 */
static int
runner_store_prune(runner_store_t *st, const char *key, int zset)
{
    int          dropped;
    char         count[32], status[RUNNER_PRUNE_MAX][RUNNER_NUM_MAX];
    size_t       i, n;
    const char  *argv[4];
    redisReply  *r;

    argv[1] = key;

    if (zset) {
        /* ZRANGE key 0 max-1: the first members */
        RUNNER_NUM(count, RUNNER_PRUNE_MAX - 1);
        argv[0] = "ZRANGE";
        argv[2] = "0";
        argv[3] = count;

    } else {
        /* SRANDMEMBER key max: as many distinct members */
        RUNNER_NUM(count, RUNNER_PRUNE_MAX);
        argv[0] = "SRANDMEMBER";
        argv[2] = count;
    }

    r = runner_store_argv(st, zset ? 4 : 3, argv, NULL);

    if (!runner_store_array(r, -1)) {
        if (r) {
            freeReplyObject(r);
        }
        return -1;
    }

    n = r->elements < RUNNER_PRUNE_MAX ? r->elements : RUNNER_PRUNE_MAX;

    if (runner_store_statuses(st, r, 1, status, n) != RUNNER_OK) {
        freeReplyObject(r);
        return -1;
    }

    dropped = 0;

    for (i = 0; i < n; i++) {
        if (strcmp(status[i], "?") == 0 || !runner_store_ended(status[i])) {
            continue;
        }

        argv[0] = zset ? "ZREM" : "SREM";
        argv[1] = key;
        argv[2] = r->element[i]->str;

        if (runner_store_do(st, 3, argv) == RUNNER_OK) {
            runner_log("info", r->element[i]->str, "dropped from %s: the "
                       "run %s", key, status[i][0] ? "ended" : "is gone");
            dropped++;
        }
    }

    freeReplyObject(r);

    return dropped;
}


/*
 * A run queued by an nginx older than session:{id}:active (an upgrade
 * with runs in flight): the session's unfinished runs, from
 * session:{id}:runs (scored by created_at), are listed there, and so is
 * the run itself.
 */
static int
runner_store_list_session(runner_store_t *st, const char *run_id,
    runner_run_keys_t *k)
{
    char         count[32], status[RUNNER_PRUNE_MAX][RUNNER_NUM_MAX];
    size_t       i, n;
    const char  *argv[6];
    redisReply  *r;

    RUNNER_NUM(count, RUNNER_PRUNE_MAX - 1);

    argv[0] = "ZRANGE";
    argv[1] = k->runs;
    argv[2] = "0";
    argv[3] = count;
    argv[4] = "WITHSCORES";

    r = runner_store_argv(st, 5, argv, NULL);

    if (!runner_store_array(r, -1) || r->elements % 2) {
        if (r) {
            freeReplyObject(r);
        }
        return RUNNER_ERR;
    }

    n = r->elements / 2;

    if (runner_store_statuses(st, r, 2, status, n) != RUNNER_OK) {
        freeReplyObject(r);
        return RUNNER_ERR;
    }

    for (i = 0; i < n; i++) {
        if (strcmp(status[i], SMCP_STATUS_STARTED) == 0
            || strcmp(status[i], SMCP_STATUS_RUNNING) == 0)
        {
            if (!runner_store_str(r->element[2 * i + 1])) {
                continue;
            }

            argv[0] = "ZADD";
            argv[1] = k->active;
            argv[2] = "NX";
            argv[3] = r->element[2 * i + 1]->str;
            argv[4] = r->element[2 * i]->str;
            (void) runner_store_do(st, 5, argv);
        }
    }

    freeReplyObject(r);

    argv[0] = "ZADD";
    argv[1] = k->active;
    argv[2] = "NX";
    argv[3] = k->created_at[0] ? k->created_at : "0";
    argv[4] = run_id;

    return runner_store_do(st, 5, argv);
}


/*
 * Claim (ngx_sandbox_mcp_module/common/scripts/claim.lua): the run is still `started`, it is the
 * first unfinished run of its session, the tenant is under its running
 * limit, no other runner has it.  A claim names this process (not just
 * the consumer: two runners given the same --name must not both start a
 * run); a claim that never got its run going (its runner died starting
 * it) goes stale after --claim-idle.  The keys come from the run hash.
 * A "wait" or "limit" caused by a member whose run ended (what a status
 * change missed) is cleared, and the claim tried again.
 */
int
runner_store_claim(runner_store_t *st, const char *run_id, char *status,
    size_t slen)
{
    int                rc, try;
    char               now[32], stale[32];
    const char        *keys[4], *args[4];
    runner_run_keys_t  k;

    if (runner_store_run_keys(st, run_id, &k) != RUNNER_OK) {
        snprintf(status, slen, "%s", st->err);
        return RUNNER_ERR;
    }

    RUNNER_NUM(stale, runner_config->claim_idle_ms);

    keys[0] = k.run;
    keys[1] = k.active;
    keys[2] = k.started;
    keys[3] = k.claimed;
    args[0] = run_id;
    args[1] = runner_config->instance;
    args[2] = now;
    args[3] = stale;

    for (try = 0; /* void */ ; try++) {
        RUNNER_NUM(now, smcp_now_ms());

        rc = runner_store_script_status(st,
                 runner_store_script(st, RUNNER_LUA_CLAIM, 4, keys, 4, args,
                                     NULL),
                 status, slen);

        if (rc != RUNNER_AGAIN || try == RUNNER_CLAIM_TRIES - 1) {
            break;
        }

        if (strcmp(status, "unlisted") == 0) {
            rc = runner_store_list_session(st, run_id, &k);

        } else if (strcmp(status, "wait") == 0) {
            rc = runner_store_prune(st, k.active, 1) > 0 ? RUNNER_OK
                                                         : RUNNER_AGAIN;

        } else if (strcmp(status, "limit") == 0) {
            rc = runner_store_prune(st, k.claimed, 0) > 0 ? RUNNER_OK
                                                          : RUNNER_AGAIN;
        }

        if (rc != RUNNER_OK) {
            break;
        }
    }

    if (rc == RUNNER_ERR && strcmp(status, st->err) != 0) {
        snprintf(status, slen, "%s", st->err);
    }

    return rc;
}


/* `running` the moment its container runs (ngx_sandbox_mcp_module/common/scripts/running.lua) */
int
runner_store_set_running(runner_store_t *st, const char *run_id,
    const char *container, int64_t deadline_ms, char *status, size_t slen)
{
    char               now[32], deadline[32];
    const char        *keys[7], *args[5];
    runner_run_keys_t  k;

    if (runner_store_run_keys(st, run_id, &k) != RUNNER_OK) {
        snprintf(status, slen, "%s", st->err);
        return RUNNER_ERR;
    }

    RUNNER_NUM(now, smcp_now_ms());
    RUNNER_NUM(deadline, deadline_ms);

    keys[0] = k.run;
    keys[1] = k.events;
    keys[2] = k.chan;
    keys[3] = k.active;
    keys[4] = k.started;
    keys[5] = k.claimed;
    keys[6] = k.tchan;
    args[0] = now;
    args[1] = container;
    args[2] = SMCP_EVENTS_MAXLEN;
    args[3] = deadline;
    args[4] = run_id;

    return runner_store_script_status(st,
               runner_store_script(st, RUNNER_LUA_RUNNING, 7, keys, 5, args,
                                   NULL),
               status, slen);
}


/*
 * The outcome, once (ngx_sandbox_mcp_module/common/scripts/finish.lua): the run hash, its diff
 * and the diff's summary, the last event; the run leaves its session's
 * active set and its tenant's sets, its keys get their retention, its
 * session is bumped.
 */
int
runner_store_finish(runner_store_t *st, runner_run_t *run,
    const char *status, int exit_code, const char *error,
    const runner_diff_t *diff, const runner_pr_t *pr)
{
    int                n, i;
    char               sessions[RUNNER_KEY_MAX], now[32], num[8][32];
    char              *files, *index;
    size_t             lens[RUNNER_STORE_ARGS];
    const char        *keys[11], *args[RUNNER_STORE_ARGS];
    redisReply        *r;
    runner_run_keys_t  k;
    runner_outcome_t  *o = &run->out;

    if (runner_store_run_keys(st, run->id, &k) != RUNNER_OK) {
        return RUNNER_ERR;
    }

    RUNNER_KEY0(sessions, SMCP_KEY_SESSIONS);
    RUNNER_NUM(now, smcp_now_ms());

    keys[0] = k.run;
    keys[1] = k.events;
    keys[2] = k.chan;
    keys[3] = o->diff ? k.diff : "";
    keys[4] = k.active;
    keys[5] = k.started;
    keys[6] = k.claimed;
    keys[7] = k.session;
    keys[8] = sessions;
    keys[9] = k.sessions;
    keys[10] = k.tchan;

    files = json_dumps(diff->files, JSON_COMPACT);
    index = json_dumps(diff->index, JSON_COMPACT);

    n = 0;
    args[n++] = status;
    args[n++] = now;
    args[n++] = SMCP_EVENTS_MAXLEN;
    args[n++] = run->id;
    args[n++] = k.session_id;

#define RUNNER_FV(f, v)  args[n++] = f; args[n++] = v
#define RUNNER_FI(f, i, v)  RUNNER_NUM(num[i], v); RUNNER_FV(f, num[i])

    RUNNER_FI("exit_code", 0, exit_code);
    RUNNER_FI("tokens_input", 1, o->tokens_input);
    RUNNER_FI("tokens_output", 2, o->tokens_output);
    RUNNER_FI("tokens_reasoning", 3, o->tokens_reasoning);
    RUNNER_FI("tokens_cache_read", 4, o->tokens_cache_read);
    RUNNER_FI("tokens_cache_write", 5, o->tokens_cache_write);
    snprintf(num[6], sizeof(num[6]), "%.6f", o->cost);
    RUNNER_FV("cost", num[6]);
    RUNNER_FV("result", o->result ? o->result : "");
    RUNNER_FV("error", error ? error : "");
    RUNNER_FV("files_changed", files ? files : "[]");
    RUNNER_FV("diff_index", index ? index : "{}");
    RUNNER_FV("diff_stat", diff->stat);
    RUNNER_FV("diff_truncated", o->diff_truncated ? "1" : "0");

    if (pr && pr->status) {
        RUNNER_FV("pr_status", pr->status);
        RUNNER_FV("pr_url", pr->url);
        RUNNER_FV("pr_number", pr->number);
    }

#undef RUNNER_FV
#undef RUNNER_FI

    for (i = 0; i < n; i++) {
        lens[i] = strlen(args[i]);
    }

    /* the diff, last (binary-safe length): the script SETs ARGV[#ARGV] */
    if (o->diff) {
        args[n] = o->diff;
        lens[n] = o->diff_len;
        n++;
    }

    r = runner_store_script(st, RUNNER_LUA_FINISH, 11, keys, n, args, lens);
    free(files);
    free(index);

    if (r == NULL) {
        runner_log("error", run->id, "storing the outcome: %s", st->err);
        return RUNNER_ERR;
    }

    freeReplyObject(r);

    return RUNNER_OK;
}


/* an event; `count` more bytes in the run's event_bytes (pipelined) */
int
runner_store_event(runner_store_t *st, const char *run_id, const char *type,
    const char *data, size_t len, const char *dts, size_t count)
{
    char         events[RUNNER_KEY_MAX], chan[RUNNER_KEY_MAX];
    char         key[RUNNER_KEY_MAX], now[32], cnt[32];
    const char  *argv[14];
    size_t       lens[14];
    redisReply  *r;
    int          i, n, rc, replies;

    RUNNER_KEY(events, SMCP_KEY_RUN_EVENTS, run_id);
    RUNNER_KEY(chan, SMCP_CHAN_RUN, run_id);
    RUNNER_KEY(key, SMCP_KEY_RUN, run_id);
    RUNNER_NUM(now, smcp_now_ms());
    RUNNER_NUM(cnt, count);

    n = 0;
    argv[n++] = "XADD";
    argv[n++] = events;
    argv[n++] = "MAXLEN";
    argv[n++] = "~";
    argv[n++] = SMCP_EVENTS_MAXLEN;
    argv[n++] = "*";
    argv[n++] = "type";
    argv[n++] = type;
    argv[n++] = "data";
    argv[n++] = data;
    argv[n++] = "ts";
    argv[n++] = now;

    if (dts) {
        /* the container log's own timestamp: re-attaching resumes there */
        argv[n++] = "dts";
        argv[n++] = dts;
    }

    for (i = 0; i < n; i++) {
        lens[i] = strlen(argv[i]);
    }

    lens[9] = len;

    /* pipelined: the event, its bytes counted, the ping for watchers */
    redisAppendCommandArgv(st->c, n, argv, lens);
    replies = 2;

    if (count) {
        redisAppendCommand(st->c, "HINCRBY %s event_bytes %s", key, cnt);
        replies++;
    }

    redisAppendCommand(st->c, "PUBLISH %s event", chan);

    rc = RUNNER_OK;

    for (i = 0; i < replies; i++) {
        if (redisGetReply(st->c, (void **) &r) != REDIS_OK) {
            snprintf(st->err, sizeof(st->err), "redis: %s", st->c->errstr);
            return RUNNER_ERR;
        }

        if (r->type == REDIS_REPLY_ERROR) {
            snprintf(st->err, sizeof(st->err), "redis: storing an event: "
                     "%.200s", r->str);
            rc = RUNNER_ERR;
        }

        freeReplyObject(r);
    }

    return rc;
}


/* an entry's field [id, [field, value...]], or NULL */
static redisReply *
runner_store_entry_field(redisReply *e, const char *name)
{
    size_t       j;
    redisReply  *f;

    if (!runner_store_array(e, 2) || !runner_store_array(e->element[1], -1))
    {
        return NULL;
    }

    f = e->element[1];

    for (j = 0; j + 1 < f->elements; j += 2) {
        if (runner_store_str(f->element[j])
            && runner_store_str(f->element[j + 1])
            && strcmp(f->element[j]->str, name) == 0)
        {
            return f->element[j + 1];
        }
    }

    return NULL;
}


/* "(id" after the page's last entry, for the next page */
static int
runner_store_page_after(redisReply *r, char *from, size_t size)
{
    redisReply  *e;

    e = r->element[r->elements - 1];

    if (!runner_store_array(e, 2) || !runner_store_str(e->element[0])
        || e->element[0]->len >= RUNNER_STREAM_ID_SIZE)
    {
        return RUNNER_ERR;
    }

    snprintf(from, size, "(%s", e->element[0]->str);

    return RUNNER_OK;
}


/* a page of the run's events: XRANGE (forward) or XREVRANGE from `from` */
static redisReply *
runner_store_events_page(runner_store_t *st, const char *run_id,
    int forward, const char *from)
{
    char         events[RUNNER_KEY_MAX], count[32];
    const char  *argv[6];
    redisReply  *r;

    RUNNER_KEY(events, SMCP_KEY_RUN_EVENTS, run_id);
    RUNNER_NUM(count, RUNNER_EVENTS_PAGE);

    argv[0] = forward ? "XRANGE" : "XREVRANGE";
    argv[1] = events;
    argv[2] = from;
    argv[3] = forward ? "+" : "-";
    argv[4] = "COUNT";
    argv[5] = count;

    r = runner_store_argv(st, 6, argv, NULL);

    if (r && !runner_store_array(r, -1)) {
        snprintf(st->err, sizeof(st->err), "redis: %s: not an array",
                 argv[0]);
        freeReplyObject(r);
        return NULL;
    }

    return r;
}


/* an event entry, handed over: RUNNER_OK goes on, RUNNER_AGAIN stops */
typedef int (*runner_entry_pt)(void *data, redisReply *entry);


/* the run's stored events a page at a time, forward or backward, at most
 * pages of them, each entry to on_entry */
static int
runner_store_events_each(runner_store_t *st, const char *run_id,
    int forward, int pages, runner_entry_pt on_entry, void *data)
{
    char         from[RUNNER_STREAM_ID_SIZE + 1];   /* "(" and an id */
    size_t       i;
    redisReply  *r;

    strcpy(from, forward ? "-" : "+");

    for ( /* void */ ; pages > 0; pages--) {
        r = runner_store_events_page(st, run_id, forward, from);

        if (r == NULL) {
            return RUNNER_ERR;
        }

        for (i = 0; i < r->elements; i++) {
            if (on_entry(data, r->element[i]) != RUNNER_OK) {
                freeReplyObject(r);
                return RUNNER_OK;
            }
        }

        if (r->elements == 0
            || runner_store_page_after(r, from, sizeof(from)) != RUNNER_OK)
        {
            i = r->elements;
            freeReplyObject(r);
            return i == 0 ? RUNNER_OK : RUNNER_ERR;
        }

        freeReplyObject(r);
    }

    return RUNNER_OK;
}


/* an entry, newest first: the last stored log timestamp, and how many
 * lines have it */
static int
runner_store_last_ts_entry(void *data, redisReply *e)
{
    runner_run_t  *run = data;
    redisReply    *dts;

    dts = runner_store_entry_field(e, "dts");

    if (dts == NULL || dts->len >= sizeof(run->last_ts)
        || memchr(dts->str, '\0', dts->len) != NULL)
    {
        return RUNNER_OK;
    }

    if (run->last_ts[0] == '\0') {
        memcpy(run->last_ts, dts->str, dts->len + 1);
    }

    if (strcmp(dts->str, run->last_ts) != 0) {
        return RUNNER_AGAIN;
    }

    run->last_ts_count++;

    return RUNNER_OK;
}


/*
 * Where to resume following a container's log: the last stored Docker
 * timestamp, and how many lines at exactly that timestamp were stored
 * (Docker's `since` is inclusive).  Read backwards a page at a time:
 * lines stored at one timestamp are few; events without dts (egress,
 * warnings) may be many, so the look back is bounded.
 */
int
runner_store_last_log_ts(runner_store_t *st, runner_run_t *run)
{
    run->last_ts[0] = '\0';
    run->last_ts_count = 0;

    return runner_store_events_each(st, run->id, 0, RUNNER_EVENTS_LOOKBACK,
                                    runner_store_last_ts_entry, run);
}


typedef struct {
    runner_event_pt   on_event;
    void             *data;
} runner_replay_t;


static int
runner_store_replay_entry(void *data, redisReply *e)
{
    runner_replay_t  *rp = data;
    redisReply       *d;

    d = runner_store_entry_field(e, "data");

    if (d) {
        rp->on_event(rp->data, d->str, d->len,
                     runner_store_entry_field(e, "dts") != NULL);
    }

    return RUNNER_OK;
}


/* the run's stored events in order: each one's data to on_event, with
 * whether it came from the container log (dts) */
int
runner_store_replay(runner_store_t *st, const char *run_id,
    runner_event_pt on_event, void *data)
{
    runner_replay_t  rp;

    rp.on_event = on_event;
    rp.data = data;

    return runner_store_events_each(st, run_id, 1, INT_MAX,
                                    runner_store_replay_entry, &rp);
}


/* the janitor: sessions due by now (at most max of them, ids valid) */
int
runner_store_sessions_due(runner_store_t *st, int64_t now,
    char ids[][SMCP_ID_LEN + 1], int max, int *n)
{
    char         sessions[RUNNER_KEY_MAX], until[32], count[32];
    size_t       i;
    const char  *argv[7];
    redisReply  *r, *e;

    RUNNER_KEY0(sessions, SMCP_KEY_SESSIONS);
    RUNNER_NUM(until, now);
    RUNNER_NUM(count, max);

    argv[0] = "ZRANGEBYSCORE";
    argv[1] = sessions;
    argv[2] = "-inf";
    argv[3] = until;
    argv[4] = "LIMIT";
    argv[5] = "0";
    argv[6] = count;

    *n = 0;
    r = runner_store_argv(st, 7, argv, NULL);

    if (!runner_store_array(r, -1) || r->elements > (size_t) max) {
        if (r) {
            freeReplyObject(r);
        }
        return RUNNER_ERR;
    }

    for (i = 0; i < r->elements; i++) {
        e = r->element[i];

        /* it names a Docker volume: only a session id */
        if (runner_store_str(e)
            && smcp_valid_id(e->str, e->len, SMCP_SESSION_ID_PREFIX))
        {
            memcpy(ids[(*n)++], e->str, e->len + 1);
        }
    }

    i = r->elements;
    freeReplyObject(r);

    return i == (size_t) max ? RUNNER_AGAIN : RUNNER_OK;
}


/* janitor_begin.lua / janitor_end.lua on one session: the answer */
static int
runner_store_janitor(runner_store_t *st, int script, const char *id,
    char *status, size_t slen)
{
    char         key[RUNNER_KEY_MAX], second[RUNNER_KEY_MAX];
    char         sessions[RUNNER_KEY_MAX], now[32], arg[32];
    const char  *keys[3], *args[4];

    RUNNER_KEY(key, SMCP_KEY_SESSION, id);
    RUNNER_KEY0(sessions, SMCP_KEY_SESSIONS);
    RUNNER_NUM(now, smcp_now_ms());

    if (script == RUNNER_LUA_JANITOR_BEGIN) {
        RUNNER_KEY(second, SMCP_KEY_SESSION_ACTIVE, id);
        RUNNER_NUM(arg, RUNNER_JANITOR_STALE_MS);

    } else {
        RUNNER_KEY(second, SMCP_KEY_SESSION_RUNS, id);
        RUNNER_NUM(arg, SMCP_DEFAULT_RETENTION);
    }

    keys[0] = key;
    keys[1] = second;
    keys[2] = sessions;
    args[0] = id;
    args[1] = now;
    args[2] = runner_config->instance;
    args[3] = arg;

    return runner_store_script_status(st,
               runner_store_script(st, script, 3, keys, 4, args, NULL),
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
