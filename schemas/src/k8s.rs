//! Tables fed by Kubernetes, Kueue and DRA (`resource.k8s.io`) objects (kubectl JSON/YAML, watch
//! streams, live watches).
//!
//! `k8s_objects` keeps every object version whole; the typed tables pull out the fields the ledger
//! joins on, one row per object version (and per condition for `workload_conditions`; per
//! allocated device and consumer for `resource_claims`; per request for
//! `resource_claim_templates`; per device for `resource_slices`).

use crate::ColumnType::*;
use crate::{Column, DedupScope, Table, col};

/// Columns every object-derived table starts with, in this order.
macro_rules! version_columns {
    () => {
        [
            col("observed_at", Timestamp, false, "When this version was observed: the latest timestamp the object itself records (creation, conditions, status times), never earlier than the version before it in the same stream; the file's modification time when the object records none"),
            col("seq", Int64, false, "Position of this version in its source stream (0-based); orders versions with equal observed_at"),
            col("event_type", Utf8, false, "Watch event type (ADDED, MODIFIED, DELETED), or SNAPSHOT for an object read from a List or a plain object file"),
            col("resource_version", Utf8, true, "metadata.resourceVersion (opaque; only recognises the same version seen twice)"),
            col("content_hash", Utf8, false, "Hash of the object's canonical JSON (managedFields removed): recognises the same version seen twice when resourceVersion is absent"),
        ]
    };
}

const fn cat<const A: usize, const B: usize, const N: usize>(a: [Column; A], b: [Column; B]) -> [Column; N] {
    assert!(A + B == N);
    let mut out = [a[0]; N];
    let mut i = 0;
    while i < A {
        out[i] = a[i];
        i += 1;
    }
    while i < N {
        out[i] = b[i - A];
        i += 1;
    }
    out
}

const OBJ: [Column; 5] = version_columns!();

const K8S_OBJECTS_COLUMNS: [Column; 16] = cat(
    OBJ,
    [
        col("api_version", Utf8, false, "apiVersion, e.g. v1, batch/v1, kueue.x-k8s.io/v1beta2"),
        col("kind", Utf8, false, "kind, e.g. Pod, Workload"),
        col("namespace", Utf8, true, "metadata.namespace; null for cluster-scoped objects"),
        col("name", Utf8, false, "metadata.name"),
        col("uid", Utf8, true, "metadata.uid"),
        col("owner_kind", Utf8, true, "Kind of the controlling ownerReference (else the first one)"),
        col("owner_name", Utf8, true, "Name of that owner"),
        col("owner_uid", Utf8, true, "UID of that owner"),
        col("labels", Utf8, true, "metadata.labels as a JSON object"),
        col("annotations", Utf8, true, "metadata.annotations as a JSON object"),
        col("object", Utf8, false, "The whole object as JSON text (metadata.managedFields removed)"),
    ],
);

pub const K8S_OBJECTS: Table = Table {
    name: "k8s_objects",
    doc: "Every version of every Kubernetes/Kueue object seen, whole, with its identity pulled out",
    columns: &K8S_OBJECTS_COLUMNS,
    partition_column: "observed_at",
    sort_by: &["kind", "namespace", "name", "observed_at", "seq"],
    key: &["kind", "namespace", "name", "uid", "resource_version", "event_type", "content_hash"],
    dedup: DedupScope::Table,
};

const PODS_COLUMNS: [Column; 25] = cat(
    OBJ,
    [
        col("namespace", Utf8, false, "metadata.namespace"),
        col("name", Utf8, false, "metadata.name"),
        col("uid", Utf8, true, "metadata.uid"),
        col("node_name", Utf8, true, "spec.nodeName (null until scheduled)"),
        col("phase", Utf8, true, "status.phase: Pending, Running, Succeeded, Failed, Unknown"),
        col("reason", Utf8, true, "status.reason, e.g. Evicted"),
        col("owner_kind", Utf8, true, "Kind of the controlling ownerReference (Job, JobSet, RayJob, ...)"),
        col("owner_name", Utf8, true, "Name of that owner"),
        col("owner_uid", Utf8, true, "UID of that owner"),
        col("job_name", Utf8, true, "Label batch.kubernetes.io/job-name (or job-name)"),
        col("workload_name", Utf8, true, "Annotation kueue.x-k8s.io/workload (Kueue's plain-pod integration)"),
        col("queue_name", Utf8, true, "Label kueue.x-k8s.io/queue-name"),
        col("gpu_request", Int64, true, "Sum over containers of nvidia.com/gpu limits (else requests)"),
        col("start_time", Timestamp, true, "status.startTime"),
        col("deletion_timestamp", Timestamp, true, "metadata.deletionTimestamp"),
        col("disruption_target", Boolean, false, "True when the pod has a DisruptionTarget condition with status True (preempted, evicted, node drained)"),
        col("disruption_reason", Utf8, true, "Reason of that DisruptionTarget condition, e.g. PreemptionByScheduler, EvictionByEvictionAPI"),
        col("last_termination_reason", Utf8, true, "Reason of the most recent container termination (OOMKilled, Error, Completed), current state first, else lastState"),
        col("last_exit_code", Int32, true, "Exit code of that termination"),
        col("labels", Utf8, true, "metadata.labels as a JSON object"),
    ],
);

