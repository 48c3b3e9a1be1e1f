//! The in-process memory pool: first come, first served up to the limit, with the rules that
//! keep operators that cannot spill from being starved by those that can.

use std::fmt;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::memory_pool::{GreedyMemoryPool, MemoryConsumer, MemoryLimit, MemoryPool, MemoryReservation, TrackConsumersPool};

/// How DataFusion 55 names the memory consumers the rules below treat apart: a repartition's
/// buffers, a sort's, and a merge of a sort's spill files. Were an upgrade to rename them, the
/// rules would silently stop applying: `the_consumers_the_rules_name_exist` runs a query that
/// has all three and fails if any name is gone.
pub const REPARTITION: &str = "RepartitionExec";
pub const SORT: &str = "ExternalSorter[";
pub const SORT_MERGE: &str = "ExternalSorterMerge[";

/// A pool that spills beyond `limit` (or never refuses without one) and remembers the most
/// it held at once.
#[derive(Debug)]
pub struct PeakPool {
    inner: Arc<dyn MemoryPool>,
    pub(crate) peak: AtomicUsize,
    /// The most the pool may hold while a sort asks for more.
    spill_above: usize,
    /// The most one sort may hold.
    sort_cap: usize,
}

impl PeakPool {
    pub fn new(limit: Option<usize>) -> PeakPool {
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
        if reservation.consumer().name().starts_with(REPARTITION) {
            self.inner.grow(reservation, additional);
            self.note();
            return Ok(());
        }
        // Sorts only: an aggregation refused memory may fail rather than spill (a final one did,
        // at 96 MiB). A sort that holds nothing yet has nothing to spill: it gets its first batch.
        if reservation.consumer().name().starts_with(SORT)
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
        if reservation.consumer().name().starts_with(SORT_MERGE) && reservation.size().saturating_add(additional) > self.sort_cap {
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

    /// A pool that notes the name of every consumer registered with it.
    #[derive(Debug)]
    struct Names {
        inner: PeakPool,
        seen: std::sync::Mutex<std::collections::BTreeSet<String>>,
    }

    impl fmt::Display for Names {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "{}", self.inner)
        }
    }

    impl MemoryPool for Names {
        fn name(&self) -> &str {
            self.inner.name()
        }
        fn register(&self, consumer: &MemoryConsumer) {
            self.seen.lock().unwrap().insert(consumer.name().to_string());
            self.inner.register(consumer)
        }
        fn unregister(&self, consumer: &MemoryConsumer) {
            self.inner.unregister(consumer)
        }
        fn grow(&self, reservation: &MemoryReservation, additional: usize) {
            self.inner.grow(reservation, additional)
        }
        fn shrink(&self, reservation: &MemoryReservation, shrink: usize) {
            self.inner.shrink(reservation, shrink)
        }
        fn try_grow(&self, reservation: &MemoryReservation, additional: usize) -> DfResult<()> {
            self.inner.try_grow(reservation, additional)
        }
        fn reserved(&self) -> usize {
            self.inner.reserved()
        }
        fn memory_limit(&self) -> MemoryLimit {
            self.inner.memory_limit()
        }
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn the_consumers_the_rules_name_exist() {
        use datafusion::execution::runtime_env::RuntimeEnvBuilder;
        use datafusion::prelude::SessionContext;
        let spill = tempfile::tempdir().unwrap();
        let limit = 32 << 20;
        let pool = Arc::new(Names { inner: PeakPool::new(Some(limit)), seen: Default::default() });
        let runtime = RuntimeEnvBuilder::new().with_memory_pool(pool.clone()).with_temp_file_path(spill.path()).build_arc().unwrap();
        let ctx = SessionContext::new_with_config_rt(crate::session::session_config(Some(limit)).with_target_partitions(2), runtime);
        // A sort of more than a sort may hold (16 MB of rows against its eighth of the pool: it
        // spills, and its spill files are merged), over a round-robin repartition into two
        // partitions. Nothing else holds memory meanwhile: an aggregation below the sort (an
        // earlier version of this test) held most of a 16 MB pool while the sort asked for its
        // first batch, and whether it had let go yet depended on the threads (CI failed once).
        let sql = "SELECT value * 7919 % 1000003 AS k, value FROM generate_series(1, 1000000) ORDER BY k, value";
        let batches = ctx.sql(sql).await.unwrap().collect().await.unwrap();
        let keys: Vec<i64> = batches.iter().flat_map(|b| b.column(0).as_any().downcast_ref::<datafusion::arrow::array::Int64Array>().unwrap().values().to_vec()).collect();
        assert_eq!(keys.len(), 1_000_000);
        assert!(keys.windows(2).all(|w| w[0] <= w[1]), "sorted by k");
        let seen = pool.seen.lock().unwrap().clone();
        for name in [REPARTITION, SORT, SORT_MERGE] {
            assert!(seen.iter().any(|s| s.starts_with(name)), "no consumer named {name}* in this DataFusion: the pool's rules no longer apply (consumers seen: {seen:?})");
        }
    }

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
