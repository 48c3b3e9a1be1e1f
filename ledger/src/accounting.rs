//! Runs the accounting in `queries/` over a store and hands back its derived tables.
//!
//! The SQL files are the accounting; this module only feeds them, following the day plan
//! (`crate::plan`): the object steps once, the sample steps once per unit (a day, or a part of a
//! day's nodes) in two passes, each unit's results written as day tables (`crate::days`), then
//! the monthly steps once over those. A day whose inputs did not change since an earlier run
//! reuses its stored day tables, in either pass.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array, RecordBatch};
use datafusion::catalog::TableProvider;
use datafusion::datasource::MemTable;
use datafusion::error::DataFusionError;
use datafusion::prelude::{SessionContext, col, lit};
use gpuledger_engine::exec::{collect, drop_table, replace_table};
use gpuledger_engine::files::{Keeping, Written, parquet_table, write_here, write_on_engine};
use gpuledger_store::StoreLocation;

pub use crate::calendar::MS_PER_DAY;
use crate::calendar::{day_number, day_start_ms, previous_day};
use crate::config::{Config, IdlePolicy};
pub use crate::days::{MemoMode, MemoStats};
use crate::days::{ACTIVE_BOUNDS_SQL, DayTables, INTERVALS_SQL, Scratch};
use crate::error::{Error, Result};
pub use crate::plan::{DERIVED_TABLES, REPORTED_TABLES};
use crate::plan::{MONTH_TABLES, MONTH_VIEWS, MONTHLY_FILES, MONTHLY_KEEPS, OBJECT_FILES, OBJECT_KEEPS, Own, PASS1, PASS2, Pass};
pub use crate::steps::create_report_views;
use crate::steps::{Keeper, drop_views, exec_file, exec_view};
pub use gpuledger_engine::exec::{TIMINGS, rows, strings};

/// A view a step keeps as a table, and whose rows it owns.
type KeptView = (&'static str, Own);

/// What a caller can tune for one accounting run besides the configuration file.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Overrides the configuration's idle policy (`report --idle-policy`).
    pub idle_policy: Option<IdlePolicy>,
    /// Whether stored day tables are reused, and computed ones kept in the store.
    pub memo: MemoMode,
    /// Where the run's workers are, and so where it keeps its intermediate tables.
    pub workers: Workers,
    /// The most `gpu_samples` rows one unit reads: a day of more is split into parts of its
    /// nodes (`None`: every day is one unit).
    pub unit_rows: Option<u64>,
}

/// Where the accounting runs, and so where it keeps what it computes once and reads many times.
#[derive(Debug, Clone, Default)]
pub enum Workers {
    /// In this process: kept tables in memory (or the spill directory), scratch files in a
    /// temporary directory under `scratch_dir` (the system's by default), removed at the end.
    #[default]
    InProcess,
    /// Under a directory of the caller's choosing (the spill directory).
    InProcessAt(std::path::PathBuf),
    /// On a cluster: everything the executors read is a file of the store's scratch directory
    /// `ledger/.work-<run>/`, removed at the end.
    Cluster,
}

/// The progress of a run: which pass, how many days of it are done, the day just done.
#[derive(Debug, Clone, Copy)]
pub struct Progress<'a> {
    pub pass: &'static str,
    pub done: usize,
    pub total: usize,
    pub day: &'a str,
}

