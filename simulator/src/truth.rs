//! The ledger figures a capture implies, computed from the simulation state while its samples
//! are generated (never by reading the files back), following docs/accounting.md "Accounting rules".
//!
//! Amounts are kept as integer "sevenths of a GPU x milliseconds", so that sums are exact and do
//! not depend on thread or summation order; they become f64 GPU-hours only in `expected.json`.
//!
//! Idle time is also filed by why it was idle ("Why GPUs were idle"): a free GPU's reason is
//! decided at each observation from the node's changes and the Workloads waiting then
//! ([`stranding_windows`]); a pod's allocated-idle time waits in its series until an active
//! observation or the end of its hold tells whether it was startup, stall or teardown.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::cluster::{CLUSTER_QUEUES, Cluster, N_POOLS, NAMESPACES, POOLS, PoolId, Timeline};
use crate::out::{MS_PER_DAY, month_string, next_month_start_ms, rfc3339};
use crate::schedule::{
    FailReason, Group, Job, SegEnd, Shape, Sim, Term, accepted_units, cq_gpu_flavor_pools, run_team,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum State {
    Productive = 0,
    AllocatedIdle = 1,
    Failed = 2,
    Preempted = 3,
    Unallocated = 4,
}

pub const STATES: [&str; 5] = [
    "productive",
    "allocated_idle",
    "failed",
    "preempted",
    "unallocated",
];

/// Why a GPU was idle (docs/accounting.md "Why GPUs were idle"): the first three split unallocated
/// time, the last three allocated-idle time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Reason {
    Cordoned = 0,
    Stranded = 1,
    NoDemand = 2,
    Startup = 3,
    Stall = 4,
    Teardown = 5,
}

pub const REASONS: [&str; 6] = ["cordoned", "stranded", "no_demand", "startup", "stall", "teardown"];

impl Reason {
    /// The state whose time this reason splits.
    pub fn state(self) -> State {
        match self {
            Reason::Cordoned | Reason::Stranded | Reason::NoDemand => State::Unallocated,
            Reason::Startup | Reason::Stall | Reason::Teardown => State::AllocatedIdle,
        }
    }
}

/// How a segment's samples count, as known at the end of the capture.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SegClass {
    /// Succeeded: productive or idle by activity.
    Settled,
    Failed,
    Preempted,
    /// Still running at the end: by activity, and provisional.
    Running,
}

pub fn seg_class(end: &SegEnd) -> SegClass {
    match end {
        SegEnd::Running => SegClass::Running,
        SegEnd::Succeeded(_) => SegClass::Settled,
        SegEnd::Failed(..) => SegClass::Failed,
        SegEnd::Preempted { .. } => SegClass::Preempted,
    }
}

/// UTC months touched by a capture, so that an amount can be filed by month index.
#[derive(Debug, Clone)]
pub struct Months {
    starts: Vec<i64>,
    pub names: Vec<String>,
}

impl Months {
    /// Months from the one holding `from_ms` to the one holding `to_ms`.
    pub fn new(from_ms: i64, to_ms: i64) -> Self {
        let (y, m, _) = crate::out::civil_from_days(from_ms.div_euclid(MS_PER_DAY));
        let mut start = crate::out::days_from_civil(y, m, 1) * MS_PER_DAY;
        let mut starts = Vec::new();
        let mut names = Vec::new();
        while start <= to_ms {
            starts.push(start);
            names.push(month_string(start));
            start = next_month_start_ms(start);
        }
        Months { starts, names }
    }

    pub fn len(&self) -> usize {
        self.starts.len()
    }

    pub fn index(&self, ms: i64) -> usize {
        match self.starts.binary_search(&ms) {
            Ok(i) => i,
            Err(i) => i.saturating_sub(1),
        }
    }
}

/// Splits `[a, b)` at every UTC midnight and files each piece under its month.
pub fn split_span(months: &Months, a: i64, b: i64, out: &mut Vec<(usize, i64)>) {
    let mut a = a;
    while a < b {
        let midnight = (a.div_euclid(MS_PER_DAY) + 1) * MS_PER_DAY;
        let e = b.min(midnight);
        let m = months.index(a);
        match out.last_mut() {
            Some(last) if last.0 == m => last.1 += e - a,
            _ => out.push((m, e - a)),
        }
        a = e;
    }
}

