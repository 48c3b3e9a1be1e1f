//! Offline ingest: capture files and directories -> sources -> the store.
//!
//! Files are recognised by extension (and, for `.json`, by a sniff of their start): Prometheus
//! text (`.prom`, `.txt`), Prometheus API responses (`.json` holding `resultType`), Kubernetes
//! objects (`.json`, `.jsonl`, `.ndjson`, `.yaml`, `.yml`). Anything else is counted as skipped.
//! Files are parsed on worker threads; the store writer runs on the calling thread.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::diag::{Diagnostics, Position};
use crate::error::{Error, Result};
use crate::object::ObjectVersion;
use crate::sources::kubernetes_file;
use crate::sources::{DcgmText, KubernetesFile, Loaded, Origin, PrometheusApi, Source, prometheus_api};
use crate::store::{Store, StoreOptions, StoreStats};
use crate::tables::TableBatch;
use crate::tables::k8s::K8sTables;
use crate::tables::samples::SampleTables;

/// The formats ingest reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Format {
    PrometheusText,
    PrometheusApi,
    Kubernetes,
}

impl Format {
    pub fn name(self) -> &'static str {
        match self {
            Format::PrometheusText => "prometheus text",
            Format::PrometheusApi => "prometheus api",
            Format::Kubernetes => "kubernetes objects",
        }
    }
}

/// Options of one ingest run.
#[derive(Debug, Clone)]
pub struct IngestOptions {
    pub store: StoreOptions,
    /// Parser threads (the store writer has its own).
    pub threads: usize,
    /// Files not to read wherever they lie, by file name, each with the reason the summary
    /// counts it under (a tool's own output written beside a capture, say).
    pub skip: Vec<SkipFile>,
    /// The longest exposition text line read; a longer one is an error at its line and is
    /// passed over without being held whole.
    pub max_line_bytes: usize,
}

/// A file name ingest passes over (see [`IngestOptions::skip`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkipFile {
    pub name: String,
    pub reason: String,
}

impl Default for IngestOptions {
    fn default() -> Self {
        let threads = std::thread::available_parallelism().map_or(2, |n| n.get()).clamp(1, 8);
        IngestOptions { store: StoreOptions::default(), threads, skip: Vec::new(), max_line_bytes: crate::sources::dcgm_text::MAX_LINE_BYTES }
    }
}

/// Told about progress; the binary draws a bar or prints lines.
pub trait Progress: Sync {
    fn start(&self, _files: u64, _bytes: u64) {}
    fn advance(&self, _bytes: u64) {}
    fn finish(&self) {}
}

/// What an ingest run read, wrote and rejected.
#[derive(Debug, Default, Clone)]
pub struct IngestSummary {
    pub files: BTreeMap<Format, u64>,
    /// Files not read, by reason (`extension .csv`, a [`SkipFile`]'s reason...).
    pub skipped_files: BTreeMap<String, u64>,
    pub bytes_read: u64,
    /// Metric samples accepted (one metric value of one series at one time).
    pub samples: u64,
    /// Samples whose value was a DCGM blank sentinel (stored as null).
    pub blank_samples: u64,
    /// Lines, points or objects rejected.
    pub rejected: u64,
    /// Object versions by kind.
    pub objects: BTreeMap<String, u64>,
    pub diagnostics: Diagnostics,
    pub store: StoreStats,
    pub elapsed: Duration,
    /// The most memory the process held, when the platform tells (Linux).
    pub peak_rss_bytes: Option<u64>,
}

impl IngestSummary {
    /// Adds what another read found (files, bytes, samples, objects, diagnostics) to this one;
    /// store figures, time and memory are left as they are.
    pub fn merge(&mut self, other: IngestSummary) {
        fn add<K: Ord>(into: &mut BTreeMap<K, u64>, from: BTreeMap<K, u64>) {
            for (k, n) in from {
                *into.entry(k).or_default() += n;
            }
        }
        add(&mut self.files, other.files);
        add(&mut self.skipped_files, other.skipped_files);
        add(&mut self.objects, other.objects);
        self.bytes_read += other.bytes_read;
        self.samples += other.samples;
        self.blank_samples += other.blank_samples;
        self.rejected += other.rejected;
        self.diagnostics.merge(other.diagnostics);
    }
}

