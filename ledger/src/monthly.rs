//! Reads one month into a [`Report`] from the report views (`queries/90_reports.sql`) and the
//! derived tables, in a finished accounting run's session or over the ledger a `gpuledger
//! ledger` run stored (what `gpuledger serve` reads): the same SQL either way.
//!
//! The month is a bound parameter; each column is read by the type its table's declaration
//! gives it (`gpuledger_engine::decode_rows!` over `gpuledger_schemas::derived`): amounts
//! of money from their exact decimals (`DECIMAL(38, 6)`), turned into floats only for the
//! renderers, which format them (2 decimals in text, 4 in CSV) and never add them up into a
//! figure of the ledger's.

use arrow::record_batch::RecordBatch;
use datafusion::prelude::SessionContext;

use crate::accounting::Accounting;
use crate::config::IdlePolicy;
use crate::types::{Month, State};
use gpuledger_engine::decode::{Columns, FromColumn, decode_declared};
use gpuledger_engine::decode_rows;
use gpuledger_schemas::derived::{ACCEPTED_UNITS_MONTHLY, ANOMALIES_DAILY, ANOMALY_DRIVERS, QUOTA_MONTHLY, BUDGET_MONTHLY, CHARGEBACK_MONTHLY, FAILURE_CAUSES, IDLE_REASONS_MONTHLY, QUEUE_WAIT_MONTHLY, REPORT_ENERGY, REPORT_MONTHS, REPORT_USAGE, STRANDED_MONTHLY};
use crate::error::Result;
use crate::report::{AnomalyDriverRow, AnomalyRow, BudgetRow, QuotaRow, ChargebackRow, EnergyRow, FailureCauseRow, IdleReason, IdleReasonRow, QueueWaitRow, Report, StrandedRow, UnitsRow, UsageRow};

/// A month's failure causes, budgets and queue waits, each in the order the report lists them
/// (`$1` binds the month); the HTTP API lists them the same way.
pub const FAILURE_CAUSES_SQL: &str = "SELECT * FROM failure_causes WHERE month = $1 ORDER BY cost DESC, gpu_hours DESC, cause";
pub const BUDGETS_SQL: &str = "SELECT * FROM budget_monthly WHERE month = $1 ORDER BY forecast_ratio DESC, team";
pub const QUEUE_WAITS_SQL: &str = "SELECT * FROM queue_wait_monthly WHERE month = $1 ORDER BY team, cluster_queue";
pub const IDLE_REASONS_SQL: &str = "SELECT * FROM idle_reasons_monthly WHERE month = $1 ORDER BY rank";
pub const STRANDED_SQL: &str = "SELECT * FROM stranded_monthly WHERE month = $1 ORDER BY pool NULLS LAST, model_name";
pub const ANOMALIES_SQL: &str = "SELECT * FROM anomalies_daily WHERE month = $1 ORDER BY day, team";
pub const QUOTA_SQL: &str = "SELECT * FROM quota_monthly WHERE month = $1 ORDER BY cluster_queue, flavor";
pub const ANOMALY_DRIVERS_SQL: &str = "SELECT * FROM anomaly_drivers WHERE month = $1 ORDER BY day, team, rank";

/// Report columns whose text names a month, a state or an idle reason: any other text is an
/// error naming the column.
macro_rules! from_text_column {
    ($($t:ty),+) => {
        $(impl FromColumn for $t {
            fn read(c: &Columns<'_>, name: &str) -> Result<Vec<Self>> {
                c.parsed(name)
            }
        })+
    };
}
from_text_column!(Month, State, IdleReason);

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
    decode_declared(&batches, &REPORT_MONTHS, |c| Month::read(c, "month"))
}

/// The month with the most GPU-hours (all states), the earliest on a tie.
pub(crate) async fn busiest_month(ctx: &SessionContext) -> Result<Option<Month>> {
    let batches = query(ctx, "SELECT month FROM report_months ORDER BY gpu_hours DESC, month LIMIT 1", None).await?;
    Ok(decode_declared(&batches, &REPORT_MONTHS, |c| Month::read(c, "month"))?.into_iter().next())
}

