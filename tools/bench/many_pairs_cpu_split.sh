#!/bin/bash
# Where the many-pairs workload's CPU goes at a given N: the broker's or the perf tool's
# (issue 12). Starts a broker of its own (BIN server on PORT, a temporary data dir), runs
# `BIN perf scenario many-pairs --steps N --duration SECONDS --protocol PROTOCOL` against it
# under /usr/bin/time, and prints the broker's CPU seconds (utime+stime from /proc/PID/stat
# over the whole run, connection set-up included) beside the tool's, with the run's figures.
# usage: tools/bench/many_pairs_cpu_split.sh BIN amqp10|amqp091 PORT N [SECONDS] [extra perf args]
set -u
BIN=$1; PROTO=$2; PORT=$3; STEPS=$4; DURATION=${5:-20}; shift 5 2>/dev/null || shift $#
ulimit -n "$(ulimit -Hn)"
DATA=$(mktemp -d /tmp/mp-cpu-XXXX)
setsid $BIN server --bind 127.0.0.1 --amqp-port $PORT --management-port 0 --prometheus-port 0 --data-dir $DATA > $DATA/broker.log 2>&1 < /dev/null &
BPID=$!
sleep 3
TCK=$(getconf CLK_TCK)
cpu() { awk -v t=$TCK '{print ($14+$15)/t}' /proc/$1/stat; }
B0=$(cpu $BPID)
echo "load: $(cut -d' ' -f1-3 /proc/loadavg) at $(date -u +%H:%M:%S)"
/usr/bin/time -f "tool_cpu_s user=%U sys=%S wall=%e" $BIN perf scenario many-pairs \
  --uri amqp://guest:guest@127.0.0.1:$PORT --steps $STEPS --duration $DURATION \
  --protocol $PROTO --out $DATA/report --progress false "$@" > $DATA/perf.out 2> $DATA/perf.err
B1=$(cpu $BPID)
echo "data=$DATA broker_cpu_s=$(echo "$B1 - $B0" | bc)"
cat $DATA/perf.err
grep -iE "mean|p99|achieved|lost|senders|RSS" $DATA/perf.out | head -20
kill $BPID; wait $BPID 2>/dev/null
