#!/usr/bin/env bash
# Confirmed publishing to quorum queues on a 3-node cluster, Warren against RabbitMQ 3.10.8,
# back to back in one run on this machine (issue 11's side-by-side figures in
# docs/benchmarks.md). Both clusters run on this one machine: three Warren processes (node
# names w0..w2, cluster ports on loopback) and three RabbitMQ nodes
# (tools/bench/rabbitmq_cluster.sh, a fresh cluster each run).
#
# Each row: PerfTest with Q producers on Q quorum queues (group size 3, the default of both),
# persistent messages, up to 1000 unconfirmed per producer (-c 1000), its connections spread
# over the three nodes (`--uris`; a producer on a follower's node goes through that node to the
# leader, on both brokers). No consumers: confirmed publishing into replicated queues is what is
# compared; the queues are capped at 100,000 messages (x-max-length, drop-head) so neither
# broker's memory fills. Both brokers place a queue's leader on the node its declaring
# connection is on (client-local, the default locator of both). After each row the script
# checks, on the broker's own view, that every queue has 3 members (Warren: GET /api/queues
# `members`; RabbitMQ: rabbitmqctl list_queues `members`, what rabbitmq-queues quorum_status
# lists), prints where the leaders were and deletes the queues; a row whose queues are not all
# on 3 members is marked and the script exits non-zero.
#
# Output: PerfTest's own figures (sending rate avg; confirm latency median and 99th percentile
# over the whole run) as a markdown table, then per row how many times better Warren did:
# its msg/s over RabbitMQ's, RabbitMQ's p99 over its (above 1: Warren lower). PerfTest's full
# output of every run is kept in OUT_DIR, and Warren's node logs.
#
# Usage: tools/bench/quorum_cluster_side_by_side.sh [SECONDS]
#   WARREN_PORT / RABBIT_PORT: the first AMQP port of each cluster (three consecutive ports
#     each; Warren also uses WARREN_PORT+50.. for HTTP and WARREN_PORT+100.. for the cluster
#     ports, RabbitMQ PORT+20000.. for Erlang distribution). Defaults 5797 / 5787.
#   QUEUES="1 10" and SIZES="1000 16" pick the rows; BROKERS="Warren RabbitMQ" the brokers.
#   SHARED_TOOLS: where rabbitmq.sh and perftest.sh are (default ../shared/tools).
#   OUT_DIR: where PerfTest's outputs go (default a new /tmp/qqc-bench-out-XXXXXX).
#   WARREN_BIN: a built warren to use instead of building this checkout's release binary.
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-20}
tools=$(cd "${SHARED_TOOLS:-../shared/tools}" && pwd)
warren_port=${WARREN_PORT:-5797}
rabbit_port=${RABBIT_PORT:-5787}
queues=${QUEUES:-1 10}
sizes=${SIZES:-1000 16}
brokers=${BROKERS:-Warren RabbitMQ}
out_dir=${OUT_DIR:-$(mktemp -d /tmp/qqc-bench-out-XXXXXX)}
mkdir -p "$out_dir"
if [ -n "${WARREN_BIN:-}" ]; then
  warren=$WARREN_BIN
else
  cargo build --release -p warren --quiet
  warren="${CARGO_TARGET_DIR:-$(pwd)/target}/release/warren"
