/*
 * The host's floor: no sandbox starts while the disk the workspaces live
 * on (the engine's volumes directory, or --disk-path) has less than
 * --min-free-disk free, or Redis has less than --min-free-redis of its
 * maxmemory free.  A run that meets it is not claimed: it stays queued
 * (its entry pending, read again every second) with the reason as its
 * error, and starts once the floor is met again.  Runs already going are
 * not touched.  The main loop measures it, at most once a second; run
 * threads read what it found.
 */

#include <stdio.h>
#include <string.h>
#include <sys/statvfs.h>

#include "runner.h"


static char             runner_floor_path[512];    /* set before threads */
static pthread_mutex_t  runner_floor_lock = PTHREAD_MUTEX_INITIALIZER;
static int64_t          runner_floor_at;            /* ms of the last look:
                                                       the main loop's */
static int              runner_floor_rc;            /* guarded by the lock */
static char             runner_floor_why[RUNNER_ERRLEN];
static atomic_int       runner_floor_warned;


/* the path whose free disk counts: --disk-path, else the engine's
 * volumes directory (main.c, once, before any run thread) */
int
runner_floor_init(char *err, size_t errlen)
{
    long         st;
    json_t      *info;
    const char  *root;

    info = NULL;

    if (runner_config->disk_path[0]) {
        snprintf(runner_floor_path, sizeof(runner_floor_path), "%s",
                 runner_config->disk_path);
        return RUNNER_OK;
    }

    st = runner_docker_call("GET", "/info", NULL, RUNNER_DOCKER_QUICK_S,
                            &info, err, errlen);

    root = st == 200 ? json_string_value(json_object_get(info,
                                                         "DockerRootDir"))
                     : NULL;

    if (root == NULL || root[0] != '/') {
        json_decref(info);
        snprintf(err, errlen, "the engine's DockerRootDir is unknown");
        return RUNNER_ERR;
    }

    snprintf(runner_floor_path, sizeof(runner_floor_path), "%s/volumes",
             root);
    json_decref(info);

    return RUNNER_OK;
}


/* the look itself: RUNNER_OK, or RUNNER_AGAIN with why */
static int
runner_floor_measure(runner_store_t *st, char *why, size_t size)
{
    int64_t         free_disk, used, max;
    struct statvfs  fs;

    if (runner_config->min_free_disk > 0 && runner_floor_path[0]) {
        if (statvfs(runner_floor_path, &fs) != 0) {
            if (atomic_exchange(&runner_floor_warned, 1) == 0) {
                runner_log("warn", NULL, "the host floor's free disk is not "
                           "measured: %.100s cannot be read (a runner in a "
                           "container needs the engine's volumes directory "
                           "mounted, or --disk-path)", runner_floor_path);
            }

        } else {
            free_disk = (int64_t) fs.f_bavail * (int64_t) fs.f_frsize;

            if (free_disk < runner_config->min_free_disk) {
                snprintf(why, size, "waiting for the host: the free disk "
                         "of %.100s is below --min-free-disk (%lld bytes); the "
                         "run stays queued and starts once space is freed",
                         runner_floor_path,
                         (long long) runner_config->min_free_disk);
                return RUNNER_AGAIN;
            }
        }
    }

    if (runner_config->min_free_redis > 0
        && runner_store_memory(st, &used, &max) == RUNNER_OK && max > 0
        && max - used < runner_config->min_free_redis)
    {
        snprintf(why, size, "waiting for the host: Redis has less than "
                 "--min-free-redis (%lld bytes) of its maxmemory (%lld "
                 "bytes) free; the run stays queued and starts once memory "
                 "is freed (ended runs' keys expire after "
                 "sandbox_mcp_retention)",
                 (long long) runner_config->min_free_redis, (long long) max);
        return RUNNER_AGAIN;
    }

    return RUNNER_OK;
}


/* the main loop, every turn: the floor measured at most once a second,
 * each change logged */
void
runner_floor_update(runner_store_t *st)
{
    int      rc;
    int64_t  now;
    char     why[RUNNER_ERRLEN];

    now = smcp_now_ms();

    if (runner_floor_at && now - runner_floor_at < RUNNER_CHECK_MS) {
        return;
    }

    runner_floor_at = now;
    rc = runner_floor_measure(st, why, sizeof(why));

    pthread_mutex_lock(&runner_floor_lock);

    if (rc != runner_floor_rc) {
        runner_log("info", NULL, "host floor: %s", rc == RUNNER_OK
                   ? "met again: queued runs start" : why);
    }

    runner_floor_rc = rc;
    strcpy(runner_floor_why, rc == RUNNER_OK ? "" : why);

    pthread_mutex_unlock(&runner_floor_lock);
}


/* a run thread: RUNNER_OK, a sandbox may start; RUNNER_AGAIN, not now
 * (why says why) */
int
runner_floor_check(char *why, size_t size)
{
    int  rc;

    pthread_mutex_lock(&runner_floor_lock);
    rc = runner_floor_rc;
    snprintf(why, size, "%s", runner_floor_why);
    pthread_mutex_unlock(&runner_floor_lock);

    return rc;
}
