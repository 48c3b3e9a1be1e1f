//! The write-ahead log: what the collector received, durable before it is counted, until it is
//! in the store's Parquet files.
//!
//! Layout of the WAL directory:
//! ```text
//! ID                     this log's identity, created once; names the Parquet files it becomes
//! positions.json         watch positions whose events are already in the store
//! seg-<20 digits>.wal    segments; the highest is being appended to
//! ```
//! A segment is a sequence of records `[u32 length][u32 crc32][payload]` (little endian). A
//! payload is either one table's rows as an Arrow IPC stream (`b'B'`, table name, IPC bytes) or
//! the watch positions after the records before it (`b'P'`, JSON). Each append is fsynced
//! before it returns. A crash can only tear the tail of the last segment: reading stops at the
//! first record whose length or checksum does not hold, and says so.
//!
//! Segment `N` becomes store files named `part-wal-<ID>-<N>.parquet`; the store skips names it
//! already has, so replaying a segment whose flush a crash interrupted writes only what is missing.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::StreamWriter;
use gpuledger_schemas::Table;

use crate::error::{Error, Result};
use crate::tables::TableBatch;

const ID_FILE: &str = "ID";
const POSITIONS_FILE: &str = "positions.json";
const KIND_BATCH: u8 = b'B';
const KIND_POSITIONS: u8 = b'P';
/// A record larger than this is a corrupt length, not a real record.
const MAX_RECORD: u32 = 1 << 30;

/// Watch positions: resource id (`pods`, `kueue.x-k8s.io/workloads`) -> resourceVersion.
pub type Positions = BTreeMap<String, String>;

/// An open WAL, appending to its highest segment.
pub struct Wal {
    dir: PathBuf,
    home: WalDir,
    seq: u64,
    file: File,
    /// Bytes and rows in the current segment.
    pub segment_bytes: u64,
    pub segment_rows: u64,
}

/// What one segment holds.
#[derive(Debug, Default)]
pub struct Segment {
    pub batches: Vec<TableBatch>,
    /// The last positions record of the segment.
    pub positions: Positions,
    /// Set when the segment ends in a torn or corrupt record: what was dropped and why.
    pub torn: Option<String>,
}

impl Wal {
    /// Opens (creating if needed) the WAL in `dir`. Returns it, appending to a fresh segment,
    /// and the segments left by earlier runs, oldest first, to be replayed.
    pub fn open(dir: &Path) -> Result<(Wal, Vec<PathBuf>)> {
        fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let id_path = dir.join(ID_FILE);
        let id = match fs::read_to_string(&id_path) {
            Ok(s) if !s.trim().is_empty() => s.trim().to_owned(),
            _ => {
                // Time plus pid is unique enough for a WAL directory created once.
                let id = format!("{}{:x}", chrono::Utc::now().format("%Y%m%d%H%M%S"), std::process::id());
                write_atomic(&id_path, format!("{id}\n").as_bytes())?;
                id
            }
        };
        let old = segments(dir)?;
        // Segment numbers must never repeat within one WAL, even after every segment was
        // flushed and removed: a reused number would name a store file that already exists,
        // and the store would skip it as written. Starting each run at the clock (in units of
        // 1/1000 ms, while flushes advance the number by at most a few per second) keeps them
        // increasing across runs without any state file.
        let clock = u64::try_from(chrono::Utc::now().timestamp_millis()).unwrap_or(0).saturating_mul(1000);
        let seq = old.iter().filter_map(|p| segment_seq(p)).max().map_or(clock, |m| (m + 1).max(clock));
        let file = create_segment(dir, seq)?;
        let home = WalDir { dir: dir.to_path_buf(), id };
        Ok((Wal { dir: dir.to_path_buf(), home, seq, file, segment_bytes: 0, segment_rows: 0 }, old))
    }

    /// What the flusher needs of the WAL: naming, removing, positions.
    pub fn home(&self) -> &WalDir {
        &self.home
    }

    /// Number of the segment being appended to.
    pub fn current_seq(&self) -> u64 {
        self.seq
    }

