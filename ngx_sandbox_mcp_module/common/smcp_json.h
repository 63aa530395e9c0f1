/*
 * A fast reader for the plain shapes of JSON text, in front of jansson's
 * json_loadb() (which costs a request more than the rest of its parse):
 * an object or an array whose strings are printable ASCII without escapes,
 * whose numbers are integers of at most 18 digits, nested at most
 * SMCP_JSON_PLAIN_DEPTH deep, with no key twice in an object.
 *
 * For such text it returns what json_loadb(buf, len,
 * JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, NULL) returns: the same values,
 * the same keys in the same order.  Anything else (other text, invalid
 * JSON, out of memory) it declines: NULL, and the caller asks jansson,
 * which accepts or refuses as it always did.  It never accepts what
 * jansson refuses (fuzz/json_plain.c holds it to that).
 */

#ifndef SMCP_JSON_H
#define SMCP_JSON_H

#include <stddef.h>

#include <jansson.h>


#define SMCP_JSON_PLAIN_DEPTH  32


json_t *smcp_json_load_plain(const char *buf, size_t len);


#endif /* SMCP_JSON_H */
