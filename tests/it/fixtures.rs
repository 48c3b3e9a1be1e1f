//! Every real fixture in tests/fixtures/real goes through ingest. Expected values were read
//! off the fixture files themselves (line counts, label values), not produced by this code.

use tempfile::TempDir;

use crate::util::{count, fixture, ingest, query, written};

/// (file, gpu_samples rows, metric_samples rows): rows = distinct GPU / MIG instance / pod
/// label sets among mapped DCGM fields; metric rows = lines of fields with no column
/// (NVLINK_BANDWIDTH_TOTAL, PCIE_REPLAY_COUNTER, ENC/DEC_UTIL, remapped rows, ...).
const DCGM_FILES: &[(&str, u64, u64)] = &[
    ("a100-sxm4-mig-2x1g5gb-plus-2g10gb-active.prom", 3, 6),
    ("a100-sxm4-mig-4-active-workloads.prom", 4, 8),
    ("a100-sxm4-mig-enabled-no-instances.prom", 1, 4),
    ("a100-sxm4-whole-gpu-mig-disabled-idle.prom", 1, 9),
    ("dcgm-exporter-readme-basic.prom", 1, 0),
    ("dcgm-exporter-readme-k8s-empty-pod-labels.prom", 1, 0),
    ("h100-8gpu-sampled-with-pod-uid-label.prom", 8, 0),
    ("l4-kops-aws-with-prof-metrics.prom", 1, 10),
    ("l40s-upcloud-with-prof-metrics.prom", 1, 10),
    ("t4-fractional-gpu-runai-pod-labels.prom", 2, 12),
    // 7 unmapped fields, plus the XID sample: its err_code/err_msg labels say more than the GPU
    // row keeps, so it is also kept long form.
    ("t4-gpu-operator-550-fractional-reservation-pod.prom", 1, 8),
];

#[test]
fn every_dcgm_fixture_lands_row_for_row() {
    for (file, gpu_rows, metric_rows) in DCGM_FILES {
        let dir = TempDir::new().unwrap();
        let store = dir.path().join("store");
        let s = ingest(&[&fixture(&format!("dcgm-metrics/{file}"))], &store);
        assert_eq!(s["rejected"], 0, "{file}: {s}");
        assert_eq!(written(&s, "gpu_samples"), *gpu_rows, "{file} gpu rows");
        assert_eq!(written(&s, "metric_samples"), *metric_rows, "{file} metric rows");
        // No per-sample timestamps and no time in the name: the file's mtime, with a warning.
        assert!(s["warnings"][0].as_str().unwrap().contains("modification time"), "{file}: {s}");
    }
}

#[test]
fn mig_instances_share_the_parent_uuid() {
    let dir = TempDir::new().unwrap();
    let store = dir.path().join("store");
    ingest(&[&fixture("dcgm-metrics/a100-sxm4-mig-4-active-workloads.prom")], &store);
    let rows = query(&store, "SELECT uuid, mig_profile, mig_instance, hostname FROM gpu_samples ORDER BY mig_instance");
    let got: Vec<(String, i64)> = rows.iter().map(|r| (r["mig_profile"].as_str().unwrap().to_string(), r["mig_instance"].as_i64().unwrap())).collect();
    assert_eq!(got, [("2g.10gb".to_string(), 5), ("1g.5gb".to_string(), 7), ("1g.5gb".to_string(), 8), ("1g.5gb".to_string(), 9)]);
    for r in &rows {
        assert_eq!(r["uuid"], "GPU-473571f2-fb37-ef7e-50fe-9885b74a23cd");
        assert_eq!(r["hostname"], "nvidia-dcgm-exporter-tl46n");
    }
    // A MIG-enabled GPU with no instances is one whole-GPU row.
    let dir2 = TempDir::new().unwrap();
    let store2 = dir2.path().join("store");
    ingest(&[&fixture("dcgm-metrics/a100-sxm4-mig-enabled-no-instances.prom")], &store2);
    assert_eq!(count(&store2, "SELECT count(*) AS n FROM gpu_samples WHERE mig_profile IS NULL AND mig_instance IS NULL"), 1);
}

