#!/usr/bin/env python3
"""Dashboard load on `gpuledger serve` over the PostgreSQL wire protocol (bench/serve.sh runs it).

What it sends: every panel target's rawSql of dashboards/*.json (rows' collapsed panels included,
hidden targets skipped) and every template variable's query, expanded the way Grafana's PostgreSQL
data source expands them (see `expand` below); with no dashboard there, FALLBACK, a few
dashboard-like queries over the ledger's tables, goes through the same expander. Variables are
resolved in each dashboard's order by running their queries on the server: a multi-value or
include-All variable gets "All" (every value offered, or its allValue), a single-valued one the
value for the time range's month when offered, else the first (Grafana's default).

How: one validation pass on one connection first (each query once; a failure prints the query
and the server's error and stops the run, unless --skip-failing), then CLIENTS threads, each with
its own connection (psycopg 3, libpq underneath; SCRAM-SHA-256 login), loop for DURATION seconds
over the queries in their own seeded shuffle, round-robin, timing execute + fetchall of each.
libpq waits on the socket without the GIL, so threads overlap; the client's own CPU time is
reported so that a client-bound run shows itself (on a 2-core machine the client shares the
cores with the server). Queries/s counts the queries completed inside the window; the latency
figures cover every query completed, the ones in flight at the deadline included.

Prints a summary on stderr and writes everything as JSON to --out.
"""

import argparse
import datetime as dt
import math
import json
import os
import random
import re
import resource
import sys
import threading
import time
from decimal import Decimal
from pathlib import Path

try:
    import psycopg
except ImportError:  # bench/serve.sh installs it into a venv of its work directory
    sys.exit("serve_load.py needs psycopg 3: pip install 'psycopg[binary]'")

# ---------------------------------------------------------------------------------------------
# Grafana's expansion of a panel's SQL (PostgreSQL data source, no TimescaleDB), in two passes as
# Grafana does: the template variables in the browser, then the backend's macros. It follows
# tests/it/dashboards.rs, which checks the same dashboards through `gpuledger query`.
#   $var ${var} ${var:fmt} [[var]] [[var:fmt]]   multi/All: 'a','b' (quotes doubled); single: as is
#   $__interval $__interval_ms $__from $__to     the panel's interval (>= its min interval); ms
#   $__timeFilter(c)      c BETWEEN '<from>' AND '<to>'    (RFC 3339, UTC, Go's RFC3339Nano)
#   $__timeFrom() / $__timeTo()                '<from>' / '<to>'
#   $__timeGroup(c, 1h[, fill])  floor(extract(epoch from c)/3600)*3600; ...Alias adds AS "time"
#   $__time(c)  c AS "time";   $__timeEpoch(c)  extract(epoch from c) as "time"
#   $__unixEpochFilter(c) $__unixEpochFrom() $__unixEpochTo() $__unixEpochGroup[Alias](c, 1h) and
#   the Nano forms: epoch numbers.
# An unknown variable stays as written (as in Grafana); an unknown macro is an error.
# ---------------------------------------------------------------------------------------------

WORD = re.compile(r"\w+")


def rfc3339_nano(t):
    frac = f".{t.microsecond:06d}".rstrip("0") if t.microsecond else ""
    return t.strftime("%Y-%m-%dT%H:%M:%S") + frac + "Z"


def go_float(v):
    """Go's %v of a float64 (shortest digits; exponent form from 1e+06 up and below 1e-04)."""
    if v == 0:
        return "0"
    d = Decimal(repr(float(v))).normalize()
    digits = "".join(map(str, d.as_tuple().digits))
    exp = d.adjusted()
    if -4 <= exp < 6:
        return format(d, "f")
    mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
    return f"{'-' if v < 0 else ''}{mantissa}e{'-' if exp < 0 else '+'}{abs(exp):02d}"


