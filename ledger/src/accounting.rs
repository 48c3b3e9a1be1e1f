//! Runs the accounting in `queries/` over a store and hands back its derived tables.
//!
//! The SQL files are the accounting; this module only feeds them and decides what to
//! materialise. The files are written for a whole store at once (so an analyst can run them
//! anywhere); to keep memory bounded by one day of samples, the driver runs the sample steps
//! (`30_observations.sql` to `45_hourly.sql`) once per day partition, with `gpu_samples`
//! narrowed to that day and the last second before it, keeping only rows of that day. A first
//! pass over the days, last day first, gathers what the month's scrape intervals and the
//! observations after a day's last need (each GPU's first observation per day, spacing
//! counts); the second computes the spans. The object steps run once before, the monthly steps once after.
//! A day whose inputs did not change since an earlier run is read back from the store's day memo
//! (`crate::memo`) instead, in either pass.

use std::collections::BTreeMap;
use gpuledger_store::StoreLocation;
use std::sync::Arc;

use arrow::array::{ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use chrono::NaiveDate;
use datafusion::catalog::TableProvider;
use datafusion::datasource::MemTable;
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::listing::{ListingOptions, ListingTable, ListingTableConfig, ListingTableUrl};
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryLimit, MemoryPool};
use datafusion::prelude::{SessionContext, col, lit};

use crate::config::{Config, IdlePolicy, Money};
use crate::error::{Error, Result};
use crate::first_line;
use crate::kept;
use crate::memo::{DayIndex, DayMemo, Table};
pub use crate::memo::{MemoMode, MemoStats};

/// The accounting, one SQL file per step, in the order they run.
pub const QUERY_FILES: &[(&str, &str)] = &[
    ("10_objects.sql", include_str!("../../queries/10_objects.sql")),
    ("20_runs.sql", include_str!("../../queries/20_runs.sql")),
    ("25_capacity.sql", include_str!("../../queries/25_capacity.sql")),
    ("30_observations.sql", include_str!("../../queries/30_observations.sql")),
    ("31_intervals.sql", include_str!("../../queries/31_intervals.sql")),
    ("32_spans.sql", include_str!("../../queries/32_spans.sql")),
    ("40_states.sql", include_str!("../../queries/40_states.sql")),
    ("45_hourly.sql", include_str!("../../queries/45_hourly.sql")),
    ("50_units.sql", include_str!("../../queries/50_units.sql")),
    ("55_who_pays.sql", include_str!("../../queries/55_who_pays.sql")),
    ("60_chargeback.sql", include_str!("../../queries/60_chargeback.sql")),
    ("65_budgets.sql", include_str!("../../queries/65_budgets.sql")),
    ("67_energy.sql", include_str!("../../queries/67_energy.sql")),
    ("68_why_idle.sql", include_str!("../../queries/68_why_idle.sql")),
    ("70_queue.sql", include_str!("../../queries/70_queue.sql")),
    ("80_failures.sql", include_str!("../../queries/80_failures.sql")),
    ("90_reports.sql", include_str!("../../queries/90_reports.sql")),
];

/// Views computed once and kept as tables, because later steps read them many times.
const OBJECT_TABLES: &[&str] = &["pods_latest", "jobs_latest", "workloads_latest", "namespaces_latest", "nodes_latest", "pod_runs", "workload_segments"];

/// The windows in which nodes took no pods or GPU Workloads waited (`25_capacity.sql`): every
/// day's pieces are looked up in them.
const CAPACITY_TABLES: &[&str] = &["node_unavailable", "stranding_windows"];

/// Views kept as tables as soon as they are created, because the views after them, and the
/// derived tables, read them again (each read of a view recomputes it). As soon as created, not
/// later: a view is bound to the tables it reads when it is created, so a view created before
/// a table it reads was kept would go on computing that table's view.
const REUSED_VIEWS: &[&str] = &["pod_samples", "observation_starts", "mig_piece_parts", "run_segments", "queue_waits", "run_failures"];

/// The results of the sample steps (`40_states.sql`) that the monthly steps read: computed one
/// day at a time in process, then gathered.
const PER_DAY_TABLES: &[&str] = &["gpu_state_hours", "unobserved_gpu_hours", "gpu_pods", "lost_segment_gpus", "observed_extent"];

/// The hourly rollups of the readings (`45_hourly.sql`): computed one day at a time after the
/// sample steps, each day keeping the rows of its own partition (a day's pass also reads the
/// last second before it), then gathered.
const ROLLUP_TABLES: &[&str] = &["gpu_hourly", "node_hourly"];

/// What each day's second pass yields, gathered over the days: [`PER_DAY_TABLES`], then
/// [`ROLLUP_TABLES`], then the XID errors the monthly steps read.
const PASS2_TABLES: [&str; 8] = ["gpu_state_hours", "unobserved_gpu_hours", "gpu_pods", "lost_segment_gpus", "observed_extent", "gpu_hourly", "node_hourly", "xid_errors"];

/// The steps after the sample steps, once over the gathered results; then the report views
/// (`90_reports.sql`) over [`REPORTED_TABLES`].
const MONTHLY_FILES: [&str; 8] = ["50_units.sql", "55_who_pays.sql", "60_chargeback.sql", "65_budgets.sql", "67_energy.sql", "68_why_idle.sql", "70_queue.sql", "80_failures.sql"];

/// The derived tables the report views read, kept as tables as soon as they are created (as
/// [`REUSED_VIEWS`]): each report view reads them several times (report_focus reads
/// chargeback_monthly four times), and so do the monthly steps after them (budget_monthly
/// reads chargeback_monthly; run_segments reads priced_state_hours). Kept only at the end,
/// each had computed the monthly pipeline before it again: 13 s of a 256-GPU month's run.
pub const REPORTED_TABLES: [&str; 7] =
    ["priced_state_hours", "chargeback_monthly", "accepted_units_monthly", "budget_monthly", "energy_monthly", "idle_reasons_monthly", "stranded_monthly"];

/// The derived tables `gpuledger ledger` writes to the store, each stored under the name of
/// the view it comes from (`gpuledger_schemas::derived` declares their columns).
pub const DERIVED_TABLES: &[&str] = &[
    "priced_state_hours",
    "pod_runs",
    "unobserved_gpu_hours",
    "chargeback_monthly",
    "accepted_units_monthly",
    "budget_monthly",
    "energy_monthly",
    "idle_reasons_monthly",
    "stranded_monthly",
    "run_segments",
    "run_failures",
    "failure_causes",
    "queue_waits",
    "queue_wait_summary",
    "queue_wait_monthly",
    "gpu_hourly",
    "node_hourly",
];

