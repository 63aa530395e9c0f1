/*
 * Validation of tenant input: every check bounds the length first, then
 * accepts an explicit set of bytes (so NUL, control characters and
 * non-ASCII fail by construction), then checks the structure.
 */

#include <string.h>

#include "smcp_keys.h"
#include "smcp_validate.h"


static int
smcp_lower(int c)
{
    return (c >= 'A' && c <= 'Z') ? c + ('a' - 'A') : c;
}


static int
smcp_casecmp(const char *a, const char *b, size_t n)
{
    size_t  i;

    for (i = 0; i < n; i++) {
        if (smcp_lower((unsigned char) a[i])
            != smcp_lower((unsigned char) b[i]))
        {
            return 1;
        }
    }

    return 0;
}


static int
smcp_ends_with(const char *s, size_t len, const char *suffix)
{
    size_t  n;

    n = strlen(suffix);

    return len >= n && memcmp(s + len - n, suffix, n) == 0;
}


/* branch names */


static int
smcp_branch_byte(unsigned char c)
{
    /* ASCII, no control characters, none of git's specials */
    return c > 0x20 && c < 0x7f && c != '~' && c != '^' && c != ':'
           && c != '?' && c != '*' && c != '[' && c != '\\';
}


int
smcp_valid_branch(const char *s, size_t len)
{
    size_t  i, start;

    if (len == 0 || len > SMCP_BRANCH_MAX || s[0] == '-'
        || (len == 1 && s[0] == '@')
        || (len == 4 && memcmp(s, "HEAD", 4) == 0))
    {
        return 0;
    }

    start = 0;

    for (i = 0; i <= len; i++) {

        if (i < len && s[i] != '/') {
            if (!smcp_branch_byte((unsigned char) s[i])
                || (s[i] == '.' && i + 1 < len && s[i + 1] == '.')
                || (s[i] == '@' && i + 1 < len && s[i + 1] == '{'))
            {
                return 0;
            }

            continue;
        }

        /* a component s[start, i): not empty, no leading '.', no trailing
         * '.' or ".lock" */
        if (i == start || s[start] == '.' || s[i - 1] == '.'
            || smcp_ends_with(s + start, i - start, ".lock"))
        {
            return 0;
        }

        start = i + 1;
    }

    return 1;
}


/* repositories and grants */


/* [A-Za-z0-9._-] */
int
smcp_name_byte(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
           || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
}


/* one owner or name: 1..SMCP_REPO_PART_MAX repo bytes, no leading '.' */
static int
smcp_repo_part(const char *s, size_t len)
{
    size_t  i;

    if (len == 0 || len > SMCP_REPO_PART_MAX || s[0] == '.') {
        return 0;
    }

    for (i = 0; i < len; i++) {
        if (!smcp_name_byte((unsigned char) s[i])) {
            return 0;
        }
    }

    return 1;
}


/* a name without its ".git"; 0 if nothing is left */
static size_t
smcp_repo_strip_git(const char *name, size_t len)
{
    if (len > 4 && smcp_casecmp(name + len - 4, ".git", 4) == 0) {
        return len - 4;
    }

    return len == 4 && smcp_casecmp(name, ".git", 4) == 0 ? 0 : len;
}


int
smcp_repo_parse(const char *url, size_t len, const char *host,
    size_t host_len, smcp_repo_t *repo)
{
    const char  *p, *last, *slash;

    if (host_len == 0 || len < 8 || memcmp(url, "https://", 8) != 0) {
        return SMCP_ERR;
    }

    p = url + 8;
    last = url + len;

    /* the host, then '/' at once: no userinfo, no port */
    if ((size_t) (last - p) <= host_len
        || smcp_casecmp(p, host, host_len) != 0 || p[host_len] != '/')
    {
        return SMCP_ERR;
    }

    p += host_len + 1;

    if (last > p && last[-1] == '/') {
        last--;
    }

    slash = memchr(p, '/', last - p);
    if (slash == NULL) {
        return SMCP_ERR;
    }

    repo->owner = p;
    repo->owner_len = slash - p;
    repo->name = slash + 1;
    repo->name_len = last - slash - 1;

    if (!smcp_repo_part(repo->owner, repo->owner_len)
        || !smcp_repo_part(repo->name, repo->name_len))
    {
        return SMCP_ERR;
    }

    repo->name_len = smcp_repo_strip_git(repo->name, repo->name_len);

    return repo->name_len ? SMCP_OK : SMCP_ERR;
}


