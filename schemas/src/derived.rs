//! The columns of the ledger's derived tables: what `gpuledger ledger` writes to
//! `<store>/ledger/<table>.parquet`, declared here so readers need not run the SQL to know them.
//!
//! Each table is a view of the accounting in `queries/*.sql`, stored under the view's name. The
//! SQL decides the columns; these declarations say what it produces today (the ledger's tests
//! compare the two, so they cannot drift apart) and what each column means.

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};

use DerivedType::{Boolean, Decimal20, Float64, Int32, Int64, LargeUtf8, Money, Timestamp, UInt64, Utf8, Utf8View};

/// The Arrow types the accounting's SQL gives derived columns. Wider than the raw tables'
/// [`crate::ColumnType`]: DataFusion picks a view or large string, a decimal or an unsigned
/// count by how a column is computed, and the stored file keeps what it picked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DerivedType {
    /// `Timestamp(Millisecond, "UTC")`.
    Timestamp,
    Utf8,
    Utf8View,
    LargeUtf8,
    Int32,
    Int64,
    UInt64,
    /// `Decimal128(20, 0)`: an integer that went through `COALESCE` with a literal.
    Decimal20,
    /// `Decimal128(38, 6)`: an amount of money, exact to the micro-unit of the currency (see
    /// queries/60_chargeback.sql for where amounts round).
    Money,
    Float64,
    Boolean,
}

impl DerivedType {
    pub fn data_type(self) -> DataType {
        match self {
            Timestamp => DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
            Utf8 => DataType::Utf8,
            Utf8View => DataType::Utf8View,
            LargeUtf8 => DataType::LargeUtf8,
            Int32 => DataType::Int32,
            Int64 => DataType::Int64,
            UInt64 => DataType::UInt64,
            Decimal20 => DataType::Decimal128(20, 0),
            Money => DataType::Decimal128(38, 6),
            Float64 => DataType::Float64,
            Boolean => DataType::Boolean,
        }
    }

    /// The SQL spelling shown by `gpuledger schema`.
    pub fn sql_name(self) -> &'static str {
        match self {
            Timestamp => "TIMESTAMP(ms, UTC)",
            Utf8 | Utf8View | LargeUtf8 => "VARCHAR",
            Int32 => "INT",
            Int64 => "BIGINT",
            UInt64 => "BIGINT UNSIGNED",
            Decimal20 => "DECIMAL(20, 0)",
            Money => "DECIMAL(38, 6)",
            Float64 => "DOUBLE",
            Boolean => "BOOLEAN",
        }
    }
}

/// One column of a derived table: name, type, whether it may be null, and what it means.
#[derive(Debug, Clone, Copy)]
pub struct DerivedColumn {
    pub name: &'static str,
    pub ty: DerivedType,
    pub nullable: bool,
    pub doc: &'static str,
}

const fn col(name: &'static str, ty: DerivedType, nullable: bool, doc: &'static str) -> DerivedColumn {
    DerivedColumn { name, ty, nullable, doc }
}

/// A table the ledger computes from the store and writes whole on every run (no partitions).
#[derive(Debug, Clone, Copy)]
pub struct DerivedTable {
    pub name: &'static str,
    pub doc: &'static str,
    pub columns: &'static [DerivedColumn],
}

impl DerivedTable {
    /// The Arrow schema of the stored file.
    pub fn arrow_schema(&self) -> SchemaRef {
        let fields: Vec<Field> = self.columns.iter().map(|c| Field::new(c.name, c.ty.data_type(), c.nullable)).collect();
        Arc::new(Schema::new(fields))
    }

    pub fn column(&self, name: &str) -> Option<&'static DerivedColumn> {
        self.columns.iter().find(|c| c.name == name)
    }
}

/// Every derived table, in the order `gpuledger schema` prints them.
pub const DERIVED_TABLES: &[DerivedTable] = &[
    PRICED_STATE_HOURS,
    POD_RUNS,
    UNOBSERVED_GPU_HOURS,
    CHARGEBACK_MONTHLY,
    ACCEPTED_UNITS_MONTHLY,
    BUDGET_MONTHLY,
    ENERGY_MONTHLY,
    IDLE_REASONS_MONTHLY,
    STRANDED_MONTHLY,
    ANOMALIES_DAILY,
    ANOMALY_DRIVERS,
    QUOTA_MONTHLY,
    RUN_SEGMENTS,
    RUN_FAILURES,
    FAILURE_CAUSES,
    QUEUE_WAITS,
    QUEUE_WAIT_SUMMARY,
    QUEUE_WAIT_MONTHLY,
    GPU_HOURLY,
    NODE_HOURLY,
];

