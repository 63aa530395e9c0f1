/*
 * The receive-pack command-list check (common/smcp_pktline.c): exact
 * cases, then every truncation and a few hundred thousand random
 * mutations of real command lists (built with ASan and UBSan by
 * t/pktline.t: a read past the buffer is a failure).  Prints TAP.
 *
 *   pktline [iterations]
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "smcp_pktline.h"
#include "tap.h"


#define REF      "refs/heads/opencode/run_0123456789abcdef01234567"
#define OLD      "1111111111111111111111111111111111111111"
#define NEW      "2222222222222222222222222222222222222222"
#define ZERO     "0000000000000000000000000000000000000000"
#define NEW256   "2222222222222222222222222222222222222222" \
                 "222222222222222222222222"
#define OLD256   "1111111111111111111111111111111111111111" \
                 "111111111111111111111111"


/* appends one pkt-line holding len bytes of s */
static size_t
pkt(unsigned char *dst, const char *s, size_t len)
{
    char  hdr[5];

    snprintf(hdr, sizeof(hdr), "%04zx", len + 4);
    memcpy(dst, hdr, 4);
    memcpy(dst + 4, s, len);

    return len + 4;
}


static size_t
pkts(unsigned char *dst, const char *s)
{
    return pkt(dst, s, strlen(s));
}


/* a flush-pkt */
static size_t
flush(unsigned char *dst)
{
    memcpy(dst, "0000", 4);

    return 4;
}


/* a command line with capabilities, as git sends the first one */
static size_t
first(unsigned char *dst, const char *old, const char *new, const char *ref)
{
    char  line[512];
    int   n;

    n = snprintf(line, sizeof(line), "%s %s %s%c report-status side-band-64k "
                 "object-format=sha1 agent=git/2.39.5\n", old, new, ref, 0);

    return pkt(dst, line, n);
}


static int
check(const unsigned char *buf, size_t len, unsigned *n, char *err,
    size_t errlen)
{
    return smcp_pkt_check_push(buf, len, REF, sizeof(REF) - 1, n, err,
                               errlen);
}


static void
test_cases(void)
{
    unsigned char  b[4096];
    char           err[256];
    size_t         n;
    unsigned       cmds;
    smcp_pkt_t     p;
    size_t         used;

    ok(smcp_pkt_read((const unsigned char *) "0000", 4, &p, &used) == SMCP_OK
       && p.type == SMCP_PKT_FLUSH && used == 4, "read: flush");
    ok(smcp_pkt_read((const unsigned char *) "0009hello", 9, &p, &used)
       == SMCP_OK && p.type == SMCP_PKT_DATA && p.len == 5
       && memcmp(p.data, "hello", 5) == 0 && used == 9, "read: data");
    ok(smcp_pkt_read((const unsigned char *) "0009hell", 8, &p, &used)
       == SMCP_PKT_MORE, "read: short data is MORE");
    ok(smcp_pkt_read((const unsigned char *) "000", 3, &p, &used)
       == SMCP_PKT_MORE, "read: short length is MORE");
    ok(smcp_pkt_read((const unsigned char *) "0003", 4, &p, &used)
       == SMCP_PKT_BAD, "read: length 3 is malformed");
    ok(smcp_pkt_read((const unsigned char *) "00g9", 4, &p, &used)
       == SMCP_PKT_BAD, "read: non-hex length is malformed");
    ok(smcp_pkt_read((const unsigned char *) "fff1", 4, &p, &used)
       == SMCP_PKT_BAD, "read: above 65520 is malformed");
    ok(smcp_pkt_read((const unsigned char *) "000A12345x", 10, &p, &used)
       == SMCP_OK && p.len == 6, "read: upper-case hex length");

    /* the run's branch: created, updated; with shallow lines; sha256 */
    n = first(b, ZERO, NEW, REF);
    n += flush(b + n);
    memcpy(b + n, "PACK....", 8);
    ok(check(b, n + 8, &cmds, err, sizeof(err)) == SMCP_OK && cmds == 1,
       "create the run's branch: accepted");

    n = pkts(b, "shallow " OLD "\n");
    n += first(b + n, OLD, NEW, REF);
    n += pkts(b + n, "shallow " NEW);
    n += flush(b + n);
    ok(check(b, n, &cmds, err, sizeof(err)) == SMCP_OK && cmds == 1,
       "update with shallow lines: accepted");

    n = first(b, OLD256, NEW256, REF);
    n += flush(b + n);
    ok(check(b, n, &cmds, err, sizeof(err)) == SMCP_OK,
       "sha256 ids: accepted");

    n = flush(b);
    ok(check(b, n, &cmds, err, sizeof(err)) == SMCP_OK && cmds == 0,
       "an empty list (git's probe): accepted");

    n = pkts(b, OLD " " NEW " " REF);
    n += flush(b + n);
    ok(check(b, n, &cmds, err, sizeof(err)) == SMCP_OK,
       "a command without capabilities or newline: accepted");

    /* refused */
    n = first(b, OLD, NEW, "refs/heads/main");
    n += flush(b + n);
    ok(check(b, n, &cmds, err, sizeof(err)) == SMCP_ERR
       && strstr(err, "refs/heads/main") && strstr(err, REF),
       "main: refused, named");

    n = first(b, OLD, NEW, REF);
    n += pkts(b + n, OLD " " NEW " refs/heads/other\n");
    n += flush(b + n);
    ok(check(b, n, &cmds, err, sizeof(err)) == SMCP_ERR,
       "the run's branch and another: refused");

    n = first(b, OLD, ZERO, REF);
    n += flush(b + n);
    ok(check(b, n, &cmds, err, sizeof(err)) == SMCP_ERR
       && strstr(err, "delet"), "delete of the run's branch: refused");

    n = first(b, OLD, NEW, REF "x");
    n += flush(b + n);
    ok(check(b, n, &cmds, err, sizeof(err)) == SMCP_ERR,
       "a longer ref: refused");

    n = first(b, OLD, NEW, "refs/heads/opencode/run_0123456789abcdef0123456");
    n += flush(b + n);
    ok(check(b, n, &cmds, err, sizeof(err)) == SMCP_ERR,
       "a prefix of the ref: refused");

    n = pkts(b, "push-cert\0 report-status");
    n += pkts(b + n, "certificate version 0.1\n");
    n += pkts(b + n, "push-cert-end\n");
    n += flush(b + n);
    ok(check(b, n, &cmds, err, sizeof(err)) == SMCP_ERR
       && strstr(err, "push-cert"), "a signed push: refused");

    n = first(b, OLD, NEW256, REF);
    n += flush(b + n);
    ok(check(b, n, &cmds, err, sizeof(err)) == SMCP_PKT_BAD,
       "ids of two lengths: refused");

    n = pkts(b, "shallow xyz");
    n += flush(b + n);
    ok(check(b, n, &cmds, err, sizeof(err)) == SMCP_PKT_BAD,
       "a shallow line without an id: refused");

    memcpy(b, "00040000", 8);
    ok(check(b, 8, &cmds, err, sizeof(err)) == SMCP_PKT_BAD,
       "an empty pkt-line: refused");

    memcpy(b, "00010000", 8);
    ok(check(b, 8, &cmds, err, sizeof(err)) == SMCP_PKT_BAD,
       "a delim packet: refused");

    n = first(b, OLD, NEW, "refs/heads/\001\"evil\n");
    n += flush(b + n);
    ok(check(b, n, &cmds, err, sizeof(err)) == SMCP_ERR
       && strstr(err, "?") && !strchr(err, '\001') && !strchr(err, '\n'),
       "an unprintable ref is quoted safely");

    n = first(b, OLD, NEW, REF);
    ok(check(b, n, &cmds, err, sizeof(err)) == SMCP_PKT_MORE,
       "no flush yet: MORE");

    ok(check((const unsigned char *) "GET / HTTP/1.1\r\n", 16, &cmds, err,
             sizeof(err)) == SMCP_PKT_BAD, "not pkt-lines: refused");
}


