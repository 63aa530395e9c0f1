/*
 * Unit tests of the plain-C parts shared by the module and the runner:
 * Docker's log framing, the outcome of OpenCode events, base64url, JWTs,
 * UTF-8 repair.  Prints TAP.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runner.h"
#include "smcp_jwt.h"
#include "runner_globals.h"
#include "lines.h"
#include "tap.h"


static void unit_ids(void);


/* log framing */

static void
test_logstream(void)
{
    char                 buf[200000], *big;
    size_t               n, i, step;
    int                  all_ok;
    lines_t              l;
    runner_logstream_t   ls;
    const char          *t2 = "2026-11-29T10:00:00.25Z ";

    /* two frames, one per stream, then one line split over two frames */
    n = 0;
    n += frame(buf + n, 1, "2026-11-29T10:00:00.1Z {\"a\":1}\n", 31);
    n += frame(buf + n, 2, "2026-11-29T10:00:00.2Z oops\n", 28);
    n += frame(buf + n, 1, "2026-11-29T10:00:00.25Z part one ", 33);
    n += frame(buf + n, 1, "2026-11-29T10:00:00.25Z part two\n", 33);

    /* fed whole, and byte by byte: the same lines */
    for (step = 0; step < 2; step++) {
        memset(&l, 0, sizeof(l));
        runner_logstream_init(&ls, collect, &l);

        if (step == 0) {
            runner_logstream_feed(&ls, buf, n);

        } else {
            for (i = 0; i < n; i++) {
                runner_logstream_feed(&ls, buf + i, 1);
            }
        }

        runner_logstream_feed(&ls, NULL, 0);
        runner_logstream_free(&ls);

        ok(l.n == 3, step ? "bytewise: three lines" : "three lines");
        ok(l.n == 3 && strcmp(l.line[0], "{\"a\":1}") == 0
           && l.stream[0] == 1 && strcmp(l.ts[0], "2026-11-29T10:00:00.1Z")
              == 0, "stdout line with its timestamp");
        ok(l.n == 3 && strcmp(l.line[1], "oops") == 0 && l.stream[1] == 2,
           "stderr line");
        ok(l.n == 3 && strcmp(l.line[2], "part one part two") == 0
           && strcmp(l.ts[2], "2026-11-29T10:00:00.25Z") == 0,
           "a line split over frames is put back together");

        lines_free(&l);
    }

    /* a 100 KiB line in 16 KiB frames, each with the timestamp */
    big = malloc(100001);
    memset(big, 'x', 100000);
    big[100000] = '\0';

    n = 0;
    for (i = 0; i < 100000; i += 16384) {
        size_t  chunk = 100000 - i < 16384 ? 100000 - i : 16384;
        char    tmp[16384 + 64];
        size_t  tl = strlen(t2);

        memcpy(tmp, t2, tl);
        memcpy(tmp + tl, big + i, chunk);

        if (i + chunk == 100000) {
            tmp[tl + chunk++] = '\n';
        }

        n += frame(buf + n, 1, tmp, tl + chunk);
    }

    memset(&l, 0, sizeof(l));
    runner_logstream_init(&ls, collect, &l);
    runner_logstream_feed(&ls, buf, n);
    runner_logstream_free(&ls);

    ok(l.n == 1 && strlen(l.line[0]) == 100000
       && strcmp(l.line[0], big) == 0, "a 100 KiB line over seven frames");
    lines_free(&l);
    free(big);

    /* the last line without a newline is delivered at the end */
    n = frame(buf, 1, "2026-11-29T10:00:01Z tail", 25);
    memset(&l, 0, sizeof(l));
    runner_logstream_init(&ls, collect, &l);
    runner_logstream_feed(&ls, buf, n);
    all_ok = (l.n == 0);
    runner_logstream_feed(&ls, NULL, 0);
    runner_logstream_free(&ls);
    ok(all_ok && l.n == 1 && strcmp(l.line[0], "tail") == 0,
       "an unterminated last line comes at the end of the stream");
    lines_free(&l);
}


