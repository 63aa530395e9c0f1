/*
 * The fast reader of plain JSON text (common/smcp_json.c) against jansson,
 * on any bytes: whatever it accepts, json_loadb() with the flags of an MCP
 * request body (JSON_REJECT_DUPLICATES | JSON_DECODE_ANY) accepts too, as
 * the same value: equal (json_equal), and the same text once dumped (the
 * keys in the same order, integers and strings as read).  What it accepts
 * is an object or an array.  Declining is always allowed.
 */

#include <string.h>

#include "smcp_json.h"
#include "fuzz.h"


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char    *a, *b;
    json_t  *fast, *ref;

    fast = smcp_json_load_plain((const char *) data, size);
    ref = json_loadb((const char *) data, size,
                     JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, NULL);

    if (fast != NULL) {
        fuzz_check(ref != NULL, "accepted: jansson accepts it too");
        fuzz_check(json_is_object(fast) || json_is_array(fast),
                   "accepted: an object or an array");
        fuzz_check(json_equal(fast, ref), "accepted: the same value");

        a = json_dumps(fast, JSON_COMPACT | JSON_ENCODE_ANY);
        b = json_dumps(ref, JSON_COMPACT | JSON_ENCODE_ANY);
        fuzz_check(a != NULL && b != NULL && strcmp(a, b) == 0,
                   "accepted: the same text dumped (key order)");
        free(a);
        free(b);
    }

    json_decref(fast);
    json_decref(ref);

    return 0;
}
