/*
 * base64url (common/smcp_util.c): smcp_b64url_decode() reads cursors the
 * client sends and the git password of a sandbox's egress request.
 *
 * The input is the text to decode, in a buffer of exactly its length (not
 * NUL-terminated), decoded into a buffer of exactly the size the API asks
 * for (len * 3 / 4 + 3).  Checked: a decoded text encodes back to itself
 * (without its '=' padding): canonical, nothing lost; and the input read
 * as bytes round-trips through encode and decode.
 */

#include <string.h>

#include "smcp_util.h"
#include "fuzz.h"


static void
fuzz_decode(const uint8_t *data, size_t size)
{
    int             rc;
    char           *src, *enc;
    size_t          n, len;
    unsigned char  *dst;

    src = malloc(size ? size : 1);
    dst = malloc(size * 3 / 4 + 3);
    fuzz_check(src && dst, "memory");
    memcpy(src, data, size);

    n = (size_t) -1;
    rc = smcp_b64url_decode(dst, &n, src, size);

    if (rc == SMCP_OK) {
        len = size;
        while (len > 0 && src[len - 1] == '=') {
            len--;
        }

        fuzz_check(n <= size * 3 / 4, "decoded: no longer than 3/4");

        enc = malloc(smcp_b64url_encoded_len(n) + 1);
        fuzz_check(enc != NULL, "memory");

        fuzz_check(smcp_b64url_encode(enc, dst, n) == len
                   && memcmp(enc, src, len) == 0,
                   "decoded: encodes back to the same text");
        free(enc);

    } else {
        fuzz_check(rc == SMCP_ERR, "SMCP_OK or SMCP_ERR");
    }

    free(dst);
    free(src);
}


static void
fuzz_round_trip(const uint8_t *data, size_t size)
{
    char           *enc;
    size_t          len, n;
    unsigned char  *dec;

    len = smcp_b64url_encoded_len(size);
    enc = malloc(len + 1);
    dec = malloc(len * 3 / 4 + 3);
    fuzz_check(enc && dec, "memory");

    fuzz_check(smcp_b64url_encode(enc, data, size) == len
               && enc[len] == '\0', "encoded: the announced length");
    fuzz_check(strspn(enc, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuv"
                      "wxyz0123456789-_") == len,
               "encoded: the base64url alphabet only");
    fuzz_check(smcp_b64url_decode(dec, &n, enc, len) == SMCP_OK
               && n == size && memcmp(dec, data, size) == 0,
               "encode then decode: the same bytes");

    free(dec);
    free(enc);
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_decode(data, size);
    fuzz_round_trip(data, size);

    return 0;
}
