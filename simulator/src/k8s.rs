//! Kubernetes and Kueue objects as kubectl writes them, derived from the simulation records.
//!
//! Snapshots (`namespaces.yaml`, `nodes.json`, `kueue.yaml`) are taken when the object capture
//! starts; Workloads, Jobs, Pods and later Node changes are watch-event streams with one version
//! per transition, in time order; Events are a core/v1 List and an events.k8s.io/v1 stream that never repeat each
//! other. In every version the latest timestamp is the time of the change it records, because
//! readers take it as the observation time. Nothing at or after the end of the capture is written.
//!
//! With a [`Window`], a watch event or Event is written only when its time lies in it; every
//! object and Event is still built, numbered and drawn for, so each line written is the one
//! the whole capture has. Snapshots are written whole whatever the window (as of the capture's
//! start, not the window's): both halves of a split capture then carry the same snapshot, which
//! a store that already holds it does not store twice.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::path::Path;

use serde::ser::{Error as _, SerializeMap, Serializer};
use serde::Serialize;
use serde_json::{Value, json};

use crate::cluster::{
    CLUSTER_QUEUES, COHORT, Cluster, LOCAL_QUEUE, MigProfile, NAMESPACES, NodeChange, PoolId,
    Sharing, Timeline, tag,
};
use crate::dra::{self, Claims};
use crate::error::{Result, SimError};
use crate::out::{rfc3339, rfc3339_micros, write_atomic};
use crate::rng::Rng;
use crate::window::Window;
use crate::schedule::{ClaimSource, FailReason, Group, Job, Kind, Plan, Pod, SegEnd, Shape, Sim, Term, ray_cluster_name, slot_group};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stream {
    Workloads,
    Jobs,
    Pods,
    Nodes,
    Claims,
}

impl Stream {
    /// In the order the files are written; `stream as usize` indexes it.
    const ALL: [Stream; 5] = [Stream::Workloads, Stream::Jobs, Stream::Pods, Stream::Nodes, Stream::Claims];

    fn file(self) -> &'static str {
        match self {
            Stream::Workloads => "workloads.watch.json",
            // The jobs stream holds Jobs, JobSets, TrainJobs, PyTorchJobs, RayJobs and RayClusters.
            Stream::Jobs => "jobs.watch.jsonl",
            Stream::Pods => "pods.watch.jsonl",
            Stream::Nodes => "nodes.watch.jsonl",
            Stream::Claims => "resourceclaims.watch.jsonl",
        }
    }
}

/// Where one serialised watch event lies in its stream's spill file.
#[derive(Debug, Clone, Copy)]
struct Spilled {
    t: i64,
    seq: u64,
    offset: u64,
    len: u64,
}

/// One stream's watch events, serialised as they are emitted (in job order, not time order)
/// into an anonymous temporary file, with only their places kept in memory: a month of a large
/// fleet is gigabytes of events, which must not all be held at once. [`Spill::copy_sorted`]
/// writes them out in (t, seq) order. The file has no name (removed by the OS when dropped,
/// whether the run succeeds or not).
struct Spill {
    file: BufWriter<File>,
    end: u64,
    index: Vec<Spilled>,
}

impl Spill {
    /// A spill file in `dir` (beside the output, so on the same disk).
    fn new(dir: &Path) -> std::io::Result<Spill> {
        Ok(Spill {
            file: BufWriter::with_capacity(1 << 20, tempfile::tempfile_in(dir)?),
            end: 0,
            index: Vec::new(),
        })
    }

    fn push(&mut self, t: i64, seq: u64, bytes: &[u8]) -> std::io::Result<()> {
        self.file.write_all(bytes)?;
        let len = bytes.len() as u64;
        self.index.push(Spilled {
            t,
            seq,
            offset: self.end,
            len,
        });
        self.end += len;
        Ok(())
    }

    /// Writes every event to `out` in (t, seq) order, reading each run of events that lie one
    /// after the other in the file at once; returns how many there were.
    fn copy_sorted(self, out: &mut impl Write) -> std::io::Result<usize> {
        let Spill { file, mut index, .. } = self;
        let mut file = file.into_inner().map_err(|e| e.into_error())?;
        index.sort_unstable_by_key(|s| (s.t, s.seq));
        let mut pos = file.stream_position()?;
        let mut copy = |file: &mut File, start: u64, end: u64| -> std::io::Result<()> {
            if start != pos {
                file.seek(SeekFrom::Start(start))?;
            }
            let n = std::io::copy(&mut Read::by_ref(file).take(end - start), out)?;
            if n != end - start {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "a spill file is shorter than what was written to it",
                ));
            }
            pos = end;
            Ok(())
        };
        let (mut start, mut end) = (0, 0);
        for s in &index {
            if s.offset != end {
                if end > start {
                    copy(&mut file, start, end)?;
                }
                start = s.offset;
                end = s.offset;
            }
            end += s.len;
        }
        if end > start {
            copy(&mut file, start, end)?;
        }
        Ok(index.len())
    }
}

#[derive(Serialize)]
struct WatchEvent<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    object: &'a Value,
}

struct EventRec {
    t: i64,
    seq: u64,
    /// events.k8s.io/v1 (else core/v1).
    v1: bool,
    namespace: String,
    kind: &'static str,
    api_version: &'static str,
    name: String,
    uid: String,
    field_path: Option<&'static str>,
    reason: &'static str,
    message: String,
    warning: bool,
    component: &'static str,
    host: Option<String>,
    count: u64,
    last_t: i64,
}

/// Counts of what was written, for the summary and `expected.json`.
#[derive(Debug, Default)]
pub struct Written {
    pub files: u64,
    pub bytes: u64,
    /// Object versions of the whole period by kind, written or not (for `expected.json`).
    pub objects_by_kind: BTreeMap<String, u64>,
    /// Object versions written (inside the window).
    pub objects: u64,
}

impl Written {
    /// One version of `kind`, written.
    fn count(&mut self, kind: &str) {
        self.count_unwritten(kind);
        self.objects += 1;
    }

    /// One version of `kind` the window leaves out.
    fn count_unwritten(&mut self, kind: &str) {
        *self.objects_by_kind.entry(kind.to_string()).or_insert(0) += 1;
    }
}

struct Emitter<'a> {
    cl: &'a Cluster,
    tl: &'a Timeline,
    sim: &'a Sim,
    claims: &'a Claims,
    /// Each stream's watch events, by `Stream as usize`.
    spills: Vec<Spill>,
    /// How many versions of each kind were emitted, for `expected.json`.
    kinds: BTreeMap<String, u64>,
    /// Which versions are written, and how many were.
    window: Window,
    written: u64,
    /// A reused buffer for serialising one watch event.
    scratch: Vec<u8>,
    events: Vec<EventRec>,
    seq: u64,
    rng: Rng,
    /// The first serialisation failure, reported once emission is done.
    error: Option<SimError>,
    dir: std::path::PathBuf,
}

/// resourceVersion of the change at (`t`, `seq`): increasing in the order changes happened, as
/// etcd revisions are (opaque to readers, but a plausible number).
fn resource_version(tl: &Timeline, t: i64, seq: u64) -> u64 {
    (t - tl.obj_start_s).max(0) as u64 * 100_000_000 + seq % 100_000_000
}

/// An ownerReference to a controller.
fn owner_ref(api: &str, kind: &str, name: &str, uid: &str) -> Value {
    json!({ "apiVersion": api, "kind": kind, "name": name, "uid": uid, "controller": true, "blockOwnerDeletion": true })
}

/// A uid derived from another, for the objects between a job's top and its pods.
fn derived_uid(uid: &str, n: u16) -> String {
    format!("{}{n:04x}", &uid[..uid.len().saturating_sub(4)])
}

/// The object that owns a job's Workload and carries its annotations: (apiVersion, kind).
fn top_kind(shape: Shape) -> (&'static str, &'static str) {
    match shape {
        Shape::Batch | Shape::PlainPod | Shape::BarePod => ("batch/v1", "Job"),
        Shape::TrainJob => ("trainer.kubeflow.org/v1alpha1", "TrainJob"),
        Shape::PyTorchJob => ("kubeflow.org/v1", "PyTorchJob"),
        Shape::RayJob => ("ray.io/v1", "RayJob"),
    }
}

/// What owns a job's Workload: its top object, or for a plain pod the pod itself.
fn workload_owner(sim: &Sim, job: &Job) -> Value {
    if job.shape == Shape::PlainPod {
        let pod = job
            .segments
            .first()
            .and_then(|&s| sim.segs[s as usize].pods.iter().map(|&p| &sim.pods[p as usize]).find(|p| !p.cancelled));
        if let Some(pod) = pod {
            return owner_ref("v1", "Pod", &pod.name, &pod.uid);
        }
    }
    let (api, kind) = top_kind(job.shape);
    owner_ref(api, kind, &job.name, &job.uid)
}

/// The batch/v1 Job a TrainJob's JobSet runs: (name, uid).
fn trainjob_inner_job(job: &Job) -> (String, String) {
    (format!("{}-node-0", job.name), derived_uid(&job.uid, 2))
}

fn cond(kind: &str, status: bool, at: i64, reason: &str, message: &str) -> Value {
    let mut c = json!({
        "type": kind,
        "status": if status { "True" } else { "False" },
        "lastTransitionTime": rfc3339(at),
    });
    if !reason.is_empty() {
        c["reason"] = json!(reason);
    }
    if !message.is_empty() {
        c["message"] = json!(message);
    }
    c
}

/// Sets a condition the way apimeta.SetStatusCondition does: the transition time only moves
/// when the status changes.
fn set_cond(list: &mut Vec<Value>, kind: &str, status: bool, at: i64, reason: &str, message: &str) {
    let new = cond(kind, status, at, reason, message);
    match list.iter_mut().find(|c| c["type"] == kind) {
        Some(old) => {
            let same = old["status"] == new["status"];
            let ltt = old["lastTransitionTime"].clone();
            let probe = old.get("lastProbeTime").cloned();
            *old = new;
            if same {
                old["lastTransitionTime"] = ltt;
            }
            if let Some(p) = probe {
                old["lastProbeTime"] = p;
            }
        }
        None => list.push(new),
    }
}

fn pod_cond(kind: &str, status: bool, at: i64, reason: &str, message: &str) -> Value {
    let mut c = cond(kind, status, at, reason, message);
    c["lastProbeTime"] = Value::Null;
    c
}

fn set_pod_cond(
    list: &mut Vec<Value>,
    kind: &str,
    status: bool,
    at: i64,
    reason: &str,
    message: &str,
) {
    if !list.iter().any(|c| c["type"] == kind) {
        list.push(pod_cond(kind, status, at, reason, message));
    } else {
        set_cond(list, kind, status, at, reason, message);
    }
}

fn flavor_of(group: Group) -> &'static str {
    match group {
        Group::Whole(p) => p.spec().name,
        Group::Mig(_) => PoolId::A100Mig.spec().name,
    }
}

fn image_repo(image: &str) -> &str {
    image.split(':').next().unwrap_or(image)
}

