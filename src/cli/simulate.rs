//! `gpuledger simulate`: writes a realistic capture of a simulated cluster, plus its truth; or,
//! with `--store`, the store an ingest of that capture would give, without the text on disk.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, bail};
use chrono::{DateTime, Utc};
use gpuledger_collector::feed::{Feed, TextFeed};
use gpuledger_collector::ingest::{self, IngestOptions, IngestSummary};
use gpuledger_collector::store::{Store, StoreOptions};
use gpuledger_simulator::{DcgmSink, SimConfig, SimError, SimOptions, SimSummary, TRUTH_FILE, Window, simulate_to_with, simulate_window_with};
use gpuledger_store::StoreLocation;

use super::summary::{self, SummaryFormat};
use super::progress::{ProgressMode, Reporter};

/// Simulate a GPU cluster (node pools of several GPU models, MIG, teams, Kueue queueing,
/// preemptions, failures, idle stretches) and write its capture in the standard formats:
/// DCGM exporter text under dcgm/, kubectl JSON/YAML and watch streams under kubernetes/, and
/// expected.json with the ledger figures computed from the simulation itself.
///
/// With --store, the DCGM text is handed to the ingest's own parser in memory instead of
/// written: the store gets the rows `gpuledger ingest` of the capture would give it, and a
/// month of a large fleet (about 5 KB of text per GPU and scrape) needs no disk for its text.
/// The Kubernetes files still go through disk (--out, else a temporary directory removed
/// afterwards) and are ingested from there; expected.json goes to --out, else the store's root.
///
/// With --emit-from and --emit-until, only what was observed in that window is written, so a
/// store can be grown the way a live collector grows it: the same simulation run twice on
/// either side of a cut fills one store with everything (see the last example).
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  gpuledger simulate --out ./capture --gpus 64 --days 3 --seed 7\n  gpuledger simulate --store ./store --gpus 1024 --days 30 --start 2026-11-01T00:00:00Z\n  gpuledger simulate --store ./store --days 3 --emit-until 2026-11-01T00:00:00Z\n  gpuledger simulate --store ./store --days 3 --emit-from 2026-11-01T00:00:00Z")]
pub struct Args {
    /// Output directory (created): the capture; with --store, only its Kubernetes files and
    /// expected.json.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Write the store directly (a directory or an object-store URL; created if missing).
    #[arg(long, value_parser = super::store_location)]
    pub store: Option<StoreLocation>,
    /// GPUs in the cluster (rounded to whole nodes).
    #[arg(long, default_value_t = 64)]
    pub gpus: u32,
    /// Days of history.
    #[arg(long, default_value_t = 3)]
    pub days: u32,
    /// Random seed: the same seed writes the same bytes.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// DCGM scrape interval, e.g. 30s, 1m.
    #[arg(long, default_value = "30s", value_parser = parse_interval)]
    pub scrape_interval: u32,
    /// Start of the simulated history (RFC 3339, UTC).
    #[arg(long, default_value = "2026-10-30T00:00:00Z")]
    pub start: DateTime<Utc>,
    /// Write only what was observed at or after TIME (RFC 3339): one window of the capture.
    ///
    /// DCGM scrapes, watch events and Events each go by their own time; a file with nothing
    /// in the window is not written. The cluster is simulated whole whatever the window, so
    /// runs with the same --seed, --gpus, --days, --start and --scrape-interval write the very
    /// lines the whole capture has: --emit-until CUT, then --emit-from CUT into the same
    /// --store, gives the same store as one whole run. Snapshots (namespaces.yaml, nodes.json,
    /// kueue.yaml, as of the capture's start) are written whole whatever the window (a store
    /// keeps one copy), and expected.json is the truth of the whole simulated period.
    #[arg(long, value_name = "TIME")]
    pub emit_from: Option<DateTime<Utc>>,
    /// Write only what was observed before TIME (RFC 3339); see --emit-from.
    ///
    /// With --emit-from, the window is [FROM, UNTIL): a cut given to both runs of a split
    /// writes each observation once.
    #[arg(long, value_name = "TIME")]
    pub emit_until: Option<DateTime<Utc>>,
    /// Whether the DCGM series of GPUs handed out by DRA claims carry the pod labels beside the
    /// `dra_*` ones, as dcgm-exporter writes them (true), or only the `dra_*` labels (false: a
    /// capture whose pod labels were relabelled away; the ledger finds the pods through the
    /// claims, and the figures are the same).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub dra_pod_labels: bool,
    /// With --store: progress display on stderr while the Kubernetes files are ingested.
    #[arg(long, value_enum, default_value = "auto")]
    pub progress: ProgressMode,
    /// With --store: the ingest summary's format on stdout.
    #[arg(long, value_enum, default_value = "text")]
    pub format: SummaryFormat,
}

