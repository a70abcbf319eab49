#!/usr/bin/env bash
# Issue 13's table ("Performance, round two") re-measured with one command: Warren and
# RabbitMQ 3.10.8 side by side in one run on this machine, `warren perf` as the client for
# both (it shares the 2 cores; its own CPU is printed per row). Prints a Markdown table:
# workload | Warren | RabbitMQ | Warren × better | command, where "× better" is Warren's rate
# over RabbitMQ's, or RabbitMQ's figure over Warren's for latency, CPU and memory (above 1:
# Warren is better).
#
# Rows (ROWS picks a subset, space-separated; default all, in this order):
#   autoack16    1p1c 16 B transient autoack, unlimited: receive rate; broker CPU per message
#                (publish + deliver: utime+stime over the run / messages received)
#   autoack1000  1p1c 1000 B transient autoack, unlimited: receive rate
#   persistent44 4p4c 1000 B persistent, one durable queue, confirms 1000 (-c 1000), qos 1000,
#                multi-ack 100: receive rate (Warren confirms after fsync)
#   latency      1p1c 1000 B autoack at 10k and at 50k msg/s (-r), x-max-length=10000 as the
#                seeds' publish-rate: consumer flight time p99 over the whole run, and the
#                largest per-second p99 (first second excluded)
#   oslo         oslo-rpc RPC call with 100 threads (`warren perf scenario oslo-rpc --modes
#                call --steps 100`): round trips per second, mean round trip
#   rss          tools/bench/rss_after_burst.sh (its own brokers): RSS 30 s after a 1000 B
#                burst with the queues empty
# Usage: tools/bench/issue13_table.sh [SECONDS] (default 30 per broker and row; the latency
# rows always run at least 30 s)
# Environment: WARREN_BIN (default: build this tree's release binary), PERF_BIN (the `warren`
# whose `perf` is the client, default WARREN_BIN: set it to compare two brokers' builds with one
# client), WARREN_PORT,
# RABBIT_PORT (AMQP ports, defaults 5721 / 5722; the rss row uses the next two), SHARED_TOOLS
# (where rabbitmq.sh is; default ../shared/tools), OUT (where the runs' JSON, the oslo report
# and the brokers' logs go; default a temporary directory, kept).
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-30}
rows=${ROWS:-autoack16 autoack1000 persistent44 latency oslo rss}
tools=${SHARED_TOOLS:-../shared/tools}
warren_port=${WARREN_PORT:-5721}
rabbit_port=${RABBIT_PORT:-5722}
if [ -z "${WARREN_BIN:-}" ]; then
  cargo build --release -p warren --quiet
  WARREN_BIN="${CARGO_TARGET_DIR:-target}/release/warren"
fi
perf_bin=${PERF_BIN:-$WARREN_BIN}
out=${OUT:-$(mktemp -d /tmp/warren-issue13-XXXXXX)}
mkdir -p "$out"
data=$(mktemp -d /tmp/warren-issue13-data-XXXXXX)
"$WARREN_BIN" server --bind 127.0.0.1 --amqp-port "$warren_port" --management-port 0 \
  --prometheus-port 0 --data-dir "$data" >"$out/warren.log" 2>&1 &
wpid=$!
trap 'kill $wpid 2>/dev/null || true; $tools/rabbitmq.sh stop $rabbit_port >/dev/null 2>&1 || true; rm -rf "$data"' EXIT
$tools/rabbitmq.sh start "$rabbit_port" >/dev/null
sleep 1
warren_uri="amqp://guest:guest@127.0.0.1:$warren_port"
rabbit_uri="amqp://guest:guest@127.0.0.1:$rabbit_port"

has_row() { [[ " $rows " == *" $1 "* ]]; }

