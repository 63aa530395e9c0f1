/*
 * Unit tests of the runner's hostile-input paths: Docker's log frames as
 * a sandbox can shape them (NUL bytes, lines split anywhere, huge lines,
 * absurd frame sizes, odd stream ids), log line escaping, and what agent
 * events may add up to.  Prints TAP.
 */

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runner.h"
#include "runner_globals.h"
#include "lines.h"
#include "tap.h"


static void
test_nul(void)
{
    char                 buf[256];
    size_t               n, i;
    lines_t              l;
    runner_logstream_t   ls;
    const char           p[] = "2026-11-29T10:00:00.1Z A\0B\0\0C\n";

    /* "A\0B\0\0C": six bytes, three of them NUL */
    n = frame(buf, 1, p, sizeof(p) - 1);

    memset(&l, 0, sizeof(l));
    runner_logstream_init(&ls, collect, &l);
    runner_logstream_feed(&ls, buf, n);
    runner_logstream_feed(&ls, NULL, 0);
    runner_logstream_free(&ls);

    ok(l.n == 1 && l.len[0] == 6 && memcmp(l.line[0], "A\0B\0\0C", 6) == 0
       && l.cut[0] == 0, "NUL bytes: the line is delivered whole (6 bytes)");
    lines_free(&l);

    /* a line of NULs only, fed a byte at a time */
    memset(buf + 100, 0, 40);
    memcpy(buf + 100, "2026-11-29T10:00:00.2Z ", 23);
    buf[100 + 39] = '\n';
    n = frame(buf, 1, buf + 100, 40);

    memset(&l, 0, sizeof(l));
    runner_logstream_init(&ls, collect, &l);
    for (i = 0; i < n; i++) {
        runner_logstream_feed(&ls, buf + i, 1);
    }
    runner_logstream_free(&ls);

    ok(l.n == 1 && l.len[0] == 16
       && memcmp(l.line[0], "\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 16) == 0,
       "a line of 16 NUL bytes, fed bytewise");
    lines_free(&l);
}


/*
 * One line split over two frames at every position, the stream fed in
 * pieces cut at every position: always the same line, same timestamp.
 */
static void
test_splits(void)
{
    char                 buf[512], p1[256], p2[256];
    size_t               n, k, cutpos, len1, len2, tl;
    int                  all_ok, lines_ok;
    lines_t              l;
    runner_logstream_t   ls;
    const char          *ts = "2026-11-29T10:00:00.123456789Z ";
    const char           line[] = "{\"type\":\"text\",\"x\":\"a\0b\"} tail";
    size_t               ll = sizeof(line) - 1;

    tl = strlen(ts);
    all_ok = 1;
    lines_ok = 1;

    for (k = 0; k <= ll; k++) {
        memcpy(p1, ts, tl);
        memcpy(p1 + tl, line, k);
        len1 = tl + k;

        memcpy(p2, ts, tl);
        memcpy(p2 + tl, line + k, ll - k);
        p2[tl + ll - k] = '\n';
        len2 = tl + ll - k + 1;

        n = frame(buf, 1, p1, len1);
        n += frame(buf + n, 1, p2, len2);
        n += frame(buf + n, 2, "2026-11-29T10:00:01Z err\n", 25);

        for (cutpos = 0; cutpos <= n; cutpos++) {
            memset(&l, 0, sizeof(l));
            runner_logstream_init(&ls, collect, &l);
            runner_logstream_feed(&ls, buf, cutpos);
            runner_logstream_feed(&ls, buf + cutpos, n - cutpos);
            runner_logstream_feed(&ls, NULL, 0);
            runner_logstream_free(&ls);

            if (l.n != 2 || l.len[0] != ll || memcmp(l.line[0], line, ll)
                || strcmp(l.ts[0], "2026-11-29T10:00:00.123456789Z")
                || l.stream[0] != 1 || l.cut[0] != 0)
            {
                all_ok = 0;
            }

            if (l.n != 2 || l.stream[1] != 2 || strcmp(l.line[1], "err")) {
                lines_ok = 0;
            }

            lines_free(&l);
        }
    }

    ok(all_ok, "a line split over two frames at every byte, the stream "
       "fed in two pieces cut at every byte: the same line and timestamp");
    ok(lines_ok, "... and the stderr line after it");
}


/* a 70 MB line in 16 KiB frames: cut to --max-line, counted, the line
 * after it intact, memory bounded by the cap */
static void
test_huge_line(void)
{
    char                *chunk, buf[256];
    size_t               i, n, tl, total, maxcap;
    lines_t              l;
    runner_logstream_t   ls;
    const char          *ts = "2026-11-29T10:00:02.5Z ";

    runner_unit_defaults();

    tl = strlen(ts);
    chunk = malloc(8 + tl + 16384);
    header((unsigned char *) chunk, 1, (uint32_t) (tl + 16384));
    memcpy(chunk + 8, ts, tl);
    memset(chunk + 8 + tl, 'A', 16384);

    memset(&l, 0, sizeof(l));
    runner_logstream_init(&ls, collect, &l);

    total = 0;
    maxcap = 0;

    for (i = 0; total < 70000000; i++) {
        runner_logstream_feed(&ls, chunk, 8 + tl + 16384);
        total += 16384;

        if (ls.line_cap[1] > maxcap) {
            maxcap = ls.line_cap[1];
        }
    }

    n = frame(buf, 1, "2026-11-29T10:00:02.5Z AAA\n", 27);
    n += frame(buf + n, 1, "2026-11-29T10:00:03Z next\n", 26);
    runner_logstream_feed(&ls, buf, n);
    runner_logstream_free(&ls);
    free(chunk);

    total += 3;

    ok(l.n == 2 && l.len[0] == 256 * 1024 && l.cut[0] == total - 256 * 1024,
       "a 70 MB line: 256 KiB kept, the rest counted as cut");
    ok(l.n == 2 && l.line[0][0] == 'A' && l.line[0][l.len[0] - 1] == 'A'
       && strcmp(l.ts[0], "2026-11-29T10:00:02.5Z") == 0,
       "... the kept part is the line's start, with its timestamp");
    ok(maxcap <= 256 * 1024 + 1, "... memory held for it: at most the cap");
    ok(l.n == 2 && strcmp(l.line[1], "next") == 0 && l.cut[1] == 0,
       "... and the next line is intact");
    lines_free(&l);
}


/* the sandbox's diff line may be longer than --max-line, up to
 * --diff-max; other stdout and stderr lines may not */
static void
test_diff_line(void)
{
    char                *p, *buf;
    size_t               n, len, pl;
    lines_t              l;
    runner_logstream_t   ls;
    const char          *ts = "2026-11-29T10:00:04Z ";

    config.max_line = 1024;
    config.diff_max = 100000;

    len = 50000;
    pl = strlen(ts);
    p = malloc(pl + len + 1);
    buf = malloc(3 * (pl + len + 1 + 8));

    memcpy(p, ts, pl);
    memset(p + pl, 'x', len);
    memcpy(p + pl, RUNNER_DIFF_PREFIX, sizeof(RUNNER_DIFF_PREFIX) - 1);
    p[pl + len] = '\n';

    n = frame(buf, 1, p, pl + len + 1);
    n += frame(buf + n, 2, p, pl + len + 1);
    p[pl] = '[';
    n += frame(buf + n, 1, p, pl + len + 1);

    memset(&l, 0, sizeof(l));
    runner_logstream_init(&ls, collect, &l);
    runner_logstream_feed(&ls, buf, n);
    runner_logstream_free(&ls);

    ok(l.n == 3 && l.len[0] == len && l.cut[0] == 0,
       "the diff line on stdout: 50 KB kept whole (--diff-max 100000)");
    ok(l.n == 3 && l.len[1] == 1024 && l.cut[1] == len - 1024,
       "the same line on stderr: cut at --max-line");
    ok(l.n == 3 && l.len[2] == 1024 && l.cut[2] == len - 1024,
       "another stdout line: cut at --max-line");
    lines_free(&l);

    /* a diff line over --diff-max + slack is cut too */
    free(p);
    free(buf);
    len = 100000 + RUNNER_DIFF_SLACK + 10;
    p = malloc(pl + len + 1);
    buf = malloc(pl + len + 1 + 8);
    memcpy(p, ts, pl);
    memset(p + pl, 'x', len);
    memcpy(p + pl, RUNNER_DIFF_PREFIX, sizeof(RUNNER_DIFF_PREFIX) - 1);
    p[pl + len] = '\n';
    n = frame(buf, 1, p, pl + len + 1);

    memset(&l, 0, sizeof(l));
    runner_logstream_init(&ls, collect, &l);
    runner_logstream_feed(&ls, buf, n);
    runner_logstream_free(&ls);

    ok(l.n == 1 && l.len[0] == 100000 + RUNNER_DIFF_SLACK && l.cut[0] == 10,
       "a diff line over --diff-max plus the slack is cut there");
    lines_free(&l);
    free(p);
    free(buf);

    runner_unit_defaults();
}


/* a frame declaring 4 GiB: nothing allocated for it; its bytes are a line
 * like any other; odd stream ids are stderr */
static void
test_frames(void)
{
    char                 buf[256];
    unsigned char        hdr[8];
    size_t               n;
    lines_t              l;
    runner_logstream_t   ls;

    memset(&l, 0, sizeof(l));
    runner_logstream_init(&ls, collect, &l);

    header(hdr, 1, 0xffffffffu);
    runner_logstream_feed(&ls, (char *) hdr, 8);
    runner_logstream_feed(&ls, "2026-11-29T10:00:05Z short\nand more", 35);

    ok(l.n == 1 && strcmp(l.line[0], "short") == 0 && ls.line_cap[1] < 65536
       && ls.frame_left == 0xffffffffu - 35,
       "a frame declaring 4 GiB: its lines come as they arrive, "
       "no 4 GiB buffer");
    runner_logstream_feed(&ls, NULL, 0);
    ok(l.n == 2 && strcmp(l.line[1], "and more") == 0,
       "... and what it held at the end of the stream");
    runner_logstream_free(&ls);
    lines_free(&l);

    /* stream ids 0, 3 and 255: delivered as stderr (never the agent's) */
    n = frame(buf, 0, "2026-11-29T10:00:06Z zero\n", 26);
    n += frame(buf + n, 3, "2026-11-29T10:00:06Z three\n", 27);
    n += frame(buf + n, 255, "2026-11-29T10:00:06Z {\"type\":\"text\"}\n", 37);
    n += frame(buf + n, 1, "", 0);
    n += frame(buf + n, 1, "2026-11-29T10:00:07Z out\n", 25);

    memset(&l, 0, sizeof(l));
    runner_logstream_init(&ls, collect, &l);
    runner_logstream_feed(&ls, buf, n);
    runner_logstream_free(&ls);

    ok(l.n == 4 && l.stream[0] == 2 && l.stream[1] == 2 && l.stream[2] == 2
       && strcmp(l.line[2], "{\"type\":\"text\"}") == 0,
       "stream ids 0, 3, 255: stderr");
    ok(l.n == 4 && l.stream[3] == 1 && strcmp(l.line[3], "out") == 0,
       "an empty frame changes nothing; stdout after it");
    lines_free(&l);

    /* no timestamp: 47 bytes without a space are the line's */
    memset(buf + 100, 'z', 60);
    buf[160] = '\n';
    n = frame(buf, 1, buf + 100, 61);

    memset(&l, 0, sizeof(l));
    runner_logstream_init(&ls, collect, &l);
    runner_logstream_feed(&ls, buf, n);
    runner_logstream_free(&ls);

    ok(l.n == 1 && l.len[0] == 60, "a frame without a timestamp: every "
       "byte is the line's");
    lines_free(&l);
}


/* Docker's timestamps: trailing zeros of the fraction trimmed */
static void
test_ts_cmp(void)
{
    ok(runner_logstream_ts_cmp("2026-11-29T10:00:00.1Z",
                               "2026-11-29T10:00:00.10001Z") < 0,
       "timestamps: .1 before .10001 (a string compare says otherwise)");
    ok(runner_logstream_ts_cmp("2026-11-29T10:00:00Z",
                               "2026-11-29T10:00:00.5Z") < 0,
       "timestamps: a whole second before .5");
    ok(runner_logstream_ts_cmp("2026-11-29T10:00:00.5Z",
                               "2026-11-29T10:00:00.500Z") == 0,
       "timestamps: .5 = .500");
    ok(runner_logstream_ts_cmp("2026-11-29T10:00:01.000000001Z",
                               "2026-11-29T10:00:00.999999999Z") > 0,
       "timestamps: the next second after .999999999");
}


/* hostile step_finish events and strings: ignored or bounded */
static void
test_outcome_clamp(void)
{
    runner_outcome_t   o;
    json_t            *ev;
    char              *big;
    size_t             i, n;
    int                valid;

#define EV(s)  ev = json_loads(s, 0, NULL); runner_outcome_event(&o, ev);     \
               json_decref(ev)
#define STEP(tok, cost)                                                       \
    EV("{\"type\":\"step_finish\",\"part\":{\"tokens\":" tok ",\"cost\":"  \
       cost "}}")

    memset(&o, 0, sizeof(o));
    config.max_result = 256 * 1024;

    STEP("{\"input\":10,\"output\":5,\"reasoning\":1,"
         "\"cache\":{\"read\":2,\"write\":3}}", "0.5");
    STEP("{\"input\":-1000000,\"output\":5}", "0.1");
    STEP("{\"input\":1,\"output\":999999999999}", "0.1");
    STEP("{\"input\":1,\"output\":2.5}", "0.1");
    STEP("{\"input\":1,\"cache\":{\"read\":-1}}", "0.1");
    STEP("{\"input\":1}", "-5");
    STEP("{\"input\":1}", "1e300");
    STEP("{\"input\":1}", "\"5\"");
    STEP("{\"input\":1}", "1000.5");
    STEP("{\"input\":1,\"output\":1}", "0.25");

    ok(o.tokens_input == 11 && o.tokens_output == 6
       && o.tokens_reasoning == 1 && o.tokens_cache_read == 2
       && o.tokens_cache_write == 3,
       "tokens: steps with negative, absurd or fractional counts ignored");
    ok(o.cost > 0.749 && o.cost < 0.751,
       "cost: negative, absurd, non-numeric steps ignored (0.75)");

    for (i = 0; i < 200; i++) {
        STEP("{\"input\":1000000000,\"output\":1000000000}", "1000");
    }
    ok(o.tokens_input == 11 + 200 * 1000000000LL && o.cost < 200001,
       "the most a step may count, 200 times: summed, no overflow");

    /* a 300 KiB result of two-byte characters: cut at a character */
    n = 300 * 1024;
    big = malloc(n + 64);
    strcpy(big, "{\"type\":\"text\",\"part\":{\"text\":\"x");
    for (i = strlen(big); i < n; i += 2) {
        memcpy(big + i, "\xc3\xa9", 2);
    }
    strcpy(big + i, "\"}}");
    EV(big);
    free(big);

    {
        json_t  *js = o.result ? json_string(o.result) : NULL;

        valid = js != NULL;
        json_decref(js);
    }
    ok(o.result && strlen(o.result) <= 256 * 1024 + 80
       && strstr(o.result, "[... truncated: ") != NULL,
       "a 300 KiB result: capped at --max-result, with a marker");
    ok(valid, "... still valid UTF-8 (cut at a character)");

    big = malloc(20000);
    strcpy(big, "{\"type\":\"error\",\"error\":{\"name\":\"");
    memset(big + strlen(big), 'e', 10000);
    strcpy(big + 10000, "\"}}");
    EV(big);
    free(big);
    ok(o.error && strlen(o.error) < 4200, "an error message: bounded (4 KiB)");

    EV("{\"type\":\"text\",\"sessionID\":\"ses_../../x\",\"part\":{}}");
    ok(o.oc_session[0] == '\0', "an OpenCode session id with odd "
       "characters is not kept");

    runner_outcome_free(&o);
#undef STEP
#undef EV
}


/* what came before the last agent_exit may be forged by the agent: only
 * the lines after it count (push, pull request, diff) */
static void
test_outcome_forged(void)
{
    runner_outcome_t   o;
    json_t            *ev;

#define EV(s)  ev = json_loads(s, 0, NULL); runner_outcome_event(&o, ev);     \
               json_decref(ev)

    memset(&o, 0, sizeof(o));
    config.diff_max = 1024;

    EV("{\"type\":\"smcp\",\"step\":\"agent_start\"}");
    EV("{\"type\":\"smcp\",\"step\":\"diff\",\"diff\":\"FORGED\"}");
    EV("{\"type\":\"smcp\",\"step\":\"pushed\",\"branch\":\"x\"}");
    EV("{\"type\":\"smcp\",\"step\":\"push_failed\","
       "\"message\":\"forged\"}");
    EV("{\"type\":\"smcp\",\"step\":\"agent_exit\",\"exitCode\":0}");
    ok(o.pr_step == RUNNER_PR_NONE && o.diff == NULL && o.diff_len == 0
       && o.push_error == NULL,
       "agent_exit: the push, pull request and diff lines before it are "
       "dropped");

    EV("{\"type\":\"smcp\",\"step\":\"pr_skipped\","
       "\"reason\":\"no changes\"}");
    EV("{\"type\":\"smcp\",\"step\":\"diff\",\"diff\":\"REAL\"}");
    ok(o.pr_step == RUNNER_PR_SKIPPED && o.diff
       && strcmp(o.diff, "REAL") == 0,
       "... those after it count");

    runner_outcome_free(&o);
#undef EV
}


/* the diff, file by file: files_changed and the index of sections */
static void
test_diff_index(void)
{
    runner_diff_t  sum;
    json_t       *files, *index, *f, *span;
    const char   *d, *path;
    size_t        i, len, off, total;
    int           spans_ok;
    const char   *want[][3] = {
        { "x.txt", "2", "1" }, { "new name.txt", "1", "1" },
        { "t\tab", "1", "0" }, { "gone", "0", "1" }, { "bin.png", "0", "0" },
    };

    d = "diff --git a/x.txt b/x.txt\nindex 1..2 100644\n--- a/x.txt\n"
        "+++ b/x.txt\n@@ -1 +1,2 @@\n-old\n+new\n+++more\n"
        "diff --git a/old name.txt b/new name.txt\nsimilarity index 90%\n"
        "rename from old name.txt\nrename to new name.txt\n"
        "--- a/old name.txt\t\n+++ b/new name.txt\t\n@@ -1 +1 @@\n-a\n+b\n"
        "diff --git \"a/t\\tab\" \"b/t\\tab\"\nnew file mode 100644\n"
        "--- /dev/null\n+++ \"b/t\\tab\"\n@@ -0,0 +1 @@\n+t\n"
        "diff --git a/gone b/gone\ndeleted file mode 100644\n--- a/gone\n"
        "+++ /dev/null\n@@ -1 +0,0 @@\n--- a/x\n"
        "diff --git a/bin.png b/bin.png\nindex 1..2 100644\n"
        "Binary files a/bin.png and b/bin.png differ\n";
    len = strlen(d);

    runner_outcome_diff(d, len, &sum);
    files = sum.files;
    index = sum.index;

    ok(json_array_size(files) == 5, "five files in the diff");

    for (i = 0; i < 5 && i < json_array_size(files); i++) {
        f = json_array_get(files, i);
        path = json_string_value(json_object_get(f, "path"));

        ok(path && strcmp(path, want[i][0]) == 0
           && json_integer_value(json_object_get(f, "additions"))
              == atoi(want[i][1])
           && json_integer_value(json_object_get(f, "deletions"))
              == atoi(want[i][2]),
           "%s", want[i][0]);
    }

    ok(json_object_size(index) == 6, "the index: six paths (a rename "
       "under both)");
    ok(json_equal(json_object_get(index, "old name.txt"),
                  json_object_get(index, "new name.txt"))
       && json_object_get(index, "old name.txt") != NULL,
       "the rename: the same section under its old and new path");

    spans_ok = 1;
    total = 0;

    for (i = 0; i < 5; i++) {
        span = json_object_get(index, want[i][0]);
        off = json_integer_value(json_array_get(span, 0));
        total += json_integer_value(json_array_get(span, 1));

        if (span == NULL || off >= len
            || strncmp(d + off, "diff --git ", 11) != 0)
        {
            spans_ok = 0;
        }
    }

    ok(spans_ok && total == len, "every section starts at its \"diff "
       "--git\" line; together they are the whole diff");

    span = json_object_get(index, "t\tab");
    off = json_integer_value(json_array_get(span, 0));
    ok(span && strncmp(d + off, "diff --git \"a/t\\tab\"", 20) == 0
       && json_integer_value(json_array_get(span, 1)) == 97,
       "a C-quoted path: unquoted, its section exact");

    ok(strcmp(sum.stat, "5 files changed, 4 insertions(+), 3 deletions(-)")
       == 0, "the stat: %s", sum.stat);

    runner_outcome_diff_free(&sum);

    /* hostile: no newline at all, a lone header, garbage */
    runner_outcome_diff("diff --git a/z b/z", 18, &sum);
    ok(json_array_size(sum.files) == 1 && json_object_get(sum.index, "z")
       && strcmp(sum.stat, "1 file changed, 0 insertions(+), 0 deletions(-)")
          == 0,
       "a header alone, no newline: one file, no line");
    runner_outcome_diff_free(&sum);

    runner_outcome_diff("\0\0+x\n-y\n", 9, &sum);
    ok(json_array_size(sum.files) == 0 && json_object_size(sum.index) == 0
       && sum.stat[0] == '\0', "lines before any header: no file, no stat");
    runner_outcome_diff_free(&sum);

    runner_outcome_diff("diff --git a b\n@@ -1 +1 @@\n-a\n+b\n", 34,
                        &sum);
    ok(json_array_size(sum.files) == 0 && json_object_size(sum.index) == 0
       && sum.stat[0] == '\0', "a section without a path it can read: in "
       "none of files, index, stat");
    runner_outcome_diff_free(&sum);
}


/* one section through common/smcp_diff.c: its paths, counts and flags */
static int
diff_one(const char *d, const char *old_path, const char *new_path,
    int64_t add, int64_t del, unsigned flags)
{
    int                rc;
    size_t             pos;
    smcp_diff_file_t  *f;

    f = malloc(sizeof(smcp_diff_file_t));
    pos = 0;

    rc = smcp_diff_next(d, strlen(d), &pos, f)
         && strcmp(f->old_path, old_path) == 0
         && strcmp(f->new_path, new_path) == 0
         && f->additions == add && f->deletions == del
         && f->flags == flags && pos == strlen(d)
         && f->length == strlen(d);

    if (!rc) {
        printf("# old \"%s\" new \"%s\" +%lld -%lld flags %#x\n",
               f->old_path, f->new_path, (long long) f->additions,
               (long long) f->deletions, f->flags);
    }

    free(f);

    return rc;
}


/*
 * The one diff parser (common/smcp_diff.c), on what `git diff` prints:
 * renames and copies with edits, binary files, mode changes, quoted
 * paths, and hunk lines whose content starts like a header ("++", "--").
 */
static void
test_diff_parser(void)
{
    char           stat[SMCP_DIFF_STAT_MAX];
    runner_diff_t  sum;
    const char    *d;

    ok(diff_one("diff --git a/f.sql b/f.sql\nindex 9d42dad..1a6509a 100644\n"
                "--- a/f.sql\n+++ b/f.sql\n@@ -1,3 +1,4 @@\n a\n"
                "--- old comment\n+++ new\n b\n+-- more\n",
                "f.sql", "f.sql", 2, 1, 0),
       "parser: lines whose content starts with \"--\" and \"++\" are "
       "counted: +2 -1");

    ok(diff_one("diff --git a/f b/f\n--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n"
                "---- x\n++++ y\n a\n@@ -9 +9 @@\n-b\n+c\n",
                "f", "f", 2, 2, 0),
       "parser: two hunks, header-looking lines in both: +2 -2");

    ok(diff_one("diff --git a/f b/f\n--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n"
                "+b\n\\ No newline at end of file\n+c\n-d\n",
                "f", "f", 1, 1, 0),
       "parser: lines past a hunk's length are no content");

    ok(diff_one("diff --git a/f b/f\n--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n"
                "-a\n\n+b\n", "f", "f", 1, 1, 0),
       "parser: an empty hunk line is context");

    ok(diff_one("diff --git a/f b/f\n--- a/f\n+++ b/f\n@@ -x +y @@\n-a\n"
                "+b\n+c\n", "f", "f", 2, 1, 0),
       "parser: a hunk line it cannot read: counted to the next hunk");

    ok(diff_one("diff --git a/old.c b/src/new.c\nsimilarity index 88%\n"
                "rename from old.c\nrename to src/new.c\n"
                "index 1111111..2222222 100644\n--- a/old.c\n"
                "+++ b/src/new.c\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n",
                "old.c", "src/new.c", 1, 1, SMCP_DIFF_RENAME),
       "parser: a rename with an edit");

    ok(diff_one("diff --git a/a.txt b/b.txt\nsimilarity index 100%\n"
                "rename from a.txt\nrename to b.txt\n",
                "a.txt", "b.txt", 0, 0, SMCP_DIFF_RENAME),
       "parser: a pure rename (no hunk)");

    ok(diff_one("diff --git a/lib.c b/lib2.c\nsimilarity index 95%\n"
                "copy from lib.c\ncopy to lib2.c\n--- a/lib.c\n"
                "+++ b/lib2.c\n@@ -1 +1,2 @@\n x\n+y\n",
                "lib.c", "lib2.c", 1, 0, SMCP_DIFF_COPY),
       "parser: a copy with an edit");

    ok(diff_one("diff --git a/img.png b/img.png\nnew file mode 100644\n"
                "index 0000000..1111111\n"
                "Binary files /dev/null and b/img.png differ\n",
                "img.png", "img.png", 0, 0,
                SMCP_DIFF_NEW | SMCP_DIFF_BINARY),
       "parser: a new binary file");

    ok(diff_one("diff --git a/b.bin b/b.bin\nindex 1111111..2222222 100644\n"
                "GIT binary patch\nliteral 5\nMcmZ?wbYNg)0007N0RR91\n\n"
                "literal 3\nKcmZ>Y0000\n\n", "b.bin", "b.bin", 0, 0,
                SMCP_DIFF_BINARY),
       "parser: a binary patch (--binary)");

    ok(diff_one("diff --git a/run.sh b/run.sh\nold mode 100644\n"
                "new mode 100755\n", "run.sh", "run.sh", 0, 0,
                SMCP_DIFF_MODE),
       "parser: a mode change alone");

    ok(diff_one("diff --git a/x.sh b/y.sh\nold mode 100644\nnew mode 100755\n"
                "similarity index 90%\nrename from x.sh\nrename to y.sh\n"
                "--- a/x.sh\n+++ b/y.sh\n@@ -1 +1 @@\n-a\n+b\n",
                "x.sh", "y.sh", 1, 1, SMCP_DIFF_MODE | SMCP_DIFF_RENAME),
       "parser: a mode change, a rename and an edit");

    ok(diff_one("diff --git a/gone.txt b/gone.txt\ndeleted file mode 100644\n"
                "--- a/gone.txt\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-a\n-- b\n",
                "gone.txt", "", 0, 2, SMCP_DIFF_DELETED),
       "parser: a deleted file: no new path");

    ok(diff_one("diff --git \"a/caf\\303\\251 \\\"q\\\".txt\" "
                "\"b/caf\\303\\251 \\\"q\\\".txt\"\n"
                "new file mode 100644\n--- /dev/null\n"
                "+++ \"b/caf\\303\\251 \\\"q\\\".txt\"\n@@ -0,0 +1 @@\n+x\n",
                "", "caf\xc3\xa9 \"q\".txt", 1, 0, SMCP_DIFF_NEW),
       "parser: a new file at a quoted path (octal UTF-8, quotes): no old "
       "path");

    ok(diff_one("diff --git \"a/t\\tx\" \"b/n\\\\y\"\n"
                "similarity index 50%\nrename from \"t\\tx\"\n"
                "rename to \"n\\\\y\"\n",
                "t\tx", "n\\y", 0, 0, SMCP_DIFF_RENAME),
       "parser: a rename between quoted paths (tab, backslash)");

    /* the stat: git's --shortstat wording */
    smcp_diff_stat(stat, sizeof(stat), 3, 10, 2);
    ok(strcmp(stat, "3 files changed, 10 insertions(+), 2 deletions(-)") == 0,
       "stat: %s", stat);
    smcp_diff_stat(stat, sizeof(stat), 1, 1, 1);
    ok(strcmp(stat, "1 file changed, 1 insertion(+), 1 deletion(-)") == 0,
       "stat: %s", stat);
    smcp_diff_stat(stat, sizeof(stat), 2, 5, 0);
    ok(strcmp(stat, "2 files changed, 5 insertions(+)") == 0,
       "stat: %s", stat);
    smcp_diff_stat(stat, sizeof(stat), 1, 0, 3);
    ok(strcmp(stat, "1 file changed, 3 deletions(-)") == 0, "stat: %s", stat);
    smcp_diff_stat(stat, sizeof(stat), 1, 0, 0);
    ok(strcmp(stat, "1 file changed, 0 insertions(+), 0 deletions(-)") == 0,
       "stat: %s (a binary file or a mode change)", stat);
    smcp_diff_stat(stat, sizeof(stat), 0, 0, 0);
    ok(stat[0] == '\0', "stat: no file, no stat");

    /* files, index and stat agree: a rename with an edit, a new file */
    d = "diff --git a/README.md b/DOCS.md\nsimilarity index 80%\n"
        "rename from README.md\nrename to DOCS.md\n--- a/README.md\n"
        "+++ b/DOCS.md\n@@ -1 +1,2 @@\n # x\n+more\n"
        "diff --git a/new.txt b/new.txt\nnew file mode 100644\n"
        "--- /dev/null\n+++ b/new.txt\n@@ -0,0 +1 @@\n+new\n";

    runner_outcome_diff(d, strlen(d), &sum);
    ok(json_array_size(sum.files) == 2
       && strcmp(json_string_value(json_object_get(json_array_get(sum.files,
                                                                  0),
                                                   "path")),
                 "DOCS.md") == 0
       && json_object_size(sum.index) == 3
       && json_equal(json_object_get(sum.index, "DOCS.md"),
                     json_object_get(sum.index, "README.md"))
       && strcmp(sum.stat, "2 files changed, 2 insertions(+)") == 0,
       "a rename: filesChanged names the new path, the index both, the "
       "stat counts it once: %s", sum.stat);
    runner_outcome_diff_free(&sum);
}


/* the workspace walk: counted, bounded, no symlink followed */
static void
test_workspace(void)
{
    char             root[64], path[4096], block[4096], err[256];
    int              i, fd, rc;
    size_t           n;
    runner_usage_t   u;

    strcpy(root, "/tmp/smcp-unit-ws-XXXXXX");
    if (mkdtemp(root) == NULL) {
        ok(0, "mkdtemp");
        return;
    }

    memset(block, 'w', sizeof(block));

    /* 10 files of 4 KiB, a directory, a symlink to /, a fifo */
    for (i = 0; i < 10; i++) {
        snprintf(path, sizeof(path), "%s/f%d", root, i);
        fd = open(path, O_WRONLY | O_CREAT, 0644);
        n = write(fd, block, sizeof(block));
        close(fd);
        (void) n;
    }

    snprintf(path, sizeof(path), "%s/d", root);
    mkdir(path, 0755);
    snprintf(path, sizeof(path), "%s/d/root", root);
    rc = symlink("/", path);
    snprintf(path, sizeof(path), "%s/d/fifo", root);
    mkfifo(path, 0644);
    (void) rc;

    rc = runner_workspace_usage(root, 0, 0, &u, err, sizeof(err));
    ok(rc == RUNNER_OK && u.inodes == 14 && !u.too_deep,
       "14 inodes: the root, 10 files, a directory, a symlink (not "
       "followed), a fifo (not opened)");
    ok(u.bytes >= 10 * 4096 && u.bytes < 10 * 4096 + 64 * 1024,
       "bytes: what the files take");

    rc = runner_workspace_usage(root, 0, 5, &u, err, sizeof(err));
    ok(rc == RUNNER_OK && u.inodes == 6, "--workspace-inodes 5: the walk "
       "ends at the sixth");

    rc = runner_workspace_usage(root, 8192, 0, &u, err, sizeof(err));
    ok(rc == RUNNER_OK && u.bytes > 8192 && u.inodes < 10,
       "a byte limit: the walk ends once past it");

    /* deeper than the walk goes */
    n = snprintf(path, sizeof(path), "%s/d", root);
    for (i = 0; i < RUNNER_WS_DEPTH + 2 && n + 3 < sizeof(path); i++) {
        n += snprintf(path + n, sizeof(path) - n, "/x");
        mkdir(path, 0755);
    }

    rc = runner_workspace_usage(root, 0, 0, &u, err, sizeof(err));
    ok(rc == RUNNER_OK && u.too_deep, "a tree deeper than the walk: "
       "too deep");

    snprintf(path, sizeof(path), "%s/d/root", root);
    rc = runner_workspace_usage(path, 0, 0, &u, err, sizeof(err));
    ok(rc == RUNNER_ERR, "a root that is a symlink: refused");

    rc = runner_workspace_usage("/nonexistent/smcp", 0, 0, &u, err,
                                sizeof(err));
    ok(rc == RUNNER_ERR && strstr(err, "/nonexistent/smcp") != NULL,
       "a root that is not there: an error naming it");

    snprintf(path, sizeof(path), "rm -rf '%s'", root);
    rc = system(path);
    (void) rc;
}


/* runner_log: nothing from a message can end its line or its msg="" */
static void
test_log_escape(void)
{
    char    out[256], line[2048];
    FILE   *f;
    int     fd, saved, nl;
    size_t  n, i;

    runner_log_escape(out, sizeof(out), "a\"b\\c\nd\re\tf\x01g\x7f\xc3\xa9",
                      16);
    ok(strcmp(out, "a\\\"b\\\\c\\nd\\re\\tf\\x01g\\x7f\\xc3\\xa9") == 0,
       "escaped: quote, backslash, newline, CR, tab, control, DEL, "
       "non-ASCII");

    runner_log_escape(out, sizeof(out), "x\0y", 3);
    ok(strcmp(out, "x\\x00y") == 0, "escaped: NUL");

    n = runner_log_escape(out, 8, "\x01\x02\x03", 3);
    ok(n == 4 && strcmp(out, "\\x01") == 0, "a full buffer: whole escapes "
       "only");

    /* the line itself, through stderr */
    f = tmpfile();
    fd = fileno(f);
    fflush(stderr);
    saved = dup(2);
    dup2(fd, 2);

    runner_log("info", "run_0123456789abcdef01234567", "agent said: %s",
               "done\"\n2026-01-01T00:00:00.000Z level=crit pid=1 "
               "msg=\"forged");
    fflush(stderr);
    dup2(saved, 2);
    close(saved);

    rewind(f);
    n = fread(line, 1, sizeof(line) - 1, f);
    line[n] = '\0';
    fclose(f);

    for (nl = 0, i = 0; i < n; i++) {
        nl += line[i] == '\n';
    }

    ok(nl == 1 && line[n - 1] == '\n', "a hostile message: one log line");
    ok(strstr(line, "msg=\"agent said: done\\\"\\n2026-01-01T00:00:00.000Z "
                    "level=crit pid=1 msg=\\\"forged\"\n") != NULL,
       "... its quotes and newline escaped inside msg=\"...\"");
}


/* --pool-images: IMAGE=N of the images a run may choose, each once, all
 * the pools RUNNER_POOL_MAX sandboxes at most; what is wrong said */
static void
test_config_pools(void)
{
    int               rc;
    size_t            i;
    char              err[RUNNER_ERRLEN], list[400];
    runner_config_t   c;
    char             *argv[10];

    static const struct {
        const char  *pool;
        const char  *images;
        const char  *want;          /* the error's words */
    } bad[] = {
        { "0", "a:1", "\"a:1\": want IMAGE=N" },
        { "0", "=2", "\"=2\": want IMAGE=N" },
        { "0", "a:1=", "a:1=\"\": not a number from 0 to 64" },
        { "0", "a:1=x", "a:1=\"x\": not a number from 0 to 64" },
        { "0", "a:1=-1", "a:1=\"-1\": not a number from 0 to 64" },
        { "0", "a:1=65", "a:1=\"65\": not a number from 0 to 64" },
        { "0", "c:1=1", "c:1 is not an image a run may choose (--image, "
                        "--allowed-images)" },
        { "0", "a:1=1,a:1=2", "a:1 is named twice" },
        { "2", "d:1=1", "d:1 is named twice (--pool is the default "
                        "image's)" },
        { "0", "a:1=40,b:1=25", "--pool and --pool-images: 65 sandboxes in "
                                "all, at most 64" },
        { "10", "a:1=30,b:1=25", "65 sandboxes in all, at most 64" },
    };

    setenv("SMCP_EGRESS_URL", "http://10.0.0.1:8090", 1);

    argv[0] = "smcp-runner";
    argv[1] = "--image";
    argv[2] = "d:1";
    argv[3] = "--allowed-images";
    argv[4] = "a:1, b:1";
    argv[5] = "--pool";
    argv[6] = "2";
    argv[7] = "--pool-images";
    argv[8] = " a:1=3 ,b:1=0";
    argv[9] = NULL;

    rc = runner_config_load(&c, 9, argv, err, sizeof(err));
    ok(rc == RUNNER_OK && c.npools == 3 && c.pool_total == 5
       && strcmp(c.pools[0].image, "d:1") == 0 && c.pools[0].n == 2
       && strcmp(c.pools[1].image, "a:1") == 0 && c.pools[1].n == 3
       && strcmp(c.pools[2].image, "b:1") == 0 && c.pools[2].n == 0,
       "config: --pool is the default image's, then --pool-images' (%s)",
       rc == RUNNER_OK ? "ok" : err);

    argv[6] = "0";
    argv[8] = "d:1=4,a:1=60";
    rc = runner_config_load(&c, 9, argv, err, sizeof(err));
    ok(rc == RUNNER_OK && c.npools == 2 && c.pool_total == 64
       && strcmp(c.pools[0].image, "d:1") == 0 && c.pools[0].n == 4,
       "config: --pool 0: --pool-images may name the default image; 64 "
       "in all");

    rc = runner_config_load(&c, 5, argv, err, sizeof(err));
    ok(rc == RUNNER_OK && c.npools == 0 && c.pool_total == 0,
       "config: no pool by default");

    setenv("SMCP_POOL_IMAGES", "b:1=1", 1);
    rc = runner_config_load(&c, 5, argv, err, sizeof(err));
    ok(rc == RUNNER_OK && c.npools == 1 && c.pool_total == 1
       && strcmp(c.pools[0].image, "b:1") == 0,
       "config: $SMCP_POOL_IMAGES");
    unsetenv("SMCP_POOL_IMAGES");

    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        argv[6] = (char *) bad[i].pool;
        snprintf(list, sizeof(list), "%s", bad[i].images);
        argv[8] = list;
        rc = runner_config_load(&c, 9, argv, err, sizeof(err));
        ok(rc == RUNNER_ERR && strstr(err, "--pool") != NULL
           && strstr(err, bad[i].want) != NULL,
           "config: --pool %s --pool-images \"%s\" refused: %s",
           bad[i].pool, bad[i].images, rc == RUNNER_ERR ? err : "(taken)");
    }

    /* longer than RUNNER_POOL_IMAGES images */
    snprintf(list, sizeof(list), "a:1=1");

    for (i = 1; i <= RUNNER_POOL_IMAGES; i++) {
        snprintf(list + strlen(list), sizeof(list) - strlen(list),
                 ",x%zu:1=1", i);
    }

    argv[4] = "a:1,x1:1,x2:1,x3:1,x4:1,x5:1,x6:1,x7:1,x8:1,x9:1,x10:1,"
              "x11:1,x12:1,x13:1,x14:1,x15:1,x16:1";
    argv[6] = "0";
    argv[8] = list;
    rc = runner_config_load(&c, 9, argv, err, sizeof(err));
    ok(rc == RUNNER_ERR && strstr(err, "--pool-images: more than 16 "
                                  "images"), "config: %s",
       rc == RUNNER_ERR ? err : "(taken)");
}