pub const PODS: Table = Table {
    name: "pods",
    doc: "Pod versions: where each ran, who owns it, how it ended",
    columns: &PODS_COLUMNS,
    partition_column: "observed_at",
    sort_by: &["namespace", "name", "observed_at", "seq"],
    key: &["namespace", "name", "uid", "resource_version", "event_type", "content_hash"],
    dedup: DedupScope::Table,
};

const NODES_COLUMNS: [Column; 13] = cat(
    OBJ,
    [
        col("name", Utf8, false, "metadata.name"),
        col("uid", Utf8, true, "metadata.uid"),
        col("hostname_label", Utf8, true, "Label kubernetes.io/hostname"),
        col("gpu_product", Utf8, true, "Label nvidia.com/gpu.product (GPU feature discovery)"),
        col("gpu_capacity", Int64, true, "status.capacity nvidia.com/gpu"),
        col("ready", Boolean, true, "Ready condition is True"),
        col("unschedulable", Boolean, false, "spec.unschedulable"),
        col("labels", Utf8, true, "metadata.labels as a JSON object (node pools are read from here)"),
    ],
);

pub const NODES: Table = Table {
    name: "nodes",
    doc: "Node versions: node pools and GPU models by label, capacity, readiness",
    columns: &NODES_COLUMNS,
    partition_column: "observed_at",
    sort_by: &["name", "observed_at", "seq"],
    key: &["name", "uid", "resource_version", "event_type", "content_hash"],
    dedup: DedupScope::Table,
};

const NAMESPACES_COLUMNS: [Column; 10] = cat(
    OBJ,
    [
        col("name", Utf8, false, "metadata.name"),
        col("uid", Utf8, true, "metadata.uid"),
        col("phase", Utf8, true, "status.phase"),
        col("labels", Utf8, true, "metadata.labels as a JSON object (the team label is read from here)"),
        col("annotations", Utf8, true, "metadata.annotations as a JSON object"),
    ],
);

pub const NAMESPACES: Table = Table {
    name: "namespaces",
    doc: "Namespace versions: team labels",
    columns: &NAMESPACES_COLUMNS,
    partition_column: "observed_at",
    sort_by: &["name", "observed_at", "seq"],
    key: &["name", "uid", "resource_version", "event_type", "content_hash"],
    dedup: DedupScope::Table,
};

const JOBS_COLUMNS: [Column; 24] = cat(
    OBJ,
    [
        col("api_version", Utf8, false, "apiVersion (batch/v1, jobset.x-k8s.io/v1alpha2, ray.io/v1, kubeflow.org/v1, ...)"),
        col("kind", Utf8, false, "Job, JobSet, RayJob, PyTorchJob, ..."),
        col("namespace", Utf8, false, "metadata.namespace"),
        col("name", Utf8, false, "metadata.name"),
        col("uid", Utf8, true, "metadata.uid"),
        col("owner_kind", Utf8, true, "Kind of the controlling ownerReference (a Job owned by a JobSet, say)"),
        col("owner_name", Utf8, true, "Name of that owner"),
        col("owner_uid", Utf8, true, "UID of that owner"),
        col("queue_name", Utf8, true, "Label kueue.x-k8s.io/queue-name"),
        col("suspend", Boolean, true, "spec.suspend (Kueue suspends a job until admitted)"),
        col("start_time", Timestamp, true, "status.startTime"),
        col("completion_time", Timestamp, true, "status.completionTime"),
        col("succeeded", Int64, true, "status.succeeded"),
        col("failed", Int64, true, "status.failed"),
        col("outcome", Utf8, true, "Complete or Failed when that condition is True, else null"),
        col("outcome_reason", Utf8, true, "Reason of that condition, e.g. BackoffLimitExceeded"),
        col("labels", Utf8, true, "metadata.labels as a JSON object"),
        col("annotations", Utf8, true, "metadata.annotations as a JSON object (gpuledger.io/accepted-units, gpuledger.io/unit)"),
        col("batch_job", Boolean, false, "True for batch/v1 Job; false for other job kinds recognised by their owner role"),
    ],
);

