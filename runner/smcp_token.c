/*
 * smcp-token: mints an HS256 bearer token with the project's signing
 * secret.
 *
 *   smcp-token --sub alice [--ttl SECONDS] [--scope mcp|ui|egress]
 *              [--repos GRANT,...] [--run RUNID]
 *              [--secret-file FILE]
 *
 * Without --secret-file the secret comes from $PROXY_JWT_SECRET.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "smcp_jwt.h"
#include "smcp_keys.h"
#include "smcp_util.h"
#include "smcp_validate.h"


static void
smcp_token_usage(void)
{
    fprintf(stderr,
        "usage: smcp-token --sub TENANT [--ttl SECONDS] [--scope SCOPE]\n"
        "                  [--repos GRANTS] [--run RUNID] "
        "[--secret-file FILE]\n"
        "  --ttl      lifetime in seconds (default 2592000 = 30 days)\n"
        "  --scope    mcp (default), ui or egress\n"
        "  --repos    repositories the tenant may name, comma-separated:\n"
        "             owner/repo, owner/* or * (default: none)\n"
        "  secret:    --secret-file, else $PROXY_JWT_SECRET\n");
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


int
main(int argc, char **argv)
{
    const char     *sub, *scope, *run, *secret_file, *repos;
    char           *tok, *end, err[256];
    long            ttl;
    int             i;
    size_t          keylen;
    json_t         *claims;
    time_t          now;
    unsigned char   key[SMCP_SECRET_MAX];

    sub = NULL;
    scope = SMCP_SCOPE_MCP;
    run = NULL;
    repos = NULL;
    secret_file = NULL;
    ttl = 30L * 24 * 3600;

    for (i = 1; i < argc; i++) {
        if (i + 1 < argc && strcmp(argv[i], "--sub") == 0) {
            sub = argv[++i];

        } else if (i + 1 < argc && strcmp(argv[i], "--ttl") == 0) {
            ttl = strtol(argv[++i], &end, 10);
            if (*end != '\0' || ttl <= 0) {
                fprintf(stderr, "smcp-token: --ttl takes a positive number "
                        "of seconds\n");
                return 2;
            }

        } else if (i + 1 < argc && strcmp(argv[i], "--scope") == 0) {
            scope = argv[++i];

        } else if (i + 1 < argc && strcmp(argv[i], "--repos") == 0) {
            repos = argv[++i];

        } else if (i + 1 < argc && strcmp(argv[i], "--run") == 0) {
            run = argv[++i];

        } else if (i + 1 < argc && strcmp(argv[i], "--secret-file") == 0) {
            secret_file = argv[++i];

        } else {
            smcp_token_usage();
            return 2;
        }
    }

    if (sub == NULL || *sub == '\0') {
        smcp_token_usage();
        return 2;
    }

    if (strcmp(scope, SMCP_SCOPE_MCP) != 0 && strcmp(scope, SMCP_SCOPE_UI) != 0
        && strcmp(scope, SMCP_SCOPE_EGRESS) != 0)
    {
        fprintf(stderr, "smcp-token: --scope must be mcp, ui or egress\n");
        return 2;
    }

    if ((secret_file
         ? smcp_secret_from_file(secret_file, SMCP_SECRET_MIN, key, &keylen,
                                 err, sizeof(err))
         : smcp_secret_from_env("PROXY_JWT_SECRET", SMCP_SECRET_MIN, key,
                                &keylen, err, sizeof(err)))
        != SMCP_OK)
    {
        fprintf(stderr, "smcp-token: %s\n", err);
        return 1;
    }

    now = time(NULL);

    claims = json_pack("{s:s, s:I, s:I, s:s}", "sub", sub,
                       "iat", (json_int_t) now,
                       "exp", (json_int_t) (now + ttl), "scope", scope);

    if (claims == NULL
        || (run && json_object_set_new(claims, "run", json_string(run)) != 0))
    {
        fprintf(stderr, "smcp-token: bad claims (not UTF-8?)\n");
        return 1;
    }

    if (repos
        && json_object_set_new(claims, "repos", smcp_token_repos(repos)) != 0)
    {
        return 2;
    }

    if (smcp_jwt_sign(key, keylen, claims, &tok) != SMCP_OK) {
        fprintf(stderr, "smcp-token: signing failed\n");
        return 1;
    }

    printf("%s\n", tok);

    free(tok);
    json_decref(claims);

    return 0;
}
