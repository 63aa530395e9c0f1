/*
 * What a run's OpenCode events add up to: the result (last text), the
 * error (last error event), tokens and cost (summed over step_finish), and
 * what the diff adds up to.
 */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runner.h"
#include "smcp_diff.h"


/*
 * The agent can print anything OpenCode can, and more (its tools write to
 * the same log): a step_finish whose counts no real step has is ignored
 * whole, and every string is bounded.
 */
#define RUNNER_TOTAL_MAX        (INT64_MAX / 2)


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

        if (s && strcmp(s, "agent_exit") == 0) {
            /*
             * what came before may be the agent's own writing to the
             * container's output; the entry script has killed every
             * process of the agent before it says agent_exit, so what
             * follows the last one is its own
             */
            out->pr_step = RUNNER_PR_NONE;
            free(out->diff);
            out->diff = NULL;
            out->diff_len = 0;
            out->diff_truncated = 0;
            runner_outcome_set(&out->push_error, NULL, 0);

        } else if (s && strcmp(s, "diff") == 0) {
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

        } else if (s && strcmp(s, "pushed") == 0) {
            out->pr_step = RUNNER_PR_PUSHED;

        } else if (s && strcmp(s, "pr_skipped") == 0) {
            out->pr_step = RUNNER_PR_SKIPPED;

        } else if (s && strcmp(s, "push_failed") == 0) {
            out->pr_step = RUNNER_PR_PUSH_FAILED;
            s = json_string_value(json_object_get(ev, "message"));
            runner_outcome_set(&out->push_error, s ? s : "git push failed",
                               RUNNER_PR_MESSAGE_MAX);

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
    free(out->push_error);
    memset(out, 0, sizeof(*out));
}


/*
 * A line the agent wrote on stderr: its last RUNNER_STDERR_TAIL - 1 bytes
 * are kept, lines joined by '\n', for the error of a run whose agent
 * exited without an error event.
 */
void
runner_outcome_stderr(runner_outcome_t *out, const char *line, size_t len)
{
    size_t  room, need, drop;

    room = sizeof(out->stderr_tail) - 1;

    if (len >= room) {
        memcpy(out->stderr_tail, line + len - room, room);
        out->stderr_len = room;
        out->stderr_tail[room] = '\0';
        return;
    }

    need = len + (out->stderr_len ? 1 : 0);

    if (out->stderr_len + need > room) {
        drop = out->stderr_len + need - room;
        memmove(out->stderr_tail, out->stderr_tail + drop,
                out->stderr_len - drop);
        out->stderr_len -= drop;
    }

    if (need > len) {
        out->stderr_tail[out->stderr_len++] = '\n';
    }

    memcpy(out->stderr_tail + out->stderr_len, line, len);
    out->stderr_len += len;
    out->stderr_tail[out->stderr_len] = '\0';
}


/*
 * The stderr tail as text for an error: it starts at a character (a cut
 * may have split one), control characters but '\n' and '\t' become '?',
 * invalid UTF-8 is repaired, blank lines at the ends are dropped.  "" when
 * nothing is left.
 */
void
runner_outcome_stderr_text(const runner_outcome_t *out, char *buf,
    size_t size)
{
    size_t          i, start, len;
    unsigned char   c;

    start = 0;
    len = out->stderr_len < size - 1 ? out->stderr_len : size - 1;

    while (start < len
           && ((unsigned char) out->stderr_tail[start] & 0xc0) == 0x80)
    {
        start++;
    }

    len -= start;
    memcpy(buf, out->stderr_tail + start, len);
    buf[len] = '\0';

    for (i = 0; i < len; i++) {
        c = (unsigned char) buf[i];

        if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f) {
            buf[i] = '?';
        }
    }

    smcp_utf8_sanitize(buf, len);

    while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == ' '
                       || buf[len - 1] == '\t'))
    {
        buf[--len] = '\0';
    }

    for (start = 0; buf[start] == '\n'; start++) { /* void */ }

    memmove(buf, buf + start, len - start + 1);
}


/*
 * The diff's summary, one walk of common/smcp_diff.c (the parser the
 * module's opencode_get_diff uses): each section the parser can name is
 * a file of files_changed, an entry of the index (a rename or copy under
 * both its paths) and a part of the stat; a section it cannot name is in
 * none of them.  Paths are text: a path that is not UTF-8 is repaired for
 * JSON (and then found only by the module's own search).
 */
int
runner_outcome_diff(const char *diff, size_t len, runner_diff_t *d)
{
    char              *path;
    size_t             pos, plen;
    int64_t            files, add, del;
    json_t            *span;
    const char        *p;
    smcp_diff_file_t  *f;

    d->files = json_array();
    d->index = json_object();
    d->stat[0] = '\0';

    f = malloc(sizeof(smcp_diff_file_t));
    path = malloc(SMCP_DIFF_PATH_MAX + 1);

    if (d->files == NULL || d->index == NULL || f == NULL || path == NULL) {
        free(f);
        free(path);
        runner_outcome_diff_free(d);
        return RUNNER_ERR;
    }

    files = add = del = 0;
    pos = 0;

    while (smcp_diff_next(diff, len, &pos, f)) {
        p = smcp_diff_path_of(f, &plen);

        if (p == NULL) {
            continue;
        }

        memcpy(path, p, plen + 1);
        smcp_utf8_sanitize(path, plen);

        json_array_append_new(d->files,
            json_pack("{s:s, s:I, s:I}", "path", path,
                      "additions", (json_int_t) f->additions,
                      "deletions", (json_int_t) f->deletions));

        span = json_pack("[I, I]", (json_int_t) f->offset,
                         (json_int_t) f->length);
        json_object_set(d->index, path, span);

        if (f->old_len && (f->old_len != plen
                           || memcmp(f->old_path, p, plen) != 0))
        {
            memcpy(path, f->old_path, f->old_len + 1);
            smcp_utf8_sanitize(path, f->old_len);
            json_object_set(d->index, path, span);
        }

        json_decref(span);

        files++;
        add += f->additions;
        del += f->deletions;
    }

    smcp_diff_stat(d->stat, sizeof(d->stat), files, add, del);

    free(f);
    free(path);

    return RUNNER_OK;
}


void
runner_outcome_diff_free(runner_diff_t *d)
{
    json_decref(d->files);
    json_decref(d->index);
    d->files = NULL;
    d->index = NULL;
}


/* files_changed alone */
json_t *
runner_outcome_files(const char *diff, size_t len)
{
    json_t         *files;
    runner_diff_t   d;

    if (runner_outcome_diff(diff, len, &d) != RUNNER_OK) {
        return json_array();
    }

    files = json_incref(d.files);
    runner_outcome_diff_free(&d);

    return files;
}
