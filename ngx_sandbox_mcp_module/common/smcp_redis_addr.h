/*
 * Where Redis is, as every part of the product names it (nginx's
 * sandbox_mcp_redis, the runner's --redis, the tools' SMCP_REDIS):
 *
 *   host:port                 one Redis
 *   unix:/path                one Redis on a Unix socket
 *   sentinel://H:P[,H:P...]/NAME
 *                             the master NAME as Redis Sentinel says it is
 *                             now, asking the sentinels in turn (at most
 *                             SMCP_SENTINELS_MAX; port 26379 when none)
 *
 * And the two answers of a Sentinel setup a client checks before it trusts
 * them: SENTINEL get-master-addr-by-name (an IP address and a port: a host
 * name would make a worker block resolving it) and ROLE (the first element
 * "master").  Plain C, no I/O: the module and the runner share it, the unit
 * tests and a fuzzer drive it.  The connecting is each side's own (the
 * module's is asynchronous): common/smcp_sentinel.c is the blocking one of
 * the runner and the tools.
 */

#ifndef SMCP_REDIS_ADDR_H
#define SMCP_REDIS_ADDR_H

#include <stddef.h>


#define SMCP_REDIS_TCP              0
#define SMCP_REDIS_UNIX             1
#define SMCP_REDIS_SENTINEL         2

#define SMCP_SENTINELS_MAX          8
#define SMCP_SENTINEL_PORT          26379
#define SMCP_SENTINEL_NAME_MAX      64      /* [A-Za-z0-9._-] */
#define SMCP_REDIS_HOST_MAX         255
#define SMCP_REDIS_PATH_MAX         107     /* sun_path, NUL excluded */
#define SMCP_REDIS_ADDR_MAX         2048    /* the whole setting */


typedef struct {
    char   host[SMCP_REDIS_HOST_MAX + 1];
    int    port;
} smcp_hostport_t;

typedef struct {
    int               kind;                 /* SMCP_REDIS_* */
    smcp_hostport_t   addr;                 /* TCP: the one Redis */
    char              path[SMCP_REDIS_PATH_MAX + 1];
    smcp_hostport_t   sentinels[SMCP_SENTINELS_MAX];
    int               nsentinels;
    char              master[SMCP_SENTINEL_NAME_MAX + 1];
} smcp_redis_addr_t;


/* the setting (len bytes; a NUL in it is an error); 0, or -1 with err
 * saying why */
int smcp_redis_addr_parse(const char *s, size_t len, smcp_redis_addr_t *a,
    char *err, size_t errlen);

/* host:port, or host alone (default_port): an IPv6 address in brackets;
 * 0 or -1 */
int smcp_hostport_parse(const char *s, size_t len, int default_port,
    smcp_hostport_t *hp);

/* SENTINEL get-master-addr-by-name's two strings, checked: an IPv4 or
 * IPv6 address (no name, not 0.0.0.0 or ::) and a port 1-65535; 0 or -1 */
int smcp_sentinel_master_addr(const char *ip, size_t iplen, const char *port,
    size_t portlen, smcp_hostport_t *hp);

/* ROLE's first element is "master" */
int smcp_redis_role_master(const char *role, size_t len);


#endif /* SMCP_REDIS_ADDR_H */