pub const JOBS: Table = Table {
    name: "jobs",
    doc: "Job versions (batch/v1 Job and the other job kinds Kueue admits): outcome and annotations",
    columns: &JOBS_COLUMNS,
    partition_column: "observed_at",
    sort_by: &["namespace", "name", "observed_at", "seq"],
    key: &["kind", "namespace", "name", "uid", "resource_version", "event_type", "content_hash"],
    dedup: DedupScope::Table,
};

const WORKLOADS_COLUMNS: [Column; 28] = cat(
    OBJ,
    [
        col("api_version", Utf8, false, "kueue.x-k8s.io/v1beta1 or v1beta2"),
        col("namespace", Utf8, false, "metadata.namespace"),
        col("name", Utf8, false, "metadata.name"),
        col("uid", Utf8, true, "metadata.uid"),
        col("created_at", Timestamp, true, "metadata.creationTimestamp"),
        col("owner_kind", Utf8, true, "Kind of the job that owns the Workload"),
        col("owner_name", Utf8, true, "Name of that job"),
        col("owner_uid", Utf8, true, "UID of that job"),
        col("queue_name", Utf8, true, "spec.queueName (the LocalQueue)"),
        col("cluster_queue", Utf8, true, "status.admission.clusterQueue"),
        col("priority", Int64, true, "spec.priority"),
        col("priority_class", Utf8, true, "spec.priorityClassName"),
        col("flavors", Utf8, true, "Assigned flavors per pod set and resource, JSON: {\"podset\":{\"nvidia.com/gpu\":\"flavor\"}}"),
        col("requeue_count", Int64, true, "status.requeueState.count"),
        col("accumulated_execution_seconds", Int64, true, "status.accumulatedPastExecutionTimeSeconds (v1beta1 also spelt accumulatedPastExexcutionTimeSeconds)"),
        col("labels", Utf8, true, "metadata.labels as a JSON object"),
        col("annotations", Utf8, true, "metadata.annotations as a JSON object (gpuledger.io/accepted-units, gpuledger.io/unit)"),
        col("gpu_count", Int64, true, "GPUs the Workload asks for: sum over pod sets of count x (nvidia.com/gpu + nvidia.com/mig-*) per pod"),
        col("whole_gpu_count", Int64, true, "Of them, whole GPUs (nvidia.com/gpu, MIG slices left out): what an unallocated GPU could serve"),
        col("gpu_usage", Utf8, true, "nvidia.com/gpu quota the admission uses per flavor, JSON {\"<flavor>\":\"<units>\"}: status.admission.podSetAssignments resourceUsage (else count x the pod set's request); null when not admitted"),
        col("claim_templates", Utf8, true, "DRA claims the Workload's pods make from templates, JSON {\"<ResourceClaimTemplate name>\":\"<pods>\"}: over pod sets, the pod set's count for each spec.resourceClaims entry naming a resourceClaimTemplateName (also the pre-1.31 source.resourceClaimTemplateName); null when none"),
        col("pod_resources", Utf8, true, "Extended resources the Workload asks for, JSON {\"<resource>\":\"<units>\"}: over pod sets, count x the per-pod sum over containers of each resource whose name holds a '/' (nvidia.com/gpu, a DeviceClass extendedResourceName...), limit else request, whole quantities only; null when none"),
        col("usage_by_resource", Utf8, true, "Quota the admission uses of every resource, JSON {\"<flavor> <resource>\":\"<units>\"}: status.admission.podSetAssignments flavors and resourceUsage (whole units); null when not admitted"),
    ],
);

pub const WORKLOADS: Table = Table {
    name: "workloads",
    doc: "Kueue Workload versions: queue, admission, flavors, requeues",
    columns: &WORKLOADS_COLUMNS,
    partition_column: "observed_at",
    sort_by: &["namespace", "name", "observed_at", "seq"],
    key: &["namespace", "name", "uid", "resource_version", "event_type", "content_hash"],
    dedup: DedupScope::Table,
};

