/*
 * smcp-token: mints an HS256 bearer token with the project's signing
 * key, or revokes one.
 *
 *   smcp-token --sub alice [--ttl 30d] [--scope mcp|ui|egress]
 *              [--repos GRANT,...] [--run RUNID]
 *              [--keys-file FILE | --secret-file FILE]
 *   smcp-token --revoke JTI|TOKEN [--exp EPOCH] [--redis ADDR]
 *              [--prefix P] [--redis-password-file FILE]
 *   smcp-token --help | --version
 *
 * A minted token goes alone on stdout (scripts capture it); its jti, expiry
 * and kid on stderr.  --keys-file: the first key of a keys file signs, its
 * kid in the header (common/smcp_keyring.h); --secret-file: a bare secret,
 * no kid; without either the secret comes from $PROXY_JWT_SECRET.
 * Without --redis-password-file the Redis password (if any) comes from
 * $SMCP_REDIS_PASSWORD.  Every token carries a random "jti"; a
 * revocation writes jti -> exp into the hash <prefix>revoked and publishes
 * "<jti> <exp>" on the channel <prefix>revoked, in one step.  Exit codes:
 * 0 done, 1 failed, 2 bad usage.
 */

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include <hiredis/hiredis.h>
#include <openssl/crypto.h>
#include <jansson.h>
#include <openssl/crypto.h>

#include "smcp_defaults.h"
#include "smcp_jwt.h"
#include "smcp_keys.h"
#include "smcp_scripts.h"
#include "smcp_redis_addr.h"
#include "smcp_revoked.h"
#include "smcp_sentinel.h"
#include "smcp_util.h"
#include "smcp_validate.h"
#include "smcp_version.h"


/* a bare jti has no known expiry: it is remembered this long */
#define SMCP_TOKEN_REVOKE_DEFAULT  (10L * 365 * 24 * 3600)

/* --ttl: by default, and at most (s) */
#define SMCP_TOKEN_TTL_DEFAULT     (30L * 86400)
#define SMCP_TOKEN_TTL_MAX         (3650L * 86400)


typedef struct {
    const char     *sub;
    const char     *scope;
    const char     *run;
    const char     *repos;
    const char     *secret_file;
    const char     *keys_file;
    long            ttl;

    const char     *revoke;
    const char     *redis;
    const char     *prefix;
    const char     *password_file;
    long            exp;
} smcp_token_opts_t;


static void
smcp_token_usage(FILE *f)
{
    fprintf(f,
        "usage: smcp-token --sub TENANT [--ttl DURATION] [--scope SCOPE]\n"
        "                  [--repos GRANTS] [--run RUNID]\n"
        "                  [--keys-file FILE | --secret-file FILE]\n"
        "       smcp-token --revoke JTI|TOKEN [--exp EPOCH] "
        "[--redis ADDR]\n"
        "                  [--prefix P] [--redis-password-file FILE]\n"
        "       smcp-token --help | --version\n"
        "Mints a token (alone on stdout; its jti, expiry and kid on stderr)\n"
        "or\n"
        "revokes one.\n"
        "  --ttl      lifetime: 30d, 12h, 90m, 3600s or plain seconds\n"
        "             (default 30d, at most 3650d)\n"
        "  --scope    mcp (default), ui or egress\n"
        "  --repos    repositories the tenant may name, comma-separated:\n"
        "             owner/repo, owner/* or * (default: none)\n"
        "  key:       --keys-file (its first key signs, \"KID SECRET\" a\n"
        "             line), --secret-file, else $PROXY_JWT_SECRET\n"
        "  --revoke   a token's jti, or the whole token (its exp is kept);\n"
        "             a bare jti is kept until --exp (default: 10 years)\n"
        "  --redis    host:port, unix:/path or\n"
        "             sentinel://HOST:PORT,.../MASTER (default "
        SMCP_DEFAULT_REDIS ")\n"
        "  --prefix   Redis key prefix (default smcp:)\n"
        "  password:  --redis-password-file, else $SMCP_REDIS_PASSWORD\n");
}


