/*
 * Docker's multiplexed log stream (no TTY) to lines, as the bytes come.
 *
 * A frame is an 8-byte header [stream, 0, 0, 0, big-endian uint32 size]
 * and its payload.  With timestamps=1 every payload starts with an
 * RFC 3339 timestamp and a space.  Lines over 16 KiB come in several
 * frames, each with the same timestamp, only the last ending in '\n':
 * they are put back together per stream.
 *
 * Everything in a payload comes from the sandbox: any byte (NUL too), any
 * length.  Nothing is allocated for a frame: its payload is consumed as it
 * arrives, and a line keeps at most max_line bytes (the sandbox's diff
 * line on stdout: max_diff); the rest is counted, dropped, and reported
 * with the line (`cut`).
 */

#include <stdlib.h>
#include <string.h>

#include "runner.h"


void
runner_logstream_init(runner_logstream_t *ls, runner_line_pt on_line,
    void *data)
{
    memset(ls, 0, sizeof(*ls));
    ls->on_line = on_line;
    ls->data = data;

    ls->max_line = (size_t) runner_config->max_line;
    ls->max_diff = (size_t) runner_config->diff_max + RUNNER_DIFF_SLACK;

    if (ls->max_diff < ls->max_line) {
        ls->max_diff = ls->max_line;
    }
}


void
runner_logstream_free(runner_logstream_t *ls)
{
    int  i;

    for (i = 0; i < 3; i++) {
        free(ls->line[i]);
        ls->line[i] = NULL;
        ls->line_cap[i] = 0;
    }
}


/* the cap of the line in progress on stream s */
static size_t
runner_logstream_cap(runner_logstream_t *ls, int s)
{
    size_t  plen = sizeof(RUNNER_DIFF_PREFIX) - 1;

    if (s == 1 && ls->line_len[s] >= plen
        && memcmp(ls->line[s], RUNNER_DIFF_PREFIX, plen) == 0)
    {
        return ls->max_diff;
    }

    return ls->max_line;
}


static int
runner_logstream_append(runner_logstream_t *ls, int s, const char *p,
    size_t n)
{
    size_t   cap, room, want, ncap;
    char    *np;

    ls->open[s] = 1;

    while (n > 0) {
        /* the diff prefix decides the cap: fill up to it first */
        cap = runner_logstream_cap(ls, s);
        room = cap > ls->line_len[s] ? cap - ls->line_len[s] : 0;

        if (room == 0 || ls->cut[s]) {
            ls->cut[s] += n;
            return RUNNER_OK;
        }

        want = n < room ? n : room;

        if (ls->line_len[s] < sizeof(RUNNER_DIFF_PREFIX) - 1
            && ls->line_len[s] + want >= sizeof(RUNNER_DIFF_PREFIX) - 1)
        {
            want = sizeof(RUNNER_DIFF_PREFIX) - 1 - ls->line_len[s];
        }

        if (ls->line_len[s] + want + 1 > ls->line_cap[s]) {
            ncap = ls->line_cap[s] ? ls->line_cap[s] : RUNNER_LINE_FIRST;

            while (ncap < ls->line_len[s] + want + 1) {
                ncap *= 2;
            }

            if (ncap > cap + 1) {
                ncap = cap + 1;
            }

            np = realloc(ls->line[s], ncap);
            if (np == NULL) {
                return RUNNER_ERR;
            }

            ls->line[s] = np;
            ls->line_cap[s] = ncap;
        }

        memcpy(ls->line[s] + ls->line_len[s], p, want);
        ls->line_len[s] += want;
        ls->line[s][ls->line_len[s]] = '\0';
        p += want;
        n -= want;
    }

    return RUNNER_OK;
}


static int
runner_logstream_emit(runner_logstream_t *ls, int s)
{
    int  rc;

    rc = ls->on_line(ls->data, s, ls->ts[s], ls->line[s] ? ls->line[s] : "",
                     ls->line_len[s], ls->cut[s]);

    ls->line_len[s] = 0;
    ls->cut[s] = 0;
    ls->open[s] = 0;

    /* a huge line's buffer goes with it */
    if (ls->line_cap[s] > RUNNER_LINE_KEEP) {
        free(ls->line[s]);
        ls->line[s] = NULL;
        ls->line_cap[s] = 0;
    }

    return rc;
}


/* the timestamp ends: it is the line's when no line is in progress */
static void
runner_logstream_ts(runner_logstream_t *ls, int s)
{
    if (!ls->open[s]) {
        memcpy(ls->ts[s], ls->tsbuf, ls->ts_len);
        ls->ts[s][ls->ts_len] = '\0';
    }

    ls->in_ts = 0;
    ls->ts_len = 0;
}


/* bytes of stream s's lines: each newline ends one */
static int
runner_logstream_lines(runner_logstream_t *ls, int s, const char *p,
    const char *end)
{
    const char  *nl;

    while (p < end) {
        nl = memchr(p, '\n', end - p);

        if (nl == NULL) {
            /* the rest of this line comes in this frame or the next */
            return runner_logstream_append(ls, s, p, end - p);
        }

        if (runner_logstream_append(ls, s, p, nl - p) != RUNNER_OK
            || runner_logstream_emit(ls, s) != RUNNER_OK)
        {
            return RUNNER_ERR;
        }

        p = nl + 1;
    }

    return RUNNER_OK;
}