/// What a caller can tune for one accounting run besides the configuration file.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Overrides the configuration's idle policy (`report --idle-policy`).
    pub idle_policy: Option<IdlePolicy>,
    /// Where the tables the run computes once and reads many times are kept.
    pub intermediates: Intermediates,
    /// Whether days whose inputs did not change are read back from the store's day memo
    /// (`crate::memo`) instead of computed, and whether computed days are kept there. In
    /// process only: a run on a cluster computes every day.
    pub memo: MemoMode,
}

/// Where a run keeps its intermediate tables (the configuration, the object steps' results,
/// the per-day results).
#[derive(Debug, Clone, Default)]
pub enum Intermediates {
    /// In this process's memory. The sample steps then run one day at a time, so memory is
    /// bounded by a day of samples.
    #[default]
    Memory,
    /// As Parquet files in a scratch directory of the store, readable by every process of a
    /// cluster (Ballista's executors do not share the client's memory). The sample steps run
    /// one day at a time, as in memory; each day's results are gathered in this process.
    Store(StoreLocation),
}

/// A finished accounting run: a session in which every step's view (and the derived tables)
/// can be queried.
pub struct Accounting {
    ctx: SessionContext,
    /// Day partitions of `gpu_samples` that were processed.
    pub days: Vec<String>,
    /// The scratch directory of [`Intermediates::Store`], removed by [`Accounting::clean_up`].
    scratch: Option<Scratch>,
    /// What the run read, recorded with its derived tables for retention.
    pub inputs: crate::retention::LedgerInputs,
    /// How many days the day memo gave back and how many were computed (none: not used).
    pub memo: Option<MemoStats>,
}

/// Months whose samples retention removed: their derived rows come from the previous run's
/// derived tables (`crate::retention`).
#[derive(Debug, Clone)]
struct Carry {
    location: StoreLocation,
    before: NaiveDate,
}

/// Intermediate tables as Parquet under `<store>/ledger/.work-<run>/`.
#[derive(Debug, Clone)]
struct Scratch {
    location: StoreLocation,
    dir: String,
}

/// Progress of the per-day steps: (days done, days in all, the day just done).
pub type DayProgress<'a> = &'a mut dyn FnMut(usize, usize, &str);

impl Accounting {
    /// Runs every step of the accounting over the store behind `ctx` (a session from
    /// [`crate::Ledger::store_session`], which registered the store's tables and the SQL functions).
    pub async fn run(ctx: SessionContext, store: &StoreLocation, config: &Config, options: &RunOptions, progress: DayProgress<'_>) -> Result<Accounting> {
        let scratch = match &options.intermediates {
            Intermediates::Memory => None,
            Intermediates::Store(location) => {
                Some(Scratch { location: location.clone(), dir: gpuledger_store::layout::work_rel(&gpuledger_store::layout::run_id()) })
            }
        };
        let result = Self::run_steps(ctx, store, config, options, progress, scratch.as_ref()).await;
        if let (Err(_), Some(s)) = (&result, &scratch) {
            // Best effort: the run's own error is the one to report.
            let _ = s.location.remove_dir(&s.dir).await;
        }
        result
    }

