//! `prometheus_query_range` backfill: DCGM history that a Prometheus server already holds,
//! pulled through `/api/v1/query_range` into the store, so a cluster that had Prometheus before
//! it had gpuledger gets its past months into the ledger.
//!
//! ```text
//!  plan: [from, to] on the step grid -> chunks -> minus chunks already marked done
//!  per chunk: GET query_range (60 s timeout, retried with backoff) -> prometheus_api reader
//!             -> store.write_named("backfill-<key>-<start>-<end>") -> marker file
//! ```
//!
//! **The step grid.** Prometheus evaluates the selector at the instants `from + k * step` and
//! answers, for each instant, the newest sample of each series within its lookback window
//! (5 minutes by default), stamped with the instant, not with the scrape time. So rows land on
//! the grid; with `step` equal to the scrape interval and `from` on a scrape time every scrape
//! becomes exactly one row. `to` is inclusive: the last instant is the last grid point `<= to`.
//!
//! **Chunks.** One query per chunk keeps each answer within Prometheus' limit of 11,000 points
//! per series and bounds memory. Chunks are aligned to multiples of `chunk` on the grid (not
//! to `from`), so runs over different ranges cut the same chunks and recognise each other's work.
//! A chunk's query covers `[start, start + chunk - step]`, so neighbours never evaluate the same
//! instant.
//!
//! **Resumability.** After a chunk's Parquet files are in place, an empty marker file
//! `<store>/.backfill/<key>/<start>-<end>` says so (times in unix seconds, milliseconds after a
//! dot when not whole). `key` hashes what decides the rows: the selector, the step and the
//! grid's phase. A rerun skips marked instants without asking Prometheus. A crash between the
//! Parquet files and the marker is harmless: the chunk is asked again under the same file name,
//! and [`Store::write_named`] skips files that exist. Only a chunk whose range differs from the
//! interrupted one (a rerun with another `--to` cutting the last chunk elsewhere) could then
//! store some of the interrupted chunk's rows a second time.
//!
//! A chunk that fails (connection, HTTP status, Prometheus `status: error`, timeout) is retried,
//! then reported and counted; the run goes on with the next chunk and leaves no marker for it.

use std::fmt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use chrono::{DateTime, SecondsFormat};
use reqwest::Url;

use crate::backoff::Backoff;
use crate::diag::Diagnostics;
use crate::ingest::Progress;
use crate::sources::prometheus_api::ApiStats;
use crate::sources::{Origin, PrometheusApi, Source};
use crate::store::{Store, StoreOptions, StoreStats};
use gpuledger_store::StoreLocation;
use crate::tables::samples::SampleTables;

/// The selector used when none is given: every DCGM exporter field.
pub const DEFAULT_MATCH: &str = r#"{__name__=~"DCGM_.*"}"#;
/// Prometheus refuses a range query whose answer would hold more points per series than this.
pub const MAX_POINTS_PER_SERIES: i64 = 11_000;
/// Hidden directory under the store root holding the markers of finished chunks (hidden, so
/// Parquet readers that glob the store never see it).
pub const MARKER_DIR: &str = ".backfill";

/// What to backfill, from where, into which store.
#[derive(Debug, Clone)]
pub struct BackfillOptions {
    /// Prometheus base URL (`http://prometheus:9090`, a path prefix allowed); a URL already
    /// ending in `/api/v1/query_range` is used as it is.
    pub prometheus: String,
    /// First instant, unix milliseconds; it also fixes the grid's phase.
    pub from_ms: i64,
    /// Last instant (inclusive), unix milliseconds.
    pub to_ms: i64,
    /// Resolution of the query: one row per series every `step`.
    pub step: Duration,
    /// Time covered by one query.
    pub chunk: Duration,
    /// PromQL series selector (or any expression returning a matrix).
    pub selector: String,
    pub store: StoreLocation,
    pub store_options: StoreOptions,
    /// Limit for one HTTP request, answer included.
    pub request_timeout: Duration,
    /// Waits before the retries of a failed chunk; as many retries as entries.
    pub retry_delays: Vec<Duration>,
}

