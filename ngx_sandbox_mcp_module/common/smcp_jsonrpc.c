/*
 * The JSON-RPC 2.0 envelope of an MCP request body (see smcp_jsonrpc.h).
 */

#include <string.h>

#include "smcp_json.h"
#include "smcp_jsonrpc.h"


int
smcp_jsonrpc_parse(const char *body, size_t len, json_t **out, int *batch)
{
    json_t        *j;
    json_error_t   err;

    *out = NULL;
    *batch = 0;

    /* the plain shapes (nearly every request) without jansson's reader;
     * the rest as always */
    j = smcp_json_load_plain(body, len);

    if (j == NULL) {
        j = json_loadb(body, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY,
                       &err);
    }

    if (j == NULL) {
        return SMCP_JSONRPC_PARSE_ERROR;
    }

    if (json_is_array(j)) {
        if (json_array_size(j) == 0) {
            json_decref(j);
            return SMCP_JSONRPC_EMPTY_BATCH;
        }

        if (json_array_size(j) > SMCP_JSONRPC_MAX_BATCH) {
            json_decref(j);
            return SMCP_JSONRPC_BATCH_TOO_LONG;
        }

        *batch = 1;

    } else if (!smcp_jsonrpc_valid(j)) {
        json_decref(j);
        return SMCP_JSONRPC_INVALID;
    }

    *out = j;

    return SMCP_JSONRPC_OK;
}


int
smcp_jsonrpc_valid(json_t *msg)
{
    json_t  *v, *id, *params;

    if (!json_is_object(msg)) {
        return 0;
    }

    /* by length: a string may hold NUL ("2.0\u0000...") */
    v = json_object_get(msg, "jsonrpc");
    if (!json_is_string(v) || json_string_length(v) != 3
        || memcmp(json_string_value(v), "2.0", 3) != 0)
    {
        return 0;
    }

    id = json_object_get(msg, "id");
    if (id && !json_is_string(id) && !json_is_integer(id)) {
        return 0;
    }

    v = json_object_get(msg, "method");

    if (v == NULL) {
        return id != NULL && (json_object_get(msg, "result")
                              || json_object_get(msg, "error"));
    }

    /* a method name is compared as a C string later: no NUL in it */
    if (!json_is_string(v)
        || strlen(json_string_value(v)) != json_string_length(v))
    {
        return 0;
    }

    params = json_object_get(msg, "params");

    return params == NULL || json_is_object(params) || json_is_array(params);
}
