/*
 * Metrics (--metrics ADDR): counters every thread adds to (C11 atomics)
 * and a tiny HTTP listener, on its own thread, that serves them in
 * Prometheus' text format at GET /metrics.  Off unless --metrics names an
 * address (by default, and with --metrics off: no listener); the hooks
 * cost an atomic add either way.
 *
 * The listener answers one connection at a time, reads at most
 * RUNNER_METRICS_REQUEST_MAX bytes of a request within
 * RUNNER_METRICS_READ_MS, and answers anything but GET /metrics with 404.
 */

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "runner.h"


#define RUNNER_METRICS_REQUEST_MAX   4096
#define RUNNER_METRICS_READ_MS       2000
#define RUNNER_METRICS_ANSWER_MAX    8192
#define RUNNER_METRICS_OUTCOMES      4      /* completed, failed,
                                               cancelled, other */
#define RUNNER_METRICS_NOTIFY        3      /* delivered, retrying,
                                               failed */


static const char  *runner_metrics_outcomes[RUNNER_METRICS_OUTCOMES] = {
    SMCP_STATUS_COMPLETED, SMCP_STATUS_FAILED, SMCP_STATUS_CANCELLED, "other"
};

/* a completion notification's attempt: what it came to */
static const char  *runner_metrics_notify_results[RUNNER_METRICS_NOTIFY] = {
    "delivered", "retrying", "failed"
};

/* sandbox start latency, upper bounds in ms (le in seconds) */
static const int64_t  runner_metrics_le[] = {
    100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000
};

#define RUNNER_METRICS_NLE                                                    \
    (sizeof(runner_metrics_le) / sizeof(runner_metrics_le[0]))


static struct {
    atomic_llong    runs[RUNNER_METRICS_OUTCOMES];
    atomic_llong    start_le[RUNNER_METRICS_NLE];
    atomic_llong    start_count;
    atomic_llong    start_sum_ms;
    atomic_llong    docker_errors;
    atomic_llong    reattaches;
    atomic_llong    queue_depth;            /* gauges: -1 until known */
    atomic_llong    queue_lag_ms;
    atomic_llong    active;
    atomic_llong    pool_idle;              /* --pool */
    atomic_llong    pool_empty;
    atomic_llong    notify[RUNNER_METRICS_NOTIFY];
} runner_metrics = {
    .queue_depth = -1, .queue_lag_ms = -1
};

static int        runner_metrics_fd = -1;
static pthread_t  runner_metrics_thread;


void
runner_metrics_outcome(const char *status)
{
    int  i;

    for (i = 0; i < RUNNER_METRICS_OUTCOMES - 1; i++) {
        if (strcmp(status, runner_metrics_outcomes[i]) == 0) {
            break;
        }
    }

    atomic_fetch_add(&runner_metrics.runs[i], 1);
}


void
runner_metrics_notify(const char *result)
{
    int  i;

    for (i = 0; i < RUNNER_METRICS_NOTIFY; i++) {
        if (strcmp(result, runner_metrics_notify_results[i]) == 0) {
            atomic_fetch_add(&runner_metrics.notify[i], 1);
            return;
        }
    }
}


void
runner_metrics_started(int64_t ms)
{
    size_t  i;

    if (ms < 0) {
        ms = 0;
    }

    for (i = 0; i < RUNNER_METRICS_NLE; i++) {
        if (ms <= runner_metrics_le[i]) {
            atomic_fetch_add(&runner_metrics.start_le[i], 1);
            break;
        }
    }

    atomic_fetch_add(&runner_metrics.start_sum_ms, ms);
    atomic_fetch_add(&runner_metrics.start_count, 1);
}


void
runner_metrics_docker_error(void)
{
    atomic_fetch_add(&runner_metrics.docker_errors, 1);
}


void
runner_metrics_reattach(void)
{
    atomic_fetch_add(&runner_metrics.reattaches, 1);
}


/* the pool's idle sandboxes now; empty: a new session's run found none */
void
runner_metrics_pool(int idle, int empty)
{
    atomic_store(&runner_metrics.pool_idle, idle);

    if (empty) {
        atomic_fetch_add(&runner_metrics.pool_empty, 1);
    }
}


void
runner_metrics_queue(int64_t depth, int64_t lag_ms)
{
    atomic_store(&runner_metrics.queue_depth, depth);
    atomic_store(&runner_metrics.queue_lag_ms, lag_ms);
}


void
runner_metrics_active(int n)
{
    atomic_store(&runner_metrics.active, n);
}


int
runner_metrics_enabled(void)
{
    return runner_metrics_fd >= 0;
}


/* appends to buf (size) at *n; a line that does not fit is dropped */
static void
runner_metrics_printf(char *buf, size_t size, size_t *n, const char *fmt, ...)
{
    int      k;
    va_list  ap;

    va_start(ap, fmt);
    k = vsnprintf(buf + *n, size - *n, fmt, ap);
    va_end(ap);

    if (k > 0 && (size_t) k < size - *n) {
        *n += k;

    } else {
        buf[*n] = '\0';
    }
}


