/*
 * Unit tests of common/smcp_validate.c, common/smcp_diff.c,
 * common/smcp_revoked.c, common/smcp_jsonrpc.c, common/smcp_keyring.c and
 * the key ids of common/smcp_jwt.c, common/smcp_redis_addr.c,
 * common/smcp_url.c: what a tenant, a sandbox, an operator's keys file or
 * a Redis Sentinel sends, hostile cases first (NUL, overlong, non-ASCII,
 * ".lock", "..", userinfo, ports, quoting), and the addresses no
 * notification goes to, each range's ends; common/smcp_usage.c on each
 * provider's answers, the model's text steering them, and hostile request
 * bodies.  Prints TAP.
 */

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "smcp_diff.h"
#include "smcp_json.h"
#include "smcp_jsonrpc.h"
#include "smcp_jwt.h"
#include "smcp_keyring.h"
#include "smcp_keys.h"
#include "smcp_redis_addr.h"
#include "smcp_revoked.h"
#include "smcp_url.h"
#include "smcp_usage.h"
#include "smcp_util.h"
#include "smcp_validate.h"
#include "tap.h"


/* a printable name for a test input (escapes control and high bytes) */
static const char *
show(const char *s, size_t len)
{
    static char  buf[8][96];
    static int   k;
    char        *b, *p;
    size_t       i;

    b = buf[k++ % 8];
    p = b;

    for (i = 0; i < len && p < b + sizeof(buf[0]) - 8; i++) {
        unsigned char  c = (unsigned char) s[i];

        if (c < 0x20 || c >= 0x7f || c == '\\') {
            p += sprintf(p, "\\x%02x", c);

        } else {
            *p++ = (char) c;
        }
    }

    if (i < len) {
        p += sprintf(p, "...(%zu)", len);
    }

    *p = '\0';

    return b;
}


static void *
xmalloc(size_t n)
{
    void  *p;

    p = malloc(n);
    if (p == NULL) {
        printf("Bail out! out of memory\n");
        exit(1);
    }

    return p;
}


static char *
repeat(char c, size_t n, const char *tail)
{
    char    *s;
    size_t   t;

    t = strlen(tail);
    s = xmalloc(n + t + 1);
    memset(s, c, n);
    memcpy(s + n, tail, t + 1);

    return s;
}


/* inputs with a length: "a\0b" keeps its NUL */
typedef struct {
    const char  *s;
    size_t       len;
} in_t;

#define IN(lit)  { lit, sizeof(lit) - 1 }


static void
test_branch(void)
{
    static const in_t  good[] = {
        IN("main"), IN("feature/x-1.2_y"), IN("a/b/c"), IN("v1.0"),
        IN("a@b"), IN("release-2025"), IN("x.lockx"), IN("lock"),
    };
    static const in_t  bad[] = {
        IN(""), IN("a..b"), IN("-x"), IN("x.lock"), IN("a/x.lock/b"),
        IN("a.lock/b"), IN("a b"), IN("a~1"), IN("a^b"), IN("a:b"),
        IN("a?b"), IN("a*b"), IN("a[b"), IN("a\\b"), IN("a/"), IN("/a"),
        IN("a//b"), IN("a."), IN("a@{b"), IN(".hidden"), IN("a/.b"),
        IN("a\tb"), IN("a\nb"), IN("a\0b"), IN("\0"), IN("HEAD"), IN("@"),
        IN("caf\xc3\xa9"), IN("a\x7f"), IN("\xe2\x80\xaemain"), IN(".."),
        IN("a/../b"), IN("./a"), IN("a/."),
    };

    size_t  i;
    char   *s;

    for (i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        ok(smcp_valid_branch(good[i].s, good[i].len), "branch '%s' valid",
           show(good[i].s, good[i].len));
    }

    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ok(!smcp_valid_branch(bad[i].s, bad[i].len), "branch '%s' refused",
           show(bad[i].s, bad[i].len));
    }

    s = repeat('b', SMCP_BRANCH_MAX, "");
    ok(smcp_valid_branch(s, SMCP_BRANCH_MAX), "branch of 255 bytes valid");
    free(s);

    s = repeat('b', SMCP_BRANCH_MAX + 1, "");
    ok(!smcp_valid_branch(s, SMCP_BRANCH_MAX + 1),
       "branch of 256 bytes refused");
    free(s);
}


static void
test_repository(void)
{
    static const struct {
        const char  *url;
        const char  *owner;
        const char  *name;
    } good[] = {
        { "https://github.com/acme/app", "acme", "app" },
        { "https://github.com/acme/app.git", "acme", "app" },
        { "https://github.com/acme/app/", "acme", "app" },
        { "https://github.com/acme/app.git/", "acme", "app" },
        { "https://GitHub.COM/Acme/App", "Acme", "App" },
        { "https://github.com/a-b_c/x.y-z_1", "a-b_c", "x.y-z_1" },
        { "https://github.com/acme/a..b", "acme", "a..b" },
    };
    static const in_t  bad[] = {
        IN("http://github.com/a/b"), IN("HTTPS://github.com/a/b"),
        IN("git@github.com:a/b.git"), IN("ssh://git@github.com/a/b"),
        IN("file:///etc"), IN("https://gitlab.com/a/b"),
        IN("https://github.com.evil.com/a/b"),
        IN("https://evil.com/github.com/a/b"),
        IN("https://user:pass@github.com/a/b"),
        IN("https://ghp_x@github.com/a/b"),
        IN("https://github.com@evil.com/a/b"),
        IN("https://github.com:443/a/b"), IN("https://github.com:/a/b"),
        IN("https://github.com/a/b?x=1"), IN("https://github.com/a/b#f"),
        IN("https://github.com/a"), IN("https://github.com/a/"),
        IN("https://github.com/"), IN("https://github.com"),
        IN("https://github.com/a/b/c"), IN("https://github.com//b"),
        IN("https://github.com/a//b"), IN("https://github.com/a/b//"),
        IN("https://github.com/../b"), IN("https://github.com/a/.."),
        IN("https://github.com/a/."), IN("https://github.com/.a/b"),
        IN("https://github.com/a/.git"), IN("https://github.com/a/.b"),
        IN("https://github.com/a/%2e%2e"), IN("https://github.com/a/b c"),
        IN("https://github.com/a/b\n"), IN("https://github.com/a/b\0x"),
        IN("https://github.com/a\0/b"), IN("https://github.com/ac\xc3\xa9/b"),
        IN("https://github.com/a/b\\c"), IN(""), IN("https://"),
        IN("https://github.com\\a/b"),
    };

    size_t       i;
    char        *s;
    smcp_repo_t  r;
    const char  *h = "github.com";

    for (i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        memset(&r, 0, sizeof(r));
        ok(smcp_repo_parse(good[i].url, strlen(good[i].url), h, strlen(h), &r)
           == SMCP_OK
           && r.owner_len == strlen(good[i].owner)
           && memcmp(r.owner, good[i].owner, r.owner_len) == 0
           && r.name_len == strlen(good[i].name)
           && memcmp(r.name, good[i].name, r.name_len) == 0,
           "repository %s -> %s/%s", good[i].url, good[i].owner,
           good[i].name);
    }

    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ok(smcp_repo_parse(bad[i].s, bad[i].len, h, strlen(h), &r)
           == SMCP_ERR, "repository '%s' refused",
           show(bad[i].s, bad[i].len));
    }

    ok(smcp_repo_parse("https://git.example.org/a/b", 27, "git.example.org",
                       15, &r) == SMCP_OK, "another configured host");
    ok(smcp_repo_parse("https://github.com/a/b", 22, "", 0, &r) == SMCP_ERR,
       "no host configured: nothing accepted");

    s = repeat('o', SMCP_REPO_PART_MAX, "");
    {
        char  url[512];

        snprintf(url, sizeof(url), "https://github.com/%s/%s", s, s);
        ok(smcp_repo_parse(url, strlen(url), h, strlen(h), &r) == SMCP_OK,
           "owner and name of 100 bytes valid");
        snprintf(url, sizeof(url), "https://github.com/%so/x", s);
        ok(smcp_repo_parse(url, strlen(url), h, strlen(h), &r) == SMCP_ERR,
           "owner of 101 bytes refused");
        snprintf(url, sizeof(url), "https://github.com/x/%so", s);
        ok(smcp_repo_parse(url, strlen(url), h, strlen(h), &r) == SMCP_ERR,
           "name of 101 bytes refused");
    }
    free(s);
}


static int
grant(const char *g, const char *url)
{
    smcp_repo_t  r;

    if (smcp_repo_parse(url, strlen(url), "github.com", 10, &r) != SMCP_OK) {
        return -1;
    }

    return smcp_grant_match(g, strlen(g), &r);
}


static void
test_grants(void)
{
    static const in_t  good[] = {
        IN("*"), IN("acme/app"), IN("acme/*"), IN("Acme/App.git"),
        IN("a-b/c_d.e"),
    };
    static const in_t  bad[] = {
        IN(""), IN("acme"), IN("acme/"), IN("/app"), IN("*/app"),
        IN("acme/a*"), IN("acme/*/x"), IN("acme/app/x"), IN("a b/c"),
        IN("acme/app\0"), IN("acme\0/app"), IN("../x"), IN(".x/y"),
        IN("x/.y"), IN("acme/.git"), IN("**"), IN("*/*"), IN("acme/**"),
        IN("ac\xc3\xa9/x"), IN("acme/app "), IN(" acme/app"),
        IN("https://github.com/acme/app"),
    };

    size_t  i;

    for (i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        ok(smcp_grant_valid(good[i].s, good[i].len), "grant '%s' valid",
           show(good[i].s, good[i].len));
    }

    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ok(!smcp_grant_valid(bad[i].s, bad[i].len), "grant '%s' refused",
           show(bad[i].s, bad[i].len));
    }

    ok(grant("acme/app", "https://github.com/acme/app") == 1,
       "acme/app grants acme/app");
    ok(grant("acme/app", "https://github.com/ACME/App") == 1,
       "... case-insensitively");
    ok(grant("acme/app", "https://github.com/acme/app.git") == 1,
       "... with .git in the URL");
    ok(grant("acme/app.git", "https://github.com/acme/app") == 1,
       "a grant with .git names the same repository");
    ok(grant("acme/app", "https://github.com/acme/app-evil") == 0,
       "acme/app does not grant acme/app-evil");
    ok(grant("acme/app", "https://github.com/acme/ap") == 0,
       "acme/app does not grant acme/ap");
    ok(grant("acme/app", "https://github.com/acme/app.gitx") == 0,
       "acme/app does not grant acme/app.gitx");
    ok(grant("acme/app", "https://github.com/evil/app") == 0,
       "acme/app does not grant evil/app");
    ok(grant("acme/*", "https://github.com/acme/other") == 1,
       "acme/* grants acme/other");
    ok(grant("acme/*", "https://github.com/Acme/other") == 1,
       "acme/* grants Acme/other");
    ok(grant("acme/*", "https://github.com/acmex/app") == 0,
       "acme/* does not grant acmex/app");
    ok(grant("acme/*", "https://github.com/acm/app") == 0,
       "acme/* does not grant acm/app");
    ok(grant("*", "https://github.com/any/thing") == 1, "* grants anything");
    ok(grant("acme/a*", "https://github.com/acme/ab") == 0,
       "an invalid grant grants nothing");
    ok(grant("", "https://github.com/acme/ab") == 0,
       "an empty grant grants nothing");
}


static void
test_model(void)
{
    static const in_t  good[] = {
        IN("anthropic/claude-sonnet-4-5"), IN("openai/gpt-5"),
        IN("openrouter/anthropic/claude-3.5"), IN("a/b:c@d"),
        IN("compat/qwen3-coder"),
    };
    static const in_t  bad[] = {
        IN(""), IN("x"), IN("/x"), IN("x/"), IN("a//b"), IN("a/../b"),
        IN("../a"), IN("a/.b"), IN("a b/c"), IN("a/b c"), IN("a/caf\xc3\xa9"),
        IN("a/b\0"), IN("a\0/b"), IN("a/b\n"), IN("a/b?x"), IN("a/b#x"),
        IN("a\\b/c"), IN("/"), IN("//"),
    };

    size_t  i;
    char   *s;

    for (i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        ok(smcp_valid_model(good[i].s, good[i].len), "model '%s' valid",
           show(good[i].s, good[i].len));
    }

    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ok(!smcp_valid_model(bad[i].s, bad[i].len), "model '%s' refused",
           show(bad[i].s, bad[i].len));
    }

    s = repeat('m', SMCP_MODEL_MAX - 2, "/x");
    ok(smcp_valid_model(s, SMCP_MODEL_MAX), "model of 200 bytes valid");
    free(s);
    s = repeat('m', SMCP_MODEL_MAX - 1, "/x");
    ok(!smcp_valid_model(s, SMCP_MODEL_MAX + 1), "model of 201 bytes refused");
    free(s);
}


static void
test_tenant(void)
{
    static const in_t  good[] = {
        IN("alice"), IN("a@b.c"), IN("A-Z_09"), IN("x"),
    };
    static const in_t  bad[] = {
        IN(""), IN("a:b"), IN("a*"), IN("a b"), IN("\xc3\xa9"), IN("a\0"),
        IN("a/b"), IN("{x}"), IN("a\nb"), IN("a?"), IN("runs:bob"),
    };

    size_t  i;
    char   *s;

    for (i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        ok(smcp_valid_tenant(good[i].s, good[i].len), "tenant '%s' valid",
           show(good[i].s, good[i].len));
    }

    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ok(!smcp_valid_tenant(bad[i].s, bad[i].len), "tenant '%s' refused",
           show(bad[i].s, bad[i].len));
    }

    ok(!smcp_valid_tenant(NULL, 0), "no tenant refused");

    s = repeat('t', SMCP_TENANT_MAX + 1, "");
    ok(smcp_valid_tenant(s, SMCP_TENANT_MAX), "tenant of 128 bytes valid");
    ok(!smcp_valid_tenant(s, SMCP_TENANT_MAX + 1),
       "tenant of 129 bytes refused");
    free(s);
}


