/*
 * The warm pool (--pool N): N sandboxes of the default image kept
 * created, started and idle on the sandbox network, each with a fresh
 * volume, for the runs that start a new session.
 *
 * An idle one holds nothing of a run: no token, no task.  Its entry
 * script waits for the run's environment, which run.c puts into it
 * (archive.c) once a run takes it; the run's session keeps its volume.
 * One run takes it, and it goes as any run's container goes: it is never
 * handed to another.
 *
 * Its thread makes new ones while fewer than N are idle, and removes idle
 * ones that stopped (a killed one is replaced); at start it removes the
 * idle ones a runner of this name left behind (their name still
 * RUNNER_POOL_PREFIX: a taken one was renamed for its run), and at stop
 * (SIGTERM) its own idle ones.  The list of idle ones is the lock's.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "runner.h"


static pthread_mutex_t   runner_pool_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t    runner_pool_cond = PTHREAD_COND_INITIALIZER;
static runner_sandbox_t  runner_pool_idle[RUNNER_POOL_MAX];
static int               runner_pool_n;         /* idle ones listed */
static int64_t           runner_pool_taken_at;  /* ms: the last take */
static pthread_t         runner_pool_thread_id;
static int               runner_pool_up;


/* whether --pool can hold with the other flags (main.c, at start) */
int
runner_pool_check(char *err, size_t errlen)
{
    if (runner_config->pool == 0) {
        return RUNNER_OK;
    }

    if (strcmp(runner_config->backend, "swarm") == 0) {
        snprintf(err, errlen, "--pool: the swarm backend has no warm pool "
                 "(--backend docker, or --pool 0)");
        return RUNNER_ERR;
    }

    if (runner_config->egress_container[0]) {
        snprintf(err, errlen, "--pool: not with --egress-container (a "
                 "session's own network is made at its first run)");
        return RUNNER_ERR;
    }

    return RUNNER_OK;
}


/* a pooled sandbox and its volume go */
static void
runner_pool_discard(const runner_sandbox_t *sb)
{
    long  st;
    char  err[RUNNER_ERRLEN];

    if (sb->id[0]) {
        st = runner_docker_remove(sb->id, err, sizeof(err));

        if (st != 204 && st != 404) {
            runner_log("error", NULL, "pool: %s", err);
        }
    }

    st = runner_docker_volume_remove(sb->name, err, sizeof(err));

    if (st != 204 && st != 404) {
        runner_log("error", NULL, "pool: %s", err);
    }
}


/* a new one, started: RUNNER_OK with sb set */
static int
runner_pool_make(runner_sandbox_t *sb, char *err, size_t errlen)
{
    long     st;
    char     hex[17], egress[1024];
    json_t  *env, *labels, *spec;

    if (smcp_random_hex(hex, 8) != SMCP_OK) {
        snprintf(err, errlen, "no randomness");
        return RUNNER_ERR;
    }

    sb->id[0] = '\0';
    snprintf(sb->name, sizeof(sb->name), RUNNER_POOL_PREFIX "%s", hex);

    /*
     * nothing of a run: the entry script waits for it; the egress URL (not
     * a secret) lets it start and warm OpenCode ahead, behind its relay
     */
    if (snprintf(egress, sizeof(egress), "SMCP_EGRESS_URL=%s",
                 runner_config->egress_url) >= (int) sizeof(egress))
    {
        snprintf(err, errlen, "egress url too long");
        return RUNNER_ERR;
    }

    env = json_pack("[s, s]", "SMCP_POOL=1", egress);
    labels = json_pack("{s:s, s:s, s:s}", "smcp.pool", runner_config->name,
                       "smcp.runner", runner_config->name,
                       "smcp.store", runner_store_id());

    spec = runner_sandbox_spec(runner_config->image, env, labels, sb->name,
                               runner_config->network);
    if (spec == NULL) {
        snprintf(err, errlen, "cannot build the container spec");
        return RUNNER_ERR;
    }

    st = runner_docker_create(spec, sb->name, sb->id, sizeof(sb->id), err,
                              errlen);
    json_decref(spec);

    if (st == 201) {
        st = runner_docker_start(sb->id, err, errlen);

        if (st == 204 || st == 304) {
            return RUNNER_OK;
        }
    }

    runner_pool_discard(sb);

    return RUNNER_ERR;
}


/* takes sb off the idle list: 1 when it was on it */
static int
runner_pool_unlist(const runner_sandbox_t *sb)
{
    int  i, found;

    found = 0;

    pthread_mutex_lock(&runner_pool_lock);

    for (i = 0; i < runner_pool_n; i++) {
        if (strcmp(runner_pool_idle[i].id, sb->id) == 0) {
            runner_pool_idle[i] = runner_pool_idle[--runner_pool_n];
            runner_metrics_pool(runner_pool_n, 0);
            found = 1;
            break;
        }
    }

    pthread_mutex_unlock(&runner_pool_lock);

    return found;
}


