//! `prometheus_query` and `prometheus_query_range`: Prometheus HTTP API responses (`/api/v1/query` vectors and
//! `/api/v1/query_range` matrices) of DCGM series, read into the same tables as exporter text.
//!
//! Sample times are float seconds in the API; they are rounded to milliseconds. A series
//! without `__name__` (the result of an expression such as `rate(...)`) is kept under the name
//! `__expr__` in `metric_samples`, so nothing read is dropped.

use std::path::Path;

use serde_json::Value;

use crate::diag::{Diagnostics, Position, line_of};
use crate::sources::{Loaded, Origin, Source};
use crate::tables::samples::SampleTables;

/// True when a JSON document looks like a Prometheus API response (sniffed from its start, so
/// large Kubernetes object files are not parsed twice).
pub fn looks_like_api_response(bytes: &[u8]) -> bool {
    let head = &bytes[..bytes.len().min(4096)];
    memchr::memmem::find(head, b"\"resultType\"").is_some()
        || (memchr::memmem::find(head, b"\"status\"").is_some() && memchr::memmem::find(head, b"\"data\"").is_some())
}

/// Counts of one response.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ApiStats {
    pub series: u64,
    pub samples: u64,
    pub rejected: u64,
}

/// The series of one response, as read.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ApiRecords {
    pub series: Vec<ApiSeries>,
    /// Points, series or whole responses rejected (each reported).
    pub rejected: u64,
}

/// One series of a response and its points.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiSeries {
    /// `__name__`, or `__expr__` for a series without one.
    pub name: String,
    /// The other labels, in the response's order.
    pub labels: Vec<(String, String)>,
    /// (unix milliseconds, value).
    pub points: Vec<(i64, f64)>,
}

/// `prometheus_query` (saved `/api/v1/query` or `query_range` answers) and
/// `prometheus_query_range` (the backfill's answers): one reader, two names.
#[derive(Debug, Clone, Copy)]
pub struct PrometheusApi {
    name: &'static str,
}

impl PrometheusApi {
    /// Answers saved to files and ingested.
    pub fn query() -> Self {
        PrometheusApi { name: "prometheus_query" }
    }

    /// Answers the backfill asks for.
    pub fn query_range() -> Self {
        PrometheusApi { name: "prometheus_query_range" }
    }
}

impl Source for PrometheusApi {
    type Records = ApiRecords;
    type Tables = SampleTables;

    fn name(&self) -> &'static str {
        self.name
    }

    fn parse(&mut self, bytes: &[u8], origin: &Origin<'_>, diags: &mut Diagnostics) -> ApiRecords {
        parse_response(origin.path, bytes, diags)
    }

    fn load(&mut self, records: ApiRecords, tables: &mut SampleTables, _origin: &Origin<'_>, _diags: &mut Diagnostics) -> Loaded {
        let before = tables.counts.blank;
        let samples = load_series(records.series, tables);
        Loaded { samples, blank: tables.counts.blank - before, ..Loaded::default() }
    }
}

/// Reads a response into `tables` (parse, then load).
pub fn read_response(path: &Path, bytes: &[u8], tables: &mut SampleTables, diags: &mut Diagnostics) -> ApiStats {
    let records = parse_response(path, bytes, diags);
    let (series, rejected) = (records.series.len() as u64, records.rejected);
    let samples = load_series(records.series, tables);
    ApiStats { series, samples, rejected }
}

fn load_series(series: Vec<ApiSeries>, tables: &mut SampleTables) -> u64 {
    let mut samples = 0;
    for s in series {
        let metric = tables.metric(s.name.as_bytes());
        let series_ref = tables.series(s.labels);
        for (ts, value) in s.points {
            tables.push(metric, series_ref, ts, value);
            samples += 1;
        }
    }
    samples
}

