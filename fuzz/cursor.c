/*
 * Opaque cursors (common/smcp_validate.c): the client hands back whatever
 * it likes as a cursor; smcp_cursor_decode(), smcp_cursor_number() and
 * smcp_cursor_run() read it into buffers of exactly the documented sizes.
 *
 * The input is the cursor.  Checked: a decoded cursor is 1-120 bytes
 * without NUL and NUL-terminated, and encodes back to the cursor (less
 * its '=' padding); a number is "<kind>:<decimal>" within its maximum; a
 * run cursor yields a valid run id and a score of at most 19 digits;
 * encoding the input as a text decodes back to it.
 */

#include <string.h>

#include "smcp_validate.h"
#include "smcp_keys.h"
#include "fuzz.h"


static void
fuzz_decode(const char *src, size_t len)
{
    char    *text, *enc;
    size_t   n, plain;

    text = malloc(SMCP_CURSOR_TEXT_MAX + 1);
    fuzz_check(text != NULL, "memory");

    if (smcp_cursor_decode(src, len, text, &n) == SMCP_OK) {
        fuzz_check(n > 0 && n <= SMCP_CURSOR_TEXT_MAX && text[n] == '\0'
                   && strlen(text) == n, "decoded: 1-120 bytes, no NUL");

        enc = malloc(SMCP_CURSOR_MAX + 1);
        fuzz_check(enc != NULL, "memory");

        plain = len;
        while (plain > 0 && src[plain - 1] == '=') {
            plain--;
        }

        fuzz_check(smcp_cursor_encode(enc, text, n) == SMCP_OK
                   && strlen(enc) == plain && memcmp(enc, src, plain) == 0,
                   "decoded: encodes back to the cursor");
        free(enc);
    }

    free(text);
}


static void
fuzz_number(const char *src, size_t len)
{
    uint64_t  v, max;
    char      kind;

    for (kind = 'a'; kind <= 'z'; kind++) {
        max = kind == 'd' ? UINT64_MAX : 1000;

        if (smcp_cursor_number(src, len, kind, max, &v) == SMCP_OK) {
            fuzz_check(v <= max, "number: within its maximum");
        }
    }
}


static void
fuzz_run(const char *src, size_t len)
{
    char  *run_id, *score;

    run_id = malloc(SMCP_ID_LEN + 1);
    score = malloc(20);
    fuzz_check(run_id && score, "memory");

    if (smcp_cursor_run(src, len, run_id, score) == SMCP_OK) {
        fuzz_check(smcp_valid_id(run_id, strlen(run_id), SMCP_RUN_ID_PREFIX),
                   "run cursor: a run id");
        fuzz_check(strlen(score) > 0 && strlen(score) <= 19
                   && strspn(score, "0123456789") == strlen(score),
                   "run cursor: a score of 1-19 digits");
    }

    free(score);
    free(run_id);
}


static void
fuzz_encode(const char *text, size_t len)
{
    char    *enc, *dec;
    size_t   n;

    enc = malloc(SMCP_CURSOR_MAX + 1);
    dec = malloc(SMCP_CURSOR_TEXT_MAX + 1);
    fuzz_check(enc && dec, "memory");

    if (smcp_cursor_encode(enc, text, len) == SMCP_OK) {
        fuzz_check(len <= SMCP_CURSOR_TEXT_MAX
                   && memchr(text, '\0', len) == NULL,
                   "encoded: only short texts without NUL");
        fuzz_check(len == 0
                   || (smcp_cursor_decode(enc, strlen(enc), dec, &n)
                       == SMCP_OK && n == len && memcmp(dec, text, n) == 0),
                   "encoded: decodes back to the text");
    }

    free(dec);
    free(enc);
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const fuzz_text_pt  checks[] = {
        fuzz_decode, fuzz_number, fuzz_run, fuzz_encode, NULL
    };

    return fuzz_text(data, size, checks);
}