/// Per-thread accumulator of observed, unobserved and per-segment amounts.
#[derive(Debug, Clone)]
pub struct Acc {
    months: usize,
    teams: usize,
    /// [month][team][state][pool] -> (total, provisional)
    cells: Vec<(u64, u64)>,
    /// [month][pool]
    unobserved: Vec<u64>,
    /// Per segment.
    pub seg: Vec<u64>,
    /// Failed and preempted amounts per (segment, month, pool), kept apart until it is known
    /// whether a hardware fault lost the segment (docs/accounting.md "Who pays for lost runs").
    pub lost: BTreeMap<(u32, usize, usize), u64>,
    /// (segment, node, GPU of the node) each lost segment's time was observed on.
    pub lost_gpus: BTreeSet<(u32, u32, u32)>,
    /// [month][team][reason][pool]: unallocated and allocated-idle time by why it was idle.
    reasons: Vec<u64>,
    /// [month][team][state][pool]: the time under `sharing = "measured"` (docs/accounting.md
    /// "Measured sharing"), in millionths of the amounts of `cells` (so sevenths x ms x SCALE x
    /// 10^6): a time-sliced pod's part is its millionths of the piece, exactly; all else is as
    /// in `cells`.
    measured: Vec<u128>,
    /// [month][team][state][basis]: energy numerators (docs/accounting.md "Energy"), kept as exact
    /// integers so that sums do not depend on thread or summation order. Each is a sum of
    /// (mJ-rate x amount), where the amount is the span piece's sevenths x ms x SCALE:
    /// basis [`ENERGY_POWER`] sums power (mW) x amount, so mJ = numerator / (1000 x 7 x SCALE);
    /// basis [`ENERGY_COUNTER`] + j - 1 sums the counter's increase (mJ) over a span of j
    /// scrape intervals x amount, so mJ = numerator / (j x interval_ms x 7 x SCALE).
    energy: Vec<u128>,
}

/// Energy bases of [`Acc`]: the power reading, or the counter over a span of 1 or 2 intervals
/// (max_gap is 2.5 intervals and observations lie on the scrape grid, so a span within it is
/// one or two intervals long).
pub const ENERGY_POWER: usize = 0;
pub const ENERGY_COUNTER: usize = 1;
const ENERGY_BASES: usize = 3;

impl Acc {
    pub fn new(months: usize, teams: usize, segs: usize) -> Self {
        Acc {
            months,
            teams,
            cells: vec![(0, 0); months * teams * 5 * N_POOLS],
            unobserved: vec![0; months * N_POOLS],
            seg: vec![0; segs],
            lost: BTreeMap::new(),
            lost_gpus: BTreeSet::new(),
            reasons: vec![0; months * teams * REASONS.len() * N_POOLS],
            measured: vec![0; months * teams * 5 * N_POOLS],
            energy: vec![0; months * teams * 5 * ENERGY_BASES],
        }
    }

    /// Files energy of `team`'s time in `state`: for basis [`ENERGY_POWER`], `rate` is the
    /// power reading in mW; for [`ENERGY_COUNTER`] + j - 1, the counter's increase in mJ over a
    /// span of j scrape intervals. `amount` is the time share as in [`Acc::add`].
    #[inline]
    pub fn add_energy(&mut self, month: usize, team: usize, state: State, basis: usize, rate: u64, amount: u64) {
        debug_assert!(basis < ENERGY_BASES);
        let i = ((month * self.teams + team) * 5 + state as usize) * ENERGY_BASES + basis;
        self.energy[i] += rate as u128 * amount as u128;
    }

    /// The energy filed for (month, team, state) in kWh, for scrape interval `interval_ms`.
    pub fn energy_kwh(&self, month: usize, team: usize, state: usize, interval_ms: i64) -> f64 {
        let i = ((month * self.teams + team) * 5 + state) * ENERGY_BASES;
        let e = &self.energy[i..i + ENERGY_BASES];
        let div = (7 * SCALE) as f64;
        let iv = interval_ms as f64;
        let mj = (e[ENERGY_POWER] as f64 / 1000.0
            + e[ENERGY_COUNTER] as f64 / iv
            + e[ENERGY_COUNTER + 1] as f64 / (2.0 * iv))
            / div;
        mj / 3.6e9
    }

    fn reason_index(&self, month: usize, team: usize, reason: Reason, pool: usize) -> usize {
        ((month * self.teams + team) * REASONS.len() + reason as usize) * N_POOLS + pool
    }

    /// Files idle time under its reason; the same amount must also go to the reason's state
    /// with [`Acc::add`].
    #[inline]
    pub fn add_reason(&mut self, month: usize, team: usize, reason: Reason, pool: PoolId, amount: u64) {
        let i = self.reason_index(month, team, reason, pool as usize);
        self.reasons[i] += amount;
    }

    /// Files a lost (failed or preempted) segment's amount, observed on `gpu` of `node`.
    pub fn add_lost(&mut self, seg: u32, month: usize, pool: PoolId, node: u32, gpu: u32, amount: u64) {
        *self.lost.entry((seg, month, pool as usize)).or_insert(0) += amount;
        self.lost_gpus.insert((seg, node, gpu));
    }

    #[inline]
    pub fn add(
        &mut self,
        month: usize,
        team: usize,
        state: State,
        pool: PoolId,
        amount: u64,
        provisional: bool,
    ) {
        let i = ((month * self.teams + team) * 5 + state as usize) * N_POOLS + pool as usize;
        let c = &mut self.cells[i];
        c.0 += amount;
        if provisional {
            c.1 += amount;
        }
    }

    /// Files time under `sharing = "measured"`, in the units of `measured`.
    #[inline]
    pub fn add_measured(&mut self, month: usize, team: usize, state: State, pool: PoolId, amount: u128) {
        let i = ((month * self.teams + team) * 5 + state as usize) * N_POOLS + pool as usize;
        self.measured[i] += amount;
    }

    #[inline]
    pub fn add_unobserved(&mut self, month: usize, pool: PoolId, amount: u64) {
        self.unobserved[month * N_POOLS + pool as usize] += amount;
    }

