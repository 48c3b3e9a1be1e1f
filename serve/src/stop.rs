//! Stopping a running statement: at its deadline, or when the client cancels it.
//!
//! Dropping a query's stream stops it only once the task polling it gets back to the scheduler,
//! and DataFusion's operators do not always do that: an aggregate over a cross join pulls batch
//! after batch from an input that is never empty, and its task holds a worker thread until the
//! join is done (hours, for a runaway join). So every statement's physical plan is rewritten
//! with a [`StopCheckExec`] above each operator. Between any two operators it
//!
//! - checks the statement's [`Stop`]: once the deadline has passed or a cancel request came,
//!   the statement fails with that reason at the next batch, whatever operator is busy;
//! - spends the task's tokio budget (as DataFusion's own `CooperativeExec` does at the
//!   sources), so a busy statement yields its worker every few dozen batches and the
//!   statements, logins and catalog queries sharing the workers take turns.
//!
//! The check is one atomic load and one clock read per batch per operator.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use datafusion::arrow::array::RecordBatch;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties, SendableRecordBatchStream};
use futures::{Stream, StreamExt};

/// The time limit a statement runs under, and the setting it comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeLimit {
    /// `query_timeout` (the server's) or `statement_timeout` (the client's, when shorter).
    pub setting: &'static str,
    pub limit: Duration,
}

impl TimeLimit {
    /// The server's `query_timeout`, shortened by a client's own `statement_timeout`.
    pub fn of(query_timeout: Duration, statement_timeout: Option<Duration>) -> TimeLimit {
        match statement_timeout {
            // PostgreSQL reads 0 as "no limit": the server's own still holds.
            Some(t) if !t.is_zero() && t < query_timeout => TimeLimit { setting: "statement_timeout", limit: t },
            _ => TimeLimit { setting: "query_timeout", limit: query_timeout },
        }
    }
}

/// Why a statement was stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    TimedOut,
    Cancelled,
}

const RUNNING: u8 = 0;
const TIMED_OUT: u8 = 1;
const CANCELLED: u8 = 2;

/// One statement's stop signal, shared by its plan's checks, the cancel watcher and the code
/// that reports the outcome.
#[derive(Debug)]
pub struct Stop {
    state: AtomicU8,
    deadline: Instant,
    time: TimeLimit,
}

impl Stop {
    pub fn new(time: TimeLimit) -> Arc<Stop> {
        Arc::new(Stop { state: AtomicU8::new(RUNNING), deadline: Instant::now() + time.limit, time })
    }

    /// The deadline on tokio's clock, for timers around the statement.
    pub fn deadline(&self) -> tokio::time::Instant {
        tokio::time::Instant::from_std(self.deadline)
    }

    /// A client's cancel request: the statement fails at its next batch.
    pub fn cancel(&self) {
        let _ = self.state.compare_exchange(RUNNING, CANCELLED, Ordering::Relaxed, Ordering::Relaxed);
    }

    /// Whether the statement must stop now, and why (the first reason sticks).
    pub fn check(&self) -> Option<Why> {
        if let Some(why) = self.stopped() {
            return Some(why);
        }
        (Instant::now() >= self.deadline).then(|| self.expire())
    }

    /// The deadline has passed (a timer around the statement fired): it is timed out unless a
    /// cancel came first. Returns the reason that sticks.
    pub fn expire(&self) -> Why {
        let _ = self.state.compare_exchange(RUNNING, TIMED_OUT, Ordering::Relaxed, Ordering::Relaxed);
        self.stopped().unwrap_or(Why::TimedOut)
    }

    /// The reason it was stopped, without looking at the clock.
    pub fn stopped(&self) -> Option<Why> {
        match self.state.load(Ordering::Relaxed) {
            TIMED_OUT => Some(Why::TimedOut),
            CANCELLED => Some(Why::Cancelled),
            _ => None,
        }
    }

    /// What the client is told, naming the limit that fired.
    pub fn message(&self, why: Why) -> String {
        match why {
            Why::TimedOut => format!("canceling statement: it ran longer than {} ({})", self.time.setting, gpuledger_schemas::units::format_duration(self.time.limit)),
            Why::Cancelled => "canceling statement due to user request".to_owned(),
        }
    }

    /// The physical optimizer rule that puts this stop's checks into a statement's plan.
    pub fn rule(self: &Arc<Self>) -> Arc<dyn PhysicalOptimizerRule + Send + Sync> {
        Arc::new(StopChecks { stop: self.clone() })
    }
}

/// The error a stopped plan ends with; callers report it through [`Stop::message`].
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Stopped(String);

/// Wraps every operator of a plan in a [`StopCheckExec`]. Runs after DataFusion's own rules,
/// so none of them has to know the wrapper.
#[derive(Debug)]
struct StopChecks {
    stop: Arc<Stop>,
}

impl PhysicalOptimizerRule for StopChecks {
    fn optimize(&self, plan: Arc<dyn ExecutionPlan>, _config: &ConfigOptions) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| Ok(Transformed::yes(Arc::new(StopCheckExec { input: node, stop: self.stop.clone() }) as Arc<dyn ExecutionPlan>))).map(|t| t.data)
    }

    fn name(&self) -> &str {
        "gpuledger_stop_checks"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// Passes its input's batches through unchanged, checking the statement's [`Stop`] and
/// spending the task's budget on each.
#[derive(Debug)]
pub struct StopCheckExec {
    input: Arc<dyn ExecutionPlan>,
    stop: Arc<Stop>,
}

impl DisplayAs for StopCheckExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StopCheckExec")
    }
}

impl ExecutionPlan for StopCheckExec {
    fn name(&self) -> &str {
        "StopCheckExec"
    }

