#!/usr/bin/env bash
# A short chaos soak (issue 24, point 1): bench/soak for SOAK_SECONDS (150)
# with a fault every 15 s, every kind fired at least once (runner killed
# and restarted, nginx reloaded, nginx restarted, a worker killed, Redis
# restarted from its AOF, every Redis connection cut), then its
# invariants: every run ended once, no event lost or stored twice, every
# pull request opened, nothing left behind, no file descriptor growth.
# `make soak` runs the long one.
#
# Needs root, Docker, `make` and redis-server, as the runner tests.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
export SOAK_SECONDS=${SOAK_SECONDS:-150} SOAK_FAULT_EVERY=${SOAK_FAULT_EVERY:-15}
export SOAK_CONCURRENCY=${SOAK_CONCURRENCY:-3} SOAK_DRAIN=${SOAK_DRAIN:-300}
exec perl -I"$top/t/lib" "$top/bench/soak"
