//! Peer readers: the Python `deltalake` package and DuckDB (PyPI) read every table of the store
//! without gpuledger, before and after compaction and VACUUM, and their counts match
//! `gpuledger query`.

use std::process::Command;

use tempfile::TempDir;

use crate::util::{count, run};

#[test]
fn delta_readers_and_duckdb_read_every_table_with_the_same_counts() {
    for module in ["duckdb", "deltalake"] {
        let probe = Command::new("python3").args(["-c", &format!("import {module}")]).output();
        assert!(probe.as_ref().is_ok_and(|o| o.status.success()), "{module} is needed for this test: python3 -m pip install {module} (.ci/run does)");
    }
    let dir = TempDir::new().unwrap();
    let cap = dir.path().join("capture");
    run(&["simulate", "--out", &cap.display().to_string(), "--gpus", "8", "--days", "2", "--scrape-interval", "60s"], 0);
    let store = dir.path().join("store");
    // Small flushes: many files per day, so that compaction has something to do.
    run(&["ingest", "--progress", "off", "--flush-rows", "2000", "--store", &store.display().to_string(), &cap.display().to_string()], 0);
    let names: Vec<&str> = gpuledger_schemas::TABLES.iter().map(|t| t.name).collect();
    let ours: Vec<i64> = names.iter().map(|t| count(&store, &format!("SELECT count(*) AS n FROM {t}"))).collect();
    assert!(ours.iter().filter(|n| **n > 0).count() >= 8, "the simulated capture should fill most tables: {ours:?}");

    let check = |stage: &str, glob_counts_more: bool| {
        let peers = peer_counts(&store, &names);
        for (t, n) in names.iter().zip(&ours) {
            let p = &peers[*t];
            assert_eq!(p["delta"].as_i64(), Some(*n), "{stage}: deltalake reads {t}: {p}");
            assert_eq!(p["duckdb_snapshot"].as_i64(), Some(*n), "{stage}: DuckDB over the snapshot's files reads {t}: {p}");
            let glob = p["duckdb_glob"].as_i64().unwrap();
            if glob_counts_more {
                assert!(glob >= *n, "{stage}: {t}: {p}");
            } else {
                assert_eq!(glob, *n, "{stage}: a plain glob over {t}: {p}");
            }
            assert_eq!(p["unsorted_files"].as_i64(), Some(0), "{stage}: every file of {t} is in the table's sort order: {p}");
        }
        peers
    };
    check("after ingest", false);
    run(&["compact", "--store", &store.display().to_string(), "--before", "2100-01-01", "--progress", "off"], 0);
    // Until VACUUM, the replaced files are still there: a plain glob counts them again.
    let peers = check("after compact", true);
    assert!(peers["gpu_samples"]["duckdb_glob"].as_i64().unwrap() > ours[names.iter().position(|t| *t == "gpu_samples").unwrap()], "{peers}");
    run(&["vacuum", "--store", &store.display().to_string(), "--retain", "1ms"], 0);
    check("after vacuum", false);
}