/* --keys-file: the ring, its first key signs; or --secret-file, never
 * both; a bad file refused naming its line */
static void
test_config_keys(void)
{
    int               rc, fd;
    char              err[512], path[] = "/tmp/smcp-unit-keys-XXXXXX";
    char             *argv[8];
    runner_config_t   c;

    static const char  keys[] =
        "# rotated\n"
        "k2 new-secret-0123456789abcdef0123456789\n"
        "k1 old-secret-0123456789abcdef0123456789 legacy\n";

    fd = mkstemp(path);
    if (fd < 0 || write(fd, keys, sizeof(keys) - 1) != sizeof(keys) - 1) {
        ok(0, "config: a keys file written");
        return;
    }

    argv[0] = "smcp-runner";
    argv[1] = "--egress-url";
    argv[2] = "http://x";
    argv[3] = "--keys-file";
    argv[4] = path;
    argv[5] = NULL;

    /* $PROXY_JWT_SECRET is set: the keys file takes its place */
    rc = runner_config_load(&c, 5, argv, err, sizeof(err));
    ok(rc == RUNNER_OK && c.keys.n == 2 && strcmp(c.keys.key[0].kid, "k2")
       == 0 && c.keys.legacy == 1 && c.secret.len == 0,
       "config: --keys-file: two keys, the first signs (%s)",
       rc == RUNNER_OK ? "ok" : err);

    argv[5] = "--secret-file";
    argv[6] = path;
    argv[7] = NULL;
    rc = runner_config_load(&c, 7, argv, err, sizeof(err));
    ok(rc == RUNNER_ERR && strstr(err, "--keys-file and --secret-file"),
       "config: --keys-file with --secret-file: refused: %s", err);

    if (ftruncate(fd, 0) != 0
        || pwrite(fd, "k1 short\n", 9, 0) != 9)
    {
        ok(0, "config: the keys file rewritten");
    }

    rc = runner_config_load(&c, 5, argv, err, sizeof(err));
    ok(rc == RUNNER_ERR && strstr(err, path) && strstr(err, "line 1: the "
       "secret must be 32-256 bytes") && c.keys.n == 0,
       "config: a bad keys file: refused: %s", err);

    close(fd);
    unlink(path);

    unsetenv("PROXY_JWT_SECRET");
    rc = runner_config_load(&c, 3, argv, err, sizeof(err));
    ok(rc == RUNNER_ERR && strstr(err, "--keys-file or --secret-file"),
       "config: no key: refused: %s", err);
    setenv("PROXY_JWT_SECRET", "0123456789abcdef0123", 1);
}


