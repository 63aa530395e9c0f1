/*
 * Where a run's completion notification may go: sandbox_mcp_notify_allow
 * PREFIX ...; lists the URL prefixes a notify URL must start with.  A
 * URL is plain, as common/smcp_url.h checks it for the module and the
 * runner alike: http or https, a host in lower case (a name, or an
 * address: IPv4 dotted, IPv6 in brackets), no user info, a path, no
 * fragment, no space or control character, no "." or ".." segment and no
 * escaped dot, slash or backslash before the query.  A prefix is such a
 * URL too, so its host ends where its path begins: "https://ntfy.sh/" does
 * not match "https://ntfy.sh.example/".
 *
 *     sandbox_mcp_notify_allow https://hooks.slack.com/services/
 *                              https://ntfy.sh/ http://10.0.0.7:8080/;
 *
 * A name must resolve to public addresses only (the egress checks at
 * each delivery); a private address is reached only by a prefix that
 * names it by its address.
 *
 * sandbox_mcp_tenant_notify TENANT URL [FORMAT]; is where a tenant's runs
 * that give no `notify` are announced; its URL must be one the location
 * allows.
 */

#include "ngx_http_sandbox_mcp_notify.h"


static void *ngx_http_sandbox_mcp_notify_create_loc_conf(ngx_conf_t *cf);
static char *ngx_http_sandbox_mcp_notify_merge_loc_conf(ngx_conf_t *cf,
    void *parent, void *child);
static char *ngx_http_sandbox_mcp_notify_allow(ngx_conf_t *cf,
    ngx_command_t *cmd, void *conf);
static char *ngx_http_sandbox_mcp_notify_tenant_conf(ngx_conf_t *cf,
    ngx_command_t *cmd, void *conf);
static char *ngx_http_sandbox_mcp_notify_egress(ngx_conf_t *cf,
    ngx_command_t *cmd, void *conf);
static ngx_int_t ngx_http_sandbox_mcp_notify_init(ngx_conf_t *cf);