static void
test_stream_id(void)
{
    static const in_t  good[] = {
        IN("0"), IN("1764430000000-0"), IN("1764430000000"),
        IN("18446744073709551615-18446744073709551615"),
    };
    static const in_t  bad[] = {
        IN(""), IN("-"), IN("1-"), IN("-1"), IN("1--2"), IN("1-2-3"),
        IN("18446744073709551616"), IN("1-18446744073709551616"),
        IN("99999999999999999999999"), IN("+1"), IN(" 1"), IN("1 "),
        IN("1\0"), IN("a"), IN("1-a"), IN("0x10"), IN("(1"), IN("1-*"),
        IN("\xd9\xa1"),
        IN("000000000000000000000000000000000000000001"),
    };

    size_t  i;

    for (i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        ok(smcp_valid_stream_id(good[i].s, good[i].len),
           "stream id '%s' valid", show(good[i].s, good[i].len));
    }

    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ok(!smcp_valid_stream_id(bad[i].s, bad[i].len),
           "stream id '%s' refused", show(bad[i].s, bad[i].len));
    }
}


static void
test_cursor(void)
{
    size_t    n;
    uint64_t  v;
    char      enc[SMCP_CURSOR_MAX + 1], text[SMCP_CURSOR_TEXT_MAX + 1];
    char      id[SMCP_ID_LEN + 1], score[20], *s;
    char      raw[200];

    ok(smcp_cursor_encode(enc, "t:5", 3) == SMCP_OK
       && smcp_cursor_decode(enc, strlen(enc), text, &n) == SMCP_OK
       && n == 3 && strcmp(text, "t:5") == 0, "cursor round trip");

    ok(smcp_cursor_number(enc, strlen(enc), 't', 10, &v) == SMCP_OK && v == 5,
       "cursor t:5 -> 5");
    ok(smcp_cursor_number(enc, strlen(enc), 't', 4, &v) == SMCP_ERR,
       "cursor t:5 above the maximum 4 refused");
    ok(smcp_cursor_number(enc, strlen(enc), 'd', 10, &v) == SMCP_ERR,
       "cursor of another kind refused");

    ok(smcp_cursor_decode("!!garbage!!", 11, text, &n) == SMCP_ERR,
       "cursor not base64url refused");
    ok(smcp_cursor_decode("", 0, text, &n) == SMCP_ERR,
       "empty cursor refused");
    ok(smcp_cursor_decode(NULL, 0, text, &n) == SMCP_ERR,
       "absent cursor refused");
    ok(smcp_cursor_decode("dDo1", 4, text, &n) == SMCP_OK,
       "cursor dDo1 (t:5) decodes");
    ok(smcp_cursor_decode("dDo1\0", 5, text, &n) == SMCP_ERR,
       "cursor with a NUL byte refused");
    ok(smcp_cursor_decode("dA", 2, text, &n) == SMCP_OK && n == 1,
       "one-byte cursor decodes");
    ok(smcp_cursor_decode("dAA", 3, text, &n) == SMCP_ERR,
       "cursor decoding to a NUL refused");

    s = repeat('A', SMCP_CURSOR_MAX + 4, "");
    ok(smcp_cursor_decode(s, SMCP_CURSOR_MAX + 4, text, &n) == SMCP_ERR,
       "overlong cursor refused");
    free(s);

    memset(raw, 'x', 121);
    ok(smcp_cursor_encode(enc, raw, 121) == SMCP_ERR,
       "text over 120 bytes not encoded");
    ok(smcp_cursor_encode(enc, raw, 120) == SMCP_OK, "text of 120 encoded");
    ok(smcp_cursor_encode(enc, "a\0b", 3) == SMCP_ERR,
       "text with NUL not encoded");

#define NUM(text_, kind_, max_, want_ok_, want_v_, name_)                     \
    do {                                                                      \
        smcp_cursor_encode(enc, text_, sizeof(text_) - 1);                    \
        v = 12345;                                                            \
        ok((smcp_cursor_number(enc, strlen(enc), kind_, max_, &v) == SMCP_OK) \
           == (want_ok_) && (!(want_ok_) || v == (want_v_)), name_);          \
    } while (0)

    NUM("d:0", 'd', UINT64_MAX, 1, 0, "d:0 -> 0");
    NUM("d:65536", 'd', UINT64_MAX, 1, 65536, "d:65536");
    NUM("d:", 'd', UINT64_MAX, 0, 0, "d: (no number) refused");
    NUM("d:-1", 'd', UINT64_MAX, 0, 0, "d:-1 refused");
    NUM("d:+1", 'd', UINT64_MAX, 0, 0, "d:+1 refused");
    NUM("d:1a", 'd', UINT64_MAX, 0, 0, "d:1a refused");
    NUM("d:1 ", 'd', UINT64_MAX, 0, 0, "d:1<space> refused");
    NUM("d:18446744073709551616", 'd', UINT64_MAX, 0, 0,
        "d: beyond 64 bits refused");
    NUM("d:18446744073709551615", 'd', UINT64_MAX, 1, UINT64_MAX,
        "d: 2^64-1 accepted with no maximum");
    NUM("d5", 'd', UINT64_MAX, 0, 0, "d5 (no colon) refused");
    NUM("dd:5", 'd', UINT64_MAX, 0, 0, "dd:5 refused");

#define CUR(kind_, prefix_, text_, want_ok_, name_)                           \
    do {                                                                      \
        smcp_cursor_encode(enc, text_, sizeof(text_) - 1);                    \
        ok(((((kind_) == 'r')                                                 \
             ? smcp_cursor_run(enc, strlen(enc), id, score)                   \
             : smcp_cursor_id(enc, strlen(enc), kind_, prefix_, id, score))   \
            == SMCP_OK) == (want_ok_), name_);                                \
    } while (0)
#define RUN(text_, want_ok_, name_)                                           \
    CUR('r', SMCP_RUN_ID_PREFIX, text_, want_ok_, name_)
#define SES(text_, want_ok_, name_)                                           \
    CUR('s', SMCP_SESSION_ID_PREFIX, text_, want_ok_, name_)

    RUN("r:run_0123456789abcdef01234567:1764430000000", 1, "run cursor");
    ok(strcmp(id, "run_0123456789abcdef01234567") == 0
       && strcmp(score, "1764430000000") == 0, "run cursor: id and score");
    RUN("r:run_0123456789abcdef01234567:", 0, "run cursor without score");
    RUN("r:run_0123456789abcdef0123456:17", 0, "run cursor short id");
    RUN("r:run_0123456789ABCDEF01234567:17", 0, "run cursor upper-case id");
    RUN("r:ses_0123456789abcdef01234567:17", 0, "run cursor session id");
    RUN("r:run_0123456789abcdef01234567:1:2", 0, "run cursor extra colon");
    RUN("r:run_0123456789abcdef01234567:-1", 0, "run cursor negative");
    RUN("r:run_0123456789abcdef01234567:12345678901234567890", 0,
        "run cursor score of 20 digits");
    RUN("r:run_0123456789abcdef01234567:inf", 0, "run cursor score inf");
    RUN("t:run_0123456789abcdef01234567:17", 0, "run cursor other kind");

    SES("s:ses_0123456789abcdef01234567:1764430000000", 1, "session cursor");
    ok(strcmp(id, "ses_0123456789abcdef01234567") == 0
       && strcmp(score, "1764430000000") == 0, "session cursor: id, score");
    SES("s:run_0123456789abcdef01234567:17", 0, "session cursor: a run id");
    SES("r:ses_0123456789abcdef01234567:17", 0, "session cursor: kind r");
    SES("r:run_0123456789abcdef01234567:17", 0, "session cursor: a run's");
    SES("s:ses_0123456789abcdef01234567:-1", 0, "session cursor negative");
    SES("s:ses_0123456789abcdef01234567:", 0, "session cursor no score");
}


/* diffs */


static const char  diff_a[] =
    "diff --git a/a.txt b/a.txt\n"
    "index 1111111..2222222 100644\n"
    "--- a/a.txt\n"
    "+++ b/a.txt\n"
    "@@ -1,2 +1,2 @@\n"
    "-old\n"
    "+new\n"
    " same\n";

static const char  diff_space[] =
    "diff --git a/src/big file.txt b/src/big file.txt\n"
    "--- a/src/big file.txt\t\n"
    "+++ b/src/big file.txt\t\n"
    "@@ -0,0 +1,2 @@\n"
    "+one\n"
    "+two\n";

static const char  diff_quoted[] =
    "diff --git \"a/t\\tb\" \"b/t\\tb\"\n"
    "--- \"a/t\\tb\"\n"
    "+++ \"b/t\\tb\"\n"
    "@@ -1 +1 @@\n"
    "-x\n"
    "+y\n";

static const char  diff_octal[] =
    "diff --git \"a/caf\\303\\251\" \"b/caf\\303\\251\"\n"
    "new file mode 100644\n"
    "--- /dev/null\n"
    "+++ \"b/caf\\303\\251\"\n"
    "@@ -0,0 +1 @@\n"
    "+\n";

static const char  diff_rename[] =
    "diff --git a/old name.c b/new.c\n"
    "similarity index 90%\n"
    "rename from old name.c\n"
    "rename to new.c\n"
    "--- a/old name.c\t\n"
    "+++ b/new.c\n"
    "@@ -1 +1 @@\n"
    "-a\n"
    "+b\n";

static const char  diff_deleted[] =
    "diff --git a/gone.c b/gone.c\n"
    "deleted file mode 100644\n"
    "--- a/gone.c\n"
    "+++ /dev/null\n"
    "@@ -1,3 +0,0 @@\n"
    "-1\n"
    "-2\n"
    "-3\n";

/* hunk lines that look like headers: a deleted line "-- a/other" and an
 * added line "diff --git ..." (prefixed, so never a header) */
static const char  diff_tricky[] =
    "diff --git a/t.md b/t.md\n"
    "--- a/t.md\n"
    "+++ b/t.md\n"
    "@@ -1,2 +1,2 @@\n"
    "--- a/other\n"
    "++++ b/other\n"
    "+diff --git a/evil b/evil\n"
    " rename from x\n";

static const char  diff_binary[] =
    "diff --git a/img.png b/img.png\n"
    "index 1111111..2222222 100644\n"
    "Binary files a/img.png and b/img.png differ\n";

static const char  diff_last[] =
    "diff --git a/c.txt b/c.txt\n"
    "--- a/c.txt\n"
    "+++ b/c.txt\n"
    "@@ -1 +1 @@\n"
    "-b\n"
    "+c";                       /* no newline at the end */


static int
find(const char *diff, size_t len, const char *path, size_t plen,
    size_t want_off, size_t want_len)
{
    size_t  off, n;

    if (!smcp_diff_find(diff, len, path, plen, &off, &n)) {
        return want_len == 0;
    }

    return off == want_off && n == want_len;
}


static void
test_diff_sections(void)
{
    char              *all, *p;
    size_t             len, o[9], pos;
    smcp_diff_file_t  *f;
    int                n;

    const char  *parts[] = {
        "preamble line\n", diff_a, diff_space, diff_quoted, diff_octal,
        diff_rename, diff_deleted, diff_tricky, diff_binary, diff_last
    };

    len = 0;
    for (n = 0; n < 10; n++) {
        len += strlen(parts[n]);
    }

    all = xmalloc(len + 1);
    p = all;

    for (n = 0; n < 10; n++) {
        if (n > 0) {
            o[n - 1] = p - all;
        }

        p += sprintf(p, "%s", parts[n]);
    }

#define SECTION(i)  o[i], strlen(parts[(i) + 1])

    ok(find(all, len, "a.txt", 5, SECTION(0)), "diff: a.txt section");
    ok(find(all, len, "src/big file.txt", 16, SECTION(1)),
       "diff: a path with a space (tab after the ---/+++ names)");
    ok(find(all, len, "t\tb", 3, SECTION(2)), "diff: a quoted path (tab)");
    ok(find(all, len, "caf\xc3\xa9", 5, SECTION(3)),
       "diff: a quoted path with octal escapes (UTF-8), new file");
    ok(find(all, len, "old name.c", 10, SECTION(4)),
       "diff: a rename under its old path");
    ok(find(all, len, "new.c", 5, SECTION(4)),
       "diff: a rename under its new path");
    ok(find(all, len, "gone.c", 6, SECTION(5)), "diff: a deleted file");
    ok(find(all, len, "t.md", 4, SECTION(6)), "diff: tricky hunk lines");
    ok(find(all, len, "other", 5, 0, 0),
       "diff: '--- a/other' inside a hunk is no header");
    ok(find(all, len, "evil", 4, 0, 0),
       "diff: '+diff --git' inside a hunk is no section");
    ok(find(all, len, "x", 1, 0, 0),
       "diff: ' rename from x' inside a hunk is no rename");
    ok(find(all, len, "img.png", 7, SECTION(7)), "diff: a binary file");
    ok(find(all, len, "c.txt", 5, SECTION(8)),
       "diff: the last section without a final newline");
    ok(find(all, len, "a.tx", 4, 0, 0) && find(all, len, "a.txt.bak", 9, 0, 0)
       && find(all, len, "A.txt", 5, 0, 0),
       "diff: paths match exactly (no prefix, no suffix, case)");
    ok(find(all, len, "b/a.txt", 7, 0, 0) && find(all, len, "a/a.txt", 7, 0, 0),
       "diff: the a/ b/ prefixes are not part of the path");
    ok(find(all, len, "preamble line", 13, 0, 0), "diff: the preamble is none");
    ok(find(all, len, "", 0, 0, 0), "diff: an empty path finds nothing");

    f = xmalloc(sizeof(smcp_diff_file_t));
    pos = 0;
    n = 0;

    while (smcp_diff_next(all, len, &pos, f)) {
        if (n == 0) {
            ok(f->additions == 1 && f->deletions == 1,
               "diff: a.txt counts +1 -1");
        }

        if (n == 4) {
            ok(strcmp(f->old_path, "old name.c") == 0
               && strcmp(f->new_path, "new.c") == 0,
               "diff: rename paths old name.c -> new.c");
        }

        if (n == 5) {
            ok(strcmp(f->old_path, "gone.c") == 0 && f->new_len == 0
               && f->deletions == 3 && f->additions == 0,
               "diff: deleted file: no new path, -3");
        }

        if (n == 3) {
            ok(f->old_len == 0 && strcmp(f->new_path, "caf\xc3\xa9") == 0,
               "diff: new file: no old path");
        }

        if (n == 6) {
            ok(f->additions == 2 && f->deletions == 1,
               "diff: hunk lines counted by their first byte");
        }

        n++;
    }

    ok(n == 9 && pos == len, "diff: nine sections, the whole diff read");

    free(f);
    free(all);
}


