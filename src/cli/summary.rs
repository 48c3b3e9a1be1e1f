//! What the commands that read input into the store print: the ingest summary (text or JSON),
//! the rejected input on stderr, and the lines on what reached the store, which `ingest`,
//! `simulate --store`, `backfill` and `demo` share.

use clap::ValueEnum;
use gpuledger_collector::Diagnostics;
use gpuledger_collector::ingest::IngestSummary;
use gpuledger_collector::store::StoreStats;
use serde_json::json;

/// How a command's summary is written on stdout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SummaryFormat {
    Text,
    Json,
}

/// An ingest's problems on stderr, then its summary on stdout in `format`. Shared by the
/// commands that end in an ingest summary (`ingest`, `simulate --store`).
pub fn print_summary(s: &IngestSummary, format: SummaryFormat, verbose: bool) -> anyhow::Result<()> {
    print_problems(&s.diagnostics, verbose, "input problems");
    match format {
        SummaryFormat::Text => out!("{}", summary_text(s))?,
        SummaryFormat::Json => outln!("{}", serde_json::to_string_pretty(&summary_json(s))?)?,
    }
    Ok(())
}

/// Warnings, then the first 20 rejected items (all with `verbose`) on stderr; `what` names the
/// rest in the "... and N more" line. Shared by the commands that read input into the store.
pub fn print_problems(diagnostics: &Diagnostics, verbose: bool, what: &str) {
    const SHOWN: usize = 20;
    for w in &diagnostics.warnings {
        eprintln!("gpuledger: warning: {w}");
    }
    let errors = &diagnostics.errors;
    for e in errors.iter().take(if verbose { usize::MAX } else { SHOWN }) {
        eprintln!("gpuledger: bad input: {e}");
    }
    if !verbose && errors.len() > SHOWN {
        eprintln!("gpuledger: ... and {} more {what} (-v shows all)", errors.len() - SHOWN);
    }
}

/// The summary fields on what reached the store and what was rejected, for `--format json`
/// (ingest and backfill give them the same names).
pub fn store_json(store: &StoreStats, diagnostics: &Diagnostics) -> serde_json::Map<String, serde_json::Value> {
    let fields = json!({
        "rows_written": store.rows_written,
        "duplicates_skipped": store.duplicates,
        "files_written": store.files_written,
        "commits": store.commits,
        "commit_retries": store.commit_retries,
        "bytes_written": store.bytes_written,
        "rejected": diagnostics.errors.len(),
        "rejected_by_reason": diagnostics.error_counts(),
        "errors": diagnostics.errors.iter().map(|e| e.to_string()).collect::<Vec<_>>(),
        "warnings": diagnostics.warnings.iter().map(|e| e.to_string()).collect::<Vec<_>>(),
    });
    match fields {
        serde_json::Value::Object(m) => m,
        _ => serde_json::Map::new(),
    }
}

/// The summary lines on what reached the store and what was rejected. `width` is that of the
/// label column (`rows`, `store`) in the caller's summary.
pub fn push_store_lines(out: &mut String, store: &StoreStats, diagnostics: &Diagnostics, width: usize) {
    for (table, n) in &store.rows_written {
        out.push_str(&format!("  {:<width$}{table:<20} {n} written\n", "rows"));
    }
    for (table, n) in &store.duplicates {
        out.push_str(&format!("  {:<width$}{table:<20} {n} already stored, skipped\n", "rows"));
    }
    out.push_str(&format!("  {:<width$}{} files in {} commits, {:.1} MiB\n", "store", store.files_written, store.commits, store.bytes_written as f64 / 1048576.0));
    let counts = diagnostics.error_counts();
    if counts.is_empty() {
        out.push_str("  rejected: none\n");
    } else {
        let parts: Vec<String> = counts.iter().map(|(k, n)| format!("{k} {n}")).collect();
        out.push_str(&format!("  rejected: {} ({})\n", diagnostics.errors.len(), parts.join(", ")));
    }
}

/// The run summary for people.
pub fn summary_text(s: &IngestSummary) -> String {
    let mut out = String::new();
    let files: u64 = s.files.values().sum();
    let secs = s.elapsed.as_secs_f64().max(1e-9);
    out.push_str(&format!(
        "ingested {files} files ({:.1} MiB) in {:.2}s: {} samples ({:.0}/s)\n",
        s.bytes_read as f64 / 1048576.0,
        secs,
        s.samples,
        s.samples as f64 / secs
    ));
    for (f, n) in &s.files {
        out.push_str(&format!("  files  {:<20} {n}\n", f.name()));
    }
    for (why, n) in &s.skipped_files {
        out.push_str(&format!("  files  skipped: {why:<11} {n}\n"));
    }
    if s.blank_samples > 0 {
        out.push_str(&format!("  samples with DCGM blank value (stored as null): {}\n", s.blank_samples));
    }
    if !s.objects.is_empty() {
        let kinds: Vec<String> = s.objects.iter().map(|(k, n)| format!("{k} {n}")).collect();
        out.push_str(&format!("  objects {}\n", kinds.join(", ")));
    }
    push_store_lines(&mut out, &s.store, &s.diagnostics, 7);
    for (why, n) in &s.diagnostics.skipped {
        out.push_str(&format!("  skipped: {why} {n}\n"));
    }
    if let Some(peak) = s.peak_rss_bytes {
        out.push_str(&format!("  memory peak {:.0} MiB\n", peak as f64 / 1048576.0));
    }
    out
}

/// The run summary for programs (`--format json`).
pub fn summary_json(s: &IngestSummary) -> serde_json::Value {
    let files: serde_json::Map<String, serde_json::Value> = s.files.iter().map(|(f, n)| (f.name().to_string(), json!(n))).collect();
    let mut m = store_json(&s.store, &s.diagnostics);
    m.extend([
        ("files".to_string(), json!(files)),
        ("skipped_files".to_string(), json!(s.skipped_files)),
        ("bytes_read".to_string(), json!(s.bytes_read)),
        ("samples".to_string(), json!(s.samples)),
        ("blank_samples".to_string(), json!(s.blank_samples)),
        ("objects".to_string(), json!(s.objects)),
        ("skipped".to_string(), json!(s.diagnostics.skipped)),
        ("elapsed_seconds".to_string(), json!(s.elapsed.as_secs_f64())),
        ("peak_rss_bytes".to_string(), json!(s.peak_rss_bytes)),
    ]);
    serde_json::Value::Object(m)
}
