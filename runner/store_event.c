/*
 * A run's events (run:{id}:events): one stored (with the bytes it adds to
 * the run's budget, and a ping on the run's channel), and the stored ones
 * read a page at a time: the newest log timestamp (a re-attached run goes
 * on after it) and the replay of what was stored.
 */

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store.h"


/*
 * An event; `count` more bytes in the run's event_bytes; with a tenant,
 * what it holds in Redis (its data and RUNNER_EVENT_BYTES) added to the
 * run's `bytes` and to the tenant's usage, whose new `bytes` go to *usage
 * (-1: no tenant).  Pipelined, with the ping for watchers.
 */
int
runner_store_event(runner_store_t *st, const char *run_id,
    const char *tenant, const char *type, const char *data, size_t len,
    const char *dts, size_t count, int64_t *usage)
{
    char         events[RUNNER_KEY_MAX], chan[RUNNER_KEY_MAX];
    char         key[RUNNER_KEY_MAX], ukey[RUNNER_KEY_MAX], now[32];
    char         cnt[32], held[32];
    const char  *argv[14];
    size_t       lens[14];
    redisReply  *r;
    int          i, n, rc, replies, at_usage;

    if (runner_store_moved(st)) {
        return RUNNER_ERR;
    }

    RUNNER_KEY(events, SMCP_KEY_RUN_EVENTS, run_id);
    RUNNER_KEY(chan, SMCP_CHAN_RUN, run_id);
    RUNNER_KEY(key, SMCP_KEY_RUN, run_id);
    RUNNER_NUM(now, smcp_now_ms());
    RUNNER_NUM(cnt, count);
    RUNNER_NUM(held, len + RUNNER_EVENT_BYTES);

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

    at_usage = -1;

    /* what the tenant's usage gains, the run's `bytes` too: the same */
    if (tenant && tenant[0]) {
        RUNNER_KEY(ukey, SMCP_KEY_TENANT_USAGE, tenant);
        redisAppendCommand(st->c, "HINCRBY %s bytes %s", key, held);
        redisAppendCommand(st->c, "HINCRBY %s bytes %s", ukey, held);
        at_usage = count ? 3 : 2;   /* after XADD, event_bytes, bytes */
        replies += 2;
    }

    redisAppendCommand(st->c, "PUBLISH %s event", chan);

    rc = RUNNER_OK;
    *usage = -1;

    for (i = 0; i < replies; i++) {
        if (redisGetReply(st->c, (void **) &r) != REDIS_OK) {
            snprintf(st->err, sizeof(st->err), "redis: %s", st->c->errstr);
            return RUNNER_ERR;
        }

        if (r->type == REDIS_REPLY_ERROR) {
            runner_store_demoted(st, r);
            snprintf(st->err, sizeof(st->err), "redis: storing an event: "
                     "%.200s", r->str);
            rc = RUNNER_ERR;

        } else if (i == at_usage && r->type == REDIS_REPLY_INTEGER) {
            *usage = r->integer;
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
