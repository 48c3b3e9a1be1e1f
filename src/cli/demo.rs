//! `gpuledger demo`: the main job on the embedded default: simulate a small cluster, ingest it
//! into a store, run the ledger, print the busiest month's chargeback and write the HTML and
//! FOCUS reports.

use gpuledger_collector::store::StoreOptions;
use gpuledger_store::StoreLocation;
use std::path::PathBuf;
use std::process::ExitCode;

use gpuledger_ledger::accounting::RunOptions;
use gpuledger_ledger::report::text::{TextFormat, render};
use gpuledger_ledger::report::{focus, html};

use super::progress::ProgressMode;
use super::summary::{self, SummaryFormat};
use super::{ingest, simulate, steps};

/// Simulate a small cluster, ingest its capture, run the ledger and report its busiest month:
/// the chargeback table on stdout, an HTML report and a FOCUS 1.2 dataset in the directory.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Working directory: the capture (<DIR>/capture), the store (<DIR>/store), the
    /// configuration used and the reports.
    #[arg(long = "out", alias = "dir", value_name = "DIR", default_value = "gpuledger-demo")]
    dir: PathBuf,
    /// GPUs in the simulated cluster (rounded up to whole nodes, at least one per node pool).
    #[arg(long, default_value_t = 16)]
    gpus: u32,
    /// Days of history, from 2026-10-30. With 9 or more, spend anomalies are scored (a team's
    /// day against its previous 7 to 14) and the simulator leaves a notebook holding a whole
    /// H100 node over the second-to-last day, which the report flags.
    #[arg(long, default_value_t = 10)]
    days: u32,
    /// Seconds between the simulated Prometheus scrapes of each DCGM exporter.
    #[arg(long, default_value_t = 120, value_name = "SECONDS")]
    scrape_interval: u32,
}

/// The demo's configuration: the example file, which prices the simulator's node pools.
const DEMO_CONFIG: &str = include_str!("../../examples/gpuledger.toml");

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let capture = args.dir.join("capture");
    let store = StoreLocation::Local(args.dir.join("store"));
    eprintln!("gpuledger: simulating {} GPUs for {} days into {}", args.gpus, args.days, capture.display());
    let sim = simulate::Args { out: Some(capture.clone()), store: None, progress: super::progress::ProgressMode::Off, format: SummaryFormat::Text, gpus: args.gpus, days: args.days, seed: 42, scrape_interval: args.scrape_interval, start: "2026-10-30T00:00:00Z".parse()?, emit_from: None, emit_until: None, dra_pod_labels: true };
    let s = simulate::simulate_with(&sim)?;
    eprintln!("gpuledger: {} files, {} samples written; ingesting into {store}", s.files, s.samples);
    let ingest_args = ingest::Args {
        paths: vec![capture],
        store: store.clone(),
        strict: false,
        progress: ProgressMode::Auto,
        format: SummaryFormat::Text,
        threads: None,
        max_line_bytes: gpuledger_collector::ingest::IngestOptions::default().max_line_bytes as u64,
        flush_rows: StoreOptions::default().flush_rows,
        flush_bytes: StoreOptions::default().flush_bytes as u64,
        verbose: false,
    };
    let summary = ingest::ingest_with(&ingest_args)?;
    out!("{}", summary::summary_text(&summary))?;
    let config = args.dir.join("gpuledger.toml");
    steps::write_atomically(&config, DEMO_CONFIG.as_bytes())?;
    eprintln!("gpuledger: running the ledger over {store} with {}", config.display());
    // One accounting run serves both the derived tables and the report.
    let loaded = steps::load_config(Some(&config))?;
    let started = std::time::Instant::now();
    let (report, focus) = super::runtime()?.block_on(async {
        let (accounting, _) = steps::run_accounting(&store, &loaded, &RunOptions::default(), &Default::default(), ProgressMode::Auto).await?;
        steps::write_derived(&accounting, &store, &loaded, started).await?;
        let report = steps::month_report(accounting.context(), &store, &loaded, None, None).await?;
        let focus = focus::write_focus(accounting.context(), &report.month, &report.currency, &loaded.focus, &args.dir, &format!("focus-{}", report.month)).await?;
        anyhow::Ok((report, focus))
    })?;
    let html_path = args.dir.join(format!("report-{}.html", report.month));
    steps::write_atomically(&html_path, html::render(&report).as_bytes())?;
    outln!("\n{}", render(&report, TextFormat::Table))?;
    outln!("Written:")?;
    outln!("  {}  (open in a browser: charts, budgets, failure causes, queue waits)", html_path.display())?;
    outln!("  {} and {}  (FinOps FOCUS 1.2, {} rows)", focus.csv.display(), focus.parquet.display(), focus.rows)?;
    outln!("\nNext:")?;
    let st = store.to_string();
    let cf = config.display();
    outln!("  gpuledger report --store {st} --config {cf} --month {} --format csv", report.month)?;
    outln!("  gpuledger ledger --store {st} --config {cf}      # derived tables into {st}/ledger/")?;
    outln!("  gpuledger query  --store {st} \"SELECT team, state, sum(gpu_hours) FROM priced_state_hours GROUP BY 1, 2\"")?;
    Ok(ExitCode::SUCCESS)
}
