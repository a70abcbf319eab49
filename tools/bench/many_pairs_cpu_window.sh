#!/bin/bash
# CPU per message of the many-pairs workload, broker and tool separately, over a window of
# steady sending only (issue 12): attach and drain are left out, unlike
# many_pairs_cpu_split.sh, which counts whole runs. Starts a broker of its own (BIN server on
# PORT, a temporary data dir), runs `TOOL perf scenario many-pairs --steps N` against it, and
# once every client has attached and sending has run for 2 s takes WINDOW seconds of both
# processes: user and system CPU from /proc/PID/stat, context switches summed over
# /proc/PID/task/*/status, and syscalls with `perf stat -e raw_syscalls:sys_enter` when
# perf is there. Messages in the window are the step's achieved rate times WINDOW (the rate
# is steady: late senders re-phase, they never burst).
# usage: tools/bench/many_pairs_cpu_window.sh BIN amqp091|amqp10 PORT N [WINDOW_S]
#   TOOL_BIN=path  runs the tool from another build than the broker (default: BIN)
set -u
BIN=$1; PROTO=$2; PORT=$3; N=$4; WINDOW=${5:-10}
TOOL=${TOOL_BIN:-$BIN}
ulimit -n "$(ulimit -Hn)"
DATA=$(mktemp -d /tmp/mp-win-XXXX)
setsid "$BIN" server --bind 127.0.0.1 --amqp-port "$PORT" --management-port 0 --prometheus-port 0 \
  --data-dir "$DATA" > "$DATA/broker.log" 2>&1 < /dev/null &
BPID=$!
sleep 3
"$TOOL" perf scenario many-pairs --uri "amqp://guest:guest@127.0.0.1:$PORT" --steps "$N" \
  --duration $((WINDOW + 6)) --protocol "$PROTO" --out "$DATA/report" --progress false \
  > "$DATA/perf.out" 2> "$DATA/perf.err" &
TPID=$!
sleep 0.2
for _ in $(seq 600); do
  grep -qs "attached" "$DATA/perf.err" && break
  kill -0 $TPID 2>/dev/null || break
  sleep 0.5
done
# Senders start 0.5 s after the attach line; 1.5 s more lets every connection's first
# messages (buffer growth, first wake-ups) pass.
sleep 2
TCK=$(getconf CLK_TCK)
stat_of() { awk -v t="$TCK" '{printf "%.2f %.2f", $14/t, $15/t}' "/proc/$1/stat"; }
switches_of() { cat /proc/$1/task/*/status 2>/dev/null | awk '/ctxt_switches/{s+=$2} END{print s}'; }
if command -v perf > /dev/null; then
  EV=raw_syscalls:sys_enter,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_futex
  perf stat -x, -e $EV -p $BPID -o "$DATA/broker.stat" -- sleep "$WINDOW" 2> /dev/null &
  P1=$!
  perf stat -x, -e $EV -p $TPID -o "$DATA/tool.stat" -- sleep "$WINDOW" 2> /dev/null &
  P2=$!
fi
read -r BU0 BS0 <<< "$(stat_of $BPID)"; read -r TU0 TS0 <<< "$(stat_of $TPID)"
BC0=$(switches_of $BPID); TC0=$(switches_of $TPID)
LOAD0=$(cut -d' ' -f1 /proc/loadavg)
# TCP segments machine-wide (other processes' included): data and pure ACKs on loopback.
segs() { nstat -az TcpOutSegs TcpExtDelayedACKs 2> /dev/null | awk '/TcpOutSegs/{o=$2} /DelayedACKs/{d=$2} END{print o+0, d+0}'; }
read -r SEG0 DACK0 <<< "$(segs)"
sleep "$WINDOW"
read -r BU1 BS1 <<< "$(stat_of $BPID)"; read -r TU1 TS1 <<< "$(stat_of $TPID)"
BC1=$(switches_of $BPID); TC1=$(switches_of $TPID)
LOAD1=$(cut -d' ' -f1 /proc/loadavg)
read -r SEG1 DACK1 <<< "$(segs)"
wait ${P1:-} ${P2:-} 2> /dev/null
wait $TPID
kill $BPID; wait $BPID 2> /dev/null
ACHIEVED=$(grep -o "achieved [0-9.]* msg/s" "$DATA/perf.err" | head -1 | awk '{print $2}')
syscalls() { [ -f "$1" ] && awk -F, '/raw_syscalls/{print $1}' "$1" || echo "?"; }
BSYS=$(syscalls "$DATA/broker.stat"); TSYS=$(syscalls "$DATA/tool.stat")
# epoll_wait and futex per message: reactor turns and threads parked or woken.
per_msg() { [ -f "$1" ] && awk -F, -v m="$2" '/sys_enter_(epoll_wait|futex)/{sub(/.*sys_enter_/, "", $3); printf "%s %.2f/msg  ", $3, $1 / m}' "$1"; }
awk -v n="$N" -v p="$PROTO" -v w="$WINDOW" -v rate="${ACHIEVED:-0}" \
  -v bu="$(echo "$BU1 - $BU0" | bc)" -v bs="$(echo "$BS1 - $BS0" | bc)" \
  -v tu="$(echo "$TU1 - $TU0" | bc)" -v ts="$(echo "$TS1 - $TS0" | bc)" \
  -v bc="$((BC1 - BC0))" -v tc="$((TC1 - TC0))" -v bsys="$BSYS" -v tsys="$TSYS" \
  -v l0="$LOAD0" -v l1="$LOAD1" 'BEGIN {
    m = rate * w; if (m == 0) m = 1;
    printf "%s N=%d window %d s, achieved %.0f msg/s (%.0f messages), load %s -> %s\n", p, n, w, rate, m, l0, l1;
    printf "broker: user %.2f s sys %.2f s = %.1f us/msg; %.2f ctx switches/msg; %s syscalls (%.2f/msg)\n",
      bu, bs, (bu + bs) * 1e6 / m, bc / m, bsys, (bsys == "?" ? 0 : bsys / m);
    printf "tool:   user %.2f s sys %.2f s = %.1f us/msg; %.2f ctx switches/msg; %s syscalls (%.2f/msg)\n",
      tu, ts, (tu + ts) * 1e6 / m, tc / m, tsys, (tsys == "?" ? 0 : tsys / m);
  }'
M=$(awk -v r="${ACHIEVED:-0}" -v w="$WINDOW" 'BEGIN{m = r * w; print (m == 0 ? 1 : m)}')
echo "broker: $(per_msg "$DATA/broker.stat" "$M")"
echo "tool:   $(per_msg "$DATA/tool.stat" "$M")"
awk -v s=$((SEG1 - SEG0)) -v d=$((DACK1 - DACK0)) -v m="$M" \
  'BEGIN{printf "TCP segments sent (machine-wide): %.2f/msg, delayed ACKs %.2f/msg\n", s / m, d / m}'
grep -E "mean|lost" "$DATA/perf.err" | tail -1
echo "data=$DATA"
