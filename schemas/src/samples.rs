//! Tables fed by metric sources: DCGM exporter text, Prometheus API responses.

use crate::ColumnType::*;
use crate::{Column, DedupScope, Table, col};

/// A DCGM field that becomes a typed column of `gpu_samples`, under its current name and the
/// dcgm-exporter 1.x name.
#[derive(Debug, Clone, Copy)]
pub struct GpuMetric {
    pub column: &'static str,
    /// Names as exposed, current first; the 1.x exporter used lower-case `dcgm_*` names.
    pub names: &'static [&'static str],
}

const fn m(column: &'static str, names: &'static [&'static str]) -> GpuMetric {
    GpuMetric { column, names }
}

/// DCGM fields mapped onto `gpu_samples` columns. Every other metric lands in `metric_samples`.
pub const GPU_METRICS: &[GpuMetric] = &[
    m("gpu_util", &["DCGM_FI_DEV_GPU_UTIL", "dcgm_gpu_utilization"]),
    m("mem_copy_util", &["DCGM_FI_DEV_MEM_COPY_UTIL", "dcgm_mem_copy_utilization"]),
    m("engine_active", &["DCGM_FI_PROF_GR_ENGINE_ACTIVE"]),
    m("sm_active", &["DCGM_FI_PROF_SM_ACTIVE"]),
    m("tensor_active", &["DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"]),
    m("dram_active", &["DCGM_FI_PROF_DRAM_ACTIVE"]),
    m("fb_used_mib", &["DCGM_FI_DEV_FB_USED", "dcgm_fb_used"]),
    m("fb_free_mib", &["DCGM_FI_DEV_FB_FREE", "dcgm_fb_free"]),
    m("power_w", &["DCGM_FI_DEV_POWER_USAGE", "dcgm_power_usage"]),
    m("temp_c", &["DCGM_FI_DEV_GPU_TEMP", "dcgm_gpu_temp"]),
    m("memory_temp_c", &["DCGM_FI_DEV_MEMORY_TEMP", "dcgm_memory_temp"]),
    m("sm_clock_mhz", &["DCGM_FI_DEV_SM_CLOCK", "dcgm_sm_clock"]),
    m("mem_clock_mhz", &["DCGM_FI_DEV_MEM_CLOCK", "dcgm_memory_clock"]),
    m("xid_error", &["DCGM_FI_DEV_XID_ERRORS", "dcgm_xid_errors"]),
    m("energy_mj", &["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "dcgm_total_energy_consumption"]),
];

const GPU_SAMPLE_COLUMNS: &[Column] = &[
    col("ts", Timestamp, false, "Sample time (UTC): the sample's own timestamp, else its scrape's time"),
    col("hostname", Utf8, true, "`Hostname`/`hostname` label: the node name, or the exporter pod's hostname when the exporter does not run with host networking"),
    col("gpu", Int32, true, "`gpu` label: the GPU index on its host"),
    col("uuid", Utf8, true, "`UUID`/`uuid` label: the physical GPU (MIG instances share their parent's UUID)"),
    col("device", Utf8, true, "`device` label, e.g. nvidia0"),
    col("model_name", Utf8, true, "`modelName` label, e.g. NVIDIA H100 80GB HBM3"),
    col("mig_profile", Utf8, true, "`GPU_I_PROFILE` label (e.g. 3g.40gb); null for a whole GPU"),
    col("mig_instance", Int32, true, "`GPU_I_ID` label: the MIG GPU instance id; null for a whole GPU"),
    col("namespace", Utf8, true, "Namespace of the pod holding the GPU (`exported_namespace` beats `namespace`, then `pod_namespace`); null when none"),
    col("pod", Utf8, true, "Pod holding the GPU (`exported_pod` beats `pod`, then `pod_name`); null when none"),
    col("container", Utf8, true, "Container holding the GPU (`exported_container` beats `container`, then `container_name`); null when none"),
    col("gpu_util", Float64, true, "DCGM_FI_DEV_GPU_UTIL, percent 0..100"),
    col("mem_copy_util", Float64, true, "DCGM_FI_DEV_MEM_COPY_UTIL, percent 0..100"),
    col("engine_active", Float64, true, "DCGM_FI_PROF_GR_ENGINE_ACTIVE, ratio 0..1; null where the exporter lacks profiling metrics"),
    col("sm_active", Float64, true, "DCGM_FI_PROF_SM_ACTIVE, ratio 0..1"),
    col("tensor_active", Float64, true, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE, ratio 0..1"),
    col("dram_active", Float64, true, "DCGM_FI_PROF_DRAM_ACTIVE, ratio 0..1"),
    col("fb_used_mib", Float64, true, "DCGM_FI_DEV_FB_USED, framebuffer memory used, MiB"),
    col("fb_free_mib", Float64, true, "DCGM_FI_DEV_FB_FREE, framebuffer memory free, MiB"),
    col("power_w", Float64, true, "DCGM_FI_DEV_POWER_USAGE, watts"),
    col("temp_c", Float64, true, "DCGM_FI_DEV_GPU_TEMP, degrees C"),
    col("memory_temp_c", Float64, true, "DCGM_FI_DEV_MEMORY_TEMP, degrees C"),
    col("sm_clock_mhz", Float64, true, "DCGM_FI_DEV_SM_CLOCK, MHz"),
    col("mem_clock_mhz", Float64, true, "DCGM_FI_DEV_MEM_CLOCK, MHz"),
    col("xid_error", Int64, true, "DCGM_FI_DEV_XID_ERRORS: the last XID error code (0 = none)"),
    col("energy_mj", Float64, true, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, millijoules since boot"),
    col("labels", Utf8, true, "Every other label of the sample, as a JSON object with sorted keys (e.g. pci_bus_id, DCGM_FI_DRIVER_VERSION)"),
    col("distinct_labels", Utf8, true, "The labels among `labels` that tell a GPU's rows at one time apart, as sorted key=value pairs joined by commas: an HA scraper's replica, the exporter's pod_uid (its per-process series of a time-sliced GPU), vgpu (a pod's replicas of one time-sliced GPU), a DRA claim (dra_claim_name, dra_claim_namespace); null when none. Part of the key, so that no such row is taken for another's duplicate"),
];

/// One row per GPU (or MIG instance) per sample time.
pub const GPU_SAMPLES: Table = Table {
    name: "gpu_samples",
    doc: "DCGM exporter samples, one row per GPU or MIG instance (and pod) per sample time; DCGM \"blank\" sentinels are null",
    columns: GPU_SAMPLE_COLUMNS,
    partition_column: "ts",
    sort_by: &["hostname", "uuid", "mig_instance", "ts"],
    key: &["ts", "hostname", "uuid", "gpu", "mig_instance", "namespace", "pod", "container", "distinct_labels"],
    dedup: DedupScope::Partition,
};

const METRIC_SAMPLE_COLUMNS: &[Column] = &[
    col("ts", Timestamp, false, "Sample time (UTC)"),
    col("metric", Utf8, false, "Metric name as exposed (may contain `:`, e.g. vllm:num_requests_waiting)"),
    col("labels", Utf8, false, "All labels as a JSON object with sorted keys"),
    col("value", Float64, true, "Sample value (NaN and +/-Inf kept); null for a DCGM blank sentinel"),
];

/// Every sample not mapped onto `gpu_samples`, in long form: nothing read is dropped.
pub const METRIC_SAMPLES: Table = Table {
    name: "metric_samples",
    doc: "Every other sample, long form (ts, metric, labels, value)",
    columns: METRIC_SAMPLE_COLUMNS,
    partition_column: "ts",
    sort_by: &["metric", "labels", "ts"],
    key: &["ts", "metric", "labels"],
    dedup: DedupScope::Partition,
};
