//! Compaction: a closed day's many small files of a raw table rewritten as a few large ones,
//! swapped in by one Delta commit.
//!
//! The live collector commits one file per table per flush (every few minutes), about 290 a
//! day; each query then opens hundreds of files (on S3, a request each). Compaction merges a
//! day's files in the table's sort order (GPU, instance, time: each file is sorted, so this is
//! a merge, not a sort) and writes files of about `target_size`. The commit removes exactly the
//! files that were read and adds the new ones, without changing any row, so:
//! - a reader sees the old files or the new ones (one snapshot), never both;
//! - rows a writer commits to the same day meanwhile stay (their files are not removed);
//! - a crash before the commit leaves the table as it was (the new files are uncommitted,
//!   invisible, and removed by VACUUM); rerunning compacts again.
//!
//! The removed files stay on disk for readers that started earlier until VACUUM deletes them.

use std::sync::Arc;

use chrono::NaiveDate;
use datafusion::prelude::SessionContext;
use futures::StreamExt;
use gpuledger_schemas::{PARTITION_KEY, TABLES, Table};
use gpuledger_store::layout::{self, partition_rel};
use gpuledger_store::{CommitKind, DataFile, Snapshot, StoreLocation};
use parquet::arrow::AsyncArrowWriter;
use object_store::buffered::BufWriter;

use crate::error::{Error, Result};
use crate::snapshot::SnapshotTable;

/// The default size of a compacted file: large enough that a month of a big fleet is a few
/// hundred files, small enough that a day still spreads over several files to read in parallel.
pub const DEFAULT_TARGET_SIZE: u64 = 256 << 20;

/// One table's day that compaction would rewrite.
#[derive(Debug, Clone)]
pub struct DayPlan {
    pub table: &'static Table,
    pub date: String,
    /// The log version the files were read from.
    pub version: Option<u64>,
    pub files: Vec<DataFile>,
}

impl DayPlan {
    pub fn bytes(&self) -> u64 {
        self.files.iter().map(|f| f.size).sum()
    }
}

/// What compacting one day did.
#[derive(Debug, Clone)]
pub struct DayCompacted {
    pub table: &'static str,
    pub date: String,
    pub files_before: usize,
    pub bytes_before: u64,
    pub files_after: usize,
    pub bytes_after: u64,
    pub rows: u64,
    /// The table's log version that holds the compacted files.
    pub version: u64,
}

/// The days of raw tables before `before` (closed days) stored in more than one file, oldest
/// first; `tables` limits it to those tables.
pub async fn plan(location: &StoreLocation, before: NaiveDate, tables: Option<&[String]>) -> Result<Vec<DayPlan>> {
    let before = before.format("%Y-%m-%d").to_string();
    let mut out = Vec::new();
    for table in TABLES {
        if tables.is_some_and(|t| !t.iter().any(|n| n == table.name)) {
            continue;
        }
        let snapshot: Snapshot = location.snapshot(table.name).await?;
        let mut by_day: std::collections::BTreeMap<String, Vec<DataFile>> = std::collections::BTreeMap::new();
        for f in snapshot.files {
            if let Some(date) = f.date.clone().filter(|d| *d < before) {
                by_day.entry(date).or_default().push(f);
            }
        }
        for (date, files) in by_day {
            if files.len() > 1 {
                out.push(DayPlan { table, date, version: snapshot.version, files });
            }
        }
    }
    out.sort_by(|a, b| (&a.date, a.table.name).cmp(&(&b.date, b.table.name)));
    Ok(out)
}

