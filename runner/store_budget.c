/*
 * The tenant's budgets in Redis (docs/contracts.md, "Tenant budgets"):
 * its usage (tenant:{t}:usage), a workspace's measure (usage_disk.lua),
 * the bytes of ended runs whose keys expired taken off (budget:expiry,
 * budget_release.lua); and what the host floor reads of Redis: its
 * memory, and the reason a queued run waits.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store.h"


/* an integer reply, or a string holding one; else 0 */
static int64_t
runner_store_int(redisReply *r)
{
    if (r->type == REDIS_REPLY_INTEGER) {
        return r->integer;
    }

    return runner_store_str(r) ? atoll(r->str) : 0;
}


int
runner_store_usage(runner_store_t *st, const char *tenant, int64_t *bytes,
    int64_t *disk)
{
    char         key[RUNNER_KEY_MAX];
    const char  *argv[4];
    redisReply  *r;

    RUNNER_KEY(key, SMCP_KEY_TENANT_USAGE, tenant);
    argv[0] = "HMGET";
    argv[1] = key;
    argv[2] = "bytes";
    argv[3] = "disk";

    r = runner_store_argv(st, 4, argv, NULL);

    if (!runner_store_array(r, 2)) {
        if (r) {
            snprintf(st->err, sizeof(st->err), "redis: HMGET: not an array");
            freeReplyObject(r);
        }
        return RUNNER_ERR;
    }

    *bytes = runner_store_int(r->element[0]);
    *disk = runner_store_int(r->element[1]);
    freeReplyObject(r);

    return RUNNER_OK;
}


int
runner_store_usage_disk(runner_store_t *st, const char *tenant,
    const char *session, int64_t bytes, int64_t *disk)
{
    char         key[RUNNER_KEY_MAX], n[32];
    const char  *keys[1], *args[2];
    redisReply  *r;

    RUNNER_KEY(key, SMCP_KEY_TENANT_USAGE, tenant);
    RUNNER_NUM(n, bytes);
    keys[0] = key;
    args[0] = session;
    args[1] = n;

    r = runner_store_script(st, RUNNER_LUA_USAGE_DISK, 1, keys, 2, args,
                            NULL);

    if (r == NULL) {
        return RUNNER_ERR;
    }

    *disk = runner_store_int(r);
    freeReplyObject(r);

    return RUNNER_OK;
}


/* "<run id> <bytes> <tenant>": RUNNER_OK with its bytes and tenant */
static int
runner_store_expired_member(redisReply *e, int64_t *bytes, char *tenant)
{
    char  *p, *end;

    if (!runner_store_str(e) || e->len < SMCP_ID_LEN + 4
        || memchr(e->str, '\0', e->len) != NULL
        || !smcp_valid_id(e->str, SMCP_ID_LEN, SMCP_RUN_ID_PREFIX)
        || e->str[SMCP_ID_LEN] != ' ')
    {
        return RUNNER_ERR;
    }

    p = e->str + SMCP_ID_LEN + 1;
    *bytes = strtoll(p, &end, 10);

    if (end == p || *end != ' ' || *bytes < 0
        || !smcp_valid_tenant(end + 1, strlen(end + 1)))
    {
        return RUNNER_ERR;
    }

    strcpy(tenant, end + 1);

    return RUNNER_OK;
}


/*
 * Ended runs whose keys have expired by now (at most RUNNER_JANITOR_BATCH
 * at a time): each one's bytes off its tenant's usage, once, whichever
 * runner gets there first.  A member that is not one of ours is dropped.
 */
int
runner_store_budget_release(runner_store_t *st, int64_t now)
{
    char          expiry[RUNNER_KEY_MAX], usage[RUNNER_KEY_MAX], n[32];
    char          tenant[SMCP_TENANT_MAX + 1];
    size_t        i, got;
    int64_t       bytes;
    const char   *argv[3], *keys[2], *args[2];
    redisReply   *r, *e;

    RUNNER_KEY0(expiry, SMCP_KEY_BUDGET_EXPIRY);

    r = runner_store_due(st, expiry, now, RUNNER_JANITOR_BATCH);

    if (r == NULL) {
        return RUNNER_ERR;
    }

    for (i = 0; i < r->elements; i++) {
        e = r->element[i];

        if (!runner_store_str(e)) {
            continue;
        }

        if (runner_store_expired_member(e, &bytes, tenant) != RUNNER_OK) {
            argv[0] = "ZREM";
            argv[1] = expiry;
            argv[2] = e->str;
            (void) runner_store_do(st, 3, argv);
            runner_log("error", NULL, "budget: a malformed member of %s "
                       "dropped", expiry);
            continue;
        }

        RUNNER_KEY(usage, SMCP_KEY_TENANT_USAGE, tenant);
        RUNNER_NUM(n, bytes);
        keys[0] = expiry;
        keys[1] = usage;
        args[0] = e->str;
        args[1] = n;

        if (runner_store_script_do(st, RUNNER_LUA_BUDGET_RELEASE, 2, keys, 2,
                                   args)
            != RUNNER_OK)
        {
            freeReplyObject(r);
            return RUNNER_ERR;
        }
    }

    got = r->elements;
    freeReplyObject(r);

    return got == RUNNER_JANITOR_BATCH ? RUNNER_AGAIN : RUNNER_OK;
}


/* a number after "name:" in INFO's text; -1 when absent */
static int64_t
runner_store_info_field(const char *info, const char *name)
{
    size_t       n;
    const char  *p;

    n = strlen(name);

    for (p = info; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        if (strncmp(p, name, n) == 0 && p[n] == ':') {
            return strtoll(p + n + 1, NULL, 10);
        }
    }

    return -1;
}


int
runner_store_memory(runner_store_t *st, int64_t *used, int64_t *max)
{
    const char  *argv[2];
    redisReply  *r;

    argv[0] = "INFO";
    argv[1] = "memory";

    r = runner_store_argv(st, 2, argv, NULL);

    if (r == NULL || r->type != REDIS_REPLY_STRING) {
        if (r) {
            snprintf(st->err, sizeof(st->err), "redis: INFO: not text");
            freeReplyObject(r);
        }
        return RUNNER_ERR;
    }

    *used = runner_store_info_field(r->str, "used_memory");
    *max = runner_store_info_field(r->str, "maxmemory");
    freeReplyObject(r);

    if (*used < 0 || *max < 0) {
        snprintf(st->err, sizeof(st->err), "redis: INFO memory without "
                 "used_memory or maxmemory");
        return RUNNER_ERR;
    }

    return RUNNER_OK;
}


/* a queued run held back by the host floor: why (run_waiting.lua) */
int
runner_store_waiting(runner_store_t *st, const char *run_id,
    const char *why)
{
    char         key[RUNNER_KEY_MAX], events[RUNNER_KEY_MAX], now[32];
    const char  *keys[2], *args[4];

    RUNNER_KEY(key, SMCP_KEY_RUN, run_id);
    RUNNER_KEY(events, SMCP_KEY_RUN_EVENTS, run_id);
    RUNNER_NUM(now, smcp_now_ms());
    keys[0] = key;
    keys[1] = events;
    args[0] = why;
    args[1] = now;
    args[2] = SMCP_EVENTS_MAXLEN;
    args[3] = SMCP_STATUS_STARTED;

    return runner_store_script_do(st, RUNNER_LUA_RUN_WAITING, 2, keys, 4,
                                  args);
}
