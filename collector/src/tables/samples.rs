//! Metric samples -> `gpu_samples` (one row per GPU or MIG instance, pod and time) and
//! `metric_samples` (everything else, long form).
//!
//! Both metric sources (DCGM text and Prometheus API responses) feed [`SampleTables`] with
//! interned names and label sets (never with text: the builder knows no input format), so the
//! label rules of the issue live here once:
//! - label drift: `Hostname`/`hostname`, `UUID`/`uuid`, `pod`/`pod_name`/`exported_pod`, ...;
//!   when `exported_pod` and `pod` both exist the exported one names the workload (Prometheus
//!   renamed the exporter's own labels on scrape);
//! - empty label values mean absent;
//! - pod labels that name the DCGM exporter itself (Prometheus target labels, no `exported_*`)
//!   say nothing about who holds the GPU and are kept only in `labels`;
//! - DCGM "blank" sentinel values mean no value (null), counted as skipped.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arrow::array::{ArrayRef, Float64Builder, Int32Builder, Int64Builder, StringBuilder, TimestampMillisecondBuilder};
use arrow::record_batch::RecordBatch;
use gpuledger_schemas::{GPU_METRICS, Table};
use rustc_hash::FxHashMap;

use crate::error::{Error, Result};
use crate::labels;
use crate::tables::TableBatch;

const N_METRICS: usize = GPU_METRICS.len();

/// What a metric name maps to, resolved once per name.
#[derive(Debug, Clone, Copy)]
pub struct MetricRef {
    /// Index into [`GPU_METRICS`] when the metric is a `gpu_samples` column.
    gpu_column: Option<u8>,
    /// Interned name, for `metric_samples`.
    name: u32,
    /// Whether DCGM blank sentinels apply, and which.
    blank: BlankRule,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BlankRule {
    /// Not a DCGM field: every value is a value.
    None,
    /// A DCGM gauge: the int32, int64 and fp64 blank ranges all mean "no value".
    Gauge,
    /// A DCGM counter (energy, bytes, replays...): can legitimately pass 2^31 or 2^47, so only
    /// the int64 blank range applies.
    Counter,
}

/// A label set resolved once and reused by every sample that carries it.
#[derive(Debug, Clone, Copy)]
pub struct SeriesRef {
    /// The GPU (or MIG instance, with its pod) the series describes, if it names one.
    identity: Option<u32>,
    /// Interned JSON of all non-empty labels (for `metric_samples`).
    labels: u32,
    /// Interned JSON of the labels not mapped to a `gpu_samples` column.
    extras: u32,
}

/// Identity columns of a `gpu_samples` row.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
struct GpuIdentity {
    hostname: Option<String>,
    gpu: Option<i32>,
    uuid: Option<String>,
    device: Option<String>,
    model_name: Option<String>,
    mig_profile: Option<String>,
    mig_instance: Option<i32>,
    namespace: Option<String>,
    pod: Option<String>,
    container: Option<String>,
    /// Labels that stay in `labels` but tell rows apart, because the ledger reads them per row:
    /// the HA scraper replica and the pod's uid (docs/accounting.md "Observation", "Identity").
    distinct: Option<String>,
}

/// Counters a source reports in the run summary.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SampleCounts {
    /// Samples accepted (a sample is one metric value of one series at one time).
    pub samples: u64,
    /// Of those, DCGM blank sentinels stored as null.
    pub blank: u64,
    /// Samples of GPU fields that also went to `metric_samples` because their labels carry
    /// more than the GPU row keeps (an XID error's `err_msg`, say) or repeat a value already set.
    pub also_long_form: u64,
}

/// Names one [`SampleTables`] (see [`SampleTables::id`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TablesId(u64);

impl Default for TablesId {
    fn default() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        TablesId(NEXT.fetch_add(1, Ordering::Relaxed))
    }
}

