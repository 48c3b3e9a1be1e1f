//! Where the accounting runs: in this process, within a memory limit, or on a Ballista cluster.

use std::fmt;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::memory_pool::{GreedyMemoryPool, MemoryConsumer, MemoryLimit, MemoryPool, MemoryReservation, TrackConsumersPool};
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::prelude::{SessionConfig, SessionContext};
use gpuledger_store::StoreLocation;

use crate::accounting::Intermediates;
use crate::error::{Error, Result};

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
                let pool = Arc::new(PeakPool::new(*memory_limit));
                let mut rt = RuntimeEnvBuilder::new().with_memory_pool(Arc::clone(&pool) as Arc<dyn MemoryPool>);
                if let Some(dir) = spill_dir {
                    rt = rt.with_temp_file_path(dir.clone());
                }
                let runtime = rt.build_arc().map_err(err)?;
                let ctx = SessionContext::new_with_config_rt(session_config(*memory_limit), runtime);
                Ok(EngineSession { ctx, pool: Some(pool), limit: *memory_limit })
            }
            Engine::Ballista { scheduler } => Ok(EngineSession { ctx: crate::ballista::client_session(scheduler).await?, pool: None, limit: None }),
        }
    }

    /// Where a run on this engine keeps its intermediate tables.
    pub fn intermediates(&self, store: &StoreLocation) -> Intermediates {
        match self {
            Engine::InProcess { .. } => Intermediates::Memory,
            Engine::Ballista { .. } => Intermediates::Store(store.clone()),
        }
    }
}

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
        // A hash join holds its whole build side, and cannot spill it. DataFusion builds on the
        // left input unless statistics say the right is smaller, and past a non-equi join they
        // say nothing: `pieces LEFT JOIN pod_runs` built a day's pieces, about 300 MB per
        // partition at 256 GPUs, three times over in gpu_state_hours. Sort-merge joins sort both
        // sides, and sorts spill.
        c.options_mut().optimizer.prefer_hash_join = false;
    }
    c
}

/// A pool that spills beyond `limit` (or never refuses without one) and remembers the most
/// it held at once.
#[derive(Debug)]
struct PeakPool {
    inner: Arc<dyn MemoryPool>,
    peak: AtomicUsize,
    /// The most the pool may hold while a sort asks for more.
    spill_above: usize,
    /// The most one sort may hold.
    sort_cap: usize,
}

impl PeakPool {
    fn new(limit: Option<usize>) -> PeakPool {
        let inner: Arc<dyn MemoryPool> = match limit {
            // First come, first served, as DataFusion's own memory_limit: a fair split gave each
            // of the hundred-odd spillable operators of an accounting plan (every window sort,
            // every repartition) too little to sort even one batch. Running out, the error names
            // the five biggest holders: what a user needs to pick a limit.
            Some(l) => Arc::new(TrackConsumersPool::new(GreedyMemoryPool::new(l), NonZeroUsize::new(5).unwrap_or(NonZeroUsize::MIN))),
            None => Arc::new(datafusion::execution::memory_pool::UnboundedMemoryPool::default()),
        };
        // A sort takes memory until a request fails, and first come, first served, one sort took
        // 1.3 GB of a 2 GiB pool and left a merge, which cannot spill, short of 6 MB. Sorts spill
        // once the pool is half full: the other half is for what cannot spill (merges, hash
        // tables, kept tables).
        let spill_above = limit.map(|l| l / 2).unwrap_or(usize::MAX);
        // And each sort spills past an eighth of the limit: a sort that finishes in memory hands
        // all it holds to its merge, which cannot spill (DataFusion 55's `ExternalSorterMerge`).
        // At 1,024 GPUs one such merge held 910 MB of a 2 GiB pool and a day's aggregation then
        // could not get 16 KB.
        let sort_cap = limit.map(|l| l / 8).unwrap_or(usize::MAX);
        PeakPool { inner, peak: AtomicUsize::new(0), spill_above, sort_cap }
    }

    fn note(&self) {
        self.peak.fetch_max(self.inner.reserved(), Ordering::Relaxed);
    }
}

impl fmt::Display for PeakPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.inner)
    }
}

