/*
 * Structured log lines on stderr: time, level, run, message; as key=value
 * text, or (--log-format json) one JSON object a line.
 *
 * Messages carry text from outside (an agent's error, Docker's and Redis's
 * answers): quotes, backslashes and every byte that is not printable ASCII
 * are escaped, so no message can end its line or its msg="..." early.
 */

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "runner.h"


/* the tenant of the run this thread works for: JSON lines carry it */
static __thread char  runner_log_tenant_name[SMCP_TENANT_MAX + 1];


void
runner_log_tenant(const char *tenant)
{
    if (tenant && smcp_valid_tenant(tenant, strlen(tenant))) {
        snprintf(runner_log_tenant_name, sizeof(runner_log_tenant_name), "%s",
                 tenant);

    } else {
        runner_log_tenant_name[0] = '\0';
    }
}


/*
 * src[0..len) escaped into dst (NUL-terminated, whole escapes only): quotes,
 * backslashes, \n \r \t, and every other byte that is not printable ASCII
 * as the format hex makes it (\xHH for text lines, \u00HH inside a JSON
 * string)
 */
static size_t
runner_log_quote(char *dst, size_t size, const char *src, size_t len,
    const char *hex)
{
    size_t          i, n, k;
    unsigned char   c;
    char            esc[8];

    if (size == 0) {
        return 0;
    }

    n = 0;

    for (i = 0; i < len; i++) {
        c = (unsigned char) src[i];

        switch (c) {
        case '"':  strcpy(esc, "\\\""); break;
        case '\\': strcpy(esc, "\\\\"); break;
        case '\n': strcpy(esc, "\\n"); break;
        case '\r': strcpy(esc, "\\r"); break;
        case '\t': strcpy(esc, "\\t"); break;
        default:
            if (c < 0x20 || c >= 0x7f) {
                snprintf(esc, sizeof(esc), hex, c);

            } else {
                esc[0] = (char) c;
                esc[1] = '\0';
            }
        }

        k = strlen(esc);

        if (n + k >= size) {
            break;
        }

        memcpy(dst + n, esc, k);
        n += k;
    }

    dst[n] = '\0';

    return n;
}


size_t
runner_log_escape(char *dst, size_t size, const char *src, size_t len)
{
    return runner_log_quote(dst, size, src, len, "\\x%02x");
}


static size_t
runner_log_json_escape(char *dst, size_t size, const char *src, size_t len)
{
    return runner_log_quote(dst, size, src, len, "\\u%04x");
}


void
runner_log(const char *level, const char *run, const char *fmt, ...)
{
    va_list         ap;
    struct timeval  tv;
    struct tm       tm;
    int             n;
    char            ts[32], msg[1024], out[4096], rid[2 * SMCP_ID_LEN + 1];

    gettimeofday(&tv, NULL);
    gmtime_r(&tv.tv_sec, &tm);
    strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", &tm);

    va_start(ap, fmt);
    n = vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);

    if (n < 0) {
        n = 0;

    } else if ((size_t) n >= sizeof(msg)) {
        n = sizeof(msg) - 1;
    }

    if (strcmp(runner_config->log_format, "json") == 0) {
        runner_log_json_escape(out, sizeof(out), msg, n);

        if (run) {
            runner_log_json_escape(rid, sizeof(rid), run, strlen(run));
        }

        /* a tenant is [A-Za-z0-9._@-]: nothing to escape */
        fprintf(stderr, "{\"time\":\"%s.%03dZ\",\"level\":\"%s\","
                "\"pid\":%d%s%s%s%s%s%s,\"msg\":\"%s\"}\n", ts,
                (int) (tv.tv_usec / 1000), level, (int) getpid(),
                run ? ",\"runId\":\"" : "", run ? rid : "", run ? "\"" : "",
                runner_log_tenant_name[0] ? ",\"tenant\":\"" : "",
                runner_log_tenant_name,
                runner_log_tenant_name[0] ? "\"" : "", out);
        return;
    }

    runner_log_escape(out, sizeof(out), msg, n);

    if (run) {
        runner_log_escape(rid, sizeof(rid), run, strlen(run));
    }

    /* one write per line: lines of concurrent runs do not interleave */
    fprintf(stderr, "%s.%03dZ level=%s pid=%d%s%s msg=\"%s\"\n", ts,
            (int) (tv.tv_usec / 1000), level, (int) getpid(),
            run ? " run=" : "", run ? rid : "", out);
}