    async fn run_steps(ctx: SessionContext, store: &StoreLocation, config: &Config, options: &RunOptions, progress: DayProgress<'_>, scratch: Option<&Scratch>) -> Result<Accounting> {
        register_config(&ctx, config, options, scratch).await?;
        if let Some(s) = scratch {
            // The store's never-written tables are empty in-memory tables: files, for the cluster.
            for table in gpuledger_schemas::TABLES {
                if let Ok(p) = ctx.table_provider(table.name).await
                    && p.is::<MemTable>()
                {
                    keep_table(&ctx, table.name, p.schema(), Vec::new(), Some(s)).await?;
                }
            }
        }

        object_steps(&ctx, scratch).await?;
        let inputs = crate::retention::count_inputs(&ctx).await?;
        let carry = crate::retention::expired_before(store).await?.map(|before| Carry { location: store.clone(), before });

        let snapshot = store.snapshot("gpu_samples").await?;
        let days = sample_days(&snapshot);
        register_calendar(&ctx, days.first().map(String::as_str), days.last().map(String::as_str), scratch).await?;

        // The sample steps, one day partition at a time (on a cluster too: a month of a
        // thousand GPUs at once is more than two executors of one machine hold).
        let samples = ctx
            .deregister_table("gpu_samples")
            .map_err(|source| Error::Query { sql: "deregister gpu_samples".into(), source })?
            .ok_or_else(|| Error::Store { path: store.join("").into(), reason: "table gpu_samples is not registered".into() })?;
        // With no samples at all, one pass over an empty window still yields the schemas.
        let passes: Vec<Option<&String>> = if days.is_empty() { vec![None] } else { days.iter().map(Some).collect() };
        let mut memo = match options.memo {
            MemoMode::Off => None,
            // A cluster computes every day: the memo's digests would be more distributed jobs.
            _ if days.is_empty() || scratch.is_some() => None,
            mode => Some(DayMemo::open(&ctx, store, mode, &snapshot, &days).await?),
        };
        if memo.as_ref().is_some_and(DayMemo::reads) {
            // A day read back runs no SQL: every view of the first pass is created once, over
            // no samples, for the digests and the steps after.
            narrow_samples(&ctx, &samples, None)?;
            exec_file(&ctx, "30_observations.sql", scratch).await?;
            materialise(&ctx, "known_day_starts", "SELECT * FROM day_first_starts", scratch).await?;
            exec_file(&ctx, "31_intervals.sql", scratch).await?;
        }

        // Pass 1, last day first: each day's first observations and spacing counts. A day's last
        // observation may find its successor only days later: in a later day's first
        // observations, gathered before (`known_day_starts`).
        let mut starts: Option<Table> = None;
        let mut spacings: Option<Table> = None;
        let mut last_xids: Option<Table> = None;
        let mut active_bounds: Option<Table> = None;
        // Per day: its pass 1 digest and what narrows its pass 2 digest.
        let mut indexes: std::collections::HashMap<String, (u64, DayIndex)> = std::collections::HashMap::new();
        for day in passes.iter().rev() {
            let read = match (&memo, day) {
                (Some(m), Some(d)) => m.read_pass1(&ctx, d).await?,
                _ => None,
            };
            let (first, xids, bounds, spacing, pods, key) = match read {
                Some((key, tables)) => {
                    let [first, xids, bounds, spacing, pods] = <[Table; 5]>::try_from(tables).map_err(|_| Error::internal("the day memo's pass 1 is not five tables"))?;
                    (first, xids, bounds, Some(spacing), pods, Some(key))
                }
                None => {
                    narrow_samples(&ctx, &samples, day.map(String::as_str))?;
                    exec_file(&ctx, "30_observations.sql", scratch).await?;
                    let own = DayRows::number(*day);
                    let first = collect_day(&ctx, "day_first_starts", own, scratch).await?;
                    let xids = collect_day(&ctx, "day_last_xids", own, scratch).await?;
                    let bounds = collect_day(&ctx, "day_active_bounds", own, scratch).await?;
                    let pods = collect(&ctx, &day_pods_sql(*day)).await?;
                    let_go(&ctx, &["30_observations.sql"], &["observation_starts"])?;
                    (first, xids, bounds, None, pods, None)
                }
            };
            // Held to the end of the run: copied compact first (see `compacted`).
            let (first, xids, bounds, pods) = (compacted(first)?, compacted(xids)?, compacted(bounds)?, compacted(pods)?);
            gather(&mut starts, first.clone());
            gather(&mut last_xids, xids.clone());
            gather(&mut active_bounds, bounds.clone());
            if let Some((schema, batches)) = &starts {
                keep_table(&ctx, "known_day_starts", schema.clone(), batches.clone(), scratch).await?;
            }
            let spacing = match spacing {
                Some(s) => s,
                None => {
                    exec_file(&ctx, "31_intervals.sql", scratch).await?;
                    let spacing = collect_day(&ctx, "spacing_counts", DayRows::number(*day), scratch).await?;
                    let_go(&ctx, &["30_observations.sql", "31_intervals.sql"], &[])?;
                    spacing
                }
            };
            let spacing = compacted(spacing)?;
            gather(&mut spacings, spacing.clone());
            if let (Some(m), Some(d)) = (memo.as_mut(), day) {
                let index = DayIndex { gpus: first.clone(), pods: pods.clone() };
                let key = match key {
                    Some(k) => {
                        m.stats.pass1_read += 1;
                        k
                    }
                    None => {
                        m.stats.pass1_computed += 1;
                        let k = m.pass1_key(&ctx, d, &index).await?;
                        m.write_pass1(d, &[first, xids, bounds, spacing, pods]).await?;
                        k
                    }
                };
                indexes.insert((*d).clone(), (key, index));
            }
        }

        // Pass 2: the spans and states of each day, with the month's scrape intervals.
        if let Some((schema, batches)) = last_xids {
            keep_table(&ctx, "known_day_last_xids", schema, batches, scratch).await?;
        }
        if let Some((schema, batches)) = active_bounds {
            keep_table(&ctx, "known_active_bounds", schema, batches, scratch).await?;
        }
        if memo.is_some() {
            // What pass 2's digests read: the month's intervals, the pods' active bounds.
            if let Some((schema, batches)) = &spacings {
                keep_table(&ctx, "spacing_counts", schema.clone(), batches.clone(), scratch).await?;
            }
            exec_view(&ctx, "32_spans.sql", "scrape_intervals").await?;
            materialise(&ctx, "memo_intervals", crate::memo::INTERVALS_SQL, None).await?;
            materialise(&ctx, "memo_active_bounds", crate::memo::ACTIVE_BOUNDS_SQL, None).await?;
        }
        let last_day = days.last().cloned().unwrap_or_default();
        let mut gathered: Vec<Option<Table>> = vec![None; PASS2_TABLES.len()];
        // The gathered days are held until the month is done: counted, so that under a limit
        // the operators of later days see that much less room (a 256-GPU month's are ~300 MB).
        let gathered_bytes = MemoryConsumer::new("gathered day tables").register(&ctx.runtime_env().memory_pool);
        for (i, day) in passes.iter().enumerate() {
            let mut keys = None;
            let mut read = None;
            if let (Some(m), Some(d)) = (&memo, day)
                && let Some((pass1, index)) = indexes.get(d.as_str())
            {
                let pass2 = m.pass2_key(&ctx, d, *pass1, index, &last_day).await?;
                read = m.read_pass2(d, pass2, &PASS2_TABLES).await;
                keys = Some((*pass1, pass2));
            }
            let tables = match read {
                Some(tables) => {
                    if let Some(m) = memo.as_mut() {
                        m.stats.pass2_read += 1;
                    }
                    tables
                }
                None => {
                    let tables = day_pass2(&ctx, &samples, *day, spacings.as_ref(), scratch).await?;
                    if let (Some(m), Some(d), Some((pass1, pass2))) = (memo.as_mut(), day, keys) {
                        m.stats.pass2_computed += 1;
                        let why = m.why(d);
                        tracing::debug!(target: "gpuledger_ledger::memo", day = %d, changed = %why, "day computed");
                        m.stats.computed.push(((*d).clone(), why));
                        m.write_pass2(d, pass1, pass2, &PASS2_TABLES, &tables).await?;
                    }
                    tables
                }
            };
            for (into, table) in gathered.iter_mut().zip(tables) {
                let (schema, batches) = compacted(table)?;
                gathered_bytes.grow(batches.iter().map(RecordBatch::get_array_memory_size).sum());
                gather(into, (schema, batches));
            }
            if let Some(d) = day {
                progress(i + 1, days.len(), d);
            }
        }
        replace_table(&ctx, "gpu_samples", samples)?;
        // Every pass (at least one) yields each table, so each was gathered.
        for (table, (schema, batches)) in PASS2_TABLES.iter().zip(gathered.into_iter().flatten()) {
            gathered_bytes.shrink(batches.iter().map(RecordBatch::get_array_memory_size).sum::<usize>().min(gathered_bytes.size()));
            keep_table(&ctx, table, schema, batches, scratch).await?;
        }
        drop(gathered_bytes);
        if let Some(m) = &memo {
            m.prune(&days).await?;
        }

        monthly_steps(&ctx, scratch, carry.as_ref()).await?;
        Ok(Accounting { ctx, days, scratch: scratch.cloned(), inputs, memo: memo.map(|m| m.stats) })
    }

    /// Runs every step once over the tables `ctx` already holds (in memory, say), all days at
    /// once and without a store: how the SQL logic tests in `queries/tests/` run the accounting.
    /// The figures are those of a store run; only memory is not bounded by a day.
    pub async fn run_at_once(ctx: SessionContext, config: &Config, options: &RunOptions) -> Result<Accounting> {
        crate::udf::register(&ctx);
        register_config(&ctx, config, options, None).await?;
        object_steps(&ctx, None).await?;
        let (_, range) = collect(&ctx, "SELECT MIN(date), MAX(date) FROM gpu_samples").await?;
        let (first, last) = (strings(&range, 0).into_iter().flatten().next(), strings(&range, 1).into_iter().flatten().next());
        register_calendar(&ctx, first.as_deref(), last.as_deref(), None).await?;
        sample_and_monthly_steps(&ctx).await?;
        Ok(Accounting { ctx, days: Vec::new(), scratch: None, inputs: Default::default(), memo: None })
    }

    /// Removes the run's scratch files, if it kept its intermediates in the store. The
    /// session cannot answer queries over them afterwards.
    pub async fn clean_up(&mut self) -> Result<()> {
        match self.scratch.take() {
            Some(s) => Ok(s.location.remove_dir(&s.dir).await?),
            None => Ok(()),
        }
    }

