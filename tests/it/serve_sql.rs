//! `gpuledger serve`'s SQL endpoint through psql, the real PostgreSQL client: catalog commands,
//! every table, logins, the read-only lock, limits, new files showing up, TLS.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::serving::{PASSWORD, Server, demo_store, eventually, parse_csv, serve_config};
use super::util::{copy_tree, run};

/// Tables a store holds: one directory per store table (the demo writes them all) and one
/// file per derived table under `ledger/`.
/// The views of `queries/90_reports.sql`: a session over a store with a ledger has them too.
fn report_views() -> Vec<String> {
    let sql = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/queries/90_reports.sql")).unwrap();
    sql.lines().filter_map(|l| l.strip_prefix("CREATE OR REPLACE VIEW ")).map(|l| l.split_whitespace().next().unwrap().to_owned()).collect()
}

fn store_tables(store: &Path) -> Vec<String> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(store).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        if name == "ledger" {
            for f in std::fs::read_dir(entry.path()).unwrap() {
                let f = f.unwrap().file_name().to_string_lossy().into_owned();
                if let Some(stem) = f.strip_suffix(".parquet") {
                    names.push(stem.to_owned());
                }
            }
        } else if entry.path().is_dir() && !name.starts_with('.') {
            names.push(name);
        }
    }
    names.sort();
    names
}

/// `gpuledger query --format csv` (the same session, without the wire): the reference.
fn local_csv(store: &Path, sql: &str) -> Vec<Vec<String>> {
    let out = run(&["query", "--store", &store.display().to_string(), "--format", "csv", sql], 0);
    parse_csv(&String::from_utf8_lossy(&out.stdout))
}

/// Cells that are numbers, spelled one way: PostgreSQL's text format writes a float zero as
/// `0`, arrow's CSV as `0.0`; the value is what is compared.
fn numbers_alike(rows: Vec<Vec<String>>) -> Vec<Vec<String>> {
    rows.into_iter().map(|r| r.into_iter().map(|c| c.parse::<f64>().map_or(c, |v| v.to_string())).collect()).collect()
}

/// Copies a directory tree (the shared demo store must stay untouched).
/// Every file under `dir` with its size and modification time.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, (u64, SystemTime)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let entry = entry.unwrap();
            let meta = entry.metadata().unwrap();
            if meta.is_dir() {
                stack.push(entry.path());
            } else {
                out.insert(entry.path(), (meta.len(), meta.modified().unwrap()));
            }
        }
    }
    out
}