/// Lists the files under `paths` (directories recursively; hidden entries skipped), in the
/// order they are read: by file name, then by path. Capture file names carry their time (the
/// simulator's `dcgm/<node>/<day>.prom`, per-scrape `<unix-ms>.prom`, `<day>/...`), so this reads
/// a day of every node before the next day, and the writer needs only the recent days' keys in
/// memory to recognise rows it already has (see `Store`).
pub fn list_inputs(paths: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for p in paths {
        let meta = std::fs::metadata(p).map_err(|e| Error::Input { path: p.clone(), reason: format!("cannot read: {e}") })?;
        if meta.is_dir() {
            walk(p, &mut out)?;
        } else {
            out.push(p.clone());
        }
    }
    out.sort_by(|a, b| a.file_name().cmp(&b.file_name()).then_with(|| a.cmp(b)));
    out.dedup();
    Ok(out)
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let entries = std::fs::read_dir(dir).map_err(|e| Error::Input { path: dir.to_path_buf(), reason: format!("cannot list: {e}") })?;
    for e in entries {
        let e = e.map_err(|e| Error::Input { path: dir.to_path_buf(), reason: format!("cannot list: {e}") })?;
        if e.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        let path = e.path();
        let ft = e.file_type().map_err(|e| Error::Input { path: path.clone(), reason: format!("cannot read: {e}") })?;
        if ft.is_dir() {
            walk(&path, out)?;
        } else {
            out.push(path);
        }
    }
    Ok(())
}

/// How a path is read, or why it is skipped.
pub fn classify(path: &Path, head: &[u8], skip: &[SkipFile]) -> std::result::Result<Format, String> {
    if let Some(s) = path.file_name().and_then(|n| skip.iter().find(|s| n == s.name.as_str())) {
        return Err(s.reason.clone());
    }
    let ext = path.extension().map(|e| e.to_string_lossy().to_ascii_lowercase()).unwrap_or_default();
    match ext.as_str() {
        "prom" | "txt" => Ok(Format::PrometheusText),
        "json" if prometheus_api::looks_like_api_response(head) => Ok(Format::PrometheusApi),
        "json" | "jsonl" | "ndjson" | "yaml" | "yml" => Ok(Format::Kubernetes),
        "" => Err("no extension".into()),
        other => Err(format!("extension .{other}")),
    }
}

/// What a worker hands the writer.
enum Message {
    Batches(Vec<TableBatch>),
    /// Bytes of a file still being read (a long watch stream), for the progress bar.
    Progress(u64),
    File {
        format: std::result::Result<Format, String>,
        bytes: u64,
        /// Of `bytes`, those already told as [`Message::Progress`].
        told: u64,
        diags: Diagnostics,
        objects: BTreeMap<String, u64>,
        samples: u64,
        blank: u64,
        rejected: u64,
    },
    Failed(Error),
}

/// Rows a worker gathers before handing a batch to the writer.
const WORKER_BATCH_ROWS: usize = 256 * 1024;

/// Input bytes a worker reads before handing its rows over, so that the rows parsed but not
/// yet written stay bounded when objects are large or one file is longer than memory.
const WORKER_BATCH_BYTES: u64 = 32 << 20;

/// Batches between the workers and the writer: room to keep parsing while the writer sorts
/// and compresses a flush, each batch at most about [`WORKER_BATCH_BYTES`] of input.
const IN_FLIGHT: usize = 4;

/// Bytes of exposition text parsed at a time.
const TEXT_CHUNK: usize = 4 << 20;

/// Bytes read of a file before its format is decided (the sniff of `.json` needs the start).
const HEAD_BYTES: u64 = 64 << 10;

/// Reads every file under `paths` into the store at `store`.
pub fn ingest(paths: &[PathBuf], store: &gpuledger_store::StoreLocation, options: &IngestOptions, progress: &dyn Progress) -> Result<IngestSummary> {
    let started = Instant::now();
    // Inputs first: a path that does not exist must not leave an empty store behind.
    let files = list_inputs(paths)?;
    let mut writer = Store::open(store, options.store.clone())?;
    let mut summary = read_files(&files, &mut writer, options, progress)?;
    summary.store = writer.finish()?;
    progress.finish();
    summary.elapsed = started.elapsed();
    summary.peak_rss_bytes = peak_rss_bytes();
    Ok(summary)
}

