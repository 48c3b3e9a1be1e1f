//! Reads one month into a [`Report`], either out of a finished accounting run (its views) or
//! out of the derived tables a `gpuledger ledger` run stored (what `gpuledger serve` reads).

use datafusion::prelude::SessionContext;
use serde_json::Value;

use crate::accounting::{Accounting, collect, rows, strings};
use crate::error::Result;
use crate::report::{ChargebackRow, FailureCauseRow, QueueWaitRow, Report, UnitsRow, UsageRow};

impl Accounting {
    /// The report of `month` (`YYYY-MM`). Queue waits are those of admissions in that month.
    pub async fn report(&self, month: &str, currency: &str, idle_policy: &str) -> Result<Report> {
        read_report(self.context(), month, currency, idle_policy).await
    }
}

/// The report of `month` from a session holding the stored derived tables under their names
/// (see [`crate::derived::register`]): the same figures the accounting run that wrote them gave.
pub async fn stored_report(ctx: &SessionContext, month: &str, currency: &str, idle_policy: &str) -> Result<Report> {
    read_report(ctx, month, currency, idle_policy).await
}

/// Months of the stored chargeback, oldest first, and the busiest of them.
pub async fn stored_months(ctx: &SessionContext) -> Result<(Vec<String>, Option<String>)> {
    Ok((months(ctx).await?, busiest_month(ctx).await?))
}

/// Months that have GPU time, overheads or units, oldest first.
pub(crate) async fn months(ctx: &SessionContext) -> Result<Vec<String>> {
    let (_, batches) = collect(ctx, "SELECT DISTINCT month FROM chargeback_monthly ORDER BY month").await?;
    Ok(strings(&batches, 0).into_iter().flatten().collect())
}

/// The month with the most GPU-hours (all states), the earliest on a tie.
pub(crate) async fn busiest_month(ctx: &SessionContext) -> Result<Option<String>> {
    let sql = "SELECT month FROM chargeback_monthly GROUP BY month ORDER BY SUM(productive_gpu_hours + allocated_idle_gpu_hours + failed_gpu_hours + preempted_gpu_hours + unallocated_gpu_hours) DESC, month LIMIT 1";
    let (_, batches) = collect(ctx, sql).await?;
    Ok(strings(&batches, 0).into_iter().flatten().next())
}

