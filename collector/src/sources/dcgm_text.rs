//! `dcgm_file` and `dcgm_scrape`: Prometheus text exposition as the DCGM exporter (and
//! Prometheus' `/federate`) writes it, read by [`gpuledger_dcgm_text`] into records, which are
//! then loaded into [`SampleTables`].
//!
//! What this module adds to the text reader is what the bytes alone cannot say: the time of
//! samples that carry none (the file name's, the scrape's, else the file's modification time),
//! and the mapping of the reader's metric names and label sets onto the tables' interned ones,
//! kept per reader so that each distinct label set is resolved once.

use std::path::Path;

use gpuledger_dcgm_text::{LabelSetId, Reader};
use rustc_hash::FxHashMap;

use crate::diag::{Diagnostics, Position};
use crate::sources::{Loaded, Origin, Source};
use crate::tables::samples::{MetricRef, SampleTables, SeriesRef, TablesId};

/// Where the time of samples without their own timestamp comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScrapeTime {
    /// Taken from the file name (`<unix-millis>.prom` or an RFC 3339 stem).
    FileName(i64),
    /// When the live collector sent the scrape request (Prometheus' convention).
    Scraped(i64),
    /// The file's modification time: a guess, warned about when used.
    Modified(i64),
    /// No time known at all: such samples are rejected.
    Unknown,
}

/// Which input the text is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A capture file: times from the file name, else its modification time. A file of which
    /// not one line parses is reported once, as not being exposition text at all.
    File,
    /// An exporter's answer: samples without a time take the scrape's.
    Scrape,
}

/// The exposition-text source. Keep one per worker or task: it remembers the label sets it
/// has read, so the next text of the same exporter costs a lookup per line, not a parse.
pub struct DcgmText {
    kind: Kind,
    reader: Reader,
    /// Metric names read, interned: records then carry an index.
    name_ids: FxHashMap<Box<str>, u32>,
    names: Vec<Box<str>>,
    /// The tables the refs below belong to: refs of other tables would name other rows.
    bound: Option<TablesId>,
    metric_refs: Vec<Option<MetricRef>>,
    series_refs: Vec<Option<SeriesRef>>,
    /// The last records' buffer, kept for the next text.
    spare: Vec<Sample>,
    /// The longest line a file may have (see [`DcgmText::with_max_line_bytes`]).
    max_line_bytes: usize,
}

/// The longest exposition line read by default: a sample line with every DCGM and Kubernetes
/// label is a few kilobytes; a megabyte without a newline is not exposition text.
pub const MAX_LINE_BYTES: usize = 1 << 20;

/// The samples of one text, with the counts of what was read.
#[derive(Debug, Default)]
pub struct TextRecords {
    samples: Vec<Sample>,
    pub lines: u64,
    pub rejected: u64,
    /// Samples that took the file's modification time.
    used_mtime: u64,
}

impl TextRecords {
    pub fn samples(&self) -> usize {
        self.samples.len()
    }
}

/// One accepted sample line, its time resolved.
#[derive(Debug, Clone, Copy)]
struct Sample {
    metric: u32,
    labels: LabelSetId,
    ts_ms: i64,
    value: f64,
}

impl DcgmText {
    /// `dcgm_file`: capture files.
    pub fn file() -> Self {
        Self::new(Kind::File)
    }

    /// `dcgm_scrape`: live exporter answers.
    pub fn scrape() -> Self {
        Self::new(Kind::Scrape)
    }

    /// A file's line longer than `max` bytes is an error at its line, and its bytes are passed
    /// over without being held: a file of 2 GB without a newline is never whole in memory.
    pub fn with_max_line_bytes(mut self, max: usize) -> Self {
        self.max_line_bytes = max.max(1);
        self
    }

