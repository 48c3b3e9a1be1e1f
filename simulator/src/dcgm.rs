//! DCGM exporter text, one node at a time, and the accounting of each sample as it is written.
//!
//! Every node except the T4 pool is written as Prometheus `/federate` output: one file per UTC
//! day, every sample with its millisecond timestamp, the lines of one scrape together. The T4
//! node is written as raw exporter scrapes: one `<unix-millis>.prom` per scrape with `# HELP` and
//! `# TYPE` lines and no sample timestamps. Nodes are independent (own PRNG stream, own files),
//! so they are written on several threads with identical output.
//!
//! A GPU several pods share writes a series per pod, each with the device's values: a
//! time-sliced T4 (as dcgm-exporter `--kubernetes-virtual-gpus` writes it) besides has the
//! device's own `DCGM_FI_DEV_GPU_UTIL` without pod labels and each pod's own utilisation with
//! `pod_uid` and `vgpu`, so that each pod is active by its own (and, with `sharing =
//! "measured"`, holds its utilisation's part); the pods of a DRA-shared GPU (one claim for two
//! pods, or two claims by consumed capacity) are active by the device's values. Series of DRA
//! GPUs carry the `dra_*` labels of the claim the pod holds the GPU through.
//!
//! A scrape outside the [`Window`] is simulated and accounted all the same, only not written;
//! a file with nothing in the window is not written at all.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crate::cluster::{Cluster, DRA_SHARED_CAPACITY_GI, PoolId, Sharing, Timeline, tag};
use crate::error::{Result, SimError};
use crate::out::{MS_PER_DAY, day_string, push_fixed6, push_u64};
use crate::sink::{DayGate, DcgmSink};
use crate::rng::Rng;
use crate::schedule::{Kind, Sim, Term};
use crate::truth::{Acc, Months, Reason, SCALE, SegClass, State, split_span};
use crate::window::Window;

/// DCGM's "blank" value for a field it could not read (it shows up as this integer).
pub const BLANK: u64 = 9_223_372_036_854_775_794;

struct Metric {
    name: &'static [u8],
    help: &'static str,
    counter: bool,
    fixed6: bool,
}

const fn m(name: &'static [u8], help: &'static str, counter: bool, fixed6: bool) -> Metric {
    Metric {
        name,
        help,
        counter,
        fixed6,
    }
}

const SM_CLOCK: usize = 0;
const MEM_CLOCK: usize = 1;
const MEM_TEMP: usize = 2;
const GPU_TEMP: usize = 3;
const POWER: usize = 4;
const ENERGY: usize = 5;
const PCIE: usize = 6;
const UTIL: usize = 7;
const COPY: usize = 8;
const ENC: usize = 9;
const DEC: usize = 10;
const XID: usize = 11;
const FB_FREE: usize = 12;
const FB_USED: usize = 13;
const GR: usize = 14;
const TENSOR: usize = 15;
const DRAM: usize = 16;
const N_METRICS: usize = 17;
/// Metrics every GPU has; the profiling ones follow.
const N_BASIC: usize = 14;

/// In the order dcgm-exporter's default counters file lists them.
const METRICS: [Metric; N_METRICS] = [
    m(
        b"DCGM_FI_DEV_SM_CLOCK",
        "SM clock frequency (in MHz).",
        false,
        false,
    ),
    m(
        b"DCGM_FI_DEV_MEM_CLOCK",
        "Memory clock frequency (in MHz).",
        false,
        false,
    ),
    m(
        b"DCGM_FI_DEV_MEMORY_TEMP",
        "Memory temperature (in C).",
        false,
        false,
    ),
    m(
        b"DCGM_FI_DEV_GPU_TEMP",
        "GPU temperature (in C).",
        false,
        false,
    ),
    m(
        b"DCGM_FI_DEV_POWER_USAGE",
        "Power draw (in W).",
        false,
        true,
    ),
    m(
        b"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "Total energy consumption since boot (in mJ).",
        true,
        false,
    ),
    m(
        b"DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
        "Total number of PCIe retries.",
        true,
        false,
    ),
    m(
        b"DCGM_FI_DEV_GPU_UTIL",
        "GPU utilization (in %).",
        false,
        false,
    ),
    m(
        b"DCGM_FI_DEV_MEM_COPY_UTIL",
        "Memory utilization (in %).",
        false,
        false,
    ),
    m(
        b"DCGM_FI_DEV_ENC_UTIL",
        "Encoder utilization (in %).",
        false,
        false,
    ),
    m(
        b"DCGM_FI_DEV_DEC_UTIL",
        "Decoder utilization (in %).",
        false,
        false,
    ),
    m(
        b"DCGM_FI_DEV_XID_ERRORS",
        "Value of the last XID error encountered.",
        false,
        false,
    ),
    m(
        b"DCGM_FI_DEV_FB_FREE",
        "Framebuffer memory free (in MiB).",
        false,
        false,
    ),
    m(
        b"DCGM_FI_DEV_FB_USED",
        "Framebuffer memory used (in MiB).",
        false,
        false,
    ),
    m(
        b"DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "Ratio of time the graphics engine is active.",
        false,
        true,
    ),
    m(
        b"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "Ratio of cycles the tensor (HMMA) pipe is active.",
        false,
        true,
    ),
    m(
        b"DCGM_FI_PROF_DRAM_ACTIVE",
        "Ratio of cycles the device memory interface is active sending or receiving data.",
        false,
        true,
    ),
];

/// A pod holding a slot (GPU or MIG instance) over `[from_ms, to_ms)`.
#[derive(Debug, Clone, Copy)]
pub struct Hold {
    pub from_ms: i64,
    pub to_ms: i64,
    pub pod: u32,
}

/// Who holds each slot when: from container start to container end.
pub fn build_holds(cl: &Cluster, sim: &Sim) -> Vec<Vec<Hold>> {
    let mut holds = vec![Vec::new(); cl.slots.len()];
    for (i, p) in sim.pods.iter().enumerate() {
        if p.cancelled || p.started_s == i64::MAX || p.started_s >= p.end_s {
            continue;
        }
        for &s in &p.slots {
            holds[s as usize].push(Hold {
                from_ms: p.started_s * 1000,
                to_ms: p.end_s * 1000,
                pod: i as u32,
            });
        }
    }
    for h in &mut holds {
        h.sort_by_key(|x| x.from_ms);
    }
    holds
}

