#!/bin/bash
# Syscalls and context switches per many-pairs message, broker and tool (issue 12): starts a broker
# of its own (BIN server on PORT), runs many-pairs at N pairs for 20 s, and after WAIT seconds
# (default 12: past the attach) counts 8 s of both processes with perf stat tracepoints
# (low overhead, unlike strace), with each process's CPU over the same window.
# usage: tools/bench/many_pairs_syscalls.sh BIN amqp091|amqp10 PORT N [WAIT]
BIN=$1; PROTO=$2; PORT=$3; N=$4; WAIT=${5:-12}
ulimit -n 20000
DATA=$(mktemp -d /tmp/mp-ps-XXXX)
setsid $BIN server --bind 127.0.0.1 --amqp-port $PORT --management-port 0 --prometheus-port 0 --data-dir $DATA > $DATA/broker.log 2>&1 < /dev/null &
BPID=$!
sleep 3
$BIN perf scenario many-pairs --uri amqp://guest:guest@127.0.0.1:$PORT --steps $N --duration 20 --protocol $PROTO --out $DATA/report --progress false > $DATA/perf.out 2>&1 &
TPID=$!
sleep $WAIT
EV=raw_syscalls:sys_enter,context-switches,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_sendto,syscalls:sys_enter_recvfrom,syscalls:sys_enter_futex,syscalls:sys_enter_mprotect,syscalls:sys_enter_madvise,syscalls:sys_enter_write,syscalls:sys_enter_read,syscalls:sys_enter_writev
TCK=$(getconf CLK_TCK)
cpu() { awk -v t=$TCK '{print ($14+$15)/t}' /proc/$1/stat; }
B0=$(cpu $BPID); T0=$(cpu $TPID)
perf stat -x, -e $EV -p $BPID -o $DATA/broker.stat -- sleep 8 &
S1=$!
perf stat -x, -e $EV -p $TPID -o $DATA/tool.stat -- sleep 8 &
S2=$!
wait $S1 $S2
B1=$(cpu $BPID); T1=$(cpu $TPID)
echo "cpu over the 8 s window: broker $(echo "$B1 - $B0" | bc) s, tool $(echo "$T1 - $T0" | bc) s; load $(cut -d' ' -f1 /proc/loadavg)"
wait $TPID
grep -E "achieved" $DATA/perf.out
echo "--- broker"; grep -v "^#" $DATA/broker.stat | awk -F, 'NF>2{print $1, $3}'
echo "--- tool"; grep -v "^#" $DATA/tool.stat | awk -F, 'NF>2{print $1, $3}'
kill $BPID
