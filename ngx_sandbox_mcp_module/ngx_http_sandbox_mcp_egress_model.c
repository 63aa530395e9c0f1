/*
 * Model requests: the body is read before anything goes upstream (in the
 * access phase, within client_max_body_size, in memory or nginx's
 * temporary file) and read again through smcp_tools: a request that asks
 * the provider for a server-side tool (web search, URL fetch, code
 * execution, MCP servers, files by URL) the route does not allow is a
 * JSON 403 naming the tool and the setting; a body it cannot read as the
 * provider would is a JSON 400 or 415.
 */

#include "ngx_http_sandbox_mcp_egress_model.h"
#include "ngx_http_sandbox_mcp_egress_meter.h"
#include "ngx_http_sandbox_mcp_egress_push.h"

#include "smcp_tools.h"


/* bytes of the temporary file read at a time */
#define NGX_HTTP_SANDBOX_MCP_MODEL_CHUNK  16384


typedef struct {
    const char  *suffix;
    size_t       len;
    int          format;
} ngx_http_sandbox_mcp_egress_format_t;


/* the endpoints the model routes allow (egress-routes.sh), by their end */
static ngx_http_sandbox_mcp_egress_format_t
    ngx_http_sandbox_mcp_egress_formats[] = {
    { "/messages", sizeof("/messages") - 1, SMCP_TOOLS_ANTHROPIC },
    { "/responses", sizeof("/responses") - 1, SMCP_TOOLS_OPENAI },
    { "/chat/completions", sizeof("/chat/completions") - 1, SMCP_TOOLS_CHAT },
    { ":streamGenerateContent", sizeof(":streamGenerateContent") - 1,
      SMCP_TOOLS_GEMINI },
    { ":generateContent", sizeof(":generateContent") - 1,
      SMCP_TOOLS_GEMINI },
    { NULL, 0, 0 }
};


/* smcp_tools' question: does the location allow the tool? */
static int
ngx_http_sandbox_mcp_egress_tool_allowed(void *data, const char *name,
    size_t len)
{
    ngx_uint_t    i;
    ngx_str_t    *s;
    ngx_array_t  *a = data;

    if (a == NULL) {
        return 0;
    }

    s = a->elts;

    for (i = 0; i < a->nelts; i++) {
        if ((s[i].len == 3 && ngx_strncmp(s[i].data, "all", 3) == 0)
            || smcp_tools_name_is((char *) s[i].data, s[i].len, name, len))
        {
            return 1;
        }
    }

    return 0;
}


/* application/json, with parameters or none */
static ngx_uint_t
ngx_http_sandbox_mcp_egress_json_type(ngx_http_request_t *r)
{
    u_char  *p;
    size_t   n;

    if (r->headers_in.content_type == NULL) {
        return 0;
    }

    p = r->headers_in.content_type->value.data;
    n = r->headers_in.content_type->value.len;

    if (n < sizeof("application/json") - 1
        || ngx_strncasecmp(p, (u_char *) "application/json",
                           sizeof("application/json") - 1)
           != 0)
    {
        return 0;
    }

    n -= sizeof("application/json") - 1;
    p += sizeof("application/json") - 1;

    return n == 0 || *p == ';' || *p == ' ' || *p == '\t';
}


/* the whole body through the readers (the tools', the meter's: its
 * model), a piece at a time */
static ngx_int_t
ngx_http_sandbox_mcp_egress_scan(ngx_http_request_t *r, smcp_tools_t *s,
    smcp_usage_t *u, int *rc)
{
    off_t         pos;
    size_t        want;
    ssize_t       got;
    u_char       *chunk;
    ngx_buf_t    *b;
    ngx_chain_t  *cl;

    *rc = SMCP_TOOLS_OK;
    chunk = NULL;

    for (cl = r->request_body ? r->request_body->bufs : NULL;
         cl && *rc == SMCP_TOOLS_OK;
         cl = cl->next)
    {
        b = cl->buf;

        if (!b->in_file) {
            smcp_usage_feed(u, b->pos, b->last - b->pos);
            *rc = smcp_tools_feed(s, b->pos, b->last - b->pos);
            continue;
        }

        if (chunk == NULL) {
            chunk = ngx_pnalloc(r->pool, NGX_HTTP_SANDBOX_MCP_MODEL_CHUNK);
            if (chunk == NULL) {
                return NGX_ERROR;
            }
        }

        for (pos = b->file_pos;
             pos < b->file_last && *rc == SMCP_TOOLS_OK;
             pos += got)
        {
            want = (size_t) ngx_min(b->file_last - pos,
                                    NGX_HTTP_SANDBOX_MCP_MODEL_CHUNK);

            got = ngx_read_file(b->file, chunk, want, pos);
            if (got != (ssize_t) want) {
                return NGX_ERROR;
            }

            smcp_usage_feed(u, chunk, want);
            *rc = smcp_tools_feed(s, chunk, want);
        }
    }

    if (*rc == SMCP_TOOLS_OK) {
        *rc = smcp_tools_end(s);
    }

    return NGX_OK;
}