/* outcome */

static void
test_outcome(void)
{
    runner_outcome_t  o;
    json_t           *ev, *files;
    const char       *diff;

    memset(&o, 0, sizeof(o));
    config.diff_max = 1024;
    config.max_result = 256 * 1024;

#define EV(s)  ev = json_loads(s, 0, NULL); runner_outcome_event(&o, ev);     \
               json_decref(ev)

    EV("{\"type\":\"text\",\"sessionID\":\"ses_abc\",\"part\":{\"text\":\"first\"}}");
    EV("{\"type\":\"step_finish\",\"part\":{\"tokens\":{\"input\":10,"
       "\"output\":5,\"reasoning\":1,\"cache\":{\"read\":2,\"write\":3}},"
       "\"cost\":0.5}}");
    EV("{\"type\":\"step_finish\",\"part\":{\"tokens\":{\"input\":1,"
       "\"output\":1,\"reasoning\":0,\"cache\":{\"read\":0,\"write\":0}},"
       "\"cost\":0.25}}");
    EV("{\"type\":\"text\",\"part\":{\"text\":\"the answer\"}}");
    EV("{\"type\":\"error\",\"error\":{\"name\":\"APIError\",\"data\":"
       "{\"message\":\"invalid x-api-key\",\"statusCode\":401}}}");

    ok(o.result && strcmp(o.result, "the answer") == 0,
       "result: the last text");
    ok(o.tokens_input == 11 && o.tokens_output == 6
       && o.tokens_reasoning == 1 && o.tokens_cache_read == 2
       && o.tokens_cache_write == 3, "tokens summed over step_finish");
    ok(o.cost > 0.749 && o.cost < 0.751, "cost summed");
    ok(o.error && strcmp(o.error, "invalid x-api-key") == 0,
       "error: the provider's message");
    ok(strcmp(o.oc_session, "ses_abc") == 0, "OpenCode's session id kept");

    diff = "diff --git a/x.txt b/x.txt\n--- a/x.txt\n+++ b/x.txt\n"
           "@@ -1 +1,2 @@\n-old\n+new\n+more\n"
           "diff --git a/dir/y b/dir/y\nnew file mode 100644\n"
           "--- /dev/null\n+++ b/dir/y\n@@ -0,0 +1 @@\n+y\n";
    files = runner_outcome_files(diff, strlen(diff));
    ok(json_array_size(files) == 2, "two files in the diff");
    ok(strcmp(json_string_value(json_object_get(json_array_get(files, 0),
                                                "path")), "x.txt") == 0
       && json_integer_value(json_object_get(json_array_get(files, 0),
                                             "additions")) == 2
       && json_integer_value(json_object_get(json_array_get(files, 0),
                                             "deletions")) == 1,
       "x.txt: +2 -1");
    ok(strcmp(json_string_value(json_object_get(json_array_get(files, 1),
                                                "path")), "dir/y") == 0
       && json_integer_value(json_object_get(json_array_get(files, 1),
                                             "additions")) == 1,
       "dir/y: +1");
    json_decref(files);

    runner_outcome_free(&o);
#undef EV
}


/* shared helpers */

