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


static const char  smcp_jwt_header[] = "{\"alg\":\"HS256\",\"typ\":\"JWT\"}";


/*
 * With smcp_jwt_keep_context() (a single-threaded process: an nginx
 * worker), one HMAC-SHA256 context for the process's life, keyed once and
 * re-initialised with that key for every token: OpenSSL 3's one-shot
 * HMAC() fetches the digest and takes the provider's locks on every call.
 * Another key (a test's second secret) re-keys it; a key longer than the
 * copy kept here, or any failure, takes the one-shot way, as every
 * threaded caller (the runner) does.
 */
static int             smcp_jwt_mac_on;
static EVP_MAC_CTX    *smcp_jwt_mac;
static unsigned char   smcp_jwt_mac_key[SMCP_JWT_MAC_KEY_MAX];
static size_t          smcp_jwt_mac_keylen;


void
smcp_jwt_keep_context(void)
{
    smcp_jwt_mac_on = 1;
}


static int
smcp_jwt_hmac_ctx(const unsigned char *key, size_t keylen, const char *data,
    size_t len, unsigned char *mac)
{
    size_t      outl;
    EVP_MAC    *m;
    OSSL_PARAM  params[2];

    if (!smcp_jwt_mac_on || keylen == 0 || keylen > SMCP_JWT_MAC_KEY_MAX) {
        return SMCP_ERR;
    }

    if (smcp_jwt_mac == NULL) {
        m = EVP_MAC_fetch(NULL, "HMAC", NULL);
        if (m == NULL) {
            return SMCP_ERR;
        }

        smcp_jwt_mac = EVP_MAC_CTX_new(m);
        EVP_MAC_free(m);

        if (smcp_jwt_mac == NULL) {
            return SMCP_ERR;
        }

        smcp_jwt_mac_keylen = 0;
    }

    if (keylen == smcp_jwt_mac_keylen
        && CRYPTO_memcmp(key, smcp_jwt_mac_key, keylen) == 0)
    {
        if (!EVP_MAC_init(smcp_jwt_mac, NULL, 0, NULL)) {
            smcp_jwt_mac_keylen = 0;
            return SMCP_ERR;
        }

    } else {
        params[0] = OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST,
                                                     (char *) "SHA256", 0);
        params[1] = OSSL_PARAM_construct_end();

        smcp_jwt_mac_keylen = 0;

        if (!EVP_MAC_init(smcp_jwt_mac, key, keylen, params)) {
            return SMCP_ERR;
        }

        memcpy(smcp_jwt_mac_key, key, keylen);
        smcp_jwt_mac_keylen = keylen;
    }

    if (!EVP_MAC_update(smcp_jwt_mac, (const unsigned char *) data, len)
        || !EVP_MAC_final(smcp_jwt_mac, mac, &outl, 32)
        || outl != 32)
    {
        smcp_jwt_mac_keylen = 0;
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
smcp_jwt_sign(const unsigned char *key, size_t keylen, json_t *claims,
    char **out)
{
    char           *payload, *tok, *p;
    size_t          hlen, plen, n;
    unsigned char   mac[32];

    payload = json_dumps(claims, JSON_COMPACT);
    if (payload == NULL) {
        return SMCP_ERR;
    }

    hlen = sizeof(smcp_jwt_header) - 1;
    plen = strlen(payload);

    n = smcp_b64url_encoded_len(hlen) + 1 + smcp_b64url_encoded_len(plen)
        + 1 + smcp_b64url_encoded_len(sizeof(mac)) + 1;

    tok = malloc(n);
    if (tok == NULL) {
        free(payload);
        return SMCP_ERR;
    }

    p = tok;
    p += smcp_b64url_encode(p, (const unsigned char *) smcp_jwt_header, hlen);
    *p++ = '.';
    p += smcp_b64url_encode(p, (const unsigned char *) payload, plen);
    free(payload);

    if (smcp_jwt_hmac(key, keylen, tok, p - tok, mac) != SMCP_OK) {
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


int
smcp_jwt_verify(const unsigned char *key, size_t keylen, const char *token,
    size_t len, time_t now, json_t **claims, char *err, size_t errlen)
{
    const char     *dot1, *dot2, *alg;
    json_t         *header, *payload, *sub, *exp;
    size_t          siglen;
    unsigned char   mac[32], sig[SMCP_JWT_MAX_LEN];

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

    json_decref(header);

    if (smcp_b64url_decode(sig, &siglen, dot2 + 1, token + len - dot2 - 1)
        != SMCP_OK
        || siglen != sizeof(mac)
        || smcp_jwt_hmac(key, keylen, token, dot2 - token, mac) != SMCP_OK
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
