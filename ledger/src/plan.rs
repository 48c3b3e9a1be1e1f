//! The day plan: which SQL files run for each unit of work, in which order, and what each step
//! leaves behind and for how long. The accounting driver (`crate::accounting`) follows it; no
//! other place lists views.
//!
//! The SQL in `queries/` describes the whole store at once. The sample steps (`30` to `45`) run
//! instead once per *unit*: a day of `gpu_samples` (the day and the last second before it), or,
//! when a day is more than the memory limit allows at once, a part of that day's nodes (a range
//! of `Hostname`s; every sample step follows one GPU or one node, so parts add up to the day).
//! Two passes go over the units:
//!
//! - pass 1, last day first: each GPU's first observation, last XID reading and spacing counts,
//!   and each pod's active bounds, per day. A day's last observation finds its successor in a
//!   later day's first observations, which is why the days run backwards.
//! - pass 2, first day first: the spans, states and hourly rollups, with the month's scrape
//!   intervals (from every day's spacing counts) and every day's first observations, XID
//!   readings and active bounds.
//!
//! What a unit yields is written as a *day table* (`crate::days`): a Parquet file per unit,
//! read back through a listing table by later units and by the monthly steps. So a run holds in
//! memory one unit's working set and the monthly aggregates, whatever the number of days or GPUs.

/// Which rows of a view a unit keeps: a unit reads the last second of the day before it (an
/// observation may start there), so a view over its samples has rows of that day too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Own {
    /// The rows whose `day_number` (UTC days since the epoch) is the unit's day.
    DayNumber,
    /// The rows whose `date` (the sample partition) is the unit's day.
    Date,
    /// Every row (the view is already the unit's own).
    All,
}

/// One step of a pass: a SQL file run over a unit.
#[derive(Debug, Clone, Copy)]
pub struct Step {
    pub file: &'static str,
    /// Month tables registered before the step runs, each as (the name the SQL reads, the day
    /// table it is the union of): every unit's yield of that table so far in the run.
    pub reads: &'static [(&'static str, &'static str)],
    /// Views of the step kept as tables (in memory, or the spill directory) as soon as they are
    /// created, for the rest of the unit's pass: later statements read them several times, and a
    /// view read twice is computed twice. (A view is bound to what it reads when it is created,
    /// so a view created after one of these reads the kept table.)
    pub keeps: &'static [(&'static str, Own)],
    /// Views whose unit rows become day tables.
    pub yields: &'static [(&'static str, Own)],
    /// Views and tables the rest of the pass no longer reads, dropped once the step has run: a
    /// registered view holds the tables it reads, kept pod samples among them.
    pub lets_go: &'static [&'static str],
}

/// One pass over the units.
#[derive(Debug, Clone, Copy)]
pub struct Pass {
    pub name: &'static str,
    pub steps: &'static [Step],
    /// Kept tables the unit's next pass reads instead of computing them again (pass 1's pod
    /// samples and observation starts: the same rows in pass 2). Written to the run's scratch.
    pub carries: &'static [&'static str],
}

/// The views of `30_observations.sql` that pass 2 takes from pass 1 when it can.
const CARRIED: &[&str] = &["pod_samples", "observation_starts"];

/// Pass 1: first observations, last XID readings, active bounds, spacing counts.
pub const PASS1: Pass = Pass {
    name: "first pass",
    steps: &[
        Step {
            file: "30_observations.sql",
            reads: &[],
            keeps: &[("pod_samples", Own::All), ("observation_starts", Own::All)],
            yields: &[("day_first_starts", Own::DayNumber), ("day_last_xids", Own::DayNumber), ("day_active_bounds", Own::DayNumber), ("day_pods", Own::DayNumber), ("day_dra_mismatches", Own::DayNumber)],
            lets_go: &["replica_samples", "counted_samples", "pod_samples", "day_first_starts", "xid_readings", "day_last_xids", "day_active_bounds", "day_pods", "dra_mismatches", "day_dra_mismatches"],
        },
        Step {
            file: "31_intervals.sql",
            // This unit's first observations are in it: its own yield of step 30.
            reads: &[("known_day_starts", "day_first_starts")],
            keeps: &[],
            yields: &[("spacing_counts", Own::DayNumber)],
            lets_go: &[],
        },
    ],
    carries: CARRIED,
};

