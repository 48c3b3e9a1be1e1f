//! The incremental ledger: a run reads back the days whose inputs did not change and computes
//! the rest, with the results of a run that computes everything (`--full`). The store grows as a
//! live one does: a capture cut at a midnight, then the next day's samples with the Kubernetes
//! objects' later versions (runs that settle, pods that start), then a file that came late into
//! an old day.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::util::{assert_identical_rows, assert_same_rows, example_config, ingest, run, walk};

/// The simulated capture's first day.
const START: &str = "2026-10-29T00:00:00Z";

/// Where the simulated capture is cut: the start of its fourth day (and of a month).
const CUT: &str = "2026-11-01T00:00:00Z";

/// The node whose file of the second day comes late.
const LATE: &str = "dcgm/gpu-a100-001/2026-10-30.prom";

/// The latest RFC 3339 time anywhere in a JSON value (what an object records about itself).
fn latest_time(v: &Value) -> Option<i64> {
    match v {
        Value::String(s) => chrono::DateTime::parse_from_rfc3339(s).ok().map(|t| t.timestamp_millis()),
        Value::Array(a) => a.iter().filter_map(latest_time).max(),
        Value::Object(o) => o.values().filter_map(latest_time).max(),
        _ => None,
    }
}

/// Splits a watch stream or JSON-lines file (values one after another) at `cut`: the values
/// whose latest time is before it go to `before`, the rest to `after`, each in the same order.
fn split_stream(text: &str, cut: i64, pretty: bool) -> (String, String) {
    let (mut before, mut after) = (String::new(), String::new());
    for v in serde_json::Deserializer::from_str(text).into_iter::<Value>() {
        let v = v.unwrap();
        let out = if latest_time(&v).is_some_and(|t| t < cut) { &mut before } else { &mut after };
        out.push_str(&if pretty { serde_json::to_string_pretty(&v).unwrap() } else { serde_json::to_string(&v).unwrap() });
        out.push('\n');
    }
    (before, after)
}

/// The pod whose end comes late: a GPU pod created in the capture (so sampled) that failed
/// before the cut, the earliest created, as `namespace/name`; with its versions that say it
/// failed (the watch lines a collector missed).
fn failed_gpu_pod(pods: &str, cut: i64) -> (String, Vec<String>) {
    let start = chrono::DateTime::parse_from_rfc3339(START).unwrap().timestamp_millis();
    let mut versions: std::collections::BTreeMap<String, Vec<(String, Value)>> = std::collections::BTreeMap::new();
    for line in pods.lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        let o = &v["object"];
        let key = format!("{}/{}", o["metadata"]["namespace"].as_str().unwrap(), o["metadata"]["name"].as_str().unwrap());
        versions.entry(key).or_default().push((line.to_string(), v));
    }
    let time = |v: &Value, field: &str| v["object"]["metadata"][field].as_str().and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok()).map(|t| t.timestamp_millis());
    let gpu = |o: &Value| o["spec"]["containers"].as_array().is_some_and(|cs| cs.iter().any(|c| c["resources"]["limits"].get("nvidia.com/gpu").is_some()));
    let (key, lines) = versions
        .into_iter()
        .filter(|(_, vs)| {
            let (_, last) = vs.last().unwrap();
            last["object"]["status"]["phase"] == "Failed"
                && gpu(&last["object"])
                && time(last, "creationTimestamp").is_some_and(|t| t >= start)
                && vs.iter().all(|(_, v)| latest_time(v).is_some_and(|t| t < cut))
                && vs.iter().any(|(_, v)| v["object"]["status"]["phase"] == "Running")
        })
        .min_by_key(|(_, vs)| time(&vs[0].1, "creationTimestamp"))
        .expect("the simulated capture has a GPU pod that ran and failed before the cut");
    let failed = lines.into_iter().filter(|(_, v)| v["object"]["status"]["phase"] == "Failed").map(|(l, _)| l).collect();
    (key, failed)
}

