/*
 * Redis through Sentinel (sandbox_mcp_redis sentinel://...): the Redis
 * layer's part that finds the master and follows it.
 *
 * Before each connect of a link (commands, pub/sub) a sentinel is asked
 * where the master is (SENTINEL get-master-addr-by-name, the answer
 * checked: an IP address and a port), each in turn until one answers;
 * its connection closed, the link connects there (redis.c) and asks ROLE
 * first.  A failover closes the links' connections (the master died, or
 * Sentinel turned it into a replica and closed its clients; a write
 * answered READONLY closes one too: redis_command.c), and they ask again.
 *
 * An old master still up is a master until Sentinel reaches it (a manual
 * failover, a partition) and takes writes that are gone once it resyncs:
 * so each worker also listens to one sentinel's +switch-master (the
 * watch), and a move of our master closes both links at once.  Every
 * move counts (ngx_http_sandbox_mcp_redis_epoch); a link that asked
 * before the last one drops the connection it was making (its ROLE's
 * answer).  A new subscription counts as a move: what happened while no
 * sentinel was heard is not known.
 */

#include "ngx_http_sandbox_mcp_redis.h"
#include "ngx_http_sandbox_mcp_redis_link.h"


#define NGX_HTTP_SANDBOX_MCP_WATCH_RETRY   1000    /* ms: the next sentinel */


typedef struct {
    ngx_http_sandbox_mcp_redis_conn_t   c;          /* first: ev.data */
    ngx_event_t                         retry;
    ngx_uint_t                          next;
    ngx_uint_t                          subscribed; /* times */
} ngx_http_sandbox_mcp_redis_watch_t;


static ngx_uint_t                          ngx_http_sandbox_mcp_redis_epoch;
static ngx_http_sandbox_mcp_redis_watch_t  ngx_http_sandbox_mcp_redis_watch;


/* the master's ROLE, checked once connected (a sentinel behind, a
 * failover under way): another role, or a move heard since the sentinels
 * were asked, and they are asked again */
static void
ngx_http_sandbox_mcp_redis_role_done(redisAsyncContext *ac, void *r,
    void *privdata)
{
    redisReply                         *reply = r;
    ngx_http_sandbox_mcp_redis_link_t  *link = privdata;

    if (reply == NULL) {
        return;
    }

    if (reply->type == REDIS_REPLY_ARRAY && reply->elements > 0
        && reply->element[0]->type == REDIS_REPLY_STRING
        && smcp_redis_role_master(reply->element[0]->str,
                                  reply->element[0]->len))
    {
        if (link->epoch == ngx_http_sandbox_mcp_redis_epoch) {
            ngx_http_sandbox_mcp_redis_ready(link, ac);
            return;
        }

        /* the master moved while this connected */
        ngx_log_error(NGX_LOG_NOTICE, ngx_http_sandbox_mcp_redis_log, 0,
                      "sandbox_mcp: redis %s: the master moved while "
                      "connecting to \"%V\": asking the sentinels again",
                      link->c.role, &link->where);

        redisAsyncDisconnect(ac);
        return;
    }

    ngx_log_error(NGX_LOG_ERR, ngx_http_sandbox_mcp_redis_log, 0,
                  "sandbox_mcp: redis %s: \"%V\" is not the master: asking "
                  "the sentinels again", link->c.role, &link->where);

    link->failures++;
    redisAsyncDisconnect(ac);
}



static ngx_http_sandbox_mcp_redis_link_t *
ngx_http_sandbox_mcp_redis_sentinel_link(const redisAsyncContext *ac)
{
    return (ngx_http_sandbox_mcp_redis_link_t *)
               ((u_char *) ac->ev.data
                - offsetof(ngx_http_sandbox_mcp_redis_link_t, s));
}


/* the next sentinel is asked from the event loop: never from inside a
 * callback of the one before, whose connection hiredis is still closing */