static void
test_common(void)
{
    unsigned char  raw[64], dec[64];
    char           enc[128], err[128], *tok, id[SMCP_ID_LEN + 1];
    size_t         n, i;
    json_t        *claims, *got;
    int            rc;
    const unsigned char  key[] = "0123456789abcdef0123";
    smcp_keyring_t       ring, other;

    for (i = 0; i < sizeof(raw); i++) {
        raw[i] = (unsigned char) (i * 37 + 11);
    }

    rc = 1;
    for (n = 0; n <= sizeof(raw); n++) {
        smcp_b64url_encode(enc, raw, n);
        if (strlen(enc) != smcp_b64url_encoded_len(n)
            || smcp_b64url_decode(dec, &i, enc, strlen(enc)) != SMCP_OK
            || i != n || memcmp(dec, raw, n) != 0)
        {
            rc = 0;
        }
    }
    ok(rc, "base64url round trip, every length 0..64");
    ok(smcp_b64url_decode(dec, &n, "ab+/", 4) == SMCP_ERR,
       "base64url refuses + and /");
    ok(smcp_b64url_decode(dec, &n, "abc", 3) == SMCP_OK
       && smcp_b64url_decode(dec, &n, "abd", 3) == SMCP_ERR,
       "base64url refuses non-canonical trailing bits");

    ok(smcp_make_id(id, SMCP_RUN_ID_PREFIX) == SMCP_OK
       && smcp_valid_id(id, strlen(id), SMCP_RUN_ID_PREFIX)
       && !smcp_valid_id(id, strlen(id), SMCP_SESSION_ID_PREFIX),
       "run ids: made and recognised");
    ok(!smcp_valid_id("run_ZZZZZZZZZZZZZZZZZZZZZZZZ", 28, SMCP_RUN_ID_PREFIX),
       "run ids: only lowercase hex");
    unit_ids();

    claims = json_pack("{s:s, s:I, s:s}", "sub", "alice", "exp",
                       (json_int_t) time(NULL) + 60, "scope", "mcp");
    smcp_keyring_single(&ring, key, sizeof(key) - 1);
    smcp_keyring_single(&other, (const unsigned char *) "another-secret-0123",
                        19);
    rc = smcp_jwt_sign(&ring.key[0], claims, &tok);
    ok(rc == SMCP_OK, "JWT signed");
    ok(smcp_jwt_verify(&ring, tok, strlen(tok), time(NULL),
                       &got, err, sizeof(err)) == SMCP_OK
       && strcmp(json_string_value(json_object_get(got, "sub")), "alice")
          == 0, "JWT verified, claims back");
    json_decref(got);

    ok(smcp_jwt_verify(&other, tok, strlen(tok), time(NULL), &got, err,
                       sizeof(err))
       == SMCP_ERR && strstr(err, "signature"), "wrong key: refused");
    ok(smcp_jwt_verify(&ring, tok, strlen(tok), time(NULL) + 120, &got, err,
                       sizeof(err)) == SMCP_ERR
       && strstr(err, "expired"), "expired: refused");

    tok[strlen(tok) - 2] ^= 1;
    ok(smcp_jwt_verify(&ring, tok, strlen(tok), time(NULL), &got, err,
                       sizeof(err)) == SMCP_ERR,
       "tampered signature: refused");
    free(tok);
    json_decref(claims);

    /* the signature itself (computed elsewhere), key after key: the
     * per-thread HMAC context is re-keyed and back */
    {
        static const char *want[] = {
            "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJhbGljZSIsImV4cC"
            "I6NDEwMjQ0NDgwMH0.WX-SEeZRIcOxGdaJyZcSHK2jb3Mva4xJS8P4wCjRR_k",
            "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJhbGljZSIsImV4cC"
            "I6NDEwMjQ0NDgwMH0.nYoLQfhwoR8dPwztQWGA9Ga4mZlk2379UIrKEe1xl-w"
        };
        static const char *keys[] = { "k3y", "another-secret-0123" };
        int             i, same;
        json_t         *c, *g2;
        smcp_keyring_t  rings[2];

        smcp_keyring_single(&rings[0], (const unsigned char *) keys[0],
                            strlen(keys[0]));
        smcp_keyring_single(&rings[1], (const unsigned char *) keys[1],
                            strlen(keys[1]));

        c = json_pack("{s:s, s:I}", "sub", "alice", "exp",
                      (json_int_t) 4102444800LL);
        got = NULL;
        g2 = NULL;
        same = c != NULL;

        /* the one-shot way (threaded callers), then the kept context */
        for (i = 0; same && i < 10; i++) {
            if (i == 5) {
                smcp_jwt_keep_context();
            }

            tok = NULL;
            same = smcp_jwt_sign(&rings[i % 2].key[0], c, &tok) == SMCP_OK
                   && strcmp(tok, want[i % 2]) == 0
                   && smcp_jwt_verify(&rings[i % 2], tok, strlen(tok),
                                      time(NULL), &got, err, sizeof(err))
                      == SMCP_OK
                   && smcp_jwt_verify(&rings[1 - i % 2], tok, strlen(tok),
                                      time(NULL), &g2, err, sizeof(err))
                      == SMCP_ERR;
            json_decref(got);
            json_decref(g2);
            got = NULL;
            g2 = NULL;
            free(tok);
        }

        ok(same, "HS256 signatures as computed elsewhere, keys alternating, "
           "one-shot and with the kept context");
        json_decref(c);
    }

    /* {"alg":"none"}.{"sub":"a","exp":9999999999}. */
    ok(smcp_jwt_verify(&ring,
                       "eyJhbGciOiJub25lIn0.eyJzdWIiOiJhIiwiZXhwIjo5OTk5OTk5OTk5fQ.",
                       59, time(NULL), &got, err, sizeof(err)) == SMCP_ERR
       && strstr(err, "HS256"), "alg none: refused");

    {
        char    s[] = "ok \xff\xfe caf\xc3\xa9 \xed\xa0\x80 \xf0\x9f\x98\x80";
        json_t *js;

        n = smcp_utf8_sanitize(s, strlen(s));
        js = json_string(s);
        ok(n == 5 && strstr(s, "caf\xc3\xa9") && strstr(s, "\xf0\x9f\x98\x80")
           && js != NULL,
           "UTF-8 repair: bad bytes and surrogates replaced, the rest kept");
        json_decref(js);
    }
}



