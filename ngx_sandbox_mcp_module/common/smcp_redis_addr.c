/*
 * Where Redis is: the setting's three forms, and the Sentinel answers a
 * client checks (smcp_redis_addr.h).
 */

#include <stdio.h>
#include <string.h>

#include <arpa/inet.h>

#include "smcp_redis_addr.h"
#include "smcp_validate.h"
#include "smcp_util.h"


#define SMCP_SENTINEL_SCHEME  "sentinel://"


/* how much of s an error may quote: printable ASCII, at most 100 */
static int
smcp_printable_len(const char *s, size_t len)
{
    size_t  i;

    for (i = 0; i < len && i < 100; i++) {
        if (s[i] < 0x20 || s[i] > 0x7e) {
            break;
        }
    }

    return (int) i;
}


/* a port: 1-65535, digits only */
static int
smcp_port_parse(const char *s, size_t len)
{
    size_t  i;
    long    port;

    if (len == 0 || len > 5) {
        return -1;
    }

    port = 0;

    for (i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9') {
            return -1;
        }

        port = port * 10 + (s[i] - '0');
    }

    return (port >= 1 && port <= 65535) ? (int) port : -1;
}


/* a host name or an address: printable, no blank, no separator of the
 * setting's */
static int
smcp_host_valid(const char *s, size_t len)
{
    size_t  i;

    if (len == 0 || len > SMCP_REDIS_HOST_MAX) {
        return 0;
    }

    for (i = 0; i < len; i++) {
        if (!smcp_name_byte((unsigned char) s[i]) && s[i] != ':') {
            return 0;
        }
    }

    return 1;
}


int
smcp_hostport_parse(const char *s, size_t len, int default_port,
    smcp_hostport_t *hp)
{
    const char  *host, *colon, *end;
    size_t       hlen;
    int          port;

    end = s + len;
    port = default_port;

    if (len && s[0] == '[') {
        /* [IPv6]:port */
        colon = memchr(s, ']', len);
        if (colon == NULL) {
            return SMCP_ERR;
        }

        host = s + 1;
        hlen = colon - host;

        if (colon + 1 < end) {
            if (colon[1] != ':') {
                return SMCP_ERR;
            }

            port = smcp_port_parse(colon + 2, end - colon - 2);
        }

    } else {
        host = s;
        colon = NULL;

        for (end = s + len; end > s; end--) {
            if (end[-1] == ':') {
                colon = end - 1;
                break;
            }
        }

        if (colon && memchr(s, ':', colon - s)) {
            /* two colons: an IPv6 address wants its brackets */
            return SMCP_ERR;
        }

        hlen = colon ? (size_t) (colon - s) : len;

        if (colon) {
            port = smcp_port_parse(colon + 1, s + len - colon - 1);
        }
    }

    if (port < 1 || !smcp_host_valid(host, hlen)) {
        return SMCP_ERR;
    }

    memcpy(hp->host, host, hlen);
    hp->host[hlen] = '\0';
    hp->port = port;

    return SMCP_OK;
}


