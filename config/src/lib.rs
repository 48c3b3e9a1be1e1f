//! The one loader of `gpuledger.toml`: it parses the file once, lets each section (the ledger's,
//! the collector's, the server's) check itself against the same [`Document`], and reports every
//! problem of the whole file in one run, each as `file:line: dotted.key: reason`.
//!
//! Checking happens in two passes, as in Vector's `validate`: serde checks each section's shape
//! ([`Document::section`]: types, unknown keys, with the nearest valid key suggested), then the
//! section's own code checks the meaning of what could be read and calls [`Document::report`] for each problem it finds.
//! Each top-level section is deserialized on its own and a key with a wrong shape is taken out
//! before trying again, so one mistake never hides the next. [`Document::finish`] turns the
//! collected problems, sorted by line, into one [`ConfigError`].
//!
//! This crate knows the file's layout (which top-level sections exist) but none of the sections'
//! meanings: those stay with the crates that use them, so the ledger never depends on the
//! collector.
//!
//! ```
//! use std::path::Path;
//! use gpuledger_config::Document;
//!
//! let doc = Document::parse("[prices]\ndefault = 1.0\n[colector]\n", Path::new("g.toml"));
//! let err = doc.finish().unwrap_err().to_string();
//! assert!(err.starts_with("g.toml:3: colector: unknown section"), "{err}");
//! assert!(err.contains("did you mean `collector`?"), "{err}");
//! ```

use std::cell::RefCell;
use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use toml::Spanned;
use toml::de::{DeTable, DeValue};

/// The top-level sections of `gpuledger.toml`, in the order the example file documents them,
/// with the component that reads each.
pub const SECTIONS: [(&str, &str); 12] = [
    ("accounting", "ledger"),
    ("prices", "ledger"),
    ("overheads", "ledger"),
    ("units", "ledger"),
    ("budgets", "ledger"),
    ("energy", "ledger"),
    ("focus", "ledger"),
    ("anomalies", "ledger"),
    ("quota", "ledger"),
    ("collector", "gpuledger collect"),
    ("serve", "gpuledger serve"),
    ("store", "gpuledger collect and gpuledger store expire"),
];

/// One thing wrong with the configuration (or with a file it names).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The file the problem is in: the configuration, or a file it points to.
    pub path: PathBuf,
    /// 1-based; `None` for a problem with a whole file.
    pub line: Option<usize>,
    /// Dotted key path (`overheads[1].month`); empty when no key encloses the problem.
    pub key: String,
    pub reason: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.path.display())?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        if !self.key.is_empty() {
            write!(f, ": {}", self.key)?;
        }
        write!(f, ": {}", self.reason)
    }
}

/// A configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The configuration file cannot be read.
    #[error("{}: cannot read: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Every problem found, sorted by file position; never empty. Displayed one per line.
    #[error("{}", join_lines(problems))]
    Invalid { problems: Vec<Problem> },
}

impl ConfigError {
    /// The problems found (none for an unreadable file).
    pub fn problems(&self) -> &[Problem] {
        match self {
            ConfigError::Io { .. } => &[],
            ConfigError::Invalid { problems } => problems,
        }
    }
}

fn join_lines(problems: &[Problem]) -> String {
    problems.iter().map(Problem::to_string).collect::<Vec<_>>().join("\n")
}

/// A parsed `gpuledger.toml` and the problems found in it so far.
pub struct Document<'a> {
    text: &'a str,
    path: PathBuf,
    /// `None` after a syntax error: nothing more can be checked then.
    tree: Option<Spanned<DeTable<'a>>>,
    problems: RefCell<Vec<Problem>>,
}

impl<'a> Document<'a> {
    /// Reads the file at `path`; the text is returned for [`Document::parse`] to borrow.
    pub fn read(path: &Path) -> Result<String, ConfigError> {
        std::fs::read_to_string(path).map_err(|source| ConfigError::Io { path: path.to_path_buf(), source })
    }