/// `capture` cut at [`CUT`] into what a collector had then (`first`), what came after
/// (`second`), the one late DCGM file (`late`) and the late last version of a failed pod
/// (`late_pod`).
fn cut_capture(capture: &Path, root: &Path) -> (PathBuf, PathBuf, PathBuf, PathBuf) {
    let cut = chrono::DateTime::parse_from_rfc3339(CUT).unwrap().timestamp_millis();
    let (first, second, late, late_pod) = (root.join("first"), root.join("second"), root.join("late"), root.join("late_pod"));
    let pods = std::fs::read_to_string(capture.join("kubernetes/pods.watch.jsonl")).unwrap();
    let (held_key, held_back) = failed_gpu_pod(&pods, cut);
    eprintln!("incremental test: the end of {held_key} comes late");
    std::fs::create_dir_all(late_pod.join("kubernetes")).unwrap();
    std::fs::write(late_pod.join("kubernetes/pods.watch.jsonl"), held_back.iter().map(|l| format!("{l}\n")).collect::<String>()).unwrap();
    for path in walk(&capture.join("dcgm")) {
        let name = path.strip_prefix(capture).unwrap().to_path_buf();
        let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
        // Per-day files are named by day, per-scrape files by their time in milliseconds.
        let before = match stem.parse::<i64>() {
            Ok(ms) => ms < cut,
            Err(_) => stem.as_str() < &CUT[..10],
        };
        let to = if name == Path::new(LATE) { &late } else if before { &first } else { &second };
        std::fs::create_dir_all(to.join(name.parent().unwrap())).unwrap();
        std::fs::copy(&path, to.join(&name)).unwrap();
    }
    assert!(late.join(LATE).exists(), "the capture has no {LATE}");
    let k8s = capture.join("kubernetes");
    for d in [&first, &second] {
        std::fs::create_dir_all(d.join("kubernetes")).unwrap();
    }
    for entry in std::fs::read_dir(&k8s).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let mut text = std::fs::read_to_string(&path).unwrap();
        if name == "pods.watch.jsonl" {
            text = text.lines().filter(|l| !held_back.iter().any(|h| h == l)).map(|l| format!("{l}\n")).collect();
        }
        if name.ends_with(".jsonl") || name.ends_with(".watch.json") {
            let (b, a) = split_stream(&text, cut, name.ends_with(".json"));
            assert!(!b.is_empty() && (name.starts_with("nodes") || !a.is_empty()), "{name}: nothing on one side of the cut");
            std::fs::write(first.join("kubernetes").join(&name), b).unwrap();
            std::fs::write(second.join("kubernetes").join(&name), a).unwrap();
        } else if name == "events.json" {
            // A List: its items on either side of the cut.
            let list: Value = serde_json::from_str(&text).unwrap();
            let items = list["items"].as_array().unwrap();
            for (dir, keep_before) in [(&first, true), (&second, false)] {
                let mut part = list.clone();
                part["items"] = Value::Array(items.iter().filter(|i| latest_time(i).is_some_and(|t| t < cut) == keep_before).cloned().collect());
                std::fs::write(dir.join("kubernetes").join(&name), serde_json::to_string_pretty(&part).unwrap()).unwrap();
            }
        } else {
            // Nodes, namespaces, Kueue's queues and flavors: there from the start.
            std::fs::copy(&path, first.join("kubernetes").join(&name)).unwrap();
        }
    }
    (first, second, late, late_pod)
}

/// What one `gpuledger ledger` run said about its days: (computed, read back), second pass.
fn ledger(store: &Path, config: &Path, extra: &[&str]) -> (usize, usize) {
    let (computed, read, _) = ledger_why(store, config, extra);
    (computed, read)
}

/// [`ledger`], with the line naming the days computed and why (empty when none was).
fn ledger_why(store: &Path, config: &Path, extra: &[&str]) -> (usize, usize, String) {
    let mut args = vec!["ledger", "--store", store.to_str().unwrap(), "--config", config.to_str().unwrap(), "--progress", "off"];
    args.extend(extra);
    let out = run(&args, 0);
    let text = String::from_utf8_lossy(&out.stderr).into_owned();
    let line = text.lines().find(|l| l.contains("day tables:")).unwrap_or_else(|| panic!("no day tables line in {text}"));
    let why = text.lines().find(|l| l.trim_start().starts_with("computed:")).unwrap_or_default().to_string();
    // "  day tables: 3 days computed, 1 reused (first pass: 2 computed, 2 reused) in ..."
    eprintln!("ledger {extra:?}:{line}\n{why}");
    let numbers: Vec<usize> = line.split(|c: char| !c.is_ascii_digit()).filter_map(|w| w.parse().ok()).collect();
    (numbers[0], numbers[1], why)
}

/// The reason `why` (a `computed:` line) gives for `day`.
fn reason<'a>(why: &'a str, day: &str) -> &'a str {
    let at = why.find(&format!("{day} (")).unwrap_or_else(|| panic!("{day} not computed: {why}"));
    let rest = &why[at + day.len() + 2..];
    &rest[..rest.find(')').unwrap()]
}

