/*
 * Completion notifications (notify.c), their Redis side: the runs due in
 * `notify` (scored by when the next attempt is, ms), an attempt claimed
 * (common/scripts/notify_claim.lua), what a message is made of read back
 * from the run hash (bounded: every value is hostile), and an attempt's
 * result with its `notify` event (notify_result.lua).
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store.h"


int
runner_store_notify_due(runner_store_t *st, int64_t now,
    char ids[][SMCP_ID_LEN + 1], int max, int *n)
{
    char  notify[RUNNER_KEY_MAX];

    RUNNER_KEY0(notify, SMCP_KEY_NOTIFY);

    return runner_store_due_ids(st, notify, SMCP_RUN_ID_PREFIX, 1, now, ids,
                                max, n);
}


/*
 * A value into buf: cut to fit at a character's boundary (a value longer
 * than buf holds loses its end: one byte over a cap of size - 2 says it
 * was longer), NUL bytes made spaces, bytes of no UTF-8 character '?'.
 */
static void
runner_store_notify_value(redisReply *v, char *buf, size_t size)
{
    size_t  n, i;

    buf[0] = '\0';

    if (!runner_store_str(v) || size == 0) {
        return;
    }

    n = v->len;

    if (n > size - 1) {
        n = size - 1;

        while (n > 0 && ((unsigned char) v->str[n] & 0xc0) == 0x80) {
            n--;
        }
    }

    memcpy(buf, v->str, n);
    buf[n] = '\0';

    for (i = 0; i < n; i++) {
        if (buf[i] == '\0') {
            buf[i] = ' ';
        }
    }

    smcp_utf8_sanitize(buf, n);
}


/*
 * The claim: RUNNER_OK with c filled ({'ok', attempt, delivery, first}),
 * RUNNER_AGAIN with the script's word in status ("gone", "taken"),
 * RUNNER_ERR.
 */
int
runner_store_notify_claim(runner_store_t *st, const char *run_id,
    int64_t now, const char *delivery, runner_notify_claim_t *c,
    char *status, size_t slen)
{
    char         notify[RUNNER_KEY_MAX], run[RUNNER_KEY_MAX];
    char         ms[RUNNER_NUM_MAX], lease[RUNNER_NUM_MAX];
    char         first[RUNNER_NUM_MAX], *end;
    const char  *keys[] = { notify, run };
    const char  *args[] = { run_id, ms, lease, delivery };
    redisReply  *r;

    RUNNER_KEY0(notify, SMCP_KEY_NOTIFY);
    RUNNER_KEY(run, SMCP_KEY_RUN, run_id);
    RUNNER_NUM(ms, now);
    RUNNER_NUM(lease, RUNNER_NOTIFY_LEASE_MS);

    r = runner_store_script(st, RUNNER_LUA_NOTIFY_CLAIM, 2, keys, 4, args,
                            NULL);

    if (r == NULL) {
        snprintf(status, slen, "%s", st->err);
        return RUNNER_ERR;
    }

    if (runner_store_str(r)) {
        snprintf(status, slen, "%s", r->str);
        freeReplyObject(r);
        return RUNNER_AGAIN;
    }

    if (!runner_store_array(r, 4) || !runner_store_str(r->element[0])
        || strcmp(r->element[0]->str, "ok") != 0
        || r->element[1]->type != REDIS_REPLY_INTEGER)
    {
        snprintf(status, slen, "redis: notify_claim: an unexpected answer");
        freeReplyObject(r);
        return RUNNER_ERR;
    }

    c->attempt = r->element[1]->integer;
    runner_store_notify_value(r->element[2], c->delivery,
                              sizeof(c->delivery));
    runner_store_notify_value(r->element[3], first, sizeof(first));

    c->first = strtoll(first, &end, 10);

    if (first[0] < '0' || first[0] > '9' || *end != '\0' || c->first < 0) {
        c->first = 0;
    }

    freeReplyObject(r);
    snprintf(status, slen, "ok");

    return RUNNER_OK;
}


/* the run hash's fields a message is made of, each into its buffer */
int
runner_store_notify_read(runner_store_t *st, const char *run_id,
    runner_notify_run_t *m)
{
    size_t       i, n;
    const char  *names[13];
    redisReply  *r;

    struct {
        const char  *field;
        char        *buf;
        size_t       size;
    } f[] = {
        { "notify_url", m->url, sizeof(m->url) },
        { "notify_format", m->format, sizeof(m->format) },
        { "notify_ttl", m->ttl, sizeof(m->ttl) },
        { "status", m->status, sizeof(m->status) },
        { "task", m->task, sizeof(m->task) },
        { "title", m->title, sizeof(m->title) },
        { "error", m->error, sizeof(m->error) },
        { "diff_stat", m->diff_stat, sizeof(m->diff_stat) },
        { "pr_url", m->pr_url, sizeof(m->pr_url) },
        { "session", m->session, sizeof(m->session) },
        { "tenant", m->tenant, sizeof(m->tenant) },
        { "finished_at", m->finished_at, sizeof(m->finished_at) },
        { "watch_base", m->page, sizeof(m->page) },
    };

    n = sizeof(f) / sizeof(f[0]);

    for (i = 0; i < n; i++) {
        names[i] = f[i].field;
    }

    r = runner_store_run_fields(st, run_id, (int) n, names);

    if (r == NULL) {
        return RUNNER_ERR;
    }

    for (i = 0; i < n; i++) {
        runner_store_notify_value(r->element[i], f[i].buf, f[i].size);
    }

    freeReplyObject(r);

    return RUNNER_OK;
}


int
runner_store_notify_result(runner_store_t *st, const char *run_id,
    long long attempt, const char *result, int64_t next, const char *data,
    char *status, size_t slen)
{
    char         notify[RUNNER_KEY_MAX], run[RUNNER_KEY_MAX];
    char         events[RUNNER_KEY_MAX], chan[RUNNER_KEY_MAX];
    char         n[RUNNER_NUM_MAX], at[RUNNER_NUM_MAX], now[RUNNER_NUM_MAX];
    const char  *keys[] = { notify, run, events, chan };
    const char  *args[] = { run_id, n, result, at, data, now,
                            SMCP_EVENTS_MAXLEN };

    RUNNER_KEY0(notify, SMCP_KEY_NOTIFY);
    RUNNER_KEY(run, SMCP_KEY_RUN, run_id);
    RUNNER_KEY(events, SMCP_KEY_RUN_EVENTS, run_id);
    RUNNER_KEY(chan, SMCP_CHAN_RUN, run_id);
    RUNNER_NUM(n, attempt);
    RUNNER_NUM(at, next);
    RUNNER_NUM(now, smcp_now_ms());

    return runner_store_script_status(st,
               runner_store_script(st, RUNNER_LUA_NOTIFY_RESULT, 4, keys, 7,
                                   args, NULL),
               status, slen);
}
