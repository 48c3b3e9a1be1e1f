//! Live collection from a running cluster: Kubernetes and Kueue watches, DCGM exporter scrapes,
//! a write-ahead log, periodic flushes into the store, and the collector's own `/metrics`.
//!
//! ```text
//!  watch (one task per resource) ─┐
//!  scrape (one task per endpoint) ┼─> channel ─> writer thread: WAL append + fsync ─> store
//!  discovery (exporter, unit pods)┘                              (every flush_interval)
//!  HTTP: /metrics /healthz /readyz
//! ```
//! Rows are built by the same readers and table builders as offline ingest
//! ([`crate::sources`], [`crate::tables`]), so a live store and an ingested capture of the same
//! facts hold the same rows.

pub mod config;
mod http;
pub mod metrics;
pub mod resources;
pub mod scrape;
pub mod units;
pub mod wal;
pub mod watch;
pub mod writer;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use gpuledger_store::StoreLocation;
use std::sync::Arc;
use std::sync::atomic::AtomicI64;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};

pub use config::CollectorConfig;
use gpuledger_store::Bug;
use metrics::Metrics;
use writer::{Msg, Writer, WriterSummary};

/// Why the collector could not run.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    #[error("cannot listen on {addr}: {source} (set [collector] listen to another address)")]
    Listen {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Store(#[from] crate::error::Error),
    #[error("no Kubernetes API access: {0} (run in a pod with a service account, set KUBECONFIG, or set [collector] kubernetes = false to only scrape listed endpoints)")]
    Kube(String),
    #[error(transparent)]
    Internal(#[from] gpuledger_store::Bug),
}

impl LiveError {
    fn internal(what: impl Into<String>) -> LiveError {
        LiveError::Internal(Bug::new(what))
    }
}

/// What a collector run did.
#[derive(Debug, Default, Clone)]
pub struct LiveSummary {
    pub writer: WriterSummary,
    pub elapsed: Duration,
}

/// Milliseconds since the epoch, now.
pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// An error and its sources on one line, each source's text once: the workspace's one
/// formatter, kept at this path for the collector's modules that call it.
pub use gpuledger_telemetry::error_chain;

/// Collects into the store at `store_root` until `shutdown` resolves, then flushes everything
/// received into the store and returns.
pub async fn run(cfg: CollectorConfig, store: &StoreLocation, shutdown: impl std::future::Future<Output = ()>) -> Result<LiveSummary, LiveError> {
    let started = Instant::now();
    let metrics = Arc::new(Metrics::default());
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);

    // Listen first: a taken port is a config error worth failing on before any work.
    let listener = tokio::net::TcpListener::bind(cfg.listen).await.map_err(|source| LiveError::Listen { addr: cfg.listen, source })?;
    let local = listener.local_addr().map_err(|source| LiveError::Listen { addr: cfg.listen, source })?;
    tracing::info!(address = %local, "serving /metrics, /healthz and /readyz on http://{local}");
    let server = tokio::spawn(http::serve(listener, Arc::clone(&metrics), stop_rx.clone()));

    // Kubernetes access is checked before the store is touched: a wrong kubeconfig fails fast.
    let kube_client = match cfg.kubernetes {
        true => Some(kube::Client::try_default().await.map_err(|e| LiveError::Kube(e.to_string()))?),
        false => None,
    };

    // Open the store and replay what a crash left in the WAL, before anything new arrives.
    let wal_dir = cfg.wal_path(store);
    let location = store.clone();
    let m = Arc::clone(&metrics);
    let (flush_interval, flush_rows, kubernetes) = (cfg.flush_interval, cfg.flush_rows, cfg.kubernetes);
    let (writer, positions, mut heads) = tokio::task::spawn_blocking(move || -> Result<_, LiveError> {
        let mut store = crate::store::Store::open(&location, crate::store::StoreOptions::default())?;
        let heads = if kubernetes { store.object_heads()? } else { Default::default() };
        let (writer, positions) = Writer::open(store, &wal_dir, m, flush_interval, flush_rows)?;
        Ok((writer, positions, heads))
    })
    .await
    .map_err(|e| LiveError::internal(e.to_string()))??;
    tracing::info!(store = %writer.store_root().display(), wal = %cfg.wal_path(store).display(), "store open");

    let (tx, rx) = mpsc::channel::<Msg>(1024);
    let (done_tx, mut done_rx) = oneshot::channel();
    let writer_thread = std::thread::Builder::new()
        .name("gpuledger-writer".into())
        .spawn(move || {
            let r = writer.run(rx);
            let _ = done_tx.send(());
            r
        })
        .map_err(|e| LiveError::internal(format!("cannot start the writer thread: {e}")))?;

    let mut tasks = Vec::new();
    // Wakes the writer so flushes happen on time even when nothing arrives.
    {
        let tx = tx.clone();
        let mut stop = stop_rx.clone();
        tasks.push(tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(250));
            loop {
                tokio::select! {
                    _ = tick.tick() => { let _ = tx.try_send(Msg::Tick); }
                    _ = stop.changed() => break,
                }
            }
        }));
    }

    let http = reqwest::Client::builder().user_agent(concat!("gpuledger/", env!("CARGO_PKG_VERSION"))).build().map_err(|e| LiveError::internal(e.to_string()))?;
    let unit_metrics = Arc::new(cfg.unit_metrics.iter().cloned().collect());
    let scrape_ctx = scrape::ScrapeContext { http, interval: cfg.scrape_interval, timeout: cfg.scrape_timeout, tx: tx.clone(), metrics: Arc::clone(&metrics), stop: stop_rx.clone(), unit_metrics };
    let mut scrapers = scrape::Scrapers::new(scrape_ctx.clone(), &cfg.dcgm_endpoints);
    let mut unit_scrapers = scrape::Scrapers::unit_pods(scrape_ctx);

    let mut discovery = None;
    if let Some(client) = kube_client {
        let ctx = watch::WatchContext { client: client.clone(), tx: tx.clone(), metrics: Arc::clone(&metrics), seq: Arc::new(AtomicI64::new(watch::first_seq())), stop: stop_rx.clone() };
        for res in resources::WATCHED.iter().filter(|r| r.fallback_of.is_none()) {
            let fallback = resources::WATCHED.iter().find(|f| f.fallback_of == Some(res.id().as_str()));
            let object_heads = heads.remove(res.kind).unwrap_or_default();
            let start = positions.get(&res.id()).cloned();
            if let Some(rv) = &start {
                tracing::info!(resource = %res.id(), resource_version = %rv, "resuming the watch");
            }
            let heads: watch::Heads = object_heads.into_iter().map(|(k, h)| (k, watch::Head { resource_version: h.resource_version, deleted: h.deleted })).collect();
            let w = watch::ResourceWatch::new(res, fallback, ctx.clone(), start, heads);
            tasks.push(tokio::spawn(w.run()));
        }
        if cfg.discovers() || cfg.discovers_unit_pods() {
            discovery = Some(Discovery {
                client,
                exporters: cfg.discovers().then(|| (cfg.dcgm_selector.clone(), cfg.dcgm_port)),
                unit_pods: cfg.discovers_unit_pods().then(|| (cfg.unit_selector.clone(), cfg.unit_port)),
                every: cfg.discovery_interval,
            });
        }
    }
    drop(tx);

    // Ready once the WAL is replayed (done above) and every watch has listed.
    {
        let metrics = Arc::clone(&metrics);
        let mut stop = stop_rx.clone();
        tasks.push(tokio::spawn(async move {
            loop {
                if metrics.watches_synced() {
                    metrics.set_ready(true);
                    tracing::info!("ready: every watch has listed");
                    break;
                }
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                    _ = stop.changed() => break,
                }
            }
        }));
    }

    let mut stop = stop_rx.clone();
    let discover = async {
        let Some(d) = discovery else {
            let _ = stop.changed().await;
            return;
        };
        let mut first = true;
        loop {
            if let Some((selector, port)) = &d.exporters {
                match discover_exporters(&d.client, selector, *port).await {
                    Ok(found) => {
                        if first && found.is_empty() {
                            tracing::warn!(selector = ?selector, every = %config::format_duration(d.every), "no running exporter pod matches yet");
                        }
                        scrapers.update(&found);
                    }
                    Err(e) => tracing::warn!(error = %e, "exporter discovery failed, keeping the current endpoints"),
                }
            }
            if let Some((selector, port)) = &d.unit_pods {
                match discover_unit_pods(&d.client, selector.as_deref(), *port).await {
                    Ok(found) => {
                        if first && found.is_empty() {
                            tracing::info!(selector = ?selector, "no running pod exposes unit counters yet (annotate pods prometheus.io/scrape: \"true\" or set unit_selector)");
                        }
                        unit_scrapers.update(&found);
                    }
                    Err(e) => tracing::warn!(error = %e, "unit pod discovery failed, keeping the current endpoints"),
                }
            }
            first = false;
            tokio::select! {
                _ = tokio::time::sleep(d.every) => {}
                _ = stop.changed() => break,
            }
        }
    };

    tokio::pin!(shutdown);
    let writer_failed = tokio::select! {
        _ = &mut shutdown => false,
        _ = &mut done_rx => true,
        _ = discover => false,
    };
    if writer_failed {
        tracing::error!("the writer stopped; shutting down");
    } else {
        tracing::info!("shutting down: flushing the WAL into the store");
    }
    let _ = stop_tx.send(true);
    for t in tasks {
        let _ = t.await;
    }
    // Scrape tasks end at the stop signal; with them go the last senders, which ends the writer.
    scrapers.join().await;
    unit_scrapers.join().await;
    let summary = tokio::task::spawn_blocking(move || writer_thread.join()).await.map_err(|e| LiveError::internal(e.to_string()))?.map_err(|_| LiveError::internal("the writer thread panicked"))??;
    let _ = server.await;
    Ok(LiveSummary { writer: summary, elapsed: started.elapsed() })
}

