//! `gpuledger ingest`: capture files -> the Parquet store, with a summary of what was read,
//! written and rejected.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use gpuledger_store::StoreLocation;
use clap::ValueEnum;
use gpuledger_collector::ingest::{self, IngestOptions, IngestSummary, SkipFile};
use gpuledger_collector::Diagnostics;
use gpuledger_collector::store::{StoreOptions, StoreStats};
use serde_json::json;

use super::progress::{ProgressMode, Reporter};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SummaryFormat {
    Text,
    Json,
}

/// Read capture files and directories into the store.
///
/// Recognised: Prometheus text of the DCGM exporter (`.prom`, `.txt`; per-sample millisecond
/// timestamps, or one scrape per file named `<unix-millis>.prom` / `<RFC 3339>.prom`),
/// Prometheus API responses (`.json` from /api/v1/query or /api/v1/query_range), and
/// Kubernetes/Kueue objects as kubectl writes them (`.json` Lists or objects, watch-event
/// streams in `.json`/`.jsonl`, multi-document `.yaml`). Ingesting the same input twice stores
/// nothing twice. Bad lines and objects are reported with file and line and skipped.
#[derive(Debug, clap::Args)]
#[command(after_help = "Example:\n  gpuledger ingest ./capture --store ./store\n  gpuledger ingest dcgm/ kubernetes/pods.watch.jsonl --store ./store --strict")]
pub struct Args {
    /// Files or directories to read (directories recursively; hidden entries are skipped).
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    /// Store: a directory, or an object-store URL (s3://bucket/prefix, gs://..., az://...); created if missing.
    #[arg(long, env = "GPULEDGER_STORE", value_parser = super::store_location)]
    pub store: StoreLocation,
    /// Exit with code 1 when any input was rejected.
    #[arg(long)]
    pub strict: bool,
    /// Progress display on stderr.
    #[arg(long, value_enum, default_value = "auto")]
    pub progress: ProgressMode,
    /// Summary format on stdout.
    #[arg(long, value_enum, default_value = "text")]
    pub format: SummaryFormat,
    /// Parser threads (default: the number of cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// The longest line of exposition text read (e.g. 4MiB): a longer one is reported with its
    /// file and line and passed over without being held in memory.
    #[arg(long, value_parser = super::byte_size, default_value = "1MiB")]
    pub max_line_bytes: u64,
    /// Write a table out once this many rows are buffered (lower it to bound memory).
    #[arg(long, default_value_t = 2_000_000)]
    pub flush_rows: usize,
    /// Memory all tables' buffered rows may take together (e.g. 64MiB): past it, the table
    /// holding the most is written out. Its flush holds about three times its rows at once
    /// (the rows, joined, sorted).
    #[arg(long, value_parser = super::byte_size, default_value = "256MiB")]
    pub flush_bytes: u64,
    /// Print every rejected item (default: the first 20).
    #[arg(short, long)]
    pub verbose: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let summary = ingest_with(&args)?;
    print_summary(&summary, args.format, args.verbose)?;
    if args.strict && !summary.diagnostics.errors.is_empty() {
        eprintln!("gpuledger: --strict: {} input problems", summary.diagnostics.errors.len());
        return Ok(ExitCode::from(super::EXIT_BAD_INPUT));
    }
    Ok(ExitCode::SUCCESS)
}

pub fn ingest_with(args: &Args) -> anyhow::Result<IngestSummary> {
    let mut options = IngestOptions { store: StoreOptions { flush_rows: args.flush_rows.max(1), flush_bytes: usize::try_from(args.flush_bytes).unwrap_or(usize::MAX).max(1), ..StoreOptions::default() }, ..IngestOptions::default() };
    if let Some(t) = args.threads {
        options.threads = t.max(1);
    }
    options.max_line_bytes = usize::try_from(args.max_line_bytes).unwrap_or(usize::MAX);
    // A simulated capture holds its truth beside the data: reading it as Kubernetes objects
    // would only report it as bad input.
    let truth = gpuledger_simulator::TRUTH_FILE;
    options.skip.push(SkipFile { name: truth.to_string(), reason: format!("simulator truth ({truth})") });
    let reporter = Reporter::new(args.progress);
    ingest::ingest(&args.paths, &args.store, &options, &reporter).with_context(|| format!("ingesting into {}", args.store))
}

/// An ingest's problems on stderr, then its summary on stdout in `format`. Shared by the
/// commands that end in an ingest summary (`ingest`, `simulate --store`).
pub(super) fn print_summary(s: &IngestSummary, format: SummaryFormat, verbose: bool) -> anyhow::Result<()> {
    print_problems(&s.diagnostics, verbose, "input problems");
    match format {
        SummaryFormat::Text => out!("{}", summary_text(s))?,
        SummaryFormat::Json => outln!("{}", serde_json::to_string_pretty(&summary_json(s))?)?,
    }
    Ok(())
}

