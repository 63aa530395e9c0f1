/*
 * OpenCode's event lines through the runner's outcome (runner/outcome.c),
 * as runner_run_line() (follow.c) handles a stdout line of the agent: UTF-8
 * repaired, decoded as JSON, and an object handed to runner_outcome_event()
 * (the line is copied whole here, NUL bytes included); then
 * the files of the diff the events carried (runner_outcome_files(), as
 * runner_store_finish() does), then free.
 *
 * The input is the agent's stdout, one event per line.  Checked: the kept
 * OpenCode session id is short and of the allowed characters, the diff is
 * cut at diff_max and is what its length says, result and error are
 * strings, the files are well-formed.
 *
 * links: runner/outcome.c
 */

#include <string.h>

#include "runner.h"
#include "fuzz.h"
#include "runner_globals.h"


static void
fuzz_check_files(json_t *files)
{
    size_t   i;
    json_t  *f, *path, *add, *del;
    char    *dump;

    fuzz_check(json_is_array(files), "files: an array");

    json_array_foreach(files, i, f) {
        path = json_object_get(f, "path");
        add = json_object_get(f, "additions");
        del = json_object_get(f, "deletions");

        fuzz_check(json_is_string(path), "files: a path");
        fuzz_check(json_is_integer(add) && json_integer_value(add) >= 0,
                   "files: additions");
        fuzz_check(json_is_integer(del) && json_integer_value(del) >= 0,
                   "files: deletions");
    }

    /* what runner_store_finish() stores */
    dump = json_dumps(files, JSON_COMPACT);
    fuzz_check(dump != NULL, "files: encodable");
    free(dump);
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char              *copy;
    size_t             len;
    json_t            *ev, *files;
    const uint8_t     *p, *end, *nl;
    runner_outcome_t   out;

    /* the first byte picks the diff limit (1-1017: cut diffs too; 0 may
     * mean "the default") */
    config.diff_max = size ? 1 + (data[0] & 0x7f) * 8 : 1024;
    config.max_result = 256 * 1024;

    memset(&out, 0, sizeof(out));

    end = data + size;

    for (p = data; p < end; p = nl + 1) {
        nl = memchr(p, '\n', end - p);
        if (nl == NULL) {
            nl = end;
        }

        len = nl - p;

        copy = malloc(len + 1);
        fuzz_check(copy != NULL, "memory");
        memcpy(copy, p, len);
        copy[len] = '\0';

        smcp_utf8_sanitize(copy, len);

        ev = json_loadb(copy, len, 0, NULL);

        if (json_is_object(ev)) {
            runner_outcome_event(&out, ev);
        }

        json_decref(ev);
        free(copy);
    }

    len = strlen(out.oc_session);
    fuzz_check(len < sizeof(out.oc_session)
               && strspn(out.oc_session, "abcdefghijklmnopqrstuvwxyz"
                         "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") == len,
               "OpenCode's session id: short, [A-Za-z0-9_-]");

    fuzz_check(out.diff_len <= (size_t) config.diff_max,
               "the diff is cut at diff_max");
    fuzz_check(out.diff == NULL ? out.diff_len == 0
                                : strlen(out.diff) == out.diff_len,
               "the diff is as long as diff_len says");

    files = runner_outcome_files(out.diff, out.diff_len);
    fuzz_check_files(files);
    json_decref(files);

    runner_outcome_free(&out);

    return 0;
}
