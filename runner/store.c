/*
 * Redis: the queue, run state and events.  Each thread owns its own
 * connection (hiredis is blocking here: the runner is a daemon with a
 * thread per run, not an event loop).  Every status change is one Lua
 * script, one atomic step.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "runner.h"
#include "runner_scripts.h"


#define RUNNER_KEY(buf, fmt, arg)                                             \
    snprintf(buf, sizeof(buf), fmt, runner_config->prefix, arg)
#define RUNNER_QUEUE(buf)                                                     \
    snprintf(buf, sizeof(buf), SMCP_KEY_QUEUE, runner_config->prefix)


/* AUTH with the configured password (its bytes, never in an error) */
static int
runner_store_auth(redisContext *c, char *err, size_t errlen)
{
    const char  *argv[2];
    size_t       lens[2];
    redisReply  *r;
    int          rc;

    argv[0] = "AUTH";
    lens[0] = 4;
    argv[1] = (const char *) runner_config->redis_password.data;
    lens[1] = runner_config->redis_password.len;

    r = redisCommandArgv(c, 2, argv, lens);

    if (r == NULL) {
        snprintf(err, errlen, "redis: AUTH: %s", c->errstr);
        return RUNNER_ERR;
    }

    rc = RUNNER_OK;

    if (r->type == REDIS_REPLY_ERROR) {
        /* the server's words ("WRONGPASS invalid username-password
         * pair"), never the password */
        snprintf(err, errlen, "redis: AUTH refused: %.100s", r->str);
        rc = RUNNER_ERR;
    }

    freeReplyObject(r);

    return rc;
}


redisContext *
runner_store_connect(char *err, size_t errlen)
{
    redisContext    *c;
    struct timeval   tv = { 5, 0 };

    if (runner_config->redis_unix[0]) {
        c = redisConnectUnixWithTimeout(runner_config->redis_unix, tv);

    } else {
        c = redisConnectWithTimeout(runner_config->redis_host,
                                    runner_config->redis_port, tv);
    }

    if (c == NULL || c->err) {
        snprintf(err, errlen, "redis: %s",
                 c ? c->errstr : "out of memory");
        if (c) {
            redisFree(c);
        }
        return NULL;
    }

    /* replies may take a blocking read's time plus a margin */
    tv.tv_sec = 15;
    redisSetTimeout(c, tv);

    if (runner_config->redis_password.len
        && runner_store_auth(c, err, errlen) != RUNNER_OK)
    {
        redisFree(c);
        return NULL;
    }

    return c;
}


static redisReply *
runner_store_cmd(redisContext *c, int argc, const char **argv)
{
    size_t   lens[64];
    int      i;

    for (i = 0; i < argc && i < 64; i++) {
        lens[i] = strlen(argv[i]);
    }

    return redisCommandArgv(c, argc, argv, lens);
}


