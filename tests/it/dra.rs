//! DRA claims and measured sharing, end to end: captures written as dcgm-exporter writes them
//! (one file per scrape, its labels in the exporter's order), ResourceClaims as `kubectl get -o
//! json` lists them, ingested, accounted, and read back from the store. Every figure is worked
//! out by hand below; the rules are docs/accounting.md "DRA" and "Measured sharing".

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{Value, json};

use crate::util::{ingest, query, run};

/// 2026-10-05T10:00:00Z: the first scrape.
const T0: i64 = 1_791_194_400_000;
/// The exporter is scraped every 30 s; three scrapes, so each GPU is observed for 90 s.
const SCRAPES: [i64; 3] = [T0, T0 + 30_000, T0 + 60_000];

/// The labels dcgm-exporter writes before a series' own: `gpu`, `UUID`, `pci_bus_id`, `device`,
/// `modelName`, `Hostname` (4.5 and earlier spell it so).
fn device_labels(gpu: u32, uuid: &str, model: &str, host: &str) -> Vec<(String, String)> {
    [("gpu", gpu.to_string()), ("UUID", uuid.into()), ("pci_bus_id", format!("00000000:{:02X}:00.0", 0x3b + gpu)), ("device", format!("nvidia{gpu}")), ("modelName", model.into()), ("Hostname", host.into())]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
}

/// One exposition line, with the exporter's `DCGM_FI_DRIVER_VERSION` attribute last.
fn line(metric: &str, labels: &[(String, String)], extra: &[(&str, &str)], value: f64) -> String {
    let mut all: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
    // The exporter's label maps print in sorted key order (Go templates sort map keys).
    let mut extra: Vec<&(&str, &str)> = extra.iter().collect();
    extra.sort();
    all.extend(extra.iter().map(|(k, v)| format!("{k}=\"{v}\"")));
    all.push("DCGM_FI_DRIVER_VERSION=\"570.124.06\"".into());
    format!("{metric}{{{}}} {value}\n", all.join(","))
}

/// A DRA-held GPU's series for `pods` (one series per pod, the same values), as the exporter
/// writes them with KUBERNETES_ENABLE_DRA; without pod labels when `pod_labels` is false.
/// `at`: the claim, its device and the device's pool.
fn dra_series(out: &mut String, dev: &[(String, String)], (claim, device, pool): (&str, &str, &str), pods: &[&str], util: f64, pod_labels: bool) {
    for pod in pods {
        let mut extra = vec![
            ("dra_claim_name", claim),
            ("dra_claim_namespace", "ml"),
            ("dra_device_name", device),
            ("dra_driver_name", "gpu.nvidia.com"),
            ("dra_pool_name", pool),
        ];
        if pod_labels {
            extra.extend([("container", "main"), ("namespace", "ml"), ("pod", *pod)]);
        }
        out.push_str(&line("DCGM_FI_DEV_GPU_UTIL", dev, &extra, util));
        out.push_str(&line("DCGM_FI_DEV_POWER_USAGE", dev, &extra, 400.0));
        if !pod_labels {
            // Without pod labels the pods' series are one series: the exporter's copies differ
            // only in the labels that were dropped.
            break;
        }
    }
}

/// A time-sliced T4 with per-process values (--kubernetes-virtual-gpus): the device's own
/// DCGM_FI_DEV_GPU_UTIL without pod labels, each pod's own utilisation with `pod_uid` and
/// `vgpu`, and the other fields repeated per pod with `vgpu` only.
fn per_process_series(out: &mut String, dev: &[(String, String)], device_util: f64, pods: &[(&str, &str, &str, f64)]) {
    out.push_str(&line("DCGM_FI_DEV_GPU_UTIL", dev, &[], device_util));
    for (pod, uid, vgpu, util) in pods {
        out.push_str(&line("DCGM_FI_DEV_GPU_UTIL", dev, &[("container", "main"), ("namespace", "ml"), ("pod", pod), ("pod_uid", uid), ("vgpu", vgpu)], *util));
    }
    for (pod, _, vgpu, _) in pods {
        out.push_str(&line("DCGM_FI_DEV_POWER_USAGE", dev, &[("container", "main"), ("namespace", "ml"), ("pod", pod), ("vgpu", vgpu)], 70.0));
    }
}

