//! Scrapes: one task per endpoint, each on its own ticker, so a slow or dead endpoint only ever
//! delays itself. DCGM exporters come from the config and, when enabled, from the exporter pods
//! the API server lists; pods exposing unit counters from the same lists ([`super::units`]).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::MissedTickBehavior;

use super::metrics::Metrics;
use super::units::{PodRef, parse_counters};
use super::writer::Msg;
use crate::diag::Diagnostics;
use crate::sources::{DcgmText, Origin, Source};
use crate::tables::samples::SampleTables;

/// The `source` field of the scrape loop's log events: the name of the source it reads with.
const SOURCE: &str = "dcgm_scrape";
/// The same for the scrapes of pods' unit counters.
const UNIT_SOURCE: &str = "unit_scrape";

/// Largest body read from an exporter (a DCGM exporter of 8 GPUs writes about 100 KiB).
const MAX_BODY: usize = 64 << 20;

/// Everything a scrape task needs besides its endpoint.
#[derive(Clone)]
pub struct ScrapeContext {
    pub http: reqwest::Client,
    pub interval: Duration,
    pub timeout: Duration,
    pub tx: mpsc::Sender<Msg>,
    pub metrics: Arc<Metrics>,
    pub stop: watch::Receiver<bool>,
    /// The counters kept from the pods scraped for units.
    pub unit_metrics: Arc<BTreeSet<String>>,
}

/// What an endpoint serves, and so how its answer is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Serves {
    /// A DCGM exporter: every sample is kept.
    Exporter,
    /// A pod's own metrics: only the unit counters, with the pod's labels.
    Pod(PodRef),
}

/// Starts scraping `endpoint` until `stop` turns true or the task is aborted.
pub fn spawn(endpoint: String, serves: Serves, ctx: ScrapeContext) -> JoinHandle<()> {
    ctx.metrics.endpoint_added(&endpoint);
    tokio::spawn(scrape_loop(endpoint, serves, ctx))
}

async fn scrape_loop(endpoint: String, serves: Serves, mut ctx: ScrapeContext) {
    let source = match serves {
        Serves::Exporter => SOURCE,
        Serves::Pod(_) => UNIT_SOURCE,
    };
    let mut ticker = tokio::time::interval(ctx.interval);
    // A scrape that overran its slot is not made up for: the next one waits for its own slot.
    ticker.set_missed_tick_behavior(MissedTickBehavior::Skip);
    let mut failing = false;
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = ctx.stop.changed() => break,
        }
        if *ctx.stop.borrow() {
            break;
        }
        let started_ms = super::now_ms();
        let t0 = Instant::now();
        let result = tokio::select! {
            r = fetch(&ctx.http, &endpoint, ctx.timeout) => r,
            _ = ctx.stop.changed() => break,
        };
        let seconds = t0.elapsed().as_secs_f64();
        let outcome = result.and_then(|body| match &serves {
            Serves::Exporter => parse(&endpoint, &body, started_ms, &ctx.metrics),
            Serves::Pod(pod) => parse_counters(&endpoint, &body, started_ms, pod, &ctx.unit_metrics, &ctx.metrics),
        });
        match outcome {
            Ok((batches, samples)) => {
                if failing {
                    tracing::info!(source = source, endpoint = %endpoint, "scraping again");
                    failing = false;
                }
                // Counted only once the writer has it; a full queue makes this scrape wait, not others.
                if ctx.tx.send(Msg::Data { batches, position: None, durable: None }).await.is_err() {
                    break;
                }
                ctx.metrics.scrape_ok(&endpoint, seconds, samples, super::now_ms());
            }
            Err(reason) => {
                ctx.metrics.scrape_failed(&endpoint, seconds);
                if !failing {
                    tracing::warn!(source = source, endpoint = %endpoint, reason = %reason, "scrape failed");
                    failing = true;
                }
            }
        }
    }
}

