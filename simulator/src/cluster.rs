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
    pub const DRA: u64 = 10;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PoolId {
    H100 = 0,
    A100Mig = 1,
    L4 = 2,
    T4 = 3,
    /// H100s handed out by Dynamic Resource Allocation (NVIDIA's DRA driver) instead of the
    /// device plugin: pods ask for them through ResourceClaims ([`crate::dra`]).
    Dra = 4,
}

/// How many pools there are: the length of per-pool arrays.
pub const N_POOLS: usize = 5;

pub const POOLS: [PoolId; N_POOLS] = [PoolId::H100, PoolId::A100Mig, PoolId::L4, PoolId::T4, PoolId::Dra];

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
    /// GPUs are handed out by Dynamic Resource Allocation (no `nvidia.com/gpu` device plugin).
    pub dra: bool,
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
    dra: false,
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
    dra: false,
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
    dra: false,
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
    dra: false,
};

/// A smaller pool of H100 nodes (four GPUs each, as GCP's a3-highgpu-4g has) whose GPUs NVIDIA's
/// DRA driver publishes in ResourceSlices; no device plugin runs there.
const DRA_H100: PoolSpec = PoolSpec {
    name: "h100-dra",
    node_prefix: "gpu-dra-h100-",
    gpus_per_node: 4,
    node_cpu: 104,
    node_mem_gi: 936,
    pci_buses: &["04", "05", "0A", "0B"],
    instance_type: "a3-highgpu-4g",
    dra: true,
    ..H100
};

impl PoolId {
    pub fn spec(self) -> &'static PoolSpec {
        match self {
            PoolId::H100 => &H100,
            PoolId::A100Mig => &A100,
            PoolId::L4 => &L4,
            PoolId::T4 => &T4,
            PoolId::Dra => &DRA_H100,
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
    /// Kept out of the scheduler: a place of the hand-placed DRA sharing shapes
    /// ([`crate::schedule`]'s `dra_sharing`), which no job template competes for.
    pub pinned: bool,
}

/// How the pods that hold a GPU share it, and so how the exporter writes it and how its time is
/// split among them (docs/accounting.md "Allocation", "DRA", "Measured sharing").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sharing {
    /// One pod at a time (or MIG instances, each one pod's).
    Exclusive,
    /// The device plugin advertises the GPU [`TIME_SLICE_REPLICAS`] times; the exporter
    /// (`--kubernetes-virtual-gpus`) writes the device's utilisation without pod labels beside
    /// each pod's own, with `pod_uid` and `vgpu`. Each pod holds 1/k and is active by its own
    /// utilisation.
    TimeSliced,
    /// One ResourceClaim reserved for several pods at once: a series per pod with the same
    /// `dra_*` labels and the device's values; 1/k each, active by the GPU's activity.
    DraClaim,
    /// Several claims on one device (`shareID`), each consuming the capacity
    /// [`DRA_SHARED_CAPACITY_GI`] gives its slot: split by consumed capacity among the claims
    /// present, the device's values on every pod's series.
    DraCapacity,
}

/// Memory (GiB) the claims on a [`Sharing::DraCapacity`] GPU consume, by slot, of the device's
/// [`DRA_DEVICE_MEMORY_GI`].
pub const DRA_SHARED_CAPACITY_GI: [u64; 2] = [20, 60];
/// The memory capacity a DRA GPU's ResourceSlice publishes.
pub const DRA_DEVICE_MEMORY_GI: u64 = 80;

#[derive(Debug, Clone)]
pub struct Gpu {
    pub index: u32,
    pub uuid: String,
    pub pci_bus_id: String,
    /// Sevenths of a MIG GPU that no instance covers (0 for whole GPUs).
    pub leftover7: u64,
    pub slots: std::ops::Range<usize>,
    /// How the pods holding its slots share it (several slots: replicas of the whole GPU).
    pub sharing: Sharing,
}

impl Gpu {
    /// Several pods may hold the GPU at once, each through a slot of its own.
    pub fn shared(&self) -> bool {
        self.sharing != Sharing::Exclusive
    }

    /// The name NVIDIA's DRA driver gives the device in its ResourceSlice (`gpu-<index>`).
    pub fn dra_device(&self) -> String {
        format!("gpu-{}", self.index)
    }
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
    pub pool_nodes: [Vec<usize>; N_POOLS],
}

/// Whole nodes per pool for a requested GPU count: about 50% H100, 25% A100 (MIG), 20% L4, a
/// single 2-GPU T4 node, and about 5% H100s under DRA (4-GPU nodes); every pool gets at least
/// one node.
pub fn nodes_per_pool(gpus: u32) -> [u32; N_POOLS] {
    let g = gpus as f64;
    let h = ((g * 0.50) / 8.0).round().max(1.0) as u32;
    let a = ((g * 0.25) / 8.0).round().max(1.0) as u32;
    let l = ((g * 0.20) / 4.0).round().max(1.0) as u32;
    let d = ((g * 0.05) / 4.0).round().max(1.0) as u32;
    [h, a, l, 1, d]
}

