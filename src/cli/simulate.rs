//! `gpuledger simulate`: writes a realistic capture of a simulated cluster, plus its truth.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use chrono::{DateTime, Utc};
use gpuledger_simulator::{SimConfig, SimSummary, simulate};

/// Simulate a GPU cluster (node pools of several GPU models, MIG, teams, Kueue queueing,
/// preemptions, failures, idle stretches) and write its capture in the standard formats:
/// DCGM exporter text under dcgm/, kubectl JSON/YAML and watch streams under kubernetes/, and
/// expected.json with the ledger figures computed from the simulation itself.
#[derive(Debug, clap::Args)]
#[command(after_help = "Example:\n  gpuledger simulate --out ./capture --gpus 64 --days 3 --seed 7")]
pub struct Args {
    /// Output directory (created).
    #[arg(long)]
    pub out: PathBuf,
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
    let s = simulate_with(&args)?;
    eprintln!(
        "simulated {} GPUs for {} days into {}: {} files, {} samples, {} GPU rows, {} object versions, {:.1} MiB",
        args.gpus,
        args.days,
        args.out.display(),
        s.files,
        s.samples,
        s.gpu_rows,
        s.objects,
        s.bytes as f64 / 1048576.0
    );
    Ok(ExitCode::SUCCESS)
}

pub fn simulate_with(args: &Args) -> anyhow::Result<SimSummary> {
    if args.gpus == 0 || args.days == 0 {
        bail!("--gpus and --days must be at least 1");
    }
    let cfg = SimConfig { gpus: args.gpus, days: args.days, seed: args.seed, scrape_interval_s: args.scrape_interval, start: args.start };
    let mut last = 0u32;
    let mut progress = |f: f64| {
        let pct = (f * 100.0) as u32;
        if pct >= last + 10 {
            last = pct - pct % 10;
            eprintln!("gpuledger: simulated {last}%");
        }
    };
    simulate(&cfg, &args.out, &mut progress).with_context(|| format!("simulating into {}", args.out.display()))
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
