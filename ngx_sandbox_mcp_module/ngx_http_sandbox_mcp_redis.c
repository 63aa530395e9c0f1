/*
 * hiredis async driven by nginx's event loop.  The rules followed here were
 * each seen to break something when skipped (each is noted where it is
 * followed).
 */

#include <sys/socket.h>
#include <openssl/sha.h>

#include <hiredis/async.h>

#include "ngx_http_sandbox_mcp_redis.h"
#include "ngx_http_sandbox_mcp_scripts.h"

#include "smcp_revoked.h"


#define NGX_HTTP_SANDBOX_MCP_BACKOFF_MIN    100
#define NGX_HTTP_SANDBOX_MCP_BACKOFF_MAX    1000

/* reads per event before yielding to other connections (16 KiB each) */
#define NGX_HTTP_SANDBOX_MCP_READ_BURST     64

/* revoked token ids a worker keeps */
#define NGX_HTTP_SANDBOX_MCP_REVOKED_MAX    1000000


typedef struct {
    const char                         *role;
    redisAsyncContext                  *ac;
    ngx_connection_t                   *conn;
    ngx_event_t                         reconnect;
    ngx_event_t                         timer;      /* connect / command */
    ngx_queue_t                         pending;
    ngx_msec_t                          backoff;
    ngx_msec_t                          connect_start;
    ngx_uint_t                          failures;
    unsigned                            subscriber:1;
    unsigned                            connected:1;
    unsigned                            in_write:1;
    unsigned                            auth_failed:1;
} ngx_http_sandbox_mcp_redis_link_t;


static void ngx_http_sandbox_mcp_redis_connect(
    ngx_http_sandbox_mcp_redis_link_t *link);
static void ngx_http_sandbox_mcp_redis_schedule(
    ngx_http_sandbox_mcp_redis_link_t *link);


static ngx_http_sandbox_mcp_main_conf_t  *ngx_http_sandbox_mcp_redis_conf;
static ngx_log_t                         *ngx_http_sandbox_mcp_redis_log;
static ngx_uint_t                         ngx_http_sandbox_mcp_redis_exiting;

static ngx_http_sandbox_mcp_redis_link_t  ngx_http_sandbox_mcp_cmd_link;
static ngx_http_sandbox_mcp_redis_link_t  ngx_http_sandbox_mcp_sub_link;

/* long-polls re-read after a connection loss: they fail fast now instead
 * of at the end of their wait, or catch pings missed while unsubscribed */
static ngx_event_t                        ngx_http_sandbox_mcp_wake_event;


/*
 * The revoked token ids, mirrored from the hash `revoked`: the pub/sub
 * connection SUBSCRIBEs to the channel `revoked` and, once subscribed, the
 * whole hash is read (HGETALL on the command connection) and merged in.
 * Until both happened since the last (re)connect the set is not trusted
 * ("loaded" is 0) and requests check their token in Redis instead.
 */
typedef struct {
    smcp_revoked_t                     *set;
    ngx_str_t                           key;        /* <prefix>revoked */
    ngx_str_t                           channel;
    ngx_http_sandbox_mcp_redis_cmd_t   *cmd;        /* HGETALL in flight */
    unsigned                            subscribed:1;
    unsigned                            loaded:1;
} ngx_http_sandbox_mcp_revoked_t;


static ngx_http_sandbox_mcp_revoked_t     ngx_http_sandbox_mcp_revoked;


ngx_str_t *
ngx_http_sandbox_mcp_redis_prefix(void)
{
    return &ngx_http_sandbox_mcp_redis_conf->prefix;
}


ngx_str_t
ngx_http_sandbox_mcp_redis_number(ngx_pool_t *pool, int64_t n)
{
    ngx_str_t  s;

    s.data = ngx_pnalloc(pool, NGX_INT64_LEN);
    s.len = s.data ? (size_t) (ngx_sprintf(s.data, "%L", n) - s.data) : 0;

    return s;
}


ngx_int_t
ngx_http_sandbox_mcp_redis_key(ngx_pool_t *pool, ngx_str_t *key,
    const char *fmt, ngx_str_t *arg)
{
    size_t      len;
    ngx_str_t  *prefix;

    /* fmt is one of the SMCP_KEY_* formats: "%s<literal>[%s<literal>]" */

    prefix = &ngx_http_sandbox_mcp_redis_conf->prefix;

    len = prefix->len + ngx_strlen(fmt) + (arg ? arg->len : 0);

    key->data = ngx_pnalloc(pool, len + 1);
    if (key->data == NULL) {
        return NGX_ERROR;
    }

    /* nginx's ngx_sprintf has no %s for C strings of unknown origin in the
     * middle of a format; expand the two %s by hand */
    {
        u_char      *p;
        const char  *f;
        ngx_uint_t   n;

        p = key->data;
        n = 0;

        for (f = fmt; *f; f++) {
            if (f[0] == '%' && f[1] == 's') {
                if (n == 0) {
                    p = ngx_cpymem(p, prefix->data, prefix->len);

                } else if (arg) {
                    p = ngx_cpymem(p, arg->data, arg->len);
                }

                n++;
                f++;
                continue;
            }

            *p++ = *f;
        }

        key->len = p - key->data;
        *p = '\0';
    }

    return NGX_OK;
}


