#!/usr/bin/env bash
# The web console's browser test: headless Debian Chromium driven by playwright-core.
#
#   WARREN_MGMT_URL=http://127.0.0.1:15672/ tests/console/run.sh      # Warren's console
#   tests/console/run.sh quorum.test.mjs     # another scenario (see its header for its env)
#   CONSOLE_DEV_API=http://127.0.0.1:15672 tests/console/run.sh       # the assets under
#       crates/console served by devserver.mjs, /api forwarded to that API (e.g. RabbitMQ's)
#
# Installs chromium with apt-get when it is missing (skips, exit 0, only when it cannot) and
# playwright-core from package-lock.json. CONSOLE_SCREENSHOTS=DIR saves a screenshot of each
# main page (docs/console/ holds the committed ones). See console.test.mjs for the scenario.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
chromium="${CHROMIUM:-/usr/bin/chromium}"

if [ ! -x "$chromium" ]; then
  echo "console test: installing chromium"
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq chromium >/dev/null 2>&1 \
      || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq chromium >/dev/null 2>&1; } || true
  elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
    sudo -n env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null 2>&1 || true
  fi
fi
if [ ! -x "$chromium" ]; then
  echo "console test: SKIPPED: no $chromium, and installing Debian's chromium (root + apt-get) did not provide it"
  exit 0
fi
command -v node >/dev/null || { echo "console test: needs Node.js (node, npm)"; exit 1; }

# playwright-core at the version package-lock.json pins; reinstalled when the lock changes.
if ! cmp -s "$here/package-lock.json" "$here/node_modules/.package-lock.installed" 2>/dev/null; then
  (cd "$here" && npm ci --no-audit --no-fund --loglevel=error)
  cp "$here/package-lock.json" "$here/node_modules/.package-lock.installed"
fi

CHROMIUM="$chromium" exec node "$here/${1:-console.test.mjs}"