def parse_interval(text):
    """gtime.ParseInterval: <n>d, <n>w, or a Go duration (1h, 90s, 1h30m, 500ms); seconds."""
    m = re.fullmatch(r"(\d+)([dw])", text)
    if m:
        return int(m[1]) * (86400 if m[2] == "d" else 604800)
    parts = re.findall(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)", text)
    if not parts or "".join(a + b for a, b in parts) != text:
        raise ValueError(f"error parsing interval {text}")
    scale = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600}
    secs = sum(float(a) * scale[b] for a, b in parts)
    if secs <= 0:
        raise ValueError(f"interval {text} is zero")
    return secs


def format_interval(secs):
    """gtime.FormatInterval: the largest whole unit, truncated (3600 -> 1h)."""
    ms = int(round(secs * 1000))
    for size, unit in ((365 * 86400000, "y"), (86400000, "d"), (3600000, "h"), (60000, "m"), (1000, "s"), (1, "ms")):
        if ms >= size:
            return f"{ms // size}{unit}"
    return "1ms"


class Ctx:
    def __init__(self, start, end, interval_s, variables):
        self.start, self.end, self.interval_s, self.vars = start, end, interval_s, variables


def resolve_variable(name, fmt, ctx):
    builtin = {"__interval": format_interval(ctx.interval_s), "__interval_ms": str(int(ctx.interval_s * 1000)),
               "__from": str(int(ctx.start.timestamp() * 1000)), "__to": str(int(ctx.end.timestamp() * 1000))}
    if name in builtin:
        return builtin[name]
    if name not in ctx.vars:
        return None
    multi, values = ctx.vars[name]  # (True, [values]) or (False, value) or (None, raw allValue)
    if multi is None:
        return values
    vals = values if multi else [values]
    q = lambda v: "'" + v.replace("'", "''") + "'"  # noqa: E731
    if fmt is None:
        return ",".join(q(v) for v in vals) if multi else values.replace("'", "''")
    if fmt in ("raw", "csv"):
        return ",".join(vals)
    if fmt == "sqlstring":
        return ",".join(q(v) for v in vals)
    if fmt == "pipe":
        return "|".join(vals)
    if fmt == "singlequote":
        return ",".join("'" + v.replace("'", "\\'") + "'" for v in vals)
    if fmt == "doublequote":
        return ",".join('"' + v.replace('"', '\\"') + '"' for v in vals)
    raise ValueError(f"unknown variable format {fmt!r} in ${{{name}:{fmt}}}")


VAR_REF = re.compile(r"\$\{(\w+)(?::([^}]*))?\}|\[\[(\w+)(?::(\w+))?\]\]|\$(\w+)")


def interpolate_variables(sql, ctx):
    def sub(m):
        name = m[1] or m[3] or m[5]
        fmt = m[2] if m[1] else m[4]
        value = resolve_variable(name, fmt, ctx)
        return m[0] if value is None else value
    return VAR_REF.sub(sub, sql)


def macro(name, args, ctx):
    def column():
        if not args or not args[0]:
            raise ValueError(f"missing time column argument for macro ${name}")
        return args[0]

    def group_seconds():
        if not 2 <= len(args) <= 3:
            raise ValueError(f"macro ${name} needs a time column, an interval and an optional fill value")
        return go_float(parse_interval(args[1].strip("'\"")))
    lo, hi = rfc3339_nano(ctx.start), rfc3339_nano(ctx.end)
    s0, s1 = int(ctx.start.timestamp()), int(ctx.end.timestamp())
    ns = lambda t: int(t.timestamp()) * 10**9 + t.microsecond * 1000  # noqa: E731
    if name == "__time":
        return f'{column()} AS "time"'
    if name == "__timeEpoch":
        return f'extract(epoch from {column()}) as "time"'
    if name == "__timeFilter":
        return f"{column()} BETWEEN '{lo}' AND '{hi}'"
    if name == "__timeFrom":
        return f"'{lo}'"
    if name == "__timeTo":
        return f"'{hi}'"
    if name in ("__timeGroup", "__timeGroupAlias"):
        n = group_seconds()
        g = f"floor(extract(epoch from {column()})/{n})*{n}"
        return g + ' AS "time"' if name.endswith("Alias") else g
    if name in ("__unixEpochGroup", "__unixEpochGroupAlias"):
        n = group_seconds()
        g = f"floor(({column()})/{n})*{n}"
        return g + ' AS "time"' if name.endswith("Alias") else g
    if name == "__unixEpochFilter":
        return f"{column()} >= {s0} AND {column()} <= {s1}"
    if name == "__unixEpochNanoFilter":
        return f"{column()} >= {ns(ctx.start)} AND {column()} <= {ns(ctx.end)}"
    simple = {"__unixEpochFrom": s0, "__unixEpochTo": s1, "__unixEpochNanoFrom": ns(ctx.start), "__unixEpochNanoTo": ns(ctx.end)}
    if name in simple:
        return str(simple[name])
    raise ValueError(f'unknown macro "{name}"')


