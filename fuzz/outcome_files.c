/*
 * A unified diff through runner_outcome_files() (runner/outcome.c): the
 * diff comes out of the sandbox (`git diff` run by the agent's container),
 * so every byte of it is hostile.
 *
 * The input is the diff.  Checked: an array of {path (a string),
 * additions, deletions (integers >= 0)}, no more files than "diff --git "
 * headers, no more counted lines than lines, encodable as JSON.
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
    char          *dump;
    size_t         i, lines, headers;
    json_t        *files, *f, *path, *add, *del;
    int64_t        counted;
    const uint8_t *p, *end, *nl;

    lines = 0;
    headers = 0;
    end = data + size;

    for (p = data; p < end; p = nl + 1) {
        nl = memchr(p, '\n', end - p);
        if (nl == NULL) {
            nl = end;
        }

        lines++;

        if (nl - p > 11 && memcmp(p, "diff --git ", 11) == 0) {
            headers++;
        }
    }

    files = runner_outcome_files((const char *) data, size);

    fuzz_check(json_is_array(files), "an array");
    fuzz_check(json_array_size(files) == headers,
               "one file per \"diff --git \" header");

    counted = 0;

    json_array_foreach(files, i, f) {
        path = json_object_get(f, "path");
        add = json_object_get(f, "additions");
        del = json_object_get(f, "deletions");

        fuzz_check(json_is_string(path), "a path");
        fuzz_check(json_is_integer(add) && json_integer_value(add) >= 0,
                   "additions");
        fuzz_check(json_is_integer(del) && json_integer_value(del) >= 0,
                   "deletions");

        counted += json_integer_value(add) + json_integer_value(del);
    }

    fuzz_check(counted <= (int64_t) lines, "no more counted lines than lines");

    dump = json_dumps(files, JSON_COMPACT);
    fuzz_check(dump != NULL, "encodable");
    free(dump);

    json_decref(files);

    return 0;
}
