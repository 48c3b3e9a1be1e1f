//! `gpuledger demo`: the main job on the embedded default: simulate a small cluster, ingest it
//! into a store, print the ingest summary and a first look at the data.

use std::path::PathBuf;
use std::process::ExitCode;

use gpuledger_ledger::Ledger;
use gpuledger_ledger::output::{OutputFormat, format_batches};

use super::progress::ProgressMode;
use super::{ingest, simulate};

/// Simulate a small cluster, ingest its capture and show what landed.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Working directory for the capture (<dir>/capture) and the store (<dir>/store).
    #[arg(long, default_value = "gpuledger-demo")]
    dir: PathBuf,
    /// GPUs in the simulated cluster.
    #[arg(long, default_value_t = 32)]
    gpus: u32,
    /// Days of history.
    #[arg(long, default_value_t = 3)]
    days: u32,
}

/// GPUs, samples and mean activity per namespace holding GPUs, as a first look (the ledger
/// issue turns this into GPU-hours and cost per team).
const FIRST_LOOK: &str = "\
SELECT coalesce(namespace, '(unallocated)') AS namespace,
       count(DISTINCT uuid) AS gpus,
       count(*) AS gpu_samples,
       round(avg(gpu_util), 1) AS avg_gpu_util,
       round(avg(engine_active), 3) AS avg_engine_active
FROM gpu_samples
GROUP BY 1
ORDER BY gpu_samples DESC";

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let capture = args.dir.join("capture");
    let store = args.dir.join("store");
    eprintln!("gpuledger: simulating {} GPUs for {} days into {}", args.gpus, args.days, capture.display());
    let sim = simulate::Args { out: capture.clone(), gpus: args.gpus, days: args.days, seed: 42, scrape_interval: 60, start: "2026-10-30T00:00:00Z".parse()? };
    let s = simulate::simulate_with(&sim)?;
    eprintln!("gpuledger: {} files, {} samples written; ingesting into {}", s.files, s.samples, store.display());
    let ingest_args = ingest::Args {
        paths: vec![capture],
        store: store.clone(),
        strict: false,
        progress: ProgressMode::Auto,
        format: ingest::SummaryFormat::Text,
        threads: None,
        flush_rows: 2_000_000,
        verbose: false,
    };
    let summary = ingest::ingest_with(&ingest_args)?;
    print!("{}", ingest::summary_text(&summary));
    let text = super::runtime()?.block_on(async {
        let ledger = Ledger::open(&store).await?;
        let batches = ledger.query(FIRST_LOOK).await?;
        anyhow::Ok(format_batches(&batches, OutputFormat::Table)?)
    })?;
    println!("\nFirst look (gpuledger query --store {} \"...\"):\n{text}", store.display());
    println!("Next: gpuledger schema, then gpuledger query --store {} \"SELECT ...\"", store.display());
    Ok(ExitCode::SUCCESS)
}
