/*
 * Docker's multiplexed log stream through the runner's line handling
 * (runner/logstream.c), as runner_docker_follow() drives it: the body of
 * GET /containers/ID/logs?follow=1&timestamps=1 in the chunks curl hands
 * over, then the end of the stream (a last line without its newline), then
 * free.
 *
 * The input is that body.  It is fed twice: whole, and in small chunks
 * whose sizes come from the input's hash.  Checked: every line is handed
 * over without its newline and NUL-terminated, on stream 0..2, with a
 * timestamp shorter than the buffer, no longer than its cap (issue 7:
 * max_line, or the diff's cap for the sandbox's diff line); and both
 * feedings give the same lines, in the same order, with the same
 * result.
 *
 * links: runner/logstream.c
 */

#include <string.h>

#include "runner.h"
#include "fuzz.h"
#include "runner_globals.h"


/* small caps: long lines are cut with small inputs */
#define FUZZ_MAX_LINE  512
#define FUZZ_DIFF_MAX  1024


typedef struct {
    uint64_t  hash;
    size_t    lines;
    size_t    bytes;
} fuzz_lines_t;


static int
fuzz_on_line(void *data, int stream, const char *ts, const char *line,
    size_t len, size_t cut)
{
    size_t         tslen;
    fuzz_lines_t  *l = data;

    fuzz_check(stream >= 0 && stream <= 2, "stream is 0, 1 or 2");
    fuzz_check(line != NULL || len == 0, "a line");

    tslen = strnlen(ts, 48);
    fuzz_check(tslen < 48, "the timestamp is NUL-terminated in its buffer");

    if (len) {
        fuzz_check(memchr(line, '\n', len) == NULL, "no newline in a line");
        fuzz_check(line[len] == '\0', "a line is NUL-terminated");
    }

    l->hash = fuzz_hash(l->hash, &stream, sizeof(stream));
    l->hash = fuzz_hash(l->hash, ts, tslen + 1);
    l->hash = fuzz_hash(l->hash, &len, sizeof(len));
    l->hash = fuzz_hash(l->hash, line, len);
    l->lines++;

    fuzz_check(len <= FUZZ_MAX_LINE
               || (stream == 1 && len <= FUZZ_DIFF_MAX + RUNNER_DIFF_SLACK
                   && memcmp(line, RUNNER_DIFF_PREFIX,
                             sizeof(RUNNER_DIFF_PREFIX) - 1) == 0),
               "a line is no longer than its cap");
    fuzz_check(cut == 0 || len >= FUZZ_MAX_LINE,
               "only a full line is cut");
    l->hash = fuzz_hash(l->hash, &cut, sizeof(cut));

    l->bytes += len;

    return RUNNER_OK;
}


/* returns the result of the feeding; *l collects the lines */
static int
fuzz_feed(const uint8_t *data, size_t size, uint64_t seed, fuzz_lines_t *l)
{
    int                 rc;
    size_t              off, n;
    runner_logstream_t  ls;

    memset(l, 0, sizeof(*l));
    l->hash = FUZZ_HASH_INIT;

    config.max_line = FUZZ_MAX_LINE;
    config.diff_max = FUZZ_DIFF_MAX;

    runner_logstream_init(&ls, fuzz_on_line, l);

    rc = RUNNER_OK;

    for (off = 0; off < size && rc == RUNNER_OK; off += n) {
        n = seed ? 1 + fuzz_next(&seed) % 19 : size;
        n = n < size - off ? n : size - off;

        rc = runner_logstream_feed(&ls, (const char *) data + off, n);
    }

    /* as the runner does, error or not */
    if (runner_logstream_feed(&ls, NULL, 0) != RUNNER_OK) {
        rc = RUNNER_ERR;
    }

    runner_logstream_free(&ls);

    return rc;
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int           rc1, rc2;
    uint64_t      seed;
    fuzz_lines_t  whole, chunked;

    rc1 = fuzz_feed(data, size, 0, &whole);

    seed = fuzz_hash(FUZZ_HASH_INIT, data, size) | 1;
    rc2 = fuzz_feed(data, size, seed, &chunked);

    fuzz_check(whole.bytes <= size, "no more line bytes than input bytes");
    fuzz_check(rc1 == rc2, "whole and chunked: the same result");
    fuzz_check(whole.lines == chunked.lines
               && whole.hash == chunked.hash,
               "whole and chunked: the same lines");

    return 0;
}
