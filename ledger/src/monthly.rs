//! Reads one month into a [`Report`] from the report views (`queries/90_reports.sql`) and the
//! derived tables, in a finished accounting run's session or over the ledger a `gpuledger
//! ledger` run stored (what `gpuledger serve` reads): the same SQL either way.
//!
//! The month is a bound parameter; each column is read with its type ([`crate::decode`]): amounts
//! of money from their exact decimals (`DECIMAL(38, 6)`), turned into floats only for the
//! renderers, which format them (2 decimals in text, 4 in CSV) and never add them up into a
//! figure of the ledger's.

use arrow::record_batch::RecordBatch;
use datafusion::prelude::SessionContext;

use crate::accounting::Accounting;
use crate::config::IdlePolicy;
use crate::types::{Month, State};
use gpuledger_engine::decode::decode;
use crate::error::Result;
use crate::report::{BudgetRow, ChargebackRow, EnergyRow, FailureCauseRow, IdleReason, IdleReasonRow, QueueWaitRow, Report, StrandedRow, UnitsRow, UsageRow};

/// A month's failure causes, budgets and queue waits, each in the order the report lists them
/// (`$1` binds the month); the HTTP API lists them the same way.
pub const FAILURE_CAUSES_SQL: &str = "SELECT * FROM failure_causes WHERE month = $1 ORDER BY cost DESC, gpu_hours DESC, cause";
pub const BUDGETS_SQL: &str = "SELECT * FROM budget_monthly WHERE month = $1 ORDER BY forecast_ratio DESC, team";
pub const QUEUE_WAITS_SQL: &str = "SELECT * FROM queue_wait_monthly WHERE month = $1 ORDER BY team, cluster_queue";
pub const IDLE_REASONS_SQL: &str = "SELECT * FROM idle_reasons_monthly WHERE month = $1 ORDER BY rank";
pub const STRANDED_SQL: &str = "SELECT * FROM stranded_monthly WHERE month = $1 ORDER BY pool NULLS LAST, model_name";

impl Accounting {
    /// The report of `month` (`YYYY-MM`). Queue waits are those of admissions in that month.
    pub async fn report(&self, month: &Month, currency: &str, idle_policy: IdlePolicy) -> Result<Report> {
        read_report(self.context(), month, currency, idle_policy).await
    }

    /// The month with the most GPU-hours (all states), the earliest on a tie.
    pub async fn busiest_month(&self) -> Result<Option<Month>> {
        busiest_month(self.context()).await
    }

    /// Months that have GPU time, overheads or units, oldest first.
    pub async fn months(&self) -> Result<Vec<Month>> {
        months(self.context()).await
    }
}

/// The report of `month` from a session holding the stored derived tables and the report views
/// (see [`crate::derived::register`]): the same figures the accounting run that wrote them gave.
pub async fn stored_report(ctx: &SessionContext, month: &Month, currency: &str, idle_policy: IdlePolicy) -> Result<Report> {
    read_report(ctx, month, currency, idle_policy).await
}

/// Months of the stored chargeback, oldest first, and the busiest of them.
pub async fn stored_months(ctx: &SessionContext) -> Result<(Vec<Month>, Option<Month>)> {
    Ok((months(ctx).await?, busiest_month(ctx).await?))
}

/// Runs `sql` with `$1` bound to `month` (when given).
pub(crate) async fn query(ctx: &SessionContext, sql: &str, month: Option<&str>) -> Result<Vec<RecordBatch>> {
    gpuledger_engine::exec::query_month(ctx, sql, month).await
}

/// Months that have GPU time, overheads or units, oldest first.
pub(crate) async fn months(ctx: &SessionContext) -> Result<Vec<Month>> {
    let batches = query(ctx, "SELECT month FROM report_months ORDER BY month", None).await?;
    decode(&batches, "report_months", |c| c.parsed::<Month>("month"))
}

/// The month with the most GPU-hours (all states), the earliest on a tie.
pub(crate) async fn busiest_month(ctx: &SessionContext) -> Result<Option<Month>> {
    let batches = query(ctx, "SELECT month FROM report_months ORDER BY gpu_hours DESC, month LIMIT 1", None).await?;
    Ok(decode(&batches, "report_months", |c| c.parsed::<Month>("month"))?.into_iter().next())
}

