#!/usr/bin/env bash
# A throw-away 3-node RabbitMQ cluster on this machine (Debian's rabbitmq-server package, via
# ../shared/tools/rabbitmq.sh), for side-by-side benchmarks of quorum queues: nodes
# rabbitPORT@localhost on AMQP ports PORT, PORT+1, PORT+2, joined to the first. The nodes
# share root's Erlang cookie, as nodes on one machine do.
#   rabbitmq_cluster.sh start PORT    start three nodes and join them; prints the URI list
#   rabbitmq_cluster.sh status PORT   rabbitmqctl cluster_status on the first node
#   rabbitmq_cluster.sh stop PORT
set -euo pipefail
cmd=${1:?usage: rabbitmq_cluster.sh start|status|stop PORT}
port=${2:?port}
here=$(cd "$(dirname "$0")" && pwd)
rabbitmq=${RABBITMQ_SH:-$here/../../../shared/tools/rabbitmq.sh}
ports=("$port" $((port + 1)) $((port + 2)))

case "$cmd" in
  start)
    for p in "${ports[@]}"; do
      "$rabbitmq" start "$p"
    done
    for p in "${ports[@]:1}"; do
      "$rabbitmq" ctl "$p" stop_app >/dev/null
      "$rabbitmq" ctl "$p" reset >/dev/null
      "$rabbitmq" ctl "$p" join_cluster "rabbit${port}@localhost" >/dev/null 2>&1
      "$rabbitmq" ctl "$p" start_app >/dev/null 2>&1
    done
    running=$("$rabbitmq" ctl "$port" cluster_status --formatter json |
      python3 -c 'import json,sys; print(len(json.load(sys.stdin)["running_nodes"]))')
    if [ "$running" != 3 ]; then
      echo "rabbitmq cluster: $running of 3 nodes running" >&2; exit 1
    fi
    uris=""
    for p in "${ports[@]}"; do uris+="${uris:+,}amqp://guest:guest@127.0.0.1:$p"; done
    echo "$uris" ;;
  status)
    "$rabbitmq" ctl "$port" cluster_status ;;
  stop)
    for p in "${ports[@]}"; do "$rabbitmq" stop "$p"; done ;;
  *) echo "unknown command $cmd" >&2; exit 2 ;;
esac
