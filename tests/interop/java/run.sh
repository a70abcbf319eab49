#!/usr/bin/env bash
# RabbitMQ's Java client (com.rabbitmq:amqp-client, JUnit 5) against the broker at $AMQP_URL
# (default amqp://guest:guest@127.0.0.1:5672/%2F; the client reads the vhost from the path).
#
# Tests listed in pending-on-warren.txt (behaviours Warren does not have yet) are left out
# with surefire's "-Dtest=!Class#method" patterns, and the script says how many; set
# JAVA_PENDING=run to run them too (e.g. against RabbitMQ, or to check what has landed).
#
# Maven keeps the pinned artifacts in ~/.m2: the first run fetches them, later runs work
# offline (an offline attempt comes first; only a missing artifact sends Maven online).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export AMQP_URL="${AMQP_URL:-amqp://guest:guest@127.0.0.1:5672/%2F}"
pending_file="$here/pending-on-warren.txt"

args=(-q -B -Dstyle.color=never test)
excluded=0
if [ "${JAVA_PENDING:-skip}" != "run" ]; then
  patterns=()
  while read -r test _reason; do
    case "$test" in ''|'#'*) continue ;; esac
    patterns+=("!$test")
  done <"$pending_file"
  excluded=${#patterns[@]}
  if [ "$excluded" -gt 0 ]; then
    args+=("-Dtest=$(IFS=,; echo "${patterns[*]}")")
  fi
fi

cd "$here" || exit 1
# Stale classes or reports of renamed tests must not linger (no maven-clean-plugin needed).
rm -rf target
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
# Maven 3.8 prints colour resets even in batch mode; they would garble the summary line.
plain() { sed -u 's/\x1b\[[0-9;]*m//g'; }
# With -q Maven only speaks about failures, so holding its output until it ends costs nothing
# and keeps the offline attempt's "not downloaded yet" complaint out of the way.
mvn -o "${args[@]}" >"$log" 2>&1
rc=$?
if [ "$rc" -ne 0 ] && grep -q "in offline mode" "$log"; then
  echo "java: fetching the pinned Maven artifacts into ~/.m2"
  mvn "${args[@]}" 2>&1 | plain
  rc=${PIPESTATUS[0]}
else
  plain <"$log"
fi

# Totals from the surefire reports (mvn -q prints nothing when all pass).
read -r tests failures errors skipped < <(
  cat target/surefire-reports/TEST-*.xml 2>/dev/null | grep -o '<testsuite [^>]*' |
    awk '{ for (i = 1; i <= NF; i++) { split($i, kv, "=\""); v = kv[2] + 0;
             if (kv[1] == "tests") t += v; if (kv[1] == "failures") f += v;
             if (kv[1] == "errors") e += v; if (kv[1] == "skipped") s += v } }
         END { print t + 0, f + 0, e + 0, s + 0 }')
echo "java: $tests tests run, $((failures + errors)) failed, $skipped skipped;" \
  "$excluded pending on Warren excluded (tests/interop/java/pending-on-warren.txt)"
exit "$rc"
