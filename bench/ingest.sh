#!/usr/bin/env bash
# Ingest benchmark (bench/README.md): one simulated capture, then side by side in one run
#   1. gpuledger ingest end to end (parse, Arrow, sort, dedup, zstd Parquet), 2 threads;
#   2. our text parser alone vs the prometheus-parse crate on the same bytes, 1 thread each;
#   3. promtool tsdb create-blocks-from openmetrics on the first $PROMTOOL_SAMPLES samples.
# Prints one JSON object with every figure. Needs Debian's `prometheus` package for promtool.
set -euo pipefail
cd "$(dirname "$0")/.."
GPUS=${GPUS:-1200}
DAYS=${DAYS:-1}
PROMTOOL_SAMPLES=${PROMTOOL_SAMPLES:-2000000}
W=${BENCH_DIR:-bench-data}
mkdir -p "$W"

cargo build --release --features ballista --bin gpuledger -p gpuledger >&2
cargo build --release --example parse_bench -p gpuledger-collector >&2
BIN=target/release/gpuledger

if [ ! -f "$W/capture/expected.json" ] || [ "$(cat "$W/capture.params" 2>/dev/null)" != "$GPUS $DAYS" ]; then
  rm -rf "$W/capture"
  echo "simulating $GPUS GPUs x $DAYS days..." >&2
  /usr/bin/time -f '%e' -o "$W/simulate.time" "$BIN" simulate --out "$W/capture" --gpus "$GPUS" --days "$DAYS" >&2
  echo "$GPUS $DAYS" > "$W/capture.params"
fi

rm -rf "$W/store"
/usr/bin/time -f '%e %M' -o "$W/ingest.time" "$BIN" ingest "$W/capture" --store "$W/store" --format json --progress off > "$W/ingest.json"

target/release/examples/parse_bench "$W/capture" --openmetrics "$W/openmetrics.txt" "$PROMTOOL_SAMPLES" > "$W/parse.json"

promtool_json='null'
if command -v promtool >/dev/null; then
  rm -rf "$W/tsdb"
  /usr/bin/time -f '%e' -o "$W/promtool.time" promtool tsdb create-blocks-from openmetrics "$W/openmetrics.txt" "$W/tsdb" > /dev/null
  promtool_json=$(printf '{"samples":%s,"seconds":%s,"bytes":%s}' "$PROMTOOL_SAMPLES" "$(cat "$W/promtool.time")" "$(du -sb "$W/tsdb" | cut -f1)")
else
  echo "promtool not found (apt-get install prometheus): skipping the TSDB comparison" >&2
fi

sample_bytes=$(du -scb "$W/store/gpu_samples" "$W/store/metric_samples" 2>/dev/null | tail -1 | cut -f1)
read -r ingest_s ingest_kb < "$W/ingest.time"
python3 - "$W" "$ingest_s" "$ingest_kb" "$sample_bytes" "$promtool_json" <<'PY'
import json, sys
w, ingest_s, ingest_kb, sample_bytes, prom = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), json.loads(sys.argv[5])
ing = json.load(open(f"{w}/ingest.json"))
parse = json.load(open(f"{w}/parse.json"))
samples = ing["samples"]
out = {
    "samples": samples,
    "capture_bytes": ing["bytes_read"],
    "ingest_seconds_wall": ingest_s,
    "ingest_samples_per_s": round(samples / ingest_s),
    "ingest_peak_rss_mib": round(ingest_kb / 1024),
    "store_sample_bytes": sample_bytes,
    "store_bytes_per_sample": round(sample_bytes / samples, 3),
    "parser": parse,
}
if prom:
    out["promtool"] = {**prom, "samples_per_s": round(prom["samples"] / prom["seconds"]), "bytes_per_sample": round(prom["bytes"] / prom["samples"], 3)}
    out["ingest_vs_promtool_speed"] = round(out["ingest_samples_per_s"] / out["promtool"]["samples_per_s"], 1)
print(json.dumps(out, indent=2))
PY
