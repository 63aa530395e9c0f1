/*
 * Shared helpers: base64url, hex digits, random identifiers, time
 * formatting.
 */

#include <pthread.h>
#include <string.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>

#include <openssl/crypto.h>
#include <openssl/rand.h>

#include "smcp_keys.h"
#include "smcp_util.h"


static const char smcp_b64url_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";


size_t
smcp_b64url_encoded_len(size_t n)
{
    return (n / 3) * 4 + (n % 3 ? n % 3 + 1 : 0);
}


size_t
smcp_b64url_encode(char *dst, const unsigned char *src, size_t n)
{
    char    *d = dst;
    size_t   i;

    for (i = 0; i + 2 < n; i += 3) {
        *d++ = smcp_b64url_alphabet[src[i] >> 2];
        *d++ = smcp_b64url_alphabet[((src[i] & 0x03) << 4) | (src[i + 1] >> 4)];
        *d++ = smcp_b64url_alphabet[((src[i + 1] & 0x0f) << 2)
                                    | (src[i + 2] >> 6)];
        *d++ = smcp_b64url_alphabet[src[i + 2] & 0x3f];
    }

    if (n - i == 1) {
        *d++ = smcp_b64url_alphabet[src[i] >> 2];
        *d++ = smcp_b64url_alphabet[(src[i] & 0x03) << 4];

    } else if (n - i == 2) {
        *d++ = smcp_b64url_alphabet[src[i] >> 2];
        *d++ = smcp_b64url_alphabet[((src[i] & 0x03) << 4) | (src[i + 1] >> 4)];
        *d++ = smcp_b64url_alphabet[(src[i + 1] & 0x0f) << 2];
    }

    *d = '\0';

    return d - dst;
}


static int
smcp_b64url_value(int c)
{
    if (c >= 'A' && c <= 'Z') {
        return c - 'A';
    }
    if (c >= 'a' && c <= 'z') {
        return c - 'a' + 26;
    }
    if (c >= '0' && c <= '9') {
        return c - '0' + 52;
    }
    if (c == '-') {
        return 62;
    }
    if (c == '_') {
        return 63;
    }
    return -1;
}


int
smcp_b64url_decode(unsigned char *dst, size_t *dlen, const char *src,
    size_t len)
{
    size_t    i, n;
    uint32_t  acc;
    int       v, bits;

    while (len > 0 && src[len - 1] == '=') {
        len--;
    }

    if (len % 4 == 1) {
        return SMCP_ERR;
    }

    n = 0;
    acc = 0;
    bits = 0;

    for (i = 0; i < len; i++) {
        v = smcp_b64url_value((unsigned char) src[i]);
        if (v < 0) {
            return SMCP_ERR;
        }

        acc = (acc << 6) | (uint32_t) v;
        bits += 6;

        if (bits >= 8) {
            bits -= 8;
            dst[n++] = (unsigned char) (acc >> bits);
        }
    }

    /* the leftover bits of a canonical encoding are zero */
    if (bits > 0 && (acc & ((1u << bits) - 1)) != 0) {
        return SMCP_ERR;
    }

    *dlen = n;

    return SMCP_OK;
}


int
smcp_hex_value(unsigned char c)
{
    if (c >= '0' && c <= '9') {
        return c - '0';
    }

    c |= 0x20;

    return (c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1;
}


int
smcp_random_hex(char *dst, size_t nbytes)
{
    static const char  hex[] = "0123456789abcdef";
    unsigned char      buf[64];
    size_t             i;

    if (nbytes > sizeof(buf) || RAND_bytes(buf, (int) nbytes) != 1) {
        return SMCP_ERR;
    }

    for (i = 0; i < nbytes; i++) {
        dst[2 * i] = hex[buf[i] >> 4];
        dst[2 * i + 1] = hex[buf[i] & 0x0f];
    }

    dst[2 * nbytes] = '\0';

    return SMCP_OK;
}


/*
 * Identifiers' random bytes, SMCP_ID_POOL at a time: OpenSSL 3's RAND_bytes
 * costs about a microsecond a call whatever its size (its DRBG sets up
 * AES-CTR on every generate), and a run_task takes three (the run's and
 * the session's ids, the watch link's jti): 7% of a worker's time.  Only
 * for identifiers (run and session ids, token ids), never for secrets: the
 * bytes not handed out yet sit in memory.  Per thread (the runner's
 * threads each have their own); a child of fork() starts empty (nginx's
 * workers are forked from the master: a pool filled before would hand the
 * same bytes to every worker).  Bytes handed out are wiped.
 */
#define SMCP_ID_POOL  1024

static __thread unsigned char  smcp_id_pool[SMCP_ID_POOL];
static __thread size_t         smcp_id_left;
static pthread_once_t          smcp_id_once = PTHREAD_ONCE_INIT;


/* in the child of fork(), in the thread that forked (the only one left) */
static void
smcp_id_forked(void)
{
    OPENSSL_cleanse(smcp_id_pool, sizeof(smcp_id_pool));
    smcp_id_left = 0;
}


static void
smcp_id_init(void)
{
    (void) pthread_atfork(NULL, NULL, smcp_id_forked);
}


int
smcp_random_id_hex(char *dst, size_t nbytes)
{
    static const char  hex[] = "0123456789abcdef";
    unsigned char     *p;
    size_t             i;

    if (nbytes > SMCP_ID_POOL / 4) {
        return smcp_random_hex(dst, nbytes);
    }

    if (pthread_once(&smcp_id_once, smcp_id_init) != 0) {
        return SMCP_ERR;
    }

    if (smcp_id_left < nbytes) {
        if (RAND_bytes(smcp_id_pool, SMCP_ID_POOL) != 1) {
            smcp_id_left = 0;
            return SMCP_ERR;
        }

        smcp_id_left = SMCP_ID_POOL;
    }

    p = smcp_id_pool + SMCP_ID_POOL - smcp_id_left;

    for (i = 0; i < nbytes; i++) {
        dst[2 * i] = hex[p[i] >> 4];
        dst[2 * i + 1] = hex[p[i] & 0x0f];
    }

    dst[2 * nbytes] = '\0';

    OPENSSL_cleanse(p, nbytes);
    smcp_id_left -= nbytes;

    return SMCP_OK;
}


int
smcp_make_id(char *dst, const char *prefix)
{
    size_t  plen;

    plen = strlen(prefix);
    memcpy(dst, prefix, plen);

    /* 24 hex digits: 96 random bits */
    return smcp_random_id_hex(dst + plen, SMCP_ID_HEX_LEN / 2);
}


int
smcp_valid_id(const char *s, size_t len, const char *prefix)
{
    size_t  i, plen;

    plen = strlen(prefix);

    if (len != plen + SMCP_ID_HEX_LEN || memcmp(s, prefix, plen) != 0) {
        return 0;
    }

    for (i = plen; i < len; i++) {
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) {
            return 0;
        }
    }

    return 1;
}


