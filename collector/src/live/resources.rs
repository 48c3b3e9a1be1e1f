//! The Kubernetes resources the live collector reads: the one list both the watchers and the
//! read-only RBAC in `deploy/` are checked against.

/// One watched resource. `versions` are tried in order; the first the API server serves wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resource {
    /// API group, empty for the core group.
    pub group: &'static str,
    /// Preferred version first.
    pub versions: &'static [&'static str],
    /// Plural resource name, as in the URL and in RBAC rules.
    pub plural: &'static str,
    /// Kind of the items (list responses leave it out of each item).
    pub kind: &'static str,
    /// Namespaced resources are watched across all namespaces.
    pub namespaced: bool,
    /// A cluster may lack it (Kueue not installed): absence is not an error.
    pub optional: bool,
    /// Another entry serves the same objects when this one is absent (Events).
    pub fallback_of: Option<&'static str>,
}

const fn r(group: &'static str, versions: &'static [&'static str], plural: &'static str, kind: &'static str, namespaced: bool) -> Resource {
    Resource { group, versions, plural, kind, namespaced, optional: false, fallback_of: None }
}

/// Every resource watched, in start order. RBAC needs `get`, `list` and `watch` on each (and
/// nothing else); the DCGM exporter discovery lists pods, already in the list.
pub const WATCHED: &[Resource] = &[
    r("", &["v1"], "namespaces", "Namespace", false),
    r("", &["v1"], "nodes", "Node", false),
    r("", &["v1"], "pods", "Pod", true),
    r("batch", &["v1"], "jobs", "Job", true),
    // Events: the events.k8s.io/v1 API when served, else the core v1 one.
    r("events.k8s.io", &["v1"], "events", "Event", true),
    Resource { optional: true, fallback_of: Some("events.k8s.io/events"), ..r("", &["v1"], "events", "Event", true) },
    Resource { optional: true, ..r("kueue.x-k8s.io", &["v1beta2", "v1beta1"], "resourceflavors", "ResourceFlavor", false) },
    Resource { optional: true, ..r("kueue.x-k8s.io", &["v1beta2", "v1beta1"], "clusterqueues", "ClusterQueue", false) },
    Resource { optional: true, ..r("kueue.x-k8s.io", &["v1beta2", "v1beta1"], "localqueues", "LocalQueue", true) },
    Resource { optional: true, ..r("kueue.x-k8s.io", &["v1beta2", "v1beta1"], "workloads", "Workload", true) },
    // Dynamic Resource Allocation: which device (GPU UUID, MIG slice) a pod's claim holds, and
    // who shares it. Optional: clusters before 1.32 (or with DRA off) serve none of it.
    Resource { optional: true, ..r("resource.k8s.io", DRA_VERSIONS, "resourceslices", "ResourceSlice", false) },
    Resource { optional: true, ..r("resource.k8s.io", DRA_VERSIONS, "deviceclasses", "DeviceClass", false) },
    Resource { optional: true, ..r("resource.k8s.io", DRA_VERSIONS, "resourceclaimtemplates", "ResourceClaimTemplate", true) },
    Resource { optional: true, ..r("resource.k8s.io", DRA_VERSIONS, "resourceclaims", "ResourceClaim", true) },
];

/// resource.k8s.io versions, newest first: v1 from Kubernetes 1.34, v1beta2 from 1.33, v1beta1
/// from 1.32 (the tables read all three layouts).
const DRA_VERSIONS: &[&str] = &["v1", "v1beta2", "v1beta1"];

impl Resource {
    /// `group/plural` (`pods` for the core group): the name used in logs, metrics and positions.
    pub fn id(&self) -> String {
        if self.group.is_empty() { self.plural.to_owned() } else { format!("{}/{}", self.group, self.plural) }
    }

    /// `v1` or `group/version`.
    pub fn api_version(&self, version: &str) -> String {
        if self.group.is_empty() { version.to_owned() } else { format!("{}/{version}", self.group) }
    }

    /// The collection's URL path across all namespaces.
    pub fn path(&self, version: &str) -> String {
        if self.group.is_empty() {
            format!("/api/{version}/{}", self.plural)
        } else {
            format!("/apis/{}/{version}/{}", self.group, self.plural)
        }
    }
}
