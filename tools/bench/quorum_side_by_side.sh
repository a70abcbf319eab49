#!/usr/bin/env bash
# Confirmed publishing to one quorum queue, Warren against RabbitMQ 3.10.8, back to back in
# one run on this machine (the quorum-queue figures in docs/benchmarks.md). One PerfTest
# producer with up to 1000 unconfirmed messages and one auto-ack consumer, persistent
# messages of 1 KB and 16 B, `--quorum-queue` (a durable x-queue-type=quorum queue).
# Usage: tools/bench/quorum_side_by_side.sh [SECONDS]
#   WARREN_PORT / RABBIT_PORT pick the AMQP ports (defaults 5697 / 5688).
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-20}
tools=../shared/tools
warren_port=${WARREN_PORT:-5697}
rabbit_port=${RABBIT_PORT:-5688}
cargo build --release -p warren --quiet
warren="${CARGO_TARGET_DIR:-target}/release/warren"
data=$(mktemp -d /tmp/warren-qq-bench-XXXXXX)
"$warren" server --bind 127.0.0.1 --amqp-port "$warren_port" --management-port 0 \
  --prometheus-port 0 --data-dir "$data" >"$data/log" 2>&1 &
wpid=$!
trap 'kill $wpid 2>/dev/null; $tools/rabbitmq.sh stop $rabbit_port; rm -rf "$data"' EXIT
$tools/rabbitmq.sh start "$rabbit_port" >/dev/null
sleep 1

for size in 1000 16; do
  for port in $warren_port $rabbit_port; do
    name=$([ "$port" = "$warren_port" ] && echo Warren || echo RabbitMQ)
    out=$($tools/perftest.sh --uri "amqp://guest:guest@127.0.0.1:$port" -z "$secs" \
      -x 1 -y 1 -a -c 1000 -s "$size" -f persistent --quorum-queue -u "qq-bench-$size" 2>&1)
    rate=$(echo "$out" | sed -n 's/.*sending rate avg: \([0-9]*\) msg\/s.*/\1/p' | tail -1)
    confirm=$(echo "$out" | grep -i "confirm.*latency" | tail -1 | sed "s/^.*min\//min\//")
    echo "$size B $name: confirmed publish avg $rate msg/s; $confirm"
  done
done
