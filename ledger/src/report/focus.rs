//! The report as a FinOps FOCUS 1.2 cost and usage dataset, written as CSV and Parquet.
//!
//! FOCUS is what FinOps tools import next to the cloud providers' bills, so a cluster's GPU
//! chargeback can sit beside them. Each team is a sub-account. The rows are:
//!
//! * one per `report.usage` row (team x GPU state x GPU model): its GPU-hours and its
//!   price-list cost;
//! * one per nonzero shared overhead component of a team (network, storage, support,
//!   operations), from the team's chargeback row; these carry no GPU-hours;
//! * one reconciliation row per team where needed, described `Share of unallocated GPU time`.
//!
//! **Reconciliation rule.** Per team, `BilledCost` summed over its rows equals the team's
//! chargeback `total`. The usage rows carry price-list cost per state, but the chargeback
//! may have moved cost between teams (under the `share` idle policy the unallocated GPU time
//! is spread over the teams). So for each team, `d = total - (usage cost + overhead rows)`;
//! when `|d| > 1e-9` one more row carries `d` (component `idle`, state `unallocated`, no
//! GPU-hours). It is negative for the team whose unallocated time was shared out (platform)
//! and positive for the teams that received a share.
//!
//! All rows have `ChargeCategory` `Usage`: overheads are consumption-based shared costs, not
//! purchases or adjustments; `ChargeDescription` and `x_CostComponent` tell them apart. The
//! four cost columns are equal (the ledger has one price list, no discounts or commitments).
//! Columns that FOCUS does not define are prefixed `x_`, as the specification asks.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{ArrayRef, Float64Array, StringArray, TimestampMillisecondArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use arrow::record_batch::RecordBatch;
use chrono::NaiveDate;
use parquet::arrow::ArrowWriter;

use super::{CostComponent, RenderError, Report, State};

/// The columns of the export, in this order.
pub const FOCUS_COLUMNS: [&str; 24] = [
    "BilledCost",
    "EffectiveCost",
    "ListCost",
    "ContractedCost",
    "BillingCurrency",
    "BillingPeriodStart",
    "BillingPeriodEnd",
    "ChargePeriodStart",
    "ChargePeriodEnd",
    "ChargeCategory",
    "ChargeDescription",
    "ResourceId",
    "ResourceName",
    "ResourceType",
    "ServiceName",
    "ServiceCategory",
    "SubAccountId",
    "SubAccountName",
    "Tags",
    "x_GpuHours",
    "x_ProvisionalGpuHours",
    "x_State",
    "x_AcceptedUnits",
    "x_CostComponent",
];

/// Amounts at or below this are treated as zero (no overhead row, no reconciliation row).
const EPSILON: f64 = 1e-9;

/// What [`write_focus`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FocusFiles {
    pub csv: PathBuf,
    pub parquet: PathBuf,
    /// Rows in each file.
    pub rows: usize,
}

/// Writes `<dir>/<stem>.csv` and `<dir>/<stem>.parquet` (zstd) from [`focus_batch`].
///
/// Each file is written under a hidden temporary name in `dir`, synced, then renamed into
/// place, so a reader never sees half a file and a failed export leaves the old files as
/// they were. `dir` is created when missing.
pub fn write_focus(report: &Report, dir: &Path, stem: &str) -> Result<FocusFiles, RenderError> {
    let batch = focus_batch(report)?;
    fs::create_dir_all(dir).map_err(|source| RenderError::Io { path: dir.to_path_buf(), source })?;

    let csv = dir.join(format!("{stem}.csv"));
    write_atomically(&csv, |file| {
        let mut w =
            arrow::csv::WriterBuilder::new().with_header(true).with_timestamp_tz_format("%Y-%m-%dT%H:%M:%SZ".to_string()).build(file);
        Ok(w.write(&batch)?)
    })?;

    let parquet = dir.join(format!("{stem}.parquet"));
    write_atomically(&parquet, |file| {
        let mut w = ArrowWriter::try_new(file, batch.schema(), Some(gpuledger_store::derived_properties(stem)))?;
        w.write(&batch)?;
        w.close()?;
        Ok(())
    })?;

    Ok(FocusFiles { csv, parquet, rows: batch.num_rows() })
}

