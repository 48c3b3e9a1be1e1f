//! `gpuledger backfill`: DCGM history from a Prometheus server into the store, chunk by chunk,
//! resumable, with a summary of what was asked, stored and given up.

use gpuledger_store::StoreLocation;
use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use gpuledger_collector::backfill::{self, BackfillOptions, BackfillSummary, ChunkFailure, DEFAULT_MATCH};
use gpuledger_collector::ingest::Progress;
use gpuledger_collector::live::config::{format_duration, parse_duration};
use gpuledger_collector::store::StoreOptions;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;

use super::summary::{self, SummaryFormat};
use super::progress::ProgressMode;

const AFTER_HELP: &str = "\
Examples:
  gpuledger backfill --prometheus http://prometheus:9090 \\
      --from 2026-10-01T00:00:00Z --to 2026-10-31T23:59:30Z --step 30s --store ./store
  gpuledger backfill --prometheus http://localhost:9090 --from 1793318405.28 --to 1793404800 \\
      --step 60s --chunk 6h --match '{__name__=~\"DCGM_.*\",cluster=\"eu-1\"}' --store ./store

Exit codes:
  0  every chunk stored (or already stored)
  1  finished, but some chunks failed (listed on stderr); rerun the same command to retry them
  2  could not run (flags, store, I/O)";

/// Pull DCGM history from a Prometheus server (/api/v1/query_range) into the store.
///
/// The range [--from, --to] is cut into chunks of --chunk (aligned to multiples of --chunk), one
/// query each; --to is inclusive. The rows are what `gpuledger ingest` makes of a saved
/// query_range answer.
///
/// Step: Prometheus evaluates --match every --step from --from on and answers, for each instant,
/// the newest sample within its lookback (5 minutes by default), stamped with that instant. Rows
/// therefore land on the step grid, not on the original scrape times: choose --step equal to the
/// scrape interval (a shorter step repeats samples, a longer one drops some), and --from on a
/// scrape time to keep the scrape times themselves. Prometheus answers at most 11,000 points per
/// series and query: --chunk divided by --step must stay within that.
///
/// Resumable: when a chunk's Parquet files are written, an empty marker file
/// <store>/.backfill/<key>/<start>-<end> records it (key: a hash of --match, --step and the grid's
/// phase). A rerun skips marked chunks without querying them, so an interrupted or partly failed
/// backfill is finished by running the same command again; nothing is stored twice. A chunk that
/// fails (connection, HTTP error, Prometheus error, --timeout) is retried 3 times (after 1, 2
/// and 4 s), then reported on stderr with its time range and left for the next run.
#[derive(Debug, clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// Prometheus base URL, e.g. http://prometheus.monitoring:9090 (a path prefix is kept).
    #[arg(long, value_name = "URL")]
    pub prometheus: String,
    /// First instant: RFC 3339 (2026-10-01T00:00:00Z, milliseconds allowed) or unix seconds
    /// (1790812800, 1790812805.280). It fixes the step grid.
    #[arg(long, value_name = "TIME", value_parser = parse_time_arg)]
    pub from: i64,
    /// Last instant, inclusive (same formats as --from).
    #[arg(long, value_name = "TIME", value_parser = parse_time_arg)]
    pub to: i64,
    /// Query resolution: one row per series every step. Set it to the scrape interval.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration_arg)]
    pub step: Duration,
    /// Time covered by one query; a multiple of --step, at most 11,000 steps.
    #[arg(long, value_name = "DURATION", default_value = "1h", value_parser = parse_duration_arg)]
    pub chunk: Duration,
    /// PromQL series selector of what to copy (exporter 1.x: '{__name__=~"DCGM_.*|dcgm_.*"}').
    #[arg(long = "match", value_name = "SELECTOR", default_value = DEFAULT_MATCH)]
    pub selector: String,
    /// Store: a directory, or an object-store URL (s3://bucket/prefix, gs://..., az://...); created if missing.
    #[arg(long, env = "GPULEDGER_STORE", value_parser = super::store_location)]
    pub store: StoreLocation,
    /// Limit for one query, answer included.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_duration_arg)]
    pub timeout: Duration,
    /// Progress display on stderr.
    #[arg(long, value_enum, default_value = "auto")]
    pub progress: ProgressMode,
    /// Summary format on stdout.
    #[arg(long, value_enum, default_value = "text")]
    pub format: SummaryFormat,
    /// Print every rejected sample (default: the first 20).
    #[arg(short, long)]
    pub verbose: bool,
    /// Wait before the first retry of a failed chunk, doubled for each of the 3 retries. Hidden:
    /// it exists so that tests of failing chunks need not wait 7 s per chunk.
    #[arg(long, hide = true, value_name = "DURATION", default_value = "1s", value_parser = parse_duration_arg)]
    pub retry_backoff: Duration,
}