fn resources(job: &Job) -> Value {
    // A DRA pod's container names its claim instead of asking for a device plugin's resource.
    if job.claim.is_some() {
        return json!({
            "limits": { "memory": format!("{}Gi", job.mem_gi) },
            "requests": { "cpu": job.cpu.to_string(), "memory": format!("{}Gi", job.mem_gi) },
            "claims": [{ "name": dra::POD_CLAIM }],
        });
    }
    let units = job.per_pod.to_string();
    let res = job.group.resource();
    json!({
        "limits": { res: units, "memory": format!("{}Gi", job.mem_gi) },
        "requests": { res: units, "cpu": job.cpu.to_string(), "memory": format!("{}Gi", job.mem_gi) },
    })
}

/// A DRA pod's `spec.resourceClaims`.
fn pod_resource_claims(source: &ClaimSource) -> Value {
    match source {
        ClaimSource::Template(t) => json!([{ "name": dra::POD_CLAIM, "resourceClaimTemplateName": t }]),
        ClaimSource::Named(n) => json!([{ "name": dra::POD_CLAIM, "resourceClaimName": n }]),
    }
}

fn command(job: &Job) -> Value {
    match job.kind {
        Kind::Train => json!([
            "torchrun",
            "--nproc-per-node=gpu",
            "train.py",
            "--config",
            "/etc/run/config.yaml"
        ]),
        Kind::Debug => json!(["sleep", "infinity"]),
        Kind::Serve => json!(["python3", "-m", "server", "--port", "8000"]),
        Kind::BatchInfer => json!([
            "python3",
            "batch_infer.py",
            "--input",
            "s3://datasets/incoming"
        ]),
        Kind::Notebook => json!(["start-notebook.py", "--IdentityProvider.token=''"]),
    }
}

fn restart_policy(job: &Job) -> &'static str {
    if job.plan == Plan::Error {
        "OnFailure"
    } else {
        "Never"
    }
}

fn pod_template_spec(job: &Job) -> Value {
    let mut spec = json!({
        "containers": [{
            "name": "main",
            "image": job.image,
            "command": command(job),
            "resources": resources(job),
            "imagePullPolicy": "IfNotPresent",
            "terminationMessagePath": "/dev/termination-log",
            "terminationMessagePolicy": "File",
        }],
        "nodeSelector": { "gpuledger.io/pool": job.pool.spec().name },
        "tolerations": [{ "key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule" }],
        "restartPolicy": restart_policy(job),
        "schedulerName": "default-scheduler",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "securityContext": {},
    });
    if let Some(source) = &job.claim {
        spec["resourceClaims"] = pod_resource_claims(source);
    }
    spec
}

fn pending_message(cl: &Cluster, job: &Job) -> String {
    let (asked, capacity) = (job.per_pod * job.pods, crate::schedule::capacity(cl, job.group));
    if asked as usize > capacity {
        return format!(
            "couldn't assign flavors to pod set main: insufficient quota for {} in flavor {}, request > maximum capacity ({asked} > {capacity})",
            job.group.resource(),
            flavor_of(job.group),
        );
    }
    format!(
        "couldn't assign flavors to pod set main: insufficient unused quota for {} in flavor {}, {} more needed",
        job.group.resource(),
        flavor_of(job.group),
        job.per_pod * job.pods
    )
}

fn preempt_message(sim: &Sim, by: u32, reason: &str) -> String {
    let p = &sim.jobs[by as usize];
    let why = if reason == "InClusterQueue" {
        "due to prioritization in the ClusterQueue"
    } else {
        "due to reclamation within the cohort"
    };
    format!(
        "Preempted to accommodate a workload (UID: {}, JobUID: {}) {}",
        p.wl_uid, p.uid, why
    )
}

impl<'a> Emitter<'a> {
    fn push(&mut self, t: i64, stream: Stream, event: &'static str, obj: &mut Value) {
        if t >= self.tl.end_s || t < self.tl.obj_start_s {
            return;
        }
        self.seq += 1;
        obj["metadata"]["resourceVersion"] =
            json!(resource_version(self.tl, t, self.seq).to_string());
        let kind = obj["kind"].as_str().unwrap_or_default();
        match self.kinds.get_mut(kind) {
            Some(n) => *n += 1,
            None => {
                self.kinds.insert(kind.to_string(), 1);
            }
        }
        // Numbered and counted above whatever the window, so that what is written is numbered
        // as in the whole capture.
        if !self.window.contains_s(t) {
            return;
        }
        self.written += 1;
        let ev = WatchEvent {
            kind: event,
            object: obj,
        };
        let mut bytes = std::mem::take(&mut self.scratch);
        bytes.clear();
        let res = match stream {
            Stream::Workloads => pretty(&ev, &mut bytes),
            Stream::Jobs | Stream::Pods | Stream::Nodes | Stream::Claims => serde_json::to_writer(&mut bytes, &ev),
        };
        bytes.push(b'\n');
        if let Err(e) = res {
            self.error.get_or_insert(SimError::Serialize {
                path: self.dir.join(stream.file()),
                what: "watch event".to_string(),
                reason: e.to_string(),
            });
        }
        if self.error.is_none()
            && let Err(e) = self.spills[stream as usize].push(t, self.seq, &bytes)
        {
            self.error = Some(SimError::io(self.dir.join(stream.file()), e));
        }
        self.scratch = bytes;
    }

    /// An event the kubelet on `node` records about a pod (`(namespace, name, uid)`).
    fn kubelet_event(&mut self, t: i64, pod: (&str, &str, &str), node: &str, reason: &'static str, message: String, warning: bool) {
        let (ns, name, uid) = pod;
        self.event(t, ("Pod", "v1", ns, name, uid), reason, message, warning, "kubelet", Some(node), None);
    }

    #[allow(clippy::too_many_arguments)]
    /// Records an Event. Node-level facts go to the core/v1 List (node-controller, kubelet and
    /// node-problem-detector report through it); events about Pods, Jobs and Workloads go to
    /// one file or the other by their object, so that both formats carry every kind of fact and
    /// no event is in both.
    fn event(
        &mut self,
        t: i64,
        regarding: (&'static str, &'static str, &str, &str, &str),
        reason: &'static str,
        message: String,
        warning: bool,
        component: &'static str,
        host: Option<&str>,
        series: Option<(u64, i64)>,
    ) {
        if t >= self.tl.end_s || t < self.tl.obj_start_s {
            return;
        }
        let (kind, api_version, namespace, name, uid) = regarding;
        let v1 = kind != "Node" && uid.bytes().last().is_some_and(|b| b % 2 == 1);
        let (count, last_t) = match series {
            Some((c, last)) if last > t => {
                let last = last.min(self.tl.end_s - 1);
                (c.max(2), last)
            }
            _ => (1, t),
        };
        self.seq += 1;
        self.events.push(EventRec {
            t,
            seq: self.seq,
            v1,
            namespace: namespace.to_string(),
            kind,
            api_version,
            name: name.to_string(),
            uid: uid.to_string(),
            field_path: if kind == "Pod"
                && matches!(
                    reason,
                    "Pulling" | "Pulled" | "Created" | "Started" | "Killing" | "BackOff"
                ) {
                Some("spec.containers{main}")
            } else {
                None
            },
            reason,
            message,
            warning,
            component,
            host: host.map(str::to_string),
            count,
            last_t,
        });
    }

    fn container_id(&mut self) -> String {
        format!("containerd://{}", self.rng.hex(64))
    }