/// A response's series; what is not one is reported and counted in `rejected`.
pub fn parse_response(path: &Path, bytes: &[u8], diags: &mut Diagnostics) -> ApiRecords {
    let mut out = ApiRecords::default();
    let doc: Value = match serde_json::from_slice(bytes) {
        Ok(v) => v,
        Err(e) => {
            let offset = byte_offset(bytes, e.line(), e.column());
            diags.error(path, Position::Byte { offset: offset as u64, line: line_of(bytes, offset) }, "invalid_json", format!("not a Prometheus API response: {e}"));
            out.rejected += 1;
            return out;
        }
    };
    if doc.get("status").and_then(Value::as_str) == Some("error") {
        let kind = doc.get("errorType").and_then(Value::as_str).unwrap_or("unknown");
        let msg = doc.get("error").and_then(Value::as_str).unwrap_or("");
        diags.error(path, Position::File, "api_error", format!("Prometheus answered an error ({kind}): {msg}"));
        out.rejected += 1;
        return out;
    }
    let Some(data) = doc.get("data") else {
        diags.error(path, Position::File, "invalid_response", "no `data` in the response");
        out.rejected += 1;
        return out;
    };
    let result_type = data.get("resultType").and_then(Value::as_str).unwrap_or("");
    let Some(result) = data.get("result").and_then(Value::as_array) else {
        diags.error(path, Position::File, "invalid_response", "no `data.result` array in the response");
        out.rejected += 1;
        return out;
    };
    if result_type != "vector" && result_type != "matrix" {
        diags.error(path, Position::File, "unsupported_result", format!("resultType {result_type:?} holds no series (expected vector or matrix)"));
        out.rejected += 1;
        return out;
    }
    for (i, series) in result.iter().enumerate() {
        let Some(labels) = series.get("metric").and_then(Value::as_object) else {
            diags.error(path, Position::File, "invalid_response", format!("result[{i}] has no `metric` object"));
            out.rejected += 1;
            continue;
        };
        let mut name = "__expr__".to_string();
        let mut pairs = Vec::with_capacity(labels.len());
        for (k, v) in labels {
            let v = v.as_str().unwrap_or_default().to_string();
            if k == "__name__" {
                name = v;
            } else {
                pairs.push((k.clone(), v));
            }
        }
        let raw_points: Vec<&Value> = match (series.get("value"), series.get("values")) {
            (Some(v), _) => vec![v],
            (None, Some(Value::Array(vs))) => vs.iter().collect(),
            _ => Vec::new(),
        };
        let mut points = Vec::with_capacity(raw_points.len());
        for (j, p) in raw_points.into_iter().enumerate() {
            match point(p) {
                Some(tv) => points.push(tv),
                None => {
                    diags.error(path, Position::File, "invalid_point", format!("result[{i}] ({name}) point {j} is not [seconds, \"value\"]: {p}"));
                    out.rejected += 1;
                }
            }
        }
        out.series.push(ApiSeries { name, labels: pairs, points });
    }
    out
}

/// `[1759276800.123, "42"]` -> (ms, value).
fn point(p: &Value) -> Option<(i64, f64)> {
    let a = p.as_array()?;
    let (t, v) = (a.first()?, a.get(1)?);
    let secs = t.as_f64()?;
    let value = match v.as_str()? {
        "+Inf" | "Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        "NaN" => f64::NAN,
        s => s.parse::<f64>().ok()?,
    };
    Some(((secs * 1000.0).round() as i64, value))
}

fn byte_offset(bytes: &[u8], line: usize, column: usize) -> usize {
    let mut offset = 0;
    for _ in 1..line {
        match memchr::memchr(b'\n', &bytes[offset..]) {
            Some(i) => offset += i + 1,
            None => break,
        }
    }
    (offset + column.saturating_sub(1)).min(bytes.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Array, AsArray};
    use arrow::datatypes::{Float64Type, TimestampMillisecondType};

    #[test]
    fn matrix_points_land_with_millisecond_times() {
        let body = br#"{"status":"success","data":{"resultType":"matrix","result":[
          {"metric":{"__name__":"DCGM_FI_DEV_GPU_UTIL","gpu":"0","UUID":"GPU-x","Hostname":"n1","exported_pod":"p","exported_namespace":"ns","pod":"nvidia-dcgm-exporter-1"},
           "values":[[1790812800,"10"],[1790812830.5,"NaN"],[1790812860,"x"]]}]}}"#;
        assert!(looks_like_api_response(body));
        let mut t = SampleTables::new();
        let mut d = Diagnostics::new();
        let s = read_response(Path::new("q.json"), body, &mut t, &mut d);
        assert_eq!(s, ApiStats { series: 1, samples: 2, rejected: 1 });
        assert_eq!(d.errors[0].error_type, "invalid_point");
        let b = &t.take_batches().unwrap()[0].1;
        assert_eq!(b.num_rows(), 2);
        let ts = b.column(0).as_primitive::<TimestampMillisecondType>();
        assert_eq!((ts.value(0), ts.value(1)), (1_790_812_800_000, 1_790_812_830_500));
        let util = b.column(b.schema().index_of("gpu_util").unwrap()).as_primitive::<Float64Type>();
        assert_eq!(util.value(0), 10.0);
        assert!(util.is_null(1), "NaN is no utilisation reading");
        assert_eq!(b.column(b.schema().index_of("pod").unwrap()).as_string::<i32>().value(0), "p");
    }

    #[test]
    fn error_responses_and_garbage_are_reported() {
        let mut t = SampleTables::new();
        let mut d = Diagnostics::new();
        read_response(Path::new("e.json"), br#"{"status":"error","errorType":"bad_data","error":"parse error"}"#, &mut t, &mut d);
        read_response(Path::new("g.json"), b"{\n \"status\": \"success\",\n \"data\": {", &mut t, &mut d);
        assert_eq!(d.errors.len(), 2);
        assert_eq!(d.errors[0].to_string(), "e.json: Prometheus answered an error (bad_data): parse error");
        assert_eq!(d.errors[1].error_type, "invalid_json");
        assert_eq!(t.rows(), 0);
    }
}
