#!/usr/bin/env bash
# The runner's Docker client (runner/docker.c, t/unit/docker.c) against the
# real dockerd: every call returns Docker's HTTP status and the decisions
# rest on statuses alone (create with a taken name 409, kill of a stopped
# container 409, remove 404, a volume in use 409, a network the peer is on
# already 403 then asked whether the peer is a member).  Needs dockerd and
# the base image ($SMCP_TEST_IMAGE, default smcp-base:bookworm); CI=true
# turns the skip into a failure.  Cleans up what it makes.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
image=${SMCP_TEST_IMAGE:-smcp-base:bookworm}
if [ ! -S /var/run/docker.sock ] || ! docker image inspect "$image" >/dev/null 2>&1; then
    if [ "${CI:-}" = true ]; then
        echo "1..1"; echo "not ok 1 - dockerd and $image under CI"; exit 1
    fi
    echo "1..0 # SKIP no dockerd or no $image"
    exit 0
fi
. "$top/t/lib/cbuild.sh"
out=${SMCP_UNIT_OUT:+$SMCP_UNIT_OUT-docker}
out=${out:-$top/build/unit-docker-tests}
cbuild "$out" "the Docker client tests" -pthread \
    "$top/t/unit/docker.c" "$top/runner/docker.c" \
    "$top/runner/logstream.c" "$top/runner/log.c" "$top/runner/metrics.c" \
    "$top"/ngx_sandbox_mcp_module/common/*.c -lhiredis -ljansson -lcrypto -lcurl
rc=0
"$out" "$image" || rc=$?
# whatever a failed run left behind
for c in $(docker ps -aq --filter "name=smcp-dtest-" 2>/dev/null); do docker rm -f "$c" >/dev/null 2>&1 || true; done
for n in $(docker network ls -q --filter "name=smcp-dtest-" 2>/dev/null); do docker network rm "$n" >/dev/null 2>&1 || true; done
for v in $(docker volume ls -q --filter "name=smcp-dtest-" 2>/dev/null); do docker volume rm -f "$v" >/dev/null 2>&1 || true; done
exit $rc