/// Looks a derived table up by name.
pub fn derived_table(name: &str) -> Option<&'static DerivedTable> {
    DERIVED_TABLES.iter().find(|t| t.name == name)
}

pub const PRICED_STATE_HOURS: DerivedTable = DerivedTable {
    name: "priced_state_hours",
    doc: "GPU time (exact integer GPU-nanoseconds, and hours) by UTC hour, GPU, team, run segment, state and idle reason, each row priced once to the micro-unit (60_chargeback.sql over gpu_state_hours of 40_states.sql)",
    columns: &[
        col("date", Utf8, false, "Store partition (YYYY-MM-DD) of the samples the hours come from"),
        col("hour", Utf8, true, "UTC hour the GPU-hours fall in, RFC 3339 (2026-10-01T13:00:00Z): the table's grain"),
        col("day", Utf8, true, "UTC day (YYYY-MM-DD) of hour; differs from date for a span's piece after midnight"),
        col("month", Utf8, true, "UTC month (YYYY-MM) of day"),
        col("node", Utf8, true, "Kubernetes node (the DCGM hostname where no node matches it)"),
        col("uuid", Utf8, true, "GPU UUID (a MIG instance's hours are its parent GPU's)"),
        col("model_name", Utf8, true, "GPU model as DCGM reports it"),
        col("team", Utf8View, true, "Team the hours belong to; platform for unallocated time"),
        col("namespace", Utf8View, true, "Namespace of the pod holding the GPU; null when unallocated"),
        col("run", Utf8View, true, "Run: the Workload, else pod/<name> for a bare pod; null when unallocated"),
        col("segment", Decimal20, true, "Admission segment of the run (1 for a bare pod); null when unallocated"),
        col("outcome", Utf8View, true, "Outcome of the run segment (succeeded, failed, preempted, running, unknown); null when unallocated"),
        col("state", Utf8, false, "productive, allocated_idle, failed, preempted or unallocated"),
        col("reason", Utf8, true, "Why idle time was idle: startup, stall or teardown (allocated_idle); cordoned, stranded or no_demand (unallocated); null for other states"),
        col("provisional", Boolean, true, "The segment has not ended (outcome running or unknown): its state may still change"),
        col("gpu_ns", Int64, true, "GPU-nanoseconds, exact: each observation's time in integer nanoseconds, split among a MIG GPU's instances and leftover and among the pods sharing a GPU by largest remainder (ties: the smaller pod uid the exporter gives, else namespace/name); sum this, not gpu_hours"),
        col("gpu_hours", Float64, true, "gpu_ns / 3.6e12: this row's GPU-hours, for reading (MIG instances count N/M of their GPU, shared GPUs split among their pods)"),
        col("energy_kwh", Float64, true, "GPU energy of these hours, kWh (energy counter, else power reading), shared as the hours are; null where none was measured"),
        col("xid_error", Int64, true, "Largest non-zero XID error DCGM reported in these hours; null when none"),
        col("price", Money, true, "Price of a GPU-hour: by node label, else by GPU model, else the default"),
        col("cost", Money, true, "gpu_ns x price / 3.6e12, rounded half to even to the micro-unit: each row priced once, every coarser cost a sum of rows"),
        col("pool", Utf8, true, "Value of the node label that priced the hours; null when no label rule matched"),
        col("paid_by", Utf8, true, "Who pays for lost (failed, preempted) time: platform or team; null for other states"),
    ],
};

