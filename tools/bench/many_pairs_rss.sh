#!/bin/bash
# Broker RSS through a many-pairs run (issue 12): starts BIN server on PORT (ulimit -n 20000,
# a temporary data dir), runs `BIN perf scenario many-pairs --steps N --duration SECONDS
# --protocol PROTO`, samples the broker's VmRSS every 2 s into DATA/rss.txt ("seconds KiB"),
# and, when GDB_AT_S is not 0, has gdb call glibc's malloc_stats() in the broker GDB_AT_S
# seconds after the start (allocated against taken-from-the-OS bytes per arena: fragmentation
# or live data). Extra arguments are environment settings for the broker (e.g.
# MALLOC_ARENA_MAX=2).
# usage: tools/bench/many_pairs_rss.sh BIN amqp091|amqp10 PORT N SECONDS GDB_AT_S [VAR=value...]
BIN=$1; PROTO=$2; PORT=$3; N=$4; DUR=$5; AT=$6; shift 6
ulimit -n 20000
DATA=$(mktemp -d /tmp/many-pairs-rss-XXXX)
env "$@" setsid $BIN server --bind 127.0.0.1 --amqp-port $PORT --management-port 0 --prometheus-port 0 --data-dir $DATA/d > $DATA/broker.log 2>&1 < /dev/null &
BPID=$!
sleep 3
grep VmRSS /proc/$BPID/status
echo "load: $(cut -d' ' -f1-3 /proc/loadavg) at $(date -u +%H:%M:%S)"
T0=$(date +%s)
$BIN perf scenario many-pairs --uri amqp://guest:guest@127.0.0.1:$PORT --steps $N --duration $DUR --protocol $PROTO --out $DATA/report --progress true > $DATA/perf.out 2> $DATA/perf.err &
PP=$!
( while kill -0 $PP 2>/dev/null; do echo "$(( $(date +%s) - T0 )) $(grep VmRSS /proc/$BPID/status | awk '{print $2}')" >> $DATA/rss.txt; sleep 2; done ) &
if [ "$AT" != 0 ]; then sleep $AT; grep -E "VmRSS|Threads" /proc/$BPID/status; gdb -p $BPID -batch -ex 'call (void)malloc_stats()' > /dev/null 2>&1; fi
wait $PP
sed -n '/Arena 0/,$p' $DATA/broker.log | tail -60 | grep -E "Arena|system bytes|in use bytes|Total" | paste - - - | head -40
cat $DATA/perf.out | tail -30
echo "load end: $(cut -d' ' -f1-3 /proc/loadavg)"
echo DATA=$DATA
kill $BPID
