/*
 * Bearer tokens through smcp_jwt_verify() (common/smcp_jwt.c): every MCP
 * request and every egress request of a sandbox carries one; and keys
 * files through smcp_keyring_parse() (common/smcp_keyring.c).
 *
 * The first input byte picks the mode, the rest is:
 *   bit 2 set:     a keys file;
 *   else bit 0 0:  the token as the client sends it;
 *   else bit 0 1:  "<header JSON>\n<payload JSON>": the harness encodes and
 *                  signs them with key "k1" (bit 1 clear) or "k2" (set),
 *                  so the kid and payload checks are reached too.
 * Bit 3 verifies against a ring without a legacy key.  The ring: "k1"
 * (legacy unless bit 3) and "k2".  Then claims that decode as an object
 * are signed with smcp_jwt_sign() by each key and verified again.
 *
 * Checked: verify succeeds only with an object of claims holding a
 * non-empty string "sub" and a numeric "exp" later than now, and then the
 * header says HS256 and its kid names the key that signed (no kid: the
 * ring's legacy key signed); fails with an error and no claims otherwise;
 * a token signed with another key never verifies; a token smcp_jwt_sign()
 * made from valid claims always does, and carries its key's kid.  A keys
 * file is taken whole (1-16 keys, kids valid and distinct, secrets 32-256
 * printable bytes, at most one legacy; each key signs a token the ring
 * verifies) or refused whole, with a reason.
 */

#include <string.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "smcp_jwt.h"
#include "fuzz.h"


#define FUZZ_NOW  1795000000    /* 2026-11-18 */

static const char  fuzz_key[] = "fuzz-signing-secret-0123456789ab";
static const char  fuzz_key2[] = "second-signing-secret-0123456789";
static const char  fuzz_other[] = "another-signing-secret-987654321";

/* "k1" (legacy) and "k2"; the same without a legacy key; another secret */
static smcp_keyring_t  fuzz_ring, fuzz_ring_strict, fuzz_ring_other;
static int             fuzz_rings_made;


static void
fuzz_rings(void)
{
    char  text[256], err[256];
    int   n;

    if (fuzz_rings_made) {
        return;
    }

    n = snprintf(text, sizeof(text), "# the harness's keys\n"
                 "k1 %s legacy\r\n\n  k2\t%s  \n", fuzz_key, fuzz_key2);
    fuzz_check(smcp_keyring_parse(&fuzz_ring, text, n, err, sizeof(err))
               == SMCP_OK && fuzz_ring.n == 2 && fuzz_ring.legacy == 0,
               "the harness's keys file");

    n = snprintf(text, sizeof(text), "k1 %s\nk2 %s\n", fuzz_key, fuzz_key2);
    fuzz_check(smcp_keyring_parse(&fuzz_ring_strict, text, n, err,
                                  sizeof(err))
               == SMCP_OK && fuzz_ring_strict.legacy == -1,
               "the harness's keys file without a legacy key");

    fuzz_check(smcp_keyring_single(&fuzz_ring_other,
                                   (const unsigned char *) fuzz_other,
                                   sizeof(fuzz_other) - 1) == SMCP_OK,
               "a bare secret");

    fuzz_rings_made = 1;
}


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


/* the token's header, decoded (NULL: none that parses) */
static json_t *
fuzz_header(const char *tok, size_t len)
{
    size_t          n;
    const char     *dot;
    unsigned char  *buf;
    json_t         *h;

    dot = memchr(tok, '.', len);
    if (dot == NULL) {
        return NULL;
    }

    buf = malloc((dot - tok) * 3 / 4 + 3);
    fuzz_check(buf != NULL, "memory");

    h = NULL;

    if (smcp_b64url_decode(buf, &n, tok, dot - tok) == SMCP_OK) {
        h = json_loadb((const char *) buf, n, 0, NULL);
    }

    free(buf);

    return h;
}


/* verified: valid claims, and the kid names a key of the ring (none: the
 * ring has a legacy key) */