const WORKLOAD_CONDITIONS_COLUMNS: [Column; 13] = cat(
    OBJ,
    [
        col("namespace", Utf8, false, "Workload namespace"),
        col("name", Utf8, false, "Workload name"),
        col("uid", Utf8, true, "Workload uid"),
        col("type", Utf8, false, "Condition type: QuotaReserved, Admitted, Evicted, Preempted, Requeued, PodsReady, Finished, ..."),
        col("status", Utf8, false, "True, False or Unknown"),
        col("reason", Utf8, true, "Condition reason, e.g. Succeeded, Failed, Preempted, InactiveWorkload"),
        col("message", Utf8, true, "Condition message"),
        col("last_transition_time", Timestamp, true, "lastTransitionTime"),
    ],
);

pub const WORKLOAD_CONDITIONS: Table = Table {
    name: "workload_conditions",
    doc: "One row per condition per Workload version: the admission / eviction / finish history",
    columns: &WORKLOAD_CONDITIONS_COLUMNS,
    partition_column: "observed_at",
    sort_by: &["namespace", "name", "last_transition_time", "type"],
    key: &["namespace", "name", "uid", "resource_version", "event_type", "content_hash", "type"],
    dedup: DedupScope::Table,
};

const K8S_EVENTS_COLUMNS: [Column; 20] = cat(
    OBJ,
    [
        col("api_version", Utf8, false, "v1 (core) or events.k8s.io/v1"),
        col("namespace", Utf8, true, "metadata.namespace of the Event"),
        col("name", Utf8, false, "metadata.name of the Event"),
        col("uid", Utf8, true, "metadata.uid of the Event"),
        col("type", Utf8, true, "Normal or Warning"),
        col("reason", Utf8, true, "reason, e.g. FailedScheduling, Evicted, Preempted, BackOff, OOMKilling"),
        col("message", Utf8, true, "message (core/v1) or note (events.k8s.io/v1)"),
        col("regarding_kind", Utf8, true, "involvedObject/regarding kind"),
        col("regarding_namespace", Utf8, true, "involvedObject/regarding namespace"),
        col("regarding_name", Utf8, true, "involvedObject/regarding name"),
        col("regarding_uid", Utf8, true, "involvedObject/regarding uid"),
        col("first_seen", Timestamp, true, "firstTimestamp, else eventTime"),
        col("last_seen", Timestamp, true, "series.lastObservedTime, else lastTimestamp, else eventTime"),
        col("count", Int64, true, "count (core/v1) or series.count"),
        col("reporting_controller", Utf8, true, "reportingController / reportingComponent, else source.component"),
    ],
);

pub const K8S_EVENTS: Table = Table {
    name: "k8s_events",
    doc: "Kubernetes Events (core/v1 and events.k8s.io/v1) in one shape: why things failed",
    columns: &K8S_EVENTS_COLUMNS,
    partition_column: "observed_at",
    sort_by: &["regarding_namespace", "regarding_name", "observed_at", "seq"],
    key: &["namespace", "name", "uid", "resource_version", "event_type", "content_hash"],
    dedup: DedupScope::Table,
};

const KUEUE_QUEUES_COLUMNS: [Column; 19] = cat(
    OBJ,
    [
        col("api_version", Utf8, false, "kueue.x-k8s.io/v1beta1 or v1beta2"),
        col("kind", Utf8, false, "LocalQueue, ClusterQueue, ResourceFlavor or WorkloadPriorityClass"),
        col("namespace", Utf8, true, "Namespace (LocalQueue only)"),
        col("name", Utf8, false, "metadata.name"),
        col("uid", Utf8, true, "metadata.uid"),
        col("cluster_queue", Utf8, true, "LocalQueue: spec.clusterQueue"),
        col("cohort", Utf8, true, "ClusterQueue: spec.cohort (v1beta1) or spec.cohortName (v1beta2)"),
        col("spec", Utf8, true, "spec as JSON (quotas, preemption policy, ResourceFlavor nodeLabels); for a WorkloadPriorityClass {\"value\",\"description\"}"),
        col("gpu_flavors", Utf8, true, "ClusterQueue: the ResourceFlavors its resource groups covering nvidia.com/gpu list, comma-separated, in order"),
        col("node_labels", Utf8, true, "ResourceFlavor: spec.nodeLabels as a JSON object (the nodes the flavor selects); null when it has none"),
        col("labels", Utf8, true, "metadata.labels as a JSON object (a ClusterQueue's owner team label)"),
        col("gpu_nominal", Utf8, true, "ClusterQueue: nominalQuota of nvidia.com/gpu per flavor, JSON {\"<flavor>\":\"<units>\"} (whole units)"),
        col("flavors_by_resource", Utf8, true, "ClusterQueue: the flavors of every resource its resource groups cover, JSON {\"<resource>\":\"<flavor>,<flavor>\"} in the order Kueue tries them (a name Kueue's deviceClassMappings count DRA devices as is one of them)"),
        col("nominal_by_resource", Utf8, true, "ClusterQueue: nominalQuota of every covered resource with a whole-number quota, JSON {\"<flavor> <resource>\":\"<units>\"}"),
    ],
);

