/*
 * A unified diff through runner_outcome_diff() (runner/outcome.c, on
 * common/smcp_diff.c): the diff comes out of the sandbox (`git diff` run
 * by the agent's container), so every byte of it is hostile.
 *
 * The input is the diff.  Checked: files is an array of {path (a string),
 * additions, deletions (integers >= 0)}, no more files than "diff --git "
 * headers, no more counted lines than lines; every file's path is in the
 * index, at a section starting with "diff --git " inside the diff; the
 * stat is git's wording of exactly those files and counts; all encodable
 * as JSON.
 *
 * links: runner/outcome.c
 */

#include <string.h>

#include "runner.h"
#include "fuzz.h"
#include "runner_globals.h"


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char           *dump, stat[SMCP_DIFF_STAT_MAX];
    size_t          i, lines, headers;
    json_t         *files, *f, *path, *add, *del, *span;
    int64_t         counted, adds, dels, off, len;
    runner_diff_t   d;
    const uint8_t  *p, *end, *nl;

    lines = 0;
    headers = 0;
    end = data + size;

    for (p = data; p < end; p = nl + 1) {
        nl = memchr(p, '\n', end - p);
        if (nl == NULL) {
            nl = end;
        }

        lines++;

        /* a section starts at any line beginning "diff --git ", even a
         * bare one (smcp_diff.c) */
        if (nl - p >= 11 && memcmp(p, "diff --git ", 11) == 0) {
            headers++;
        }
    }

    fuzz_check(runner_outcome_diff((const char *) data, size, &d)
               == RUNNER_OK, "a summary");
    files = d.files;

    fuzz_check(json_is_array(files), "an array");
    fuzz_check(json_array_size(files) <= headers,
               "at most one file per \"diff --git \" header");

    counted = adds = dels = 0;

    json_array_foreach(files, i, f) {
        path = json_object_get(f, "path");
        add = json_object_get(f, "additions");
        del = json_object_get(f, "deletions");

        fuzz_check(json_is_string(path), "a path");
        fuzz_check(json_is_integer(add) && json_integer_value(add) >= 0,
                   "additions");
        fuzz_check(json_is_integer(del) && json_integer_value(del) >= 0,
                   "deletions");

        span = json_object_get(d.index, json_string_value(path));
        fuzz_check(json_is_array(span) && json_array_size(span) == 2,
                   "the file is in the index");
        off = json_integer_value(json_array_get(span, 0));
        len = json_integer_value(json_array_get(span, 1));
        fuzz_check(off >= 0 && len > 0 && (size_t) (off + len) <= size
                   && memcmp(data + off, "diff --git ", 11) == 0,
                   "its section is inside the diff, at its header");

        adds += json_integer_value(add);
        dels += json_integer_value(del);
        counted += json_integer_value(add) + json_integer_value(del);
    }

    fuzz_check(counted <= (int64_t) lines, "no more counted lines than lines");

    smcp_diff_stat(stat, sizeof(stat), json_array_size(files), adds, dels);
    fuzz_check(strcmp(stat, d.stat) == 0, "the stat is the files' own");

    dump = json_dumps(files, JSON_COMPACT);
    fuzz_check(dump != NULL, "encodable");
    free(dump);

    dump = json_dumps(d.index, JSON_COMPACT);
    fuzz_check(dump != NULL, "the index encodable");
    free(dump);

    runner_outcome_diff_free(&d);

    return 0;
}
