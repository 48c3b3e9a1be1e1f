//! `/metrics`: the ledger as Prometheus gauges, for Grafana setups that only have Prometheus,
//! and the server's own counters.
//!
//! The gauges are read at each scrape from `report_gauges` (`queries/90_reports.sql`, over the
//! stored `chargeback_monthly` and `budget_monthly`), so they always show what the last `gpuledger ledger` run wrote.
//! Labels are month, team and state or component; this module only writes the text.

use std::sync::atomic::{AtomicU64, Ordering};

use arrow::record_batch::RecordBatch;
use gpuledger_engine::decode::decode;
use gpuledger_telemetry::Exposition;

/// Counters of the SQL endpoint and the HTTP API.
#[derive(Debug, Default)]
pub struct Stats {
    pub pg_connections: AtomicU64,
    pub pg_connections_refused: AtomicU64,
    pub pg_logins_failed: AtomicU64,
    pub queries: AtomicU64,
    pub query_errors: AtomicU64,
    pub queries_refused: AtomicU64,
    pub queries_timed_out: AtomicU64,
    pub queries_cancelled: AtomicU64,
    /// SQL statements under way now (planning, running or sending rows).
    pub statements_running: AtomicU64,
    pub query_micros: AtomicU64,
    pub http_requests: AtomicU64,
    pub http_unauthorized: AtomicU64,
    /// Statements answered with rows another client's identical statement computed.
    pub result_cache_hits: AtomicU64,
    /// Statements computed and offered to the result cache.
    pub result_cache_misses: AtomicU64,
    /// Bytes of rows the result cache holds (as of its last change).
    pub result_cache_bytes: AtomicU64,
}

/// The SQL behind the ledger gauges: the samples `queries/90_reports.sql` defines, in
/// exposition order.
pub const GAUGES_SQL: &str = "SELECT gauge, month, team, label, label_value, value FROM report_gauges WHERE value IS NOT NULL ORDER BY gauge_rank, month, team, label_rank";

/// Each ledger gauge: its name, HELP text (`{currency}` stands for the currency) and whether its
/// samples carry the currency label. Every one is written, with or without samples.
const GAUGES: [(&str, &str, bool); 13] = [
    ("gpuledger_gpu_hours", "GPU-hours in the month by team and state (from the stored ledger).", false),
    ("gpuledger_cost", "Cost in {currency} in the month by team and component; component=\"total\" is their sum.", true),
    ("gpuledger_lost_gpu_hours_platform_paid", "Failed and preempted GPU-hours of the team whose cost the platform paid (hardware faults); inside gpuledger_gpu_hours.", false),
    ("gpuledger_lost_cost_platform_paid", "Cost in {currency} of those hours: in platform's failed_runs, not the team's.", true),
    ("gpuledger_accepted_units", "Accepted units of work in the month by team and unit name.", false),
    ("gpuledger_cost_per_accepted_unit", "Total cost divided by accepted units (absent for a team without units); unit is the team's unit name, or mixed when it has several.", true),
    ("gpuledger_budget", "The team's budget for the month in {currency} ([[budgets]]; only budgeted teams).", true),
    ("gpuledger_budget_used_ratio", "Spend to date over the month's budget (1 = all of it).", false),
    ("gpuledger_budget_forecast_ratio", "Month-end spend at the rate so far over the month's budget; alert on > 1.", false),
    ("gpuledger_energy_kwh", "GPU energy in the month by team, kWh (beside the cost, not in it).", false),
    ("gpuledger_idle_gpu_hours", "Idle GPU-hours in the month by team and reason: startup, stall, teardown (allocated idle); cordoned, stranded, no_demand (unallocated, team platform).", false),
    ("gpuledger_anomaly_score", "Spreads the team's cost on the latest complete day (label day) lies above the median of its previous 14 observed days; absent before 7.", false),
    ("gpuledger_anomaly_flagged", "1 when the team's latest complete day is a spend anomaly (score >= [anomalies] k), else 0; alert on == 1.", false),
];

