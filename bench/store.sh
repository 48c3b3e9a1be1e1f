#!/usr/bin/env bash
# Store benchmark (bench/README.md, "Store (compaction)"): data stored the way the live collector stores
# it (a commit per 5 minutes of samples), then side by side in one run, before and after
# `gpuledger compact`: files per table (`gpuledger store status`), three queries (best of 3 wall
# times each) and one `gpuledger ledger` run; plus the compaction's own time.
# The simulator writes some nodes' samples as a file per day: those are cut into 5-minute files,
# and each 5 minutes of every node is ingested on its own, so that each table gets a commit per
# 5 minutes, as from the collector's flushes (~288 files per table and day).
# Knobs: GPUS (8), DAYS (2), BENCH_DIR (bench-data/store), BIN, SKIP_BUILD.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/common.sh
GPUS=${GPUS:-8}
DAYS=${DAYS:-2}
bench_setup store bench-data/store
S="$W/store"

rm -rf "$W/capture" "$W/windows" "$W/ingest.jsonl" "$S"
say "simulating $GPUS GPUs x $DAYS days at 30 s..."
"$BIN" simulate --out "$W/capture" --gpus "$GPUS" --days "$DAYS" --seed 11 >&2
say "cutting each node's day into 5-minute files..."
python3 - "$W/capture/dcgm" <<'PY'
import os, sys
root = sys.argv[1]
for node in sorted(os.listdir(root)):
    for day in sorted(os.listdir(os.path.join(root, node))):
        if day.split(".")[0].isdigit():
            continue  # already one file per scrape time
        path = os.path.join(root, node, day)
        out, window = {}, None
        with open(path) as f:
            for line in f:
                last = line.rsplit(None, 1)[-1] if line.strip() else ""
                if line.startswith("#") or not last.isdigit():
                    continue  # comments are skipped by the reader anyway
                window = int(last) // 300_000
                if window not in out:
                    out[window] = open(os.path.join(root, node, f"{window * 300_000}.prom"), "w")
                out[window].write(line)
        for o in out.values():
            o.close()
        os.remove(path)