    pub fn merge(&mut self, other: &Acc) {
        for (a, b) in self.cells.iter_mut().zip(&other.cells) {
            a.0 += b.0;
            a.1 += b.1;
        }
        for (a, b) in self.unobserved.iter_mut().zip(&other.unobserved) {
            *a += b;
        }
        for (a, b) in self.seg.iter_mut().zip(&other.seg) {
            *a += b;
        }
        for (k, v) in &other.lost {
            *self.lost.entry(*k).or_insert(0) += v;
        }
        self.lost_gpus.extend(other.lost_gpus.iter().copied());
        for (a, b) in self.reasons.iter_mut().zip(&other.reasons) {
            *a += b;
        }
        for (a, b) in self.measured.iter_mut().zip(&other.measured) {
            *a += b;
        }
        for (a, b) in self.energy.iter_mut().zip(&other.energy) {
            *a += b;
        }
    }
}

/// Sevenths-of-a-GPU milliseconds -> GPU-hours.
pub fn hours(amount: u64) -> f64 {
    amount as f64 / 7.0 / SCALE as f64 / 3_600_000.0
}

/// Amounts are sevenths x milliseconds x SCALE: k pods sharing a time-sliced GPU (k <= 4) hold
/// 1/k of it each, which is exact in twelfths.
pub const SCALE: u64 = 12;

#[derive(Serialize)]
pub struct Expected {
    pub config: ConfigOut,
    pub totals: Totals,
    pub gpu_hours: Vec<GpuHoursRow>,
    pub unobserved_gpu_hours: Vec<UnobservedRow>,
    pub accepted_units: Vec<UnitsRow>,
    pub runs: Vec<RunRow>,
    pub queue_waits: Vec<WaitRow>,
    /// The `allocated_idle` and `unallocated` hours of `gpu_hours` split by why they were idle:
    /// per (month, team, state, pool) the reasons add up to that `gpu_hours` row.
    pub idle_reasons: Vec<IdleReasonRow>,
    /// Stranded hours per month and node pool (the `stranded` rows of `idle_reasons`, summed
    /// over teams, which are only `platform`).
    pub stranded: Vec<StrandedRow>,
    /// GPU energy per (month, team, state), docs/accounting.md "Energy": each covered span's mean power
    /// (the energy counter's increase to the next observation within max_gap, a decrease being
    /// a reset counted from the new value; else the power reading) times the span and the
    /// share its time is filed with. Only rows with kwh > 0, sorted by month, team, state.
    pub energy: Vec<EnergyRow>,
    /// Planted spend anomalies (captures of 9 days or more have one), docs/accounting.md
    /// "Spend anomalies".
    pub anomaly_spikes: Vec<SpikeRow>,
    /// Restarts of the vLLM servers' counters in the capture (a decrease of a series, counted
    /// from its new value), docs/accounting.md "Counter units".
    pub counter_resets: u64,
    /// GPU quota per month, ClusterQueue and GPU pool flavor ([`quota_rows`]).
    pub quota: Vec<QuotaRow>,
    /// The GPU-hours of `gpu_hours` as the ledger gives them with `[accounting] sharing =
    /// "measured"` (docs/accounting.md "Measured sharing"). Only time-sliced GPUs (pool t4)
    /// differ from `gpu_hours`.
    pub measured_sharing: MeasuredSharing,
}

/// The figures `sharing = "measured"` changes.
#[derive(Serialize)]
pub struct MeasuredSharing {
    /// Per (month, team, state, pool), as `gpu_hours` without its provisional and hardware-fault
    /// parts; sorted the same way.
    pub gpu_hours: Vec<MeasuredRow>,
}

#[derive(Serialize)]
pub struct MeasuredRow {
    pub month: String,
    pub team: String,
    pub state: &'static str,
    pub model_name: &'static str,
    pub pool: &'static str,
    pub gpu_hours: f64,
}

/// One ClusterQueue's GPU quota on one pool's flavor in one month ([`quota_rows`]).
#[derive(Serialize)]
pub struct QuotaRow {
    pub month: String,
    pub cluster_queue: String,
    /// The team label the ClusterQueue carries, if any (else the configuration names its owner,
    /// or it is the platform's).
    pub owner_label: Option<String>,
    pub flavor: &'static str,
    /// nominalQuota of nvidia.com/gpu (advertised units).
    pub nominal_units: f64,
    pub nominal_gpu_hours: f64,
    pub used_gpu_hours: f64,
    pub borrowed_gpu_hours: f64,
    pub unused_gpu_hours: f64,
}

/// A planted spend anomaly: a pod holding GPUs over the whole of `day` that its team does not
/// usually hold. The ledger should flag (team, day) and name these GPUs and this run.
#[derive(Serialize)]
pub struct SpikeRow {
    pub day: String,
    pub team: String,
    pub namespace: String,
    pub run: String,
    pub pod: String,
    pub node: String,
    /// UUIDs of the GPUs it holds.
    pub gpus: Vec<String>,
    pub started: String,
    pub ended: String,
}

#[derive(Serialize)]
pub struct EnergyRow {
    pub month: String,
    pub team: String,
    pub state: &'static str,
    pub kwh: f64,
}

#[derive(Serialize)]
pub struct IdleReasonRow {
    pub month: String,
    pub team: String,
    pub state: &'static str,
    pub reason: &'static str,
    pub pool: &'static str,
    pub gpu_hours: f64,
}

