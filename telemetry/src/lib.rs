//! What gpuledger says about itself, written one way everywhere: where log events go
//! ([`logs`]), the Prometheus text exposition of `/metrics` (collector and server) and the
//! one-line rendering of an error's cause chain (the binary's `main`, log events, backfill's
//! scrape errors).
//!
//! It depends on no other crate of the workspace, so every one of them can use it.
//!
//! ```
//! use gpuledger_telemetry::{Exposition, error_chain};
//!
//! let mut out = Exposition::new();
//! out.family("gpuledger_rows_written_total", "counter", "Rows written, by table", [(&[("table", "gpu_samples")][..], 8.0)]);
//! let text = out.finish();
//! assert!(text.starts_with("# HELP gpuledger_rows_written_total Rows written, by table\n"));
//! assert!(text.ends_with("counter\ngpuledger_rows_written_total{table=\"gpu_samples\"} 8\n"));
//!
//! let e = std::io::Error::other("disk full");
//! assert_eq!(error_chain(&e), "disk full");
//! ```

use std::fmt::{Display, Write};

pub mod logs;

pub use logs::LogFormat;

/// Prometheus text format (version 0.0.4), built up family by family.
#[derive(Debug, Default, Clone)]
pub struct Exposition {
    out: String,
}

impl Exposition {
    pub fn new() -> Exposition {
        Exposition::default()
    }

    /// The `# HELP` and `# TYPE` lines that open a family; `kind` is `counter` or `gauge`.
    pub fn header(&mut self, name: &str, kind: &str, help: &str) {
        // Writing to a String cannot fail.
        let _ = writeln!(self.out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }

    /// One sample line. Labels are written in the order given, values escaped; no labels
    /// writes the bare name.
    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl Display) {
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                self.out.push_str(k);
                self.out.push_str("=\"");
                escape_label_value(&mut self.out, v);
                self.out.push('"');
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {value}");
    }

    /// A header and its samples.
    pub fn family<'l, V: Display>(&mut self, name: &str, kind: &str, help: &str, samples: impl IntoIterator<Item = (&'l [(&'l str, &'l str)], V)>) {
        self.header(name, kind, help);
        for (labels, value) in samples {
            self.sample(name, labels, value);
        }
    }

    /// The text written so far.
    pub fn finish(self) -> String {
        self.out
    }
}

/// Label values escape backslash, double quote and newline (the text format's rules).
fn escape_label_value(out: &mut String, v: &str) {
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// An error and its sources on one line, joined by `": "`. A source whose text the line already
/// holds is left out: thiserror messages and many libraries repeat their source's text.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut line = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        source = cause.source();
    }
    line
}

/// The same for a chain already split into messages (anyhow's `chain()`), outermost first.
pub fn join_chain<S: Display>(messages: impl IntoIterator<Item = S>) -> String {
    let mut line = String::new();
    for (i, m) in messages.into_iter().enumerate() {
        let text = m.to_string();
        if i > 0 && line.contains(&text) {
            continue;
        }
        if i > 0 {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Outer(std::io::Error, &'static str);

    impl Display for Outer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.1)
        }
    }

    impl std::error::Error for Outer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn chain_joins_sources_once() {
        assert_eq!(error_chain(&Outer(std::io::Error::other("denied"), "opening x")), "opening x: denied");
        assert_eq!(error_chain(&Outer(std::io::Error::other("denied"), "opening x: denied")), "opening x: denied");
        assert_eq!(join_chain(["a", "b", "a: b", "c"]), "a: b: c");
    }

    #[test]
    fn labels_are_escaped_and_values_printed_as_given() {
        let mut out = Exposition::new();
        out.header("m", "gauge", "help text");
        out.sample("m", &[("e", "a\"b\\c\nd"), ("r", "ok")], 0.25);
        out.sample("m", &[], 3u64);
        assert_eq!(out.finish(), "# HELP m help text\n# TYPE m gauge\nm{e=\"a\\\"b\\\\c\\nd\",r=\"ok\"} 0.25\nm 3\n");
    }
}
