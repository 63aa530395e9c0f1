/*
 * The Docker Engine API over its unix socket, with libcurl.  Each call uses
 * its own easy handle: calls come from several run threads.
 *
 * Every call returns what happened: the HTTP status of the answer, or
 * RUNNER_DOCKER_DOWN (dockerd not reached), RUNNER_DOCKER_TIMEOUT (no
 * answer in time), RUNNER_DOCKER_INVALID (refused before asking, or an
 * answer without what it must hold); err says it in words, for the log.
 * The caller decides what a status means to it: nothing here or there
 * reads the words.
 */

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "runner.h"


/* libcurl's write callback for a bounded answer (Docker's here, GitHub's
 * in pr.c): past b->max bytes the transfer stops and b->over is set */
size_t
runner_buf_collect(char *ptr, size_t size, size_t nmemb, void *ud)
{
    runner_buf_t  *b = ud;
    size_t         n = size * nmemb;
    char          *p;

    if (b->len + n > b->max) {
        b->over = 1;
        return 0;
    }

    p = realloc(b->data, b->len + n + 1);
    if (p == NULL) {
        return 0;
    }

    memcpy(p + b->len, ptr, n);
    b->data = p;
    b->len += n;
    b->data[b->len] = '\0';

    return n;
}


static CURL *
runner_docker_handle(const char *method, const char *path, long timeout)
{
    CURL  *h;
    char   url[1024];

    h = curl_easy_init();
    if (h == NULL) {
        return NULL;
    }

    snprintf(url, sizeof(url), RUNNER_DOCKER_API "%s", path);

    curl_easy_setopt(h, CURLOPT_UNIX_SOCKET_PATH,
                     runner_config->docker_socket);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT,
                     (long) RUNNER_DOCKER_CONNECT_S);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, timeout);

    return h;
}


/* a 64-hex container id, as Docker makes them */
int
runner_docker_valid_id(const char *id)
{
    size_t  n;

    n = strspn(id, "0123456789abcdef");

    return n == RUNNER_CONTAINER_ID_LEN && id[n] == '\0';
}


/* what goes into an API path: an id or one of our names, nothing that
 * could change the path or its query */
int
runner_docker_ref_ok(const char *ref, char *err, size_t errlen)
{
    size_t  n;

    n = strspn(ref, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                    "0123456789_.-");

    if (n == 0 || n > RUNNER_DOCKER_REF_MAX || ref[n] != '\0'
        || ref[0] == '.' || ref[0] == '-')
    {
        snprintf(err, errlen, "docker: refusing a malformed name or id");
        return 0;
    }

    return 1;
}


/*
 * One request: the HTTP status (or RUNNER_DOCKER_DOWN, _TIMEOUT) and,
 * when out is given, the parsed JSON answer (NULL when there is none).
 * The body (NULL: none) is sent, then released.
 */
long
runner_docker_call(const char *method, const char *path, json_t *body,
    long timeout, json_t **out, char *err, size_t errlen)
{
    long   status;
    char  *payload;

    payload = NULL;

    if (body) {
        payload = json_dumps(body, JSON_COMPACT);
        json_decref(body);
    }

    status = runner_docker_send(method, path,
                                body ? "application/json" : NULL,
                                body ? (payload ? payload : "{}") : NULL,
                                payload ? strlen(payload) : 2, timeout, out,
                                err, errlen);
    free(payload);

    return status;
}


/*
 * One request with a body of any type (ctype NULL: none; a POST without
 * one sends an empty body): what runner_docker_call answers.
 */