/// Reads every file under `paths` into an open store writer, which the caller finishes (it
/// may hold rows of other inputs: `simulate --store` gives it the DCGM text first). The
/// summary has no store figures, time or memory, and `progress` is not told the end.
pub fn ingest_into(paths: &[PathBuf], store: &mut Store, options: &IngestOptions, progress: &dyn Progress) -> Result<IngestSummary> {
    read_files(&list_inputs(paths)?, store, options, progress)
}

/// [`ingest_into`] of files already listed (see [`list_inputs`]).
fn read_files(files: &[PathBuf], store: &mut Store, options: &IngestOptions, progress: &dyn Progress) -> Result<IngestSummary> {
    let total_bytes: u64 = files.iter().filter_map(|f| std::fs::metadata(f).ok()).map(|m| m.len()).sum();
    progress.start(files.len() as u64, total_bytes);
    let mut summary = IngestSummary::default();
    let next = AtomicUsize::new(0);
    let threads = options.threads.max(1).min(files.len().max(1));
    let (tx, rx) = mpsc::sync_channel::<Message>(IN_FLIGHT);
    let mut first_error: Option<Error> = None;
    std::thread::scope(|scope| {
        for _ in 0..threads {
            let tx = tx.clone();
            let (files, next) = (&files, &next);
            let skip = &options.skip;
            let max_line = options.max_line_bytes;
            scope.spawn(move || Worker::new(&tx, max_line).run(files, skip, next));
        }
        drop(tx);
        for msg in rx {
            match msg {
                Message::Batches(batches) => {
                    if first_error.is_none() {
                        for b in batches {
                            if let Err(e) = store.append(b) {
                                first_error = Some(e);
                                // Tell the workers to stop taking files.
                                next.store(usize::MAX / 2, Ordering::SeqCst);
                                break;
                            }
                        }
                    }
                }
                Message::Progress(bytes) => progress.advance(bytes),
                Message::File { format, bytes, told, diags, objects, samples, blank, rejected } => {
                    progress.advance(bytes.saturating_sub(told));
                    summary.bytes_read += bytes;
                    match format {
                        Ok(f) => *summary.files.entry(f).or_default() += 1,
                        Err(reason) => *summary.skipped_files.entry(reason).or_default() += 1,
                    }
                    summary.diagnostics.merge(diags);
                    for (k, n) in objects {
                        *summary.objects.entry(k).or_default() += n;
                    }
                    summary.samples += samples;
                    summary.blank_samples += blank;
                    summary.rejected += rejected;
                }
                Message::Failed(e) => {
                    if first_error.is_none() {
                        first_error = Some(e);
                        next.store(usize::MAX / 2, Ordering::SeqCst);
                    }
                }
            }
        }
    });
    match first_error {
        Some(e) => Err(e),
        None => Ok(summary),
    }
}

/// The most memory this process has held (Linux `VmHWM`); `None` elsewhere.
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.trim_start_matches("VmHWM:").trim().trim_end_matches("kB").trim().parse().ok()?;
    Some(kib * 1024)
}

/// A worker's sources, kept for all its files (the text source remembers label sets).
struct Sources {
    dcgm: DcgmText,
    api: PrometheusApi,
    k8s: KubernetesFile,
}

/// One parser thread: takes the next file, reads it into its tables, hands the rows to the
/// writer when enough have gathered.
struct Worker<'a> {
    tx: &'a mpsc::SyncSender<Message>,
    sources: Sources,
    samples: SampleTables,
    k8s: K8sTables,
    /// One read buffer per worker: a fresh allocation per file cost page faults on every file.
    buf: Vec<u8>,
    /// Input bytes read into the tables since they were last handed over.
    pending: u64,
}