int
smcp_grant_valid(const char *grant, size_t len)
{
    const char  *slash;

    if (len == 1 && grant[0] == '*') {
        return 1;
    }

    slash = memchr(grant, '/', len);
    if (slash == NULL || !smcp_repo_part(grant, slash - grant)) {
        return 0;
    }

    len -= slash - grant + 1;

    return (len == 1 && slash[1] == '*')
           || (smcp_repo_part(slash + 1, len)
               && smcp_repo_strip_git(slash + 1, len) > 0);
}


int
smcp_grant_match(const char *grant, size_t len, const smcp_repo_t *repo)
{
    size_t       olen, nlen;
    const char  *name;

    if (!smcp_grant_valid(grant, len)) {
        return 0;
    }

    if (len == 1) {
        return 1;                               /* "*" */
    }

    olen = (const char *) memchr(grant, '/', len) - grant;

    if (olen != repo->owner_len
        || smcp_casecmp(grant, repo->owner, olen) != 0)
    {
        return 0;
    }

    name = grant + olen + 1;
    nlen = len - olen - 1;

    if (nlen == 1 && name[0] == '*') {
        return 1;                               /* every repository of owner */
    }

    nlen = smcp_repo_strip_git(name, nlen);

    return nlen == repo->name_len
           && smcp_casecmp(name, repo->name, nlen) == 0;
}


/* models, tenants */


int
smcp_valid_model(const char *s, size_t len)
{
    size_t  i, start, segments;
    int     c;

    if (len == 0 || len > SMCP_MODEL_MAX) {
        return 0;
    }

    start = 0;
    segments = 0;

    for (i = 0; i <= len; i++) {
        if (i < len && s[i] != '/') {
            c = (unsigned char) s[i];

            if (!smcp_name_byte(c) && c != ':' && c != '@') {
                return 0;
            }

            continue;
        }

        if (i == start || s[start] == '.') {
            return 0;
        }

        segments++;
        start = i + 1;
    }

    return segments >= 2;
}


static const struct {
    const char  *name;
    const char  *provider;
} smcp_agents[] = {
    { "opencode", "" },
    { "claude-code", "anthropic" },
    { "codex", "openai" }
};


const char *
smcp_agent_provider(const char *s, size_t len)
{
    size_t  i;

    for (i = 0; i < sizeof(smcp_agents) / sizeof(smcp_agents[0]); i++) {
        if (strlen(smcp_agents[i].name) == len
            && memcmp(smcp_agents[i].name, s, len) == 0)
        {
            return smcp_agents[i].provider;
        }
    }

    return NULL;
}


int
smcp_agent_fits(const char *agent, size_t alen, const char *model,
    size_t mlen)
{
    size_t       plen;
    const char  *p;

    p = smcp_agent_provider(agent, alen);
    if (p == NULL) {
        return 0;
    }

    plen = strlen(p);

    return plen == 0
           || (mlen > plen && memcmp(model, p, plen) == 0
               && model[plen] == '/');
}


int
smcp_valid_tenant(const char *s, size_t len)
{
    size_t  i;

    if (s == NULL || len == 0 || len > SMCP_TENANT_MAX) {
        return 0;
    }

    for (i = 0; i < len; i++) {
        if (!smcp_name_byte((unsigned char) s[i]) && s[i] != '@') {
            return 0;
        }
    }

    return 1;
}