/* the notifications' secret: the file's first line, else
 * $SMCP_NOTIFY_SECRET itself (docker-compose's), else none; short: refused */
static void
test_config_notify(void)
{
    int               rc, fd;
    char              err[512], path[] = "/tmp/smcp-unit-notify-XXXXXX";
    char             *argv[6];
    runner_config_t   c;

    static const char  file[] = "file-secret-0123456789\nsecond line\n";

    argv[0] = "smcp-runner";
    argv[1] = "--egress-url";
    argv[2] = "http://x";
    argv[3] = NULL;

    unsetenv("SMCP_NOTIFY_SECRET");
    rc = runner_config_load(&c, 3, argv, err, sizeof(err));
    ok(rc == RUNNER_OK && c.notify_secret.len == 0,
       "config: no notify secret: unsigned (%s)", rc ? err : "ok");

    setenv("SMCP_NOTIFY_SECRET", "env-secret-0123456789", 1);
    rc = runner_config_load(&c, 3, argv, err, sizeof(err));
    ok(rc == RUNNER_OK && c.notify_secret.len == 21
       && memcmp(c.notify_secret.data, "env-secret-0123456789", 21) == 0,
       "config: $SMCP_NOTIFY_SECRET: the secret itself (%s)",
       rc ? err : "ok");

    fd = mkstemp(path);
    if (fd < 0 || write(fd, file, sizeof(file) - 1) != sizeof(file) - 1) {
        ok(0, "config: a notify secret file written");
        return;
    }

    close(fd);
    argv[3] = "--notify-secret-file";
    argv[4] = path;
    argv[5] = NULL;
    rc = runner_config_load(&c, 5, argv, err, sizeof(err));
    ok(rc == RUNNER_OK && c.notify_secret.len == 22
       && memcmp(c.notify_secret.data, "file-secret-0123456789", 22) == 0,
       "config: --notify-secret-file wins, its first line (%s)",
       rc ? err : "ok");
    unlink(path);

    setenv("SMCP_NOTIFY_SECRET", "short", 1);
    rc = runner_config_load(&c, 3, argv, err, sizeof(err));
    ok(rc == RUNNER_ERR && strstr(err, "SMCP_NOTIFY_SECRET")
       && strstr(err, "shorter than 16 bytes"),
       "config: a short $SMCP_NOTIFY_SECRET: refused: %s", err);
    ok(strstr(err, "short\"") == NULL && strstr(err, ": short") == NULL,
       "config: ... the message does not echo it");
    unsetenv("SMCP_NOTIFY_SECRET");
}


