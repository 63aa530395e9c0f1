/*
 * Where a run's completion notification may go: sandbox_mcp_notify_allow
 * PREFIX ...; lists the URL prefixes a notify URL must start with.  A
 * URL is plain: http or https, a host in lower case (a name, or an
 * address: IPv4 dotted, IPv6 in brackets), no user info, a path, no
 * fragment, no space or control character, no "." or ".." segment and no
 * escaped dot, slash or backslash before the query (a server that folds
 * them would reach past its prefix).  A prefix is such a URL too, so its
 * host ends where its path begins: "https://ntfy.sh/" does not match
 * "https://ntfy.sh.example/".
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


/* the host of u->authority: a name, an IPv4 or a bracketed IPv6 address */
static const char *
ngx_http_sandbox_mcp_notify_host(ngx_http_sandbox_mcp_notify_url_t *u)
{
    u_char     *p, *last, *end;
    ngx_int_t   port;
#if (NGX_HAVE_INET6)
    u_char      a6[16];
#endif

    p = u->authority.data;
    last = p + u->authority.len;

    if (p < last && *p == '[') {
        end = ngx_strlchr(p, last, ']');
        if (end == NULL) {
            return "has an IPv6 address without its \"]\"";
        }

        u->host.data = p + 1;
        u->host.len = end - p - 1;
        u->literal = 1;
        p = end + 1;

#if (NGX_HAVE_INET6)
        if (ngx_inet6_addr(u->host.data, u->host.len, a6) != NGX_OK) {
            return "has a bad IPv6 address";
        }
#else
        return "has an IPv6 address, which this nginx cannot reach";
#endif

    } else {
        for (end = p; end < last && *end != ':'; end++) {
            if (!((*end >= 'a' && *end <= 'z') || (*end >= '0' && *end <= '9')
                  || *end == '-' || *end == '.'))
            {
                return "needs a host of lower-case letters, digits, \"-\" "
                       "and \".\"";
            }
        }

        u->host.data = p;
        u->host.len = end - p;

        if (u->host.len == 0 || u->host.len > 253 || *p == '.'
            || end[-1] == '.' || ngx_strlcasestrn(p, end, (u_char *) "..", 1))
        {
            return "needs a host name";
        }

        u->literal = ngx_inet_addr(p, u->host.len) != INADDR_NONE;
        p = end;
    }

    if (p == last) {
        return NULL;
    }

    if (*p != ':' || p + 1 == last) {
        return "has a bad port";
    }

    port = ngx_atoi(p + 1, last - p - 1);
    if (port < 1 || port > 65535) {
        return "has a bad port";
    }

    u->port = (in_port_t) port;

    return NULL;
}


/* no "." or ".." segment, no %2e, %2f or %5c before the query */
static const char *
ngx_http_sandbox_mcp_notify_path(ngx_str_t *path)
{
    u_char  *p, *last, *seg;

    last = ngx_strlchr(path->data, path->data + path->len, '?');
    if (last == NULL) {
        last = path->data + path->len;
    }

    seg = path->data + 1;

    for (p = path->data + 1; p <= last; p++) {
        if (p == last || *p == '/') {
            if ((p - seg == 1 && seg[0] == '.')
                || (p - seg == 2 && seg[0] == '.' && seg[1] == '.'))
            {
                return "has a \".\" or \"..\" segment in its path";
            }

            seg = p + 1;
            continue;
        }

        if (*p == '%' && last - p >= 3
            && ((p[1] == '2' && (p[2] == 'e' || p[2] == 'E'
                                 || p[2] == 'f' || p[2] == 'F'))
                || (p[1] == '5' && (p[2] == 'c' || p[2] == 'C'))))
        {
            return "has an escaped dot, slash or backslash in its path";
        }
    }

    return NULL;
}


