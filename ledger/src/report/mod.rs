//! One month's chargeback as plain data, and the formats it is written in.
//!
//! The ledger fills a [`Report`] from its derived tables; the renderers in this module
//! only format it, they never compute figures of their own.

pub mod focus;
pub mod html;
pub mod text;

use serde::Serialize;

use crate::config::IdlePolicy;
use crate::types::Month;
pub use crate::types::{CostComponent, IdleReason, State};

/// The columns of `report --format csv`, in this order (the contract finance scripts read).
pub const CSV_COLUMNS: [&str; 19] = [
    "month",
    "team",
    "productive_gpu_hours",
    "allocated_idle_gpu_hours",
    "failed_gpu_hours",
    "preempted_gpu_hours",
    "unallocated_gpu_hours",
    "compute",
    "network",
    "storage",
    "support",
    "idle",
    "failed_runs",
    "operations",
    "total",
    "accepted_units",
    "cost_per_accepted_unit",
    "lost_gpu_hours_platform_paid",
    "lost_cost_platform_paid",
];

/// Everything a month's report shows.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub month: Month,
    pub currency: String,
    pub idle_policy: IdlePolicy,
    /// One row per team, `platform` included, sorted by team.
    pub chargeback: Vec<ChargebackRow>,
    /// Accepted units by team and unit name.
    pub units: Vec<UnitsRow>,
    /// GPU-hours and cost by team, state and GPU model (the FOCUS grain).
    pub usage: Vec<UsageRow>,
    /// Failure and preemption causes, most wasted cost first.
    pub failure_causes: Vec<FailureCauseRow>,
    /// Queue waits by team and ClusterQueue.
    pub queue_waits: Vec<QueueWaitRow>,
    /// Budgeted teams, the one whose forecast uses most of its budget first.
    pub budgets: Vec<BudgetRow>,
    /// Energy per team (`report_energy`), by team.
    pub energy: Vec<EnergyRow>,
    /// Why GPUs were idle: idle hours by team, state and reason, the costliest first.
    pub idle_reasons: Vec<IdleReasonRow>,
    /// Unallocated, stranded and cordoned hours per node pool, by pool.
    pub stranded: Vec<StrandedRow>,
    /// Each team's complete days of the month against its own recent days, by day and team.
    pub anomalies: Vec<AnomalyRow>,
    /// What drove the flagged days: by day, team and rank.
    pub anomaly_drivers: Vec<AnomalyDriverRow>,
    /// Nominal, used, borrowed and unused GPU quota per ClusterQueue and flavor, by queue.
    pub quota: Vec<QuotaRow>,
}

/// One ClusterQueue's GPU quota on one flavor in the month (`quota_monthly`).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct QuotaRow {
    pub cluster_queue: String,
    /// Its owner: the team that pays for its unused quota under the `quota` idle policy.
    pub team: String,
    pub flavor: String,
    pub nominal_gpu_hours: f64,
    pub used_gpu_hours: f64,
    pub borrowed_gpu_hours: f64,
    pub unused_gpu_hours: f64,
    /// The unallocated cost charged for the unused quota under the `quota` policy.
    pub unused_cost: f64,
}

/// One team's complete UTC day of GPU cost against the median of its previous observed days
/// (`anomalies_daily`).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct AnomalyRow {
    pub day: String,
    pub team: String,
    /// Price-list cost of the team's own allocated time that day.
    pub cost: f64,
    /// Median of the baseline days; `None` with fewer than 7 of them.
    pub baseline: Option<f64>,
    pub spread: Option<f64>,
    /// (cost - baseline) / spread; `None` without a baseline or with a spread of 0.
    pub score: Option<f64>,
    pub flagged: bool,
    pub baseline_days: i64,
}

/// One GPU and run behind a flagged day (`anomaly_drivers`): its cost that day against its own
/// median over the team's baseline days.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct AnomalyDriverRow {
    pub day: String,
    pub team: String,
    /// 1 for the day's largest increase.
    pub rank: i64,
    pub node: Option<String>,
    pub uuid: Option<String>,
    pub namespace: Option<String>,
    pub run: Option<String>,
    /// A pod of the run on that node; `None` where the capture has no Pod object for it.
    pub pod: Option<String>,
    pub cost: f64,
    pub baseline: f64,
    pub increase: f64,
}