long
runner_docker_send(const char *method, const char *path, const char *ctype,
    const char *data, size_t len, long timeout, json_t **out, char *err,
    size_t errlen)
{
    CURL               *h;
    CURLcode            cc;
    long                status;
    char                hdr[128];
    runner_buf_t        b = { NULL, 0, RUNNER_DOCKER_ANSWER_MAX, 0 };
    struct curl_slist  *hdrs = NULL;
    json_t             *j;
    const char         *msg;

    if (out) {
        *out = NULL;
    }

    h = runner_docker_handle(method, path, timeout);
    if (h == NULL) {
        snprintf(err, errlen, "docker: out of memory");
        return RUNNER_DOCKER_DOWN;
    }

    if (ctype) {
        snprintf(hdr, sizeof(hdr), "Content-Type: %s", ctype);
        hdrs = curl_slist_append(hdrs, hdr);
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long) len);
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, data);

    } else if (strcmp(method, "POST") == 0) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, "");
    }

    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, runner_buf_collect);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);

    cc = curl_easy_perform(h);
    status = RUNNER_DOCKER_DOWN;

    if (cc == CURLE_OPERATION_TIMEDOUT) {
        snprintf(err, errlen, "docker: %s %s: no answer within %ld s",
                 method, path, timeout);
        status = RUNNER_DOCKER_TIMEOUT;

    } else if (cc != CURLE_OK) {
        snprintf(err, errlen, "docker: %s (is dockerd running at %s?)",
                 curl_easy_strerror(cc), runner_config->docker_socket);

    } else {
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);

        j = b.data ? json_loads(b.data, 0, NULL) : NULL;

        if (status >= 400) {
            /* Docker's words, for the log only */
            msg = json_string_value(json_object_get(j, "message"));
            snprintf(err, errlen, "docker: %s %s: %ld %s", method, path,
                     status, msg ? msg : "");
        }

        if (out) {
            *out = j;

        } else {
            json_decref(j);
        }
    }

    if (status == RUNNER_DOCKER_DOWN || status == RUNNER_DOCKER_TIMEOUT
        || status >= 500)
    {
        runner_metrics_docker_error();
    }

    curl_slist_free_all(hdrs);
    curl_easy_cleanup(h);
    free(b.data);

    return status;
}


/* a call on one object: /<what>/<ref><rest> */
static long
runner_docker_on(const char *method, const char *what, const char *ref,
    const char *rest, json_t *body, long timeout, json_t **out, char *err,
    size_t errlen)
{
    char  path[512];

    if (out) {
        *out = NULL;
    }

    if (!runner_docker_ref_ok(ref, err, errlen)) {
        json_decref(body);
        return RUNNER_DOCKER_INVALID;
    }

    snprintf(path, sizeof(path), "/%s/%s%s", what, ref, rest);

    return runner_docker_call(method, path, body, timeout, out, err, errlen);
}


/*
 * A call on one object whose answer of 200 is read with json_unpack():
 * what fmt names is set as far as the answer holds it (keys marked "?"
 * may be missing), and left as it was otherwise.
 */
static long
runner_docker_read(const char *method, const char *what, const char *ref,
    const char *rest, long timeout, char *err, size_t errlen,
    const char *fmt, ...)
{
    long      st;
    json_t   *out;
    va_list   ap;

    st = runner_docker_on(method, what, ref, rest, NULL, timeout, &out, err,
                          errlen);

    if (st == 200) {
        va_start(ap, fmt);
        (void) json_vunpack_ex(out, NULL, 0, fmt, ap);
        va_end(ap);
    }

    json_decref(out);

    return st;
}


/* an absolute path */
static int
runner_docker_valid_path(const char *s)
{
    return s[0] == '/';
}


/*
 * The string at key of an answer of status ok, copied into buf; an answer
 * without one that valid() takes and buf holds is RUNNER_DOCKER_INVALID.
 * The answer is released.
 */
static long
runner_docker_string(long st, long ok, json_t *out, const char *key,
    int (*valid)(const char *s), char *buf, size_t size, char *err,
    size_t errlen)
{
    const char  *s;

    s = json_string_value(json_object_get(out, key));

    if (st == ok && (s == NULL || !valid(s) || strlen(s) >= size)) {
        snprintf(err, errlen, "docker: the answer holds no usable %s", key);
        st = RUNNER_DOCKER_INVALID;

    } else if (st == ok) {
        strcpy(buf, s);
    }

    json_decref(out);

    return st;
}


/* the calls that name one object and send nothing */
typedef enum {
    RUNNER_DOCKER_VOLUME_RM = 0,
    RUNNER_DOCKER_NETWORK_RM,
    RUNNER_DOCKER_START,
    RUNNER_DOCKER_KILL,
    RUNNER_DOCKER_RM
} runner_docker_verb_e;


static const struct {
    const char  *method;
    const char  *what;
    const char  *rest;
    long         timeout;
} runner_docker_verbs[] = {
    { "DELETE", "volumes",    "",         RUNNER_DOCKER_SLOW_S },
    { "DELETE", "networks",   "",         RUNNER_DOCKER_QUICK_S },
    { "POST",   "containers", "/start",   RUNNER_DOCKER_SLOW_S },
    { "POST",   "containers", "/kill",    RUNNER_DOCKER_QUICK_S },
    { "DELETE", "containers", "?force=1", RUNNER_DOCKER_SLOW_S }
};


