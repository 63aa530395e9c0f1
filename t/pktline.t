#!/usr/bin/env bash
# The receive-pack command-list check (ngx_sandbox_mcp_module/common/
# smcp_pktline.c), built with ASan and UBSan: exact cases, every
# truncation, random mutations (t/unit/pktline.c).
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
out=$top/build/pktline-tests
mkdir -p "$top/build"
if ! cc -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all \
        -Wall -Wextra -Wno-unused-parameter -Werror -D_GNU_SOURCE \
        -I"$top/ngx_sandbox_mcp_module/common" \
        -o "$out" "$top/t/unit/pktline.c" \
        "$top/ngx_sandbox_mcp_module/common/smcp_pktline.c" \
        2>"$top/build/pktline-tests.log"; then
    echo "1..1"
    echo "not ok 1 - the pkt-line tests build"
    sed 's/^/# /' "$top/build/pktline-tests.log"
    exit 1
fi
exec "$out" "${SMCP_FUZZ_ITERATIONS:-200000}"
