//! The day memo: each day's results of the sample steps, kept in the store with a digest of
//! everything they were computed from, so that a later run reads back the days whose inputs
//! did not change instead of computing them again (an incremental ledger run).
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
//! The day's GPUs and pods, which narrow those rows, come from the day's own samples; a day
//! whose files changed is computed again anyway, so they are read from the memo before that is
//! known. Files live under `<store>/ledger/.days/<date>/`; `key.json` says which digests the
//! day's tables hold and is written after them (and emptied before a table is replaced), so a
//! run cut short leaves days that are computed again, never tables read under a wrong key.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hasher;
use std::sync::{Arc, Mutex};

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use arrow::row::{RowConverter, SortField};
use datafusion::prelude::SessionContext;
use gpuledger_store::StoreLocation;
use serde::{Deserialize, Serialize};
use xxhash_rust::xxh3::Xxh3;

use crate::accounting::MS_PER_DAY;
use crate::error::{Error, Result};

/// Whether a run reads and writes the day memo.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum MemoMode {
    /// Neither: every day is computed and nothing is kept (tests, the demo, `run_at_once`).
    #[default]
    Off,
    /// Days whose digest is unchanged are read back; nothing is written (`gpuledger report`:
    /// a reader of the store leaves it as it found it).
    Read,
    /// Read back what is unchanged, keep what was computed (`gpuledger ledger`).
    ReadWrite,
    /// Compute every day and keep it (`gpuledger ledger --full`).
    Write,
}

impl MemoMode {
    fn reads(self) -> bool {
        matches!(self, MemoMode::Read | MemoMode::ReadWrite)
    }

    fn writes(self) -> bool {
        matches!(self, MemoMode::ReadWrite | MemoMode::Write)
    }
}

/// What pass 1 keeps of a day: what later days and pass 2 read from it.
pub(crate) const PASS1_TABLES: [&str; 5] = ["day_first_starts", "day_last_xids", "day_active_bounds", "spacing_counts", "day_pods"];

/// How many days a run read back and computed, per pass, and why each computed day was.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemoStats {
    pub pass1_read: usize,
    pub pass1_computed: usize,
    pub pass2_read: usize,
    pub pass2_computed: usize,
    /// (day, what changed): `new` (no memo of it), `--full`, else the inputs whose digest differs.
    pub computed: Vec<(String, String)>,
}

/// `key.json`: the digests the day's stored tables were computed under (hex; absent: none),
/// and each input's own digest, to say what changed when a day is computed again.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Keys {
    format: u32,
    pass1: Option<String>,
    pass2: Option<String>,
    #[serde(default)]
    inputs: BTreeMap<String, String>,
}

/// Bumped when what is stored or how digests are taken changes: older memos are then misses.
const FORMAT: u32 = 1;

/// One table as a run holds it.
pub(crate) type Table = (SchemaRef, Vec<RecordBatch>);

/// The memo of one run: the digests that hold for every day, what the store's memo says, and
/// how many days were read and computed.
pub(crate) struct DayMemo {
    location: StoreLocation,
    mode: MemoMode,
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
    pub stats: MemoStats,
}

/// A day's digest inputs besides its files: its GPUs and pods (from its pass 1 tables).
pub(crate) struct DayIndex {
    pub gpus: Table,
    pub pods: Table,
}

