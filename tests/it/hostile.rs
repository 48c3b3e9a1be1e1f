//! Hostile load (issue 46), one group: `cargo test --test it hostile`. Runaway statements,
//! cancels and per-user turns on the SQL endpoint, and a ledger killed while it publishes its
//! tables. The other hostile cases sit beside the features they test: logins that never finish
//! (`serve_sql`), half-sent HTTP requests (`serve_http`), two ingests at once (`delta`), FIFOs
//! and devices in a capture (the collector's `ingest` tests).

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::serving::{PASSWORD, Server, demo_store, http_get, serve_config};
use super::util::{PATIENCE, bin, copy_tree, query};

/// Counts 10^14 rows: hours of work, stopped only by a limit.
const RUNAWAY: &str = "SELECT count(*) FROM generate_series(1, 1000000) AS a(x) CROSS JOIN generate_series(1, 100000000) AS b(y)";

/// psql as `user` running each of `commands` in turn, in the background.
fn psql(server: &Server, user: &str, password: &str, commands: &[&str]) -> Child {
    let mut c = Command::new("psql");
    c.args(["-h", "127.0.0.1", "-p", &server.pg_port.to_string(), "-U", user, "-d", "datafusion", "-X", "-v", "ON_ERROR_STOP=1"]);
    for sql in commands {
        c.args(["-c", sql]);
    }
    c.env("PGPASSWORD", password).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("psql runs (Debian package postgresql-client)")
}

/// Waits until the server says at least `n` statements are under way (its
/// `gpuledger_sql_statements_running` gauge), at most PATIENCE.
pub fn wait_running(server: &Server, n: u64) {
    let end = Instant::now() + PATIENCE;
    loop {
        let (_, _, metrics) = server.get("/metrics", Some(super::serving::TOKEN));
        let running = metrics.lines().find_map(|l| l.strip_prefix("gpuledger_sql_statements_running ").and_then(|v| v.trim().parse::<u64>().ok())).unwrap_or(0);
        if running >= n {
            return;
        }
        assert!(Instant::now() < end, "fewer than {n} statements running after {PATIENCE:?}:\n{metrics}\n{}", server.log());
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits for `child` (at most PATIENCE): (exit code, stdout, stderr, when it ended).
fn finish(mut child: Child) -> (Option<i32>, String, String, Instant) {
    let end = Instant::now() + PATIENCE;
    while child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < end, "psql still running after {PATIENCE:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let ended = Instant::now();
    let out = child.wait_with_output().unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned(), ended)
}

/// Two runaway cross joins under a 20 s `query_timeout`: while both run, `/healthz` and a psql
/// `SELECT 1` are answered (the statements run on threads of their own and yield between
/// batches); both statements then fail at their limit with an error that names it. The
/// latencies are printed (bench/README.md quotes them); the assertion is only that the answers
/// came while the runaways were still running, never a wall-clock bound.
#[test]
fn hostile_runaway_statements_neither_silence_the_server_nor_outlive_their_limit() {
    let (store, base) = demo_store();
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(store, &serve_config(tmp.path(), base, "query_timeout = \"20s\"\n"));
    let started = Instant::now();
    let mut runaways = [psql(&server, "grafana", PASSWORD, &[RUNAWAY]), psql(&server, "grafana", PASSWORD, &[RUNAWAY])];
    wait_running(&server, 2);

    let t = Instant::now();
    let (status, _, body) = http_get(server.http_port, "/healthz", None);
    let healthz = t.elapsed();
    assert_eq!(status, 200, "{body}");
    let t = Instant::now();
    let (code, out, err) = server.psql_as(PASSWORD, &["-A", "-t", "-c", "SELECT 1"]);
    let select = t.elapsed();
    assert_eq!((code, out.trim()), (0, "1"), "{err}");
    eprintln!("while two runaway statements ran: /healthz answered in {healthz:?}, psql SELECT 1 (login included) in {select:?}");
    for r in &mut runaways {
        assert!(r.try_wait().unwrap().is_none(), "a runaway statement ended before the probes were answered: the server did not answer them while statements ran\n{}", server.log());
    }

    for r in runaways {
        let (code, _, err, ended) = finish(r);
        assert_eq!(code, Some(1), "{err}");
        assert!(err.contains("it ran longer than query_timeout (20s)"), "{err}");
        assert!(ended - started >= Duration::from_secs(20), "stopped before its limit: {:?}", ended - started);
    }

    // The client's own limit, when shorter, is the one that fires, and is named.
    let (code, _, err, _) = finish(psql(&server, "grafana", PASSWORD, &["SET statement_timeout = '2s'", RUNAWAY]));
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("it ran longer than statement_timeout (2s)"), "{err}");

    // Ctrl-C in psql sends a cancel request: the statement stops at once, the session goes on.
    let cancelled = psql(&server, "grafana", PASSWORD, &[RUNAWAY]);
    wait_running(&server, 1);
    assert!(Command::new("kill").args(["-INT", &cancelled.id().to_string()]).status().unwrap().success());
    let (code, _, err, _) = finish(cancelled);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("canceling statement due to user request"), "{err}");

    let (_, _, metrics) = server.get("/metrics", Some(super::serving::TOKEN));
    let counter = |name: &str| metrics.lines().find_map(|l| l.strip_prefix(name).and_then(|v| v.trim().parse::<f64>().ok())).unwrap_or(-1.0);
    assert_eq!(counter("gpuledger_sql_queries_timed_out_total"), 3.0, "{metrics}");
    assert_eq!(counter("gpuledger_sql_queries_cancelled_total"), 1.0, "{metrics}");
    assert_eq!(counter("gpuledger_sql_statements_running"), 0.0, "{metrics}");
}

