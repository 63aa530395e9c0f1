/*
 * The revoked token ids, mirrored from the hash `revoked`: the pub/sub
 * connection SUBSCRIBEs to the channel `revoked` and, once subscribed, the
 * whole hash is read (HGETALL on the command connection) and merged in.
 * Until both happened since the last (re)connect the set is not trusted
 * ("loaded" is 0) and requests check their token in Redis instead.
 */

#include "ngx_http_sandbox_mcp_revoked.h"
#include "ngx_http_sandbox_mcp_redis.h"
#include "ngx_http_sandbox_mcp_defaults.h"

#include "smcp_revoked.h"


typedef struct {
    smcp_revoked_t                     *set;
    ngx_str_t                           key;        /* <prefix>revoked */
    ngx_str_t                           channel;
    ngx_http_sandbox_mcp_redis_cmd_t   *cmd;        /* HGETALL in flight */
    ngx_log_t                          *log;
    unsigned                            subscribed:1;
    unsigned                            loaded:1;
} ngx_http_sandbox_mcp_revoked_t;


static ngx_http_sandbox_mcp_revoked_t     ngx_http_sandbox_mcp_revoked_ids;


static void
ngx_http_sandbox_mcp_revoked_reply(void *data, redisReply *reply)
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
        ngx_log_error(NGX_LOG_WARN, rv->log, 0,
                      "sandbox_mcp: redis: %ui revoked token entries not "
                      "kept (malformed, or over %d)", bad,
                      NGX_HTTP_SANDBOX_MCP_REVOKED_MAX);
    }

    /* trusted only if no revocation can have been missed meanwhile */
    rv->loaded = rv->subscribed;

    ngx_log_error(NGX_LOG_INFO, rv->log, 0,
                  "sandbox_mcp: redis: %uz revoked token ids loaded",
                  smcp_revoked_count(rv->set));
}


static void
ngx_http_sandbox_mcp_revoked_load(void)
{
    ngx_str_t                        argv[2];
    ngx_http_sandbox_mcp_revoked_t  *rv;

    rv = &ngx_http_sandbox_mcp_revoked_ids;

    if (rv->set == NULL || !rv->subscribed || rv->loaded || rv->cmd) {
        return;
    }

    ngx_str_set(&argv[0], "HGETALL");
    argv[1] = rv->key;

    /* NULL: the command connection is away; READY tries again */
    rv->cmd = ngx_http_sandbox_mcp_redis_command(
                  ngx_http_sandbox_mcp_revoked_reply, rv, 2, argv);
}


/* a message "<jti> <exp>" on the channel `revoked` */
static void
ngx_http_sandbox_mcp_revoked_message(ngx_str_t *msg)
{
    size_t       len;
    int64_t      exp;
    const char  *jti;

    if (smcp_revoked_parse((char *) msg->data, msg->len, &jti, &len, &exp)
        != SMCP_OK
        || smcp_revoked_add(ngx_http_sandbox_mcp_revoked_ids.set, jti, len,
                            exp, ngx_time())
           != SMCP_OK)
    {
        ngx_log_error(NGX_LOG_WARN, ngx_http_sandbox_mcp_revoked_ids.log, 0,
                      "sandbox_mcp: redis: a revocation message was not "
                      "kept (malformed, or over %d)",
                      NGX_HTTP_SANDBOX_MCP_REVOKED_MAX);
    }
}


static void
ngx_http_sandbox_mcp_revoked_listener(ngx_http_sandbox_mcp_redis_event_e ev,
    ngx_str_t *channel, ngx_str_t *message)
{
    ngx_http_sandbox_mcp_revoked_t  *rv;

    rv = &ngx_http_sandbox_mcp_revoked_ids;

    switch (ev) {

    case NGX_HTTP_SANDBOX_MCP_REDIS_UNSUBSCRIBED:
        /* revocations published from now on would be missed */
        rv->subscribed = 0;
        rv->loaded = 0;
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

    default: /* NGX_HTTP_SANDBOX_MCP_REDIS_LOST: the HGETALL failed too */
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

    return rv->loaded ? NGX_OK : NGX_AGAIN;
}


ngx_int_t
ngx_http_sandbox_mcp_revoked_init_worker(ngx_cycle_t *cycle)
{
    ngx_http_sandbox_mcp_revoked_t  *rv;

    rv = &ngx_http_sandbox_mcp_revoked_ids;

    ngx_memzero(rv, sizeof(ngx_http_sandbox_mcp_revoked_t));
    rv->log = cycle->log;

    if (ngx_http_sandbox_mcp_redis_key(cycle->pool, &rv->key,
                                       SMCP_KEY_REVOKED, NULL)
        != NGX_OK
        || ngx_http_sandbox_mcp_redis_key(cycle->pool, &rv->channel,
                                          SMCP_CHAN_REVOKED, NULL)
           != NGX_OK)
    {
        return NGX_ERROR;
    }

    /* without it every token is checked in Redis (NGX_AGAIN) */
    rv->set = smcp_revoked_create(NGX_HTTP_SANDBOX_MCP_REVOKED_MAX);

    return ngx_http_sandbox_mcp_redis_listen(&rv->channel, 0,
                                         ngx_http_sandbox_mcp_revoked_listener);
}


void
ngx_http_sandbox_mcp_revoked_exit_worker(ngx_cycle_t *cycle)
{
    smcp_revoked_free(ngx_http_sandbox_mcp_revoked_ids.set);
    ngx_http_sandbox_mcp_revoked_ids.set = NULL;
}
