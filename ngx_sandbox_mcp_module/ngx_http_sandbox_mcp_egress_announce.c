/*
 * sandbox_mcp_egress_announce on: the egress instance says which routes it
 * serves.  Its configuration's route names (every sandbox_mcp_egress NAME,
 * once) go to Redis as one string, space-separated, at "<prefix>egress:
 * routes", from every worker each time its command connection is made.
 * opencode_run_task reads them (the script run_create) and refuses at
 * once a run whose model, or whose repository, needs a route this egress
 * lacks, naming the setting that gives it one; a deployment whose egress
 * announces nothing is not checked.  The instances of one deployment serve
 * the same routes: the last to (re)connect writes.
 */

#include "ngx_http_sandbox_mcp_egress_announce.h"
#include "ngx_http_sandbox_mcp_redis.h"


typedef struct {
    ngx_str_t                   key;
    ngx_str_t                   value;
    ngx_log_t                  *log;
    ngx_uint_t                  on;
} ngx_http_sandbox_mcp_egress_announced_t;


static ngx_http_sandbox_mcp_egress_announced_t
    ngx_http_sandbox_mcp_egress_announced;


ngx_int_t
ngx_http_sandbox_mcp_egress_announce_route(ngx_conf_t *cf, ngx_str_t *route)
{
    ngx_str_t                                *r;
    ngx_uint_t                                i;
    ngx_http_sandbox_mcp_egress_main_conf_t  *emcf;

    emcf = ngx_http_conf_get_module_main_conf(cf,
                                           ngx_http_sandbox_mcp_egress_module);

    if (emcf->routes == NULL) {
        emcf->routes = ngx_array_create(cf->pool, 8, sizeof(ngx_str_t));
        if (emcf->routes == NULL) {
            return NGX_ERROR;
        }
    }

    r = emcf->routes->elts;

    for (i = 0; i < emcf->routes->nelts; i++) {
        if (r[i].len == route->len
            && ngx_strncmp(r[i].data, route->data, route->len) == 0)
        {
            return NGX_OK;
        }
    }

    r = ngx_array_push(emcf->routes);
    if (r == NULL) {
        return NGX_ERROR;
    }

    *r = *route;

    return NGX_OK;
}


/* sandbox_mcp_egress_announce on|off; on: the workers need Redis */
char *
ngx_http_sandbox_mcp_egress_announce(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_sandbox_mcp_egress_main_conf_t *emcf = conf;

    char                              *rv;
    ngx_http_sandbox_mcp_main_conf_t  *mcf;

    rv = ngx_conf_set_flag_slot(cf, cmd, conf);

    if (rv == NGX_CONF_OK && emcf->announce) {
        mcf = ngx_http_conf_get_module_main_conf(cf,
                                                 ngx_http_sandbox_mcp_module);
        mcf->enabled = 1;
    }

    return rv;
}


static void
ngx_http_sandbox_mcp_egress_announced_reply(void *data, redisReply *reply)
{
    ngx_http_sandbox_mcp_egress_announced_t *a = data;

    if (reply == NULL || reply->type == REDIS_REPLY_ERROR) {
        /* the next connection announces them again */
        ngx_log_error(NGX_LOG_WARN, a->log, 0,
                      "sandbox_mcp egress: the routes were not written to "
                      "Redis (%s); opencode_run_task will not check them "
                      "until they are",
                      reply ? reply->str : "no connection");
    }
}


static void
ngx_http_sandbox_mcp_egress_announce_listener(
    ngx_http_sandbox_mcp_redis_event_e ev, ngx_str_t *channel,
    ngx_str_t *message)
{
    ngx_str_t                                 argv[3];
    ngx_http_sandbox_mcp_egress_announced_t  *a;

    a = &ngx_http_sandbox_mcp_egress_announced;

    if (ev != NGX_HTTP_SANDBOX_MCP_REDIS_READY || !a->on) {
        return;
    }

    ngx_str_set(&argv[0], "SET");
    argv[1] = a->key;
    argv[2] = a->value;

    /* NULL: the connection went again; the next READY sends it */
    (void) ngx_http_sandbox_mcp_redis_command(
               ngx_http_sandbox_mcp_egress_announced_reply, a, 3, argv);
}


ngx_int_t
ngx_http_sandbox_mcp_egress_announce_init_worker(ngx_cycle_t *cycle)
{
    u_char                                   *p;
    size_t                                    len;
    ngx_str_t                                 none, *r;
    ngx_uint_t                                i, n;
    ngx_http_sandbox_mcp_egress_announced_t  *a;
    ngx_http_sandbox_mcp_egress_main_conf_t  *emcf;

    a = &ngx_http_sandbox_mcp_egress_announced;
    ngx_memzero(a, sizeof(ngx_http_sandbox_mcp_egress_announced_t));

    emcf = ngx_http_cycle_get_module_main_conf(cycle,
                                           ngx_http_sandbox_mcp_egress_module);

    if (emcf == NULL || emcf->announce != 1) {
        return NGX_OK;
    }

    r = emcf->routes ? emcf->routes->elts : NULL;
    n = emcf->routes ? emcf->routes->nelts : 0;

    len = 0;

    for (i = 0; i < n; i++) {
        len += r[i].len + 1;
    }

    a->value.data = ngx_pnalloc(cycle->pool, len + 1);
    if (a->value.data == NULL) {
        return NGX_ERROR;
    }

    p = a->value.data;

    for (i = 0; i < n; i++) {
        if (i) {
            *p++ = ' ';
        }

        p = ngx_cpymem(p, r[i].data, r[i].len);
    }

    a->value.len = p - a->value.data;
    a->log = cycle->log;
    a->on = 1;

    if (ngx_http_sandbox_mcp_redis_key(cycle->pool, &a->key,
                                       SMCP_KEY_EGRESS_ROUTES, NULL)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    /* no channel: it hears the connection's events only */
    ngx_str_null(&none);

    return ngx_http_sandbox_mcp_redis_listen(&none, 0,
                               ngx_http_sandbox_mcp_egress_announce_listener);
}
