#!/usr/bin/env bash
# C unit tests (t/unit/unit.c): Docker log framing, OpenCode outcome,
# base64url, JWT, UTF-8 repair.  Built with the project's warnings.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
out=$top/build/unit-tests
mkdir -p "$top/build"
if ! cc -O1 -g -Wall -Wextra -Wno-unused-parameter -Werror -D_GNU_SOURCE \
        -I"$top/ngx_sandbox_mcp_module/common" -I"$top/runner" \
        -o "$out" "$top/t/unit/unit.c" "$top/runner/logstream.c" \
        "$top/runner/outcome.c" "$top"/ngx_sandbox_mcp_module/common/*.c \
        -ljansson -lcrypto -lhiredis 2>"$top/build/unit-tests.log"; then
    echo "1..1"
    echo "not ok 1 - the unit tests build"
    sed 's/^/# /' "$top/build/unit-tests.log"
    exit 1
fi
exec "$out"
