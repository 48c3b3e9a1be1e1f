//! Day tables: what each unit of the day plan (`crate::plan`) yields, as Parquet files, and the
//! digest of everything a day's files were computed from, so that a later run reuses the days
//! whose inputs did not change instead of computing them again (an incremental ledger run).
//!
//! Every run writes its yields as files and reads them back through listing tables: the later
//! units and the monthly steps read compact per-day results, never a month held in memory. A
//! `gpuledger ledger` run keeps them in the store, under `<store>/ledger/days/<date>/`, one file
//! per table and part of the day (`<table>.<part>.parquet`), with `key.json`; a run that must
//! leave the store as it found it (`gpuledger report`) or keeps nothing (`--full` is not that:
//! it keeps what it computes) writes them to its scratch directory instead.
//!
//! A live store changes by about a day a day, but one new day does not only add its own rows:
//! it gives the day before its last observations' successors, it may settle runs that started
//! days ago (their time is restated), move the month's median scrape interval, open or close
//! cordon windows. So a day's digest is not "its files": it is every row the day's pass reads,
//! narrowed to what can change the day's result:
//!
//! - pass 1 (`30_observations.sql`, `31_intervals.sql`): the day's and the day before's
//!   `gpu_samples` files, the settings, the SQL itself, the `pod_runs` rows of the pods its
//!   samples name (validity clamped to the day), and its GPUs' next first observation on a
//!   later day;
//! - pass 2 (`32_spans.sql` to `45_hourly.sql`): pass 1's digest, its GPUs' scrape interval in
//!   the day's month, their last XID reading before the day, its pods' first and last active
//!   observation on its GPUs (clamped to the day: a bound moving from one later day to another
//!   changes nothing here), `namespaces_latest`, `node_keys`, and the cordon and stranding
//!   windows near the day.
//!
//! How a day is split into parts changes no figure, so it is not in the digest: a day computed
//! in three parts is reused by a run that would have used one. `key.json` says which digests the
//! day's files hold and how many parts each pass wrote; it is written after them (and emptied
//! before any is replaced), so a run cut short leaves days that are computed again, never files
//! read under a wrong key.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hasher;
use std::sync::{Arc, Mutex};

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use arrow::row::{RowConverter, SortField};
use datafusion::prelude::SessionContext;
use gpuledger_engine::exec::{collect, replace_table};
use gpuledger_engine::files::{files_schema, merge, parquet_table};
use gpuledger_store::StoreLocation;
use serde::{Deserialize, Serialize};
use xxhash_rust::xxh3::Xxh3;

use crate::calendar::MS_PER_DAY;
use crate::error::{Error, Result};
use crate::plan::{PASS1, PASS2, Pass};

/// Whether a run reuses stored day tables and keeps the ones it computes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum MemoMode {
    /// Neither: every day is computed into the run's scratch directory (tests, the demo,
    /// `run_at_once`).
    #[default]
    Off,
    /// Days whose digest is unchanged are reused; computed days go to the scratch directory
    /// (`gpuledger report`: a reader of the store leaves it as it found it).
    Read,
    /// Reuse what is unchanged, keep what was computed (`gpuledger ledger`).
    ReadWrite,
    /// Compute every day and keep it (`gpuledger ledger --full`).
    Write,
}

impl MemoMode {
    fn reads(self) -> bool {
        matches!(self, MemoMode::Read | MemoMode::ReadWrite)
    }

    /// Whether computed days are kept in the store.
    pub fn writes(self) -> bool {
        matches!(self, MemoMode::ReadWrite | MemoMode::Write)
    }
}

/// How many days a run reused and computed, per pass, and why each computed day was.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemoStats {
    pub pass1_read: usize,
    pub pass1_computed: usize,
    pub pass2_read: usize,
    pub pass2_computed: usize,
    /// (day, what changed): `new` (no stored tables of it), `--full`, else the inputs whose
    /// digest differs.
    pub computed: Vec<(String, String)>,
}

/// `key.json`: the digests the day's stored files were computed under (hex; absent: none), how
/// many parts each pass wrote, and each input's own digest, to say what changed when a day is
/// computed again.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Keys {
    format: u32,
    pass1: Option<String>,
    pass2: Option<String>,
    #[serde(default)]
    parts1: usize,
    #[serde(default)]
    parts2: usize,
    #[serde(default)]
    inputs: BTreeMap<String, String>,
}

