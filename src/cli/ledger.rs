//! `gpuledger ledger`: run the accounting in queries/ and write its derived tables to the store.

use gpuledger_schemas::location::StoreLocation;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use gpuledger_ledger::Ledger;
use gpuledger_ledger::accounting::{Accounting, RunOptions};
use gpuledger_ledger::config::Config;

use super::progress::ProgressMode;

/// Run the accounting (queries/*.sql) over the store and write the derived tables to
/// <STORE>/ledger/<table>.parquet, each replaced atomically: gpu_state_hours, chargeback_monthly,
/// accepted_units_monthly, run_segments, run_failures, failure_causes, queue_waits,
/// queue_wait_summary, unobserved_gpu_hours.
#[derive(Debug, clap::Args)]
#[command(after_help = "Example:\n  gpuledger ledger --store ./store --config gpuledger.toml\n  duckdb -c \"SELECT * FROM 'store/ledger/chargeback_monthly.parquet'\"")]
pub struct Args {
    /// Store: a directory, or an object-store URL (s3://bucket/prefix, gs://..., az://...), written by `gpuledger ingest`.
    #[arg(long, env = "GPULEDGER_STORE", value_parser = super::store_location)]
    pub store: StoreLocation,
    /// Configuration file (TOML: [accounting], [prices], [[overheads]], [units]); see
    /// examples/gpuledger.toml. Without one, every GPU-hour costs 2.0 USD and nothing else is set.
    #[arg(long, env = "GPULEDGER_CONFIG")]
    pub config: Option<PathBuf>,
    /// Progress lines on stderr, one per day of samples.
    #[arg(long, value_enum, default_value = "auto")]
    pub progress: ProgressMode,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let config = load_config(args.config.as_deref())?;
    let started = Instant::now();
    super::runtime()?.block_on(async {
        let accounting = run_accounting(&args.store, &config, &RunOptions::default(), args.progress).await?;
        write_derived(&accounting, &args.store, started).await
    })?;
    Ok(ExitCode::SUCCESS)
}

/// Writes the derived tables of a finished run to the store and says what was written.
pub async fn write_derived(accounting: &Accounting, store: &StoreLocation, started: Instant) -> anyhow::Result<()> {
    let mut written = Vec::new();
    for (table, schema, batches) in accounting.derived_tables().await? {
        let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
        let bytes = gpuledger_ledger::derived::write(store, table, schema, &batches).await?;
        written.push((table, rows, bytes));
    }
    println!("ledger: {} days of samples accounted in {:.1} s; tables written to {}:", accounting.days.len(), started.elapsed().as_secs_f64(), store.join("ledger/"));
    for (table, rows, bytes) in written {
        println!("  {table:<24} {rows:>9} rows {:>10.1} KiB", bytes as f64 / 1024.0);
    }
    Ok(())
}

/// The configuration file, or the defaults (with a note) when none is given.
pub fn load_config(path: Option<&Path>) -> anyhow::Result<Config> {
    match path {
        Some(p) => Ok(Config::load(p)?),
        None => {
            eprintln!("gpuledger: no --config: every GPU-hour costs 2.0 USD, no overheads (see examples/gpuledger.toml)");
            Ok(Config::with_default_price(2.0))
        }
    }
}

/// Runs the accounting with progress lines on stderr.
pub async fn run_accounting(store: &StoreLocation, config: &Config, options: &RunOptions, progress: ProgressMode) -> anyhow::Result<Accounting> {
    let ctx = Ledger::accounting_session(store).await?;
    let terminal = std::io::stderr().is_terminal();
    let show = match progress {
        ProgressMode::Off => false,
        ProgressMode::On | ProgressMode::Auto => true,
    };
    let started = Instant::now();
    let mut last_line = Instant::now();
    let mut report = |done: usize, total: usize, day: &str| {
        if !show {
            return;
        }
        // A terminal gets one line rewritten in place; a log gets a line every few seconds.
        if terminal {
            eprint!("\rgpuledger: accounting day {done}/{total} ({day}), {:.0} s", started.elapsed().as_secs_f64());
            if done == total {
                eprintln!();
            }
        } else if done == total || last_line.elapsed().as_secs() >= 5 {
            eprintln!("gpuledger: accounting day {done}/{total} ({day}), {:.0} s", started.elapsed().as_secs_f64());
            last_line = Instant::now();
        }
    };
    Accounting::run(ctx, store, config, options, &mut report).await.with_context(|| format!("accounting over {store}"))
}