    /// The session holding every view of the run.
    pub fn context(&self) -> &SessionContext {
        &self.ctx
    }

    /// Runs one query in the run's session.
    pub async fn query(&self, sql: &str) -> Result<Vec<RecordBatch>> {
        Ok(collect(&self.ctx, sql).await?.1)
    }

    /// Computes every derived table: (name, schema, rows).
    pub async fn derived_tables(&self) -> Result<Vec<(&'static str, SchemaRef, Vec<RecordBatch>)>> {
        let mut out = Vec::new();
        for name in DERIVED_TABLES {
            let (schema, batches) = collect(&self.ctx, &format!("SELECT * FROM {name}")).await?;
            out.push((*name, schema, batches));
        }
        Ok(out)
    }

    /// The month with the most GPU-hours (all states), the earliest on a tie.
    pub async fn busiest_month(&self) -> Result<Option<crate::types::Month>> {
        crate::monthly::busiest_month(&self.ctx).await
    }

    /// Months that have GPU time, overheads or units, oldest first.
    pub async fn months(&self) -> Result<Vec<crate::types::Month>> {
        crate::monthly::months(&self.ctx).await
    }
}

/// The object steps (`10`, `20`, `25`), keeping what the sample steps read many times.
async fn object_steps(ctx: &SessionContext, scratch: Option<&Scratch>) -> Result<()> {
    exec_file(ctx, "10_objects.sql", scratch).await?;
    exec_file(ctx, "20_runs.sql", scratch).await?;
    exec_file(ctx, "25_capacity.sql", scratch).await?;
    Ok(())
}

/// The sample steps over every day at once, then the monthly steps (the SQL logic tests).
async fn sample_and_monthly_steps(ctx: &SessionContext) -> Result<()> {
    let scratch = None;
    exec_file(ctx, "30_observations.sql", scratch).await?;
    materialise(ctx, "known_day_starts", "SELECT * FROM day_first_starts", scratch).await?;
    materialise(ctx, "known_day_last_xids", "SELECT * FROM day_last_xids", scratch).await?;
    materialise(ctx, "known_active_bounds", "SELECT * FROM day_active_bounds", scratch).await?;
    exec_file(ctx, "31_intervals.sql", scratch).await?;
    materialise(ctx, "spacing_counts", "SELECT * FROM spacing_counts", scratch).await?;
    exec_file(ctx, "32_spans.sql", scratch).await?;
    materialise(ctx, "sample_spans", "SELECT * FROM sample_spans", scratch).await?;
    exec_file(ctx, "40_states.sql", scratch).await?;
    exec_file(ctx, "45_hourly.sql", scratch).await?;
    for view in PER_DAY_TABLES.iter().chain(ROLLUP_TABLES).chain(&["xid_errors"]) {
        materialise(ctx, view, &format!("SELECT * FROM {view}"), scratch).await?;
    }
    monthly_steps(ctx, scratch, None).await
}

/// The monthly files, then the report views over the tables they read.
async fn monthly_steps(ctx: &SessionContext, scratch: Option<&Scratch>, carry: Option<&Carry>) -> Result<()> {
    for file in MONTHLY_FILES {
        exec_file(ctx, file, scratch).await?;
    }
    if let Some(c) = carry {
        carry_expired(ctx, c, scratch).await?;
    }
    create_report_views(ctx).await
}

/// Replaces each derived table that has a month (or an end) by its computed rows from the
/// horizon on and, before it, the rows the previous run wrote, when their samples were still
/// there (`crate::retention`).
async fn carry_expired(ctx: &SessionContext, carry: &Carry, scratch: Option<&Scratch>) -> Result<()> {
    const PREVIOUS: &str = "__previous_run";
    for name in DERIVED_TABLES {
        let Some(table) = gpuledger_schemas::derived::derived_table(name) else { continue };
        let Some(key) = crate::retention::carry_key(table) else { continue };
        let previous = crate::derived::register_as(ctx, &carry.location, name, PREVIOUS).await?;
        if previous.is_none() {
            tracing::warn!(table = name, before = %carry.before, "samples before the horizon were removed and the previous run's table is missing: the table has no rows before it");
        }
        let sql = crate::retention::carry_sql(table, key, previous.as_deref().map(|s| (PREVIOUS, s)), carry.before);
        materialise(ctx, name, &sql, scratch).await?;
        if previous.is_some() {
            ctx.deregister_table(PREVIOUS).map_err(|source| Error::Query { sql: format!("deregister {PREVIOUS}"), source })?;
        }
    }
    Ok(())
}

/// One day's second pass (`None`: the pass over no samples): its spans, states and hourly
/// rollups, as [`PASS2_TABLES`]. The month's spacing counts replace the day's own.
async fn day_pass2(ctx: &SessionContext, samples: &Arc<dyn TableProvider>, day: Option<&String>, spacings: Option<&Table>, scratch: Option<&Scratch>) -> Result<Vec<Table>> {
    narrow_samples(ctx, samples, day.map(String::as_str))?;
    exec_file(ctx, "30_observations.sql", scratch).await?;
    exec_file(ctx, "31_intervals.sql", scratch).await?;
    if let Some((schema, batches)) = spacings {
        keep_table(ctx, "spacing_counts", schema.clone(), batches.clone(), scratch).await?;
    }
    exec_file(ctx, "32_spans.sql", scratch).await?;
    let own = DayRows::date(day);
    if scratch.is_some() {
        let (schema, batches) = collect_day(ctx, "sample_spans", own, scratch).await?;
        keep_table(ctx, "sample_spans", schema, batches, scratch).await?;
    } else {
        materialise(ctx, "sample_spans", &format!("SELECT * FROM sample_spans{}", own.sql()), None).await?;
    }
    // Read off the day's samples and the second before: keep the day's own.
    let xids = collect_day(ctx, "xid_errors", DayRows::number(day), scratch).await?;
    // The states read the kept spans and the samples (for the hourly rollups), no longer what
    // the spans were made from: let the day's pod samples go before the states' joins need room.
    let_go(ctx, &["30_observations.sql", "31_intervals.sql", "32_spans.sql"], &["replica_samples", "counted_samples", "sample_spans", "spacing_counts", "scrape_intervals"])?;
    exec_file(ctx, "40_states.sql", scratch).await?;
    let mut out = Vec::with_capacity(PASS2_TABLES.len());
    for table in PER_DAY_TABLES {
        out.push(collect(ctx, &format!("SELECT * FROM {table}")).await?);
    }
    exec_file(ctx, "45_hourly.sql", scratch).await?;
    for table in ROLLUP_TABLES {
        out.push(collect_day(ctx, table, own, scratch).await?);
    }
    out.push(xids);
    // The monthly steps read the scrape intervals (over every day's spacing counts).
    let_go(ctx, &DAY_FILES, &["spacing_counts", "scrape_intervals"])?;
    Ok(out)
}

