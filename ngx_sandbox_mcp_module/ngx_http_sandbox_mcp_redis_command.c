/*
 * Commands on the worker's command connection: one command, pipelined
 * commands, scripts (EVALSHA, loaded again and sent once more on
 * NOSCRIPT), and Redis loading its dataset (LOADING: requests answered
 * unavailable, the scripts tried until it is done).
 */

#include <openssl/sha.h>

#include "ngx_http_sandbox_mcp_redis.h"
#include "ngx_http_sandbox_mcp_redis_link.h"
#include "ngx_http_sandbox_mcp_metrics.h"
#include "ngx_http_sandbox_mcp_defaults.h"


static void ngx_http_sandbox_mcp_redis_reply(redisAsyncContext *ac, void *r,
    void *privdata);
static void ngx_http_sandbox_mcp_redis_script_loaded(redisAsyncContext *ac,
    void *r, void *privdata);


static ngx_http_sandbox_mcp_script_t    **ngx_http_sandbox_mcp_redis_scripts;

/* Redis answered LOADING (restarted, reading its dataset): until it
 * serves again, commands fail as unavailable and the probe tries to load
 * the scripts every NGX_HTTP_SANDBOX_MCP_LOADING_PROBE ms */
static ngx_uint_t                         ngx_http_sandbox_mcp_redis_loading;
static ngx_event_t                        ngx_http_sandbox_mcp_redis_probe;


/* an error reply whose first word is word */
static ngx_uint_t
ngx_http_sandbox_mcp_redis_error_is(redisReply *r, const char *word)
{
    size_t  n;

    n = ngx_strlen(word);

    return r != NULL && r->type == REDIS_REPLY_ERROR && r->len >= n
           && ngx_strncmp(r->str, word, n) == 0
           && (r->len == n || r->str[n] == ' ');
}


void
ngx_http_sandbox_mcp_redis_load_scripts(redisAsyncContext *ac)
{
    ngx_http_sandbox_mcp_script_t  **s;

    /* queued before any EVALSHA sent after it: Redis runs commands in
     * order, so every later EVALSHA finds its script */

    for (s = ngx_http_sandbox_mcp_redis_scripts; *s; s++) {
        redisAsyncCommand(ac, ngx_http_sandbox_mcp_redis_script_loaded,
                          (void *) (*s)->name, "SCRIPT LOAD %s",
                          (*s)->source);
    }

    ngx_http_sandbox_mcp_cmd_link.loads++;
}


/* Redis answered LOADING: it is reading its dataset (restarted) */
static void
ngx_http_sandbox_mcp_redis_loading_seen(void)
{
    if (!ngx_http_sandbox_mcp_redis_loading) {
        ngx_http_sandbox_mcp_redis_loading = 1;

        ngx_log_error(NGX_LOG_NOTICE, ngx_http_sandbox_mcp_redis_log, 0,
                      "sandbox_mcp: redis: Redis is loading its dataset; "
                      "requests get 503 until it is done");
    }

    if (!ngx_http_sandbox_mcp_redis_probe.timer_set
        && !ngx_http_sandbox_mcp_redis_exiting)
    {
        ngx_add_timer(&ngx_http_sandbox_mcp_redis_probe,
                      NGX_HTTP_SANDBOX_MCP_LOADING_PROBE);
    }
}


/* Redis serves again after LOADING: the scripts, and the listeners */
static void
ngx_http_sandbox_mcp_redis_loading_done(ngx_uint_t load)
{
    ngx_http_sandbox_mcp_redis_link_t  *link;

    if (!ngx_http_sandbox_mcp_redis_loading) {
        return;
    }

    ngx_http_sandbox_mcp_redis_loading = 0;

    if (ngx_http_sandbox_mcp_redis_probe.timer_set) {
        ngx_del_timer(&ngx_http_sandbox_mcp_redis_probe);
    }

    ngx_log_error(NGX_LOG_NOTICE, ngx_http_sandbox_mcp_redis_log, 0,
                  "sandbox_mcp: redis: Redis has loaded its dataset");

    link = &ngx_http_sandbox_mcp_cmd_link;

    if (load && link->c.ac && link->c.connected) {
        ngx_http_sandbox_mcp_redis_load_scripts(link->c.ac);
    }

    ngx_http_sandbox_mcp_redis_notify(NGX_HTTP_SANDBOX_MCP_REDIS_READY);
}


/* while Redis is loading: try to load the scripts, which tells when it is
 * done (without waiting for a request to find out) */