/// Bumped when what is stored or how digests are taken changes: older day tables are then
/// computed again.
const FORMAT: u32 = 2;

/// `<store>/ledger/days`: the day tables a `gpuledger ledger` run keeps (removing them costs one
/// full run).
pub const DAYS_DIR: &str = "ledger/days";

/// Where earlier versions kept their day memo: removed by the first run that keeps day tables.
const OLD_MEMO_DIR: &str = "ledger/.days";

/// Where a run writes what it does not keep in the store: its units' carried tables and, unless
/// it keeps them, its day tables. A local temporary directory in process (removed when the run
/// ends), a directory of the store on a cluster (the executors must read it).
#[derive(Debug, Clone)]
pub struct Scratch {
    pub location: StoreLocation,
    pub dir: String,
}

impl Scratch {
    pub fn url(&self, rel: &str) -> String {
        self.location.join(&self.rel(rel))
    }

    pub fn rel(&self, rel: &str) -> String {
        if self.dir.is_empty() { rel.to_string() } else { format!("{}/{rel}", self.dir) }
    }
}

/// Where one file of a day table goes: the store (kept) or the scratch directory.
#[derive(Debug, Clone)]
pub struct FileAt {
    pub location: StoreLocation,
    pub rel: String,
}

impl FileAt {
    pub fn url(&self) -> String {
        self.location.join(&self.rel)
    }
}

/// The day tables of one run: which files hold each table's rows, and the digests that decide
/// which stored days can be reused.
pub struct DayTables {
    location: StoreLocation,
    scratch: Scratch,
    mode: MemoMode,
    /// Declare every column nullable when registering (a cluster; see `parquet_table`).
    all_nullable: bool,
    /// The SQL, the version, the settings: what every day's pass 1 reads.
    base1: u64,
    /// The object tables every day's pass 2 reads whole.
    base2: u64,
    /// Per day: its `gpu_samples` files and the day before's.
    files: HashMap<String, u64>,
    /// Per day: what its `key.json` says.
    stored: HashMap<String, Keys>,
    /// Per day: each input's digest as this run found it.
    inputs: Mutex<HashMap<String, BTreeMap<&'static str, u64>>>,
    /// Per day table, per day: the files of its rows.
    tables: HashMap<&'static str, BTreeMap<String, Vec<String>>>,
    /// Per day table: its columns (a column nullable where any file's is).
    schemas: HashMap<&'static str, SchemaRef>,
    pub stats: MemoStats,
}

impl DayTables {
    /// The day tables of a run over `days` of `gpu_samples`, whose files the snapshot lists.
    /// Call after the object steps and the configuration tables are registered.
    pub async fn open(ctx: &SessionContext, location: &StoreLocation, scratch: Scratch, mode: MemoMode, samples: &gpuledger_store::Snapshot, days: &[String], all_nullable: bool) -> Result<DayTables> {
        let mut h = Xxh3::new();
        h.write_u32(FORMAT);
        h.write(env!("CARGO_PKG_VERSION").as_bytes());
        for (name, sql) in crate::queries::QUERY_FILES {
            h.write(name.as_bytes());
            h.write(sql.as_bytes());
        }
        h.write_u64(digest(ctx, "SELECT * FROM settings").await?);
        let base1 = h.finish();
        let base2 = {
            let mut h = Xxh3::new();
            h.write_u64(digest(ctx, "SELECT * FROM namespaces_latest").await?);
            h.write_u64(digest(ctx, "SELECT * FROM node_keys").await?);
            h.finish()
        };

        let mut by_day: BTreeMap<&str, Vec<(&str, u64)>> = BTreeMap::new();
        for f in &samples.files {
            if let Some(d) = f.date.as_deref() {
                by_day.entry(d).or_default().push((f.path.as_str(), f.size));
            }
        }
        let day_files = |d: &str| -> u64 {
            let mut h = Xxh3::new();
            for (path, size) in by_day.get(d).into_iter().flatten() {
                h.write(path.as_bytes());
                h.write_u64(*size);
            }
            h.write_u8(0xff);
            h.finish()
        };
        let mut files = HashMap::new();
        for d in days {
            let mut h = Xxh3::new();
            h.write_u64(day_files(&crate::calendar::previous_day(d)));
            h.write_u64(day_files(d));
            files.insert(d.clone(), h.finish());
        }

        let mut stored = HashMap::new();
        if mode.reads() {
            for d in days {
                if let Some(keys) = read_keys(location, d).await {
                    stored.insert(d.clone(), keys);
                }
            }
        }
        Ok(DayTables {
            location: location.clone(),
            scratch,
            mode,
            all_nullable,
            base1,
            base2,
            files,
            stored,
            inputs: Mutex::default(),
            tables: HashMap::new(),
            schemas: HashMap::new(),
            stats: MemoStats::default(),
        })
    }

