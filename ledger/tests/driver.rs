//! The in-process ledger runs the sample steps one day at a time; `queries/` describe the whole
//! store at once (as the SQL logic tests and Ballista run them). This test runs both over one
//! store drawn with the shapes where a day-by-day driver could go wrong, and asserts that they
//! agree row for row, and that the shapes came out as worked by hand.
//!
//! Shapes: a /federate copy of some samples 7 ms late; a sample 0.1 s before midnight whose
//! duplicate is the next day's first sample; a node silent for three days; a GPU whose scrape
//! interval changes at a month boundary.

// Tests may unwrap: a panic is how they fail.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use arrow::array::{ArrayRef, Float64Array, RecordBatch, StringArray, TimestampMillisecondArray, new_null_array};
use chrono::{DateTime, Utc};
use gpuledger_ledger::Ledger;
use gpuledger_ledger::accounting::{Accounting, RunOptions};
use gpuledger_ledger::config::Config;
use datafusion::prelude::SessionContext;
use gpuledger_store::StoreLocation;

struct Sample {
    ms: i64,
    host: &'static str,
    uuid: &'static str,
    pod: Option<&'static str>,
    util: f64,
}

fn ms(s: &str) -> i64 {
    s.parse::<DateTime<Utc>>().unwrap().timestamp_millis()
}

fn samples() -> Vec<Sample> {
    let mut out = Vec::new();
    // GPU-A: every 30 s for three days, busy in even minutes; every 10th sample also arrives
    // 7 ms later with the opposite activity (ignored: the earliest wins).
    let start = ms("2026-10-01T00:00:00Z");
    for k in 0..(3 * 2880) {
        let t = start + k * 30_000;
        let util = if (t / 60_000) % 2 == 0 { 90.0 } else { 0.0 };
        out.push(Sample { ms: t, host: "n1", uuid: "GPU-A", pod: Some("a"), util });
        if k % 10 == 0 {
            out.push(Sample { ms: t + 7, host: "n1", uuid: "GPU-A", pod: Some("a"), util: 90.0 - util });
        }
    }
    // 0.1 s before midnight: the next day's first sample (00:00:00.000) is its duplicate.
    out.push(Sample { ms: ms("2026-10-01T23:59:59.900Z"), host: "n1", uuid: "GPU-A", pod: Some("a"), util: 90.0 });
    // GPU-B, nobody's: every 60 s on Oct 1 until noon, then silent until Oct 4 06:00.
    for k in 0..720 {
        out.push(Sample { ms: start + k * 60_000, host: "n2", uuid: "GPU-B", pod: None, util: 0.0 });
    }
    for k in 0..60 {
        out.push(Sample { ms: ms("2026-10-04T06:00:00Z") + k * 60_000, host: "n2", uuid: "GPU-B", pod: None, util: 0.0 });
    }
    // GPU-C: every 60 s on the evening of Sep 30, every 15 s from midnight on.
    for k in 0..240 {
        out.push(Sample { ms: ms("2026-09-30T20:00:00Z") + k * 60_000, host: "n3", uuid: "GPU-C", pod: Some("c"), util: 90.0 });
    }
    for k in 0..960 {
        out.push(Sample { ms: start + k * 15_000, host: "n3", uuid: "GPU-C", pod: Some("c"), util: 90.0 });
    }
    out
}

/// Writes the samples as the store's `gpu_samples` day partitions.
/// Writes the samples as day files, as an older gpuledger left them, then makes the table a
/// Delta table of those files (`gpuledger store upgrade`).
async fn write_store(root: &std::path::Path) {
    let schema = gpuledger_schemas::TABLES.iter().find(|t| t.name == "gpu_samples").unwrap().arrow_schema();
    let mut by_day: std::collections::BTreeMap<String, Vec<Sample>> = Default::default();
    for s in samples() {
        let day = DateTime::from_timestamp_millis(s.ms).unwrap().format("%Y-%m-%d").to_string();
        by_day.entry(day).or_default().push(s);
    }
    for (day, mut rows) in by_day {
        rows.sort_by(|a, b| (a.host, a.uuid, a.ms).cmp(&(b.host, b.uuid, b.ms)));
        let n = rows.len();
        let columns: Vec<ArrayRef> = schema
            .fields()
            .iter()
            .map(|f| -> ArrayRef {
                match f.name().as_str() {
                    "ts" => Arc::new(TimestampMillisecondArray::from(rows.iter().map(|r| r.ms).collect::<Vec<_>>()).with_timezone("UTC")),
                    "hostname" => Arc::new(StringArray::from(rows.iter().map(|r| Some(r.host)).collect::<Vec<_>>())),
                    "uuid" => Arc::new(StringArray::from(rows.iter().map(|r| Some(r.uuid)).collect::<Vec<_>>())),
                    "pod" => Arc::new(StringArray::from(rows.iter().map(|r| r.pod).collect::<Vec<_>>())),
                    "namespace" => Arc::new(StringArray::from(rows.iter().map(|r| r.pod.map(|_| "ml")).collect::<Vec<_>>())),
                    "gpu_util" => Arc::new(Float64Array::from(rows.iter().map(|r| Some(r.util)).collect::<Vec<_>>())),
                    _ => new_null_array(f.data_type(), n),
                }
            })
            .collect();
        let batch = RecordBatch::try_new(schema.clone(), columns).unwrap();
        let dir = root.join("gpu_samples").join(format!("date={day}"));
        std::fs::create_dir_all(&dir).unwrap();
        let file = std::fs::File::create(dir.join("part-0.parquet")).unwrap();
        let mut w = parquet::arrow::ArrowWriter::try_new(file, schema.clone(), None).unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
    }
    gpuledger_store::delta::upgrade(&StoreLocation::Local(root.to_path_buf())).await.unwrap();
}