/// Warnings, then the first 20 rejected items (all with `verbose`) on stderr; `what` names the
/// rest in the "... and N more" line. Shared by the commands that read input into the store.
pub(super) fn print_problems(diagnostics: &Diagnostics, verbose: bool, what: &str) {
    const SHOWN: usize = 20;
    for w in &diagnostics.warnings {
        eprintln!("gpuledger: warning: {w}");
    }
    let errors = &diagnostics.errors;
    for e in errors.iter().take(if verbose { usize::MAX } else { SHOWN }) {
        eprintln!("gpuledger: bad input: {e}");
    }
    if !verbose && errors.len() > SHOWN {
        eprintln!("gpuledger: ... and {} more {what} (-v shows all)", errors.len() - SHOWN);
    }
}

/// The summary fields on what reached the store and what was rejected, for `--format json`
/// (ingest and backfill give them the same names).
pub(super) fn store_json(store: &StoreStats, diagnostics: &Diagnostics) -> serde_json::Map<String, serde_json::Value> {
    let fields = json!({
        "rows_written": store.rows_written,
        "duplicates_skipped": store.duplicates,
        "files_written": store.files_written,
        "commits": store.commits,
        "commit_retries": store.commit_retries,
        "bytes_written": store.bytes_written,
        "rejected": diagnostics.errors.len(),
        "rejected_by_reason": diagnostics.error_counts(),
        "errors": diagnostics.errors.iter().map(|e| e.to_string()).collect::<Vec<_>>(),
        "warnings": diagnostics.warnings.iter().map(|e| e.to_string()).collect::<Vec<_>>(),
    });
    match fields {
        serde_json::Value::Object(m) => m,
        _ => serde_json::Map::new(),
    }
}

/// The summary lines on what reached the store and what was rejected. `width` is that of the
/// label column (`rows`, `store`) in the caller's summary.
pub(super) fn push_store_lines(out: &mut String, store: &StoreStats, diagnostics: &Diagnostics, width: usize) {
    for (table, n) in &store.rows_written {
        out.push_str(&format!("  {:<width$}{table:<20} {n} written\n", "rows"));
    }
    for (table, n) in &store.duplicates {
        out.push_str(&format!("  {:<width$}{table:<20} {n} already stored, skipped\n", "rows"));
    }
    out.push_str(&format!("  {:<width$}{} files in {} commits, {:.1} MiB\n", "store", store.files_written, store.commits, store.bytes_written as f64 / 1048576.0));
    let counts = diagnostics.error_counts();
    if counts.is_empty() {
        out.push_str("  rejected: none\n");
    } else {
        let parts: Vec<String> = counts.iter().map(|(k, n)| format!("{k} {n}")).collect();
        out.push_str(&format!("  rejected: {} ({})\n", diagnostics.errors.len(), parts.join(", ")));
    }
}

/// The run summary for people.
pub fn summary_text(s: &IngestSummary) -> String {
    let mut out = String::new();
    let files: u64 = s.files.values().sum();
    let secs = s.elapsed.as_secs_f64().max(1e-9);
    out.push_str(&format!(
        "ingested {files} files ({:.1} MiB) in {:.2}s: {} samples ({:.0}/s)\n",
        s.bytes_read as f64 / 1048576.0,
        secs,
        s.samples,
        s.samples as f64 / secs
    ));
    for (f, n) in &s.files {
        out.push_str(&format!("  files  {:<20} {n}\n", f.name()));
    }
    for (why, n) in &s.skipped_files {
        out.push_str(&format!("  files  skipped: {why:<11} {n}\n"));
    }
    if s.blank_samples > 0 {
        out.push_str(&format!("  samples with DCGM blank value (stored as null): {}\n", s.blank_samples));
    }
    if !s.objects.is_empty() {
        let kinds: Vec<String> = s.objects.iter().map(|(k, n)| format!("{k} {n}")).collect();
        out.push_str(&format!("  objects {}\n", kinds.join(", ")));
    }
    push_store_lines(&mut out, &s.store, &s.diagnostics, 7);
    for (why, n) in &s.diagnostics.skipped {
        out.push_str(&format!("  skipped: {why} {n}\n"));
    }
    if let Some(peak) = s.peak_rss_bytes {
        out.push_str(&format!("  memory peak {:.0} MiB\n", peak as f64 / 1048576.0));
    }
    out
}

/// The run summary for programs (`--format json`).
pub fn summary_json(s: &IngestSummary) -> serde_json::Value {
    let files: serde_json::Map<String, serde_json::Value> = s.files.iter().map(|(f, n)| (f.name().to_string(), json!(n))).collect();
    let mut m = store_json(&s.store, &s.diagnostics);
    m.extend([
        ("files".to_string(), json!(files)),
        ("skipped_files".to_string(), json!(s.skipped_files)),
        ("bytes_read".to_string(), json!(s.bytes_read)),
        ("samples".to_string(), json!(s.samples)),
        ("blank_samples".to_string(), json!(s.blank_samples)),
        ("objects".to_string(), json!(s.objects)),
        ("skipped".to_string(), json!(s.diagnostics.skipped)),
        ("elapsed_seconds".to_string(), json!(s.elapsed.as_secs_f64())),
        ("peak_rss_bytes".to_string(), json!(s.peak_rss_bytes)),
    ]);
    serde_json::Value::Object(m)
}