#[test]
fn psql_lists_describes_and_reads_every_table() {
    let (store, base) = demo_store();
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(store, &serve_config(tmp.path(), base, ""));

    // \dt lists exactly the store's tables and derived tables.
    let (code, out, err) = server.psql_as(PASSWORD, &["-c", "\\dt"]);
    assert_eq!(code, 0, "{err}");
    let mut listed: Vec<String> = out.lines().filter_map(|l| l.split('|').nth(1)).map(|s| s.trim().to_owned()).filter(|s| !s.is_empty() && s != "Name").collect();
    listed.sort();
    let expected = store_tables(store);
    assert!(expected.len() >= 20, "{expected:?}");
    assert_eq!(listed, expected);

    // SELECT version() reads as PostgreSQL, as drivers expect.
    let v = server.psql_csv("SELECT version()").unwrap();
    assert!(v[1][0].starts_with("PostgreSQL 16"), "{v:?}");

    for table in &expected {
        // \d names the same columns, in order, as the local session's result header.
        let (code, out, err) = server.psql_as(PASSWORD, &["-c", &format!("\\d {table}")]);
        assert_eq!(code, 0, "\\d {table}: {err}");
        let described: Vec<String> = out.lines().skip(3).filter_map(|l| l.split('|').next()).map(|s| s.trim().to_owned()).filter(|s| !s.is_empty() && !s.starts_with('(')).collect();
        let local = local_csv(store, &format!("SELECT * FROM {table} LIMIT 1"));
        assert_eq!(described, local[0], "\\d {table}");

        // Every table reads the same count through the wire as locally.
        let remote = server.psql_csv(&format!("SELECT count(*) AS n FROM {table}")).unwrap();
        let local = local_csv(store, &format!("SELECT count(*) AS n FROM {table}"));
        assert_eq!(remote, local, "count of {table}");
    }
    // \d+ (storage, description) and the listings of roles and functions run too; Grafana's
    // query editor reads information_schema.columns, whose type names are PostgreSQL's: the
    // ones \d shows from pg_catalog (format_type), a path of its own.
    for table in ["chargeback_monthly", "gpu_samples"] {
        let (code, out, err) = server.psql_as(PASSWORD, &["-c", &format!("\\d+ {table}")]);
        assert_eq!(code, 0, "\\d+ {table}: {err}");
        let cells = |out: &str, i: usize| -> Vec<String> { out.lines().skip(3).filter(|l| l.contains('|')).filter_map(|l| l.split('|').nth(i)).map(|s| s.trim().to_owned()).collect() };
        assert_eq!(cells(&out, 0), local_csv(store, &format!("SELECT * FROM {table} LIMIT 1"))[0], "\\d+ {table}");
        let listed = server.psql_csv(&format!("SELECT data_type FROM information_schema.columns WHERE table_name = '{table}' ORDER BY ordinal_position")).unwrap();
        let types: Vec<String> = listed.into_iter().skip(1).map(|r| r[0].clone()).collect();
        assert_eq!(types, cells(&out, 1).iter().map(|t| t.split('(').next().unwrap_or_default().to_owned()).collect::<Vec<_>>(), "information_schema types of {table}");
    }
    // The editor's own query for an unqualified table's columns (Grafana 12, search path).
    let grafana = "SELECT quote_ident(column_name) AS \"column\", data_type AS \"type\" FROM information_schema.columns WHERE table_schema IN (SELECT CASE WHEN trim(s[i]) = '\"$user\"' THEN user ELSE trim(s[i]) END FROM generate_series(array_lower(string_to_array(current_setting('search_path'),','),1), array_upper(string_to_array(current_setting('search_path'),','),1)) as i, string_to_array(current_setting('search_path'),',') s) AND table_name = 'gpu_samples'";
    let columns = server.psql_csv(grafana).unwrap();
    assert!(columns.iter().any(|r| r == &["ts".to_owned(), "timestamp with time zone".to_owned()]), "Grafana's editor should find the time column: {columns:?}");
    assert_eq!(columns.len() - 1, local_csv(store, "SELECT * FROM gpu_samples LIMIT 1")[0].len(), "{columns:?}");
    for command in ["\\du", "\\df"] {
        let (code, _, err) = server.psql_as(PASSWORD, &["-c", command]);
        assert_eq!(code, 0, "{command}: {err}");
    }

    // Row content too, for a table with every kind of column: the first rows in a fixed order.
    let sql = "SELECT month, team, round(total, 6) AS total, accepted_units FROM chargeback_monthly ORDER BY month, team";
    assert_eq!(numbers_alike(server.psql_csv(sql).unwrap()), numbers_alike(local_csv(store, sql)));

    // information_schema, which Grafana's table picker reads: the tables and the report views
    // over them (queries/90_reports.sql).
    let tables = server.psql_csv("SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' ORDER BY table_name").unwrap();
    let names: Vec<String> = tables.into_iter().skip(1).map(|r| r[0].clone()).collect();
    let views = report_views();
    assert_eq!(views, ["report_usage", "report_state_hours", "report_months", "report_gauges", "report_energy", "report_focus"]);
    let mut with_views = expected.clone();
    with_views.extend(views);
    with_views.sort();
    assert_eq!(names, with_views);

    // Errors carry PostgreSQL's SQLSTATE codes (psql prints them at VERBOSITY verbose).
    for (sql, code) in [("SELECT totl FROM chargeback_monthly", "42703"), ("SELECT * FROM no_such_table", "42P01"), ("SELECT no_such_function(1)", "42883"), ("DROP TABLE pods", "42501")] {
        let (status, _, err) = server.psql_as(PASSWORD, &["-v", "VERBOSITY=verbose", "-c", sql]);
        assert_ne!(status, 0, "{sql}");
        assert!(err.contains(&format!("ERROR:  {code}")), "{sql}: {err}");
    }
}