/// Three scrapes of two nodes: `dra-node-1` (H100s handed out by DRA) and `t4-node-1` (a
/// time-sliced T4 with per-process values). Per scrape:
///   GPU-a (gpu-0): claim train-0-gpu reserved for pod train-0, busy (95)
///   GPU-b (gpu-1): claim shared-gpu reserved for pods infer-a and infer-b, busy (80)
///   GPU-t: device / a / b utilisation 70 / 60 / 20, then 0 / 0 / 0, then 50 / 30 / 0
fn capture(dir: &Path, pod_labels: bool) {
    let a = device_labels(0, "GPU-aaaaaaaa-0000-0000-0000-000000000001", "NVIDIA H100 80GB HBM3", "dra-node-1");
    let b = device_labels(1, "GPU-aaaaaaaa-0000-0000-0000-000000000002", "NVIDIA H100 80GB HBM3", "dra-node-1");
    let t = device_labels(0, "GPU-tttttttt-0000-0000-0000-000000000001", "Tesla T4", "t4-node-1");
    let per_process = [(70.0, 60.0, 20.0), (0.0, 0.0, 0.0), (50.0, 30.0, 0.0)];
    for sub in ["dra", "t4"] {
        std::fs::create_dir_all(dir.join("scrapes").join(sub)).unwrap();
    }
    // One scrape per file, named by its time: the exporter writes no per-sample timestamps.
    for (i, at) in SCRAPES.iter().enumerate() {
        let mut dra = String::new();
        dra_series(&mut dra, &a, ("train-0-gpu", "gpu-0", "dra-node-1"), &["train-0"], 95.0, pod_labels);
        dra_series(&mut dra, &b, ("shared-gpu", "gpu-1", "dra-node-1"), &["infer-a", "infer-b"], 80.0, pod_labels);
        std::fs::write(dir.join("scrapes").join("dra").join(format!("{at}.prom")), dra).unwrap();
        let (device, pa, pb) = per_process[i];
        let mut sliced = String::new();
        per_process_series(&mut sliced, &t, device, &[("slice-a", "uid-slice-a", "0", pa), ("slice-b", "uid-slice-b", "1", pb)]);
        std::fs::write(dir.join("scrapes").join("t4").join(format!("{at}.prom")), sliced).unwrap();
    }
    let claim = |name: &str, device: &str, pods: &[(&str, &str)]| -> Value {
        json!({
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "ml", "uid": format!("uid-{name}"), "resourceVersion": "4711",
                         "creationTimestamp": "2026-10-05T09:59:00Z"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": 1}}]}},
            "status": {
                "allocation": {"devices": {"results": [{"request": "gpu", "driver": "gpu.nvidia.com", "pool": "dra-node-1", "device": device}]}},
                "reservedFor": pods.iter().map(|(p, uid)| json!({"resource": "pods", "name": p, "uid": uid})).collect::<Vec<_>>(),
            },
        })
    };
    let list = json!({"apiVersion": "v1", "kind": "List", "items": [
        claim("train-0-gpu", "gpu-0", &[("train-0", "uid-train-0")]),
        claim("shared-gpu", "gpu-1", &[("infer-a", "uid-infer-a"), ("infer-b", "uid-infer-b")]),
    ]});
    std::fs::write(dir.join("resourceclaims.json"), serde_json::to_string_pretty(&list).unwrap()).unwrap();
}

