//! The simulated cluster: node pools, nodes, GPUs, MIG layouts, namespaces, teams and queues,
//! plus each node's exporter availability (which scrapes it missed) and standing (a NotReady
//! outage, a cordon for maintenance).

use crate::rng::Rng;

/// Stream tags for [`crate::rng::derive`], one per part of the simulation.
pub mod tag {
    pub const CLUSTER: u64 = 1;
    pub const OUTAGE: u64 = 2;
    pub const ARRIVALS: u64 = 3;
    pub const JOB: u64 = 4;
    pub const DCGM: u64 = 5;
    pub const EVENTS: u64 = 6;
    pub const PICK: u64 = 7;
    pub const CORDON: u64 = 8;
    pub const INFERENCE: u64 = 9;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PoolId {
    H100 = 0,
    A100Mig = 1,
    L4 = 2,
    T4 = 3,
}

pub const POOLS: [PoolId; 4] = [PoolId::H100, PoolId::A100Mig, PoolId::L4, PoolId::T4];

/// What a pool's GPUs are and how they behave in DCGM.
#[derive(Debug)]
pub struct PoolSpec {
    pub name: &'static str,
    pub model: &'static str,
    /// GPU feature discovery's `nvidia.com/gpu.product` value (spaces become dashes).
    pub product_label: &'static str,
    pub gpus_per_node: u32,
    /// DCGM_FI_PROF_* fields are exported (datacenter GPUs with DCP support).
    pub profiling: bool,
    pub mig: bool,
    pub mem_mib: u64,
    pub reserved_mib: u64,
    pub sm_clock_max: u64,
    pub sm_clock_idle: u64,
    pub mem_clock: u64,
    pub power_idle_mw: u64,
    pub power_max_mw: u64,
    pub temp_idle: u64,
    pub node_prefix: &'static str,
    pub node_cpu: u32,
    pub node_mem_gi: u32,
    pub pci_buses: &'static [&'static str],
    pub instance_type: &'static str,
}

const H100: PoolSpec = PoolSpec {
    name: "h100",
    model: "NVIDIA H100 80GB HBM3",
    product_label: "NVIDIA-H100-80GB-HBM3",
    gpus_per_node: 8,
    profiling: true,
    mig: false,
    mem_mib: 81_559,
    reserved_mib: 520,
    sm_clock_max: 1980,
    sm_clock_idle: 345,
    mem_clock: 2619,
    power_idle_mw: 68_000,
    power_max_mw: 690_000,
    temp_idle: 29,
    node_prefix: "gpu-h100-",
    node_cpu: 192,
    node_mem_gi: 2048,
    pci_buses: &["18", "2A", "3A", "5D", "9A", "AB", "BA", "DB"],
    instance_type: "p5.48xlarge",
};

const A100: PoolSpec = PoolSpec {
    name: "a100-mig",
    model: "NVIDIA A100-SXM4-80GB",
    product_label: "NVIDIA-A100-SXM4-80GB",
    gpus_per_node: 8,
    profiling: true,
    mig: true,
    mem_mib: 81_920,
    reserved_mib: 0,
    sm_clock_max: 1410,
    sm_clock_idle: 210,
    mem_clock: 1593,
    power_idle_mw: 62_000,
    power_max_mw: 400_000,
    temp_idle: 31,
    node_prefix: "gpu-a100-",
    node_cpu: 96,
    node_mem_gi: 1152,
    pci_buses: &["10", "16", "49", "4D", "8A", "8E", "C7", "CB"],
    instance_type: "p4de.24xlarge",
};

const L4: PoolSpec = PoolSpec {
    name: "l4",
    model: "NVIDIA L4",
    product_label: "NVIDIA-L4",
    gpus_per_node: 4,
    profiling: false,
    mig: false,
    mem_mib: 23_034,
    reserved_mib: 470,
    sm_clock_max: 2040,
    sm_clock_idle: 210,
    mem_clock: 6250,
    power_idle_mw: 16_000,
    power_max_mw: 72_000,
    temp_idle: 33,
    node_prefix: "gpu-l4-",
    node_cpu: 48,
    node_mem_gi: 192,
    pci_buses: &["38", "3A", "3C", "3E"],
    instance_type: "g6.12xlarge",
};