static int
fuzz_verify(const char *tok, size_t len, const smcp_keyring_t *ring,
    json_t **claims)
{
    int      rc;
    char     err[128];
    json_t  *h, *kid;

    err[0] = '\0';

    rc = smcp_jwt_verify(ring, tok, len, FUZZ_NOW, claims, err, sizeof(err));

    if (rc == SMCP_OK) {
        fuzz_check(fuzz_valid_claims(*claims), "verified: valid claims");

        h = fuzz_header(tok, len);
        kid = json_object_get(h, "kid");

        fuzz_check(kid == NULL
                   ? smcp_keyring_legacy(ring) != NULL
                   : json_is_string(kid)
                     && smcp_keyring_find(ring, json_string_value(kid),
                                          json_string_length(kid))
                        != NULL,
                   "verified: the kid is the ring's, or none and a legacy "
                   "key");
        json_decref(h);

    } else {
        fuzz_check(rc == SMCP_ERR, "SMCP_OK or SMCP_ERR");
        fuzz_check(*claims == NULL, "refused: no claims");
        fuzz_check(err[0] != '\0', "refused: a reason");
    }

    return rc;
}


/* "<b64url(header)>.<b64url(payload)>.<b64url(HMAC)>", malloc'd */
static char *
fuzz_sign_raw(const char *key, const uint8_t *h, size_t hlen,
    const uint8_t *p, size_t plen, size_t *len)
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
    fuzz_check(HMAC(EVP_sha256(), key, (int) strlen(key),
                    (unsigned char *) tok, t - tok, mac, &maclen) != NULL,
               "HMAC");

    *t++ = '.';
    t += smcp_b64url_encode(t, mac, sizeof(mac));
    *len = t - tok;

    return tok;
}


static void
fuzz_signed(const uint8_t *data, size_t size, int second,
    const smcp_keyring_t *ring)
{
    int             rc;
    char           *tok;
    size_t          len;
    json_t         *claims, *h, *kid;
    const char     *signer;
    const uint8_t  *nl;

    nl = memchr(data, '\n', size);
    if (nl == NULL) {
        return;
    }

    signer = second ? "k2" : "k1";
    tok = fuzz_sign_raw(second ? fuzz_key2 : fuzz_key, data, nl - data,
                        nl + 1, data + size - nl - 1, &len);

    rc = fuzz_verify(tok, len, ring, &claims);

    if (rc == SMCP_OK) {
        h = json_loadb((const char *) data, nl - data, 0, NULL);
        kid = json_object_get(h, "kid");

        fuzz_check(strcmp(json_string_value(json_object_get(h, "alg"))
                          ?: "", "HS256") == 0,
                   "verified: the header says HS256");
        fuzz_check(kid == NULL
                   ? !second && ring->legacy == 0
                   : json_is_string(kid)
                     && strcmp(json_string_value(kid), signer) == 0,
                   "verified: the kid names the key that signed");
        json_decref(h);
        json_decref(claims);
    }

    fuzz_check(fuzz_verify(tok, len, &fuzz_ring_other, &claims) == SMCP_ERR,
               "another key: refused");

    free(tok);
}


/* claims signed by each key of the ring, and by a bare secret */
static void
fuzz_resign(const uint8_t *data, size_t size)
{
    int      rc;
    char    *tok;
    size_t   i;
    json_t  *c, *got, *h;

    c = json_loadb((const char *) data, size, JSON_DECODE_ANY, NULL);

    if (!json_is_object(c)) {
        json_decref(c);
        return;
    }

    for (i = 0; i < fuzz_ring.n; i++) {
        if (smcp_jwt_sign(&fuzz_ring.key[i], c, &tok) != SMCP_OK) {
            continue;
        }

        h = fuzz_header(tok, strlen(tok));
        fuzz_check(strcmp(json_string_value(json_object_get(h, "kid")) ?: "",
                          fuzz_ring.key[i].kid) == 0,
                   "signed: the key's kid in the header");
        json_decref(h);

        rc = fuzz_verify(tok, strlen(tok), &fuzz_ring_strict, &got);

        /* longer tokens are refused by design */
        if (fuzz_valid_claims(c) && strlen(tok) <= SMCP_JWT_MAX_LEN) {
            fuzz_check(rc == SMCP_OK, "signed valid claims: verified");
        }

        json_decref(got);
        free(tok);
    }

    if (smcp_jwt_sign(&fuzz_ring_other.key[0], c, &tok) == SMCP_OK) {
        fuzz_check(fuzz_verify(tok, strlen(tok), &fuzz_ring, &got)
                   == SMCP_ERR,
                   "a bare secret the ring has not: refused");
        free(tok);
    }

    json_decref(c);
}


