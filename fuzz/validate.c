/*
 * The checks of tenant input (common/smcp_validate.c): branch names,
 * repository URLs and the token's repository grants, models, tenants,
 * Redis stream ids.  Each gets the input as it is (not NUL-terminated, in
 * a buffer of exactly its length).
 *
 * Checked, against the rules the header states: what is accepted is of
 * the allowed bytes and lengths (and so holds no NUL, no control
 * character, no "..", no "@{" in a branch); a parsed repository's owner
 * and name lie inside the URL and make it again; a repository matches
 * "*", "owner/" + "*", its own "owner/name" in any case, and no grant of
 * another owner; a stream id is accepted exactly when it is "<ms>[-<seq>]"
 * of numbers that fit in 64 bits.
 */

#include <string.h>
#include <strings.h>

#include "smcp_validate.h"
#include "fuzz.h"


static int
fuzz_all(const char *s, size_t len, const char *set)
{
    size_t  i;

    for (i = 0; i < len; i++) {
        if (s[i] == '\0' || strchr(set, s[i]) == NULL) {
            return 0;
        }
    }

    return 1;
}


#define FUZZ_REPO_SET  "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ" \
                       "0123456789._-"


static void
fuzz_branch(const char *s, size_t len)
{
    size_t  i;

    if (!smcp_valid_branch(s, len)) {
        return;
    }

    fuzz_check(len > 0 && len <= SMCP_BRANCH_MAX, "branch: its length");
    fuzz_check(s[0] != '-' && s[0] != '/' && s[len - 1] != '/'
               && s[len - 1] != '.', "branch: its ends");

    for (i = 0; i < len; i++) {
        fuzz_check((unsigned char) s[i] > 0x20
                   && (unsigned char) s[i] < 0x7f
                   && strchr("~^:?*[\\", s[i]) == NULL,
                   "branch: no control, space, non-ASCII or special byte");
        fuzz_check(i == 0 || !(s[i - 1] == '.' && s[i] == '.'),
                   "branch: no \"..\"");
        fuzz_check(i == 0 || !(s[i - 1] == '@' && s[i] == '{'),
                   "branch: no \"@{\"");
        fuzz_check(i == 0 || !(s[i - 1] == '/' && (s[i] == '/'
                                                   || s[i] == '.')),
                   "branch: no empty or hidden component");
    }
}


static void
fuzz_repo(const char *url, size_t len)
{
    char         again[256];
    size_t       n, olen;
    smcp_repo_t  repo, back;
    const char  *grants[4];
    int          i;

    if (smcp_repo_parse(url, len, "github.com", 10, &repo) != SMCP_OK) {
        return;
    }

    fuzz_check(repo.owner >= url && repo.owner + repo.owner_len <= url + len
               && repo.name >= url && repo.name + repo.name_len <= url + len,
               "repository: owner and name inside the URL");
    fuzz_check(repo.owner_len > 0 && repo.owner_len <= SMCP_REPO_PART_MAX
               && repo.name_len > 0 && repo.name_len <= SMCP_REPO_PART_MAX,
               "repository: owner and name lengths");
    fuzz_check(fuzz_all(repo.owner, repo.owner_len, FUZZ_REPO_SET)
               && fuzz_all(repo.name, repo.name_len, FUZZ_REPO_SET)
               && repo.owner[0] != '.' && repo.name[0] != '.',
               "repository: owner and name of the allowed bytes");

    /* a name that still ends in ".git" ("x.git.git": one is removed)
     * cannot be written again as itself: the rest is not checked */
    if (repo.name_len > 4
        && strncasecmp(repo.name + repo.name_len - 4, ".git", 4) == 0)
    {
        return;
    }

    /* https://github.com/owner/name parses back to the same */
    n = snprintf(again, sizeof(again), "https://github.com/%.*s/%.*s",
                 (int) repo.owner_len, repo.owner,
                 (int) repo.name_len, repo.name);
    fuzz_check(smcp_repo_parse(again, n, "github.com", 10, &back) == SMCP_OK
               && back.owner_len == repo.owner_len
               && back.name_len == repo.name_len,
               "repository: its canonical URL parses the same");

    /* grants */
    n = snprintf(again, sizeof(again), "%.*s/%.*s",
                 (int) repo.owner_len, repo.owner,
                 (int) repo.name_len, repo.name);
    olen = repo.owner_len;

    fuzz_check(smcp_grant_match("*", 1, &repo), "grant \"*\" matches");
    fuzz_check(smcp_grant_match(again, n, &repo),
               "grant owner/name matches its repository");

    for (i = 0; again[i]; i++) {
        if (again[i] >= 'a' && again[i] <= 'z') {
            again[i] -= 'a' - 'A';
        }
    }

    fuzz_check(smcp_grant_match(again, n, &repo),
               "grant OWNER/NAME matches too (GitHub ignores case)");

    memcpy(again + olen + 1, "*", 2);
    fuzz_check(smcp_grant_match(again, olen + 2, &repo),
               "grant owner/" "* matches");

    grants[0] = "someone-else/*";
    grants[1] = "someone-else/x";
    grants[2] = "*/*";
    grants[3] = "/";

    for (i = 0; i < 4; i++) {
        if (!(repo.owner_len == 12
              && strncasecmp(repo.owner, "someone-else", 12) == 0))
        {
            fuzz_check(!smcp_grant_match(grants[i], strlen(grants[i]),
                                         &repo),
                       "no grant of another owner matches");
        }
    }
}