/// Progress of the per-day steps.
pub type DayProgress<'a> = &'a mut dyn FnMut(Progress<'_>);

/// A finished accounting run: a session in which every step's view (and the derived tables)
/// can be queried.
pub struct Accounting {
    ctx: SessionContext,
    /// Day partitions of `gpu_samples` that were processed.
    pub days: Vec<String>,
    /// What the run read, recorded with its derived tables for retention.
    pub inputs: crate::retention::LedgerInputs,
    /// The version of each raw table the run read (`crate::record`).
    pub versions: std::collections::BTreeMap<String, Option<u64>>,
    /// How many days the stored day tables gave and how many were computed (none: not used).
    pub memo: Option<MemoStats>,
    /// Units computed per pass (a day split into parts counts each part).
    pub units: (usize, usize),
    /// Days computed in more than one part (more samples than a unit may read under the limit).
    pub split_days: usize,
    /// The run's scratch directory: removed by [`Accounting::clean_up`] (a local one also when
    /// the run is dropped).
    scratch: Option<ScratchDir>,
}

/// Where a run's scratch files are, and what removes them.
enum ScratchDir {
    /// Held for its drop, which removes the directory.
    Local { _dir: tempfile::TempDir },
    Store(Scratch),
}

/// The prefix of a local run's scratch directory: `<prefix><pid>-<random>`.
const SCRATCH_PREFIX: &str = "gpuledger-run-";

/// Months whose samples retention removed: their derived rows come from the previous run's
/// derived tables (`crate::retention`).
#[derive(Debug, Clone)]
struct Carry {
    location: StoreLocation,
    before: chrono::NaiveDate,
}

impl Accounting {
    /// Runs every step of the accounting over the store behind `ctx` (a session from
    /// [`crate::Ledger::store_session`], which registered the store's tables and the SQL functions).
    pub async fn run(ctx: SessionContext, store: &StoreLocation, config: &Config, options: &RunOptions, progress: DayProgress<'_>) -> Result<Accounting> {
        let (dir, scratch) = match &options.workers {
            Workers::InProcess | Workers::InProcessAt(_) => {
                let parent = match &options.workers {
                    Workers::InProcessAt(at) => at.clone(),
                    _ => std::env::temp_dir(),
                };
                // Named by pid, so that a later run can tell a killed run's scratch from a live
                // one's, and remove it.
                match gpuledger_store::atomic::remove_dead_scratch(&parent, SCRATCH_PREFIX) {
                    Ok(0) => {}
                    Ok(n) => tracing::info!(removed = n, dir = %parent.display(), "removed the scratch directories of killed ledger runs"),
                    Err(e) => tracing::warn!(error = %e, "could not remove the scratch directories of killed ledger runs"),
                }
                let prefix = format!("{SCRATCH_PREFIX}{}-", std::process::id());
                let t = tempfile::Builder::new().prefix(&prefix).tempdir_in(&parent).map_err(|e| Error::Store(gpuledger_store::Error::io(&parent, e)))?;
                let scratch = Scratch { location: StoreLocation::Local(t.path().to_path_buf()), dir: String::new() };
                (ScratchDir::Local { _dir: t }, scratch)
            }
            Workers::Cluster => {
                let scratch = Scratch { location: store.clone(), dir: gpuledger_store::layout::work_rel(&gpuledger_store::layout::run_id()) };
                (ScratchDir::Store(scratch.clone()), scratch)
            }
        };
        let keeper = if matches!(options.workers, Workers::Cluster) { Keeper::files(scratch.clone()) } else { Keeper::Memory };
        let result = Self::run_steps(ctx, store, config, options, progress, scratch, &keeper).await;
        match result {
            Ok(mut a) => {
                a.scratch = Some(dir);
                Ok(a)
            }
            Err(e) => {
                if let ScratchDir::Store(s) = dir {
                    // Best effort: the run's own error is the one to report.
                    let _ = s.location.remove_dir(&s.dir).await;
                }
                Err(e)
            }
        }
    }

    async fn run_steps(ctx: SessionContext, store: &StoreLocation, config: &Config, options: &RunOptions, progress: DayProgress<'_>, scratch: Scratch, keeper: &Keeper) -> Result<Accounting> {
        // The samples' files as one snapshot, read here: the days, their digests and the scans all
        // follow it, whatever an ingest commits meanwhile.
        let snapshot = store.snapshot("gpu_samples").await?;
        let samples_table = gpuledger_schemas::table("gpu_samples").ok_or_else(|| Error::internal("no table gpu_samples in the schemas"))?;
        replace_table(&ctx, "gpu_samples", Arc::new(gpuledger_engine::snapshot::SnapshotTable::new(store, samples_table, &snapshot)))?;
        let versions = crate::Ledger::versions(&ctx).await;
        register_config(&ctx, config, options, keeper).await?;
        if keeper.on_cluster() {
            // The store's never-written tables are empty in-memory tables: files, for the cluster.
            for table in gpuledger_schemas::TABLES {
                if let Ok(p) = ctx.table_provider(table.name).await
                    && p.is::<MemTable>()
                {
                    keeper.keep_batches(&ctx, table.name, RecordBatch::new_empty(p.schema())).await?;
                }
            }
        }
        object_steps(&ctx, keeper).await?;
        let carry = crate::retention::expired_before(store).await?.map(|before| Carry { location: store.clone(), before });
        let inputs = match crate::retention::inputs_from_log(&snapshot) {
            Some(i) => i,
            None => crate::retention::count_inputs(&ctx).await?,
        };
        let days = sample_days(&snapshot);
        register_calendar(&ctx, days.first().map(String::as_str), days.last().map(String::as_str), keeper).await?;

        let samples = ctx
            .deregister_table("gpu_samples")
            .map_err(|source| Error::Query { sql: "deregister gpu_samples".into(), source })?
            // The snapshot registered every store table just above: a missing one is our bug.
            .ok_or_else(|| Error::internal("table gpu_samples is not registered after the store snapshot"))?;
        let mut tables = DayTables::open(&ctx, store, scratch, options.memo, &snapshot, &days, keeper.on_cluster()).await?;
        let rows_by_day = day_rows(&snapshot);
        let mut driver = Driver { ctx: &ctx, samples: &samples, keeper, tables: &mut tables, carried: HashMap::new(), units: (0, 0), unit_rows: options.unit_rows, parts: HashMap::new() };

        // With no samples at all, one unit over no samples still yields every table's columns.
        if days.is_empty() {
            driver.unit(&PASS1, None, &Part::Whole).await?;
            driver.unit(&PASS2, None, &Part::Whole).await?;
        }

        // Pass 1, last day first: a day's last observation may find its successor only days
        // later, in a later day's first observations (`known_day_starts`).
        let mut pass1_keys: HashMap<String, u64> = HashMap::new();
        let digests = options.memo != MemoMode::Off;
        let mut parts1: HashMap<String, usize> = HashMap::new();
        for (i, day) in days.iter().rev().enumerate() {
            let reused = if driver.tables.reuses() { driver.tables.reuse_pass1(driver.ctx, day).await? } else { None };
            let key = match reused {
                Some(k) => Some(k),
                None => {
                    driver.tables.begin(day).await?;
                    let rows = rows_by_day.get(day.as_str()).copied();
                    parts1.insert(day.clone(), driver.day(&PASS1, day, rows).await?);
                    driver.tables.computed_pass1();
                    if digests {
                        // The day's own first observations are now among the later days' for the next.
                        driver.tables.register(driver.ctx, "known_day_starts", "day_first_starts")?;
                        Some(driver.tables.pass1_key(driver.ctx, day).await?)
                    } else {
                        None
                    }
                }
            };
            if let Some(k) = key {
                pass1_keys.insert(day.clone(), k);
            }
            progress(Progress { pass: PASS1.name, done: i + 1, total: days.len(), day });
        }

        // Pass 2: the spans and states of each day, with the month's scrape intervals.
        for (name, from) in [("known_day_starts", "day_first_starts"), ("known_day_last_xids", "day_last_xids"), ("known_active_bounds", "day_active_bounds"), ("spacing_counts", "spacing_counts")] {
            driver.tables.register(driver.ctx, name, from)?;
        }
        if digests && !days.is_empty() {
            // What pass 2's digests read: the month's intervals, the pods' active bounds.
            exec_view(driver.ctx, "32_spans.sql", "scrape_intervals").await?;
            driver.keeper.keep(driver.ctx, "memo_intervals", INTERVALS_SQL).await?;
            driver.keeper.keep(driver.ctx, "memo_active_bounds", ACTIVE_BOUNDS_SQL).await?;
        }
        let last_day = days.last().cloned().unwrap_or_default();
        for (i, day) in days.iter().enumerate() {
            let keys = match pass1_keys.get(day) {
                Some(k1) => Some((*k1, driver.tables.pass2_key(driver.ctx, day, *k1, &last_day).await?)),
                None => None,
            };
            let reused = match keys {
                Some((_, k2)) if driver.tables.reuses() || driver.tables.keeps() => driver.tables.reuse_pass2(driver.ctx, day, k2).await?,
                _ => false,
            };
            if !reused {
                driver.tables.begin(day).await?;
                let rows = rows_by_day.get(day.as_str()).copied();
                let parts2 = driver.day(&PASS2, day, rows).await?;
                if let Some((k1, k2)) = keys {
                    let p1 = parts1.get(day).copied().unwrap_or_else(|| driver.tables.stored_parts1(day));
                    driver.tables.finish(day, k1, p1, k2, parts2).await?;
                }
            }
            progress(Progress { pass: PASS2.name, done: i + 1, total: days.len(), day });
        }
        let units = driver.units;
        let split_days = driver.parts.values().filter(|p| p.len() > 1).count();
        replace_table(&ctx, "gpu_samples", samples)?;
        for (name, from) in MONTH_TABLES {
            tables.register(&ctx, name, from)?;
        }
        for (file, view) in MONTH_VIEWS {
            exec_view(&ctx, file, view).await?;
        }
        tables.prune(&days).await?;

        monthly_steps(&ctx, keeper, carry.as_ref()).await?;
        let memo = (options.memo != MemoMode::Off).then(|| tables.stats.clone());
        Ok(Accounting { ctx, days, inputs, versions, memo, units, split_days, scratch: None })
    }

    /// Runs every step once over the tables `ctx` already holds (in memory, say), all days at
    /// once and without a store: how the SQL logic tests in `queries/tests/` run the accounting.
    /// The figures are those of a store run; only memory is not bounded by a day.
    pub async fn run_at_once(ctx: SessionContext, config: &Config, options: &RunOptions) -> Result<Accounting> {
        gpuledger_engine::udf::register(&ctx);
        let keeper = Keeper::Memory;
        register_config(&ctx, config, options, &keeper).await?;
        object_steps(&ctx, &keeper).await?;
        let (_, range) = collect(&ctx, "SELECT MIN(date), MAX(date) FROM gpu_samples").await?;
        let (first, last) = (strings(&range, 0).into_iter().flatten().next(), strings(&range, 1).into_iter().flatten().next());
        register_calendar(&ctx, first.as_deref(), last.as_deref(), &keeper).await?;
        // Every view of each step over all days at once: the month tables are the views.
        let keep = |s: &crate::plan::Step| s.keeps.iter().map(|(v, _)| (*v, String::new())).collect::<Vec<_>>();
        let pass1_30 = &PASS1.steps[0];
        exec_file(&ctx, pass1_30.file, &keep(pass1_30), &[], &keeper).await?;
        for (name, from) in [("known_day_starts", "day_first_starts"), ("known_day_last_xids", "day_last_xids"), ("known_active_bounds", "day_active_bounds")] {
            keeper.keep(&ctx, name, &format!("SELECT * FROM {from}")).await?;
        }
        exec_file(&ctx, "31_intervals.sql", &[], &[], &keeper).await?;
        keeper.keep(&ctx, "spacing_counts", "SELECT * FROM spacing_counts").await?;
        for step in &PASS2.steps[2..] {
            exec_file(&ctx, step.file, &keep(step), &[], &keeper).await?;
            for (view, _) in step.yields {
                keeper.keep(&ctx, view, &format!("SELECT * FROM {view}")).await?;
            }
        }
        monthly_steps(&ctx, &keeper, None).await?;
        Ok(Accounting { ctx, days: Vec::new(), inputs: Default::default(), versions: Default::default(), memo: None, units: (0, 0), split_days: 0, scratch: None })
    }

    /// Removes the run's scratch files. The session cannot answer queries over them afterwards.
    pub async fn clean_up(&mut self) -> Result<()> {
        match self.scratch.take() {
            Some(ScratchDir::Store(s)) => Ok(s.location.remove_dir(&s.dir).await?),
            Some(ScratchDir::Local { .. }) | None => Ok(()),
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
    pub async fn derived_tables(&self) -> Result<Vec<(&'static str, arrow::datatypes::SchemaRef, Vec<RecordBatch>)>> {
        let mut out = Vec::new();
        for name in DERIVED_TABLES {
            let (schema, batches) = collect(&self.ctx, &format!("SELECT * FROM {name}")).await?;
            out.push((*name, schema, batches));
        }
        Ok(out)
    }

    /// Writes the derived table `name` to the store file `rel` (streamed from the run's
    /// session: a month of hourly rows never has to be in memory at once).
    pub async fn write_derived(&self, store: &StoreLocation, name: &str, rel: &str) -> Result<Written> {
        let err = |source| Error::Query { sql: format!("SELECT * FROM {name}"), source };
        let df = self.ctx.table(name).await.map_err(err)?;
        write_here(df, store, rel, gpuledger_store::derived_properties(name)).await
    }
}

/// One run's walk over the units: the session, the samples, where tables go.
struct Driver<'a> {
    ctx: &'a SessionContext,
    samples: &'a Arc<dyn TableProvider>,
    keeper: &'a Keeper,
    tables: &'a mut DayTables,
    /// Per day and part: the files of the tables pass 1 carried to pass 2.
    carried: HashMap<(String, usize), Vec<Carried>>,
    /// Units computed per pass.
    units: (usize, usize),
    unit_rows: Option<u64>,
    /// Per day: its parts, once decided.
    parts: HashMap<String, Vec<Part>>,
}

/// A table pass 1 wrote for the same unit's pass 2.
#[derive(Debug, Clone)]
struct Carried {
    name: &'static str,
    url: String,
    schema: arrow::datatypes::SchemaRef,
}

/// Which of a day's nodes a unit reads: all, or a range of `Hostname`s (the files are sorted by
/// it, so a range skips the others' pages).
#[derive(Debug, Clone, PartialEq)]
enum Part {
    Whole,
    /// `[from, to)`; `None` is open. The first range also takes samples without a `Hostname`.
    Hosts { from: Option<String>, to: Option<String> },
}

impl Driver<'_> {
    /// Runs `pass` over every part of `day`; returns how many parts it had. A part refused
    /// memory is run again in smaller parts (the day's nodes split in twice as many).
    async fn day(&mut self, pass: &Pass, day: &str, rows: Option<u64>) -> Result<usize> {
        let mut parts = match self.parts.get(day) {
            Some(p) => p.clone(),
            None => self.split(day, rows, None).await?,
        };
        loop {
            self.tables.forget_day(day, pass);
            let mut refused = None;
            for (i, part) in parts.iter().enumerate() {
                match self.unit(pass, Some((day, i)), part).await {
                    Ok(()) => {}
                    Err(e) if out_of_memory(&e) => {
                        refused = Some(e);
                        break;
                    }
                    Err(e) => return Err(e),
                }
            }
            let Some(e) = refused else { break };
            // What the refused part kept goes before the day runs again.
            for step in pass.steps {
                drop_views(self.ctx, step.file)?;
            }
            let more = self.split(day, rows, Some(parts.len() * 2)).await?;
            if more.len() <= parts.len() {
                return Err(Error::Memory { what: format!("{} of {day}", if parts.len() > 1 { "one node's samples" } else { "the samples" }), source: Box::new(e) });
            }
            tracing::warn!(day, parts = more.len(), error = %e, "a part of the day needed more memory than the limit leaves: the day runs again in smaller parts");
            // What pass 1 carried for the old parts is of no use to the new ones.
            self.carried.retain(|(d, _), _| d != day);
            parts = more;
        }
        let n = parts.len();
        self.parts.insert(day.to_string(), parts);
        Ok(n)
    }

    /// The parts of `day`: one, unless it has more rows than a unit may read (or `at_least` is
    /// asked for), then ranges of its `Hostname`s with about equal rows each. `rows`: the day's,
    /// where the store's log counted them (else they are counted here).
    async fn split(&self, day: &str, rows: Option<u64>, at_least: Option<usize>) -> Result<Vec<Part>> {
        let wanted = |rows: u64| match self.unit_rows {
            Some(max) if max > 0 => (rows.div_ceil(max) as usize).max(at_least.unwrap_or(1)),
            _ => at_least.unwrap_or(1),
        };
        if rows.is_some_and(|r| wanted(r) <= 1) || (self.unit_rows.is_none() && at_least.is_none()) {
            return Ok(vec![Part::Whole]);
        }
        let sql = format!("SELECT hostname, COUNT(*) AS n FROM __all_samples WHERE date = '{day}' AND hostname IS NOT NULL GROUP BY hostname ORDER BY hostname");
        replace_table(self.ctx, "__all_samples", Arc::clone(self.samples))?;
        let (_, batches) = collect(self.ctx, &sql).await?;
        drop_table(self.ctx, "__all_samples")?;
        let hosts: Vec<(String, u64)> = strings(&batches, 0).into_iter().zip(strings(&batches, 1)).filter_map(|(h, n)| Some((h?, n?.parse().ok()?))).collect();
        let total = rows.unwrap_or_else(|| hosts.iter().map(|(_, n)| n).sum());
        Ok(host_ranges(&hosts, wanted(total)))
    }

    /// Runs `pass` over one unit (`None`: over no samples, for the columns), writing its yields.
    async fn unit(&mut self, pass: &Pass, unit: Option<(&str, usize)>, part: &Part) -> Result<()> {
        let day = unit.map(|(d, _)| d);
        narrow_samples(self.ctx, self.samples, day, part)?;
        let carried = unit.and_then(|(d, p)| self.carried.remove(&(d.to_string(), p))).unwrap_or_default();
        let mut carries = Vec::new();
        for step in pass.steps {
            for (name, from) in step.reads {
                self.tables.register(self.ctx, name, from)?;
            }
            // What pass 1 carried is there before the step that would compute it again.
            let provided: Vec<&str> = carried.iter().filter(|c| step.keeps.iter().any(|(k, _)| *k == c.name)).map(|c| c.name).collect();
            for c in carried.iter().filter(|c| provided.contains(&c.name)) {
                replace_table(self.ctx, c.name, parquet_table(std::slice::from_ref(&c.url), c.schema.clone(), self.keeper.on_cluster())?)?;
            }
            // Views kept for the unit, and those pass 1 carries to pass 2: written to the scratch
            // directory and read from there (by the rest of this pass and by the next).
            let (to_carry, to_keep): (Vec<KeptView>, Vec<KeptView>) = step.keeps.iter().copied().partition(|(v, _)| pass.carries.contains(v) && unit.is_some());
            let keeps: Vec<(&str, String)> = to_keep.iter().map(|(v, own)| (*v, own_filter(*own, day))).collect();
            self.exec_with_carries(step.file, &keeps, &provided, &to_carry, unit, &mut carries).await?;
            for (view, own) in step.yields {
                self.yield_table(view, *own, day, unit.map(|(_, p)| p).unwrap_or(0)).await?;
            }
            for gone in step.lets_go {
                drop_table(self.ctx, gone)?;
            }
        }
        // Nothing of the unit's views stays: each holds the unit's kept tables.
        for step in pass.steps {
            drop_views(self.ctx, step.file)?;
        }
        if let Some((d, p)) = unit {
            if !carries.is_empty() {
                self.carried.insert((d.to_string(), p), carries);
            }
            if pass.name == PASS1.name { self.units.0 += 1 } else { self.units.1 += 1 }
        }
        Ok(())
    }

    /// Runs a step's file, writing the views it carries to the scratch directory as soon as
    /// they are created and reading them from there.
    async fn exec_with_carries(&self, file: &str, keeps: &[(&str, String)], provided: &[&str], to_carry: &[(&'static str, Own)], unit: Option<(&str, usize)>, carries: &mut Vec<Carried>) -> Result<()> {
        if to_carry.is_empty() {
            return exec_file(self.ctx, file, keeps, provided, self.keeper).await;
        }
        // Statement by statement: a carried view is written out before the next statement reads it.
        for statement in crate::queries::split_statements(crate::queries::query_file(file)?) {
            let view = crate::queries::created_view(&statement);
            if view.as_deref().is_some_and(|v| provided.contains(&v)) {
                continue;
            }
            if let Some(v) = &view {
                drop_table(self.ctx, v)?;
            }
            let err = |source| Error::Query { sql: format!("{file}: {}", gpuledger_engine::exec::first_line(&statement)), source };
            self.ctx.sql(&statement).await.map_err(err)?;
            let Some(v) = view else { continue };
            if let Some((name, filter)) = keeps.iter().find(|(k, _)| *k == v) {
                self.keeper.keep(self.ctx, name, &format!("SELECT * FROM {name}{filter}")).await?;
            } else if let (Some((name, _)), Some((day, part))) = (to_carry.iter().find(|(c, _)| *c == v), unit) {
                crate::steps::explain_if_asked(self.ctx, name, &format!("SELECT * FROM {name}")).await?;
                let rel = self.tables.scratch().rel(&format!("carried/{day}/{name}.{part}.parquet"));
                let written = self.write(&format!("SELECT * FROM {name}"), &self.tables.scratch().location.clone(), &rel, Keeping::Scratch).await?;
                let url = self.tables.scratch().location.join(&rel);
                replace_table(self.ctx, name, parquet_table(std::slice::from_ref(&url), written.schema.clone(), self.keeper.on_cluster())?)?;
                carries.push(Carried { name, url, schema: written.schema });
            }
        }
        Ok(())
    }

    /// Writes the unit's own rows of `view` as its day table file, and notes it.
    async fn yield_table(&mut self, view: &'static str, own: Own, day: Option<&str>, part: usize) -> Result<()> {
        crate::steps::explain_if_asked(self.ctx, view, &format!("SELECT * FROM {view}")).await?;
        let at = self.tables.file(day, view, part);
        let keeping = if self.tables.keeps() { Keeping::Stored } else { Keeping::Scratch };
        let written = self.write(&format!("SELECT * FROM {view}{}", own_filter(own, day)), &at.location, &at.rel, keeping).await?;
        self.tables.add(view, day.unwrap_or("none"), at.url(), written.schema);
        Ok(())
    }

    /// Writes the rows of `sql` as the file `rel` of `location`: here, or by a cluster's executors.
    async fn write(&self, sql: &str, location: &StoreLocation, rel: &str, keeping: Keeping) -> Result<Written> {
        let err = |source| Error::Query { sql: gpuledger_engine::exec::first_line(sql), source };
        let df = self.ctx.sql(sql).await.map_err(err)?;
        let _timer = gpuledger_engine::exec::Timer::start(self.ctx, &gpuledger_engine::exec::first_line(sql));
        if self.keeper.on_cluster() {
            write_on_engine(self.ctx, df, &location.join(rel), keeping).await
        } else {
            write_here(df, location, rel, keeping.properties()).await
        }
    }
}

/// Whether `e` is a query refused memory (the unit can run again in smaller parts).
fn out_of_memory(e: &Error) -> bool {
    let Error::Query { source, .. } = e else { return false };
    matches!(source.find_root(), DataFusionError::ResourcesExhausted(_))
}

/// Splits hosts (sorted, with their rows) into at most `parts` ranges of about equal rows.
fn host_ranges(hosts: &[(String, u64)], parts: usize) -> Vec<Part> {
    let total: u64 = hosts.iter().map(|(_, n)| n).sum();
    if parts <= 1 || hosts.len() <= 1 || total == 0 {
        return vec![Part::Whole];
    }
    let per_part = total.div_ceil(parts as u64);
    let mut bounds: Vec<String> = Vec::new();
    let mut in_part = 0u64;
    for (i, (_, n)) in hosts.iter().enumerate() {
        if in_part >= per_part && bounds.len() + 1 < parts {
            bounds.push(hosts[i].0.clone());
            in_part = 0;
        }
        in_part += n;
    }
    let mut out = Vec::with_capacity(bounds.len() + 1);
    let mut from: Option<String> = None;
    for b in bounds {
        out.push(Part::Hosts { from: from.take(), to: Some(b.clone()) });
        from = Some(b);
    }
    out.push(Part::Hosts { from, to: None });
    if out.len() == 1 { vec![Part::Whole] } else { out }
}

/// The filter that keeps a unit's own rows of a view (a unit also reads the last second of the
/// day before). The day is compared as text: an equality on the column itself, pushed below a
/// window partitioned by the day, makes the day a constant that the sort under the window leaves
/// out, and a Ballista executor reading that sort's output from a shuffle no longer knows it is
/// one ("Expects PARTITION BY expression to be ordered").
fn own_filter(own: Own, day: Option<&str>) -> String {
    let Some(day) = day else { return String::new() };
    match own {
        Own::All => String::new(),
        Own::Date => format!(" WHERE date = '{day}'"),
        Own::DayNumber => match day_number(day) {
            Some(n) => format!(" WHERE CAST(day_number AS VARCHAR) = '{n}'"),
            None => " WHERE false".into(),
        },
    }
}

/// The object steps (`10`, `20`, `25`), keeping what the sample steps read many times.
async fn object_steps(ctx: &SessionContext, keeper: &Keeper) -> Result<()> {
    let keeps: Vec<(&str, String)> = OBJECT_KEEPS.iter().map(|v| (*v, String::new())).collect();
    let keeps = &keeps;
    with_spilling_joins_if_refused(ctx, "object steps", || {
        Box::pin(async move {
            for file in OBJECT_FILES {
                exec_file(ctx, file, keeps, &[], keeper).await?;
            }
            Ok(())
        })
    })
    .await
}

/// Runs `steps`; refused memory, runs them once more with sort-merge joins, which spill.
///
/// The object and monthly steps read a whole month at once (objects are not split by day, and
/// the monthly steps join every day's rows), and a hash join's build side cannot spill: 256 GPUs
/// x 30 days under `--memory-limit 512MiB` had `pod_runs`' and `priced_state_hours`' hash joins
/// refused memory. Hash joins stay the first choice: they are faster where memory suffices.
async fn with_spilling_joins_if_refused<'a>(ctx: &SessionContext, what: &str, steps: impl Fn() -> futures::future::BoxFuture<'a, Result<()>>) -> Result<()> {
    match steps().await {
        Err(e) if out_of_memory(&e) => {
            tracing::info!("the {what} were refused memory: running them again with sort-merge joins, which spill");
            set_hash_joins(ctx, false).await?;
            let again = steps().await;
            set_hash_joins(ctx, true).await?;
            again
        }
        other => other,
    }
}

/// Whether the planner may choose hash joins (`datafusion.optimizer.prefer_hash_join`).
async fn set_hash_joins(ctx: &SessionContext, on: bool) -> Result<()> {
    let sql = format!("SET datafusion.optimizer.prefer_hash_join = {on}");
    let err = |source| Error::Query { sql: sql.clone(), source };
    ctx.sql(&sql).await.map_err(err)?.collect().await.map_err(err)?;
    Ok(())
}

/// The monthly files, then the report views over the tables they read.
async fn monthly_steps(ctx: &SessionContext, keeper: &Keeper, carry: Option<&Carry>) -> Result<()> {
    let keeps: Vec<(&str, String)> = MONTHLY_KEEPS.iter().map(|v| (*v, String::new())).collect();
    let keeps = &keeps;
    with_spilling_joins_if_refused(ctx, "monthly steps", || {
        Box::pin(async move {
            for file in MONTHLY_FILES {
                exec_file(ctx, file, keeps, &[], keeper).await?;
            }
            if let Some(c) = carry {
                carry_expired(ctx, c, keeper).await?;
            }
            create_report_views(ctx).await
        })
    })
    .await
}

/// Replaces each derived table that has a month (or an end) by its computed rows from the
/// horizon on and, before it, the rows the previous run wrote, when their samples were still
/// there (`crate::retention`).
async fn carry_expired(ctx: &SessionContext, carry: &Carry, keeper: &Keeper) -> Result<()> {
    const PREVIOUS: &str = "__previous_run";
    for name in DERIVED_TABLES {
        let Some(table) = gpuledger_schemas::derived::derived_table(name) else { continue };
        let Some(key) = crate::retention::carry_key(table) else { continue };
        let previous = crate::derived::register_as(ctx, &carry.location, name, PREVIOUS).await?;
        if previous.is_none() {
            tracing::warn!(table = name, before = %carry.before, "samples before the horizon were removed and the previous run's table is missing: the table has no rows before it");
        }
        let sql = crate::retention::carry_sql(table, key, previous.as_deref().map(|s| (PREVIOUS, s)), carry.before);
        keeper.keep(ctx, name, &sql).await?;
        if previous.is_some() {
            drop_table(ctx, PREVIOUS)?;
        }
    }
    Ok(())
}

/// Narrows `gpu_samples` to what one unit reads: the day and the last second of the day
/// before (a sample there may start the observation a day's first sample belongs to), of the
/// part's nodes. A day's last observation finds the next one in `known_day_starts`. `None`:
/// nothing.
fn narrow_samples(ctx: &SessionContext, samples: &Arc<dyn TableProvider>, day: Option<&str>, part: &Part) -> Result<()> {
    let filter = match day.zip(day.and_then(day_start_ms)) {
        Some((d, start_ms)) => {
            let ts = |ms: i64| lit(datafusion::scalar::ScalarValue::TimestampMillisecond(Some(ms), Some("UTC".into())));
            let dates = vec![lit(previous_day(d)), lit(d)];
            let window = col("date").in_list(dates, false).and(col("ts").gt_eq(ts(start_ms - LOOKBEHIND_MS))).and(col("ts").lt(ts(start_ms + MS_PER_DAY)));
            match part {
                Part::Whole => window,
                Part::Hosts { from, to } => {
                    let mut hosts = match from {
                        Some(f) => col("hostname").gt_eq(lit(f.as_str())),
                        None => lit(true),
                    };
                    if let Some(t) = to {
                        hosts = hosts.and(col("hostname").lt(lit(t.as_str())));
                    }
                    if from.is_none() {
                        hosts = hosts.or(col("hostname").is_null());
                    }
                    window.and(hosts)
                }
            }
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

/// The days `gpu_samples` holds rows of (its log's partitions), oldest first.
fn sample_days(snapshot: &gpuledger_store::Snapshot) -> Vec<String> {
    let days: std::collections::BTreeSet<&str> = snapshot.files.iter().filter_map(|f| f.date.as_deref()).filter(|d| day_start_ms(d).is_some()).collect();
    days.into_iter().map(str::to_string).collect()
}

/// Rows per day of `gpu_samples`, where its log recorded every file's rows.
fn day_rows(snapshot: &gpuledger_store::Snapshot) -> HashMap<&str, u64> {
    let mut out: HashMap<&str, Option<u64>> = HashMap::new();
    for f in &snapshot.files {
        if let Some(d) = f.date.as_deref() {
            let e = out.entry(d).or_insert(Some(0));
            *e = e.zip(f.rows).map(|(a, b)| a + b);
        }
    }
    out.into_iter().filter_map(|(d, n)| Some((d, n?))).collect()
}

/// The configuration as small tables the SQL joins against (`crate::settings`).
async fn register_config(ctx: &SessionContext, config: &Config, options: &RunOptions, keeper: &Keeper) -> Result<()> {
    for (name, b) in crate::settings::config_tables(config, options.idle_policy)? {
        keeper.keep_batches(ctx, name, b).await?;
    }
    Ok(())
}

/// `calendar_days`: one row per day from the day before `first` to the day after `last`
/// (`YYYY-MM-DD`), so that the SQL can split a gap of any length at every midnight.
async fn register_calendar(ctx: &SessionContext, first: Option<&str>, last: Option<&str>, keeper: &Keeper) -> Result<()> {
    let days: Vec<i64> = match (first.and_then(day_number), last.and_then(day_number)) {
        (Some(a), Some(b)) if a <= b => ((a - 1)..=(b + 1)).collect(),
        _ => Vec::new(),
    };
    let hours: Vec<i64> = days.iter().flat_map(|d| (d * 24)..(d * 24 + 24)).collect();
    keeper.keep_batches(ctx, "calendar_days", crate::settings::batch(vec![("day_number", Arc::new(Int64Array::from(days)) as ArrayRef)])?).await?;
    keeper.keep_batches(ctx, "calendar_hours", crate::settings::batch(vec![("hour_number", Arc::new(Int64Array::from(hours)) as ArrayRef)])?).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_units_own_rows_are_those_of_its_day() {
        assert_eq!(own_filter(Own::DayNumber, Some("1970-01-03")), " WHERE CAST(day_number AS VARCHAR) = '2'");
        assert_eq!(own_filter(Own::Date, Some("2026-11-02")), " WHERE date = '2026-11-02'");
        assert_eq!(own_filter(Own::All, Some("2026-11-02")), "");
        assert_eq!(own_filter(Own::DayNumber, None), "", "the unit over no samples keeps what it has");
    }

    #[test]
    fn hosts_split_into_ranges_of_about_equal_rows() {
        let hosts: Vec<(String, u64)> = [("a", 10), ("b", 10), ("c", 10), ("d", 10)].iter().map(|(h, n)| (h.to_string(), *n)).collect();
        let r = host_ranges(&hosts, 2);
        assert_eq!(r, vec![Part::Hosts { from: None, to: Some("c".into()) }, Part::Hosts { from: Some("c".into()), to: None }]);
        assert_eq!(host_ranges(&hosts, 4).len(), 4);
        assert_eq!(host_ranges(&hosts, 9).len(), 4, "no more parts than hosts");
        assert_eq!(host_ranges(&hosts, 1), vec![Part::Whole]);
        assert_eq!(host_ranges(&hosts[..1], 3), vec![Part::Whole], "one host is one part");
        // A host with most of the rows takes a part of its own.
        let skewed: Vec<(String, u64)> = [("a", 90), ("b", 5), ("c", 5)].iter().map(|(h, n)| (h.to_string(), *n)).collect();
        assert_eq!(host_ranges(&skewed, 2), vec![Part::Hosts { from: None, to: Some("b".into()) }, Part::Hosts { from: Some("b".into()), to: None }]);
    }

    #[test]
    fn day_rows_are_known_only_where_every_file_counted_them() {
        use gpuledger_store::{DataFile, Snapshot};
        let f = |date: &str, rows: Option<u64>| DataFile { path: format!("date={date}/x"), date: Some(date.into()), size: 1, rows };
        let s = Snapshot { version: Some(1), files: vec![f("2026-11-01", Some(5)), f("2026-11-01", Some(7)), f("2026-11-02", Some(1)), f("2026-11-02", None)] };
        let rows = day_rows(&s);
        assert_eq!(rows.get("2026-11-01"), Some(&12));
        assert_eq!(rows.get("2026-11-02"), None);
        assert_eq!(sample_days(&s), vec!["2026-11-01", "2026-11-02"]);
    }
}