    fn new(kind: Kind) -> Self {
        DcgmText {
            kind,
            reader: Reader::new(),
            name_ids: FxHashMap::default(),
            names: Vec::new(),
            bound: None,
            metric_refs: Vec::new(),
            series_refs: Vec::new(),
            spare: Vec::new(),
            max_line_bytes: MAX_LINE_BYTES,
        }
    }

    /// The text's records, samples without a time of their own taking `time`.
    pub fn parse_text(&mut self, path: &Path, bytes: &[u8], time: ScrapeTime, diags: &mut Diagnostics) -> TextRecords {
        let records = self.parse_lines(path, bytes, 0, time, diags);
        warn_mtime(path, records.used_mtime, diags);
        records
    }

    /// [`DcgmText::parse_text`] of lines that follow `lines_before` lines of their file, without
    /// the warning about modification times (the caller gives it once per file).
    fn parse_lines(&mut self, path: &Path, bytes: &[u8], lines_before: u64, time: ScrapeTime, diags: &mut Diagnostics) -> TextRecords {
        let mut out = TextRecords { samples: std::mem::take(&mut self.spare), lines: 0, rejected: 0, used_mtime: 0 };
        out.samples.clear();
        for item in self.reader.records(bytes) {
            out.lines += 1;
            let rec = match item {
                Ok(rec) => rec,
                Err(bad) => {
                    out.rejected += 1;
                    diags.error(path, Position::Line(lines_before + bad.line), bad.kind.as_str(), format!("{}: {}", bad.reason, bad.excerpt));
                    continue;
                }
            };
            let ts_ms = match (rec.timestamp, time) {
                (Some(ts), _) => ts,
                (None, ScrapeTime::FileName(t) | ScrapeTime::Scraped(t)) => t,
                (None, ScrapeTime::Modified(t)) => {
                    out.used_mtime += 1;
                    t
                }
                (None, ScrapeTime::Unknown) => {
                    out.rejected += 1;
                    diags.error(path, Position::Line(lines_before + rec.line), "missing_timestamp", "sample has no timestamp and the file's time is unknown");
                    continue;
                }
            };
            let metric = match self.name_ids.get(rec.name) {
                Some(i) => *i,
                None => {
                    let i = self.names.len() as u32;
                    self.names.push(rec.name.into());
                    self.name_ids.insert(rec.name.into(), i);
                    i
                }
            };
            out.samples.push(Sample { metric, labels: rec.labels, ts_ms, value: rec.value });
        }
        out
    }

