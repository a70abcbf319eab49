#!/usr/bin/env bash
# RSS after a burst, Warren against RabbitMQ in one run (the "RSS after a 1000 B burst,
# queues empty, 30 s later" row of docs/benchmarks.md). For each broker and each variant
# (transient, persistent): publish N messages into a queue with no consumer (`warren perf
# -y 0 -C N`), consume them all back (`-x 0 -y 1 -D N`), wait IDLE_S seconds with the queue
# empty, and print the broker's VmRSS (and peak VmHWM) from /proc/PID/status.
# Usage: tools/bench/rss_after_burst.sh [MESSAGES] [SIZE_BYTES] [IDLE_S] [both|warren]
#   WARREN_BIN=path: use that binary instead of building a release one
#   PERF_BIN=path: the `warren` whose `perf` is the client (default WARREN_BIN)
#   WARREN_ENV="K=V ...": extra environment for the Warren broker only (e.g. LD_PRELOAD)
#   SHARED_TOOLS=dir: where rabbitmq.sh is (default ../shared/tools)
set -euo pipefail
cd "$(dirname "$0")/../.."
messages=${1:-1000000}
size=${2:-1000}
idle_s=${3:-30}
which=${4:-both}
# The shared tools sit next to the main checkout; from a worktree elsewhere, set SHARED_TOOLS.
tools=${SHARED_TOOLS:-../shared/tools}
warren_port=${WARREN_PORT:-5747}
rabbit_port=${RABBIT_PORT:-5748}
if [ -z "${WARREN_BIN:-}" ]; then
  cargo build --release -p warren --quiet
  WARREN_BIN="${CARGO_TARGET_DIR:-target}/release/warren"
fi
perf_bin=${PERF_BIN:-$WARREN_BIN}
data=$(mktemp -d /tmp/warren-rss-XXXXXX)
# shellcheck disable=SC2086 # WARREN_ENV is a list of K=V words
env ${WARREN_ENV:-} "$WARREN_BIN" server --bind 127.0.0.1 --amqp-port "$warren_port" \
  --management-port 0 --prometheus-port 0 --data-dir "$data" >"$data/log" 2>&1 &
wpid=$!
cleanup() {
  kill "$wpid" 2>/dev/null || true
  if [ "$which" = both ]; then $tools/rabbitmq.sh stop "$rabbit_port"; fi
  rm -rf "$data"
}
trap cleanup EXIT
brokers=("warren $warren_port $wpid")
if [ "$which" = both ]; then
  $tools/rabbitmq.sh start "$rabbit_port" >/dev/null
  rpid=$($tools/rabbitmq.sh ctl "$rabbit_port" eval 'os:getpid().' | tr -d '"')
  brokers+=("rabbitmq $rabbit_port $rpid")
fi
sleep 2

# mib PID FIELD: a /proc/PID/status field (VmRSS, VmHWM) in MiB.
mib() { awk -v f="$2:" '$1 == f { printf "%.0f", $2 / 1024 }' "/proc/$1/status"; }

# perf WHAT FLAGS...: a `warren perf` run, printing its summary line for WHAT (sending or
# receiving).
perf() {
  local what=$1; shift
  "$perf_bin" perf --quiet "$@" 2>&1 | grep -E "$what rate avg" | sed 's/^id: perf, //' || true
}

echo "== $(date -u +%FT%TZ) $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg);" \
  "burst $messages x $size B, idle ${idle_s} s"
for b in "${brokers[@]}"; do
  read -r name port pid <<<"$b"
  uri="amqp://guest:guest@127.0.0.1:$port"
  echo "$name: RSS at start $(mib "$pid" VmRSS) MiB"
  for variant in transient persistent; do
    queue="rss-burst-$variant"
    flags=()
    if [ "$variant" = persistent ]; then flags=(-f persistent -c 1000); fi
    perf sending -h "$uri" -x 1 -y 0 -s "$size" -C "$messages" -u "$queue" -ad false "${flags[@]}" |
      sed "s/^/  $name $variant publish: /"
    perf receiving -h "$uri" -x 0 -y 1 -D "$messages" -q 1000 -A 100 -u "$queue" -p |
      sed "s/^/  $name $variant drain: /"
    echo "  $name $variant: RSS right after drain $(mib "$pid" VmRSS) MiB"
    sleep "$idle_s"
    echo "$name $variant: RSS ${idle_s} s after drain $(mib "$pid" VmRSS) MiB" \
      "(peak VmHWM $(mib "$pid" VmHWM) MiB)"
  done
done
