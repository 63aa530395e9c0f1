/*
 * ngx_sandbox_mcp_module: directives, configuration and worker life cycle.
 */

#include "ngx_http_sandbox_mcp_module.h"
#include "ngx_http_sandbox_mcp_agents.h"
#include "ngx_http_sandbox_mcp_defaults.h"
#include "ngx_http_sandbox_mcp_egress_announce.h"
#include "ngx_http_sandbox_mcp_handler.h"
#include "ngx_http_sandbox_mcp_oauth.h"
#include "ngx_http_sandbox_mcp_redis.h"
#include "ngx_http_sandbox_mcp_revoked.h"
#include "ngx_http_sandbox_mcp_scripts.h"
#include "ngx_http_sandbox_mcp_tools.h"
#include "ngx_http_sandbox_mcp_ui.h"
#include "ngx_http_sandbox_mcp_waiter.h"

#include "smcp_jwt.h"


static ngx_int_t ngx_http_sandbox_mcp_init_module(ngx_cycle_t *cycle);
static ngx_int_t ngx_http_sandbox_mcp_init_worker(ngx_cycle_t *cycle);
static void ngx_http_sandbox_mcp_exit_worker(ngx_cycle_t *cycle);
static void *ngx_http_sandbox_mcp_create_main_conf(ngx_conf_t *cf);
static char *ngx_http_sandbox_mcp_init_main_conf(ngx_conf_t *cf, void *conf);
static void *ngx_http_sandbox_mcp_create_loc_conf(ngx_conf_t *cf);
static char *ngx_http_sandbox_mcp_merge_loc_conf(ngx_conf_t *cf,
    void *parent, void *child);