pub struct Ctx<'a> {
    pub cl: &'a Cluster,
    pub tl: &'a Timeline,
    pub sim: &'a Sim,
    pub holds: Vec<Vec<Hold>>,
    pub seg_class: Vec<SegClass>,
    pub months: &'a Months,
    /// Per pool, when its free GPUs are stranded ([`crate::truth::stranding_windows`]).
    pub stranding: [Vec<(i64, i64)>; crate::cluster::N_POOLS],
    /// The capture-relative directory of the DCGM files (`dcgm`).
    pub dir: PathBuf,
    pub seed: u64,
    /// Which samples are written; all are simulated and accounted whatever it is.
    pub window: Window,
    /// The DRA pods' claims, which their GPUs' series name.
    pub claims: &'a crate::dra::Claims,
    /// DRA series carry pod labels beside the `dra_*` ones ([`crate::SimOptions`]).
    pub dra_pod_labels: bool,
}

#[derive(Debug, Default, Clone, Copy)]
pub struct Stats {
    pub files: u64,
    pub bytes: u64,
    /// Metric lines, GPU rows and blank values of the whole period, written or not (the truth
    /// counts them, whatever the window).
    pub samples: u64,
    pub rows: u64,
    pub blanks: u64,
    /// Metric lines and GPU rows written (inside the window).
    pub emitted_samples: u64,
    pub emitted_rows: u64,
}

impl Stats {
    fn add(&mut self, o: &Stats) {
        self.files += o.files;
        self.bytes += o.bytes;
        self.samples += o.samples;
        self.rows += o.rows;
        self.blanks += o.blanks;
        self.emitted_samples += o.emitted_samples;
        self.emitted_rows += o.emitted_rows;
    }
}

/// Writes every node's files on `threads` threads (the output does not depend on how many),
/// each thread into its own sink from `sink`; calls `progress` (0..1 of this phase) from the
/// calling thread while they run.
pub fn write_all(ctx: &Ctx, threads: usize, sink: &(dyn Fn() -> Box<dyn DcgmSink> + Sync), progress: &mut dyn FnMut(f64)) -> Result<(Stats, Acc)> {
    let nodes = ctx.cl.nodes.len();
    let threads = threads.clamp(1, nodes.max(1));
    let next = AtomicUsize::new(0);
    let done = AtomicU64::new(0);
    let total = (nodes * ctx.tl.scrapes).max(1) as f64;
    let teams = ctx.sim.teams.len();
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| -> Result<(Stats, Acc)> {
                    let mut acc = Acc::new(ctx.months.len(), teams, ctx.sim.segs.len());
                    let mut stats = Stats::default();
                    let mut sink = sink();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= nodes {
                            break;
                        }
                        let s = write_node(ctx, i, &mut acc, &done, sink.as_mut(), None)?;
                        stats.add(&s);
                    }
                    sink.finish()?;
                    Ok((stats, acc))
                })
            })
            .collect();
        join_writers(handles, ctx, &done, total, progress)
    })
}

/// Writes every node on a thread of its own, each into its own sink from `sink`, the nodes kept
/// within a day of each other ([`DayGate`]): a consumer then gets the text about a day at a
/// time (every node's day d before any node's day d + 2). Same text per file as [`write_all`].
pub fn write_all_by_day(ctx: &Ctx, sink: &(dyn Fn() -> Box<dyn DcgmSink> + Sync), progress: &mut dyn FnMut(f64)) -> Result<(Stats, Acc)> {
    let nodes = ctx.cl.nodes.len();
    let done = AtomicU64::new(0);
    let total = (nodes * ctx.tl.scrapes).max(1) as f64;
    let teams = ctx.sim.teams.len();
    let gate = DayGate::new(nodes, (ctx.tl.start_ms()).div_euclid(MS_PER_DAY));
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..nodes)
            .map(|i| {
                let (gate, done) = (&gate, &done);
                scope.spawn(move || -> Result<(Stats, Acc)> {
                    // Done, failed or panicked, this node holds the others back no more.
                    struct Leave<'g>(&'g DayGate, usize);
                    impl Drop for Leave<'_> {
                        fn drop(&mut self) {
                            self.0.leave(self.1);
                        }
                    }
                    let _leave = Leave(gate, i);
                    let mut acc = Acc::new(ctx.months.len(), teams, ctx.sim.segs.len());
                    let mut sink = sink();
                    let stats = write_node(ctx, i, &mut acc, done, sink.as_mut(), Some(gate))?;
                    sink.finish()?;
                    Ok((stats, acc))
                })
            })
            .collect();
        join_writers(handles, ctx, &done, total, progress)
    })
}

/// Waits for the writer threads (telling `progress` meanwhile) and adds up what they did.
fn join_writers(
    handles: Vec<std::thread::ScopedJoinHandle<'_, Result<(Stats, Acc)>>>,
    ctx: &Ctx,
    done: &AtomicU64,
    total: f64,
    progress: &mut dyn FnMut(f64),
) -> Result<(Stats, Acc)> {
    let teams = ctx.sim.teams.len();
    while !handles.iter().all(|h| h.is_finished()) {
        progress(done.load(Ordering::Relaxed) as f64 / total);
        std::thread::sleep(std::time::Duration::from_millis(25));
    }
    let mut stats = Stats::default();
    let mut acc = Acc::new(ctx.months.len(), teams, ctx.sim.segs.len());
    let mut first_err = None;
    for h in handles {
        match h.join() {
            Ok(Ok((s, a))) => {
                stats.add(&s);
                acc.merge(&a);
            }
            Ok(Err(e)) => {
                first_err.get_or_insert(e);
            }
            Err(_) => {
                first_err.get_or_insert(SimError::internal("a DCGM writer thread panicked"));
            }
        }
    }
    progress(1.0);
    match first_err {
        Some(e) => Err(e),
        None => Ok((stats, acc)),
    }
}

