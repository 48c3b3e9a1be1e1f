//! The collector's own metrics, rendered as Prometheus text for `/metrics`.
//!
//! Counters are plain maps behind one mutex: updates come a few times per scrape interval, far
//! below where lock contention matters, and a map keeps the label sets open-ended (endpoints
//! come and go with discovery).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use gpuledger_telemetry::Exposition;

/// Shared by every task of the collector.
#[derive(Default)]
pub struct Metrics {
    inner: Mutex<Inner>,
    ready: AtomicBool,
}

#[derive(Default)]
struct Inner {
    scrapes: BTreeMap<(String, &'static str), u64>,
    scrape_seconds_sum: BTreeMap<String, f64>,
    scrape_seconds_last: BTreeMap<String, f64>,
    scrape_samples_last: BTreeMap<String, u64>,
    last_success_ms: BTreeMap<String, i64>,
    endpoints: BTreeMap<String, bool>,
    watch_restarts: BTreeMap<(String, &'static str), u64>,
    watch_versions: BTreeMap<String, u64>,
    watch_state: BTreeMap<String, &'static str>,
    rejected: BTreeMap<(String, &'static str), u64>,
    rows_buffered: BTreeMap<&'static str, u64>,
    rows_written: BTreeMap<&'static str, u64>,
    wal_bytes: u64,
    wal_appends: u64,
    /// WAL segment -> time of its first append, while it is not in the store.
    unflushed_since: BTreeMap<u64, i64>,
    flushes: BTreeMap<&'static str, u64>,
    last_flush_ms: Option<i64>,
}

/// Why a watch started over.
pub mod restart {
    /// The connection ended or failed; resumed from the last resourceVersion.
    pub const RESUMED: &str = "resumed";
    /// The API server no longer had the position (410 Gone): listed again.
    pub const RELISTED: &str = "relisted";
    /// Listing or watching failed; retried after a backoff.
    pub const FAILED: &str = "failed";
}

impl Metrics {
    fn with<R>(&self, f: impl FnOnce(&mut Inner) -> R) -> R {
        let mut g = self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&mut g)
    }

    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::SeqCst);
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst)
    }

    pub fn endpoint_added(&self, endpoint: &str) {
        self.with(|m| m.endpoints.insert(endpoint.to_owned(), true));
    }

    pub fn endpoint_removed(&self, endpoint: &str) {
        self.with(|m| m.endpoints.insert(endpoint.to_owned(), false));
    }

    pub fn scrape_ok(&self, endpoint: &str, seconds: f64, samples: u64, now_ms: i64) {
        self.with(|m| {
            *m.scrapes.entry((endpoint.to_owned(), "ok")).or_default() += 1;
            *m.scrape_seconds_sum.entry(endpoint.to_owned()).or_default() += seconds;
            m.scrape_seconds_last.insert(endpoint.to_owned(), seconds);
            m.scrape_samples_last.insert(endpoint.to_owned(), samples);
            m.last_success_ms.insert(endpoint.to_owned(), now_ms);
        });
    }

    pub fn scrape_failed(&self, endpoint: &str, seconds: f64) {
        self.with(|m| {
            *m.scrapes.entry((endpoint.to_owned(), "failed")).or_default() += 1;
            *m.scrape_seconds_sum.entry(endpoint.to_owned()).or_default() += seconds;
            m.scrape_seconds_last.insert(endpoint.to_owned(), seconds);
        });
    }

    pub fn watch_restart(&self, resource: &str, reason: &'static str) {
        self.with(|m| *m.watch_restarts.entry((resource.to_owned(), reason)).or_default() += 1);
    }

    pub fn watch_versions(&self, resource: &str, n: u64) {
        self.with(|m| *m.watch_versions.entry(resource.to_owned()).or_default() += n);
    }

    /// `listing`, `watching`, `waiting` (backoff), `absent` (not served by this cluster).
    pub fn watch_state(&self, resource: &str, state: &'static str) {
        self.with(|m| m.watch_state.insert(resource.to_owned(), state));
    }

    /// True once every watch has listed at least once (or found its resource absent).
    pub fn watches_synced(&self) -> bool {
        self.with(|m| m.watch_state.values().all(|s| matches!(*s, "watching" | "absent")))
    }

    pub fn rejected(&self, source: &str, error_type: &'static str, n: u64) {
        self.with(|m| *m.rejected.entry((source.to_owned(), error_type)).or_default() += n);
    }

    /// Rows made durable in WAL segment `segment`.
    pub fn appended(&self, segment: u64, rows: &BTreeMap<&'static str, u64>, bytes: u64, now_ms: i64) {
        self.with(|m| {
            for (t, n) in rows {
                *m.rows_buffered.entry(t).or_default() += n;
            }
            m.wal_bytes += bytes;
            m.wal_appends += 1;
            m.unflushed_since.entry(segment).or_insert(now_ms);
        });
    }

    /// Segment `segment` (holding `rows`) is in the store; `written` of them were new.
    pub fn flushed(&self, segment: u64, rows: &BTreeMap<&'static str, u64>, written: &BTreeMap<&'static str, u64>, wal_bytes: u64, now_ms: i64) {
        self.with(|m| {
            for (t, n) in rows {
                let b = m.rows_buffered.entry(t).or_default();
                *b = b.saturating_sub(*n);
            }
            for (t, n) in written {
                *m.rows_written.entry(t).or_default() += n;
            }
            m.unflushed_since.remove(&segment);
            m.wal_bytes = wal_bytes;
            *m.flushes.entry("ok").or_default() += 1;
            m.last_flush_ms = Some(now_ms);
        });
    }

    pub fn flush_failed(&self) {
        self.with(|m| *m.flushes.entry("failed").or_default() += 1);
    }

    /// Prometheus text exposition (version 0.0.4) of everything above.
    pub fn render(&self, now_ms: i64) -> String {
        let mut out = Exposition::new();
        let ready = self.is_ready();
        self.with(|m| {
            let secs = |ms: i64| ms as f64 / 1000.0;
            family(&mut out, "gpuledger_ready", "gauge", "1 once the WAL is replayed and every watch has listed", [(Vec::new(), f64::from(u8::from(ready)))]);
            family(&mut out, "gpuledger_scrapes_total", "counter", "DCGM exporter scrapes by endpoint and result", m.scrapes.iter().map(|((e, r), n)| (labels(&[("endpoint", e), ("result", r)]), *n as f64)));
            family(&mut out, "gpuledger_scrape_duration_seconds_sum", "counter", "Total time spent scraping each endpoint", m.scrape_seconds_sum.iter().map(|(e, s)| (labels(&[("endpoint", e)]), *s)));
            family(&mut out, "gpuledger_scrape_duration_seconds", "gauge", "Duration of the last scrape of each endpoint", m.scrape_seconds_last.iter().map(|(e, s)| (labels(&[("endpoint", e)]), *s)));
            family(&mut out, "gpuledger_scrape_samples", "gauge", "Samples in the last successful scrape of each endpoint", m.scrape_samples_last.iter().map(|(e, n)| (labels(&[("endpoint", e)]), *n as f64)));
            family(&mut out, "gpuledger_scrape_staleness_seconds", "gauge", "Seconds since the last successful scrape of each endpoint", m.last_success_ms.iter().map(|(e, t)| (labels(&[("endpoint", e)]), secs(now_ms - t))));
            family(&mut out, "gpuledger_endpoint_up", "gauge", "1 while an endpoint is scraped (listed or discovered), 0 once it went away", m.endpoints.iter().map(|(e, up)| (labels(&[("endpoint", e)]), f64::from(u8::from(*up)))));
            family(&mut out, "gpuledger_watch_restarts_total", "counter", "Watches started over, by resource and reason (resumed, relisted, failed)", m.watch_restarts.iter().map(|((r, why), n)| (labels(&[("resource", r), ("reason", why)]), *n as f64)));
            family(&mut out, "gpuledger_watch_object_versions_total", "counter", "Object versions recorded, by resource", m.watch_versions.iter().map(|(r, n)| (labels(&[("resource", r)]), *n as f64)));
            let states = ["listing", "watching", "waiting", "absent"];
            family(&mut out, "gpuledger_watch_state", "gauge", "Current state of each watch (1 for the state it is in)", m.watch_state.iter().flat_map(|(r, cur)| states.iter().map(move |s| (labels(&[("resource", r), ("state", s)]), f64::from(u8::from(cur == s))))));
            family(&mut out, "gpuledger_rejected_total", "counter", "Input rejected (bad lines, objects, bodies), by source and reason", m.rejected.iter().map(|((s, t), n)| (labels(&[("source", s), ("reason", t)]), *n as f64)));
            family(&mut out, "gpuledger_rows_buffered", "gauge", "Rows in the WAL not yet in the store, by table", m.rows_buffered.iter().map(|(t, n)| (labels(&[("table", t)]), *n as f64)));
            family(&mut out, "gpuledger_rows_written_total", "counter", "Rows written to the store's Parquet files, by table", m.rows_written.iter().map(|(t, n)| (labels(&[("table", t)]), *n as f64)));
            family(&mut out, "gpuledger_wal_bytes", "gauge", "Bytes of WAL segments on disk", [(Vec::new(), m.wal_bytes as f64)]);
            family(&mut out, "gpuledger_wal_appends_total", "counter", "Fsynced WAL appends", [(Vec::new(), m.wal_appends as f64)]);
            family(&mut out, "gpuledger_flush_lag_seconds", "gauge", "Age of the oldest WAL record not yet in the store (0 when none)", [(Vec::new(), m.unflushed_since.values().min().map_or(0.0, |t| secs(now_ms - t)))]);
            family(&mut out, "gpuledger_flushes_total", "counter", "WAL -> Parquet flushes by result", m.flushes.iter().map(|(r, n)| (labels(&[("result", r)]), *n as f64)));
            if let Some(t) = m.last_flush_ms {
                family(&mut out, "gpuledger_last_flush_timestamp_seconds", "gauge", "When the last flush finished", [(Vec::new(), secs(t))]);
            }
        });
        out.finish()
    }
}

