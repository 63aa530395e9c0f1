/*
 * The egress relay (--egress-relay HOST:PORT).  A session's own network
 * needs an egress peer that joins it as "egress"; docker-stack.yml's
 * egress is a swarm service, and Docker connects a task's container only
 * to the networks its node has already (a session's network is new), so
 * it cannot be that peer.  The runner then keeps a plain container on its
 * engine that can: runner/egress-relay (embedded at build), from --image,
 * named --egress-container, on --network, listening on --egress-url's
 * port and forwarding to HOST:PORT (the egress service on that network,
 * by a name other than "egress", which is the relay's own on the session
 * networks).  The session networks are joined to it as to any
 * --egress-container.
 *
 * Before each join it is checked: made when missing, started when
 * stopped, made anew when it was made with other settings (its label
 * smcp.relay holds their digest), and then joined again to the session
 * networks the old one was on.  Its restart policy keeps it, and so
 * its place on each session network, across restarts of the runner and
 * of the engine.  Locked down as a sandbox is: nobody's user, read-only
 * root, no capability, no new privileges, its processes (one a
 * connection) bounded.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "runner.h"
#include "smcp_perl.h"


#define RUNNER_RELAY_USER      "65534:65534"
#define RUNNER_RELAY_LIMIT     64       /* connections at once a sandbox */
#define RUNNER_RELAY_PIDS      16       /* beside those */
#define RUNNER_RELAY_LOG_SIZE  "1m"


static pthread_mutex_t  runner_relay_lock = PTHREAD_MUTEX_INITIALIZER;

/* set by runner_relay_check(), before any thread starts */
static char             runner_relay_port[8];      /* it listens on */
static char             runner_relay_digest[17];   /* of its settings */


/* the port of --egress-url (http://HOST[:PORT][/...]) into buf */
static int
runner_relay_url_port(const char *url, char *buf, size_t size)
{
    size_t       n;
    const char  *host, *end, *colon;

    host = strstr(url, "://");
    if (host == NULL) {
        return RUNNER_ERR;
    }

    host += 3;
    end = host + strcspn(host, "/?#");
    colon = memchr(host, ':', end - host);

    if (colon == NULL) {
        snprintf(buf, size, "%s", strncmp(url, "https:", 6) == 0 ? "443"
                                                                 : "80");
        return RUNNER_OK;
    }

    n = end - colon - 1;

    if (n == 0 || n > 5 || strspn(colon + 1, "0123456789") < n
        || atoi(colon + 1) < 1 || atoi(colon + 1) > 65535)
    {
        return RUNNER_ERR;
    }

    snprintf(buf, size, "%.*s", (int) n, colon + 1);

    return RUNNER_OK;
}


/* FNV-1a over a string and its NUL */
static uint64_t
runner_relay_hash(uint64_t h, const char *s)
{
    do {
        h = (h ^ (unsigned char) *s) * 1099511628211ULL;
    } while (*s++);

    return h;
}


/* whether --egress-relay can hold with the other flags (main.c, at
 * start); its settings' digest */
int
runner_relay_check(char *err, size_t errlen)
{
    char         pids[16];
    size_t       n;
    uint64_t     h;
    const char  *to, *colon;

    to = runner_config->egress_relay;

    if (to[0] == '\0') {
        return RUNNER_OK;
    }

    if (runner_config->egress_container[0] == '\0'
        || !runner_docker_ref_ok(runner_config->egress_container, err,
                                 errlen))
    {
        snprintf(err, errlen, "--egress-relay: name its container with "
                 "--egress-container (letters, digits, _ . -)");
        return RUNNER_ERR;
    }

    colon = strrchr(to, ':');
    n = colon ? (size_t) (colon - to) : 0;

    if (n == 0 || strspn(to, "abcdefghijklmnopqrstuvwxyz"
                             "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-") != n
        || strlen(colon + 1) == 0 || strlen(colon + 1) > 5
        || strspn(colon + 1, "0123456789") != strlen(colon + 1)
        || atoi(colon + 1) < 1 || atoi(colon + 1) > 65535)
    {
        snprintf(err, errlen, "--egress-relay: \"%.64s\": want HOST:PORT "
                 "(egress-service:8090)", to);
        return RUNNER_ERR;
    }

    /* the relay is "egress" on every session network: that name would
     * lead it to itself */
    if (strncasecmp(to, "egress", 6) == 0
        && (n == 6 || (n == 7 && to[6] == '.')))
    {
        snprintf(err, errlen, "--egress-relay: %.64s names the relay itself "
                 "(it is \"egress\" on the session networks): name the "
                 "egress service otherwise", to);
        return RUNNER_ERR;
    }

    if (runner_relay_url_port(runner_config->egress_url, runner_relay_port,
                              sizeof(runner_relay_port))
        != RUNNER_OK)
    {
        snprintf(err, errlen, "--egress-relay: --egress-url \"%.64s\" "
                 "names no usable port", runner_config->egress_url);
        return RUNNER_ERR;
    }

    /* its processes follow --concurrency */
    snprintf(pids, sizeof(pids), "%d", runner_config->concurrency);

    h = 1469598103934665603ULL;
    h = runner_relay_hash(h, pids);
    h = runner_relay_hash(h, runner_config->image);
    h = runner_relay_hash(h, runner_config->network);
    h = runner_relay_hash(h, to);
    h = runner_relay_hash(h, runner_relay_port);
    h = runner_relay_hash(h, smcp_perl_egress_relay);

    snprintf(runner_relay_digest, sizeof(runner_relay_digest), "%016llx",
             (unsigned long long) h);

    return RUNNER_OK;
}


