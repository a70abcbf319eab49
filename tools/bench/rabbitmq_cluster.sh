#!/usr/bin/env bash
# A throw-away 3-node RabbitMQ cluster on this machine (Debian's rabbitmq-server package, via
# ../shared/tools/rabbitmq.sh), for side-by-side benchmarks of quorum queues: nodes
# rabbitPORT@localhost on AMQP ports PORT, PORT+1, PORT+2, joined to the first. The nodes
# share root's Erlang cookie, as nodes on one machine do. Each start is a fresh cluster: a node
# whose data directory (/tmp/rabbitmq-PORT) still says it is clustered waits at boot for its
# old peers, so start removes the three ports' directories first (never of a running node) and
# stop removes them after the nodes stopped.
#   rabbitmq_cluster.sh start PORT    start three nodes and join them; prints the URI list,
#                                     alone on stdout (progress goes to stderr)
#   rabbitmq_cluster.sh status PORT   rabbitmqctl cluster_status on the first node
#   rabbitmq_cluster.sh stop PORT
# RABBITMQ_SH: the single-node script, by default shared/tools/rabbitmq.sh in the checkout's
# parent directory (/work/shared/tools from /work/main; a worktree elsewhere sets it).
set -euo pipefail
cmd=${1:?usage: rabbitmq_cluster.sh start|status|stop PORT}
port=${2:?port}
here=$(cd "$(dirname "$0")" && pwd)
rabbitmq=${RABBITMQ_SH:-$here/../../../shared/tools/rabbitmq.sh}
ports=("$port" $((port + 1)) $((port + 2)))
data_dir() { echo "/tmp/rabbitmq-$1"; } # rabbitmq.sh's layout

case "$cmd" in
  start)
    for p in "${ports[@]}"; do
      if "$rabbitmq" ctl "$p" status >/dev/null 2>&1; then
        echo "rabbitmq node rabbit$p@localhost is already running; stop it first" >&2; exit 1
      fi
      rm -rf "$(data_dir "$p")"
    done
    # rabbitmq.sh reports on stdout; this script's stdout is the URI list only (callers
    # capture it for PerfTest's --uris).
    for p in "${ports[@]}"; do
      "$rabbitmq" start "$p" >&2
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
    for p in "${ports[@]}"; do "$rabbitmq" stop "$p"; done
    for p in "${ports[@]}"; do rm -rf "$(data_dir "$p")"; done ;;
  *) echo "unknown command $cmd" >&2; exit 2 ;;
esac