/// What the discovery loop looks up through the API server, every `every`.
struct Discovery {
    client: kube::Client,
    /// Exporter pods: label selector and port.
    exporters: Option<(String, u16)>,
    /// Unit pods: label selector (none: the annotated pods) and default port.
    unit_pods: Option<(Option<String>, u16)>,
    every: Duration,
}

/// The running pods, across namespaces, that `selector` matches (all without one).
async fn list_pods(client: &kube::Client, selector: Option<&str>) -> Result<serde_json::Value, String> {
    let lp = kube::api::ListParams { label_selector: selector.map(str::to_owned), ..Default::default() };
    let req = kube::core::Request::new("/api/v1/pods").list(&lp).map_err(|e| e.to_string())?;
    let text = client.request_text(req).await.map_err(|e| e.to_string())?;
    serde_json::from_str(&text).map_err(|e| format!("pod list is not JSON: {e}"))
}

/// Exporter URLs of the running pods that match `selector`.
async fn discover_exporters(client: &kube::Client, selector: &str, port: u16) -> Result<BTreeMap<String, scrape::Serves>, String> {
    Ok(scrape::endpoints_from_pod_list(&list_pods(client, Some(selector)).await?, port))
}

/// Metrics URLs of the running pods to scrape for unit counters, each with its pod.
async fn discover_unit_pods(client: &kube::Client, selector: Option<&str>, port: u16) -> Result<BTreeMap<String, scrape::Serves>, String> {
    let pick = if selector.is_some() { units::Pick::Listed } else { units::Pick::Annotated };
    let found = units::unit_pods_from_list(&list_pods(client, selector).await?, pick, port);
    Ok(found.into_iter().map(|(url, pod)| (url, scrape::Serves::Pod(pod))).collect())
}
