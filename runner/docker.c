/*
 * The Docker Engine API (v1.41) over its unix socket, with libcurl.  Each
 * call uses its own easy handle: calls come from several run threads.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "runner.h"


#define RUNNER_DOCKER_API  "http://localhost/v1.41"


typedef struct {
    char    *data;
    size_t   len;
} runner_buf_t;


static size_t
runner_docker_collect(char *ptr, size_t size, size_t nmemb, void *ud)
{
    runner_buf_t  *b = ud;
    size_t         n = size * nmemb;
    char          *p;

    /* API answers are small; cap them anyway */
    if (b->len + n > 16 * 1024 * 1024) {
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
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, 5L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, timeout);

    return h;
}


/* a 64-hex container id, as Docker makes them */
int
runner_docker_valid_id(const char *id)
{
    size_t  n;

    n = strspn(id, "0123456789abcdef");

    return n == 64 && id[64] == '\0';
}


/* what goes into an API path: an id or one of our names, nothing that
 * could change the path or its query */
static int
runner_docker_ref_ok(const char *ref, char *err, size_t errlen)
{
    size_t  n;

    n = strspn(ref, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                    "0123456789_.-");

    if (n == 0 || n > 128 || ref[n] != '\0' || ref[0] == '.'
        || ref[0] == '-')
    {
        snprintf(err, errlen, "docker: refusing a malformed name or id");
        return 0;
    }

    return 1;
}


/*
 * One request; returns the HTTP status (0 when dockerd was not reached,
 * -1 when the answer did not come within timeout seconds) and, when out
 * is given, the parsed JSON answer.
 */
static long
runner_docker_call(const char *method, const char *path, json_t *body,
    long timeout, json_t **out, char *err, size_t errlen)
{
    CURL               *h;
    CURLcode            cc;
    long                status;
    char               *payload;
    runner_buf_t        b = { NULL, 0 };
    struct curl_slist  *hdrs = NULL;
    json_t             *j;
    const char         *msg;

    if (out) {
        *out = NULL;
    }

    h = runner_docker_handle(method, path, timeout);
    if (h == NULL) {
        snprintf(err, errlen, "docker: out of memory");
        return 0;
    }

    payload = NULL;

    if (body) {
        payload = json_dumps(body, JSON_COMPACT);
        hdrs = curl_slist_append(hdrs, "Content-Type: application/json");
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, payload ? payload : "{}");

    } else if (strcmp(method, "POST") == 0) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, "");
    }

    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, runner_docker_collect);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);

    cc = curl_easy_perform(h);
    status = 0;

    if (cc == CURLE_OPERATION_TIMEDOUT) {
        snprintf(err, errlen, "docker: %s %s: no answer within %ld s",
                 method, path, timeout);
        status = -1;

    } else if (cc != CURLE_OK) {
        snprintf(err, errlen, "docker: %s (is dockerd running at %s?)",
                 curl_easy_strerror(cc), runner_config->docker_socket);

    } else {
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);

        j = b.data ? json_loads(b.data, 0, NULL) : NULL;

        if (status >= 400) {
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

    curl_slist_free_all(hdrs);
    curl_easy_cleanup(h);
    free(payload);
    free(b.data);

    return status;
}


int
runner_docker_ping(char *err, size_t errlen)
{
    long  st;

    st = runner_docker_call("GET", "/_ping", NULL, 5, NULL, err, errlen);

    return st == 200 ? RUNNER_OK : RUNNER_ERR;
}


int
runner_docker_volume(const char *name, const char *session, char *err,
    size_t errlen)
{
    long     st;
    json_t  *body;

    if (!runner_docker_ref_ok(name, err, errlen)) {
        return RUNNER_ERR;
    }

    /* idempotent: an existing volume is returned as it is */
    body = json_pack("{s:s, s:{s:s, s:s}}", "Name", name, "Labels",
                     "smcp.session", session, "smcp.managed", "1");

    st = runner_docker_call("POST", "/volumes/create", body, 30, NULL,
                            err, errlen);
    json_decref(body);

    return (st == 201 || st == 200) ? RUNNER_OK : RUNNER_ERR;
}


/* where the engine keeps a volume's files (host side) */
int
runner_docker_volume_mountpoint(const char *name, char *buf, size_t size,
    char *err, size_t errlen)
{
    long         st;
    json_t      *out;
    char         path[256];
    const char  *mp;

    if (!runner_docker_ref_ok(name, err, errlen)) {
        return RUNNER_ERR;
    }

    snprintf(path, sizeof(path), "/volumes/%s", name);
    st = runner_docker_call("GET", path, NULL, 30, &out, err, errlen);

    mp = json_string_value(json_object_get(out, "Mountpoint"));

    if (st != 200 || mp == NULL || mp[0] != '/' || strlen(mp) >= size) {
        if (st == 200) {
            snprintf(err, errlen, "docker: volume %s has no usable "
                     "Mountpoint", name);
        }
        json_decref(out);
        return RUNNER_ERR;
    }

    strcpy(buf, mp);
    json_decref(out);

    return RUNNER_OK;
}


