/*
 * The backends a run's sandbox can live on (runner.h, runner_backend_t):
 * `docker`, one container per run (docker.c's calls as they are), and
 * `swarm`, one service per run (swarm.c).  Chosen once by --backend,
 * before any thread starts.
 */

#include <string.h>

#include "runner.h"


static const runner_backend_t  runner_backend_docker = {
    "docker",
    runner_docker_create,
    runner_docker_start,
    runner_docker_kill,
    runner_docker_wait,
    runner_docker_remove,
    runner_docker_running,
    runner_docker_list,
    runner_docker_follow,
    runner_docker_valid_id,
    runner_docker_session_net,
    runner_docker_session_net_drop
};


const runner_backend_t  *runner_backend = &runner_backend_docker;


int
runner_backend_init(const char *name, char *err, size_t errlen)
{
    if (name[0] == '\0' || strcmp(name, "docker") == 0) {
        runner_backend = &runner_backend_docker;
        return RUNNER_OK;
    }

    if (strcmp(name, "swarm") == 0) {
        runner_backend = &runner_backend_swarm;
        return runner_swarm_init(err, errlen);
    }

    snprintf(err, errlen, "unknown backend \"%.32s\" (docker, swarm)", name);

    return RUNNER_ERR;
}
