/*
 * MCP sessions, kept in Redis (mcp:{id}, with a TTL) so that any worker of
 * any nginx instance serves them: initialize creates one, every later
 * request looks it up (plain reads, pipelined; session_touch refreshes it
 * once less than half of its TTL is left; for a lone opencode_get_result
 * the run's HGETALL goes along, one round trip), DELETE ends it.  The
 * protocol versions spoken.
 */

#include "ngx_http_sandbox_mcp_session.h"
#include "ngx_http_sandbox_mcp_auth.h"
#include "ngx_http_sandbox_mcp_request.h"
#include "ngx_http_sandbox_mcp_http.h"
#include "ngx_http_sandbox_mcp_redis.h"
#include "ngx_http_sandbox_mcp_scripts.h"
#include "ngx_http_sandbox_mcp_stream.h"
#include "ngx_http_sandbox_mcp_tool_result.h"
#include "ngx_http_sandbox_mcp_defaults.h"


static ngx_int_t ngx_http_sandbox_mcp_session_command(
    ngx_http_sandbox_mcp_ctx_t *ctx, ngx_http_sandbox_mcp_script_t *script,
    ngx_http_sandbox_mcp_redis_handler_pt handler);
static ngx_int_t ngx_http_sandbox_mcp_session_accept(
    ngx_http_sandbox_mcp_ctx_t *ctx, u_char *version, size_t len);


static ngx_str_t  ngx_http_sandbox_mcp_versions[] = {
    ngx_string("2025-11-25"),
    ngx_string("2025-06-18"),
    ngx_string("2025-03-26"),
    ngx_null_string
};

static ngx_str_t  ngx_http_sandbox_mcp_batch_version =
    ngx_string("2025-03-26");


ngx_uint_t
ngx_http_sandbox_mcp_version_supported(ngx_str_t *v)
{
    ngx_str_t  *s;

    for (s = ngx_http_sandbox_mcp_versions; s->len; s++) {
        if (s->len == v->len && ngx_strncmp(s->data, v->data, v->len) == 0) {
            return 1;
        }
    }

    return 0;
}


ngx_uint_t
ngx_http_sandbox_mcp_is_batch_version(ngx_str_t *v)
{
    return v->len == ngx_http_sandbox_mcp_batch_version.len
           && ngx_strncmp(v->data, ngx_http_sandbox_mcp_batch_version.data,
                          v->len) == 0;
}