impl<'a> Worker<'a> {
    fn new(tx: &'a mpsc::SyncSender<Message>, max_line_bytes: usize) -> Self {
        let sources = Sources { dcgm: DcgmText::file().with_max_line_bytes(max_line_bytes), api: PrometheusApi::query(), k8s: KubernetesFile };
        Worker { tx, sources, samples: SampleTables::new(), k8s: K8sTables::new(), buf: Vec::new(), pending: 0 }
    }

    fn run(mut self, files: &[PathBuf], skip: &[SkipFile], next: &AtomicUsize) {
        loop {
            let i = next.fetch_add(1, Ordering::SeqCst);
            let Some(path) = files.get(i) else { break };
            let msg = match self.read_one(path, skip) {
                Ok(m) => m,
                Err(e) => Message::Failed(e),
            };
            if self.tx.send(msg).is_err() {
                return;
            }
            if let Err(e) = if self.full() { self.hand_over() } else { Ok(()) } {
                let _ = self.tx.send(Message::Failed(e));
                return;
            }
        }
        if let Err(e) = self.hand_over() {
            let _ = self.tx.send(Message::Failed(e));
        }
    }

    /// Whether the rows gathered are enough to hand over.
    fn full(&self) -> bool {
        self.samples.rows() >= WORKER_BATCH_ROWS || self.k8s.len() >= WORKER_BATCH_ROWS / 8 || self.pending >= WORKER_BATCH_BYTES
    }

    fn hand_over(&mut self) -> Result<()> {
        let mut batches = self.samples.take_batches()?;
        batches.extend(self.k8s.take_batches()?);
        self.pending = 0;
        if !batches.is_empty() {
            let _ = self.tx.send(Message::Batches(batches));
        }
        Ok(())
    }

    /// Reads one file into the worker's tables: a JSON file of Kubernetes objects a window at a
    /// time (a watch stream can be larger than memory), exposition text a chunk at a time,
    /// anything else (YAML, Prometheus API answers) whole.
    fn read_one(&mut self, path: &Path, skip: &[SkipFile]) -> Result<Message> {
        let mut diags = Diagnostics::new();
        self.buf.clear();
        // Only regular files (or links to them) are read: opening a FIFO waits for a writer
        // forever, and a device such as /dev/zero never ends.
        match std::fs::metadata(path) {
            Ok(m) if !m.is_file() => return Ok(not_a_file(path, &m.file_type(), diags)),
            Ok(_) => {}
            Err(e) => return Ok(unreadable(path, &e, diags)),
        }
        let opened = std::fs::File::open(path).and_then(|mut f| {
            std::io::Read::read_to_end(&mut std::io::Read::take(&mut f, HEAD_BYTES), &mut self.buf)?;
            Ok(f)
        });
        let mut file = match opened {
            Ok(f) => f,
            // One unreadable file (permissions, vanished) must not stop the others.
            Err(e) => return Ok(unreadable(path, &e, diags)),
        };
        let format = classify(path, &self.buf, skip);
        let origin = Origin::file(path, mtime_ms(path));
        if format == Ok(Format::Kubernetes) && kubernetes_file::is_json(path, &self.buf) {
            return Ok(self.stream_objects(path, file, &origin, diags));
        }
        if format == Ok(Format::PrometheusText) {
            return Ok(self.read_text(path, file, &origin, diags));
        }
        if let Err(reason) = format {
            // Not read, only counted (its size keeps the progress bar's total).
            let bytes = file.metadata().map_or(self.buf.len() as u64, |m| m.len());
            return Ok(Message::File { format: Err(reason), bytes, told: 0, diags, objects: BTreeMap::new(), samples: 0, blank: 0, rejected: 0 });
        }
        if let Err(e) = std::io::Read::read_to_end(&mut file, &mut self.buf) {
            return Ok(unreadable(path, &e, diags));
        }
        let bytes: &[u8] = &self.buf;
        let len = bytes.len() as u64;
        self.pending += len;
        let loaded = match format {
            Ok(Format::PrometheusApi) => self.sources.api.read(bytes, &origin, &mut self.samples, &mut diags),
            Ok(Format::Kubernetes) => self.sources.k8s.read(bytes, &origin, &mut self.k8s, &mut diags),
            // Read above.
            Ok(Format::PrometheusText) | Err(_) => Loaded::default(),
        };
        // Every rejected line, point or object is one error of this file's.
        let rejected = diags.errors.len() as u64;
        Ok(Message::File { format, bytes: len, told: 0, diags, objects: loaded.objects, samples: loaded.samples, blank: loaded.blank, rejected })
    }

