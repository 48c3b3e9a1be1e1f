//! Per-statement limits shared by the SQL endpoint and the HTTP API.
//!
//! Every statement runs in its own session cut from the shared one: the same tables and
//! functions, but its own memory pool of `memory_limit` bytes, stacked on the server's pool of
//! `memory_total` bytes that all statements draw from together, and its plan checked against
//! its [`Stop`] between operators. The time limit covers planning, execution and the transfer
//! of the result: a slow client reading rows holds the query open, so the deadline is checked
//! while rows stream out too. A user runs at most `max_statements_per_user` statements at once
//! ([`Turns`]).

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use datafusion::error::DataFusionError;
use datafusion::execution::SessionStateBuilder;
use datafusion::execution::memory_pool::{GreedyMemoryPool, MemoryConsumer, MemoryLimit, MemoryPool, MemoryReservation, TrackConsumersPool};
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::prelude::SessionContext;
use futures::Stream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};

use crate::stop::Stop;

/// The limits of one statement, and the pool all statements share.
#[derive(Debug, Clone)]
pub struct Limits {
    pub timeout: Duration,
    pub memory: u64,
    /// The server's pool: a statement's reservation counts against it as well as its own.
    pub shared: Arc<dyn MemoryPool>,
    pub turns: Arc<Turns>,
}

impl Limits {
    pub fn new(timeout: Duration, memory: u64, total: u64, per_user: usize) -> Limits {
        let total = usize::try_from(total).unwrap_or(usize::MAX);
        Limits { timeout, memory, shared: Arc::new(GreedyMemoryPool::new(total)), turns: Arc::new(Turns::new(per_user)) }
    }

    /// A session for one statement: shares `base`'s tables, functions and file caches, owns
    /// its memory pool, and stops where `stop` says. The pool names its three largest
    /// consumers when a query runs out.
    pub fn session(&self, base: &SessionContext, stop: &Arc<Stop>) -> Result<SessionContext, DataFusionError> {
        let state = base.state();
        let memory = usize::try_from(self.memory).unwrap_or(usize::MAX);
        let own: Arc<dyn MemoryPool> = Arc::new(GreedyMemoryPool::new(memory));
        let stacked = Stacked { own, shared: self.shared.clone() };
        let pool = TrackConsumersPool::new(stacked, std::num::NonZeroUsize::new(3).unwrap_or(std::num::NonZeroUsize::MIN));
        let runtime = RuntimeEnvBuilder::from_runtime_env(state.runtime_env()).with_memory_pool(Arc::new(pool)).build_arc()?;
        let mut rules = state.physical_optimizers().to_vec();
        rules.push(stop.rule());
        let state = SessionStateBuilder::new_from_existing(state).with_runtime_env(runtime).with_physical_optimizer_rules(rules).build();
        Ok(SessionContext::new_with_state(state))
    }
}

/// How many statements each user runs at once. Past the limit a statement waits for a turn
/// (a dashboard's twenty panels queue rather than fail); the wait counts in its time limit.
#[derive(Debug)]
pub struct Turns {
    per_user: usize,
    users: Mutex<HashMap<String, Arc<Semaphore>>>,
}

impl Turns {
    pub fn new(per_user: usize) -> Turns {
        Turns { per_user: per_user.max(1), users: Mutex::new(HashMap::new()) }
    }

    /// Waits for one of `user`'s turns until `deadline`: None when none came in time. The
    /// turn is given back when the permit is dropped.
    pub async fn wait(&self, user: &str, deadline: Instant) -> Option<OwnedSemaphorePermit> {
        let places = {
            let mut users = self.users.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            users.entry(user.to_owned()).or_insert_with(|| Arc::new(Semaphore::new(self.per_user))).clone()
        };
        tokio::time::timeout_at(deadline, places.acquire_owned()).await.ok()?.ok()
    }

    pub fn per_user(&self) -> usize {
        self.per_user
    }
}

/// A statement's own pool stacked on the server's: memory is granted only when both have it,
/// so one statement cannot pass `memory_limit` and all of them together cannot pass
/// `memory_total`.
#[derive(Debug)]
struct Stacked {
    own: Arc<dyn MemoryPool>,
    shared: Arc<dyn MemoryPool>,
}

impl std::fmt::Display for Stacked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "statement pool {} within server pool {}", self.own, self.shared)
    }
}

impl MemoryPool for Stacked {
    fn name(&self) -> &str {
        "gpuledger-statement"
    }

    fn register(&self, consumer: &MemoryConsumer) {
        self.own.register(consumer);
        self.shared.register(consumer);
    }

    fn unregister(&self, consumer: &MemoryConsumer) {
        self.own.unregister(consumer);
        self.shared.unregister(consumer);
    }

    fn grow(&self, reservation: &MemoryReservation, additional: usize) {
        self.own.grow(reservation, additional);
        self.shared.grow(reservation, additional);
    }

    fn shrink(&self, reservation: &MemoryReservation, shrink: usize) {
        self.own.shrink(reservation, shrink);
        self.shared.shrink(reservation, shrink);
    }

