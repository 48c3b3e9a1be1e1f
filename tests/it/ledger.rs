//! The ledger: hand-built captures with figures worked out by hand, simulated clusters against
//! the simulator's own truth (`expected.json`), and the derived tables read back by DuckDB.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};

use crate::util::{ingest, query, run};

// ---------------------------------------------------------------------------------------------
// Hand-built capture: a few samples per rule of docs/accounting.md "Accounting rules".
// ---------------------------------------------------------------------------------------------

/// 2026-10-31T23:50:00Z in milliseconds: ten minutes before a month boundary.
const T0: i64 = 1_793_490_600_000;

fn ts(offset_s: i64) -> String {
    chrono::DateTime::from_timestamp_millis(T0 + offset_s * 1000).unwrap().format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// One DCGM sample line with its own timestamp (as Prometheus' /federate writes it).
fn sample(metric: &str, labels: &[(&str, &str)], value: f64, offset_s: i64) -> String {
    let l: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
    format!("{metric}{{{}}} {value} {}\n", l.join(","), T0 + offset_s * 1000)
}

fn gpu<'a>(node: &'a str, uuid: &'a str, model: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![("gpu", "0"), ("UUID", uuid), ("Hostname", node), ("modelName", model)]
}

fn with_pod<'a>(mut labels: Vec<(&'a str, &'a str)>, ns: &'a str, pod: &'a str) -> Vec<(&'a str, &'a str)> {
    labels.extend([("namespace", ns), ("pod", pod), ("container", "main")]);
    labels
}

fn cond(kind: &str, status: &str, reason: &str, at: i64) -> Value {
    json!({"type": kind, "status": status, "reason": reason, "message": reason, "lastTransitionTime": ts(at)})
}

fn pod(ns: &str, name: &str, node: &str, owner_job: Option<&str>, labels: Value, status: Value) -> Value {
    let mut meta = json!({"name": name, "namespace": ns, "uid": format!("uid-pod-{name}"), "creationTimestamp": ts(-3000), "labels": labels});
    if let Some(job) = owner_job {
        meta["ownerReferences"] = json!([{"apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": format!("uid-job-{job}"), "controller": true}]);
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta,
           "spec": {"nodeName": node, "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
           "status": status})
}

fn workload(name: &str, job: &str, labels: Value, annotations: Value, conditions: Vec<Value>, admitted: bool) -> Value {
    let mut status = json!({"conditions": conditions});
    if admitted {
        status["admission"] = json!({"clusterQueue": "cq-research", "podSetAssignments": []});
    }
    json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
           "metadata": {"name": name, "namespace": "research", "uid": format!("uid-wl-{name}"), "creationTimestamp": ts(-1000),
                        "labels": labels, "annotations": annotations,
                        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": format!("uid-job-{job}"), "controller": true}]},
           "spec": {"queueName": "lq-research", "podSets": [{"name": "main", "count": 1, "template": {"spec": {"containers": []}}}]},
           "status": status})
}

fn watch(events: &[(&str, Value)]) -> String {
    events.iter().map(|(t, o)| format!("{}\n", json!({"type": t, "object": o}))).collect()
}

/// Writes the hand-built capture (see the test below for what each part exercises).
fn hand_built_capture(dir: &Path) {
    std::fs::create_dir_all(dir.join("dcgm")).unwrap();
    std::fs::create_dir_all(dir.join("kubernetes")).unwrap();
    let h100 = "NVIDIA H100 80GB HBM3";
    let mut prom = String::new();
    // A1: research/train-1, engine active for 6 samples, then idle for 4 (30 s spacing).
    for i in 0..10 {
        let engine = if i < 6 { 0.5 } else { 0.01 };
        prom += &sample("DCGM_FI_PROF_GR_ENGINE_ACTIVE", &with_pod(gpu("node-a", "GPU-a1", h100), "research", "train-1"), engine, i * 30);
        prom += &sample("DCGM_FI_DEV_GPU_UTIL", &with_pod(gpu("node-a", "GPU-a1", h100), "research", "train-1"), 40.0, i * 30);
    }
    // B1: no profiling metrics (utilisation only). eval-1 at 0, 30, 60 (busy), then a gap to 300;
    // eval-2 at 300, 330, 360 (idle).
    for (at, pod, util) in [(0, "eval-1", 50.0), (30, "eval-1", 50.0), (60, "eval-1", 50.0), (300, "eval-2", 2.0), (330, "eval-2", 2.0), (360, "eval-2", 2.0)] {
        prom += &sample("DCGM_FI_DEV_GPU_UTIL", &with_pod(gpu("node-b", "GPU-b1", h100), "research", pod), util, at);
    }
    // C1: a T4 nobody holds, sampled at 23:59:40 and 00:00:10: its span crosses the month boundary.
    for at in [580, 610] {
        prom += &sample("DCGM_FI_DEV_GPU_UTIL", &gpu("node-c", "GPU-c1", "Tesla T4"), 0.0, at);
    }
    // D1: a MIG GPU on node-a: instance 1 (3g) held by research/mig-1, instance 2 (2g) free.
    for at in [0, 30, 60] {
        let mut i1 = gpu("node-a", "GPU-d1", h100);
        i1.extend([("GPU_I_PROFILE", "3g.40gb"), ("GPU_I_ID", "1")]);
        prom += &sample("DCGM_FI_PROF_GR_ENGINE_ACTIVE", &with_pod(i1, "research", "mig-1"), 0.9, at);
        let mut i2 = gpu("node-a", "GPU-d1", h100);
        i2.extend([("GPU_I_PROFILE", "2g.20gb"), ("GPU_I_ID", "2")]);
        prom += &sample("DCGM_FI_PROF_GR_ENGINE_ACTIVE", &i2, 0.0, at);
    }
    // E1: sandbox/nb-1, a pod without a Workload, still running.
    for at in [0, 30] {
        prom += &sample("DCGM_FI_PROF_GR_ENGINE_ACTIVE", &with_pod(gpu("node-b", "GPU-e1", h100), "sandbox", "nb-1"), 0.9, at);
    }
    std::fs::write(dir.join("dcgm/federate.prom"), prom).unwrap();

    let nodes = json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-a", "uid": "uid-node-a", "creationTimestamp": ts(-90000),
            "labels": {"kubernetes.io/hostname": "node-a", "gpuledger.io/pool": "spot-h100"}}, "status": {}},
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-b", "uid": "uid-node-b", "creationTimestamp": ts(-90000),
            "labels": {"kubernetes.io/hostname": "node-b"}}, "status": {}},
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-c", "uid": "uid-node-c", "creationTimestamp": ts(-90000),
            "labels": {"kubernetes.io/hostname": "node-c"}}, "status": {}},
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "research", "uid": "uid-ns-r", "creationTimestamp": ts(-90000), "labels": {"team": "ml"}}},
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "sandbox", "uid": "uid-ns-s", "creationTimestamp": ts(-90000)}},
    ]});
    std::fs::write(dir.join("kubernetes/cluster.json"), serde_json::to_string_pretty(&nodes).unwrap()).unwrap();

    let running = |start: i64| json!({"phase": "Running", "startTime": ts(start)});
    let pods = watch(&[
        // train-1's own team label (vision) beats its namespace's (ml).
        ("ADDED", pod("research", "train-1", "node-a", Some("train-1"), json!({"team": "vision"}), running(-500))),
        ("MODIFIED", pod("research", "train-1", "node-a", Some("train-1"), json!({"team": "vision"}),
            json!({"phase": "Succeeded", "startTime": ts(-500), "containerStatuses": [{"name": "main", "state": {"terminated": {"reason": "Completed", "exitCode": 0, "finishedAt": ts(300)}}}]}))),
        // eval-1 ran in segment 1 and was killed by the eviction: it ends Failed (exit 143),
        // but the Workload's Evicted condition makes the segment preempted.
        ("ADDED", pod("research", "eval-1", "node-b", Some("eval"), json!({}), running(-800))),
        ("MODIFIED", pod("research", "eval-1", "node-b", Some("eval"), json!({}),
            json!({"phase": "Failed", "startTime": ts(-800), "containerStatuses": [{"name": "main", "state": {"terminated": {"reason": "Error", "exitCode": 143, "finishedAt": ts(200)}}}]}))),
        ("ADDED", pod("research", "eval-2", "node-b", Some("eval"), json!({}), running(260))),
        // mig-1: a pod no Workload owns, OOMKilled: its own run, failed.
        ("ADDED", pod("research", "mig-1", "node-a", None, json!({}), running(-100))),
        ("MODIFIED", pod("research", "mig-1", "node-a", None, json!({}),
            json!({"phase": "Failed", "startTime": ts(-100), "containerStatuses": [{"name": "main", "state": {"terminated": {"reason": "OOMKilled", "exitCode": 137, "finishedAt": ts(90)}}}]}))),
        ("ADDED", pod("sandbox", "nb-1", "node-b", None, json!({}), running(-60))),
    ]);
    std::fs::write(dir.join("kubernetes/pods.watch.jsonl"), pods).unwrap();

    let jobs = json!({"apiVersion": "batch/v1", "kind": "List", "items": [
        {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train-1", "namespace": "research", "uid": "uid-job-train-1", "creationTimestamp": ts(-1000),
            "annotations": {"gpuledger.io/accepted-units": "5", "gpuledger.io/unit": "checkpoint"}},
         "spec": {"suspend": false}, "status": {"succeeded": 1, "completionTime": ts(300),
            "conditions": [{"type": "Complete", "status": "True", "reason": "CompletionsReached", "lastTransitionTime": ts(300)}]}},
        {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "eval", "namespace": "research", "uid": "uid-job-eval", "creationTimestamp": ts(-1000)},
         "spec": {"suspend": false}, "status": {}},
    ]});
    std::fs::write(dir.join("kubernetes/jobs.json"), serde_json::to_string_pretty(&jobs).unwrap()).unwrap();

    // wl-train: admitted at -600, finished Succeeded at +300. Its annotation (3 units) beats the
    // job's (5); the unit name comes from the job (checkpoint).
    let train_labels = json!({});
    let train_ann = json!({"gpuledger.io/accepted-units": "3"});
    // wl-eval (team label nlp): admitted at -900, evicted at +200, requeued at +210, readmitted
    // at +250, finished Succeeded at +600 (2026-11-01T00:00:00Z: a November unit).
    let eval_labels = json!({"team": "nlp"});
    let workloads = watch(&[
        ("ADDED", workload("wl-train", "train-1", train_labels.clone(), train_ann.clone(), vec![], false)),
        ("MODIFIED", workload("wl-train", "train-1", train_labels.clone(), train_ann.clone(), vec![cond("QuotaReserved", "True", "QuotaReserved", -600), cond("Admitted", "True", "Admitted", -600)], true)),
        ("MODIFIED", workload("wl-train", "train-1", train_labels.clone(), train_ann.clone(),
            vec![cond("QuotaReserved", "True", "QuotaReserved", -600), cond("Admitted", "True", "Admitted", -600), cond("Finished", "True", "Succeeded", 300)], true)),
        ("ADDED", workload("wl-eval", "eval", eval_labels.clone(), json!({}), vec![], false)),
        ("MODIFIED", workload("wl-eval", "eval", eval_labels.clone(), json!({}), vec![cond("QuotaReserved", "True", "QuotaReserved", -900), cond("Admitted", "True", "Admitted", -900)], true)),
        ("MODIFIED", workload("wl-eval", "eval", eval_labels.clone(), json!({}),
            vec![cond("QuotaReserved", "True", "QuotaReserved", -900), cond("Admitted", "True", "Admitted", -900), cond("Evicted", "True", "Preempted", 200)], true)),
        ("MODIFIED", workload("wl-eval", "eval", eval_labels.clone(), json!({}),
            vec![cond("QuotaReserved", "False", "Pending", 210), cond("Admitted", "False", "NoReservation", 210), cond("Evicted", "True", "Preempted", 200), cond("Requeued", "True", "Preempted", 210)], false)),
        ("MODIFIED", workload("wl-eval", "eval", eval_labels.clone(), json!({}),
            vec![cond("QuotaReserved", "True", "QuotaReserved", 250), cond("Admitted", "True", "Admitted", 250), cond("Evicted", "False", "QuotaReserved", 250), cond("Requeued", "True", "Preempted", 210)], true)),
        ("MODIFIED", workload("wl-eval", "eval", eval_labels.clone(), json!({}),
            vec![cond("QuotaReserved", "True", "QuotaReserved", 250), cond("Admitted", "True", "Admitted", 250), cond("Evicted", "False", "QuotaReserved", 250), cond("Requeued", "True", "Preempted", 210), cond("Finished", "True", "Succeeded", 600)], true)),
    ]);
    std::fs::write(dir.join("kubernetes/workloads.watch.jsonl"), workloads).unwrap();
}

