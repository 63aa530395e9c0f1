/*
 * The worker's two Redis connections (commands, pub/sub): connect with
 * backoff, AUTH, command timeouts, and the delivery of pub/sub messages and
 * connection events to the listeners of the layers above.  The commands
 * themselves: ngx_http_sandbox_mcp_redis_command.c; where the master is,
 * through Sentinel: ngx_http_sandbox_mcp_redis_sentinel.c.
 */

#include "ngx_http_sandbox_mcp_redis.h"
#include "ngx_http_sandbox_mcp_redis_link.h"
#include "ngx_http_sandbox_mcp_metrics.h"
#include "ngx_http_sandbox_mcp_defaults.h"


typedef struct {
    ngx_str_t                               channel;
    ngx_uint_t                              pattern;
    ngx_http_sandbox_mcp_redis_listener_pt  handler;
} ngx_http_sandbox_mcp_redis_listener_t;


static void ngx_http_sandbox_mcp_redis_connect(
    ngx_http_sandbox_mcp_redis_link_t *link);


ngx_http_sandbox_mcp_main_conf_t         *ngx_http_sandbox_mcp_redis_conf;
ngx_log_t                                *ngx_http_sandbox_mcp_redis_log;
ngx_uint_t                                ngx_http_sandbox_mcp_redis_exiting;

ngx_http_sandbox_mcp_redis_link_t         ngx_http_sandbox_mcp_cmd_link;
ngx_http_sandbox_mcp_redis_link_t         ngx_http_sandbox_mcp_sub_link;

static ngx_http_sandbox_mcp_redis_listener_t
    ngx_http_sandbox_mcp_redis_listeners[NGX_HTTP_SANDBOX_MCP_REDIS_LISTENERS];
static ngx_uint_t                         ngx_http_sandbox_mcp_redis_nlisteners;


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
    u_char      *p;
    size_t       len;
    ngx_str_t   *prefix;
    ngx_uint_t   n;
    const char  *f;

    /* fmt is one of the SMCP_KEY_* formats: "%s<literal>[%s<literal>]" */

    prefix = &ngx_http_sandbox_mcp_redis_conf->prefix;

    len = prefix->len + ngx_strlen(fmt) + (arg ? arg->len : 0);

    key->data = ngx_pnalloc(pool, len + 1);
    if (key->data == NULL) {
        return NGX_ERROR;
    }

    /* nginx's ngx_sprintf has no %s for C strings of unknown origin in the
     * middle of a format; expand the two %s by hand */

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

    return NGX_OK;
}


/* listeners */


ngx_int_t
ngx_http_sandbox_mcp_redis_listen(ngx_str_t *channel, ngx_uint_t pattern,
    ngx_http_sandbox_mcp_redis_listener_pt handler)
{
    ngx_http_sandbox_mcp_redis_listener_t  *l;

    if (ngx_http_sandbox_mcp_redis_nlisteners
        == NGX_HTTP_SANDBOX_MCP_REDIS_LISTENERS)
    {
        return NGX_ERROR;
    }

    l = &ngx_http_sandbox_mcp_redis_listeners[
                                     ngx_http_sandbox_mcp_redis_nlisteners++];

    l->channel = *channel;
    l->pattern = pattern;
    l->handler = handler;

    return NGX_OK;
}


/* an event every listener hears */
void
ngx_http_sandbox_mcp_redis_notify(ngx_http_sandbox_mcp_redis_event_e event)
{
    ngx_uint_t  i;

    if (ngx_http_sandbox_mcp_redis_exiting) {
        return;
    }

    for (i = 0; i < ngx_http_sandbox_mcp_redis_nlisteners; i++) {
        ngx_http_sandbox_mcp_redis_listeners[i].handler(event, NULL, NULL);
    }
}


static ngx_uint_t
ngx_http_sandbox_mcp_redis_is(redisReply *r, const char *s)
{
    return r->type == REDIS_REPLY_STRING && r->len == ngx_strlen(s)
           && ngx_strncmp(r->str, s, r->len) == 0;
}


/* the listener of a channel (or pattern) a pub/sub reply names */
static ngx_http_sandbox_mcp_redis_listener_t *
ngx_http_sandbox_mcp_redis_listener(redisReply *name, ngx_uint_t pattern)
{
    ngx_uint_t                              i;
    ngx_http_sandbox_mcp_redis_listener_t  *l;

    if (name->type != REDIS_REPLY_STRING) {
        return NULL;
    }

    for (i = 0; i < ngx_http_sandbox_mcp_redis_nlisteners; i++) {
        l = &ngx_http_sandbox_mcp_redis_listeners[i];

        if (l->pattern == pattern && l->channel.len == name->len
            && ngx_strncmp(l->channel.data, name->str, name->len) == 0)
        {
            return l;
        }
    }

    return NULL;
}