/// Accumulates samples and builds the two batches.
#[derive(Default)]
pub struct SampleTables {
    names: Vec<String>,
    metric_by_name: FxHashMap<Box<[u8]>, MetricRef>,
    label_sets: Vec<String>,
    label_set_ids: FxHashMap<String, u32>,
    identities: Vec<(GpuIdentity, u32)>,
    identity_ids: FxHashMap<GpuIdentity, u32>,
    id: TablesId,
    // gpu_samples rows, columnar
    row_of: FxHashMap<(u32, i64), u32>,
    g_ts: Vec<i64>,
    g_identity: Vec<u32>,
    g_set: Vec<u32>,
    g_values: Vec<[f64; N_METRICS]>,
    // metric_samples rows
    m_ts: Vec<i64>,
    m_name: Vec<u32>,
    m_labels: Vec<u32>,
    m_value: Vec<Option<f64>>,
    pub counts: SampleCounts,
}

impl SampleTables {
    pub fn new() -> Self {
        Self::default()
    }

    /// Tells these tables apart from every other in the process: a source that caches the
    /// [`MetricRef`]s and [`SeriesRef`]s it resolved checks that they are still these tables'.
    pub fn id(&self) -> TablesId {
        self.id
    }

    /// Rows buffered (both tables).
    pub fn rows(&self) -> usize {
        self.g_ts.len() + self.m_ts.len()
    }

    pub fn metric_rows(&self) -> usize {
        self.m_ts.len()
    }

    /// Resolves a metric name (cached).
    pub fn metric(&mut self, name: &[u8]) -> MetricRef {
        if let Some(m) = self.metric_by_name.get(name) {
            return *m;
        }
        let text = String::from_utf8_lossy(name).into_owned();
        let gpu_column = GPU_METRICS.iter().position(|m| m.names.contains(&text.as_str())).map(|i| i as u8);
        let blank = if text.starts_with("DCGM_") || text.starts_with("dcgm_") {
            let upper = text.to_ascii_uppercase();
            if ["ENERGY", "COUNTER", "BYTES", "TOTAL", "_CNT", "VIOLATION"].iter().any(|w| upper.contains(w)) {
                BlankRule::Counter
            } else {
                BlankRule::Gauge
            }
        } else {
            BlankRule::None
        };
        let r = MetricRef { gpu_column, name: self.names.len() as u32, blank };
        self.names.push(text);
        self.metric_by_name.insert(name.into(), r);
        r
    }