ngx_uint_t
ngx_http_sandbox_mcp_egress_model(ngx_http_request_t *r, char *err,
    size_t errlen)
{
    int                                      rc;
    u_char                                  *p, *last, route[64];
    ngx_uint_t                               i;
    smcp_usage_t                            *u;
    smcp_tools_t                            *s;
    ngx_http_sandbox_mcp_egress_ctx_t       *ctx;
    ngx_http_sandbox_mcp_egress_format_t    *f;
    ngx_http_sandbox_mcp_egress_loc_conf_t  *lcf;

    lcf = ngx_http_get_module_loc_conf(r, ngx_http_sandbox_mcp_egress_module);

    for (f = ngx_http_sandbox_mcp_egress_formats; f->suffix; f++) {
        if (r->uri.len >= f->len
            && ngx_strncmp(r->uri.data + r->uri.len - f->len, f->suffix,
                           f->len)
               == 0)
        {
            break;
        }
    }

    if (f->suffix == NULL) {
        ngx_snprintf((u_char *) err, errlen, "egress: %V: not a model "
                     "endpoint whose requests the egress can check%Z",
                     &lcf->route);
        return NGX_HTTP_FORBIDDEN;
    }

    if (!ngx_http_sandbox_mcp_egress_identity(r)) {
        ngx_snprintf((u_char *) err, errlen, "egress: %V: model requests "
                     "are accepted without Content-Encoding only%Z",
                     &lcf->route);
        return NGX_HTTP_UNSUPPORTED_MEDIA_TYPE;
    }

    if (!ngx_http_sandbox_mcp_egress_json_type(r)) {
        ngx_snprintf((u_char *) err, errlen, "egress: %V: model requests "
                     "are accepted as Content-Type: application/json "
                     "only%Z", &lcf->route);
        return NGX_HTTP_UNSUPPORTED_MEDIA_TYPE;
    }

    s = ngx_palloc(r->pool, sizeof(smcp_tools_t));
    if (s == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    u = ngx_palloc(r->pool, sizeof(smcp_usage_t));
    if (u == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    smcp_tools_init(s, f->format, ngx_http_sandbox_mcp_egress_tool_allowed,
                    lcf->server_tools);
    smcp_usage_init(u);

    if (ngx_http_sandbox_mcp_egress_scan(r, s, u, &rc) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (rc == SMCP_TOOLS_OK) {
        ctx = ngx_http_get_module_ctx(r, ngx_http_sandbox_mcp_egress_module);

        return ngx_http_sandbox_mcp_egress_meter_begin(r, ctx, u,
                                       f->format == SMCP_TOOLS_GEMINI,
                                       err, errlen);
    }

    if (rc == SMCP_TOOLS_BAD) {
        ngx_snprintf((u_char *) err, errlen, "egress: %V: the request body "
                     "is not JSON the egress can check (%s, at byte %uz)%Z",
                     &lcf->route, s->error, s->offset);
        return NGX_HTTP_BAD_REQUEST;
    }

    /* SMCP_ANTHROPIC_SERVER_TOOLS: the environment of the routes script */
    last = route + ngx_min(lcf->route.len, sizeof(route) - 1);

    for (i = 0, p = route; p < last; i++, p++) {
        *p = (lcf->route.data[i] == '-') ? '_'
             : ngx_toupper(lcf->route.data[i]);
    }

    *p = '\0';

    ngx_snprintf((u_char *) err, errlen, "egress: %V: the request asks the "
                 "provider for its server-side tool %s (%s), which this "
                 "route does not allow: the operator allows it with "
                 "sandbox_mcp_egress_server_tools %s (make up, compose: "
                 "SMCP_%s_SERVER_TOOLS=%s)%Z",
                 &lcf->route, s->name, s->where, s->setting, route,
                 s->setting);

    return NGX_HTTP_FORBIDDEN;
}


char *
ngx_http_sandbox_mcp_egress_server_tools(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_sandbox_mcp_egress_loc_conf_t *lcf = conf;

    u_char      *p;
    ngx_str_t   *value, *s;
    ngx_uint_t   i;

    if (lcf->server_tools != NGX_CONF_UNSET_PTR) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (cf->args->nelts == 2 && value[1].len == 3
        && ngx_strncmp(value[1].data, "off", 3) == 0)
    {
        lcf->server_tools = NULL;
        return NGX_CONF_OK;
    }

    lcf->server_tools = ngx_array_create(cf->pool, cf->args->nelts - 1,
                                         sizeof(ngx_str_t));
    if (lcf->server_tools == NULL) {
        return NGX_CONF_ERROR;
    }

    for (i = 1; i < cf->args->nelts; i++) {

        for (p = value[i].data; p < value[i].data + value[i].len; p++) {
            if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z')
                  || (*p >= '0' && *p <= '9') || *p == '_'))
            {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "\"%V\": a tool's setting name is letters, "
                                   "digits and \"_\" (web_search)", &value[i]);
                return NGX_CONF_ERROR;
            }
        }

        s = ngx_array_push(lcf->server_tools);
        if (s == NULL) {
            return NGX_CONF_ERROR;
        }

        *s = value[i];
    }

    return NGX_CONF_OK;
}
