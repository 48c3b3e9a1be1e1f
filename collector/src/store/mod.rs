//! `parquet_store`: the store's writer.
//!
//! Layout (docs/accounting.md, "The store"): `<root>/<table>/date=YYYY-MM-DD/part-<run>-<n>.parquet`,
//! zstd-compressed, rows sorted by the table's `sort_by`, timestamps `Timestamp(ms, "UTC")`.
//!
//! Guarantees, on a directory and in object storage alike:
//! - **Atomic commits.** Each table is a Delta table (`gpuledger_store::delta`). A flush writes
//!   its files (whole: a temporary name then a rename locally, one PUT or multipart upload in
//!   object storage), then commits them to the table's log in one commit. Readers see the rows
//!   of a commit all at once or not at all; files of a writer that died before committing are
//!   in no version (VACUUM removes them).
//! - **No duplicates.** A row whose key (the table's `key` columns) is already stored, or appears
//!   twice in the input, is skipped. Keys are hashed to 128 bits (xxh3) and the hashes of the
//!   partitions a run touches are loaded from the files the log lists, so re-ingesting the same
//!   input, or rerunning an ingest a crash interrupted, writes nothing twice and loses nothing.
//! - **Concurrent writers.** Commits are put-if-absent, so two writers cannot both commit one
//!   version. The one that loses reads the winner's new files, drops the rows they already
//!   hold and commits again ([`Store::commit_written`]): two ingests of overlapping input into
//!   one store store each row once.

mod heads;
mod keys;

use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch, UInt32Array};
use arrow::compute::{concat_batches, take_record_batch};
use arrow::datatypes::TimestampMillisecondType;
use chrono::{DateTime, NaiveDate};
use gpuledger_schemas::{DedupScope, Table};
use gpuledger_store::layout::{self, LOCK, MARKER};
use gpuledger_store::{BlockingStore, CommitKind, DataFile, Snapshot, StoreLocation};

use crate::error::{Error, Result};
use crate::tables::TableBatch;
use keys::KeySet;

pub use heads::ObjectHead;

/// A table, and the day its key set covers (none: the whole table, see [`DedupScope`]).
type KeyScope = (&'static str, Option<String>);

/// Tuning knobs of the writer.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// A table's buffered rows are written out once they reach this many.
    pub flush_rows: usize,
    /// Bytes all tables' buffered rows may hold together: past it, the table holding the most
    /// is written out. A bound for the whole writer, not per table (eleven tables each just
    /// under a per-table limit would hold eleven times it). Besides bounding memory, this keeps
    /// a flush's concatenated string columns under arrow's 2 GiB offset limit: two million
    /// Kubernetes object versions (whole JSON documents) passed it and failed the ingest.
    pub flush_bytes: usize,
    /// Keys of per-day key sets held at once (16-40 bytes each; 8 million is about four days of
    /// a 256-GPU cluster's samples). Input read in time order (see `ingest::list_inputs`) only
    /// needs the last few days; an older day's set is read back from the store when needed.
    pub day_keys_held: usize,
}

impl Default for StoreOptions {
    fn default() -> Self {
        // A table's 256 MiB buffered is about 750 MiB at its flush (the rows, their
        // concatenation, the sorted copy); the files are merged later by compaction, so small
        // flushes cost little.
        StoreOptions { flush_rows: 2_000_000, flush_bytes: 256 << 20, day_keys_held: 8_000_000 }
    }
}

/// What a writer did, per table.
#[derive(Debug, Default, Clone)]
pub struct StoreStats {
    pub rows_written: BTreeMap<&'static str, u64>,
    /// Rows skipped because the same fact was already stored or appeared twice in the input.
    pub duplicates: BTreeMap<&'static str, u64>,
    pub files_written: u64,
    pub bytes_written: u64,
    /// Commits to the tables' logs (one per table and flush).
    pub commits: u64,
    /// Commits tried again because another writer committed to the table first.
    pub commit_retries: u64,
}

/// An open store, writable by this process only.
pub struct Store {
    files: BlockingStore,
    options: StoreOptions,
    run_id: String,
    file_seq: u64,
    /// Per table: buffered batches, their rows and their bytes.
    buffers: HashMap<&'static str, (&'static Table, Vec<RecordBatch>, usize, usize)>,
    /// Key sets by table and day (no day: the whole table), each with when it was last used.
    keys: HashMap<KeyScope, (KeySet, u64)>,
    /// Counts key set uses, for the least recently used one.
    key_clock: u64,
    /// Per table: the files of its log as this writer last read or committed them.
    snapshots: HashMap<&'static str, Snapshot>,
    pub stats: StoreStats,
}

impl Store {
    /// Opens (creating if needed) the store at `location` for writing.
    pub fn open(location: &StoreLocation, options: StoreOptions) -> Result<Store> {
        if let StoreLocation::Local(root) = location {
            Self::open_local(root)?;
        }
        let files = BlockingStore::new(location)?;
        // A prefix that holds objects but no marker is someone else's: refused, as for a directory.
        if location.local().is_none() && !files.has_file(MARKER)? {
            // Objects but no marker: someone else's, unless another writer is creating the store
            // right now (it writes the marker before anything else, so look again after the listing).
            if !files.is_empty()? && !files.has_file(MARKER)? {
                return Err(Error::refused(
                    location.display(""),
                    format!("holds objects but no {MARKER} marker: not a gpuledger store, refusing to write into it"),
                ));
            }
            files.write_whole(MARKER, layout::marker_contents().into_bytes())?;
        }
        Ok(Store { files, options, run_id: layout::run_id(), file_seq: 0, buffers: HashMap::new(), keys: HashMap::new(), key_clock: 0, snapshots: HashMap::new(), stats: StoreStats::default() })
    }

