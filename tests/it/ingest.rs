//! Ingest behaviour: both DCGM timestamp styles, object streams, located errors, idempotence,
//! crash and rerun, and the simulator's own counts.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tempfile::TempDir;

use crate::util::{bin, count, ingest, query, run, walk, written};

fn write(dir: &Path, rel: &str, text: &str) -> std::path::PathBuf {
    let p = dir.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(&p, text).unwrap();
    p
}

const LABELS: &str = r#"gpu="0",UUID="GPU-aa",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="node-1",container="main",namespace="ml",pod="train-0""#;

#[test]
fn both_timestamp_styles_and_a_broken_line() {
    let dir = TempDir::new().unwrap();
    let cap = dir.path().join("cap");
    // Style 1: per-sample millisecond timestamps (federate), three scrapes, line 4 broken.
    write(&cap, "fed/node-1.prom", &format!(
        "DCGM_FI_DEV_GPU_UTIL{{{LABELS}}} 80 1790812800000\nDCGM_FI_DEV_GPU_TEMP{{{LABELS}}} 60 1790812800000\n\
         DCGM_FI_DEV_GPU_UTIL{{{LABELS}}} 81 1790812830000\nDCGM_FI_DEV_GPU_TEMP{{{LABELS} 61 1790812830000\n\
         DCGM_FI_DEV_GPU_UTIL{{{LABELS}}} 82 1790812860000"));
    // Style 2: one scrape per file, named by its time (millis, then RFC 3339), no timestamps.
    let l2 = LABELS.replace("GPU-aa", "GPU-bb").replace("gpu=\"0\"", "gpu=\"1\"");
    write(&cap, "scrapes/1790812800000.prom", &format!("# HELP DCGM_FI_DEV_GPU_UTIL util\n# TYPE DCGM_FI_DEV_GPU_UTIL gauge\nDCGM_FI_DEV_GPU_UTIL{{{l2}}} 5\n"));
    write(&cap, "scrapes/2026-10-01T00:00:30Z.prom", &format!("DCGM_FI_DEV_GPU_UTIL{{{l2}}} 6"));
    let store = dir.path().join("store");
    let s = ingest(&[&cap], &store);
    assert_eq!(s["rejected"], 1, "{s}");
    let err = s["errors"][0].as_str().unwrap();
    assert!(err.contains("fed/node-1.prom:4: label set is not closed with `}`: DCGM_FI_DEV_GPU_TEMP{"), "{err}");
    assert_eq!(s["warnings"].as_array().unwrap().len(), 0, "file names carried the time: {s}");
    let rows = query(&store, "SELECT uuid, CAST(ts AS BIGINT) AS t, gpu_util, temp_c FROM gpu_samples ORDER BY uuid, ts");
    let got: Vec<(String, i64, f64)> = rows.iter().map(|r| (r["uuid"].as_str().unwrap().into(), r["t"].as_i64().unwrap(), r["gpu_util"].as_f64().unwrap())).collect();
    assert_eq!(got, [
        ("GPU-aa".into(), 1_790_812_800_000, 80.0),
        ("GPU-aa".into(), 1_790_812_830_000, 81.0),
        ("GPU-aa".into(), 1_790_812_860_000, 82.0),
        ("GPU-bb".into(), 1_790_812_800_000, 5.0),
        ("GPU-bb".into(), 1_790_812_830_000, 6.0),
    ]);
    assert_eq!(rows[1]["temp_c"], Value::Null, "the broken temperature line is lost, nothing else");
    assert_eq!(rows[0]["temp_c"].as_f64(), Some(60.0));
}

const POD_A: &str = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","namespace":"ml","uid":"u-a","resourceVersion":"1","creationTimestamp":"2026-10-01T00:00:00Z"},"spec":{"nodeName":"node-1"},"status":{"phase":"Running"}}"#;
const POD_B: &str = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"b","namespace":"ml","uid":"u-b","resourceVersion":"2","creationTimestamp":"2026-10-01T00:01:00Z"},"spec":{"nodeName":"node-1"},"status":{"phase":"Pending"}}"#;