    /// Resolves a label set (any order; empty values are dropped as absent).
    pub fn series(&mut self, mut pairs: Vec<(String, String)>) -> SeriesRef {
        pairs.retain(|(_, v)| !v.is_empty());
        pairs.sort();
        let all = self.intern_labels(labels::to_json(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str()))));
        let (identity, extras_pairs) = resolve_identity(&pairs);
        let extras = self.intern_labels(labels::to_json(extras_pairs.iter().map(|(k, v)| (*k, *v))));
        let identity = identity.map(|id| match self.identity_ids.get(&id) {
            Some(i) => *i,
            None => {
                let i = self.identities.len() as u32;
                self.identity_ids.insert(id.clone(), i);
                self.identities.push((id, extras));
                i
            }
        });
        SeriesRef { identity, labels: all, extras }
    }

    fn intern_labels(&mut self, json: String) -> u32 {
        if let Some(i) = self.label_set_ids.get(&json) {
            return *i;
        }
        let i = self.label_sets.len() as u32;
        self.label_sets.push(json.clone());
        self.label_set_ids.insert(json, i);
        i
    }

    /// Adds one sample.
    pub fn push(&mut self, metric: MetricRef, series: SeriesRef, ts_ms: i64, value: f64) {
        self.counts.samples += 1;
        let blank = is_blank(metric.blank, value);
        if blank {
            self.counts.blank += 1;
        }
        if let (None, Some(identity), BlankRule::Gauge | BlankRule::Counter) = (metric.gpu_column, series.identity, metric.blank) {
            // Any DCGM field observes its GPU (docs/accounting.md "Observation"), even one that is not a
            // column (FB_TOTAL, PSTATE, ...): the GPU gets its row; the value goes long form.
            self.gpu_row(identity, ts_ms);
        }
        if let (Some(col), Some(identity)) = (metric.gpu_column, series.identity) {
            let row = self.gpu_row(identity, ts_ms);
            let bit = 1u32 << col;
            let repeated = self.g_set[row] & bit != 0;
            let richer = self.identities[identity as usize].1 != series.extras;
            if !repeated && !blank && !value.is_nan() {
                self.g_set[row] |= bit;
                self.g_values[row][col as usize] = value;
            }
            if !repeated && !richer {
                return;
            }
            self.counts.also_long_form += 1;
        }
        self.m_ts.push(ts_ms);
        self.m_name.push(metric.name);
        self.m_labels.push(series.labels);
        self.m_value.push(if blank { None } else { Some(value) });
    }

    /// The `gpu_samples` row of a GPU at a time, made empty if it is new.
    fn gpu_row(&mut self, identity: u32, ts_ms: i64) -> usize {
        match self.row_of.get(&(identity, ts_ms)) {
            Some(r) => *r as usize,
            None => {
                let r = self.g_ts.len();
                self.row_of.insert((identity, ts_ms), r as u32);
                self.g_ts.push(ts_ms);
                self.g_identity.push(identity);
                self.g_set.push(0);
                self.g_values.push([0.0; N_METRICS]);
                r
            }
        }
    }

    /// Builds `gpu_samples` and `metric_samples` batches (empty tables are left out) and clears
    /// the rows, keeping the interned names and series for the next file.
    pub fn take_batches(&mut self) -> Result<Vec<TableBatch>> {
        let mut out = Vec::new();
        if !self.g_ts.is_empty() {
            let t: &'static Table = &gpuledger_schemas::GPU_SAMPLES;
            out.push((t, self.gpu_batch(t)?));
        }
        if !self.m_ts.is_empty() {
            let t: &'static Table = &gpuledger_schemas::METRIC_SAMPLES;
            out.push((t, self.metric_batch(t)?));
        }
        self.row_of.clear();
        self.g_ts.clear();
        self.g_identity.clear();
        self.g_set.clear();
        self.g_values.clear();
        self.m_ts.clear();
        self.m_name.clear();
        self.m_labels.clear();
        self.m_value.clear();
        Ok(out)
    }

    fn gpu_batch(&self, table: &'static Table) -> Result<RecordBatch> {
        let n = self.g_ts.len();
        let ids = || self.g_identity.iter().map(|i| &self.identities[*i as usize].0);
        let strings = |f: &dyn Fn(&GpuIdentity) -> Option<&str>| -> ArrayRef {
            let mut b = StringBuilder::with_capacity(n, n * 8);
            for id in ids() {
                b.append_option(f(id));
            }
            Arc::new(b.finish())
        };
        let ints = |f: &dyn Fn(&GpuIdentity) -> Option<i32>| -> ArrayRef {
            let mut b = Int32Builder::with_capacity(n);
            for id in ids() {
                b.append_option(f(id));
            }
            Arc::new(b.finish())
        };
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(table.columns.len());
        for c in table.columns {
            let array: ArrayRef = match c.name {
                "ts" => {
                    let mut b = TimestampMillisecondBuilder::with_capacity(n);
                    b.append_slice(&self.g_ts);
                    Arc::new(b.finish().with_timezone("UTC"))
                }
                "hostname" => strings(&|i| i.hostname.as_deref()),
                "gpu" => ints(&|i| i.gpu),
                "uuid" => strings(&|i| i.uuid.as_deref()),
                "device" => strings(&|i| i.device.as_deref()),
                "model_name" => strings(&|i| i.model_name.as_deref()),
                "mig_profile" => strings(&|i| i.mig_profile.as_deref()),
                "mig_instance" => ints(&|i| i.mig_instance),
                "namespace" => strings(&|i| i.namespace.as_deref()),
                "pod" => strings(&|i| i.pod.as_deref()),
                "container" => strings(&|i| i.container.as_deref()),
                "distinct_labels" => strings(&|i| i.distinct.as_deref()),
                "labels" => {
                    let mut b = StringBuilder::with_capacity(n, n * 32);
                    for i in &self.g_identity {
                        b.append_value(&self.label_sets[self.identities[*i as usize].1 as usize]);
                    }
                    Arc::new(b.finish())
                }
                name => {
                    let Some(m) = GPU_METRICS.iter().position(|m| m.column == name) else {
                        return Err(internal(table, format!("no builder for column {name}")));
                    };
                    let bit = 1u32 << m;
                    let values = self.g_set.iter().zip(&self.g_values).map(|(set, v)| (set & bit != 0).then_some(v[m]));
                    if c.ty == gpuledger_schemas::ColumnType::Int64 {
                        let mut b = Int64Builder::with_capacity(n);
                        for v in values {
                            b.append_option(v.map(|x| x as i64));
                        }
                        Arc::new(b.finish())
                    } else {
                        let mut b = Float64Builder::with_capacity(n);
                        for v in values {
                            b.append_option(v);
                        }
                        Arc::new(b.finish())
                    }
                }
            };
            columns.push(array);
        }
        RecordBatch::try_new(table.arrow_schema(), columns).map_err(|source| Error::Arrow { table: table.name, source })
    }

    fn metric_batch(&self, table: &'static Table) -> Result<RecordBatch> {
        let n = self.m_ts.len();
        let mut ts = TimestampMillisecondBuilder::with_capacity(n);
        ts.append_slice(&self.m_ts);
        let mut name = StringBuilder::with_capacity(n, n * 24);
        for i in &self.m_name {
            name.append_value(&self.names[*i as usize]);
        }
        let mut labels = StringBuilder::with_capacity(n, n * 64);
        for i in &self.m_labels {
            labels.append_value(&self.label_sets[*i as usize]);
        }
        let mut value = Float64Builder::with_capacity(n);
        for v in &self.m_value {
            value.append_option(*v);
        }
        let mut columns: Vec<ArrayRef> = Vec::new();
        for c in table.columns {
            columns.push(match c.name {
                "ts" => Arc::new(ts.finish().with_timezone("UTC")),
                "metric" => Arc::new(name.finish()),
                "labels" => Arc::new(labels.finish()),
                "value" => Arc::new(value.finish()),
                other => return Err(internal(table, format!("no builder for column {other}"))),
            });
        }
        RecordBatch::try_new(table.arrow_schema(), columns).map_err(|source| Error::Arrow { table: table.name, source })
    }
}

