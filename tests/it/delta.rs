//! The store's tables as Delta tables: readers see each row exactly once while `compact` and
//! a second ingest commit; two ingests at once store each row once; a writer killed anywhere
//! (ingest, compact, vacuum) leaves a store that a rerun makes whole.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::Value;
use tempfile::TempDir;

use crate::util::{PATIENCE, bin, ingest, run};

/// Row count and a checksum of a key column of the tables a reader loop watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Totals {
    samples: i64,
    samples_ts: i64,
    pods: i64,
}

const TOTALS_SQL: &str = "SELECT (SELECT count(*) FROM gpu_samples) AS s, (SELECT sum(CAST(ts AS BIGINT) % 1000003) FROM gpu_samples) AS c, (SELECT count(*) FROM pods) AS p";

/// The totals a reader sees when it opens the store now (one snapshot for the whole query).
async fn totals(location: &gpuledger_store::StoreLocation) -> Totals {
    let ledger = gpuledger_ledger::Ledger::open(location).await.unwrap();
    let batches = ledger.query(TOTALS_SQL).await.unwrap();
    let rows = gpuledger_engine::exec::rows(&batches).unwrap();
    let n = |k: &str| rows[0][k].as_i64().unwrap_or(0);
    Totals { samples: n("s"), samples_ts: n("c"), pods: n("p") }
}

/// Opens the store and reads its totals over and over, each time a new reader (a new
/// snapshot), from before `during` starts until after it has ended; returns every answer.
fn read_while(store: &Path, during: impl FnOnce()) -> Vec<Totals> {
    let location = gpuledger_store::StoreLocation::Local(store.to_path_buf());
    let stop = Arc::new(AtomicBool::new(false));
    let started = Arc::new(AtomicBool::new(false));
    let reader = {
        let (stop, started) = (Arc::clone(&stop), Arc::clone(&started));
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
            let mut seen = Vec::new();
            // One more read after the writer has ended, so the last answer is the final state.
            let mut last = false;
            loop {
                seen.push(rt.block_on(totals(&location)));
                started.store(true, Ordering::SeqCst);
                if last {
                    return seen;
                }
                last = stop.load(Ordering::SeqCst);
            }
        })
    };
    while !started.load(Ordering::SeqCst) {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    during();
    stop.store(true, Ordering::SeqCst);
    reader.join().unwrap()
}

fn simulate(out: &Path, gpus: &str, seed: &str, start: &str) -> PathBuf {
    run(&["simulate", "--out", &out.display().to_string(), "--gpus", gpus, "--days", "2", "--seed", seed, "--start", start, "--scrape-interval", "60s"], 0);
    out.to_path_buf()
}

/// A store of 4 GPUs x 2 days ingested in small flushes (many small files and commits, as the
/// live collector leaves them), a runtime to read it with, and what a reader sees of it.
struct SmallFlushStore {
    path: PathBuf,
    location: gpuledger_store::StoreLocation,
    rt: tokio::runtime::Runtime,
    totals: Totals,
}

fn small_flush_store(dir: &Path) -> SmallFlushStore {
    let cap = simulate(&dir.join("a"), "4", "7", "2026-10-30T00:00:00Z");
    let path = dir.join("store");
    run(&["ingest", "--progress", "off", "--flush-rows", "400", "--threads", "1", "--store", &path.display().to_string(), &cap.display().to_string()], 0);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let location = gpuledger_store::StoreLocation::Local(path.clone());
    let totals = rt.block_on(totals(&location));
    assert!(totals.samples > 0 && totals.pods > 0, "{totals:?}");
    SmallFlushStore { path, location, rt, totals }
}

/// Files per table and log version, from `gpuledger store status`.
fn status(store: &Path) -> std::collections::BTreeMap<String, (i64, i64)> {
    let out = run(&["store", "status", "--store", &store.display().to_string()], 0);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .skip(1)
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f[0].to_string(), (f[1].parse().unwrap(), f[2].parse().unwrap()))
        })
        .collect()
}

/// Data files on disk under a table's day partitions (committed or not).
fn files_on_disk(table_dir: &Path) -> usize {
    let mut n = 0;
    for day in std::fs::read_dir(table_dir).unwrap().flatten() {
        if day.file_name().to_string_lossy().starts_with("date=") {
            n += std::fs::read_dir(day.path()).unwrap().flatten().filter(|f| f.file_name().to_string_lossy().ends_with(".parquet")).count();
        }
    }
    n
}

