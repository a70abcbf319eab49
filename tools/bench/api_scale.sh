#!/usr/bin/env bash
# The operator endpoints' times with many queues (issue 30; docs/benchmarks.md, "Operator
# endpoints with 100,000 queues"): declares N queues through tools/bench/declbench (no-wait,
# one channel; skipped with N=0, for a broker that holds them already), then times each
# endpoint with curl to the body's last byte, RUNS times (3 for the large bodies), and prints
# the median, the time to the first byte, the body's size and the spread. Besides the first
# page of /api/queues, its middle page (page_size 100) and its first page in reverse name
# order, which a page finds from the vhosts' name order (crates/broker/src/named_entries.rs).
#
#   tools/bench/api_scale.sh AMQP_URL MGMT_URL PROMETHEUS_URL [N] [RUNS]
#   tools/bench/api_scale.sh amqp://guest:guest@127.0.0.1:62000/ \
#       http://guest:guest@127.0.0.1:62001 http://127.0.0.1:62002 100000 9
# Environment: ONLY=REGEX times only the endpoints whose names match (grep -E), e.g.
#   ONLY=/api/queues to leave out the slow /metrics/per-object and /api/definitions.
set -euo pipefail
amqp=$1 mgmt=$2 prom=$3 n=${4:-100000} runs=${5:-9} only=${ONLY:-.}
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [ "$n" -gt 0 ]; then
  (cd "$here/declbench" && go run . -url "$amqp" -c 1 -h 1 -n "$n" -nowait -p q)
  sleep 6 # one sampling round (5 s) of the management API's rates
fi
time_endpoint() { # NAME URL RUNS
  grep -qE -- "$only" <<<"$1" || return 0
  for _ in $(seq 1 "$3"); do
    curl -sf -o /dev/null -w '%{time_total} %{size_download} %{time_starttransfer}\n' "$2"
  done | sort -n | awk -v name="$1" '{ line[NR] = $0 } END {
    split(line[int((NR + 1) / 2)], m, " "); split(line[1], lo, " "); split(line[NR], hi, " ")
    printf "%-36s median %7.1f ms  first byte %7.1f ms  %10d bytes  (%d runs, %.1f-%.1f ms)\n",
      name, m[1] * 1000, m[3] * 1000, m[2], NR, lo[1] * 1000, hi[1] * 1000 }'
}
big=$(( runs < 3 ? runs : 3 ))
time_endpoint "/metrics" "$prom/metrics" "$runs"
time_endpoint "/metrics/per-object" "$prom/metrics/per-object" "$big"
time_endpoint "/api/overview" "$mgmt/api/overview" "$runs"
time_endpoint "/api/queues?page=1&page_size=100" "$mgmt/api/queues?page=1&page_size=100" "$runs"
queues=$(curl -sf "$mgmt/api/queues?page=1&page_size=1&columns=name" |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["total_count"])')
middle=$(( (queues + 199) / 200 ))
time_endpoint "/api/queues?page=$middle&page_size=100" \
  "$mgmt/api/queues?page=$middle&page_size=100" "$runs"
time_endpoint "/api/queues?page=1&sort=name&sort_reverse=true" \
  "$mgmt/api/queues?page=1&page_size=100&sort=name&sort_reverse=true" "$runs"
time_endpoint "/api/exchanges?page=1&page_size=100" "$mgmt/api/exchanges?page=1&page_size=100" "$runs"
time_endpoint "/api/definitions" "$mgmt/api/definitions" "$big"
