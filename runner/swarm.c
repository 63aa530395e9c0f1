/*
 * The `swarm` backend (runner.h, runner_backend_t): a run's sandbox is a
 * Docker Swarm service of one replica, made and ended through the Engine
 * API of a manager (docker.c's calls over the unix socket):
 *
 *   create   POST /services/create: the container spec run.c builds,
 *            turned into a service spec (restart condition none, limits
 *            and reservations, placement on this runner's node and the
 *            --swarm-constraints, the session's overlay network)
 *   follow   GET /services/{id}/logs (timestamps, follow); a service's
 *            log does not end when its task does: the follow ends itself
 *            once the task has ended and its last lines came in
 *   wait     GET /tasks?filters={"service":[id]}: the task's state and
 *            exit code
 *   kill     the task's container, killed on this node (the service
 *            stays: its task's exit code is read by wait)
 *   remove   DELETE /services/{id}
 *
 * The session's network is an internal, attachable overlay network the
 * egress peer joins as "egress".  Docs: docs/contracts.md, "Backends".
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runner.h"


#define RUNNER_SWARM_ID_LEN       25     /* a swarm object id */
#define RUNNER_SWARM_POLL_MS      500    /* a task's state, while waiting */
#define RUNNER_SWARM_CHECK_MS     1000   /* ... while following its log */
#define RUNNER_SWARM_TAIL_MS      2000   /* its log after its end */
#define RUNNER_SWARM_RESERVE      4      /* reservations: 1/4 of limits */
#define RUNNER_SWARM_STOP_GRACE   2000000000LL  /* ns: SIGTERM to KILL */
#define RUNNER_SWARM_CONSTRAINTS  16
#define RUNNER_SWARM_NET_TRIES    5      /* a session network made, joined */
#define RUNNER_SWARM_NET_PAUSE_MS 500    /* ... between tries */


/* a task's state, as far as the runner cares */
#define RUNNER_TASK_NONE     0      /* no task (yet) */
#define RUNNER_TASK_LIVE     1      /* scheduled, starting or running */
#define RUNNER_TASK_ENDED    2


static long runner_swarm_remove(const char *id, char *err, size_t errlen);


static char  runner_swarm_node[64];        /* this runner's node id */


/* a swarm id (service, node): 25 lowercase letters and digits */
static int
runner_swarm_valid_id(const char *id)
{
    size_t  n;

    n = strspn(id, "abcdefghijklmnopqrstuvwxyz0123456789");

    return n == RUNNER_SWARM_ID_LEN && id[n] == '\0';
}


/* the engine is a manager of an active swarm: this node's id kept */
int
runner_swarm_init(char *err, size_t errlen)
{
    long         st;
    json_t      *out;
    const char  *state, *node;
    int          manager;

    st = runner_docker_call("GET", "/info", NULL, RUNNER_DOCKER_QUICK_S,
                            &out, err, errlen);

    state = NULL;
    node = NULL;
    manager = 0;

    if (st == 200) {
        (void) json_unpack(out, "{s:{s?s, s?s, s?b}}", "Swarm",
                           "LocalNodeState", &state, "NodeID", &node,
                           "ControlAvailable", &manager);
    }

    if (st != 200 || state == NULL || strcmp(state, "active") != 0
        || !manager || node == NULL || strlen(node) >= sizeof(runner_swarm_node)
        || !runner_swarm_valid_id(node))
    {
        if (st == 200) {
            snprintf(err, errlen, "backend swarm: the engine is no manager "
                     "of an active swarm (state %.32s)", state ? state : "?");
        }

        json_decref(out);
        return (st == RUNNER_DOCKER_DOWN || st == RUNNER_DOCKER_TIMEOUT
                || st >= 500) ? RUNNER_RETRY : RUNNER_ERR;
    }

    strcpy(runner_swarm_node, node);
    json_decref(out);

    runner_log("info", NULL, "backend swarm: node %s", runner_swarm_node);

    return RUNNER_OK;
}