/// Pass 2: spans, states, hourly rollups, XID errors.
pub const PASS2: Pass = Pass {
    name: "second pass",
    steps: &[
        Step {
            file: "30_observations.sql",
            reads: &[],
            keeps: &[("pod_samples", Own::All), ("observation_starts", Own::All)],
            yields: &[],
            lets_go: &[],
        },
        Step { file: "31_intervals.sql", reads: &[("known_day_starts", "day_first_starts")], keeps: &[], yields: &[], lets_go: &[] },
        Step {
            file: "32_spans.sql",
            // The month's spacing counts in place of the day's (the scrape interval is the month's median).
            reads: &[("spacing_counts", "spacing_counts"), ("known_day_last_xids", "day_last_xids")],
            keeps: &[("sample_spans", Own::Date)],
            yields: &[("xid_errors", Own::DayNumber)],
            // The states read the kept spans, and the hourly rollups the samples: what the spans
            // were made from goes before the states' joins need room.
            lets_go: &["pod_samples", "observation_starts", "day_first_starts", "xid_readings", "day_last_xids", "day_active_bounds", "day_pods", "observation_next", "observations", "xid_errors"],
        },
        Step {
            file: "40_states.sql",
            reads: &[("known_active_bounds", "day_active_bounds")],
            // A MIG GPU's pieces split among its instances and leftover: `mig_pieces` reads the
            // split three times and the states read `mig_pieces` six times; splitting again in
            // each read took more memory than a small limit leaves (tests/it/fleet.rs), and
            // computing it twice per unit was the largest step at 256 GPUs (bench/README.md).
            // A shared GPU's pieces split among its share groups: both yields that read the
            // states split them again otherwise (a month of 64 GPUs: 44-47 s kept, 51-53 s not).
            keeps: &[("mig_piece_parts", Own::All), ("shared_group_pieces", Own::All)],
            yields: &[("gpu_state_hours", Own::All), ("unobserved_gpu_hours", Own::All), ("gpu_pods", Own::All), ("lost_segment_gpus", Own::All), ("observed_extent", Own::All)],
            lets_go: &[],
        },
        Step { file: "45_hourly.sql", reads: &[], keeps: &[], yields: &[("gpu_hourly", Own::Date), ("node_hourly", Own::Date)], lets_go: &[] },
    ],
    carries: &[],
};

/// The day tables the monthly steps read, each under the name the SQL reads it by: every
/// unit's yield of pass 2, the spacing counts (`32_spans.sql`'s `scrape_intervals` is
/// created again over the month's, for `55_who_pays.sql`), and the DRA mismatches (the run
/// warns of them).
pub const MONTH_TABLES: &[(&str, &str)] = &[
    ("gpu_state_hours", "gpu_state_hours"),
    ("unobserved_gpu_hours", "unobserved_gpu_hours"),
    ("gpu_pods", "gpu_pods"),
    ("lost_segment_gpus", "lost_segment_gpus"),
    ("observed_extent", "observed_extent"),
    ("gpu_hourly", "gpu_hourly"),
    ("node_hourly", "node_hourly"),
    ("xid_errors", "xid_errors"),
    ("spacing_counts", "spacing_counts"),
    ("day_dra_mismatches", "day_dra_mismatches"),
];

/// The views of the sample steps the monthly steps read, created again over the month tables.
pub const MONTH_VIEWS: &[(&str, &str)] = &[("32_spans.sql", "scrape_intervals")];

/// The object steps, once before the units; and what of them is kept as tables (each is read
/// by every unit, or several times by the steps after it).
pub const OBJECT_FILES: &[&str] = &["10_objects.sql", "20_runs.sql", "25_capacity.sql"];
pub const OBJECT_KEEPS: &[&str] =
    &["pods_latest", "jobs_latest", "workloads_latest", "namespaces_latest", "nodes_latest", "pod_runs", "workload_segments", "node_unavailable", "cluster_queue_gpu_flavors", "stranding_windows", "claim_reservations"];

/// The monthly steps, once after the units, over the month tables; then the report views.
pub const MONTHLY_FILES: &[&str] = &["50_units.sql", "55_who_pays.sql", "58_quota.sql", "60_chargeback.sql", "62_quota_monthly.sql", "65_budgets.sql", "67_energy.sql", "68_why_idle.sql", "69_anomalies.sql", "70_queue.sql", "80_failures.sql"];

