/*
 * Validation of what tenants send: tool arguments (branch, repository URL,
 * model), the repository grants of a token, event stream ids, opaque
 * cursors, tenant names.  Plain C, no nginx: the module and the runner
 * share it and the unit tests (and fuzzers) drive it directly.
 *
 * Every function takes a pointer and a length: the input may hold NUL
 * bytes and need not be NUL-terminated; a NUL anywhere makes it invalid.
 */

#ifndef SMCP_VALIDATE_H
#define SMCP_VALIDATE_H

#include <stddef.h>
#include <stdint.h>

#include "smcp_util.h"


/* a byte of a name: [A-Za-z0-9._-] (a repository's owner or name, and
 * with more a model or a tenant; a signing key's id) */
int smcp_name_byte(unsigned char c);


/* git check-ref-format for one branch name, at most 255 bytes */
#define SMCP_BRANCH_MAX        255
int smcp_valid_branch(const char *s, size_t len);


/*
 * A repository URL: exactly https://<host>/<owner>/<name>[.git][/], host
 * compared case-insensitively, no userinfo, port, query or fragment; owner
 * and name of [A-Za-z0-9._-], not starting with '.', at most 100 bytes.
 * On success the owner and the name (".git" removed) point into url.
 */
#define SMCP_REPO_PART_MAX     100

typedef struct {
    const char   *owner;
    size_t        owner_len;
    const char   *name;
    size_t        name_len;
} smcp_repo_t;

int smcp_repo_parse(const char *url, size_t len, const char *host,
    size_t host_len, smcp_repo_t *repo);


/*
 * Repository grants (the token's "repos" claim): "owner/name", "owner/" + "*"
 * or "*".  Matching is case-insensitive, as GitHub's names are; a ".git"
 * suffix on a grant's name is ignored.
 */
int smcp_grant_valid(const char *grant, size_t len);
int smcp_grant_match(const char *grant, size_t len, const smcp_repo_t *repo);


/* provider/model: [A-Za-z0-9._:@-] segments joined by '/', at least two,
 * none empty or starting with '.', at most 200 bytes */
#define SMCP_MODEL_MAX         200
int smcp_valid_model(const char *s, size_t len);

/* the agents a run may name (opencode_run_task's `agent`; docs/usage.md,
 * "Which agent"): the provider whose models the agent runs, "" for any
 * (OpenCode), or NULL when s names no agent */
#define SMCP_AGENT_MAX         16
#define SMCP_AGENT_DEFAULT     "opencode"
const char *smcp_agent_provider(const char *s, size_t len);
/* 1 when the model (provider/model) is one the agent runs */
int smcp_agent_fits(const char *agent, size_t alen, const char *model,
    size_t mlen);


/* a tenant (token "sub"): 1-128 bytes of [A-Za-z0-9._@-]; it is part of
 * Redis key names */
#define SMCP_TENANT_MAX        128
int smcp_valid_tenant(const char *s, size_t len);


/* a Redis stream id: "<ms>" or "<ms>-<seq>", both decimal and at most
 * 2^64 - 1, no sign, no spaces */
#define SMCP_STREAM_ID_MAX     41
int smcp_valid_stream_id(const char *s, size_t len);


/*
 * Opaque cursors: base64url of a short text "<kind>:<payload>".
 * encode: dst must hold SMCP_CURSOR_MAX + 1 bytes.
 * decode: the text (at most SMCP_CURSOR_TEXT_MAX bytes, no NUL) into dst,
 * NUL-terminated; dst must hold SMCP_CURSOR_TEXT_MAX + 1 bytes.
 */
#define SMCP_CURSOR_TEXT_MAX   120
#define SMCP_CURSOR_MAX        160

int smcp_cursor_encode(char *dst, const char *text, size_t len);
int smcp_cursor_decode(const char *src, size_t len, char *dst, size_t *n);

/* a cursor "<kind>:<decimal>" with the number at most max */
int smcp_cursor_number(const char *src, size_t len, char kind, uint64_t max,
    uint64_t *out);

/* a run-list cursor "r:<run id>:<score>" (score a decimal of at most 19
 * digits); run_id gets SMCP_ID_LEN + 1 bytes, score 20 */
int smcp_cursor_run(const char *src, size_t len, char *run_id, char *score);

/* a list cursor "<kind>:<id>:<score>", the id of the prefix ("run_",
 * "ses_"); id gets SMCP_ID_LEN + 1 bytes, score 20 */
int smcp_cursor_id(const char *src, size_t len, char kind,
    const char *prefix, char *id, char *score);


#endif /* SMCP_VALIDATE_H */
