/*
 * A notify URL (smcp_url_parse(), common/smcp_url.c: what a tenant gives
 * as notify.url, what the runner reads back from Redis) and the addresses
 * no notification goes to (smcp_addr_private()).
 *
 * The input is the URL; its first 4 and 16 bytes are also an IPv4 and an
 * IPv6 address.  Checked: an accepted URL is at most SMCP_URL_MAX bytes,
 * its parts lie within it and put together again (scheme "://" authority
 * path) are it, with no byte outside printable ASCII or of "<>\^`{|}#,
 * no "@" in its authority, a host within the authority (a bracketed one
 * an IPv6 address as inet_pton() reads it, in neither of two forms nginx
 * refuses; else lower-case letters, digits, "-" and "." without an empty
 * label), a port 1-65535 (80 or 443 unless written), an address flag as
 * nginx reads dotted quads, a path with no "." or ".." segment and no
 * escaped dot, slash or backslash before the query; its origin is
 * scheme://authority/, a prefix of it, and one that does not fit is
 * refused.  Every input a simpler reading must refuse is refused, saying
 * why in printable text.  Each address is private exactly when a table of
 * prefixes written here says so.
 */

#include <string.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "smcp_url.h"
#include "smcp_util.h"
#include "fuzz.h"


/* the private prefixes: an address's first bits */
typedef struct {
    unsigned char  prefix[16];
    unsigned       bits;
} fuzz_net_t;

static const fuzz_net_t  fuzz_v4[] = {
    { { 0 }, 8 },                           /* 0/8 */
    { { 10 }, 8 },
    { { 127 }, 8 },
    { { 100, 64 }, 10 },
    { { 169, 254 }, 16 },
    { { 172, 16 }, 12 },
    { { 192, 0, 0 }, 24 },
    { { 192, 168 }, 16 },
    { { 198, 18 }, 15 },
    { { 224 }, 3 },                         /* multicast, reserved */
};

static const fuzz_net_t  fuzz_v6[] = {
    { { 0 }, 128 },                         /* :: */
    { { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1 }, 128 },
    { { 0xfc }, 7 },
    { { 0xfe, 0x80 }, 10 },
    { { 0xff }, 8 },
    { { 0x00, 0x64, 0xff, 0x9b }, 32 },
    { { 0x20, 0x01, 0x0d, 0xb8 }, 32 },
};


static int
fuzz_in_net(const unsigned char *a, const fuzz_net_t *net, size_t n)
{
    size_t    i;
    unsigned  b, mask;

    for (i = 0; i < n; i++) {
        for (b = 0; b < net[i].bits; b++) {
            mask = 0x80 >> (b % 8);

            if ((a[b / 8] & mask) != (net[i].prefix[b / 8] & mask)) {
                break;
            }
        }

        if (b == net[i].bits) {
            return 1;
        }
    }

    return 0;
}


static void
fuzz_private(const uint8_t *data, size_t size)
{
    int                          v4;
    unsigned char                a[16];
    struct sockaddr_in           sin;
    struct sockaddr_in6          sin6;
    static const unsigned char   mapped[12] = {
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff
    };

    memset(a, 0, sizeof(a));
    memcpy(a, data, size < 16 ? size : 16);

    memset(&sin, 0, sizeof(sin));
    sin.sin_family = AF_INET;
    memcpy(&sin.sin_addr, a, 4);

    fuzz_check(smcp_addr_private((struct sockaddr *) &sin)
               == fuzz_in_net(a, fuzz_v4, sizeof(fuzz_v4) / sizeof(fuzz_v4[0])),
               "an IPv4 address private as the table says");

    memset(&sin6, 0, sizeof(sin6));
    sin6.sin6_family = AF_INET6;
    memcpy(&sin6.sin6_addr, a, 16);

    /* ::ffff:a.b.c.d, and ::a.b.c.d but ::0.0.0.1 and :: */
    v4 = memcmp(a, mapped, 12) == 0
         || (memcmp(a, mapped, 10) == 0 && a[10] == 0 && a[11] == 0
             && (a[12] | a[13] | a[14] || a[15] > 1));

    fuzz_check(smcp_addr_private((struct sockaddr *) &sin6)
               == (v4 ? fuzz_in_net(a + 12, fuzz_v4,
                                    sizeof(fuzz_v4) / sizeof(fuzz_v4[0]))
                      : fuzz_in_net(a, fuzz_v6,
                                    sizeof(fuzz_v6) / sizeof(fuzz_v6[0]))),
               "an IPv6 address private as the table says");

    sin.sin_family = AF_UNIX;
    fuzz_check(smcp_addr_private((struct sockaddr *) &sin) == 1,
               "another family: private");
}