/* event adapter */


static void
ngx_http_sandbox_mcp_redis_add_read(void *privdata)
{
    ngx_http_sandbox_mcp_redis_link_t  *link = privdata;
    ngx_event_t                        *rev;

    rev = link->conn->read;

    if (!rev->active) {
        if (ngx_add_event(rev, NGX_READ_EVENT,
                          (ngx_event_flags & NGX_USE_CLEAR_EVENT)
                          ? NGX_CLEAR_EVENT : NGX_LEVEL_EVENT)
            != NGX_OK)
        {
            ngx_log_error(NGX_LOG_ALERT, rev->log, 0,
                          "sandbox_mcp: redis %s: adding read event failed",
                          link->role);
        }
    }
}


static void
ngx_http_sandbox_mcp_redis_del_read(void *privdata)
{
    ngx_http_sandbox_mcp_redis_link_t  *link = privdata;
    ngx_event_t                        *rev;

    rev = link->conn->read;

    /* edge-triggered methods keep the event armed; level-triggered ones
     * would report the readable socket forever */
    if ((ngx_event_flags & NGX_USE_LEVEL_EVENT) && rev->active) {
        ngx_del_event(rev, NGX_READ_EVENT, 0);
    }
}


static void
ngx_http_sandbox_mcp_redis_add_write(void *privdata)
{
    ngx_http_sandbox_mcp_redis_link_t  *link = privdata;
    ngx_event_t                        *wev;

    wev = link->conn->write;

    if (link->in_write) {
        /* the write handler re-arms itself after a partial write */
        return;
    }

    if (wev->ready) {
        /* no new edge will come for a socket that is already writable:
         * post the event; this also batches every command of one loop
         * iteration into one write */
        if (!wev->posted) {
            ngx_post_event(wev, &ngx_posted_events);
        }

        return;
    }

    if (!wev->active) {
        if (ngx_add_event(wev, NGX_WRITE_EVENT,
                          (ngx_event_flags & NGX_USE_CLEAR_EVENT)
                          ? NGX_CLEAR_EVENT : NGX_LEVEL_EVENT)
            != NGX_OK)
        {
            ngx_log_error(NGX_LOG_ALERT, wev->log, 0,
                          "sandbox_mcp: redis %s: adding write event failed",
                          link->role);
        }
    }
}


static void
ngx_http_sandbox_mcp_redis_del_write(void *privdata)
{
    ngx_http_sandbox_mcp_redis_link_t  *link = privdata;
    ngx_event_t                        *wev;

    wev = link->conn->write;

    if ((ngx_event_flags & NGX_USE_LEVEL_EVENT) && wev->active) {
        ngx_del_event(wev, NGX_WRITE_EVENT, 0);
    }
}


static void
ngx_http_sandbox_mcp_redis_cleanup(void *privdata)
{
    ngx_http_sandbox_mcp_redis_link_t  *link = privdata;
    ngx_connection_t                   *c;

    /* ngx_close_connection() without the close(): hiredis closes the fd */

    c = link->conn;
    link->conn = NULL;
    link->ac = NULL;
    link->connected = 0;

    if (c == NULL) {
        return;
    }

    if (c->read->timer_set) {
        ngx_del_timer(c->read);
    }

    if (c->write->timer_set) {
        ngx_del_timer(c->write);
    }

    if (c->read->active || c->read->disabled) {
        ngx_del_event(c->read, NGX_READ_EVENT, NGX_CLOSE_EVENT);
    }

    if (c->write->active || c->write->disabled) {
        ngx_del_event(c->write, NGX_WRITE_EVENT, NGX_CLOSE_EVENT);
    }

    if (c->read->posted) {
        ngx_delete_posted_event(c->read);
    }

    if (c->write->posted) {
        ngx_delete_posted_event(c->write);
    }

    ngx_free_connection(c);

    c->fd = (ngx_socket_t) -1;
}


