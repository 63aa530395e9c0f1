/*
 * Revoked token ids: linear probing over a power-of-two table kept at most
 * half full; growing rebuilds the table and leaves expired entries behind.
 * The table never grows past the smallest power of two that holds max
 * entries half full: its memory is bounded by max (smcp_revoked_max_bytes).
 */

#include <stdlib.h>
#include <string.h>

#include "smcp_revoked.h"


#define SMCP_REVOKED_MIN  64


typedef struct {
    int64_t   exp;
    uint8_t   len;                  /* 0: free slot */
    char      jti[SMCP_JTI_MAX];
} smcp_revoked_entry_t;


struct smcp_revoked_s {
    smcp_revoked_entry_t  *slots;
    size_t                 size;    /* power of two */
    size_t                 used;
    size_t                 max;
    size_t                 cap;     /* size at most */
    int64_t                min_exp;     /* the soonest expiry: a rebuild
                                           before it frees nothing */
};


int
smcp_valid_jti(const char *s, size_t len)
{
    size_t  i;

    if (s == NULL || len == 0 || len > SMCP_JTI_MAX) {
        return 0;
    }

    for (i = 0; i < len; i++) {
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z')
              || (s[i] >= '0' && s[i] <= '9') || s[i] == '-' || s[i] == '_'))
        {
            return 0;
        }
    }

    return 1;
}


static uint64_t
smcp_revoked_hash(const char *s, size_t len)
{
    uint64_t  h;
    size_t    i;

    /* FNV-1a */
    h = 14695981039346656037ULL;

    for (i = 0; i < len; i++) {
        h ^= (unsigned char) s[i];
        h *= 1099511628211ULL;
    }

    return h;
}


/* the slot holding jti, or the free slot where it belongs */
static smcp_revoked_entry_t *
smcp_revoked_slot(const smcp_revoked_t *set, const char *jti, size_t len)
{
    size_t                 i;
    smcp_revoked_entry_t  *e;

    i = smcp_revoked_hash(jti, len) & (set->size - 1);

    for ( ;; ) {
        e = &set->slots[i];

        if (e->len == 0
            || (e->len == len && memcmp(e->jti, jti, len) == 0))
        {
            return e;
        }

        i = (i + 1) & (set->size - 1);
    }
}


/* the most slots a set of max entries takes: they fill half of it */
static size_t
smcp_revoked_cap(size_t max)
{
    size_t  cap;

    for (cap = SMCP_REVOKED_MIN; cap / 2 < max; cap *= 2) {
        /* void */
    }

    return cap;
}


size_t
smcp_revoked_max_bytes(size_t max)
{
    /* the table, and the one a rebuild makes before it frees the old */
    return 2 * smcp_revoked_cap(max) * sizeof(smcp_revoked_entry_t);
}


size_t
smcp_revoked_bytes(const smcp_revoked_t *set)
{
    return set->size * sizeof(smcp_revoked_entry_t);
}


smcp_revoked_t *
smcp_revoked_create(size_t max)
{
    smcp_revoked_t  *set;

    set = calloc(1, sizeof(smcp_revoked_t));
    if (set == NULL) {
        return NULL;
    }

    set->size = SMCP_REVOKED_MIN;
    set->max = max;
    set->cap = smcp_revoked_cap(max);
    set->min_exp = INT64_MAX;
    set->slots = calloc(set->size, sizeof(smcp_revoked_entry_t));

    if (set->slots == NULL) {
        free(set);
        return NULL;
    }

    return set;
}


void
smcp_revoked_free(smcp_revoked_t *set)
{
    if (set) {
        free(set->slots);
        free(set);
    }
}


void
smcp_revoked_clear(smcp_revoked_t *set)
{
    memset(set->slots, 0, set->size * sizeof(smcp_revoked_entry_t));
    set->used = 0;
    set->min_exp = INT64_MAX;
}


/* a table of size slots holding the live entries */
static int
smcp_revoked_rebuild(smcp_revoked_t *set, size_t size, int64_t now)
{
    size_t                 i;
    smcp_revoked_t         next;
    smcp_revoked_entry_t  *e, *to;

    next.slots = calloc(size, sizeof(smcp_revoked_entry_t));
    if (next.slots == NULL) {
        return SMCP_ERR;
    }

    next.size = size;
    next.used = 0;
    next.min_exp = INT64_MAX;

    for (i = 0; i < set->size; i++) {
        e = &set->slots[i];

        if (e->len == 0 || e->exp <= now) {
            continue;
        }

        to = smcp_revoked_slot(&next, e->jti, e->len);
        *to = *e;
        next.used++;

        if (e->exp < next.min_exp) {
            next.min_exp = e->exp;
        }
    }

    free(set->slots);
    set->slots = next.slots;
    set->size = next.size;
    set->used = next.used;
    set->min_exp = next.min_exp;

    return SMCP_OK;
}


int
smcp_revoked_add(smcp_revoked_t *set, const char *jti, size_t len,
    int64_t exp, int64_t now)
{
    size_t                 size;
    smcp_revoked_entry_t  *e;

    if (!smcp_valid_jti(jti, len)) {
        return SMCP_ERR;
    }

    if (exp <= now) {
        /* the token expired: nothing to remember */
        return SMCP_OK;
    }

    e = smcp_revoked_slot(set, jti, len);

    if (e->len) {
        e->exp = exp > e->exp ? exp : e->exp;
        return SMCP_OK;
    }

    if (set->used >= set->max && set->min_exp > now) {
        return SMCP_ERR;
    }

    if ((set->used + 1) * 2 > set->size || set->used >= set->max) {
        /* drop the expired; grow if still more than a quarter full */
        size = set->size;

        if (set->min_exp <= now
            && smcp_revoked_rebuild(set, size, now) != SMCP_OK)
        {
            return SMCP_ERR;
        }

        while ((set->used + 1) * 4 > size && size < set->cap) {
            size *= 2;
        }

        if (size != set->size
            && smcp_revoked_rebuild(set, size, now) != SMCP_OK)
        {
            return SMCP_ERR;
        }
    }

    if (set->used >= set->max) {
        return SMCP_ERR;
    }

    e = smcp_revoked_slot(set, jti, len);
    e->len = (uint8_t) len;
    e->exp = exp;
    memcpy(e->jti, jti, len);
    set->used++;

    if (exp < set->min_exp) {
        set->min_exp = exp;
    }

    return SMCP_OK;
}


int
smcp_revoked_has(const smcp_revoked_t *set, const char *jti, size_t len,
    int64_t now)
{
    const smcp_revoked_entry_t  *e;

    if (!smcp_valid_jti(jti, len)) {
        return 0;
    }

    e = smcp_revoked_slot(set, jti, len);

    return e->len != 0 && e->exp > now;
}


size_t
smcp_revoked_count(const smcp_revoked_t *set)
{
    return set->used;
}


int
smcp_revoked_parse(const char *msg, size_t len, const char **jti,
    size_t *jti_len, int64_t *exp)
{
    const char  *sp;
    size_t       i;
    int64_t      v;

    sp = memchr(msg, ' ', len);

    if (sp == NULL || !smcp_valid_jti(msg, sp - msg)) {
        return SMCP_ERR;
    }

    i = sp - msg + 1;

    if (i == len || len - i > 18) {
        return SMCP_ERR;
    }

    for (v = 0; i < len; i++) {
        if (msg[i] < '0' || msg[i] > '9') {
            return SMCP_ERR;
        }

        v = v * 10 + (msg[i] - '0');
    }

    *jti = msg;
    *jti_len = sp - msg;
    *exp = v;

    return SMCP_OK;
}
