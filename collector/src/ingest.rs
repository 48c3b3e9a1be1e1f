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
        IngestOptions { store: StoreOptions::default(), threads, skip: Vec::new() }
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
}

/// Lists the files under `paths` (directories recursively; hidden entries skipped), sorted.
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
    out.sort();
    out.dedup();
    Ok(out)
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let entries = std::fs::read_dir(dir).map_err(|e| Error::Input { path: dir.to_path_buf(), reason: format!("cannot list: {e}") })?;
    for e in entries {
        let e = e.map_err(|e| Error::io(dir, e))?;
        if e.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        let path = e.path();
        let ft = e.file_type().map_err(|e| Error::io(&path, e))?;
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
    File { format: std::result::Result<Format, String>, bytes: u64, diags: Diagnostics, objects: BTreeMap<String, u64>, samples: u64, blank: u64, rejected: u64 },
    Failed(Error),
}

/// Rows a worker gathers before handing a batch to the writer.
const WORKER_BATCH_ROWS: usize = 256 * 1024;

/// Reads every file under `paths` into the store at `store`.
pub fn ingest(paths: &[PathBuf], store: &gpuledger_store::StoreLocation, options: &IngestOptions, progress: &dyn Progress) -> Result<IngestSummary> {
    let started = Instant::now();
    let files = list_inputs(paths)?;
    let total_bytes: u64 = files.iter().filter_map(|f| std::fs::metadata(f).ok()).map(|m| m.len()).sum();
    progress.start(files.len() as u64, total_bytes);
    let mut store = Store::open(store, options.store.clone())?;
    let mut summary = IngestSummary::default();
    let next = AtomicUsize::new(0);
    let threads = options.threads.max(1).min(files.len().max(1));
    // Room for the workers to keep parsing while the writer sorts and compresses a flush.
    let (tx, rx) = mpsc::sync_channel::<Message>(16);
    let mut first_error: Option<Error> = None;
    std::thread::scope(|scope| {
        for _ in 0..threads {
            let tx = tx.clone();
            let (files, next) = (&files, &next);
            let skip = &options.skip;
            scope.spawn(move || worker(files, skip, next, &tx));
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
                Message::File { format, bytes, diags, objects, samples, blank, rejected } => {
                    progress.advance(bytes);
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
    if let Some(e) = first_error {
        return Err(e);
    }
    summary.store = store.finish()?;
    progress.finish();
    summary.elapsed = started.elapsed();
    Ok(summary)
}

/// A worker's sources, kept for all its files (the text source remembers label sets).
struct Sources {
    dcgm: DcgmText,
    api: PrometheusApi,
    k8s: KubernetesFile,
}

fn worker(files: &[PathBuf], skip: &[SkipFile], next: &AtomicUsize, tx: &mpsc::SyncSender<Message>) {
    let mut samples = SampleTables::new();
    let mut k8s = K8sTables::new();
    let mut sources = Sources { dcgm: DcgmText::file(), api: PrometheusApi::query(), k8s: KubernetesFile };
    // One read buffer per worker: a fresh allocation per file cost page faults on every file.
    let mut buf = Vec::new();
    loop {
        let i = next.fetch_add(1, Ordering::SeqCst);
        let Some(path) = files.get(i) else { break };
        let msg = match read_one(path, skip, &mut buf, &mut sources, &mut samples, &mut k8s) {
            Ok(m) => m,
            Err(e) => Message::Failed(e),
        };
        if tx.send(msg).is_err() {
            return;
        }
        let full = samples.rows() >= WORKER_BATCH_ROWS || k8s.len() >= WORKER_BATCH_ROWS / 8;
        if let Err(e) = if full { hand_over(&mut samples, &mut k8s, tx) } else { Ok(()) } {
            let _ = tx.send(Message::Failed(e));
            return;
        }
    }
    if let Err(e) = hand_over(&mut samples, &mut k8s, tx) {
        let _ = tx.send(Message::Failed(e));
    }
}

fn hand_over(samples: &mut SampleTables, k8s: &mut K8sTables, tx: &mpsc::SyncSender<Message>) -> Result<()> {
    let mut batches = samples.take_batches()?;
    if !k8s.is_empty() {
        batches.extend(std::mem::take(k8s).finish()?);
    }
    if !batches.is_empty() {
        let _ = tx.send(Message::Batches(batches));
    }
    Ok(())
}

/// Reads one file into the worker's tables.
fn read_one(path: &Path, skip: &[SkipFile], buf: &mut Vec<u8>, sources: &mut Sources, samples: &mut SampleTables, k8s: &mut K8sTables) -> Result<Message> {
    let mut diags = Diagnostics::new();
    buf.clear();
    let read = std::fs::File::open(path).and_then(|mut f| std::io::Read::read_to_end(&mut f, buf));
    let bytes: &[u8] = match read {
        Ok(_) => buf,
        Err(e) => {
            // One unreadable file (permissions, vanished) must not stop the others.
            diags.error(path, Position::File, "unreadable_file", format!("cannot read: {e}"));
            let objects = BTreeMap::new();
            return Ok(Message::File { format: Err("unreadable".into()), bytes: 0, diags, objects, samples: 0, blank: 0, rejected: 1 });
        }
    };
    let len = bytes.len() as u64;
    let format = classify(path, bytes, skip);
    let origin = Origin::file(path, mtime_ms(path));
    let loaded = match format {
        Ok(Format::PrometheusText) => sources.dcgm.read(bytes, &origin, samples, &mut diags),
        Ok(Format::PrometheusApi) => sources.api.read(bytes, &origin, samples, &mut diags),
        Ok(Format::Kubernetes) => sources.k8s.read(bytes, &origin, k8s, &mut diags),
        Err(_) => Loaded::default(),
    };
    // Every rejected line, point or object is one error of this file's.
    let rejected = diags.errors.len() as u64;
    Ok(Message::File { format, bytes: len, diags, objects: loaded.objects, samples: loaded.samples, blank: loaded.blank, rejected })
}

fn mtime_ms(path: &Path) -> Option<i64> {
    let m = std::fs::metadata(path).ok()?.modified().ok()?;
    let d = m.duration_since(std::time::UNIX_EPOCH).ok()?;
    Some(d.as_millis() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

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