pub const KUEUE_QUEUES: Table = Table {
    name: "kueue_queues",
    doc: "Kueue LocalQueue, ClusterQueue, ResourceFlavor and WorkloadPriorityClass versions",
    columns: &KUEUE_QUEUES_COLUMNS,
    partition_column: "observed_at",
    sort_by: &["kind", "namespace", "name", "observed_at", "seq"],
    key: &["kind", "namespace", "name", "uid", "resource_version", "event_type", "content_hash"],
    dedup: DedupScope::Table,
};

const RESOURCE_CLAIMS_COLUMNS: [Column; 23] = cat(
    OBJ,
    [
        col("namespace", Utf8, false, "metadata.namespace"),
        col("name", Utf8, false, "metadata.name"),
        col("uid", Utf8, true, "metadata.uid"),
        col("owner_kind", Utf8, true, "Kind of the controlling ownerReference (else the first one): Pod for a claim made from a template"),
        col("owner_name", Utf8, true, "Name of that owner"),
        col("owner_uid", Utf8, true, "UID of that owner"),
        col("request", Utf8, true, "status.allocation.devices.results[].request: the request the device was allocated for (<request>/<subrequest> when a firstAvailable alternative was chosen); null when not allocated"),
        col("device_class", Utf8, true, "deviceClassName of the spec request (or subrequest) that result names"),
        col("driver", Utf8, true, "results[].driver, e.g. gpu.nvidia.com"),
        col("pool", Utf8, true, "results[].pool (a node's pool: usually the node name)"),
        col("device", Utf8, true, "results[].device: the device name in that pool's ResourceSlice"),
        col("share_id", Utf8, true, "results[].shareID: set when the device is shared by several allocations (consumable capacity)"),
        col("consumed_capacity", Utf8, true, "results[].consumedCapacity as JSON {\"<name>\":\"<quantity>\"}; null when absent"),
        col("reserved_resource", Utf8, true, "status.reservedFor[].resource of the consumer (pods), in the claim's namespace"),
        col("reserved_name", Utf8, true, "status.reservedFor[].name of the consumer"),
        col("reserved_uid", Utf8, true, "status.reservedFor[].uid of the consumer"),
        col("reserved_count", Int64, false, "Number of status.reservedFor entries in this version (0 when none): the consumers sharing the claim"),
        col("deletion_timestamp", Timestamp, true, "metadata.deletionTimestamp"),
    ],
);

pub const RESOURCE_CLAIMS: Table = Table {
    name: "resource_claims",
    doc: "DRA ResourceClaim versions: one row per allocated device result per reserved consumer (a version with neither gives one row with those columns null)",
    columns: &RESOURCE_CLAIMS_COLUMNS,
    partition_column: "observed_at",
    sort_by: &["namespace", "name", "observed_at", "seq"],
    key: &["namespace", "name", "uid", "resource_version", "event_type", "content_hash", "request", "device", "reserved_name"],
    dedup: DedupScope::Table,
};

const RESOURCE_CLAIM_TEMPLATES_COLUMNS: [Column; 12] = cat(
    OBJ,
    [
        col("namespace", Utf8, false, "metadata.namespace"),
        col("name", Utf8, false, "metadata.name (what a pod's spec.resourceClaims[].resourceClaimTemplateName names)"),
        col("uid", Utf8, true, "metadata.uid"),
        col("request", Utf8, true, "Name of a device request of spec.spec.devices.requests (<request>/<subrequest> for each firstAvailable alternative); null when the template has no requests"),
        col("device_class", Utf8, true, "deviceClassName of that request"),
        col("allocation_mode", Utf8, true, "ExactCount (the default when absent) or All"),
        col("count", Int64, true, "Devices asked for: count, 1 when absent in ExactCount mode; null in All mode"),
    ],
);