#[derive(Serialize)]
pub struct StrandedRow {
    pub month: String,
    pub pool: &'static str,
    pub gpu_hours: f64,
}

#[derive(Serialize)]
pub struct ConfigOut {
    pub gpus: u32,
    pub days: u32,
    pub seed: u64,
    pub scrape_interval_s: u32,
    pub start: String,
    pub end: String,
    /// Whether DRA series carry pod labels ([`crate::SimOptions`]); the figures are the same.
    pub dra_pod_labels: bool,
}

#[derive(Serialize)]
pub struct Totals {
    pub samples: u64,
    pub gpu_rows: u64,
    pub blank_values: u64,
    pub objects_by_kind: BTreeMap<String, u64>,
}

#[derive(Serialize)]
pub struct GpuHoursRow {
    pub month: String,
    pub team: String,
    pub state: &'static str,
    pub model_name: &'static str,
    pub pool: &'static str,
    pub gpu_hours: f64,
    pub provisional_gpu_hours: f64,
    /// Of the failed or preempted hours, those of segments a hardware fault lost (the platform
    /// pays for them under `hardware_failures = "platform"`).
    pub hardware_fault_gpu_hours: f64,
}

#[derive(Serialize)]
pub struct UnobservedRow {
    pub month: String,
    pub pool: &'static str,
    pub gpu_hours: f64,
}

#[derive(Serialize)]
pub struct UnitsRow {
    pub month: String,
    pub team: String,
    pub unit: String,
    pub accepted_units: f64,
}

#[derive(Serialize)]
pub struct RunRow {
    pub namespace: String,
    pub workload: String,
    pub job: String,
    pub team: String,
    pub segment: u32,
    pub outcome: &'static str,
    pub start: String,
    pub end: Option<String>,
    /// Workload condition reason, refined by the pod's last termination: `Succeeded`,
    /// `OOMKilled`, `Error`, `Preempted`; empty while running.
    pub cause: String,
    pub exit_code: Option<i32>,
    pub xid: Option<u64>,
    /// The hardware fault that lost the segment (`XID 79`, `NodeNotReady`), if one did.
    pub fault: Option<String>,
    pub cluster_queue: String,
    pub gpu_hours: f64,
}

#[derive(Serialize)]
pub struct WaitRow {
    pub namespace: String,
    pub workload: String,
    pub team: String,
    pub cluster_queue: String,
    pub wait_seconds: Vec<f64>,
}

pub struct Counts<'a> {
    /// The vLLM fleet's counter samples and what they owe.
    pub inference: &'a crate::inference::Counted,
    pub samples: u64,
    pub gpu_rows: u64,
    pub blank_values: u64,
    pub objects_by_kind: BTreeMap<String, u64>,
}

pub fn cluster_queue_of(ns: usize) -> String {
    NAMESPACES[ns]
        .cq
        .map(|i| CLUSTER_QUEUES[i].0.to_string())
        .unwrap_or_default()
}

