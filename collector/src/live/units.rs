//! Pods scraped for unit counters (`[[units.counters]]`): an inference server's token and request
//! counters, read from the pod itself and stored with the pod's `namespace` and `pod` labels, the
//! way Prometheus' Kubernetes discovery labels them, so that the ledger finds the pod's run.
//!
//! Which pods: those the `[collector] unit_selector` label selector matches, else those annotated
//! `prometheus.io/scrape: "true"` (the common convention; `prometheus.io/port`, `prometheus.io/path`
//! and `prometheus.io/scheme` say where). Only the configured counters are kept: a vLLM server
//! exposes a few hundred series of histograms the ledger has no use for.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use gpuledger_dcgm_text::Reader;
use serde_json::Value;

use super::metrics::Metrics;
use super::scrape::{count_rejected, running_pod_host};
use crate::diag::{Diagnostics, Position};
use crate::tables::TableBatch;
use crate::tables::samples::SampleTables;

/// The pod a scraped endpoint belongs to: its labels on every sample kept.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct PodRef {
    pub namespace: String,
    pub pod: String,
}

/// How the pods to scrape are picked out of a pod list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pick {
    /// The list is already narrowed by a label selector: every running pod in it.
    Listed,
    /// Only pods annotated `prometheus.io/scrape: "true"`.
    Annotated,
}

const SCRAPE: &str = "prometheus.io/scrape";
const PORT: &str = "prometheus.io/port";
const PATH: &str = "prometheus.io/path";
const SCHEME: &str = "prometheus.io/scheme";

/// The metrics URL of each running pod of `list` that `pick` selects, with its pod. A pod's
/// port is its `prometheus.io/port` annotation, else `default_port`.
pub fn unit_pods_from_list(list: &Value, pick: Pick, default_port: u16) -> BTreeMap<String, PodRef> {
    let mut out = BTreeMap::new();
    for pod in list.get("items").and_then(Value::as_array).into_iter().flatten() {
        let annotation = |key: &str| pod.pointer("/metadata/annotations").and_then(|a| a.get(key)).and_then(Value::as_str).map(str::trim);
        if pick == Pick::Annotated && annotation(SCRAPE) != Some("true") {
            continue;
        }
        let Some(host) = running_pod_host(pod) else { continue };
        let (Some(namespace), Some(name)) = (pod.pointer("/metadata/namespace").and_then(Value::as_str), pod.pointer("/metadata/name").and_then(Value::as_str)) else { continue };
        // A port annotation that is not a port is the pod's mistake: its pod is passed over
        // rather than scraped somewhere it never said.
        let port = match annotation(PORT) {
            Some(p) => match p.parse::<u16>().ok().filter(|p| *p > 0) {
                Some(p) => p,
                None => {
                    tracing::warn!(namespace, pod = name, annotation = PORT, value = p, "not a port: the pod is not scraped for units");
                    continue;
                }
            },
            None => default_port,
        };
        let path = annotation(PATH).filter(|p| p.starts_with('/')).unwrap_or("/metrics");
        let scheme = if annotation(SCHEME) == Some("https") { "https" } else { "http" };
        out.insert(format!("{scheme}://{host}:{port}{path}"), PodRef { namespace: namespace.to_owned(), pod: name.to_owned() });
    }
    out
}

