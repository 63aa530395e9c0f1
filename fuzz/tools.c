/*
 * The provider's server-side tools in a model request (common/smcp_tools.c):
 * every model request body a sandbox sends through the egress proxy is
 * read through it before a byte goes upstream.
 *
 * The input: its first byte picks the body format and whether "web_search"
 * is allowed; the rest is the body.  Checked: fed in pieces of sizes drawn
 * from the input, the outcome (the code, the tool, its setting, where,
 * the error) is the one of feeding it whole; a tool found is not one the
 * route allows; names, settings and places are printable; an accepted
 * body is one JSON object jansson reads too (when its numbers fit).
 */

#include <string.h>

#include <jansson.h>

#include "smcp_tools.h"
#include "fuzz.h"


static int
fuzz_allow_web_search(void *data, const char *name, size_t len)
{
    return data != NULL && smcp_tools_name_is("web_search", 10, name, len);
}


static int
fuzz_run(smcp_tools_t *s, int format, int allow, const uint8_t *p, size_t n,
    uint64_t seed)
{
    int       rc;
    size_t    off, k;
    uint64_t  r;

    smcp_tools_init(s, format, fuzz_allow_web_search, allow ? s : NULL);

    rc = SMCP_TOOLS_OK;
    r = seed;

    for (off = 0; off < n && rc == SMCP_TOOLS_OK; off += k) {
        k = seed ? 1 + fuzz_next(&r) % 17 : n;
        k = (k > n - off) ? n - off : k;
        rc = smcp_tools_feed(s, p + off, k);
    }

    return (rc == SMCP_TOOLS_OK) ? smcp_tools_end(s) : rc;
}


static void
fuzz_printable(const char *s, const char *what)
{
    for (; *s; s++) {
        fuzz_check(*s >= 0x20 && *s < 0x7f, what);
    }
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int                  rc, rc2, format, allow;
    json_t              *j;
    static smcp_tools_t  a, b;

    if (size < 1) {
        return 0;
    }

    format = data[0] & 3;
    allow = data[0] & 4;
    data++;
    size--;

    rc = fuzz_run(&a, format, allow, data, size, 0);
    rc2 = fuzz_run(&b, format, allow, data, size,
                   fuzz_hash(0, data, size) | 1);

    fuzz_check(rc == rc2, "in pieces, the same outcome");
    fuzz_check(strcmp(a.name, b.name) == 0 && strcmp(a.where, b.where) == 0
               && strcmp(a.setting, b.setting) == 0,
               "in pieces, the same tool");
    fuzz_check((a.error == NULL) == (b.error == NULL)
               && (a.error == NULL || strcmp(a.error, b.error) == 0),
               "in pieces, the same error");

    if (rc == SMCP_TOOLS_FOUND) {
        fuzz_printable(a.name, "a printable name");
        fuzz_printable(a.setting, "a printable setting");
        fuzz_printable(a.where, "a printable place");
        fuzz_check(!(allow && smcp_tools_name_is("web_search", 10, a.setting,
                                                 strlen(a.setting))),
                   "an allowed tool is not refused");
    }

    if (rc == SMCP_TOOLS_BAD) {
        fuzz_check(a.error != NULL, "a refusal says why");
        fuzz_printable(a.error, "a printable error");
    }

    if (rc == SMCP_TOOLS_OK) {
        j = json_loadb((const char *) data, size,
                       JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
        fuzz_check(j == NULL || json_is_object(j), "accepted: an object");

        /* jansson refuses numbers that do not fit a double or an int */
        if (j == NULL) {
            fuzz_check(memchr(data, 'e', size) || memchr(data, 'E', size)
                       || size > 20, "accepted: jansson reads it too");
        }

        json_decref(j);
    }

    return 0;
}
