#!/usr/bin/env bash
# The serving benchmark with pgbench (C, libpq) as the clients instead of psycopg: the same
# dashboard statements, sent back to back in the simple-query protocol Grafana uses, each
# client picking one at random per round. Python's decoding of the per-GPU heatmap's 177K rows
# took most of a core of the two this machine has (bench/README.md "Serving"); libpq reads
# every row too but builds no Python objects, closer to Grafana's Go backend.
#
# Run bench/serve.sh first: this reuses its store and the statements it expanded from the
# dashboards ($W/load.json). Prints queries/s and p50/p95/p99/max, overall and for the slowest
# statements; everything goes to $W/pgbench.json.
#
#   bash bench/serve_pgbench.sh                               # CLIENTS=32 DURATION=60
#   SERVE_EXTRA='result_cache = "0"' bash bench/serve_pgbench.sh   # the same without the cache
set -euo pipefail
cd "$(dirname "$0")/.."
CLIENTS=${CLIENTS:-32}
DURATION=${DURATION:-60}
. bench/common.sh
bench_setup serve-pgbench bench-data/serve
command -v pgbench >/dev/null || { say "pgbench is needed (Debian: postgresql-contrib or postgresql-client)"; exit 2; }
[ -f "$W/load.json" ] && [ -f "$W/serve.toml" ] && [ -d "$W/store" ] || { say "run bench/serve.sh first (no store or load.json in $W)"; exit 2; }

# The statements, one pgbench script each (pgbench reads `:name` as its variables, and none of
# these is defined, so the text is sent as it is).
S="$W/pgbench-scripts"
rm -rf "$S" && mkdir -p "$S"
python3 - "$W/load.json" "$S" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
names = list(d["sql"])
for i, name in enumerate(names):
    open(f"{sys.argv[2]}/q{i:02d}.sql", "w").write(d["sql"][name].strip().rstrip(";") + ";\n")
json.dump(names, open(f"{sys.argv[2]}/names.json", "w"))
PY

# The server, with bench/serve.sh's configuration (and SERVE_EXTRA's lines).
# (bench/serve.sh's last run may have left a result_cache line of its own: dropped.)
grep -v '^result_cache' "$W/serve.toml" | awk -v extra="${SERVE_EXTRA:-}" '{print} /^\[serve\]$/ && extra != "" {print extra}' > "$W/serve-pgbench.toml"
GPULEDGER_BENCH_PASSWORD=$(python3 -c 'import secrets; print(secrets.token_urlsafe(18))')
GPULEDGER_API_TOKEN=$(python3 -c 'import secrets; print(secrets.token_urlsafe(18))')
export GPULEDGER_BENCH_PASSWORD GPULEDGER_API_TOKEN
"$BIN" serve --store "$W/store" --config "$W/serve-pgbench.toml" > "$W/serve-pgbench.out" 2> "$W/serve-pgbench.log" &
server=$!
trap 'kill "$server" 2>/dev/null || true' EXIT
for _ in $(seq 600); do grep -q '^ready ' "$W/serve-pgbench.out" && break; sleep 0.2; done
PORT=$(sed -n 's/^ready sql=[^ ]*:\([0-9]*\) .*/\1/p' "$W/serve-pgbench.out")
HTTP=$(sed -n 's/^ready .*http=\([^ ]*\).*/\1/p' "$W/serve-pgbench.out")
[ -n "$PORT" ] || { cat "$W/serve-pgbench.log" >&2; say "the server did not start"; exit 1; }

say "pgbench: $CLIENTS clients x $DURATION s, $(ls "$S"/q*.sql | wc -l) statements, simple protocol; $(nproc) CPUs"
rm -f "$S"/log*
args=()
for f in "$S"/q*.sql; do args+=(-f "$f"); done
(cd "$S" && PGPASSWORD=$GPULEDGER_BENCH_PASSWORD pgbench -h 127.0.0.1 -p "$PORT" -U grafana -n -M simple -c "$CLIENTS" -j 2 -T "$DURATION" -l --log-prefix=log "${args[@]}" gpuledger > "$W/pgbench.out" 2>&1) || { tail -20 "$W/pgbench.out" >&2; exit 1; }
curl -s -H "Authorization: Bearer $GPULEDGER_API_TOKEN" "http://$HTTP/metrics" > "$W/pgbench-metrics.txt"

python3 - "$S" "$W" "$DURATION" <<'PY'
import collections, glob, json, sys
s, w, duration = sys.argv[1], sys.argv[2], float(sys.argv[3])
names = json.load(open(f"{s}/names.json"))
by = collections.defaultdict(list)
for path in glob.glob(f"{s}/log*"):
    for line in open(path):
        f = line.split()
        by[int(f[3])].append(int(f[2]) / 1000)
every = sorted(x for v in by.values() for x in v)
def pct(v, p): return v[min(len(v) - 1, int(len(v) * p))]
metrics = {l.split()[0]: float(l.split()[1]) for l in open(f"{w}/pgbench-metrics.txt") if l.startswith("gpuledger_sql_result_cache")}
out = {"queries": len(every), "qps": round(len(every) / duration, 2), "p50_ms": pct(every, .5), "p95_ms": pct(every, .95),
       "p99_ms": pct(every, .99), "max_ms": every[-1], "cache": metrics,
       "per_query": {names[k]: {"n": len(v), "p50_ms": pct(sorted(v), .5), "p99_ms": pct(sorted(v), .99)} for k, v in by.items()}}
json.dump(out, open(f"{w}/pgbench.json", "w"), indent=1)
print(f"{out['qps']} queries/s, p50 {out['p50_ms']:.1f} / p95 {out['p95_ms']:.1f} / p99 {out['p99_ms']:.1f} ms (max {out['max_ms']:.1f}), {len(every)} queries; cache {metrics}")
for name, q in sorted(out["per_query"].items(), key=lambda kv: -kv[1]["p99_ms"])[:5]:
    print(f"  {name:60} n {q['n']:5}  p50 {q['p50_ms']:8.1f}  p99 {q['p99_ms']:8.1f} ms")
PY