fn write_atomically(path: &Path, fill: impl FnOnce(&mut gpuledger_store::AtomicFile) -> Result<(), RenderError>) -> Result<(), RenderError> {
    gpuledger_store::atomic::write_with(path, fill).map(|_| ())
}

/// One row of the export before it becomes columns.
struct Row<'a> {
    cost: f64,
    description: String,
    resource_id: String,
    resource_name: String,
    gpu: bool,
    team: &'a str,
    state: Option<State>,
    gpu_hours: f64,
    provisional_gpu_hours: f64,
    accepted_units: f64,
    component: CostComponent,
}

fn usage_row(u: &super::UsageRow) -> Row<'_> {
    Row {
        cost: u.cost,
        description: if u.platform_paid {
            // Charged to platform: say whose run the hours were.
            format!("GPU time, {} (paid by the platform for {}), {}", u.state, u.team, u.model_name)
        } else {
            format!("GPU time, {}, {}", u.state, u.model_name)
        },
        resource_id: format!("gpu-model/{}", u.model_name),
        resource_name: u.model_name.clone(),
        gpu: true,
        team: u.charged_to(),
        state: Some(u.state),
        gpu_hours: u.gpu_hours,
        provisional_gpu_hours: u.provisional_gpu_hours,
        accepted_units: u.accepted_units,
        component: u.state.component(),
    }
}

fn rows(report: &Report) -> Vec<Row<'_>> {
    let mut out = Vec::with_capacity(report.usage.len() + report.chargeback.len() * 5);
    // Grouped by team in chargeback order, so a team's rows sit together in the files.
    for c in &report.chargeback {
        let mut sum = 0.0;
        for u in report.usage.iter().filter(|u| u.charged_to() == c.team) {
            sum += u.cost;
            out.push(usage_row(u));
        }
        for (component, amount) in CostComponent::OVERHEADS.map(|k| (k, c.cost_of(k))) {
            if amount.abs() <= EPSILON {
                continue;
            }
            sum += amount;
            out.push(Row {
                cost: amount,
                description: format!("Shared overhead: {component}"),
                resource_id: format!("overhead/{component}"),
                resource_name: component.to_string(),
                gpu: false,
                team: &c.team,
                state: None,
                gpu_hours: 0.0,
                provisional_gpu_hours: 0.0,
                accepted_units: 0.0,
                component,
            });
        }
        let d = c.total - sum;
        if d.abs() > EPSILON {
            out.push(Row {
                cost: d,
                description: "Share of unallocated GPU time".to_string(),
                resource_id: "gpu-pool/unallocated".to_string(),
                resource_name: "unallocated GPU time".to_string(),
                gpu: true,
                team: &c.team,
                state: Some(State::Unallocated),
                gpu_hours: 0.0,
                provisional_gpu_hours: 0.0,
                accepted_units: 0.0,
                component: CostComponent::Idle,
            });
        }
    }
    // Usage of a team without a chargeback row should not happen; export it rather than lose cost.
    for u in &report.usage {
        if !report.chargeback.iter().any(|c| c.team == u.charged_to()) {
            out.push(usage_row(u));
        }
    }
    out
}

/// The schema of the export: [`FOCUS_COLUMNS`] with their types.
pub fn focus_schema() -> SchemaRef {
    let ts = DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into()));
    let field = |name: &str| {
        let (data_type, nullable) = match name {
            "BilledCost" | "EffectiveCost" | "ListCost" | "ContractedCost" | "x_GpuHours" | "x_ProvisionalGpuHours" | "x_AcceptedUnits" => {
                (DataType::Float64, false)
            }
            "BillingPeriodStart" | "BillingPeriodEnd" | "ChargePeriodStart" | "ChargePeriodEnd" => (ts.clone(), false),
            "x_State" => (DataType::Utf8, true),
            _ => (DataType::Utf8, false),
        };
        Field::new(name, data_type, nullable)
    };
    Arc::new(Schema::new(FOCUS_COLUMNS.iter().map(|n| field(n)).collect::<Vec<_>>()))
}