static void
fuzz_grant(const char *g, size_t len)
{
    smcp_repo_t  repo;

    repo.owner = "owner";
    repo.owner_len = 5;
    repo.name = "repo";
    repo.name_len = 4;

    if (smcp_grant_match(g, len, &repo)) {
        fuzz_check(smcp_grant_valid(g, len), "a grant that matches is valid");
    }

    if (smcp_grant_valid(g, len)) {
        fuzz_check(fuzz_all(g, len, FUZZ_REPO_SET "/*"),
                   "grant: of the allowed bytes");
    }
}


/* the stream id rule, spelled out */
static int
fuzz_stream_id(const char *s, size_t len)
{
    size_t    i, part, digits;
    uint64_t  v;

    part = 0;
    digits = 0;
    v = 0;

    for (i = 0; i < len; i++) {
        if (s[i] == '-' && part == 0 && digits > 0) {
            part = 1;
            digits = 0;
            v = 0;
            continue;
        }

        if (s[i] < '0' || s[i] > '9') {
            return 0;
        }

        if (v > (UINT64_MAX - (uint64_t) (s[i] - '0')) / 10) {
            return 0;
        }

        v = v * 10 + (uint64_t) (s[i] - '0');
        digits++;
    }

    return digits > 0 && len <= SMCP_STREAM_ID_MAX;
}


static void
fuzz_names(const char *s, size_t len)
{
    if (smcp_valid_model(s, len)) {
        fuzz_check(len <= SMCP_MODEL_MAX && memchr(s, '/', len) != NULL
                   && fuzz_all(s, len, FUZZ_REPO_SET ":@/"),
                   "model: provider/model of the allowed bytes");
    }

    if (smcp_valid_tenant(s, len)) {
        fuzz_check(len > 0 && len <= SMCP_TENANT_MAX
                   && fuzz_all(s, len, FUZZ_REPO_SET "@"),
                   "tenant: of the allowed bytes (it names Redis keys)");
    }

    fuzz_check(smcp_valid_stream_id(s, len) == fuzz_stream_id(s, len),
               "stream id: accepted exactly when <ms>[-<seq>] of 64 bits");
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const fuzz_text_pt  checks[] = {
        fuzz_branch, fuzz_repo, fuzz_grant, fuzz_names, NULL
    };

    return fuzz_text(data, size, checks);
}
