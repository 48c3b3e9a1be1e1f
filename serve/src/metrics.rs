//! `/metrics`: the ledger as Prometheus gauges, for Grafana setups that only have Prometheus,
//! and the server's own counters.
//!
//! The gauges are read from the stored `chargeback_monthly` at each scrape, so they always show
//! what the last `gpuledger ledger` run wrote. Labels are month, team and state or component.

use std::sync::atomic::{AtomicU64, Ordering};

use arrow::array::{Array, AsArray, Float64Array};
use arrow::datatypes::{DataType, Float64Type};
use arrow::record_batch::RecordBatch;
use gpuledger_telemetry::Exposition;

/// Counters of the SQL endpoint and the HTTP API.
#[derive(Debug, Default)]
pub struct Stats {
    pub pg_connections: AtomicU64,
    pub pg_connections_refused: AtomicU64,
    pub queries: AtomicU64,
    pub query_errors: AtomicU64,
    pub queries_refused: AtomicU64,
    pub queries_timed_out: AtomicU64,
    pub query_micros: AtomicU64,
    pub http_requests: AtomicU64,
    pub http_unauthorized: AtomicU64,
}

/// The SQL behind the ledger gauges: one row per month and team.
pub const CHARGEBACK_SQL: &str = "SELECT month, team, productive_gpu_hours, allocated_idle_gpu_hours, failed_gpu_hours, preempted_gpu_hours, unallocated_gpu_hours, compute, network, storage, support, idle, failed_runs, operations, total, accepted_units, cost_per_accepted_unit, lost_gpu_hours_platform_paid, lost_cost_platform_paid FROM chargeback_monthly ORDER BY month, team";

const STATES: [(&str, &str); 5] = [
    ("productive", "productive_gpu_hours"),
    ("allocated_idle", "allocated_idle_gpu_hours"),
    ("failed", "failed_gpu_hours"),
    ("preempted", "preempted_gpu_hours"),
    ("unallocated", "unallocated_gpu_hours"),
];
const COMPONENTS: [&str; 8] = ["compute", "network", "storage", "support", "idle", "failed_runs", "operations", "total"];

/// Renders the exposition text: ledger gauges from `chargeback` (the rows of
/// [`CHARGEBACK_SQL`]; None when no ledger has been written yet) and the counters.
pub fn render(chargeback: Option<&[RecordBatch]>, currency: &str, stats: &Stats) -> String {
    let mut out = Exposition::new();
    if let Some(batches) = chargeback {
        let batches: Vec<Numbers<'_>> = batches.iter().map(Numbers::new).collect();
        let batches = batches.as_slice();
        gauge_header(&mut out, "gpuledger_gpu_hours", "GPU-hours in the month by team and state (from the stored ledger).");
        each_row(batches, |row| {
            for (state, column) in STATES {
                if let Some(v) = row.number(column) {
                    sample(&mut out, "gpuledger_gpu_hours", &[("month", row.text("month")), ("team", row.text("team")), ("state", state.into())], v);
                }
            }
        });
        gauge_header(&mut out, "gpuledger_cost", &format!("Cost in {currency} in the month by team and component; component=\"total\" is their sum."));
        each_row(batches, |row| {
            for component in COMPONENTS {
                if let Some(v) = row.number(component) {
                    sample(&mut out, "gpuledger_cost", &[("month", row.text("month")), ("team", row.text("team")), ("component", component.into()), ("currency", currency.into())], v);
                }
            }
        });
        gauge_header(
            &mut out,
            "gpuledger_lost_gpu_hours_platform_paid",
            "Failed and preempted GPU-hours of the team whose cost the platform paid (hardware faults); inside gpuledger_gpu_hours.",
        );
        each_row(batches, |row| {
            if let Some(v) = row.number("lost_gpu_hours_platform_paid") {
                sample(&mut out, "gpuledger_lost_gpu_hours_platform_paid", &[("month", row.text("month")), ("team", row.text("team"))], v);
            }
        });
        gauge_header(&mut out, "gpuledger_lost_cost_platform_paid", &format!("Cost in {currency} of those hours: in platform's failed_runs, not the team's."));
        each_row(batches, |row| {
            if let Some(v) = row.number("lost_cost_platform_paid") {
                sample(&mut out, "gpuledger_lost_cost_platform_paid", &[("month", row.text("month")), ("team", row.text("team")), ("currency", currency.into())], v);
            }
        });
        gauge_header(&mut out, "gpuledger_accepted_units", "Accepted units of work finished in the month by team.");
        each_row(batches, |row| {
            if let Some(v) = row.number("accepted_units") {
                sample(&mut out, "gpuledger_accepted_units", &[("month", row.text("month")), ("team", row.text("team"))], v);
            }
        });
        gauge_header(&mut out, "gpuledger_cost_per_accepted_unit", "Total cost divided by accepted units (absent for a team without units).");
        each_row(batches, |row| {
            if let Some(v) = row.number("cost_per_accepted_unit") {
                sample(&mut out, "gpuledger_cost_per_accepted_unit", &[("month", row.text("month")), ("team", row.text("team")), ("currency", currency.into())], v);
            }
        });
    }
    gauge_header(&mut out, "gpuledger_ledger_available", "1 when the store holds a ledger (gpuledger ledger has run), else 0.");
    out.sample("gpuledger_ledger_available", &[], u8::from(chargeback.is_some()));
    let counters: [(&str, &str, &AtomicU64); 8] = [
        ("gpuledger_sql_connections_total", "SQL connections accepted.", &stats.pg_connections),
        ("gpuledger_sql_connections_refused_total", "SQL connections refused at max_connections.", &stats.pg_connections_refused),
        ("gpuledger_sql_queries_total", "SQL statements run.", &stats.queries),
        ("gpuledger_sql_query_errors_total", "SQL statements that ended in an error.", &stats.query_errors),
        ("gpuledger_sql_queries_refused_total", "SQL statements refused as not read-only.", &stats.queries_refused),
        ("gpuledger_sql_queries_timed_out_total", "SQL statements stopped at query_timeout.", &stats.queries_timed_out),
        ("gpuledger_http_requests_total", "HTTP API requests.", &stats.http_requests),
        ("gpuledger_http_unauthorized_total", "HTTP API requests refused for a missing or wrong token.", &stats.http_unauthorized),
    ];
    for (name, help, value) in counters {
        out.header(name, "counter", help);
        out.sample(name, &[], value.load(Ordering::Relaxed));
    }
    let seconds = stats.query_micros.load(Ordering::Relaxed) as f64 / 1e6;
    out.header("gpuledger_sql_query_seconds_total", "counter", "Time spent in SQL statements.");
    out.sample("gpuledger_sql_query_seconds_total", &[], seconds);
    out.finish()
}

