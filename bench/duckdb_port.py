#!/usr/bin/env python3
"""The whole accounting of queries/*.sql run by DuckDB, for benchmarking the ledger against it.

Generated, not hand-kept: every run reads queries/*.sql and ledger/src/plan.rs (the file
order and which views the ledger keeps as tables), schemas/src/*.rs (the columns of the store's
tables and of the derived tables) and the configuration file, rewrites the DataFusion SQL into
DuckDB's dialect by the short list of mechanical edits in EDITS below, and runs it the way
`Accounting::run` runs it over a store (ledger/src/accounting.rs, following plan.rs): the object
steps, then the sample steps one day at a time (two passes over the days; every day computed, one
unit a day; pass 1 writes a day's pod samples and observation starts to <out>/work/carried/ and
pass 2 reads them, as the ledger does), then the monthly steps over the gathered days. `--at-once` runs the sample steps over every day
at once instead, as `Accounting::run_at_once` (the SQL logic tests) does: on a month of 1,024
GPUs at 30 s that needs more than 37 GB of DuckDB temporary files besides 19 GB of memory.
The generated SQL is written to <out>/ledger_duckdb.sql (runnable on its own:
`duckdb < ledger_duckdb.sql`).

Inputs, as the ledger sees them:
  * each store table is a view over the Parquet files its Delta log lists as live (the last
    checkpoint plus the JSON commits after it: files a compaction removed but VACUUM has not
    deleted yet are not read), with the `date` partition value (VARCHAR, '' for a file
    without one) as the ledger's SnapshotTable gives it; a table never written is an empty
    table of the columns schemas/src declares;
  * settings, hardware_xids, price_by_node_label, price_by_model, overheads, extra_units,
    budgets, quota_owners and unit_counters are built from the TOML file as `register_config` builds them, with the defaults of
    ledger/src/config.rs, amounts as DECIMAL(38,6) read as written (the file is not validated
    otherwise: run `gpuledger ledger` for that);
  * calendar_days / calendar_hours span the day before the first `date` partition of
    gpu_samples to the day after the last, as `register_calendar` does.

What is kept as a table (CREATE TABLE) is what the ledger keeps: OBJECT_KEEPS, MONTHLY_KEEPS
and CARRIED of plan.rs, the known_* tables and spacing_counts, sample_spans, the per-day tables
and rollups, xid_errors and REPORTED_TABLES (per day, the gathered ones are tables
`__acc_<name>` that views of the ledger's names read; the ledger writes them as day tables). Everything else is a view, as in
the ledger (DuckDB inlines views; a view read twice is computed twice there too).

Each derived table (DERIVED_TABLES of plan.rs) is written to <out>/<table>.parquet with the
column types schemas/src/derived.rs declares, and compared with <store>/ledger/<table>.parquet
(written by `gpuledger ledger`): order-insensitive, every column, floats equal within a relative
1e-9 (absolute 1e-9 near zero), decimals (money) and integers (GPU-nanoseconds) exactly, NULL
equal to NULL. <out>/duckdb_compare.json holds the results
and the timings (the run, the writes and the comparison apart). Exit status 0 when every table
agrees, 1 when one does not, 2 on an error.

Not ported: the retention carry (`carry_expired`: a store whose old samples were expired gets
the previous run's rows for those months from the ledger; here those months just have no
samples) and `--idle-policy` overrides (the configuration's policy is used).
"""

from __future__ import annotations

import argparse
import csv
import decimal
import json
import os
import re
import resource
import sys
import time
import tomllib
import urllib.parse
from dataclasses import dataclass, field
from datetime import date
from decimal import Decimal
from pathlib import Path

import duckdb

REPO = Path(__file__).resolve().parent.parent
QUERIES = REPO / "queries"
PLAN_RS = REPO / "ledger" / "src" / "plan.rs"
QUERIES_RS = REPO / "ledger" / "src" / "queries.rs"
SCHEMAS = REPO / "schemas" / "src"

# ---------------------------------------------------------------------------------------------
# What the Rust side decides, read from its source so that the port follows it.


def rust_list(src: str, name: str) -> list[str]:
    """The string literals of `const NAME: ... = [...]` / `&[...]` in Rust source."""
    m = re.search(r"\bconst\s+" + name + r"\s*:[^=]*=\s*&?\[(.*?)\];", src, re.S)
    if not m:
        raise SystemExit(f"duckdb_port: cannot find {name} in {PLAN_RS} or {QUERIES_RS}")
    return re.findall(r'"([^"]+)"', m.group(1))


def step_list(src: str, file: str, field: str) -> list[str]:
    """The views pass 2's step running `file` names in `field` (plan.rs: `yields: &[("view",
    Own::...)]`, `keeps: &[...]`)."""
    pass2 = src[src.index("pub const PASS2"):]
    m = re.search(r'file:\s*"' + re.escape(file) + r'".*?' + field + r':\s*&\[(.*?)\],', pass2, re.S)
    if not m:
        raise SystemExit(f"duckdb_port: cannot find the {field} of {file} in PASS2 of {PLAN_RS}")
    return re.findall(r'\(\s*"([^"]+)"', m.group(1))


def step_yields(src: str, file: str) -> list[str]:
    """The views pass 2's step running `file` yields."""
    return step_list(src, file, "yields")


@dataclass
class LedgerPlan:
    query_files: list[str]
    object_tables: list[str]
    capacity_tables: list[str]
    reused_views: list[str]
    per_day_tables: list[str]
    rollup_tables: list[str]
    monthly_files: list[str]
    reported_tables: list[str]
    derived_tables: list[str]


def read_ledger_plan() -> LedgerPlan:
    """The day plan of ledger/src/plan.rs: what the ledger keeps, yields and carries."""
    src = PLAN_RS.read_text()
    files = [f for f in rust_list(QUERIES_RS.read_text(), "QUERY_FILES") if not f.startswith("../")]
    on_disk = sorted(p.name for p in QUERIES.glob("*.sql"))
    if sorted(files) != on_disk:
        raise SystemExit(f"duckdb_port: QUERY_FILES of queries.rs {files} is not queries/*.sql {on_disk}")
    reported = rust_list(src, "REPORTED_TABLES")
    return LedgerPlan(
        query_files=files,
        object_tables=rust_list(src, "OBJECT_KEEPS"),
        capacity_tables=[],
        # Kept as soon as created: the monthly keeps, the pod samples and observation starts
        # each unit keeps (pass 1 carries them to pass 2), and what the states step keeps (a MIG
        # GPU's pieces split among its instances, read by several views).
        reused_views=[v for v in rust_list(src, "MONTHLY_KEEPS") if v not in reported] + rust_list(src, "CARRIED")
        + step_list(src, "40_states.sql", "keeps"),
        per_day_tables=step_yields(src, "40_states.sql"),
        rollup_tables=step_yields(src, "45_hourly.sql"),
        monthly_files=rust_list(src, "MONTHLY_FILES"),
        reported_tables=reported,
        derived_tables=rust_list(src, "DERIVED_TABLES"),
    )


# Column types: schemas/src's names -> DuckDB's. Timestamps are Timestamp(ms, "UTC").
RAW_TYPES = {"Timestamp": "TIMESTAMPTZ", "Utf8": "VARCHAR", "Int32": "INTEGER", "Int64": "BIGINT", "Float64": "DOUBLE", "Boolean": "BOOLEAN"}
DERIVED_TYPES = dict(RAW_TYPES, Utf8View="VARCHAR", LargeUtf8="VARCHAR", UInt64="UBIGINT", Decimal20="DECIMAL(20,0)", Money="DECIMAL(38,6)")
COL_RE = re.compile(r'\bcol\(\s*"([^"]+)"\s*,\s*(\w+)\s*,\s*(true|false)')