int
runner_store_init_group(redisContext *c, char *err, size_t errlen)
{
    char         queue[128];
    redisReply  *r;

    RUNNER_QUEUE(queue);

    /* from the start of the stream: runs queued before any runner existed
     * are not lost */
    r = redisCommand(c, "XGROUP CREATE %s %s 0 MKSTREAM", queue,
                     SMCP_QUEUE_GROUP);

    if (r == NULL) {
        snprintf(err, errlen, "redis: %s", c->errstr);
        return RUNNER_ERR;
    }

    if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "BUSYGROUP", 9) != 0)
    {
        snprintf(err, errlen, "redis: %s", r->str);
        freeReplyObject(r);
        return RUNNER_ERR;
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
runner_store_identity(redisContext *c, char *err, size_t errlen)
{
    char         key[128], rnd[33];
    redisReply  *r;

    snprintf(key, sizeof(key), "%sstore-id", runner_config->prefix);

    if (smcp_random_hex(rnd, 16) != SMCP_OK) {
        snprintf(err, errlen, "no randomness");
        return RUNNER_ERR;
    }

    r = redisCommand(c, "SET %s %s NX", key, rnd);
    if (r) {
        freeReplyObject(r);
    }

    r = redisCommand(c, "GET %s", key);

    if (r == NULL || r->type != REDIS_REPLY_STRING || r->len == 0
        || r->len >= sizeof(runner_store_ident))
    {
        snprintf(err, errlen, "redis: %s",
                 r ? "no store id" : c->errstr);
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


/* [[stream, [[id, [field, value...]]...]]] or [id, [field, value...]] */
static int
runner_store_entry(redisReply *e, char *run_id, char *stream_id)
{
    size_t       i;
    redisReply  *f;

    if (e->type != REDIS_REPLY_ARRAY || e->elements != 2
        || e->element[0]->type != REDIS_REPLY_STRING
        || e->element[0]->len >= 64)
    {
        return RUNNER_ERR;
    }

    strcpy(stream_id, e->element[0]->str);
    run_id[0] = '\0';

    f = e->element[1];

    if (f->type != REDIS_REPLY_ARRAY) {
        /* deleted from the stream meanwhile */
        return RUNNER_OK;
    }

    for (i = 0; i + 1 < f->elements; i += 2) {
        if (strcmp(f->element[i]->str, "run") == 0
            && smcp_valid_id(f->element[i + 1]->str, f->element[i + 1]->len,
                             SMCP_RUN_ID_PREFIX))
        {
            strcpy(run_id, f->element[i + 1]->str);
        }
    }

    return RUNNER_OK;
}


int
runner_store_next(redisContext *c, int block_ms, char *run_id,
    char *stream_id, int pending, char *err, size_t errlen)
{
    char         queue[128], block[32];
    redisReply  *r, *entries;
    int          rc;
    const char  *argv[11];

    RUNNER_QUEUE(queue);
    snprintf(block, sizeof(block), "%d", block_ms);

    argv[0] = "XREADGROUP";
    argv[1] = "GROUP";
    argv[2] = SMCP_QUEUE_GROUP;
    argv[3] = runner_config->name;
    argv[4] = "COUNT";
    argv[5] = "1";

    if (pending) {
        /* our own entries not acknowledged: runs we were running */
        argv[6] = "STREAMS";
        argv[7] = queue;
        argv[8] = stream_id[0] ? stream_id : "0";
        r = runner_store_cmd(c, 9, argv);

    } else {
        argv[6] = "BLOCK";
        argv[7] = block;
        argv[8] = "STREAMS";
        argv[9] = queue;
        argv[10] = ">";
        r = runner_store_cmd(c, 11, argv);
    }

    if (r == NULL) {
        snprintf(err, errlen, "redis: %s", c->errstr);
        return RUNNER_ERR;
    }

    if (r->type == REDIS_REPLY_ERROR) {
        snprintf(err, errlen, "redis: %s", r->str);
        freeReplyObject(r);
        return RUNNER_ERR;
    }

    rc = RUNNER_AGAIN;

    if (r->type == REDIS_REPLY_ARRAY && r->elements == 1
        && r->element[0]->elements == 2)
    {
        entries = r->element[0]->element[1];

        if (entries->elements > 0
            && runner_store_entry(entries->element[0], run_id, stream_id)
               == RUNNER_OK)
        {
            rc = RUNNER_OK;
        }
    }

    freeReplyObject(r);

    return rc;
}


int
runner_store_autoclaim(redisContext *c, char *run_id, char *stream_id,
    char *err, size_t errlen)
{
    char         queue[128], idle[32];
    redisReply  *r;
    int          rc;

    RUNNER_QUEUE(queue);
    snprintf(idle, sizeof(idle), "%d", runner_config->claim_idle_ms);

    /* entries whose runner went silent (it touches its own entries while
     * it lives): a runner killed with -9, a host that died */
    r = redisCommand(c, "XAUTOCLAIM %s %s %s %s 0-0 COUNT 1", queue,
                     SMCP_QUEUE_GROUP, runner_config->name, idle);

    if (r == NULL) {
        snprintf(err, errlen, "redis: %s", c->errstr);
        return RUNNER_ERR;
    }

    rc = RUNNER_AGAIN;

    if (r->type == REDIS_REPLY_ARRAY && r->elements >= 2
        && r->element[1]->type == REDIS_REPLY_ARRAY
        && r->element[1]->elements > 0
        && runner_store_entry(r->element[1]->element[0], run_id, stream_id)
           == RUNNER_OK)
    {
        rc = RUNNER_OK;
    }

    freeReplyObject(r);

    return rc;
}


int
runner_store_touch(redisContext *c, const char *stream_id)
{
    char         queue[128];
    redisReply  *r;

    RUNNER_QUEUE(queue);

    /* resets the entry's idle time: "this run is alive, leave it" */
    r = redisCommand(c, "XCLAIM %s %s %s 0 %s JUSTID", queue,
                     SMCP_QUEUE_GROUP, runner_config->name, stream_id);

    if (r == NULL) {
        return RUNNER_ERR;
    }

    freeReplyObject(r);

    return RUNNER_OK;
}


int
runner_store_ack(redisContext *c, const char *stream_id)
{
    char         queue[128];
    redisReply  *r;

    RUNNER_QUEUE(queue);

    r = redisCommand(c, "XACK %s %s %s", queue, SMCP_QUEUE_GROUP,
                     stream_id);

    if (r == NULL) {
        return RUNNER_ERR;
    }

    freeReplyObject(r);

    return RUNNER_OK;
}


static int
runner_store_status_reply(redisContext *c, redisReply *r, char *status,
    size_t slen)
{
    if (r == NULL) {
        snprintf(status, slen, "%s", c->errstr);
        return RUNNER_ERR;
    }

    if (r->type == REDIS_REPLY_ERROR) {
        snprintf(status, slen, "%s", r->str);
        freeReplyObject(r);
        return RUNNER_ERR;
    }

    snprintf(status, slen, "%s", r->type == REDIS_REPLY_STRING ? r->str : "");
    freeReplyObject(r);

    return strcmp(status, "ok") == 0 ? RUNNER_OK : RUNNER_AGAIN;
}


/*
 * Claim (runner/scripts/claim.lua): the run is still `started`, earlier
 * runs of its session have ended, the tenant is under its running limit,
 * no other runner has it.  A claim names this process (not just the
 * consumer: two runners given the same --name must not both start a run);
 * a claim that never got its run going (its runner died starting it) goes
 * stale after --claim-idle.  The keys come from the run hash.
 */
int
runner_store_claim(redisContext *c, const char *run_id, char *status,
    size_t slen, char *err, size_t errlen)
{
    char         key[160], active[400], runs[160], now[32], stale[32];
    const char  *argv[11];
    redisReply  *r;

    RUNNER_KEY(key, SMCP_KEY_RUN, run_id);
    snprintf(now, sizeof(now), "%lld", (long long) smcp_now_ms());
    snprintf(stale, sizeof(stale), "%d", runner_config->claim_idle_ms);

    active[0] = runs[0] = '\0';

    r = redisCommand(c, "HMGET %s tenant session", key);
    if (r == NULL) {
        snprintf(status, slen, "%s", c->errstr);
        return RUNNER_ERR;
    }

    if (r->type == REDIS_REPLY_ARRAY && r->elements == 2) {
        if (r->element[0]->type == REDIS_REPLY_STRING
            && r->element[0]->len > 0 && r->element[0]->len <= 256)
        {
            snprintf(active, sizeof(active), SMCP_KEY_TENANT_ACTIVE,
                     runner_config->prefix, r->element[0]->str);
        }

        if (r->element[1]->type == REDIS_REPLY_STRING
            && smcp_valid_id(r->element[1]->str, r->element[1]->len,
                             SMCP_SESSION_ID_PREFIX))
        {
            RUNNER_KEY(runs, SMCP_KEY_SESSION_RUNS, r->element[1]->str);
        }
    }

    freeReplyObject(r);

    argv[0] = "EVAL";
    argv[1] = runner_lua_claim;
    argv[2] = "3";
    argv[3] = key;
    argv[4] = active;
    argv[5] = runs;
    argv[6] = run_id;
    argv[7] = runner_config->instance;
    argv[8] = runner_config->prefix;
    argv[9] = now;
    argv[10] = stale;

    return runner_store_status_reply(c, runner_store_cmd(c, 11, argv),
                                     status, slen);
}


/* the times runners took the run (claims, re-attaches), less clean
 * detaches: *n the new count */
int
runner_store_attempts(redisContext *c, const char *run_id, int delta,
    long long *n)
{
    char         key[160];
    redisReply  *r;
    int          rc;

    RUNNER_KEY(key, SMCP_KEY_RUN, run_id);

    r = redisCommand(c, "HINCRBY %s attempts %d", key, delta);
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


/* `running` the moment its container runs (runner/scripts/running.lua) */
int
runner_store_set_running(redisContext *c, const char *run_id,
    const char *container, int64_t deadline_ms, char *status, size_t slen)
{
    char  key[160], events[160], chan[160], now[32], deadline[32];

    RUNNER_KEY(key, SMCP_KEY_RUN, run_id);
    RUNNER_KEY(events, SMCP_KEY_RUN_EVENTS, run_id);
    RUNNER_KEY(chan, SMCP_CHAN_RUN, run_id);
    snprintf(now, sizeof(now), "%lld", (long long) smcp_now_ms());
    snprintf(deadline, sizeof(deadline), "%lld", (long long) deadline_ms);

    return runner_store_status_reply(c,
               redisCommand(c, "EVAL %s 3 %s %s %s %s %s %s %s",
                            runner_lua_running, key, events, chan,
                            now, container, SMCP_EVENTS_MAXLEN, deadline),
               status, slen);
}


/* the tenant's active set and the session's keys, from the run hash */
static void
runner_store_run_keys(redisContext *c, runner_run_t *run, char *active,
    size_t alen, char *session, size_t slen)
{
    char         key[160];
    redisReply  *r;

    active[0] = session[0] = '\0';

    RUNNER_KEY(key, SMCP_KEY_RUN, run->id);

    r = redisCommand(c, "HGET %s tenant", key);

    if (r && r->type == REDIS_REPLY_STRING && r->len > 0 && r->len <= 256) {
        snprintf(active, alen, SMCP_KEY_TENANT_ACTIVE, runner_config->prefix,
                 r->str);
    }

    if (r) {
        freeReplyObject(r);
    }

    if (run->session[0]) {
        snprintf(session, slen, SMCP_KEY_SESSION, runner_config->prefix,
                 run->session);
    }
}


/*
 * The outcome, once (runner/scripts/finish.lua): the run hash, its diff
 * and the diff's index, the last event; the run leaves its tenant's
 * active set, its keys get their retention, its session is bumped.
 */
int
runner_store_finish(redisContext *c, runner_run_t *run, const char *status,
    int exit_code, const char *error)
{
    char         key[160], events[160], chan[160], diffkey[160], now[32];
    char         active[400], session[160], sessions[160], num[8][32];
    char        *files_s, *index_s;
    const char  *argv[64];
    size_t       lens[64];
    int          n, i, rc;
    json_t      *files, *index;
    redisReply  *r;
    runner_outcome_t *o = &run->out;

    RUNNER_KEY(key, SMCP_KEY_RUN, run->id);
    RUNNER_KEY(events, SMCP_KEY_RUN_EVENTS, run->id);
    RUNNER_KEY(chan, SMCP_CHAN_RUN, run->id);
    RUNNER_KEY(diffkey, SMCP_KEY_RUN_DIFF, run->id);
    snprintf(sessions, sizeof(sessions), SMCP_KEY_SESSIONS,
             runner_config->prefix);
    snprintf(now, sizeof(now), "%lld", (long long) smcp_now_ms());

    runner_store_run_keys(c, run, active, sizeof(active), session,
                          sizeof(session));

    index = NULL;
    files = runner_outcome_diff_walk(o->diff, o->diff_len, &index);
    files_s = json_dumps(files, JSON_COMPACT);
    index_s = json_dumps(index, JSON_COMPACT);
    json_decref(files);
    json_decref(index);

    n = 0;
    argv[n++] = "EVAL";
    argv[n++] = runner_lua_finish;
    argv[n++] = "7";
    argv[n++] = key;
    argv[n++] = events;
    argv[n++] = chan;
    argv[n++] = o->diff ? diffkey : "";
    argv[n++] = active;
    argv[n++] = session;
    argv[n++] = sessions;
    argv[n++] = status;
    argv[n++] = now;
    argv[n++] = SMCP_EVENTS_MAXLEN;
    argv[n++] = run->id;
    argv[n++] = run->session;

#define RUNNER_FV(f, v)  argv[n++] = f; argv[n++] = v
#define RUNNER_FI(f, i, v)                                                    \
    snprintf(num[i], sizeof(num[i]), "%lld", (long long) (v));                \
    RUNNER_FV(f, num[i])

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
    RUNNER_FV("files_changed", files_s ? files_s : "[]");
    RUNNER_FV("diff_index", index_s ? index_s : "{}");
    RUNNER_FV("diff_truncated", o->diff_truncated ? "1" : "0");

    for (i = 0; i < n; i++) {
        lens[i] = strlen(argv[i]);
    }

    /* the diff, last (binary-safe length): the script SETs ARGV[#ARGV] */
    if (o->diff) {
        argv[n] = o->diff;
        lens[n] = o->diff_len;
        n++;
    }

#undef RUNNER_FV
#undef RUNNER_FI

    r = redisCommandArgv(c, n, argv, lens);
    free(files_s);
    free(index_s);

    if (r == NULL) {
        return RUNNER_ERR;
    }

    rc = (r->type == REDIS_REPLY_ERROR) ? RUNNER_ERR : RUNNER_OK;

    if (rc != RUNNER_OK) {
        runner_log("error", run->id, "storing the outcome: %s", r->str);
    }

    freeReplyObject(r);

    return rc;
}


/* an event; `count` more bytes in the run's event_bytes (pipelined) */
int
runner_store_event(redisContext *c, const char *run_id, const char *type,
    const char *data, size_t len, const char *dts, size_t count)
{
    char         events[160], chan[160], key[160], now[32];
    const char  *argv[14];
    size_t       lens[14];
    redisReply  *r;
    int          i, n, rc, replies;

    RUNNER_KEY(events, SMCP_KEY_RUN_EVENTS, run_id);
    RUNNER_KEY(chan, SMCP_CHAN_RUN, run_id);
    RUNNER_KEY(key, SMCP_KEY_RUN, run_id);
    snprintf(now, sizeof(now), "%lld", (long long) smcp_now_ms());

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
    redisAppendCommandArgv(c, n, argv, lens);
    replies = 2;

    if (count) {
        redisAppendCommand(c, "HINCRBY %s event_bytes %lld", key,
                           (long long) count);
        replies++;
    }

    redisAppendCommand(c, "PUBLISH %s event", chan);

    rc = RUNNER_OK;

    for (i = 0; i < replies; i++) {
        if (redisGetReply(c, (void **) &r) != REDIS_OK) {
            return RUNNER_ERR;
        }

        if (r->type == REDIS_REPLY_ERROR) {
            rc = RUNNER_ERR;
        }

        freeReplyObject(r);
    }

    return rc;
}


int
runner_store_hget(redisContext *c, const char *run_id, const char *field,
    char *buf, size_t size)
{
    char         key[160];
    redisReply  *r;

    RUNNER_KEY(key, SMCP_KEY_RUN, run_id);

    r = redisCommand(c, "HGET %s %s", key, field);
    if (r == NULL) {
        return RUNNER_ERR;
    }

    buf[0] = '\0';

    if (r->type == REDIS_REPLY_STRING) {
        snprintf(buf, size, "%s", r->str);
    }

    freeReplyObject(r);

    return RUNNER_OK;
}


json_t *
runner_store_run(redisContext *c, const char *run_id)
{
    char         key[160];
    size_t       i;
    json_t      *o;
    redisReply  *r;

    RUNNER_KEY(key, SMCP_KEY_RUN, run_id);

    r = redisCommand(c, "HGETALL %s", key);
    if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements == 0) {
        if (r) {
            freeReplyObject(r);
        }
        return NULL;
    }

    o = json_object();

    for (i = 0; i + 1 < r->elements; i += 2) {
        smcp_utf8_sanitize(r->element[i + 1]->str, r->element[i + 1]->len);
        json_object_set_new(o, r->element[i]->str,
                            json_stringn(r->element[i + 1]->str,
                                         r->element[i + 1]->len));
    }

    freeReplyObject(r);

    return o;
}


/*
 * Where to resume following a container's log: the last stored Docker
 * timestamp, and how many lines at exactly that timestamp were stored
 * (Docker's `since` is inclusive).  Read backwards a page at a time.
 */
int
runner_store_last_log_ts(redisContext *c, runner_run_t *run)
{
    char         events[160], from[80];
    size_t       i, j;
    redisReply  *r, *f, *e;
    const char  *dts;
    int          pages;

    RUNNER_KEY(events, SMCP_KEY_RUN_EVENTS, run->id);

    run->last_ts[0] = '\0';
    run->last_ts_count = 0;
    strcpy(from, "+");

    /* lines stored at one timestamp are few; events without dts (egress,
     * warnings) may be many: a bounded look back */
    for (pages = 0; pages < 1000; pages++) {
        r = redisCommand(c, "XREVRANGE %s %s - COUNT 100", events, from);

        if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
            if (r) {
                freeReplyObject(r);
            }
            return RUNNER_ERR;
        }

        if (r->elements == 0) {
            freeReplyObject(r);
            return RUNNER_OK;
        }

        for (i = 0; i < r->elements; i++) {
            e = r->element[i];

            if (e->type != REDIS_REPLY_ARRAY || e->elements != 2
                || e->element[1]->type != REDIS_REPLY_ARRAY)
            {
                continue;
            }

            f = e->element[1];
            dts = NULL;

            for (j = 0; j + 1 < f->elements; j += 2) {
                if (f->element[j]->type == REDIS_REPLY_STRING
                    && f->element[j + 1]->type == REDIS_REPLY_STRING
                    && strcmp(f->element[j]->str, "dts") == 0
                    && f->element[j + 1]->len < sizeof(run->last_ts))
                {
                    dts = f->element[j + 1]->str;
                }
            }

            if (dts == NULL) {
                continue;
            }

            if (run->last_ts[0] == '\0') {
                strcpy(run->last_ts, dts);
            }

            if (strcmp(dts, run->last_ts) != 0) {
                freeReplyObject(r);
                return RUNNER_OK;
            }

            run->last_ts_count++;
        }

        e = r->element[r->elements - 1];

        if (e->type != REDIS_REPLY_ARRAY || e->elements != 2
            || e->element[0]->type != REDIS_REPLY_STRING
            || e->element[0]->len > 60)
        {
            freeReplyObject(r);
            return RUNNER_ERR;
        }

        snprintf(from, sizeof(from), "(%s", e->element[0]->str);
        freeReplyObject(r);
    }

    return RUNNER_OK;
}
