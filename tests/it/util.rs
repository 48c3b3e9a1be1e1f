//! Helpers: run the binary, find the real fixtures, read results back.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use serde_json::Value;

/// How long a test waits for something the system under test will do (a server to be ready, a
/// collector to catch up, a count to be reached) before it calls the system hung and fails.
/// A hang guard, never a speed requirement: no assertion passes or fails by how busy the machine
/// is, so it is generous enough that only a real hang reaches it.
pub const PATIENCE: Duration = Duration::from_secs(300);

/// The `gpuledger` binary under test.
pub fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_gpuledger"))
}

/// The real captures in `tests/fixtures/real` (their sources: PROVENANCE.md there).
pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/real")
}

pub fn fixture(rel: &str) -> PathBuf {
    let p = fixtures().join(rel);
    assert!(p.exists(), "fixture {} is missing", p.display());
    p
}

/// `examples/gpuledger.toml`: the documented configuration, as the tests' prices and overheads.
pub fn example_config() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/gpuledger.toml")
}

/// Every file under `dir`, at any depth (none if it does not exist).
pub fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.path().is_dir() {
                out.extend(walk(&e.path()));
            } else {
                out.push(e.path());
            }
        }
    }
    out
}

/// Copies the directory `from` to `to`, at any depth.
pub fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// Runs the binary; panics with its output unless it exits with `code`.
pub fn run(args: &[&str], code: i32) -> Output {
    let out = bin().args(args).output().expect("binary runs");
    assert_eq!(
        out.status.code(),
        Some(code),
        "gpuledger {args:?}\n--- stdout\n{}\n--- stderr\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Ingests `paths` into `store` and returns the JSON summary.
pub fn ingest(paths: &[&Path], store: &Path) -> Value {
    let mut args: Vec<String> = vec!["ingest".into(), "--format".into(), "json".into(), "--progress".into(), "off".into(), "--store".into(), store.display().to_string()];
    args.extend(paths.iter().map(|p| p.display().to_string()));
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = run(&refs, 0);
    serde_json::from_slice(&out.stdout).expect("summary is JSON")
}

/// Runs SQL over the store and returns the rows as JSON objects.
pub fn query(store: &Path, sql: &str) -> Vec<Value> {
    let out = run(&["query", "--store", &store.display().to_string(), "--format", "json", sql], 0);
    match serde_json::from_slice(&out.stdout).expect("query output is JSON") {
        Value::Array(rows) => rows,
        other => panic!("expected an array, got {other}"),
    }
}

/// A single integer from `SELECT count(*) AS n ...`-style SQL.
pub fn count(store: &Path, sql: &str) -> i64 {
    let rows = query(store, sql);
    rows[0]["n"].as_i64().unwrap_or_else(|| panic!("no integer `n` in {rows:?}"))
}

/// Rows a summary says were written to `table`.
pub fn written(summary: &Value, table: &str) -> u64 {
    summary["rows_written"][table].as_u64().unwrap_or(0)
}

/// Rows of a table as sorted JSON strings, without `seq` (a per-stream position offline, a
/// per-run counter live: compared separately where it matters).
pub fn table_rows(store: &Path, table: &gpuledger_schemas::Table) -> Vec<String> {
    let cols: Vec<&str> = table.columns.iter().map(|c| c.name).filter(|c| *c != "seq").collect();
    let rows = query(store, &format!("SELECT {} FROM {}", cols.join(", "), table.name));
    let mut out: Vec<String> = rows.iter().map(|r| r.to_string()).collect();
    out.sort();
    out
}

/// Identical rows, every value equal to the last bit: for the tables of money and GPU time,
/// which are sums of decimals and of integer nanoseconds (docs/accounting.md "Money is exact"), so no
/// engine, store or run may change a figure of them.
pub fn assert_identical_rows(got: &[Value], want: &[Value], what: &str) {
    assert!(!want.is_empty(), "{what}: no rows to compare");
    assert_eq!(got.len(), want.len(), "{what}: row count");
    for (g, w) in got.iter().zip(want) {
        assert_eq!(g, w, "{what}: rows differ");
    }
}

/// Equal rows, numbers within a relative 1e-9 (parallel sums differ in the last bits): for the
/// floats that stay floats, energy and measured readings.
pub fn assert_same_rows(got: &[Value], want: &[Value], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: row count");
    assert!(!want.is_empty(), "{what}: no rows to compare");
    for (g, w) in got.iter().zip(want) {
        let (g, w) = (g.as_object().unwrap(), w.as_object().unwrap());
        assert_eq!(g.keys().collect::<Vec<_>>(), w.keys().collect::<Vec<_>>(), "{what}: columns");
        for (k, wv) in w {
            let gv = &g[k];
            match (gv.as_f64(), wv.as_f64()) {
                (Some(a), Some(b)) => assert!((a - b).abs() <= 1e-9 * b.abs().max(1.0), "{what}: {k} = {a}, want {b} in {w:?}"),
                _ => assert_eq!(gv, wv, "{what}: {k} in {w:?}"),
            }
        }
    }
}
