//! The accounting on a Ballista cluster: the client session, and the scheduler and executor
//! processes (`gpuledger ballista scheduler|executor`).
//!
//! Ballista 55 runs DataFusion 55, so the SQL in `queries/` runs unchanged. What a cluster
//! needs beyond stock Ballista is what every gpuledger session has:
//! - the ledger's SQL functions (`label`, `epoch_ms`, `mig_sevenths`), which the scheduler
//!   needs to plan and the executors to decode their tasks; stock Ballista binaries do not
//!   know them, which is why gpuledger ships its own scheduler and executor commands (the
//!   same Ballista library code with these functions added);
//! - the store's object-store client, built on each process from its own environment (the
//!   credentials never travel with a plan).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::sync::{Arc, RwLock};

use ballista::prelude::SessionContextExt;
use ballista_core::extension::{SessionConfigExt, ballista_aggregate_functions, ballista_scalar_functions, ballista_window_functions};
use ballista_core::registry::BallistaFunctionRegistry;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::SessionStateBuilder;
use datafusion::execution::memory_pool::{GreedyMemoryPool, TrackConsumersPool};
use datafusion::execution::object_store::ObjectStoreRegistry;
use datafusion::execution::runtime_env::{RuntimeEnv, RuntimeEnvBuilder};
use datafusion::prelude::{SessionConfig, SessionContext};
use object_store::ObjectStore;
use url::Url;

use crate::error::{Error, Result};

/// Object stores built on demand from the process's environment, one per `scheme://bucket`.
#[derive(Debug, Default)]
pub struct EnvObjectStores {
    stores: RwLock<HashMap<String, Arc<dyn ObjectStore>>>,
}

fn registry_key(url: &Url) -> String {
    format!("{}://{}", url.scheme(), url.authority())
}

impl ObjectStoreRegistry for EnvObjectStores {
    fn register_store(&self, url: &Url, store: Arc<dyn ObjectStore>) -> Option<Arc<dyn ObjectStore>> {
        self.stores.write().unwrap_or_else(|e| e.into_inner()).insert(registry_key(url), store)
    }

    fn deregister_store(&self, url: &Url) -> DfResult<Arc<dyn ObjectStore>> {
        self.stores
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&registry_key(url))
            .ok_or_else(|| DataFusionError::Execution(format!("no object store registered for {url}")))
    }

    fn get_store(&self, url: &Url) -> DfResult<Arc<dyn ObjectStore>> {
        let key = registry_key(url);
        if let Some(s) = self.stores.read().unwrap_or_else(|e| e.into_inner()).get(&key) {
            return Ok(Arc::clone(s));
        }
        let store: Arc<dyn ObjectStore> = match url.scheme() {
            "" | "file" => Arc::new(object_store::local::LocalFileSystem::new()),
            _ => gpuledger_store::build_store(url).map_err(|e| DataFusionError::Execution(format!("object store for {key}: {e}")))?,
        };
        self.stores.write().unwrap_or_else(|e| e.into_inner()).insert(key, Arc::clone(&store));
        Ok(store)
    }
}

/// A runtime whose object stores come from the environment, with an optional memory limit
/// (operators spill to disk beyond it; the same first-come pool as in process, see
/// `engine.rs` for why not a fair split).
pub fn runtime(memory_limit: Option<usize>) -> DfResult<Arc<RuntimeEnv>> {
    let mut b = RuntimeEnvBuilder::new().with_object_store_registry(Arc::new(EnvObjectStores::default()));
    if let Some(limit) = memory_limit {
        b = b.with_memory_pool(Arc::new(TrackConsumersPool::new(GreedyMemoryPool::new(limit), NonZeroUsize::new(5).unwrap_or(NonZeroUsize::MIN))));
    }
    Ok(Arc::new(b.build()?))
}

/// The functions every Ballista process of gpuledger knows: Ballista's defaults plus ours.
fn scalar_functions() -> Vec<Arc<datafusion::logical_expr::ScalarUDF>> {
    let mut f = ballista_scalar_functions();
    f.extend(crate::udf::all().into_iter().map(Arc::new));
    f
}