/// Builds the export as one Arrow batch (the CSV and the Parquet file are written from it).
pub fn focus_batch(report: &Report) -> Result<RecordBatch, RenderError> {
    let (start, end) = month_bounds_ms(&report.month)?;
    let rows = rows(report);
    let n = rows.len();

    let f64s = |f: fn(&Row) -> f64| Arc::new(Float64Array::from_iter_values(rows.iter().map(f))) as ArrayRef;
    let strs = |f: &dyn Fn(&Row) -> String| Arc::new(StringArray::from_iter_values(rows.iter().map(f))) as ArrayRef;
    let ts = |v: i64| Arc::new(TimestampMillisecondArray::from(vec![v; n]).with_timezone("UTC")) as ArrayRef;
    let cost = f64s(|r| r.cost);

    let columns: Vec<ArrayRef> = vec![
        cost.clone(),
        cost.clone(),
        cost.clone(),
        cost,
        strs(&|_| report.currency.clone()),
        ts(start),
        ts(end),
        ts(start),
        ts(end),
        strs(&|_| "Usage".into()),
        strs(&|r| r.description.clone()),
        strs(&|r| r.resource_id.clone()),
        strs(&|r| r.resource_name.clone()),
        strs(&|r| if r.gpu { "GPU" } else { "Overhead" }.into()),
        strs(&|r| if r.gpu { "GPU compute" } else { "Platform overhead" }.into()),
        strs(&|r| if r.gpu { "AI and Machine Learning" } else { "Management and Governance" }.into()),
        strs(&|r| r.team.to_string()),
        strs(&|r| r.team.to_string()),
        strs(&tags),
        f64s(|r| r.gpu_hours),
        f64s(|r| r.provisional_gpu_hours),
        Arc::new(StringArray::from_iter(rows.iter().map(|r| r.state.map(State::as_str)))),
        f64s(|r| r.accepted_units),
        strs(&|r| r.component.as_str().into()),
    ];
    Ok(RecordBatch::try_new(focus_schema(), columns)?)
}

/// The `Tags` value: a JSON object of the team, the GPU state (GPU rows) and the component.
fn tags(r: &Row) -> String {
    let mut m = serde_json::Map::new();
    m.insert("gpuledger/team".into(), r.team.into());
    if let Some(state) = r.state {
        m.insert("gpuledger/state".into(), state.as_str().into());
    }
    m.insert("gpuledger/component".into(), r.component.as_str().into());
    serde_json::Value::Object(m).to_string()
}

/// The calendar month `YYYY-MM` as `[first instant, first instant of the next month)` in
/// milliseconds since the epoch, UTC.
fn month_bounds_ms(month: &str) -> Result<(i64, i64), RenderError> {
    let bad = || RenderError::Month { month: month.to_string() };
    let (y, m) = month.split_once('-').ok_or_else(bad)?;
    if y.len() != 4 || m.len() != 2 {
        return Err(bad());
    }
    let (y, m): (i32, u32) = (y.parse().map_err(|_| bad())?, m.parse().map_err(|_| bad())?);
    let (next_y, next_m) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
    let first = |y, m| NaiveDate::from_ymd_opt(y, m, 1).and_then(|d| d.and_hms_opt(0, 0, 0)).map(|t| t.and_utc().timestamp_millis());
    Ok((first(y, m).ok_or_else(bad)?, first(next_y, next_m).ok_or_else(bad)?))
}

#[cfg(test)]
mod tests {
    use super::super::fixture;
    use super::*;

    use std::collections::BTreeMap;

    use arrow::array::AsArray;
    use arrow::datatypes::{Float64Type, TimestampMillisecondType};
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

    fn ms(s: &str) -> i64 {
        chrono::DateTime::parse_from_rfc3339(s).unwrap().timestamp_millis()
    }

