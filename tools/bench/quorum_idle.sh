#!/usr/bin/env bash
# What idle quorum queues cost: a 3-node Warren cluster with N quorum queues (group size 3,
# so every node holds a member of every queue) and no clients, its processes' CPU and memory
# read from /proc while nothing happens (issue 11: "a node-level failure detector instead of
# per-group heartbeats, so 10,000 quorum queues on 3 nodes idle at low CPU").
#
# The queues are declared through the HTTP API (PUT /api/queues/%2F/NAME with
# x-queue-type=quorum), spread over the three nodes, several at a time; the script then waits
# until every node lists them all with 3 members and a leader, lets the cluster settle for
# SETTLE seconds, and samples each process's user+system CPU time over SECONDS. How long each
# thousand declarations took goes to stderr as they complete.
#
# Output: a markdown table, per node and in all: CPU in % of one core over the sample, RSS,
# and how many of the queues' leaders the node holds.
#
# Usage: tools/bench/quorum_idle.sh [QUEUES] [SECONDS]   (defaults 10000 and 30)
#   WARREN_PORT: first AMQP port (three consecutive; HTTP on +50.., cluster on +100..),
#     default 5897. SETTLE: seconds between the last declare and the sample (default 20).
#   PARALLEL: declares in flight (default 16). WARREN_BIN: a built warren to use instead of
#     building this checkout's release binary. KEEP: a directory to copy the node logs into.
set -euo pipefail
cd "$(dirname "$0")/../.."
queues=${1:-10000}
secs=${2:-30}
settle=${SETTLE:-20}
parallel=${PARALLEL:-16}
warren_port=${WARREN_PORT:-5897}
if [ -n "${WARREN_BIN:-}" ]; then
  warren=$WARREN_BIN
else
  cargo build --release -p warren --quiet
  warren="${CARGO_TARGET_DIR:-$(pwd)/target}/release/warren"
fi
work=$(mktemp -d /tmp/warren-qq-idle-XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  if [ -n "${KEEP:-}" ]; then mkdir -p "$KEEP" && cp "$work"/w*.log "$KEEP/" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

source tools/bench/warren_cluster.sh
start_warren_cluster || { echo "the cluster did not form (logs: KEEP=dir to keep them)" >&2; exit 1; }

echo "declaring $queues quorum queues ($parallel at a time) ..." >&2
start=$(date +%s)
QUEUES=$queues PARALLEL=$parallel PORTS="$(warren_http 0) $(warren_http 1) $(warren_http 2)" python3 - <<'EOF'
import base64, concurrent.futures, json, os, sys, time, urllib.request
ports = os.environ["PORTS"].split()
auth = "Basic " + base64.b64encode(b"guest:guest").decode()
body = json.dumps({"durable": True, "arguments": {"x-queue-type": "quorum"}}).encode()
def declare(i):
    for attempt in range(5):
        req = urllib.request.Request(
            f"http://127.0.0.1:{ports[i % 3]}/api/queues/%2F/idle-{i}", data=body, method="PUT",
            headers={"Authorization": auth, "Content-Type": "application/json"})
        try:
            urllib.request.urlopen(req, timeout=120).read()
            return
        except Exception as e:
            err = e
    raise SystemExit(f"declaring idle-{i}: {err}")
# Timed per thousand, so a declaration that gets slower as queues accumulate shows.
queues, chunk = int(os.environ["QUEUES"]), 1000
with concurrent.futures.ThreadPoolExecutor(int(os.environ["PARALLEL"])) as pool:
    for first in range(0, queues, chunk):
        started = time.monotonic()
        last = min(first + chunk, queues)
        list(pool.map(declare, range(first, last)))
        took = time.monotonic() - started
        print(f"declared {first + 1}-{last}: {took:.1f} s, {1000 * took / (last - first):.1f} ms each",
              file=sys.stderr)
EOF
echo "declared in $(($(date +%s) - start)) s; waiting for every node to list them on 3 members" >&2
listed() {
  api "$1" "/api/queues/%2F?columns=name,members,leader" |
    python3 -c 'import json,sys; print(sum(1 for q in json.load(sys.stdin) if q["name"].startswith("idle-") and len(q.get("members") or []) == 3 and q.get("leader")))'
}
for _ in $(seq 1 600); do
  [ "$(listed 0)" = "$queues" ] && [ "$(listed 1)" = "$queues" ] && [ "$(listed 2)" = "$queues" ] && break
  sleep 2
done
for i in 0 1 2; do
  n=$(listed "$i")
  [ "$n" = "$queues" ] || { echo "node w$i lists $n of $queues queues with 3 members and a leader" >&2; exit 1; }
done
sleep "$settle"

ticks=$(getconf CLK_TCK)
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
declare -a before after
for i in 0 1 2; do before[$i]=$(cpu_ticks "${pids[$i]}"); done
sleep "$secs"
for i in 0 1 2; do after[$i]=$(cpu_ticks "${pids[$i]}"); done
leaders=$(api 0 "/api/queues/%2F?columns=name,leader" |
  python3 -c 'import json,sys,collections; c=collections.Counter(q.get("leader") for q in json.load(sys.stdin) if q["name"].startswith("idle-")); print(" ".join(f"{k}={v}" for k,v in c.items()))')
echo "| node | CPU, % of one core | RSS | leaders |"
echo "| --- | ---: | ---: | ---: |"
total=0
for i in 0 1 2; do
  d=$((after[i] - before[i]))
  total=$((total + d))
  rss=$(awk '/VmRSS/ {printf "%.0f MiB", $2/1024}' "/proc/${pids[$i]}/status")
  lead=$(echo "$leaders" | tr ' ' '\n' | sed -n "s/^w$i@127.0.0.1=//p")
  printf '| w%s | %s %% | %s | %s |\n' "$i" "$(awk -v d="$d" -v t="$ticks" -v s="$secs" 'BEGIN{printf "%.1f", 100*d/t/s}')" "$rss" "${lead:-0}"
done
printf '| all three | %s %% | | %s |\n' "$(awk -v d="$total" -v t="$ticks" -v s="$secs" 'BEGIN{printf "%.1f", 100*d/t/s}')" "$queues"
echo "($queues quorum queues, idle; CPU over $secs s after $settle s of settling; $(nproc) cores; load average $(cut -d' ' -f1-3 /proc/loadavg))"
