//! Jobs, Kueue admission and pod lifecycles: a discrete-event simulation of the cluster.
//!
//! Jobs arrive per team from templates (a daily load cycle, sized so that peaks queue), wait in
//! their ClusterQueue, get quota and GPUs (whole GPUs or MIG instances), run pods that may be
//! preempted by higher-priority work (a new segment after requeue), fail (OOMKilled, or Error
//! with a container restart) or succeed. No new pod starts on a node while it is cordoned or not
//! Ready, and one job asks for more than the cluster has, so it waits until it is deleted. The
//! result is plain records with every time the Kubernetes objects and DCGM samples are later
//! written from; nothing here writes files.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

use crate::cluster::{Cluster, MigProfile, NAMESPACES, PoolId, Sharing, Timeline, ns_index, tag};
use crate::rng::Rng;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Train,
    Debug,
    Serve,
    BatchInfer,
    Notebook,
}

/// The Kubernetes objects a job is made of, and so how its pods find their Workload
/// (docs/accounting.md "Identity"): real clusters run more than batch/v1 Jobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// batch/v1 Job -> Pods; the Workload is owned by the Job.
    Batch,
    /// TrainJob -> JobSet -> Job `<name>-node-0` -> Pods (three hops); the Workload is owned by
    /// the TrainJob.
    TrainJob,
    /// PyTorchJob -> Pods named `<name>-master-0`, `<name>-worker-<i>`: the same names again
    /// after a preemption or a retry (new uids).
    PyTorchJob,
    /// RayJob -> RayCluster -> Pods; the Workload is owned by the RayJob.
    RayJob,
    /// A Kueue plain pod: no job object; the Workload is owned by the Pod itself.
    PlainPod,
    /// A pod no controller and no Kueue manages, named like the job: evicted and created again
    /// under the same name (a new uid), each pod its own run.
    BarePod,
}

/// Where a DRA pod's claim (the pod's `spec.resourceClaims` entry [`crate::dra::POD_CLAIM`])
/// comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimSource {
    /// `resourceClaimTemplateName`: a claim made for each pod from this template of its namespace.
    Template(&'static str),
    /// `resourceClaimName`: one claim, made by name, that several pods share.
    Named(String),
}