/// Every derived table, its rows sorted by their values (numbers to 6 significant digits, so
/// that sums differing in the last bits sort alike).
fn derived(store: &Path) -> Vec<(&'static str, Vec<Value>)> {
    let s = store.to_str().unwrap();
    let key = |row: &Value| -> String {
        let o = row.as_object().unwrap();
        o.values().map(|v| v.as_f64().map_or_else(|| v.to_string(), |f| format!("{f:.6e}"))).collect::<Vec<_>>().join("\u{1f}")
    };
    gpuledger_ledger::accounting::DERIVED_TABLES
        .iter()
        .map(|t| {
            let out = run(&["query", "--store", s, "--format", "json", &format!("SELECT * FROM {t}")], 0);
            let mut rows = serde_json::from_slice::<Vec<Value>>(&out.stdout).unwrap();
            rows.sort_by_cached_key(key);
            (*t, rows)
        })
        .collect()
}

/// The derived tables of money and GPU time only (no energy or readings in them).
const EXACT_TABLES: [&str; 7] = ["chargeback_monthly", "budget_monthly", "idle_reasons_monthly", "stranded_monthly", "run_segments", "run_failures", "failure_causes"];

/// The derived tables equal those of `--full` on a copy of the store.
fn assert_like_full(store: &Path, tmp: &Path, step: &str) {
    let incremental = derived(store);
    let copy = tmp.join(format!("full-{step}"));
    copy_dir(store, &copy);
    let config = example_config();
    let (computed, read) = ledger(&copy, &config, &["--full"]);
    assert_eq!(read, 0, "{step}: --full read days back");
    assert!(computed > 0);
    let full = derived(&copy);
    for ((name, got), (_, want)) in incremental.iter().zip(&full) {
        if want.is_empty() {
            assert!(got.is_empty(), "{step}: {name} has rows, --full none");
            continue;
        }
        // Money and GPU time are exact (decimals, integer nanoseconds): the tables of them are
        // identical to the last bit. The others carry energy or readings, floats summed in any
        // order.
        if EXACT_TABLES.contains(name) {
            assert_identical_rows(got, want, &format!("{step}: {name}"));
        } else {
            assert_same_rows(got, want, &format!("{step}: {name}"));
        }
    }
    // The main tables have rows: the comparison is not between empty tables.
    for name in ["priced_state_hours", "pod_runs", "run_segments", "gpu_hourly", "chargeback_monthly"] {
        assert!(full.iter().any(|(n, rows)| *n == name && !rows.is_empty()), "{step}: {name} is empty");
    }
}

fn copy_dir(from: &Path, to: &Path) {
    for path in walk(from) {
        let rel = path.strip_prefix(from).unwrap();
        std::fs::create_dir_all(to.join(rel).parent().unwrap()).unwrap();
        std::fs::copy(&path, to.join(rel)).unwrap();
    }
}


