/*
 * The signing keys: a keys file parsed whole or refused whole.
 */

#include <stdio.h>
#include <string.h>

#include <openssl/crypto.h>

#include "smcp_keyring.h"
#include "smcp_validate.h"


#define SMCP_KEYRING_LEGACY  "legacy"
#define SMCP_KEYRING_FIELDS  4          /* one more than a line may have */


int
smcp_keyring_valid_kid(const char *kid, size_t len)
{
    size_t  i;

    if (len == 0 || len > SMCP_KEYRING_KID_MAX) {
        return 0;
    }

    for (i = 0; i < len; i++) {
        if (!smcp_name_byte((unsigned char) kid[i])) {
            return 0;
        }
    }

    return 1;
}


void
smcp_keyring_clear(smcp_keyring_t *ring)
{
    OPENSSL_cleanse(ring, sizeof(smcp_keyring_t));
    ring->n = 0;
    ring->legacy = -1;
}


int
smcp_keyring_single(smcp_keyring_t *ring, const unsigned char *secret,
    size_t len)
{
    smcp_keyring_clear(ring);

    if (len == 0 || len > SMCP_SECRET_MAX) {
        return SMCP_ERR;
    }

    memcpy(ring->key[0].secret, secret, len);
    ring->key[0].len = len;
    ring->n = 1;
    ring->legacy = 0;

    return SMCP_OK;
}


const smcp_key_t *
smcp_keyring_find(const smcp_keyring_t *ring, const char *kid, size_t len)
{
    size_t  i;

    if (len == 0) {
        return NULL;
    }

    for (i = 0; i < ring->n; i++) {
        if (ring->key[i].kid_len == len
            && memcmp(ring->key[i].kid, kid, len) == 0)
        {
            return &ring->key[i];
        }
    }

    return NULL;
}


const smcp_key_t *
smcp_keyring_legacy(const smcp_keyring_t *ring)
{
    return ring->legacy >= 0 && (size_t) ring->legacy < ring->n
           ? &ring->key[ring->legacy] : NULL;
}


static int
smcp_keyring_blank(char c)
{
    return c == ' ' || c == '\t' || c == '\r';
}


/* the line's next field into *f, its length returned (0: none left) */
static size_t
smcp_keyring_field(const char **p, const char *end, const char **f)
{
    while (*p < end && smcp_keyring_blank(**p)) {
        (*p)++;
    }

    *f = *p;

    while (*p < end && !smcp_keyring_blank(**p)) {
        (*p)++;
    }

    return *p - *f;
}


/* "KID SECRET [legacy]" checked against the keys before it; lines[] says
 * where each of them is */
static int
smcp_keyring_line(smcp_keyring_t *ring, const char **f, const size_t *flen,
    size_t nf, size_t line, const size_t *lines, char *err, size_t errlen)
{
    size_t       i;
    smcp_key_t  *k;

    if (nf < 2 || nf > 3) {
        snprintf(err, errlen, "line %zu: want \"KID SECRET\" or "
                 "\"KID SECRET legacy\"", line);
        return SMCP_ERR;
    }

    if (!smcp_keyring_valid_kid(f[0], flen[0])) {
        snprintf(err, errlen, "line %zu: the key id must be 1-%d of "
                 "A-Z a-z 0-9 . _ -", line, SMCP_KEYRING_KID_MAX);
        return SMCP_ERR;
    }

    if (flen[1] < SMCP_KEYRING_SECRET_MIN
        || flen[1] > SMCP_KEYRING_SECRET_MAX)
    {
        snprintf(err, errlen, "line %zu: the secret must be %d-%d bytes "
                 "(it is %zu)", line, SMCP_KEYRING_SECRET_MIN,
                 SMCP_KEYRING_SECRET_MAX, flen[1]);
        return SMCP_ERR;
    }

    for (i = 0; i < flen[1]; i++) {
        if ((unsigned char) f[1][i] < 0x21 || (unsigned char) f[1][i] > 0x7e)
        {
            snprintf(err, errlen, "line %zu: the secret must be printable "
                     "ASCII", line);
            return SMCP_ERR;
        }
    }

    if (nf == 3
        && (flen[2] != sizeof(SMCP_KEYRING_LEGACY) - 1
            || memcmp(f[2], SMCP_KEYRING_LEGACY, flen[2]) != 0))
    {
        snprintf(err, errlen, "line %zu: the third field may only be "
                 "\"legacy\"", line);
        return SMCP_ERR;
    }

    for (i = 0; i < ring->n; i++) {
        if (ring->key[i].kid_len == flen[0]
            && memcmp(ring->key[i].kid, f[0], flen[0]) == 0)
        {
            snprintf(err, errlen, "line %zu: key id \"%.*s\" is line %zu's "
                     "too", line, (int) flen[0], f[0], lines[i]);
            return SMCP_ERR;
        }
    }

    if (nf == 3 && ring->legacy >= 0) {
        snprintf(err, errlen, "line %zu: a second legacy key (line %zu's "
                 "is one)", line, lines[ring->legacy]);
        return SMCP_ERR;
    }

    if (ring->n == SMCP_KEYRING_MAX) {
        snprintf(err, errlen, "line %zu: more than %d keys", line,
                 SMCP_KEYRING_MAX);
        return SMCP_ERR;
    }

    k = &ring->key[ring->n];
    memcpy(k->kid, f[0], flen[0]);
    k->kid[flen[0]] = '\0';
    k->kid_len = flen[0];
    memcpy(k->secret, f[1], flen[1]);
    k->len = flen[1];

    if (nf == 3) {
        ring->legacy = (int) ring->n;
    }

    ring->n++;

    return SMCP_OK;
}