static void
ngx_http_sandbox_mcp_redis_probe_handler(ngx_event_t *ev)
{
    ngx_http_sandbox_mcp_redis_link_t  *link;

    link = &ngx_http_sandbox_mcp_cmd_link;

    if (ngx_http_sandbox_mcp_redis_loading && link->c.ac
        && link->c.connected)
    {
        ngx_http_sandbox_mcp_redis_load_scripts(link->c.ac);
    }
}


static void
ngx_http_sandbox_mcp_redis_script_loaded(redisAsyncContext *ac, void *r,
    void *privdata)
{
    redisReply  *reply = r;

    if (reply == NULL) {
        /* the connection is lost: loaded again on the next connect */
        return;
    }

    if (ngx_http_sandbox_mcp_redis_error_is(reply, "LOADING")) {
        ngx_http_sandbox_mcp_redis_loading_seen();
        return;
    }

    /* NOAUTH: a refused AUTH was logged already */
    if (reply->type == REDIS_REPLY_ERROR
        && !ngx_http_sandbox_mcp_redis_error_is(reply, "NOAUTH"))
    {
        ngx_log_error(NGX_LOG_ALERT, ngx_http_sandbox_mcp_redis_log, 0,
                      "sandbox_mcp: redis: loading script \"%s\" failed: %s",
                      (char *) privdata, reply->str);
        return;
    }

    if (reply->type != REDIS_REPLY_ERROR) {
        ngx_http_sandbox_mcp_redis_loading_done(0);
    }
}


static ngx_http_sandbox_mcp_redis_cmd_t *
ngx_http_sandbox_mcp_redis_cmd_alloc(void *data)
{
    ngx_http_sandbox_mcp_redis_cmd_t  *cmd;

    cmd = ngx_alloc(sizeof(ngx_http_sandbox_mcp_redis_cmd_t),
                    ngx_http_sandbox_mcp_redis_log);
    if (cmd == NULL) {
        return NULL;
    }

    ngx_memzero(cmd, sizeof(ngx_http_sandbox_mcp_redis_cmd_t));

    cmd->data = data;
    cmd->n = 1;
    cmd->sent = ngx_current_msec;
    cmd->loads = ngx_http_sandbox_mcp_cmd_link.loads;

    return cmd;
}


static void
ngx_http_sandbox_mcp_redis_cmd_free(ngx_http_sandbox_mcp_redis_cmd_t *cmd)
{
    if (cmd->script) {
        sdsfree(cmd->script);
    }

    ngx_free(cmd);
}


static void
ngx_http_sandbox_mcp_redis_pending(ngx_http_sandbox_mcp_redis_cmd_t *cmd)
{
    ngx_http_sandbox_mcp_redis_link_t  *link;

    link = &ngx_http_sandbox_mcp_cmd_link;

    ngx_queue_insert_tail(&link->pending, &cmd->queue);

    if (!link->timer.timer_set) {
        ngx_http_sandbox_mcp_redis_arm(link);
    }
}


/*
 * NOSCRIPT: Redis lost the scripts (restarted, SCRIPT FLUSH, a failover
 * to a replica).  They are loaded again, unless that was done since the
 * command was sent, and the command is sent once more, behind them.
 */
static ngx_int_t
ngx_http_sandbox_mcp_redis_retry(ngx_http_sandbox_mcp_redis_cmd_t *cmd)
{
    ngx_http_sandbox_mcp_redis_link_t  *link;

    link = &ngx_http_sandbox_mcp_cmd_link;

    if (cmd->retried || cmd->script == NULL || cmd->data == NULL
        || link->c.ac == NULL || !link->c.connected)
    {
        return NGX_DECLINED;
    }

    if (cmd->loads == link->loads) {
        ngx_log_error(NGX_LOG_NOTICE, ngx_http_sandbox_mcp_redis_log, 0,
                      "sandbox_mcp: redis: the scripts are gone from Redis "
                      "(NOSCRIPT): loading them again");

        ngx_http_sandbox_mcp_redis_load_scripts(link->c.ac);
    }

    if (redisAsyncFormattedCommand(link->c.ac,
                                   ngx_http_sandbox_mcp_redis_reply, cmd,
                                   cmd->script, sdslen(cmd->script))
        != REDIS_OK)
    {
        return NGX_DECLINED;
    }

    cmd->retried = 1;
    cmd->loads = link->loads;
    cmd->sent = ngx_current_msec;

    ngx_queue_remove(&cmd->queue);
    ngx_queue_insert_tail(&link->pending, &cmd->queue);

    return NGX_OK;
}


