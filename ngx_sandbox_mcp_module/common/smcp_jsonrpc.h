/*
 * The JSON-RPC 2.0 envelope of an MCP request body: parsed strictly
 * (duplicate keys refused), a batch bounded, each message's shape checked.
 * Plain C on jansson, so the fuzzers link it without nginx.
 */

#ifndef SMCP_JSONRPC_H
#define SMCP_JSONRPC_H

#include <stddef.h>

#include <jansson.h>

/* a batch holds at most this many messages */
#define SMCP_JSONRPC_MAX_BATCH  32

/* smcp_jsonrpc_parse() results */
#define SMCP_JSONRPC_OK              0
#define SMCP_JSONRPC_PARSE_ERROR    -1     /* not JSON */
#define SMCP_JSONRPC_EMPTY_BATCH    -2
#define SMCP_JSONRPC_BATCH_TOO_LONG -3
#define SMCP_JSONRPC_INVALID        -4     /* one message, not JSON-RPC */

/*
 * Parses a request body: one message, or a batch (an array of 1 to
 * SMCP_JSONRPC_MAX_BATCH values; their shapes are checked one by one by
 * the caller, each answered on its own).  On SMCP_JSONRPC_OK *out holds
 * a new reference and *batch says which; on the others *out is NULL.
 */
int smcp_jsonrpc_parse(const char *body, size_t len, json_t **out,
    int *batch);

/*
 * A JSON-RPC 2.0 message: a request (method + id), a notification
 * (method, no id) or a response (result/error + id); "jsonrpc" exactly
 * "2.0", id a string or an integer, method a string without NUL, params
 * an object or an array.  1 for a well-formed one.
 */
int smcp_jsonrpc_valid(json_t *msg);

#endif /* SMCP_JSONRPC_H */
