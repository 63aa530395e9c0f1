/*
 * A registry request's path (smcp_path_check(), common/smcp_path.c): every
 * path a sandbox sends to a package registry route, checked before the
 * upstream sees it.
 *
 * The input is the path.  Checked, against a decoder written here: an
 * accepted path starts with "/", holds no ";", "\" or "#" as sent; decoded
 * (the %XX escapes undone, as nginx does before it sends the path on) up
 * to the query, it holds no ";", "\", "%" or byte outside printable ASCII,
 * no empty segment but a trailing one, and no "." or ".." segment; a
 * refusal says why in printable text.
 */

#include <string.h>

#include "smcp_path.h"
#include "fuzz.h"


static int
fuzz_hex(unsigned char c)
{
    if (c >= '0' && c <= '9') {
        return c - '0';
    }

    c |= 0x20;

    return (c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1;
}


static void
fuzz_accepted(const unsigned char *p, size_t len)
{
    unsigned char  out[4096], c;
    size_t         i, n, seg, start;

    fuzz_check(len > 0 && p[0] == '/', "an accepted path starts with /");

    n = 0;

    for (i = 0; i < len && p[i] != '?'; i++) {
        c = p[i];

        fuzz_check(c != ';' && c != '\\' && c != '#',
                   "no ; \\ # as sent in an accepted path");

        if (c == '%') {
            fuzz_check(len - i >= 3 && fuzz_hex(p[i + 1]) >= 0
                       && fuzz_hex(p[i + 2]) >= 0, "escapes are whole");
            c = (unsigned char) (fuzz_hex(p[i + 1]) << 4 | fuzz_hex(p[i + 2]));
            i += 2;
        }

        fuzz_check(c > 0x20 && c < 0x7f && c != ';' && c != '\\' && c != '%',
                   "decoded, only plain printable bytes");

        if (n < sizeof(out)) {
            out[n++] = c;
        }
    }

    if (n == sizeof(out)) {
        return;
    }

    /* the decoded segments (an escaped "/" of an npm scope splits too) */
    start = 1;

    for (i = 1; i <= n; i++) {
        if (i < n && out[i] != '/') {
            continue;
        }

        seg = i - start;

        fuzz_check(seg > 0 || i == n, "no empty segment but a trailing one");
        fuzz_check(!(seg == 1 && out[start] == '.')
                   && !(seg == 2 && out[start] == '.' && out[start + 1] == '.'),
                   "no . or .. segment, decoded");
        start = i + 1;
    }
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char  *why;

    why = smcp_path_check(data, size);

    if (why == NULL) {
        fuzz_accepted(data, size);
        return 0;
    }

    for (; *why; why++) {
        fuzz_check(*why >= 0x20 && *why < 0x7f, "a printable reason");
    }

    return 0;
}