fi
work=$(mktemp -d /tmp/warren-qqc-bench-XXXXXX)
echo "bench-secret-$(date +%s)" >"$work/secret"
pids=()
rabbit_started=""
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  if [ -n "$rabbit_started" ]; then
    RABBITMQ_SH="$tools/rabbitmq.sh" tools/bench/rabbitmq_cluster.sh stop "$rabbit_port" \
      >/dev/null 2>&1 || true
  fi
  cp "$work"/w*.log "$out_dir/" 2>/dev/null || true # Warren's node logs, beside PerfTest's
  rm -rf "$work"
}
trap cleanup EXIT
wants() { case " $brokers " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

# Warren: three nodes, each told the other two's cluster addresses.
source tools/bench/warren_cluster.sh
warren_uris=""
if wants Warren; then
  if ! start_warren_cluster; then
    echo "the Warren cluster did not form; node logs in $out_dir" >&2; exit 1
  fi
  for i in 0 1 2; do
    warren_uris+="${warren_uris:+,}amqp://guest:guest@127.0.0.1:$((warren_port + i))"
  done
fi
rabbit_uris=""
if wants RabbitMQ; then
  rabbit_started=yes
  rabbit_uris=$(RABBITMQ_SH="$tools/rabbitmq.sh" tools/bench/rabbitmq_cluster.sh start "$rabbit_port" 2>"$out_dir/rabbitmq-start.log")
fi
rabbit_node() { echo "rabbit$((rabbit_port + $1))@localhost"; }

# "3,3,3 members; leaders w0@…:10" for a row's queues (prefix) on one broker; deletes them.
check_and_delete() {
  local broker=$1 prefix=$2
  if [ "$broker" = Warren ]; then
    api 0 "/api/queues/%2F?columns=name,members,leader" | PREFIX=$prefix python3 -c '
import json, os, sys, collections
qs = [q for q in json.load(sys.stdin) if q["name"].startswith(os.environ["PREFIX"])]
sizes = collections.Counter(len(q.get("members") or []) for q in qs)
leaders = collections.Counter(q.get("leader") for q in qs)
print(" ".join(f"{n}x{m} members" for m, n in sorted(sizes.items())) + "; leaders " +
      " ".join(f"{l}:{n}" for l, n in sorted(leaders.items(), key=str)))
for q in qs: print(q["name"], file=sys.stderr)' 2>"$work/names"
    while read -r name; do api 0 "/api/queues/%2F/$name" -X DELETE >/dev/null || true; done <"$work/names"
  else
    "$tools/rabbitmq.sh" ctl "$rabbit_port" list_queues name members leader --formatter json -q |
      PREFIX=$prefix python3 -c '
import json, os, sys, collections
qs = [q for q in json.load(sys.stdin) if q["name"].startswith(os.environ["PREFIX"])]
sizes = collections.Counter(len(q["members"]) for q in qs)
leaders = collections.Counter(q["leader"] for q in qs)
print(" ".join(f"{n}x{m} members" for m, n in sorted(sizes.items())) + "; leaders " +
      " ".join(f"{l}:{n}" for l, n in sorted(leaders.items())))
for q in qs: print(q["name"], file=sys.stderr)' 2>"$work/names"
    while read -r name; do
      "$tools/rabbitmq.sh" ctl "$rabbit_port" delete_queue "$name" >/dev/null 2>&1 || true
    done <"$work/names"
  fi
}

echo "| queues | body | broker | confirmed msg/s | confirm p50 ms | confirm p99 ms | members / leaders |"
echo "|---|---|---|---:|---:|---:|---|"
summary=()
invalid=""
for q in $queues; do
  for size in $sizes; do
    declare -A rate=() p99=()
    for broker in $brokers; do
      uris=$([ "$broker" = Warren ] && echo "$warren_uris" || echo "$rabbit_uris")
      prefix="qqc-$q-$size-$(date +%s)-"
      log="$out_dir/$broker-$q-queues-$size-B.txt"
      if ! "$tools/perftest.sh" --uris "$uris" -z "$secs" -x "$q" -y 0 -c 1000 -s "$size" \
        -f persistent --quorum-queue --queue-args x-max-length=100000 \
        --queue-pattern "$prefix%d" --queue-pattern-from 1 --queue-pattern-to "$q" >"$log" 2>&1; then
        echo "PerfTest failed against $broker ($q queues, $size B); its output: $log" >&2
        tail -20 "$log" >&2
        exit 1
      fi
      rate[$broker]=$(sed -n 's/.*sending rate avg: \([0-9]*\) msg\/s.*/\1/p' "$log" | tail -1)
      # "confirm latency min/median/75th/95th/99th 1067/40330/54062/86023/106075 µs"
      read -r p50_us p99_us < <(grep "confirm latency min/median" "$log" | tail -1 |
        sed 's/.* \([0-9]*\)\/\([0-9]*\)\/[0-9]*\/[0-9]*\/\([0-9]*\) µs.*/\2 \3/')
      p99[$broker]=$p99_us
      placement=$(check_and_delete "$broker" "$prefix")
      if [[ "$placement" != "${q}x3 members;"* ]]; then
        placement+=" — NOT ALL ON 3 MEMBERS: this row does not count"
        invalid=yes
      fi
      printf '| %s | %s B | %s | %s | %s | %s | %s |\n' "$q" "$size" "$broker" "${rate[$broker]}" \
        "$(awk -v v="$p50_us" 'BEGIN{printf "%.1f", v/1000}')" \
        "$(awk -v v="$p99_us" 'BEGIN{printf "%.1f", v/1000}')" "$placement"
    done
    if [ -n "${rate[Warren]:-}" ] && [ -n "${rate[RabbitMQ]:-}" ]; then
      summary+=("$(awk -v q="$q" -v s="$size" -v w="${rate[Warren]}" -v r="${rate[RabbitMQ]}" \
        -v wp="${p99[Warren]}" -v rp="${p99[RabbitMQ]}" \
        'BEGIN{printf "| %s | %s B | %.1f× | %.1f× |", q, s, (r > 0 ? w / r : 0), (wp > 0 ? rp / wp : 0)}')")
    fi
  done
done
if [ ${#summary[@]} -gt 0 ]; then
  echo
  echo "| queues | body | Warren × better: msg/s | Warren × better: confirm p99 |"
  echo "|---|---|---:|---:|"
  printf '%s\n' "${summary[@]}"
fi
echo
echo "PerfTest outputs: $out_dir"
[ -z "$invalid" ]