int64_t
smcp_now_ms(void)
{
    struct timeval  tv;

    gettimeofday(&tv, NULL);

    return (int64_t) tv.tv_sec * 1000 + tv.tv_usec / 1000;
}


void
smcp_iso8601_ms(char *dst, size_t size, int64_t ms)
{
    time_t     t;
    struct tm  tm;

    t = (time_t) (ms / 1000);
    gmtime_r(&t, &tm);

    snprintf(dst, size, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ",
             tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
             tm.tm_hour, tm.tm_min, tm.tm_sec, (int) (ms % 1000));
}


static int
smcp_secret_check(unsigned char *dst, size_t *len, size_t min,
    const char *what, char *err, size_t errlen)
{
    while (*len > 0 && (dst[*len - 1] == '\n' || dst[*len - 1] == '\r'
                        || dst[*len - 1] == ' ' || dst[*len - 1] == '\t'))
    {
        (*len)--;
    }

    if (*len < min || *len == 0) {
        snprintf(err, errlen, "secret from %s is shorter than %zu bytes",
                 what, min ? min : 1);
        return SMCP_ERR;
    }

    return SMCP_OK;
}


int
smcp_secret_from_file(const char *path, size_t min, unsigned char *dst,
    size_t *len, char *err, size_t errlen)
{
    FILE    *f;
    size_t   n;

    f = fopen(path, "rb");
    if (f == NULL) {
        snprintf(err, errlen, "cannot open secret file \"%s\"", path);
        return SMCP_ERR;
    }

    n = fread(dst, 1, SMCP_SECRET_MAX, f);

    if (ferror(f) || !feof(f)) {
        fclose(f);
        snprintf(err, errlen, "cannot read secret file \"%s\" (or larger "
                 "than %d bytes)", path, SMCP_SECRET_MAX - 1);
        return SMCP_ERR;
    }

    fclose(f);

    *len = n;

    return smcp_secret_check(dst, len, min, path, err, errlen);
}


int
smcp_secret_from_env(const char *name, size_t min, unsigned char *dst,
    size_t *len, char *err, size_t errlen)
{
    const char  *v;
    size_t       n;

    v = getenv(name);
    if (v == NULL || *v == '\0') {
        snprintf(err, errlen, "environment variable %s is not set", name);
        return SMCP_ERR;
    }

    n = strlen(v);
    if (n >= SMCP_SECRET_MAX) {
        snprintf(err, errlen, "environment variable %s is longer than %d "
                 "bytes", name, SMCP_SECRET_MAX - 1);
        return SMCP_ERR;
    }

    memcpy(dst, v, n);
    *len = n;

    return smcp_secret_check(dst, len, min, name, err, errlen);
}


static size_t
smcp_utf8_seq_len(const unsigned char *p, size_t left)
{
    size_t   n, i;
    uint32_t c;

    if (p[0] < 0x80) {
        return 1;
    }

    if (p[0] >= 0xc2 && p[0] <= 0xdf) {
        n = 2;
        c = p[0] & 0x1f;

    } else if (p[0] >= 0xe0 && p[0] <= 0xef) {
        n = 3;
        c = p[0] & 0x0f;

    } else if (p[0] >= 0xf0 && p[0] <= 0xf4) {
        n = 4;
        c = p[0] & 0x07;

    } else {
        return 0;
    }

    if (left < n) {
        return 0;
    }

    for (i = 1; i < n; i++) {
        if ((p[i] & 0xc0) != 0x80) {
            return 0;
        }

        c = (c << 6) | (p[i] & 0x3f);
    }

    /* overlong forms, surrogates, beyond U+10FFFF */
    if ((n == 3 && c < 0x800) || (n == 4 && c < 0x10000)
        || (c >= 0xd800 && c <= 0xdfff) || c > 0x10ffff)
    {
        return 0;
    }

    return n;
}


size_t
smcp_utf8_sanitize(char *s, size_t len)
{
    size_t          i, n, bad;
    unsigned char  *p = (unsigned char *) s;

    bad = 0;

    for (i = 0; i < len; /* void */) {
        n = smcp_utf8_seq_len(p + i, len - i);

        if (n == 0) {
            p[i++] = '?';
            bad++;
            continue;
        }

        i += n;
    }

    return bad;
}
