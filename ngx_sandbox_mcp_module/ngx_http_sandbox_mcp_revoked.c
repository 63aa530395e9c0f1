/*
 * The revoked token ids, mirrored from the hash `revoked`: the pub/sub
 * connection SUBSCRIBEs to the channel `revoked` and, once subscribed, the
 * whole hash is read (revoked_load.lua on the command connection) and
 * merged in.  The set is trusted (it holds every live revocation) only
 * when both happened since the last (re)connect and every id was kept;
 * until then, and whenever an id could not be kept (more than
 * sandbox_mcp_revoked_max live ids), a token not found here is checked in
 * Redis instead (fail closed, never blocking: the session lookup's
 * HEXISTS, or ngx_http_sandbox_mcp_revoked_ask()), and the hash is read
 * again every NGX_HTTP_SANDBOX_MCP_REVOKED_RETRY until it fits.  The
 * worker's memory for it is bounded by the maximum
 * (smcp_revoked_max_bytes).
 */

#include "ngx_http_sandbox_mcp_revoked.h"
#include "ngx_http_sandbox_mcp_scripts.h"
#include "ngx_http_sandbox_mcp_defaults.h"

#include "smcp_revoked.h"


typedef struct {
    smcp_revoked_t                     *set;
    ngx_uint_t                          max;
    ngx_str_t                           key;        /* <prefix>revoked */
    ngx_str_t                           index;      /* ... revoked:exp */
    ngx_str_t                           channel;
    ngx_http_sandbox_mcp_redis_cmd_t   *cmd;        /* the load in flight */
    ngx_uint_t                          lost;       /* ids not kept: counts
                                                       up, never down */
    ngx_uint_t                          lost_at_load;
    ngx_event_t                         retry;
    ngx_log_t                          *log;
    unsigned                            subscribed:1;
    unsigned                            trusted:1;
    unsigned                            full:1;     /* said so in the log */
} ngx_http_sandbox_mcp_revoked_t;


typedef struct {
    ngx_http_sandbox_mcp_revoked_ask_pt     handler;
    void                                   *data;
} ngx_http_sandbox_mcp_revoked_asked_t;


static void ngx_http_sandbox_mcp_revoked_load(void);


static ngx_http_sandbox_mcp_revoked_t     ngx_http_sandbox_mcp_revoked_ids;


/* the set cannot hold the truth: Redis answers for it until it can */
static void
ngx_http_sandbox_mcp_revoked_overflow(ngx_http_sandbox_mcp_revoked_t *rv)
{
    rv->trusted = 0;

    if (!rv->full) {
        rv->full = 1;
        ngx_log_error(NGX_LOG_WARN, rv->log, 0,
                      "sandbox_mcp: redis: more revoked token ids than "
                      "sandbox_mcp_revoked_max (%ui): tokens are checked in "
                      "Redis until they are fewer", rv->max);
    }

    if (!rv->retry.timer_set) {
        ngx_add_timer(&rv->retry, NGX_HTTP_SANDBOX_MCP_REVOKED_RETRY);
    }
}


/* one id into the set; a valid one that cannot be kept (the set full, no
 * memory) leaves the set untrusted; an invalid one matches no token */
static void
ngx_http_sandbox_mcp_revoked_keep(ngx_http_sandbox_mcp_revoked_t *rv,
    const char *jti, size_t len, int64_t exp, int64_t now)
{
    if (smcp_revoked_add(rv->set, jti, len, exp, now) == SMCP_OK) {
        return;
    }

    if (!smcp_valid_jti(jti, len)) {
        ngx_log_error(NGX_LOG_WARN, rv->log, 0,
                      "sandbox_mcp: redis: a revoked token id that no "
                      "token can carry was not kept");
        return;
    }

    rv->lost++;
    ngx_http_sandbox_mcp_revoked_overflow(rv);
}


