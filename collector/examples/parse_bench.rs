//! Parser benchmark, run by `bench/ingest.sh`: our exposition-text reader against the
//! prometheus-parse crate on the same bytes, single-threaded, side by side in one run; and,
//! optionally, the first N samples rewritten as OpenMetrics for `promtool tsdb
//! create-blocks-from openmetrics`.
//!
//! Usage: parse_bench <capture-dir> [--openmetrics <file> <max-samples>]

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use gpuledger_collector::Diagnostics;
use gpuledger_collector::sources::dcgm_text::{DcgmText, ScrapeTime};
use gpuledger_collector::tables::samples::SampleTables;

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else { return };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            files(&p, out);
        } else if p.extension().is_some_and(|x| x == "prom") {
            out.push(p);
        }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let dir = PathBuf::from(args.get(1).ok_or("usage: parse_bench <capture-dir> [--openmetrics FILE MAX]")?);
    let mut paths = Vec::new();
    files(&dir.join("dcgm"), &mut paths);
    paths.sort();
    let texts: Vec<Vec<u8>> = paths.iter().map(std::fs::read).collect::<Result<_, _>>()?;
    let bytes: usize = texts.iter().map(Vec::len).sum();

    // Ours: parse into rows, as an ingest worker does (one source, its label sets remembered;
    // without Arrow and Parquet).
    let t = Instant::now();
    let mut ours = 0u64;
    let mut source = DcgmText::file();
    for (p, text) in paths.iter().zip(&texts) {
        let mut tables = SampleTables::new();
        let mut d = Diagnostics::new();
        let records = source.parse_text(p, text, ScrapeTime::FileName(0), &mut d);
        ours += source.load_text(records, &mut tables);
    }
    let ours_s = t.elapsed().as_secs_f64();

    // prometheus-parse: its API takes owned lines.
    let t = Instant::now();
    let mut theirs = 0u64;
    for text in &texts {
        let lines = text.lines();
        let scrape = prometheus_parse::Scrape::parse(lines)?;
        theirs += scrape.samples.len() as u64;
    }
    let theirs_s = t.elapsed().as_secs_f64();

    println!("{{\"files\":{},\"bytes\":{bytes},\"ours_samples\":{ours},\"ours_seconds\":{ours_s:.3},\"ours_samples_per_s\":{:.0},\"prometheus_parse_samples\":{theirs},\"prometheus_parse_seconds\":{theirs_s:.3},\"prometheus_parse_samples_per_s\":{:.0},\"speedup\":{:.1}}}",
        paths.len(), ours as f64 / ours_s, theirs as f64 / theirs_s, (ours as f64 / ours_s) / (theirs as f64 / theirs_s));

    if let (Some("--openmetrics"), Some(out), Some(max)) = (args.get(2).map(String::as_str), args.get(3), args.get(4)) {
        write_openmetrics(&texts, Path::new(out), max.parse()?)?;
    }
    Ok(())
}

/// OpenMetrics for promtool: gauge TYPE lines first per family, seconds timestamps, `# EOF`.
/// Samples are taken file by file (each a node-day in time order) until `max` are written.
fn write_openmetrics(texts: &[Vec<u8>], out: &Path, max: u64) -> Result<(), Box<dyn std::error::Error>> {
    use std::collections::BTreeMap;
    // family -> series -> points: OpenMetrics wants each series' points together, in time order.
    let mut families: BTreeMap<String, BTreeMap<String, Vec<String>>> = BTreeMap::new();
    let mut n = 0u64;
    'outer: for text in texts {
        for line in text.split(|c| *c == b'\n') {
            if line.is_empty() || line[0] == b'#' {
                continue;
            }
            let line = std::str::from_utf8(line)?;
            let Some((series, rest)) = line.rsplit_once('}').map(|(a, b)| (format!("{a}}}"), b.trim())) else { continue };
            let mut parts = rest.split_whitespace();
            let (Some(v), Some(ts)) = (parts.next(), parts.next()) else { continue };
            let ts: i64 = ts.parse()?;
            let name = series.split('{').next().unwrap_or_default().to_string();
            families.entry(name).or_default().entry(series.clone()).or_default().push(format!("{series} {v} {}.{:03}", ts / 1000, ts % 1000));
            n += 1;
            if n >= max {
                break 'outer;
            }
        }
    }
    let mut w = std::io::BufWriter::new(std::fs::File::create(out)?);
    for (name, series) in &families {
        writeln!(w, "# TYPE {name} gauge")?;
        for l in series.values().flatten() {
            writeln!(w, "{l}")?;
        }
    }
    writeln!(w, "# EOF")?;
    eprintln!("wrote {n} samples as OpenMetrics to {}", out.display());
    Ok(())
}