const T4: PoolSpec = PoolSpec {
    name: "t4",
    model: "Tesla T4",
    product_label: "Tesla-T4",
    gpus_per_node: 2,
    profiling: false,
    mig: false,
    mem_mib: 15_360,
    reserved_mib: 250,
    sm_clock_max: 1590,
    sm_clock_idle: 300,
    mem_clock: 5000,
    power_idle_mw: 9_000,
    power_max_mw: 70_000,
    temp_idle: 36,
    node_prefix: "gpu-t4-",
    node_cpu: 16,
    node_mem_gi: 64,
    pci_buses: &["00:04", "00:05"],
    instance_type: "n1-standard-16",
};

impl PoolId {
    pub fn spec(self) -> &'static PoolSpec {
        match self {
            PoolId::H100 => &H100,
            PoolId::A100Mig => &A100,
            PoolId::L4 => &L4,
            PoolId::T4 => &T4,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum MigProfile {
    G3 = 0,
    G2 = 1,
    G1 = 2,
}

impl MigProfile {
    pub const ALL: [MigProfile; 3] = [MigProfile::G3, MigProfile::G2, MigProfile::G1];

    pub fn name(self) -> &'static str {
        match self {
            MigProfile::G3 => "3g.40gb",
            MigProfile::G2 => "2g.20gb",
            MigProfile::G1 => "1g.10gb",
        }
    }

    pub fn resource(self) -> &'static str {
        match self {
            MigProfile::G3 => "nvidia.com/mig-3g.40gb",
            MigProfile::G2 => "nvidia.com/mig-2g.20gb",
            MigProfile::G1 => "nvidia.com/mig-1g.10gb",
        }
    }

    /// Compute slices out of 7: the `N` of `Ng.*`.
    pub fn sevenths(self) -> u64 {
        match self {
            MigProfile::G3 => 3,
            MigProfile::G2 => 2,
            MigProfile::G1 => 1,
        }
    }

    pub fn mem_mib(self) -> u64 {
        match self {
            MigProfile::G3 => 40_192,
            MigProfile::G2 => 19_968,
            MigProfile::G1 => 9_856,
        }
    }
}

/// MIG layouts used on the A100 nodes, by GPU index modulo 3. Only combinations the A100-80GB
/// accepts are used (3g+3g+1g would need 9 memory slices of 8): 3g+2g+1g leaves 1/7 over,
/// 3g+2g+1g+1g uses all 7, 3g+3g leaves 1/7 over. GPU instance ids are those nvidia-smi assigns
/// for these placements.
pub const MIG_LAYOUTS: [&[(MigProfile, u32)]; 3] = [
    &[
        (MigProfile::G3, 2),
        (MigProfile::G2, 3),
        (MigProfile::G1, 9),
    ],
    &[
        (MigProfile::G3, 2),
        (MigProfile::G2, 3),
        (MigProfile::G1, 9),
        (MigProfile::G1, 10),
    ],
    &[(MigProfile::G3, 1), (MigProfile::G3, 2)],
];

/// A schedulable unit and, at the same time, one DCGM series: a whole GPU or a MIG instance.
#[derive(Debug, Clone)]
pub struct Slot {
    pub node: u32,
    pub gpu: u32,
    pub mig: Option<(MigProfile, u32)>,
    /// Share of the physical GPU in sevenths (7 for a whole GPU).
    pub weight7: u64,
}

#[derive(Debug, Clone)]
pub struct Gpu {
    pub index: u32,
    pub uuid: String,
    pub pci_bus_id: String,
    /// Sevenths of a MIG GPU that no instance covers (0 for whole GPUs).
    pub leftover7: u64,
    pub slots: std::ops::Range<usize>,
    /// Time-sliced (the device plugin advertises each GPU several times): its slots are
    /// replicas of the whole GPU, and the pods holding them share it.
    pub time_sliced: bool,
}

/// Replicas the device plugin advertises per time-sliced GPU (the T4 pool).
pub const TIME_SLICE_REPLICAS: u32 = 4;

#[derive(Debug, Clone)]
pub struct Node {
    pub name: String,
    pub uid: String,
    pub pool: PoolId,
    pub gpus: Vec<Gpu>,
    pub slots: std::ops::Range<usize>,
    /// Prometheus scrapes each target at a fixed phase within the interval.
    pub scrape_offset_ms: i64,
    /// `present[k]`: scrape `k` of this node reached the store.
    pub present: Vec<bool>,
    /// The exporter outage that came with a NodeNotReady (start, end) in seconds, if any.
    pub not_ready: Option<(i64, i64)>,
    /// Cordoned (`spec.unschedulable`) over (from, to) in seconds, if ever: maintenance.
    pub cordoned: Option<(i64, i64)>,
    pub created_s: i64,
    pub internal_ip: String,
}