/// How a GPU of `pool` is shared: the T4s are time-sliced; on the first DRA node, GPU 2 is
/// one claim's for two pods and GPU 3 two claims' by consumed capacity (the rest of the DRA
/// GPUs, one claim and pod at a time).
fn sharing_of(pool: PoolId, node_in_pool: u32, gpu: u32) -> Sharing {
    match (pool, node_in_pool, gpu) {
        (PoolId::T4, _, _) => Sharing::TimeSliced,
        (PoolId::Dra, 0, 2) => Sharing::DraClaim,
        (PoolId::Dra, 0, 3) => Sharing::DraCapacity,
        _ => Sharing::Exclusive,
    }
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
    let mut pool_nodes: [Vec<usize>; N_POOLS] = Default::default();
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
                let sharing = sharing_of(pool, n, g);
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
                            pinned: false,
                        });
                    }
                    leftover = 7 - used;
                } else {
                    // T4s are time-sliced: up to four pods share a GPU. A shared DRA GPU has a
                    // slot per pod or claim of its shape.
                    let replicas = match sharing {
                        Sharing::Exclusive => 1,
                        Sharing::TimeSliced => TIME_SLICE_REPLICAS,
                        Sharing::DraClaim | Sharing::DraCapacity => DRA_SHARED_CAPACITY_GI.len() as u32,
                    };
                    for _ in 0..replicas {
                        slots.push(Slot {
                            node: node_idx as u32,
                            gpu: g,
                            mig: None,
                            weight7: 7,
                            pinned: matches!(sharing, Sharing::DraClaim | Sharing::DraCapacity),
                        });
                    }
                }
                gpus_v.push(Gpu {
                    index: g,
                    uuid: gpu_uuid(&mut rng),
                    pci_bus_id: pci,
                    leftover7: leftover,
                    slots: gs..slots.len(),
                    sharing,
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
    // Among the nodes of the pools before the DRA one (they come last), so that adding that
    // pool moved no cordon.
    let candidates = nodes.iter().filter(|n| n.pool != PoolId::Dra).count();
    if tl.scrapes < 200 || candidates < 2 {
        return;
    }
    let mut rng = Rng::stream(seed, tag::CORDON, 0);
    let node = rng.range(1, candidates as i64 - 1) as usize;
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
        assert_eq!(nodes_per_pool(1), [1, 1, 1, 1, 1]);
        assert_eq!(nodes_per_pool(64), [4, 2, 3, 1, 1]);
        let big = nodes_per_pool(1200);
        assert_eq!(big[0] * 8, 600);
        assert_eq!((big[3], big[4] * 4), (1, 60));
    }

    /// The DRA pool's first node carries the sharing shapes on its GPUs 2 and 3 (two pinned
    /// slots each); T4s are time-sliced; every other GPU is one pod's at a time.
    #[test]
    fn dra_sharing_shapes_sit_on_the_first_dra_node() {
        let tl = Timeline { start_s: 1_000_000, end_s: 1_086_400, obj_start_s: 950_000, interval_ms: 60_000, scrapes: 1440 };
        let cl = build(1, &tl, 200);
        let dra = &cl.pool_nodes[PoolId::Dra as usize];
        assert_eq!(dra.len(), 3);
        for (i, &n) in dra.iter().enumerate() {
            let node = &cl.nodes[n];
            assert!(node.name.starts_with("gpu-dra-h100-") && node.gpus.len() == 4);
            for g in &node.gpus {
                let want = match (i, g.index) {
                    (0, 2) => Sharing::DraClaim,
                    (0, 3) => Sharing::DraCapacity,
                    _ => Sharing::Exclusive,
                };
                assert_eq!(g.sharing, want, "{} GPU {}", node.name, g.index);
                assert_eq!(g.slots.len(), if g.shared() { 2 } else { 1 });
                assert!(g.slots.clone().all(|s| cl.slots[s].pinned == g.shared()));
            }
        }
        let t4 = &cl.nodes[cl.pool_nodes[PoolId::T4 as usize][0]];
        assert!(t4.gpus.iter().all(|g| g.sharing == Sharing::TimeSliced && g.slots.len() == TIME_SLICE_REPLICAS as usize));
        assert_eq!(cl.slots.iter().filter(|s| s.pinned).count(), 4);
    }

    #[test]
    fn mig_layouts_fit_seven_slices() {
        for l in MIG_LAYOUTS {
            let s: u64 = l.iter().map(|(p, _)| p.sevenths()).sum();
            assert!((6..=7).contains(&s));
        }
    }
}
