#!/usr/bin/env bash
# Side-by-side PerfTest runs, Warren against RabbitMQ, in one go on this machine (the figures
# in docs/benchmarks.md). Starts a Warren release build and a throw-away RabbitMQ
# (../shared/tools/rabbitmq.sh), runs each experiment against both back to back, prints
# the load tool's summary lines and how many times better Warren's receive rate is than
# RabbitMQ's (above 1: Warren is better).
# Usage: tools/bench/side_by_side.sh [SECONDS] [perftest|warren]
#   perftest (default): RabbitMQ's PerfTest (Java) as the client;
#   warren: `warren perf` (same flags) as the client — it needs ~4× less CPU per message,
#   which matters on 2 cores shared by client and broker — plus a 4p/4c persistent run.
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-20}
client=${2:-perftest}
tools=../shared/tools
warren_port=5699
rabbit_port=5690
cargo build --release -p warren --quiet
warren="${CARGO_TARGET_DIR:-target}/release/warren"
data=$(mktemp -d /tmp/warren-bench-XXXXXX)
"$warren" server --bind 127.0.0.1 --amqp-port $warren_port --management-port 0 --prometheus-port 0 --data-dir "$data" >"$data/log" 2>&1 &
wpid=$!
trap 'kill $wpid 2>/dev/null; $tools/rabbitmq.sh stop $rabbit_port; rm -rf "$data"' EXIT
$tools/rabbitmq.sh start $rabbit_port >/dev/null
sleep 1

# run NAME FLAGS...: PerfTest against both brokers; prints receive rates and Warren's ratio.
run() {
  local name=$1; shift
  local rates=()
  for port in $warren_port $rabbit_port; do
    local out
    if [ "$client" = warren ]; then
      out=$("$warren" perf -h "amqp://guest:guest@127.0.0.1:$port" -z "$secs" "$@" 2>&1)
    else
      out=$($tools/perftest.sh --uri "amqp://guest:guest@127.0.0.1:$port" -z "$secs" "$@" 2>&1)
    fi
    local sent recv
    sent=$(echo "$out" | sed -n 's/.*sending rate avg: \([0-9]*\) msg\/s.*/\1/p' | tail -1)
    recv=$(echo "$out" | sed -n 's/.*receiving rate avg: \([0-9]*\) msg\/s.*/\1/p' | tail -1)
    echo "$name port $port: sending avg $sent msg/s, receiving avg $recv msg/s"
    echo "$out" | grep -E "^id: .*time" | tail -1 | sed 's/^/    last interval: /'
    rates+=("${recv:-0}")
  done
  python3 -c "w,r=$((rates[0])),$((rates[1])); print('$name: Warren %.1fx better than RabbitMQ (receive rate, higher is better)' % (w/max(r,1)))"
}

echo "== machine: $(nproc) cores, $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg)"
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
