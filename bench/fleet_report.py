#!/usr/bin/env python3
"""Report of bench/fleet.sh: a markdown table of the sizes measured and a projection.

    python3 bench/fleet_report.py BENCH_DIR SIZE...

Reads BENCH_DIR/<SIZE>/result.json for each size, prints the table, a least-squares fit of
seconds = a + b * rows (gpu_samples rows) per engine evaluated at 1,024 and 10,000 GPUs over a
month at a 30 s scrape, the same for peak RSS, and the Ballista executors a 10,000-GPU month
would need to finish within an hour; writes the same text to BENCH_DIR/report.md.
Standard library only.
"""
import json
import math
import os
import sys

# The months projected to: GPUs, at a 30 s scrape for 30 days. Their gpu_samples rows follow the
# rows per GPU and scrape of the largest size measured (MIG instances and pods make more than
# one row of a GPU per scrape: 1.49 in the simulator's mix at 1,024 GPUs); 2,880 scrapes a day.
TARGET_GPUS = [1_024, 10_000]
FALLBACK_ROWS_PER_GPU_SCRAPE = 1.0


def scrape_seconds(text):
    """30s, 5m, 1h -> seconds (None if unreadable)."""
    units = {"s": 1, "m": 60, "h": 3600}
    try:
        return float(text[:-1]) * units[text[-1]]
    except (KeyError, ValueError, IndexError, TypeError):
        return None


def targets(results):
    """[(name, rows)] of the projected months."""
    per = FALLBACK_ROWS_PER_GPU_SCRAPE
    biggest = max(results, key=lambda r: r["store"]["gpu_sample_rows"], default=None)
    if biggest:
        step = scrape_seconds(biggest.get("scrape"))
        scrapes = biggest["gpus"] * biggest["days"] * 86400 / step if step else 0
        if scrapes:
            per = biggest["store"]["gpu_sample_rows"] / scrapes
    return [(f"{g:,} GPUs x 30 d @ 30 s", per * g * 30 * 2880) for g in TARGET_GPUS]
DEADLINE_S = 3600.0

ENGINES = [  # key in result.json, label, RSS field
    ("inprocess", "in-process", "peak_rss_mib"),
    ("limited", "in-process, limited", "peak_rss_mib"),
    ("duckdb", "DuckDB", "peak_rss_mib"),
    ("ballista", "Ballista", "summed_peak_rss_mib"),
]


def ok(step):
    return isinstance(step, dict) and "error" not in step and step.get("seconds") is not None


def fmt(v, digits=1, unit=""):
    if v is None:
        return "–"
    if isinstance(v, str):
        return v
    if isinstance(v, int) or (isinstance(v, float) and abs(v) >= 1e4):
        return f"{v:,.0f}{unit}"
    return f"{v:,.{digits}f}{unit}"


def fmt_diff(v):
    return "–" if v is None else f"{v:.2g}"


def duration(s):
    if s is None or math.isnan(s):
        return "–"
    if s < 120:
        return f"{s:,.1f} s"
    if s < 7200:
        return f"{s / 60:,.1f} min"
    return f"{s / 3600:,.1f} h"


def fit(points):
    """Least squares y = a + b x; with one point (or one distinct x) the line through the origin."""
    n = len(points)
    if n == 0:
        return None
    xs = [p[0] for p in points]
    ys = [p[1] for p in points]
    if n == 1 or max(xs) == min(xs):
        b = sum(ys) / sum(xs) if sum(xs) else 0.0
        return {"a": 0.0, "b": b, "n": len(set(xs)), "r2": None, "kind": "through the origin (one size)"}
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    a = my - b * mx
    ss_tot = sum((y - my) ** 2 for y in ys)
    ss_res = sum((y - a - b * x) ** 2 for x, y in zip(xs, ys))
    r2 = 1 - ss_res / ss_tot if ss_tot else 1.0
    return {"a": a, "b": b, "n": len(set(xs)), "r2": r2, "kind": "least squares"}