/// Views of the monthly steps kept as tables as soon as they are created: each is read several
/// times by the steps after it (run_segments reads priced_state_hours; budget_monthly and the
/// report views chargeback_monthly), or, as node_model_prices and lost_segment_payers, is the
/// small side of a join with the month's rows: kept, its row count is known, and DataFusion
/// builds the join's hash table from it rather than from the month. The quota windows are small
/// and read by the hourly quota split: kept, a cluster runs that split over two tables instead
/// of the plans that read every ClusterQueue and Workload version.
pub const MONTHLY_KEEPS: &[&str] = &[
    "lost_segment_payers",
    "node_model_prices",
    "run_segments",
    "queue_waits",
    "run_failures",
    "priced_state_hours",
    "quota_nominal_windows",
    "quota_used_windows",
    "quota_cost_parts",
    "chargeback_monthly",
    "accepted_units_monthly",
    "budget_monthly",
    "energy_monthly",
    "idle_reasons_monthly",
    "stranded_monthly",
    "anomalies_daily",
];

/// The derived tables the report views (`90_reports.sql`) read.
pub const REPORTED_TABLES: [&str; 8] =
    ["priced_state_hours", "chargeback_monthly", "accepted_units_monthly", "budget_monthly", "energy_monthly", "idle_reasons_monthly", "stranded_monthly", "anomalies_daily"];

/// The derived tables `gpuledger ledger` writes to the store, each stored under the name of
/// the view it comes from (`gpuledger_schemas::derived` declares their columns).
pub const DERIVED_TABLES: &[&str] = &[
    "priced_state_hours",
    "pod_runs",
    "unobserved_gpu_hours",
    "chargeback_monthly",
    "accepted_units_monthly",
    "budget_monthly",
    "energy_monthly",
    "idle_reasons_monthly",
    "stranded_monthly",
    "anomalies_daily",
    "anomaly_drivers",
    "quota_monthly",
    "run_segments",
    "run_failures",
    "failure_causes",
    "queue_waits",
    "queue_wait_summary",
    "queue_wait_monthly",
    "gpu_hourly",
    "node_hourly",
];

/// Every day table a pass yields, in the order the plan yields them.
pub fn yields(pass: &Pass) -> impl Iterator<Item = &'static str> + '_ {
    pass.steps.iter().flat_map(|s| s.yields.iter().map(|(t, _)| *t))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queries::{created_views, query_file};

    #[test]
    fn every_view_the_plan_names_is_created_by_its_file() {
        for pass in [PASS1, PASS2] {
            let mut created: Vec<String> = Vec::new();
            for step in pass.steps {
                let views = created_views(query_file(step.file).unwrap());
                for (view, _) in step.keeps.iter().chain(step.yields) {
                    assert!(views.iter().any(|v| v == view), "{}: {} creates no view {view}", pass.name, step.file);
                }
                created.extend(views);
                for gone in step.lets_go {
                    assert!(created.iter().any(|v| v == gone), "{}: {gone} is let go after {} but no step before created it", pass.name, step.file);
                }
            }
            for carried in pass.carries {
                assert!(pass.steps.iter().any(|s| s.keeps.iter().any(|(k, _)| k == carried)), "{} carries {carried}, which it does not keep", pass.name);
            }
        }
    }

    #[test]
    fn every_month_table_is_a_yield_and_reads_come_from_yields() {
        let all: Vec<&str> = yields(&PASS1).chain(yields(&PASS2)).collect();
        for (_, from) in MONTH_TABLES {
            assert!(all.contains(from), "month table {from} is yielded by no pass");
        }
        for step in PASS1.steps.iter().chain(PASS2.steps) {
            for (_, from) in step.reads {
                assert!(yields(&PASS1).any(|y| y == *from), "{} reads {from}, which pass 1 does not yield", step.file);
            }
        }
    }

    #[test]
    fn the_files_run_in_their_numbered_order() {
        let files: Vec<&str> = OBJECT_FILES.iter().copied().chain(PASS2.steps.iter().map(|s| s.file)).chain(MONTHLY_FILES.iter().copied()).chain(["90_reports.sql"]).collect();
        let names: Vec<&str> = crate::queries::QUERY_FILES.iter().map(|(n, _)| *n).collect();
        assert_eq!(files, names, "every query file runs once, in order (pass 1 runs the first two sample files again)");
    }
}
