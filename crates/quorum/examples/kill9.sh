#!/usr/bin/env bash
# Real processes, real signals: three `node` examples on loopback publish to their groups; the
# node that initialised (and so leads) every group is killed with SIGKILL, a follower is
# SIGSTOPped and resumed, the killed node restarts from its data; at the end every node must
# hold at least every message any node confirmed, per group.
#
#   cargo build -p warren-quorum --example node
#   crates/quorum/examples/kill9.sh [path/to/node] [base port]
set -euo pipefail

NODE_BIN=${1:-${CARGO_TARGET_DIR:-target}/debug/examples/node}
BASE_PORT=${2:-$((17000 + RANDOM % 2000))}
GROUPS_N=${GROUPS_N:-10}
WORK=$(mktemp -d)
trap 'kill -9 ${PIDS[*]:-} 2>/dev/null || true; rm -rf "$WORK"' EXIT

declare -A PIDS
addr() { echo "127.0.0.1:$((BASE_PORT + $1))"; }
start() {
    local id=$1 peers=()
    for other in 1 2 3; do
        [[ $other == "$id" ]] || peers+=(--peer "$other=$(addr "$other")")
    done
    "$NODE_BIN" --id "$id" --listen "$(addr "$id")" "${peers[@]}" --secret kill9-cookie \
        --dir "$WORK/data-$id" --groups "$GROUPS_N" --publish-every-ms 50 \
        >>"$WORK/out-$id" 2>>"$WORK/err-$id" &
    PIDS[$id]=$!
}

for id in 1 2 3; do start "$id"; done
sleep 8
echo "kill -9 node 1 (the leader of every group)"
kill -9 "${PIDS[1]}"
sleep 10
echo "SIGSTOP node 3 for 8 s"
kill -STOP "${PIDS[3]}"
sleep 8
kill -CONT "${PIDS[3]}"
echo "restart node 1"
start 1
sleep 12
for id in 1 2 3; do kill -TERM "${PIDS[$id]}"; done
wait "${PIDS[1]}" "${PIDS[2]}" "${PIDS[3]}" || true

status=0
for group in $(seq 1 "$GROUPS_N"); do
    confirmed=$(cat "$WORK"/out-* | awk -v g="$group" '$1 == "confirmed" && $2 == g {print $3, $4}' | sort -u | wc -l)
    for id in 1 2 3; do
        held=$(awk -v g="$group" '$1 == "final" && $2 == g {print $3}' "$WORK/out-$id" | tail -1)
        if [[ -z $held || $held -lt $confirmed ]]; then
            echo "group $group: node $id holds ${held:-nothing}, $confirmed were confirmed"
            status=1
        fi
    done
    echo "group $group: $confirmed confirmed; held $(for id in 1 2 3; do awk -v g="$group" '$1 == "final" && $2 == g {printf "%s ", $3}' "$WORK/out-$id"; done)"
done
grep -h "^status" "$WORK"/out-* | tail -3
[[ $status == 0 ]] && echo "OK: every confirmed message is on every node" || echo "FAILED"
exit $status