def incremental_cells(inc):
    """Seconds, share of the full run, days computed of all, tables agreeing: the incremental run."""
    if "skipped" in inc:
        return ["–"] * 4
    if not ok(inc):
        return ["failed"] * 4
    days = f"{inc.get('days_computed')}/{inc.get('days_computed', 0) + inc.get('days_read_back', 0)}" if "days_computed" in inc else "?"
    agree = f"{inc.get('tables_agree')}/{inc.get('tables')}" if inc.get("tables") else "–"
    return [fmt(inc.get("seconds")), fmt(inc.get("vs_full_time"), 3), days, agree]


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    w, sizes = sys.argv[1], sys.argv[2:]
    results = []
    missing = []
    for g in sizes:
        path = os.path.join(w, g, "result.json")
        try:
            results.append(json.load(open(path)))
        except (FileNotFoundError, json.JSONDecodeError) as e:
            missing.append(f"{path}: {e}")
    if not results:
        sys.exit("fleet report: no result.json: " + "; ".join(missing))
    out = []
    p = out.append
    r0 = results[0]
    lim = r0["limited"].get("limit")
    p(f"# Fleet scaling benchmark\n")
    p(f"{r0['days']} simulated days from {r0['start']} at a {r0['scrape']} scrape (seed {r0['seed']}), "
      f"GPUs {', '.join(str(r['gpus']) for r in results)}; binary {r0['binary']}; {r0['cpus']} CPUs "
      f"(load average {', '.join(str(r['load_average_at_end']) for r in results)} at the end of each size). "
      f"Limited run: --memory-limit {lim}. Ballista: {r0['ballista']['executors']} executors at --concurrency 1, "
      f"a scheduler and the client on the same machine (loopback).\n")

    # The table.
    head = ["GPUs", "gpu_samples rows", "ingest samples/s", "ingest s", "bytes/row",
            "in-proc s", "in-proc RSS MiB", "in-proc op. peak MiB",
            "incremental s", "incremental/full", "days computed", "incremental tables agreeing",
            "limited s", "limited RSS MiB", "limited op. peak MiB",
            "DuckDB s", "DuckDB RSS MiB", "Ballista s", "Ballista RSS MiB (sum)",
            "ledger/DuckDB time", "DuckDB tables agreeing", "max Δ GPU-h vs DuckDB", "max Δ total Ballista", "max Δ total limited"]
    p("| " + " | ".join(head) + " |")
    p("|" + "|".join("---:" for _ in head) + "|")
    for r in results:
        st, ing, ip, li, dk, ba = r["store"], r["ingest"], r["inprocess"], r["limited"], r["duckdb"], r["ballista"]
        e = lambda s, k: fmt(s.get(k)) if ok(s) else ("skipped" if "skipped" in s else "failed")
        cells = [
            str(r["gpus"]) + (" (reused)" if r.get("reused_store") else ""),
            fmt(st["gpu_sample_rows"]), fmt(ing.get("samples_per_s")), fmt(ing.get("seconds")),
            fmt(st.get("bytes_per_gpu_sample_row")),
            e(ip, "seconds"), e(ip, "peak_rss_mib"), e(ip, "operator_peak_mib"),
            *incremental_cells(r.get("incremental") or {"skipped": "not run"}),
            e(li, "seconds"), e(li, "peak_rss_mib"),
            (fmt(li.get("operator_peak_mib")) + (f" / {fmt(li.get('limit_mib'), 0)}" if li.get("limit_mib") else "")) if ok(li) else "failed",
            e(dk, "seconds"), e(dk, "peak_rss_mib"),
            e(ba, "seconds"), e(ba, "summed_peak_rss_mib"),
            fmt(r.get("ledger_vs_duckdb_time"), 2),
            f"{dk.get('tables_agree')}/{dk.get('tables')}" if ok(dk) and dk.get("tables") else "–",
            fmt_diff(dk.get("max_gpu_hour_difference")) if ok(dk) else "–",
            fmt_diff(ba.get("chargeback_max_total_difference")) if ok(ba) else "–",
            fmt_diff(li.get("chargeback_max_total_difference_vs_unlimited")) if ok(li) else "–",
        ]
        p("| " + " | ".join(cells) + " |")
    p("")
    p("Bytes/row: the gpu_samples Parquet files on disk over their rows; "
      + ", ".join(f"{r['gpus']} GPUs {fmt(r['store'].get('bytes_per_metric_sample'), 3)} B per metric sample read "
                  f"({fmt(r['ingest'].get('samples'))} samples)" for r in results)
      + ". Incremental: `gpuledger ledger` after the last day landed, starting from the day memo of the run "
        "before (days computed / all; its 17 derived tables compared with the full run's); incremental/full is its "
        "time over the in-process run's, which computes every day (--full). RSS: peak resident set (/usr/bin/time, MiB); Ballista's is the sum of the scheduler's and executors' "
        "VmHWM and the client's peak. Op. peak: the most the ledger's operators held at once, as it prints it "
        "(/ the limit). Δ: largest absolute difference per month/team(/state) cell, GPU-hours or chargeback "
        "`total`, against the in-process run without a limit.\n")

    # Problems.
    problems = list(missing)
    for r in results:
        g = r["gpus"]
        for key, label, _ in ENGINES:
            s = r[key]
            if isinstance(s, dict) and "error" in s:
                problems.append(f"{g} GPUs, {label}: {s['error']}: " + " / ".join(s.get("stderr_tail", [])[-3:]))
        li = r["limited"]
        if ok(li):
            if li.get("operator_peak_within_limit") is False:
                problems.append(f"{g} GPUs: the limited run's operators held {li.get('operator_peak_mib')} MiB, over the limit {li.get('limit_mib')} MiB")
            if li.get("peak_rss_within_limit") is False:
                problems.append(f"{g} GPUs: the limited run's peak RSS {li['peak_rss_mib']} MiB is over the limit {li.get('limit_mib')} MiB "
                                "(the limit covers operators, not the whole process)")
        for key in ("duckdb", "ballista"):
            only = r[key].get("cells_in_one_only") or r[key].get("chargeback_cells_in_one_only")
            if only:
                problems.append(f"{g} GPUs, {key}: cells in one result only, e.g. {only}")
        if r["duckdb"].get("tables_differing"):
            problems.append(f"{g} GPUs, DuckDB: derived tables differing from the ledger's: {r['duckdb']['tables_differing']} (see duckdb/duckdb_compare.json)")
        inc = r.get("incremental") or {}
        if inc.get("tables_differing"):
            problems.append(f"{g} GPUs, incremental: derived tables differing from the full run's: {inc['tables_differing']}")
        if isinstance(inc, dict) and "error" in inc:
            problems.append(f"{g} GPUs, incremental: {inc['error']}: " + " / ".join(inc.get("stderr_tail", [])[-3:]))
        if r["ballista"].get("warning"):
            problems.append(f"{g} GPUs, Ballista: {r['ballista']['warning']}")
        if r["ingest"].get("rejected"):
            problems.append(f"{g} GPUs: ingest rejected {r['ingest']['rejected']} items")
    if problems:
        p("Problems:\n")
        for x in problems:
            p(f"- {x}")
        p("")

    # Projection.
    p("## Projection\n")
    measured = [r["store"]["gpu_sample_rows"] for r in results]
    projected = targets(results)
    p(f"Fit of seconds = a + b × rows per engine over the sizes measured ({', '.join(f'{m:,}' for m in measured)} "
      f"gpu_samples rows), evaluated at a month at a 30 s scrape: " +
      "; ".join(f"{name} = {rows / 1e6:,.1f} M rows ({rows / max(measured):,.0f}× the largest size measured)" for name, rows in projected) +
      ". Far outside the measured range, so a rough guide: the fit assumes time stays linear in rows.\n")
    head = ["engine", "distinct sizes", "a (s)", "b (s per M rows)", "R²"] + [n for n, _ in projected]
    p("| " + " | ".join(head) + " |")
    p("|---|---:|---:|---:|---:|" + "|".join("---:" for _ in projected) + "|")
    fits = {}
    for key, label, _ in ENGINES:
        pts = [(r["store"]["gpu_sample_rows"], r[key]["seconds"]) for r in results if ok(r[key])]
        f = fit(pts)
        fits[key] = f
        if f is None:
            p(f"| {label} | 0 | – | – | – | " + " | ".join("–" for _ in projected) + " |")
            continue
        proj = [duration(f["a"] + f["b"] * rows) for _, rows in projected]
        p(f"| {label} | {f['n']} | {f['a']:,.2f} | {f['b'] * 1e6:,.3f} | {fmt(f['r2'], 3)} | " + " | ".join(proj) + " |")
    if any(f and f["kind"] != "least squares" for f in fits.values()):
        p("\n(one distinct row count only: the line goes through the origin, seconds proportional to rows, "
          "so fixed start-up costs count as per-row work and the projection overstates)")
    p("")
    head = ["engine (peak RSS)", "a (MiB)", "b (MiB per M rows)"] + [n for n, _ in projected]
    p("| " + " | ".join(head) + " |")
    p("|---|---:|---:|" + "|".join("---:" for _ in projected) + "|")
    for key, label, field in ENGINES:
        pts = [(r["store"]["gpu_sample_rows"], r[key][field]) for r in results if ok(r[key]) and r[key].get(field) is not None]
        f = fit(pts)
        if f is None or f["kind"] != "least squares":
            p(f"| {label} | – | – | " + " | ".join("– (needs two sizes)" for _ in projected) + " |")
            continue
        p(f"| {label} | {f['a']:,.0f} | {f['b'] * 1e6:,.2f} | " +
          " | ".join(f"{(f['a'] + f['b'] * rows) / 1024:,.1f} GiB" for _, rows in projected) + " |")
    p("\n(in process the sample steps run one day at a time, so its peak memory should follow a day of the fleet's "
      "samples rather than the month's rows: read this table as an upper trend, not a forecast)\n")

    f = fits["ballista"]
    execs = r0["ballista"]["executors"]
    rows = projected[-1][1]
    p(f"Ballista executors for {projected[-1][0]} within {DEADLINE_S / 3600:.0f} h, assuming linear speed-up per "
      f"executor: the per-row part b × rows of the measured time (with {execs} executors at --concurrency 1) "
      f"divides evenly among executors, the fixed part a does not shrink, and each executor has the CPU it had here.")
    if f is None:
        p("\n- no Ballista run succeeded (or it was skipped, SKIP): no estimate.")
    elif f["b"] <= 0:
        p(f"\n- the fit has no positive slope (b = {f['b']:.3g} s per row): no estimate; measure larger sizes.")
    elif f["a"] >= DEADLINE_S:
        p(f"\n- the fixed part a = {f['a']:,.0f} s alone exceeds {DEADLINE_S:,.0f} s: no number of executors suffices.")
    else:
        single = f["a"] + f["b"] * rows
        need = math.ceil(execs * f["b"] * rows / (DEADLINE_S - max(f["a"], 0.0)))
        p(f"\n- projected with {execs} executors: {duration(single)}; needed: **{max(need, 1)} executors** "
          f"({execs} × {f['b'] * rows:,.0f} s / ({DEADLINE_S:,.0f} s − {max(f['a'], 0):,.0f} s))"
          + (" — from one distinct size, so start-up costs are scaled as if per row: an overstatement." if f["kind"] != "least squares" else "."))
    p("- the executors measured here shared this machine's "
      f"{r0['cpus']} CPUs with the scheduler and the client, so the per-executor rate is a floor of what a "
      "dedicated executor does; shuffle over a real network is not measured.")
    text = "\n".join(out) + "\n"
    sys.stdout.write(text)
    with open(os.path.join(w, "report.md"), "w") as fh:
        fh.write(text)


if __name__ == "__main__":
    main()