def raw_schemas() -> dict[str, list[tuple[str, str]]]:
    """Store table -> [(column, DuckDB type)], from schemas/src/{samples,k8s}.rs."""
    text = "\n".join(p.read_text() for p in sorted(SCHEMAS.glob("*.rs")) if p.name not in ("derived.rs", "lib.rs"))
    # Column lists are consts (or the version_columns! macro, spliced in as OBJ by cat(OBJ, [...])).
    blocks = re.split(r"\n(?=(?:pub\s+)?const\s|macro_rules!)", text)
    lists: dict[str, list[tuple[str, str]]] = {}
    for b in blocks:
        m = re.match(r"(?:pub\s+)?const\s+(\w+)\s*:\s*(?:\[Column;\s*\d+\]|&\[Column\])", b) or re.match(r"macro_rules!\s*(\w+)", b)
        if not m:
            continue
        cols = [(n, RAW_TYPES[t]) for n, t, _ in COL_RE.findall(b)]
        name = "OBJ_MACRO" if m.group(1) == "version_columns" else m.group(1)
        if re.search(r"=\s*cat\(\s*OBJ\s*,", b):
            cols = ["OBJ"] + cols  # resolved below
        lists[name] = cols
    obj = lists.get("OBJ_MACRO", [])
    tables = {}
    for m in re.finditer(r'=\s*Table\s*\{\s*name:\s*"(\w+)".*?columns:\s*&?(\w+)', text, re.S):
        cols = lists[m.group(2)]
        tables[m.group(1)] = [c for x in cols for c in (obj if x == "OBJ" else [x])]
    lib = (SCHEMAS / "lib.rs").read_text()
    listed = re.search(r"pub const TABLES: &\[Table\] = &\[(.*?)\];", lib, re.S)
    names = [n.lower() for n in re.findall(r"::(\w+)", listed.group(1))] if listed else []
    missing = [n for n in names if n not in tables]
    if not tables or missing:
        raise SystemExit(f"duckdb_port: cannot read the store's schemas from {SCHEMAS} (missing {missing})")
    return {n: tables[n] for n in names}


def derived_schemas() -> dict[str, list[tuple[str, str]]]:
    """Derived table -> [(column, DuckDB type)], from schemas/src/derived.rs."""
    text = (SCHEMAS / "derived.rs").read_text()
    # Columns shared by several tables come from a macro (`columns: wait_figures!(first, ...)`:
    # the arguments, then the macro's own columns).
    macros = {m.group(1): COL_RE.findall(m.group(2)) for m in re.finditer(r"macro_rules!\s*(\w+)\s*\{(.*?)\n\}", text, re.S)}
    out = {}
    for m in re.finditer(r'=\s*DerivedTable\s*\{\s*name:\s*"(\w+)"(.*?)\n\};', text, re.S):
        cols = COL_RE.findall(m.group(2))
        used = re.search(r"columns:\s*(\w+)!\(", m.group(2))
        if used:
            cols += macros[used.group(1)]
        out[m.group(1)] = [(n, DERIVED_TYPES[t]) for n, t, _ in cols]
    return out


# ---------------------------------------------------------------------------------------------
# SQL text: statements, and where the code is (outside string literals, quoted names, comments).


def split_statements(sql: str) -> list[str]:
    """As queries.rs `split_statements`: comment lines dropped, a statement ends with `;` at a line's end."""
    out, cur = [], []
    for line in sql.splitlines():
        if line.lstrip().startswith("--"):
            continue
        cur.append(line)
        if line.rstrip().endswith(";"):
            s = "\n".join(cur).strip().rstrip(";").strip()
            if s:
                out.append(s)
            cur = []
    if "\n".join(cur).strip():
        out.append("\n".join(cur).strip())
    return out


def created_view(statement: str) -> str | None:
    words = statement.split()[:6]
    for i, w in enumerate(words):
        if w.upper() == "VIEW" and i + 1 < len(words):
            return words[i + 1]
    return None


def mask(sql: str) -> str:
    """`sql` with the insides of '...' and "..." and comments blanked (same length), so that
    patterns and parentheses are only found in code."""
    out = list(sql)
    i, n = 0, len(sql)
    while i < n:
        c = sql[i]
        if c in "'\"":
            j = i + 1
            while j < n:
                if sql[j] == c:
                    if j + 1 < n and sql[j + 1] == c:
                        j += 2
                        continue
                    break
                j += 1
            for k in range(i + 1, min(j, n)):
                out[k] = " "
            i = j + 1
        elif sql.startswith("--", i) or sql.startswith("/*", i):
            j = sql.find("\n", i) if sql[i + 1] == "-" else sql.find("*/", i) + 2
            j = n if j < (i + 2) else j
            for k in range(i, j):
                out[k] = " "
            i = j
        else:
            i += 1
    return "".join(out)


def closing_paren(masked: str, open_at: int) -> int:
    depth = 0
    for i in range(open_at, len(masked)):
        if masked[i] == "(":
            depth += 1
        elif masked[i] == ")":
            depth -= 1
            if depth == 0:
                return i
    raise ValueError(f"unbalanced parenthesis at {open_at}: {masked[open_at:open_at + 80]!r}")


def top_level(masked: str, pattern: str) -> list[re.Match]:
    """Matches of `pattern` in `masked` outside any parenthesis."""
    depth, found = 0, []
    spans = [(m.start(), m) for m in re.finditer(pattern, masked, re.I)]
    k = 0
    for i, ch in enumerate(masked):
        while k < len(spans) and spans[k][0] == i:
            if depth == 0:
                found.append(spans[k][1])
            k += 1
        depth += ch == "("
        depth -= ch == ")"
    return found


def split_args(inner: str) -> list[str]:
    cuts = [m.start() for m in top_level(mask(inner), ",")]
    bounds = [-1] + cuts + [len(inner)]
    return [inner[a + 1:b].strip() for a, b in zip(bounds, bounds[1:])]


def rewrite_calls(sql: str, name: str, fn) -> str:
    """Replaces every call `name(...)` (not `x.name(`, not `other_name(`) by fn(its argument
    text, itself rewritten first: calls nest)."""
    pat = re.compile(r"(?<![\w.])" + name + r"\s*\(", re.I)
    masked = mask(sql)
    out, pos = [], 0
    while (m := pat.search(masked, pos)) is not None:
        open_at = m.end() - 1
        close = closing_paren(masked, open_at)
        out.append(sql[pos:m.start()])
        out.append(fn(rewrite_calls(sql[open_at + 1:close], name, fn)))
        pos = close + 1
    out.append(sql[pos:])
    return "".join(out)


def rewrite_code(sql: str, pattern: str, repl, flags=re.I) -> str:
    """re.sub of `pattern` over code only (not inside literals, quoted names or comments)."""
    masked = mask(sql)
    out, pos = [], 0
    for m in re.finditer(pattern, masked, flags):
        out.append(sql[pos:m.start()])
        out.append(repl(sql[m.start():m.end()]))
        pos = m.end()
    out.append(sql[pos:])
    return "".join(out)


# ---------------------------------------------------------------------------------------------
# The dialect: session settings and macros (the prelude), then the edits, in the order applied.