/// `max_statements_per_user = 1`: while grafana's runaway holds its one turn, another user's
/// statement runs, and grafana's next statement waits for a turn until its own limit and says so.
#[test]
fn hostile_one_users_runaway_leaves_other_users_their_turns() {
    let (store, base) = demo_store();
    let tmp = tempfile::tempdir().unwrap();
    let extra = "query_timeout = \"30s\"\nmax_statements_per_user = 1\n[[serve.users]]\nname = \"analyst\"\npassword = \"analyst-pw\"\n";
    let server = Server::start(store, &serve_config(tmp.path(), base, extra));
    let mut runaway = psql(&server, "grafana", PASSWORD, &[RUNAWAY]);
    wait_running(&server, 1);
    let (code, out, err, _) = finish(psql(&server, "analyst", "analyst-pw", &["SELECT count(*) AS n FROM pods"]));
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains('n'), "{out}");
    let (code, _, err, _) = finish(psql(&server, "grafana", PASSWORD, &["SET statement_timeout = '1s'", "SELECT 1"]));
    assert_eq!(code, Some(1), "{err}\nrunaway: {:?}\nserver log:\n{}", runaway.try_wait(), server.log());
    assert!(err.contains("waiting for a turn") && err.contains("max_statements_per_user (1)"), "{err}");
    assert!(runaway.try_wait().unwrap().is_none(), "the runaway ended early");
    let _ = runaway.kill();
}