/// The sample steps, run once per day.
const DAY_FILES: [&str; 5] = ["30_observations.sql", "31_intervals.sql", "32_spans.sql", "40_states.sql", "45_hourly.sql"];

/// Drops the views (and tables kept in their place) that `files` create, but `keep`. A view
/// holds the tables it reads for as long as it is registered: a day's views, left until the
/// next day's replaced them, held its kept pod samples and spans (about 215 MB each at 256
/// GPUs) while the next day computed its own.
fn let_go(ctx: &SessionContext, files: &[&str], keep: &[&str]) -> Result<()> {
    for file in files {
        for view in split_statements(query_file(file)?).iter().filter_map(|s| created_view(s)) {
            if !keep.contains(&view.as_str()) {
                ctx.deregister_table(view.as_str()).map_err(|source| Error::Query { sql: format!("drop {view}"), source })?;
            }
        }
    }
    Ok(())
}

/// The pods the day's samples name (its pass 1 keeps them: they narrow its digests).
fn day_pods_sql(day: Option<&String>) -> String {
    let own = day.and_then(|d| day_start_ms(d)).map(|ms| format!(" AND t >= {ms}")).unwrap_or_default();
    format!("SELECT DISTINCT namespace, pod FROM pod_samples WHERE namespace IS NOT NULL AND pod IS NOT NULL{own} ORDER BY namespace, pod")
}

/// Narrows `gpu_samples` to what one day's pass reads: the day and the last second of the day
/// before (a sample there may start the observation a day's first sample belongs to). A day's
/// last observation finds the next one in `known_day_starts`. `None`: nothing.
fn narrow_samples(ctx: &SessionContext, samples: &Arc<dyn TableProvider>, day: Option<&str>) -> Result<()> {
    let filter = match day.zip(day.and_then(day_start_ms)) {
        Some((d, start_ms)) => {
            let ts = |ms: i64| lit(datafusion::scalar::ScalarValue::TimestampMillisecond(Some(ms), Some("UTC".into())));
            let dates = vec![lit(previous_day(d)), lit(d)];
            col("date").in_list(dates, false).and(col("ts").gt_eq(ts(start_ms - LOOKBEHIND_MS))).and(col("ts").lt(ts(start_ms + MS_PER_DAY)))
        }
        None => lit(false),
    };
    let narrowed = ctx
        .read_table(samples.clone())
        .and_then(|df| df.filter(filter))
        .map_err(|source| Error::Query { sql: "gpu_samples for one day".into(), source })?;
    replace_table(ctx, "gpu_samples", narrowed.into_view())
}

/// How far before midnight a day's pass reads: the 1000 ms that make one observation.
const LOOKBEHIND_MS: i64 = 1000;

pub(crate) const MS_PER_DAY: i64 = 86_400_000;

/// Milliseconds since the epoch at the start of a `YYYY-MM-DD` day (UTC).
pub(crate) fn day_start_ms(day: &str) -> Option<i64> {
    let d = NaiveDate::parse_from_str(day, "%Y-%m-%d").ok()?;
    Some(d.and_hms_opt(0, 0, 0)?.and_utc().timestamp_millis())
}

/// Which rows of a day's view are the day's own: by `day_number` (the SQL's days since the
/// epoch) or by the `date` partition. `All` for the pass over no samples.
#[derive(Debug, Clone, Copy, PartialEq)]
enum DayRows<'a> {
    All,
    Number(i64),
    Date(&'a str),
}

impl<'a> DayRows<'a> {
    fn number(day: Option<&String>) -> DayRows<'static> {
        match day.and_then(|d| day_start_ms(d)) {
            Some(ms) => DayRows::Number(ms / MS_PER_DAY),
            None => DayRows::All,
        }
    }

    fn date(day: Option<&'a String>) -> DayRows<'a> {
        day.map_or(DayRows::All, |d| DayRows::Date(d))
    }

    /// The `WHERE` clause that keeps them.
    fn sql(&self) -> String {
        match self {
            DayRows::All => String::new(),
            DayRows::Number(n) => format!(" WHERE day_number = {n}"),
            DayRows::Date(d) => format!(" WHERE date = '{d}'"),
        }
    }

    /// Keeps them of `batch`.
    fn filter(&self, batch: &RecordBatch) -> std::result::Result<RecordBatch, arrow::error::ArrowError> {
        let (column, value): (&str, ArrayRef) = match self {
            DayRows::All => return Ok(batch.clone()),
            DayRows::Number(n) => ("day_number", Arc::new(Int64Array::from(vec![*n]))),
            DayRows::Date(d) => ("date", Arc::new(StringArray::from(vec![*d]))),
        };
        let values = batch.column_by_name(column).ok_or_else(|| arrow::error::ArrowError::SchemaError(format!("no {column} column")))?;
        let value = arrow::compute::cast(&value, values.data_type())?;
        let own = arrow::compute::kernels::cmp::eq(values, &arrow::array::Scalar::new(value))?;
        arrow::compute::filter_record_batch(batch, &own)
    }
}

/// The rows of the view `view` that are the day's own. In memory the condition is part of the
/// query. On a cluster the rows are filtered here, after it: pushed below a window partitioned
/// by the day, `day_number = N` makes the day a constant that the sort under the window leaves
/// out, and the executor reading that sort's output from a shuffle no longer knows it is one
/// (Ballista 55: "Expects PARTITION BY expression to be ordered").
async fn collect_day(ctx: &SessionContext, view: &str, own: DayRows<'_>, scratch: Option<&Scratch>) -> Result<Table> {
    if scratch.is_none() {
        return collect(ctx, &format!("SELECT * FROM {view}{}", own.sql())).await;
    }
    let (schema, batches) = collect(ctx, &format!("SELECT * FROM {view}")).await?;
    let err = |e: arrow::error::ArrowError| Error::Query { sql: format!("SELECT * FROM {view}{} (after the query)", own.sql()), source: e.into() };
    Ok((schema, batches.iter().map(|b| own.filter(b).map_err(err)).collect::<Result<Vec<_>>>()?))
}

/// `table` with each batch copied into buffers of its own ([`kept::compact_batch`]). A day's
/// query results share buffers with what they were cut from (the pages decoded from a kept
/// table's file, an aggregate's whole output): gathered as they came, pass 1's small results
/// kept each day's larger buffers alive until the run ended. At 1,024 GPUs under a 2 GiB limit
/// the process grew by about 0.2 GiB a day through pass 1 (1.2 to 6.0 GiB in 25 days, the pool
/// flat at 0.5 GiB); compacted, it levels off at 2.5-3.9 GiB.
fn compacted((schema, batches): Table) -> Result<Table> {
    Ok((schema, batches.iter().map(kept::compact_batch).collect::<Result<Vec<_>>>()?))
}