PY
say "ingesting the Kubernetes objects, then each 5 minutes of samples on its own..."
t0=$(date +%s.%N)
"$BIN" ingest "$W/capture/kubernetes" --store "$S" --progress off > /dev/null
# Group the files by 5 minutes: windows/<window start, ms>/<node>/<ms>.prom.
for f in "$W"/capture/dcgm/*/*.prom; do
  node=$(basename "$(dirname "$f")"); ts=$(basename "$f" .prom); w=$((ts / 300000 * 300000))
  mkdir -p "$W/windows/$w/$node" && mv "$f" "$W/windows/$w/$node/"
done
for w in $(ls "$W/windows" | sort -n); do
  "$BIN" ingest "$W/windows/$w" --store "$S" --progress off --format json >> "$W/ingest.jsonl"
done
t1=$(date +%s.%N)
echo "$(python3 -c "print($t1 - $t0)") 0" > "$W/ingest.time"
python3 - "$W" <<'PY'
import json, sys
w = sys.argv[1]
text, runs, i, dec = open(f"{w}/ingest.jsonl").read(), [], 0, json.JSONDecoder()
while text[i:].strip():
    obj, i = dec.raw_decode(text, i + len(text[i:]) - len(text[i:].lstrip()))
    runs.append(obj)
json.dump({"files_written": sum(r["files_written"] for r in runs), "commits": sum(r["commits"] for r in runs), "runs": len(runs)}, open(f"{w}/ingest.json", "w"))
PY
rm -rf "$W/windows"
rm -rf "$W/capture"
DAY=$("$BIN" query --store "$S" --format csv "SELECT min(date) AS d FROM gpu_samples" | tail -1)

queries=(
  "month: samples per day|SELECT date, count(*) AS n, avg(gpu_util) AS util FROM gpu_samples GROUP BY date ORDER BY date"
  "one day: power per GPU|SELECT uuid, max(power_w) AS p FROM gpu_samples WHERE date = '$DAY' GROUP BY uuid"
  "pods: phases|SELECT phase, count(*) AS n FROM pods GROUP BY phase"
)

# Best of three wall times of a command, in seconds.
best_of_3() {
  local best=""
  for _ in 1 2 3; do
    local t0 t1
    t0=$(date +%s.%N)
    "$@" > /dev/null
    t1=$(date +%s.%N)
    best=$(python3 -c "t=$t1-$t0; b='$best'; print(min(t, float(b)) if b else t)")
  done
  echo "$best"
}

measure() {
  local stage=$1
  "$BIN" store status --store "$S" > "$W/status.$stage"
  for q in "${queries[@]}"; do
    echo "${q%%|*}|$(best_of_3 "$BIN" query --store "$S" --format csv "${q#*|}")" >> "$W/queries.$stage"
  done
  /usr/bin/time -f '%e %M' -o "$W/ledger.$stage" "$BIN" ledger --store "$S" --config examples/gpuledger.toml --progress off 2> "$W/ledger.$stage.log"
  "$BIN" query --store "$S" --format csv "SELECT month, team, round(total, 6) AS total FROM chargeback_monthly ORDER BY 1, 2" > "$W/chargeback.$stage"
}

rm -f "$W"/queries.* "$W"/status.* "$W"/ledger.*
say "measuring before compaction..."
measure before
say "compacting..."
/usr/bin/time -f '%e %M' -o "$W/compact.time" "$BIN" compact --store "$S" --before 2100-01-01 --progress off > "$W/compact.out"
say "measuring after compaction (before VACUUM: the replaced files are still on disk)..."
measure after
"$BIN" vacuum --store "$S" --retain 1ms > "$W/vacuum.out"

python3 - "$W" "$GPUS" "$DAYS" <<'PY'
import json, sys
w, gpus, days = sys.argv[1], sys.argv[2], sys.argv[3]
def status(stage):
    rows = [l.split() for l in open(f"{w}/status.{stage}").read().splitlines()[1:]]
    return {r[0]: (int(r[2]), float(r[3])) for r in rows}
def queries(stage):
    return [l.rsplit("|", 1) for l in open(f"{w}/queries.{stage}").read().splitlines()]
def timing(path):
    s, kb = open(path).read().split()
    return float(s), int(kb) / 1024
ing = json.load(open(f"{w}/ingest.json"))
t, rss = timing(f"{w}/ingest.time")
print(f"store bench: {gpus} GPUs x {days} days; {ing['runs']} ingests (one per 5 minutes) in {t:.0f} s: {ing['files_written']} files in {ing['commits']} commits")
b, a = status("before"), status("after")
print(f"{'table':<20} {'files before':>12} {'files after':>11} {'MiB before':>10} {'MiB after':>9}")
for table in sorted(b):
    print(f"{table:<20} {b[table][0]:>12} {a.get(table, (0, 0))[0]:>11} {b[table][1]:>10.1f} {a.get(table, (0, 0))[1]:>9.1f}")
t, _ = timing(f"{w}/compact.time")
print(f"compact: {t:.1f} s; {open(f'{w}/compact.out').readline().strip()}")
print(f"{'query (best of 3)':<28} {'before s':>9} {'after s':>8} {'ratio':>6}")
for (name, tb), (_, ta) in zip(queries("before"), queries("after")):
    print(f"{name:<28} {float(tb):>9.2f} {float(ta):>8.2f} {float(tb) / float(ta):>6.1f}")
lb, mb = timing(f"{w}/ledger.before")
la, ma = timing(f"{w}/ledger.after")
print(f"{'gpuledger ledger':<28} {lb:>9.1f} {la:>8.1f} {lb / la:>6.1f}   (peak RSS {mb:.0f} / {ma:.0f} MiB)")
same = open(f"{w}/chargeback.before").read() == open(f"{w}/chargeback.after").read()
print(f"chargeback identical before and after compaction: {same}")
print(open(f"{w}/vacuum.out").readline().strip())
sys.exit(0 if same else 1)
PY