    fn emit_pod(&mut self, pid: usize) {
        let sim = self.sim;
        let pod: &Pod = &sim.pods[pid];
        if pod.cancelled {
            return;
        }
        let job = &sim.jobs[pod.job as usize];
        let ns = NAMESPACES[job.ns].name;
        let node = &self.cl.nodes[pod.node as usize];
        let mut labels = json!({
            "batch.kubernetes.io/controller-uid": job.uid,
            "batch.kubernetes.io/job-name": job.name,
            "controller-uid": job.uid,
            "job-name": job.name,
        });
        if let Some(team) = job.pod_team {
            labels["team"] = json!(team);
        }
        let mut annotations = serde_json::Map::new();
        if job.pods > 1 {
            labels["batch.kubernetes.io/job-completion-index"] = json!(pod.index.to_string());
            annotations.insert(
                "batch.kubernetes.io/job-completion-index".to_string(),
                json!(pod.index.to_string()),
            );
        }
        let mut spec = pod_template_spec(job);
        spec["serviceAccountName"] = json!("default");
        spec["priorityClassName"] = json!(job.priority_class);
        spec["priority"] = json!(job.priority);
        let mut o = json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": pod.name,
                "generateName": format!("{}-", job.name),
                "namespace": ns,
                "uid": pod.uid,
                "creationTimestamp": rfc3339(pod.created_s),
                "labels": labels,
                "ownerReferences": [{
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": job.name,
                    "uid": job.uid,
                    "controller": true,
                    "blockOwnerDeletion": true,
                }],
                "finalizers": ["batch.kubernetes.io/job-tracking"],
            },
            "spec": spec,
            "status": { "phase": "Pending", "qosClass": "Burstable" },
        });
        if !annotations.is_empty() {
            o["metadata"]["annotations"] = Value::Object(annotations);
        }
        // Who owns the pod, by the job's shape.
        let meta = &mut o["metadata"];
        match job.shape {
            Shape::Batch => {}
            Shape::TrainJob => {
                let (name, uid) = trainjob_inner_job(job);
                meta["ownerReferences"] = json!([owner_ref("batch/v1", "Job", &name, &uid)]);
                meta["labels"] = json!({ "batch.kubernetes.io/job-name": name, "jobset.sigs.k8s.io/jobset-name": job.name });
            }
            Shape::PyTorchJob => {
                meta["ownerReferences"] = json!([owner_ref("kubeflow.org/v1", "PyTorchJob", &job.name, &job.uid)]);
                meta["labels"] = json!({ "training.kubeflow.org/job-name": job.name, "training.kubeflow.org/replica-index": pod.index.saturating_sub(1).to_string(),
                                          "training.kubeflow.org/replica-type": if pod.index == 0 { "master" } else { "worker" } });
                if let Some(m) = meta.as_object_mut() {
                    m.remove("generateName");
                    m.remove("finalizers");
                }
            }
            Shape::RayJob => {
                let cluster = ray_cluster_name(job);
                meta["ownerReferences"] = json!([owner_ref("ray.io/v1", "RayCluster", &cluster, &derived_uid(&job.uid, 3))]);
                meta["labels"] = json!({ "ray.io/cluster": cluster, "ray.io/node-type": if pod.index == 0 { "head" } else { "worker" } });
                meta["finalizers"] = json!([]);
            }
            Shape::BarePod => {
                if let Some(m) = meta.as_object_mut() {
                    m.remove("ownerReferences");
                    m.remove("generateName");
                    m.remove("finalizers");
                }
                meta["labels"] = json!({ "app": job.name });
            }
            Shape::PlainPod => {
                if let Some(m) = meta.as_object_mut() {
                    m.remove("ownerReferences");
                    m.remove("generateName");
                }
                meta["labels"] = json!({ "kueue.x-k8s.io/queue-name": LOCAL_QUEUE, "kueue.x-k8s.io/managed": "true" });
                meta["finalizers"] = json!(["kueue.x-k8s.io/managed"]);
            }
        }
        if let (Some(team), Shape::TrainJob | Shape::PyTorchJob | Shape::RayJob | Shape::PlainPod | Shape::BarePod) = (job.pod_team, job.shape) {
            o["metadata"]["labels"]["team"] = json!(team);
        }
        let mut conds: Vec<Value> = Vec::new();
        let nodes_total = self.cl.nodes.len();
        if pod.unschedulable {
            let in_pool = self.cl.pool_nodes[job.pool as usize].len();
            let why = if job.claim.is_some() { "cannot allocate all claims".to_string() } else { format!("Insufficient {}", job.group.resource()) };
            let msg = format!(
                "0/{nodes_total} nodes are available: {in_pool} {why}, {} node(s) didn't match Pod's node affinity/selector. preemption: 0/{nodes_total} nodes are available: {in_pool} No preemption victims found for incoming pod.",
                nodes_total - in_pool,
            );
            conds.push(pod_cond(
                "PodScheduled",
                false,
                pod.created_s,
                "Unschedulable",
                &msg,
            ));
            o["status"]["conditions"] = json!(conds);
            let last = if pod.sched_s == i64::MAX {
                pod.end_s
            } else {
                pod.sched_s - 1
            };
            let count = (1 + (last - pod.created_s) / 20) as u64;
            self.event(
                pod.created_s,
                ("Pod", "v1", ns, &pod.name, &pod.uid),
                "FailedScheduling",
                msg,
                true,
                "default-scheduler",
                None,
                Some((count, last)),
            );
        }
        // The resourceclaim controller names the claim it made for the pod from its template.
        if let Some(c) = self.claims.of(pid as u32).filter(|c| c.template.is_some()) {
            o["status"]["resourceClaimStatuses"] = json!([{ "name": dra::POD_CLAIM, "resourceClaimName": c.name }]);
        }
        self.push(pod.created_s, Stream::Pods, "ADDED", &mut o);
        let img = job.image;
        let mut restarts = 0;
        let mut last_state = json!({});
        let mut run_start = pod.started_s;
        let mut cid = String::new();
        if pod.sched_s != i64::MAX {
            o["spec"]["nodeName"] = json!(node.name);
            set_pod_cond(&mut conds, "PodScheduled", true, pod.sched_s, "", "");
            o["status"]["conditions"] = json!(conds);
            self.push(pod.sched_s, Stream::Pods, "MODIFIED", &mut o);
            self.event(
                pod.sched_s,
                ("Pod", "v1", ns, &pod.name, &pod.uid),
                "Scheduled",
                format!("Successfully assigned {ns}/{} to {}", pod.name, node.name),
                false,
                "default-scheduler",
                None,
                None,
            );
        }
        if pod.started_s != i64::MAX {
            let init = pod.sched_s + 1;
            let pull_done = pod.started_s;
            if pod.pull_s > 5 {
                self.kubelet_event(init, (ns, &pod.name, &pod.uid), &node.name, "Pulling", format!("Pulling image \"{img}\""), false);
                let size = 4_000_000_000u64 + (self.rng.next_u64() % 6_000_000_000);
                self.kubelet_event(pull_done, (ns, &pod.name, &pod.uid), &node.name, "Pulled", format!("Successfully pulled image \"{img}\" in {}s ({}s including waiting). Image size: {size} bytes.", pod.pull_s, pod.pull_s), false);
            } else {
                self.kubelet_event(pull_done, (ns, &pod.name, &pod.uid), &node.name, "Pulled", format!("Container image \"{img}\" already present on machine"), false);
            }
            self.kubelet_event(pod.started_s, (ns, &pod.name, &pod.uid), &node.name, "Created", "Created container main".to_string(), false);
            self.kubelet_event(pod.started_s, (ns, &pod.name, &pod.uid), &node.name, "Started", "Started container main".to_string(), false);
            cid = self.container_id();
            let image_id = format!("{}@sha256:{}", image_repo(img), self.rng.hex(64));
            set_pod_cond(&mut conds, "PodReadyToStartContainers", true, init, "", "");
            set_pod_cond(&mut conds, "Initialized", true, init, "", "");
            set_pod_cond(&mut conds, "Ready", true, pod.started_s, "", "");
            set_pod_cond(&mut conds, "ContainersReady", true, pod.started_s, "", "");
            o["status"]["phase"] = json!("Running");
            o["status"]["startTime"] = json!(rfc3339(init));
            o["status"]["hostIP"] = json!(node.internal_ip);
            o["status"]["podIP"] = json!(pod.ip);
            o["status"]["conditions"] = json!(conds);
            o["status"]["containerStatuses"] = json!([{
                "name": "main",
                "image": img,
                "imageID": image_id,
                "containerID": cid,
                "ready": true,
                "started": true,
                "restartCount": 0,
                "state": { "running": { "startedAt": rfc3339(pod.started_s) } },
                "lastState": {},
            }]);
            self.push(pod.started_s, Stream::Pods, "MODIFIED", &mut o);
            if let Some((crash, restart)) = pod.crash {
                last_state = json!({ "terminated": {
                    "exitCode": 1, "reason": "Error", "containerID": cid,
                    "startedAt": rfc3339(pod.started_s), "finishedAt": rfc3339(crash),
                }});
                restarts = 1;
                set_pod_cond(
                    &mut conds,
                    "Ready",
                    false,
                    crash,
                    "ContainersNotReady",
                    "containers with unready status: [main]",
                );
                set_pod_cond(
                    &mut conds,
                    "ContainersReady",
                    false,
                    crash,
                    "ContainersNotReady",
                    "containers with unready status: [main]",
                );
                o["status"]["conditions"] = json!(conds);
                let cs = &mut o["status"]["containerStatuses"][0];
                cs["ready"] = json!(false);
                cs["started"] = json!(false);
                cs["restartCount"] = json!(1);
                cs["lastState"] = last_state.clone();
                cs["state"] = json!({ "waiting": {
                    "reason": "CrashLoopBackOff",
                    "message": format!("back-off 10s restarting failed container=main pod={}_{ns}({})", pod.name, pod.uid),
                }});
                self.push(crash, Stream::Pods, "MODIFIED", &mut o);
                self.kubelet_event(crash + 1, (ns, &pod.name, &pod.uid), &node.name, "BackOff", format!(
                        "Back-off restarting failed container main in pod {}_{ns}({})",
                        pod.name, pod.uid
                    ), true);
                cid = self.container_id();
                run_start = restart;
                set_pod_cond(&mut conds, "Ready", true, restart, "", "");
                set_pod_cond(&mut conds, "ContainersReady", true, restart, "", "");
                o["status"]["conditions"] = json!(conds);
                let cs = &mut o["status"]["containerStatuses"][0];
                cs["ready"] = json!(true);
                cs["started"] = json!(true);
                cs["containerID"] = json!(cid);
                cs["state"] = json!({ "running": { "startedAt": rfc3339(restart) } });
                self.push(restart, Stream::Pods, "MODIFIED", &mut o);
                self.kubelet_event(restart, (ns, &pod.name, &pod.uid), &node.name, "Started", "Started container main".to_string(), false);
            }
        }
        let preempted = pod.disruption.is_some();
        if let Some((at, reason)) = pod.disruption {
            let msg = if reason == "EvictionByEvictionAPI" {
                "Eviction API: evicting"
            } else {
                "default-scheduler: preempting to accommodate a higher priority pod"
            };
            set_pod_cond(&mut conds, "DisruptionTarget", true, at, reason, msg);
            o["status"]["conditions"] = json!(conds);
            self.push(at, Stream::Pods, "MODIFIED", &mut o);
            let seg = &sim.segs[pod.seg as usize];
            if let SegEnd::Preempted { by_job, .. } = seg.end {
                let by = &sim.jobs[by_job as usize];
                if reason == "EvictionByEvictionAPI" {
                    self.event(
                        at,
                        ("Pod", "v1", ns, &pod.name, &pod.uid),
                        "Evicted",
                        format!(
                            "Evicted to release quota for workload {}/{}",
                            NAMESPACES[by.ns].name, by.wl_name
                        ),
                        true,
                        "kueue-admission",
                        None,
                        None,
                    );
                } else {
                    self.event(
                        at,
                        ("Pod", "v1", ns, &pod.name, &pod.uid),
                        "Preempted",
                        format!("Preempted by pod {} on node {}", by.uid, node.name),
                        false,
                        "default-scheduler",
                        None,
                        None,
                    );
                }
            }
            if let Some(del) = pod.delete_req_s {
                o["metadata"]["deletionTimestamp"] = json!(rfc3339(del));
                o["metadata"]["deletionGracePeriodSeconds"] = json!(30);
                self.push(del, Stream::Pods, "MODIFIED", &mut o);
                if pod.started_s != i64::MAX {
                    self.kubelet_event(del, (ns, &pod.name, &pod.uid), &node.name, "Killing", "Stopping container main".to_string(), false);
                }
            }
        }
        if pod.started_s != i64::MAX {
            let end = pod.end_s;
            let (phase, exit, reason) = match pod.term {
                Term::Completed => ("Succeeded", 0, "Completed"),
                Term::OomKilled => ("Failed", 137, "OOMKilled"),
                Term::Error => ("Failed", 1, "Error"),
                Term::Killed => ("Failed", 143, "Error"),
            };
            let ready_reason = if phase == "Succeeded" {
                "PodCompleted"
            } else {
                "PodFailed"
            };
            set_pod_cond(&mut conds, "Ready", false, end, ready_reason, "");
            set_pod_cond(&mut conds, "ContainersReady", false, end, ready_reason, "");
            set_pod_cond(&mut conds, "PodReadyToStartContainers", false, end, "", "");
            o["status"]["phase"] = json!(phase);
            o["status"]["conditions"] = json!(conds);
            let cs = &mut o["status"]["containerStatuses"][0];
            cs["ready"] = json!(false);
            cs["started"] = json!(false);
            cs["restartCount"] = json!(restarts);
            cs["lastState"] = last_state;
            cs["state"] = json!({ "terminated": {
                "exitCode": exit, "reason": reason, "containerID": cid,
                "startedAt": rfc3339(run_start), "finishedAt": rfc3339(end),
            }});
            self.push(end, Stream::Pods, "MODIFIED", &mut o);
            if pod.term == Term::OomKilled {
                let pid_n = 10_000 + self.rng.next_u64() % 50_000;
                let rss = job.mem_gi as u64 * 1024 * 1024;
                self.event(end, ("Node", "v1", "", &node.name, &node.uid), "OOMKilling", format!("Memory cgroup out of memory: Killed process {pid_n} (python3) total-vm:{}kB, anon-rss:{rss}kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:{}kB oom_score_adj:999", rss + rss / 3, rss / 500), true, "kernel-monitor", Some(&node.name), None);
            }
        }
        if let Some(gone) = pod.gone_s {
            if !preempted && let Some(del) = pod.delete_req_s {
                o["metadata"]["deletionTimestamp"] = json!(rfc3339(del));
                o["metadata"]["deletionGracePeriodSeconds"] = json!(0);
                self.push(del, Stream::Pods, "MODIFIED", &mut o);
            }
            self.push(gone, Stream::Pods, "DELETED", &mut o);
        }
        if let Some((slot, from_ms, _, code)) = pod.xid {
            let g = self.cl.slots[slot as usize].gpu as usize;
            let bus = &node.gpus[g].pci_bus_id;
            let short = bus.trim_start_matches("0000");
            let text = match code {
                79 => "GPU has fallen off the bus.",
                13 => "Graphics Exception: ESR 0x404600=0x80000002",
                _ => "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer.",
            };
            let pid_n = 10_000 + self.rng.next_u64() % 50_000;
            self.event((from_ms + 999) / 1000,
                ("Node", "v1", "", &node.name, &node.uid),
                "GPUXidError",
                format!("NVRM: Xid (PCI:{short}): {code}, pid={pid_n}, name=python3, {text} (GPU {}, {})", g, node.gpus[g].uuid),
                true,
                "gpu-health-monitor",
                Some(&node.name),
                None,
            );
        }
    }

    fn emit_job(&mut self, j: usize) {
        let sim = self.sim;
        let job = &sim.jobs[j];
        match job.shape {
            Shape::Batch => self.emit_batch_job(j, &job.name, &job.uid, None),
            Shape::TrainJob => {
                self.emit_top(j);
                let js_uid = derived_uid(&job.uid, 1);
                let mut o = json!({
                    "apiVersion": "jobset.x-k8s.io/v1alpha2",
                    "kind": "JobSet",
                    "metadata": { "name": job.name, "namespace": NAMESPACES[job.ns].name, "uid": js_uid,
                                  "creationTimestamp": rfc3339(job.created_s),
                                  "ownerReferences": [owner_ref("trainer.kubeflow.org/v1alpha1", "TrainJob", &job.name, &job.uid)] },
                    "spec": { "replicatedJobs": [{ "name": "node", "replicas": 1 }] },
                });
                self.push(job.created_s, Stream::Jobs, "ADDED", &mut o);
                let (name, uid) = trainjob_inner_job(job);
                self.emit_batch_job(j, &name, &uid, Some(owner_ref("jobset.x-k8s.io/v1alpha2", "JobSet", &job.name, &js_uid)));
            }
            Shape::PyTorchJob => self.emit_top(j),
            Shape::RayJob => {
                self.emit_top(j);
                let mut o = json!({
                    "apiVersion": "ray.io/v1",
                    "kind": "RayCluster",
                    "metadata": { "name": ray_cluster_name(job), "namespace": NAMESPACES[job.ns].name, "uid": derived_uid(&job.uid, 3),
                                  "creationTimestamp": rfc3339(job.created_s),
                                  "ownerReferences": [owner_ref("ray.io/v1", "RayJob", &job.name, &job.uid)] },
                    "spec": { "headGroupSpec": {}, "workerGroupSpecs": [{ "groupName": "small-group", "replicas": job.pods.saturating_sub(1) }] },
                });
                self.push(job.created_s, Stream::Jobs, "ADDED", &mut o);
            }
            // A plain or bare pod has no job object.
            Shape::PlainPod | Shape::BarePod => {}
        }
    }

    /// The object at the top of a job that is not a batch/v1 Job (TrainJob, PyTorchJob, RayJob):
    /// created with the job's annotations; finished with its outcome (and the annotations set
    /// at the end); deleted when the job is.
    fn emit_top(&mut self, j: usize) {
        let sim = self.sim;
        let job = &sim.jobs[j];
        let (api, kind) = top_kind(job.shape);
        let mut o = json!({
            "apiVersion": api,
            "kind": kind,
            "metadata": { "name": job.name, "namespace": NAMESPACES[job.ns].name, "uid": job.uid,
                          "creationTimestamp": rfc3339(job.created_s),
                          "labels": { "kueue.x-k8s.io/queue-name": LOCAL_QUEUE } },
            "spec": {},
            "status": {},
        });
        if !job.job_annotations.is_empty() {
            o["metadata"]["annotations"] = json!(job.job_annotations);
        }
        self.push(job.created_s, Stream::Jobs, "ADDED", &mut o);
        if let Some((t, ok)) = job.finished {
            if ok {
                let mut ann = job.job_annotations.clone();
                ann.extend(job.job_end_annotations.clone());
                if !ann.is_empty() {
                    o["metadata"]["annotations"] = json!(ann);
                }
            }
            if job.shape == Shape::RayJob {
                o["status"] = json!({ "jobStatus": if ok { "SUCCEEDED" } else { "FAILED" }, "jobDeploymentStatus": "Complete", "endTime": rfc3339(t) });
            } else {
                let (kind, reason) = if ok { ("Succeeded", "JobSucceeded") } else { ("Failed", "JobFailed") };
                o["status"] = json!({ "conditions": [cond(kind, true, t, reason, "")], "completionTime": rfc3339(t) });
            }
            self.push(t, Stream::Jobs, "MODIFIED", &mut o);
        }
        if let Some(del) = job.deleted_s {
            o["metadata"]["deletionTimestamp"] = json!(rfc3339(del));
            self.push(del, Stream::Jobs, "DELETED", &mut o);
        }
    }

    /// A batch/v1 Job, `name`/`uid`, with the given owner (a TrainJob's JobSet).
    fn emit_batch_job(&mut self, j: usize, name: &str, uid: &str, owner: Option<Value>) {
        let sim = self.sim;
        let job = &sim.jobs[j];
        let ns = NAMESPACES[job.ns].name;
        // Kueue queues the top object of a chain, not the Job inside it.
        let mut labels = if owner.is_none() { json!({ "kueue.x-k8s.io/queue-name": LOCAL_QUEUE }) } else { json!({}) };
        let app = job
            .name
            .rsplit_once('-')
            .map(|(a, _)| a)
            .unwrap_or(name);
        labels["app.kubernetes.io/name"] = json!(app);
        let mut template_labels = json!({
            "batch.kubernetes.io/controller-uid": uid,
            "batch.kubernetes.io/job-name": name,
            "controller-uid": uid,
            "job-name": name,
        });
        if let Some(team) = job.pod_team {
            template_labels["team"] = json!(team);
        }
        let mut generation = 1;
        let mut o = json!({
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": name,
                "namespace": ns,
                "uid": uid,
                "generation": generation,
                "creationTimestamp": rfc3339(job.created_s),
                "labels": labels,
            },
            "spec": {
                "parallelism": job.pods,
                "completions": job.pods,
                "completionMode": if job.pods > 1 { "Indexed" } else { "NonIndexed" },
                "backoffLimit": job.backoff_limit,
                "suspend": true,
                "manualSelector": false,
                "podReplacementPolicy": "TerminatingOrFailed",
                "selector": { "matchLabels": { "batch.kubernetes.io/controller-uid": uid } },
                "template": { "metadata": { "labels": template_labels }, "spec": pod_template_spec(job) },
            },
            "status": {},
        });
        if let Some(ttl) = job.ttl_s {
            o["spec"]["ttlSecondsAfterFinished"] = json!(ttl);
        }
        if let Some(owner) = owner.clone() {
            o["metadata"]["ownerReferences"] = json!([owner]);
        } else if !job.job_annotations.is_empty() {
            o["metadata"]["annotations"] = json!(job.job_annotations);
        }
        let mut conds: Vec<Value> = vec![cond(
            "Suspended",
            true,
            job.created_s,
            "JobSuspended",
            "Job suspended",
        )];
        o["status"]["conditions"] = json!(conds);
        self.push(job.created_s, Stream::Jobs, "ADDED", &mut o);
        let cq = crate::truth::cluster_queue_of(job.ns);
        let mut failed = 0;
        for &s in &job.segments {
            let seg = &sim.segs[s as usize];
            let a = seg.admitted_s;
            generation += 1;
            o["metadata"]["generation"] = json!(generation);
            o["spec"]["suspend"] = json!(false);
            set_cond(
                &mut conds,
                "Suspended",
                false,
                a,
                "JobResumed",
                "Job resumed",
            );
            o["status"]["conditions"] = json!(conds);
            o["status"]["startTime"] = json!(rfc3339(a));
            o["status"]["active"] = json!(job.pods);
            o["status"]["ready"] = json!(0);
            self.push(a, Stream::Jobs, "MODIFIED", &mut o);
            self.event(
                a,
                ("Job", "batch/v1", ns, name, uid),
                "Started",
                format!("Admitted by clusterQueue {cq}"),
                false,
                "kueue-job-controller",
                None,
                None,
            );
            if seg.n > 1 {
                self.event(
                    a,
                    ("Job", "batch/v1", ns, name, uid),
                    "Resumed",
                    "Job resumed".to_string(),
                    false,
                    "job-controller",
                    None,
                    None,
                );
            }
            for &p in &seg.pods {
                let pod = &sim.pods[p as usize];
                if !pod.cancelled {
                    self.event(
                        pod.created_s,
                        ("Job", "batch/v1", ns, name, uid),
                        "SuccessfulCreate",
                        format!("Created pod: {}", pod.name),
                        false,
                        "job-controller",
                        None,
                        None,
                    );
                }
            }
            let stop = match seg.end {
                SegEnd::Running => i64::MAX,
                SegEnd::Succeeded(t) | SegEnd::Failed(t, _) => t,
                SegEnd::Preempted { at, .. } => at,
            };
            // Readiness and replaced pods change the Job's counters only; a Job records no
            // time for them, so they are folded into the next version that does.
            if job.plan == Plan::Oom {
                failed += seg
                    .pods
                    .iter()
                    .map(|&p| &sim.pods[p as usize])
                    .filter(|pod| {
                        !pod.cancelled && pod.term == Term::OomKilled && pod.end_s <= stop
                    })
                    .count();
            }
            match seg.end {
                SegEnd::Running => {}
                SegEnd::Succeeded(t) => {
                    let mut ann = job.job_annotations.clone();
                    ann.extend(job.job_end_annotations.clone());
                    if !ann.is_empty() && owner.is_none() {
                        o["metadata"]["annotations"] = json!(ann);
                    }
                    set_cond(
                        &mut conds,
                        "SuccessCriteriaMet",
                        true,
                        t,
                        "CompletionsReached",
                        "Reached expected number of succeeded pods",
                    );
                    set_cond(
                        &mut conds,
                        "Complete",
                        true,
                        t,
                        "CompletionsReached",
                        "Reached expected number of succeeded pods",
                    );
                    o["status"]["conditions"] = json!(conds);
                    o["status"]["completionTime"] = json!(rfc3339(t));
                    o["status"]["succeeded"] = json!(job.pods);
                    o["status"]["active"] = json!(0);
                    o["status"]["ready"] = json!(0);
                    self.push(t, Stream::Jobs, "MODIFIED", &mut o);
                    self.event(
                        t,
                        ("Job", "batch/v1", ns, name, uid),
                        "Completed",
                        "Job completed".to_string(),
                        false,
                        "job-controller",
                        None,
                        None,
                    );
                    self.event(
                        t,
                        ("Job", "batch/v1", ns, name, uid),
                        "FinishedWorkload",
                        format!("Workload '{ns}/{}' is declared finished", job.wl_name),
                        false,
                        "kueue-job-controller",
                        None,
                        None,
                    );
                }
                SegEnd::Failed(t, _) => {
                    if job.plan == Plan::Error {
                        failed += 1;
                    }
                    let failed = failed.max(1);
                    let msg = "Job has reached the specified backoff limit";
                    set_cond(
                        &mut conds,
                        "FailureTarget",
                        true,
                        t,
                        "BackoffLimitExceeded",
                        msg,
                    );
                    set_cond(&mut conds, "Failed", true, t, "BackoffLimitExceeded", msg);
                    o["status"]["conditions"] = json!(conds);
                    o["status"]["failed"] = json!(failed);
                    o["status"]["active"] = json!(0);
                    o["status"]["ready"] = json!(0);
                    self.push(t, Stream::Jobs, "MODIFIED", &mut o);
                    self.event(
                        t,
                        ("Job", "batch/v1", ns, name, uid),
                        "BackoffLimitExceeded",
                        msg.to_string(),
                        true,
                        "job-controller",
                        None,
                        None,
                    );
                    self.event(
                        t,
                        ("Job", "batch/v1", ns, name, uid),
                        "FinishedWorkload",
                        format!("Workload '{ns}/{}' is declared finished", job.wl_name),
                        false,
                        "kueue-job-controller",
                        None,
                        None,
                    );
                }
                SegEnd::Preempted {
                    at, by_job, reason, ..
                } => {
                    generation += 1;
                    o["metadata"]["generation"] = json!(generation);
                    o["spec"]["suspend"] = json!(true);
                    set_cond(
                        &mut conds,
                        "Suspended",
                        true,
                        at,
                        "JobSuspended",
                        "Job suspended",
                    );
                    o["status"]["conditions"] = json!(conds);
                    if let Some(st) = o["status"].as_object_mut() {
                        st.remove("startTime");
                    }
                    o["status"]["active"] = json!(0);
                    o["status"]["ready"] = json!(0);
                    o["status"]["terminating"] = json!(job.pods);
                    self.push(at, Stream::Jobs, "MODIFIED", &mut o);
                    if let Some(st) = o["status"].as_object_mut() {
                        st.remove("terminating");
                    }
                    let msg = preempt_message(sim, by_job, reason);
                    self.event(
                        at,
                        ("Job", "batch/v1", ns, name, uid),
                        "Stopped",
                        msg,
                        false,
                        "kueue-job-controller",
                        None,
                        None,
                    );
                    self.event(
                        at,
                        ("Job", "batch/v1", ns, name, uid),
                        "Suspended",
                        "Job suspended".to_string(),
                        false,
                        "job-controller",
                        None,
                        None,
                    );
                }
            }
        }
        if let Some(del) = job.deleted_s {
            o["metadata"]["deletionTimestamp"] = json!(rfc3339(del));
            o["metadata"]["deletionGracePeriodSeconds"] = json!(0);
            self.push(del, Stream::Jobs, "DELETED", &mut o);
        }
    }

    fn emit_workload(&mut self, j: usize) {
        let sim = self.sim;
        let job = &sim.jobs[j];
        // Kueue does not manage a bare pod.
        if job.shape == Shape::BarePod {
            return;
        }
        let ns = NAMESPACES[job.ns].name;
        let v1beta1 = job.wl_v1beta1;
        let api = if v1beta1 {
            "kueue.x-k8s.io/v1beta1"
        } else {
            "kueue.x-k8s.io/v1beta2"
        };
        let mut labels = json!({ "kueue.x-k8s.io/job-uid": job.uid });
        if let Some(team) = job.wl_team {
            labels["team"] = json!(team);
        }
        let mut template = json!({ "spec": pod_template_spec(job) });
        if let Some(team) = job.pod_team {
            template["metadata"] = json!({ "labels": { "team": team } });
        }
        let mut o = json!({
            "apiVersion": api,
            "kind": "Workload",
            "metadata": {
                "name": job.wl_name,
                "namespace": ns,
                "uid": job.wl_uid,
                "generation": 1,
                "creationTimestamp": rfc3339(job.created_s),
                "labels": labels,
                "ownerReferences": [workload_owner(sim, job)],
                "finalizers": ["kueue.x-k8s.io/resource-in-use"],
            },
            "spec": {
                "active": true,
                "queueName": LOCAL_QUEUE,
                "priority": job.priority,
                "priorityClassName": job.priority_class,
                "priorityClassSource": "kueue.x-k8s.io/workloadpriorityclass",
                "podSets": [{ "name": "main", "count": job.pods, "template": template }],
            },
        });
        if !job.wl_annotations.is_empty() {
            o["metadata"]["annotations"] = json!(job.wl_annotations);
        }
        self.push(job.created_s, Stream::Workloads, "ADDED", &mut o);
        let wl = (
            "Workload",
            api,
            ns,
            job.wl_name.as_str(),
            job.wl_uid.as_str(),
        );
        let cq = crate::truth::cluster_queue_of(job.ns);
        let pending = pending_message(self.cl, job);
        let mut conds: Vec<Value> = Vec::new();
        let first_admit = job
            .segments
            .first()
            .map(|&s| sim.segs[s as usize].admitted_s);
        let t_pending = job.created_s + 1;
        if first_admit.is_none_or(|a| a > t_pending) {
            set_cond(
                &mut conds,
                "QuotaReserved",
                false,
                t_pending,
                "Pending",
                &pending,
            );
            o["status"] = json!({ "conditions": conds });
            self.push(t_pending, Stream::Workloads, "MODIFIED", &mut o);
            // A Workload deleted while it waits (never admitted) stops being reported then.
            let until = first_admit.or(job.deleted_s).unwrap_or(self.tl.end_s).min(self.tl.end_s) - 1;
            let count = (1 + (until - t_pending) / 60) as u64;
            self.event(
                t_pending,
                wl,
                "Pending",
                pending.clone(),
                true,
                "kueue-admission",
                None,
                Some((count, until)),
            );
        }
        let acc_key = if v1beta1 {
            "accumulatedPastExexcutionTimeSeconds"
        } else {
            "accumulatedPastExecutionTimeSeconds"
        };
        let mut accumulated = 0i64;
        let res = job.group.resource();
        for &s in &job.segments {
            let seg = &sim.segs[s as usize];
            let a = seg.admitted_s;
            let wait = a - seg.queued_s;
            for kind in ["Evicted", "Preempted"] {
                if let Some(c) = conds.iter().find(|c| c["type"] == kind) {
                    let msg = format!("Previously: {}", c["message"].as_str().unwrap_or(""));
                    set_cond(&mut conds, kind, false, a, "QuotaReserved", &msg);
                }
            }
            set_cond(
                &mut conds,
                "QuotaReserved",
                true,
                a,
                "QuotaReserved",
                &format!("Quota reserved in ClusterQueue {cq}"),
            );
            o["status"]["conditions"] = json!(conds);
            o["status"]["admission"] = json!({
                "clusterQueue": cq,
                "podSetAssignments": [{
                    "name": "main",
                    "count": job.pods,
                    "flavors": { "cpu": "default-flavor", "memory": "default-flavor", res: flavor_of(job.group) },
                    "resourceUsage": {
                        "cpu": (job.cpu * job.pods).to_string(),
                        "memory": format!("{}Gi", job.mem_gi * job.pods),
                        res: (job.per_pod * job.pods).to_string(),
                    },
                }],
            });
            self.push(a, Stream::Workloads, "MODIFIED", &mut o);
            self.event(
                a,
                wl,
                "QuotaReserved",
                format!("Quota reserved in ClusterQueue {cq}, wait time since queued was {wait}s"),
                false,
                "kueue-admission",
                None,
                None,
            );
            set_cond(
                &mut conds,
                "Admitted",
                true,
                a,
                "Admitted",
                "The workload is admitted",
            );
            o["status"]["conditions"] = json!(conds);
            self.push(a, Stream::Workloads, "MODIFIED", &mut o);
            self.event(
                a,
                wl,
                "Admitted",
                format!("Admitted by ClusterQueue {cq}, wait time since reservation was 0s"),
                false,
                "kueue-admission",
                None,
                None,
            );
            let stop = match seg.end {
                SegEnd::Running => i64::MAX,
                SegEnd::Succeeded(t) | SegEnd::Failed(t, _) => t,
                SegEnd::Preempted { at, .. } => at,
            };
            if seg.ready_s < stop {
                set_cond(
                    &mut conds,
                    "PodsReady",
                    true,
                    seg.ready_s,
                    "PodsReady",
                    "All pods reached readiness and the workload is running",
                );
                o["status"]["conditions"] = json!(conds);
                self.push(seg.ready_s, Stream::Workloads, "MODIFIED", &mut o);
            }
            match seg.end {
                SegEnd::Running => {}
                SegEnd::Succeeded(t) => {
                    set_cond(
                        &mut conds,
                        "Finished",
                        true,
                        t,
                        "Succeeded",
                        "Job finished successfully",
                    );
                    o["status"]["conditions"] = json!(conds);
                    self.push(t, Stream::Workloads, "MODIFIED", &mut o);
                }
                SegEnd::Failed(t, r) => {
                    let msg = match r {
                        FailReason::OomKilled | FailReason::Error => {
                            "Job has reached the specified backoff limit"
                        }
                    };
                    set_cond(&mut conds, "Finished", true, t, "Failed", msg);
                    o["status"]["conditions"] = json!(conds);
                    self.push(t, Stream::Workloads, "MODIFIED", &mut o);
                }
                SegEnd::Preempted {
                    at,
                    requeued,
                    by_job,
                    reason,
                } => {
                    let msg = preempt_message(sim, by_job, reason);
                    set_cond(&mut conds, "Evicted", true, at, "Preempted", &msg);
                    set_cond(&mut conds, "Preempted", true, at, reason, &msg);
                    set_cond(
                        &mut conds,
                        "PodsReady",
                        false,
                        at,
                        "WaitForStart",
                        "Not all pods are ready or succeeded",
                    );
                    set_cond(&mut conds, "Requeued", false, at, "Preempted", &msg);
                    o["status"]["conditions"] = json!(conds);
                    self.push(at, Stream::Workloads, "MODIFIED", &mut o);
                    self.event(
                        at,
                        wl,
                        "Preempted",
                        msg.clone(),
                        false,
                        "kueue-admission",
                        None,
                        None,
                    );
                    accumulated += at - a;
                    set_cond(
                        &mut conds,
                        "QuotaReserved",
                        false,
                        requeued,
                        "Pending",
                        &msg,
                    );
                    set_cond(
                        &mut conds,
                        "Admitted",
                        false,
                        requeued,
                        "NoReservation",
                        "The workload has no reservation",
                    );
                    set_cond(&mut conds, "Requeued", true, requeued, "Preempted", &msg);
                    o["status"]["conditions"] = json!(conds);
                    o["status"]["requeueState"] = json!({ "count": seg.n });
                    o["status"][acc_key] = json!(accumulated);
                    if let Some(st) = o["status"].as_object_mut() {
                        st.remove("admission");
                    }
                    self.push(requeued, Stream::Workloads, "MODIFIED", &mut o);
                    let next_admit = job
                        .segments
                        .iter()
                        .map(|&x| sim.segs[x as usize].admitted_s)
                        .find(|&x| x > requeued);
                    let until = next_admit.unwrap_or(self.tl.end_s) - 1;
                    if until > requeued {
                        let count = (1 + (until - requeued) / 60) as u64;
                        self.event(
                            requeued + 1,
                            wl,
                            "Pending",
                            pending.clone(),
                            true,
                            "kueue-admission",
                            None,
                            Some((count, until)),
                        );
                    }
                }
            }
        }
        if let Some(del) = job.deleted_s {
            o["metadata"]["deletionTimestamp"] = json!(rfc3339(del));
            o["metadata"]["deletionGracePeriodSeconds"] = json!(0);
            self.push(del, Stream::Workloads, "DELETED", &mut o);
        }
    }

    /// Each ResourceClaim's versions ([`crate::dra`]): made (with its pod, or by name before
    /// its pods), allocated and reserved for its pods when they are scheduled, deleted. Each
    /// version's latest time is its change's, so that it is observed then.
    fn emit_claims(&mut self) {
        let (cl, sim, claims) = (self.cl, self.sim, self.claims);
        for c in &claims.claims {
            let node = &cl.nodes[c.node as usize];
            let mut metadata = json!({
                "name": c.name,
                "namespace": NAMESPACES[c.ns].name,
                "uid": c.uid,
                "creationTimestamp": rfc3339(c.created_s),
                "finalizers": ["resource.kubernetes.io/delete-protection"],
            });
            if c.template.is_some() {
                let pod = &sim.pods[c.pods[0] as usize];
                metadata["generateName"] = json!(format!("{}-{}-", pod.name, dra::POD_CLAIM));
                metadata["annotations"] = json!({ "resource.kubernetes.io/pod-claim-name": dra::POD_CLAIM });
                metadata["ownerReferences"] = json!([{ "apiVersion": "v1", "kind": "Pod", "name": pod.name, "uid": pod.uid, "controller": true, "blockOwnerDeletion": true }]);
            }
            let mut o = json!({
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": metadata,
                "spec": { "devices": { "requests": [device_request(c.share.as_ref().map(|s| s.1))] } },
                "status": {},
            });
            self.push(c.created_s, Stream::Claims, "ADDED", &mut o);
            if let Some(at) = c.allocated_s {
                let mut result = json!({ "request": dra::POD_CLAIM, "driver": dra::DRIVER, "pool": node.name, "device": node.gpus[c.gpu as usize].dra_device() });
                if let Some((share_id, gi)) = &c.share {
                    result["shareID"] = json!(share_id);
                    result["consumedCapacity"] = json!({ dra::CAPACITY_KEY: format!("{gi}Gi") });
                }
                let reserved: Vec<Value> = c
                    .pods
                    .iter()
                    .map(|&p| json!({ "resource": "pods", "name": sim.pods[p as usize].name, "uid": sim.pods[p as usize].uid }))
                    .collect();
                o["status"] = json!({
                    "allocation": {
                        "devices": { "results": [result] },
                        "nodeSelector": { "nodeSelectorTerms": [{ "matchFields": [{ "key": "metadata.name", "operator": "In", "values": [node.name] }] }] },
                        "allocationTimestamp": rfc3339(at),
                    },
                    "reservedFor": reserved,
                });
                self.push(at, Stream::Claims, "MODIFIED", &mut o);
            }
            if let Some(del) = c.deleted_s {
                o["metadata"]["deletionTimestamp"] = json!(rfc3339(del));
                o["metadata"]["deletionGracePeriodSeconds"] = json!(0);
                self.push(del, Stream::Claims, "DELETED", &mut o);
            }
        }
    }

    fn emit_nodes_events(&mut self) {
        for n in &self.cl.nodes {
            if let Some((down, up)) = n.not_ready {
                self.event(
                    down,
                    ("Node", "v1", "", &n.name, &n.uid),
                    "NodeNotReady",
                    format!("Node {} status is now: NodeNotReady", n.name),
                    false,
                    "node-controller",
                    None,
                    None,
                );
                self.event(
                    up,
                    ("Node", "v1", "", &n.name, &n.uid),
                    "NodeReady",
                    format!("Node {} status is now: NodeReady", n.name),
                    false,
                    "kubelet",
                    Some(&n.name),
                    None,
                );
            }
        }
    }
}

