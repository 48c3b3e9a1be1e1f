//! Object versions -> `k8s_objects` and the typed tables (`pods`, `nodes`, `namespaces`, `jobs`,
//! `workloads`, `workload_conditions`, `k8s_events`, `kueue_queues`, and the DRA tables
//! `resource_claims`, `resource_claim_templates`, `resource_slices`, `device_classes`).
//!
//! Every recognised version lands whole in `k8s_objects` and, pulled apart, in the one typed table
//! its kind belongs to; the columns and what each means are defined in `gpuledger-schemas`. Rows are
//! filled by column name, so the order of the columns is the schema's alone.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use arrow::array::{ArrayRef, BooleanArray, Int32Array, Int64Array, StringArray, TimestampMillisecondArray};
use arrow::error::ArrowError;
use arrow::record_batch::RecordBatch;
use gpuledger_schemas::{ColumnType, EventType, Table};
use serde_json::{Map, Value};

use crate::diag::{Diagnostics, Position};
use crate::error::{Error, Result};
use crate::labels::push_json_string;
use crate::object::{ObjectVersion, parse_time_ms};
use crate::tables::TableBatch;

/// Accumulates object versions and builds one batch per table.
pub struct K8sTables {
    /// Objects by kind (for the run summary), including unknown kinds.
    pub kinds: BTreeMap<String, u64>,
    objects: Rows,
    pods: Rows,
    nodes: Rows,
    namespaces: Rows,
    jobs: Rows,
    workloads: Rows,
    workload_conditions: Rows,
    events: Rows,
    queues: Rows,
    claims: Rows,
    claim_templates: Rows,
    slices: Rows,
    device_classes: Rows,
}

impl Default for K8sTables {
    fn default() -> Self {
        Self::new()
    }
}

/// What a recognised kind turns into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Pod,
    Node,
    Namespace,
    /// `batch_job` is true for batch/v1 Job only.
    Job {
        batch_job: bool,
    },
    Event,
    Workload,
    /// LocalQueue, ClusterQueue, ResourceFlavor, WorkloadPriorityClass.
    Queue,
    /// resource.k8s.io (Dynamic Resource Allocation), any served version: the layouts differ
    /// and are told apart by the fields present, not the version.
    ResourceClaim,
    ResourceClaimTemplate,
    ResourceSlice,
    DeviceClass,
}

/// Job kinds Kueue admits besides batch/v1 Job, by API group.
const OTHER_JOB_KINDS: &[(&str, &[&str])] = &[
    ("jobset.x-k8s.io", &["JobSet"]),
    ("ray.io", &["RayJob", "RayCluster"]),
    (
        "kubeflow.org",
        &["PyTorchJob", "TFJob", "MPIJob", "XGBoostJob", "PaddleJob", "JAXJob"],
    ),
    ("trainer.kubeflow.org", &["TrainJob"]),
    ("workload.codeflare.dev", &["AppWrapper"]),
    ("leaderworkerset.x-k8s.io", &["LeaderWorkerSet"]),
];

fn classify(api_version: &str, kind: &str) -> Option<Kind> {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    match (group, version, kind) {
        ("", "v1", "Pod") => Some(Kind::Pod),
        ("", "v1", "Node") => Some(Kind::Node),
        ("", "v1", "Namespace") => Some(Kind::Namespace),
        ("", "v1", "Event") | ("events.k8s.io", "v1" | "v1beta1", "Event") => Some(Kind::Event),
        ("batch", "v1", "Job") => Some(Kind::Job { batch_job: true }),
        ("kueue.x-k8s.io", "v1beta1" | "v1beta2", "Workload") => Some(Kind::Workload),
        ("kueue.x-k8s.io", "v1beta1" | "v1beta2", "LocalQueue" | "ClusterQueue" | "ResourceFlavor" | "WorkloadPriorityClass") => Some(Kind::Queue),
        ("resource.k8s.io", "v1" | "v1beta2" | "v1beta1", "ResourceClaim") => Some(Kind::ResourceClaim),
        ("resource.k8s.io", "v1" | "v1beta2" | "v1beta1", "ResourceClaimTemplate") => Some(Kind::ResourceClaimTemplate),
        ("resource.k8s.io", "v1" | "v1beta2" | "v1beta1", "ResourceSlice") => Some(Kind::ResourceSlice),
        ("resource.k8s.io", "v1" | "v1beta2" | "v1beta1", "DeviceClass") => Some(Kind::DeviceClass),
        _ => OTHER_JOB_KINDS
            .iter()
            .any(|(g, kinds)| *g == group && kinds.contains(&kind))
            .then_some(Kind::Job { batch_job: false }),
    }
}

impl K8sTables {
    pub fn new() -> Self {
        Self {
            kinds: BTreeMap::new(),
            objects: Rows::new("k8s_objects"),
            pods: Rows::new("pods"),
            nodes: Rows::new("nodes"),
            namespaces: Rows::new("namespaces"),
            jobs: Rows::new("jobs"),
            workloads: Rows::new("workloads"),
            workload_conditions: Rows::new("workload_conditions"),
            events: Rows::new("k8s_events"),
            queues: Rows::new("kueue_queues"),
            claims: Rows::new("resource_claims"),
            claim_templates: Rows::new("resource_claim_templates"),
            slices: Rows::new("resource_slices"),
            device_classes: Rows::new("device_classes"),
        }
    }

    /// Adds one object version. An object that cannot be used is reported and skipped.
    pub fn push(&mut self, source: &Path, v: &ObjectVersion, diags: &mut Diagnostics) {
        let obj = &v.object;
        let (Some(api_version), Some(kind_name)) = (str_at(obj, &["apiVersion"]), str_at(obj, &["kind"])) else {
            diags.error(
                source,
                Position::File,
                "not_an_object",
                "object version without apiVersion and kind",
            );
            return;
        };
        let Some(kind) = classify(api_version, kind_name) else {
            *self.kinds.entry(format!("{api_version}/{kind_name}")).or_default() += 1;
            diags.skip("unknown_kind", 1);
            return;
        };
        let Some(name) = str_at(obj, &["metadata", "name"]).filter(|n| !n.is_empty()) else {
            diags.error(
                source,
                Position::File,
                "missing_name",
                format!("{api_version} {kind_name} has no metadata.name"),
            );
            return;
        };
        if let Some(problem) = bad_field(obj, &kind) {
            let namespace = str_at(obj, &["metadata", "namespace"]).map(|n| format!("{n}/")).unwrap_or_default();
            diags.error(source, Position::File, "bad_field", format!("{kind_name} {namespace}{name}: {problem}; the version is skipped"));
            return;
        }
        *self.kinds.entry(kind_name.to_owned()).or_default() += 1;

        let object_json = canonical_json(&without_managed_fields(obj));
        let id = Identity {
            observed_at: v.observed_at_ms,
            seq: v.seq,
            event_type: v.event_type,
            resource_version: str_at(obj, &["metadata", "resourceVersion"]).map(str::to_owned),
            content_hash: format!("{:016x}", xxhash_rust::xxh3::xxh3_64(object_json.as_bytes())),
            api_version: api_version.to_owned(),
            kind: kind_name.to_owned(),
            namespace: str_at(obj, &["metadata", "namespace"]).filter(|n| !n.is_empty()).map(str::to_owned),
            name: name.to_owned(),
            uid: string(obj, &["metadata", "uid"]),
            owner: owner_of(obj),
            labels: json_at(obj, &["metadata", "labels"]),
            annotations: json_at(obj, &["metadata", "annotations"]),
        };

        let mut row = id.version_cells();
        row.extend([
            ("api_version", text(&id.api_version)),
            ("kind", text(&id.kind)),
            ("namespace", opt_text(&id.namespace)),
            ("name", text(&id.name)),
            ("uid", opt_text(&id.uid)),
            ("owner_kind", opt_text(&id.owner.kind)),
            ("owner_name", opt_text(&id.owner.name)),
            ("owner_uid", opt_text(&id.owner.uid)),
            ("labels", opt_text(&id.labels)),
            ("annotations", opt_text(&id.annotations)),
            ("object", Cell::Str(object_json)),
        ]);
        self.objects.add(row);

        match kind {
            Kind::Pod => self.push_pod(source, &id, obj, diags),
            Kind::Node => self.push_node(&id, obj),
            Kind::Namespace => self.push_namespace(&id, obj),
            Kind::Job { batch_job } => self.push_job(source, &id, obj, batch_job, diags),
            Kind::Event => self.push_event(&id, obj),
            Kind::Workload => self.push_workload(source, &id, obj, diags),
            Kind::Queue => self.push_queue(&id, obj),
            Kind::ResourceClaim => self.push_claim(source, &id, obj, diags),
            Kind::ResourceClaimTemplate => self.push_claim_template(source, &id, obj, diags),
            Kind::ResourceSlice => self.push_slice(&id, obj),
            Kind::DeviceClass => self.push_device_class(&id, obj),
        }
    }