    /// A capture file read from `input` a chunk of whole lines at a time, each chunk's samples
    /// loaded into `tables` before the next is read, so that memory holds the file's rows (for
    /// DCGM text, one per GPU and time) but never its text. `read_so_far` is told the bytes read after each
    /// chunk. Finds what [`Source::read`] finds in the whole file, diagnostics included. Fails
    /// only when `input` does: what was read before stays loaded.
    ///
    /// The rows are not handed on before the end of the file: a GPU's row at one time gathers
    /// its metrics from lines anywhere in the file (`/federate` groups lines by metric), and a
    /// row split in two would be stored half, the other half taken for a duplicate.
    pub fn read_file(
        &mut self,
        input: &mut dyn std::io::Read,
        origin: &Origin<'_>,
        chunk: usize,
        tables: &mut SampleTables,
        diags: &mut Diagnostics,
        read_so_far: &mut dyn FnMut(u64),
    ) -> std::io::Result<Loaded> {
        let path = origin.path;
        let time = self.time_of(origin);
        let mut buf = Vec::new();
        let (mut eof, mut lines_before, mut consumed) = (false, 0u64, 0u64);
        let (mut rejected, mut used_mtime, mut loaded) = (0u64, 0u64, Loaded::default());
        // The errors of a file not one line of which has parsed yet: if none ever does, the
        // file gets one error instead (see `Source::parse`).
        let (mut held, mut parsed_any) = (Diagnostics::new(), false);
        // Inside a line longer than the bound: its bytes are dropped up to its newline.
        let mut passing_over = false;
        while !(eof && buf.is_empty()) {
            if !eof && std::io::Read::read_to_end(&mut std::io::Read::take(&mut *input, chunk.max(1) as u64), &mut buf)? == 0 {
                eof = true;
            }
            // A line longer than the bound at the front (or the rest of one): reported once,
            // and dropped up to its newline.
            let first = memchr::memchr(b'\n', &buf).unwrap_or(buf.len());
            if passing_over || first > self.max_line_bytes {
                if !passing_over {
                    diags.error(
                        path,
                        Position::Line(lines_before + 1),
                        "line_too_long",
                        format!("a line longer than {} bytes (the ingest's --max-line-bytes): passed over", self.max_line_bytes),
                    );
                }
                let ended = first < buf.len();
                let end = if ended { first + 1 } else { buf.len() };
                if ended {
                    lines_before += 1;
                }
                passing_over = !ended && !eof;
                consumed += end as u64;
                buf.drain(..end);
                read_so_far(consumed);
                continue;
            }
            let mut cut = match memchr::memrchr(b'\n', &buf) {
                _ if eof => buf.len(),
                Some(i) => i + 1,
                // A line longer than a chunk: read on (up to the bound, above).
                None => continue,
            };
            // Parse up to a long line further on: it is the first line of the next round.
            let mut start = 0;
            for end in memchr::memchr_iter(b'\n', buf.get(..cut).unwrap_or_default()).chain(std::iter::once(cut)) {
                if end - start > self.max_line_bytes {
                    cut = start;
                    break;
                }
                start = end + 1;
            }
            let text = buf.get(..cut).unwrap_or_default();
            let mut chunk_diags = Diagnostics::new();
            let records = self.parse_lines(path, text, lines_before, time, &mut chunk_diags);
            rejected += records.rejected;
            used_mtime += records.used_mtime;
            if !parsed_any && records.samples() > 0 {
                parsed_any = true;
                diags.merge(std::mem::take(&mut held));
            }
            if parsed_any {
                diags.merge(chunk_diags);
            } else {
                held.merge(chunk_diags);
            }
            let blank_before = tables.counts.blank;
            loaded.samples += self.load_text(records, tables);
            loaded.blank += tables.counts.blank - blank_before;
            lines_before += memchr::memchr_iter(b'\n', text).count() as u64;
            consumed += cut as u64;
            buf.drain(..cut);
            read_so_far(consumed);
        }
        if !parsed_any && rejected > 0 {
            diags.error(path, Position::File, "unrecognised_format", not_exposition(rejected, &held));
        }
        warn_mtime(path, used_mtime, diags);
        Ok(loaded)
    }

    /// The time of samples without their own (see [`ScrapeTime`]).
    fn time_of(&self, origin: &Origin<'_>) -> ScrapeTime {
        match self.kind {
            Kind::File => match time_from_file_name(origin.path) {
                Some(t) => ScrapeTime::FileName(t),
                None => origin.modified_ms.map_or(ScrapeTime::Unknown, ScrapeTime::Modified),
            },
            Kind::Scrape => origin.fetched_ms.map_or(ScrapeTime::Unknown, ScrapeTime::Scraped),
        }
    }

    /// Adds the records' samples to `tables`; returns how many.
    pub fn load_text(&mut self, mut records: TextRecords, tables: &mut SampleTables) -> u64 {
        if self.bound != Some(tables.id()) {
            self.bound = Some(tables.id());
            self.metric_refs.clear();
            self.series_refs.clear();
        }
        for s in &records.samples {
            let metric = match self.metric_refs.get(s.metric as usize) {
                Some(Some(m)) => *m,
                _ => {
                    let m = tables.metric(self.names[s.metric as usize].as_bytes());
                    set(&mut self.metric_refs, s.metric as usize, m);
                    m
                }
            };
            let series = match self.series_refs.get(s.labels.index()) {
                Some(Some(r)) => *r,
                _ => {
                    let r = tables.series(self.reader.labels(s.labels).to_vec());
                    set(&mut self.series_refs, s.labels.index(), r);
                    r
                }
            };
            tables.push(metric, series, s.ts_ms, s.value);
        }
        let n = records.samples.len() as u64;
        records.samples.clear();
        self.spare = records.samples;
        n
    }
}

