//! Where the accounting runs: in this process, within a memory limit, or on a Ballista cluster.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use datafusion::execution::memory_pool::MemoryPool;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::prelude::{SessionConfig, SessionContext};

use crate::error::{Error, Result};
use crate::pool::PeakPool;

/// Whether this build has the distributed engine (the `ballista` feature).
pub const BALLISTA_BUILT: bool = cfg!(feature = "ballista");

/// What a Ballista command says in a build without it.
pub const BALLISTA_NOT_BUILT: &str = "is not in this build: gpuledger was built without its `ballista` feature (cargo install --path . --features ballista)";

/// How a Ballista executor runs (`gpuledger ballista executor`; the `ballista` feature).
#[derive(Debug, Clone)]
pub struct ExecutorOptions {
    /// `host:port` of the scheduler's gRPC service.
    pub scheduler: std::net::SocketAddr,
    /// Address of this executor's Arrow Flight service (shuffle reads); the gRPC service
    /// listens on the next port.
    pub listen: std::net::SocketAddr,
    /// Tasks run at once.
    pub concurrency: usize,
    /// Shuffle files and spills.
    pub work_dir: std::path::PathBuf,
    /// Memory pool of the whole executor, shared by its task slots (operators spill beyond it).
    pub memory_limit: Option<u64>,
}

/// The engine of one accounting run.
#[derive(Debug, Clone)]
pub enum Engine {
    /// DataFusion in this process. With a memory limit, sorts, joins and aggregations spill
    /// to `spill_dir` (the system's temporary directory by default) instead of growing.
    InProcess { memory_limit: Option<usize>, spill_dir: Option<PathBuf> },
    /// A Ballista cluster, reached through its scheduler (`df://host:port`).
    Ballista { scheduler: String },
}

impl Default for Engine {
    fn default() -> Self {
        Engine::InProcess { memory_limit: None, spill_dir: None }
    }
}

/// What the memory pool of an in-process run saw.
#[derive(Debug, Clone, Default)]
pub struct MemoryStats {
    pub limit: Option<usize>,
    /// The most the query operators held at once.
    pub peak_reserved: usize,
}

/// A session for one run, and (in process) the pool's watch.
pub struct EngineSession {
    pub ctx: SessionContext,
    pool: Option<Arc<PeakPool>>,
    limit: Option<usize>,
}

impl EngineSession {
    pub fn memory(&self) -> Option<MemoryStats> {
        self.pool.as_ref().map(|p| MemoryStats { limit: self.limit, peak_reserved: p.peak.load(Ordering::Relaxed) })
    }
}

impl Engine {
    /// A fresh session of this engine (the store's tables are not registered yet).
    pub async fn session(&self) -> Result<EngineSession> {
        match self {
            Engine::InProcess { memory_limit, spill_dir } => {
                let err = |source| Error::Query { sql: "setting up the session".into(), source };
                let pool_limit = memory_limit.map(pool_size);
                let pool = Arc::new(PeakPool::new(pool_limit));
                let mut rt = RuntimeEnvBuilder::new().with_memory_pool(Arc::clone(&pool) as Arc<dyn MemoryPool>);
                if let Some(limit) = memory_limit {
                    // DataFusion caches Parquet footers (50 MiB by default) and files' statistics
                    // (20 MiB) outside the pool: a run writes and reads a file per table and
                    // unit, so the caches fill. Under a limit each gets a share of it instead.
                    rt = rt.with_metadata_cache_limit(cache_size(*limit)).with_file_statistics_cache_limit(cache_size(*limit).min(20 << 20));
                }
                if let Some(dir) = spill_dir {
                    rt = rt.with_temp_file_path(dir.clone());
                }
                let runtime = rt.build_arc().map_err(err)?;
                let ctx = SessionContext::new_with_config_rt(session_config(pool_limit), runtime);
                Ok(EngineSession { ctx, pool: Some(pool), limit: pool_limit })
            }
            Engine::Ballista { scheduler } => Ok(EngineSession { ctx: crate::ballista::client_session(scheduler).await?, pool: None, limit: None }),
        }
    }

    /// Whether the engine's workers share this process's memory (in process), or only read
    /// what is in the store (a cluster's executors): where a run keeps its intermediate tables.
    pub fn shares_memory(&self) -> bool {
        matches!(self, Engine::InProcess { .. })
    }
}

/// The Parquet metadata cache under a memory limit: 1/32 of it, at most DataFusion's default.
pub fn cache_size(memory_limit: usize) -> usize {
    (memory_limit / 32).min(50 << 20)
}

/// The part of a run's memory limit DataFusion's pool gets: operators, and the tables a run
/// keeps. The rest is what the pool does not count: batches in flight between operators,
/// Parquet pages being decoded, the allocator's own, the program itself. Measured on a
/// ledger run, those took about as much again as the pool at its fullest.
pub fn pool_size(memory_limit: usize) -> usize {
    memory_limit / POOL_SHARE.1 * POOL_SHARE.0
}

/// The pool's share of the memory limit (see [`pool_size`]).
pub const POOL_SHARE: (usize, usize) = (1, 2);

/// The settings of every in-process session (ledger, query, serve): Parquet filters are evaluated while decoding (so a
/// day's filter skips pages and rows, not just files), on top of partition and row-group
/// statistics pruning, which DataFusion does by default.
///
/// Under a memory limit, each sort keeps less memory aside for merging its spill files:
/// DataFusion's 10 MiB per sort, times the accounting's window sorts running at once, took a
/// 100 MiB pool before any data was sorted.
pub fn session_config(memory_limit: Option<usize>) -> SessionConfig {
    let mut c = SessionConfig::new();
    let e = &mut c.options_mut().execution;
    e.parquet.pushdown_filters = true;
    e.parquet.reorder_filters = true;
    // Files are sorted by GPU and time (the table's declared order): keep that order through
    // repartitioning rather than sorting again.
    c.options_mut().optimizer.prefer_existing_sort = true;
    let e = &mut c.options_mut().execution;
    if let Some(limit) = memory_limit {
        e.sort_spill_reservation_bytes = (limit / 64).clamp(256 << 10, e.sort_spill_reservation_bytes);
        // Hash joins even so: a hash join holds its whole build side and cannot spill it (a
        // day's pieces, about 300 MB per partition at 256 GPUs, three times over in
        // gpu_state_hours), but the ledger sizes its units (a day, or a part of a day's nodes)
        // to the pool, and runs a unit again in smaller parts when a join is refused memory.
        // Sort-merge joins, which spill, made every unit sort both sides of every join: under
        // a small pool the sorts' own reservations refused a part of 16 GPUs' day.
    }
    c
}