fn parse_time_arg(s: &str) -> Result<i64, String> {
    backfill::parse_time(s)
}

fn parse_duration_arg(s: &str) -> Result<Duration, String> {
    parse_duration(s)
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let options = BackfillOptions {
        prometheus: args.prometheus.clone(),
        from_ms: args.from,
        to_ms: args.to,
        step: args.step,
        chunk: args.chunk,
        selector: args.selector.clone(),
        store: args.store.clone(),
        store_options: StoreOptions::default(),
        request_timeout: args.timeout,
        retry_delays: backfill::backoff(args.retry_backoff, 3),
    };
    let progress = ChunkProgress::new(args.progress);
    let on_failure = |f: &ChunkFailure| progress.message(&format!("gpuledger: {f}"));
    let summary = super::runtime()?
        .block_on(backfill::backfill_reporting(&options, &progress, &on_failure))
        .with_context(|| format!("backfilling {} into {}", args.prometheus, args.store))?;
    summary::print_problems(&summary.diagnostics, args.verbose, "rejected samples");
    match args.format {
        SummaryFormat::Text => out!("{}", summary_text(&summary, &options))?,
        SummaryFormat::Json => outln!("{}", serde_json::to_string_pretty(&summary_json(&summary, &options))?)?,
    }
    if !summary.failures.is_empty() {
        let n = summary.failures.len();
        eprintln!("gpuledger: {n} chunk{} failed; rerun to retry them", if n == 1 { "" } else { "s" });
        return Ok(ExitCode::from(EXIT_CHUNKS_FAILED));
    }
    Ok(ExitCode::SUCCESS)
}

/// Exit code when the run finished but some chunks were given up (1, like ingest's "finished,
/// but not all of it").
const EXIT_CHUNKS_FAILED: u8 = super::EXIT_BAD_INPUT;

/// The run summary for people.
fn summary_text(s: &BackfillSummary, o: &BackfillOptions) -> String {
    let secs = s.elapsed.as_secs_f64().max(1e-9);
    let mut out = format!(
        "backfilled {} chunks in {secs:.2}s: {} done, {} skipped (already stored), {} failed; {} requests\n",
        s.chunks,
        s.done,
        s.skipped,
        s.failures.len(),
        s.requests
    );
    out.push_str(&format!(
        "  range   {} .. {}, step {}, chunk {}, key {}\n",
        backfill::format_time(o.from_ms),
        backfill::format_time(o.to_ms),
        format_duration(o.step),
        format_duration(o.chunk),
        s.key
    ));
    out.push_str(&format!("  samples {} ({:.0}/s), at most {} series per query\n", s.samples, s.samples as f64 / secs, s.max_series));
    if s.blank_samples > 0 {
        out.push_str(&format!("  samples with DCGM blank value (stored as null): {}\n", s.blank_samples));
    }
    summary::push_store_lines(&mut out, &s.store, &s.diagnostics, 8);
    out
}