PRELUDE = r"""
-- DataFusion's `/` on two integers is integer division (DuckDB's `/` is float division);
-- integer / DOUBLE stays float division under this setting.
SET integer_division = true;
-- DataFusion sorts NULL as the largest value: last ascending, first descending (DuckDB: last both ways).
SET default_null_order = 'nulls_last_on_asc_first_on_desc';
-- Timestamps are UTC instants: to_char/strftime of one formats it in UTC, as DataFusion does.
SET TimeZone = 'UTC';
-- Nothing here depends on the order rows come out in; not keeping it saves memory.
SET preserve_insertion_order = false;
-- The four functions beyond standard SQL (ledger/src/udf.rs; epoch_ms and json_contains are DuckDB built-ins).
-- label: README's macro. (A labels text that is not JSON is an error here, null in the ledger.)
CREATE OR REPLACE MACRO label(j, k) AS json_extract_string(j, '$."' || k || '"');
-- quantity_units: a Kubernetes quantity in whole units, rounded up (fractions through a double).
CREATE OR REPLACE MACRO quantity_units(q) AS CAST(ceil(TRY_CAST(regexp_extract(q, '^([0-9]*\.?[0-9]+)', 1) AS DOUBLE)
    * CASE regexp_extract(q, '^[0-9]*\.?[0-9]+([A-Za-z]*)$', 1) WHEN '' THEN 1 WHEN 'm' THEN 0.001 WHEN 'k' THEN 1e3
      WHEN 'M' THEN 1e6 WHEN 'G' THEN 1e9 WHEN 'T' THEN 1e12 WHEN 'Ki' THEN 1024 WHEN 'Mi' THEN 1048576
      WHEN 'Gi' THEN 1073741824 WHEN 'Ti' THEN 1099511627776 END) AS BIGINT);
-- mig_sevenths: README's macro plus the UDF's 1..7 range and its `c.` prefix without digits.
CREATE OR REPLACE MACRO mig_sevenths(p) AS
    CASE WHEN TRY_CAST(regexp_extract(p, '^(?:[0-9]*c\.)?([0-9]+)g', 1) AS BIGINT) BETWEEN 1 AND 7
         THEN TRY_CAST(regexp_extract(p, '^(?:[0-9]*c\.)?([0-9]+)g', 1) AS BIGINT) END;
-- The money functions (ledger/src/udf/money.rs): the same integer arithmetic on HUGEINT. Money
-- is DECIMAL(38,6); __micros is an amount's micro-units, __money the amount of a count of
-- micro-units. DuckDB's // truncates toward zero and % takes the dividend's sign, as Rust's.
-- (x is made a DECIMAL first: an integer literal is an INT32 in DuckDB, and 10000 x 1000000
-- would overflow it.)
CREATE OR REPLACE MACRO __micros(x) AS CAST(CAST(x AS DECIMAL(38,6)) * 1000000 AS HUGEINT);
CREATE OR REPLACE MACRO __money(m) AS CAST(m AS DECIMAL(38,0)) * CAST(0.000001 AS DECIMAL(38,6));
-- n / d rounded half to even (d <> 0).
CREATE OR REPLACE MACRO __div_half_even(n, d) AS
    (CASE WHEN (n < 0) <> (d < 0) THEN -1 ELSE 1 END)
    * (abs(n) // abs(d) + CASE WHEN 2 * (abs(n) % abs(d)) > abs(d)
                                 OR (2 * (abs(n) % abs(d)) = abs(d) AND (abs(n) // abs(d)) % 2 = 1) THEN 1 ELSE 0 END);
-- n / d rounded toward negative infinity (d <> 0), and what it leaves (of d's sign).
CREATE OR REPLACE MACRO __div_floor(n, d) AS n // d - CASE WHEN n % d <> 0 AND (n % d < 0) <> (d < 0) THEN 1 ELSE 0 END;
CREATE OR REPLACE MACRO price_ns(ns, price) AS
    __money(__div_half_even(CAST(ns AS HUGEINT) * __micros(price), CAST(3600000000000 AS HUGEINT)));
CREATE OR REPLACE MACRO money_ratio(a, n, d) AS
    CASE WHEN __micros(d) <> 0 THEN __money(__div_half_even(__micros(a) * __micros(n), __micros(d))) END;
CREATE OR REPLACE MACRO share_floor(a, p, w) AS
    CASE WHEN CAST(w AS HUGEINT) <> 0 THEN __money(__div_floor(__micros(a) * CAST(p AS HUGEINT), CAST(w AS HUGEINT))) END;
CREATE OR REPLACE MACRO share_remainder(a, p, w) AS
    CASE WHEN CAST(w AS HUGEINT) <> 0
         THEN CAST(__micros(a) * CAST(p AS HUGEINT) - __div_floor(__micros(a) * CAST(p AS HUGEINT), CAST(w AS HUGEINT)) * CAST(w AS HUGEINT) AS DECIMAL(38,0)) END;
"""

# chrono (DataFusion to_char) -> strftime (DuckDB) format pieces that differ.
CHRONO_FORMATS = {"%.3f": ".%g", "%.6f": ".%f"}


def to_strftime(inner: str) -> str:
    args = split_args(inner)
    if len(args) != 2 or not re.fullmatch(r"'[^']*'", args[1]):
        raise ValueError(f"to_char({inner}): the format is not a literal")
    fmt = args[1]
    for chrono, duck in CHRONO_FORMATS.items():
        fmt = fmt.replace(chrono, duck)
    if re.search(r"%[.\d]", fmt):
        raise ValueError(f"to_char format {args[1]} has a chrono specifier this port does not map")
    return f"strftime({args[0]}, {fmt})"


def cast_truncating(inner: str) -> str:
    as_at = top_level(mask(inner), r"\bAS\b")
    if not as_at:
        raise ValueError(f"CAST({inner}) has no AS")
    expr, ty = inner[:as_at[-1].start()].strip(), inner[as_at[-1].end():].strip()
    if ty.upper() in ("BIGINT", "INT", "INTEGER") and not re.fullmatch(r"NULL|-?\d+", expr, re.I):
        return f"CAST(trunc({expr}) AS {ty})"
    return f"CAST({inner})"


# (what it handles, the edit). Applied to every statement, in this order.
EDITS = [
    # DataFusion's to_char(ts, chrono format) is DuckDB's strftime(ts, format) (same argument
    # order; chrono's `%.3f` is `.%g`). The timestamp is formatted in UTC (SET TimeZone).
    ("to_char -> strftime", lambda s: rewrite_calls(s, "to_char", to_strftime)),
    # to_timestamp_millis(ms) -> epoch_ms(ms): DuckDB's epoch_ms of an integer is the timestamp.
    ("to_timestamp_millis -> epoch_ms", lambda s: rewrite_calls(s, "to_timestamp_millis", lambda a: f"epoch_ms({a})")),
    # DataFusion's to_timestamp(text) parses RFC 3339; DuckDB's to_timestamp takes epoch seconds.
    ("to_timestamp(text) -> CAST(text AS TIMESTAMP)", lambda s: rewrite_calls(s, "to_timestamp", lambda a: f"CAST({a} AS TIMESTAMP)")),
    # A float cast to an integer is truncated by DataFusion (Arrow), rounded by DuckDB.
    ("CAST(float AS BIGINT) truncates", lambda s: rewrite_calls(s, "CAST", cast_truncating)),
    # `at` (a column of 20_runs.sql) is a keyword in DuckDB (AT TIME ZONE): quote it where it
    # stands alone (`t.at` parses as it is). Lower case only: the files write keywords in capitals.
    ("the name at is quoted", lambda s: rewrite_code(s, r"(?<![\w.])at(?!\w)", lambda t: f'"{t}"', flags=0)),
    # regexp_like(text, re) is DuckDB's regexp_matches (the patterns are anchored where it matters).
    ("regexp_like -> regexp_matches", lambda s: rewrite_calls(s, "regexp_like", lambda a: f"regexp_matches({a})")),
    # 1.5 is a Float64 in DataFusion, a DECIMAL in DuckDB (exact decimal arithmetic, DECIMAL
    # result columns): make each such literal a DOUBLE.
    ("decimal literals are DOUBLE", lambda s: rewrite_code(s, r"(?<![\w.])\d+\.\d+(?:e[-+]?\d+)?(?![\w.])", lambda t: f"CAST({t} AS DOUBLE)")),
]
# Not edited, because DuckDB already agrees: string_to_array (an alias of string_split), epoch_ms
# of a timestamp, json_contains (alike for the flat label objects 25_capacity.sql compares;
# DuckDB's also finds a scalar needle anywhere in the haystack, the UDF does not), INTERVAL
# '1 month', date_part('epoch', ...), SELECT * EXCLUDE, string_agg(... ORDER BY ...), unnest,
# strpos, chr, lpad, split_part, isnan, bool_or, regexp_replace with '\1', LEAST/GREATEST
# skipping NULLs, IS NOT DISTINCT FROM. SUM of integers is a HUGEINT in DuckDB (BIGINT in
# DataFusion): the derived tables are cast to their declared types when written.


