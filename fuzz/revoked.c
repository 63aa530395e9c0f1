/*
 * The revoked token ids (common/smcp_revoked.c): every nginx worker keeps
 * them in memory, fed from Redis (HGETALL revoked, then PUBLISHed
 * "<jti> <exp>" messages).  Whoever can revoke can send any message.
 *
 * The input is a list of lines: "<jti> <exp>" messages for
 * smcp_revoked_parse() and smcp_revoked_add(), with the clock moving on by
 * the line's first byte; "?<jti>" asks smcp_revoked_has(); "!" clears.
 * The set holds at most 16 entries.  Checked against a plain list of what
 * was added: a parsed message's id is valid and its expiry not negative;
 * an add is refused only when the set is full; an id is reported revoked
 * exactly when an accepted add gave it an expiry still ahead; the count
 * never exceeds the maximum; a bad id is refused.
 */

#include <string.h>

#include "smcp_revoked.h"
#include "fuzz.h"


#define FUZZ_MAX  16
#define FUZZ_LOG  256


typedef struct {
    char     jti[SMCP_JTI_MAX];
    size_t   len;
    int64_t  exp;
} fuzz_entry_t;


typedef struct {
    fuzz_entry_t  e[FUZZ_LOG];
    size_t        n;
} fuzz_model_t;


/* the latest expiry added for jti, -1 for none */
static int64_t
fuzz_model_exp(fuzz_model_t *m, const char *jti, size_t len)
{
    size_t   i;
    int64_t  exp;

    exp = -1;

    for (i = 0; i < m->n; i++) {
        if (m->e[i].len == len && memcmp(m->e[i].jti, jti, len) == 0
            && m->e[i].exp > exp)
        {
            exp = m->e[i].exp;
        }
    }

    return exp;
}


static void
fuzz_line(smcp_revoked_t *set, fuzz_model_t *m, const char *p, size_t len,
    int64_t now)
{
    int64_t      exp, want;
    size_t       jlen;
    const char  *jti;

    if (len == 1 && p[0] == '!') {
        smcp_revoked_clear(set);
        m->n = 0;
        fuzz_check(smcp_revoked_count(set) == 0, "cleared: empty");
        return;
    }

    if (len > 0 && p[0] == '?') {
        want = fuzz_model_exp(m, p + 1, len - 1);

        fuzz_check(smcp_revoked_has(set, p + 1, len - 1, now)
                   == (want > now),
                   "revoked: exactly what was added and has not expired");

        return;
    }

    if (smcp_revoked_parse(p, len, &jti, &jlen, &exp) != SMCP_OK) {
        return;
    }

    fuzz_check(smcp_valid_jti(jti, jlen) && jti >= p
               && jti + jlen <= p + len && exp >= 0,
               "parsed: a valid id inside the message, an expiry >= 0");

    if (smcp_revoked_add(set, jti, jlen, exp, now) != SMCP_OK) {
        fuzz_check(smcp_revoked_count(set) >= FUZZ_MAX,
                   "add refused only when the set is full");
        return;
    }

    if (exp > now) {
        fuzz_check(smcp_revoked_has(set, jti, jlen, now),
                   "added: revoked");

        if (m->n < FUZZ_LOG) {
            memcpy(m->e[m->n].jti, jti, jlen);
            m->e[m->n].len = jlen;
            m->e[m->n].exp = exp;
            m->n++;
        }
    }

    fuzz_check(smcp_revoked_count(set) <= FUZZ_MAX, "never over max");
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char            *buf, *line;
    int64_t          now;
    const char      *p, *end, *nl;
    fuzz_model_t    *m;
    smcp_revoked_t  *set;

    set = smcp_revoked_create(FUZZ_MAX);
    m = calloc(1, sizeof(fuzz_model_t));
    buf = malloc(size ? size : 1);
    fuzz_check(set && m && buf, "memory");
    memcpy(buf, data, size);

    fuzz_check(!smcp_valid_jti("", 0) && !smcp_valid_jti("a b", 3)
               && smcp_revoked_add(set, "a\0b", 3, 10, 0) == SMCP_ERR,
               "bad ids refused");

    now = 1000;
    end = buf + size;

    for (p = buf; p < end; p = nl + 1) {
        nl = memchr(p, '\n', end - p);
        if (nl == NULL) {
            nl = end;
        }

        if (nl > p) {
            now += (unsigned char) p[0] % 8;
        }

        /* each line in its own buffer of exactly its length */
        line = malloc(nl > p ? (size_t) (nl - p) : 1);
        fuzz_check(line != NULL, "memory");
        memcpy(line, p, nl - p);
        fuzz_line(set, m, line, nl - p, now);
        free(line);
    }

    smcp_revoked_free(set);
    free(m);
    free(buf);

    return 0;
}