/* a section whose four path fields are plen bytes long */
static size_t
long_section(char *d, const char *path, size_t plen)
{
    static const char  *pre[] = { "diff --git a/", " b/", "\n--- a/",
                                  "\n+++ b/" };
    char               *p;
    size_t              i;

    p = d;

    for (i = 0; i < 4; i++) {
        memcpy(p, pre[i], strlen(pre[i]));
        p += strlen(pre[i]);
        memcpy(p, path, plen);
        p += plen;
    }

    memcpy(p, "\n@@ -1 +1 @@\n-a\n+b\n", 20);

    return p + 20 - d;
}


static void
test_diff_hostile(void)
{
    char    *d, *path;
    size_t   off, n, plen;
    long     r;
    char     buf[64];

    ok(!smcp_diff_find(NULL, 0, "a", 1, &off, &n), "diff: NULL diff");
    ok(!smcp_diff_find("", 0, "a", 1, &off, &n), "diff: empty diff");
    ok(!smcp_diff_find("diff --git ", 11, "a", 1, &off, &n),
       "diff: a bare header line");

    /* unterminated quote, bad escapes */
    ok(smcp_diff_unquote("\"a/x", 4, buf, sizeof(buf)) == -1,
       "unquote: unterminated");
    ok(smcp_diff_unquote("\"a\\q\"", 5, buf, sizeof(buf)) == -1,
       "unquote: unknown escape");
    ok(smcp_diff_unquote("\"a\\000\"", 7, buf, sizeof(buf)) == -1,
       "unquote: \\000 (NUL) refused");
    ok(smcp_diff_unquote("\"a\\777\"", 7, buf, sizeof(buf)) == -1,
       "unquote: \\777 beyond a byte refused");
    ok(smcp_diff_unquote("\"a\\12\"", 6, buf, sizeof(buf)) == -1,
       "unquote: short octal refused");
    ok(smcp_diff_unquote("\"a\\\"", 4, buf, sizeof(buf)) == -1,
       "unquote: escaped closing quote refused");
    ok(smcp_diff_unquote("\"a\"b\"", 5, buf, sizeof(buf)) == -1,
       "unquote: inner quote refused");
    r = smcp_diff_unquote("\"x\\\\y\\\"z\\n\"", 11, buf, sizeof(buf));
    ok(r == 6 && memcmp(buf, "x\\y\"z\n", 6) == 0, "unquote: escapes");
    ok(smcp_diff_unquote("\"abcdef\"", 8, buf, 5) == -1,
       "unquote: longer than the buffer refused");

    /* a path longer than SMCP_DIFF_PATH_MAX is nobody's */
    plen = SMCP_DIFF_PATH_MAX + 1;
    path = xmalloc(plen);
    memset(path, 'p', plen);
    d = xmalloc(4 * plen + 200);
    n = long_section(d, path, plen);
    ok(!smcp_diff_find(d, n, path, plen, &off, &n),
       "diff: a path over 4096 bytes is not found (nor overflows)");
    plen = SMCP_DIFF_PATH_MAX;
    n = long_section(d, path, plen);
    ok(smcp_diff_find(d, n, path, plen, &off, &n) && off == 0,
       "diff: a path of 4096 bytes is found");

    /* a NUL inside a path line */
    memcpy(d, "diff --git a/x\0y b/x\0y\n@@ -1 +1 @@\n", 36);
    ok(!smcp_diff_find(d, 36, "x", 1, &off, &n),
       "diff: a path with NUL is nobody's");

    free(d);
    free(path);
}


static void
test_revoked(void)
{
    static const in_t  good[] = {
        IN("0123456789abcdef0123456789abcdef"), IN("a"), IN("A-b_9"),
    };
    static const in_t  bad[] = {
        IN(""), IN("a b"), IN("a/b"), IN("a\0"), IN("caf\xc3\xa9"),
        IN("a:b"), IN("a.b"),
    };
    static const in_t  msgs[] = {
        IN(""), IN("x"), IN("x "), IN(" 1"), IN("x 1a"), IN("x -1"),
        IN("x 1 "), IN("x  1"), IN("x 1234567890123456789"), IN("x\0 1"),
        IN("a/b 1"), IN("x 1\n"),
    };

    size_t           i, n;
    int64_t          exp;
    const char      *jti;
    char             id[32], *s;
    smcp_revoked_t  *set;
    int              all;

    for (i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        ok(smcp_valid_jti(good[i].s, good[i].len), "jti '%s' valid",
           show(good[i].s, good[i].len));
    }

    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ok(!smcp_valid_jti(bad[i].s, bad[i].len), "jti '%s' refused",
           show(bad[i].s, bad[i].len));
    }

    s = repeat('j', SMCP_JTI_MAX + 1, "");
    ok(smcp_valid_jti(s, SMCP_JTI_MAX), "jti of 64 bytes valid");
    ok(!smcp_valid_jti(s, SMCP_JTI_MAX + 1), "jti of 65 bytes refused");
    free(s);

    ok(smcp_revoked_parse("abc 1764430000", 14, &jti, &n, &exp) == SMCP_OK
       && n == 3 && memcmp(jti, "abc", 3) == 0 && exp == 1764430000,
       "revocation message parsed");

    for (i = 0; i < sizeof(msgs) / sizeof(msgs[0]); i++) {
        ok(smcp_revoked_parse(msgs[i].s, msgs[i].len, &jti, &n, &exp)
           == SMCP_ERR, "revocation message '%s' refused",
           show(msgs[i].s, msgs[i].len));
    }

    set = smcp_revoked_create(5000);
    ok(set != NULL, "revoked set created");

    ok(smcp_revoked_add(set, "t1", 2, 2000, 1000) == SMCP_OK
       && smcp_revoked_has(set, "t1", 2, 1000)
       && !smcp_revoked_has(set, "t1", 2, 2000)
       && !smcp_revoked_has(set, "t2", 2, 1000)
       && !smcp_revoked_has(set, "t", 1, 1000)
       && !smcp_revoked_has(set, "t1x", 3, 1000),
       "revoked until its expiry, exact ids only");
    ok(smcp_revoked_add(set, "t1", 2, 3000, 1000) == SMCP_OK
       && smcp_revoked_has(set, "t1", 2, 2500)
       && smcp_revoked_count(set) == 1, "a later expiry extends the entry");
    ok(smcp_revoked_add(set, "old", 3, 900, 1000) == SMCP_OK
       && !smcp_revoked_has(set, "old", 3, 0)
       && smcp_revoked_count(set) == 1, "an expired revocation is not kept");
    ok(smcp_revoked_add(set, "a b", 3, 9000, 1000) == SMCP_ERR
       && smcp_revoked_add(set, "", 0, 9000, 1000) == SMCP_ERR,
       "bad ids are refused");

    /* growth: 4000 entries, half of them expiring at 1500 */
    all = 1;

    for (i = 0; i < 4000; i++) {
        n = snprintf(id, sizeof(id), "id%zu", i);
        all &= smcp_revoked_add(set, id, n, i % 2 ? 1500 : 9000, 1000)
               == SMCP_OK;
    }

    ok(all, "4000 revocations added");

    for (i = 0, all = 1; i < 4000; i++) {
        n = snprintf(id, sizeof(id), "id%zu", i);
        all &= smcp_revoked_has(set, id, n, 1200) == 1;
        all &= smcp_revoked_has(set, id, n, 1600) == !(i % 2);
    }

    ok(all, "... all found, the expired ones only until their expiry");

    /* past 1500 the rebuilds leave the expired behind: room for more */
    for (i = 0, all = 1; i < 2500; i++) {
        n = snprintf(id, sizeof(id), "new%zu", i);
        all &= smcp_revoked_add(set, id, n, 9000, 1600) == SMCP_OK;
    }

    ok(all && smcp_revoked_count(set) <= 5000,
       "expired entries make room (count %zu of at most 5000)",
       smcp_revoked_count(set));
    ok(smcp_revoked_has(set, "new2499", 7, 1600)
       && smcp_revoked_has(set, "id0", 3, 1600),
       "... old and new live entries are still there");

    for (i = 0, all = 1; i < 3000; i++) {
        n = snprintf(id, sizeof(id), "more%zu", i);
        all &= smcp_revoked_add(set, id, n, 9000, 1600) == SMCP_OK;
    }

    ok(!all && smcp_revoked_count(set) == 5000,
       "the set stops at its maximum");
    ok(2 * smcp_revoked_bytes(set) <= smcp_revoked_max_bytes(5000)
       && smcp_revoked_max_bytes(5000) == 2 * 16384 * 80,
       "... its table within the stated bound (%zu bytes; at most %zu)",
       smcp_revoked_bytes(set), smcp_revoked_max_bytes(5000));
    ok(smcp_revoked_max_bytes(50000) <= 21 * 1024 * 1024,
       "the default maximum (50,000 ids) takes at most %zu bytes",
       smcp_revoked_max_bytes(50000));

    smcp_revoked_clear(set);
    ok(smcp_revoked_count(set) == 0 && !smcp_revoked_has(set, "id0", 3, 1600),
       "cleared");

    smcp_revoked_free(set);
}


/* the JSON-RPC envelope of a request body */
static void
test_jsonrpc(void)
{
    static const struct {
        const char  *body;
        int          rc;
        int          batch;
        const char  *what;
    } cases[] = {
        { "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}",
          SMCP_JSONRPC_OK, 0, "a request" },
        { "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/x\"}",
          SMCP_JSONRPC_OK, 0, "a notification" },
        { "{\"jsonrpc\":\"2.0\",\"id\":\"a\",\"result\":{}}",
          SMCP_JSONRPC_OK, 0, "a response" },
        { "[{\"jsonrpc\":\"2.0\",\"method\":\"x\"},1]",
          SMCP_JSONRPC_OK, 1, "a batch (its members are checked one by one)" },
        { "", SMCP_JSONRPC_PARSE_ERROR, 0, "an empty body" },
        { "{\"jsonrpc\":\"2.0\",", SMCP_JSONRPC_PARSE_ERROR, 0,
          "cut JSON" },
        { "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"a\",\"id\":2}",
          SMCP_JSONRPC_PARSE_ERROR, 0, "a duplicate key" },
        { "[]", SMCP_JSONRPC_EMPTY_BATCH, 0, "an empty batch" },
        { "{\"jsonrpc\":\"2.0\\u0000x\",\"id\":1,\"method\":\"a\"}",
          SMCP_JSONRPC_PARSE_ERROR, 0,
          "\"2.0\" followed by a NUL (\\u0000 is not read)" },
        { "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\\u0000\"}",
          SMCP_JSONRPC_PARSE_ERROR, 0, "a method holding a NUL" },
        { "{\"jsonrpc\":\"2.0\",\"id\":1.5,\"method\":\"a\"}",
          SMCP_JSONRPC_INVALID, 0, "a fractional id" },
        { "{\"jsonrpc\":\"2.0\",\"id\":{},\"method\":\"a\"}",
          SMCP_JSONRPC_INVALID, 0, "an object id" },
        { "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"a\",\"params\":1}",
          SMCP_JSONRPC_INVALID, 0, "scalar params" },
        { "{\"jsonrpc\":\"2.0\",\"result\":{}}", SMCP_JSONRPC_INVALID, 0,
          "a response without an id" },
        { "{\"jsonrpc\":\"1.0\",\"id\":1,\"method\":\"a\"}",
          SMCP_JSONRPC_INVALID, 0, "jsonrpc 1.0" },
        { "\"2.0\"", SMCP_JSONRPC_INVALID, 0, "a string" },
    };

    int      rc, batch;
    char     buf[1024], *p;
    size_t   i;
    json_t  *j;

    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        rc = smcp_jsonrpc_parse(cases[i].body, strlen(cases[i].body), &j,
                                &batch);
        ok(rc == cases[i].rc && batch == cases[i].batch
           && (rc == SMCP_JSONRPC_OK) == (j != NULL),
           "jsonrpc: %s (%d)", cases[i].what, rc);
        json_decref(j);
    }

    /* 32 messages, then 33 */
    for (i = 32; i <= 33; i++) {
        p = buf;
        *p++ = '[';

        while (p - buf < (long) (i * 2)) {
            *p++ = '1';
            *p++ = ',';
        }

        p[-1] = ']';
        *p = '\0';

        rc = smcp_jsonrpc_parse(buf, strlen(buf), &j, &batch);
        ok(i == 32 ? rc == SMCP_JSONRPC_OK && batch
                   : rc == SMCP_JSONRPC_BATCH_TOO_LONG && j == NULL,
           "jsonrpc: a batch of %zu %s", i, i == 32 ? "is read" : "is refused");
        json_decref(j);
    }
}


/* the fast reader: what it takes it reads as jansson does; the rest it
 * leaves to jansson */
