//! Checks of a simulated capture made with independent code: the files are read back with plain
//! string handling and serde, and compared with `expected.json` and with the configuration.

#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::{Path, PathBuf};

use chrono::{TimeZone, Utc};
use gpuledger_simulator::{SimConfig, SimSummary, simulate};
use serde_json::Value;

/// Small enough for debug builds; starts at noon on 31 October so that one day crosses a month.
fn small(seed: u64) -> SimConfig {
    SimConfig {
        gpus: 24,
        days: 1,
        seed,
        scrape_interval_s: 60,
        start: Utc.with_ymd_and_hms(2026, 10, 31, 12, 0, 0).unwrap(),
    }
}

fn run(cfg: &SimConfig) -> (tempfile::TempDir, SimSummary) {
    let dir = tempfile::tempdir().unwrap();
    let mut last = -1.0;
    let summary = simulate(cfg, dir.path(), &mut |f| {
        assert!(
            f >= last && (0.0..=1.0).contains(&f),
            "progress went from {last} to {f}"
        );
        last = f;
    })
    .unwrap();
    assert_eq!(last, 1.0);
    (dir, summary)
}

fn files(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

fn expected(root: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(root.join("expected.json")).unwrap()).unwrap()
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap()
}

#[test]
fn same_seed_gives_the_same_bytes_and_another_seed_does_not() {
    let (a, sa) = run(&small(7));
    let (b, sb) = run(&small(7));
    assert_eq!(sa, sb);
    let fa = files(a.path());
    let fb = files(b.path());
    let rel = |r: &Path, v: &[PathBuf]| {
        v.iter()
            .map(|p| p.strip_prefix(r).unwrap().to_path_buf())
            .collect::<Vec<_>>()
    };
    assert_eq!(rel(a.path(), &fa), rel(b.path(), &fb));
    assert_eq!(fa.len() as u64, sa.files);
    let mut bytes = 0;
    for (x, y) in fa.iter().zip(&fb) {
        let (bx, by) = (std::fs::read(x).unwrap(), std::fs::read(y).unwrap());
        assert!(
            bx == by,
            "{} differs between two runs with the same seed",
            x.display()
        );
        bytes += bx.len() as u64;
    }
    assert_eq!(bytes, sa.bytes);
    assert!(
        fa.iter().all(|p| !p.to_string_lossy().ends_with(".tmp")),
        "a temporary file was left behind"
    );

    let (c, _) = run(&small(8));
    let ea = std::fs::read(a.path().join("expected.json")).unwrap();
    let ec = std::fs::read(c.path().join("expected.json")).unwrap();
    assert_ne!(ea, ec, "another seed gave the same figures");
    let wa = std::fs::read(a.path().join("kubernetes/workloads.watch.json")).unwrap();
    let wc = std::fs::read(c.path().join("kubernetes/workloads.watch.json")).unwrap();
    assert_ne!(wa, wc);
}