async fn fetch(http: &reqwest::Client, endpoint: &str, timeout: Duration) -> Result<Vec<u8>, String> {
    let resp = http.get(endpoint).timeout(timeout).send().await.map_err(|e| describe(&e, timeout))?;
    let status = resp.status();
    if !status.is_success() {
        return Err(format!("HTTP {status}"));
    }
    let mut resp = resp;
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| describe(&e, timeout))? {
        if body.len() + chunk.len() > MAX_BODY {
            return Err(format!("body larger than {} MiB", MAX_BODY >> 20));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

fn describe(e: &reqwest::Error, timeout: Duration) -> String {
    if e.is_timeout() {
        format!("no complete answer within {}", super::config::format_duration(timeout))
    } else if e.is_connect() {
        "connection refused or unreachable".to_owned()
    } else {
        super::error_chain(e)
    }
}

/// Body -> table batches. A body with no sample at all (an HTML error page, garbage) is a
/// failed scrape; bad lines in an otherwise good body are counted and the rest kept.
fn parse(endpoint: &str, body: &[u8], scraped_ms: i64, metrics: &Metrics) -> Result<(Vec<crate::tables::TableBatch>, u64), String> {
    let mut source = DcgmText::scrape();
    let origin = Origin::fetched(Path::new(endpoint), scraped_ms);
    let mut diags = Diagnostics::new();
    let records = source.parse(body, &origin, &mut diags);
    count_rejected(endpoint, records.samples(), records.rejected, &diags, metrics)?;
    if let Some(first) = diags.errors.first() {
        tracing::warn!(source = source.name(), endpoint = %endpoint, rejected = records.rejected, first = %first, "lines rejected");
    }
    let mut tables = SampleTables::new();
    let loaded = source.load(records, &mut tables, &origin, &mut diags);
    let batches = tables.take_batches().map_err(|e| e.to_string())?;
    Ok((batches, loaded.samples))
}

/// Counts a body's rejected lines in `/metrics` by reason. A body with rejected lines and not
/// one sample (an HTML error page, garbage) is not exposition text at all: a failed scrape.
pub(super) fn count_rejected(endpoint: &str, samples: usize, rejected: u64, diags: &Diagnostics, metrics: &Metrics) -> Result<(), String> {
    for (t, n) in diags.error_counts() {
        metrics.rejected(endpoint, t, n);
    }
    if samples == 0 && rejected > 0 {
        let first = diags.errors.first().map(|d| d.to_string()).unwrap_or_default();
        return Err(format!("not Prometheus text ({rejected} lines rejected; first: {first})"));
    }
    Ok(())
}

/// The host part of a scrape URL for `pod` (an IPv6 address in brackets), if it can be
/// scraped: running, not being deleted, with an address.
pub(super) fn running_pod_host(pod: &Value) -> Option<String> {
    let status = pod.get("status")?;
    let running = status.get("phase").and_then(Value::as_str) == Some("Running");
    let deleting = pod.pointer("/metadata/deletionTimestamp").is_some();
    let ip = status.get("podIP").and_then(Value::as_str).filter(|ip| !ip.is_empty())?;
    (running && !deleting).then(|| if ip.contains(':') { format!("[{ip}]") } else { ip.to_owned() })
}

/// The exporter URLs the API server lists right now: running pods matching `selector`.
pub fn endpoints_from_pod_list(list: &Value, port: u16) -> BTreeMap<String, Serves> {
    list.get("items")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(running_pod_host)
        .map(|host| (format!("http://{host}:{port}/metrics"), Serves::Exporter))
        .collect()
}

/// Keeps one scrape task per endpoint: the static ones for the whole run, discovered ones
/// while their pod runs.
pub struct Scrapers {
    ctx: ScrapeContext,
    running: BTreeMap<String, (Serves, JoinHandle<()>)>,
    fixed: BTreeSet<String>,
    /// What the log calls the endpoints found: "an exporter", "a unit pod".
    what: &'static str,
}

impl Scrapers {
    /// DCGM exporters: the `fixed` ones for the whole run, discovered ones added by
    /// [`Scrapers::update`].
    pub fn new(ctx: ScrapeContext, fixed: &[String]) -> Scrapers {
        let mut s = Scrapers { ctx, running: BTreeMap::new(), fixed: fixed.iter().cloned().collect(), what: "an exporter" };
        for e in fixed {
            if !s.running.contains_key(e) {
                tracing::info!(source = SOURCE, endpoint = %e, every = %super::config::format_duration(s.ctx.interval), "scraping");
                s.running.insert(e.clone(), (Serves::Exporter, spawn(e.clone(), Serves::Exporter, s.ctx.clone())));
            }
        }
        s
    }

    /// Pods scraped for unit counters, all discovered.
    pub fn unit_pods(ctx: ScrapeContext) -> Scrapers {
        Scrapers { ctx, running: BTreeMap::new(), fixed: BTreeSet::new(), what: "a unit pod" }
    }

    /// Makes the discovered set `found`: starts new endpoints, stops vanished ones. An endpoint
    /// whose pod changed (a new pod got the old one's address) starts over as the new one's.
    pub fn update(&mut self, found: &BTreeMap<String, Serves>) {
        let changed: Vec<String> = self.running.iter().filter(|(e, (s, _))| found.get(*e).is_some_and(|f| f != s)).map(|(e, _)| e.clone()).collect();
        for e in changed {
            self.stop(&e, "its pod changed");
        }
        for (e, serves) in found {
            if !self.running.contains_key(e) {
                match serves {
                    Serves::Pod(p) => tracing::info!(source = SOURCE, endpoint = %e, namespace = %p.namespace, pod = %p.pod, "discovered {}", self.what),
                    Serves::Exporter => tracing::info!(source = SOURCE, endpoint = %e, "discovered {}", self.what),
                }
                self.running.insert(e.clone(), (serves.clone(), spawn(e.clone(), serves.clone(), self.ctx.clone())));
            }
        }
        let gone: Vec<String> = self.running.keys().filter(|e| !found.contains_key(*e) && !self.fixed.contains(*e)).cloned().collect();
        for e in gone {
            self.stop(&e, "went away");
        }
    }

    fn stop(&mut self, endpoint: &str, why: &str) {
        tracing::info!(source = SOURCE, endpoint = %endpoint, "{} {why}", self.what);
        if let Some((_, h)) = self.running.remove(endpoint) {
            h.abort();
        }
        self.ctx.metrics.endpoint_removed(endpoint);
    }

    /// Waits for every task (after `stop` was signalled).
    pub async fn join(self) {
        for (_, (_, h)) in self.running {
            let _ = h.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_events_name_the_source_the_loop_reads_with() {
        assert_eq!(DcgmText::scrape().name(), SOURCE);
    }

    #[test]
    fn only_running_pods_with_an_ip_are_scraped() {
        let list = serde_json::json!({"items": [
            {"metadata": {"name": "a"}, "status": {"phase": "Running", "podIP": "10.0.0.5"}},
            {"metadata": {"name": "b"}, "status": {"phase": "Pending", "podIP": "10.0.0.6"}},
            {"metadata": {"name": "c"}, "status": {"phase": "Running"}},
            {"metadata": {"name": "d", "deletionTimestamp": "2026-01-01T00:00:00Z"}, "status": {"phase": "Running", "podIP": "10.0.0.7"}},
            {"metadata": {"name": "e"}, "status": {"phase": "Running", "podIP": "fd00::8"}}
        ]});
        let got: Vec<String> = endpoints_from_pod_list(&list, 9400).into_keys().collect();
        assert_eq!(got, ["http://10.0.0.5:9400/metrics", "http://[fd00::8]:9400/metrics"]);
    }

    #[test]
    fn a_body_without_any_sample_is_a_failed_scrape() {
        let m = Metrics::default();
        let err = parse("http://x/metrics", b"<html>502 Bad Gateway</html>\n", 1_000, &m).unwrap_err();
        assert!(err.contains("not Prometheus text"), "{err}");
        let (batches, n) = parse("http://x/metrics", b"DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",UUID=\"GPU-1\",Hostname=\"h\"} 50\nbroken line\n", 1_000, &m).unwrap();
        assert_eq!(n, 1);
        assert!(!batches.is_empty());
        assert!(m.render(2_000).contains("gpuledger_rejected_total{source=\"http://x/metrics\""));
    }
}