fn internal(table: &'static Table, msg: String) -> Error {
    Error::Arrow { table: table.name, source: arrow::error::ArrowError::SchemaError(msg) }
}

/// DCGM marks "no value" with sentinels near the top of each field type's range
/// (dcgm_structs.h: DCGM_INT32_BLANK 0x7ffffff0, DCGM_INT64_BLANK 0x7ffffffffffffff0,
/// DCGM_FP64_BLANK 140737488355328.0, each followed by NOT_FOUND, NOT_SUPPORTED, ...).
fn is_blank(rule: BlankRule, v: f64) -> bool {
    const INT32_BLANK: f64 = 2_147_483_632.0;
    const INT32_MAX: f64 = 2_147_483_647.0;
    const FP64_BLANK: f64 = 140_737_488_355_328.0;
    const INT64_BLANK: f64 = 9_223_372_036_854_775_792.0;
    match rule {
        BlankRule::None => false,
        BlankRule::Counter => v >= INT64_BLANK,
        BlankRule::Gauge => (INT32_BLANK..=INT32_MAX).contains(&v) || v >= FP64_BLANK,
    }
}

/// Label keys mapped to identity columns; the first present wins.
const HOSTNAME: &[&str] = &["Hostname", "hostname"];
const UUID: &[&str] = &["UUID", "uuid"];
const MODEL: &[&str] = &["modelName", "model_name"];
const NAMESPACE: &[&str] = &["exported_namespace", "namespace", "pod_namespace"];
/// Labels kept in `labels` whose every value needs rows of its own (see `GpuIdentity`).
/// (A DRA device two claims share has a series per claim; without pod labels only the claim
/// tells them apart. A pod holding two replicas of one time-sliced GPU has a series per replica,
/// told apart by `vgpu`: folded into one row, the second's values would go long form or not
/// depending on where a flush falls.)
const DISTINCT: &[&str] = &["__replica__", "dra_claim_name", "dra_claim_namespace", "pod_uid", "prometheus_replica", "replica", "vgpu"];
const POD: &[&str] = &["exported_pod", "pod", "pod_name"];
const CONTAINER: &[&str] = &["exported_container", "container", "container_name"];