static void
ngx_http_sandbox_mcp_redis_reply(redisAsyncContext *ac, void *r,
    void *privdata)
{
    ngx_http_sandbox_mcp_redis_cmd_t   *cmd = privdata;

    redisReply                         *reply;
    ngx_http_sandbox_mcp_redis_link_t  *link;

    link = &ngx_http_sandbox_mcp_cmd_link;
    reply = r;

    if (ngx_http_sandbox_mcp_redis_error_is(reply, "NOSCRIPT")
        && ngx_http_sandbox_mcp_redis_retry(cmd) == NGX_OK)
    {
        return;
    }

    if (ngx_http_sandbox_mcp_redis_error_is(reply, "READONLY")
        && ngx_http_sandbox_mcp_redis_conf->sentinel
        && link->c.ac == ac && !(ac->c.flags & REDIS_DISCONNECTING))
    {
        /* the master was turned into a replica (a failover): the next
         * connect asks the sentinels where the master is now */
        ngx_log_error(NGX_LOG_ERR, ngx_http_sandbox_mcp_redis_log, 0,
                      "sandbox_mcp: redis %s: \"%V\" answers READONLY: "
                      "asking the sentinels again", link->c.role,
                      &link->where);
        redisAsyncDisconnect(ac);
    }

    if (ngx_http_sandbox_mcp_redis_error_is(reply, "LOADING")) {
        /* unavailable, as when the connection is lost */
        ngx_http_sandbox_mcp_redis_loading_seen();
        reply = NULL;

    } else if (reply) {
        ngx_http_sandbox_mcp_redis_loading_done(1);
    }

    if (cmd->data && cmd->handler) {
        cmd->handler(cmd->data, reply);

    } else if (cmd->data && cmd->each) {
        cmd->each(cmd->data, cmd->i, reply);
    }

    if (cmd->i == 0 && reply) {
        ngx_http_sandbox_mcp_metrics_redis(cmd->sent);
    }

    if (++cmd->i < cmd->n) {
        /* more replies of the same commands to come */
        return;
    }

    ngx_queue_remove(&cmd->queue);
    ngx_http_sandbox_mcp_redis_cmd_free(cmd);

    if (link->c.ac == ac && link->c.connected) {
        ngx_http_sandbox_mcp_redis_arm(link);
    }
}


/* Redis can take commands (while connecting they wait, bounded by the
 * connect timeout); no: fail fast */
static ngx_uint_t
ngx_http_sandbox_mcp_redis_usable(void)
{
    ngx_http_sandbox_mcp_redis_link_t  *link;

    link = &ngx_http_sandbox_mcp_cmd_link;

    /* through Sentinel: only once its ROLE said master (a write queued
     * before would reach a server that may not be the master) */
    return link->c.ac != NULL && (link->c.connected || !link->failures)
           && (link->verified || ngx_http_sandbox_mcp_redis_conf->sentinel
                                 == NULL);
}


/* a command's arguments as hiredis takes them */
static ngx_int_t
ngx_http_sandbox_mcp_redis_args(ngx_uint_t argc, ngx_str_t *argv,
    const char **av, size_t *al)
{
    ngx_uint_t  i;

    if (argc > NGX_HTTP_SANDBOX_MCP_MAX_ARGS) {
        return NGX_ERROR;
    }

    for (i = 0; i < argc; i++) {
        av[i] = argv[i].len ? (const char *) argv[i].data : "";
        al[i] = argv[i].len;
    }

    return NGX_OK;
}


/*
 * A command as RESP, written here in one pass: hiredis's own formatting
 * (sdscatfmt for every argument, an sds per command) was 5.5% of a
 * worker's time on run_task.  The length first (an upper bound), then the
 * text.
 */
static size_t
ngx_http_sandbox_mcp_redis_resp_len(ngx_uint_t argc, size_t *al)
{
    size_t      len;
    ngx_uint_t  i;

    len = sizeof("*\r\n") - 1 + NGX_INT_T_LEN;

    for (i = 0; i < argc; i++) {
        len += sizeof("$\r\n\r\n") - 1 + NGX_SIZE_T_LEN + al[i];
    }

    return len;
}


static u_char *
ngx_http_sandbox_mcp_redis_resp(u_char *p, ngx_uint_t argc, const char **av,
    size_t *al)
{
    ngx_uint_t  i;

    p = ngx_sprintf(p, "*%ui\r\n", argc);

    for (i = 0; i < argc; i++) {
        p = ngx_sprintf(p, "$%uz\r\n", al[i]);
        p = ngx_cpymem(p, av[i], al[i]);
        *p++ = CR;
        *p++ = LF;
    }

    return p;
}


