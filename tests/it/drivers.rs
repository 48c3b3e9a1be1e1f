//! The PostgreSQL drivers people connect with, against `gpuledger serve`: psycopg 3 (server-
//! and client-side binding, named cursors), psycopg2, asyncpg, and SQLAlchemy with pandas, run
//! by `tests/drivers/python_clients.py`; Go's lib/pq (`tests/drivers/libpq/`) and pgjdbc
//! (`tests/drivers/Jdbc.java`). Each answer is compared with psql's answer to the same
//! statement with its parameters written out as literals: another client on another protocol
//! path (simple queries, nothing to bind), not a figure of ours.

use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use super::serving::{PASSWORD, Server, demo_store, serve_config};

/// Runs the Python clients on `job` (see the script) against `server`; their report. The
/// script exits 0 whatever a driver answered; anything else (a driver crashing the process,
/// as psycopg did on a cursor described with no columns) fails here.
pub fn python_drivers(server: &Server, job: &Value) -> Value {
    for module in ["psycopg", "psycopg2", "asyncpg", "sqlalchemy", "pandas"] {
        let probe = Command::new("python3").args(["-c", &format!("import {module}")]).output();
        assert!(probe.is_ok_and(|o| o.status.success()), "{module} is needed for this test: python3 -m pip install 'psycopg[binary]' psycopg2-binary asyncpg sqlalchemy pandas (.ci/run does)");
    }
    let mut python = Command::new("python3");
    python.arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/drivers/python_clients.py"));
    run_client("the Python clients", python, server, job)
}