    fn try_grow(&self, reservation: &MemoryReservation, additional: usize) -> Result<(), DataFusionError> {
        self.own.try_grow(reservation, additional)?;
        if let Err(e) = self.shared.try_grow(reservation, additional) {
            self.own.shrink(reservation, additional);
            return Err(DataFusionError::ResourcesExhausted(format!("the server's memory_total is in use by other statements: {e}")));
        }
        Ok(())
    }

    fn reserved(&self) -> usize {
        self.own.reserved()
    }

    fn memory_limit(&self) -> MemoryLimit {
        self.own.memory_limit()
    }
}

/// A stream that ends with `on_timeout()` once `deadline` passes; dropping the inner stream
/// cancels the query behind it.
pub struct Deadline<S, E> {
    inner: Option<Pin<Box<S>>>,
    sleep: Pin<Box<Sleep>>,
    on_timeout: Option<E>,
}

impl<S, E> Deadline<S, E> {
    pub fn new(inner: S, deadline: Instant, on_timeout: E) -> Self {
        Deadline { inner: Some(Box::pin(inner)), sleep: Box::pin(tokio::time::sleep_until(deadline)), on_timeout: Some(on_timeout) }
    }
}

impl<S, T, Err, E> Stream for Deadline<S, E>
where
    S: Stream<Item = Result<T, Err>>,
    E: FnOnce() -> Err + Unpin,
{
    type Item = Result<T, Err>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        let Some(inner) = this.inner.as_mut() else { return Poll::Ready(None) };
        if this.sleep.as_mut().poll(cx).is_ready() {
            this.inner = None;
            return Poll::Ready(this.on_timeout.take().map(|f| Err(f())));
        }
        inner.as_mut().poll_next(cx)
    }
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;

    use super::*;

    // On tokio's paused clock, which moves only when every task waits: items at 40, 80 and
    // 120 ms, the deadline at 150 ms, whatever else the machine is doing.
    #[tokio::test(start_paused = true)]
    async fn deadline_ends_a_slow_stream_with_the_timeout_error() {
        let slow = futures::stream::unfold(0u32, |n| async move {
            tokio::time::sleep(Duration::from_millis(40)).await;
            Some((Ok::<u32, String>(n), n + 1))
        });
        let items: Vec<Result<u32, String>> = Deadline::new(slow, Instant::now() + Duration::from_millis(150), || "too slow".to_string()).collect().await;
        let (ok, err): (Vec<_>, Vec<_>) = items.into_iter().partition(Result::is_ok);
        assert_eq!(ok, vec![Ok(0), Ok(1), Ok(2)]);
        assert_eq!(err, vec![Err("too slow".to_string())]);
    }

    #[tokio::test]
    async fn a_query_over_the_memory_limit_fails_and_one_under_it_runs() {
        let base = SessionContext::new();
        let stop = crate::stop::Stop::new(crate::stop::TimeLimit::of(Duration::from_secs(60), None));
        let small = Limits::new(Duration::from_secs(10), 1 << 20, 1 << 30, 1);
        // Sorting 2M distinct values needs far more than 1 MiB; spilling is impossible without
        // the rows fitting a batch, so the pool refuses.
        let sql = "SELECT v FROM (SELECT value * 7919 % 2000003 AS v FROM generate_series(1, 2000000)) ORDER BY v DESC LIMIT 5 OFFSET 1000000";
        let err = small.session(&base, &stop).unwrap().sql(sql).await.unwrap().collect().await.unwrap_err();
        assert!(err.to_string().contains("Resources exhausted"), "{err}");
        let big = Limits::new(Duration::from_secs(10), 1 << 30, 1 << 30, 1);
        let rows: usize = big.session(&base, &stop).unwrap().sql(sql).await.unwrap().collect().await.unwrap().iter().map(|b| b.num_rows()).sum();
        assert_eq!(rows, 5);
        // Every statement's memory is back in the server's pool once it is done.
        assert_eq!(big.shared.reserved(), 0);
        // A statement within its own limit still fails when the server's pool is short.
        let crowded = Limits::new(Duration::from_secs(10), 1 << 30, 1 << 20, 1);
        let err = crowded.session(&base, &stop).unwrap().sql(sql).await.unwrap().collect().await.unwrap_err();
        assert!(err.to_string().contains("memory_total"), "{err}");
    }

    // On tokio's paused clock: a third statement waits for one of the user's two turns, gets
    // it when one ends, and gives up at its deadline when none does; other users are not held.
    #[tokio::test(start_paused = true)]
    async fn a_user_past_the_limit_waits_for_a_turn_until_the_deadline() {
        let turns = Turns::new(2);
        let soon = Instant::now() + Duration::from_secs(1);
        let a = turns.wait("grafana", soon).await.unwrap();
        let _b = turns.wait("grafana", soon).await.unwrap();
        assert!(turns.wait("grafana", soon).await.is_none());
        assert!(turns.wait("analyst", Instant::now() + Duration::from_secs(1)).await.is_some());
        let later = Instant::now() + Duration::from_secs(10);
        let (third, ()) = tokio::join!(turns.wait("grafana", later), async move {
            tokio::time::sleep(Duration::from_secs(2)).await;
            drop(a);
        });
        assert!(third.is_some());
    }
}