static void
test_json_plain(void)
{
    static const struct {
        const char  *text;
        const char  *dumped;    /* NULL: declined */
        const char  *what;
    } cases[] = {
        { "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"ping\"}",
          "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"ping\"}", "a ping" },
        { " \t\r\n{ \"b\" : [ 1 , -0 , true , false , null , { } , [ ] ] ,"
          " \"a\" : \"x\x7f\" } \n",
          "{\"b\":[1,0,true,false,null,{},[]],\"a\":\"x\x7f\"}",
          "whitespace, literals, DEL, the keys' order" },
        { "[999999999999999999,-999999999999999999]",
          "[999999999999999999,-999999999999999999]", "18 digits" },
        { "{\"\":\"\"}", "{\"\":\"\"}", "an empty key and string" },
        { "[1999999999999999999]", NULL, "19 digits: jansson's" },
        { "[1.5]", NULL, "a real: jansson's" },
        { "[1e2]", NULL, "an exponent: jansson's" },
        { "[\"a\\\"b\"]", NULL, "an escape: jansson's" },
        { "[\"caf\xc3\xa9\"]", NULL, "non-ASCII: jansson's" },
        { "[\"a\tb\"]", NULL, "a control character: refused by jansson" },
        { "{\"a\":1,\"a\":2}", NULL, "a key twice: refused by jansson" },
        { "[01]", NULL, "a leading zero: refused by jansson" },
        { "[-]", NULL, "a lone minus" },
        { "[1,]", NULL, "a trailing comma" },
        { "{\"a\":1,}", NULL, "a trailing comma in an object" },
        { "[truex]", NULL, "truex" },
        { "[tru]", NULL, "tru" },
        { "[1-2]", NULL, "1-2" },
        { "[\"a\"\"b\"]", NULL, "two strings without a comma" },
        { "{\"a\" 1}", NULL, "no colon" },
        { "[1] x", NULL, "text after the value" },
        { "[1]\0", NULL, "a NUL after the value" },
        { "1", NULL, "a number alone: jansson's" },
        { "\"s\"", NULL, "a string alone: jansson's" },
        { "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]",
          NULL, "33 deep: jansson's" },
        { "", NULL, "nothing" },
        { "[", NULL, "cut" },
    };

    char    *d;
    size_t   i, len;
    json_t  *j, *ref;

    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        len = strlen(cases[i].text);

        if (strcmp(cases[i].what, "a NUL after the value") == 0) {
            len++;
        }

        j = smcp_json_load_plain(cases[i].text, len);

        if (cases[i].dumped == NULL) {
            ok(j == NULL, "json plain: declined: %s", cases[i].what);
            json_decref(j);
            continue;
        }

        d = j ? json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
        ref = json_loadb(cases[i].text, len,
                         JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, NULL);

        ok(d != NULL && strcmp(d, cases[i].dumped) == 0
           && json_equal(j, ref),
           "json plain: %s: read as jansson reads it (%s)", cases[i].what,
           d ? d : "declined");

        free(d);
        json_decref(j);
        json_decref(ref);
    }
}


/* keys files: taken whole, or refused whole naming the line, never a
 * secret */
#define S1  "old-secret-0123456789abcdef0123456789"
#define S2  "new-secret-0123456789abcdef0123456789"

static void
test_keyring(void)
{
    int              i, rc;
    char             err[256], *big;
    size_t           n;
    smcp_keyring_t   ring;
    const char      *text;

    static const struct {
        const char  *text;
        const char  *why;           /* in the error */
        const char  *name;
    } bad[] = {
        { "", "no key", "an empty file" },
        { "# only\n\n  # comments\n", "no key", "only comments" },
        { "k1 short-secret-0123456789abcdef01\n",
          "line 1: the secret must be 32-256 bytes (it is 31)",
          "a secret of 31 bytes" },
        { "# a\nk1 " S1 "\nk/2 " S2 "\n",
          "line 3: the key id must be 1-32 of", "a kid with a /" },
        { "k\xc3\xa9 " S1 "\n", "line 1: the key id must be",
          "a kid not ASCII" },
        { "k123456789012345678901234567890123 " S1 "\n",
          "line 1: the key id must be", "a kid of 33 bytes" },
        { "k1 " S1 "\nk1 " S2 "\n", "line 2: key id \"k1\" is line 1's too",
          "a duplicate kid" },
        { "k1 " S1 " legacy\nk2 " S2 " legacy\n",
          "line 2: a second legacy key (line 1's is one)",
          "two legacy keys" },
        { "k1 " S1 " primary\n", "line 1: the third field may only be",
          "an unknown flag" },
        { "k1 " S1 " legacy extra\n", "line 1: want", "four fields" },
        { S1 "\n", "line 1: want", "a bare secret, no kid" },
        { "k1 old-secret-0123456789\x01" "abcdef0123456789\n",
          "line 1: the secret must be printable ASCII",
          "a control byte in the secret" },
        { "k1 old-secret-0123456789\x80" "abcdef0123456789\n",
          "line 1: the secret must be printable ASCII",
          "a high byte in the secret" },
    };

    for (i = 0; i < (int) (sizeof(bad) / sizeof(bad[0])); i++) {
        err[0] = '\0';
        rc = smcp_keyring_parse(&ring, bad[i].text, strlen(bad[i].text), err,
                                sizeof(err));
        ok(rc == SMCP_ERR && ring.n == 0 && strstr(err, bad[i].why)
           && !strstr(err, "secret-0123"),
           "keys file, %s: refused (%s)", bad[i].name, err);
    }

    text = "k1 " S1 "\nk1\0" S2 "\n";
    ok(smcp_keyring_parse(&ring, text, 3 + 37 + 1 + 40, err, sizeof(err))
       == SMCP_ERR && strstr(err, "NUL"), "keys file with a NUL: refused");

    /* 17 keys: refused; 16: taken */
    big = malloc(SMCP_KEYRING_FILE_MAX + 2);
    n = 0;
    for (i = 0; i < 17; i++) {
        n += sprintf(big + n, "k%d %s%02d\n", i, S1, i);
    }
    ok(smcp_keyring_parse(&ring, big, n, err, sizeof(err)) == SMCP_ERR
       && ring.n == 0 && strstr(err, "line 17: more than 16 keys"),
       "keys file of 17 keys: refused (%s)", err);
    n -= strlen("k16 " S1 "16\n");
    ok(smcp_keyring_parse(&ring, big, n, err, sizeof(err)) == SMCP_OK
       && ring.n == 16 && ring.legacy == -1
       && strcmp(ring.key[15].kid, "k15") == 0,
       "keys file of 16 keys: taken");

    memset(big, '#', SMCP_KEYRING_FILE_MAX + 1);
    ok(smcp_keyring_parse(&ring, big, SMCP_KEYRING_FILE_MAX + 1, err,
                          sizeof(err)) == SMCP_ERR
       && strstr(err, "larger than 16384 bytes"),
       "keys file of 16385 bytes: refused");
    free(big);

    /* comments, blank lines, tabs, CRLF; the first signs */
    text = "# rotated 2026-05-01\r\n\r\n\tk-2026.05_b " S2 "\r\n"
           "  k1  " S1 "  legacy  \n";
    ok(smcp_keyring_parse(&ring, text, strlen(text), err, sizeof(err))
       == SMCP_OK && ring.n == 2
       && strcmp(ring.key[0].kid, "k-2026.05_b") == 0
       && ring.key[0].len == strlen(S2)
       && memcmp(ring.key[0].secret, S2, strlen(S2)) == 0
       && strcmp(ring.key[1].kid, "k1") == 0 && ring.legacy == 1
       && smcp_keyring_legacy(&ring) == &ring.key[1],
       "keys file: two keys, the first signs, the second the legacy");
    ok(smcp_keyring_find(&ring, "k1", 2) == &ring.key[1]
       && smcp_keyring_find(&ring, "k", 1) == NULL
       && smcp_keyring_find(&ring, "", 0) == NULL,
       "keys found by their exact kid only");

    smcp_keyring_clear(&ring);
    ok(ring.n == 0 && ring.legacy == -1 && ring.key[0].len == 0
       && ring.key[0].secret[0] == 0, "cleared: no key, secrets wiped");

    ok(smcp_keyring_load(&ring, "/nonexistent/keys", err, sizeof(err))
       == SMCP_ERR && strstr(err, "cannot open keys file"),
       "a missing keys file: refused");
}


/* "<b64url(header)>.<b64url(claims)>.<HS256 with secret>", malloc'd */
static char *
jwt_with(const char *header, const char *secret)
{
    char          *tok, *t;
    const char    *payload;
    unsigned char  mac[32];
    unsigned int   maclen;

    payload = "{\"sub\":\"alice\",\"exp\":4102444800}";
    tok = xmalloc(512);
    t = tok;
    t += smcp_b64url_encode(t, (const unsigned char *) header,
                            strlen(header));
    *t++ = '.';
    t += smcp_b64url_encode(t, (const unsigned char *) payload,
                            strlen(payload));
    maclen = sizeof(mac);
    HMAC(EVP_sha256(), secret, (int) strlen(secret), (unsigned char *) tok,
         t - tok, mac, &maclen);
    *t++ = '.';
    smcp_b64url_encode(t, mac, sizeof(mac));

    return tok;
}


static int
jwt_verdict(const smcp_keyring_t *ring, const char *tok, const char *want)
{
    int      rc;
    char     err[128];
    json_t  *claims;

    err[0] = '\0';
    rc = smcp_jwt_verify(ring, tok, strlen(tok), time(NULL), &claims, err,
                         sizeof(err));
    json_decref(claims);

    return want == NULL ? rc == SMCP_OK
                        : rc == SMCP_ERR && strcmp(err, want) == 0;
}


/* the kid picks the key; none: the legacy key; never a search */
static void
test_jwt_kid(void)
{
    char            *tok, err[256], h[128];
    size_t           hn;
    json_t          *claims;
    smcp_keyring_t   rotated, retired, bare;
    const char      *text;

    text = "new " S2 "\nold " S1 " legacy\n";
    smcp_keyring_parse(&rotated, text, strlen(text), err, sizeof(err));
    text = "new " S2 "\n";
    smcp_keyring_parse(&retired, text, strlen(text), err, sizeof(err));
    smcp_keyring_single(&bare, (const unsigned char *) S1, strlen(S1));

    claims = json_pack("{s:s, s:I}", "sub", "alice",
                       "exp", (json_int_t) time(NULL) + 60);
    smcp_jwt_sign(&rotated.key[0], claims, &tok);
    ok(smcp_b64url_decode((unsigned char *) h, &hn, tok,
                          strchr(tok, '.') - tok) == SMCP_OK
       && hn == 39
       && memcmp(h, "{\"alg\":\"HS256\",\"typ\":\"JWT\",\"kid\":\"new\"}", 39)
          == 0, "signed by the first key: its kid in the header");
    ok(jwt_verdict(&rotated, tok, NULL) && jwt_verdict(&retired, tok, NULL)
       && jwt_verdict(&bare, tok, "unknown token key id"),
       "... verified by a ring that has it, refused by a bare secret");
    free(tok);

    smcp_jwt_sign(&bare.key[0], claims, &tok);
    ok(strncmp(tok, "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.", 37) == 0
       && jwt_verdict(&bare, tok, NULL) && jwt_verdict(&rotated, tok, NULL)
       && jwt_verdict(&retired, tok, "token has no key id"),
       "a bare secret signs without kid: the legacy key verifies it, a ring "
       "without one refuses it");
    free(tok);
    json_decref(claims);

    tok = jwt_with("{\"alg\":\"HS256\",\"kid\":\"old\"}", S1);
    ok(jwt_verdict(&rotated, tok, NULL)
       && jwt_verdict(&retired, tok, "unknown token key id"),
       "the old key's token: verified until it is retired");
    free(tok);

    tok = jwt_with("{\"alg\":\"HS256\",\"kid\":\"new\"}", S1);
    ok(jwt_verdict(&rotated, tok, "bad token signature"),
       "kid new, signed by the old secret: refused (no other key tried)");
    free(tok);

    tok = jwt_with("{\"alg\":\"HS256\"}", S2);
    ok(jwt_verdict(&rotated, tok, "bad token signature"),
       "no kid, signed by the new secret: refused (only the legacy key)");
    free(tok);

    tok = jwt_with("{\"alg\":\"HS256\",\"kid\":\"gone\"}", S2);
    ok(jwt_verdict(&rotated, tok, "unknown token key id"),
       "an unknown kid: refused");
    free(tok);

    tok = jwt_with("{\"alg\":\"HS256\",\"kid\":12}", S2);
    ok(jwt_verdict(&rotated, tok, "malformed token key id"),
       "a kid that is no string: refused");
    free(tok);

    tok = jwt_with("{\"alg\":\"HS256\",\"kid\":\"ne/w\"}", S2);
    ok(jwt_verdict(&rotated, tok, "malformed token key id"),
       "a kid with odd characters: refused");
    free(tok);

    tok = jwt_with("{\"alg\":\"HS256\",\"kid\":\"\"}", S2);
    ok(jwt_verdict(&rotated, tok, "malformed token key id"),
       "an empty kid: refused");
    free(tok);

    tok = jwt_with("{\"alg\":\"HS256\",\"kid\":\"new\\u0000\"}", S2);
    ok(jwt_verdict(&rotated, tok, "malformed token header"),
       "a kid with a NUL: refused");
    free(tok);

    tok = jwt_with("{\"alg\":\"HS256\",\"kid\":\"new\",\"kid\":\"old\"}",
                   S1);
    ok(jwt_verdict(&rotated, tok, "malformed token header"),
       "two kids: refused");
    free(tok);

    tok = jwt_with("{\"alg\":\"none\",\"kid\":\"new\"}", S2);
    ok(jwt_verdict(&rotated, tok, "token algorithm must be HS256"),
       "alg none with a kid: refused");
    free(tok);
}


/* where Redis is (an operator's setting), and what a sentinel answers
 * (the network's) */
