#!/bin/bash
# Where the many-pairs workload's CPU goes: the broker's or the perf tool's clients' (issue 12).
# Starts a broker of its own (BIN server on PORT, a temporary data dir), runs
# `BIN perf scenario many-pairs --steps 1000 --duration 10 --protocol PROTOCOL` against it
# under /usr/bin/time, and prints the broker's CPU seconds (from /proc/PID/stat) beside the
# tool's. With a fourth argument it also records the broker with `perf record -g` for 8 s.
# usage: tools/bench/amqp10_cpu_split.sh BIN amqp10|amqp091 PORT [perf]
set -u
BIN=$1; PROTO=$2; PORT=$3; PROFILE=${4:-}
DATA=$(mktemp -d /tmp/a10-m-XXXX)
setsid $BIN server --bind 127.0.0.1 --amqp-port $PORT --management-port 0 --prometheus-port 0 --data-dir $DATA > $DATA/broker.log 2>&1 < /dev/null &
BPID=$!
sleep 3
TCK=$(getconf CLK_TCK)
cpu() { awk -v t=$TCK '{print ($14+$15)/t}' /proc/$1/stat; }
B0=$(cpu $BPID)
if [ -n "$PROFILE" ]; then
  (sleep 6; perf record -F 499 -g -p $BPID -o $DATA/perf.data -- sleep 8 > $DATA/perf.log 2>&1) & PERFPID=$!
fi
/usr/bin/time -f "client_cpu_s user=%U sys=%S wall=%e" $BIN perf scenario many-pairs --uri amqp://guest:guest@127.0.0.1:$PORT --steps 1000 --duration 10 --protocol $PROTO > $DATA/perf.out 2> $DATA/perf.err
B1=$(cpu $BPID)
[ -n "$PROFILE" ] && wait $PERFPID 2>/dev/null
echo "data=$DATA broker_cpu_s=$(echo "$B1 - $B0" | bc)"
cat $DATA/perf.err
grep -iE "mean|p99|achieved|lost|pairs" $DATA/perf.out | head -20
kill $BPID; wait $BPID 2>/dev/null