/* a metric of one sample without labels: its HELP, TYPE and value */
static void
runner_metrics_one(char *buf, size_t size, size_t *n, const char *name,
    const char *type, const char *help, long long v)
{
    runner_metrics_printf(buf, size, n, "# HELP %s %s\n# TYPE %s %s\n"
                          "%s %lld\n", name, help, name, type, name, v);
}


/* a counter by one label: its HELP, TYPE and a sample per value */
static void
runner_metrics_by(char *buf, size_t size, size_t *n, const char *name,
    const char *help, const char *label, const char **values,
    atomic_llong *counts, size_t nvalues)
{
    size_t  i;

    runner_metrics_printf(buf, size, n, "# HELP %s %s\n# TYPE %s counter\n",
                          name, help, name);

    for (i = 0; i < nvalues; i++) {
        runner_metrics_printf(buf, size, n, "%s{%s=\"%s\"} %lld\n", name,
                              label, values[i], atomic_load(&counts[i]));
    }
}


static size_t
runner_metrics_text(char *buf, size_t size)
{
    size_t     n, i;
    long long  sum, v;

    n = 0;

#define P(...)  runner_metrics_printf(buf, size, &n, __VA_ARGS__)

    runner_metrics_by(buf, size, &n, "smcp_runner_runs_total", "Runs ended "
                      "by this runner, by outcome", "outcome",
                      runner_metrics_outcomes, runner_metrics.runs,
                      RUNNER_METRICS_OUTCOMES);

    runner_metrics_one(buf, size, &n, "smcp_runner_runs_active", "gauge",
                       "Runs this runner follows now",
                       atomic_load(&runner_metrics.active));

    runner_metrics_one(buf, size, &n, "smcp_runner_draining", "gauge",
                       "1 while draining (SIGUSR1): no new run is taken",
                       atomic_load(&runner_drain));

    runner_metrics_one(buf, size, &n, "smcp_runner_queue_depth", "gauge",
                       "Queued runs no runner took yet",
                       atomic_load(&runner_metrics.queue_depth));

    v = atomic_load(&runner_metrics.queue_lag_ms);
    P("# HELP smcp_runner_queue_lag_seconds Age of the oldest run no runner "
      "took yet\n"
      "# TYPE smcp_runner_queue_lag_seconds gauge\n"
      "smcp_runner_queue_lag_seconds %lld.%03lld\n",
      v < 0 ? -1 : v / 1000, v < 0 ? 0 : v % 1000);

    P("# HELP smcp_runner_sandbox_start_seconds Claim to sandbox running\n"
      "# TYPE smcp_runner_sandbox_start_seconds histogram\n");

    for (i = 0, sum = 0; i < RUNNER_METRICS_NLE; i++) {
        sum += atomic_load(&runner_metrics.start_le[i]);
        P("smcp_runner_sandbox_start_seconds_bucket{le=\"%lld.%03lld\"} %lld\n",
          (long long) runner_metrics_le[i] / 1000,
          (long long) runner_metrics_le[i] % 1000, sum);
    }

    v = atomic_load(&runner_metrics.start_sum_ms);
    P("smcp_runner_sandbox_start_seconds_bucket{le=\"+Inf\"} %lld\n"
      "smcp_runner_sandbox_start_seconds_sum %lld.%03lld\n"
      "smcp_runner_sandbox_start_seconds_count %lld\n",
      atomic_load(&runner_metrics.start_count), v / 1000, v % 1000,
      atomic_load(&runner_metrics.start_count));

    runner_metrics_one(buf, size, &n, "smcp_runner_docker_errors_total",
                       "counter", "Docker API calls that failed (no answer, "
                       "5xx)", atomic_load(&runner_metrics.docker_errors));

    runner_metrics_one(buf, size, &n, "smcp_runner_reattaches_total",
                       "counter", "Runs followed again in their running "
                       "sandbox", atomic_load(&runner_metrics.reattaches));

    runner_metrics_one(buf, size, &n, "smcp_runner_pool_idle", "gauge",
                       "Idle sandboxes of the warm pool",
                       atomic_load(&runner_metrics.pool_idle));

    runner_metrics_one(buf, size, &n, "smcp_runner_pool_empty_total",
                       "counter", "Runs of a new session that found the "
                       "pool empty", atomic_load(&runner_metrics.pool_empty));

    runner_metrics_by(buf, size, &n, "smcp_runner_notify_attempts_total",
                      "Completion notifications' attempts by this runner, "
                      "by result", "result", runner_metrics_notify_results,
                      runner_metrics.notify, RUNNER_METRICS_NOTIFY);

#undef P

    return n;
}


