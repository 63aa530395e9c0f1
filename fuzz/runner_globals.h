/*
 * The runner's globals (runner/main.c) for the harnesses that link runner
 * files, as t/unit/unit.c defines them.  Included by one file per harness.
 *
 * RUNNER_DIFF_PREFIX marks the runner.h of issue 7 (wt-runner): its flag
 * is a C11 atomic there.  The #else goes once that is merged.
 */

#ifndef SMCP_FUZZ_RUNNER_GLOBALS_H
#define SMCP_FUZZ_RUNNER_GLOBALS_H

runner_config_t        runner_config;
volatile sig_atomic_t  runner_stop;
#ifdef RUNNER_DIFF_PREFIX
atomic_int             runner_release_failed;
#else
volatile int           runner_release_failed;
#endif

#endif /* SMCP_FUZZ_RUNNER_GLOBALS_H */