    /// Exposition text, its head already in `buf`, read a chunk at a time (see
    /// [`DcgmText::read_file`]).
    fn read_text(&mut self, path: &Path, file: std::fs::File, origin: &Origin<'_>, mut diags: Diagnostics) -> Message {
        let head = std::mem::take(&mut self.buf);
        let read = std::cell::Cell::new(0u64);
        let mut input = Counted { inner: std::io::Read::chain(&head[..], file), at: 0, read: &read };
        let mut told = 0u64;
        let loaded = {
            let tx = self.tx;
            let mut tell = |so_far: u64| {
                if so_far - told >= WORKER_BATCH_BYTES {
                    let _ = tx.send(Message::Progress(so_far - told));
                    told = so_far;
                }
            };
            self.sources.dcgm.read_file(&mut input, origin, TEXT_CHUNK, &mut self.samples, &mut diags, &mut tell)
        };
        self.buf = head;
        let len = read.get();
        self.pending += len;
        let loaded = loaded.unwrap_or_else(|e| {
            diags.error(path, Position::File, "unreadable_file", format!("cannot read past byte {len}: {e}"));
            Loaded::default()
        });
        let rejected = diags.errors.len() as u64;
        Message::File { format: Ok(Format::PrometheusText), bytes: len, told, diags, objects: loaded.objects, samples: loaded.samples, blank: loaded.blank, rejected }
    }

    /// A JSON file of Kubernetes objects, its head already in `buf`: the rows are handed over
    /// as soon as the worker is [full](Worker::full), so the file is never whole in memory.
    fn stream_objects(&mut self, path: &Path, file: std::fs::File, origin: &Origin<'_>, mut diags: Diagnostics) -> Message {
        let before = self.k8s.kinds.clone();
        let read = std::cell::Cell::new(0u64);
        // From the start again (the head is in `buf`): a large List is read twice, by seeking.
        let mut file = file;
        if let Err(e) = std::io::Seek::rewind(&mut file) {
            return unreadable(path, &e, diags);
        }
        let mut input = Counted { inner: file, at: 0, read: &read };
        // Bytes of this file counted into `pending`, and those told to the progress bar.
        let (mut counted, mut told) = (0u64, 0u64);
        let mut failed: Option<Error> = None;
        let streamed = {
            let mut emit = |v: ObjectVersion, diags: &mut Diagnostics| {
                self.k8s.push(path, &v, diags);
                self.pending += read.get() - counted;
                counted = read.get();
                if self.full() {
                    let _ = self.tx.send(Message::Progress(counted - told));
                    told = counted;
                    if let Err(e) = self.hand_over() {
                        failed.get_or_insert(e);
                    }
                }
            };
            kubernetes_file::stream_objects(path, &mut input, origin.modified_ms.unwrap_or(0), &mut diags, &mut emit)
        };
        let len = read.get();
        self.pending += len - counted;
        if let Err(e) = streamed {
            diags.error(path, Position::File, "unreadable_file", format!("cannot read past byte {len}: {e}"));
        }
        if let Some(e) = failed {
            return Message::Failed(e);
        }
        let objects = self.k8s.kinds_since(&before);
        let rejected = diags.errors.len() as u64;
        Message::File { format: Ok(Format::Kubernetes), bytes: len, told, diags, objects, samples: 0, blank: 0, rejected }
    }
}

/// The message for a file that is not a regular file (a FIFO, a device, a socket): not read.
fn not_a_file(path: &Path, kind: &std::fs::FileType, mut diags: Diagnostics) -> Message {
    use std::os::unix::fs::FileTypeExt;
    let what = if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_char_device() || kind.is_block_device() {
        "a device"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    };
    diags.error(path, Position::File, "not_a_file", format!("{what}, not a regular file: not read"));
    not_read("not a regular file", diags)
}

/// The message for a file that could not be read.
fn unreadable(path: &Path, e: &std::io::Error, mut diags: Diagnostics) -> Message {
    diags.error(path, Position::File, "unreadable_file", format!("cannot read: {e}"));
    not_read("unreadable", diags)
}

