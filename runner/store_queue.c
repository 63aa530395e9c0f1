/*
 * The queue (SMCP_KEY_QUEUE) and the runners' consumer group: the group
 * made once, the next entry for this consumer (a new one, or one another
 * runner left pending past --claim-idle), entries touched while their run
 * goes on and acknowledged when it ends, and the queue's depth and lag
 * for the metrics.
 */

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store.h"


static void runner_store_trim_queue(runner_store_t *st);
static redisReply *runner_store_info_field(redisReply *r, const char *name);

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

    runner_store_trim_queue(st);

    return RUNNER_OK;
}


/*
 * The entries acknowledged before acks deleted them (runners of 0.1.0
 * left every one in the stream): the stream cut below both the oldest
 * pending entry and the first not yet delivered.  The group is read
 * first, the pending entries second, so an entry delivered in between is
 * above the cut.  Best effort: a failure leaves the stream as it was.
 */
static void
runner_store_trim_queue(runner_store_t *st)
{
    char         queue[RUNNER_KEY_MAX], cut[RUNNER_STREAM_ID_SIZE + 24];
    char         ms[RUNNER_STREAM_ID_SIZE + 1];
    const char  *info[] = { "XINFO", "GROUPS", queue };
    const char  *pend[] = { "XPENDING", queue, SMCP_QUEUE_GROUP };
    const char  *trim[] = { "XTRIM", queue, "MINID", cut };
    redisReply  *r, *g, *v;
    size_t       i;
    unsigned long long  seq;

    RUNNER_KEY0(queue, SMCP_KEY_QUEUE);
    cut[0] = '\0';

    r = runner_store_argv(st, 3, info, NULL);
    if (r == NULL) {
        return;
    }

    for (i = 0; runner_store_array(r, -1) && i < r->elements; i++) {
        g = r->element[i];

        if (!runner_store_array(g, -1)
            || !runner_store_str(v = runner_store_info_field(g, "name"))
            || strcmp(v->str, SMCP_QUEUE_GROUP) != 0
            || !runner_store_str(v = runner_store_info_field(g,
                                                  "last-delivered-id"))
            || v->len >= RUNNER_STREAM_ID_SIZE
            || !smcp_valid_stream_id(v->str, v->len)
            || sscanf(v->str, "%[0-9]-%llu", ms, &seq) != 2
            || seq == ULLONG_MAX)
        {
            continue;
        }

        /* the first id after the last delivered one */
        snprintf(cut, sizeof(cut), "%s-%llu", ms, seq + 1);
    }

    freeReplyObject(r);

    if (cut[0] == '\0' || strcmp(cut, "0-1") == 0) {
        return;
    }

    /* [count, smallest, greatest, consumers]: the smallest lower still */
    r = runner_store_argv(st, 3, pend, NULL);
    if (r == NULL) {
        return;
    }

    if (runner_store_array(r, 4) && r->element[0]->type == REDIS_REPLY_INTEGER
        && r->element[0]->integer > 0)
    {
        v = r->element[1];

        if (!runner_store_str(v) || v->len >= RUNNER_STREAM_ID_SIZE
            || !smcp_valid_stream_id(v->str, v->len))
        {
            freeReplyObject(r);
            return;
        }

        memcpy(cut, v->str, v->len + 1);
    }

    freeReplyObject(r);

    runner_store_do(st, 4, trim);
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


/* the first of a list of stream entries (runner_store_entry); RUNNER_AGAIN
 * when it is not a list or an empty one */
static int
runner_store_first(redisReply *list, char *run_id, char *stream_id)
{
    if (!runner_store_array(list, -1) || list->elements == 0) {
        return RUNNER_AGAIN;
    }

    return runner_store_entry(list->element[0], run_id, stream_id);
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

    if (runner_store_array(s, 2)
        && runner_store_first(s->element[1], run_id, stream_id) == RUNNER_OK)
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
        && runner_store_first(r->element[1], run_id, stream_id) == RUNNER_OK)
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


/*
 * Acknowledged, then deleted: an entry whose run has ended is of no use
 * to any runner, and the stream would otherwise keep one entry per run
 * ever started (the group's lag stays exact: only entries up to its
 * last-delivered-id are deleted).  An entry left by a crash between the
 * two is a few bytes; the next ack of it deletes it.
 */
int
runner_store_ack(runner_store_t *st, const char *stream_id)
{
    char         queue[RUNNER_KEY_MAX];
    const char  *argv[3];

    if (runner_store_entry_cmd(st, 0, stream_id) != RUNNER_OK) {
        return RUNNER_ERR;
    }

    RUNNER_KEY0(queue, SMCP_KEY_QUEUE);

    argv[0] = "XDEL";
    argv[1] = queue;
    argv[2] = stream_id;

    return runner_store_do(st, 3, argv);
}