/// A wrong password and an unknown user read alike (issue 42: user names could be probed): one
/// message as PostgreSQL writes it, naming the user; both are counted and logged with the peer.
#[test]
fn wrong_password_and_unknown_user_are_refused() {
    let (store, base) = demo_store();
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(store, &serve_config(tmp.path(), base, ""));
    let (code, _, wrong) = server.psql_as("not-the-password", &["-c", "SELECT 1"]);
    assert_ne!(code, 0);
    assert!(wrong.contains("FATAL:  password authentication failed for user \"grafana\""), "{wrong}");
    let (code, out, _) = server.psql_as(PASSWORD, &["-c", "SELECT 41 + 1 AS answer"]);
    assert_eq!(code, 0);
    assert!(out.contains("42"), "{out}");
    let out = std::process::Command::new("psql")
        .args(["-h", "127.0.0.1", "-p", &server.pg_port.to_string(), "-U", "mallory", "-d", "datafusion", "-X", "-c", "SELECT 1"])
        .env("PGPASSWORD", PASSWORD)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let unknown = String::from_utf8_lossy(&out.stderr);
    assert_eq!(unknown.replace("mallory", "grafana"), wrong, "an unknown user is told apart from a wrong password");
    let (_, _, metrics) = server.get("/metrics", Some(super::serving::TOKEN));
    assert!(metrics.lines().any(|l| l == "gpuledger_sql_logins_failed_total 2"), "{metrics}");
    assert!(server.log().contains("sql: login failed peer=127.0.0.1"), "{}", server.log());
    // The password never reaches the log.
    assert!(!server.log().contains(PASSWORD), "{}", server.log());
}

#[test]
fn writes_files_urls_and_settings_are_refused_and_nothing_changes() {
    let (store, base) = demo_store();
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(store, &serve_config(tmp.path(), base, ""));
    // A file outside the store whose content must never come back.
    let secret_dir = tmp.path().join("outside");
    std::fs::create_dir_all(&secret_dir).unwrap();
    let secret_text = "token,value\nTOPSECRET-7f3a9,1\n";
    let secret = secret_dir.join("secret.csv");
    std::fs::write(&secret, secret_text).unwrap();
    let target = tmp.path().join("written");
    let before_store = snapshot(store);
    let before_outside = snapshot(tmp.path());

    let s = secret.display().to_string();
    let d = secret_dir.display().to_string();
    let t = target.display().to_string();
    let statements = [
        "CREATE TABLE stolen AS SELECT * FROM pods".to_owned(),
        "CREATE VIEW v AS SELECT 1".to_owned(),
        "DROP TABLE pods".to_owned(),
        "INSERT INTO pods SELECT * FROM pods".to_owned(),
        "DELETE FROM pods".to_owned(),
        format!("COPY pods TO '{t}.csv'"),
        format!("COPY (SELECT * FROM chargeback_monthly) TO '{t}.parquet'"),
        format!("COPY pods FROM '{s}'"),
        format!("CREATE EXTERNAL TABLE leak STORED AS CSV LOCATION '{s}'"),
        format!("CREATE EXTERNAL TABLE leak (token TEXT, value INT) STORED AS CSV LOCATION '{d}/'"),
        format!("SELECT * FROM '{s}'"),
        format!("SELECT * FROM \"{s}\""),
        format!("SELECT * FROM read_csv('{s}')"),
        format!("SELECT * FROM read_parquet('{s}')"),
        "SELECT * FROM read_csv('http://127.0.0.1:9/x.csv')".to_owned(),
        "SET datafusion.execution.target_partitions = 1".to_owned(),
        "SET datafusion.catalog.information_schema = false".to_owned(),
        "SET datafusion.runtime.memory_limit = '100G'".to_owned(),
        "SELECT * INTO copied FROM pods".to_owned(),
        "PREPARE p AS SELECT 1".to_owned(),
    ];
    for sql in &statements {
        let (code, out, err) = server.psql_as(PASSWORD, &["-c", sql]);
        assert_ne!(code, 0, "{sql} was accepted: {out}");
        assert!(err.contains("ERROR"), "{sql}: {err}");
        assert!(!out.contains("TOPSECRET") && !err.contains("TOPSECRET"), "{sql} leaked the file: {out}{err}");
    }
    // Nothing was written or removed in the store or next to it, and no table appeared.
    assert_eq!(snapshot(store), before_store);
    assert_eq!(snapshot(tmp.path()), before_outside);
    let tables = server.psql_csv("SELECT count(*) FROM information_schema.tables WHERE table_name IN ('stolen', 'v', 'leak', 'copied')").unwrap();
    assert_eq!(tables[1][0], "0");
    // Settings the server decides are unchanged; the server still answers.
    let partitions = server.psql_csv("SELECT count(*) AS n FROM pods").unwrap();
    assert_eq!(partitions, local_csv(store, "SELECT count(*) AS n FROM pods"));
    // Client settings Grafana and psql send still work.
    for sql in ["SET extra_float_digits = 3", "SET application_name = 'grafana'", "SET statement_timeout = '30s'", "BEGIN", "ROLLBACK"] {
        let (code, _, err) = server.psql_as(PASSWORD, &["-c", sql]);
        assert_eq!(code, 0, "{sql}: {err}");
    }
    // Every refusal is counted.
    let (_, _, metrics) = server.get("/metrics", Some(super::serving::TOKEN));
    let refused: u64 = metrics.lines().find_map(|l| l.strip_prefix("gpuledger_sql_queries_refused_total ")).and_then(|v| v.trim().parse().ok()).unwrap_or(0);
    assert!(refused >= 17, "refused {refused}:\n{metrics}");
}