static long
runner_docker_verb(runner_docker_verb_e verb, const char *ref, char *err,
    size_t errlen)
{
    return runner_docker_on(runner_docker_verbs[verb].method,
                            runner_docker_verbs[verb].what, ref,
                            runner_docker_verbs[verb].rest, NULL,
                            runner_docker_verbs[verb].timeout, NULL, err,
                            errlen);
}


/*
 * POST /<what>/create: one of our objects (a volume, a network), named,
 * with labels (a session's, a pool's) and smcp.managed; spec holds the
 * rest (both are released)
 */
static long
runner_docker_make(const char *what, const char *name, json_t *labels,
    json_t *spec, char *err, size_t errlen)
{
    char  path[64];

    if (labels == NULL) {
        json_decref(spec);
        snprintf(err, errlen, "docker: out of memory");
        return RUNNER_DOCKER_INVALID;
    }

    if (!runner_docker_ref_ok(name, err, errlen)) {
        json_decref(labels);
        json_decref(spec);
        return RUNNER_DOCKER_INVALID;
    }

    json_object_set_new(labels, "smcp.managed", json_string("1"));
    json_object_set_new(spec, "Name", json_string(name));
    json_object_set_new(spec, "Labels", labels);

    snprintf(path, sizeof(path), "/%s/create", what);

    return runner_docker_call("POST", path, spec, RUNNER_DOCKER_QUICK_S, NULL,
                              err, errlen);
}


/* 200: dockerd answers */
long
runner_docker_ping(char *err, size_t errlen)
{
    return runner_docker_call("GET", "/_ping", NULL, RUNNER_DOCKER_CONNECT_S,
                              NULL, err, errlen);
}


/* 201 (made) or 200 (it existed): a session's volume */
long
runner_docker_volume_create(const char *name, const char *session,
    char *err, size_t errlen)
{
    return runner_docker_volume_make(name,
                                     json_pack("{s:s}", "smcp.session",
                                               session),
                                     err, errlen);
}


/* the same, with these labels (released) */
long
runner_docker_volume_make(const char *name, json_t *labels, char *err,
    size_t errlen)
{
    return runner_docker_make("volumes", name, labels, json_object(), err,
                              errlen);
}


/* 200 with buf set: where the engine keeps a volume's files (host side) */
long
runner_docker_volume_mountpoint(const char *name, char *buf, size_t size,
    char *err, size_t errlen)
{
    long     st;
    json_t  *out;

    st = runner_docker_on("GET", "volumes", name, "", NULL,
                          RUNNER_DOCKER_QUICK_S, &out, err, errlen);

    return runner_docker_string(st, 200, out, "Mountpoint",
                                runner_docker_valid_path, buf, size, err,
                                errlen);
}


/* 204 (removed), 404 (none), 409 (in use by a container) */
long
runner_docker_volume_remove(const char *name, char *err, size_t errlen)
{
    return runner_docker_verb(RUNNER_DOCKER_VOLUME_RM, name, err, errlen);
}


/* 201 (made), 409 (it exists): an internal network of a session, the
 * host without an address on it */
long
runner_docker_network_create(const char *name, const char *session,
    char *err, size_t errlen)
{
    json_t  *spec;

    spec = json_pack("{s:s, s:b, s:b, s:{s:s, s:s}}",
                     "Driver", "bridge", "Internal", 1, "CheckDuplicate", 1,
                     "Options",
                         "com.docker.network.bridge.inhibit_ipv4", "true",
                         "com.docker.network.bridge.enable_icc", "true");

    return runner_docker_make("networks", name,
                              json_pack("{s:s}", "smcp.session", session),
                              spec, err, errlen);
}


/* 200 (joined), 403 (not allowed: it may be on it already), 404 */
long
runner_docker_network_connect(const char *name, const char *container,
    const char *alias, char *err, size_t errlen)
{
    return runner_docker_on("POST", "networks", name, "/connect",
                            json_pack("{s:s, s:{s:[s]}}",
                                      "Container", container,
                                      "EndpointConfig", "Aliases", alias),
                            RUNNER_DOCKER_QUICK_S, NULL, err, errlen);
}


/* 200 with *member set: whether the container (name or id) is on the
 * network */
