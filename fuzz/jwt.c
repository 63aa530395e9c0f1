/*
 * Bearer tokens through smcp_jwt_verify() (common/smcp_jwt.c): every MCP
 * request and every egress request of a sandbox carries one.
 *
 * The first input byte picks the mode, the rest is:
 *   even: the token as the client sends it;
 *   odd:  "<header JSON>\n<payload JSON>": the harness encodes and signs
 *         them with the key, so the payload checks are reached too.
 * Then claims that decode as an object are signed with smcp_jwt_sign() and
 * verified again.
 *
 * Checked: verify succeeds only with an object of claims holding a
 * non-empty string "sub" and a numeric "exp" later than now (and then the
 * header says HS256), fails with an error and no claims otherwise; a
 * token signed with another key never verifies; a token smcp_jwt_sign()
 * made from valid claims always does.
 */

#include <string.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "smcp_jwt.h"
#include "fuzz.h"


#define FUZZ_NOW  1795000000    /* 2026-11-18 */

static const unsigned char  fuzz_key[] = "fuzz-signing-secret-0123456789ab";
static const unsigned char  fuzz_other[] = "another-signing-secret-987654321";


static int
fuzz_valid_claims(json_t *c)
{
    json_t  *sub, *exp;

    sub = json_object_get(c, "sub");
    exp = json_object_get(c, "exp");

    return json_is_object(c)
           && json_is_string(sub) && json_string_length(sub) > 0
           && json_is_number(exp)
           && json_number_value(exp) > (double) FUZZ_NOW;
}


static int
fuzz_verify(const char *tok, size_t len, const unsigned char *key,
    size_t keylen, json_t **claims)
{
    int   rc;
    char  err[128];

    err[0] = '\0';

    rc = smcp_jwt_verify(key, keylen, tok, len, FUZZ_NOW, claims, err,
                         sizeof(err));

    if (rc == SMCP_OK) {
        fuzz_check(fuzz_valid_claims(*claims), "verified: valid claims");

    } else {
        fuzz_check(rc == SMCP_ERR, "SMCP_OK or SMCP_ERR");
        fuzz_check(*claims == NULL, "refused: no claims");
        fuzz_check(err[0] != '\0', "refused: a reason");
    }

    return rc;
}


/* "<b64url(header)>.<b64url(payload)>.<b64url(HMAC)>", malloc'd */
static char *
fuzz_sign_raw(const uint8_t *h, size_t hlen, const uint8_t *p, size_t plen,
    size_t *len)
{
    char          *tok, *t;
    unsigned char  mac[32];
    unsigned int   maclen;

    tok = malloc(smcp_b64url_encoded_len(hlen)
                 + smcp_b64url_encoded_len(plen)
                 + smcp_b64url_encoded_len(sizeof(mac)) + 3);
    fuzz_check(tok != NULL, "memory");

    t = tok;
    t += smcp_b64url_encode(t, h, hlen);
    *t++ = '.';
    t += smcp_b64url_encode(t, p, plen);

    maclen = sizeof(mac);
    fuzz_check(HMAC(EVP_sha256(), fuzz_key, sizeof(fuzz_key) - 1,
                    (unsigned char *) tok, t - tok, mac, &maclen) != NULL,
               "HMAC");

    *t++ = '.';
    t += smcp_b64url_encode(t, mac, sizeof(mac));
    *len = t - tok;

    return tok;
}


static void
fuzz_signed(const uint8_t *data, size_t size)
{
    int             rc;
    char           *tok;
    size_t          len;
    json_t         *claims, *h;
    const uint8_t  *nl;

    nl = memchr(data, '\n', size);
    if (nl == NULL) {
        return;
    }

    tok = fuzz_sign_raw(data, nl - data, nl + 1, data + size - nl - 1,
                        &len);

    rc = fuzz_verify(tok, len, fuzz_key, sizeof(fuzz_key) - 1, &claims);

    if (rc == SMCP_OK) {
        h = json_loadb((const char *) data, nl - data, 0, NULL);
        fuzz_check(strcmp(json_string_value(json_object_get(h, "alg"))
                          ?: "", "HS256") == 0,
                   "verified: the header says HS256");
        json_decref(h);
        json_decref(claims);
    }

    fuzz_check(fuzz_verify(tok, len, fuzz_other, sizeof(fuzz_other) - 1,
                           &claims) == SMCP_ERR,
               "another key: refused");

    free(tok);
}


static void
fuzz_resign(const uint8_t *data, size_t size)
{
    int      rc;
    char    *tok;
    json_t  *c, *got;

    c = json_loadb((const char *) data, size, JSON_DECODE_ANY, NULL);

    if (!json_is_object(c)) {
        json_decref(c);
        return;
    }

    if (smcp_jwt_sign(fuzz_key, sizeof(fuzz_key) - 1, c, &tok) == SMCP_OK) {
        rc = fuzz_verify(tok, strlen(tok), fuzz_key, sizeof(fuzz_key) - 1,
                         &got);

        /* longer tokens are refused by design */
        if (fuzz_valid_claims(c) && strlen(tok) <= SMCP_JWT_MAX_LEN) {
            fuzz_check(rc == SMCP_OK, "signed valid claims: verified");
        }

        json_decref(got);
        free(tok);
    }

    json_decref(c);
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char    *tok;
    json_t  *claims;

    if (size == 0) {
        return 0;
    }

    if (data[0] & 1) {
        fuzz_signed(data + 1, size - 1);

    } else {
        /* exactly the bytes, not NUL-terminated */
        tok = malloc(size - 1 ? size - 1 : 1);
        fuzz_check(tok != NULL, "memory");
        memcpy(tok, data + 1, size - 1);

        if (fuzz_verify(tok, size - 1, fuzz_key, sizeof(fuzz_key) - 1,
                        &claims) == SMCP_OK)
        {
            json_decref(claims);
        }

        free(tok);
    }

    fuzz_resign(data + 1, size - 1);

    return 0;
}