/// Adds one day's result to what earlier passes gathered.
fn gather(into: &mut Option<(SchemaRef, Vec<RecordBatch>)>, (schema, batches): (SchemaRef, Vec<RecordBatch>)) {
    match into {
        Some((_, all)) => all.extend(batches),
        None => *into = Some((schema, batches)),
    }
}

pub(crate) fn previous_day(day: &str) -> String {
    NaiveDate::parse_from_str(day, "%Y-%m-%d")
        .ok()
        .and_then(|d| d.pred_opt())
        .map(|d| d.format("%Y-%m-%d").to_string())
        .unwrap_or_default()
}

/// `calendar_days`: one row per day from the day before `first` to the day after `last`
/// (`YYYY-MM-DD`), so that the SQL can split a gap of any length at every midnight.
async fn register_calendar(ctx: &SessionContext, first: Option<&str>, last: Option<&str>, scratch: Option<&Scratch>) -> Result<()> {
    let day_number = |d: Option<&str>| d.and_then(day_start_ms).map(|ms| ms / MS_PER_DAY);
    let days: Vec<i64> = match (day_number(first), day_number(last)) {
        (Some(a), Some(b)) if a <= b => ((a - 1)..=(b + 1)).collect(),
        _ => Vec::new(),
    };
    let hours: Vec<i64> = days.iter().flat_map(|d| (d * 24)..(d * 24 + 24)).collect();
    let b = batch(vec![("day_number", Arc::new(Int64Array::from(days)) as ArrayRef)])?;
    keep_table(ctx, "calendar_days", b.schema(), vec![b], scratch).await?;
    let b = batch(vec![("hour_number", Arc::new(Int64Array::from(hours)) as ArrayRef)])?;
    keep_table(ctx, "calendar_hours", b.schema(), vec![b], scratch).await
}

/// The configuration as small tables the SQL joins against.
async fn register_config(ctx: &SessionContext, config: &Config, options: &RunOptions, scratch: Option<&Scratch>) -> Result<()> {
    let a = &config.accounting;
    let policy = options.idle_policy.unwrap_or(a.idle_policy);
    let settings = batch(vec![
        ("team_label", text(vec![Some(a.team_label.clone())])),
        ("idle_policy", text(vec![Some(policy.as_str().to_string())])),
        ("active_threshold_engine", float(vec![a.active_threshold_engine])),
        ("active_threshold_util", float(vec![a.active_threshold_util])),
        ("max_gap_factor", float(vec![a.max_gap_factor])),
        ("default_price", money(vec![config.prices.default])?),
        ("currency", text(vec![Some(a.currency.clone())])),
        ("hardware_failures", text(vec![Some(a.hardware_failures.as_str().to_string())])),
        ("preemptions", text(vec![Some(a.preemptions.as_str().to_string())])),
        ("pue", float(vec![config.energy.pue])),
        ("grid_gco2_per_kwh", Arc::new(Float64Array::from(vec![config.energy.grid_gco2_per_kwh])) as ArrayRef),
    ])?;
    let xids = batch(vec![("xid", Arc::new(Int64Array::from(a.hardware_xids.clone())) as ArrayRef)])?;
    let labels = &config.prices.by_node_label;
    let by_label = batch(vec![
        ("rank", Arc::new(Int64Array::from_iter_values(0..labels.len() as i64)) as ArrayRef),
        ("label_key", text(labels.iter().map(|p| Some(p.label_key.clone())).collect())),
        ("label_value", text(labels.iter().map(|p| Some(p.label_value.clone())).collect())),
        ("price", money(labels.iter().map(|p| p.price).collect())?),
    ])?;
    let models = &config.prices.by_model;
    let by_model = batch(vec![
        ("model_name", text(models.iter().map(|(m, _)| Some(m.clone())).collect())),
        ("price", money(models.iter().map(|(_, p)| *p).collect())?),
    ])?;
    let mut o_month = Vec::new();
    let mut o_team = Vec::new();
    let mut o_component = Vec::new();
    let mut o_amount = Vec::new();
    for o in &config.overheads {
        for (component, amount) in [("network", o.network), ("storage", o.storage), ("support", o.support), ("operations", o.operations)] {
            if amount != Money::ZERO {
                o_month.push(Some(o.month.clone()));
                o_team.push(o.team.clone());
                o_component.push(Some(component.to_string()));
                o_amount.push(amount);
            }
        }
    }
    let overheads = batch(vec![("month", text(o_month)), ("team", text(o_team)), ("component", text(o_component)), ("amount", money(o_amount)?)])?;
    let u = &config.units;
    let extra_units = batch(vec![
        ("month", text(u.iter().map(|r| Some(r.month.clone())).collect())),
        ("team", text(u.iter().map(|r| Some(r.team.clone())).collect())),
        ("unit", text(u.iter().map(|r| Some(r.unit.clone())).collect())),
        ("accepted_units", float(u.iter().map(|r| r.accepted_units).collect())),
    ])?;
    let b = &config.budgets;
    let budgets = batch(vec![
        ("team", text(b.iter().map(|r| Some(r.team.clone())).collect())),
        ("month", text(b.iter().map(|r| r.month.clone()).collect())),
        ("amount", money(b.iter().map(|r| r.amount).collect())?),
    ])?;
    let tables = [
        ("settings", settings),
        ("price_by_node_label", by_label),
        ("price_by_model", by_model),
        ("overheads", overheads),
        ("extra_units", extra_units),
        ("hardware_xids", xids),
        ("budgets", budgets),
    ];
    for (name, b) in tables {
        keep_table(ctx, name, b.schema(), vec![b], scratch).await?;
    }
    Ok(())
}

fn text(values: Vec<Option<String>>) -> ArrayRef {
    Arc::new(StringArray::from(values))
}

fn float(values: Vec<f64>) -> ArrayRef {
    Arc::new(Float64Array::from(values))
}

/// Amounts of money as `DECIMAL(38, 6)`: exact micro-units, as the SQL sums them.
fn money(values: Vec<Money>) -> Result<ArrayRef> {
    let micros = arrow::array::Decimal128Array::from_iter_values(values.into_iter().map(Money::micros));
    Ok(Arc::new(micros.with_precision_and_scale(crate::udf::money::MONEY_PRECISION, crate::udf::money::MONEY_SCALE)?))
}

fn batch(columns: Vec<(&str, ArrayRef)>) -> Result<RecordBatch> {
    let fields: Vec<Field> = columns.iter().map(|(n, a)| Field::new(*n, a.data_type().clone(), true)).collect();
    let arrays = columns.into_iter().map(|(_, a)| a).collect();
    Ok(RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays)?)
}

