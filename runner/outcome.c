/*
 * What a run's OpenCode events add up to: the result (last text), the
 * error (last error event), tokens and cost (summed over step_finish), and
 * the files the diff touches.
 */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runner.h"


/*
 * The agent can print anything OpenCode can, and more (its tools write to
 * the same log): a step_finish whose counts no real step has is ignored
 * whole, and every string is bounded.
 */
#define RUNNER_STEP_TOKENS_MAX  1000000000LL    /* tokens in one step */
#define RUNNER_STEP_COST_MAX    1000.0          /* USD for one step */
#define RUNNER_TOTAL_MAX        (INT64_MAX / 2)
#define RUNNER_ERROR_MAX        4096
#define RUNNER_RESULT_DEFAULT   (256 * 1024)


/* s, at most max bytes of it (cut at a character), a marker when cut */
static void
runner_outcome_set(char **dst, const char *s, size_t max)
{
    size_t  len, keep;
    char    marker[80];

    free(*dst);
    *dst = NULL;

    if (s == NULL) {
        return;
    }

    len = strlen(s);

    if (len <= max) {
        *dst = strdup(s);
        return;
    }

    keep = max;

    while (keep > 0 && ((unsigned char) s[keep] & 0xc0) == 0x80) {
        keep--;
    }

    snprintf(marker, sizeof(marker), "\n[... truncated: %zu of %zu bytes "
             "kept]", keep, len);

    *dst = malloc(keep + strlen(marker) + 1);

    if (*dst) {
        memcpy(*dst, s, keep);
        strcpy(*dst + keep, marker);
    }
}


/* a token count a step may have: absent (0) or 0..RUNNER_STEP_TOKENS_MAX */
static int
runner_outcome_count(json_t *v, int64_t *n)
{
    if (v == NULL) {
        *n = 0;
        return 1;
    }

    if (!json_is_integer(v)) {
        return 0;
    }

    *n = json_integer_value(v);

    return *n >= 0 && *n <= RUNNER_STEP_TOKENS_MAX;
}


static void
runner_outcome_add(int64_t *sum, int64_t n)
{
    *sum = (*sum > RUNNER_TOTAL_MAX - n) ? RUNNER_TOTAL_MAX : *sum + n;
}


/* tokens and cost of one step, or nothing when any of them is absurd */
static void
runner_outcome_step(runner_outcome_t *out, json_t *part)
{
    json_t   *tokens, *cache, *c;
    int64_t   n[5];
    double    cost;

    tokens = json_object_get(part, "tokens");
    cache = json_object_get(tokens, "cache");
    c = json_object_get(part, "cost");

    if (!runner_outcome_count(json_object_get(tokens, "input"), &n[0])
        || !runner_outcome_count(json_object_get(tokens, "output"), &n[1])
        || !runner_outcome_count(json_object_get(tokens, "reasoning"), &n[2])
        || !runner_outcome_count(json_object_get(cache, "read"), &n[3])
        || !runner_outcome_count(json_object_get(cache, "write"), &n[4])
        || (c && !json_is_number(c)))
    {
        return;
    }

    cost = c ? json_number_value(c) : 0;

    if (!isfinite(cost) || cost < 0 || cost > RUNNER_STEP_COST_MAX) {
        return;
    }

    runner_outcome_add(&out->tokens_input, n[0]);
    runner_outcome_add(&out->tokens_output, n[1]);
    runner_outcome_add(&out->tokens_reasoning, n[2]);
    runner_outcome_add(&out->tokens_cache_read, n[3]);
    runner_outcome_add(&out->tokens_cache_write, n[4]);
    out->cost += cost;
}


