/*
 * A registry request's path, segment by segment (smcp_path.h).
 */

#include "smcp_path.h"
#include "smcp_util.h"


/* a byte a segment may hold, as sent or escaped ('.' only as sent) */
static int
smcp_path_plain(unsigned char c)
{
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
        || (c >= '0' && c <= '9'))
    {
        return 1;
    }

    switch (c) {
    case '-': case '.': case '_': case '~': case '!': case '$': case '&':
    case '\'': case '(': case ')': case '*': case '+': case ',': case '=':
    case ':': case '@':
        return 1;
    }

    return 0;
}


const char *
smcp_path_check(const unsigned char *path, size_t len)
{
    int                   hi, lo;
    size_t                i, start, seg, dots, escapes, name;
    unsigned char         c;
    const unsigned char  *scope;

    if (len == 0 || path[0] != '/') {
        return "the path does not start with /";
    }

    start = 1;          /* where the segment starts */
    seg = 0;            /* its bytes so far (decoded) */
    dots = 0;           /* ... of which '.' */
    escapes = 0;        /* ... of which escaped */
    scope = NULL;       /* where its escaped '/' of an npm scope is */
    name = 0;           /* where the name after it starts (decoded) */

    for (i = 1; i <= len; i++) {

        if (i == len || path[i] == '?' || path[i] == '/') {

            if (seg == 0) {
                if (i == len || path[i] == '?') {
                    return NULL;            /* a trailing "/" */
                }

                return "an empty path segment (\"//\")";
            }

            if (seg == dots && dots <= 2) {
                return "a \".\" or \"..\" path segment";
            }

            /* "@scope%2F", "@scope%2F.." */
            if (scope && seg - name == dots && dots <= 2) {
                return "an npm scope without a plain name after it";
            }

            if (i == len || path[i] == '?') {
                return NULL;
            }

            start = i + 1;
            seg = dots = escapes = 0;
            scope = NULL;
            continue;
        }

        c = path[i];

        if (c == '%') {
            if (len - i < 3) {
                return "a broken %-escape in the path";
            }

            hi = smcp_hex_value(path[i + 1]);
            lo = smcp_hex_value(path[i + 2]);

            if (hi < 0 || lo < 0) {
                return "a broken %-escape in the path";
            }

            c = (unsigned char) (hi << 4 | lo);

            /* "@scope%2Fname": the segment's first escape */
            if (c == '/' && escapes == 0 && seg > 1 && path[start] == '@') {
                scope = path + i;
                i += 2;
                seg++;
                escapes++;
                name = seg;
                dots = 0;
                continue;
            }

            if (c == '.' || !smcp_path_plain(c)) {
                return "an escaped \".\", \"/\", \"\\\", \";\" or other "
                       "byte outside the plain set in the path";
            }

            i += 2;
            seg++;
            escapes++;
            continue;
        }

        if (!smcp_path_plain(c)) {
            return "a path byte outside the plain set (letters, digits, "
                   "\"-._~!$&'()*+,=:@\"; no \";\" or \"\\\")";
        }

        seg++;
        dots += (c == '.');
    }

    return NULL;
}