pub(crate) fn replace_table(ctx: &SessionContext, name: &str, table: Arc<dyn TableProvider>) -> Result<()> {
    let err = |source| Error::Query { sql: format!("register {name}"), source };
    ctx.deregister_table(name).map_err(err)?;
    ctx.register_table(name, table).map_err(err)?;
    Ok(())
}

/// Creates the report views of `queries/90_reports.sql` in a session holding the derived tables.
pub async fn create_report_views(ctx: &SessionContext) -> Result<()> {
    exec_file(ctx, "90_reports.sql", None).await
}

/// Runs every statement of one query file (they create views).
async fn exec_file(ctx: &SessionContext, file: &str, scratch: Option<&Scratch>) -> Result<()> {
    let _timer = Timer::start(ctx, file);
    for statement in split_statements(query_file(file)?) {
        // A view of the same name may exist as a table from an earlier day: drop it first.
        if let Some(view) = created_view(&statement) {
            ctx.deregister_table(view.as_str()).map_err(|source| Error::Query { sql: format!("{file}: drop {view}"), source })?;
        }
        ctx.sql(&statement).await.map_err(|source| Error::Query { sql: format!("{file}: {}", first_line(&statement)), source })?;
        if let Some(view) = created_view(&statement).filter(|v| kept_on_creation(v)) {
            materialise(ctx, &view, &format!("SELECT * FROM {view}"), scratch).await?;
        }
    }
    Ok(())
}

/// Whether the view `name` is kept as a table as soon as its statement has run: the object and
/// capacity tables, [`REUSED_VIEWS`] and [`REPORTED_TABLES`]. Views created after it then read
/// the table (a view is bound to what it reads when it is created: kept only after 20_runs.sql
/// had run, pod_runs went on computing jobs_latest nine times over, 7.9 s of a 256-GPU month).
fn kept_on_creation(name: &str) -> bool {
    [OBJECT_TABLES, CAPACITY_TABLES, REUSED_VIEWS, &REPORTED_TABLES].iter().any(|list| list.contains(&name))
}

/// The text of the query file `file`.
fn query_file(file: &str) -> Result<&'static str> {
    QUERY_FILES
        .iter()
        .find(|(name, _)| *name == file)
        .map(|(_, sql)| *sql)
        .ok_or_else(|| Error::Store { path: file.into(), reason: "no such query file".into() })
}

/// Runs the one statement of `file` that creates `view` (a view over tables already there).
async fn exec_view(ctx: &SessionContext, file: &str, view: &str) -> Result<()> {
    let statement = split_statements(query_file(file)?)
        .into_iter()
        .find(|s| created_view(s).as_deref() == Some(view))
        .ok_or_else(|| Error::internal(format!("{file} creates no view {view}")))?;
    ctx.deregister_table(view).map_err(|source| Error::Query { sql: format!("{file}: drop {view}"), source })?;
    ctx.sql(&statement).await.map_err(|source| Error::Query { sql: format!("{file}: {}", first_line(&statement)), source })?;
    Ok(())
}

/// The view name of a `CREATE [OR REPLACE] VIEW name AS` statement.
fn created_view(statement: &str) -> Option<String> {
    let words: Vec<&str> = statement.split_whitespace().take(6).collect();
    let i = words.iter().position(|w| w.eq_ignore_ascii_case("VIEW"))?;
    words.get(i + 1).map(|w| w.to_string())
}

/// Splits a SQL file into statements: a statement ends with `;` at the end of a line.
/// Comment lines are dropped, so a `;` in a comment does not end anything.
pub fn split_statements(sql: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in sql.lines() {
        if line.trim_start().starts_with("--") {
            continue;
        }
        current.push_str(line);
        current.push('\n');
        if line.trim_end().ends_with(';') {
            let statement = current.trim().trim_end_matches(';').to_string();
            if !statement.is_empty() {
                out.push(statement);
            }
            current.clear();
        }
    }
    if !current.trim().is_empty() {
        out.push(current.trim().to_string());
    }
    out
}

pub(crate) async fn collect(ctx: &SessionContext, sql: &str) -> Result<(SchemaRef, Vec<RecordBatch>)> {
    let _timer = Timer::start(ctx, &first_line(sql));
    let err = |source| Error::Query { sql: first_line(sql), source };
    let df = ctx.sql(sql).await.map_err(err)?;
    let planned: SchemaRef = Arc::new(df.schema().as_arrow().clone());
    let batches = df.collect().await.map_err(err)?;
    // Execution may settle nullability differently from planning: the batches have the last word.
    let schema = batches.first().map(|b| b.schema()).unwrap_or(planned);
    Ok((schema, batches))
}

/// Replaces the view `name` with a table holding the result of `sql`.
async fn materialise(ctx: &SessionContext, name: &str, sql: &str, scratch: Option<&Scratch>) -> Result<()> {
    let limited = matches!(ctx.runtime_env().memory_pool.memory_limit(), MemoryLimit::Finite(_));
    if scratch.is_some() || !limited {
        // Collected: the first batch in partition order sets the table's nullability, as the
        // declared schemas expect (a UNION's branches may differ, and a stream's first batch
        // comes from whichever branch is ready first).
        let (schema, batches) = collect(ctx, sql).await?;
        return keep_table(ctx, name, schema, batches, scratch).await;
    }
    // Under a memory limit, streamed into the kept table: a large result goes to disk as it
    // comes, rather than being whole in memory first.
    let _timer = Timer::start(ctx, &first_line(sql));
    let err = |source| Error::Query { sql: first_line(sql), source };
    let rows = ctx.sql(sql).await.map_err(err)?.execute_stream().await.map_err(err)?;
    replace_table(ctx, name, kept::stream(ctx, name, rows).await?)
}

/// Registers `batches` as the table `name`: in memory, or as a scratch Parquet file.
async fn keep_table(ctx: &SessionContext, name: &str, schema: SchemaRef, batches: Vec<RecordBatch>, scratch: Option<&Scratch>) -> Result<()> {
    let Some(s) = scratch else {
        return replace_table(ctx, name, kept::table(ctx, name, schema, batches)?);
    };
    let rel = format!("{}/{name}.parquet", s.dir);
    gpuledger_store::write_parquet(&s.location, &rel, schema.clone(), &batches, gpuledger_store::derived_properties(name)).await?;
    let err = |source| Error::Query { sql: format!("register {name}"), source };
    let url = ListingTableUrl::parse(s.location.join(&rel)).map_err(err)?;
    let options = ListingOptions::new(Arc::new(ParquetFormat::default())).with_file_extension(".parquet");
    // Read back with every column nullable, as an outer join may make any of them: Ballista 55
    // keeps a scratch column's non-null declaration on the inner side of an outer join, and the
    // nulls the join adds then fail its shuffle writer (seen with node_unavailable).
    let nullable: SchemaRef = Arc::new(Schema::new(schema.fields().iter().map(|f| f.as_ref().clone().with_nullable(true)).collect::<Vec<Field>>()));
    let config = ListingTableConfig::new(url).with_listing_options(options).with_schema(nullable);
    replace_table(ctx, name, Arc::new(ListingTable::try_new(config).map_err(err)?))
}

