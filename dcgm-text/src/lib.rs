//! Reads Prometheus text exposition, as the DCGM exporter (and Prometheus' `/federate`) writes
//! it, into records: metric name, label set, value and optional timestamp, one per sample line,
//! or a [`BadLine`] naming the line and the reason.
//!
//! Why not the prometheus-parse crate: it silently drops every metric whose name holds `:` (most
//! of a vLLM scrape), keeps the leading space of label keys written after `, ` (the exporter's own
//! README examples do that) and mangles label values holding `,` `=` `\"` or `}`; and it builds a
//! fresh label map for every line. Real exporter output repeats the same label block for every
//! metric of a GPU, so a [`Reader`] parses each distinct label block once and hands out a
//! [`LabelSetId`] for the rest, found by the block's raw bytes. The reader keeps those sets for
//! its whole life, so one reader fed many files of the same exporter parses each block once.
//!
//! Accepted: `# HELP`/`# TYPE`/other comments (skipped), blank lines, `\r\n` endings, a missing
//! final newline, metric names with `:`, label values with escapes (`\\`, `\"`, `\n`) and any
//! other character (unknown escapes are kept as written), a trailing comma in a label block,
//! whitespace around labels, values `NaN`/`+Inf`/`-Inf`, and an optional integer millisecond
//! timestamp. A line that does not parse costs that line only.
//!
//! Values are handed on as written: DCGM's "blank" sentinels (2^31 - 16, 2^47, ...) are ordinary
//! numbers here. Which of them mean "no value" depends on the field, and is the consumer's call.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// One sample line.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Record<'t> {
    /// 1-based line number in the text.
    pub line: u64,
    /// Metric name as written (ASCII letters, digits, `_` and `:`).
    pub name: &'t str,
    /// The line's label set; its pairs are [`Records::labels`] / [`Reader::labels`].
    pub labels: LabelSetId,
    /// The value as written, DCGM blank sentinels included.
    pub value: f64,
    /// The sample's own time in unix milliseconds, when the line states one.
    pub timestamp: Option<i64>,
}

/// Names one distinct label set of a [`Reader`]: equal label blocks (byte for byte) get equal
/// ids; ids are dense, starting at 0, so consumers can keep what they derive from a set in a
/// `Vec` indexed by [`LabelSetId::index`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LabelSetId(u32);

impl LabelSetId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// Why a line was rejected: a short, stable category.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    InvalidMetricName,
    InvalidLabels,
    InvalidLine,
    InvalidNumber,
    InvalidTimestamp,
}

impl ErrorKind {
    /// The category in snake case (`invalid_number`...), as run summaries and metrics count it.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::InvalidMetricName => "invalid_metric_name",
            ErrorKind::InvalidLabels => "invalid_labels",
            ErrorKind::InvalidLine => "invalid_line",
            ErrorKind::InvalidNumber => "invalid_number",
            ErrorKind::InvalidTimestamp => "invalid_timestamp",
        }
    }
}

/// A line that is not a sample.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {reason}: {excerpt}")]
pub struct BadLine {
    /// 1-based line number in the text.
    pub line: u64,
    pub kind: ErrorKind,
    /// What is wrong, quoting the offending token.
    pub reason: String,
    /// At most 80 bytes of the line (leading whitespace removed), for error messages.
    pub excerpt: String,
}

/// A problem inside one line, before it knows its line number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineError {
    pub kind: ErrorKind,
    pub reason: String,
}

fn err(kind: ErrorKind, reason: impl Into<String>) -> LineError {
    LineError { kind, reason: reason.into() }
}

/// Label sets seen so far, shared by every text a reader reads.
#[derive(Debug, Default)]
pub struct Reader {
    /// Raw label block (the bytes between `{` and `}`) -> its set.
    by_raw: HashMap<Box<[u8]>, LabelSetId, BuildHasherDefault<FxHasher>>,
    sets: Vec<Vec<(String, String)>>,
}

impl Reader {
    pub fn new() -> Self {
        Self::default()
    }

    /// The records of `text`, one per line that is neither blank nor a comment, in text order.
    pub fn records<'r, 't>(&'r mut self, text: &'t [u8]) -> Records<'r, 't> {
        Records { reader: self, text, pos: 0, line: 0 }
    }