impl Emitter<'_> {
    /// The Node versions a watch on Nodes records after the snapshot: one per change of a node's
    /// standing (cordon, uncordon, NotReady, Ready again), built on the snapshot's object
    /// (`base`, in node order). Readers observe a version at the latest time it records, so
    /// each carries the change's instant as its conditions' heartbeat, and no later time.
    fn emit_node_versions(&mut self, base: &[Value]) {
        let cl = self.cl;
        for (n, o) in cl.nodes.iter().zip(base) {
            let mut o = o.clone();
            for change in n.changes() {
                apply_node_change(&mut o, &change);
                self.push(change.at_s, Stream::Nodes, "MODIFIED", &mut o);
            }
        }
    }
}

/// Brings a Node object to the state after `change`: `spec.unschedulable` and the taint the
/// node lifecycle controller adds for a cordon, the Ready condition as the kubelet posts it
/// (its transition time moves only when its status does), the NotReady taint, and every
/// condition's heartbeat at the change's instant.
fn apply_node_change(o: &mut Value, change: &NodeChange) {
    let at = rfc3339(change.at_s);
    let spec = &mut o["spec"];
    if change.unschedulable {
        spec["unschedulable"] = json!(true);
    } else if let Some(m) = spec.as_object_mut() {
        m.remove("unschedulable");
    }
    let mut taints: Vec<Value> = spec["taints"].as_array().cloned().unwrap_or_default();
    for (key, wanted) in [
        ("node.kubernetes.io/unschedulable", change.unschedulable),
        ("node.kubernetes.io/not-ready", !change.ready),
    ] {
        let present = taints.iter().any(|t| t["key"] == key);
        if wanted && !present {
            taints.push(json!({ "key": key, "effect": "NoSchedule", "timeAdded": at }));
        } else if !wanted {
            taints.retain(|t| t["key"] != key);
        }
    }
    spec["taints"] = json!(taints);
    let Some(conds) = o["status"]["conditions"].as_array_mut() else {
        return;
    };
    for c in conds.iter_mut() {
        c["lastHeartbeatTime"] = json!(at);
        if c["type"] != "Ready" {
            continue;
        }
        let status = if change.ready { "True" } else { "False" };
        if c["status"] != status {
            c["status"] = json!(status);
            c["lastTransitionTime"] = json!(at);
        }
        if change.ready {
            c["reason"] = json!("KubeletReady");
            c["message"] = json!("kubelet is posting ready status");
        } else {
            c["reason"] = json!("KubeletNotReady");
            c["message"] = json!("[container runtime is down, PLEG is not healthy: pleg was last seen active 3m0s ago; threshold is 3m0s]");
        }
    }
}

