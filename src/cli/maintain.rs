//! `gpuledger compact`, `gpuledger vacuum` and `gpuledger store ...`: keeping a store's Delta
//! tables few-filed and its disk use bounded, and bringing an older store up to date.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use chrono::NaiveDate;
use gpuledger_collector::ingest::Progress;
use gpuledger_store::StoreLocation;

use super::progress::{ProgressMode, Reporter};

/// Rewrite each closed day of each raw table, stored in many small files (the live collector
/// commits one per table per flush), as a few large files in the table's sort order, swapped in
/// by one commit per table and day. Readers running meanwhile see the old files or the new ones,
/// never both; writers may keep committing. The old files stay for readers that started before,
/// until `gpuledger vacuum` deletes them.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  gpuledger compact --store ./store                      every day before today (UTC)
  gpuledger compact --store s3://bucket/fleet --before 2026-11-01 --table gpu_samples
  gpuledger vacuum --store ./store --retain 7d           then free the space")]
pub struct CompactArgs {
    /// Store: a directory, or an object-store URL (s3://bucket/prefix, gs://..., az://...).
    #[arg(long, env = "GPULEDGER_STORE", value_parser = super::store_location)]
    store: StoreLocation,
    /// Compact the days before this one (YYYY-MM-DD). Default: today (UTC), so every closed day.
    #[arg(long)]
    before: Option<NaiveDate>,
    /// Only these tables (repeatable). Default: every raw table.
    #[arg(long = "table")]
    tables: Vec<String>,
    /// Size of the files written (e.g. 256MiB); a day larger than this becomes several files.
    #[arg(long, value_parser = super::byte_size, default_value = "256MiB")]
    target_size: u64,
    /// Progress: a bar on a terminal, lines otherwise.
    #[arg(long, value_enum, default_value = "auto")]
    progress: ProgressMode,
}