/// A change of a node's standing as its Node object records it, at a whole second: the state
/// after the change. Kubernetes writes these as new versions of the Node (k8s.rs), and the
/// ledger's idle reasons read them back (docs/accounting.md "Why GPUs were idle").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeChange {
    pub at_s: i64,
    pub unschedulable: bool,
    pub ready: bool,
}

impl NodeChange {
    /// No new pod may start on the node, and its free GPUs count as `cordoned`.
    pub fn unavailable(&self) -> bool {
        self.unschedulable || !self.ready
    }
}

impl Node {
    /// The node's changes in time order, each carrying the whole state after it (a cordon and a
    /// NotReady stretch may overlap). Empty for a node that stays Ready and schedulable.
    pub fn changes(&self) -> Vec<NodeChange> {
        // (time, which window, whether it starts there)
        let mut edges: Vec<(i64, bool, bool)> = Vec::new();
        for (window, is_cordon) in [(self.not_ready, false), (self.cordoned, true)] {
            if let Some((from, to)) = window {
                edges.push((from, is_cordon, true));
                edges.push((to, is_cordon, false));
            }
        }
        edges.sort();
        let (mut unschedulable, mut ready) = (false, true);
        edges
            .into_iter()
            .map(|(at_s, is_cordon, starts)| {
                if is_cordon {
                    unschedulable = starts;
                } else {
                    ready = !starts;
                }
                NodeChange { at_s, unschedulable, ready }
            })
            .collect()
    }

    /// The stretches `[from, to)` in seconds during which the node is cordoned or not Ready.
    pub fn unavailable_windows(&self) -> Vec<(i64, i64)> {
        let mut out: Vec<(i64, i64)> = Vec::new();
        let mut since = None;
        for c in self.changes() {
            match (c.unavailable(), since) {
                (true, None) => since = Some(c.at_s),
                (false, Some(from)) => {
                    out.push((from, c.at_s));
                    since = None;
                }
                _ => {}
            }
        }
        out.extend(since.map(|from| (from, i64::MAX)));
        out
    }
}

pub struct Namespace {
    pub name: &'static str,
    pub team_label: Option<&'static str>,
    /// Index into [`CLUSTER_QUEUES`]; None for namespaces without GPU work.
    pub cq: Option<usize>,
}

pub const NAMESPACES: &[Namespace] = &[
    Namespace {
        name: "ml-research",
        team_label: Some("ml-research"),
        cq: Some(0),
    },
    Namespace {
        name: "llm-pretrain",
        team_label: Some("nlp"),
        cq: Some(1),
    },
    Namespace {
        name: "nlp-finetune",
        team_label: Some("nlp"),
        cq: Some(1),
    },
    Namespace {
        name: "vision",
        team_label: Some("vision"),
        cq: Some(2),
    },
    Namespace {
        name: "serving",
        team_label: Some("serving"),
        cq: Some(3),
    },
    // No team label: its GPU time belongs to a team called "sandbox" (the namespace name).
    Namespace {
        name: "sandbox",
        team_label: None,
        cq: Some(4),
    },
    Namespace {
        name: "kube-system",
        team_label: None,
        cq: None,
    },
    Namespace {
        name: "gpu-operator",
        team_label: None,
        cq: None,
    },
    Namespace {
        name: "kueue-system",
        team_label: None,
        cq: None,
    },
];

pub fn ns_index(name: &str) -> usize {
    NAMESPACES.iter().position(|n| n.name == name).unwrap_or(0)
}

/// ClusterQueues (all in one cohort) and their share of each flavor's nominal quota.
/// The team label a ClusterQueue carries (its quota's owner), where it has one.
pub fn cluster_queue_owner_label(cluster_queue: &str) -> Option<&'static str> {
    match cluster_queue {
        "cq-ml-research" => Some("ml-research"),
        "cq-nlp" => Some("nlp"),
        "cq-vision" => Some("vision"),
        _ => None,
    }
}

pub const CLUSTER_QUEUES: &[(&str, f64)] = &[
    ("cq-ml-research", 0.25),
    ("cq-nlp", 0.3),
    ("cq-vision", 0.15),
    ("cq-serving", 0.2),
    ("cq-sandbox", 0.1),
];
/// The pools with a ResourceFlavor for `nvidia.com/gpu` (each selects its pool's nodes by the
/// `gpuledger.io/pool` label); a ClusterQueue lists those its namespaces' jobs use
/// ([`crate::schedule::cq_gpu_flavor_pools`]). The A100 pool's flavor covers only MIG
/// resources, so no Workload asking for whole GPUs strands an A100 GPU.
pub const GPU_FLAVOR_POOLS: [PoolId; 3] = [PoolId::H100, PoolId::L4, PoolId::T4];
pub const COHORT: &str = "gpu-cohort";
pub const LOCAL_QUEUE: &str = "gpu-queue";
pub const PLATFORM_TEAM: &str = "platform";

