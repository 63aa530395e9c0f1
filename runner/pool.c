/*
 * The warm pools (--pool N, --pool-images IMAGE=N,...): for each pooled
 * image, N sandboxes of it kept created, started and idle on the sandbox
 * network (with --egress-container the pool's own, which a taken one
 * leaves for its session's), each with a fresh volume, for the runs of
 * that image that start a new session.
 *
 * An idle one holds nothing of a run: no token, no task.  Its entry
 * script waits for the run's environment on its stdin, which the run
 * that takes it writes (runner_pool_assign, attach.c); the run's session
 * keeps its volume.
 * One run takes it, and it goes as any run's container goes: it is never
 * handed to another.
 *
 * Its thread makes new ones while fewer than an image's N are idle (the
 * image furthest from its N first), and removes idle ones that stopped (a
 * killed one is replaced); at start it removes the idle ones a runner of
 * this name left behind, of any image (their name still
 * RUNNER_POOL_PREFIX: a taken one was renamed for its run), and the
 * volumes it left without their sandbox (labelled as they are, named by
 * no session), and at stop (SIGTERM) or drain (SIGUSR1) its own idle
 * ones.  The lists of idle ones (one an image) are the lock's.  It also
 * sweeps the sandboxes held for sessions (hold.c): those past their
 * time, and all at its end.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "runner.h"


/* one image's idle sandboxes */
typedef struct {
    const char        *image;           /* runner_config->pools[i]'s */
    int                want;
    int                n;               /* idle ones listed */
    int64_t            next_make;       /* ms: the thread's own */
    runner_sandbox_t   idle[RUNNER_POOL_MAX];
} runner_pool_list_t;


static pthread_mutex_t      runner_pool_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t       runner_pool_cond = PTHREAD_COND_INITIALIZER;
static runner_pool_list_t  *runner_pool_lists;  /* one a pooled image */
static int                  runner_pool_nlists;
static int                  runner_pool_idle;   /* of all images */
static int64_t              runner_pool_taken_at;   /* ms: the last take */
static pthread_t            runner_pool_thread_id;
static int                  runner_pool_up;


/* whether --pool, --pool-images can hold with the other flags (main.c,
 * at start) */
int
runner_pool_check(char *err, size_t errlen)
{
    if (runner_config->pool_total == 0) {
        return RUNNER_OK;
    }

    if (strcmp(runner_config->backend, "swarm") == 0) {
        snprintf(err, errlen, "--pool: the swarm backend has no warm pool "
                 "(--backend docker, or --pool 0)");
        return RUNNER_ERR;
    }

    return RUNNER_OK;
}


/*
 * The network idle sandboxes wait on: the runner's (--network), or with
 * --egress-container one of the pool's own, smcp-pool-<name> (internal,
 * as a session's; the egress peer on it as "egress", so that an idle
 * one warms its OpenCode through it).  A taken one leaves it for its
 * session's network before anything of its run goes into it
 * (runner_pool_move).
 */
void
runner_pool_network(char *buf, size_t size)
{
    if (runner_config->egress_container[0]) {
        snprintf(buf, size, "smcp-pool-%s", runner_config->name);

    } else {
        snprintf(buf, size, "%s", runner_config->network);
    }
}


/* the pool's own network made and the egress peer on it (again after the
 * peer was recreated): --egress-container only */
static int
runner_pool_net_ensure(char *err, size_t errlen)
{
    char  net[RUNNER_NET_SIZE];

    if (runner_config->egress_container[0] == '\0') {
        return RUNNER_OK;
    }

    runner_pool_network(net, sizeof(net));

    return runner_backend->net(net, "pool", runner_config->egress_container,
                               err, errlen);
}


/*
 * A taken one (--egress-container) onto its session's network net, off
 * the pool's: the idle ones it waited beside never see its run.  On
 * failure it is the caller's to remove (it is the run's container).
 */
int
runner_pool_move(const runner_sandbox_t *sb, const char *net, char *err,
    size_t errlen)
{
    long  st;
    char  pool[RUNNER_NET_SIZE];

    if (runner_config->egress_container[0] == '\0') {
        return RUNNER_OK;
    }

    st = runner_docker_network_connect(net, sb->id, "sandbox", err, errlen);

    if (st != 200) {
        return RUNNER_ERR;
    }

    /* a held one may be another runner's: it waits on that one's */
    if (sb->net[0]) {
        snprintf(pool, sizeof(pool), "%s", sb->net);

    } else {
        runner_pool_network(pool, sizeof(pool));
    }

    st = runner_docker_network_disconnect(pool, sb->id, err, errlen);

    return st == 200 ? RUNNER_OK : RUNNER_ERR;
}