const HAND_CONFIG: &str = r#"
[accounting]
idle_policy = "platform"

[prices]
default = 2.0
[prices.by_model]
"NVIDIA H100 80GB HBM3" = 2.49
[prices.by_node_label."gpuledger.io/pool"]
spot-h100 = 1.10

[[overheads]]
month = "2026-10"
network = 100.0

[[overheads]]
month = "2026-10"
team = "nlp"
support = 10.0
"#;

fn close(got: f64, want: f64, what: &str) {
    assert!((got - want).abs() < 1e-6, "{what}: got {got}, want {want}");
}

/// Parses `report --format csv` into month -> team -> column -> value (empty cells as NaN).
fn parse_csv(text: &str) -> BTreeMap<(String, String), BTreeMap<String, f64>> {
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    assert_eq!(header, gpuledger_ledger::report::CSV_COLUMNS.to_vec());
    let mut out = BTreeMap::new();
    for line in lines {
        let cells: Vec<&str> = line.split(',').collect();
        let mut row = BTreeMap::new();
        for (h, c) in header.iter().zip(&cells).skip(2) {
            row.insert(h.to_string(), if c.is_empty() { f64::NAN } else { c.parse().unwrap() });
        }
        out.insert((cells[0].to_string(), cells[1].to_string()), row);
    }
    out
}

/// The same, from `report --format json` (full precision: the hand-built figures are tiny).
fn report_json(store: &Path, config: &Path, month: &str, policy: &str) -> BTreeMap<(String, String), BTreeMap<String, f64>> {
    let report: Value = serde_json::from_slice(&report_output(store, config, month, policy, "json")).unwrap();
    let mut rows = BTreeMap::new();
    for r in report["chargeback"].as_array().unwrap() {
        let mut row = BTreeMap::new();
        for column in gpuledger_ledger::report::CSV_COLUMNS.iter().skip(2) {
            row.insert(column.to_string(), r[*column].as_f64().unwrap_or(f64::NAN));
        }
        rows.insert((r["month"].as_str().unwrap().to_string(), r["team"].as_str().unwrap().to_string()), row);
    }
    rows
}

/// `gpuledger report` of one month in one format and idle policy: its stdout.
fn report_output(store: &Path, config: &Path, month: &str, policy: &str, format: &str) -> Vec<u8> {
    let (store, config) = (store.display().to_string(), config.display().to_string());
    run(&["report", "--store", &store, "--config", &config, "--month", month, "--format", format, "--idle-policy", policy, "--progress", "off"], 0).stdout
}

#[test]
fn hand_built_capture_follows_every_accounting_rule() {
    let tmp = tempfile::tempdir().unwrap();
    let capture = tmp.path().join("capture");
    let store = tmp.path().join("store");
    hand_built_capture(&capture);
    let summary = ingest(&[&capture], &store);
    assert_eq!(summary["rejected"].as_u64(), Some(0), "{summary}");
    assert_eq!(summary["errors"].as_array().map(Vec::len), Some(0), "{summary}");
    let config = tmp.path().join("gpuledger.toml");
    std::fs::write(&config, HAND_CONFIG).unwrap();

    let oct = report_json(&store, &config, "2026-10", "platform");
    let row = |team: &str| oct.get(&("2026-10".to_string(), team.to_string())).unwrap_or_else(|| panic!("no row for {team}: {oct:?}"));
    let h = |s: f64| s / 3600.0;

    // vision (train-1: pod label beats namespace label): 6 active samples x 30 s productive,
    // 4 idle x 30 s (the last sample covers one interval). node-a's pool label: 1.10/h.
    close(row("vision")["productive_gpu_hours"], h(180.0), "vision productive");
    close(row("vision")["allocated_idle_gpu_hours"], h(120.0), "vision idle");
    close(row("vision")["compute"], h(180.0) * 1.10, "vision compute");
    // wl-train's annotation (3) beats the job's (5).
    close(row("vision")["accepted_units"], 3.0, "vision units");

    // nlp (eval: the Workload's team label; no label on the pods). Segment 1 (eval-1): 0->30,
    // 30->60, then a 240 s gap > 2 x 30 s: covered to 90, the other 210 s unobserved. 90 s,
    // preempted although the pod ended Failed. Segment 2 (eval-2): 90 s idle (utilisation 2 < 5,
    // no engine metric on this GPU). H100 by model: 2.49/h.
    close(row("nlp")["preempted_gpu_hours"], h(90.0), "nlp preempted");
    close(row("nlp")["failed_gpu_hours"], 0.0, "nlp failed");
    close(row("nlp")["allocated_idle_gpu_hours"], h(90.0), "nlp idle");
    close(row("nlp")["failed_runs"], h(90.0) * 2.49, "nlp failed_runs");
    // The run finished at 2026-11-01T00:00:00Z: its unit counts in November.
    close(row("nlp")["accepted_units"], 0.0, "nlp October units");
    assert!(row("nlp")["cost_per_accepted_unit"].is_nan(), "no units, no cost per unit");

    // ml (mig-1: no pod or Workload label, namespace label ml): a 3g instance, 3 samples x 30 s
    // x 3/7 of a GPU, failed (OOMKilled, its own run).
    close(row("ml")["failed_gpu_hours"], h(90.0 * 3.0 / 7.0), "ml failed (MIG 3/7)");

    // sandbox (no team label anywhere: the namespace name): 2 active samples, still running.
    close(row("sandbox")["productive_gpu_hours"], h(60.0), "sandbox productive");

    // platform: C1 20 s before midnight (2.0/h by default), the free 2g instance (2/7 x 90 s)
    // and what D1's instances leave over ((7 - 3 - 2)/7 x 90 s), both at node-a's 1.10/h.
    let unalloc_s = 20.0 + 90.0 * 2.0 / 7.0 + 90.0 * 2.0 / 7.0;
    close(row("platform")["unallocated_gpu_hours"], h(unalloc_s), "platform unallocated");
    let unalloc_cost = h(20.0) * 2.0 + h(90.0 * 4.0 / 7.0) * 1.10;
    close(row("platform")["idle"], unalloc_cost, "platform idle (policy platform)");

    // Overheads: network 100 spread by allocated GPU-hours; support 10 charged to nlp only.
    let alloc = [("vision", 300.0), ("nlp", 180.0), ("ml", 90.0 * 3.0 / 7.0), ("sandbox", 60.0)];
    let total_alloc: f64 = alloc.iter().map(|(_, s)| s).sum();
    for (team, secs) in alloc {
        close(row(team)["network"], 100.0 * secs / total_alloc, &format!("{team} network share"));
    }
    close(row("nlp")["support"], 10.0, "nlp direct support");
    close(row("vision")["support"], 0.0, "vision support");
    close(row("platform")["network"], 0.0, "platform has no allocated hours");
    // total is the sum of its parts, and cost per unit divides it.
    let v = row("vision");
    let parts = v["compute"] + v["network"] + v["storage"] + v["support"] + v["idle"] + v["failed_runs"] + v["operations"];
    close(v["total"], parts, "vision total");
    close(v["cost_per_accepted_unit"], parts / 3.0, "vision cost per unit");

    // Idle policy share: platform's unallocated cost moves to teams by allocated hours; the
    // hours stay with platform.
    let shared = report_json(&store, &config, "2026-10", "share");
    let srow = |team: &str| &shared[&("2026-10".to_string(), team.to_string())];
    close(srow("platform")["idle"], 0.0, "platform idle (policy share)");
    close(srow("platform")["unallocated_gpu_hours"], h(unalloc_s), "hours stay with platform");
    close(srow("vision")["idle"], h(120.0) * 1.10 + unalloc_cost * 300.0 / total_alloc, "vision idle with its share");
    let sum_total = |r: &BTreeMap<(String, String), BTreeMap<String, f64>>| r.values().map(|x| x["total"]).sum::<f64>();
    close(sum_total(&shared), sum_total(&oct), "the policy moves money, it does not create any");

    // November: C1's 10 s after midnight plus its last sample's 30 s; nlp's unit.
    let nov = report_json(&store, &config, "2026-11", "platform");
    close(nov[&("2026-11".to_string(), "platform".to_string())]["unallocated_gpu_hours"], h(40.0), "November unallocated");
    close(nov[&("2026-11".to_string(), "nlp".to_string())]["accepted_units"], 1.0, "nlp November unit");

    // The derived tables: segments, waits, failures, unobserved time.
    run(&["ledger", "--store", &store.display().to_string(), "--config", &config.display().to_string(), "--progress", "off"], 0);
    let q = |sql: &str| crate::util::query(&store, sql);
    let segs = q("SELECT run, segment, outcome FROM run_segments WHERE namespace = 'research' ORDER BY run, segment");
    let segs: Vec<(String, i64, String)> = segs.iter().map(|r| (r["run"].as_str().unwrap().into(), r["segment"].as_i64().unwrap(), r["outcome"].as_str().unwrap().into())).collect();
    assert_eq!(
        segs,
        vec![
            ("pod/mig-1".into(), 1, "failed".into()),
            ("wl-eval".into(), 1, "preempted".into()),
            ("wl-eval".into(), 2, "succeeded".into()),
            ("wl-train".into(), 1, "succeeded".into())
        ]
    );
    // Waits: wl-eval waited 100 s (created -1000, admitted -900), then 50 s (evicted +200,
    // readmitted +250: the wait runs from the eviction, not the requeue at +210); wl-train 400 s
    // (created -1000, admitted -600).
    let waits = q("SELECT workload, segment, wait_seconds FROM queue_waits ORDER BY workload, segment");
    let waits: Vec<(String, i64, f64)> = waits.iter().map(|r| (r["workload"].as_str().unwrap().into(), r["segment"].as_i64().unwrap(), r["wait_seconds"].as_f64().unwrap())).collect();
    assert_eq!(waits, vec![("wl-eval".into(), 1, 100.0), ("wl-eval".into(), 2, 50.0), ("wl-train".into(), 1, 400.0)]);
    let failures = q("SELECT run, cause, exit_code FROM run_failures ORDER BY run");
    assert_eq!(failures[0]["run"], "pod/mig-1");
    assert_eq!(failures[0]["cause"], "OOMKilled");
    assert_eq!(failures[0]["exit_code"], 137);
    assert_eq!(failures[1]["cause"], "Preempted");
    let unobserved = q("SELECT SUM(gpu_hours) AS h FROM unobserved_gpu_hours");
    close(unobserved[0]["h"].as_f64().unwrap(), h(210.0), "unobserved gap");
}

