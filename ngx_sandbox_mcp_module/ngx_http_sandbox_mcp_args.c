/*
 * Tool arguments: each checked (type, size, shape) before anything is
 * written, with a message a model can act on.
 */

#include "ngx_http_sandbox_mcp_args.h"
#include "ngx_http_sandbox_mcp_tools.h"

#include "smcp_validate.h"


ngx_int_t
ngx_http_sandbox_mcp_arg_string(ngx_http_sandbox_mcp_call_t *call,
    const char *name, ngx_uint_t required, size_t max, ngx_str_t *out)
{
    json_t  *v;

    ngx_str_null(out);

    v = json_object_get(call->args, name);

    if (v == NULL || json_is_null(v)) {
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

    return NGX_OK;
}


/* returns NGX_DECLINED when absent */
ngx_int_t
ngx_http_sandbox_mcp_arg_integer(ngx_http_sandbox_mcp_call_t *call,
    const char *name, json_int_t min, json_int_t max, json_int_t *out)
{
    json_t  *v;
    double   d;

    v = json_object_get(call->args, name);

    if (v == NULL || json_is_null(v)) {
        return NGX_DECLINED;
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
    if (ngx_http_sandbox_mcp_arg_string(call, "runId", 1, 64, &call->run_id)
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
