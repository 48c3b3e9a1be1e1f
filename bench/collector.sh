#!/usr/bin/env bash
# Collector benchmark (bench/README.md): what `gpuledger collect` costs while it scrapes
# 1,000 simulated GPUs (125 loopback exporters of 8 GPUs, bench/exporter_farm.py) every 15 s,
# side by side in one run with a real Prometheus (Debian package) scraping the same exporters at
# the same interval. Both processes are sampled from /proc every 5 s for DURATION seconds: CPU
# time (user + system) as a share of one core, and resident memory.
#   EXPORTERS=125 INTERVAL=15s DURATION=600 bash bench/collector.sh
set -euo pipefail
cd "$(dirname "$0")/.."
EXPORTERS=${EXPORTERS:-125}
INTERVAL=${INTERVAL:-15s}
DURATION=${DURATION:-600}
PORT0=${PORT0:-29400}
W=${BENCH_DIR:-bench-data/collector}
rm -rf "$W/store" "$W/prometheus" && mkdir -p "$W"
# SKIP_BUILD=1 reuses target/release/gpuledger as it is (a release build takes long here).
[ -n "${SKIP_BUILD:-}" ] || cargo build --release --features ballista --bin gpuledger -p gpuledger >&2
BIN=target/release/gpuledger
command -v prometheus >/dev/null || { echo "install the Debian package prometheus (the peer)" >&2; exit 2; }

[ -d "$W/capture/dcgm" ] || "$BIN" simulate --out "$W/capture" --gpus 8 --days 1 --scrape-interval "$INTERVAL" >&2

pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT
python3 bench/exporter_farm.py "$W/capture" "$PORT0" "$EXPORTERS" 2> "$W/farm.log" &
pids+=($!)
for _ in $(seq 100); do grep -q ready "$W/farm.log" 2>/dev/null && break; sleep 0.2; done
cat "$W/farm.log" >&2

targets=$(python3 -c "import json,sys; print(json.dumps(['127.0.0.1:%d' % (int(sys.argv[1]) + i) for i in range(int(sys.argv[2]))]))" "$PORT0" "$EXPORTERS")
urls=$(python3 -c "import json,sys; print(json.dumps(['http://127.0.0.1:%d/metrics' % (int(sys.argv[1]) + i) for i in range(int(sys.argv[2]))]))" "$PORT0" "$EXPORTERS")
cat > "$W/gpuledger.toml" <<TOML
[prices]
default = 2.0

[collector]
kubernetes = false
scrape_interval = "$INTERVAL"
dcgm_endpoints = $urls
listen = "127.0.0.1:$((PORT0 - 1))"
TOML
cat > "$W/prometheus.yml" <<YML
global:
  scrape_interval: $INTERVAL
scrape_configs:
  - job_name: dcgm
    static_configs:
      - targets: $targets
YML

"$BIN" collect --config "$W/gpuledger.toml" --store "$W/store" 2> "$W/collect.log" &
collector=$!; pids+=($collector)
prometheus --config.file="$W/prometheus.yml" --storage.tsdb.path="$W/prometheus" \
  --web.listen-address="127.0.0.1:$((PORT0 - 2))" 2> "$W/prometheus.log" &
prom=$!; pids+=($prom)

echo "sampling gpuledger collect (pid $collector) and prometheus (pid $prom) for $DURATION s..." >&2
python3 - "$collector" "$prom" "$DURATION" > "$W/result.json" <<'PY'
import json, os, sys, time
pids = {"gpuledger collect": int(sys.argv[1]), "prometheus": int(sys.argv[2])}
duration = float(sys.argv[3])
tick = os.sysconf("SC_CLK_TCK")
def cpu(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / tick
def rss_mib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
time.sleep(20)  # both have started and scraped once
start = {n: (time.time(), cpu(p)) for n, p in pids.items()}
rss = {n: [] for n in pids}
end_at = time.time() + duration
while time.time() < end_at:
    for n, p in pids.items():
        rss[n].append(rss_mib(p))
    time.sleep(5)
out = {}
for n, p in pids.items():
    t0, c0 = start[n]
    secs = time.time() - t0
    used = cpu(p) - c0
    out[n] = {"seconds": round(secs, 1), "cpu_seconds": round(used, 2), "cpu_percent_of_one_core": round(100 * used / secs, 2),
              "rss_mib_mean": round(sum(rss[n]) / len(rss[n]), 1), "rss_mib_max": round(max(rss[n]), 1)}
print(json.dumps(out, indent=2))
PY
metrics=$(curl -s "http://127.0.0.1:$((PORT0 - 1))/metrics" || true)
kill -TERM "$collector"; wait "$collector" || true
kill -TERM "$prom"; wait "$prom" || true
cat "$W/result.json"
echo "$metrics" | grep -E '^gpuledger_(scrapes_total|rows_written_total|wal_appends_total|flushes_total)' | \
  awk '{split($1,a,"{"); s[a[1] (index($1,"failed")?"{failed}":"")]+=$2} END {for (k in s) print k, s[k]}' | sort
"$BIN" query --store "$W/store" "SELECT count(*) AS gpu_rows, count(DISTINCT hostname) AS hosts, count(DISTINCT uuid) AS gpus FROM gpu_samples"
python3 - "$W/result.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
g, p = r["gpuledger collect"], r["prometheus"]
print(f"gpuledger collect: {g['cpu_percent_of_one_core']}% of a core, RSS {g['rss_mib_mean']} MiB mean / {g['rss_mib_max']} MiB max")
print(f"prometheus:        {p['cpu_percent_of_one_core']}% of a core, RSS {p['rss_mib_mean']} MiB mean / {p['rss_mib_max']} MiB max")
print(f"ratio gpuledger/prometheus: CPU {g['cpu_seconds'] / max(p['cpu_seconds'], 1e-9):.2f}x, RSS {g['rss_mib_max'] / p['rss_mib_max']:.2f}x")
PY