#[test]
fn readers_see_every_row_once_while_compact_and_an_ingest_commit() {
    let dir = TempDir::new().unwrap();
    let SmallFlushStore { path: store, location, rt, totals: before } = small_flush_store(dir.path());
    let second = simulate(&dir.path().join("b"), "2", "99", "2026-11-05T00:00:00Z");
    let files_before = status(&store);
    assert!(files_before["gpu_samples"].1 > 4, "small flushes should leave many files: {files_before:?}");

    // Compaction rewrites rows, never changes them: every reader sees exactly the totals of before.
    let seen = read_while(&store, || {
        run(&["compact", "--store", &store.display().to_string(), "--before", "2100-01-01", "--progress", "off"], 0);
    });
    assert!(seen.len() >= 2, "{seen:?}");
    for t in &seen {
        assert_eq!(*t, before, "a reader during compaction saw other totals; all answers: {seen:?}");
    }
    let files_after = status(&store);
    // Two days, each now one file per table.
    assert_eq!(files_after["gpu_samples"].1, 2, "{files_after:?}");
    assert!(files_after["gpu_samples"].0 > files_before["gpu_samples"].0, "a new version: {files_after:?}");
    // The replaced files are still on disk for readers that started earlier, until VACUUM.
    assert!(files_on_disk(&store.join("gpu_samples")) > 2);

    // A second ingest commits new rows, one commit per table (its input fits one flush of
    // 1 GiB; the default 128 MiB would flush its metric samples twice): for
    // each table, every answer is the old rows or the new ones, never part of a commit. (A
    // commit is one table's: a reader may see the new pods before the new samples.)
    let mut summary = Value::Null;
    let seen = read_while(&store, || {
        let args = ["ingest", "--format", "json", "--progress", "off", "--flush-bytes", "1GiB", "--store", &store.display().to_string(), &second.display().to_string()];
        summary = serde_json::from_slice(&run(&args, 0).stdout).expect("summary is JSON");
    });
    let after = rt.block_on(totals(&location));
    assert_eq!(summary["commits"].as_u64(), summary["rows_written"].as_object().map(|m| m.len() as u64), "one commit per table written: {summary}");
    assert_eq!(after.samples - before.samples, summary["rows_written"]["gpu_samples"].as_i64().unwrap(), "{summary}");
    assert_eq!(after.pods - before.pods, summary["rows_written"]["pods"].as_i64().unwrap(), "{summary}");
    assert!(after.samples > before.samples);
    for t in &seen {
        let samples = (t.samples, t.samples_ts);
        assert!(samples == (before.samples, before.samples_ts) || samples == (after.samples, after.samples_ts), "gpu_samples during the ingest: {t:?}, neither {before:?} nor {after:?}");
        assert!(t.pods == before.pods || t.pods == after.pods, "pods during the ingest: {t:?}, neither {before:?} nor {after:?}");
    }
    assert_eq!(seen.last(), Some(&after));

    // VACUUM deletes what no version needs any more; the totals stay.
    let out = run(&["vacuum", "--store", &store.display().to_string(), "--retain", "1ms"], 0);
    assert!(String::from_utf8_lossy(&out.stdout).contains("deleted"), "{}", String::from_utf8_lossy(&out.stdout));
    assert_eq!(files_on_disk(&store.join("gpu_samples")), status(&store)["gpu_samples"].1 as usize);
    assert_eq!(rt.block_on(totals(&location)), after);
}