/// A second hand-built capture: the shapes real clusters have and the simulator's first
/// versions did not (docs/accounting.md as of 2026-12-01), each on its own GPU, sampled every 30 s from
/// T0 (Oct 31 23:50, all in October). Namespace `research` (team ml), H100s at 2.49/h unless
/// said otherwise; max_gap 2.5 x 30 s = 75 s.
fn shapes_capture(dir: &Path) {
    std::fs::create_dir_all(dir.join("dcgm")).unwrap();
    std::fs::create_dir_all(dir.join("kubernetes")).unwrap();
    let h100 = "NVIDIA H100 80GB HBM3";
    let engine = |labels: &[(&str, &str)], v: f64, at: i64| sample("DCGM_FI_PROF_GR_ENGINE_ACTIVE", labels, v, at);
    let mut prom = String::new();
    // HA pair: both servers' samples of GPU-h1 (ha-0): replica a at 0, 30 .. 270 (busy), b 10 s
    // later (idle). Only a counts: 10 x 30 s = 300 s productive. (Counting both: observations
    // every 10 or 20 s, a third of the time idle.)
    for i in 0..10 {
        for (replica, offset, v) in [("a", 0, 0.5), ("b", 10, 0.0)] {
            let mut l = with_pod(gpu("node-h", "GPU-h1", h100), "research", "ha-0");
            l.push(("prometheus_replica", replica));
            prom += &engine(&l, v, i * 30 + offset);
        }
    }
    // PyTorchJob pt: pt-master-0 twice (same name, uids u-pt-1 and u-pt-2; the exporter writes
    // pod_uid). Segment 1 admitted at 0, evicted at 120: samples 0 .. 90, the one at 90 covering
    // to the next at 150 (60 s <= max_gap): 150 s preempted. Segment 2 readmitted at 150,
    // finished at 300: 150 .. 270, 5 x 30 s = 150 s productive.
    for (at, uid) in [(0, "u-pt-1"), (30, "u-pt-1"), (60, "u-pt-1"), (90, "u-pt-1"), (150, "u-pt-2"), (180, "u-pt-2"), (210, "u-pt-2"), (240, "u-pt-2"), (270, "u-pt-2")] {
        let mut l = with_pod(gpu("node-h", "GPU-p1", h100), "research", "pt-master-0");
        l.push(("pod_uid", uid));
        prom += &engine(&l, 0.7, at);
    }
    // wl-x failed at 180 after GPU-x1 fell off the bus: the XID field is 0 until 90, 79 from
    // 120. 6 x 30 s = 180 s failed, the platform's fault: the platform pays.
    for i in 0..6 {
        let l = with_pod(gpu("node-h", "GPU-x1", h100), "research", "x-0");
        prom += &engine(&l, 0.6, i * 30);
        prom += &sample("DCGM_FI_DEV_XID_ERRORS", &l, if i < 4 { 0.0 } else { 79.0 }, i * 30);
    }
    // GPU-u1's exporter writes its node's name in upper case: node-spot (pool spot-h100, 1.10/h).
    // 0 .. 90, nobody on it: 120 s unallocated at 1.10.
    for i in 0..4 {
        prom += &engine(&gpu("NODE-SPOT", "GPU-u1", h100), 0.0, i * 30);
    }
    // TrainJob tj -> JobSet tj -> Job tj-node-0 -> pod: 0 .. 90, 120 s productive; the TrainJob's
    // accepted-units annotation (4) counts: it owns the Workload.
    for i in 0..4 {
        prom += &engine(&with_pod(gpu("node-h", "GPU-t1", h100), "research", "tj-node-0-0-k2x7q"), 0.8, i * 30);
    }
    // Kueue plain pod plain-1 (its Workload, labelled team vision, is owned by the pod): 0, 30:
    // 60 s productive for vision, one unit.
    for at in [0, 30] {
        prom += &engine(&with_pod(gpu("node-h", "GPU-q1", h100), "research", "plain-1"), 0.8, at);
    }
    // wl-bad's accepted-units annotation is NaN: ignored, its Job's (2) counts. 0, 30: 60 s.
    for at in [0, 30] {
        prom += &engine(&with_pod(gpu("node-h", "GPU-z1", h100), "research", "bad-0"), 0.8, at);
    }
    // Time-slicing: GPU-s1 named by ts-a and ts-b at 0, 30, 60: 90 s, 45 s productive each.
    for at in [0, 30, 60] {
        for pod in ["ts-a", "ts-b"] {
            prom += &engine(&with_pod(gpu("node-h", "GPU-s1", h100), "research", pod), 0.9, at);
        }
    }
    std::fs::write(dir.join("dcgm/federate.prom"), prom).unwrap();

    let objects = json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-h", "uid": "uid-node-h", "creationTimestamp": ts(-90000),
            "labels": {"kubernetes.io/hostname": "node-h"}}, "status": {}},
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-spot", "uid": "uid-node-spot", "creationTimestamp": ts(-90000),
            "labels": {"kubernetes.io/hostname": "node-spot", "gpuledger.io/pool": "spot-h100"}}, "status": {}},
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "research", "uid": "uid-ns-r", "creationTimestamp": ts(-90000), "labels": {"team": "ml"}}},
        {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "pt", "namespace": "research", "uid": "uid-pt", "creationTimestamp": ts(-60)}, "spec": {}},
        {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": "tj", "namespace": "research", "uid": "uid-tj", "creationTimestamp": ts(-60),
            "annotations": {"gpuledger.io/accepted-units": "4"}}, "spec": {}},
        {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "tj", "namespace": "research", "uid": "uid-js-tj", "creationTimestamp": ts(-60),
            "ownerReferences": [{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": "tj", "uid": "uid-tj", "controller": true}]}, "spec": {}},
        {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "tj-node-0", "namespace": "research", "uid": "uid-job-tj-node-0", "creationTimestamp": ts(-60),
            "ownerReferences": [{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "tj", "uid": "uid-js-tj", "controller": true}]}, "spec": {}, "status": {}},
        {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "job-x", "namespace": "research", "uid": "uid-job-job-x", "creationTimestamp": ts(-60)}, "spec": {}, "status": {}},
        {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "job-bad", "namespace": "research", "uid": "uid-job-job-bad", "creationTimestamp": ts(-60),
            "annotations": {"gpuledger.io/accepted-units": "2"}}, "spec": {}, "status": {}},
    ]});
    std::fs::write(dir.join("kubernetes/objects.json"), serde_json::to_string_pretty(&objects).unwrap()).unwrap();

    let running = |start: i64| json!({"phase": "Running", "startTime": ts(start)});
    let ended = |phase: &str, start: i64, end: i64, reason: &str, code: i64| json!({"phase": phase, "startTime": ts(start),
        "containerStatuses": [{"name": "main", "state": {"terminated": {"reason": reason, "exitCode": code, "finishedAt": ts(end)}}}]});
    let owned = |mut p: Value, api: &str, kind: &str, name: &str, uid: &str| {
        p["metadata"]["ownerReferences"] = json!([{"apiVersion": api, "kind": kind, "name": name, "uid": uid, "controller": true}]);
        p
    };
    let with_uid = |mut p: Value, uid: &str| {
        p["metadata"]["uid"] = json!(uid);
        p
    };
    let pt = |uid: &str, status: Value| with_uid(owned(pod("research", "pt-master-0", "node-h", None, json!({}), status), "kubeflow.org/v1", "PyTorchJob", "pt", "uid-pt"), uid);
    let pods = watch(&[
        ("ADDED", pod("research", "ha-0", "node-h", None, json!({}), running(-10))),
        ("ADDED", pt("u-pt-1", running(0))),
        ("MODIFIED", pt("u-pt-1", ended("Failed", 0, 125, "Error", 143))),
        ("DELETED", pt("u-pt-1", ended("Failed", 0, 125, "Error", 143))),
        ("ADDED", pt("u-pt-2", running(150))),
        ("MODIFIED", pt("u-pt-2", ended("Succeeded", 150, 300, "Completed", 0))),
        ("ADDED", pod("research", "x-0", "node-h", Some("job-x"), json!({}), running(0))),
        ("MODIFIED", pod("research", "x-0", "node-h", Some("job-x"), json!({}), ended("Failed", 0, 180, "Error", 1))),
        ("ADDED", pod("research", "tj-node-0-0-k2x7q", "node-h", Some("tj-node-0"), json!({}), ended("Succeeded", 0, 120, "Completed", 0))),
        ("ADDED", pod("research", "plain-1", "node-h", None, json!({}), ended("Succeeded", 0, 60, "Completed", 0))),
        ("ADDED", pod("research", "bad-0", "node-h", Some("job-bad"), json!({}), ended("Succeeded", 0, 60, "Completed", 0))),
        ("ADDED", pod("research", "ts-a", "node-h", None, json!({}), running(-10))),
        ("ADDED", pod("research", "ts-b", "node-h", None, json!({}), running(-10))),
    ]);
    std::fs::write(dir.join("kubernetes/pods.watch.jsonl"), pods).unwrap();

    let admitted = |at: i64| vec![cond("QuotaReserved", "True", "QuotaReserved", at), cond("Admitted", "True", "Admitted", at)];
    let finished = |reason: &str, at: i64| {
        let mut c = admitted(0);
        c.push(cond("Finished", "True", reason, at));
        c
    };
    let wl = |name: &str, api: &str, kind: &str, owner: &str, owner_uid: &str, labels: Value, annotations: Value, conditions: Vec<Value>| {
        let mut w = workload(name, owner, labels, annotations, conditions, true);
        w["metadata"]["ownerReferences"] = json!([{"apiVersion": api, "kind": kind, "name": owner, "uid": owner_uid, "controller": true}]);
        w
    };
    let mut pt_evicted = admitted(0);
    pt_evicted.push(cond("Evicted", "True", "Preempted", 120));
    let mut pt_done = admitted(150);
    pt_done.extend([cond("Evicted", "False", "QuotaReserved", 150), cond("Finished", "True", "Succeeded", 300)]);
    let workloads = watch(&[
        ("ADDED", wl("wl-pt", "kubeflow.org/v1", "PyTorchJob", "pt", "uid-pt", json!({}), json!({}), admitted(0))),
        ("MODIFIED", wl("wl-pt", "kubeflow.org/v1", "PyTorchJob", "pt", "uid-pt", json!({}), json!({}), pt_evicted)),
        ("MODIFIED", wl("wl-pt", "kubeflow.org/v1", "PyTorchJob", "pt", "uid-pt", json!({}), json!({}), pt_done)),
        ("ADDED", wl("wl-x", "batch/v1", "Job", "job-x", "uid-job-job-x", json!({}), json!({}), finished("Failed", 180))),
        ("ADDED", wl("wl-tj", "trainer.kubeflow.org/v1alpha1", "TrainJob", "tj", "uid-tj", json!({}), json!({}), finished("Succeeded", 120))),
        ("ADDED", wl("pod-plain-1-3f2a1", "v1", "Pod", "plain-1", "uid-pod-plain-1", json!({"team": "vision"}), json!({}), finished("Succeeded", 60))),
        ("ADDED", wl("wl-bad", "batch/v1", "Job", "job-bad", "uid-job-job-bad", json!({}), json!({"gpuledger.io/accepted-units": "NaN"}), finished("Succeeded", 60))),
    ]);
    std::fs::write(dir.join("kubernetes/workloads.watch.jsonl"), workloads).unwrap();
}

