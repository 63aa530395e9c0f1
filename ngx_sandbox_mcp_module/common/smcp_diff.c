/*
 * Unified diff sections.  A section starts at a line "diff --git "; its
 * paths come from, in order of trust, "rename/copy from|to" lines, the
 * "--- a/" and "+++ b/" lines, and the "diff --git a/X b/X" line itself
 * (read when both sides are equal, or quoted).  Its hunks are read by
 * their "@@ -a,b +c,d @@" lines: b old and d new lines each.
 */

#include <stdio.h>
#include <string.h>

#include "smcp_diff.h"


#define SMCP_DIFF_GIT  "diff --git "


static const char *
smcp_diff_eol(const char *p, const char *end)
{
    const char  *nl;

    nl = memchr(p, '\n', end - p);

    return nl ? nl : end;
}


static int
smcp_diff_starts(const char *p, const char *eol, const char *s)
{
    size_t  n;

    n = strlen(s);

    return (size_t) (eol - p) >= n && memcmp(p, s, n) == 0;
}


long
smcp_diff_unquote(const char *s, size_t len, char *dst, size_t max)
{
    size_t  i, n;
    int     c, k;

    if (len < 2 || s[0] != '"' || s[len - 1] != '"') {
        return -1;
    }

    n = 0;

    for (i = 1; i < len - 1; i++) {
        c = (unsigned char) s[i];

        if (c == '"') {
            return -1;
        }

        if (c == '\\') {
            if (++i >= len - 1) {
                return -1;
            }

            c = (unsigned char) s[i];

            switch (c) {
            case 'a': c = '\a'; break;
            case 'b': c = '\b'; break;
            case 't': c = '\t'; break;
            case 'n': c = '\n'; break;
            case 'v': c = '\v'; break;
            case 'f': c = '\f'; break;
            case 'r': c = '\r'; break;
            case '"': case '\\': break;

            default:
                /* \ooo: three octal digits */
                if (i + 2 >= len - 1) {
                    return -1;
                }

                for (c = 0, k = 0; k < 3; k++, i++) {
                    if (s[i] < '0' || s[i] > '7') {
                        return -1;
                    }

                    c = c * 8 + (s[i] - '0');
                }

                i--;

                if (c > 0xff) {
                    return -1;
                }
            }
        }

        if (c == '\0' || n >= max) {
            return -1;
        }

        dst[n++] = (char) c;
    }

    return (long) n;
}


/*
 * One path field (the rest of a header line): "/dev/null", a plain or a
 * quoted path, with prefix ("a/", "b/" or "") removed.  Returns SMCP_ERR
 * (and leaves dst alone) when it cannot be read.
 */
static int
smcp_diff_path(const char *s, size_t len, const char *prefix, char *dst,
    size_t *dlen)
{
    long    n;
    size_t  plen;
    char    buf[SMCP_DIFF_PATH_MAX + 3];

    /* git adds a tab after a plain name holding a space */
    if (len && s[len - 1] == '\t') {
        len--;
    }

    if (len == 9 && memcmp(s, "/dev/null", 9) == 0) {
        dst[0] = '\0';
        *dlen = 0;
        return SMCP_OK;
    }

    if (len && s[0] == '"') {
        n = smcp_diff_unquote(s, len, buf, sizeof(buf) - 1);

    } else if (len < sizeof(buf) && memchr(s, '\0', len) == NULL) {
        memcpy(buf, s, len);
        n = (long) len;

    } else {
        n = -1;
    }

    plen = strlen(prefix);

    if (n < 0 || (size_t) n <= plen || (size_t) n - plen > SMCP_DIFF_PATH_MAX
        || memcmp(buf, prefix, plen) != 0)
    {
        return SMCP_ERR;
    }

    *dlen = (size_t) n - plen;
    memcpy(dst, buf + plen, *dlen);
    dst[*dlen] = '\0';

    return SMCP_OK;
}


/* the end of a quoted token starting at s (the closing quote + 1) */
static const char *
smcp_diff_quoted_end(const char *s, const char *end)
{
    const char  *p;

    for (p = s + 1; p < end; p++) {
        if (*p == '\\') {
            p++;

        } else if (*p == '"') {
            return p + 1;
        }
    }

    return NULL;
}


