#!/bin/bash
# User and system CPU and syscalls per message of `warren perf pairs-floor`'s two processes
# (the tool's and the relay's) over 10 s of its window, from /proc/PID/stat and `perf stat -e
# raw_syscalls:sys_enter` (issue 12: how much of the no-broker floor is the kernel's).
# usage: tools/bench/pairs_floor_split.sh BIN N [pairs-floor flags, e.g. --ack --handoff]
set -u
BIN=$1; N=$2; shift 2
ulimit -n "$(ulimit -Hn)"
TCK=$(getconf CLK_TCK)
OUT=$(mktemp /tmp/pairs-floor-split-XXXX)
echo "load $(cut -d' ' -f1-3 /proc/loadavg) at $(date -u +%H:%M:%S): N=$N $*"
"$BIN" perf pairs-floor --pairs "$N" --seconds 20 --warmup 5 "$@" > "$OUT" &
T=$!
R=
for _ in $(seq 100); do
  R=$(pgrep -P $T -f "pairs-floor --relay-worker" | head -1)
  [ -n "$R" ] && break
  sleep 0.1
done
# Attach, then the 5-s warm-up and a little of the window.
sleep 8
st() { awk -v t="$TCK" '{print $14/t, $15/t}' "/proc/$1/stat"; }
EV=raw_syscalls:sys_enter
perf stat -x, -e $EV -p "$R" -o "$OUT.relay" -- sleep 10 2> /dev/null &
perf stat -x, -e $EV -p "$T" -o "$OUT.tool" -- sleep 10 2> /dev/null &
read -r TU0 TS0 <<< "$(st $T)"; read -r RU0 RS0 <<< "$(st "$R")"
sleep 10
read -r TU1 TS1 <<< "$(st $T)"; read -r RU1 RS1 <<< "$(st "$R")"
wait $T
# Messages in the 10 s: the achieved rate (column 7 of the row) times 10.
M=$(tail -1 "$OUT" | awk -F'|' '{gsub(/ /, "", $7); print $7 * 10}')
SR=$(awk -F, '/raw_syscalls/{print $1}' "$OUT.relay"); ST=$(awk -F, '/raw_syscalls/{print $1}' "$OUT.tool")
awk -v m="$M" -v tu="$(echo "$TU1 - $TU0" | bc)" -v ts="$(echo "$TS1 - $TS0" | bc)" \
  -v ru="$(echo "$RU1 - $RU0" | bc)" -v rs="$(echo "$RS1 - $RS0" | bc)" -v sr="${SR:-0}" -v st="${ST:-0}" 'BEGIN {
  printf "messages %d in 10 s; tool user %.1f sys %.1f us/msg, %.2f syscalls/msg; relay user %.1f sys %.1f us/msg, %.2f syscalls/msg\n",
    m, tu * 1e6 / m, ts * 1e6 / m, st / m, ru * 1e6 / m, rs * 1e6 / m, sr / m }'
tail -1 "$OUT"
