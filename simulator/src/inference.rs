//! The vLLM inference fleet's counters, as Prometheus scraped them from the servers' pods.
//!
//! Each pod of a [`Units::VllmCounters`] job runs a vLLM server that generates tokens while its
//! container runs and is not idle, at a rate of its own, and finishes requests (on `stop`,
//! `length`, `abort`, `error`) in proportion. Prometheus scrapes the pod every scrape interval
//! (at an offset of its own) from the capture's start, and the capture holds
//! `vllm:generation_tokens_total` and `vllm:request_success_total` with the `namespace` and `pod`
//! labels its Kubernetes discovery adds, in `inference/<YYYY-MM-DD>.prom`, each sample with its
//! timestamp. A container that crashes and restarts starts its counters again from zero.
//!
//! The accepted units the ledger owes for these samples (docs/accounting.md "Counter units", for
//! the simulator's `[[units.counters]]`: tokens per million, requests finished on `stop` or
//! `length`) are worked out here from the values as written, by the rule itself: per series, an
//! increase counts at the later sample; a decrease is a restart, counted from the new value; a
//! series' first sample counts from zero only when its pod started after the capture's first
//! DCGM observation.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::cluster::{Cluster, Timeline, tag};
use crate::error::Result;
use crate::out::{MS_PER_DAY, day_string, month_string, push_u64};
use crate::rng::Rng;
use crate::schedule::{Pod, Sim, Units, run_team, TEMPLATES};
use crate::sink::DcgmSink;
use crate::window::Window;

/// The unit of the tokens counter (scale 1e-6) and of the finished requests (`stop`, `length`).
pub const TOKENS_UNIT: &str = "1M-tokens";
pub const REQUESTS_UNIT: &str = "requests";
/// Finished reasons vLLM counts requests under, with the share of requests finishing so; only
/// `stop` and `length` are accepted.
const REASONS: [(&str, f64, bool); 4] = [("stop", 0.90, true), ("length", 0.07, true), ("abort", 0.025, false), ("error", 0.005, false)];
/// Series per pod: tokens, then one per finished reason.
const SERIES: usize = 1 + REASONS.len();

/// What the written counters owe, by the accounting's rule.
#[derive(Debug, Default)]
pub struct Counted {
    /// (month, team) -> (tokens, accepted requests): the increases counted, summed.
    pub units: BTreeMap<(String, String), (u64, u64)>,
    /// Per job: a sample of its pods was written (its run's units are the counters', not the
    /// default one per run).
    pub counted_jobs: Vec<bool>,
    /// Samples in the whole capture, and of them those written (inside the window).
    pub samples: u64,
    pub emitted_samples: u64,
    /// Decreases of a series in the capture: a container restart, counted from the new value.
    pub resets: u64,
    pub files: u64,
    pub bytes: u64,
}

/// One vLLM pod: when its container runs, how fast it generates, and its series' state.
struct Server {
    pod: usize,
    team: String,
    /// Container runs, ms, half-open: from start (or restart) to the crash (or the end).
    runs: Vec<(i64, i64)>,
    tokens_per_s: f64,
    tokens_per_request: f64,
    offset_ms: i64,
    /// The first sample counts from zero: the pod started after the capture's first observation.
    started_inside: bool,
    heads: [Vec<u8>; SERIES],
    last: [Option<u64>; SERIES],
}

fn is_vllm(sim: &Sim, p: &Pod) -> bool {
    let job = &sim.jobs[p.job as usize];
    TEMPLATES.iter().any(|t| matches!(t.units, Units::VllmCounters) && t.image == job.image)
}

/// Milliseconds of `[a, b)` outside the pod's idle stretches.
fn active_ms(p: &Pod, a: i64, b: i64) -> i64 {
    let idle: i64 = p.idle.iter().map(|&(i0, i1)| (b.min(i1) - a.max(i0)).max(0)).sum();
    (b - a) - idle
}

/// The capture's first DCGM observation: the ledger's start of observation (its
/// `observed_extent`), before which a counter's value is not this capture's.
fn first_observation_ms(cl: &Cluster, tl: &Timeline) -> i64 {
    cl.nodes
        .iter()
        .filter_map(|n| n.present.iter().position(|&p| p).map(|k| tl.start_ms() + n.scrape_offset_ms + k as i64 * tl.interval_ms))
        .min()
        .unwrap_or(i64::MAX)
}