    /// Object versions stored so far (rows of `k8s_objects`).
    pub fn len(&self) -> usize {
        self.objects.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Object versions pushed by kind since the counts were `before` (a clone of [`K8sTables::kinds`]).
    pub fn kinds_since(&self, before: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
        self.kinds
            .iter()
            .filter_map(|(k, n)| {
                let delta = n - before.get(k).copied().unwrap_or(0);
                (delta > 0).then(|| (k.clone(), delta))
            })
            .collect()
    }

    /// Builds the batches of the rows pushed so far and empties the tables; the counts by
    /// kind go on, so that a caller can hand rows over in the middle of a long input.
    pub fn take_batches(&mut self) -> Result<Vec<TableBatch>> {
        if self.is_empty() {
            return Ok(Vec::new());
        }
        let kinds = std::mem::take(&mut self.kinds);
        std::mem::replace(self, K8sTables { kinds, ..K8sTables::new() }).finish()
    }

    /// Builds the batches (tables with no rows are left out).
    pub fn finish(self) -> Result<Vec<TableBatch>> {
        let all = [
            self.objects,
            self.pods,
            self.nodes,
            self.namespaces,
            self.jobs,
            self.workloads,
            self.workload_conditions,
            self.events,
            self.queues,
            self.claims,
            self.claim_templates,
            self.slices,
            self.device_classes,
        ];
        let mut out = Vec::new();
        for rows in all {
            if let Some(batch) = rows.finish()? {
                out.push(batch);
            }
        }
        Ok(out)
    }

    fn push_pod(&mut self, source: &Path, id: &Identity, obj: &Value, diags: &mut Diagnostics) {
        let (disruption_target, disruption_reason) = match condition(obj, "DisruptionTarget") {
            Some(c) if str_at(c, &["status"]) == Some("True") => (true, string(c, &["reason"])),
            _ => (false, None),
        };
        let (last_reason, last_exit) = last_termination(obj);
        let mut row = id.version_cells();
        row.extend([
            ("namespace", text(&id.namespace_or_default(source, diags))),
            ("name", text(&id.name)),
            ("uid", opt_text(&id.uid)),
            ("node_name", opt_text(&string(obj, &["spec", "nodeName"]))),
            ("phase", opt_text(&string(obj, &["status", "phase"]))),
            ("reason", opt_text(&string(obj, &["status", "reason"]))),
            ("owner_kind", opt_text(&id.owner.kind)),
            ("owner_name", opt_text(&id.owner.name)),
            ("owner_uid", opt_text(&id.owner.uid)),
            (
                "job_name",
                opt_text(&label(obj, "batch.kubernetes.io/job-name").or_else(|| label(obj, "job-name"))),
            ),
            (
                "workload_name",
                opt_text(&string(obj, &["metadata", "annotations", "kueue.x-k8s.io/workload"])),
            ),
            ("queue_name", opt_text(&label(obj, "kueue.x-k8s.io/queue-name"))),
            ("gpu_request", opt_int(obj.get("spec").and_then(|s| pod_spec_gpus(s, GpuKinds::WithMig)))),
            ("start_time", opt_int(time_at(obj, &["status", "startTime"]))),
            ("deletion_timestamp", opt_int(time_at(obj, &["metadata", "deletionTimestamp"]))),
            ("disruption_target", Cell::Bool(disruption_target)),
            ("disruption_reason", opt_text(&disruption_reason)),
            ("last_termination_reason", opt_text(&last_reason)),
            ("last_exit_code", opt_int(last_exit)),
            ("labels", opt_text(&id.labels)),
        ]);
        self.pods.add(row);
    }

    fn push_node(&mut self, id: &Identity, obj: &Value) {
        let ready = condition(obj, "Ready").map(|c| str_at(c, &["status"]) == Some("True"));
        let mut row = id.version_cells();
        row.extend([
            ("name", text(&id.name)),
            ("uid", opt_text(&id.uid)),
            ("hostname_label", opt_text(&label(obj, "kubernetes.io/hostname"))),
            ("gpu_product", opt_text(&label(obj, "nvidia.com/gpu.product"))),
            (
                "gpu_capacity",
                opt_int(path(obj, &["status", "capacity", "nvidia.com/gpu"]).and_then(quantity)),
            ),
            ("ready", ready.map_or(Cell::Null, Cell::Bool)),
            (
                "unschedulable",
                Cell::Bool(path(obj, &["spec", "unschedulable"]).and_then(Value::as_bool).unwrap_or(false)),
            ),
            ("labels", opt_text(&id.labels)),
        ]);
        self.nodes.add(row);
    }

    fn push_namespace(&mut self, id: &Identity, obj: &Value) {
        let mut row = id.version_cells();
        row.extend([
            ("name", text(&id.name)),
            ("uid", opt_text(&id.uid)),
            ("phase", opt_text(&string(obj, &["status", "phase"]))),
            ("labels", opt_text(&id.labels)),
            ("annotations", opt_text(&id.annotations)),
        ]);
        self.namespaces.add(row);
    }

    fn push_job(&mut self, source: &Path, id: &Identity, obj: &Value, batch_job: bool, diags: &mut Diagnostics) {
        // Kueue suspends a job through spec.suspend; Kubeflow jobs keep it under spec.runPolicy.
        let suspend = path(obj, &["spec", "suspend"])
            .and_then(Value::as_bool)
            .or_else(|| path(obj, &["spec", "runPolicy", "suspend"]).and_then(Value::as_bool));
        let (outcome, outcome_reason) = job_outcome(obj);
        let mut row = id.version_cells();
        row.extend([
            ("api_version", text(&id.api_version)),
            ("kind", text(&id.kind)),
            ("namespace", text(&id.namespace_or_default(source, diags))),
            ("name", text(&id.name)),
            ("uid", opt_text(&id.uid)),
            ("owner_kind", opt_text(&id.owner.kind)),
            ("owner_name", opt_text(&id.owner.name)),
            ("owner_uid", opt_text(&id.owner.uid)),
            ("queue_name", opt_text(&label(obj, "kueue.x-k8s.io/queue-name"))),
            ("suspend", suspend.map_or(Cell::Null, Cell::Bool)),
            ("start_time", opt_int(time_at(obj, &["status", "startTime"]))),
            ("completion_time", opt_int(time_at(obj, &["status", "completionTime"]))),
            ("succeeded", opt_int(path(obj, &["status", "succeeded"]).and_then(Value::as_i64))),
            ("failed", opt_int(path(obj, &["status", "failed"]).and_then(Value::as_i64))),
            ("outcome", opt_text(&outcome)),
            ("outcome_reason", opt_text(&outcome_reason)),
            ("labels", opt_text(&id.labels)),
            ("annotations", opt_text(&id.annotations)),
            ("batch_job", Cell::Bool(batch_job)),
        ]);
        self.jobs.add(row);
    }

    fn push_event(&mut self, id: &Identity, obj: &Value) {
        let core = id.api_version == "v1";
        // core/v1 names the object `involvedObject`, events.k8s.io names it `regarding`.
        let regarding = obj.get("involvedObject").or_else(|| obj.get("regarding"));
        let about = |k: &str| regarding.and_then(|r| string(r, &[k]));
        let event_time = time_at(obj, &["eventTime"]);
        let first_seen = time_at(obj, &["firstTimestamp"])
            .or_else(|| time_at(obj, &["deprecatedFirstTimestamp"]))
            .or(event_time);
        let last_seen = time_at(obj, &["series", "lastObservedTime"])
            .or_else(|| time_at(obj, &["lastTimestamp"]))
            .or_else(|| time_at(obj, &["deprecatedLastTimestamp"]))
            .or(event_time);
        let int = |keys: &[&str]| path(obj, keys).and_then(Value::as_i64);
        let count = if core {
            int(&["count"]).or_else(|| int(&["series", "count"]))
        } else {
            int(&["series", "count"]).or_else(|| int(&["deprecatedCount"]))
        };
        let reporter = [
            &["reportingController"][..],
            &["reportingComponent"],
            &["source", "component"],
            &["deprecatedSource", "component"],
        ]
        .iter()
        .find_map(|keys| str_at(obj, keys).filter(|s| !s.is_empty()))
        .map(str::to_owned);
        let message = string(obj, &["message"]).or_else(|| string(obj, &["note"]));
        let mut row = id.version_cells();
        row.extend([
            ("api_version", text(&id.api_version)),
            ("namespace", opt_text(&id.namespace)),
            ("name", text(&id.name)),
            ("uid", opt_text(&id.uid)),
            ("type", opt_text(&string(obj, &["type"]))),
            ("reason", opt_text(&string(obj, &["reason"]))),
            ("message", opt_text(&message)),
            ("regarding_kind", opt_text(&about("kind"))),
            ("regarding_namespace", opt_text(&about("namespace"))),
            ("regarding_name", opt_text(&about("name"))),
            ("regarding_uid", opt_text(&about("uid"))),
            ("first_seen", opt_int(first_seen)),
            ("last_seen", opt_int(last_seen)),
            ("count", opt_int(count)),
            ("reporting_controller", opt_text(&reporter)),
        ]);
        self.events.add(row);
    }

    fn push_workload(&mut self, source: &Path, id: &Identity, obj: &Value, diags: &mut Diagnostics) {
        let namespace = id.namespace_or_default(source, diags);
        let status_int = |k: &str| path(obj, &["status", k]).and_then(Value::as_i64);
        // v1beta1 shipped the field misspelt; both spellings mean the same.
        let accumulated = status_int("accumulatedPastExecutionTimeSeconds").or_else(|| status_int("accumulatedPastExexcutionTimeSeconds"));
        let mut row = id.version_cells();
        row.extend([
            ("api_version", text(&id.api_version)),
            ("namespace", text(&namespace)),
            ("name", text(&id.name)),
            ("uid", opt_text(&id.uid)),
            ("created_at", opt_int(time_at(obj, &["metadata", "creationTimestamp"]))),
            ("owner_kind", opt_text(&id.owner.kind)),
            ("owner_name", opt_text(&id.owner.name)),
            ("owner_uid", opt_text(&id.owner.uid)),
            ("queue_name", opt_text(&string(obj, &["spec", "queueName"]))),
            ("cluster_queue", opt_text(&string(obj, &["status", "admission", "clusterQueue"]))),
            ("priority", opt_int(path(obj, &["spec", "priority"]).and_then(Value::as_i64))),
            ("priority_class", opt_text(&string(obj, &["spec", "priorityClassName"]))),
            ("flavors", opt_text(&assigned_flavors(obj))),
            (
                "requeue_count",
                opt_int(path(obj, &["status", "requeueState", "count"]).and_then(Value::as_i64)),
            ),
            ("accumulated_execution_seconds", opt_int(accumulated)),
            ("labels", opt_text(&id.labels)),
            ("annotations", opt_text(&id.annotations)),
            ("gpu_count", opt_int(workload_gpus(obj, GpuKinds::WithMig))),
            ("whole_gpu_count", opt_int(workload_gpus(obj, GpuKinds::Whole))),
            ("gpu_usage", opt_text(&admitted_gpu_usage(obj))),
            ("claim_templates", opt_text(&workload_claim_templates(obj))),
            ("pod_resources", opt_text(&workload_extended_resources(obj))),
            ("usage_by_resource", opt_text(&admitted_usage_by_resource(obj))),
        ]);
        self.workloads.add(row);

        let conditions = path(obj, &["status", "conditions"])
            .and_then(Value::as_array)
            .map_or(&[][..], Vec::as_slice);
        for (i, c) in conditions.iter().enumerate() {
            let Some(kind) = string(c, &["type"]) else {
                diags.warn(
                    source,
                    Position::File,
                    "invalid_condition",
                    format!("Workload {namespace}/{}: status.conditions[{i}] has no type; not stored", id.name),
                );
                continue;
            };
            let mut row = id.version_cells();
            row.extend([
                ("namespace", text(&namespace)),
                ("name", text(&id.name)),
                ("uid", opt_text(&id.uid)),
                ("type", Cell::Str(kind)),
                ("status", Cell::Str(string(c, &["status"]).unwrap_or_else(|| "Unknown".into()))),
                ("reason", opt_text(&string(c, &["reason"]))),
                ("message", opt_text(&string(c, &["message"]))),
                ("last_transition_time", opt_int(time_at(c, &["lastTransitionTime"]))),
            ]);
            self.workload_conditions.add(row);
        }
    }

    fn push_queue(&mut self, id: &Identity, obj: &Value) {
        let namespace = if id.kind == "LocalQueue" { id.namespace.clone() } else { None };
        let cluster_queue = if id.kind == "LocalQueue" {
            string(obj, &["spec", "clusterQueue"])
        } else {
            None
        };
        let cohort = if id.kind == "ClusterQueue" {
            string(obj, &["spec", "cohort"]).or_else(|| string(obj, &["spec", "cohortName"]))
        } else {
            None
        };
        // A WorkloadPriorityClass keeps its priority at the top level, not under spec.
        let spec = if id.kind == "WorkloadPriorityClass" {
            Some(serde_json::json!({"value": obj.get("value"), "description": obj.get("description")}).to_string())
        } else {
            json_at(obj, &["spec"])
        };
        let mut row = id.version_cells();
        row.extend([
            ("api_version", text(&id.api_version)),
            ("kind", text(&id.kind)),
            ("namespace", opt_text(&namespace)),
            ("name", text(&id.name)),
            ("uid", opt_text(&id.uid)),
            ("cluster_queue", opt_text(&cluster_queue)),
            ("cohort", opt_text(&cohort)),
            ("spec", opt_text(&spec)),
            ("gpu_flavors", opt_text(&if id.kind == "ClusterQueue" { gpu_flavors(obj) } else { None })),
            ("node_labels", opt_text(&if id.kind == "ResourceFlavor" { json_at(obj, &["spec", "nodeLabels"]) } else { None })),
            ("labels", opt_text(&id.labels)),
            ("gpu_nominal", opt_text(&if id.kind == "ClusterQueue" { gpu_nominal(obj) } else { None })),
            ("flavors_by_resource", opt_text(&if id.kind == "ClusterQueue" { flavors_by_resource(obj) } else { None })),
            ("nominal_by_resource", opt_text(&if id.kind == "ClusterQueue" { nominal_by_resource(obj) } else { None })),
        ]);
        self.queues.add(row);
    }

    /// One row per allocated device per reserved consumer: a claim shared by k pods names each
    /// of its devices k times, so that a device's pods are one join away. A claim not (yet)
    /// allocated or reserved still gives its one row, with those columns null.
    fn push_claim(&mut self, source: &Path, id: &Identity, obj: &Value, diags: &mut Diagnostics) {
        let namespace = id.namespace_or_default(source, diags);
        let requests = device_requests(obj.get("spec"), "spec");
        let class_of = |request: &str| requests.iter().find(|r| r.name == request).and_then(|r| r.class.clone());
        let results = array_at(obj, &["status", "allocation", "devices", "results"]);
        let reserved = array_at(obj, &["status", "reservedFor"]);
        let reserved_count = i64::try_from(reserved.len()).unwrap_or(i64::MAX);
        let deletion = time_at(obj, &["metadata", "deletionTimestamp"]);
        let results: Vec<Option<&Value>> = if results.is_empty() { vec![None] } else { results.iter().map(Some).collect() };
        let reserved: Vec<Option<&Value>> = if reserved.is_empty() { vec![None] } else { reserved.iter().map(Some).collect() };
        for result in &results {
            let field = |k: &str| result.and_then(|r| string(r, &[k]));
            let request = field("request");
            let device_class = request.as_deref().and_then(class_of);
            let consumed = result.and_then(|r| r.get("consumedCapacity")).and_then(quantity_map);
            for consumer in &reserved {
                let by = |k: &str| consumer.and_then(|c| string(c, &[k]));
                let mut row = id.version_cells();
                row.extend([
                    ("namespace", text(&namespace)),
                    ("name", text(&id.name)),
                    ("uid", opt_text(&id.uid)),
                    ("owner_kind", opt_text(&id.owner.kind)),
                    ("owner_name", opt_text(&id.owner.name)),
                    ("owner_uid", opt_text(&id.owner.uid)),
                    ("request", opt_text(&request)),
                    ("device_class", opt_text(&device_class)),
                    ("driver", opt_text(&field("driver"))),
                    ("pool", opt_text(&field("pool"))),
                    ("device", opt_text(&field("device"))),
                    ("share_id", opt_text(&field("shareID"))),
                    ("consumed_capacity", opt_text(&consumed)),
                    ("reserved_resource", opt_text(&by("resource"))),
                    ("reserved_name", opt_text(&by("name"))),
                    ("reserved_uid", opt_text(&by("uid"))),
                    ("reserved_count", Cell::Int(reserved_count)),
                    ("deletion_timestamp", opt_int(deletion)),
                ]);
                self.claims.add(row);
            }
        }
    }

    /// One row per device request of the claim spec the template stamps out (`spec.spec`), each
    /// firstAvailable alternative a request of its own.
    fn push_claim_template(&mut self, source: &Path, id: &Identity, obj: &Value, diags: &mut Diagnostics) {
        let namespace = id.namespace_or_default(source, diags);
        let requests = device_requests(path(obj, &["spec", "spec"]), "spec.spec");
        let rows: Vec<Option<&DeviceRequest>> = if requests.is_empty() { vec![None] } else { requests.iter().map(Some).collect() };
        for r in rows {
            let (mode, count) = match r {
                Some(r) => {
                    let mode = r.mode.clone().unwrap_or_else(|| "ExactCount".to_owned());
                    // All takes every matching device: there is no count to speak of.
                    let count = if mode == "All" { None } else { Some(r.count.and_then(Value::as_i64).unwrap_or(1)) };
                    (Some(mode), count)
                }
                None => (None, None),
            };
            let mut row = id.version_cells();
            row.extend([
                ("namespace", text(&namespace)),
                ("name", text(&id.name)),
                ("uid", opt_text(&id.uid)),
                ("request", opt_text(&r.map(|r| r.name.clone()))),
                ("device_class", opt_text(&r.and_then(|r| r.class.clone()))),
                ("allocation_mode", opt_text(&mode)),
                ("count", opt_int(count)),
            ]);
            self.claim_templates.add(row);
        }
    }

    /// One row per device the slice publishes (a slice without devices: one row, device null).
    fn push_slice(&mut self, id: &Identity, obj: &Value) {
        let devices = array_at(obj, &["spec", "devices"]);
        let devices: Vec<Option<&Value>> = if devices.is_empty() { vec![None] } else { devices.iter().map(Some).collect() };
        for device in devices {
            // v1beta1 nests a device's attributes and capacity under `basic`; later versions
            // put them on the device itself.
            let body = device.map(|d| d.get("basic").filter(|b| b.is_object()).unwrap_or(d));
            let attributes = body.and_then(|b| b.get("attributes")).and_then(Value::as_object);
            let attr = |name: &str| attributes.and_then(|a| attribute_text(a, name));
            let plain_attributes = attributes.map(|a| {
                let plain: Map<String, Value> = a.iter().map(|(k, v)| (k.clone(), attribute_value(v))).collect();
                canonical_json(&Value::Object(plain))
            });
            let capacity = body.and_then(|b| b.get("capacity")).and_then(quantity_map);
            let mut row = id.version_cells();
            row.extend([
                ("name", text(&id.name)),
                ("uid", opt_text(&id.uid)),
                ("node_name", opt_text(&string(obj, &["spec", "nodeName"]))),
                ("driver", opt_text(&string(obj, &["spec", "driver"]))),
                ("pool", opt_text(&string(obj, &["spec", "pool", "name"]))),
                ("pool_generation", opt_int(path(obj, &["spec", "pool", "generation"]).and_then(Value::as_i64))),
                ("device", opt_text(&device.and_then(|d| string(d, &["name"])))),
                ("device_type", opt_text(&attr("type"))),
                ("uuid", opt_text(&attr("uuid"))),
                ("parent_uuid", opt_text(&attr("parentUUID"))),
                ("mig_profile", opt_text(&attr("profile"))),
                ("product_name", opt_text(&attr("productName"))),
                ("attributes", opt_text(&plain_attributes)),
                ("capacity", opt_text(&capacity)),
            ]);
            self.slices.add(row);
        }
    }

    fn push_device_class(&mut self, id: &Identity, obj: &Value) {
        let mut drivers = std::collections::BTreeSet::new();
        for selector in array_at(obj, &["spec", "selectors"]) {
            if let Some(expression) = str_at(selector, &["cel", "expression"]) {
                pinned_drivers(expression, &mut drivers);
            }
        }
        let driver = (drivers.len() == 1).then(|| drivers.into_iter().next()).flatten();
        let mut row = id.version_cells();
        row.extend([
            ("name", text(&id.name)),
            ("uid", opt_text(&id.uid)),
            ("extended_resource_name", opt_text(&string(obj, &["spec", "extendedResourceName"]))),
            ("selectors", opt_text(&json_at(obj, &["spec", "selectors"]))),
            ("driver", opt_text(&driver)),
        ]);
        self.device_classes.add(row);
    }
}

/// What every table of one version shares.
struct Identity {
    observed_at: i64,
    seq: i64,
    event_type: EventType,
    resource_version: Option<String>,
    content_hash: String,
    api_version: String,
    kind: String,
    namespace: Option<String>,
    name: String,
    uid: Option<String>,
    owner: Owner,
    labels: Option<String>,
    annotations: Option<String>,
}

impl Identity {
    fn version_cells(&self) -> Vec<(&'static str, Cell)> {
        vec![
            ("observed_at", Cell::Int(self.observed_at)),
            ("seq", Cell::Int(self.seq)),
            ("event_type", text(self.event_type.as_str())),
            ("resource_version", opt_text(&self.resource_version)),
            ("content_hash", text(&self.content_hash)),
        ]
    }

    /// Typed tables of namespaced kinds need a namespace; an object without one (a manifest
    /// rather than a stored object) is where the API server would have put it.
    fn namespace_or_default(&self, source: &Path, diags: &mut Diagnostics) -> String {
        match &self.namespace {
            Some(ns) => ns.clone(),
            None => {
                diags.warn(
                    source,
                    Position::File,
                    "namespace_defaulted",
                    format!("{} {} has no metadata.namespace; stored under \"default\"", self.kind, self.name),
                );
                "default".to_owned()
            }
        }
    }
}

#[derive(Default)]
struct Owner {
    kind: Option<String>,
    name: Option<String>,
    uid: Option<String>,
}

/// The controlling ownerReference, else the first one.
fn owner_of(obj: &Value) -> Owner {
    let refs = path(obj, &["metadata", "ownerReferences"])
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    let chosen = refs
        .iter()
        .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
        .or_else(|| refs.first());
    match chosen {
        Some(r) => Owner {
            kind: string(r, &["kind"]),
            name: string(r, &["name"]),
            uid: string(r, &["uid"]),
        },
        None => Owner::default(),
    }
}

/// The first entry of status.conditions of the given type.
fn condition<'a>(obj: &'a Value, kind: &str) -> Option<&'a Value> {
    path(obj, &["status", "conditions"])?
        .as_array()?
        .iter()
        .find(|c| str_at(c, &["type"]) == Some(kind))
}

/// Reason and exit code of the container termination that happened last (current state before
/// lastState for each container, since a restarted container's current state is newer).
fn last_termination(obj: &Value) -> (Option<String>, Option<i64>) {
    let mut best: Option<(Option<i64>, &Value)> = None;
    for key in ["containerStatuses", "initContainerStatuses"] {
        let statuses = path(obj, &["status", key]).and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
        for cs in statuses {
            let Some(term) = path(cs, &["state", "terminated"])
                .filter(|t| t.is_object())
                .or_else(|| path(cs, &["lastState", "terminated"]).filter(|t| t.is_object()))
            else {
                continue;
            };
            let finished = time_at(term, &["finishedAt"]);
            let later = match &best {
                None => true,
                Some((best_at, _)) => finished > *best_at,
            };
            if later {
                best = Some((finished, term));
            }
        }
    }
    match best {
        Some((_, term)) => (string(term, &["reason"]), path(term, &["exitCode"]).and_then(Value::as_i64)),
        None => (None, None),
    }
}

/// Terminal outcome of a job: its Complete or Failed condition (JobSet says Completed, Kubeflow
/// Succeeded); the early SuccessCriteriaMet / FailureTarget conditions only when neither is there;
/// a RayJob's jobStatus last.
fn job_outcome(obj: &Value) -> (Option<String>, Option<String>) {
    let conditions = path(obj, &["status", "conditions"])
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    let find = |types: &[(&str, &str)]| {
        conditions.iter().find_map(|c| {
            if str_at(c, &["status"]) != Some("True") {
                return None;
            }
            let t = str_at(c, &["type"])?;
            let (_, outcome) = types.iter().find(|(name, _)| *name == t)?;
            Some((Some((*outcome).to_owned()), string(c, &["reason"])))
        })
    };
    let terminal = [
        ("Complete", "Complete"),
        ("Failed", "Failed"),
        ("Completed", "Complete"),
        ("Succeeded", "Complete"),
    ];
    let early = [("SuccessCriteriaMet", "Complete"), ("FailureTarget", "Failed")];
    if let Some(found) = find(&terminal).or_else(|| find(&early)) {
        return found;
    }
    match str_at(obj, &["status", "jobStatus"]) {
        Some("SUCCEEDED") => (Some("Complete".into()), string(obj, &["status", "reason"])),
        Some("FAILED") => (Some("Failed".into()), string(obj, &["status", "reason"])),
        _ => (None, None),
    }
}

