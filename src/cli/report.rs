//! `gpuledger report`: one month's chargeback per team, for people (table, markdown, html) and
//! programs (csv, json, FOCUS).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use gpuledger_store::StoreLocation;
use clap::ValueEnum;
use gpuledger_ledger::accounting::{Accounting, MemoMode, RunOptions};
use gpuledger_ledger::record::Freshness;
use gpuledger_ledger::config::IdlePolicy;
use gpuledger_ledger::report::text::{TextFormat, render};
use gpuledger_ledger::report::{focus, html};
use gpuledger_ledger::types::Month;

use super::steps::{load_config, month_report, run_accounting, write_atomically};
use super::progress::ProgressMode;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Aligned table for a terminal.
    Table,
    /// One row per team, fixed columns (see below).
    Csv,
    /// The whole report as one JSON document.
    Json,
    /// GitHub-flavoured markdown tables.
    Markdown,
    /// One self-contained HTML page with charts.
    Html,
    /// FinOps FOCUS 1.2 dataset: <out>.csv and <out>.parquet.
    Focus,
    /// The budgets ([[budgets]]), one row per budgeted team (see below).
    BudgetsCsv,
    /// Why GPUs were idle: idle hours and cost per team, state and reason (see below).
    IdleCsv,
    /// Unallocated, stranded and cordoned GPU-hours per node pool (see below).
    StrandedCsv,
    /// Each team's day of GPU cost against its own recent days (see below).
    AnomaliesCsv,
    /// Nominal, used, borrowed and unused GPU quota per ClusterQueue and flavor (see below).
    QuotaCsv,
}

/// One month's GPU chargeback per team: GPU-hours by state, cost by component, accepted units
/// and cost per unit, top failure causes and queue waits.
///
/// When the last `gpuledger ledger` run stored its tables with the settings this configuration
/// gives (prices, overheads, idle policy, ...) and the store has not changed since, the report
/// reads them: no step of the accounting runs again. Otherwise it runs the accounting itself,
/// saying why on stderr, reusing the days that ledger run kept, and writes nothing to the store.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
The csv format has exactly these columns, one row per team (platform included):
  month,team,productive_gpu_hours,allocated_idle_gpu_hours,failed_gpu_hours,preempted_gpu_hours,
  unallocated_gpu_hours,compute,network,storage,support,idle,failed_runs,operations,total,
  accepted_units,cost_per_accepted_unit,lost_gpu_hours_platform_paid,lost_cost_platform_paid
cost_per_accepted_unit is empty where a team accepted no units. The last two say how much of a
team's failed and preempted time the platform paid for (hardware faults: [accounting]
hardware_failures; preemptions: [accounting] preemptions); that cost is in platform's failed_runs.

The budgets-csv format has these columns, one row per team with a [[budgets]] entry:
  month,team,budget,spend,forecast,used_ratio,forecast_ratio,elapsed_days,month_days
forecast is the month-end spend at the rate so far (GPU cost x month_days / elapsed_days plus
the month's overheads), the spend itself once the data has passed the month's end.

The idle-csv format ranks the month's idle time, costliest first:
  month,team,state,reason,gpu_hours,cost,rank
reason is startup, stall or teardown for a pod's allocated_idle time (before its first busy
sample on the GPU, between busy samples, after its last) and cordoned, stranded or no_demand for
unallocated time (node cordoned or not Ready; GPU Workloads waited for quota the node could have
served; nothing waited). cost is the price-list cost of the hours, before the idle policy.

The stranded-csv format has one row per node pool and GPU model (pool empty where no price
label matched):
  month,pool,model_name,unallocated_gpu_hours,stranded_gpu_hours,stranded_cost,cordoned_gpu_hours

The anomalies-csv format has one row per team and complete UTC day of the month:
  day,team,cost,baseline,spread,score,flagged
cost is the price-list cost of the team's own allocated GPU time that day; baseline the median
of its previous 14 observed days (empty before 7 of them); spread max(1.4826 x MAD, 5% of the
baseline); score (cost - baseline) / spread; flagged when score >= [anomalies] k (default 3).
Table, markdown, json and html name the GPUs and runs behind each flagged day.

The quota-csv format has one row per ClusterQueue and GPU flavor:
  month,cluster_queue,team,flavor,nominal_gpu_hours,used_gpu_hours,borrowed_gpu_hours,
  unused_gpu_hours,unused_cost
team is the queue's owner (its team label, else [[quota.owners]], else platform); borrowed and
unused are taken hour by hour; unused_cost is the unallocated cost of the flavor's nodes that
--idle-policy quota charges the owner for its unused quota (never more than that time).

GPU-hours of runs still running at the end of the data are provisional: table, markdown, json
and html mark them; a later report restates the month once the runs end.

