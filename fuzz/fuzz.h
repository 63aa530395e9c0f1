/*
 * What the fuzz harnesses share: a check that aborts with a message (so
 * libFuzzer keeps the input as a crash), and a small deterministic hash and
 * PRNG to derive feeding patterns from the input itself.
 *
 * Each harness defines LLVMFuzzerTestOneInput() and links the project's
 * real sources; fuzz/driver.c runs a harness over files without libFuzzer
 * (t/fuzz_regress.t).
 */

#ifndef SMCP_FUZZ_H
#define SMCP_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);


#define fuzz_check(cond, what)                                                \
    do {                                                                      \
        if (!(cond)) {                                                        \
            fprintf(stderr, "fuzz: invariant broken at %s:%d: %s\n",          \
                    __FILE__, __LINE__, what);                                \
            abort();                                                          \
        }                                                                     \
    } while (0)


/* FNV-1a, 64 bits */
static inline uint64_t
fuzz_hash(uint64_t h, const void *p, size_t n)
{
    const unsigned char  *c = p;

    while (n--) {
        h ^= *c++;
        h *= 0x100000001b3ULL;
    }

    return h;
}

#define FUZZ_HASH_INIT  0xcbf29ce484222325ULL


/* xorshift64 */
static inline uint64_t
fuzz_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;

    return *s;
}

/* a check of the input as text: its bytes, not NUL-terminated */
typedef void (*fuzz_text_pt)(const char *s, size_t len);


/*
 * The entry of a harness whose checks all read the input as text: each
 * check of the NULL-terminated list gets it in a buffer of exactly its
 * length.
 */
static inline int
fuzz_text(const uint8_t *data, size_t size, const fuzz_text_pt *checks)
{
    char  *s;

    s = malloc(size ? size : 1);
    fuzz_check(s != NULL, "memory");
    memcpy(s, data, size);

    while (*checks) {
        (*checks++)(s, size);
    }

    free(s);

    return 0;
}

#endif /* SMCP_FUZZ_H */
