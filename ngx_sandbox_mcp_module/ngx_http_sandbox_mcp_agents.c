/*
 * The agents a location offers (sandbox_mcp_agents; docs/usage.md, "Which
 * agent"): OpenCode by default, Claude Code and Codex besides.  Each may
 * have a model of its own, taken by a run of it that names none (else the
 * location's sandbox_mcp_default_model, when it is one the agent runs).
 * tools/list shows the location's own copy of run_task's definition,
 * whose `agent` lists the agents offered there, in the order given (the
 * first is the default of a new session).
 *
 * What run_create.lua takes: the agents offered, with their models, as
 * "NAME=MODEL ..." (MODEL empty: none of its own).  A follow-up naming
 * no agent runs its session's.
 */

#include "ngx_http_sandbox_mcp_agents.h"
#include "ngx_http_sandbox_mcp_args.h"
#include "ngx_http_sandbox_mcp_tools.h"

#include "smcp_validate.h"


char *
ngx_http_sandbox_mcp_agents_set(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_sandbox_mcp_loc_conf_t *lcf = conf;

    u_char        *eq;
    ngx_str_t     *value;
    ngx_uint_t     i, j;
    const char    *provider;
    ngx_keyval_t  *kv, *seen;

    if (lcf->agents != NGX_CONF_UNSET_PTR) {
        return "is duplicate";
    }

    value = cf->args->elts;

    lcf->agents = ngx_array_create(cf->pool, cf->args->nelts - 1,
                                   sizeof(ngx_keyval_t));
    if (lcf->agents == NULL) {
        return NGX_CONF_ERROR;
    }

    for (i = 1; i < cf->args->nelts; i++) {
        kv = ngx_array_push(lcf->agents);
        if (kv == NULL) {
            return NGX_CONF_ERROR;
        }

        kv->key = value[i];
        ngx_str_null(&kv->value);

        eq = ngx_strlchr(value[i].data, value[i].data + value[i].len, '=');
        if (eq) {
            kv->key.len = eq - value[i].data;
            kv->value.data = eq + 1;
            kv->value.len = value[i].data + value[i].len - (eq + 1);
        }

        provider = smcp_agent_provider((char *) kv->key.data, kv->key.len);

        if (provider == NULL) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "unknown agent \"%V\" (opencode, claude-code, "
                               "codex)", &kv->key);
            return NGX_CONF_ERROR;
        }

        if (eq
            && (!smcp_valid_model((char *) kv->value.data, kv->value.len)
                || !smcp_agent_fits((char *) kv->key.data, kv->key.len,
                                    (char *) kv->value.data, kv->value.len)))
        {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "agent \"%V\": \"%V\" is no model it runs "
                               "(provider/model%s%s)", &kv->key, &kv->value,
                               *provider ? ", a model of " : "", provider);
            return NGX_CONF_ERROR;
        }

        seen = lcf->agents->elts;

        for (j = 0; j + 1 < lcf->agents->nelts; j++) {
            if (seen[j].key.len == kv->key.len
                && ngx_strncmp(seen[j].key.data, kv->key.data, kv->key.len)
                   == 0)
            {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "agent \"%V\" given twice", &kv->key);
                return NGX_CONF_ERROR;
            }
        }
    }

    return NGX_CONF_OK;
}


static void
ngx_http_sandbox_mcp_agents_cleanup(void *data)
{
    json_decref(data);
}


/* run_task's definition, its `agent` listing the location's agents */
static json_t *
ngx_http_sandbox_mcp_agents_tool(ngx_conf_t *cf, ngx_array_t *agents)
{
    json_t              *tool, *agent, *names;
    ngx_uint_t           i;
    ngx_keyval_t        *kv;
    ngx_pool_cleanup_t  *cln;

    tool = ngx_http_sandbox_mcp_tool_definition("opencode_run_task");
    if (tool == NULL) {
        /* no MCP location in this configuration: nothing lists tools */
        return NULL;
    }

    cln = ngx_pool_cleanup_add(cf->pool, 0);
    tool = json_deep_copy(tool);

    if (cln == NULL || tool == NULL) {
        json_decref(tool);
        return NULL;
    }

    cln->handler = ngx_http_sandbox_mcp_agents_cleanup;
    cln->data = tool;

    agent = json_object_get(json_object_get(json_object_get(tool,
                                                            "inputSchema"),
                                            "properties"),
                            "agent");
    names = json_array();

    if (agent == NULL || names == NULL
        || json_object_set_new(agent, "enum", names) != 0)
    {
        return NULL;
    }

    kv = agents->elts;

    for (i = 0; i < agents->nelts; i++) {
        if (json_array_append_new(names,
                                  json_stringn((char *) kv[i].key.data,
                                               kv[i].key.len))
            != 0)
        {
            return NULL;
        }
    }

    return tool;
}


