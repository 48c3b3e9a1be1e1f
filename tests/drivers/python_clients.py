"""Python's PostgreSQL clients against `gpuledger serve`, driven by tests/it/drivers.rs.

Usage: python_clients.py <port> <password>, with a JSON job on stdin:

  {"statements": [sql, ...],          # run through every text-result driver, rows as text
   "cases": [{"name", "sql", "params"}, ...],   # parameterised, every driver, first cell back
   "cancel": sql}                     # a statement that runs until it is cancelled

It prints one JSON object: for each driver, what each statement and case returned (or the
error it raised), and what cancelling did. It judges nothing: the Rust test compares the
answers with psql's and with each other.

Parameters are written `$1` in `sql`; for the drivers that take `%s` they are rewritten.
A parameter is a JSON string, number, null or list, or {"timestamptz": "<RFC 3339>"}.
"""

import asyncio
import datetime
import json
import re
import sys
import threading
import time

PORT, PASSWORD = int(sys.argv[1]), sys.argv[2]
USER, DB = "grafana", "datafusion"


def py_params(params):
    out = []
    for p in params:
        if isinstance(p, dict) and "timestamptz" in p:
            out.append(datetime.datetime.fromisoformat(p["timestamptz"]))
        else:
            out.append(p)
    return out


def percent(sql):
    """$n placeholders as %s, in order of n (every case uses each once, in order)."""
    return re.sub(r"\$\d+", "%s", sql)


def cell(v):
    """A value as JSON can carry it, with its kind: instants in UTC."""
    if isinstance(v, datetime.datetime):
        if v.tzinfo is None:
            return {"naive": v.isoformat()}
        return {"instant": v.astimezone(datetime.timezone.utc).isoformat()}
    if isinstance(v, (int, float, str, bool)) or v is None:
        return v
    return str(v)


def text(v):
    """A cell as psql prints it in CSV: the server's text, null as empty."""
    if v is None:
        return ""
    return v if isinstance(v, str) else str(v)


def error(e):
    return {"error": f"{type(e).__name__}: {e}".strip()}


# --- psycopg 3 ---------------------------------------------------------------------------

def psycopg_connect(**kw):
    import psycopg
    return psycopg.connect(host="127.0.0.1", port=PORT, user=USER, password=PASSWORD, dbname=DB, **kw)


def raw_text(conn):
    """Every column loaded as the text the server sent, to compare with psql's."""
    import psycopg
    from psycopg.adapt import Loader

    class Raw(Loader):
        def load(self, data):
            return bytes(data).decode()

    for oid in (16, 20, 21, 23, 25, 700, 701, 1043, 1082, 1114, 1184, 1186, 1700, 1009, 1016, 1007, 705, 19):
        conn.adapters.register_loader(oid, Raw)


def psycopg_rows(statements, cursor_kind):
    import psycopg
    out = []
    with psycopg_connect() as conn:
        raw_text(conn)
        for i, sql in enumerate(statements):
            try:
                if cursor_kind == "client":
                    cur = psycopg.ClientCursor(conn)
                elif cursor_kind == "named":
                    cur = conn.cursor(name=f"panel_{i}")
                else:
                    cur = conn.cursor()
                cur.execute(sql)
                rows = []
                while True:
                    chunk = cur.fetchmany(50)
                    if not chunk:
                        break
                    rows.extend([text(v) for v in r] for r in chunk)
                header = [d.name for d in cur.description]
                cur.close()
                out.append({"header": header, "rows": rows})
            except Exception as e:  # noqa: BLE001 - reported, the next statement goes on
                out.append(error(e))
                conn.rollback()
            if cursor_kind == "named":
                conn.commit()
    return out


def psycopg_cases(cases, binding):
    import psycopg
    out = []
    with psycopg_connect(autocommit=True) as conn:
        for case in cases:
            try:
                cur = psycopg.ClientCursor(conn) if binding == "client" else conn.cursor()
                cur.execute(percent(case["sql"]), py_params(case["params"]))
                row = cur.fetchone()
                out.append({"value": cell(row[0]), "type_oid": cur.description[0].type_code, "rows": 1 + len(cur.fetchall())})
            except Exception as e:  # noqa: BLE001
                out.append(error(e))
    return out


def psycopg_cancel(sql):
    """Cancels a runaway statement from another thread, then runs SELECT 1 on the connection."""
    import psycopg
    with psycopg_connect(autocommit=True) as conn:
        timer = threading.Timer(1.0, conn.cancel)
        started = time.monotonic()
        timer.start()
        try:
            conn.execute(sql).fetchall()
            outcome = {"finished": True}
        except psycopg.errors.QueryCanceled as e:
            outcome = {"cancelled": str(e).strip(), "sqlstate": e.sqlstate}
        except Exception as e:  # noqa: BLE001
            outcome = error(e)
        outcome["seconds"] = round(time.monotonic() - started, 3)
        outcome["next"] = conn.execute("SELECT 1").fetchone()[0]
        return outcome


# --- psycopg2 ----------------------------------------------------------------------------

def psycopg2_connect():
    import psycopg2
    return psycopg2.connect(host="127.0.0.1", port=PORT, user=USER, password=PASSWORD, dbname=DB)