    /// Appends one table batch per table plus the positions after them, then fsyncs.
    pub fn append(&mut self, batches: &[TableBatch], positions: Option<&Positions>) -> Result<u64> {
        let mut buf = Vec::new();
        let mut rows = 0u64;
        for (table, batch) in batches {
            if batch.num_rows() == 0 {
                continue;
            }
            let mut payload = vec![KIND_BATCH];
            let name = table.name.as_bytes();
            payload.extend_from_slice(&(name.len() as u16).to_le_bytes());
            payload.extend_from_slice(name);
            let mut w = StreamWriter::try_new(&mut payload, &batch.schema()).map_err(|source| Error::Arrow { table: table.name, source })?;
            w.write(batch).map_err(|source| Error::Arrow { table: table.name, source })?;
            w.finish().map_err(|source| Error::Arrow { table: table.name, source })?;
            drop(w);
            frame(&mut buf, &payload);
            rows += batch.num_rows() as u64;
        }
        if let Some(p) = positions {
            let mut payload = vec![KIND_POSITIONS];
            payload.extend_from_slice(&serde_json::to_vec(p).unwrap_or_default());
            frame(&mut buf, &payload);
        }
        if buf.is_empty() {
            return Ok(0);
        }
        let path = self.segment_path();
        self.file.write_all(&buf).map_err(|e| Error::io(&path, e))?;
        self.file.sync_data().map_err(|e| Error::io(&path, e))?;
        self.segment_bytes += buf.len() as u64;
        self.segment_rows += rows;
        Ok(buf.len() as u64)
    }

    /// Starts a new segment and returns the one it closes (`None` when that one was empty,
    /// which is then removed).
    pub fn rotate(&mut self) -> Result<Option<PathBuf>> {
        let closed = self.segment_path();
        let was_empty = self.segment_bytes == 0;
        self.seq += 1;
        self.file = create_segment(&self.dir, self.seq)?;
        self.segment_bytes = 0;
        self.segment_rows = 0;
        if was_empty {
            fs::remove_file(&closed).map_err(|e| Error::io(&closed, e))?;
            return Ok(None);
        }
        Ok(Some(closed))
    }

    /// Removes the current segment if nothing was appended to it (a clean shutdown leaves no
    /// segment behind).
    pub fn close(self) -> Result<()> {
        if self.segment_bytes == 0 {
            let path = self.segment_path();
            fs::remove_file(&path).map_err(|e| Error::io(&path, e))?;
            sync_dir(&self.dir)?;
        }
        Ok(())
    }

    fn segment_path(&self) -> PathBuf {
        segment_path(&self.dir, self.seq)
    }
}

/// The WAL directory and identity, shared by the appender and the flusher.
#[derive(Debug, Clone)]
pub struct WalDir {
    dir: PathBuf,
    id: String,
}

impl WalDir {
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The name a segment's Parquet files carry in the store.
    pub fn store_name(&self, segment: &Path) -> String {
        format!("wal-{}-{:020}", self.id, segment_seq(segment).unwrap_or(0))
    }

    /// Drops a segment whose rows are all in the store.
    pub fn remove(&self, segment: &Path) -> Result<()> {
        fs::remove_file(segment).map_err(|e| Error::io(segment, e))?;
        sync_dir(&self.dir)
    }

    /// Records positions whose events are in the store (atomically replaced).
    pub fn save_positions(&self, positions: &Positions) -> Result<()> {
        write_atomic(&self.dir.join(POSITIONS_FILE), &serde_json::to_vec_pretty(positions).unwrap_or_default())
    }

    /// Positions saved by [`Wal::save_positions`] (none yet: empty).
    pub fn load_positions(&self) -> Positions {
        fs::read(self.dir.join(POSITIONS_FILE)).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default()
    }

    /// Bytes of every segment on disk.
    pub fn disk_bytes(&self) -> u64 {
        segments(&self.dir).unwrap_or_default().iter().filter_map(|p| fs::metadata(p).ok()).map(|m| m.len()).sum()
    }
}