/* idle ones that stopped (killed, crashed) are taken off and removed */
static void
runner_pool_prune(void)
{
    int               i, n, running;
    long              st;
    char              err[RUNNER_ERRLEN];
    runner_sandbox_t  list[RUNNER_POOL_MAX];

    pthread_mutex_lock(&runner_pool_lock);
    n = runner_pool_n;
    memcpy(list, runner_pool_idle, n * sizeof(runner_sandbox_t));
    pthread_mutex_unlock(&runner_pool_lock);

    for (i = 0; i < n; i++) {
        st = runner_docker_running(list[i].id, &running, err, sizeof(err));

        /* dockerd away: nothing is known; a run may have taken it */
        if ((st == 404 || (st == 200 && !running))
            && runner_pool_unlist(&list[i]))
        {
            runner_log("warn", NULL, "pool: sandbox %.12s stopped while "
                       "idle: replaced", list[i].id);
            runner_pool_discard(&list[i]);
        }
    }
}


/*
 * Idle ones left by a runner of this name that stopped without removing
 * them (killed, crashed): removed with their volumes.  A taken one was
 * renamed for its run: its run's to end.
 */
static void
runner_pool_leftovers(void)
{
    size_t            i;
    json_t           *list, *ct, *names;
    const char       *id, *name, *store;
    char              err[RUNNER_ERRLEN], label[192];
    runner_sandbox_t  sb;

    snprintf(label, sizeof(label), "smcp.pool=%s", runner_config->name);

    if (runner_docker_list(label, &list, err, sizeof(err)) != 200) {
        runner_log("error", NULL, "pool: %s", err);
        return;
    }

    json_array_foreach(list, i, ct) {
        id = json_string_value(json_object_get(ct, "Id"));
        names = json_object_get(ct, "Names");
        name = json_string_value(json_array_get(names, 0));
        store = json_string_value(json_object_get(json_object_get(ct,
                                                                  "Labels"),
                                                  "smcp.store"));

        if (id == NULL || name == NULL || store == NULL
            || !runner_docker_valid_id(id)
            || strcmp(store, runner_store_id()) != 0
            || strncmp(name, "/" RUNNER_POOL_PREFIX,
                       sizeof(RUNNER_POOL_PREFIX)) != 0
            || strlen(name + 1) >= sizeof(sb.name)
            || !runner_docker_ref_ok(name + 1, err, sizeof(err)))
        {
            continue;
        }

        snprintf(sb.id, sizeof(sb.id), "%s", id);
        snprintf(sb.name, sizeof(sb.name), "%s", name + 1);

        runner_log("info", NULL, "pool: removing sandbox %.12s, left idle "
                   "by an earlier runner", id);
        runner_pool_discard(&sb);
    }

    json_decref(list);
}


static void *
runner_pool_thread(void *arg)
{
    int               n;
    int64_t           now, next_check, next_make, due;
    char              err[RUNNER_ERRLEN];
    runner_sandbox_t  sb;
    struct timespec   ts;

    runner_pool_leftovers();

    next_check = smcp_now_ms() + RUNNER_POOL_CHECK_MS;
    next_make = 0;

    while (!atomic_load(&runner_stop)) {
        now = smcp_now_ms();

        if (now >= next_check) {
            next_check = now + RUNNER_POOL_CHECK_MS;
            runner_pool_prune();
        }

        pthread_mutex_lock(&runner_pool_lock);
        n = runner_pool_n;
        due = next_make;

        /* a run just took one: its start first (dockerd and the cores
         * are busy with it), unless none is left */
        if (n > 0 && due < runner_pool_taken_at + RUNNER_POOL_REFILL_MS) {
            due = runner_pool_taken_at + RUNNER_POOL_REFILL_MS;
        }

        pthread_mutex_unlock(&runner_pool_lock);

        if (n < runner_config->pool && now >= due) {

            if (runner_pool_make(&sb, err, sizeof(err)) != RUNNER_OK) {
                runner_log("error", NULL, "pool: %s", err);
                next_make = now + RUNNER_POOL_RETRY_MS;
                continue;
            }

            pthread_mutex_lock(&runner_pool_lock);
            runner_pool_idle[runner_pool_n++] = sb;
            runner_metrics_pool(runner_pool_n, 0);
            pthread_mutex_unlock(&runner_pool_lock);

            continue;
        }

        /* a take wakes it at once */
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += RUNNER_IDLE_MS * 1000000L;
        ts.tv_sec += ts.tv_nsec / 1000000000L;
        ts.tv_nsec %= 1000000000L;

        pthread_mutex_lock(&runner_pool_lock);

        if (runner_pool_n >= runner_config->pool) {
            (void) pthread_cond_timedwait(&runner_pool_cond,
                                          &runner_pool_lock, &ts);
        }

        n = runner_pool_n;
        pthread_mutex_unlock(&runner_pool_lock);

        if (n < runner_config->pool && now < due) {
            usleep(RUNNER_IDLE_MS * 1000);      /* a failed make, a take */
        }
    }

    /* drained: the idle ones go */
    pthread_mutex_lock(&runner_pool_lock);
    n = runner_pool_n;
    runner_pool_n = 0;
    runner_metrics_pool(0, 0);
    pthread_mutex_unlock(&runner_pool_lock);

    while (n-- > 0) {
        runner_pool_discard(&runner_pool_idle[n]);
    }

    runner_log("info", NULL, "pool: drained");

    return NULL;
}