/// The samples of `body` whose metric is one of `keep`, labelled with `pod`'s namespace and
/// name, as table batches and their count. The exposition's own `namespace` and `pod` labels, if
/// it has any, are kept as `exported_namespace` and `exported_pod` (what Prometheus does), since
/// the pod scraped is the one the units belong to. A body with no sample line at all is a failed
/// scrape; bad lines in a good body are counted and passed over.
pub fn parse_counters(endpoint: &str, body: &[u8], scraped_ms: i64, pod: &PodRef, keep: &BTreeSet<String>, metrics: &Metrics) -> Result<(Vec<TableBatch>, u64), String> {
    let mut reader = Reader::new();
    let mut records = reader.records(body);
    let mut tables = SampleTables::new();
    let mut diags = Diagnostics::new();
    let (mut read, mut rejected, mut kept) = (0usize, 0u64, 0u64);
    let path = Path::new(endpoint);
    while let Some(item) = records.next() {
        let rec = match item {
            Ok(rec) => rec,
            Err(bad) => {
                rejected += 1;
                diags.error(path, Position::Line(bad.line), bad.kind.as_str(), format!("{}: {}", bad.reason, bad.excerpt));
                continue;
            }
        };
        read += 1;
        if !keep.contains(rec.name) {
            continue;
        }
        let mut pairs: Vec<(String, String)> = records
            .labels(rec.labels)
            .iter()
            .map(|(k, v)| match k.as_str() {
                "namespace" | "pod" => (format!("exported_{k}"), v.clone()),
                _ => (k.clone(), v.clone()),
            })
            .collect();
        pairs.push(("namespace".into(), pod.namespace.clone()));
        pairs.push(("pod".into(), pod.pod.clone()));
        let metric = tables.metric(rec.name.as_bytes());
        let series = tables.series(pairs);
        tables.push(metric, series, rec.timestamp.unwrap_or(scraped_ms), rec.value);
        kept += 1;
    }
    count_rejected(endpoint, read, rejected, &diags, metrics)?;
    let batches = tables.take_batches().map_err(|e| e.to_string())?;
    Ok((batches, kept))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Array;
    use serde_json::json;

    fn pod(name: &str, annotations: Value, phase: &str) -> Value {
        // Each pod its own address: a..f -> 10.1.0.1..6.
        let ip = format!("10.1.0.{}", name.bytes().last().unwrap() - b'a' + 1);
        json!({"metadata": {"name": name, "namespace": "inference", "annotations": annotations}, "status": {"phase": phase, "podIP": ip}})
    }

    #[test]
    fn annotated_running_pods_are_scraped_where_their_annotations_say() {
        let list = json!({"items": [
            pod("vllm-a", json!({"prometheus.io/scrape": "true", "prometheus.io/port": "8080", "prometheus.io/path": "/vllm/metrics"}), "Running"),
            pod("vllm-b", json!({"prometheus.io/scrape": "true"}), "Running"),
            pod("vllm-c", json!({"prometheus.io/scrape": "false"}), "Running"),
            pod("vllm-d", json!({"prometheus.io/scrape": "true"}), "Pending"),
            pod("vllm-e", json!({"prometheus.io/scrape": "true", "prometheus.io/port": "http"}), "Running"),
            pod("vllm-f", json!({}), "Running"),
        ]});
        let got = unit_pods_from_list(&list, Pick::Annotated, 8000);
        let urls: Vec<(&str, &str)> = got.iter().map(|(u, p)| (u.as_str(), p.pod.as_str())).collect();
        assert_eq!(urls, [("http://10.1.0.1:8080/vllm/metrics", "vllm-a"), ("http://10.1.0.2:8000/metrics", "vllm-b")]);
        // A selector already narrowed the list: the annotation is not needed.
        let listed = unit_pods_from_list(&list, Pick::Listed, 8000);
        assert_eq!(listed.values().map(|p| p.pod.as_str()).collect::<BTreeSet<_>>(), ["vllm-a", "vllm-b", "vllm-c", "vllm-f"].into_iter().collect());
    }

    #[test]
    fn only_the_configured_counters_are_kept_with_the_pods_labels() {
        let body = b"# TYPE vllm:generation_tokens_total counter\n\
            vllm:generation_tokens_total{engine=\"0\",model_name=\"qwen\"} 1200\n\
            vllm:request_success_total{engine=\"0\",finished_reason=\"stop\",model_name=\"qwen\",namespace=\"theirs\"} 7\n\
            vllm:num_requests_running{engine=\"0\",model_name=\"qwen\"} 3\n\
            broken line\n";
        let keep: BTreeSet<String> = ["vllm:generation_tokens_total".to_owned(), "vllm:request_success_total".to_owned()].into();
        let m = Metrics::default();
        let pod = PodRef { namespace: "inference".into(), pod: "vllm-0".into() };
        let (batches, n) = parse_counters("http://10.1.0.9:8000/metrics", body, 5_000, &pod, &keep, &m).unwrap();
        assert_eq!(n, 2, "the gauge is not kept");
        let (table, batch) = batches.iter().find(|(t, _)| t.name == "metric_samples").unwrap();
        assert_eq!(batch.num_rows(), 2, "{}", table.name);
        let labels = batch.column_by_name("labels").unwrap();
        let labels = arrow::array::cast::as_string_array(labels.as_ref());
        let text: Vec<&str> = (0..labels.len()).map(|i| labels.value(i)).collect();
        assert!(text.iter().all(|l| l.contains("\"namespace\":\"inference\"") && l.contains("\"pod\":\"vllm-0\"")), "{text:?}");
        assert!(text.iter().any(|l| l.contains("\"exported_namespace\":\"theirs\"")), "{text:?}");
        assert!(m.render(6_000).contains("gpuledger_rejected_total{source=\"http://10.1.0.9:8000/metrics\""), "the bad line is counted");
        let err = parse_counters("http://x/metrics", b"<html>502</html>\n", 5_000, &pod, &keep, &m).unwrap_err();
        assert!(err.contains("not Prometheus text"), "{err}");
    }
}