static int
smcp_redis_sentinel_parse(const char *s, size_t len, smcp_redis_addr_t *a,
    char *err, size_t errlen)
{
    const char  *p, *end, *slash, *comma;
    size_t       i, n;

    end = s + len;
    slash = memchr(s, '/', len);

    if (slash == NULL || slash == s) {
        snprintf(err, errlen, "sentinel://: expected "
                 "sentinel://HOST:PORT[,HOST:PORT...]/MASTER");
        return SMCP_ERR;
    }

    n = end - slash - 1;

    if (n == 0 || n > SMCP_SENTINEL_NAME_MAX) {
        snprintf(err, errlen, "sentinel://: the master's name must be 1 "
                 "to %d bytes", SMCP_SENTINEL_NAME_MAX);
        return SMCP_ERR;
    }

    for (i = 0; i < n; i++) {
        if (!smcp_name_byte((unsigned char) slash[1 + i])) {
            snprintf(err, errlen, "sentinel://: the master's name may hold "
                     "only letters, digits, '.', '_' and '-'");
            return SMCP_ERR;
        }
    }

    memcpy(a->master, slash + 1, n);
    a->master[n] = '\0';

    for (p = s; /* void */; p = comma + 1) {
        comma = memchr(p, ',', slash - p);
        if (comma == NULL) {
            comma = slash;
        }

        if (a->nsentinels == SMCP_SENTINELS_MAX) {
            snprintf(err, errlen, "sentinel://: at most %d sentinels",
                     SMCP_SENTINELS_MAX);
            return SMCP_ERR;
        }

        if (smcp_hostport_parse(p, comma - p, SMCP_SENTINEL_PORT,
                                &a->sentinels[a->nsentinels])
            != SMCP_OK)
        {
            snprintf(err, errlen, "sentinel://: a bad sentinel address "
                     "\"%.*s\" (expected HOST:PORT)",
                     smcp_printable_len(p, comma - p), p);
            return SMCP_ERR;
        }

        a->nsentinels++;

        if (comma == slash) {
            break;
        }
    }

    return SMCP_OK;
}


int
smcp_redis_addr_parse(const char *s, size_t len, smcp_redis_addr_t *a,
    char *err, size_t errlen)
{
    size_t  n;

    memset(a, 0, sizeof(smcp_redis_addr_t));

    if (len == 0 || len > SMCP_REDIS_ADDR_MAX || memchr(s, '\0', len)) {
        snprintf(err, errlen, "an empty, too long or bad Redis address");
        return SMCP_ERR;
    }

    n = sizeof(SMCP_SENTINEL_SCHEME) - 1;

    if (len > n && strncmp(s, SMCP_SENTINEL_SCHEME, n) == 0) {
        a->kind = SMCP_REDIS_SENTINEL;
        return smcp_redis_sentinel_parse(s + n, len - n, a, err, errlen);
    }

    if (len >= 5 && strncmp(s, "unix:", 5) == 0) {
        if (len == 5 || len - 5 > SMCP_REDIS_PATH_MAX) {
            snprintf(err, errlen, "unix: a bad socket path");
            return SMCP_ERR;
        }

        a->kind = SMCP_REDIS_UNIX;
        memcpy(a->path, s + 5, len - 5);
        a->path[len - 5] = '\0';
        return SMCP_OK;
    }

    a->kind = SMCP_REDIS_TCP;

    if (smcp_hostport_parse(s, len, 6379, &a->addr) != SMCP_OK) {
        snprintf(err, errlen, "a bad Redis address \"%.*s\" (expected "
                 "HOST:PORT, unix:/PATH or sentinel://HOST:PORT,.../MASTER)",
                 smcp_printable_len(s, len), s);
        return SMCP_ERR;
    }

    return SMCP_OK;
}


int
smcp_sentinel_master_addr(const char *ip, size_t iplen, const char *port,
    size_t portlen, smcp_hostport_t *hp)
{
    int                   p;
    unsigned char         buf[sizeof(struct in6_addr)];
    static unsigned char  zero[sizeof(struct in6_addr)];

    if (iplen == 0 || iplen >= INET6_ADDRSTRLEN
        || memchr(ip, '\0', iplen))
    {
        return SMCP_ERR;
    }

    memcpy(hp->host, ip, iplen);
    hp->host[iplen] = '\0';

    /* 0.0.0.0 and :: are nobody's address */
    if (inet_pton(AF_INET, hp->host, buf) == 1) {
        if (memcmp(buf, zero, 4) == 0) {
            return SMCP_ERR;
        }

    } else if (inet_pton(AF_INET6, hp->host, buf) == 1) {
        if (memcmp(buf, zero, 16) == 0) {
            return SMCP_ERR;
        }

    } else {
        return SMCP_ERR;
    }

    p = smcp_port_parse(port, portlen);
    if (p < 0) {
        return SMCP_ERR;
    }

    hp->port = p;

    return SMCP_OK;
}


int
smcp_redis_role_master(const char *role, size_t len)
{
    return len == 6 && memcmp(role, "master", 6) == 0;
}
