#!/usr/bin/env bash
# Runs COMMAND beside a broker of its own, both in a network namespace of their own
# (unshare --net --mount; run as root), where the broker has RabbitMQ's default ports: AMQP on
# 127.0.0.1:5672 and the HTTP API on 15672. Test suites written for a broker on localhost's
# default ports (the Java client's and amqp091-go's own) run there unchanged, beside anything
# else on the machine.
#
#   netns_broker.sh warren   COMMAND [ARGS...]   # $WARREN_BIN server $WARREN_SERVER_ARGS
#   netns_broker.sh rabbitmq COMMAND [ARGS...]   # RabbitMQ 3.10.8 (rabbitmq.sh, management on)
#
# COMMAND sees RABBITMQCTL (rabbitmqctl for that broker: tools/rabbitmqctl over `warren ctl`,
# or RabbitMQ's own bound to the node), RABBITMQ_NODE and BROKER_LOG (the broker's output).
# Exits with COMMAND's status.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
broker="${1:?usage: netns_broker.sh warren|rabbitmq COMMAND [ARGS...]}"
shift
if [ "${NETNS_BROKER_INSIDE:-}" != 1 ]; then
  # A mount namespace too: RabbitMQ's data directory is a tmpfs of this run's own.
  exec env NETNS_BROKER_INSIDE=1 unshare --net --mount "$0" "$broker" "$@"
fi
ip link set lo up
work="$(mktemp -d /tmp/netns-broker.XXXXXX)"
export BROKER_LOG="$work/broker.log"
case "$broker" in
  warren)
    "${WARREN_BIN:?WARREN_BIN: the warren binary}" server --amqp-port 5672 --management-port 15672 \
      --prometheus-port 0 --data-dir "$work/data" ${WARREN_SERVER_ARGS:-} >"$BROKER_LOG" 2>&1 &
    broker_pid=$!
    for _ in $(seq 1 100); do
      (exec 3<>/dev/tcp/127.0.0.1/15672) 2>/dev/null && break
      sleep 0.1
    done
    export WARREN_MGMT_URL=http://127.0.0.1:15672 RABBITMQCTL="$here/rabbitmqctl"
    export RABBITMQ_NODE=rabbit@localhost
    stop_broker() { kill "$broker_pid"; wait "$broker_pid"; } ;;
  rabbitmq)
    rabbitmq_sh="${RABBITMQ_SH:-/work/shared/tools/rabbitmq.sh}"
    base=/tmp/rabbitmq-5672
    mkdir -p "$base" && mount -t tmpfs -o size=512m tmpfs "$base" || exit 1
    echo '[rabbitmq_management].' >"$base/enabled_plugins"
    bash "$rabbitmq_sh" start 5672 >"$BROKER_LOG" 2>&1 || { cat "$BROKER_LOG"; exit 1; }
    export RABBITMQ_NODE=rabbit5672@localhost RABBITMQCTL="$work/rabbitmqctl"
    printf '#!/bin/sh\nexec rabbitmqctl -n %s "$@"\n' "$RABBITMQ_NODE" >"$RABBITMQCTL"
    chmod +x "$RABBITMQCTL"
    # The namespace's own epmd (RabbitMQ starts one) would outlive it.
    stop_broker() { bash "$rabbitmq_sh" stop 5672; epmd -kill; } ;;
  *) echo "netns_broker.sh: unknown broker $broker" >&2; exit 2 ;;
esac
# The broker goes with the namespace even when COMMAND is interrupted.
trap 'stop_broker >/dev/null 2>&1' INT TERM
"$@"
rc=$?
trap - INT TERM
stop_broker >/dev/null 2>&1
# The broker's log outlives the namespace for whoever asks (BROKER_LOG_COPY).
[ -n "${BROKER_LOG_COPY:-}" ] && cp "$BROKER_LOG" "$BROKER_LOG_COPY"
rm -rf "$work"
exit $rc