MACRO = re.compile(r"\$(\w+)\(([^)]*)\)")


def expand(sql, ctx):
    sql = interpolate_variables(sql, ctx)

    def sub(m):
        name, args = m[1], [a.strip(" ") for a in m[2].split(",")]
        # Before Grafana 5.3 $__timeGroup carried its alias; a comma right after it still means so.
        if name == "__timeGroup" and sql[m.end():m.end() + 1] == ",":
            name = "__timeGroupAlias"
        return macro(name, args if m[2] else [], ctx)
    return MACRO.sub(sub, sql)


# ---------------------------------------------------------------------------------------------
# The queries: dashboards, or the fallback.
# ---------------------------------------------------------------------------------------------

FALLBACK = {
    "title": "fallback",
    "templating": {"list": [{"name": "month", "type": "query", "query": "SELECT DISTINCT month FROM chargeback_monthly ORDER BY month DESC"},
                            {"name": "team", "type": "query", "multi": True, "includeAll": True,
                             "query": "SELECT DISTINCT team FROM chargeback_monthly WHERE month = '$month' ORDER BY team"}]},
    "panels": [{"title": t, "targets": [{"rawSql": s}]} for t, s in [
        ("chargeback table", "SELECT team, total, compute, idle, failed_runs, accepted_units FROM chargeback_monthly WHERE month = '$month' AND team IN ($team) ORDER BY total DESC"),
        ("chargeback total", "SELECT sum(total) AS total FROM chargeback_monthly WHERE month = '$month' AND team IN ($team)"),
        ("gpu-hours by team and state", "SELECT team, state, sum(gpu_hours) AS gpu_hours FROM priced_state_hours WHERE day BETWEEN left($__timeFrom(), 10) AND left($__timeTo(), 10) AND team IN ($team) GROUP BY 1, 2 ORDER BY 1, 2"),
        ("gpu-hours by state per day", "WITH s AS (SELECT to_timestamp(day) AS day_start, state, gpu_hours FROM priced_state_hours WHERE day BETWEEN left($__timeFrom(), 10) AND left($__timeTo(), 10)) "
                                       "SELECT $__timeGroupAlias(day_start, '1d'), state AS metric, sum(gpu_hours) AS gpu_hours FROM s GROUP BY 1, 2 ORDER BY 1, 2"),
        ("queue wait summary", "SELECT cluster_queue, team, admissions, p50_seconds, p95_seconds, max_seconds FROM queue_wait_summary WHERE team IN ($team) ORDER BY p95_seconds DESC"),
        ("failure causes", "SELECT outcome || ' / ' || cause AS cause, sum(cost) AS cost FROM failure_causes WHERE month = '$month' GROUP BY 1 ORDER BY cost DESC LIMIT 10"),
        ("fleet activity per node", "WITH h AS (SELECT to_timestamp(hour) AS hour_start, hostname, activity FROM node_hourly WHERE hour >= left($__timeFrom(), 13) AND hour < $__timeTo()) "
                                    "SELECT $__timeGroupAlias(hour_start, $__interval), hostname AS metric, avg(activity) AS activity FROM h GROUP BY 1, 2 ORDER BY 1, 2"),
        ("fleet gpus reporting", "SELECT count(DISTINCT hostname) AS nodes, count(DISTINCT uuid) AS gpus FROM gpu_hourly WHERE hour >= left($__timeFrom(), 13) AND hour < $__timeTo()"),
        ("fleet max temperature", "WITH h AS (SELECT to_timestamp(hour) AS hour_start, max_temp_c FROM node_hourly WHERE hour >= left($__timeFrom(), 13) AND hour < $__timeTo()) "
                                  "SELECT $__timeGroupAlias(hour_start, $__interval), max(max_temp_c) AS temp_c FROM h GROUP BY 1 ORDER BY 1"),
    ]],
}


