#!/usr/bin/env bash
# C unit tests (t/unit/common.c) of the validators and the diff parser in
# ngx_sandbox_mcp_module/common/: tenant and sandbox input, hostile cases.
# Built with the project's warnings and, where the compiler has them,
# AddressSanitizer and UBSan.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
. "$top/t/lib/cbuild.sh"
out=$top/build/unit-common
mkdir -p "$top/build"
san="-fsanitize=address,undefined -fno-omit-frame-pointer"
echo 'int main(void){return 0;}' >"$top/build/unit-common-probe.c"
if ! cc $san -o "$top/build/unit-common-probe" \
        "$top/build/unit-common-probe.c" 2>/dev/null; then
    san=
fi
cbuild "$out" "the unit tests" $san "$top/t/unit/common.c" \
    "$top"/ngx_sandbox_mcp_module/common/*.c -lhiredis -ljansson -lcrypto
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1 exec "$out"