/* "30d", "12h", "90m", "3600s" or "3600": 1 s .. SMCP_TOKEN_TTL_MAX */
static int
smcp_token_duration(const char *name, const char *s, long *out)
{
    long   n, unit;
    char  *end;

    end = (char *) s;
    n = (*s >= '0' && *s <= '9') ? strtol(s, &end, 10) : 0;

    switch (n > 0 ? *end : '?') {
    case '\0':
    case 's':
        unit = 1;
        break;
    case 'm':
        unit = 60;
        break;
    case 'h':
        unit = 3600;
        break;
    case 'd':
        unit = 86400;
        break;
    default:
        unit = 0;
    }

    if (unit == 0 || (*end != '\0' && end[1] != '\0')) {
        fprintf(stderr, "smcp-token: %s: \"%.64s\" is not a duration (a "
                "number of seconds, or with a unit: 3600s, 90m, 12h, 30d)\n",
                name, s);
        return SMCP_ERR;
    }

    if (n > SMCP_TOKEN_TTL_MAX / unit) {
        fprintf(stderr, "smcp-token: %s: \"%.64s\" is longer than %ldd\n",
                name, s, SMCP_TOKEN_TTL_MAX / 86400);
        return SMCP_ERR;
    }

    *out = n * unit;

    return SMCP_OK;
}


static int
smcp_token_number(const char *name, const char *s, long *out)
{
    char  *end;

    *out = strtol(s, &end, 10);

    if (*s == '\0' || *end != '\0' || *out <= 0) {
        fprintf(stderr, "smcp-token: %s takes a positive number\n", name);
        return SMCP_ERR;
    }

    return SMCP_OK;
}


/* 1 = took an option and its value, 0 = unknown, -1 = bad value */
static int
smcp_token_opt(smcp_token_opts_t *o, const char *name, const char *v)
{
    static const struct {
        const char  *name;
        size_t       off;
    } strs[] = {
        { "--sub", offsetof(smcp_token_opts_t, sub) },
        { "--scope", offsetof(smcp_token_opts_t, scope) },
        { "--run", offsetof(smcp_token_opts_t, run) },
        { "--repos", offsetof(smcp_token_opts_t, repos) },
        { "--secret-file", offsetof(smcp_token_opts_t, secret_file) },
        { "--keys-file", offsetof(smcp_token_opts_t, keys_file) },
        { "--revoke", offsetof(smcp_token_opts_t, revoke) },
        { "--redis", offsetof(smcp_token_opts_t, redis) },
        { "--prefix", offsetof(smcp_token_opts_t, prefix) },
        { "--redis-password-file",
          offsetof(smcp_token_opts_t, password_file) },
    };

    size_t  i;

    for (i = 0; i < sizeof(strs) / sizeof(strs[0]); i++) {
        if (strcmp(name, strs[i].name) == 0) {
            break;
        }
    }

    if (i == sizeof(strs) / sizeof(strs[0])
        && strcmp(name, "--ttl") != 0 && strcmp(name, "--exp") != 0)
    {
        return 0;
    }

    if (v == NULL) {
        fprintf(stderr, "smcp-token: %s needs a value\n", name);
        return -1;
    }

    if (i < sizeof(strs) / sizeof(strs[0])) {
        *(const char **) ((char *) o + strs[i].off) = v;
        return 1;
    }

    if (strcmp(name, "--ttl") == 0) {
        return smcp_token_duration(name, v, &o->ttl) == SMCP_OK ? 1 : -1;
    }

    return smcp_token_number(name, v, &o->exp) == SMCP_OK ? 1 : -1;
}


/* "acme/app,tools/x" -> ["acme/app", "tools/x"]; NULL if one is invalid */
static json_t *
smcp_token_repos(const char *list)
{
    json_t      *a;
    const char  *p, *comma;
    size_t       n;

    a = json_array();

    for (p = list; a != NULL; p = comma + 1) {
        comma = strchr(p, ',');
        n = comma ? (size_t) (comma - p) : strlen(p);

        if (!smcp_grant_valid(p, n)) {
            fprintf(stderr, "smcp-token: --repos: \"%.*s\" is not owner/repo, "
                    "owner/* or *\n", (int) (n < 200 ? n : 200), p);
            json_decref(a);
            return NULL;
        }

        if (json_array_append_new(a, json_stringn(p, n)) != 0) {
            json_decref(a);
            return NULL;
        }

        if (comma == NULL) {
            break;
        }
    }

    return a;
}


/* the signing keys: --keys-file's, else a ring of the bare secret */
static int
smcp_token_keys(smcp_token_opts_t *o, smcp_keyring_t *ring)
{
    int             rc;
    char            err[512];
    size_t          keylen;
    unsigned char   key[SMCP_SECRET_MAX];

    if (o->keys_file && o->secret_file) {
        fprintf(stderr, "smcp-token: --keys-file and --secret-file: give "
                "one of them\n");
        return 2;
    }

    if (o->keys_file) {
        rc = smcp_keyring_load(ring, o->keys_file, err, sizeof(err));

    } else {
        rc = o->secret_file
             ? smcp_secret_from_file(o->secret_file, SMCP_SECRET_MIN, key,
                                     &keylen, err, sizeof(err))
             : smcp_secret_from_env("PROXY_JWT_SECRET", SMCP_SECRET_MIN, key,
                                    &keylen, err, sizeof(err));

        if (rc == SMCP_OK) {
            rc = smcp_keyring_single(ring, key, keylen);
        }

        OPENSSL_cleanse(key, sizeof(key));
    }

    if (rc != SMCP_OK) {
        fprintf(stderr, "smcp-token: %s\n", err);
        return 1;
    }

    return 0;
}


