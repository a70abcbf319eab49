#!/usr/bin/env bash
# Real-client interoperability suite: pika (pytest), amqp091-go (go test),
# RabbitMQ PerfTest and RabbitMQ's Java client (JUnit), all against the broker at $AMQP_URL
# (default amqp://guest:guest@127.0.0.1:5672/%2F).
#
#   AMQP_URL=amqp://guest:guest@127.0.0.1:5680/%2F tests/interop/run.sh
#
# With WARREN_PROMETHEUS_URL (http://host:15692) the pika suite also scrapes the broker's
# Prometheus endpoint (py/test_prometheus.py); without it that file is skipped.
#
# Needs Python 3.11, Go, Java 17 + Maven; installs pika/pytest into
# tests/interop/.venv and fetches Go modules / PerfTest / amqp-client on first use.
# Exits non-zero if any part fails. Set INTEROP_SKIP to a space-separated subset
# of "pika go perftest java" to skip parts. The java part leaves out the tests
# listed in java/pending-on-warren.txt unless JAVA_PENDING=run. INTEROP_PIKA_MARKERS, a pytest
# -m expression, selects part of the pika suite (test.sh runs the own_brokers files beside it).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export AMQP_URL="${AMQP_URL:-amqp://guest:guest@127.0.0.1:5672/%2F}"
skip=" ${INTEROP_SKIP:-} "
status=0
declare -a summary

echo "interop: broker $AMQP_URL"

# ---------------------------------------------------------------- venv
# (used by the pika suite and by the PerfTest check's queue inspection)
"$here/venv.sh" || exit 1
venv="$here/.venv"

# ---------------------------------------------------------------- pika
if [[ "$skip" != *" pika "* ]]; then
  echo "interop: === pika suite (pytest) ==="
  started=$SECONDS
  markers=()
  if [ -n "${INTEROP_PIKA_MARKERS:-}" ]; then markers=(-m "$INTEROP_PIKA_MARKERS"); fi
  (cd "$here" && "$venv/bin/python" -m pytest "${markers[@]}")
  rc=$?
  summary+=("pika: exit $rc in $((SECONDS - started)) s")
  [ $rc -eq 0 ] || status=1
fi

# ---------------------------------------------------------------- go
if [[ "$skip" != *" go "* ]]; then
  echo "interop: === Go suite (amqp091-go) ==="
  started=$SECONDS
  (cd "$here/go" && go mod download && go test -count=1 -timeout 180s ./...)
  rc=$?
  summary+=("go: exit $rc in $((SECONDS - started)) s")
  [ $rc -eq 0 ] || status=1
fi

# ---------------------------------------------------------------- perftest
if [[ "$skip" != *" perftest "* ]]; then
  echo "interop: === PerfTest check ==="
  started=$SECONDS
  PYTHON="$here/.venv/bin/python" "$here/perftest_check.sh"
  rc=$?
  summary+=("perftest: exit $rc in $((SECONDS - started)) s")
  [ $rc -eq 0 ] || status=1
fi

# ---------------------------------------------------------------- java
if [[ "$skip" != *" java "* ]]; then
  echo "interop: === Java suite (amqp-client, JUnit) ==="
  started=$SECONDS
  "$here/java/run.sh"
  rc=$?
  summary+=("java: exit $rc in $((SECONDS - started)) s")
  [ $rc -eq 0 ] || status=1
fi

echo "interop: ${summary[*]:-nothing run}"
if [ $status -eq 0 ]; then echo "interop: all parts passed"; else echo "interop: FAILED"; fi
exit $status