long
runner_docker_network_member(const char *name, const char *container,
    int *member, char *err, size_t errlen)
{
    long         st;
    json_t      *out, *ct;
    const char  *id, *cname;

    *member = 0;

    st = runner_docker_on("GET", "networks", name, "", NULL,
                          RUNNER_DOCKER_QUICK_S, &out, err, errlen);

    if (st == 200) {
        /* {"Containers": {id: {"Name": name, ...}}} */
        json_object_foreach(json_object_get(out, "Containers"), id, ct) {
            cname = json_string_value(json_object_get(ct, "Name"));

            if (strcmp(id, container) == 0
                || (cname && strcmp(cname, container) == 0))
            {
                *member = 1;
            }
        }
    }

    json_decref(out);

    return st;
}


/* 200 (left), 404 (no such network or container), 403 */
long
runner_docker_network_disconnect(const char *name, const char *container,
    char *err, size_t errlen)
{
    return runner_docker_on("POST", "networks", name, "/disconnect",
                            json_pack("{s:s, s:b}", "Container", container,
                                      "Force", 1),
                            RUNNER_DOCKER_QUICK_S, NULL, err, errlen);
}


/* 204 (removed), 404 (none), 403 (a container is still on it) */
long
runner_docker_network_remove(const char *name, char *err, size_t errlen)
{
    return runner_docker_verb(RUNNER_DOCKER_NETWORK_RM, name, err, errlen);
}


/* 200 with *out the image's description, 404 (no such image); the name
 * (repository[:tag] or an id) may hold only what names hold */
long
runner_docker_image_inspect(const char *image, json_t **out, char *err,
    size_t errlen)
{
    size_t  n;
    char    path[512];

    *out = NULL;
    n = strspn(image, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                      "0123456789_.-/:@");

    if (n == 0 || n >= 256 || image[n] != '\0' || image[0] == '/'
        || image[0] == '.' || image[0] == '-' || strstr(image, "..")
        || strstr(image, "//"))
    {
        snprintf(err, errlen, "docker: refusing a malformed image name");
        return RUNNER_DOCKER_INVALID;
    }

    snprintf(path, sizeof(path), "/images/%s/json", image);

    return runner_docker_call("GET", path, NULL, RUNNER_DOCKER_QUICK_S, out,
                              err, errlen);
}


/* 201 with id set, 409 (the name is taken), 404 (no such image); spec
 * stays the caller's */
long
runner_docker_create(json_t *spec, const char *name, char *id, size_t idlen,
    char *err, size_t errlen)
{
    long     st;
    json_t  *out;
    char     path[256];

    if (!runner_docker_ref_ok(name, err, errlen)) {
        return RUNNER_DOCKER_INVALID;
    }

    snprintf(path, sizeof(path), "/containers/create?name=%s", name);

    st = runner_docker_call("POST", path, json_incref(spec),
                            RUNNER_DOCKER_SLOW_S, &out, err, errlen);

    return runner_docker_string(st, 201, out, "Id", runner_docker_valid_id,
                                id, idlen, err, errlen);
}


/* 204 (started), 304 (it was running) */
long
runner_docker_start(const char *id, char *err, size_t errlen)
{
    return runner_docker_verb(RUNNER_DOCKER_START, id, err, errlen);
}


/* 204 (killed), 409 (not running), 404 (none) */
long
runner_docker_kill(const char *id, char *err, size_t errlen)
{
    return runner_docker_verb(RUNNER_DOCKER_KILL, id, err, errlen);
}


/* 200 with *exit_code set (it is not running), RUNNER_DOCKER_TIMEOUT
 * (still running after timeout seconds), 404 */
long
runner_docker_wait(const char *id, long timeout, int *exit_code, char *err,
    size_t errlen)
{
    *exit_code = 0;

    return runner_docker_read("POST", "containers", id,
                              "/wait?condition=not-running", timeout, err,
                              errlen, "{s?i}", "StatusCode", exit_code);
}


/* 204 (removed, killed first), 404 (none); the session's volume stays */
long
runner_docker_remove(const char *id, char *err, size_t errlen)
{
    return runner_docker_verb(RUNNER_DOCKER_RM, id, err, errlen);
}


/* 204 (renamed), 404 (none), 409 (the name is taken) */
long
runner_docker_rename(const char *id, const char *name, char *err,
    size_t errlen)
{
    char  rest[160];

    if (!runner_docker_ref_ok(name, err, errlen)) {
        return RUNNER_DOCKER_INVALID;
    }

    snprintf(rest, sizeof(rest), "/rename?name=%s", name);

    return runner_docker_on("POST", "containers", id, rest, NULL,
                            RUNNER_DOCKER_QUICK_S, NULL, err, errlen);
}