def psycopg2_cases(cases):
    out = []
    conn = psycopg2_connect()
    conn.autocommit = True
    for case in cases:
        try:
            cur = conn.cursor()
            cur.execute(percent(case["sql"]), py_params(case["params"]))
            rows = cur.fetchall()
            out.append({"value": cell(rows[0][0]), "type_oid": cur.description[0].type_code, "rows": len(rows)})
        except Exception as e:  # noqa: BLE001
            out.append(error(e))
    conn.close()
    return out


def psycopg2_rows(statements):
    import psycopg2.extensions as ext
    raw = ext.new_type((16, 20, 21, 23, 25, 700, 701, 1043, 1082, 1114, 1184, 1186, 1700), "RAW", lambda v, cur: v)
    conn = psycopg2_connect()
    ext.register_type(raw, conn)
    conn.autocommit = True
    out = []
    for sql in statements:
        try:
            cur = conn.cursor()
            cur.execute(sql)
            out.append({"header": [d.name for d in cur.description], "rows": [[text(v) for v in r] for r in cur.fetchall()]})
        except Exception as e:  # noqa: BLE001
            out.append(error(e))
    conn.close()
    return out


# --- asyncpg -----------------------------------------------------------------------------

async def asyncpg_job(cases, cancel_sql):
    import asyncpg
    conn = await asyncpg.connect(host="127.0.0.1", port=PORT, user=USER, password=PASSWORD, database=DB, ssl=False)
    results = []
    for case in cases:
        try:
            stmt = await conn.prepare(case["sql"])
            rows = await stmt.fetch(*py_params(case["params"]))
            oid = stmt.get_attributes()[0].type.oid
            results.append({"value": cell(rows[0][0]) if rows else None, "type_oid": oid, "rows": len(rows)})
        except Exception as e:  # noqa: BLE001
            results.append(error(e))
    if cancel_sql is None:
        await conn.close()
        return results, None
    # asyncpg cancels a statement whose timeout passes (a cancel request on its own socket).
    started = time.monotonic()
    try:
        await conn.fetch(cancel_sql, timeout=1.0)
        cancel = {"finished": True}
    except asyncio.TimeoutError:
        cancel = {"cancelled": "timeout"}
    except Exception as e:  # noqa: BLE001
        cancel = error(e)
    after = time.monotonic()
    cancel["next"] = await conn.fetchval("SELECT 1")
    cancel["seconds"] = round(after - started, 3)
    cancel["next_seconds"] = round(time.monotonic() - after, 3)
    await conn.close()
    return results, cancel


# --- SQLAlchemy and pandas ---------------------------------------------------------------

def sqlalchemy_job(table):
    import pandas
    import sqlalchemy
    out = {}
    engine = sqlalchemy.create_engine(f"postgresql+psycopg://{USER}:{PASSWORD}@127.0.0.1:{PORT}/{DB}")
    try:
        inspector = sqlalchemy.inspect(engine)
        out["tables"] = sorted(inspector.get_table_names())
        out["columns"] = [c["name"] for c in inspector.get_columns(table)]
        out["primary_key"] = inspector.get_pk_constraint(table)["constrained_columns"]
        out["foreign_keys"] = inspector.get_foreign_keys(table)
    except Exception as e:  # noqa: BLE001
        out["reflection"] = error(e)
    try:
        frame = pandas.read_sql_table(table, engine)
        out["read_sql_table_rows"] = len(frame)
        out["read_sql_table_columns"] = list(frame.columns)
    except Exception as e:  # noqa: BLE001
        out["read_sql_table"] = error(e)
    try:
        frame = pandas.read_sql_query(sqlalchemy.text(f"SELECT count(*) AS n FROM {table}"), engine)
        out["read_sql_query_count"] = int(frame["n"][0])
    except Exception as e:  # noqa: BLE001
        out["read_sql_query"] = error(e)
    engine.dispose()
    return out


def main():
    job = json.load(sys.stdin)
    statements, cases = job.get("statements", []), job.get("cases", [])
    report = {}
    if statements:
        report["psycopg_server"] = {"rows": psycopg_rows(statements, "server")}
        report["psycopg_client"] = {"rows": psycopg_rows(statements, "client")}
        report["psycopg_named"] = {"rows": psycopg_rows(statements, "named")}
        report["psycopg2"] = {"rows": psycopg2_rows(statements)}
    if cases:
        report.setdefault("psycopg_server", {})["cases"] = psycopg_cases(cases, "server")
        report.setdefault("psycopg_client", {})["cases"] = psycopg_cases(cases, "client")
        report.setdefault("psycopg2", {})["cases"] = psycopg2_cases(cases)
    if cases or "cancel" in job:
        asyncpg_cases, asyncpg_cancel = asyncio.run(asyncpg_job(cases, job.get("cancel")))
        report.setdefault("asyncpg", {})["cases"] = asyncpg_cases
        if asyncpg_cancel is not None:
            report["asyncpg"]["cancel"] = asyncpg_cancel
    if "cancel" in job:
        report["psycopg_cancel"] = psycopg_cancel(job["cancel"])
    if "table" in job:
        report["sqlalchemy"] = sqlalchemy_job(job["table"])
    json.dump(report, sys.stdout)


if __name__ == "__main__":
    main()