impl MemoryPool for PeakPool {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn register(&self, consumer: &MemoryConsumer) {
        self.inner.register(consumer)
    }
    fn unregister(&self, consumer: &MemoryConsumer) {
        self.inner.unregister(consumer)
    }
    fn grow(&self, reservation: &MemoryReservation, additional: usize) {
        self.inner.grow(reservation, additional);
        self.note();
    }
    fn shrink(&self, reservation: &MemoryReservation, shrink: usize) {
        self.inner.shrink(reservation, shrink)
    }
    fn try_grow(&self, reservation: &MemoryReservation, additional: usize) -> DfResult<()> {
        // A repartition refused memory spills its batch to a file its reader then waits on, and
        // in DataFusion 55.2 that wait can hang the query for good (every thread parked, seen
        // here in gpu_state_hours under a 2 GiB limit; apache/datafusion#24883). Its buffers
        // are counted, and the operators around it spill instead.
        if reservation.consumer().name().starts_with("RepartitionExec") {
            self.inner.grow(reservation, additional);
            self.note();
            return Ok(());
        }
        // Sorts only: an aggregation refused memory may fail rather than spill (a final one did,
        // at 96 MiB). A sort that holds nothing yet has nothing to spill: it gets its first batch.
        if reservation.consumer().name().starts_with("ExternalSorter[")
            && reservation.size() > 0
            && (self.inner.reserved().saturating_add(additional) > self.spill_above
                || reservation.size().saturating_add(additional) > self.sort_cap)
        {
            return Err(DataFusionError::ResourcesExhausted(format!(
                "{} may not grow by {additional} bytes: sorts get half of the memory limit, each an eighth",
                reservation.consumer().name()
            )));
        }
        // A merge of a sort's spill files takes as many files at once as the pool lets it seat
        // (DataFusion 55's multi-level merge), and holds that until it is done: at 1,024 GPUs one
        // held 763 MB of a 2 GiB pool and the next sort could not get its 10 MB. Held to an
        // eighth of the limit, it merges fewer files per pass (at least two; it re-spills a file
        // in smaller batches when two do not fit).
        if reservation.consumer().name().starts_with("ExternalSorterMerge[") && reservation.size().saturating_add(additional) > self.sort_cap {
            return Err(DataFusionError::ResourcesExhausted(format!(
                "{} may not grow by {additional} bytes: a merge of spill files gets an eighth of the memory limit",
                reservation.consumer().name()
            )));
        }
        self.inner.try_grow(reservation, additional)?;
        self.note();
        Ok(())
    }
    fn reserved(&self) -> usize {
        self.inner.reserved()
    }
    fn memory_limit(&self) -> MemoryLimit {
        self.inner.memory_limit()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pool_remembers_its_peak_and_refuses_past_the_limit() {
        let pool: Arc<dyn MemoryPool> = Arc::new(PeakPool::new(Some(1000)));
        let a = MemoryConsumer::new("a").register(&pool);
        a.try_grow(600).unwrap();
        a.shrink(500);
        a.try_grow(300).unwrap();
        assert!(a.try_grow(700).is_err(), "past the limit");
        let peak = pool.downcast_ref::<PeakPool>().unwrap().peak.load(Ordering::Relaxed);
        assert_eq!(peak, 600);
        assert_eq!(pool.reserved(), 400);
    }

    #[test]
    fn sorts_leave_half_of_the_pool_to_operators_that_cannot_spill() {
        let pool: Arc<dyn MemoryPool> = Arc::new(PeakPool::new(Some(1000)));
        let sorts: Vec<_> = (0..4).map(|i| MemoryConsumer::new(format!("ExternalSorter[{i}]")).with_can_spill(true).register(&pool)).collect();
        for s in &sorts {
            s.try_grow(110).unwrap();
        }
        assert!(sorts[0].try_grow(20).is_err(), "one sort past an eighth of the limit spills");
        sorts[1].try_grow(10).unwrap();
        let merge = MemoryConsumer::new("merge").register(&pool);
        merge.try_grow(60).unwrap();
        assert!(sorts[2].try_grow(10).is_err(), "past half of the pool, a sort spills");
        merge.try_grow(450).unwrap();
        let other = MemoryConsumer::new("ExternalSorter[9]").with_can_spill(true).register(&pool);
        other.try_grow(30).unwrap_or_else(|e| panic!("a first batch is let through: {e}"));
        assert!(merge.try_grow(30).is_err(), "past the limit");
        merge.shrink(500);
        sorts[3].try_grow(10).unwrap();
        let aggregate = MemoryConsumer::new("GroupedHashAggregateStream[0]").with_can_spill(true).register(&pool);
        aggregate.try_grow(300).unwrap_or_else(|e| panic!("only sorts are held to half: {e}"));
        let repartition = MemoryConsumer::new("RepartitionExec[0]").with_can_spill(true).register(&pool);
        repartition.try_grow(600).unwrap_or_else(|e| panic!("a repartition is never refused: {e}"));
        assert!(pool.reserved() > 1000, "and it is counted");
        let big: Arc<dyn MemoryPool> = Arc::new(PeakPool::new(Some(8000)));
        let one = MemoryConsumer::new("ExternalSorter[0]").with_can_spill(true).register(&big);
        one.try_grow(900).unwrap();
        one.try_grow(100).unwrap();
        assert!(one.try_grow(1).is_err(), "one sort spills past an eighth of the limit, the pool nearly empty");
        let unlimited: Arc<dyn MemoryPool> = Arc::new(PeakPool::new(None));
        MemoryConsumer::new("ExternalSorter[0]").with_can_spill(true).register(&unlimited).try_grow(1 << 40).unwrap();
        MemoryConsumer::new("ExternalSorterMerge[0]").register(&unlimited).try_grow(1 << 40).unwrap();
    }

    #[test]
    fn a_merge_of_spill_files_is_held_to_an_eighth_of_the_limit() {
        let pool: Arc<dyn MemoryPool> = Arc::new(PeakPool::new(Some(8000)));
        let merge = MemoryConsumer::new("ExternalSorterMerge[1]").register(&pool);
        // Its first seat (a sort's spill reservation, then the streams it merges) up to 1000.
        merge.try_grow(10).unwrap();
        merge.try_grow(990).unwrap();
        assert!(merge.try_grow(1).is_err(), "past an eighth of the limit, a merge seats fewer files");
        merge.shrink(500);
        merge.try_grow(500).unwrap_or_else(|e| panic!("the cap is on what it holds, not what it asked before: {e}"));
        let other = MemoryConsumer::new("ExternalSorterMerge[0]").register(&pool);
        other.try_grow(1000).unwrap_or_else(|e| panic!("each merge has its own eighth: {e}"));
        let final_aggregate = MemoryConsumer::new("FinalHashAggregateStream[0]").with_can_spill(true).register(&pool);
        final_aggregate.try_grow(5000).unwrap_or_else(|e| panic!("the cap is a merge's only: {e}"));
        assert_eq!(pool.reserved(), 7000);
    }
}