static void
ngx_http_sandbox_mcp_redis_read_handler(ngx_event_t *rev)
{
    ngx_connection_t                   *c;
    ngx_http_sandbox_mcp_redis_link_t  *link;
    redisAsyncContext                  *ac;
    ngx_uint_t                          i;
    ssize_t                             n;
    char                                b;

    c = rev->data;
    link = c->data;
    ac = link->ac;

    /* a stale ready flag makes level-triggered methods drop the event */
    rev->ready = 0;

    /*
     * hiredis reads at most 16 KiB per call; under edge-triggered epoll a
     * single read per event leaves the rest of a big reply stuck, so drain
     * until the socket would block.
     */

    for (i = 0; i < NGX_HTTP_SANDBOX_MCP_READ_BURST; i++) {

        redisAsyncHandleRead(ac);

        if (link->ac != ac) {
            /* the context was freed inside the call: stop touching it */
            return;
        }

        n = recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);

        if (n == -1 && (ngx_socket_errno == NGX_EAGAIN
                        || ngx_socket_errno == NGX_EINTR))
        {
            return;
        }

        /* data, EOF or an error: let hiredis see it */
    }

    /* more to read: come back after the other connections had a turn */
    ngx_post_event(rev, &ngx_posted_events);
}


static void
ngx_http_sandbox_mcp_redis_write_handler(ngx_event_t *wev)
{
    ngx_connection_t                   *c;
    ngx_http_sandbox_mcp_redis_link_t  *link;
    redisAsyncContext                  *ac;

    c = wev->data;
    link = c->data;
    ac = link->ac;

    if (link->connected && sdslen(ac->c.obuf) == 0) {
        return;
    }

    link->in_write = 1;
    redisAsyncHandleWrite(ac);

    if (link->ac != ac) {
        return;
    }

    link->in_write = 0;

    if (sdslen(ac->c.obuf) > 0) {
        /* partial write: wait for the socket to drain */
        wev->ready = 0;
        ngx_http_sandbox_mcp_redis_add_write(link);
    }
}


/* command timeouts */


static void
ngx_http_sandbox_mcp_redis_arm(ngx_http_sandbox_mcp_redis_link_t *link)
{
    ngx_msec_t                         at, now, timeout;
    ngx_http_sandbox_mcp_redis_cmd_t  *cmd;

    timeout = ngx_http_sandbox_mcp_redis_conf->redis_timeout;
    now = ngx_current_msec;

    if (!link->connected) {
        at = link->connect_start + timeout;

    } else if (!ngx_queue_empty(&link->pending)) {
        cmd = ngx_queue_data(ngx_queue_head(&link->pending),
                             ngx_http_sandbox_mcp_redis_cmd_t, queue);
        at = cmd->sent + timeout;

    } else {
        if (link->timer.timer_set) {
            ngx_del_timer(&link->timer);
        }

        return;
    }

    ngx_add_timer(&link->timer, (ngx_msec_int_t) (at - now) > 0
                                ? at - now : 1);
}


static void
ngx_http_sandbox_mcp_redis_timer_handler(ngx_event_t *ev)
{
    ngx_msec_t                          now, timeout;
    ngx_http_sandbox_mcp_redis_cmd_t   *cmd;
    ngx_http_sandbox_mcp_redis_link_t  *link;

    link = ev->data;

    if (link->ac == NULL) {
        return;
    }

    now = ngx_current_msec;
    timeout = ngx_http_sandbox_mcp_redis_conf->redis_timeout;

    if (link->connected) {
        if (ngx_queue_empty(&link->pending)) {
            return;
        }

        cmd = ngx_queue_data(ngx_queue_head(&link->pending),
                             ngx_http_sandbox_mcp_redis_cmd_t, queue);

        if ((ngx_msec_int_t) (now - cmd->sent) < (ngx_msec_int_t) timeout) {
            ngx_http_sandbox_mcp_redis_arm(link);
            return;
        }

        ngx_log_error(NGX_LOG_ERR, ngx_http_sandbox_mcp_redis_log, 0,
                      "sandbox_mcp: redis %s: no reply within %M ms, "
                      "reconnecting", link->role, timeout);

    } else {
        ngx_log_error(NGX_LOG_ERR, ngx_http_sandbox_mcp_redis_log, 0,
                      "sandbox_mcp: redis %s: connect to \"%V\" timed out",
                      link->role, &ngx_http_sandbox_mcp_redis_conf->redis);
    }

    /* fails every pending command (callbacks with NULL), then cleanup */
    redisAsyncFree(link->ac);

    ngx_http_sandbox_mcp_redis_schedule(link);
}


/* connection life cycle */


static void
ngx_http_sandbox_mcp_redis_reconnect_handler(ngx_event_t *ev)
{
    ngx_http_sandbox_mcp_redis_connect(ev->data);
}


static void
ngx_http_sandbox_mcp_redis_wake_handler(ngx_event_t *ev)
{
    ngx_http_sandbox_mcp_tools_wake_all();
}


