//! `gpuledger ledger`: run the accounting in queries/ and write its derived tables to the store.

use gpuledger_store::StoreLocation;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use gpuledger_ledger::accounting::{MemoMode, RunOptions};
use gpuledger_engine::Engine;

use super::progress::ProgressMode;
use super::steps::{load_config, run_accounting, upgrade_store, write_derived};

/// Run the accounting (queries/*.sql) over the store and write the derived tables to
/// <STORE>/ledger/<table>.parquet (priced_state_hours, chargeback_monthly, run_failures,
/// queue_waits, ...; `gpuledger schema` lists them), published as one set: staged first, then
/// moved into place, so a reader sees this run's tables or the previous run's, never a mix,
/// even if the run is killed meanwhile (the next run or `vacuum` finishes what it left). Then
/// <STORE>/ledger/run.json, which says what they were computed from.
///
/// The day is the unit of work and of memory. The sample steps run once per day (and per part of
/// a day's nodes, when a day has more samples than the memory limit allows at once), in two
/// passes; what each day yields is written as day tables under <STORE>/ledger/days/<date>/, and
/// the monthly steps read those, never a month held in memory. --memory-limit (default: half of
/// the process's cgroup limit or of the machine's memory) sizes the parts and DataFusion's
/// pool, operators spill to --spill-dir beyond it, and the run prints its peak RSS at the end.
///
/// Incremental: each day's tables carry a digest of what they were computed from (the day's
/// sample files, the runs and pods it names, its GPUs' scrape intervals, the windows and objects
/// it reads, the settings). The next run computes only the days whose digest changed (a new
/// day, the day before it, days restated because a run that held GPUs on them settled, a changed
/// configuration) and reuses the others; the monthly steps run over all. A daily run after one
/// more day computes two to four days plus the monthly steps: measured at 256 GPUs x 30 days,
/// 18.6% of a full run (docs/ledger-runs.md). --full computes every day.
///
/// With --engine ballista the same plan runs on a Ballista cluster (`gpuledger ballista
/// scheduler|executor`): the executors write the day tables themselves.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  gpuledger ledger --store ./store --config gpuledger.toml
  gpuledger ledger --store ./store --config gpuledger.toml --memory-limit 2GiB --spill-dir /scratch
  gpuledger ledger --store ./store --config gpuledger.toml --full   # recompute every day
  gpuledger ledger --store s3://bucket/fleet --config gpuledger.toml --engine ballista --scheduler df://10.0.0.5:50050
  duckdb -c \"SELECT * FROM 'store/ledger/chargeback_monthly.parquet'\"")]
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
    /// Where the accounting runs.
    #[arg(long, value_enum, default_value = "in-process")]
    pub engine: EngineKind,
    /// The Ballista scheduler, df://HOST:PORT (with --engine ballista).
    #[arg(long, env = "GPULEDGER_SCHEDULER", required_if_eq("engine", "ballista"))]
    pub scheduler: Option<String>,
    /// Memory the run may use (e.g. 2GiB): a day too big for it is split into parts of its nodes,
    /// and operators spill to --spill-dir. The peak RSS is meant to stay within 1.25 times it
    /// plus 200 MiB; measured so on small fleets, not yet on large ones (docs/ledger-runs.md).
    /// Default: half of what the process may use (its cgroup's limit in a container or pod,
    /// else the machine's memory).
    #[arg(long, value_parser = super::byte_size)]
    pub memory_limit: Option<u64>,
    /// Directory for spill files (default: the system's temporary directory).
    #[arg(long)]
    pub spill_dir: Option<PathBuf>,
    /// Compute every day, ignoring the day tables earlier runs kept in <STORE>/ledger/days/
    /// (and keep the new ones there).
    #[arg(long)]
    pub full: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum EngineKind {
    /// DataFusion in this process.
    InProcess,
    /// A Ballista cluster (--scheduler).
    Ballista,
}

impl Args {
    /// The run's memory limit and where it came from.
    fn memory_limit(&self) -> Option<(u64, String)> {
        match self.memory_limit {
            Some(m) => Some((m, "--memory-limit".into())),
            None => gpuledger_engine::memory::default_limit().map(|(m, source)| (m, format!("half of {source}"))),
        }
    }

    fn engine(&self) -> anyhow::Result<Engine> {
        Ok(match self.engine {
            EngineKind::InProcess => Engine::InProcess { memory_limit: self.memory_limit().map(|(m, _)| m as usize), spill_dir: self.spill_dir.clone() },
            EngineKind::Ballista => {
                if !gpuledger_engine::BALLISTA_BUILT {
                    anyhow::bail!("--engine ballista {}", gpuledger_engine::BALLISTA_NOT_BUILT);
                }
                if self.memory_limit.is_some() || self.spill_dir.is_some() {
                    anyhow::bail!("--memory-limit and --spill-dir are for --engine in-process; give executors theirs (`gpuledger ballista executor --memory-limit`)");
                }
                Engine::Ballista { scheduler: self.scheduler.clone().context("--engine ballista needs --scheduler df://HOST:PORT")? }
            }
        })
    }
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    // The engine first: a wrong one is the user's first mistake to hear about.
    let engine = args.engine()?;
    let config = load_config(args.config.as_deref())?;
    let started = Instant::now();
    super::runtime()?.block_on(async {
        upgrade_store(&args.store).await?;
        let memo = if args.full { MemoMode::Write } else { MemoMode::ReadWrite };
        let options = RunOptions { memo, ..RunOptions::default() };
        let (mut accounting, memory) = run_accounting(&args.store, &config, &options, &engine, args.progress).await?;
        write_derived(&accounting, &args.store, &config, started).await?;
        accounting.clean_up().await?;
        if let Some(m) = memory {
            let limit = match args.memory_limit().filter(|_| args.engine == EngineKind::InProcess) {
                Some((l, from)) => format!("limit {:.1} MiB, {from}", l as f64 / MIB),
                None => "no limit".to_string(),
            };
            let peak = gpuledger_engine::exec::ProcessMemory::now().peak;
            eprintln!("  memory: peak RSS {:.1} MiB; operators held at most {:.1} MiB at once ({limit})", peak as f64 / MIB, m.peak_reserved as f64 / MIB);
        }
        anyhow::Ok(())
    })?;
    Ok(ExitCode::SUCCESS)
}

const MIB: f64 = (1u64 << 20) as f64;
