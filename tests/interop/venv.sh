#!/usr/bin/env bash
# Creates (or refreshes, when requirements.txt changed) tests/interop/.venv: pika, pytest and
# the rest of requirements.txt, for the pika suite, the PerfTest check's queue inspection and
# test.sh's second pytest process. Idempotent and quiet when the venv is current.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="$here/.venv"
if [ ! -x "$venv/bin/python" ] || ! cmp -s "$here/requirements.txt" "$venv/.requirements.installed" \
   || ! "$venv/bin/python" -c "import pika, pytest, pytest_timeout, requests, prometheus_client, proton" 2>/dev/null; then
  python3 -m venv "$venv" || { echo "interop: cannot create venv"; exit 1; }
  "$venv/bin/pip" install -q -r "$here/requirements.txt" || { echo "interop: pip install failed"; exit 1; }
  cp "$here/requirements.txt" "$venv/.requirements.installed"
fi
