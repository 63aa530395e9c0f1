/*
 * The sentinels' news (--redis sentinel://...): a thread subscribed to
 * +switch-master on one sentinel at a time (the next one when it goes).
 *
 * Every store connection asks the sentinels where the master is when it
 * is made (common/smcp_sentinel.c), and a master that Sentinel turns into
 * a replica closes its clients and answers a write READONLY (store.c).
 * But until Sentinel reaches an old master that is still up (a manual
 * failover, a partition), that server is a master too and takes writes,
 * which are gone once it resyncs from the new one: seen in
 * t/redis_sentinel.t, a run's two steps acknowledged and lost ten seconds
 * after the switch.  So the move is heard: runner_sentinel_epoch counts
 * the moves of our master, a connection keeps the count it was made at,
 * and its next command fails saying the master moved (store.c), so the
 * code that sent it connects again, through the sentinels, and sends it
 * again.  A resubscription counts as a move: what happened while nobody
 * listened is not known.
 */

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "runner.h"


#define RUNNER_SENTINEL_POLL_MS   500       /* runner_stop is seen this
                                               soon */


atomic_uint  runner_sentinel_epoch;


/* a +switch-master message: "<name> <old ip> <old port> <new ip> <new
 * port>"; 1 when it is our master's (the new address checked, logged) */
static int
runner_sentinel_moved(redisReply *r)
{
    char             text[512], *f[5], *save, *p;
    int              n;
    smcp_hostport_t  hp;
    const char      *master;

    if (r->type != REDIS_REPLY_ARRAY || r->elements != 3
        || r->element[0]->type != REDIS_REPLY_STRING
        || strcmp(r->element[0]->str, "message") != 0
        || r->element[2]->type != REDIS_REPLY_STRING
        || r->element[2]->len >= sizeof(text))
    {
        return 0;
    }

    memcpy(text, r->element[2]->str, r->element[2]->len);
    text[r->element[2]->len] = '\0';

    n = 0;

    for (p = strtok_r(text, " ", &save); p && n < 5;
         p = strtok_r(NULL, " ", &save))
    {
        f[n++] = p;
    }

    master = runner_config->redis.master;

    if (n != 5 || strcmp(f[0], master) != 0) {
        return 0;
    }

    if (smcp_sentinel_master_addr(f[3], strlen(f[3]), f[4], strlen(f[4]),
                                  &hp)
        == SMCP_OK)
    {
        runner_log("info", NULL, "redis: sentinel: the master \"%s\" "
                   "moved to %s:%d: connections are made again", master,
                   hp.host, hp.port);

    } else {
        runner_log("info", NULL, "redis: sentinel: the master \"%s\" "
                   "moved: connections are made again", master);
    }

    return 1;
}


/* subscribed on one sentinel until it goes or the runner stops */
static void
runner_sentinel_listen(redisContext *c)
{
    int             rc;
    void           *reply;
    struct pollfd   pfd;

    for ( ;; ) {
        /* what was read already first (messages may have come with the
         * SUBSCRIBE's reply) */
        for ( ;; ) {
            reply = NULL;

            if (redisGetReplyFromReader(c, &reply) != REDIS_OK) {
                return;
            }

            if (reply == NULL) {
                break;
            }

            if (runner_sentinel_moved(reply)) {
                atomic_fetch_add(&runner_sentinel_epoch, 1);
            }

            freeReplyObject(reply);
        }

        if (atomic_load(&runner_stop)) {
            return;
        }

        pfd.fd = c->fd;
        pfd.events = POLLIN;
        pfd.revents = 0;

        rc = poll(&pfd, 1, RUNNER_SENTINEL_POLL_MS);

        if (rc == 0 || (rc < 0 && errno == EINTR)) {
            continue;
        }

        if (rc < 0 || redisBufferRead(c) != REDIS_OK) {
            return;
        }
    }
}


void *
runner_sentinel_thread(void *arg)
{
    int                       i, n, said, listened;
    redisReply               *r;
    redisContext             *c;
    struct timeval            tv = { RUNNER_REDIS_CONNECT_S, 0 };
    const smcp_hostport_t    *hp;
    const smcp_redis_addr_t  *a;

    a = &runner_config->redis;
    n = 0;
    said = 0;
    listened = 0;

    for (i = 0; !atomic_load(&runner_stop); i++) {
        hp = &a->sentinels[i % a->nsentinels];

        c = redisConnectWithTimeout(hp->host, hp->port, tv);
        r = NULL;

        if (c && !c->err) {
            redisSetTimeout(c, tv);
            (void) redisEnableKeepAlive(c);
            r = redisCommand(c, "SUBSCRIBE +switch-master");
        }

        if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
            if (!said) {
                runner_log("error", NULL, "redis: sentinel %s:%d: %s; "
                           "trying the next one", hp->host, hp->port,
                           c == NULL ? "out of memory"
                           : c->err ? c->errstr : "SUBSCRIBE refused");
                said = (i + 1) % a->nsentinels == 0;
            }

            freeReplyObject(r);
            redisFree(c);

            /* a round of them all in vain: a second before the next */
            while ((i + 1) % a->nsentinels == 0 && n++ < 10
                   && !atomic_load(&runner_stop))
            {
                usleep(100 * 1000);
            }

            n = 0;

            continue;
        }

        freeReplyObject(r);

        if (listened++) {
            /* moves while nobody listened are not known */
            atomic_fetch_add(&runner_sentinel_epoch, 1);
        }

        said = 0;
        runner_sentinel_listen(c);
        redisFree(c);
    }

    return NULL;
}
