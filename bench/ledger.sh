#!/usr/bin/env bash
# Ledger benchmark (bench/README.md): one simulated capture ingested once, then side by side
# in one run
#   1. gpuledger ledger (every step of queries/, derived tables written), release build;
#   2. DuckDB (PyPI) running the same sample path (bench/ledger_duckdb.sql) over the same Parquet.
# Wall time and peak RSS of each (/usr/bin/time), and their GPU-hours by month/team/state compared.
set -euo pipefail
cd "$(dirname "$0")/.."
GPUS=${GPUS:-64}
DAYS=${DAYS:-7}
W=${BENCH_DIR:-bench-data/ledger}
mkdir -p "$W"
cargo build --release --features ballista --bin gpuledger -p gpuledger >&2
BIN=target/release/gpuledger

if [ ! -f "$W/store/.gpuledger-store" ] || [ "$(cat "$W/params" 2>/dev/null)" != "$GPUS $DAYS" ]; then
  rm -rf "$W/capture" "$W/store"
  echo "simulating $GPUS GPUs x $DAYS days at 30 s, then ingesting..." >&2
  "$BIN" simulate --out "$W/capture" --gpus "$GPUS" --days "$DAYS" >&2
  "$BIN" ingest "$W/capture" --store "$W/store" --progress off >&2
  rm -rf "$W/capture"   # the store is what both engines read
  echo "$GPUS $DAYS" > "$W/params"
fi
ROWS=$("$BIN" query --store "$W/store" --format csv "SELECT count(*) AS n FROM gpu_samples" | tail -1)

/usr/bin/time -f '%e %M' -o "$W/ledger.time" "$BIN" ledger --store "$W/store" --config examples/gpuledger.toml --progress off > "$W/ledger.out"
sed "s#@STORE@#$W/store#g" bench/ledger_duckdb.sql > "$W/duckdb.sql"
/usr/bin/time -f '%e %M' -o "$W/duckdb.time" python3 - "$W" <<'PY'
import duckdb, sys
w = sys.argv[1]
con = duckdb.connect()
con.execute(open(f"{w}/duckdb.sql").read())
con.execute(f"COPY result TO '{w}/duckdb_result.parquet' (FORMAT parquet)")
PY
python3 - "$W" "$ROWS" <<'PY'
import duckdb, json, sys
w, rows = sys.argv[1], int(sys.argv[2])
con = duckdb.connect()
ours = dict(((m, t, s), h) for m, t, s, h in con.execute(f"SELECT month, team, state, sum(gpu_hours) FROM '{w}/store/ledger/priced_state_hours.parquet' GROUP BY ALL").fetchall())
duck = dict(((m, t, s), h) for m, t, s, h in con.execute(f"SELECT month, team, state, gpu_hours FROM '{w}/duckdb_result.parquet'").fetchall())
worst = max(abs(ours.get(k, 0) - duck.get(k, 0)) for k in set(ours) | set(duck))
lt, lm = open(f"{w}/ledger.time").read().split()
dt, dm = open(f"{w}/duckdb.time").read().split()
print(json.dumps({"gpu_sample_rows": rows, "ledger_seconds": float(lt), "ledger_peak_rss_mib": int(lm) // 1024,
                  "duckdb_seconds": float(dt), "duckdb_peak_rss_mib": int(dm) // 1024,
                  "ledger_vs_duckdb_time": round(float(lt) / float(dt), 2),
                  "cells": len(ours), "max_gpu_hour_difference": worst}, indent=1))
PY
