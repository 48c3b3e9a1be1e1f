//! Answers shared between clients for a short while.
//!
//! Everyone who opens a dashboard sends the same statements for the same time range (Grafana
//! writes the range into the SQL as literal instants), and a wall of 32 viewers sent each one 32
//! times: the per-GPU heatmap was computed 32 times over within a second, on two cores. The
//! store only changes when an ingest or a ledger run writes files, and those show up through
//! file listings that are themselves reused for `refresh_interval`. So a statement's rows are
//! kept for `refresh_interval` after it was computed and handed to whoever sends the same
//! statement (the same plan, parameters bound, the same text settings such as DateStyle) in
//! that time, as the rows were encoded for the wire: encoding 177K rows as text cost the
//! server more than computing them; a statement that is being computed
//! is waited for rather than computed again. New data is seen within twice `refresh_interval`
//! instead of once.
//!
//! Only queries whose functions are all immutable are kept (`now()` and `random()` are not), and
//! only answers up to an eighth of the budget (`result_cache`, 256 MiB unless set; 0 turns
//! this off), which are gathered while they are sent, never held back. The oldest answers go
//! first when the budget is full. Errors are never kept: a failed or cancelled computation lets
//! the next client in line compute it.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::logical_expr::{Expr, LogicalPlan, Volatility};
use datafusion_postgres::pgwire::api::results::FieldInfo;
use datafusion_postgres::pgwire::error::PgWireResult;
use datafusion_postgres::pgwire::messages::data::DataRow;
use futures::Stream;
use tokio::sync::watch;

use crate::metrics::Stats;

/// Rows computed once, for every client that asks within the time they are kept.
pub struct ResultCache {
    budget: u64,
    keep_for: Duration,
    state: Mutex<State>,
    stats: Arc<Stats>,
}

#[derive(Default)]
struct State {
    slots: HashMap<String, Slot>,
    bytes: u64,
}

impl State {
    /// Removes the slot of `key`, its rows' bytes no longer counted.
    fn remove(&mut self, key: &str) {
        if let Some(Slot::Ready(answer)) = self.slots.remove(key) {
            self.bytes -= answer.bytes;
        }
    }
}

enum Slot {
    /// Computed: the rows, and when.
    Ready(Arc<Answer>),
    /// Being computed by one client; the others wait for the sender to drop.
    Running(watch::Receiver<()>),
    /// Too large to keep (as of the instant): the others compute it themselves.
    TooLarge(Instant),
}

/// The rows of one statement, encoded for the wire.
pub struct Answer {
    pub fields: Arc<Vec<FieldInfo>>,
    pub rows: Vec<DataRow>,
    bytes: u64,
    at: Instant,
}

/// What one encoded row holds in memory: its bytes and their buffer's bookkeeping.
fn row_bytes(row: &DataRow) -> u64 {
    row.data.len() as u64 + 48
}

/// What a client is to do with a statement.
pub enum Lookup {
    /// Send these rows.
    Hit(Arc<Answer>),
    /// Compute it, handing each batch to the lease as it goes out.
    Compute(Lease),
    /// Compute it without keeping anything.
    Uncached,
}

impl ResultCache {
    /// Keeps up to `budget` bytes of rows, each answer for `keep_for`; counts hits, misses
    /// and the bytes kept in `stats`.
    pub fn new(budget: u64, keep_for: Duration, stats: Arc<Stats>) -> ResultCache {
        ResultCache { budget, keep_for, state: Mutex::default(), stats }
    }