/* one connection: the request read (bounded), the answer written */
static void
runner_metrics_serve(int fd)
{
    int            k;
    size_t         n, len;
    char           req[RUNNER_METRICS_REQUEST_MAX + 1];
    char           body[RUNNER_METRICS_ANSWER_MAX], head[256];
    struct pollfd  p;

    n = 0;

    while (n < RUNNER_METRICS_REQUEST_MAX) {
        p.fd = fd;
        p.events = POLLIN;

        if (poll(&p, 1, RUNNER_METRICS_READ_MS) <= 0) {
            return;
        }

        k = read(fd, req + n, RUNNER_METRICS_REQUEST_MAX - n);
        if (k <= 0) {
            return;
        }

        n += k;
        req[n] = '\0';

        if (strstr(req, "\r\n\r\n") || strstr(req, "\n\n")) {
            break;
        }
    }

    if (strncmp(req, "GET /metrics ", 13) == 0
        || strncmp(req, "GET /metrics?", 13) == 0)
    {
        len = runner_metrics_text(body, sizeof(body));
        snprintf(head, sizeof(head), "HTTP/1.1 200 OK\r\n"
                 "Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
                 "Content-Length: %zu\r\nConnection: close\r\n\r\n", len);

    } else {
        len = snprintf(body, sizeof(body), "not found\n");
        snprintf(head, sizeof(head), "HTTP/1.1 404 Not Found\r\n"
                 "Content-Type: text/plain\r\n"
                 "Content-Length: %zu\r\nConnection: close\r\n\r\n", len);
    }

    if (write(fd, head, strlen(head)) > 0) {
        (void) write(fd, body, len);
    }
}


static void *
runner_metrics_loop(void *arg)
{
    int            c;
    struct pollfd  p;

    while (!atomic_load(&runner_stop)) {
        p.fd = runner_metrics_fd;
        p.events = POLLIN;

        if (poll(&p, 1, RUNNER_TICK_MS) <= 0) {
            continue;
        }

        c = accept(runner_metrics_fd, NULL, NULL);
        if (c < 0) {
            continue;
        }

        runner_metrics_serve(c);
        close(c);
    }

    return NULL;
}


/* --metrics ADDR: "ip:port", "[v6]:port" or ":port" (all addresses); an
 * address, never a name to resolve; "off" (or nothing): no listener */
int
runner_metrics_start(const char *addr, char *err, size_t errlen)
{
    int               fd, on, rc;
    char              host[256], *colon;
    const char       *port;
    struct addrinfo   hints, *ai;

    if (addr[0] == '\0' || strcmp(addr, "off") == 0) {
        return RUNNER_OK;
    }

    if (strlen(addr) >= sizeof(host)) {
        snprintf(err, errlen, "--metrics: address too long");
        return RUNNER_ERR;
    }

    strcpy(host, addr);
    colon = strrchr(host, ':');

    if (colon == NULL) {
        snprintf(err, errlen, "--metrics %s: want IP:PORT", addr);
        return RUNNER_ERR;
    }

    *colon = '\0';
    port = colon + 1;

    if (strspn(port, "0123456789") != strlen(port) || strlen(port) > 5
        || atoi(port) < 1 || atoi(port) > 65535)
    {
        snprintf(err, errlen, "--metrics %s: want a port 1-65535", addr);
        return RUNNER_ERR;
    }

    if (host[0] == '[' && colon > host + 1 && colon[-1] == ']') {
        colon[-1] = '\0';
        memmove(host, host + 1, strlen(host));
    }

    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV | AI_NUMERICHOST;

    rc = getaddrinfo(host[0] ? host : NULL, port, &hints, &ai);
    if (rc != 0) {
        snprintf(err, errlen, "--metrics %s: %s", addr, gai_strerror(rc));
        return RUNNER_ERR;
    }

    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, 0);
    on = 1;

    if (fd < 0
        || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on)) != 0
        || bind(fd, ai->ai_addr, ai->ai_addrlen) != 0
        || listen(fd, 16) != 0)
    {
        snprintf(err, errlen, "--metrics %s: %s", addr, strerror(errno));
        freeaddrinfo(ai);
        if (fd >= 0) {
            close(fd);
        }
        return RUNNER_ERR;
    }

    freeaddrinfo(ai);

    runner_metrics_fd = fd;

    if (pthread_create(&runner_metrics_thread, NULL, runner_metrics_loop,
                       NULL)
        != 0)
    {
        snprintf(err, errlen, "--metrics: cannot start a thread");
        close(fd);
        runner_metrics_fd = -1;
        return RUNNER_ERR;
    }

    return RUNNER_OK;
}


void
runner_metrics_stop(void)
{
    if (runner_metrics_fd >= 0) {
        pthread_join(runner_metrics_thread, NULL);
        close(runner_metrics_fd);
        runner_metrics_fd = -1;
    }
}