#[allow(clippy::too_many_arguments)]
pub fn build_expected(
    cfg: &crate::SimConfig,
    opts: &crate::SimOptions,
    cl: &Cluster,
    tl: &Timeline,
    sim: &Sim,
    months: &Months,
    acc: &Acc,
    counts: Counts<'_>,
) -> Expected {
    let counted = counts.inference;
    let faults = hardware_faults(cl, tl, sim, acc);
    // Hardware-fault hours per (month, team, state, pool).
    let mut fault_cells: BTreeMap<(usize, String, usize, usize), u64> = BTreeMap::new();
    for (&(seg, month, pool), &amount) in &acc.lost {
        if faults.contains_key(&seg) {
            let segment = &sim.segs[seg as usize];
            let state = if seg_class(&segment.end) == SegClass::Failed { State::Failed } else { State::Preempted };
            let team = run_team(&sim.jobs[segment.job as usize]).to_string();
            *fault_cells.entry((month, team, state as usize, pool)).or_insert(0) += amount;
        }
    }
    let mut gpu_hours = Vec::new();
    for m in 0..acc.months {
        for t in 0..acc.teams {
            for (s, state) in STATES.iter().enumerate() {
                for pool in POOLS {
                    let (total, prov) =
                        acc.cells[((m * acc.teams + t) * 5 + s) * N_POOLS + pool as usize];
                    if total == 0 {
                        continue;
                    }
                    gpu_hours.push(GpuHoursRow {
                        month: months.names[m].clone(),
                        team: sim.teams[t].clone(),
                        state,
                        model_name: pool.spec().model,
                        pool: pool.spec().name,
                        gpu_hours: hours(total),
                        provisional_gpu_hours: hours(prov),
                        hardware_fault_gpu_hours: hours(
                            fault_cells.get(&(m, sim.teams[t].clone(), s, pool as usize)).copied().unwrap_or(0),
                        ),
                    });
                }
            }
        }
    }
    gpu_hours.sort_by(|a, b| {
        (&a.month, &a.team, a.state, a.pool).cmp(&(&b.month, &b.team, b.state, b.pool))
    });
    let mut measured = Vec::new();
    for m in 0..acc.months {
        for t in 0..acc.teams {
            for (s, state) in STATES.iter().enumerate() {
                for pool in POOLS {
                    let v = acc.measured[((m * acc.teams + t) * 5 + s) * N_POOLS + pool as usize];
                    if v == 0 {
                        continue;
                    }
                    measured.push(MeasuredRow {
                        month: months.names[m].clone(),
                        team: sim.teams[t].clone(),
                        state,
                        model_name: pool.spec().model,
                        pool: pool.spec().name,
                        gpu_hours: v as f64 / 1e6 / 7.0 / SCALE as f64 / 3_600_000.0,
                    });
                }
            }
        }
    }
    measured.sort_by(|a, b| (&a.month, &a.team, a.state, a.pool).cmp(&(&b.month, &b.team, b.state, b.pool)));
    let (idle_reasons, stranded) = idle_rows(months, sim, acc);
    let mut energy = Vec::new();
    for m in 0..acc.months {
        for t in 0..acc.teams {
            for (s, state) in STATES.iter().enumerate() {
                let kwh = acc.energy_kwh(m, t, s, tl.interval_ms);
                if kwh > 0.0 {
                    energy.push(EnergyRow { month: months.names[m].clone(), team: sim.teams[t].clone(), state, kwh });
                }
            }
        }
    }
    energy.sort_by(|a, b| (&a.month, &a.team, a.state).cmp(&(&b.month, &b.team, b.state)));
    let mut unobserved = Vec::new();
    for m in 0..acc.months {
        for pool in POOLS {
            let v = acc.unobserved[m * N_POOLS + pool as usize];
            if v > 0 {
                unobserved.push(UnobservedRow {
                    month: months.names[m].clone(),
                    pool: pool.spec().name,
                    gpu_hours: hours(v),
                });
            }
        }
    }

    let mut units: BTreeMap<(String, String, String), f64> = BTreeMap::new();
    for (ji, job) in sim.jobs.iter().enumerate() {
        // A vLLM run with counter samples accepts what its counters counted, not one unit.
        if counted.counted_jobs.get(ji).copied().unwrap_or(false) {
            continue;
        }
        // A run accepts units only if it held a GPU: its pod is in the samples, or its Workload
        // asks for GPUs. A bare pod has no Workload: its succeeded pod must have been sampled.
        if job.shape == Shape::BarePod && job.segments.last().is_none_or(|&s| acc.seg[s as usize] == 0) {
            continue;
        }
        if let Some((t, true)) = job.finished {
            let (count, unit) = accepted_units(job);
            *units
                .entry((month_string(t * 1000), run_team(job).to_string(), unit))
                .or_insert(0.0) += count;
        }
    }
    // Counted per hour to the micro-unit, whole tokens over a million are exact.
    for ((month, team), (tokens, requests)) in &counted.units {
        *units.entry((month.clone(), team.clone(), crate::inference::TOKENS_UNIT.to_string())).or_insert(0.0) += *tokens as f64 / 1e6;
        *units.entry((month.clone(), team.clone(), crate::inference::REQUESTS_UNIT.to_string())).or_insert(0.0) += *requests as f64;
    }
    let accepted_units = units
        .into_iter()
        .map(|((month, team, unit), accepted_units)| UnitsRow {
            month,
            team,
            unit,
            accepted_units,
        })
        .collect();

    let mut runs = Vec::new();
    let mut waits = Vec::new();
    for job in &sim.jobs {
        let ns = NAMESPACES[job.ns].name.to_string();
        let cq = cluster_queue_of(job.ns);
        let mut w = Vec::new();
        let mut evicted_s = None;
        for &s in &job.segments {
            let seg = &sim.segs[s as usize];
            // docs/accounting.md "Queue": after an eviction the wait runs from the eviction, not the requeue.
            w.push((seg.admitted_s - evicted_s.unwrap_or(seg.queued_s)) as f64);
            evicted_s = match seg.end {
                SegEnd::Preempted { at, .. } => Some(at),
                _ => None,
            };
            let (outcome, end, cause) = match seg.end {
                SegEnd::Running => ("running", None, String::new()),
                SegEnd::Succeeded(t) => ("succeeded", Some(rfc3339(t)), "Succeeded".to_string()),
                SegEnd::Failed(t, r) => (
                    "failed",
                    Some(rfc3339(t)),
                    match r {
                        FailReason::OomKilled => "OOMKilled".to_string(),
                        FailReason::Error => "Error".to_string(),
                    },
                ),
                SegEnd::Preempted { at, .. } => {
                    ("preempted", Some(rfc3339(at)), "Preempted".to_string())
                }
            };
            let last_pod = seg
                .pods
                .iter()
                .rev()
                .map(|&p| &sim.pods[p as usize])
                .find(|p| !p.cancelled && p.end_s < tl.end_s);
            let exit_code = match (seg.end, last_pod) {
                (SegEnd::Running, _) | (_, None) => None,
                (_, Some(p)) => Some(match p.term {
                    Term::Completed => 0,
                    Term::OomKilled => 137,
                    Term::Error => 1,
                    Term::Killed => 143,
                }),
            };
            let xid = seg
                .pods
                .iter()
                .filter_map(|&p| sim.pods[p as usize].xid)
                .map(|x| x.3)
                .next();
            runs.push(RunRow {
                namespace: ns.clone(),
                workload: job.wl_name.clone(),
                job: job.name.clone(),
                team: run_team(job).to_string(),
                segment: seg.n,
                outcome,
                start: rfc3339(seg.admitted_s),
                end,
                cause,
                exit_code,
                xid,
                fault: faults.get(&s).cloned(),
                cluster_queue: cq.clone(),
                gpu_hours: hours(acc.seg[s as usize]),
            });
        }
        if !w.is_empty() {
            waits.push(WaitRow {
                namespace: ns,
                workload: job.wl_name.clone(),
                team: run_team(job).to_string(),
                cluster_queue: cq,
                wait_seconds: w,
            });
        }
    }

    Expected {
        config: ConfigOut {
            gpus: cfg.gpus,
            days: cfg.days,
            seed: cfg.seed,
            scrape_interval_s: cfg.scrape_interval_s,
            start: rfc3339(tl.start_s),
            end: rfc3339(tl.end_s),
            dra_pod_labels: opts.dra_pod_labels,
        },
        totals: Totals {
            samples: counts.samples,
            gpu_rows: counts.gpu_rows,
            blank_values: counts.blank_values,
            objects_by_kind: counts.objects_by_kind,
        },
        gpu_hours,
        unobserved_gpu_hours: unobserved,
        accepted_units,
        runs,
        queue_waits: waits,
        idle_reasons,
        stranded,
        energy,
        anomaly_spikes: spikes(cl, tl, sim),
        counter_resets: counted.resets,
        quota: quota_rows(cl, tl, sim),
        measured_sharing: MeasuredSharing { gpu_hours: measured },
    }
}