/// The run summary for programs (`--format json`).
fn summary_json(s: &BackfillSummary, o: &BackfillOptions) -> serde_json::Value {
    let failures: Vec<serde_json::Value> = s
        .failures
        .iter()
        .map(|f| json!({"start": backfill::format_time(f.range.start_ms), "end": backfill::format_time(f.range.end_ms), "attempts": f.attempts, "reason": f.reason}))
        .collect();
    let mut m = summary::store_json(&s.store, &s.diagnostics);
    let fields = json!({
        "from": backfill::format_time(o.from_ms),
        "to": backfill::format_time(o.to_ms),
        "step_seconds": o.step.as_secs_f64(),
        "chunk_seconds": o.chunk.as_secs_f64(),
        "match": o.selector,
        "key": s.key,
        "chunks": s.chunks,
        "done": s.done,
        "skipped": s.skipped,
        "failed": s.failures.len(),
        "failures": failures,
        "requests": s.requests,
        "series": s.series,
        "max_series_per_query": s.max_series,
        "samples": s.samples,
        "blank_samples": s.blank_samples,
        "elapsed_seconds": s.elapsed.as_secs_f64(),
    });
    if let serde_json::Value::Object(f) = fields {
        m.extend(f);
    }
    serde_json::Value::Object(m)
}

/// Progress counted in chunks. The ingest reporter (`super::progress::Reporter`) speaks of files
/// and MiB, which would misname chunks; this one keeps its modes (`auto`: a bar on a terminal, a
/// line every 5 s otherwise) and says "chunks".
enum ChunkProgress {
    Bar(ProgressBar),
    Lines { total: AtomicU64, done: AtomicU64, started: Instant, last: Mutex<Instant> },
    Silent,
}

impl ChunkProgress {
    fn new(mode: ProgressMode) -> ChunkProgress {
        let bar = || {
            let style = ProgressStyle::with_template("{spinner} [{elapsed_precise}] {wide_bar} {pos}/{len} chunks eta {eta}").unwrap_or_else(|_| ProgressStyle::default_bar());
            ChunkProgress::Bar(ProgressBar::new(0).with_style(style))
        };
        match mode {
            ProgressMode::Off => ChunkProgress::Silent,
            ProgressMode::On => bar(),
            ProgressMode::Auto if std::io::stderr().is_terminal() => bar(),
            ProgressMode::Auto => ChunkProgress::Lines { total: AtomicU64::new(0), done: AtomicU64::new(0), started: Instant::now(), last: Mutex::new(Instant::now()) },
        }
    }

    /// A line on stderr that does not tear the bar.
    fn message(&self, text: &str) {
        match self {
            ChunkProgress::Bar(b) => b.println(text),
            _ => eprintln!("{text}"),
        }
    }
}

impl Progress for ChunkProgress {
    fn start(&self, chunks: u64, _: u64) {
        match self {
            ChunkProgress::Bar(b) => b.set_length(chunks),
            ChunkProgress::Lines { total, .. } => {
                total.store(chunks, Ordering::Relaxed);
                eprintln!("gpuledger: backfilling {chunks} chunks");
            }
            ChunkProgress::Silent => {}
        }
    }

    fn advance(&self, n: u64) {
        match self {
            ChunkProgress::Bar(b) => b.inc(n),
            ChunkProgress::Lines { total, done, started, last } => {
                let d = done.fetch_add(n, Ordering::Relaxed) + n;
                let Ok(mut last) = last.lock() else { return };
                if last.elapsed() >= Duration::from_secs(5) {
                    *last = Instant::now();
                    eprintln!("gpuledger: {d} of {} chunks after {:.0}s", total.load(Ordering::Relaxed), started.elapsed().as_secs_f64());
                }
            }
            ChunkProgress::Silent => {}
        }
    }

    fn finish(&self) {
        if let ChunkProgress::Bar(b) = self {
            b.finish_and_clear();
        }
    }
}