/// `30s`, `1m`, `90` (seconds) -> seconds.
fn parse_interval(s: &str) -> Result<u32, String> {
    let (num, mult) = if let Some(n) = s.strip_suffix('s') {
        (n, 1)
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 60)
    } else {
        (s, 1)
    };
    match num.parse::<u32>() {
        Ok(n) if n > 0 => Ok(n * mult),
        _ => Err(format!("{s:?} is not an interval like 30s or 1m")),
    }
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if let Some(store) = &args.store {
        let (s, summary) = simulate_into_store(&args, store)?;
        eprintln!(
            "simulated {} GPUs for {} days into {store}{}: {} samples, {} GPU rows, {} object versions ({:.1} MiB of text, none on disk)",
            args.gpus,
            args.days,
            window_note(&args),
            s.samples,
            s.gpu_rows,
            s.objects,
            s.bytes as f64 / 1048576.0
        );
        summary::print_summary(&summary, args.format, false)?;
        return Ok(ExitCode::SUCCESS);
    }
    if args.out.is_none() {
        bail!("where to? Give --out DIR for a capture directory, or --store STORE to write the store directly");
    }
    let s = simulate_with(&args)?;
    eprintln!(
        "simulated {} GPUs for {} days into {}{}: {} files, {} samples, {} GPU rows, {} object versions, {:.1} MiB",
        args.gpus,
        args.days,
        args.out.as_deref().unwrap_or(Path::new("")).display(),
        window_note(&args),
        s.files,
        s.samples,
        s.gpu_rows,
        s.objects,
        s.bytes as f64 / 1048576.0
    );
    Ok(ExitCode::SUCCESS)
}

fn config(args: &Args) -> anyhow::Result<(SimConfig, Window)> {
    if args.gpus == 0 || args.days == 0 {
        bail!("--gpus and --days must be at least 1");
    }
    // Checked here as well as by Window::new, so that the message names the flags.
    if let (Some(from), Some(until)) = (args.emit_from, args.emit_until)
        && from >= until
    {
        bail!("--emit-from {} is not before --emit-until {}: nothing would be written", rfc3339(from), rfc3339(until));
    }
    let window = Window::new(args.emit_from, args.emit_until)?;
    Ok((SimConfig { gpus: args.gpus, days: args.days, seed: args.seed, scrape_interval_s: args.scrape_interval, start: args.start }, window))
}

fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
}

/// ` (written: from T until U)` for the summary line of a run with a window, else nothing.
fn window_note(args: &Args) -> String {
    match (args.emit_from, args.emit_until) {
        (None, None) => String::new(),
        (from, until) => {
            let from = from.map(|t| format!(" from {}", rfc3339(t))).unwrap_or_default();
            let until = until.map(|t| format!(" until {}", rfc3339(t))).unwrap_or_default();
            format!(" (written:{from}{until})")
        }
    }
}

/// Prints "simulated N%" every 10%.
fn percent_lines() -> impl FnMut(f64) {
    let mut last = 0u32;
    move |f: f64| {
        let pct = (f * 100.0) as u32;
        if pct >= last + 10 {
            last = pct - pct % 10;
            eprintln!("gpuledger: simulated {last}%");
        }
    }
}

