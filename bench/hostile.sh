#!/usr/bin/env bash
# Hostile-load benchmark (bench/README.md, "Serving under hostile load"): how fast `serve`
# answers /healthz and a psql login + `SELECT 1` while RUNAWAYS statements that would run for
# hours (cross joins of generate_series) are running, against the same probes on the idle server
# in the same run. PEER=<binary> runs the same probes against another build side by side (an
# older release, say). Prints one JSON line per binary; everything goes to $W/.
#
#   bash bench/hostile.sh                         # RUNAWAYS=2 PROBES=20 TIMEOUT=60s
#   PEER=/path/to/old/gpuledger bash bench/hostile.sh
#
# Each probe is bounded by PROBE_LIMIT seconds (10): a probe that gets no answer in time counts
# as that long, and is reported as unanswered.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNAWAYS=${RUNAWAYS:-2}
PROBES=${PROBES:-20}
TIMEOUT=${TIMEOUT:-60s}
PROBE_LIMIT=${PROBE_LIMIT:-10}
. bench/common.sh
bench_setup hostile bench-data/hostile

if [ ! -f "$W/demo/store/.gpuledger-store" ]; then
  say "building a demo store (8 GPUs x 2 days)"
  "$BIN" demo --out "$W/demo" --gpus 8 --days 2 > /dev/null 2>&1
fi
awk '/^\[\[?serve[].]/ {skip=1; next} /^\[/ {skip=0} !skip' "$W/demo/gpuledger.toml" > "$W/serve.toml"
cat >> "$W/serve.toml" <<TOML

[serve]
pg_listen = "127.0.0.1:0"
http_listen = "127.0.0.1:0"
query_timeout = "$TIMEOUT"

[[serve.users]]
name = "grafana"
password_env = "GPULEDGER_BENCH_PASSWORD"
TOML
export GPULEDGER_BENCH_PASSWORD=bench-pw PGPASSWORD=bench-pw
RUNAWAY="SELECT count(*) FROM generate_series(1, 1000000) AS a(x) CROSS JOIN generate_series(1, 100000000) AS b(y)"

# probe KIND PORT: seconds one probe took (PROBE_LIMIT when unanswered), "ok"/"no" after it.
probe() {
  local start end ok=no
  start=$(date +%s.%N)
  if [ "$1" = healthz ]; then
    curl -s -m "$PROBE_LIMIT" -o /dev/null -w '%{http_code}' "http://127.0.0.1:$2/healthz" | grep -q 200 && ok=ok
  else
    PGCONNECT_TIMEOUT=$PROBE_LIMIT timeout "$PROBE_LIMIT" psql -h 127.0.0.1 -p "$2" -U grafana -d datafusion -X -A -t -c "SELECT 1" 2>/dev/null | grep -qx 1 && ok=ok
  fi
  end=$(date +%s.%N)
  echo "$(echo "$end - $start" | bc) $ok"
}

# series KIND PORT: PROBES probes -> "median_ms max_ms unanswered"
series() {
  for _ in $(seq "$PROBES"); do probe "$1" "$2"; sleep 0.2; done | python3 -c '
import sys, statistics
rows = [l.split() for l in sys.stdin if l.strip()]
t = sorted(float(r[0]) * 1000 for r in rows)
missed = sum(r[1] != "ok" for r in rows)
print(f"{statistics.median(t):.1f} {max(t):.1f} {missed}")'
}

SERVERS=()
# Whatever happens to the script, no server it started outlives it.
trap 'for s in "${SERVERS[@]}"; do kill "$s" 2>/dev/null || true; done' EXIT

run_one() {
  local bin=$1 label=$2
  "$bin" serve --store "$W/demo/store" --config "$W/serve.toml" > "$W/$label.out" 2> "$W/$label.log" &
  local server=$!
  SERVERS+=("$server")
  for _ in $(seq 100); do grep -q '^ready' "$W/$label.out" 2>/dev/null && break; sleep 0.2; done
  local line pg http
  line=$(head -1 "$W/$label.out")
  pg=$(echo "$line" | sed -E 's/.*sql=[^ ]*:([0-9]+).*/\1/')
  http=$(echo "$line" | sed -E 's/.*http=[^ ]*:([0-9]+).*/\1/')
  read -r idle_h idle_hmax idle_hno < <(series healthz "$http")
  read -r idle_s idle_smax idle_sno < <(series select "$pg")
  local pids=()
  for _ in $(seq "$RUNAWAYS"); do
    psql -h 127.0.0.1 -p "$pg" -U grafana -d datafusion -X -c "$RUNAWAY" > /dev/null 2>&1 &
    pids+=($!)
  done
  sleep 2
  read -r load_h load_hmax load_hno < <(series healthz "$http")
  read -r load_s load_smax load_sno < <(series select "$pg")
  local started ended
  started=$(date +%s)
  # How long the runaways still ran after the probes (they end at query_timeout, or never).
  for p in "${pids[@]}"; do timeout 120 tail --pid="$p" -f /dev/null || kill "$p" 2>/dev/null || true; done
  ended=$(date +%s)
  kill "$server" 2>/dev/null || true
  wait "$server" 2>/dev/null || true
  echo "{\"binary\":\"$label\",\"runaways\":$RUNAWAYS,\"probes\":$PROBES,\"query_timeout\":\"$TIMEOUT\",\"healthz_ms\":{\"idle_median\":$idle_h,\"idle_max\":$idle_hmax,\"load_median\":$load_h,\"load_max\":$load_hmax,\"load_unanswered\":$load_hno},\"select1_ms\":{\"idle_median\":$idle_s,\"idle_max\":$idle_smax,\"load_median\":$load_s,\"load_max\":$load_smax,\"load_unanswered\":$load_sno},\"runaways_ended_s_after_probes\":$((ended - started))}" | tee "$W/$label.json"
}

run_one "$BIN" this
if [ -n "${PEER:-}" ]; then run_one "$PEER" peer; fi