    /// Where part `part` of `table` of `day` is written this run (`None`: the unit over no
    /// samples, which only gives the tables their columns).
    pub fn file(&self, day: Option<&str>, table: &str, part: usize) -> FileAt {
        let rel = format!("{}/{table}.{part}.parquet", day.unwrap_or("none"));
        if self.mode.writes() && day.is_some() {
            FileAt { location: self.location.clone(), rel: format!("{DAYS_DIR}/{rel}") }
        } else {
            FileAt { location: self.scratch.location.clone(), rel: self.scratch.rel(&format!("days/{rel}")) }
        }
    }

    /// Notes the files of `table` for `day` (one per part), with the columns they were written
    /// with.
    fn record(&mut self, table: &'static str, day: &str, urls: Vec<String>, schema: SchemaRef) {
        self.tables.entry(table).or_default().insert(day.to_string(), urls);
        self.merge_schema(table, schema);
    }

    /// Notes one more file of `table` for `day` (a unit just wrote it).
    pub fn add(&mut self, table: &'static str, day: &str, url: String, schema: SchemaRef) {
        self.tables.entry(table).or_default().entry(day.to_string()).or_default().push(url);
        self.merge_schema(table, schema);
    }

    fn merge_schema(&mut self, table: &'static str, schema: SchemaRef) {
        let merged = match self.schemas.get(table) {
            Some(s) => Arc::new(merge(s, &schema)),
            None => Arc::new(schema.as_ref().clone().with_metadata(Default::default())),
        };
        self.schemas.insert(table, merged);
    }

    /// Registers `table`'s files of every day so far as the table `name`.
    pub fn register(&self, ctx: &SessionContext, name: &str, table: &'static str) -> Result<()> {
        let urls: Vec<String> = self.tables.get(table).into_iter().flat_map(|days| days.values().flatten().cloned()).collect();
        let schema = self.schemas.get(table).cloned().ok_or_else(|| Error::internal(format!("day table {table} read before any unit yielded it")))?;
        replace_table(ctx, name, parquet_table(&urls, schema, self.all_nullable)?)
    }

    /// Registers `table`'s files of `day` alone as `name`.
    fn register_day(&self, ctx: &SessionContext, name: &str, table: &'static str, day: &str) -> Result<()> {
        let urls = self.tables.get(table).and_then(|d| d.get(day)).cloned().unwrap_or_default();
        let schema = self.schemas.get(table).cloned().ok_or_else(|| Error::internal(format!("day table {table} of {day} read before it was written")))?;
        replace_table(ctx, name, parquet_table(&urls, schema, self.all_nullable)?)
    }

    /// Reuses the stored files of `pass` for `day` (records them) when the day's stored key
    /// says they exist, returning the stored digest; `None`: nothing stored to reuse.
    async fn adopt(&mut self, ctx: &SessionContext, day: &str, pass: &Pass) -> Result<Option<String>> {
        let Some(keys) = self.stored.get(day) else { return Ok(None) };
        let (want, parts) = if pass.name == PASS1.name { (keys.pass1.clone(), keys.parts1) } else { (keys.pass2.clone(), keys.parts2) };
        let Some(want) = want.filter(|_| parts > 0) else { return Ok(None) };
        for table in crate::plan::yields(pass) {
            let urls: Vec<String> = (0..parts).map(|p| self.location.join(&format!("{DAYS_DIR}/{day}/{table}.{p}.parquet"))).collect();
            let schema = match files_schema(ctx, &urls).await {
                Ok(s) => s,
                Err(e) => {
                    // Stored day tables are a cache: an unreadable one costs the day's computation, not the run.
                    tracing::warn!(day, table, error = %e, "stored day table unreadable: computing the day again");
                    self.forget_day(day, pass);
                    return Ok(None);
                }
            };
            self.record(table, day, urls, schema);
        }
        Ok(Some(want))
    }

