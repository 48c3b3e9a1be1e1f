#!/usr/bin/env bash
# Serving benchmark (bench/README.md): `gpuledger serve` under dashboard load. A simulated
# month of GPUS GPUs is ingested and run through the ledger once (cached in the work directory),
# then the release server answers CLIENTS PostgreSQL clients (bench/serve_load.py, psycopg 3,
# SCRAM login) that send the Grafana dashboards' queries (dashboards/*.json, macros and variables
# expanded as Grafana's PostgreSQL data source does, time range = the simulated month) back to
# back for DURATION seconds. The server is sampled from /proc every second: peak RSS is the
# largest VmHWM, CPU its user + system time. Prints queries/s, p50/p95/p99 latency, errors, peak
# RSS and the figures per query; everything goes to $W/result.json.
#
#   bash bench/serve.sh           # GPUS=256 DAYS=30 SCRAPE=30s CLIENTS=32 DURATION=60
#   GPUS=16 DAYS=3 CLIENTS=4 DURATION=10 BIN=target/debug/gpuledger bash bench/serve.sh
#
# Knobs: GPUS, DAYS, SEED, SCRAPE (the simulator's scrape interval), START (first day, UTC; the
# default month is November 2026, which examples/gpuledger.toml has overheads for), CLIENTS,
# DURATION, INTERVAL ($__interval, 1h), PROTOCOL (simple | prepared), SKIP_FAILING=1 (drop the
# queries that fail validation instead of stopping), QUERIES (auto | dashboards | fallback),
# DASHBOARDS (the folder of Grafana dashboard JSON, dashboards),
# BENCH_DIR (work directory, bench-data/serve), REUSE=0 (rebuild the store even when the cached
# one has the same parameters), SKIP_BUILD=1 (use the release binary as it is), BIN (another
# binary, e.g. target/debug/gpuledger: no build), TEXT=1 (simulate a text capture and ingest it,
# instead of `simulate --store`), KEEP_CAPTURE=1 (with TEXT=1: keep the simulated text),
# INGEST_FLUSH_ROWS (with TEXT=1: ingest's --flush-rows, its default 2000000), SERVE_EXTRA
# (lines added to the server's [serve] section, e.g. SERVE_EXTRA='result_cache = "0"').
#
# With TEXT=1 the text must fit on disk before ingest: about 7.4 KB per GPU per scrape plus 1 MB
# per GPU-day of Kubernetes objects (a month of 256 GPUs: ~24 GB at 5m, ~170 GB at 30 s). At 30 s
# gpu_samples holds ~22M rows for that month.
set -euo pipefail
cd "$(dirname "$0")/.."
GPUS=${GPUS:-256}
DAYS=${DAYS:-30}
SEED=${SEED:-42}
SCRAPE=${SCRAPE:-30s}
START=${START:-2026-11-01T00:00:00Z}
CLIENTS=${CLIENTS:-32}
DURATION=${DURATION:-60}
INTERVAL=${INTERVAL:-1h}
PROTOCOL=${PROTOCOL:-simple}
QUERIES=${QUERIES:-auto}
DASHBOARDS=${DASHBOARDS:-dashboards}
REUSE=${REUSE:-1}
. bench/common.sh
bench_setup serve bench-data/serve

# The PostgreSQL driver: psycopg 3 from PyPI, in a venv of the work directory unless installed.
PY=python3
if ! python3 -c 'import psycopg' 2>/dev/null; then
  if ! "$W/venv/bin/python" -c 'import psycopg' 2>/dev/null; then
    say "installing psycopg[binary] into $W/venv"
    python3 -m venv "$W/venv" >&2
    "$W/venv/bin/pip" install -q 'psycopg[binary]' >&2
  fi
  PY=$W/venv/bin/python
fi

# Time range: the simulated days; Grafana's "previous month" ends at the last millisecond.
read -r FROM TO < <(python3 - "$START" "$DAYS" <<'PY'
import datetime as dt, sys
s = dt.datetime.fromisoformat(sys.argv[1].replace("Z", "+00:00")).astimezone(dt.timezone.utc)
e = s + dt.timedelta(days=int(sys.argv[2])) - dt.timedelta(milliseconds=1)
f = lambda t: t.strftime("%Y-%m-%dT%H:%M:%S") + (f".{t.microsecond // 1000:03d}" if t.microsecond else "") + "Z"
print(f(s), f(e))
PY
)

