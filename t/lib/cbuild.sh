# Sourced by the .t files that build a C test program (t/unit/*.c), after
# they set $top (the repository):
#
#   . "$top/t/lib/cbuild.sh"
#   cbuild OUT "the unit tests" SOURCES... [FLAGS...] [LIBRARIES...]
#
# builds OUT with the project's warnings, the headers of common/ and
# runner/, and what make test-asan sets (SMCP_UNIT_CC, SMCP_UNIT_CFLAGS).
# When it does not build: a failing TAP test with the compiler's words
# (they are in OUT.log too), and the script exits.

cbuild() {
    local out=$1 what=$2
    shift 2
    mkdir -p "$(dirname "$out")"
    if ! ${SMCP_UNIT_CC:-cc} -O1 -g ${SMCP_UNIT_CFLAGS:-} -Wall -Wextra \
            -Wno-unused-parameter -Werror -D_GNU_SOURCE \
            -I"$top/ngx_sandbox_mcp_module/common" -I"$top/runner" \
            -o "$out" "$@" 2>"$out.log"; then
        echo "1..1"
        echo "not ok 1 - $what build"
        sed 's/^/# /' "$out.log"
        exit 1
    fi
}