/* xorshift: the same mutations on every run */
static unsigned long  seed = 88172645463325252UL;

static unsigned long
rnd(void)
{
    seed ^= seed << 13;
    seed ^= seed >> 7;
    seed ^= seed << 17;

    return seed;
}


static void
test_fuzz(long iterations)
{
    unsigned char   base[2048], *m;
    char            err[256];
    size_t          n, len, i;
    unsigned        cmds;
    long            it, accepted, bad;
    int             rc;

    n = pkts(base, "shallow " OLD "\n");
    n += first(base + n, OLD, NEW, REF);
    n += pkts(base + n, "shallow " NEW);
    n += flush(base + n);

    /* every truncation: never OK, never past the end (ASan) */
    bad = 0;
    for (len = 0; len < n; len++) {
        m = malloc(len ? len : 1);
        memcpy(m, base, len);
        if (check(m, len, &cmds, err, sizeof(err)) == SMCP_OK) {
            bad++;
        }
        free(m);
    }

    ok(bad == 0, "no truncation of a command list is accepted");

    accepted = 0;
    bad = 0;

    for (it = 0; it < iterations; it++) {
        len = n;
        m = malloc(len);
        memcpy(m, base, len);

        for (i = 0; i < 1 + rnd() % 4; i++) {
            switch (rnd() % 4) {
            case 0:
                m[rnd() % len] = (unsigned char) rnd();
                break;
            case 1:
                m[rnd() % len] = "0123456789abcdef\n\0 "[rnd() % 19];
                break;
            case 2:
                len = 1 + rnd() % len;
                break;
            default:
                m[rnd() % len] ^= 1 << (rnd() % 8);
                break;
            }
        }

        err[0] = '\0';
        rc = check(m, len, &cmds, err, sizeof(err));

        if (rc == SMCP_OK) {
            accepted++;

            /* what is accepted names only the run's branch */
            if (memmem(m, len, REF, sizeof(REF) - 1) == NULL && cmds) {
                bad++;
            }

        } else if ((rc == SMCP_ERR || rc == SMCP_PKT_BAD)
                   && err[0] == '\0')
        {
            bad++;
        }

        free(m);
    }

    printf("# fuzz: %ld mutations, %ld accepted\n", iterations, accepted);
    ok(bad == 0, "mutations: refused with a reason, or accepted for the "
       "run's branch only");
}


int
main(int argc, char **argv)
{
    long  iterations;

    iterations = argc > 1 ? atol(argv[1]) : 200000;

    test_cases();
    test_fuzz(iterations);

    return tap_done();
}