    /// Bytes of rows kept now.
    pub fn bytes(&self) -> u64 {
        self.lock().bytes
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while the lock was held left at worst a stale slot; the map is still whole.
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn fresh(&self, at: Instant) -> bool {
        at.elapsed() < self.keep_for
    }

    /// What to do with `plan`, its rows encoded as `encoding` says (the client's text
    /// settings): rows computed within the time they are kept, a lease to compute them, or
    /// nothing to keep. Waits while another client computes the same statement.
    pub async fn lookup(self: &Arc<Self>, plan: &LogicalPlan, encoding: &str) -> Lookup {
        if !cacheable(plan) {
            return Lookup::Uncached;
        }
        let key = format!("{encoding}\n{}", plan.display_indent());
        loop {
            let mut waiting = {
                let mut state = self.lock();
                match state.slots.get(&key) {
                    Some(Slot::Ready(answer)) if self.fresh(answer.at) => {
                        self.stats.result_cache_hits.fetch_add(1, Ordering::Relaxed);
                        return Lookup::Hit(answer.clone());
                    }
                    Some(Slot::TooLarge(at)) if self.fresh(*at) => return Lookup::Uncached,
                    Some(Slot::Running(done)) => done.clone(),
                    _ => {
                        state.remove(&key);
                        self.stats.result_cache_bytes.store(state.bytes, Ordering::Relaxed);
                        let (sender, receiver) = watch::channel(());
                        state.slots.insert(key.clone(), Slot::Running(receiver));
                        self.stats.result_cache_misses.fetch_add(1, Ordering::Relaxed);
                        return Lookup::Compute(Lease { cache: self.clone(), key, _done: sender, rows: Vec::new(), bytes: 0, whole: false });
                    }
                }
            };
            // The computing client's lease ends (kept or given up): look again.
            let _ = waiting.changed().await;
        }
    }

    /// Keeps `rows` under `key` in place of its running slot, making room by dropping the
    /// oldest answers; or marks the key too large to keep.
    fn keep(&self, key: &str, fields: Arc<Vec<FieldInfo>>, rows: Vec<DataRow>, bytes: u64) {
        if bytes > self.budget / 8 {
            return self.too_large(key);
        }
        let mut state = self.lock();
        // Expired answers first, then the oldest until the new one fits.
        let expired: Vec<String> = state
            .slots
            .iter()
            .filter(|(_, s)| match s {
                Slot::Ready(a) => !self.fresh(a.at),
                Slot::TooLarge(at) => !self.fresh(*at),
                Slot::Running(_) => false,
            })
            .map(|(k, _)| k.clone())
            .collect();
        for k in expired {
            state.remove(&k);
        }
        while state.bytes + bytes > self.budget {
            let oldest = state.slots.iter().filter_map(|(k, s)| match s {
                Slot::Ready(a) => Some((a.at, k.clone())),
                _ => None,
            });
            let Some((_, k)) = oldest.min() else { break };
            state.remove(&k);
        }
        state.bytes += bytes;
        self.stats.result_cache_bytes.store(state.bytes, Ordering::Relaxed);
        state.slots.insert(key.to_owned(), Slot::Ready(Arc::new(Answer { fields, rows, bytes, at: Instant::now() })));
    }

    /// Marks `key` too large to keep, for the time an answer would be kept.
    fn too_large(&self, key: &str) {
        self.lock().slots.insert(key.to_owned(), Slot::TooLarge(Instant::now()));
    }

    /// Gives up the running slot of `key` (its computation failed or was dropped).
    fn abandon(&self, key: &str) {
        let mut state = self.lock();
        if matches!(state.slots.get(key), Some(Slot::Running(_))) {
            state.slots.remove(key);
        }
    }
}

/// Whether `plan` is a query whose answer depends on the store alone: no function in it is
/// stable or volatile (`now()`, `random()`, `current_setting()`), and it is no statement,
/// EXPLAIN or write.
fn cacheable(plan: &LogicalPlan) -> bool {
    if matches!(plan, LogicalPlan::Statement(_) | LogicalPlan::Ddl(_) | LogicalPlan::Dml(_) | LogicalPlan::Copy(_) | LogicalPlan::Explain(_) | LogicalPlan::Analyze(_) | LogicalPlan::DescribeTable(_)) {
        return false;
    }
    let mut immutable = true;
    let walk = plan.apply_with_subqueries(|node| {
        node.apply_expressions(|e| {
            e.apply(|e| {
                let volatility = match e {
                    Expr::ScalarFunction(f) => Some(f.func.signature().volatility),
                    Expr::AggregateFunction(f) => Some(f.func.signature().volatility),
                    Expr::WindowFunction(_) => Some(Volatility::Immutable),
                    _ => None,
                };
                if volatility.is_some_and(|v| v != Volatility::Immutable) {
                    immutable = false;
                    return Ok(TreeNodeRecursion::Stop);
                }
                Ok(TreeNodeRecursion::Continue)
            })
        })
    });
    walk.is_ok() && immutable
}

/// The right to compute one statement's answer and keep it. Dropped before the last row
/// (an error, a cancel, a client gone), it keeps nothing and lets the waiting clients go on.
pub struct Lease {
    cache: Arc<ResultCache>,
    key: String,
    /// Dropped with the lease: wakes the clients waiting for this statement.
    _done: watch::Sender<()>,
    rows: Vec<DataRow>,
    bytes: u64,
    /// Every row arrived, or the answer was found too large.
    whole: bool,
}

impl Lease {
    /// `rows` (their columns `fields`), also gathered for the cache while there is room; kept
    /// when they end without an error.
    pub fn gather<S>(self, fields: Arc<Vec<FieldInfo>>, rows: S) -> Gathering<S> {
        Gathering { fields, rows, lease: Some(self) }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if !self.whole {
            self.cache.abandon(&self.key);
        }
    }
}

/// A statement's rows on their way out, copied to a [`Lease`].
pub struct Gathering<S> {
    fields: Arc<Vec<FieldInfo>>,
    rows: S,
    /// None once the answer is kept, found too large or failed.
    lease: Option<Lease>,
}

impl<S: Stream<Item = PgWireResult<DataRow>> + Unpin> Stream for Gathering<S> {
    type Item = PgWireResult<DataRow>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        let next = Pin::new(&mut this.rows).poll_next(cx);
        match &next {
            Poll::Ready(Some(Ok(row))) => {
                if let Some(lease) = this.lease.as_mut() {
                    lease.bytes += row_bytes(row);
                    if lease.bytes > lease.cache.budget / 8 {
                        // Too large: say so, so the waiting clients compute it themselves.
                        lease.whole = true;
                        lease.cache.too_large(&lease.key);
                        this.lease = None;
                    } else {
                        lease.rows.push(row.clone());
                    }
                }
            }
            Poll::Ready(Some(Err(_))) => this.lease = None,
            Poll::Ready(None) => {
                if let Some(mut lease) = this.lease.take() {
                    lease.whole = true;
                    let rows = std::mem::take(&mut lease.rows);
                    lease.cache.keep(&lease.key, this.fields.clone(), rows, lease.bytes);
                }
            }
            Poll::Pending => {}
        }
        next
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::prelude::SessionContext;
    use futures::StreamExt;

