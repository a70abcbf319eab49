#!/usr/bin/env bash
# Runs every Warren test: generated-code freshness, formatting, clippy, the Rust unit and in-process
# integration tests, resource tests, then a real broker process driven by real clients (pika,
# amqp091-go, RabbitMQ PerfTest, RabbitMQ's Java client) and by `warren perf`; beside those
# (they mostly wait) a short fuzz run of every decoder, the pika tests that start brokers of
# their own, the Java client's and amqp091-go's own test suites against Warrens of their own,
# and the kill -9 crash runs; last the Debian package (packaging/test_package.sh:
# built from the release binary, installed, run as its systemd unit would run it, purged).
# Installs what it needs (Python venv, Go modules, PerfTest and amqp-client from Maven
# Central). Usage: ./test.sh
set -euo pipefail
cd "$(dirname "$0")"
root=$(pwd)

# Every phase prints how long the one before it took, and the end a table of all of them:
# CI's 30-minute budget is spent phase by phase (compare them with each other: the machine is
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
  phase_names+=("${joined_names[@]}")
  phase_seconds+=("${joined_seconds[@]}")
  joined_names=()
  joined_seconds=()
  phase_name="$1"
  phase_started=$SECONDS
  if [ -n "$1" ]; then echo "== $1"; fi
}
phase_table() {
  phase ""
  echo "== time per phase (s; an indented line ran beside the phase above it)"
  for i in "${!phase_names[@]}"; do printf '%6d  %s\n' "${phase_seconds[$i]}" "${phase_names[$i]}"; done
  printf '%6d  total\n' "$SECONDS"
}

# This run's logs (cargo's and the jobs'): a directory of its own, since two runs may share /tmp.
logs=$(mktemp -d /tmp/warren-test-logs-XXXXXX)
echo "logs: $logs"

# Jobs beside a phase: the machine has 2 cores, and the real-client phase mostly waits (on
# timeouts, confirms, cluster elections), so CPU-bound work (fuzzing) and tests with brokers of
# their own run beside it instead of after it. A job's output goes to its own log, printed
# whole when the job is joined, so that concurrent output never interleaves; its time joins
# the phase table under the phase it ran beside. Each job owns its ports (bind-checked free
# ports) and data directories.
declare -A job_pids=() job_titles=()
joined_names=()
joined_seconds=()
# start_job KEY TITLE COMMAND...: runs COMMAND in the background, its output in KEY's log.
start_job() {
  local key=$1 title=$2
  shift 2
  (
    started=$SECONDS
    rc=0
    "$@" || rc=$?
    echo $((SECONDS - started)) >"$logs/$key.seconds"
    exit $rc
  ) >"$logs/$key.log" 2>&1 &
  job_pids[$key]=$!
  job_titles[$key]=$title
  echo "   (beside it: $title)"
}
# finish_job KEY: waits for the job, prints its log and time; its exit status is the job's.
finish_job() {
  local key=$1 rc=0 seconds
  wait "${job_pids[$key]}" || rc=$?
  unset "job_pids[$key]"
  seconds=$(cat "$logs/$key.seconds" 2>/dev/null || echo 0)
  echo "== ${job_titles[$key]} (ran beside the phase above; its output)"
  cat "$logs/$key.log"
  if [ $rc -eq 0 ]; then echo "   (${job_titles[$key]}: passed, $seconds s)"
  else echo "   (${job_titles[$key]}: FAILED, exit $rc, $seconds s)"; fi
  joined_names+=("  beside it: ${job_titles[$key]}")
  joined_seconds+=("$seconds")
  return $rc
}

# On an early exit, jobs still running beside a phase end too (with every process they
# started), and so do the brokers once they run.
kill_tree() {
  local child
  for child in $(pgrep -P "$1" 2>/dev/null); do kill_tree "$child"; done
  kill "$1" 2>/dev/null || true
}
# Brokers start_warren started (the shared one, the perf scenarios'), stopped at exit.
broker_pids=()
cleanup() {
  local pid
  for pid in "${job_pids[@]}"; do kill_tree "$pid"; done
  for pid in ${broker_pids[@]+"${broker_pids[@]}"}; do
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
}
trap cleanup EXIT

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
# The fuzz workspace builds --locked (fuzz/run.sh, 20 minutes in): a dependency added to a
# crate it uses must be in its lock file, said now rather than then.
cargo metadata --manifest-path fuzz/Cargo.toml --locked --format-version 1 >/dev/null ||
  { echo "fuzz/Cargo.lock is stale: run 'cargo metadata --manifest-path fuzz/Cargo.toml --format-version 1' and commit it"; exit 1; }

phase "cargo fmt"
cargo fmt --all -- --check
cargo fmt --manifest-path fuzz/Cargo.toml -- --check

phase "imports between files (tools/imports.py: no circle of more than 3 files, none up a floor in the broker)"
python3 tools/imports.py --check | grep -v "^  up:"

