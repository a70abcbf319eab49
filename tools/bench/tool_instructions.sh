#!/usr/bin/env bash
# Instruction count of the load tool itself (`warren perf`, 1 producer, 1 consumer, 16 B
# transient, autoack — the headline row's client) per message, so a change to the tool is
# judged by a number rather than by its share of a noisy, shared machine's cores: the tool
# runs beside the broker on the same cores, so each instruction it saves per message raises
# the rate a 2-core machine can show.
#
# Starts a broker (BROKER_BIN, default this tree's release build; not under valgrind) and
# runs the tool (TOOL_BIN, default the same binary) under `valgrind --tool=callgrind` for two
# message counts (`-C`); the difference in instructions divided by the difference in
# messages is the tool's cost per message, start-up, connection set-up and drain left out
# (the drain's 50-ms polling and the 1-s interval reports still add a little noise, ~1 %).
# One start-up cost is not the same in both runs: the tool finds the broker's process by
# scanning /proc (`BrokerProcess::find_by_port`), which costs more the more processes the
# machine runs — on a shared machine 2 M instructions in one run and 236 M in the next — so
# its inclusive cost (callgrind_annotate) is taken out of each run's total.
#
# Usage: tools/bench/tool_instructions.sh            prints "tool instructions per message: N"
# Environment: BROKER_BIN, TOOL_BIN, PORT (default a random one in 20000–32767),
#   KEEP=DIR keeps the callgrind files there (for callgrind_annotate).
set -euo pipefail
cd "$(dirname "$0")/../.."
small=20000
large=120000

. tools/bench/callgrind/lib.sh
require_valgrind
if [ -z "${BROKER_BIN:-}" ] || [ -z "${TOOL_BIN:-}" ]; then
  cargo build --release -p warren --quiet
fi
built="${CARGO_TARGET_DIR:-target}/release/warren"
broker_bin=${BROKER_BIN:-$built}
tool_bin=${TOOL_BIN:-$built}
port=${PORT:-$(( 20000 + RANDOM % 12768 ))}
work=$(mktemp -d /tmp/warren-tool-callgrind-XXXXXX)
"$broker_bin" server --bind 127.0.0.1 --amqp-port "$port" --management-port 0 \
  --prometheus-port 0 --data-dir "$work/data" >"$work/broker.log" 2>&1 &
broker_pid=$!
trap 'kill $broker_pid 2>/dev/null || true; rm -rf "$work"' EXIT
for _ in $(seq 100); do
  (echo >"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
  sleep 0.1
done

# instructions MESSAGES: total instructions (callgrind's Ir) of one tool run, less the /proc scan.
instructions() {
  callgrind_total "$work/tool.$1" "$tool_bin" perf -h "amqp://guest:guest@127.0.0.1:$port" \
    -x 1 -y 1 -s 16 --autoack -u "tool-callgrind-$1" -C "$1" >"$work/total.$1"
  local scan
  scan=$(callgrind_annotate --inclusive=yes "$work/tool.$1.callgrind" 2>/dev/null |
    awk '/BrokerProcess::find_by_port/ { v = $1; gsub(",", "", v); if (v + 0 > m) m = v + 0 }
         END { print m + 0 }')
  echo $(( $(cat "$work/total.$1") - scan ))
}

total_small=$(instructions $small)
total_large=$(instructions $large)
echo "tool instructions per message: $(per_operation "$total_small" "$total_large" $small $large)"
if [ -n "${KEEP:-}" ]; then
  mkdir -p "$KEEP"
  cp "$work"/tool.*.callgrind "$KEEP"/
fi