def translate(statement: str) -> str:
    for _, edit in EDITS:
        statement = edit(statement)
    return statement


# ---------------------------------------------------------------------------------------------
# The store: live files of each Delta table.


def q(s: str | None) -> str:
    return "NULL" if s is None else "'" + str(s).replace("'", "''") + "'"


def ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def live_files(table_dir: Path) -> list[tuple[str, str]] | None:
    """[(absolute path, date partition value or '')] of the table's latest log version; None
    where the table has no log."""
    log = table_dir / "_delta_log"
    if not log.is_dir():
        if table_dir.is_dir() and any(table_dir.rglob("*.parquet")):
            raise SystemExit(f"duckdb_port: {table_dir} holds data files but no _delta_log (run `gpuledger store upgrade`)")
        return None
    names = os.listdir(log)
    commits = {int(n[:20]): n for n in names if re.fullmatch(r"\d{20}\.json", n)}
    parts: dict[int, list[str]] = {}
    for n in names:
        m = re.fullmatch(r"(\d{20})\.checkpoint(?:\.(\d{10})\.(\d{10}))?\.parquet", n)
        if m:
            parts.setdefault(int(m.group(1)), []).append(n)
    complete = {v: ps for v, ps in parts.items() if len(ps) == 1 and ".checkpoint.parquet" in ps[0] or (len(ps) > 1 and len(ps) == int(re.search(r"\.(\d{10})\.parquet$", ps[0]).group(1)))}
    start = -1
    hint = log / "_last_checkpoint"
    if hint.is_file():
        v = json.loads(hint.read_text()).get("version")
        if v in complete:
            start = v
    if start < 0 and complete:
        start = max(complete)
    files: dict[str, str | None] = {}
    if start >= 0:
        con = duckdb.connect()
        rows = con.execute(
            "SELECT add.path, add.partitionValues FROM read_parquet(?) WHERE add IS NOT NULL",
            [[str(log / p) for p in sorted(complete[start])]],
        ).fetchall()
        if con.execute("SELECT count(*) FROM (DESCRIBE SELECT * FROM read_parquet(?)) WHERE column_name = 'sidecar'", [[str(log / p) for p in complete[start]]]).fetchone()[0]:
            n = con.execute("SELECT count(sidecar) FROM read_parquet(?)", [[str(log / p) for p in complete[start]]]).fetchone()[0]
            if n:
                raise SystemExit(f"duckdb_port: {log}: v2 checkpoints with sidecars are not read by this port")
        for path, pv in rows:
            files[path] = (pv or {}).get("date")
    later = sorted(v for v in commits if v > start)
    if later and later != list(range(start + 1, later[-1] + 1)):
        raise SystemExit(f"duckdb_port: {log}: commits after version {start} are not contiguous")
    for v in later:
        for line in (log / commits[v]).read_text().splitlines():
            if not line.strip():
                continue
            action = json.loads(line)
            if "add" in action:
                a = action["add"]
                files[a["path"]] = (a.get("partitionValues") or {}).get("date")
            elif "remove" in action:
                files.pop(action["remove"]["path"], None)
    out = []
    for p, d in sorted(files.items()):
        u = urllib.parse.urlparse(p)
        if u.scheme and u.scheme != "file":
            raise SystemExit(f"duckdb_port: {log}: file {p} is not local")
        path = Path(urllib.parse.unquote(u.path)) if u.scheme else table_dir / urllib.parse.unquote(p)
        out.append((str(path), d or ""))
    return out


def parquet_list(paths: list[str]) -> str:
    return "[" + ", ".join(q(p) for p in paths) + "]"


def register_table_sql(con, store: Path, table: str, columns: list[tuple[str, str]]) -> tuple[str, list[str]]:
    """The statement registering one store table, and its days."""
    files = live_files(store / table)
    typed = ", ".join(f"{ident(c)} {t}" for c, t in columns)
    if not files:
        return f"CREATE TABLE {table} ({typed}, date VARCHAR)", []
    paths = [p for p, _ in files]
    have = {r[0]: r[1] for r in con.execute(f"DESCRIBE SELECT * FROM read_parquet({parquet_list(paths)}, union_by_name = true)").fetchall()}
    select = []
    for c, t in columns:
        if c not in have:
            select.append(f"CAST(NULL AS {t}) AS {ident(c)}")  # a column added after these files were written
        elif have[c].replace("TIMESTAMP WITH TIME ZONE", "TIMESTAMPTZ") != t:
            select.append(f"CAST({ident(c)} AS {t}) AS {ident(c)}")
        else:
            select.append(ident(c))
    cols = ", ".join(select)
    # The date of each file is its add action's partition value. Where every path says the same
    # (`date=<value>/...`, as the store writes them), DuckDB's Hive partitioning reads it off the path.
    if all(re.search(r"(^|/)date=" + re.escape(d) + r"/[^/]+$", p) for p, d in files if d) and all(d for _, d in files):
        return (f"CREATE VIEW {table} AS SELECT {cols}, date FROM read_parquet({parquet_list(paths)}, union_by_name = true, "
                f"hive_partitioning = true, hive_types = {{'date': VARCHAR}})"), sorted({d for _, d in files})
    by_day: dict[str, list[str]] = {}
    for p, d in files:
        by_day.setdefault(d, []).append(p)
    union = "\nUNION ALL ".join(f"SELECT {cols}, {q(d)} AS date FROM read_parquet({parquet_list(ps)}, union_by_name = true)" for d, ps in sorted(by_day.items()))
    return f"CREATE VIEW {table} AS {union}", sorted(by_day)


# ---------------------------------------------------------------------------------------------
# The configuration tables (ledger/src/settings.rs config_tables, defaults of config.rs).

DEFAULT_HARDWARE_XIDS = [48, 61, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120]


def table_sql(name: str, columns: list[tuple[str, str]], rows: list[tuple]) -> list[str]:
    out = [f"CREATE TABLE {name} ({', '.join(f'{ident(c)} {t}' for c, t in columns)})"]
    if rows:
        def lit(v, t):
            if v is None:
                return "NULL"
            if t == "VARCHAR":
                return q(v)
            if isinstance(v, Decimal):
                return f"CAST('{v}' AS {t})"  # the decimal's text: exact
            return f"CAST({v!r} AS {t})"
        vals = ",\n    ".join("(" + ", ".join(lit(v, t) for v, (_, t) in zip(r, columns)) + ")" for r in rows)
        out.append(f"INSERT INTO {name} VALUES\n    {vals}")
    return out


