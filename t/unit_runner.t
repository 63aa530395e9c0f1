#!/usr/bin/env bash
# C unit tests of the runner (t/unit/runner.c): Docker log frames as a
# hostile sandbox shapes them, log escaping, agent events clamped, the diff
# index, the workspace walk.  Built with the project's warnings.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
. "$top/t/lib/cbuild.sh"
# make test-asan sets SMCP_UNIT_CC, SMCP_UNIT_CFLAGS (the sanitizers) and
# SMCP_UNIT_OUT (where that build goes; -runner is added here)
out=${SMCP_UNIT_OUT:+$SMCP_UNIT_OUT-runner}
out=${out:-$top/build/unit-runner-tests}
cbuild "$out" "the runner unit tests" -pthread -DSMCP_TOP="\"$top\"" \
    "$top/t/unit/runner.c" "$top/runner/logstream.c" \
    "$top/runner/outcome.c" "$top/runner/log.c" \
    "$top/runner/workspace.c" "$top/runner/config.c" \
    "$top/runner/metrics.c" \
    "$top"/ngx_sandbox_mcp_module/common/*.c -ljansson -lcrypto -lhiredis
exec "$out"