    /// The pairs of a label set, in the order the block wrote them.
    ///
    /// # Panics
    /// When `id` comes from another reader and is out of this one's range.
    pub fn labels(&self, id: LabelSetId) -> &[(String, String)] {
        &self.sets[id.index()]
    }

    /// How many distinct label sets this reader has parsed.
    pub fn label_sets(&self) -> usize {
        self.sets.len()
    }

    /// The set of a raw label block, parsing it only the first time it is seen. A block that
    /// does not parse is not remembered (it is reported again on every line that carries it).
    fn label_set(&mut self, raw: &[u8]) -> Result<LabelSetId, LineError> {
        if let Some(id) = self.by_raw.get(raw) {
            return Ok(*id);
        }
        let pairs = parse_labels(raw)?;
        let id = LabelSetId(u32::try_from(self.sets.len()).map_err(|_| err(ErrorKind::InvalidLabels, "more than 2^32 distinct label sets"))?);
        self.sets.push(pairs);
        self.by_raw.insert(raw.into(), id);
        Ok(id)
    }
}

/// The records of one text (see [`Reader::records`]).
pub struct Records<'r, 't> {
    reader: &'r mut Reader,
    text: &'t [u8],
    pos: usize,
    line: u64,
}

impl Records<'_, '_> {
    /// The pairs of a label set of this text (or of an earlier one of the same reader).
    pub fn labels(&self, id: LabelSetId) -> &[(String, String)] {
        self.reader.labels(id)
    }
}

impl<'t> Iterator for Records<'_, 't> {
    type Item = Result<Record<'t>, BadLine>;

    fn next(&mut self) -> Option<Self::Item> {
        let text = self.text;
        while self.pos < text.len() {
            let start = self.pos;
            let end = memchr::memchr(b'\n', &text[start..]).map_or(text.len(), |i| start + i);
            let mut line = &text[start..end];
            self.pos = end + 1;
            self.line += 1;
            if let [rest @ .., b'\r'] = line {
                line = rest;
            }
            let line = trim_start(line);
            if line.is_empty() || line[0] == b'#' {
                continue;
            }
            let line_no = self.line;
            return Some(
                parse_line(line, self.reader)
                    .map(|(name, labels, value, timestamp)| Record { line: line_no, name, labels, value, timestamp })
                    .map_err(|e| BadLine { line: line_no, kind: e.kind, reason: e.reason, excerpt: excerpt(line) }),
            );
        }
        None
    }
}

type Parsed<'t> = (&'t str, LabelSetId, f64, Option<i64>);

fn parse_line<'t>(line: &'t [u8], reader: &mut Reader) -> Result<Parsed<'t>, LineError> {
    let name_len = metric_name_len(line);
    if name_len == 0 {
        return Err(err(ErrorKind::InvalidMetricName, "expected a metric name"));
    }
    // Only ASCII passed `metric_name_len`, so this cannot fail; the error is for form's sake.
    let name = std::str::from_utf8(&line[..name_len]).map_err(|_| err(ErrorKind::InvalidMetricName, "metric name is not UTF-8"))?;
    let mut rest = &line[name_len..];
    let raw_labels: &[u8] = if rest.first() == Some(&b'{') {
        let close = label_block_end(rest).ok_or_else(|| err(ErrorKind::InvalidLabels, "label set is not closed with `}`"))?;
        let raw = &rest[1..close];
        rest = &rest[close + 1..];
        raw
    } else {
        b""
    };
    if !rest.first().is_some_and(|c| *c == b' ' || *c == b'\t') {
        return Err(err(ErrorKind::InvalidLine, "expected whitespace and a value after the metric"));
    }
    rest = trim_start(rest);
    let (value_tok, after) = split_token(rest);
    let value = parse_value(value_tok)
        .ok_or_else(|| err(ErrorKind::InvalidNumber, format!("value {:?} is not a number", String::from_utf8_lossy(value_tok))))?;
    let after = trim_start(after);
    let ts = if after.is_empty() {
        None
    } else {
        let (ts_tok, tail) = split_token(after);
        if !trim_start(tail).is_empty() {
            return Err(err(ErrorKind::InvalidLine, "unexpected text after the timestamp"));
        }
        Some(parse_int(ts_tok).ok_or_else(|| {
            err(ErrorKind::InvalidTimestamp, format!("timestamp {:?} is not integer milliseconds", String::from_utf8_lossy(ts_tok)))
        })?)
    };
    // Labels last: a line broken elsewhere reports that, as it always has.
    let labels = reader.label_set(raw_labels)?;
    Ok((name, labels, value, ts))
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

