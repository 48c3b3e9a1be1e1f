//! `dcgm_file`: Prometheus text exposition as the DCGM exporter (and Prometheus' `/federate`)
//! writes it.
//!
//! Why not the prometheus-parse crate: it silently drops every metric whose name holds `:` (most
//! of a vLLM scrape), keeps the leading space of label keys written after `, ` (the exporter's own
//! README examples do that) and mangles label values holding `,` `=` `\"` or `}`; and it builds a
//! fresh label map for every line. Real exporter output repeats the same label block for every
//! metric of a GPU, so this reader parses each distinct label block once and looks the rest up by
//! their raw bytes (see `benches/` and README for the measured difference).
//!
//! Accepted: `# HELP`/`# TYPE`/other comments (skipped), blank lines, `\r\n` endings, a missing
//! final newline, metric names with `:`, label values with escapes (`\\`, `\"`, `\n`) and any
//! other character, a trailing comma in a label block, whitespace around labels, values
//! `NaN`/`+Inf`/`-Inf`, and an optional integer millisecond timestamp. A line that does not
//! parse costs that line only and is reported with its line number.

use std::path::Path;

use crate::diag::{Diagnostics, Position, excerpt};
use crate::tables::samples::SampleTables;

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

/// What one text file held.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TextStats {
    pub lines: u64,
    pub samples: u64,
    pub rejected: u64,
}

/// Reads a whole exposition text into `tables`. `path` only names the source in diagnostics.
pub fn read_text(
    path: &Path,
    bytes: &[u8],
    scrape_time: ScrapeTime,
    tables: &mut SampleTables,
    diags: &mut Diagnostics,
) -> TextStats {
    let mut stats = TextStats::default();
    let mut used_mtime = 0u64;
    let mut line_no = 0u64;
    let mut pos = 0usize;
    while pos < bytes.len() {
        let end = memchr::memchr(b'\n', &bytes[pos..]).map_or(bytes.len(), |i| pos + i);
        let mut line = &bytes[pos..end];
        pos = end + 1;
        line_no += 1;
        if let [rest @ .., b'\r'] = line {
            line = rest;
        }
        let line = trim_start(line);
        if line.is_empty() || line[0] == b'#' {
            continue;
        }
        stats.lines += 1;
        match parse_line(line, tables) {
            Ok((metric, series, value, ts)) => {
                let ts = match (ts, scrape_time) {
                    (Some(ts), _) => ts,
                    (None, ScrapeTime::FileName(t) | ScrapeTime::Scraped(t)) => t,
                    (None, ScrapeTime::Modified(t)) => {
                        used_mtime += 1;
                        t
                    }
                    (None, ScrapeTime::Unknown) => {
                        stats.rejected += 1;
                        diags.error(path, Position::Line(line_no), "missing_timestamp", "sample has no timestamp and the file's time is unknown");
                        continue;
                    }
                };
                tables.push(metric, series, ts, value);
                stats.samples += 1;
            }
            Err(e) => {
                stats.rejected += 1;
                diags.error(path, Position::Line(line_no), e.error_type, format!("{}: {}", e.reason, excerpt(line)));
            }
        }
    }
    if used_mtime > 0 {
        diags.warn(
            path,
            Position::File,
            "time_from_mtime",
            format!("{used_mtime} samples have no timestamp and the file name is not a time: used the file's modification time"),
        );
    }
    stats
}

/// Why a line was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineError {
    pub error_type: &'static str,
    pub reason: String,
}

fn err(error_type: &'static str, reason: impl Into<String>) -> LineError {
    LineError { error_type, reason: reason.into() }
}

type Parsed = (crate::tables::samples::MetricRef, crate::tables::samples::SeriesRef, f64, Option<i64>);

fn parse_line(line: &[u8], tables: &mut SampleTables) -> Result<Parsed, LineError> {
    let name_len = metric_name_len(line);
    if name_len == 0 {
        return Err(err("invalid_metric_name", "expected a metric name"));
    }
    let name = &line[..name_len];
    let mut rest = &line[name_len..];
    let raw_labels: &[u8] = if rest.first() == Some(&b'{') {
        let close = label_block_end(rest).ok_or_else(|| err("invalid_labels", "label set is not closed with `}`"))?;
        let raw = &rest[1..close];
        rest = &rest[close + 1..];
        raw
    } else {
        b""
    };
    if !rest.first().is_some_and(|c| *c == b' ' || *c == b'\t') {
        return Err(err("invalid_line", "expected whitespace and a value after the metric"));
    }
    rest = trim_start(rest);
    let (value_tok, after) = split_token(rest);
    let value = parse_value(value_tok).ok_or_else(|| err("invalid_number", format!("value {:?} is not a number", String::from_utf8_lossy(value_tok))))?;
    let after = trim_start(after);
    let ts = if after.is_empty() {
        None
    } else {
        let (ts_tok, tail) = split_token(after);
        if !trim_start(tail).is_empty() {
            return Err(err("invalid_line", "unexpected text after the timestamp"));
        }
        Some(parse_int(ts_tok).ok_or_else(|| {
            err("invalid_timestamp", format!("timestamp {:?} is not integer milliseconds", String::from_utf8_lossy(ts_tok)))
        })?)
    };
    let metric = tables.metric(name);
    let series = tables.series_for_raw(raw_labels, parse_labels)?;
    Ok((metric, series, value, ts))
}