/* the container's mounts: its volume binds and its tmpfs */
static json_t *
runner_swarm_mounts(json_t *hc)
{
    size_t       i;
    json_t      *mounts, *v;
    const char  *bind, *colon, *path;
    char         src[256];

    mounts = json_array();

    json_array_foreach(json_object_get(hc, "Binds"), i, v) {
        bind = json_string_value(v);
        colon = bind ? strchr(bind, ':') : NULL;

        if (colon == NULL || (size_t) (colon - bind) >= sizeof(src)) {
            continue;
        }

        snprintf(src, sizeof(src), "%.*s", (int) (colon - bind), bind);
        json_array_append_new(mounts, json_pack("{s:s, s:s, s:s}",
                                                "Type", "volume",
                                                "Source", src,
                                                "Target", colon + 1));
    }

    /*
     * API 1.41's tmpfs mounts are noexec and root's (no mode, no owner
     * reach the mount): the sandbox's scratch directories are anonymous
     * volumes instead, filled from the image (its owners and modes), and
     * removed with the task's container
     */
    json_object_foreach(json_object_get(hc, "Tmpfs"), path, v) {
        json_array_append_new(mounts, json_pack("{s:s, s:s}", "Type",
                                                "volume", "Target", path));
    }

    return mounts;
}


/* this runner's node, and the operator's constraints */
static json_t *
runner_swarm_constraints(void)
{
    int          n;
    char         buf[sizeof(runner_config->constraints)], *p, *next;
    json_t      *list;

    list = json_array();

    /* the session's volume lives on the node of the runner that made it */
    snprintf(buf, sizeof(buf), "node.id==%s", runner_swarm_node);
    json_array_append_new(list, json_string(buf));

    snprintf(buf, sizeof(buf), "%s", runner_config->constraints);

    for (p = buf, n = 0; p && *p && n < RUNNER_SWARM_CONSTRAINTS; p = next) {
        next = strchr(p, ';');

        if (next) {
            *next++ = '\0';
        }

        if (*p) {
            json_array_append_new(list, json_string(p));
            n++;
        }
    }

    return list;
}


/* the service spec of a container spec (run.c's runner_run_spec) */
static json_t *
runner_swarm_spec(json_t *spec, const char *name)
{
    json_t      *hc, *labels, *log;
    json_int_t   mem, cpus, pids;

    hc = json_object_get(spec, "HostConfig");
    labels = json_object_get(spec, "Labels");
    log = json_object_get(hc, "LogConfig");

    mem = json_integer_value(json_object_get(hc, "Memory"));
    cpus = json_integer_value(json_object_get(hc, "NanoCpus"));
    pids = json_integer_value(json_object_get(hc, "PidsLimit"));

    return json_pack(
        "{s:s, s:O, s:{s:{s:I}},"
        " s:{s:{s:O, s:O, s:O, s:O, s:O, s:O, s:O, s:O, s:O, s:o,"
        "       s:{s:O, s:O}, s:I},"
        "    s:{s:{s:I, s:I, s:I}, s:{s:I, s:I}},"
        "    s:{s:s, s:i}, s:{s:o}, s:[{s:O}],"
        "    s:{s:O, s:O}}}",
        "Name", name,
        "Labels", labels,
        "Mode", "Replicated", "Replicas", (json_int_t) 1,
        "TaskTemplate",
            "ContainerSpec",
                "Image", json_object_get(spec, "Image"),
                "Labels", labels,
                "Env", json_object_get(spec, "Env"),
                "User", json_object_get(spec, "User"),
                "Dir", json_object_get(spec, "WorkingDir"),
                "ReadOnly", json_object_get(hc, "ReadonlyRootfs"),
                "Init", json_object_get(hc, "Init"),
                "CapabilityDrop", json_object_get(hc, "CapDrop"),
                "Command", json_object_get(spec, "Cmd") ?: json_null(),
                "Mounts", runner_swarm_mounts(hc),
                "DNSConfig",
                    "Nameservers", json_object_get(hc, "Dns"),
                    "Options", json_object_get(hc, "DnsOptions"),
                "StopGracePeriod", (json_int_t) RUNNER_SWARM_STOP_GRACE,
            "Resources",
                "Limits",
                    "NanoCPUs", cpus, "MemoryBytes", mem, "Pids", pids,
                "Reservations",
                    "NanoCPUs", cpus / RUNNER_SWARM_RESERVE,
                    "MemoryBytes", mem / RUNNER_SWARM_RESERVE,
            "RestartPolicy", "Condition", "none", "MaxAttempts", 0,
            "Placement", "Constraints", runner_swarm_constraints(),
            "Networks", "Target", json_object_get(hc, "NetworkMode"),
            "LogDriver",
                "Name", json_object_get(log, "Type"),
                "Options", json_object_get(log, "Config"));
}