/* RUNNER_AGAIN: in use by a container */
int
runner_docker_volume_remove(const char *name, char *err, size_t errlen)
{
    long  st;
    char  path[256];

    if (!runner_docker_ref_ok(name, err, errlen)) {
        return RUNNER_ERR;
    }

    snprintf(path, sizeof(path), "/volumes/%s", name);
    st = runner_docker_call("DELETE", path, NULL, 60, NULL, err, errlen);

    if (st == 409) {
        return RUNNER_AGAIN;
    }

    return (st == 204 || st == 404) ? RUNNER_OK : RUNNER_ERR;
}


/*
 * The compose variant of the network recipe: one internal network per
 * session (sandboxes of different sessions cannot reach each other), the
 * host without an address on it (inhibit_ipv4), and the nginx container
 * joined to it as "egress", its only peer.  Idempotent.
 */
int
runner_docker_session_net(const char *name, const char *session,
    const char *peer, char *err, size_t errlen)
{
    long     st;
    json_t  *body;
    char     path[256];

    if (!runner_docker_ref_ok(name, err, errlen)) {
        return RUNNER_ERR;
    }

    body = json_pack("{s:s, s:s, s:b, s:b, s:{s:s, s:s}, s:{s:s, s:s}}",
                     "Name", name, "Driver", "bridge", "Internal", 1,
                     "CheckDuplicate", 1,
                     "Options",
                         "com.docker.network.bridge.inhibit_ipv4", "true",
                         "com.docker.network.bridge.enable_icc", "true",
                     "Labels", "smcp.session", session, "smcp.managed", "1");

    st = runner_docker_call("POST", "/networks/create", body, 30, NULL,
                            err, errlen);
    json_decref(body);

    if (st != 201 && st != 409) {
        return RUNNER_ERR;
    }

    body = json_pack("{s:s, s:{s:[s]}}", "Container", peer,
                     "EndpointConfig", "Aliases", "egress");

    snprintf(path, sizeof(path), "/networks/%s/connect", name);
    st = runner_docker_call("POST", path, body, 30, NULL, err, errlen);
    json_decref(body);

    return (st == 200 || (st == 403 && strstr(err, "already exists")))
           ? RUNNER_OK : RUNNER_ERR;
}


int
runner_docker_session_net_drop(const char *name, const char *peer,
    char *err, size_t errlen)
{
    long     st;
    json_t  *body;
    char     path[256];

    if (!runner_docker_ref_ok(name, err, errlen)) {
        return RUNNER_ERR;
    }

    body = json_pack("{s:s, s:b}", "Container", peer, "Force", 1);
    snprintf(path, sizeof(path), "/networks/%s/disconnect", name);
    (void) runner_docker_call("POST", path, body, 30, NULL, err, errlen);
    json_decref(body);

    snprintf(path, sizeof(path), "/networks/%s", name);
    st = runner_docker_call("DELETE", path, NULL, 30, NULL, err, errlen);

    /* 403: a sandbox is still on it (another run of the session) */
    return (st == 204 || st == 404) ? RUNNER_OK : RUNNER_ERR;
}


int
runner_docker_create(json_t *spec, const char *name, char *id, size_t idlen,
    char *err, size_t errlen)
{
    long         st;
    json_t      *out;
    char         path[256];
    const char  *s;

    if (!runner_docker_ref_ok(name, err, errlen)) {
        return RUNNER_ERR;
    }

    snprintf(path, sizeof(path), "/containers/create?name=%s", name);

    st = runner_docker_call("POST", path, spec, 60, &out, err, errlen);

    if (st != 201) {
        json_decref(out);
        return RUNNER_ERR;
    }

    s = json_string_value(json_object_get(out, "Id"));

    if (s == NULL || !runner_docker_valid_id(s) || strlen(s) >= idlen) {
        snprintf(err, errlen, "docker: create answered no container id");
        json_decref(out);
        return RUNNER_ERR;
    }

    strcpy(id, s);
    json_decref(out);

    return RUNNER_OK;
}


int
runner_docker_start(const char *id, char *err, size_t errlen)
{
    long  st;
    char  path[256];

    if (!runner_docker_ref_ok(id, err, errlen)) {
        return RUNNER_ERR;
    }

    snprintf(path, sizeof(path), "/containers/%s/start", id);
    st = runner_docker_call("POST", path, NULL, 60, NULL, err, errlen);

    return (st == 204 || st == 304) ? RUNNER_OK : RUNNER_ERR;
}


int
runner_docker_kill(const char *id, char *err, size_t errlen)
{
    long  st;
    char  path[256];

    if (!runner_docker_ref_ok(id, err, errlen)) {
        return RUNNER_ERR;
    }

    snprintf(path, sizeof(path), "/containers/%s/kill", id);
    st = runner_docker_call("POST", path, NULL, 30, NULL, err, errlen);

    /* 409: not running any more */
    return (st == 204 || st == 409) ? RUNNER_OK : RUNNER_ERR;
}