    /// Parses `text` (`path` names it in messages), reporting a syntax error and any top-level
    /// key that is not one of [`SECTIONS`].
    pub fn parse(text: &'a str, path: &Path) -> Document<'a> {
        let mut doc = Document { text, path: path.to_path_buf(), tree: None, problems: RefCell::new(Vec::new()) };
        match DeTable::parse(text) {
            Ok(tree) => {
                for (k, _) in tree.get_ref().iter() {
                    let name: &str = k.get_ref();
                    if !SECTIONS.iter().any(|(s, _)| *s == name) {
                        let names: Vec<&str> = SECTIONS.iter().map(|(s, _)| *s).collect();
                        let mut reason = format!("unknown section, expected one of {}", names.join(", "));
                        if let Some(near) = nearest(name, &names) {
                            reason.push_str(&format!("; did you mean `{near}`?"));
                        }
                        doc.report(k.span(), key_segment(name), reason);
                    }
                }
                doc.tree = Some(tree);
            }
            Err(e) => doc.syntax_error(&e),
        }
        doc
    }

    /// The directory relative paths in the file are resolved against.
    pub fn dir(&self) -> &Path {
        self.path.parent().unwrap_or_else(|| Path::new(""))
    }

    /// The file name used in messages.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the file parsed (a syntax error leaves nothing to check).
    pub fn parsed(&self) -> bool {
        self.tree.is_some()
    }

    /// 1-based line of byte `offset`.
    pub fn line(&self, offset: usize) -> usize {
        let end = offset.min(self.text.len());
        self.text.as_bytes()[..end].iter().filter(|&&b| b == b'\n').count() + 1
    }

    /// Records a problem at `span` of the configuration file.
    pub fn report(&self, span: Range<usize>, key: impl Into<String>, reason: impl Into<String>) {
        let line = Some(self.line(span.start));
        self.problems.borrow_mut().push(Problem { path: self.path.clone(), line, key: key.into(), reason: reason.into() });
    }

    /// Records a problem found in another file (one the configuration points to).
    pub fn report_problem(&self, problem: Problem) {
        self.problems.borrow_mut().push(problem);
    }

    /// Whether any problem was reported.
    pub fn has_problems(&self) -> bool {
        !self.problems.borrow().is_empty()
    }

    /// The span of the top-level key `name` (its header or dotted key), if present.
    pub fn section_span(&self, name: &str) -> Option<Range<usize>> {
        let tree = self.tree.as_ref()?;
        tree.get_ref().iter().find(|(k, _)| {
            let k: &str = k.get_ref();
            k == name
        }).map(|(k, _)| k.span())
    }

    /// Deserializes the top-level section `name` alone: `None` when it is absent, after a syntax
    /// error, or when its shape cannot be read at all (reported). Each shape error is reported
    /// with its dotted key, and that key is taken out before trying again: so every badly shaped
    /// key of the section shows, and the rest of the section is returned for its meaning to be
    /// checked. A check that misses a key can ask [`Document::reported_under`] whether it was
    /// taken out, rather than echo "missing".
    pub fn section<T: DeserializeOwned>(&self, name: &str) -> Option<T> {
        let tree = self.tree.as_ref()?;
        let (_, value) = tree.get_ref().iter().find(|(k, _)| {
            let k: &str = k.get_ref();
            k == name
        })?;
        let mut value = value.clone();
        // Each round takes one key out, so this ends; the bound is a guard, not a limit reached.
        for _ in 0..=count_keys(value.get_ref()) {
            match T::deserialize(toml::de::ValueDeserializer::from(value.clone())) {
                Ok(v) => return Some(v),
                Err(e) => {
                    let offset = e.span().map_or(0, |s| s.start);
                    let key = key_at(tree.get_ref(), offset).unwrap_or_else(|| key_segment(name));
                    // The section as a whole has the wrong shape (`overheads` as a table): no key
                    // of it to take out.
                    let whole = key == key_segment(name);
                    self.report(offset..offset, key, shape_reason(&e));
                    if whole {
                        return None;
                    }
                    // Only keys of a table can be taken out and the rest read again; an error in
                    // an array of tables (`[[overheads]]`) ends the section's shape check.
                    if !remove_key_at(&mut value, offset) {
                        return None;
                    }
                }
            }
        }
        None
    }

    /// Whether a problem was reported at `key` or inside it (`prices` holds `prices.default`
    /// and `prices.by_model."x"`).
    pub fn reported_under(&self, key: &str) -> bool {
        self.problems.borrow().iter().any(|p| {
            p.key.strip_prefix(key).is_some_and(|rest| rest.is_empty() || rest.starts_with('.') || rest.starts_with('['))
        })
    }

    /// Every problem reported, sorted by file and line (stable: same-line problems keep the
    /// order they were found in), or `Ok` when there are none.
    pub fn finish(self) -> Result<(), ConfigError> {
        let mut problems = self.problems.into_inner();
        if problems.is_empty() {
            return Ok(());
        }
        let own = self.path;
        problems.sort_by_key(|p| (p.path != own, p.line.unwrap_or(0)));
        Err(ConfigError::Invalid { problems })
    }

    fn syntax_error(&self, e: &toml::de::Error) {
        let offset = e.span().map_or(0, |s| s.start);
        // The partially parsed document usually still holds the key being written.
        let (partial, _) = DeTable::parse_recoverable(self.text);
        let found = key_at(partial.get_ref(), offset);
        let mut reason = one_line(e.message());
        // Some messages ("duplicate key") do not say what they are about; the span does.
        let snippet = e.span().and_then(|s| self.text.get(s)).map(str::trim).unwrap_or_default();
        if found.is_none() && !snippet.is_empty() && !snippet.contains('\n') {
            reason = format!("{reason} (`{snippet}`)");
        }
        // Else the section it is written in: the last top-level key that starts before it.
        let key = found.or_else(|| {
            let before = partial.get_ref().iter().filter(|(k, _)| k.span().start <= offset).max_by_key(|(k, _)| k.span().start);
            before.map(|(k, _)| key_segment(k.get_ref()))
        });
        self.report(offset..offset, key.unwrap_or_default(), reason);
    }
}

fn count_keys(v: &DeValue<'_>) -> usize {
    match v {
        DeValue::Table(t) => t.len(),
        _ => 0,
    }
}

/// Removes the key of table `value` whose key or value holds `offset`.
fn remove_key_at(value: &mut Spanned<DeValue<'_>>, offset: usize) -> bool {
    let DeValue::Table(t) = value.get_mut() else { return false };
    let hit = t.iter().find(|(k, v)| holds(k.span(), offset) || holds(v.span(), offset)).map(|(k, _)| k.clone());
    match hit {
        Some(k) => t.remove(&k).is_some(),
        None => false,
    }
}

fn holds(span: Range<usize>, offset: usize) -> bool {
    span.contains(&offset) || (span.is_empty() && span.start == offset)
}

/// A serde message in the file's terms, with the nearest valid key for an unknown one.
fn shape_reason(e: &toml::de::Error) -> String {
    let message = tomlish(&one_line(e.message()));
    // serde writes "unknown field `x`, expected one of `a`, `b`" (or "expected `a`").
    let ticked: Vec<&str> = message.split('`').skip(1).step_by(2).collect();
    if message.starts_with("unknown field")
        && ticked.len() > 1
        && let Some(near) = nearest(ticked[0], &ticked[1..])
    {
        return format!("{message}; did you mean `{near}`?");
    }
    message
}

/// The candidate closest to `word` by edit distance, if it is close enough to be a typo.
pub fn nearest<'c>(word: &str, candidates: &[&'c str]) -> Option<&'c str> {
    let limit = (word.chars().count() / 3).max(1);
    candidates.iter().map(|c| (edit_distance(word, c), *c)).filter(|(d, _)| *d <= limit).min_by_key(|(d, _)| *d).map(|(_, c)| c)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diag = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let next = (diag + usize::from(ca != *cb)).min(row[j] + 1).min(row[j + 1] + 1);
            diag = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

