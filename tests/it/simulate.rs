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

    assert_same_tables((&ingested, "ingest"), (&direct, "direct"));
    // And the ledger over it: the same report.
    let report = |store: &Path| {
        let out = util::run(&["report", "--store", store.to_str().unwrap(), "--config", concat!(env!("CARGO_MANIFEST_DIR"), "/examples/gpuledger.toml"), "--month", "2026-10", "--format", "csv", "--progress", "off"], 0);
        String::from_utf8(out.stdout).unwrap()
    };
    let a = report(&ingested);
    assert!(a.lines().count() > 3, "{a}");
    assert_eq!(a, report(&direct));
}

/// Every table of two stores, row for row (sorted, `seq` aside: it numbers a version within
/// its source file, which differs where the files do).
fn assert_same_tables(a: (&Path, &str), b: (&Path, &str)) {
    for table in TABLES {
        let (x, y) = (util::table_rows(a.0, table), util::table_rows(b.0, table));
        assert_eq!(x.len(), y.len(), "{}: rows in {} and {}", table.name, a.1, b.1);
        if let Some((x, y)) = x.iter().zip(&y).find(|(x, y)| x != y) {
            panic!("{}: first differing row\n {}: {x}\n {}: {y}", table.name, a.1, b.1);
        }
    }
}

/// A store grown the way a live one grows (the simulation written up to a cut, then the same
/// simulation from the cut on, into the same store) holds what one whole run writes.
#[test]
fn a_store_grown_across_a_cut_equals_one_written_whole() {
    let dir = tempfile::tempdir().unwrap();
    let (whole, grown, late) = (dir.path().join("whole"), dir.path().join("grown"), dir.path().join("late"));
    // Every pool (the T4 node writes a file per scrape, the first L4 node an HA pair), three
    // days; the cut is the start of the third.
    let cut = "2026-11-01T00:00:00Z";
    let simulate = |store: &Path, window: &[&str]| -> Value {
        let mut args = vec!["simulate", "--store", store.to_str().unwrap(), "--format", "json", "--progress", "off"];
        args.extend(["--gpus", "8", "--days", "3", "--scrape-interval", "10m", "--seed", "11", "--start", "2026-10-30T00:00:00Z"]);
        args.extend(window);
        let out = util::run(&args, 0);
        serde_json::from_slice(&out.stdout).expect("summary is JSON")
    };
    let samples = |store: &Path, op: &str| util::count(store, &format!("SELECT count(*) AS n FROM gpu_samples WHERE ts {op} '{cut}'"));

    let all = simulate(&whole, &[]);
    let first = simulate(&grown, &["--emit-until", cut]);
    // The first half alone: two days of samples, none from the cut on.
    assert_eq!(samples(&grown, ">="), 0);
    let before = samples(&grown, "<");
    assert!(before > 1000, "{before}");
    let second = simulate(&grown, &["--emit-from", cut]);
    // Each sample is written once: the halves' new rows add up to the whole's.
    assert_eq!(util::written(&first, "gpu_samples") + util::written(&second, "gpu_samples"), util::written(&all, "gpu_samples"));
    assert_same_tables((&whole, "whole"), (&grown, "grown"));

    // The second half alone: the last day, nothing before the cut.
    simulate(&late, &["--emit-from", cut]);
    assert_eq!(samples(&late, "<"), 0);
    let after = samples(&late, ">=");
    assert!(after > 500, "{after}");
    assert_eq!(before + after, samples(&whole, ">=") + samples(&whole, "<"));
    // The truth is the whole period's in every store.
    let truth = std::fs::read(whole.join("expected.json")).unwrap();
    assert!(std::fs::read(grown.join("expected.json")).unwrap() == truth && std::fs::read(late.join("expected.json")).unwrap() == truth);
}

#[test]
fn an_empty_window_is_refused_naming_both_ends() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let (from, until) = ("2026-11-01T00:00:00Z", "2026-10-31T00:00:00Z");
    let out = util::run(&["simulate", "--store", store.to_str().unwrap(), "--gpus", "8", "--emit-from", from, "--emit-until", until], 2);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(from) && err.contains(until) && err.trim().lines().count() == 1, "{err}");
    assert!(!store.exists(), "nothing written");
}

#[test]
fn simulate_needs_a_place_to_write() {
    let out = util::run(&["simulate", "--gpus", "8"], 2);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--out") && err.contains("--store"), "{err}");
}
