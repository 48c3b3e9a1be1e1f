//! Dynamic Resource Allocation: the ResourceClaims through which the DRA pool's pods hold their
//! GPUs, worked out once from the simulation so that the Kubernetes objects (k8s.rs) and the
//! exporter's `dra_*` labels (dcgm.rs) name the same claims.
//!
//! The pool's GPUs are published by NVIDIA's DRA driver (`gpu.nvidia.com`) in one ResourceSlice
//! per node, the pool named after the node and each device `gpu-<index>`. A pod asks for its GPU
//! through `spec.resourceClaims[{name: gpu, ...}]` and its container's `resources.claims`:
//! - from a template (`resourceClaimTemplateName`): the resourceclaim controller makes the pod a
//!   claim `<pod>-gpu-<5 chars>` when the pod is created (owned by the pod, annotated
//!   `resource.kubernetes.io/pod-claim-name: gpu`); the scheduler allocates a device and
//!   reserves the claim for the pod when it binds it; the claim is deleted when the pod is done
//!   (its container terminated), or goes away before it ran;
//! - by name (`resourceClaimName`): a claim made before its pods, allocated and reserved for
//!   all of them when they are scheduled (together), deleted when they end (together).
//!
//! Each version records the time of its change (`creationTimestamp`, the allocation's
//! `allocationTimestamp`, `deletionTimestamp`), which is when a reader observes it: a sample
//! that names a claim but no pod then finds the claim reserved for exactly the pods that hold
//! the GPU at that time.

use crate::cluster::{Cluster, DRA_SHARED_CAPACITY_GI, tag};
use crate::rng::Rng;
use crate::schedule::{ClaimSource, Sim};

/// NVIDIA's DRA driver, and the DeviceClass of its GPUs (named after it, as its chart does).
pub const DRIVER: &str = "gpu.nvidia.com";
pub const DEVICE_CLASS: &str = "gpu.nvidia.com";
/// The name of the claim in a pod's `spec.resourceClaims` and of the request in a claim.
pub const POD_CLAIM: &str = "gpu";
/// The ResourceClaimTemplate of one whole GPU, in each namespace whose jobs use the DRA pool.
pub const SINGLE_GPU_TEMPLATE: &str = "single-gpu";
/// The templates of a [`crate::cluster::Sharing::DraCapacity`] GPU's claims, by slot: each asks
/// for that slot's [`DRA_SHARED_CAPACITY_GI`] of a device's memory.
pub const SHARED_TEMPLATES: [&str; 2] = ["gpu-20gi", "gpu-60gi"];
/// The quota resource Kueue's `deviceClassMappings` map [`DEVICE_CLASS`] to.
pub const KUEUE_RESOURCE: &str = "whole-gpus";
/// The capacity key a shared device's claims consume.
pub const CAPACITY_KEY: &str = "memory";

/// One ResourceClaim over its life.
#[derive(Debug, Clone)]
pub struct Claim {
    pub name: String,
    pub uid: String,
    /// Index into [`crate::cluster::NAMESPACES`].
    pub ns: usize,
    /// The template the claim was made from for its pod, or None: made by name.
    pub template: Option<&'static str>,
    /// Node index and GPU index (within the node) of the allocated device.
    pub node: u32,
    pub gpu: u32,
    /// Pods it is reserved for (once allocated), in pod order.
    pub pods: Vec<u32>,
    pub created_s: i64,
    /// Allocated and reserved (when its pods were scheduled), if ever.
    pub allocated_s: Option<i64>,
    pub deleted_s: Option<i64>,
    /// Where several claims share the device: the allocation's `shareID`, and the GiB of
    /// memory the claim consumes.
    pub share: Option<(String, u64)>,
}

/// Every claim, and each pod's (by pod index).
#[derive(Debug, Default)]
pub struct Claims {
    pub claims: Vec<Claim>,
    pub of_pod: Vec<Option<u32>>,
}

impl Claims {
    /// The claim pod `p` holds its GPU through, if it is a DRA pod.
    pub fn of(&self, p: u32) -> Option<&Claim> {
        self.of_pod.get(p as usize).copied().flatten().map(|c| &self.claims[c as usize])
    }
}