static int
smcp_token_mint(smcp_token_opts_t *o)
{
    int             rc;
    char           *tok, jti[33], expires[32];
    json_t         *claims;
    time_t          now, exp;
    struct tm       tm;
    smcp_keyring_t  ring;

    if (strcmp(o->scope, SMCP_SCOPE_MCP) != 0
        && strcmp(o->scope, SMCP_SCOPE_UI) != 0
        && strcmp(o->scope, SMCP_SCOPE_EGRESS) != 0)
    {
        fprintf(stderr, "smcp-token: --scope must be mcp, ui or egress\n");
        return 2;
    }

    rc = smcp_token_keys(o, &ring);
    if (rc != 0) {
        return rc;
    }

    if (smcp_random_hex(jti, 16) != SMCP_OK) {
        fprintf(stderr, "smcp-token: no random bytes for the token id\n");
        return 1;
    }

    now = time(NULL);
    exp = now + o->ttl;

    claims = json_pack("{s:s, s:I, s:I, s:s, s:s}", "sub", o->sub,
                       "iat", (json_int_t) now,
                       "exp", (json_int_t) exp, "scope", o->scope,
                       "jti", jti);

    if (claims == NULL
        || (o->run
            && json_object_set_new(claims, "run", json_string(o->run)) != 0))
    {
        fprintf(stderr, "smcp-token: bad claims (not UTF-8?)\n");
        return 1;
    }

    if (o->repos
        && json_object_set_new(claims, "repos", smcp_token_repos(o->repos))
           != 0)
    {
        json_decref(claims);
        return 2;
    }

    rc = smcp_jwt_sign(&ring.key[0], claims, &tok);

    if (rc != SMCP_OK) {
        smcp_keyring_clear(&ring);
        json_decref(claims);
        fprintf(stderr, "smcp-token: signing failed\n");
        return 1;
    }

    /* the token alone on stdout; what a person wants to know about it on
     * stderr, after it */
    printf("%s\n", tok);
    fflush(stdout);

    if (gmtime_r(&exp, &tm) == NULL
        || strftime(expires, sizeof(expires), "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
    {
        snprintf(expires, sizeof(expires), "%ld", (long) exp);
    }

    fprintf(stderr, "jti: %s\nexpires: %s\n", jti, expires);

    if (ring.key[0].kid_len) {
        fprintf(stderr, "kid: %s\n", ring.key[0].kid);
    }

    smcp_keyring_clear(&ring);

    free(tok);
    json_decref(claims);

    return 0;
}


/* what to revoke: a bare jti, or a token's jti and exp (not verified:
 * revoking a forged token harms nobody) */
static int
smcp_token_target(smcp_token_opts_t *o, char *jti, long *exp)
{
    size_t          n;
    json_t         *claims, *j, *e;
    const char     *dot1, *dot2;
    unsigned char   payload[SMCP_JWT_MAX_LEN];

    dot1 = strchr(o->revoke, '.');

    if (dot1 == NULL) {
        if (!smcp_valid_jti(o->revoke, strlen(o->revoke))) {
            fprintf(stderr, "smcp-token: --revoke: not a token id (1-64 of "
                    "A-Z a-z 0-9 - _) nor a token\n");
            return SMCP_ERR;
        }

        strcpy(jti, o->revoke);
        *exp = o->exp ? o->exp : (long) time(NULL) + SMCP_TOKEN_REVOKE_DEFAULT;
        return SMCP_OK;
    }

    dot2 = strchr(dot1 + 1, '.');
    claims = NULL;

    if (dot2 != NULL && (size_t) (dot2 - dot1) < sizeof(payload) - 8
        && smcp_b64url_decode(payload, &n, dot1 + 1, dot2 - dot1 - 1)
           == SMCP_OK)
    {
        claims = json_loadb((char *) payload, n, 0, NULL);
    }

    j = json_object_get(claims, "jti");
    e = json_object_get(claims, "exp");

    if (!json_is_string(j)
        || !smcp_valid_jti(json_string_value(j), json_string_length(j))
        || !json_is_number(e))
    {
        json_decref(claims);
        fprintf(stderr, "smcp-token: --revoke: the token has no usable jti "
                "and exp (tokens minted before token ids can only be "
                "refused by rotating the secret)\n");
        return SMCP_ERR;
    }

    strcpy(jti, json_string_value(j));
    *exp = o->exp ? o->exp : (long) json_number_value(e);
    json_decref(claims);

    return SMCP_OK;
}


static redisContext *
smcp_token_redis(smcp_token_opts_t *o)
{
    char               err[256];
    size_t             pwlen = 0;
    redisContext      *c;
    struct timeval     tv = { 3, 0 };
    smcp_redis_addr_t  addr;
    unsigned char      pw[SMCP_SECRET_MAX];

    if (smcp_redis_addr_parse(o->redis, strlen(o->redis), &addr, err,
                              sizeof(err))
        != SMCP_OK)
    {
        fprintf(stderr, "smcp-token: --redis: %s\n", err);
        return NULL;
    }

    if (o->password_file
        ? smcp_secret_from_file(o->password_file, 1, pw, &pwlen, err,
                                sizeof(err)) != SMCP_OK
        : (getenv("SMCP_REDIS_PASSWORD")
           && smcp_secret_from_env("SMCP_REDIS_PASSWORD", 1, pw, &pwlen, err,
                                   sizeof(err)) != SMCP_OK))
    {
        fprintf(stderr, "smcp-token: %s\n", err);
        return NULL;
    }

    c = smcp_redis_connect(&addr, tv,
                           (o->password_file || getenv("SMCP_REDIS_PASSWORD"))
                           ? pw : NULL, pwlen, err, sizeof(err));

    OPENSSL_cleanse(pw, sizeof(pw));

    if (c == NULL) {
        fprintf(stderr, "smcp-token: redis: %s\n", err);
        return NULL;
    }

    return c;
}


static int
smcp_token_revoke(smcp_token_opts_t *o)
{
    long           exp;
    redisReply    *reply;
    redisContext  *c;
    char           jti[SMCP_JTI_MAX + 1], key[256], idx[256], chan[256];

    if (strlen(o->prefix) > 200) {
        fprintf(stderr, "smcp-token: --prefix is too long\n");
        return 2;
    }

    if (smcp_token_target(o, jti, &exp) != SMCP_OK) {
        return 2;
    }

    c = smcp_token_redis(o);
    if (c == NULL) {
        return 1;
    }

    snprintf(key, sizeof(key), SMCP_KEY_REVOKED, o->prefix);
    snprintf(idx, sizeof(idx), SMCP_KEY_REVOKED_EXP, o->prefix);
    snprintf(chan, sizeof(chan), SMCP_CHAN_REVOKED, o->prefix);

    /* common/scripts/revoke.lua: a one-shot tool sends it whole */
    reply = redisCommand(c, "EVAL %s 3 %s %s %s %s %ld %ld", smcp_lua_revoke,
                         key, idx, chan, jti, exp, (long) time(NULL));

    if (reply == NULL || reply->type == REDIS_REPLY_ERROR) {
        fprintf(stderr, "smcp-token: revoking failed: %s\n",
                reply ? reply->str : c->errstr);
        freeReplyObject(reply);
        redisFree(c);
        return 1;
    }

    printf("revoked %s (kept until %ld)\n", jti, exp);

    freeReplyObject(reply);
    redisFree(c);

    return 0;
}


int
main(int argc, char **argv)
{
    int                i, rc;
    smcp_token_opts_t  o;

    memset(&o, 0, sizeof(smcp_token_opts_t));
    o.scope = SMCP_SCOPE_MCP;
    o.ttl = SMCP_TOKEN_TTL_DEFAULT;
    o.redis = SMCP_DEFAULT_REDIS;
    o.prefix = SMCP_DEFAULT_PREFIX;

    /* --help and --version alone; every other option takes a value */
    for (i = 1; i < argc; i += 2) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            smcp_token_usage(stdout);
            return 0;
        }

        if (strcmp(argv[i], "--version") == 0) {
            printf("smcp-token " SMCP_VERSION "\n");
            return 0;
        }

        rc = smcp_token_opt(&o, argv[i], i + 1 < argc ? argv[i + 1] : NULL);

        if (rc == 0) {
            fprintf(stderr, "smcp-token: unknown option \"%.64s\"\n",
                    argv[i]);
            smcp_token_usage(stderr);
        }

        if (rc <= 0) {
            return 2;
        }
    }

    if (o.revoke) {
        return smcp_token_revoke(&o);
    }

    if (o.sub == NULL || *o.sub == '\0') {
        fprintf(stderr, "smcp-token: --sub (the tenant) or --revoke is "
                "required\n");
        smcp_token_usage(stderr);
        return 2;
    }

    return smcp_token_mint(&o);
}