#[test]
fn a_query_past_its_time_or_memory_limit_is_stopped_and_the_server_goes_on() {
    let (store, base) = demo_store();
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(store, &serve_config(tmp.path(), base, "query_timeout = \"2s\"\nmemory_limit = \"8MiB\""));
    // A hundred billion rows take hours: an answer at all means the server stopped it. That
    // it stopped it for the limit is the server's own word, not a stopwatch on this side,
    // which a busy machine would make lie.
    let err = server.psql_csv("SELECT count(*) FROM generate_series(1, 100000000000) AS a(x) WHERE x % 7 = 3").unwrap_err();
    assert!(err.contains("ran longer than query_timeout (2s)"), "{err}");
    // A sort of three million distinct values needs far more than 8 MiB.
    let err = server.psql_csv("SELECT v FROM (SELECT value * 7919 % 3000017 AS v FROM generate_series(1, 3000000)) ORDER BY v LIMIT 3 OFFSET 1500000").unwrap_err();
    assert!(err.contains("Resources exhausted") || err.contains("memory"), "{err}");
    // The limits are per statement: the next one runs.
    let ok = server.psql_csv("SELECT count(*) AS n FROM gpu_samples").unwrap();
    assert_eq!(ok, local_csv(store, "SELECT count(*) AS n FROM gpu_samples"));
    // A client may ask for less time than the server allows, not more.
    let err = server.psql_csv("SET statement_timeout = '300ms'; SELECT count(*) FROM generate_series(1, 100000000000) AS a(x) WHERE x % 7 = 3").unwrap_err();
    assert!(err.contains("query_timeout") || err.contains("cancel"), "{err}");
}

