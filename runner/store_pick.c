/*
 * A pick run's reads and writes of the attempt it opens the pull request
 * of (opencode_pick_attempt; pick.c): the attempt's result and diff, for
 * the pull request's body; then its pull request, or the pick undone.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store.h"


/* a string reply copied (malloc'd, *len its length), or NULL */
static char *
runner_store_copy(redisReply *r, size_t *len)
{
    char  *s;

    if (r == NULL || r->type != REDIS_REPLY_STRING) {
        return NULL;
    }

    s = malloc(r->len + 1);

    if (s) {
        memcpy(s, r->str, r->len);
        s[r->len] = '\0';

        if (len) {
            *len = r->len;
        }
    }

    return s;
}


/* the attempt's result and diff (each NULL when it has none) */
int
runner_store_pick_load(runner_store_t *st, const char *attempt,
    char **result, char **diff, size_t *diff_len)
{
    char         key[RUNNER_KEY_MAX];
    const char  *argv[3];
    redisReply  *r;

    *result = NULL;
    *diff = NULL;
    *diff_len = 0;

    RUNNER_KEY(key, SMCP_KEY_RUN, attempt);
    argv[0] = "HGET";
    argv[1] = key;
    argv[2] = "result";

    r = runner_store_argv(st, 3, argv, NULL);
    if (r == NULL) {
        return RUNNER_ERR;
    }

    *result = runner_store_copy(r, NULL);
    freeReplyObject(r);

    RUNNER_KEY(key, SMCP_KEY_RUN_DIFF, attempt);
    argv[0] = "GET";

    r = runner_store_argv(st, 2, argv, NULL);
    if (r == NULL) {
        free(*result);
        *result = NULL;
        return RUNNER_ERR;
    }

    *diff = runner_store_copy(r, diff_len);
    freeReplyObject(r);

    return RUNNER_OK;
}


/*
 * The attempt's pull request (pr opened), or the pick undone (pr NULL, or
 * any other end: the attempt `pushed` again, the group without its pick,
 * for another try): pick_done.lua, only while the pick is still pick's
 */
int
runner_store_pick_done(runner_store_t *st, const char *pick,
    const char *attempt, const char *group, const runner_pr_t *pr)
{
    int          opened;
    char         akey[RUNNER_KEY_MAX], gkey[RUNNER_KEY_MAX];
    const char  *keys[2], *argv[4];

    RUNNER_KEY(akey, SMCP_KEY_RUN, attempt);
    RUNNER_KEY(gkey, SMCP_KEY_RUN, group);
    keys[0] = akey;
    keys[1] = gkey;

    opened = pr && pr->status && strcmp(pr->status, "opened") == 0;

    argv[0] = pick;
    argv[1] = opened ? "opened" : "";
    argv[2] = opened ? pr->url : "";
    argv[3] = opened ? pr->number : "";

    return runner_store_script_do(st, RUNNER_LUA_PICK_DONE, 2, keys, 4,
                                  argv);
}