/// One family through the shared writer; each row is its labels and value.
fn family<'a>(out: &mut Exposition, name: &str, kind: &str, help: &str, rows: impl IntoIterator<Item = (Vec<(&'a str, &'a str)>, f64)>) {
    out.header(name, kind, help);
    for (labels, v) in rows {
        out.sample(name, &labels, v);
    }
}

fn labels<'a>(pairs: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    pairs.to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_is_prometheus_text_the_ingest_parser_reads() {
        let m = Metrics::default();
        m.scrape_ok("http://10.0.0.1:9400/metrics", 0.25, 120, 10_000);
        m.scrape_failed("http://a\"b\\c:9400/metrics", 2.0);
        m.watch_restart("pods", restart::RELISTED);
        m.appended(7, &BTreeMap::from([("gpu_samples", 8)]), 4096, 9_000);
        let text = m.render(12_000);
        // Our own exposition reader must take every line of it (labels with quotes included).
        let mut tables = crate::tables::samples::SampleTables::new();
        let mut diags = crate::diag::Diagnostics::new();
        use crate::sources::{DcgmText, Origin, Source};
        let (mut source, origin) = (DcgmText::scrape(), Origin::fetched(std::path::Path::new("metrics"), 12_000));
        let records = source.parse(text.as_bytes(), &origin, &mut diags);
        let lines = records.lines;
        let loaded = source.load(records, &mut tables, &origin, &mut diags);
        assert!(diags.errors.is_empty(), "{:?}", diags.errors);
        assert_eq!(loaded.samples, lines);
        assert!(text.contains("gpuledger_scrapes_total{endpoint=\"http://10.0.0.1:9400/metrics\",result=\"ok\"} 1\n"), "{text}");
        assert!(text.contains("endpoint=\"http://a\\\"b\\\\c:9400/metrics\",result=\"failed\"} 1\n"), "{text}");
        assert!(text.contains("gpuledger_rows_buffered{table=\"gpu_samples\"} 8\n"));
        assert!(text.contains("gpuledger_flush_lag_seconds 3\n"), "{text}");
        assert!(text.contains("gpuledger_scrape_staleness_seconds{endpoint=\"http://10.0.0.1:9400/metrics\"} 2\n"));
        m.flushed(7, &BTreeMap::from([("gpu_samples", 8)]), &BTreeMap::from([("gpu_samples", 8)]), 0, 13_000);
        let text = m.render(14_000);
        assert!(text.contains("gpuledger_rows_buffered{table=\"gpu_samples\"} 0\n"));
        assert!(text.contains("gpuledger_rows_written_total{table=\"gpu_samples\"} 8\n"));
        assert!(text.contains("gpuledger_flush_lag_seconds 0\n"));
    }
}
