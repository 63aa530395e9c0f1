/*
 * Small helpers shared by the nginx module and the runner: base64url,
 * random identifiers, id validation, time formatting.  Plain C, no nginx.
 */

#ifndef SMCP_UTIL_H
#define SMCP_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#define SMCP_OK      0
#define SMCP_ERR    -1

/* base64url without padding; returns bytes written (dst must hold
 * smcp_b64url_encoded_len(n) + 1 for the NUL) */
size_t smcp_b64url_encoded_len(size_t n);
size_t smcp_b64url_encode(char *dst, const unsigned char *src, size_t n);

/* decodes base64url (padding tolerated); returns SMCP_ERR on bad input.
 * dst must hold len * 3 / 4 + 3 bytes. */
int smcp_b64url_decode(unsigned char *dst, size_t *dlen, const char *src,
    size_t len);

/* a hex digit's value, either case; -1 for any other byte */
int smcp_hex_value(unsigned char c);

/* n random bytes from the OpenSSL CSPRNG as 2n lowercase hex digits plus
 * NUL in dst; SMCP_ERR if the CSPRNG fails */
int smcp_random_hex(char *dst, size_t nbytes);

/* the same for identifiers (run and session ids, token ids; never a
 * secret): from a per-thread pool of CSPRNG bytes, refilled 1 KiB at a
 * time, emptied in the child of a fork */
int smcp_random_id_hex(char *dst, size_t nbytes);

/* "run_" / "ses_" + 24 hex digits */
int smcp_make_id(char *dst, const char *prefix);
int smcp_valid_id(const char *s, size_t len, const char *prefix);

/* milliseconds since the epoch to "2026-11-29T15:44:37.123Z" (dst >= 32) */
void smcp_iso8601_ms(char *dst, size_t size, int64_t ms);

/* the wall clock, in milliseconds since the epoch (outside nginx: the
 * module has ngx_timeofday()) */
int64_t smcp_now_ms(void);

/*
 * A secret (the signing secret, a provider credential): read from a file
 * (trailing newlines and spaces stripped) or an environment variable.
 * Refuses one shorter than min bytes (SMCP_SECRET_MIN for the signing
 * secret).  dst must hold SMCP_SECRET_MAX bytes.
 */
#define SMCP_SECRET_MIN  16
#define SMCP_SECRET_MAX  1024

int smcp_secret_from_file(const char *path, size_t min, unsigned char *dst,
    size_t *len, char *err, size_t errlen);
int smcp_secret_from_env(const char *name, size_t min, unsigned char *dst,
    size_t *len, char *err, size_t errlen);

/*
 * Replaces every byte that is not part of a well-formed UTF-8 sequence with
 * '?', in place, so text from tools and repositories always makes valid
 * JSON strings.  Returns the number of bytes replaced.
 */
size_t smcp_utf8_sanitize(char *s, size_t len);

#endif /* SMCP_UTIL_H */