/* "diff --git a/X b/Y": both sides when they can be told apart */
static void
smcp_diff_git_line(const char *s, const char *eol, smcp_diff_file_t *f)
{
    size_t       len, n;
    const char  *q;

    len = eol - s;

    if (len && s[0] == '"') {
        q = smcp_diff_quoted_end(s, eol);

        if (q == NULL || q + 1 >= eol || *q != ' '
            || smcp_diff_path(s, q - s, "a/", f->old_path, &f->old_len)
               != SMCP_OK)
        {
            return;
        }

        (void) smcp_diff_path(q + 1, eol - q - 1, "b/", f->new_path,
                              &f->new_len);
        return;
    }

    /* plain "a/X b/X": the same path on both sides */
    if (len < 7 || (len - 5) % 2 != 0) {
        return;
    }

    n = (len - 5) / 2;

    if (memcmp(s, "a/", 2) == 0 && memcmp(s + 2 + n, " b/", 3) == 0
        && memcmp(s + 2, s + 5 + n, n) == 0
        && smcp_diff_path(s + 2, n, "", f->old_path, &f->old_len) == SMCP_OK)
    {
        memcpy(f->new_path, f->old_path, f->old_len + 1);
        f->new_len = f->old_len;
    }
}


/* an extended header line before the first hunk */
static void
smcp_diff_header_line(const char *p, const char *eol, smcp_diff_file_t *f)
{
    static const struct {
        const char  *start;
        const char  *prefix;        /* a path follows; NULL: none */
        int          new_side;
        unsigned     flag;
    } fields[] = {
        { "--- ", "a/", 0, 0 },
        { "+++ ", "b/", 1, 0 },
        { "rename from ", "", 0, SMCP_DIFF_RENAME },
        { "rename to ", "", 1, SMCP_DIFF_RENAME },
        { "copy from ", "", 0, SMCP_DIFF_COPY },
        { "copy to ", "", 1, SMCP_DIFF_COPY },
        { "new file mode ", NULL, 0, SMCP_DIFF_NEW },
        { "deleted file mode ", NULL, 0, SMCP_DIFF_DELETED },
        { "old mode ", NULL, 0, SMCP_DIFF_MODE },
        { "new mode ", NULL, 0, SMCP_DIFF_MODE },
        { "Binary files ", NULL, 0, SMCP_DIFF_BINARY },
        { "GIT binary patch", NULL, 0, SMCP_DIFF_BINARY },
    };

    size_t  i, n;

    for (i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
        if (!smcp_diff_starts(p, eol, fields[i].start)) {
            continue;
        }

        f->flags |= fields[i].flag;

        if (fields[i].prefix == NULL) {
            return;
        }

        n = strlen(fields[i].start);

        if (fields[i].new_side) {
            (void) smcp_diff_path(p + n, eol - p - n, fields[i].prefix,
                                  f->new_path, &f->new_len);

        } else {
            (void) smcp_diff_path(p + n, eol - p - n, fields[i].prefix,
                                  f->old_path, &f->old_len);
        }

        return;
    }
}


/* a decimal count of a hunk line; -1 when there is none */
static int64_t
smcp_diff_count(const char **p, const char *eol)
{
    int64_t  n;

    if (*p >= eol || **p < '0' || **p > '9') {
        return -1;
    }

    for (n = 0; *p < eol && **p >= '0' && **p <= '9'; (*p)++) {
        if (n > (INT64_MAX - 9) / 10) {
            return -1;
        }

        n = n * 10 + (**p - '0');
    }

    return n;
}


/* one side of "@@ -a,b +c,d @@": its length (b or d; 1 when absent) */
static int64_t
smcp_diff_range(const char **p, const char *eol, char sign)
{
    if (*p >= eol || **p != sign) {
        return -1;
    }

    (*p)++;

    if (smcp_diff_count(p, eol) < 0) {
        return -1;
    }

    if (*p < eol && **p == ',') {
        (*p)++;
        return smcp_diff_count(p, eol);
    }

    return 1;
}


/* "@@ -a[,b] +c[,d] @@...": the old and new lines of the hunk; both
 * INT64_MAX (to the next hunk or section) when the line cannot be read */
static void
smcp_diff_hunk(const char *p, const char *eol, int64_t *old_left,
    int64_t *new_left)
{
    int64_t      o, n;
    const char  *q;

    q = p + 3;
    n = -1;
    o = smcp_diff_range(&q, eol, '-');

    if (o >= 0 && q < eol && *q == ' ') {
        q++;
        n = smcp_diff_range(&q, eol, '+');
    }

    if (o < 0 || n < 0 || eol - q < 3 || memcmp(q, " @@", 3) != 0) {
        o = n = INT64_MAX;
    }

    *old_left = o;
    *new_left = n;
}


