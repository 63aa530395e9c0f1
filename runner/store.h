/*
 * The store's own header, for store*.c only (the rest of the runner sees
 * runner.h's runner_store_*): a connection, the scripts' numbers, the key
 * names and the commands every part of the store sends through (store.c).
 */

#ifndef RUNNER_STORE_H
#define RUNNER_STORE_H

#include <hiredis/hiredis.h>

#include "runner.h"


struct runner_store_s {
    redisContext  *c;
    char           err[RUNNER_ERRLEN];      /* the last failure */
    unsigned       epoch;                   /* runner_sentinel_epoch at
                                               connect */
    unsigned       stale:1;                 /* its server is no longer
                                               the master: a write was
                                               answered READONLY, or the
                                               sentinels said it moved */
};


/* the scripts (store.c's runner_scripts, in this order) */
#define RUNNER_LUA_CLAIM          0
#define RUNNER_LUA_RUNNING        1
#define RUNNER_LUA_FINISH         2
#define RUNNER_LUA_JANITOR_BEGIN  3
#define RUNNER_LUA_JANITOR_END    4
#define RUNNER_LUA_BUDGET_RELEASE 5
#define RUNNER_LUA_USAGE_DISK     6
#define RUNNER_LUA_RUN_WAITING    7
#define RUNNER_LUA_NOTIFY_CLAIM   8
#define RUNNER_LUA_NOTIFY_RESULT  9
#define RUNNER_LUA_FORK_HOLD      10
#define RUNNER_LUA_PICK_DONE      11


#define RUNNER_KEY(buf, fmt, arg)                                             \
    snprintf(buf, sizeof(buf), fmt, runner_config->prefix, arg)
#define RUNNER_KEY0(buf, fmt)                                                 \
    snprintf(buf, sizeof(buf), fmt, runner_config->prefix)
#define RUNNER_NUM(buf, v)                                                    \
    snprintf(buf, sizeof(buf), "%lld", (long long) (v))


/* a reply: an error with this code ("NOSCRIPT", "BUSYGROUP"), a string, an
 * array of n elements (n < 0: any number); READONLY marks the connection
 * lost (runner_store_lost: its server is no longer the master), and so
 * does a move the sentinels told of (runner_store_moved, checked before
 * each command: 1, st->err saying so) */
int runner_store_is(redisReply *r, const char *code);
void runner_store_demoted(runner_store_t *st, redisReply *r);
int runner_store_moved(runner_store_t *st);
int runner_store_str(redisReply *r);
int runner_store_array(redisReply *r, long n);

/* one command (NULL: st->err says why), one whose reply only matters as
 * success, a script by EVALSHA, the same whose reply only matters as
 * success, a script answering a status word */
redisReply *runner_store_argv(runner_store_t *st, int argc,
    const char **argv, const size_t *lens);
int runner_store_do(runner_store_t *st, int argc, const char **argv);
redisReply *runner_store_script(runner_store_t *st, int script, int nkeys,
    const char **keys, int nargs, const char **args, const size_t *lens);
int runner_store_script_do(runner_store_t *st, int script, int nkeys,
    const char **keys, int nargs, const char **args);
int runner_store_script_status(runner_store_t *st, redisReply *r,
    char *status, size_t slen);

/* the members of a sorted set scored up to now, at most max (an array;
 * NULL: st->err says why) */
redisReply *runner_store_due(runner_store_t *st, const char *key,
    int64_t now, long max);

/* the run or session ids of a sorted set's members scored up to now
 * (runner_store_due); other members passed over, or with drop taken out:
 * RUNNER_AGAIN when there may be more */
int runner_store_due_ids(runner_store_t *st, const char *key,
    const char *prefix, int drop, int64_t now, char ids[][SMCP_ID_LEN + 1],
    int max, int *n);

/* fields of a run hash (HMGET, store_run.c): an array of n replies;
 * NULL on failure (st->err) */
redisReply *runner_store_run_fields(runner_store_t *st, const char *run_id,
    int n, const char **fields);

/* members of a run set (zset: a zset) whose run ended or is gone, dropped
 * (store_run.c): how many (-1: Redis trouble) */
int runner_store_prune(runner_store_t *st, const char *key, int zset);

#endif /* RUNNER_STORE_H */