Examples:
  gpuledger report --store ./store --config gpuledger.toml --month 2026-10
  gpuledger report --store ./store --config gpuledger.toml --month 2026-10 --format html --out oct.html
  gpuledger report --store ./store --config gpuledger.toml --month 2026-10 --format focus --out focus-2026-10")]
pub struct Args {
    /// Store: a directory, or an object-store URL (s3://bucket/prefix, gs://..., az://...), written by `gpuledger ingest`.
    #[arg(long, env = "GPULEDGER_STORE", value_parser = super::store_location)]
    pub store: StoreLocation,
    /// Configuration file (prices, overheads, idle policy); see examples/gpuledger.toml.
    #[arg(long, env = "GPULEDGER_CONFIG")]
    pub config: Option<PathBuf>,
    /// Month to report, YYYY-MM. Default: the month with the most GPU-hours.
    #[arg(long, value_name = "YYYY-MM")]
    pub month: Option<Month>,
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    pub format: Format,
    /// Write to this file instead of stdout (focus: the path without extension; default
    /// focus-<month> in the current directory).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Who pays for unallocated GPU time: `platform` keeps it on the platform team, `share`
    /// spreads its cost over teams by allocated GPU-hours, `quota` charges the owners of unused
    /// ClusterQueue quota on the idle GPUs' flavor. Overrides the configuration.
    #[arg(long)]
    pub idle_policy: Option<IdlePolicy>,
    /// Progress lines on stderr while the accounting runs.
    #[arg(long, value_enum, default_value = "auto")]
    pub progress: ProgressMode,
}

/// Where a report's figures come from: the tables the last `gpuledger ledger` run stored, when
/// they answer for this configuration and the store as it is, else a run of the accounting.
enum Source {
    Stored(gpuledger_ledger::Ledger),
    Computed(Accounting),
}

impl Source {
    fn context(&self) -> &datafusion::prelude::SessionContext {
        match self {
            Source::Stored(l) => l.context(),
            Source::Computed(a) => a.context(),
        }
    }
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let config = load_config(args.config.as_deref())?;
    let runtime = super::runtime()?;
    let (source, report) = runtime.block_on(async {
        let source = match gpuledger_ledger::record::freshness(&args.store, &config, args.idle_policy).await? {
            Freshness::Current(_) => Source::Stored(gpuledger_ledger::Ledger::open(&args.store).await?),
            stale => {
                eprintln!("gpuledger: report: computing the ledger: {}", stale.why_not().unwrap_or_default());
                // Days an earlier `gpuledger ledger` kept are reused; a report writes nothing to the store.
                let options = RunOptions { idle_policy: args.idle_policy, memo: MemoMode::Read, ..RunOptions::default() };
                Source::Computed(run_accounting(&args.store, &config, &options, &Default::default(), args.progress).await?.0)
            }
        };
        let report = month_report(source.context(), &args.store, &config, args.month.as_ref(), args.idle_policy).await?;
        anyhow::Ok((source, report))
    })?;
    let text = match args.format {
        Format::Table => render(&report, TextFormat::Table),
        Format::Csv => render(&report, TextFormat::Csv),
        Format::BudgetsCsv => render(&report, TextFormat::BudgetsCsv),
        Format::IdleCsv => render(&report, TextFormat::IdleCsv),
        Format::StrandedCsv => render(&report, TextFormat::StrandedCsv),
        Format::AnomaliesCsv => render(&report, TextFormat::AnomaliesCsv),
        Format::QuotaCsv => render(&report, TextFormat::QuotaCsv),
        Format::Json => render(&report, TextFormat::Json),
        Format::Markdown => render(&report, TextFormat::Markdown),
        Format::Html => html::render(&report),
        // Two files (CSV and Parquet), never stdout.
        Format::Focus => {
            let stem_path = args.out.clone().unwrap_or_else(|| PathBuf::from(format!("focus-{}", report.month)));
            let (dir, stem) = split_stem(&stem_path);
            let files = runtime.block_on(focus::write_focus(source.context(), &report.month, &report.currency, &config.focus, &dir, &stem))?;
            eprintln!("gpuledger: FOCUS 1.2 dataset for {}: {} rows in {} and {}", report.month, files.rows, files.csv.display(), files.parquet.display());
            return Ok(ExitCode::SUCCESS);
        }
    };
    match &args.out {
        Some(path) => {
            write_atomically(path, text.as_bytes())?;
            eprintln!("gpuledger: report for {} written to {}", report.month, path.display());
        }
        None => std::io::stdout().write_all(text.as_bytes())?,
    }
    Ok(ExitCode::SUCCESS)
}

fn split_stem(path: &Path) -> (PathBuf, String) {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from("."));
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "focus".into());
    let stem = name.strip_suffix(".csv").or_else(|| name.strip_suffix(".parquet")).unwrap_or(&name).to_string();
    (dir, stem)
}