    /// Drops what was recorded of `day` for `pass` (reused files found wanting, or a day about
    /// to be computed again).
    pub fn forget_day(&mut self, day: &str, pass: &Pass) {
        for table in crate::plan::yields(pass) {
            if let Some(days) = self.tables.get_mut(table) {
                days.remove(day);
            }
        }
    }

    /// Reuses the day's stored pass 1 tables when their digest still holds, and returns that
    /// digest; `None`: compute the day. `known_day_starts` must hold every later day's first
    /// observations.
    pub async fn reuse_pass1(&mut self, ctx: &SessionContext, day: &str) -> Result<Option<u64>> {
        let Some(want) = self.adopt(ctx, day, &PASS1).await? else { return Ok(None) };
        // Its own first observations among the later days' (the digest reads only those after it).
        self.register(ctx, "known_day_starts", "day_first_starts")?;
        let key = self.pass1_key(ctx, day).await?;
        if hex(key) == want {
            self.stats.pass1_read += 1;
            return Ok(Some(key));
        }
        self.forget_day(day, &PASS1);
        Ok(None)
    }

    /// The digest of what the day's pass 1 reads (see the module doc), once its pass 1 tables
    /// are recorded.
    pub async fn pass1_key(&self, ctx: &SessionContext, day: &str) -> Result<u64> {
        let (start, end) = bounds(day)?;
        self.register_index(ctx, day)?;
        let mut parts = vec![
            ("configuration or SQL", self.base1),
            ("sample files", self.files.get(day).copied().unwrap_or_default()),
            ("runs", digest(ctx, &pod_runs_sql(start, end)).await?),
        ];
        let d = start / MS_PER_DAY;
        // Each GPU's first observation on the next later day it was seen.
        let successors = format!(
            "SELECT g.hostname, g.uuid, g.mig_instance, n.first_t, n.first_energy_mj
             FROM memo_gpus g
             LEFT JOIN (SELECT hostname, uuid, mig_instance, first_t, first_energy_mj,
                               ROW_NUMBER() OVER (PARTITION BY hostname, uuid, mig_instance ORDER BY day_number) AS later_rank
                        FROM known_day_starts WHERE day_number > {d}) n
               ON n.later_rank = 1 AND (n.hostname IS NOT DISTINCT FROM g.hostname) AND (n.uuid IS NOT DISTINCT FROM g.uuid)
              AND (n.mig_instance IS NOT DISTINCT FROM g.mig_instance)"
        );
        parts.push(("next observations", digest(ctx, &successors).await?));
        Ok(self.combine(day, 0, &parts))
    }

    /// Counts a computed pass 1 of `day`.
    pub fn computed_pass1(&mut self) {
        self.stats.pass1_computed += 1;
    }

    /// Reuses the day's stored pass 2 tables when their digest still holds; else notes why the
    /// day is computed. `key` is [`DayTables::pass2_key`]'s.
    pub async fn reuse_pass2(&mut self, ctx: &SessionContext, day: &str, key: u64) -> Result<bool> {
        if self.stored.get(day).and_then(|k| k.pass2.clone()) == Some(hex(key)) && self.adopt(ctx, day, &PASS2).await?.is_some() {
            self.stats.pass2_read += 1;
            return Ok(true);
        }
        self.stats.pass2_computed += 1;
        let why = self.why(day);
        tracing::debug!(target: "gpuledger_ledger::memo", day = %day, changed = %why, "day computed");
        self.stats.computed.push((day.to_string(), why));
        Ok(false)
    }