#[test]
fn hand_built_capture_of_real_world_shapes() {
    let tmp = tempfile::tempdir().unwrap();
    let capture = tmp.path().join("capture");
    let store = tmp.path().join("store");
    shapes_capture(&capture);
    let summary = ingest(&[&capture], &store);
    assert_eq!(summary["rejected"].as_u64(), Some(0), "{summary}");
    let config = tmp.path().join("gpuledger.toml");
    std::fs::write(&config, HAND_CONFIG).unwrap();
    let (s, c) = (store.display().to_string(), config.display().to_string());
    let out = run(&["ledger", "--store", &s, "--config", &c, "--progress", "off"], 0);
    // The bad annotation is reported, with the object it is on.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("wl-bad") && stderr.contains("NaN"), "{stderr}");
    let q = |sql: &str| -> Vec<Value> { serde_json::from_slice(&run(&["query", "--store", &s, "--format", "json", sql], 0).stdout).unwrap() };

    // GPU-seconds per run, segment and state (see shapes_capture for each figure).
    let hours = q("SELECT run, segment, state, team, round(sum(gpu_hours) * 3600, 6) AS s FROM priced_state_hours WHERE run IS NOT NULL GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3");
    let got: Vec<(String, i64, String, String, f64)> = hours
        .iter()
        .map(|r| (r["run"].as_str().unwrap().into(), r["segment"].as_i64().unwrap(), r["state"].as_str().unwrap().into(), r["team"].as_str().unwrap().into(), r["s"].as_f64().unwrap()))
        .collect();
    let want: Vec<(String, i64, String, String, f64)> = [
        ("pod-plain-1-3f2a1", 1, "productive", "vision", 60.0),
        ("pod/ha-0", 1, "productive", "ml", 300.0),
        ("pod/ts-a", 1, "productive", "ml", 45.0),
        ("pod/ts-b", 1, "productive", "ml", 45.0),
        ("wl-bad", 1, "productive", "ml", 60.0),
        ("wl-pt", 1, "preempted", "ml", 150.0),
        ("wl-pt", 2, "productive", "ml", 150.0),
        ("wl-tj", 1, "productive", "ml", 120.0),
        ("wl-x", 1, "failed", "ml", 180.0),
    ]
    .iter()
    .map(|(r, g, st, t, v)| (r.to_string(), *g, st.to_string(), t.to_string(), *v))
    .collect();
    assert_eq!(got, want);

    // The upper-case hostname found node-spot: its pool's price.
    let spot = q("SELECT node, state, price, round(sum(gpu_hours) * 3600, 6) AS s FROM priced_state_hours WHERE run IS NULL GROUP BY 1, 2, 3");
    assert_eq!(spot.len(), 1, "{spot:?}");
    assert_eq!((spot[0]["node"].as_str(), spot[0]["state"].as_str(), spot[0]["price"].as_f64(), spot[0]["s"].as_f64()), (Some("node-spot"), Some("unallocated"), Some(1.10), Some(120.0)));

    // wl-x was lost to XID 79: the platform pays its 180 s (0.05 h x 2.49 = 0.1245).
    let failures = q("SELECT run, cause, paid_by FROM run_failures ORDER BY run");
    let failures: Vec<(String, String, String)> = failures.iter().map(|r| (r["run"].as_str().unwrap().into(), r["cause"].as_str().unwrap().into(), r["paid_by"].as_str().unwrap().into())).collect();
    assert_eq!(failures, vec![("wl-pt".into(), "Preempted".into(), "team".into()), ("wl-x".into(), "XID 79".into(), "platform".into())]);
    let cb = q("SELECT team, failed_gpu_hours, failed_runs, lost_gpu_hours_platform_paid, lost_cost_platform_paid, preempted_gpu_hours FROM chargeback_monthly WHERE month = '2026-10' ORDER BY team");
    let row = |team: &str| cb.iter().find(|r| r["team"] == team).unwrap_or_else(|| panic!("no {team}: {cb:?}"));
    let h = |s: f64| s / 3600.0;
    close(row("ml")["failed_gpu_hours"].as_f64().unwrap(), h(180.0), "ml failed hours stay ml's");
    close(row("ml")["lost_gpu_hours_platform_paid"].as_f64().unwrap(), h(180.0), "paid by the platform");
    close(row("ml")["lost_cost_platform_paid"].as_f64().unwrap(), h(180.0) * 2.49, "its cost");
    // ml's failed runs keep the preemption (150 s) only.
    close(row("ml")["failed_runs"].as_f64().unwrap(), h(150.0) * 2.49, "ml failed_runs");
    close(row("platform")["failed_runs"].as_f64().unwrap(), h(180.0) * 2.49, "platform failed_runs");

    // Units: ml 1 (wl-pt) + 4 (wl-tj: the TrainJob's annotation) + 2 (wl-bad: NaN ignored, the
    // Job's 2) = 7; vision 1 (the plain pod's Workload).
    let units = q("SELECT team, sum(accepted_units) AS u FROM accepted_units_monthly GROUP BY 1 ORDER BY 1");
    let units: Vec<(String, f64)> = units.iter().map(|r| (r["team"].as_str().unwrap().into(), r["u"].as_f64().unwrap())).collect();
    assert_eq!(units, vec![("ml".into(), 7.0), ("vision".into(), 1.0)]);
}

// ---------------------------------------------------------------------------------------------
// Simulated clusters against the simulator's truth.
// ---------------------------------------------------------------------------------------------

/// The configuration the simulated clusters are priced with (pool label, model, default).
const SIM_CONFIG: &str = r#"
[accounting]
idle_policy = "platform"

[prices]
default = 1.75
[prices.by_model]
"NVIDIA H100 80GB HBM3" = 2.49
[prices.by_node_label."gpuledger.io/pool"]
a100-mig = 1.60
l4 = 0.80

[[overheads]]
month = "2026-10"
network = 310.0
storage = 190.0
support = 120.0
operations = 380.0

[[overheads]]
month = "2026-10"
team = "serving"
support = 50.0

[[overheads]]
month = "2026-11"
network = 90.0
operations = 40.0

[units]
files = ["units.csv"]

# The simulated vLLM fleet's counters (inference/*.prom).
[[units.counters]]
metric = "vllm:generation_tokens_total"
unit = "1M-tokens"
scale = 1e-6

[[units.counters]]
metric = "vllm:request_success_total"
unit = "requests"
match = 'finished_reason=~"stop|length"'
"#;

/// Extra units from elsewhere (an inference server's success counter, say).
const SIM_UNITS: &str = "month,team,unit,accepted_units\n2026-10,serving,request,1000\n2026-11,serving,request,250.5\n";

/// Who pays for lost runs in one truth check: (hardware_failures, preemptions).
type Payers = (&'static str, &'static str);

