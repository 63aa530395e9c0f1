/*
 * The runner's globals (runner/main.c) for the harnesses that link runner
 * files, as t/unit/unit.c defines them.  Included by one file per harness.
 */

#ifndef SMCP_FUZZ_RUNNER_GLOBALS_H
#define SMCP_FUZZ_RUNNER_GLOBALS_H

static runner_config_t  config;    /* what the tests set */

const runner_config_t  *runner_config = &config;
atomic_int              runner_stop;
atomic_int              runner_release_failed;

#endif /* SMCP_FUZZ_RUNNER_GLOBALS_H */
