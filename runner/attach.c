/*
 * A container's standard input, written once: the Engine API's attach
 * (POST /containers/{id}/attach?stream=1&stdin=1), whose connection
 * dockerd hijacks and copies into the container's stdin.  A pooled or
 * held sandbox gets its run this way (pool.c): it is made with OpenStdin
 * and StdinOnce, its entry script reads its stdin to the end, and dockerd
 * closes that stdin once the side attached closes its own.  Nothing is
 * put in its workspace (a session's, where an agent wrote before), and
 * the sandbox waits in a read: no poll.
 *
 * One connection a call, on the socket the rest of the API uses
 * (docker.c), spoken here: libcurl has no use for a connection that stops
 * being HTTP.  Each read and write waits RUNNER_DOCKER_QUICK_S at most
 * (the run's environment is a few KiB: a pipe's buffer takes it).
 */

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "runner.h"


#define RUNNER_ATTACH_HEAD  4096    /* dockerd's answer, before the stream */


/* what a send or recv that moved nothing (n, its errno e) means:
 * RUNNER_DOCKER_TIMEOUT (the socket's time passed) or _DOWN */
static long
runner_attach_failed(ssize_t n, int e, const char *what, char *err,
    size_t errlen)
{
    int  late;

    late = (n < 0 && (e == EAGAIN || e == EWOULDBLOCK));

    snprintf(err, errlen, "attach: %s: %s", what, late ? "timed out"
             : n < 0 ? strerror(e) : "dockerd closed the stream");

    return late ? RUNNER_DOCKER_TIMEOUT : RUNNER_DOCKER_DOWN;
}


/* 1: all of len bytes sent; else RUNNER_DOCKER_TIMEOUT or _DOWN */
static long
runner_attach_send(int fd, const char *p, size_t len, char *err,
    size_t errlen)
{
    ssize_t  n;

    while (len > 0) {
        n = send(fd, p, len, MSG_NOSIGNAL);

        if (n < 0 && errno == EINTR) {
            continue;
        }

        if (n <= 0) {
            return runner_attach_failed(n, errno, "writing", err, errlen);
        }

        p += n;
        len -= (size_t) n;
    }

    return 1;
}


/*
 * The status of dockerd's answer (its head read up to the blank line,
 * nothing after it), or RUNNER_DOCKER_TIMEOUT, _DOWN, _INVALID
 */
static long
runner_attach_answer(int fd, char *err, size_t errlen)
{
    size_t   len;
    ssize_t  n;
    long     st;
    char     head[RUNNER_ATTACH_HEAD + 1];

    len = 0;

    /* a byte at a time: what follows the head is the container's */
    while (len < RUNNER_ATTACH_HEAD) {
        n = recv(fd, head + len, 1, 0);

        if (n < 0 && errno == EINTR) {
            continue;
        }

        if (n <= 0) {
            return runner_attach_failed(n, errno, "its answer", err,
                                        errlen);
        }

        len++;
        head[len] = '\0';

        if (len >= 4 && memcmp(head + len - 4, "\r\n\r\n", 4) == 0) {
            break;
        }
    }

    if (len >= RUNNER_ATTACH_HEAD
        || sscanf(head, "HTTP/1.%*1[01] %3ld ", &st) != 1)
    {
        snprintf(err, errlen, "attach: a malformed answer");
        return RUNNER_DOCKER_INVALID;
    }

    return st;
}


/*
 * 101: data is in the stdin of container id (a running one made with
 * OpenStdin), which is then closed; else the status dockerd answered
 * (404: no such container), or RUNNER_DOCKER_DOWN, _TIMEOUT, _INVALID,
 * err saying it.  A stream cut short ends the container's
 * stdin all the same: whatever reads it must know where the data ends.
 */
long
runner_attach_stdin(const char *id, const char *data, size_t len, char *err,
    size_t errlen)
{
    int                 fd, rc;
    long                st;
    char                req[512];
    struct timeval      tv;
    struct sockaddr_un  sa;

    if (!runner_docker_ref_ok(id, err, errlen)) {
        return RUNNER_DOCKER_INVALID;
    }

    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;

    if (strlen(runner_config->docker_socket) >= sizeof(sa.sun_path)) {
        snprintf(err, errlen, "attach: the Docker socket's path is too long");
        return RUNNER_DOCKER_INVALID;
    }

    memcpy(sa.sun_path, runner_config->docker_socket,
           strlen(runner_config->docker_socket));

    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(err, errlen, "attach: socket: %s", strerror(errno));
        return RUNNER_DOCKER_DOWN;
    }

    tv.tv_sec = RUNNER_DOCKER_QUICK_S;
    tv.tv_usec = 0;
    (void) setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    (void) setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));

    do {
        rc = connect(fd, (struct sockaddr *) &sa, sizeof(sa));
    } while (rc != 0 && errno == EINTR);

    if (rc != 0) {
        snprintf(err, errlen, "attach: cannot reach dockerd at %s: %s",
                 runner_config->docker_socket, strerror(errno));
        close(fd);
        return RUNNER_DOCKER_DOWN;
    }

    /* (id: RUNNER_DOCKER_REF_MAX bytes at most, runner_docker_ref_ok) */
    rc = snprintf(req, sizeof(req),
                  "POST " RUNNER_DOCKER_PATH "/containers/%s/attach"
                  "?stream=1&stdin=1 HTTP/1.1\r\nHost: localhost\r\n"
                  "Connection: Upgrade\r\nUpgrade: tcp\r\n"
                  "Content-Length: 0\r\n\r\n", id);

    if (rc > 0 && (size_t) rc < sizeof(req)) {
        st = runner_attach_send(fd, req, (size_t) rc, err, errlen);

    } else {
        snprintf(err, errlen, "attach: the request does not fit");
        st = RUNNER_DOCKER_INVALID;
    }

    if (st == 1) {
        st = runner_attach_answer(fd, err, errlen);

        /* 101 Switching Protocols; 200 from a dockerd that hijacks
         * without saying so */
        if (st == 101 || st == 200) {
            st = runner_attach_send(fd, data, len, err, errlen);
            st = (st == 1) ? 101 : st;

        } else if (st > 0) {
            snprintf(err, errlen, "attach: dockerd answered HTTP %ld", st);
        }
    }

    /* our side closed: dockerd copies what it has, then closes stdin */
    (void) shutdown(fd, SHUT_WR);
    close(fd);

    return st;
}
