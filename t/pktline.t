#!/usr/bin/env bash
# The receive-pack command-list check (ngx_sandbox_mcp_module/common/
# smcp_pktline.c, its hex digits smcp_util.c's), built with ASan and UBSan:
# exact cases, every truncation, random mutations (t/unit/pktline.c).
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
. "$top/t/lib/cbuild.sh"
out=$top/build/pktline-tests
cbuild "$out" "the pkt-line tests" -fsanitize=address,undefined \
    -fno-sanitize-recover=all "$top/t/unit/pktline.c" \
    "$top/ngx_sandbox_mcp_module/common/smcp_pktline.c" \
    "$top/ngx_sandbox_mcp_module/common/smcp_util.c" -lcrypto
exec "$out" "${SMCP_FUZZ_ITERATIONS:-200000}"
