/*
 * Where a completion notification may go: a notify URL (opencode_run_task's
 * notify.url, a sandbox_mcp_notify_allow prefix, sandbox_mcp_tenant_notify's
 * URL, a run's notify_url as the runner reads it back), parsed and checked
 * once for the module and the runner, and the addresses no notification
 * goes to unless the operator names them.  Plain C, no nginx, no I/O:
 * fuzzed on its own (fuzz/url.c).
 *
 * A URL is plain: http or https, a host in lower case (a name, or an
 * address: IPv4 dotted, IPv6 in brackets), no user info, a path, no
 * fragment, no space or control character, no "." or ".." segment and no
 * escaped dot, slash or backslash before the query (a server that folds
 * them would reach past its prefix).  A prefix is such a URL too, so its
 * host ends where its path begins: "https://ntfy.sh/" does not match
 * "https://ntfy.sh.example/".
 */

#ifndef SMCP_URL_H
#define SMCP_URL_H

#include <stddef.h>


#define SMCP_URL_MAX  2048              /* bytes of a notify URL */


struct sockaddr;


/* a part of the URL: within the text parsed, not NUL-terminated */
typedef struct {
    const char  *data;
    size_t       len;
} smcp_url_part_t;

typedef struct {
    smcp_url_part_t  scheme;        /* "http" or "https" */
    smcp_url_part_t  authority;     /* host[:port] as written */
    smcp_url_part_t  host;          /* a name, or an address (IPv6
                                       without its brackets) */
    smcp_url_part_t  path;          /* "/..." with the query */
    unsigned         port;          /* as written, else 80 or 443 */
    unsigned         literal:1;     /* host is an address */
    unsigned         https:1;
} smcp_url_t;


/*
 * The URL (len bytes) into *u: NULL, else why not (a sentence's end, for
 * the caller: "must start with http:// or https://").  An IPv4 address is
 * what nginx takes for one (ngx_inet_addr: four decimal numbers, dotted);
 * anything else that is not bracketed is a name.  A bracketed IPv6 address
 * is one inet_pton() and nginx both read.
 */
const char *smcp_url_parse(const char *s, size_t len, smcp_url_t *u);

/* scheme://host[:port]/ of a parsed URL, the authority as written (what
 * may be shown: no path); SMCP_ERR when it does not fit in size */
int smcp_url_origin(const smcp_url_t *u, char *buf, size_t size);

/*
 * 1: an address no notification goes to unless listed by it: unspecified,
 * loopback, private, shared (100.64/10), link-local, benchmarking,
 * IETF-protocol (192.0.0/24), multicast and reserved; IPv6's unique local,
 * link-local, multicast, NAT64 (64:ff9b::/32) and documentation
 * (2001:db8::/32); an IPv4 mapped or compatible one as its IPv4 address;
 * any family but AF_INET and AF_INET6.
 */
int smcp_addr_private(const struct sockaddr *sa);


#endif /* SMCP_URL_H */
