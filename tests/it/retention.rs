//! Retention (`gpuledger store expire`, `[store] retention`): samples of old months are removed
//! only once the ledger has accounted them as stored, and later ledger runs keep those months'
//! figures exactly.

use std::path::Path;

use serde_json::Value;

use crate::util::{count, ingest, query, run};

/// Derived tables with a month, and the two segment tables (by the month they ended in): the
/// tables whose rows before the horizon must survive the samples.
const MONTH_TABLES: [&str; 12] = [
    "priced_state_hours",
    "unobserved_gpu_hours",
    "chargeback_monthly",
    "accepted_units_monthly",
    "budget_monthly",
    "energy_monthly",
    "idle_reasons_monthly",
    "stranded_monthly",
    "failure_causes",
    "queue_wait_monthly",
    "gpu_hourly",
    "node_hourly",
];
const SEGMENT_TABLES: [&str; 2] = ["run_segments", "run_failures"];

/// Every row of `table` that `filter` selects, each as its JSON text, sorted.
fn rows(store: &Path, table: &str, filter: &str) -> Vec<String> {
    let mut out: Vec<String> = query(store, &format!("SELECT * FROM {table} WHERE {filter}")).iter().map(Value::to_string).collect();
    out.sort();
    out
}

/// What the derived tables hold for October (the month that expires).
fn october(store: &Path) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    for t in MONTH_TABLES {
        out.push((t.to_string(), rows(store, t, "month = '2026-10'")));
    }
    for t in SEGMENT_TABLES {
        out.push((t.to_string(), rows(store, t, "ended_at < TIMESTAMP '2026-11-01T00:00:00Z'")));
    }
    out
}

fn ledger(store: &str) {
    run(&["ledger", "--store", store, "--progress", "off"], 0);
}

fn report(store: &str, month: &str) -> String {
    String::from_utf8(run(&["report", "--store", store, "--month", month, "--format", "csv", "--progress", "off"], 0).stdout).unwrap()
}

#[test]
fn expired_months_keep_their_figures_and_only_accounted_months_expire() {
    let dir = tempfile::tempdir().unwrap();
    let cap = dir.path().join("capture");
    // Four days of October and two of November, 8 GPUs (two nodes) at a one-minute scrape.
    run(&["simulate", "--out", &cap.display().to_string(), "--gpus", "8", "--days", "6", "--seed", "5", "--start", "2026-10-28T00:00:00Z", "--scrape-interval", "60s"], 0);
    // One node's October 30th arrives late.
    let late_dir = dir.path().join("late");
    let node = std::fs::read_dir(cap.join("dcgm")).unwrap().flatten().map(|e| e.file_name()).min().unwrap();
    std::fs::create_dir_all(late_dir.join("dcgm").join(&node)).unwrap();
    std::fs::rename(cap.join("dcgm").join(&node).join("2026-10-30.prom"), late_dir.join("dcgm").join(&node).join("2026-10-30.prom")).unwrap();
    let store_path = dir.path().join("store");
    let store = store_path.display().to_string();
    ingest(&[&cap], &store_path);
    let expire = |extra: &[&str], code: i32| {
        let mut args = vec!["store", "expire", "--store", &store, "--before", "2026-11"];
        args.extend_from_slice(extra);
        let out = run(&args, code);
        (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let october_samples = "SELECT count(*) AS n FROM gpu_samples WHERE date < '2026-11-01'";

    // No ledger run yet: nothing is removed.
    let (_, err) = expire(&[], 2);
    assert!(err.contains("2026-10: no ledger run has recorded what it read") && err.contains("gpuledger ledger"), "{err}");
    assert!(count(&store_path, october_samples) > 0);

    // Accounted, then late samples arrive: October is refused again, with the counts.
    ledger(&store);
    let accounted = count(&store_path, october_samples);
    ingest(&[&late_dir], &store_path);
    let stored = count(&store_path, october_samples);
    assert!(stored > accounted);
    let (_, err) = expire(&[], 2);
    assert!(err.contains(&format!("2026-10: the last ledger run read {accounted} samples, the store holds {stored}")), "{err}");

    // Accounted as stored: a dry run removes nothing, then October goes.
    ledger(&store);
    let before = october(&store_path);
    assert!(before.iter().all(|(t, r)| !r.is_empty() || matches!(t.as_str(), "failure_causes" | "run_failures" | "stranded_monthly" | "budget_monthly")), "{before:?}");
    let october_report = report(&store, "2026-10");
    let november_hours = |store: &Path| query(store, "SELECT SUM(productive_gpu_hours + allocated_idle_gpu_hours + failed_gpu_hours + preempted_gpu_hours + unallocated_gpu_hours) AS h FROM chargeback_monthly WHERE month = '2026-11'")[0]["h"].as_f64().unwrap();
    let november_before = november_hours(&store_path);
    let (out, _) = expire(&["--dry-run"], 0);
    assert!(out.contains("would remove the samples of 2026-10"), "{out}");
    assert_eq!(count(&store_path, october_samples), stored);
    let (out, _) = expire(&[], 0);
    assert!(out.contains("removed the samples of 2026-10 (1 months before 2026-11-01)"), "{out}");
    assert_eq!(count(&store_path, october_samples), 0);
    assert_eq!(count(&store_path, "SELECT count(*) AS n FROM metric_samples WHERE date < '2026-11-01'"), 0);
    assert!(count(&store_path, "SELECT count(*) AS n FROM gpu_samples") > 0, "November stays");
    assert!(count(&store_path, "SELECT count(*) AS n FROM pods") > 0, "objects stay");

    // The ledger runs again without October's samples: October's rows are those it had.
    ledger(&store);
    assert_eq!(october(&store_path), before);
    assert_eq!(report(&store, "2026-10"), october_report);
    // November loses at most the scrape interval (a minute) by which each GPU's last October
    // sample reached into November: GPUs (and MIG instances) sampled in November x 1 minute.
    let november_after = november_hours(&store_path);
    let series = count(&store_path, "SELECT count(DISTINCT hostname || '/' || uuid || '/' || coalesce(CAST(mig_instance AS VARCHAR), '')) AS n FROM gpu_samples WHERE date >= '2026-11-01'");
    assert!(november_after <= november_before && november_before - november_after <= series as f64 / 60.0 + 1e-9, "{november_before} -> {november_after} ({series} series)");

    // Late samples for the expired month change nothing, and the next expiry removes them.
    ingest(&[&late_dir], &store_path);
    assert!(count(&store_path, october_samples) > 0);
    ledger(&store);
    assert_eq!(october(&store_path), before);
    expire(&[], 0);
    assert_eq!(count(&store_path, october_samples), 0);
    let (out, _) = expire(&[], 0);
    assert!(out.contains("nothing to remove"), "{out}");
}

#[test]
fn retention_settings_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store").display().to_string();
    let err = String::from_utf8(run(&["store", "expire", "--store", &store, "--retention", "7d"], 2).stderr).unwrap();
    assert!(err.contains("at least 31d"), "{err}");
    let err = String::from_utf8(run(&["store", "expire", "--store", &store, "--before", "2026-13"], 2).stderr).unwrap();
    assert!(err.contains("\"2026-13\" is not a month"), "{err}");
    let config = dir.path().join("g.toml");
    std::fs::write(&config, "[store]\nretention = \"2w\"\n").unwrap();
    let err = String::from_utf8(run(&["store", "expire", "--store", &store, "--config", &config.display().to_string()], 2).stderr).unwrap();
    assert!(err.contains("g.toml:2: store.retention"), "{err}");
}