/// A claim's (or a template's) one request: a whole GPU of the driver's class, or where
/// `memory_gi` is given, that much of a shared device's memory (consumable capacity).
fn device_request(memory_gi: Option<u64>) -> Value {
    let mut exactly = json!({ "deviceClassName": dra::DEVICE_CLASS, "allocationMode": "ExactCount", "count": 1 });
    if let Some(gi) = memory_gi {
        exactly["capacity"] = json!({ "requests": { dra::CAPACITY_KEY: format!("{gi}Gi") } });
    }
    json!({ "name": dra::POD_CLAIM, "exactly": exactly })
}

/// The DRA objects that do not change over the capture, as of its start (`snap`): the GPUs'
/// DeviceClass, the ResourceClaimTemplates of the namespaces that use them, and a ResourceSlice
/// per DRA node publishing its GPUs (each device's `uuid` attribute is the UUID its DCGM series
/// carry).
fn dra_docs(seed: u64, cl: &Cluster, snap: i64, rv: &mut u64, w: &mut Written) -> Vec<Value> {
    let mut rng = Rng::stream(seed, tag::DRA, 1 << 41);
    let mut docs = Vec::new();
    let mut meta = |name: &str, ns: Option<&str>, created: i64, rng: &mut Rng| {
        *rv += 1;
        let mut m = json!({ "name": name, "uid": rng.uuid(), "resourceVersion": rv.to_string(), "creationTimestamp": rfc3339(created), "generation": 1 });
        if let Some(ns) = ns {
            m["namespace"] = json!(ns);
        }
        m
    };
    let installed = snap - 86_400 * 40;
    docs.push(json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": meta(dra::DEVICE_CLASS, None, installed, &mut rng),
        "spec": { "selectors": [{ "cel": { "expression": format!("device.driver == '{}'", dra::DRIVER) } }] },
    }));
    w.count("DeviceClass");
    let mut templates: Vec<(&str, &str, Option<u64>)> = Vec::new();
    for t in crate::schedule::TEMPLATES.iter().filter(|t| t.pool.spec().dra) {
        if !templates.iter().any(|x| x.0 == t.ns) {
            templates.push((t.ns, dra::SINGLE_GPU_TEMPLATE, None));
        }
    }
    for (name, gi) in dra::SHARED_TEMPLATES.iter().zip(crate::cluster::DRA_SHARED_CAPACITY_GI) {
        templates.push(("serving", name, Some(gi)));
    }
    for (ns, name, gi) in templates {
        docs.push(json!({
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": meta(name, Some(ns), installed + 3600, &mut rng),
            "spec": { "spec": { "devices": { "requests": [device_request(gi)] } } },
        }));
        w.count("ResourceClaimTemplate");
    }
    for &ni in &cl.pool_nodes[PoolId::Dra as usize] {
        let node = &cl.nodes[ni];
        let spec = node.pool.spec();
        let devices: Vec<Value> = node
            .gpus
            .iter()
            .map(|g| {
                let memory = format!("{}Gi", crate::cluster::DRA_DEVICE_MEMORY_GI);
                let mut d = json!({
                    "name": g.dra_device(),
                    "attributes": {
                        "type": { "string": "gpu" },
                        "uuid": { "string": g.uuid },
                        "productName": { "string": spec.model },
                        "index": { "int": g.index },
                        "brand": { "string": "Nvidia" },
                        "architecture": { "string": "Hopper" },
                        "cudaComputeCapability": { "version": "9.0.0" },
                        "driverVersion": { "version": "550.54.15" },
                        "pcieBusID": { "string": g.pci_bus_id.to_lowercase() },
                    },
                    "capacity": { dra::CAPACITY_KEY: { "value": memory } },
                });
                // Claims may share this one by consuming parts of its memory.
                if g.sharing == Sharing::DraCapacity {
                    d["allowMultipleAllocations"] = json!(true);
                    d["capacity"][dra::CAPACITY_KEY]["requestPolicy"] = json!({ "default": memory, "validRange": { "min": "1Gi", "max": memory } });
                }
                d
            })
            .collect();
        let mut m = meta(&format!("{}-{}-{}", node.name, dra::DRIVER, rng.name_suffix(5)), None, node.created_s + 120, &mut rng);
        m["ownerReferences"] = json!([{ "apiVersion": "v1", "kind": "Node", "name": node.name, "uid": node.uid, "controller": true }]);
        docs.push(json!({
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": m,
            "spec": {
                "driver": dra::DRIVER,
                "nodeName": node.name,
                "pool": { "name": node.name, "generation": 1, "resourceSliceCount": 1 },
                "devices": devices,
            },
        }));
        w.count("ResourceSlice");
    }
    docs
}