pub const RESOURCE_CLAIM_TEMPLATES: Table = Table {
    name: "resource_claim_templates",
    doc: "DRA ResourceClaimTemplate versions: one row per device request (or firstAvailable alternative)",
    columns: &RESOURCE_CLAIM_TEMPLATES_COLUMNS,
    partition_column: "observed_at",
    sort_by: &["namespace", "name", "observed_at", "seq"],
    key: &["namespace", "name", "uid", "resource_version", "event_type", "content_hash", "request"],
    dedup: DedupScope::Table,
};

const RESOURCE_SLICES_COLUMNS: [Column; 19] = cat(
    OBJ,
    [
        col("name", Utf8, false, "metadata.name"),
        col("uid", Utf8, true, "metadata.uid"),
        col("node_name", Utf8, true, "spec.nodeName: the node whose devices the slice lists (null for devices reachable from several nodes)"),
        col("driver", Utf8, true, "spec.driver, e.g. gpu.nvidia.com"),
        col("pool", Utf8, true, "spec.pool.name"),
        col("pool_generation", Int64, true, "spec.pool.generation: slices of an older generation of the pool are stale"),
        col("device", Utf8, true, "spec.devices[].name; null for a slice without devices"),
        col("device_type", Utf8, true, "Attribute type (the part after the last '/' of its name): gpu, mig, ..."),
        col("uuid", Utf8, true, "Attribute uuid: GPU-... for a whole GPU, MIG-... for a MIG device (as DCGM's UUID label writes the GPU)"),
        col("parent_uuid", Utf8, true, "Attribute parentUUID: the GPU a MIG device is carved from"),
        col("mig_profile", Utf8, true, "Attribute profile of a MIG device, e.g. 1g.10gb"),
        col("product_name", Utf8, true, "Attribute productName, e.g. NVIDIA H100 80GB HBM3"),
        col("attributes", Utf8, true, "Every attribute of the device as JSON {\"<name as written>\": value}, the value plain (string, number, boolean or version string)"),
        col("capacity", Utf8, true, "The device's capacity as JSON {\"<name>\":\"<quantity>\"}"),
    ],
);

pub const RESOURCE_SLICES: Table = Table {
    name: "resource_slices",
    doc: "DRA ResourceSlice versions: one row per device a driver publishes (its GPU UUID, MIG parent and profile, capacity)",
    columns: &RESOURCE_SLICES_COLUMNS,
    partition_column: "observed_at",
    sort_by: &["name", "observed_at", "seq"],
    key: &["name", "uid", "resource_version", "event_type", "content_hash", "device"],
    dedup: DedupScope::Table,
};

const DEVICE_CLASSES_COLUMNS: [Column; 10] = cat(
    OBJ,
    [
        col("name", Utf8, false, "metadata.name (what a request's deviceClassName names)"),
        col("uid", Utf8, true, "metadata.uid"),
        col("extended_resource_name", Utf8, true, "spec.extendedResourceName: the extended resource (e.g. example.com/gpu) pods may ask for to get a device of this class"),
        col("selectors", Utf8, true, "spec.selectors as JSON"),
        col("driver", Utf8, true, "The driver the selectors pin: X of a CEL expression containing device.driver == \"X\" (or 'X'), when exactly one such driver is named; else null"),
    ],
);

pub const DEVICE_CLASSES: Table = Table {
    name: "device_classes",
    doc: "DRA DeviceClass versions: which driver (and extended resource name) a class stands for",
    columns: &DEVICE_CLASSES_COLUMNS,
    partition_column: "observed_at",
    sort_by: &["name", "observed_at", "seq"],
    key: &["name", "uid", "resource_version", "event_type", "content_hash"],
    dedup: DedupScope::Table,
};

/// How an object version reached the collector: a watch event's type, or a snapshot (a List item or a
/// plain object). Stored as its name in `k8s_objects.event_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
    Snapshot,
}

impl EventType {
    /// The name in watch streams and in the store.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
            EventType::Snapshot => "SNAPSHOT",
        }
    }

    /// The type a stored or streamed name stands for; `None` for others (BOOKMARK, ERROR...).
    pub fn parse(name: &str) -> Option<EventType> {
        [EventType::Added, EventType::Modified, EventType::Deleted, EventType::Snapshot].into_iter().find(|t| t.as_str() == name)
    }
}