static ngx_command_t  ngx_http_sandbox_mcp_notify_commands[] = {

    { ngx_string("sandbox_mcp_notify_allow"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_1MORE,
      ngx_http_sandbox_mcp_notify_allow,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("sandbox_mcp_tenant_notify"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE23,
      ngx_http_sandbox_mcp_notify_tenant_conf,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("sandbox_mcp_egress_notify"),
      NGX_HTTP_LOC_CONF|NGX_CONF_FLAG,
      ngx_http_sandbox_mcp_notify_egress,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_sandbox_mcp_notify_loc_conf_t, egress),
      NULL },

      ngx_null_command
};


static ngx_http_module_t  ngx_http_sandbox_mcp_notify_module_ctx = {
    ngx_http_sandbox_mcp_notify_egress_variables, /* preconfiguration */
    ngx_http_sandbox_mcp_notify_init,          /* postconfiguration */

    NULL,                                      /* create main configuration */
    NULL,                                      /* init main configuration */

    NULL,                                      /* create server configuration */
    NULL,                                      /* merge server configuration */

    ngx_http_sandbox_mcp_notify_create_loc_conf,
    ngx_http_sandbox_mcp_notify_merge_loc_conf
};


ngx_module_t  ngx_http_sandbox_mcp_notify_module = {
    NGX_MODULE_V1,
    &ngx_http_sandbox_mcp_notify_module_ctx,   /* module context */
    ngx_http_sandbox_mcp_notify_commands,      /* module directives */
    NGX_HTTP_MODULE,                           /* module type */
    NULL,                                      /* init master */
    NULL,                                      /* init module */
    NULL,                                      /* init process */
    NULL,                                      /* init thread */
    NULL,                                      /* exit thread */
    NULL,                                      /* exit process */
    NULL,                                      /* exit master */
    NGX_MODULE_V1_PADDING
};


/* a part of the URL smcp_url_parse() found, as nginx holds one */
static void
ngx_http_sandbox_mcp_notify_part(ngx_str_t *s, smcp_url_part_t *part)
{
    s->data = (u_char *) part->data;
    s->len = part->len;
}


/* a plain http(s) URL with a path, into *u: NULL, else why not */
static const char *
ngx_http_sandbox_mcp_notify_parse(ngx_str_t *url,
    ngx_http_sandbox_mcp_notify_url_t *u)
{
    smcp_url_t   su;
    const char  *why;

    ngx_memzero(u, sizeof(ngx_http_sandbox_mcp_notify_url_t));
    u->text = *url;

    why = smcp_url_parse((const char *) url->data, url->len, &su);
    if (why) {
        return why;
    }

#if !(NGX_HAVE_INET6)
    if (su.authority.data[0] == '[') {
        return "has an IPv6 address, which this nginx cannot reach";
    }
#endif

    ngx_http_sandbox_mcp_notify_part(&u->scheme, &su.scheme);
    ngx_http_sandbox_mcp_notify_part(&u->host, &su.host);
    ngx_http_sandbox_mcp_notify_part(&u->authority, &su.authority);
    ngx_http_sandbox_mcp_notify_part(&u->path, &su.path);
    u->port = (in_port_t) su.port;
    u->literal = su.literal;

    return NULL;
}


/* url (parsed) starts with one of the prefixes: NULL, else why not */
static const char *
ngx_http_sandbox_mcp_notify_listed(ngx_http_sandbox_mcp_notify_loc_conf_t *nlcf,
    ngx_str_t *url)
{
    ngx_str_t   *prefix;
    ngx_uint_t   i;

    if (nlcf->allow == NULL) {
        return "is not taken: this server sends no notifications "
               "(sandbox_mcp_notify_allow lists no destination)";
    }

    prefix = nlcf->allow->elts;

    for (i = 0; i < nlcf->allow->nelts; i++) {
        if (url->len >= prefix[i].len
            && ngx_strncmp(url->data, prefix[i].data, prefix[i].len) == 0)
        {
            return NULL;
        }
    }

    return "is not one this server sends notifications to (the "
           "operator's sandbox_mcp_notify_allow lists where they may go)";
}


const char *
ngx_http_sandbox_mcp_notify_allowed(ngx_http_request_t *r, ngx_str_t *url,
    ngx_http_sandbox_mcp_notify_url_t *u)
{
    const char  *why;

    why = ngx_http_sandbox_mcp_notify_parse(url, u);

    return why ? why : ngx_http_sandbox_mcp_notify_listed(
                  ngx_http_get_module_loc_conf(r,
                                          ngx_http_sandbox_mcp_notify_module),
                  url);
}


ngx_http_sandbox_mcp_notify_default_t *
ngx_http_sandbox_mcp_notify_tenant(ngx_http_request_t *r, ngx_str_t *tenant)
{
    ngx_uint_t                               i;
    ngx_http_sandbox_mcp_notify_default_t   *d;
    ngx_http_sandbox_mcp_notify_loc_conf_t  *nlcf;

    nlcf = ngx_http_get_module_loc_conf(r, ngx_http_sandbox_mcp_notify_module);

    if (nlcf->tenants == NULL) {
        return NULL;
    }

    d = nlcf->tenants->elts;

    for (i = 0; i < nlcf->tenants->nelts; i++) {
        if (d[i].tenant.len == tenant->len
            && ngx_strncmp(d[i].tenant.data, tenant->data, tenant->len) == 0)
        {
            return &d[i];
        }
    }

    return NULL;
}


static char *
ngx_http_sandbox_mcp_notify_allow(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_sandbox_mcp_notify_loc_conf_t *nlcf = conf;

    const char                         *why;
    ngx_str_t                          *value, *s;
    ngx_uint_t                          i;
    ngx_http_sandbox_mcp_notify_url_t   u;

    if (nlcf->allow == NGX_CONF_UNSET_PTR) {
        nlcf->allow = ngx_array_create(cf->pool, 4, sizeof(ngx_str_t));
        if (nlcf->allow == NULL) {
            return NGX_CONF_ERROR;
        }
    }

    value = cf->args->elts;

    for (i = 1; i < cf->args->nelts; i++) {
        why = ngx_http_sandbox_mcp_notify_parse(&value[i], &u);

        if (why) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "\"%V\": a notify prefix %s", &value[i], why);
            return NGX_CONF_ERROR;
        }

        s = ngx_array_push(nlcf->allow);
        if (s == NULL) {
            return NGX_CONF_ERROR;
        }

        *s = value[i];
    }

    return NGX_CONF_OK;
}


