/*
 * HS256 JSON Web Tokens: the one signing scheme of the project (MCP bearer
 * tokens, dashboard links, sandbox egress tokens).  Plain C on OpenSSL and
 * jansson, shared by the nginx module, the runner and the token CLI.  The
 * keys and their ids ("kid"): smcp_keyring.h.
 */

#ifndef SMCP_JWT_H
#define SMCP_JWT_H

#include <stddef.h>
#include <time.h>

#include <jansson.h>

#include "smcp_keyring.h"
#include "smcp_util.h"

/* longest token accepted: guards the decoders against huge headers */
#define SMCP_JWT_MAX_LEN  4096

/*
 * Signs claims (an object) with HS256 and the key; its kid, if it has one,
 * goes in the header.  On success *out is a malloc'd, NUL-terminated token
 * the caller frees.
 */
int smcp_jwt_sign(const smcp_key_t *key, json_t *claims, char **out);

/*
 * Verifies a token: header alg must be "HS256" (anything else, "none"
 * included, is refused); the header's "kid" picks the one key of the ring
 * that may have signed it (an unknown or malformed kid is refused; no kid:
 * the ring's legacy key, refused when there is none); the signature must
 * match that key (constant-time compare), the payload must be an object
 * with a string "sub" and a numeric "exp" later than now.  On success
 * *claims holds a new reference the caller releases; on failure err holds
 * a reason safe to show the client (it never contains the token or a key).
 */
int smcp_jwt_verify(const smcp_keyring_t *ring, const char *token,
    size_t len, time_t now, json_t **claims, char *err, size_t errlen);

/*
 * A single-threaded process (an nginx worker) keeps a few HMAC contexts,
 * each keyed once, for every later sign and verify; never call it in a
 * threaded one.
 */
void smcp_jwt_keep_context(void);

#endif /* SMCP_JWT_H */