/// Each ClusterQueue's nominal `nvidia.com/gpu` quota per GPU pool flavor against what its
/// admitted Workloads used, hour by hour over the metrics' period (docs/accounting.md "Quota"),
/// as GPU-hours: quota units times the pool's GPUs per advertised unit (a time-sliced T4
/// advertises 4). The ledger's period starts at the first scrape and ends where the last one's
/// coverage does, within a scrape interval of these.
fn quota_rows(cl: &Cluster, tl: &Timeline, sim: &Sim) -> Vec<QuotaRow> {
    use crate::cluster::{CLUSTER_QUEUES, TIME_SLICE_REPLICAS, cluster_queue_owner_label};
    let hours = ((tl.end_s - tl.start_s + 3599) / 3600) as usize;
    let hour_start = |h: usize| tl.start_s + h as i64 * 3600;
    let overlap = |a: i64, b: i64, h: usize| (b.min(hour_start(h) + 3600).min(tl.end_s) - a.max(hour_start(h))).max(0);
    let cap = |g: Group| cl.slots.iter().filter(|s| crate::schedule::slot_group(cl, s) == g).count() as f64;
    let mut out = Vec::new();
    for (cq, &(name, share)) in CLUSTER_QUEUES.iter().enumerate() {
        for pool in crate::schedule::cq_gpu_flavor_pools(cq) {
            let units_per_gpu = if pool == PoolId::T4 { f64::from(TIME_SLICE_REPLICAS) } else { 1.0 };
            let nominal = (cap(Group::Whole(pool)) * share).round();
            // Unit-seconds used per hour.
            let mut used = vec![0.0f64; hours];
            for seg in &sim.segs {
                let job = &sim.jobs[seg.job as usize];
                // A bare pod has no Workload: Kueue never counts it against a quota.
                if job.group != Group::Whole(pool) || NAMESPACES[job.ns].cq != Some(cq) || job.shape == Shape::BarePod {
                    continue;
                }
                let end = match seg.end {
                    SegEnd::Running => i64::MAX,
                    SegEnd::Succeeded(t) | SegEnd::Failed(t, _) => t,
                    SegEnd::Preempted { at, .. } => at,
                };
                let units = f64::from(job.per_pod * job.pods);
                for (h, u) in used.iter_mut().enumerate() {
                    *u += units * overlap(seg.admitted_s, end, h) as f64;
                }
            }
            // Per month: nominal, used, borrowed, unused unit-seconds.
            let mut months: BTreeMap<String, [f64; 4]> = BTreeMap::new();
            for (h, &u) in used.iter().enumerate() {
                let n = nominal * overlap(hour_start(h), hour_start(h) + 3600, h) as f64;
                let m = months.entry(month_string(hour_start(h) * 1000)).or_default();
                m[0] += n;
                m[1] += u;
                m[2] += (u - n).max(0.0);
                m[3] += (n - u).max(0.0);
            }
            for (month, m) in months {
                let gpu_hours = |v: f64| v / units_per_gpu / 3600.0;
                out.push(QuotaRow {
                    month,
                    cluster_queue: name.to_string(),
                    owner_label: cluster_queue_owner_label(name).map(str::to_string),
                    flavor: pool.spec().name,
                    nominal_units: nominal,
                    nominal_gpu_hours: gpu_hours(m[0]),
                    used_gpu_hours: gpu_hours(m[1]),
                    borrowed_gpu_hours: gpu_hours(m[2]),
                    unused_gpu_hours: gpu_hours(m[3]),
                });
            }
        }
    }
    out
}