async fn read_report(ctx: &SessionContext, month: &Month, currency: &str, idle_policy: IdlePolicy) -> Result<Report> {
    let rows = async |sql: &str| query(ctx, sql, Some(month.as_str())).await;
    let chargeback = decode(&rows("SELECT * FROM chargeback_monthly WHERE month = $1 ORDER BY team").await?, "chargeback_monthly", |c| {
        let (month, team) = (c.text("month")?, c.text("team")?);
        let n = |name: &str| c.f64(name);
        let money = |name: &str| c.money(name);
        let (productive, allocated_idle, failed, preempted, unallocated) =
            (n("productive_gpu_hours")?, n("allocated_idle_gpu_hours")?, n("failed_gpu_hours")?, n("preempted_gpu_hours")?, n("unallocated_gpu_hours")?);
        let (compute, network, storage, support, idle, failed_runs, operations, total) = (
            money("compute")?,
            money("network")?,
            money("storage")?,
            money("support")?,
            money("idle")?,
            money("failed_runs")?,
            money("operations")?,
            money("total")?,
        );
        let (units, per_unit, provisional) = (n("accepted_units")?, c.opt_money("cost_per_accepted_unit")?, n("provisional_gpu_hours")?);
        let (lost_hours, lost_cost) = (n("lost_gpu_hours_platform_paid")?, money("lost_cost_platform_paid")?);
        Ok((0..c.rows())
            .map(|i| ChargebackRow {
                month: month[i].clone(),
                team: team[i].clone(),
                productive_gpu_hours: productive[i],
                allocated_idle_gpu_hours: allocated_idle[i],
                failed_gpu_hours: failed[i],
                preempted_gpu_hours: preempted[i],
                unallocated_gpu_hours: unallocated[i],
                compute: compute[i],
                network: network[i],
                storage: storage[i],
                support: support[i],
                idle: idle[i],
                failed_runs: failed_runs[i],
                operations: operations[i],
                total: total[i],
                accepted_units: units[i],
                cost_per_accepted_unit: per_unit[i],
                provisional_gpu_hours: provisional[i],
                lost_gpu_hours_platform_paid: lost_hours[i],
                lost_cost_platform_paid: lost_cost[i],
            })
            .collect())
    })?;
    let units = decode(&rows("SELECT * FROM accepted_units_monthly WHERE month = $1 ORDER BY team, unit").await?, "accepted_units_monthly", |c| {
        let (month, team, unit, units) = (c.text("month")?, c.text("team")?, c.text("unit")?, c.f64("accepted_units")?);
        Ok((0..c.rows()).map(|i| UnitsRow { month: month[i].clone(), team: team[i].clone(), unit: unit[i].clone(), accepted_units: units[i] }).collect())
    })?;
    let usage_sql = "SELECT * FROM report_usage WHERE month = $1 ORDER BY team, state, model_name, platform_paid";
    let usage = decode(&rows(usage_sql).await?, "report_usage", |c| {
        let (month, team, state, model) = (c.text("month")?, c.text("team")?, c.parsed::<State>("state")?, c.text("model_name")?);
        let (hours, provisional, cost, units, paid) = (c.f64("gpu_hours")?, c.f64("provisional_gpu_hours")?, c.money("cost")?, c.f64("accepted_units")?, c.bool("platform_paid")?);
        Ok((0..c.rows())
            .map(|i| UsageRow {
                month: month[i].clone(),
                team: team[i].clone(),
                state: state[i],
                model_name: model[i].clone(),
                gpu_hours: hours[i],
                provisional_gpu_hours: provisional[i],
                cost: cost[i],
                accepted_units: units[i],
                platform_paid: paid[i],
            })
            .collect())
    })?;
    let failure_causes = decode(&rows(FAILURE_CAUSES_SQL).await?, "failure_causes", |c| {
        let (outcome, cause, segments, hours, cost) = (c.parsed::<State>("outcome")?, c.text("cause")?, c.i64("segments")?, c.f64("gpu_hours")?, c.money("cost")?);
        Ok((0..c.rows())
            .map(|i| FailureCauseRow { outcome: outcome[i], cause: cause[i].clone(), segments: segments[i], gpu_hours: hours[i], cost: cost[i] })
            .collect())
    })?;
    let queue_waits = decode(&rows(QUEUE_WAITS_SQL).await?, "queue_wait_monthly", |c| {
        let (team, queue, admissions) = (c.text("team")?, c.text("cluster_queue")?, c.i64("admissions")?);
        let (p50, p95, max) = (c.f64("p50_seconds")?, c.f64("p95_seconds")?, c.f64("max_seconds")?);
        let (evictions, reasons) = (c.i64("evictions")?, c.text("eviction_reasons")?);
        Ok((0..c.rows())
            .map(|i| QueueWaitRow {
                team: team[i].clone(),
                cluster_queue: queue[i].clone(),
                admissions: admissions[i],
                p50_seconds: p50[i],
                p95_seconds: p95[i],
                max_seconds: max[i],
                evictions: evictions[i],
                eviction_reasons: reasons[i].clone(),
            })
            .collect())
    })?;
    let budgets = decode(&rows(BUDGETS_SQL).await?, "budget_monthly", |c| {
        let (month, team) = (c.text("month")?, c.text("team")?);
        let (budget, spend, forecast) = (c.money("budget")?, c.money("spend")?, c.money("forecast")?);
        let (used, forecast_ratio, elapsed, days) = (c.f64("used_ratio")?, c.f64("forecast_ratio")?, c.f64("elapsed_days")?, c.f64("month_days")?);
        Ok((0..c.rows())
            .map(|i| BudgetRow {
                month: month[i].clone(),
                team: team[i].clone(),
                budget: budget[i],
                spend: spend[i],
                forecast: forecast[i],
                used_ratio: used[i],
                forecast_ratio: forecast_ratio[i],
                elapsed_days: elapsed[i],
                month_days: days[i],
            })
            .collect())
    })?;
    let energy = decode(&rows("SELECT * FROM report_energy WHERE month = $1 ORDER BY team").await?, "report_energy", |c| {
        let team = c.text("team")?;
        let (kwh, facility, co2) = (c.f64("kwh")?, c.f64("facility_kwh")?, c.opt_f64("kg_co2e")?);
        let (per_unit, cost_per_unit) = (c.opt_f64("kwh_per_accepted_unit")?, c.opt_money("cost_per_accepted_unit")?);
        let (hours, measured) = (c.f64("gpu_hours")?, c.f64("measured_gpu_hours")?);
        Ok((0..c.rows())
            .map(|i| EnergyRow {
                team: team[i].clone(),
                kwh: kwh[i],
                facility_kwh: facility[i],
                kg_co2e: co2[i],
                kwh_per_accepted_unit: per_unit[i],
                cost_per_accepted_unit: cost_per_unit[i],
                gpu_hours: hours[i],
                measured_gpu_hours: measured[i],
            })
            .collect())
    })?;
    let idle_reasons = decode(&rows(IDLE_REASONS_SQL).await?, "idle_reasons_monthly", |c| {
        let (rank, team, state, reason) = (c.i64("rank")?, c.text("team")?, c.parsed::<State>("state")?, c.parsed::<IdleReason>("reason")?);
        let (hours, cost) = (c.f64("gpu_hours")?, c.money("cost")?);
        Ok((0..c.rows())
            .map(|i| IdleReasonRow { rank: rank[i], team: team[i].clone(), state: state[i], reason: reason[i], gpu_hours: hours[i], cost: cost[i] })
            .collect())
    })?;
    let stranded = decode(&rows(STRANDED_SQL).await?, "stranded_monthly", |c| {
        let (pool, model) = (c.opt_text("pool")?, c.text("model_name")?);
        let (unallocated, stranded, cost, cordoned) = (c.f64("unallocated_gpu_hours")?, c.f64("stranded_gpu_hours")?, c.money("stranded_cost")?, c.f64("cordoned_gpu_hours")?);
        Ok((0..c.rows())
            .map(|i| StrandedRow {
                pool: pool[i].clone(),
                model_name: model[i].clone(),
                unallocated_gpu_hours: unallocated[i],
                stranded_gpu_hours: stranded[i],
                stranded_cost: cost[i],
                cordoned_gpu_hours: cordoned[i],
            })
            .collect())
    })?;
    Ok(Report {
        month: month.clone(),
        currency: currency.to_string(),
        idle_policy,
        chargeback,
        units,
        usage,
        failure_causes,
        queue_waits,
        budgets,
        energy,
        idle_reasons,
        stranded,
    })
}
