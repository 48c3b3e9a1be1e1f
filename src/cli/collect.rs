//! `gpuledger collect`: the live collector (Kubernetes watches + DCGM scrapes -> WAL -> store).

use gpuledger_store::StoreLocation;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use gpuledger_collector::live::{self, CollectorConfig};

/// Collect from a running cluster until SIGTERM or Ctrl-C.
///
/// Watches Pods, Nodes, Namespaces, Jobs, Events and Kueue Workloads, LocalQueues, ClusterQueues
/// and ResourceFlavors (every version, with read-only access), scrapes every DCGM exporter (found
/// through the API server by label selector, or listed in the config), and appends all of it to a
/// write-ahead log (fsync per batch) that is flushed into the store's Parquet files every
/// flush_interval. After a crash, a restart replays the WAL into the store and resumes the
/// watches where they were: nothing is lost or stored twice. SIGTERM flushes and exits 0.
///
/// Closed days (before today, UTC) are compacted in the background every compact_interval (1h;
/// "off" disables it), as `gpuledger compact` does; with [store] retention set, samples of the
/// months past it are removed then too, as `gpuledger store expire` does.
///
/// With [[units.counters]] configured, the pods that expose those counters (annotated
/// prometheus.io/scrape: "true", or matched by [collector] unit_selector) are scraped too, and
/// only those counters are kept, labelled with the pod's namespace and name.
///
/// Kubernetes access comes from $KUBECONFIG, ~/.kube/config, or the pod's service account.
/// Settings are the [collector] section of the config file (see examples/gpuledger.toml);
/// /metrics, /healthz and /readyz are served on its `listen` address (127.0.0.1:9464).
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  gpuledger collect --config gpuledger.toml --store ./store\n  KUBECONFIG=~/.kube/prod gpuledger collect --config gpuledger.toml --store /data/store --listen 0.0.0.0:9464")]
pub struct Args {
    /// Configuration file; its [collector] section is read (absent: every default).
    #[arg(long, env = "GPULEDGER_CONFIG")]
    pub config: Option<PathBuf>,
    /// Store: a directory, or an object-store URL (s3://bucket/prefix, gs://..., az://...); created if missing.
    #[arg(long, env = "GPULEDGER_STORE", value_parser = super::store_location)]
    pub store: StoreLocation,
    /// Overrides [collector] listen.
    #[arg(long)]
    pub listen: Option<std::net::SocketAddr>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let (mut cfg, retention) = match &args.config {
        Some(p) => {
            let file = super::config::load(p, super::config::Uses { ledger: false, serve: false })?;
            let mut collector = file.collector;
            // The pods scraped for units keep only the counters the ledger counts.
            collector.unit_metrics = file.ledger.iter().flat_map(|l| l.unit_counters.iter().map(|c| c.metric.clone())).collect();
            (collector, file.store.retention)
        }
        None => (CollectorConfig::default(), None),
    };
    if let Some(l) = args.listen {
        cfg.listen = l;
    }
    let rt = super::runtime()?;
    let compactor = cfg.compact_interval.map(|every| rt.spawn(compact_closed_days(args.store.clone(), every, retention)));
    let summary = rt.block_on(live::run(cfg, &args.store, super::steps::shutdown_signal())).with_context(|| format!("collecting into {}", args.store));
    if let Some(c) = compactor {
        c.abort();
    }
    let summary = summary?;
    let rows: u64 = summary.writer.rows_written.values().sum();
    let per_table: Vec<String> = summary.writer.rows_written.iter().map(|(t, n)| format!("{t} {n}")).collect();
    tracing::info!(seconds = summary.elapsed.as_secs_f64(), rows, tables = %per_table.join(", "), "stopped: rows written to the store");
    Ok(ExitCode::SUCCESS)
}

/// Compacts the closed days (before today, UTC) that the collector's flushes left in many files,
/// now and then every `every`. A day that gets late rows after its compaction is compacted
/// again on the next pass. With a `retention`, samples of the months past it are removed
/// first (once the ledger has accounted them). Failures are logged, not fatal: collecting
/// matters more.
async fn compact_closed_days(store: StoreLocation, every: std::time::Duration, retention: Option<std::time::Duration>) {
    use gpuledger_engine::compact;
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let today = chrono::Utc::now().date_naive();
        if let Some(keep) = retention {
            let before = gpuledger_ledger::retention::horizon(today, keep);
            match gpuledger_ledger::retention::expire(&store, before, false).await {
                Ok(e) if e.tables.iter().any(|t| t.files > 0) => {
                    tracing::info!(before = %before, months = %e.months.join(", "), files = e.tables.iter().map(|t| t.files).sum::<usize>(), "retention: removed the samples of months past it")
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(before = %before, error = %e, "retention: samples not removed; the next pass tries again"),
            }
        }
        let days = match compact::plan(&store, today, None).await {
            Ok(d) => d,
            Err(e) => {
                tracing::warn!(error = %e, "compaction: reading the tables' logs failed");
                continue;
            }
        };
        let (mut before, mut after) = (0, 0);
        for day in &days {
            match compact::compact_day(&store, day, compact::DEFAULT_TARGET_SIZE).await {
                Ok(d) => (before, after) = (before + d.files_before, after + d.files_after),
                Err(e) => tracing::warn!(table = day.table.name, date = %day.date, error = %e, "compaction of a day failed; the next pass tries again"),
            }
        }
        if !days.is_empty() {
            tracing::info!(days = days.len(), files_before = before, files_after = after, "compacted closed days");
        }
    }
}