/* 200 with *running set, 404 (no such container) */
long
runner_docker_running(const char *id, int *running, char *err,
    size_t errlen)
{
    *running = 0;

    return runner_docker_read("GET", "containers", id, "/json",
                              RUNNER_DOCKER_QUICK_S, err, errlen,
                              "{s?{s?b}}", "State", "Running", running);
}


/*
 * GET <path>filters=<filters, as JSON> (path ends in '?' or '&'; filters
 * released): what runner_docker_call answers, *out the answer
 */
static long
runner_docker_query(const char *path, json_t *filters, json_t **out,
    char *err, size_t errlen)
{
    int    n;
    char   url[1024], *json, *esc;
    CURL  *h;

    *out = NULL;

    json = filters ? json_dumps(filters, JSON_COMPACT) : NULL;
    json_decref(filters);

    h = json ? curl_easy_init() : NULL;
    esc = h ? curl_easy_escape(h, json, 0) : NULL;
    n = esc ? snprintf(url, sizeof(url), "%sfilters=%s", path, esc) : -1;
    curl_free(esc);
    free(json);
    if (h) {
        curl_easy_cleanup(h);
    }

    if (n < 0 || n >= (int) sizeof(url)) {
        snprintf(err, errlen, "docker: no filters for %.64s (too long, or "
                 "out of memory)", path);
        return RUNNER_DOCKER_INVALID;
    }

    return runner_docker_call("GET", url, NULL, RUNNER_DOCKER_QUICK_S, out,
                              err, errlen);
}


/*
 * 200 with *list set (an array): GET <path>filters={"<key>":["<value>"]}
 * (path ends in '?' or '&'), as /containers/json, /services, /tasks
 * answer
 */
long
runner_docker_filtered(const char *path, const char *key, const char *value,
    json_t **list, char *err, size_t errlen)
{
    long  st;

    st = runner_docker_query(path, json_pack("{s:[s]}", key, value), list,
                             err, errlen);

    if (st == 200 && !json_is_array(*list)) {
        snprintf(err, errlen, "docker: the list of %.64s is no array", path);
        st = RUNNER_DOCKER_INVALID;
    }

    if (st != 200) {
        json_decref(*list);
        *list = NULL;
    }

    return st;
}


/*
 * 200 with *list set (an array of names): the volumes with every label of
 * labels (an array of "key=value", released) that no container uses
 */
long
runner_docker_volumes_unused(json_t *labels, json_t **list, char *err,
    size_t errlen)
{
    long         st;
    size_t       i;
    json_t      *out, *vols, *v;
    const char  *name;

    *list = NULL;

    st = runner_docker_query("/volumes?",
                             json_pack("{s:o, s:[s]}", "label", labels,
                                       "dangling", "true"),
                             &out, err, errlen);

    /* "Volumes": null when there is none */
    vols = json_object_get(out, "Volumes");

    if (st == 200 && !json_is_array(vols) && !json_is_null(vols)) {
        snprintf(err, errlen, "docker: the list of volumes is no array");
        st = RUNNER_DOCKER_INVALID;
    }

    if (st == 200) {
        *list = json_array();

        json_array_foreach(vols, i, v) {
            name = json_string_value(json_object_get(v, "Name"));

            if (name) {
                json_array_append_new(*list, json_string(name));
            }
        }
    }

    json_decref(out);

    return st;
}


/* 200 with *list set (an array): the containers with this label */
long
runner_docker_list(const char *label, json_t **list, char *err,
    size_t errlen)
{
    return runner_docker_filtered("/containers/json?all=1&", "label", label,
                                  list, err, errlen);
}


/*
 * The session network recipe (compose): one internal network per session
 * (sandboxes of different sessions cannot reach each other), the nginx
 * container joined to it as "egress", its only peer.  Idempotent.  Built
 * on the calls above, deciding on their statuses.
 */
int
runner_docker_session_net(const char *name, const char *session,
    const char *peer, char *err, size_t errlen)
{
    long  st;

    st = runner_docker_network_create(name, session, err, errlen);

    /* 409: it exists (another run of the session made it) */
    if (st != 201 && st != 409) {
        return RUNNER_ERR;
    }

    return runner_docker_net_join(name, peer, err, errlen);
}