static void
ngx_http_sandbox_mcp_redis_schedule(ngx_http_sandbox_mcp_redis_link_t *link)
{
    if (link->timer.timer_set) {
        ngx_del_timer(&link->timer);
    }

    if (link->subscriber) {
        /* revocations published from now on would be missed */
        ngx_http_sandbox_mcp_revoked.subscribed = 0;
        ngx_http_sandbox_mcp_revoked.loaded = 0;
    }

    /* not from inside hiredis: on the next turn of the event loop */
    if (!ngx_http_sandbox_mcp_redis_exiting
        && !ngx_http_sandbox_mcp_wake_event.posted)
    {
        ngx_post_event(&ngx_http_sandbox_mcp_wake_event, &ngx_posted_events);
    }

    if (ngx_http_sandbox_mcp_redis_exiting || ngx_exiting || ngx_quit
        || ngx_terminate || link->reconnect.timer_set)
    {
        return;
    }

    ngx_add_timer(&link->reconnect, link->backoff);

    link->backoff = ngx_min(link->backoff * 2,
                            NGX_HTTP_SANDBOX_MCP_BACKOFF_MAX);
}


/* revoked token ids */


static void
ngx_http_sandbox_mcp_redis_revoked_reply(void *data, redisReply *reply)
{
    ngx_http_sandbox_mcp_revoked_t *rv = data;

    size_t       i;
    int64_t      now;
    ngx_int_t    exp;
    ngx_uint_t   bad;
    redisReply  *k, *v;

    rv->cmd = NULL;

    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY) {
        /* read again when the command connection is back */
        return;
    }

    now = ngx_time();
    bad = 0;

    for (i = 0; i + 1 < reply->elements; i += 2) {
        k = reply->element[i];
        v = reply->element[i + 1];

        exp = (v->type == REDIS_REPLY_STRING)
              ? ngx_atoi((u_char *) v->str, v->len) : NGX_ERROR;

        if (k->type != REDIS_REPLY_STRING || exp == NGX_ERROR
            || smcp_revoked_add(rv->set, k->str, k->len, exp, now) != SMCP_OK)
        {
            bad++;
        }
    }

    if (bad) {
        ngx_log_error(NGX_LOG_WARN, ngx_http_sandbox_mcp_redis_log, 0,
                      "sandbox_mcp: redis: %ui revoked token entries not "
                      "kept (malformed, or over %d)", bad,
                      NGX_HTTP_SANDBOX_MCP_REVOKED_MAX);
    }

    /* trusted only if no revocation can have been missed meanwhile */
    rv->loaded = rv->subscribed;

    ngx_log_error(NGX_LOG_INFO, ngx_http_sandbox_mcp_redis_log, 0,
                  "sandbox_mcp: redis: %uz revoked token ids loaded",
                  smcp_revoked_count(rv->set));
}


static void
ngx_http_sandbox_mcp_redis_revoked_load(void)
{
    ngx_str_t                        argv[2];
    ngx_http_sandbox_mcp_revoked_t  *rv;

    rv = &ngx_http_sandbox_mcp_revoked;

    if (rv->set == NULL || !rv->subscribed || rv->loaded || rv->cmd) {
        return;
    }

    ngx_str_set(&argv[0], "HGETALL");
    argv[1] = rv->key;

    /* NULL: the command connection is away; its connect tries again */
    rv->cmd = ngx_http_sandbox_mcp_redis_command(
                  ngx_http_sandbox_mcp_redis_revoked_reply, rv, 2, argv);
}


/* a message "<jti> <exp>" on the channel `revoked` */
static void
ngx_http_sandbox_mcp_redis_revoked_message(redisReply *msg)
{
    size_t       len;
    int64_t      exp;
    const char  *jti;

    if (msg->type != REDIS_REPLY_STRING
        || smcp_revoked_parse(msg->str, msg->len, &jti, &len, &exp)
           != SMCP_OK
        || smcp_revoked_add(ngx_http_sandbox_mcp_revoked.set, jti, len, exp,
                            ngx_time())
           != SMCP_OK)
    {
        ngx_log_error(NGX_LOG_WARN, ngx_http_sandbox_mcp_redis_log, 0,
                      "sandbox_mcp: redis: a revocation message was not "
                      "kept (malformed, or over %d)",
                      NGX_HTTP_SANDBOX_MCP_REVOKED_MAX);
    }
}


ngx_int_t
ngx_http_sandbox_mcp_redis_revoked(ngx_str_t *jti)
{
    ngx_http_sandbox_mcp_revoked_t  *rv;

    rv = &ngx_http_sandbox_mcp_revoked;

    if (rv->set == NULL) {
        return NGX_AGAIN;
    }

    if (smcp_revoked_has(rv->set, (char *) jti->data, jti->len, ngx_time())) {
        return NGX_DECLINED;
    }

    return rv->loaded ? NGX_OK : NGX_AGAIN;
}