fn set<T>(v: &mut Vec<Option<T>>, i: usize, x: T) {
    if v.len() <= i {
        v.resize_with(i + 1, || None);
    }
    v[i] = Some(x);
}

impl Source for DcgmText {
    type Records = TextRecords;
    type Tables = SampleTables;

    fn name(&self) -> &'static str {
        match self.kind {
            Kind::File => "dcgm_file",
            Kind::Scrape => "dcgm_scrape",
        }
    }

    fn parse(&mut self, bytes: &[u8], origin: &Origin<'_>, diags: &mut Diagnostics) -> TextRecords {
        let time = self.time_of(origin);
        if self.kind == Kind::Scrape {
            return self.parse_text(origin.path, bytes, time, diags);
        }
        let mut file_diags = Diagnostics::new();
        let records = self.parse_text(origin.path, bytes, time, &mut file_diags);
        if records.samples.is_empty() && records.rejected > 0 {
            // Nothing in the file parsed: it is not exposition text at all (a kubectl table
            // saved as .txt, say). One error for the file says more than one per line.
            diags.error(origin.path, Position::File, "unrecognised_format", not_exposition(records.rejected, &file_diags));
        } else {
            diags.merge(file_diags);
        }
        records
    }

    fn load(&mut self, records: TextRecords, tables: &mut SampleTables, _origin: &Origin<'_>, _diags: &mut Diagnostics) -> Loaded {
        let before = tables.counts.blank;
        let samples = self.load_text(records, tables);
        Loaded { samples, blank: tables.counts.blank - before, ..Loaded::default() }
    }
}

/// The error of a file none of whose lines parsed, quoting the first line's error.
fn not_exposition(rejected: u64, line_errors: &Diagnostics) -> String {
    let first = line_errors.errors.first().map(|d| d.to_string()).unwrap_or_default();
    format!("not Prometheus text exposition ({rejected} lines rejected; first: {first})")
}

/// One warning for the samples of a file that took its modification time.
fn warn_mtime(path: &Path, used_mtime: u64, diags: &mut Diagnostics) {
    if used_mtime > 0 {
        diags.warn(
            path,
            Position::File,
            "time_from_mtime",
            format!("{used_mtime} samples have no timestamp and the file name is not a time: used the file's modification time"),
        );
    }
}