#[test]
fn new_files_and_a_new_ledger_show_up_without_a_restart() {
    let (demo, base) = demo_store();
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    copy_tree(demo, &store);
    // Start without derived tables: the ledger has not run yet.
    std::fs::remove_dir_all(store.join("ledger")).unwrap();
    let server = Server::start(&store, &serve_config(tmp.path(), base, "refresh_interval = \"500ms\""));
    let err = server.psql_csv("SELECT count(*) FROM chargeback_monthly").unwrap_err();
    assert!(err.contains("chargeback_monthly"), "{err}");
    let before: u64 = server.psql_csv("SELECT count(*) FROM pods").unwrap()[1][0].parse().unwrap();

    // A Parquet file dropped into a partition without a commit (what a writer that crashed
    // before committing leaves) is not part of the table: no reader counts it.
    let day = std::fs::read_dir(store.join("pods")).unwrap().map(|e| e.unwrap().path()).find(|p| p.file_name().unwrap().to_string_lossy().starts_with("date=")).unwrap();
    let part = std::fs::read_dir(&day).unwrap().map(|e| e.unwrap().path()).find(|p| p.extension().is_some_and(|x| x == "parquet")).unwrap();
    std::fs::copy(&part, day.join("part-zz-uncommitted.parquet")).unwrap();
    // New rows committed while serving (as ingest or the collector commit them): another
    // simulated cluster's two days, so none of its pods is already stored.
    let cap = tmp.path().join("more");
    run(&["simulate", "--out", &cap.display().to_string(), "--gpus", "4", "--days", "1", "--seed", "99", "--start", "2026-11-05T00:00:00Z", "--scrape-interval", "60s"], 0);
    let out = run(&["ingest", "--progress", "off", "--format", "json", "--store", &store.display().to_string(), &cap.display().to_string()], 0);
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let part_rows = summary["rows_written"]["pods"].as_u64().unwrap();
    assert!(part_rows > 0, "{summary}");
    // Each poll's answer and how long it took, to tell a slow server from a stale one if the
    // file never shows up.
    let mut polls: Vec<(std::time::Duration, String)> = Vec::new();
    let seen = eventually(|| {
        let asked = std::time::Instant::now();
        let answer = server.psql_csv("SELECT count(*) FROM pods");
        let found = answer.as_ref().is_ok_and(|r| r[1][0].parse::<u64>().unwrap() == before + part_rows);
        polls.push((asked.elapsed(), format!("{answer:?}")));
        found
    });
    // The first and the last five polls: enough to tell a slow server from a stale one.
    let shown: Vec<_> = polls.iter().take(5).chain(polls.iter().skip(5.max(polls.len().saturating_sub(5)))).collect();
    assert!(
        seen,
        "the new commit ({part_rows} rows, {before} before) never showed up in {} polls; first and last (took, answer): {shown:?}; now: {:?}; server log:\n{}",
        polls.len(),
        server.psql_csv("SELECT count(*) FROM pods"),
        server.log()
    );

    // `gpuledger ledger` while serving: the derived tables appear.
    run(&["ledger", "--store", &store.display().to_string(), "--config", &base.display().to_string(), "--progress", "off"], 0);
    let seen = eventually(|| server.psql_csv("SELECT count(*) FROM chargeback_monthly").is_ok());
    assert!(seen, "chargeback_monthly never showed up");
    let sql = "SELECT month, team, round(total, 6) AS total FROM chargeback_monthly ORDER BY month, team";
    assert_eq!(numbers_alike(server.psql_csv(sql).unwrap()), numbers_alike(local_csv(&store, sql)));
}

#[test]
fn tls_is_spoken_when_a_certificate_is_configured() {
    let (store, base) = demo_store();
    let tmp = tempfile::tempdir().unwrap();
    let (cert, key) = (tmp.path().join("cert.pem"), tmp.path().join("key.pem"));
    let made = std::process::Command::new("openssl")
        .args(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("openssl runs");
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    let extra = format!("tls_cert = \"{}\"\ntls_key = \"{}\"", cert.display(), key.display());
    let server = Server::start(store, &serve_config(tmp.path(), base, &extra));
    let out = std::process::Command::new("psql")
        .arg(format!("host=127.0.0.1 port={} user=grafana dbname=datafusion sslmode=require", server.pg_port))
        .args(["-X", "-c", "\\conninfo", "-c", "SELECT count(*) FROM nodes"])
        .env("PGPASSWORD", PASSWORD)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("SSL connection"), "{text}");

    // With require_tls, a client that does not ask for TLS is refused with one FATAL error and
    // the end of the connection (no ReadyForQuery after it); one that asks is served.
    let extra = format!("tls_cert = \"{}\"\ntls_key = \"{}\"\nrequire_tls = true", cert.display(), key.display());
    std::fs::create_dir_all(tmp.path().join("strict")).unwrap();
    let strict = Server::start(store, &serve_config(&tmp.path().join("strict"), base, &extra));
    let psql = |mode: &str| {
        std::process::Command::new("psql")
            .arg(format!("host=127.0.0.1 port={} user=grafana dbname=datafusion sslmode={mode}", strict.pg_port))
            .args(["-X", "-A", "-t", "-c", "SELECT 7"])
            .env("PGPASSWORD", PASSWORD)
            .output()
            .unwrap()
    };
    let plain = psql("disable");
    assert!(!plain.status.success());
    assert!(String::from_utf8_lossy(&plain.stderr).contains("accepts TLS connections only (require_tls)"), "{}", String::from_utf8_lossy(&plain.stderr));
    let secure = psql("require");
    assert_eq!(String::from_utf8_lossy(&secure.stdout).trim(), "7", "{}", String::from_utf8_lossy(&secure.stderr));
    let messages = raw_startup(strict.pg_port);
    assert_eq!(messages.iter().map(|(tag, _)| *tag).collect::<String>(), "E", "{messages:?}");
    assert!(String::from_utf8_lossy(&messages[0].1).contains("FATAL"), "{messages:?}");

    // A key that is not a key stops the server at start, in one line naming the file.
    let bad = tmp.path().join("bad.pem");
    std::fs::write(&bad, "not a key").unwrap();
    let extra = format!("tls_cert = \"{}\"\ntls_key = \"{}\"", cert.display(), bad.display());
    let config = serve_config(tmp.path(), base, &extra);
    let out = super::util::bin().args(["serve", "--store", &store.display().to_string(), "--config", &config.display().to_string()]).env("TEST_GRAFANA_PASSWORD", PASSWORD).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.pem") && err.lines().count() == 1, "{err}");
}