# The configurations: the example (it prices the simulator's node pools) for the ledger; the
# same plus a [serve] section for the server (any [serve] of the example is replaced).
awk '/^\[\[?serve[].]/ {skip=1; next} /^\[/ {skip=0} !skip' examples/gpuledger.toml > "$W/gpuledger.toml"
MAXCONN=$(( CLIENTS + 8 > 40 ? CLIENTS + 8 : 40 ))
{ cat "$W/gpuledger.toml"; cat <<TOML

[serve]
pg_listen = "127.0.0.1:0"
http_listen = "127.0.0.1:0"
query_timeout = "60s"
memory_limit = "2GiB"
max_connections = $MAXCONN
${SERVE_EXTRA:-}

[[serve.users]]
name = "grafana"
password_env = "GPULEDGER_BENCH_PASSWORD"
TOML
} > "$W/serve.toml"

# The store: simulate, ingest, ledger; reused when the cached one has the same parameters.
PARAMS="$GPUS $DAYS $SEED $SCRAPE $START"
if [ "$REUSE" = 1 ] && [ -f "$W/prepare.json" ] && [ "$(cat "$W/params" 2>/dev/null)" = "$PARAMS" ]; then
  say "reusing the store in $W/store ($PARAMS; REUSE=0 rebuilds it)"
else
  rm -rf "$W/capture" "$W/store" "$W/prepare.json" "$W/params"
  timed() { local name=$1; shift; /usr/bin/time -f '%e %M' -o "$W/$name.time" "$@"; }
  CAPTURE_BYTES=0
  if [ "${TEXT:-0}" != 1 ]; then
    # Straight into the store (`simulate --store`: the DCGM text goes to the ingest's parser in
    # memory), so a month at 30 s needs no disk for its text; timed as the ingest.
    say "simulating $GPUS GPUs x $DAYS days from $START at a $SCRAPE scrape into the store..."
    timed ingest "$BIN" simulate --store "$W/store" --gpus "$GPUS" --days "$DAYS" --seed "$SEED" --scrape-interval "$SCRAPE" --start "$START" --progress off > "$W/ingest.out"
  else
    python3 - "$W" "$GPUS" "$DAYS" "$SCRAPE" <<'PY'
import os, re, sys
w, gpus, days, scrape = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
m = re.fullmatch(r"(\d+)([sm]?)", scrape)
secs = int(m[1]) * (60 if m[2] == "m" else 1)
need = gpus * days * (86400 / secs * 7.4e3 + 1e6)
st = os.statvfs(w)
free = st.f_bavail * st.f_frsize
print(f"serve bench: the capture needs about {need / 1e9:.1f} GB of text; {free / 1e9:.1f} GB free", file=sys.stderr)
if need * 1.1 > free:
    sys.exit("serve bench: not enough disk for the capture: raise SCRAPE (e.g. SCRAPE=10m) or lower GPUS/DAYS")
PY
    say "simulating $GPUS GPUs x $DAYS days from $START at a $SCRAPE scrape..."
    timed simulate "$BIN" simulate --out "$W/capture" --gpus "$GPUS" --days "$DAYS" --seed "$SEED" --scrape-interval "$SCRAPE" --start "$START" >&2
    CAPTURE_BYTES=$(du -sb "$W/capture" | cut -f1)
    say "ingesting $((CAPTURE_BYTES / 1000000)) MB..."
    # A month of 256 GPUs has ~2.1M Kubernetes object versions (~1 KB of JSON each); the store
    # flushes a table at 512 MiB as well as at --flush-rows, so their strings stay under arrow's
    # 2 GiB offsets (before that, this ingest failed with "Offset overflow error").
    timed ingest "$BIN" ingest "$W/capture" --store "$W/store" --progress off --flush-rows "${INGEST_FLUSH_ROWS:-2000000}" > "$W/ingest.out"
    [ -n "${KEEP_CAPTURE:-}" ] || rm -rf "$W/capture"
  fi
  say "running the ledger..."
  timed ledger "$BIN" ledger --store "$W/store" --config "$W/gpuledger.toml" --progress off > "$W/ledger.out"
  ROWS=$("$BIN" query --store "$W/store" --format csv "SELECT count(*) AS n FROM gpu_samples" | tail -1)
  python3 - "$W" "$CAPTURE_BYTES" "$ROWS" > "$W/prepare.json" <<'PY'