pub const POD_RUNS: DerivedTable = DerivedTable {
    name: "pod_runs",
    doc: "Each pod incarnation's run, segment, outcome and team (20_runs.sql)",
    columns: &[
        col("namespace", Utf8, false, "Pod namespace"),
        col("pod", Utf8, false, "Pod name"),
        col("workload", Utf8, true, "Kueue Workload the pod belongs to; null for a bare pod"),
        col("run", Utf8View, false, "The Workload, else pod/<name> (pod/<name>#N for a later incarnation of the name)"),
        col("segment", Decimal20, true, "Admission segment the pod belongs to (1 for a bare pod)"),
        col("outcome", Utf8, false, "succeeded, failed, preempted or running"),
        col("team", Utf8, false, "Team label of the pod, else of the Workload, else of the namespace, else the namespace"),
        col("pod_started", Timestamp, true, "When the pod started (first seen where no start time is known)"),
        col("segment_started", Timestamp, true, "When the segment was admitted (the pod's start for a bare pod)"),
        col("segment_ended", Timestamp, true, "When the segment ended; null while it runs"),
        col("last_termination_reason", Utf8, true, "Reason of the pod's last container termination (OOMKilled, Error, ...)"),
        col("last_exit_code", Int32, true, "Exit code of that termination"),
        col("node_name", Utf8, true, "Node the pod was scheduled on"),
        col("pod_key", Utf8, false, "The pod's uid, else namespace/name where the capture has no uid"),
        col("incarnation", UInt64, false, "Number of this pod among the pods of its name, by start"),
        col("valid_from_ms", Int64, true, "Start (epoch ms) of the time samples naming the pod belong to this incarnation"),
        col("valid_to_ms", Int64, true, "End (epoch ms, exclusive) of that time; null for the last incarnation"),
        col("uid", Utf8, true, "Pod uid"),
        col("pod_failed", Boolean, false, "The pod itself failed (phase Failed)"),
    ],
};

pub const UNOBSERVED_GPU_HOURS: DerivedTable = DerivedTable {
    name: "unobserved_gpu_hours",
    doc: "Whole-GPU hours no sample covered (gaps beyond max_gap), by day and node; reported, never charged (40_states.sql)",
    columns: &[
        col("date", Utf8, false, "Store partition (YYYY-MM-DD) of the sample before the gap"),
        col("month", Utf8, true, "UTC month (YYYY-MM) of day"),
        col("node", Utf8, true, "Kubernetes node (the DCGM hostname where no node matches it)"),
        col("model_name", Utf8, true, "GPU model as DCGM reports it"),
        col("gpu_hours", Float64, true, "Unobserved GPU-hours"),
        col("day", Utf8, true, "UTC day (YYYY-MM-DD) the hours fall in"),
    ],
};

pub const CHARGEBACK_MONTHLY: DerivedTable = DerivedTable {
    name: "chargeback_monthly",
    doc: "The chargeback: GPU-hours by state and cost by component, per month and team; amounts exact to the micro-unit, sums of priced rows and largest-remainder shares (60_chargeback.sql)",
    columns: &[
        col("month", Utf8, true, "UTC month (YYYY-MM)"),
        col("team", Utf8View, true, "Team; platform holds unallocated time"),
        col("productive_gpu_hours", Float64, false, "GPU-hours in state productive (summed as GPU-nanoseconds, converted once)"),
        col("allocated_idle_gpu_hours", Float64, false, "GPU-hours in state allocated_idle"),
        col("failed_gpu_hours", Float64, false, "GPU-hours in state failed"),
        col("preempted_gpu_hours", Float64, false, "GPU-hours in state preempted"),
        col("unallocated_gpu_hours", Float64, false, "GPU-hours in state unallocated"),
        col("compute", Money, false, "Cost of productive time"),
        col("network", Money, false, "Network overhead, direct or the team's share of a spread amount (by largest remainder: the teams' shares add up to the amount)"),
        col("storage", Money, false, "Storage overhead, direct or the team's share of a spread amount"),
        col("support", Money, false, "Support overhead, direct or the team's share of a spread amount"),
        col("idle", Money, false, "Cost of allocated_idle time plus the team's share of unallocated time (by idle policy; a spread share by largest remainder)"),
        col("failed_runs", Money, false, "Cost of failed and preempted time the team pays for (platform: what it pays for)"),
        col("operations", Money, false, "Operations overhead, direct or the team's share of a spread amount"),
        col("total", Money, false, "compute + network + storage + support + idle + failed_runs + operations, exact"),
        col("accepted_units", Float64, false, "Accepted units of the team's succeeded runs and extra units"),
        col("cost_per_accepted_unit", Money, true, "total / accepted_units, rounded half to even to the micro-unit; null without units"),
        col("provisional_gpu_hours", Float64, false, "GPU-hours of segments not yet ended (their state may change)"),
        col("lost_gpu_hours_platform_paid", Float64, false, "Failed and preempted GPU-hours of the team the platform pays for"),
        col("lost_cost_platform_paid", Money, false, "Cost of those hours"),
    ],
};

