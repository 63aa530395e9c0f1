/*
 * The signing keys: HS256 secrets, each with a key id ("kid"), so that the
 * secret can be rotated.  The first key signs (its kid goes in the token's
 * header); every key verifies the tokens that name its kid; the one marked
 * legacy also verifies the tokens that name none (issued before rotation
 * existed, or by a tool given the bare secret).  Shared by the nginx
 * module, the runner and the token CLI; see docs/security.md.
 *
 * A keys file, one key a line, blank lines and "#" comments ignored:
 *
 *     KID SECRET [legacy]
 *
 * KID: 1-32 of A-Z a-z 0-9 . _ -; SECRET: 32-256 printable ASCII bytes
 * (no blank); at most SMCP_KEYRING_MAX keys, each kid once, one legacy.
 * A file that breaks any rule is refused whole, with the line named and
 * never a secret.  A bare secret (sandbox_mcp_secret_file, --secret-file,
 * $PROXY_JWT_SECRET) is a ring of one key without a kid, the legacy one.
 */

#ifndef SMCP_KEYRING_H
#define SMCP_KEYRING_H

#include <stddef.h>

#include "smcp_util.h"

#define SMCP_KEYRING_MAX         16         /* keys in a ring */
#define SMCP_KEYRING_KID_MAX     32         /* a kid's bytes */
#define SMCP_KEYRING_SECRET_MIN  32         /* a keys file's secret */
#define SMCP_KEYRING_SECRET_MAX  256
#define SMCP_KEYRING_FILE_MAX    16384      /* a keys file's bytes */


typedef struct {
    char           kid[SMCP_KEYRING_KID_MAX + 1];   /* "": none */
    size_t         kid_len;
    unsigned char  secret[SMCP_SECRET_MAX];
    size_t         len;
} smcp_key_t;


typedef struct {
    smcp_key_t     key[SMCP_KEYRING_MAX];   /* key[0] signs */
    size_t         n;
    int            legacy;                  /* the key of the tokens
                                               without kid; -1: none */
} smcp_keyring_t;


/*
 * Reads a keys file into ring.  SMCP_ERR with the reason in err (the path
 * and the line, never a secret); then ring holds no key.
 */
int smcp_keyring_load(smcp_keyring_t *ring, const char *path, char *err,
    size_t errlen);

/* parses a keys file's bytes (what smcp_keyring_load() read) */
int smcp_keyring_parse(smcp_keyring_t *ring, const char *text, size_t len,
    char *err, size_t errlen);

/* a ring of one bare secret: no kid, the legacy key */
int smcp_keyring_single(smcp_keyring_t *ring, const unsigned char *secret,
    size_t len);

/* the key named kid (len bytes), NULL: none */
const smcp_key_t *smcp_keyring_find(const smcp_keyring_t *ring,
    const char *kid, size_t len);

/* the key of the tokens without kid, NULL: none */
const smcp_key_t *smcp_keyring_legacy(const smcp_keyring_t *ring);

/* 1-32 of A-Z a-z 0-9 . _ - */
int smcp_keyring_valid_kid(const char *kid, size_t len);

/* wipes the secrets */
void smcp_keyring_clear(smcp_keyring_t *ring);

#endif /* SMCP_KEYRING_H */