#[derive(Debug, Clone, Copy)]
pub enum TRes {
    Gpu(&'static [u32]),
    Mig(MigProfile),
}

/// How a template's runs declare accepted units (docs/accounting.md "Accepted units").
#[derive(Debug, Clone, Copy)]
pub enum Units {
    None,
    /// `gpuledger.io/unit` only, on the Job: one unit of that name per succeeded run.
    JobUnit(&'static str),
    /// Both annotations on the Job, added when it completes (a serving job reports what it
    /// served); the count is a rate per GPU-hour of running.
    JobCountAtEnd(&'static str, f64, f64),
    /// Both annotations on the Workload from its creation (a batch of known size).
    WorkloadCount(&'static str, f64, f64),
    /// No annotation: the pods are vLLM servers whose token and request counters Prometheus
    /// scrapes ([`crate::inference`]), counted by `[[units.counters]]`. Their pods carry the team
    /// label [`INFERENCE_TEAM`].
    VllmCounters,
}

/// The team of the vLLM fleet (a pod label in the `serving` namespace): its cost per unit is its
/// cost per million generated tokens.
pub const INFERENCE_TEAM: &str = "llm-inference";

/// A kind of job one team submits to one pool.
pub struct Template {
    pub prefixes: &'static [&'static str],
    pub ns: &'static str,
    pub pool: PoolId,
    pub res: TRes,
    pub pods: &'static [u32],
    pub dur_h: (f64, f64),
    pub prio: (i32, &'static str),
    pub kind: Kind,
    /// Share of its resource's capacity this template keeps busy on average.
    pub share: f64,
    pub p_oom: f64,
    pub p_err: f64,
    pub units: Units,
    pub image: &'static str,
    pub cpu_per_unit: u32,
    pub mem_gi_per_unit: u32,
}

const HIGH: (i32, &str) = (1000, "serving-high");
const NORMAL: (i32, &str) = (100, "batch-normal");
const LOW: (i32, &str) = (10, "batch-low");

pub const TEMPLATES: &[Template] = &[
    Template {
        prefixes: &[
            "pretrain-llama3-70b",
            "pretrain-mixtral-8x7b",
            "pretrain-gpt-13b",
        ],
        ns: "llm-pretrain",
        pool: PoolId::H100,
        res: TRes::Gpu(&[8]),
        pods: &[1, 1, 2],
        dur_h: (3.0, 12.0),
        prio: NORMAL,
        kind: Kind::Train,
        share: 0.32,
        p_oom: 0.07,
        p_err: 0.05,
        units: Units::JobUnit("training-run"),
        image: "nvcr.io/nvidia/nemo:24.07",
        cpu_per_unit: 22,
        mem_gi_per_unit: 220,
    },
    Template {
        prefixes: &[
            "exp-contrastive",
            "exp-rlhf-reward",
            "exp-distill",
            "exp-moe-router",
        ],
        ns: "ml-research",
        pool: PoolId::H100,
        res: TRes::Gpu(&[1, 2, 4]),
        pods: &[1],
        dur_h: (0.5, 5.0),
        prio: LOW,
        kind: Kind::Train,
        share: 0.24,
        p_oom: 0.10,
        p_err: 0.06,
        units: Units::None,
        image: "nvcr.io/nvidia/pytorch:24.05-py3",
        cpu_per_unit: 16,
        mem_gi_per_unit: 160,
    },
    Template {
        prefixes: &["debug-amara", "debug-jonas", "debug-priya", "debug-kenji"],
        ns: "ml-research",
        pool: PoolId::H100,
        res: TRes::Gpu(&[1]),
        pods: &[1],
        dur_h: (1.0, 4.0),
        prio: LOW,
        kind: Kind::Debug,
        share: 0.07,
        p_oom: 0.0,
        p_err: 0.0,
        units: Units::None,
        image: "nvcr.io/nvidia/pytorch:24.05-py3",
        cpu_per_unit: 8,
        mem_gi_per_unit: 64,
    },
    Template {
        prefixes: &["train-detr", "train-sam-ft", "train-vit-h"],
        ns: "vision",
        pool: PoolId::H100,
        res: TRes::Gpu(&[2, 4]),
        pods: &[1],
        dur_h: (1.0, 6.0),
        prio: NORMAL,
        kind: Kind::Train,
        share: 0.12,
        p_oom: 0.05,
        p_err: 0.05,
        units: Units::JobUnit("training-run"),
        image: "nvcr.io/nvidia/pytorch:24.05-py3",
        cpu_per_unit: 16,
        mem_gi_per_unit: 128,
    },
    Template {
        prefixes: &["llm-serve-chat", "llm-serve-code"],
        ns: "serving",
        pool: PoolId::H100,
        res: TRes::Gpu(&[1, 2]),
        pods: &[1],
        dur_h: (6.0, 30.0),
        prio: HIGH,
        kind: Kind::Serve,
        share: 0.17,
        p_oom: 0.0,
        p_err: 0.02,
        units: Units::VllmCounters,
        image: "vllm/vllm-openai:v0.6.3",
        cpu_per_unit: 12,
        mem_gi_per_unit: 96,
    },
    Template {
        prefixes: &["embed-serve", "rerank-serve"],
        ns: "serving",
        pool: PoolId::L4,
        res: TRes::Gpu(&[1]),
        pods: &[1],
        dur_h: (4.0, 24.0),
        prio: HIGH,
        kind: Kind::Serve,
        share: 0.40,
        p_oom: 0.0,
        p_err: 0.02,
        units: Units::JobCountAtEnd("1k-requests", 100.0, 900.0),
        image: "ghcr.io/huggingface/text-embeddings-inference:1.5",
        cpu_per_unit: 8,
        mem_gi_per_unit: 32,
    },
    Template {
        prefixes: &[
            "batch-infer-catalog",
            "batch-infer-ocr",
            "batch-infer-tagging",
        ],
        ns: "vision",
        pool: PoolId::L4,
        res: TRes::Gpu(&[1, 2]),
        pods: &[1],
        dur_h: (0.3, 3.0),
        prio: NORMAL,
        kind: Kind::BatchInfer,
        share: 0.30,
        p_oom: 0.05,
        p_err: 0.05,
        units: Units::WorkloadCount("1k-images", 30.0, 120.0),
        image: "nvcr.io/nvidia/tritonserver:24.05-py3",
        cpu_per_unit: 8,
        mem_gi_per_unit: 32,
    },
    Template {
        prefixes: &["notebook-l4"],
        ns: "sandbox",
        pool: PoolId::L4,
        res: TRes::Gpu(&[1]),
        pods: &[1],
        dur_h: (1.0, 4.0),
        prio: LOW,
        kind: Kind::Notebook,
        share: 0.22,
        p_oom: 0.0,
        p_err: 0.0,
        units: Units::None,
        image: "quay.io/jupyter/pytorch-notebook:cuda12-2024-07-01",
        cpu_per_unit: 4,
        mem_gi_per_unit: 16,
    },
    Template {
        prefixes: &["lora-ft-llama3-8b", "lora-ft-mistral-7b"],
        ns: "nlp-finetune",
        pool: PoolId::A100Mig,
        res: TRes::Mig(MigProfile::G3),
        pods: &[1],
        dur_h: (1.0, 6.0),
        prio: NORMAL,
        kind: Kind::Train,
        share: 0.85,
        p_oom: 0.08,
        p_err: 0.04,
        units: Units::JobUnit("fine-tune"),
        image: "nvcr.io/nvidia/pytorch:24.05-py3",
        cpu_per_unit: 8,
        mem_gi_per_unit: 64,
    },
    Template {
        prefixes: &["aug-train-seg", "aug-train-cls"],
        ns: "vision",
        pool: PoolId::A100Mig,
        res: TRes::Mig(MigProfile::G2),
        pods: &[1],
        dur_h: (0.5, 3.0),
        prio: NORMAL,
        kind: Kind::Train,
        share: 0.80,
        p_oom: 0.05,
        p_err: 0.05,
        units: Units::None,
        image: "nvcr.io/nvidia/pytorch:24.05-py3",
        cpu_per_unit: 4,
        mem_gi_per_unit: 32,
    },
    Template {
        prefixes: &["notebook-mig"],
        ns: "sandbox",
        pool: PoolId::A100Mig,
        res: TRes::Mig(MigProfile::G1),
        pods: &[1],
        dur_h: (1.0, 4.0),
        prio: LOW,
        kind: Kind::Notebook,
        share: 0.50,
        p_oom: 0.0,
        p_err: 0.0,
        units: Units::None,
        image: "quay.io/jupyter/pytorch-notebook:cuda12-2024-07-01",
        cpu_per_unit: 2,
        mem_gi_per_unit: 16,
    },
    Template {
        prefixes: &["tiny-serve-intent"],
        ns: "serving",
        pool: PoolId::A100Mig,
        res: TRes::Mig(MigProfile::G1),
        pods: &[1],
        dur_h: (6.0, 24.0),
        prio: HIGH,
        kind: Kind::Serve,
        share: 0.40,
        p_oom: 0.0,
        p_err: 0.0,
        units: Units::JobCountAtEnd("1k-requests", 50.0, 300.0),
        image: "nvcr.io/nvidia/tritonserver:24.05-py3",
        cpu_per_unit: 2,
        mem_gi_per_unit: 16,
    },
    Template {
        prefixes: &["notebook-t4"],
        ns: "sandbox",
        pool: PoolId::T4,
        res: TRes::Gpu(&[1]),
        pods: &[1],
        dur_h: (1.0, 3.0),
        prio: LOW,
        kind: Kind::Notebook,
        share: 0.55,
        p_oom: 0.0,
        p_err: 0.0,
        units: Units::None,
        image: "quay.io/jupyter/pytorch-notebook:cuda12-2024-07-01",
        cpu_per_unit: 4,
        mem_gi_per_unit: 16,
    },
    Template {
        prefixes: &["ocr-serve"],
        ns: "serving",
        pool: PoolId::T4,
        res: TRes::Gpu(&[1]),
        pods: &[1],
        dur_h: (4.0, 12.0),
        prio: HIGH,
        kind: Kind::Serve,
        share: 0.35,
        p_oom: 0.0,
        p_err: 0.0,
        units: Units::JobCountAtEnd("1k-pages", 5.0, 40.0),
        image: "nvcr.io/nvidia/tritonserver:24.05-py3",
        cpu_per_unit: 4,
        mem_gi_per_unit: 16,
    },
    // The DRA pool's jobs come last, so that the arrival streams (one per template index) of
    // the others stay as they were. Each pod asks for one GPU through the namespace's
    // `single-gpu` ResourceClaimTemplate.
    Template {
        prefixes: &["dra-train-embed", "dra-train-asr"],
        ns: "ml-research",
        pool: PoolId::Dra,
        res: TRes::Gpu(&[1]),
        pods: &[1],
        dur_h: (0.5, 5.0),
        prio: LOW,
        kind: Kind::Train,
        share: 0.45,
        p_oom: 0.08,
        p_err: 0.06,
        units: Units::None,
        image: "nvcr.io/nvidia/pytorch:24.05-py3",
        cpu_per_unit: 16,
        mem_gi_per_unit: 160,
    },
    Template {
        prefixes: &["dra-serve-summarize"],
        ns: "serving",
        pool: PoolId::Dra,
        res: TRes::Gpu(&[1]),
        pods: &[1],
        dur_h: (6.0, 24.0),
        prio: HIGH,
        kind: Kind::Serve,
        share: 0.30,
        p_oom: 0.0,
        p_err: 0.0,
        units: Units::JobCountAtEnd("1k-requests", 50.0, 300.0),
        image: "nvcr.io/nvidia/tritonserver:24.05-py3",
        cpu_per_unit: 12,
        mem_gi_per_unit: 96,
    },
];

/// The pools whose `nvidia.com/gpu` flavor ClusterQueue `cq` lists: those its namespaces'
/// templates ask whole GPUs of, as a platform team gives each queue the flavors its teams use.
/// Which free GPUs a waiting Workload strands follows from it (docs/accounting.md "Stranded capacity").
pub fn cq_gpu_flavor_pools(cq: usize) -> Vec<PoolId> {
    crate::cluster::GPU_FLAVOR_POOLS
        .into_iter()
        .filter(|&pool| {
            TEMPLATES.iter().any(|t| {
                matches!(t.res, TRes::Gpu(_)) && t.pool == pool && NAMESPACES[ns_index(t.ns)].cq == Some(cq)
            })
        })
        .collect()
}

/// The resource a job competes for: whole GPUs of one pool, or one MIG profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Group {
    Whole(PoolId),
    Mig(MigProfile),
}

impl Group {
    pub fn index(self) -> usize {
        match self {
            Group::Whole(PoolId::H100) => 0,
            Group::Whole(PoolId::L4) => 1,
            Group::Whole(PoolId::T4) => 2,
            Group::Whole(PoolId::A100Mig) => 6,
            Group::Whole(PoolId::Dra) => 7,
            Group::Mig(p) => 3 + p as usize,
        }
    }

    /// The resource name quotas use: the extended resource pods ask for, or for DRA GPUs the
    /// name Kueue's `deviceClassMappings` give the GPU device class ([`crate::dra::KUEUE_RESOURCE`]).
    pub fn resource(self) -> &'static str {
        match self {
            Group::Whole(PoolId::Dra) => crate::dra::KUEUE_RESOURCE,
            Group::Whole(_) => "nvidia.com/gpu",
            Group::Mig(p) => p.resource(),
        }
    }
}

const GROUPS: usize = 8;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan {
    Succeed,
    /// Every attempt is OOMKilled (restartPolicy Never, a new pod per attempt).
    Oom,
    /// The container exits 1, is restarted once (restartPolicy OnFailure), exits 1 again.
    Error,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailReason {
    OomKilled,
    Error,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SegEnd {
    Running,
    Succeeded(i64),
    Failed(i64, FailReason),
    /// Evicted at `at`; pods gone and the Workload requeued at `requeued`.
    Preempted {
        at: i64,
        requeued: i64,
        by_job: u32,
        reason: &'static str,
    },
}

pub struct Job {
    pub ns: usize,
    pub name: String,
    pub uid: String,
    pub wl_name: String,
    pub wl_uid: String,
    pub group: Group,
    pub pool: PoolId,
    pub per_pod: u32,
    pub pods: u32,
    pub created_s: i64,
    pub priority: i32,
    pub priority_class: &'static str,
    pub kind: Kind,
    pub plan: Plan,
    pub backoff_limit: u32,
    pub image: &'static str,
    pub cpu: u32,
    pub mem_gi: u32,
    pub wl_v1beta1: bool,
    pub ttl_s: Option<i64>,
    pub job_annotations: BTreeMap<String, String>,
    /// Added to the Job in the version that marks it complete (only when it succeeds).
    pub job_end_annotations: BTreeMap<String, String>,
    pub wl_annotations: BTreeMap<String, String>,
    pub wl_team: Option<&'static str>,
    pub pod_team: Option<&'static str>,
    pub shape: Shape,
    /// How its pods ask for a DRA GPU (`spec.resourceClaims`), for jobs of the DRA pool.
    pub claim: Option<ClaimSource>,
    pub segments: Vec<u32>,
    /// When the Job and Workload finished, and whether they succeeded.
    pub finished: Option<(i64, bool)>,
    /// Job deleted (ttlSecondsAfterFinished), which also deletes its Workload and pods.
    pub deleted_s: Option<i64>,
    remaining_s: i64,
    queued_since: i64,
    epoch: u32,
    preemptions: u32,
    rng: Rng,
}

pub struct Segment {
    pub job: u32,
    /// 1-based segment number within its Workload.
    pub n: u32,
    /// Start of the wait that this admission ended (creation, or the requeue).
    pub queued_s: i64,
    pub admitted_s: i64,
    pub slots: Vec<u32>,
    pub pods: Vec<u32>,
    pub end: SegEnd,
    /// All pods running (Workload PodsReady).
    pub ready_s: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Term {
    Completed,
    OomKilled,
    Error,
    /// Killed by SIGTERM when its Workload was preempted (exit 143).
    Killed,
}

pub struct Pod {
    pub name: String,
    pub uid: String,
    pub job: u32,
    pub seg: u32,
    pub index: u32,
    pub node: u32,
    pub slots: Vec<u32>,
    pub created_s: i64,
    /// The scheduler first found no room (FailedScheduling) before placing it.
    pub unschedulable: bool,
    /// `i64::MAX` when never scheduled.
    pub sched_s: i64,
    pub pull_s: i64,
    /// Container running from here; `i64::MAX` when it never started.
    pub started_s: i64,
    /// Container terminated (planned; may lie past the end of the capture).
    pub end_s: i64,
    pub term: Term,
    /// Error pods: the first crash (exit 1) and the restart after back-off.
    pub crash: Option<(i64, i64)>,
    pub disruption: Option<(i64, &'static str)>,
    pub delete_req_s: Option<i64>,
    pub gone_s: Option<i64>,
    /// Removed by a preemption before it was created (a later retry that never happened).
    pub cancelled: bool,
    /// Idle stretches (ms, half-open) within its running time.
    pub idle: Vec<(i64, i64)>,
    /// (slot, from ms, to ms, XID code) shown by DCGM before the pod failed.
    pub xid: Option<(u32, i64, i64, u64)>,
    pub team: usize,
    /// Framebuffer in use while it runs, per mille of the slot's memory.
    pub fb_milli: u64,
    pub ip: String,
}

pub struct Sim {
    pub jobs: Vec<Job>,
    pub segs: Vec<Segment>,
    pub pods: Vec<Pod>,
    /// Team names; index 0 is `platform` (unallocated time).
    pub teams: Vec<String>,
}

impl Sim {
    pub fn team_index(&mut self, name: &str) -> usize {
        if let Some(i) = self.teams.iter().position(|t| t == name) {
            return i;
        }
        self.teams.push(name.to_string());
        self.teams.len() - 1
    }
}

/// The team of a job's runs: pod label, then Workload label, then namespace label, then name.
pub fn run_team(job: &Job) -> &'static str {
    let ns = &NAMESPACES[job.ns];
    job.pod_team
        .or(job.wl_team)
        .or(ns.team_label)
        .unwrap_or(ns.name)
}

/// Slots of group `g` the scheduler hands out (pinned ones are not).
pub fn capacity(cl: &Cluster, g: Group) -> usize {
    cl.slots.iter().filter(|s| !s.pinned && slot_group(cl, s) == g).count()
}

pub fn slot_group(cl: &Cluster, s: &crate::cluster::Slot) -> Group {
    match s.mig {
        Some((p, _)) => Group::Mig(p),
        None => Group::Whole(cl.nodes[s.node as usize].pool),
    }
}

/// Load over the day: peaks in the European/American working day, lowest at night (UTC).
fn day_load(t: i64) -> f64 {
    let h = (t.rem_euclid(86_400)) as f64 / 3600.0;
    1.0 + 0.4 * ((h - 8.0) / 24.0 * std::f64::consts::TAU).sin()
}

fn mean_log_uniform(a: f64, b: f64) -> f64 {
    if (b - a).abs() < 1e-9 {
        a
    } else {
        (b - a) / (b / a).ln()
    }
}

fn generate_jobs(seed: u64, cl: &Cluster, tl: &Timeline) -> Vec<Job> {
    const RHO: f64 = 1.0;
    let multi_node_ok = cl.pool_nodes[PoolId::H100 as usize].len() >= 2;
    let mut arrivals: Vec<(i64, usize, u64)> = Vec::new();
    for (ti, t) in TEMPLATES.iter().enumerate() {
        let group = match t.res {
            TRes::Gpu(_) => Group::Whole(t.pool),
            TRes::Mig(p) => Group::Mig(p),
        };
        let cap = capacity(cl, group) as f64;
        if cap == 0.0 {
            continue;
        }
        let mean_units = match t.res {
            TRes::Gpu(c) => c.iter().sum::<u32>() as f64 / c.len() as f64,
            TRes::Mig(_) => 1.0,
        };
        let pods: Vec<u32> = t
            .pods
            .iter()
            .copied()
            .filter(|&p| p == 1 || multi_node_ok)
            .collect();
        let mean_pods = pods.iter().sum::<u32>() as f64 / pods.len().max(1) as f64;
        let mean_dur_s = mean_log_uniform(t.dur_h.0, t.dur_h.1) * 3600.0;
        let rate = RHO * cap * t.share / (mean_units * mean_pods * mean_dur_s);
        let steady = t.kind == Kind::Serve;
        let max_mult = if steady { 1.0 } else { 1.45 };
        let mut rng = Rng::stream(seed, tag::ARRIVALS, ti as u64);
        let mut at = tl.obj_start_s as f64;
        let mut n = 0u64;
        loop {
            at += rng.exp(1.0 / (rate * max_mult));
            let ts = at as i64;
            if ts >= tl.end_s {
                break;
            }
            let m = if steady { 1.0 } else { day_load(ts) };
            if rng.f64() * max_mult <= m {
                arrivals.push((ts, ti, n));
                n += 1;
            }
        }
    }
    arrivals.sort();
    let mut jobs: Vec<Job> = Vec::with_capacity(arrivals.len() + 1);
    for &(created, ti, n) in &arrivals {
        // Some training and batch-inference jobs are other kinds of object than batch/v1 Jobs
        // (counted without the DRA pool's, whose jobs are batch/v1 Jobs all, so that adding
        // them changed no other job's shape).
        let nth = jobs.iter().filter(|j| j.kind == TEMPLATES[ti].kind && !j.pool.spec().dra).count();
        jobs.push(make_job(seed, created, ti, n, multi_node_ok, nth));
    }
    mark_special_jobs(&mut jobs, tl.start_s);
    // After every other job, so that their indices and shapes do not depend on them.
    jobs.extend(oversized_job(seed, cl, tl));
    jobs.extend(runaway_notebook(seed, cl, tl));
    jobs
}

/// The name prefix of [`runaway_notebook`]'s job: the truth finds it by this.
pub const RUNAWAY_NOTEBOOK: &str = "notebook-h100-forgotten";

/// The UTC day a capture's runaway notebook holds whole: the second-to-last day, when the
/// capture has at least 7 days before it (the baseline's minimum).
pub fn runaway_day(tl: &Timeline) -> Option<i64> {
    let first = tl.start_s.div_euclid(86_400) * 86_400;
    let days = (tl.end_s - first) / 86_400;
    (days >= 9).then(|| first + (days - 2) * 86_400)
}

/// A notebook a researcher started at noon and left holding a whole H100 node until the morning
/// after next (docs/accounting.md "Spend anomalies"): the team's cost on the day it holds whole
/// is far above its usual days, so the ledger flags that day and names the notebook's GPUs.
/// High priority, so Kueue admits it at once, preempting a run if the pool is full.
fn runaway_notebook(seed: u64, cl: &Cluster, tl: &Timeline) -> Option<Job> {
    let day = runaway_day(tl)?;
    let ti = TEMPLATES.iter().position(|t| t.ns == "ml-research" && t.pool == PoolId::H100)?;
    let like = TEMPLATES.iter().find(|t| t.kind == Kind::Notebook)?;
    if cl.pool_nodes[PoolId::H100 as usize].is_empty() {
        return None;
    }
    let gpus = PoolId::H100.spec().gpus_per_node;
    let created = day - 12 * 3600;
    // Its own stream index, and a shape-deciding count that gives a batch/v1 Job.
    let mut job = make_job(seed, created, ti, u64::from(u32::MAX) - 1, false, 0);
    let mut rng = Rng::stream(seed, tag::JOB, u64::MAX - 1);
    job.kind = Kind::Notebook;
    job.image = like.image;
    job.shape = Shape::Batch;
    job.plan = Plan::Succeed;
    job.per_pod = gpus;
    job.pods = 1;
    job.priority = HIGH.0;
    job.priority_class = HIGH.1;
    job.cpu = like.cpu_per_unit * gpus;
    job.mem_gi = like.mem_gi_per_unit * gpus;
    job.name = format!("{RUNAWAY_NOTEBOOK}-{}", rng.name_suffix(5));
    job.wl_name = format!("job-{}-{}", job.name, rng.hex(5));
    job.ttl_s = None;
    job.job_annotations.clear();
    job.job_end_annotations.clear();
    job.wl_annotations.clear();
    // Until 09:00 the day after the day it holds, had it started at once.
    job.remaining_s = day + 86_400 + 9 * 3600 - created;
    Some(job)
}

/// The `n`-th job of template `ti`, submitted at `created`; `nth` is how many jobs of its kind
/// came before it (which decides its shape).
fn make_job(seed: u64, created: i64, ti: usize, n: u64, multi_node_ok: bool, nth: usize) -> Job {
    let t = &TEMPLATES[ti];
    let mut rng = Rng::stream(seed, tag::JOB, ((ti as u64) << 32) | n);
    let (group, per_pod) = match t.res {
        TRes::Gpu(c) => (Group::Whole(t.pool), *rng.pick(c)),
        TRes::Mig(p) => (Group::Mig(p), 1),
    };
    let pods = {
        let p = *rng.pick(t.pods);
        if p > 1 && !multi_node_ok { 1 } else { p }
    };
    let name = format!("{}-{}", rng.pick(t.prefixes), rng.name_suffix(5));
    let wl_name = format!("job-{}-{}", name, rng.hex(5));
    let work_s = (rng.log_uniform(t.dur_h.0, t.dur_h.1) * 3600.0) as i64;
    // Multi-pod runs are kept clear of failures: one pod failing a gang is its own story.
    let x = rng.f64();
    let plan = if pods > 1 {
        Plan::Succeed
    } else if x < t.p_oom {
        Plan::Oom
    } else if x < t.p_oom + t.p_err {
        Plan::Error
    } else {
        Plan::Succeed
    };
    let backoff_limit = match plan {
        Plan::Oom => rng.range(0, 1) as u32,
        Plan::Error => 1,
        Plan::Succeed => *rng.pick(&[0, 2, 3]),
    };
    let ttl_s = if rng.chance(if plan == Plan::Succeed { 0.85 } else { 0.5 }) {
        Some(*rng.pick(&[1800i64, 3600, 7200]))
    } else {
        None
    };
    let mut job_annotations = BTreeMap::new();
    let mut job_end_annotations = BTreeMap::new();
    let mut wl_annotations = BTreeMap::new();
    let gpu_hours = (per_pod * pods) as f64 * work_s as f64 / 3600.0;
    match t.units {
        Units::None => {}
        Units::JobUnit(u) => {
            job_annotations.insert("gpuledger.io/unit".to_string(), u.to_string());
        }
        Units::JobCountAtEnd(u, lo, hi) => {
            let count = (gpu_hours * rng.uniform(lo, hi)).round().max(1.0);
            job_end_annotations.insert(
                "gpuledger.io/accepted-units".to_string(),
                format!("{count}"),
            );
            job_end_annotations.insert("gpuledger.io/unit".to_string(), u.to_string());
        }
        Units::WorkloadCount(u, lo, hi) => {
            let count = (gpu_hours * rng.uniform(lo, hi) * 10.0).round() / 10.0;
            wl_annotations.insert(
                "gpuledger.io/accepted-units".to_string(),
                format!("{}", count.max(0.1)),
            );
            wl_annotations.insert("gpuledger.io/unit".to_string(), u.to_string());
        }
        Units::VllmCounters => {}
    }
    let ns = ns_index(t.ns);
    let shape = match (t.kind, nth % 3) {
        _ if t.pool.spec().dra => Shape::Batch,
        (Kind::Train, 1) => Shape::TrainJob,
        (Kind::Train, 2) => Shape::PyTorchJob,
        (Kind::BatchInfer, 1) => Shape::RayJob,
        (Kind::Notebook, 0) if t.ns == "sandbox" => Shape::BarePod,
        _ => Shape::Batch,
    };
    // Nothing deletes a bare pod after it ends (no Job, no TTL).
    let ttl_s = if shape == Shape::BarePod { None } else { ttl_s };
    Job {
        ns,
        uid: rng.uuid(),
        wl_uid: rng.uuid(),
        name,
        wl_name,
        group,
        pool: t.pool,
        per_pod,
        pods,
        created_s: created,
        priority: t.prio.0,
        priority_class: t.prio.1,
        kind: t.kind,
        plan,
        backoff_limit,
        image: t.image,
        cpu: t.cpu_per_unit * per_pod,
        mem_gi: t.mem_gi_per_unit * per_pod,
        // Kueue serves both API versions; one team's tooling still reads v1beta1.
        wl_v1beta1: t.ns == "ml-research",
        ttl_s,
        job_annotations,
        job_end_annotations,
        wl_annotations,
        wl_team: None,
        pod_team: matches!(t.units, Units::VllmCounters).then_some(INFERENCE_TEAM),
        shape,
        claim: t.pool.spec().dra.then_some(ClaimSource::Template(crate::dra::SINGLE_GPU_TEMPLATE)),
        segments: Vec::new(),
        finished: None,
        deleted_s: None,
        remaining_s: work_s,
        queued_since: created,
        epoch: 0,
        preemptions: 0,
        rng,
    }
}

/// A pretraining run that asks for one 8-GPU pod more than the H100 pool has nodes: more than
/// the whole cohort can ever give, so Kueue never admits it (request > maximum capacity) and,
/// queueing BestEffortFIFO, lets others pass. Its owner deletes it after some hours. While it
/// waits, the free GPUs its ClusterQueue's flavors select are stranded (docs/accounting.md "Stranded
/// capacity"); every capture of a day or more has one, submitted after the metrics start.
fn oversized_job(seed: u64, cl: &Cluster, tl: &Timeline) -> Option<Job> {
    if tl.end_s - tl.start_s < 86_400 {
        return None;
    }
    let ti = TEMPLATES.iter().position(|t| t.ns == "llm-pretrain")?;
    let mut rng = Rng::stream(seed, tag::JOB, u64::MAX);
    let created = tl.start_s + rng.range(3600, 3 * 3600);
    // Its own stream index: no arrival of the template has it.
    let mut job = make_job(seed, created, ti, u64::from(u32::MAX), false, 0);
    let t = &TEMPLATES[ti];
    job.shape = Shape::Batch;
    job.plan = Plan::Succeed;
    job.per_pod = 8;
    job.pods = cl.pool_nodes[PoolId::H100 as usize].len() as u32 + 1;
    job.cpu = t.cpu_per_unit * job.per_pod;
    job.mem_gi = t.mem_gi_per_unit * job.per_pod;
    job.name = format!("pretrain-llama3-405b-{}", rng.name_suffix(5));
    job.wl_name = format!("job-{}-{}", job.name, rng.hex(5));
    job.ttl_s = None;
    job.deleted_s = Some(created + rng.range(4 * 3600, 8 * 3600));
    Some(job)
}

/// Whether Kueue can ever admit `job`: what it asks for fits in the cluster's capacity of its
/// resource (the cohort's whole quota).
pub fn admissible(cl: &Cluster, job: &Job) -> bool {
    u64::from(job.per_pod) * u64::from(job.pods) <= capacity(cl, job.group) as u64
}

/// The few hand-placed cases the accounting rules single out. Each goes to a job submitted after
/// the metrics start where there is one, so that its GPU time shows in the samples too.
fn mark_special_jobs(jobs: &mut [Job], start_s: i64) {
    let pick = |jobs: &[Job], prefix: &str, nth: usize, succeed: bool| -> Option<usize> {
        let fits = |j: &Job| j.name.starts_with(prefix) && (!succeed || j.plan == Plan::Succeed);
        let late: Vec<usize> = (0..jobs.len())
            .filter(|&i| fits(&jobs[i]) && jobs[i].created_s >= start_s)
            .collect();
        let any: Vec<usize> = (0..jobs.len()).filter(|&i| fits(&jobs[i])).collect();
        late.get(nth).or(late.first()).or(any.first()).copied()
    };
    // A Workload whose own `team` label beats its namespace's.
    if let Some(i) = pick(jobs, "exp-", 1, false) {
        jobs[i].wl_team = Some("vision");
    }
    // A pod template `team` label, which beats the Workload's and the namespace's.
    if let Some(i) = pick(jobs, "lora-ft-", 0, true) {
        jobs[i].pod_team = Some("ml-research");
    }
    // Accepted units on both the Workload and the Job: the Workload's count and unit win.
    if let Some(i) = pick(jobs, "batch-infer-", 0, true) {
        jobs[i]
            .job_annotations
            .insert("gpuledger.io/accepted-units".to_string(), "7".to_string());
        jobs[i]
            .job_annotations
            .insert("gpuledger.io/unit".to_string(), "batch".to_string());
    }
    // Bad unit annotations (docs/accounting.md "Accepted units"): not a finite number >= 0, so ignored;
    // the next source decides (here none: one unit per run).
    if let Some(i) = pick(jobs, "batch-infer-", 1, true) {
        jobs[i].wl_annotations.insert("gpuledger.io/accepted-units".to_string(), "NaN".to_string());
    }
    if let Some(i) = pick(jobs, "ocr-serve", 0, true) {
        jobs[i].job_end_annotations.insert("gpuledger.io/accepted-units".to_string(), "-3".to_string());
    }
    // A vLLM server whose container crashes once and restarts: its counters start again from
    // zero (docs/accounting.md "Counter units": a decrease is a restart).
    if let Some(i) = pick(jobs, "llm-serve-", 0, false) {
        jobs[i].plan = Plan::Error;
        jobs[i].backoff_limit = 1;
    }
}

/// The RayCluster a RayJob runs on.
pub fn ray_cluster_name(job: &Job) -> String {
    format!("{}-raycluster-{}", job.name, &job.uid[..5])
}

/// Accepted units of a job's succeeded run: each annotation read from the Workload first, then
/// the Job (its final version); one unit called `run` when neither says.
pub fn accepted_units(job: &Job) -> (f64, String) {
    let look = |key: &str| -> Option<&String> {
        job.wl_annotations
            .get(key)
            .or_else(|| job.job_end_annotations.get(key))
            .or_else(|| job.job_annotations.get(key))
    };
    // A count that is not a finite number >= 0 is bad input: the next source decides.
    let key = "gpuledger.io/accepted-units";
    let count = [&job.wl_annotations, &job.job_end_annotations, &job.job_annotations]
        .iter()
        .filter_map(|a| a.get(key).and_then(|v| v.parse::<f64>().ok()))
        .find(|c| c.is_finite() && *c >= 0.0)
        .unwrap_or(1.0);
    let unit = look("gpuledger.io/unit")
        .cloned()
        .unwrap_or_else(|| "run".to_string());
    (count, unit)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    Arrive(u32),
    SegEnd(u32, u32),
    /// A preemptor takes the slots its victim released.
    Admit(u32),
    Requeue(u32),
    /// A node becomes schedulable again: an admission cycle may now use it.
    Wake,
}

const RESERVED: u32 = u32::MAX;

struct Handoff {
    slots: Vec<Vec<u32>>,
    release: Vec<u32>,
}

struct Sched<'a> {
    cl: &'a Cluster,
    jobs: Vec<Job>,
    segs: Vec<Segment>,
    pods: Vec<Pod>,
    owner: Vec<Option<u32>>,
    node_free: Vec<[u32; GROUPS]>,
    group_free: [u32; GROUPS],
    heap: BinaryHeap<Reverse<(i64, u64, Ev)>>,
    seq: u64,
    pending: Vec<u32>,
    active: Vec<u32>,
    handoffs: BTreeMap<u32, Handoff>,
    ip_counter: u32,
    /// (node, from, to) in seconds: the node is cordoned or not Ready (few, so a list).
    unavailable: Vec<(usize, i64, i64)>,
}

/// A pod is bound and started within a few minutes of its admission (scheduling retries, image
/// pull): an admission this close before a node's cordon would start a pod inside it.
const START_MARGIN_S: i64 = 600;

pub fn run(seed: u64, cl: &Cluster, tl: &Timeline) -> Sim {
    let jobs = generate_jobs(seed, cl, tl);
    let mut node_free = vec![[0u32; GROUPS]; cl.nodes.len()];
    let mut group_free = [0u32; GROUPS];
    for s in cl.slots.iter().filter(|s| !s.pinned) {
        let g = slot_group(cl, s).index();
        node_free[s.node as usize][g] += 1;
        group_free[g] += 1;
    }
    let mut sch = Sched {
        cl,
        jobs,
        segs: Vec::new(),
        pods: Vec::new(),
        // Pinned slots are never free: no job is placed on them.
        owner: cl.slots.iter().map(|s| s.pinned.then_some(RESERVED)).collect(),
        node_free,
        group_free,
        heap: BinaryHeap::new(),
        seq: 0,
        pending: Vec::new(),
        active: Vec::new(),
        handoffs: BTreeMap::new(),
        ip_counter: 0,
        unavailable: Vec::new(),
    };
    for (n, node) in cl.nodes.iter().enumerate() {
        for (from, to) in node.unavailable_windows() {
            sch.unavailable.push((n, from, to));
            sch.push(to, Ev::Wake);
        }
    }
    for j in 0..sch.jobs.len() {
        // A Workload that can never fit does not enter the admission cycle (BestEffortFIFO:
        // it is inadmissible and blocks nobody); it only waits.
        if !admissible(cl, &sch.jobs[j]) {
            continue;
        }
        let t = sch.jobs[j].created_s + 1;
        sch.push(t, Ev::Arrive(j as u32));
    }
    while let Some(Reverse((t, _, ev))) = sch.heap.pop() {
        if t >= tl.end_s {
            break;
        }
        match ev {
            Ev::Arrive(j) => sch.pending.push(j),
            Ev::SegEnd(j, epoch) => sch.segment_end(j, epoch, t),
            Ev::Admit(j) => {
                if let Some(h) = sch.handoffs.remove(&j) {
                    for s in h.release {
                        sch.free_slot(s);
                    }
                    sch.admit(j, t, h.slots);
                }
            }
            Ev::Requeue(j) => {
                sch.jobs[j as usize].queued_since = t;
                sch.pending.push(j);
            }
            Ev::Wake => {}
        }
        sch.pass(t);
    }
    let mut sim = Sim {
        jobs: sch.jobs,
        segs: sch.segs,
        pods: sch.pods,
        teams: vec![crate::cluster::PLATFORM_TEAM.to_string()],
    };
    dra_sharing(seed, cl, tl, &mut sim);
    finish(seed, cl, tl, &mut sim);
    sim
}

/// The pods of the hand-placed DRA sharing shapes, on the pinned GPUs of the first DRA node
/// ([`Sharing::DraClaim`], [`Sharing::DraCapacity`]), one after another over the capture with
/// gaps between them (so that each GPU is also seen unallocated, and a capacity-shared GPU held
/// by one claim or by both). They are serving pods no controller and no Kueue manages (each its
/// own run), so they wait for nothing:
/// - a shared claim's GPU: pairs of replicas, both pods of a pair created, started and ended
///   together, referring to one ResourceClaim `shared-gpu-<n>` made by name
///   (`resourceClaimName`), reserved for both;
/// - a capacity-shared GPU: two independent successions of pods, each pod with a claim from
///   the `gpu-20gi` or `gpu-60gi` template (slot 0 or 1), which consumes that much of the
///   device's memory.
///
/// Their jobs come after every scheduled one, so nothing else moves for them.
fn dra_sharing(seed: u64, cl: &Cluster, tl: &Timeline, sim: &mut Sim) {
    let serving = ns_index("serving");
    let mut pairs = 0u32;
    for &ni in &cl.pool_nodes[PoolId::Dra as usize] {
        for g in &cl.nodes[ni].gpus {
            let slots: Vec<u32> = g.slots.clone().map(|s| s as u32).collect();
            let mut rng = Rng::stream(seed, tag::DRA, g.slots.start as u64);
            match g.sharing {
                Sharing::DraClaim => {
                    let mut t = tl.obj_start_s + rng.range(600, 3 * 3600);
                    while t < tl.end_s {
                        let claim = ClaimSource::Named(format!("shared-gpu-{pairs}"));
                        let suffix = rng.name_suffix(5);
                        let (pull, life) = (rng.range(20, 90), rng.range(6 * 3600, 30 * 3600));
                        let mut end = t;
                        for (i, &slot) in slots.iter().enumerate() {
                            let fb_milli = rng.range(300, 450) as u64;
                            let name = format!("llm-shared-{suffix}-{i}");
                            end = pinned_pod(sim, tl, &mut rng, (serving, name, claim.clone()), slot, ni as u32, (t, pull, life), fb_milli);
                        }
                        pairs += 1;
                        t = end + rng.range(1800, 3 * 3600);
                    }
                }
                Sharing::DraCapacity => {
                    for (i, &slot) in slots.iter().enumerate() {
                        let mut t = tl.obj_start_s + rng.range(600, 4 * 3600);
                        let gi = crate::cluster::DRA_SHARED_CAPACITY_GI[i];
                        // Within the memory its claim consumes, of the device's.
                        let share_milli = 1000 * gi / crate::cluster::DRA_DEVICE_MEMORY_GI;
                        while t < tl.end_s {
                            let name = format!("embed-{gi}gi-{}", rng.name_suffix(5));
                            let claim = ClaimSource::Template(crate::dra::SHARED_TEMPLATES[i]);
                            let (pull, life) = (rng.range(20, 90), rng.range(2 * 3600, 16 * 3600));
                            let fb_milli = share_milli * rng.range(80, 95) as u64 / 100;
                            let end = pinned_pod(sim, tl, &mut rng, (serving, name, claim), slot, ni as u32, (t, pull, life), fb_milli);
                            t = end + rng.range(900, 4 * 3600);
                        }
                    }
                }
                Sharing::Exclusive | Sharing::TimeSliced => {}
            }
        }
    }
}

/// One pod of [`dra_sharing`], with its job and segment: a bare serving pod `name` in
/// namespace `ns` on `slot` of `node`, created at `when.0`, its image pulled in `when.1`
/// seconds, running `when.2` seconds; returns when its container ends.
#[allow(clippy::too_many_arguments)]
fn pinned_pod(sim: &mut Sim, tl: &Timeline, rng: &mut Rng, who: (usize, String, ClaimSource), slot: u32, node: u32, when: (i64, i64, i64), fb_milli: u64) -> i64 {
    let (ns, name, claim) = who;
    let (created, pull, life) = when;
    let (j, seg, pid) = (sim.jobs.len() as u32, sim.segs.len() as u32, sim.pods.len() as u32);
    let sched = created + 2;
    let started = sched + 1 + pull;
    let end = started + life;
    let finished = (end < tl.end_s).then_some((end, true));
    let mut job_rng = Rng::stream(rng.next_u64(), tag::DRA, u64::from(pid));
    let idle = idle_windows(Kind::Serve, started, end, &mut job_rng);
    let ip = format!("10.127.{}.{}", rng.range(0, 249), rng.range(2, 251));
    sim.jobs.push(Job {
        ns,
        uid: job_rng.uuid(),
        wl_uid: job_rng.uuid(),
        wl_name: format!("job-{name}-{}", job_rng.hex(5)),
        name: name.clone(),
        group: Group::Whole(PoolId::Dra),
        pool: PoolId::Dra,
        per_pod: 1,
        pods: 1,
        created_s: created,
        priority: HIGH.0,
        priority_class: HIGH.1,
        kind: Kind::Serve,
        plan: Plan::Succeed,
        backoff_limit: 0,
        image: "ghcr.io/huggingface/text-generation-inference:2.4",
        cpu: 8,
        mem_gi: 64,
        wl_v1beta1: false,
        ttl_s: None,
        job_annotations: BTreeMap::new(),
        job_end_annotations: BTreeMap::new(),
        wl_annotations: BTreeMap::new(),
        wl_team: None,
        pod_team: None,
        shape: Shape::BarePod,
        claim: Some(claim),
        segments: vec![seg],
        finished,
        deleted_s: None,
        remaining_s: life,
        queued_since: created,
        epoch: 0,
        preemptions: 0,
        rng: job_rng.clone(),
    });
    sim.segs.push(Segment {
        job: j,
        n: 1,
        queued_s: created,
        admitted_s: created,
        slots: vec![slot],
        pods: vec![pid],
        end: if end < tl.end_s { SegEnd::Succeeded(end) } else { SegEnd::Running },
        ready_s: started,
    });
    sim.pods.push(Pod {
        name,
        uid: job_rng.uuid(),
        job: j,
        seg,
        index: 0,
        node,
        slots: vec![slot],
        created_s: created,
        unschedulable: false,
        sched_s: sched,
        pull_s: pull,
        started_s: started,
        end_s: end,
        term: Term::Completed,
        crash: None,
        disruption: None,
        delete_req_s: None,
        gone_s: None,
        cancelled: false,
        idle,
        xid: None,
        team: 0,
        fb_milli,
        ip,
    });
    end
}

impl Sched<'_> {
    fn push(&mut self, t: i64, ev: Ev) {
        self.seq += 1;
        self.heap.push(Reverse((t, self.seq, ev)));
    }

    fn take_slot(&mut self, s: u32, owner: u32) {
        let slot = &self.cl.slots[s as usize];
        if self.owner[s as usize].is_none() {
            let g = slot_group(self.cl, slot).index();
            self.node_free[slot.node as usize][g] -= 1;
            self.group_free[g] -= 1;
        }
        self.owner[s as usize] = Some(owner);
    }

    fn free_slot(&mut self, s: u32) {
        if self.owner[s as usize].is_some() {
            let slot = &self.cl.slots[s as usize];
            let g = slot_group(self.cl, slot).index();
            self.node_free[slot.node as usize][g] += 1;
            self.group_free[g] += 1;
        }
        self.owner[s as usize] = None;
    }

    fn free_slots_on(&self, node: usize, g: Group) -> Vec<u32> {
        let gi = g.index();
        self.cl.nodes[node]
            .slots
            .clone()
            .filter(|&s| {
                self.owner[s].is_none() && slot_group(self.cl, &self.cl.slots[s]).index() == gi
            })
            .map(|s| s as u32)
            .collect()
    }

    /// Whether pods of `job`, admitted at `now`, may go to node `n`: not while it is cordoned or
    /// not Ready, nor just before (they start minutes after admission), and, for a job whose
    /// failed pods the Job controller replaces on the same node at any later time, not until the
    /// node is back. Running pods are left alone: a cordon only stops new ones.
    fn may_start(&self, n: usize, now: i64, job: &Job) -> bool {
        let replaces_pods = job.plan == Plan::Oom && job.backoff_limit > 0;
        !self.unavailable.iter().any(|&(m, from, to)| {
            m == n && now < to && (replaces_pods || from - START_MARGIN_S <= now)
        })
    }

    /// Best-fit placement: each pod on the node with the fewest free units that still fit it.
    fn place(&self, j: &Job, now: i64) -> Option<Vec<Vec<u32>>> {
        let gi = j.group.index();
        if (self.group_free[gi] as u64) < (j.per_pod as u64 * j.pods as u64) {
            return None;
        }
        let mut free: Vec<u32> = self.node_free.iter().map(|f| f[gi]).collect();
        let mut chosen = Vec::new();
        for _ in 0..j.pods {
            let mut best: Option<usize> = None;
            for &n in &self.cl.pool_nodes[j.pool as usize] {
                if free[n] >= j.per_pod
                    && best.is_none_or(|b| free[n] < free[b])
                    && self.may_start(n, now, j)
                {
                    best = Some(n);
                }
            }
            let n = best?;
            free[n] -= j.per_pod;
            chosen.push(n);
        }
        let mut out = Vec::new();
        let mut used: Vec<u32> = Vec::new();
        for n in chosen {
            let avail: Vec<u32> = self
                .free_slots_on(n, j.group)
                .into_iter()
                .filter(|s| !used.contains(s))
                .collect();
            let take: Vec<u32> = avail.into_iter().take(j.per_pod as usize).collect();
            used.extend(&take);
            out.push(take);
        }
        Some(out)
    }

    /// Kueue's admission cycle at `now`: priority first, then FIFO; smaller jobs may pass a
    /// blocked head, unless the head has waited two hours (then its resource drains for it).
    fn pass(&mut self, now: i64) {
        if self.pending.is_empty() {
            return;
        }
        let jobs = &self.jobs;
        self.pending.sort_by_key(|&j| {
            let job = &jobs[j as usize];
            (Reverse(job.priority), job.queued_since, j)
        });
        let mut blocked = [false; GROUPS];
        let mut i = 0;
        while i < self.pending.len() {
            let j = self.pending[i];
            let gi = self.jobs[j as usize].group.index();
            if blocked[gi] {
                i += 1;
                continue;
            }
            if let Some(slots) = self.place(&self.jobs[j as usize], now) {
                self.pending.remove(i);
                self.admit(j, now, slots);
                continue;
            }
            if self.try_preempt(j, now) {
                self.pending.remove(i);
                continue;
            }
            if now - self.jobs[j as usize].queued_since > 7200 {
                blocked[gi] = true;
            }
            i += 1;
        }
    }

    fn try_preempt(&mut self, p: u32, now: i64) -> bool {
        let pj = &self.jobs[p as usize];
        if pj.pods != 1 {
            return false;
        }
        let waited = now - pj.queued_since;
        let max_victim_prio = if pj.priority >= 1000 {
            pj.priority - 1
        } else if pj.priority >= 100 && waited >= 1800 {
            10
        } else {
            return false;
        };
        let need = pj.per_pod;
        let group = pj.group;
        let mut best: Option<(i32, Reverse<i64>, u32, usize)> = None;
        for &s in &self.active {
            let seg = &self.segs[s as usize];
            let vj = &self.jobs[seg.job as usize];
            if vj.group != group || vj.priority > max_victim_prio || vj.preemptions >= 3 {
                continue;
            }
            let mut nodes: Vec<usize> = seg
                .slots
                .iter()
                .map(|&x| self.cl.slots[x as usize].node as usize)
                .collect();
            nodes.dedup();
            for n in nodes {
                if !self.may_start(n, now, pj) {
                    continue;
                }
                let mine = seg
                    .slots
                    .iter()
                    .filter(|&&x| self.cl.slots[x as usize].node as usize == n)
                    .count() as u32;
                if mine + self.node_free[n][group.index()] >= need {
                    let key = (vj.priority, Reverse(seg.admitted_s), s, n);
                    if best.is_none_or(|b| key < b) {
                        best = Some(key);
                    }
                }
            }
        }
        let Some((_, _, victim, node)) = best else {
            return false;
        };
        // Free units on the node first, then as many of the victim's as still needed.
        let mut take = self.free_slots_on(node, group);
        take.truncate(need as usize);
        let victim_slots = self.segs[victim as usize].slots.clone();
        for &s in &victim_slots {
            if take.len() >= need as usize {
                break;
            }
            if self.cl.slots[s as usize].node as usize == node {
                take.push(s);
            }
        }
        let release: Vec<u32> = victim_slots
            .iter()
            .copied()
            .filter(|s| !take.contains(s))
            .collect();
        let vjob = self.segs[victim as usize].job;
        let same_cq =
            NAMESPACES[self.jobs[vjob as usize].ns].cq == NAMESPACES[self.jobs[p as usize].ns].cq;
        let reason = if same_cq {
            "InClusterQueue"
        } else {
            "InCohortReclamation"
        };
        let t_term = now + self.jobs[vjob as usize].rng.range(5, 30);
        self.evict(victim, now, t_term, p, reason);
        for &s in &take {
            self.take_slot(s, RESERVED);
        }
        for &s in &release {
            self.take_slot(s, RESERVED);
        }
        self.handoffs.insert(
            p,
            Handoff {
                slots: vec![take],
                release,
            },
        );
        self.push(t_term, Ev::Admit(p));
        self.push(t_term, Ev::Requeue(vjob));
        true
    }

    fn evict(&mut self, seg_id: u32, at: i64, t_term: i64, by: u32, reason: &'static str) {
        self.active.retain(|&s| s != seg_id);
        let job_id = self.segs[seg_id as usize].job;
        self.segs[seg_id as usize].end = SegEnd::Preempted {
            at,
            requeued: t_term,
            by_job: by,
            reason,
        };
        let mut progress = 0;
        let pods = self.segs[seg_id as usize].pods.clone();
        let disruption = if self.jobs[job_id as usize].rng.chance(0.5) {
            "EvictionByEvictionAPI"
        } else {
            "PreemptionByScheduler"
        };
        for p in pods {
            let pod = &mut self.pods[p as usize];
            if pod.created_s >= at {
                pod.cancelled = true;
                continue;
            }
            if pod.end_s <= at {
                continue;
            }
            // A pod whose container has not started is gone as soon as it is deleted; a running
            // one takes until its container stops (SIGTERM, exit 143).
            let gone = if pod.started_s < at {
                progress = progress.max(at - pod.started_s);
                t_term
            } else {
                pod.started_s = i64::MAX;
                at + 1
            };
            if pod.sched_s >= at {
                pod.sched_s = i64::MAX;
            }
            if pod.crash.is_some_and(|(c, r)| c >= at || r >= at) {
                pod.crash = None;
            }
            pod.disruption = Some((at, disruption));
            pod.delete_req_s = Some(at + 1);
            pod.gone_s = Some(gone);
            pod.end_s = gone;
            pod.term = Term::Killed;
        }
        let job = &mut self.jobs[job_id as usize];
        // Work since the last half-hourly checkpoint is lost.
        let kept = progress - progress % 1800;
        job.remaining_s = (job.remaining_s - kept).max(600);
        job.epoch += 1;
        job.preemptions += 1;
    }

    fn segment_end(&mut self, j: u32, epoch: u32, now: i64) {
        if self.jobs[j as usize].epoch != epoch {
            return;
        }
        let Some(&seg_id) = self.jobs[j as usize].segments.last() else {
            return;
        };
        self.active.retain(|&s| s != seg_id);
        let plan = self.jobs[j as usize].plan;
        let end = match plan {
            Plan::Succeed => SegEnd::Succeeded(now),
            Plan::Oom => SegEnd::Failed(now, FailReason::OomKilled),
            Plan::Error => SegEnd::Failed(now, FailReason::Error),
        };
        self.segs[seg_id as usize].end = end;
        for s in self.segs[seg_id as usize].slots.clone() {
            self.free_slot(s);
        }
        let job = &mut self.jobs[j as usize];
        job.finished = Some((now, plan == Plan::Succeed));
        job.deleted_s = job.ttl_s.map(|ttl| now + ttl);
        if let Some(del) = job.deleted_s {
            for &p in &self.segs[seg_id as usize].pods {
                let pod = &mut self.pods[p as usize];
                if pod.gone_s.is_none() && !pod.cancelled {
                    pod.delete_req_s = Some(del);
                    pod.gone_s = Some(del);
                }
            }
            // Pods of earlier (preempted) segments are already gone.
        }
    }

    fn admit(&mut self, j: u32, now: i64, pod_slots: Vec<Vec<u32>>) {
        let seg_id = self.segs.len() as u32;
        for slots in &pod_slots {
            for &s in slots {
                self.take_slot(s, seg_id);
            }
        }
        let job = &mut self.jobs[j as usize];
        job.segments.push(seg_id);
        let n = job.segments.len() as u32;
        let queued_s = job.queued_since;
        let remaining = job.remaining_s;
        let plan = job.plan;
        let kind = job.kind;
        let attempts = match plan {
            Plan::Oom => job.backoff_limit + 1,
            _ => 1,
        };
        let mut pod_ids = Vec::new();
        let mut seg_end = now;
        let mut ready = now;
        for (i, slots) in pod_slots.iter().enumerate() {
            let node = slots
                .first()
                .map(|&s| self.cl.slots[s as usize].node)
                .unwrap_or(0);
            let mut created = now;
            for a in 0..attempts {
                let job = &mut self.jobs[j as usize];
                let rng = &mut job.rng;
                let unschedulable = a == 0 && rng.chance(0.12);
                let sched = created
                    + if unschedulable {
                        rng.range(15, 120)
                    } else {
                        rng.range(1, 3)
                    };
                let cached = a > 0 || n > 1 || rng.chance(0.4);
                let pull = if cached {
                    rng.range(1, 4)
                } else {
                    rng.range(20, 240)
                };
                let started = sched + 1 + pull;
                let (end, term, crash) = match plan {
                    Plan::Succeed => (
                        started + remaining + rng.range(0, 20),
                        Term::Completed,
                        None,
                    ),
                    Plan::Oom => {
                        let run = ((remaining as f64) * rng.uniform(0.05, 0.6)) as i64;
                        (started + run.max(120), Term::OomKilled, None)
                    }
                    Plan::Error => {
                        let first = ((remaining as f64) * rng.uniform(0.05, 0.4)) as i64;
                        let crash = started + first.max(60);
                        let restart = crash + rng.range(10, 40);
                        let second = ((remaining as f64) * rng.uniform(0.05, 0.4)) as i64;
                        (
                            restart + second.max(60),
                            Term::Error,
                            Some((crash, restart)),
                        )
                    }
                };
                let idle = idle_windows(kind, started, end, rng);
                let fb_milli = match kind {
                    Kind::Train | Kind::BatchInfer => rng.range(650, 950),
                    Kind::Serve => rng.range(550, 900),
                    Kind::Debug => rng.range(150, 700),
                    Kind::Notebook => rng.range(50, 450),
                } as u64;
                let suffix = rng.name_suffix(5);
                let pod_name = match job.shape {
                    // Stable names: a retry or a readmission reuses them.
                    Shape::BarePod => job.name.clone(),
                    Shape::PyTorchJob if i == 0 => format!("{}-master-0", job.name),
                    Shape::PyTorchJob => format!("{}-worker-{}", job.name, i - 1),
                    Shape::TrainJob => format!("{}-node-0-{}-{}", job.name, i, suffix),
                    // Fields, not the whole job: `rng` borrows the job's generator.
                    Shape::RayJob if i == 0 => format!("{}-raycluster-{}-head-{}", job.name, &job.uid[..5], suffix),
                    Shape::RayJob => format!("{}-raycluster-{}-worker-{}", job.name, &job.uid[..5], suffix),
                    _ if job.pods > 1 => format!("{}-{}-{}", job.name, i, suffix),
                    _ => format!("{}-{}", job.name, suffix),
                };
                let uid = rng.uuid();
                self.ip_counter += 1;
                let ip = format!(
                    "10.{}.{}.{}",
                    64 + (self.ip_counter / 62_500) % 64,
                    (self.ip_counter / 250) % 250,
                    self.ip_counter % 250 + 2
                );
                let pid = self.pods.len() as u32;
                self.pods.push(Pod {
                    name: pod_name,
                    uid,
                    job: j,
                    seg: seg_id,
                    index: i as u32,
                    node,
                    slots: slots.clone(),
                    created_s: created,
                    unschedulable,
                    sched_s: sched,
                    pull_s: pull,
                    started_s: started,
                    end_s: end,
                    term,
                    crash,
                    disruption: None,
                    delete_req_s: None,
                    gone_s: None,
                    cancelled: false,
                    idle,
                    xid: None,
                    team: 0,
                    fb_milli,
                    ip,
                });
                pod_ids.push(pid);
                if a == 0 {
                    ready = ready.max(started);
                }
                seg_end = seg_end.max(end);
                // The Job controller replaces a failed pod at once.
                created = end;
            }
        }
        let all_slots: Vec<u32> = pod_slots.into_iter().flatten().collect();
        self.segs.push(Segment {
            job: j,
            n,
            queued_s,
            admitted_s: now,
            slots: all_slots,
            pods: pod_ids,
            end: SegEnd::Running,
            ready_s: ready,
        });
        self.active.push(seg_id);
        let epoch = self.jobs[j as usize].epoch;
        self.push(seg_end, Ev::SegEnd(j, epoch));
    }
}

/// Idle stretches of a pod between `started` and `end` (seconds), returned in ms.
fn idle_windows(kind: Kind, started: i64, end: i64, rng: &mut Rng) -> Vec<(i64, i64)> {
    let mut out: Vec<(i64, i64)> = Vec::new();
    let add = |a: i64, b: i64, out: &mut Vec<(i64, i64)>| {
        let (a, b) = (a.max(started), b.min(end));
        if b > a {
            out.push((a * 1000, b * 1000));
        }
    };
    match kind {
        Kind::Train | Kind::BatchInfer => {
            // Data loading and compilation before the first step.
            let load = rng.range(120, if kind == Kind::Train { 720 } else { 300 });
            add(started, started + load, &mut out);
            let mut t = started + load;
            loop {
                t += rng.range(45 * 60, 120 * 60);
                if t >= end {
                    break;
                }
                let len = rng.range(120, 600);
                add(t, t + len, &mut out);
                t += len;
            }
        }
        Kind::Debug | Kind::Notebook => {
            let (idle_mean, active_mean) = if kind == Kind::Debug {
                (35.0 * 60.0, 10.0 * 60.0)
            } else {
                (45.0 * 60.0, 6.0 * 60.0)
            };
            let mut t = started;
            while t < end {
                let idle = rng.exp(idle_mean).clamp(600.0, 7200.0) as i64;
                add(t, t + idle, &mut out);
                t += idle;
                t += rng.exp(active_mean).clamp(120.0, 1800.0) as i64;
            }
        }
        Kind::Serve => {
            add(started, started + rng.range(60, 300), &mut out);
            // Night-time traffic is too thin to keep the GPU busy.
            let mut day = started.div_euclid(86_400) * 86_400;
            while day < end {
                let a = day + 3600 + rng.range(0, 1800);
                add(a, day + 5 * 3600 + rng.range(0, 1800), &mut out);
                let n = rng.range(0, 2);
                for _ in 0..n {
                    let a = day + rng.range(7 * 3600, 22 * 3600);
                    add(a, a + rng.range(300, 1800), &mut out);
                }
                day += 86_400;
            }
        }
    }
    out.sort();
    // Merge overlaps so that lookups can walk the list once.
    let mut merged: Vec<(i64, i64)> = Vec::with_capacity(out.len());
    for (a, b) in out {
        match merged.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => merged.push((a, b)),
        }
    }
    merged
}

/// Teams per pod, and XID errors on a few GPUs shortly before their run failed.
fn finish(seed: u64, cl: &Cluster, tl: &Timeline, sim: &mut Sim) {
    for p in 0..sim.pods.len() {
        let team = run_team(&sim.jobs[sim.pods[p].job as usize]);
        sim.pods[p].team = sim.team_index(team);
    }
    // Every other debug or notebook job that ran one pod once is a Kueue plain pod: its
    // Workload, `pod-<pod>-<uid prefix>`, is owned by the pod (Kueue does not recreate plain
    // pods, so only jobs without a second pod or segment can be one).
    let mut plain = 0;
    for j in 0..sim.jobs.len() {
        let job = &sim.jobs[j];
        // The runaway notebook stays a batch/v1 Job: the truth names its Workload.
        if !matches!(job.kind, Kind::Debug | Kind::Notebook) || job.segments.len() != 1 || job.shape != Shape::Batch || job.name.starts_with(RUNAWAY_NOTEBOOK) {
            continue;
        }
        let pods: Vec<u32> = sim.segs[job.segments[0] as usize].pods.iter().copied().filter(|&p| !sim.pods[p as usize].cancelled).collect();
        if pods.len() != 1 {
            continue;
        }
        plain += 1;
        if plain % 2 == 1 {
            let pod = &sim.pods[pods[0] as usize];
            let wl_name = format!("pod-{}-{}", pod.name, &pod.uid[..5]);
            let job = &mut sim.jobs[j];
            job.shape = Shape::PlainPod;
            job.wl_name = wl_name;
        }
    }
    let mut rng = Rng::stream(seed, tag::PICK, 0);
    // Not on DRA GPUs: counted and drawn as before that pool existed.
    let dra = |p: &Pod| cl.nodes[p.node as usize].pool == PoolId::Dra;
    let wanted = 3 + cl.nodes.iter().filter(|n| n.pool != PoolId::Dra).count() / 40;
    let mut candidates: Vec<u32> = sim
        .pods
        .iter()
        .enumerate()
        .filter(|(_, p)| {
            // Room for the error's samples between container start, metrics start and failure.
            let room = 6 * tl.interval_ms;
            p.term == Term::Error
                && !dra(p)
                && !p.cancelled
                && p.end_s < tl.end_s
                && p.end_s * 1000 > tl.start_ms() + room
                && p.started_s != i64::MAX
                && p.started_s * 1000 < p.end_s * 1000 - room
                && matches!(sim.segs[p.seg as usize].end, SegEnd::Failed(..))
        })
        .map(|(i, _)| i as u32)
        .collect();
    let mut taken = 0;
    while taken < wanted && !candidates.is_empty() {
        let i = rng.range(0, candidates.len() as i64 - 1) as usize;
        let p = candidates.swap_remove(i);
        let pod = &mut sim.pods[p as usize];
        let samples = rng.range(3, 5);
        // 79 (fallen off the bus) and 48 (double-bit ECC) are hardware faults the platform pays
        // for; 13 (graphics engine exception) is the program's own.
        let code = [79, 13, 48][taken % 3];
        let to = pod.end_s * 1000;
        let from = to - samples * tl.interval_ms;
        if let Some(&slot) = pod.slots.first() {
            pod.xid = Some((slot, from, to, code));
            taken += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_windows_are_sorted_disjoint_and_inside_the_run() {
        let mut rng = Rng::new(1);
        for kind in [
            Kind::Train,
            Kind::Debug,
            Kind::Serve,
            Kind::BatchInfer,
            Kind::Notebook,
        ] {
            let w = idle_windows(kind, 1_000_000, 1_100_000, &mut rng);
            assert!(!w.is_empty(), "{kind:?} has no idle stretch");
            for pair in w.windows(2) {
                assert!(pair[0].1 < pair[1].0);
            }
            assert!(
                w.iter()
                    .all(|&(a, b)| a >= 1_000_000_000 && b <= 1_100_000_000 && a < b)
            );
        }
    }

    fn one_day() -> Timeline {
        Timeline {
            start_s: 1_000_000,
            end_s: 1_086_400,
            obj_start_s: 950_000,
            interval_ms: 60_000,
            scrapes: 1440,
        }
    }

    /// A cordon (and a NotReady stretch) stops new pods, not running ones: no pod of the node
    /// is created, bound or started inside it, and pods that were running go on into it.
    #[test]
    fn no_pod_starts_on_a_node_while_it_is_cordoned() {
        let tl = one_day();
        for seed in 1..=4 {
            let cl = crate::cluster::build(seed, &tl, 24);
            let cordoned: Vec<usize> = (0..cl.nodes.len()).filter(|&n| cl.nodes[n].cordoned.is_some()).collect();
            assert_eq!(cordoned.len(), 1, "seed {seed}");
            assert_ne!(cordoned[0], 0, "node 0 has the NotReady outage");
            let sim = run(seed, &cl, &tl);
            let mut carried_on = 0;
            for (n, node) in cl.nodes.iter().enumerate() {
                for (from, to) in node.unavailable_windows() {
                    assert!(tl.start_s < from && to < tl.end_s);
                    for pod in sim.pods.iter().filter(|p| p.node as usize == n && !p.cancelled) {
                        for t in [pod.created_s, pod.sched_s, pod.started_s] {
                            assert!(!(from..to).contains(&t), "seed {seed}: {} on {} at {t} in [{from}, {to})", pod.name, node.name);
                        }
                        if pod.started_s < from && pod.end_s > from {
                            carried_on += 1;
                        }
                    }
                }
            }
            assert!(carried_on > 0, "seed {seed}: no pod ran on into a cordon");
        }
    }

    /// Every capture of a day has a Workload that waits for hours because it can never fit.
    #[test]
    fn a_workload_too_big_for_the_cluster_waits_until_deleted() {
        let tl = one_day();
        let cl = crate::cluster::build(2, &tl, 24);
        let sim = run(2, &cl, &tl);
        let big: Vec<&Job> = sim.jobs.iter().filter(|j| !admissible(&cl, j)).collect();
        assert_eq!(big.len(), 1);
        let j = big[0];
        assert!(j.segments.is_empty() && j.finished.is_none());
        assert_eq!(j.group, Group::Whole(PoolId::H100));
        let wait = j.deleted_s.unwrap() - j.created_s;
        assert!(j.created_s >= tl.start_s && (4 * 3600..=8 * 3600).contains(&wait));
    }

    #[test]
    fn workload_annotation_wins_over_job() {
        let tl = Timeline {
            start_s: 1_000_000,
            end_s: 1_086_400,
            obj_start_s: 950_000,
            interval_ms: 60_000,
            scrapes: 1440,
        };
        let cl = crate::cluster::build(1, &tl, 24);
        let jobs = generate_jobs(3, &cl, &tl);
        let both = jobs
            .iter()
            .find(|j| {
                j.wl_annotations.contains_key("gpuledger.io/accepted-units")
                    && j.job_annotations
                        .contains_key("gpuledger.io/accepted-units")
            })
            .expect("a job annotated twice");
        let (count, unit) = accepted_units(both);
        assert_eq!(unit, "1k-images");
        assert_eq!(
            count,
            both.wl_annotations["gpuledger.io/accepted-units"]
                .parse::<f64>()
                .unwrap()
        );
        let plain = jobs
            .iter()
            .find(|j| j.name.starts_with("exp-"))
            .expect("an experiment");
        assert_eq!(accepted_units(plain), (1.0, "run".to_string()));
    }
}