/// toml's messages may span lines; ours are one line each.
pub fn one_line(message: &str) -> String {
    message.trim().lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join("; ")
}

/// serde names Rust types ("expected f64", "map"); the file's author thinks in TOML ones.
fn tomlish(message: &str) -> String {
    [("f64", "a number"), ("a sequence", "an array"), ("sequence", "array"), ("a map", "a table"), ("map", "table")]
        .iter()
        .fold(message.to_string(), |m, (rust, toml)| {
            m.replace(&format!("expected {rust}"), &format!("expected {toml}")).replace(&format!("type: {rust}"), &format!("type: {toml}"))
        })
}

/// A key as TOML would write it in a dotted path: bare if it can be, quoted otherwise.
pub fn key_segment(key: &str) -> String {
    if !key.is_empty() && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-') { key.to_string() } else { format!("{key:?}") }
}

/// The dotted path of the key or value at byte `offset`: the innermost key, scalar or container
/// whose span holds it (serde errors carry a span but not the path of tables around it).
fn key_at(table: &DeTable<'_>, offset: usize) -> Option<String> {
    let mut best: Option<(usize, String)> = None;
    collect_table(table, "", offset, &mut best);
    best.map(|(_, path)| path)
}

fn consider(span: Range<usize>, path: &str, offset: usize, best: &mut Option<(usize, String)>) {
    let len = span.end - span.start;
    if holds(span, offset) && best.as_ref().is_none_or(|(l, _)| len < *l) {
        *best = Some((len, path.to_string()));
    }
}