/// One team's idle hours of one reason in the month (`idle_reasons_monthly`).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct IdleReasonRow {
    /// 1 for the costliest row of the month.
    pub rank: i64,
    pub team: String,
    /// `allocated_idle` or `unallocated`.
    pub state: State,
    pub reason: IdleReason,
    pub gpu_hours: f64,
    /// Price-list cost of those hours, before the idle policy moves any of it.
    pub cost: f64,
}

/// One node pool's (and GPU model's) unallocated time in the month (`stranded_monthly`).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct StrandedRow {
    /// The node label value that priced the pool's GPUs; `None` where no label rule matched.
    pub pool: Option<String>,
    pub model_name: String,
    pub unallocated_gpu_hours: f64,
    /// Unallocated while a GPU Workload waited for quota that this pool could have served.
    pub stranded_gpu_hours: f64,
    pub stranded_cost: f64,
    /// Unallocated while the node was cordoned or not Ready.
    pub cordoned_gpu_hours: f64,
}

/// One team's month (the `csv` row, plus the provisional hours).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ChargebackRow {
    pub month: String,
    pub team: String,
    pub productive_gpu_hours: f64,
    pub allocated_idle_gpu_hours: f64,
    pub failed_gpu_hours: f64,
    pub preempted_gpu_hours: f64,
    pub unallocated_gpu_hours: f64,
    pub compute: f64,
    pub network: f64,
    pub storage: f64,
    pub support: f64,
    pub idle: f64,
    pub failed_runs: f64,
    pub operations: f64,
    pub total: f64,
    pub accepted_units: f64,
    /// `None` where the team accepted no units.
    pub cost_per_accepted_unit: Option<f64>,
    /// GPU-hours of runs still running at the end of the data (already inside the
    /// productive and allocated_idle figures): they settle when the outcome arrives.
    pub provisional_gpu_hours: f64,
    /// The team's failed and preempted GPU-hours whose cost the platform paid for (hardware
    /// faults, or preemptions under `preemptions = "platform"`): inside failed/preempted hours.
    pub lost_gpu_hours_platform_paid: f64,
    /// Their cost: not in this team's `failed_runs`, but in `platform`'s.
    pub lost_cost_platform_paid: f64,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct UnitsRow {
    pub month: String,
    pub team: String,
    pub unit: String,
    pub accepted_units: f64,
}

/// GPU-hours and cost of one team in one state on one GPU model.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct UsageRow {
    pub month: String,
    pub team: String,
    pub state: State,
    pub model_name: String,
    pub gpu_hours: f64,
    pub provisional_gpu_hours: f64,
    /// Price list cost of these hours (GPU-hours x price).
    pub cost: f64,
    /// Accepted units the team's runs on this model delivered (productive rows only; 0 elsewhere).
    pub accepted_units: f64,
    /// Lost (failed or preempted) time whose cost the platform pays for: charged to `platform`.
    pub platform_paid: bool,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct FailureCauseRow {
    /// `failed` or `preempted`.
    pub outcome: State,
    /// The Workload reason refined by the pod's last termination, e.g. OOMKilled, Error, Preempted.
    pub cause: String,
    pub segments: i64,
    pub gpu_hours: f64,
    pub cost: f64,
}

/// One budgeted team's month (`budget_monthly`, `queries/65_budgets.sql`).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct BudgetRow {
    pub month: String,
    pub team: String,
    pub budget: f64,
    /// The chargeback total to date.
    pub spend: f64,
    /// Month-end spend at the rate so far; the spend once the month is over.
    pub forecast: f64,
    pub used_ratio: f64,
    pub forecast_ratio: f64,
    /// Days of the month the data covers, of `month_days`.
    pub elapsed_days: f64,
    pub month_days: f64,
}

/// How a budgeted team's month stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BudgetStatus {
    /// Spent more than the budget already.
    Over,
    /// Within it so far, but heading over by the month's end.
    ForecastOver,
    Within,
}

impl BudgetStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            BudgetStatus::Over => "over budget",
            BudgetStatus::ForecastOver => "forecast over",
            BudgetStatus::Within => "within",
        }
    }
}

impl BudgetRow {
    pub fn status(&self) -> BudgetStatus {
        if self.used_ratio > 1.0 {
            BudgetStatus::Over
        } else if self.forecast_ratio > 1.0 {
            BudgetStatus::ForecastOver
        } else {
            BudgetStatus::Within
        }
    }
}

