#!/usr/bin/env bash
# amqp091-go's OWN test suite (github.com/rabbitmq/amqp091-go v1.16.0, the version
# tests/interop/go pins: its unit tests and its `integration`-tagged tests, connection recovery
# among them) against a broker started for it, with `warren ctl` standing in for rabbitmqctl.
#
#   tests/interop/go-suite/run.sh            # against Warren ($WARREN_BIN, default target/debug/warren)
#   tests/interop/go-suite/run.sh rabbitmq   # the same tests against RabbitMQ 3.10.8, for comparison
#
# The module's source comes from the Go module proxy (go mod download), into a writable copy;
# the test binary is built outside the namespace, then runs beside a broker of its own in a
# network namespace of its own (../tools/netns_broker.sh): the tests hard-code localhost:5672
# and the management API on localhost:15672 (with RabbitMQ's trailing-slash paths). Failures
# that RabbitMQ shares or that are Warren's known differences are listed in
# known-failures.txt; the run fails on any other. GO_SUITE_RUN narrows it (go test -run).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
broker="${1:-warren}"
module=github.com/rabbitmq/amqp091-go@v1.16.0
started=$SECONDS

case "$broker" in
  warren)
    export WARREN_BIN="${WARREN_BIN:-$repo/target/debug/warren}"
    [ -x "$WARREN_BIN" ] || { echo "go-suite: no warren binary at $WARREN_BIN (set WARREN_BIN)" >&2; exit 1; } ;;
  rabbitmq) ;;
  *) echo "usage: $0 [warren|rabbitmq]" >&2; exit 2 ;;
esac

out="$here/target"
mkdir -p "$out"
if [ ! -x "$out/amqp091.test" ]; then
  dir="$(cd "$out" && GOFLAGS=-mod=mod go mod download -json "$module" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')"
  [ -d "$dir" ] || { echo "go-suite: could not download $module" >&2; exit 1; }
  rm -rf "$out/src" && cp -r "$dir" "$out/src" && chmod -R u+w "$out/src"
  (cd "$out/src" && go mod download && go test -c -tags integration -o "$out/amqp091.test" .) || exit 1
fi

log="$out/last-$broker.log"
# The suite runs some tests only against a server whose product is "RabbitMQ" (and one of
# them closes its connection only then, which goleak, run after every test, reports as a
# leak): Warren names itself that here, so those tests run against it too.
export WARREN_SERVER_ARGS="--server-property product=RabbitMQ"
run=()
[ -n "${GO_SUITE_RUN:-}" ] && run=(-test.run "$GO_SUITE_RUN")
# RABBITMQ_RABBITMQCTL_PATH: the suite's rabbitmqctl (its memory-alarm tests); the tests read
# their TLS files relative to the module's directory.
BROKER_LOG_COPY="$out/last-$broker-broker.log" "$here/../tools/netns_broker.sh" "$broker" \
  sh -c 'cd "$0" && binary="$1" && shift && RABBITMQ_RABBITMQCTL_PATH="$RABBITMQCTL" \
    AMQP_URL=amqp://guest:guest@127.0.0.1:5672/ exec "$binary" -test.v -test.count=1 -test.timeout 15m "$@"' \
  "$out/src" "$out/amqp091.test" "${run[@]}" \
  >"$log" 2>&1
rc=$?

python3 "$here/../tools/suite_outcomes.py" go-test "$log" "$here/known-failures.txt" "$broker" go-suite
verdict=$?
echo "go-suite: $broker run took $((SECONDS - started)) s (test binary exit $rc)"
exit $verdict