/// The runaway notebook's day ([`crate::schedule::runaway_notebook`]), where the capture has one.
fn spikes(cl: &Cluster, tl: &Timeline, sim: &Sim) -> Vec<SpikeRow> {
    let Some(day) = crate::schedule::runaway_day(tl) else { return Vec::new() };
    let mut out = Vec::new();
    for job in sim.jobs.iter().filter(|j| j.name.starts_with(crate::schedule::RUNAWAY_NOTEBOOK)) {
        for &s in &job.segments {
            for &p in &sim.segs[s as usize].pods {
                let pod = &sim.pods[p as usize];
                if pod.cancelled || pod.started_s == i64::MAX {
                    continue;
                }
                let node = &cl.nodes[pod.node as usize];
                let gpus = pod.slots.iter().map(|&x| node.gpus[cl.slots[x as usize].gpu as usize].uuid.clone()).collect();
                out.push(SpikeRow {
                    day: rfc3339(day)[..10].to_string(),
                    team: run_team(job).to_string(),
                    namespace: NAMESPACES[job.ns].name.to_string(),
                    run: job.wl_name.clone(),
                    pod: pod.name.clone(),
                    node: node.name.clone(),
                    gpus,
                    started: rfc3339(pod.started_s),
                    ended: rfc3339(pod.end_s),
                });
            }
        }
    }
    out
}

/// The `idle_reasons` and `stranded` rows of `expected.json`.
fn idle_rows(months: &Months, sim: &Sim, acc: &Acc) -> (Vec<IdleReasonRow>, Vec<StrandedRow>) {
    let reasons = [
        Reason::Cordoned,
        Reason::Stranded,
        Reason::NoDemand,
        Reason::Startup,
        Reason::Stall,
        Reason::Teardown,
    ];
    let mut rows = Vec::new();
    let mut stranded = Vec::new();
    for m in 0..acc.months {
        for pool in POOLS {
            let mut pool_stranded = 0;
            for t in 0..acc.teams {
                for reason in reasons {
                    let v = acc.reasons[acc.reason_index(m, t, reason, pool as usize)];
                    if v == 0 {
                        continue;
                    }
                    if reason == Reason::Stranded {
                        pool_stranded += v;
                    }
                    rows.push(IdleReasonRow {
                        month: months.names[m].clone(),
                        team: sim.teams[t].clone(),
                        state: STATES[reason.state() as usize],
                        reason: REASONS[reason as usize],
                        pool: pool.spec().name,
                        gpu_hours: hours(v),
                    });
                }
            }
            if pool_stranded > 0 {
                stranded.push(StrandedRow {
                    month: months.names[m].clone(),
                    pool: pool.spec().name,
                    gpu_hours: hours(pool_stranded),
                });
            }
        }
    }
    rows.sort_by(|a, b| {
        (&a.month, &a.team, a.state, a.pool, a.reason).cmp(&(&b.month, &b.team, b.state, b.pool, b.reason))
    });
    (rows, stranded)
}

