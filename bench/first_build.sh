#!/usr/bin/env bash
# The first result on a fresh machine: a fresh clone, an empty cargo home (every crate downloaded)
# and an empty target directory, then `cargo run -- demo` with cargo's unit timings. Prints the
# build and demo times, the CPU time of all units and the slowest units, from cargo's report.
#
#   bash bench/first_build.sh                # REV=<commit> (default HEAD), WORK=<dir> to change
#
# Run it with nothing else on the machine: the figure is the wall-clock time of a 2-core build.
set -euo pipefail
repo=$(git rev-parse --show-toplevel)
rev=${REV:-HEAD}
work=${WORK:-$(mktemp -d /tmp/gpuledger-first-build.XXXXXX)}
rm -rf "$work/clone" "$work/cargo-home" "$work/target" "$work/demo"
git clone -q "$repo" "$work/clone"
git -C "$work/clone" checkout -q "$rev"
cd "$work/clone"
echo "first build of $(git rev-parse --short HEAD) in $work ($(nproc) cores)" >&2
start=$(date +%s)
CARGO_HOME="$work/cargo-home" CARGO_TARGET_DIR="$work/target" cargo run --timings -- demo --out "$work/demo" >"$work/run.log" 2>&1
end=$(date +%s)
build=$(grep -o 'Finished `dev` profile .* in [0-9ms .]*' "$work/run.log" | sed 's/.* in //')
python3 - "$work/target/cargo-timings/cargo-timing.html" "$((end - start))" "$build" "$(grep -c Downloaded "$work/run.log" || true)" <<'PY'
import json, re, sys
html, total, build, downloads = open(sys.argv[1]).read(), int(sys.argv[2]), sys.argv[3], sys.argv[4]
units = json.loads(re.search(r"const UNIT_DATA = (\[.*?\]);\n", html, re.S).group(1))
cpu = sum(u["duration"] for u in units)
print(json.dumps({
    "to_report_seconds": total, "build": build, "crates_downloaded": int(downloads),
    "units": len(units), "unit_seconds": round(cpu),
    "slowest": [f'{u["name"]} {u["version"]}{" " + u["target"].strip() if u["target"].strip() else ""}: {u["duration"]:.0f} s'
                for u in sorted(units, key=lambda u: -u["duration"])[:12]],
}, indent=2))
PY
