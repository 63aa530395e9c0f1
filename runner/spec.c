/*
 * A sandbox's container spec: what every sandbox gets, a run's (run.c)
 * or the pool's (pool.c): user, read-only root, the two tmpfs, the
 * limits, no capabilities, no new privileges, an init, the sandbox
 * network and its DNS, bounded logs, the volume at /workspace.
 */

#include <stdio.h>

#include "runner.h"


/*
 * A sandbox's container spec: the image, its environment and labels
 * (both released), the volume at /workspace, the network; the limits and
 * the lock-down every sandbox gets, a run's or the pool's.
 */
json_t *
runner_sandbox_spec(const char *image, json_t *env, json_t *labels,
    const char *volume, const char *net)
{
    char     buf[256];
    json_t  *binds;

    binds = json_array();
    snprintf(buf, sizeof(buf), "%s:/workspace", volume);
    json_array_append_new(binds, json_string(buf));

    return json_pack(
        "{s:s, s:s, s:s, s:o, s:o,"
        " s:{s:s, s:o, s:[s,s], s:b, s:I, s:I, s:I, s:I, s:b,"
        "    s:{s:s, s:s}, s:o, s:[s], s:[s],"
        "    s:{s:s, s:{s:s, s:s}}}}",
        "Image", image,
        "User", RUNNER_SANDBOX_USER,
        "WorkingDir", "/workspace",
        "Env", env,
        "Labels", labels,
        "HostConfig",
            "NetworkMode", net,
            "Dns", runner_config->dns[0]
                   ? json_pack("[s]", runner_config->dns) : json_array(),
            "DnsOptions", "timeout:1", "attempts:1",
            "Init", 1,
            "Memory", (json_int_t) runner_config->memory,
            "MemorySwap", (json_int_t) runner_config->memory,
            "NanoCpus", (json_int_t) runner_config->nano_cpus,
            "PidsLimit", (json_int_t) runner_config->pids,
            "ReadonlyRootfs", 1,
            "Tmpfs",
                "/tmp", RUNNER_SANDBOX_TMP,
                "/home/sandbox", RUNNER_SANDBOX_HOME,
            "Binds", binds,
            "CapDrop", "ALL",
            "SecurityOpt", "no-new-privileges",
            "LogConfig", "Type", "json-file", "Config",
                "max-size", RUNNER_SANDBOX_LOG_SIZE,
                "max-file", RUNNER_SANDBOX_LOG_FILES);
}
