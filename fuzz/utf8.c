/*
 * UTF-8 repair (smcp_utf8_sanitize(), common/smcp_util.c): the agent's
 * output, tool output and repository text become JSON strings through it.
 *
 * The input is the text, repaired in a buffer of exactly its length.
 * Checked, against a validator written from the Unicode standard's table
 * of well-formed byte sequences (Table 3-7): the result is valid UTF-8 of
 * the same length; only bytes that were not part of a well-formed
 * sequence changed, each to '?', as many as the return value says; valid
 * text is left alone; a second repair changes nothing; jansson takes the
 * result as a string.
 */

#include <string.h>

#include <jansson.h>

#include "smcp_util.h"
#include "fuzz.h"


/* the length of the well-formed sequence at p, 0 if there is none */
static size_t
fuzz_utf8_len(const unsigned char *p, size_t left)
{
    unsigned char  lo, hi;
    size_t         n, i;

    if (p[0] <= 0x7f) {
        return 1;
    }

    lo = 0x80;
    hi = 0xbf;

    if (p[0] >= 0xc2 && p[0] <= 0xdf) {
        n = 2;
    } else if (p[0] == 0xe0) {
        n = 3; lo = 0xa0;
    } else if (p[0] >= 0xe1 && p[0] <= 0xec) {
        n = 3;
    } else if (p[0] == 0xed) {
        n = 3; hi = 0x9f;
    } else if (p[0] >= 0xee && p[0] <= 0xef) {
        n = 3;
    } else if (p[0] == 0xf0) {
        n = 4; lo = 0x90;
    } else if (p[0] >= 0xf1 && p[0] <= 0xf3) {
        n = 4;
    } else if (p[0] == 0xf4) {
        n = 4; hi = 0x8f;
    } else {
        return 0;
    }

    if (left < n || p[1] < lo || p[1] > hi) {
        return 0;
    }

    for (i = 2; i < n; i++) {
        if (p[i] < 0x80 || p[i] > 0xbf) {
            return 0;
        }
    }

    return n;
}


static int
fuzz_utf8_valid(const unsigned char *p, size_t len)
{
    size_t  i, n;

    for (i = 0; i < len; i += n) {
        n = fuzz_utf8_len(p + i, len - i);
        if (n == 0) {
            return 0;
        }
    }

    return 1;
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char           *s;
    size_t          bad, changed, i, n;
    json_t         *j;
    unsigned char  *u;

    s = malloc(size ? size : 1);
    fuzz_check(s != NULL, "memory");
    memcpy(s, data, size);
    u = (unsigned char *) s;

    bad = smcp_utf8_sanitize(s, size);

    fuzz_check(fuzz_utf8_valid(u, size), "repaired: valid UTF-8");

    /* well-formed sequences of the input kept, the rest made '?' */
    changed = 0;

    for (i = 0; i < size; i += n) {
        n = fuzz_utf8_len(data + i, size - i);

        if (n == 0) {
            fuzz_check(u[i] == '?', "a stray byte becomes '?'");
            changed++;
            n = 1;

        } else {
            fuzz_check(memcmp(u + i, data + i, n) == 0,
                       "a well-formed sequence is kept");
        }
    }

    fuzz_check(changed == bad, "the return value counts the bytes replaced");
    fuzz_check(bad > 0 || memcmp(s, data, size) == 0,
               "valid text is left alone");
    fuzz_check(smcp_utf8_sanitize(s, size) == 0, "a second repair: nothing");

    j = json_stringn(s, size);
    fuzz_check(j != NULL,
               "jansson takes the repaired text");
    json_decref(j);

    free(s);

    return 0;
}