/* the option table: flag, else environment, else default; bad values
 * refused with what was wrong; --metrics off */
static void
test_config(void)
{
    int               rc;
    char              err[RUNNER_ERRLEN], *md;
    size_t            mdlen;
    FILE             *f;
    runner_config_t   c;
    char             *argv[8];

    setenv("PROXY_JWT_SECRET", "0123456789abcdef0123", 1);
    setenv("SMCP_EGRESS_URL", "http://10.0.0.1:8090", 1);
    setenv("SMCP_CONCURRENCY", "7", 1);
    unsetenv("SMCP_REDIS");

    argv[0] = "smcp-runner";
    argv[1] = "--concurrency";
    argv[2] = "3";
    argv[3] = "--max-line=1m";
    argv[4] = NULL;

    rc = runner_config_load(&c, 4, argv, err, sizeof(err));
    ok(rc == RUNNER_OK && c.concurrency == 3 && c.max_line == 1024 * 1024,
       "config: flags (--flag VALUE, --flag=VALUE) win over the "
       "environment");
    ok(strcmp(c.egress_url, "http://10.0.0.1:8090") == 0
       && c.keys.n == 1 && c.keys.key[0].len == 20
       && c.keys.key[0].kid_len == 0 && c.keys.legacy == 0
       && c.secret.len == 0,
       "config: the environment over the default ($PROXY_JWT_SECRET: a "
       "ring of one key without kid, the bare secret wiped)");
    ok(c.redis.kind == SMCP_REDIS_TCP
       && strcmp(c.redis.addr.host, "127.0.0.1") == 0
       && c.redis.addr.port == 6379
       && c.diff_max == 10 * 1024 * 1024 && c.nano_cpus == 1000000000
       && strcmp(c.prefix, "smcp:") == 0 && c.claim_idle_ms == 60000,
       "config: the defaults");

    rc = runner_config_load(&c, 1, argv, err, sizeof(err));
    ok(rc == RUNNER_OK && c.concurrency == 7, "config: $SMCP_CONCURRENCY");

    argv[1] = "--concurrency";
    argv[2] = "2x";
    rc = runner_config_load(&c, 3, argv, err, sizeof(err));
    ok(rc == RUNNER_ERR && strstr(err, "--concurrency \"2x\": not a number "
                                  "from 1 to 256"), "config: %s", err);

    rc = runner_config_load(&c, 2, argv, err, sizeof(err));
    ok(rc == RUNNER_ERR && strstr(err, "option \"--concurrency\" needs a "
                                  "value"), "config: %s", err);

    argv[1] = "--bogus";
    rc = runner_config_load(&c, 2, argv, err, sizeof(err));
    ok(rc == RUNNER_ERR && strstr(err, "unknown option \"--bogus\""),
       "config: %s", err);

    setenv("SMCP_DIFF_MAX", "1g", 1);
    rc = runner_config_load(&c, 1, argv, err, sizeof(err));
    ok(rc == RUNNER_ERR && strstr(err, "$SMCP_DIFF_MAX \"1g\"")
       && strstr(err, "from 1k to 256m"), "config: %s", err);
    unsetenv("SMCP_DIFF_MAX");

    unsetenv("SMCP_EGRESS_URL");
    rc = runner_config_load(&c, 1, argv, err, sizeof(err));
    ok(rc == RUNNER_ERR && strstr(err, "--egress-url (or $SMCP_EGRESS_URL) "
                                  "is required"), "config: %s", err);

    setenv("SMCP_REDIS", "unix:/run/redis.sock", 1);
    argv[1] = "--egress-url";
    argv[2] = "http://x";
    rc = runner_config_load(&c, 3, argv, err, sizeof(err));
    ok(rc == RUNNER_OK && c.redis.kind == SMCP_REDIS_UNIX
       && strcmp(c.redis.path, "/run/redis.sock") == 0,
       "config: --redis unix:/path");

    setenv("SMCP_REDIS", "sentinel://10.0.0.5:26380,s2/smcp", 1);
    rc = runner_config_load(&c, 3, argv, err, sizeof(err));
    ok(rc == RUNNER_OK && c.redis.kind == SMCP_REDIS_SENTINEL
       && c.redis.nsentinels == 2 && c.redis.sentinels[1].port == 26379
       && strcmp(c.redis.master, "smcp") == 0,
       "config: --redis sentinel://two/smcp");

    setenv("SMCP_REDIS", "sentinel://10.0.0.5:26380/", 1);
    rc = runner_config_load(&c, 3, argv, err, sizeof(err));
    ok(rc == RUNNER_ERR && strstr(err, "--redis: sentinel://: the master's "
                                  "name"), "config: %s", err);
    unsetenv("SMCP_REDIS");

    test_config_pools();
    test_config_keys();
    test_config_notify();

    /* --metrics: off by default and with "off" (make up's setting when
     * there is to be no listener), an address otherwise */
    setenv("SMCP_EGRESS_URL", "http://10.0.0.1:8090", 1);
    rc = runner_config_load(&c, 1, argv, err, sizeof(err));
    ok(rc == RUNNER_OK && strcmp(c.metrics, "off") == 0
       && runner_metrics_start(c.metrics, err, sizeof(err)) == RUNNER_OK
       && !runner_metrics_enabled(), "config: --metrics off by default");

    setenv("SMCP_RUNNER_METRICS", "off", 1);
    rc = runner_config_load(&c, 1, argv, err, sizeof(err));
    ok(rc == RUNNER_OK
       && runner_metrics_start(c.metrics, err, sizeof(err)) == RUNNER_OK
       && !runner_metrics_enabled(), "config: SMCP_RUNNER_METRICS=off: no "
       "listener, and no error");

    setenv("SMCP_RUNNER_METRICS", "nowhere", 1);
    rc = runner_config_load(&c, 1, argv, err, sizeof(err));
    ok(rc == RUNNER_OK
       && runner_metrics_start(c.metrics, err, sizeof(err)) == RUNNER_ERR
       && strstr(err, "--metrics nowhere: want IP:PORT"),
       "config: SMCP_RUNNER_METRICS=nowhere: %s", err);
    unsetenv("SMCP_RUNNER_METRICS");

    /* the reference's entries (docs/configuration.md) of the options:
     * t/config_reference.t holds them against this table */
    f = open_memstream(&md, &mdlen);
    runner_config_markdown(f);
    fclose(f);
    ok(strstr(md, "| `--metrics ADDR|off` | `SMCP_RUNNER_METRICS` | `off` |")
       != NULL, "config: --help=markdown: --metrics, its default off");
    free(md);
}