pub const BUDGET_MONTHLY: DerivedTable = DerivedTable {
    name: "budget_monthly",
    doc: "Each budgeted team's month: spend to date against its budget and the month-end forecast (65_budgets.sql)",
    columns: &[
        col("month", Utf8, true, "UTC month (YYYY-MM)"),
        col("team", Utf8, true, "Team the [[budgets]] entry names"),
        col("budget", Money, true, "The month's budget: the entry for the month, else the one without a month"),
        col("spend", Money, false, "Chargeback total to date (0 for a month the team used nothing in)"),
        col("gpu_cost", Money, false, "compute + idle + failed_runs to date: the part that grows with GPU time"),
        col("overheads", Money, false, "network + storage + support + operations: configured for the whole month"),
        col("elapsed_days", Float64, false, "Days of the month the data covers"),
        col("month_days", Float64, true, "Days in the month"),
        col("forecast", Money, true, "Month-end spend at this rate: gpu_cost x month_days / elapsed_days (rounded half to even to the micro-unit) + overheads; spend once the data has passed the month"),
        col("used_ratio", Float64, true, "spend / budget"),
        col("forecast_ratio", Float64, true, "forecast / budget"),
    ],
};

pub const ENERGY_MONTHLY: DerivedTable = DerivedTable {
    name: "energy_monthly",
    doc: "GPU energy per month, team and state, with facility energy (pue) and emissions; beside the chargeback, not in it (67_energy.sql)",
    columns: &[
        col("month", Utf8, true, "UTC month (YYYY-MM)"),
        col("team", Utf8View, true, "Team; platform holds unallocated time"),
        col("state", Utf8, false, "productive, allocated_idle, failed, preempted or unallocated"),
        col("gpu_hours", Float64, true, "GPU-hours in that state"),
        col("measured_gpu_hours", Float64, true, "Of those, the hours whose energy was measured"),
        col("kwh", Float64, false, "GPU energy, kWh"),
        col("facility_kwh", Float64, true, "kwh x [energy] pue"),
        col("kg_co2e", Float64, true, "facility_kwh x [energy] grid_gco2_per_kwh / 1000; null without a grid intensity"),
    ],
};

pub const IDLE_REASONS_MONTHLY: DerivedTable = DerivedTable {
    name: "idle_reasons_monthly",
    doc: "Idle GPU-hours and their price-list cost per month, team, state and reason, ranked by cost (68_why_idle.sql)",
    columns: &[
        col("month", Utf8, true, "UTC month (YYYY-MM)"),
        col("team", Utf8View, true, "Team the idle hours belong to; platform for unallocated time"),
        col("state", Utf8, false, "allocated_idle or unallocated"),
        col("reason", Utf8, true, "startup, stall, teardown (allocated_idle); cordoned, stranded, no_demand (unallocated)"),
        col("gpu_hours", Float64, true, "Idle GPU-hours"),
        col("cost", Money, true, "Their price-list cost, before the idle policy moves any of it"),
        col("rank", UInt64, false, "Position in the month by cost, then hours (1 = costliest)"),
    ],
};

pub const STRANDED_MONTHLY: DerivedTable = DerivedTable {
    name: "stranded_monthly",
    doc: "Unallocated GPU-hours per month, node pool and GPU model, and how many were stranded (a GPU Workload waited for quota that could use them) or cordoned (68_why_idle.sql)",
    columns: &[
        col("month", Utf8, true, "UTC month (YYYY-MM)"),
        col("pool", Utf8, true, "Node pool: the node label value that priced the GPUs; null where no label rule matched"),
        col("model_name", Utf8, true, "GPU model as DCGM reports it"),
        col("unallocated_gpu_hours", Float64, true, "Unallocated GPU-hours"),
        col("stranded_gpu_hours", Float64, true, "Of them, stranded: a Workload asking for nvidia.com/gpu waited in a ClusterQueue whose GPU flavor selects the node"),
        col("stranded_cost", Money, true, "Price-list cost of the stranded hours (reported, not charged)"),
        col("cordoned_gpu_hours", Float64, true, "Of them, cordoned: the node was unschedulable or not Ready"),
    ],
};

