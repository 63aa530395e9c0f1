/*
 * HS256 JSON Web Tokens (RFC 7519 / RFC 7515 compact serialisation).
 */

#include <string.h>
#include <stdio.h>
#include <stdlib.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/params.h>

#include "smcp_jwt.h"


#define SMCP_JWT_MAC_KEY_MAX  256
#define SMCP_JWT_MAC_SLOTS    4         /* keys with a context kept */


/* the header without and with a kid (checked: nothing to escape) */
#define SMCP_JWT_HEADER       "{\"alg\":\"HS256\",\"typ\":\"JWT\""
#define SMCP_JWT_HEADER_MAX                                                   \
    (sizeof(SMCP_JWT_HEADER ",\"kid\":\"\"}") + SMCP_KEYRING_KID_MAX)


/*
 * With smcp_jwt_keep_context() (a single-threaded process: an nginx
 * worker), a few HMAC-SHA256 contexts for the process's life, each keyed
 * once and re-initialised with its key for every token: OpenSSL 3's
 * one-shot HMAC() fetches the digest and takes the provider's locks on
 * every call.  A key without a context (after a rotation: the old and the
 * new key, a test's second secret) takes the next slot in turn; a key
 * longer than the copy kept here, or any failure, takes the one-shot way,
 * as every threaded caller (the runner) does.
 */
typedef struct {
    EVP_MAC_CTX    *ctx;
    unsigned char   key[SMCP_JWT_MAC_KEY_MAX];
    size_t          keylen;             /* 0: not keyed */
} smcp_jwt_mac_t;


static int             smcp_jwt_mac_on;
static smcp_jwt_mac_t  smcp_jwt_macs[SMCP_JWT_MAC_SLOTS];
static unsigned        smcp_jwt_mac_next;


void
smcp_jwt_keep_context(void)
{
    smcp_jwt_mac_on = 1;
}


/* the slot keyed with key, else the next one, re-keyed; NULL: failed */
static smcp_jwt_mac_t *
smcp_jwt_mac_slot(const unsigned char *key, size_t keylen)
{
    EVP_MAC         *m;
    OSSL_PARAM       params[2];
    unsigned         i;
    smcp_jwt_mac_t  *s;

    for (i = 0; i < SMCP_JWT_MAC_SLOTS; i++) {
        s = &smcp_jwt_macs[i];

        if (s->keylen == keylen && CRYPTO_memcmp(key, s->key, keylen) == 0) {
            if (!EVP_MAC_init(s->ctx, NULL, 0, NULL)) {
                s->keylen = 0;
                return NULL;
            }

            return s;
        }
    }

    s = &smcp_jwt_macs[smcp_jwt_mac_next++ % SMCP_JWT_MAC_SLOTS];

    if (s->ctx == NULL) {
        m = EVP_MAC_fetch(NULL, "HMAC", NULL);
        if (m == NULL) {
            return NULL;
        }

        s->ctx = EVP_MAC_CTX_new(m);
        EVP_MAC_free(m);

        if (s->ctx == NULL) {
            return NULL;
        }
    }

    params[0] = OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST,
                                                 (char *) "SHA256", 0);
    params[1] = OSSL_PARAM_construct_end();

    s->keylen = 0;

    if (!EVP_MAC_init(s->ctx, key, keylen, params)) {
        return NULL;
    }

    memcpy(s->key, key, keylen);
    s->keylen = keylen;

    return s;
}


static int
smcp_jwt_hmac_ctx(const unsigned char *key, size_t keylen, const char *data,
    size_t len, unsigned char *mac)
{
    size_t           outl;
    smcp_jwt_mac_t  *s;

    if (!smcp_jwt_mac_on || keylen == 0 || keylen > SMCP_JWT_MAC_KEY_MAX) {
        return SMCP_ERR;
    }

    s = smcp_jwt_mac_slot(key, keylen);
    if (s == NULL) {
        return SMCP_ERR;
    }

    if (!EVP_MAC_update(s->ctx, (const unsigned char *) data, len)
        || !EVP_MAC_final(s->ctx, mac, &outl, 32)
        || outl != 32)
    {
        s->keylen = 0;
        return SMCP_ERR;
    }

    return SMCP_OK;
}


static int
smcp_jwt_hmac(const unsigned char *key, size_t keylen, const char *data,
    size_t len, unsigned char *mac)
{
    unsigned int  maclen;

    if (smcp_jwt_hmac_ctx(key, keylen, data, len, mac) == SMCP_OK) {
        return SMCP_OK;
    }

    maclen = 32;

    if (HMAC(EVP_sha256(), key, (int) keylen, (const unsigned char *) data,
             len, mac, &maclen) == NULL
        || maclen != 32)
    {
        return SMCP_ERR;
    }

    return SMCP_OK;
}


