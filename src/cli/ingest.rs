//! `gpuledger ingest`: capture files -> the Parquet store, with a summary of what was read,
//! written and rejected.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use gpuledger_store::StoreLocation;
use gpuledger_collector::ingest::{self, IngestOptions, IngestSummary, SkipFile};
use gpuledger_collector::store::StoreOptions;

use super::progress::{ProgressMode, Reporter};
use super::summary::{SummaryFormat, print_summary};

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