fn servers(seed: u64, cl: &Cluster, tl: &Timeline, sim: &Sim) -> Vec<Server> {
    let first_ms = first_observation_ms(cl, tl);
    let mut out = Vec::new();
    for (pi, p) in sim.pods.iter().enumerate() {
        if p.cancelled || p.started_s == i64::MAX || !is_vllm(sim, p) {
            continue;
        }
        let job = &sim.jobs[p.job as usize];
        let (start, end) = (p.started_s * 1000, p.end_s.saturating_mul(1000));
        let runs = match p.crash {
            Some((crash, restart)) => vec![(start, crash * 1000), (restart * 1000, end)],
            None => vec![(start, end)],
        };
        let mut rng = Rng::stream(seed, tag::INFERENCE, pi as u64);
        let model = if job.name.starts_with("llm-serve-code") { "Qwen/Qwen2.5-Coder-32B-Instruct" } else { "meta-llama/Llama-3.1-70B-Instruct" };
        let labels = format!("engine=\"0\",instance=\"{}:8000\",job=\"vllm\",model_name=\"{model}\",namespace=\"{}\",pod=\"{}\"", p.ip, crate::cluster::NAMESPACES[job.ns].name, p.name);
        let head = |metric: &str, extra: &str| format!("{metric}{{{extra}{labels}}} ").into_bytes();
        let heads = [
            head("vllm:generation_tokens_total", ""),
            head("vllm:request_success_total", "finished_reason=\"stop\","),
            head("vllm:request_success_total", "finished_reason=\"length\","),
            head("vllm:request_success_total", "finished_reason=\"abort\","),
            head("vllm:request_success_total", "finished_reason=\"error\","),
        ];
        // Kubernetes' startTime (the kubelet took the pod: a second after scheduling) is the
        // pod's start the ledger compares with the capture's.
        let pod_started_ms = (p.sched_s + 1) * 1000;
        out.push(Server {
            pod: pi,
            team: run_team(job).to_string(),
            runs,
            tokens_per_s: f64::from(job.per_pod) * rng.uniform(900.0, 2600.0),
            tokens_per_request: rng.uniform(220.0, 480.0),
            offset_ms: rng.range(0, tl.interval_ms - 1),
            started_inside: pod_started_ms > first_ms,
            heads,
            last: [None; SERIES],
        });
    }
    out
}

impl Server {
    /// The series' values at `t`, or `None` when no container runs then (nothing to scrape).
    fn values(&self, p: &Pod, t: i64) -> Option<[u64; SERIES]> {
        let &(run_start, _) = self.runs.iter().find(|&&(a, b)| a <= t && t < b)?;
        let tokens = self.tokens_per_s * active_ms(p, run_start, t) as f64 / 1000.0;
        let requests = tokens / self.tokens_per_request;
        let mut v = [tokens.floor() as u64, 0, 0, 0, 0];
        for (i, (_, share, _)) in REASONS.iter().enumerate() {
            v[1 + i] = (requests * share).floor() as u64;
        }
        Some(v)
    }
}