impl DayMemo {
    /// Opens the memo for a run over `days` of `gpu_samples`, whose files the snapshot lists.
    /// Call after the object steps and the configuration tables are registered.
    pub async fn open(ctx: &SessionContext, location: &StoreLocation, mode: MemoMode, samples: &gpuledger_store::Snapshot, days: &[String]) -> Result<DayMemo> {
        let mut h = Xxh3::new();
        h.write_u32(FORMAT);
        h.write(env!("CARGO_PKG_VERSION").as_bytes());
        for (name, sql) in crate::accounting::QUERY_FILES {
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
            h.write_u64(day_files(&crate::accounting::previous_day(d)));
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
        Ok(DayMemo { location: location.clone(), mode, base1, base2, files, stored, inputs: Mutex::default(), stats: MemoStats::default() })
    }

    /// Whether any day may be read back (else the caller need not prepare for it).
    pub fn reads(&self) -> bool {
        self.mode.reads()
    }

    /// The day's pass 1 tables from the memo when their digest still holds, with that digest;
    /// `None`: compute the day. `known_day_starts` must hold every later day's first observations.
    pub async fn read_pass1(&self, ctx: &SessionContext, day: &str) -> Result<Option<(u64, Vec<Table>)>> {
        let Some(want) = self.stored.get(day).and_then(|k| k.pass1.clone()) else { return Ok(None) };
        let Some(tables) = self.read_tables(day, &PASS1_TABLES).await else { return Ok(None) };
        let index = DayIndex { gpus: tables[0].clone(), pods: tables[4].clone() };
        let key = self.pass1_key(ctx, day, &index).await?;
        Ok((hex(key) == want).then_some((key, tables)))
    }

    /// The digest of what the day's pass 1 reads (see the module doc).
    pub async fn pass1_key(&self, ctx: &SessionContext, day: &str, index: &DayIndex) -> Result<u64> {
        let (start, end) = bounds(day)?;
        register_index(ctx, index)?;
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

    /// One digest of the inputs' digests (after `seed`), which are noted for [`DayMemo::why`].
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

    /// What changed since the memo of `day` was kept: `new`, or the inputs whose digest differs.
    pub fn why(&self, day: &str) -> String {
        if self.mode == MemoMode::Write {
            return "--full".into();
        }
        let Some(stored) = self.stored.get(day).filter(|k| k.pass2.is_some()) else { return "new".into() };
        let now = self.inputs.lock().map(|i| i.get(day).cloned().unwrap_or_default()).unwrap_or_default();
        let changed: Vec<&str> = now.iter().filter(|(name, v)| stored.inputs.get(**name) != Some(&hex(**v))).map(|(name, _)| *name).collect();
        if changed.is_empty() { "its memo could not be read".into() } else { changed.join(", ") }
    }

    /// The day's pass 2 tables from the memo when their digest still holds; `None`: compute
    /// the day. `key` is [`DayMemo::pass2_key`]'s.
    pub async fn read_pass2(&self, day: &str, key: u64, tables: &[&str]) -> Option<Vec<Table>> {
        let want = self.stored.get(day).and_then(|k| k.pass2.clone())?;
        if want != hex(key) {
            return None;
        }
        self.read_tables(day, tables).await
    }

    /// The digest of what the day's pass 2 reads (see the module doc), given its pass 1 digest.
    /// Needs `memo_intervals` ([`INTERVALS_SQL`]), `memo_active_bounds` ([`ACTIVE_BOUNDS_SQL`]),
    /// `known_day_last_xids` and the capacity windows registered; `last_day` is the calendar's.
    pub async fn pass2_key(&self, ctx: &SessionContext, day: &str, pass1: u64, index: &DayIndex, last_day: &str) -> Result<u64> {
        let (start, end) = bounds(day)?;
        let d = start / MS_PER_DAY;
        register_index(ctx, index)?;
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

    /// Keeps the day's pass 1 tables (the day's `key.json` is emptied first).
    pub async fn write_pass1(&self, day: &str, tables: &[Table]) -> Result<()> {
        if !self.mode.writes() {
            return Ok(());
        }
        self.write_keys(day, &Keys { format: FORMAT, ..Keys::default() }).await?;
        self.write_tables(day, &PASS1_TABLES, tables).await
    }

    /// Keeps the day's pass 2 tables and then the key saying what the day's tables hold.
    pub async fn write_pass2(&self, day: &str, pass1: u64, pass2: u64, names: &[&str], tables: &[Table]) -> Result<()> {
        if !self.mode.writes() {
            return Ok(());
        }
        self.write_keys(day, &Keys { format: FORMAT, ..Keys::default() }).await?;
        self.write_tables(day, names, tables).await?;
        let inputs = self.inputs.lock().map(|i| i.get(day).cloned().unwrap_or_default()).unwrap_or_default();
        let inputs = inputs.into_iter().map(|(name, v)| (name.to_string(), hex(v))).collect();
        self.write_keys(day, &Keys { format: FORMAT, pass1: Some(hex(pass1)), pass2: Some(hex(pass2)), inputs }).await
    }

    /// Removes the memo of days the store no longer has samples of (retention removed them).
    pub async fn prune(&self, days: &[String]) -> Result<()> {
        if !self.mode.writes() {
            return Ok(());
        }
        for dir in self.location.list_names(MEMO_DIR).await? {
            if !days.contains(&dir) {
                self.location.remove_dir(&format!("{MEMO_DIR}/{dir}")).await?;
            }
        }
        Ok(())
    }

    async fn read_tables(&self, day: &str, names: &[&str]) -> Option<Vec<Table>> {
        let mut out = Vec::with_capacity(names.len());
        for name in names {
            let rel = table_rel(day, name);
            match read_parquet(&self.location, &rel).await {
                Ok(t) => out.push(t),
                Err(e) => {
                    // A memo file is a cache: an unreadable one costs the day's computation, not the run.
                    tracing::warn!(file = %self.location.join(&rel), error = %e, "day memo unreadable: computing the day again");
                    return None;
                }
            }
        }
        Some(out)
    }

    async fn write_tables(&self, day: &str, names: &[&str], tables: &[Table]) -> Result<()> {
        for (name, (schema, batches)) in names.iter().zip(tables) {
            gpuledger_store::write_parquet(&self.location, &table_rel(day, name), schema.clone(), batches, gpuledger_store::derived_properties(name)).await?;
        }
        Ok(())
    }

    async fn write_keys(&self, day: &str, keys: &Keys) -> Result<()> {
        let bytes = serde_json::to_vec(keys).map_err(|e| Error::internal(format!("encoding the day memo's key: {e}")))?;
        self.location.write_whole(&format!("{MEMO_DIR}/{day}/key.json"), bytes).await?;
        Ok(())
    }
}

/// `<store>/ledger/.days`: the day memo (a cache: removing it costs one full run).
pub const MEMO_DIR: &str = "ledger/.days";

fn table_rel(day: &str, name: &str) -> String {
    format!("{MEMO_DIR}/{day}/{name}.parquet")
}

/// The scrape intervals of every GPU and month, as `32_spans.sql` computes them from the
/// gathered spacing counts: registered as `memo_intervals` before pass 2.
pub(crate) const INTERVALS_SQL: &str = "SELECT * FROM scrape_intervals";

/// Each pod's first and last active observation per GPU over all days (`pod_active_bounds` of
/// `40_states.sql`): registered as `memo_active_bounds` before pass 2.
pub(crate) const ACTIVE_BOUNDS_SQL: &str = "SELECT hostname, uuid, mig_instance, pod_key, MIN(first_active_t) AS first_active_t, MAX(last_active_t) AS last_active_t
     FROM known_active_bounds GROUP BY hostname, uuid, mig_instance, pod_key";

/// The `pod_runs` rows of the day's pods, with the columns the sample steps read and the
/// validity clamped to the day (a sample at t in [start, end) matches the same rows).
fn pod_runs_sql(start: i64, end: i64) -> String {
    format!(
        "SELECT r.namespace, r.pod, r.uid,
                CASE WHEN r.valid_from_ms IS NOT NULL THEN GREATEST({start}, LEAST(r.valid_from_ms, {end})) END AS valid_from_ms,
                GREATEST({start}, LEAST(COALESCE(r.valid_to_ms, {end}), {end})) AS valid_to_ms,
                r.pod_key, r.team, r.run, r.segment, r.outcome, r.pod_failed
         FROM pod_runs r JOIN memo_pods p ON r.namespace = p.namespace AND r.pod = p.pod
        "
    )
}

/// The day's GPUs and pods as `memo_gpus` and `memo_pods`.
fn register_index(ctx: &SessionContext, index: &DayIndex) -> Result<()> {
    crate::accounting::replace_table(ctx, "memo_gpus", crate::kept::table(ctx, "memo_gpus", index.gpus.0.clone(), index.gpus.1.clone())?)?;
    crate::accounting::replace_table(ctx, "memo_pods", crate::kept::table(ctx, "memo_pods", index.pods.0.clone(), index.pods.1.clone())?)
}

/// [start, end) of a `YYYY-MM-DD` day in ms since the epoch.
fn bounds(day: &str) -> Result<(i64, i64)> {
    let start = crate::accounting::day_start_ms(day).ok_or_else(|| Error::internal(format!("day memo for a day that is not a date: {day}")))?;
    Ok((start, start + MS_PER_DAY))
}

/// The digest of a query's rows, whatever order they come in.
async fn digest(ctx: &SessionContext, sql: &str) -> Result<u64> {
    Ok(digest_rows(ctx, sql).await?.0)
}

async fn digest_rows(ctx: &SessionContext, sql: &str) -> Result<(u64, Vec<RecordBatch>)> {
    let (schema, batches) = crate::accounting::collect(ctx, sql).await?;
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
    let rel = format!("{MEMO_DIR}/{day}/key.json");
    let bytes = location.get(&rel).await.ok()?;
    match serde_json::from_slice::<Keys>(&bytes) {
        Ok(k) if k.format == FORMAT => Some(k),
        Ok(_) => None,
        Err(e) => {
            tracing::warn!(file = %location.join(&rel), error = %e, "day memo key unreadable: computing the day again");
            None
        }
    }
}

/// A whole Parquet file of the store, as one table.
async fn read_parquet(location: &StoreLocation, rel: &str) -> std::result::Result<Table, String> {
    let bytes = location.get(rel).await.map_err(|e| e.to_string())?;
    let builder = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(bytes).map_err(|e| e.to_string())?;
    // Without the file's key-value metadata (the store's table name and schema version): the
    // days computed in this run have none, and one table's batches must have one schema.
    let schema: SchemaRef = Arc::new(builder.schema().as_ref().clone().with_metadata(Default::default()));
    let reader = builder.build().map_err(|e| e.to_string())?;
    let mut batches = Vec::new();
    for b in reader {
        batches.push(b.and_then(|b| b.with_schema(schema.clone())).map_err(|e| e.to_string())?);
    }
    Ok((schema, batches))
}