/// kubectl's JSON layout: four-space indentation.
fn pretty<T: Serialize, W: Write>(v: &T, out: W) -> serde_json::Result<()> {
    let fmt = serde_json::ser::PrettyFormatter::with_indent(b"    ");
    let mut ser = serde_json::Serializer::with_formatter(out, fmt);
    v.serialize(&mut ser)
}

/// A sequence serialised from an iterator as it is drawn, so that its items never all exist at
/// once. It can be serialised once.
struct LazySeq<I>(RefCell<Option<I>>);

impl<I: Iterator<Item: Serialize>> Serialize for LazySeq<I> {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let items = self.0.borrow_mut().take();
        s.collect_seq(items.ok_or_else(|| S::Error::custom("a lazy sequence was serialised twice"))?)
    }
}

/// `{"apiVersion": "v1", "kind": "List", "items": [...], "metadata": {"resourceVersion": ""}}`
/// with `items` drawn from an iterator, its keys in the order a `Value` of that object has them
/// (the order serde_json's `Map` keeps), so the bytes are those of the `Value`.
struct LazyList<I>(LazySeq<I>);

impl<I: Iterator<Item: Serialize>> Serialize for LazyList<I> {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let shape = json!({ "apiVersion": "v1", "kind": "List", "items": [], "metadata": { "resourceVersion": "" } });
        let Value::Object(shape) = shape else { unreachable!("json! of an object") };
        let mut map = s.serialize_map(Some(shape.len()))?;
        for (k, v) in &shape {
            if k == "items" {
                map.serialize_entry(k, &self.0)?;
            } else {
                map.serialize_entry(k, v)?;
            }
        }
        map.end()
    }
}

