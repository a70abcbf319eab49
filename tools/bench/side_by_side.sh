#!/usr/bin/env bash
# Side-by-side PerfTest runs, Warren against RabbitMQ, in one go on this machine (the figures
# in docs/benchmarks.md). Starts a Warren release build and a throw-away RabbitMQ
# (../shared/tools/rabbitmq.sh), runs each experiment against both back to back, prints
# the load tool's summary lines and how many times better Warren's receive rate is than
# RabbitMQ's (above 1: Warren is better).
# Each row also prints both brokers' CPU per received message (utime+stime from
# /proc/PID/stat over the run, divided by receive rate × SECONDS).
# Usage: tools/bench/side_by_side.sh [SECONDS] [perftest|warren]
#   perftest (default): RabbitMQ's PerfTest (Java) as the client;
#   warren: `warren perf` (same flags) as the client — it needs ~4× less CPU per message,
#   which matters on 2 cores shared by client and broker — plus a 4p/4c persistent run.
# Environment: WARREN_BIN runs that binary instead of building this tree's (to measure
# another build, e.g. main's, in the same session); WARREN_PORT, RABBIT_PORT (5699, 5690)
# when those are taken by someone else's brokers.
# SHARED_TOOLS: where rabbitmq.sh and perftest.sh are (../shared/tools).
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-20}
client=${2:-perftest}
tools=${SHARED_TOOLS:-../shared/tools}  # /work/shared/tools from a worktree elsewhere
warren_port=${WARREN_PORT:-5699}
rabbit_port=${RABBIT_PORT:-5690}
if [ -n "${WARREN_BIN:-}" ]; then
  warren=$WARREN_BIN
else
  cargo build --release -p warren --quiet
  warren="${CARGO_TARGET_DIR:-target}/release/warren"
fi
clock_ticks=$(getconf CLK_TCK)
data=$(mktemp -d /tmp/warren-bench-XXXXXX)
"$warren" server --bind 127.0.0.1 --amqp-port $warren_port --management-port 0 --prometheus-port 0 --data-dir "$data" >"$data/log" 2>&1 &
wpid=$!
trap 'kill $wpid 2>/dev/null || true; $tools/rabbitmq.sh stop $rabbit_port; rm -rf "$data"' EXIT
$tools/rabbitmq.sh start $rabbit_port >/dev/null
rpid=$($tools/rabbitmq.sh ctl $rabbit_port eval 'os:getpid().' | tr -dc 0-9)
sleep 1

# cpu_ticks PID: user + system CPU the process has used so far, in clock ticks.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# run NAME FLAGS...: PerfTest against both brokers; prints receive rates and Warren's ratio.
run() {
  local name=$1; shift
  local rates=()
  for port in $warren_port $rabbit_port; do
    local out pid ticks_before ticks_after
    pid=$([ "$port" = "$warren_port" ] && echo "$wpid" || echo "$rpid")
    ticks_before=$(cpu_ticks "$pid")
    if [ "$client" = warren ]; then
      out=$("$warren" perf -h "amqp://guest:guest@127.0.0.1:$port" -z "$secs" "$@" 2>&1)
    else
      out=$($tools/perftest.sh --uri "amqp://guest:guest@127.0.0.1:$port" -z "$secs" "$@" 2>&1)
    fi
    ticks_after=$(cpu_ticks "$pid")
    local sent recv cpu
    sent=$(echo "$out" | sed -n 's/.*sending rate avg: \([0-9]*\) msg\/s.*/\1/p' | tail -1)
    recv=$(echo "$out" | sed -n 's/.*receiving rate avg: \([0-9]*\) msg\/s.*/\1/p' | tail -1)
    cpu=$(python3 -c "t=($ticks_after-$ticks_before)/$clock_ticks; print('%.0f %% CPU, %.2f µs/msg' % (100*t/$secs, 1e6*t/max(${recv:-0}*$secs,1)))")
    echo "$name port $port: sending avg $sent msg/s, receiving avg $recv msg/s, broker $cpu"
    echo "$out" | grep -E "^id: .*time" | tail -1 | sed 's/^/    last interval: /'
    rates+=("${recv:-0}")
  done
  python3 -c "w,r=$((rates[0])),$((rates[1])); print('$name: Warren %.1fx better than RabbitMQ (receive rate, higher is better)' % (w/max(r,1)))"
}

echo "== machine: $(nproc) cores, $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg)"
run "autoack 1p/1c 16B" -x 1 -y 1 -s 16 --autoack -u bench-autoack16
run "autoack 1p/1c 1000B" -x 1 -y 1 -s 1000 --autoack -u bench-autoack
run "persistent confirm100 manual-ack 1p/1c" -x 1 -y 1 -s 1000 -f persistent -c 100 -q 200 \
  -u bench-durable -ad false
run "persistent confirm100 manual-ack 4p/2c" -x 4 -y 2 -s 1000 -f persistent -c 100 -q 200 \
  -u bench-durable4 -ad false
if [ "$client" = warren ]; then
  run "persistent confirm100 manual-ack 4p/4c" -x 4 -y 4 -s 1000 -f persistent -c 100 -q 200 \
    -u bench-durable44 -ad false
fi
kill -INT $wpid; wait $wpid 2>/dev/null || true
grep "Warren stopped" "$data/log" | sed 's/\x1b\[[0-9;]*m//g' | sed 's/^/warren: /'