/// One sample of a ledger gauge, as `report_gauges` gives it.
#[derive(Debug, Clone, PartialEq)]
pub struct GaugeSample {
    pub gauge: String,
    pub month: String,
    pub team: String,
    /// The state or cost component label, where the gauge has one.
    pub label: Option<(String, String)>,
    pub value: f64,
}

/// Reads the rows of [`GAUGES_SQL`], each column with its type.
pub fn decode_gauges(batches: &[RecordBatch]) -> Result<Vec<GaugeSample>, gpuledger_ledger::Error> {
    decode(batches, "report_gauges", |c| {
        let (gauge, month, team, label, label_value, value) = (c.text("gauge")?, c.text("month")?, c.text("team")?, c.text("label")?, c.text("label_value")?, c.f64("value")?);
        Ok((0..c.rows())
            .map(|i| GaugeSample {
                gauge: gauge[i].clone(),
                month: month[i].clone(),
                team: team[i].clone(),
                label: (!label[i].is_empty()).then(|| (label[i].clone(), label_value[i].clone())),
                value: value[i],
            })
            .collect())
    })
}

/// Renders the exposition text: the ledger gauges (None when no ledger has been written yet)
/// and the server's counters.
pub fn render(gauges: Option<&[GaugeSample]>, currency: &str, stats: &Stats) -> String {
    let mut out = Exposition::new();
    if let Some(samples) = gauges {
        for (name, help, with_currency) in GAUGES {
            out.header(name, "gauge", &help.replace("{currency}", currency));
            for s in samples.iter().filter(|s| s.gauge == name) {
                let mut labels = vec![("month", s.month.as_str()), ("team", s.team.as_str())];
                if let Some((k, v)) = &s.label {
                    labels.push((k.as_str(), v.as_str()));
                }
                if with_currency {
                    labels.push(("currency", currency));
                }
                out.sample(name, &labels, s.value);
            }
        }
    }
    out.header("gpuledger_ledger_available", "gauge", "1 when the store holds a ledger (gpuledger ledger has run), else 0.");
    out.sample("gpuledger_ledger_available", &[], u8::from(gauges.is_some()));
    let counters: [(&str, &str, &AtomicU64); 12] = [
        ("gpuledger_sql_connections_total", "SQL connections accepted.", &stats.pg_connections),
        ("gpuledger_sql_connections_refused_total", "SQL connections refused at max_connections.", &stats.pg_connections_refused),
        ("gpuledger_sql_logins_failed_total", "SQL logins refused: wrong password or unknown user.", &stats.pg_logins_failed),
        ("gpuledger_sql_queries_total", "SQL statements run.", &stats.queries),
        ("gpuledger_sql_query_errors_total", "SQL statements that ended in an error.", &stats.query_errors),
        ("gpuledger_sql_queries_refused_total", "SQL statements refused as not read-only.", &stats.queries_refused),
        ("gpuledger_sql_queries_timed_out_total", "SQL statements stopped at query_timeout or the client's statement_timeout.", &stats.queries_timed_out),
        ("gpuledger_sql_queries_cancelled_total", "SQL statements stopped by the client's cancel request.", &stats.queries_cancelled),
        ("gpuledger_http_requests_total", "HTTP API requests.", &stats.http_requests),
        ("gpuledger_http_unauthorized_total", "HTTP API requests refused for a missing or wrong token.", &stats.http_unauthorized),
        ("gpuledger_sql_result_cache_hits_total", "SQL statements answered with the rows of the same statement computed within refresh_interval.", &stats.result_cache_hits),
        ("gpuledger_sql_result_cache_misses_total", "SQL statements computed and offered to the result cache (immutable queries only).", &stats.result_cache_misses),
    ];
    for (name, help, value) in counters {
        out.header(name, "counter", help);
        out.sample(name, &[], value.load(Ordering::Relaxed));
    }
    out.header("gpuledger_sql_statements_running", "gauge", "SQL statements under way now: planned, running or sending their rows.");
    out.sample("gpuledger_sql_statements_running", &[], stats.statements_running.load(Ordering::Relaxed));
    out.header("gpuledger_sql_result_cache_bytes", "gauge", "Bytes of rows the SQL result cache holds (at most serve.result_cache).");
    out.sample("gpuledger_sql_result_cache_bytes", &[], stats.result_cache_bytes.load(Ordering::Relaxed));
    let seconds = stats.query_micros.load(Ordering::Relaxed) as f64 / 1e6;
    out.header("gpuledger_sql_query_seconds_total", "counter", "Time spent in SQL statements.");
    out.sample("gpuledger_sql_query_seconds_total", &[], seconds);
    out.finish()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Float64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};

    use super::*;

    /// The gauges of a two-team chargeback, computed by the report view from the table as the
    /// server does, then written and read back with an independent parser.
    #[tokio::test]
    async fn gauges_carry_each_team_month_and_escape_labels() {
        let mut fields = vec![Field::new("month", DataType::Utf8, false), Field::new("team", DataType::Utf8, true)];
        let numeric = ["productive_gpu_hours", "allocated_idle_gpu_hours", "failed_gpu_hours", "preempted_gpu_hours", "unallocated_gpu_hours", "compute", "network", "storage", "support", "idle", "failed_runs", "operations", "total", "accepted_units", "cost_per_accepted_unit", "lost_gpu_hours_platform_paid", "lost_cost_platform_paid"];
        fields.extend(numeric.iter().map(|n| Field::new(*n, DataType::Float64, true)));
        let mut columns: Vec<arrow::array::ArrayRef> = vec![Arc::new(StringArray::from(vec!["2026-10", "2026-10"])), Arc::new(StringArray::from(vec!["ml\"a", "web"]))];
        for (k, n) in numeric.iter().enumerate() {
            let second = if *n == "cost_per_accepted_unit" { None } else { Some(k as f64 + 0.5) };
            columns.push(Arc::new(Float64Array::from(vec![Some(k as f64), second])));
        }
        let batch = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap();
        let ctx = datafusion::prelude::SessionContext::new();
        ctx.register_batch("chargeback_monthly", batch).unwrap();
        // The view file also reads these; empty tables of their declared shape do.
        let schema = gpuledger_schemas::derived_table("priced_state_hours").unwrap().arrow_schema();
        ctx.register_batch("priced_state_hours", RecordBatch::new_empty(schema)).unwrap();
        // ml"a counts tokens only (its cost per unit is per 1M-tokens); web counts runs and
        // requests (several names: a cost per unit would be `mixed`, but web has none).
        let units = "CREATE TABLE accepted_units_monthly AS SELECT * FROM (VALUES ('2026-10', 'ml\"a', '1M-tokens', 13.0), \
                     ('2026-10', 'web', 'run', 2.0), ('2026-10', 'web', 'requests', 5.0)) AS u(month, team, unit, accepted_units)";
        ctx.sql(units).await.unwrap().collect().await.unwrap();
        // web spent 12.5 of a 10.0 budget by mid-month: 1.25 used, heading for 2.5.
        let budget = "CREATE TABLE budget_monthly AS SELECT '2026-10' AS month, 'web' AS team, 10.0 AS budget, 12.5 AS spend, \
                      25.0 AS forecast, 1.25 AS used_ratio, 2.5 AS forecast_ratio, 15.5 AS elapsed_days, 31.0 AS month_days";
        ctx.sql(budget).await.unwrap().collect().await.unwrap();
        // web's GPUs drew 3.5 kWh productive and 0.5 kWh idle: 4.0 in the month.
        let energy = "CREATE TABLE energy_monthly AS SELECT * FROM (VALUES ('2026-10', 'web', 'productive', 10.0, 10.0, 3.5, 4.2, 1.5), \
                      ('2026-10', 'web', 'allocated_idle', 2.0, 2.0, 0.5, 0.6, 0.2)) AS e(month, team, state, gpu_hours, measured_gpu_hours, kwh, facility_kwh, kg_co2e)";
        ctx.sql(energy).await.unwrap().collect().await.unwrap();
        // web's pods idled 1.5 h before their first busy sample; 6 platform GPU-hours stood
        // unallocated while GPU Workloads waited.
        let idle = "CREATE TABLE idle_reasons_monthly AS SELECT * FROM (VALUES ('2026-10', 'platform', 'unallocated', 'stranded', 6.0, 12.0, 1), \
                    ('2026-10', 'web', 'allocated_idle', 'startup', 1.5, 3.0, 2)) AS i(month, team, state, reason, gpu_hours, cost, rank)";
        ctx.sql(idle).await.unwrap().collect().await.unwrap();
        // web's 10-30 was 4 spreads above its baseline (flagged); the gauges show only the
        // latest day, 10-31, where ml"a has no baseline yet (no score) and web is back to normal.
        let anomalies = "CREATE TABLE anomalies_daily AS SELECT * FROM (VALUES \
                         ('2026-10-30', '2026-10', 'web', 40.0, 10.0, 7.5, 4.0, true, 9), \
                         ('2026-10-31', '2026-10', 'web', 11.0, 10.0, 7.5, 0.133, false, 10), \
                         ('2026-10-31', '2026-10', 'ml\"a', 5.0, NULL, NULL, NULL, false, 3)) \
                         AS a(day, month, team, cost, baseline, spread, score, flagged, baseline_days)";
        ctx.sql(anomalies).await.unwrap().collect().await.unwrap();
        gpuledger_ledger::accounting::create_report_views(&ctx).await.unwrap();
        let gauges = decode_gauges(&ctx.sql(GAUGES_SQL).await.unwrap().collect().await.unwrap()).unwrap();
        let text = render(Some(&gauges), "USD", &Stats::default());
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
        assert_eq!(find("gpuledger_cost_per_accepted_unit", &[("unit", "1M-tokens"), ("currency", "USD")]), Some(14.0), "labelled with the team's one unit");
        assert_eq!(find("gpuledger_accepted_units", &[("team", "web"), ("unit", "requests")]), Some(5.0));
        assert_eq!(find("gpuledger_accepted_units", &[("team", "web"), ("unit", "run")]), Some(2.0));
        assert!(text.find("unit=\"requests\"").unwrap() < text.find("unit=\"run\"").unwrap(), "units in name order");
        assert!(text.contains("team=\"ml\\\"a\""), "{text}");
        assert_eq!(find("gpuledger_lost_gpu_hours_platform_paid", &[("team", "web")]), Some(15.5));
        assert_eq!(find("gpuledger_lost_cost_platform_paid", &[("team", "web"), ("currency", "USD")]), Some(16.5));
        assert_eq!(find("gpuledger_ledger_available", &[]), Some(1.0));
        assert_eq!(find("gpuledger_budget", &[("team", "web"), ("currency", "USD")]), Some(10.0));
        assert_eq!(find("gpuledger_budget_used_ratio", &[("team", "web"), ("month", "2026-10")]), Some(1.25));
        assert_eq!(find("gpuledger_budget_forecast_ratio", &[("team", "web")]), Some(2.5));
        assert_eq!(find("gpuledger_budget_forecast_ratio", &[("team", "ml\"a")]), None, "no budget, no gauge");
        assert_eq!(find("gpuledger_energy_kwh", &[("team", "web"), ("month", "2026-10")]), Some(4.0));
        assert_eq!(find("gpuledger_idle_gpu_hours", &[("team", "platform"), ("reason", "stranded")]), Some(6.0));
        assert_eq!(find("gpuledger_idle_gpu_hours", &[("team", "web"), ("reason", "startup")]), Some(1.5));
        assert_eq!(find("gpuledger_idle_gpu_hours", &[("team", "web"), ("reason", "stall")]), None, "no such hours, no sample");
        assert_eq!(find("gpuledger_anomaly_score", &[("team", "web"), ("day", "2026-10-31")]), Some(0.133));
        assert_eq!(find("gpuledger_anomaly_flagged", &[("team", "web"), ("day", "2026-10-31")]), Some(0.0));
        assert_eq!(find("gpuledger_anomaly_flagged", &[("team", "web"), ("day", "2026-10-30")]), None, "only the latest day");
        let escaped = |metric: &str| find(metric, &[("team", "ml\\\"a")]).or(find(metric, &[("team", "ml\"a")]));
        assert_eq!(escaped("gpuledger_anomaly_flagged"), Some(0.0));
        assert_eq!(escaped("gpuledger_anomaly_score"), None, "no baseline, no score");
    }
}