pub fn compact(args: CompactArgs) -> anyhow::Result<ExitCode> {
    use gpuledger_engine::compact;
    let before = args.before.unwrap_or_else(|| chrono::Utc::now().date_naive());
    let tables = (!args.tables.is_empty()).then_some(args.tables.as_slice());
    if let Some(t) = tables {
        for name in t {
            if !gpuledger_schemas::TABLES.iter().any(|x| x.name == name) {
                anyhow::bail!("--table {name}: no such raw table (see `gpuledger schema`)");
            }
        }
    }
    let started = Instant::now();
    let done = super::runtime()?.block_on(async {
        let days = compact::plan(&args.store, before, tables).await?;
        let reporter = Reporter::new(args.progress);
        reporter.start(days.len() as u64, days.iter().map(|d| d.bytes()).sum());
        let mut done = Vec::new();
        for day in &days {
            done.push(compact::compact_day(&args.store, day, args.target_size).await?);
            reporter.advance(day.bytes());
        }
        reporter.finish();
        anyhow::Ok(done)
    })?;
    let before_files: usize = done.iter().map(|d| d.files_before).sum();
    let after_files: usize = done.iter().map(|d| d.files_after).sum();
    let mib = |b: u64| b as f64 / 1048576.0;
    outln!(
        "compacted {} table-days before {before} in {:.1}s: {before_files} files ({:.1} MiB) -> {after_files} files ({:.1} MiB)",
        done.len(),
        started.elapsed().as_secs_f64(),
        mib(done.iter().map(|d| d.bytes_before).sum()),
        mib(done.iter().map(|d| d.bytes_after).sum()),
    )?;
    let mut per_table: std::collections::BTreeMap<&str, (usize, usize, usize, u64)> = Default::default();
    for d in &done {
        let e = per_table.entry(d.table).or_default();
        *e = (e.0 + 1, e.1 + d.files_before, e.2 + d.files_after, e.3 + d.rows);
    }
    for (table, (days, files_before, files_after, rows)) in per_table {
        outln!("  {table:<20} {days} days, {files_before} -> {files_after} files, {rows} rows")?;
    }
    if !done.is_empty() {
        outln!("the replaced files stay until `gpuledger vacuum --store {} --retain 7d` (readers that started earlier still read them)", args.store)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Delete the files no table version younger than --retain needs: files replaced by a
/// compaction (or by the ledger rewriting a derived table) more than --retain ago, and files a
/// crashed writer left uncommitted that are older than --retain. A reader that started before
/// a compaction reads the replaced files: keep --retain longer than any query or ledger run.
/// Also finishes publishing the derived tables of a ledger run killed while it published them,
/// and removes the staged tables of one killed before (not with --dry-run).
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  gpuledger vacuum --store ./store --retain 7d
  gpuledger vacuum --store s3://bucket/fleet --retain 1d --dry-run")]
pub struct VacuumArgs {
    /// Store: a directory, or an object-store URL.
    #[arg(long, env = "GPULEDGER_STORE", value_parser = super::store_location)]
    store: StoreLocation,
    /// Keep what a version younger than this needs (30m, 12h, 7d).
    #[arg(long, value_parser = gpuledger_schemas::units::parse_duration, default_value = "7d")]
    retain: Duration,
    /// Only say what would be deleted.
    #[arg(long)]
    dry_run: bool,
}

pub fn vacuum(args: VacuumArgs) -> anyhow::Result<ExitCode> {
    let rows = super::runtime()?.block_on(async {
        let mut rows = Vec::new();
        for table in gpuledger_schemas::TABLES {
            if args.store.is_delta_table(table.name).await? {
                rows.push((table.name, args.store.vacuum(table.name, args.retain, args.dry_run).await?));
            }
        }
        // A ledger run that stopped while publishing its tables: its set is published now; the
        // staged tables of one that stopped before are removed.
        let recovered = if args.dry_run { Default::default() } else { gpuledger_ledger::publish::recover(&args.store).await? };
        anyhow::Ok((rows, recovered))
    })?;
    let (rows, recovered) = rows;
    let total: usize = rows.iter().map(|(_, v)| v.files_deleted).sum();
    let verb = if args.dry_run { "would delete" } else { "deleted" };
    outln!("vacuum {verb} {total} files older than {}", gpuledger_schemas::units::format_duration(args.retain))?;
    // What killed writers (ingest, compaction, the ledger) left half written: `.<name>.<pid>.tmp`
    // files of processes that are gone.
    if let (Some(root), false) = (args.store.local(), args.dry_run) {
        let removed = gpuledger_store::atomic::remove_all_stale_temporaries(root)?;
        if removed > 0 {
            outln!("  removed {removed} temporary files that killed writers left")?;
        }
    }
    if let Some(run) = &recovered.rolled_forward {
        outln!("  published the derived tables of ledger run {run}, which stopped while publishing them")?;
    }
    if !recovered.abandoned.is_empty() {
        outln!("  removed the staged tables of {} ledger run(s) that stopped before publishing them", recovered.abandoned.len())?;
    }
    for (table, v) in rows.iter().filter(|(_, v)| v.files_deleted > 0) {
        outln!("  {table:<20} {} files", v.files_deleted)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The store itself: its format version, its tables' logs, the retention of its samples.
#[derive(Debug, clap::Subcommand)]
pub enum StoreCommand {
    Upgrade(UpgradeArgs),
    Status(StatusArgs),
    Expire(ExpireArgs),
}

/// Make a store written by an older gpuledger current.
///
/// Each raw table becomes a Delta table whose first version is the files already there (none
/// is rewritten), and tables get the columns this version added. Any writer does this on first
/// use; readers refuse an old store until it is done. Safe to run twice, and while readers run.
#[derive(Debug, clap::Args)]
pub struct UpgradeArgs {
    #[arg(long, env = "GPULEDGER_STORE", value_parser = super::store_location)]
    store: StoreLocation,
}

/// Files, bytes, rows and log version of each raw table, as a reader would see them now.
#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    #[arg(long, env = "GPULEDGER_STORE", value_parser = super::store_location)]
    store: StoreLocation,
}

/// Remove the samples of whole months past the retention, keeping those months' figures.
///
/// gpu_samples and metric_samples lose the files of every month before the horizon; the
/// ledger's later runs take those months' rows from the derived tables it wrote while the
/// samples were there. A month is removed only if the last `gpuledger ledger` run
/// read its samples as the store holds them now; otherwise nothing is removed and the message
/// says which months to account first. Kubernetes objects, events and Kueue records are kept.
/// The removed files stay on disk for readers that started before, until `gpuledger vacuum`.
/// The live collector does this on its own with [store] retention in its config.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  gpuledger store expire --store ./store --retention 400d --dry-run
  gpuledger store expire --store ./store --before 2026-01        every month before January 2026
  gpuledger store expire --store s3://bucket/fleet --config gpuledger.toml   [store] retention")]
pub struct ExpireArgs {
    #[arg(long, env = "GPULEDGER_STORE", value_parser = super::store_location)]
    store: StoreLocation,
    /// Keep the samples of the months within this long of today (UTC): 400d keeps at least
    /// 400 days, up to the start of that day's month. At least 31d.
    #[arg(long, value_parser = gpuledger_ledger::retention::parse_retention, conflicts_with = "before")]
    retention: Option<Duration>,
    /// Remove the months before this one (YYYY-MM).
    #[arg(long, value_parser = month_start)]
    before: Option<NaiveDate>,
    /// Configuration file whose [store] retention is used when neither flag is given.
    #[arg(long, env = "GPULEDGER_CONFIG")]
    config: Option<std::path::PathBuf>,
    /// Say what would be removed, and check that it may be, without removing anything.
    #[arg(long)]
    dry_run: bool,
}

fn month_start(text: &str) -> Result<NaiveDate, String> {
    NaiveDate::parse_from_str(&format!("{text}-01"), "%Y-%m-%d").map_err(|_| format!("{text:?} is not a month (YYYY-MM)"))
}

fn expire(args: ExpireArgs, rt: &tokio::runtime::Runtime) -> anyhow::Result<ExitCode> {
    use gpuledger_ledger::retention;
    let retention = match (args.retention, &args.config) {
        (Some(r), _) => Some(r),
        (None, Some(path)) if args.before.is_none() => super::config::load(path, super::config::Uses { ledger: false, serve: false })?.store.retention,
        _ => None,
    };
    let before = match (args.before, retention) {
        (Some(b), _) => b,
        (None, Some(r)) => retention::horizon(chrono::Utc::now().date_naive(), r),
        (None, None) => anyhow::bail!("say what to keep: --retention 400d, --before YYYY-MM, or a --config with [store] retention"),
    };
    let done = rt.block_on(retention::expire(&args.store, before, args.dry_run))?;
    let files: usize = done.tables.iter().map(|t| t.files).sum();
    if files == 0 {
        outln!("no samples before {before} in {}: nothing to remove", args.store)?;
        return Ok(ExitCode::SUCCESS);
    }
    let verb = if args.dry_run { "would remove" } else { "removed" };
    let mib = |b: u64| b as f64 / 1048576.0;
    outln!("{verb} the samples of {} ({} months before {before}): {files} files, {:.1} MiB", done.months.join(", "), done.months.len(), mib(done.tables.iter().map(|t| t.bytes).sum()))?;
    for t in done.tables.iter().filter(|t| t.files > 0) {
        outln!("  {:<20} {} files, {} rows, {:.1} MiB", t.table, t.files, t.rows, mib(t.bytes))?;
    }
    if !args.dry_run {
        outln!("ledger runs keep these months' figures; the files stay until `gpuledger vacuum --store {} --retain 7d`", args.store)?;
    }
    Ok(ExitCode::SUCCESS)
}

pub fn store(command: StoreCommand) -> anyhow::Result<ExitCode> {
    let rt = super::runtime()?;
    match command {
        StoreCommand::Expire(a) => return expire(a, &rt),
        StoreCommand::Upgrade(a) => {
            let done = rt.block_on(gpuledger_store::delta::upgrade(&a.store))?;
            for (table, e) in &done {
                let what = match (e.created, e.added_columns.is_empty()) {
                    (true, _) => format!("now a Delta table of its {} files", e.converted_files),
                    (false, false) => format!("added columns {}", e.added_columns.join(", ")),
                    (false, true) => "up to date".to_string(),
                };
                outln!("  {table:<20} {what}")?;
            }
            outln!("store {} is current ({} tables)", a.store, done.len())?;
        }
        StoreCommand::Status(a) => {
            outln!("{:<20} {:>8} {:>8} {:>12} {:>14} {:>6}", "table", "version", "files", "MiB", "rows", "days")?;
            for table in gpuledger_schemas::TABLES {
                let s = rt.block_on(a.store.snapshot(table.name))?;
                let Some(version) = s.version else { continue };
                let days: std::collections::BTreeSet<_> = s.files.iter().filter_map(|f| f.date.as_deref()).collect();
                let rows = s.rows().map_or("?".to_string(), |r| r.to_string());
                outln!("{:<20} {version:>8} {:>8} {:>12.1} {rows:>14} {:>6}", table.name, s.files.len(), s.bytes() as f64 / 1048576.0, days.len())?;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