static char *ngx_http_sandbox_mcp(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_sandbox_mcp_ui(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_sandbox_mcp_redis(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_sandbox_mcp_oauth_endpoints(ngx_conf_t *cf,
    ngx_command_t *cmd, void *conf);
static char *ngx_http_sandbox_mcp_str_list(ngx_conf_t *cf,
    ngx_command_t *cmd, void *conf);
static char *ngx_http_sandbox_mcp_usd(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_sandbox_mcp_read_secrets(ngx_conf_t *cf,
    ngx_http_sandbox_mcp_main_conf_t *mcf);
static char *ngx_http_sandbox_mcp_check_url(ngx_conf_t *cf, void *post,
    void *data);


static ngx_conf_post_t  ngx_http_sandbox_mcp_url_post =
    { ngx_http_sandbox_mcp_check_url };


static ngx_command_t  ngx_http_sandbox_mcp_commands[] = {

    { ngx_string("sandbox_mcp"),
      NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS,
      ngx_http_sandbox_mcp,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("sandbox_mcp_ui"),
      NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS,
      ngx_http_sandbox_mcp_ui,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("sandbox_mcp_ui_heartbeat"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_msec_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_sandbox_mcp_loc_conf_t, ui_heartbeat),
      NULL },

    { ngx_string("sandbox_mcp_ui_stream_buffer"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_size_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_sandbox_mcp_loc_conf_t, ui_stream_buffer),
      NULL },

    { ngx_string("sandbox_mcp_redis"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_sandbox_mcp_redis,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("sandbox_mcp_redis_prefix"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_str_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_sandbox_mcp_main_conf_t, prefix),
      NULL },

    { ngx_string("sandbox_mcp_redis_timeout"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_msec_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_sandbox_mcp_main_conf_t, redis_timeout),
      NULL },

    { ngx_string("sandbox_mcp_redis_password"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_str_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_sandbox_mcp_main_conf_t, redis_password_from),
      NULL },

    { ngx_string("sandbox_mcp_revoked_max"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_sandbox_mcp_main_conf_t, revoked_max),
      NULL },

    { ngx_string("sandbox_mcp_secret_file"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_str_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_sandbox_mcp_main_conf_t, secret_file),
      NULL },

    { ngx_string("sandbox_mcp_secret_env"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_str_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_sandbox_mcp_main_conf_t, secret_env),
      NULL },

    { ngx_string("sandbox_mcp_keys_file"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_str_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_sandbox_mcp_main_conf_t, keys_file),
      NULL },

    { ngx_string("sandbox_mcp_allowed_hosts"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_1MORE,
      ngx_http_sandbox_mcp_str_list,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_sandbox_mcp_loc_conf_t, allowed_hosts),
      NULL },

    { ngx_string("sandbox_mcp_allowed_origins"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_1MORE,
      ngx_http_sandbox_mcp_str_list,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_sandbox_mcp_loc_conf_t, allowed_origins),
      NULL },

    { ngx_string("sandbox_mcp_max_body"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_size_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_sandbox_mcp_loc_conf_t, max_body),
      NULL },

    { ngx_string("sandbox_mcp_session_ttl"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_sec_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_sandbox_mcp_loc_conf_t, session_ttl),
      NULL },

    { ngx_string("sandbox_mcp_github_host"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_str_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_sandbox_mcp_loc_conf_t, github_host),
      NULL },

    { ngx_string("sandbox_mcp_public_url"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_str_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_sandbox_mcp_loc_conf_t, public_url),
      &ngx_http_sandbox_mcp_url_post },

    { ngx_string("sandbox_mcp_max_wait"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_sec_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_sandbox_mcp_loc_conf_t, max_wait),
      NULL },

    { ngx_string("sandbox_mcp_max_task_size"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_size_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_sandbox_mcp_loc_conf_t, max_task_size),
      NULL },

    { ngx_string("sandbox_mcp_run_timeout"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_sec_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_sandbox_mcp_loc_conf_t, run_timeout),
      NULL },

    { ngx_string("sandbox_mcp_run_timeout_max"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_sec_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_sandbox_mcp_loc_conf_t, run_timeout_max),
      NULL },

    { ngx_string("sandbox_mcp_ui_token_ttl"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_sec_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_sandbox_mcp_loc_conf_t, ui_token_ttl),
      NULL },

    { ngx_string("sandbox_mcp_default_model"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_str_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_sandbox_mcp_loc_conf_t, default_model),
      NULL },

    { ngx_string("sandbox_mcp_images"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_1MORE,
      ngx_http_sandbox_mcp_str_list,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_sandbox_mcp_loc_conf_t, images),
      NULL },

    { ngx_string("sandbox_mcp_agents"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_1MORE,
      ngx_http_sandbox_mcp_agents_set,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("sandbox_mcp_tenant_image"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE2,
      ngx_conf_set_keyval_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_sandbox_mcp_loc_conf_t, tenant_images),
      NULL },

    { ngx_string("sandbox_mcp_page_size"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_sandbox_mcp_loc_conf_t, page_size),
      NULL },

    { ngx_string("sandbox_mcp_max_queued"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_sandbox_mcp_loc_conf_t, max_queued),
      NULL },

    { ngx_string("sandbox_mcp_max_running"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_sandbox_mcp_loc_conf_t, max_running),
      NULL },

    { ngx_string("sandbox_mcp_max_cost_usd"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_sandbox_mcp_usd,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_sandbox_mcp_loc_conf_t, max_cost),
      NULL },

    { ngx_string("sandbox_mcp_retention"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_sec_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_sandbox_mcp_loc_conf_t, retention),
      NULL },

    { ngx_string("sandbox_mcp_session_idle"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_sec_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_sandbox_mcp_loc_conf_t, session_idle),
      NULL },

    { ngx_string("sandbox_mcp_tenant_redis_bytes"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_off_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_sandbox_mcp_loc_conf_t, tenant_bytes),
      NULL },

    { ngx_string("sandbox_mcp_tenant_sessions"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_sandbox_mcp_loc_conf_t, tenant_sessions),
      NULL },

    { ngx_string("sandbox_mcp_tenant_disk"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_off_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_sandbox_mcp_loc_conf_t, tenant_disk),
      NULL },

    { ngx_string("sandbox_mcp_oauth_endpoints"),
      NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS,
      ngx_http_sandbox_mcp_oauth_endpoints,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("sandbox_mcp_oauth"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_FLAG,
      ngx_conf_set_flag_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_sandbox_mcp_loc_conf_t, oauth.enable),
      NULL },

    { ngx_string("sandbox_mcp_oauth_issuer"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_str_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_sandbox_mcp_loc_conf_t, oauth.issuer),
      &ngx_http_sandbox_mcp_url_post },

    { ngx_string("sandbox_mcp_oauth_resource"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_str_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_sandbox_mcp_loc_conf_t, oauth.resource),
      &ngx_http_sandbox_mcp_url_post },

    { ngx_string("sandbox_mcp_oauth_token_ttl"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_sec_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_sandbox_mcp_loc_conf_t, oauth.token_ttl),
      NULL },

    { ngx_string("sandbox_mcp_oauth_refresh_ttl"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_sec_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_sandbox_mcp_loc_conf_t, oauth.refresh_ttl),
      NULL },

    { ngx_string("sandbox_mcp_oauth_code_ttl"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_sec_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_sandbox_mcp_loc_conf_t, oauth.code_ttl),
      NULL },

    { ngx_string("sandbox_mcp_oauth_client_ttl"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_sec_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_sandbox_mcp_loc_conf_t, oauth.client_ttl),
      NULL },

    { ngx_string("sandbox_mcp_oauth_unused_client_ttl"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_sec_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_sandbox_mcp_loc_conf_t, oauth.unused_client_ttl),
      NULL },

    { ngx_string("sandbox_mcp_oauth_unused_clients"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_sandbox_mcp_loc_conf_t, oauth.unused_clients),
      NULL },

    { ngx_string("sandbox_mcp_oauth_github_pending"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_sandbox_mcp_loc_conf_t, oauth.github_pending),
      NULL },

    { ngx_string("sandbox_mcp_oauth_revoke_rate"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_sandbox_mcp_loc_conf_t, oauth.revoke_rate),
      NULL },

    { ngx_string("sandbox_mcp_oauth_redirect_hosts"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_1MORE,
      ngx_http_sandbox_mcp_str_list,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_sandbox_mcp_loc_conf_t, oauth.redirect_hosts),
      NULL },

    { ngx_string("sandbox_mcp_oauth_client_metadata_location"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_str_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_sandbox_mcp_loc_conf_t, oauth.metadata_location),
      NULL },

    { ngx_string("sandbox_mcp_oauth_github"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE2,
      ngx_http_sandbox_mcp_oauth_github_conf,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("sandbox_mcp_oauth_github_authorize_url"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_str_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_sandbox_mcp_loc_conf_t, oauth.github_authorize),
      &ngx_http_sandbox_mcp_url_post },

    { ngx_string("sandbox_mcp_oauth_github_location"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_str_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_sandbox_mcp_loc_conf_t, oauth.github_location),
      NULL },

    { ngx_string("sandbox_mcp_oauth_github_allow"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE12,
      ngx_http_sandbox_mcp_oauth_github_allow,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

      ngx_null_command
};


static ngx_http_module_t  ngx_http_sandbox_mcp_module_ctx = {
    NULL,                                  /* preconfiguration */
    NULL,                                  /* postconfiguration */

    ngx_http_sandbox_mcp_create_main_conf, /* create main configuration */
    ngx_http_sandbox_mcp_init_main_conf,   /* init main configuration */

    NULL,                                  /* create server configuration */
    NULL,                                  /* merge server configuration */

    ngx_http_sandbox_mcp_create_loc_conf,  /* create location configuration */
    ngx_http_sandbox_mcp_merge_loc_conf    /* merge location configuration */
};


ngx_module_t  ngx_http_sandbox_mcp_module = {
    NGX_MODULE_V1,
    &ngx_http_sandbox_mcp_module_ctx,      /* module context */
    ngx_http_sandbox_mcp_commands,         /* module directives */
    NGX_HTTP_MODULE,                       /* module type */
    NULL,                                  /* init master */
    ngx_http_sandbox_mcp_init_module,      /* init module */
    ngx_http_sandbox_mcp_init_worker,      /* init process */
    NULL,                                  /* init thread */
    NULL,                                  /* exit thread */
    ngx_http_sandbox_mcp_exit_worker,      /* exit process */
    NULL,                                  /* exit master */
    NGX_MODULE_V1_PADDING
};


/* the master, at start and at each reload: which module this is (not
 * under nginx -t) */
static ngx_int_t
ngx_http_sandbox_mcp_init_module(ngx_cycle_t *cycle)
{
    if (!ngx_test_config) {
        ngx_log_error(NGX_LOG_NOTICE, cycle->log, 0,
                      "ngx_http_sandbox_mcp_module " SMCP_VERSION);
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_sandbox_mcp_init_worker(ngx_cycle_t *cycle)
{
    ngx_http_sandbox_mcp_main_conf_t  *mcf;

    if (ngx_process != NGX_PROCESS_WORKER
        && ngx_process != NGX_PROCESS_SINGLE)
    {
        return NGX_OK;
    }

    /* a worker is one thread: one HMAC context for every token */
    smcp_jwt_keep_context();

    mcf = ngx_http_cycle_get_module_main_conf(cycle,
                                              ngx_http_sandbox_mcp_module);

    if (mcf == NULL || !mcf->enabled) {
        return NGX_OK;
    }

    /* the Redis layer first; the layers above listen to it; then connect */

    if (ngx_http_sandbox_mcp_redis_init_worker(cycle, mcf,
                                               ngx_http_sandbox_mcp_scripts)
        != NGX_OK
        || ngx_http_sandbox_mcp_revoked_init_worker(cycle, mcf->revoked_max)
           != NGX_OK
        || ngx_http_sandbox_mcp_waiter_init_worker(cycle) != NGX_OK
        || ngx_http_sandbox_mcp_egress_announce_init_worker(cycle) != NGX_OK)
    {
        return NGX_ERROR;
    }

    ngx_http_sandbox_mcp_redis_start();

    return NGX_OK;
}


static void
ngx_http_sandbox_mcp_exit_worker(ngx_cycle_t *cycle)
{
    ngx_http_sandbox_mcp_redis_exit_worker(cycle);
    ngx_http_sandbox_mcp_waiter_exit_worker(cycle);
    ngx_http_sandbox_mcp_revoked_exit_worker(cycle);
}


static void *
ngx_http_sandbox_mcp_create_main_conf(ngx_conf_t *cf)
{
    ngx_http_sandbox_mcp_main_conf_t  *mcf;

    mcf = ngx_pcalloc(cf->pool, sizeof(ngx_http_sandbox_mcp_main_conf_t));
    if (mcf == NULL) {
        return NULL;
    }

    /*
     * set by ngx_pcalloc():
     *
     *     mcf->redis = { 0, NULL };
     *     mcf->prefix = { 0, NULL };
     *     mcf->secret_file = { 0, NULL };
     *     mcf->secret_env = { 0, NULL };
     *     mcf->keys_file = { 0, NULL };
     *     mcf->keys = NULL;
     *     mcf->redis_password_from = { 0, NULL };
     *     mcf->redis_password = NULL;
     *     mcf->enabled = 0;
     */

    mcf->redis_port = NGX_CONF_UNSET;
    mcf->redis_timeout = NGX_CONF_UNSET_MSEC;
    mcf->revoked_max = NGX_CONF_UNSET_UINT;

    return mcf;
}


static char *
ngx_http_sandbox_mcp_init_main_conf(ngx_conf_t *cf, void *conf)
{
    ngx_http_sandbox_mcp_main_conf_t *mcf = conf;

    if (mcf->redis.len == 0) {
        ngx_str_set(&mcf->redis, SMCP_DEFAULT_REDIS);
        ngx_str_set(&mcf->redis_host, SMCP_DEFAULT_REDIS_HOST);
        mcf->redis_port = SMCP_DEFAULT_REDIS_PORT;
    }

    if (mcf->prefix.data == NULL) {
        ngx_str_set(&mcf->prefix, SMCP_DEFAULT_PREFIX);
    }

    ngx_conf_init_msec_value(mcf->redis_timeout,
                             NGX_HTTP_SANDBOX_MCP_REDIS_TIMEOUT);
    ngx_conf_init_uint_value(mcf->revoked_max,
                             NGX_HTTP_SANDBOX_MCP_REVOKED_MAX);

    if (!mcf->enabled) {
        return NGX_CONF_OK;
    }

    if (ngx_http_sandbox_mcp_tools_init(cf) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    return ngx_http_sandbox_mcp_read_secrets(cf, mcf);
}


/* sandbox_mcp_redis_password env:NAME | file:PATH */
static char *
ngx_http_sandbox_mcp_read_password(ngx_conf_t *cf,
    ngx_http_sandbox_mcp_main_conf_t *mcf)
{
    int         rc;
    ngx_str_t  *from, name;
    char        err[NGX_HTTP_SANDBOX_MCP_ERR_MAX];

    from = &mcf->redis_password_from;

    mcf->redis_password = ngx_pnalloc(cf->pool, SMCP_SECRET_MAX);
    if (mcf->redis_password == NULL) {
        return NGX_CONF_ERROR;
    }

    if (from->len > 5 && ngx_strncmp(from->data, "file:", 5) == 0) {
        name.data = from->data + 5;
        name.len = from->len - 5;

        if (ngx_conf_full_name(cf->cycle, &name, 1) != NGX_OK) {
            return NGX_CONF_ERROR;
        }

        rc = smcp_secret_from_file((char *) name.data, 1, mcf->redis_password,
                                   &mcf->redis_password_len, err,
                                   sizeof(err));

    } else if (from->len > 4 && ngx_strncmp(from->data, "env:", 4) == 0) {
        rc = smcp_secret_from_env((char *) from->data + 4, 1,
                                  mcf->redis_password,
                                  &mcf->redis_password_len, err, sizeof(err));

    } else {
        ngx_snprintf((u_char *) err, sizeof(err), "expected env:NAME or "
                     "file:PATH%Z");
        rc = SMCP_ERR;
    }

    if (rc != SMCP_OK) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "sandbox_mcp_redis_password: %s", err);
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


static void
ngx_http_sandbox_mcp_clear_keys(void *data)
{
    smcp_keyring_clear(data);
}


/*
 * The signing keys: sandbox_mcp_keys_file (several, with their ids: a
 * rotation), else the one bare secret of sandbox_mcp_secret_file or
 * sandbox_mcp_secret_env.  A bad keys file stops the start or the reload
 * whole, with the line named: the workers keep the keys they have.
 */
static char *
ngx_http_sandbox_mcp_read_keys(ngx_conf_t *cf,
    ngx_http_sandbox_mcp_main_conf_t *mcf)
{
    int                  rc;
    size_t               len;
    u_char              *secret;
    ngx_pool_cleanup_t  *cln;
    char                 err[NGX_HTTP_SANDBOX_MCP_ERR_MAX];

    mcf->keys = ngx_palloc(cf->pool, sizeof(smcp_keyring_t));
    if (mcf->keys == NULL) {
        return NGX_CONF_ERROR;
    }

    /* wiped with the configuration's pool */
    cln = ngx_pool_cleanup_add(cf->pool, 0);
    if (cln == NULL) {
        return NGX_CONF_ERROR;
    }

    cln->handler = ngx_http_sandbox_mcp_clear_keys;
    cln->data = mcf->keys;

    if (mcf->keys_file.len) {
        if (mcf->secret_file.len || mcf->secret_env.len) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "sandbox_mcp_keys_file takes the place of "
                               "sandbox_mcp_secret_file and "
                               "sandbox_mcp_secret_env: set one of them");
            return NGX_CONF_ERROR;
        }

        if (ngx_conf_full_name(cf->cycle, &mcf->keys_file, 1) != NGX_OK) {
            return NGX_CONF_ERROR;
        }

        if (smcp_keyring_load(mcf->keys, (char *) mcf->keys_file.data, err,
                              sizeof(err))
            != SMCP_OK)
        {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "sandbox_mcp_keys_file: %s", err);
            return NGX_CONF_ERROR;
        }

        return NGX_CONF_OK;
    }

    secret = ngx_pnalloc(cf->pool, SMCP_SECRET_MAX);
    if (secret == NULL) {
        return NGX_CONF_ERROR;
    }

    if (mcf->secret_file.len) {
        if (ngx_conf_full_name(cf->cycle, &mcf->secret_file, 1) != NGX_OK) {
            return NGX_CONF_ERROR;
        }

        rc = smcp_secret_from_file((char *) mcf->secret_file.data,
                                   SMCP_SECRET_MIN, secret, &len, err,
                                   sizeof(err));

    } else {
        if (mcf->secret_env.len == 0) {
            ngx_str_set(&mcf->secret_env, SMCP_SECRET_ENV);
        }

        rc = smcp_secret_from_env((char *) mcf->secret_env.data,
                                  SMCP_SECRET_MIN, secret, &len, err,
                                  sizeof(err));
    }

    if (rc == SMCP_OK) {
        rc = smcp_keyring_single(mcf->keys, secret, len);
    }

    ngx_explicit_memzero(secret, SMCP_SECRET_MAX);

    if (rc != SMCP_OK) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "sandbox_mcp: no signing secret: %s "
                           "(set sandbox_mcp_keys_file, "
                           "sandbox_mcp_secret_file or "
                           "sandbox_mcp_secret_env)", err);
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


/*
 * The signing keys and the Redis password are read here, in the master,
 * at configuration time: the workers get them with the configuration
 * (nginx clears their environment), and a reload picks up new ones.
 * Neither is ever logged.
 */
static char *
ngx_http_sandbox_mcp_read_secrets(ngx_conf_t *cf,
    ngx_http_sandbox_mcp_main_conf_t *mcf)
{
    if (mcf->redis_password_from.len
        && ngx_http_sandbox_mcp_read_password(cf, mcf) != NGX_CONF_OK)
    {
        return NGX_CONF_ERROR;
    }

    return ngx_http_sandbox_mcp_read_keys(cf, mcf);
}


static void *
ngx_http_sandbox_mcp_create_loc_conf(ngx_conf_t *cf)
{
    ngx_http_sandbox_mcp_loc_conf_t  *conf;

    conf = ngx_pcalloc(cf->pool, sizeof(ngx_http_sandbox_mcp_loc_conf_t));
    if (conf == NULL) {
        return NULL;
    }

    /*
     * set by ngx_pcalloc():
     *
     *     conf->github_host = { 0, NULL };
     *     conf->public_url = { 0, NULL };
     *     conf->default_model = { 0, NULL };
     */

    conf->enable = NGX_CONF_UNSET;
    conf->allowed_hosts = NGX_CONF_UNSET_PTR;
    conf->images = NGX_CONF_UNSET_PTR;
    conf->tenant_images = NGX_CONF_UNSET_PTR;
    conf->agents = NGX_CONF_UNSET_PTR;
    conf->allowed_origins = NGX_CONF_UNSET_PTR;
    conf->max_body = NGX_CONF_UNSET_SIZE;
    conf->session_ttl = NGX_CONF_UNSET;
    conf->max_wait = NGX_CONF_UNSET;
    conf->max_task_size = NGX_CONF_UNSET_SIZE;
    conf->run_timeout = NGX_CONF_UNSET;
    conf->run_timeout_max = NGX_CONF_UNSET;
    conf->ui_token_ttl = NGX_CONF_UNSET;
    conf->page_size = NGX_CONF_UNSET_UINT;
    conf->max_queued = NGX_CONF_UNSET_UINT;
    conf->max_running = NGX_CONF_UNSET_UINT;
    conf->max_cost = NGX_CONF_UNSET;
    conf->retention = NGX_CONF_UNSET;
    conf->session_idle = NGX_CONF_UNSET;
    conf->tenant_bytes = NGX_CONF_UNSET;
    conf->tenant_sessions = NGX_CONF_UNSET_UINT;
    conf->tenant_disk = NGX_CONF_UNSET;
    conf->ui = NGX_CONF_UNSET;
    conf->ui_heartbeat = NGX_CONF_UNSET_MSEC;
    conf->ui_stream_buffer = NGX_CONF_UNSET_SIZE;

    ngx_http_sandbox_mcp_oauth_init_conf(&conf->oauth);

    return conf;
}


/* sandbox_mcp_allowed_hosts' default: the loopback names */
static ngx_int_t
ngx_http_sandbox_mcp_default_hosts(ngx_conf_t *cf,
    ngx_http_sandbox_mcp_loc_conf_t *conf)
{
    ngx_str_t   *s;
    ngx_uint_t   n;

    static ngx_str_t  hosts[] = {
        ngx_string("localhost"),
        ngx_string("127.0.0.1"),
        ngx_string("[::1]")
    };

    n = sizeof(hosts) / sizeof(ngx_str_t);

    conf->allowed_hosts = ngx_array_create(cf->pool, n, sizeof(ngx_str_t));
    if (conf->allowed_hosts == NULL) {
        return NGX_ERROR;
    }

    s = ngx_array_push_n(conf->allowed_hosts, n);
    if (s == NULL) {
        return NGX_ERROR;
    }

    ngx_memcpy(s, hosts, sizeof(hosts));

    return NGX_OK;
}


static char *
ngx_http_sandbox_mcp_check_limits(ngx_conf_t *cf,
    ngx_http_sandbox_mcp_loc_conf_t *conf)
{
    if (conf->run_timeout > conf->run_timeout_max) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "sandbox_mcp_run_timeout is above "
                           "sandbox_mcp_run_timeout_max");
        return NGX_CONF_ERROR;
    }

    if (conf->page_size == 0
        || conf->page_size > NGX_HTTP_SANDBOX_MCP_PAGE_SIZE_LIMIT)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "sandbox_mcp_page_size must be 1..%d",
                           NGX_HTTP_SANDBOX_MCP_PAGE_SIZE_LIMIT);
        return NGX_CONF_ERROR;
    }

    if (conf->max_queued == 0
        || conf->max_queued > NGX_HTTP_SANDBOX_MCP_RUNS_LIMIT
        || conf->max_running == 0
        || conf->max_running > NGX_HTTP_SANDBOX_MCP_RUNS_LIMIT)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "sandbox_mcp_max_queued and "
                           "sandbox_mcp_max_running must be 1..%d",
                           NGX_HTTP_SANDBOX_MCP_RUNS_LIMIT);
        return NGX_CONF_ERROR;
    }

    if (conf->retention == 0 || conf->session_idle == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "sandbox_mcp_retention and "
                           "sandbox_mcp_session_idle must be more than 0");
        return NGX_CONF_ERROR;
    }

    if (conf->max_wait > NGX_HTTP_SANDBOX_MCP_MAX_WAIT_LIMIT) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "sandbox_mcp_max_wait must be at most %ds",
                           NGX_HTTP_SANDBOX_MCP_MAX_WAIT_LIMIT);
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


static char *
ngx_http_sandbox_mcp_merge_loc_conf(ngx_conf_t *cf, void *parent,
    void *child)
{
    ngx_http_sandbox_mcp_loc_conf_t *prev = parent;
    ngx_http_sandbox_mcp_loc_conf_t *conf = child;

    ngx_conf_merge_value(conf->enable, prev->enable, 0);
    ngx_conf_merge_ptr_value(conf->allowed_hosts, prev->allowed_hosts, NULL);
    ngx_conf_merge_ptr_value(conf->allowed_origins, prev->allowed_origins,
                             NULL);
    ngx_conf_merge_size_value(conf->max_body, prev->max_body,
                              NGX_HTTP_SANDBOX_MCP_MAX_BODY);
    ngx_conf_merge_sec_value(conf->session_ttl, prev->session_ttl,
                             NGX_HTTP_SANDBOX_MCP_SESSION_TTL);
    ngx_conf_merge_str_value(conf->github_host, prev->github_host,
                             NGX_HTTP_SANDBOX_MCP_GITHUB_HOST);
    ngx_conf_merge_sec_value(conf->max_wait, prev->max_wait,
                             NGX_HTTP_SANDBOX_MCP_MAX_WAIT);
    ngx_conf_merge_size_value(conf->max_task_size, prev->max_task_size,
                              NGX_HTTP_SANDBOX_MCP_MAX_TASK_SIZE);
    ngx_conf_merge_sec_value(conf->run_timeout, prev->run_timeout,
                             NGX_HTTP_SANDBOX_MCP_RUN_TIMEOUT);
    ngx_conf_merge_sec_value(conf->run_timeout_max, prev->run_timeout_max,
                             NGX_HTTP_SANDBOX_MCP_RUN_TIMEOUT_MAX);
    ngx_conf_merge_sec_value(conf->ui_token_ttl, prev->ui_token_ttl,
                             NGX_HTTP_SANDBOX_MCP_UI_TOKEN_TTL);
    ngx_conf_merge_str_value(conf->default_model, prev->default_model,
                             NGX_HTTP_SANDBOX_MCP_DEFAULT_MODEL);
    ngx_conf_merge_ptr_value(conf->images, prev->images, NULL);
    ngx_conf_merge_ptr_value(conf->tenant_images, prev->tenant_images, NULL);

    if (ngx_http_sandbox_mcp_agents_merge(cf, prev, conf) != NGX_CONF_OK) {
        return NGX_CONF_ERROR;
    }

    ngx_conf_merge_uint_value(conf->page_size, prev->page_size,
                              NGX_HTTP_SANDBOX_MCP_PAGE_SIZE);
    ngx_conf_merge_uint_value(conf->max_queued, prev->max_queued,
                              NGX_HTTP_SANDBOX_MCP_MAX_QUEUED);
    ngx_conf_merge_uint_value(conf->max_running, prev->max_running,
                              NGX_HTTP_SANDBOX_MCP_MAX_RUNNING);
    ngx_conf_merge_value(conf->max_cost, prev->max_cost,
                         NGX_HTTP_SANDBOX_MCP_MAX_COST);
    ngx_conf_merge_sec_value(conf->retention, prev->retention,
                             NGX_HTTP_SANDBOX_MCP_RETENTION);
    ngx_conf_merge_sec_value(conf->session_idle, prev->session_idle,
                             NGX_HTTP_SANDBOX_MCP_SESSION_IDLE);
    ngx_conf_merge_off_value(conf->tenant_bytes, prev->tenant_bytes,
                             NGX_HTTP_SANDBOX_MCP_TENANT_BYTES);
    ngx_conf_merge_uint_value(conf->tenant_sessions, prev->tenant_sessions,
                              NGX_HTTP_SANDBOX_MCP_TENANT_SESSIONS);
    ngx_conf_merge_off_value(conf->tenant_disk, prev->tenant_disk,
                             NGX_HTTP_SANDBOX_MCP_TENANT_DISK);
    ngx_conf_merge_value(conf->ui, prev->ui, 0);
    ngx_conf_merge_msec_value(conf->ui_heartbeat, prev->ui_heartbeat,
                              NGX_HTTP_SANDBOX_MCP_UI_HEARTBEAT);
    ngx_conf_merge_size_value(conf->ui_stream_buffer, prev->ui_stream_buffer,
                              NGX_HTTP_SANDBOX_MCP_UI_STREAM_BUFFER);
    ngx_conf_merge_str_value(conf->public_url, prev->public_url, "");

    if (conf->allowed_hosts == NULL
        && ngx_http_sandbox_mcp_default_hosts(cf, conf) != NGX_OK)
    {
        return NGX_CONF_ERROR;
    }

    if (ngx_http_sandbox_mcp_oauth_merge(cf, &prev->oauth, &conf->oauth)
        != NGX_CONF_OK)
    {
        return NGX_CONF_ERROR;
    }

    return ngx_http_sandbox_mcp_check_limits(cf, conf);
}


/* the location's content handler; the workers connect to Redis */
static ngx_http_core_loc_conf_t *
ngx_http_sandbox_mcp_content(ngx_conf_t *cf, ngx_http_handler_pt handler)
{
    ngx_http_core_loc_conf_t          *clcf;
    ngx_http_sandbox_mcp_main_conf_t  *mcf;

    clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);
    clcf->handler = handler;

    mcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_sandbox_mcp_module);
    mcf->enabled = 1;

    return clcf;
}