#[test]
fn pod_labels_blank_values_and_partial_families() {
    let dir = TempDir::new().unwrap();
    let store = dir.path().join("store");
    let files = [
        fixture("dcgm-metrics/h100-8gpu-sampled-with-pod-uid-label.prom"),
        fixture("dcgm-metrics/t4-fractional-gpu-runai-pod-labels.prom"),
        fixture("dcgm-metrics/dcgm-exporter-readme-basic.prom"),
        fixture("dcgm-metrics/l40s-upcloud-with-prof-metrics.prom"),
    ];
    let refs: Vec<&std::path::Path> = files.iter().map(|p| p.as_path()).collect();
    let s = ingest(&refs, &store);
    // readme-basic's MEMORY_TEMP is 9223372036854775794, DCGM's int64 "not supported" blank.
    assert_eq!(s["blank_samples"], 1, "{s}");
    let pods = query(&store, "SELECT uuid, namespace, pod, container FROM gpu_samples WHERE pod IS NOT NULL ORDER BY pod");
    assert_eq!(pods.len(), 2, "{pods:?}");
    assert_eq!(pods[0]["uuid"], "GPU-7a2e92f2-be71-d37e-a744-541600ffc722");
    assert_eq!(pods[0]["pod"], "runai-reservation-gpu-qa-mig-worker-gpu-1-kvltw");
    assert_eq!(pods[0]["namespace"], "runai-reservation");
    assert_eq!(pods[1]["pod"], "vllm-agg-0-vllmdecodeworker-s65j5");
    assert_eq!(pods[1]["namespace"], "dynamo-workload");
    assert_eq!(pods[1]["container"], "main");
    // h100 file: MEM_COPY_UTIL is present for GPUs 0-5 only (the family stops early).
    assert_eq!(count(&store, "SELECT count(*) AS n FROM gpu_samples WHERE model_name = 'NVIDIA H100 80GB HBM3' AND mem_copy_util IS NULL"), 2);
    assert_eq!(count(&store, "SELECT count(*) AS n FROM gpu_samples WHERE uuid = 'GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52' AND memory_temp_c IS NULL AND sm_clock_mhz = 139"), 1);
    // The L40S energy counter (5551899580 mJ) is past 2^31 and is a value, not a blank.
    let e = query(&store, "SELECT energy_mj, engine_active FROM gpu_samples WHERE model_name = 'NVIDIA L40S'");
    assert_eq!(e[0]["energy_mj"].as_f64(), Some(5_551_899_580.0));
    assert!(e[0]["engine_active"].is_number(), "profiling metrics present: {e:?}");
}

#[test]
fn vllm_scrape_keeps_every_sample_including_colon_names() {
    let dir = TempDir::new().unwrap();
    let store = dir.path().join("store");
    let s = ingest(&[&fixture("inference-metrics/vllm-v1-metrics-qwen2.5-0.5b-idle.prom")], &store);
    // 395 sample lines in the file, 354 of them vllm:* (prometheus-parse drops those).
    assert_eq!(written(&s, "metric_samples"), 395, "{s}");
    assert_eq!(written(&s, "gpu_samples"), 0);
    assert_eq!(count(&store, "SELECT count(*) AS n FROM metric_samples WHERE metric LIKE 'vllm:%'"), 354);
    let r = query(&store, "SELECT labels FROM metric_samples WHERE metric = 'vllm:request_success_total' AND labels LIKE '%\"finished_reason\":\"stop\"%'");
    assert_eq!(r.len(), 1, "{r:?}");
}

#[test]
fn prometheus_api_responses() {
    let dir = TempDir::new().unwrap();
    let store = dir.path().join("store");
    let s = ingest(&[&fixture("prometheus-api")], &store);
    // 16 H100 series + 1 L40S temperature are GPU fields; the PCIe replay counter and the vLLM
    // gauge go long form; the empty result adds nothing; the console dump (.txt) is not a format.
    // The T4 seen only through its PCIe replay counter (a DCGM field with no column) is observed
    // too (docs/accounting.md "Observation": any DCGM field observes a GPU): 18 rows.
    assert_eq!(written(&s, "gpu_samples"), 18, "{s}");
    assert_eq!(count(&store, "SELECT count(*) AS n FROM gpu_samples WHERE gpu_util IS NULL AND temp_c IS NULL AND fb_used_mib IS NULL"), 1);
    assert_eq!(written(&s, "metric_samples"), 2, "{s}");
    assert_eq!(s["files"]["prometheus api"], 5);
    assert_eq!(s["rejected_by_reason"]["unrecognised_format"], 1, "{s}");
    // 15 H100 series name the exporter's own pod (nvidia-dcgm-exporter-*, no exported_pod): not
    // allocated. One (gpu 0) names the workload pod the exporter attributed, and the L40S series
    // names pod dcgm-exporter-zxgzh: the exporter again.
    let pods = query(&store, "SELECT namespace, pod, container FROM gpu_samples WHERE pod IS NOT NULL");
    assert_eq!(pods.len(), 1, "{pods:?}");
    assert_eq!(pods[0]["pod"], "vllm-agg-0-vllmdecodeworker-s65j5");
    assert_eq!(pods[0]["namespace"], "dynamo-workload");
    assert_eq!(count(&store, "SELECT count(DISTINCT hostname) AS n FROM gpu_samples WHERE model_name = 'NVIDIA H100 80GB HBM3'"), 2);
    let t = query(&store, "SELECT temp_c, CAST(ts AS BIGINT) AS t FROM gpu_samples WHERE model_name = 'NVIDIA L40S'");
    assert_eq!(t[0]["temp_c"].as_f64(), Some(32.0));
    assert_eq!(t[0]["t"].as_i64(), Some(1_775_721_747_082), "API seconds become milliseconds");
}
