#!/usr/bin/env bash
# A process's CPU over a window, in % of one core: its user+system time (/proc/PID/stat,
# fields 14 and 15, in clock ticks) at the start and the end of SECONDS. For an idle broker
# with many queues (issue 30, docs/benchmarks.md "A million durable queues": idle CPU with
# the HTTP API on and off).
#
#   tools/bench/idle_cpu.sh PID [SECONDS]    (default 60)
set -euo pipefail
pid=$1 secs=${2:-60}
ticks() { awk '{ print $14 + $15 }' "/proc/$pid/stat"; }
hz=$(getconf CLK_TCK)
before=$(ticks)
sleep "$secs"
after=$(ticks)
awk -v a="$after" -v b="$before" -v hz="$hz" -v s="$secs" -v pid="$pid" \
  'BEGIN { printf "pid %s: %.2f s of CPU in %d s, %.2f %% of a core\n", pid, (a - b) / hz, s, 100 * (a - b) / hz / s }'