def read_units(path: Path) -> list[tuple]:
    want = ["month", "team", "unit", "accepted_units"]
    if path.suffix.lower() == ".parquet":
        rows = duckdb.connect().execute(f"SELECT month, team, unit, CAST(accepted_units AS DOUBLE) FROM read_parquet({q(str(path))})").fetchall()
        return [tuple(r) for r in rows]
    text = path.read_text(encoding="utf-8-sig")
    lines = [ln for ln in text.splitlines() if ln.strip()]
    reader = csv.reader(lines, skipinitialspace=True)
    header = [h.strip() for h in next(reader)]
    pos = [header.index(c) for c in want]
    return [(r[pos[0]].strip(), r[pos[1]].strip(), r[pos[2]].strip(), float(r[pos[3]])) for r in reader]


def money(value) -> Decimal:
    """A configured amount as config.rs `Money::from_f64` reads it: the number as written (the
    float's shortest spelling), at most 6 decimals."""
    d = Decimal(repr(float(value)))
    if d != d.quantize(Decimal("0.000001")):
        raise SystemExit(f"duckdb_port: amount {value} has more than 6 decimals")
    return d.quantize(Decimal("0.000001"))


def config_sql(config_path: Path) -> list[str]:
    cfg = tomllib.loads(config_path.read_text())
    a = cfg.get("accounting", {})
    prices = cfg.get("prices", {})
    if "default" not in prices:
        raise SystemExit(f"duckdb_port: {config_path}: prices.default is required")
    energy = cfg.get("energy", {})
    out = []
    out += table_sql("settings", [
        ("team_label", "VARCHAR"), ("idle_policy", "VARCHAR"), ("active_threshold_engine", "DOUBLE"), ("active_threshold_util", "DOUBLE"),
        ("max_gap_factor", "DOUBLE"), ("default_price", "DECIMAL(38,6)"), ("currency", "VARCHAR"), ("hardware_failures", "VARCHAR"),
        ("preemptions", "VARCHAR"), ("pue", "DOUBLE"), ("grid_gco2_per_kwh", "DOUBLE"), ("anomaly_k", "DOUBLE"),
        ("sharing", "VARCHAR"), ("dra_capacity_key", "VARCHAR"),
    ], [(
        a.get("team_label", "team"), a.get("idle_policy", "platform"), float(a.get("active_threshold_engine", 0.05)),
        float(a.get("active_threshold_util", 5.0)), float(a.get("max_gap_factor", 2.5)), money(prices["default"]),
        a.get("currency", "USD"), a.get("hardware_failures", "platform"), a.get("preemptions", "team"),
        float(energy.get("pue", 1.0)), None if energy.get("grid_gco2_per_kwh") is None else float(energy["grid_gco2_per_kwh"]),
        float(cfg.get("anomalies", {}).get("k", 3.0)), a.get("sharing", "even"), a.get("dra_capacity_key", "memory"),
    )])
    gpu_classes = a.get("gpu_device_classes", ["gpu.nvidia.com"])
    out += table_sql("gpu_device_classes", [("device_class", "VARCHAR")], [(c,) for c in gpu_classes])
    mapped = sorted({m["name"] for m in a.get("device_class_mappings", []) if m["name"] != "nvidia.com/gpu" and set(m["device_class_names"]) & set(gpu_classes)})
    out += table_sql("gpu_resource_names", [("resource", "VARCHAR")], [(n,) for n in mapped])
    # Label keys in file order, each key's values in file order (TOML tables keep it in Python).
    by_label = [(k, v, money(p)) for k, values in prices.get("by_node_label", {}).items() for v, p in values.items()]
    out += table_sql("price_by_node_label", [("rank", "BIGINT"), ("label_key", "VARCHAR"), ("label_value", "VARCHAR"), ("price", "DECIMAL(38,6)")],
                     [(i, k, v, p) for i, (k, v, p) in enumerate(by_label)])
    out += table_sql("price_by_model", [("model_name", "VARCHAR"), ("price", "DECIMAL(38,6)")], sorted((m, money(p)) for m, p in prices.get("by_model", {}).items()))
    overheads = [(o["month"], o.get("team"), c, money(o.get(c, 0))) for o in cfg.get("overheads", [])
                 for c in ("network", "storage", "support", "operations") if money(o.get(c, 0)) != 0]
    out += table_sql("overheads", [("month", "VARCHAR"), ("team", "VARCHAR"), ("component", "VARCHAR"), ("amount", "DECIMAL(38,6)")], overheads)
    units = [r for f in cfg.get("units", {}).get("files", []) for r in read_units(config_path.parent / f)]
    out += table_sql("extra_units", [("month", "VARCHAR"), ("team", "VARCHAR"), ("unit", "VARCHAR"), ("accepted_units", "DOUBLE")], units)
    out += table_sql("hardware_xids", [("xid", "BIGINT")], [(int(x),) for x in a.get("hardware_xids", DEFAULT_HARDWARE_XIDS)])
    out += table_sql("budgets", [("team", "VARCHAR"), ("month", "VARCHAR"), ("amount", "DECIMAL(38,6)")],
                     [(b["team"], b.get("month"), money(b["amount"])) for b in cfg.get("budgets", [])])
    out += table_sql("quota_owners", [("cluster_queue", "VARCHAR"), ("team", "VARCHAR")],
                     [(o["cluster_queue"], o["team"]) for o in cfg.get("quota", {}).get("owners", [])])
    counters = []
    for c in cfg.get("units", {}).get("counters", []):
        # The scale as the loader writes it: the shortest decimal, as numerator / 10^decimals.
        digits = format(decimal.Decimal(repr(float(c.get("scale", 1.0)))).normalize(), "f")
        whole, _, decimals = digits.partition(".")
        label = op = value = None
        if "match" in c:
            m = re.fullmatch(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"(.*)"\s*', c["match"])
            if not m:
                raise ValueError(f"units.counters match {c['match']!r} is not a label matcher")
            label, op, value = m.groups()
            if op.endswith("~"):
                value = f"^(?:{value})$"
        counters.append((c["metric"], c["unit"], int(whole + decimals), 10 ** len(decimals), label, op, value))
    out += table_sql("unit_counters", [("metric", "VARCHAR"), ("unit", "VARCHAR"), ("scale_numerator", "BIGINT"), ("scale_denominator", "BIGINT"),
                                       ("match_label", "VARCHAR"), ("match_op", "VARCHAR"), ("match_value", "VARCHAR")], counters)
    return out


def calendar_sql(days: list[str]) -> list[str]:
    nums = sorted((date.fromisoformat(d) - date(1970, 1, 1)).days for d in days if re.fullmatch(r"\d{4}-\d{2}-\d{2}", d))
    if not nums:
        return ["CREATE TABLE calendar_days (day_number BIGINT)", "CREATE TABLE calendar_hours (hour_number BIGINT)"]
    a, b = nums[0] - 1, nums[-1] + 1
    return [f"CREATE TABLE calendar_days AS SELECT range AS day_number FROM range({a}, {b + 1})",
            f"CREATE TABLE calendar_hours AS SELECT range AS hour_number FROM range({a * 24}, {(b + 1) * 24})"]


# ---------------------------------------------------------------------------------------------
# The run, as Accounting::run_at_once.


@dataclass
class Plan:
    work: Path = Path(".")  # scratch files (what pass 1 carries to pass 2)
    steps: list[tuple[str, str]] = field(default_factory=list)  # (step, statement)
    kinds: dict[str, str] = field(default_factory=dict)  # name -> 'view' | 'table'

    def add(self, step: str, sql: str):
        self.steps.append((step, sql))

    def exec_file(self, ledger: LedgerPlan, name: str, provided: dict[str, str] | None = None):
        """steps.rs exec_file: each statement (a view); the plan's keeps kept as tables; the views
        in `provided` read the table given instead (what pass 1 carried)."""
        for statement in split_statements((QUERIES / name).read_text()):
            view = created_view(statement)
            if view and provided and view in provided:
                self.read_from(name, view, provided[view])
                continue
            if view and self.kinds.get(view) == "table":
                self.add(name, f"DROP TABLE {view}")
            self.add(name, translate(statement))
            if view:
                self.kinds[view] = "view"
                if view in ledger.object_tables + ledger.capacity_tables + ledger.reused_views + ledger.reported_tables:
                    self.materialise(name, view)

    def materialise(self, step: str, name: str, source: str | None = None):
        """Keeps `source` (by default the view `name` itself) as the table `name`."""
        step = f"{step} keep {name}"
        if source is None or source == name:
            self.add(step, f"CREATE TABLE __materialised AS SELECT * FROM {name}")
            self.add(step, f"DROP {'VIEW' if self.kinds.get(name) == 'view' else 'TABLE'} {name}")
            self.add(step, f"ALTER TABLE __materialised RENAME TO {name}")
        else:
            if name in self.kinds:
                self.add(step, f"DROP {'VIEW' if self.kinds[name] == 'view' else 'TABLE'} {name}")
            self.add(step, f"CREATE TABLE {name} AS SELECT * FROM {source}")
        self.kinds[name] = "table"


    def gather(self, step: str, acc: str, source: str):
        """Adds `source`'s rows to the table `acc` (created by the first day): a day's result,
        gathered over the days as the ledger reads its day tables."""
        if acc in self.kinds:
            self.add(step, f"INSERT INTO {acc} SELECT * FROM {source}")
        else:
            self.add(step, f"CREATE TABLE {acc} AS SELECT * FROM {source}")
            self.kinds[acc] = "table"

    def keep_filtered(self, step: str, name: str, where: str):
        """Keeps the rows of the view `name` that `where` selects as the table `name`."""
        self.add(f"{step} keep {name}", f"CREATE TABLE __materialised AS SELECT * FROM {name} WHERE {where}")
        self.add(f"{step} keep {name}", f"DROP {'VIEW' if self.kinds.get(name) == 'view' else 'TABLE'} {name}")
        self.add(f"{step} keep {name}", f"ALTER TABLE __materialised RENAME TO {name}")
        self.kinds[name] = "table"

    def read_from(self, step: str, name: str, table: str):
        """Makes `name` read the table `table` (what the ledger keeps under that name)."""
        if name in self.kinds:
            self.add(step, f"DROP {'VIEW' if self.kinds[name] == 'view' else 'TABLE'} {name}")
        self.add(step, f"CREATE VIEW {name} AS SELECT * FROM {table}")
        self.kinds[name] = "view"


# The store's gpu_samples, all days; `gpu_samples` is narrowed to one day's pass at a time.
ALL_SAMPLES = "__gpu_samples_all"


def day_number(day: str) -> int:
    return (date.fromisoformat(day) - date(1970, 1, 1)).days


def narrow_samples(p: Plan, day: str):
    """accounting.rs narrow_samples: the day's partition and the day before's, from 1000 ms
    before midnight (LOOKBEHIND_MS) to the next midnight."""
    start = date.fromisoformat(day)
    prev = date.fromordinal(start.toordinal() - 1)
    nxt = date.fromordinal(start.toordinal() + 1)
    p.read_from(f"day {day}", "gpu_samples",
                f"{ALL_SAMPLES} WHERE date IN ({q(prev.isoformat())}, {q(day)}) "
                f"AND ts >= TIMESTAMPTZ {q(prev.isoformat() + ' 23:59:59+00')} AND ts < TIMESTAMPTZ {q(nxt.isoformat() + ' 00:00:00+00')}")


def sample_steps_per_day(p: Plan, ledger: LedgerPlan, days: list[str]):
    """The sample steps one day at a time, as Accounting::run does for a store (every day
    computed, one unit a day): pass 1, last day first, gathers each day's first observations,
    last XIDs, active bounds and spacing counts, and keeps the day's pod samples and observation
    starts for pass 2 (plan.rs `carries`); pass 2 computes each day's spans, states and rollups
    with the month's spacing counts, and gathers them for the monthly steps."""
    carried = [v for v in ledger.reused_views if v in ("pod_samples", "observation_starts")]
    for d in reversed(days):
        n = day_number(d)
        narrow_samples(p, d)
        p.exec_file(ledger, "30_observations.sql")
        step = f"pass 1 {d}"
        for v in carried:
            # As the ledger: written to the run's scratch directory, read back by pass 2.
            path = p.work / "carried" / f"{v}_{n}.parquet"
            path.parent.mkdir(parents=True, exist_ok=True)
            p.add(step, f"COPY (SELECT * FROM {v}) TO {q(str(path))} (FORMAT PARQUET, COMPRESSION lz4_raw)")
        p.gather(step, "__acc_known_day_starts", f"day_first_starts WHERE day_number = {n}")
        p.gather(step, "__acc_known_day_last_xids", f"day_last_xids WHERE day_number = {n}")
        p.gather(step, "__acc_known_active_bounds", f"day_active_bounds WHERE day_number = {n}")
        if p.kinds.get("known_day_starts") != "view":
            p.read_from(step, "known_day_starts", "__acc_known_day_starts")
        p.exec_file(ledger, "31_intervals.sql")
        p.gather(step, "__acc_spacing_counts", f"spacing_counts WHERE day_number = {n}")
    p.read_from("pass 1", "known_day_last_xids", "__acc_known_day_last_xids")
    p.read_from("pass 1", "known_active_bounds", "__acc_known_active_bounds")
    for d in days:
        n = day_number(d)
        narrow_samples(p, d)
        p.exec_file(ledger, "30_observations.sql", provided={v: f"read_parquet({q(str(p.work / 'carried' / f'{v}_{n}.parquet'))})" for v in carried})
        p.exec_file(ledger, "31_intervals.sql")
        step = f"pass 2 {d}"
        p.read_from(step, "spacing_counts", "__acc_spacing_counts")
        p.exec_file(ledger, "32_spans.sql")
        p.keep_filtered("32_spans.sql", "sample_spans", f"date = {q(d)}")
        p.gather(step, "__acc_xid_errors", f"xid_errors WHERE day_number = {n}")
        p.exec_file(ledger, "40_states.sql")
        for t in ledger.per_day_tables:
            p.gather(step, f"__acc_{t}", t)
        p.exec_file(ledger, "45_hourly.sql")
        for t in ledger.rollup_tables:
            p.gather(step, f"__acc_{t}", f"{t} WHERE date = {q(d)}")
    for t in ledger.per_day_tables + ledger.rollup_tables + ["xid_errors"]:
        p.read_from("gathered", t, f"__acc_{t}")


def build_plan(ledger: LedgerPlan, con, store: Path, config: Path, per_day: bool = True, work: Path = Path(".")) -> tuple[Plan, list[str]]:
    p = Plan(work=work)
    for s in split_statements(PRELUDE):
        p.add("prelude", s)
    days: list[str] = []
    for table, columns in raw_schemas().items():
        sql, d = register_table_sql(con, store, table, columns)
        if table == "gpu_samples":
            days = [x for x in d if re.fullmatch(r"\d{4}-\d{2}-\d{2}", x)]
            if per_day and days:
                sql = re.sub(r"^CREATE (VIEW|TABLE) gpu_samples\b", lambda m: f"CREATE {m.group(1)} {ALL_SAMPLES}", sql)
                table = ALL_SAMPLES
        p.add("inputs", sql)
        p.kinds[table] = "view" if sql.startswith("CREATE VIEW") else "table"
    for s in config_sql(config):
        p.add("config", s)
    # object_steps
    p.exec_file(ledger, "10_objects.sql")
    p.exec_file(ledger, "20_runs.sql")
    p.exec_file(ledger, "25_capacity.sql")
    for s in calendar_sql(days):
        p.add("calendar", s)
    if per_day and days:
        sample_steps_per_day(p, ledger, days)
    else:
        sample_steps_at_once(p, ledger)
    # monthly_steps
    for f in ledger.monthly_files:
        p.exec_file(ledger, f)
    p.exec_file(ledger, "90_reports.sql")
    done = {f for f, _ in p.steps}
    skipped = [f for f in ledger.query_files if f not in done]
    if skipped:
        raise SystemExit(f"duckdb_port: query files this port does not run: {skipped}")
    return p, days


def sample_steps_at_once(p: Plan, ledger: LedgerPlan):
    """The sample steps over every day at once, as Accounting::run_at_once (sample_and_monthly_steps)."""
    p.exec_file(ledger, "30_observations.sql")
    p.materialise("30_observations.sql", "known_day_starts", "day_first_starts")
    p.materialise("30_observations.sql", "known_day_last_xids", "day_last_xids")
    p.materialise("30_observations.sql", "known_active_bounds", "day_active_bounds")
    p.exec_file(ledger, "31_intervals.sql")
    p.materialise("31_intervals.sql", "spacing_counts")
    p.exec_file(ledger, "32_spans.sql")
    p.materialise("32_spans.sql", "sample_spans")
    p.exec_file(ledger, "40_states.sql")
    p.exec_file(ledger, "45_hourly.sql")
    for t in ledger.per_day_tables + ledger.rollup_tables + ["xid_errors"]:
        p.materialise("45_hourly.sql", t)


def write_sql(path: Path, steps: list[tuple[str, str]], header: str, mode: str = "w"):
    with open(path, mode) as f:
        if header:
            f.write(header)
        last = None
        for step, sql in steps:
            if step != last:
                f.write(f"\n-- {step}\n")
                last = step
            f.write(sql.rstrip() + ";\n")


def copy_statements(con, ledger: LedgerPlan, out: Path) -> tuple[list[tuple[str, str]], list[str]]:
    declared = derived_schemas()
    steps, warnings = [], []
    for t in ledger.derived_tables:
        have = [r[0] for r in con.execute(f"DESCRIBE {t}").fetchall()]
        cols = declared.get(t)
        if cols and [c for c, _ in cols] == have:
            select = ", ".join(f"CAST({ident(c)} AS {ty}) AS {ident(c)}" for c, ty in cols)
        else:
            warnings.append(f"{t}: columns {have} are not those schemas/src/derived.rs declares {[c for c, _ in cols or []]}: written as computed")
            select = "*"
        steps.append(("write", f"COPY (SELECT {select} FROM {t}) TO {q(str(out / (t + '.parquet')))} (FORMAT parquet)"))
    return steps, warnings


# ---------------------------------------------------------------------------------------------
# Comparison with the ledger's tables.

FLOAT_TYPES = ("DOUBLE", "FLOAT", "REAL")

def compare_table(con, ours: Path, ref: Path, tol: float = 1e-9) -> dict:
    res: dict = {"ours_rows": None, "ref_rows": None}
    if not ref.is_file():
        res.update(agree=False, error=f"{ref} is missing")
        return res
    a_cols = con.execute(f"DESCRIBE SELECT * FROM read_parquet({q(str(ours))})").fetchall()
    b_cols = con.execute(f"DESCRIBE SELECT * FROM read_parquet({q(str(ref))})").fetchall()
    res["ours_rows"] = con.execute(f"SELECT count(*) FROM read_parquet({q(str(ours))})").fetchone()[0]
    res["ref_rows"] = con.execute(f"SELECT count(*) FROM read_parquet({q(str(ref))})").fetchone()[0]
    a_names, b_types = [c[0] for c in a_cols], {c[0]: c[1] for c in b_cols}
    common = [c for c in a_names if c in b_types]
    if a_names != [c[0] for c in b_cols]:
        res["columns_differ"] = {"ours": a_names, "ref": [c[0] for c in b_cols]}
    a_types = {c[0]: c[1] for c in a_cols}
    floats = [c for c in common if a_types[c] in FLOAT_TYPES or b_types[c] in FLOAT_TYPES]
    keys = [c for c in common if c not in floats]
    sel = ", ".join(ident(c) for c in common)
    part = ("PARTITION BY " + ", ".join(ident(c) for c in keys)) if keys else ""
    order = ("ORDER BY " + ", ".join(ident(c) for c in floats)) if floats else ""
    on = " AND ".join([f"a.{ident(c)} IS NOT DISTINCT FROM b.{ident(c)}" for c in keys] + ["a.__k = b.__k"])
    close = " AND ".join(
        f"((a.{ident(c)} IS NULL AND b.{ident(c)} IS NULL) OR a.{ident(c)} = b.{ident(c)} OR "
        f"abs(a.{ident(c)} - b.{ident(c)}) <= greatest({tol}, {tol} * greatest(abs(a.{ident(c)}), abs(b.{ident(c)}))))"
        for c in floats) or "true"
    pick = ", ".join(f"a.{ident(c)} AS {ident('a.' + c)}, b.{ident(c)} AS {ident('b.' + c)}" for c in common)
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE __cmp AS
        WITH a AS (SELECT {sel}, row_number() OVER ({part} {order}) AS __k FROM read_parquet({q(str(ours))})),
             b AS (SELECT {sel}, row_number() OVER ({part} {order}) AS __k FROM read_parquet({q(str(ref))}))
        SELECT CASE WHEN a.__k IS NULL THEN 'ref_only' WHEN b.__k IS NULL THEN 'ours_only'
                    WHEN {close} THEN 'ok' ELSE 'float' END AS status, {pick}
        FROM a FULL OUTER JOIN b ON {on}""")
    counts = dict(con.execute("SELECT status, count(*) FROM __cmp GROUP BY status").fetchall())
    res["ours_only"], res["ref_only"], res["float_mismatch"] = counts.get("ours_only", 0), counts.get("ref_only", 0), counts.get("float", 0)
    res["differing_rows"] = res["ours_only"] + res["float_mismatch"]
    res["agree"] = res["differing_rows"] == 0 and res["ref_only"] == 0 and "columns_differ" not in res
    examples = {}
    for status, side in (("float", None), ("ours_only", "a."), ("ref_only", "b.")):
        if counts.get(status):
            cur = con.execute(f"SELECT * EXCLUDE (status) FROM __cmp WHERE status = '{status}' ORDER BY ALL LIMIT 1")
            row = dict(zip([d[0] for d in cur.description], cur.fetchone()))
            if side:
                row = {k[2:]: v for k, v in row.items() if k.startswith(side)}
            else:
                row = {c: (row["a." + c], row["b." + c]) if row["a." + c] != row["b." + c] else row["a." + c] for c in common}
            examples[status] = {k: (v if isinstance(v, (int, float, str, bool, type(None), tuple)) else str(v)) for k, v in row.items()}
    if examples:
        res["first_difference"] = examples
    con.execute("DROP TABLE __cmp")
    return res


# ---------------------------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0] + " Generates DuckDB SQL from queries/*.sql (see the EDITS list in this file), "
        "runs it over a gpuledger store and compares each derived table with the one `gpuledger ledger` wrote.",
        epilog="Example: python3 bench/duckdb_port.py --store /tmp/duck/store --config examples/gpuledger.toml --out /tmp/duck/out. "
        "Writes <out>/ledger_duckdb.sql (the generated SQL), <out>/<table>.parquet per derived table and <out>/duckdb_compare.json "
        "(per-table results, timings). Exit 0: every table agrees; 1: some table differs; 2: an error.",
    )
    ap.add_argument("--store", required=True, type=Path, help="store directory (one directory per table, each a Delta table)")
    ap.add_argument("--config", required=True, type=Path, help="the gpuledger TOML configuration `gpuledger ledger` ran with")
    ap.add_argument("--out", required=True, type=Path, help="output directory (created): generated SQL, derived tables, comparison")
    ap.add_argument("--threads", type=int, help="DuckDB threads (default: DuckDB's, the CPU count)")
    ap.add_argument("--memory-limit", help="DuckDB memory_limit, e.g. 2GB (default: DuckDB's, 80%% of RAM); spills to <out>/duckdb.tmp")
    ap.add_argument("--database", default=":memory:", help="DuckDB database file for the intermediate tables (default: in memory)")
    ap.add_argument("--no-compare", action="store_true", help="run and write the derived tables, do not compare them")
    ap.add_argument("--progress", action="store_true", help="print each step's time on stderr as it ends")
    ap.add_argument("--sql-only", action="store_true", help="only generate <out>/ledger_duckdb.sql (the input registration needs the store)")
    ap.add_argument("--at-once", action="store_true", help="the sample steps over every day at once (Accounting::run_at_once), not a day at a time")
    args = ap.parse_args()

    args.out.mkdir(parents=True, exist_ok=True)
    ledger = read_ledger_plan()
    load_before = os.getloadavg()
    t0 = time.monotonic()
    con = duckdb.connect(args.database)
    settings = [f"SET temp_directory = {q(str(args.out / 'duckdb.tmp'))}"]
    if args.threads:
        settings.append(f"SET threads = {args.threads}")
    if args.memory_limit:
        settings.append(f"SET memory_limit = {q(args.memory_limit)}")
    for s in settings:
        con.execute(s)
    plan, days = build_plan(ledger, con, args.store.resolve(), args.config.resolve(), per_day=not args.at_once, work=(args.out / "work").resolve())
    plan.steps[:0] = [("settings", s) for s in settings]
    sql_path = args.out / "ledger_duckdb.sql"
    how = "Accounting::run_at_once runs it (every day at once)" if args.at_once else "Accounting::run runs it (a day at a time)"
    header = (f"-- Generated by bench/duckdb_port.py from queries/*.sql: the ledger's accounting in DuckDB's dialect, run as\n"
              f"-- {how}. Store {args.store}, configuration {args.config}. Do not edit: regenerate.\n"
              f"-- Edits applied to every statement of queries/: {'; '.join(e for e, _ in EDITS)}.\n")
    write_sql(sql_path, plan.steps, header)
    if args.sql_only:
        print(f"wrote {sql_path}")
        return 0

    timings: dict[str, float] = {}
    register_s = time.monotonic() - t0
    t_run = time.monotonic()
    for i, (step, sql) in enumerate(plan.steps):
        if step == "settings":
            continue
        ts = time.monotonic()
        try:
            con.execute(sql)
        except duckdb.Error as e:
            print(f"duckdb_port: {step}: {e}\n--- statement:\n{sql}", file=sys.stderr)
            return 2
        timings[step] = timings.get(step, 0.0) + time.monotonic() - ts
        if args.progress and (i + 1 == len(plan.steps) or plan.steps[i + 1][0] != step):
            print(f"[{time.monotonic() - t0:7.1f} s] {step}: {timings[step]:.2f} s", file=sys.stderr, flush=True)
    steps_s = time.monotonic() - t_run
    copies, warnings = copy_statements(con, ledger, args.out)
    write_sql(sql_path, copies, "", mode="a")
    t_write = time.monotonic()
    for _, sql in copies:
        con.execute(sql)
    write_s = time.monotonic() - t_write
    run_s = time.monotonic() - t0
    rss_run_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    for w in warnings:
        print(f"warning: {w}", file=sys.stderr)
    print(f"DuckDB {duckdb.__version__} run: {run_s:.1f} s (inputs and plan {register_s:.1f} s, steps {steps_s:.1f} s, writes {write_s:.1f} s), "
          f"peak RSS so far {rss_run_mib} MiB; {len(days)} days of samples; load average {load_before[0]:.1f} before, {os.getloadavg()[0]:.1f} after")
    for step, s in timings.items():
        print(f"  {step:44} {s:8.2f} s")
    report = {
        "store": str(args.store), "config": str(args.config), "duckdb_version": duckdb.__version__,
        "threads": con.execute("SELECT current_setting('threads')").fetchone()[0],
        "memory_limit": con.execute("SELECT current_setting('memory_limit')").fetchone()[0],
        "days": len(days), "sample_steps": "at once" if args.at_once else "per day", "run_seconds": round(run_s, 3), "inputs_and_plan_seconds": round(register_s, 3),
        "steps_seconds": round(steps_s, 3), "write_seconds": round(write_s, 3),
        "step_seconds": {k: round(v, 3) for k, v in timings.items()}, "peak_rss_mib_after_run": rss_run_mib,
        "edits": [e for e, _ in EDITS], "warnings": warnings,
        # Other work on the machine slows the run down: the load averages (1, 5, 15 min) before and after it.
        "load_average_before": load_before, "load_average_after_run": os.getloadavg(),
    }
    status = 0
    if not args.no_compare:
        con.close()
        cmp = duckdb.connect()
        if args.threads:
            cmp.execute(f"SET threads = {args.threads}")
        if args.memory_limit:
            cmp.execute(f"SET memory_limit = {q(args.memory_limit)}")
        cmp.execute(f"SET temp_directory = {q(str(args.out / 'duckdb.tmp'))}")
        cmp.execute("SET TimeZone = 'UTC'")
        t_cmp = time.monotonic()
        tables = {}
        for t in ledger.derived_tables:
            r = compare_table(cmp, args.out / f"{t}.parquet", args.store / "ledger" / f"{t}.parquet")
            verdict = "agree" if r["agree"] else "DIFFER"
            tables[t] = r
            line = f"{t:24} ours {r['ours_rows']!s:>9}  ledger {r['ref_rows']!s:>9}  differing {r.get('differing_rows', '-')!s:>7}"
            if r.get("ref_only"):
                line += f" (+{r['ref_only']} ledger rows unmatched)"
            print(f"{line}  {verdict}")
            if r.get("error"):
                print(f"    {r['error']}")
            if r.get("columns_differ"):
                print(f"    columns differ: {r['columns_differ']}")
            for kind, row in r.get("first_difference", {}).items():
                print(f"    first {kind}: {row}")
        report["compare_seconds"] = round(time.monotonic() - t_cmp, 3)
        report["tables"] = tables
        report["all_agree"] = all(r["agree"] for r in tables.values())
        status = 0 if report["all_agree"] else 1
        print(f"compare: {report['compare_seconds']:.1f} s; {'every table agrees' if status == 0 else 'some tables differ'}")
    report["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    (args.out / "duckdb_compare.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    return status


if __name__ == "__main__":
    sys.exit(main())