static char *
ngx_http_sandbox_mcp(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_sandbox_mcp_loc_conf_t *lcf = conf;

    ngx_http_conf_ctx_t               *ctx;
    ngx_http_sandbox_mcp_at_t         *at;
    ngx_http_sandbox_mcp_main_conf_t  *mcf;

    if (lcf->enable != NGX_CONF_UNSET) {
        return "is duplicate";
    }

    lcf->enable = 1;

    /* where the dashboard of this server finds the MCP settings */
    mcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_sandbox_mcp_module);

    if (mcf->mcp_locations == NULL) {
        mcf->mcp_locations = ngx_array_create(cf->pool, 2,
                                           sizeof(ngx_http_sandbox_mcp_at_t));
        if (mcf->mcp_locations == NULL) {
            return NGX_CONF_ERROR;
        }
    }

    at = ngx_array_push(mcf->mcp_locations);
    if (at == NULL) {
        return NGX_CONF_ERROR;
    }

    ctx = cf->ctx;
    at->server = ctx->srv_conf[ngx_http_core_module.ctx_index];
    at->loc_conf = ctx->loc_conf;

    (void) ngx_http_sandbox_mcp_content(cf, ngx_http_sandbox_mcp_handler);

    return NGX_CONF_OK;
}


/* sandbox_mcp_ui: the dashboard under the location's prefix */
static char *
ngx_http_sandbox_mcp_ui(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_sandbox_mcp_loc_conf_t *lcf = conf;

    ngx_http_core_loc_conf_t          *clcf;
    ngx_http_sandbox_mcp_main_conf_t  *mcf;

    if (lcf->ui != NGX_CONF_UNSET) {
        return "is duplicate";
    }

    lcf->ui = 1;

    clcf = ngx_http_sandbox_mcp_content(cf, ngx_http_sandbox_mcp_ui_handler);

    if (clcf->name.len == 0 || clcf->name.data[clcf->name.len - 1] != '/'
#if (NGX_PCRE)
        || clcf->regex
#endif
        || clcf->named)
    {
        return "needs a prefix location ending in \"/\" "
               "(e.g. location /ui/)";
    }

    mcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_sandbox_mcp_module);

    if (mcf->ui_location.len == 0) {
        mcf->ui_location = clcf->name;
    }

    return NGX_CONF_OK;
}