pub const ANOMALIES_DAILY: DerivedTable = DerivedTable {
    name: "anomalies_daily",
    doc: "Each team's day of GPU cost against the median of its previous 14 observed days, flagged at [anomalies] k spreads above it (69_anomalies.sql)",
    columns: &[
        col("day", Utf8, true, "UTC day (YYYY-MM-DD); complete days only (the store has later observations)"),
        col("month", Utf8, true, "UTC month (YYYY-MM) of day"),
        col("team", Utf8View, true, "Team whose own allocated GPU time it is"),
        col("cost", Money, false, "Price-list cost of the team's allocated time that day, before any idle policy or who-pays rule"),
        col("baseline", Money, true, "Median cost of the baseline days (mean of the middle two, half to even); null with fewer than 7"),
        col("spread", Money, true, "max(1.4826 x MAD, 5% of baseline); null with fewer than 7 baseline days"),
        col("score", Float64, true, "(cost - baseline) / spread; null without a baseline or with a spread of 0"),
        col("flagged", Boolean, false, "score >= k, or cost > baseline where the spread is 0; false without a baseline"),
        col("baseline_days", Int64, false, "Observed days the baseline was taken over (at most 14)"),
    ],
};

pub const ANOMALY_DRIVERS: DerivedTable = DerivedTable {
    name: "anomaly_drivers",
    doc: "What drove each flagged day of anomalies_daily: the team's GPUs and runs whose cost that day rose most over their own median of the baseline days, at most 10 per day (69_anomalies.sql)",
    columns: &[
        col("day", Utf8, true, "UTC day (YYYY-MM-DD) flagged in anomalies_daily"),
        col("month", Utf8, true, "UTC month (YYYY-MM) of day"),
        col("team", Utf8View, true, "Team whose day was flagged"),
        col("rank", UInt64, false, "1 for the largest increase of the day"),
        col("node", Utf8, true, "Kubernetes node (the DCGM hostname where no node matches it)"),
        col("uuid", Utf8, true, "GPU UUID (a MIG instance's time is its parent GPU's)"),
        col("namespace", Utf8View, true, "Namespace of the run"),
        col("run", Utf8View, true, "Run: the Workload, or pod/<name> for a pod without one"),
        col("pod", Utf8, true, "A pod of the run on that node (the first by name where several); null where the capture has no such pod object"),
        col("cost", Money, true, "Price-list cost of the run on that GPU that day"),
        col("baseline", Money, true, "Median of the same GPU and run's cost over the team's baseline days, zero where it held nothing"),
        col("increase", Money, true, "cost - baseline (above zero)"),
    ],
};

pub const QUOTA_MONTHLY: DerivedTable = DerivedTable {
    name: "quota_monthly",
    doc: "Each ClusterQueue's nominal GPU quota per month and flavor, as GPU-hours: used by its Workloads, borrowed beyond it, left unused, and what the unused part cost (62_quota_monthly.sql over 58_quota.sql)",
    columns: &[
        col("month", Utf8, true, "UTC month (YYYY-MM)"),
        col("cluster_queue", Utf8, true, "ClusterQueue"),
        col("team", Utf8, false, "Its owner: its team label, else [[quota.owners]], else platform"),
        col("flavor", Utf8, true, "GPU ResourceFlavor"),
        col("nominal_gpu_hours", Float64, true, "nominalQuota of nvidia.com/gpu x time, in GPU-hours (units x the flavor's GPUs per advertised unit)"),
        col("used_gpu_hours", Float64, true, "Quota its admitted Workloads used on the flavor, from admission to the segment's end"),
        col("borrowed_gpu_hours", Float64, true, "Used beyond nominal, hour by hour"),
        col("unused_gpu_hours", Float64, true, "Nominal left unused, hour by hour"),
        col("unused_cost", Money, false, "Unallocated cost of the flavor's nodes the quota idle policy charges for the unused quota (computed under every policy)"),
    ],
};

pub const ACCEPTED_UNITS_MONTHLY: DerivedTable = DerivedTable {
    name: "accepted_units_monthly",
    doc: "Accepted units per month, team and unit name: succeeded runs' annotations plus configured extra units (50_units.sql)",
    columns: &[
        col("month", Utf8, true, "UTC month (YYYY-MM) the run ended in, or of the extra units"),
        col("team", Utf8, true, "Team"),
        col("unit", Utf8, true, "Unit name"),
        col("accepted_units", Float64, true, "Units accepted"),
    ],
};

