/*
 * The unified diff section parser (common/smcp_diff.c): the diff comes
 * out of the sandbox; opencode_get_diff cuts a file's section out of it
 * with smcp_diff_find().
 *
 * The input is the diff, in a buffer of exactly its length.  Checked:
 * smcp_diff_next() walks forward, its sections lie inside the diff in
 * order without overlapping and each starts with "diff --git "; paths
 * are NUL-terminated, as long as they say and hold no NUL; counts are not
 * negative and no more than the section's lines; smcp_diff_find() finds
 * every path the walk saw, at that section or an earlier one with the same
 * path; smcp_diff_unquote() of the input stays within its buffer.
 */

#include <string.h>

#include "smcp_diff.h"
#include "fuzz.h"


static size_t
fuzz_lines(const char *p, size_t len)
{
    size_t  n, i;

    for (n = 1, i = 0; i < len; i++) {
        n += p[i] == '\n';
    }

    return n;
}


static void
fuzz_find(const char *diff, size_t len, const char *path, size_t plen,
    const smcp_diff_file_t *f)
{
    size_t  off, flen;

    if (plen == 0) {
        return;
    }

    fuzz_check(smcp_diff_find(diff, len, path, plen, &off, &flen) == 1,
               "find: a path the walk saw is found");
    fuzz_check(off <= f->offset && off + flen <= len,
               "find: that section or an earlier one");
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char              *diff, *q;
    long               n;
    size_t             pos, last_end, max;
    smcp_diff_file_t  *f;

    diff = malloc(size ? size : 1);
    f = malloc(sizeof(smcp_diff_file_t));
    fuzz_check(diff && f, "memory");
    memcpy(diff, data, size);

    pos = 0;
    last_end = 0;

    while (smcp_diff_next(diff, size, &pos, f)) {
        fuzz_check(f->offset >= last_end && f->length > 0
                   && f->offset + f->length <= size
                   && pos == f->offset + f->length,
                   "sections: in order, inside, not overlapping");
        fuzz_check(f->length >= 11
                   && memcmp(diff + f->offset, "diff --git ", 11) == 0,
                   "sections: start with \"diff --git \"");
        fuzz_check(f->old_len <= SMCP_DIFF_PATH_MAX
                   && f->new_len <= SMCP_DIFF_PATH_MAX
                   && f->old_path[f->old_len] == '\0'
                   && f->new_path[f->new_len] == '\0'
                   && strlen(f->old_path) == f->old_len
                   && strlen(f->new_path) == f->new_len,
                   "paths: NUL-terminated, as long as they say, no NUL");
        fuzz_check(f->additions >= 0 && f->deletions >= 0
                   && (size_t) (f->additions + f->deletions)
                      <= fuzz_lines(diff + f->offset, f->length),
                   "counts: no more than the section's lines");

        fuzz_find(diff, size, f->old_path, f->old_len, f);
        fuzz_find(diff, size, f->new_path, f->new_len, f);

        last_end = pos;
    }

    fuzz_check(pos <= size || size == 0, "the walk ends inside the diff");

    /* unquoting into a buffer of exactly max bytes */
    max = size % 64;
    q = malloc(max ? max : 1);
    fuzz_check(q != NULL, "memory");
    n = smcp_diff_unquote(diff, size, q, max);
    fuzz_check(n >= -1 && n <= (long) max, "unquote: within its buffer");
    free(q);

    free(f);
    free(diff);

    return 0;
}