impl BackfillOptions {
    /// Options with the defaults: step 30 s, chunk 1 h, [`DEFAULT_MATCH`], 60 s per request,
    /// three retries after 1, 2 and 4 seconds.
    pub fn new(prometheus: impl Into<String>, from_ms: i64, to_ms: i64, store: StoreLocation) -> Self {
        BackfillOptions {
            prometheus: prometheus.into(),
            from_ms,
            to_ms,
            step: Duration::from_secs(30),
            chunk: Duration::from_secs(3600),
            selector: DEFAULT_MATCH.to_string(),
            store,
            store_options: StoreOptions::default(),
            request_timeout: Duration::from_secs(60),
            retry_delays: backoff(Duration::from_secs(1), 3),
        }
    }
}

/// `retries` delays starting at `first`, doubling each time (the collector's one
/// [`Backoff`], without jitter: the retries of one chunk are not in step with anyone's).
pub fn backoff(first: Duration, retries: u32) -> Vec<Duration> {
    Backoff::doubling(first).delays(retries)
}

/// Why a backfill could not run at all. (A chunk Prometheus did not answer is no error: it is
/// counted in [`BackfillSummary::failures`] and the run goes on.)
#[derive(Debug, thiserror::Error)]
pub enum BackfillError {
    /// `--from`/`--to` describe no instant.
    #[error("--to {to} is before --from {from}")]
    EmptyRange { from: String, to: String },
    /// A time Prometheus cannot be asked about.
    #[error("--from {from}: times before 1970 are not supported")]
    BeforeEpoch { from: String },
    /// `--step` or `--chunk` is not a positive whole number of milliseconds.
    #[error("--{flag} {value}: must be a positive whole number of milliseconds")]
    BadDuration { flag: &'static str, value: String },
    /// Chunks would not meet on the step grid.
    #[error("--chunk {chunk} is not a multiple of --step {step}: each chunk must hold whole steps so that neighbouring chunks meet on the step grid (try --chunk {suggestion})")]
    ChunkNotMultiple { chunk: String, step: String, suggestion: String },
    /// One chunk's query would exceed what Prometheus answers.
    #[error("--chunk {chunk} at --step {step} asks Prometheus for {points} points per series, more than the {MAX_POINTS_PER_SERIES} it answers in one query: use --chunk {max_chunk} or shorter, or a longer --step")]
    TooManyPoints { chunk: String, step: String, points: i64, max_chunk: String },
    /// The Prometheus URL is unusable.
    #[error("--prometheus {url:?}: {reason}")]
    Url { url: String, reason: String },
    /// The HTTP client could not be built (TLS setup).
    #[error("cannot set up the HTTP client: {0}")]
    Client(#[source] reqwest::Error),
    /// Opening or writing the store failed.
    #[error(transparent)]
    Store(#[from] crate::Error),
}

/// A run of grid instants, both ends included (unix milliseconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TimeRange {
    pub start_ms: i64,
    pub end_ms: i64,
}

impl fmt::Display for TimeRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}..{}", format_time(self.start_ms), format_time(self.end_ms))
    }
}

/// The chunks of a run, before the markers are looked at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Names this backfill's markers and files: 16 hex digits of xxh3 over selector, step and
    /// grid phase.
    pub key: String,
    pub step_ms: i64,
    pub chunks: Vec<TimeRange>,
}

/// A chunk given up after its retries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkFailure {
    pub range: TimeRange,
    pub attempts: u32,
    pub reason: String,
}

impl fmt::Display for ChunkFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tries = if self.attempts == 1 { "1 attempt".to_string() } else { format!("{} attempts", self.attempts) };
        write!(f, "chunk {} failed after {tries}: {}", self.range, self.reason)
    }
}

/// What a backfill asked, read, wrote and gave up on.
#[derive(Debug, Default, Clone)]
pub struct BackfillSummary {
    pub key: String,
    /// Chunks in the plan.
    pub chunks: u64,
    /// Chunks queried and stored in this run (wholly or their unmarked part).
    pub done: u64,
    /// Chunks already marked done by an earlier run: not queried.
    pub skipped: u64,
    pub failures: Vec<ChunkFailure>,
    /// HTTP requests sent, retries included.
    pub requests: u64,
    /// Series in the answers, summed over queries (a series spanning three chunks counts 3).
    pub series: u64,
    /// The most series one query answered.
    pub max_series: u64,
    /// Points read (one value of one series at one instant).
    pub samples: u64,
    /// Of those, DCGM blank sentinels stored as null.
    pub blank_samples: u64,
    /// Points rejected by the reader (see `diagnostics`).
    pub rejected: u64,
    pub diagnostics: Diagnostics,
    pub store: StoreStats,
    pub elapsed: Duration,
}

