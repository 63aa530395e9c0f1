/*
 * A blocking connection to Redis, through Sentinel when the address says
 * so (smcp_sentinel.h).
 */

#include <stdio.h>
#include <string.h>

#include "smcp_sentinel.h"
#include "smcp_util.h"


static redisContext *
smcp_redis_tcp(const smcp_hostport_t *hp, struct timeval tv, char *err,
    size_t errlen)
{
    redisContext  *c;

    c = redisConnectWithTimeout(hp->host, hp->port, tv);

    if (c == NULL || c->err) {
        snprintf(err, errlen, "%s:%d: %s", hp->host, hp->port,
                 c ? c->errstr : "out of memory");
        redisFree(c);
        return NULL;
    }

    /* replies too: a server that accepts and never answers is no answer */
    redisSetTimeout(c, tv);

    return c;
}


static int
smcp_redis_auth(redisContext *c, const unsigned char *password, size_t len,
    char *err, size_t errlen)
{
    redisReply  *r;
    int          rc;

    if (password == NULL) {
        return SMCP_OK;
    }

    r = redisCommand(c, "AUTH %b", password, len);

    if (r == NULL) {
        snprintf(err, errlen, "AUTH: %s", c->errstr);
        return SMCP_ERR;
    }

    rc = SMCP_OK;

    if (r->type == REDIS_REPLY_ERROR) {
        /* the server's words ("WRONGPASS ..."), never the password */
        snprintf(err, errlen, "AUTH refused: %.100s", r->str);
        rc = SMCP_ERR;
    }

    freeReplyObject(r);

    return rc;
}


/* where one sentinel says the master is */
static int
smcp_sentinel_ask(const smcp_hostport_t *s, const char *master,
    struct timeval tv, smcp_hostport_t *hp, char *err, size_t errlen)
{
    int            rc;
    redisReply    *r, **e;
    redisContext  *c;

    c = smcp_redis_tcp(s, tv, err, errlen);
    if (c == NULL) {
        return SMCP_ERR;
    }

    r = redisCommand(c, "SENTINEL get-master-addr-by-name %s", master);
    rc = SMCP_ERR;

    if (r == NULL) {
        snprintf(err, errlen, "sentinel %s:%d: %s", s->host, s->port,
                 c->errstr);

    } else if (r->type != REDIS_REPLY_ARRAY || r->elements != 2
               || r->element[0]->type != REDIS_REPLY_STRING
               || r->element[1]->type != REDIS_REPLY_STRING)
    {
        snprintf(err, errlen, "sentinel %s:%d knows no master \"%s\"%s%.100s",
                 s->host, s->port, master,
                 r->type == REDIS_REPLY_ERROR ? ": " : "",
                 r->type == REDIS_REPLY_ERROR ? r->str : "");

    } else {
        e = r->element;

        if (smcp_sentinel_master_addr(e[0]->str, e[0]->len, e[1]->str,
                                      e[1]->len, hp)
            == SMCP_OK)
        {
            rc = SMCP_OK;

        } else {
            snprintf(err, errlen, "sentinel %s:%d: the master's address "
                     "is not an IP address and a port", s->host, s->port);
        }
    }

    freeReplyObject(r);
    redisFree(c);

    return rc;
}


/* the server at hp, authenticated, is the master now */
static redisContext *
smcp_redis_master(const smcp_hostport_t *hp, struct timeval tv,
    const unsigned char *password, size_t password_len, char *err,
    size_t errlen)
{
    redisReply    *r;
    redisContext  *c;

    c = smcp_redis_tcp(hp, tv, err, errlen);
    if (c == NULL) {
        return NULL;
    }

    if (smcp_redis_auth(c, password, password_len, err, errlen) != SMCP_OK) {
        redisFree(c);
        return NULL;
    }

    r = redisCommand(c, "ROLE");

    if (r && r->type == REDIS_REPLY_ARRAY && r->elements > 0
        && r->element[0]->type == REDIS_REPLY_STRING
        && smcp_redis_role_master(r->element[0]->str, r->element[0]->len))
    {
        freeReplyObject(r);
        return c;
    }

    snprintf(err, errlen, "%s:%d is not the master (yet): %s", hp->host,
             hp->port,
             r == NULL ? c->errstr
             : r->type == REDIS_REPLY_ERROR ? r->str : "another role");

    freeReplyObject(r);
    redisFree(c);

    return NULL;
}


redisContext *
smcp_redis_connect(const smcp_redis_addr_t *a, struct timeval tv,
    const unsigned char *password, size_t password_len, char *err,
    size_t errlen)
{
    int              i;
    redisContext    *c;
    smcp_hostport_t  hp;

    if (a->kind == SMCP_REDIS_SENTINEL) {
        for (i = 0; i < a->nsentinels; i++) {
            if (smcp_sentinel_ask(&a->sentinels[i], a->master, tv, &hp, err,
                                  errlen)
                != SMCP_OK)
            {
                continue;
            }

            c = smcp_redis_master(&hp, tv, password, password_len, err,
                                  errlen);
            if (c) {
                return c;
            }
        }

        return NULL;
    }

    if (a->kind == SMCP_REDIS_UNIX) {
        c = redisConnectUnixWithTimeout(a->path, tv);

        if (c == NULL || c->err) {
            snprintf(err, errlen, "unix:%s: %s", a->path,
                     c ? c->errstr : "out of memory");
            redisFree(c);
            return NULL;
        }

    } else {
        c = smcp_redis_tcp(&a->addr, tv, err, errlen);
        if (c == NULL) {
            return NULL;
        }
    }

    if (smcp_redis_auth(c, password, password_len, err, errlen) != SMCP_OK) {
        redisFree(c);
        return NULL;
    }

    return c;
}