/// Splits sorted, non-empty label pairs into a GPU identity (if the labels name a GPU) and the
/// labels left over.
fn resolve_identity(pairs: &[(String, String)]) -> (Option<GpuIdentity>, Vec<(&str, &str)>) {
    fn get<'a>(pairs: &'a [(String, String)], keys: &[&str]) -> Option<(&'a str, &'a str)> {
        keys.iter().find_map(|k| pairs.iter().find(|(pk, _)| pk == k).map(|(k, v)| (k.as_str(), v.as_str())))
    }
    fn take_str<'a>(pairs: &'a [(String, String)], keys: &[&str], used: &mut Vec<&'a str>) -> Option<String> {
        get(pairs, keys).map(|(k, v)| {
            used.push(k);
            v.to_string()
        })
    }
    fn parse_int<'a>(kv: Option<(&'a str, &'a str)>, used: &mut Vec<&'a str>) -> Option<i32> {
        let (k, v) = kv?;
        let n = v.trim().parse::<i32>().ok()?;
        used.push(k);
        Some(n)
    }
    let mut used: Vec<&str> = Vec::new();
    let uuid = take_str(pairs, UUID, &mut used);
    let gpu_label = get(pairs, &["gpu"]);
    if uuid.is_none() && gpu_label.is_none() {
        return (None, pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect());
    }
    let gpu = parse_int(gpu_label, &mut used);
    let mig_instance = parse_int(get(pairs, &["GPU_I_ID"]), &mut used);
    let distinct: Vec<String> = pairs
        .iter()
        .filter(|(k, _)| DISTINCT.contains(&k.as_str()))
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let mut id = GpuIdentity {
        distinct: (!distinct.is_empty()).then(|| distinct.join(",")),
        hostname: take_str(pairs, HOSTNAME, &mut used),
        gpu,
        uuid,
        device: take_str(pairs, &["device"], &mut used),
        model_name: take_str(pairs, MODEL, &mut used),
        mig_profile: take_str(pairs, &["GPU_I_PROFILE"], &mut used),
        mig_instance,
        ..Default::default()
    };
    // Pod labels: prefer the exported_* ones (the workload) over Prometheus' target labels.
    let ns = get(pairs, NAMESPACE);
    let pod = get(pairs, POD);
    let container = get(pairs, CONTAINER);
    let names_exporter = pod.is_some_and(|(k, v)| k != "exported_pod" && is_exporter_pod(v))
        || container.is_some_and(|(k, v)| k != "exported_container" && is_exporter_pod(v));
    if !names_exporter {
        for (slot, kv) in [(&mut id.namespace, ns), (&mut id.pod, pod), (&mut id.container, container)] {
            if let Some((k, v)) = kv {
                *slot = Some(v.to_string());
                used.push(k);
            }
        }
    }
    let extras = pairs
        .iter()
        .filter(|(k, _)| !used.contains(&k.as_str()))
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    (Some(id), extras)
}