#[test]
fn object_streams_yaml_and_located_errors() {
    let dir = TempDir::new().unwrap();
    let cap = dir.path().join("k8s");
    // Line-delimited watch stream with a broken object on line 2.
    write(&cap, "pods.jsonl", &format!(
        "{{\"type\":\"ADDED\",\"object\":{POD_A}}}\n{{\"type\":\"MODIFIED\",\"object\":{{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{{\"name\":\"a\"\n{{\"type\":\"ADDED\",\"object\":{POD_B}}}\n"));
    // Pretty-printed concatenated events, the last one truncated.
    let pretty_a = serde_json::to_string_pretty(&serde_json::json!({"type": "ADDED", "object": serde_json::from_str::<Value>(POD_A).unwrap()})).unwrap();
    let pretty_b = serde_json::to_string_pretty(&serde_json::json!({"type": "DELETED", "object": serde_json::from_str::<Value>(POD_B).unwrap()})).unwrap();
    let truncated = &pretty_b[..pretty_b.len() / 2];
    write(&cap, "pretty.json", &format!("{pretty_a}\n{truncated}"));
    // YAML, two documents plus an unknown kind.
    write(&cap, "ns.yaml", "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: ml\n  uid: ns-1\n  labels:\n    team: research\n---\napiVersion: example.com/v1\nkind: Gizmo\nmetadata:\n  name: g\n");
    let store = dir.path().join("store");
    let s = ingest(&[&cap], &store);
    let errors: Vec<&str> = s["errors"].as_array().unwrap().iter().map(|e| e.as_str().unwrap()).collect();
    assert_eq!(errors.len(), 2, "{s}");
    // Found on line 3, where the unclosed object from line 2 runs into the next event.
    assert!(errors.iter().any(|e| e.contains("pods.jsonl:3") && e.contains("starting at line 2")), "{errors:?}");
    assert!(errors.iter().any(|e| e.contains("pretty.json:") && e.contains(&format!("(byte {})", pretty_a.len() + 1))), "{errors:?}");
    assert_eq!(s["skipped"]["unknown_kind"], 1, "{s}");
    assert_eq!(s["objects"]["Pod"], 3, "{s}");
    assert_eq!(s["objects"]["Namespace"], 1, "{s}");
    // Pod a was seen twice with the same resourceVersion and event type: stored once.
    assert_eq!(count(&store, "SELECT count(*) AS n FROM pods"), 2);
    assert_eq!(count(&store, "SELECT count(*) AS n FROM k8s_objects"), 3);
    let ns = query(&store, "SELECT name, labels FROM namespaces");
    assert_eq!(ns[0]["labels"], "{\"team\":\"research\"}");
}

/// Every table's distinct and total rows, for comparing stores (one query: each run of the
/// binary costs a second or so in a debug build).
fn snapshot(store: &Path) -> Vec<(String, i64)> {
    let sql = gpuledger_schemas::TABLES
        .iter()
        .map(|t| format!("SELECT '{0}' AS t, (SELECT count(*) FROM (SELECT DISTINCT * FROM {0}) d) AS distinct_rows, (SELECT count(*) FROM {0}) AS n", t.name))
        .collect::<Vec<_>>()
        .join(" UNION ALL ");
    let rows = query(store, &format!("SELECT * FROM ({sql}) ORDER BY t"));
    assert_eq!(rows.len(), gpuledger_schemas::TABLES.len(), "{rows:?}");
    let name = |r: &Value| r["t"].as_str().unwrap().to_owned();
    rows.iter()
        .map(|r| (name(r), r["distinct_rows"].as_i64().unwrap()))
        .chain(rows.iter().map(|r| (format!("{} rows", name(r)), r["n"].as_i64().unwrap())))
        .collect()
}

fn simulate(dir: &Path, gpus: &str, days: &str) -> std::path::PathBuf {
    let out = dir.join("capture");
    run(&["simulate", "--out", &out.display().to_string(), "--gpus", gpus, "--days", days, "--scrape-interval", "60s", "--seed", "7"], 0);
    out
}

#[test]
fn simulated_capture_lands_exactly_and_reingest_changes_nothing() {
    let dir = TempDir::new().unwrap();
    let cap = simulate(dir.path(), "16", "1");
    let expected: Value = serde_json::from_slice(&std::fs::read(cap.join("expected.json")).unwrap()).unwrap();
    let store = dir.path().join("store");
    let s = ingest(&[&cap], &store);
    assert_eq!(s["rejected"], 0, "{s}");
    assert_eq!(s["samples"], expected["totals"]["samples"], "{s}");
    assert_eq!(written(&s, "gpu_samples"), expected["totals"]["gpu_rows"].as_u64().unwrap());
    assert_eq!(s["blank_samples"], expected["totals"]["blank_values"]);
    for (kind, n) in expected["totals"]["objects_by_kind"].as_object().unwrap() {
        assert_eq!(&s["objects"][kind], n, "object versions of kind {kind}");
    }
    let before = snapshot(&store);
    for (name, n) in &before[..gpuledger_schemas::TABLES.len()] {
        let rows = before.iter().find(|(k, _)| k == &format!("{name} rows")).unwrap().1;
        assert_eq!(*n, rows, "{name} holds duplicate rows");
    }
    let again = ingest(&[&cap], &store);
    assert_eq!(again["files_written"], 0, "{again}");
    assert_eq!(snapshot(&store), before);
}

