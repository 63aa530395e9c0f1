#!/usr/bin/env bash
# C unit tests of the runner (t/unit/runner.c): Docker log frames as a
# hostile sandbox shapes them, log escaping, agent events clamped, the diff
# index, the workspace walk.  Built with the project's warnings.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
# make test-asan sets SMCP_UNIT_CC, SMCP_UNIT_CFLAGS (the sanitizers) and
# SMCP_UNIT_OUT (where that build goes; -runner is added here)
out=${SMCP_UNIT_OUT:+$SMCP_UNIT_OUT-runner}
out=${out:-$top/build/unit-runner-tests}
mkdir -p "$top/build" "$(dirname "$out")"
if ! ${SMCP_UNIT_CC:-cc} -O1 -g ${SMCP_UNIT_CFLAGS:-} -Wall -Wextra -Wno-unused-parameter -Werror -D_GNU_SOURCE \
        -pthread -DSMCP_TOP="\"$top\"" -I"$top/ngx_sandbox_mcp_module/common" -I"$top/runner" \
        -o "$out" "$top/t/unit/runner.c" "$top/runner/logstream.c" \
        "$top/runner/outcome.c" "$top/runner/log.c" \
        "$top/runner/workspace.c" "$top/runner/config.c" \
        "$top"/ngx_sandbox_mcp_module/common/*.c \
        -ljansson -lcrypto -lhiredis 2>"$top/build/unit-runner-tests.log"; then
    echo "1..1"
    echo "not ok 1 - the runner unit tests build"
    sed 's/^/# /' "$top/build/unit-runner-tests.log"
    exit 1
fi
exec "$out"