import json, subprocess, sys
w, capture, rows = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
out = {"capture_bytes": capture, "gpu_sample_rows": rows,
       "store_bytes": int(subprocess.run(["du", "-sb", f"{w}/store"], capture_output=True, text=True).stdout.split()[0])}
for step in ("simulate", "ingest", "ledger"):
    try:
        secs, kib = open(f"{w}/{step}.time").read().split()[-2:]
    except FileNotFoundError:   # simulate --store: one step, timed as the ingest
        continue
    out[step] = {"seconds": float(secs), "peak_rss_mib": int(kib) // 1024}
print(json.dumps(out, indent=1))
PY
  echo "$PARAMS" > "$W/params"
fi
python3 - "$W/prepare.json" "$PARAMS" <<'PY' >&2
import json, sys
p = json.load(open(sys.argv[1]))
print(f"store ({sys.argv[2]}): {p['gpu_sample_rows']:,} gpu_samples rows, {p['store_bytes'] / 2**20:.0f} MiB; "
      + (f"capture {p['capture_bytes'] / 1e9:.1f} GB of text" if p["capture_bytes"] else "no text capture (simulate --store)"))
for s in ("simulate", "ingest", "ledger"):
    if s in p:
        print(f"  {s:9} {p[s]['seconds']:8.1f} s   peak RSS {p[s]['peak_rss_mib']:6} MiB")
PY

# The server.
GPULEDGER_BENCH_PASSWORD=$(python3 -c 'import secrets; print(secrets.token_urlsafe(18))')
export GPULEDGER_BENCH_PASSWORD
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
: > "$W/serve.out"
"$BIN" serve --store "$W/store" --config "$W/serve.toml" > "$W/serve.out" 2> "$W/serve.log" &
server=$!; pids+=("$server")
started=$(date +%s.%N)
for _ in $(seq 600); do
  grep -q '^ready ' "$W/serve.out" && break
  kill -0 "$server" 2>/dev/null || { cat "$W/serve.log" >&2; say "the server exited before it was ready"; exit 1; }
  sleep 0.2
done
grep -q '^ready ' "$W/serve.out" || { cat "$W/serve.log" >&2; say "no ready line after 120 s"; exit 1; }
PORT=$(sed -n 's/^ready sql=[^ ]*:\([0-9]*\) .*/\1/p' "$W/serve.out")
say "server pid $server ready in $(python3 -c "import time; print(round(time.time() - $started, 2))") s on port $PORT"

# /proc sampler: VmRSS, VmHWM and CPU seconds of the server every second, until it is told to stop.
rm -f "$W/sampler.stop"
python3 - "$server" "$W/sampler.stop" > "$W/rss.jsonl" <<'PY' &
import json, os, sys, time
pid, stop = int(sys.argv[1]), sys.argv[2]
tick = os.sysconf("SC_CLK_TCK")
while not os.path.exists(stop):
    try:
        st = {l.split(":")[0]: int(l.split()[1]) for l in open(f"/proc/{pid}/status") if l.startswith(("VmRSS", "VmHWM"))}
        f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        load = open("/proc/loadavg").read().split()[0]
    except (FileNotFoundError, ProcessLookupError):
        break
    print(json.dumps({"t": time.time(), "rss_kib": st["VmRSS"], "hwm_kib": st["VmHWM"],
                      "cpu_s": (int(f[11]) + int(f[12])) / tick, "load1": float(load)}), flush=True)
    time.sleep(1)
PY
sampler=$!; pids+=("$sampler")

say "load: $CLIENTS clients x $DURATION s (range $FROM .. $TO, \$__interval $INTERVAL, $PROTOCOL protocol); $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
set +e
"$PY" bench/serve_load.py --port "$PORT" --from "$FROM" --to "$TO" --interval "$INTERVAL" --clients "$CLIENTS" \
  --duration "$DURATION" --protocol "$PROTOCOL" --queries "$QUERIES" --dashboards "$DASHBOARDS" ${SKIP_FAILING:+--skip-failing} --out "$W/load.json"
rc=$?
set -e
touch "$W/sampler.stop"; wait "$sampler" 2>/dev/null || true
kill -TERM "$server"; wait "$server" 2>/dev/null || true
pids=()
[ $rc = 0 ] || { say "the load run failed (exit $rc); server log: $W/serve.log"; exit $rc; }

python3 - "$W" "$PARAMS" "$BIN" <<'PY'
import json, sys
w, params, binary = sys.argv[1], sys.argv[2], sys.argv[3]
load = json.load(open(f"{w}/load.json"))
prep = json.load(open(f"{w}/prepare.json"))
rss = [json.loads(l) for l in open(f"{w}/rss.jsonl")]
t0, t1 = load["timed_start_epoch"], load["timed_end_epoch"]
during = [s for s in rss if t0 <= s["t"] <= t1 + 1] or rss
before = [s for s in rss if s["t"] < t0] or rss[:1]
mib = lambda k: round(k / 1024, 1)
cpu = during[-1]["cpu_s"] - before[-1]["cpu_s"] if before else 0
res = {
    "params": dict(zip(["gpus", "days", "seed", "scrape", "start"], params.split())), "binary": binary,
    "prepare": prep,
    "qps": load["qps"], "latency": load["latency"], "errors": load["errors"],
    "peak_rss_mib": mib(max(s["hwm_kib"] for s in rss)),
    "rss_mib_at_start": mib(rss[0]["rss_kib"]), "rss_mib_max_during_load": mib(max(s["rss_kib"] for s in during)),
    "server_cpu_s": round(cpu, 1), "server_cpu_cores": round(cpu / max(load["elapsed_s"], 1e-9), 2),
    "client_cpu_cores": load["client_cpu_share_of_one_core"], "cpus": load["cpus"],
    "load_average_during": round(sum(s["load1"] for s in during) / len(during), 2),
    "load": {k: v for k, v in load.items() if k not in ("per_kind", "sql")},
    "per_kind": load["per_kind"],
}
json.dump(res, open(f"{w}/result.json", "w"), indent=1)
lat = load["latency"]
print(f"\n{load['clients']} clients x {load['duration_s']:.0f} s on {params} (GPUs days seed scrape start), "
      f"{prep['gpu_sample_rows']:,} gpu_samples rows; {load['queries']} queries from {load['source']}, {load['protocol']} protocol")
print(f"{'queries/s':24} {load['qps']}")
print(f"{'latency p50/p95/p99':24} {lat['p50_ms']} / {lat['p95_ms']} / {lat['p99_ms']} ms (max {lat['max_ms']} ms, {lat['count']} queries)")
print(f"{'errors':24} {load['errors']}" + (f"  e.g. {load['error_samples'][0][:200]}" if load["errors"] else ""))
print(f"{'peak RSS (VmHWM)':24} {res['peak_rss_mib']} MiB (RSS {res['rss_mib_at_start']} MiB once ready, {res['rss_mib_max_during_load']} MiB max in the timed run)")
print(f"{'server CPU':24} {res['server_cpu_cores']} cores busy on average ({res['server_cpu_s']} s)")
print(f"{'client CPU':24} {res['client_cpu_cores']} cores (bench/serve_load.py, same machine)")
print(f"note: {res['cpus']} CPUs shared by server and clients, load average {res['load_average_during']} during the run"
      + ("; this machine is shared and noisy" if res['cpus'] <= 4 else ""))
if load["failed_validation"]:
    print(f"{len(load['failed_validation'])} queries failed validation and were left out: "
          + "; ".join(f["kind"] for f in load["failed_validation"]))
print(f"\n{'query':60} {'n':>6} {'p50 ms':>9} {'p99 ms':>9} {'max ms':>9} {'alone ms':>9} {'rows':>7} err")
for kind, k in sorted(load["per_kind"].items(), key=lambda kv: -(kv[1]["p50_ms"] or 0)):
    print(f"{kind[:60]:60} {k['count']:6} {k['p50_ms'] or 0:9.1f} {k['p99_ms'] or 0:9.1f} {k['max_ms'] or 0:9.1f} "
          f"{k['single_client_ms']:9.1f} {k['rows']:7} {k['errors']}")
print(f"\n(JSON: {w}/result.json; 'alone ms' is the validation pass, one client)")
PY