/// Runs a client program (`<port> <password>`, the job as JSON on stdin) against `server`;
/// its JSON report. Exiting other than 0 fails the test with the client's stderr and the
/// server's log.
fn run_client(what: &str, mut client: Command, server: &Server, job: &Value) -> Value {
    let mut child = client.arg(server.pg_port.to_string()).arg(PASSWORD).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    child.stdin.take().unwrap().write_all(job.to_string().as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{what} failed ({}):\n{}\nserver log:\n{}", out.status, String::from_utf8_lossy(&out.stderr), server.log());
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{what}: the report is not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}

/// Go's lib/pq (Grafana's protocol path) on `job` (the Python clients' shape: statements,
/// cases, cancel) against `server`; its report. The program is built once per test binary in
/// GOPATH mode from Debian's packages (golang-go, golang-github-lib-pq-dev).
pub fn go_libpq(server: &Server, job: &Value) -> Value {
    static BUILT: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    let program = BUILT.get_or_init(|| {
        let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("libpq-client-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join("libpq_client");
        let build = Command::new("go")
            .args(["build", "-o"])
            .arg(&out)
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/drivers/libpq/main.go"))
            .env("GO111MODULE", "off")
            .env("GOPATH", "/usr/share/gocode")
            .env("GOCACHE", dir.join("cache"))
            .output()
            .expect("go runs (Debian packages golang-go and golang-github-lib-pq-dev; .ci/run installs them)");
        assert!(build.status.success(), "building the lib/pq client failed:\n{}", String::from_utf8_lossy(&build.stderr));
        out
    });
    run_client("the lib/pq client", Command::new(program), server, job)
}

/// pgjdbc (Debian libpostgresql-jdbc-java, a headless JRE) in a JVM set to Europe/Berlin:
/// `tests/drivers/Jdbc.java` run as a source file; its report, call name to answer.
fn jdbc(server: &Server, team_a: &str, team_b: &str, instant: i64) -> serde_json::Map<String, Value> {
    let out = Command::new("java")
        .args(["-Duser.timezone=Europe/Berlin", "-cp", "/usr/share/java/postgresql.jar", concat!(env!("CARGO_MANIFEST_DIR"), "/tests/drivers/Jdbc.java")])
        .args([&server.pg_port.to_string(), PASSWORD, team_a, team_b, &instant.to_string()])
        .output()
        .expect("java runs (Debian packages default-jre-headless and libpostgresql-jdbc-java; .ci/run installs them)");
    assert!(out.status.success(), "the JDBC client failed ({}):\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("the JDBC client's report is not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}

/// The first cell of psql's answer to `sql`, and how many rows it has.
fn psql_first(server: &Server, sql: &str) -> (String, usize) {
    let rows = server.psql_csv(sql).unwrap_or_else(|e| panic!("psql: {sql}: {e}"));
    (rows.get(1).and_then(|r| r.first()).cloned().unwrap_or_default(), rows.len() - 1)
}

/// A driver's value as psql's text would read: numbers as numbers, instants as RFC 3339 UTC.
fn as_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        Value::Object(o) if o.contains_key("instant") => o["instant"].as_str().unwrap_or_default().to_owned(),
        other => other.to_string(),
    }
}

#[test]
fn drivers_bind_parameters_type_results_and_cancel_as_postgresql_does() {
    let (store, base) = demo_store();
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(store, &serve_config(tmp.path(), base, ""));

    let teams: Vec<String> = server.psql_csv("SELECT DISTINCT team FROM chargeback_monthly ORDER BY team").unwrap().into_iter().skip(1).map(|r| r[0].clone()).collect();
    assert!(teams.len() >= 3, "the demo should have three teams or more: {teams:?}");
    let (total, _) = psql_first(&server, "SELECT count(*) FROM chargeback_monthly");
    // The middle of the samples' span, as an instant, and written at +02:00 for the drivers.
    let (span, _) = psql_first(&server, "SELECT CAST((date_part('epoch', min(ts)) + date_part('epoch', max(ts))) / 2 AS BIGINT) FROM gpu_samples");
    let mid = chrono::DateTime::from_timestamp(span.parse().unwrap(), 0).unwrap();
    let berlin = mid.with_timezone(&chrono::FixedOffset::east_opt(2 * 3600).unwrap()).to_rfc3339();
    let utc = mid.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);

    // (name, SQL with $n, parameters, psql's reference statement)
    let (a, b) = (&teams[0], &teams[1]);
    let cases: Vec<(&str, String, Value, String)> = vec![
        ("any", "SELECT count(*) AS n FROM chargeback_monthly WHERE team = ANY($1)".into(), json!([[a, b]]), format!("SELECT count(*) FROM chargeback_monthly WHERE team IN ('{a}', '{b}')")),
        ("limit", "SELECT team FROM chargeback_monthly ORDER BY team DESC, month LIMIT $1".into(), json!([2]), "SELECT team FROM chargeback_monthly ORDER BY team DESC, month LIMIT 2".into()),
        ("untyped null", "SELECT count(*) AS n FROM chargeback_monthly WHERE $1 IS NULL OR team = $2".into(), json!([null, a]), "SELECT count(*) FROM chargeback_monthly".into()),
        ("subquery", "SELECT (SELECT count(*) FROM chargeback_monthly WHERE team = $1) AS n".into(), json!([b]), format!("SELECT count(*) FROM chargeback_monthly WHERE team = '{b}'")),
        // numeric without a precision keeps every digit (DataFusion's default cut at 10); the
        // reference is the digits as text.
        ("numeric", "SELECT '0.123456789012345678'::numeric AS n FROM chargeback_monthly WHERE team = $1 LIMIT 1".into(), json!([a]), "SELECT '0.123456789012345678'".into()),
        ("timestamptz filter", "SELECT count(*) AS n FROM gpu_samples WHERE ts >= $1".into(), json!([{ "timestamptz": berlin }]), format!("SELECT count(*) FROM gpu_samples WHERE ts >= to_timestamp_seconds({})", mid.timestamp())),
    ];
    let job = json!({
        "cases": cases.iter().map(|(name, sql, params, _)| json!({"name": name, "sql": sql, "params": params})).chain([
            json!({"name": "timestamptz echo", "sql": "SELECT $1::timestamptz AS t", "params": [{ "timestamptz": berlin }]}),
            json!({"name": "now", "sql": "SELECT now() AS t", "params": []}),
        ]).collect::<Vec<_>>(),
        "cancel": "SELECT count(*) FROM generate_series(1, 100000000) a CROSS JOIN generate_series(1, 100000000) b",
        "table": "chargeback_monthly",
    });
    let mut report = python_drivers(&server, &job);
    report["libpq"] = go_libpq(&server, &json!({ "cases": job["cases"], "cancel": job["cancel"] }));

    let mut failures = Vec::new();
    for driver in ["psycopg_server", "psycopg_client", "psycopg2", "asyncpg", "libpq"] {
        let answers = report[driver]["cases"].as_array().unwrap_or_else(|| panic!("{driver}: no cases in {report}"));
        for (i, (name, sql, params, reference)) in cases.iter().enumerate() {
            let (want, want_rows) = psql_first(&server, reference);
            let got = &answers[i];
            if got.get("error").is_some() || as_text(&got["value"]) != want || got["rows"] != json!(want_rows) {
                failures.push(format!("{driver} {name}: {sql} with {params} gave {got}, psql gave {want:?} in {want_rows} row(s)"));
            }
        }
        // Timestamps come back as instants (timestamptz, 1184), the offset sent honoured.
        // (lib/pq names the type, the others give its OID.)
        let timestamptz = |a: &Value| a["type_oid"] == 1184 || a["type_name"] == "TIMESTAMPTZ";
        let echo = &answers[cases.len()];
        if echo["value"] != json!({ "instant": utc.replace('Z', "+00:00") }) || !timestamptz(echo) {
            failures.push(format!("{driver} timestamptz echo: sent {berlin}, got {echo}, want the instant {utc} as timestamptz"));
        }
        let now = &answers[cases.len() + 1];
        if !timestamptz(now) || now["value"].get("instant").is_none() {
            failures.push(format!("{driver} now(): {now}, want a timestamptz instant"));
        }
    }
    // The filter is not trivially true or false: an offset dropped would change the count.
    let (half, _) = psql_first(&server, &cases[5].3);
    assert!(half != "0" && half != psql_first(&server, "SELECT count(*) FROM gpu_samples").0, "the middle of the span should split the samples: {half}");
    assert_ne!(psql_first(&server, &cases[0].3).0, total, "two teams should not hold every row");

    // Cancelled statements stop, and the connection answers its next statement.
    for (driver, cancel) in [("asyncpg", &report["asyncpg"]["cancel"]), ("psycopg", &report["psycopg_cancel"]), ("lib/pq", &report["libpq"]["cancel"])] {
        if cancel.get("cancelled").is_none() || cancel["next"] != 1 {
            failures.push(format!("{driver} cancel: {cancel}"));
        }
    }
    for (driver, cancel) in [("psycopg", &report["psycopg_cancel"]), ("lib/pq", &report["libpq"]["cancel"])] {
        if cancel["sqlstate"] != "57014" {
            failures.push(format!("{driver} cancel: SQLSTATE {}, want 57014 (query_canceled)", cancel["sqlstate"]));
        }
    }

    // pgjdbc: Metabase's and DBeaver's calls at connect, the same cases, instants in a JVM set
    // to Europe/Berlin, a query timeout.
    let java = jdbc(&server, a, b, mid.timestamp());
    let header = server.psql_csv("SELECT * FROM chargeback_monthly LIMIT 0").unwrap().remove(0);
    assert!(header.len() > 10, "chargeback_monthly's columns: {header:?}");
    let mut expect = vec![
        ("setReadOnly", "ok ".to_owned()),
        ("setAutoCommit", "ok ".to_owned()),
        ("getTables", "ok 1 chargeback_monthly".to_owned()),
        ("getColumns", format!("ok {} {}", header.len(), header.join(","))),
        ("getColumnTypes", "ok 1 timestamptz".to_owned()),
        ("getPrimaryKeys", "ok 0".to_owned()),
        ("getImportedKeys", "ok 0".to_owned()),
        ("getExportedKeys", "ok 0".to_owned()),
        ("getIndexInfo", "ok 0".to_owned()),
        ("regnamespace", "ok 1 public".to_owned()),
        ("timestamptz echo", format!("ok {} timestamptz", mid.timestamp())),
        ("to_timestamp", format!("ok {} timestamptz", mid.timestamp())),
        ("after cancel", "ok 1 1".to_owned()),
    ];
    for (name, _, _, reference) in &cases {
        let (want, rows) = psql_first(&server, reference);
        expect.push((*name, format!("ok {rows} {want}")));
    }
    for (call, want) in expect {
        if java.get(call).and_then(Value::as_str) != Some(want.as_str()) {
            failures.push(format!("pgjdbc {call}: {:?}, want {want:?}", java.get(call)));
        }
    }
    for (call, prefix) in [("getTypeInfo", "ok "), ("getSchemas", "ok "), ("getCatalogs", "ok "), ("cancel", "ok cancelled 57014")] {
        if !java.get(call).and_then(Value::as_str).is_some_and(|a| a.starts_with(prefix) && a != "ok 0") {
            failures.push(format!("pgjdbc {call}: {:?}, want {prefix}...", java.get(call)));
        }
    }
    if !java["getSchemas"].as_str().is_some_and(|s| s.split([' ', ',']).any(|x| x == "public")) {
        failures.push(format!("pgjdbc getSchemas: {}, want public among them", java["getSchemas"]));
    }

    // SQLAlchemy's reflection and pandas read what psql reads.
    let alchemy = &report["sqlalchemy"];
    let tables: Vec<String> = server.psql_csv("SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' AND table_type = 'BASE TABLE' ORDER BY 1").unwrap().into_iter().skip(1).map(|r| r[0].clone()).collect();
    if alchemy["tables"] != json!(tables) {
        failures.push(format!("SQLAlchemy reflection: {alchemy}; psql lists the tables {tables:?}"));
    }
    if alchemy["read_sql_query_count"] != json!(total.parse::<u64>().unwrap()) {
        failures.push(format!("pandas: {alchemy}; psql counts {total} rows"));
    }
    // Column reflection (correlated lookups inside CASE, placeholders in lookups this catalog
    // answers NULL, index vectors unnested) and pandas.read_sql_table, which also reflects the
    // keys: psql's columns, in order, and its row count; no keys, as for a table without any.
    for (what, got) in [("get_columns", &alchemy["columns"]), ("read_sql_table", &alchemy["read_sql_table_columns"])] {
        if *got != json!(header) {
            failures.push(format!("SQLAlchemy {what}: {alchemy}; psql's columns are {header:?}"));
        }
    }
    if alchemy["read_sql_table_rows"] != json!(total.parse::<u64>().unwrap()) || alchemy["primary_key"] != json!([]) || alchemy["foreign_keys"] != json!([]) {
        failures.push(format!("pandas.read_sql_table / keys: {alchemy}; psql counts {total} rows, and there are no keys"));
    }
    assert!(failures.is_empty(), "{} driver checks fail:\n{}\nserver log:\n{}", failures.len(), failures.join("\n"), server.log());
}