/// Parses `k="v",k2="v2"` (whitespace around items and a trailing comma allowed) into pairs in
/// written order.
pub fn parse_labels(raw: &[u8]) -> Result<Vec<(String, String)>, LineError> {
    let bad = |reason: String| err(ErrorKind::InvalidLabels, reason);
    let mut out: Vec<(String, String)> = Vec::with_capacity(12);
    let mut b = trim_start(raw);
    while !b.is_empty() {
        let key_len = match b.first() {
            Some(c) if c.is_ascii_alphabetic() || *c == b'_' => b.iter().take_while(|c| c.is_ascii_alphanumeric() || **c == b'_').count(),
            _ => return Err(bad(format!("bad label name at {:?}", excerpt(b)))),
        };
        let key = std::str::from_utf8(&b[..key_len]).map_err(|_| bad("label name is not UTF-8".into()))?;
        b = trim_start(&b[key_len..]);
        if b.first() != Some(&b'=') {
            return Err(bad(format!("expected `=` after label {key}")));
        }
        b = trim_start(&b[1..]);
        if b.first() != Some(&b'"') {
            return Err(bad(format!("value of label {key} is not quoted")));
        }
        let mut value = Vec::new();
        let mut i = 1;
        loop {
            match b.get(i) {
                None => return Err(bad(format!("value of label {key} is not closed"))),
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
                        None => return Err(bad(format!("value of label {key} is not closed"))),
                    }
                    i += 2;
                }
                Some(c) => {
                    value.push(*c);
                    i += 1;
                }
            }
        }
        let value = String::from_utf8(value).map_err(|_| bad(format!("value of label {key} is not UTF-8")))?;
        if out.iter().any(|(k, _)| k == key) {
            return Err(bad(format!("label {key} appears twice")));
        }
        out.push((key.to_string(), value));
        b = trim_start(&b[i + 1..]);
        match b.first() {
            None => break,
            Some(b',') => b = trim_start(&b[1..]),
            Some(_) => return Err(bad(format!("expected `,` after label {key}"))),
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
        let mut frac_digits = 0usize;
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
            let v = if frac_digits == 0 { int as f64 } else { int as f64 / POW10[frac_digits] };
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

/// Quotes at most 80 bytes of input for an error message.
pub fn excerpt(bytes: &[u8]) -> String {
    const MAX: usize = 80;
    let s = String::from_utf8_lossy(&bytes[..bytes.len().min(MAX)]).into_owned();
    if bytes.len() > MAX { format!("{s}...") } else { s }
}

/// The multiply-rotate hash of rustc (FxHash): label blocks are looked up once per line, and
/// SipHash's DoS resistance buys nothing against a file the operator chose to read.
#[derive(Debug, Default, Clone, Copy)]
struct FxHasher {
    hash: u64,
}

const FX_SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl FxHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.hash = (self.hash.rotate_left(5) ^ word).wrapping_mul(FX_SEED);
    }
}

