/*
 * What a run's OpenCode events add up to: the result (last text), the
 * error (last error event), tokens and cost (summed over step_finish), and
 * the files the diff touches.
 */

#include <stdlib.h>
#include <string.h>

#include "runner.h"


static void
runner_outcome_set(char **dst, const char *s)
{
    free(*dst);
    *dst = s ? strdup(s) : NULL;
}


void
runner_outcome_event(runner_outcome_t *out, json_t *ev)
{
    const char  *type, *s;
    json_t      *part, *tokens, *cache, *err, *data;

    type = json_string_value(json_object_get(ev, "type"));
    if (type == NULL) {
        return;
    }

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
            runner_outcome_set(&out->result, s);
        }

    } else if (strcmp(type, "step_finish") == 0) {
        tokens = json_object_get(part, "tokens");
        cache = json_object_get(tokens, "cache");

        out->tokens_input += json_integer_value(json_object_get(tokens,
                                                                "input"));
        out->tokens_output += json_integer_value(json_object_get(tokens,
                                                                 "output"));
        out->tokens_reasoning += json_integer_value(
                                    json_object_get(tokens, "reasoning"));
        out->tokens_cache_read += json_integer_value(json_object_get(cache,
                                                                     "read"));
        out->tokens_cache_write += json_integer_value(
                                      json_object_get(cache, "write"));
        out->cost += json_number_value(json_object_get(part, "cost"));

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

        runner_outcome_set(&out->error, s ? s : "the agent reported an error");

    } else if (strcmp(type, "smcp") == 0) {
        s = json_string_value(json_object_get(ev, "step"));

        if (s && strcmp(s, "diff") == 0) {
            s = json_string_value(json_object_get(ev, "diff"));
            free(out->diff);
            out->diff_len = s ? strlen(s) : 0;

            if (out->diff_len > (size_t) runner_config.diff_max) {
                out->diff_len = runner_config.diff_max;
            }

            out->diff = s ? strndup(s, out->diff_len) : NULL;

        } else if (s && strcmp(s, "clone_failed") == 0) {
            out->clone_failed = 1;
            s = json_string_value(json_object_get(ev, "message"));
            runner_outcome_set(&out->error, s ? s : "git clone failed");
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
