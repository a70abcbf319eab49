#!/usr/bin/env bash
# Runs every Warren test: generated-code freshness, formatting, the Rust unit and in-process
# integration tests, resource tests, a short fuzz run of every decoder, then a real broker
# process driven by real clients (pika, amqp091-go, RabbitMQ PerfTest, RabbitMQ's Java client)
# and by `warren perf`. Installs what it needs (Python venv, Go modules, PerfTest and
# amqp-client from Maven Central). Usage: ./test.sh
set -euo pipefail
cd "$(dirname "$0")"
root=$(pwd)

# Every phase prints how long the one before it took, and the end a table of all of them:
# CI's 20-minute budget is spent phase by phase (compare them with each other: the machine is
# shared, so absolute times vary from run to run).
phase_names=()
phase_seconds=()
phase_started=$SECONDS
phase_name=""
phase() {
  if [ -n "$phase_name" ]; then
    phase_names+=("$phase_name")
    phase_seconds+=($((SECONDS - phase_started)))
    echo "   ($phase_name: $((SECONDS - phase_started)) s)"
  fi
  phase_name="$1"
  phase_started=$SECONDS
  if [ -n "$1" ]; then echo "== $1"; fi
}
phase_table() {
  phase ""
  echo "== time per phase (s)"
  for i in "${!phase_names[@]}"; do printf '%6d  %s\n' "${phase_seconds[$i]}" "${phase_names[$i]}"; done
  printf '%6d  total\n' "$SECONDS"
}

# The debug test build (the largest compile here) with line tables only, the debug info a
# panic's backtrace needs, and no incremental state (a fresh CI clone never reuses it): a cold
# test build of warren-codec took 9 % less CPU time (56.6 → 51.7 s) and 28 % less disk.
export CARGO_PROFILE_DEV_DEBUG="${CARGO_PROFILE_DEV_DEBUG:-line-tables-only}"
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"

# Every release build below selects these packages, and each builds a test or an example (so
# dev-dependencies count): cargo resolves features per invocation, and builds that selected
# different packages got different features of shared crates (bytes, serde, tokio, …) and
# compiled warren-server 4 times, tokio and warren-codec 3 times, warren-broker twice (377
# release compilations; one selection: 279). tools/bench/instructions.sh selects the same.
release_packages=(-p warren -p warren-server -p warren-perf)

phase "generated code is current"
python3 tools/codegen/gen_methods.py --check

phase "cargo fmt"
cargo fmt --all -- --check
cargo fmt --manifest-path fuzz/Cargo.toml -- --check

phase "cargo test (unit, property and in-process integration tests)"
cargo test --workspace --quiet 2>&1 | tee /tmp/warren-cargo-test.log | grep -E "^test result|FAILED|panicked|error(\[|:)" || true
if grep -qE "^test result: FAILED|^error" /tmp/warren-cargo-test.log || ! grep -q "^test result" /tmp/warren-cargo-test.log; then
  tail -50 /tmp/warren-cargo-test.log
  echo "cargo test failed"; exit 1
fi

phase "resource tests (release build: they measure time)"
cargo test --release "${release_packages[@]}" --quiet --test wide_tables 2>&1 | tee /tmp/warren-resource-test.log | grep -E "^test result|FAILED|panicked|round trip|answered" || true
if ! grep -q "^test result: ok. 1 passed" /tmp/warren-resource-test.log; then
  tail -30 /tmp/warren-resource-test.log
  echo "resource tests failed"; exit 1
fi

phase "fuzzing every decoder for a short while (docs/FUZZING.md; the long run is 'just fuzz')"
fuzz/run.sh 20 || { echo "fuzzing found a crash"; exit 1; }

phase "building the release broker (and the instruction-count example)"
cargo build --release "${release_packages[@]}" --bin warren --example publish_deliver --quiet
warren="${CARGO_TARGET_DIR:-$root/target}/release/warren"