/// The chargeback the simulator's truth implies, computed here independently of the ledger:
/// GPU-hours by (month, team, state, pool, model) from expected.json, priced by the same rules.
fn expected_chargeback(expected: &Value, policy: &str, (hardware, preemptions): Payers) -> BTreeMap<(String, String), BTreeMap<&'static str, f64>> {
    let price = |pool: &str, model: &str| match (pool, model) {
        ("a100-mig", _) => 1.60,
        ("l4", _) => 0.80,
        (_, "NVIDIA H100 80GB HBM3") => 2.49,
        _ => 1.75,
    };
    let mut rows: BTreeMap<(String, String), BTreeMap<&'static str, f64>> = BTreeMap::new();
    let mut months: BTreeMap<String, (f64, f64)> = BTreeMap::new(); // allocated hours, unallocated cost
    let mut platform_paid: BTreeMap<String, f64> = BTreeMap::new(); // lost cost the platform pays, per month
    for r in expected["gpu_hours"].as_array().unwrap() {
        let (month, team, state) = (r["month"].as_str().unwrap(), r["team"].as_str().unwrap(), r["state"].as_str().unwrap());
        let hours = r["gpu_hours"].as_f64().unwrap();
        let cost = hours * price(r["pool"].as_str().unwrap(), r["model_name"].as_str().unwrap());
        let row = rows.entry((month.into(), team.into())).or_default();
        *row.entry(match state {
            "productive" => "productive_gpu_hours",
            "allocated_idle" => "allocated_idle_gpu_hours",
            "failed" => "failed_gpu_hours",
            "preempted" => "preempted_gpu_hours",
            _ => "unallocated_gpu_hours",
        })
        .or_default() += hours;
        let m = months.entry(month.into()).or_default();
        match state {
            "productive" => *row.entry("compute").or_default() += cost,
            "allocated_idle" => *row.entry("idle").or_default() += cost,
            "failed" | "preempted" => {
                // Hours a hardware fault lost, and all preempted hours, as the settings say.
                let fault = r["hardware_fault_gpu_hours"].as_f64().unwrap();
                let paid = if state == "preempted" && preemptions == "platform" {
                    hours
                } else if hardware == "platform" {
                    fault
                } else {
                    0.0
                };
                let paid_cost = paid * price(r["pool"].as_str().unwrap(), r["model_name"].as_str().unwrap());
                *row.entry("failed_runs").or_default() += cost - paid_cost;
                *row.entry("lost_gpu_hours_platform_paid").or_default() += paid;
                *row.entry("lost_cost_platform_paid").or_default() += paid_cost;
                *platform_paid.entry(month.into()).or_default() += paid_cost;
            }
            _ => m.1 += cost,
        }
        if state != "unallocated" {
            *row.entry("allocated").or_default() += hours;
            m.0 += hours;
        }
    }
    for month in months.keys() {
        let platform = rows.entry((month.clone(), "platform".into())).or_default();
        *platform.entry("failed_runs").or_default() += platform_paid.get(month).copied().unwrap_or(0.0);
    }
    let spread: BTreeMap<&str, [(&str, f64); 4]> = BTreeMap::from([
        ("2026-10", [("network", 310.0), ("storage", 190.0), ("support", 120.0), ("operations", 380.0)]),
        ("2026-11", [("network", 90.0), ("storage", 0.0), ("support", 0.0), ("operations", 40.0)]),
    ]);
    for ((month, team), row) in rows.iter_mut() {
        let (alloc, unalloc_cost) = months.get(month).copied().unwrap_or_default();
        let share = if alloc > 0.0 { row.get("allocated").copied().unwrap_or(0.0) / alloc } else if team == "platform" { 1.0 } else { 0.0 };
        if let Some(amounts) = spread.get(month.as_str()) {
            for (component, amount) in amounts {
                *row.entry(component).or_default() += amount * share;
            }
        }
        if month == "2026-10" && team == "serving" {
            *row.entry("support").or_default() += 50.0;
        }
        let idle_extra = if policy == "share" && alloc > 0.0 { unalloc_cost * share } else if team == "platform" { unalloc_cost } else { 0.0 };
        *row.entry("idle").or_default() += idle_extra;
    }
    for u in expected["accepted_units"].as_array().unwrap() {
        let key = (u["month"].as_str().unwrap().to_string(), u["team"].as_str().unwrap().to_string());
        *rows.entry(key).or_default().entry("accepted_units").or_default() += u["accepted_units"].as_f64().unwrap();
    }
    *rows.entry(("2026-10".into(), "serving".into())).or_default().entry("accepted_units").or_default() += 1000.0;
    *rows.entry(("2026-11".into(), "serving".into())).or_default().entry("accepted_units").or_default() += 250.5;
    for row in rows.values_mut() {
        let total: f64 = ["compute", "network", "storage", "support", "idle", "failed_runs", "operations"].iter().map(|c| row.get(c).copied().unwrap_or(0.0)).sum();
        row.insert("total", total);
    }
    rows
}

