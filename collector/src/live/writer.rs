//! The writing side: received rows -> WAL (fsync) on one thread, closed WAL segments -> store
//! on another, so that Parquet encoding never delays making new rows durable, and neither
//! stalls the async scrapes and watches.
//!
//! Flushing and crash replay are the same code ([`Flusher::flush_segment`]): a closed segment is
//! read back, written to the store under the segment's name, then removed. A segment whose
//! flush fails (disk full) stays on disk and is retried; nothing is dropped.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc as std_mpsc;
use std::time::{Duration, Instant};

use arrow::compute::concat_batches;
use tokio::sync::mpsc;

use super::metrics::Metrics;
use super::wal::{self, Positions, Wal, WalDir};
use crate::error::{Error, Result};
use crate::store::Store;
use crate::tables::TableBatch;

/// A segment is flushed early once it holds this many bytes: the flush holds a segment's rows
/// in memory a few times over (decoded, sorted, encoded), and this keeps the collector's
/// memory flat however many exporters it scrapes (measured in bench/collector.sh).
const FLUSH_BYTES: u64 = 24 << 20;

/// What a scrape or a watch hands to the writer.
pub enum Msg {
    Data {
        batches: Vec<TableBatch>,
        /// `(resource id, resourceVersion)` reached once these rows are durable.
        position: Option<(String, String)>,
        /// Told once the rows and position are fsynced.
        durable: Option<tokio::sync::oneshot::Sender<()>>,
    },
    /// Wakes the writer to check whether a flush is due.
    Tick,
}

/// Rows one run handled.
#[derive(Debug, Default, Clone)]
pub struct WriterSummary {
    pub rows_appended: BTreeMap<&'static str, u64>,
    pub rows_written: BTreeMap<&'static str, u64>,
    pub segments_flushed: u64,
}

/// Moves closed segments into the store.
pub struct Flusher {
    store: Store,
    home: WalDir,
    metrics: Arc<Metrics>,
    /// Positions of everything already in the store.
    saved: Positions,
    /// Closed segments not yet in the store, oldest first.
    pending: Vec<PathBuf>,
    summary: WriterSummary,
}

impl Flusher {
    /// Writes every pending segment; stops at the first failure (the rest wait their turn).
    fn flush_pending(&mut self) -> Result<()> {
        while let Some(seg) = self.pending.first().cloned() {
            self.flush_segment(&seg)?;
            self.pending.remove(0);
        }
        Ok(())
    }

    fn flush_segment(&mut self, seg_path: &Path) -> Result<()> {
        let seg = wal::read_segment(seg_path)?;
        if let Some(torn) = &seg.torn {
            tracing::warn!(segment = %seg_path.display(), torn = %torn, "the WAL segment ends in a torn record");
        }
        let mut rows: BTreeMap<&'static str, u64> = BTreeMap::new();
        for (t, b) in &seg.batches {
            *rows.entry(t.name).or_default() += b.num_rows() as u64;
        }
        let before = self.store.stats.rows_written.clone();
        self.store.write_named(&self.home.store_name(seg_path), seg.batches)?;
        let written: BTreeMap<&'static str, u64> =
            self.store.stats.rows_written.iter().map(|(t, n)| (*t, n - before.get(t).copied().unwrap_or(0))).filter(|(_, n)| *n > 0).collect();
        for (k, v) in seg.positions {
            self.saved.insert(k, v);
        }
        self.home.save_positions(&self.saved)?;
        self.home.remove(seg_path)?;
        for (t, n) in &written {
            *self.summary.rows_written.entry(t).or_default() += n;
        }
        self.summary.segments_flushed += 1;
        self.metrics.flushed(wal::segment_seq(seg_path).unwrap_or(0), &rows, &written, self.home.disk_bytes(), super::now_ms());
        Ok(())
    }

    /// Takes closed segments until the appender hangs up; retries failures every few seconds.
    fn run(mut self, rx: std_mpsc::Receiver<PathBuf>) -> Result<WriterSummary> {
        loop {
            let wait = if self.pending.is_empty() { Duration::from_secs(3600) } else { Duration::from_secs(5) };
            match rx.recv_timeout(wait) {
                Ok(seg) => self.pending.push(seg),
                Err(std_mpsc::RecvTimeoutError::Timeout) => {}
                Err(std_mpsc::RecvTimeoutError::Disconnected) => break,
            }
            if let Err(e) = self.flush_pending() {
                self.metrics.flush_failed();
                tracing::error!(error = %e, "flush to the store failed, will retry");
            }
        }
        if let Err(e) = self.flush_pending() {
            tracing::error!(error = %e, "the last flush to the store failed");
        }
        if !self.pending.is_empty() {
            return Err(Error::refused(self.home.dir().to_path_buf(), format!("{} WAL segment(s) could not be flushed; they stay in the WAL and are replayed at the next start", self.pending.len())));
        }
        Ok(self.summary)
    }
}