const STATES: &str = "SELECT date, day, node, COALESCE(run, '-') AS run, state, ROUND(SUM(gpu_hours) * 3600, 3) AS seconds \
                      FROM gpu_state_hours GROUP BY date, day, node, run, state ORDER BY 1, 2, 3, 4, 5";
const UNOBSERVED: &str = "SELECT date, day, node, ROUND(SUM(gpu_hours) * 3600, 3) AS seconds \
                          FROM unobserved_gpu_hours GROUP BY date, day, node ORDER BY 1, 2, 3";

/// The result's rows, each as its cells joined by spaces.
async fn rows(a: &Accounting, sql: &str) -> Vec<String> {
    let batches = a.query(sql).await.unwrap();
    let text = arrow::util::pretty::pretty_format_batches(&batches).unwrap().to_string();
    text.lines()
        .filter(|l| l.starts_with('|'))
        .skip(1)
        .map(|l| l.split('|').map(str::trim).filter(|c| !c.is_empty()).collect::<Vec<_>>().join(" "))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_day_by_day_ledger_equals_one_pass_over_the_store() {
    let tmp = tempfile::tempdir().unwrap();
    write_store(tmp.path()).await;
    let location = StoreLocation::Local(tmp.path().to_path_buf());
    let config = Config::with_default_price(1.0);

    let ctx = Ledger::store_session(SessionContext::new(), &location).await.unwrap();
    let by_day = Accounting::run(ctx, &location, &config, &RunOptions::default(), &mut |_| {}).await.unwrap();
    assert_eq!(by_day.days.len(), 5, "Sep 30 and Oct 1-4: {:?}", by_day.days);
    let ctx = Ledger::store_session(SessionContext::new(), &location).await.unwrap();
    let at_once = Accounting::run_at_once(ctx, &config, &RunOptions::default()).await.unwrap();

    for sql in [STATES, UNOBSERVED] {
        assert_eq!(rows(&by_day, sql).await, rows(&at_once, sql).await, "{sql}");
    }

    // Worked by hand. GPU-A: exactly three days covered. The 7 ms copies are ignored; the sample
    // at 23:59:59.9 starts an observation that the next day's 00:00:00.000 belongs to, so the
    // spans around midnight are 29.9 s and 30.1 s. The last sample covers one 30 s interval.
    assert_eq!(rows(&by_day, "SELECT ROUND(SUM(gpu_hours), 6) FROM gpu_state_hours WHERE node = 'n1'").await, ["72.0"]);
    // GPU-B: covered until 12:00 on Oct 1 (the last sample at 11:59 covers one interval), then
    // unobserved until Oct 4 06:00: 12 h on Oct 1, 24 h on Oct 2 and 3, 6 h on Oct 4.
    let b = rows(&by_day, "SELECT day, ROUND(SUM(gpu_hours), 6) FROM unobserved_gpu_hours WHERE node = 'n2' GROUP BY day ORDER BY day").await;
    assert_eq!(b, ["2026-10-01 12.0", "2026-10-02 24.0", "2026-10-03 24.0", "2026-10-04 6.0"]);
    // GPU-C: 60 s interval in September, 15 s in October: 4 h each side of midnight. (One median
    // over both months, 15 s, would make every September spacing a gap over max_gap: 1 h covered.)
    let c = rows(&by_day, "SELECT month, ROUND(SUM(gpu_hours) * 3600, 3) FROM gpu_state_hours WHERE node = 'n3' GROUP BY month ORDER BY month").await;
    assert_eq!(c, ["2026-09 14400.0", "2026-10 14400.0"]);
}

/// Each column as `name TYPE [NOT NULL]`, to compare a table's schema with its declaration.
fn columns(schema: &arrow::datatypes::Schema, with_nullability: bool) -> Vec<String> {
    schema
        .fields()
        .iter()
        .map(|f| format!("{} {}{}", f.name(), f.data_type(), if with_nullability && !f.is_nullable() { " NOT NULL" } else { "" }))
        .collect()
}

/// The derived tables the ledger writes are the ones `gpuledger_schemas` declares, each with the
/// declared columns (names, order, types, nullability), computed day by day or at once: a change
/// to `queries/` that changes a stored column fails here until the declaration follows.
#[tokio::test(flavor = "multi_thread")]
async fn every_derived_table_has_its_declared_schema() {
    let tmp = tempfile::tempdir().unwrap();
    write_store(tmp.path()).await;
    let location = StoreLocation::Local(tmp.path().to_path_buf());
    let config = Config::with_default_price(1.0);
    let declared: Vec<&str> = gpuledger_schemas::DERIVED_TABLES.iter().map(|t| t.name).collect();
    assert_eq!(gpuledger_ledger::accounting::DERIVED_TABLES, declared.as_slice());

    let ctx = Ledger::store_session(SessionContext::new(), &location).await.unwrap();
    let by_day = Accounting::run(ctx, &location, &config, &RunOptions::default(), &mut |_| {}).await.unwrap();
    let ctx = Ledger::store_session(SessionContext::new(), &location).await.unwrap();
    let at_once = Accounting::run_at_once(ctx, &config, &RunOptions::default()).await.unwrap();
    let mut wrong = Vec::new();
    for run in [&by_day, &at_once] {
        for (name, schema, _) in run.derived_tables().await.unwrap() {
            let declared = gpuledger_schemas::derived_table(name).unwrap().arrow_schema();
            let (got, want) = (columns(&schema, true), columns(&declared, true));
            if got != want {
                wrong.push(format!("{name}:\n  computed: {got:?}\n  declared: {want:?}"));
            }
        }
        // The report views the month report reads by their declarations.
        for view in gpuledger_schemas::REPORT_VIEWS {
            let df = run.context().table(view.name).await.unwrap();
            let (got, want) = (columns(df.schema().as_arrow(), true), columns(&view.arrow_schema(), true));
            if got != want {
                wrong.push(format!("{} (view):\n  computed: {got:?}\n  declared: {want:?}", view.name));
            }
        }
    }
    assert!(wrong.is_empty(), "derived tables differ from schemas/src/derived.rs:\n{}", wrong.join("\n"));
}

/// Every derived table's rows, sorted, as text: what two runs must agree on.
async fn all_tables(a: &Accounting) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    for (name, _, batches) in a.derived_tables().await.unwrap() {
        let text = arrow::util::pretty::pretty_format_batches(&batches).unwrap().to_string();
        let mut lines: Vec<String> = text.lines().filter(|l| l.starts_with('|')).skip(1).map(str::to_string).collect();
        lines.sort();
        out.push((name.to_string(), lines));
    }
    out
}

