#!/usr/bin/env bash
# Fleet scaling benchmark (bench/README.md): the ledger over a simulated month at several
# fleet sizes, to see how time and memory grow with the number of GPU-sample rows and to project
# them to 1,024 and 10,000 GPUs. For each size G of SIZES, in $W/G:
#   1. simulate G GPUs x DAYS days at a SCRAPE scrape straight into a store (`simulate --store`,
#      timed as the ingest), as a live store grows: all but the last day (`--emit-until`), a
#      ledger run over them (its day tables are kept aside), then the last day (`--emit-from`);
#      with TEXT=1, write the text capture, ingest it (timed), delete it (no incremental run);
#   2. store facts: gpu_samples rows, bytes of its Parquet files per row and per metric sample;
#   3. the incremental run: gpuledger ledger with the day tables of the run before the last day
#      landed (days computed, reused, every derived table compared with the full run's); then
#      gpuledger ledger --full in process (wall time, peak RSS, the operators' peak memory), and
#      gpuledger report after it (it reads the stored tables);
#   4. the same with --memory-limit LIMIT --spill-dir $W/G/spill (is the limit kept?);
#   5. DuckDB (PyPI) running the whole accounting, queries/ generated into its dialect
#      (bench/duckdb_port.py), every derived table compared with the ledger's;
#   6. gpuledger ledger --engine ballista on a loopback cluster of a scheduler and EXECUTORS
#      executors (concurrency 1 each); peak memory = scheduler + executors (VmHWM) + client, and
#      its chargeback compared with the in-process one.
# Each size's figures go to $W/G/result.json; bench/fleet_report.py then prints the table and a
# least-squares projection (seconds = a + b * rows per engine) and writes $W/report.md.
#
#   bash bench/fleet.sh                 # SIZES="64 128 256" DAYS=30 SCRAPE=5m, release build
#   SIZES="2 4" DAYS=2 SCRAPE=10m BIN=target/debug/gpuledger BENCH_DIR=/tmp/fleet bash bench/fleet.sh
#
# Knobs: SIZES (GPU counts), DAYS, SCRAPE (the simulator's scrape interval), START (first day,
# UTC; November 2026 has overheads in examples/gpuledger.toml), SEED (42), LIMIT (the limited
# run's --memory-limit, 1GiB), EXECUTORS (2), BENCH_DIR (bench-data/fleet), BIN (the binary,
# target/release/gpuledger; when BIN is not set the release build is brought up to date first
# unless SKIP_BUILD=1), REUSE=0 (re-simulate and re-ingest even when $W/G/params matches),
# INGEST_FLUSH_ROWS (ingest's --flush-rows, its default 2000000), TEXT=1 (through a text capture),
# DUCKDB_MEMORY_LIMIT (DuckDB's memory_limit, e.g. 2GB; unset: DuckDB's default, 80% of RAM),
# SKIP (steps left out, e.g. SKIP="ballista" or SKIP="duckdb ballista": the report shows "–"),
# STORE_ONLY=1 (steps 1 and 2 only: build the store and its day tables, for a later run to reuse;
# at 1,024 GPUs that takes about 40 minutes, so it can be staged ahead of the timed steps),
# AGAIN (engine steps to run again on the stored store, keeping the other steps' figures of the
# last run of that size, e.g. AGAIN="duckdb ballista"; steps: incremental ledger limited duckdb
# ballista; the result then mixes two runs, and result.json says which steps came when).
#
# Disk: with TEXT=1 the simulated text is ~7.4 KB per GPU per scrape plus ~1 MB per GPU-day of
# Kubernetes objects, so a month of 256 GPUs at 5m is ~22-24 GB; only one capture exists at a
# time (each is deleted once ingested). Without it, only the Kubernetes files pass through a
# temporary directory. The stores stay (REUSE).
set -euo pipefail
cd "$(dirname "$0")/.."
SIZES=${SIZES:-64 128 256}
DAYS=${DAYS:-30}
SCRAPE=${SCRAPE:-5m}
START=${START:-2026-11-01T00:00:00Z}
SEED=${SEED:-42}
LIMIT=${LIMIT:-1GiB}
EXECUTORS=${EXECUTORS:-2}
REUSE=${REUSE:-1}
TEXT=${TEXT:-0}
SKIP=${SKIP:-}
# skipped STEP: whether SKIP names STEP.
skipped() { case " $SKIP " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
AGAIN=${AGAIN:-}
# runs STEP: whether this run runs STEP (every step, unless AGAIN names some).
runs() { [ -z "$AGAIN" ] && return 0; case " $AGAIN " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
CONFIG=examples/gpuledger.toml
. bench/common.sh
bench_setup fleet bench-data/fleet
python3 -c 'import duckdb' 2>/dev/null || { say "python3 cannot import duckdb (python3 -m pip install duckdb)"; exit 2; }
[ -x /usr/bin/time ] || { say "/usr/bin/time is missing (apt-get install time)"; exit 2; }

# Background processes (the Ballista cluster): killed on any exit.
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# timed NAME STDOUT CMD...: runs CMD under /usr/bin/time into $D/NAME.time (wall seconds and
# peak RSS in KiB on its last line), stdout to STDOUT, stderr to $D/NAME.err, exit status to
# $D/NAME.rc; returns that status.
timed() {
  local name=$1 out=$2 rc=0; shift 2
  /usr/bin/time -f '%e %M' -o "$D/$name.time" "$@" > "$out" 2> "$D/$name.err" || rc=$?
  echo "$rc" > "$D/$name.rc"
  if [ "$rc" != 0 ]; then
    say "$name failed (exit $rc); the end of $D/$name.err:"
    tail -n 20 "$D/$name.err" | sed 's/^/    /' >&2
  fi
  return "$rc"
}

# chargeback_csv NAME: the store's chargeback as CSV, sorted, into $D/NAME.chargeback.csv: the
# runs' chargebacks must be the same bytes (money is exact: no run, limit or engine changes it).
chargeback_csv() {
  "$BIN" query --store "$D/store" --format csv "SELECT * FROM chargeback_monthly ORDER BY month, team" > "$D/$1.chargeback.csv" || true
}

# wait_port PORT PID WHAT: until 127.0.0.1:PORT accepts a connection (60 s), while PID lives.
wait_port() {
  local port=$1 pid=$2 what=$3
  for _ in $(seq 300); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return 0; fi
    kill -0 "$pid" 2>/dev/null || { say "$what (pid $pid) exited before listening on $port"; return 1; }
    sleep 0.2
  done
  say "$what (pid $pid) is not listening on $port after 60 s"
  return 1
}

# stop PID...: TERM, then KILL after 10 s.
stop() {
  local p
  for p in "$@"; do kill -TERM "$p" 2>/dev/null || true; done
  for _ in $(seq 50); do
    local alive=0
    for p in "$@"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ "$alive" = 1 ] || break
    sleep 0.2
  done
  for p in "$@"; do kill -KILL "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
}

say "sizes $SIZES GPUs x $DAYS days at $SCRAPE from $START; limit $LIMIT; $EXECUTORS Ballista executors; $BIN; work in $W"
say "$(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"

for G in $SIZES; do
  D=$W/$G
  mkdir -p "$D"
  PARAMS="$G $DAYS $SCRAPE $START $SEED"
  # Figures of an earlier run of this size go, the store (and its ingest figures) may stay.
  if [ -z "$AGAIN" ]; then
    rm -rf "$D/spill" "$D"/exec-* "$D/result.json" "$D"/inproc_*.parquet "$D/inproc_tables" "$D"/incremental* "$D"/duckdb* "$D"/*.skipped "$D"/ledger* "$D"/limited* "$D"/ballista* "$D"/scheduler* "$D"/executor-* "$D/steps_run"
  else
    [ -f "$D/ledger.time" ] || { say "[$G GPUs] AGAIN=$AGAIN needs an earlier run of this size in $D"; exit 2; }
    for step in $AGAIN; do
      case $step in
        incremental) rm -rf "$D"/incremental* ;;
        ledger) rm -rf "$D"/inproc_*.parquet "$D/inproc_tables" "$D"/ledger* ;;
        limited) rm -rf "$D"/limited* ;;
        duckdb) rm -rf "$D"/duckdb* "$D/duckdb.skipped" ;;
        ballista) rm -rf "$D"/ballista* "$D"/scheduler* "$D"/executor-* "$D"/exec-* ;;
        *) say "AGAIN: unknown step $step (incremental ledger limited duckdb ballista)"; exit 2 ;;
      esac
    done
    rm -f "$D/result.json"
  fi

  # 1. simulate + ingest, unless the store of these parameters is there.
  if [ "$REUSE" = 1 ] && [ -f "$D/store/.gpuledger-store" ] && [ -f "$D/ingest.json" ] && [ -f "$D/ingest.time" ] \
     && [ "$(cat "$D/params" 2>/dev/null)" = "$PARAMS" ]; then
    say "[$G GPUs] reusing the store in $D/store ($PARAMS; REUSE=0 rebuilds it)"
    echo 1 > "$D/reused"
  else
    rm -rf "$D/capture" "$D/store" "$D/params" "$D/reused" "$D"/simulate.* "$D"/ingest.* "$D"/ingest_first.* "$D"/memo_run.* \
      "$D/memo_before_last_day" "$D/capture_bytes" "$D/via"
    if [ "$TEXT" != 1 ]; then
      # The store straight from the simulator: its DCGM text goes to the ingest's parser in
      # memory (`simulate --store`), so the month of a large fleet needs no disk for text. Timed as
      # the ingest (simulation included: the two cannot be told apart).
      SIM=("$BIN" simulate --store "$D/store" --gpus "$G" --days "$DAYS" --scrape-interval "$SCRAPE" \
        --start "$START" --seed "$SEED" --progress off --format json)
      if [ "$DAYS" -ge 2 ]; then
        # The same simulated cluster in two windows, cut at the last midnight: what a live store
        # held the day before, then the day that landed.
        CUT=$(python3 -c 'import datetime, sys; s = datetime.datetime.fromisoformat(sys.argv[1].replace("Z", "+00:00")); print((s + datetime.timedelta(days=int(sys.argv[2]) - 1)).strftime("%Y-%m-%dT%H:%M:%SZ"))' "$START" "$DAYS")
        say "[$G GPUs] simulating $DAYS days at a $SCRAPE scrape into the store, until $CUT..."
        timed ingest_first "$D/ingest_first.json" "${SIM[@]}" --emit-until "$CUT"
        say "[$G GPUs] ledger over the days before $CUT (the day tables the incremental run starts from)..."
        timed memo_run "$D/memo_run.out" "$BIN" ledger --store "$D/store" --config "$CONFIG" --progress off --full
        rm -rf "$D/memo_before_last_day"
        cp -r "$D/store/ledger/days" "$D/memo_before_last_day"
        say "[$G GPUs] ... and the last day, from $CUT"
        timed ingest "$D/ingest.json" "${SIM[@]}" --emit-from "$CUT"
      else
        say "[$G GPUs] simulating $DAYS day at a $SCRAPE scrape into the store (one day: no incremental run)..."
        timed ingest "$D/ingest.json" "${SIM[@]}"
      fi
      echo "simulate --store" > "$D/via"
    else
      python3 - "$D" "$G" "$DAYS" "$SCRAPE" <<'PY'
import os, re, sys
d, gpus, days, scrape = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
m = re.fullmatch(r"(\d+)([smh]?)", scrape)
if not m:
    sys.exit(f"fleet bench: SCRAPE={scrape}: give seconds, minutes or hours (30s, 5m, 1h)")
secs = int(m[1]) * {"": 1, "s": 1, "m": 60, "h": 3600}[m[2]]
need = gpus * days * (86400 / secs * 7.4e3 + 1e6)
st = os.statvfs(d)
free = st.f_bavail * st.f_frsize
print(f"fleet bench: [{gpus} GPUs] the capture needs about {need / 1e9:.1f} GB of text; {free / 1e9:.1f} GB free", file=sys.stderr)
if need * 1.1 > free:
    sys.exit(f"fleet bench: [{gpus} GPUs] not enough disk for the capture: raise SCRAPE (e.g. SCRAPE=10m) or lower SIZES/DAYS")
PY
      say "[$G GPUs] simulating $DAYS days at a $SCRAPE scrape..."
      timed simulate "$D/simulate.out" "$BIN" simulate --out "$D/capture" --gpus "$G" --days "$DAYS" \
        --scrape-interval "$SCRAPE" --start "$START" --seed "$SEED"
      du -sb "$D/capture" | cut -f1 > "$D/capture_bytes"
      say "[$G GPUs] ingesting $(( $(cat "$D/capture_bytes") / 1000000 )) MB of capture..."
      timed ingest "$D/ingest.json" "$BIN" ingest "$D/capture" --store "$D/store" --progress off --format json \
        --flush-rows "${INGEST_FLUSH_ROWS:-2000000}"
      rm -rf "$D/capture"   # disk: the store is what every engine reads
      echo "text capture" > "$D/via"
    fi
    echo "$PARAMS" > "$D/params"
    echo 0 > "$D/reused"
  fi
  S=$D/store

  # 2. store facts.
  "$BIN" query --store "$S" --format csv "SELECT count(*) AS n FROM gpu_samples" | tail -1 > "$D/rows"
  du -sb "$S/gpu_samples" | cut -f1 > "$D/gpu_samples_bytes"
  say "[$G GPUs] $(cat "$D/rows") gpu_samples rows, $(( $(cat "$D/gpu_samples_bytes") / 1024 )) KiB of gpu_samples Parquet"
  if [ "${STORE_ONLY:-0}" = 1 ]; then
    say "[$G GPUs] store ready in $S (STORE_ONLY=1: no engine runs)"
    continue
  fi
  if [ -n "$AGAIN" ] && [ "$(cat "$D/reused")" != 1 ]; then
    say "[$G GPUs] AGAIN=$AGAIN: the store was rebuilt, so the earlier figures are of another store; run without AGAIN"
    exit 2
  fi
  echo "$(date -u +%FT%TZ) ${AGAIN:-incremental ledger limited duckdb ballista}" >> "$D/steps_run"

  # 3. the incremental run: the day tables as the run before the last day left them, then one run
  # (it computes the days whose inputs the last day changed); its derived tables kept aside.
  if runs incremental && [ -d "$D/memo_before_last_day" ]; then
    rm -rf "$S/ledger/days"
    cp -r "$D/memo_before_last_day" "$S/ledger/days"
    say "[$G GPUs] ledger, incremental after the last day..."
    timed incremental "$D/incremental.out" "$BIN" ledger --store "$S" --config "$CONFIG" --progress off || true
    chargeback_csv incremental
    mkdir -p "$D/incremental_tables"
    cp "$S"/ledger/*.parquet "$D/incremental_tables/"
  fi
  # In process, every day computed, no limit. Its derived tables are kept aside for the comparisons.
  if runs ledger; then
    say "[$G GPUs] ledger in process, every day..."
    timed ledger "$D/ledger.out" "$BIN" ledger --store "$S" --config "$CONFIG" --progress off --full
    chargeback_csv ledger
    # A report after the ledger: it reads the stored tables (no step runs again).
    say "[$G GPUs] report after the ledger..."
    timed report "$D/report.csv" "$BIN" report --store "$S" --config "$CONFIG" --format csv --progress off || true
    cp "$S/ledger/chargeback_monthly.parquet" "$D/inproc_chargeback.parquet"
    cp "$S/ledger/priced_state_hours.parquet" "$D/inproc_priced_state_hours.parquet"
    mkdir -p "$D/inproc_tables"
    cp "$S"/ledger/*.parquet "$D/inproc_tables/"
  else
    # The steps below compare with the store's derived tables: those of the kept full run.
    cp "$D"/inproc_tables/*.parquet "$S/ledger/"
  fi

  # 4. in process with a memory limit (spilling to $D/spill).
  if runs limited; then
    say "[$G GPUs] ledger in process with --memory-limit $LIMIT..."
    mkdir -p "$D/spill"
    if timed limited "$D/limited.out" "$BIN" ledger --store "$S" --config "$CONFIG" --progress off --full \
         --memory-limit "$LIMIT" --spill-dir "$D/spill"; then
      chargeback_csv limited
      cp "$S/ledger/chargeback_monthly.parquet" "$D/limited_chargeback.parquet"
    fi
    rm -rf "$D/spill"
  fi

  if ! runs duckdb; then
    :
  elif skipped duckdb; then
    say "[$G GPUs] duckdb skipped (SKIP=$SKIP)"
    echo "SKIP=$SKIP" > "$D/duckdb.skipped"
  else
    # 5. DuckDB running the whole of queries/ (bench/duckdb_port.py generates its dialect from the
    # files) over the same store; it compares each of its derived tables with the ledger's, which
    # steps 3 and 4 wrote (the same figures). Exit 1 = ran, some table differs (result.json says).
    say "[$G GPUs] DuckDB, the whole accounting..."
    timed duckdb "$D/duckdb.out" python3 bench/duckdb_port.py --store "$S" --config "$CONFIG" --out "$D/duckdb" \
      ${DUCKDB_MEMORY_LIMIT:+--memory-limit "$DUCKDB_MEMORY_LIMIT"} || true
    rm -rf "$D/duckdb/duckdb.tmp"
  fi

  if ! runs ballista; then
    :
  elif skipped ballista; then
    say "[$G GPUs] ballista skipped (SKIP=$SKIP)"
    echo "SKIP=$SKIP" > "$D/ballista.skipped"
  else
    # 6. Ballista on loopback: a scheduler on P, executors on Q (Flight) and Q+1 (gRPC).
    say "[$G GPUs] Ballista, $EXECUTORS executors..."
    read -r P QS < <(python3 - "$EXECUTORS" <<'PY'
import socket, sys
n, held, found = int(sys.argv[1]), [], []
def grab(port=0):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
    except OSError:
        s.close()
        return None
    held.append(s)
    return s.getsockname()[1]
sched = grab()
while len(found) < n:
    q = grab()
    if q is not None and q < 65535 and grab(q + 1) is not None:
        found.append(q)
print(sched, ",".join(map(str, found)))
for s in held:
    s.close()
PY
  )
    IFS=, read -r -a QPORTS <<< "$QS"
    ok=1
    "$BIN" ballista scheduler --listen "127.0.0.1:$P" > "$D/scheduler.log" 2>&1 &
    sched=$!; pids+=("$sched")
    wait_port "$P" "$sched" scheduler || ok=0
    execs=()
    if [ "$ok" = 1 ]; then
      for i in $(seq "$EXECUTORS"); do
        q=${QPORTS[$((i - 1))]}
        mkdir -p "$D/exec-$i"
        "$BIN" ballista executor --scheduler "127.0.0.1:$P" --listen "127.0.0.1:$q" --concurrency 1 \
          --work-dir "$D/exec-$i" > "$D/executor-$i.log" 2>&1 &
        execs+=($!); pids+=($!)
      done
      for i in $(seq "$EXECUTORS"); do
        q=${QPORTS[$((i - 1))]}
        wait_port "$q" "${execs[$((i - 1))]}" "executor $i (Flight)" && wait_port $((q + 1)) "${execs[$((i - 1))]}" "executor $i (gRPC)" || ok=0
      done
    fi
    if [ "$ok" = 1 ]; then
      sleep 1   # the executors register with the scheduler once listening
      # --full: every day computed on the cluster, like the in-process --full it is compared with
      # (without it the cluster would reuse the day tables the in-process runs stored).
      timed ballista "$D/ballista.out" "$BIN" ledger --store "$S" --config "$CONFIG" --engine ballista \
        --scheduler "df://127.0.0.1:$P" --progress off --full || true
      # Peak memory of the cluster, read before the processes go.
      : > "$D/ballista_hwm"
      for p in "$sched" "${execs[@]}"; do
        if [ "$p" = "$sched" ]; then role=scheduler; else role=executor; fi
        hwm=$(awk '/^VmHWM/ {print $2}' "/proc/$p/status" 2>/dev/null || true)
        echo "$role ${hwm:-gone}" >> "$D/ballista_hwm"
      done
    else
      echo 1 > "$D/ballista.rc"
      echo "the Ballista cluster did not start (scheduler.log, executor-*.log in $D)" > "$D/ballista.err"
      say "[$G GPUs] the Ballista cluster did not start; see $D/scheduler.log and $D/executor-*.log"
    fi
    stop "$sched" "${execs[@]}"
    pids=()
    # (no exec-* when the cluster did not start: du fails, which pipefail must not turn into an exit)
    { du -sb "$D"/exec-* 2>/dev/null || true; } | awk '{s += $1} END {printf "%.0f\n", s}' > "$D/ballista_work_bytes"
    rm -rf "$D"/exec-*
    if [ "$(cat "$D/ballista.rc")" = 0 ]; then cp "$S/ledger/chargeback_monthly.parquet" "$D/ballista_chargeback.parquet"; cp "$S/ledger/priced_state_hours.parquet" "$D/ballista_priced_state_hours.parquet"; fi
  fi

  # result.json of this size.
  python3 - "$D" "$G" "$DAYS" "$SCRAPE" "$START" "$SEED" "$LIMIT" "$EXECUTORS" "$BIN" <<'PY'
import duckdb, json, os, re, sys
d, gpus, days, scrape, start, seed, limit, executors, binary = sys.argv[1:]
con = duckdb.connect()

def read(name, default=None):
    try:
        return open(f"{d}/{name}").read()
    except FileNotFoundError:
        return default

def timing(step):
    """Wall seconds and peak RSS (MiB) of a step run by `timed`, or None."""
    lines = [l for l in (read(f"{step}.time") or "").splitlines() if l.strip()]
    try:   # a failed command's file starts with "Command exited with non-zero status N"
        secs, kib = lines[-1].split()
        return {"seconds": float(secs), "peak_rss_mib": round(int(kib) / 1024, 1)}
    except (IndexError, ValueError):
        return None

def step(name):
    """{seconds, peak_rss_mib} of a step, or {error: ...} when it failed."""
    rc = (read(f"{name}.rc") or "").strip()
    if rc != "0":
        err = (read(f"{name}.err") or "").strip().splitlines()
        return {"error": f"exit {rc or '?'}", "stderr_tail": err[-10:]}
    return timing(name) or {"error": "no /usr/bin/time figures"}

def operator_peak(out):
    # The ledger prints its summary, this line included, on stderr.
    err = out.removesuffix(".out") + ".err"
    m = re.search(r"operators held at most ([0-9.]+) MiB at once \(([^)]*)\)", (read(err) or "") + (read(out) or ""))
    if not m:
        return None, None
    lim = re.match(r"limit ([0-9.]+) MiB", m[2])
    return float(m[1]), (float(lim[1]) if lim else None)

def max_diff(sql_a, sql_b):
    a = dict((tuple(r[:-1]), r[-1] or 0) for r in con.execute(sql_a).fetchall())
    b = dict((tuple(r[:-1]), r[-1] or 0) for r in con.execute(sql_b).fetchall())
    keys = set(a) | set(b)
    return (max((abs(a.get(k, 0) - b.get(k, 0)) for k in keys), default=0.0), len(keys),
            sorted(map(str, set(a) ^ set(b)))[:5])

res = {"gpus": int(gpus), "days": int(days), "scrape": scrape, "start": start, "seed": int(seed),
       "binary": binary, "cpus": os.cpu_count(), "load_average_at_end": float(open("/proc/loadavg").read().split()[0]),
       "reused_store": (read("reused") or "0").strip() == "1"}

# Ingest.
ing = json.loads(read("ingest.json"))
res["simulate"] = timing("simulate")
res["store_via"] = (read("via") or "text capture").strip()
res["capture_bytes"] = int(read("capture_bytes", "0") or 0) or None
it = timing("ingest")
first = json.loads(read("ingest_first.json") or "null")
if first is not None and timing("ingest_first"):
    # Two windows of one simulation (the last day landing after the rest): their sum.
    a = timing("ingest_first")
    it = {"seconds": round(a["seconds"] + it["seconds"], 2), "peak_rss_mib": max(a["peak_rss_mib"], it["peak_rss_mib"])}
    ing = {**ing, "samples": (first.get("samples") or 0) + (ing.get("samples") or 0),
           "bytes_read": (first.get("bytes_read") or 0) + (ing.get("bytes_read") or 0),
           "rows_written": {k: (first.get("rows_written") or {}).get(k, 0) + (ing.get("rows_written") or {}).get(k, 0)
                            for k in set(first.get("rows_written") or {}) | set(ing.get("rows_written") or {})},
           "elapsed_seconds": None}
samples = ing.get("samples")
res["ingest"] = {**it, "samples": samples, "bytes_read": ing.get("bytes_read"), "rows_written": ing.get("rows_written"),
                 "rows_written_total": sum((ing.get("rows_written") or {}).values()),
                 "elapsed_seconds_reported": ing.get("elapsed_seconds"), "rejected": ing.get("rejected"),
                 "samples_per_s": round(samples / it["seconds"]) if samples and it["seconds"] else None}

# Store.
rows = int(read("rows").strip())
gbytes = int(read("gpu_samples_bytes").strip())
res["store"] = {"gpu_sample_rows": rows, "gpu_samples_bytes": gbytes,
                "bytes_per_gpu_sample_row": round(gbytes / rows, 2) if rows else None,
                "bytes_per_metric_sample": round(gbytes / samples, 3) if samples else None,
                "store_bytes": int(os.popen(f"du -sb '{d}/store'").read().split()[0])}

# In process.
res["inprocess"] = step("ledger")
if "error" not in res["inprocess"]:
    res["inprocess"]["operator_peak_mib"] = operator_peak("ledger.out")[0]

# Incremental, after the last day landed: against the full run, every derived table.
if read("incremental.rc") is None:
    res["incremental"] = {"skipped": "no day tables from before the last day (TEXT=1, DAYS=1, or a store built before this bench had the step)"}
else:
    res["incremental"] = step("incremental")
    if "error" not in res["incremental"]:
        m = re.search(r"day tables: (\d+) days computed, (\d+) reused", (read("incremental.err") or "") + (read("incremental.out") or ""))
        if m:
            res["incremental"].update({"days_computed": int(m[1]), "days_reused": int(m[2])})
        sys.path.insert(0, "bench")
        from duckdb_port import compare_table
        from pathlib import Path
        tables = {f[:-8]: compare_table(con, Path(f"{d}/incremental_tables/{f}"), Path(f"{d}/inproc_tables/{f}"))
                  for f in sorted(os.listdir(f"{d}/inproc_tables")) if f.endswith(".parquet")}
        res["incremental"].update({"tables_agree": sum(1 for t in tables.values() if t.get("agree")), "tables": len(tables),
                                   "tables_differing": sorted(k for k, t in tables.items() if not t.get("agree"))})
        if "error" not in res["inprocess"]:
            res["incremental"]["vs_full_time"] = round(res["incremental"]["seconds"] / res["inprocess"]["seconds"], 3)
    first_run = step("memo_run")
    res["incremental"]["first_run_before_last_day"] = first_run

# The report after the full run (from the stored tables), against the full run.
res["report"] = step("report")
if "error" not in res["report"] and "error" not in res["inprocess"]:
    res["report"]["vs_full_time"] = round(res["report"]["seconds"] / res["inprocess"]["seconds"], 4)
    res["report"]["computed"] = "computing" in (read("report.err") or "")

# The chargeback of each run, byte for byte against the full run's.
full_csv = read("ledger.chargeback.csv")
res["chargeback_identical_to_full"] = {n: (read(f"{n}.chargeback.csv") == full_csv) if read(f"{n}.chargeback.csv") else None
                                       for n in ("incremental", "limited")}

# In process, limited.
res["limited"] = step("limited")
res["limited"]["limit"] = limit
if "error" not in res["limited"]:
    peak, lim = operator_peak("limited.out")
    res["limited"].update({"operator_peak_mib": peak, "limit_mib": lim,
                           "operator_peak_within_limit": peak is not None and lim is not None and peak <= lim,
                           "peak_rss_within_limit": lim is not None and res["limited"]["peak_rss_mib"] <= lim,
                           # The stated bound (`gpuledger ledger --help`): 1.25 x the limit + 150 MiB.
                           "peak_rss_within_bound": lim is not None and res["limited"]["peak_rss_mib"] <= 1.25 * lim + 150})
    if os.path.exists(f"{d}/limited_chargeback.parquet"):
        diff, cells, _ = max_diff(f"SELECT month, team, sum(total) FROM '{d}/inproc_chargeback.parquet' GROUP BY ALL",
                                  f"SELECT month, team, sum(total) FROM '{d}/limited_chargeback.parquet' GROUP BY ALL")
        res["limited"]["chargeback_max_total_difference_vs_unlimited"] = diff

# DuckDB.
# Exit 1 means it ran and some derived table differs: figures kept, the disagreement reported.
res["duckdb"] = step("duckdb") if (read("duckdb.rc") or "").strip() != "1" else (timing("duckdb") or {"error": "no /usr/bin/time figures"})
if read("duckdb.skipped") is not None:
    res["duckdb"] = {"skipped": read("duckdb.skipped").strip()}
cmp = json.loads(read("duckdb/duckdb_compare.json") or "{}")
if "error" not in res["duckdb"] and cmp:
    tables = cmp.get("tables", {})
    res["duckdb"].update({"memory_limit": cmp.get("memory_limit"), "run_seconds": cmp.get("run_seconds"),
                          "tables_agree": sum(1 for t in tables.values() if t.get("agree")), "tables": len(tables),
                          "tables_differing": sorted(k for k, t in tables.items() if not t.get("agree"))})
    diff, cells, only = max_diff(f"SELECT month, team, state, sum(gpu_hours) FROM '{d}/inproc_priced_state_hours.parquet' GROUP BY ALL",
                                 f"SELECT month, team, state, sum(gpu_hours) FROM '{d}/duckdb/priced_state_hours.parquet' GROUP BY ALL")
    res["duckdb"].update({"cells": cells, "max_gpu_hour_difference": diff, "cells_in_one_only": only})
if "error" not in res["inprocess"] and "error" not in res["duckdb"] and "skipped" not in res["duckdb"]:
    # DuckDB's own run (inputs, steps, writes), not the comparison the script does after it.
    duck = res["duckdb"].get("run_seconds") or res["duckdb"]["seconds"]
    res["ledger_vs_duckdb_time"] = round(res["inprocess"]["seconds"] / duck, 2) if duck else None

# Ballista.
b = step("ballista") if read("ballista.skipped") is None else {"skipped": read("ballista.skipped").strip()}
b["executors"] = int(executors)
b["executor_concurrency"] = 1
b["shuffle_work_bytes"] = int((read("ballista_work_bytes") or "0").strip() or 0)
if "error" not in b and "skipped" not in b:
    hwm = [l.split() for l in (read("ballista_hwm") or "").splitlines() if l.strip()]
    sched = [int(v) for r, v in hwm if r == "scheduler" and v.isdigit()]
    execs = [int(v) for r, v in hwm if r == "executor" and v.isdigit()]
    b["client_peak_rss_mib"] = b.pop("peak_rss_mib")
    b["scheduler_peak_rss_mib"] = round(sum(sched) / 1024, 1) if sched else None
    b["executor_peak_rss_mib"] = [round(k / 1024, 1) for k in execs]
    b["summed_peak_rss_mib"] = round(b["client_peak_rss_mib"] + sum(sched + execs) / 1024, 1)
    if len(execs) != int(executors) or not sched:
        b["warning"] = f"VmHWM read for {len(sched)} scheduler and {len(execs)} of {executors} executors (the others had exited)"
    if os.path.exists(f"{d}/ballista_chargeback.parquet"):
        diff, cells, only = max_diff(f"SELECT month, team, sum(total) FROM '{d}/inproc_chargeback.parquet' GROUP BY ALL",
                                     f"SELECT month, team, sum(total) FROM '{d}/ballista_chargeback.parquet' GROUP BY ALL")
        b.update({"chargeback_cells": cells, "chargeback_max_total_difference": diff, "chargeback_cells_in_one_only": only})
        diff, _, _ = max_diff(f"SELECT month, team, state, sum(gpu_hours) FROM '{d}/inproc_priced_state_hours.parquet' GROUP BY ALL",
                              f"SELECT month, team, state, sum(gpu_hours) FROM '{d}/ballista_priced_state_hours.parquet' GROUP BY ALL")
        b["gpu_hour_max_difference"] = diff
res["ballista"] = b
# When AGAIN re-ran some steps: each run's time and the steps it ran.
res["steps_run"] = [l.split(" ", 1) for l in (read("steps_run") or "").splitlines() if l.strip()]
json.dump(res, open(f"{d}/result.json", "w"), indent=1, default=str)  # decimals (money) as their exact text
PY
  say "[$G GPUs] done: $D/result.json"
done

[ "${STORE_ONLY:-0}" = 1 ] && exit 0
# shellcheck disable=SC2086
python3 bench/fleet_report.py "$W" $SIZES