fn collect_table(table: &DeTable<'_>, prefix: &str, offset: usize, best: &mut Option<(usize, String)>) {
    for (k, v) in table.iter() {
        let seg = key_segment(k.get_ref());
        let path = if prefix.is_empty() { seg } else { format!("{prefix}.{seg}") };
        consider(k.span(), &path, offset, best);
        collect_value(v, &path, offset, best);
    }
}

fn collect_value(v: &Spanned<DeValue<'_>>, path: &str, offset: usize, best: &mut Option<(usize, String)>) {
    consider(v.span(), path, offset, best);
    match v.get_ref() {
        DeValue::Table(t) => collect_table(t, path, offset, best),
        DeValue::Array(a) => {
            for (i, item) in a.iter().enumerate() {
                collect_value(item, &format!("{path}[{i}]"), offset, best);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Prices {
        default: Option<f64>,
        by_model: Option<std::collections::BTreeMap<String, f64>>,
    }

    #[test]
    fn every_badly_shaped_key_of_a_section_is_reported() {
        let text = "[prices]\ndefault = \"x\"\ndefualt = 1.0\nby_model = 3\n";
        let doc = Document::parse(text, Path::new("g.toml"));
        let p = doc.section::<Prices>("prices").expect("the rest of the section is read");
        assert!(p.default.is_none() && p.by_model.is_none());
        assert!(doc.reported_under("prices") && doc.reported_under("prices.default") && !doc.reported_under("pri"));
        let lines: Vec<String> = doc.finish().unwrap_err().problems().iter().map(Problem::to_string).collect();
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert!(lines[0].starts_with("g.toml:2: prices.default: invalid type"), "{lines:?}");
        assert!(lines[1].starts_with("g.toml:3: prices.defualt: unknown field") && lines[1].ends_with("did you mean `default`?"), "{lines:?}");
        assert!(lines[2].starts_with("g.toml:4: prices.by_model: invalid type"), "{lines:?}");
    }

    #[test]
    fn absent_and_good_sections() {
        let doc = Document::parse("[prices]\ndefault = 1.5\n", Path::new("g.toml"));
        assert!(doc.section::<Prices>("accounting").is_none());
        assert_eq!(doc.section::<Prices>("prices").and_then(|p| p.default), Some(1.5));
        assert!(doc.finish().is_ok());
    }

    #[test]
    fn syntax_error_is_one_located_problem() {
        let doc = Document::parse("[prices]\ndefault = 1.0\ndefault = 2.0\n", Path::new("g.toml"));
        assert!(!doc.parsed());
        let e = doc.finish().unwrap_err().to_string();
        assert!(e.starts_with("g.toml:3: ") && e.contains("duplicate key"), "{e}");
    }

    #[test]
    fn problems_are_sorted_by_line_and_other_files_come_last() {
        let doc = Document::parse("\n\n[serve]\n", Path::new("g.toml"));
        doc.report_problem(Problem { path: "units.csv".into(), line: Some(1), key: String::new(), reason: "bad".into() });
        doc.report(3..3, "serve.x", "late");
        doc.report(0..0, "accounting.y", "early");
        let e = doc.finish().unwrap_err().to_string();
        assert_eq!(e, "g.toml:1: accounting.y: early\ng.toml:3: serve.x: late\nunits.csv:1: bad");
    }

    #[test]
    fn nearest_key() {
        assert_eq!(nearest("colector", &["collector", "serve"]), Some("collector"));
        assert_eq!(nearest("zzz", &["collector", "serve"]), None);
    }
}