/// Checks the flags and cuts `[from, to]` into chunks (see the module doc for the rules).
pub fn plan(opts: &BackfillOptions) -> Result<Plan, BackfillError> {
    let step_ms = whole_ms("step", opts.step)?;
    let chunk_ms = whole_ms("chunk", opts.chunk)?;
    let chunks = plan_chunks(opts.from_ms, opts.to_ms, step_ms, chunk_ms)?;
    Ok(Plan { key: backfill_key(&opts.selector, step_ms, opts.from_ms.rem_euclid(step_ms)), step_ms, chunks })
}

fn whole_ms(flag: &'static str, d: Duration) -> Result<i64, BackfillError> {
    let ms = i64::try_from(d.as_millis()).unwrap_or(0);
    if ms <= 0 || !d.subsec_nanos().is_multiple_of(1_000_000) {
        return Err(BackfillError::BadDuration { flag, value: format!("{d:?}") });
    }
    Ok(ms)
}

/// Chunks of grid instants `from + k * step <= to`, cut at multiples of `chunk` on the grid.
pub fn plan_chunks(from_ms: i64, to_ms: i64, step_ms: i64, chunk_ms: i64) -> Result<Vec<TimeRange>, BackfillError> {
    if step_ms <= 0 || chunk_ms <= 0 {
        return Err(BackfillError::BadDuration { flag: if step_ms <= 0 { "step" } else { "chunk" }, value: format!("{}ms", step_ms.min(chunk_ms)) });
    }
    if chunk_ms % step_ms != 0 {
        let suggestion = format_ms_duration((chunk_ms / step_ms).max(1) * step_ms);
        return Err(BackfillError::ChunkNotMultiple { chunk: format_ms_duration(chunk_ms), step: format_ms_duration(step_ms), suggestion });
    }
    let points = chunk_ms / step_ms;
    if points > MAX_POINTS_PER_SERIES {
        return Err(BackfillError::TooManyPoints {
            chunk: format_ms_duration(chunk_ms),
            step: format_ms_duration(step_ms),
            points,
            max_chunk: format_ms_duration(MAX_POINTS_PER_SERIES * step_ms),
        });
    }
    if from_ms < 0 {
        return Err(BackfillError::BeforeEpoch { from: from_ms.to_string() });
    }
    if to_ms < from_ms {
        return Err(BackfillError::EmptyRange { from: format_time(from_ms), to: format_time(to_ms) });
    }
    let phase = from_ms.rem_euclid(step_ms);
    let last = from_ms + (to_ms - from_ms) / step_ms * step_ms;
    let mut chunks = Vec::new();
    let mut start = from_ms;
    while start <= last {
        // The slot holding `start`: a multiple of `chunk` shifted by the grid's phase, so every
        // slot boundary is itself a grid instant.
        let slot = (start - phase).div_euclid(chunk_ms) * chunk_ms + phase;
        let end = (slot + chunk_ms - step_ms).min(last);
        chunks.push(TimeRange { start_ms: start, end_ms: end });
        start = slot + chunk_ms;
    }
    Ok(chunks)
}

/// The marker directory and file-name key of a backfill: what decides the rows it writes.
/// The Prometheus URL is left out on purpose: the same server reached under another name
/// (a port-forward, a service DNS name) must not store everything twice. Backfilling two
/// servers with different data into one store needs different selectors (a `cluster` label).
pub fn backfill_key(selector: &str, step_ms: i64, phase_ms: i64) -> String {
    let text = format!("{selector}\n{step_ms}\n{phase_ms}");
    format!("{:016x}", xxhash_rust::xxh3::xxh3_64(text.as_bytes()))
}

/// `<start>-<end>` in unix seconds: the marker's file name and the tail of the Parquet name.
pub fn range_name(r: TimeRange) -> String {
    format!("{}-{}", format_unix_secs(r.start_ms), format_unix_secs(r.end_ms))
}

/// Reads back a [`range_name`].
pub fn parse_range_name(name: &str) -> Option<TimeRange> {
    let (a, b) = name.split_once('-')?;
    let r = TimeRange { start_ms: parse_unix_secs(a).ok()?, end_ms: parse_unix_secs(b).ok()? };
    (r.start_ms <= r.end_ms).then_some(r)
}

/// Unix seconds, with up to three decimals only when the time is not a whole second.
pub fn format_unix_secs(ms: i64) -> String {
    let (s, frac) = (ms.div_euclid(1000), ms.rem_euclid(1000));
    if frac == 0 { s.to_string() } else { format!("{s}.{frac:03}") }
}