/// Per table: rows as the Python `deltalake` package reads the table, as DuckDB reads the
/// files of the table's current version, and as DuckDB reads a plain glob of its directory;
/// and how many of those files are not sorted by the table's sort columns.
fn peer_counts(store: &std::path::Path, names: &[&str]) -> serde_json::Value {
    let script = r#"
import duckdb, json, os, sys
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import DeltaTable
root = sys.argv[1]
sorts = json.loads(sys.argv[2])
out = {}
for t, sort_by in sorts.items():
    d = os.path.join(root, t)
    if not os.path.isdir(os.path.join(d, "_delta_log")):
        out[t] = {"delta": 0, "duckdb_snapshot": 0, "duckdb_glob": 0, "unsorted_files": 0}
        continue
    dt = DeltaTable(d)
    delta = dt.to_pyarrow_dataset().count_rows()
    files = dt.file_uris()
    snap = duckdb.execute("SELECT count(*) FROM read_parquet(?, hive_partitioning = true)", [files]).fetchone()[0] if files else 0
    glob = duckdb.execute(f"SELECT count(*) FROM read_parquet('{d}/date=*/*.parquet', hive_partitioning = true)").fetchone()[0]
    unsorted = 0
    for f in files:
        tbl = pq.read_table(f)
        if tbl.num_rows == 0 or not sort_by:
            continue
        order = pc.sort_indices(tbl, sort_keys=[(c, "ascending") for c in sort_by], null_placement="at_start")
        # Rows already in order, up to ties: the sorted keys equal the stored keys.
        for c in sort_by:
            if not tbl.column(c).equals(pc.take(tbl.column(c), order)):
                unsorted += 1
                break
    out[t] = {"delta": delta, "duckdb_snapshot": snap, "duckdb_glob": glob, "unsorted_files": unsorted}
print(json.dumps(out))
"#;
    let sorts: serde_json::Map<String, serde_json::Value> =
        gpuledger_schemas::TABLES.iter().filter(|t| names.contains(&t.name)).map(|t| (t.name.to_string(), serde_json::json!(t.sort_by))).collect();
    let out = Command::new("python3").arg("-c").arg(script).arg(store).arg(serde_json::Value::Object(sorts).to_string()).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The whole of `queries/` in DuckDB's dialect (`bench/duckdb_port.py`, which generates it from
/// the files by a short list of mechanical edits) gives every derived table the ledger gives, on
/// a simulated store with every pool and outcome: the SQL means the same in a second engine, and
/// the port the fleet benchmark times the ledger against stays a like-for-like peer.
#[test]
fn duckdb_running_the_ported_queries_gives_every_derived_table_of_the_ledger() {
    let probe = Command::new("python3").args(["-c", "import duckdb"]).output();
    assert!(probe.as_ref().is_ok_and(|o| o.status.success()), "duckdb is needed for this test: python3 -m pip install duckdb (.ci/run does)");
    let dir = TempDir::new().unwrap();
    let store = dir.path().join("store").display().to_string();
    let config = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/gpuledger.toml");
    run(&["simulate", "--store", &store, "--gpus", "16", "--days", "3", "--scrape-interval", "300s", "--progress", "off"], 0);
    run(&["ledger", "--store", &store, "--config", config, "--progress", "off"], 0);
    // A day at a time, as the ledger runs a store (the benchmark's way), and every day at once.
    for (mode, extra) in [("per day", None), ("at once", Some("--at-once"))] {
        let out = dir.path().join(format!("duckdb-{}", mode.replace(' ', "-")));
        let port = Command::new("python3")
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/bench/duckdb_port.py"))
            .args(["--store", &store, "--config", config, "--out", &out.display().to_string(), "--threads", "2"])
            .args(extra)
            .output()
            .unwrap();
        let said = format!("{mode}: {}{}", String::from_utf8_lossy(&port.stdout), String::from_utf8_lossy(&port.stderr));
        assert_eq!(port.status.code(), Some(0), "the port disagrees with the ledger:\n{said}");
        let compared: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("duckdb_compare.json")).unwrap()).unwrap();
        assert_eq!(compared["all_agree"], true, "{said}");
        assert_eq!(compared["sample_steps"], mode, "{said}");
        // Every derived table was compared (none skipped), strictly, and the main ones are not empty.
        for table in gpuledger_schemas::DERIVED_TABLES.iter().map(|t| t.name) {
            let t = &compared["tables"][table];
            assert_eq!(t["agree"], true, "{table}: {t}\n{said}");
            assert_eq!(t["ours_rows"], t["ref_rows"], "{table}: {t}");
        }
        for table in ["priced_state_hours", "chargeback_monthly", "pod_runs", "run_segments", "queue_waits", "gpu_hourly"] {
            assert!(compared["tables"][table]["ref_rows"].as_u64().unwrap() > 0, "{table} is empty: the case checks nothing there");
        }
        assert!(compared["warnings"].as_array().is_none_or(|w| w.is_empty()), "the port had to bend a comparison: {}", compared["warnings"]);
    }
}