/* stream ids */


/* a decimal of 1..20 digits that fits in 64 bits; returns its length */
static size_t
smcp_u64(const char *s, size_t len, uint64_t *out)
{
    size_t    i;
    uint64_t  v, d;

    v = 0;

    for (i = 0; i < len && s[i] >= '0' && s[i] <= '9'; i++) {
        d = (uint64_t) (s[i] - '0');

        if (v > (UINT64_MAX - d) / 10) {
            return 0;
        }

        v = v * 10 + d;
    }

    *out = v;

    return i;
}


int
smcp_valid_stream_id(const char *s, size_t len)
{
    size_t    n;
    uint64_t  v;

    if (len == 0 || len > SMCP_STREAM_ID_MAX) {
        return 0;
    }

    n = smcp_u64(s, len, &v);

    if (n == 0) {
        return 0;
    }

    if (n == len) {
        return 1;
    }

    if (s[n] != '-' || n + 1 == len) {
        return 0;
    }

    return smcp_u64(s + n + 1, len - n - 1, &v) == len - n - 1;
}


/* cursors */


int
smcp_cursor_encode(char *dst, const char *text, size_t len)
{
    if (len > SMCP_CURSOR_TEXT_MAX || memchr(text, '\0', len) != NULL) {
        return SMCP_ERR;
    }

    smcp_b64url_encode(dst, (const unsigned char *) text, len);

    return SMCP_OK;
}


int
smcp_cursor_decode(const char *src, size_t len, char *dst, size_t *n)
{
    unsigned char  buf[SMCP_CURSOR_MAX];

    if (len == 0 || len > SMCP_CURSOR_MAX
        || smcp_b64url_decode(buf, n, src, len) != SMCP_OK
        || *n == 0 || *n > SMCP_CURSOR_TEXT_MAX
        || memchr(buf, '\0', *n) != NULL)
    {
        return SMCP_ERR;
    }

    memcpy(dst, buf, *n);
    dst[*n] = '\0';

    return SMCP_OK;
}


int
smcp_cursor_number(const char *src, size_t len, char kind, uint64_t max,
    uint64_t *out)
{
    size_t  n;
    char    text[SMCP_CURSOR_TEXT_MAX + 1];

    if (smcp_cursor_decode(src, len, text, &n) != SMCP_OK
        || n < 3 || text[0] != kind || text[1] != ':'
        || smcp_u64(text + 2, n - 2, out) != n - 2
        || *out > max)
    {
        return SMCP_ERR;
    }

    return SMCP_OK;
}


int
smcp_cursor_id(const char *src, size_t len, char kind, const char *prefix,
    char *id, char *score)
{
    size_t    n, slen;
    uint64_t  v;
    char      text[SMCP_CURSOR_TEXT_MAX + 1];

    if (smcp_cursor_decode(src, len, text, &n) != SMCP_OK
        || n < 2 + SMCP_ID_LEN + 2 || text[0] != kind || text[1] != ':'
        || !smcp_valid_id(text + 2, SMCP_ID_LEN, prefix)
        || text[2 + SMCP_ID_LEN] != ':')
    {
        return SMCP_ERR;
    }

    slen = n - (3 + SMCP_ID_LEN);

    if (slen > 19 || smcp_u64(text + 3 + SMCP_ID_LEN, slen, &v) != slen) {
        return SMCP_ERR;
    }

    memcpy(id, text + 2, SMCP_ID_LEN);
    id[SMCP_ID_LEN] = '\0';
    memcpy(score, text + 3 + SMCP_ID_LEN, slen);
    score[slen] = '\0';

    return SMCP_OK;
}


int
smcp_cursor_run(const char *src, size_t len, char *run_id, char *score)
{
    return smcp_cursor_id(src, len, 'r', SMCP_RUN_ID_PREFIX, run_id, score);
}