# field FILE EXPR: a figure from a run's --json file (Python expression over `r`).
field() { python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print($2)" "$1"; }

# ratio A B: A/B to two places, "–" when B is 0.
ratio() { python3 -c "a,b=$1,$2; print('%.2f×' % (a/b) if b else '–')"; }

# perf NAME FLAGS...: the same `warren perf` run against Warren, then RabbitMQ; the JSON
# goes to $out/NAME.warren.json and $out/NAME.rabbitmq.json.
perf() {
  local name=$1; shift
  for b in warren rabbitmq; do
    local uri=$warren_uri
    [ "$b" = rabbitmq ] && uri=$rabbit_uri
    "$perf_bin" perf -h "$uri" --quiet --json "$out/$name.$b.json" "$@" \
      >"$out/$name.$b.txt" 2>&1 || { echo "run $name on $b failed:" >&2; cat "$out/$name.$b.txt" >&2; }
  done
}

# tool_cpu NAME: the load tool's CPU in both runs, "W / R %".
tool_cpu() {
  echo "$(field "$out/$1.warren.json" "'%.0f' % r['tool_cpu_percent']") / $(field "$out/$1.rabbitmq.json" "'%.0f' % r['tool_cpu_percent']") %"
}

echo "== $(date -u +%FT%TZ), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)," \
  "Warren $("$WARREN_BIN" --version 2>/dev/null || echo "$WARREN_BIN"), RabbitMQ 3.10.8;" \
  "$secs s per broker and row; runs in $out"
echo
echo "| workload | Warren | RabbitMQ | Warren × better | perf tool CPU (Warren / RabbitMQ run) | command (\`warren perf -h URI ...\`) |"
echo "| --- | ---: | ---: | ---: | ---: | --- |"

# rate_row LABEL NAME FLAGS...: a receive-rate row.
rate_row() {
  local label=$1 name=$2; shift 2
  perf "$name" -z "$secs" "$@"
  local w r
  w=$(field "$out/$name.warren.json" "round(r['receive_rate_per_s'])")
  r=$(field "$out/$name.rabbitmq.json" "round(r['receive_rate_per_s'])")
  echo "| $label | $w msg/s | $r msg/s | $(ratio "$w" "$r") | $(tool_cpu "$name") | \`-z $secs $*\` |"
}

# us_per_msg NAME BROKER: broker CPU (µs) per received message in that run.
us_per_msg() {
  field "$out/$1.$2.json" "'%.2f' % (r['broker_cpu_percent'] * 1e4 * r['duration_s'] / max(r['counts']['received'], 1))"
}

if has_row autoack16; then
  rate_row "1p1c 16 B transient autoack, unlimited" autoack16 -x 1 -y 1 -s 16 -a -u bench-autoack16
  w=$(us_per_msg autoack16 warren)
  r=$(us_per_msg autoack16 rabbitmq)
  echo "| broker CPU per 16 B message (publish + deliver), the run above | $w µs | $r µs | $(ratio "$r" "$w") | | (broker utime+stime / received) |"
fi
if has_row autoack1000; then
  rate_row "1p1c 1000 B transient autoack, unlimited" autoack1000 -x 1 -y 1 -s 1000 -a -u bench-autoack
fi
if has_row persistent44; then
  rate_row "4p4c 1000 B persistent, durable queue, confirms 1000, qos 1000, multi-ack 100" \
    persistent44 -x 4 -y 4 -s 1000 -f persistent -c 1000 -q 1000 -A 100 -u bench-durable44 -ad false
fi
if has_row latency; then
  lat_s=$((secs < 30 ? 30 : secs))
  for rate in 10000 50000; do
    name=latency$rate
    flags=(-x 1 -y 1 -s 1000 -r "$rate" -a -qa x-max-length=10000 -u "bench-latency-$rate")
    perf "$name" -z "$lat_s" "${flags[@]}"
    for what in "p99_us" "max_p99_us"; do
      expr="r['latency']['p99_us']"
      label="1000 B at $rate msg/s: consumer p99 (whole run)"
      if [ "$what" = max_p99_us ]; then
        expr="r['max_p99_us']"
        label="1000 B at $rate msg/s: consumer p99 (largest per-second p99)"
      fi
      w=$(field "$out/$name.warren.json" "'%.3f' % ($expr / 1000)")
      r=$(field "$out/$name.rabbitmq.json" "'%.3f' % ($expr / 1000)")
      echo "| $label | $w ms | $r ms | $(ratio "$r" "$w") | $(tool_cpu "$name") | \`-z $lat_s ${flags[*]}\` |"
    done
    w=$(field "$out/$name.warren.json" "round(r['receive_rate_per_s'])")
    r=$(field "$out/$name.rabbitmq.json" "round(r['receive_rate_per_s'])")
    echo "| (1000 B at $rate msg/s: achieved receive rate) | $w msg/s | $r msg/s | | | |"
  done
fi
if has_row oslo; then
  "$perf_bin" perf scenario oslo-rpc --uri "$warren_uri" --label warren \
    --compare "$rabbit_uri" --compare-label rabbitmq --modes call --steps 100 \
    --duration "$secs" --out "$out/oslo" >"$out/oslo.txt" 2>&1
  # The step summaries on stderr: "   sent S received R round-trip T lost L throughput N
  # msg/s latency mean M ms broker CPU Some(C)", Warren's first.
  mapfile -t oslo < <(grep -E '^ +sent .* throughput' "$out/oslo.txt")
  w=$(echo "${oslo[0]}" | sed -n 's/.*throughput \([0-9]*\) msg\/s.*/\1/p')
  r=$(echo "${oslo[1]}" | sed -n 's/.*throughput \([0-9]*\) msg\/s.*/\1/p')
  wl=$(echo "${oslo[0]}" | sed -n 's/.*latency mean \([0-9.]*\) ms.*/\1/p')
  rl=$(echo "${oslo[1]}" | sed -n 's/.*latency mean \([0-9.]*\) ms.*/\1/p')
  cmd="warren perf scenario oslo-rpc --modes call --steps 100 --duration $secs"
  echo "| oslo-rpc call, 100 threads: round trips/s | $w rt/s | $r rt/s | $(ratio "$w" "$r") | | \`$cmd\` |"
  echo "| oslo-rpc call, 100 threads: mean round trip | $wl ms | $rl ms | $(ratio "$rl" "$wl") | | (same run) |"
fi
kill -INT $wpid
wait $wpid 2>/dev/null || true
$tools/rabbitmq.sh stop "$rabbit_port" >/dev/null 2>&1 || true
if has_row rss; then
  WARREN_BIN=$WARREN_BIN PERF_BIN=$perf_bin WARREN_PORT=$((warren_port + 2)) RABBIT_PORT=$((rabbit_port + 2)) \
    SHARED_TOOLS=$tools tools/bench/rss_after_burst.sh 1000000 1000 30 both >"$out/rss.txt" 2>&1
  w=$(sed -n 's/^warren transient: RSS 30 s after drain \([0-9]*\) MiB.*/\1/p' "$out/rss.txt")
  r=$(sed -n 's/^rabbitmq transient: RSS 30 s after drain \([0-9]*\) MiB.*/\1/p' "$out/rss.txt")
  wp=$(sed -n 's/^warren persistent: RSS 30 s after drain \([0-9]*\) MiB.*/\1/p' "$out/rss.txt")
  rp=$(sed -n 's/^rabbitmq persistent: RSS 30 s after drain \([0-9]*\) MiB.*/\1/p' "$out/rss.txt")
  echo "| RSS 30 s after a 1M × 1000 B burst, queue empty (transient) | $w MiB | $r MiB | $(ratio "$r" "$w") | | \`tools/bench/rss_after_burst.sh 1000000 1000 30\` |"
  echo "| RSS 30 s after a 1M × 1000 B burst, queue empty (persistent, after the transient one) | $wp MiB | $rp MiB | $(ratio "$rp" "$wp") | | (same run) |"
fi
echo
echo "== done $(date -u +%FT%TZ), load average $(cut -d' ' -f1-3 /proc/loadavg)"