static void
ngx_http_sandbox_mcp_redis_sub_handler(redisAsyncContext *ac, void *r,
    void *privdata)
{
    redisReply                             *reply = r;
    ngx_str_t                               channel, message;
    ngx_uint_t                              pattern;
    redisReply                            **e;
    ngx_http_sandbox_mcp_redis_listener_t  *l;

    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY
        || reply->elements < 3)
    {
        return;
    }

    e = reply->element;
    pattern = ngx_http_sandbox_mcp_redis_is(e[0], "psubscribe")
              || ngx_http_sandbox_mcp_redis_is(e[0], "pmessage");

    l = ngx_http_sandbox_mcp_redis_listener(e[1], pattern);
    if (l == NULL) {
        return;
    }

    if (reply->elements == 3
        && (ngx_http_sandbox_mcp_redis_is(e[0], "subscribe")
            || ngx_http_sandbox_mcp_redis_is(e[0], "psubscribe")))
    {
        ngx_log_error(NGX_LOG_INFO, ngx_http_sandbox_mcp_redis_log, 0,
                      "sandbox_mcp: redis: subscribed to \"%V\"",
                      &l->channel);

        l->handler(NGX_HTTP_SANDBOX_MCP_REDIS_SUBSCRIBED, &l->channel, NULL);
        return;
    }

    /* message: channel, text; pmessage: pattern, channel, text */

    e += pattern;

    if (reply->elements != 3 + pattern
        || !(ngx_http_sandbox_mcp_redis_is(reply->element[0], "message")
             || ngx_http_sandbox_mcp_redis_is(reply->element[0],
                                              "pmessage"))
        || e[1]->type != REDIS_REPLY_STRING
        || e[2]->type != REDIS_REPLY_STRING)
    {
        return;
    }

    channel.data = (u_char *) e[1]->str;
    channel.len = e[1]->len;
    message.data = (u_char *) e[2]->str;
    message.len = e[2]->len;

    l->handler(NGX_HTTP_SANDBOX_MCP_REDIS_MESSAGE, &channel, &message);
}


static void
ngx_http_sandbox_mcp_redis_subscribe(redisAsyncContext *ac)
{
    ngx_uint_t                              i;
    ngx_http_sandbox_mcp_redis_listener_t  *l;

    for (i = 0; i < ngx_http_sandbox_mcp_redis_nlisteners; i++) {
        l = &ngx_http_sandbox_mcp_redis_listeners[i];

        if (l->channel.len == 0) {
            continue;           /* the connection's events only */
        }

        redisAsyncCommand(ac, ngx_http_sandbox_mcp_redis_sub_handler, NULL,
                          l->pattern ? "PSUBSCRIBE %b" : "SUBSCRIBE %b",
                          l->channel.data, l->channel.len);
    }
}


/* command timeouts */


void
ngx_http_sandbox_mcp_redis_arm(ngx_http_sandbox_mcp_redis_link_t *link)
{
    ngx_msec_t                         at, now, timeout;
    ngx_http_sandbox_mcp_redis_cmd_t  *cmd;

    timeout = ngx_http_sandbox_mcp_redis_conf->redis_timeout;
    now = ngx_current_msec;

    if (!link->c.connected) {
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

    if (link->s.ac) {
        ngx_http_sandbox_mcp_redis_sentinel_timeout(link);
        return;
    }

    if (link->c.ac == NULL) {
        return;
    }

    now = ngx_current_msec;
    timeout = ngx_http_sandbox_mcp_redis_conf->redis_timeout;

    if (link->c.connected) {
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
                      "reconnecting", link->c.role, timeout);

    } else {
        ngx_log_error(NGX_LOG_ERR, ngx_http_sandbox_mcp_redis_log, 0,
                      "sandbox_mcp: redis %s: connect to \"%V\" timed out",
                      link->c.role, &link->where);
    }

    /* fails every pending command (callbacks with NULL), then cleanup */
    redisAsyncFree(link->c.ac);

    ngx_http_sandbox_mcp_redis_schedule(link);
}


/* connection life cycle */


static void
ngx_http_sandbox_mcp_redis_reconnect_handler(ngx_event_t *ev)
{
    ngx_http_sandbox_mcp_redis_connect(ev->data);
}


