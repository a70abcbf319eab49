#!/usr/bin/env bash
# RabbitMQ's Java client's OWN test suites (v5.35.0: FunctionalTestSuite, ClientTestSuite,
# ServerTestSuite) against a broker started for them, with `warren ctl` standing in for
# rabbitmqctl (./rabbitmqctl).
#
#   tests/interop/java-suite/run.sh            # against Warren ($WARREN_BIN, default target/debug/warren)
#   tests/interop/java-suite/run.sh rabbitmq   # the same suites against RabbitMQ 3.10.8, for comparison
#
# The suites hard-code localhost:5672, so each run gets a network namespace of its own
# (../tools/netns_broker.sh, as root): its broker listens on 5672 / 15672 there and nothing
# on the machine is in the way, nor sees it. Maven resolves and compiles outside the
# namespace (it needs the registry), then the tests run inside it offline. The last run's
# Maven output and broker log stay in target/last-BROKER.log and target/last-BROKER-broker.log.
#
# The test sources are the client's own, from its v5.35.0 tag (amqp-client-5.35.0-tests.tar.gz,
# `git archive v5.35.0 src/test` with the client's licences), compiled against the published
# amqp-client 5.35.0 jar. Tests failing on RabbitMQ too (the environment: no TLS listener,
# unserved test dependencies, Erlang `eval`s) and Warren's known differences are listed in
# known-failures.txt with the reason; the run fails on any failure not listed there and
# prints those listed that passed. JAVA_SUITE_TESTS replaces the suites (surefire -Dtest).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
broker="${1:-warren}"
tests="${JAVA_SUITE_TESTS:-FunctionalTestSuite,ClientTestSuite,ServerTestSuite}"
started=$SECONDS

case "$broker" in
  warren)
    export WARREN_BIN="${WARREN_BIN:-$repo/target/debug/warren}"
    [ -x "$WARREN_BIN" ] || { echo "java-suite: no warren binary at $WARREN_BIN (set WARREN_BIN)" >&2; exit 1; } ;;
  rabbitmq) ;;
  *) echo "usage: $0 [warren|rabbitmq]" >&2; exit 2 ;;
esac

# ---- sources: the client's tests, less the one the registry cannot feed (TLS logging needs
# wiremock, which it does not serve; the SSL suite is not run here anyway).
src="$here/target/suite-src"
if [ ! -f "$src/.unpacked" ]; then
  rm -rf "$src" && mkdir -p "$src"
  tar xzf "$here/amqp-client-5.35.0-tests.tar.gz" -C "$src" --strip-components=1 || exit 1
  rm "$src/src/test/java/com/rabbitmq/client/test/ssl/TlsConnectionLogging.java"
  sed -i '/TlsConnectionLogging.class/d' "$src/src/test/java/com/rabbitmq/client/test/ssl/SslTestSuite.java"
  touch "$src/.unpacked"
fi
# Some tests read their resources by relative path (./src/test/resources/...) from the
# directory Maven runs them in.
ln -sfn target/suite-src/src "$here/src"

# ---- compile (and fetch surefire's JUnit provider by running one broker-less test), online
# only when an artifact is missing from ~/.m2.
cd "$here" || exit 1
warm=(-B -q -Dstyle.color=never test -Dsuite.tests=AmqpUriTest)
if ! mvn -o "${warm[@]}" >/tmp/java-suite-warm.$$ 2>&1; then
  mvn "${warm[@]}" >/tmp/java-suite-warm.$$ 2>&1 || { cat /tmp/java-suite-warm.$$; rm -f /tmp/java-suite-warm.$$; exit 1; }
fi
rm -f /tmp/java-suite-warm.$$
reports="$here/target/reports-$broker"
rm -rf "$reports"

# ---- the run, beside a broker of its own in a network namespace of its own.
log="$here/target/last-$broker.log"
BROKER_LOG_COPY="$here/target/last-$broker-broker.log" "$here/../tools/netns_broker.sh" "$broker" \
  sh -c 'exec mvn -o -B -q -Dstyle.color=never surefire:test -Dsuite.tests="$0" \
    -Dsuite.reports="$1" -Drabbitmqctl.bin="$RABBITMQCTL" -Dtest-broker.A.nodename="$RABBITMQ_NODE"' \
  "$tests" "$reports" >"$log" 2>&1
rc=$?

# ---- every test case's outcome from the surefire reports, against the known failures.
python3 "$here/../tools/suite_outcomes.py" surefire "$reports" "$here/known-failures.txt" "$broker" java-suite
verdict=$?
echo "java-suite: $broker run took $((SECONDS - started)) s (maven exit $rc)"
exit $verdict