def panels(d):
    for p in d.get("panels") or []:
        yield p
        yield from panels(p)


def variable_sql(v):
    q = v.get("query")
    if isinstance(q, dict):
        q = q.get("rawSql") or q.get("query")
    return q if isinstance(q, str) else None


class Query:
    def __init__(self, kind, sql):
        self.kind, self.sql = kind, sql


def run_once(conn, sql, prepare):
    t0 = time.perf_counter()
    with conn.cursor() as cur:
        cur.execute(sql, prepare=prepare)
        rows = cur.fetchall() if cur.description else []
        cols = [c.name for c in cur.description or []]
    return time.perf_counter() - t0, cols, rows


def load_queries(dashboards, conn, args, start, end):
    """[(kind, sql)], variable queries included, each expanded; variables run on `conn`."""
    out, problems = [], []
    month = start.strftime("%Y-%m")
    for name, d in dashboards:
        ctx = Ctx(start, end, parse_interval(args.interval), {})
        for v in (d.get("templating") or {}).get("list") or []:
            vname, vtype = v.get("name"), v.get("type")
            if vtype == "query":
                raw = variable_sql(v) or ""
                try:
                    sql = expand(raw, ctx)
                except ValueError as e:
                    problems.append((f"{name}: var ${vname}", raw, f"expansion: {e}"))
                    continue
                out.append(Query(f"{name}: var ${vname}", sql))
                try:
                    _, cols, rows = run_once(conn, sql, False)
                except Exception as e:  # noqa: BLE001
                    problems.append((f"{name}: var ${vname}", sql, f"{type(e).__name__}: {str(e).strip()}"))
                    continue
                i = cols.index("__value") if "__value" in cols else 0
                options = list(dict.fromkeys(str(r[i]) for r in rows if r[i] is not None and str(r[i]) != ""))
            elif vtype in ("custom", "constant", "textbox", "interval"):
                options = [s.strip() for s in str(v.get("query", "")).split(",") if s.strip()]
            else:  # datasource, adhoc: nothing to substitute in SQL
                continue
            if v.get("includeAll") and v.get("allValue"):
                ctx.vars[vname] = (None, v["allValue"])
            elif v.get("multi") or v.get("includeAll"):
                ctx.vars[vname] = (True, options)
            elif options:
                ctx.vars[vname] = (False, month if month in options else options[0])
        for p in panels(d):
            if p.get("type") == "row":
                continue
            pint = p.get("interval") or ""
            ctx.interval_s = max(parse_interval(args.interval), parse_interval(pint.lstrip(">")) if pint else 0)
            for t in p.get("targets") or []:
                if t.get("hide") or not (t.get("rawSql") or "").strip():
                    continue
                kind = f"{name}: {p.get('title') or p.get('id')}" + (f" [{t.get('refId')}]" if len(p["targets"]) > 1 else "")
                if any(q.kind == kind for q in out):  # two panels of one title
                    kind += f" #{p.get('id')}"
                try:
                    out.append(Query(kind, expand(t["rawSql"], ctx)))
                except ValueError as e:  # as Grafana, which fails the panel's query
                    problems.append((kind, t["rawSql"], f"expansion: {e}"))
    return out, problems


def percentile(sorted_values, p):
    """Nearest rank."""
    if not sorted_values:
        return None
    return sorted_values[max(0, math.ceil(p / 100 * len(sorted_values)) - 1)]