static char *
ngx_http_sandbox_mcp_notify_tenant_conf(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_sandbox_mcp_notify_loc_conf_t *nlcf = conf;

    const char                             *why;
    ngx_str_t                              *value;
    ngx_http_sandbox_mcp_notify_url_t       u;
    ngx_http_sandbox_mcp_notify_default_t  *d;

    value = cf->args->elts;

    if (nlcf->tenants == NGX_CONF_UNSET_PTR) {
        nlcf->tenants = ngx_array_create(cf->pool, 4,
                                 sizeof(ngx_http_sandbox_mcp_notify_default_t));
        if (nlcf->tenants == NULL) {
            return NGX_CONF_ERROR;
        }
    }

    why = ngx_http_sandbox_mcp_notify_parse(&value[2], &u);
    if (why) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "\"%V\": a notify URL %s",
                           &value[2], why);
        return NGX_CONF_ERROR;
    }

    d = ngx_array_push(nlcf->tenants);
    if (d == NULL) {
        return NGX_CONF_ERROR;
    }

    d->tenant = value[1];
    d->url = value[2];
    ngx_str_set(&d->format, "json");

    if (cf->args->nelts == 4) {
        d->format = value[3];

        if (ngx_strcmp(d->format.data, "json") != 0
            && ngx_strcmp(d->format.data, "slack") != 0
            && ngx_strcmp(d->format.data, "ntfy") != 0)
        {
            return "needs a format of json, slack or ntfy";
        }
    }

    return NGX_CONF_OK;
}


/* sandbox_mcp_egress_notify on: the tokens' keys are loaded */
static char *
ngx_http_sandbox_mcp_notify_egress(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    char                              *rv;
    ngx_http_sandbox_mcp_main_conf_t  *mcf;

    rv = ngx_conf_set_flag_slot(cf, cmd, conf);

    if (rv == NGX_CONF_OK) {
        mcf = ngx_http_conf_get_module_main_conf(cf,
                                                 ngx_http_sandbox_mcp_module);
        mcf->enabled = 1;
    }

    return rv;
}


static void *
ngx_http_sandbox_mcp_notify_create_loc_conf(ngx_conf_t *cf)
{
    ngx_http_sandbox_mcp_notify_loc_conf_t  *conf;

    conf = ngx_pcalloc(cf->pool,
                       sizeof(ngx_http_sandbox_mcp_notify_loc_conf_t));
    if (conf == NULL) {
        return NULL;
    }

    conf->allow = NGX_CONF_UNSET_PTR;
    conf->tenants = NGX_CONF_UNSET_PTR;
    conf->egress = NGX_CONF_UNSET;

    return conf;
}


static char *
ngx_http_sandbox_mcp_notify_merge_loc_conf(ngx_conf_t *cf, void *parent,
    void *child)
{
    ngx_http_sandbox_mcp_notify_loc_conf_t *prev = parent;
    ngx_http_sandbox_mcp_notify_loc_conf_t *conf = child;

    const char                             *why;
    ngx_uint_t                              i;
    ngx_http_sandbox_mcp_notify_default_t  *d;

    ngx_conf_merge_ptr_value(conf->allow, prev->allow, NULL);
    ngx_conf_merge_ptr_value(conf->tenants, prev->tenants, NULL);
    ngx_conf_merge_value(conf->egress, prev->egress, 0);

    if (conf->tenants) {
        d = conf->tenants->elts;

        for (i = 0; i < conf->tenants->nelts; i++) {
            why = ngx_http_sandbox_mcp_notify_listed(conf, &d[i].url);

            if (why) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "sandbox_mcp_tenant_notify \"%V\": the "
                                   "URL %s", &d[i].tenant, why);
                return NGX_CONF_ERROR;
            }
        }
    }

    if (conf->egress && conf->allow == NULL) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "sandbox_mcp_egress_notify needs "
                           "sandbox_mcp_notify_allow");
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


static ngx_int_t
ngx_http_sandbox_mcp_notify_init(ngx_conf_t *cf)
{
    ngx_http_handler_pt        *h;
    ngx_http_core_main_conf_t  *cmcf;

    cmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_core_module);

    h = ngx_array_push(&cmcf->phases[NGX_HTTP_ACCESS_PHASE].handlers);
    if (h == NULL) {
        return NGX_ERROR;
    }

    *h = ngx_http_sandbox_mcp_notify_egress_handler;

    return NGX_OK;
}