/// Every price of the example configuration doubled: a ledger run with it gives other figures
/// in every priced table.
fn doubled_prices(config: &Path, to: &Path) {
    let text = std::fs::read_to_string(config).unwrap();
    let keys = ["default", "\"NVIDIA H100 80GB HBM3\"", "\"NVIDIA A100-SXM4-80GB\"", "\"NVIDIA L4\"", "\"Tesla T4\"", "h100", "a100-mig", "l4", "t4"];
    let mut out = String::new();
    let mut in_prices = false;
    for line in text.lines() {
        if line.starts_with('[') {
            in_prices = line.starts_with("[prices");
        }
        let priced = line.split_once(" = ").filter(|(k, _)| in_prices && keys.contains(k)).and_then(|(k, v)| v.trim().parse::<f64>().ok().map(|p| (k, p)));
        match priced {
            Some((k, p)) => out.push_str(&format!("{k} = {}\n", p * 2.0)),
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    std::fs::write(to, out).unwrap();
}

/// What tells two runs' tables apart: the first, a middle and a late table of the publish
/// order, each summed.
fn signature(store: &Path) -> String {
    let rows = query(store, "SELECT (SELECT round(sum(cost), 4) FROM priced_state_hours) AS a, (SELECT round(sum(total), 4) FROM chargeback_monthly) AS b, (SELECT round(sum(cost), 4) FROM failure_causes) AS c");
    rows[0].to_string()
}

/// A ledger run that dies (as under kill -9) after staging one table, after writing its publish
/// record, and after moving one table into place: a reader then sees every derived table of one
/// run (the previous run's before the record, the new run's after it), and `vacuum` finishes
/// what the dead run left, so the files themselves are one run's again and nothing staged stays.
#[test]
fn hostile_a_ledger_killed_while_publishing_leaves_one_runs_tables() {
    use std::os::unix::process::ExitStatusExt;
    let (demo, config_a) = demo_store();
    let tmp = tempfile::tempdir().unwrap();
    let config_b = tmp.path().join("doubled.toml");
    doubled_prices(config_a, &config_b);
    let ledger = |store: &Path, crash: Option<&str>| {
        let mut c = bin();
        c.args(["ledger", "--progress", "off", "--store"]).arg(store).arg("--config").arg(&config_b);
        // A killed run leaves its scratch directory behind, as under kill -9: here, not in /tmp.
        c.env("TMPDIR", tmp.path());
        if let Some(point) = crash {
            c.env("GPULEDGER_CRASH_AT", point);
        }
        c.output().unwrap()
    };
    let old = signature(demo);
    let clean = tmp.path().join("clean");
    copy_tree(demo, &clean);
    let out = ledger(&clean, None);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let new = signature(&clean);
    assert_ne!(old, new);

    for (point, expected) in [("staged-one", &old), ("published-record", &new), ("moved-one", &new)] {
        let store = tmp.path().join(point);
        copy_tree(demo, &store);
        let out = ledger(&store, Some(point));
        assert_eq!(out.status.signal(), Some(6), "{point}: the run was not stopped there: {}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(&signature(&store), expected, "{point}: a reader saw a mix of two runs' tables");
        let out = bin().args(["vacuum", "--store"]).arg(&store).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(&signature(&store), expected, "{point}: after vacuum");
        let left: Vec<String> = std::fs::read_dir(store.join("ledger")).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).filter(|n| n.starts_with(".staged-") || n == ".publish.json").collect();
        assert!(left.is_empty(), "{point}: vacuum left {left:?}");
    }
    // Each run removes the scratch directories of runs killed before it (so the first two
    // killed runs' are gone already), and its own when it ends.
    let scratch = || std::fs::read_dir(tmp.path()).unwrap().filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().starts_with("gpuledger-run-")).count();
    assert_eq!(scratch(), 1, "the last killed run's scratch directory");
    let out = ledger(&clean, None);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(scratch(), 0);
}

/// A capture holding a FIFO, a link to /dev/zero and a 64 MiB `.prom` without a newline beside
/// a real DCGM exposition: ingest reports the three by name and reason, stores the real file's
/// samples exactly as an ingest of that file alone does, and its resident memory peaks under
/// 500 MiB (GNU time's maximum RSS: the whole process, allocator included).
#[test]
fn hostile_a_capture_of_a_fifo_a_device_and_an_endless_line_is_ingested_in_bounded_memory() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let real = super::util::fixture("dcgm-metrics/a100-sxm4-mig-4-active-workloads.prom");
    let alone = dir.path().join("alone");
    std::fs::create_dir(&alone).unwrap();
    std::fs::copy(&real, alone.join("dcgm.prom")).unwrap();
    let capture = dir.path().join("capture");
    copy_tree(&alone, &capture);
    assert!(Command::new("mkfifo").arg(capture.join("fifo.prom")).status().unwrap().success());
    std::os::unix::fs::symlink("/dev/zero", capture.join("zero.prom")).unwrap();
    let mut endless = std::io::BufWriter::new(std::fs::File::create(capture.join("endless.prom")).unwrap());
    let chunk = vec![b'x'; 1 << 20];
    for _ in 0..64 {
        endless.write_all(&chunk).unwrap();
    }
    endless.flush().unwrap();
    drop(endless);

    let store = dir.path().join("store");
    let mut cmd = Command::new("/usr/bin/time");
    cmd.args(["-f", "maxrss_kib=%M", env!("CARGO_BIN_EXE_gpuledger"), "ingest", "--format", "json", "--progress", "off", "--store"]).arg(&store).arg(&capture);
    // An ingest stuck on the FIFO would never end: wait in a thread, and call that a hang.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(cmd.output());
    });
    let out = rx.recv_timeout(PATIENCE).expect("ingest hung on a FIFO or a device").expect("GNU time runs (Debian package time)");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let maxrss_kib: u64 = stderr.lines().find_map(|l| l.strip_prefix("maxrss_kib=")).and_then(|v| v.trim().parse().ok()).unwrap_or_else(|| panic!("no maxrss in {stderr}"));
    eprintln!("ingest of a FIFO, /dev/zero and a 64 MiB line: peak RSS {} MiB", maxrss_kib >> 10);
    assert!(maxrss_kib < 500 << 10, "peak RSS {} MiB", maxrss_kib >> 10);
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}\n{stderr}", String::from_utf8_lossy(&out.stdout)));
    let text = summary.to_string();
    for (file, kind) in [("fifo.prom", "not_a_file"), ("zero.prom", "not_a_file"), ("endless.prom", "line_too_long")] {
        assert!(text.contains(file) && text.contains(kind), "{file} ({kind}) not reported: {text}");
    }
    let clean = dir.path().join("clean");
    super::util::ingest(&[&alone], &clean);
    let samples = |s: &Path| query(s, "SELECT count(*) AS n, sum(power_w) AS p, count(DISTINCT uuid) AS g FROM gpu_samples");
    assert_eq!(samples(&store), samples(&clean));
    assert!(super::util::count(&clean, "SELECT count(*) AS n FROM gpu_samples") > 0);
}
