/*
 * A run's hash: its fields read (checked, bounded), its attempts counted,
 * and the scripts that change its status: claim (with the limits the run
 * waits on), running and finish.  The keys those scripts are handed come
 * from the run's own hash (runner_store_run_keys).
 */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store.h"


/* fields of a run hash (HMGET): an array of n replies; NULL on failure
 * (st->err) */
redisReply *
runner_store_run_fields(runner_store_t *st, const char *run_id, int n,
    const char **fields)
{
    int          i;
    char         key[RUNNER_KEY_MAX];
    const char  *argv[RUNNER_STORE_ARGS];
    redisReply  *r;

    if (n + 2 > RUNNER_STORE_ARGS) {
        snprintf(st->err, sizeof(st->err), "redis: HMGET: too many fields");
        return NULL;
    }

    RUNNER_KEY(key, SMCP_KEY_RUN, run_id);
    argv[0] = "HMGET";
    argv[1] = key;

    for (i = 0; i < n; i++) {
        argv[2 + i] = fields[i];
    }

    r = runner_store_argv(st, n + 2, argv, NULL);

    if (!runner_store_array(r, n)) {
        if (r) {
            snprintf(st->err, sizeof(st->err), "redis: HMGET: not an array "
                     "of %d", n);
            freeReplyObject(r);
        }
        return NULL;
    }

    return r;
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
    redisReply  *r, *v;

    for (i = 0; i < n; i++) {
        vals[i][0] = '\0';
    }

    r = runner_store_run_fields(st, run_id, n, fields);

    if (r == NULL) {
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


/* a number of the run hash: USD as text; absent, "0" or not one: 0 */
static double
runner_store_usd(const char *v)
{
    char    *end;
    double   d;

    d = strtod(v, &end);

    return (v[0] && *end == '\0' && isfinite(d) && d > 0) ? d : 0;
}


/* the run's spend cap, its metered cost (the egress's) and its cancel
 * (the watchdog's look, every second) */
int
runner_store_limits(runner_store_t *st, const char *run_id, int *cancel,
    runner_spend_t *spend)
{
    char         v[3][RUNNER_NUM_MAX], *vals[3];
    const char  *fields[3] = { "cancel_requested", "max_cost",
                               "metered_cost" };

    vals[0] = v[0];
    vals[1] = v[1];
    vals[2] = v[2];

    if (runner_store_fields(st, run_id, 3, fields, vals, sizeof(v[0]))
        != RUNNER_OK)
    {
        return RUNNER_ERR;
    }

    *cancel = strcmp(v[0], "1") == 0;
    spend->max = runner_store_usd(v[1]);
    spend->metered = runner_store_usd(v[2]);

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


/* the keys of a run's scripts, from its hash (tenant, session checked:
 * they are part of key names; '' when absent or malformed) */
typedef struct {
    char        run[RUNNER_KEY_MAX];
    char        events[RUNNER_KEY_MAX];
    char        chan[RUNNER_KEY_MAX];
    char        diff[RUNNER_KEY_MAX];
    char        active[RUNNER_KEY_MAX];     /* session:{id}:active */
    char        forks[RUNNER_KEY_MAX];      /* session:{id}:forks */
    char        runs[RUNNER_KEY_MAX];       /* session:{id}:runs */
    char        session[RUNNER_KEY_MAX];    /* session:{id} */
    char        started[RUNNER_KEY_MAX];    /* tenant:{t}:started */
    char        claimed[RUNNER_KEY_MAX];    /* tenant:{t}:claimed */
    char        sessions[RUNNER_KEY_MAX];   /* tenant:{t}:sessions */
    char        tchan[RUNNER_KEY_MAX];      /* channel tenant:{t} */
    char        usage[RUNNER_KEY_MAX];      /* tenant:{t}:usage */
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
    k->forks[0] = '\0';
    k->started[0] = k->claimed[0] = k->tenant[0] = k->created_at[0] = '\0';
    k->sessions[0] = '\0';
    k->tchan[0] = '\0';
    k->usage[0] = '\0';

    if (smcp_valid_id(v[1], strlen(v[1]), SMCP_SESSION_ID_PREFIX)) {
        strcpy(k->session_id, v[1]);
        RUNNER_KEY(k->active, SMCP_KEY_SESSION_ACTIVE, v[1]);
        RUNNER_KEY(k->forks, SMCP_KEY_SESSION_FORKS, v[1]);
        RUNNER_KEY(k->runs, SMCP_KEY_SESSION_RUNS, v[1]);
        RUNNER_KEY(k->session, SMCP_KEY_SESSION, v[1]);
    }

    if (smcp_valid_tenant(v[0], strlen(v[0]))) {
        strcpy(k->tenant, v[0]);
        RUNNER_KEY(k->started, SMCP_KEY_TENANT_STARTED, v[0]);
        RUNNER_KEY(k->claimed, SMCP_KEY_TENANT_CLAIMED, v[0]);
        RUNNER_KEY(k->sessions, SMCP_KEY_TENANT_SESSIONS, v[0]);
        RUNNER_KEY(k->tchan, SMCP_CHAN_TENANT, v[0]);
        RUNNER_KEY(k->usage, SMCP_KEY_TENANT_USAGE, v[0]);
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
int
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
 * Claim (common/scripts/claim.lua): the run is still `started`, it is
 * the first unfinished run of its session, the tenant is under its running
 * limit, no other runner has it.  A claim names this process (not just
 * the consumer: two runners given the same --name must not both start a
 * run); a claim that never got its run going (its runner died starting
 * it) goes stale after --claim-idle; a session being forked waits for
 * the fork's copy ("forking").  The keys come from the run hash.
 * A "wait" or "limit" caused by a member whose run ended (what a status
 * change missed) is cleared, and the claim tried again.
 */
int
runner_store_claim(runner_store_t *st, const char *run_id, char *status,
    size_t slen)
{
    int                rc, try;
    char               now[32], stale[32];
    const char        *keys[5], *args[4];
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
    keys[4] = k.forks;
    args[0] = run_id;
    args[1] = runner_config->instance;
    args[2] = now;
    args[3] = stale;

    for (try = 0; /* void */ ; try++) {
        RUNNER_NUM(now, smcp_now_ms());

        rc = runner_store_script_status(st,
                 runner_store_script(st, RUNNER_LUA_CLAIM, 5, keys, 4, args,
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

        } else if (strcmp(status, "forking") == 0) {
            /* a fork's run that ended (cancelled before its copy) holds
             * the session no more */
            rc = runner_store_prune(st, k.forks, 1) > 0 ? RUNNER_OK
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


/* `running` the moment its container runs (common/scripts/running.lua) */
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
 * The outcome, once (common/scripts/finish.lua): the run hash, its
 * diff and the diff's summary, the last event; the run leaves its session's
 * active set and its tenant's sets, its keys get their retention, its
 * session is bumped; a run with a notify_url is due for its completion
 * notification (`notify`).
 */
int
runner_store_finish(runner_store_t *st, runner_run_t *run,
    const char *status, int exit_code, const char *error,
    const runner_diff_t *diff, const runner_pr_t *pr)
{
    int                n, i;
    char               sessions[RUNNER_KEY_MAX], now[32], num[8][32];
    char               expiry[RUNNER_KEY_MAX], notify[RUNNER_KEY_MAX];
    char              *files, *index;
    size_t             lens[RUNNER_STORE_ARGS];
    const char        *keys[14], *args[RUNNER_STORE_ARGS];
    redisReply        *r;
    runner_run_keys_t  k;
    runner_outcome_t  *o = &run->out;

    if (runner_store_run_keys(st, run->id, &k) != RUNNER_OK) {
        return RUNNER_ERR;
    }

    RUNNER_KEY0(sessions, SMCP_KEY_SESSIONS);
    RUNNER_KEY0(expiry, SMCP_KEY_BUDGET_EXPIRY);
    RUNNER_KEY0(notify, SMCP_KEY_NOTIFY);
    RUNNER_NUM(now, smcp_now_ms());

    keys[0] = k.run;
    keys[1] = k.events;
    keys[2] = k.chan;
    keys[3] = o->diff && !run->diff_dropped ? k.diff : "";
    keys[4] = k.active;
    keys[5] = k.started;
    keys[6] = k.claimed;
    keys[7] = k.session;
    keys[8] = sessions;
    keys[9] = k.sessions;
    keys[10] = k.tchan;
    keys[11] = k.usage;
    keys[12] = expiry;
    keys[13] = notify;

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
    RUNNER_FV("diff_truncated",
              o->diff_truncated || run->diff_dropped ? "1" : "0");

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
    if (o->diff && !run->diff_dropped) {
        args[n] = o->diff;
        lens[n] = o->diff_len;
        n++;
    }

    r = runner_store_script(st, RUNNER_LUA_FINISH, 14, keys, n, args, lens);
    free(files);
    free(index);

    if (r == NULL) {
        runner_log("error", run->id, "storing the outcome: %s", st->err);
        return RUNNER_ERR;
    }

    freeReplyObject(r);

    return RUNNER_OK;
}