/* a pooled sandbox and its volume go: an idle one, or a taken one whose
 * session does not name its volume (run.c) */
void
runner_pool_drop(const runner_sandbox_t *sb)
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


/*
 * A sandbox that waits for a run, made and (start) started (sb->name its
 * container's name, sb->id set on RUNNER_OK): image's, on volume, with
 * labels (released), on the pool's network.  Nothing of a run: the entry
 * script waits for it; the egress URL (not a secret) lets it start and
 * warm OpenCode ahead, behind its relay; env_more ("NAME=value" or
 * NULL) says more of what it is.  Its stdin is open, once (OpenStdin,
 * StdinOnce): its run comes there (runner_pool_assign), and the label
 * smcp.handover says so (a runner that handed runs over otherwise does
 * not take it).  A failure leaves no container (the volume is the
 * caller's).
 */
int
runner_pool_sandbox(const char *image, const char *volume, json_t *labels,
    const char *env_more, int start, runner_sandbox_t *sb, char *err,
    size_t errlen)
{
    long     st;
    char     egress[1024], net[RUNNER_NET_SIZE];
    json_t  *env, *spec;

    sb->id[0] = '\0';

    if (runner_pool_net_ensure(err, errlen) != RUNNER_OK) {
        json_decref(labels);
        return RUNNER_ERR;
    }

    if (snprintf(egress, sizeof(egress), "SMCP_EGRESS_URL=%s",
                 runner_config->egress_url) >= (int) sizeof(egress))
    {
        json_decref(labels);
        snprintf(err, errlen, "egress url too long");
        return RUNNER_ERR;
    }

    env = json_pack("[s, s]", "SMCP_POOL=1", egress);

    if (env_more) {
        json_array_append_new(env, json_string(env_more));
    }

    json_object_set_new(labels, "smcp.runner",
                        json_string(runner_config->name));
    json_object_set_new(labels, "smcp.store", json_string(runner_store_id()));
    json_object_set_new(labels, "smcp.handover",
                        json_string(RUNNER_POOL_HANDOVER));

    runner_pool_network(net, sizeof(net));

    spec = runner_sandbox_spec(image, env, labels, volume, net);
    if (spec == NULL) {
        snprintf(err, errlen, "cannot build the container spec");
        return RUNNER_ERR;
    }

    json_object_set_new(spec, "OpenStdin", json_true());
    json_object_set_new(spec, "StdinOnce", json_true());

    st = runner_docker_create(spec, sb->name, sb->id, sizeof(sb->id), err,
                              errlen);
    json_decref(spec);

    if (st == 201) {
        st = start ? runner_docker_start(sb->id, err, errlen) : 204;

        if (st == 204 || st == 304) {
            return RUNNER_OK;
        }

        (void) runner_docker_remove(sb->id, err, errlen);
        sb->id[0] = '\0';
    }

    return RUNNER_ERR;
}


/*
 * A new one of image, with a fresh volume, started: RUNNER_OK with sb
 * set.  The volume is made first, labelled smcp.pool and smcp.store (as
 * the container): one whose container is gone is still found by them
 * (runner_pool_leftovers).
 */
static int
runner_pool_make(const char *image, runner_sandbox_t *sb, char *err,
    size_t errlen)
{
    long     st;
    char     hex[17];
    json_t  *labels;

    if (smcp_random_hex(hex, 8) != SMCP_OK) {
        snprintf(err, errlen, "no randomness");
        return RUNNER_ERR;
    }

    snprintf(sb->name, sizeof(sb->name), RUNNER_POOL_PREFIX "%s", hex);
    sb->id[0] = '\0';
    sb->net[0] = '\0';

    st = runner_docker_volume_make(sb->name,
                                   json_pack("{s:s, s:s}", "smcp.pool",
                                             runner_config->name,
                                             "smcp.store",
                                             runner_store_id()),
                                   err, errlen);

    if (st != 201) {
        runner_pool_drop(sb);       /* one no answer told of */
        return RUNNER_ERR;
    }

    /* what it was made of: a restart under other pools removes it all
     * the same (smcp.pool), and says what it was */
    labels = json_pack("{s:s, s:s}", "smcp.pool", runner_config->name,
                       "smcp.pool.image", image);

    if (runner_pool_sandbox(image, sb->name, labels, NULL, 1, sb, err,
                            errlen)
        == RUNNER_OK)
    {
        return RUNNER_OK;
    }

    runner_pool_drop(sb);

    return RUNNER_ERR;
}


