/*
 * Unified diffs as git writes them ("diff --git" sections): one parser for
 * the module (a file's section for opencode_get_diff) and the runner
 * (files changed, the diff index, the stat), so they agree by
 * construction.  Plain C, no nginx.
 *
 * The diff comes out of a sandbox: it is hostile.  The parser never reads
 * past len, never allocates, and gives up on a path it cannot read (too
 * long, bad quoting) rather than guess.
 */

#ifndef SMCP_DIFF_H
#define SMCP_DIFF_H

#include <stddef.h>
#include <stdint.h>

#include "smcp_util.h"


#define SMCP_DIFF_PATH_MAX  4096
#define SMCP_DIFF_STAT_MAX  96      /* "N files changed, ..." and its NUL */

/* what a section says of its file (extended header lines) */
#define SMCP_DIFF_NEW       0x01    /* new file mode */
#define SMCP_DIFF_DELETED   0x02    /* deleted file mode */
#define SMCP_DIFF_RENAME    0x04    /* rename from / rename to */
#define SMCP_DIFF_COPY      0x08    /* copy from / copy to */
#define SMCP_DIFF_BINARY    0x10    /* "Binary files ..." or a binary patch */
#define SMCP_DIFF_MODE      0x20    /* old mode / new mode */


/* one file's section */
typedef struct {
    size_t      offset;             /* of its "diff --git " line */
    size_t      length;             /* up to the next section or the end */

    /* the paths without "a/" and "b/", unquoted; "" when unknown or
     * /dev/null (a new file has no old path, a deleted one no new path) */
    char        old_path[SMCP_DIFF_PATH_MAX + 1];
    char        new_path[SMCP_DIFF_PATH_MAX + 1];
    size_t      old_len;
    size_t      new_len;

    /* the '+' and '-' lines of its hunks, each hunk as long as its "@@ -a,b
     * +c,d @@" line says (a line past it is no content, whatever its first
     * byte); a hunk line that cannot be read counts on to the next hunk */
    int64_t     additions;
    int64_t     deletions;
    unsigned    flags;              /* SMCP_DIFF_* */
} smcp_diff_file_t;


/*
 * The next section at or after *pos: returns 1 with *file filled and *pos
 * moved past it, 0 when there is none.  Start with *pos = 0.
 */
int smcp_diff_next(const char *diff, size_t len, size_t *pos,
    smcp_diff_file_t *file);

/*
 * The path a section is known by (filesChanged, the diff index): the new
 * path, else the old one (a deleted file); NULL when neither could be
 * read.
 */
const char *smcp_diff_path_of(const smcp_diff_file_t *file, size_t *len);

/*
 * git's --shortstat wording, without its leading space: "3 files changed,
 * 10 insertions(+), 2 deletions(-)" (singulars for 1; a side with 0 left
 * out unless both are 0); "" for no file.
 */
void smcp_diff_stat(char *buf, size_t size, int64_t files,
    int64_t additions, int64_t deletions);

/*
 * The section about path (either side of a rename or copy): returns 1 with
 * its offset and length, 0 when the diff does not touch path.
 */
int smcp_diff_find(const char *diff, size_t len, const char *path,
    size_t path_len, size_t *offset, size_t *length);

/*
 * Git's C-style quoted path ("a/x\tb" with the quotes) to its bytes:
 * returns the length, or -1 for bad quoting or more than max bytes.
 */
long smcp_diff_unquote(const char *s, size_t len, char *dst, size_t max);


#endif /* SMCP_DIFF_H */
