//! A deterministic GPU cluster simulator for testing gpuledger end to end.
//!
//! [`simulate`] invents a Kubernetes cluster with NVIDIA GPUs (H100, A100 split into MIG
//! instances, L4, time-sliced T4, and H100s handed out by Dynamic Resource Allocation), teams
//! that submit jobs through Kueue, and a few days of its life: queueing, admission, preemption
//! and requeue, runs that succeed, fail (OOMKilled, errors, GPU XID errors) or are still
//! running, idle stretches, exporter outages. It writes what a platform team would have
//! recorded with standard tools, in the formats gpuledger's collector reads:
//!
//! ```text
//! <out>/dcgm/<node>/<YYYY-MM-DD>.prom     Prometheus /federate text, one file per node and day
//! <out>/dcgm/<t4-node>/<unix-ms>.prom     raw dcgm-exporter scrapes (no sample timestamps)
//! <out>/kubernetes/namespaces.yaml        multi-document YAML
//! <out>/kubernetes/nodes.json             kubectl get nodes -o json
//! <out>/kubernetes/nodes.watch.jsonl      Node changes (cordon, NotReady), one per line
//! <out>/kubernetes/kueue.yaml             ResourceFlavors, ClusterQueues, LocalQueues
//! <out>/kubernetes/dra.yaml               DeviceClass, ResourceClaimTemplates, ResourceSlices
//! <out>/kubernetes/workloads.watch.json   kubectl --watch --output-watch-events (pretty)
//! <out>/kubernetes/jobs.watch.jsonl       watch events, one per line
//! <out>/kubernetes/pods.watch.jsonl       watch events, one per line
//! <out>/kubernetes/resourceclaims.watch.jsonl  ResourceClaims (resource.k8s.io/v1), one per line
//! <out>/kubernetes/events.json            core/v1 Event List
//! <out>/kubernetes/events-v1.jsonl        events.k8s.io/v1 Events, one per line
//! <out>/inference/<YYYY-MM-DD>.prom       vLLM servers' token and request counters, per pod
//! <out>/expected.json                     the ledger figures this capture implies
//! ```
//!
//! The DCGM text has the shapes dcgm-exporter gives them:
//! - a time-sliced T4 that pods hold (`--kubernetes-virtual-gpus`): the device's
//!   `DCGM_FI_DEV_GPU_UTIL` without pod labels, each pod's own utilisation with `pod_uid` and
//!   `vgpu`, and each pod's copy of every other field (the device's values) with `vgpu`;
//! - a DRA GPU (`KUBERNETES_ENABLE_DRA`): the pod labels and `dra_claim_name`,
//!   `dra_claim_namespace`, `dra_device_name`, `dra_driver_name`, `dra_pool_name`, one series
//!   per pod: pods with a claim each from the `single-gpu` template, two pods sharing one claim
//!   made by name (`shared-gpu-<n>`), and two claims sharing one device by consumed memory
//!   (`shareID`, 20Gi and 60Gi). With [`SimOptions::dra_pod_labels`] false the DRA series
//!   carry only the `dra_*` labels (one per claim), for the same figures.
//!
//! `expected.json` is computed from the simulation's own state as each sample is generated,
//! applying docs/accounting.md's accounting rules, never by reading the files back: it is the answer key
//! the ledger is tested against (with `measured_sharing`, the GPU-hours under
//! `sharing = "measured"`). The same configuration always gives the same bytes (a
//! home-made seeded PRNG, no dependency on `rand`), whatever the number of threads.
//!
//! [`simulate_window`] writes only what was observed in a span of the period (the same cluster,
//! each line as the whole capture has it), so that two runs on either side of a cut fill a
//! store the way a live collector does.
//!
//! This crate must never depend on the collector or the ledger: it is their independent check.

// Tests may unwrap: a panic there is the failure report.
#![cfg_attr(test, allow(clippy::unwrap_used))]

mod cluster;
mod dcgm;
mod dra;
mod error;
mod inference;
mod k8s;
mod out;
mod rng;
mod schedule;
mod sink;
mod truth;
mod window;

use std::path::Path;

use chrono::{DateTime, TimeZone, Utc};

pub use error::SimError;
pub use sink::{DcgmSink, FileSink};
pub use window::Window;

/// The file beside a capture that holds the figures it implies: the simulator's truth, not
/// capture data, so whoever ingests a capture directory passes over it.
pub const TRUTH_FILE: &str = "expected.json";

/// Object capture starts this long before the first scrape, so that the cluster is already busy
/// (queues, runs in flight) when metrics begin.
const WARMUP_S: i64 = 12 * 3600;

/// The longest gap between a GPU's observations that still counts as covered under the
/// ledger's default `max_gap_factor` (docs/accounting.md, "Observation"): 2.5 scrape intervals, so
/// that one missed scrape costs nothing. The simulator's expected figures assume it; spelled
/// as 5/2 so that it stays whole milliseconds.
pub(crate) fn max_gap_ms(interval_ms: i64) -> i64 {
    5 * interval_ms / 2
}

/// What to simulate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimConfig {
    /// Requested number of GPUs; rounded to whole nodes per pool (at least one node each).
    pub gpus: u32,
    /// Days of DCGM samples.
    pub days: u32,
    pub seed: u64,
    /// Prometheus scrape interval in seconds.
    pub scrape_interval_s: u32,
    /// First scrape (sub-second parts are ignored).
    pub start: DateTime<Utc>,
}

impl Default for SimConfig {
    /// 64 GPUs for 3 days from 2026-10-30, so that the default run crosses a month boundary.
    fn default() -> Self {
        SimConfig {
            gpus: 64,
            days: 3,
            seed: 42,
            scrape_interval_s: 30,
            start: Utc
                .with_ymd_and_hms(2026, 10, 30, 0, 0, 0)
                .single()
                .unwrap_or_default(),
        }
    }
}