void
ngx_http_sandbox_mcp_redis_schedule(ngx_http_sandbox_mcp_redis_link_t *link)
{
    if (link->timer.timer_set) {
        ngx_del_timer(&link->timer);
    }

    if (!link->subscriber) {
        ngx_http_sandbox_mcp_redis_commands_lost();
    }

    ngx_http_sandbox_mcp_redis_notify(link->subscriber
                                      ? NGX_HTTP_SANDBOX_MCP_REDIS_UNSUBSCRIBED
                                      : NGX_HTTP_SANDBOX_MCP_REDIS_LOST);

    if (ngx_http_sandbox_mcp_redis_exiting || ngx_exiting || ngx_quit
        || ngx_terminate || link->reconnect.timer_set)
    {
        return;
    }

    ngx_add_timer(&link->reconnect, link->backoff);
    ngx_http_sandbox_mcp_metrics_redis_reconnect();

    link->backoff = ngx_min(link->backoff * 2,
                            NGX_HTTP_SANDBOX_MCP_BACKOFF_MAX);
}


static void
ngx_http_sandbox_mcp_redis_on_connect(const redisAsyncContext *cac,
    int status)
{
    redisAsyncContext                  *ac = (redisAsyncContext *) cac;
    ngx_http_sandbox_mcp_redis_link_t  *link;

    link = ac->ev.data;

    if (status != REDIS_OK) {
        /* hiredis frees the context after this without calling the
         * disconnect callback: schedule the retry here */

        if (link->failures++ == 0) {
            ngx_log_error(NGX_LOG_ERR, ngx_http_sandbox_mcp_redis_log, 0,
                          "sandbox_mcp: redis %s: connect to \"%V\" "
                          "failed: %s", link->c.role, &link->where,
                          ac->errstr);
        }

        ngx_http_sandbox_mcp_redis_schedule(link);
        return;
    }

    ngx_log_error(NGX_LOG_NOTICE, ngx_http_sandbox_mcp_redis_log, 0,
                  "sandbox_mcp: redis %s: connected to \"%V\"", link->c.role,
                  &link->where);

    link->c.connected = 1;
    link->failures = 0;
    link->backoff = NGX_HTTP_SANDBOX_MCP_BACKOFF_MIN;

    /* through Sentinel: once its ROLE says master (redis_sentinel.c) */
    if (!ngx_http_sandbox_mcp_redis_conf->sentinel) {
        ngx_http_sandbox_mcp_redis_ready(link, ac);
    }

    ngx_http_sandbox_mcp_redis_arm(link);
}


void
ngx_http_sandbox_mcp_redis_ready(ngx_http_sandbox_mcp_redis_link_t *link,
    redisAsyncContext *ac)
{
    link->verified = 1;

    if (link->subscriber) {
        ngx_http_sandbox_mcp_redis_subscribe(ac);

    } else {
        ngx_http_sandbox_mcp_redis_notify(NGX_HTTP_SANDBOX_MCP_REDIS_READY);
    }
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
                      link->c.role, ac->errstr);
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
                      "(sandbox_mcp_redis_password): %s", link->c.role,
                      reply->str);
    }

    /* unusable: fail fast until a reconnect authenticates */
    link->auth_failed = 1;
    link->c.connected = 0;
    link->failures++;

    redisAsyncDisconnect(ac);
}


/*
 * Reply objects in one allocation each (hiredis's own take two for a
 * string, the object and its text, and two for an array): the object and
 * its text, or its element pointers, in one block.  The same redisReply;
 * freed only by hiredis, through its reader's freeObject (the module never
 * calls freeReplyObject).  A get_result's HGETALL is 55 objects.
 */
static redisReply *
ngx_http_sandbox_mcp_redis_reply_object(const redisReadTask *task, int type,
    size_t extra)
{
    redisReply  *r, *parent;

    r = malloc(sizeof(redisReply) + extra);
    if (r == NULL) {
        return NULL;
    }

    ngx_memzero(r, sizeof(redisReply));
    r->type = type;

    if (task->parent) {
        parent = task->parent->obj;
        parent->element[task->idx] = r;
    }

    return r;
}


static void *
ngx_http_sandbox_mcp_redis_reply_string(const redisReadTask *task,
    char *str, size_t len)
{
    redisReply  *r;

    /* a bulk string, a status or an error: the task's type */
    r = ngx_http_sandbox_mcp_redis_reply_object(task, task->type, len + 1);
    if (r == NULL) {
        return NULL;
    }

    r->str = (char *) (r + 1);
    r->len = len;
    ngx_memcpy(r->str, str, len);
    r->str[len] = '\0';

    return r;
}