/// Unix seconds, optionally with up to three decimals (`1793318405`, `1793318405.28`), to
/// milliseconds. Parsed as text, never through a float, so no millisecond is lost.
pub fn parse_unix_secs(s: &str) -> Result<i64, String> {
    let bad = || format!("{s:?} is not unix seconds (write 1793318400 or 1793318400.250)");
    let (whole, frac) = s.split_once('.').unwrap_or((s, ""));
    if whole.is_empty() || !whole.bytes().all(|b| b.is_ascii_digit()) || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    if frac.len() > 3 {
        return Err(format!("{s:?} is finer than a millisecond"));
    }
    let secs: i64 = whole.parse().map_err(|_| bad())?;
    let ms: i64 = if frac.is_empty() { 0 } else { format!("{frac:0<3}").parse().map_err(|_| bad())? };
    secs.checked_mul(1000).and_then(|v| v.checked_add(ms)).ok_or_else(bad)
}

/// A time as the command line takes it: RFC 3339 (`2026-10-30T00:00:00Z`,
/// `2026-10-30T00:00:05.280+02:00`) or unix seconds (`1793318405.28`), to unix milliseconds.
pub fn parse_time(s: &str) -> Result<i64, String> {
    let s = s.trim();
    if s.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return parse_unix_secs(s);
    }
    let t = DateTime::parse_from_rfc3339(s).map_err(|e| format!("{s:?} is neither RFC 3339 (2026-10-30T00:00:00Z) nor unix seconds (1793318400.250): {e}"))?;
    if !t.timestamp_subsec_nanos().is_multiple_of(1_000_000) {
        return Err(format!("{s:?} is finer than a millisecond"));
    }
    Ok(t.timestamp_millis())
}

/// RFC 3339 in UTC, with milliseconds only when the time has some.
pub fn format_time(ms: i64) -> String {
    match DateTime::from_timestamp_millis(ms) {
        Some(t) => t.to_rfc3339_opts(SecondsFormat::AutoSi, true),
        None => format!("{ms} ms"),
    }
}

/// `1h`, `30s`, `250ms`: the shortest spelling of a millisecond count.
fn format_ms_duration(ms: i64) -> String {
    crate::live::config::format_duration(Duration::from_millis(u64::try_from(ms).unwrap_or(0)))
}

/// The parts of `chunk` (grid instants every `step_ms`) that no range in `done` covers.
pub fn uncovered(chunk: TimeRange, done: &[TimeRange], step_ms: i64) -> Vec<TimeRange> {
    let phase = chunk.start_ms.rem_euclid(step_ms);
    // Markers come from this backfill's own grid; snapping keeps a stray marker from pushing a
    // piece off it all the same.
    let floor = |t: i64| t - (t - phase).rem_euclid(step_ms);
    let ceil = |t: i64| floor(t + step_ms - 1);
    let mut pieces = vec![chunk];
    for d in done.iter().filter(|d| d.start_ms <= chunk.end_ms && d.end_ms >= chunk.start_ms) {
        let mut next = Vec::with_capacity(pieces.len() + 1);
        for p in pieces {
            if d.end_ms < p.start_ms || d.start_ms > p.end_ms {
                next.push(p);
                continue;
            }
            let left = TimeRange { start_ms: p.start_ms, end_ms: floor(d.start_ms - 1) };
            let right = TimeRange { start_ms: ceil(d.end_ms + 1), end_ms: p.end_ms };
            next.extend([left, right].into_iter().filter(|r| r.start_ms <= r.end_ms));
        }
        pieces = next;
    }
    pieces
}

/// Runs a backfill; failed chunks are only counted (see [`backfill_reporting`] to hear of them
/// as they happen).
pub async fn backfill(opts: &BackfillOptions, progress: &dyn Progress) -> Result<BackfillSummary, BackfillError> {
    backfill_reporting(opts, progress, &|_| {}).await
}