/// Observed plus unobserved time of each pool is its GPUs times the capture's wall time: every
/// series is sampled from its first to its last scrape slot and the last sample covers one
/// interval, so nothing is lost or counted twice (MIG instances plus leftover make whole GPUs).
#[test]
fn pool_hours_add_up_to_gpus_times_wall_time_and_states_partition_them() {
    let cfg = small(11);
    let (dir, _) = run(&cfg);
    let exp = expected(dir.path());
    let nodes: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("kubernetes/nodes.json")).unwrap())
            .unwrap();
    let mut pool_gpus: BTreeMap<String, f64> = BTreeMap::new();
    for n in nodes["items"].as_array().unwrap() {
        let labels = &n["metadata"]["labels"];
        let pool = labels["gpuledger.io/pool"].as_str().unwrap().to_string();
        let count: f64 = labels["nvidia.com/gpu.count"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        *pool_gpus.entry(pool).or_default() += count;
    }
    assert_eq!(pool_gpus.len(), 5, "{pool_gpus:?}");
    let interval = cfg.scrape_interval_s as f64;
    let slots = (cfg.days as f64 * 86_400.0 / interval).floor();
    let wall_h = slots * interval / 3600.0;

    let mut observed: BTreeMap<String, f64> = BTreeMap::new();
    let mut by_state: BTreeMap<String, f64> = BTreeMap::new();
    let allowed = [
        "productive",
        "allocated_idle",
        "failed",
        "preempted",
        "unallocated",
    ];
    for r in exp["gpu_hours"].as_array().unwrap() {
        let state = r["state"].as_str().unwrap();
        assert!(allowed.contains(&state), "unknown state {state}");
        let h = f(&r["gpu_hours"]);
        let p = f(&r["provisional_gpu_hours"]);
        assert!(h > 0.0 && p >= 0.0 && p <= h + 1e-9, "{r}");
        if state == "unallocated" {
            assert_eq!(r["team"], "platform");
            assert_eq!(p, 0.0);
        }
        if state == "failed" || state == "preempted" {
            assert_eq!(p, 0.0, "settled states are never provisional: {r}");
        }
        *observed
            .entry(r["pool"].as_str().unwrap().to_string())
            .or_default() += h;
        *by_state.entry(state.to_string()).or_default() += h;
    }
    let mut unobserved: BTreeMap<String, f64> = BTreeMap::new();
    for r in exp["unobserved_gpu_hours"].as_array().unwrap() {
        *unobserved
            .entry(r["pool"].as_str().unwrap().to_string())
            .or_default() += f(&r["gpu_hours"]);
    }
    for (pool, gpus) in &pool_gpus {
        let want = gpus * wall_h;
        let got = observed.get(pool).copied().unwrap_or(0.0)
            + unobserved.get(pool).copied().unwrap_or(0.0);
        assert!(
            (got - want).abs() < 1e-6 * want,
            "pool {pool}: {got} GPU-hours, want {want}"
        );
        assert!(
            unobserved.get(pool).copied().unwrap_or(0.0) > 0.0,
            "pool {pool} has no exporter gap"
        );
    }
    // The states partition observed time: their sum is the observed total.
    let total_obs: f64 = observed.values().sum();
    let total_states: f64 = by_state.values().sum();
    assert!((total_obs - total_states).abs() < 1e-6);
    assert!(
        by_state["productive"] > 0.0
            && by_state["allocated_idle"] > 0.0
            && by_state["unallocated"] > 0.0
    );

    // Hours land in the month they fall in: the capture crosses into November.
    let months: BTreeSet<&str> = exp["gpu_hours"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["month"].as_str().unwrap())
        .collect();
    assert_eq!(months, BTreeSet::from(["2026-10", "2026-11"]));

    // Each run's hours are a part of its team's allocated hours.
    let run_hours: f64 = exp["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| f(&r["gpu_hours"]))
        .sum();
    let allocated: f64 = total_states - by_state["unallocated"];
    assert!(
        (run_hours - allocated).abs() < 1e-6 * allocated.max(1.0),
        "runs {run_hours} vs allocated {allocated}"
    );
}

/// Row identity of a sample line: everything that names the GPU or MIG instance, the pod
/// (pods sharing a time-sliced GPU each have a series; a pod's own utilisation, with its
/// `pod_uid`, is a row of its own), the DRA claim (without pod labels, each claim of a shared
/// device has a series) and the HA replica.
fn identity(labels: &str) -> String {
    let mut id = String::new();
    for key in ["Hostname=", "UUID=", "gpu=", "GPU_I_ID=", "pod=", "pod_uid=", "dra_claim_name=", "prometheus_replica="] {
        if let Some(i) = labels
            .find(&format!(",{key}"))
            .or_else(|| labels.find(&format!("{{{key}")))
        {
            let rest = &labels[i + key.len() + 1..];
            let v = rest.split('"').nth(1).unwrap_or("");
            id.push_str(v);
        }
        id.push('|');
    }
    id
}

#[test]
fn prom_files_hold_the_counted_samples_and_t4_files_have_no_timestamps() {
    let (dir, summary) = run(&small(5));
    let exp = expected(dir.path());
    let mut samples = 0u64;
    let mut rows: HashSet<(String, String)> = HashSet::new();
    let mut blanks = 0u64;
    let mut t4_files = 0;
    let mut day_files = 0;
    for p in files(&dir.path().join("dcgm")) {
        let text = std::fs::read_to_string(&p).unwrap();
        let node = p
            .parent()
            .unwrap()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .to_string();
        // The exporter's Hostname is the node's name, in upper case on one node and an FQDN on
        // another (the ledger matches without case and by first DNS label).
        let host_of = |labels: &str| -> String {
            let v = labels.split("Hostname=\"").nth(1).and_then(|r| r.split('"').next()).unwrap_or("");
            v.split('.').next().unwrap_or("").to_lowercase()
        };
        let stem = p.file_stem().unwrap().to_string_lossy().to_string();
        // The UTC day a daily file is named after, as days since 1970.
        let file_day = chrono::NaiveDate::parse_from_str(&stem, "%Y-%m-%d")
            .map(|d| d.and_hms_opt(0, 0, 0).unwrap().and_utc().timestamp() / 86_400)
            .ok();
        assert_eq!(p.extension().unwrap(), "prom");
        let t4 = node.starts_with("gpu-t4-");
        if t4 {
            t4_files += 1;
            assert!(
                stem.parse::<u64>().is_ok(),
                "T4 file name {stem} is not unix millis"
            );
            assert!(
                text.contains("# HELP DCGM_FI_DEV_GPU_UTIL ")
                    && text.contains("# TYPE DCGM_FI_DEV_GPU_UTIL gauge")
            );
            assert!(
                !text.contains("DCGM_FI_PROF_"),
                "T4 has no profiling metrics"
            );
        } else {
            day_files += 1;
            assert!(!text.contains("# HELP"));
        }
        for line in text.lines() {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            samples += 1;
            let close = line.rfind('}').unwrap();
            let (labels, rest) = (&line[..=close], line[close + 1..].trim());
            let fields: Vec<&str> = rest.split(' ').collect();
            assert!(
                !fields[0].is_empty() && fields[0].bytes().all(|b| b.is_ascii_digit() || b == b'.'),
                "{line}"
            );
            let ts = if t4 {
                assert_eq!(fields.len(), 1, "T4 sample with a timestamp: {line}");
                stem.clone()
            } else {
                assert_eq!(fields.len(), 2, "sample without a timestamp: {line}");
                let ms: i64 = fields[1].parse().unwrap();
                assert_eq!(
                    Some(ms.div_euclid(86_400_000)),
                    file_day,
                    "sample at {ms} in file {stem}"
                );
                fields[1].to_string()
            };
            assert_eq!(host_of(labels), node, "{line}");
            if fields[0] == "9223372036854775794" {
                assert!(line.starts_with("DCGM_FI_DEV_MEMORY_TEMP{"));
                blanks += 1;
            }
            rows.insert((identity(labels), ts));
        }
    }
    assert!(t4_files > 1000 && day_files > 0);
    // The vLLM servers' counters: daily files, every sample with its timestamp in the file's day.
    let mut counter_samples = 0u64;
    for p in files(&dir.path().join("inference")) {
        let stem = p.file_stem().unwrap().to_string_lossy().to_string();
        let day = chrono::NaiveDate::parse_from_str(&stem, "%Y-%m-%d").unwrap().and_hms_opt(0, 0, 0).unwrap().and_utc().timestamp() / 86_400;
        for line in std::fs::read_to_string(&p).unwrap().lines().filter(|l| !l.starts_with('#')) {
            assert!(line.starts_with("vllm:generation_tokens_total{") || line.starts_with("vllm:request_success_total{"), "{line}");
            let ms: i64 = line.rsplit(' ').next().unwrap().parse().unwrap();
            assert_eq!(ms.div_euclid(86_400_000), day, "{line}");
            counter_samples += 1;
        }
    }
    assert!(counter_samples > 0, "the inference fleet's counters are in the capture");
    samples += counter_samples;
    assert_eq!(samples, exp["totals"]["samples"].as_u64().unwrap());
    assert_eq!(samples, summary.samples);
    assert_eq!(
        rows.len() as u64,
        exp["totals"]["gpu_rows"].as_u64().unwrap()
    );
    assert_eq!(rows.len() as u64, summary.gpu_rows);
    assert_eq!(blanks, exp["totals"]["blank_values"].as_u64().unwrap());
    assert!(blanks > 0, "no blank sentinel was written");
}

fn latest_timestamp(v: &Value, best: &mut String) {
    match v {
        Value::String(s) => {
            let b = s.as_bytes();
            if s.len() >= 20
                && b[4] == b'-'
                && b[10] == b'T'
                && s.ends_with('Z')
                && s[..19] > best[..]
            {
                *best = s[..19].to_string();
            }
        }
        Value::Array(a) => a.iter().for_each(|x| latest_timestamp(x, best)),
        Value::Object(o) => o.values().for_each(|x| latest_timestamp(x, best)),
        _ => {}
    }
}

/// Watch streams parse, come in time order (each version's latest timestamp is its time) and
/// hold as many objects as `expected.json` counts.
#[test]
fn object_files_parse_in_time_order_and_match_the_counts() {
    let (dir, summary) = run(&small(3));
    let k = dir.path().join("kubernetes");
    let exp = expected(dir.path());
    let mut kinds: BTreeMap<String, u64> = BTreeMap::new();
    let mut count = |v: &Value| {
        *kinds
            .entry(v["kind"].as_str().unwrap().to_string())
            .or_insert(0) += 1
    };

    let check_stream = |values: Vec<Value>, kind: &str, count: &mut dyn FnMut(&Value)| {
        let mut last = String::new();
        let mut types = BTreeSet::new();
        for ev in values {
            let t = ev["type"].as_str().unwrap().to_string();
            assert!(["ADDED", "MODIFIED", "DELETED"].contains(&t.as_str()));
            types.insert(t);
            let obj = &ev["object"];
            // The jobs stream holds batch Jobs and the other kinds of job (TrainJob -> JobSet,
            // PyTorchJob, RayJob -> RayCluster).
            let kinds: &[&str] = if kind == "Job" { &["Job", "JobSet", "TrainJob", "PyTorchJob", "RayJob", "RayCluster"] } else { &[kind] };
            assert!(kinds.contains(&obj["kind"].as_str().unwrap_or_default()), "{kind} stream: {}", obj["kind"]);
            let mut ts = String::new();
            latest_timestamp(obj, &mut ts);
            assert!(
                ts >= last,
                "{kind} {} at {ts} after {last}",
                obj["metadata"]["name"]
            );
            last = ts;
            count(obj);
        }
        assert_eq!(
            types.len(),
            3,
            "{kind} stream lacks an event type: {types:?}"
        );
    };

    let text = std::fs::read_to_string(k.join("workloads.watch.json")).unwrap();
    assert!(
        text.starts_with("{\n    \"type\": \"ADDED\",\n    \"object\": {"),
        "not pretty-printed as kubectl does"
    );
    let wl: Vec<Value> = serde_json::Deserializer::from_str(&text)
        .into_iter::<Value>()
        .map(|r| r.unwrap())
        .collect();
    assert!(
        wl.iter()
            .any(|e| e["object"]["apiVersion"] == "kueue.x-k8s.io/v1beta1")
    );
    assert!(
        wl.iter()
            .any(|e| e["object"]["apiVersion"] == "kueue.x-k8s.io/v1beta2")
    );
    check_stream(wl, "Workload", &mut count);
    for (file, kind) in [("jobs.watch.jsonl", "Job"), ("pods.watch.jsonl", "Pod"), ("resourceclaims.watch.jsonl", "ResourceClaim")] {
        let text = std::fs::read_to_string(k.join(file)).unwrap();
        let v: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        check_stream(v, kind, &mut count);
    }
    // Node changes after the snapshot (NotReady and back, a cordon and its end): MODIFIED
    // versions in time order, the cordon marked as kubectl cordon marks it.
    let text = std::fs::read_to_string(k.join("nodes.watch.jsonl")).unwrap();
    let mut last = String::new();
    let mut cordons = 0;
    for line in text.lines() {
        let ev: Value = serde_json::from_str(line).unwrap();
        assert_eq!(ev["type"], "MODIFIED");
        let obj = &ev["object"];
        assert_eq!(obj["kind"], "Node");
        let mut ts = String::new();
        latest_timestamp(obj, &mut ts);
        assert!(ts >= last, "node {} at {ts} after {last}", obj["metadata"]["name"]);
        last = ts;
        if obj["spec"]["unschedulable"] == true {
            cordons += 1;
            let taints = obj["spec"]["taints"].as_array().unwrap();
            assert!(taints.iter().any(|t| t["key"] == "node.kubernetes.io/unschedulable"));
        }
        count(obj);
    }
    assert_eq!(text.lines().count(), 4, "NotReady, Ready, cordon, uncordon");
    assert_eq!(cordons, 1);
    let events: Value =
        serde_json::from_slice(&std::fs::read(k.join("events.json")).unwrap()).unwrap();
    assert_eq!(events["kind"], "List");
    let mut names = HashSet::new();
    for e in events["items"].as_array().unwrap() {
        assert_eq!(e["apiVersion"], "v1");
        assert!(names.insert(e["metadata"]["name"].as_str().unwrap().to_string()));
        count(e);
    }
    for line in std::fs::read_to_string(k.join("events-v1.jsonl"))
        .unwrap()
        .lines()
    {
        let e: Value = serde_json::from_str(line).unwrap();
        assert_eq!(e["apiVersion"], "events.k8s.io/v1");
        assert!(
            e["regarding"]["name"].is_string()
                && e["note"].is_string()
                && e["eventTime"].is_string()
        );
        assert!(
            names.insert(e["metadata"]["name"].as_str().unwrap().to_string()),
            "event in both files"
        );
        count(&e);
    }
    let nodes: Value =
        serde_json::from_slice(&std::fs::read(k.join("nodes.json")).unwrap()).unwrap();
    nodes["items"]
        .as_array()
        .unwrap()
        .iter()
        .for_each(&mut count);
    for file in ["namespaces.yaml", "kueue.yaml", "dra.yaml"] {
        let text = std::fs::read_to_string(k.join(file)).unwrap();
        for doc in serde_yaml::Deserializer::from_str(&text) {
            let v: Value = serde::Deserialize::deserialize(doc).unwrap();
            count(&v);
        }
    }
    let want: BTreeMap<String, u64> =
        serde_json::from_value(exp["totals"]["objects_by_kind"].clone()).unwrap();
    assert_eq!(kinds, want);
    assert_eq!(kinds.values().sum::<u64>(), summary.objects);
    for kind in [
        "Namespace",
        "Node",
        "ResourceFlavor",
        "ClusterQueue",
        "LocalQueue",
        "Workload",
        "Job",
        "Pod",
        "Event",
        "DeviceClass",
        "ResourceClaimTemplate",
        "ResourceSlice",
        "ResourceClaim",
    ] {
        assert!(kinds.contains_key(kind), "no {kind} written");
    }
    let kueue = std::fs::read_to_string(k.join("kueue.yaml")).unwrap();
    for kind in ["ResourceFlavor", "ClusterQueue", "LocalQueue"] {
        for api in ["v1beta1", "v1beta2"] {
            assert!(
                kueue
                    .split("---\n")
                    .any(|d| d.contains(&format!("kind: {kind}"))
                        && d.contains(&format!("kueue.x-k8s.io/{api}"))),
                "no {api} {kind}"
            );
        }
    }
}

/// A larger capture shows every case the accounting rules single out.
#[test]
fn a_larger_capture_has_every_interesting_case() {
    let cfg = SimConfig {
        gpus: 64,
        days: 2,
        seed: 42,
        scrape_interval_s: 300,
        start: Utc.with_ymd_and_hms(2026, 10, 31, 0, 0, 0).unwrap(),
    };
    let (dir, _) = run(&cfg);
    let exp = expected(dir.path());
    let runs = exp["runs"].as_array().unwrap();
    let outcomes: BTreeSet<&str> = runs
        .iter()
        .map(|r| r["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(
        outcomes,
        BTreeSet::from(["failed", "preempted", "running", "succeeded"])
    );
    let causes: BTreeSet<&str> = runs.iter().map(|r| r["cause"].as_str().unwrap()).collect();
    assert!(
        causes.contains("OOMKilled") && causes.contains("Error"),
        "{causes:?}"
    );
    assert!(
        runs.iter().any(|r| r["segment"].as_u64().unwrap() >= 2),
        "no readmitted segment"
    );
    assert!(
        runs.iter().any(|r| r["xid"].is_u64()),
        "no run with an XID error"
    );

    let rows = exp["gpu_hours"].as_array().unwrap();
    let states: BTreeSet<&str> = rows.iter().map(|r| r["state"].as_str().unwrap()).collect();
    assert_eq!(states.len(), 5, "{states:?}");
    assert!(rows.iter().any(|r| f(&r["provisional_gpu_hours"]) > 0.0));
    assert!(
        rows.iter()
            .any(|r| r["pool"] == "a100-mig" && r["state"] == "unallocated")
    );
    let teams: BTreeSet<&str> = rows.iter().map(|r| r["team"].as_str().unwrap()).collect();
    for t in [
        "ml-research",
        "nlp",
        "vision",
        "serving",
        "sandbox",
        "platform",
    ] {
        assert!(teams.contains(t), "team {t} missing from {teams:?}");
    }
    let units: BTreeSet<&str> = exp["accepted_units"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["unit"].as_str().unwrap())
        .collect();
    assert!(
        units.contains("1k-images") && units.contains("run"),
        "{units:?}"
    );
    assert!(exp["queue_waits"].as_array().unwrap().iter().any(|w| {
        w["wait_seconds"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| f(s) > 600.0)
    }));

    let k = dir.path().join("kubernetes");
    let wl = std::fs::read_to_string(k.join("workloads.watch.json")).unwrap();
    assert!(
        wl.contains("accumulatedPastExexcutionTimeSeconds"),
        "no v1beta1 Workload was readmitted"
    );
    assert!(wl.contains("\"reason\": \"Preempted\"") && wl.contains("\"type\": \"Requeued\""));
    let pods = std::fs::read_to_string(k.join("pods.watch.jsonl")).unwrap();
    for s in [
        "\"OOMKilled\"",
        "\"exitCode\":137",
        "\"exitCode\":1,",
        "DisruptionTarget",
        "deletionTimestamp",
        "\"team\":\"ml-research\"",
    ] {
        assert!(pods.contains(s), "no pod shows {s}");
    }
    let v1 = std::fs::read_to_string(k.join("events-v1.jsonl")).unwrap();
    let core = std::fs::read_to_string(k.join("events.json")).unwrap();
    for s in ["GPUXidError", "NodeNotReady", "OOMKilling"] {
        assert!(core.contains(s), "no {s} event in events.json");
    }
    for s in [
        "FailedScheduling",
        "BackOff",
        "Killing",
        "Preempted",
        "Evicted",
    ] {
        assert!(core.contains(s) || v1.contains(s), "no {s} event");
    }
    // Both formats carry the common facts.
    for s in [
        "\"Scheduled\"",
        "\"Pulled\"",
        "\"QuotaReserved\"",
        "\"Admitted\"",
        "\"Pending\"",
    ] {
        assert!(
            core.contains(s) && v1.contains(s),
            "{s} is missing from one of the event files"
        );
    }
    let mut xid_seen = false;
    for p in files(&dir.path().join("dcgm")) {
        let text = std::fs::read_to_string(&p).unwrap();
        if text.lines().any(|l| {
            l.starts_with("DCGM_FI_DEV_XID_ERRORS{") && (l.contains("} 79") || l.contains("} 48"))
        }) {
            xid_seen = true;
        }
    }
    assert!(xid_seen, "no XID value in the DCGM files");
}

/// One sample line: metric name, labels, value and the timestamp if it has one.
fn parse_line(line: &str) -> (String, BTreeMap<String, String>, String, Option<i64>) {
    let open = line.find('{').unwrap();
    let close = line.rfind('}').unwrap();
    let mut labels = BTreeMap::new();
    let mut rest = &line[open + 1..close];
    while !rest.is_empty() {
        let eq = rest.find("=\"").unwrap();
        let after = &rest[eq + 2..];
        let end = after.find('"').unwrap();
        labels.insert(rest[..eq].to_string(), after[..end].to_string());
        rest = after[end + 1..].trim_start_matches(',');
    }
    let mut fields = line[close + 1..].split_whitespace();
    let value = fields.next().unwrap().to_string();
    (line[..open].to_string(), labels, value, fields.next().map(|t| t.parse().unwrap()))
}

/// The sample time of a line: its own, else the scrape file's name.
fn sample_time(path: &Path, ts: Option<i64>) -> i64 {
    ts.unwrap_or_else(|| path.file_stem().unwrap().to_str().unwrap().parse().unwrap())
}

/// RFC 3339 seconds (as the simulator writes times) -> Unix ms.
fn ms(s: &str) -> i64 {
    chrono::DateTime::parse_from_rfc3339(s).unwrap().timestamp_millis()
}

/// A claim's versions as a reader has them: (observed at, deleted, allocated device (pool,
/// device), pods reserved for).
type ClaimVersion = (i64, bool, Option<(String, String)>, Vec<String>);

fn claim_versions(dir: &Path) -> BTreeMap<(String, String), Vec<ClaimVersion>> {
    let text = std::fs::read_to_string(dir.join("kubernetes/resourceclaims.watch.jsonl")).unwrap();
    let mut out: BTreeMap<(String, String), Vec<ClaimVersion>> = BTreeMap::new();
    for line in text.lines() {
        let ev: Value = serde_json::from_str(line).unwrap();
        let o = &ev["object"];
        let mut t = String::new();
        latest_timestamp(o, &mut t);
        let key = (o["metadata"]["namespace"].as_str().unwrap().to_string(), o["metadata"]["name"].as_str().unwrap().to_string());
        let device = o["status"]["allocation"]["devices"]["results"].get(0).map(|r| (r["pool"].as_str().unwrap().to_string(), r["device"].as_str().unwrap().to_string()));
        let pods = o["status"]["reservedFor"].as_array().map(|a| a.iter().map(|r| r["name"].as_str().unwrap().to_string()).collect()).unwrap_or_default();
        out.entry(key).or_default().push((ms(&format!("{t}Z")), ev["type"] == "DELETED", device, pods));
    }
    out
}

/// The claim version in force at `t` (ms): the last one observed at or before it (the first
/// holds from the beginning); none after a deletion.
fn claim_at(versions: &[ClaimVersion], t: i64) -> Option<&ClaimVersion> {
    let v = versions.iter().rev().find(|v| v.0 <= t).or(versions.first())?;
    (!v.1 || v.0 > t).then_some(v)
}

/// docs/accounting.md "DRA": every series of a DRA-held GPU names its pod and the claim it
/// holds the GPU through (`dra_*` labels, the device its ResourceSlice publishes with that GPU's
/// UUID), and the claim is reserved for that pod at that time, so that a reader without the
/// pod labels would find the same pods. The three shapes are there: one claim per pod, a
/// claim two pods share (a series each, the device's values repeated), and a device two
/// claims share by consumed capacity.
#[test]
fn dra_series_name_claims_reserved_for_their_pods() {
    let (dir, _) = run(&small(9));
    let dra_yaml = std::fs::read_to_string(dir.path().join("kubernetes/dra.yaml")).unwrap();
    let mut slices: BTreeMap<(String, String), String> = BTreeMap::new();
    for doc in serde_yaml::Deserializer::from_str(&dra_yaml) {
        let v: Value = serde::Deserialize::deserialize(doc).unwrap();
        if v["kind"] == "ResourceSlice" {
            assert_eq!(v["spec"]["driver"], "gpu.nvidia.com");
            let pool = v["spec"]["pool"]["name"].as_str().unwrap().to_string();
            assert_eq!(v["spec"]["nodeName"].as_str(), Some(pool.as_str()));
            for d in v["spec"]["devices"].as_array().unwrap() {
                slices.insert((pool.clone(), d["name"].as_str().unwrap().to_string()), d["attributes"]["uuid"]["string"].as_str().unwrap().to_string());
            }
        }
    }
    assert!(slices.len() >= 4, "{slices:?}");
    let claims = claim_versions(dir.path());
    // (UUID, time) -> the (claim, pod, value) of each GPU_UTIL series there.
    type UtilSeries = Vec<(String, String, String)>;
    let mut at: BTreeMap<(String, i64), UtilSeries> = BTreeMap::new();
    let mut dra_lines = 0;
    for p in files(&dir.path().join("dcgm")) {
        let node = p.parent().unwrap().file_name().unwrap().to_str().unwrap().to_string();
        let on_dra = node.starts_with("gpu-dra-h100-");
        for line in std::fs::read_to_string(&p).unwrap().lines().filter(|l| !l.starts_with('#')) {
            let (name, labels, value, ts) = parse_line(line);
            let pod = labels.get("pod").filter(|p| !p.is_empty());
            let dra: Vec<&String> = labels.keys().filter(|k| k.starts_with("dra_")).collect();
            if !on_dra || pod.is_none() {
                assert!(dra.is_empty(), "{line}");
                continue;
            }
            dra_lines += 1;
            assert_eq!(dra.len(), 5, "{line}");
            assert_eq!((labels["dra_driver_name"].as_str(), labels["dra_pool_name"].as_str()), ("gpu.nvidia.com", node.as_str()), "{line}");
            let device = (node.clone(), labels["dra_device_name"].clone());
            assert_eq!(slices.get(&device), Some(&labels["UUID"]), "{line}");
            let t = sample_time(&p, ts);
            let claim = (labels["dra_claim_namespace"].clone(), labels["dra_claim_name"].clone());
            let v = claims.get(&claim).and_then(|v| claim_at(v, t)).unwrap_or_else(|| panic!("no claim {claim:?} at {t}: {line}"));
            assert_eq!(v.2.as_ref(), Some(&device), "{line}");
            assert!(v.3.contains(pod.unwrap()), "{claim:?} is not reserved for the pod at {t}: {line}");
            if name == "DCGM_FI_DEV_GPU_UTIL" {
                at.entry((labels["UUID"].clone(), t)).or_default().push((claim.1, pod.unwrap().clone(), value));
            }
        }
    }
    assert!(dra_lines > 1000, "{dra_lines}");
    let (mut one_claim_two_pods, mut two_claims) = (0, 0);
    for series in at.values() {
        let claims: BTreeSet<&String> = series.iter().map(|s| &s.0).collect();
        let pods: BTreeSet<&String> = series.iter().map(|s| &s.1).collect();
        assert_eq!(pods.len(), series.len(), "{series:?}");
        assert!(series.len() <= 2, "{series:?}");
        // A shared GPU's series repeat the device's values.
        assert!(series.iter().all(|s| s.2 == series[0].2), "{series:?}");
        match (series.len(), claims.len()) {
            (2, 1) => {
                one_claim_two_pods += 1;
                assert!(series[0].0.starts_with("shared-gpu-"), "{series:?}");
            }
            (2, 2) => two_claims += 1,
            _ => {}
        }
    }
    assert!(one_claim_two_pods > 10 && two_claims > 10, "{one_claim_two_pods} {two_claims}");
}

/// docs/accounting.md "Measured sharing": at each scrape of a time-sliced GPU that pods hold,
/// the exporter writes the device's utilisation without pod labels, each pod's own with its
/// `pod_uid` and `vgpu`, and every other field per pod with `vgpu` (no copy without a pod); a
/// GPU nobody holds has only its pod-less series.
#[test]
fn time_sliced_gpus_carry_each_pods_own_utilisation() {
    let (dir, _) = run(&small(5));
    let (mut shared, mut mixed) = (0, 0);
    for p in files(&dir.path().join("dcgm/gpu-t4-001")) {
        // Per GPU: the pod-less lines (metric, value), each pod's own utilisation line, and
        // the metrics of each pod's other lines.
        type Gpu = (Vec<(String, String)>, BTreeMap<String, (String, u64)>, BTreeMap<String, BTreeSet<String>>);
        let mut gpus: BTreeMap<String, Gpu> = BTreeMap::new();
        for line in std::fs::read_to_string(&p).unwrap().lines().filter(|l| !l.starts_with('#')) {
            let (name, labels, value, _) = parse_line(line);
            let gpu = gpus.entry(labels["UUID"].clone()).or_default();
            let pod = labels["pod"].clone();
            if pod.is_empty() {
                assert!(!labels.contains_key("vgpu") && !labels.contains_key("pod_uid"), "{line}");
                gpu.0.push((name, value));
            } else if name == "DCGM_FI_DEV_GPU_UTIL" {
                assert!(labels.contains_key("pod_uid") && labels.contains_key("vgpu"), "{line}");
                assert!(gpu.1.insert(pod, (labels["vgpu"].clone(), value.parse().unwrap())).is_none(), "{line}");
            } else {
                assert!(labels.contains_key("vgpu") && !labels.contains_key("pod_uid"), "{line}");
                gpu.2.entry(pod).or_default().insert(name);
            }
        }
        for (uuid, (podless, utils, others)) in &gpus {
            if utils.is_empty() {
                assert_eq!(podless.len(), 14, "{uuid} in {}: the whole GPU without a pod", p.display());
                assert!(others.is_empty());
                continue;
            }
            shared += 1;
            assert!(utils.len() <= 4);
            assert_eq!(podless.len(), 1, "{uuid} in {}", p.display());
            assert_eq!(podless[0].0, "DCGM_FI_DEV_GPU_UTIL");
            let sum: u64 = utils.values().map(|u| u.1).sum();
            assert_eq!(podless[0].1, sum.min(100).to_string(), "{uuid} in {}", p.display());
            for (pod, (_, u)) in utils {
                assert!(*u == 0 || (30..=90).contains(u), "{pod}: {u}");
                assert_eq!(others[pod].len(), 13, "{pod}");
            }
            let vgpus: BTreeSet<&String> = utils.values().map(|u| &u.0).collect();
            assert_eq!(vgpus.len(), utils.len());
            if utils.values().any(|u| u.1 == 0) && utils.values().any(|u| u.1 > 0) {
                mixed += 1;
            }
        }
    }
    assert!(shared > 100 && mixed > 10, "{shared} {mixed}");
}

/// `measured_sharing` moves time only among the pods of a time-sliced GPU: its rows of other
/// pools are `gpu_hours`' own, each month's time-sliced total is the same, and no pod is
/// idle longer under it (an idle pod's 0 gives it nothing while another works).
#[test]
fn measured_sharing_moves_only_time_sliced_time() {
    let (dir, _) = run(&small(5));
    let exp = expected(dir.path());
    let key = |r: &Value| -> (String, String, String, String) {
        let k = |f: &str| r[f].as_str().unwrap().to_string();
        (k("month"), k("team"), k("state"), k("pool"))
    };
    let even: BTreeMap<_, f64> = exp["gpu_hours"].as_array().unwrap().iter().map(|r| (key(r), f(&r["gpu_hours"]))).collect();
    let measured: BTreeMap<_, f64> = exp["measured_sharing"]["gpu_hours"].as_array().unwrap().iter().map(|r| (key(r), f(&r["gpu_hours"]))).collect();
    let (mut t4_even, mut t4_measured): (BTreeMap<String, f64>, BTreeMap<String, f64>) = Default::default();
    let mut moved = 0.0;
    for k in even.keys().chain(measured.keys()).collect::<BTreeSet<_>>() {
        let (e, m) = (even.get(k).copied().unwrap_or(0.0), measured.get(k).copied().unwrap_or(0.0));
        if k.3 != "t4" {
            assert!((e - m).abs() <= 1e-9 * e.max(1.0), "{k:?}: {e} {m}");
            continue;
        }
        *t4_even.entry(k.0.clone()).or_default() += e;
        *t4_measured.entry(k.0.clone()).or_default() += m;
        moved += (e - m).abs();
        if k.2 == "allocated_idle" {
            assert!(m <= e + 1e-9, "{k:?}: {e} {m}");
        }
    }
    for (month, e) in &t4_even {
        assert!((e - t4_measured[month]).abs() < 1e-9, "{month}");
    }
    assert!(moved > 0.1, "measured sharing moved {moved} GPU-hours");
}

/// docs/accounting.md "DRA": without pod labels (`dra_pod_labels` false) the DRA series carry
/// only the `dra_*` labels, one per claim, with the same values; everything else is the same
/// capture, and so is the truth.
#[test]
fn dra_series_without_pod_labels_leave_the_truth_as_it_is() {
    let cfg = small(9);
    let (a, _) = run(&cfg);
    let b = tempfile::tempdir().unwrap();
    let opts = gpuledger_simulator::SimOptions { dra_pod_labels: false };
    gpuledger_simulator::simulate_window_with(&cfg, &opts, &gpuledger_simulator::Window::ALL, b.path(), &mut |_| {}).unwrap();
    let rel = |r: &Path| files(r).into_iter().map(|p| p.strip_prefix(r).unwrap().to_path_buf()).collect::<Vec<_>>();
    assert_eq!(rel(a.path()), rel(b.path()));
    let mut dra_files = 0;
    for f in rel(a.path()) {
        let (x, y) = (std::fs::read_to_string(a.path().join(&f)).unwrap(), std::fs::read_to_string(b.path().join(&f)).unwrap());
        if f.starts_with("dcgm") && f.to_string_lossy().contains("gpu-dra-h100-") {
            dra_files += 1;
            // Each line with its pod labels dropped (a claim's pods then have one line).
            let drop_pod = |line: &str| -> String {
                if !line.contains("dra_claim_name=") {
                    return line.to_string();
                }
                let mut out = line.to_string();
                for key in ["container", "namespace", "pod"] {
                    let start = out.find(&format!(",{key}=\"")).unwrap();
                    let end = start + out[start + key.len() + 3..].find('"').unwrap() + key.len() + 4;
                    out.replace_range(start..end, "");
                }
                out
            };
            let want: BTreeSet<String> = x.lines().map(drop_pod).collect();
            let got: Vec<&str> = y.lines().collect();
            assert!(got.iter().all(|l| !l.contains("dra_") || !l.contains("pod=")), "{f:?}");
            assert_eq!(got.iter().copied().collect::<BTreeSet<_>>().len(), got.len(), "{f:?}: a line twice");
            assert_eq!(got.iter().map(|l| l.to_string()).collect::<BTreeSet<_>>(), want, "{f:?}");
        } else if f.file_name().unwrap() == "expected.json" {
            let (mut x, mut y): (Value, Value) = (serde_json::from_str(&x).unwrap(), serde_json::from_str(&y).unwrap());
            assert_eq!((x["config"]["dra_pod_labels"].take(), y["config"]["dra_pod_labels"].take()), (Value::Bool(true), Value::Bool(false)));
            assert!(y["totals"]["gpu_rows"].as_u64() < x["totals"]["gpu_rows"].as_u64());
            for v in [&mut x, &mut y] {
                for k in ["samples", "gpu_rows"] {
                    v["totals"][k] = Value::Null;
                }
            }
            assert!(x == y, "the truth differs");
        } else {
            assert!(x == y, "{f:?} differs");
        }
    }
    assert!(dra_files > 0);
}

/// docs/accounting.md "Allocation", "Measured sharing", worked from the written text alone:
/// each observation of a time-sliced GPU covers the time to the next scrape (one interval
/// where that is beyond 2.5 intervals, and after the last), split among the pods it names, 1/k
/// each, or under `sharing = "measured"` by their own utilisation in millionths (largest
/// remainder, ties to the smaller uid; all zero: 1/k). Each team's time-sliced hours in
/// `gpu_hours` and `measured_sharing` are those sums.
#[test]
fn time_sliced_truth_follows_from_the_written_utilisation() {
    let cfg = small(5);
    let (dir, _) = run(&cfg);
    let exp = expected(dir.path());
    let iv = i64::from(cfg.scrape_interval_s) * 1000;
    let node = dir.path().join("dcgm/gpu-t4-001");
    let mut times: Vec<i64> = files(&node).iter().map(|p| sample_time(p, None)).collect();
    times.sort_unstable();
    // Teams by namespace: its team label, else its name.
    let ns_text = std::fs::read_to_string(dir.path().join("kubernetes/namespaces.yaml")).unwrap();
    let mut team_of: BTreeMap<String, String> = BTreeMap::new();
    for doc in serde_yaml::Deserializer::from_str(&ns_text) {
        let v: Value = serde::Deserialize::deserialize(doc).unwrap();
        let name = v["metadata"]["name"].as_str().unwrap().to_string();
        let team = v["metadata"]["labels"]["team"].as_str().unwrap_or(&name).to_string();
        team_of.insert(name, team);
    }
    // Per team: (even, measured) GPU-milliseconds x 10^6.
    let mut got: BTreeMap<String, (u128, u128)> = BTreeMap::new();
    for (i, &t) in times.iter().enumerate() {
        let span = match times.get(i + 1) {
            Some(&next) if (next - t) * 2 <= 5 * iv => next - t,
            _ => iv,
        } as u128;
        // Per GPU: (pod uid, namespace, utilisation) of each pod's own series.
        let mut gpus: BTreeMap<String, Vec<(String, String, u128)>> = BTreeMap::new();
        for line in std::fs::read_to_string(node.join(format!("{t}.prom"))).unwrap().lines() {
            if !line.starts_with("DCGM_FI_DEV_GPU_UTIL{") {
                continue;
            }
            let (_, labels, value, _) = parse_line(line);
            if let Some(uid) = labels.get("pod_uid") {
                gpus.entry(labels["UUID"].clone()).or_default().push((uid.clone(), labels["namespace"].clone(), value.parse().unwrap()));
            }
        }
        for mut pods in gpus.into_values() {
            pods.sort();
            let (k, total) = (pods.len() as u128, pods.iter().map(|p| p.2).sum::<u128>());
            let mut ppm: Vec<u128> = pods.iter().map(|p| (p.2 * 1_000_000).checked_div(total).unwrap_or(0)).collect();
            if total > 0 {
                let mut order: Vec<usize> = (0..pods.len()).collect();
                // Stable: equal remainders stay in uid order.
                order.sort_by_key(|&i| std::cmp::Reverse(pods[i].2 * 1_000_000 % total));
                let left = 1_000_000 - ppm.iter().sum::<u128>();
                for &i in order.iter().take(left as usize) {
                    ppm[i] += 1;
                }
            }
            for (p, share) in pods.iter().zip(ppm) {
                let e = got.entry(team_of[&p.1].clone()).or_default();
                e.0 += span * 1_000_000 / k;
                e.1 += if total == 0 { span * 1_000_000 / k } else { span * share };
            }
        }
    }
    assert!(got.len() >= 2, "{got:?}");
    let truth = |rows: &Value, team: &str| -> f64 {
        rows.as_array().unwrap().iter().filter(|r| r["pool"] == "t4" && r["team"] == team).map(|r| f(&r["gpu_hours"])).sum()
    };
    for (team, (even, measured)) in &got {
        let hours = |v: u128| v as f64 / 1e6 / 3.6e6;
        let (e, m) = (truth(&exp["gpu_hours"], team), truth(&exp["measured_sharing"]["gpu_hours"], team));
        assert!((hours(*even) - e).abs() < 1e-6, "{team}: even {} from the text, {e} in expected.json", hours(*even));
        assert!((hours(*measured) - m).abs() < 1e-6, "{team}: measured {} from the text, {m} in expected.json", hours(*measured));
    }
}