/* a line of a hunk: counted while the hunk has lines left of its kind */
static void
smcp_diff_hunk_line(const char *q, const char *eol, smcp_diff_file_t *f,
    int64_t *old_left, int64_t *new_left)
{
    char  c;

    c = (q < eol) ? q[0] : ' ';     /* an empty line: context */

    if (c == '+' && *new_left > 0) {
        f->additions++;
        (*new_left)--;

    } else if (c == '-' && *old_left > 0) {
        f->deletions++;
        (*old_left)--;

    } else if (c == ' ') {
        *old_left -= (*old_left > 0);
        *new_left -= (*new_left > 0);
    }

    /* '\' ("\ No newline at end of file") and past the hunk: nothing */
}


int
smcp_diff_next(const char *diff, size_t len, size_t *pos,
    smcp_diff_file_t *f)
{
    int          hunk;
    int64_t      old_left, new_left;
    const char  *p, *q, *end, *eol;

    if (diff == NULL || *pos >= len) {
        return 0;
    }

    end = diff + len;

    /* the next section header (anything before it is no file's) */
    for (p = diff + *pos; /* void */ ; p = eol + 1) {
        eol = smcp_diff_eol(p, end);

        if (smcp_diff_starts(p, eol, SMCP_DIFF_GIT)) {
            break;
        }

        if (eol == end) {
            *pos = len;
            return 0;
        }
    }

    f->offset = p - diff;
    f->old_path[0] = f->new_path[0] = '\0';
    f->old_len = f->new_len = 0;
    f->additions = f->deletions = 0;
    f->flags = 0;

    smcp_diff_git_line(p + sizeof(SMCP_DIFF_GIT) - 1, eol, f);

    hunk = 0;
    old_left = new_left = 0;

    for (q = eol < end ? eol + 1 : end; q < end; q = eol + 1) {
        eol = smcp_diff_eol(q, end);

        if (smcp_diff_starts(q, eol, SMCP_DIFF_GIT)) {
            break;
        }

        if (smcp_diff_starts(q, eol, "@@ ")) {
            hunk = 1;
            smcp_diff_hunk(q, eol, &old_left, &new_left);

        } else if (!hunk) {
            smcp_diff_header_line(q, eol, f);

        } else {
            smcp_diff_hunk_line(q, eol, f, &old_left, &new_left);
        }

        if (eol == end) {
            q = end;
            break;
        }
    }

    f->length = q - p;
    *pos = q - diff;

    return 1;
}


const char *
smcp_diff_path_of(const smcp_diff_file_t *f, size_t *len)
{
    if (f->new_len) {
        *len = f->new_len;
        return f->new_path;
    }

    if (f->old_len) {
        *len = f->old_len;
        return f->old_path;
    }

    *len = 0;

    return NULL;
}


void
smcp_diff_stat(char *buf, size_t size, int64_t files, int64_t additions,
    int64_t deletions)
{
    int  n;

    if (size == 0) {
        return;
    }

    buf[0] = '\0';

    if (files <= 0) {
        return;
    }

    n = snprintf(buf, size, "%lld file%s changed", (long long) files,
                 files == 1 ? "" : "s");

    if (n > 0 && (size_t) n < size && (additions || deletions == 0)) {
        n += snprintf(buf + n, size - n, ", %lld insertion%s(+)",
                      (long long) additions, additions == 1 ? "" : "s");
    }

    if (n > 0 && (size_t) n < size && (deletions || additions == 0)) {
        (void) snprintf(buf + n, size - n, ", %lld deletion%s(-)",
                        (long long) deletions, deletions == 1 ? "" : "s");
    }
}


int
smcp_diff_find(const char *diff, size_t len, const char *path,
    size_t path_len, size_t *offset, size_t *length)
{
    size_t            pos;
    smcp_diff_file_t  f;

    if (path_len == 0 || path_len > SMCP_DIFF_PATH_MAX) {
        return 0;
    }

    pos = 0;

    while (smcp_diff_next(diff, len, &pos, &f)) {
        if ((f.old_len == path_len && memcmp(f.old_path, path, path_len) == 0)
            || (f.new_len == path_len
                && memcmp(f.new_path, path, path_len) == 0))
        {
            *offset = f.offset;
            *length = f.length;
            return 1;
        }
    }

    return 0;
}
