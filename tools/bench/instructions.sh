#!/usr/bin/env bash
# Instruction count of the publish→deliver path, compared with the baseline in the repo, so a
# regression shows as a number rather than as noise in a msg/s figure on a shared machine.
#
# Runs crates/server/examples/publish_deliver.rs (a Warren connection over an in-memory pipe
# and a client on one thread: 16 B transient messages through the default exchange to a
# no-ack consumer) under `valgrind --tool=callgrind` at two message counts; the difference in
# instructions divided by the difference in messages is the cost of one message, start-up and
# handshake left out. Both ends run in the process, so the client's encoding of the publish and
# parsing of the delivery (~1/4 of the total) are counted too; only the broker's code changes
# between runs of this check, so a change in the number is the broker's.
#
# Usage: tools/bench/instructions.sh [--update]
#   prints "instructions per message: N (baseline M)"; exits 1 when N is more than
#   TOLERANCE_PERCENT (default 10) above M, 2 when valgrind is missing.
#   --update writes N into the baseline file (do it when a change is meant to cost more or
#   has made the path cheaper, and say so in the commit).
# Environment: KEEP=DIR keeps the two callgrind files there (for callgrind_annotate).
set -euo pipefail
cd "$(dirname "$0")/../.."
baseline_file=tools/bench/callgrind/baseline.txt
tolerance_percent=${TOLERANCE_PERCENT:-10}
small=2000
large=12000
body_bytes=16

. tools/bench/callgrind/lib.sh
require_valgrind
# The packages test.sh's release builds select, so that this reuses their build (cargo resolves
# features per selection: -p warren-server alone would compile it and its dependencies again).
cargo build --release -p warren -p warren-server -p warren-perf --example publish_deliver --quiet
exe="${CARGO_TARGET_DIR:-target}/release/examples/publish_deliver"
work=$(mktemp -d /tmp/warren-callgrind-XXXXXX)
trap 'rm -rf "$work"' EXIT

# instructions MESSAGES: total instructions (callgrind's Ir) of one run.
instructions() {
  callgrind_total "$work/run.$1" "$exe" "$1" "$body_bytes"
}

total_small=$(instructions $small)
total_large=$(instructions $large)
per_message=$(( (total_large - total_small) / (large - small) ))
if [ -n "${KEEP:-}" ]; then
  mkdir -p "$KEEP"
  cp "$work"/run.* "$KEEP"/
fi
baseline=$(sed -n 's/^publish_deliver_16B_no_ack \([0-9]*\)$/\1/p' "$baseline_file")

if [ "${1:-}" = "--update" ]; then
  sed -i "s/^publish_deliver_16B_no_ack [0-9]*$/publish_deliver_16B_no_ack $per_message/" "$baseline_file"
  echo "instructions per message: $per_message (baseline was $baseline; $baseline_file updated)"
  exit 0
fi

echo "instructions per message: $per_message (baseline $baseline)"
limit=$(( baseline + baseline * tolerance_percent / 100 ))
if [ "$per_message" -gt "$limit" ]; then
  echo "more than ${tolerance_percent}% above the baseline: the publish→deliver path got costlier" >&2
  exit 1
fi
if [ "$per_message" -lt $(( baseline - baseline * tolerance_percent / 100 )) ]; then
  echo "more than ${tolerance_percent}% below the baseline: run with --update to keep the gain" >&2
fi