/* RUNNER_OK: the thread runs (or --pool 0: none needed) */
int
runner_pool_start(void)
{
    int  rc;

    if (runner_config->pool == 0) {
        return RUNNER_OK;
    }

    rc = pthread_create(&runner_pool_thread_id, NULL, runner_pool_thread,
                        NULL);

    if (rc != 0) {
        runner_log("error", NULL, "cannot start the pool thread: %s",
                   strerror(rc));
        return RUNNER_ERR;
    }

    runner_pool_up = 1;

    return RUNNER_OK;
}


/* after runner_stop is set: the idle ones removed */
void
runner_pool_stop(void)
{
    if (!runner_pool_up) {
        return;
    }

    pthread_mutex_lock(&runner_pool_lock);
    pthread_cond_signal(&runner_pool_cond);
    pthread_mutex_unlock(&runner_pool_lock);

    pthread_join(runner_pool_thread_id, NULL);
    runner_pool_up = 0;
}


/* RUNNER_OK with sb: an idle one, now the caller's; RUNNER_AGAIN: none */
int
runner_pool_take(runner_sandbox_t *sb)
{
    int  rc;

    rc = RUNNER_AGAIN;

    pthread_mutex_lock(&runner_pool_lock);

    if (runner_pool_n > 0) {
        *sb = runner_pool_idle[--runner_pool_n];
        runner_pool_taken_at = smcp_now_ms();
        pthread_cond_signal(&runner_pool_cond);
        rc = RUNNER_OK;
    }

    runner_metrics_pool(runner_pool_n, rc != RUNNER_OK);

    pthread_mutex_unlock(&runner_pool_lock);

    return rc;
}


/*
 * A taken one becomes run_id's: renamed smcp-<run id> (its name says it
 * is taken: runner_pool_leftovers leaves it), and given the run's
 * environment (env, released), NUL between its "NAME=value" entries, in
 * RUNNER_POOL_DIR/.smcp-run, then .smcp-ready, which the entry script
 * waits for: it reads the run, removes both, and goes on as any run's.
 */
int
runner_pool_assign(const runner_sandbox_t *sb, const char *run_id,
    json_t *env, char *err, size_t errlen)
{
    int            rc;
    long           st;
    size_t         i, len, n;
    char          *buf, name[96];
    json_t        *v;
    runner_file_t  files[2];

    snprintf(name, sizeof(name), "smcp-%s", run_id);

    st = runner_docker_rename(sb->id, name, err, errlen);

    if (st == 409) {
        /* a container of this run left by a runner that died while
         * starting it (we hold the claim now): it goes */
        st = runner_docker_remove(name, err, errlen);

        if (st == 204 || st == 404) {
            st = runner_docker_rename(sb->id, name, err, errlen);
        }
    }

    if (st != 204) {
        json_decref(env);
        return RUNNER_ERR;
    }

    len = 0;

    json_array_foreach(env, i, v) {
        len += json_string_length(v) + 1;
    }

    buf = malloc(len + 1);
    if (buf == NULL) {
        json_decref(env);
        snprintf(err, errlen, "out of memory");
        return RUNNER_ERR;
    }

    len = 0;

    json_array_foreach(env, i, v) {
        n = json_string_length(v);
        memcpy(buf + len, json_string_value(v), n);
        len += n;
        buf[len++] = '\0';
    }

    json_decref(env);

    files[0] = (runner_file_t) { ".smcp-run", buf, len };
    files[1] = (runner_file_t) { ".smcp-ready", "", 0 };

    st = runner_archive_put(sb->id, RUNNER_POOL_DIR, files, 2, err, errlen);
    rc = (st == 200) ? RUNNER_OK : RUNNER_ERR;

    explicit_bzero(buf, len);       /* the run's token */
    free(buf);

    return rc;
}