static void
ngx_http_sandbox_mcp_revoked_reply(void *data, redisReply *reply)
{
    ngx_http_sandbox_mcp_revoked_t *rv = data;

    size_t       i;
    int64_t      now;
    ngx_int_t    exp;
    redisReply  *k, *v;

    rv->cmd = NULL;

    if (reply == NULL) {
        /* read again when the command connection is back (READY) */
        return;
    }

    if (reply->type == REDIS_REPLY_ERROR) {
        ngx_log_error(NGX_LOG_WARN, rv->log, 0,
                      "sandbox_mcp: redis: reading the revoked token ids "
                      "failed: %s", reply->str);

        if (!rv->retry.timer_set) {
            ngx_add_timer(&rv->retry, NGX_HTTP_SANDBOX_MCP_REVOKED_RETRY);
        }

        return;
    }

    if (reply->type == REDIS_REPLY_INTEGER) {
        /* more ids than the worker holds */
        ngx_http_sandbox_mcp_revoked_overflow(rv);
        return;
    }

    if (reply->type != REDIS_REPLY_ARRAY) {
        return;
    }

    now = ngx_time();

    for (i = 0; i + 1 < reply->elements; i += 2) {
        k = reply->element[i];
        v = reply->element[i + 1];

        exp = (v->type == REDIS_REPLY_STRING)
              ? ngx_atoi((u_char *) v->str, v->len) : NGX_ERROR;

        if (k->type != REDIS_REPLY_STRING || exp == NGX_ERROR) {
            ngx_log_error(NGX_LOG_WARN, rv->log, 0,
                          "sandbox_mcp: redis: a malformed revoked token "
                          "entry was not kept");
            continue;
        }

        ngx_http_sandbox_mcp_revoked_keep(rv, k->str, k->len, exp, now);
    }

    /* trusted only if no revocation can have been missed meanwhile */
    if (rv->lost == rv->lost_at_load && rv->subscribed) {
        rv->trusted = 1;

        if (rv->full) {
            rv->full = 0;
            ngx_log_error(NGX_LOG_NOTICE, rv->log, 0,
                          "sandbox_mcp: redis: the revoked token ids fit "
                          "again (%uz)", smcp_revoked_count(rv->set));
        }
    }

    ngx_log_error(NGX_LOG_INFO, rv->log, 0,
                  "sandbox_mcp: redis: %uz revoked token ids loaded",
                  smcp_revoked_count(rv->set));
}


static void
ngx_http_sandbox_mcp_revoked_load(void)
{
    ngx_str_t                        argv[5];
    ngx_http_sandbox_mcp_revoked_t  *rv;
    u_char                           now[NGX_TIME_T_LEN], max[NGX_INT_T_LEN],
                                     prune[NGX_INT_T_LEN];

    rv = &ngx_http_sandbox_mcp_revoked_ids;

    if (rv->set == NULL || !rv->subscribed || rv->trusted || rv->cmd) {
        return;
    }

    /* the command is formatted at once: its arguments may live here */
    argv[0] = rv->key;
    argv[1] = rv->index;
    argv[2].data = now;
    argv[2].len = ngx_sprintf(now, "%T", ngx_time()) - now;
    argv[3].data = max;
    argv[3].len = ngx_sprintf(max, "%ui", rv->max) - max;
    argv[4].data = prune;
    argv[4].len = ngx_sprintf(prune, "%d",
                              NGX_HTTP_SANDBOX_MCP_REVOKED_PRUNE) - prune;

    rv->lost_at_load = rv->lost;

    /* NULL: the command connection is away; READY tries again */
    rv->cmd = ngx_http_sandbox_mcp_redis_script(
                  &ngx_http_sandbox_mcp_script_revoked_load,
                  ngx_http_sandbox_mcp_revoked_reply, rv, 2, 5, argv);
}


static void
ngx_http_sandbox_mcp_revoked_retry(ngx_event_t *ev)
{
    ngx_http_sandbox_mcp_revoked_load();
}


/* a message "<jti> <exp>" on the channel `revoked` */
static void
ngx_http_sandbox_mcp_revoked_message(ngx_str_t *msg)
{
    size_t                           len;
    int64_t                          exp;
    const char                      *jti;
    ngx_http_sandbox_mcp_revoked_t  *rv;

    rv = &ngx_http_sandbox_mcp_revoked_ids;

    if (smcp_revoked_parse((char *) msg->data, msg->len, &jti, &len, &exp)
        != SMCP_OK)
    {
        ngx_log_error(NGX_LOG_WARN, rv->log, 0,
                      "sandbox_mcp: redis: a malformed revocation message "
                      "was not kept");
        return;
    }

    ngx_http_sandbox_mcp_revoked_keep(rv, jti, len, exp, ngx_time());
}