static void *
ngx_http_sandbox_mcp_redis_reply_array(const redisReadTask *task,
    int elements)
{
    size_t       size;
    redisReply  *r;

    if (elements > NGX_HTTP_SANDBOX_MCP_REPLY_ELEMENTS) {
        /* no reply of ours is that long: a server (or a sentinel) that
         * says so is not believed (hiredis takes NULL as out of memory,
         * and the connection goes) */
        return NULL;
    }

    size = elements > 0 ? (size_t) elements * sizeof(redisReply *) : 0;

    r = ngx_http_sandbox_mcp_redis_reply_object(task, REDIS_REPLY_ARRAY,
                                                size);
    if (r == NULL) {
        return NULL;
    }

    if (elements > 0) {
        /* zeroed: a reply cut short is freed with what it has */
        r->element = (redisReply **) (r + 1);
        ngx_memzero(r->element, size);
    }

    r->elements = elements > 0 ? elements : 0;

    return r;
}


static void *
ngx_http_sandbox_mcp_redis_reply_integer(const redisReadTask *task,
    long long value)
{
    redisReply  *r;

    r = ngx_http_sandbox_mcp_redis_reply_object(task, REDIS_REPLY_INTEGER, 0);
    if (r == NULL) {
        return NULL;
    }

    r->integer = value;

    return r;
}


static void *
ngx_http_sandbox_mcp_redis_reply_nil(const redisReadTask *task)
{
    /* the task's type is that of its prefix ($-1, *-1): a nil is NIL, as
     * hiredis makes it */
    return ngx_http_sandbox_mcp_redis_reply_object(task, REDIS_REPLY_NIL, 0);
}


static void
ngx_http_sandbox_mcp_redis_reply_free(void *reply)
{
    size_t       i;
    redisReply  *r;

    r = reply;

    if (r == NULL) {
        return;
    }

    if (r->type == REDIS_REPLY_ARRAY && r->element) {
        for (i = 0; i < r->elements; i++) {
            ngx_http_sandbox_mcp_redis_reply_free(r->element[i]);
        }
    }

    free(r);
}


redisReplyObjectFunctions  ngx_http_sandbox_mcp_redis_reply_fns = {
    ngx_http_sandbox_mcp_redis_reply_string,
    ngx_http_sandbox_mcp_redis_reply_array,
    ngx_http_sandbox_mcp_redis_reply_integer,
    ngx_http_sandbox_mcp_redis_reply_nil,
    ngx_http_sandbox_mcp_redis_reply_free
};


/* ac (connecting) as the link's connection: AUTH, ROLE through Sentinel,
 * the scripts, the connect timer */
void
ngx_http_sandbox_mcp_redis_open(ngx_http_sandbox_mcp_redis_link_t *link,
    redisAsyncContext *ac)
{
    ngx_http_sandbox_mcp_main_conf_t  *mcf;

    mcf = ngx_http_sandbox_mcp_redis_conf;

    if (ac == NULL) {
        ngx_log_error(NGX_LOG_ALERT, ngx_http_sandbox_mcp_redis_log, 0,
                      "sandbox_mcp: redis %s: out of memory", link->c.role);
        ngx_http_sandbox_mcp_redis_schedule(link);
        return;
    }

    if (link->c.ac) {
        /* never two contexts on one link (the one there stays) */
        ngx_log_error(NGX_LOG_ALERT, ngx_http_sandbox_mcp_redis_log, 0,
                      "sandbox_mcp: redis %s: a second connection refused",
                      link->c.role);
        redisAsyncFree(ac);
        return;
    }

    link->verified = 0;

    if (ac->err) {
        if (link->failures++ == 0) {
            ngx_log_error(NGX_LOG_ERR, ngx_http_sandbox_mcp_redis_log, 0,
                          "sandbox_mcp: redis %s: connect to \"%V\" "
                          "failed: %s", link->c.role, &link->where,
                          ac->errstr);
        }

        redisAsyncFree(ac);
        ngx_http_sandbox_mcp_redis_schedule(link);
        return;
    }

    if (ngx_http_sandbox_mcp_redis_attach(&link->c, ac,
                                          ngx_http_sandbox_mcp_redis_log)
        != NGX_OK)
    {
        redisAsyncFree(ac);
        ngx_http_sandbox_mcp_redis_schedule(link);
        return;
    }

    ac->c.reader->fn = &ngx_http_sandbox_mcp_redis_reply_fns;

    /* a peer gone without a word (a host down) is found out; not on a
     * Unix socket, where it fails and hiredis takes that for an error of
     * the connection */
    if (ac->c.connection_type == REDIS_CONN_TCP) {
        (void) redisEnableKeepAlive(&ac->c);
    }

    link->connect_start = ngx_current_msec;

    redisAsyncSetConnectCallback(ac, ngx_http_sandbox_mcp_redis_on_connect);
    redisAsyncSetDisconnectCallback(ac,
                                    ngx_http_sandbox_mcp_redis_on_disconnect);

    /* AUTH first: every later command of the connection depends on it */
    if (mcf->redis_password) {
        redisAsyncCommand(ac, ngx_http_sandbox_mcp_redis_auth_done, link,
                          "AUTH %b", mcf->redis_password,
                          mcf->redis_password_len);
    }

    if (mcf->sentinel) {
        ngx_http_sandbox_mcp_redis_sentinel_role(ac, link);
    }

    if (!link->subscriber) {
        ngx_http_sandbox_mcp_redis_load_scripts(ac);
    }

    ngx_http_sandbox_mcp_redis_arm(link);
}