pub const RUN_SEGMENTS: DerivedTable = DerivedTable {
    name: "run_segments",
    doc: "Every run segment with its pods, GPU time and cost, and the part of it lost (80_failures.sql)",
    columns: &[
        col("namespace", Utf8, false, "Namespace"),
        col("run", Utf8View, false, "The Workload, else pod/<name> for a bare pod"),
        col("workload", Utf8, true, "Kueue Workload; null for a bare pod"),
        col("segment", Decimal20, true, "Admission segment (1 for a bare pod)"),
        col("team", Utf8, true, "Team"),
        col("outcome", Utf8, true, "succeeded, failed, preempted or running"),
        col("started_at", Timestamp, true, "When the segment was admitted (the pod's start for a bare pod)"),
        col("ended_at", Timestamp, true, "When the segment ended; null while it runs"),
        col("pods", Int64, false, "Pod incarnations in the segment"),
        col("last_pod", Utf8, true, "The pod that started last (its name; the name breaks a tie); its termination speaks for a lost segment"),
        col("last_pod_key", Utf8, true, "That pod's key (uid, else namespace/name), to join `pods`"),
        col("failed_attempts", Int64, true, "Pods that failed while the segment went on (retried attempts)"),
        col("last_failed_pod", Utf8, true, "The last of the failed pods (its name); null when none failed"),
        col("last_failed_pod_key", Utf8, true, "That pod's key; null when none failed"),
        col("gpu_hours", Float64, false, "GPU-hours of the segment, all states"),
        col("cost", Money, false, "Cost of those hours"),
        col("lost_gpu_hours", Float64, false, "GPU-hours in state failed or preempted"),
        col("lost_cost", Money, false, "Cost of those hours"),
        col("xid_error", Int64, true, "Largest XID error DCGM reported on the segment's GPUs; null when none"),
        col("nodes", Utf8, true, "Nodes the segment's GPUs were on, comma-separated; null without GPU time"),
    ],
};

pub const RUN_FAILURES: DerivedTable = DerivedTable {
    name: "run_failures",
    doc: "Each failed or preempted segment (and each that went on after failed attempts) with its cause (80_failures.sql)",
    columns: &[
        col("namespace", Utf8, false, "Namespace"),
        col("run", Utf8View, false, "The Workload, else pod/<name> for a bare pod"),
        col("workload", Utf8, true, "Kueue Workload; null for a bare pod"),
        col("segment", Decimal20, true, "Admission segment (1 for a bare pod)"),
        col("team", Utf8, true, "Team"),
        col("outcome", Utf8, true, "failed or preempted (failed for a segment that went on after failed attempts)"),
        col("started_at", Timestamp, true, "When the segment was admitted"),
        col("ended_at", Timestamp, true, "When the segment ended; null while it runs"),
        col("cause", Utf8View, false, "Hardware fault (XID <code>, NodeNotReady, NodeDeleted), else eviction or termination reason"),
        col("exit_code", Int32, true, "Exit code of the pod whose termination speaks for the segment"),
        col("xid_error", Int64, true, "Largest XID error DCGM reported on the segment's GPUs; null when none"),
        col("gpu_hours", Float64, false, "Lost GPU-hours (failed and preempted time)"),
        col("cost", Money, false, "Cost of those hours"),
        col("nodes", Utf8, true, "Nodes the segment's GPUs were on, comma-separated"),
        col("event_reasons", LargeUtf8, true, "Reasons of Warning events about its pods or Workload while it ran, comma-separated"),
        col("paid_by", Utf8, true, "Who pays for the lost time: platform (hardware fault) or team"),
    ],
};

pub const FAILURE_CAUSES: DerivedTable = DerivedTable {
    name: "failure_causes",
    doc: "Failed and preempted segments per month, outcome and cause, with the GPU-hours and cost they lost (80_failures.sql)",
    columns: &[
        col("month", Utf8, true, "UTC month (YYYY-MM) the lost time was spent in (the end month for a segment without GPU time)"),
        col("outcome", Utf8, true, "failed or preempted"),
        col("cause", Utf8View, false, "Cause, as in run_failures"),
        col("segments", Int64, false, "Segments with this cause in the month"),
        col("gpu_hours", Float64, true, "Lost GPU-hours"),
        col("cost", Money, true, "Cost of those hours"),
    ],
};

pub const QUEUE_WAITS: DerivedTable = DerivedTable {
    name: "queue_waits",
    doc: "How long each Workload admission waited: creation, eviction or requeue to admission (70_queue.sql)",
    columns: &[
        col("namespace", Utf8, false, "Namespace"),
        col("workload", Utf8, false, "Kueue Workload"),
        col("segment", UInt64, false, "Admission number (1 for the first)"),
        col("admitted_at", Timestamp, true, "When the Workload was admitted (Admitted, else QuotaReserved)"),
        col("queued_at", Timestamp, true, "When the wait began: creation, else the eviction or requeue before this admission"),
        col("team", Utf8, false, "Team"),
        col("cluster_queue", Utf8, false, "ClusterQueue that admitted it (via its LocalQueue); empty when unknown"),
        col("wait_seconds", Float64, true, "admitted_at - queued_at, seconds"),
    ],
};