phase "cargo clippy (every crate and target, warnings are errors)"
# The release build runs beside clippy and the debug tests: a build leaves a core idle while
# one crate compiles or links alone, and the tests mostly wait; the debug and release builds
# lock separate directories. One cargo invocation for every release artifact (the resource
# test, the broker, the example): the phases below compile nothing.
# warren perf's scenarios are clients of a release broker (`warren` binary, started below) and
# measure nothing of their own: they run from the debug test build, which saves the release
# build a thin-LTO link of the whole program (93 s of CPU beside the broker's own 265 s, cargo
# --timings, 2026-12-01). The resource test stays a release build: it times a round trip
# beside four hostile peers, and a debug client's share brought its ratio next to the bound.
start_job release-build "the release broker, the instruction-count example and the resource test" \
  cargo build --release "${release_packages[@]}" --bin warren --example counted_ops \
  --test wide_tables --quiet
cargo clippy --workspace --all-targets --quiet -- -D warnings

phase "cargo test (unit, property and in-process integration tests)"
cargo test --workspace --quiet 2>&1 | tee "$logs/cargo-test.log" | grep -E "^test result|FAILED|panicked|error(\[|:)" || true
if grep -qE "^test result: FAILED|^error" "$logs/cargo-test.log" || ! grep -q "^test result" "$logs/cargo-test.log"; then
  tail -50 "$logs/cargo-test.log"
  echo "cargo test failed"; exit 1
fi

phase "the release build (started beside clippy and the debug tests)"
finish_job release-build || { echo "the release build failed"; exit 1; }
warren="${CARGO_TARGET_DIR:-$root/target}/release/warren"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# start_warren NAME: the release broker on free ports with a data directory of its own, as a
# user starts it; sets NAME_pid, NAME_port, NAME_mgmt_port, NAME_prometheus_port and NAME_log,
# and fails (printing its log) when it does not listen within 10 s.
start_warren() {
  local name=$1 dir amqp mgmt prom pid
  amqp=$(free_port)
  mgmt=$(free_port)
  prom=$(free_port)
  dir=$(mktemp -d "/tmp/warren-test-$name-XXXXXX")
  "$warren" server --bind 127.0.0.1 --amqp-port "$amqp" --management-port "$mgmt" \
    --prometheus-port "$prom" --data-dir "$dir/data" >"$dir/warren.log" 2>&1 &
  pid=$!
  broker_pids+=("$pid")
  printf -v "${name}_pid" %s "$pid"
  printf -v "${name}_port" %s "$amqp"
  printf -v "${name}_mgmt_port" %s "$mgmt"
  printf -v "${name}_prometheus_port" %s "$prom"
  printf -v "${name}_log" %s "$dir/warren.log"
  local _
  for _ in $(seq 1 100); do
    if (echo > /dev/tcp/127.0.0.1/"$amqp") 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  echo "the $name broker did not start; its log:"; cat "$dir/warren.log"
  return 1
}
# stop_warren NAME: stops a broker start_warren started; fails if it had panicked.
stop_warren() {
  local pid_var="${1}_pid" log_var="${1}_log"
  kill "${!pid_var}" 2>/dev/null || true
  wait "${!pid_var}" 2>/dev/null || true
  if grep -q "panicked" "${!log_var}"; then
    echo "the $1 broker panicked:"; grep -A5 panicked "${!log_var}"; return 1
  fi
}

phase "resource tests (release build: they measure time, so nothing runs beside them)"
cargo test --release "${release_packages[@]}" --quiet --test wide_tables 2>&1 | tee "$logs/resource-test.log" | grep -E "^test result|FAILED|panicked|round trip|answered" || true
if ! grep -q "^test result: ok. 1 passed" "$logs/resource-test.log"; then
  tail -30 "$logs/resource-test.log"
  echo "resource tests failed"; exit 1
fi

start_warren shared || exit 1
port=$shared_port
mgmt_port=$shared_mgmt_port
prometheus_port=$shared_prometheus_port
log=$shared_log
broker_pid=$shared_pid
phase "real clients against the broker on port $port, HTTP API on $mgmt_port, Prometheus on $prometheus_port (log: $log)"

status=0
# The cluster chaos tests (test_cluster_chaos.py, test_cluster_messages.py,
# test_cluster_quorum_chaos.py) run 2 rounds of each failure here, beside the Jepsen-style
# run's fixed seed (test_cluster_jepsen.py, 40 s of mixed faults); `tools/chaos.sh` (`just
# chaos`) runs the full 20 rounds, `just jepsen MINUTES` a long seeded run.
export WARREN_CHAOS_ROUNDS="${WARREN_CHAOS_ROUNDS:-2}"
export WARREN_BIN="$warren"
# Beside the shared broker's clients: the pika files marked own_brokers (pytest.ini), which
# start brokers and clusters of their own and never touch the shared broker (so they cannot
# disturb what the other clients assert about it), and the fuzzer, CPU-bound where the
# clients mostly wait. Every pika test runs in exactly one of the three pytest processes
# (-m own_brokers, split in two jobs by -k cluster, here; -m "not own_brokers" in
# tests/interop/run.sh). The cluster tests mostly wait (elections, faults held for seconds)
# and were the phase's tail when the own-broker tests ran in one process (606 s of a 618 s
# phase, CI run of 2026-11-29), so the rest of them runs in a second process beside; the
# publish-safety matrix (test_publish_safety.py, a cluster of its own) runs in that second
# one, which is the shorter.
tests/interop/venv.sh
start_job pika-own "pika: cluster tests (-m own_brokers -k cluster)" \
  env -C tests/interop .venv/bin/python -m pytest -m own_brokers -k cluster
