//! The one task that writes: received rows -> WAL (fsync) -> store, on its own thread so that
//! fsyncs and Parquet encoding never stall the async scrapes and watches.
//!
//! Flushing and crash replay are the same code: the current segment is closed, read back and
//! written to the store under the segment's name, then removed. A segment whose flush fails
//! (disk full) stays on disk and is retried at the next flush; nothing is dropped.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::compute::concat_batches;
use tokio::sync::mpsc;

use super::log;
use super::metrics::Metrics;
use super::wal::{self, Positions, Wal};
use crate::error::{Error, Result};
use crate::store::Store;
use crate::tables::TableBatch;

/// What a scrape or a watch hands to the writer.
pub enum Msg {
    Data {
        batches: Vec<TableBatch>,
        /// `(resource id, resourceVersion)` reached once these rows are durable.
        position: Option<(String, String)>,
    },
    /// Wakes the writer to check whether a flush is due.
    Tick,
}

/// Rows and bytes one writer run handled.
#[derive(Debug, Default, Clone)]
pub struct WriterSummary {
    pub rows_appended: BTreeMap<&'static str, u64>,
    pub rows_written: BTreeMap<&'static str, u64>,
    pub segments_flushed: u64,
}

pub struct Writer {
    store: Store,
    wal: Wal,
    metrics: Arc<Metrics>,
    /// Positions of everything appended so far.
    positions: Positions,
    /// Positions of everything already in the store.
    saved: Positions,
    /// Closed segments not yet in the store, oldest first.
    pending: Vec<PathBuf>,
    flush_interval: Duration,
    flush_rows: u64,
    last_flush: Instant,
    summary: WriterSummary,
}

impl Writer {
    /// Opens the WAL and replays what a previous run left into the store. Returns the writer
    /// and the watch positions to resume from.
    pub fn open(store: Store, wal_dir: &std::path::Path, metrics: Arc<Metrics>, flush_interval: Duration, flush_rows: usize) -> Result<(Writer, Positions)> {
        let (wal, left) = Wal::open(wal_dir)?;
        let saved = wal.load_positions();
        let mut w = Writer {
            store,
            wal,
            metrics,
            positions: saved.clone(),
            saved,
            pending: left,
            flush_interval,
            flush_rows: flush_rows as u64,
            last_flush: Instant::now(),
            summary: WriterSummary::default(),
        };
        if !w.pending.is_empty() {
            log::info(format!("replaying {} WAL segment(s) left by the previous run", w.pending.len()));
        }
        w.flush_pending()?;
        w.positions = w.saved.clone();
        let positions = w.saved.clone();
        Ok((w, positions))
    }

    pub fn store_root(&self) -> &std::path::Path {
        self.store.root()
    }

    /// Runs until every sender is gone, then flushes everything.
    pub fn run(mut self, mut rx: mpsc::Receiver<Msg>) -> Result<WriterSummary> {
        while let Some(first) = rx.blocking_recv() {
            let mut msgs = vec![first];
            // Everything already queued goes into the same fsync.
            while msgs.len() < 1024 {
                match rx.try_recv() {
                    Ok(m) => msgs.push(m),
                    Err(_) => break,
                }
            }
            if let Err(e) = self.append(msgs) {
                // The WAL cannot be written: nothing received from now on would be safe.
                log::error(format!("cannot append to the WAL: {e}"));
                return Err(e);
            }
            if self.flush_due() {
                self.flush();
            }
        }
        self.flush();
        if !self.pending.is_empty() {
            return Err(Error::Store { path: self.wal.dir().to_path_buf(), reason: format!("{} WAL segment(s) could not be flushed; they stay in the WAL and are replayed at the next start", self.pending.len()) });
        }
        self.wal.close()?;
        Ok(self.summary)
    }

    fn append(&mut self, msgs: Vec<Msg>) -> Result<()> {
        let mut by_table: BTreeMap<&'static str, (&'static gpuledger_schemas::Table, Vec<arrow::record_batch::RecordBatch>)> = BTreeMap::new();
        let mut moved = false;
        for m in msgs {
            if let Msg::Data { batches, position } = m {
                for (t, b) in batches {
                    by_table.entry(t.name).or_insert_with(|| (t, Vec::new())).1.push(b);
                }
                if let Some((res, rv)) = position {
                    if self.positions.get(&res) != Some(&rv) {
                        self.positions.insert(res, rv);
                        moved = true;
                    }
                }
            }
        }
        let mut grouped = Vec::with_capacity(by_table.len());
        let mut rows = BTreeMap::new();
        for (name, (t, bs)) in by_table {
            let b = concat_batches(&t.arrow_schema(), &bs).map_err(|source| Error::Arrow { table: t.name, source })?;
            if b.num_rows() > 0 {
                rows.insert(name, b.num_rows() as u64);
                grouped.push((t, b));
            }
        }
        if grouped.is_empty() && !moved {
            return Ok(());
        }
        let bytes = self.wal.append(&grouped, moved.then_some(&self.positions))?;
        for (t, n) in &rows {
            *self.summary.rows_appended.entry(t).or_default() += n;
        }
        self.metrics.appended(&rows, bytes, super::now_ms());
        Ok(())
    }

    fn flush_due(&self) -> bool {
        self.wal.segment_rows >= self.flush_rows || (self.wal.segment_bytes > 0 && self.last_flush.elapsed() >= self.flush_interval)
    }

    /// Moves the current segment and any pending ones into the store; failures are logged and
    /// retried at the next flush.
    pub fn flush(&mut self) {
        self.last_flush = Instant::now();
        match self.wal.rotate() {
            Ok(Some(closed)) => self.pending.push(closed),
            Ok(None) => {}
            Err(e) => log::error(format!("cannot start a new WAL segment: {e}")),
        }
        if let Err(e) = self.flush_pending() {
            self.metrics.flush_failed();
            log::error(format!("flush to the store failed, will retry: {e}"));
        }
    }

    fn flush_pending(&mut self) -> Result<()> {
        while let Some(seg_path) = self.pending.first().cloned() {
            let seg = wal::read_segment(&seg_path)?;
            if let Some(torn) = &seg.torn {
                log::warn(format!("{}: {torn}", seg_path.display()));
            }
            let before = self.store.stats.rows_written.clone();
            self.store.write_named(&self.wal.store_name(&seg_path), seg.batches)?;
            let written: BTreeMap<&'static str, u64> =
                self.store.stats.rows_written.iter().map(|(t, n)| (*t, n - before.get(t).copied().unwrap_or(0))).filter(|(_, n)| *n > 0).collect();
            for (k, v) in seg.positions {
                self.saved.insert(k, v);
            }
            self.wal.save_positions(&self.saved)?;
            self.wal.remove(&seg_path)?;
            self.pending.remove(0);
            for (t, n) in &written {
                *self.summary.rows_written.entry(t).or_default() += n;
            }
            self.summary.segments_flushed += 1;
            let emptied = self.pending.is_empty() && self.wal.segment_bytes == 0;
            self.metrics.flushed(&written, self.wal.disk_bytes(), emptied, super::now_ms());
        }
        Ok(())
    }
}