/// The columns of a queue wait figure, after `month` in [`QUEUE_WAIT_MONTHLY`].
macro_rules! wait_figures {
    ($($first:expr),*) => {
        &[
            $($first,)*
            col("team", Utf8, false, "Team"),
            col("cluster_queue", Utf8, false, "ClusterQueue; empty when unknown"),
            col("admissions", Int64, false, "Admissions"),
            col("p50_seconds", Float64, true, "Median wait, seconds (nearest rank)"),
            col("p95_seconds", Float64, true, "95th percentile wait, seconds (nearest rank)"),
            col("max_seconds", Float64, true, "Longest wait, seconds"),
            col("evictions", Int64, false, "Evictions of the team's Workloads in this ClusterQueue, over the whole data"),
            col("eviction_reasons", LargeUtf8, false, "Those evictions by reason (`Preempted x3, InactiveWorkload x1`); empty when none"),
        ]
    };
}

pub const QUEUE_WAIT_SUMMARY: DerivedTable = DerivedTable {
    name: "queue_wait_summary",
    doc: "Queue waits per team and ClusterQueue over the whole data, with evictions (70_queue.sql)",
    columns: wait_figures!(),
};

pub const QUEUE_WAIT_MONTHLY: DerivedTable = DerivedTable {
    name: "queue_wait_monthly",
    doc: "Queue waits per month of admission, team and ClusterQueue; evictions as in queue_wait_summary (70_queue.sql)",
    columns: wait_figures!(col("month", Utf8, true, "UTC month (YYYY-MM) of the admissions")),
};

pub const GPU_HOURLY: DerivedTable = DerivedTable {
    name: "gpu_hourly",
    doc: "What DCGM reported per physical GPU and UTC hour: mean activity, power, temperature, memory, XID errors; readings, not GPU time (45_hourly.sql)",
    columns: &[
        col("date", Utf8, false, "Store partition (YYYY-MM-DD) of the samples"),
        col("hour", Utf8, true, "UTC hour of the samples, RFC 3339 (2026-10-01T13:00:00Z): the table's grain"),
        col("month", Utf8, true, "UTC month (YYYY-MM) of hour"),
        col("hostname", Utf8, true, "DCGM Hostname label as the exporter wrote it (the fleet dashboard's node)"),
        col("node", Utf8, true, "Kubernetes node the hostname names (the hostname where no node matches it)"),
        col("gpu", Int32, true, "GPU index on its host"),
        col("uuid", Utf8, true, "GPU UUID (MIG instances are read as part of their GPU)"),
        col("model_name", Utf8, true, "GPU model as DCGM reports it"),
        col("samples", Int64, false, "Readings the means are over: the GPU's rows at one instant are one reading (an HA pair of scrapers counts once)"),
        col("activity", Float64, true, "Mean activity, percent: engine activity x 100 where reported, else utilisation"),
        col("power_w", Float64, true, "Mean power draw, W"),
        col("temp_c", Float64, true, "Mean GPU temperature, degrees C"),
        col("max_temp_c", Float64, true, "Highest GPU temperature, degrees C"),
        col("fb_used_mib", Float64, true, "Mean framebuffer memory used, MiB"),
        col("xid_samples", Int64, false, "Readings reporting an XID error"),
        col("xid_error", Int64, true, "Largest XID error code reported; null when none"),
        col("first_xid_at", Timestamp, true, "First sample reporting an XID error; null when none"),
        col("last_xid_at", Timestamp, true, "Last sample reporting an XID error; null when none"),
    ],
};