/// A file read not at all, counted under `why`, its one error in `diags`.
fn not_read(why: &str, diags: Diagnostics) -> Message {
    Message::File { format: Err(why.into()), bytes: 0, told: 0, diags, objects: BTreeMap::new(), samples: 0, blank: 0, rejected: 1 }
}

/// Counts how far into its input reading got (bytes read twice, after a seek back, count once).
struct Counted<'c, R> {
    inner: R,
    /// Where the next read starts.
    at: u64,
    read: &'c std::cell::Cell<u64>,
}

impl<R: std::io::Read> std::io::Read for Counted<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.at += n as u64;
        self.read.set(self.read.get().max(self.at));
        Ok(n)
    }
}

impl<R: std::io::Seek> std::io::Seek for Counted<'_, R> {
    fn seek(&mut self, to: std::io::SeekFrom) -> std::io::Result<u64> {
        self.at = self.inner.seek(to)?;
        Ok(self.at)
    }
}

fn mtime_ms(path: &Path) -> Option<i64> {
    let m = std::fs::metadata(path).ok()?.modified().ok()?;
    let d = m.duration_since(std::time::UNIX_EPOCH).ok()?;
    Some(d.as_millis() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Remembers every advance of the progress bar.
    #[derive(Default)]
    struct Advances(std::sync::Mutex<Vec<u64>>);

    impl Progress for Advances {
        fn advance(&self, bytes: u64) {
            self.0.lock().unwrap().push(bytes);
        }
    }

    #[test]
    fn a_long_watch_stream_is_handed_to_the_writer_while_it_is_read() {
        // More versions than a worker holds before handing rows over: the writer gets them
        // while the file is still being read, and nothing is lost or doubled on the way.
        let dir = tempfile::tempdir().unwrap();
        let capture = dir.path().join("capture");
        std::fs::create_dir(&capture).unwrap();
        let versions = WORKER_BATCH_ROWS / 8 * 3 + 1234;
        let mut text = String::new();
        for i in 0..versions {
            text.push_str(&format!(
                "{{\"type\":\"MODIFIED\",\"object\":{{\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\"metadata\":{{\"name\":\"ns-{}\",\"uid\":\"u-{}\",\"resourceVersion\":\"{i}\",\"creationTimestamp\":\"2026-11-02T{:02}:{:02}:00Z\"}}}}}}\n",
                i % 1000,
                i % 1000,
                i / 60 % 24,
                i % 60
            ));
        }
        let watch = capture.join("namespaces.jsonl");
        std::fs::write(&watch, &text).unwrap();
        let store = gpuledger_store::StoreLocation::Local(dir.path().join("store"));
        let options = IngestOptions { threads: 1, ..IngestOptions::default() };
        let progress = Advances::default();
        let first = ingest(std::slice::from_ref(&capture), &store, &options, &progress).unwrap();
        let advances = progress.0.into_inner().unwrap();
        assert!(advances.len() >= 4, "told while reading, not only at the end: {advances:?}");
        assert_eq!(advances.iter().sum::<u64>(), text.len() as u64);
        assert_eq!(first.bytes_read, text.len() as u64);
        assert_eq!(first.objects.get("Namespace"), Some(&(versions as u64)), "{:?}", first.objects);
        assert_eq!(first.store.rows_written.get("k8s_objects"), Some(&(versions as u64)));
        assert!(first.diagnostics.is_clean(), "{:?}", first.diagnostics.errors);
        if cfg!(target_os = "linux") {
            assert!(first.peak_rss_bytes.is_some_and(|b| b > 1 << 20), "{:?}", first.peak_rss_bytes);
        }
        // Read again: every version is known.
        let again = ingest(&[capture], &store, &options, &Advances::default()).unwrap();
        assert_eq!(again.store.rows_written.get("k8s_objects"), None);
        assert_eq!(again.store.duplicates.get("k8s_objects"), Some(&(versions as u64)));
    }

    /// A FIFO (opening it would wait for a writer forever) and a link to /dev/zero (it never
    /// ends) in a capture are reported and skipped; the regular file beside them is read.
    #[test]
    fn only_regular_files_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let capture = dir.path().join("capture");
        std::fs::create_dir(&capture).unwrap();
        std::fs::write(capture.join("ns.jsonl"), "{\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\"metadata\":{\"name\":\"ml\"}}\n").unwrap();
        let fifo = capture.join("fifo.prom");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        std::os::unix::fs::symlink("/dev/zero", capture.join("zero.prom")).unwrap();
        let store = gpuledger_store::StoreLocation::Local(dir.path().join("store"));
        // A worker stuck on the FIFO would never return: wait in a thread, and call that a hang.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(ingest(&[capture], &store, &IngestOptions::default(), &Advances::default()));
        });
        let summary = rx.recv_timeout(std::time::Duration::from_secs(300)).expect("ingest hung on a FIFO or a device").unwrap();
        let mut not_files: Vec<String> = summary
            .diagnostics
            .errors
            .iter()
            .filter(|e| e.error_type == "not_a_file")
            .map(|e| format!("{} {}", e.path.file_name().unwrap().to_string_lossy(), e.reason))
            .collect();
        not_files.sort();
        assert_eq!(not_files, ["fifo.prom a FIFO, not a regular file: not read", "zero.prom a device, not a regular file: not read"]);
        assert_eq!(summary.objects.get("Namespace"), Some(&1));
    }

    #[test]
    fn a_missing_input_leaves_no_store_behind() {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("store");
        let missing = dir.path().join("no-such-capture");
        let err = ingest(&[missing], &gpuledger_store::StoreLocation::Local(store.clone()), &IngestOptions::default(), &Advances::default()).unwrap_err();
        assert!(err.to_string().contains("no-such-capture"), "{err}");
        assert!(!store.exists(), "the store was created before the inputs were checked");
    }

    #[test]
    fn inputs_are_read_a_day_of_every_node_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        for rel in ["dcgm/node-b/2026-11-02.prom", "dcgm/node-a/2026-11-02.prom", "dcgm/node-b/2026-11-01.prom", "dcgm/node-a/2026-11-01.prom", "k8s/pods.jsonl"] {
            let path = dir.path().join(rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, "").unwrap();
        }
        let listed = list_inputs(&[dir.path().to_path_buf()]).unwrap();
        let rel: Vec<String> = listed.iter().map(|p| p.strip_prefix(dir.path()).unwrap().display().to_string()).collect();
        assert_eq!(rel, ["dcgm/node-a/2026-11-01.prom", "dcgm/node-b/2026-11-01.prom", "dcgm/node-a/2026-11-02.prom", "dcgm/node-b/2026-11-02.prom", "k8s/pods.jsonl"]);
    }

    #[test]
    fn classify_by_extension_and_sniff() {
        assert_eq!(classify(Path::new("a/b.prom"), b"", &[]), Ok(Format::PrometheusText));
        assert_eq!(classify(Path::new("a/b.txt"), b"", &[]), Ok(Format::PrometheusText));
        assert_eq!(classify(Path::new("q.json"), br#"{"status":"success","data":{"resultType":"vector"}}"#, &[]), Ok(Format::PrometheusApi));
        assert_eq!(classify(Path::new("pods.json"), br#"{"apiVersion":"v1","kind":"List"}"#, &[]), Ok(Format::Kubernetes));
        assert_eq!(classify(Path::new("w.JSONL"), b"", &[]), Ok(Format::Kubernetes));
        assert_eq!(classify(Path::new("q.yaml"), b"", &[]), Ok(Format::Kubernetes));
        assert_eq!(classify(Path::new("x.csv"), b"", &[]), Err("extension .csv".into()));
        let skip = [SkipFile { name: "expected.json".into(), reason: "simulator truth (expected.json)".into() }];
        assert_eq!(classify(Path::new("sim/expected.json"), b"{}", &skip), Err("simulator truth (expected.json)".into()));
        assert_eq!(classify(Path::new("sim/expected.json"), b"{}", &[]), Ok(Format::Kubernetes), "only a caller's list skips it");
        assert_eq!(classify(Path::new("sim/not-expected.json"), b"{}", &skip), Ok(Format::Kubernetes));
    }
}
