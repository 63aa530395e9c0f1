/*
 * HS256 JSON Web Tokens (RFC 7519 / RFC 7515 compact serialisation).
 */

#include <string.h>
#include <stdio.h>
#include <stdlib.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "smcp_jwt.h"


static const char  smcp_jwt_header[] = "{\"alg\":\"HS256\",\"typ\":\"JWT\"}";


static int
smcp_jwt_hmac(const unsigned char *key, size_t keylen, const char *data,
    size_t len, unsigned char *mac)
{
    unsigned int  maclen;

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