#[test]
fn killed_ingest_then_rerun_equals_one_clean_run() {
    use std::os::unix::process::ExitStatusExt;
    let dir = TempDir::new().unwrap();
    let cap = simulate(dir.path(), "16", "2");
    let clean = dir.path().join("clean");
    ingest(&[&cap], &clean);
    let want = snapshot(&clean);
    let parquet_files = |store: &Path| walk(store).iter().filter(|p| p.extension().is_some_and(|x| x == "parquet")).count();
    // Kill moments by progress, not by the clock: once the store holds 1, 4 and 12 Parquet
    // files (small flushes, so the kill lands between and inside file writes). Whether the
    // kill caught the run before its end is read from how it ended, and a run that finished
    // first is started again, so every attempt really is a crash.
    for (attempt, files) in [1usize, 4, 12].into_iter().enumerate() {
        let store = dir.path().join(format!("crash-{attempt}"));
        let t0 = std::time::Instant::now();
        let mut starts = 0;
        let at_kill = loop {
            starts += 1;
            let _ = std::fs::remove_dir_all(&store);
            let mut child = bin()
                .args(["ingest", "--progress", "off", "--flush-rows", "2000", "--threads", "1", "--store"])
                .arg(&store)
                .arg(&cap)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            while parquet_files(&store) < files && child.try_wait().unwrap().is_none() {
                std::thread::sleep(Duration::from_millis(2));
            }
            let at_kill = parquet_files(&store);
            let _ = child.kill(); // SIGKILL: no chance to clean up
            let status = child.wait().unwrap();
            if status.signal() == Some(9) {
                break at_kill;
            }
            assert!(status.success(), "ingest failed on its own: {status}");
            assert!(t0.elapsed() < crate::util::PATIENCE, "every ingest ended before it could be killed with {files} files written");
        };
        eprintln!("kill {attempt}: {at_kill} Parquet files written, {starts} start(s)");
        ingest(&[&cap], &store);
        assert_eq!(snapshot(&store), want, "after a kill with {at_kill} Parquet files written");
        let leftovers: Vec<_> = walk(&store).into_iter().filter(|p| p.to_string_lossy().ends_with(".tmp")).collect();
        assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
    }
}

#[test]
fn store_layout_is_hive_partitioned_parquet() {
    let dir = TempDir::new().unwrap();
    let cap = simulate(dir.path(), "8", "2");
    let store = dir.path().join("store");
    ingest(&[&cap], &store);
    let all = walk(&store.join("gpu_samples"));
    // The table's log lists its files; everything else is Parquet in day partitions.
    let log: Vec<_> = all.iter().filter(|p| p.parent().unwrap().ends_with("_delta_log")).collect();
    assert!(log.iter().any(|p| p.file_name().unwrap() == "00000000000000000000.json"), "no first commit in {log:?}");
    let files: Vec<_> = all.iter().filter(|p| !p.parent().unwrap().ends_with("_delta_log")).collect();
    assert!(!files.is_empty());
    for f in &files {
        let rel = f.strip_prefix(store.join("gpu_samples")).unwrap().to_string_lossy().into_owned();
        let (part, name) = rel.split_once('/').unwrap();
        assert!(part.starts_with("date=2026-1") && part.len() == "date=2026-10-30".len(), "{rel}");
        assert!(name.starts_with("part-") && name.ends_with(".parquet"), "{rel}");
        let bytes = std::fs::read(f).unwrap();
        assert_eq!(&bytes[..4], b"PAR1");
        assert_eq!(&bytes[bytes.len() - 4..], b"PAR1");
    }
    // Two days from 2026-10-30: two date partitions, and the partition column prunes.
    let days = query(&store, "SELECT date, count(*) AS n FROM gpu_samples GROUP BY date ORDER BY date");
    assert_eq!(days.len(), 2, "{days:?}");
    assert_eq!(days[0]["date"], "2026-10-30");
    let n30 = days[0]["n"].as_i64().unwrap();
    assert_eq!(count(&store, "SELECT count(*) AS n FROM gpu_samples WHERE date = '2026-10-30'"), n30);
    assert_eq!(count(&store, "SELECT count(*) AS n FROM gpu_samples WHERE date = '2026-10-30' AND ts >= '2026-10-31T00:00:00Z'"), 0);
}

#[test]
fn an_unreadable_file_is_reported_and_the_rest_lands() {
    let dir = TempDir::new().unwrap();
    let cap = dir.path().join("cap");
    write(&cap, "1790812800000.prom", "up{job=\"x\"} 1\n");
    std::os::unix::fs::symlink(dir.path().join("gone.prom"), cap.join("dangling.prom")).unwrap();
    let store = dir.path().join("store");
    let s = ingest(&[&cap], &store);
    assert_eq!(s["rejected_by_reason"]["unreadable_file"], 1, "{s}");
    assert!(s["errors"][0].as_str().unwrap().contains("dangling.prom: cannot read"), "{s}");
    assert_eq!(written(&s, "metric_samples"), 1);
}