def stats(latencies):
    s = sorted(latencies)
    ms = lambda x: None if x is None else round(x * 1000, 2)  # noqa: E731
    return {"count": len(s), "p50_ms": ms(percentile(s, 50)), "p95_ms": ms(percentile(s, 95)), "p99_ms": ms(percentile(s, 99)),
            "max_ms": ms(s[-1] if s else None), "mean_ms": ms(sum(s) / len(s) if s else None)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--user", default="grafana")
    ap.add_argument("--password-env", default="GPULEDGER_BENCH_PASSWORD", help="variable holding the password")
    ap.add_argument("--dbname", default="datafusion")
    ap.add_argument("--dashboards", default=str(Path(__file__).resolve().parent.parent / "dashboards"))
    ap.add_argument("--queries", choices=["auto", "dashboards", "fallback"], default="auto",
                    help="auto: the dashboards when there are any, else the fallback list")
    ap.add_argument("--from", dest="start", required=True, help="time range start, RFC 3339")
    ap.add_argument("--to", dest="end", required=True, help="time range end, RFC 3339 (Grafana's 'previous month' ends at .999)")
    ap.add_argument("--interval", default="1h", help="$__interval (Grafana: range / panel width; 30 days on ~700 px is 1h)")
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--duration", type=float, default=60)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--protocol", choices=["simple", "prepared"], default="simple",
                    help="simple: one Query message (lib/pq, psql); prepared: Parse once per connection, then Bind/Execute (pgx's statement cache)")
    ap.add_argument("--skip-failing", action="store_true", help="drop queries that fail validation instead of stopping")
    ap.add_argument("--out", help="JSON result file")
    args = ap.parse_args()
    password = os.environ.get(args.password_env)
    if not password:
        sys.exit(f"set {args.password_env} to the password of {args.user}")
    parse = lambda s: dt.datetime.fromisoformat(s.replace("Z", "+00:00")).astimezone(dt.timezone.utc)  # noqa: E731
    start, end = parse(args.start), parse(args.end)
    prepare = args.protocol == "prepared"
    conninfo = dict(host=args.host, port=args.port, user=args.user, password=password, dbname=args.dbname,
                    sslmode="disable", application_name="gpuledger-bench", autocommit=True)
    log = lambda *a: print(*a, file=sys.stderr, flush=True)  # noqa: E731

    files = sorted(Path(args.dashboards).glob("*.json")) if args.queries != "fallback" else []
    if args.queries == "dashboards" and not files:
        sys.exit(f"no dashboards under {args.dashboards}")
    dashboards = [(f.stem.removeprefix("gpuledger-"), json.loads(f.read_text())) for f in files] or [("fallback", FALLBACK)]
    source = "dashboards" if files else "fallback"

    # Validation: the variables' queries (run while resolving), then every query once.
    conn = psycopg.connect(**conninfo)
    queries, failed = load_queries(dashboards, conn, args, start, end)
    validation = {}
    for q in queries:
        if q.kind in validation or any(f[0] == q.kind for f in failed):
            continue
        try:
            secs, _, rows = run_once(conn, q.sql, prepare)
            validation[q.kind] = {"seconds": round(secs, 4), "rows": len(rows)}
        except Exception as e:  # noqa: BLE001 (psycopg.Error, or a value it cannot decode)
            failed.append((q.kind, q.sql, f"{type(e).__name__}: {str(e).strip()}"))
    conn.close()
    if failed:
        total = len({q.kind for q in queries} | {f[0] for f in failed})
        log(f"\n{len(failed)} of {total} queries FAIL (expansion, or through the server):")
        for kind, sql, err in failed:
            log(f"\n--- {kind}\n{sql}\n=> {err}")
        if not args.skip_failing:
            if args.out:
                Path(args.out).write_text(json.dumps({"source": source, "failed": [{"kind": k, "sql": s, "error": e} for k, s, e in failed]}, indent=1))
            sys.exit("validation failed (--skip-failing / SKIP_FAILING=1 to run the rest)")
        bad = {f[0] for f in failed}
        queries = [q for q in queries if q.kind not in bad]
    if not queries:
        sys.exit("no query to run")
    log(f"validated {len(queries)} queries from {source} ({len(failed)} dropped): one pass on one connection took "
        f"{sum(v['seconds'] for v in validation.values()):.1f} s")

    # The timed run.
    results = [[] for _ in range(args.clients)]   # per client: (query index, start, seconds, ok, rows)
    errors = [[] for _ in range(args.clients)]    # per client: (query index, message)
    connected = threading.Barrier(args.clients + 1)
    go = threading.Event()
    window = {}

    def client(i):
        rng = random.Random(args.seed * 1000003 + i)
        order = list(range(len(queries)))
        rng.shuffle(order)
        try:
            c = psycopg.connect(**conninfo)
        except psycopg.Error as e:
            errors[i].append((-1, f"connect: {e}"))
            connected.wait()
            return
        connected.wait()
        go.wait()
        deadline = window["end"]
        n = 0
        while time.perf_counter() < deadline:
            qi = order[n % len(order)]
            n += 1
            t0 = time.perf_counter()
            try:
                with c.cursor() as cur:
                    cur.execute(queries[qi].sql, prepare=prepare)
                    rows = cur.fetchall() if cur.description else []
                results[i].append((qi, t0, time.perf_counter() - t0, True, len(rows)))
            except Exception as e:  # noqa: BLE001 (psycopg.Error, or a value it cannot decode)
                results[i].append((qi, t0, time.perf_counter() - t0, False, 0))
                errors[i].append((qi, str(e).strip()))
                if c.closed or c.broken:
                    try:
                        c = psycopg.connect(**conninfo)
                    except psycopg.Error as e2:
                        errors[i].append((-1, f"reconnect: {e2}"))
                        return
        c.close()

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(args.clients)]
    for t in threads:
        t.start()
    connected.wait()
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    window["start"] = time.perf_counter()
    window["end"] = window["start"] + args.duration
    wall_start = time.time()
    go.set()
    for t in threads:
        t.join()
    finished = time.perf_counter()
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    wall_end = wall_start + (finished - window["start"])

    flat = [r for rs in results for r in rs]
    in_window = [r for r in flat if r[1] + r[2] <= window["end"]]
    ok = [r for r in flat if r[3]]
    client_cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    elapsed = finished - window["start"]
    per_kind = {}
    for qi, q in enumerate(queries):
        mine = [r for r in flat if r[0] == qi]
        e = [m for rs in errors for (j, m) in rs if j == qi]
        s = stats([r[2] for r in mine if r[3]])
        s.update({"errors": len(e), "rows": max((r[4] for r in mine), default=0), "first_error": e[0] if e else None,
                  "single_client_ms": round(validation.get(q.kind, {}).get("seconds", 0) * 1000, 2)})
        per_kind[q.kind] = s
    all_errors = [m for rs in errors for (_, m) in rs]
    out = {
        "source": source, "protocol": args.protocol, "clients": args.clients, "duration_s": args.duration,
        "range": [rfc3339_nano(start), rfc3339_nano(end)], "interval": args.interval, "queries": len(queries),
        "timed_start_epoch": wall_start, "timed_end_epoch": wall_end, "elapsed_s": round(elapsed, 2),
        "completed": len(flat), "completed_in_window": len(in_window),
        "qps": round(len([r for r in in_window if r[3]]) / args.duration, 2),
        "latency": stats([r[2] for r in ok]), "errors": len(all_errors),
        "error_samples": sorted(set(all_errors))[:10],
        "client_cpu_s": round(client_cpu, 2), "client_cpu_share_of_one_core": round(client_cpu / elapsed, 3),
        "cpus": os.cpu_count(), "failed_validation": [{"kind": k, "sql": s, "error": e} for k, s, e in failed],
        "per_kind": per_kind, "sql": {q.kind: q.sql for q in queries},
    }
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1))
    lat = out["latency"]
    log(f"{args.clients} clients x {args.duration:.0f} s ({args.protocol} protocol, {len(queries)} queries from {source}): "
        f"{out['qps']} queries/s, p50 {lat['p50_ms']} ms, p95 {lat['p95_ms']} ms, p99 {lat['p99_ms']} ms, max {lat['max_ms']} ms, "
        f"{out['errors']} errors; client CPU {client_cpu:.1f} s = {100 * client_cpu / elapsed:.0f}% of one core")
    return 0


if __name__ == "__main__":
    sys.exit(main())