fn trim_start(b: &[u8]) -> &[u8] {
    let n = b.iter().take_while(|c| **c == b' ' || **c == b'\t').count();
    &b[n..]
}

fn split_token(b: &[u8]) -> (&[u8], &[u8]) {
    let n = b.iter().position(|c| *c == b' ' || *c == b'\t').unwrap_or(b.len());
    (&b[..n], &b[n..])
}

fn is_name_start(c: u8) -> bool {
    c.is_ascii_alphabetic() || c == b'_' || c == b':'
}

fn is_name_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b':'
}

fn metric_name_len(line: &[u8]) -> usize {
    match line.first() {
        Some(c) if is_name_start(*c) => line.iter().take_while(|c| is_name_char(**c)).count(),
        _ => 0,
    }
}

/// Index of the `}` closing the label block that starts at `b[0] == b'{'`, skipping quoted values.
fn label_block_end(b: &[u8]) -> Option<usize> {
    let mut i = 1;
    loop {
        let j = memchr::memchr2(b'"', b'}', &b[i..])? + i;
        if b[j] == b'}' {
            return Some(j);
        }
        // Inside a quoted value: find its closing quote, stepping over escapes.
        let mut k = j + 1;
        loop {
            let q = memchr::memchr2(b'"', b'\\', &b[k..])? + k;
            if b[q] == b'\\' {
                k = q + 2;
                if k > b.len() {
                    return None;
                }
            } else {
                i = q + 1;
                break;
            }
        }
    }
}

/// Parses `k="v",k2="v2"` (whitespace around items and a trailing comma allowed).
pub fn parse_labels(raw: &[u8]) -> Result<Vec<(String, String)>, LineError> {
    let mut out: Vec<(String, String)> = Vec::with_capacity(12);
    let mut b = trim_start(raw);
    while !b.is_empty() {
        let key_len = match b.first() {
            Some(c) if c.is_ascii_alphabetic() || *c == b'_' => b.iter().take_while(|c| c.is_ascii_alphanumeric() || **c == b'_').count(),
            _ => return Err(err("invalid_labels", format!("bad label name at {:?}", excerpt(b)))),
        };
        let key = std::str::from_utf8(&b[..key_len]).map_err(|_| err("invalid_labels", "label name is not UTF-8"))?;
        b = trim_start(&b[key_len..]);
        if b.first() != Some(&b'=') {
            return Err(err("invalid_labels", format!("expected `=` after label {key}")));
        }
        b = trim_start(&b[1..]);
        if b.first() != Some(&b'"') {
            return Err(err("invalid_labels", format!("value of label {key} is not quoted")));
        }
        let mut value = Vec::new();
        let mut i = 1;
        loop {
            match b.get(i) {
                None => return Err(err("invalid_labels", format!("value of label {key} is not closed"))),
                Some(b'"') => break,
                Some(b'\\') => {
                    match b.get(i + 1) {
                        Some(b'n') => value.push(b'\n'),
                        Some(b'\\') => value.push(b'\\'),
                        Some(b'"') => value.push(b'"'),
                        Some(c) => {
                            // Unknown escapes are kept as written rather than rejected.
                            value.push(b'\\');
                            value.push(*c);
                        }
                        None => return Err(err("invalid_labels", format!("value of label {key} is not closed"))),
                    }
                    i += 2;
                }
                Some(c) => {
                    value.push(*c);
                    i += 1;
                }
            }
        }
        let value = String::from_utf8(value).map_err(|_| err("invalid_labels", format!("value of label {key} is not UTF-8")))?;
        if out.iter().any(|(k, _)| k == key) {
            return Err(err("invalid_labels", format!("label {key} appears twice")));
        }
        out.push((key.to_string(), value));
        b = trim_start(&b[i + 1..]);
        match b.first() {
            None => break,
            Some(b',') => b = trim_start(&b[1..]),
            Some(_) => return Err(err("invalid_labels", format!("expected `,` after label {key}"))),
        }
    }
    Ok(out)
}