/// A failed serialisation into `path`: a write error as such, anything else as a bug.
fn write_error(path: &Path, what: &str) -> impl FnOnce(serde_json::Error) -> SimError {
    let path = path.to_path_buf();
    let what = what.to_string();
    move |e| {
        if e.is_io() {
            SimError::io(path, e.into())
        } else {
            json_error(&path, &what)(e)
        }
    }
}

fn json_error(path: &Path, what: &str) -> impl FnOnce(serde_json::Error) -> SimError {
    let path = path.to_path_buf();
    let what = what.to_string();
    move |e| SimError::Serialize {
        path,
        what,
        reason: e.to_string(),
    }
}

fn yaml_docs(docs: &[Value], path: &Path) -> Result<Vec<u8>> {
    let mut out = String::new();
    for (i, d) in docs.iter().enumerate() {
        if i > 0 {
            out.push_str("---\n");
        }
        let s = serde_yaml::to_string(d).map_err(|e| SimError::Serialize {
            path: path.to_path_buf(),
            what: "YAML document".to_string(),
            reason: e.to_string(),
        })?;
        out.push_str(&s);
    }
    Ok(out.into_bytes())
}

fn event_object(e: &EventRec, name: &str, uid: &str, rv: u64) -> Value {
    let ns = if e.namespace.is_empty() {
        "default"
    } else {
        e.namespace.as_str()
    };
    let mut regarding =
        json!({ "kind": e.kind, "name": e.name, "uid": e.uid, "apiVersion": e.api_version });
    if !e.namespace.is_empty() {
        regarding["namespace"] = json!(e.namespace);
    }
    if let Some(fp) = e.field_path {
        regarding["fieldPath"] = json!(fp);
    }
    let kind = if e.warning { "Warning" } else { "Normal" };
    if e.v1 {
        let micros = ((rv.wrapping_mul(2_654_435_761)) % 1_000_000) as u32;
        let mut o = json!({
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": { "name": name, "namespace": ns, "uid": uid, "resourceVersion": rv.to_string(), "creationTimestamp": rfc3339(e.t) },
            "eventTime": rfc3339_micros(e.t, micros),
            "reportingController": e.component,
            "reportingInstance": format!("{}-{}", e.component, e.host.as_deref().unwrap_or("7d9f8c6b5-x2k4p")),
            "action": e.reason,
            "reason": e.reason,
            "regarding": regarding,
            "note": e.message,
            "type": kind,
        });
        if e.count > 1 {
            o["series"] =
                json!({ "count": e.count, "lastObservedTime": rfc3339_micros(e.last_t, micros) });
            o["metadata"]["creationTimestamp"] = json!(rfc3339(e.t));
        }
        o
    } else {
        let mut source = json!({ "component": e.component });
        if let Some(h) = &e.host {
            source["host"] = json!(h);
        }
        json!({
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": { "name": name, "namespace": ns, "uid": uid, "resourceVersion": rv.to_string(), "creationTimestamp": rfc3339(e.t) },
            "involvedObject": regarding,
            "reason": e.reason,
            "message": e.message,
            "source": source,
            "firstTimestamp": rfc3339(e.t),
            "lastTimestamp": rfc3339(e.last_t),
            "count": e.count,
            "type": kind,
            "eventTime": null,
            "reportingComponent": e.component,
            "reportingInstance": e.host.clone().unwrap_or_default(),
        })
    }
}

/// Writes everything under `<out>/kubernetes/` (of the streams, what `window` holds).
pub fn write_all(seed: u64, cl: &Cluster, tl: &Timeline, sim: &Sim, claims: &Claims, window: &Window, out: &Path) -> Result<Written> {
    let dir = out.join("kubernetes");
    crate::out::create_dir(&dir)?;
    let mut w = Written::default();
    let snap = tl.obj_start_s;
    let mut rv: u64 = 48_213_000;

    // Namespaces.
    let mut rng = Rng::stream(seed, tag::EVENTS, 1);
    let mut docs = Vec::new();
    for ns in NAMESPACES {
        rv += 1;
        let mut labels = json!({ "kubernetes.io/metadata.name": ns.name });
        if let Some(t) = ns.team_label {
            labels["team"] = json!(t);
        }
        let created = snap - 86_400 * (120 + rng.range(0, 200)) - rng.range(0, 86_399);
        docs.push(json!({
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": { "name": ns.name, "uid": rng.uuid(), "resourceVersion": rv.to_string(), "creationTimestamp": rfc3339(created), "labels": labels },
            "spec": { "finalizers": ["kubernetes"] },
            "status": { "phase": "Active" },
        }));
        w.count("Namespace");
    }
    let path = dir.join("namespaces.yaml");
    w.bytes += write_atomic(&path, &yaml_docs(&docs, &path)?)?;
    w.files += 1;

    // Nodes.
    let mut items = Vec::new();
    for n in &cl.nodes {
        rv += 1;
        let spec = n.pool.spec();
        let mut labels = json!({
            "kubernetes.io/hostname": n.name,
            "kubernetes.io/arch": "amd64",
            "kubernetes.io/os": "linux",
            "node.kubernetes.io/instance-type": spec.instance_type,
            "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.product": spec.product_label,
            "nvidia.com/gpu.count": spec.gpus_per_node.to_string(),
            "nvidia.com/gpu.memory": spec.mem_mib.to_string(),
            "gpuledger.io/pool": spec.name,
        });
        let mut capacity = json!({
            "cpu": spec.node_cpu.to_string(),
            "memory": format!("{}Ki", spec.node_mem_gi as u64 * 1024 * 1024),
            "pods": "110",
            "ephemeral-storage": "1073216492Ki",
            "nvidia.com/gpu": if spec.mig { "0".to_string() } else { spec.gpus_per_node.to_string() },
        });
        // A time-sliced node advertises each GPU once per replica (GPU feature discovery's labels).
        if n.gpus.first().is_some_and(|g| g.sharing == Sharing::TimeSliced) {
            let replicas = crate::cluster::TIME_SLICE_REPLICAS;
            capacity["nvidia.com/gpu"] = json!((spec.gpus_per_node * replicas).to_string());
            labels["nvidia.com/gpu.replicas"] = json!(replicas.to_string());
            labels["nvidia.com/gpu.sharing-strategy"] = json!("time-slicing");
        }
        // NVIDIA's DRA driver publishes these GPUs in ResourceSlices; no device plugin
        // advertises them as an extended resource.
        if spec.dra {
            if let Some(c) = capacity.as_object_mut() {
                c.remove("nvidia.com/gpu");
            }
            labels["nvidia.com/gpu.deploy.device-plugin"] = json!("false");
            labels["nvidia.com/dra-kubelet-plugin"] = json!("true");
        }
        if spec.mig {
            labels["nvidia.com/mig.strategy"] = json!("mixed");
            labels["nvidia.com/mig.config.state"] = json!("success");
            for p in MigProfile::ALL {
                let c = n
                    .slots
                    .clone()
                    .filter(|&s| slot_group(cl, &cl.slots[s]) == Group::Mig(p))
                    .count();
                capacity[p.resource()] = json!(c.to_string());
                labels[format!(
                    "nvidia.com/{}.count",
                    p.resource().trim_start_matches("nvidia.com/")
                )] = json!(c.to_string());
            }
        }
        let mut allocatable = capacity.clone();
        allocatable["cpu"] = json!(format!("{}m", spec.node_cpu as u64 * 1000 - 500));
        items.push(json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": n.name,
                "uid": n.uid,
                "resourceVersion": rv.to_string(),
                "creationTimestamp": rfc3339(n.created_s),
                "labels": labels,
                "annotations": { "node.alpha.kubernetes.io/ttl": "0", "volumes.kubernetes.io/controller-managed-attach-detach": "true" },
            },
            "spec": { "taints": [{ "key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule" }] },
            "status": {
                "capacity": capacity,
                "allocatable": allocatable,
                "conditions": [
                    { "type": "MemoryPressure", "status": "False", "lastHeartbeatTime": rfc3339(snap), "lastTransitionTime": rfc3339(n.created_s + 60), "reason": "KubeletHasSufficientMemory", "message": "kubelet has sufficient memory available" },
                    { "type": "DiskPressure", "status": "False", "lastHeartbeatTime": rfc3339(snap), "lastTransitionTime": rfc3339(n.created_s + 60), "reason": "KubeletHasNoDiskPressure", "message": "kubelet has no disk pressure" },
                    { "type": "PIDPressure", "status": "False", "lastHeartbeatTime": rfc3339(snap), "lastTransitionTime": rfc3339(n.created_s + 60), "reason": "KubeletHasSufficientPID", "message": "kubelet has sufficient PID available" },
                    { "type": "Ready", "status": "True", "lastHeartbeatTime": rfc3339(snap), "lastTransitionTime": rfc3339(n.created_s + 95), "reason": "KubeletReady", "message": "kubelet is posting ready status" },
                ],
                "addresses": [{ "type": "InternalIP", "address": n.internal_ip }, { "type": "Hostname", "address": n.name }],
                "nodeInfo": {
                    "architecture": "amd64",
                    "operatingSystem": "linux",
                    "osImage": "Ubuntu 22.04.5 LTS",
                    "kernelVersion": "5.15.0-1071-aws",
                    "containerRuntimeVersion": "containerd://1.7.23",
                    "kubeletVersion": "v1.31.4",
                    "kubeProxyVersion": "",
                    "machineID": rng.hex(32),
                    "systemUUID": rng.uuid(),
                    "bootID": rng.uuid(),
                },
            },
        }));
        w.count("Node");
    }
    let list = json!({ "apiVersion": "v1", "kind": "List", "items": &items, "metadata": { "resourceVersion": "" } });
    let path = dir.join("nodes.json");
    let mut buf = Vec::new();
    pretty(&list, &mut buf).map_err(json_error(&path, "Node list"))?;
    buf.push(b'\n');
    w.bytes += write_atomic(&path, &buf)?;
    w.files += 1;

    // Kueue configuration.
    let path = dir.join("kueue.yaml");
    let docs = kueue_docs(cl, snap, &mut rng, &mut rv, &mut w);
    w.bytes += write_atomic(&path, &yaml_docs(&docs, &path)?)?;
    w.files += 1;

    // DRA: the device class, claim templates and ResourceSlices.
    let path = dir.join("dra.yaml");
    let docs = dra_docs(seed, cl, snap, &mut rv, &mut w);
    w.bytes += write_atomic(&path, &yaml_docs(&docs, &path)?)?;
    w.files += 1;

    // Streams.
    let mut spills = Vec::with_capacity(Stream::ALL.len());
    for stream in Stream::ALL {
        spills.push(Spill::new(&dir).map_err(|e| SimError::io(dir.join(stream.file()), e))?);
    }
    let mut em = Emitter {
        cl,
        tl,
        sim,
        claims,
        spills,
        kinds: BTreeMap::new(),
        window: *window,
        written: 0,
        scratch: Vec::with_capacity(4096),
        events: Vec::new(),
        seq: 0,
        rng: Rng::stream(seed, tag::EVENTS, 2),
        error: None,
        dir: dir.clone(),
    };
    for j in 0..sim.jobs.len() {
        em.emit_job(j);
        em.emit_workload(j);
    }
    for p in 0..sim.pods.len() {
        em.emit_pod(p);
    }
    em.emit_claims();
    em.emit_nodes_events();
    em.emit_node_versions(&items);
    let Emitter {
        spills,
        kinds,
        written,
        mut events,
        rng: mut ev_rng,
        error,
        ..
    } = em;
    if let Some(e) = error {
        return Err(e);
    }
    for (stream, spill) in Stream::ALL.into_iter().zip(spills) {
        let path = dir.join(stream.file());
        let mut f = crate::out::AtomicFile::create(&path)?;
        spill.copy_sorted(&mut f).map_err(|e| SimError::io(&path, e))?;
        w.bytes += f.commit()?;
        w.files += 1;
    }
    for (kind, n) in kinds {
        *w.objects_by_kind.entry(kind).or_insert(0) += n;
    }
    w.objects += written;

    // Events, written as they are built: the core/v1 List through a lazy `items`, the
    // events.k8s.io/v1 ones to their own file on the way. Names and uids are drawn in time order
    // over both, whatever the window.
    events.sort_unstable_by_key(|e| (e.t, e.seq));
    let path = dir.join("events.json");
    let v1_path = dir.join("events-v1.jsonl");
    let mut core_file = crate::out::AtomicFile::create(&path)?;
    let mut v1_file = crate::out::AtomicFile::create(&v1_path)?;
    let mut v1_error = None;
    let mut line = Vec::with_capacity(4096);
    let items = events.iter().filter_map(|e| {
        let name = format!("{}.{}", e.name, ev_rng.hex(16));
        let uid = ev_rng.uuid();
        // An Event belongs where it was first recorded (a series' later count travels with it).
        if !window.contains_s(e.t) {
            w.count_unwritten("Event");
            return None;
        }
        let o = event_object(e, &name, &uid, resource_version(tl, e.t, e.seq));
        w.count("Event");
        if !e.v1 {
            return Some(o);
        }
        if v1_error.is_none() {
            line.clear();
            let res = serde_json::to_writer(&mut line, &o)
                .map_err(json_error(&v1_path, "event"))
                .and_then(|()| {
                    line.push(b'\n');
                    v1_file.write_all(&line).map_err(|e| SimError::io(&v1_path, e))
                });
            if let Err(e) = res {
                v1_error = Some(e);
            }
        }
        None
    });
    pretty(&LazyList(LazySeq(RefCell::new(Some(items)))), &mut core_file)
        .map_err(write_error(&path, "Event list"))?;
    if let Some(e) = v1_error {
        return Err(e);
    }
    core_file.write_all(b"\n").map_err(|e| SimError::io(&path, e))?;
    w.bytes += core_file.commit()?;
    w.bytes += v1_file.commit()?;
    w.files += 2;
    Ok(w)
}