/* payload bytes of the current frame */
static int
runner_logstream_payload(runner_logstream_t *ls, const char *p, size_t n)
{
    int          s = ls->stream;
    const char  *end, *sp;
    size_t       k;

    end = p + n;

    if (ls->in_ts) {
        k = (size_t) (end - p);
        if (k > sizeof(ls->tsbuf) - 1 - ls->ts_len) {
            k = sizeof(ls->tsbuf) - 1 - ls->ts_len;
        }

        sp = memchr(p, ' ', k);

        if (sp) {
            memcpy(ls->tsbuf + ls->ts_len, p, sp - p);
            ls->ts_len += sp - p;
            runner_logstream_ts(ls, s);
            p = sp + 1;

        } else {
            memcpy(ls->tsbuf + ls->ts_len, p, k);
            ls->ts_len += k;
            p += k;

            if (ls->ts_len < sizeof(ls->tsbuf) - 1) {
                return RUNNER_OK;           /* the rest comes later */
            }

            /* no timestamp after all: those bytes are lines' bytes */
            ls->in_ts = 0;
            ls->ts_len = 0;

            if (runner_logstream_lines(ls, s, ls->tsbuf,
                                       ls->tsbuf + sizeof(ls->tsbuf) - 1)
                != RUNNER_OK)
            {
                return RUNNER_ERR;
            }
        }
    }

    return runner_logstream_lines(ls, s, p, end);
}


/* a frame ended while its timestamp was still being read */
static int
runner_logstream_frame_end(runner_logstream_t *ls)
{
    size_t  n;

    if (!ls->in_ts) {
        return RUNNER_OK;
    }

    n = ls->ts_len;
    ls->in_ts = 0;
    ls->ts_len = 0;

    /* a frame too short for a timestamp: its bytes are lines' bytes */
    return runner_logstream_lines(ls, ls->stream, ls->tsbuf, ls->tsbuf + n);
}


int
runner_logstream_feed(runner_logstream_t *ls, const char *buf, size_t len)
{
    size_t  n;
    int     s;

    if (buf == NULL) {
        /* end of stream: lines without a final newline */
        if (ls->hdr_len == 8 && runner_logstream_frame_end(ls) != RUNNER_OK)
        {
            return RUNNER_ERR;
        }

        for (s = 0; s < 3; s++) {
            if (ls->open[s] && runner_logstream_emit(ls, s) != RUNNER_OK) {
                return RUNNER_ERR;
            }
        }

        return RUNNER_OK;
    }

    while (len > 0) {

        if (ls->hdr_len < 8) {
            n = 8 - ls->hdr_len;
            n = n < len ? n : len;
            memcpy(ls->hdr + ls->hdr_len, buf, n);
            ls->hdr_len += n;
            buf += n;
            len -= n;

            if (ls->hdr_len < 8) {
                return RUNNER_OK;
            }

            /* 1 stdout, 2 stderr; anything else is kept apart as stderr
             * (never read as the agent's events) */
            ls->stream = (ls->hdr[0] == 1) ? 1 : 2;
            ls->frame_left = ((uint64_t) ls->hdr[4] << 24)
                             | ((uint64_t) ls->hdr[5] << 16)
                             | ((uint64_t) ls->hdr[6] << 8) | ls->hdr[7];
            ls->in_ts = 1;
            ls->ts_len = 0;

            if (ls->frame_left == 0) {
                ls->hdr_len = 0;
                ls->in_ts = 0;
                continue;
            }
        }

        n = ls->frame_left < len ? (size_t) ls->frame_left : len;

        if (runner_logstream_payload(ls, buf, n) != RUNNER_OK) {
            return RUNNER_ERR;
        }

        ls->frame_left -= n;
        buf += n;
        len -= n;

        if (ls->frame_left == 0) {
            ls->hdr_len = 0;

            if (runner_logstream_frame_end(ls) != RUNNER_OK) {
                return RUNNER_ERR;
            }
        }
    }

    return RUNNER_OK;
}


/* the nanoseconds of a timestamp's fraction (".1" -> 100000000) */
static long
runner_logstream_nanos(const char *ts, size_t n)
{
    size_t  k;
    char    fr[10];

    if (ts[n] != '.') {
        return 0;
    }

    memset(fr, '0', 9);
    fr[9] = '\0';
    k = strspn(ts + n + 1, "0123456789");
    memcpy(fr, ts + n + 1, k < 9 ? k : 9);

    return atol(fr);
}


/*
 * Docker's timestamps in order: RFC 3339 with trailing zeros of the
 * fraction trimmed (".1Z" is later than ".09Z", "05Z" than "04.9Z"), so
 * not comparable as strings.
 */
int
runner_logstream_ts_cmp(const char *a, const char *b)
{
    size_t  na, nb;
    int     cmp;
    long    fa, fb;

    na = strcspn(a, ".Z+");
    nb = strcspn(b, ".Z+");

    cmp = memcmp(a, b, na < nb ? na : nb);
    if (cmp != 0 || na != nb) {
        return cmp ? cmp : (na < nb ? -1 : 1);
    }

    fa = runner_logstream_nanos(a, na);
    fb = runner_logstream_nanos(b, nb);

    return (fa > fb) - (fa < fb);
}