    /// The digest of what the day's pass 2 reads (see the module doc), given its pass 1 digest.
    /// Needs `memo_intervals` ([`INTERVALS_SQL`]), `memo_active_bounds` ([`ACTIVE_BOUNDS_SQL`]),
    /// `known_day_last_xids` and the capacity windows registered; `last_day` is the calendar's.
    pub async fn pass2_key(&self, ctx: &SessionContext, day: &str, pass1: u64, last_day: &str) -> Result<u64> {
        let (start, end) = bounds(day)?;
        let d = start / MS_PER_DAY;
        self.register_index(ctx, day)?;
        let mut parts = vec![("namespaces or nodes", self.base2)];
        let month = &day[..7.min(day.len())];
        let intervals = format!(
            "SELECT g.hostname, g.uuid, g.mig_instance, i.interval_ms
             FROM memo_gpus g
             LEFT JOIN memo_intervals i
               ON (i.hostname IS NOT DISTINCT FROM g.hostname) AND (i.uuid IS NOT DISTINCT FROM g.uuid)
              AND (i.mig_instance IS NOT DISTINCT FROM g.mig_instance) AND i.month = '{month}'"
        );
        let (interval_digest, rows) = digest_rows(ctx, &intervals).await?;
        parts.push(("scrape intervals", interval_digest));
        // A span is at most one interval past its observation, and the calendar reaches a day
        // past the data: only an interval of a day or more can reach past the calendar.
        if max_f64(&rows, 3) >= MS_PER_DAY as f64 {
            parts.push(("last day", xxhash_rust::xxh3::xxh3_64(last_day.as_bytes())));
        }
        let last_xids = format!(
            "SELECT g.hostname, g.uuid, x.xid
             FROM (SELECT DISTINCT hostname, uuid FROM memo_gpus) g
             LEFT JOIN (SELECT hostname, uuid, xid,
                               ROW_NUMBER() OVER (PARTITION BY hostname, uuid ORDER BY day_number DESC) AS earlier_rank
                        FROM known_day_last_xids WHERE day_number < {d}) x
               ON x.earlier_rank = 1 AND (x.hostname IS NOT DISTINCT FROM g.hostname) AND (x.uuid IS NOT DISTINCT FROM g.uuid)"
        );
        parts.push(("last XID readings", digest(ctx, &last_xids).await?));
        // A piece at t in [start, end) is `startup` if t < first, `teardown` if t > last: the
        // bounds clamped to the day decide the same.
        let active = format!(
            "SELECT b.hostname, b.uuid, b.mig_instance, b.pod_key,
                    CASE WHEN b.first_active_t IS NOT NULL THEN GREATEST({start}, LEAST(b.first_active_t, {end})) END AS first_active_t,
                    CASE WHEN b.last_active_t IS NOT NULL THEN GREATEST({start} - 1, LEAST(b.last_active_t, {end})) END AS last_active_t
             FROM memo_active_bounds b
             JOIN memo_gpus g
               ON (b.hostname IS NOT DISTINCT FROM g.hostname) AND (b.uuid IS NOT DISTINCT FROM g.uuid)
              AND (b.mig_instance IS NOT DISTINCT FROM g.mig_instance)
             JOIN (SELECT r.pod_key FROM pod_runs r JOIN memo_pods p ON r.namespace = p.namespace AND r.pod = p.pod
                   UNION SELECT namespace || '/' || pod FROM memo_pods) k ON k.pod_key = b.pod_key"
        );
        parts.push(("pods' active bounds", digest(ctx, &active).await?));
        // Windows are swept per node in time order: one wholly before the day (opened and closed)
        // or wholly after it changes nothing in it. A day's margin on each side, for samples
        // stored under a neighbouring day.
        let (lo, hi) = (start - MS_PER_DAY, end + MS_PER_DAY);
        for (table, name) in [("node_unavailable", "cordon windows"), ("stranding_windows", "stranding windows")] {
            let windows = format!(
                "SELECT node, from_ms, to_ms FROM {table}
                 WHERE NOT (from_ms IS NOT NULL AND to_ms IS NOT NULL AND from_ms <= to_ms AND (to_ms < {lo} OR from_ms >= {hi}))"
            );
            parts.push((name, digest(ctx, &windows).await?));
        }
        Ok(self.combine(day, pass1, &parts))
    }