/// The scrape time a file name states: `<unix-millis>.prom` or an RFC 3339 stem such as
/// `2026-10-01T00:00:30Z.prom`.
pub fn time_from_file_name(path: &Path) -> Option<i64> {
    let stem = path.file_stem()?.to_str()?;
    if !stem.is_empty() && stem.len() >= 12 && stem.bytes().all(|c| c.is_ascii_digit()) {
        return stem.parse::<i64>().ok();
    }
    chrono::DateTime::parse_from_rfc3339(stem).ok().map(|t| t.timestamp_millis())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;
    use arrow::array::{Array, AsArray};
    use arrow::datatypes::{Float64Type, TimestampMillisecondType};

    /// What one text file held (a whole text read at once, as the tests do).
    #[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
    struct TextStats {
        pub lines: u64,
        pub samples: u64,
        pub rejected: u64,
    }

    /// Reads a whole exposition text into `tables` (parse, then load). `path` only names the
    /// source in diagnostics.
    fn read_text(path: &Path, bytes: &[u8], scrape_time: ScrapeTime, tables: &mut SampleTables, diags: &mut Diagnostics) -> TextStats {
        let mut source = DcgmText::new(Kind::Scrape);
        let records = source.parse_text(path, bytes, scrape_time, diags);
        let (lines, rejected) = (records.lines, records.rejected);
        let samples = source.load_text(records, tables);
        TextStats { lines, samples, rejected }
    }

    fn read(text: &str, t: ScrapeTime) -> (SampleTables, Diagnostics, TextStats) {
        let mut tables = SampleTables::new();
        let mut d = Diagnostics::new();
        let s = read_text(Path::new("x.prom"), text.as_bytes(), t, &mut tables, &mut d);
        (tables, d, s)
    }

    /// A capture file read whole (parse, then load) and chunk by chunk: the same rows, counts
    /// and diagnostics, wherever the chunks end.
    fn assert_chunks_change_nothing(name: &str, bytes: &[u8], modified_ms: Option<i64>) {
        let path = Path::new(name);
        let origin = Origin::file(path, modified_ms);
        let (mut whole_tables, mut whole_diags) = (SampleTables::new(), Diagnostics::new());
        let whole = DcgmText::file().read(bytes, &origin, &mut whole_tables, &mut whole_diags);
        let named = |batches: Vec<crate::tables::TableBatch>| -> Vec<(&'static str, arrow::array::RecordBatch)> { batches.into_iter().map(|(t, b)| (t.name, b)).collect() };
        let whole_batches = named(whole_tables.take_batches().unwrap());
        for chunk in [1, 2, 7, 100, 4096] {
            let (mut tables, mut diags, mut told) = (SampleTables::new(), Diagnostics::new(), Vec::new());
            let loaded = DcgmText::file().read_file(&mut &bytes[..], &origin, chunk, &mut tables, &mut diags, &mut |n| told.push(n)).unwrap();
            assert_eq!(loaded, whole, "{name}, {chunk}-byte chunks");
            assert_eq!(named(tables.take_batches().unwrap()), whole_batches, "{name}, {chunk}-byte chunks");
            assert_eq!(diags.errors, whole_diags.errors, "{name}, {chunk}-byte chunks");
            assert_eq!(diags.warnings, whole_diags.warnings, "{name}, {chunk}-byte chunks");
            assert_eq!(told.last().copied().unwrap_or(0), bytes.len() as u64);
        }
    }

    /// A line longer than the bound is one error at its line, passed over whatever the chunks,
    /// and the lines around it are read; a file that ends inside such a line ends too.
    #[test]
    fn a_line_longer_than_the_bound_is_passed_over() {
        let good = |gpu: u32| format!("DCGM_FI_DEV_GPU_UTIL{{gpu=\"{gpu}\",UUID=\"GPU-{gpu}\",Hostname=\"n1\"}} 50 1790000000000\n");
        let long = "x".repeat(5000);
        for (text, samples) in [(format!("{}{long}\n{}", good(0), good(1)), 2), (format!("{}{long}", good(0)), 1)] {
            let origin = Origin::file(Path::new("n1.prom"), None);
            for chunk in [7, 100, 4096, 1 << 20] {
                let (mut tables, mut diags, mut told) = (SampleTables::new(), Diagnostics::new(), Vec::new());
                let loaded = DcgmText::file()
                    .with_max_line_bytes(1000)
                    .read_file(&mut text.as_bytes(), &origin, chunk, &mut tables, &mut diags, &mut |n| told.push(n))
                    .unwrap();
                assert_eq!(loaded.samples, samples, "{chunk}-byte chunks");
                let errors: Vec<(&str, &Position)> = diags.errors.iter().map(|e| (e.error_type, &e.position)).collect();
                assert_eq!(errors, [("line_too_long", &Position::Line(2))], "{chunk}-byte chunks");
                assert_eq!(told.last().copied(), Some(text.len() as u64), "{chunk}-byte chunks");
            }
        }
    }

    #[test]
    fn a_file_read_in_chunks_is_the_file_read_whole() {
        let real = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/real/dcgm-metrics"));
        let mut read = 0;
        for entry in std::fs::read_dir(&real).into_iter().flatten().flatten() {
            let bytes = std::fs::read(entry.path()).unwrap();
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.ends_with(".txt") || name.ends_with(".prom") {
                assert_chunks_change_nothing(&name, &bytes, Some(1_700_000_000_000));
                read += 1;
            }
        }
        assert!(read > 0, "no fixture read from {}", real.display());
        // Broken lines, samples with and without their own time (the modification time is
        // warned about once), a long line, no final newline.
        let mut text = String::from("# HELP DCGM_FI_DEV_GPU_UTIL util\n");
        for t in 0..40 {
            text.push_str(&format!("DCGM_FI_DEV_GPU_UTIL{{gpu=\"0\",UUID=\"GPU-a\",Hostname=\"n1\"}} {t} {}\n", 1_700_000_000_000i64 + t * 30_000));
            text.push_str(&format!("DCGM_FI_DEV_GPU_TEMP{{gpu=\"0\",UUID=\"GPU-a\",Hostname=\"n1\"}} {}\n", 40 + t));
            if t % 9 == 4 {
                text.push_str("DCGM_FI_DEV_POWER_USAGE{gpu=\"0\" 12\n");
            }
        }
        text.push_str(&format!("x{{a=\"{}\"}} 1", "y".repeat(300)));
        assert_chunks_change_nothing("capture.prom", text.as_bytes(), Some(1_700_000_000_000));
        // Not exposition text at all: one error for the file, chunked or not.
        assert_chunks_change_nothing("table.txt", b"NAME READY STATUS\npod-a 1/1 Running\n", Some(5));
        assert_chunks_change_nothing("empty.prom", b"", None);
    }

    #[test]
    fn timestamps_file_time_and_colon_names() {
        let text = "# HELP x y\n# TYPE x gauge\nDCGM_FI_DEV_GPU_UTIL{gpu=\"0\",UUID=\"G\"} 5 1700000000000\r\nvllm:num_requests_waiting{model_name=\"m\"} 3\nno_labels 1";
        let (mut t, d, s) = read(text, ScrapeTime::FileName(42));
        assert!(d.is_clean(), "{:?}", d.errors);
        assert_eq!(s, TextStats { lines: 3, samples: 3, rejected: 0 });
        let batches = t.take_batches().unwrap();
        let g = &batches[0].1;
        assert_eq!(g.column(0).as_primitive::<TimestampMillisecondType>().value(0), 1_700_000_000_000);
        let m = &batches[1].1;
        let ts = m.column(0).as_primitive::<TimestampMillisecondType>();
        assert_eq!((ts.value(0), ts.value(1)), (42, 42));
        assert_eq!(m.column(1).as_string::<i32>().value(0), "vllm:num_requests_waiting");
        assert_eq!(m.column(2).as_string::<i32>().value(1), "{}");
    }

    #[test]
    fn a_broken_line_costs_that_line_only() {
        let text = "a{x=\"1\"} 1 10\nb{x=\"1\" 2 10\nc{x=\"1\"} two 10\nd{x=\"1\"} 3 10 junk\ne{x=\"1\"} 4 1.5\nf{x=\"1\"} 5 10\n";
        let (t, d, s) = read(text, ScrapeTime::Unknown);
        assert_eq!(s.samples, 2);
        assert_eq!(s.rejected, 4);
        let lines: Vec<String> = d.errors.iter().map(|e| e.to_string()).collect();
        assert!(lines[0].starts_with("x.prom:2: label set is not closed"), "{}", lines[0]);
        assert!(lines[1].starts_with("x.prom:3: value \"two\" is not a number"), "{}", lines[1]);
        assert!(lines[2].starts_with("x.prom:4: unexpected text after the timestamp"), "{}", lines[2]);
        assert!(lines[3].starts_with("x.prom:5: timestamp \"1.5\" is not integer milliseconds"), "{}", lines[3]);
        assert_eq!(t.metric_rows(), 2);
    }

    #[test]
    fn missing_time_is_an_error_or_a_warning() {
        let (_, d, s) = read("a 1\n", ScrapeTime::Unknown);
        assert_eq!((s.samples, d.errors.len()), (0, 1));
        assert_eq!(d.errors[0].error_type, "missing_timestamp");
        let (_, d, s) = read("a 1\nb 2 5\n", ScrapeTime::Modified(9));
        assert_eq!((s.samples, d.errors.len(), d.warnings.len()), (2, 0, 1));
        assert!(d.warnings[0].reason.starts_with("1 samples have no timestamp"));
    }

    #[test]
    fn families_that_stop_and_resume_fill_the_same_rows() {
        let text = "DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",UUID=\"G0\"} 10 1000\n\
                    DCGM_FI_DEV_GPU_TEMP{gpu=\"0\",UUID=\"G0\"} 50 1000\n\
                    DCGM_FI_DEV_GPU_UTIL{gpu=\"1\",UUID=\"G1\"} 20 1000\n\
                    DCGM_FI_DEV_GPU_TEMP{gpu=\"1\",UUID=\"G1\"} 60 1000";
        let (mut t, d, _) = read(text, ScrapeTime::Unknown);
        assert!(d.is_clean());
        let b = &t.take_batches().unwrap()[0].1;
        assert_eq!(b.num_rows(), 2);
        let temp = b.column(b.schema().index_of("temp_c").unwrap()).as_primitive::<Float64Type>();
        assert_eq!((temp.value(0), temp.value(1)), (50.0, 60.0));
        assert!(!temp.is_null(1));
    }

    #[test]
    fn file_names_that_carry_a_time() {
        assert_eq!(time_from_file_name(Path::new("d/1790812800000.prom")), Some(1_790_812_800_000));
        assert_eq!(time_from_file_name(Path::new("2026-10-01T00:00:30Z.prom")), Some(1_790_812_830_000));
        assert_eq!(time_from_file_name(Path::new("node-a.prom")), None);
        assert_eq!(time_from_file_name(Path::new("2026-10-01.prom")), None);
    }

    #[test]
    fn one_source_over_many_files_and_tables() {
        // The label sets a source remembers are resolved again for fresh tables.
        let mut src = DcgmText::file();
        let mut d = Diagnostics::new();
        let text = b"DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",UUID=\"G0\"} 10 1000\nDCGM_FI_DEV_GPU_TEMP{gpu=\"0\",UUID=\"G0\"} 50 1000\n";
        for _ in 0..2 {
            let mut t = SampleTables::new();
            let origin = Origin::file(Path::new("a.prom"), None);
            let loaded = src.read(text, &origin, &mut t, &mut d);
            assert_eq!(loaded.samples, 2);
            let b = &t.take_batches().unwrap()[0].1;
            assert_eq!(b.num_rows(), 1);
            assert_eq!(b.column(b.schema().index_of("uuid").unwrap()).as_string::<i32>().value(0), "G0");
        }
        assert!(d.is_clean());
        assert_eq!(src.name(), "dcgm_file");
    }

    #[test]
    fn a_file_of_no_exposition_text_is_one_error() {
        let mut src = DcgmText::file();
        let mut d = Diagnostics::new();
        let mut t = SampleTables::new();
        let origin = Origin::file(Path::new("pods.txt"), Some(5));
        let loaded = src.read(b"NAME READY STATUS\nfoo 1/1 Running\n", &origin, &mut t, &mut d);
        assert_eq!(loaded.samples, 0);
        assert_eq!(d.errors.len(), 1);
        assert_eq!(d.errors[0].error_type, "unrecognised_format");
        assert!(d.errors[0].reason.starts_with("not Prometheus text exposition (2 lines rejected; first: pods.txt:1: "), "{}", d.errors[0].reason);
    }
}