/// Runs a backfill, calling `on_failure` for each chunk given up, when it is given up.
pub async fn backfill_reporting(opts: &BackfillOptions, progress: &dyn Progress, on_failure: &(dyn Fn(&ChunkFailure) + Sync)) -> Result<BackfillSummary, BackfillError> {
    let started = Instant::now();
    // Everything about the flags is checked before the store is opened (or created).
    let plan = plan(opts)?;
    let endpoint = query_range_url(&opts.prometheus)?;
    let client = reqwest::Client::builder().user_agent(concat!("gpuledger/", env!("CARGO_PKG_VERSION"))).build().map_err(BackfillError::Client)?;
    let mut store = Store::open(&opts.store, opts.store_options.clone())?;
    let marker_dir = format!("{MARKER_DIR}/{}", plan.key);
    let mut done = read_markers(&store, &marker_dir)?;

    let mut summary = BackfillSummary { key: plan.key.clone(), chunks: plan.chunks.len() as u64, ..BackfillSummary::default() };
    let n = summary.chunks;
    progress.start(n, n);
    for &chunk in &plan.chunks {
        let pieces = uncovered(chunk, &done, plan.step_ms);
        if pieces.is_empty() {
            summary.skipped += 1;
            progress.advance(1);
            continue;
        }
        let mut failed = None;
        for piece in pieces {
            match fetch_with_retries(&client, &endpoint, opts, piece, plan.step_ms, &mut summary).await {
                Ok(answer) => {
                    store.write_named(&format!("backfill-{}-{}", plan.key, range_name(piece)), answer.batches)?;
                    // The marker comes last: until it exists, a rerun asks for the chunk again.
                    write_marker(&store, &marker_dir, piece)?;
                    done.push(piece);
                    summary.series += answer.stats.series;
                    summary.max_series = summary.max_series.max(answer.stats.series);
                    summary.samples += answer.stats.samples;
                    summary.blank_samples += answer.blank;
                    summary.rejected += answer.stats.rejected;
                    summary.diagnostics.merge(answer.diags);
                }
                Err(f) => {
                    on_failure(&f);
                    failed = Some(f);
                    // The rest of this chunk would most likely fail the same way; the next chunk
                    // gets its own chance.
                    break;
                }
            }
        }
        match failed {
            Some(f) => summary.failures.push(f),
            None => summary.done += 1,
        }
        progress.advance(1);
    }
    progress.finish();
    summary.store = store.finish()?;
    summary.elapsed = started.elapsed();
    Ok(summary)
}

/// `<base>/api/v1/query_range`, checked once before anything is asked.
pub fn query_range_url(base: &str) -> Result<Url, BackfillError> {
    let bad = |reason: &str| BackfillError::Url { url: base.to_string(), reason: reason.to_string() };
    let mut url = Url::parse(base.trim()).map_err(|e| bad(&format!("{e} (write http://prometheus:9090)")))?;
    if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
        return Err(bad("not an http(s) URL with a host (write http://prometheus:9090)"));
    }
    url.set_query(None);
    url.set_fragment(None);
    if !url.path().trim_end_matches('/').ends_with("/api/v1/query_range") {
        let mut segments = url.path_segments_mut().map_err(|()| bad("cannot hold a path"))?;
        segments.pop_if_empty().extend(["api", "v1", "query_range"]);
    }
    Ok(url)
}

/// One chunk's rows, read and checked, ready for the store.
struct Answer {
    batches: Vec<crate::tables::TableBatch>,
    stats: ApiStats,
    blank: u64,
    diags: Diagnostics,
}

async fn fetch_with_retries(client: &reqwest::Client, endpoint: &Url, opts: &BackfillOptions, range: TimeRange, step_ms: i64, summary: &mut BackfillSummary) -> Result<Answer, ChunkFailure> {
    let attempts = opts.retry_delays.len() as u32 + 1;
    let mut reason = String::new();
    for attempt in 0..attempts {
        if attempt > 0 {
            tokio::time::sleep(opts.retry_delays[attempt as usize - 1]).await;
        }
        summary.requests += 1;
        let result = match fetch(client, endpoint, &opts.selector, range, step_ms, opts.request_timeout).await {
            Ok(body) => read_answer(&opts.prometheus, range, &body),
            Err(e) => Err(e),
        };
        match result {
            Ok(answer) => return Ok(answer),
            Err(e) => reason = e,
        }
    }
    Err(ChunkFailure { range, attempts, reason })
}

