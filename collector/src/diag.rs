//! Diagnostics: what was wrong with the input, where, and how often.
//!
//! Bad input is not an `Err` that unwinds a run. A reader keeps going after a bad line or
//! object and records a [`Diagnostic`] naming the file, the line (or byte offset) and the reason;
//! the run summary counts them by `error_type`, and `--strict` turns any of them into a failing
//! exit. Warnings (an assumption the reader had to make) are kept apart and never fail a run.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

/// Where in a source the problem sits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Position {
    /// The whole file.
    File,
    /// 1-based line number (text formats, line-delimited JSON).
    Line(u64),
    /// 0-based byte offset (JSON and YAML streams), with the 1-based line it falls on.
    Byte { offset: u64, line: u64 },
}

/// One problem with the input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub path: PathBuf,
    pub position: Position,
    /// Short, bounded category (`invalid_number`, `truncated_json`, `unknown_kind`...): the summary
    /// and the metrics count by it.
    pub error_type: &'static str,
    /// Human-readable reason, quoting the offending input briefly.
    pub reason: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.position {
            Position::File => write!(f, "{}: {}", self.path.display(), self.reason),
            Position::Line(l) => write!(f, "{}:{}: {}", self.path.display(), l, self.reason),
            Position::Byte { offset, line } => {
                write!(f, "{}:{} (byte {}): {}", self.path.display(), line, offset, self.reason)
            }
        }
    }
}

/// Errors and warnings gathered while reading; cheap to create per file and merge.
#[derive(Debug, Default, Clone)]
pub struct Diagnostics {
    pub errors: Vec<Diagnostic>,
    pub warnings: Vec<Diagnostic>,
    /// Items skipped on purpose, by reason (unknown kinds, DCGM blank values...): not errors,
    /// but counted so nothing disappears silently.
    pub skipped: BTreeMap<&'static str, u64>,
}

impl Diagnostics {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn error(&mut self, path: &Path, position: Position, error_type: &'static str, reason: impl Into<String>) {
        self.errors.push(Diagnostic { path: path.to_path_buf(), position, error_type, reason: reason.into() });
    }

    pub fn warn(&mut self, path: &Path, position: Position, error_type: &'static str, reason: impl Into<String>) {
        self.warnings.push(Diagnostic { path: path.to_path_buf(), position, error_type, reason: reason.into() });
    }

    pub fn skip(&mut self, reason: &'static str, n: u64) {
        *self.skipped.entry(reason).or_default() += n;
    }

    pub fn merge(&mut self, other: Diagnostics) {
        self.errors.extend(other.errors);
        self.warnings.extend(other.warnings);
        for (k, v) in other.skipped {
            *self.skipped.entry(k).or_default() += v;
        }
    }

    /// Error counts by `error_type`.
    pub fn error_counts(&self) -> BTreeMap<&'static str, u64> {
        let mut m = BTreeMap::new();
        for e in &self.errors {
            *m.entry(e.error_type).or_default() += 1;
        }
        m
    }

    pub fn is_clean(&self) -> bool {
        self.errors.is_empty()
    }
}

/// 1-based line number of a byte offset in `bytes`.
pub fn line_of(bytes: &[u8], offset: usize) -> u64 {
    let end = offset.min(bytes.len());
    memchr::memchr_iter(b'\n', &bytes[..end]).count() as u64 + 1
}

/// Quotes at most 80 bytes of input for an error message.
pub fn excerpt(bytes: &[u8]) -> String {
    const MAX: usize = 80;
    let s = String::from_utf8_lossy(&bytes[..bytes.len().min(MAX)]).into_owned();
    if bytes.len() > MAX { format!("{s}...") } else { s }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_file_line_and_reason() {
        let mut d = Diagnostics::new();
        d.error(Path::new("a/b.prom"), Position::Line(7), "invalid_number", "value \"x\" is not a number");
        d.error(Path::new("w.json"), Position::Byte { offset: 120, line: 4 }, "truncated_json", "stream ends inside an object");
        assert_eq!(d.errors[0].to_string(), "a/b.prom:7: value \"x\" is not a number");
        assert_eq!(d.errors[1].to_string(), "w.json:4 (byte 120): stream ends inside an object");
        assert_eq!(d.error_counts().get("invalid_number"), Some(&1));
    }

    #[test]
    fn line_of_counts_newlines_before_offset() {
        let b = b"a\nbb\nccc";
        assert_eq!(line_of(b, 0), 1);
        assert_eq!(line_of(b, 2), 2);
        assert_eq!(line_of(b, 5), 3);
        assert_eq!(line_of(b, 999), 3);
    }
}