/// Integers and plain decimals take a fast path; everything else (exponents, NaN, Inf) goes to
/// the standard library's parser.
fn parse_value(tok: &[u8]) -> Option<f64> {
    if tok.is_empty() {
        return None;
    }
    if tok.len() <= 15 {
        let (neg, digits) = match tok[0] {
            b'-' => (true, &tok[1..]),
            b'+' => (false, &tok[1..]),
            _ => (false, tok),
        };
        let mut int: u64 = 0;
        let mut frac_digits = 0i32;
        let mut seen_dot = false;
        let mut ok = !digits.is_empty();
        for &c in digits {
            match c {
                b'0'..=b'9' => {
                    int = int * 10 + u64::from(c - b'0');
                    if seen_dot {
                        frac_digits += 1;
                    }
                }
                b'.' if !seen_dot => seen_dot = true,
                _ => {
                    ok = false;
                    break;
                }
            }
        }
        if ok && digits != b"." {
            // Up to 15 digits fit an f64 mantissa exactly; dividing by a power of ten is then
            // correctly rounded, matching what `str::parse` returns.
            let v = if frac_digits == 0 { int as f64 } else { int as f64 / POW10[frac_digits as usize] };
            return Some(if neg { -v } else { v });
        }
    }
    let s = std::str::from_utf8(tok).ok()?;
    match s {
        "+Inf" | "Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        "NaN" => Some(f64::NAN),
        _ => {
            let first = s.as_bytes()[0];
            // Reject Rust-only spellings ("inf", "infinity") that the text format does not allow.
            if first.is_ascii_digit() || ((first == b'-' || first == b'+' || first == b'.') && s.len() > 1) {
                s.parse::<f64>().ok().filter(|v| v.is_finite())
            } else {
                None
            }
        }
    }
}

const POW10: [f64; 16] = [1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15];

/// Millisecond timestamps: digits with an optional sign, no UTF-8 round trip (every federate
/// line has one).
fn parse_int(tok: &[u8]) -> Option<i64> {
    let (neg, digits) = match tok.first()? {
        b'-' => (true, &tok[1..]),
        b'+' => (false, &tok[1..]),
        _ => (false, tok),
    };
    if digits.is_empty() || digits.len() > 18 {
        return None;
    }
    let mut v: i64 = 0;
    for &c in digits {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v * 10 + i64::from(c - b'0');
    }
    Some(if neg { -v } else { v })
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
    use arrow::array::{Array, AsArray};
    use arrow::datatypes::{Float64Type, TimestampMillisecondType};

    fn read(text: &str, t: ScrapeTime) -> (SampleTables, Diagnostics, TextStats) {
        let mut tables = SampleTables::new();
        let mut d = Diagnostics::new();
        let s = read_text(Path::new("x.prom"), text.as_bytes(), t, &mut tables, &mut d);
        (tables, d, s)
    }

    #[test]
    fn value_fast_path_matches_std_parse() {
        for s in ["0", "42", "-7", "1410", "0.5", "12.25", "-0.03", "99999999999999", "3.141592653589", "+5", "1e3", "1.5e-7", "-2.5E+10"] {
            let expect: f64 = s.trim_start_matches('+').parse().unwrap();
            assert_eq!(parse_value(s.as_bytes()), Some(expect), "{s}");
        }
        assert!(parse_value(b"NaN").unwrap().is_nan());
        assert_eq!(parse_int(b"1790812800000"), Some(1_790_812_800_000));
        assert_eq!(parse_int(b"-5"), Some(-5));
        for bad in ["", "-", "1.5", "12a", "1234567890123456789"] {
            assert_eq!(parse_int(bad.as_bytes()), None, "{bad:?}");
        }
        assert_eq!(parse_value(b"+Inf"), Some(f64::INFINITY));
        assert_eq!(parse_value(b"-Inf"), Some(f64::NEG_INFINITY));
        for bad in ["", "abc", "1.2.3", "inf", "infinity", "nan", ".", "-", "0x10", "1,5"] {
            assert_eq!(parse_value(bad.as_bytes()).map(|_| ()), None, "{bad:?}");
        }
    }

    #[test]
    fn labels_with_tricky_values_and_spacing() {
        let raw = br#" gpu="0", UUID="GPU-1" ,msg="a,b=c}d \"q\" \\ \n",trailing="x","#;
        let l = parse_labels(raw).unwrap();
        assert_eq!(l[0], ("gpu".into(), "0".into()));
        assert_eq!(l[1], ("UUID".into(), "GPU-1".into()), "no leading space kept in keys");
        assert_eq!(l[2].1, "a,b=c}d \"q\" \\ \n");
        assert_eq!(l[3], ("trailing".into(), "x".into()));
        assert!(parse_labels(br#"a="1",a="2""#).is_err());
        assert!(parse_labels(br#"a=1"#).is_err());
        assert!(parse_labels(br#"a="1"#).is_err());
    }

    #[test]
    fn label_block_end_skips_quoted_braces() {
        assert_eq!(label_block_end(br#"{a="}",b="\"}"} 1"#), Some(14));
        assert_eq!(label_block_end(br#"{a="x"#), None);
        assert_eq!(label_block_end(br#"{a="x\"#), None);
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
}