    async fn plan(ctx: &SessionContext, sql: &str) -> LogicalPlan {
        ctx.sql(sql).await.unwrap().logical_plan().clone()
    }

    /// Runs `plan` as the endpoint would, each result row one wire row; what happened and how
    /// many rows were sent.
    async fn run(ctx: &SessionContext, cache: &Arc<ResultCache>, plan: LogicalPlan) -> (&'static str, usize) {
        let lookup = cache.lookup(&plan, "text").await;
        let batches = || async { ctx.execute_logical_plan(plan.clone()).await.unwrap().collect().await.unwrap() };
        let wire = |n: usize| {
            (0..n)
                .map(|i| {
                    let mut row = DataRow::default();
                    row.data.extend_from_slice(i.to_string().as_bytes());
                    Ok(row)
                })
                .collect::<Vec<_>>()
        };
        match lookup {
            Lookup::Hit(answer) => ("hit", answer.rows.len()),
            Lookup::Uncached => ("uncached", batches().await.iter().map(|b| b.num_rows()).sum()),
            Lookup::Compute(lease) => {
                let n = batches().await.iter().map(|b| b.num_rows()).sum();
                let sent: Vec<_> = lease.gather(Arc::new(vec![]), futures::stream::iter(wire(n))).collect().await;
                ("computed", sent.len())
            }
        }
    }

    #[tokio::test]
    async fn the_same_statement_is_computed_once_while_it_is_kept() {
        let ctx = SessionContext::new();
        let cache = Arc::new(ResultCache::new(1 << 20, Duration::from_secs(60), Arc::default()));
        let q = "SELECT value FROM generate_series(1, 100) AS t(value) WHERE value > 50";
        assert_eq!(run(&ctx, &cache, plan(&ctx, q).await).await, ("computed", 50));
        assert_eq!(run(&ctx, &cache, plan(&ctx, q).await).await, ("hit", 50));
        // Another client's text settings are another answer.
        assert!(matches!(cache.lookup(&plan(&ctx, q).await, "text, DateStyle=German").await, Lookup::Compute(_)));
        // Another literal is another statement; now() and random() are never kept.
        assert_eq!(run(&ctx, &cache, plan(&ctx, &q.replace("50", "90")).await).await, ("computed", 10));
        assert_eq!(run(&ctx, &cache, plan(&ctx, "SELECT now() AS t").await).await, ("uncached", 1));
        assert_eq!(run(&ctx, &cache, plan(&ctx, "SELECT random() AS r FROM generate_series(1, 3)").await).await, ("uncached", 3));
        assert!(cache.bytes() > 0);
    }

    #[tokio::test]
    async fn answers_expire_and_large_ones_are_not_kept() {
        let ctx = SessionContext::new();
        let brief = Arc::new(ResultCache::new(1 << 20, Duration::ZERO, Arc::default()));
        let q = "SELECT value FROM generate_series(1, 10) AS t(value)";
        assert_eq!(run(&ctx, &brief, plan(&ctx, q).await).await, ("computed", 10));
        assert_eq!(run(&ctx, &brief, plan(&ctx, q).await).await, ("computed", 10), "kept for no time at all");
        // A budget of 64 KiB keeps answers up to 8 KiB: 10,000 rows are computed each time.
        let small = Arc::new(ResultCache::new(64 << 10, Duration::from_secs(60), Arc::default()));
        let big = "SELECT value FROM generate_series(1, 10000) AS t(value)";
        assert_eq!(run(&ctx, &small, plan(&ctx, big).await).await, ("computed", 10_000));
        assert_eq!(run(&ctx, &small, plan(&ctx, big).await).await, ("uncached", 10_000));
        assert_eq!(small.bytes(), 0);
    }

    #[tokio::test]
    async fn a_computation_given_up_keeps_nothing_and_the_next_client_computes() {
        let ctx = SessionContext::new();
        let cache = Arc::new(ResultCache::new(1 << 20, Duration::from_secs(60), Arc::default()));
        let p = plan(&ctx, "SELECT value FROM generate_series(1, 10) AS t(value)").await;
        let Lookup::Compute(lease) = cache.lookup(&p, "text").await else { panic!("the first lookup computes") };
        // A second client waits for the first...
        let waiting = {
            let (cache, p) = (cache.clone(), p.clone());
            tokio::spawn(async move { matches!(cache.lookup(&p, "text").await, Lookup::Compute(_)) })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "the second client should wait while the first computes");
        // ...which gives up (its client went away): the second computes it itself.
        drop(lease);
        assert!(waiting.await.unwrap());
        assert_eq!(cache.bytes(), 0);
    }
}
