#!/usr/bin/env bash
# C unit tests (t/unit/unit.c): Docker log framing, OpenCode outcome,
# base64url, JWT, UTF-8 repair.  Built with the project's warnings.
# make test-asan sets SMCP_UNIT_CC, SMCP_UNIT_CFLAGS (the sanitizers) and
# SMCP_UNIT_OUT (where that build goes).
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
out=${SMCP_UNIT_OUT:-$top/build/unit-tests}
mkdir -p "$(dirname "$out")"
if ! ${SMCP_UNIT_CC:-cc} -O1 -g ${SMCP_UNIT_CFLAGS:-} -Wall -Wextra \
        -Wno-unused-parameter -Werror -D_GNU_SOURCE \
        -I"$top/ngx_sandbox_mcp_module/common" -I"$top/runner" \
        -o "$out" "$top/t/unit/unit.c" "$top/runner/logstream.c" \
        "$top/runner/outcome.c" "$top"/ngx_sandbox_mcp_module/common/*.c \
        -ljansson -lcrypto -lhiredis 2>"$out.log"; then
    echo "1..1"
    echo "not ok 1 - the unit tests build"
    sed 's/^/# /' "$out.log"
    exit 1
fi
exec "$out"