/// The flavors a ClusterQueue offers GPUs from: those of each resource group whose
/// coveredResources include `nvidia.com/gpu`, comma-separated in the order Kueue tries them
/// (flavor names are DNS labels, so a comma cannot occur in one). `None` when no group covers GPUs.
fn gpu_flavors(obj: &Value) -> Option<String> {
    let groups = path(obj, &["spec", "resourceGroups"])?.as_array()?;
    let names: Vec<&str> = groups
        .iter()
        .filter(|g| {
            g.get("coveredResources")
                .and_then(Value::as_array)
                .is_some_and(|r| r.iter().any(|r| r.as_str() == Some("nvidia.com/gpu")))
        })
        .flat_map(|g| g.get("flavors").and_then(Value::as_array).into_iter().flatten())
        .filter_map(|f| f.get("name").and_then(Value::as_str))
        .collect();
    (!names.is_empty()).then(|| names.join(","))
}

/// A ClusterQueue's nominalQuota of `nvidia.com/gpu` per flavor, `{"<flavor>":"<units>"}`, over
/// its resource groups covering GPUs. `None` when no flavor has a GPU quota.
fn gpu_nominal(obj: &Value) -> Option<String> {
    let groups = path(obj, &["spec", "resourceGroups"])?.as_array()?;
    let mut out = Map::new();
    for f in groups.iter().flat_map(|g| g.get("flavors").and_then(Value::as_array).into_iter().flatten()) {
        let Some(name) = f.get("name").and_then(Value::as_str) else { continue };
        let gpu = f.get("resources").and_then(Value::as_array).into_iter().flatten().find(|r| r.get("name").and_then(Value::as_str) == Some("nvidia.com/gpu"));
        if let Some(units) = gpu.and_then(|r| r.get("nominalQuota")).and_then(quantity) {
            out.insert(name.to_owned(), Value::String(units.to_string()));
        }
    }
    (!out.is_empty()).then(|| canonical_json(&Value::Object(out)))
}

/// The `nvidia.com/gpu` quota an admitted Workload uses per flavor, `{"<flavor>":"<units>"}`:
/// each pod set assignment's `resourceUsage`, or where it has none, the pod set's count times
/// its pods' request. `None` when the Workload is not admitted or uses no GPU quota.
fn admitted_gpu_usage(obj: &Value) -> Option<String> {
    let assignments = path(obj, &["status", "admission", "podSetAssignments"])?.as_array()?;
    let pod_sets = path(obj, &["spec", "podSets"]).and_then(Value::as_array);
    let mut usage: BTreeMap<String, i64> = BTreeMap::new();
    for a in assignments {
        let Some(flavor) = path(a, &["flavors", "nvidia.com/gpu"]).and_then(Value::as_str) else { continue };
        let units = path(a, &["resourceUsage", "nvidia.com/gpu"]).and_then(quantity).or_else(|| {
            let name = a.get("name").and_then(Value::as_str)?;
            let ps = pod_sets?.iter().find(|p| p.get("name").and_then(Value::as_str) == Some(name))?;
            let count = a.get("count").or_else(|| ps.get("count")).and_then(Value::as_i64).unwrap_or(1).max(0);
            let per_pod = path(ps, &["template", "spec"]).and_then(|s| pod_spec_gpus(s, GpuKinds::Whole))?;
            Some(count.saturating_mul(per_pod))
        });
        if let Some(units) = units.filter(|u| *u > 0) {
            *usage.entry(flavor.to_owned()).or_insert(0) += units;
        }
    }
    (!usage.is_empty()).then(|| canonical_json(&Value::Object(usage.into_iter().map(|(f, u)| (f, Value::String(u.to_string()))).collect())))
}

/// Every resource a ClusterQueue's resource groups cover, with the flavors offering it in the
/// order Kueue tries them: `{"<resource>":"<flavor>,<flavor>"}`. The ledger picks the GPU
/// resources out (a name Kueue's deviceClassMappings count DRA devices as is configured there,
/// not here). `None` when no group covers anything.
fn flavors_by_resource(obj: &Value) -> Option<String> {
    let groups = path(obj, &["spec", "resourceGroups"])?.as_array()?;
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for g in groups {
        let flavors: Vec<&str> = g.get("flavors").and_then(Value::as_array).into_iter().flatten().filter_map(|f| f.get("name").and_then(Value::as_str)).collect();
        for resource in g.get("coveredResources").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str) {
            out.entry(resource.to_owned()).or_default().extend(flavors.iter().map(|f| f.to_string()));
        }
    }
    let out: Map<String, Value> = out.into_iter().filter(|(_, f)| !f.is_empty()).map(|(r, f)| (r, Value::String(f.join(",")))).collect();
    (!out.is_empty()).then(|| canonical_json(&Value::Object(out)))
}

/// A ClusterQueue's whole-number nominalQuota of every resource, `{"<flavor> <resource>":"<units>"}`
/// (a flavor name is a DNS label, so the space cannot occur in it). `None` when there is none.
fn nominal_by_resource(obj: &Value) -> Option<String> {
    let groups = path(obj, &["spec", "resourceGroups"])?.as_array()?;
    let mut out = Map::new();
    for f in groups.iter().flat_map(|g| g.get("flavors").and_then(Value::as_array).into_iter().flatten()) {
        let Some(flavor) = f.get("name").and_then(Value::as_str) else { continue };
        for r in f.get("resources").and_then(Value::as_array).into_iter().flatten() {
            let (Some(name), Some(units)) = (r.get("name").and_then(Value::as_str), r.get("nominalQuota").and_then(quantity)) else { continue };
            out.insert(format!("{flavor} {name}"), Value::String(units.to_string()));
        }
    }
    (!out.is_empty()).then(|| canonical_json(&Value::Object(out)))
}

/// The quota an admitted Workload uses of every resource, `{"<flavor> <resource>":"<units>"}`:
/// each pod set assignment's flavor and whole-number `resourceUsage` of the resource, summed
/// over pod sets. `None` when not admitted or nothing has a flavor and a usage.
fn admitted_usage_by_resource(obj: &Value) -> Option<String> {
    let assignments = path(obj, &["status", "admission", "podSetAssignments"])?.as_array()?;
    let mut usage: BTreeMap<String, i64> = BTreeMap::new();
    for a in assignments {
        let Some(Value::Object(flavors)) = a.get("flavors") else { continue };
        for (resource, flavor) in flavors {
            let (Some(flavor), Some(units)) = (flavor.as_str(), path(a, &["resourceUsage", resource]).and_then(quantity)) else { continue };
            if units > 0 {
                *usage.entry(format!("{flavor} {resource}")).or_insert(0) += units;
            }
        }
    }
    (!usage.is_empty()).then(|| canonical_json(&Value::Object(usage.into_iter().map(|(k, u)| (k, Value::String(u.to_string()))).collect())))
}

/// `{"<podset>":{"<resource>":"<flavor>"}}` from status.admission.podSetAssignments.
fn assigned_flavors(obj: &Value) -> Option<String> {
    let assignments = path(obj, &["status", "admission", "podSetAssignments"])?.as_array()?;
    let mut out = Map::new();
    for a in assignments {
        let Some(name) = string(a, &["name"]) else { continue };
        let mut flavors = Map::new();
        if let Some(Value::Object(f)) = a.get("flavors") {
            for (resource, flavor) in f {
                if let Some(flavor) = flavor.as_str() {
                    flavors.insert(resource.clone(), Value::String(flavor.to_owned()));
                }
            }
        }
        out.insert(name, Value::Object(flavors));
    }
    Some(canonical_json(&Value::Object(out)))
}

/// Which GPU resources a count takes in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GpuKinds {
    /// `nvidia.com/gpu` and MIG slices (`nvidia.com/mig-*`): whether a run holds a GPU at all.
    WithMig,
    /// `nvidia.com/gpu` only: what a whole unallocated GPU could serve (stranded capacity).
    Whole,
}

/// GPUs a Workload asks for: sum over pod sets of count x GPUs per pod.
fn workload_gpus(obj: &Value, kinds: GpuKinds) -> Option<i64> {
    let pod_sets = path(obj, &["spec", "podSets"])?.as_array()?;
    let mut total = 0i64;
    for ps in pod_sets {
        let count = ps.get("count").and_then(Value::as_i64).unwrap_or(1).max(0);
        let per_pod = path(ps, &["template", "spec"]).and_then(|s| pod_spec_gpus(s, kinds)).unwrap_or(0);
        total = total.saturating_add(count.saturating_mul(per_pod));
    }
    Some(total)
}

/// GPUs of one pod spec: over its containers, the `kinds` of GPU resource in its limits, else
/// requests. Null when the spec lists no containers at all (not a pod spec we can read).
fn pod_spec_gpus(spec: &Value, kinds: GpuKinds) -> Option<i64> {
    let containers = spec.get("containers")?.as_array()?;
    let mut total = 0i64;
    for c in containers {
        let gpus = path(c, &["resources", "limits"])
            .and_then(|r| gpu_resources(r, kinds))
            .or_else(|| path(c, &["resources", "requests"]).and_then(|r| gpu_resources(r, kinds)))
            .unwrap_or(0);
        total = total.saturating_add(gpus);
    }
    Some(total)
}

/// Sum of the GPU resources of `kinds` in one requests/limits map; None when it names none.
fn gpu_resources(resources: &Value, kinds: GpuKinds) -> Option<i64> {
    let mut found = None;
    for (k, v) in resources.as_object()? {
        if is_gpu_resource(k, kinds) {
            let n = quantity(v).unwrap_or(0);
            found = Some(found.unwrap_or(0i64).saturating_add(n));
        }
    }
    found
}

/// Whether the resource named `key` is a GPU resource of `kinds`.
fn is_gpu_resource(key: &str, kinds: GpuKinds) -> bool {
    key == "nvidia.com/gpu" || (kinds == GpuKinds::WithMig && key.starts_with("nvidia.com/mig-"))
}

/// A whole-number resource quantity, written as a JSON number or a string ("2").
fn quantity(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n
            .as_i64()
            .or_else(|| n.as_f64().filter(|f| f.fract() == 0.0 && f.abs() < 9.0e15).map(|f| f as i64)),
        Value::String(s) => {
            let s = s.trim();
            s.parse::<i64>().ok().or_else(|| {
                s.parse::<f64>()
                    .ok()
                    .filter(|f| f.fract() == 0.0 && f.abs() < 9.0e15)
                    .map(|f| f as i64)
            })
        }
        _ => None,
    }
}

/// One device request of a DRA claim spec, a firstAvailable alternative counted as a request of
/// its own named `<request>/<subrequest>` (the name an allocation result gives it).
struct DeviceRequest<'a> {
    name: String,
    class: Option<String>,
    mode: Option<String>,
    count: Option<&'a Value>,
    /// Where the request's fields sit, for error messages.
    at: String,
}

/// The device requests of a claim spec (`spec` of a ResourceClaim, `spec.spec` of a template),
/// in order. v1 and v1beta2 wrap a plain request's fields in `exactly`; v1beta1 keeps them on
/// the request itself; every version lists alternatives in `firstAvailable`.
fn device_requests<'a>(spec: Option<&'a Value>, at: &str) -> Vec<DeviceRequest<'a>> {
    let mut out = Vec::new();
    let requests = spec.and_then(|s| path(s, &["devices", "requests"])).and_then(Value::as_array);
    for (i, r) in requests.into_iter().flatten().enumerate() {
        let name = string(r, &["name"]).unwrap_or_default();
        let at = format!("{at}.devices.requests[{i}]");
        let one = |fields: &'a Value, name: String, at: String| DeviceRequest {
            name,
            class: string(fields, &["deviceClassName"]),
            mode: string(fields, &["allocationMode"]),
            count: fields.get("count").filter(|c| !c.is_null()),
            at,
        };
        if let Some(exactly) = r.get("exactly").filter(|e| e.is_object()) {
            out.push(one(exactly, name, format!("{at}.exactly")));
        } else if let Some(subs) = r.get("firstAvailable").and_then(Value::as_array).filter(|s| !s.is_empty()) {
            for (j, sub) in subs.iter().enumerate() {
                let sub_name = format!("{name}/{}", str_at(sub, &["name"]).unwrap_or_default());
                out.push(one(sub, sub_name, format!("{at}.firstAvailable[{j}]")));
            }
        } else {
            out.push(one(r, name, at));
        }
    }
    out
}

fn array_at<'a>(v: &'a Value, keys: &[&str]) -> &'a [Value] {
    path(v, keys).and_then(Value::as_array).map_or(&[][..], Vec::as_slice)
}

/// A DRA device attribute's value without its type wrapper (`{"string": "gpu"}` -> `"gpu"`); a
/// shape this code does not know is kept as written.
fn attribute_value(v: &Value) -> Value {
    ["string", "int", "bool", "version"]
        .iter()
        .find_map(|k| v.get(*k).filter(|x| !x.is_null()))
        .unwrap_or(v)
        .clone()
}

/// The attribute called `wanted`, its name qualified with a domain or not (`gpu.nvidia.com/uuid`
/// or `uuid`), as text. An unqualified name wins over qualified ones, which go in name order.
fn attribute_text(attributes: &Map<String, Value>, wanted: &str) -> Option<String> {
    let mut names: Vec<&String> = attributes.keys().filter(|k| k.rsplit('/').next() == Some(wanted)).collect();
    names.sort_by_key(|k| (k.contains('/'), k.as_str()));
    match attribute_value(attributes.get(names.first()?.as_str())?) {
        Value::String(s) => Some(s),
        v @ (Value::Number(_) | Value::Bool(_)) => Some(v.to_string()),
        _ => None,
    }
}

/// A quantity as Kubernetes writes it ("80Gi"): a string, a bare number (YAML), or a
/// ResourceSlice capacity's `{"value": ...}`.
fn quantity_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Object(m) => m.get("value").and_then(quantity_text),
        _ => None,
    }
}

/// `{"<name>":"<quantity>"}` of a capacity or consumedCapacity map; `None` when it holds none.
fn quantity_map(v: &Value) -> Option<String> {
    let out: Map<String, Value> = v.as_object()?.iter().filter_map(|(k, q)| Some((k.clone(), Value::String(quantity_text(q)?)))).collect();
    (!out.is_empty()).then(|| canonical_json(&Value::Object(out)))
}

/// Adds to `out` every driver a CEL expression pins with `device.driver == "X"` or
/// `device.driver == 'X'`. Anything subtler (`in`, `!=`, a driver built from parts) pins none.
fn pinned_drivers(expression: &str, out: &mut std::collections::BTreeSet<String>) {
    const FIELD: &str = "device.driver";
    let mut from = 0;
    while let Some(found) = expression[from..].find(FIELD) {
        let start = from + found;
        from = start + FIELD.len();
        // `mydevice.driver` is another variable.
        if expression[..start].chars().next_back().is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '.') {
            continue;
        }
        let Some(rest) = expression[from..].trim_start().strip_prefix("==") else { continue };
        let rest = rest.trim_start();
        let Some(quote) = rest.chars().next().filter(|c| *c == '"' || *c == '\'') else { continue };
        if let Some(end) = rest[1..].find(quote) {
            out.insert(rest[1..=end].to_owned());
        }
    }
}

/// DRA claims the Workload's pods make from templates, `{"<template>":"<pods>"}`: each pod of a
/// pod set gets one claim per resourceClaims entry naming a template. `None` when there are none.
fn workload_claim_templates(obj: &Value) -> Option<String> {
    let mut pods: BTreeMap<String, i64> = BTreeMap::new();
    for ps in array_at(obj, &["spec", "podSets"]) {
        let count = ps.get("count").and_then(Value::as_i64).unwrap_or(1).max(0);
        for claim in array_at(ps, &["template", "spec", "resourceClaims"]) {
            // Kubernetes 1.31 moved the field up from `source`.
            let template = str_at(claim, &["resourceClaimTemplateName"]).or_else(|| str_at(claim, &["source", "resourceClaimTemplateName"]));
            if let Some(template) = template.filter(|t| !t.is_empty()) {
                *pods.entry(template.to_owned()).or_insert(0) += count;
            }
        }
    }
    counts_json(pods)
}

