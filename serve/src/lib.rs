//! The serving end of gpuledger: `gpuledger serve`.
//!
//! ```text
//! store + ledger/*.parquet -> one DataFusion session -> PostgreSQL wire (Grafana, psql)
//!                                                   -> HTTP API (JSON, CSV, HTML, /metrics)
//! ```
//!
//! Both endpoints share one session, opened by `gpuledger-ledger` exactly as `gpuledger query`
//! opens it, so a number reads the same everywhere. File listings are reused for
//! `refresh_interval` only, so new Parquet files show up without a restart; derived tables a
//! `gpuledger ledger` run writes later are registered as they appear.

// Tests may unwrap: a panic is how they fail.
#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod config;
pub mod conn;
mod cursor;
pub mod guard;
pub mod http;
pub mod limits;
pub mod metrics;
mod parse;
pub mod results;
pub mod pg;
mod pgcompat;
mod session;
pub mod stop;
pub mod workers;
mod wire;

use gpuledger_store::StoreLocation;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion_postgres::datafusion_pg_catalog::pg_catalog::context::EmptyContextProvider;
use datafusion_postgres::datafusion_pg_catalog::setup_pg_catalog;
use gpuledger_ledger::Ledger;
use tokio::net::TcpListener;

pub use config::{ConfigError, ServeConfig};
use limits::Limits;
use metrics::Stats;

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Ledger(#[from] gpuledger_ledger::Error),
    #[error("setting up the SQL session: {0}")]
    Session(String),
    #[error("cannot listen on {addr} for {what}: {source}")]
    Listen { addr: SocketAddr, what: &'static str, source: std::io::Error },
    #[error("TLS: {}: {reason}", path.display())]
    Tls { path: PathBuf, reason: String },
    #[error("the SQL endpoint has no users: add a [[serve.users]] entry with name and password_env to the config")]
    NoUsers,
}

/// What `gpuledger serve` was asked to do.
pub struct Options {
    pub store: StoreLocation,
    pub config: ServeConfig,
    /// From the ledger configuration: reports name it and its idle policy.
    pub currency: String,
    pub idle_policy: gpuledger_ledger::config::IdlePolicy,
}

/// The addresses actually bound (port 0 in the configuration picks a free one).
#[derive(Debug, Clone, Copy)]
pub struct Bound {
    pub pg: SocketAddr,
    pub http: SocketAddr,
}

/// Opens the store, binds both listeners, reports them through `ready`, then serves until
/// `shutdown` resolves.
pub async fn run(options: Options, ready: impl FnOnce(Bound), shutdown: impl Future<Output = ()> + Send + 'static) -> Result<(), ServeError> {
    let c = &options.config;
    if c.users.is_empty() {
        return Err(ServeError::NoUsers);
    }
    let tls = match (&c.tls_cert, &c.tls_key) {
        (Some(cert), Some(key)) => Some(pg::tls_acceptor(cert, key)?),
        _ => None,
    };
    let ledger = Arc::new(open_ledger(&options.store, c).await?);
    let stats = Arc::new(Stats::default());
    let limits = Limits::new(c.query_timeout, c.memory_limit, c.memory_total, c.max_statements_per_user);
    let threads = match c.statement_threads {
        0 => std::thread::available_parallelism().map_or(2, std::num::NonZeroUsize::get),
        n => n,
    };
    let workers = workers::Workers::new(threads).map_err(|e| ServeError::Session(format!("starting {threads} statement threads: {e}")))?;

    let pg_listener = TcpListener::bind(c.pg_listen).await.map_err(|source| ServeError::Listen { addr: c.pg_listen, what: "the SQL endpoint (serve.pg_listen or --pg)", source })?;
    let http_listener = TcpListener::bind(c.http_listen).await.map_err(|source| ServeError::Listen { addr: c.http_listen, what: "the HTTP API (serve.http_listen or --http)", source })?;
    let bound = Bound {
        pg: pg_listener.local_addr().map_err(|source| ServeError::Listen { addr: c.pg_listen, what: "the SQL endpoint", source })?,
        http: http_listener.local_addr().map_err(|source| ServeError::Listen { addr: c.http_listen, what: "the HTTP API", source })?,
    };

    let results = (c.result_cache > 0).then(|| Arc::new(results::ResultCache::new(c.result_cache, c.refresh_interval, stats.clone())));
    let endpoint = Arc::new(pg::PgEndpoint::new(Arc::new(ledger.context().clone()), &c.users, limits.clone(), stats.clone(), results));
    let api = Arc::new(http::Api {
        ledger: ledger.clone(),
        store: options.store.clone(),
        limits,
        workers: workers.handle(),
        token: c.http_token.clone(),
        currency: options.currency.clone(),
        idle_policy: options.idle_policy,
        stats,
        differs: std::sync::Mutex::new(None),
    });
    if api.token.is_none() {
        tracing::warn!(variable = %c.http_token_env, "the HTTP token variable is not set: every API request but /healthz is refused until it is");
    }
    tracing::info!(
        sql = %pg::describe(bound.pg, tls.is_some()),
        http = %format!("http://{}", bound.http),
        users = c.users.len(),
        query_timeout = %gpuledger_schemas::units::format_duration(c.query_timeout),
        memory_limit_mib = c.memory_limit >> 20,
        memory_total_mib = c.memory_total >> 20,
        result_cache_mib = c.result_cache >> 20,
        statement_threads = threads,
        "serving"
    );
    ready(bound);

    // One shutdown signal, fanned out to both servers and the refresher.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    });
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let refresher = {
        let ledger = ledger.clone();
        let every = c.refresh_interval;
        let stop = stopped(stop_rx.clone());
        tokio::spawn(async move {
            tokio::pin!(stop);
            let mut tick = tokio::time::interval(every);
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    () = &mut stop => return,
                }
                match ledger.refresh().await {
                    Ok(0) => {}
                    Ok(n) => tracing::info!(tables = n, "registered tables that appeared in the store"),
                    Err(e) => tracing::warn!(error = %e, "refreshing the store's tables failed"),
                }
            }
        })
    };
    let admission = pg::Admission { max_connections: c.max_connections, max_unauthenticated: c.max_unauthenticated, startup_timeout: c.startup_timeout, require_tls: c.require_tls };
    let sql = tokio::spawn(endpoint.serve(pg_listener, tls, admission, workers.handle(), stopped(stop_rx.clone())));
    let http_listener = conn::GuardedListener::new(http_listener, c.http_max_connections, c.http_idle_timeout);
    let http = axum::serve(http_listener, http::router(api)).with_graceful_shutdown(stopped(stop_rx));
    let http_result = http.await;
    let _ = sql.await;
    let _ = refresher.await;
    http_result.map_err(|source| ServeError::Listen { addr: bound.http, what: "the HTTP API", source })?;
    tracing::info!("stopped");
    Ok(())
}

/// The shared session: the store's tables and derived tables (as `gpuledger query` sees them),
/// `pg_catalog` for clients' catalog queries, and file listings cached for `refresh_interval`.
async fn open_ledger(store: &StoreLocation, c: &ServeConfig) -> Result<Ledger, ServeError> {
    let runtime = RuntimeEnvBuilder::new().with_object_list_cache_ttl(Some(c.refresh_interval)).build_arc().map_err(|e| ServeError::Session(e.to_string()))?;
    // information_schema backs psql's and Grafana's catalog queries.
    let session = SessionConfig::new().with_information_schema(true).with_default_catalog_and_schema("datafusion", "public");
    let ctx = SessionContext::new_with_config_rt(session, runtime);
    let ledger = Ledger::open_in(ctx, store).await?;
    setup_pg_catalog(ledger.context(), "datafusion", EmptyContextProvider).map_err(|e| ServeError::Session(e.to_string()))?;
    pgcompat::register(ledger.context());
    Ok(ledger)
}