fn check_simulated(gpus: u32, days: u32, seed: u64, interval: u32, start: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let capture = tmp.path().join("capture");
    let store = tmp.path().join("store");
    run(
        &["simulate", "--out", &capture.display().to_string(), "--gpus", &gpus.to_string(), "--days", &days.to_string(), "--seed", &seed.to_string(),
          "--scrape-interval", &format!("{interval}s"), "--start", start],
        0,
    );
    ingest(&[&capture], &store);
    let config = tmp.path().join("gpuledger.toml");
    std::fs::write(tmp.path().join("units.csv"), SIM_UNITS).unwrap();
    let expected: Value = serde_json::from_slice(&std::fs::read(capture.join("expected.json")).unwrap()).unwrap();
    let case = format!("{gpus} GPUs, {days} days, seed {seed}, {interval}s from {start}");

    // Some lost segments were the hardware's fault (XID 79 or 48), so who pays is tested.
    let fault_hours: f64 = expected["gpu_hours"].as_array().unwrap().iter().map(|r| r["hardware_fault_gpu_hours"].as_f64().unwrap()).sum();
    assert!(fault_hours > 0.0, "{case}: no hardware faults drawn");
    // Both idle policies, and both settings of each who-pays key (two ledger runs, not eight).
    for (policy, payers) in [("platform", ("platform", "team")), ("share", ("team", "platform"))] {
        // One ledger run per policy gives every month's chargeback (the report's CSV columns);
        // `report --format csv` is the same query (serve_http and the demo test compare them).
        let accounting = format!("idle_policy = \"{policy}\"\nhardware_failures = \"{}\"\npreemptions = \"{}\"", payers.0, payers.1);
        std::fs::write(&config, SIM_CONFIG.replace("idle_policy = \"platform\"", &accounting)).unwrap();
        let (s, c) = (store.display().to_string(), config.display().to_string());
        run(&["ledger", "--store", &s, "--config", &c, "--progress", "off"], 0);
        let sql = format!("SELECT {} FROM chargeback_monthly ORDER BY month, team", gpuledger_ledger::report::CSV_COLUMNS.join(", "));
        let all = parse_csv(&String::from_utf8(run(&["query", "--store", &s, "--format", "csv", &sql], 0).stdout).unwrap());
        let want = expected_chargeback(&expected, policy, payers);
        let months: std::collections::BTreeSet<&String> = want.keys().map(|(m, _)| m).collect();
        assert!(!months.is_empty(), "{case}: the simulation has no months");
        let got_months: std::collections::BTreeSet<&String> = all.keys().map(|(m, _)| m).collect();
        assert_eq!(got_months, months, "{case} {policy}: months");
        // Every differing figure, so that one failure shows them all.
        let mut wrong: Vec<String> = Vec::new();
        for month in months {
            let got: BTreeMap<(String, String), BTreeMap<String, f64>> = all.iter().filter(|((m, _), _)| m == month).map(|(k, v)| (k.clone(), v.clone())).collect();
            let want_teams: Vec<&String> = want.keys().filter(|(m, _)| m == month).map(|(_, t)| t).collect();
            let got_teams: Vec<&String> = got.keys().map(|(_, t)| t).collect();
            assert_eq!(got_teams, want_teams, "{case} {month} {policy}: teams");
            for ((m, team), w) in want.iter().filter(|((m, _), _)| m == month) {
                let g = &got[&(m.clone(), team.clone())];
                for column in gpuledger_ledger::report::CSV_COLUMNS.iter().skip(2) {
                    let gv = g[*column];
                    if *column == "cost_per_accepted_unit" {
                        let units = w.get("accepted_units").copied().unwrap_or(0.0);
                        if units > 0.0 && (gv - w["total"] / units).abs() >= 0.01 {
                            wrong.push(format!("{month} {team}: cost per unit {gv}, simulator says {}", w["total"] / units));
                        } else if units == 0.0 && !gv.is_nan() {
                            wrong.push(format!("{month} {team}: cost per unit {gv} should be empty"));
                        }
                        continue;
                    }
                    let wv = w.get(column).copied().unwrap_or(0.0);
                    if (gv - wv).abs() >= 0.01 {
                        wrong.push(format!("{month} {team}: {column} = {gv}, simulator says {wv}"));
                    }
                }
            }
        }
        assert!(wrong.is_empty(), "{case} {policy}:\n{}", wrong.join("\n"));
    }

    // Why GPUs were idle: every (month, team, state, reason) and every pool's stranded hours.
    let s = store.display().to_string();
    let query_json = |sql: &str| -> Vec<Value> { serde_json::from_slice(&run(&["query", "--store", &s, "--format", "json", sql], 0).stdout).unwrap() };

    // The vLLM fleet's units, unit by unit, exactly: the tokens and accepted requests its
    // counters counted (restarts included), as the simulator counted them from the values it wrote.
    let fleet = |rows: &[Value]| -> Vec<(String, String, f64)> {
        let mut v: Vec<(String, String, f64)> = rows
            .iter()
            .filter(|r| r["team"] == "llm-inference")
            .map(|r| (r["month"].as_str().unwrap().to_owned(), r["unit"].as_str().unwrap().to_owned(), r["accepted_units"].as_f64().unwrap()))
            .collect();
        v.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
        v
    };
    let want_fleet = fleet(expected["accepted_units"].as_array().unwrap());
    assert!(want_fleet.iter().any(|(_, u, n)| u == "1M-tokens" && *n > 0.0), "{case}: the simulated fleet generated tokens: {want_fleet:?}");
    assert_eq!(fleet(&query_json("SELECT month, team, unit, accepted_units FROM accepted_units_monthly")), want_fleet, "{case}: the inference fleet's units");
    let key = |r: &Value, fields: &[&str]| -> Vec<String> { fields.iter().map(|f| r[*f].as_str().unwrap_or("").to_owned()).collect() };
    let sum_by = |rows: &[Value], fields: &[&str], value: &str| -> BTreeMap<Vec<String>, f64> {
        let mut sums = BTreeMap::new();
        for r in rows {
            *sums.entry(key(r, fields)).or_default() += r[value].as_f64().unwrap();
        }
        sums
    };
    let fields = ["month", "team", "state", "reason"];
    let want = sum_by(expected["idle_reasons"].as_array().unwrap(), &fields, "gpu_hours");
    let got = sum_by(&query_json("SELECT month, team, state, reason, gpu_hours FROM idle_reasons_monthly"), &fields, "gpu_hours");
    let wrong = differences(&got, &want, "h");
    assert!(wrong.is_empty(), "{case}: idle reasons\n{}", wrong.join("\n"));
    // Every reason occurs, so each rule was exercised against the simulator's own reading.
    for reason in ["startup", "stall", "teardown", "cordoned", "stranded", "no_demand"] {
        let hours: f64 = want.iter().filter(|(k, _)| k[3] == reason).map(|(_, h)| h).sum();
        assert!(hours > 0.01, "{case}: the simulation draws no {reason} time");
    }
    // Stranded hours per month and pool; the ledger keys its rows by the pool label that priced
    // them (the test prices some pools by model) and the GPU model, so pools are compared by model.
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    let model_of: BTreeMap<String, String> = expected["gpu_hours"].as_array().unwrap().iter().map(|r| (text(&r["pool"]), text(&r["model_name"]))).collect();
    let mut want: BTreeMap<Vec<String>, f64> = BTreeMap::new();
    for r in expected["stranded"].as_array().unwrap() {
        let model = model_of[&text(&r["pool"])].clone();
        *want.entry(vec![text(&r["month"]), model]).or_default() += r["gpu_hours"].as_f64().unwrap();
    }
    let mut got: BTreeMap<Vec<String>, f64> = BTreeMap::new();
    for r in query_json("SELECT month, model_name, stranded_gpu_hours FROM stranded_monthly WHERE stranded_gpu_hours > 0") {
        *got.entry(key(&r, &["month", "model_name"])).or_default() += r["stranded_gpu_hours"].as_f64().unwrap();
    }
    let want: BTreeMap<Vec<String>, f64> = want.into_iter().filter(|(_, h)| *h > 0.0).collect();
    assert_eq!(got.keys().collect::<Vec<_>>(), want.keys().collect::<Vec<_>>(), "{case}: pools with stranded hours");
    for (k, w) in &want {
        assert!((got[k] - w).abs() < 0.01, "{case}: stranded hours of {k:?}: ledger {}, simulator {w}", got[k]);
    }

    // Energy per month, team and state: the counter's rise (resets counted from the new value)
    // or the power reading, shared like the hours.
    let fields = ["month", "team", "state"];
    let want = sum_by(expected["energy"].as_array().unwrap(), &fields, "kwh");
    assert!(want.values().sum::<f64>() > 1.0, "{case}: the simulation draws no energy");
    let got = sum_by(&query_json("SELECT month, team, state, kwh FROM energy_monthly WHERE kwh > 0"), &fields, "kwh");
    let wrong = differences(&got, &want, "kWh");
    assert!(wrong.is_empty(), "{case}: energy\n{}", wrong.join("\n"));

    // The hardware fault the ledger names as each lost segment's cause is the one the simulator drew.
    let sql = "SELECT namespace, run, segment, cause FROM run_failures WHERE cause LIKE 'XID %' OR cause IN ('NodeNotReady', 'NodeDeleted') ORDER BY namespace, run, segment";
    let out = run(&["query", "--store", &store.display().to_string(), "--format", "json", sql], 0);
    let got: Vec<(String, String, i64, String)> = serde_json::from_slice::<Vec<Value>>(&out.stdout)
        .unwrap()
        .iter()
        .map(|r| (r["namespace"].as_str().unwrap().into(), r["run"].as_str().unwrap().into(), r["segment"].as_i64().unwrap(), r["cause"].as_str().unwrap().into()))
        .collect();
    let mut want: Vec<(String, String, i64, String)> = expected["runs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| !r["fault"].is_null())
        .map(|r| (r["namespace"].as_str().unwrap().into(), r["workload"].as_str().unwrap().into(), r["segment"].as_i64().unwrap(), r["fault"].as_str().unwrap().into()))
        .collect();
    want.sort();
    assert!(!want.is_empty(), "{case}: no lost segment has a hardware fault");
    assert_eq!(got, want, "{case}: segments lost to hardware faults");
}

/// Every key whose figure differs by 0.01 or more between the ledger (`got`) and the simulator
/// (`want`), a key missing on one side counting as 0 there; one line each.
fn differences(got: &BTreeMap<Vec<String>, f64>, want: &BTreeMap<Vec<String>, f64>, unit: &str) -> Vec<String> {
    let keys: std::collections::BTreeSet<&Vec<String>> = want.keys().chain(got.keys()).collect();
    keys.into_iter()
        .filter_map(|k| {
            let (g, w) = (got.get(k).copied().unwrap_or(0.0), want.get(k).copied().unwrap_or(0.0));
            ((g - w).abs() >= 0.01).then(|| format!("{}: ledger {g:.4} {unit}, simulator {w:.4} {unit}", k.join(" ")))
        })
        .collect()
}

/// Crosses the October/November boundary, MIG, preemption and readmission, failures, a node
/// without profiling metrics (l4, t4), pod-level team labels, a namespace without one (sandbox),
/// unit annotations, per-team overheads, extra units from a CSV, scrape gaps of both kinds.
#[test]
fn simulated_cluster_matches_simulator_truth_across_a_month_boundary() {
    check_simulated(24, 3, 7, 30, "2026-10-30T00:00:00Z");
}

/// Another seed and size at a one-minute scrape.
#[test]
fn simulated_cluster_matches_simulator_truth_other_seed() {
    check_simulated(16, 2, 1234, 60, "2026-10-31T06:00:00Z");
}

/// The simulator leaves a notebook holding a whole H100 node over one day of a 10-day capture
/// (expected.json `anomaly_spikes`): the ledger flags its team's day and names the notebook's
/// GPUs, run and pod as what drove it, each GPU's cost that day being a whole day at the H100
/// price.
#[test]
fn a_notebook_left_holding_gpus_is_flagged_and_named() {
    let tmp = tempfile::tempdir().unwrap();
    let capture = tmp.path().join("capture");
    let store = tmp.path().join("store");
    let (c, s) = (capture.display().to_string(), store.display().to_string());
    run(&["simulate", "--out", &c, "--gpus", "8", "--days", "10", "--seed", "5", "--scrape-interval", "300s", "--start", "2026-11-01T00:00:00Z"], 0);
    ingest(&[&capture], &store);
    let config = tmp.path().join("gpuledger.toml");
    std::fs::write(tmp.path().join("units.csv"), SIM_UNITS).unwrap();
    std::fs::write(&config, SIM_CONFIG).unwrap();
    let cf = config.display().to_string();
    run(&["ledger", "--store", &s, "--config", &cf, "--progress", "off"], 0);
    let expected: Value = serde_json::from_slice(&std::fs::read(capture.join("expected.json")).unwrap()).unwrap();
    let spikes = expected["anomaly_spikes"].as_array().unwrap();
    assert_eq!(spikes.len(), 1, "{spikes:?}");
    let spike = &spikes[0];
    let (day, team) = (spike["day"].as_str().unwrap(), spike["team"].as_str().unwrap());
    assert_eq!((day, team), ("2026-11-09", "ml-research"), "the second-to-last day, the ml-research namespace's team");
    let gpus: BTreeSet<&str> = spike["gpus"].as_array().unwrap().iter().map(|g| g.as_str().unwrap()).collect();
    assert_eq!(gpus.len(), 8, "every GPU of an H100 node");

    let csv = String::from_utf8(run(&["report", "--store", &s, "--config", &cf, "--month", "2026-11", "--format", "anomalies-csv"], 0).stdout).unwrap();
    let mut lines = csv.lines();
    assert_eq!(lines.next(), Some("day,team,cost,baseline,spread,score,flagged"));
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    let row = rows.iter().find(|r| r[0] == day && r[1] == team).unwrap_or_else(|| panic!("no {day} {team} row:\n{csv}"));
    // Flagged: at least 3 spreads above the baseline, or above it where the spread is 0 (a team
    // that held nothing on most days).
    let spread: f64 = row[4].parse().unwrap();
    assert!(row[6] == "true" && if spread > 0.0 { row[5].parse::<f64>().unwrap() >= 3.0 } else { row[5].is_empty() }, "{row:?}");
    // Ten complete days (the capture's last scrape, 11-11 00:00, is an observation after
    // 11-10): every team that held GPUs has a row for each, scored from the eighth.
    assert_eq!(rows.iter().filter(|r| r[1] == team).count(), 10, "{csv}");
    assert!(rows.iter().all(|r| (r[0] >= "2026-11-08") != r[5].is_empty() || r[3] == "0.0000"), "{csv}");

    let sql = format!("SELECT rank, node, uuid, run, pod, CAST(cost AS DOUBLE) AS cost, CAST(increase AS DOUBLE) AS increase FROM anomaly_drivers WHERE day = '{day}' AND team = '{team}' ORDER BY rank");
    let drivers = query(&store, &sql);
    assert!(drivers.len() >= 8, "{drivers:?}");
    let unobserved_h100: f64 = expected["unobserved_gpu_hours"].as_array().unwrap().iter()
        .filter(|r| r["month"] == "2026-11" && r["pool"] == "h100").map(|r| r["gpu_hours"].as_f64().unwrap()).sum();
    let top: BTreeSet<&str> = drivers[..8].iter().map(|d| d["uuid"].as_str().unwrap()).collect();
    assert_eq!(top, gpus, "the notebook's GPUs drove the day: {drivers:?}");
    for d in &drivers[..8] {
        assert_eq!(d["node"], spike["node"], "{d}");
        assert_eq!(d["run"], spike["run"], "{d}");
        assert_eq!(d["pod"], spike["pod"], "{d}");
        // At most the whole day at the H100's 2.49 an hour (each hour's productive and idle rows
        // are rounded to the micro-unit apart), less only what no sample covered (the month's
        // unobserved H100 hours, per GPU, bound it); none of it usual.
        let cost = d["cost"].as_f64().unwrap();
        assert!((24.0 * 2.49 - (unobserved_h100 / 8.0 + 300.0 / 3600.0) * 2.49..=24.0 * 2.49 + 48e-6).contains(&cost), "{d}");
        assert_eq!(d["increase"].as_f64().unwrap(), cost, "{d}");
        assert_eq!(d["cost"], drivers[0]["cost"], "one pod on the whole node: the same time on each GPU");
    }
    // The table report names them too: the top 5 of the day, and how many more the JSON has.
    let table = String::from_utf8(run(&["report", "--store", &s, "--config", &cf, "--month", "2026-11"], 0).stdout).unwrap();
    let section = table.split("What drove them").nth(1).unwrap_or_else(|| panic!("{table}"));
    let day_rows: Vec<&str> = section.lines().filter(|l| l.starts_with(day)).collect();
    assert_eq!(day_rows.len(), 5, "{section}");
    assert!(day_rows.iter().all(|l| gpus.iter().any(|g| l.contains(g)) && l.contains(spike["pod"].as_str().unwrap())), "{section}");
    assert!(section.contains(" more (report --format json"), "{section}");
}

/// Quota ownership on a simulated cluster (docs/accounting.md "Quota"): the ClusterQueues' nominal,
/// used, borrowed and unused GPU-hours against the simulator's own hour-by-hour count
/// (expected.json `quota`), owners from labels and [[quota.owners]], no queue charged more than
/// its unused time at its flavor's price, and the month's money the same under every idle policy.
#[test]
fn quota_matches_the_simulator_and_every_idle_policy_charges_the_same_month() {
    let tmp = tempfile::tempdir().unwrap();
    let capture = tmp.path().join("capture");
    let store = tmp.path().join("store");
    let (c, s) = (capture.display().to_string(), store.display().to_string());
    run(&["simulate", "--out", &c, "--gpus", "8", "--days", "2", "--seed", "3", "--scrape-interval", "300s", "--start", "2026-10-31T00:00:00Z"], 0);
    ingest(&[&capture], &store);
    std::fs::write(tmp.path().join("units.csv"), SIM_UNITS).unwrap();
    let config = tmp.path().join("gpuledger.toml");
    let cf = config.display().to_string();
    let expected: Value = serde_json::from_slice(&std::fs::read(capture.join("expected.json")).unwrap()).unwrap();
    let owners = "\n[[quota.owners]]\ncluster_queue = \"cq-serving\"\nteam = \"serving\"\n";
    // Per policy: every (month, team)'s idle and total.
    type Teams = BTreeMap<(String, String), (f64, f64)>;
    let mut by_policy: BTreeMap<&str, Teams> = BTreeMap::new();
    let mut quota_rows = Vec::new();
    for policy in ["platform", "share", "quota"] {
        std::fs::write(&config, SIM_CONFIG.replace("idle_policy = \"platform\"", &format!("idle_policy = \"{policy}\"")) + owners).unwrap();
        run(&["ledger", "--store", &s, "--config", &cf, "--progress", "off"], 0);
        let rows = query(&store, "SELECT month, team, CAST(idle AS DOUBLE) AS idle, CAST(total AS DOUBLE) AS total FROM chargeback_monthly");
        let got = rows.iter().map(|r| ((r["month"].as_str().unwrap().to_string(), r["team"].as_str().unwrap().to_string()), (r["idle"].as_f64().unwrap(), r["total"].as_f64().unwrap()))).collect();
        by_policy.insert(policy, got);
        if policy == "quota" {
            quota_rows = query(&store, "SELECT month, cluster_queue, team, flavor, nominal_gpu_hours, used_gpu_hours, borrowed_gpu_hours, unused_gpu_hours, CAST(unused_cost AS DOUBLE) AS unused_cost FROM quota_monthly");
        }
    }
    // Money is conserved: each month's total is the same under every policy (to the micro-unit).
    let month_total = |policy: &str, month: &str| -> f64 { by_policy[policy].iter().filter(|((m, _), _)| m == month).map(|(_, (_, t))| t).sum() };
    let months: BTreeSet<String> = by_policy["platform"].keys().map(|(m, _)| m.clone()).collect();
    assert_eq!(months.len(), 2, "{months:?}");
    for m in &months {
        let (p, sh, q) = (month_total("platform", m), month_total("share", m), month_total("quota", m));
        assert!((p - sh).abs() < 1e-6 && (p - q).abs() < 1e-6, "{m}: platform {p}, share {sh}, quota {q}");
    }

    // The quota table against the simulator's count.
    let want = expected["quota"].as_array().unwrap();
    assert_eq!(quota_rows.len(), want.len(), "{quota_rows:?}\n{want:?}");
    let price = |flavor: &str| match flavor { "h100" => 2.49, "l4" => 0.80, _ => 1.75 };
    let mut charged: BTreeMap<(String, String), f64> = BTreeMap::new();
    for w in want {
        let key = |r: &Value| (r["month"].as_str().unwrap().to_string(), r["cluster_queue"].as_str().unwrap().to_string(), r["flavor"].as_str().unwrap().to_string());
        let g = quota_rows.iter().find(|r| key(r) == key(w)).unwrap_or_else(|| panic!("no quota row for {w}"));
        let owner = w["owner_label"].as_str().unwrap_or(if w["cluster_queue"] == "cq-serving" { "serving" } else { "platform" });
        assert_eq!(g["team"].as_str(), Some(owner), "{g}");
        // Within a scrape interval at each end of the period, for every unit of the queue's
        // flavor (the ledger's period starts at the first scrape and ends a scrape after the last).
        let tolerance = (w["nominal_units"].as_f64().unwrap().max(1.0) * 2.0 + 16.0) * 300.0 / 3600.0;
        for column in ["nominal_gpu_hours", "used_gpu_hours", "borrowed_gpu_hours", "unused_gpu_hours"] {
            let (got, want) = (g[column].as_f64().unwrap(), w[column].as_f64().unwrap());
            assert!((got - want).abs() <= tolerance, "{column} of {g}: {got} against the simulator's {want} (tolerance {tolerance})");
        }
        // Nobody pays for more time than its quota left unused, at its flavor's price.
        let cost = g["unused_cost"].as_f64().unwrap();
        assert!(cost <= g["unused_gpu_hours"].as_f64().unwrap() * price(g["flavor"].as_str().unwrap()) + 1e-3, "{g}");
        *charged.entry((w["month"].as_str().unwrap().to_string(), owner.to_string())).or_default() += cost;
    }
    assert!(want.iter().any(|w| w["unused_gpu_hours"].as_f64().unwrap() > 1.0), "some quota stood unused: {want:?}");
    assert!(want.iter().any(|w| w["borrowed_gpu_hours"].as_f64().unwrap() > 0.0), "some queue borrowed: {want:?}");
    // Under `quota`, a team's idle is its own allocated idle (as under `platform`) plus what its
    // queues' unused quota was charged; the platform keeps the rest of the unallocated cost.
    for ((month, team), (idle_quota, _)) in by_policy["quota"].iter().filter(|((_, t), _)| t != "platform") {
        let own = by_policy["platform"].get(&(month.clone(), team.clone())).map_or(0.0, |v| v.0);
        let quota = charged.get(&(month.clone(), team.clone())).copied().unwrap_or(0.0);
        assert!((idle_quota - own - quota).abs() < 1e-5, "{month} {team}: idle {idle_quota} = own {own} + quota {quota}?");
    }
    assert!(charged.iter().any(|((_, t), v)| t != "platform" && *v > 0.0), "some owner paid for unused quota: {charged:?}");
    // The CSV has the same rows.
    let csv = String::from_utf8(run(&["report", "--store", &s, "--config", &cf, "--month", "2026-11", "--format", "quota-csv"], 0).stdout).unwrap();
    assert_eq!(csv.lines().next(), Some("month,cluster_queue,team,flavor,nominal_gpu_hours,used_gpu_hours,borrowed_gpu_hours,unused_gpu_hours,unused_cost"));
    assert_eq!(csv.lines().count() - 1, quota_rows.iter().filter(|r| r["month"] == "2026-11").count(), "{csv}");
}

/// The real vLLM exposition (tests/fixtures/real/inference-metrics, an idle server: every counter
/// 0) as two scrapes of one pod, with the `namespace` and `pod` labels Prometheus' Kubernetes
/// discovery adds: the first as recorded, the second with the server having generated 120,000
/// tokens and finished 30 requests on `stop`, 5 on `length`, 4 aborted and 1 errored. With
/// `[[units.counters]]` for tokens (per million) and successful requests (stop or length), the
/// pod's run accepts 0.12 1M-tokens and 35 requests: the exposition's own metric and label
/// names reach the accounting.
#[test]
fn the_real_vllm_exposition_counts_tokens_and_finished_requests() {
    let tmp = tempfile::tempdir().unwrap();
    let capture = tmp.path().join("capture");
    std::fs::create_dir_all(&capture).unwrap();
    let real = std::fs::read_to_string(crate::util::fixture("inference-metrics/vllm-v1-metrics-qwen2.5-0.5b-idle.prom")).unwrap();
    let with_pod = |line: &str| -> String {
        if line.starts_with('#') || line.trim().is_empty() {
            return line.to_string();
        }
        match line.find('{') {
            Some(i) => format!("{}{{namespace=\"inf\",pod=\"vllm-0\",{}", &line[..i], &line[i + 1..]),
            None => line.replacen(' ', "{namespace=\"inf\",pod=\"vllm-0\"} ", 1),
        }
    };
    let later = |line: &str| -> String {
        let bumped = [
            ("vllm:generation_tokens_total{", "120000"),
            ("finished_reason=\"stop\"", "30"),
            ("finished_reason=\"length\"", "5"),
            ("finished_reason=\"abort\"", "4"),
            ("finished_reason=\"error\"", "1"),
        ];
        match bumped.iter().find(|(key, _)| line.contains(key) && (line.starts_with("vllm:generation_tokens_total{") || line.starts_with("vllm:request_success_total{"))) {
            Some((_, value)) => format!("{} {value}", line.rsplit_once(' ').unwrap().0),
            None => line.to_string(),
        }
    };
    let first: Vec<String> = real.lines().map(with_pod).collect();
    let second: Vec<String> = first.iter().map(|l| later(l)).collect();
    assert!(second.iter().any(|l| l.starts_with("vllm:generation_tokens_total{namespace=\"inf\",pod=\"vllm-0\",") && l.ends_with(" 120000")), "the fixture has the tokens counter");
    // 2026-10-01T00:00:00Z and an hour later, as scrape files named by their time.
    std::fs::write(capture.join("1790812800000.prom"), first.join("\n") + "\n").unwrap();
    std::fs::write(capture.join("1790816400000.prom"), second.join("\n") + "\n").unwrap();
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "vllm-0", "namespace": "inf", "uid": "p-vllm-0", "resourceVersion": "1"},
                     "spec": {"nodeName": "gpu-1", "containers": [{"name": "vllm", "resources": {"limits": {"nvidia.com/gpu": 1}}}]},
                     "status": {"phase": "Running", "startTime": "2026-09-30T22:00:00Z"}});
    std::fs::write(capture.join("pods.json"), json!({"apiVersion": "v1", "kind": "List", "items": [pod]}).to_string()).unwrap();
    let store = tmp.path().join("store");
    ingest(&[&capture], &store);
    let config = tmp.path().join("gpuledger.toml");
    std::fs::write(
        &config,
        "[prices]\ndefault = 1.0\n[[units.counters]]\nmetric = \"vllm:generation_tokens_total\"\nunit = \"1M-tokens\"\nscale = 1e-6\n\
         [[units.counters]]\nmetric = \"vllm:request_success_total\"\nunit = \"requests\"\nmatch = 'finished_reason=~\"stop|length\"'\n",
    )
    .unwrap();
    let (s, c) = (store.display().to_string(), config.display().to_string());
    run(&["ledger", "--store", &s, "--config", &c, "--progress", "off"], 0);
    let units = query(&store, "SELECT team, unit, accepted_units FROM accepted_units_monthly ORDER BY unit");
    assert_eq!(
        units,
        vec![json!({"team": "inf", "unit": "1M-tokens", "accepted_units": 0.12}), json!({"team": "inf", "unit": "requests", "accepted_units": 35.0})],
        "{units:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// The derived tables through a peer reader.
// ---------------------------------------------------------------------------------------------

#[test]
fn duckdb_reads_the_derived_tables_with_the_same_totals() {
    let probe = Command::new("python3").args(["-c", "import duckdb"]).output();
    assert!(probe.map(|o| o.status.success()).unwrap_or(false), "DuckDB is needed for this test: python3 -m pip install duckdb (.ci/run does)");
    let tmp = tempfile::tempdir().unwrap();
    let capture = tmp.path().join("capture");
    let store = tmp.path().join("store");
    run(&["simulate", "--out", &capture.display().to_string(), "--gpus", "8", "--days", "1", "--seed", "5", "--scrape-interval", "60s"], 0);
    ingest(&[&capture], &store);
    let config = tmp.path().join("gpuledger.toml");
    std::fs::write(&config, SIM_CONFIG.replace("[units]\nfiles = [\"units.csv\"]\n", "")).unwrap();
    run(&["ledger", "--store", &store.display().to_string(), "--config", &config.display().to_string(), "--progress", "off"], 0);
    let json_out = run(&["report", "--store", &store.display().to_string(), "--config", &config.display().to_string(), "--month", "2026-10", "--format", "json", "--progress", "off"], 0);
    let report: Value = serde_json::from_slice(&json_out.stdout).unwrap();
    // Each team's total as the report prints it in JSON (the float nearest the exact amount),
    // back in micro-units: exact, as every amount the ledger stores is.
    let report_total: i128 = report["chargeback"].as_array().unwrap().iter().map(|r| (r["total"].as_f64().unwrap() * 1e6).round() as i128).sum();
    let report_hours: f64 = report["chargeback"].as_array().unwrap().iter().map(|r| r["productive_gpu_hours"].as_f64().unwrap()).sum();

    let script = r#"
import duckdb, json, sys
d = sys.argv[1] + "/ledger/"
con = duckdb.connect()
total = con.execute(f"SELECT sum(total) FROM '{d}chargeback_monthly.parquet' WHERE month = '2026-10'").fetchone()[0]
hours = con.execute(f"SELECT sum(gpu_hours) FROM '{d}priced_state_hours.parquet' WHERE month = '2026-10' AND state = 'productive'").fetchone()[0]
cost = con.execute(f"SELECT sum(cost) FROM '{d}priced_state_hours.parquet' WHERE month = '2026-10'").fetchone()[0]
# Energy straight from the raw samples, per physical GPU (MIG instances repeat their GPU's
# counter): the counter's rise to the next reading within max_gap (2.5 x the 60 s scrape), a
# drop read as a reset, else the power reading times one scrape interval.
raw = sys.argv[1] + "/gpu_samples/date=*/*.parquet"
raw_kwh = con.execute(f"""
    WITH g AS (SELECT hostname, uuid, epoch_ms(ts) AS t, min(energy_mj) AS e, max(power_w) AS p
               FROM read_parquet('{raw}', hive_partitioning = true) GROUP BY ALL),
         n AS (SELECT *, lead(e) OVER w AS e2, lead(t) OVER w AS t2 FROM g WINDOW w AS (PARTITION BY hostname, uuid ORDER BY t))
    SELECT sum(CASE WHEN t2 - t <= 150000 THEN (CASE WHEN e2 >= e THEN e2 - e ELSE e2 END) ELSE p * 60000 END) / 3.6e9,
           count(*) FILTER (WHERE e2 < e)
    FROM n
""").fetchone()
raw_kwh, resets = raw_kwh
ledger_kwh = con.execute(f"SELECT sum(kwh) FROM '{d}energy_monthly.parquet'").fetchone()[0]
# Amounts are DECIMAL(38,6): passed on as their exact text.
print(json.dumps({"total": str(total), "productive_hours": hours, "cost": str(cost), "raw_kwh": raw_kwh, "ledger_kwh": ledger_kwh, "resets": resets}))
"#;
    let out = Command::new("python3").arg("-c").arg(script).arg(&store).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let duck: Value = serde_json::from_slice(&out.stdout).unwrap();
    // A decimal's text (`12345.678901`) in micro-units.
    let micros = |v: &Value| -> i128 {
        let text = v.as_str().unwrap_or_else(|| panic!("an amount as text: {v}"));
        let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
        assert!(fraction.len() <= 6, "{text}");
        format!("{whole}{fraction:0<6}").parse().unwrap()
    };
    assert_eq!(micros(&duck["total"]), report_total, "DuckDB total {duck} vs report (micro-units)");
    assert!((duck["productive_hours"].as_f64().unwrap() - report_hours).abs() < 1e-6, "DuckDB productive hours {duck} vs report {report_hours}");
    // Spread overheads and moved idle cost aside, the chargeback total is the priced GPU time
    // plus the configured overheads (310 + 190 + 120 + 380 + 50 for serving), exactly.
    assert_eq!(micros(&duck["cost"]) + 1_050_000_000, report_total, "priced hours + overheads = total: {duck}");
    // The ledger's energy (spans, shares, states, months) adds up to the samples' own.
    let (raw, ledger) = (duck["raw_kwh"].as_f64().unwrap(), duck["ledger_kwh"].as_f64().unwrap());
    assert!(raw > 1.0 && (raw - ledger).abs() <= 1e-9 * raw, "energy from the raw samples {raw} kWh, ledger {ledger} kWh");
    assert_eq!(duck["resets"], 1, "the simulator resets one GPU's energy counter half-way");
}

// ---------------------------------------------------------------------------------------------
// The README's main command.
// ---------------------------------------------------------------------------------------------

#[test]
fn demo_prints_the_chargeback_and_writes_html_and_focus() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("demo");
    let out = run(&["demo", "--out", &dir.display().to_string(), "--gpus", "8", "--days", "1"], 0);
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.contains("GPU chargeback 2026-10"), "{stdout}");
    assert!(stdout.lines().any(|l| l.starts_with("platform")), "the platform row is shown: {stdout}");
    // The example configuration's budgets follow the chargeback, each team's status in words.
    let budgets = stdout.split("Budgets (USD)").nth(1).unwrap_or_else(|| panic!("no budgets: {stdout}"));
    assert!(stdout.find("Budgets (USD)") > stdout.find("TOTAL"), "{stdout}");
    let nlp: Vec<&str> = budgets.lines().find(|l| l.starts_with("nlp")).unwrap_or_else(|| panic!("{budgets}")).split_whitespace().collect();
    let percent = |s: &str| s.trim_end_matches('%').replace(',', "").parse::<f64>().unwrap();
    let (used, forecast) = (percent(nlp[3]), percent(nlp[5]));
    let status = nlp[7..].join(" ");
    let want = if used > 100.0 { "over budget" } else if forecast > 100.0 { "forecast over" } else { "within" };
    assert_eq!(status, want, "{budgets}");
    let html = std::fs::read_to_string(dir.join("report-2026-10.html")).unwrap();
    assert!(html.contains("<svg") && html.contains("platform"), "HTML report with charts");
    let focus_csv = std::fs::read_to_string(dir.join("focus-2026-10.csv")).unwrap();
    assert!(focus_csv.lines().next().unwrap().contains("BilledCost"));
    assert!(focus_csv.lines().count() > 5, "FOCUS rows: {focus_csv}");
    assert!(dir.join("focus-2026-10.parquet").is_file());

    // The query the demo suggests runs on the store it wrote, quietly; on a store whose priced
    // hours an older version stored as gpu_state_hours, `query` says to re-run the ledger.
    let store = dir.join("store").display().to_string();
    let next = stdout.lines().find(|l| l.trim_start().starts_with("gpuledger query")).expect("the demo suggests a query");
    let sql = next.split_once('"').map(|(_, q)| q.trim_end_matches('"')).unwrap();
    let out = run(&["query", "--store", &store, sql], 0);
    assert!(!String::from_utf8_lossy(&out.stdout).is_empty() && !String::from_utf8_lossy(&out.stderr).contains("older"), "{out:?}");
    let derived = dir.join("store").join("ledger");
    std::fs::rename(derived.join("priced_state_hours.parquet"), derived.join("gpu_state_hours.parquet")).unwrap();
    let out = run(&["query", "--store", &store, "SELECT count(*) FROM chargeback_monthly"], 0);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().filter(|l| l.contains("older gpuledger version") && l.contains("re-run `gpuledger ledger`")).count(), 1, "{stderr}");
}