/// Extended resources (names holding a `/`) the Workload asks for, `{"<resource>":"<units>"}`:
/// over pod sets, count x the sum over containers of each one's limit, else request. Quantities
/// that are not whole numbers >= 0 are left out. `None` when there are none.
fn workload_extended_resources(obj: &Value) -> Option<String> {
    let mut units: BTreeMap<String, i64> = BTreeMap::new();
    for ps in array_at(obj, &["spec", "podSets"]) {
        let count = ps.get("count").and_then(Value::as_i64).unwrap_or(1).max(0);
        for c in array_at(ps, &["template", "spec", "containers"]) {
            let limits = path(c, &["resources", "limits"]).and_then(Value::as_object);
            let requests = path(c, &["resources", "requests"]).and_then(Value::as_object);
            let names: std::collections::BTreeSet<&String> = limits.into_iter().chain(requests).flat_map(|m| m.keys()).filter(|k| k.contains('/')).collect();
            for name in names {
                let per_pod = limits.and_then(|l| l.get(name.as_str())).or_else(|| requests.and_then(|r| r.get(name.as_str()))).and_then(quantity).filter(|n| *n >= 0);
                if let Some(n) = per_pod {
                    let total = units.entry(name.clone()).or_insert(0);
                    *total = total.saturating_add(count.saturating_mul(n));
                }
            }
        }
    }
    counts_json(units)
}

/// `{"<name>":"<n>"}` of the positive counts; `None` when there is none.
fn counts_json(counts: BTreeMap<String, i64>) -> Option<String> {
    let out: Map<String, Value> = counts.into_iter().filter(|(_, n)| *n > 0).map(|(k, n)| (k, Value::String(n.to_string()))).collect();
    (!out.is_empty()).then(|| canonical_json(&Value::Object(out)))
}

/// The first field the tables read from `obj` whose value no API server would have written: a
/// GPU quantity that is not a whole number >= 0 ("-5", "abc", 1e300), a time that is not RFC
/// 3339, a pod set count that is not a whole number >= 0. Such a version is bad input: stored, it
/// would read as a request of -5 or 0, or a pod that never started.
fn bad_field(obj: &Value, kind: &Kind) -> Option<String> {
    let mut times: Vec<(&str, Option<&Value>)> = vec![
        ("metadata.creationTimestamp", path(obj, &["metadata", "creationTimestamp"])),
        ("metadata.deletionTimestamp", path(obj, &["metadata", "deletionTimestamp"])),
    ];
    let mut gpus: Vec<(String, &Value)> = Vec::new();
    match kind {
        Kind::Pod => {
            times.push(("status.startTime", path(obj, &["status", "startTime"])));
            if let Some(spec) = obj.get("spec") {
                pod_spec_gpu_fields("spec.", spec, &mut gpus);
            }
        }
        Kind::Node => {
            if let Some(v) = path(obj, &["status", "capacity", "nvidia.com/gpu"]) {
                gpus.push(("status.capacity.nvidia.com/gpu".into(), v));
            }
        }
        Kind::Job { .. } => {
            times.push(("status.startTime", path(obj, &["status", "startTime"])));
            times.push(("status.completionTime", path(obj, &["status", "completionTime"])));
        }
        Kind::Workload => {
            for (i, ps) in path(obj, &["spec", "podSets"]).and_then(Value::as_array).into_iter().flatten().enumerate() {
                if let Some(count) = ps.get("count").filter(|c| !c.is_null())
                    && count.as_i64().is_none_or(|c| c < 0)
                {
                    return Some(format!("spec.podSets[{i}].count is {count}, not a whole number >= 0"));
                }
                if let Some(spec) = path(ps, &["template", "spec"]) {
                    pod_spec_gpu_fields(&format!("spec.podSets[{i}].template.spec."), spec, &mut gpus);
                }
            }
        }
        Kind::ResourceClaim | Kind::ResourceClaimTemplate => {
            let (spec, at) = if *kind == Kind::ResourceClaim { (obj.get("spec"), "spec") } else { (path(obj, &["spec", "spec"]), "spec.spec") };
            for r in device_requests(spec, at) {
                if let Some(count) = r.count
                    && count.as_i64().is_none_or(|c| c < 0)
                {
                    return Some(format!("{}.count is {count}, not a whole number >= 0", r.at));
                }
            }
        }
        Kind::ResourceSlice => {
            if let Some(generation) = path(obj, &["spec", "pool", "generation"]).filter(|g| !g.is_null())
                && generation.as_i64().is_none_or(|g| g < 0)
            {
                return Some(format!("spec.pool.generation is {generation}, not a whole number >= 0"));
            }
        }
        Kind::Namespace | Kind::Event | Kind::Queue | Kind::DeviceClass => {}
    }
    for (field, v) in times {
        match v {
            None | Some(Value::Null) => {}
            Some(Value::String(t)) if parse_time_ms(t).is_some() => {}
            Some(v) => return Some(format!("{field} is {v}, not an RFC 3339 time")),
        }
    }
    for (field, v) in gpus {
        if quantity(v).is_none_or(|n| n < 0) {
            return Some(format!("{field} is {v}, not a whole number of GPUs >= 0"));
        }
    }
    None
}

/// The GPU resources of a pod spec's containers (limits and requests), with where they are.
fn pod_spec_gpu_fields<'a>(at: &str, spec: &'a Value, gpus: &mut Vec<(String, &'a Value)>) {
    for (i, c) in spec.get("containers").and_then(Value::as_array).into_iter().flatten().enumerate() {
        for list in ["limits", "requests"] {
            for (k, v) in path(c, &["resources", list]).and_then(Value::as_object).into_iter().flatten() {
                if is_gpu_resource(k, GpuKinds::WithMig) {
                    gpus.push((format!("{at}containers[{i}].resources.{list}.{k}"), v));
                }
            }
        }
    }
}

fn path<'a>(v: &'a Value, keys: &[&str]) -> Option<&'a Value> {
    keys.iter().try_fold(v, |cur, k| cur.get(*k))
}

fn str_at<'a>(v: &'a Value, keys: &[&str]) -> Option<&'a str> {
    path(v, keys)?.as_str()
}

fn string(v: &Value, keys: &[&str]) -> Option<String> {
    str_at(v, keys).map(str::to_owned)
}

fn label(obj: &Value, key: &str) -> Option<String> {
    string(obj, &["metadata", "labels", key])
}

/// An RFC 3339 time; unparsable or absent is null, never an error.
fn time_at(v: &Value, keys: &[&str]) -> Option<i64> {
    str_at(v, keys).and_then(parse_time_ms)
}

/// A JSON object (or any non-null value) as canonical text.
fn json_at(v: &Value, keys: &[&str]) -> Option<String> {
    path(v, keys).filter(|v| !v.is_null()).map(canonical_json)
}

fn without_managed_fields(obj: &Value) -> std::borrow::Cow<'_, Value> {
    if path(obj, &["metadata", "managedFields"]).is_none() {
        return std::borrow::Cow::Borrowed(obj);
    }
    let mut owned = obj.clone();
    if let Some(Value::Object(meta)) = owned.get_mut("metadata") {
        meta.remove("managedFields");
    }
    std::borrow::Cow::Owned(owned)
}

/// Compact JSON with object keys sorted at every level, whatever order the map keeps: equal
/// objects give equal text (and hash) even if serde_json's `preserve_order` gets switched on.
fn canonical_json(v: &Value) -> String {
    let mut out = String::new();
    write_canonical(v, &mut out);
    out
}

fn write_canonical(v: &Value, out: &mut String) {
    match v {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (k, child)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                push_json_string(out, k);
                out.push(':');
                write_canonical(child, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, child) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(child, out);
            }
            out.push(']');
        }
        Value::String(s) => push_json_string(out, s),
        other => out.push_str(&other.to_string()),
    }
}

/// One value of one row, typed by the column it lands in.
#[derive(Debug, Clone, PartialEq)]
enum Cell {
    Null,
    Str(String),
    /// Int64, Int32 and millisecond Timestamp columns.
    Int(i64),
    Bool(bool),
}

fn text(s: &str) -> Cell {
    Cell::Str(s.to_owned())
}

fn opt_text(s: &Option<String>) -> Cell {
    s.as_ref().map_or(Cell::Null, |s| Cell::Str(s.clone()))
}

fn opt_int(i: Option<i64>) -> Cell {
    i.map_or(Cell::Null, Cell::Int)
}

/// Rows of one table, each in the schema's column order.
struct Rows {
    name: &'static str,
    table: Option<&'static Table>,
    rows: Vec<Vec<Cell>>,
    /// A column name the schema does not have: a bug here, reported by `finish`.
    unknown_column: Option<&'static str>,
}

impl Rows {
    fn new(name: &'static str) -> Self {
        Self {
            name,
            table: gpuledger_schemas::table(name),
            rows: Vec::new(),
            unknown_column: None,
        }
    }

