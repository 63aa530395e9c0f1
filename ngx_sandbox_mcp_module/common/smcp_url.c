/*
 * A notify URL, parsed and checked; the addresses no notification goes to
 * (smcp_url.h).
 */

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "smcp_url.h"
#include "smcp_util.h"


/*
 * An IPv4 address as nginx reads one (ngx_inet_addr(), which its resolver
 * and proxy_pass use): decimal numbers of at most 255 (leading zeros
 * taken) between three dots.  inet_pton() would refuse "010.0.0.1", which
 * nginx takes for 10.0.0.1, and take 255.255.255.255, which is
 * INADDR_NONE to nginx, hence a name: the flag follows nginx, so that
 * what the egress checks as an address is what it reaches.
 */
static int
smcp_url_inet4(const char *s, size_t len)
{
    size_t    i, dots;
    uint32_t  addr, octet;

    addr = 0;
    octet = 0;
    dots = 0;

    for (i = 0; i < len; i++) {
        if (s[i] >= '0' && s[i] <= '9') {
            octet = octet * 10 + (s[i] - '0');

            if (octet > 255) {
                return 0;
            }

            continue;
        }

        if (s[i] == '.') {
            addr = (addr << 8) + octet;
            octet = 0;
            dots++;
            continue;
        }

        return 0;
    }

    return dots == 3 && ((addr << 8) + octet) != 0xffffffff;
}


/*
 * An IPv6 address inet_pton() took is one nginx takes too
 * (ngx_inet6_addr(), with which proxy_pass reads the URL as written): not
 * seven groups and a "::" after them, not an IPv4 tail of 255.255.255.255
 * (INADDR_NONE to nginx).  nginx takes some that inet_pton() does not
 * ("::ffff:010.0.0.1"): those stay refused.
 */
static int
smcp_url_inet6_nginx(const char *s, size_t len)
{
    size_t  i, colons;

    for (colons = 0, i = 0; i < len; i++) {
        colons += (s[i] == ':');
    }

    if (colons == 8 && s[len - 1] == ':' && s[len - 2] == ':') {
        return 0;
    }

    return len < 16 || memcmp(s + len - 16, ":255.255.255.255", 16) != 0;
}


/* the host of u->authority: a name, an IPv4 or a bracketed IPv6 address,
 * and the port after it */
static const char *
smcp_url_host(smcp_url_t *u)
{
    char            text[INET6_ADDRSTRLEN];
    unsigned        port;
    const char     *p, *last, *end, *q;
    unsigned char   a6[sizeof(struct in6_addr)];

    p = u->authority.data;
    last = p + u->authority.len;

    if (p < last && *p == '[') {
        end = memchr(p, ']', last - p);
        if (end == NULL) {
            return "has an IPv6 address without its \"]\"";
        }

        u->host.data = p + 1;
        u->host.len = end - p - 1;
        u->literal = 1;
        p = end + 1;

        if (u->host.len >= sizeof(text)) {
            return "has a bad IPv6 address";
        }

        memcpy(text, u->host.data, u->host.len);
        text[u->host.len] = '\0';

        if (inet_pton(AF_INET6, text, a6) != 1
            || !smcp_url_inet6_nginx(text, u->host.len))
        {
            return "has a bad IPv6 address";
        }

    } else {
        for (end = p; end < last && *end != ':'; end++) {
            if (!((*end >= 'a' && *end <= 'z') || (*end >= '0' && *end <= '9')
                  || *end == '-' || *end == '.'))
            {
                return "needs a host of lower-case letters, digits, \"-\" "
                       "and \".\"";
            }
        }

        u->host.data = p;
        u->host.len = end - p;

        if (u->host.len == 0 || u->host.len > 253 || *p == '.'
            || end[-1] == '.')
        {
            return "needs a host name";
        }

        for (q = p; q + 1 < end; q++) {
            if (q[0] == '.' && q[1] == '.') {
                return "needs a host name";
            }
        }

        u->literal = smcp_url_inet4(p, u->host.len);
        p = end;
    }

    if (p == last) {
        return NULL;
    }

    if (*p != ':' || p + 1 == last) {
        return "has a bad port";
    }

    port = 0;

    for (p++; p < last; p++) {
        if (*p < '0' || *p > '9') {
            return "has a bad port";
        }

        port = port * 10 + (*p - '0');

        if (port > 65535) {
            return "has a bad port";
        }
    }

    if (port == 0) {
        return "has a bad port";
    }

    u->port = port;

    return NULL;
}


