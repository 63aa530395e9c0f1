#!/usr/bin/env bash
# C unit tests (t/unit/unit.c): Docker log framing, OpenCode outcome,
# base64url, JWT, UTF-8 repair.  Built with the project's warnings.
# make test-asan sets SMCP_UNIT_CC, SMCP_UNIT_CFLAGS (the sanitizers) and
# SMCP_UNIT_OUT (where that build goes).
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
. "$top/t/lib/cbuild.sh"
out=${SMCP_UNIT_OUT:-$top/build/unit-tests}
cbuild "$out" "the unit tests" "$top/t/unit/unit.c" \
    "$top/runner/logstream.c" "$top/runner/outcome.c" \
    "$top"/ngx_sandbox_mcp_module/common/*.c -ljansson -lcrypto -lhiredis
exec "$out"