static ngx_uint_t
ngx_http_sandbox_mcp_redis_is(redisReply *r, const char *s)
{
    return r->type == REDIS_REPLY_STRING && r->len == ngx_strlen(s)
           && ngx_strncmp(r->str, s, r->len) == 0;
}


static void
ngx_http_sandbox_mcp_redis_sub_handler(redisAsyncContext *ac, void *r,
    void *privdata)
{
    redisReply  *reply = r;
    ngx_str_t    channel, prefix, id;
    size_t       skip;

    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY
        || reply->elements < 3)
    {
        return;
    }

    if (reply->elements == 3
        && ngx_http_sandbox_mcp_redis_is(reply->element[0], "subscribe"))
    {
        /* listening: now what was revoked before can be read */
        ngx_http_sandbox_mcp_revoked.subscribed = 1;
        ngx_http_sandbox_mcp_redis_revoked_load();
        return;
    }

    if (reply->elements == 3
        && ngx_http_sandbox_mcp_redis_is(reply->element[0], "message"))
    {
        ngx_http_sandbox_mcp_redis_revoked_message(reply->element[2]);
        return;
    }

    if (reply->elements == 3
        && ngx_strcmp(reply->element[0]->str, "psubscribe") == 0)
    {
        ngx_log_error(NGX_LOG_INFO, ngx_http_sandbox_mcp_redis_log, 0,
                      "sandbox_mcp: redis: subscribed to run channels");

        /* pings may have been missed while unsubscribed: re-check */
        ngx_http_sandbox_mcp_tools_wake_all();
        return;
    }

    if (reply->elements != 4
        || ngx_strcmp(reply->element[0]->str, "pmessage") != 0
        || reply->element[2]->type != REDIS_REPLY_STRING)
    {
        return;
    }

    channel.data = (u_char *) reply->element[2]->str;
    channel.len = reply->element[2]->len;

    prefix = ngx_http_sandbox_mcp_redis_conf->prefix;
    skip = prefix.len + sizeof("run:") - 1;

    if (channel.len <= skip) {
        return;
    }

    id.data = channel.data + skip;
    id.len = channel.len - skip;

    ngx_http_sandbox_mcp_tools_run_event(&id);
}


static void
ngx_http_sandbox_mcp_redis_script_loaded(redisAsyncContext *ac, void *r,
    void *privdata)
{
    redisReply  *reply = r;

    /* NOAUTH: a refused AUTH was logged already */
    if (reply && reply->type == REDIS_REPLY_ERROR
        && ngx_strncmp(reply->str, "NOAUTH", 6) != 0)
    {
        ngx_log_error(NGX_LOG_ALERT, ngx_http_sandbox_mcp_redis_log, 0,
                      "sandbox_mcp: redis: loading script \"%s\" failed: %s",
                      (char *) privdata, reply->str);
    }
}


static void
ngx_http_sandbox_mcp_redis_load_scripts(redisAsyncContext *ac)
{
    ngx_http_sandbox_mcp_script_t  **s;

    /* queued before any EVALSHA of this connection: Redis runs commands
     * in order, so every later EVALSHA finds its script */

    for (s = ngx_http_sandbox_mcp_scripts; *s; s++) {
        redisAsyncCommand(ac, ngx_http_sandbox_mcp_redis_script_loaded,
                          (void *) (*s)->name, "SCRIPT LOAD %s",
                          (*s)->source);
    }
}


static void
ngx_http_sandbox_mcp_redis_on_connect(const redisAsyncContext *cac,
    int status)
{
    redisAsyncContext                  *ac = (redisAsyncContext *) cac;
    ngx_http_sandbox_mcp_redis_link_t  *link;
    ngx_str_t                          *prefix;

    link = ac->ev.data;

    if (status != REDIS_OK) {
        /* hiredis frees the context after this without calling the
         * disconnect callback: schedule the retry here */

        if (link->failures++ == 0) {
            ngx_log_error(NGX_LOG_ERR, ngx_http_sandbox_mcp_redis_log, 0,
                          "sandbox_mcp: redis %s: connect to \"%V\" "
                          "failed: %s", link->role,
                          &ngx_http_sandbox_mcp_redis_conf->redis,
                          ac->errstr);
        }

        ngx_http_sandbox_mcp_redis_schedule(link);
        return;
    }

    ngx_log_error(NGX_LOG_NOTICE, ngx_http_sandbox_mcp_redis_log, 0,
                  "sandbox_mcp: redis %s: connected to \"%V\"", link->role,
                  &ngx_http_sandbox_mcp_redis_conf->redis);

    link->connected = 1;
    link->failures = 0;
    link->backoff = NGX_HTTP_SANDBOX_MCP_BACKOFF_MIN;

    if (link->subscriber) {
        prefix = &ngx_http_sandbox_mcp_redis_conf->prefix;

        redisAsyncCommand(ac, ngx_http_sandbox_mcp_redis_sub_handler, NULL,
                          "PSUBSCRIBE %brun:*", prefix->data, prefix->len);
        redisAsyncCommand(ac, ngx_http_sandbox_mcp_redis_sub_handler, NULL,
                          "SUBSCRIBE %b",
                          ngx_http_sandbox_mcp_revoked.channel.data,
                          ngx_http_sandbox_mcp_revoked.channel.len);

    } else {
        ngx_http_sandbox_mcp_redis_revoked_load();
    }

    ngx_http_sandbox_mcp_redis_arm(link);
}