#[test]
fn two_ingests_at_once_of_overlapping_captures_store_each_row_once() {
    let dir = TempDir::new().unwrap();
    let cap = simulate(&dir.path().join("a"), "4", "7", "2026-10-30T00:00:00Z");
    let clean = dir.path().join("clean");
    ingest(&[&cap], &clean);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let want = rt.block_on(totals(&gpuledger_store::StoreLocation::Local(clean.clone())));
    let want_all = table_counts(&clean);

    // Both ingest the same capture into one directory at the same time, in small flushes so
    // that their commits interleave.
    let store = dir.path().join("store");
    let spawn = || {
        bin()
            .args(["ingest", "--format", "json", "--progress", "off", "--flush-rows", "500", "--threads", "1", "--store"])
            .arg(&store)
            .arg(&cap)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (spawn(), spawn());
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    for o in [&a, &b] {
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let sa: Value = serde_json::from_slice(&a.stdout).unwrap();
    let sb: Value = serde_json::from_slice(&b.stdout).unwrap();
    eprintln!("commit retries: {} and {}", sa["commit_retries"], sb["commit_retries"]);
    assert_eq!(rt.block_on(totals(&gpuledger_store::StoreLocation::Local(store.clone()))), want);
    assert_eq!(table_counts(&store), want_all);
}

/// `count(*)` of every table, through `gpuledger query`.
fn table_counts(store: &Path) -> Vec<(String, i64)> {
    gpuledger_schemas::TABLES.iter().map(|t| (t.name.to_string(), crate::util::count(store, &format!("SELECT count(*) AS n FROM {}", t.name)))).collect()
}

#[test]
fn compact_or_vacuum_killed_anywhere_then_rerun_gives_the_clean_result() {
    use std::os::unix::process::ExitStatusExt;
    let dir = TempDir::new().unwrap();
    let SmallFlushStore { path: store, location, rt, totals: want } = small_flush_store(dir.path());
    let log_entries = |t: &str| std::fs::read_dir(store.join(t).join("_delta_log")).map(|d| d.count()).unwrap_or(0);

    // Kill compaction once it has written its first new file, then once it has committed
    // one day of one table: the store reads the same, and a rerun finishes the job.
    let compacted_files = || walk_names(&store).into_iter().filter(|n| n.starts_with("part-compact-")).count();
    let samples_log = log_entries("gpu_samples");
    type KillPoint<'a> = (&'a str, Box<dyn Fn() -> bool + 'a>);
    let kill_points: [KillPoint; 2] = [("first compacted file", Box::new(|| compacted_files() > 0)), ("first commit", Box::new(|| log_entries("gpu_samples") > samples_log))];
    for (what, reached) in kill_points {
        let mut child = bin().args(["compact", "--progress", "off", "--before", "2100-01-01", "--store"]).arg(&store).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
        let t0 = std::time::Instant::now();
        while !reached() && child.try_wait().unwrap().is_none() {
            assert!(t0.elapsed() < PATIENCE, "compaction never reached {what}");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let _ = child.kill();
        let status = child.wait().unwrap();
        eprintln!("compaction at {what}: {}", if status.signal() == Some(9) { "killed" } else { "had finished" });
        assert_eq!(rt.block_on(totals(&location)), want, "after killing compaction at {what}");
    }
    run(&["compact", "--store", &store.display().to_string(), "--before", "2100-01-01", "--progress", "off"], 0);
    assert_eq!(status(&store)["gpu_samples"].1, 2);
    assert_eq!(rt.block_on(totals(&location)), want);

    // Kill VACUUM once it has deleted something; the store reads the same, a rerun deletes the rest.
    let on_disk = files_on_disk(&store.join("gpu_samples"));
    let mut child = bin().args(["vacuum", "--retain", "1ms", "--store"]).arg(&store).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    while files_on_disk(&store.join("gpu_samples")) == on_disk && child.try_wait().unwrap().is_none() {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let _ = child.kill();
    child.wait().unwrap();
    assert_eq!(rt.block_on(totals(&location)), want, "after killing vacuum");
    run(&["vacuum", "--store", &store.display().to_string(), "--retain", "1ms"], 0);
    assert_eq!(files_on_disk(&store.join("gpu_samples")), 2);
    assert_eq!(rt.block_on(totals(&location)), want);
}

fn walk_names(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if e.path().is_dir() {
            out.extend(walk_names(&e.path()));
        } else {
            out.push(e.file_name().to_string_lossy().into_owned());
        }
    }
    out
}

#[test]
fn a_store_written_before_delta_is_refused_by_readers_and_upgraded_in_place() {
    let dir = TempDir::new().unwrap();
    let cap = simulate(&dir.path().join("a"), "4", "7", "2026-10-30T00:00:00Z");
    let store = dir.path().join("store");
    ingest(&[&cap], &store);
    let want = table_counts(&store);
    // What an older gpuledger left: the same files, no logs.
    for t in gpuledger_schemas::TABLES {
        let _ = std::fs::remove_dir_all(store.join(t.name).join("_delta_log"));
    }
    let out = run(&["query", "--store", &store.display().to_string(), "SELECT count(*) FROM gpu_samples"], 2);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("gpuledger store upgrade"), "{err}");
    let out = run(&["store", "upgrade", "--store", &store.display().to_string()], 0);
    assert!(String::from_utf8_lossy(&out.stdout).contains("now a Delta table"), "{}", String::from_utf8_lossy(&out.stdout));
    assert_eq!(table_counts(&store), want);
    // Twice is harmless.
    let out = run(&["store", "upgrade", "--store", &store.display().to_string()], 0);
    assert!(String::from_utf8_lossy(&out.stdout).contains("up to date"), "{}", String::from_utf8_lossy(&out.stdout));
    assert_eq!(table_counts(&store), want);
}