/// Appends what arrives to the WAL and hands closed segments to the flusher.
pub struct Writer {
    wal: Wal,
    /// Moves to its own thread when `run` starts.
    flusher: Option<Flusher>,
    store_root: PathBuf,
    metrics: Arc<Metrics>,
    /// Positions of everything appended so far.
    positions: Positions,
    flush_interval: Duration,
    flush_rows: u64,
    last_flush: Instant,
    rows_appended: BTreeMap<&'static str, u64>,
}

impl Writer {
    /// Opens the WAL and replays what a previous run left into the store. Returns the writer
    /// and the watch positions to resume from.
    pub fn open(store: Store, wal_dir: &Path, metrics: Arc<Metrics>, flush_interval: Duration, flush_rows: usize) -> Result<(Writer, Positions)> {
        let (wal, left) = Wal::open(wal_dir)?;
        let home = wal.home().clone();
        let saved = home.load_positions();
        let mut flusher = Flusher { store, home, metrics: Arc::clone(&metrics), saved, pending: left, summary: WriterSummary::default() };
        if !flusher.pending.is_empty() {
            tracing::info!(segments = flusher.pending.len(), "replaying {} WAL segment(s) left by the previous run", flusher.pending.len());
        }
        flusher.flush_pending()?;
        let positions = flusher.saved.clone();
        let store_root = flusher.store.display("");
        let w = Writer { wal, flusher: Some(flusher), store_root, metrics, positions: positions.clone(), flush_interval, flush_rows: flush_rows as u64, last_flush: Instant::now(), rows_appended: BTreeMap::new() };
        Ok((w, positions))
    }

    pub fn store_root(&self) -> &Path {
        &self.store_root
    }

    /// Runs until every sender is gone, then flushes everything.
    pub fn run(mut self, mut rx: mpsc::Receiver<Msg>) -> Result<WriterSummary> {
        let (seg_tx, seg_rx) = std_mpsc::channel::<PathBuf>();
        let flusher = self.flusher.take().ok_or_else(|| Error::internal("the writer was started twice"))?;
        let flusher = std::thread::Builder::new().name("gpuledger-flush".into()).spawn(move || flusher.run(seg_rx)).map_err(|e| Error::io("flush thread", e))?;
        let mut result = Ok(());
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
                tracing::error!(error = %e, "cannot append to the WAL");
                result = Err(e);
                break;
            }
            if self.flush_due() {
                self.rotate(&seg_tx);
            }
        }
        drop(rx);
        self.rotate(&seg_tx);
        drop(seg_tx);
        // A panic in the flush thread is a broken invariant, not a problem of the store.
        let flushed = flusher.join().map_err(|_| Error::internal("the live writer's flush thread panicked"))?;
        result?;
        let mut summary = flushed?;
        self.wal.close()?;
        summary.rows_appended = std::mem::take(&mut self.rows_appended);
        Ok(summary)
    }

    fn append(&mut self, msgs: Vec<Msg>) -> Result<()> {
        let mut by_table: BTreeMap<&'static str, (&'static gpuledger_schemas::Table, Vec<arrow::record_batch::RecordBatch>)> = BTreeMap::new();
        let mut moved = false;
        let mut acks = Vec::new();
        for m in msgs {
            if let Msg::Data { batches, position, durable } = m {
                acks.extend(durable);
                for (t, b) in batches {
                    by_table.entry(t.name).or_insert_with(|| (t, Vec::new())).1.push(b);
                }
                if let Some((res, rv)) = position
                    && self.positions.get(&res) != Some(&rv)
                {
                    self.positions.insert(res, rv);
                    moved = true;
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
        let bytes = if grouped.is_empty() && !moved { 0 } else { self.wal.append(&grouped, moved.then_some(&self.positions))? };
        for a in acks {
            let _ = a.send(());
        }
        for (t, n) in &rows {
            *self.rows_appended.entry(t).or_default() += n;
        }
        self.metrics.appended(self.wal.current_seq(), &rows, bytes, super::now_ms());
        Ok(())
    }

    fn flush_due(&self) -> bool {
        self.wal.segment_rows >= self.flush_rows
            || self.wal.segment_bytes >= FLUSH_BYTES
            || (self.wal.segment_bytes > 0 && self.last_flush.elapsed() >= self.flush_interval)
    }

    /// Closes the current segment and hands it to the flusher.
    fn rotate(&mut self, seg_tx: &std_mpsc::Sender<PathBuf>) {
        self.last_flush = Instant::now();
        match self.wal.rotate() {
            Ok(Some(closed)) => {
                // The flusher only goes away after this thread hung up.
                let _ = seg_tx.send(closed);
            }
            Ok(None) => {}
            Err(e) => tracing::error!(error = %e, "cannot start a new WAL segment"),
        }
    }
}