/// The `Hostname` a node's exporter writes. Real exporters do not always write the Node's name:
/// the first A100 node's writes it in upper case, the first L4 node's as an EC2 FQDN (the ledger
/// matches without case and by first DNS label; its node-pool prices depend on that).
pub fn exporter_hostname(cl: &crate::cluster::Cluster, ni: usize) -> String {
    let node = &cl.nodes[ni];
    let first_of = |pool: PoolId| cl.pool_nodes[pool as usize].first() == Some(&ni);
    if first_of(PoolId::A100Mig) {
        node.name.to_uppercase()
    } else if first_of(PoolId::L4) {
        format!("{}.ec2.internal", node.name)
    } else {
        node.name.clone()
    }
}

struct Series {
    slot: usize,
    gpu: usize,
    head: Vec<u8>,
    /// The labels after `head` (pod labels, `dra_*`, `vgpu`) with the closing brace.
    tail: Vec<u8>,
    /// A time-sliced pod's own DCGM_FI_DEV_GPU_UTIL series: its labels with `pod_uid`.
    util_tail: Vec<u8>,
    holder: Option<u32>,
    hold_i: usize,
    idle_i: usize,
    weight7: u64,
    mem_mib: u64,
    reserved_mib: u64,
    vals: [u64; N_METRICS],
    /// The slot's index within its GPU: a time-sliced replica's `vgpu` label.
    vgpu: u32,
    /// The memory (GiB) a [`Sharing::DraCapacity`] slot's claims consume.
    capacity_gi: u64,
    /// Accounted at this scrape (a shared GPU's free slots are not, but for its first when
    /// nobody holds it, which stands for the whole GPU).
    accounted: bool,
    /// Written at this scrape: accounted, and not the same series as another (a claim's second
    /// pod without pod labels).
    write: bool,
    /// The holder is busy (not in one of its idle stretches).
    busy: bool,
    /// The activity its time is accounted by: its own, or for a DRA-shared GPU the GPU's.
    active: bool,
    /// With `sharing = "measured"`: its part of a time-sliced GPU in millionths (None: even).
    measured_ppm: Option<u64>,
    /// The holder's allocated-idle amounts (month, amount) whose reason is not known yet:
    /// those since its last active observation, or since it came when it has none yet.
    idle_open: Vec<(usize, u64)>,
    /// The holder has had an active observation on this series.
    active_seen: bool,
}

impl Series {
    /// Files the open allocated-idle amounts of `team`'s pod under `reason` (docs/accounting.md "Why
    /// GPUs were idle": startup before the pod's first active observation on the GPU, teardown
    /// after its last, stall in between; so the reason is known only at the next active
    /// observation or when the hold ends).
    fn settle_idle(&mut self, acc: &mut Acc, team: usize, pool: PoolId, reason: Reason) {
        for (month, amount) in self.idle_open.drain(..) {
            acc.add_reason(month, team, reason, pool, amount);
        }
    }

    /// The holder's hold of this series ends (or the capture does).
    fn end_hold(&mut self, acc: &mut Acc, sim: &Sim, pool: PoolId) {
        if let Some(p) = self.holder {
            let reason = if self.active_seen { Reason::Teardown } else { Reason::Startup };
            self.settle_idle(acc, sim.pods[p as usize].team, pool, reason);
        }
        self.active_seen = false;
    }
}

/// Why a free GPU of a node is idle at an observation (docs/accounting.md "Why GPUs were idle"):
/// walks the node's changes and its pool's stranding windows forward as scrapes go by.
struct FreeReason<'a> {
    changes: Vec<crate::cluster::NodeChange>,
    next_change: usize,
    unavailable: bool,
    stranding: &'a [(i64, i64)],
    next_window: usize,
}

impl<'a> FreeReason<'a> {
    fn new(node: &crate::cluster::Node, stranding: &'a [(i64, i64)]) -> Self {
        FreeReason { changes: node.changes(), next_change: 0, unavailable: false, stranding, next_window: 0 }
    }

    /// The reason at observation time `t` (ms); times must not go backwards. A node version
    /// observed at exactly `t` counts.
    fn at(&mut self, t: i64) -> Reason {
        while let Some(c) = self.changes.get(self.next_change).filter(|c| c.at_s * 1000 <= t) {
            self.unavailable = c.unavailable();
            self.next_change += 1;
        }
        while self.stranding.get(self.next_window).is_some_and(|w| w.1 <= t) {
            self.next_window += 1;
        }
        if self.unavailable {
            Reason::Cordoned
        } else if self.stranding.get(self.next_window).is_some_and(|w| w.0 <= t) {
            Reason::Stranded
        } else {
            Reason::NoDemand
        }
    }
}

struct GpuState {
    energy_mj: u64,
    pcie: u64,
    busy_micro: u64,
    held: bool,
    /// The time shares (month, team, state, amount as in [`Acc::add`]) filed for this GPU at
    /// the current observation: its series' pieces and the MIG leftover's.
    pending: Vec<(usize, usize, State, u64)>,
    /// Those of the previous observation, waiting for this one's energy counter (its next
    /// observation came within max_gap), with the counter then and the span in intervals.
    open: Vec<(usize, usize, State, u64)>,
    open_energy_mj: u64,
    open_intervals: usize,
}

/// One copy of a scrape's lines: its `prometheus_replica` label (none but for an HA pair), the
/// line ending (sample time, newline) and the sample time.
type Replica<'a> = (Option<&'a [u8]>, Vec<u8>, i64);

const EMPTY_TAIL: &[u8] = b"container=\"\",namespace=\"\",pod=\"\"}";

/// Measured shares are integer millionths (docs/accounting.md "Measured sharing").
const PPM: u128 = 1_000_000;

/// One line: `metric{<replica,>head tail} value<suffix>`.
fn push_line(buf: &mut Vec<u8>, metric: &Metric, replica: Option<&[u8]>, head: &[u8], tail: &[u8], v: u64, suffix: &[u8]) {
    buf.extend_from_slice(metric.name);
    match replica {
        Some(r) => {
            buf.extend_from_slice(b"{prometheus_replica=\"");
            buf.extend_from_slice(r);
            buf.extend_from_slice(b"\",");
            buf.extend_from_slice(&head[1..]);
        }
        None => buf.extend_from_slice(head),
    }
    buf.extend_from_slice(tail);
    buf.push(b' ');
    if metric.fixed6 {
        push_fixed6(buf, v);
    } else {
        push_u64(buf, v);
    }
    buf.extend_from_slice(suffix);
}

