/*
 * Where Redis is (smcp_redis_addr_parse(), common/smcp_redis_addr.c: an
 * operator's setting) and what a Redis Sentinel answers
 * (smcp_sentinel_master_addr(): the network's bytes, which a worker
 * connects to).
 *
 * The input is split at its first NUL: the whole input is also parsed as
 * a setting; the two halves are the sentinel's address and port strings.
 * Checked: an accepted setting's parts are NUL-terminated and within their
 * bounds, a sentinel setting names 1 to SMCP_SENTINELS_MAX sentinels and a
 * master of name bytes, every port is 1-65535; a refused one says why in
 * printable text; an accepted answer is an IP address (as inet_pton reads
 * it, no name) and a port 1-65535.
 */

#include <string.h>

#include <arpa/inet.h>

#include "smcp_redis_addr.h"
#include "smcp_validate.h"
#include "fuzz.h"


static void
fuzz_hostport(const smcp_hostport_t *hp)
{
    size_t  n;

    n = strnlen(hp->host, sizeof(hp->host));
    fuzz_check(n > 0 && n < sizeof(hp->host), "a host, NUL-terminated");
    fuzz_check(hp->port >= 1 && hp->port <= 65535, "a port 1-65535");
}


static void
fuzz_setting(const uint8_t *data, size_t size)
{
    int                i;
    char               err[200];
    size_t             n;
    smcp_redis_addr_t  a;

    err[0] = '\0';

    if (smcp_redis_addr_parse((const char *) data, size, &a, err,
                              sizeof(err))
        != 0)
    {
        n = strnlen(err, sizeof(err));
        fuzz_check(n > 0 && n < sizeof(err), "a refusal says why");

        for (i = 0; i < (int) n; i++) {
            fuzz_check(err[i] >= 0x20 && err[i] <= 0x7e,
                       "a refusal is printable");
        }

        return;
    }

    fuzz_check(memchr(data, '\0', size) == NULL, "no NUL in a setting");

    switch (a.kind) {

    case SMCP_REDIS_TCP:
        fuzz_hostport(&a.addr);
        break;

    case SMCP_REDIS_UNIX:
        n = strnlen(a.path, sizeof(a.path));
        fuzz_check(n > 0 && n < sizeof(a.path), "a path, NUL-terminated");
        break;

    case SMCP_REDIS_SENTINEL:
        fuzz_check(a.nsentinels >= 1 && a.nsentinels <= SMCP_SENTINELS_MAX,
                   "1 to SMCP_SENTINELS_MAX sentinels");

        for (i = 0; i < a.nsentinels; i++) {
            fuzz_hostport(&a.sentinels[i]);
        }

        n = strnlen(a.master, sizeof(a.master));
        fuzz_check(n > 0 && n <= SMCP_SENTINEL_NAME_MAX, "a master's name");

        while (n--) {
            fuzz_check(smcp_name_byte((unsigned char) a.master[n]),
                       "a master's name of name bytes");
        }

        break;

    default:
        fuzz_check(0, "a known kind");
    }
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t    *nul;
    size_t            iplen;
    smcp_hostport_t   hp;
    unsigned char     buf[sizeof(struct in6_addr)];

    fuzz_setting(data, size);

    nul = memchr(data, '\0', size);
    iplen = nul ? (size_t) (nul - data) : size;

    if (smcp_sentinel_master_addr((const char *) data, iplen,
                                  nul ? (const char *) nul + 1 : "",
                                  nul ? size - iplen - 1 : 0, &hp)
        == 0)
    {
        fuzz_check(iplen == strlen(hp.host)
                   && memcmp(hp.host, data, iplen) == 0,
                   "the address as the sentinel sent it");
        fuzz_check(inet_pton(AF_INET, hp.host, buf) == 1
                   || inet_pton(AF_INET6, hp.host, buf) == 1,
                   "an IP address, no name");
        fuzz_check(hp.port >= 1 && hp.port <= 65535, "a port 1-65535");
    }

    return 0;
}
