#!/bin/bash
# Issue 12's many-pairs traffic with no broker logic next to the real thing, in the same
# minutes: for each N, `BIN perf pairs-floor` (N sender and N receiver loopback TCP
# connections through a relay process that only forwards; direct, direct with an answer per
# message, and hand-off with an answer), then Warren itself with the many-pairs scenario over
# AMQP 0-9-1 and 1.0 (tools/bench/many_pairs_cpu_window.sh: CPU per message over a 14-s window
# of a 20-s step). The load average is printed before every run.
# usage: tools/bench/pairs_floor_side_by_side.sh BIN PORT "1000 5000 9900" [SECONDS] [WARMUP]
#   FLOOR_ONLY=1  skips the broker runs
set -u
BIN=$1; PORT=$2; NS=$3; SECONDS_=${4:-20}; WARMUP=${5:-5}
HERE=$(dirname "$0")
ulimit -n "$(ulimit -Hn)"
load() { echo "load $(cut -d' ' -f1-3 /proc/loadavg) at $(date -u +%H:%M:%S)"; }
for N in $NS; do
  echo "== N=$N"
  for FLAGS in "" "--ack" "--ack --handoff"; do
    load
    # shellcheck disable=SC2086
    "$BIN" perf pairs-floor --pairs "$N" --seconds "$SECONDS_" --warmup "$WARMUP" $FLAGS | tail -1
  done
  [ "${FLOOR_ONLY:-0}" = 1 ] && continue
  for PROTO in amqp091 amqp10; do
    load
    "$HERE/many_pairs_cpu_window.sh" "$BIN" "$PROTO" "$PORT" "$N" 14
    PORT=$((PORT + 1))
  done
done
load