fn kueue_docs(cl: &Cluster, snap: i64, rng: &mut Rng, rv: &mut u64, w: &mut Written) -> Vec<Value> {
    let mut docs = Vec::new();
    let mut meta = |name: &str, ns: Option<&str>, rng: &mut Rng| {
        *rv += 1;
        let mut m = json!({ "name": name, "uid": rng.uuid(), "resourceVersion": rv.to_string(), "creationTimestamp": rfc3339(snap - 86_400 * 30 - rng.range(0, 86_400 * 20)), "generation": 1 });
        if let Some(ns) = ns {
            m["namespace"] = json!(ns);
        }
        m
    };
    docs.push(json!({ "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": meta("default-flavor", None, rng), "spec": {} }));
    w.count("ResourceFlavor");
    for pool in crate::cluster::POOLS {
        // One flavor still served as v1beta1, as clusters mid-upgrade do.
        let api = if pool == PoolId::T4 {
            "kueue.x-k8s.io/v1beta1"
        } else {
            "kueue.x-k8s.io/v1beta2"
        };
        docs.push(json!({
            "apiVersion": api,
            "kind": "ResourceFlavor",
            "metadata": meta(pool.spec().name, None, rng),
            "spec": {
                "nodeLabels": { "gpuledger.io/pool": pool.spec().name },
                "tolerations": [{ "key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule" }],
            },
        }));
        w.count("ResourceFlavor");
    }
    let cap = |g: Group| crate::schedule::capacity(cl, g) as f64;
    let cpu_total: u32 = cl.nodes.iter().map(|n| n.pool.spec().node_cpu).sum();
    let mem_total: u32 = cl.nodes.iter().map(|n| n.pool.spec().node_mem_gi).sum();
    for (i, &(name, share)) in CLUSTER_QUEUES.iter().enumerate() {
        let v1beta1 = i == CLUSTER_QUEUES.len() - 1;
        let q = |g: Group| (cap(g) * share).round() as u64;
        let gpu_flavors: Vec<Value> = crate::schedule::cq_gpu_flavor_pools(i)
            .iter()
            .map(|&p| json!({ "name": p.spec().name, "resources": [{ "name": "nvidia.com/gpu", "nominalQuota": q(Group::Whole(p)) }] }))
            .collect();
        let mig_resources: Vec<Value> = MigProfile::ALL
            .iter()
            .map(|&p| json!({ "name": p.resource(), "nominalQuota": q(Group::Mig(p)) }))
            .collect();
        let mut spec = json!({
            "namespaceSelector": {},
            "queueingStrategy": "BestEffortFIFO",
            "preemption": {
                "reclaimWithinCohort": "Any",
                "withinClusterQueue": "LowerPriority",
                "borrowWithinCohort": { "policy": "LowerPriority", "maxPriorityThreshold": 100 },
            },
            "flavorFungibility": { "whenCanBorrow": "Borrow", "whenCanPreempt": "TryNextFlavor" },
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory"],
                    "flavors": [{ "name": "default-flavor", "resources": [
                        { "name": "cpu", "nominalQuota": ((cpu_total as f64) * share).round() as u64 },
                        { "name": "memory", "nominalQuota": format!("{}Gi", ((mem_total as f64) * share).round() as u64) },
                    ]}],
                },
                { "coveredResources": ["nvidia.com/gpu"], "flavors": gpu_flavors },
                {
                    "coveredResources": MigProfile::ALL.iter().map(|p| p.resource()).collect::<Vec<_>>(),
                    "flavors": [{ "name": PoolId::A100Mig.spec().name, "resources": mig_resources }],
                },
                // DRA GPUs, under the name Kueue's deviceClassMappings give their device class.
                {
                    "coveredResources": [dra::KUEUE_RESOURCE],
                    "flavors": [{ "name": PoolId::Dra.spec().name, "resources": [{ "name": dra::KUEUE_RESOURCE, "nominalQuota": q(Group::Whole(PoolId::Dra)) }] }],
                },
            ],
        });
        // v1beta2 renamed `cohort` to `cohortName`.
        if v1beta1 {
            spec["cohort"] = json!(COHORT);
        } else {
            spec["cohortName"] = json!(COHORT);
        }
        let mut metadata = meta(name, None, rng);
        // Owners of the quota (docs/accounting.md "Quota"): a team label where the queue is one
        // team's; cq-serving is owned through the configuration's [[quota.owners]], cq-sandbox
        // by nobody (the platform's).
        if let Some(team) = crate::cluster::cluster_queue_owner_label(name) {
            metadata["labels"] = json!({ "team": team });
        }
        docs.push(json!({
            "apiVersion": if v1beta1 { "kueue.x-k8s.io/v1beta1" } else { "kueue.x-k8s.io/v1beta2" },
            "kind": "ClusterQueue",
            "metadata": metadata,
            "spec": spec,
        }));
        w.count("ClusterQueue");
    }
    for ns in NAMESPACES {
        let Some(cq) = ns.cq else { continue };
        let api = if ns.name == "sandbox" {
            "kueue.x-k8s.io/v1beta1"
        } else {
            "kueue.x-k8s.io/v1beta2"
        };
        docs.push(json!({
            "apiVersion": api,
            "kind": "LocalQueue",
            "metadata": meta(LOCAL_QUEUE, Some(ns.name), rng),
            "spec": { "clusterQueue": CLUSTER_QUEUES[cq].0 },
        }));
        w.count("LocalQueue");
    }
    docs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spill_copies_in_time_order() {
        let dir = tempfile::tempdir().unwrap();
        let mut spill = Spill::new(dir.path()).unwrap();
        // Emitted in job order: (t, seq, bytes). Some neighbours in the file are neighbours in
        // time too (copied as one run), others are not; an empty entry changes nothing.
        let pushes: [(i64, u64, &str); 7] = [
            (30, 5, "e\n"),
            (10, 1, "a\n"),
            (10, 2, "b\n"),
            (20, 4, "d-long-line\n"),
            (20, 3, "c\n"),
            (40, 6, ""),
            (10, 0, "0\n"),
        ];
        for (t, seq, b) in pushes {
            spill.push(t, seq, b.as_bytes()).unwrap();
        }
        let mut out = Vec::new();
        assert_eq!(spill.copy_sorted(&mut out).unwrap(), pushes.len());
        assert_eq!(String::from_utf8(out).unwrap(), "0\na\nb\nc\nd-long-line\ne\n");
        // The spill file has no name: nothing is left in the directory.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);

        let mut out = Vec::new();
        assert_eq!(Spill::new(dir.path()).unwrap().copy_sorted(&mut out).unwrap(), 0);
        assert!(out.is_empty());
    }

    #[test]
    fn lazy_list_matches_the_value() {
        let items = vec![json!({ "b": 1, "a": [1, 2] }), json!({ "z": null })];
        for items in [items, Vec::new()] {
            let whole = json!({ "apiVersion": "v1", "kind": "List", "items": &items, "metadata": { "resourceVersion": "" } });
            let mut want = Vec::new();
            pretty(&whole, &mut want).unwrap();
            let mut got = Vec::new();
            let lazy = items.iter().filter(|_| true);
            pretty(&LazyList(LazySeq(RefCell::new(Some(lazy)))), &mut got).unwrap();
            assert_eq!(String::from_utf8(got).unwrap(), String::from_utf8(want).unwrap());
        }
    }
}
