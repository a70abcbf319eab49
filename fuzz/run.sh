#!/usr/bin/env bash
# Builds Warren's fuzz targets with libFuzzer's coverage instrumentation and runs each for a
# while. Works on stable Rust: these are the flags `cargo fuzz build --sanitizer none` passes,
# none of them unstable (a sanitizer would need nightly, and safe Rust gains little from one).
#   fuzz/run.sh [SECONDS_PER_TARGET] [TARGET...]     (default: 20 s, every target)
# New corpus entries go to fuzz/corpus/TARGET (kept between runs), the checked-in seeds are
# read from fuzz/seeds/TARGET, and a crash is written to fuzz/artifacts/TARGET/ and fails the run.
set -euo pipefail
cd "$(dirname "$0")"
seconds=${1:-20}
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(frames method field_table content_header connection amqp10_frames)
fi

host=$(rustc -vV | sed -n 's/^host: //p')
# The main target directory, so that a CI cache of it keeps this build too: with --target
# the instrumented crates go to target/HOST/, apart from the ordinary build.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$(cd .. && pwd)/target}"
export RUSTFLAGS="--cfg fuzzing -Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares -Cllvm-args=-sanitizer-coverage-stack-depth \
-Cllvm-args=-simplifycfg-branch-fold-threshold=0 -Cdebug-assertions -Coverflow-checks"
# --target keeps RUSTFLAGS off build scripts and proc macros, which are not linked to libFuzzer.
cargo build --release --locked --target "$host" $(printf -- '--bin %s ' "${targets[@]}")

status=0
for t in "${targets[@]}"; do
  mkdir -p "corpus/$t" "artifacts/$t" "seeds/$t"
  echo "== fuzz $t for ${seconds}s"
  if ! "$CARGO_TARGET_DIR/$host/release/$t" "corpus/$t" "seeds/$t" \
      -max_total_time="$seconds" -artifact_prefix="artifacts/$t/" -print_final_stats=1 \
      >"artifacts/$t.log" 2>&1; then
    status=1
    echo "fuzz $t found a crash:"; grep -E -A20 "panicked|ERROR|SUMMARY" "artifacts/$t.log" | head -40
  fi
  grep -E "^stat::number_of_executed_units|^stat::new_units_added" "artifacts/$t.log" | tr '\n' ' '
  echo
done
exit $status