/* a command queued: formatted on the stack; a long one goes hiredis's way */
static ngx_int_t
ngx_http_sandbox_mcp_redis_send(ngx_http_sandbox_mcp_redis_cmd_t *cmd,
    ngx_uint_t argc, const char **av, size_t *al)
{
    u_char  *p;
    u_char   buf[NGX_HTTP_SANDBOX_MCP_REDIS_FORMATTED];

    if (ngx_http_sandbox_mcp_redis_resp_len(argc, al) > sizeof(buf)) {
        return redisAsyncCommandArgv(ngx_http_sandbox_mcp_cmd_link.c.ac,
                                     ngx_http_sandbox_mcp_redis_reply, cmd,
                                     (int) argc, av, al)
               == REDIS_OK ? NGX_OK : NGX_ERROR;
    }

    p = ngx_http_sandbox_mcp_redis_resp(buf, argc, av, al);

    return redisAsyncFormattedCommand(ngx_http_sandbox_mcp_cmd_link.c.ac,
                                      ngx_http_sandbox_mcp_redis_reply, cmd,
                                      (const char *) buf, p - buf)
           == REDIS_OK ? NGX_OK : NGX_ERROR;
}


ngx_http_sandbox_mcp_redis_cmd_t *
ngx_http_sandbox_mcp_redis_command(
    ngx_http_sandbox_mcp_redis_handler_pt handler, void *data,
    ngx_uint_t argc, ngx_str_t *argv)
{
    ngx_http_sandbox_mcp_redis_cmd_t  *cmd;
    size_t                             al[NGX_HTTP_SANDBOX_MCP_MAX_ARGS];
    const char                        *av[NGX_HTTP_SANDBOX_MCP_MAX_ARGS];

    if (!ngx_http_sandbox_mcp_redis_usable()
        || ngx_http_sandbox_mcp_redis_args(argc, argv, av, al) != NGX_OK)
    {
        return NULL;
    }

    cmd = ngx_http_sandbox_mcp_redis_cmd_alloc(data);
    if (cmd == NULL) {
        return NULL;
    }

    /* a NULL handler: fire and forget, the reply is dropped */
    cmd->handler = handler;

    if (ngx_http_sandbox_mcp_redis_send(cmd, argc, av, al) != NGX_OK) {
        ngx_http_sandbox_mcp_redis_cmd_free(cmd);
        return NULL;
    }

    ngx_http_sandbox_mcp_redis_pending(cmd);

    return cmd;
}


ngx_http_sandbox_mcp_redis_cmd_t *
ngx_http_sandbox_mcp_redis_each(ngx_http_sandbox_mcp_redis_each_pt handler,
    void *data, ngx_uint_t n, ngx_uint_t *argc, ngx_str_t *argv)
{
    ngx_uint_t                         k;
    ngx_http_sandbox_mcp_redis_cmd_t  *cmd;
    size_t                             al[NGX_HTTP_SANDBOX_MCP_MAX_ARGS];
    const char                        *av[NGX_HTTP_SANDBOX_MCP_MAX_ARGS];

    if (n == 0 || !ngx_http_sandbox_mcp_redis_usable()) {
        return NULL;
    }

    cmd = ngx_http_sandbox_mcp_redis_cmd_alloc(data);
    if (cmd == NULL) {
        return NULL;
    }

    cmd->each = handler;

    for (k = 0; k < n; k++) {
        if (ngx_http_sandbox_mcp_redis_args(argc[k], argv, av, al) != NGX_OK
            || ngx_http_sandbox_mcp_redis_send(cmd, argc[k], av, al)
               != NGX_OK)
        {
            break;
        }

        argv += argc[k];
    }

    if (k < n) {
        if (k == 0) {
            ngx_http_sandbox_mcp_redis_cmd_free(cmd);
            return NULL;
        }

        /* the commands sent still answer: nobody listens */
        cmd->data = NULL;
        cmd->n = k;
        ngx_http_sandbox_mcp_redis_pending(cmd);
        return NULL;
    }

    cmd->n = n;
    ngx_http_sandbox_mcp_redis_pending(cmd);

    return cmd;
}


/* EVALSHA sha nkeys argv... as RESP, in an sds: kept, NOSCRIPT sends it
 * again */