/* RUNNER_AGAIN: still running after timeout seconds */
int
runner_docker_wait(const char *id, long timeout, int *exit_code, char *err,
    size_t errlen)
{
    long     st;
    json_t  *out;
    char     path[256];

    if (!runner_docker_ref_ok(id, err, errlen)) {
        return RUNNER_ERR;
    }

    snprintf(path, sizeof(path),
             "/containers/%s/wait?condition=not-running", id);

    st = runner_docker_call("POST", path, NULL, timeout, &out, err, errlen);

    if (st == -1) {
        return RUNNER_AGAIN;
    }

    if (st != 200) {
        json_decref(out);
        return RUNNER_ERR;
    }

    *exit_code = (int) json_integer_value(json_object_get(out, "StatusCode"));
    json_decref(out);

    return RUNNER_OK;
}


int
runner_docker_remove(const char *id, char *err, size_t errlen)
{
    long  st;
    char  path[256];

    if (!runner_docker_ref_ok(id, err, errlen)) {
        return RUNNER_ERR;
    }

    /* the session's volume stays: the next run of the session needs it */
    snprintf(path, sizeof(path), "/containers/%s?force=1", id);
    st = runner_docker_call("DELETE", path, NULL, 60, NULL, err, errlen);

    return (st == 204 || st == 404) ? RUNNER_OK : RUNNER_ERR;
}


int
runner_docker_running(const char *id, int *running, char *err,
    size_t errlen)
{
    long     st;
    json_t  *out;
    char     path[256];

    if (!runner_docker_ref_ok(id, err, errlen)) {
        return RUNNER_ERR;
    }

    snprintf(path, sizeof(path), "/containers/%s/json", id);
    st = runner_docker_call("GET", path, NULL, 30, &out, err, errlen);

    if (st == 404) {
        *running = -1;
        json_decref(out);
        return RUNNER_OK;
    }

    if (st != 200) {
        json_decref(out);
        return RUNNER_ERR;
    }

    *running = json_is_true(json_object_get(json_object_get(out, "State"),
                                            "Running"));
    json_decref(out);

    return RUNNER_OK;
}


json_t *
runner_docker_list(const char *label, char *err, size_t errlen)
{
    long     st;
    json_t  *out;
    char     path[512], *esc, filters[256];
    CURL    *h;

    snprintf(filters, sizeof(filters), "{\"label\":[\"%s\"]}", label);

    h = curl_easy_init();
    esc = h ? curl_easy_escape(h, filters, 0) : NULL;
    snprintf(path, sizeof(path), "/containers/json?all=1&filters=%s",
             esc ? esc : "");
    curl_free(esc);
    if (h) {
        curl_easy_cleanup(h);
    }

    st = runner_docker_call("GET", path, NULL, 30, &out, err, errlen);

    if (st != 200 || !json_is_array(out)) {
        json_decref(out);
        return NULL;
    }

    return out;
}


/* following a container's log */

typedef struct {
    runner_logstream_t  ls;
    runner_tick_pt      on_tick;
    void               *data;
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
    return (f->on_tick && f->on_tick(f->data) != RUNNER_OK) ? 1 : 0;
}


/*
 * The container's log from `since` on, as lines: followed while it runs
 * (follow 1), or read once as it stands (follow 0).
 */
int
runner_docker_follow(const char *id, const char *since, int follow,
    runner_line_pt on_line, runner_tick_pt on_tick, void *data, char *err,
    size_t errlen)
{
    CURL             *h;
    CURLcode          cc;
    long              status;
    char              path[512];
    runner_follow_t   f;

    if (!runner_docker_ref_ok(id, err, errlen)) {
        return RUNNER_ERR;
    }

    snprintf(path, sizeof(path), "/containers/%s/logs?follow=%d&stdout=1"
             "&stderr=1&timestamps=1%s%s", id, follow ? 1 : 0,
             since ? "&since=" : "", since ? since : "");

    h = runner_docker_handle("GET", path, 0);
    if (h == NULL) {
        snprintf(err, errlen, "docker: out of memory");
        return RUNNER_ERR;
    }

    memset(&f, 0, sizeof(f));
    runner_logstream_init(&f.ls, on_line, data);
    f.on_tick = on_tick;
    f.data = data;

    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, runner_docker_follow_write);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &f);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION,
                     runner_docker_follow_progress);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, &f);

    cc = curl_easy_perform(h);

    status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(h);

    /* a last line without its newline */
    runner_logstream_feed(&f.ls, NULL, 0);
    runner_logstream_free(&f.ls);

    if (cc != CURLE_OK || status != 200) {
        snprintf(err, errlen, "docker: following the log of %.12s: %s "
                 "(HTTP %ld)", id, curl_easy_strerror(cc), status);
        return RUNNER_ERR;
    }

    return RUNNER_OK;
}
