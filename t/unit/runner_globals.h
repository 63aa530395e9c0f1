/*
 * The runner's globals (runner/main.c), for the programs that link runner
 * files without main.c: the unit tests here and the fuzz harnesses
 * (fuzz/).  Included by one file per program.
 */

#ifndef SMCP_RUNNER_GLOBALS_H
#define SMCP_RUNNER_GLOBALS_H

#include "runner.h"


static runner_config_t  config;    /* what the tests set */

const runner_config_t  *runner_config = &config;
atomic_int              runner_stop;
atomic_int              runner_drain;
atomic_int              runner_release_failed;


/* the runner's defaults (runner/config.c) of the limits tests change */
static void __attribute__((unused))
runner_unit_defaults(void)
{
    config.max_line = 256 * 1024;
    config.diff_max = 10 * 1024 * 1024;
    config.max_result = 256 * 1024;
}

#endif /* SMCP_RUNNER_GLOBALS_H */