void
runner_outcome_event(runner_outcome_t *out, json_t *ev)
{
    const char  *type, *s;
    json_t      *part, *err, *data;
    size_t       max_result;

    type = json_string_value(json_object_get(ev, "type"));
    if (type == NULL) {
        return;
    }

    max_result = runner_config.max_result > 0
                 ? (size_t) runner_config.max_result : RUNNER_RESULT_DEFAULT;

    /* the conversation to continue next time (opencode run --session) */
    s = json_string_value(json_object_get(ev, "sessionID"));
    if (s && out->oc_session[0] == '\0' && strlen(s) < sizeof(out->oc_session)
        && strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                     "0123456789_-") == strlen(s))
    {
        strcpy(out->oc_session, s);
    }

    part = json_object_get(ev, "part");

    if (strcmp(type, "text") == 0) {
        s = json_string_value(json_object_get(part, "text"));
        if (s && *s) {
            runner_outcome_set(&out->result, s, max_result);
        }

    } else if (strcmp(type, "step_finish") == 0) {
        runner_outcome_step(out, part);

    } else if (strcmp(type, "error") == 0) {
        err = json_object_get(ev, "error");
        data = json_object_get(err, "data");
        s = json_string_value(json_object_get(data, "message"));

        if (s == NULL) {
            s = json_string_value(json_object_get(err, "message"));
        }

        if (s == NULL) {
            s = json_string_value(json_object_get(err, "name"));
        }

        runner_outcome_set(&out->error, s ? s : "the agent reported an error",
                           RUNNER_ERROR_MAX);

    } else if (strcmp(type, "smcp") == 0) {
        s = json_string_value(json_object_get(ev, "step"));

        if (s && strcmp(s, "diff") == 0) {
            s = json_string_value(json_object_get(ev, "diff"));
            free(out->diff);
            out->diff_len = s ? strlen(s) : 0;
            out->diff_truncated = json_is_true(json_object_get(ev,
                                                               "truncated"));

            if (runner_config.diff_max > 0
                && out->diff_len > (size_t) runner_config.diff_max)
            {
                out->diff_len = runner_config.diff_max;
                out->diff_truncated = 1;
            }

            out->diff = s ? strndup(s, out->diff_len) : NULL;

        } else if (s && strcmp(s, "clone_failed") == 0) {
            out->clone_failed = 1;
            s = json_string_value(json_object_get(ev, "message"));
            runner_outcome_set(&out->error, s ? s : "git clone failed",
                               RUNNER_ERROR_MAX);
        }
    }
}


void
runner_outcome_free(runner_outcome_t *out)
{
    free(out->result);
    free(out->error);
    free(out->diff);
    memset(out, 0, sizeof(*out));
}


/* [{path, additions, deletions}] from a unified diff */
json_t *
runner_outcome_files(const char *diff, size_t len)
{
    json_t      *files, *cur;
    const char  *p, *end, *nl, *b;
    int64_t      add, del;

    files = json_array();
    cur = NULL;
    add = del = 0;

    if (diff == NULL) {
        return files;
    }

    end = diff + len;

    for (p = diff; p < end; p = nl + 1) {
        nl = memchr(p, '\n', end - p);
        if (nl == NULL) {
            nl = end;
        }

        if (nl - p > 11 && strncmp(p, "diff --git ", 11) == 0) {
            if (cur) {
                json_object_set_new(cur, "additions", json_integer(add));
                json_object_set_new(cur, "deletions", json_integer(del));
            }

            /* "diff --git a/<path> b/<path>": the b/ side */
            b = NULL;
            for (const char *q = nl - 1; q > p + 11; q--) {
                if (q[0] == ' ' && q[1] == 'b' && q[2] == '/') {
                    b = q + 3;
                    break;
                }
            }

            cur = json_object();
            json_object_set_new(cur, "path",
                                b ? json_stringn(b, nl - b)
                                  : json_string("?"));
            if (json_object_get(cur, "path") == NULL) {
                json_object_set_new(cur, "path", json_string("?"));
            }
            json_array_append_new(files, cur);
            add = del = 0;
            continue;
        }

        if (cur && nl > p) {
            if (p[0] == '+' && !(nl - p >= 3 && strncmp(p, "+++", 3) == 0)) {
                add++;

            } else if (p[0] == '-'
                       && !(nl - p >= 3 && strncmp(p, "---", 3) == 0))
            {
                del++;
            }
        }

        if (nl == end) {
            break;
        }
    }

    if (cur) {
        json_object_set_new(cur, "additions", json_integer(add));
        json_object_set_new(cur, "deletions", json_integer(del));
    }

    return files;
}
