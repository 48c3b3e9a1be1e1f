//! Command-line definitions: one module per subcommand, each with its arguments and `run`.

/// `print!` to stdout that returns the write's error (`?`) instead of panicking: a closed pipe
/// (`gpuledger store status | head -4`) ends the command quietly (`main`).
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        write!(std::io::stdout().lock(), $($arg)*)
    }};
}

/// `println!` that returns the write's error, as [`out!`].
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($arg)*)
    }};
}

mod backfill;
mod ballista;
mod collect;
mod config;
mod demo;
mod ingest;
mod ledger;
mod maintain;
mod progress;
mod query;
mod report;
mod schema;
mod serve;
mod simulate;
mod steps;
mod summary;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Exit code when the run finished but `--strict` found bad input.
pub const EXIT_BAD_INPUT: u8 = 1;
/// Exit code when the run could not be done (flags, store, I/O).
pub const EXIT_ERROR: u8 = 2;

const AFTER_HELP: &str = "\
Examples:
  gpuledger demo                                    simulate a cluster, ingest it, report its chargeback
  gpuledger simulate --out ./capture --gpus 64 --days 3
  gpuledger ingest ./capture --store ./store
  gpuledger query --store ./store \"SELECT hostname, count(*) FROM gpu_samples GROUP BY 1\"
  gpuledger ledger --store ./store --config gpuledger.toml
  gpuledger ledger --store s3://bucket/fleet --engine ballista --scheduler df://127.0.0.1:50050
  gpuledger report --store ./store --config gpuledger.toml --month 2026-10 --format html --out oct.html
  gpuledger schema gpu_samples
  gpuledger config check gpuledger.toml             every mistake of a config file, nothing run
  gpuledger collect --config gpuledger.toml --store ./store   live: watches + DCGM scrapes
  gpuledger serve --store ./store --config gpuledger.toml      SQL (PostgreSQL wire) + HTTP API
  gpuledger compact --store ./store                   merge closed days' small files
  gpuledger vacuum --store ./store --retain 7d        delete files no recent version needs
  gpuledger backfill --prometheus http://prometheus:9090 --from 2026-10-01T00:00:00Z --to 2026-10-31T23:59:30Z --store ./store

Logs (collect, serve and the ledger's step timings) go to stderr. GPULEDGER_LOG picks
which: `debug`, `gpuledger_collector=debug,warn`, ... (default: gpuledger's own from info up).

Exit codes:
  0  success
  1  finished, but --strict found bad input
  2  could not run (flags, store, I/O)";

/// GPU cost ledger for Kubernetes clusters: joins DCGM exporter metrics, Kubernetes objects and
/// Kueue Workloads into a Parquet store and answers, in SQL, who used which GPUs and how well.
#[derive(Debug, Parser)]
#[command(name = "gpuledger", version, after_help = AFTER_HELP, max_term_width = 100)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,

    /// How log events are written to stderr: `text` lines, or `json` objects for a log shipper.
    #[arg(long, global = true, env = "GPULEDGER_LOG_FORMAT", default_value = "text", value_name = "text|json")]
    pub log_format: gpuledger_telemetry::LogFormat,
}

#[derive(Debug, Subcommand)]
enum Command {
    Backfill(backfill::Args),
    #[command(subcommand)]
    Ballista(ballista::Command),
    Collect(collect::Args),
    Compact(maintain::CompactArgs),
    /// Check a configuration file: every mistake at once, nothing run
    #[command(subcommand)]
    Config(config::Command),
    Ingest(ingest::Args),
    Query(query::Args),
    Ledger(ledger::Args),
    Report(report::Args),
    Schema(schema::Args),
    Serve(serve::Args),
    Simulate(simulate::Args),
    #[command(subcommand)]
    Store(maintain::StoreCommand),
    Vacuum(maintain::VacuumArgs),
    Demo(demo::Args),
}

/// Runs the parsed command; `Ok` carries the exit code.
pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Backfill(a) => backfill::run(a),
        Command::Ballista(c) => ballista::run(c),
        Command::Collect(a) => collect::run(a),
        Command::Compact(a) => maintain::compact(a),
        Command::Config(c) => config::run(c),
        Command::Ingest(a) => ingest::run(a),
        Command::Query(a) => query::run(a),
        Command::Ledger(a) => ledger::run(a),
        Command::Report(a) => report::run(a),
        Command::Schema(a) => schema::run(a),
        Command::Serve(a) => serve::run(a),
        Command::Simulate(a) => simulate::run(a),
        Command::Store(c) => maintain::store(c),
        Command::Vacuum(a) => maintain::vacuum(a),
        Command::Demo(a) => demo::run(a),
    }
}

/// `--store`: a path, or an object-store URL; credentials come from the environment.
pub(crate) fn store_location(text: &str) -> Result<gpuledger_store::StoreLocation, String> {
    gpuledger_store::StoreLocation::parse(text).map_err(|e| e.to_string())
}

/// A size flag: `512MiB`, `4GiB`, `1.5G`, or bytes.
pub(crate) fn byte_size(text: &str) -> Result<u64, String> {
    gpuledger_schemas::units::parse_bytes(text)
}

/// A tokio runtime for the async ledger calls.
fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread().enable_all().build()?)
}