static int
fuzz_within(const smcp_url_part_t *part, const char *s, size_t len)
{
    return part->data >= s && part->len <= len
           && (size_t) (part->data - s) <= len - part->len;
}


/* nginx's dotted quad: four decimal numbers <= 255, not 255.255.255.255 */
static int
fuzz_quad(const char *s, size_t len)
{
    char           text[16];
    unsigned char  a[4];

    if (len >= sizeof(text) || strspn(s, "0123456789.") < len) {
        return -1;      /* no opinion: not digits and dots */
    }

    memcpy(text, s, len);
    text[len] = '\0';

    /* inet_pton() refuses leading zeros, nginx does not: no opinion */
    if (inet_pton(AF_INET, text, a) != 1) {
        return -1;
    }

    return strcmp(text, "255.255.255.255") != 0;
}


static void
fuzz_accepted(const char *s, size_t len, const smcp_url_t *u)
{
    int            quad;
    char           text[INET6_ADDRSTRLEN], origin[SMCP_URL_MAX + 2];
    size_t         i, n, port;
    const char    *p, *last, *seg, *host_end;
    unsigned char  a6[16];

    fuzz_check(len >= 1 && len <= SMCP_URL_MAX, "1 to SMCP_URL_MAX bytes");

    for (i = 0; i < len; i++) {
        fuzz_check((unsigned char) s[i] > 0x20
                   && (unsigned char) s[i] < 0x7f
                   && strchr("\"<>\\^`{|}#", s[i]) == NULL,
                   "no forbidden byte in an accepted URL");
    }

    fuzz_check(fuzz_within(&u->scheme, s, len)
               && fuzz_within(&u->authority, s, len)
               && fuzz_within(&u->host, s, len)
               && fuzz_within(&u->path, s, len), "the parts within the URL");

    /* scheme "://" authority path == the URL */
    fuzz_check(u->scheme.data == s
               && u->scheme.len == (u->https ? 5 : 4)
               && memcmp(s, u->https ? "https" : "http", u->scheme.len) == 0,
               "the scheme: http or https, as the flag says");
    fuzz_check(memcmp(s + u->scheme.len, "://", 3) == 0
               && u->authority.data == s + u->scheme.len + 3
               && u->path.data == u->authority.data + u->authority.len
               && u->path.data + u->path.len == s + len,
               "scheme :// authority path put together is the URL");

    fuzz_check(memchr(u->authority.data, '@', u->authority.len) == NULL,
               "no user info");

    /* the host, within the authority, then [":" port] */
    fuzz_check(u->host.len > 0 && u->host.data >= u->authority.data
               && u->host.data + u->host.len
                  <= u->authority.data + u->authority.len,
               "a host within the authority");

    if (u->authority.data[0] == '[') {
        host_end = u->host.data + u->host.len + 1;
        fuzz_check(u->host.data == u->authority.data + 1
                   && host_end[-1] == ']' && u->literal,
                   "a bracketed host: an address");
        fuzz_check(u->host.len < sizeof(text), "an IPv6 address's length");
        memcpy(text, u->host.data, u->host.len);
        text[u->host.len] = '\0';
        fuzz_check(inet_pton(AF_INET6, text, a6) == 1,
                   "an IPv6 address as inet_pton reads it");
        fuzz_check(u->host.len < 16
                   || strcmp(text + u->host.len - 16, ":255.255.255.255"),
                   "no IPv4 tail nginx refuses");

        for (n = 0, p = text; *p; p++) {
            n += (*p == ':');
        }

        fuzz_check(n < 8 || text[u->host.len - 1] != ':',
                   "no \"::\" after seven groups (nginx refuses it)");

    } else {
        host_end = u->host.data + u->host.len;
        fuzz_check(u->host.data == u->authority.data && u->host.len <= 253,
                   "a name of at most 253 bytes");

        for (p = u->host.data; p < host_end; p++) {
            fuzz_check((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9')
                       || *p == '-' || *p == '.', "a name's bytes");
            fuzz_check(*p != '.' || (p > u->host.data && p + 1 < host_end
                                     && p[1] != '.'),
                       "no empty label");
        }

        quad = fuzz_quad(u->host.data, u->host.len);
        fuzz_check(quad < 0 || quad == (int) u->literal,
                   "an IPv4 address as nginx reads it");
        if (u->literal) {
            for (n = 0, p = u->host.data; p < host_end; p++) {
                fuzz_check((*p >= '0' && *p <= '9') || *p == '.',
                           "an address flag: digits and dots only");
                n += (*p == '.');
            }

            fuzz_check(n == 3, "an address flag: three dots");
        }
    }

    last = u->authority.data + u->authority.len;

    if (host_end == last) {
        fuzz_check(u->port == (u->https ? 443u : 80u), "the scheme's port");

    } else {
        fuzz_check(*host_end == ':' && host_end + 1 < last, "\":\" port");

        for (port = 0, p = host_end + 1; p < last; p++) {
            fuzz_check(*p >= '0' && *p <= '9', "a port of digits");
            port = port * 10 + (*p - '0');

            if (port > 65535) {
                break;
            }
        }

        fuzz_check(port == u->port, "the port as written");
    }

    fuzz_check(u->port >= 1 && u->port <= 65535, "a port 1-65535");

    /* the path: "/", no dot segment or escape before the query */
    fuzz_check(u->path.len >= 1 && u->path.data[0] == '/', "a path");

    last = memchr(u->path.data, '?', u->path.len);
    if (last == NULL) {
        last = u->path.data + u->path.len;
    }

    for (seg = p = u->path.data + 1; p <= last; p++) {
        if (p == last || *p == '/') {
            fuzz_check(!(p - seg == 1 && seg[0] == '.')
                       && !(p - seg == 2 && seg[0] == '.' && seg[1] == '.'),
                       "no . or .. segment");
            seg = p + 1;
            continue;
        }

        if (*p == '%' && last - p >= 3) {
            memcpy(text, p + 1, 2);
            text[0] |= 0x20;
            text[1] |= 0x20;
            fuzz_check(memcmp(text, "2e", 2) != 0
                       && memcmp(text, "2f", 2) != 0
                       && memcmp(text, "5c", 2) != 0,
                       "no escaped dot, slash or backslash");
        }
    }

    /* the origin: scheme://authority/, a prefix of the URL */
    fuzz_check(smcp_url_origin(u, origin, sizeof(origin)) == SMCP_OK,
               "an origin");
    n = strlen(origin);
    fuzz_check(n == u->scheme.len + 3 + u->authority.len + 1
               && origin[n - 1] == '/' && strncmp(origin, s, n) == 0
               && strchr(origin, '@') == NULL,
               "the origin is scheme://authority/, a prefix, no @");

    fuzz_check(smcp_url_origin(u, origin, n) == SMCP_ERR
               && strlen(origin) == n - 1,
               "an origin that does not fit: refused, cut");
}


/* what a simpler reading refuses: the length, a byte, the scheme, user
 * info or a capital letter in a name before the path, no path */
static int
fuzz_must_refuse(const char *s, size_t len)
{
    size_t  i, n;

    if (len == 0 || len > SMCP_URL_MAX) {
        return 1;
    }

    for (i = 0; i < len; i++) {
        if ((unsigned char) s[i] <= 0x20 || (unsigned char) s[i] >= 0x7f
            || strchr("\"<>\\^`{|}#", s[i]) != NULL)
        {
            return 1;
        }
    }

    if (len > 7 && memcmp(s, "http://", 7) == 0) {
        n = 7;

    } else if (len > 8 && memcmp(s, "https://", 8) == 0) {
        n = 8;

    } else {
        return 1;
    }

    for (i = n; i < len && s[i] != '/' && s[i] != '?'; i++) {
        if (s[i] == '@' || (s[n] != '[' && s[i] >= 'A' && s[i] <= 'Z')) {
            return 1;
        }
    }

    return i == len || s[i] != '/';
}


static void
fuzz_url(const char *s, size_t len)
{
    smcp_url_t   u;
    const char  *why;

    why = smcp_url_parse(s, len, &u);

    if (why == NULL) {
        fuzz_check(!fuzz_must_refuse(s, len), "a bad URL refused");
        fuzz_accepted(s, len, &u);
        return;
    }

    fuzz_check(*why != '\0', "a refusal says why");

    for (/* void */; *why; why++) {
        fuzz_check(*why >= 0x20 && *why < 0x7f, "a printable reason");
    }
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const fuzz_text_pt  checks[] = { fuzz_url, NULL };

    fuzz_private(data, size);

    return fuzz_text(data, size, checks);
}