/// Writes the fleet's counters for `window` (one file per UTC day, an hour's scrapes at a time)
/// and works out, for the whole capture, what they owe.
pub fn write(seed: u64, cl: &Cluster, tl: &Timeline, sim: &Sim, window: &Window, sink: &mut dyn DcgmSink) -> Result<Counted> {
    let mut servers = servers(seed, cl, tl, sim);
    let mut counted = Counted { counted_jobs: vec![false; sim.jobs.len()], ..Counted::default() };
    if servers.is_empty() {
        return Ok(counted);
    }
    let iv = tl.interval_ms;
    let end_ms = tl.start_ms() + tl.scrapes as i64 * iv;
    let mut day_start = tl.start_ms().div_euclid(MS_PER_DAY) * MS_PER_DAY;
    let mut lines: Vec<(i64, usize, usize, u64)> = Vec::new();
    while day_start < end_ms {
        let rel = PathBuf::from("inference").join(format!("{}.prom", day_string(day_start)));
        let mut wrote = false;
        for hour in 0..24 {
            let (h0, h1) = (day_start + hour * 3_600_000, day_start + (hour + 1) * 3_600_000);
            lines.clear();
            for (si, s) in servers.iter_mut().enumerate() {
                let p = &sim.pods[s.pod];
                let (first, last) = (s.runs[0].0, s.runs.last().map_or(0, |r| r.1));
                if last <= h0 || first >= h1 {
                    continue;
                }
                // Scrape k of this pod is at start + offset + k x interval.
                let k0 = (h0.max(tl.start_ms()) - tl.start_ms() - s.offset_ms + iv - 1).div_euclid(iv).max(0);
                let mut t = tl.start_ms() + s.offset_ms + k0 * iv;
                while t < h1 && t < end_ms {
                    if let Some(v) = s.values(p, t) {
                        let team = &s.team;
                        let month = month_string(t);
                        let mut owed = (0u64, 0u64);
                        for i in 0..SERIES {
                            // The accounting's rule, on the value as written.
                            let inc = match s.last[i] {
                                None if s.started_inside => v[i],
                                None => 0,
                                Some(prev) if v[i] >= prev => v[i] - prev,
                                Some(_) => {
                                    counted.resets += 1;
                                    v[i]
                                }
                            };
                            s.last[i] = Some(v[i]);
                            match i {
                                0 => owed.0 += inc,
                                _ if REASONS[i - 1].2 => owed.1 += inc,
                                _ => {}
                            }
                            if window.contains_ms(t) {
                                lines.push((t, si, i, v[i]));
                                counted.emitted_samples += 1;
                            }
                        }
                        let e = counted.units.entry((month, team.clone())).or_default();
                        e.0 += owed.0;
                        e.1 += owed.1;
                        counted.counted_jobs[p.job as usize] = true;
                        counted.samples += SERIES as u64;
                    }
                    t += iv;
                }
            }
            if lines.is_empty() {
                continue;
            }
            lines.sort_unstable();
            let mut text = Vec::with_capacity(lines.len() * 200);
            if !wrote {
                text.extend_from_slice(b"# TYPE vllm:generation_tokens_total counter\n# TYPE vllm:request_success_total counter\n");
            }
            for &(t, si, i, v) in &lines {
                text.extend_from_slice(&servers[si].heads[i]);
                push_u64(&mut text, v);
                text.push(b' ');
                push_u64(&mut text, t as u64);
                text.push(b'\n');
            }
            counted.bytes += text.len() as u64;
            sink.write(&rel, &text)?;
            wrote = true;
        }
        if wrote {
            sink.close(&rel)?;
            counted.files += 1;
        }
        day_start += MS_PER_DAY;
    }
    sink.finish()?;
    Ok(counted)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// The counter files read back as text: per series (its label block), its (time, value)
    /// samples in time order.
    fn read_series(dir: &std::path::Path) -> BTreeMap<String, Vec<(i64, u64)>> {
        let mut out: BTreeMap<String, Vec<(i64, u64)>> = BTreeMap::new();
        for e in std::fs::read_dir(dir.join("inference")).unwrap() {
            let text = std::fs::read_to_string(e.unwrap().path()).unwrap();
            for line in text.lines().filter(|l| !l.starts_with('#')) {
                let mut parts = line.rsplitn(3, ' ');
                let t: i64 = parts.next().unwrap().parse().unwrap();
                let v: u64 = parts.next().unwrap().parse().unwrap();
                out.entry(parts.next().unwrap().to_owned()).or_default().push((t, v));
            }
        }
        for v in out.values_mut() {
            v.sort();
        }
        out
    }

    /// A capture with a restart: every series is a vLLM pod's in the serving namespace, counts up
    /// except where its container restarted (the truth counts those resets), and the tokens the
    /// truth owes are those the written values give by the rule, recomputed here from the text.
    #[test]
    fn the_written_counters_give_the_units_the_truth_owes() {
        let cfg = crate::SimConfig { gpus: 16, days: 2, seed: 1234, scrape_interval_s: 60, start: "2026-10-31T06:00:00Z".parse().unwrap() };
        let dir = tempfile::tempdir().unwrap();
        crate::simulate(&cfg, dir.path(), &mut |_| {}).unwrap();
        let truth: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.path().join(crate::TRUTH_FILE)).unwrap()).unwrap();
        let series = read_series(dir.path());
        assert!(!series.is_empty());
        let mut decreases = 0;
        let mut tokens_without_first = 0u64;
        for (labels, samples) in &series {
            assert!(labels.contains("namespace=\"serving\",pod=\"llm-serve-"), "{labels}");
            for w in samples.windows(2) {
                assert!(w[1].0 > w[0].0, "{labels}: one sample per time");
                if w[1].1 < w[0].1 {
                    decreases += 1;
                }
                if labels.starts_with("vllm:generation_tokens_total{") {
                    tokens_without_first += if w[1].1 >= w[0].1 { w[1].1 - w[0].1 } else { w[1].1 };
                }
            }
        }
        assert!(decreases > 0, "a container restarted");
        assert_eq!(truth["counter_resets"].as_u64(), Some(decreases));
        // What the truth owes is the increases after each series' first sample, plus the first
        // samples of pods that started inside the capture: at least the former.
        let owed: f64 = truth["accepted_units"].as_array().unwrap().iter().filter(|u| u["unit"] == TOKENS_UNIT).map(|u| u["accepted_units"].as_f64().unwrap()).sum();
        let firsts: u64 = series.iter().filter(|(l, _)| l.starts_with("vllm:generation_tokens_total{")).map(|(_, s)| s[0].1).sum();
        let owed_tokens = (owed * 1e6).round() as u64;
        assert!(owed_tokens >= tokens_without_first && owed_tokens <= tokens_without_first + firsts, "{owed_tokens} vs {tokens_without_first} + at most {firsts}");
    }
}
