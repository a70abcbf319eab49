#!/usr/bin/env bash
# many-pairs (issue 12, seed 004) against Warren and RabbitMQ side by side, both brokers with
# the same open-files limit (this machine's hard limit, 20,000), so that N above ~440 pairs
# is possible on RabbitMQ too.
#
# Why not ../shared/tools/rabbitmq.sh as it is: Debian's `rabbitmq-server` wrapper drops to
# the rabbitmq user with `su`, and su's PAM session resets the open-files soft limit to 1,024
# (RabbitMQ then allows ~900 sockets). Here the node is started with the same environment as
# rabbitmq.sh (node name, port, data under /tmp/rabbitmq-PORT) but through `setpriv`, which
# changes user and keeps the raised limit. The script prints RabbitMQ's own socket limit
# (`rabbitmqctl status`) so that the report can say where it caps N.
#
# usage: tools/bench/many_pairs_side_by_side.sh [STEPS] [SECONDS] [extra many-pairs args]
#   STEPS: comma-separated N (default 1000,2000,5000); SECONDS per step (default 20).
#   `--protocol amqp10` as an extra argument runs AMQP 1.0 clients (RabbitMQ with its
#   amqp1_0 plugin enabled).
# Environment: WARREN_BIN (default: this tree's release build, built if missing),
# WARREN_PORT / RABBIT_PORT (default: random free ports in 20000-32767), OUT (report dir).
set -euo pipefail
cd "$(dirname "$0")/../.."
steps=${1:-1000,2000,5000}
secs=${2:-20}
shift 2 2>/dev/null || shift $#
free_port() {
  local p
  while :; do
    p=$((20000 + RANDOM % 12000))
    # RabbitMQ also takes PORT + 20000 for Erlang distribution.
    if ! ss -ltn | grep -qE ":($p|$((p + 20000))) "; then echo $p; return; fi
  done
}
warren_port=${WARREN_PORT:-$(free_port)}
rabbit_port=${RABBIT_PORT:-$(free_port)}
if [ -n "${WARREN_BIN:-}" ]; then
  warren=$WARREN_BIN
else
  cargo build --release -p warren --quiet
  warren="${CARGO_TARGET_DIR:-target}/release/warren"
fi
out=${OUT:-$(mktemp -d /tmp/many-pairs-sbs-XXXXXX)}
ulimit -n "$(ulimit -Hn)"
limit=$(ulimit -n)

data=$(mktemp -d /tmp/warren-mp-XXXXXX)
"$warren" server --bind 127.0.0.1 --amqp-port "$warren_port" --management-port 0 \
  --prometheus-port 0 --data-dir "$data" >"$data/log" 2>&1 &
wpid=$!

node="rabbit${rabbit_port}@localhost"
base="/tmp/rabbitmq-${rabbit_port}"
stop_all() {
  kill "$wpid" 2>/dev/null || true
  rabbitmqctl -n "$node" stop >/dev/null 2>&1 || true
  rm -rf "$data"
}
trap stop_all EXIT
if ! command -v rabbitmq-server >/dev/null; then
  echo "RabbitMQ is not installed: ../shared/tools/rabbitmq.sh start PORT installs it" >&2; exit 1
fi
mkdir -p "$base/db" "$base/log"
# Over AMQP 1.0 (`--protocol amqp10` among the extra arguments) RabbitMQ 3.x needs its
# amqp1_0 plugin; the tool then addresses queues as `/amq/queue/<q>` (its --amqp10-address
# auto reads the broker's version).
case " $* " in
  *" amqp10 "*|*"--protocol=amqp10"*) echo '[rabbitmq_amqp1_0].' >"$base/enabled_plugins" ;;
  *) rm -f "$base/enabled_plugins" ;;
esac
chown -R rabbitmq:rabbitmq "$base"
# The environment rabbitmq.sh gives the node; setpriv instead of su keeps `ulimit -n`.
(cd /var/lib/rabbitmq && env HOME=/var/lib/rabbitmq \
  RABBITMQ_NODENAME="$node" RABBITMQ_NODE_PORT="$rabbit_port" \
  RABBITMQ_DIST_PORT=$((rabbit_port + 20000)) \
  RABBITMQ_MNESIA_BASE="$base/db" RABBITMQ_LOG_BASE="$base/log" \
  RABBITMQ_ENABLED_PLUGINS_FILE="$base/enabled_plugins" ERL_CRASH_DUMP="$base/erl_crash.dump" \
  setpriv --reuid=rabbitmq --regid=rabbitmq --init-groups \
  nohup /usr/lib/rabbitmq/bin/rabbitmq-server >"$base/server.out" 2>&1 &)
started=no
for _ in $(seq 1 90); do
  if rabbitmqctl -n "$node" await_startup >/dev/null 2>&1; then started=yes; break; fi
  sleep 1
done
if [ $started != yes ]; then echo "rabbitmq did not start; see $base/server.out" >&2; exit 1; fi

echo "open-files limit: $limit (Warren, the tool and RabbitMQ)"
echo -n "RabbitMQ's socket limit: "
rabbitmqctl -n "$node" status 2>/dev/null | grep -A3 -i "file descriptors" | grep -i "sockets limit\|socket" | head -2 | tr '\n' ' '
echo
echo "load: $(cut -d' ' -f1-3 /proc/loadavg) at $(date -u +%FT%TZ)"
"$warren" perf scenario many-pairs \
  --uri "amqp://guest:guest@127.0.0.1:$warren_port" --label warren \
  --compare "amqp://guest:guest@127.0.0.1:$rabbit_port" --compare-label rabbitmq \
  --steps "$steps" --duration "$secs" --out "$out" --progress false "$@"
echo "load at the end: $(cut -d' ' -f1-3 /proc/loadavg) at $(date -u +%FT%TZ)"