/* the status REVOKED of a session script: NGX_OK */
static ngx_int_t
ngx_http_sandbox_mcp_is_revoked(redisReply *reply)
{
    if (reply == NULL || reply->type != REDIS_REPLY_STATUS
        || reply->len != sizeof("REVOKED") - 1
        || ngx_strncmp(reply->str, "REVOKED", reply->len) != 0)
    {
        return NGX_DECLINED;
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_sandbox_mcp_revoked_answer(ngx_http_sandbox_mcp_ctx_t *ctx)
{
    ngx_log_error(NGX_LOG_INFO, ctx->request->connection->log, 0,
                  "sandbox_mcp: token refused: token revoked");

    return ngx_http_sandbox_mcp_unauthorized(ctx->request, "token revoked", 1);
}


/* a session script found the token in the hash `revoked`: 401 */
static ngx_uint_t
ngx_http_sandbox_mcp_reply_revoked(ngx_http_sandbox_mcp_ctx_t *ctx,
    redisReply *reply)
{
    if (ngx_http_sandbox_mcp_is_revoked(reply) != NGX_OK) {
        return 0;
    }

    ngx_http_sandbox_mcp_finalize(ctx,
                                  ngx_http_sandbox_mcp_revoked_answer(ctx));

    return 1;
}


static void
ngx_http_sandbox_mcp_session_created(void *data, redisReply *reply)
{
    ngx_http_sandbox_mcp_ctx_t *ctx = data;

    ngx_int_t  rc;

    ctx->cmd = NULL;

    if (ngx_http_sandbox_mcp_reply_revoked(ctx, reply)) {
        return;
    }

    if (reply == NULL || reply->type != REDIS_REPLY_INTEGER
        || reply->integer != 1)
    {
        if (reply && reply->type == REDIS_REPLY_ERROR) {
            ngx_log_error(NGX_LOG_ERR, ctx->request->connection->log, 0,
                          "sandbox_mcp: redis: %s", reply->str);
        }

        ngx_http_sandbox_mcp_finalize(ctx,
                          ngx_http_sandbox_mcp_send_unavailable(ctx->request));
        return;
    }

    rc = ctx->next(ctx);

    if (rc != NGX_DONE) {
        ngx_http_sandbox_mcp_finalize(ctx, rc);
    }
}


ngx_int_t
ngx_http_sandbox_mcp_session_create(ngx_http_sandbox_mcp_ctx_t *ctx)
{
    json_t                           *params, *client, *pv;
    const char                       *name, *version;
    ngx_str_t                         key, v, argv[9];
    ngx_http_request_t               *r;
    ngx_http_sandbox_mcp_loc_conf_t  *lcf;
    char                              sid[NGX_HTTP_SANDBOX_MCP_SESSION_ID_LEN
                                          + 1];

    r = ctx->request;
    lcf = ngx_http_get_module_loc_conf(r, ngx_http_sandbox_mcp_module);

    params = json_object_get(ctx->body, "params");
    pv = json_object_get(params, "protocolVersion");
    client = json_object_get(params, "clientInfo");

    /* the client's version if we speak it, else our latest */

    v.data = (u_char *) json_string_value(pv);
    v.len = v.data ? json_string_length(pv) : 0;

    ctx->version = (v.len && ngx_http_sandbox_mcp_version_supported(&v))
                   ? v : ngx_http_sandbox_mcp_versions[0];

    /* 256 random bits */
    if (smcp_random_hex(sid, NGX_HTTP_SANDBOX_MCP_SESSION_ID_LEN / 2)
        != SMCP_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ctx->session_id.len = NGX_HTTP_SANDBOX_MCP_SESSION_ID_LEN;
    ctx->session_id.data = ngx_pnalloc(r->pool, ctx->session_id.len);
    if (ctx->session_id.data == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_memcpy(ctx->session_id.data, sid, ctx->session_id.len);

    if (ngx_http_sandbox_mcp_redis_key(r->pool, &key, SMCP_KEY_MCP_SESSION,
                                       &ctx->session_id)
        != NGX_OK
        || ngx_http_sandbox_mcp_redis_key(r->pool, &argv[1], SMCP_KEY_REVOKED,
                                          NULL)
           != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    name = json_string_value(json_object_get(client, "name"));
    version = json_string_value(json_object_get(client, "version"));

    argv[0] = key;
    argv[2] = ctx->tenant;
    argv[3] = ctx->version;
    argv[4].data = (u_char *) (name ? name : "");
    argv[4].len = ngx_strlen(argv[4].data);
    argv[5].data = (u_char *) (version ? version : "");
    argv[5].len = ngx_strlen(argv[5].data);
    argv[6] = ngx_http_sandbox_mcp_redis_number(r->pool,
                                                (int64_t) ngx_time() * 1000);
    argv[7] = ngx_http_sandbox_mcp_redis_number(r->pool,
                                        (int64_t) lcf->session_ttl * 1000);
    argv[8] = ctx->jti;

    ctx->cmd = ngx_http_sandbox_mcp_redis_script(
                   &ngx_http_sandbox_mcp_script_session_create,
                   ngx_http_sandbox_mcp_session_created, ctx, 2, 9, argv);

    if (ctx->cmd == NULL) {
        return ngx_http_sandbox_mcp_send_unavailable(r);
    }

    return NGX_DONE;
}


/* unknown, expired, deleted, or another tenant's: the same answer */
static ngx_int_t
ngx_http_sandbox_mcp_session_not_found(ngx_http_sandbox_mcp_ctx_t *ctx)
{
    return ngx_http_sandbox_mcp_send_error(ctx->request, NGX_HTTP_NOT_FOUND,
                                      NGX_HTTP_SANDBOX_MCP_SESSION_NOT_FOUND,
                                      "Session not found");
}


/*
 * The session script's answer: NGX_DECLINED when the session is the
 * tenant's (ctx->version set), else what the request answers.
 */
static ngx_int_t
ngx_http_sandbox_mcp_session_known(ngx_http_sandbox_mcp_ctx_t *ctx,
    redisReply *reply)
{
    ngx_http_request_t  *r;

    r = ctx->request;

    if (ngx_http_sandbox_mcp_is_revoked(reply) == NGX_OK) {
        return ngx_http_sandbox_mcp_revoked_answer(ctx);
    }

    if (reply == NULL || reply->type == REDIS_REPLY_ERROR) {
        if (reply) {
            ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                          "sandbox_mcp: redis: %s", reply->str);
        }

        return ngx_http_sandbox_mcp_send_unavailable(r);
    }

    if (reply->type != REDIS_REPLY_STRING) {
        /* unknown, expired, deleted, or another tenant's */
        return ngx_http_sandbox_mcp_session_not_found(ctx);
    }

    return ngx_http_sandbox_mcp_session_accept(ctx, (u_char *) reply->str,
                                               reply->len);
}


/*
 * The session is the tenant's; version: its negotiated protocol version
 * ("" if none was stored).  NGX_DECLINED (ctx->version set), else what the
 * request answers.
 */
static ngx_int_t
ngx_http_sandbox_mcp_session_accept(ngx_http_sandbox_mcp_ctx_t *ctx,
    u_char *version, size_t len)
{
    ngx_http_request_t  *r;

    r = ctx->request;

    if (ctx->initialize) {
        return ngx_http_sandbox_mcp_send_error(r, NGX_HTTP_BAD_REQUEST,
                                      NGX_HTTP_SANDBOX_MCP_INVALID_REQUEST,
                                      "Invalid Request: this session is "
                                      "already initialized");
    }

    /* the negotiated version, or the spec's fallback */
    ctx->version.len = len;
    ctx->version.data = ngx_pnalloc(r->pool, len);
    if (ctx->version.data == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_memcpy(ctx->version.data, version, len);

    if (!ngx_http_sandbox_mcp_version_supported(&ctx->version)) {
        ctx->version = ngx_http_sandbox_mcp_batch_version;
    }

    /* batches belong to the negotiated 2025-03-26 only: no header turns
     * them on in a later version's session */
    ctx->batch_session = ngx_http_sandbox_mcp_is_batch_version(&ctx->version);

    if (ctx->header_version.len) {
        ctx->version = ctx->header_version;
    }

    return NGX_DECLINED;
}


/*
 * The session is known: its messages go.  run, if not NULL, is the run the
 * tool reads, read along with the session; it lives as long as its reply:
 * the tool takes it while the message is dispatched or never (a call still
 * pending then keeps the request, and ctx, alive).
 */
static void
ngx_http_sandbox_mcp_session_dispatch(ngx_http_sandbox_mcp_ctx_t *ctx,
    redisReply *run)
{
    ngx_int_t  rc;

    ctx->run_read = run;

    rc = ctx->next(ctx);

    ctx->run_read = NULL;

    if (rc != NGX_DONE) {
        ngx_http_sandbox_mcp_finalize(ctx, rc);
    }
}


static void
ngx_http_sandbox_mcp_session_found(void *data, redisReply *reply)
{
    ngx_http_sandbox_mcp_ctx_t *ctx = data;

    ngx_int_t  rc;

    ctx->cmd = NULL;

    rc = ngx_http_sandbox_mcp_session_known(ctx, reply);

    if (rc != NGX_DECLINED) {
        ngx_http_sandbox_mcp_finalize(ctx, rc);
        return;
    }

    ngx_http_sandbox_mcp_session_dispatch(ctx, NULL);
}


/*
 * The session lookup without a script, pipelined (one write, one round
 * trip): [HEXISTS revoked jti] HMGET mcp:{sid} tenant protocol, PTTL
 * mcp:{sid} [HGETALL run:{id}].  It refuses what session_touch refuses, in
 * its order: a revoked token, then a session unknown or another tenant's
 * (the same 404); the commands still to answer are dropped unread then.
 * A session with less than half of its TTL left (or none, or gone since
 * the HMGET) is looked up again by session_touch, which refreshes it
 * atomically with its checks: once per half TTL, and the run's reply is
 * dropped (the tool reads the run itself).  i is counted as if HEXISTS
 * had been sent.
 */
static void
ngx_http_sandbox_mcp_session_read(void *data, ngx_uint_t i,
    redisReply *reply)
{
    ngx_http_sandbox_mcp_ctx_t *ctx = data;

    ngx_int_t                         rc;
    long long                         ttl;
    redisReply                       *t, *v;
    ngx_http_sandbox_mcp_loc_conf_t  *lcf;

    if (!ctx->lookup_revoked) {
        i++;
    }

    if (i == 3) {
        /* the run, the session being the tenant's */
        ctx->cmd = NULL;
        ngx_http_sandbox_mcp_session_dispatch(ctx, reply);
        return;
    }

    if (reply == NULL || reply->type == REDIS_REPLY_ERROR) {
        /* 503, the error logged */
        rc = ngx_http_sandbox_mcp_session_known(ctx, reply);
        goto refused;
    }

    switch (i) {

    case 0:     /* HEXISTS revoked jti */

        if (reply->type != REDIS_REPLY_INTEGER) {
            rc = ngx_http_sandbox_mcp_send_unavailable(ctx->request);
            goto refused;
        }

        if (reply->integer == 0) {
            return;
        }

        rc = ngx_http_sandbox_mcp_revoked_answer(ctx);
        goto refused;

    case 1:     /* HMGET mcp:{sid} tenant protocol */

        if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2) {
            rc = ngx_http_sandbox_mcp_send_unavailable(ctx->request);
            goto refused;
        }

        t = reply->element[0];
        v = reply->element[1];

        if (t->type != REDIS_REPLY_STRING || t->len != ctx->tenant.len
            || ngx_memcmp(t->str, ctx->tenant.data, t->len) != 0)
        {
            rc = ngx_http_sandbox_mcp_session_not_found(ctx);
            goto refused;
        }

        if (v->type == REDIS_REPLY_STRING) {
            rc = ngx_http_sandbox_mcp_session_accept(ctx, (u_char *) v->str,
                                                     v->len);

        } else {
            rc = ngx_http_sandbox_mcp_session_accept(ctx, (u_char *) "", 0);
        }

        if (rc != NGX_DECLINED) {
            goto refused;
        }

        return;

    default:    /* PTTL mcp:{sid} */

        if (reply->type != REDIS_REPLY_INTEGER) {
            rc = ngx_http_sandbox_mcp_send_unavailable(ctx->request);
            goto refused;
        }

        lcf = ngx_http_get_module_loc_conf(ctx->request,
                                           ngx_http_sandbox_mcp_module);
        ttl = (long long) lcf->session_ttl * 1000;

        /* session_touch's PTTL < ttl / 2, in whole milliseconds */
        if (reply->integer < (ttl + 1) / 2) {
            ngx_http_sandbox_mcp_redis_cancel(ctx->cmd);
            ctx->cmd = NULL;

            rc = ngx_http_sandbox_mcp_session_command(ctx,
                                   &ngx_http_sandbox_mcp_script_session_touch,
                                   ngx_http_sandbox_mcp_session_found);
            if (rc != NGX_DONE) {
                ngx_http_sandbox_mcp_finalize(ctx, rc);
            }

            return;
        }

        if (ctx->lookup_run) {
            /* the run's reply comes next */
            return;
        }

        ctx->cmd = NULL;
        ngx_http_sandbox_mcp_session_dispatch(ctx, NULL);
        return;
    }

refused:

    ngx_http_sandbox_mcp_redis_cancel(ctx->cmd);
    ctx->cmd = NULL;
    ngx_http_sandbox_mcp_finalize(ctx, rc);
}


static void
ngx_http_sandbox_mcp_session_deleted(void *data, redisReply *reply)
{
    ngx_http_sandbox_mcp_ctx_t *ctx = data;

    ngx_http_request_t  *r;

    r = ctx->request;
    ctx->cmd = NULL;

    if (ngx_http_sandbox_mcp_reply_revoked(ctx, reply)) {
        return;
    }

    if (reply == NULL || reply->type != REDIS_REPLY_INTEGER) {
        ngx_http_sandbox_mcp_finalize(ctx,
                                      ngx_http_sandbox_mcp_send_unavailable(r));
        return;
    }

    if (reply->integer == 0) {
        ngx_http_sandbox_mcp_finalize(ctx,
            ngx_http_sandbox_mcp_send_error(r, NGX_HTTP_NOT_FOUND,
                                      NGX_HTTP_SANDBOX_MCP_SESSION_NOT_FOUND,
                                      "Session not found"));
        return;
    }

    /* its subscriptions and level go, its GET stream ends */
    ngx_http_sandbox_mcp_stream_forget(ctx);

    ngx_http_sandbox_mcp_finalize(ctx,
                      ngx_http_sandbox_mcp_send_json(r, NGX_HTTP_OK, NULL));
}


/*
 * The session's key, mcp:{sid}: NGX_DECLINED for an id we never issue (64
 * hex digits), NGX_ERROR.
 */
static ngx_int_t
ngx_http_sandbox_mcp_session_key(ngx_http_sandbox_mcp_ctx_t *ctx,
    ngx_str_t *key)
{
    u_char  *p;

    if (ctx->session_id.len != NGX_HTTP_SANDBOX_MCP_SESSION_ID_LEN) {
        return NGX_DECLINED;
    }

    for (p = ctx->session_id.data;
         p < ctx->session_id.data + ctx->session_id.len;
         p++)
    {
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f'))) {
            return NGX_DECLINED;
        }
    }

    if (ngx_http_sandbox_mcp_redis_key(ctx->request->pool, key,
                                       SMCP_KEY_MCP_SESSION, &ctx->session_id)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    return NGX_OK;
}


/*
 * The session script's KEYS (2) and ARGV (3): NGX_DECLINED for an id we
 * never issue (64 hex digits), NGX_ERROR.
 */
static ngx_int_t
ngx_http_sandbox_mcp_session_args(ngx_http_sandbox_mcp_ctx_t *ctx,
    ngx_str_t *argv)
{
    ngx_int_t                         rc;
    ngx_http_request_t               *r;
    ngx_http_sandbox_mcp_loc_conf_t  *lcf;

    r = ctx->request;
    lcf = ngx_http_get_module_loc_conf(r, ngx_http_sandbox_mcp_module);

    rc = ngx_http_sandbox_mcp_session_key(ctx, &argv[0]);

    if (rc != NGX_OK) {
        return rc;
    }

    if (ngx_http_sandbox_mcp_redis_key(r->pool, &argv[1], SMCP_KEY_REVOKED,
                                       NULL)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    argv[2] = ctx->tenant;
    argv[3] = ngx_http_sandbox_mcp_redis_number(r->pool,
                                        (int64_t) lcf->session_ttl * 1000);
    argv[4] = ctx->jti;

    return NGX_OK;
}


/* an id we never issued */
static ngx_int_t
ngx_http_sandbox_mcp_session_unknown(ngx_http_sandbox_mcp_ctx_t *ctx)
{
    if (ctx->initialize) {
        /* a stale id on initialize: start afresh */
        return ngx_http_sandbox_mcp_session_create(ctx);
    }

    return ngx_http_sandbox_mcp_send_error(ctx->request, NGX_HTTP_NOT_FOUND,
                                      NGX_HTTP_SANDBOX_MCP_SESSION_NOT_FOUND,
                                      "Session not found");
}


static ngx_int_t
ngx_http_sandbox_mcp_session_command(ngx_http_sandbox_mcp_ctx_t *ctx,
    ngx_http_sandbox_mcp_script_t *script,
    ngx_http_sandbox_mcp_redis_handler_pt handler)
{
    ngx_int_t  rc;
    ngx_str_t  argv[5];

    rc = ngx_http_sandbox_mcp_session_args(ctx, argv);

    if (rc == NGX_DECLINED) {
        return ngx_http_sandbox_mcp_session_unknown(ctx);
    }

    if (rc != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ctx->cmd = ngx_http_sandbox_mcp_redis_script(script, handler, ctx, 2, 5,
                                                 argv);

    if (ctx->cmd == NULL) {
        return ngx_http_sandbox_mcp_send_unavailable(ctx->request);
    }

    return NGX_DONE;
}


ngx_int_t
ngx_http_sandbox_mcp_session_lookup(ngx_http_sandbox_mcp_ctx_t *ctx)
{
    ngx_int_t    rc;
    ngx_str_t    key, *a, argv[11];
    ngx_uint_t   n, argc[4];

    rc = ngx_http_sandbox_mcp_session_key(ctx, &key);

    if (rc == NGX_DECLINED) {
        return ngx_http_sandbox_mcp_session_unknown(ctx);
    }

    if (rc != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    n = 0;
    a = argv;

    /* the token's jti, when the worker's revoked set is not current */

    ctx->lookup_revoked = ctx->jti.len ? 1 : 0;

    if (ctx->lookup_revoked) {
        ngx_str_set(&a[0], "HEXISTS");
        a[2] = ctx->jti;

        if (ngx_http_sandbox_mcp_redis_key(ctx->request->pool, &a[1],
                                           SMCP_KEY_REVOKED, NULL)
            != NGX_OK)
        {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        argc[n++] = 3;
        a += 3;
    }

    ngx_str_set(&a[0], "HMGET");
    a[1] = key;
    ngx_str_set(&a[2], "tenant");
    ngx_str_set(&a[3], "protocol");
    ngx_str_set(&a[4], "PTTL");
    a[5] = key;

    argc[n++] = 4;
    argc[n++] = 2;
    a += 6;

    /* what the tool reads goes along: HGETALL of the run */

    rc = ngx_http_sandbox_mcp_get_result_key(ctx, &a[1]);

    if (rc != NGX_OK && rc != NGX_DECLINED) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ctx->lookup_run = (rc == NGX_OK);

    if (ctx->lookup_run) {
        ngx_str_set(&a[0], "HGETALL");
        argc[n++] = 2;
    }

    ctx->cmd = ngx_http_sandbox_mcp_redis_each(
                   ngx_http_sandbox_mcp_session_read, ctx, n, argc, argv);

    if (ctx->cmd == NULL) {
        return ngx_http_sandbox_mcp_send_unavailable(ctx->request);
    }

    return NGX_DONE;
}


ngx_int_t
ngx_http_sandbox_mcp_session_delete(ngx_http_sandbox_mcp_ctx_t *ctx)
{
    return ngx_http_sandbox_mcp_session_command(ctx,
                                  &ngx_http_sandbox_mcp_script_session_delete,
                                  ngx_http_sandbox_mcp_session_deleted);
}