/// How the capture is written, beyond what is simulated: whatever these are, the cluster, its
/// values and `expected.json`'s figures are the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimOptions {
    /// DCGM series of GPUs held through DRA claims carry the pod labels (`container`,
    /// `namespace`, `pod`) beside the `dra_*` ones, as dcgm-exporter writes them. With false
    /// they carry only the `dra_*` labels (a capture whose pod labels were dropped by
    /// relabelling: one series per claim), and the ledger must find the pods through the claims'
    /// `reservedFor`.
    pub dra_pod_labels: bool,
}

impl Default for SimOptions {
    fn default() -> Self {
        SimOptions { dra_pod_labels: true }
    }
}

/// What a run wrote (with a [`Window`], only what lies in it; `expected.json` counts the whole
/// period).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SimSummary {
    pub files: u64,
    /// Metric lines written (one value of one metric of one GPU or MIG instance).
    pub samples: u64,
    /// GPU-or-MIG-instance rows: distinct (series, timestamp) pairs.
    pub gpu_rows: u64,
    /// Kubernetes object versions written (watch events, list items, YAML documents, Events).
    pub objects: u64,
    pub bytes: u64,
}

fn validate(cfg: &SimConfig) -> Result<(), SimError> {
    let mut problems = Vec::new();
    if cfg.gpus == 0 || cfg.gpus > 200_000 {
        problems.push(format!(
            "gpus must be between 1 and 200000, got {}",
            cfg.gpus
        ));
    }
    if cfg.days == 0 || cfg.days > 366 {
        problems.push(format!("days must be between 1 and 366, got {}", cfg.days));
    }
    if cfg.scrape_interval_s == 0 || cfg.scrape_interval_s > 3600 {
        problems.push(format!(
            "scrape interval must be between 1 s and 3600 s, got {} s",
            cfg.scrape_interval_s
        ));
    }
    if cfg.start.timestamp() < 86_400 * 365 {
        problems.push(format!(
            "start must be after 1971, got {}",
            cfg.start.to_rfc3339()
        ));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(SimError::Config(problems.join("; ")))
    }
}

/// Simulates the cluster described by `cfg` and writes its capture directory under `out`
/// (created if missing; files of the same names are replaced, each atomically). `progress` is
/// called with the fraction done, from the calling thread.
pub fn simulate(
    cfg: &SimConfig,
    out: &Path,
    progress: &mut dyn FnMut(f64),
) -> Result<SimSummary, SimError> {
    simulate_window(cfg, &Window::ALL, out, progress)
}

/// Like [`simulate`], but writes only the samples, watch events and Events observed inside
/// `window` (snapshots and `expected.json` whole): the cluster simulated, and so each line
/// written, is the same whatever the window.
pub fn simulate_window(
    cfg: &SimConfig,
    window: &Window,
    out: &Path,
    progress: &mut dyn FnMut(f64),
) -> Result<SimSummary, SimError> {
    simulate_window_with(cfg, &SimOptions::default(), window, out, progress)
}

/// [`simulate_window`], written as `opts` say.
pub fn simulate_window_with(
    cfg: &SimConfig,
    opts: &SimOptions,
    window: &Window,
    out: &Path,
    progress: &mut dyn FnMut(f64),
) -> Result<SimSummary, SimError> {
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(16);
    simulate_files_in(cfg, opts, window, out, threads, progress)
}

/// [`simulate`] on `threads` threads.
#[cfg(test)]
fn simulate_files(cfg: &SimConfig, out: &Path, threads: usize, progress: &mut dyn FnMut(f64)) -> Result<SimSummary, SimError> {
    simulate_files_in(cfg, &SimOptions::default(), &Window::ALL, out, threads, progress)
}

/// [`simulate_window_with`] on `threads` threads.
fn simulate_files_in(cfg: &SimConfig, opts: &SimOptions, window: &Window, out: &Path, threads: usize, progress: &mut dyn FnMut(f64)) -> Result<SimSummary, SimError> {
    let root = out.to_path_buf();
    simulate_on(cfg, opts, window, out, Dcgm::Files { threads, sink: &move || Box::new(FileSink::new(&root)) }, progress)
}

/// Simulates like [`simulate`], but hands the DCGM text to sinks made by `sink` instead of
/// writing it under `out` (which still gets the Kubernetes files and `expected.json`). Each
/// node is written on a thread of its own, into a sink of its own; the nodes are kept within a
/// day of each other, so the sinks together see the capture about a day at a time. Each file's
/// text is the same as [`simulate_window`] writes for `window`.
pub fn simulate_to(
    cfg: &SimConfig,
    window: &Window,
    out: &Path,
    sink: &(dyn Fn() -> Box<dyn DcgmSink> + Sync),
    progress: &mut dyn FnMut(f64),
) -> Result<SimSummary, SimError> {
    simulate_to_with(cfg, &SimOptions::default(), window, out, sink, progress)
}

/// [`simulate_to`], written as `opts` say.
pub fn simulate_to_with(
    cfg: &SimConfig,
    opts: &SimOptions,
    window: &Window,
    out: &Path,
    sink: &(dyn Fn() -> Box<dyn DcgmSink> + Sync),
    progress: &mut dyn FnMut(f64),
) -> Result<SimSummary, SimError> {
    simulate_on(cfg, opts, window, out, Dcgm::ByDay { sink }, progress)
}

