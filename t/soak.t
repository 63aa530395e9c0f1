#!/usr/bin/env bash
# A short chaos soak (issue 24, point 1): bench/soak for SOAK_SECONDS (150)
# with a fault every 15 s and two runs in flight, every kind fired at
# least once (runner killed and restarted, nginx reloaded, nginx
# restarted, a worker killed, Redis restarted from its AOF, every Redis
# connection cut, a session's workspace filled past the limit), then its
# invariants: every run ended
# once, no event lost or stored twice, every pull request opened, runs in
# a full workspace failed saying so, nothing left behind (containers,
# volumes, queue entries, keys without an expiry), no file descriptor
# growth.  Not dockerd_restart: other files use the engine beside this
# one.  `make soak` runs the long one, with it.
#
# Needs root, Docker, `make` and redis-server, as the runner tests.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
export SOAK_SECONDS=${SOAK_SECONDS:-150} SOAK_FAULT_EVERY=${SOAK_FAULT_EVERY:-15}
export SOAK_CONCURRENCY=${SOAK_CONCURRENCY:-2} SOAK_DRAIN=${SOAK_DRAIN:-300}
export SOAK_FAULTS=${SOAK_FAULTS:-runner_kill,nginx_reload,nginx_restart,worker_kill,redis_restart,redis_cut,volume_full}
exec perl -I"$top/t/lib" "$top/bench/soak"