/* 201 with id set (the service's), 409 (the name is taken) */
static long
runner_swarm_create(json_t *spec, const char *name, char *id, size_t idlen,
    char *err, size_t errlen)
{
    long         st;
    char         sname[RUNNER_DOCKER_REF_MAX + 1], *p;
    json_t      *svc, *out;
    const char  *sid;

    if (!runner_docker_ref_ok(name, err, errlen)) {
        return RUNNER_DOCKER_INVALID;
    }

    /* a service's name is a DNS label: no '_', no '.' */
    snprintf(sname, sizeof(sname), "%s", name);

    for (p = sname; *p; p++) {
        if (*p == '_' || *p == '.') {
            *p = '-';
        }
    }

    svc = runner_swarm_spec(spec, sname);
    if (svc == NULL) {
        snprintf(err, errlen, "swarm: cannot build the service spec");
        return RUNNER_DOCKER_INVALID;
    }

    st = runner_docker_call("POST", "/services/create", svc,
                            RUNNER_DOCKER_SLOW_S, &out, err, errlen);

    sid = json_string_value(json_object_get(out, "ID"));

    if (st == 201 && (sid == NULL || !runner_swarm_valid_id(sid)
                      || strlen(sid) >= idlen))
    {
        snprintf(err, errlen, "swarm: the answer holds no usable ID");
        st = RUNNER_DOCKER_INVALID;

    } else if (st == 201) {
        strcpy(id, sid);
    }

    json_decref(out);

    return st;
}


/* a service runs from its creation on */
static long
runner_swarm_start(const char *id, char *err, size_t errlen)
{
    return runner_docker_ref_ok(id, err, errlen) ? 204
                                                 : RUNNER_DOCKER_INVALID;
}


/* 200 (the service exists), 404 */
static long
runner_swarm_service(const char *id, char *err, size_t errlen)
{
    char  path[192];

    snprintf(path, sizeof(path), "/services/%s", id);

    return runner_docker_call("GET", path, NULL, RUNNER_DOCKER_QUICK_S, NULL,
                              err, errlen);
}


/*
 * The service's task: RUNNER_TASK_*, its exit code and container id (""
 * when it has none yet); 404 when there is no such service
 */
static long
runner_swarm_task(const char *id, int *state, int *exit_code, char *cid,
    size_t cidlen, char *err, size_t errlen)
{
    long         st;
    size_t       i;
    json_t      *list, *t, *last;
    const char  *s, *c, *created, *last_created, *why;

    *state = RUNNER_TASK_NONE;
    *exit_code = -1;
    cid[0] = '\0';

    if (!runner_docker_ref_ok(id, err, errlen)) {
        return RUNNER_DOCKER_INVALID;
    }

    st = runner_swarm_service(id, err, errlen);
    if (st != 200) {
        return st;
    }

    st = runner_docker_filtered("/tasks?", "service", id, &list, err,
                                errlen);

    if (st != 200) {
        return st;
    }

    /* one replica, never restarted: its newest task */
    last = NULL;
    last_created = "";

    json_array_foreach(list, i, t) {
        created = json_string_value(json_object_get(t, "CreatedAt")) ?: "";

        if (last == NULL || strcmp(created, last_created) > 0) {
            last = t;
            last_created = created;
        }
    }

    if (last) {
        s = NULL;
        c = NULL;
        why = NULL;

        (void) json_unpack(last, "{s?{s?s, s?s, s?{s?s, s?i}}}", "Status",
                           "State", &s, "Err", &why, "ContainerStatus",
                           "ContainerID", &c, "ExitCode", exit_code);

        if (s && (strcmp(s, "complete") == 0 || strcmp(s, "failed") == 0
                  || strcmp(s, "shutdown") == 0 || strcmp(s, "rejected") == 0
                  || strcmp(s, "orphaned") == 0 || strcmp(s, "remove") == 0))
        {
            *state = RUNNER_TASK_ENDED;

            if (c == NULL || *c == '\0') {
                /* it never ran (no image, no node): docker run's 125 */
                *exit_code = 125;
                snprintf(err, errlen, "swarm: the task %s: %.160s", s,
                         why ? why : "");
            }

        } else {
            *state = RUNNER_TASK_LIVE;
        }

        if (c && runner_docker_valid_id(c) && strlen(c) < cidlen) {
            strcpy(cid, c);
        }
    }

    json_decref(list);

    return 200;
}