static void
test_redis_addr(void)
{
    static const char  *bad[] = {
        "", "host:0", "host:65536", "host:x", ":6379", "::1:6379", "[::1",
        "[::1]x", "unix:", "sentinel://", "sentinel:///m", "sentinel://h:1/",
        "sentinel://h:1", "sentinel://h:1/m m", "sentinel://h:1/m/x",
        "sentinel://h:99999/m", "sentinel://h:1,/m", "sentinel://,h:1/m",
        "sentinel://a b:1/m", "sentinel://h:1/"
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
        "sentinel://1:1,2:2,3:3,4:4,5:5,6:6,7:7,8:8,9:9/m", "h\n:1",
    };

    char               err[200];
    size_t             i;
    smcp_hostport_t    hp;
    smcp_redis_addr_t  a;

    ok(smcp_redis_addr_parse("redis:6380", 10, &a, err, sizeof(err)) == 0
       && a.kind == SMCP_REDIS_TCP && strcmp(a.addr.host, "redis") == 0
       && a.addr.port == 6380, "host:port");
    ok(smcp_redis_addr_parse("10.0.0.1", 8, &a, err, sizeof(err)) == 0
       && a.addr.port == 6379, "a host alone: port 6379");
    ok(smcp_redis_addr_parse("[::1]:7000", 10, &a, err, sizeof(err)) == 0
       && strcmp(a.addr.host, "::1") == 0 && a.addr.port == 7000,
       "[IPv6]:port");
    ok(smcp_redis_addr_parse("unix:/run/r.sock", 16, &a, err, sizeof(err))
       == 0 && a.kind == SMCP_REDIS_UNIX
       && strcmp(a.path, "/run/r.sock") == 0, "unix:/path");

    ok(smcp_redis_addr_parse("sentinel://s1:26380,10.0.0.2,[::1]:5/my-m.1",
                             43, &a, err, sizeof(err)) == 0
       && a.kind == SMCP_REDIS_SENTINEL && a.nsentinels == 3
       && strcmp(a.sentinels[0].host, "s1") == 0
       && a.sentinels[0].port == 26380
       && a.sentinels[1].port == SMCP_SENTINEL_PORT
       && strcmp(a.sentinels[2].host, "::1") == 0
       && strcmp(a.master, "my-m.1") == 0, "sentinel://three/master");

    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = '\0';
        ok(smcp_redis_addr_parse(bad[i], strlen(bad[i]), &a, err,
                                 sizeof(err)) != 0 && err[0],
           "redis address '%s' refused (%s)", show(bad[i], strlen(bad[i])),
           err);
    }

    ok(smcp_redis_addr_parse("h:1\0", 4, &a, err, sizeof(err)) != 0,
       "a NUL in the address refused");

    /* a sentinel's answer: an IP address and a port, nothing else */
    ok(smcp_sentinel_master_addr("127.0.0.1", 9, "6380", 4, &hp) == 0
       && strcmp(hp.host, "127.0.0.1") == 0 && hp.port == 6380,
       "master 127.0.0.1 6380");
    ok(smcp_sentinel_master_addr("fd00::2", 7, "1", 1, &hp) == 0,
       "master fd00::2 1");
    ok(smcp_sentinel_master_addr("0.0.0.0", 7, "6379", 4, &hp) != 0
       && smcp_sentinel_master_addr("::", 2, "6379", 4, &hp) != 0,
       "0.0.0.0 and :: refused (nobody's address)");
    ok(smcp_sentinel_master_addr("redis", 5, "6379", 4, &hp) != 0,
       "a host name refused (a worker would block resolving it)");
    ok(smcp_sentinel_master_addr("127.0.0.1\0x", 11, "6379", 4, &hp) != 0,
       "a NUL in the address refused");
    ok(smcp_sentinel_master_addr("127.0.0.1 ", 10, "6379", 4, &hp) != 0,
       "trailing blank refused");
    ok(smcp_sentinel_master_addr("", 0, "6379", 4, &hp) != 0,
       "empty address refused");
    ok(smcp_sentinel_master_addr("127.0.0.1", 9, "0", 1, &hp) != 0
       && smcp_sentinel_master_addr("127.0.0.1", 9, "65536", 5, &hp) != 0
       && smcp_sentinel_master_addr("127.0.0.1", 9, "-1", 2, &hp) != 0
       && smcp_sentinel_master_addr("127.0.0.1", 9, "63790000", 8, &hp)
          != 0, "ports 0, 65536, -1, 63790000 refused");
    ok(smcp_sentinel_master_addr(
           "1111:2222:3333:4444:5555:6666:7777:8888:9999", 44, "1", 1, &hp)
       != 0, "an overlong IPv6 address refused");

    ok(smcp_redis_role_master("master", 6)
       && !smcp_redis_role_master("slave", 5)
       && !smcp_redis_role_master("master\0", 7)
       && !smcp_redis_role_master("sentinel", 8), "ROLE master, only");
}


/* the refusals of smcp_url_parse(), as opencode_run_task says them */
#define URL_LEN     "must be a URL of 1 to 2048 bytes"
#define URL_BYTE    "must be a plain URL: no space, control character, " \
                    "fragment or any of \"<>\\^`{|}"
#define URL_SCHEME  "must start with http:// or https://"
#define URL_USER    "must not carry a user name or password"
#define URL_PATH    "needs a path after its host (at least \"/\")"
#define URL_V6END   "has an IPv6 address without its \"]\""
#define URL_V6      "has a bad IPv6 address"
#define URL_CHARS   "needs a host of lower-case letters, digits, \"-\" " \
                    "and \".\""
#define URL_NAME    "needs a host name"
#define URL_PORT    "has a bad port"
#define URL_DOTSEG  "has a \".\" or \"..\" segment in its path"
#define URL_ESCAPE  "has an escaped dot, slash or backslash in its path"


static void
test_url(void)
{
    /* taken: the parts, the port, the address flag, the origin */
    static const struct {
        in_t         url;
        const char  *host, *authority, *path;
        unsigned     port, literal;
        const char  *origin;
    } good[] = {
        { IN("https://hooks.slack.com/services/T0/B0/XX"), "hooks.slack.com",
          "hooks.slack.com", "/services/T0/B0/XX", 443, 0,
          "https://hooks.slack.com/" },
        { IN("http://10.0.0.7:8080/"), "10.0.0.7", "10.0.0.7:8080", "/",
          8080, 1, "http://10.0.0.7:8080/" },
        { IN("http://[fd00::7]:8080/hook"), "fd00::7", "[fd00::7]:8080",
          "/hook", 8080, 1, "http://[fd00::7]:8080/" },
        { IN("http://[::ffff:10.0.0.1]/"), "::ffff:10.0.0.1",
          "[::ffff:10.0.0.1]", "/", 80, 1, "http://[::ffff:10.0.0.1]/" },
        { IN("http://[FE80::1]/"), "FE80::1", "[FE80::1]", "/", 80, 1,
          "http://[FE80::1]/" },
        { IN("http://[1::2:3:4:5:6:7]/"), "1::2:3:4:5:6:7",
          "[1::2:3:4:5:6:7]", "/", 80, 1, "http://[1::2:3:4:5:6:7]/" },
        { IN("http://[::2:3:4:5:6:7:8]/"), "::2:3:4:5:6:7:8",
          "[::2:3:4:5:6:7:8]", "/", 80, 1, "http://[::2:3:4:5:6:7:8]/" },
        { IN("http://[::ffff:255.255.255.254]/"), "::ffff:255.255.255.254",
          "[::ffff:255.255.255.254]", "/", 80, 1,
          "http://[::ffff:255.255.255.254]/" },
        { IN("https://ntfy.sh/t?x=%2e&y=/../"), "ntfy.sh", "ntfy.sh",
          "/t?x=%2e&y=/../", 443, 0, "https://ntfy.sh/" },
        { IN("http://h.example:065535/"), "h.example", "h.example:065535",
          "/", 65535, 0, "http://h.example:065535/" },
        { IN("http://h:1/"), "h", "h:1", "/", 1, 0, "http://h:1/" },
        { IN("http://010.0.0.1/"), "010.0.0.1", "010.0.0.1", "/", 80, 1,
          "http://010.0.0.1/" },
        { IN("http://255.255.255.255/"), "255.255.255.255",
          "255.255.255.255", "/", 80, 0, "http://255.255.255.255/" },
        { IN("http://1.2.3.4.5/"), "1.2.3.4.5", "1.2.3.4.5", "/", 80, 0,
          "http://1.2.3.4.5/" },
        { IN("http://1.2.3.256/"), "1.2.3.256", "1.2.3.256", "/", 80, 0,
          "http://1.2.3.256/" },
        { IN("http://a-b.c-d/x/.../.a/a./y@z"), "a-b.c-d", "a-b.c-d",
          "/x/.../.a/a./y@z", 80, 0, "http://a-b.c-d/" },
        { IN("http://h/a%2"), "h", "h", "/a%2", 80, 0, "http://h/" },
        { IN("http://h/%2x%25%5"), "h", "h", "/%2x%25%5", 80, 0,
          "http://h/" },
        { IN("http://h//"), "h", "h", "//", 80, 0, "http://h/" },
    };

    /* refused, and why */
    static const struct {
        in_t         url;
        const char  *why;
    } bad[] = {
        { IN(""), URL_LEN },
        { IN("http://h/x y"), URL_BYTE },
        { IN("http://h/x#f"), URL_BYTE },
        { IN("http://h/x\r\nX-Evil: 1"), URL_BYTE },
        { IN("http://h/\x7f"), URL_BYTE },
        { IN("http://h/\0"), URL_BYTE },
        { IN("http://h\xc3\xa9/"), URL_BYTE },
        { IN("http://h/<x>"), URL_BYTE },
        { IN("http://h/a\\b"), URL_BYTE },
        { IN("http://h/\""), URL_BYTE },
        { IN("http://h/^"), URL_BYTE },
        { IN("http://h/`"), URL_BYTE },
        { IN("http://h/{}"), URL_BYTE },
        { IN("http://h/|"), URL_BYTE },
        { IN("ftp://h/"), URL_SCHEME },
        { IN("HTTP://h/"), URL_SCHEME },
        { IN("http:/h/"), URL_SCHEME },
        { IN("//h/"), URL_SCHEME },
        { IN("http://"), URL_SCHEME },
        { IN("https://"), URL_SCHEME },
        { IN("127.0.0.1:80/x"), URL_SCHEME },
        { IN("http://u:p@h/"), URL_USER },
        { IN("http://127.0.0.1:8080@hooks.evil.example/"), URL_USER },
        { IN("http://@/"), URL_USER },
        { IN("http://h"), URL_PATH },
        { IN("http://h?x=/"), URL_PATH },
        { IN("https://h:443"), URL_PATH },
        { IN("http://[::1/"), URL_V6END },
        { IN("http://[::g]/"), URL_V6 },
        { IN("http://[]/"), URL_V6 },
        { IN("http://[1.2.3.4]/"), URL_V6 },
        { IN("http://[fe80::1%eth0]/"), URL_V6 },
        { IN("http://[1111:2222:3333:4444:5555:6666:7777:8888:9999]/"),
          URL_V6 },
        /* inet_pton() takes these, nginx does not */
        { IN("http://[1:2:3:4:5:6:7::]/"), URL_V6 },
        { IN("http://[::255.255.255.255]/"), URL_V6 },
        { IN("http://[::ffff:255.255.255.255]/"), URL_V6 },
        /* nginx takes these, inet_pton() does not */
        { IN("http://[::ffff:010.0.0.1]/"), URL_V6 },
        { IN("http://[:1::]/"), URL_V6 },
        /* nor either */
        { IN("http://[::1:2:3:4:5:6:7:8]/"), URL_V6 },
        { IN("http://H.example/"), URL_CHARS },
        { IN("http://h_x/"), URL_CHARS },
        { IN("http://h%2e/"), URL_CHARS },
        { IN("http://[::1]]/"), URL_PORT },
        { IN("http://::1/"), URL_NAME },
        { IN("http:///"), URL_NAME },
        { IN("http://:80/"), URL_NAME },
        { IN("http://.h/"), URL_NAME },
        { IN("http://h./"), URL_NAME },
        { IN("http://a..b/"), URL_NAME },
        { IN("http://h:0/"), URL_PORT },
        { IN("http://h:00000/"), URL_PORT },
        { IN("http://h:65536/"), URL_PORT },
        { IN("http://h:99999999999999999999999/"), URL_PORT },
        { IN("http://h:/"), URL_PORT },
        { IN("http://h:8a/"), URL_PORT },
        { IN("http://h:-1/"), URL_PORT },
        { IN("http://h:+1/"), URL_PORT },
        { IN("http://h:1:2/"), URL_PORT },
        { IN("http://[::1]x/"), URL_PORT },
        { IN("http://[::1]:/"), URL_PORT },
        { IN("http://h/."), URL_DOTSEG },
        { IN("http://h/.."), URL_DOTSEG },
        { IN("http://h/a/./b"), URL_DOTSEG },
        { IN("http://h/a/../b"), URL_DOTSEG },
        { IN("http://h/a/..?x"), URL_DOTSEG },
        { IN("http://h/a/%2e%2e/b"), URL_ESCAPE },
        { IN("http://h/%2E"), URL_ESCAPE },
        { IN("http://h/a%2fb"), URL_ESCAPE },
        { IN("http://h/a%2Fb"), URL_ESCAPE },
        { IN("http://h/a%5cb"), URL_ESCAPE },
        { IN("http://h/a%5Cb?q"), URL_ESCAPE },
    };

    char         buf[64], *s;
    size_t       i;
    smcp_url_t   u;
    const char  *why;

#define URL_PART(part, want)                                                  \
    ((part).len == strlen(want) && memcmp((part).data, (want), (part).len) == 0)

    for (i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        why = smcp_url_parse(good[i].url.s, good[i].url.len, &u);

        ok(why == NULL && u.scheme.data == good[i].url.s
           && u.https == (good[i].url.s[4] == 's')
           && URL_PART(u.host, good[i].host)
           && URL_PART(u.authority, good[i].authority)
           && URL_PART(u.path, good[i].path)
           && u.port == good[i].port && u.literal == good[i].literal,
           "url '%s' taken: host %s, port %u, %s (%s)",
           show(good[i].url.s, good[i].url.len), good[i].host,
           good[i].port, good[i].literal ? "an address" : "a name",
           why ? why : "ok");

        ok(smcp_url_origin(&u, buf, sizeof(buf)) == SMCP_OK
           && strcmp(buf, good[i].origin) == 0,
           "... its origin %s (%s)", good[i].origin, buf);
    }

    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        why = smcp_url_parse(bad[i].url.s, bad[i].url.len, &u);
        ok(why && strcmp(why, bad[i].why) == 0, "url '%s' refused: %s",
           show(bad[i].url.s, bad[i].url.len), why ? why : "taken");
    }

    /* the bounds: 2048 bytes, a name of 253 */
    s = repeat('p', SMCP_URL_MAX, "");
    memcpy(s, "http://h/", 9);
    ok(smcp_url_parse(s, SMCP_URL_MAX, &u) == NULL
       && u.path.len == SMCP_URL_MAX - 8, "a url of 2048 bytes taken");
    free(s);

    s = repeat('p', SMCP_URL_MAX + 1, "");
    memcpy(s, "http://h/", 9);
    why = smcp_url_parse(s, SMCP_URL_MAX + 1, &u);
    ok(why && strcmp(why, URL_LEN) == 0, "a url of 2049 bytes refused");
    free(s);

    s = repeat('a', 7 + 253, "/");
    memcpy(s, "http://", 7);
    ok(smcp_url_parse(s, strlen(s), &u) == NULL && u.host.len == 253,
       "a name of 253 bytes taken");
    free(s);

    s = repeat('a', 7 + 254, "/");
    memcpy(s, "http://", 7);
    why = smcp_url_parse(s, strlen(s), &u);
    ok(why && strcmp(why, URL_NAME) == 0, "a name of 254 bytes refused");
    free(s);

    /* an origin that does not fit: refused, cut */
    ok(smcp_url_parse("http://h.example:8080/x", 23, &u) == NULL
       && smcp_url_origin(&u, buf, 23) == SMCP_OK
       && smcp_url_origin(&u, buf, 22) == SMCP_ERR && strlen(buf) == 21,
       "an origin of 22 bytes: in 23, not in 22 (cut)");