fn gauge_header(out: &mut Exposition, name: &str, help: &str) {
    out.header(name, "gauge", help);
}

fn sample(out: &mut Exposition, name: &str, labels: &[(&str, String)], value: f64) {
    let labels: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (*k, v.as_str())).collect();
    out.sample(name, &labels, value);
}

/// A batch with its numeric columns cast to f64 once, however many gauges read them.
struct Numbers<'a> {
    batch: &'a RecordBatch,
    columns: Vec<(String, Float64Array)>,
}

impl<'a> Numbers<'a> {
    fn new(batch: &'a RecordBatch) -> Numbers<'a> {
        let columns = batch
            .schema()
            .fields()
            .iter()
            .zip(batch.columns())
            .filter(|(f, _)| f.data_type().is_numeric())
            .filter_map(|(f, c)| arrow::compute::cast(c, &DataType::Float64).ok().map(|a| (f.name().clone(), a.as_primitive::<Float64Type>().clone())))
            .collect();
        Numbers { batch, columns }
    }
}

struct Row<'a> {
    numbers: &'a Numbers<'a>,
    i: usize,
}

impl Row<'_> {
    fn number(&self, column: &str) -> Option<f64> {
        let (_, col) = self.numbers.columns.iter().find(|(name, _)| name == column)?;
        (!col.is_null(self.i)).then(|| col.value(self.i))
    }

    fn text(&self, column: &str) -> String {
        let Some(col) = self.numbers.batch.column_by_name(column) else { return String::new() };
        arrow::util::display::array_value_to_string(col, self.i).unwrap_or_default()
    }
}

fn each_row(batches: &[Numbers<'_>], mut f: impl FnMut(Row<'_>)) {
    for numbers in batches {
        for i in 0..numbers.batch.num_rows() {
            f(Row { numbers, i });
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Float64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};

    use super::*;

    #[test]
    fn gauges_carry_each_team_month_and_escape_labels() {
        let mut fields = vec![Field::new("month", DataType::Utf8, false), Field::new("team", DataType::Utf8, true)];
        let numeric = ["productive_gpu_hours", "allocated_idle_gpu_hours", "failed_gpu_hours", "preempted_gpu_hours", "unallocated_gpu_hours", "compute", "network", "storage", "support", "idle", "failed_runs", "operations", "total", "accepted_units", "cost_per_accepted_unit", "lost_gpu_hours_platform_paid", "lost_cost_platform_paid"];
        fields.extend(numeric.iter().map(|n| Field::new(*n, DataType::Float64, true)));
        let mut columns: Vec<arrow::array::ArrayRef> = vec![Arc::new(StringArray::from(vec!["2026-10", "2026-10"])), Arc::new(StringArray::from(vec!["ml\"a", "web"]))];
        for (k, n) in numeric.iter().enumerate() {
            let second = if *n == "cost_per_accepted_unit" { None } else { Some(k as f64 + 0.5) };
            columns.push(Arc::new(Float64Array::from(vec![Some(k as f64), second])));
        }
        let batch = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap();
        let text = render(Some(&[batch]), "USD", &Stats::default());
        // Read back with an independent parser.
        let lines: Vec<_> = text.lines().map(|l| Ok(l.to_string())).collect();
        let scrape = prometheus_parse::Scrape::parse(lines.into_iter()).unwrap();
        let find = |metric: &str, labels: &[(&str, &str)]| -> Option<f64> {
            scrape.samples.iter().find(|s| s.metric == metric && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v))).map(|s| match s.value {
                prometheus_parse::Value::Gauge(v) | prometheus_parse::Value::Untyped(v) | prometheus_parse::Value::Counter(v) => v,
                _ => f64::NAN,
            })
        };
        assert_eq!(find("gpuledger_gpu_hours", &[("team", "web"), ("state", "failed")]), Some(2.5));
        assert_eq!(find("gpuledger_cost", &[("team", "web"), ("component", "total")]), Some(12.5));
        assert_eq!(find("gpuledger_cost_per_accepted_unit", &[("team", "ml\\\"a")]).or(find("gpuledger_cost_per_accepted_unit", &[("team", "ml\"a")])), Some(14.0));
        assert_eq!(find("gpuledger_cost_per_accepted_unit", &[("team", "web")]), None, "no units, no gauge");
        assert!(text.contains("team=\"ml\\\"a\""), "{text}");
        assert_eq!(find("gpuledger_lost_gpu_hours_platform_paid", &[("team", "web")]), Some(15.5));
        assert_eq!(find("gpuledger_lost_cost_platform_paid", &[("team", "web"), ("currency", "USD")]), Some(16.5));
        assert_eq!(find("gpuledger_ledger_available", &[]), Some(1.0));
    }
}