/* the task's container killed: 204, 409 (it ended), 404 */
static long
runner_swarm_kill(const char *id, char *err, size_t errlen)
{
    int   state, code;
    long  st;
    char  cid[RUNNER_CONTAINER_SIZE];

    st = runner_swarm_task(id, &state, &code, cid, sizeof(cid), err, errlen);

    if (st != 200) {
        return st;
    }

    if (state == RUNNER_TASK_ENDED) {
        return 409;
    }

    if (cid[0] == '\0') {
        /* not started yet: the service goes, and its task with it */
        return runner_swarm_remove(id, err, errlen) == 204 ? 204 : 409;
    }

    return runner_docker_kill(cid, err, errlen);
}


/* 200 with *exit_code when the task ended, RUNNER_DOCKER_TIMEOUT, 404 */
static long
runner_swarm_wait(const char *id, long timeout, int *exit_code, char *err,
    size_t errlen)
{
    int      state;
    long     st;
    char     cid[RUNNER_CONTAINER_SIZE];
    int64_t  end;

    end = smcp_now_ms() + timeout * 1000;

    for ( ;; ) {
        st = runner_swarm_task(id, &state, exit_code, cid, sizeof(cid), err,
                               errlen);

        if (st != 200 || state == RUNNER_TASK_ENDED) {
            return st;
        }

        if (smcp_now_ms() >= end) {
            snprintf(err, errlen, "swarm: the service %.32s still runs", id);
            return RUNNER_DOCKER_TIMEOUT;
        }

        usleep(RUNNER_SWARM_POLL_MS * 1000);
    }
}


/* 204 (removed: its task stops), 404 */
static long
runner_swarm_remove(const char *id, char *err, size_t errlen)
{
    long  st;
    char  path[192];

    if (!runner_docker_ref_ok(id, err, errlen)) {
        return RUNNER_DOCKER_INVALID;
    }

    snprintf(path, sizeof(path), "/services/%s", id);

    st = runner_docker_call("DELETE", path, NULL, RUNNER_DOCKER_SLOW_S, NULL,
                            err, errlen);

    return st == 200 ? 204 : st;
}


/* 200 with *running set, 404 */
static long
runner_swarm_running(const char *id, int *running, char *err, size_t errlen)
{
    int   state, code;
    long  st;
    char  cid[RUNNER_CONTAINER_SIZE];

    st = runner_swarm_task(id, &state, &code, cid, sizeof(cid), err, errlen);

    *running = (st == 200 && state != RUNNER_TASK_ENDED);

    return st;
}


/* 200 with *list: the services with this label, as [{Id, Labels}] */
static long
runner_swarm_list(const char *label, json_t **list, char *err,
    size_t errlen)
{
    long         st;
    size_t       i;
    json_t      *out, *svc;
    json_t      *labels;
    const char  *id;

    *list = NULL;

    st = runner_docker_filtered("/services?", "label", label, &out, err,
                                errlen);

    if (st == 200) {
        *list = json_array();

        json_array_foreach(out, i, svc) {
            id = json_string_value(json_object_get(svc, "ID"));
            labels = json_object_get(json_object_get(svc, "Spec"), "Labels");

            if (id) {
                json_array_append_new(*list, json_pack("{s:s, s:o}",
                    "Id", id, "Labels",
                    labels ? json_incref(labels) : json_object()));
            }
        }
    }

    json_decref(out);

    return st;
}


/* following a service's log, which goes on after its task ended */
typedef struct {
    const char      *id;
    runner_tick_pt   on_tick;
    void            *data;
    int64_t          next_check;
    int64_t          ended_at;          /* ms: its task was seen ended */
    int              done;              /* the follow ended it: the end */
} runner_swarm_follow_t;