/// What tools send around their queries on a read-only ledger (issue 42: SQLAlchemy with
/// psycopg 3 could not connect, `SAVEPOINT` refused; Metabase's startup failed on `SET SESSION
/// CHARACTERISTICS`): savepoints and transaction modes are accepted as PostgreSQL answers
/// them, a failed statement rolled back to a savepoint leaves the transaction usable, and a
/// write inside a transaction is still refused.
#[test]
fn savepoints_and_transaction_modes_are_accepted_and_writes_still_refused() {
    let (store, base) = demo_store();
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(store, &serve_config(tmp.path(), base, ""));
    let script = tmp.path().join("tx.sql");
    std::fs::write(
        &script,
        "SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY;\nBEGIN;\nSET TRANSACTION ISOLATION LEVEL REPEATABLE READ;\nSAVEPOINT a;\nSELECT no_such_column FROM pods;\nROLLBACK TO SAVEPOINT a;\nSELECT 40 + 2 AS answer;\nSAVEPOINT b;\nRELEASE SAVEPOINT b;\nCOMMIT;\nBEGIN;\nDROP TABLE pods;\nROLLBACK;\n",
    )
    .unwrap();
    let out = std::process::Command::new("psql")
        .args(["-h", "127.0.0.1", "-p", &server.pg_port.to_string(), "-U", "grafana", "-d", "datafusion", "-X", "-A", "-t", "-f"])
        .arg(&script)
        .env("PGPASSWORD", PASSWORD)
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let tags: Vec<&str> = stdout.lines().collect();
    // ROLLBACK TO SAVEPOINT after an error completes twice (the transaction ends and starts
    // again: docs/serve.md); then the transaction goes on.
    assert_eq!(tags, ["SET", "BEGIN", "SET", "SAVEPOINT", "ROLLBACK", "ROLLBACK", "42", "SAVEPOINT", "RELEASE", "COMMIT", "BEGIN", "ROLLBACK"], "{stdout}\n{stderr}");
    let errors: Vec<&str> = stderr.lines().filter(|l| l.contains("ERROR")).collect();
    assert_eq!(errors.len(), 2, "{stderr}");
    assert!(errors[0].contains("no_such_column"), "{stderr}");
    assert!(errors[1].contains("read-only"), "{stderr}");
    assert_eq!(server.psql_csv("SELECT count(*) > 0 AS kept FROM pods").unwrap()[1][0], "t");
}