static sds
ngx_http_sandbox_mcp_redis_format_script(
    ngx_http_sandbox_mcp_script_t *script, ngx_uint_t nkeys, ngx_uint_t argc,
    ngx_str_t *argv)
{
    sds          s;
    u_char      *p;
    ngx_uint_t   i;
    u_char       nbuf[NGX_INT_T_LEN];
    size_t       al[NGX_HTTP_SANDBOX_MCP_MAX_ARGS];
    const char  *av[NGX_HTTP_SANDBOX_MCP_MAX_ARGS];

    av[0] = "EVALSHA";
    al[0] = sizeof("EVALSHA") - 1;
    av[1] = script->sha1;
    al[1] = sizeof(script->sha1) - 1;
    av[2] = (const char *) nbuf;
    al[2] = ngx_sprintf(nbuf, "%ui", nkeys) - nbuf;

    for (i = 0; i < argc; i++) {
        av[i + 3] = argv[i].len ? (const char *) argv[i].data : "";
        al[i + 3] = argv[i].len;
    }

    s = sdsnewlen(NULL, ngx_http_sandbox_mcp_redis_resp_len(argc + 3, al));
    if (s == NULL) {
        return NULL;
    }

    p = ngx_http_sandbox_mcp_redis_resp((u_char *) s, argc + 3, av, al);

    sdssetlen(s, p - (u_char *) s);
    *p = '\0';

    return s;
}


ngx_http_sandbox_mcp_redis_cmd_t *
ngx_http_sandbox_mcp_redis_script(ngx_http_sandbox_mcp_script_t *script,
    ngx_http_sandbox_mcp_redis_handler_pt handler, void *data,
    ngx_uint_t nkeys, ngx_uint_t argc, ngx_str_t *argv)
{
    ngx_http_sandbox_mcp_redis_cmd_t  *cmd;

    /* EVALSHA sha nkeys keys... args..., kept formatted: NOSCRIPT sends it
     * again */

    if (argc + 3 > NGX_HTTP_SANDBOX_MCP_MAX_ARGS
        || !ngx_http_sandbox_mcp_redis_usable())
    {
        return NULL;
    }

    cmd = ngx_http_sandbox_mcp_redis_cmd_alloc(data);
    if (cmd == NULL) {
        return NULL;
    }

    cmd->handler = handler;
    cmd->script = ngx_http_sandbox_mcp_redis_format_script(script, nkeys,
                                                           argc, argv);

    if (cmd->script == NULL
        || redisAsyncFormattedCommand(ngx_http_sandbox_mcp_cmd_link.c.ac,
                                      ngx_http_sandbox_mcp_redis_reply, cmd,
                                      cmd->script, sdslen(cmd->script))
           != REDIS_OK)
    {
        ngx_http_sandbox_mcp_redis_cmd_free(cmd);
        return NULL;
    }

    ngx_http_sandbox_mcp_redis_pending(cmd);

    return cmd;
}


void
ngx_http_sandbox_mcp_redis_cancel(ngx_http_sandbox_mcp_redis_cmd_t *cmd)
{
    cmd->data = NULL;
}


const char *
ngx_http_sandbox_mcp_redis_unavailable(void)
{
    return ngx_http_sandbox_mcp_redis_loading
           ? "Storage unavailable: Redis is loading its dataset; retry "
             "shortly"
           : "Storage unavailable: Redis is not reachable; retry shortly";
}


void
ngx_http_sandbox_mcp_redis_commands_init(ngx_cycle_t *cycle,
    ngx_http_sandbox_mcp_script_t **scripts)
{
    ngx_http_sandbox_mcp_script_t  **s;
    unsigned char                    md[SHA_DIGEST_LENGTH];

    ngx_http_sandbox_mcp_redis_scripts = scripts;

    for (s = scripts; *s; s++) {
        SHA1((const unsigned char *) (*s)->source,
             ngx_strlen((*s)->source), md);
        ngx_hex_dump((u_char *) (*s)->sha1, md, SHA_DIGEST_LENGTH);
        (*s)->sha1[40] = '\0';
    }

    ngx_http_sandbox_mcp_redis_loading = 0;
    ngx_memzero(&ngx_http_sandbox_mcp_redis_probe, sizeof(ngx_event_t));
    ngx_http_sandbox_mcp_redis_probe.handler =
                                      ngx_http_sandbox_mcp_redis_probe_handler;
    ngx_http_sandbox_mcp_redis_probe.log = cycle->log;
    ngx_http_sandbox_mcp_redis_probe.cancelable = 1;
}


void
ngx_http_sandbox_mcp_redis_commands_lost(void)
{
    /* whatever it was loading, it is away now */
    ngx_http_sandbox_mcp_redis_loading = 0;

    if (ngx_http_sandbox_mcp_redis_probe.timer_set) {
        ngx_del_timer(&ngx_http_sandbox_mcp_redis_probe);
    }
}