/// One team's energy in the month (`report_energy`): beside its cost, never in it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct EnergyRow {
    pub team: String,
    /// GPU energy, kWh.
    pub kwh: f64,
    /// `kwh` x PUE.
    pub facility_kwh: f64,
    /// `None` without a grid carbon intensity in the configuration.
    pub kg_co2e: Option<f64>,
    /// `None` where the team accepted no units.
    pub kwh_per_accepted_unit: Option<f64>,
    pub cost_per_accepted_unit: Option<f64>,
    /// Of the team's GPU-hours, those whose energy was measured.
    pub gpu_hours: f64,
    pub measured_gpu_hours: f64,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct QueueWaitRow {
    pub team: String,
    pub cluster_queue: String,
    /// Admissions (first admissions and readmissions after eviction).
    pub admissions: i64,
    pub p50_seconds: f64,
    pub p95_seconds: f64,
    pub max_seconds: f64,
    /// Evictions and their reasons, e.g. `Preempted x3`.
    pub evictions: i64,
    pub eviction_reasons: String,
}

impl IdleReasonRow {
    /// This row's share of `idle_cost` (the month's, [`Report::idle_cost`]); none without any.
    pub fn share_of(&self, idle_cost: f64) -> Option<f64> {
        (idle_cost > 0.0).then(|| self.cost / idle_cost)
    }
}

impl StrandedRow {
    /// The stranded part of the pool's unallocated hours; none without unallocated hours.
    pub fn stranded_share(&self) -> Option<f64> {
        (self.unallocated_gpu_hours > 0.0).then(|| self.stranded_gpu_hours / self.unallocated_gpu_hours)
    }
}

impl QuotaRow {
    /// The used part of the nominal quota (above 1 when the queue borrowed more than it left
    /// unused); none without nominal quota.
    pub fn used_share(&self) -> Option<f64> {
        (self.nominal_gpu_hours > 0.0).then(|| self.used_gpu_hours / self.nominal_gpu_hours)
    }
}

impl Report {
    /// The month's flagged days, by day and team.
    pub fn flagged_days(&self) -> impl Iterator<Item = &AnomalyRow> {
        self.anomalies.iter().filter(|a| a.flagged)
    }

    /// What drove one flagged day, largest increase first.
    pub fn drivers_of<'a>(&'a self, day: &'a AnomalyRow) -> impl Iterator<Item = &'a AnomalyDriverRow> {
        self.anomaly_drivers.iter().filter(move |d| d.day == day.day && d.team == day.team)
    }

    /// The month's idle cost, every team and reason: what each idle row is a share of.
    pub fn idle_cost(&self) -> f64 {
        self.idle_reasons.iter().map(|r| r.cost).sum()
    }

    /// The team rows' totals (for a footer line).
    pub fn total(&self) -> f64 {
        self.chargeback.iter().map(|r| r.total).sum()
    }

    /// Whether the platform paid for any team's lost time this month.
    pub fn platform_paid_any(&self) -> bool {
        self.chargeback.iter().any(|r| r.lost_gpu_hours_platform_paid > 0.0 || r.lost_cost_platform_paid > 0.0)
    }

    /// GPU-hours of runs still running, summed over teams.
    pub fn provisional_gpu_hours(&self) -> f64 {
        self.chargeback.iter().map(|r| r.provisional_gpu_hours).sum()
    }
}

impl ChargebackRow {
    /// GPU-hours by state: productive, allocated_idle, failed, preempted, unallocated.
    pub fn state_hours(&self) -> [f64; 5] {
        [self.productive_gpu_hours, self.allocated_idle_gpu_hours, self.failed_gpu_hours, self.preempted_gpu_hours, self.unallocated_gpu_hours]
    }

    /// Cost by component, in the order of the total's formula: compute, network, storage,
    /// support, idle, failed_runs, operations.
    pub fn cost_components(&self) -> [f64; 7] {
        CostComponent::ALL.map(|c| self.cost_of(c))
    }

    /// The team's cost in one component.
    pub fn cost_of(&self, component: CostComponent) -> f64 {
        match component {
            CostComponent::Compute => self.compute,
            CostComponent::Network => self.network,
            CostComponent::Storage => self.storage,
            CostComponent::Support => self.support,
            CostComponent::Idle => self.idle,
            CostComponent::FailedRuns => self.failed_runs,
            CostComponent::Operations => self.operations,
        }
    }
}