#undef URL_PART
}


/* an address as text into a sockaddr */
static int
addr_private(const char *text)
{
    struct sockaddr_in   sin;
    struct sockaddr_in6  sin6;

    memset(&sin, 0, sizeof(sin));
    memset(&sin6, 0, sizeof(sin6));

    if (inet_pton(AF_INET, text, &sin.sin_addr) == 1) {
        sin.sin_family = AF_INET;
        return smcp_addr_private((struct sockaddr *) &sin);
    }

    if (inet_pton(AF_INET6, text, &sin6.sin6_addr) == 1) {
        sin6.sin6_family = AF_INET6;
        return smcp_addr_private((struct sockaddr *) &sin6);
    }

    return -1;
}


static void
test_addr_private(void)
{
    /* each range's ends, and the addresses either side of them */
    static const struct {
        const char  *addr;
        int          private;
    } addrs[] = {
        { "0.0.0.0", 1 }, { "0.255.255.255", 1 }, { "1.0.0.0", 0 },
        { "9.255.255.255", 0 }, { "10.0.0.0", 1 }, { "10.255.255.255", 1 },
        { "11.0.0.0", 0 },
        { "100.63.255.255", 0 }, { "100.64.0.0", 1 },
        { "100.127.255.255", 1 }, { "100.128.0.0", 0 },
        { "126.255.255.255", 0 }, { "127.0.0.0", 1 }, { "127.0.0.1", 1 },
        { "127.255.255.255", 1 }, { "128.0.0.0", 0 },
        { "169.253.255.255", 0 }, { "169.254.0.0", 1 },
        { "169.254.169.254", 1 }, { "169.254.255.255", 1 },
        { "169.255.0.0", 0 },
        { "172.15.255.255", 0 }, { "172.16.0.0", 1 },
        { "172.31.255.255", 1 }, { "172.32.0.0", 0 },
        { "191.255.255.255", 0 }, { "192.0.0.0", 1 }, { "192.0.0.255", 1 },
        { "192.0.1.0", 0 },
        { "192.167.255.255", 0 }, { "192.168.0.0", 1 },
        { "192.168.255.255", 1 }, { "192.169.0.0", 0 },
        { "198.17.255.255", 0 }, { "198.18.0.0", 1 },
        { "198.19.255.255", 1 }, { "198.20.0.0", 0 },
        { "223.255.255.255", 0 }, { "224.0.0.0", 1 },
        { "239.255.255.255", 1 }, { "240.0.0.0", 1 },
        { "255.255.255.255", 1 },
        { "8.8.8.8", 0 }, { "1.1.1.1", 0 }, { "93.184.216.34", 0 },

        { "::", 1 }, { "::1", 1 },
        { "::2", 1 },                       /* ::0.0.0.2: 0.0.0.0/8 */
        { "::8.8.8.8", 0 }, { "::10.0.0.1", 1 },
        { "::ffff:8.8.8.8", 0 }, { "::ffff:0.0.0.0", 1 },
        { "::ffff:10.0.0.1", 1 }, { "::ffff:127.0.0.1", 1 },
        { "::ffff:169.254.169.254", 1 }, { "::ffff:172.31.255.255", 1 },
        { "::ffff:172.32.0.0", 0 }, { "::ffff:192.168.1.1", 1 },
        { "::ffff:224.0.0.1", 1 }, { "::fffe:10.0.0.1", 0 },
        { "fbff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", 0 }, { "fc00::", 1 },
        { "fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", 1 }, { "fe00::", 0 },
        { "fe7f:ffff:ffff:ffff:ffff:ffff:ffff:ffff", 0 }, { "fe80::", 1 },
        { "febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff", 1 }, { "fec0::", 0 },
        { "feff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", 0 }, { "ff00::", 1 },
        { "ff02::1", 1 }, { "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", 1 },
        { "64:ff9a:ffff:ffff:ffff:ffff:ffff:ffff", 0 },
        { "64:ff9b::", 1 }, { "64:ff9b::8.8.8.8", 1 },
        { "64:ff9b:ffff:ffff:ffff:ffff:ffff:ffff", 1 }, { "64:ff9c::", 0 },
        { "2001:db7:ffff:ffff:ffff:ffff:ffff:ffff", 0 }, { "2001:db8::", 1 },
        { "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff", 1 }, { "2001:db9::", 0 },
        { "2001:4860:4860::8888", 0 }, { "2606:4700::1111", 0 },
    };

    size_t           i;
    struct sockaddr  sa;

    for (i = 0; i < sizeof(addrs) / sizeof(addrs[0]); i++) {
        ok(addr_private(addrs[i].addr) == addrs[i].private, "%s: %s",
           addrs[i].addr, addrs[i].private ? "private" : "public");
    }

    memset(&sa, 0, sizeof(sa));
    sa.sa_family = AF_UNIX;
    ok(smcp_addr_private(&sa) == 1, "another family: private");
}


/* the usage reader: what a model answer says it cost, as the providers
 * send it (ids and numbers made up), whole, a byte at a time and split at
 * every offset; the model's text and a tool call's arguments holding what
 * looks like usage; hostile request bodies naming the model */
static const char  usage_anthropic_sse[] =
    "event: message_start\n"
    "data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_01XF\","
    "\"type\":\"message\",\"role\":\"assistant\",\"content\":[],"
    "\"model\":\"claude-sonnet-4-5-20250929\",\"stop_reason\":null,"
    "\"stop_sequence\":null,\"usage\":{\"input_tokens\":472,"
    "\"cache_creation_input_tokens\":1024,"
    "\"cache_read_input_tokens\":2048,\"cache_creation\":"
    "{\"ephemeral_5m_input_tokens\":1024,\"ephemeral_1h_input_tokens\":0},"
    "\"output_tokens\":2,\"service_tier\":\"standard\"}}}\n"
    "\n"
    "event: content_block_start\n"
    "data: {\"type\":\"content_block_start\",\"index\":0,"
    "\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n"
    "\n"
    "event: ping\n"
    "data: {\"type\": \"ping\"}\n"
    "\n"
    "event: content_block_delta\n"
    "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":"
    "{\"type\":\"text_delta\",\"text\":\"\\\"}}]},\\\"usage\\\":"
    "{\\\"input_tokens\\\":0,\\\"output_tokens\\\":0}}\\n\"}}\n"
    "\n"
    "event: content_block_delta\n"
    "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":"
    "{\"type\":\"text_delta\",\"text\":\"C:\\\\\"}}\n"
    "\n"
    "event: content_block_delta\n"
    "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":"
    "{\"type\":\"text_delta\",\"text\":\"\\\\\\\"usage\\\\\\\":"
    "{\\\\\\\"cache_read_input_tokens\\\\\\\":0}\\\\\"}}\n"
    "\n"
    "event: content_block_stop\n"
    "data: {\"type\":\"content_block_stop\",\"index\":0}\n"
    "\n"
    "event: message_delta\n"
    "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":"
    "\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":15}}\n"
    "\n"
    "event: message_stop\n"
    "data: {\"type\":\"message_stop\"}\n"
    "\n";

/* a tool call's arguments are raw JSON in the body: the model's own */
static const char  usage_anthropic_json[] =
    "{\"id\":\"msg_01Aq9w\",\"type\":\"message\",\"role\":\"assistant\","
    "\"model\":\"claude-opus-4-1-20250805\",\"content\":[{\"type\":\"text\","
    "\"text\":\"Reporting.\"},{\"type\":\"tool_use\",\"id\":\"toolu_01\","
    "\"name\":\"report\",\"input\":{\"usage\":{\"output_tokens\":1,"
    "\"input_tokens\":0},\"note\":\"\\\"usage\\\":{\\\"output_tokens\\\":1}\"}}"
    "],\"stop_reason\":\"tool_use\",\"stop_sequence\":null,\"usage\":"
    "{\"input_tokens\":2095,\"cache_creation_input_tokens\":0,"
    "\"cache_read_input_tokens\":0,\"output_tokens\":503}}";

static const char  usage_responses_sse[] =
    "event: response.created\n"
    "data: {\"type\":\"response.created\",\"sequence_number\":0,"
    "\"response\":{\"id\":\"resp_1\",\"object\":\"response\","
    "\"created_at\":1741290958,\"status\":\"in_progress\","
    "\"model\":\"gpt-5-2025-08-07\",\"output\":[],\"usage\":null}}\n"
    "\n"
    "event: response.in_progress\n"
    "data: {\"type\":\"response.in_progress\",\"sequence_number\":1,"
    "\"response\":{\"id\":\"resp_1\",\"status\":\"in_progress\","
    "\"usage\":null}}\n"
    "\n"
    "event: response.output_text.delta\n"
    "data: {\"type\":\"response.output_text.delta\",\"sequence_number\":4,"
    "\"item_id\":\"msg_1\",\"output_index\":0,\"content_index\":0,"
    "\"delta\":\"Hi \\\"usage\\\":{\\\"input_tokens\\\":0,"
    "\\\"output_tokens\\\":0}\"}\n"
    "\n"
    "event: response.function_call_arguments.delta\n"
    "data: {\"type\":\"response.function_call_arguments.delta\","
    "\"sequence_number\":5,\"item_id\":\"fc_1\",\"output_index\":1,"
    "\"delta\":\"{\\\"usage\\\":{\\\"output_tokens\\\":1}}\"}\n"
    "\n"
    "event: response.completed\n"
    "data: {\"type\":\"response.completed\",\"sequence_number\":9,"
    "\"response\":{\"id\":\"resp_1\",\"object\":\"response\","
    "\"status\":\"completed\",\"model\":\"gpt-5-2025-08-07\",\"output\":[],"
    "\"usage\":{\"input_tokens\":1200,\"input_tokens_details\":"
    "{\"cached_tokens\":1024},\"output_tokens\":350,"
    "\"output_tokens_details\":{\"reasoning_tokens\":128},"
    "\"total_tokens\":1550}}}\n"
    "\n";

static const char  usage_responses_json[] =
    "{\n"
    "  \"id\": \"resp_67ccd3a9\",\n"
    "  \"object\": \"response\",\n"
    "  \"created_at\": 1741476777,\n"
    "  \"status\": \"completed\",\n"
    "  \"model\": \"gpt-4.1-2025-04-14\",\n"
    "  \"output\": [\n"
    "    {\n"
    "      \"type\": \"message\",\n"
    "      \"id\": \"msg_67ccd3ac\",\n"
    "      \"status\": \"completed\",\n"
    "      \"role\": \"assistant\",\n"
    "      \"content\": [\n"
    "        {\n"
    "          \"type\": \"output_text\",\n"
    "          \"text\": \"Done. \\\"usage\\\": {\\\"input_tokens\\\": 0}\",\n"
    "          \"annotations\": []\n"
    "        }\n"
    "      ]\n"
    "    }\n"
    "  ],\n"
    "  \"usage\": {\n"
    "    \"input_tokens\": 2006,\n"
    "    \"input_tokens_details\": {\n"
    "      \"cached_tokens\": 1920\n"
    "    },\n"
    "    \"output_tokens\": 300,\n"
    "    \"output_tokens_details\": {\n"
    "      \"reasoning_tokens\": 0\n"
    "    },\n"
    "    \"total_tokens\": 2306\n"
    "  }\n"
    "}\n";

#define USAGE_CHUNK  "data: {\"id\":\"chatcmpl-1\",\"object\":"              \
                     "\"chat.completion.chunk\",\"created\":1694268190,"      \
                     "\"model\":\"gpt-4o-mini-2024-07-18\","                  \
                     "\"system_fingerprint\":\"fp_44709d6fcb\","

static const char  usage_chat_sse[] =
    USAGE_CHUNK "\"choices\":[{\"index\":0,\"delta\":{\"role\":"
    "\"assistant\",\"content\":\"\"},\"logprobs\":null,"
    "\"finish_reason\":null}],\"usage\":null}\n"
    "\n"
    USAGE_CHUNK "\"choices\":[{\"index\":0,\"delta\":{\"content\":"
    "\"Hello \\\\\\\"usage\\\\\\\":{}\"},\"finish_reason\":null}],"
    "\"usage\":null}\n"
    "\n"
    USAGE_CHUNK "\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":"
    "[{\"index\":0,\"function\":{\"arguments\":\"{\\\"usage\\\":"
    "{\\\"completion_tokens\\\":1}}\"}}]},\"finish_reason\":null}],"
    "\"usage\":null}\n"
    "\n"
    USAGE_CHUNK "\"choices\":[{\"index\":0,\"delta\":{},"
    "\"finish_reason\":\"stop\"}],\"usage\":null}\n"
    "\n"
    USAGE_CHUNK "\"choices\":[],\"usage\":{\"prompt_tokens\":1500,"
    "\"completion_tokens\":420,\"total_tokens\":1920,"
    "\"prompt_tokens_details\":{\"cached_tokens\":1280,\"audio_tokens\":0},"
    "\"completion_tokens_details\":{\"reasoning_tokens\":0,"
    "\"audio_tokens\":0,\"accepted_prediction_tokens\":0,"
    "\"rejected_prediction_tokens\":0}}}\n"
    "\n"
    "data: [DONE]\n"
    "\n";