/// The time frame of a run: objects from `obj_start_s`, DCGM scrapes from `start_ms`.
#[derive(Debug, Clone, Copy)]
pub struct Timeline {
    pub start_s: i64,
    pub end_s: i64,
    /// Kubernetes objects are recorded from here on (a warm-up before the metrics start, so
    /// that the cluster is busy, and runs are in flight, when the first scrape happens).
    pub obj_start_s: i64,
    pub interval_ms: i64,
    /// Scrape slots per node: `k` in `0..scrapes` at `start + offset + k * interval`.
    pub scrapes: usize,
}

impl Timeline {
    pub fn start_ms(&self) -> i64 {
        self.start_s * 1000
    }
    pub fn end_ms(&self) -> i64 {
        self.end_s * 1000
    }
}

pub struct Cluster {
    pub nodes: Vec<Node>,
    pub slots: Vec<Slot>,
    /// Node indices per pool.
    pub pool_nodes: [Vec<usize>; 4],
}

/// Whole nodes per pool for a requested GPU count: about 50% H100, 25% A100 (MIG), 20% L4, and a
/// single 2-GPU T4 node; every pool gets at least one node.
pub fn nodes_per_pool(gpus: u32) -> [u32; 4] {
    let g = gpus as f64;
    let h = ((g * 0.50) / 8.0).round().max(1.0) as u32;
    let a = ((g * 0.25) / 8.0).round().max(1.0) as u32;
    let l = ((g * 0.20) / 4.0).round().max(1.0) as u32;
    [h, a, l, 1]
}

fn gpu_uuid(rng: &mut Rng) -> String {
    let u = rng.uuid();
    format!("GPU-{u}")
}

pub fn build(seed: u64, tl: &Timeline, gpus: u32) -> Cluster {
    let counts = nodes_per_pool(gpus);
    let mut rng = Rng::stream(seed, tag::CLUSTER, 0);
    let mut nodes = Vec::new();
    let mut slots = Vec::new();
    let mut pool_nodes: [Vec<usize>; 4] = Default::default();
    let mut ip_host = 10u32;
    for pool in POOLS {
        let spec = pool.spec();
        for n in 0..counts[pool as usize] {
            let node_idx = nodes.len();
            let name = format!("{}{:03}", spec.node_prefix, n + 1);
            let slot_start = slots.len();
            let mut gpus_v = Vec::new();
            for g in 0..spec.gpus_per_node {
                let bus = spec.pci_buses[g as usize % spec.pci_buses.len()];
                let pci = if bus.contains(':') {
                    format!("00000000:{bus}.0")
                } else {
                    format!("00000000:{bus}:00.0")
                };
                let gs = slots.len();
                let mut leftover = 0;
                if spec.mig {
                    let layout = MIG_LAYOUTS[g as usize % MIG_LAYOUTS.len()];
                    let mut used = 0;
                    for &(p, id) in layout {
                        used += p.sevenths();
                        slots.push(Slot {
                            node: node_idx as u32,
                            gpu: g,
                            mig: Some((p, id)),
                            weight7: p.sevenths(),
                        });
                    }
                    leftover = 7 - used;
                } else {
                    // T4s are time-sliced: up to four pods share a GPU.
                    let replicas = if pool == PoolId::T4 { TIME_SLICE_REPLICAS } else { 1 };
                    for _ in 0..replicas {
                        slots.push(Slot {
                            node: node_idx as u32,
                            gpu: g,
                            mig: None,
                            weight7: 7,
                        });
                    }
                }
                gpus_v.push(Gpu {
                    index: g,
                    uuid: gpu_uuid(&mut rng),
                    pci_bus_id: pci,
                    leftover7: leftover,
                    slots: gs..slots.len(),
                    time_sliced: pool == PoolId::T4,
                });
            }
            let offset = rng.range(0, tl.interval_ms - 1);
            let created = tl.obj_start_s - rng.range(20, 90) * 86_400 - rng.range(0, 86_399);
            ip_host += 1;
            nodes.push(Node {
                name,
                uid: rng.uuid(),
                pool,
                gpus: gpus_v,
                slots: slot_start..slots.len(),
                scrape_offset_ms: offset,
                present: Vec::new(),
                not_ready: None,
                cordoned: None,
                created_s: created,
                internal_ip: format!("10.0.{}.{}", 16 + ip_host / 200, ip_host % 200 + 20),
            });
            pool_nodes[pool as usize].push(node_idx);
        }
    }
    plan_outages(seed, tl, &mut nodes);
    plan_cordon(seed, tl, &mut nodes);
    Cluster {
        nodes,
        slots,
        pool_nodes,
    }
}

