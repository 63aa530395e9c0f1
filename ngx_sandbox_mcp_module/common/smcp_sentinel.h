/*
 * A blocking connection to Redis as smcp_redis_addr_t names it, for the
 * runner and the tools (hiredis's synchronous API; the nginx module never
 * blocks and has its own, asynchronous, in ngx_http_sandbox_mcp_redis.c,
 * so nginx's `config` does not build this file).
 *
 * Through Sentinel: each sentinel in turn is asked where the master is
 * (SENTINEL get-master-addr-by-name), its answer checked (an address, a
 * port), that address connected to, authenticated, and asked ROLE: a
 * server that is not the master (a failover under way, a sentinel behind)
 * is no answer, and the next sentinel is asked.
 */

#ifndef SMCP_SENTINEL_H
#define SMCP_SENTINEL_H

#include <stddef.h>
#include <sys/time.h>

#include <hiredis/hiredis.h>

#include "smcp_redis_addr.h"


/* connected (tv: each connect's timeout), AUTH sent when password is not
 * NULL; NULL with err saying why (never the password) */
redisContext *smcp_redis_connect(const smcp_redis_addr_t *a,
    struct timeval tv, const unsigned char *password, size_t password_len,
    char *err, size_t errlen);


#endif /* SMCP_SENTINEL_H */