static void
ngx_http_sandbox_mcp_redis_sentinel_next(
    ngx_http_sandbox_mcp_redis_link_t *link)
{
    if (!ngx_http_sandbox_mcp_redis_exiting && !ngx_exiting && !ngx_quit
        && !ngx_terminate && !link->ask.timer_set)
    {
        ngx_add_timer(&link->ask, 1);
    }
}


/* a connection to a sentinel (an address resolved at start), as an nginx
 * connection: NULL when it cannot even be begun */
static redisAsyncContext *
ngx_http_sandbox_mcp_redis_sentinel_connect(
    ngx_http_sandbox_mcp_redis_conn_t *conn, smcp_hostport_t *hp)
{
    redisAsyncContext  *ac;

    ac = redisAsyncConnect(hp->host, hp->port);

    if (ac == NULL || ac->err
        || ngx_http_sandbox_mcp_redis_attach(conn, ac,
                                             ngx_http_sandbox_mcp_redis_log)
           != NGX_OK)
    {
        if (ac) {
            redisAsyncFree(ac);
        }

        return NULL;
    }

    ac->c.reader->fn = &ngx_http_sandbox_mcp_redis_reply_fns;

    /* a sentinel gone without a word (its host down) is found out */
    (void) redisEnableKeepAlive(&ac->c);

    return ac;
}


static void
ngx_http_sandbox_mcp_redis_sentinel_connected(const redisAsyncContext *cac,
    int status)
{
    redisAsyncContext                  *ac = (redisAsyncContext *) cac;
    ngx_http_sandbox_mcp_redis_link_t  *link;

    if (status == REDIS_OK) {
        return;
    }

    link = ngx_http_sandbox_mcp_redis_sentinel_link(ac);

    if (link->failures == 0) {
        ngx_log_error(NGX_LOG_ERR, ngx_http_sandbox_mcp_redis_log, 0,
                      "sandbox_mcp: redis %s: sentinel %s:%d: %s",
                      link->c.role, ac->c.tcp.host, ac->c.tcp.port,
                      ac->errstr);
    }

    /* hiredis frees the context without its disconnect callback */
    ngx_http_sandbox_mcp_redis_sentinel_next(link);
}


/* SENTINEL get-master-addr-by-name: the master's address, checked */
static void
ngx_http_sandbox_mcp_redis_sentinel_reply(redisAsyncContext *ac, void *r,
    void *privdata)
{
    redisReply                         *reply = r;
    ngx_http_sandbox_mcp_redis_link_t  *link = privdata;

    redisReply  **e;

    if (reply == NULL) {
        /* its connection went: the connect or close callback goes on */
        return;
    }

    e = reply->element;

    if (reply->type == REDIS_REPLY_ARRAY && reply->elements == 2
        && e[0]->type == REDIS_REPLY_STRING
        && e[1]->type == REDIS_REPLY_STRING
        && smcp_sentinel_master_addr(e[0]->str, e[0]->len, e[1]->str,
                                     e[1]->len, &link->master)
           == SMCP_OK)
    {
        link->resolved = 1;
        link->where.data = link->where_buf;
        link->where.len = ngx_sprintf(link->where_buf,
                                      ngx_strchr(link->master.host, ':')
                                      ? "[%s]:%d" : "%s:%d",
                                      link->master.host, link->master.port)
                          - link->where_buf;

        ngx_log_error(NGX_LOG_NOTICE, ngx_http_sandbox_mcp_redis_log, 0,
                      "sandbox_mcp: redis %s: sentinel %s:%d names \"%V\" "
                      "the master \"%s\"", link->c.role, ac->c.tcp.host,
                      ac->c.tcp.port, &link->where,
                      ngx_http_sandbox_mcp_redis_conf->sentinel->master);

    } else if (link->failures == 0) {
        ngx_log_error(NGX_LOG_ERR, ngx_http_sandbox_mcp_redis_log, 0,
                      "sandbox_mcp: redis %s: sentinel %s:%d gives no "
                      "address (an IP address and a port) of the master "
                      "\"%s\"", link->c.role, ac->c.tcp.host,
                      ac->c.tcp.port,
                      ngx_http_sandbox_mcp_redis_conf->sentinel->master);
    }

    /* nothing more is read from it (hiredis 0.14 asserts on a reply
     * nobody asked for) */
    redisAsyncFree(ac);
}