/* the OAuth endpoints (discovery, register, authorize, token, revoke) */
static char *
ngx_http_sandbox_mcp_oauth_endpoints(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_core_loc_conf_t  *clcf;

    clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);

    if (clcf->handler) {
        return "is duplicate";
    }

    (void) ngx_http_sandbox_mcp_content(cf,
                                        ngx_http_sandbox_mcp_oauth_handler);

    return NGX_CONF_OK;
}


/*
 * sentinel://HOST:PORT[,HOST:PORT...]/MASTER: the sentinels' names resolved
 * here, by the master, as a single Redis's is (a worker asks them, then
 * connects to the address they give, which must be an IP address)
 */
static char *
ngx_http_sandbox_mcp_redis_sentinel(ngx_conf_t *cf,
    ngx_http_sandbox_mcp_main_conf_t *mcf, ngx_str_t *value)
{
    int                i;
    char               err[200];
    size_t             len;
    ngx_url_t          u;
    smcp_hostport_t   *hp;
    smcp_redis_addr_t *a;

    a = ngx_pcalloc(cf->pool, sizeof(smcp_redis_addr_t));
    if (a == NULL) {
        return NGX_CONF_ERROR;
    }

    if (smcp_redis_addr_parse((char *) value->data, value->len, a, err,
                              sizeof(err))
        != SMCP_OK)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "invalid redis address "
                           "\"%V\": %s", value, err);
        return NGX_CONF_ERROR;
    }

    for (i = 0; i < a->nsentinels; i++) {
        hp = &a->sentinels[i];

        ngx_memzero(&u, sizeof(ngx_url_t));

        len = ngx_strlen(hp->host);
        u.url.data = ngx_pnalloc(cf->pool, len + 2);
        if (u.url.data == NULL) {
            return NGX_CONF_ERROR;
        }

        /* an IPv6 address as ngx_parse_url() takes it: in brackets */
        u.url.len = ngx_strchr(hp->host, ':')
                    ? (size_t) (ngx_sprintf(u.url.data, "[%s]", hp->host)
                                - u.url.data)
                    : (size_t) (ngx_cpymem(u.url.data, hp->host, len)
                                - u.url.data);
        u.default_port = (in_port_t) hp->port;

        if (ngx_parse_url(cf->pool, &u) != NGX_OK || u.naddrs == 0) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "invalid redis address \"%V\": sentinel "
                               "\"%s\" does not resolve%s%s", value,
                               hp->host, u.err ? ": " : "",
                               u.err ? u.err : "");
            return NGX_CONF_ERROR;
        }

        len = ngx_sock_ntop(u.addrs[0].sockaddr, u.addrs[0].socklen,
                            (u_char *) hp->host, SMCP_REDIS_HOST_MAX, 0);
        hp->host[len] = '\0';
    }

    mcf->sentinel = a;

    return NGX_CONF_OK;
}