/* no "." or ".." segment, no %2e, %2f or %5c before the query */
static const char *
smcp_url_path(const smcp_url_part_t *path)
{
    const char  *p, *last, *seg;

    last = memchr(path->data, '?', path->len);
    if (last == NULL) {
        last = path->data + path->len;
    }

    seg = path->data + 1;

    for (p = path->data + 1; p <= last; p++) {
        if (p == last || *p == '/') {
            if ((p - seg == 1 && seg[0] == '.')
                || (p - seg == 2 && seg[0] == '.' && seg[1] == '.'))
            {
                return "has a \".\" or \"..\" segment in its path";
            }

            seg = p + 1;
            continue;
        }

        if (*p == '%' && last - p >= 3
            && ((p[1] == '2' && (p[2] == 'e' || p[2] == 'E'
                                 || p[2] == 'f' || p[2] == 'F'))
                || (p[1] == '5' && (p[2] == 'c' || p[2] == 'C'))))
        {
            return "has an escaped dot, slash or backslash in its path";
        }
    }

    return NULL;
}


const char *
smcp_url_parse(const char *s, size_t len, smcp_url_t *u)
{
    const char     *p, *last, *start, *why;
    unsigned char   c;

    memset(u, 0, sizeof(smcp_url_t));

    if (len == 0 || len > SMCP_URL_MAX) {
        return "must be a URL of 1 to 2048 bytes";
    }

    last = s + len;

    for (p = s; p < last; p++) {
        c = (unsigned char) *p;

        if (c <= 0x20 || c >= 0x7f || strchr("\"<>\\^`{|}#", c) != NULL) {
            return "must be a plain URL: no space, control character, "
                   "fragment or any of \"<>\\^`{|}";
        }
    }

    if (len > 7 && strncmp(s, "http://", 7) == 0) {
        u->scheme.len = 4;
        u->port = 80;

    } else if (len > 8 && strncmp(s, "https://", 8) == 0) {
        u->scheme.len = 5;
        u->port = 443;
        u->https = 1;

    } else {
        return "must start with http:// or https://";
    }

    u->scheme.data = s;
    start = s + u->scheme.len + 3;

    for (p = start; p < last && *p != '/' && *p != '?'; p++) {
        if (*p == '@') {
            return "must not carry a user name or password";
        }
    }

    if (p == last || *p != '/') {
        return "needs a path after its host (at least \"/\")";
    }

    u->authority.data = start;
    u->authority.len = p - start;
    u->path.data = p;
    u->path.len = last - p;

    why = smcp_url_host(u);

    return why ? why : smcp_url_path(&u->path);
}


int
smcp_url_origin(const smcp_url_t *u, char *buf, size_t size)
{
    int  n;

    n = snprintf(buf, size, "%.*s://%.*s/", (int) u->scheme.len,
                 u->scheme.data, (int) u->authority.len, u->authority.data);

    return (n >= 0 && (size_t) n < size) ? SMCP_OK : SMCP_ERR;
}


int
smcp_addr_private(const struct sockaddr *sa)
{
    uint32_t                    a;
    const unsigned char        *b;
    const struct sockaddr_in6  *sin6;

    switch (sa->sa_family) {

    case AF_INET6:
        sin6 = (const struct sockaddr_in6 *) sa;
        b = sin6->sin6_addr.s6_addr;

        if (IN6_IS_ADDR_V4MAPPED(&sin6->sin6_addr)
            || IN6_IS_ADDR_V4COMPAT(&sin6->sin6_addr))
        {
            a = (uint32_t) b[12] << 24 | b[13] << 16 | b[14] << 8 | b[15];
            break;
        }

        /* unspecified, loopback, unique local, link-local, multicast,
         * NAT64's well-known prefix, documentation */
        return IN6_IS_ADDR_UNSPECIFIED(&sin6->sin6_addr)
               || IN6_IS_ADDR_LOOPBACK(&sin6->sin6_addr)
               || (b[0] & 0xfe) == 0xfc
               || (b[0] == 0xfe && (b[1] & 0xc0) == 0x80)
               || b[0] == 0xff
               || (b[0] == 0x00 && b[1] == 0x64 && b[2] == 0xff
                   && b[3] == 0x9b)
               || (b[0] == 0x20 && b[1] == 0x01 && b[2] == 0x0d
                   && b[3] == 0xb8);

    case AF_INET:
        a = ntohl(((const struct sockaddr_in *) sa)->sin_addr.s_addr);
        break;

    default:
        return 1;
    }

    return (a >> 24) == 0                       /* 0.0.0.0/8 */
           || (a >> 24) == 10                   /* 10.0.0.0/8 */
           || (a >> 24) == 127                  /* 127.0.0.0/8 */
           || (a & 0xffc00000) == 0x64400000    /* 100.64.0.0/10 */
           || (a & 0xffff0000) == 0xa9fe0000    /* 169.254.0.0/16 */
           || (a & 0xfff00000) == 0xac100000    /* 172.16.0.0/12 */
           || (a & 0xffffff00) == 0xc0000000    /* 192.0.0.0/24 */
           || (a & 0xffff0000) == 0xc0a80000    /* 192.168.0.0/16 */
           || (a & 0xfffe0000) == 0xc6120000    /* 198.18.0.0/15 */
           || (a >> 28) >= 0xe;                 /* multicast, reserved */
}