/// GPU-seconds per run and state, from the stored ledger.
fn seconds(store: &Path) -> BTreeMap<(String, String), f64> {
    query(store, "SELECT COALESCE(run, '-') AS run, state, SUM(gpu_ns) AS ns FROM priced_state_hours GROUP BY 1, 2 HAVING SUM(gpu_ns) > 0")
        .iter()
        .map(|r| ((r["run"].as_str().unwrap().to_string(), r["state"].as_str().unwrap().to_string()), r["ns"].as_f64().unwrap() / 1e9))
        .collect()
}

fn figures(rows: &[(&str, &str, f64)]) -> BTreeMap<(String, String), f64> {
    rows.iter().map(|(r, s, v)| ((r.to_string(), s.to_string()), *v)).collect()
}

/// Runs `gpuledger ledger` and returns the warnings it printed.
fn ledger(store: &Path, config: &Path) -> Vec<String> {
    let out = run(&["ledger", "--store", &store.display().to_string(), "--config", &config.display().to_string(), "--progress", "off", "--full"], 0);
    String::from_utf8_lossy(&out.stderr).lines().filter(|l| l.starts_with("gpuledger: warning:")).map(str::to_string).collect()
}

#[test]
fn exporter_shaped_dra_and_per_process_captures_are_shared_as_worked_out_by_hand() {
    let tmp = tempfile::tempdir().unwrap();
    let even = tmp.path().join("even.toml");
    std::fs::write(&even, "[prices]\ndefault = 1.0\n").unwrap();
    let measured = tmp.path().join("measured.toml");
    std::fs::write(&measured, "[accounting]\nsharing = \"measured\"\n[prices]\ndefault = 1.0\n").unwrap();

    let (with_pods, without_pods) = (tmp.path().join("with-pods"), tmp.path().join("without-pods"));
    capture(&with_pods, true);
    capture(&without_pods, false);
    let (store_a, store_b) = (tmp.path().join("store-a"), tmp.path().join("store-b"));
    for (capture, store) in [(&with_pods, &store_a), (&without_pods, &store_b)] {
        let summary = ingest(&[capture], store);
        assert_eq!(summary["rejected"].as_u64(), Some(0), "{summary}");
    }
    let claims = query(&store_a, "SELECT name, device, reserved_name FROM resource_claims ORDER BY name, reserved_name");
    assert_eq!(claims.len(), 3, "{claims:?}");

    // Even sharing (the default):
    //   GPU-a: train-0 holds it, 90 s productive.
    //   GPU-b: infer-a and infer-b, 1/2 each of 90 s, busy: 45 s productive each.
    //   GPU-t: the device row holds nothing; each pod is active by its own utilisation:
    //     scrape 1  slice-a 15 s productive (60), slice-b 15 s productive (20)
    //     scrape 2  both 15 s idle (0)
    //     scrape 3  slice-a 15 s productive (30), slice-b 15 s idle (0)
    let want_even = figures(&[
        ("pod/train-0", "productive", 90.0),
        ("pod/infer-a", "productive", 45.0),
        ("pod/infer-b", "productive", 45.0),
        ("pod/slice-a", "productive", 30.0),
        ("pod/slice-a", "allocated_idle", 15.0),
        ("pod/slice-b", "productive", 15.0),
        ("pod/slice-b", "allocated_idle", 30.0),
    ]);
    assert_eq!(ledger(&store_a, &even), Vec::<String>::new(), "pod labels the claims agree with: no warning");
    assert_eq!(seconds(&store_a), want_even, "pod labels beside the claim's");
    // The same capture without pod labels on the DRA series: the claims' reservedFor pods.
    assert_eq!(ledger(&store_b, &even), Vec::<String>::new(), "no pod labels: nothing to disagree with");
    assert_eq!(seconds(&store_b), want_even, "only dra_* labels: the same figures");
    let chargeback = |store: &Path| query(store, "SELECT * FROM chargeback_monthly ORDER BY month, team");
    assert_eq!(chargeback(&store_a), chargeback(&store_b), "the same chargeback either way");

    // Measured sharing: GPU-t's pods by their utilisation (GPU-b's pods repeat one value: equal).
    //   scrape 1  slice-a 60/80 = 22.5 s productive, slice-b 20/80 = 7.5 s productive
    //   scrape 2  all zero: even, 15 s idle each
    //   scrape 3  slice-a 30/30 = 30 s productive, slice-b nothing
    let mut want_measured = want_even.clone();
    want_measured.extend(figures(&[
        ("pod/slice-a", "productive", 52.5),
        ("pod/slice-a", "allocated_idle", 15.0),
        ("pod/slice-b", "productive", 7.5),
        ("pod/slice-b", "allocated_idle", 15.0),
    ]));
    ledger(&store_a, &measured);
    assert_eq!(seconds(&store_a), want_measured);
    let recorded = query(&store_a, "SELECT COUNT(*) AS n FROM priced_state_hours");
    assert!(recorded[0]["n"].as_i64().unwrap() > 0);
}