static void
ngx_http_sandbox_mcp_redis_on_disconnect(const redisAsyncContext *ac,
    int status)
{
    ngx_http_sandbox_mcp_redis_link_t  *link;

    link = ac->ev.data;

    if (status != REDIS_OK && !ngx_http_sandbox_mcp_redis_exiting) {
        ngx_log_error(NGX_LOG_ERR, ngx_http_sandbox_mcp_redis_log, 0,
                      "sandbox_mcp: redis %s: connection lost: %s",
                      link->role, ac->errstr);
    }

    ngx_http_sandbox_mcp_redis_schedule(link);
}


static void
ngx_http_sandbox_mcp_redis_auth_done(redisAsyncContext *ac, void *r,
    void *privdata)
{
    redisReply                         *reply = r;
    ngx_http_sandbox_mcp_redis_link_t  *link = privdata;

    if (reply == NULL) {
        return;
    }

    if (reply->type != REDIS_REPLY_ERROR) {
        link->auth_failed = 0;
        return;
    }

    /* the reply names no password; neither does this line */
    if (!link->auth_failed) {
        ngx_log_error(NGX_LOG_ERR, ngx_http_sandbox_mcp_redis_log, 0,
                      "sandbox_mcp: redis %s: AUTH refused "
                      "(sandbox_mcp_redis_password): %s", link->role,
                      reply->str);
    }

    /* unusable: fail fast until a reconnect authenticates */
    link->auth_failed = 1;
    link->connected = 0;
    link->failures++;

    redisAsyncDisconnect(ac);
}


static void
ngx_http_sandbox_mcp_redis_connect(ngx_http_sandbox_mcp_redis_link_t *link)
{
    redisAsyncContext                 *ac;
    ngx_connection_t                  *c;
    ngx_http_sandbox_mcp_main_conf_t  *mcf;

    mcf = ngx_http_sandbox_mcp_redis_conf;

    if (mcf->redis_unix.len) {
        ac = redisAsyncConnectUnix((char *) mcf->redis_unix.data);

    } else {
        ac = redisAsyncConnect((char *) mcf->redis_host.data,
                               (int) mcf->redis_port);
    }

    if (ac == NULL) {
        ngx_log_error(NGX_LOG_ALERT, ngx_http_sandbox_mcp_redis_log, 0,
                      "sandbox_mcp: redis %s: out of memory", link->role);
        ngx_http_sandbox_mcp_redis_schedule(link);
        return;
    }

    if (ac->err) {
        if (link->failures++ == 0) {
            ngx_log_error(NGX_LOG_ERR, ngx_http_sandbox_mcp_redis_log, 0,
                          "sandbox_mcp: redis %s: connect to \"%V\" "
                          "failed: %s", link->role, &mcf->redis, ac->errstr);
        }

        redisAsyncFree(ac);
        ngx_http_sandbox_mcp_redis_schedule(link);
        return;
    }

    c = ngx_get_connection(ac->c.fd, ngx_http_sandbox_mcp_redis_log);
    if (c == NULL) {
        redisAsyncFree(ac);
        ngx_http_sandbox_mcp_redis_schedule(link);
        return;
    }

    /* ngx_get_connection() leaves the event logs NULL; --with-debug event
     * methods dereference them */
    c->data = link;
    c->read->handler = ngx_http_sandbox_mcp_redis_read_handler;
    c->write->handler = ngx_http_sandbox_mcp_redis_write_handler;
    c->read->log = ngx_http_sandbox_mcp_redis_log;
    c->write->log = ngx_http_sandbox_mcp_redis_log;

    link->ac = ac;
    link->conn = c;
    link->connected = 0;
    link->in_write = 0;
    link->connect_start = ngx_current_msec;

    /* attach before the connect callback: setting it arms the write event */
    ac->ev.data = link;
    ac->ev.addRead = ngx_http_sandbox_mcp_redis_add_read;
    ac->ev.delRead = ngx_http_sandbox_mcp_redis_del_read;
    ac->ev.addWrite = ngx_http_sandbox_mcp_redis_add_write;
    ac->ev.delWrite = ngx_http_sandbox_mcp_redis_del_write;
    ac->ev.cleanup = ngx_http_sandbox_mcp_redis_cleanup;

    redisAsyncSetConnectCallback(ac, ngx_http_sandbox_mcp_redis_on_connect);
    redisAsyncSetDisconnectCallback(ac,
                                    ngx_http_sandbox_mcp_redis_on_disconnect);

    /* AUTH first: every later command of the connection depends on it */
    if (mcf->redis_password) {
        redisAsyncCommand(ac, ngx_http_sandbox_mcp_redis_auth_done, link,
                          "AUTH %b", mcf->redis_password,
                          mcf->redis_password_len);
    }

    if (!link->subscriber) {
        ngx_http_sandbox_mcp_redis_load_scripts(ac);
    }

    ngx_http_sandbox_mcp_redis_arm(link);
}


