/*
 * Structured log lines on stderr: time, level, run, message.
 */

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "runner.h"


void
runner_log(const char *level, const char *run, const char *fmt, ...)
{
    va_list         ap;
    struct timeval  tv;
    struct tm       tm;
    char            ts[32], msg[1024];

    gettimeofday(&tv, NULL);
    gmtime_r(&tv.tv_sec, &tm);
    strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", &tm);

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);

    /* one write per line: lines of concurrent runs do not interleave */
    fprintf(stderr, "%s.%03dZ level=%s pid=%d%s%s msg=\"%s\"\n", ts,
            (int) (tv.tv_usec / 1000), level, (int) getpid(),
            run ? " run=" : "", run ? run : "", msg);
}
