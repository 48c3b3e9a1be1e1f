//! `gpuledger ledger`: run the accounting in queries/ and write its derived tables to the store.

use gpuledger_store::StoreLocation;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use gpuledger_ledger::accounting::{Accounting, MemoMode, RunOptions};
use gpuledger_ledger::config::Config;
use gpuledger_engine::{Engine, MemoryStats};

use super::progress::ProgressMode;

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

/// Writes the derived tables of a finished run to the store and says on stderr what was written.
pub async fn write_derived(accounting: &Accounting, store: &StoreLocation, config: &Config, started: Instant) -> anyhow::Result<()> {
    let written = gpuledger_ledger::run::write_derived(accounting, store, config, None).await?;
    eprintln!("ledger: {} days of samples accounted in {:.1} s; tables written to {}:", accounting.days.len(), started.elapsed().as_secs_f64(), store.join("ledger/"));
    if let Some(m) = &accounting.memo {
        eprintln!(
            "  day tables: {} days computed, {} reused (first pass: {} computed, {} reused) in {}",
            m.pass2_computed,
            m.pass2_read,
            m.pass1_computed,
            m.pass1_read,
            store.join(gpuledger_ledger::days::DAYS_DIR)
        );
        print_computed_days(&m.computed);
    }
    if accounting.split_days > 0 {
        eprintln!("  {} days computed in parts of their nodes (more samples than the memory limit takes at once): {} units in the first pass, {} in the second", accounting.split_days, accounting.units.0, accounting.units.1);
    }
    for t in written {
        eprintln!("  {:<24} {:>9} rows {:>10.1} KiB", t.name, t.rows, t.bytes as f64 / 1024.0);
    }
    Ok(())
}

/// Which days a run computed and why (what changed since their day tables were kept); a long list
/// (a first run, a changed configuration) as counts per reason.
fn print_computed_days(computed: &[(String, String)]) {
    const LISTED: usize = 8;
    if computed.is_empty() {
        return;
    }
    if computed.len() <= LISTED {
        let days: Vec<String> = computed.iter().map(|(day, why)| format!("{day} ({why})")).collect();
        eprintln!("  computed: {}", days.join(", "));
        return;
    }
    let mut by_reason: std::collections::BTreeMap<&str, usize> = std::collections::BTreeMap::new();
    for (_, why) in computed {
        *by_reason.entry(why.as_str()).or_default() += 1;
    }
    let reasons: Vec<String> = by_reason.iter().map(|(why, n)| format!("{n} x {why}")).collect();
    eprintln!("  computed: {}", reasons.join("; "));
}

/// A store an older gpuledger wrote (raw tables without Delta logs) is converted on a writer's
/// first use, with a line saying so; nothing is rewritten.
pub async fn upgrade_store(store: &StoreLocation) -> anyhow::Result<()> {
    for (table, e) in gpuledger_store::delta::upgrade(store).await.with_context(|| format!("upgrading {store}"))? {
        if e.created && e.converted_files > 0 {
            eprintln!("gpuledger: {table}: converted to a Delta table (its {} files are its first version)", e.converted_files);
        }
    }
    Ok(())
}

/// The configuration file, or the defaults (with a note) when none is given.
pub fn load_config(path: Option<&Path>) -> anyhow::Result<Config> {
    match path {
        Some(p) => super::config::load(p, super::config::Uses { ledger: true, serve: false })?.ledger.context("internal error: a checked configuration without its ledger sections (this is a gpuledger bug, please report it)"),
        None => {
            eprintln!("gpuledger: no --config: every GPU-hour costs 2.0 USD, no overheads (see examples/gpuledger.toml)");
            Ok(Config::with_default_price(2.0))
        }
    }
}

const MIB: f64 = (1u64 << 20) as f64;

/// Runs the accounting on `engine` with progress lines on stderr, then names the bad
/// annotation values it ignored; also returns what the in-process memory pool saw.
pub async fn run_accounting(store: &StoreLocation, config: &Config, options: &RunOptions, engine: &Engine, progress: ProgressMode) -> anyhow::Result<(Accounting, Option<MemoryStats>)> {
    let terminal = std::io::stderr().is_terminal();
    let show = match progress {
        ProgressMode::Off => false,
        ProgressMode::On | ProgressMode::Auto => true,
    };
    let started = Instant::now();
    let mut last_line = Instant::now();
    let mut report = |p: gpuledger_ledger::accounting::Progress<'_>| {
        if !show {
            return;
        }
        let (pass, done, total, day) = (p.pass, p.done, p.total, p.day);
        // A terminal gets one line rewritten in place; a log gets a line every few seconds.
        if terminal {
            eprint!("\rgpuledger: accounting, {pass}, day {done}/{total} ({day}), {:.0} s", started.elapsed().as_secs_f64());
            if done == total {
                eprintln!();
            }
        } else if done == total || last_line.elapsed().as_secs() >= 5 {
            eprintln!("gpuledger: accounting, {pass}, day {done}/{total} ({day}), {:.0} s", started.elapsed().as_secs_f64());
            last_line = Instant::now();
        }
    };
    let (accounting, memory) = gpuledger_ledger::run::account(store, config, options, engine, &mut report).await.with_context(|| format!("accounting over {store}"))?;
    print_bad_annotations(&gpuledger_ledger::run::bad_annotations(&accounting).await?);
    for missing in gpuledger_ledger::run::missing_queue_objects(&accounting).await? {
        eprintln!("gpuledger: warning: {missing} is not in the capture: GPU Workloads waited for it, but it selects no node, so their waits strand no capacity");
    }
    Ok((accounting, memory))
}

/// Annotations the accounting ignored as bad input: counted, and the first few named, on stderr.
fn print_bad_annotations(lines: &[String]) {
    const SHOWN: usize = 10;
    if lines.is_empty() {
        return;
    }
    eprintln!("gpuledger: {} bad annotation value(s) ignored:", lines.len());
    for line in lines.iter().take(SHOWN) {
        eprintln!("  {line}");
    }
    if lines.len() > SHOWN {
        eprintln!("  ... and {} more (SELECT * FROM bad_annotations)", lines.len() - SHOWN);
    }
}