#[test]
fn a_day_later_only_what_changed_is_computed_and_the_ledger_is_that_of_a_full_run() {
    let tmp = tempfile::tempdir().unwrap();
    let capture = tmp.path().join("capture");
    let c = capture.to_str().unwrap();
    run(&["simulate", "--out", c, "--gpus", "8", "--days", "4", "--scrape-interval", "300", "--start", START, "--seed", "5"], 0);
    let (first, second, late, late_pod) = cut_capture(&capture, tmp.path());
    let store = tmp.path().join("store");
    let config = example_config();

    // Three days, less one late file: every day computed.
    ingest(&[&first], &store);
    assert_eq!(ledger(&store, &config, &[]), (3, 0), "first run");
    // Nothing new: every day read back, the same tables.
    let before = derived(&store);
    assert_eq!(ledger(&store, &config, &[]), (0, 3), "run over an unchanged store");
    for ((name, got), (_, want)) in derived(&store).iter().zip(&before) {
        if !want.is_empty() {
            assert_same_rows(got, want, &format!("unchanged: {name}"));
        }
    }

    // The next day and the objects' later versions: the new day and the day before it (its last
    // observations now have successors) computed; what else depends on which runs settled.
    ingest(&[&second], &store);
    let (computed, read, why) = ledger_why(&store, &config, &[]);
    assert_eq!(computed + read, 4);
    assert!(computed >= 2, "the new day and the one before it are computed ({computed})");
    assert_eq!(reason(&why, "2026-11-01"), "new");
    assert!(reason(&why, "2026-10-31").contains("next observations"), "{why}");
    assert_like_full(&store, tmp.path(), "next-day");

    // A late file into the second day: that day and the one after it (whose first observations
    // may start in its last second) are computed again; the last day is read back.
    ingest(&[&late], &store);
    let (computed, read, why) = ledger_why(&store, &config, &[]);
    assert_eq!(computed + read, 4);
    for day in ["2026-10-30", "2026-10-31"] {
        assert!(reason(&why, day).contains("sample files"), "{why}");
    }
    assert!(computed >= 2 && read >= 1, "late file: {computed} computed, {read} read back");
    assert_like_full(&store, tmp.path(), "late-file");

    // The last version of a pod that failed days ago comes late (a watch that missed it): the
    // days it ran are restated (its time there is `failed` now), though no sample changed.
    ingest(&[&late_pod], &store);
    let (computed, read, why) = ledger_why(&store, &config, &[]);
    assert_eq!(computed + read, 4);
    assert!(why.contains("(runs)"), "the pod's days were computed because its run changed: {why}");
    assert!(computed >= 1 && read >= 1, "late pod: {computed} computed, {read} read back");
    assert_like_full(&store, tmp.path(), "late-pod");

    // The configuration: a change the sample steps read recomputes every day, others nothing.
    let strict = tmp.path().join("strict.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&strict, format!("{text}\n")).unwrap();
    assert_eq!(ledger(&store, &strict, &[]), (0, 4), "a configuration that differs only in a blank line changes nothing");
    std::fs::write(&strict, text.replace("active_threshold_util = 5.0", "active_threshold_util = 6.0")).unwrap();
    assert_eq!(ledger(&store, &strict, &[]), (4, 0), "a new activity threshold");
}

/// `gpuledger report --format csv`: (the CSV, what it said on stderr).
fn report_csv(store: &Path, config: &Path, extra: &[&str]) -> (String, String) {
    let mut args = vec!["report", "--store", store.to_str().unwrap(), "--config", config.to_str().unwrap(), "--format", "csv", "--progress", "off"];
    args.extend(extra);
    let out = run(&args, 0);
    (String::from_utf8(out.stdout).unwrap(), String::from_utf8(out.stderr).unwrap())
}

/// `report` reads the tables the last `gpuledger ledger` run stored when they are current for
/// its configuration and the store, and computes (saying why) when they are not: no record, other
/// settings, new data. Stored or computed, the same report.
#[test]
fn report_reads_the_stored_ledger_when_current_and_says_why_when_it_computes() {
    let tmp = tempfile::tempdir().unwrap();
    let capture = tmp.path().join("capture");
    run(&["simulate", "--out", capture.to_str().unwrap(), "--gpus", "4", "--days", "2", "--scrape-interval", "300", "--start", START, "--seed", "3"], 0);
    let store = tmp.path().join("store");
    let config = example_config();
    ingest(&[&capture], &store);
    ledger(&store, &config, &[]);

    let (stored, said) = report_csv(&store, &config, &[]);
    assert!(!said.contains("computing"), "the stored tables are current: {said}");
    assert!(stored.lines().count() > 2, "{stored}");

    // Without the run's record the report cannot vouch for the stored tables: it computes.
    std::fs::remove_file(store.join("ledger/run.json")).unwrap();
    let (computed, said) = report_csv(&store, &config, &[]);
    assert!(said.contains("computing the ledger: no `gpuledger ledger` run has stored its tables"), "{said}");
    assert_eq!(computed, stored, "stored or computed, the same report");

    // Another idle policy changes the settings the figures were computed with.
    ledger(&store, &config, &[]);
    let (shared, said) = report_csv(&store, &config, &["--idle-policy", "share"]);
    assert!(said.contains("computed with other settings (settings)"), "{said}");
    assert_ne!(shared, stored, "the share policy moves idle cost");

    // New samples since the ledger ran.
    let extra = tmp.path().join("extra");
    std::fs::create_dir_all(&extra).unwrap();
    std::fs::write(extra.join("1793491200000.prom"), "DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",UUID=\"GPU-late\",Hostname=\"late-node\"} 7\n").unwrap();
    ingest(&[&extra], &store);
    let (_, said) = report_csv(&store, &config, &[]);
    assert!(said.contains("new data since the last `gpuledger ledger` run (gpu_samples)"), "{said}");
}