    // Code that looks for an operator's type sees through the check.
    fn downcast_delegate(&self) -> Option<&dyn ExecutionPlan> {
        Some(self.input.as_ref())
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.input.properties()
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![true]
    }

    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        vec![false]
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn apply_expressions(&self, _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(self: Arc<Self>, mut children: Vec<Arc<dyn ExecutionPlan>>) -> Result<Arc<dyn ExecutionPlan>> {
        match (children.pop(), children.is_empty()) {
            (Some(input), true) => Ok(Arc::new(StopCheckExec { input, stop: self.stop.clone() })),
            _ => Err(DataFusionError::Internal("StopCheckExec takes exactly one input".into())),
        }
    }

    fn execute(&self, partition: usize, context: Arc<TaskContext>) -> Result<SendableRecordBatchStream> {
        // A statement stopped before this part of the plan starts does not start it.
        if let Some(why) = self.stop.check() {
            return Err(DataFusionError::External(Box::new(Stopped(self.stop.message(why)))));
        }
        let input = self.input.execute(partition, context)?;
        let schema = input.schema();
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, Checked { input, stop: self.stop.clone(), done: false })))
    }
}

struct Checked {
    input: SendableRecordBatchStream,
    stop: Arc<Stop>,
    done: bool,
}

impl Stream for Checked {
    type Item = Result<RecordBatch>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(None);
        }
        if let Some(why) = this.stop.check() {
            this.done = true;
            return Poll::Ready(Some(Err(DataFusionError::External(Box::new(Stopped(this.stop.message(why)))))));
        }
        // Out of budget: Pending now, and the task is woken again after the others had a turn.
        let coop = std::task::ready!(tokio::task::coop::poll_proceed(cx));
        let next = this.input.poll_next_unpin(cx);
        if next.is_ready() {
            coop.made_progress();
        }
        next
    }
}

#[cfg(test)]
mod tests {
    use datafusion::prelude::SessionContext;

    use super::*;

    fn stopped_session(stop: &Arc<Stop>) -> SessionContext {
        let base = SessionContext::new();
        let state = base.state();
        let mut rules = state.physical_optimizers().to_vec();
        rules.push(stop.rule());
        let state = datafusion::execution::SessionStateBuilder::new_from_existing(state).with_physical_optimizer_rules(rules).build();
        SessionContext::new_with_state(state)
    }

    // A runaway: 10^14 rows to count. Without the checks it holds its thread for hours.
    const RUNAWAY: &str = "SELECT count(*) FROM generate_series(1, 10000000) AS a(x) CROSS JOIN generate_series(1, 10000000) AS b(y)";

    #[test]
    fn the_client_limit_counts_only_when_it_is_shorter_and_not_zero() {
        let ours = Duration::from_secs(60);
        assert_eq!(TimeLimit::of(ours, None), TimeLimit { setting: "query_timeout", limit: ours });
        assert_eq!(TimeLimit::of(ours, Some(Duration::from_secs(5))), TimeLimit { setting: "statement_timeout", limit: Duration::from_secs(5) });
        assert_eq!(TimeLimit::of(ours, Some(Duration::from_secs(600))).setting, "query_timeout");
        assert_eq!(TimeLimit::of(ours, Some(Duration::ZERO)).setting, "query_timeout");
    }

    // One worker thread: if the plan did not stop itself, nothing else could run to stop it,
    // and the test would hang instead of failing (the deadline is 300 ms; the join takes hours).
    #[tokio::test(flavor = "current_thread")]
    async fn a_runaway_join_stops_itself_at_its_deadline() {
        let stop = Stop::new(TimeLimit { setting: "statement_timeout", limit: Duration::from_millis(300) });
        let err = stopped_session(&stop).sql(RUNAWAY).await.unwrap().collect().await.unwrap_err();
        assert_eq!(stop.stopped(), Some(Why::TimedOut));
        assert!(err.to_string().contains("it ran longer than statement_timeout (300ms)"), "{err}");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_cancelled_statement_fails_and_other_tasks_get_turns_meanwhile() {
        let stop = Stop::new(TimeLimit { setting: "query_timeout", limit: Duration::from_secs(3600) });
        let ctx = stopped_session(&stop);
        let running = tokio::spawn(async move { ctx.sql(RUNAWAY).await?.collect().await });
        // On the one worker, this task runs again only if the statement yields; then it cancels.
        let mut turns = 0;
        while turns < 5 {
            tokio::task::yield_now().await;
            turns += 1;
        }
        stop.cancel();
        let err = running.await.unwrap().unwrap_err();
        assert_eq!(stop.stopped(), Some(Why::Cancelled));
        assert!(err.to_string().contains("due to user request"), "{err}");
    }

    #[tokio::test]
    async fn checks_change_no_answer() {
        let stop = Stop::new(TimeLimit { setting: "query_timeout", limit: Duration::from_secs(3600) });
        let sql = "SELECT x % 7 AS k, count(*) AS n, sum(x) AS s FROM generate_series(1, 100000) AS t(x) GROUP BY x % 7 ORDER BY k";
        let checked = stopped_session(&stop).sql(sql).await.unwrap().collect().await.unwrap();
        let plain = SessionContext::new().sql(sql).await.unwrap().collect().await.unwrap();
        assert_eq!(datafusion::arrow::util::pretty::pretty_format_batches(&checked).unwrap().to_string(), datafusion::arrow::util::pretty::pretty_format_batches(&plain).unwrap().to_string());
        let plan = stopped_session(&stop).sql(sql).await.unwrap().create_physical_plan().await.unwrap();
        let shown = datafusion::physical_plan::displayable(plan.as_ref()).indent(false).to_string();
        assert!(shown.lines().count() >= 4 && shown.lines().step_by(2).all(|l| l.contains("StopCheckExec")), "{shown}");
    }
}