/* the sentinel's connection closed: the master it named is connected to,
 * else the next sentinel is asked */
static void
ngx_http_sandbox_mcp_redis_sentinel_closed(const redisAsyncContext *ac,
    int status)
{
    ngx_http_sandbox_mcp_redis_link_t  *link;

    link = ngx_http_sandbox_mcp_redis_sentinel_link(ac);

    if (ngx_http_sandbox_mcp_redis_exiting) {
        return;
    }

    if (!link->resolved) {
        ngx_http_sandbox_mcp_redis_sentinel_next(link);
        return;
    }

    link->resolved = 0;
    link->asked = 0;

    /* an IP address (checked): no name to resolve */
    ngx_http_sandbox_mcp_redis_open(link,
        redisAsyncConnect(link->master.host, link->master.port));
}


/* the next sentinel asked where the master is; every one asked in vain:
 * again after the backoff */
void
ngx_http_sandbox_mcp_redis_sentinel_ask(
    ngx_http_sandbox_mcp_redis_link_t *link)
{
    smcp_hostport_t    *hp;
    smcp_redis_addr_t  *a;
    redisAsyncContext  *ac;

    a = ngx_http_sandbox_mcp_redis_conf->sentinel;

    if (link->s.ac || link->c.ac) {
        /* asking, or connected already: never two at once */
        return;
    }

    if (link->asked == (ngx_uint_t) a->nsentinels) {
        link->asked = 0;
        link->failures++;
        ngx_http_sandbox_mcp_redis_schedule(link);
        return;
    }

    hp = &a->sentinels[link->next++ % a->nsentinels];
    link->asked++;
    link->resolved = 0;
    link->epoch = ngx_http_sandbox_mcp_redis_epoch;

    ac = ngx_http_sandbox_mcp_redis_sentinel_connect(&link->s, hp);

    if (ac == NULL) {
        ngx_http_sandbox_mcp_redis_sentinel_next(link);
        return;
    }

    link->connect_start = ngx_current_msec;

    redisAsyncSetConnectCallback(ac,
        ngx_http_sandbox_mcp_redis_sentinel_connected);
    redisAsyncSetDisconnectCallback(ac,
        ngx_http_sandbox_mcp_redis_sentinel_closed);

    redisAsyncCommand(ac, ngx_http_sandbox_mcp_redis_sentinel_reply, link,
                      "SENTINEL get-master-addr-by-name %s", a->master);

    ngx_http_sandbox_mcp_redis_arm(link);
}


static void
ngx_http_sandbox_mcp_redis_sentinel_ask_handler(ngx_event_t *ev)
{
    ngx_http_sandbox_mcp_redis_sentinel_ask(ev->data);
}


void
ngx_http_sandbox_mcp_redis_sentinel_role(redisAsyncContext *ac,
    ngx_http_sandbox_mcp_redis_link_t *link)
{
    redisAsyncCommand(ac, ngx_http_sandbox_mcp_redis_role_done, link,
                      "ROLE");
}


/* the link's connect timer ran out while a sentinel was asked */
void
ngx_http_sandbox_mcp_redis_sentinel_timeout(
    ngx_http_sandbox_mcp_redis_link_t *link)
{
    ngx_log_error(NGX_LOG_ERR, ngx_http_sandbox_mcp_redis_log, 0,
                  "sandbox_mcp: redis %s: sentinel %s:%d: no answer "
                  "within %M ms", link->c.role,
                  link->s.ac->c.tcp.host, link->s.ac->c.tcp.port,
                  ngx_http_sandbox_mcp_redis_conf->redis_timeout);

    /* its close, if it was connected, asks the next one too; not the
     * master it may have named, whose connection would race the next
     * sentinel's */
    link->resolved = 0;
    redisAsyncFree(link->s.ac);
    ngx_http_sandbox_mcp_redis_sentinel_next(link);
}