pub const NODE_HOURLY: DerivedTable = DerivedTable {
    name: "node_hourly",
    doc: "What DCGM reported per node (exporter Hostname) and UTC hour, over its GPUs' hours (45_hourly.sql over gpu_hourly)",
    columns: &[
        col("date", Utf8, false, "Store partition (YYYY-MM-DD) of the samples"),
        col("hour", Utf8, true, "UTC hour of the samples, RFC 3339: the table's grain"),
        col("month", Utf8, true, "UTC month (YYYY-MM) of hour"),
        col("hostname", Utf8, true, "DCGM Hostname label as the exporter wrote it"),
        col("node", Utf8, true, "Kubernetes node the hostname names (the hostname where no node matches it)"),
        col("gpus", Int64, false, "GPUs (UUIDs) with samples in the hour"),
        col("samples", Int64, true, "Sample rows over all its GPUs"),
        col("activity", Float64, true, "Mean of its GPUs' mean activity, percent (each GPU weighs the same)"),
        col("power_w", Float64, true, "Sum of its GPUs' mean power draw, W"),
        col("temp_c", Float64, true, "Mean of its GPUs' mean temperature, degrees C"),
        col("max_temp_c", Float64, true, "Its hottest GPU's highest temperature, degrees C"),
        col("fb_used_mib", Float64, true, "Sum of its GPUs' mean framebuffer memory used, MiB"),
        col("gpus_with_xid", Int64, false, "GPUs that reported an XID error in the hour"),
        col("xid_samples", Int64, true, "Samples reporting an XID error, over its GPUs"),
        col("xid_error", Int64, true, "Largest XID error code reported; null when none"),
    ],
};

/// The report views of `queries/90_reports.sql` that the month report reads beside the derived
/// tables: views over those tables, never stored, declared so that a report row is read by what
/// its columns are (an amount of money or a number) rather than by hand.
pub const REPORT_VIEWS: &[DerivedTable] = &[REPORT_MONTHS, REPORT_USAGE, REPORT_ENERGY];

/// Looks a derived table or report view up by name.
pub fn declared(name: &str) -> Option<&'static DerivedTable> {
    DERIVED_TABLES.iter().chain(REPORT_VIEWS).find(|t| t.name == name)
}

pub const REPORT_MONTHS: DerivedTable = DerivedTable {
    name: "report_months",
    doc: "Months with GPU time, overheads or units, and their GPU-hours in every state (90_reports.sql)",
    columns: &[col("month", Utf8, true, "UTC month (YYYY-MM)"), col("gpu_hours", Float64, false, "GPU-hours of the month, every state")],
};

pub const REPORT_USAGE: DerivedTable = DerivedTable {
    name: "report_usage",
    doc: "GPU-hours and cost per month, team, state and GPU model: the grain of the FOCUS export and the report's usage table (90_reports.sql)",
    columns: &[
        col("month", Utf8, true, "UTC month (YYYY-MM)"),
        col("team", Utf8View, true, "Team; platform holds unallocated time and the lost time it pays for"),
        col("state", Utf8, false, "productive, allocated_idle, failed, preempted or unallocated"),
        col("model_name", Utf8, false, "GPU model (unknown where DCGM named none)"),
        col("gpu_hours", Float64, true, "GPU-hours, summed as nanoseconds"),
        col("provisional_gpu_hours", Float64, true, "Of those, the hours of segments that have not ended"),
        col("cost", Money, true, "Price-list cost: the sum of the priced rows"),
        col("accepted_units", Float64, true, "The team's accepted units, spread over its productive rows by GPU-hours"),
        col("platform_paid", Boolean, false, "Lost time whose cost the platform pays, on platform's row"),
    ],
};

pub const REPORT_ENERGY: DerivedTable = DerivedTable {
    name: "report_energy",
    doc: "Energy per month and team beside its cost (90_reports.sql)",
    columns: &[
        col("month", Utf8, true, "UTC month (YYYY-MM)"),
        col("team", Utf8View, true, "Team"),
        col("kwh", Float64, true, "GPU energy, kWh"),
        col("facility_kwh", Float64, true, "kwh x [energy] pue"),
        col("kg_co2e", Float64, true, "Emissions; null without a grid intensity"),
        col("gpu_hours", Float64, true, "GPU-hours"),
        col("measured_gpu_hours", Float64, true, "Of those, the hours whose energy was measured"),
        col("kwh_per_accepted_unit", Float64, true, "kwh per accepted unit; null without units"),
        col("cost_per_accepted_unit", Money, true, "The chargeback's cost per accepted unit; null without units"),
    ],
};

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn derived_tables_are_consistent_and_apart_from_the_raw_ones() {
        let mut names = HashSet::new();
        for t in DERIVED_TABLES.iter().chain(REPORT_VIEWS) {
            assert!(names.insert(t.name), "duplicate derived table {}", t.name);
            assert!(crate::table(t.name).is_none(), "{} is also a raw table", t.name);
            assert!(!t.doc.is_empty(), "{} has no doc", t.name);
            let mut cols = HashSet::new();
            for c in t.columns {
                assert!(cols.insert(c.name), "{}.{} declared twice", t.name, c.name);
                assert!(!c.doc.is_empty(), "{}.{} has no doc", t.name, c.name);
            }
        }
    }
}