/* ids from the per-thread pool (smcp_random_id_hex): valid, distinct
 * across refills, and a child of fork() never gets the parent's next */
static void
unit_ids(void)
{
    int     fd[2], status, same, bad;
    char    ids[1000][SMCP_ID_LEN + 1], child[SMCP_ID_LEN + 1],
            parent[SMCP_ID_LEN + 1];
    pid_t   pid;
    size_t  i, j;

    bad = 0;
    same = 0;

    for (i = 0; i < 1000; i++) {
        if (smcp_make_id(ids[i], SMCP_SESSION_ID_PREFIX) != SMCP_OK
            || !smcp_valid_id(ids[i], strlen(ids[i]), SMCP_SESSION_ID_PREFIX))
        {
            bad++;
        }

        for (j = 0; j < i; j++) {
            same += strcmp(ids[i], ids[j]) == 0;
        }
    }

    ok(bad == 0 && same == 0, "1,000 ids from the pool (refilled 11 times): "
       "valid, all different");

    memset(child, 0, sizeof(child));

    if (pipe(fd) != 0 || (pid = fork()) < 0) {
        ok(0, "fork");
        return;
    }

    if (pid == 0) {
        close(fd[0]);
        status = smcp_make_id(child, SMCP_RUN_ID_PREFIX) == SMCP_OK
                 && write(fd[1], child, SMCP_ID_LEN) == SMCP_ID_LEN;
        _exit(status ? 0 : 1);
    }

    close(fd[1]);
    status = read(fd[0], child, SMCP_ID_LEN) == SMCP_ID_LEN;
    close(fd[0]);
    waitpid(pid, NULL, 0);

    ok(status && smcp_make_id(parent, SMCP_RUN_ID_PREFIX) == SMCP_OK
       && strcmp(child, parent) != 0,
       "a forked child's first id is not the parent's next (the pool is "
       "emptied in the child)");
}

int
main(void)
{
    runner_unit_defaults();

    test_logstream();
    test_outcome();
    test_common();

    return tap_done();
}