/// How the DCGM text is written (see [`simulate`], [`simulate_to`]).
enum Dcgm<'s> {
    /// Nodes taken in turn by `threads` threads.
    Files { threads: usize, sink: &'s (dyn Fn() -> Box<dyn DcgmSink> + Sync) },
    /// A thread per node, the nodes a day apart at most.
    ByDay { sink: &'s (dyn Fn() -> Box<dyn DcgmSink> + Sync) },
}

/// The time frame `cfg` describes.
fn timeline(cfg: &SimConfig) -> cluster::Timeline {
    let start_s = cfg.start.timestamp();
    let interval_ms = cfg.scrape_interval_s as i64 * 1000;
    let span_ms = cfg.days as i64 * out::MS_PER_DAY;
    cluster::Timeline {
        start_s,
        end_s: start_s + cfg.days as i64 * 86_400,
        obj_start_s: start_s - WARMUP_S,
        interval_ms,
        scrapes: (span_ms / interval_ms) as usize,
    }
}

fn simulate_on(
    cfg: &SimConfig,
    opts: &SimOptions,
    window: &Window,
    out: &Path,
    dcgm: Dcgm<'_>,
    progress: &mut dyn FnMut(f64),
) -> Result<SimSummary, SimError> {
    validate(cfg)?;
    progress(0.0);
    let tl = timeline(cfg);
    let interval_ms = tl.interval_ms;
    out::create_dir(out)?;
    let cl = cluster::build(cfg.seed, &tl, cfg.gpus);
    let sim = schedule::run(cfg.seed, &cl, &tl);
    let claims = dra::build(cfg.seed, &cl, &sim);
    progress(0.03);

    let months = truth::Months::new(
        tl.start_ms() - out::MS_PER_DAY,
        tl.end_ms() + interval_ms + out::MS_PER_DAY,
    );
    let ctx = dcgm::Ctx {
        cl: &cl,
        tl: &tl,
        sim: &sim,
        holds: dcgm::build_holds(&cl, &sim),
        seg_class: sim.segs.iter().map(|s| truth::seg_class(&s.end)).collect(),
        months: &months,
        stranding: truth::stranding_windows(&sim),
        dir: Path::new("dcgm").to_path_buf(),
        seed: cfg.seed,
        window: *window,
        claims: &claims,
        dra_pod_labels: opts.dra_pod_labels,
    };
    // Objects (CPU-bound JSON) are written beside the samples (mostly disk-bound); neither
    // depends on the other, so this changes no byte.
    let (written, ((stats, acc), counted)) = std::thread::scope(|scope| {
        let objects = scope.spawn(|| k8s::write_all(cfg.seed, &cl, &tl, &sim, &claims, window, out));
        let mut progress = |f| progress(0.03 + 0.95 * f);
        let (samples, sink) = match dcgm {
            Dcgm::Files { threads, sink } => (dcgm::write_all(&ctx, threads, sink, &mut progress), sink),
            Dcgm::ByDay { sink } => (dcgm::write_all_by_day(&ctx, sink, &mut progress), sink),
        };
        let counted = inference::write(cfg.seed, &cl, &tl, &sim, window, &mut *sink());
        let written = objects
            .join()
            .map_err(|_| SimError::internal("the Kubernetes object writer panicked"))?;
        Ok::<_, SimError>((written?, (samples?, counted?)))
    })?;

    let expected = truth::build_expected(
        cfg,
        opts,
        &cl,
        &tl,
        &sim,
        &months,
        &acc,
        truth::Counts {
            inference: &counted,
            samples: stats.samples + counted.samples,
            gpu_rows: stats.rows,
            blank_values: stats.blanks,
            objects_by_kind: written.objects_by_kind,
        },
    );
    let path = out.join(TRUTH_FILE);
    let mut text = serde_json::to_vec_pretty(&expected).map_err(|e| SimError::Serialize {
        path: path.clone(),
        what: "expected figures".to_string(),
        reason: e.to_string(),
    })?;
    text.push(b'\n');
    let expected_bytes = out::write_atomic(&path, &text)?;
    progress(1.0);
    Ok(SimSummary {
        files: written.files + stats.files + counted.files + 1,
        samples: stats.emitted_samples + counted.emitted_samples,
        gpu_rows: stats.emitted_rows,
        objects: written.objects,
        bytes: written.bytes + stats.bytes + counted.bytes + expected_bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Datelike;

    #[test]
    fn default_config_crosses_a_month() {
        let c = SimConfig::default();
        assert_eq!(c.start.to_rfc3339(), "2026-10-30T00:00:00+00:00");
        assert_eq!(
            (c.gpus, c.days, c.seed, c.scrape_interval_s),
            (64, 3, 42, 30)
        );
    }

    /// Every file under `dir`, relative to it.
    fn files_under(dir: &Path) -> Vec<std::path::PathBuf> {
        let mut stack = vec![dir.to_path_buf()];
        let mut out = Vec::new();
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    stack.push(p);
                } else {
                    out.push(p.strip_prefix(dir).unwrap().to_path_buf());
                }
            }
        }
        out
    }

    /// Nodes are written on several threads; how many must not change a byte.
    #[test]
    fn output_does_not_depend_on_the_thread_count() {
        let cfg = SimConfig {
            gpus: 16,
            days: 1,
            seed: 9,
            scrape_interval_s: 600,
            ..SimConfig::default()
        };
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let sa = simulate_files(&cfg, a.path(), 1, &mut |_| {}).unwrap();
        let sb = simulate_files(&cfg, b.path(), 3, &mut |_| {}).unwrap();
        assert_eq!(sa, sb);
        let mut compared = 0;
        for rel in files_under(a.path()) {
            let (p, q) = (a.path().join(&rel), b.path().join(&rel));
            assert!(std::fs::read(&p).unwrap() == std::fs::read(&q).unwrap(), "{} differs", rel.display());
            compared += 1;
        }
        assert_eq!(compared, sa.files);
    }

    /// Collects what a sink is handed, checking that each file is written, then closed once.
    struct MemSink {
        files: std::sync::Arc<std::sync::Mutex<std::collections::BTreeMap<std::path::PathBuf, Vec<u8>>>>,
        open: Option<(std::path::PathBuf, Vec<u8>)>,
    }

    impl DcgmSink for MemSink {
        fn write(&mut self, rel: &Path, text: &[u8]) -> Result<(), SimError> {
            match &mut self.open {
                Some((p, buf)) if p == rel => buf.extend_from_slice(text),
                Some((p, _)) => panic!("{} written while {} is open", rel.display(), p.display()),
                None => self.open = Some((rel.to_path_buf(), text.to_vec())),
            }
            Ok(())
        }

        fn close(&mut self, rel: &Path) -> Result<(), SimError> {
            let (p, buf) = self.open.take().expect("close without write");
            assert_eq!(p, rel);
            let old = self.files.lock().unwrap().insert(p, buf);
            assert!(old.is_none(), "{} closed twice", rel.display());
            Ok(())
        }
    }

    /// `simulate_to` hands its sinks the bytes `simulate` writes, file for file, and writes
    /// the same Kubernetes files and truth.
    #[test]
    fn sinks_get_the_text_simulate_writes() {
        let cfg = SimConfig { gpus: 24, days: 2, seed: 3, scrape_interval_s: 600, ..SimConfig::default() };
        let files_dir = tempfile::tempdir().unwrap();
        let sink_dir = tempfile::tempdir().unwrap();
        let on_disk = simulate_files(&cfg, files_dir.path(), 2, &mut |_| {}).unwrap();
        let handed = std::sync::Arc::new(std::sync::Mutex::new(std::collections::BTreeMap::new()));
        let make = || -> Box<dyn DcgmSink> { Box::new(MemSink { files: handed.clone(), open: None }) };
        let via_sinks = simulate_to(&cfg, &Window::ALL, sink_dir.path(), &make, &mut |_| {}).unwrap();
        assert_eq!(on_disk, via_sinks);
        let handed = handed.lock().unwrap();
        assert!(!sink_dir.path().join("dcgm").exists(), "no DCGM text on disk");
        let mut dcgm_files = 0;
        for rel in files_under(files_dir.path()) {
            let bytes = std::fs::read(files_dir.path().join(&rel)).unwrap();
            // The samples (DCGM and the vLLM servers' counters) go to the sinks, the rest to disk.
            if rel.starts_with("dcgm") || rel.starts_with("inference") {
                dcgm_files += 1;
                assert!(handed.get(&rel) == Some(&bytes), "{} differs", rel.display());
            } else {
                assert!(std::fs::read(sink_dir.path().join(&rel)).unwrap() == bytes, "{} differs", rel.display());
            }
        }
        assert_eq!(dcgm_files, handed.len());
        assert!(handed.keys().any(|p| p.extension().is_some() && p.to_string_lossy().contains("t4")), "per-scrape files too");
    }

    /// A small capture that still has a cordon, a NotReady outage and a Workload too big to fit.
    fn small_with_cordon() -> SimConfig {
        SimConfig {
            gpus: 16,
            days: 1,
            seed: 5,
            scrape_interval_s: 300,
            start: Utc.with_ymd_and_hms(2026, 10, 31, 12, 0, 0).single().unwrap(),
        }
    }

    fn read_json(path: &Path) -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
    }

    /// docs/accounting.md "Why GPUs were idle": each reason shows up in a small capture, the reasons of
    /// each (month, team, state, pool) add up to its `gpu_hours` row, and `stranded` is the
    /// stranded rows per month and pool.
    #[test]
    fn idle_reasons_split_the_idle_hours() {
        let dir = tempfile::tempdir().unwrap();
        simulate_files(&small_with_cordon(), dir.path(), 2, &mut |_| {}).unwrap();
        let exp = read_json(&dir.path().join(TRUTH_FILE));
        let key = |r: &serde_json::Value, what: &[&str]| -> Vec<String> {
            what.iter().map(|k| r[*k].as_str().unwrap().to_string()).collect()
        };
        let cell = ["month", "team", "state", "pool"];
        let mut by_cell: std::collections::BTreeMap<Vec<String>, f64> = Default::default();
        let mut by_reason: std::collections::BTreeMap<String, f64> = Default::default();
        let mut stranded: std::collections::BTreeMap<Vec<String>, f64> = Default::default();
        for r in exp["idle_reasons"].as_array().unwrap() {
            let h = r["gpu_hours"].as_f64().unwrap();
            assert!(h > 0.0, "{r}");
            *by_cell.entry(key(r, &cell)).or_default() += h;
            *by_reason.entry(r["reason"].as_str().unwrap().to_string()).or_default() += h;
            if r["reason"] == "stranded" {
                assert_eq!((r["team"].as_str(), r["state"].as_str()), (Some("platform"), Some("unallocated")));
                *stranded.entry(key(r, &["month", "pool"])).or_default() += h;
            }
        }
        let mut idle_rows = 0;
        for r in exp["gpu_hours"].as_array().unwrap() {
            if !["allocated_idle", "unallocated"].contains(&r["state"].as_str().unwrap()) {
                continue;
            }
            idle_rows += 1;
            let want = r["gpu_hours"].as_f64().unwrap();
            let got = by_cell.remove(&key(r, &cell)).unwrap_or(0.0);
            assert!((got - want).abs() <= 1e-9 * want, "{r}: reasons give {got}");
        }
        assert!(by_cell.is_empty(), "reasons without a gpu_hours row: {by_cell:?}");
        assert!(idle_rows > 0);
        let listed: std::collections::BTreeMap<Vec<String>, f64> = exp["stranded"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| (key(r, &["month", "pool"]), r["gpu_hours"].as_f64().unwrap()))
            .collect();
        assert_eq!(listed.keys().collect::<Vec<_>>(), stranded.keys().collect::<Vec<_>>());
        for (k, v) in &listed {
            assert!((v - stranded[k]).abs() <= 1e-9 * v, "{k:?}");
        }
        println!("idle reasons of {:?}: {by_reason:?}", small_with_cordon());
        for reason in ["cordoned", "stranded", "no_demand", "startup", "stall", "teardown"] {
            assert!(by_reason.get(reason).is_some_and(|&h| h > 0.0), "no {reason} hours: {by_reason:?}");
        }
    }

    /// The collector observes a version at the latest time it records in `metadata` and
    /// `status` (keys ending in Timestamp, Time or At): each Node version must be observed at
    /// exactly the change it records, or the ledger would date the cordon wrongly.
    /// The latest time (Unix seconds) `v` records under keys ending in Timestamp, Time or At
    /// (`key` is the one `v` is under), as the collector observes a version: into `best`.
    fn latest(v: &serde_json::Value, key: &str, best: &mut i64) {
        match v {
            serde_json::Value::String(s)
                if key.ends_with("Timestamp") || key.ends_with("Time") || key.ends_with("At") =>
            {
                if let Ok(t) = DateTime::parse_from_rfc3339(s) {
                    *best = (*best).max(t.timestamp());
                }
            }
            serde_json::Value::Object(m) => m.iter().for_each(|(k, c)| latest(c, k, best)),
            serde_json::Value::Array(a) => a.iter().for_each(|c| latest(c, key, best)),
            _ => {}
        }
    }

    #[test]
    fn node_versions_are_observed_at_their_change() {
        let cfg = small_with_cordon();
        let dir = tempfile::tempdir().unwrap();
        simulate_files(&cfg, dir.path(), 1, &mut |_| {}).unwrap();
        let cl = cluster::build(cfg.seed, &timeline(&cfg), cfg.gpus);
        let mut want = Vec::new();
        for n in &cl.nodes {
            for c in n.changes() {
                want.push((c.at_s, n.name.clone(), c.unschedulable, c.ready));
            }
        }
        want.sort();
        assert!(want.iter().any(|w| w.2) && want.iter().any(|w| !w.3), "{want:?}");
        let text = std::fs::read_to_string(dir.path().join("kubernetes/nodes.watch.jsonl")).unwrap();
        let mut got = Vec::new();
        for line in text.lines() {
            let ev: serde_json::Value = serde_json::from_str(line).unwrap();
            let o = &ev["object"];
            let mut t = i64::MIN;
            latest(&o["metadata"], "", &mut t);
            latest(&o["status"], "", &mut t);
            let ready = o["status"]["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True");
            let name = o["metadata"]["name"].as_str().unwrap().to_string();
            got.push((t, name, o["spec"]["unschedulable"] == true, ready));
        }
        assert_eq!(got, want);
    }

    /// One sample of the energy test's reader: (UUID, MIG instance id and its sevenths,
    /// replica label, time ms, metric name, value text).
    type EnergySample = (String, Option<(String, u32)>, Option<String>, i64, String, String);

    /// Reads every DCGM sample of a capture with plain string handling: `/federate` files (a
    /// timestamp on each line) and raw scrapes (`<unix-ms>.prom`, none).
    fn read_dcgm_samples(root: &Path) -> Vec<EnergySample> {
        let mut out = Vec::new();
        for node in std::fs::read_dir(root.join("dcgm")).unwrap() {
            let node = node.unwrap().path();
            for f in std::fs::read_dir(&node).unwrap() {
                let f = f.unwrap().path();
                let stem = f.file_stem().unwrap().to_str().unwrap().to_string();
                let file_t: Option<i64> = stem.parse().ok();
                for line in std::fs::read_to_string(&f).unwrap().lines() {
                    if line.is_empty() || line.starts_with('#') {
                        continue;
                    }
                    let open = line.find('{').unwrap();
                    let name = line[..open].to_string();
                    let mut labels = std::collections::BTreeMap::new();
                    let mut rest = &line[open + 1..];
                    loop {
                        if let Some(r) = rest.strip_prefix('}') {
                            rest = r;
                            break;
                        }
                        let eq = rest.find("=\"").unwrap();
                        let key = rest[..eq].to_string();
                        let after = &rest[eq + 2..];
                        let close = after.find('"').unwrap();
                        labels.insert(key, after[..close].to_string());
                        rest = after[close + 1..].strip_prefix(',').unwrap_or(&after[close + 1..]);
                    }
                    let mut parts = rest.split_whitespace();
                    let value = parts.next().unwrap().to_string();
                    let t = match parts.next() {
                        Some(ts) => ts.parse().unwrap(),
                        None => file_t.unwrap(),
                    };
                    let inst = labels.get("GPU_I_ID").filter(|v| !v.is_empty()).map(|id| {
                        let profile = &labels["GPU_I_PROFILE"];
                        (id.clone(), profile[..profile.find('g').unwrap()].parse().unwrap())
                    });
                    let replica = labels.get("prometheus_replica").cloned();
                    out.push((labels["UUID"].clone(), inst, replica, t, name, value));
                }
            }
        }
        out
    }

    /// docs/accounting.md "Energy": the `energy` rows of `expected.json`, summed per month over teams
    /// and states, equal what the rule gives when applied to the written samples per series
    /// (a whole GPU, or a MIG instance with its N/7 share and an even part of its GPU's
    /// leftover); the capture crosses a counter reset, a gap within max_gap (two intervals),
    /// gaps beyond it and a month boundary.
    #[test]
    fn energy_rows_match_the_samples() {
        let cfg = SimConfig { gpus: 4, ..small_with_cordon() };
        let dir = tempfile::tempdir().unwrap();
        simulate_files(&cfg, dir.path(), 2, &mut |_| {}).unwrap();
        let exp = read_json(&dir.path().join(TRUTH_FILE));
        let iv = cfg.scrape_interval_s as i64 * 1000;
        let max_gap = max_gap_ms(iv);

        let samples = read_dcgm_samples(dir.path());
        // HA pairs: per GPU and UTC day only the replica seen first counts.
        let mut first_replica: std::collections::BTreeMap<(String, i64), (i64, Option<String>)> = Default::default();
        for (uuid, _, replica, t, _, _) in &samples {
            let e = first_replica.entry((uuid.clone(), t.div_euclid(86_400_000))).or_insert((*t, replica.clone()));
            if *t < e.0 {
                *e = (*t, replica.clone());
            }
        }
        // Per series: each observation's (energy counter, power reading).
        type Obs = (Option<u64>, Option<f64>);
        let mut series: std::collections::BTreeMap<(String, Option<String>), std::collections::BTreeMap<i64, Obs>> =
            Default::default();
        // Per GPU: its MIG instances' sevenths.
        let mut instances: std::collections::BTreeMap<String, std::collections::BTreeMap<String, u32>> = Default::default();
        let mut whole_gpus = std::collections::BTreeSet::new();
        for (uuid, inst, replica, t, name, value) in &samples {
            if first_replica[&(uuid.clone(), t.div_euclid(86_400_000))].1 != *replica {
                continue;
            }
            match inst {
                Some((id, n)) => {
                    instances.entry(uuid.clone()).or_default().insert(id.clone(), *n);
                }
                None => {
                    whole_gpus.insert(uuid.clone());
                }
            }
            let obs = series
                .entry((uuid.clone(), inst.as_ref().map(|i| i.0.clone())))
                .or_default()
                .entry(*t)
                .or_insert((None, None));
            // Every series of a GPU repeats its device values: the same at one time.
            match name.as_str() {
                "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION" => {
                    let v: u64 = value.parse().unwrap();
                    assert!(obs.0.is_none_or(|e| e == v), "{uuid} at {t}");
                    obs.0 = Some(v);
                }
                "DCGM_FI_DEV_POWER_USAGE" => {
                    let v: f64 = value.parse().unwrap();
                    assert!(obs.1.is_none_or(|p| p == v), "{uuid} at {t}");
                    obs.1 = Some(v);
                }
                _ => {}
            }
        }
        // A MIG GPU has only instance series (the ledger would drop any other), and they carry
        // the energy counter and the power.
        assert!(!instances.is_empty());
        assert!(instances.keys().all(|u| !whole_gpus.contains(u)));
        assert!(series.iter().filter(|(k, _)| k.1.is_some()).all(|(_, o)| o.values().all(|v| v.0.is_some() && v.1.is_some())));

        let month_of = |ms: i64| -> (String, i64) {
            let d = DateTime::from_timestamp_millis(ms).unwrap().date_naive();
            let first = chrono::NaiveDate::from_ymd_opt(d.year(), d.month(), 1).unwrap();
            let next = first.checked_add_months(chrono::Months::new(1)).unwrap();
            (first.format("%Y-%m").to_string(), next.and_hms_opt(0, 0, 0).unwrap().and_utc().timestamp_millis())
        };
        let mut want: std::collections::BTreeMap<String, f64> = Default::default();
        let (mut resets, mut two_interval_spans, mut power_spans) = (0, 0, 0);
        for ((uuid, inst), obs) in &series {
            // The time share of this series, and the part of its GPU's MIG leftover it carries.
            let share = match inst {
                Some(id) => {
                    let inst = &instances[uuid];
                    let leftover = 7 - inst.values().sum::<u32>();
                    (inst[id] as f64 + leftover as f64 / inst.len() as f64) / 7.0
                }
                None => 1.0,
            };
            let times: Vec<i64> = obs.keys().copied().collect();
            for (i, &t) in times.iter().enumerate() {
                let (energy, power) = obs[&t];
                let next = times.get(i + 1).copied().filter(|&n| n - t <= max_gap);
                let end = next.unwrap_or(t + iv);
                let watts = match (next, energy, next.and_then(|n| obs[&n].0)) {
                    (Some(n), Some(e), Some(e_next)) => {
                        let increase = if e_next >= e {
                            e_next - e
                        } else {
                            resets += 1;
                            e_next
                        };
                        if n - t == 2 * iv {
                            two_interval_spans += 1;
                        }
                        increase as f64 / (n - t) as f64
                    }
                    _ => {
                        power_spans += 1;
                        power.unwrap()
                    }
                };
                assert!((0.0..2000.0).contains(&watts), "{uuid} at {t}: {watts} W");
                let mut a = t;
                while a < end {
                    let (month, next_month) = month_of(a);
                    let b = end.min(next_month);
                    *want.entry(month).or_default() += watts * (b - a) as f64 * share / 3.6e9;
                    a = b;
                }
            }
        }
        assert!(resets >= 1 && two_interval_spans > 0 && power_spans > series.len(), "{resets} {two_interval_spans} {power_spans}");

        let rows = exp["energy"].as_array().unwrap();
        let mut got: std::collections::BTreeMap<String, f64> = Default::default();
        let mut by_state: std::collections::BTreeMap<String, f64> = Default::default();
        let mut keys = Vec::new();
        for r in rows {
            let kwh = r["kwh"].as_f64().unwrap();
            assert!(kwh > 0.0, "{r}");
            let key: Vec<String> = ["month", "team", "state"].iter().map(|k| r[*k].as_str().unwrap().to_string()).collect();
            assert!(truth::STATES.contains(&key[2].as_str()), "{r}");
            keys.push(key.clone());
            *got.entry(key[0].clone()).or_default() += kwh;
            *by_state.entry(key[2].clone()).or_default() += kwh;
        }
        assert!(keys.windows(2).all(|w| w[0] < w[1]), "energy rows not sorted or not unique");
        println!("energy of {cfg:?}: by month {got:?}, by state {by_state:?}; recomputed {want:?}");
        assert_eq!(got.keys().collect::<Vec<_>>(), want.keys().collect::<Vec<_>>());
        assert!(got.len() == 2, "the capture crosses a month: {got:?}");
        for (month, w) in &want {
            assert!((got[month] - w).abs() <= 1e-9 * w, "{month}: expected.json {} kWh, samples {w} kWh", got[month]);
        }
        // MIG GPUs' time shows up as energy in the states their instances are in.
        assert!(by_state.get("unallocated").is_some_and(|&k| k > 0.0) && by_state.len() >= 3, "{by_state:?}");
    }

    #[test]
    fn bad_config_lists_every_problem() {
        let c = SimConfig {
            gpus: 0,
            days: 0,
            scrape_interval_s: 0,
            ..SimConfig::default()
        };
        let e = simulate(&c, Path::new("/nonexistent/never-written"), &mut |_| {})
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("gpus") && e.contains("days") && e.contains("scrape interval"),
            "{e}"
        );
    }

    /// A capture's files and their bytes, by path relative to it.
    type Tree = std::collections::BTreeMap<std::path::PathBuf, Vec<u8>>;

    fn read_tree(dir: &Path) -> Tree {
        files_under(dir).into_iter().map(|rel| (rel.clone(), std::fs::read(dir.join(&rel)).unwrap())).collect()
    }

    fn assert_same_tree(got: &Tree, want: &Tree, what: &str) {
        assert_eq!(got.keys().collect::<Vec<_>>(), want.keys().collect::<Vec<_>>(), "{what}: files");
        if let Some((rel, _)) = want.iter().find(|(rel, b)| got.get(*rel) != Some(*b)) {
            panic!("{what}: {} differs", rel.display());
        }
    }

    /// The half-split config: two UTC days crossing a month, every pool (the T4 node writes a
    /// file per scrape, the first L4 node an HA pair).
    fn split_config() -> SimConfig {
        SimConfig {
            gpus: 16,
            days: 2,
            seed: 5,
            scrape_interval_s: 600,
            start: Utc.with_ymd_and_hms(2026, 10, 31, 0, 0, 0).single().unwrap(),
        }
    }

    /// A split capture: the whole, and its halves on either side of the cut `cut` picks from the
    /// whole.
    struct Split {
        cut_ms: i64,
        whole: Tree,
        before: Tree,
        after: Tree,
        /// Whole, before, after.
        summaries: [SimSummary; 3],
    }

    /// Simulates `cfg` whole, then before and from the cut: the first half into files, the
    /// second handed to sinks as `--store` has it (its Kubernetes files and truth on disk),
    /// which must be what the second half written to files is.
    fn split(cfg: &SimConfig, cut: impl FnOnce(&Tree) -> i64) -> Split {
        let dirs: Vec<_> = (0..4).map(|_| tempfile::tempdir().unwrap()).collect();
        let whole_summary = simulate_files(cfg, dirs[0].path(), 1, &mut |_| {}).unwrap();
        let whole = read_tree(dirs[0].path());
        let cut_ms = cut(&whole);
        let at = DateTime::from_timestamp_millis(cut_ms).unwrap();
        let (until, from) = (Window::new(None, Some(at)).unwrap(), Window::new(Some(at), None).unwrap());
        let before_summary = simulate_files_in(cfg, &SimOptions::default(), &until, dirs[1].path(), 2, &mut |_| {}).unwrap();
        let handed = std::sync::Arc::new(std::sync::Mutex::new(std::collections::BTreeMap::new()));
        let make = || -> Box<dyn DcgmSink> { Box::new(MemSink { files: handed.clone(), open: None }) };
        let after_summary = simulate_to(cfg, &from, dirs[2].path(), &make, &mut |_| {}).unwrap();
        let mut after = read_tree(dirs[2].path());
        after.extend(handed.lock().unwrap().clone());
        let after_files = simulate_files_in(cfg, &SimOptions::default(), &from, dirs[3].path(), 3, &mut |_| {}).unwrap();
        assert_eq!(after_summary, after_files);
        assert_same_tree(&after, &read_tree(dirs[3].path()), "sinks and files after the cut");
        Split { cut_ms, before: read_tree(dirs[1].path()), whole, after, summaries: [whole_summary, before_summary, after_summary] }
    }

    /// Each version, Event or DCGM line of the whole capture is in exactly one half, the one its
    /// time puts it in, in the whole's order (for DCGM lines: within their file, as a set);
    /// snapshots and the truth are in both, whole; no half has an empty DCGM file or a file the
    /// whole has not.
    fn assert_partition(sp: &Split) {
        let Split { cut_ms, whole, before, after, summaries } = sp;
        let side = |t_ms: i64| usize::from(t_ms >= *cut_ms);
        let halves = [before, after];
        for (h, half) in halves.iter().enumerate() {
            for (rel, b) in half.iter() {
                assert!(whole.contains_key(rel), "half {h}: {} is not in the whole", rel.display());
                // Kubernetes streams are written even when empty (the ingest takes them so).
                assert!(!b.is_empty() || !(rel.starts_with("dcgm") || rel.starts_with("inference")), "half {h}: {} is empty", rel.display());
            }
        }
        // Per half: DCGM samples and Kubernetes versions written.
        let mut dcgm = [0usize; 2];
        let mut versions = [0usize; 2];
        let mut snapshot_objects = 0u64;
        for (rel, bytes) in whole {
            let name = rel.file_name().unwrap().to_str().unwrap();
            let of = |h: usize| halves[h].get(rel);
            if rel.starts_with("dcgm") || rel.starts_with("inference") {
                if let Ok(t) = rel.file_stem().unwrap().to_str().unwrap().parse::<i64>() {
                    // A raw scrape is a file of its own: whole, on its time's side only.
                    assert_eq!(of(side(t)), Some(bytes), "{}", rel.display());
                    assert_eq!(of(1 - side(t)), None, "{}", rel.display());
                    dcgm[side(t)] += 1;
                    continue;
                }
                // /federate lines carry their time: each on its side, together the whole's.
                // `# TYPE` lines head each half's file: only samples are split.
                fn lines(b: Option<&Vec<u8>>) -> Vec<&str> {
                    b.map(|b| std::str::from_utf8(b).unwrap().lines().filter(|l| !l.starts_with('#')).collect()).unwrap_or_default()
                }
                let mut got = Vec::new();
                for (h, n) in dcgm.iter_mut().enumerate() {
                    for l in lines(of(h)) {
                        let t: i64 = l.rsplit(' ').next().unwrap().parse().unwrap();
                        assert_eq!(side(t), h, "{}: {l}", rel.display());
                        *n += 1;
                        got.push(l);
                    }
                }
                let mut want = lines(Some(bytes));
                got.sort_unstable();
                want.sort_unstable();
                assert!(got == want, "{}: the halves' lines are not the whole's", rel.display());
            } else if ["namespaces.yaml", "nodes.json", "kueue.yaml", "dra.yaml", TRUTH_FILE].contains(&name) {
                assert!(of(0) == Some(bytes) && of(1) == Some(bytes), "{} is not whole in both halves", rel.display());
                snapshot_objects += match name {
                    "nodes.json" => serde_json::from_slice::<serde_json::Value>(bytes).unwrap()["items"].as_array().unwrap().len() as u64,
                    TRUTH_FILE => 0,
                    _ => 1 + std::str::from_utf8(bytes).unwrap().lines().filter(|l| *l == "---").count() as u64,
                };
            } else if name == "events.json" {
                let items = |b: &Vec<u8>| serde_json::from_slice::<serde_json::Value>(b).unwrap()["items"].as_array().unwrap().clone();
                let mut got = Vec::new();
                for (h, n) in versions.iter_mut().enumerate() {
                    for e in items(of(h).unwrap()) {
                        let t = DateTime::parse_from_rfc3339(e["firstTimestamp"].as_str().unwrap()).unwrap().timestamp();
                        assert_eq!(side(t * 1000), h, "{e}");
                        *n += 1;
                        got.push(e);
                    }
                }
                assert!(got == items(bytes), "events.json: the halves' items are not the whole's");
            } else {
                // Watch streams and events.k8s.io/v1 Events: the halves, one after the other,
                // are the whole stream.
                let (b, a) = (of(0).unwrap(), of(1).unwrap());
                assert!([b.as_slice(), a.as_slice()].concat() == *bytes, "{}: the halves are not the whole", rel.display());
                for (h, n) in versions.iter_mut().enumerate() {
                    for v in serde_json::Deserializer::from_slice(of(h).unwrap()).into_iter::<serde_json::Value>() {
                        let v = v.unwrap();
                        // A watch event's object, else the Event itself.
                        let o = if v.get("object").is_some() { &v["object"] } else { &v };
                        let mut t = i64::MIN;
                        latest(&o["metadata"], "", &mut t);
                        latest(&o["status"], "", &mut t);
                        assert_eq!(side(t * 1000), h, "{}: version at {t}", rel.display());
                        *n += 1;
                    }
                }
            }
        }
        assert!(dcgm.iter().all(|&n| n > 0) && versions.iter().all(|&n| n > 0), "both halves hold something: {dcgm:?} {versions:?}");
        let [whole_s, before_s, after_s] = summaries;
        assert_eq!(before_s.samples + after_s.samples, whole_s.samples);
        assert_eq!(before_s.gpu_rows + after_s.gpu_rows, whole_s.gpu_rows);
        // Snapshots are in both halves, every other version in one.
        assert_eq!(before_s.objects + after_s.objects, whole_s.objects + snapshot_objects);
    }

    /// Split at a midnight, each UTC day's `/federate` file lies whole in one half, and the
    /// halves' DCGM files are the whole capture's.
    #[test]
    fn a_window_split_at_midnight_partitions_the_capture() {
        let cfg = split_config();
        let sp = split(&cfg, |_| cfg.start.timestamp_millis() + out::MS_PER_DAY);
        assert_partition(&sp);
        let dcgm = |t: &Tree| -> Tree { t.iter().filter(|(rel, _)| rel.starts_with("dcgm")).map(|(r, b)| (r.clone(), b.clone())).collect() };
        let mut halves = dcgm(&sp.before);
        let after = dcgm(&sp.after);
        assert!(halves.keys().all(|rel| !after.contains_key(rel)), "a file in both halves");
        halves.extend(after);
        assert_same_tree(&halves, &dcgm(&sp.whole), "the halves' DCGM files");
        // The truth is the whole period's, whatever the window.
        assert_eq!(sp.before[Path::new(TRUTH_FILE)], sp.whole[Path::new(TRUTH_FILE)]);
    }

    /// Split between an HA pair's two copies of a scrape (replica "b" samples 10 s after "a"),
    /// each copy goes by its own time; every line still lands once.
    #[test]
    fn a_window_split_mid_scrape_divides_the_replicas() {
        let cfg = split_config();
        let mut tb = None;
        let sp = split(&cfg, |whole| {
            // The middle "b" sample of the HA node's second day.
            let day = out::day_string(cfg.start.timestamp_millis() + out::MS_PER_DAY);
            let (rel, text) = whole
                .iter()
                .find(|(rel, b)| rel.ends_with(format!("{day}.prom")) && b.windows(22).any(|w| w == b"prometheus_replica=\"b\""))
                .unwrap();
            let times: Vec<i64> = std::str::from_utf8(text)
                .unwrap()
                .lines()
                .filter(|l| l.contains("prometheus_replica=\"b\""))
                .map(|l| l.rsplit(' ').next().unwrap().parse().unwrap())
                .collect();
            let t = times[times.len() / 2];
            tb = Some((rel.clone(), t));
            t - 5_000
        });
        assert_partition(&sp);
        let (rel, t) = tb.unwrap();
        let has = |half: &Tree, replica: &str, at: i64| {
            std::str::from_utf8(&half[&rel]).unwrap().lines().any(|l| l.contains(&format!("prometheus_replica=\"{replica}\"")) && l.ends_with(&format!(" {at}")))
        };
        assert!(has(&sp.before, "a", t - 10_000) && !has(&sp.before, "b", t), "the scrape's first copy before the cut");
        assert!(has(&sp.after, "b", t) && !has(&sp.after, "a", t - 10_000), "its second copy after it");
    }

    /// A window that holds no scrape writes no DCGM file, and the Kubernetes streams are there,
    /// empty, beside whole snapshots.
    #[test]
    fn a_window_before_the_capture_writes_no_samples() {
        let cfg = SimConfig { days: 1, ..split_config() };
        let dir = tempfile::tempdir().unwrap();
        let until = Window::new(None, Some(cfg.start - chrono::Duration::days(2))).unwrap();
        let s = simulate_files_in(&cfg, &SimOptions::default(), &until, dir.path(), 2, &mut |_| {}).unwrap();
        assert_eq!((s.samples, s.gpu_rows), (0, 0));
        assert!(!dir.path().join("dcgm").exists());
        let tree = read_tree(dir.path());
        assert!(tree[Path::new("kubernetes/pods.watch.jsonl")].is_empty());
        assert!(!tree[Path::new("kubernetes/nodes.json")].is_empty());
        let events: serde_json::Value = serde_json::from_slice(&tree[Path::new("kubernetes/events.json")]).unwrap();
        assert_eq!(events["items"], serde_json::json!([]));
    }
}
