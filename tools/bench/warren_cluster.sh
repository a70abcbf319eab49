# Sourced by the cluster benchmarks (quorum_cluster_side_by_side.sh, quorum_idle.sh): three
# Warren nodes on this machine, each told the other two's cluster addresses, and a wait until
# every node sees three running voters (a node that has just joined is a learner for a moment,
# and a quorum queue declared then gets two members instead of three).
#
# Needs: $warren (the binary), $warren_port (first AMQP port; HTTP on +50.., cluster on
# +100..), $work (a directory: node data, logs and the shared secret), and an array `pids`
# the caller's cleanup kills. Defines warren_http N, cluster_port N, api N PATH [curl args].

warren_http() { echo $((warren_port + 50 + $1)); }
cluster_port() { echo $((warren_port + 100 + $1)); }
api() { curl -sf -u guest:guest "http://127.0.0.1:$(warren_http "$1")$2" "${@:3}"; }

# Running voters node N sees (0 while it does not answer).
warren_voters() {
  api "$1" /api/cluster/status 2>/dev/null |
    python3 -c 'import json,sys; print(sum(1 for m in json.load(sys.stdin)["members"] if m["running"] and m["voter"]))' \
      2>/dev/null || echo 0
}

# Starts w0..w2 (logs in $work/wN.log); returns non-zero if they did not form within 120 s.
start_warren_cluster() {
  [ -f "$work/secret" ] || echo "bench-secret-$(date +%s)" >"$work/secret"
  local i j peers
  for i in 0 1 2; do
    peers=""
    for j in 0 1 2; do
      [ "$i" = "$j" ] || peers+="${peers:+,}127.0.0.1:$(cluster_port "$j")"
    done
    mkdir -p "$work/w$i"
    "$warren" server --bind 127.0.0.1 --amqp-port $((warren_port + i)) \
      --management-port "$(warren_http "$i")" --prometheus-port 0 --data-dir "$work/w$i" \
      --node-name "w$i@127.0.0.1" --cluster-port "$(cluster_port "$i")" \
      --cluster-advertise "127.0.0.1:$(cluster_port "$i")" --cluster-peers "$peers" \
      --cluster-secret-file "$work/secret" >"$work/w$i.log" 2>&1 &
    pids+=($!)
  done
  for _ in $(seq 1 120); do
    if [ "$(warren_voters 0)" = 3 ] && [ "$(warren_voters 1)" = 3 ] && [ "$(warren_voters 2)" = 3 ]; then
      return 0
    fi
    sleep 1
  done
  return 1
}