/// Writes the capture under `--out`.
pub fn simulate_with(args: &Args) -> anyhow::Result<SimSummary> {
    let (cfg, window) = config(args)?;
    let Some(out) = &args.out else { bail!("--out is needed to write a capture") };
    let opts = SimOptions { dra_pod_labels: args.dra_pod_labels };
    simulate_window_with(&cfg, &opts, &window, out, &mut percent_lines()).with_context(|| format!("simulating into {}", out.display()))
}

/// Hands a node's DCGM text to the collector's parser instead of a file.
struct StoreSink(TextFeed);

impl DcgmSink for StoreSink {
    fn write(&mut self, rel: &Path, text: &[u8]) -> Result<(), SimError> {
        // The simulator writes a scrape at a time: whole rows, as the feed needs.
        self.0.write(rel, text).map_err(|e| SimError::Sink(e.to_string()))
    }

    fn close(&mut self, rel: &Path) -> Result<(), SimError> {
        self.0.close(rel);
        Ok(())
    }

    fn finish(&mut self) -> Result<(), SimError> {
        self.0.finish().map_err(|e| SimError::Sink(e.to_string()))
    }
}

/// `--store`: the DCGM text straight into the store, then the Kubernetes files through disk.
pub fn simulate_into_store(args: &Args, store: &StoreLocation) -> anyhow::Result<(SimSummary, IngestSummary)> {
    let started = Instant::now();
    let (cfg, window) = config(args)?;
    // The writer's duplicate check holds key sets per table and day: room for about three days
    // of this cluster's rows (a GPU row and about three long-form rows per GPU and scrape), so
    // that nodes a day apart never push a day out and back in.
    let per_day = u64::from(args.gpus) * (86_400 / u64::from(args.scrape_interval.max(1))).max(1) * 4;
    let day_keys_held = usize::try_from(per_day * 3).unwrap_or(usize::MAX).max(StoreOptions::default().day_keys_held);
    let options = StoreOptions { day_keys_held, ..StoreOptions::default() };
    let writer = Store::open(store, options.clone()).with_context(|| format!("opening the store {store}"))?;
    let feed = Feed::new(writer);
    let (objects_dir, _temporary) = match &args.out {
        Some(dir) => (dir.clone(), None),
        None => {
            let t = tempfile::Builder::new().prefix("gpuledger-simulate-").tempdir().context("creating a temporary directory for the Kubernetes files")?;
            (t.path().to_path_buf(), Some(t))
        }
    };
    let sim = {
        let feed = Arc::clone(&feed);
        let sink = move || -> Box<dyn DcgmSink> { Box::new(StoreSink(feed.text())) };
        let opts = SimOptions { dra_pod_labels: args.dra_pod_labels };
        simulate_to_with(&cfg, &opts, &window, &objects_dir, &sink, &mut percent_lines()).with_context(|| format!("simulating into {store}"))?
    };
    let (mut writer, mut summary) = feed.into_parts()?;
    // Only kubernetes/ is read: the truth beside it needs no skip rule.
    let truth = TRUTH_FILE;
    let ingest_options = IngestOptions { store: options, ..IngestOptions::default() };
    let reporter = Reporter::new(args.progress);
    let objects = ingest::ingest_into(&[objects_dir.join("kubernetes")], &mut writer, &ingest_options, &reporter)
        .with_context(|| format!("ingesting the simulated Kubernetes objects into {store}"))?;
    summary.merge(objects);
    if args.out.is_none() {
        let path = objects_dir.join(truth);
        let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
        writer.put_small(truth, &bytes).with_context(|| format!("writing {truth} into {store}"))?;
    }
    summary.store = writer.finish().with_context(|| format!("writing {store}"))?;
    gpuledger_collector::ingest::Progress::finish(&reporter);
    summary.elapsed = started.elapsed();
    summary.peak_rss_bytes = ingest::peak_rss_bytes();
    Ok((sim, summary))
}

#[cfg(test)]
mod tests {
    use super::parse_interval;

    #[test]
    fn intervals() {
        assert_eq!(parse_interval("30s"), Ok(30));
        assert_eq!(parse_interval("2m"), Ok(120));
        assert_eq!(parse_interval("15"), Ok(15));
        assert!(parse_interval("0s").is_err());
        assert!(parse_interval("fast").unwrap_err().contains("\"fast\""));
    }
}