    fn add(&mut self, cells: Vec<(&'static str, Cell)>) {
        let width = self.table.map_or(0, |t| t.columns.len());
        let mut row = vec![Cell::Null; width];
        for (column, cell) in cells {
            match self.table.and_then(|t| t.index_of(column)).and_then(|i| row.get_mut(i)) {
                Some(slot) => *slot = cell,
                None => self.unknown_column = Some(column),
            }
        }
        self.rows.push(row);
    }

    fn finish(self) -> Result<Option<TableBatch>> {
        let internal = |table: &'static str, msg: String| Error::Arrow {
            table,
            source: ArrowError::SchemaError(msg),
        };
        let Some(table) = self.table else {
            return Err(internal(
                self.name,
                format!("table {} is not defined in gpuledger-schemas", self.name),
            ));
        };
        if let Some(column) = self.unknown_column {
            return Err(internal(table.name, format!("column {column} is not in table {}", table.name)));
        }
        if self.rows.is_empty() {
            return Ok(None);
        }
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(table.columns.len());
        for (i, column) in table.columns.iter().enumerate() {
            let cells = self.rows.iter().map(|r| r.get(i).unwrap_or(&Cell::Null));
            let mismatch = || internal(table.name, format!("column {} got a value of the wrong type", column.name));
            let array: ArrayRef = match column.ty {
                ColumnType::Utf8 => {
                    let values: Option<Vec<Option<&str>>> = cells
                        .map(|c| match c {
                            Cell::Null => Some(None),
                            Cell::Str(s) => Some(Some(s.as_str())),
                            _ => None,
                        })
                        .collect();
                    Arc::new(StringArray::from(values.ok_or_else(mismatch)?))
                }
                ColumnType::Int64 | ColumnType::Timestamp => {
                    let values: Option<Vec<Option<i64>>> = cells
                        .map(|c| match c {
                            Cell::Null => Some(None),
                            Cell::Int(n) => Some(Some(*n)),
                            _ => None,
                        })
                        .collect();
                    let values = values.ok_or_else(mismatch)?;
                    if column.ty == ColumnType::Timestamp {
                        Arc::new(TimestampMillisecondArray::from(values).with_timezone("UTC"))
                    } else {
                        Arc::new(Int64Array::from(values))
                    }
                }
                ColumnType::Int32 => {
                    let values: Option<Vec<Option<i32>>> = cells
                        .map(|c| match c {
                            Cell::Null => Some(None),
                            // A value out of range is no exit code we can keep.
                            Cell::Int(n) => Some(i32::try_from(*n).ok()),
                            _ => None,
                        })
                        .collect();
                    Arc::new(Int32Array::from(values.ok_or_else(mismatch)?))
                }
                ColumnType::Boolean => {
                    let values: Option<Vec<Option<bool>>> = cells
                        .map(|c| match c {
                            Cell::Null => Some(None),
                            Cell::Bool(b) => Some(Some(*b)),
                            _ => None,
                        })
                        .collect();
                    Arc::new(BooleanArray::from(values.ok_or_else(mismatch)?))
                }
                ColumnType::Float64 => return Err(mismatch()),
            };
            columns.push(array);
        }
        let batch = RecordBatch::try_new(table.arrow_schema(), columns).map_err(|source| Error::Arrow { table: table.name, source })?;
        Ok(Some((table, batch)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::kubernetes_file::read_objects;
    use arrow::array::{Array, AsArray};
    use arrow::datatypes::{Int32Type, Int64Type, TimestampMillisecondType};
    use std::collections::HashMap;
    use std::path::PathBuf;

    const REAL: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/real");
    const DRA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/dra");
    const MTIME: i64 = 1_700_000_000_000;

    struct Loaded {
        batches: HashMap<&'static str, RecordBatch>,
        kinds: BTreeMap<String, u64>,
        diags: Diagnostics,
    }

    impl Loaded {
        fn batch(&self, table: &str) -> &RecordBatch {
            self.batches.get(table).unwrap_or_else(|| panic!("no {table} batch"))
        }

        fn rows(&self, table: &str) -> usize {
            self.batches.get(table).map_or(0, RecordBatch::num_rows)
        }

        fn strs(&self, table: &str, column: &str) -> Vec<Option<String>> {
            let b = self.batch(table);
            let a = b
                .column_by_name(column)
                .unwrap_or_else(|| panic!("{table}.{column}"))
                .as_string::<i32>();
            (0..a.len()).map(|i| a.is_valid(i).then(|| a.value(i).to_owned())).collect()
        }

        fn str(&self, table: &str, column: &str, row: usize) -> Option<String> {
            self.strs(table, column).remove(row)
        }

        fn ints(&self, table: &str, column: &str) -> Vec<Option<i64>> {
            let b = self.batch(table);
            let col = b.column_by_name(column).unwrap_or_else(|| panic!("{table}.{column}"));
            match col.data_type() {
                arrow::datatypes::DataType::Int64 => {
                    let a = col.as_primitive::<Int64Type>();
                    (0..a.len()).map(|i| a.is_valid(i).then(|| a.value(i))).collect()
                }
                arrow::datatypes::DataType::Int32 => {
                    let a = col.as_primitive::<Int32Type>();
                    (0..a.len()).map(|i| a.is_valid(i).then(|| i64::from(a.value(i)))).collect()
                }
                _ => {
                    let a = col.as_primitive::<TimestampMillisecondType>();
                    (0..a.len()).map(|i| a.is_valid(i).then(|| a.value(i))).collect()
                }
            }
        }

        fn bools(&self, table: &str, column: &str) -> Vec<Option<bool>> {
            let a = self
                .batch(table)
                .column_by_name(column)
                .unwrap_or_else(|| panic!("{table}.{column}"))
                .as_boolean()
                .clone();
            (0..a.len()).map(|i| a.is_valid(i).then(|| a.value(i))).collect()
        }

        /// Row index in `table` whose `name` column equals `name`.
        fn row_named(&self, table: &str, name: &str) -> usize {
            self.strs(table, "name")
                .iter()
                .position(|n| n.as_deref() == Some(name))
                .unwrap_or_else(|| panic!("{name} not in {table}"))
        }
    }

    fn load_bytes(inputs: &[(&str, Vec<u8>)]) -> Loaded {
        let mut tables = K8sTables::new();
        let mut diags = Diagnostics::new();
        for (name, bytes) in inputs {
            let path = Path::new(name);
            for v in read_objects(path, bytes, MTIME, &mut diags) {
                tables.push(path, &v, &mut diags);
            }
        }
        let kinds = tables.kinds.clone();
        let batches = tables.finish().unwrap_or_else(|e| panic!("{e}"));
        for (table, batch) in &batches {
            assert_eq!(batch.schema(), table.arrow_schema(), "{}", table.name);
        }
        Loaded {
            batches: batches.into_iter().map(|(t, b)| (t.name, b)).collect(),
            kinds,
            diags,
        }
    }

    fn load(fixtures: &[&str]) -> Loaded {
        load_from(REAL, fixtures)
    }

    fn load_from(dir: &str, fixtures: &[&str]) -> Loaded {
        let inputs: Vec<(&str, Vec<u8>)> = fixtures
            .iter()
            .map(|rel| {
                let path = PathBuf::from(dir).join(rel);
                (*rel, std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
            })
            .collect();
        load_bytes(&inputs)
    }

    fn load_text(name: &str, text: &str) -> Loaded {
        load_bytes(&[(name, text.as_bytes().to_vec())])
    }

    fn some(s: &str) -> Option<String> {
        Some(s.to_owned())
    }

    fn kinds(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
        pairs.iter().map(|(k, n)| ((*k).to_owned(), *n)).collect()
    }

    /// Values no API server writes are bad input, named with the object and field, and the
    /// version is skipped: never a request of -5, 0 for "abc" or 1e300, or a null start.
    #[test]
    fn wrong_typed_fields_are_reported_not_stored() {
        let pod = |name: &str, gpus: &str, start: &str| {
            format!(
                r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"{name}","namespace":"ml"}},"spec":{{"containers":[{{"name":"c","resources":{{"limits":{{"nvidia.com/gpu":{gpus}}}}}}}]}},"status":{{"startTime":{start}}}}}"#
            )
        };
        let lines = [
            pod("neg", "-5", r#""2026-10-01T00:00:00Z""#),
            pod("abc", r#""abc""#, r#""2026-10-01T00:00:00Z""#),
            pod("huge", "1e300", r#""2026-10-01T00:00:00Z""#),
            pod("badtime", "1", r#""not-a-time""#),
            pod("numtime", "1", "17"),
            pod("good", r#""2""#, r#""2026-10-01T00:00:00Z""#),
            r#"{"apiVersion":"v1","kind":"Node","metadata":{"name":"n1"},"status":{"capacity":{"nvidia.com/gpu":"-1"}}}"#.to_owned(),
            r#"{"apiVersion":"kueue.x-k8s.io/v1beta1","kind":"Workload","metadata":{"name":"w","namespace":"ml"},"spec":{"podSets":[{"name":"main","count":-2,"template":{"spec":{"containers":[]}}}]}}"#.to_owned(),
        ];
        let l = load_text("objects.jsonl", &lines.join("\n"));
        let reasons: Vec<&str> = l.diags.errors.iter().map(|e| e.reason.as_str()).collect();
        assert_eq!(l.diags.errors.iter().filter(|e| e.error_type == "bad_field").count(), 7, "{reasons:#?}");
        for expected in [
            "Pod ml/neg: spec.containers[0].resources.limits.nvidia.com/gpu is -5",
            "Pod ml/abc: spec.containers[0].resources.limits.nvidia.com/gpu is \"abc\"",
            "Pod ml/huge: spec.containers[0].resources.limits.nvidia.com/gpu is 1e+300",
            "Pod ml/badtime: status.startTime is \"not-a-time\", not an RFC 3339 time",
            "Pod ml/numtime: status.startTime is 17",
            "Node n1: status.capacity.nvidia.com/gpu is \"-1\"",
            "Workload ml/w: spec.podSets[0].count is -2",
        ] {
            assert!(reasons.iter().any(|r| r.starts_with(expected)), "no error starts with {expected:?}: {reasons:#?}");
        }
        // Only the good pod is a row, with its request of 2.
        assert_eq!(l.strs("pods", "name"), vec![some("good")]);
        assert_eq!(l.ints("pods", "gpu_request"), vec![Some(2)]);
        // No node or Workload row at all (an empty table writes no batch), nor their versions.
        assert!(!l.batches.iter().any(|(t, b)| (*t == "nodes" || *t == "workloads") && b.num_rows() > 0));
        assert_eq!(l.kinds, kinds(&[("Pod", 1)]));
    }

    #[test]
    fn watch_stream_fixture_fills_pods() {
        let l = load(&["k8s-pods-nodes-watch/watch-stream-pods-ndjson-2016-pending-to-running.jsonl"]);
        assert!(l.diags.is_clean() && l.diags.warnings.is_empty(), "{:?}", l.diags);
        assert_eq!(l.kinds, kinds(&[("Pod", 4)]));
        assert_eq!((l.rows("k8s_objects"), l.rows("pods")), (4, 4));
        assert_eq!(l.batches.len(), 2);
        assert_eq!(
            l.strs("pods", "event_type"),
            [some("ADDED"), some("MODIFIED"), some("MODIFIED"), some("MODIFIED")]
        );
        assert_eq!(l.ints("pods", "seq"), [Some(0), Some(1), Some(2), Some(3)]);
        assert_eq!(
            l.strs("pods", "node_name"),
            [None, some("10.240.0.4"), some("10.240.0.4"), some("10.240.0.4")]
        );
        assert_eq!(
            l.strs("pods", "phase"),
            [some("Pending"), some("Pending"), some("Pending"), some("Running")]
        );
        assert_eq!(
            l.ints("pods", "observed_at"),
            [Some(1458028851000), Some(1458028851000), Some(1458028851000), Some(1458028852000)]
        );
        assert_eq!(l.ints("pods", "start_time"), [None, None, Some(1458028851000), Some(1458028851000)]);
        assert_eq!(
            l.strs("pods", "resource_version"),
            [some("228082"), some("228084"), some("228088"), some("228094")]
        );
        assert_eq!(l.strs("pods", "namespace"), vec![some("default"); 4]);
        assert_eq!(l.strs("pods", "uid"), vec![some("090cc0c8-ea84-11e5-8c79-42010af00003"); 4]);
        // The 2016 pod predates ownerReferences (only a created-by annotation) and asks for no GPU.
        assert_eq!(l.strs("pods", "owner_kind"), vec![None; 4]);
        assert_eq!(l.ints("pods", "gpu_request"), vec![Some(0); 4]);
        assert_eq!(l.bools("pods", "disruption_target"), vec![Some(false); 4]);
        assert_eq!(l.strs("pods", "last_termination_reason"), vec![None; 4]);
        assert_eq!(l.strs("pods", "labels"), vec![some(r#"{"run":"nginx-app"}"#); 4]);
        assert_eq!(l.strs("k8s_objects", "kind"), vec![some("Pod"); 4]);
        assert_eq!(l.strs("k8s_objects", "api_version"), vec![some("v1"); 4]);
        let hashes = l.strs("k8s_objects", "content_hash");
        assert!(hashes.iter().all(|h| h.as_ref().is_some_and(|h| h.len() == 16)));
        let distinct: std::collections::HashSet<_> = hashes.iter().collect();
        assert_eq!(distinct.len(), 4);
        assert_eq!(l.strs("pods", "content_hash"), hashes);
    }

    #[test]
    fn real_pods() {
        let l = load(&[
            "k8s-pods-nodes-watch/k9s-pod-minikube.json",
            "k8s-pods-nodes-watch/pod-mig-1g5gb-runai-a100.yaml",
            "k8s-pods-nodes-watch/pod-runai-fractional-gpu-aws.yaml",
        ]);
        assert!(l.diags.is_clean() && l.diags.warnings.is_empty(), "{:?}", l.diags);
        assert_eq!(l.kinds, kinds(&[("Pod", 3)]));
        assert_eq!(l.strs("pods", "name"), [some("nginx"), some("job-2-0-0"), some("frac-1-0-0")]);
        assert_eq!(
            l.strs("pods", "namespace"),
            [some("default"), some("runai-team-a"), some("runai-pa")]
        );
        assert_eq!(
            l.strs("pods", "node_name"),
            [some("minikube"), some("qa-mig-worker-gpu-a100"), some("i-0b498db53280b86a6")]
        );
        assert_eq!(l.strs("pods", "phase"), vec![some("Running"); 3]);
        assert_eq!(l.strs("pods", "owner_kind"), [None, some("RunaiJob"), some("RunaiJob")]);
        assert_eq!(l.strs("pods", "owner_name"), [None, some("job-2"), some("frac-1")]);
        assert_eq!(
            l.strs("pods", "owner_uid"),
            [
                None,
                some("a369bc70-fa23-4181-a163-c749f2e49ba1"),
                some("2237ca39-cac0-4601-b658-8a3c5f406a4f")
            ]
        );
        // The MIG slice and the fractional GPU are annotations, not container resources.
        assert_eq!(l.ints("pods", "gpu_request"), [Some(0), Some(0), Some(0)]);
        assert_eq!(
            l.ints("pods", "start_time"),
            [Some(1565327539000), Some(1674115010000), Some(1711875807000)]
        );
        assert_eq!(
            l.ints("pods", "observed_at"),
            [Some(1565327541000), Some(1674115017000), Some(1711875831000)]
        );
        assert_eq!(l.strs("pods", "queue_name"), [None, None, None]);
        assert_eq!(l.strs("pods", "labels")[0], None);
        let labels = l.str("pods", "labels", 1).unwrap_or_default();
        assert!(
            labels.starts_with(r#"{"app":"runaijob","controller-uid":"a369bc70-fa23-4181-a163-c749f2e49ba1","#),
            "{labels}"
        );
        assert!(labels.contains(r#""runai/queue":"team-a""#));
        let annotations = l.str("k8s_objects", "annotations", 1).unwrap_or_default();
        assert!(annotations.contains(r#""nvidia.com/mig-1g.5gb":"1""#), "{annotations}");
        assert_eq!(
            l.strs("k8s_objects", "resource_version"),
            [some("1482816"), some("3247064"), some("10748")]
        );
    }

    #[test]
    fn real_nodes() {
        let l = load(&[
            "k8s-pods-nodes-watch/node-a100-mig-4-instances.yaml",
            "k8s-pods-nodes-watch/node-2x-t4-fractional.yaml",
            "k8s-pods-nodes-watch/k9s-node-minikube.json",
            "k8s-pods-nodes-watch/node-fieldcomplete.json",
        ]);
        assert!(l.diags.is_clean() && l.diags.warnings.is_empty(), "{:?}", l.diags);
        assert_eq!(l.kinds, kinds(&[("Node", 4)]));
        assert_eq!(
            l.strs("nodes", "name"),
            [
                some("qa-mig-worker-gpu-a100"),
                some("qa-mig-worker-gpu-1"),
                some("minikube"),
                some("nameValue")
            ]
        );
        assert_eq!(
            l.strs("nodes", "hostname_label"),
            [some("qa-mig-worker-gpu-a100"), some("qa-mig-worker-gpu-1"), some("minikube"), None]
        );
        assert_eq!(
            l.strs("nodes", "gpu_product"),
            [some("NVIDIA-A100-SXM4-40GB"), some("Tesla-T4"), None, None]
        );
        // The MIG node advertises its slices as nvidia.com/mig-* and nvidia.com/gpu "0".
        assert_eq!(l.ints("nodes", "gpu_capacity"), [Some(0), Some(2), None, None]);
        // The filler node's only condition has type "typeValue": no Ready condition at all.
        assert_eq!(l.bools("nodes", "ready"), [Some(true), Some(true), Some(true), None]);
        assert_eq!(
            l.bools("nodes", "unschedulable"),
            [Some(false), Some(false), Some(false), Some(true)]
        );
        assert_eq!(
            l.strs("nodes", "uid"),
            [
                some("04dc2370-8f7d-43f8-a346-c8b5201fdd5a"),
                some("018b97a5-7073-4701-8576-646aef94752d"),
                some("3a554aa2-fee7-435b-ae1b-e67bdaac069a"),
                some("uidValue")
            ]
        );
        assert_eq!(
            l.ints("nodes", "observed_at"),
            [Some(1674110370000), Some(1674110980000), Some(1567226591000), Some(1230771661000)]
        );
        // The filler node's identity columns in k8s_objects.
        assert_eq!(l.str("k8s_objects", "namespace", 3), some("namespaceValue"));
        assert_eq!(l.str("k8s_objects", "owner_kind", 3), some("kindValue"));
        assert_eq!(l.str("k8s_objects", "owner_name", 3), some("nameValue"));
        assert_eq!(l.str("k8s_objects", "owner_uid", 3), some("uidValue"));
        assert_eq!(l.str("k8s_objects", "labels", 3), some(r#"{"labelsKey":"labelsValue"}"#));
        assert_eq!(
            l.str("k8s_objects", "annotations", 3),
            some(r#"{"annotationsKey":"annotationsValue"}"#)
        );
        assert_eq!(l.str("k8s_objects", "namespace", 0), None);
        let object = l.str("k8s_objects", "object", 3).unwrap_or_default();
        assert!(!object.contains("managedFields") && !object.contains("managerValue"));
        assert!(
            object.starts_with(r#"{"apiVersion":"v1","kind":"Node","metadata":{"annotations":"#),
            "{object}"
        );
    }

    #[test]
    fn real_events() {
        let l = load(&[
            "k8s-events/core-v1-event-fieldcomplete.json",
            "k8s-events/events-k8s-io-v1-event-fieldcomplete.json",
            "k8s-events/k9s-event-gke-pulled.json",
        ]);
        assert!(l.diags.is_clean() && l.diags.warnings.is_empty(), "{:?}", l.diags);
        assert_eq!(l.kinds, kinds(&[("Event", 3)]));
        assert_eq!(l.rows("k8s_events"), 3);
        let t = "k8s_events";
        assert_eq!(l.strs(t, "api_version"), [some("v1"), some("events.k8s.io/v1"), some("v1")]);
        assert_eq!(
            l.strs(t, "namespace"),
            [some("namespaceValue"), some("namespaceValue"), some("default")]
        );
        assert_eq!(l.strs(t, "name")[2], some("hello-1567197780-mn4mv.15bfce150bd764dd"));
        assert_eq!(l.strs(t, "uid")[2], some("c443d4b3-cb66-11e9-990f-42010a800218"));
        assert_eq!(l.strs(t, "type"), [some("typeValue"), some("typeValue"), some("Normal")]);
        assert_eq!(l.strs(t, "reason"), [some("reasonValue"), some("reasonValue"), some("Pulled")]);
        assert_eq!(
            l.strs(t, "message"),
            [
                some("messageValue"),
                some("noteValue"),
                some("Successfully pulled image \"blang/busybox-bash\"")
            ]
        );
        assert_eq!(l.strs(t, "regarding_kind"), [some("kindValue"), some("kindValue"), some("Pod")]);
        assert_eq!(
            l.strs(t, "regarding_namespace"),
            [some("namespaceValue"), some("namespaceValue"), some("default")]
        );
        assert_eq!(
            l.strs(t, "regarding_name"),
            [some("nameValue"), some("nameValue"), some("hello-1567197780-mn4mv")]
        );
        assert_eq!(
            l.strs(t, "regarding_uid"),
            [some("uidValue"), some("uidValue"), some("c31fdeb8-cb66-11e9-990f-42010a800218")]
        );
        // core: firstTimestamp 2006; events.k8s.io: deprecatedFirstTimestamp 2013; GKE: 20:43:05.
        assert_eq!(
            l.ints(t, "first_seen"),
            [Some(1136077261000), Some(1357002061000), Some(1567197785000)]
        );
        // series.lastObservedTime (2002-01-01T01:01:01.000002Z) wins where there is a series.
        assert_eq!(
            l.ints(t, "last_seen"),
            [Some(1009846861000), Some(1009846861000), Some(1567197785000)]
        );
        assert_eq!(l.ints(t, "count"), [Some(8), Some(1), Some(1)]);
        // The GKE event's reportingComponent is "", so source.component names the reporter.
        assert_eq!(
            l.strs(t, "reporting_controller"),
            [some("reportingComponentValue"), some("reportingControllerValue"), some("kubelet")]
        );
        assert_eq!(
            l.ints(t, "observed_at"),
            [Some(1262307661000), Some(1388538061000), Some(1567197785000)]
        );
        assert_eq!(
            l.strs(t, "resource_version"),
            [some("resourceVersionValue"), some("resourceVersionValue"), some("590733")]
        );
    }

    #[test]
    fn real_kueue_queues_and_unknown_topology() {
        let l = load(&[
            "kueue/single-clusterqueue-setup.yaml",
            "kueue/kueueviz-cluster-queues-cohort-preemption.yaml",
            "kueue/tas-gpu-queues-topology-flavor-cq-lq.yaml",
            "kueue/resource-flavor-spot-taints.yaml",
        ]);
        assert!(l.diags.is_clean(), "{:?}", l.diags);
        assert_eq!(
            l.kinds,
            kinds(&[
                ("ClusterQueue", 6),
                ("LocalQueue", 2),
                ("ResourceFlavor", 3),
                ("kueue.x-k8s.io/v1beta2/Topology", 1)
            ])
        );
        assert_eq!(l.diags.skipped.get("unknown_kind"), Some(&1));
        assert_eq!((l.rows("kueue_queues"), l.rows("k8s_objects")), (11, 11));
        assert_eq!(l.batches.len(), 2);
        let t = "kueue_queues";
        assert_eq!(
            l.strs(t, "name"),
            [
                "default-flavor",
                "cluster-queue",
                "user-queue",
                "emergency-cluster-queue",
                "agi-cluster-queue",
                "llm-cluster-queue",
                "unused-cluster-queue",
                "tas-flavor",
                "tas-cluster-queue",
                "tas-user-queue",
                "spot"
            ]
            .map(some)
        );
        let row = l.row_named(t, "user-queue");
        assert_eq!(l.str(t, "kind", row), some("LocalQueue"));
        assert_eq!(l.str(t, "namespace", row), some("default"));
        assert_eq!(l.str(t, "cluster_queue", row), some("cluster-queue"));
        assert_eq!(l.str(t, "spec", row), some(r#"{"clusterQueue":"cluster-queue"}"#));
        let row = l.row_named(t, "tas-user-queue");
        assert_eq!(l.str(t, "cluster_queue", row), some("tas-cluster-queue"));
        let cohorts = l.strs(t, "cohort");
        assert_eq!(
            cohorts[3..7],
            [
                some("ai-for-humanity-foundation"),
                some("ai-for-humanity-foundation"),
                some("ai-for-humanity-foundation"),
                None
            ]
        );
        assert_eq!(cohorts.iter().filter(|c| c.is_some()).count(), 3);
        assert_eq!(l.strs(t, "namespace").iter().filter(|n| n.is_some()).count(), 2);
        let row = l.row_named(t, "spot");
        assert_eq!(l.str(t, "kind", row), some("ResourceFlavor"));
        assert_eq!(
            l.str(t, "spec", row),
            some(r#"{"nodeLabels":{"instance-type":"spot"},"nodeTaints":[{"effect":"NoSchedule","key":"spot","value":"true"}]}"#)
        );
        // A ResourceFlavor with no spec at all.
        assert_eq!(l.str(t, "spec", l.row_named(t, "default-flavor")), None);
        // Only the TAS queue covers nvidia.com/gpu; the others queue CPU and memory.
        assert_eq!(l.str(t, "gpu_flavors", l.row_named(t, "tas-cluster-queue")), some("tas-flavor"));
        assert_eq!(l.strs(t, "gpu_flavors").iter().filter(|f| f.is_some()).count(), 1);
        assert_eq!(l.str(t, "node_labels", l.row_named(t, "spot")), some(r#"{"instance-type":"spot"}"#));
        assert_eq!(l.str(t, "node_labels", l.row_named(t, "default-flavor")), None);
        assert_eq!(l.str(t, "node_labels", l.row_named(t, "cluster-queue")), None);
        let spec = l.str(t, "spec", l.row_named(t, "tas-cluster-queue")).unwrap_or_default();
        assert!(spec.contains(r#"{"name":"nvidia.com/gpu","nominalQuota":16}"#), "{spec}");
        // Its GPU quota per flavor, as whole units; queues without a GPU quota have none.
        assert_eq!(l.str(t, "gpu_nominal", l.row_named(t, "tas-cluster-queue")), some(r#"{"tas-flavor":"16"}"#));
        assert_eq!(l.strs(t, "gpu_nominal").iter().filter(|f| f.is_some()).count(), 1);
        let spec = l.str(t, "spec", l.row_named(t, "agi-cluster-queue")).unwrap_or_default();
        assert!(spec.contains(r#"{"name":"cpu","nominalQuota":"300m"}"#), "{spec}");
        assert_eq!(l.strs(t, "api_version"), vec![some("kueue.x-k8s.io/v1beta2"); 11]);
        assert_eq!(l.ints(t, "observed_at"), vec![Some(MTIME); 11]);
        assert_eq!(l.strs(t, "uid"), vec![None; 11]);
        // One time_from_mtime warning per file.
        assert_eq!(l.diags.warnings.len(), 4);
    }

    #[test]
    fn workload_manifest_without_status() {
        let l = load(&["kueue/workload-manifest-spec-only.yaml"]);
        assert!(l.diags.is_clean(), "{:?}", l.diags);
        assert_eq!(l.kinds, kinds(&[("Workload", 1)]));
        let t = "workloads";
        assert_eq!(l.strs(t, "namespace"), [some("team-a")]);
        assert_eq!(l.strs(t, "name"), [some("sample-job")]);
        assert_eq!(l.strs(t, "api_version"), [some("kueue.x-k8s.io/v1beta2")]);
        assert_eq!(l.strs(t, "queue_name"), [some("team-a-queue")]);
        assert_eq!(l.strs(t, "cluster_queue"), [None]);
        assert_eq!(l.strs(t, "flavors"), [None]);
        // Three pods asking for cpu and memory only.
        assert_eq!(l.ints(t, "gpu_count"), [Some(0)]);
        assert_eq!(l.ints(t, "created_at"), [None]);
        assert_eq!(l.ints(t, "observed_at"), [Some(MTIME)]);
        assert!(!l.batches.contains_key("workload_conditions"));
    }

    /// Kueue writes what an admission takes per pod set as `resourceUsage` (quantities as
    /// strings); a ClusterQueue's owner is a label on it.
    #[test]
    fn quota_used_per_flavor_and_the_queue_owner() {
        let text = r#"
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: cq-nlp, labels: {team: nlp}}
spec:
  cohort: all
  resourceGroups:
  - coveredResources: [cpu]
    flavors: [{name: default, resources: [{name: cpu, nominalQuota: "64"}]}]
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - {name: h100, resources: [{name: nvidia.com/gpu, nominalQuota: "16"}]}
    - {name: h100-spot, resources: [{name: nvidia.com/gpu, nominalQuota: 8, borrowingLimit: 8}]}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: Workload
metadata: {name: job-train-1, namespace: nlp}
spec:
  queueName: nlp
  podSets:
  - {name: main, count: 2, template: {spec: {containers: [{name: c, resources: {limits: {nvidia.com/gpu: 8}}}]}}}
  - {name: aux, count: 1, template: {spec: {containers: [{name: c, resources: {limits: {nvidia.com/gpu: 1}}}]}}}
status:
  admission:
    clusterQueue: cq-nlp
    podSetAssignments:
    - {name: main, count: 2, flavors: {nvidia.com/gpu: h100, cpu: default}, resourceUsage: {nvidia.com/gpu: "16", cpu: "8"}}
    - {name: aux, count: 1, flavors: {nvidia.com/gpu: h100-spot}, resourceUsage: {nvidia.com/gpu: "1"}}
"#;
        let l = load_text("quota.yaml", text);
        assert!(l.diags.is_clean(), "{:?}", l.diags);
        assert_eq!(l.strs("kueue_queues", "labels"), [some(r#"{"team":"nlp"}"#)]);
        assert_eq!(l.strs("kueue_queues", "gpu_nominal"), [some(r#"{"h100":"16","h100-spot":"8"}"#)]);
        assert_eq!(l.strs("workloads", "gpu_usage"), [some(r#"{"h100":"16","h100-spot":"1"}"#)]);
        // Every resource, for the ledger to pick the GPU ones (a DRA device class mapping's name).
        assert_eq!(l.strs("kueue_queues", "flavors_by_resource"), [some(r#"{"cpu":"default","nvidia.com/gpu":"h100,h100-spot"}"#)]);
        assert_eq!(l.strs("kueue_queues", "nominal_by_resource"), [some(r#"{"default cpu":"64","h100 nvidia.com/gpu":"16","h100-spot nvidia.com/gpu":"8"}"#)]);
        assert_eq!(l.strs("workloads", "usage_by_resource"), [some(r#"{"default cpu":"8","h100 nvidia.com/gpu":"16","h100-spot nvidia.com/gpu":"1"}"#)]);
    }

    /// With Kueue's deviceClassMappings, a ClusterQueue covers a name of its own for DRA devices
    /// (`whole-gpus`), and an admission uses it: both are kept by resource name.
    #[test]
    fn quota_of_a_device_class_mapping_is_kept_by_resource() {
        let text = r#"
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: cq-dra}
spec:
  resourceGroups:
  - coveredResources: [whole-gpus]
    flavors: [{name: dra-h100, resources: [{name: whole-gpus, nominalQuota: 8}]}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: Workload
metadata: {name: train, namespace: ml}
spec:
  queueName: ml
  podSets:
  - name: main
    count: 2
    template: {spec: {resourceClaims: [{name: gpu, resourceClaimTemplateName: single-gpu}], containers: [{name: c, resources: {claims: [{name: gpu}]}}]}}
status:
  admission:
    clusterQueue: cq-dra
    podSetAssignments:
    - {name: main, count: 2, flavors: {whole-gpus: dra-h100}, resourceUsage: {whole-gpus: "2"}}
"#;
        let l = load_text("dra-quota.yaml", text);
        assert!(l.diags.is_clean(), "{:?}", l.diags);
        assert_eq!(l.strs("kueue_queues", "gpu_flavors"), [None], "no nvidia.com/gpu");
        assert_eq!(l.strs("kueue_queues", "flavors_by_resource"), [some(r#"{"whole-gpus":"dra-h100"}"#)]);
        assert_eq!(l.strs("kueue_queues", "nominal_by_resource"), [some(r#"{"dra-h100 whole-gpus":"8"}"#)]);
        assert_eq!(l.strs("workloads", "usage_by_resource"), [some(r#"{"dra-h100 whole-gpus":"2"}"#)]);
        assert_eq!(l.strs("workloads", "claim_templates"), [some(r#"{"single-gpu":"2"}"#)]);
    }

    #[test]
    fn preempted_workload_conditions_from_the_real_status_block() {
        // The fixture is a status block alone; give it the identity it was cut from.
        let status = std::fs::read(PathBuf::from(REAL).join("kueue/workload-status-preempted-evicted.yaml")).unwrap_or_default();
        let mut text =
            b"apiVersion: kueue.x-k8s.io/v1beta1\nkind: Workload\nmetadata:\n  name: job-sample-job-0b8f2\n  namespace: default\n".to_vec();
        text.extend_from_slice(&status);
        let l = load_bytes(&[("wl.yaml", text)]);
        assert!(l.diags.is_clean() && l.diags.warnings.is_empty(), "{:?}", l.diags);
        let t = "workload_conditions";
        assert_eq!(l.strs(t, "type"), [some("QuotaReserved"), some("Evicted"), some("Admitted")]);
        assert_eq!(l.strs(t, "status"), [some("False"), some("True"), some("False")]);
        assert_eq!(l.strs(t, "reason"), [some("Pending"), some("Preempted"), some("NoReservation")]);
        assert_eq!(
            l.strs(t, "message"),
            [
                some("couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor default-flavor, 9 more needed"),
                some("Preempted to accommodate a higher priority Workload"),
                some("The workload has no reservation"),
            ]
        );
        assert_eq!(
            l.ints(t, "last_transition_time"),
            [Some(1711036196000), Some(1711036195000), Some(1711036196000)]
        );
        assert_eq!(l.ints(t, "observed_at"), vec![Some(1711036196000); 3]);
        assert_eq!(l.strs(t, "name"), vec![some("job-sample-job-0b8f2"); 3]);
        assert_eq!(l.strs("workloads", "cluster_queue"), [None]);
        assert_eq!(l.strs("workloads", "api_version"), [some("kueue.x-k8s.io/v1beta1")]);
    }

    #[test]
    fn admitted_workloads_v1beta1_and_v1beta2() {
        let text = r#"
apiVersion: kueue.x-k8s.io/v1beta1
kind: Workload
metadata:
  name: pytorchjob-train-5d2a1
  namespace: ml
  uid: wl-1
  resourceVersion: "77"
  creationTimestamp: "2024-05-01T10:00:00Z"
  labels: {team: vision}
  annotations: {gpuledger.io/accepted-units: "3"}
  ownerReferences:
  - {apiVersion: v1, kind: ConfigMap, name: other, uid: cm-1}
  - {apiVersion: kubeflow.org/v1, kind: PyTorchJob, name: train, uid: job-1, controller: true}
spec:
  queueName: ml-queue
  priority: 100
  priorityClassName: high
  podSets:
  - name: launcher
    count: 1
    template:
      spec:
        containers:
        - name: l
          resources: {requests: {cpu: "1"}}
  - name: worker
    count: 4
    template:
      spec:
        containers:
        - name: a
          resources:
            limits: {nvidia.com/gpu: 2}
            requests: {nvidia.com/gpu: 2}
        - name: b
          resources:
            requests: {nvidia.com/gpu: "1"}
  - name: mig
    count: 2
    template:
      spec:
        containers:
        - name: m
          resources:
            limits: {nvidia.com/mig-1g.10gb: 1}
status:
  accumulatedPastExexcutionTimeSeconds: 3600
  requeueState: {count: 2, requeueAt: "2030-01-01T00:00:00Z"}
  admission:
    clusterQueue: gpu-cq
    podSetAssignments:
    - name: launcher
      flavors: {cpu: default-flavor}
    - name: worker
      flavors: {nvidia.com/gpu: a100-80g, cpu: default-flavor}
      count: 4
  conditions:
  - {type: QuotaReserved, status: "True", reason: QuotaReserved, message: Quota reserved in ClusterQueue gpu-cq, lastTransitionTime: "2024-05-01T10:05:00Z"}
  - {type: Admitted, status: "True", reason: Admitted, lastTransitionTime: "2024-05-01T10:05:00Z"}
  - {type: Finished, status: "True", reason: Succeeded, lastTransitionTime: "2024-05-01T12:30:00Z"}
  - {status: "True", reason: NoType}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: Workload
metadata:
  name: job-b
  namespace: ml
spec:
  queueName: ml-queue
  podSets:
  - name: main
    template: {spec: {containers: [{name: c, resources: {limits: {nvidia.com/gpu: 8}}}]}}
status:
  accumulatedPastExecutionTimeSeconds: 120
  admission:
    clusterQueue: gpu-cq
    podSetAssignments: "..."
"#;
        let l = load_text("wl.yaml", text);
        assert!(l.diags.is_clean(), "{:?}", l.diags);
        let t = "workloads";
        assert_eq!(l.strs(t, "name"), [some("pytorchjob-train-5d2a1"), some("job-b")]);
        assert_eq!(l.ints(t, "accumulated_execution_seconds"), [Some(3600), Some(120)]);
        assert_eq!(
            l.strs(t, "flavors"),
            [
                some(r#"{"launcher":{"cpu":"default-flavor"},"worker":{"cpu":"default-flavor","nvidia.com/gpu":"a100-80g"}}"#),
                None
            ]
        );
        // 1 x 0 + 4 x (2 + 1) + 2 x 1 MIG slice; the second: one pod (count left out) x 8.
        assert_eq!(l.ints(t, "gpu_count"), [Some(14), Some(8)]);
        // Without the MIG slice: 4 x (2 + 1) and 8.
        assert_eq!(l.ints(t, "whole_gpu_count"), [Some(12), Some(8)]);
        // The quota the admission uses: no resourceUsage here, so the worker pod set's count x
        // its whole GPUs (4 x 3) on its flavor; the second's assignments are unreadable.
        assert_eq!(l.strs(t, "gpu_usage"), [some(r#"{"a100-80g":"12"}"#), None]);
        assert_eq!(l.strs(t, "cluster_queue"), [some("gpu-cq"), some("gpu-cq")]);
        assert_eq!(l.strs(t, "queue_name"), [some("ml-queue"), some("ml-queue")]);
        assert_eq!(l.ints(t, "priority"), [Some(100), None]);
        assert_eq!(l.strs(t, "priority_class"), [some("high"), None]);
        assert_eq!(l.ints(t, "requeue_count"), [Some(2), None]);
        assert_eq!(l.ints(t, "created_at"), [Some(1714557600000), None]);
        assert_eq!(l.strs(t, "owner_kind"), [some("PyTorchJob"), None]);
        assert_eq!(l.strs(t, "owner_name"), [some("train"), None]);
        assert_eq!(l.strs(t, "owner_uid"), [some("job-1"), None]);
        assert_eq!(l.strs(t, "labels"), [some(r#"{"team":"vision"}"#), None]);
        assert_eq!(l.strs(t, "annotations"), [some(r#"{"gpuledger.io/accepted-units":"3"}"#), None]);
        assert_eq!(l.strs(t, "resource_version"), [some("77"), None]);
        // The Finished transition is the latest past time; requeueAt (2030) is not looked at.
        assert_eq!(l.ints(t, "observed_at"), [Some(1714566600000), Some(MTIME)]);

        let c = "workload_conditions";
        assert_eq!(l.strs(c, "type"), [some("QuotaReserved"), some("Admitted"), some("Finished")]);
        assert_eq!(l.strs(c, "reason"), [some("QuotaReserved"), some("Admitted"), some("Succeeded")]);
        assert_eq!(l.strs(c, "message"), [some("Quota reserved in ClusterQueue gpu-cq"), None, None]);
        assert_eq!(l.strs(c, "uid"), vec![some("wl-1"); 3]);
        assert_eq!(
            l.ints(c, "last_transition_time"),
            [Some(1714557900000), Some(1714557900000), Some(1714566600000)]
        );
        let warned: Vec<&str> = l.diags.warnings.iter().map(|w| w.error_type).collect();
        assert_eq!(warned, ["time_from_mtime", "invalid_condition"]);
        assert!(l.diags.warnings[1].reason.contains("status.conditions[3]"));
    }

    #[test]
    fn jobs_of_every_flavour() {
        let text = r#"{"apiVersion":"batch/v1","kind":"Job","metadata":{"name":"train-1","namespace":"ml","uid":"j1",
  "labels":{"kueue.x-k8s.io/queue-name":"ml-queue"},
  "ownerReferences":[{"apiVersion":"jobset.x-k8s.io/v1alpha2","kind":"JobSet","name":"js","uid":"js-1","controller":true}]},
 "spec":{"suspend":false},
 "status":{"startTime":"2024-05-01T10:00:00Z","failed":4,"succeeded":0,
  "conditions":[{"type":"FailureTarget","status":"True","reason":"BackoffLimitExceeded"},{"type":"Failed","status":"True","reason":"BackoffLimitExceeded","lastTransitionTime":"2024-05-01T11:00:00Z"}]}}
{"apiVersion":"batch/v1","kind":"Job","metadata":{"name":"train-2","namespace":"ml","creationTimestamp":"2024-05-01T10:00:00Z"},
 "status":{"succeeded":1,"conditions":[{"type":"SuccessCriteriaMet","status":"True","reason":"CompletionsReached"}]}}
{"apiVersion":"batch/v1","kind":"Job","metadata":{"name":"train-3","namespace":"ml","creationTimestamp":"2024-05-01T10:00:00Z"},
 "status":{"completionTime":"2024-05-01T12:30:00Z","conditions":[{"type":"Complete","status":"True"},{"type":"Failed","status":"False","reason":"x"}]}}
{"apiVersion":"jobset.x-k8s.io/v1alpha2","kind":"JobSet","metadata":{"name":"js","namespace":"ml","creationTimestamp":"2024-05-01T10:00:00Z"},
 "spec":{"suspend":true},"status":{"conditions":[{"type":"Completed","status":"True","reason":"AllJobsCompleted"}]}}
{"apiVersion":"ray.io/v1","kind":"RayJob","metadata":{"name":"rj","namespace":"ml","creationTimestamp":"2024-05-01T10:00:00Z"},
 "status":{"jobStatus":"FAILED","reason":"DeadlineExceeded"}}
{"apiVersion":"kubeflow.org/v1","kind":"PyTorchJob","metadata":{"name":"pt","namespace":"ml","creationTimestamp":"2024-05-01T10:00:00Z"},
 "spec":{"runPolicy":{"suspend":true}}}
{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web","namespace":"ml"}}
"#;
        let l = load_text("jobs.ndjson", text);
        assert!(l.diags.is_clean(), "{:?}", l.diags);
        assert_eq!(
            l.kinds,
            kinds(&[
                ("Job", 3),
                ("JobSet", 1),
                ("PyTorchJob", 1),
                ("RayJob", 1),
                ("apps/v1/Deployment", 1)
            ])
        );
        assert_eq!(l.diags.skipped.get("unknown_kind"), Some(&1));
        let t = "jobs";
        assert_eq!(l.strs(t, "name"), ["train-1", "train-2", "train-3", "js", "rj", "pt"].map(some));
        assert_eq!(l.strs(t, "kind"), ["Job", "Job", "Job", "JobSet", "RayJob", "PyTorchJob"].map(some));
        assert_eq!(l.bools(t, "batch_job"), [true, true, true, false, false, false].map(Some));
        assert_eq!(
            l.strs(t, "outcome"),
            [
                some("Failed"),
                some("Complete"),
                some("Complete"),
                some("Complete"),
                some("Failed"),
                None
            ]
        );
        assert_eq!(
            l.strs(t, "outcome_reason"),
            [
                some("BackoffLimitExceeded"),
                some("CompletionsReached"),
                None,
                some("AllJobsCompleted"),
                some("DeadlineExceeded"),
                None
            ]
        );
        assert_eq!(l.bools(t, "suspend"), [Some(false), None, None, Some(true), None, Some(true)]);
        assert_eq!(l.ints(t, "failed"), [Some(4), None, None, None, None, None]);
        assert_eq!(l.ints(t, "succeeded"), [Some(0), Some(1), None, None, None, None]);
        assert_eq!(l.ints(t, "start_time")[0], Some(1714557600000));
        assert_eq!(l.ints(t, "completion_time")[2], Some(1714566600000));
        assert_eq!(l.strs(t, "queue_name")[0], some("ml-queue"));
        assert_eq!(l.strs(t, "owner_kind")[0], some("JobSet"));
        assert_eq!(l.strs(t, "owner_uid")[0], some("js-1"));
        assert_eq!(l.strs(t, "api_version")[4], some("ray.io/v1"));
        assert_eq!(l.ints(t, "observed_at")[0], Some(1714561200000));
        assert_eq!(l.rows("k8s_objects"), 6);
    }

    #[test]
    fn pod_gpus_terminations_and_disruption() {
        let text = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"w-0","namespace":"ml","creationTimestamp":"2024-06-01T00:00:00Z",
   "deletionTimestamp":"2024-06-01T00:20:00Z",
   "labels":{"batch.kubernetes.io/job-name":"train","kueue.x-k8s.io/queue-name":"ml-queue"},
   "annotations":{"kueue.x-k8s.io/workload":"job-train-1a2b3"}},
 "spec":{"nodeName":"gpu-1","containers":[
   {"name":"a","resources":{"limits":{"nvidia.com/gpu":"2"},"requests":{"nvidia.com/gpu":"2"}}},
   {"name":"b","resources":{"requests":{"nvidia.com/gpu":1}}},
   {"name":"c","resources":{"limits":{"nvidia.com/mig-1g.5gb":"1","cpu":"1"}}}]},
 "status":{"phase":"Failed","reason":"Evicted",
   "conditions":[{"type":"DisruptionTarget","status":"True","reason":"PreemptionByScheduler"}],
   "containerStatuses":[
    {"name":"a","state":{"terminated":{"reason":"OOMKilled","exitCode":137,"finishedAt":"2024-06-01T00:10:00Z"}}},
    {"name":"b","state":{"running":{}},"lastState":{"terminated":{"reason":"Error","exitCode":1,"finishedAt":"2024-06-01T00:00:00Z"}}}]}}
{"apiVersion":"v1","kind":"Pod","metadata":{"name":"w-1","namespace":"ml","labels":{"job-name":"old-style"}},
 "spec":{"containers":[{"name":"a"}]},
 "status":{"conditions":[{"type":"DisruptionTarget","status":"False","reason":"x"}],
   "initContainerStatuses":[{"name":"init","state":{"terminated":{"reason":"Completed","exitCode":0,"finishedAt":"2024-06-01T00:00:00Z"}}}],
   "containerStatuses":[{"name":"a","state":{"waiting":{}},"lastState":{"terminated":{"reason":"Error","exitCode":2,"finishedAt":"2024-06-01T00:10:00Z"}}}]}}
{"apiVersion":"v1","kind":"Pod","metadata":{"name":"manifest"},"spec":{}}
"#;
        let l = load_text("pods.json", text);
        assert!(l.diags.is_clean(), "{:?}", l.diags);
        let t = "pods";
        assert_eq!(l.ints(t, "gpu_request"), [Some(4), Some(0), None]);
        assert_eq!(l.strs(t, "last_termination_reason"), [some("OOMKilled"), some("Error"), None]);
        assert_eq!(l.ints(t, "last_exit_code"), [Some(137), Some(2), None]);
        assert_eq!(l.bools(t, "disruption_target"), [Some(true), Some(false), Some(false)]);
        assert_eq!(l.strs(t, "disruption_reason"), [some("PreemptionByScheduler"), None, None]);
        assert_eq!(l.strs(t, "job_name"), [some("train"), some("old-style"), None]);
        assert_eq!(l.strs(t, "workload_name"), [some("job-train-1a2b3"), None, None]);
        assert_eq!(l.strs(t, "queue_name"), [some("ml-queue"), None, None]);
        assert_eq!(l.strs(t, "reason"), [some("Evicted"), None, None]);
        assert_eq!(l.ints(t, "deletion_timestamp"), [Some(1717201200000), None, None]);
        // The deletion timestamp is the latest time the first pod records.
        assert_eq!(l.ints(t, "observed_at"), [Some(1717201200000), Some(1717200600000), Some(MTIME)]);
        // A manifest without a namespace lands where the API server would have put it.
        assert_eq!(l.strs(t, "namespace"), [some("ml"), some("ml"), some("default")]);
        assert_eq!(l.str("k8s_objects", "namespace", 2), None);
        let warned: Vec<&str> = l.diags.warnings.iter().map(|w| w.error_type).collect();
        assert_eq!(warned, ["time_from_mtime", "namespace_defaulted"]);
    }

    #[test]
    fn namespaces_table() {
        let text = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: team-a\n  uid: ns-1\n  labels: {team: vision, kubernetes.io/metadata.name: team-a}\n  annotations: {owner: alice}\n  creationTimestamp: \"2024-05-01T10:00:00Z\"\nstatus: {phase: Active}\n";
        let l = load_text("ns.yaml", text);
        assert!(l.diags.is_clean() && l.diags.warnings.is_empty(), "{:?}", l.diags);
        let t = "namespaces";
        assert_eq!(l.strs(t, "name"), [some("team-a")]);
        assert_eq!(l.strs(t, "uid"), [some("ns-1")]);
        assert_eq!(l.strs(t, "phase"), [some("Active")]);
        assert_eq!(
            l.strs(t, "labels"),
            [some(r#"{"kubernetes.io/metadata.name":"team-a","team":"vision"}"#)]
        );
        assert_eq!(l.strs(t, "annotations"), [some(r#"{"owner":"alice"}"#)]);
        assert_eq!(l.ints(t, "observed_at"), [Some(1714557600000)]);
        assert_eq!(l.strs(t, "event_type"), [some("SNAPSHOT")]);
        assert_eq!(l.strs("k8s_objects", "namespace"), [None]);
    }

    #[test]
    fn unknown_kinds_missing_names_and_empty_finish() {
        let mut tables = K8sTables::new();
        let mut diags = Diagnostics::new();
        let version = |object: Value| ObjectVersion {
            observed_at_ms: 1,
            seq: 0,
            event_type: EventType::Added,
            object,
        };
        let src = Path::new("live");
        tables.push(
            src,
            &version(serde_json::json!({"apiVersion": "example.com/v1", "kind": "CustomType", "spec": {"replicas": 1}})),
            &mut diags,
        );
        tables.push(
            src,
            &version(serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"namespace": "d"}})),
            &mut diags,
        );
        tables.push(
            src,
            &version(serde_json::json!({"apiVersion": "kueue.x-k8s.io/v1alpha1", "kind": "Workload", "metadata": {"name": "w"}})),
            &mut diags,
        );
        tables.push(src, &version(serde_json::json!({"metadata": {"name": "x"}})), &mut diags);
        assert_eq!(
            tables.kinds,
            kinds(&[("example.com/v1/CustomType", 1), ("kueue.x-k8s.io/v1alpha1/Workload", 1)])
        );
        assert_eq!(diags.skipped.get("unknown_kind"), Some(&2));
        let errors: Vec<(&str, &Position)> = diags.errors.iter().map(|e| (e.error_type, &e.position)).collect();
        assert_eq!(errors, [("missing_name", &Position::File), ("not_an_object", &Position::File)]);
        assert!(tables.is_empty());
        assert_eq!(tables.len(), 0);
        assert!(tables.finish().map(|b| b.is_empty()).unwrap_or(false));
    }

    #[test]
    fn content_hash_is_xxh3_of_the_canonical_object() {
        let with_mf = serde_json::json!({"kind": "Node", "apiVersion": "v1", "metadata": {"name": "n", "resourceVersion": "5",
            "managedFields": [{"manager": "kubelet"}], "labels": {"b": "2", "a": "1"}}, "status": {"z": [3, {"y": 1, "x": "é\n"}]}});
        let mut without = with_mf.clone();
        if let Some(meta) = without.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("managedFields");
        }
        let mut changed = without.clone();
        changed["metadata"]["resourceVersion"] = Value::from("6");
        let mut tables = K8sTables::new();
        let mut diags = Diagnostics::new();
        for (seq, object) in [with_mf, without.clone(), changed].into_iter().enumerate() {
            let v = ObjectVersion {
                observed_at_ms: 1,
                seq: seq as i64,
                event_type: EventType::Snapshot,
                object,
            };
            tables.push(Path::new("x"), &v, &mut diags);
        }
        assert_eq!(tables.len(), 3);
        let batches = tables.finish().unwrap_or_default();
        let names: Vec<&str> = batches.iter().map(|(t, _)| t.name).collect();
        assert_eq!(names, ["k8s_objects", "nodes"]);
        let objects = &batches[0].1;
        let text = objects.column_by_name("object").map(|c| c.as_string::<i32>().clone());
        let hash = objects.column_by_name("content_hash").map(|c| c.as_string::<i32>().clone());
        let (Some(text), Some(hash)) = (text, hash) else {
            panic!("columns missing")
        };
        let expected_text = serde_json::to_string(&without).unwrap_or_default();
        assert_eq!(text.value(0), expected_text);
        assert_eq!(text.value(1), expected_text);
        assert_eq!(
            text.value(0),
            r#"{"apiVersion":"v1","kind":"Node","metadata":{"labels":{"a":"1","b":"2"},"name":"n","resourceVersion":"5"},"status":{"z":[3,{"x":"é\n","y":1}]}}"#
        );
        let expected_hash = format!("{:016x}", xxhash_rust::xxh3::xxh3_64(expected_text.as_bytes()));
        assert_eq!(hash.value(0), expected_hash);
        assert_eq!(hash.value(1), expected_hash);
        assert_ne!(hash.value(2), expected_hash);
        assert_eq!(batches[1].1.num_rows(), 3);
    }

    const GPU0: &str = "GPU-4cf8db2d-06c0-7d70-1a51-e59b25b2c16c";
    const GPU1: &str = "GPU-a9e5d6b1-3f2e-8c47-0b19-5e7c2d8a6f40";
    const GPU2: &str = "GPU-17b2c3e4-9d8a-4f61-b2c0-8e5d4a3f2b19";
    const MIG: &str = "MIG-0e8d5c27-41b6-5a9f-8c3e-2d7f61b94a05";
    const DRA_LISTS: [&str; 4] = ["resourceslices.json", "deviceclasses.json", "resourceclaimtemplates.json", "resourceclaims.json"];

    /// Every cell of `table` as text (null as None), column by column, leaving out `skip`.
    fn cells(l: &Loaded, table: &str, skip: &[&str]) -> Vec<(String, Vec<Option<String>>)> {
        let b = l.batch(table);
        b.schema()
            .fields()
            .iter()
            .zip(b.columns())
            .filter(|(f, _)| !skip.contains(&f.name().as_str()))
            .map(|(f, a)| {
                let values = (0..a.len())
                    .map(|i| a.is_valid(i).then(|| arrow::util::display::array_value_to_string(a, i).unwrap_or_default()))
                    .collect();
                (f.name().clone(), values)
            })
            .collect()
    }

    /// What the NVIDIA driver publishes for one node: whole GPUs and a MIG device, their UUIDs
    /// (as DCGM labels the GPU), the MIG parent and profile; the classes name their driver.
    #[test]
    fn dra_slices_and_device_classes() {
        let l = load_from(DRA, &["resourceslices.json", "deviceclasses.json"]);
        assert!(l.diags.is_clean() && l.diags.warnings.is_empty(), "{:?}", l.diags);
        assert_eq!(l.kinds, kinds(&[("DeviceClass", 3), ("ResourceSlice", 1)]));
        assert_eq!(l.rows("k8s_objects"), 4);
        let t = "resource_slices";
        assert_eq!(l.strs(t, "device"), ["gpu-0", "gpu-1", "gpu-2-mig-19-0-1"].map(some));
        assert_eq!(l.strs(t, "name"), vec![some("gpu-node-1-gpu.nvidia.com-x2kbq"); 3]);
        assert_eq!(l.strs(t, "uid"), vec![some("3c1e9b7a-5d24-4f0b-a8e6-9b0f2d7c4e15"); 3]);
        assert_eq!(l.strs(t, "node_name"), vec![some("gpu-node-1"); 3]);
        assert_eq!(l.strs(t, "driver"), vec![some("gpu.nvidia.com"); 3]);
        assert_eq!(l.strs(t, "pool"), vec![some("gpu-node-1"); 3]);
        assert_eq!(l.ints(t, "pool_generation"), vec![Some(1); 3]);
        assert_eq!(l.strs(t, "device_type"), ["gpu", "gpu", "mig"].map(some));
        assert_eq!(l.strs(t, "uuid"), [GPU0, GPU1, MIG].map(some));
        assert_eq!(l.strs(t, "parent_uuid"), [None, None, some(GPU2)]);
        assert_eq!(l.strs(t, "mig_profile"), [None, None, some("1g.10gb")]);
        assert_eq!(l.strs(t, "product_name"), vec![some("NVIDIA H100 80GB HBM3"); 3]);
        assert_eq!(
            l.str(t, "attributes", 0),
            some(concat!(
                r#"{"architecture":"Hopper","brand":"Nvidia","cudaComputeCapability":"9.0.0","cudaDriverVersion":"12.8.0","#,
                r#""driverVersion":"570.124.6","index":0,"minor":0,"pcieBusID":"0000:18:00.0","#,
                r#""productName":"NVIDIA H100 80GB HBM3","resource.kubernetes.io/pcieRoot":"pci0000:15","type":"gpu","#,
                r#""uuid":"GPU-4cf8db2d-06c0-7d70-1a51-e59b25b2c16c"}"#
            ))
        );
        // gpu-1's capacity also carries a request policy (consumable capacity): the value is kept.
        assert_eq!(l.strs(t, "capacity")[..2], [some(r#"{"memory":"80Gi"}"#), some(r#"{"memory":"80Gi"}"#)]);
        assert_eq!(
            l.str(t, "capacity", 2),
            some(r#"{"copyEngines":"1","decoders":"1","encoders":"0","jpegEngines":"1","memory":"9984Mi","memorySlice0":"1","multiprocessors":"16","ofaEngines":"0"}"#)
        );
        assert_eq!(l.ints(t, "observed_at"), vec![Some(1760428931000); 3]);
        assert_eq!(l.strs(t, "resource_version"), vec![some("48211"); 3]);

        let c = "device_classes";
        assert_eq!(l.strs(c, "name"), ["gpu.nvidia.com", "mig.nvidia.com", "example-gpu"].map(some));
        // Single quotes (the NVIDIA chart's classes) and double quotes both pin the driver.
        assert_eq!(l.strs(c, "driver"), vec![some("gpu.nvidia.com"); 3]);
        assert_eq!(l.strs(c, "extended_resource_name"), [None, None, some("example.com/gpu")]);
        assert_eq!(
            l.str(c, "selectors", 0),
            some(r#"[{"cel":{"expression":"device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"}}]"#)
        );
        assert_eq!(l.strs(c, "uid")[2], some("e91f4b06-2a7c-4d38-b5e1-0f6a3c9d8e27"));
        assert_eq!(l.ints(c, "observed_at"), vec![Some(1760428720000); 3]);
    }

    /// Templates give one row per request (alternatives apart); claims one per allocated device
    /// per consumer, with the device class the result's request asked for.
    #[test]
    fn dra_templates_and_claims() {
        let l = load_from(DRA, &["resourceclaimtemplates.json", "resourceclaims.json"]);
        assert!(l.diags.is_clean() && l.diags.warnings.is_empty(), "{:?}", l.diags);
        assert_eq!(l.kinds, kinds(&[("ResourceClaim", 4), ("ResourceClaimTemplate", 3)]));
        let t = "resource_claim_templates";
        assert_eq!(l.strs(t, "name"), ["single-gpu", "gpu-or-mig", "gpu-or-mig", "node-gpus"].map(some));
        assert_eq!(l.strs(t, "namespace"), vec![some("ml"); 4]);
        assert_eq!(l.strs(t, "request"), ["gpu", "gpu/whole", "gpu/mig", "gpus"].map(some));
        assert_eq!(
            l.strs(t, "device_class"),
            ["gpu.nvidia.com", "gpu.nvidia.com", "mig.nvidia.com", "gpu.nvidia.com"].map(some)
        );
        assert_eq!(l.strs(t, "allocation_mode"), ["ExactCount", "ExactCount", "ExactCount", "All"].map(some));
        assert_eq!(l.ints(t, "count"), [Some(1), Some(1), Some(2), None]);
        assert_eq!(l.strs(t, "uid")[0], some("0a4d7e91-c3b2-4f58-a6e0-1d9c8b7f2e43"));
        assert_eq!(l.ints(t, "observed_at"), vec![Some(1760432400000); 4]);

        let c = "resource_claims";
        assert_eq!(l.rows("k8s_objects"), 7);
        assert_eq!(l.strs(c, "name"), ["shared-gpu", "shared-gpu", "kv-small", "kv-large", "train-1-gpu-p4m9z"].map(some));
        assert_eq!(l.strs(c, "namespace"), ["ml", "ml", "serving", "serving", "ml"].map(some));
        // shared-gpu took its first alternative, a MIG device; its two pods each get the device.
        assert_eq!(l.strs(c, "request"), [some("gpu/mig"), some("gpu/mig"), some("gpu"), some("gpu"), None]);
        assert_eq!(
            l.strs(c, "device_class"),
            [some("mig.nvidia.com"), some("mig.nvidia.com"), some("gpu.nvidia.com"), some("gpu.nvidia.com"), None]
        );
        assert_eq!(
            l.strs(c, "device"),
            [some("gpu-2-mig-19-0-1"), some("gpu-2-mig-19-0-1"), some("gpu-1"), some("gpu-1"), None]
        );
        assert_eq!(l.strs(c, "driver"), [some("gpu.nvidia.com"), some("gpu.nvidia.com"), some("gpu.nvidia.com"), some("gpu.nvidia.com"), None]);
        assert_eq!(l.strs(c, "pool"), [some("gpu-node-1"), some("gpu-node-1"), some("gpu-node-1"), some("gpu-node-1"), None]);
        assert_eq!(
            l.strs(c, "reserved_name"),
            [
                some("notebook-7d9f8c6b5-2xk4q"),
                some("notebook-7d9f8c6b5-m8v5t"),
                some("vllm-small-0"),
                some("vllm-large-0"),
                None
            ]
        );
        assert_eq!(
            l.strs(c, "reserved_uid"),
            [
                some("2f6a9c1e-8b3d-4e70-a5c2-9d1f0e7b3a86"),
                some("c4d8e2a7-0f91-4b6c-8e3a-5b7d1c9f0a24"),
                some("9a1e5c3f-7b2d-4068-8f4c-2e6b0d9a1c75"),
                some("0d7c2b9e-4f6a-4183-9c5e-7a2d1b8f6e49"),
                None
            ]
        );
        assert_eq!(l.strs(c, "reserved_resource"), [some("pods"), some("pods"), some("pods"), some("pods"), None]);
        assert_eq!(l.ints(c, "reserved_count"), [Some(2), Some(2), Some(1), Some(1), Some(0)]);
        // One GPU shared by two claims: each names its share and the memory it consumes.
        assert_eq!(
            l.strs(c, "share_id"),
            [None, None, some("e3b7c1d9-5a2f-4c80-b6e4-1f9d7a3c0b58"), some("4f2a8e6c-0b3d-4d19-a7e5-6c1b9f8d3e02"), None]
        );
        assert_eq!(
            l.strs(c, "consumed_capacity"),
            [None, None, some(r#"{"memory":"20Gi"}"#), some(r#"{"memory":"60Gi"}"#), None]
        );
        // The pending claim was made from a template for pod train-1, which owns it.
        assert_eq!(l.strs(c, "owner_kind"), [None, None, None, None, some("Pod")]);
        assert_eq!(l.str(c, "owner_name", 4), some("train-1"));
        assert_eq!(l.str(c, "owner_uid", 4), some("8c5f1a3e-2b7d-4e96-a0c4-d9e6b2f7a153"));
        assert_eq!(l.strs(c, "uid")[0], some("5b9e2d70-4c1a-4e83-9f26-0d8b7a3c1e54"));
        assert_eq!(l.ints(c, "deletion_timestamp"), vec![None; 5]);
        assert_eq!(
            l.ints(c, "observed_at"),
            [Some(1760433000000), Some(1760433000000), Some(1760433600000), Some(1760433600000), Some(1760434205000)]
        );
    }

    /// A template-made claim's life in a watch stream: allocated and reserved, released while
    /// being deleted (the finalizer holds it), gone.
    #[test]
    fn dra_claim_watch_stream() {
        let l = load_from(DRA, &["resourceclaims.watch.jsonl"]);
        assert!(l.diags.is_clean() && l.diags.warnings.is_empty(), "{:?}", l.diags);
        let c = "resource_claims";
        assert_eq!(l.strs(c, "event_type"), ["ADDED", "MODIFIED", "MODIFIED", "DELETED"].map(some));
        assert_eq!(l.strs(c, "resource_version"), ["51521", "51526", "53904", "53911"].map(some));
        assert_eq!(l.strs(c, "name"), vec![some("train-0-gpu-7xq2b"); 4]);
        assert_eq!(l.strs(c, "owner_kind"), vec![some("Pod"); 4]);
        assert_eq!(l.strs(c, "owner_name"), vec![some("train-0"); 4]);
        assert_eq!(l.strs(c, "request"), [None, some("gpu"), some("gpu"), None]);
        assert_eq!(l.strs(c, "device_class"), [None, some("gpu.nvidia.com"), some("gpu.nvidia.com"), None]);
        assert_eq!(l.strs(c, "device"), [None, some("gpu-0"), some("gpu-0"), None]);
        assert_eq!(l.strs(c, "reserved_name"), [None, some("train-0"), None, None]);
        assert_eq!(l.strs(c, "reserved_uid"), [None, some("1e7b3d9f-5a2c-4f08-b6d1-e4c8a0f7b352"), None, None]);
        assert_eq!(l.ints(c, "reserved_count"), [Some(0), Some(1), Some(0), Some(0)]);
        assert_eq!(l.ints(c, "deletion_timestamp"), [None, None, Some(1760449651000), Some(1760449651000)]);
        assert_eq!(
            l.ints(c, "observed_at"),
            [Some(1760434202000), Some(1760434202000), Some(1760449651000), Some(1760449651000)]
        );
        assert_eq!(l.ints(c, "seq"), [Some(0), Some(1), Some(2), Some(3)]);
    }

    /// v1beta1 keeps a request's fields on the request and a device's under `basic`; the same
    /// objects in that layout give the same rows (bar the hash of the differing text, and the
    /// stream positions: the v1 objects come from four files).
    #[test]
    fn dra_v1beta1_layout_gives_the_v1_rows() {
        let v1 = load_from(DRA, &DRA_LISTS);
        let beta = load_from(DRA, &["v1beta1.json"]);
        for l in [&v1, &beta] {
            assert!(l.diags.is_clean() && l.diags.warnings.is_empty(), "{:?}", l.diags);
        }
        assert_eq!(v1.kinds, beta.kinds);
        assert_eq!(v1.strs("k8s_objects", "api_version"), vec![some("resource.k8s.io/v1"); 11]);
        assert_eq!(beta.strs("k8s_objects", "api_version"), vec![some("resource.k8s.io/v1beta1"); 11]);
        for table in ["resource_slices", "device_classes", "resource_claim_templates", "resource_claims"] {
            let skip = ["content_hash", "seq"];
            assert_eq!(cells(&v1, table, &skip), cells(&beta, table, &skip), "{table}");
            assert!(v1.rows(table) > 0, "{table}");
        }
    }

    /// Attribute names with a domain, a slice without devices (v1beta2), classes that pin no
    /// single driver, a template without requests.
    #[test]
    fn dra_edge_shapes() {
        let text = r#"
apiVersion: resource.k8s.io/v1beta2
kind: ResourceSlice
metadata: {name: accel-slice, creationTimestamp: "2025-10-14T08:00:00Z"}
spec:
  driver: accel.example.com
  nodeName: node-7
  pool: {name: node-7, generation: 4, resourceSliceCount: 1}
  devices:
  - name: accel-0
    attributes:
      accel.example.com/uuid: {string: GPU-0000aaaa}
      accel.example.com/type: {string: gpu}
      accel.example.com/healthy: {bool: true}
      other.example.com/uuid: {string: ignored}
      futureKind: {quantity: 5}
---
apiVersion: resource.k8s.io/v1beta2
kind: ResourceSlice
metadata: {name: empty-slice, creationTimestamp: "2025-10-14T08:00:00Z"}
spec: {driver: net.example.com, allNodes: true, pool: {name: fabric, generation: 2, resourceSliceCount: 1}}
---
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: two-drivers}
spec:
  selectors:
  - cel: {expression: "device.driver == 'a.example.com' || device.driver == \"b.example.com\""}
---
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: same-driver-twice}
spec:
  selectors:
  - cel: {expression: "device.driver=='c.example.com'"}
  - cel: {expression: "device.driver == 'c.example.com' && device.attributes['c.example.com'].type == 'gpu'"}
---
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: not-pinned}
spec:
  selectors:
  - cel: {expression: "device.driver != 'd.example.com' && mydevice.driver == 'e.example.com'"}
---
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: bare}
---
apiVersion: resource.k8s.io/v1beta2
kind: ResourceClaimTemplate
metadata: {name: empty, namespace: ml}
spec: {spec: {}}
"#;
        let l = load_text("dra.yaml", text);
        assert!(l.diags.is_clean(), "{:?}", l.diags);
        let t = "resource_slices";
        assert_eq!(l.strs(t, "device"), [some("accel-0"), None]);
        // The first name with a domain, in name order, wins (accel. before other.).
        assert_eq!(l.strs(t, "uuid"), [some("GPU-0000aaaa"), None]);
        assert_eq!(l.strs(t, "device_type"), [some("gpu"), None]);
        assert_eq!(l.strs(t, "parent_uuid"), [None, None]);
        assert_eq!(
            l.strs(t, "attributes"),
            [
                some(r#"{"accel.example.com/healthy":true,"accel.example.com/type":"gpu","accel.example.com/uuid":"GPU-0000aaaa","futureKind":{"quantity":5},"other.example.com/uuid":"ignored"}"#),
                None
            ]
        );
        assert_eq!(l.strs(t, "capacity"), [None, None]);
        assert_eq!(l.strs(t, "node_name"), [some("node-7"), None]);
        assert_eq!(l.strs(t, "pool"), [some("node-7"), some("fabric")]);
        assert_eq!(l.ints(t, "pool_generation"), [Some(4), Some(2)]);
        let c = "device_classes";
        assert_eq!(l.strs(c, "name"), ["two-drivers", "same-driver-twice", "not-pinned", "bare"].map(some));
        assert_eq!(l.strs(c, "driver"), [None, some("c.example.com"), None, None]);
        assert_eq!(l.strs(c, "selectors")[3], None);
        let r = "resource_claim_templates";
        assert_eq!(l.strs(r, "name"), [some("empty")]);
        assert_eq!(l.strs(r, "request"), [None]);
        assert_eq!(l.strs(r, "allocation_mode"), [None]);
        assert_eq!(l.ints(r, "count"), [None]);
    }

    /// Workloads whose pods make DRA claims from templates, or ask for extended resources.
    #[test]
    fn workload_claim_templates_and_extended_resources() {
        let l = load_from(DRA, &["workloads.yaml"]);
        assert!(l.diags.is_clean() && l.diags.warnings.is_empty(), "{:?}", l.diags);
        let t = "workloads";
        assert_eq!(l.strs(t, "name"), ["job-train-dra-5c7f2", "job-infer-ext-9b1d4", "pytorchjob-finetune-0e4a7"].map(some));
        // 3 pods with one single-gpu claim each; 1 launcher + 4 workers, the template named in
        // both the 1.31 field and the older source.resourceClaimTemplateName (shared-gpu is a
        // claim, not a template).
        assert_eq!(l.strs(t, "claim_templates"), [some(r#"{"single-gpu":"3"}"#), None, some(r#"{"gpu-or-mig":"5"}"#)]);
        // 2 x 2 example.com/gpu; the aux pod's nvidia.com/gpu limit and its other container's
        // example.com/nic request; not 500m of an FPGA nor hugepages (no domain).
        assert_eq!(
            l.strs(t, "pod_resources"),
            [None, some(r#"{"example.com/gpu":"4","example.com/nic":"1","nvidia.com/gpu":"1"}"#), None]
        );
        assert_eq!(l.ints(t, "gpu_count"), [Some(0), Some(1), Some(0)]);
    }

    /// A count no API server writes is bad input naming the object and field; the version is
    /// skipped, in every layout.
    #[test]
    fn dra_malformed_counts_are_reported() {
        let lines = [
            r#"{"apiVersion":"resource.k8s.io/v1","kind":"ResourceClaim","metadata":{"name":"c1","namespace":"ml"},"spec":{"devices":{"requests":[{"name":"gpu","exactly":{"deviceClassName":"gpu.nvidia.com","count":"two"}}]}}}"#,
            r#"{"apiVersion":"resource.k8s.io/v1","kind":"ResourceClaimTemplate","metadata":{"name":"t1","namespace":"ml"},"spec":{"spec":{"devices":{"requests":[{"name":"gpu","firstAvailable":[{"name":"a","deviceClassName":"x","count":1},{"name":"b","deviceClassName":"y","count":-1}]}]}}}}"#,
            r#"{"apiVersion":"resource.k8s.io/v1beta1","kind":"ResourceClaim","metadata":{"name":"c2","namespace":"ml"},"spec":{"devices":{"requests":[{"name":"gpu","deviceClassName":"gpu.nvidia.com","count":1.5}]}}}"#,
            r#"{"apiVersion":"resource.k8s.io/v1","kind":"ResourceSlice","metadata":{"name":"s1"},"spec":{"driver":"d","pool":{"name":"p","generation":"x"}}}"#,
            r#"{"apiVersion":"resource.k8s.io/v1","kind":"ResourceClaim","metadata":{"name":"ok","namespace":"ml"},"spec":{"devices":{"requests":[{"name":"gpu","exactly":{"deviceClassName":"gpu.nvidia.com","count":2}}]}}}"#,
        ];
        let l = load_text("dra.jsonl", &lines.join("\n"));
        let reasons: Vec<&str> = l.diags.errors.iter().map(|e| e.reason.as_str()).collect();
        assert_eq!(l.diags.errors.iter().filter(|e| e.error_type == "bad_field").count(), 4, "{reasons:#?}");
        for expected in [
            r#"ResourceClaim ml/c1: spec.devices.requests[0].exactly.count is "two", not a whole number >= 0"#,
            "ResourceClaimTemplate ml/t1: spec.spec.devices.requests[0].firstAvailable[1].count is -1",
            "ResourceClaim ml/c2: spec.devices.requests[0].count is 1.5",
            r#"ResourceSlice s1: spec.pool.generation is "x""#,
        ] {
            assert!(reasons.iter().any(|r| r.starts_with(expected)), "no error starts with {expected:?}: {reasons:#?}");
        }
        assert_eq!(l.kinds, kinds(&[("ResourceClaim", 1)]));
        assert_eq!(l.strs("resource_claims", "name"), [some("ok")]);
        assert!(!l.batches.contains_key("resource_claim_templates") && !l.batches.contains_key("resource_slices"));
    }
}
