# Shared by the benchmark scripts (sourced): the work directory and the binary under test.
#   bench_setup NAME DEFAULT_DIR   sets W (absolute, created), BIN (absolute) and say().
# BIN defaults to the release build, brought up to date first unless SKIP_BUILD is set.
bench_setup() {
  local name=$1
  W=${BENCH_DIR:-$2}
  mkdir -p "$W"
  W=$(cd "$W" && pwd)
  eval "say() { echo \"$name bench: \$*\" >&2; }"
  if [ -z "${BIN:-}" ]; then
    BIN=target/release/gpuledger
    # Waits for the cargo lock when another release build is running, then finds it up to date.
    [ -n "${SKIP_BUILD:-}" ] || cargo build --release --features ballista --bin gpuledger >&2
  fi
  [ -x "$BIN" ] || { say "no binary at $BIN (build it, or set BIN=...)"; exit 2; }
  BIN=$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")
}
