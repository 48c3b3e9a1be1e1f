//! `prometheus_query`: Prometheus HTTP API responses (`/api/v1/query` vectors and
//! `/api/v1/query_range` matrices) of DCGM series, read into the same tables as exporter text.
//!
//! Sample times are float seconds in the API; they are rounded to milliseconds. A series
//! without `__name__` (the result of an expression such as `rate(...)`) is kept under the name
//! `__expr__` in `metric_samples`, so nothing read is dropped.

use std::path::Path;

use serde_json::Value;

use crate::diag::{Diagnostics, Position, line_of};
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

pub fn read_response(path: &Path, bytes: &[u8], tables: &mut SampleTables, diags: &mut Diagnostics) -> ApiStats {
    let mut stats = ApiStats::default();
    let doc: Value = match serde_json::from_slice(bytes) {
        Ok(v) => v,
        Err(e) => {
            let offset = byte_offset(bytes, e.line(), e.column());
            diags.error(path, Position::Byte { offset: offset as u64, line: line_of(bytes, offset) }, "invalid_json", format!("not a Prometheus API response: {e}"));
            stats.rejected += 1;
            return stats;
        }
    };
    if doc.get("status").and_then(Value::as_str) == Some("error") {
        let kind = doc.get("errorType").and_then(Value::as_str).unwrap_or("unknown");
        let msg = doc.get("error").and_then(Value::as_str).unwrap_or("");
        diags.error(path, Position::File, "api_error", format!("Prometheus answered an error ({kind}): {msg}"));
        stats.rejected += 1;
        return stats;
    }
    let Some(data) = doc.get("data") else {
        diags.error(path, Position::File, "invalid_response", "no `data` in the response");
        stats.rejected += 1;
        return stats;
    };
    let result_type = data.get("resultType").and_then(Value::as_str).unwrap_or("");
    let Some(result) = data.get("result").and_then(Value::as_array) else {
        diags.error(path, Position::File, "invalid_response", "no `data.result` array in the response");
        stats.rejected += 1;
        return stats;
    };
    if result_type != "vector" && result_type != "matrix" {
        diags.error(path, Position::File, "unsupported_result", format!("resultType {result_type:?} holds no series (expected vector or matrix)"));
        stats.rejected += 1;
        return stats;
    }
    for (i, series) in result.iter().enumerate() {
        let Some(labels) = series.get("metric").and_then(Value::as_object) else {
            diags.error(path, Position::File, "invalid_response", format!("result[{i}] has no `metric` object"));
            stats.rejected += 1;
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
        let metric = tables.metric(name.as_bytes());
        let series_ref = tables.series(pairs);
        stats.series += 1;
        let points: Vec<&Value> = match (series.get("value"), series.get("values")) {
            (Some(v), _) => vec![v],
            (None, Some(Value::Array(vs))) => vs.iter().collect(),
            _ => Vec::new(),
        };
        for (j, p) in points.into_iter().enumerate() {
            match point(p) {
                Some((ts, value)) => {
                    tables.push(metric, series_ref, ts, value);
                    stats.samples += 1;
                }
                None => {
                    diags.error(path, Position::File, "invalid_point", format!("result[{i}] ({name}) point {j} is not [seconds, \"value\"]: {p}"));
                    stats.rejected += 1;
                }
            }
        }
    }
    stats
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