    fn strings<'a>(b: &'a RecordBatch, name: &str) -> Vec<Option<&'a str>> {
        b.column_by_name(name).unwrap().as_string::<i32>().iter().collect()
    }

    fn floats(b: &RecordBatch, name: &str) -> Vec<f64> {
        b.column_by_name(name).unwrap().as_primitive::<Float64Type>().values().to_vec()
    }

    #[test]
    fn billed_cost_per_team_equals_chargeback_total() {
        let report = fixture::report();
        let b = focus_batch(&report).unwrap();
        let mut sums: BTreeMap<&str, f64> = BTreeMap::new();
        for (team, cost) in strings(&b, "SubAccountId").into_iter().zip(floats(&b, "BilledCost")) {
            *sums.entry(team.unwrap()).or_default() += cost;
        }
        assert_eq!(sums.len(), report.chargeback.len());
        for c in &report.chargeback {
            assert!((sums[c.team.as_str()] - c.total).abs() < 1e-6, "{}: {} != {}", c.team, sums[c.team.as_str()], c.total);
        }
        for name in ["EffectiveCost", "ListCost", "ContractedCost"] {
            assert_eq!(floats(&b, name), floats(&b, "BilledCost"), "{name}");
        }
    }

    #[test]
    fn row_count_and_row_kinds() {
        let report = fixture::report();
        let b = focus_batch(&report).unwrap();
        let overheads: usize =
            report.chargeback.iter().map(|c| [c.network, c.storage, c.support, c.operations].iter().filter(|v| **v != 0.0).count()).sum();
        // Every team of the fixture needs a reconciliation row under the share policy.
        let reconciliations = strings(&b, "ChargeDescription").iter().filter(|d| **d == Some("Share of unallocated GPU time")).count();
        assert_eq!((report.usage.len(), overheads, reconciliations), (9, 10, 3));
        assert_eq!(b.num_rows(), report.usage.len() + overheads + reconciliations);

        let desc = strings(&b, "ChargeDescription");
        let i = desc.iter().position(|d| *d == Some("GPU time, productive, NVIDIA H100 80GB HBM3")).unwrap();
        assert_eq!(strings(&b, "ResourceId")[i], Some("gpu-model/NVIDIA H100 80GB HBM3"));
        assert_eq!(strings(&b, "ServiceCategory")[i], Some("AI and Machine Learning"));
        assert_eq!(strings(&b, "x_State")[i], Some("productive"));
        assert_eq!(strings(&b, "x_CostComponent")[i], Some("compute"));
        assert_eq!(floats(&b, "x_GpuHours")[i], 100.0);
        assert_eq!(floats(&b, "x_ProvisionalGpuHours")[i], 3.5);
        assert_eq!(floats(&b, "x_AcceptedUnits")[i], 1000.0);
        let tags: serde_json::Value = serde_json::from_str(strings(&b, "Tags")[i].unwrap()).unwrap();
        assert_eq!(tags["gpuledger/team"], "ml-research");
        assert_eq!(tags["gpuledger/state"], "productive");

        let j = desc.iter().position(|d| *d == Some("Shared overhead: network")).unwrap();
        assert_eq!(strings(&b, "ResourceType")[j], Some("Overhead"));
        assert_eq!(strings(&b, "ServiceCategory")[j], Some("Management and Governance"));
        assert_eq!(strings(&b, "x_State")[j], None);
        assert_eq!(floats(&b, "x_GpuHours")[j], 0.0);
        assert!(strings(&b, "ChargeCategory").iter().all(|c| *c == Some("Usage")));
        // platform gave its unallocated time away: its reconciliation row is negative.
        let k = (0..b.num_rows())
            .find(|&k| desc[k] == Some("Share of unallocated GPU time") && strings(&b, "SubAccountId")[k] == Some("platform"))
            .unwrap();
        assert_eq!(floats(&b, "BilledCost")[k], -16.0);
        // The failed hours the platform paid for are on platform's account, named for the team.
        let p = desc.iter().position(|d| *d == Some("GPU time, failed (paid by the platform for ml-research), NVIDIA H100 80GB HBM3")).unwrap();
        assert_eq!((strings(&b, "SubAccountId")[p], floats(&b, "BilledCost")[p], floats(&b, "x_GpuHours")[p]), (Some("platform"), 6.0, 3.0));
        assert_eq!(strings(&b, "x_CostComponent")[p], Some("failed_runs"));
    }

    #[test]
    fn no_reconciliation_when_chargeback_matches_usage() {
        let mut report = fixture::report();
        report.idle_policy = crate::config::IdlePolicy::Platform;
        // Undo the share: each team pays its own price-list idle.
        report.chargeback[0].idle = 20.0;
        report.chargeback[0].total -= 6.0;
        report.chargeback[1].idle = 16.0;
        report.chargeback[1].total += 16.0;
        report.chargeback[2].idle = 2.0;
        report.chargeback[2].total -= 10.0;
        let b = focus_batch(&report).unwrap();
        assert_eq!(b.num_rows(), 19);
        assert!(!strings(&b, "ChargeDescription").contains(&Some("Share of unallocated GPU time")));
    }

    #[test]
    fn period_is_the_calendar_month() {
        let b = focus_batch(&fixture::report()).unwrap();
        for (name, want) in [
            ("BillingPeriodStart", "2026-10-01T00:00:00Z"),
            ("ChargePeriodStart", "2026-10-01T00:00:00Z"),
            ("BillingPeriodEnd", "2026-11-01T00:00:00Z"),
            ("ChargePeriodEnd", "2026-11-01T00:00:00Z"),
        ] {
            let col = b.column_by_name(name).unwrap().as_primitive::<TimestampMillisecondType>();
            assert_eq!(col.timezone(), Some("UTC"));
            assert!(col.values().iter().all(|v| *v == ms(want)), "{name}");
        }
        assert_eq!(month_bounds_ms("2026-12").unwrap(), (ms("2026-12-01T00:00:00Z"), ms("2027-01-01T00:00:00Z")));
        assert_eq!(month_bounds_ms("2028-02").unwrap(), (ms("2028-02-01T00:00:00Z"), ms("2028-03-01T00:00:00Z")));
        for bad in ["2026-13", "2026-1", "202610", "october"] {
            assert!(matches!(month_bounds_ms(bad), Err(RenderError::Month { .. })), "{bad}");
        }
    }

    #[test]
    fn files_are_written_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("exports");
        let report = fixture::report();
        let files = write_focus(&report, &out, "focus-2026-10").unwrap();
        assert_eq!(files.csv, out.join("focus-2026-10.csv"));
        assert_eq!(files.parquet, out.join("focus-2026-10.parquet"));
        assert_eq!(files.rows, 22);
        // No temporary file is left behind.
        let names: Vec<String> = fs::read_dir(&out).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        assert_eq!(names.len(), 2, "{names:?}");

        let reader = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(&files.parquet).unwrap()).unwrap().build().unwrap();
        let batches: Vec<RecordBatch> = reader.collect::<Result<_, _>>().unwrap();
        assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), files.rows);
        let schema = batches[0].schema();
        let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(names, FOCUS_COLUMNS);
        assert!((floats(&batches[0], "BilledCost").iter().sum::<f64>() - report.total()).abs() < 1e-6);

        let csv = fs::read_to_string(&files.csv).unwrap();
        let mut lines = csv.lines();
        let header: Vec<&str> = lines.next().unwrap().split(',').collect();
        for c in FOCUS_COLUMNS {
            assert!(header.contains(&c), "{c} missing from the CSV header");
        }
        assert_eq!(lines.clone().count(), files.rows);
        assert!(lines.next().unwrap().contains(",2026-10-01T00:00:00Z,2026-11-01T00:00:00Z,"), "{csv}");

        // A second export replaces the files.
        let mut smaller = report.clone();
        smaller.usage.truncate(1);
        let again = write_focus(&smaller, &out, "focus-2026-10").unwrap();
        assert!(again.rows < files.rows);
        assert_eq!(fs::read_to_string(&again.csv).unwrap().lines().count(), again.rows + 1);
    }

    #[test]
    fn a_bad_month_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let mut report = fixture::report();
        report.month = "2026-10-01".into();
        assert!(matches!(write_focus(&report, dir.path(), "x"), Err(RenderError::Month { .. })));
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