async fn fetch(client: &reqwest::Client, endpoint: &Url, selector: &str, range: TimeRange, step_ms: i64, timeout: Duration) -> Result<Vec<u8>, String> {
    let mut url = endpoint.clone();
    url.query_pairs_mut()
        .append_pair("query", selector)
        .append_pair("start", &format_unix_secs(range.start_ms))
        .append_pair("end", &format_unix_secs(range.end_ms))
        .append_pair("step", &format_unix_secs(step_ms));
    let resp = client.get(url).timeout(timeout).send().await.map_err(|e| describe(e, timeout))?;
    let status = resp.status();
    let body = resp.bytes().await.map_err(|e| describe(e, timeout))?;
    if !status.is_success() {
        // Prometheus explains a refusal in the JSON body (`"error": "..."`); say that, not
        // only the status.
        let why = serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_string))
            .unwrap_or_else(|| crate::diag::excerpt(&body));
        return Err(format!("HTTP {status}: {why}"));
    }
    Ok(body.to_vec())
}

/// Reads an answer as `gpuledger ingest` reads a saved one. An answer with no series read and
/// something rejected (an error status, not JSON, no result) did not answer the chunk: that is
/// a failure to retry, not bad input to store around.
fn read_answer(prometheus: &str, range: TimeRange, body: &[u8]) -> Result<Answer, String> {
    let source = PathBuf::from(format!("{prometheus} chunk {range}"));
    let origin = Origin { path: &source, modified_ms: None, fetched_ms: None };
    let mut reader = PrometheusApi::query_range();
    let mut diags = Diagnostics::new();
    let records = reader.parse(body, &origin, &mut diags);
    let (series, rejected) = (records.series.len() as u64, records.rejected);
    if series == 0 && rejected > 0 {
        let why = diags.errors.first().map_or_else(|| "unreadable answer".to_string(), |d| d.reason.clone());
        return Err(why);
    }
    let mut tables = SampleTables::new();
    let loaded = reader.load(records, &mut tables, &origin, &mut diags);
    let batches = tables.take_batches().map_err(|e| e.to_string())?;
    Ok(Answer { batches, stats: ApiStats { series, samples: loaded.samples, rejected }, blank: loaded.blank, diags })
}

fn describe(e: reqwest::Error, timeout: Duration) -> String {
    if e.is_timeout() {
        return format!("no complete answer within {}", crate::live::config::format_duration(timeout));
    }
    // reqwest's own message is terse ("error sending request"), the cause chain says why; the
    // URL, long with the encoded query, adds nothing to the chunk's range already reported.
    gpuledger_telemetry::error_chain(&e.without_url())
}

fn read_markers(store: &Store, dir: &str) -> Result<Vec<TimeRange>, BackfillError> {
    // Temporaries (`.<name>.tmp`) and anything else not named like a marker mean nothing.
    let mut out: Vec<TimeRange> = store.list_names(dir)?.iter().filter_map(|n| parse_range_name(n)).collect();
    out.sort();
    Ok(out)
}