void
ngx_http_sandbox_mcp_redis_sentinel_init(
    ngx_http_sandbox_mcp_redis_link_t *link)
{
    link->ask.handler = ngx_http_sandbox_mcp_redis_sentinel_ask_handler;
    link->ask.data = link;
    link->ask.log = ngx_http_sandbox_mcp_redis_log;
    link->ask.cancelable = 1;

    link->s.role = link->c.role;
}


void
ngx_http_sandbox_mcp_redis_sentinel_close(
    ngx_http_sandbox_mcp_redis_link_t *link)
{
    if (link->ask.timer_set) {
        ngx_del_timer(&link->ask);
    }

    if (link->s.ac) {
        redisAsyncFree(link->s.ac);
    }
}


/* the watch: one sentinel's +switch-master */


static void ngx_http_sandbox_mcp_redis_watch_connect(void);


/* a move of our master: both links' connections closed (they ask again) */
static void
ngx_http_sandbox_mcp_redis_moved(void)
{
    ngx_uint_t                          i;
    redisAsyncContext                  *ac;
    ngx_http_sandbox_mcp_redis_link_t  *links[2];

    ngx_http_sandbox_mcp_redis_epoch++;

    links[0] = &ngx_http_sandbox_mcp_cmd_link;
    links[1] = &ngx_http_sandbox_mcp_sub_link;

    for (i = 0; i < 2; i++) {
        ac = links[i]->c.ac;

        if (ac && links[i]->c.connected
            && !(ac->c.flags & REDIS_DISCONNECTING))
        {
            redisAsyncDisconnect(ac);
        }
    }
}


/* "<name> <old ip> <old port> <new ip> <new port>" on +switch-master */
static void
ngx_http_sandbox_mcp_redis_watch_message(redisAsyncContext *ac, void *r,
    void *privdata)
{
    redisReply  *reply = r;

    size_t            n;
    u_char           *p, *last, *f[5];
    ngx_uint_t        k;
    smcp_hostport_t   hp;
    const char       *master;
    redisReply      **e;

    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY
        || reply->elements != 3)
    {
        return;
    }

    e = reply->element;

    if (e[0]->type != REDIS_REPLY_STRING || e[2]->type == REDIS_REPLY_NIL) {
        return;
    }

    if (e[0]->len == 9 && ngx_strncmp(e[0]->str, "subscribe", 9) == 0) {
        if (ngx_http_sandbox_mcp_redis_watch.subscribed++) {
            /* moves while no sentinel was heard are not known */
            ngx_http_sandbox_mcp_redis_moved();
        }

        return;
    }

    if (e[0]->len != 7 || ngx_strncmp(e[0]->str, "message", 7) != 0
        || e[2]->type != REDIS_REPLY_STRING)
    {
        return;
    }

    /* the five fields, split in place (the reply's own copy) */
    p = (u_char *) e[2]->str;
    last = p + e[2]->len;
    k = 0;

    while (p < last && k < 5) {
        f[k++] = p;
        p = ngx_strlchr(p, last, ' ');
        if (p == NULL) {
            p = last;
        }
        *p++ = '\0';
    }

    master = ngx_http_sandbox_mcp_redis_conf->sentinel->master;
    n = ngx_strlen(master);

    if (k != 5 || ngx_strlen(f[0]) != n
        || ngx_strncmp(f[0], master, n) != 0)
    {
        return;
    }

    if (smcp_sentinel_master_addr((char *) f[3], ngx_strlen(f[3]),
                                  (char *) f[4], ngx_strlen(f[4]), &hp)
        == SMCP_OK)
    {
        ngx_log_error(NGX_LOG_NOTICE, ngx_http_sandbox_mcp_redis_log, 0,
                      "sandbox_mcp: redis: sentinel %s:%d: the master "
                      "\"%s\" moved to %s:%d: connecting again",
                      ac->c.tcp.host, ac->c.tcp.port, master, hp.host,
                      hp.port);
    }

    ngx_http_sandbox_mcp_redis_moved();
}