/// `SHOW` answers as PostgreSQL's does (issue 42: `SHOW TimeZone` came back as a column named
/// `unsupported_show_statement`): the setting's own name as the column, server settings as a
/// PostgreSQL 16 server has them, a time zone the client set, and an error for a name that is no
/// setting.
#[test]
fn show_answers_settings_by_their_names() {
    let (store, base) = demo_store();
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(store, &serve_config(tmp.path(), base, ""));
    for (sql, column, value) in [("SHOW TimeZone", "TimeZone", "UTC"), ("SHOW server_version", "server_version", "16.6"), ("SHOW standard_conforming_strings", "standard_conforming_strings", "on"), ("SHOW transaction_read_only", "transaction_read_only", "on")] {
        assert_eq!(server.psql_csv(sql).unwrap(), vec![vec![column.to_owned()], vec![value.to_owned()]], "{sql}");
    }
    let (code, out, err) = server.psql_as(PASSWORD, &["--csv", "-c", "SET TIME ZONE 'Europe/Berlin'", "-c", "SHOW timezone"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("TimeZone\nEurope/Berlin"), "{out}");
    let err = server.psql_csv("SHOW no_such_setting").unwrap_err();
    assert!(err.contains("unrecognized configuration parameter \"no_such_setting\""), "{err}");
}

/// Viewers of one dashboard send the same statements: the second is answered with the rows
/// the first computed (within refresh_interval), the same rows; a statement reading the clock
/// is computed each time, and `result_cache = "0"` keeps nothing.
#[test]
fn identical_statements_share_one_answer_and_clock_readings_never_do() {
    let (store, base) = demo_store();
    let tmp = tempfile::tempdir().unwrap();
    let counters = |server: &Server| {
        let (_, _, metrics) = server.get("/metrics", Some(super::serving::TOKEN));
        let read = |name: &str| metrics.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse::<u64>().ok()).unwrap_or_else(|| panic!("{name} missing:\n{metrics}"));
        (read("gpuledger_sql_result_cache_hits_total"), read("gpuledger_sql_result_cache_misses_total"))
    };
    let panel = "SELECT team, sum(total) AS total FROM chargeback_monthly GROUP BY team ORDER BY team";
    let server = Server::start(store, &serve_config(tmp.path(), base, "refresh_interval = \"1h\""));
    let first = server.psql_csv(panel).unwrap();
    assert_eq!(counters(&server), (0, 1));
    assert_eq!(server.psql_csv(panel).unwrap(), first);
    assert_eq!(counters(&server), (1, 1));
    let clock = "SELECT now() AS t, count(*) AS n FROM chargeback_monthly";
    let (a, b) = (server.psql_csv(clock).unwrap(), server.psql_csv(clock).unwrap());
    assert_ne!(a, b, "now() read twice should differ");
    assert_eq!(counters(&server), (1, 1), "statements reading the clock are never kept");
    // Rows are kept as encoded for the wire: a client with other text settings gets its own.
    let first_sample = "SELECT min(ts) AS first FROM gpu_samples";
    let (code, out, err) = server.psql_as(PASSWORD, &["-At", "-c", first_sample, "-c", "SET DateStyle = 'German'", "-c", first_sample, "-c", first_sample]);
    assert_eq!(code, 0, "{err}");
    let answers: Vec<&str> = out.lines().filter(|l| *l != "SET").collect();
    assert!(answers.len() == 3 && answers[1] == answers[2] && answers[1] != answers[0] && answers[1].contains('.'), "ISO, German, German: {answers:?}");
    assert_eq!(counters(&server), (2, 3), "the German answer is computed, not the ISO one sent, then kept");
    drop(server);

    let off = tempfile::tempdir().unwrap();
    let server = Server::start(store, &serve_config(off.path(), base, "refresh_interval = \"1h\"\nresult_cache = \"0\""));
    assert_eq!(server.psql_csv(panel).unwrap(), first);
    assert_eq!(server.psql_csv(panel).unwrap(), first);
    assert_eq!(counters(&server), (0, 0));
}

/// Sends a plain-text startup message for grafana and reads every message the server sends
/// until it closes the connection: (type byte, body).
fn raw_startup(port: u16) -> Vec<(char, Vec<u8>)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(super::util::PATIENCE)).unwrap();
    let mut body = 196_608u32.to_be_bytes().to_vec();
    body.extend_from_slice(b"user\0grafana\0database\0datafusion\0\0");
    let mut packet = u32::try_from(body.len() + 4).unwrap().to_be_bytes().to_vec();
    packet.extend(body);
    s.write_all(&packet).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let mut messages = Vec::new();
    let mut rest = &raw[..];
    while rest.len() >= 5 {
        let len = u32::from_be_bytes([rest[1], rest[2], rest[3], rest[4]]) as usize;
        messages.push((rest[0] as char, rest[5..(1 + len).min(rest.len())].to_vec()));
        rest = &rest[(1 + len).min(rest.len())..];
    }
    messages
}