static void
ngx_http_sandbox_mcp_revoked_listener(ngx_http_sandbox_mcp_redis_event_e ev,
    ngx_str_t *channel, ngx_str_t *message)
{
    ngx_http_sandbox_mcp_revoked_t  *rv;

    rv = &ngx_http_sandbox_mcp_revoked_ids;

    if (rv->set == NULL) {
        return;
    }

    switch (ev) {

    case NGX_HTTP_SANDBOX_MCP_REDIS_UNSUBSCRIBED:
        /* revocations published from now on would be missed */
        rv->subscribed = 0;
        rv->trusted = 0;
        break;

    case NGX_HTTP_SANDBOX_MCP_REDIS_SUBSCRIBED:
        /* listening: now what was revoked before can be read */
        rv->subscribed = 1;
        ngx_http_sandbox_mcp_revoked_load();
        break;

    case NGX_HTTP_SANDBOX_MCP_REDIS_READY:
        ngx_http_sandbox_mcp_revoked_load();
        break;

    case NGX_HTTP_SANDBOX_MCP_REDIS_MESSAGE:
        ngx_http_sandbox_mcp_revoked_message(message);
        break;

    default: /* NGX_HTTP_SANDBOX_MCP_REDIS_LOST: the load failed too */
        break;
    }
}


ngx_int_t
ngx_http_sandbox_mcp_revoked(ngx_str_t *jti)
{
    ngx_http_sandbox_mcp_revoked_t  *rv;

    rv = &ngx_http_sandbox_mcp_revoked_ids;

    if (rv->set == NULL) {
        return NGX_AGAIN;
    }

    if (smcp_revoked_has(rv->set, (char *) jti->data, jti->len, ngx_time())) {
        return NGX_DECLINED;
    }

    return rv->trusted ? NGX_OK : NGX_AGAIN;
}


static void
ngx_http_sandbox_mcp_revoked_answer(void *data, redisReply *reply)
{
    ngx_http_sandbox_mcp_revoked_asked_t *a = data;

    a->handler(a->data,
               (reply == NULL || reply->type != REDIS_REPLY_INTEGER)
               ? NGX_ERROR
               : reply->integer ? NGX_DECLINED : NGX_OK);
}


ngx_http_sandbox_mcp_redis_cmd_t *
ngx_http_sandbox_mcp_revoked_ask(ngx_pool_t *pool, ngx_str_t *jti,
    ngx_http_sandbox_mcp_revoked_ask_pt handler, void *data)
{
    ngx_str_t                              argv[3];
    ngx_http_sandbox_mcp_revoked_asked_t  *a;

    a = ngx_palloc(pool, sizeof(ngx_http_sandbox_mcp_revoked_asked_t));
    if (a == NULL) {
        return NULL;
    }

    a->handler = handler;
    a->data = data;

    ngx_str_set(&argv[0], "HEXISTS");
    argv[1] = ngx_http_sandbox_mcp_revoked_ids.key;
    argv[2] = *jti;

    return ngx_http_sandbox_mcp_redis_command(
               ngx_http_sandbox_mcp_revoked_answer, a, 3, argv);
}


ngx_int_t
ngx_http_sandbox_mcp_revoked_init_worker(ngx_cycle_t *cycle,
    ngx_uint_t max)
{
    ngx_http_sandbox_mcp_revoked_t  *rv;

    rv = &ngx_http_sandbox_mcp_revoked_ids;

    ngx_memzero(rv, sizeof(ngx_http_sandbox_mcp_revoked_t));
    rv->log = cycle->log;
    rv->max = max;

    rv->retry.handler = ngx_http_sandbox_mcp_revoked_retry;
    rv->retry.log = cycle->log;
    rv->retry.data = rv;
    rv->retry.cancelable = 1;

    if (ngx_http_sandbox_mcp_redis_key(cycle->pool, &rv->key,
                                       SMCP_KEY_REVOKED, NULL)
        != NGX_OK
        || ngx_http_sandbox_mcp_redis_key(cycle->pool, &rv->index,
                                          SMCP_KEY_REVOKED_EXP, NULL)
           != NGX_OK
        || ngx_http_sandbox_mcp_redis_key(cycle->pool, &rv->channel,
                                          SMCP_CHAN_REVOKED, NULL)
           != NGX_OK)
    {
        return NGX_ERROR;
    }

    /* without it (max 0, or no memory) every token is checked in Redis */
    rv->set = max ? smcp_revoked_create(max) : NULL;

    return ngx_http_sandbox_mcp_redis_listen(&rv->channel, 0,
                                         ngx_http_sandbox_mcp_revoked_listener);
}


void
ngx_http_sandbox_mcp_revoked_exit_worker(ngx_cycle_t *cycle)
{
    ngx_http_sandbox_mcp_revoked_t  *rv;

    rv = &ngx_http_sandbox_mcp_revoked_ids;

    if (rv->retry.timer_set) {
        ngx_del_timer(&rv->retry);
    }

    smcp_revoked_free(rv->set);
    rv->set = NULL;
}
