#!/usr/bin/env bash
# The cluster chaos suite at full length: three real `warren server` processes per test, 20
# rounds (WARREN_CHAOS_ROUNDS) of each failure — kill -9 the metadata leader, SIGSTOP a
# follower, partition the leader away (network namespaces: run as root, else those tests are
# skipped with the reason), wipe a node and let it join again — under the definitions workload,
# the message workload beside failing nodes, and the message workload through every node on a
# quorum queue whose leader, followers and nodes fail (test_cluster_quorum_chaos.py). Prints every test's report (acknowledged
# changes, retries, failover times, messages confirmed/received/duplicates) at the end.
#
#   tools/chaos.sh                 # debug build, 20 rounds
#   WARREN_CHAOS_ROUNDS=5 tools/chaos.sh -k partition
#
# Extra arguments go to pytest. WARREN_BIN picks another broker binary.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
if [ -z "${WARREN_BIN:-}" ]; then
  cargo build -p warren --quiet
  export WARREN_BIN="${CARGO_TARGET_DIR:-$root/target}/debug/warren"
fi
export WARREN_CHAOS_ROUNDS="${WARREN_CHAOS_ROUNDS:-20}"
export WARREN_CHAOS_REPORT="${WARREN_CHAOS_REPORT:-$(mktemp /tmp/warren-chaos-report-XXXXXX.jsonl)}"
venv="$root/tests/interop/.venv"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q -r tests/interop/requirements.txt
fi
status=0
(cd tests/interop && "$venv/bin/python" -m pytest py/test_cluster_chaos.py py/test_cluster_messages.py \
  py/test_cluster_quorum_chaos.py \
  -rs "$@") || status=$?
echo "== chaos reports ($WARREN_CHAOS_ROUNDS rounds each; $WARREN_CHAOS_REPORT)"
cat "$WARREN_CHAOS_REPORT"
exit $status