    /// One digest of the inputs' digests (after `seed`), which are noted for [`DayTables::why`].
    fn combine(&self, day: &str, seed: u64, parts: &[(&'static str, u64)]) -> u64 {
        let mut h = Xxh3::new();
        h.write_u64(seed);
        for (name, part) in parts {
            h.write(name.as_bytes());
            h.write_u64(*part);
        }
        if let Ok(mut inputs) = self.inputs.lock() {
            inputs.entry(day.to_string()).or_default().extend(parts.iter().copied());
        }
        h.finish()
    }

    /// What changed since the day's tables were kept: `new`, or the inputs whose digest differs.
    fn why(&self, day: &str) -> String {
        if self.mode == MemoMode::Write {
            return "--full".into();
        }
        if !self.mode.reads() {
            return "not kept".into();
        }
        let Some(stored) = self.stored.get(day).filter(|k| k.pass2.is_some()) else { return "new".into() };
        let now = self.inputs.lock().map(|i| i.get(day).cloned().unwrap_or_default()).unwrap_or_default();
        let changed: Vec<&str> = now.iter().filter(|(name, v)| stored.inputs.get(**name) != Some(&hex(**v))).map(|(name, _)| *name).collect();
        if changed.is_empty() { "its stored tables could not be read".into() } else { changed.join(", ") }
    }

    /// Before a computed day's files are written: its key no longer vouches for any of them.
    /// (What the key said stays known to this run: it says why the day was computed, and how
    /// many parts a reused pass 1 has.)
    pub async fn begin(&mut self, day: &str) -> Result<()> {
        if !self.mode.writes() {
            return Ok(());
        }
        self.write_keys(day, &Keys { format: FORMAT, ..Keys::default() }).await
    }

    /// After the day's pass 2 files are written (and its pass 1's, reused or written): the key
    /// that says what they hold.
    pub async fn finish(&mut self, day: &str, pass1: u64, parts1: usize, pass2: u64, parts2: usize) -> Result<()> {
        if !self.mode.writes() {
            return Ok(());
        }
        let inputs = self.inputs.lock().map(|i| i.get(day).cloned().unwrap_or_default()).unwrap_or_default();
        let inputs = inputs.into_iter().map(|(name, v)| (name.to_string(), hex(v))).collect();
        let keys = Keys { format: FORMAT, pass1: Some(hex(pass1)), pass2: Some(hex(pass2)), parts1, parts2, inputs };
        self.write_keys(day, &keys).await?;
        // Files of more parts than the day has now are no longer read: removed.
        let dir = format!("{DAYS_DIR}/{day}");
        let keep: Vec<String> = crate::plan::yields(&PASS1)
            .flat_map(|t| (0..parts1).map(move |p| format!("{t}.{p}.parquet")))
            .chain(crate::plan::yields(&PASS2).flat_map(|t| (0..parts2).map(move |p| format!("{t}.{p}.parquet"))))
            .collect();
        for (name, _) in self.location.list_sizes(&dir).await? {
            if name.ends_with(".parquet") && !keep.contains(&name) {
                self.location.remove_file(&format!("{dir}/{name}")).await?;
            }
        }
        self.stored.insert(day.to_string(), keys);
        Ok(())
    }

    /// How many parts the stored pass 1 of `day` has (0: not stored).
    pub fn stored_parts1(&self, day: &str) -> usize {
        self.stored.get(day).map(|k| k.parts1).unwrap_or(0)
    }

    /// Removes the day tables of days the store no longer has samples of (retention removed
    /// them), and an earlier version's day memo.
    pub async fn prune(&self, days: &[String]) -> Result<()> {
        if !self.mode.writes() {
            return Ok(());
        }
        for dir in self.location.list_names(DAYS_DIR).await? {
            if !days.contains(&dir) {
                self.location.remove_dir(&format!("{DAYS_DIR}/{dir}")).await?;
            }
        }
        self.location.remove_dir(OLD_MEMO_DIR).await?;
        Ok(())
    }

    async fn write_keys(&self, day: &str, keys: &Keys) -> Result<()> {
        let bytes = serde_json::to_vec(keys).map_err(|e| Error::internal(format!("encoding a day table key: {e}")))?;
        self.location.write_whole(&format!("{DAYS_DIR}/{day}/key.json"), bytes).await?;
        Ok(())
    }

    /// The day's GPUs and pods (its pass 1 files) as `memo_gpus` and `memo_pods`.
    fn register_index(&self, ctx: &SessionContext, day: &str) -> Result<()> {
        self.register_day(ctx, "memo_gpus", "day_first_starts", day)?;
        self.register_day(ctx, "memo_pods", "day_pods", day)
    }

    /// The scratch directory of the run.
    pub fn scratch(&self) -> &Scratch {
        &self.scratch
    }

    /// Whether the days computed this run are kept in the store.
    pub fn keeps(&self) -> bool {
        self.mode.writes()
    }

    /// Whether stored days may be reused.
    pub fn reuses(&self) -> bool {
        self.mode.reads()
    }
}

/// The scrape intervals of every GPU and month, as `32_spans.sql` computes them from the
/// month's spacing counts: registered as `memo_intervals` before pass 2.
pub const INTERVALS_SQL: &str = "SELECT * FROM scrape_intervals";

/// Each pod's first and last active observation per GPU over all days (`pod_active_bounds` of
/// `40_states.sql`): registered as `memo_active_bounds` before pass 2.
pub const ACTIVE_BOUNDS_SQL: &str = "SELECT hostname, uuid, mig_instance, pod_key, MIN(first_active_t) AS first_active_t, MAX(last_active_t) AS last_active_t
     FROM known_active_bounds GROUP BY hostname, uuid, mig_instance, pod_key";

/// The `pod_runs` rows of the day's pods, with the columns the sample steps read and the
/// validity clamped to the day (a sample at t in [start, end) matches the same rows).
fn pod_runs_sql(start: i64, end: i64) -> String {
    format!(
        "SELECT r.namespace, r.pod, r.uid,
                CASE WHEN r.valid_from_ms IS NOT NULL THEN GREATEST({start}, LEAST(r.valid_from_ms, {end})) END AS valid_from_ms,
                GREATEST({start}, LEAST(COALESCE(r.valid_to_ms, {end}), {end})) AS valid_to_ms,
                r.pod_key, r.team, r.run, r.segment, r.outcome, r.pod_failed
         FROM pod_runs r JOIN (SELECT DISTINCT namespace, pod FROM memo_pods) p ON r.namespace = p.namespace AND r.pod = p.pod
        "
    )
}

/// [start, end) of a `YYYY-MM-DD` day in ms since the epoch.
fn bounds(day: &str) -> Result<(i64, i64)> {
    let start = crate::calendar::day_start_ms(day).ok_or_else(|| Error::internal(format!("day tables for a day that is not a date: {day}")))?;
    Ok((start, start + MS_PER_DAY))
}

/// The digest of a query's rows, whatever order they come in.
async fn digest(ctx: &SessionContext, sql: &str) -> Result<u64> {
    Ok(digest_rows(ctx, sql).await?.0)
}

async fn digest_rows(ctx: &SessionContext, sql: &str) -> Result<(u64, Vec<RecordBatch>)> {
    let (schema, batches) = collect(ctx, sql).await?;
    let fields = schema.fields().iter().map(|f| SortField::new(f.data_type().clone())).collect();
    let converter = RowConverter::new(fields)?;
    // Each row's bytes in the row format (which orders as the values do), sorted.
    let mut rows: Vec<Vec<u8>> = Vec::new();
    for b in &batches {
        rows.extend(converter.convert_columns(b.columns())?.iter().map(|r| r.as_ref().to_vec()));
    }
    rows.sort_unstable();
    let mut h = Xxh3::new();
    for bytes in &rows {
        // The length first: rows of different widths never run together.
        h.write_u64(bytes.len() as u64);
        h.write(bytes);
    }
    h.write_u64(rows.len() as u64);
    Ok((h.finish(), batches))
}

/// The largest value of a float column (0 with none).
fn max_f64(batches: &[RecordBatch], column: usize) -> f64 {
    let mut max = 0.0f64;
    for b in batches {
        if let Ok(a) = arrow::compute::cast(b.column(column), &arrow::datatypes::DataType::Float64)
            && let Some(a) = a.as_any().downcast_ref::<arrow::array::Float64Array>()
        {
            max = a.iter().flatten().fold(max, f64::max);
        }
    }
    max
}

fn hex(key: u64) -> String {
    format!("{key:016x}")
}

async fn read_keys(location: &StoreLocation, day: &str) -> Option<Keys> {
    let rel = format!("{DAYS_DIR}/{day}/key.json");
    let bytes = location.get(&rel).await.ok()?;
    match serde_json::from_slice::<Keys>(&bytes) {
        Ok(k) if k.format == FORMAT => Some(k),
        Ok(_) => None,
        Err(e) => {
            tracing::warn!(file = %location.join(&rel), error = %e, "day table key unreadable: computing the day again");
            None
        }
    }
}