#[test]
fn a_pod_the_claim_was_not_reserved_for_keeps_the_gpu_and_is_warned_of() {
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("even.toml");
    std::fs::write(&config, "[prices]\ndefault = 1.0\n").unwrap();
    let dir = tmp.path().join("capture");
    capture(&dir, true);
    // In the last scrape GPU-a's series name pod `intruder`, but claim train-0-gpu is reserved
    // for train-0 alone.
    let last = dir.join("scrapes").join("dra").join(format!("{}.prom", SCRAPES[2]));
    let text = std::fs::read_to_string(&last).unwrap();
    assert!(text.contains("pod=\"train-0\""));
    std::fs::write(&last, text.replace("pod=\"train-0\"", "pod=\"intruder\"")).unwrap();
    let store = tmp.path().join("store");
    ingest(&[&dir], &store);

    let warnings = ledger(&store, &config);
    // 2026-10-05T10:01:00Z is the third scrape; its two series of GPU-a are one sample of the pod.
    assert_eq!(
        warnings,
        ["gpuledger: warning: GPU GPU-aaaaaaaa-0000-0000-0000-000000000001 on dra-node-1: 1 sample(s) from 2026-10-05T10:01:00Z to 2026-10-05T10:01:00Z name pod ml/intruder and claim ml/train-0-gpu, which was not reserved for that pod then (the pod labels count)"]
    );
    // The pod labels count: train-0 holds GPU-a for two 30 s observations, the intruder for one.
    let got = seconds(&store);
    assert_eq!(got.get(&("pod/train-0".to_string(), "productive".to_string())), Some(&60.0), "{got:?}");
    assert_eq!(got.get(&("pod/intruder".to_string(), "productive".to_string())), Some(&30.0), "{got:?}");
}

/// GPU-hours per (month, team, state, model) of the stored ledger.
fn hours_by_team(store: &Path) -> BTreeMap<Vec<String>, f64> {
    query(store, "SELECT month, team, state, model_name, SUM(gpu_hours) AS h FROM priced_state_hours GROUP BY 1, 2, 3, 4")
        .iter()
        .map(|r| (["month", "team", "state", "model_name"].iter().map(|k| r[*k].as_str().unwrap_or("-").to_string()).collect(), r["h"].as_f64().unwrap()))
        .collect()
}