char *
ngx_http_sandbox_mcp_agents_merge(ngx_conf_t *cf,
    ngx_http_sandbox_mcp_loc_conf_t *prev,
    ngx_http_sandbox_mcp_loc_conf_t *conf)
{
    u_char        *p;
    size_t         len;
    ngx_uint_t     i;
    ngx_keyval_t  *kv;

    if (conf->agents == NGX_CONF_UNSET_PTR) {
        if (prev->agents != NGX_CONF_UNSET_PTR) {
            conf->agents = prev->agents;
            conf->agents_argv = prev->agents_argv;
            conf->agents_tool = prev->agents_tool;
            return NGX_CONF_OK;
        }

        conf->agents = ngx_array_create(cf->pool, 1, sizeof(ngx_keyval_t));
        kv = conf->agents ? ngx_array_push(conf->agents) : NULL;
        if (kv == NULL) {
            return NGX_CONF_ERROR;
        }

        ngx_str_set(&kv->key, SMCP_AGENT_DEFAULT);
        ngx_str_null(&kv->value);
    }

    kv = conf->agents->elts;
    len = 0;

    for (i = 0; i < conf->agents->nelts; i++) {
        len += kv[i].key.len + 1 + kv[i].value.len + 1;
    }

    p = ngx_pnalloc(cf->pool, len);
    if (p == NULL) {
        return NGX_CONF_ERROR;
    }

    conf->agents_argv.data = p;

    for (i = 0; i < conf->agents->nelts; i++) {
        p = ngx_sprintf(p, "%s%V=%V", i ? " " : "", &kv[i].key,
                        &kv[i].value);
    }

    conf->agents_argv.len = p - conf->agents_argv.data;

    if (prev->agents == NGX_CONF_UNSET_PTR) {
        /* the outermost level: the levels below inherit what it makes */
        prev->agents = conf->agents;
        prev->agents_argv = conf->agents_argv;
    }

    conf->agents_tool = ngx_http_sandbox_mcp_agents_tool(cf, conf->agents);

    if (prev->agents == conf->agents) {
        prev->agents_tool = conf->agents_tool;
    }

    return NGX_CONF_OK;
}


ngx_int_t
ngx_http_sandbox_mcp_agents_arg(ngx_http_sandbox_mcp_call_t *call,
    ngx_http_sandbox_mcp_loc_conf_t *lcf, ngx_str_t *agent)
{
    u_char        *p, *last;
    ngx_uint_t     i;
    ngx_keyval_t  *kv;
    u_char         names[NGX_HTTP_SANDBOX_MCP_ERR_MAX];

    if (ngx_http_sandbox_mcp_arg_string(call, "agent", SMCP_AGENT_MAX, agent)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    if (agent->len == 0) {
        return NGX_OK;
    }

    kv = lcf->agents->elts;
    p = names;
    last = names + sizeof(names) - 1;

    for (i = 0; i < lcf->agents->nelts; i++) {
        if (kv[i].key.len == agent->len
            && ngx_strncmp(kv[i].key.data, agent->data, agent->len) == 0)
        {
            return NGX_OK;
        }

        p = ngx_slprintf(p, last, "%s%V", i ? ", " : "", &kv[i].key);
    }

    *p = '\0';

    ngx_http_sandbox_mcp_tool_error(call, "Argument 'agent' must be one of "
                                    "the agents this server offers: %s.",
                                    names);
    return NGX_ERROR;
}
