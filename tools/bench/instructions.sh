#!/usr/bin/env bash
# Instruction counts of the broker's operations, compared with baselines in the repo, so a
# regression shows as a number rather than as noise in a msg/s figure on a shared machine.
#
# Runs crates/server/examples/counted_ops (Warren connections over in-memory pipes and their
# clients on one thread, the broker's store and quorum log in a temporary directory; its
# module comments say what each operation does) under `valgrind --tool=callgrind`, each
# operation at two counts; the difference in instructions divided by the difference in
# operations is the cost of one, start-up and set-up left out (callgrind/lib.sh). Every
# thread is counted (the store's writer too); the time a fsync waits is not instructions.
# Both ends run in the process, so the client's encoding and parsing are counted too (~1/4 of
# publish→deliver); only the broker's code changes between runs of this check, so a change in
# a number is the broker's.
#
# publish-deliver-broker is publish-deliver's run counted inside the broker's connection
# tasks only (callgrind's --toggle-collect on `serve_stream`, which polls them): the broker's
# share of the figure, without the client's encoding and parsing.
#
# topic-route binds its patterns in a set-up that costs far more than the routes, so it is
# counted inside the routing loop only (callgrind's --toggle-collect) in one run, its small
# count 0; it binds 50,000 patterns, shaped so a route walks what it walks among 1,000,000
# (counted_ops/topic.rs; docs/benchmarks.md says how close).
#
# Usage: tools/bench/instructions.sh [--update] [OPERATION...]
#   prints "OPERATION: N instructions (baseline M)" per operation (default: all); exits 1
#   when an N is more than TOLERANCE_PERCENT (default 10) above its M, 2 when valgrind is
#   missing. --update writes the Ns into the baseline file (do it when a change is meant to
#   cost more or has made an operation cheaper, and say so in the commit).
# Environment: KEEP=DIR keeps the callgrind files there (for callgrind_annotate);
#   JOBS (default 2) runs under valgrind at once (the counts do not depend on it).
set -euo pipefail
cd "$(dirname "$0")/../.."
baseline_file=tools/bench/callgrind/baseline.txt
tolerance_percent=${TOLERANCE_PERCENT:-10}
jobs=${JOBS:-2}
export TOPIC_BINDINGS=50000

# OPERATION SMALL LARGE [CALLGRIND_OPTIONS], the longest runs first: the counts are sized so
# every run takes a few seconds under valgrind (the fsync-bound operations fewer).
operations=(
  "quorum-confirm 100 400"
  "topic-route 0 10000 --collect-atstart=no --toggle-collect=*counted_routes*"
  "publish-deliver 2000 12000"
  "publish-deliver-broker 2000 12000 --collect-atstart=no --toggle-collect=*serve_stream*"
  "amqp10-transfer 1000 6000"
  "persistent-confirm 100 600"
  "declare-durable 100 400"
  "declare 500 3000"
  "bind 500 3000"
)

update=false
if [ "${1:-}" = "--update" ]; then
  update=true
  shift
fi
selected=("$@")

. tools/bench/callgrind/lib.sh
require_valgrind
# The packages test.sh's release builds select, so that this reuses their build (cargo resolves
# features per selection: -p warren-server alone would compile it and its dependencies again).
cargo build --release -p warren -p warren-server -p warren-perf --example counted_ops --quiet
exe="${CARGO_TARGET_DIR:-target}/release/examples/counted_ops"
work=$(mktemp -d /tmp/warren-callgrind-XXXXXX)
trap 'rm -rf "$work"' EXIT

wanted() {
  [ ${#selected[@]} -eq 0 ] && return 0
  local s
  for s in "${selected[@]}"; do [ "$s" = "$1" ] && return 0; done
  return 1
}

for s in ${selected[@]+"${selected[@]}"}; do
  printf '%s\n' "${operations[@]}" | grep -q "^$s " || { echo "unknown operation $s" >&2; exit 2; }
done

# Every run in the background, at most $jobs at once; each writes its total to run.OP.COUNT.
for line in "${operations[@]}"; do
  read -r operation small large options <<<"$line"
  wanted "$operation" || continue
  for count in $small $large; do
    if [ "$count" -eq 0 ]; then
      echo 0 >"$work/run.$operation.0"
      continue
    fi
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
    CALLGRIND_OPTIONS="${options:-}" callgrind_total "$work/run.$operation.$count" \
      "$exe" "$operation" "$count" >"$work/run.$operation.$count" &
  done
done
while [ "$(jobs -rp | wc -l)" -gt 0 ]; do
  wait -n || { echo "a run under valgrind failed" >&2; exit 1; }
done

failed=0
for line in "${operations[@]}"; do
  read -r operation small large _ <<<"$line"
  wanted "$operation" || continue
  total_small=$(cat "$work/run.$operation.$small")
  total_large=$(cat "$work/run.$operation.$large")
  if [ -z "$total_small" ] || [ -z "$total_large" ]; then
    echo "$operation: no instruction count (see above)" >&2
    exit 1
  fi
  count=$(per_operation "$total_small" "$total_large" "$small" "$large")
  baseline=$(sed -n "s/^$operation \([0-9]*\)\$/\1/p" "$baseline_file")
  if $update; then
    if [ -n "$baseline" ]; then
      sed -i "s/^$operation [0-9]*\$/$operation $count/" "$baseline_file"
    else
      echo "$operation $count" >>"$baseline_file"
    fi
    echo "$operation: $count instructions (baseline was ${baseline:-none}; updated)"
    continue
  fi
  if [ -z "$baseline" ]; then
    echo "$operation: $count instructions (no baseline: run with --update)"
    failed=1
    continue
  fi
  echo "$operation: $count instructions (baseline $baseline)"
  if [ "$count" -gt $(( baseline + baseline * tolerance_percent / 100 )) ]; then
    echo "  more than ${tolerance_percent}% above the baseline: $operation got costlier" >&2
    failed=1
  elif [ "$count" -lt $(( baseline - baseline * tolerance_percent / 100 )) ]; then
    echo "  more than ${tolerance_percent}% below the baseline: run with --update to keep the gain" >&2
  fi
done
if [ -n "${KEEP:-}" ]; then
  mkdir -p "$KEEP"
  cp "$work"/*.callgrind "$KEEP"/
fi
exit $failed