start_job pika-own-single "pika: other tests with brokers of their own (-m own_brokers -k 'not cluster')" \
  env -C tests/interop .venv/bin/python -m pytest -m own_brokers -k "not cluster"
start_job fuzz "fuzzing every decoder for a short while (docs/FUZZING.md; the long run is 'just fuzz')" \
  fuzz/run.sh 20
# RabbitMQ's Java client's own suites (functional, client, server) and amqp091-go's own test
# run, each beside a Warren of its own in a network namespace of its own (they hard-code
# localhost:5672 and rabbitmqctl, which tests/interop/tools/rabbitmqctl answers with `warren
# ctl`); failures RabbitMQ shares or Warren's listed differences are in their
# known-failures.txt, anything else fails the job.
start_job java-suite "RabbitMQ's Java client's own test suites (tests/interop/java-suite)" \
  tests/interop/java-suite/run.sh warren
start_job go-suite "amqp091-go's own test suite, connection recovery included (tests/interop/go-suite)" \
  tests/interop/go-suite/run.sh warren
# The HTTP API tests (test_api_*.py, rabbitmqadmin) and the `warren ctl` tests (test_ctl.py)
# read WARREN_MGMT_URL, the Prometheus test (test_prometheus.py) WARREN_PROMETHEUS_URL; each
# skips without its URL.
AMQP_URL="amqp://guest:guest@127.0.0.1:$port/%2F" WARREN_MGMT_URL="http://127.0.0.1:$mgmt_port" \
  WARREN_PROMETHEUS_URL="http://127.0.0.1:$prometheus_port" \
  INTEROP_PIKA_MARKERS="not own_brokers" tests/interop/run.sh || status=1
finish_job pika-own-single || status=1
finish_job pika-own || status=1
finish_job fuzz || { echo "fuzzing found a crash"; status=1; }
finish_job java-suite || status=1
finish_job go-suite || status=1

phase "the web console in headless Chromium (tests/console)"
# warren perf's scenarios mostly wait (each quick row runs 2 s: 44 s of client CPU in a
# 266 s run), so they run beside the last phases, against a release broker of their own (they
# declare queues and load it, which the console's assertions about the shared broker must not
# see); so do the kill -9 runs (brokers of their own) and the instruction counts (the same on
# a busy machine: that is their point).
start_warren perf || exit 1
start_job perf "warren perf's scenarios (crates/perf/tests/scenarios.rs; its unit tests ran with the workspace's)" \
  env WARREN_PERF_TEST_URI="amqp://guest:guest@127.0.0.1:$perf_port" WARREN_BIN="$warren" \
  cargo test --workspace --quiet --test scenarios -- --include-ignored
start_job kill9 "kill -9 crash consistency (short run; the full one is tests/crash/kill9.py)" \
  bash -c 'python3 tests/crash/kill9.py --warren "$1" --rounds 5 && python3 tests/crash/kill9.py --warren "$1" --rounds 5 --lazy' _ "$warren"
if command -v valgrind >/dev/null; then
  start_job instructions "instruction counts of the broker's operations (tools/bench/instructions.sh)" \
    tools/bench/instructions.sh
else
  echo "instruction counts skipped: valgrind is not installed"
fi
WARREN_MGMT_URL="http://127.0.0.1:$mgmt_port/" WARREN_AMQP_URL="amqp://guest:guest@127.0.0.1:$port/" \
  tests/console/run.sh || status=1

phase "the Debian package (packaging/test_package.sh: README and man pages against --help; built, installed, started as its unit's ExecStart, stopped, purged)"
packaging/test_package.sh "$warren" || status=1

phase "the jobs started beside the console (their times below)"
finish_job kill9 || status=1
if command -v valgrind >/dev/null; then
  finish_job instructions || { echo "an operation costs more instructions than its baseline (or did not run)"; status=1; }
fi
# cargo test's exit status is the job's: a failed or unbuilt test fails it.
finish_job perf || status=1
stop_warren perf || status=1

if ! kill -0 "$broker_pid" 2>/dev/null; then
  echo "the broker died during the tests; its log:"; tail -50 "$log"; status=1
fi
stop_warren shared || status=1

phase_table
if [ $status -eq 0 ]; then echo "test.sh: all tests passed"; else echo "test.sh: FAILED"; fi
exit $status