/// Decides which scrapes each node's exporter missed: a couple of single misses per day (they
/// stay within max_gap and so cost nothing), a few longer gaps (over 2 intervals: the rest of
/// the gap is unobserved), and on one node a longer outage that came with NodeNotReady. The first
/// and last scrape of every node are kept so each series spans the whole capture.
fn plan_outages(seed: u64, tl: &Timeline, nodes: &mut [Node]) {
    let k = tl.scrapes;
    let per_day = (86_400_000 / tl.interval_ms).max(1) as f64;
    let days = (k as f64 / per_day).max(1.0 / per_day);
    for (i, node) in nodes.iter_mut().enumerate() {
        let mut rng = Rng::stream(seed, tag::OUTAGE, i as u64);
        let mut present = vec![true; k];
        if k >= 8 {
            let singles = (2.0 * days).round().max(1.0) as usize;
            for _ in 0..singles {
                let at = rng.range(2, k as i64 - 3) as usize;
                present[at] = false;
            }
            let long_gaps = 1 + (days.ceil() as usize).min(4);
            let max_len = (k / 40).clamp(3, 40) as i64;
            for _ in 0..long_gaps {
                let len = rng.range(3, max_len) as usize;
                if len + 4 >= k {
                    continue;
                }
                let at = rng.range(2, (k - len - 2) as i64) as usize;
                for p in present.iter_mut().skip(at).take(len) {
                    *p = false;
                }
            }
            // One node per capture loses its kubelet and exporter for a while: NodeNotReady.
            if i == 0 && k >= 200 {
                let len = ((600_000 / tl.interval_ms).max(4) as usize + rng.range(0, 10) as usize)
                    .min(k / 8);
                let at = (k as f64 * 0.4) as usize + rng.range(0, (k / 10) as i64) as usize;
                if at + len + 2 < k {
                    for p in present.iter_mut().skip(at).take(len) {
                        *p = false;
                    }
                    let t0 = tl.start_ms() + node.scrape_offset_ms + at as i64 * tl.interval_ms;
                    let t1 =
                        tl.start_ms() + node.scrape_offset_ms + (at + len) as i64 * tl.interval_ms;
                    node.not_ready = Some((t0 / 1000 + 40, t1 / 1000));
                }
            }
        }
        if let Some(first) = present.first_mut() {
            *first = true;
        }
        if let Some(last) = present.last_mut() {
            *last = true;
        }
        node.present = present;
    }
}

/// Cordons one node (never node 0, which has the NotReady outage) for a few hours, or about 15%
/// of a short capture, as a platform team does for maintenance: its running pods go on, no new
/// pod starts there, and its free GPUs are `cordoned` time (docs/accounting.md "Why GPUs were idle").
/// Like the outage, only in captures of at least 200 scrapes.
fn plan_cordon(seed: u64, tl: &Timeline, nodes: &mut [Node]) {
    if tl.scrapes < 200 || nodes.len() < 2 {
        return;
    }
    let mut rng = Rng::stream(seed, tag::CORDON, 0);
    let node = rng.range(1, nodes.len() as i64 - 1) as usize;
    let span = tl.end_s - tl.start_s;
    let len = rng.range(3 * 3600, 5 * 3600).min(span * 15 / 100);
    // Clear of the capture's first and last tenth, so both changes fall between scrapes.
    let from = tl.start_s + rng.range(span / 10, span - len - span / 10);
    nodes[node].cordoned = Some((from, from + len));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pools_scale_and_never_vanish() {
        assert_eq!(nodes_per_pool(1), [1, 1, 1, 1]);
        assert_eq!(nodes_per_pool(64), [4, 2, 3, 1]);
        let big = nodes_per_pool(1200);
        assert_eq!(big[0] * 8, 600);
        assert_eq!(big[3], 1);
    }

    #[test]
    fn mig_layouts_fit_seven_slices() {
        for l in MIG_LAYOUTS {
            let s: u64 = l.iter().map(|(p, _)| p.sevenths()).sum();
            assert!((6..=7).contains(&s));
        }
    }
}
