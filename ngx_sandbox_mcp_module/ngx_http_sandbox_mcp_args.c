/*
 * Tool arguments: each checked (type, size, shape) before anything is
 * written, with a message a model can act on.  What the tool's schema says
 * of an argument (required, maxLength, enum, minimum, maximum, default) is
 * read from the schema (tools/NAME.json): the client and the check see
 * the same bounds.
 */

#include "ngx_http_sandbox_mcp_args.h"
#include "ngx_http_sandbox_mcp_tools.h"

#include "smcp_validate.h"


/* the argument's value (NULL: absent or null) and its schema, *max
 * lowered to its bound (maxLength, maximum) where the schema sets a lower
 * one */
static json_t *
ngx_http_sandbox_mcp_arg_value(ngx_http_sandbox_mcp_call_t *call,
    const char *name, const char *bound, json_int_t *max, json_t **schema)
{
    json_t  *v, *n;

    *schema = ngx_http_sandbox_mcp_tool_property(call, name);
    n = json_object_get(*schema, bound);

    if (json_is_integer(n) && json_integer_value(n) < *max) {
        *max = json_integer_value(n);
    }

    v = json_object_get(call->args, name);

    return json_is_null(v) ? NULL : v;
}


/* one of the schema's enum, if it has one and s is not empty */
static ngx_int_t
ngx_http_sandbox_mcp_arg_enum(ngx_http_sandbox_mcp_call_t *call,
    const char *name, json_t *schema, ngx_str_t *s)
{
    u_char      *p, *last;
    size_t       i;
    json_t      *v, *values;
    u_char       list[NGX_HTTP_SANDBOX_MCP_MESSAGE_MAX / 2];

    values = json_object_get(schema, "enum");

    if (!json_is_array(values) || s->len == 0) {
        return NGX_OK;
    }

    json_array_foreach(values, i, v) {
        if (json_string_length(v) == s->len
            && ngx_strncmp(json_string_value(v), s->data, s->len) == 0)
        {
            return NGX_OK;
        }
    }

    p = list;
    last = list + sizeof(list) - 1;

    json_array_foreach(values, i, v) {
        p = ngx_slprintf(p, last, "%s%s", i ? ", " : "",
                         json_string_value(v));
    }

    *p = '\0';

    ngx_http_sandbox_mcp_tool_error(call, "Argument '%s' must be one of %s.",
                                    name, list);
    return NGX_ERROR;
}


ngx_int_t
ngx_http_sandbox_mcp_arg_string(ngx_http_sandbox_mcp_call_t *call,
    const char *name, size_t max, ngx_str_t *out)
{
    json_t      *v, *schema;
    json_int_t   bound;
    ngx_uint_t   required;

    ngx_str_null(out);

    bound = (json_int_t) max;
    v = ngx_http_sandbox_mcp_arg_value(call, name, "maxLength", &bound,
                                       &schema);
    required = ngx_http_sandbox_mcp_tool_required(call, name);

    if (bound >= 0) {
        max = (size_t) bound;
    }

    if (v == NULL) {
        if (required) {
            ngx_http_sandbox_mcp_tool_error(call, "Missing required argument "
                                            "'%s' (a string).", name);
            return NGX_ERROR;
        }

        return NGX_OK;
    }

    if (!json_is_string(v)) {
        ngx_http_sandbox_mcp_tool_error(call, "Argument '%s' must be a "
                                        "string.", name);
        return NGX_ERROR;
    }

    out->data = (u_char *) json_string_value(v);
    out->len = json_string_length(v);

    if (required && out->len == 0) {
        ngx_http_sandbox_mcp_tool_error(call, "Argument '%s' must not be "
                                        "empty.", name);
        return NGX_ERROR;
    }

    if (out->len > max) {
        ngx_http_sandbox_mcp_tool_error(call, "Argument '%s' is too long "
                                        "(%uz bytes; at most %uz).", name,
                                        out->len, max);
        return NGX_ERROR;
    }

    if (ngx_strlchr(out->data, out->data + out->len, '\0') != NULL) {
        ngx_http_sandbox_mcp_tool_error(call, "Argument '%s' must not "
                                        "contain NUL characters.", name);
        return NGX_ERROR;
    }

    return ngx_http_sandbox_mcp_arg_enum(call, name, schema, out);
}


ngx_int_t
ngx_http_sandbox_mcp_arg_integer(ngx_http_sandbox_mcp_call_t *call,
    const char *name, json_int_t max, json_int_t *out)
{
    json_t      *v, *schema, *n;
    double       d;
    json_int_t   min, limit;

    limit = max;
    v = ngx_http_sandbox_mcp_arg_value(call, name, "maximum", &max, &schema);

    n = json_object_get(schema, "minimum");
    min = json_is_integer(n) ? json_integer_value(n) : -limit;

    if (v == NULL) {
        n = json_object_get(schema, "default");

        if (!json_is_integer(n)) {
            return NGX_DECLINED;
        }

        *out = json_integer_value(n);
        return NGX_OK;
    }

    if (json_is_integer(v)) {
        *out = json_integer_value(v);

    } else if (json_is_real(v)
               && json_real_value(v) > -9.0e15 && json_real_value(v) < 9.0e15
               && (d = json_real_value(v), d == (double) (json_int_t) d))
    {
        *out = (json_int_t) d;

    } else {
        ngx_http_sandbox_mcp_tool_error(call, "Argument '%s' must be an "
                                        "integer.", name);
        return NGX_ERROR;
    }

    if (*out < min || *out > max) {
        ngx_http_sandbox_mcp_tool_error(call, "Argument '%s' must be between "
                                        "%L and %L (got %L).", name,
                                        (int64_t) min, (int64_t) max,
                                        (int64_t) *out);
        return NGX_ERROR;
    }

    return NGX_OK;
}


ngx_int_t
ngx_http_sandbox_mcp_arg_run_id(ngx_http_sandbox_mcp_call_t *call)
{
    if (ngx_http_sandbox_mcp_arg_string(call, "runId",
                                        NGX_HTTP_SANDBOX_MCP_ID_ARG_MAX,
                                        &call->run_id)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    if (!smcp_valid_id((char *) call->run_id.data, call->run_id.len,
                       SMCP_RUN_ID_PREFIX))
    {
        ngx_http_sandbox_mcp_tool_error(call, "Run not found: '%*s' is not "
                                        "a runId (they look like run_ "
                                        "followed by 24 hex digits).",
                                        call->run_id.len, call->run_id.data);
        return NGX_ERROR;
    }

    return NGX_OK;
}


void
ngx_http_sandbox_mcp_run_not_found(ngx_http_sandbox_mcp_call_t *call)
{
    ngx_http_sandbox_mcp_tool_error(call, "Run not found: %V (check the "
                                    "runId, or list your runs with "
                                    "opencode_list_runs).", &call->run_id);
}