/* each chunk's usageMetadata the running total; a function call's args
 * are raw JSON */
static const char  usage_gemini_sse[] =
    "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"The\"}],"
    "\"role\": \"model\"},\"index\": 0}],\"usageMetadata\": "
    "{\"promptTokenCount\": 1200,\"totalTokenCount\": 1200,"
    "\"cachedContentTokenCount\": 1000,\"promptTokensDetails\": "
    "[{\"modality\": \"TEXT\",\"tokenCount\": 1200}]},"
    "\"modelVersion\": \"gemini-2.5-pro\",\"responseId\": \"abc\"}\r\n"
    "\r\n"
    "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": "
    "\" answer \\\"usageMetadata\\\": {\\\"promptTokenCount\\\": 0}\"}],"
    "\"role\": \"model\"},\"index\": 0}],\"usageMetadata\": "
    "{\"promptTokenCount\": 1200,\"candidatesTokenCount\": 40,"
    "\"totalTokenCount\": 1540,\"cachedContentTokenCount\": 1000,"
    "\"thoughtsTokenCount\": 300},\"modelVersion\": \"gemini-2.5-pro\","
    "\"responseId\": \"abc\"}\r\n"
    "\r\n"
    "data: {\"candidates\": [{\"content\": {\"parts\": [{\"functionCall\": "
    "{\"name\": \"report\", \"args\": {\"usageMetadata\": "
    "{\"candidatesTokenCount\": 1, \"promptTokenCount\": 0}}}}],"
    "\"role\": \"model\"},\"finishReason\": \"STOP\",\"index\": 0}],"
    "\"usageMetadata\": {\"promptTokenCount\": 1200,"
    "\"candidatesTokenCount\": 95,\"totalTokenCount\": 1705,"
    "\"cachedContentTokenCount\": 1000,\"thoughtsTokenCount\": 400,"
    "\"toolUsePromptTokenCount\": 10},\"modelVersion\": \"gemini-2.5-pro\","
    "\"responseId\": \"abc\"}\r\n"
    "\r\n";


typedef struct {
    int64_t      input;
    int64_t      output;
    int64_t      cache_read;
    int64_t      cache_write;
    unsigned     objects;
    unsigned     dropped;
    const char  *model;
} usage_want_t;

/* usage_read(): a byte at a time */
#define USAGE_BYTES  ((size_t) -1)


/* the reader after the text: fed whole (split == len), in two pieces at
 * split, or a byte at a time */
static void
usage_read(smcp_usage_t *u, const char *s, size_t len, size_t split)
{
    size_t                i;
    const unsigned char  *p = (const unsigned char *) s;

    smcp_usage_init(u);

    if (split == USAGE_BYTES) {
        for (i = 0; i < len; i++) {
            smcp_usage_feed(u, p + i, 1);
        }

        return;
    }

    smcp_usage_feed(u, p, split);
    smcp_usage_feed(u, p + split, len - split);
}


static int
usage_is(const smcp_usage_t *u, const usage_want_t *w)
{
    return u->input == w->input && u->output == w->output
           && u->cache_read == w->cache_read
           && u->cache_write == w->cache_write && u->objects == w->objects
           && u->dropped == w->dropped && strcmp(u->model, w->model) == 0;
}


static const char *
usage_show(const smcp_usage_t *u)
{
    static char  buf[2][320];
    static int   k;
    char        *b;

    b = buf[k++ % 2];
    snprintf(b, sizeof(buf[0]), "in %lld, out %lld, cache read %lld, "
             "cache write %lld, %u objects, %u dropped, model '%s'",
             (long long) u->input, (long long) u->output,
             (long long) u->cache_read, (long long) u->cache_write,
             u->objects, u->dropped, show(u->model, strlen(u->model)));

    return b;
}


/* the text fed whole, a byte at a time, and in two pieces split at every
 * offset: the same reading each time, the one wanted */
static void
usage_check(const char *what, const char *s, size_t len,
    const usage_want_t *w)
{
    size_t         i;
    smcp_usage_t  *u;

    u = xmalloc(sizeof(smcp_usage_t));

    usage_read(u, s, len, len);
    ok(usage_is(u, w), "usage: %s: %s", what, usage_show(u));

    usage_read(u, s, len, USAGE_BYTES);
    ok(usage_is(u, w), "usage: %s: a byte at a time: %s", what,
       usage_show(u));

    for (i = 0; i <= len; i++) {
        usage_read(u, s, len, i);

        if (!usage_is(u, w)) {
            break;
        }
    }

    if (i > len) {
        ok(1, "usage: %s: split at each of %zu offsets", what, len + 1);

    } else {
        ok(0, "usage: %s: split at %zu: %s", what, i, usage_show(u));
    }

    free(u);
}


static void
test_usage_streams(void)
{
    static const struct {
        const char    *what;
        const char    *text;
        size_t         len;
        usage_want_t   want;
    } streams[] = {
        { "Anthropic SSE", usage_anthropic_sse,
          sizeof(usage_anthropic_sse) - 1,
          { 472, 15, 2048, 1024, 2, 0, "" } },
        { "Anthropic JSON, a tool call's arguments saying less",
          usage_anthropic_json, sizeof(usage_anthropic_json) - 1,
          { 2095, 503, 0, 0, 2, 0, "claude-opus-4-1-20250805" } },
        { "Responses SSE", usage_responses_sse,
          sizeof(usage_responses_sse) - 1,
          { 176, 350, 1024, 0, 1, 0, "" } },
        { "Responses JSON, pretty-printed", usage_responses_json,
          sizeof(usage_responses_json) - 1,
          { 86, 300, 1920, 0, 1, 0, "gpt-4.1-2025-04-14" } },
        { "Chat Completions SSE", usage_chat_sse,
          sizeof(usage_chat_sse) - 1,
          { 220, 420, 1280, 0, 1, 0, "gpt-4o-mini-2024-07-18" } },
        { "Gemini SSE, a function call's args saying less",
          usage_gemini_sse, sizeof(usage_gemini_sse) - 1,
          { 210, 495, 1000, 0, 4, 0, "" } },
    };

    size_t  i;

    for (i = 0; i < sizeof(streams) / sizeof(streams[0]); i++) {
        usage_check(streams[i].what, streams[i].text, streams[i].len,
                    &streams[i].want);
    }
}


static void
test_usage_hostile(void)
{
    static const struct {
        const char    *what;
        const char    *text;
        usage_want_t   want;
    } cases[] = {
        { "a usage object after the real one cannot lower it",
          "{\"usage\":{\"input_tokens\":100,\"output_tokens\":50}}\n"
          "{\"x\":{\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}}",
          { 100, 50, 0, 0, 2, 0, "" } },
        { "one that says more raises it",
          "{\"usage\":{\"output_tokens\":5}}"
          "{\"x\":[{\"usage\":{\"output_tokens\":900}}]}",
          { 0, 900, 0, 0, 2, 0, "" } },
        { "a usage object inside one is part of it",
          "{\"usage\":{\"input_tokens\":5,\"usage\":{\"input_tokens\":1}}}",
          { 5, 0, 0, 0, 1, 0, "" } },
        { "negative, real, string counts: none; one too large: the most",
          "{\"usage\":{\"input_tokens\":-5,\"output_tokens\":1.5,"
          "\"cache_read_input_tokens\":\"9\","
          "\"cache_creation_input_tokens\":2000000000000}}",
          { 0, 0, 0, 1000000000000LL, 1, 0, "" } },
        { "an exponent is a real: no count",
          "{\"usage\":{\"output_tokens\":1e3}}",
          { 0, 0, 0, 0, 1, 0, "" } },
        { "the most, and one more",
          "{\"usage\":{\"input_tokens\":1000000000000,"
          "\"output_tokens\":1000000000001}}",
          { 1000000000000LL, 1000000000000LL, 0, 0, 1, 0, "" } },
        { "counts that add up past the most",
          "{\"usageMetadata\":{\"candidatesTokenCount\":1000000000000,"
          "\"thoughtsTokenCount\":1000000000000,"
          "\"promptTokenCount\":1000000000000,"
          "\"toolUsePromptTokenCount\":1000000000000}}",
          { 1000000000000LL, 1000000000000LL, 0, 0, 1, 0, "" } },
        { "a count past 64 bits: dropped",
          "{\"usage\":{\"output_tokens\":99999999999999999999}}",
          { 0, 0, 0, 0, 0, 1, "" } },
        { "more cached than the input: the input",
          "{\"usage\":{\"prompt_tokens\":10,\"prompt_tokens_details\":"
          "{\"cached_tokens\":50}}}",
          { 0, 0, 10, 0, 1, 0, "" } },
        { "usage null, an array, a string: nothing",
          "{\"usage\":null}{\"usage\":[{\"input_tokens\":5}]}"
          "{\"usage\":\"{\\\"input_tokens\\\":5}\"}{\"usage\":5}",
          { 0, 0, 0, 0, 0, 0, "" } },
        { "a value \"usage\" is no key",
          "{\"type\":\"usage\",\"v\":[\"usage\",{\"input_tokens\":3}],"
          "\"usage\":{\"input_tokens\":1}}",
          { 1, 0, 0, 0, 1, 0, "" } },
        { "not JSON: dropped, the next one read",
          "{\"usage\":{\"input_tokens\":5,}}{\"usage\":{\"output_tokens\":2}}",
          { 0, 2, 0, 0, 1, 1, "" } },
        { "a raw newline in a string: the reader finds its place again",
          "data: {\"delta\":{\"text\":\"cut\n"
          "data: {\"usage\":{\"input_tokens\":9,\"output_tokens\":4}}\n",
          { 9, 4, 0, 0, 1, 0, "" } },
        { "closers with nothing open",
          "]]]]}}}}{\"usage\":{\"input_tokens\":4}}",
          { 4, 0, 0, 0, 1, 0, "" } },
        { "an escaped key is read as a JSON parser reads it",
          "{\"x\":{\"\\u0075sage\":{\"output_tokens\":7}}}",
          { 0, 7, 0, 0, 1, 0, "" } },
        { "a key of ours cut by a newline",
          "{\"usa\nge\":{\"output_tokens\":7}}",
          { 0, 0, 0, 0, 0, 0, "" } },

        /* request bodies: the top-level "model", as the provider reads
         * it (the last one, as most JSON parsers do) */
        { "model: nested ones before the top-level one",
          "{\"tools\":[{\"name\":\"x\",\"input_schema\":{\"type\":\"object\","
          "\"properties\":{\"model\":{\"type\":\"string\"}}}}],"
          "\"metadata\":{\"model\":\"claude-haiku-4-5\"},"
          "\"messages\":[{\"role\":\"user\",\"content\":"
          "\"\\\",\\\"model\\\":\\\"claude-haiku-4-5\"}],"
          "\"model\":\"claude-opus-4-1\",\"max_tokens\":1024}",
          { 0, 0, 0, 0, 0, 0, "claude-opus-4-1" } },
        { "model: nested ones after it",
          "{\"model\":\"claude-opus-4-1\",\"metadata\":{\"model\":\"cheap\"},"
          "\"system\":\"\\\"}, \\\"model\\\": \\\"cheap\\\"\","
          "\"tools\":[{\"model\":\"cheap\"}]}",
          { 0, 0, 0, 0, 0, 0, "claude-opus-4-1" } },
        { "model: escaped, decoded",
          "{\"model\":\"claude-\\u006fpus-4\\/1\"}",
          { 0, 0, 0, 0, 0, 0, "claude-opus-4/1" } },
        { "model: an escaped quote",
          "{\"model\":\"a\\\"b\"}",
          { 0, 0, 0, 0, 0, 0, "a\"b" } },
        { "model: not ASCII",
          "{\"model\":\"claude-\\u00f6pus\"}",
          { 0, 0, 0, 0, 0, 0, "" } },
        { "model: a control character",
          "{\"model\":\"claude\\u0001\"}",
          { 0, 0, 0, 0, 0, 0, "" } },
        { "model: a broken escape",
          "{\"model\":\"claude\\ud800\"}",
          { 0, 0, 0, 0, 0, 0, "" } },
        { "model: empty",
          "{\"model\":\"\"}",
          { 0, 0, 0, 0, 0, 0, "" } },
        { "model: not a string",
          "{\"model\":[\"claude-opus-4-1\"]}{\"model\":{\"id\":\"x\"}}"
          "{\"model\":7}{\"model\":null}{\"model\":true}",
          { 0, 0, 0, 0, 0, 0, "" } },
        { "model: in an array",
          "[{\"model\":\"claude-opus-4-1\"}]",
          { 0, 0, 0, 0, 0, 0, "" } },
        { "model: cut by a raw newline",
          "{\"model\":\"claude\n-opus\"}",
          { 0, 0, 0, 0, 0, 0, "" } },
        { "model twice: the last",
          "{\"model\":\"claude-haiku-4-5\",\"max_tokens\":1,"
          "\"model\":\"claude-opus-4-1\"}",
          { 0, 0, 0, 0, 0, 0, "claude-opus-4-1" } },
        { "model twice, the last not a string: none",
          "{\"model\":\"claude-haiku-4-5\",\"model\":null}",
          { 0, 0, 0, 0, 0, 0, "" } },
        { "model: an escaped key",
          "{\"m\\u006fdel\":\"claude-opus-4-1\"}",
          { 0, 0, 0, 0, 0, 0, "claude-opus-4-1" } },
        { "model: an escaped key after a plain one",
          "{\"model\":\"claude-haiku-4-5\","
          "\"m\\u006fdel\":\"claude-opus-4-1\"}",
          { 0, 0, 0, 0, 0, 0, "claude-opus-4-1" } },
        { "model: a key all escapes",
          "{\"\\u006d\\u006f\\u0064\\u0065\\u006c\":\"x\"}",
          { 0, 0, 0, 0, 0, 0, "x" } },
        { "model: an escaped key, nested",
          "{\"metadata\":{\"m\\u006fdel\":\"cheap\"},"
          "\"model\":\"claude-opus-4-1\",\"x\":{\"m\\u006fdel\":\"cheap\"}}",
          { 0, 0, 0, 0, 0, 0, "claude-opus-4-1" } },
        { "model: an escaped key that is another",
          "{\"model\":\"claude-opus-4-1\",\"m\\u006fdels\":\"cheap\","
          "\"\\u006d\":\"cheap\"}",
          { 0, 0, 0, 0, 0, 0, "claude-opus-4-1" } },
    };

    size_t  i;

    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        usage_check(cases[i].what, cases[i].text, strlen(cases[i].text),
                    &cases[i].want);
    }
}