int
smcp_jwt_sign(const smcp_key_t *key, json_t *claims, char **out)
{
    int             hlen;
    char           *payload, *tok, *p;
    size_t          plen, n;
    unsigned char   mac[32];
    char            header[SMCP_JWT_HEADER_MAX];

    if (key->kid_len == 0) {
        hlen = snprintf(header, sizeof(header), SMCP_JWT_HEADER "}");

    } else if (smcp_keyring_valid_kid(key->kid, key->kid_len)) {
        hlen = snprintf(header, sizeof(header), SMCP_JWT_HEADER
                        ",\"kid\":\"%.*s\"}", (int) key->kid_len, key->kid);

    } else {
        return SMCP_ERR;
    }

    if (hlen < 0 || (size_t) hlen >= sizeof(header)) {
        return SMCP_ERR;
    }

    payload = json_dumps(claims, JSON_COMPACT);
    if (payload == NULL) {
        return SMCP_ERR;
    }

    plen = strlen(payload);

    n = smcp_b64url_encoded_len(hlen) + 1 + smcp_b64url_encoded_len(plen)
        + 1 + smcp_b64url_encoded_len(sizeof(mac)) + 1;

    tok = malloc(n);
    if (tok == NULL) {
        free(payload);
        return SMCP_ERR;
    }

    p = tok;
    p += smcp_b64url_encode(p, (const unsigned char *) header, hlen);
    *p++ = '.';
    p += smcp_b64url_encode(p, (const unsigned char *) payload, plen);
    free(payload);

    if (smcp_jwt_hmac(key->secret, key->len, tok, p - tok, mac) != SMCP_OK) {
        free(tok);
        return SMCP_ERR;
    }

    *p++ = '.';
    smcp_b64url_encode(p, mac, sizeof(mac));

    *out = tok;

    return SMCP_OK;
}


static json_t *
smcp_jwt_decode_json(const char *src, size_t len)
{
    unsigned char  buf[SMCP_JWT_MAX_LEN];
    size_t         n;

    if (len > SMCP_JWT_MAX_LEN - 3
        || smcp_b64url_decode(buf, &n, src, len) != SMCP_OK)
    {
        return NULL;
    }

    return json_loadb((const char *) buf, n, JSON_REJECT_DUPLICATES, NULL);
}


/*
 * The one key that may have signed a token of this header: its "kid"'s,
 * else (no kid) the legacy key; NULL and the reason in err otherwise.
 * Never a search through the keys by their signatures.
 */
static const smcp_key_t *
smcp_jwt_key(const smcp_keyring_t *ring, json_t *header, char *err,
    size_t errlen)
{
    json_t            *kid;
    const smcp_key_t  *key;

    kid = json_object_get(header, "kid");

    if (kid == NULL) {
        key = smcp_keyring_legacy(ring);

        if (key == NULL) {
            snprintf(err, errlen, "token has no key id");
        }

        return key;
    }

    if (!json_is_string(kid)
        || !smcp_keyring_valid_kid(json_string_value(kid),
                                   json_string_length(kid)))
    {
        snprintf(err, errlen, "malformed token key id");
        return NULL;
    }

    key = smcp_keyring_find(ring, json_string_value(kid),
                            json_string_length(kid));

    if (key == NULL) {
        snprintf(err, errlen, "unknown token key id");
    }

    return key;
}


int
smcp_jwt_verify(const smcp_keyring_t *ring, const char *token, size_t len,
    time_t now, json_t **claims, char *err, size_t errlen)
{
    const char        *dot1, *dot2, *alg;
    json_t            *header, *payload, *sub, *exp;
    size_t             siglen;
    unsigned char      mac[32], sig[SMCP_JWT_MAX_LEN];
    const smcp_key_t  *key;

    *claims = NULL;

    if (len == 0 || len > SMCP_JWT_MAX_LEN) {
        snprintf(err, errlen, "malformed token");
        return SMCP_ERR;
    }

    dot1 = memchr(token, '.', len);
    dot2 = dot1 ? memchr(dot1 + 1, '.', token + len - dot1 - 1) : NULL;

    if (dot1 == NULL || dot2 == NULL
        || memchr(dot2 + 1, '.', token + len - dot2 - 1) != NULL)
    {
        snprintf(err, errlen, "malformed token");
        return SMCP_ERR;
    }

    header = smcp_jwt_decode_json(token, dot1 - token);
    if (header == NULL || !json_is_object(header)) {
        json_decref(header);
        snprintf(err, errlen, "malformed token header");
        return SMCP_ERR;
    }

    alg = json_string_value(json_object_get(header, "alg"));

    if (alg == NULL || strcmp(alg, "HS256") != 0) {
        json_decref(header);
        snprintf(err, errlen, "token algorithm must be HS256");
        return SMCP_ERR;
    }

    key = smcp_jwt_key(ring, header, err, errlen);
    json_decref(header);

    if (key == NULL) {
        return SMCP_ERR;
    }

    if (smcp_b64url_decode(sig, &siglen, dot2 + 1, token + len - dot2 - 1)
        != SMCP_OK
        || siglen != sizeof(mac)
        || smcp_jwt_hmac(key->secret, key->len, token, dot2 - token, mac)
           != SMCP_OK
        || CRYPTO_memcmp(mac, sig, sizeof(mac)) != 0)
    {
        snprintf(err, errlen, "bad token signature");
        return SMCP_ERR;
    }

    payload = smcp_jwt_decode_json(dot1 + 1, dot2 - dot1 - 1);
    if (payload == NULL || !json_is_object(payload)) {
        json_decref(payload);
        snprintf(err, errlen, "malformed token payload");
        return SMCP_ERR;
    }

    sub = json_object_get(payload, "sub");
    exp = json_object_get(payload, "exp");

    if (!json_is_string(sub) || json_string_length(sub) == 0) {
        json_decref(payload);
        snprintf(err, errlen, "token has no subject");
        return SMCP_ERR;
    }

    if (!json_is_number(exp)) {
        json_decref(payload);
        snprintf(err, errlen, "token has no expiry");
        return SMCP_ERR;
    }

    if (json_number_value(exp) <= (double) now) {
        json_decref(payload);
        snprintf(err, errlen, "token expired");
        return SMCP_ERR;
    }

    *claims = payload;

    return SMCP_OK;
}