static void
ngx_http_sandbox_mcp_redis_connect(ngx_http_sandbox_mcp_redis_link_t *link)
{
    ngx_http_sandbox_mcp_main_conf_t  *mcf;

    mcf = ngx_http_sandbox_mcp_redis_conf;

    if (mcf->sentinel) {
        link->asked = 0;
        ngx_http_sandbox_mcp_redis_sentinel_ask(link);
        return;
    }

    ngx_http_sandbox_mcp_redis_open(link, mcf->redis_unix.len
        ? redisAsyncConnectUnix((char *) mcf->redis_unix.data)
        : redisAsyncConnect((char *) mcf->redis_host.data,
                            (int) mcf->redis_port));
}


static void
ngx_http_sandbox_mcp_redis_link_init(ngx_http_sandbox_mcp_redis_link_t *link,
    const char *role, ngx_uint_t subscriber)
{
    ngx_memzero(link, sizeof(ngx_http_sandbox_mcp_redis_link_t));

    link->c.role = role;
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

    link->where = ngx_http_sandbox_mcp_redis_conf->redis;

    ngx_http_sandbox_mcp_redis_sentinel_init(link);
}


ngx_int_t
ngx_http_sandbox_mcp_redis_init_worker(ngx_cycle_t *cycle,
    ngx_http_sandbox_mcp_main_conf_t *mcf,
    ngx_http_sandbox_mcp_script_t **scripts)
{
    ngx_http_sandbox_mcp_redis_conf = mcf;
    ngx_http_sandbox_mcp_redis_log = cycle->log;
    ngx_http_sandbox_mcp_redis_exiting = 0;
    ngx_http_sandbox_mcp_redis_nlisteners = 0;

    ngx_http_sandbox_mcp_redis_commands_init(cycle, scripts);

    ngx_http_sandbox_mcp_redis_link_init(&ngx_http_sandbox_mcp_cmd_link,
                                         "commands", 0);
    ngx_http_sandbox_mcp_redis_link_init(&ngx_http_sandbox_mcp_sub_link,
                                         "pubsub", 1);

    return NGX_OK;
}


void
ngx_http_sandbox_mcp_redis_start(void)
{
    if (ngx_http_sandbox_mcp_redis_conf->sentinel) {
        ngx_http_sandbox_mcp_redis_sentinel_start();
    }

    ngx_http_sandbox_mcp_redis_connect(&ngx_http_sandbox_mcp_cmd_link);
    ngx_http_sandbox_mcp_redis_connect(&ngx_http_sandbox_mcp_sub_link);
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

    ngx_http_sandbox_mcp_redis_sentinel_close(link);

    if (link->c.ac) {
        redisAsyncFree(link->c.ac);
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

    ngx_http_sandbox_mcp_redis_commands_lost();

    ngx_http_sandbox_mcp_redis_link_close(&ngx_http_sandbox_mcp_cmd_link);
    ngx_http_sandbox_mcp_redis_link_close(&ngx_http_sandbox_mcp_sub_link);

    if (ngx_http_sandbox_mcp_redis_conf->sentinel) {
        ngx_http_sandbox_mcp_redis_sentinel_stop();
    }
}