/// pgbench with one script; (exit code, stdout + stderr).
fn pgbench(server: &Server, mode: &str, script: &str, dir: &Path) -> (i32, String) {
    let file = dir.join(format!("script-{mode}.sql"));
    std::fs::write(&file, script).unwrap();
    let out = std::process::Command::new("pgbench")
        .args(["-h", "127.0.0.1", "-p", &server.pg_port.to_string(), "-U", "grafana", "-n", "-M", mode, "-c", "2", "-t", "3", "-f"])
        .arg(&file)
        .arg("datafusion")
        .env("PGPASSWORD", PASSWORD)
        .output()
        .expect("pgbench runs (Debian package postgresql-client)");
    (out.status.code().unwrap_or(-1), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

#[test]
fn the_extended_protocol_binds_parameters_and_is_read_only_too() {
    // psql speaks the simple protocol; drivers (Grafana's, JDBC, psycopg) parse, bind and execute.
    // pgbench does both, with `:m` sent as a bound $1 in extended and prepared mode.
    let (store, base) = demo_store();
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(store, &serve_config(tmp.path(), base, ""));
    let threshold = 10;
    let expected = &local_csv(store, &format!("SELECT count(*) AS n FROM chargeback_monthly WHERE accepted_units > {threshold}"))[1][0];
    // The script checks the bound query's answer itself and calls a missing function (an
    // error, so an aborted run) when it differs.
    let script = format!("\\set m {threshold}\nSELECT count(*) AS n FROM chargeback_monthly WHERE accepted_units > :m \\gset\n\\if :n != {expected}\nSELECT answer_differs();\n\\endif\n");
    for mode in ["simple", "extended", "prepared"] {
        let (code, out) = pgbench(&server, mode, &script, tmp.path());
        assert_eq!(code, 0, "{mode}: {out}");
        assert!(out.contains("number of transactions actually processed: 6/6"), "{mode}: {out}");
        let (code, out) = pgbench(&server, mode, "DROP TABLE pods;\n", tmp.path());
        assert_ne!(code, 0, "{mode}: DROP ran: {out}");
        assert!(out.contains("read-only"), "{mode}: {out}");
    }
    assert_eq!(local_csv(store, "SELECT count(*) AS n FROM pods"), server.psql_csv("SELECT count(*) AS n FROM pods").unwrap());
}

/// Hostile logins (issue 46): 200 sockets that open a connection and never finish logging in
/// (half a startup packet) take none of the `max_connections` (here 4), so psql still logs in
/// and queries; each is closed once `startup_timeout` has passed.
#[test]
fn sockets_that_never_log_in_neither_lock_users_out_nor_stay_open() {
    use std::io::{Read, Write};
    let (store, base) = demo_store();
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(store, &serve_config(tmp.path(), base, "max_connections = 4\nstartup_timeout = \"2s\"\n"));
    let mut stuck = Vec::new();
    for i in 0..200 {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", server.pg_port)).unwrap_or_else(|e| panic!("socket {i}: {e}"));
        // The length of a startup packet, and nothing after it.
        s.write_all(&[0, 0, 0, 40]).unwrap();
        stuck.push(s);
    }
    for _ in 0..2 {
        let (code, out, err) = server.psql_as(PASSWORD, &["-c", "SELECT 41 + 1 AS answer"]);
        assert_eq!(code, 0, "{err}\nserver log:\n{}", server.log());
        assert!(out.contains("42"), "{out}");
    }
    for (i, s) in stuck.iter_mut().enumerate() {
        s.set_read_timeout(Some(super::util::PATIENCE)).unwrap();
        let mut rest = Vec::new();
        match s.read_to_end(&mut rest) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
            Err(e) => panic!("socket {i} still open: {e}"),
        }
    }
    assert!(server.log().contains("did not log in in time"), "{}", server.log());
}

/// SIGTERM stops the server within its drain limit (20 s) while two statements that would run
/// for hours (under a 1 h query_timeout) keep both of its workers busy (issue 46: SIGTERM was
/// ignored for 14 minutes).
#[test]
fn sigterm_stops_the_server_while_runaway_statements_run() {
    let (store, base) = demo_store();
    let tmp = tempfile::tempdir().unwrap();
    let mut server = Server::start(store, &serve_config(tmp.path(), base, "query_timeout = \"1h\"\n"));
    let runaway = || {
        std::process::Command::new("psql")
            .args(["-h", "127.0.0.1", "-p", &server.pg_port.to_string(), "-U", "grafana", "-d", "datafusion", "-X"])
            .args(["-c", "SELECT count(*) FROM generate_series(1, 1000000) AS a(x) CROSS JOIN generate_series(1, 100000000) AS b(y)"])
            .env("PGPASSWORD", PASSWORD)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap()
    };
    let mut clients = [runaway(), runaway()];
    super::hostile::wait_running(&server, 2);
    let status = server.terminate();
    for c in &mut clients {
        let _ = c.kill();
        let _ = c.wait();
    }
    assert!(status.is_some(), "serve still running {:?} after SIGTERM:\n{}", super::util::PATIENCE, server.log());
}