phase "instruction count of the publish→deliver path (tools/bench/instructions.sh, ~10 s)"
if command -v valgrind >/dev/null; then
  tools/bench/instructions.sh || { echo "the publish→deliver path costs more instructions than its baseline"; exit 1; }
else
  echo "skipped: valgrind is not installed"
fi

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
port=$(free_port)
mgmt_port=$(free_port)
prometheus_port=$(free_port)
data_dir=$(mktemp -d /tmp/warren-test-XXXXXX)
log="$data_dir/warren.log"
"$warren" server --bind 127.0.0.1 --amqp-port "$port" --management-port "$mgmt_port" \
  --prometheus-port "$prometheus_port" \
  --data-dir "$data_dir/data" >"$log" 2>&1 &
broker_pid=$!
cleanup() { kill "$broker_pid" 2>/dev/null || true; wait "$broker_pid" 2>/dev/null || true; }
trap cleanup EXIT
up=0
for _ in $(seq 1 100); do
  if (echo > /dev/tcp/127.0.0.1/"$port") 2>/dev/null; then up=1; break; fi
  sleep 0.1
done
if [ $up -eq 0 ]; then
  echo "the broker did not start; its log:"; cat "$log"; exit 1
fi
phase "real clients against the broker on port $port, HTTP API on $mgmt_port, Prometheus on $prometheus_port (log: $log)"

status=0
# The cluster chaos tests (test_cluster_chaos.py, test_cluster_messages.py,
# test_cluster_quorum_chaos.py) run a few rounds
# of each failure here; `tools/chaos.sh` (`just chaos`) runs the full 20.
export WARREN_CHAOS_ROUNDS="${WARREN_CHAOS_ROUNDS:-3}"
# The HTTP API tests (test_api_*.py, rabbitmqadmin) and the `warren ctl` tests (test_ctl.py)
# read WARREN_MGMT_URL, the Prometheus test (test_prometheus.py) WARREN_PROMETHEUS_URL; each
# skips without its URL.
AMQP_URL="amqp://guest:guest@127.0.0.1:$port/%2F" WARREN_MGMT_URL="http://127.0.0.1:$mgmt_port" \
  WARREN_PROMETHEUS_URL="http://127.0.0.1:$prometheus_port" \
  WARREN_BIN="$warren" tests/interop/run.sh || status=1

phase "warren perf against the broker"
# Its scenarios (tests/scenarios.rs); its unit tests ran with the workspace's above.
WARREN_PERF_TEST_URI="amqp://guest:guest@127.0.0.1:$port" WARREN_BIN="$warren" \
  cargo test --release "${release_packages[@]}" --quiet --test scenarios -- --include-ignored 2>&1 | tee /tmp/warren-perf-test.log | grep -E "^test result|FAILED|panicked" || true
grep -q "^test result: ok" /tmp/warren-perf-test.log && ! grep -q "^test result: FAILED" /tmp/warren-perf-test.log || status=1

phase "the web console in headless Chromium (tests/console)"
WARREN_MGMT_URL="http://127.0.0.1:$mgmt_port/" WARREN_AMQP_URL="amqp://guest:guest@127.0.0.1:$port/" \
  tests/console/run.sh || status=1

phase "kill -9 crash consistency (short run; the full one is tests/crash/kill9.py)"
python3 tests/crash/kill9.py --warren "$warren" --rounds 5 || status=1
python3 tests/crash/kill9.py --warren "$warren" --rounds 5 --lazy || status=1

if ! kill -0 "$broker_pid" 2>/dev/null; then
  echo "the broker died during the tests; its log:"; tail -50 "$log"; status=1
fi
if grep -q "panicked" "$log"; then
  echo "the broker panicked:"; grep -A5 panicked "$log"; status=1
fi

phase_table
if [ $status -eq 0 ]; then echo "test.sh: all tests passed"; else echo "test.sh: FAILED"; fi
exit $status
