//! `gpuledger query`: SQL over the store through DataFusion.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use gpuledger_store::StoreLocation;
use clap::ValueEnum;
use gpuledger_ledger::Ledger;
use gpuledger_ledger::output::{OutputFormat, format_batches};

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Format {
    Table,
    Csv,
    Json,
}

/// Run SQL over the store. Every table of `gpuledger schema` is registered under its name, with
/// the `date` partition column: filter on it to read fewer files.
#[derive(Debug, clap::Args)]
#[command(after_help = "Example:\n  gpuledger query --store ./store \"SELECT date, count(*) FROM gpu_samples GROUP BY date ORDER BY date\"")]
pub struct Args {
    /// Store: a directory, or an object-store URL (s3://bucket/prefix, gs://..., az://...).
    #[arg(long, env = "GPULEDGER_STORE", value_parser = super::store_location)]
    store: StoreLocation,
    /// The SQL statement (or use -f).
    sql: Option<String>,
    /// Read the SQL from this file.
    #[arg(short = 'f', long = "file", conflicts_with = "sql")]
    file: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    format: Format,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let sql = match (&args.sql, &args.file) {
        (Some(s), _) => s.clone(),
        (None, Some(f)) => std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?,
        (None, None) => bail!("give the SQL as an argument or with -f FILE"),
    };
    let format = match args.format {
        Format::Table => OutputFormat::Table,
        Format::Csv => OutputFormat::Csv,
        Format::Json => OutputFormat::Json,
    };
    let text = super::runtime()?.block_on(async {
        let ledger = Ledger::open(&args.store).await?;
        let batches = ledger.query(&sql).await?;
        anyhow::Ok(format_batches(&batches, format)?)
    })?;
    std::io::stdout().write_all(text.as_bytes())?;
    Ok(ExitCode::SUCCESS)
}
