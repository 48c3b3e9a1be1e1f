//! A deterministic GPU cluster simulator for testing gpuledger end to end.
//!
//! [`simulate`] invents a Kubernetes cluster with NVIDIA GPUs (H100, A100 split into MIG
//! instances, L4, T4), teams that submit jobs through Kueue, and a few days of its life: queueing,
//! admission, preemption and requeue, runs that succeed, fail (OOMKilled, errors, GPU XID
//! errors) or are still running, idle stretches, exporter outages. It writes what a platform team
//! would have recorded with standard tools, in the formats gpuledger's collector reads:
//!
//! ```text
//! <out>/dcgm/<node>/<YYYY-MM-DD>.prom     Prometheus /federate text, one file per node and day
//! <out>/dcgm/<t4-node>/<unix-ms>.prom     raw dcgm-exporter scrapes (no sample timestamps)
//! <out>/kubernetes/namespaces.yaml        multi-document YAML
//! <out>/kubernetes/nodes.json             kubectl get nodes -o json
//! <out>/kubernetes/nodes.watch.jsonl      Node changes (cordon, NotReady), one per line
//! <out>/kubernetes/kueue.yaml             ResourceFlavors, ClusterQueues, LocalQueues
//! <out>/kubernetes/workloads.watch.json   kubectl --watch --output-watch-events (pretty)
//! <out>/kubernetes/jobs.watch.jsonl       watch events, one per line
//! <out>/kubernetes/pods.watch.jsonl       watch events, one per line
//! <out>/kubernetes/events.json            core/v1 Event List
//! <out>/kubernetes/events-v1.jsonl        events.k8s.io/v1 Events, one per line
//! <out>/expected.json                     the ledger figures this capture implies
//! ```
//!
//! `expected.json` is computed from the simulation's own state as each sample is generated,
//! applying DESIGN.md's accounting rules, never by reading the files back: it is the answer key
//! the ledger is tested against. The same configuration always gives the same bytes (a
//! home-made seeded PRNG, no dependency on `rand`), whatever the number of threads.
//!
//! This crate must never depend on the collector or the ledger: it is their independent check.

// Tests may unwrap: a panic there is the failure report.
#![cfg_attr(test, allow(clippy::unwrap_used))]

mod cluster;
mod dcgm;
mod error;
mod k8s;
mod out;
mod rng;
mod schedule;
mod truth;

use std::path::Path;

use chrono::{DateTime, TimeZone, Utc};

pub use error::SimError;

/// The file beside a capture that holds the figures it implies: the simulator's truth, not
/// capture data, so whoever ingests a capture directory passes over it.
pub const TRUTH_FILE: &str = "expected.json";

/// Object capture starts this long before the first scrape, so that the cluster is already busy
/// (queues, runs in flight) when metrics begin.
const WARMUP_S: i64 = 12 * 3600;

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

/// What a run wrote.
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
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(16);
    simulate_on(cfg, out, threads, progress)
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
    out: &Path,
    threads: usize,
    progress: &mut dyn FnMut(f64),
) -> Result<SimSummary, SimError> {
    validate(cfg)?;
    progress(0.0);
    let tl = timeline(cfg);
    let interval_ms = tl.interval_ms;
    out::create_dir(out)?;
    let cl = cluster::build(cfg.seed, &tl, cfg.gpus);
    let sim = schedule::run(cfg.seed, &cl, &tl);
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
        dir: out.join("dcgm"),
        seed: cfg.seed,
    };
    // Objects (CPU-bound JSON) are written beside the samples (mostly disk-bound); neither
    // depends on the other, so this changes no byte.
    let (written, (stats, acc)) = std::thread::scope(|scope| {
        let objects = scope.spawn(|| k8s::write_all(cfg.seed, &cl, &tl, &sim, out));
        let samples = dcgm::write_all(&ctx, threads, &mut |f| progress(0.03 + 0.95 * f));
        let written = objects
            .join()
            .map_err(|_| SimError::Internal("the Kubernetes object writer panicked".to_string()))?;
        Ok::<_, SimError>((written?, samples?))
    })?;

    let objects: u64 = written.objects_by_kind.values().sum();
    let expected = truth::build_expected(
        cfg,
        &cl,
        &tl,
        &sim,
        &months,
        &acc,
        truth::Counts {
            samples: stats.samples,
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
        files: written.files + stats.files + 1,
        samples: stats.samples,
        gpu_rows: stats.rows,
        objects,
        bytes: written.bytes + stats.bytes + expected_bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_config_crosses_a_month() {
        let c = SimConfig::default();
        assert_eq!(c.start.to_rfc3339(), "2026-10-30T00:00:00+00:00");
        assert_eq!(
            (c.gpus, c.days, c.seed, c.scrape_interval_s),
            (64, 3, 42, 30)
        );
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
        let sa = simulate_on(&cfg, a.path(), 1, &mut |_| {}).unwrap();
        let sb = simulate_on(&cfg, b.path(), 3, &mut |_| {}).unwrap();
        assert_eq!(sa, sb);
        let mut stack = vec![a.path().to_path_buf()];
        let mut compared = 0;
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    stack.push(p);
                    continue;
                }
                let q = b.path().join(p.strip_prefix(a.path()).unwrap());
                assert!(
                    std::fs::read(&p).unwrap() == std::fs::read(&q).unwrap(),
                    "{} differs",
                    p.display()
                );
                compared += 1;
            }
        }
        assert_eq!(compared, sa.files);
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

    /// DESIGN.md "Why GPUs were idle": each reason shows up in a small capture, the reasons of
    /// each (month, team, state, pool) add up to its `gpu_hours` row, and `stranded` is the
    /// stranded rows per month and pool.
    #[test]
    fn idle_reasons_split_the_idle_hours() {
        let dir = tempfile::tempdir().unwrap();
        simulate_on(&small_with_cordon(), dir.path(), 2, &mut |_| {}).unwrap();
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
    #[test]
    fn node_versions_are_observed_at_their_change() {
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
        let cfg = small_with_cordon();
        let dir = tempfile::tempdir().unwrap();
        simulate_on(&cfg, dir.path(), 1, &mut |_| {}).unwrap();
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
}