/* the relay's container spec */
static json_t *
runner_relay_spec(void)
{
    char  limit[16];

    snprintf(limit, sizeof(limit), "%d", RUNNER_RELAY_LIMIT);

    return json_pack(
        "{s:s, s:s, s:[s,s,s,s], s:[s,s,s], s:{s:s, s:s},"
        " s:{s:s, s:b, s:b, s:I, s:[s], s:[s], s:{s:s},"
        "    s:{s:s, s:{s:s, s:s}}}}",
        "Image", runner_config->image,
        "User", RUNNER_RELAY_USER,
        "Entrypoint", "perl", "-e", smcp_perl_egress_relay, "--",
        "Cmd", runner_relay_port, runner_config->egress_relay, limit,
        "Labels", "smcp.managed", "1", "smcp.relay", runner_relay_digest,
        "HostConfig",
            "NetworkMode", runner_config->network,
            "Init", 1,
            "ReadonlyRootfs", 1,
            "PidsLimit", (json_int_t) runner_config->concurrency
                         * RUNNER_RELAY_LIMIT + RUNNER_RELAY_PIDS,
            "CapDrop", "ALL",
            "SecurityOpt", "no-new-privileges",
            "RestartPolicy", "Name", "unless-stopped",
            "LogConfig", "Type", "json-file", "Config",
                "max-size", RUNNER_RELAY_LOG_SIZE, "max-file", "1");
}


/*
 * The relay as it stands: 200 with *ours (made with these settings),
 * *running, and *nets (the session networks it is on: a new reference,
 * or NULL), or 404
 */
static long
runner_relay_inspect(int *ours, int *running, json_t **nets, char *err,
    size_t errlen)
{
    long         st;
    char         path[192];
    json_t      *out;
    const char  *digest;

    *ours = 0;
    *running = 0;
    *nets = NULL;

    snprintf(path, sizeof(path), "/containers/%s/json",
             runner_config->egress_container);

    st = runner_docker_call("GET", path, NULL, RUNNER_DOCKER_QUICK_S, &out,
                            err, errlen);

    if (st == 200) {
        digest = NULL;

        (void) json_unpack(out, "{s?{s?{s?s}}, s?{s?b}}", "Config", "Labels",
                           "smcp.relay", &digest, "State", "Running",
                           running);

        *ours = digest && strcmp(digest, runner_relay_digest) == 0;
        *nets = json_incref(json_object_get(json_object_get(out,
                                                "NetworkSettings"),
                                            "Networks"));
    }

    json_decref(out);

    return st;
}


/* a new relay, started, on the session networks of nets */
static int
runner_relay_make(json_t *nets, char *err, size_t errlen)
{
    long         st;
    char         id[RUNNER_CONTAINER_SIZE];
    json_t      *spec, *v;
    const char  *net;

    spec = runner_relay_spec();
    if (spec == NULL) {
        snprintf(err, errlen, "egress relay: cannot build its spec");
        return RUNNER_ERR;
    }

    st = runner_docker_create(spec, runner_config->egress_container, id,
                              sizeof(id), err, errlen);
    json_decref(spec);

    /* 409: another runner on this engine made it meanwhile */
    if (st == 409) {
        return RUNNER_AGAIN;
    }

    if (st != 201) {
        return RUNNER_ERR;
    }

    st = runner_docker_start(id, err, errlen);

    if (st != 204 && st != 304) {
        return RUNNER_ERR;
    }

    runner_log("info", NULL, "egress relay %s made (%.12s): port %s to %s "
               "on %s", runner_config->egress_container, id,
               runner_relay_port, runner_config->egress_relay,
               runner_config->network);

    /* the runs under way keep their egress */
    json_object_foreach(nets, net, v) {
        if (strcmp(net, runner_config->network) != 0
            && runner_docker_ref_ok(net, err, errlen)
            && runner_docker_net_join(net, runner_config->egress_container,
                                      err, errlen) != RUNNER_OK)
        {
            runner_log("error", NULL, "egress relay: %s", err);
        }
    }

    return RUNNER_OK;
}


/* the relay, running with these settings: RUNNER_OK, or RUNNER_ERR */
int
runner_relay_ensure(char *err, size_t errlen)
{
    int      rc, ours, running, try;
    long     st;
    json_t  *nets;

    pthread_mutex_lock(&runner_relay_lock);

    rc = RUNNER_ERR;

    for (try = 0; try < 2 && rc != RUNNER_OK; try++) {
        st = runner_relay_inspect(&ours, &running, &nets, err, errlen);

        if (st == 200 && ours && running) {
            rc = RUNNER_OK;

        } else if (st == 200 && ours) {
            st = runner_docker_start(runner_config->egress_container, err,
                                     errlen);
            rc = (st == 204 || st == 304) ? RUNNER_OK : RUNNER_ERR;

        } else if (st == 200 || st == 404) {
            if (st == 200) {
                runner_log("info", NULL, "egress relay %s: made with other "
                           "settings, made anew",
                           runner_config->egress_container);

                st = runner_docker_remove(runner_config->egress_container,
                                          err, errlen);
            }

            rc = (st == 204 || st == 404) ? runner_relay_make(nets, err,
                                                              errlen)
                                          : RUNNER_ERR;
        }

        json_decref(nets);

        if (rc == RUNNER_ERR) {
            break;
        }
    }

    pthread_mutex_unlock(&runner_relay_lock);

    return rc == RUNNER_OK ? RUNNER_OK : RUNNER_ERR;
}
