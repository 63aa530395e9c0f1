/*
 * MCP sessions, kept in Redis (mcp:{id}, with a TTL) so that any worker of
 * any nginx instance serves them: initialize creates one, every later
 * request looks it up (refreshing it; for a lone opencode_get_result the
 * run's HGETALL goes along, one round trip), DELETE ends it.  The protocol
 * versions spoken.
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


/*
 * The session lookup's answer: NGX_DECLINED when the session is the
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
        return ngx_http_sandbox_mcp_send_error(r, NGX_HTTP_NOT_FOUND,
                                      NGX_HTTP_SANDBOX_MCP_SESSION_NOT_FOUND,
                                      "Session not found");
    }

    if (ctx->initialize) {
        return ngx_http_sandbox_mcp_send_error(r, NGX_HTTP_BAD_REQUEST,
                                      NGX_HTTP_SANDBOX_MCP_INVALID_REQUEST,
                                      "Invalid Request: this session is "
                                      "already initialized");
    }

    /* the negotiated version, or the spec's fallback */
    ctx->version.len = reply->len;
    ctx->version.data = ngx_pnalloc(r->pool, reply->len);
    if (ctx->version.data == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_memcpy(ctx->version.data, reply->str, reply->len);

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
 * The session lookup and the tool's read (HGETALL of the run), sent at
 * once: one round trip.  Reply 0 is the session's, reply 1 the run's,
 * which waits for it.  The run's reply is dropped unread (the command
 * cancelled) when the session is refused.
 */
static void
ngx_http_sandbox_mcp_session_read(void *data, ngx_uint_t i,
    redisReply *reply)
{
    ngx_http_sandbox_mcp_ctx_t *ctx = data;

    ngx_int_t  rc;

    if (i == 1) {
        ctx->cmd = NULL;
        ngx_http_sandbox_mcp_session_dispatch(ctx, reply);
        return;
    }

    if (reply && reply->type == REDIS_REPLY_ERROR
        && reply->len >= sizeof("NOSCRIPT") - 1
        && ngx_strncmp(reply->str, "NOSCRIPT", sizeof("NOSCRIPT") - 1) == 0)
    {
        /* Redis lost the scripts: the lookup alone, which loads them */
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

    rc = ngx_http_sandbox_mcp_session_known(ctx, reply);

    if (rc != NGX_DECLINED) {
        ngx_http_sandbox_mcp_redis_cancel(ctx->cmd);
        ctx->cmd = NULL;
        ngx_http_sandbox_mcp_finalize(ctx, rc);
    }

    /* the session is known: the run's reply comes next */
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
 * The session script's KEYS (2) and ARGV (3): NGX_DECLINED for an id we
 * never issue (64 hex digits), NGX_ERROR.
 */
static ngx_int_t
ngx_http_sandbox_mcp_session_args(ngx_http_sandbox_mcp_ctx_t *ctx,
    ngx_str_t *argv)
{
    u_char                           *p;
    ngx_http_request_t               *r;
    ngx_http_sandbox_mcp_loc_conf_t  *lcf;

    r = ctx->request;
    lcf = ngx_http_get_module_loc_conf(r, ngx_http_sandbox_mcp_module);

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

    if (ngx_http_sandbox_mcp_redis_key(r->pool, &argv[0],
                                       SMCP_KEY_MCP_SESSION, &ctx->session_id)
        != NGX_OK
        || ngx_http_sandbox_mcp_redis_key(r->pool, &argv[1], SMCP_KEY_REVOKED,
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
    ngx_int_t                       rc;
    ngx_str_t                       argv[10];
    ngx_uint_t                      argc[2];
    ngx_http_sandbox_mcp_script_t  *script;

    script = &ngx_http_sandbox_mcp_script_session_touch;

    /* what the tool reads goes along: EVALSHA session_touch, HGETALL */

    rc = ngx_http_sandbox_mcp_get_result_key(ctx, &argv[9]);

    if (rc == NGX_DECLINED) {
        return ngx_http_sandbox_mcp_session_command(ctx, script,
                                          ngx_http_sandbox_mcp_session_found);
    }

    if (rc == NGX_OK) {
        rc = ngx_http_sandbox_mcp_session_args(ctx, &argv[3]);
    }

    if (rc == NGX_DECLINED) {
        return ngx_http_sandbox_mcp_session_unknown(ctx);
    }

    if (rc != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    argc[0] = 8;
    argc[1] = 2;

    ngx_str_set(&argv[0], "EVALSHA");
    argv[1].data = (u_char *) script->sha1;
    argv[1].len = sizeof(script->sha1) - 1;
    ngx_str_set(&argv[2], "2");
    ngx_str_set(&argv[8], "HGETALL");

    ctx->cmd = ngx_http_sandbox_mcp_redis_each(
                   ngx_http_sandbox_mcp_session_read, ctx, 2, argc, argv);

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
