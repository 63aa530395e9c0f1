/*
 * The set of revoked token ids (JWT "jti"), each with the token's expiry:
 * what every nginx worker keeps in memory, mirrored from the Redis hash
 * `revoked` (loaded whole on connect, then one PUBLISH "<jti> <exp>" per
 * revocation).  An open-addressing hash table; entries past their expiry
 * count as absent and are dropped when the table is rebuilt.  Plain C, no
 * nginx; one owner, no locking.
 */

#ifndef SMCP_REVOKED_H
#define SMCP_REVOKED_H

#include <stddef.h>
#include <stdint.h>

#include "smcp_util.h"


/* a token id: 1-64 bytes of [A-Za-z0-9_-] (smcp-token makes 32 hex) */
#define SMCP_JTI_MAX  64

int smcp_valid_jti(const char *s, size_t len);


typedef struct smcp_revoked_s  smcp_revoked_t;

/* max: the most entries kept (further adds fail) */
smcp_revoked_t *smcp_revoked_create(size_t max);
void smcp_revoked_free(smcp_revoked_t *set);
void smcp_revoked_clear(smcp_revoked_t *set);

/* adds or updates jti; SMCP_ERR for a bad jti, a full set or no memory */
int smcp_revoked_add(smcp_revoked_t *set, const char *jti, size_t len,
    int64_t exp, int64_t now);

/* 1 when jti is revoked and its expiry has not passed */
int smcp_revoked_has(const smcp_revoked_t *set, const char *jti, size_t len,
    int64_t now);

size_t smcp_revoked_count(const smcp_revoked_t *set);

/* the bytes of its table now; the most a set of max entries takes at any
 * moment (a rebuild holds two tables for a while) */
size_t smcp_revoked_bytes(const smcp_revoked_t *set);
size_t smcp_revoked_max_bytes(size_t max);

/* a revocation message "<jti> <exp>" */
int smcp_revoked_parse(const char *msg, size_t len, const char **jti,
    size_t *jti_len, int64_t *exp);


#endif /* SMCP_REVOKED_H */
