/*
 * Docker's multiplexed log stream (no TTY) to lines.
 *
 * A frame is an 8-byte header [stream, 0, 0, 0, big-endian uint32 size]
 * and its payload.  With timestamps=1 every payload starts with an
 * RFC 3339 timestamp and a space.  Lines over 16 KiB come in several
 * frames, each with the same timestamp, only the last ending in '\n':
 * they are put back together per stream.
 */

#include <stdlib.h>
#include <string.h>

#include "runner.h"


#define RUNNER_LINE_MAX  (64 * 1024 * 1024)


void
runner_logstream_init(runner_logstream_t *ls, runner_line_pt on_line,
    void *data)
{
    memset(ls, 0, sizeof(*ls));
    ls->on_line = on_line;
    ls->data = data;
}


void
runner_logstream_free(runner_logstream_t *ls)
{
    int  i;

    for (i = 0; i < 3; i++) {
        free(ls->line[i]);
        ls->line[i] = NULL;
    }

    free(ls->frame);
    ls->frame = NULL;
}


static int
runner_logstream_append(runner_logstream_t *ls, int s, const char *p,
    size_t n)
{
    size_t   cap;
    char    *np;

    if (ls->line_len[s] + n + 1 > ls->line_cap[s]) {
        cap = ls->line_cap[s] ? ls->line_cap[s] : 4096;

        while (cap < ls->line_len[s] + n + 1) {
            cap *= 2;
        }

        if (cap > RUNNER_LINE_MAX) {
            return RUNNER_ERR;
        }

        np = realloc(ls->line[s], cap);
        if (np == NULL) {
            return RUNNER_ERR;
        }

        ls->line[s] = np;
        ls->line_cap[s] = cap;
    }

    memcpy(ls->line[s] + ls->line_len[s], p, n);
    ls->line_len[s] += n;
    ls->line[s][ls->line_len[s]] = '\0';

    return RUNNER_OK;
}


static int
runner_logstream_emit(runner_logstream_t *ls, int s)
{
    int  rc;

    rc = ls->on_line(ls->data, s, ls->ts[s], ls->line[s], ls->line_len[s]);
    ls->line_len[s] = 0;

    return rc;
}


static int
runner_logstream_frame(runner_logstream_t *ls, int s, const char *p,
    size_t n)
{
    const char  *sp, *nl, *end;
    size_t       tlen;

    end = p + n;

    /* the timestamp of this frame */
    sp = memchr(p, ' ', n);

    if (sp && sp - p < (long) sizeof(ls->ts[s])) {
        tlen = sp - p;

        if (ls->line_len[s] == 0) {
            memcpy(ls->ts[s], p, tlen);
            ls->ts[s][tlen] = '\0';
        }

        p = sp + 1;
    }

    while (p < end) {
        nl = memchr(p, '\n', end - p);

        if (nl == NULL) {
            /* the rest of this line comes in the next frame */
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


int
runner_logstream_feed(runner_logstream_t *ls, const char *buf, size_t len)
{
    size_t  n;
    int     s;

    if (buf == NULL) {
        /* end of stream: lines without a final newline */
        for (s = 0; s < 3; s++) {
            if (ls->line_len[s] && runner_logstream_emit(ls, s) != RUNNER_OK)
            {
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

            ls->stream = ls->hdr[0] <= 2 ? ls->hdr[0] : 1;
            ls->frame_left = ((size_t) ls->hdr[4] << 24)
                             | ((size_t) ls->hdr[5] << 16)
                             | ((size_t) ls->hdr[6] << 8) | ls->hdr[7];
            ls->frame_len = 0;

            if (ls->frame_left > RUNNER_LINE_MAX) {
                return RUNNER_ERR;
            }

            free(ls->frame);
            ls->frame = malloc(ls->frame_left + 1);
            if (ls->frame == NULL) {
                return RUNNER_ERR;
            }
        }

        n = ls->frame_left < len ? ls->frame_left : len;
        memcpy(ls->frame + ls->frame_len, buf, n);
        ls->frame_len += n;
        ls->frame_left -= n;
        buf += n;
        len -= n;

        if (ls->frame_left == 0) {
            s = ls->stream;
            ls->hdr_len = 0;

            if (runner_logstream_frame(ls, s, ls->frame, ls->frame_len)
                != RUNNER_OK)
            {
                return RUNNER_ERR;
            }
        }
    }

    return RUNNER_OK;
}