    /// Creates or checks a local store.
    fn open_local(root: &Path) -> Result<()> {
        if root.exists() {
            // Empty, or only another writer's marker being written (two writers creating one
            // store). The marker is looked for after the listing: a writer writes it before
            // anything else, so a listing that shows more was taken after the marker was there.
            let empty = fs::read_dir(root).map_err(|e| Error::io(root, e))?.flatten().all(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                name == MARKER || (name.starts_with(&format!(".{MARKER}.")) && name.ends_with(gpuledger_store::atomic::TMP_SUFFIX))
            });
            let is_store = root.join(MARKER).exists();
            if !is_store && !empty {
                return Err(Error::refused(
                    root.to_path_buf(),
                    format!("exists, is not empty and has no {MARKER} marker: not a gpuledger store, refusing to write into it"),
                ));
            }
        }
        fs::create_dir_all(root).map_err(|e| Error::io(root, e))?;
        let marker = root.join(MARKER);
        if !marker.exists() {
            gpuledger_store::atomic::write_file(&marker, layout::marker_contents().as_bytes())?;
        }
        // A lock file of an older gpuledger means nothing now: Delta commits keep writers apart.
        let _ = fs::remove_file(root.join(LOCK));
        gpuledger_store::atomic::remove_stale_temporaries(root)?;
        Ok(())
    }

    pub fn location(&self) -> &StoreLocation {
        self.files.location()
    }

    /// Names (not paths) of the entries directly under `rel_dir`, a `/`-separated directory
    /// inside the store, sorted; none if it does not exist.
    pub fn list_names(&self, rel_dir: &str) -> Result<Vec<String>> {
        Ok(self.files.list_names(rel_dir)?)
    }

    /// Writes a small file (a marker, a note) at `rel` so that it appears whole.
    pub fn put_small(&self, rel: &str, bytes: &[u8]) -> Result<()> {
        self.files.write_whole(rel, bytes.to_vec())?;
        Ok(())
    }

    /// The name of `rel` in messages: a path, or a URL.
    pub fn display(&self, rel: &str) -> PathBuf {
        self.location().display(rel)
    }

    /// Buffers a batch; writes the table out when enough rows are buffered.
    pub fn append(&mut self, (table, batch): TableBatch) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let entry = self.buffers.entry(table.name).or_insert_with(|| (table, Vec::new(), 0, 0));
        entry.2 += batch.num_rows();
        entry.3 += batch.get_array_memory_size();
        entry.1.push(batch);
        if entry.2 >= self.options.flush_rows {
            self.flush_table(table.name)?;
        }
        if self.buffers.values().map(|b| b.3).sum::<usize>() >= self.options.flush_bytes
            && let Some(largest) = self.buffers.iter().max_by_key(|(_, b)| b.3).map(|(name, _)| *name)
        {
            self.flush_table(largest)?;
        }
        Ok(())
    }

    /// Writes every buffered row.
    pub fn flush(&mut self) -> Result<()> {
        let names: Vec<&'static str> = self.buffers.keys().copied().collect();
        for name in names {
            self.flush_table(name)?;
        }
        Ok(())
    }

    /// Flushes and returns what was done.
    pub fn finish(mut self) -> Result<StoreStats> {
        self.flush()?;
        Ok(std::mem::take(&mut self.stats))
    }

    fn flush_table(&mut self, name: &'static str) -> Result<()> {
        let Some((table, batches, _, _)) = self.buffers.remove(name) else { return Ok(()) };
        if batches.is_empty() {
            return Ok(());
        }
        let schema = table.arrow_schema();
        let all = concat_batches(&schema, &batches).map_err(|source| Error::Arrow { table: table.name, source })?;
        drop(batches);
        self.write_partitions(table, &all, None)
    }

    /// Writes `batches` (any tables, any days) as one file per table and day named
    /// `part-<name>.parquet`, bypassing the buffers. A file of that name that already exists was
    /// written by an earlier attempt (files appear atomically), so its rows are skipped: calling
    /// this again with the same name and rows, e.g. replaying a write-ahead-log segment after a
    /// crash, writes only what is missing. Duplicates are looked for within `batches` only, so
    /// memory stays that of the batches however large the store grows.
    pub fn write_named(&mut self, name: &str, batches: Vec<TableBatch>) -> Result<()> {
        let mut by_table: BTreeMap<&'static str, (&'static Table, Vec<RecordBatch>)> = BTreeMap::new();
        for (table, batch) in batches {
            if batch.num_rows() > 0 {
                by_table.entry(table.name).or_insert_with(|| (table, Vec::new())).1.push(batch);
            }
        }
        for (_, (table, batches)) in by_table {
            let all = concat_batches(&table.arrow_schema(), &batches).map_err(|source| Error::Arrow { table: table.name, source })?;
            drop(batches);
            self.write_partitions(table, &all, Some(name))?;
        }
        Ok(())
    }

    /// Splits `all` by day and writes each day's new rows to one file. `named` picks the
    /// file name and the duplicate check: `None` names the file after this run and checks the
    /// keys stored on disk; `Some(name)` uses that name and checks within `all` only.
    fn write_partitions(&mut self, table: &'static Table, all: &RecordBatch, named: Option<&str>) -> Result<()> {
        let mut written: Vec<DataFile> = Vec::new();
        for (day, indices) in partition_rows(table, all)? {
            let date = day_to_date(day);
            let file_name = match named {
                Some(name) => format!("part-{name}.parquet"),
                None => {
                    self.file_seq += 1;
                    format!("part-{}-{:05}.parquet", self.run_id, self.file_seq)
                }
            };
            let path = format!("{}={date}/{file_name}", gpuledger_schemas::PARTITION_KEY);
            let rel = format!("{}/{path}", table.name);
            // One day in the batch (the live collector's case): no copy.
            let part = if indices.len() == all.num_rows() {
                all.clone()
            } else {
                take_record_batch(all, &UInt32Array::from(indices)).map_err(|source| Error::Arrow { table: table.name, source })?
            };
            // A file of this name in the log was committed by an earlier attempt; one that is
            // only on disk was written by an attempt that died before committing: written again.
            if named.is_some() && self.snapshot(table)?.files.iter().any(|f| f.path == path) {
                *self.stats.duplicates.entry(table.name).or_default() += part.num_rows() as u64;
                continue;
            }
            let fresh = match named {
                Some(_) => KeySet::empty().insert_new(table, &part)?,
                None => {
                    let scope = match table.dedup {
                        DedupScope::Partition => Some(date.clone()),
                        DedupScope::Table => None,
                    };
                    self.keyset(table, scope)?.insert_new(table, &part)?
                }
            };
            let kept = fresh.true_count();
            let dropped = part.num_rows() - kept;
            if dropped > 0 {
                *self.stats.duplicates.entry(table.name).or_default() += dropped as u64;
            }
            if kept == 0 {
                continue;
            }
            let part = if dropped > 0 {
                arrow::compute::filter_record_batch(&part, &fresh).map_err(|source| Error::Arrow { table: table.name, source })?
            } else {
                part
            };
            let sorted = sort_batch(table, &part)?;
            let bytes = gpuledger_store::write_table_file(&self.files, table, &rel, &sorted)?;
            self.stats.files_written += 1;
            self.stats.bytes_written += bytes;
            *self.stats.rows_written.entry(table.name).or_default() += kept as u64;
            written.push(DataFile { path, date: Some(date), size: bytes, rows: Some(kept as u64) });
        }
        self.commit_written(table, written, named.is_some())
    }

    /// Commits the files just written for `table` in one commit: readers see all of this write
    /// or none of it. If another writer committed to the table since this writer read it, its
    /// new files are read, the rows they already hold are dropped from ours (files rewritten
    /// without them; the first versions stay uncommitted, for VACUUM) and the commit is tried
    /// again on top of theirs, so two writers of overlapping input store each row once.
    fn commit_written(&mut self, table: &'static Table, mut written: Vec<DataFile>, named: bool) -> Result<()> {
        let mut attempt = 0u32;
        while !written.is_empty() {
            let read_version = self.snapshot(table)?.version;
            match self.files.commit(table.name, read_version, &written, &[], CommitKind::Append) {
                Ok(version) => {
                    let snapshot = self.snapshots.entry(table.name).or_default();
                    snapshot.version = Some(version);
                    snapshot.files.append(&mut written);
                    self.stats.commits += 1;
                }
                Err(gpuledger_store::Error::Conflict { .. }) if attempt < 100 => {
                    attempt += 1;
                    self.stats.commit_retries += 1;
                    let latest = self.files.snapshot(table.name)?;
                    let known: std::collections::HashSet<&str> = self.snapshots.get(table.name).map(|s| s.files.iter().map(|f| f.path.as_str()).collect()).unwrap_or_default();
                    let theirs: Vec<DataFile> = latest.files.iter().filter(|f| !known.contains(f.path.as_str())).cloned().collect();
                    tracing::debug!(table = table.name, files = theirs.len(), attempt, "another writer committed first: deduplicating against its files");
                    self.snapshots.insert(table.name, latest);
                    if !named {
                        self.learn_keys_of(table, &theirs)?;
                    }
                    written = self.without_rows_of(table, &theirs, written, named)?;
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Every key set this writer holds learns the keys of `theirs` (files another writer
    /// committed) of its day, or of any day for a table deduplicated as a whole. This writer's
    /// snapshot now lists their files, so a set loaded later reads them; one loaded before must
    /// learn them here, whichever day this writer's own files are of: else a later write of that
    /// day would take their rows for new.
    fn learn_keys_of(&mut self, table: &'static Table, theirs: &[DataFile]) -> Result<()> {
        let scopes: Vec<Option<String>> = self.keys.keys().filter(|(t, _)| *t == table.name).map(|(_, s)| s.clone()).collect();
        for scope in scopes {
            let files: Vec<String> = theirs.iter().filter(|f| scope.is_none() || f.date == scope).map(|f| format!("{}/{}", table.name, f.path)).collect();
            if files.is_empty() {
                continue;
            }
            if let Some((mut set, used)) = self.keys.remove(&(table.name, scope.clone())) {
                for file in &files {
                    self.read_parquet(file, |reader| set.load(table, reader))?;
                }
                self.keys.insert((table.name, scope), (set, used));
            }
        }
        Ok(())
    }

    /// `written` (files of this writer, not committed) without the rows whose keys `theirs`
    /// (files another writer committed) hold; the key sets learn `theirs` too. A writer of
    /// named files (the WAL) drops a file another writer committed under the same name.
    fn without_rows_of(&mut self, table: &'static Table, theirs: &[DataFile], written: Vec<DataFile>, named: bool) -> Result<Vec<DataFile>> {
        if named {
            let taken: std::collections::HashSet<&str> = theirs.iter().map(|f| f.path.as_str()).collect();
            return Ok(written.into_iter().filter(|f| !taken.contains(f.path.as_str())).collect());
        }
        let mut kept = Vec::new();
        for mine in written {
            // Their rows that could duplicate mine: the same day, or any day for a table deduplicated as a whole.
            let scope = match table.dedup {
                DedupScope::Partition => mine.date.clone(),
                DedupScope::Table => None,
            };
            let relevant: Vec<String> = theirs.iter().filter(|f| scope.is_none() || f.date == scope).map(|f| format!("{}/{}", table.name, f.path)).collect();
            if relevant.is_empty() {
                kept.push(mine);
                continue;
            }
            let mut other = KeySet::empty();
            for file in &relevant {
                self.read_parquet(file, |reader| other.load(table, reader))?;
            }
            let rel = format!("{}/{}", table.name, mine.path);
            let batches: Vec<RecordBatch> = self.read_parquet(&rel, |source| {
                let columns: Vec<&str> = table.columns.iter().map(|c| c.name).collect();
                source.read_columns(&columns)?.collect::<std::result::Result<Vec<_>, _>>().map_err(|source| Error::Arrow { table: table.name, source })
            })?;
            let all = concat_batches(&table.arrow_schema(), &batches).map_err(|source| Error::Arrow { table: table.name, source })?;
            let fresh = other.insert_new(table, &all)?;
            let dropped = all.num_rows() - fresh.true_count();
            if dropped == 0 {
                kept.push(mine);
                continue;
            }
            *self.stats.duplicates.entry(table.name).or_default() += dropped as u64;
            if let Some(n) = self.stats.rows_written.get_mut(table.name) {
                *n -= dropped as u64;
            }
            if dropped == all.num_rows() {
                continue;
            }
            let rest = arrow::compute::filter_record_batch(&all, &fresh).map_err(|source| Error::Arrow { table: table.name, source })?;
            self.file_seq += 1;
            let date = mine.date.clone().unwrap_or_default();
            let path = format!("{}={date}/part-{}-{:05}.parquet", gpuledger_schemas::PARTITION_KEY, self.run_id, self.file_seq);
            let size = gpuledger_store::write_table_file(&self.files, table, &format!("{}/{path}", table.name), &rest)?;
            self.stats.files_written += 1;
            self.stats.bytes_written += size;
            kept.push(DataFile { path, date: mine.date, size, rows: Some(rest.num_rows() as u64) });
        }
        Ok(kept)
    }

    /// The table's files as this writer knows them: its log, read on first use (which makes
    /// the table a Delta table if it is not one yet, taking in files an older gpuledger wrote).
    fn snapshot(&mut self, table: &'static Table) -> Result<&Snapshot> {
        if !self.snapshots.contains_key(table.name) {
            let ensured = self.files.ensure_table(table.name, &table.arrow_schema(), true)?;
            if ensured.created && ensured.converted_files > 0 {
                tracing::info!(table = table.name, files = ensured.converted_files, "converted the table to a Delta table: its existing files are now its first version");
            }
            if !ensured.added_columns.is_empty() {
                tracing::info!(table = table.name, columns = ?ensured.added_columns, "added the columns of this gpuledger version to the table's log");
            }
            let snapshot = self.files.snapshot(table.name)?;
            self.snapshots.insert(table.name, snapshot);
        }
        let path = self.display(table.name);
        self.snapshots.get(table.name).ok_or_else(|| Error::internal(format!("{}: snapshot vanished", path.display())))
    }

    /// The key hashes of a partition (or a whole table), loaded from the store on first use.
    fn keyset(&mut self, table: &'static Table, scope: Option<String>) -> Result<&mut KeySet> {
        let k = (table.name, scope);
        self.drop_old_keysets(&k);
        if !self.keys.contains_key(&k) {
            let files = self.committed_files(table, k.1.as_deref())?;
            let mut set = KeySet::empty();
            for file in files {
                self.read_parquet(&file, |reader| set.load(table, reader))?;
            }
            self.keys.insert(k.clone(), (set, 0));
        }
        self.key_clock += 1;
        let path = self.display("");
        let (set, used) = self.keys.get_mut(&k).ok_or_else(|| Error::internal(format!("{}: key set vanished", path.display())))?;
        *used = self.key_clock;
        Ok(set)
    }

    /// Drops the least recently used days' key sets (never `keep`) while the days' sets hold
    /// more than [`StoreOptions::day_keys_held`] keys. A dropped day's keys are read back from its committed
    /// files if that day comes again; everything this writer wrote is committed by then.
    fn drop_old_keysets(&mut self, keep: &KeyScope) {
        loop {
            let held: usize = self.keys.iter().filter(|(k, _)| k.1.is_some()).map(|(_, (set, _))| set.held()).sum();
            if held <= self.options.day_keys_held {
                return;
            }
            let oldest = self.keys.iter().filter(|(k, _)| k.1.is_some() && *k != keep).min_by_key(|(_, (_, used))| *used).map(|(k, _)| k.clone());
            let Some(oldest) = oldest else { return };
            tracing::debug!(table = oldest.0, date = ?oldest.1, held, "dropping the key set of a day not written lately");
            self.keys.remove(&oldest);
        }
    }

    /// Store paths of the table's committed files (of one day, if `date` is given). Files on
    /// disk that no commit lists (a crashed writer's) hold no rows of the table.
    fn committed_files(&mut self, table: &'static Table, date: Option<&str>) -> Result<Vec<String>> {
        Ok(self.snapshot(table)?.files.iter().filter(|f| date.is_none() || f.date.as_deref() == date).map(|f| format!("{}/{}", table.name, f.path)).collect())
    }

    /// Opens one stored Parquet file and hands a reader builder to `f`.
    fn read_parquet<T>(&self, rel: &str, f: impl FnOnce(ParquetSource) -> Result<T>) -> Result<T> {
        // A local file is read where it lies; an object is fetched whole.
        match self.location().local() {
            Some(root) => {
                let path = root.join(rel);
                let file = File::open(&path).map_err(|e| Error::io(&path, e))?;
                f(ParquetSource { name: path, file: SourceData::File(file) })
            }
            None => f(ParquetSource { name: self.display(rel), file: SourceData::Bytes(self.files.get(rel)?) }),
        }
    }

    /// The last stored version of every Kubernetes object (see [`heads`]).
    pub fn object_heads(&mut self) -> Result<HashMap<String, HashMap<String, ObjectHead>>> {
        let files = self.committed_files(&gpuledger_schemas::K8S_OBJECTS, None)?;
        let mut heads = HashMap::new();
        for file in files {
            self.read_parquet(&file, |source| heads::read_heads(source, &mut heads))?;
        }
        Ok(heads)
    }
}

/// A stored Parquet file being read: a local file, or an object fetched whole.
pub(crate) struct ParquetSource {
    pub name: PathBuf,
    pub file: SourceData,
}

pub(crate) enum SourceData {
    File(File),
    Bytes(bytes::Bytes),
}

impl ParquetSource {
    /// A reader of the columns `columns` (all must exist) of the file.
    pub(crate) fn read_columns(self, columns: &[&str]) -> Result<parquet::arrow::arrow_reader::ParquetRecordBatchReader> {
        fn build<R: parquet::file::reader::ChunkReader + 'static>(name: &Path, r: R, columns: &[&str]) -> Result<parquet::arrow::arrow_reader::ParquetRecordBatchReader> {
            use parquet::arrow::ProjectionMask;
            use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
            let pq = |source| Error::Store(gpuledger_store::Error::Parquet { path: name.to_path_buf(), source });
            let builder = ParquetRecordBatchReaderBuilder::try_new(r).map_err(pq)?;
            let schema = Arc::clone(builder.schema());
            let mut roots = Vec::new();
            for c in columns {
                roots.push(schema.index_of(c).map_err(|_| Error::refused(name.to_path_buf(), format!("file lacks column {c}")))?);
            }
            let mask = ProjectionMask::roots(builder.parquet_schema(), roots);
            builder.with_projection(mask).build().map_err(pq)
        }
        match self.file {
            SourceData::File(f) => build(&self.name, f, columns),
            SourceData::Bytes(b) => build(&self.name, b, columns),
        }
    }
}

/// Row indices per UTC day (days since the epoch) of the table's partition column.
fn partition_rows(table: &'static Table, batch: &RecordBatch) -> Result<BTreeMap<i64, Vec<u32>>> {
    let idx = table.index_of(table.partition_column).ok_or_else(|| Error::internal(format!("{}: no partition column", table.name)))?;
    let ts = batch.column(idx).as_primitive::<TimestampMillisecondType>();
    let mut out: BTreeMap<i64, Vec<u32>> = BTreeMap::new();
    // Runs of one day are the common case (a file holds one scrape or one day): collect a run,
    // then hand it to the map in one go.
    let mut run_day = i64::MIN;
    let mut run: Vec<u32> = Vec::new();
    for (i, t) in ts.values().iter().enumerate() {
        let day = t.div_euclid(86_400_000);
        if day != run_day && !run.is_empty() {
            out.entry(run_day).or_default().append(&mut run);
        }
        run_day = day;
        run.push(i as u32);
    }
    if !run.is_empty() {
        out.entry(run_day).or_default().append(&mut run);
    }
    Ok(out)
}

fn day_to_date(day: i64) -> String {
    DateTime::from_timestamp(day * 86_400, 0)
        .map(|t| t.date_naive())
        .unwrap_or(NaiveDate::MIN)
        .format("%Y-%m-%d")
        .to_string()
}

/// Sorts rows by the table's `sort_by` columns (ascending, nulls first, strings by bytes: the
/// order arrow's `lexsort` gives). Profiling showed `lexsort` spending most of the writer's time
/// comparing the same long strings (host, GPU UUID) over and over; here each string column is
/// first replaced by the rank of its value among the batch's few distinct values, so the sort
/// itself compares integers.
fn sort_batch(table: &'static Table, batch: &RecordBatch) -> Result<RecordBatch> {
    let keys: Vec<Vec<u64>> = table
        .sort_by
        .iter()
        .filter_map(|c| table.index_of(c))
        .map(|i| sort_ranks(batch.column(i)))
        .collect::<Option<_>>()
        .ok_or_else(|| Error::internal(format!("{}: a sort column has an unsortable type", table.name)))?;
    let mut order: Vec<u32> = (0..batch.num_rows() as u32).collect();
    order.sort_unstable_by(|a, b| {
        for k in &keys {
            match k[*a as usize].cmp(&k[*b as usize]) {
                std::cmp::Ordering::Equal => continue,
                other => return other,
            }
        }
        a.cmp(b)
    });
    take_record_batch(batch, &UInt32Array::from(order)).map_err(|source| Error::Arrow { table: table.name, source })
}

/// One integer per row that orders like the column (0 = null, sorting first).
fn sort_ranks(column: &ArrayRef) -> Option<Vec<u64>> {
    use arrow::datatypes::{DataType, Int32Type, Int64Type};
    let n = column.len();
    // Integers map to u64 keeping their order: flip the sign bit, then make room for null = 0.
    let int_key = |v: i64| ((v as u64) ^ (1 << 63)).saturating_add(1);
    Some(match column.data_type() {
        DataType::Utf8 => {
            let a = column.as_string::<i32>();
            let mut distinct: Vec<&str> = a.iter().flatten().collect::<rustc_hash::FxHashSet<&str>>().into_iter().collect();
            distinct.sort_unstable();
            let rank: rustc_hash::FxHashMap<&str, u64> = distinct.iter().enumerate().map(|(i, s)| (*s, i as u64 + 1)).collect();
            a.iter().map(|v| v.map_or(0, |s| rank[s])).collect()
        }
        DataType::Int32 => column.as_primitive::<Int32Type>().iter().map(|v| v.map_or(0, |x| int_key(i64::from(x)))).collect(),
        DataType::Int64 => column.as_primitive::<Int64Type>().iter().map(|v| v.map_or(0, int_key)).collect(),
        DataType::Timestamp(_, _) => column.as_primitive::<TimestampMillisecondType>().iter().map(|v| v.map_or(0, int_key)).collect(),
        DataType::Boolean => column.as_boolean().iter().map(|v| v.map_or(0, |b| 1 + u64::from(b))).collect(),
        _ => return None,
    })
    .filter(|v: &Vec<u64>| v.len() == n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn rank_sort_matches_arrow_lexsort() {
        use arrow::array::{Int32Array, StringArray, TimestampMillisecondArray};
        use arrow::compute::{SortColumn, lexsort_to_indices};
        let t = &gpuledger_schemas::GPU_SAMPLES;
        let n = 500;
        // A few hosts and UUIDs (with nulls), MIG ids with nulls and negatives, shuffled times.
        let host: StringArray = (0..n).map(|i| if i % 17 == 0 { None } else { Some(format!("node-{}", (i * 7) % 5)) }).collect();
        let uuid: StringArray = (0..n).map(|i| Some(format!("GPU-{}", (i * 13) % 9))).collect();
        let mig: Int32Array = (0..n).map(|i| if i % 3 == 0 { None } else { Some(((i * 31) % 7) as i32 - 3) }).collect();
        let ts = TimestampMillisecondArray::from((0..n).map(|i| ((i * 7919) % 1000) as i64 - 500).collect::<Vec<_>>()).with_timezone("UTC");
        let mut columns: Vec<ArrayRef> = Vec::new();
        for c in t.columns {
            let a: ArrayRef = match c.name {
                "hostname" => Arc::new(host.clone()),
                "uuid" => Arc::new(uuid.clone()),
                "mig_instance" => Arc::new(mig.clone()),
                "ts" => Arc::new(ts.clone()),
                _ => arrow::array::new_null_array(&c.ty.data_type(), n),
            };
            columns.push(a);
        }
        let batch = RecordBatch::try_new(t.arrow_schema(), columns).unwrap();
        let ours = sort_batch(t, &batch).unwrap();
        let cols: Vec<SortColumn> = t.sort_by.iter().map(|c| SortColumn { values: Arc::clone(batch.column(t.index_of(c).unwrap())), options: None }).collect();
        let theirs = take_record_batch(&batch, &lexsort_to_indices(&cols, None).unwrap()).unwrap();
        for c in t.sort_by {
            let i = t.index_of(c).unwrap();
            assert_eq!(ours.column(i).as_ref(), theirs.column(i).as_ref(), "column {c}");
        }
    }

    #[test]
    fn days_map_to_dates() {
        assert_eq!(day_to_date(0), "1970-01-01");
        assert_eq!(day_to_date(20_727), "2026-10-01");
        assert_eq!(day_to_date(-1), "1969-12-31");
    }

    #[test]
    fn refuses_a_directory_that_is_not_a_store() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("notes.txt"), "mine").unwrap();
        let err = Store::open(&StoreLocation::Local(dir.path().to_path_buf()), StoreOptions::default()).err().unwrap();
        assert!(err.to_string().contains("not a gpuledger store"), "{err}");
    }

    /// A GPU-samples batch of `n` rows on one day, rows told apart by `offset`.
    fn samples(n: usize, offset: i64) -> RecordBatch {
        use arrow::array::{StringArray, TimestampMillisecondArray};
        let t = &gpuledger_schemas::GPU_SAMPLES;
        let columns: Vec<ArrayRef> = t
            .columns
            .iter()
            .map(|c| -> ArrayRef {
                match c.name {
                    "hostname" => Arc::new(StringArray::from(vec![Some("node-a"); n])),
                    "uuid" => Arc::new((0..n).map(|i| Some(format!("GPU-{i}"))).collect::<StringArray>()),
                    "ts" => Arc::new(TimestampMillisecondArray::from(vec![1_790_000_000_000 + offset; n]).with_timezone("UTC")),
                    _ => arrow::array::new_null_array(&c.ty.data_type(), n),
                }
            })
            .collect();
        RecordBatch::try_new(t.arrow_schema(), columns).unwrap()
    }

    /// `n` metric_samples rows, one metric of distinct label sets.
    fn metric_samples(n: usize) -> RecordBatch {
        use arrow::array::{Float64Array, StringArray, TimestampMillisecondArray};
        let columns: Vec<ArrayRef> = vec![
            Arc::new(TimestampMillisecondArray::from(vec![1_790_000_000_000; n]).with_timezone("UTC")),
            Arc::new(StringArray::from(vec!["DCGM_FI_PROF_NVLINK_TX_BYTES"; n])),
            Arc::new((0..n).map(|i| Some(format!("{{\"gpu\":\"{i}\"}}"))).collect::<StringArray>()),
            Arc::new(Float64Array::from(vec![1.0; n])),
        ];
        RecordBatch::try_new(gpuledger_schemas::METRIC_SAMPLES.arrow_schema(), columns).unwrap()
    }

    #[test]
    fn buffers_are_flushed_by_bytes_as_well_as_rows() {
        let write = |flush_bytes: usize| {
            let dir = tempfile::tempdir().unwrap();
            let mut store = Store::open(&StoreLocation::Local(dir.path().to_path_buf()), StoreOptions { flush_rows: usize::MAX, flush_bytes, ..StoreOptions::default() }).unwrap();
            for k in 0..3 {
                store.append((&gpuledger_schemas::GPU_SAMPLES, samples(200, k * 1000))).unwrap();
            }
            let stats = store.finish().unwrap();
            (stats.files_written, stats.rows_written.values().sum::<u64>())
        };
        let one_batch = samples(200, 0).get_array_memory_size();
        // Each batch reaches the byte limit: three flushes, three files, every row once.
        assert_eq!(write(one_batch), (3, 600));
        // Under the limit everything waits for the final flush: one file.
        assert_eq!(write(usize::MAX), (1, 600));
    }

    #[test]
    fn the_byte_limit_bounds_all_tables_together_and_writes_the_largest() {
        let dir = tempfile::tempdir().unwrap();
        let small = metric_samples(50).get_array_memory_size();
        let big = samples(200, 1000).get_array_memory_size();
        assert!(small < big);
        // The two tables together reach the limit, neither alone.
        let options = StoreOptions { flush_rows: usize::MAX, flush_bytes: big + small, ..StoreOptions::default() };
        let mut store = Store::open(&StoreLocation::Local(dir.path().to_path_buf()), options).unwrap();
        store.append((&gpuledger_schemas::METRIC_SAMPLES, metric_samples(50))).unwrap();
        assert_eq!(store.stats.files_written, 0, "under the limit");
        store.append((&gpuledger_schemas::GPU_SAMPLES, samples(200, 1000))).unwrap();
        // gpu_samples holds the most: it is written, metric_samples waits.
        assert_eq!(store.stats.rows_written.get("gpu_samples"), Some(&200));
        assert_eq!(store.stats.rows_written.get("metric_samples"), None);
        let stats = store.finish().unwrap();
        assert_eq!(stats.rows_written.get("metric_samples"), Some(&50));
    }

    #[test]
    fn old_days_key_sets_are_dropped_and_read_back() {
        // Room for the keys of two days (30 rows each): writing five days drops the older
        // days' sets; writing every day again must still find each row stored.
        let dir = tempfile::tempdir().unwrap();
        let location = StoreLocation::Local(dir.path().to_path_buf());
        let options = StoreOptions { flush_rows: 1, day_keys_held: 60, ..StoreOptions::default() };
        let day = 86_400_000;
        let mut store = Store::open(&location, options.clone()).unwrap();
        for d in 0..5 {
            store.append((&gpuledger_schemas::GPU_SAMPLES, samples(30, d * day))).unwrap();
            let held: usize = store.keys.iter().filter(|(k, _)| k.1.is_some()).map(|(_, (s, _))| s.held()).sum();
            // The day being written, and at most what the limit allows of the others.
            assert!(held <= 60 + 30, "day {d}: {held} keys held");
        }
        assert!(store.keys.len() < 5, "old days dropped: {}", store.keys.len());
        // Again, newest first, then the oldest twice: every row is known, none written.
        for d in [4, 3, 2, 1, 0, 0] {
            store.append((&gpuledger_schemas::GPU_SAMPLES, samples(30, d * day))).unwrap();
        }
        // A few rows of a dropped day are new.
        store.append((&gpuledger_schemas::GPU_SAMPLES, samples(33, 4 * day))).unwrap();
        let stats = store.finish().unwrap();
        assert_eq!(stats.rows_written.values().sum::<u64>(), 150 + 3, "{stats:?}");
        assert_eq!(stats.duplicates.values().sum::<u64>(), 180 + 30, "{stats:?}");
        assert_eq!(BlockingStore::new(&location).unwrap().snapshot("gpu_samples").unwrap().rows(), Some(153));
    }

    #[test]
    fn an_object_store_keeps_the_layout_and_skips_what_it_has() {
        let location = StoreLocation::parse("memory://store-unit-test/fleet/a").unwrap();
        let write = || {
            let mut store = Store::open(&location, StoreOptions::default()).unwrap();
            store.append((&gpuledger_schemas::GPU_SAMPLES, samples(50, 0))).unwrap();
            store.finish().unwrap()
        };
        let first = write();
        assert_eq!((first.files_written, first.rows_written.values().sum::<u64>()), (1, 50));
        // The second run loads the stored keys from the objects and writes nothing.
        let second = write();
        assert_eq!((second.files_written, second.duplicates.values().sum::<u64>()), (0, 50));
        let store = Store::open(&location, StoreOptions::default()).unwrap();
        let days = store.list_names("gpu_samples").unwrap();
        assert_eq!(days, vec!["_delta_log".to_string(), "date=2026-09-21".to_string()]);
        let files = store.list_names(&format!("gpu_samples/{}", days[1])).unwrap();
        assert!(files.len() == 1 && files[0].starts_with("part-") && files[0].ends_with(".parquet"), "{files:?}");
        assert_eq!(store.list_names("").unwrap(), vec![MARKER.to_string(), "gpu_samples".to_string()]);

        // A prefix holding someone else's objects is not written into.
        let StoreLocation::Remote(r) = StoreLocation::parse("memory://store-unit-test/other").unwrap() else { panic!("remote") };
        futures::executor::block_on(r.put("notes.txt", b"mine".to_vec())).unwrap();
        let err = Store::open(&StoreLocation::Remote(r), StoreOptions::default()).err().unwrap();
        assert!(err.to_string().contains("not a gpuledger store"), "{err}");
    }

    #[test]
    fn two_writers_of_the_same_rows_store_them_once() {
        // Both read the table at the same version (empty), both write the same rows; the second
        // to commit finds the first's commit, drops the rows it holds and commits nothing.
        let dir = tempfile::tempdir().unwrap();
        for location in [StoreLocation::parse("memory://store-unit-test/two-writers").unwrap(), StoreLocation::Local(dir.path().to_path_buf())] {
            let mut a = Store::open(&location, StoreOptions::default()).unwrap();
            let mut b = Store::open(&location, StoreOptions::default()).unwrap();
            // Each loads the (empty) key set before either commits.
            a.snapshot(&gpuledger_schemas::GPU_SAMPLES).unwrap();
            b.snapshot(&gpuledger_schemas::GPU_SAMPLES).unwrap();
            a.append((&gpuledger_schemas::GPU_SAMPLES, samples(40, 0))).unwrap();
            b.append((&gpuledger_schemas::GPU_SAMPLES, samples(40, 0))).unwrap();
            b.append((&gpuledger_schemas::GPU_SAMPLES, samples(10, 5))).unwrap();
            let sa = a.finish().unwrap();
            let sb = b.finish().unwrap();
            assert_eq!(sa.rows_written.values().sum::<u64>(), 40);
            assert_eq!((sb.rows_written.values().sum::<u64>(), sb.duplicates.values().sum::<u64>(), sb.commit_retries), (10, 40, 1), "{sb:?}");
            let snapshot = BlockingStore::new(&location).unwrap().snapshot("gpu_samples").unwrap();
            assert_eq!(snapshot.rows(), Some(50), "{snapshot:?}");
        }
    }

    /// A writer that loses a commit race learns the winner's rows of every day it holds keys
    /// for, not only of the days it was committing: else a later write of such a day takes the
    /// winner's rows for new and stores them twice (seen with two ingests of one capture at once).
    #[test]
    fn a_writer_that_lost_a_race_knows_the_winners_rows_of_every_day_it_holds() {
        let day = 86_400_000;
        let t = &gpuledger_schemas::GPU_SAMPLES;
        let dir = tempfile::tempdir().unwrap();
        let location = StoreLocation::Local(dir.path().to_path_buf());
        let mut a = Store::open(&location, StoreOptions::default()).unwrap();
        let mut b = Store::open(&location, StoreOptions::default()).unwrap();
        // B stores 10 GPUs of the second day, and so holds that day's keys.
        b.append((t, samples(10, day))).unwrap();
        b.flush().unwrap();
        // A, reading after it, stores 20 GPUs of that day (10 new) and 5 of the first day.
        a.append((t, samples(20, day))).unwrap();
        a.append((t, samples(5, 0))).unwrap();
        a.flush().unwrap();
        // B's first day loses to A's commit: B reads A's files and drops the 5 rows.
        b.append((t, samples(5, 0))).unwrap();
        b.flush().unwrap();
        // A's 20 rows of the second day, again through B: all known.
        b.append((t, samples(20, day))).unwrap();
        let sb = b.finish().unwrap();
        a.finish().unwrap();
        assert_eq!((sb.rows_written.values().sum::<u64>(), sb.duplicates.values().sum::<u64>(), sb.commit_retries), (10, 25, 1), "{sb:?}");
        assert_eq!(BlockingStore::new(&location).unwrap().snapshot("gpu_samples").unwrap().rows(), Some(25));
    }
}