/* takes sb off its idle list: 1 when it was on one */
static int
runner_pool_unlist(const runner_sandbox_t *sb)
{
    int                  i, j, found;
    runner_pool_list_t  *l;

    found = 0;

    pthread_mutex_lock(&runner_pool_lock);

    for (i = 0; !found && i < runner_pool_nlists; i++) {
        l = &runner_pool_lists[i];

        for (j = 0; j < l->n; j++) {
            if (strcmp(l->idle[j].id, sb->id) == 0) {
                l->idle[j] = l->idle[--l->n];
                runner_metrics_pool(--runner_pool_idle, 0);
                found = 1;
                break;
            }
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

    n = 0;

    pthread_mutex_lock(&runner_pool_lock);

    for (i = 0; i < runner_pool_nlists; i++) {
        memcpy(&list[n], runner_pool_lists[i].idle,
               runner_pool_lists[i].n * sizeof(runner_sandbox_t));
        n += runner_pool_lists[i].n;
    }

    pthread_mutex_unlock(&runner_pool_lock);

    for (i = 0; i < n; i++) {
        st = runner_docker_running(list[i].id, &running, err, sizeof(err));

        /* dockerd away: nothing is known; a run may have taken it */
        if ((st == 404 || (st == 200 && !running))
            && runner_pool_unlist(&list[i]))
        {
            runner_log("warn", NULL, "pool: sandbox %.12s stopped while "
                       "idle: replaced", list[i].id);
            runner_pool_drop(&list[i]);
        }
    }
}


/*
 * The volumes of pooled sandboxes left by a runner of this name without
 * their container (it stopped between the two removals, or between
 * making the volume and the container; a run's take whose session never
 * named it): labelled ours, used by no container, named by no session.
 * A taken one's volume is its session's workspace, used by no container
 * between the session's runs: the sessions' hashes are read (all of
 * them, at start only, and only when there is such a volume) and each
 * one a session names is kept.  Redis not answering keeps them all.
 */
static void
runner_pool_volumes(void)
{
    long             st;
    size_t           i;
    json_t          *list, *names, *v;
    const char      *name;
    char             err[RUNNER_ERRLEN], pool[192], store[128];
    runner_store_t  *rs;

    snprintf(pool, sizeof(pool), "smcp.pool=%s", runner_config->name);
    snprintf(store, sizeof(store), "smcp.store=%s", runner_store_id());

    if (runner_docker_volumes_unused(json_pack("[s, s]", pool, store),
                                     &list, err, sizeof(err))
        != 200)
    {
        runner_log("error", NULL, "pool: %s", err);
        return;
    }

    names = json_object();

    json_array_foreach(list, i, v) {
        name = json_string_value(v);

        if (strncmp(name, RUNNER_POOL_PREFIX,
                    sizeof(RUNNER_POOL_PREFIX) - 1) == 0
            && runner_docker_ref_ok(name, err, sizeof(err)))
        {
            json_object_set_new(names, name, json_true());
        }
    }

    json_decref(list);

    if (json_object_size(names) == 0) {
        json_decref(names);
        return;
    }

    rs = runner_store_connect(0, err, sizeof(err));

    if (rs == NULL || runner_store_session_unnamed(rs, names) != RUNNER_OK) {
        runner_log("warn", NULL, "pool: the volumes left by an earlier "
                   "runner are kept: the sessions' could not be read: %s",
                   rs ? runner_store_error(rs) : err);
        runner_store_close(rs);
        json_decref(names);
        return;
    }

    runner_store_close(rs);

    json_object_foreach(names, name, v) {
        st = runner_docker_volume_remove(name, err, sizeof(err));

        /* 409: a container uses it now */
        if (st != 204 && st != 404 && st != 409) {
            runner_log("error", NULL, "pool: %s", err);
            continue;
        }

        if (st == 204) {
            runner_log("info", NULL, "pool: removed volume %s, left "
                       "without its sandbox by an earlier runner", name);
        }
    }

    json_decref(names);
}


/*
 * Idle ones left by a runner of this name that stopped without removing
 * them (killed, crashed): removed with their volumes, then the volumes
 * left without theirs (runner_pool_volumes).  A taken one was renamed for
 * its run: its run's to end.
 */
static void
runner_pool_leftovers(void)
{
    size_t            i;
    json_t           *list, *ct, *names, *labels;
    const char       *id, *name, *store, *image;
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
        labels = json_object_get(ct, "Labels");
        store = json_string_value(json_object_get(labels, "smcp.store"));
        image = json_string_value(json_object_get(labels, "smcp.pool.image"));

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

        runner_log("info", NULL, "pool: removing sandbox %.12s of %.200s, "
                   "left idle by an earlier runner", id,
                   image ? image : "an image unknown");
        runner_pool_drop(&sb);
    }

    json_decref(list);

    runner_pool_volumes();
}


/*
 * The list to make one for now, or NULL: the image furthest from its N of
 * those due (a failed make waits RUNNER_POOL_RETRY_MS; after a take,
 * every one waits RUNNER_POOL_REFILL_MS: the taken run's first prompt,
 * OpenCode making its instance of the run's directory, goes first on
 * the cores, before a new one's OpenCode start, seconds of CPU).
 * *short_of: some list is below its N.  The lock held.
 */
static runner_pool_list_t *
runner_pool_due(int64_t now, int *short_of)
{
    int                  i, most;
    int64_t              due;
    runner_pool_list_t  *l, *pick;

    pick = NULL;
    most = 0;
    *short_of = 0;

    for (i = 0; i < runner_pool_nlists; i++) {
        l = &runner_pool_lists[i];

        if (l->n >= l->want) {
            continue;
        }

        *short_of = 1;
        due = l->next_make;

        if (due < runner_pool_taken_at + RUNNER_POOL_REFILL_MS) {
            due = runner_pool_taken_at + RUNNER_POOL_REFILL_MS;
        }

        if (now >= due && l->want - l->n > most) {
            most = l->want - l->n;
            pick = l;
        }
    }

    return pick;
}


static void *
runner_pool_thread(void *arg)
{
    int                  i, n, short_of;
    int64_t              now, next_check;
    char                 err[RUNNER_ERRLEN], net[RUNNER_NET_SIZE];
    struct timespec      ts;
    runner_sandbox_t     sb, list[RUNNER_POOL_MAX];
    runner_pool_list_t  *l;

    runner_pool_leftovers();

    next_check = smcp_now_ms() + RUNNER_POOL_CHECK_MS;

    /* a draining runner takes no new run: its idle sandboxes go */
    while (!atomic_load(&runner_stop) && !atomic_load(&runner_drain)) {
        now = smcp_now_ms();

        if (now >= next_check) {
            next_check = now + RUNNER_POOL_CHECK_MS;
            runner_pool_prune();
            runner_hold_sweep(0, NULL);
        }

        pthread_mutex_lock(&runner_pool_lock);
        l = runner_pool_due(now, &short_of);
        pthread_mutex_unlock(&runner_pool_lock);

        if (l) {
            /* l->image and l->next_make: never written by another */
            if (runner_pool_make(l->image, &sb, err, sizeof(err))
                != RUNNER_OK)
            {
                runner_log("error", NULL, "pool: %.200s: %s", l->image, err);
                l->next_make = now + RUNNER_POOL_RETRY_MS;
                continue;
            }

            pthread_mutex_lock(&runner_pool_lock);
            l->idle[l->n++] = sb;
            runner_metrics_pool(++runner_pool_idle, 0);
            pthread_mutex_unlock(&runner_pool_lock);

            continue;
        }

        if (short_of) {
            usleep(RUNNER_IDLE_MS * 1000);      /* a failed make, a take */
            continue;
        }

        /* all full: a take wakes it at once */
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += RUNNER_IDLE_MS * 1000000L;
        ts.tv_sec += ts.tv_nsec / 1000000000L;
        ts.tv_nsec %= 1000000000L;

        pthread_mutex_lock(&runner_pool_lock);
        (void) runner_pool_due(now, &short_of);

        if (!short_of) {
            (void) pthread_cond_timedwait(&runner_pool_cond,
                                          &runner_pool_lock, &ts);
        }

        pthread_mutex_unlock(&runner_pool_lock);
    }

    /* drained: the idle ones go */
    n = 0;

    pthread_mutex_lock(&runner_pool_lock);

    for (i = 0; i < runner_pool_nlists; i++) {
        l = &runner_pool_lists[i];
        memcpy(&list[n], l->idle, l->n * sizeof(runner_sandbox_t));
        n += l->n;
        l->n = 0;
    }

    runner_pool_idle = 0;
    runner_metrics_pool(0, 0);

    pthread_mutex_unlock(&runner_pool_lock);

    while (n-- > 0) {
        runner_pool_drop(&list[n]);
    }

    runner_hold_sweep(1, NULL);

    if (runner_config->egress_container[0]) {
        runner_pool_network(net, sizeof(net));

        if (runner_backend->net_drop(net, runner_config->egress_container,
                                     err, sizeof(err))
            == RUNNER_ERR)
        {
            runner_log("error", NULL, "pool: the network %s: %s", net, err);
        }
    }

    runner_log("info", NULL, "pool: drained");

    return NULL;
}


/* RUNNER_OK: the thread runs (or no pool: none needed) */
int
runner_pool_start(void)
{
    int                        i, rc;
    runner_pool_list_t        *lists;
    const runner_pool_size_t  *ps;

    if (runner_config->pool_total == 0) {
        return RUNNER_OK;
    }

    lists = calloc(runner_config->npools, sizeof(runner_pool_list_t));
    if (lists == NULL) {
        runner_log("error", NULL, "pool: out of memory");
        return RUNNER_ERR;
    }

    for (i = 0; i < runner_config->npools; i++) {
        ps = &runner_config->pools[i];
        lists[i].image = ps->image;
        lists[i].want = ps->n;
    }

    /* runs may be starting already: takes look at it under the lock */
    pthread_mutex_lock(&runner_pool_lock);
    runner_pool_lists = lists;
    runner_pool_nlists = runner_config->npools;
    pthread_mutex_unlock(&runner_pool_lock);

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


/* 1: new sessions' runs of image take pooled sandboxes */
int
runner_pool_has(const char *image)
{
    int  i;

    for (i = 0; i < runner_config->npools; i++) {
        if (runner_config->pools[i].n > 0
            && strcmp(runner_config->pools[i].image, image) == 0)
        {
            return 1;
        }
    }

    return 0;
}


/*
 * RUNNER_OK with sb: an idle one of image, now the caller's; RUNNER_AGAIN:
 * none (counted as the pool empty when image has a pool)
 */
int
runner_pool_take(const char *image, runner_sandbox_t *sb)
{
    int                  i, rc;
    runner_pool_list_t  *l;

    rc = RUNNER_AGAIN;
    l = NULL;

    pthread_mutex_lock(&runner_pool_lock);

    for (i = 0; i < runner_pool_nlists; i++) {
        if (runner_pool_lists[i].want > 0
            && strcmp(runner_pool_lists[i].image, image) == 0)
        {
            l = &runner_pool_lists[i];
            break;
        }
    }

    if (l && l->n > 0) {
        *sb = l->idle[--l->n];
        runner_pool_idle--;
        runner_pool_taken_at = smcp_now_ms();
        pthread_cond_signal(&runner_pool_cond);
        rc = RUNNER_OK;
    }

    if (l) {
        runner_metrics_pool(runner_pool_idle, rc != RUNNER_OK);
    }

    pthread_mutex_unlock(&runner_pool_lock);

    return rc;
}


/*
 * A taken one becomes run_id's: renamed smcp-<run id> (its name says it
 * is taken: runner_pool_leftovers leaves it; a held one was renamed at
 * its take), and given the run's environment (env, released) on its
 * stdin: each "NAME=value" entry with a NUL after it, then an empty one,
 * the end (stdin closes after it; the entry script takes a run only with
 * its end: one cut short is none).
 */
int
runner_pool_assign(const runner_sandbox_t *sb, const char *run_id,
    json_t *env, char *err, size_t errlen)
{
    long     st;
    size_t   i, len, n;
    char    *buf, name[96];
    json_t  *v;

    snprintf(name, sizeof(name), "smcp-%s", run_id);

    st = strcmp(sb->name, name) == 0
         ? 204 : runner_docker_rename(sb->id, name, err, errlen);

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

    len = 1;                        /* the end: an empty entry */

    json_array_foreach(env, i, v) {
        len += json_string_length(v) + 1;
    }

    buf = malloc(len);
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

    buf[len++] = '\0';
    json_decref(env);

    st = runner_attach_stdin(sb->id, buf, len, err, errlen);

    explicit_bzero(buf, len);       /* the run's token */
    free(buf);

    return st == 101 ? RUNNER_OK : RUNNER_ERR;
}