static char *
ngx_http_sandbox_mcp_redis(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_sandbox_mcp_main_conf_t *mcf = conf;

    ngx_str_t  *value;
    ngx_url_t   u;

    if (mcf->redis.len) {
        return "is duplicate";
    }

    value = cf->args->elts;
    mcf->redis = value[1];

    if (ngx_strncmp(value[1].data, "sentinel://", 11) == 0) {
        return ngx_http_sandbox_mcp_redis_sentinel(cf, mcf, &value[1]);
    }

    if (ngx_strncmp(value[1].data, "unix:", 5) == 0) {
        if (value[1].len <= 5) {
            return "has an empty unix socket path";
        }

        mcf->redis_unix.data = value[1].data + 5;
        mcf->redis_unix.len = value[1].len - 5;
        return NGX_CONF_OK;
    }

    /*
     * Resolved here, by the master, at start and reload: a worker that
     * reconnects must not block in getaddrinfo() (a compose service name
     * whose container is down goes to the host's resolvers).
     */

    ngx_memzero(&u, sizeof(ngx_url_t));

    u.url = value[1];
    u.default_port = SMCP_DEFAULT_REDIS_PORT;

    if (ngx_parse_url(cf->pool, &u) != NGX_OK || u.naddrs == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid redis address \"%V\" (expected "
                           "host:port, unix:/path or "
                           "sentinel://host:port,.../master)%s%s", &value[1],
                           u.err ? ": " : "", u.err ? u.err : "");
        return NGX_CONF_ERROR;
    }

    mcf->redis_port = u.port ? u.port : SMCP_DEFAULT_REDIS_PORT;

    mcf->redis_host.data = ngx_pnalloc(cf->pool, NGX_SOCKADDR_STRLEN + 1);
    if (mcf->redis_host.data == NULL) {
        return NGX_CONF_ERROR;
    }

    mcf->redis_host.len = ngx_sock_ntop(u.addrs[0].sockaddr,
                                        u.addrs[0].socklen,
                                        mcf->redis_host.data,
                                        NGX_SOCKADDR_STRLEN, 0);
    mcf->redis_host.data[mcf->redis_host.len] = '\0';

    return NGX_CONF_OK;
}


