/*
 * The JSON-RPC envelope of an MCP request body (common/smcp_jsonrpc.c):
 * the body of every POST /mcp, straight from the network.
 *
 * The input is the body.  Checked: a parse that succeeds hands back one
 * valid message or a batch of 1 to SMCP_JSONRPC_MAX_BATCH values (each
 * then checked on its own, as the module does), and nothing otherwise; a
 * valid message has "jsonrpc" exactly "2.0", an id that is a string or an
 * integer, and a method (a string holding no NUL) or a result or error;
 * the same body parses the same way twice.
 */

#include <string.h>

#include "smcp_jsonrpc.h"
#include "fuzz.h"


static void
fuzz_message(json_t *msg)
{
    json_t  *v, *id;

    if (!smcp_jsonrpc_valid(msg)) {
        return;
    }

    fuzz_check(json_is_object(msg), "a message is an object");

    v = json_object_get(msg, "jsonrpc");
    fuzz_check(json_is_string(v) && json_string_length(v) == 3
               && memcmp(json_string_value(v), "2.0", 3) == 0,
               "jsonrpc is exactly \"2.0\"");

    id = json_object_get(msg, "id");
    fuzz_check(id == NULL || json_is_string(id) || json_is_integer(id),
               "an id is a string or an integer");

    v = json_object_get(msg, "method");

    if (v) {
        fuzz_check(json_is_string(v)
                   && strlen(json_string_value(v)) == json_string_length(v),
                   "a method is a string without NUL");

    } else {
        fuzz_check(id && (json_object_get(msg, "result")
                          || json_object_get(msg, "error")),
                   "a response has an id and a result or an error");
    }
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int      rc, rc2, batch, batch2;
    size_t   i;
    json_t  *j, *j2;

    rc = smcp_jsonrpc_parse((const char *) data, size, &j, &batch);

    if (rc != SMCP_JSONRPC_OK) {
        fuzz_check(j == NULL && batch == 0, "a refusal hands back nothing");

    } else if (batch) {
        fuzz_check(json_is_array(j) && json_array_size(j) >= 1
                   && json_array_size(j) <= SMCP_JSONRPC_MAX_BATCH,
                   "a batch holds 1 to SMCP_JSONRPC_MAX_BATCH values");

        for (i = 0; i < json_array_size(j); i++) {
            fuzz_message(json_array_get(j, i));
        }

    } else {
        fuzz_check(smcp_jsonrpc_valid(j), "a single message is valid");
        fuzz_message(j);
    }

    rc2 = smcp_jsonrpc_parse((const char *) data, size, &j2, &batch2);
    fuzz_check(rc == rc2 && batch == batch2, "the same body, the same parse");

    json_decref(j);
    json_decref(j2);

    return 0;
}