/* the agent's stderr tail: the last bytes, whole lines joined, cut at a
 * character, control bytes and bad UTF-8 repaired, blank ends dropped */
static void
test_stderr_tail(void)
{
    int                i, good;
    char               text[RUNNER_STDERR_TAIL], line[64];
    runner_outcome_t   o;

    memset(&o, 0, sizeof(o));
    runner_outcome_stderr_text(&o, text, sizeof(text));
    ok(text[0] == '\0', "stderr tail: none is \"\"");

    runner_outcome_stderr(&o, "", 0);
    runner_outcome_stderr(&o, "first", 5);
    runner_outcome_stderr(&o, "bell\a and \x1b[31m red \xff\xfe", 22);
    runner_outcome_stderr(&o, "", 0);
    runner_outcome_stderr_text(&o, text, sizeof(text));
    ok(strcmp(text, "first\nbell? and ?[31m red ??") == 0,
       "stderr tail: lines joined, control and invalid bytes replaced: %s",
       text);

    /* 500 numbered lines: only the last ones are kept, whole and in order */
    memset(&o, 0, sizeof(o));

    for (i = 0; i < 500; i++) {
        snprintf(line, sizeof(line), "line %03d of the agent", i);
        runner_outcome_stderr(&o, line, strlen(line));
    }

    runner_outcome_stderr_text(&o, text, sizeof(text));
    good = strlen(text) < RUNNER_STDERR_TAIL
           && strstr(text, "line 499 of the agent") != NULL
           && strstr(text, "line 400 of the agent") == NULL
           && text[strlen(text) - 1] == 't';
    ok(good, "stderr tail: bounded (%zu bytes), the last lines kept",
       strlen(text));

    /* a line longer than the tail, ending in a multibyte character cut
     * at the tail's start */
    memset(&o, 0, sizeof(o));
    {
        char  big[3 * RUNNER_STDERR_TAIL];

        for (i = 0; i + 1 < (int) sizeof(big); i += 2) {
            big[i] = (char) 0xc3;
            big[i + 1] = (char) 0xa9;              /* é */
        }

        runner_outcome_stderr(&o, "before", 6);
        runner_outcome_stderr(&o, big, sizeof(big) - 2);
    }
    runner_outcome_stderr_text(&o, text, sizeof(text));
    ok(strstr(text, "before") == NULL && (unsigned char) text[0] == 0xc3
       && strchr(text, '?') == NULL,
       "stderr tail: a huge line keeps its end, from a whole character");
}