/// The scheduler's session for one client session: Ballista's, with our functions and stores.
fn scheduler_session(config: SessionConfig) -> DfResult<datafusion::execution::SessionState> {
    Ok(SessionStateBuilder::new()
        .with_default_features()
        .with_config(config)
        .with_runtime_env(runtime(None)?)
        .with_optimizer_rules(ballista_core::optimizer::ballista_default_optimizer_rules())
        .with_scalar_functions(scalar_functions())
        .with_aggregate_functions(ballista_aggregate_functions())
        .with_window_functions(ballista_window_functions())
        .build())
}

/// A client session whose queries run on the cluster behind `scheduler` (`df://host:port`).
pub async fn client_session(scheduler: &str) -> Result<SessionContext> {
    let err = |source| Error::Query { sql: format!("connecting to the Ballista scheduler at {scheduler}"), source };
    let state = SessionStateBuilder::new()
        .with_default_features()
        .with_config(client_config())
        .with_runtime_env(runtime(None).map_err(err)?)
        .build();
    let ctx = SessionContext::remote_with_state(scheduler, state).await.map_err(err)?;
    crate::udf::register(&ctx);
    Ok(ctx)
}

/// The settings every job of the accounting carries to the scheduler.
fn client_config() -> SessionConfig {
    // Ballista 55's adaptive planner re-walks the whole stage graph on every task event; with
    // the accounting's plans (dozens of stages) the scheduler spent its time there, minutes on
    // a two-day store. The static planner plans the same stages once.
    SessionConfig::new_with_ballista()
        .with_information_schema(true)
        .with_ballista_adaptive_query_planner(false)
        .with_ballista_logical_extension_codec(Arc::new(crate::snapshot::StoreCodec::default()))
}

fn ballista_err(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Engine(format!("{what}: {e}"))
}

/// Runs a scheduler on `listen` until the process ends.
pub async fn run_scheduler(listen: SocketAddr) -> Result<()> {
    use ballista_scheduler::cluster::BallistaCluster;
    use ballista_scheduler::config::SchedulerConfig;
    let config = SchedulerConfig::default()
        .with_hostname(listen.ip().to_string())
        .with_port(listen.port())
        .with_override_config_producer(Arc::new(|| SessionConfig::new_with_ballista().with_information_schema(true)))
        .with_override_session_builder(Arc::new(scheduler_session));
    // Raw tables travel in a plan as the files of their snapshot (`snapshot::StoreCodec`).
    let config = SchedulerConfig { bind_host: listen.ip().to_string(), override_logical_codec: Some(Arc::new(crate::snapshot::StoreCodec::default())), ..config };
    let cluster = BallistaCluster::new_from_config(&config).await.map_err(|e| ballista_err("starting the scheduler", e))?;
    ballista_scheduler::scheduler_process::start_server(cluster, listen, Arc::new(config)).await.map_err(|e| ballista_err("scheduler", e))
}

pub use crate::session::ExecutorOptions;

/// Runs an executor until the process ends.
pub async fn run_executor(o: ExecutorOptions) -> Result<()> {
    use ballista_executor::executor_process::{ExecutorProcessConfig, start_executor_process};
    // The executor's default registry lacks DataFusion's nested functions (string_to_array:
    // the accounting unnests a ClusterQueue's flavors), which the scheduler has: give it the
    // same set.
    let mut registry = BallistaFunctionRegistry::default();
    for f in scalar_functions() {
        registry.scalar_functions.insert(f.name().to_string(), f);
    }
    let per_task = o.memory_limit.map(|m| (m / o.concurrency.max(1) as u64) as usize);
    let config = ExecutorProcessConfig {
        bind_host: o.listen.ip().to_string(),
        external_host: Some(o.listen.ip().to_string()),
        port: o.listen.port(),
        grpc_port: o.listen.port().wrapping_add(1),
        scheduler_host: o.scheduler.ip().to_string(),
        scheduler_port: o.scheduler.port(),
        scheduler_connect_timeout_seconds: 30,
        vcores: o.concurrency.max(1),
        work_dir: Some(o.work_dir.display().to_string()),
        executor_heartbeat_interval_seconds: 5,
        override_function_registry: Some(Arc::new(registry)),
        override_runtime_producer: Some(Arc::new(move |_config: &SessionConfig| runtime(per_task))),
        ..ExecutorProcessConfig::default()
    };
    start_executor_process(Arc::new(config)).await.map_err(|e| ballista_err("executor", e))
}