static void
ngx_http_sandbox_mcp_redis_link_init(ngx_http_sandbox_mcp_redis_link_t *link,
    const char *role, ngx_uint_t subscriber)
{
    ngx_memzero(link, sizeof(ngx_http_sandbox_mcp_redis_link_t));

    link->role = role;
    link->subscriber = subscriber;
    link->backoff = NGX_HTTP_SANDBOX_MCP_BACKOFF_MIN;

    ngx_queue_init(&link->pending);

    link->reconnect.handler = ngx_http_sandbox_mcp_redis_reconnect_handler;
    link->reconnect.data = link;
    link->reconnect.log = ngx_http_sandbox_mcp_redis_log;
    link->reconnect.cancelable = 1;

    link->timer.handler = ngx_http_sandbox_mcp_redis_timer_handler;
    link->timer.data = link;
    link->timer.log = ngx_http_sandbox_mcp_redis_log;
    link->timer.cancelable = 1;
}


ngx_int_t
ngx_http_sandbox_mcp_redis_init_worker(ngx_cycle_t *cycle,
    ngx_http_sandbox_mcp_main_conf_t *mcf)
{
    ngx_http_sandbox_mcp_script_t  **s;
    unsigned char                    md[SHA_DIGEST_LENGTH];

    ngx_http_sandbox_mcp_redis_conf = mcf;
    ngx_http_sandbox_mcp_redis_log = cycle->log;
    ngx_http_sandbox_mcp_redis_exiting = 0;

    for (s = ngx_http_sandbox_mcp_scripts; *s; s++) {
        SHA1((const unsigned char *) (*s)->source,
             ngx_strlen((*s)->source), md);
        ngx_hex_dump((u_char *) (*s)->sha1, md, SHA_DIGEST_LENGTH);
        (*s)->sha1[40] = '\0';
    }

    ngx_memzero(&ngx_http_sandbox_mcp_wake_event, sizeof(ngx_event_t));
    ngx_http_sandbox_mcp_wake_event.handler =
                                      ngx_http_sandbox_mcp_redis_wake_handler;
    ngx_http_sandbox_mcp_wake_event.log = cycle->log;

    ngx_memzero(&ngx_http_sandbox_mcp_revoked,
                sizeof(ngx_http_sandbox_mcp_revoked_t));

    if (ngx_http_sandbox_mcp_redis_key(cycle->pool,
                                       &ngx_http_sandbox_mcp_revoked.key,
                                       SMCP_KEY_REVOKED, NULL)
        != NGX_OK
        || ngx_http_sandbox_mcp_redis_key(cycle->pool,
                                          &ngx_http_sandbox_mcp_revoked.channel,
                                          SMCP_CHAN_REVOKED, NULL)
           != NGX_OK)
    {
        return NGX_ERROR;
    }

    /* without it every token is checked in Redis (NGX_AGAIN) */
    ngx_http_sandbox_mcp_revoked.set =
                   smcp_revoked_create(NGX_HTTP_SANDBOX_MCP_REVOKED_MAX);

    ngx_http_sandbox_mcp_redis_link_init(&ngx_http_sandbox_mcp_cmd_link,
                                         "commands", 0);
    ngx_http_sandbox_mcp_redis_link_init(&ngx_http_sandbox_mcp_sub_link,
                                         "pubsub", 1);

    ngx_http_sandbox_mcp_redis_connect(&ngx_http_sandbox_mcp_cmd_link);
    ngx_http_sandbox_mcp_redis_connect(&ngx_http_sandbox_mcp_sub_link);

    return NGX_OK;
}


static void
ngx_http_sandbox_mcp_redis_link_close(ngx_http_sandbox_mcp_redis_link_t *link)
{
    if (link->reconnect.timer_set) {
        ngx_del_timer(&link->reconnect);
    }

    if (link->timer.timer_set) {
        ngx_del_timer(&link->timer);
    }

    if (link->ac) {
        redisAsyncFree(link->ac);
    }
}