/// `key="value",` into `buf`.
fn push_label(buf: &mut Vec<u8>, key: &[u8], value: &[u8]) {
    buf.extend_from_slice(key);
    buf.extend_from_slice(b"=\"");
    buf.extend_from_slice(value);
    buf.extend_from_slice(b"\",");
}

/// The labels after a series' head for its holder (as dcgm-exporter writes them, the attribute
/// names in sorted order after the device's): none, the pod's, with `vgpu` on a time-sliced
/// GPU (and `pod_uid` on its own utilisation's series), and the `dra_*` labels of the claim a
/// DRA pod holds the GPU through (without the pod's where the options drop them).
fn set_tails(ctx: &Ctx, ni: usize, s: &mut Series) {
    s.tail.clear();
    s.util_tail.clear();
    let Some(p) = s.holder else {
        s.tail.extend_from_slice(EMPTY_TAIL);
        return;
    };
    let node = &ctx.cl.nodes[ni];
    let gpu = &node.gpus[s.gpu];
    let pod = &ctx.sim.pods[p as usize];
    let ns = crate::cluster::NAMESPACES[ctx.sim.jobs[pod.job as usize].ns].name.as_bytes();
    let claim = ctx.claims.of(p);
    let pod_labels = claim.is_none() || ctx.dra_pod_labels;
    let t = &mut s.tail;
    if pod_labels {
        push_label(t, b"container", b"main");
    }
    if let Some(c) = claim {
        push_label(t, b"dra_claim_name", c.name.as_bytes());
        push_label(t, b"dra_claim_namespace", crate::cluster::NAMESPACES[c.ns].name.as_bytes());
        push_label(t, b"dra_device_name", gpu.dra_device().as_bytes());
        push_label(t, b"dra_driver_name", crate::dra::DRIVER.as_bytes());
        push_label(t, b"dra_pool_name", node.name.as_bytes());
    }
    if pod_labels {
        push_label(t, b"namespace", ns);
        push_label(t, b"pod", pod.name.as_bytes());
    }
    if gpu.sharing == Sharing::TimeSliced {
        s.util_tail.extend_from_slice(t);
        push_label(&mut s.util_tail, b"pod_uid", pod.uid.as_bytes());
        let vgpu = s.vgpu.to_string();
        push_label(t, b"vgpu", vgpu.as_bytes());
        push_label(&mut s.util_tail, b"vgpu", vgpu.as_bytes());
        s.util_tail.pop();
        s.util_tail.push(b'}');
    }
    t.pop();
    t.push(b'}');
}

/// A shared GPU at one scrape: its holders, together ([`Sharing`]).
#[derive(Debug, Clone, Copy)]
struct Share {
    /// Pods holding it, whether any of them is busy, the memory their claims consume.
    pods: u64,
    any_busy: bool,
    capacity_gi: u64,
    /// Its first series, and its first held one (`usize::MAX`: none).
    first: usize,
    first_held: usize,
    /// A time-sliced GPU's own utilisation: its pods' together.
    device_util: u64,
}

impl Default for Share {
    fn default() -> Self {
        Share { pods: 0, any_busy: false, capacity_gi: 0, first: usize::MAX, first_held: usize::MAX, device_util: 0 }
    }
}

/// Each pod's part of a time-sliced GPU's observation under `sharing = "measured"`
/// (docs/accounting.md "Measured sharing"), from (pod uid, its utilisation) in series order:
/// utilisation over the sum in integer millionths, the millionths the floors leave given one
/// each by largest remainder (ties: the smaller uid). None when all are zero (even shares).
fn measured_shares(utils: &[(String, u64)]) -> Option<Vec<u64>> {
    let total: u64 = utils.iter().map(|u| u.1).sum();
    if total == 0 {
        return None;
    }
    let mut ppm: Vec<u64> = utils.iter().map(|u| u.1 * 1_000_000 / total).collect();
    let mut order: Vec<usize> = (0..utils.len()).collect();
    order.sort_by(|&a, &b| {
        let rem = |i: usize| utils[i].1 * 1_000_000 % total;
        rem(b).cmp(&rem(a)).then_with(|| utils[a].0.cmp(&utils[b].0))
    });
    let left = 1_000_000 - ppm.iter().sum::<u64>();
    for &i in order.iter().take(left as usize) {
        ppm[i] += 1;
    }
    Some(ppm)
}

fn driver_version(pool: PoolId) -> &'static str {
    match pool {
        PoolId::T4 => "535.183.01",
        _ => "550.54.15",
    }
}