static void
fuzz_keys_file(const uint8_t *data, size_t size)
{
    int             rc;
    char           *tok, err[256];
    size_t          i, j, k;
    json_t         *c, *got;
    smcp_keyring_t  ring;

    err[0] = '\0';
    rc = smcp_keyring_parse(&ring, (const char *) data, size, err,
                            sizeof(err));

    if (rc != SMCP_OK) {
        fuzz_check(rc == SMCP_ERR && ring.n == 0 && err[0] != '\0',
                   "refused whole, with a reason");
        return;
    }

    fuzz_check(ring.n >= 1 && ring.n <= SMCP_KEYRING_MAX, "1-16 keys");
    fuzz_check(ring.legacy >= -1 && ring.legacy < (int) ring.n,
               "the legacy key is one of them");

    c = json_pack("{s:s, s:I}", "sub", "alice",
                  "exp", (json_int_t) FUZZ_NOW + 60);
    fuzz_check(c != NULL, "memory");

    for (i = 0; i < ring.n; i++) {
        fuzz_check(smcp_keyring_valid_kid(ring.key[i].kid,
                                          ring.key[i].kid_len)
                   && strlen(ring.key[i].kid) == ring.key[i].kid_len,
                   "a valid kid");
        fuzz_check(ring.key[i].len >= SMCP_KEYRING_SECRET_MIN
                   && ring.key[i].len <= SMCP_KEYRING_SECRET_MAX,
                   "a secret of 32-256 bytes");

        for (k = 0; k < ring.key[i].len; k++) {
            fuzz_check(ring.key[i].secret[k] > 0x20
                       && ring.key[i].secret[k] < 0x7f,
                       "a printable secret");
        }

        for (j = 0; j < i; j++) {
            fuzz_check(strcmp(ring.key[i].kid, ring.key[j].kid) != 0,
                       "distinct kids");
        }

        fuzz_check(smcp_jwt_sign(&ring.key[i], c, &tok) == SMCP_OK,
                   "each key signs");
        fuzz_check(fuzz_verify(tok, strlen(tok), &ring, &got) == SMCP_OK,
                   "its token verifies");
        json_decref(got);
        free(tok);
    }

    json_decref(c);
    smcp_keyring_clear(&ring);
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char                  *tok;
    json_t                *claims;
    const smcp_keyring_t  *ring;

    if (size == 0) {
        return 0;
    }

    fuzz_rings();

    if (data[0] & 4) {
        fuzz_keys_file(data + 1, size - 1);
        return 0;
    }

    ring = (data[0] & 8) ? &fuzz_ring_strict : &fuzz_ring;

    if (data[0] & 1) {
        fuzz_signed(data + 1, size - 1, data[0] & 2, ring);

    } else {
        /* exactly the bytes, not NUL-terminated */
        tok = malloc(size - 1 ? size - 1 : 1);
        fuzz_check(tok != NULL, "memory");
        memcpy(tok, data + 1, size - 1);

        if (fuzz_verify(tok, size - 1, ring, &claims) == SMCP_OK) {
            json_decref(claims);
        }

        free(tok);
    }

    fuzz_resign(data + 1, size - 1);

    return 0;
}