#[test]
fn a_simulated_dra_pool_without_pod_labels_gives_the_same_ledger_and_measured_sharing_the_simulators_figures() {
    let tmp = tempfile::tempdir().unwrap();
    let mut stores = Vec::new();
    for labels in ["true", "false"] {
        let (out, store) = (tmp.path().join(format!("out-{labels}")), tmp.path().join(format!("store-{labels}")));
        run(
            &["simulate", "--store", &store.display().to_string(), "--out", &out.display().to_string(), "--gpus", "24", "--days", "2", "--seed", "7",
              "--scrape-interval", "120s", "--start", "2026-10-30T00:00:00Z", "--dra-pod-labels", labels, "--progress", "off", "--format", "json"],
            0,
        );
        stores.push((out, store));
    }
    let [(out, with_pods), (_, without_pods)] = &stores[..] else { unreachable!() };
    let dra_series = |store: &Path, pods: bool| {
        let sql = format!("SELECT COUNT(*) AS n FROM gpu_samples WHERE strpos(labels, 'dra_claim_name') > 0 AND pod IS {}NULL", if pods { "NOT " } else { "" });
        query(store, &sql)[0]["n"].as_i64().unwrap()
    };
    assert!(dra_series(with_pods, true) > 0 && dra_series(with_pods, false) == 0, "the exporter's DRA series name their pods");
    assert!(dra_series(without_pods, false) > 0 && dra_series(without_pods, true) == 0, "the relabelled capture names only the claims");

    let even = tmp.path().join("even.toml");
    std::fs::write(&even, "[prices]\ndefault = 2.0\n").unwrap();
    ledger(with_pods, &even);
    ledger(without_pods, &even);
    // Run by run, state by state, to the GPU-nanosecond: the claims' reservedFor stand for the
    // pod labels, the shared claim's two pods and the two claims sharing a device included.
    let per_run = |store: &Path| query(store, "SELECT node, run, state, SUM(gpu_ns) AS ns FROM priced_state_hours GROUP BY 1, 2, 3 ORDER BY 1, 2, 3");
    let (a, b) = (per_run(with_pods), per_run(without_pods));
    assert_eq!(a, b, "the same GPU time per node, run and state");
    let dra_runs = a.iter().filter(|r| r["node"].as_str().is_some_and(|n| n.contains("dra"))).count();
    assert!(dra_runs > 3, "the DRA pool's runs are accounted: {dra_runs}");
    let chargeback = |store: &Path| query(store, "SELECT * FROM chargeback_monthly ORDER BY month, team");
    assert_eq!(chargeback(with_pods), chargeback(without_pods), "the same chargeback");

    // Measured sharing against the simulator's own figures (expected.json `measured_sharing`),
    // which only the time-sliced T4s' pods' utilisation changes.
    let expected: Value = serde_json::from_slice(&std::fs::read(out.join("expected.json")).unwrap()).unwrap();
    let mut want: BTreeMap<Vec<String>, f64> = BTreeMap::new();
    for r in expected["measured_sharing"]["gpu_hours"].as_array().unwrap() {
        let key = ["month", "team", "state", "model_name"].iter().map(|k| r[*k].as_str().unwrap().to_string()).collect();
        *want.entry(key).or_default() += r["gpu_hours"].as_f64().unwrap();
    }
    let measured = tmp.path().join("measured.toml");
    std::fs::write(&measured, "[accounting]\nsharing = \"measured\"\n[prices]\ndefault = 2.0\n").unwrap();
    let even_hours = hours_by_team(with_pods);
    ledger(with_pods, &measured);
    let got = hours_by_team(with_pods);
    let wrong: Vec<String> = want
        .iter()
        .filter(|(_, h)| **h > 0.0)
        .filter_map(|(k, w)| {
            let g = got.get(k).copied().unwrap_or(0.0);
            ((g - w).abs() >= 0.001).then(|| format!("{k:?}: ledger {g:.4} h, simulator {w:.4} h"))
        })
        .chain(got.iter().filter(|(k, g)| **g > 0.001 && !want.contains_key(*k)).map(|(k, g)| format!("{k:?}: ledger {g:.4} h, simulator none")))
        .collect();
    assert!(wrong.is_empty(), "measured sharing:\n{}", wrong.join("\n"));
    let moved: f64 = got.iter().filter(|(k, _)| k[3].contains("T4")).map(|(k, g)| (g - even_hours.get(k).copied().unwrap_or(0.0)).abs()).sum();
    assert!(moved > 0.01, "measured shares differ from even ones on the T4s: {moved} h moved");
}