fn write_node(ctx: &Ctx, ni: usize, acc: &mut Acc, done: &AtomicU64, sink: &mut dyn DcgmSink, gate: Option<&DayGate>) -> Result<Stats> {
    let cl = ctx.cl;
    let tl = ctx.tl;
    let sim = ctx.sim;
    let node = &cl.nodes[ni];
    let pool = node.pool;
    let spec = pool.spec();
    let per_scrape_files = pool == PoolId::T4;
    // The first L4 node is scraped by an HA pair of Prometheus servers, and the capture holds
    // both servers' samples (a /federate of each, or a query without deduplication): each series
    // twice, labelled prometheus_replica "a" (the scrape's time) and "b" (10 s later; a "b"
    // sample that would fall on the next UTC day is not written, so "a" is always seen first).
    let ha_pair = cl.pool_nodes[PoolId::L4 as usize].first() == Some(&ni) && !per_scrape_files;
    let n_metrics = if spec.profiling { N_METRICS } else { N_BASIC };
    let dir = ctx.dir.join(&node.name);
    let mut rng = Rng::stream(ctx.seed, tag::DCGM, ni as u64);
    let mut blank_rng = Rng::stream(ctx.seed, tag::DCGM, 1_000_000 + ni as u64);

    let mut series: Vec<Series> = Vec::new();
    let mut gpus: Vec<GpuState> = Vec::new();
    for (gi, g) in node.gpus.iter().enumerate() {
        gpus.push(GpuState {
            energy_mj: rng.range(2_000_000_000, 60_000_000_000) as u64,
            pcie: 0,
            busy_micro: 0,
            held: false,
            pending: Vec::new(),
            open: Vec::new(),
            open_energy_mj: 0,
            open_intervals: 0,
        });
        for s in g.slots.clone() {
            let slot = &cl.slots[s];
            let mut head = Vec::with_capacity(256);
            head.extend_from_slice(b"{gpu=\"");
            push_u64(&mut head, g.index as u64);
            head.extend_from_slice(b"\",UUID=\"");
            head.extend_from_slice(g.uuid.as_bytes());
            head.extend_from_slice(b"\",pci_bus_id=\"");
            head.extend_from_slice(g.pci_bus_id.as_bytes());
            head.extend_from_slice(b"\",device=\"nvidia");
            push_u64(&mut head, g.index as u64);
            head.extend_from_slice(b"\",modelName=\"");
            head.extend_from_slice(spec.model.as_bytes());
            let (mem, reserved) = match slot.mig {
                Some((p, id)) => {
                    head.extend_from_slice(b"\",GPU_I_PROFILE=\"");
                    head.extend_from_slice(p.name().as_bytes());
                    head.extend_from_slice(b"\",GPU_I_ID=\"");
                    push_u64(&mut head, id as u64);
                    (p.mem_mib(), 0)
                }
                None => (spec.mem_mib, spec.reserved_mib),
            };
            head.extend_from_slice(b"\",Hostname=\"");
            head.extend_from_slice(exporter_hostname(cl, ni).as_bytes());
            head.extend_from_slice(b"\",DCGM_FI_DRIVER_VERSION=\"");
            head.extend_from_slice(driver_version(pool).as_bytes());
            head.extend_from_slice(b"\",");
            let vgpu = (s - g.slots.start) as u32;
            series.push(Series {
                slot: s,
                gpu: gi,
                head,
                tail: EMPTY_TAIL.to_vec(),
                util_tail: Vec::new(),
                holder: None,
                hold_i: 0,
                idle_i: 0,
                weight7: slot.weight7,
                mem_mib: mem,
                reserved_mib: reserved,
                vals: [0; N_METRICS],
                vgpu,
                capacity_gi: if g.sharing == Sharing::DraCapacity { DRA_SHARED_CAPACITY_GI[vgpu as usize] } else { 0 },
                accounted: true,
                write: true,
                busy: false,
                active: false,
                measured_ppm: None,
                idle_open: Vec::new(),
                active_seen: false,
            });
        }
    }

    let k_total = tl.scrapes;
    let iv = tl.interval_ms;
    let max_gap = crate::max_gap_ms(iv);
    // Next present scrape after each one: the end of its covered span.
    let mut next_present = vec![usize::MAX; k_total];
    let mut nxt = usize::MAX;
    for k in (0..k_total).rev() {
        next_present[k] = nxt;
        if node.present[k] {
            nxt = k;
        }
    }
    let scrapes_per_day = (MS_PER_DAY / iv).max(1) as u64;
    // A few blank memory temperatures per node and day, as real exporters show.
    let blank_den = (series.len() as u64 * scrapes_per_day / 3).max(1);

    let mut stats = Stats::default();
    let mut buf: Vec<u8> = Vec::with_capacity(1 << 20);
    let mut ts_suffix: Vec<u8> = Vec::with_capacity(24);
    let mut pieces: Vec<(usize, i64)> = Vec::with_capacity(4);
    let mut unobs: Vec<(usize, i64)> = Vec::with_capacity(4);
    // The day being written, and the `/federate` file of it that is open in the sink.
    let mut day_now = i64::MIN;
    let mut file: Option<(i64, PathBuf)> = None;
    let mut last_energy_t = tl.start_ms() + node.scrape_offset_ms;
    let reset_at = tl.start_ms() + (tl.end_ms() - tl.start_ms()) / 2;
    let mut local_done = 0u64;
    let mut free_reason = FreeReason::new(node, &ctx.stranding[pool as usize]);
    let mut shares = vec![Share::default(); node.gpus.len()];

    for (k, &next_k) in next_present.iter().enumerate() {
        local_done += 1;
        if local_done == 256 {
            done.fetch_add(local_done, Ordering::Relaxed);
            local_done = 0;
        }
        if !node.present[k] {
            continue;
        }
        let t = tl.start_ms() + node.scrape_offset_ms + k as i64 * iv;
        let day = t.div_euclid(MS_PER_DAY);
        if day != day_now {
            if let Some(gate) = gate {
                gate.enter(ni, day);
            }
            day_now = day;
        }
        // Every covered span of this observation takes the reason decided at its start.
        let unallocated_reason = free_reason.at(t);
        // Coverage of this scrape's samples (docs/accounting.md "Observation").
        pieces.clear();
        unobs.clear();
        // The span's length in intervals where the next observation comes within max_gap: its
        // energy is then the counter's increase to it (docs/accounting.md "Energy"), else the power.
        let mut counter_span = None;
        match next_k {
            usize::MAX => split_span(ctx.months, t, t + iv, &mut pieces),
            nk => {
                let t_next = tl.start_ms() + node.scrape_offset_ms + nk as i64 * iv;
                if t_next - t > max_gap {
                    split_span(ctx.months, t, t + iv, &mut pieces);
                    split_span(ctx.months, t + iv, t_next, &mut unobs);
                } else {
                    split_span(ctx.months, t, t_next, &mut pieces);
                    counter_span = Some(nk - k);
                }
            }
        }

        for g in gpus.iter_mut() {
            g.busy_micro = 0;
            g.held = false;
        }
        // Who holds each series at t, and whether that pod is busy.
        for s in series.iter_mut() {
            let holds = &ctx.holds[s.slot];
            while s.hold_i < holds.len() && holds[s.hold_i].to_ms <= t {
                s.hold_i += 1;
            }
            let holder = match holds.get(s.hold_i) {
                Some(h) if h.from_ms <= t => Some(h.pod),
                _ => None,
            };
            if holder != s.holder {
                s.end_hold(acc, sim, pool);
                s.holder = holder;
                s.idle_i = 0;
                set_tails(ctx, ni, s);
            }
            s.busy = match holder {
                Some(p) => {
                    let idle = &sim.pods[p as usize].idle;
                    while s.idle_i < idle.len() && idle[s.idle_i].1 <= t {
                        s.idle_i += 1;
                    }
                    !matches!(idle.get(s.idle_i), Some(w) if w.0 <= t)
                }
                None => false,
            };
        }
        // Shared GPUs: how many pods hold each at t, whether any of them is busy, the memory
        // their claims consume, and its first series (which, when nobody holds the GPU, is
        // written without a pod and stands for it).
        for sh in shares.iter_mut() {
            *sh = Share::default();
        }
        for (i, s) in series.iter().enumerate() {
            let sh = &mut shares[s.gpu];
            sh.first = sh.first.min(i);
            if s.holder.is_some() {
                sh.pods += 1;
                sh.any_busy |= s.busy;
                sh.capacity_gi += s.capacity_gi;
                sh.first_held = sh.first_held.min(i);
            }
        }
        // Which series are accounted and written, by what activity, with what values.
        for (si, s) in series.iter_mut().enumerate() {
            let sharing = node.gpus[s.gpu].sharing;
            let sh = &shares[s.gpu];
            s.accounted = sharing == Sharing::Exclusive || s.holder.is_some() || (sh.pods == 0 && si == sh.first);
            // Without pod labels, the pods of one claim have one series between them.
            s.write = s.accounted && !(sharing == Sharing::DraClaim && !ctx.dra_pod_labels && s.holder.is_some() && si != sh.first_held);
            if !s.accounted {
                continue;
            }
            // A time-sliced pod is active by its own utilisation (the exporter writes it per
            // process); the pods of a DRA-shared GPU see the device's values, so its activity.
            s.active = match sharing {
                Sharing::Exclusive | Sharing::TimeSliced => s.busy,
                Sharing::DraClaim | Sharing::DraCapacity => sh.any_busy && s.holder.is_some(),
            };
            let active = s.active;
            let holder = s.holder;
            // Per-instance values.
            let r = rng.next_u64();
            let v = &mut s.vals;
            if active {
                v[GR] = 200_000 + r % 780_001;
                v[UTIL] = 30 + (r >> 20) % 71;
                v[TENSOR] = v[GR] * (250 + (r >> 28) % 600) / 1000;
                v[DRAM] = 80_000 + (r >> 38) % 600_000;
                v[COPY] = 5 + (r >> 48) % 55;
            } else if holder.is_some() {
                v[GR] = r % 30_001;
                v[UTIL] = (r >> 20) % 4;
                v[TENSOR] = (r >> 28) % 2_000;
                v[DRAM] = (r >> 38) % 15_000;
                v[COPY] = (r >> 48) % 2;
            } else {
                v[GR] = r % 200;
                v[UTIL] = 0;
                v[TENSOR] = 0;
                v[DRAM] = (r >> 38) % 50;
                v[COPY] = 0;
            }
            // A time-sliced pod's own utilisation: 30 to 90 while it works, else nothing.
            if sharing == Sharing::TimeSliced && holder.is_some() {
                v[UTIL] = if active { 30 + (r >> 20) % 61 } else { 0 };
            }
            v[ENC] = 0;
            v[DEC] = 0;
            v[XID] = 0;
            let usable = s.mem_mib - s.reserved_mib;
            match holder {
                Some(p) => {
                    let pod = &sim.pods[p as usize];
                    let used = (usable * pod.fb_milli / 1000 + (r >> 52) % 64).min(usable);
                    v[FB_USED] = used;
                    v[FB_FREE] = usable - used;
                    if active
                        && matches!(pool, PoolId::L4 | PoolId::T4)
                        && sim.jobs[pod.job as usize].kind == Kind::Serve
                    {
                        v[DEC] = (r >> 56) % 25;
                    }
                    if let Some((slot, from, to, code)) = pod.xid
                        && slot as usize == s.slot
                        && from <= t
                        && t < to
                    {
                        v[XID] = code;
                    }
                }
                None => {
                    v[FB_USED] = 0;
                    v[FB_FREE] = usable;
                }
            }
            let g = &mut gpus[s.gpu];
            g.held |= holder.is_some();
            let busy = if active {
                v[GR]
            } else if holder.is_some() {
                20_000
            } else {
                0
            };
            g.busy_micro += busy * s.weight7 / 7;
        }
        // A shared GPU's pods' series repeat the device's values: those of its first busy
        // holder (else its first holder), the framebuffer their pods use together. A
        // time-sliced pod's own utilisation stays its own, and the device's is their sum.
        for (gi, g) in node.gpus.iter().enumerate() {
            let sh = &mut shares[gi];
            if !g.shared() || sh.pods == 0 {
                continue;
            }
            let held = || series.iter().filter(|s| s.gpu == gi && s.holder.is_some());
            let lead = held().find(|s| s.busy).or_else(|| held().next()).map(|s| s.vals);
            let Some(lead) = lead else { continue };
            let usable = held().map(|s| s.mem_mib - s.reserved_mib).next().unwrap_or(0);
            let used = held().map(|s| s.vals[FB_USED]).sum::<u64>().min(usable);
            let xid = held().map(|s| s.vals[XID]).max().unwrap_or(0);
            let utils: Vec<(String, u64)> = held().map(|s| (sim.pods[s.holder.unwrap_or_default() as usize].uid.clone(), s.vals[UTIL])).collect();
            sh.device_util = utils.iter().map(|u| u.1).sum::<u64>().min(100);
            let ppm = (g.sharing == Sharing::TimeSliced).then(|| measured_shares(&utils)).flatten();
            for (k, s) in series.iter_mut().filter(|s| s.gpu == gi && s.holder.is_some()).enumerate() {
                for m in [GR, TENSOR, DRAM, COPY, ENC, DEC] {
                    s.vals[m] = lead[m];
                }
                if g.sharing != Sharing::TimeSliced {
                    s.vals[UTIL] = lead[UTIL];
                }
                s.vals[FB_USED] = used;
                s.vals[FB_FREE] = usable - used;
                s.vals[XID] = xid;
                s.measured_ppm = ppm.as_ref().map(|p| p[k]);
            }
        }
        // The accounting of each accounted series.
        for s in series.iter_mut().filter(|s| s.accounted) {
            let sh = &shares[s.gpu];
            // What this series weighs (sevenths x SCALE).
            let weight = match (node.gpus[s.gpu].sharing, s.holder) {
                (Sharing::Exclusive, _) => s.weight7 * SCALE,
                (_, None) => 7 * SCALE,
                (Sharing::TimeSliced | Sharing::DraClaim, Some(_)) => 7 * SCALE / sh.pods,
                // Split by the memory the claims present consume (exact: 20 and 60 of 80 GiB).
                (Sharing::DraCapacity, Some(_)) => {
                    debug_assert_eq!(7 * SCALE * s.capacity_gi % sh.capacity_gi, 0);
                    7 * SCALE * s.capacity_gi / sh.capacity_gi
                }
            };
            let active = s.active;
            match s.holder {
                Some(p) => {
                    let pod = &sim.pods[p as usize];
                    let class = ctx.seg_class[pod.seg as usize];
                    // A pod that failed while its segment went on (the job retried it) is a
                    // failed attempt: failed time, whatever its activity.
                    let attempt_failed = matches!(pod.term, Term::OomKilled | Term::Error) && pod.end_s < ctx.tl.end_s;
                    let state = match class {
                        SegClass::Failed => State::Failed,
                        SegClass::Preempted => State::Preempted,
                        _ if attempt_failed => State::Failed,
                        _ if active => State::Productive,
                        _ => State::AllocatedIdle,
                    };
                    // An active observation settles the idle time before it, whatever the state.
                    if active {
                        let reason = if s.active_seen { Reason::Stall } else { Reason::Startup };
                        s.settle_idle(acc, pod.team, pool, reason);
                        s.active_seen = true;
                    }
                    for &(month, ms) in &pieces {
                        let amount = ms as u64 * weight;
                        acc.add(
                            month,
                            pod.team,
                            state,
                            pool,
                            amount,
                            class == SegClass::Running,
                        );
                        // Measured sharing: the piece's nanoseconds (ms x 10^6) split by the
                        // millionths exactly, so ms x 7 x SCALE x ppm in these units.
                        let measured = match s.measured_ppm {
                            Some(ppm) => ms as u128 * (7 * SCALE) as u128 * ppm as u128,
                            None => amount as u128 * PPM,
                        };
                        acc.add_measured(month, pod.team, state, pool, measured);
                        if state == State::AllocatedIdle {
                            s.idle_open.push((month, amount));
                        }
                        acc.seg[pod.seg as usize] += amount;
                        gpus[s.gpu].pending.push((month, pod.team, state, amount));
                        if matches!(state, State::Failed | State::Preempted) {
                            acc.add_lost(pod.seg, month, pool, ni as u32, s.gpu as u32, amount);
                        }
                    }
                }
                None => {
                    for &(month, ms) in &pieces {
                        let amount = ms as u64 * weight;
                        acc.add(month, 0, State::Unallocated, pool, amount, false);
                        acc.add_measured(month, 0, State::Unallocated, pool, amount as u128 * PPM);
                        acc.add_reason(month, 0, unallocated_reason, pool, amount);
                        gpus[s.gpu].pending.push((month, 0, State::Unallocated, amount));
                    }
                }
            }
        }

        // Whole-GPU accounting: what MIG instances leave over, and unobserved time.
        for (gi, g) in node.gpus.iter().enumerate() {
            if g.leftover7 > 0 {
                for &(month, ms) in &pieces {
                    let amount = ms as u64 * g.leftover7 * SCALE;
                    acc.add(month, 0, State::Unallocated, pool, amount, false);
                    acc.add_measured(month, 0, State::Unallocated, pool, amount as u128 * PPM);
                    acc.add_reason(month, 0, unallocated_reason, pool, amount);
                    gpus[gi].pending.push((month, 0, State::Unallocated, amount));
                }
            }
            for &(month, ms) in &unobs {
                acc.add_unobserved(month, pool, ms as u64 * 7 * SCALE);
            }
            // Device-wide values, shared by every series of the GPU (MIG instances included).
            let st = &mut gpus[gi];
            let r = rng.next_u64();
            let busy = st.busy_micro.min(1_000_000);
            let power_mw = spec.power_idle_mw
                + (spec.power_max_mw - spec.power_idle_mw) * busy / 1_000_000 * (900 + (r % 100))
                    / 1000
                + (r >> 8) % 1500;
            // The first node's first GPU is reset half-way through (a driver reload): its energy
            // counter starts again from 0, which the ledger must read as a reset, not a drop.
            if ni == 0 && gi == 0 && last_energy_t < reset_at && t >= reset_at {
                st.energy_mj = 0;
            }
            st.energy_mj += power_mw * (t - last_energy_t).max(0) as u64 / 1000;
            // Energy (docs/accounting.md "Energy"), from the values written at this scrape, which every
            // series of the GPU carries (MIG instances included, each with the whole GPU's
            // counter and power, so an instance's N/7 share and the leftover's come out of the
            // same mean power). The previous observation's spans end here: the counter's
            // increase, or its new value where it went down (a reset).
            if !st.open.is_empty() {
                let increase = if st.energy_mj >= st.open_energy_mj {
                    st.energy_mj - st.open_energy_mj
                } else {
                    st.energy_mj
                };
                let basis = crate::truth::ENERGY_COUNTER + st.open_intervals - 1;
                for (month, team, state, amount) in st.open.drain(..) {
                    acc.add_energy(month, team, state, basis, increase, amount);
                }
            }
            match counter_span {
                Some(j) => {
                    debug_assert!((1..=2).contains(&j), "a span within max_gap is 1 or 2 intervals");
                    std::mem::swap(&mut st.open, &mut st.pending);
                    st.open_energy_mj = st.energy_mj;
                    st.open_intervals = j;
                }
                // A gap beyond max_gap, or the last observation: the power reading.
                None => {
                    for (month, team, state, amount) in st.pending.drain(..) {
                        acc.add_energy(month, team, state, crate::truth::ENERGY_POWER, power_mw, amount);
                    }
                }
            }
            if (r >> 20).is_multiple_of(40_000) {
                st.pcie += 1 + (r >> 40) % 3;
            }
            let temp = spec.temp_idle + busy * 42 / 1_000_000 + (r >> 24) % 3;
            let sm = if busy > 50_000 {
                spec.sm_clock_max - (r >> 28) % 45
            } else if st.held {
                spec.sm_clock_max - 200 - (r >> 28) % 200
            } else {
                spec.sm_clock_idle + (r >> 28) % 20
            };
            for s in series.iter_mut().filter(|s| s.gpu == gi) {
                s.vals[SM_CLOCK] = sm;
                s.vals[MEM_CLOCK] = spec.mem_clock;
                s.vals[GPU_TEMP] = temp;
                s.vals[MEM_TEMP] = if blank_rng.next_u64().is_multiple_of(blank_den) {
                    BLANK
                } else {
                    temp + 4 + (r >> 36) % 4
                };
                s.vals[POWER] = power_mw * 1000;
                s.vals[ENERGY] = st.energy_mj;
                s.vals[PCIE] = st.pcie;
            }
        }
        last_energy_t = t;

        // The scrape's lines, metric by metric as the exporter groups them.
        ts_suffix.clear();
        if per_scrape_files {
            ts_suffix.push(b'\n');
        } else {
            ts_suffix.push(b' ');
            push_u64(&mut ts_suffix, t as u64);
            ts_suffix.push(b'\n');
        }
        // (replica label, timestamp suffix, sample time) of each copy of the scrape's lines.
        let mut replicas: Vec<Replica> = Vec::with_capacity(2);
        if ha_pair {
            replicas.push((Some(b"a".as_slice()), ts_suffix.clone(), t));
            let tb = t + 10_000;
            if tb.div_euclid(MS_PER_DAY) == t.div_euclid(MS_PER_DAY) {
                replicas.push((Some(b"b".as_slice()), format!(" {tb}\n").into_bytes(), tb));
            }
        } else {
            replicas.push((None, ts_suffix.clone(), t));
        }
        let copies = replicas.len();
        // Lines and rows of one copy: every written series has each metric once; a time-sliced
        // pod's utilisation is a row of its own (with `pod_uid`), beside the device's.
        let written = series.iter().filter(|s| s.write).count();
        let own_util = series.iter().filter(|s| s.write && s.holder.is_some() && node.gpus[s.gpu].sharing == Sharing::TimeSliced).count();
        let device_utils = shares.iter().zip(&node.gpus).filter(|(sh, g)| g.sharing == Sharing::TimeSliced && sh.pods > 0).count();
        let lines = written * n_metrics + device_utils;
        let rows = written + own_util + device_utils;
        stats.samples += (lines * copies) as u64;
        stats.rows += (rows * copies) as u64;
        stats.blanks += (copies * series.iter().filter(|s| s.write && s.vals[MEM_TEMP] == BLANK).count()) as u64;

        // Outside the window only the writing is skipped: everything above ran, so the next
        // scrape's values and the truth are those of the whole capture. Each replica's copy goes
        // by its own sample time, as the store has it.
        replicas.retain(|r| ctx.window.contains_ms(r.2));
        if replicas.is_empty() {
            // A day's file ends when the window does, not at the node's end.
            if let Some((_, done)) = file.take_if(|(d, _)| *d != day) {
                sink.close(&done)?;
                stats.files += 1;
            }
            continue;
        }
        buf.clear();
        for (mi, metric) in METRICS.iter().enumerate().take(n_metrics) {
            if per_scrape_files {
                buf.extend_from_slice(b"# HELP ");
                buf.extend_from_slice(metric.name);
                buf.push(b' ');
                buf.extend_from_slice(metric.help.as_bytes());
                buf.extend_from_slice(b"\n# TYPE ");
                buf.extend_from_slice(metric.name);
                buf.extend_from_slice(if metric.counter {
                    b" counter\n"
                } else {
                    b" gauge\n"
                });
            }
            for (si, s) in series.iter().enumerate().filter(|(_, s)| s.write) {
                let sliced = node.gpus[s.gpu].sharing == Sharing::TimeSliced && s.holder.is_some();
                let own_util = sliced && mi == UTIL;
                // A time-sliced GPU's own utilisation, without pod labels, before its pods'.
                if own_util && si == shares[s.gpu].first_held {
                    for (replica, suffix, _) in replicas.iter() {
                        push_line(&mut buf, metric, *replica, &s.head, EMPTY_TAIL, shares[s.gpu].device_util, suffix);
                    }
                }
                let tail = if own_util { &s.util_tail } else { &s.tail };
                for (replica, suffix, _) in replicas.iter() {
                    push_line(&mut buf, metric, *replica, &s.head, tail, s.vals[mi], suffix);
                }
            }
        }
        stats.emitted_samples += ((written * n_metrics + device_utils) * replicas.len()) as u64;
        stats.emitted_rows += (rows * replicas.len()) as u64;
        stats.bytes += buf.len() as u64;
        if per_scrape_files {
            let path = dir.join(format!("{t}.prom"));
            sink.write(&path, &buf)?;
            sink.close(&path)?;
            stats.files += 1;
        } else {
            let path = match file.take() {
                Some((d, open)) if d == day => open,
                open => {
                    if let Some((_, done)) = open {
                        sink.close(&done)?;
                        stats.files += 1;
                    }
                    dir.join(format!("{}.prom", day_string(t)))
                }
            };
            sink.write(&path, &buf)?;
            file = Some((day, path));
        }
    }
    if let Some((_, done)) = file.take() {
        sink.close(&done)?;
        stats.files += 1;
    }
    for s in &mut series {
        s.end_hold(acc, sim, pool);
    }
    done.fetch_add(local_done, Ordering::Relaxed);
    Ok(stats)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pods(utils: &[(&str, u64)]) -> Vec<(String, u64)> {
        utils.iter().map(|(u, v)| (u.to_string(), *v)).collect()
    }

    /// queries/tests/measured_sharing.slt's cases: 60 and 20 split 3:1; three equal values give
    /// the millionth left over to the smallest uid; all zero is even (None).
    #[test]
    fn measured_shares_are_millionths_by_largest_remainder() {
        assert_eq!(measured_shares(&pods(&[("u-a", 60), ("u-b", 20)])), Some(vec![750_000, 250_000]));
        assert_eq!(measured_shares(&pods(&[("u-r", 1), ("u-q", 1), ("u-p", 1)])), Some(vec![333_333, 333_333, 333_334]));
        assert_eq!(measured_shares(&pods(&[("u-a", 30), ("u-b", 0)])), Some(vec![1_000_000, 0]));
        assert_eq!(measured_shares(&pods(&[("u-a", 0), ("u-b", 0)])), None);
        // 1/7 and 6/7: remainders 1 and 6 of 7, so the larger one gets the millionth.
        assert_eq!(measured_shares(&pods(&[("u-a", 10), ("u-b", 60)])), Some(vec![142_857, 857_143]));
    }
}