async fn read_report(ctx: &SessionContext, month: &str, currency: &str, idle_policy: &str) -> Result<Report> {
    let query = async |sql: &str| collect(ctx, sql).await.map(|(_, batches)| batches);
    let month_lit = month.replace('\'', "''");
    let chargeback = rows(&query(&format!("SELECT * FROM chargeback_monthly WHERE month = '{month_lit}' ORDER BY team")).await?)?
        .into_iter()
        .map(|r| ChargebackRow {
            month: s(&r, "month"),
            team: s(&r, "team"),
            productive_gpu_hours: f(&r, "productive_gpu_hours"),
            allocated_idle_gpu_hours: f(&r, "allocated_idle_gpu_hours"),
            failed_gpu_hours: f(&r, "failed_gpu_hours"),
            preempted_gpu_hours: f(&r, "preempted_gpu_hours"),
            unallocated_gpu_hours: f(&r, "unallocated_gpu_hours"),
            compute: f(&r, "compute"),
            network: f(&r, "network"),
            storage: f(&r, "storage"),
            support: f(&r, "support"),
            idle: f(&r, "idle"),
            failed_runs: f(&r, "failed_runs"),
            operations: f(&r, "operations"),
            total: f(&r, "total"),
            accepted_units: f(&r, "accepted_units"),
            cost_per_accepted_unit: r.get("cost_per_accepted_unit").and_then(Value::as_f64),
            provisional_gpu_hours: f(&r, "provisional_gpu_hours"),
            lost_gpu_hours_platform_paid: f(&r, "lost_gpu_hours_platform_paid"),
            lost_cost_platform_paid: f(&r, "lost_cost_platform_paid"),
        })
        .collect();
    let units = rows(&query(&format!("SELECT * FROM accepted_units_monthly WHERE month = '{month_lit}' ORDER BY team, unit")).await?)?
        .into_iter()
        .map(|r| UnitsRow { month: s(&r, "month"), team: s(&r, "team"), unit: s(&r, "unit"), accepted_units: f(&r, "accepted_units") })
        .collect();
    let usage_sql = format!(
        "SELECT h.team, h.state, COALESCE(h.model_name, 'unknown') AS model_name, SUM(h.gpu_hours) AS gpu_hours,
                SUM(CASE WHEN h.provisional THEN h.gpu_hours ELSE 0 END) AS provisional_gpu_hours,
                SUM(h.cost) AS cost, COALESCE(h.paid_by = 'platform', false) AS platform_paid
         FROM priced_state_hours h WHERE h.month = '{month_lit}'
         GROUP BY h.team, h.state, COALESCE(h.model_name, 'unknown'), COALESCE(h.paid_by = 'platform', false)
         ORDER BY h.team, h.state, model_name, platform_paid"
    );
    let mut usage: Vec<UsageRow> = rows(&query(&usage_sql).await?)?
        .into_iter()
        .map(|r| UsageRow {
            month: month.to_string(),
            team: s(&r, "team"),
            state: s(&r, "state"),
            model_name: s(&r, "model_name"),
            gpu_hours: f(&r, "gpu_hours"),
            provisional_gpu_hours: f(&r, "provisional_gpu_hours"),
            cost: f(&r, "cost"),
            accepted_units: 0.0,
            platform_paid: r.get("platform_paid").and_then(Value::as_bool).unwrap_or(false),
        })
        .collect();
    // A team's units go to its productive rows, in proportion to their GPU-hours.
    for team_units in rows(&query(&format!("SELECT team, SUM(accepted_units) AS u FROM accepted_units_monthly WHERE month = '{month_lit}' GROUP BY team")).await?)? {
        let team = s(&team_units, "team");
        let productive: f64 = usage.iter().filter(|u| u.team == team && u.state == "productive").map(|u| u.gpu_hours).sum();
        if productive > 0.0 {
            for u in usage.iter_mut().filter(|u| u.team == team && u.state == "productive") {
                u.accepted_units = f(&team_units, "u") * u.gpu_hours / productive;
            }
        }
    }
    let failure_causes = rows(&query(&format!("SELECT * FROM failure_causes WHERE month = '{month_lit}' ORDER BY cost DESC, gpu_hours DESC, cause")).await?)?
        .into_iter()
        .map(|r| FailureCauseRow {
            outcome: s(&r, "outcome"),
            cause: s(&r, "cause"),
            segments: r.get("segments").and_then(Value::as_i64).unwrap_or(0),
            gpu_hours: f(&r, "gpu_hours"),
            cost: f(&r, "cost"),
        })
        .collect();
    let waits_sql = format!("SELECT * FROM queue_wait_monthly WHERE month = '{month_lit}' ORDER BY team, cluster_queue");
    let queue_waits = rows(&query(&waits_sql).await?)?
        .into_iter()
        .map(|r| QueueWaitRow {
            team: s(&r, "team"),
            cluster_queue: s(&r, "cluster_queue"),
            admissions: r.get("admissions").and_then(Value::as_i64).unwrap_or(0),
            p50_seconds: f(&r, "p50_seconds"),
            p95_seconds: f(&r, "p95_seconds"),
            max_seconds: f(&r, "max_seconds"),
            evictions: r.get("evictions").and_then(Value::as_i64).unwrap_or(0),
            eviction_reasons: s(&r, "eviction_reasons"),
        })
        .collect();
    Ok(Report {
        month: month.to_string(),
        currency: currency.to_string(),
        idle_policy: idle_policy.to_string(),
        chargeback,
        units,
        usage,
        failure_causes,
        queue_waits,
    })
}

fn s(row: &std::collections::BTreeMap<String, Value>, key: &str) -> String {
    match row.get(key) {
        Some(Value::String(v)) => v.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

fn f(row: &std::collections::BTreeMap<String, Value>, key: &str) -> f64 {
    row.get(key).and_then(Value::as_f64).unwrap_or(0.0)
}