static int
runner_swarm_tick(void *ud)
{
    int                     state, code;
    char                    cid[RUNNER_CONTAINER_SIZE], err[RUNNER_ERRLEN];
    int64_t                 now;
    runner_swarm_follow_t  *f = ud;

    if (f->on_tick && f->on_tick(f->data) != RUNNER_OK) {
        return RUNNER_ERR;
    }

    now = smcp_now_ms();

    if (f->ended_at) {
        if (now - f->ended_at >= RUNNER_SWARM_TAIL_MS) {
            f->done = 1;
            return RUNNER_ERR;
        }

        return RUNNER_OK;
    }

    if (now < f->next_check) {
        return RUNNER_OK;
    }

    f->next_check = now + RUNNER_SWARM_CHECK_MS;

    if (runner_swarm_task(f->id, &state, &code, cid, sizeof(cid), err,
                          sizeof(err)) == 200
        && state == RUNNER_TASK_ENDED)
    {
        f->ended_at = now;
    }

    return RUNNER_OK;
}


/* the service's log from `since` on; 200 once it was read to the end
 * of its task (as runner_docker_follow) */
static long
runner_swarm_follow(const char *id, const char *since, int follow,
    runner_line_pt on_line, runner_tick_pt on_tick, void *data, char *err,
    size_t errlen)
{
    long                   st;
    char                   path[512];
    runner_swarm_follow_t  f;

    if (!runner_docker_ref_ok(id, err, errlen)) {
        return RUNNER_DOCKER_INVALID;
    }

    snprintf(path, sizeof(path), "/services/%s/logs?follow=%d&stdout=1"
             "&stderr=1&timestamps=1%s%s", id, follow ? 1 : 0,
             since ? "&since=" : "", since ? since : "");

    memset(&f, 0, sizeof(f));
    f.id = id;
    f.on_tick = on_tick;
    f.data = data;

    st = runner_docker_stream(path, on_line, data, runner_swarm_tick, &f,
                              err, errlen);

    return (st == RUNNER_DOCKER_CUT && f.done) ? 200 : st;
}


/*
 * The session's network: internal (no way out but the egress peer),
 * attachable (the peer may be a plain container), overlay (its runs may
 * land on any node); the peer joins it as "egress".  Idempotent.
 */
static int
runner_swarm_net(const char *name, const char *session, const char *peer,
    char *err, size_t errlen)
{
    int   try;
    long  st;

    if (!runner_docker_ref_ok(name, err, errlen)) {
        return RUNNER_ERR;
    }

    /*
     * An overlay network the session's previous run removed may linger a
     * moment: create answers 409 and the join then finds it gone.  Made
     * again after a pause, a few times.
     */
    for (try = 0; try < RUNNER_SWARM_NET_TRIES; try++) {
        if (try) {
            usleep(RUNNER_SWARM_NET_PAUSE_MS * 1000);
        }

        st = runner_docker_call("POST", "/networks/create",
                                json_pack("{s:s, s:s, s:b, s:b, s:b,"
                                          " s:{s:s, s:s}}",
                                          "Name", name, "Driver", "overlay",
                                          "Internal", 1, "Attachable", 1,
                                          "CheckDuplicate", 1,
                                          "Labels", "smcp.session", session,
                                          "smcp.managed", "1"),
                                RUNNER_DOCKER_QUICK_S, NULL, err, errlen);

        /* 409: it exists (another run of the session made it) */
        if (st != 201 && st != 409) {
            return RUNNER_ERR;
        }

        if (peer[0] == '\0'
            || runner_docker_net_join(name, peer, err, errlen) == RUNNER_OK)
        {
            return RUNNER_OK;
        }
    }

    return RUNNER_ERR;
}


const runner_backend_t  runner_backend_swarm = {
    "swarm",
    runner_swarm_create,
    runner_swarm_start,
    runner_swarm_kill,
    runner_swarm_wait,
    runner_swarm_remove,
    runner_swarm_running,
    runner_swarm_list,
    runner_swarm_follow,
    runner_swarm_valid_id,
    runner_swarm_net,
    runner_docker_session_net_drop
};