/// Creates the empty marker of `range` so that it appears whole. It is not fsynced: a marker
/// lost in a power cut only makes a rerun ask for its chunk again, while the Parquet files it
/// vouches for were synced before it was created.
fn write_marker(store: &Store, dir: &str, range: TimeRange) -> Result<(), BackfillError> {
    Ok(store.put_small(&format!("{dir}/{}", range_name(range)), b"")?)
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: i64 = 3_600_000;
    const M: i64 = 60_000;
    /// 2026-10-30T00:00:00Z.
    const DAY: i64 = 1_793_318_400_000;

    fn r(start_ms: i64, end_ms: i64) -> TimeRange {
        TimeRange { start_ms, end_ms }
    }

    #[test]
    fn chunks_cover_the_range_without_sharing_an_instant() {
        // Three whole hours at 30 s: the query ends one step before the next chunk starts.
        let c = plan_chunks(DAY, DAY + 3 * H - 30_000, 30_000, H).unwrap();
        assert_eq!(c, vec![r(DAY, DAY + H - 30_000), r(DAY + H, DAY + 2 * H - 30_000), r(DAY + 2 * H, DAY + 3 * H - 30_000)]);
    }

    #[test]
    fn to_is_inclusive_and_the_last_chunk_is_cut_short() {
        // --to exactly on the first instant of a new chunk: that instant gets its own chunk.
        let c = plan_chunks(DAY, DAY + 2 * H, 30_000, H).unwrap();
        assert_eq!(c.len(), 3);
        assert_eq!(c[2], r(DAY + 2 * H, DAY + 2 * H));
        // --to between grid points: the last instant is the grid point before it.
        let c = plan_chunks(DAY, DAY + H + 10 * M + 45_000, 30_000, H).unwrap();
        assert_eq!(c.last(), Some(&r(DAY + H, DAY + H + 10 * M + 30_000)));
        // --from = --to: one instant.
        assert_eq!(plan_chunks(DAY + 5, DAY + 5, 30_000, H).unwrap(), vec![r(DAY + 5, DAY + 5)]);
    }

    #[test]
    fn chunks_align_to_the_chunk_size_on_the_grid_phase() {
        // From 00:20:05.280 at 60 s: the grid's phase is 5.280 s, the first chunk runs to the
        // slot boundary 01:00:05.280 minus a step, the next ones are whole hours.
        let from = DAY + 20 * M + 5_280;
        let c = plan_chunks(from, DAY + 3 * H, M, H).unwrap();
        assert_eq!(c[0], r(from, DAY + H + 5_280 - M));
        assert_eq!(c[1], r(DAY + H + 5_280, DAY + 2 * H + 5_280 - M));
        assert_eq!(c.last(), Some(&r(DAY + 2 * H + 5_280, DAY + 3 * H + 5_280 - M)));
        // Every instant evaluated is on the grid and in [from, to], once.
        let instants: Vec<i64> = c.iter().flat_map(|x| (x.start_ms..=x.end_ms).step_by(M as usize)).collect();
        let expected: Vec<i64> = (from..=DAY + 3 * H).step_by(M as usize).collect();
        assert_eq!(instants, expected);
    }

    #[test]
    fn step_and_chunk_are_validated() {
        let e = plan_chunks(DAY, DAY + H, M, 90_000).unwrap_err();
        assert_eq!(e.to_string(), "--chunk 90s is not a multiple of --step 1m: each chunk must hold whole steps so that neighbouring chunks meet on the step grid (try --chunk 1m)");
        let e = plan_chunks(DAY + H, DAY, M, H).unwrap_err();
        assert_eq!(e.to_string(), "--to 2026-10-30T00:00:00Z is before --from 2026-10-30T01:00:00Z");
        assert!(matches!(plan_chunks(-1, DAY, M, H), Err(BackfillError::BeforeEpoch { .. })));
        let mut o = BackfillOptions::new("http://p:9090", DAY, DAY + H, StoreLocation::Local("/s".into()));
        o.step = Duration::from_micros(1500);
        assert!(matches!(plan(&o), Err(BackfillError::BadDuration { flag: "step", .. })));
    }

    #[test]
    fn eleven_thousand_points_per_series_is_the_limit() {
        // 11,000 points per chunk is allowed, one more is not, and the message says what fits.
        assert!(plan_chunks(DAY, DAY + H, 1_000, 11_000 * 1_000).is_ok());
        let e = plan_chunks(DAY, DAY + H, 1_000, 11_001 * 1_000).unwrap_err();
        assert!(matches!(e, BackfillError::TooManyPoints { points: 11_001, .. }), "{e:?}");
        let e = plan_chunks(DAY, DAY + H, 1_000, 4 * H).unwrap_err();
        assert_eq!(e.to_string(), "--chunk 4h at --step 1s asks Prometheus for 14400 points per series, more than the 11000 it answers in one query: use --chunk 11000s or shorter, or a longer --step");
    }

    #[test]
    fn markers_name_the_range_in_unix_seconds() {
        assert_eq!(range_name(r(DAY, DAY + H - 30_000)), "1793318400-1793321970");
        assert_eq!(range_name(r(DAY + 5_280, DAY + 5_280 + H - M)), "1793318405.280-1793321945.280");
        assert_eq!(parse_range_name("1793318405.280-1793321945.280"), Some(r(DAY + 5_280, DAY + 5_280 + H - M)));
        assert_eq!(parse_range_name("1793318400-1793321970"), Some(r(DAY, DAY + H - 30_000)));
        for junk in [".1793318400-1793321970.tmp", "1793321970-1793318400", "a-b", "1793318400", "1.2345-2"] {
            assert_eq!(parse_range_name(junk), None, "{junk}");
        }
    }

    #[test]
    fn the_key_changes_with_what_changes_the_rows() {
        let k = backfill_key(DEFAULT_MATCH, 30_000, 0);
        assert_eq!(k.len(), 16);
        assert!(k.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(k, backfill_key(DEFAULT_MATCH, 30_000, 0));
        assert_ne!(k, backfill_key(DEFAULT_MATCH, 60_000, 0));
        assert_ne!(k, backfill_key(DEFAULT_MATCH, 30_000, 5_280));
        assert_ne!(k, backfill_key(r#"{__name__=~"DCGM_.*",cluster="b"}"#, 30_000, 0));
        // Same selector and step, other --from on the same grid: same key, so runs share markers.
        let o = |from| BackfillOptions::new("http://p:9090", from, from + H, StoreLocation::Local("/s".into()));
        assert_eq!(plan(&o(DAY)).unwrap().key, plan(&o(DAY + 7 * H)).unwrap().key);
    }

    #[test]
    fn marked_instants_are_not_asked_again() {
        let step = 30_000;
        let chunk = r(DAY, DAY + H - step);
        assert_eq!(uncovered(chunk, &[], step), vec![chunk]);
        assert_eq!(uncovered(chunk, &[chunk], step), vec![]);
        // An earlier run stopped at 00:20 (its --to): only the rest is asked.
        assert_eq!(uncovered(chunk, &[r(DAY, DAY + 20 * M)], step), vec![r(DAY + 20 * M + step, DAY + H - step)]);
        // A marker in the middle leaves two pieces; markers of other chunks do not matter.
        let got = uncovered(chunk, &[r(DAY + 10 * M, DAY + 20 * M), r(DAY + H, DAY + 2 * H - step)], step);
        assert_eq!(got, vec![r(DAY, DAY + 10 * M - step), r(DAY + 20 * M + step, DAY + H - step)]);
        // A larger chunk size used earlier covers this chunk entirely.
        assert_eq!(uncovered(chunk, &[r(DAY - H, DAY + 5 * H)], step), vec![]);
    }

    #[test]
    fn times_parse_from_rfc3339_and_unix_seconds() {
        assert_eq!(parse_time("2026-10-30T00:00:00Z"), Ok(DAY));
        assert_eq!(parse_time("2026-10-30T00:00:05.280Z"), Ok(DAY + 5_280));
        assert_eq!(parse_time("2026-10-30T02:00:05.28+02:00"), Ok(DAY + 5_280));
        assert_eq!(parse_time("1793318400"), Ok(DAY));
        assert_eq!(parse_time("1793318405.28"), Ok(DAY + 5_280));
        assert_eq!(parse_time("1793318405.280"), Ok(DAY + 5_280));
        assert!(parse_time("1793318405.2801").unwrap_err().contains("finer than a millisecond"));
        assert!(parse_time("2026-10-30T00:00:00.0001Z").unwrap_err().contains("finer than a millisecond"));
        assert!(parse_time("yesterday").unwrap_err().starts_with("\"yesterday\" is neither RFC 3339"));
        assert!(parse_time("1793318400.2.5").is_err());
        assert!(parse_time("-5").is_err());
        assert!(parse_time("2026-10-30").is_err(), "a date alone has no time zone to trust");
        assert_eq!(format_time(DAY + 5_280), "2026-10-30T00:00:05.280Z");
        assert_eq!(format_time(DAY), "2026-10-30T00:00:00Z");
    }

    #[test]
    fn the_endpoint_is_the_base_url_plus_the_api_path() {
        assert_eq!(query_range_url("http://prom:9090").unwrap().as_str(), "http://prom:9090/api/v1/query_range");
        assert_eq!(query_range_url("https://x.example/prometheus/").unwrap().as_str(), "https://x.example/prometheus/api/v1/query_range");
        assert_eq!(query_range_url("http://prom:9090/api/v1/query_range?x=1").unwrap().as_str(), "http://prom:9090/api/v1/query_range");
        assert!(query_range_url("prom:9090").is_err());
        assert!(query_range_url("ftp://prom").is_err());
    }

    #[test]
    fn an_error_answer_is_a_failure_and_an_empty_one_is_not() {
        let range = r(DAY, DAY + H - M);
        let e = read_answer("http://p", range, br#"{"status":"error","errorType":"bad_data","error":"exceeded maximum resolution"}"#).err().unwrap();
        assert_eq!(e, "Prometheus answered an error (bad_data): exceeded maximum resolution");
        assert!(read_answer("http://p", range, b"<html>").is_err());
        let empty = read_answer("http://p", range, br#"{"status":"success","data":{"resultType":"matrix","result":[]}}"#).unwrap();
        assert_eq!((empty.stats.series, empty.batches.len()), (0, 0));
    }

    #[test]
    fn backoff_doubles() {
        assert_eq!(backoff(Duration::from_secs(1), 3), [1, 2, 4].map(Duration::from_secs));
        assert!(backoff(Duration::from_secs(1), 0).is_empty());
    }
}