/* a plain http(s) URL with a path, into *u: NULL, else why not */
static const char *
ngx_http_sandbox_mcp_notify_parse(ngx_str_t *url,
    ngx_http_sandbox_mcp_notify_url_t *u)
{
    u_char      *p, *last, *start;
    const char  *why;

    ngx_memzero(u, sizeof(ngx_http_sandbox_mcp_notify_url_t));
    u->text = *url;

    if (url->len == 0 || url->len > NGX_HTTP_SANDBOX_MCP_NOTIFY_URL_MAX) {
        return "must be a URL of 1 to 2048 bytes";
    }

    last = url->data + url->len;

    for (p = url->data; p < last; p++) {
        if (*p <= 0x20 || *p >= 0x7f || ngx_strchr("\"<>\\^`{|}#", *p)) {
            return "must be a plain URL: no space, control character, "
                   "fragment or any of \"<>\\^`{|}";
        }
    }

    if (url->len > 7 && ngx_strncmp(url->data, "http://", 7) == 0) {
        u->scheme.len = 4;
        u->port = 80;

    } else if (url->len > 8 && ngx_strncmp(url->data, "https://", 8) == 0) {
        u->scheme.len = 5;
        u->port = 443;

    } else {
        return "must start with http:// or https://";
    }

    u->scheme.data = url->data;
    start = url->data + u->scheme.len + 3;

    for (p = start; p < last && *p != '/' && *p != '?'; p++) {
        if (*p == '@') {
            return "must not carry a user name or password";
        }
    }

    if (p == last || *p != '/') {
        return "needs a path after its host (at least \"/\")";
    }

    u->authority.data = start;
    u->authority.len = p - start;
    u->path.data = p;
    u->path.len = last - p;

    why = ngx_http_sandbox_mcp_notify_host(u);

    return why ? why : ngx_http_sandbox_mcp_notify_path(&u->path);
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


ngx_uint_t
ngx_http_sandbox_mcp_notify_private(struct sockaddr *sa)
{
    in_addr_t             a;
#if (NGX_HAVE_INET6)
    u_char               *b;
    struct sockaddr_in6  *sin6;
#endif

    switch (sa->sa_family) {

#if (NGX_HAVE_INET6)
    case AF_INET6:
        sin6 = (struct sockaddr_in6 *) sa;
        b = sin6->sin6_addr.s6_addr;

        if (IN6_IS_ADDR_V4MAPPED(&sin6->sin6_addr)
            || IN6_IS_ADDR_V4COMPAT(&sin6->sin6_addr))
        {
            a = (in_addr_t) b[12] << 24 | b[13] << 16 | b[14] << 8 | b[15];
            break;
        }

        /* unspecified, loopback, unique local, link-local, multicast,
         * NAT64's well-known prefix, documentation */
        return IN6_IS_ADDR_UNSPECIFIED(&sin6->sin6_addr)
               || IN6_IS_ADDR_LOOPBACK(&sin6->sin6_addr)
               || (b[0] & 0xfe) == 0xfc
               || (b[0] == 0xfe && (b[1] & 0xc0) == 0x80)
               || b[0] == 0xff
               || (b[0] == 0x00 && b[1] == 0x64 && b[2] == 0xff
                   && b[3] == 0x9b)
               || (b[0] == 0x20 && b[1] == 0x01 && b[2] == 0x0d
                   && b[3] == 0xb8);
#endif

    case AF_INET:
        a = ntohl(((struct sockaddr_in *) sa)->sin_addr.s_addr);
        break;

    default:
        return 1;
    }

    return (a >> 24) == 0                       /* 0.0.0.0/8 */
           || (a >> 24) == 10                   /* 10.0.0.0/8 */
           || (a >> 24) == 127                  /* 127.0.0.0/8 */
           || (a & 0xffc00000) == 0x64400000    /* 100.64.0.0/10 */
           || (a & 0xffff0000) == 0xa9fe0000    /* 169.254.0.0/16 */
           || (a & 0xfff00000) == 0xac100000    /* 172.16.0.0/12 */
           || (a & 0xffffff00) == 0xc0000000    /* 192.0.0.0/24 */
           || (a & 0xffff0000) == 0xc0a80000    /* 192.168.0.0/16 */
           || (a & 0xfffe0000) == 0xc6120000    /* 198.18.0.0/15 */
           || (a >> 28) >= 0xe;                 /* multicast, reserved */
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