/// Each report row's fields are named as the columns they are read from; the declarations in
/// `gpuledger_schemas::derived` say which are amounts of money.
async fn read_report(ctx: &SessionContext, month: &Month, currency: &str, idle_policy: IdlePolicy) -> Result<Report> {
    let rows = async |sql: &str| query(ctx, sql, Some(month.as_str())).await;
    let chargeback = decode_rows!(&rows("SELECT * FROM chargeback_monthly WHERE month = $1 ORDER BY team").await?, CHARGEBACK_MONTHLY => ChargebackRow {
        month, team, productive_gpu_hours, allocated_idle_gpu_hours, failed_gpu_hours, preempted_gpu_hours, unallocated_gpu_hours,
        compute, network, storage, support, idle, failed_runs, operations, total,
        accepted_units, cost_per_accepted_unit, provisional_gpu_hours, lost_gpu_hours_platform_paid, lost_cost_platform_paid,
    })?;
    let units = decode_rows!(&rows("SELECT * FROM accepted_units_monthly WHERE month = $1 ORDER BY team, unit").await?, ACCEPTED_UNITS_MONTHLY => UnitsRow {
        month, team, unit, accepted_units,
    })?;
    let usage_sql = "SELECT * FROM report_usage WHERE month = $1 ORDER BY team, state, model_name, platform_paid";
    let usage = decode_rows!(&rows(usage_sql).await?, REPORT_USAGE => UsageRow {
        month, team, state, model_name, gpu_hours, provisional_gpu_hours, cost, accepted_units, platform_paid,
    })?;
    let failure_causes = decode_rows!(&rows(FAILURE_CAUSES_SQL).await?, FAILURE_CAUSES => FailureCauseRow { outcome, cause, segments, gpu_hours, cost })?;
    let queue_waits = decode_rows!(&rows(QUEUE_WAITS_SQL).await?, QUEUE_WAIT_MONTHLY => QueueWaitRow {
        team, cluster_queue, admissions, p50_seconds, p95_seconds, max_seconds, evictions, eviction_reasons,
    })?;
    let budgets = decode_rows!(&rows(BUDGETS_SQL).await?, BUDGET_MONTHLY => BudgetRow {
        month, team, budget, spend, forecast, used_ratio, forecast_ratio, elapsed_days, month_days,
    })?;
    let energy = decode_rows!(&rows("SELECT * FROM report_energy WHERE month = $1 ORDER BY team").await?, REPORT_ENERGY => EnergyRow {
        team, kwh, facility_kwh, kg_co2e, kwh_per_accepted_unit, cost_per_accepted_unit, gpu_hours, measured_gpu_hours,
    })?;
    let idle_reasons = decode_rows!(&rows(IDLE_REASONS_SQL).await?, IDLE_REASONS_MONTHLY => IdleReasonRow { rank, team, state, reason, gpu_hours, cost })?;
    let stranded = decode_rows!(&rows(STRANDED_SQL).await?, STRANDED_MONTHLY => StrandedRow {
        pool, model_name, unallocated_gpu_hours, stranded_gpu_hours, stranded_cost, cordoned_gpu_hours,
    })?;
    let anomalies = decode_rows!(&rows(ANOMALIES_SQL).await?, ANOMALIES_DAILY => AnomalyRow {
        day, team, cost, baseline, spread, score, flagged, baseline_days,
    })?;
    let anomaly_drivers = decode_rows!(&rows(ANOMALY_DRIVERS_SQL).await?, ANOMALY_DRIVERS => AnomalyDriverRow {
        day, team, rank, node, uuid, namespace, run, pod, cost, baseline, increase,
    })?;
    let quota = decode_rows!(&rows(QUOTA_SQL).await?, QUOTA_MONTHLY => QuotaRow {
        cluster_queue, team, flavor, nominal_gpu_hours, used_gpu_hours, borrowed_gpu_hours, unused_gpu_hours, unused_cost,
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
        anomalies,
        anomaly_drivers,
        quota,
    })
}