/*
 * The bound on the answer a request gives, where its provider reads it:
 * the largest; a planted one elsewhere (nested, in a string, in another
 * object of Gemini's) is not taken; a fraction or an exponent is no bound
 */
static void
test_usage_bound(void)
{
    static const struct {
        const char  *what;
        const char  *text;
        int64_t      want;
    } cases[] = {
        { "none", "{\"model\":\"m\"}", 0 },
        { "max_tokens", "{\"model\":\"m\",\"max_tokens\":4096}", 4096 },
        { "max_output_tokens", "{\"max_output_tokens\": 128000 }", 128000 },
        { "max_completion_tokens", "{\"max_completion_tokens\":77}", 77 },
        { "Gemini's", "{\"contents\":[],\"generationConfig\":{\"temperature\""
          ":1,\"maxOutputTokens\":8192}}", 8192 },
        { "the largest of them", "{\"max_tokens\":10,\"max_tokens\":900,"
          "\"max_completion_tokens\":50}", 900 },
        { "nested: not taken", "{\"metadata\":{\"max_tokens\":5},"
          "\"tools\":[{\"max_tokens\":6}]}", 0 },
        { "in a string: not taken", "{\"system\":\"\\\"max_tokens\\\":5\"}",
          0 },
        { "Gemini's elsewhere: not taken", "{"
          "\"systemInstruction\":{\"maxOutputTokens\":6},"
          "\"generationConfig\":{\"x\":{\"maxOutputTokens\":7}},"
          "\"toolConfig\":{\"maxOutputTokens\":8}}", 0 },
        { "after generationConfig: not Gemini's", "{\"generationConfig\":{},"
          "\"x\":{\"maxOutputTokens\":7}}", 0 },
        { "an escaped key", "{\"max_t\\u006fkens\":300}", 300 },
        { "a fraction: no bound", "{\"max_tokens\":1.5}", SMCP_USAGE_TOKENS_MAX },
        { "an exponent: no bound", "{\"max_tokens\":1e9}", SMCP_USAGE_TOKENS_MAX },
        { "null: none", "{\"max_tokens\":null}", 0 },
        { "a string: no bound", "{\"max_tokens\":1,\"max_tokens\":\"64000\"}",
          SMCP_USAGE_TOKENS_MAX },
        { "negative: no bound", "{\"max_completion_tokens\":-4}",
          SMCP_USAGE_TOKENS_MAX },
        { "Gemini's, either spelling, the largest", "{\"generationConfig\":"
          "{\"maxOutputTokens\":1,\"max_output_tokens\":65536}}", 65536 },
        { "generation_config too", "{\"generation_config\":"
          "{\"max_output_tokens\":700},\"generationConfig\":"
          "{\"maxOutputTokens\":1}}", 700 },
        { "too large: the most", "{\"max_tokens\":99999999999999999999999}",
          SMCP_USAGE_TOKENS_MAX },
    };

    size_t        i, j;
    smcp_usage_t  u;

    /* the answers asked for: n, candidateCount */
    smcp_usage_init(&u);
    smcp_usage_feed(&u, (const unsigned char *) "{\"n\":128,"
                    "\"max_completion_tokens\":16}", 36);
    ok(u.choices == 128 && u.max_output == 16, "usage bound: n 128 (%lld), "
       "16 each (%lld)", (long long) u.choices, (long long) u.max_output);
    smcp_usage_init(&u);
    smcp_usage_feed(&u, (const unsigned char *) "{\"generationConfig\":"
                    "{\"candidateCount\":8,\"maxOutputTokens\":10}}", 62);
    ok(u.choices == 8 && u.max_output == 10, "usage bound: candidateCount 8 "
       "(%lld), 10 each (%lld)", (long long) u.choices,
       (long long) u.max_output);

    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        /* whole, then a byte at a time */
        smcp_usage_init(&u);
        smcp_usage_feed(&u, (const unsigned char *) cases[i].text,
                        strlen(cases[i].text));
        ok(u.max_output == cases[i].want, "usage bound: %s: %lld (%lld)",
           cases[i].what, (long long) u.max_output,
           (long long) cases[i].want);

        smcp_usage_init(&u);
        for (j = 0; cases[i].text[j]; j++) {
            smcp_usage_feed(&u, (const unsigned char *) cases[i].text + j, 1);
        }
        ok(u.max_output == cases[i].want, "usage bound: %s, byte by "
           "byte: %lld", cases[i].what, (long long) u.max_output);
    }
}


/* what is too long, at its limit and one past it; deep nesting */
static void
test_usage_long(void)
{
    char          *s, *pad;
    size_t         n, len;
    usage_want_t   w;
    smcp_usage_t  *u;

    /* a usage object of exactly SMCP_USAGE_OBJECT bytes, then one more,
     * after a real one */
    for (n = SMCP_USAGE_OBJECT; n <= SMCP_USAGE_OBJECT + 1; n++) {
        pad = repeat('x', n - (sizeof("{\"output_tokens\":9,\"p\":\"\"}") - 1),
                     "");
        len = sizeof("{\"usage\":{\"input_tokens\":7}}") - 1
              + sizeof("{\"usage\":}") - 1 + n;
        s = xmalloc(len + 1);
        snprintf(s, len + 1, "{\"usage\":{\"input_tokens\":7}}"
                 "{\"usage\":{\"output_tokens\":9,\"p\":\"%s\"}}", pad);

        if (n == SMCP_USAGE_OBJECT) {
            w = (usage_want_t) { 7, 9, 0, 0, 2, 0, "" };
            usage_check("an object as long as can be", s, len, &w);

        } else {
            w = (usage_want_t) { 7, 0, 0, 0, 1, 1, "" };
            usage_check("an object a byte too long: dropped", s, len, &w);
        }

        free(pad);
        free(s);
    }

    /* a model of SMCP_USAGE_MODEL - 1 bytes, then one more; the longest
     * all escapes */
    u = xmalloc(sizeof(smcp_usage_t));

    for (n = SMCP_USAGE_MODEL - 1; n <= SMCP_USAGE_MODEL; n++) {
        pad = repeat('m', n, "");
        s = xmalloc(n + 16);
        len = snprintf(s, n + 16, "{\"model\":\"%s\"}", pad);
        smcp_usage_init(u);
        smcp_usage_feed(u, (unsigned char *) s, len);
        ok(n < SMCP_USAGE_MODEL ? strcmp(u->model, pad) == 0
                                : u->model[0] == '\0',
           "usage: a model of %zu bytes: %s", n,
           n < SMCP_USAGE_MODEL ? "kept" : "too long, none");
        free(pad);
        free(s);
    }

    n = SMCP_USAGE_MODEL - 1;
    s = xmalloc(6 * n + 16);
    len = sprintf(s, "{\"model\":\"");

    while (n--) {
        len += sprintf(s + len, "\\u006d");
    }

    len += sprintf(s + len, "\"}");
    smcp_usage_init(u);
    smcp_usage_feed(u, (unsigned char *) s, len);
    ok(strlen(u->model) == SMCP_USAGE_MODEL - 1 && u->model[0] == 'm',
       "usage: a model of %d bytes, each escaped: kept",
       SMCP_USAGE_MODEL - 1);
    free(s);
    free(u);

    /* 100,000 deep, the usage object at the bottom */
    n = 100000;
    len = 2 * n + sizeof("{\"usage\":{\"input_tokens\":3}}") - 1;
    s = xmalloc(len + 1);
    memset(s, '[', n);
    memcpy(s + n, "{\"usage\":{\"input_tokens\":3}}",
           sizeof("{\"usage\":{\"input_tokens\":3}}") - 1);
    memset(s + len - n, ']', n);
    s[len] = '\0';
    w = (usage_want_t) { 3, 0, 0, 0, 1, 0, "" };
    u = xmalloc(sizeof(smcp_usage_t));
    usage_read(u, s, len, len);
    ok(usage_is(u, &w), "usage: 100,000 deep: %s", usage_show(u));
    usage_read(u, s, len, len / 2);
    ok(usage_is(u, &w), "usage: 100,000 deep, split: %s", usage_show(u));
    free(s);

    /* deep inside a usage object: dropped, the next one read */
    n = 3000;
    len = 2 * n + 64;
    s = xmalloc(len + 1);
    len = sprintf(s, "{\"usage\":{\"input_tokens\":3,\"x\":");
    memset(s + len, '[', n);
    memset(s + len + n, ']', n);
    len += 2 * n;
    len += sprintf(s + len, "}}{\"usage\":{\"output_tokens\":2}}");
    w = (usage_want_t) { 0, 2, 0, 0, 1, 1, "" };
    usage_read(u, s, len, len);
    ok(usage_is(u, &w), "usage: deep inside a usage object: dropped, the "
       "next one read: %s", usage_show(u));
    free(s);
    free(u);
}


static void
test_usage_cost(void)
{
    smcp_usage_t        *u;
    smcp_usage_price_t   price = { 3, 15, 0.25, 3.75 };
    smcp_usage_price_t   none = { 0, 0, 0, 0 };

    u = xmalloc(sizeof(smcp_usage_t));
    smcp_usage_init(u);
    ok(smcp_usage_cost(u, &price) == 0, "usage: nothing costs nothing");

    u->input = 1000000;
    u->output = 500000;
    u->cache_read = 2000000;
    u->cache_write = 400000;
    ok(smcp_usage_cost(u, &price) == 12.5,
       "usage: 1M in, 0.5M out, 2M cache read, 0.4M cache write at "
       "3/15/0.25/3.75: $12.5 (%g)", smcp_usage_cost(u, &price));
    ok(smcp_usage_cost(u, &none) == 0, "usage: no price: $0");

    u->input = SMCP_USAGE_TOKENS_MAX;
    u->output = SMCP_USAGE_TOKENS_MAX;
    u->cache_read = 0;
    u->cache_write = 0;
    ok(smcp_usage_cost(u, &price) == 18000000,
       "usage: the most tokens: $18M (%g)", smcp_usage_cost(u, &price));

    /* the estimate: a token per 4 bytes, and one, never lowering */
    smcp_usage_init(u);
    smcp_usage_estimate(u, 4000, 10);
    ok(u->input == 1001 && u->output == 3 && u->cache_read == 0,
       "usage: estimate of 4000 and 10 bytes: 1001 in, 3 out (%lld, %lld)",
       (long long) u->input, (long long) u->output);

    u->input = 5000;
    u->output = 2;
    smcp_usage_estimate(u, 4000, 10);
    ok(u->input == 5000 && u->output == 3,
       "usage: the estimate never lowers (%lld, %lld)",
       (long long) u->input, (long long) u->output);

    smcp_usage_estimate(u, 0, -7);
    ok(u->input == 5000 && u->output == 3,
       "usage: no bytes, or fewer: nothing estimated");

    smcp_usage_estimate(u, INT64_MAX, INT64_MAX);
    ok(u->input == SMCP_USAGE_TOKENS_MAX && u->output == SMCP_USAGE_TOKENS_MAX,
       "usage: an estimate past the most: the most");

    /* nginx's empty buffers (a last_buf alone) have no memory at all */
    smcp_usage_init(u);
    smcp_usage_feed(u, NULL, 0);
    ok(u->objects == 0 && u->input == 0 && u->depth == 0,
       "usage: an empty piece without memory reads nothing");

    free(u);
}


static void
test_usage_model_matches(void)
{
    static const struct {
        const char  *pattern;
        const char  *model;
        int          match;
    } cases[] = {
        { "*", "claude-opus-4-1", 1 }, { "*", "", 1 },
        { "claude-*", "claude-opus-4-1", 1 }, { "claude-*", "claude-", 1 },
        { "claude-*", "claude", 0 }, { "claude-*", "gpt-5", 0 },
        { "claude-*", "", 0 }, { "claude-*", "xclaude-opus", 0 },
        { "gpt-4o", "gpt-4o", 1 }, { "gpt-4o", "gpt-4o-mini", 0 },
        { "gpt-4o-mini", "gpt-4o", 0 }, { "gpt-4o", "GPT-4o", 0 },
        { "gpt-4o", "", 0 }, { "", "", 1 }, { "", "gpt-4o", 0 },
        { "a*b", "a*b", 1 }, { "a*b", "axb", 0 },
    };

    size_t  i;

    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        ok(smcp_usage_model_matches(cases[i].pattern,
                                    strlen(cases[i].pattern),
                                    cases[i].model, strlen(cases[i].model))
           == cases[i].match,
           "usage: price '%s' %s model '%s'", cases[i].pattern,
           cases[i].match ? "matches" : "does not match", cases[i].model);
    }

    /* the meter's model when the request named none */
    ok(smcp_usage_model_matches("*", 1, NULL, 0) == 1,
       "usage: price '*' matches no model (NULL, 0)");
    ok(smcp_usage_model_matches("claude-*", 8, NULL, 0) == 0,
       "usage: price 'claude-*' does not match no model (NULL, 0)");
    ok(smcp_usage_model_matches("gpt-4o", 6, NULL, 0) == 0,
       "usage: price 'gpt-4o' does not match no model (NULL, 0)");
}


int
main(void)
{
    test_branch();
    test_repository();
    test_grants();
    test_model();
    test_tenant();
    test_stream_id();
    test_cursor();
    test_diff_sections();
    test_diff_hostile();
    test_revoked();
    test_jsonrpc();
    test_json_plain();
    test_keyring();
    test_jwt_kid();
    test_redis_addr();
    test_url();
    test_addr_private();
    test_usage_streams();
    test_usage_hostile();
    test_usage_long();
    test_usage_cost();
    test_usage_bound();
    test_usage_model_matches();

    return tap_done();
}