/// The times (seconds, half-open) a job's Workload waits for quota (docs/accounting.md "Queue",
/// "Stranded capacity"): from its creation to its first admission, and from each eviction to
/// the next admission. A wait that no admission ends lasts until the Workload finishes or is
/// deleted, else past the end of the capture (`i64::MAX`). None for a pod Kueue does not manage.
pub fn pending_intervals(sim: &Sim, job: &Job) -> Vec<(i64, i64)> {
    if job.shape == Shape::BarePod {
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut since = Some(job.created_s);
    for &s in &job.segments {
        let seg = &sim.segs[s as usize];
        if let Some(from) = since {
            out.push((from, seg.admitted_s));
        }
        since = match seg.end {
            SegEnd::Preempted { at, .. } => Some(at),
            _ => None,
        };
    }
    if let Some(from) = since {
        let end = job.finished.map(|(t, _)| t).or(job.deleted_s).unwrap_or(i64::MAX);
        out.push((from, end));
    }
    out.retain(|&(a, b)| a < b);
    out
}

/// docs/accounting.md "Stranded capacity": per pool, the times (ms, half-open, merged, in order) at
/// which some Workload asking for whole GPUs (`nvidia.com/gpu`) waits in a ClusterQueue one of
/// whose GPU flavors selects the pool's nodes. Each Workload's ClusterQueue is its namespace's
/// (the LocalQueue there points at it).
pub fn stranding_windows(sim: &Sim) -> [Vec<(i64, i64)>; N_POOLS] {
    let mut out: [Vec<(i64, i64)>; N_POOLS] = Default::default();
    for job in &sim.jobs {
        let Some(cq) = NAMESPACES[job.ns].cq else { continue };
        if !matches!(job.group, Group::Whole(_)) || job.per_pod == 0 {
            continue;
        }
        let pools = cq_gpu_flavor_pools(cq);
        for (from, to) in pending_intervals(sim, job) {
            let ms = (from * 1000, to.saturating_mul(1000));
            for &pool in &pools {
                out[pool as usize].push(ms);
            }
        }
    }
    for windows in &mut out {
        windows.sort_unstable();
        let mut merged: Vec<(i64, i64)> = Vec::with_capacity(windows.len());
        for &(a, b) in windows.iter() {
            match merged.last_mut() {
                Some(last) if a <= last.1 => last.1 = last.1.max(b),
                _ => merged.push((a, b)),
            }
        }
        *windows = merged;
    }
    out
}

/// XID codes that are hardware faults: the ledger's default `hardware_xids`.
const HARDWARE_XIDS: [u64; 12] = [48, 61, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120];

/// The lost segments a hardware fault lost, with the fault (docs/accounting.md "Who pays for lost
/// runs"), worked out from the simulation: an XID error with a hardware code on a GPU the
/// segment's time was observed on (the first sample showing the code), or reported by an event
/// about such a node, during the segment or within max_gap (2.5 scrape intervals) after it; or
/// such a node not Ready (its NotReady stretch) at some time in the segment's last 10 minutes,
/// which also covers the NodeNotReady event at the stretch's start. XID faults come first.
fn hardware_faults(cl: &Cluster, tl: &Timeline, sim: &Sim, acc: &Acc) -> BTreeMap<u32, String> {
    let max_gap = crate::max_gap_ms(tl.interval_ms);
    // Each hardware XID error: (node, GPU, code, the first sample showing it, the event's time).
    let mut errors = Vec::new();
    for pod in &sim.pods {
        let Some((slot, from, to, code)) = pod.xid else { continue };
        if !HARDWARE_XIDS.contains(&code) {
            continue;
        }
        let slot = &cl.slots[slot as usize];
        let node = &cl.nodes[slot.node as usize];
        let first = (0..tl.scrapes)
            .filter(|&k| node.present[k])
            .map(|k| tl.start_ms() + node.scrape_offset_ms + k as i64 * tl.interval_ms)
            .find(|&t| from <= t && t < to);
        // The event is stamped in whole seconds (k8s.rs).
        let event = (from + 999) / 1000 * 1000;
        errors.push((slot.node, slot.gpu, code, first, event));
    }
    let seg_nodes: BTreeSet<(u32, u32)> = acc.lost_gpus.iter().map(|&(s, n, _)| (s, n)).collect();
    let mut faults = BTreeMap::new();
    for (i, seg) in sim.segs.iter().enumerate() {
        let end_ms = match seg.end {
            SegEnd::Failed(t, _) => t * 1000,
            SegEnd::Preempted { at, .. } => at * 1000,
            _ => continue,
        };
        let s = i as u32;
        let within = |t: i64| seg.admitted_s * 1000 <= t && t <= end_ms + max_gap;
        // The earliest XID error; the code breaks a tie the way the ledger does (by its text).
        let mut xid: Option<(i64, String)> = None;
        for &(node, gpu, code, first, event) in &errors {
            let on_node = seg_nodes.contains(&(s, node)) && within(event);
            let on_gpu = first.filter(|&f| acc.lost_gpus.contains(&(s, node, gpu)) && within(f));
            for t in [on_node.then_some(event), on_gpu].into_iter().flatten() {
                let candidate = (t, format!("XID {code}"));
                if xid.as_ref().is_none_or(|best| candidate < *best) {
                    xid = Some(candidate);
                }
            }
        }
        if let Some((_, fault)) = xid {
            faults.insert(s, fault);
            continue;
        }
        // Not Ready at some time in the segment's last 10 minutes: the NotReady node version
        // (k8s.rs) holds from `down` until the Ready one at `up`.
        let not_ready = seg_nodes.range((s, 0)..=(s, u32::MAX)).any(|&(_, n)| {
            matches!(cl.nodes[n as usize].not_ready, Some((down, up)) if down * 1000 <= end_ms && up * 1000 > end_ms - 600_000)
        });
        if not_ready {
            faults.insert(s, "NodeNotReady".to_string());
        }
    }
    faults
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::out::days_from_civil;

    #[test]
    fn spans_split_at_midnight_and_month_boundary() {
        let oct31 = days_from_civil(2026, 10, 31) * MS_PER_DAY;
        let months = Months::new(oct31 - 40 * MS_PER_DAY, oct31 + 40 * MS_PER_DAY);
        let mut out = Vec::new();
        // 23:59:40 .. 00:00:40 next day: 20 s in October, 40 s in November.
        split_span(
            &months,
            oct31 + MS_PER_DAY - 20_000,
            oct31 + MS_PER_DAY + 40_000,
            &mut out,
        );
        assert_eq!(out.len(), 2);
        assert_eq!(months.names[out[0].0], "2026-10");
        assert_eq!(out[0].1, 20_000);
        assert_eq!(months.names[out[1].0], "2026-11");
        assert_eq!(out[1].1, 40_000);
        // A midnight inside a month merges back into one piece of that month.
        out.clear();
        split_span(&months, oct31 - 10_000, oct31 + 10_000, &mut out);
        assert_eq!(out, vec![(months.index(oct31), 20_000)]);
    }

    #[test]
    fn hours_of_a_whole_gpu_hour() {
        assert_eq!(hours(7 * SCALE * 3_600_000), 1.0);
        let mut a = Acc::new(1, 2, 1);
        a.add(0, 1, State::Productive, PoolId::L4, 7, true);
        let mut b = Acc::new(1, 2, 1);
        b.merge(&a);
        b.merge(&a);
        assert_eq!(b.cells[5 * N_POOLS + PoolId::L4 as usize], (14, 14));
    }
}