/// True for the DCGM exporter's own pod or container name (what Prometheus' target labels say
/// when the exporter's pod labels were not kept as `exported_*`).
fn is_exporter_pod(name: &str) -> bool {
    name == "nvidia-dcgm-exporter"
        || name == "dcgm-exporter"
        || name.starts_with("nvidia-dcgm-exporter-")
        || name.starts_with("dcgm-exporter-")
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Array, AsArray};
    use arrow::datatypes::{Float64Type, Int32Type, Int64Type};

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn col<'a>(b: &'a RecordBatch, name: &str) -> &'a ArrayRef {
        b.column(b.schema().index_of(name).unwrap())
    }

    #[test]
    fn metrics_of_one_gpu_and_time_share_a_row() {
        let mut t = SampleTables::new();
        let s = t.series(pairs(&[("gpu", "0"), ("UUID", "GPU-a"), ("Hostname", "n1"), ("pod", ""), ("namespace", "")]));
        let util = t.metric(b"DCGM_FI_DEV_GPU_UTIL");
        let temp = t.metric(b"DCGM_FI_DEV_GPU_TEMP");
        t.push(util, s, 1000, 42.0);
        t.push(temp, s, 1000, 61.0);
        t.push(util, s, 2000, 7.0);
        let batches = t.take_batches().unwrap();
        assert_eq!(batches.len(), 1, "no long-form rows expected");
        let b = &batches[0].1;
        assert_eq!(b.num_rows(), 2);
        let util = col(b, "gpu_util").as_primitive::<Float64Type>();
        assert_eq!((util.value(0), util.value(1)), (42.0, 7.0));
        let temp = col(b, "temp_c").as_primitive::<Float64Type>();
        assert_eq!(temp.value(0), 61.0);
        assert!(temp.is_null(1));
        assert!(col(b, "pod").is_null(0), "empty pod label means no pod");
        assert!(col(b, "engine_active").is_null(0));
    }

    #[test]
    fn label_drift_and_exported_pod_wins() {
        let mut t = SampleTables::new();
        let s = t.series(pairs(&[
            ("gpu", "1"),
            ("uuid", "GPU-b"),
            ("hostname", "node-7"),
            ("pod", "nvidia-dcgm-exporter-abc"),
            ("namespace", "gpu-operator"),
            ("container", "nvidia-dcgm-exporter"),
            ("exported_pod", "train-0"),
            ("exported_namespace", "ml"),
            ("exported_container", "main"),
        ]));
        let m = t.metric(b"dcgm_gpu_utilization");
        t.push(m, s, 5, 90.0);
        let b = &t.take_batches().unwrap()[0].1;
        assert_eq!(col(b, "hostname").as_string::<i32>().value(0), "node-7");
        assert_eq!(col(b, "uuid").as_string::<i32>().value(0), "GPU-b");
        assert_eq!(col(b, "pod").as_string::<i32>().value(0), "train-0");
        assert_eq!(col(b, "namespace").as_string::<i32>().value(0), "ml");
        assert_eq!(col(b, "container").as_string::<i32>().value(0), "main");
        assert_eq!(col(b, "gpu").as_primitive::<Int32Type>().value(0), 1);
        assert_eq!(col(b, "gpu_util").as_primitive::<Float64Type>().value(0), 90.0);
        let extras: serde_json::Value = serde_json::from_str(col(b, "labels").as_string::<i32>().value(0)).unwrap();
        assert_eq!(extras["pod"], "nvidia-dcgm-exporter-abc", "target labels are kept, not lost");
    }

    #[test]
    fn series_of_two_dra_claims_on_one_device_stay_on_their_own_rows() {
        // Without pod labels, a device two claims share (shareID) has one series per claim: the
        // claims are the only holders the ledger can tell apart, so neither may be folded into
        // the other's row (its values would go long form, its claim lost).
        let mut t = SampleTables::new();
        let base = [("gpu", "0"), ("UUID", "GPU-d"), ("Hostname", "n1"), ("dra_claim_namespace", "ml"), ("dra_device_name", "gpu-0")];
        let claim = |t: &mut SampleTables, name: &str| {
            let mut p = base.to_vec();
            p.push(("dra_claim_name", name));
            t.series(pairs(&p))
        };
        let small = claim(&mut t, "small");
        let large = claim(&mut t, "large");
        let m = t.metric(b"DCGM_FI_DEV_GPU_UTIL");
        t.push(m, small, 1000, 90.0);
        t.push(m, large, 1000, 90.0);
        let batches = t.take_batches().unwrap();
        assert_eq!(batches.len(), 1, "nothing goes long form");
        let b = &batches[0].1;
        let labels: Vec<&str> = (0..b.num_rows()).map(|i| col(b, "labels").as_string::<i32>().value(i)).collect();
        assert_eq!(labels.len(), 2);
        assert!(labels.iter().any(|l| l.contains(r#""dra_claim_name":"small""#)) && labels.iter().any(|l| l.contains(r#""dra_claim_name":"large""#)), "{labels:?}");
    }

    #[test]
    fn replica_and_pod_uid_labels_stay_on_their_own_rows() {
        // Two HA scrapers' series of one GPU, and a pod_uid: each row keeps its own labels (the
        // ledger keeps one replica per GPU and day, and picks the pod by uid).
        let mut t = SampleTables::new();
        let base = [("gpu", "0"), ("UUID", "GPU-h"), ("Hostname", "n1"), ("pod", "w-0"), ("namespace", "ml")];
        let series = |t: &mut SampleTables, extra: (&str, &str)| {
            let mut p = base.to_vec();
            p.push(extra);
            t.series(pairs(&p))
        };
        let a = series(&mut t, ("prometheus_replica", "a"));
        let b = series(&mut t, ("prometheus_replica", "b"));
        let u = series(&mut t, ("pod_uid", "u2"));
        let m = t.metric(b"DCGM_FI_DEV_GPU_UTIL");
        t.push(m, a, 1000, 90.0);
        t.push(m, b, 11_000, 10.0);
        t.push(m, u, 31_000, 50.0);
        let batches = t.take_batches().unwrap();
        assert_eq!(batches.len(), 1, "nothing goes long form");
        let b = &batches[0].1;
        let labels: Vec<&str> = (0..b.num_rows()).map(|i| col(b, "labels").as_string::<i32>().value(i)).collect();
        assert_eq!(labels, [r#"{"prometheus_replica":"a"}"#, r#"{"prometheus_replica":"b"}"#, r#"{"pod_uid":"u2"}"#]);
    }

    #[test]
    fn exporter_target_labels_do_not_allocate_the_gpu() {
        let mut t = SampleTables::new();
        let s = t.series(pairs(&[
            ("gpu", "0"),
            ("UUID", "GPU-c"),
            ("pod", "nvidia-dcgm-exporter-4v7jz"),
            ("namespace", "gpu-operator"),
            ("container", "nvidia-dcgm-exporter"),
        ]));
        let m = t.metric(b"DCGM_FI_DEV_GPU_UTIL");
        t.push(m, s, 5, 0.0);
        let b = &t.take_batches().unwrap()[0].1;
        assert!(col(b, "pod").is_null(0));
        assert!(col(b, "namespace").is_null(0));
    }

    #[test]
    fn blank_sentinels_become_null_and_are_counted() {
        let mut t = SampleTables::new();
        let s = t.series(pairs(&[("gpu", "0"), ("UUID", "GPU-d")]));
        let mem_temp = t.metric(b"DCGM_FI_DEV_MEMORY_TEMP");
        let energy = t.metric(b"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION");
        let power = t.metric(b"DCGM_FI_DEV_POWER_USAGE");
        t.push(mem_temp, s, 1, 9_223_372_036_854_775_794.0);
        t.push(energy, s, 1, 2_147_483_640.0); // a real energy reading inside the int32 blank window
        t.push(power, s, 1, 140_737_488_355_328.0);
        assert_eq!(t.counts.blank, 2);
        let b = &t.take_batches().unwrap()[0].1;
        assert!(col(b, "memory_temp_c").is_null(0));
        assert!(col(b, "power_w").is_null(0));
        assert_eq!(col(b, "energy_mj").as_primitive::<Float64Type>().value(0), 2_147_483_640.0);
    }

    #[test]
    fn mig_instances_are_separate_rows_sharing_the_uuid() {
        let mut t = SampleTables::new();
        let m = t.metric(b"DCGM_FI_PROF_GR_ENGINE_ACTIVE");
        for (id, prof) in [("7", "1g.5gb"), ("5", "2g.10gb")] {
            let s = t.series(pairs(&[("gpu", "0"), ("UUID", "GPU-e"), ("GPU_I_ID", id), ("GPU_I_PROFILE", prof)]));
            t.push(m, s, 1, 0.5);
        }
        let b = &t.take_batches().unwrap()[0].1;
        assert_eq!(b.num_rows(), 2);
        let inst = col(b, "mig_instance").as_primitive::<Int32Type>();
        assert_eq!((inst.value(0), inst.value(1)), (7, 5));
        assert_eq!(col(b, "mig_profile").as_string::<i32>().value(1), "2g.10gb");
    }

    #[test]
    fn richer_labels_and_non_gpu_metrics_go_long_form() {
        let mut t = SampleTables::new();
        let base = t.series(pairs(&[("gpu", "0"), ("UUID", "GPU-f")]));
        let xid = t.series(pairs(&[("gpu", "0"), ("UUID", "GPU-f"), ("err_code", "79"), ("err_msg", "fell off the bus")]));
        let util = t.metric(b"DCGM_FI_DEV_GPU_UTIL");
        let xid_m = t.metric(b"DCGM_FI_DEV_XID_ERRORS");
        let vllm = t.metric(b"vllm:num_requests_waiting");
        let no_gpu = t.series(pairs(&[("model_name", "qwen")]));
        t.push(util, base, 1, 50.0);
        t.push(xid_m, xid, 1, 79.0);
        t.push(vllm, no_gpu, 1, 3.0);
        assert_eq!(t.counts.also_long_form, 1);
        let batches = t.take_batches().unwrap();
        let g = &batches[0].1;
        assert_eq!(g.num_rows(), 1);
        assert_eq!(col(g, "xid_error").as_primitive::<Int64Type>().value(0), 79);
        let m = &batches[1].1;
        assert_eq!(m.num_rows(), 2);
        let names: Vec<&str> = (0..2).map(|i| col(m, "metric").as_string::<i32>().value(i)).collect();
        assert_eq!(names, ["DCGM_FI_DEV_XID_ERRORS", "vllm:num_requests_waiting"]);
        assert!(col(m, "labels").as_string::<i32>().value(0).contains("\"err_msg\":\"fell off the bus\""));
    }

    #[test]
    fn any_dcgm_field_observes_its_gpu() {
        let mut t = SampleTables::new();
        let gpu = t.series(pairs(&[("gpu", "0"), ("UUID", "GPU-t4"), ("Hostname", "n1")]));
        let fb_total = t.metric(b"DCGM_FI_DEV_FB_TOTAL");
        let pstate = t.metric(b"DCGM_FI_DEV_PSTATE");
        let other = t.metric(b"node_gpu_something");
        t.push(fb_total, gpu, 1000, 15360.0);
        t.push(pstate, gpu, 1000, 0.0);
        t.push(other, gpu, 2000, 1.0);
        let batches = t.take_batches().unwrap();
        let g = &batches.iter().find(|(t, _)| t.name == "gpu_samples").expect("a gpu_samples row").1;
        // One row at t = 1000 (two fields, one observation); the non-DCGM metric observes nothing.
        assert_eq!(g.num_rows(), 1);
        assert_eq!(col(g, "uuid").as_string::<i32>().value(0), "GPU-t4");
        assert!(col(g, "gpu_util").is_null(0));
        let m = &batches.iter().find(|(t, _)| t.name == "metric_samples").unwrap().1;
        assert_eq!(m.num_rows(), 3, "every value still lands long form");
    }
}