/// Rewrites one day's files as files of about `target_size` bytes, in the table's sort order,
/// and commits the swap.
pub async fn compact_day(location: &StoreLocation, day: &DayPlan, target_size: u64) -> Result<DayCompacted> {
    let table = day.table;
    let ctx = SessionContext::new_with_config(crate::session::session_config(None));
    crate::store::register_client(&ctx, location);
    let snapshot = Snapshot { version: day.version, files: day.files.clone() };
    let err = |source| Error::Query { sql: format!("compacting {} {}", table.name, day.date), source };
    ctx.register_table("day", Arc::new(SnapshotTable::new(location, table, &snapshot))).map_err(err)?;
    let columns: Vec<String> = table.columns.iter().map(|c| format!("\"{}\"", c.name)).collect();
    let order: Vec<String> = table.sort_by.iter().map(|c| format!("\"{c}\" ASC NULLS FIRST")).collect();
    let order_by = if order.is_empty() { String::new() } else { format!(" ORDER BY {}", order.join(", ")) };
    let sql = format!("SELECT {} FROM day{order_by}", columns.join(", "));
    let mut stream = ctx.sql(&sql).await.map_err(err)?.execute_stream().await.map_err(err)?;

    let run = layout::run_id();
    let dir = partition_rel(table.name, &day.date);
    let mut written: Vec<DataFile> = Vec::new();
    let mut writer: Option<(String, AsyncArrowWriter<BufWriter>, u64)> = None;
    let mut rows = 0u64;
    while let Some(batch) = stream.next().await {
        let batch = batch.map_err(err)?;
        if batch.num_rows() == 0 {
            continue;
        }
        if writer.is_none() {
            let name = format!("part-compact-{run}-{:05}.parquet", written.len() + 1);
            let (store, key) = location.object(&format!("{dir}/{name}")).map_err(gpuledger_store::Error::from)?;
            let w = AsyncArrowWriter::try_new(BufWriter::new(store, key), table.arrow_schema(), Some(gpuledger_store::write_properties(table)))
                .map_err(|source| parquet_err(location, &dir, source))?;
            writer = Some((name, w, 0));
        }
        if let Some((_, w, n)) = writer.as_mut() {
            w.write(&batch).await.map_err(|source| parquet_err(location, &dir, source))?;
            *n += batch.num_rows() as u64;
            rows += batch.num_rows() as u64;
            if w.bytes_written() as u64 >= target_size {
                let (name, w, n) = writer.take().unwrap_or_else(|| unreachable!());
                written.push(finish(location, &dir, &day.date, name, w, n).await?);
            }
        }
    }
    if let Some((name, w, n)) = writer.take() {
        written.push(finish(location, &dir, &day.date, name, w, n).await?);
    }
    let before_rows: Option<u64> = day.files.iter().map(|f| f.rows).sum();
    if let Some(expected) = before_rows.filter(|r| *r != rows) {
        return Err(Error::refused(location.display(&dir), format!("compaction read {rows} rows where the log lists {expected}; nothing was committed")));
    }
    let version = location.commit(table.name, day.version, &written, &day.files, CommitKind::Compact { target_size }).await?;
    Ok(DayCompacted {
        table: table.name,
        date: day.date.clone(),
        files_before: day.files.len(),
        bytes_before: day.bytes(),
        files_after: written.len(),
        bytes_after: written.iter().map(|f| f.size).sum(),
        rows,
        version,
    })
}

fn parquet_err(location: &StoreLocation, dir: &str, source: parquet::errors::ParquetError) -> Error {
    Error::Store(gpuledger_store::Error::Parquet { path: location.display(dir), source })
}

/// Closes a compacted file and describes it for the commit.
async fn finish(location: &StoreLocation, dir: &str, date: &str, name: String, w: AsyncArrowWriter<BufWriter>, rows: u64) -> Result<DataFile> {
    w.close().await.map_err(|source| parquet_err(location, dir, source))?;
    let size = location
        .list_sizes(dir)
        .await?
        .into_iter()
        .find(|(n, _)| *n == name)
        .map(|(_, s)| s)
        .ok_or_else(|| Error::refused(location.display(dir), format!("the compacted file {name} is not there after writing it")))?;
    Ok(DataFile { path: format!("{PARTITION_KEY}={date}/{name}"), date: Some(date.to_string()), size, rows: Some(rows) })
}