int
smcp_keyring_parse(smcp_keyring_t *ring, const char *text, size_t len,
    char *err, size_t errlen)
{
    size_t       nf, line, flen[SMCP_KEYRING_FIELDS],
                 lines[SMCP_KEYRING_MAX];
    const char  *p, *q, *eol, *end, *f[SMCP_KEYRING_FIELDS];

    smcp_keyring_clear(ring);

    if (len > SMCP_KEYRING_FILE_MAX) {
        snprintf(err, errlen, "larger than %d bytes", SMCP_KEYRING_FILE_MAX);
        return SMCP_ERR;
    }

    if (memchr(text, '\0', len) != NULL) {
        snprintf(err, errlen, "holds a NUL byte");
        return SMCP_ERR;
    }

    end = text + len;

    for (p = text, line = 1; p < end; p = eol + 1, line++) {
        eol = memchr(p, '\n', end - p);
        if (eol == NULL) {
            eol = end;
        }

        q = p;

        for (nf = 0; nf < SMCP_KEYRING_FIELDS; nf++) {
            flen[nf] = smcp_keyring_field(&q, eol, &f[nf]);

            if (flen[nf] == 0) {
                break;
            }
        }

        if (nf == 0 || f[0][0] == '#') {
            continue;
        }

        if (ring->n < SMCP_KEYRING_MAX) {
            lines[ring->n] = line;
        }

        if (smcp_keyring_line(ring, f, flen, nf, line, lines, err, errlen)
            != SMCP_OK)
        {
            smcp_keyring_clear(ring);
            return SMCP_ERR;
        }
    }

    if (ring->n == 0) {
        snprintf(err, errlen, "no key in it (want \"KID SECRET\" lines)");
        return SMCP_ERR;
    }

    return SMCP_OK;
}


int
smcp_keyring_load(smcp_keyring_t *ring, const char *path, char *err,
    size_t errlen)
{
    int     rc;
    FILE   *f;
    char    why[160];
    size_t  n;
    char    buf[SMCP_KEYRING_FILE_MAX + 1];

    smcp_keyring_clear(ring);

    f = fopen(path, "rb");
    if (f == NULL) {
        snprintf(err, errlen, "cannot open keys file \"%s\"", path);
        return SMCP_ERR;
    }

    n = fread(buf, 1, sizeof(buf), f);

    if (ferror(f)) {
        fclose(f);
        snprintf(err, errlen, "cannot read keys file \"%s\"", path);
        return SMCP_ERR;
    }

    fclose(f);

    rc = smcp_keyring_parse(ring, buf, n, why, sizeof(why));
    OPENSSL_cleanse(buf, sizeof(buf));

    if (rc != SMCP_OK) {
        snprintf(err, errlen, "keys file \"%s\": %s", path, why);
    }

    return rc;
}
