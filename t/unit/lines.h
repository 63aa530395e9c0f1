/*
 * Docker log frames made, and the lines the runner's logstream delivers
 * collected: what the unit tests of the log reading share.  One copy,
 * included by each test program that needs it.
 */

#ifndef SMCP_LINES_H
#define SMCP_LINES_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runner.h"


/* lines as the logstream delivers them */

#define MAX_LINES  64

typedef struct {
    int      n;
    int      stream[MAX_LINES];
    char     ts[MAX_LINES][48];
    char    *line[MAX_LINES];
    size_t   len[MAX_LINES];
    size_t   cut[MAX_LINES];
} lines_t;


/* a runner_line_pt: the first MAX_LINES lines, NUL bytes and all */
static int __attribute__((unused))
collect(void *data, int stream, const char *ts, const char *line, size_t len,
    size_t cut)
{
    lines_t  *l = data;

    if (l->n < MAX_LINES) {
        l->stream[l->n] = stream;
        snprintf(l->ts[l->n], sizeof(l->ts[0]), "%s", ts);
        l->line[l->n] = malloc(len + 1);
        memcpy(l->line[l->n], line, len);
        l->line[l->n][len] = '\0';
        l->len[l->n] = len;
        l->cut[l->n] = cut;
        l->n++;
    }

    return RUNNER_OK;
}


static void __attribute__((unused))
lines_free(lines_t *l)
{
    int  i;

    for (i = 0; i < l->n; i++) {
        free(l->line[i]);
    }

    memset(l, 0, sizeof(*l));
}


/* a frame header for a payload of len bytes */
static void __attribute__((unused))
header(unsigned char *dst, int stream, uint32_t len)
{
    dst[0] = (unsigned char) stream;
    dst[1] = dst[2] = dst[3] = 0;
    dst[4] = (unsigned char) (len >> 24);
    dst[5] = (unsigned char) (len >> 16);
    dst[6] = (unsigned char) (len >> 8);
    dst[7] = (unsigned char) len;
}


/* a whole frame: the header, then the payload; its length */
static size_t __attribute__((unused))
frame(char *dst, int stream, const char *payload, size_t len)
{
    header((unsigned char *) dst, stream, (uint32_t) len);
    memcpy(dst + 8, payload, len);

    return len + 8;
}

#endif /* SMCP_LINES_H */