/// Reads a segment back. Records after a torn or corrupt one are not trusted (the file is
/// append-only, so only a crash mid-append produces one, at the end).
pub fn read_segment(path: &Path) -> Result<Segment> {
    // Record by record, so that the file's bytes and its decoded rows are never both in memory.
    let file = File::open(path).map_err(|e| Error::io(path, e))?;
    let size = file.metadata().map_err(|e| Error::io(path, e))?.len() as usize;
    let mut reader = std::io::BufReader::with_capacity(1 << 20, file);
    let mut seg = Segment::default();
    let mut pos = 0usize;
    let mut payload = Vec::new();
    while pos < size {
        let mut header = [0u8; 8];
        if size - pos < 8 || reader.read_exact(&mut header).is_err() {
            seg.torn = Some(format!("{} bytes of a record header at byte {pos} dropped (torn write)", size - pos));
            break;
        }
        let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]);
        let crc = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
        let end = pos + 8 + len as usize;
        if len > MAX_RECORD || end > size {
            seg.torn = Some(format!("record at byte {pos} announces {len} bytes, {} remain: dropped (torn write)", size - pos - 8));
            break;
        }
        payload.resize(len as usize, 0);
        reader.read_exact(&mut payload).map_err(|e| Error::io(path, e))?;
        if crc32fast::hash(&payload) != crc {
            seg.torn = Some(format!("record at byte {pos} fails its checksum: it and the {} bytes after it dropped", size - end));
            break;
        }
        match payload.first() {
            Some(&KIND_BATCH) => match decode_batch(&payload[1..]) {
                Ok(tb) => seg.batches.push(tb),
                Err(reason) => {
                    seg.torn = Some(format!("record at byte {pos}: {reason}"));
                    break;
                }
            },
            Some(&KIND_POSITIONS) => match serde_json::from_slice(&payload[1..]) {
                Ok(p) => seg.positions = p,
                Err(e) => {
                    seg.torn = Some(format!("positions record at byte {pos}: {e}"));
                    break;
                }
            },
            _ => {
                seg.torn = Some(format!("record at byte {pos} has an unknown kind"));
                break;
            }
        }
        pos = end;
    }
    Ok(seg)
}

fn decode_batch(payload: &[u8]) -> std::result::Result<TableBatch, String> {
    let n = payload.get(..2).map(|b| u16::from_le_bytes([b[0], b[1]]) as usize).ok_or("short record")?;
    let name = payload.get(2..2 + n).and_then(|b| std::str::from_utf8(b).ok()).ok_or("bad table name")?;
    let table: &'static Table = gpuledger_schemas::table(name).ok_or_else(|| format!("unknown table {name:?}"))?;
    let reader = StreamReader::try_new(&payload[2 + n..], None).map_err(|e| format!("Arrow IPC: {e}"))?;
    if reader.schema() != table.arrow_schema() {
        return Err(format!("rows of {name} have a schema other than this version's (written by another gpuledger version?)"));
    }
    let batches: Vec<_> = reader.collect::<std::result::Result<_, _>>().map_err(|e| format!("Arrow IPC: {e}"))?;
    let batch = arrow::compute::concat_batches(&table.arrow_schema(), &batches).map_err(|e| format!("Arrow IPC: {e}"))?;
    Ok((table, batch))
}

fn frame(buf: &mut Vec<u8>, payload: &[u8]) {
    buf.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    buf.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
    buf.extend_from_slice(payload);
}

fn segment_path(dir: &Path, seq: u64) -> PathBuf {
    dir.join(format!("seg-{seq:020}.wal"))
}

/// The number in a segment's file name.
pub fn segment_seq(path: &Path) -> Option<u64> {
    path.file_name()?.to_str()?.strip_prefix("seg-")?.strip_suffix(".wal")?.parse().ok()
}

/// Segments in `dir`, oldest first.
fn segments(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out: Vec<(u64, PathBuf)> = gpuledger_store::list_local(dir)?
        .into_iter()
        .map(|n| dir.join(n))
        .filter_map(|p| segment_seq(&p).map(|s| (s, p)))
        .collect();
    out.sort();
    Ok(out.into_iter().map(|(_, p)| p).collect())
}

fn create_segment(dir: &Path, seq: u64) -> Result<File> {
    let path = segment_path(dir, seq);
    let file = OpenOptions::new().create_new(true).append(true).open(&path).map_err(|e| Error::io(&path, e))?;
    sync_dir(dir)?;
    Ok(file)
}

fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(|e| Error::io(dir, e))
}

fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    gpuledger_store::atomic::write_file(path, bytes)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tables::samples::SampleTables;

    fn samples(n: i64) -> Vec<TableBatch> {
        let mut t = SampleTables::new();
        let m = t.metric(b"DCGM_FI_DEV_GPU_UTIL");
        let s = t.series(vec![("UUID".into(), "GPU-1".into()), ("gpu".into(), "0".into()), ("Hostname".into(), "h".into())]);
        for i in 0..n {
            t.push(m, s, 1_790_000_000_000 + i * 30_000, i as f64);
        }
        t.take_batches().unwrap()
    }

    #[test]
    fn appended_records_read_back_and_rotation_hands_over_closed_segments() {
        let dir = tempfile::tempdir().unwrap();
        let (mut wal, old) = Wal::open(dir.path()).unwrap();
        assert!(old.is_empty());
        let b = samples(5);
        let rows: usize = b.iter().map(|(_, r)| r.num_rows()).sum();
        let pos = Positions::from([("pods".to_owned(), "41".to_owned())]);
        wal.append(&b, Some(&pos)).unwrap();
        assert_eq!(wal.segment_rows as usize, rows);
        let closed = wal.rotate().unwrap().expect("non-empty segment");
        assert!(wal.rotate().unwrap().is_none(), "an empty segment is dropped, not handed over");
        let seg = read_segment(&closed).unwrap();
        assert!(seg.torn.is_none());
        assert_eq!(seg.positions, pos);
        assert_eq!(seg.batches.len(), b.len());
        for ((t1, r1), (t2, r2)) in seg.batches.iter().zip(&b) {
            assert_eq!(t1.name, t2.name);
            assert_eq!(r1, r2);
        }
        assert!(wal.home().store_name(&closed).starts_with("wal-"));
        assert_ne!(wal.home().store_name(&closed), wal.home().store_name(&wal.segment_path()), "each segment has its own store name");
    }

    #[test]
    fn a_torn_tail_keeps_every_record_before_it() {
        let dir = tempfile::tempdir().unwrap();
        let (mut wal, _) = Wal::open(dir.path()).unwrap();
        wal.append(&samples(3), None).unwrap();
        let first_len = wal.segment_bytes;
        wal.append(&samples(4), Some(&Positions::from([("nodes".to_owned(), "9".to_owned())]))).unwrap();
        let path = wal.segment_path();
        drop(wal);
        let full = fs::read(&path).unwrap();
        // Cut inside the second append: the first append always survives; a cut in its last
        // record (the positions) keeps its rows but not the positions.
        for (cut, rows) in [(first_len as usize + 3, 3), (first_len as usize + 20, 3), (full.len() - 1, 7)] {
            fs::write(&path, &full[..cut]).unwrap();
            let seg = read_segment(&path).unwrap();
            assert!(seg.torn.is_some(), "cut at {cut} not noticed");
            assert_eq!(seg.batches.iter().map(|(_, b)| b.num_rows()).sum::<usize>(), rows, "cut at {cut}");
            assert!(seg.positions.is_empty());
        }
        // A flipped byte in the first record: nothing after it is trusted.
        let mut bad = full.clone();
        bad[12] ^= 0xff;
        fs::write(&path, &bad).unwrap();
        let seg = read_segment(&path).unwrap();
        assert!(seg.torn.as_deref().is_some_and(|t| t.contains("checksum")), "{:?}", seg.torn);
        assert!(seg.batches.is_empty());
    }

    #[test]
    fn reopening_continues_after_the_segments_left_behind() {
        let dir = tempfile::tempdir().unwrap();
        let (mut wal, _) = Wal::open(dir.path()).unwrap();
        wal.append(&samples(2), None).unwrap();
        let name = wal.home().store_name(&wal.segment_path());
        drop(wal);
        let (wal2, old) = Wal::open(dir.path()).unwrap();
        assert_eq!(old.len(), 1);
        assert_eq!(wal2.home().store_name(&old[0]), name, "the ID survives a restart");
        assert_ne!(wal2.segment_path(), old[0]);
        assert!(segment_seq(&wal2.segment_path()) > segment_seq(&old[0]));
        // Even once every segment is gone, a new run never reuses a number (a reused one would
        // name a store file that exists, and its rows would be skipped).
        wal2.home().save_positions(&Positions::from([("pods".to_owned(), "7".to_owned())])).unwrap();
        assert_eq!(wal2.home().load_positions().get("pods").map(String::as_str), Some("7"));
        let first = segment_seq(&wal2.segment_path()).unwrap();
        wal2.close().unwrap();
        fs::remove_file(&old[0]).unwrap();
        // Runs are at least a millisecond apart in life (process start alone takes longer).
        std::thread::sleep(std::time::Duration::from_millis(3));
        let (wal3, left) = Wal::open(dir.path()).unwrap();
        assert!(left.is_empty());
        assert!(segment_seq(&wal3.segment_path()).unwrap() > first);
    }
}
