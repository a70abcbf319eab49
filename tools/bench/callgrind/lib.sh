# Shared by tools/bench/instructions.sh and tool_instructions.sh (sourced, not run): a
# program's total instruction count under callgrind, and the cost of one operation from two
# runs.

# Exits 2 with a hint when valgrind is not installed.
require_valgrind() {
  if ! command -v valgrind >/dev/null; then
    echo "valgrind not found (Debian: apt-get install valgrind)" >&2
    exit 2
  fi
}

# callgrind_total OUT_PREFIX COMMAND...: runs COMMAND under callgrind (its output in
# OUT_PREFIX.callgrind, its stdout and valgrind's stderr beside it) and prints callgrind's Ir
# total; on failure prints both outputs and exits 1. CALLGRIND_OPTIONS (words) go to
# valgrind, e.g. `--collect-atstart=no --toggle-collect=PATTERN` to count inside one
# function only.
callgrind_total() {
  local out=$1
  shift
  local options=()
  read -ra options <<<"${CALLGRIND_OPTIONS:-}"
  if ! valgrind --tool=callgrind --callgrind-out-file="$out.callgrind" "${options[@]}" "$@" \
      >"$out.stdout" 2>"$out.valgrind"; then
    cat "$out.stdout" "$out.valgrind" >&2
    echo "$* failed under valgrind" >&2
    exit 1
  fi
  sed -n 's/^summary: \([0-9]*\)$/\1/p' "$out.callgrind"
}

# per_operation TOTAL_SMALL TOTAL_LARGE SMALL LARGE: the instructions of one operation, from
# the totals of two runs that did SMALL and LARGE of it: the difference over the difference,
# so start-up and set-up, the same in both runs, are left out.
per_operation() {
  echo $(( ($2 - $1) / ($4 - $3) ))
}