impl Hasher for FxHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.add(u64::from_le_bytes(w));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(w));
        }
    }

    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }

    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.hash
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> (Vec<Result<Record<'_>, BadLine>>, Reader) {
        let mut reader = Reader::new();
        let out = reader.records(text.as_bytes()).collect();
        (out, reader)
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
        assert_eq!(parse_labels(br#"a="x\qy""#).unwrap()[0].1, "x\\qy", "unknown escapes kept");
    }

    #[test]
    fn label_block_end_skips_quoted_braces() {
        assert_eq!(label_block_end(br#"{a="}",b="\"}"} 1"#), Some(14));
        assert_eq!(label_block_end(br#"{a="x"#), None);
        assert_eq!(label_block_end(br#"{a="x\"#), None);
    }

    #[test]
    fn records_with_timestamps_comments_crlf_and_colon_names() {
        let text = "# HELP x y\n# TYPE x gauge\n\n  DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",UUID=\"G\"} 5 1700000000000\r\nvllm:num_requests_waiting{model_name=\"m\"} 3\nno_labels NaN";
        let (recs, reader) = read(text);
        let recs: Vec<Record<'_>> = recs.into_iter().map(Result::unwrap).collect();
        assert_eq!(recs.len(), 3);
        assert_eq!((recs[0].line, recs[0].name, recs[0].value, recs[0].timestamp), (4, "DCGM_FI_DEV_GPU_UTIL", 5.0, Some(1_700_000_000_000)));
        assert_eq!(reader.labels(recs[0].labels), [("gpu".to_string(), "0".to_string()), ("UUID".to_string(), "G".to_string())]);
        assert_eq!((recs[1].line, recs[1].name, recs[1].timestamp), (5, "vllm:num_requests_waiting", None));
        assert!(reader.labels(recs[2].labels).is_empty());
        assert!(recs[2].value.is_nan());
    }

    #[test]
    fn each_distinct_label_block_is_parsed_once() {
        let text = "a{x=\"1\"} 1\nb{x=\"1\"} 2\nc{x=\"2\"} 3\nd{x=\"1\"} 4\n";
        let mut reader = Reader::new();
        let ids: Vec<LabelSetId> = reader.records(text.as_bytes()).map(|r| r.unwrap().labels).collect();
        assert_eq!(ids[0], ids[1]);
        assert_eq!(ids[0], ids[3]);
        assert_ne!(ids[0], ids[2]);
        assert_eq!(reader.label_sets(), 2);
        // A second text of the same reader reuses the sets.
        let again: Vec<LabelSetId> = reader.records(b"e{x=\"2\"} 5").map(|r| r.unwrap().labels).collect();
        assert_eq!(again, [ids[2]]);
        assert_eq!(reader.label_sets(), 2);
    }

    #[test]
    fn a_broken_line_costs_that_line_only() {
        let text = "a{x=\"1\"} 1 10\nb{x=\"1\" 2 10\nc{x=\"1\"} two 10\nd{x=\"1\"} 3 10 junk\ne{x=\"1\"} 4 1.5\nf{x=\"1\"} 5 10\n{x=\"1\"} 6\ng{x=1} 7\nh{x=\"1\"}7\n";
        let (recs, _) = read(text);
        let good: Vec<&str> = recs.iter().filter_map(|r| r.as_ref().ok()).map(|r| r.name).collect();
        assert_eq!(good, ["a", "f"]);
        let bad: Vec<(u64, &'static str, String)> =
            recs.iter().filter_map(|r| r.as_ref().err()).map(|e| (e.line, e.kind.as_str(), format!("{}: {}", e.reason, e.excerpt))).collect();
        assert_eq!(bad[0], (2, "invalid_labels", "label set is not closed with `}`: b{x=\"1\" 2 10".to_string()));
        assert_eq!(bad[1], (3, "invalid_number", "value \"two\" is not a number: c{x=\"1\"} two 10".to_string()));
        assert_eq!(bad[2], (4, "invalid_line", "unexpected text after the timestamp: d{x=\"1\"} 3 10 junk".to_string()));
        assert_eq!(bad[3], (5, "invalid_timestamp", "timestamp \"1.5\" is not integer milliseconds: e{x=\"1\"} 4 1.5".to_string()));
        assert_eq!((bad[4].0, bad[4].1), (7, "invalid_metric_name"));
        assert_eq!((bad[5].0, bad[5].1), (8, "invalid_labels"));
        assert_eq!((bad[6].0, bad[6].1), (9, "invalid_line"));
        assert_eq!(bad.len(), 7);
        let e = recs[1].as_ref().unwrap_err();
        assert_eq!(e.to_string(), "line 2: label set is not closed with `}`: b{x=\"1\" 2 10");
    }

    #[test]
    fn blank_sentinels_are_plain_values_here() {
        let (recs, _) = read("DCGM_FI_DEV_MEMORY_TEMP{gpu=\"0\"} 9223372036854775794\nDCGM_FI_DEV_POWER_USAGE{gpu=\"0\"} 140737488355328.000\n");
        let values: Vec<f64> = recs.into_iter().map(|r| r.unwrap().value).collect();
        assert_eq!(values, [9_223_372_036_854_775_794.0, 140_737_488_355_328.0]);
    }

    #[test]
    fn long_lines_are_quoted_briefly() {
        let line = format!("x {}", "a".repeat(200));
        let (recs, _) = read(&line);
        let e = recs[0].as_ref().unwrap_err();
        assert!(e.excerpt.ends_with("...") && e.excerpt.len() == 83, "{}", e.excerpt);
    }
}
