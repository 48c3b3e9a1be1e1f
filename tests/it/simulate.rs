//! `gpuledger simulate --store`: the store an ingest of the simulated capture gives, without the
//! DCGM text ever on disk.

use std::path::Path;

use gpuledger_schemas::TABLES;
use serde_json::Value;

use crate::util;

#[test]
fn simulate_into_the_store_equals_simulate_then_ingest() {
    let dir = tempfile::tempdir().unwrap();
    let (cap, ingested, direct) = (dir.path().join("capture"), dir.path().join("ingested"), dir.path().join("direct"));
    // Every pool (the T4 node writes one file per scrape, without timestamps), two UTC days.
    let sim = ["--gpus", "16", "--days", "2", "--scrape-interval", "10m", "--seed", "11"];
    let mut args = vec!["simulate", "--out", cap.to_str().unwrap()];
    args.extend(sim);
    util::run(&args, 0);
    let by_ingest = util::ingest(&[&cap], &ingested);

    let mut args = vec!["simulate", "--store", direct.to_str().unwrap(), "--format", "json", "--progress", "off"];
    args.extend(sim);
    let out = util::run(&args, 0);
    let by_feed: Value = serde_json::from_slice(&out.stdout).expect("summary is JSON");

    // Both say they read and wrote the same.
    for key in ["rows_written", "samples", "blank_samples", "objects", "files"] {
        assert_eq!(by_feed[key], by_ingest[key], "{key}");
    }
    assert!(util::written(&by_feed, "gpu_samples") > 1000, "{by_feed}");
    assert_eq!(by_feed["rejected"], 0, "{by_feed}");
    // No DCGM text left anywhere: the Kubernetes files went through a temporary directory.
    assert!(!direct.join("dcgm").exists() && !direct.join("kubernetes").exists());
    // The truth lands in the store's root, the same bytes.
    assert_eq!(std::fs::read(direct.join("expected.json")).unwrap(), std::fs::read(cap.join("expected.json")).unwrap());

    // Every table, row for row.
    for table in TABLES {
        let (a, b) = (util::table_rows(&ingested, table), util::table_rows(&direct, table));
        assert_eq!(a.len(), b.len(), "{}: rows", table.name);
        if let Some((x, y)) = a.iter().zip(&b).find(|(x, y)| x != y) {
            panic!("{}: first differing row\n ingest: {x}\n direct: {y}", table.name);
        }
    }
    // And the ledger over it: the same report.
    let report = |store: &Path| {
        let out = util::run(&["report", "--store", store.to_str().unwrap(), "--config", concat!(env!("CARGO_MANIFEST_DIR"), "/examples/gpuledger.toml"), "--month", "2026-10", "--format", "csv", "--progress", "off"], 0);
        String::from_utf8(out.stdout).unwrap()
    };
    let a = report(&ingested);
    assert!(a.lines().count() > 3, "{a}");
    assert_eq!(a, report(&direct));
}

#[test]
fn simulate_needs_a_place_to_write() {
    let out = util::run(&["simulate", "--gpus", "8"], 2);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--out") && err.contains("--store"), "{err}");
}