/* every argument of the directive (all its lines) into one array */
static char *
ngx_http_sandbox_mcp_str_list(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    char  *p = conf;

    ngx_str_t     *value, *s;
    ngx_uint_t     i;
    ngx_array_t  **a;

    a = (ngx_array_t **) (p + cmd->offset);

    if (*a == NGX_CONF_UNSET_PTR) {
        *a = ngx_array_create(cf->pool, 4, sizeof(ngx_str_t));
        if (*a == NULL) {
            return NGX_CONF_ERROR;
        }
    }

    value = cf->args->elts;

    for (i = 1; i < cf->args->nelts; i++) {
        s = ngx_array_push(*a);
        if (s == NULL) {
            return NGX_CONF_ERROR;
        }

        *s = value[i];
    }

    return NGX_CONF_OK;
}


/* an amount of US dollars ("25", "2.50"; 0 allowed), kept in micro-USD */
static char *
ngx_http_sandbox_mcp_usd(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    char  *p = conf;

    ngx_int_t  *np;
    ngx_str_t  *value;

    np = (ngx_int_t *) (p + cmd->offset);

    if (*np != NGX_CONF_UNSET) {
        return "is duplicate";
    }

    value = cf->args->elts;

    *np = ngx_atofp(value[1].data, value[1].len, 6);

    if (*np == NGX_ERROR
        || *np > (ngx_int_t) NGX_HTTP_SANDBOX_MCP_COST_LIMIT * 1000000)
    {
        return "must be an amount of US dollars (e.g. 25 or 2.50), "
               "at most 1000000";
    }

    return NGX_CONF_OK;
}


static char *
ngx_http_sandbox_mcp_check_url(ngx_conf_t *cf, void *post, void *data)
{
    ngx_str_t  *url = data;

    if (!(url->len > 7 && ngx_strncmp(url->data, "http://", 7) == 0)
        && !(url->len > 8 && ngx_strncmp(url->data, "https://", 8) == 0))
    {
        return "must start with http:// or https://";
    }

    /* no trailing slash: paths are appended */
    while (url->len && url->data[url->len - 1] == '/') {
        url->len--;
    }

    return NGX_CONF_OK;
}
