/*
 * MCP sessions, kept in Redis (mcp:{id}, with a TTL) so that any worker of
 * any nginx instance serves them: initialize creates one, every later
 * request looks it up (refreshing it), DELETE ends it.  The protocol
 * versions spoken.
 */

#include "ngx_http_sandbox_mcp_session.h"
#include "ngx_http_sandbox_mcp_auth.h"
#include "ngx_http_sandbox_mcp_handler.h"
#include "ngx_http_sandbox_mcp_http.h"
#include "ngx_http_sandbox_mcp_jsonrpc.h"
#include "ngx_http_sandbox_mcp_redis.h"
#include "ngx_http_sandbox_mcp_scripts.h"
#include "ngx_http_sandbox_mcp_stream.h"
#include "ngx_http_sandbox_mcp_tool_result.h"
#include "ngx_http_sandbox_mcp_defaults.h"


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


/* a session script found the token in the hash `revoked`: 401 */
static ngx_uint_t
ngx_http_sandbox_mcp_reply_revoked(ngx_http_sandbox_mcp_ctx_t *ctx,
    redisReply *reply)
{
    if (reply == NULL || reply->type != REDIS_REPLY_STATUS
        || reply->len != sizeof("REVOKED") - 1
        || ngx_strncmp(reply->str, "REVOKED", reply->len) != 0)
    {
        return 0;
    }

    ngx_log_error(NGX_LOG_INFO, ctx->request->connection->log, 0,
                  "sandbox_mcp: token refused: token revoked");

    ngx_http_sandbox_mcp_finalize(ctx,
        ngx_http_sandbox_mcp_unauthorized(ctx->request, "token revoked", 1));

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

    rc = ngx_http_sandbox_mcp_dispatch(ctx);

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


static void
ngx_http_sandbox_mcp_session_found(void *data, redisReply *reply)
{
    ngx_http_sandbox_mcp_ctx_t *ctx = data;

    ngx_int_t            rc;
    redisReply          *run;
    ngx_http_request_t  *r;

    r = ctx->request;
    ctx->cmd = NULL;
    run = NULL;

    if (ngx_http_sandbox_mcp_reply_revoked(ctx, reply)) {
        return;
    }

    if (reply && reply->type == REDIS_REPLY_ARRAY && reply->elements == 2) {
        /* {version, the run the tool reads} */
        run = reply->element[1];
        reply = reply->element[0];
    }

    if (reply == NULL || reply->type == REDIS_REPLY_ERROR) {
        if (reply) {
            ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                          "sandbox_mcp: redis: %s", reply->str);
        }

        ngx_http_sandbox_mcp_finalize(ctx,
                                      ngx_http_sandbox_mcp_send_unavailable(r));
        return;
    }

    if (reply->type != REDIS_REPLY_STRING) {
        /* unknown, expired, deleted, or another tenant's */
        ngx_http_sandbox_mcp_finalize(ctx,
            ngx_http_sandbox_mcp_send_error(r, NGX_HTTP_NOT_FOUND,
                                      NGX_HTTP_SANDBOX_MCP_SESSION_NOT_FOUND,
                                      "Session not found"));
        return;
    }

    if (ctx->initialize) {
        ngx_http_sandbox_mcp_finalize(ctx,
            ngx_http_sandbox_mcp_send_error(r, NGX_HTTP_BAD_REQUEST,
                                      NGX_HTTP_SANDBOX_MCP_INVALID_REQUEST,
                                      "Invalid Request: this session is "
                                      "already initialized"));
        return;
    }

    /* the negotiated version, or the spec's fallback */
    ctx->version.len = reply->len;
    ctx->version.data = ngx_pnalloc(r->pool, reply->len);
    if (ctx->version.data == NULL) {
        ngx_http_sandbox_mcp_finalize(ctx, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
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

    /*
     * The run's hash lives as long as this reply: the tool takes it while
     * the message is dispatched or never (a call still pending then keeps
     * the request, and ctx, alive).
     */
    ctx->run_read = run;

    rc = ngx_http_sandbox_mcp_dispatch(ctx);

    ctx->run_read = NULL;

    if (rc != NGX_DONE) {
        ngx_http_sandbox_mcp_finalize(ctx, rc);
    }
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


static ngx_int_t
ngx_http_sandbox_mcp_session_command(ngx_http_sandbox_mcp_ctx_t *ctx,
    ngx_http_sandbox_mcp_script_t *script,
    ngx_http_sandbox_mcp_redis_handler_pt handler, ngx_uint_t read)
{
    u_char                           *p;
    ngx_uint_t                        nkeys;
    ngx_str_t                         argv[6];
    ngx_http_request_t               *r;
    ngx_http_sandbox_mcp_loc_conf_t  *lcf;

    r = ctx->request;
    lcf = ngx_http_get_module_loc_conf(r, ngx_http_sandbox_mcp_module);

    /* ids we issue are 64 hex digits; anything else is unknown */

    if (ctx->session_id.len != NGX_HTTP_SANDBOX_MCP_SESSION_ID_LEN) {
        goto not_found;
    }

    for (p = ctx->session_id.data;
         p < ctx->session_id.data + ctx->session_id.len;
         p++)
    {
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f'))) {
            goto not_found;
        }
    }

    if (ngx_http_sandbox_mcp_redis_key(r->pool, &argv[0],
                                       SMCP_KEY_MCP_SESSION, &ctx->session_id)
        != NGX_OK
        || ngx_http_sandbox_mcp_redis_key(r->pool, &argv[1], SMCP_KEY_REVOKED,
                                          NULL)
           != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    nkeys = 2;

    if (read) {
        /* what the tool reads, in the same round trip */
        switch (ngx_http_sandbox_mcp_get_result_key(ctx, &argv[2])) {
        case NGX_OK:
            nkeys = 3;
            break;
        case NGX_ERROR:
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        default: /* NGX_DECLINED */
            break;
        }
    }

    argv[nkeys] = ctx->tenant;
    argv[nkeys + 1] = ngx_http_sandbox_mcp_redis_number(r->pool,
                                        (int64_t) lcf->session_ttl * 1000);
    argv[nkeys + 2] = ctx->jti;

    ctx->cmd = ngx_http_sandbox_mcp_redis_script(script, handler, ctx, nkeys,
                                                 nkeys + 3, argv);

    if (ctx->cmd == NULL) {
        return ngx_http_sandbox_mcp_send_unavailable(r);
    }

    return NGX_DONE;

not_found:

    if (ctx->initialize) {
        /* a stale id on initialize: start afresh */
        return ngx_http_sandbox_mcp_session_create(ctx);
    }

    return ngx_http_sandbox_mcp_send_error(r, NGX_HTTP_NOT_FOUND,
                                      NGX_HTTP_SANDBOX_MCP_SESSION_NOT_FOUND,
                                      "Session not found");
}


ngx_int_t
ngx_http_sandbox_mcp_session_lookup(ngx_http_sandbox_mcp_ctx_t *ctx)
{
    return ngx_http_sandbox_mcp_session_command(ctx,
                                   &ngx_http_sandbox_mcp_script_session_touch,
                                   ngx_http_sandbox_mcp_session_found, 1);
}


ngx_int_t
ngx_http_sandbox_mcp_session_delete(ngx_http_sandbox_mcp_ctx_t *ctx)
{
    return ngx_http_sandbox_mcp_session_command(ctx,
                                  &ngx_http_sandbox_mcp_script_session_delete,
                                  ngx_http_sandbox_mcp_session_deleted, 0);
}