static void
ngx_http_sandbox_mcp_redis_watch_retry(void)
{
    ngx_event_t  *ev;

    ev = &ngx_http_sandbox_mcp_redis_watch.retry;

    if (!ngx_http_sandbox_mcp_redis_exiting && !ngx_exiting && !ngx_quit
        && !ngx_terminate && !ev->timer_set)
    {
        ngx_add_timer(ev, NGX_HTTP_SANDBOX_MCP_WATCH_RETRY);
    }
}


static void
ngx_http_sandbox_mcp_redis_watch_connected(const redisAsyncContext *ac,
    int status)
{
    if (status != REDIS_OK) {
        /* freed without the disconnect callback */
        ngx_http_sandbox_mcp_redis_watch_retry();
    }
}


static void
ngx_http_sandbox_mcp_redis_watch_closed(const redisAsyncContext *ac,
    int status)
{
    ngx_http_sandbox_mcp_redis_watch_retry();
}


static void
ngx_http_sandbox_mcp_redis_watch_connect(void)
{
    smcp_hostport_t                     *hp;
    smcp_redis_addr_t                   *a;
    redisAsyncContext                   *ac;
    ngx_http_sandbox_mcp_redis_watch_t  *w;

    w = &ngx_http_sandbox_mcp_redis_watch;
    a = ngx_http_sandbox_mcp_redis_conf->sentinel;
    hp = &a->sentinels[w->next++ % a->nsentinels];

    ac = ngx_http_sandbox_mcp_redis_sentinel_connect(&w->c, hp);

    if (ac == NULL) {
        ngx_http_sandbox_mcp_redis_watch_retry();
        return;
    }

    redisAsyncSetConnectCallback(ac,
        ngx_http_sandbox_mcp_redis_watch_connected);
    redisAsyncSetDisconnectCallback(ac,
        ngx_http_sandbox_mcp_redis_watch_closed);

    redisAsyncCommand(ac, ngx_http_sandbox_mcp_redis_watch_message, NULL,
                      "SUBSCRIBE +switch-master");
}


static void
ngx_http_sandbox_mcp_redis_watch_retry_handler(ngx_event_t *ev)
{
    ngx_http_sandbox_mcp_redis_watch_connect();
}


void
ngx_http_sandbox_mcp_redis_sentinel_start(void)
{
    ngx_http_sandbox_mcp_redis_watch_t  *w;

    w = &ngx_http_sandbox_mcp_redis_watch;

    ngx_memzero(w, sizeof(ngx_http_sandbox_mcp_redis_watch_t));

    w->c.role = "sentinel";
    w->retry.handler = ngx_http_sandbox_mcp_redis_watch_retry_handler;
    w->retry.data = w;
    w->retry.log = ngx_http_sandbox_mcp_redis_log;
    w->retry.cancelable = 1;

    ngx_http_sandbox_mcp_redis_epoch = 0;

    ngx_http_sandbox_mcp_redis_watch_connect();
}


void
ngx_http_sandbox_mcp_redis_sentinel_stop(void)
{
    ngx_http_sandbox_mcp_redis_watch_t  *w;

    w = &ngx_http_sandbox_mcp_redis_watch;

    if (w->retry.timer_set) {
        ngx_del_timer(&w->retry);
    }

    if (w->c.ac) {
        redisAsyncFree(w->c.ac);
    }
}