/* the peer on a network as "egress", whether it was on it or not */
int
runner_docker_net_join(const char *name, const char *peer, char *err,
    size_t errlen)
{
    int   member;
    long  st;

    st = runner_docker_network_connect(name, peer, "egress", err, errlen);

    if (st == 200) {
        return RUNNER_OK;
    }

    /* 403: refused, as when the peer is on it already: is it? */
    if (st == 403
        && runner_docker_network_member(name, peer, &member, err, errlen)
           == 200
        && member)
    {
        return RUNNER_OK;
    }

    return RUNNER_ERR;
}


/* the peer leaves, the network goes: RUNNER_AGAIN while a sandbox is
 * still on it (another run of the session) */
int
runner_docker_session_net_drop(const char *name, const char *peer,
    char *err, size_t errlen)
{
    long  st;

    (void) runner_docker_network_disconnect(name, peer, err, errlen);

    st = runner_docker_network_remove(name, err, errlen);

    if (st == 403) {
        return RUNNER_AGAIN;
    }

    return (st == 204 || st == 404) ? RUNNER_OK : RUNNER_ERR;
}


/* following a container's log */

typedef struct {
    runner_logstream_t  ls;
    runner_tick_pt      on_tick;
    void               *tick_data;
} runner_follow_t;


static size_t
runner_docker_follow_write(char *ptr, size_t size, size_t nmemb, void *ud)
{
    runner_follow_t  *f = ud;

    if (runner_logstream_feed(&f->ls, ptr, size * nmemb) != RUNNER_OK) {
        return 0;
    }

    return size * nmemb;
}


static int
runner_docker_follow_progress(void *ud, curl_off_t dltotal, curl_off_t dlnow,
    curl_off_t ultotal, curl_off_t ulnow)
{
    runner_follow_t  *f = ud;

    /* about once a second, data or not: cancels, deadlines, heartbeats;
     * non-zero ends the transfer (the runner is stopping: detach) */
    return (f->on_tick && f->on_tick(f->tick_data) != RUNNER_OK) ? 1 : 0;
}


/*
 * A log (GET path: Docker's multiplexed frames with timestamps) as lines
 * to on_line(data, ...); on_tick(tick_data) about once a second.
 * 200 when the log was read to its end; RUNNER_DOCKER_CUT when the
 * transfer stopped before (on_tick or on_line said stop, or the
 * connection broke); else the status the request got.
 */
long
runner_docker_stream(const char *path, runner_line_pt on_line, void *data,
    runner_tick_pt on_tick, void *tick_data, char *err, size_t errlen)
{
    CURL             *h;
    CURLcode          cc;
    long              status;
    runner_follow_t   f;

    h = runner_docker_handle("GET", path, 0);
    if (h == NULL) {
        snprintf(err, errlen, "docker: out of memory");
        return RUNNER_DOCKER_DOWN;
    }

    memset(&f, 0, sizeof(f));
    runner_logstream_init(&f.ls, on_line, data);
    f.on_tick = on_tick;
    f.tick_data = tick_data;

    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, runner_docker_follow_write);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &f);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION,
                     runner_docker_follow_progress);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, &f);

    cc = curl_easy_perform(h);

    status = RUNNER_DOCKER_DOWN;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(h);

    /* a last line without its newline */
    runner_logstream_feed(&f.ls, NULL, 0);
    runner_logstream_free(&f.ls);

    if (cc != CURLE_OK || status != 200) {
        snprintf(err, errlen, "docker: following %.200s: %s (HTTP %ld)",
                 path, curl_easy_strerror(cc), status);
    }

    return (cc != CURLE_OK && status == 200) ? RUNNER_DOCKER_CUT : status;
}


/*
 * The container's log from `since` on, as lines: followed while it runs
 * (follow 1), or read once as it stands (follow 0); as
 * runner_docker_stream().
 */
long
runner_docker_follow(const char *id, const char *since, int follow,
    runner_line_pt on_line, runner_tick_pt on_tick, void *data, char *err,
    size_t errlen)
{
    char  path[512];

    if (!runner_docker_ref_ok(id, err, errlen)) {
        return RUNNER_DOCKER_INVALID;
    }

    snprintf(path, sizeof(path), "/containers/%s/logs?follow=%d&stdout=1"
             "&stderr=1&timestamps=1%s%s", id, follow ? 1 : 0,
             since ? "&since=" : "", since ? since : "");

    return runner_docker_stream(path, on_line, data, on_tick, data, err,
                                errlen);
}
