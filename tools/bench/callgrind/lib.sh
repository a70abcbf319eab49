# Shared by tools/bench/instructions.sh and tool_instructions.sh (sourced, not run): a
# program's total instruction count under callgrind.

# Exits 2 with a hint when valgrind is not installed.
require_valgrind() {
  if ! command -v valgrind >/dev/null; then
    echo "valgrind not found (Debian: apt-get install valgrind)" >&2
    exit 2
  fi
}

# callgrind_total OUT_PREFIX COMMAND...: runs COMMAND under callgrind (its output in
# OUT_PREFIX.callgrind, its stdout and valgrind's stderr beside it) and prints callgrind's Ir
# total; on failure prints both outputs and exits 1.
callgrind_total() {
  local out=$1
  shift
  if ! valgrind --tool=callgrind --callgrind-out-file="$out.callgrind" "$@" \
      >"$out.stdout" 2>"$out.valgrind"; then
    cat "$out.stdout" "$out.valgrind" >&2
    echo "$* failed under valgrind" >&2
    exit 1
  fi
  sed -n 's/^summary: \([0-9]*\)$/\1/p' "$out.callgrind"
}