/// Each step's wall time, as a `debug` event of target [`TIMINGS`] (to see where time goes:
/// `GPULEDGER_LOG=gpuledger_ledger::timings=debug`).
struct Timer {
    what: Option<(String, std::time::Instant, Arc<dyn MemoryPool>)>,
}

/// The log target of the step timings.
pub const TIMINGS: &str = "gpuledger_ledger::timings";

impl Timer {
    fn start(ctx: &SessionContext, what: &str) -> Timer {
        let on = tracing::enabled!(target: TIMINGS, tracing::Level::DEBUG);
        Timer { what: on.then(|| (what.to_string(), std::time::Instant::now(), Arc::clone(&ctx.runtime_env().memory_pool))) }
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        if let Some((what, started, pool)) = &self.what {
            let (rss_mib, peak_rss_mib) = process_memory();
            let pool_mib = pool.reserved() >> 20;
            tracing::debug!(target: TIMINGS, step = %what, seconds = started.elapsed().as_secs_f64(), rss_mib, peak_rss_mib, pool_mib, "step done");
        }
    }
}

/// The process's resident memory now and at its peak so far, in MiB (Linux; 0 elsewhere): with
/// the step timings they show which step set the peak and how far it is above the memory pool.
fn process_memory() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib = |key: &str| status.lines().find_map(|l| l.strip_prefix(key)?.split_whitespace().next()?.parse::<u64>().ok()).unwrap_or(0);
    (kib("VmRSS:") / 1024, kib("VmHWM:") / 1024)
}

/// The days `gpu_samples` holds rows of (its log's partitions), oldest first.
fn sample_days(snapshot: &gpuledger_store::Snapshot) -> Vec<String> {
    let days: std::collections::BTreeSet<&str> =
        snapshot.files.iter().filter_map(|f| f.date.as_deref()).filter(|d| NaiveDate::parse_from_str(d, "%Y-%m-%d").is_ok()).collect();
    days.into_iter().map(str::to_string).collect()
}

/// Column `i` of `batches` as strings (any string-like or numeric type, via a cast).
pub fn strings(batches: &[RecordBatch], i: usize) -> Vec<Option<String>> {
    let mut out = Vec::new();
    for b in batches {
        let Ok(a) = arrow::compute::cast(b.column(i), &DataType::Utf8) else { continue };
        if let Some(s) = a.as_any().downcast_ref::<StringArray>() {
            out.extend(s.iter().map(|v| v.map(str::to_string)));
        }
    }
    out
}

/// Rows of `batches` as maps from column name to JSON value (reports, the HTTP API).
pub fn rows(batches: &[RecordBatch]) -> Result<Vec<BTreeMap<String, serde_json::Value>>> {
    let mut buf = Vec::new();
    {
        let mut w = arrow::json::ArrayWriter::new(&mut buf);
        let refs: Vec<&RecordBatch> = batches.iter().collect();
        w.write_batches(&refs)?;
        w.finish()?;
    }
    if buf.is_empty() {
        return Ok(Vec::new());
    }
    serde_json::from_slice(&buf).map_err(|e| Error::Output(arrow::error::ArrowError::JsonError(e.to_string())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_split_at_line_end_semicolons() {
        let sql = "-- a comment; not an end\nCREATE VIEW a AS\nSELECT 1;\n\n-- x\nCREATE OR REPLACE VIEW b AS SELECT ';' AS s;\n";
        let s = split_statements(sql);
        assert_eq!(s.len(), 2);
        assert_eq!(s[0], "CREATE VIEW a AS\nSELECT 1");
        assert_eq!(created_view(&s[1]).as_deref(), Some("b"));
    }

    #[test]
    fn every_query_file_is_embedded_in_order() {
        let names: Vec<&str> = QUERY_FILES.iter().map(|(n, _)| *n).collect();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted);
        let on_disk = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../queries"))
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".sql"))
            .count();
        assert_eq!(on_disk, names.len(), "a queries/*.sql file is not run by the ledger");
    }

    #[test]
    fn the_second_pass_yields_the_per_day_tables_then_the_rollups_then_the_xid_errors() {
        let want: Vec<&str> = PER_DAY_TABLES.iter().chain(ROLLUP_TABLES).chain(&["xid_errors"]).copied().collect();
        assert_eq!(PASS2_TABLES.to_vec(), want);
    }

    #[test]
    fn days_roll_over_months() {
        assert_eq!(previous_day("2026-11-01"), "2026-10-31");
        assert_eq!(previous_day("2027-01-01"), "2026-12-31");
        assert_eq!(day_start_ms("1970-01-02"), Some(MS_PER_DAY));
        assert_eq!(DayRows::number(Some(&"1970-01-03".to_string())).sql(), " WHERE day_number = 2");
        assert_eq!(DayRows::number(None).sql(), "");
    }

    #[test]
    fn a_days_own_rows_are_kept_by_number_or_by_date_of_any_string_type() {
        use arrow::array::{Array, StringViewArray};
        let schema = Arc::new(Schema::new(vec![Field::new("date", DataType::Utf8View, false), Field::new("day_number", DataType::Int64, false)]));
        // 2026-11-02 is day 20,759 since the epoch; the first row is the last second before it.
        let dates: ArrayRef = Arc::new(StringViewArray::from(vec!["2026-11-01", "2026-11-02", "2026-11-02"]));
        let numbers: ArrayRef = Arc::new(Int64Array::from(vec![20_758, 20_759, 20_759]));
        let batch = RecordBatch::try_new(schema, vec![dates, numbers]).unwrap();
        let day = "2026-11-02".to_string();
        for own in [DayRows::date(Some(&day)), DayRows::number(Some(&day))] {
            let kept = own.filter(&batch).unwrap();
            assert_eq!(kept.num_rows(), 2, "{own:?}");
            assert_eq!(kept.column(1).as_any().downcast_ref::<Int64Array>().unwrap().values().to_vec(), vec![20_759, 20_759], "{own:?}");
            assert_eq!(kept.column(0).len(), 2);
        }
        assert_eq!(DayRows::All.filter(&batch).unwrap().num_rows(), 3);
        assert_eq!(DayRows::Number(1).filter(&batch).unwrap().num_rows(), 0);
        let no_day = RecordBatch::try_new(Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)])), vec![Arc::new(Int64Array::from(vec![1]))]).unwrap();
        assert!(DayRows::Number(1).filter(&no_day).is_err(), "a table without the day's column is an error, not every row");
    }
}