/* --git-author "Name <email>" */
static void
test_git_author(void)
{
    int               rc;
    char              err[RUNNER_ERRLEN];
    char             *argv[4];
    runner_config_t   c;
    size_t            i;
    const char       *bad[] = { "no email", "<only@email>", "N <a b@c>",
                                "N <a@b> trailing", "N <>", "N <a@b",
                                "Na>me <a@b>", "N\n <a@b>", "N <a<b@c>" };

    setenv("PROXY_JWT_SECRET", "0123456789abcdef0123", 1);
    setenv("SMCP_EGRESS_URL", "http://10.0.0.1:8090", 1);
    argv[0] = "smcp-runner";
    argv[1] = "--git-author";

    rc = runner_config_load(&c, 1, argv, err, sizeof(err));
    ok(rc == RUNNER_OK && strcmp(c.git_author_name, "sandbox-mcp") == 0
       && strcmp(c.git_author_email, "sandbox-mcp@localhost") == 0,
       "git author: the default");

    argv[2] = "Ada Lovelace  <ada@example.org>";
    rc = runner_config_load(&c, 3, argv, err, sizeof(err));
    ok(rc == RUNNER_OK && strcmp(c.git_author_name, "Ada Lovelace") == 0
       && strcmp(c.git_author_email, "ada@example.org") == 0,
       "git author: name and email");

    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        argv[2] = (char *) bad[i];
        rc = runner_config_load(&c, 3, argv, err, sizeof(err));
        ok(rc == RUNNER_ERR && strstr(err, "--git-author: want"),
           "git author refused: %s", err);
    }
}


int
main(void)
{
    runner_unit_defaults();

    test_nul();
    test_splits();
    test_huge_line();
    test_diff_line();
    test_frames();
    test_ts_cmp();
    test_log_escape();
    test_outcome_clamp();
    test_outcome_forged();
    test_diff_index();
    test_diff_parser();
    test_workspace();
    test_config();
    test_stderr_tail();
    test_git_author();

    return tap_done();
}
