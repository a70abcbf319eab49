#!/usr/bin/env bash
# PerfTest (com.rabbitmq:perf-test 2.22.1, RabbitMQ's own load tool) against
# the broker at $AMQP_URL.
#
# How the check is made robust: PerfTest's summary only prints *average rates*
# ("sending rate avg: N msg/s" / "receiving rate avg: N msg/s"), and its -o CSV
# holds per-second rates, so neither gives exact totals. Instead the exact runs
# use -C/--pmessages and -D/--cmessages with one producer and one consumer: the
# producer publishes exactly N messages, the consumer stops after exactly N, and
# PerfTest ends with
#     test stopped (Producer reached message limit, Consumer reached message limit)
# A lost message means the consumer never reaches N and the run ends on the -z
# safety time limit instead ("Reached time limit"), which fails the check. The
# queue is kept (-ad false) and afterwards must hold exactly 0 ready messages
# (a duplicated delivery would leave an original behind). Exit code must be 0
# and no exception may be printed. A third, time-based run with several
# producers/consumers only checks that traffic flowed and that the receiving
# rate never exceeds the sending rate (no duplicates).
#
# Env: AMQP_URL (default amqp://guest:guest@127.0.0.1:5672/%2F),
#      PERFTEST (path to a perftest.sh wrapper), PYTHON (with pika installed).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
AMQP_URL="${AMQP_URL:-amqp://guest:guest@127.0.0.1:5672/%2F}"
export AMQP_URL
PYTHON="${PYTHON:-$here/.venv/bin/python}"

# PerfTest wants the URI without the trailing "/" (default vhost).
uri="${AMQP_URL%/%2F}"
uri="${uri%/%2f}"
uri="${uri%/}"

out_dir="$(mktemp -d)"
trap 'rm -rf "$out_dir"' EXIT

wrapper=""
for cand in "${PERFTEST:-}" "$repo/../shared/tools/perftest.sh" /work/shared/tools/perftest.sh; do
  if [ -n "$cand" ] && [ -x "$cand" ]; then wrapper="$cand"; break; fi
done
if [ -z "$wrapper" ]; then
  # Fallback: resolve the PerfTest classpath with Maven ourselves (same as the shared wrapper).
  wrapper="$out_dir/perftest.sh"
  cat >"$wrapper" <<'WRAPPER'
#!/usr/bin/env bash
set -euo pipefail
version=2.22.1
dir="${HOME}/.cache/warren-perftest/${version}"
if [ ! -s "$dir/cp.txt" ]; then
  mkdir -p "$dir"
  cat >"$dir/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>
<groupId>local</groupId><artifactId>perftest-runner</artifactId><version>1</version>
<dependencies><dependency><groupId>com.rabbitmq</groupId><artifactId>perf-test</artifactId>
<version>${version}</version></dependency></dependencies></project>
POM
  (cd "$dir" && mvn -q dependency:build-classpath -Dmdep.outputFile=cp.txt >/dev/null)
fi
exec java -cp "$(cat "$dir/cp.txt")" com.rabbitmq.perf.PerfTest "$@"
WRAPPER
  chmod +x "$wrapper"
fi
# Resolve the classpath (first use downloads from Maven Central) outside the timed runs.
"$wrapper" --help >/dev/null 2>&1 || { echo "perftest: cannot run PerfTest via $wrapper"; echo "perftest: 0 passed, 1 failed"; exit 1; }

passed=0
failed=0
ok() { echo "perftest: PASS $1"; passed=$((passed + 1)); }
ko() { echo "perftest: FAIL $1: $2"; failed=$((failed + 1)); }

# exact_run NAME COUNT PERFTEST-FLAGS...
exact_run() {
  local name=$1 count=$2; shift 2
  local queue="interop.perftest.$name.$RANDOM$RANDOM"
  local log="$out_dir/$name.log"
  timeout 120 "$wrapper" --uri "$uri" -u "$queue" -ad false -x 1 -y 1 -C "$count" -D "$count" -z 60 "$@" >"$log" 2>&1
  local rc=$?
  grep -E "test stopped|sending rate avg|receiving rate avg" "$log" | sed "s/^/  [$name] /"
  if [ $rc -ne 0 ]; then
    ko "$name" "PerfTest exit code $rc"; tail -20 "$log" | sed "s/^/  [$name] /"
    "$PYTHON" "$here/perftest_queue.py" "$queue" 0 >/dev/null 2>&1
    return
  fi
  if grep -qiE "exception" "$log"; then
    ko "$name" "PerfTest printed an exception"; grep -iE -m5 "exception" "$log"
    "$PYTHON" "$here/perftest_queue.py" "$queue" 0 >/dev/null 2>&1
    return
  fi
  if ! grep "test stopped" "$log" | grep "Producer reached message limit" | grep -q "Consumer reached message limit"; then
    ko "$name" "did not end with both producer and consumer at exactly $count messages"
    "$PYTHON" "$here/perftest_queue.py" "$queue" 0 >/dev/null 2>&1
    return
  fi
  local qout
  if ! qout=$("$PYTHON" "$here/perftest_queue.py" "$queue" 0 2>&1); then
    echo "$qout" | sed "s/^/  [$name] /"
    ko "$name" "queue not empty after consuming exactly $count"
    return
  fi
  echo "$qout" | sed "s/^/  [$name] /"
  ok "$name: $count sent = $count received"
}

# rate of "NAME rate avg: N msg/s" from a log
avg() { grep -E "$1 rate avg" "$2" | tail -1 | sed -E 's/.*avg: ([0-9]+) msg\/s.*/\1/'; }

timed_run() {
  local name=$1; shift
  local log="$out_dir/$name.log"
  local queue="interop.perftest.$name.$RANDOM$RANDOM"
  timeout 120 "$wrapper" --uri "$uri" -u "$queue" -ad true "$@" >"$log" 2>&1
  local rc=$?
  grep -E "test stopped|sending rate avg|receiving rate avg" "$log" | sed "s/^/  [$name] /"
  if [ $rc -ne 0 ]; then ko "$name" "PerfTest exit code $rc"; tail -20 "$log"; return; fi
  if grep -qiE "exception" "$log"; then ko "$name" "PerfTest printed an exception"; return; fi
  grep -q "test stopped (Reached time limit)" "$log" || { ko "$name" "did not stop on its time limit"; return; }
  local s r
  s=$(avg sending "$log"); r=$(avg receiving "$log")
  if [ -z "$s" ] || [ -z "$r" ] || [ "$s" -le 0 ] || [ "$r" -le 0 ]; then
    ko "$name" "no traffic (sending=$s receiving=$r)"; return
  fi
  if [ "$r" -gt $((s + s / 100 + 1)) ]; then
    ko "$name" "received more than sent (sending=$s receiving=$r)"; return
  fi
  ok "$name: sending avg $s msg/s, receiving avg $r msg/s"
}

echo "perftest: broker $uri"
# 1. auto-ack, 1000-byte messages, exact count.
exact_run autoack 20000 -s 1000 --autoack
# 2. publisher confirms (max 100 outstanding), persistent messages, manual acks
#    with prefetch 100 and multi-ack every 10, exact count.
exact_run confirm-persistent 10000 -s 1000 -c 100 -f persistent -q 100 -A 10
# 3. 5 s time-based run, 2 producers / 2 consumers, PerfTest-style queue args.
timed_run multi -x 2 -y 2 -s 1000 -z 5 --autoack --queue-args x-max-length=10000

echo "perftest: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