void
ngx_http_sandbox_mcp_redis_exit_worker(ngx_cycle_t *cycle)
{
    if (ngx_http_sandbox_mcp_redis_conf == NULL) {
        return;
    }

    /* without this every reload logs "open socket left in connection" */
    ngx_http_sandbox_mcp_redis_exiting = 1;

    if (ngx_http_sandbox_mcp_wake_event.posted) {
        ngx_delete_posted_event(&ngx_http_sandbox_mcp_wake_event);
    }

    ngx_http_sandbox_mcp_redis_link_close(&ngx_http_sandbox_mcp_cmd_link);
    ngx_http_sandbox_mcp_redis_link_close(&ngx_http_sandbox_mcp_sub_link);

    smcp_revoked_free(ngx_http_sandbox_mcp_revoked.set);
    ngx_http_sandbox_mcp_revoked.set = NULL;
}


/* commands */


static void
ngx_http_sandbox_mcp_redis_reply(redisAsyncContext *ac, void *r,
    void *privdata)
{
    ngx_http_sandbox_mcp_redis_cmd_t   *cmd = privdata;
    ngx_http_sandbox_mcp_redis_link_t  *link;

    link = &ngx_http_sandbox_mcp_cmd_link;

    ngx_queue_remove(&cmd->queue);

    if (cmd->handler && cmd->data) {
        cmd->handler(cmd->data, r);
    }

    ngx_free(cmd);

    if (link->ac == ac && link->connected) {
        ngx_http_sandbox_mcp_redis_arm(link);
    }
}


#define NGX_HTTP_SANDBOX_MCP_MAX_ARGS  40


ngx_http_sandbox_mcp_redis_cmd_t *
ngx_http_sandbox_mcp_redis_command(
    ngx_http_sandbox_mcp_redis_handler_pt handler, void *data,
    ngx_uint_t argc, ngx_str_t *argv)
{
    ngx_uint_t                          i;
    const char                         *av[NGX_HTTP_SANDBOX_MCP_MAX_ARGS];
    size_t                              al[NGX_HTTP_SANDBOX_MCP_MAX_ARGS];
    ngx_http_sandbox_mcp_redis_cmd_t   *cmd;
    ngx_http_sandbox_mcp_redis_link_t  *link;

    link = &ngx_http_sandbox_mcp_cmd_link;

    /* fail fast while Redis is away; commands queued during a connect
     * attempt are bounded by the connect timeout */
    if (link->ac == NULL || (!link->connected && link->failures)
        || argc > NGX_HTTP_SANDBOX_MCP_MAX_ARGS)
    {
        return NULL;
    }

    for (i = 0; i < argc; i++) {
        av[i] = argv[i].len ? (const char *) argv[i].data : "";
        al[i] = argv[i].len;
    }

    cmd = ngx_alloc(sizeof(ngx_http_sandbox_mcp_redis_cmd_t),
                    ngx_http_sandbox_mcp_redis_log);
    if (cmd == NULL) {
        return NULL;
    }

    /* a NULL handler: fire and forget, the reply is dropped */
    cmd->handler = handler;
    cmd->data = data;
    cmd->sent = ngx_current_msec;

    if (redisAsyncCommandArgv(link->ac, ngx_http_sandbox_mcp_redis_reply,
                              cmd, (int) argc, av, al)
        != REDIS_OK)
    {
        ngx_free(cmd);
        return NULL;
    }

    ngx_queue_insert_tail(&link->pending, &cmd->queue);

    if (!link->timer.timer_set) {
        ngx_http_sandbox_mcp_redis_arm(link);
    }

    return cmd;
}


ngx_http_sandbox_mcp_redis_cmd_t *
ngx_http_sandbox_mcp_redis_script(ngx_http_sandbox_mcp_script_t *script,
    ngx_http_sandbox_mcp_redis_handler_pt handler, void *data,
    ngx_uint_t nkeys, ngx_uint_t argc, ngx_str_t *argv)
{
    ngx_uint_t  i;
    ngx_str_t   av[NGX_HTTP_SANDBOX_MCP_MAX_ARGS];
    u_char      nbuf[NGX_INT_T_LEN];

    /* EVALSHA sha nkeys keys... args... */

    if (argc + 3 > NGX_HTTP_SANDBOX_MCP_MAX_ARGS) {
        return NULL;
    }

    ngx_str_set(&av[0], "EVALSHA");
    av[1].data = (u_char *) script->sha1;
    av[1].len = 40;
    av[2].data = nbuf;
    av[2].len = ngx_sprintf(nbuf, "%ui", nkeys) - nbuf;

    for (i = 0; i < argc; i++) {
        av[i + 3] = argv[i];
    }

    return ngx_http_sandbox_mcp_redis_command(handler, data, argc + 3, av);
}


void
ngx_http_sandbox_mcp_redis_cancel(ngx_http_sandbox_mcp_redis_cmd_t *cmd)
{
    cmd->data = NULL;
}
