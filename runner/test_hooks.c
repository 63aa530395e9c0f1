/*
 * Test hooks: in the test build only (`make runner-test`, which compiles
 * this file with -DRUNNER_TEST_HOOKS into build/test/smcp-runner, the
 * runner the tests that need a hook start).  The release build (`make`,
 * `make runner`, the runner image) has none of this code, and refuses to
 * start when an SMCP_RUNNER_TEST_* variable is set (config.c).
 *
 *   SMCP_RUNNER_TEST_HOLD_RUNNING=<s>  holds a run between its sandbox's
 *       start and `running` (at most 3600 s; SIGTERM ends the hold): the
 *       window a runner killed there leaves (t/runner_crash.t)
 */

#include <stdlib.h>
#include <unistd.h>

#include "runner.h"


void
runner_test_hold_running(runner_run_t *run)
{
    long         s, i;
    const char  *v;

    v = getenv("SMCP_RUNNER_TEST_HOLD_RUNNING");
    if (v == NULL) {
        return;
    }

    s = strtol(v, NULL, 10);

    if (s <= 0 || s > 3600) {
        return;
    }

    runner_log("warn", run->id, "test hook SMCP_RUNNER_TEST_HOLD_RUNNING: "
               "the run is held %ld s before `running`", s);

    for (i = 0; i < s && !atomic_load(&runner_stop); i++) {
        sleep(1);
    }
}
