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
            runner_outcome_set(&out->result, s,
                               (size_t) runner_config->max_result);
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

            if (out->diff_len > (size_t) runner_config->diff_max)
            {
                out->diff_len = runner_config->diff_max;
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


/*
 * The diff, one file section at a time (git diff's output, the sandbox's
 * and so hostile: every length checked).  A section starts at a line
 * "diff --git "; its header (up to the first "@@" line) names the paths:
 * "--- a/P", "+++ b/P" (/dev/null for a side that does not exist),
 * "rename from P" / "rename to P", else the "diff --git a/P b/P" line;
 * paths may be C-quoted.  In hunks, lines starting with '+' and '-' are
 * counted.
 */

typedef struct {
    size_t      start;              /* offset of "diff --git " */
    char       *old_path;
    char       *new_path;
    char       *git_path;           /* from the "diff --git" line */
    int64_t     add, del;
    int         in_hunk;
} runner_diff_file_t;


/* a path as git prints it: C-quoted or not, a/ or b/ prefix dropped */
static char *
runner_outcome_path(const char *p, size_t n, const char *prefix)
{
    char    *s, *d;
    size_t   i, k;
    int      v;

    if (n >= 2 && p[0] == '"' && p[n - 1] == '"') {
        s = malloc(n);
        if (s == NULL) {
            return NULL;
        }

        d = s;

        for (i = 1; i + 1 < n; i++) {
            if (p[i] != '\\' || i + 2 >= n) {
                *d++ = p[i];
                continue;
            }

            i++;

            switch (p[i]) {
            case 'a': *d++ = '\a'; break;
            case 'b': *d++ = '\b'; break;
            case 't': *d++ = '\t'; break;
            case 'n': *d++ = '\n'; break;
            case 'v': *d++ = '\v'; break;
            case 'f': *d++ = '\f'; break;
            case 'r': *d++ = '\r'; break;
            case '0': case '1': case '2': case '3':
                for (v = 0, k = 0; k < 3 && i + 1 < n && p[i] >= '0'
                                   && p[i] <= '7'; k++, i++)
                {
                    v = v * 8 + (p[i] - '0');
                }
                i--;
                *d++ = (char) v;
                break;
            default: *d++ = p[i];
            }
        }

        *d = '\0';
        n = d - s;

    } else {
        /* git ends a path with a space in it with a tab (for patch) */
        if (n > 0 && p[n - 1] == '\t') {
            n--;
        }

        /* bytes, NUL included: n of them (strndup would stop at a NUL
         * and leave the buffer shorter than n) */
        s = malloc(n + 1);
        if (s == NULL) {
            return NULL;
        }

        memcpy(s, p, n);
        s[n] = '\0';
    }

    if (prefix && strncmp(s, prefix, 2) == 0 && n > 2) {
        memmove(s, s + 2, n - 1);
        n -= 2;
    }

    /* a path is text: no NUL inside, valid UTF-8 for JSON */
    s[strnlen(s, n)] = '\0';
    smcp_utf8_sanitize(s, strlen(s));

    return s;
}


static void
runner_outcome_replace(char **dst, char *s)
{
    free(*dst);
    *dst = s;
}


/* "a/P b/P": the same path twice, so spaces in it are no trouble */
static char *
runner_outcome_git_path(const char *p, size_t n)
{
    size_t       half;
    const char  *q;

    if (n > 5 && (n - 5) % 2 == 0 && strncmp(p, "a/", 2) == 0) {
        half = (n - 5) / 2;

        if (strncmp(p + 2 + half, " b/", 3) == 0
            && memcmp(p + 2, p + 5 + half, half) == 0)
        {
            return runner_outcome_path(p + 2, half, NULL);
        }
    }

    /* different paths (a rename): the last " b/" */
    for (q = p + n - 3; q > p; q--) {
        if (q[0] == ' ' && q[1] == 'b' && q[2] == '/') {
            return runner_outcome_path(q + 3, p + n - q - 3, NULL);
        }
    }

    return NULL;
}


/* a header line of the current section */
static void
runner_outcome_header(runner_diff_file_t *f, const char *p, size_t n)
{
#define RUNNER_IS(s)  (n > sizeof(s) - 1 && memcmp(p, s, sizeof(s) - 1) == 0)
#define RUNNER_REST(s)  p + sizeof(s) - 1, n - (sizeof(s) - 1)

    if (RUNNER_IS("--- ")) {
        runner_outcome_replace(&f->old_path,
            (n == 13 && memcmp(p, "--- /dev/null", 13) == 0)
            ? NULL : runner_outcome_path(RUNNER_REST("--- "), "a/"));

    } else if (RUNNER_IS("+++ ")) {
        runner_outcome_replace(&f->new_path,
            (n == 13 && memcmp(p, "+++ /dev/null", 13) == 0)
            ? NULL : runner_outcome_path(RUNNER_REST("+++ "), "b/"));

    } else if (RUNNER_IS("rename from ") || RUNNER_IS("copy from ")) {
        runner_outcome_replace(&f->old_path,
            runner_outcome_path(p[0] == 'r' ? p + 12 : p + 10,
                                n - (p[0] == 'r' ? 12 : 10), NULL));

    } else if (RUNNER_IS("rename to ") || RUNNER_IS("copy to ")) {
        runner_outcome_replace(&f->new_path,
            runner_outcome_path(p[0] == 'r' ? p + 10 : p + 8,
                                n - (p[0] == 'r' ? 10 : 8), NULL));

    }

#undef RUNNER_REST
#undef RUNNER_IS
}


/* the section ends at end: its file, its place in the index */
static void
runner_outcome_section(runner_diff_file_t *f, size_t end, json_t *files,
    json_t *index)
{
    const char  *path, *other;
    json_t      *span;

    path = f->new_path ? f->new_path : f->old_path ? f->old_path
                       : f->git_path ? f->git_path : "?";
    other = (f->old_path && f->new_path && strcmp(f->old_path, f->new_path))
            ? f->old_path : NULL;

    json_array_append_new(files, json_pack("{s:s, s:I, s:I}", "path", path,
                                           "additions", (json_int_t) f->add,
                                           "deletions", (json_int_t) f->del));

    if (index) {
        span = json_pack("[I, I]", (json_int_t) f->start,
                         (json_int_t) (end - f->start));
        json_object_set(index, path, span);

        if (other) {
            json_object_set(index, other, span);
        }

        json_decref(span);
    }

    free(f->old_path);
    free(f->new_path);
    free(f->git_path);
    memset(f, 0, sizeof(*f));
}


/*
 * [{path, additions, deletions}] from a unified diff, and (index not NULL)
 * {path: [offset, length]} of each file's section; a rename or copy is
 * listed under both its paths.
 */
json_t *
runner_outcome_diff_walk(const char *diff, size_t len, json_t **index)
{
    json_t              *files, *idx;
    const char          *p, *end, *nl;
    size_t               n;
    int                  open;
    runner_diff_file_t   f;

    files = json_array();
    idx = index ? json_object() : NULL;
    memset(&f, 0, sizeof(f));
    open = 0;

    end = diff ? diff + len : NULL;

    for (p = diff; p && p < end; p = nl + 1) {
        nl = memchr(p, '\n', end - p);
        if (nl == NULL) {
            nl = end;
        }

        n = nl - p;

        if (n > 11 && memcmp(p, "diff --git ", 11) == 0) {
            if (open) {
                runner_outcome_section(&f, p - diff, files, idx);
            }

            open = 1;
            f.start = p - diff;
            f.git_path = runner_outcome_git_path(p + 11, n - 11);

        } else if (open && !f.in_hunk && n >= 2 && memcmp(p, "@@", 2) == 0) {
            f.in_hunk = 1;

        } else if (open && !f.in_hunk) {
            runner_outcome_header(&f, p, n);

        } else if (open && n > 0 && p[0] == '+') {
            f.add++;

        } else if (open && n > 0 && p[0] == '-') {
            f.del++;
        }

        if (nl == end) {
            break;
        }
    }

    if (open) {
        runner_outcome_section(&f, len, files, idx);
    }

    if (index) {
        *index = idx;
    }

    return files;
}


json_t *
runner_outcome_files(const char *diff, size_t len)
{
    return runner_outcome_diff_walk(diff, len, NULL);
}
