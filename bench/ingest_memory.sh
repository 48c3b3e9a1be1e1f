#!/usr/bin/env bash
# Ingest memory benchmark (bench/README.md, "Ingest memory"): peak memory of `gpuledger
# ingest` on one generated pods watch stream of SIZE_MB MiB (default 4096, bench/watch_stream.py),
# side by side with a stream a tenth that size. Memory bounded by the settings, not the input,
# shows as two peaks about equal. Prints one JSON object.
#   BIN=target/debug/gpuledger SKIP_BUILD=1 bash bench/ingest_memory.sh   measures a debug build
#   (the same data structures, so about the same memory; slower).
#   PEER_BIN=/path/to/older/gpuledger   also runs that binary on the smaller stream, in the same run.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/common.sh
bench_setup ingest-memory bench-data/ingest-memory
SIZE_MB=${SIZE_MB:-4096}
sizes="$((SIZE_MB / 10)) $SIZE_MB"
rm -f "$W/time-peer" "$W/ingest-peer.json"
for mb in $sizes; do
  dir=$W/watch-$mb
  if [ ! -f "$dir/pods.jsonl" ]; then
    say "writing a ${mb} MiB pods watch stream..."
    python3 bench/watch_stream.py --mb "$mb" --out "$dir/pods.jsonl" > "$W/stream-$mb.json"
  fi
  rm -rf "$W/store"
  say "ingesting ${mb} MiB..."
  /usr/bin/time -f '%e %M' -o "$W/time-$mb" "$BIN" ingest "$dir" --store "$W/store" --format json --progress off > "$W/ingest-$mb.json"
done
if [ -n "${PEER_BIN:-}" ]; then
  mb=$((SIZE_MB / 10))
  rm -rf "$W/store"
  say "ingesting ${mb} MiB with $PEER_BIN..."
  /usr/bin/time -f '%e %M' -o "$W/time-peer" "$PEER_BIN" ingest "$W/watch-$mb" --store "$W/store" --format json --progress off > "$W/ingest-peer.json"
fi
rm -rf "$W/store"
python3 - "$W" $sizes <<'PY'
import json, sys
w, sizes = sys.argv[1], sys.argv[2:]
out = {}
for mb in sizes:
    seconds, maxrss_kb = open(f"{w}/time-{mb}").read().split()
    ingest = json.load(open(f"{w}/ingest-{mb}.json"))
    stream = json.load(open(f"{w}/stream-{mb}.json"))
    out[f"{mb}_mib"] = {
        "stream_bytes": stream["bytes"],
        "versions": stream["versions"],
        "k8s_objects_rows": ingest["rows_written"].get("k8s_objects"),
        "rejected": ingest.get("rejected"),
        "seconds": float(seconds),
        "peak_rss_mib_time": round(int(maxrss_kb) / 1024),
        "peak_rss_mib_summary": round((ingest.get("peak_rss_bytes") or 0) / 1048576),
    }
try:
    seconds, maxrss_kb = open(f"{w}/time-peer").read().split()
    ingest = json.load(open(f"{w}/ingest-peer.json"))
    out[f"peer_{sizes[0]}_mib"] = {"k8s_objects_rows": ingest["rows_written"].get("k8s_objects"), "seconds": float(seconds), "peak_rss_mib_time": round(int(maxrss_kb) / 1024)}
except FileNotFoundError:
    pass
print(json.dumps(out, indent=1))
PY