/// A day split into parts of its nodes (each host alone: a unit may read one row) gives the
/// tables of the day run whole: every sample step follows one GPU or one node.
#[tokio::test(flavor = "multi_thread")]
async fn a_day_split_into_parts_of_its_nodes_gives_the_same_tables() {
    let tmp = tempfile::tempdir().unwrap();
    write_store(tmp.path()).await;
    let location = StoreLocation::Local(tmp.path().to_path_buf());
    let config = Config::with_default_price(1.0);
    let run = async |options: RunOptions| {
        let ctx = Ledger::store_session(SessionContext::new(), &location).await.unwrap();
        Accounting::run(ctx, &location, &config, &options, &mut |_| {}).await.unwrap()
    };
    let whole = run(RunOptions::default()).await;
    let parts = run(RunOptions { unit_rows: Some(1), ..RunOptions::default() }).await;
    assert_eq!(whole.units, (5, 5), "one unit per day and pass");
    // Sep 30 has one host (n3), Oct 1 three, Oct 2 and 3 one (n1), Oct 4 one (n2).
    assert_eq!(parts.units, (7, 7), "a unit per host and day");
    let (a, b) = (all_tables(&whole).await, all_tables(&parts).await);
    for ((name, x), (_, y)) in a.iter().zip(&b) {
        assert_eq!(x, y, "{name}");
    }
    assert!(a.iter().any(|(_, rows)| rows.len() > 10), "the tables have rows");
}