/// Why writing a report to files failed (the FOCUS export writes CSV and Parquet).
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// Creating, writing, syncing or renaming a file failed.
    #[error("{}: {source}", path.display())]
    Io {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Writing a file whole failed.
    #[error(transparent)]
    File(#[from] gpuledger_store::Error),
    /// The Parquet writer failed.
    #[error("writing Parquet: {0}")]
    Parquet(#[from] parquet::errors::ParquetError),
    /// Building the Arrow batch or writing it as CSV failed.
    #[error("building the export table: {0}")]
    Arrow(#[from] arrow::error::ArrowError),
    /// Reading the rows out of the ledger failed.
    #[error(transparent)]
    Ledger(#[from] crate::error::Error),
}

/// A small hand-made report the renderers' tests share.
///
/// Idle policy `share`: platform's 8 unallocated GPU-hours (16.00) were moved to the
/// other teams' `idle` (6.00 to ml-research, 10.00 to vision), so the chargeback rows differ
/// from the usage rows' price-list cost by exactly those amounts. The platform paid for 3 of
/// ml-research's 5 failed GPU-hours (6.00, a hardware fault): that is in platform's failed runs.
#[cfg(test)]
pub(crate) mod fixture {
    use super::*;

    fn usage(team: &str, state: &str, model: &str, hours: f64, price: f64, provisional: f64, units: f64) -> UsageRow {
        UsageRow {
            month: "2026-10".into(),
            team: team.into(),
            state: state.parse().unwrap(),
            model_name: model.into(),
            gpu_hours: hours,
            provisional_gpu_hours: provisional,
            cost: hours * price,
            accepted_units: units,
            platform_paid: false,
        }
    }

    const H100: &str = "NVIDIA H100 80GB HBM3";
    const A100: &str = "NVIDIA A100-SXM4-40GB";

    pub(crate) fn report() -> Report {
        let chargeback = vec![
            ChargebackRow {
                month: "2026-10".into(),
                team: "ml-research".into(),
                productive_gpu_hours: 100.0,
                allocated_idle_gpu_hours: 10.0,
                failed_gpu_hours: 5.0,
                preempted_gpu_hours: 4.0,
                unallocated_gpu_hours: 0.0,
                compute: 200.0,
                network: 5.0,
                storage: 3.0,
                support: 2.0,
                idle: 26.0,
                failed_runs: 8.0,
                operations: 1.0,
                total: 245.0,
                accepted_units: 1000.0,
                cost_per_accepted_unit: Some(0.245),
                provisional_gpu_hours: 3.5,
                lost_gpu_hours_platform_paid: 3.0,
                lost_cost_platform_paid: 6.0,
            },
            ChargebackRow {
                month: "2026-10".into(),
                team: "platform".into(),
                productive_gpu_hours: 2.0,
                allocated_idle_gpu_hours: 0.0,
                failed_gpu_hours: 0.0,
                preempted_gpu_hours: 0.0,
                unallocated_gpu_hours: 8.0,
                compute: 2.0,
                network: 0.0,
                storage: 1.0,
                support: 0.0,
                idle: 0.0,
                failed_runs: 6.0,
                operations: 0.5,
                total: 9.5,
                accepted_units: 0.0,
                cost_per_accepted_unit: None,
                provisional_gpu_hours: 0.0,
                lost_gpu_hours_platform_paid: 0.0,
                lost_cost_platform_paid: 0.0,
            },
            ChargebackRow {
                month: "2026-10".into(),
                team: "vision".into(),
                productive_gpu_hours: 20.0,
                allocated_idle_gpu_hours: 2.0,
                failed_gpu_hours: 0.0,
                preempted_gpu_hours: 0.0,
                unallocated_gpu_hours: 0.0,
                compute: 20.0,
                network: 1.0,
                storage: 1.0,
                support: 1.0,
                idle: 12.0,
                failed_runs: 0.0,
                operations: 1.0,
                total: 36.0,
                accepted_units: 50.0,
                cost_per_accepted_unit: Some(0.72),
                provisional_gpu_hours: 0.0,
                lost_gpu_hours_platform_paid: 0.0,
                lost_cost_platform_paid: 0.0,
            },
        ];
        let usage = vec![
            usage("ml-research", "productive", H100, 100.0, 2.0, 3.5, 1000.0),
            usage("ml-research", "allocated_idle", H100, 10.0, 2.0, 0.0, 0.0),
            usage("ml-research", "failed", H100, 2.0, 2.0, 0.0, 0.0),
            UsageRow { platform_paid: true, ..usage("ml-research", "failed", H100, 3.0, 2.0, 0.0, 0.0) },
            usage("ml-research", "preempted", A100, 4.0, 1.0, 0.0, 0.0),
            usage("platform", "productive", A100, 2.0, 1.0, 0.0, 0.0),
            usage("platform", "unallocated", H100, 8.0, 2.0, 0.0, 0.0),
            usage("vision", "productive", A100, 20.0, 1.0, 0.0, 50.0),
            usage("vision", "allocated_idle", A100, 2.0, 1.0, 0.0, 0.0),
        ];
        Report {
            month: "2026-10".parse().unwrap(),
            currency: "EUR".into(),
            idle_policy: IdlePolicy::Share,
            chargeback,
            units: vec![
                UnitsRow { month: "2026-10".into(), team: "ml-research".into(), unit: "samples".into(), accepted_units: 1000.0 },
                UnitsRow { month: "2026-10".into(), team: "vision".into(), unit: "images".into(), accepted_units: 50.0 },
            ],
            usage,
            failure_causes: vec![
                FailureCauseRow { outcome: State::Failed, cause: "OOMKilled".into(), segments: 3, gpu_hours: 5.0, cost: 10.0 },
                FailureCauseRow { outcome: State::Preempted, cause: "Preempted".into(), segments: 2, gpu_hours: 4.0, cost: 4.0 },
            ],
            queue_waits: vec![
                QueueWaitRow {
                    team: "ml-research".into(),
                    cluster_queue: "gpu-h100".into(),
                    admissions: 12,
                    p50_seconds: 252.0,
                    p95_seconds: 7380.0,
                    max_seconds: 9000.0,
                    evictions: 2,
                    eviction_reasons: "Preempted x2".into(),
                },
                QueueWaitRow {
                    team: "vision".into(),
                    cluster_queue: "gpu-a100".into(),
                    admissions: 3,
                    p50_seconds: 30.0,
                    p95_seconds: 90.0,
                    max_seconds: 95.0,
                    evictions: 0,
                    eviction_reasons: String::new(),
                },
            ],
            // vision spent 36 of 30: over; ml-research 245 of 400, heading for 500.
            budgets: vec![
                BudgetRow {
                    month: "2026-10".into(),
                    team: "vision".into(),
                    budget: 30.0,
                    spend: 36.0,
                    forecast: 72.0,
                    used_ratio: 1.2,
                    forecast_ratio: 2.4,
                    elapsed_days: 15.5,
                    month_days: 31.0,
                },
                BudgetRow {
                    month: "2026-10".into(),
                    team: "ml-research".into(),
                    budget: 400.0,
                    spend: 245.0,
                    forecast: 500.0,
                    used_ratio: 0.6125,
                    forecast_ratio: 1.25,
                    elapsed_days: 15.5,
                    month_days: 31.0,
                },
            ],
            energy: vec![
                EnergyRow {
                    team: "ml-research".into(),
                    kwh: 95.2,
                    facility_kwh: 123.76,
                    kg_co2e: Some(43.316),
                    kwh_per_accepted_unit: Some(0.0952),
                    cost_per_accepted_unit: Some(0.245),
                    gpu_hours: 119.0,
                    measured_gpu_hours: 119.0,
                },
                EnergyRow {
                    team: "platform".into(),
                    kwh: 0.8,
                    facility_kwh: 1.04,
                    kg_co2e: Some(0.364),
                    kwh_per_accepted_unit: None,
                    cost_per_accepted_unit: None,
                    gpu_hours: 10.0,
                    measured_gpu_hours: 4.0,
                },
            ],
            // The chargeback's idle hours by reason: ml-research 10 allocated idle (7 stall, 3
            // teardown), vision 2 (startup), platform 8 unallocated (5 stranded, 3 no demand).
            idle_reasons: vec![
                IdleReasonRow { rank: 1, team: "ml-research".into(), state: State::AllocatedIdle, reason: IdleReason::Stall, gpu_hours: 7.0, cost: 17.5 },
                IdleReasonRow { rank: 2, team: "platform".into(), state: State::Unallocated, reason: IdleReason::Stranded, gpu_hours: 5.0, cost: 10.0 },
                IdleReasonRow { rank: 3, team: "ml-research".into(), state: State::AllocatedIdle, reason: IdleReason::Teardown, gpu_hours: 3.0, cost: 7.5 },
                IdleReasonRow { rank: 4, team: "platform".into(), state: State::Unallocated, reason: IdleReason::NoDemand, gpu_hours: 3.0, cost: 6.0 },
                IdleReasonRow { rank: 5, team: "vision".into(), state: State::AllocatedIdle, reason: IdleReason::Startup, gpu_hours: 2.0, cost: 5.0 },
            ],
            stranded: vec![
                StrandedRow { pool: Some("h100".into()), model_name: "NVIDIA H100 80GB HBM3".into(), unallocated_gpu_hours: 6.0, stranded_gpu_hours: 5.0, stranded_cost: 10.0, cordoned_gpu_hours: 0.0 },
                StrandedRow { pool: None, model_name: "Tesla T4".into(), unallocated_gpu_hours: 2.0, stranded_gpu_hours: 0.0, stranded_cost: 0.0, cordoned_gpu_hours: 0.0 },
            ],
            // ml-research's 10-11: a notebook held two GPUs all day (2 x 24 h x 2.50 = 120 over
            // a baseline of 30): (150 - 30) / 6 = 20 spreads above it. vision's days are not
            // scored yet (5 baseline days).
            anomalies: vec![
                AnomalyRow { day: "2026-10-10".into(), team: "ml-research".into(), cost: 31.5, baseline: Some(30.0), spread: Some(6.0), score: Some(0.25), flagged: false, baseline_days: 9 },
                AnomalyRow { day: "2026-10-10".into(), team: "vision".into(), cost: 12.0, baseline: None, spread: None, score: None, flagged: false, baseline_days: 5 },
                AnomalyRow { day: "2026-10-11".into(), team: "ml-research".into(), cost: 150.0, baseline: Some(30.0), spread: Some(6.0), score: Some(20.0), flagged: true, baseline_days: 10 },
            ],
            anomaly_drivers: vec![
                AnomalyDriverRow { day: "2026-10-11".into(), team: "ml-research".into(), rank: 1, node: Some("gpu-h100-0".into()), uuid: Some("GPU-aa".into()), namespace: Some("ml-research".into()), run: Some("pod/notebook-x".into()), pod: Some("notebook-x".into()), cost: 60.0, baseline: 0.0, increase: 60.0 },
                AnomalyDriverRow { day: "2026-10-11".into(), team: "ml-research".into(), rank: 2, node: Some("gpu-h100-0".into()), uuid: Some("GPU-bb".into()), namespace: Some("ml-research".into()), run: Some("pod/notebook-x".into()), pod: Some("notebook-x".into()), cost: 60.0, baseline: 0.0, increase: 60.0 },
            ],
            // cq-research (ml-research) left 25 of its 100 nominal GPU-hours unused (10.00 of
            // unallocated cost charged for them under `quota`) and borrowed 5 in busy hours;
            // cq-batch (platform's) used all of its 40.
            quota: vec![
                QuotaRow { cluster_queue: "cq-batch".into(), team: "platform".into(), flavor: "l4".into(), nominal_gpu_hours: 40.0, used_gpu_hours: 40.0, borrowed_gpu_hours: 0.0, unused_gpu_hours: 0.0, unused_cost: 0.0 },
                QuotaRow { cluster_queue: "cq-research".into(), team: "ml-research".into(), flavor: "h100".into(), nominal_gpu_hours: 100.0, used_gpu_hours: 80.0, borrowed_gpu_hours: 5.0, unused_gpu_hours: 25.0, unused_cost: 10.0 },
            ],
        }
    }

    /// A session holding `report` as the derived tables the report views read
    /// (priced_state_hours, chargeback_monthly, accepted_units_monthly), with the views of
    /// `queries/90_reports.sql` created over them: what `gpuledger serve` has over a stored ledger.
    pub(crate) async fn session(report: &Report) -> datafusion::prelude::SessionContext {
        use std::sync::Arc;

        use arrow::datatypes::{DataType, Field, Schema};
        use datafusion::datasource::MemTable;

        fn table<T: Serialize>(rows: &[T], fields: Vec<Field>) -> Arc<MemTable> {
            let schema = Arc::new(Schema::new(fields));
            let mut decoder = arrow::json::ReaderBuilder::new(schema.clone()).build_decoder().unwrap();
            decoder.serialize(rows).unwrap();
            let batch = decoder.flush().unwrap().unwrap();
            Arc::new(MemTable::try_new(schema, vec![vec![batch]]).unwrap())
        }
        let text = |name: &str| Field::new(name, DataType::Utf8, true);
        let number = |name: &str| Field::new(name, DataType::Float64, true);
        // Amounts are exact decimals in the derived tables (the fixture's are whole cents).
        let money = |name: &str| Field::new(name, DataType::Decimal128(38, 6), true);
        let money_columns = ["compute", "network", "storage", "support", "idle", "failed_runs", "operations", "total", "cost_per_accepted_unit", "lost_cost_platform_paid"];
        let money_or_number = |name: &str| if money_columns.contains(&name) { money(name) } else { number(name) };

        // The usage rows as priced hours of one day each.
        #[derive(Serialize)]
        struct Priced<'a> {
            month: &'a str,
            hour: String,
            day: String,
            team: &'a str,
            state: &'a str,
            model_name: &'a str,
            paid_by: Option<&'a str>,
            gpu_ns: i64,
            gpu_hours: f64,
            energy_kwh: Option<f64>,
            cost: f64,
            provisional: bool,
        }
        let mut priced = Vec::new();
        for u in &report.usage {
            let paid_by = u.state.is_lost().then_some(if u.platform_paid { "platform" } else { "team" });
            let day = format!("{}-01", u.month);
            let settled = u.gpu_hours - u.provisional_gpu_hours;
            let cost_per_hour = if u.gpu_hours > 0.0 { u.cost / u.gpu_hours } else { 0.0 };
            for (hours, provisional) in [(settled, false), (u.provisional_gpu_hours, true)] {
                if hours > 0.0 {
                    let gpu_ns = (hours * 3.6e12).round() as i64;
                    let row = Priced { month: &u.month, hour: format!("{day}T00:00:00Z"), day: day.clone(), team: &u.team, state: u.state.as_str(), model_name: &u.model_name, paid_by, gpu_ns, gpu_hours: hours, energy_kwh: None, cost: hours * cost_per_hour, provisional };
                    priced.push(row);
                }
            }
        }
        let mut priced_fields: Vec<Field> = ["month", "hour", "day", "team", "state", "model_name", "paid_by"].map(text).to_vec();
        priced_fields.extend([Field::new("gpu_ns", DataType::Int64, true), number("gpu_hours"), number("energy_kwh"), money("cost"), Field::new("provisional", DataType::Boolean, true)]);

        // The chargeback CSV's columns are the table's, less provisional_gpu_hours.
        let mut chargeback_fields: Vec<Field> = vec![text("month"), text("team")];
        chargeback_fields.extend(CSV_COLUMNS[2..].iter().chain(&["provisional_gpu_hours"]).map(|n| money_or_number(n)));
        let units_fields = vec![text("month"), text("team"), text("unit"), number("accepted_units")];
        let mut budget_fields = vec![text("month"), text("team")];
        budget_fields.extend(["budget", "spend", "forecast"].map(money));
        budget_fields.extend(["used_ratio", "forecast_ratio", "elapsed_days", "month_days"].map(number));

        let ctx = datafusion::prelude::SessionContext::new();
        ctx.register_table("priced_state_hours", table(&priced, priced_fields)).unwrap();
        ctx.register_table("chargeback_monthly", table(&report.chargeback, chargeback_fields)).unwrap();
        ctx.register_table("accepted_units_monthly", table(&report.units, units_fields)).unwrap();
        ctx.register_table("budget_monthly", table(&report.budgets, budget_fields)).unwrap();
        let energy_schema = gpuledger_schemas::derived_table("energy_monthly").unwrap().arrow_schema();
        ctx.register_batch("energy_monthly", arrow::array::RecordBatch::new_empty(energy_schema)).unwrap();
        for name in ["idle_reasons_monthly", "stranded_monthly", "anomalies_daily", "anomaly_drivers", "quota_monthly"] {
            let schema = gpuledger_schemas::derived_table(name).unwrap().arrow_schema();
            ctx.register_batch(name, arrow::array::RecordBatch::new_empty(schema)).unwrap();
        }
        crate::accounting::create_report_views(&ctx).await.unwrap();
        ctx
    }

    /// The same report with every run settled (no provisional hours).
    pub(crate) fn settled() -> Report {
        let mut r = report();
        for row in &mut r.chargeback {
            row.provisional_gpu_hours = 0.0;
        }
        for row in &mut r.usage {
            row.provisional_gpu_hours = 0.0;
        }
        r
    }
}