/// The claims of every DRA pod that was created.
pub fn build(seed: u64, cl: &Cluster, sim: &Sim) -> Claims {
    let mut out = Claims { claims: Vec::new(), of_pod: vec![None; sim.pods.len()] };
    let mut by_name: std::collections::BTreeMap<(usize, String), u32> = Default::default();
    for (p, pod) in sim.pods.iter().enumerate() {
        let job = &sim.jobs[pod.job as usize];
        let (Some(source), Some(&slot)) = (&job.claim, pod.slots.first()) else { continue };
        if pod.cancelled {
            continue;
        }
        let slot = &cl.slots[slot as usize];
        let scheduled = (pod.sched_s != i64::MAX).then_some(pod.sched_s);
        // Done when its container ends; a pod that never ran, when it goes away.
        let done = if pod.started_s != i64::MAX { Some(pod.end_s) } else { pod.gone_s };
        let mut rng = Rng::stream(seed, tag::DRA, (1 << 40) | p as u64);
        let c = match source {
            ClaimSource::Template(template) => {
                let share = SHARED_TEMPLATES
                    .iter()
                    .position(|t| t == template)
                    .map(|i| (rng.uuid(), DRA_SHARED_CAPACITY_GI[i]));
                out.claims.push(Claim {
                    name: format!("{}-{POD_CLAIM}-{}", pod.name, rng.name_suffix(5)),
                    uid: rng.uuid(),
                    ns: job.ns,
                    template: Some(template),
                    node: slot.node,
                    gpu: slot.gpu,
                    pods: vec![p as u32],
                    created_s: pod.created_s,
                    allocated_s: scheduled,
                    deleted_s: done,
                    share,
                });
                out.claims.len() as u32 - 1
            }
            ClaimSource::Named(name) => match by_name.get(&(job.ns, name.clone())) {
                Some(&c) => {
                    out.claims[c as usize].pods.push(p as u32);
                    c
                }
                None => {
                    out.claims.push(Claim {
                        name: name.clone(),
                        uid: rng.uuid(),
                        ns: job.ns,
                        template: None,
                        node: slot.node,
                        gpu: slot.gpu,
                        pods: vec![p as u32],
                        // Its owner makes it just before the pods that use it.
                        created_s: pod.created_s - 30,
                        allocated_s: scheduled,
                        deleted_s: done,
                        share: None,
                    });
                    let c = out.claims.len() as u32 - 1;
                    by_name.insert((job.ns, name.clone()), c);
                    c
                }
            },
        };
        out.of_pod[p] = Some(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::{PoolId, Sharing, Timeline};

    fn two_days() -> Timeline {
        Timeline { start_s: 1_790_812_800, end_s: 1_790_812_800 + 2 * 86_400, obj_start_s: 1_790_812_800 - 12 * 3600, interval_ms: 300_000, scrapes: 576 }
    }

    /// Every DRA pod that ran has a claim on its own GPU, reserved for it from before it started
    /// until its container ended; a claim made by name is reserved for two pods that run
    /// together; the capacity-shared GPU's claims consume 20 and 60 GiB.
    #[test]
    fn each_dra_pod_holds_its_gpu_through_a_claim_reserved_for_it() {
        let tl = two_days();
        let cl = crate::cluster::build(4, &tl, 24);
        let sim = crate::schedule::run(4, &cl, &tl);
        let claims = build(4, &cl, &sim);
        let mut shared = 0;
        let mut capacities = std::collections::BTreeSet::new();
        let mut ran = 0;
        for (p, pod) in sim.pods.iter().enumerate() {
            let dra = cl.nodes[pod.node as usize].pool == PoolId::Dra;
            let c = claims.of(p as u32);
            assert_eq!(c.is_some(), dra && !pod.cancelled, "{}", pod.name);
            let Some(c) = c else { continue };
            let slot = &cl.slots[pod.slots[0] as usize];
            assert_eq!((c.node, c.gpu), (slot.node, slot.gpu));
            assert!(c.pods.contains(&(p as u32)));
            if pod.started_s == i64::MAX {
                continue;
            }
            ran += 1;
            assert!(c.created_s < pod.started_s && c.allocated_s.is_some_and(|a| a < pod.started_s), "{}", c.name);
            assert_eq!(c.deleted_s, Some(pod.end_s), "{}", c.name);
            let gpu = &cl.nodes[c.node as usize].gpus[c.gpu as usize];
            match gpu.sharing {
                Sharing::DraClaim => {
                    shared += 1;
                    assert!(c.template.is_none() && c.name.starts_with("shared-gpu-") && c.pods.len() == 2, "{c:?}");
                    for &q in &c.pods {
                        let other = &sim.pods[q as usize];
                        assert_eq!((other.started_s, other.end_s), (pod.started_s, pod.end_s));
                    }
                }
                Sharing::DraCapacity => {
                    assert_eq!(c.pods.len(), 1);
                    capacities.insert(c.share.as_ref().unwrap().1);
                }
                _ => {
                    assert_eq!((c.template, c.pods.len(), c.share.is_none()), (Some(SINGLE_GPU_TEMPLATE), 1, true), "{c:?}");
                    assert!(c.name.starts_with(&format!("{}-gpu-", pod.name)) && c.name.len() == pod.name.len() + 10);
                }
            }
        }
        assert!(ran > 10 && shared >= 2, "{ran} DRA pods ran, {shared} on a shared claim");
        assert_eq!(capacities, std::collections::BTreeSet::from([20, 60]));
    }
}
