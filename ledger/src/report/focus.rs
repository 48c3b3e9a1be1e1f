//! The month as a FinOps FOCUS 1.2 cost and usage dataset, written as CSV and Parquet.
//!
//! FOCUS is what FinOps tools import next to the cloud providers' bills, so a cluster's GPU
//! chargeback can sit beside them. The rows and every figure in them come from the view
//! `report_focus` (`queries/90_reports.sql`, which says what each row is and how a team's rows
//! add up to its chargeback total). This module reads the month's rows with the month bound as
//! a parameter, puts the columns in FOCUS order with the types of [`focus_schema`] (a column
//! the view lost, or of another type, is an error), adds what only the configuration knows (the
//! currency and the parties: [`FocusAccount`]), and writes the files.
//!
//! The export passes the FinOps Foundation's validator (`focus-validator`, FOCUS 1.2 rules) but
//! for one check: of the two InvoiceId nullability rules, "null when no invoice" and "not null
//! when there is one", the validator reports the branch the data does not take as failed though
//! their OR passes (tests/it/focus.rs; FOCUS_Spec#2394 tracks such false positives).
//! The chargeback is a provisional invoice per billing account and month, so InvoiceId is set.
//! The checks that apply are those of a provider that names its billing account, has sub
//! accounts (teams), measures usage, types and tags its resources and bills provisioned ones;
//! it publishes no price list and offers no commitments, so there are no SKU or commitment
//! columns (CommitmentDiscountStatus is present and null: the ConsumedQuantity rules read it).
//!
//! The four cost columns are exact decimals (`DECIMAL(38, 6)`, FOCUS's Decimal), as the ledger
//! keeps them: a team's rows add up to its chargeback total to the micro-unit in the Parquet
//! file and in the CSV (which prints every decimal).

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, StringArray};
use arrow::compute::concat_batches;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::prelude::SessionContext;
use parquet::arrow::ArrowWriter;

use super::RenderError;
use crate::config::FocusAccount;
use crate::error::Error;
use crate::types::Month;

/// The columns of the export, in this order.
pub const FOCUS_COLUMNS: [&str; 38] = [
    "BilledCost",
    "EffectiveCost",
    "ListCost",
    "ContractedCost",
    "BillingAccountId",
    "BillingAccountName",
    "BillingCurrency",
    "BillingPeriodStart",
    "BillingPeriodEnd",
    "ChargePeriodStart",
    "ChargePeriodEnd",
    "ChargeCategory",
    "ChargeClass",
    "ChargeFrequency",
    "ChargeDescription",
    "PricingQuantity",
    "PricingUnit",
    "ConsumedQuantity",
    "ConsumedUnit",
    "CommitmentDiscountStatus",
    "InvoiceId",
    "InvoiceIssuerName",
    "ProviderName",
    "PublisherName",
    "ResourceId",
    "ResourceName",
    "ResourceType",
    "ServiceName",
    "ServiceCategory",
    "ServiceSubcategory",
    "SubAccountId",
    "SubAccountName",
    "Tags",
    "x_GpuHours",
    "x_ProvisionalGpuHours",
    "x_State",
    "x_AcceptedUnits",
    "x_CostComponent",
];

/// The columns the view does not hold, each the same on every row: the configuration's
/// currency and parties, and the invoice (one per billing account and month).
fn configured(name: &str, month: &Month, currency: &str, account: &FocusAccount) -> Option<String> {
    Some(match name {
        "BillingCurrency" => currency.to_owned(),
        "BillingAccountId" => account.billing_account_id.clone(),
        "BillingAccountName" => account.billing_account_name.clone(),
        "InvoiceId" => format!("{}-{}", account.billing_account_id, month),
        "InvoiceIssuerName" => account.invoice_issuer_name.clone(),
        "ProviderName" => account.provider_name.clone(),
        "PublisherName" => account.publisher_name.clone(),
        _ => return None,
    })
}

/// The month's rows, a team's together in the order the view ranks them.
const FOCUS_SQL: &str = r#"SELECT * FROM report_focus WHERE month = $1 ORDER BY "SubAccountId", row_kind, row_rank"#;

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
pub async fn write_focus(
    ctx: &SessionContext,
    month: &Month,
    currency: &str,
    account: &FocusAccount,
    dir: &Path,
    stem: &str,
) -> Result<FocusFiles, RenderError> {
    let batch = focus_batch(ctx, month, currency, account).await?;
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

/// The schema of the export: [`FOCUS_COLUMNS`] with their types. Null only where FOCUS wants
/// it: ChargeClass (no row is a correction), CommitmentDiscountStatus (no commitments), the
/// pricing and consumed quantities and units of adjustments, and `x_State` of rows that are no
/// GPU time.
pub fn focus_schema() -> SchemaRef {
    let ts = DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into()));
    let field = |name: &str| {
        let (data_type, nullable) = match name {
            "BilledCost" | "EffectiveCost" | "ListCost" | "ContractedCost" => (gpuledger_engine::udf::money::money_type(), false),
            "x_GpuHours" | "x_ProvisionalGpuHours" | "x_AcceptedUnits" => (DataType::Float64, false),
            "PricingQuantity" | "ConsumedQuantity" => (DataType::Float64, true),
            "BillingPeriodStart" | "BillingPeriodEnd" | "ChargePeriodStart" | "ChargePeriodEnd" => (ts.clone(), false),
            "ChargeClass" | "PricingUnit" | "ConsumedUnit" | "CommitmentDiscountStatus" | "x_State" => (DataType::Utf8, true),
            _ => (DataType::Utf8, false),
        };
        Field::new(name, data_type, nullable)
    };
    Arc::new(Schema::new(FOCUS_COLUMNS.iter().map(|n| field(n)).collect::<Vec<_>>()))
}

/// The export of `month` as one Arrow batch (the CSV and the Parquet file are written from it),
/// read from `report_focus` in `ctx` (an accounting session, or a stored ledger's).
pub async fn focus_batch(ctx: &SessionContext, month: &Month, currency: &str, account: &FocusAccount) -> Result<RecordBatch, RenderError> {
    let batches = gpuledger_engine::exec::query_month(ctx, FOCUS_SQL, Some(month.as_str())).await?;
    let Some(first) = batches.first() else {
        return Ok(RecordBatch::new_empty(focus_schema()));
    };
    let rows = concat_batches(&first.schema(), &batches)?;
    let schema = focus_schema();
    let columns = schema
        .fields()
        .iter()
        .map(|field| {
            if let Some(value) = configured(field.name(), month, currency, account) {
                return Ok(Arc::new(StringArray::from(vec![value; rows.num_rows()])) as ArrayRef);
            }
            let column = rows.column_by_name(field.name()).ok_or_else(|| Error::internal(format!("report_focus has no column {}", field.name())))?;
            if !same_kind(column.data_type(), field.data_type()) {
                return Err(Error::internal(format!("report_focus column {} is {}, not {}", field.name(), column.data_type(), field.data_type())).into());
            }
            Ok(arrow::compute::cast(column, field.data_type())?)
        })
        .collect::<Result<Vec<_>, RenderError>>()?;
    // try_new refuses a null in a column that may not hold one.
    Ok(RecordBatch::try_new(schema, columns)?)
}

/// Whether a column of type `from` holds what a FOCUS column of type `to` does (text as text,
/// numbers as numbers, exact amounts as exact amounts, times as times), so that casting it
/// changes only its width or encoding.
fn same_kind(from: &DataType, to: &DataType) -> bool {
    let text = |t: &DataType| matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View);
    match to {
        DataType::Decimal128(..) => matches!(from, DataType::Decimal128(..)),
        DataType::Float64 => from.is_numeric(),
        DataType::Timestamp(..) => matches!(from, DataType::Timestamp(..)),
        _ => text(from) || (*from == DataType::Null && text(to)),
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Report, fixture};
    use super::*;

    use std::collections::BTreeMap;

    use arrow::array::AsArray;
    use arrow::datatypes::{Decimal128Type, Float64Type, TimestampMillisecondType};
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

    /// A cost column in micro-units, exact.
    fn micros(b: &RecordBatch, name: &str) -> Vec<i128> {
        b.column_by_name(name).unwrap().as_primitive::<Decimal128Type>().values().to_vec()
    }

    /// An amount of the fixture (whole cents) in micro-units.
    fn to_micros(amount: f64) -> i128 {
        (amount * 1e6).round() as i128
    }

    fn nullable_floats(b: &RecordBatch, name: &str) -> Vec<Option<f64>> {
        b.column_by_name(name).unwrap().as_primitive::<Float64Type>().iter().collect()
    }

    /// The fixture under the platform idle policy: each team pays its own price-list idle, so
    /// its rows add up to its total without a reconciliation row.
    fn platform_policy() -> Report {
        let mut report = fixture::report();
        report.idle_policy = crate::config::IdlePolicy::Platform;
        report.chargeback[0].idle = 20.0;
        report.chargeback[0].total -= 6.0;
        report.chargeback[1].idle = 16.0;
        report.chargeback[1].total += 16.0;
        report.chargeback[2].idle = 2.0;
        report.chargeback[2].total -= 10.0;
        report
    }

    fn october() -> Month {
        "2026-10".parse().unwrap()
    }

    /// The fixture report's FOCUS rows, read through the views over its tables.
    async fn export(report: &Report) -> RecordBatch {
        let ctx = fixture::session(report).await;
        focus_batch(&ctx, &report.month, &report.currency, &FocusAccount::default()).await.unwrap()
    }

    #[tokio::test]
    async fn billed_cost_per_team_equals_chargeback_total() {
        let report = fixture::report();
        let b = export(&report).await;
        let mut sums: BTreeMap<&str, i128> = BTreeMap::new();
        for (team, cost) in strings(&b, "SubAccountId").into_iter().zip(micros(&b, "BilledCost")) {
            *sums.entry(team.unwrap()).or_default() += cost;
        }
        assert_eq!(sums.len(), report.chargeback.len());
        for c in &report.chargeback {
            assert_eq!(sums[c.team.as_str()], to_micros(c.total), "{}: the rows add up to the total exactly", c.team);
        }
        for name in ["EffectiveCost", "ListCost", "ContractedCost"] {
            assert_eq!(micros(&b, name), micros(&b, "BilledCost"), "{name}");
        }
        assert_eq!(b.column_by_name("BilledCost").unwrap().data_type(), &DataType::Decimal128(38, 6));
        assert!(strings(&b, "BillingCurrency").iter().all(|c| *c == Some("EUR")));
    }

    #[tokio::test]
    async fn row_count_and_row_kinds() {
        let report = fixture::report();
        let b = export(&report).await;
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
        assert_eq!(tags, serde_json::json!({"gpuledger/team": "ml-research", "gpuledger/state": "productive", "gpuledger/component": "compute"}));

        let j = desc.iter().position(|d| *d == Some("Shared overhead: network")).unwrap();
        assert_eq!(strings(&b, "ResourceType")[j], Some("Overhead"));
        assert_eq!(strings(&b, "ServiceCategory")[j], Some("Management and Governance"));
        assert_eq!(strings(&b, "x_State")[j], None);
        assert_eq!(floats(&b, "x_GpuHours")[j], 0.0);
        let tags: serde_json::Value = serde_json::from_str(strings(&b, "Tags")[j].unwrap()).unwrap();
        assert_eq!(tags, serde_json::json!({"gpuledger/team": "ml-research", "gpuledger/component": "network"}));
        // GPU time is priced and consumed in GPU-hours, an overhead share is one month of it,
        // a reconciliation moves cost and measures nothing.
        let (category, frequency) = (strings(&b, "ChargeCategory"), strings(&b, "ChargeFrequency"));
        let (pricing, consumed) = (nullable_floats(&b, "PricingQuantity"), nullable_floats(&b, "ConsumedQuantity"));
        let (pricing_unit, consumed_unit) = (strings(&b, "PricingUnit"), strings(&b, "ConsumedUnit"));
        for r in 0..b.num_rows() {
            let kind = strings(&b, "ResourceType")[r].unwrap();
            let adjustment = desc[r] == Some("Share of unallocated GPU time");
            let want = match (kind, adjustment) {
                (_, true) => ("Adjustment", "Usage-Based", None, None),
                ("GPU", false) => ("Usage", "Usage-Based", Some(floats(&b, "x_GpuHours")[r]), Some("GPU-Hours")),
                _ => ("Usage", "Recurring", Some(1.0), Some("Month")),
            };
            assert_eq!((category[r].unwrap(), frequency[r].unwrap(), pricing[r], pricing_unit[r]), want, "row {r}: {:?}", desc[r]);
            assert_eq!((consumed[r], consumed_unit[r]), (want.2, want.3), "row {r}");
        }
        assert!(strings(&b, "ChargeClass").iter().all(Option::is_none));
        assert!(strings(&b, "CommitmentDiscountStatus").iter().all(Option::is_none));
        assert_eq!(strings(&b, "ServiceSubcategory")[i], Some("AI Platforms"));
        assert_eq!(strings(&b, "ServiceSubcategory")[j], Some("Other (Management and Governance)"));
        let support = desc.iter().position(|d| *d == Some("Shared overhead: support")).unwrap();
        assert_eq!(strings(&b, "ServiceSubcategory")[support], Some("Support"));
        // platform gave its unallocated time away: 9.5 - (2 + 16 + 6 GPU time, 1 + 0.5 overheads).
        let k = (0..b.num_rows())
            .find(|&k| desc[k] == Some("Share of unallocated GPU time") && strings(&b, "SubAccountId")[k] == Some("platform"))
            .unwrap();
        assert_eq!(micros(&b, "BilledCost")[k], -16_000_000);
        // The failed hours the platform paid for are on platform's account, named for the team.
        let p = desc.iter().position(|d| *d == Some("GPU time, failed (paid by the platform for ml-research), NVIDIA H100 80GB HBM3")).unwrap();
        assert_eq!((strings(&b, "SubAccountId")[p], micros(&b, "BilledCost")[p], floats(&b, "x_GpuHours")[p]), (Some("platform"), 6_000_000, 3.0));
        assert_eq!(strings(&b, "x_CostComponent")[p], Some("failed_runs"));
        // Each state's cost is charged as its component (60_chargeback.sql).
        let component_of = |state: &str| -> Vec<Option<&str>> {
            let states = strings(&b, "x_State");
            let components = strings(&b, "x_CostComponent");
            let mut found: Vec<Option<&str>> = (0..b.num_rows()).filter(|&r| states[r] == Some(state)).map(|r| components[r]).collect();
            found.dedup();
            found
        };
        for (state, component) in [("productive", "compute"), ("allocated_idle", "idle"), ("unallocated", "idle"), ("failed", "failed_runs"), ("preempted", "failed_runs")] {
            assert_eq!(component_of(state), vec![Some(component)], "{state}");
        }
        // A team's rows sit together: GPU time, then overheads, then its reconciliation.
        let accounts = strings(&b, "SubAccountId");
        assert!(accounts.windows(2).all(|w| w[0] <= w[1]), "{accounts:?}");
        let ml: Vec<_> = (0..b.num_rows()).filter(|&r| accounts[r] == Some("ml-research")).map(|r| desc[r].unwrap()).collect();
        assert_eq!(ml.last(), Some(&"Share of unallocated GPU time"), "{ml:?}");
        assert_eq!(ml.iter().filter(|d| d.starts_with("Shared overhead: ")).count(), 4, "{ml:?}");
    }

    #[tokio::test]
    async fn no_reconciliation_when_chargeback_matches_usage() {
        let b = export(&platform_policy()).await;
        assert_eq!(b.num_rows(), 19);
        assert!(!strings(&b, "ChargeDescription").contains(&Some("Share of unallocated GPU time")));
        assert!(strings(&b, "ChargeCategory").iter().all(|c| *c == Some("Usage")));
    }

    #[tokio::test]
    async fn reconciliation_is_exact_to_the_micro_unit() {
        // The same month a million times larger: ml-research's total is 239,000,000. Amounts are
        // exact decimals, so its rows add up to its total exactly and no reconciliation row
        // appears (a float sum there would be off in its last place, 3e-8, by summation order)...
        let mut report = platform_policy();
        report.usage.iter_mut().for_each(|u| u.cost *= 1e6);
        for c in &mut report.chargeback {
            for v in [&mut c.compute, &mut c.network, &mut c.storage, &mut c.support, &mut c.idle, &mut c.failed_runs, &mut c.operations, &mut c.total] {
                *v *= 1e6;
            }
        }
        assert_eq!(report.chargeback[0].total, 239e6);
        assert_eq!(export(&report).await.num_rows(), 19);

        // ...and one micro-unit of difference is money: a reconciliation row of 0.000001.
        report.chargeback[0].total += 0.000001;
        let b = export(&report).await;
        assert_eq!(b.num_rows(), 20);
        let desc = strings(&b, "ChargeDescription");
        let r = desc.iter().position(|d| *d == Some("Share of unallocated GPU time")).unwrap();
        assert_eq!(strings(&b, "SubAccountId")[r], Some("ml-research"));
        assert_eq!(micros(&b, "BilledCost")[r], 1);
    }

    #[tokio::test]
    async fn parties_come_from_the_configuration() {
        let report = fixture::report();
        let ctx = fixture::session(&report).await;
        let b = focus_batch(&ctx, &october(), "EUR", &FocusAccount::default()).await.unwrap();
        for (name, want) in [
            ("BillingAccountId", "gpu-cluster"),
            ("BillingAccountName", "GPU cluster"),
            ("InvoiceId", "gpu-cluster-2026-10"),
            ("InvoiceIssuerName", "GPU platform"),
            ("ProviderName", "GPU platform"),
            ("PublisherName", "GPU platform"),
        ] {
            assert!(strings(&b, name).iter().all(|v| *v == Some(want)), "{name}: {:?}", strings(&b, name));
        }
        let account = FocusAccount {
            billing_account_id: "acme-ml".into(),
            billing_account_name: "ACME ML cluster".into(),
            provider_name: "ACME platform".into(),
            invoice_issuer_name: "ACME finance".into(),
            publisher_name: "ACME platform".into(),
        };
        let b = focus_batch(&ctx, &october(), "EUR", &account).await.unwrap();
        assert_eq!(strings(&b, "InvoiceId")[0], Some("acme-ml-2026-10"));
        assert_eq!(strings(&b, "InvoiceIssuerName")[0], Some("ACME finance"));
        assert_eq!(strings(&b, "BillingAccountName")[0], Some("ACME ML cluster"));
    }

    #[tokio::test]
    async fn period_is_the_calendar_month() {
        for (month, start, end) in [("2026-10", "2026-10-01T00:00:00Z", "2026-11-01T00:00:00Z"), ("2026-12", "2026-12-01T00:00:00Z", "2027-01-01T00:00:00Z")] {
            let mut report = fixture::report();
            report.month = month.parse().unwrap();
            report.chargeback.iter_mut().for_each(|c| c.month = month.into());
            report.usage.iter_mut().for_each(|u| u.month = month.into());
            report.units.iter_mut().for_each(|u| u.month = month.into());
            let b = export(&report).await;
            assert_eq!(b.num_rows(), 22);
            for (name, want) in [("BillingPeriodStart", start), ("ChargePeriodStart", start), ("BillingPeriodEnd", end), ("ChargePeriodEnd", end)] {
                let col = b.column_by_name(name).unwrap().as_primitive::<TimestampMillisecondType>();
                assert_eq!(col.timezone(), Some("UTC"));
                assert!(col.values().iter().all(|v| *v == ms(want)), "{month} {name}");
            }
        }
    }

    #[tokio::test]
    async fn files_are_written_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("exports");
        let report = fixture::report();
        let ctx = fixture::session(&report).await;
        let files = write_focus(&ctx, &october(), "EUR", &FocusAccount::default(), &out, "focus-2026-10").await.unwrap();
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
        assert_eq!(micros(&batches[0], "BilledCost").iter().sum::<i128>(), to_micros(report.total()), "exact in the Parquet file");

        let csv = fs::read_to_string(&files.csv).unwrap();
        let mut lines = csv.lines();
        let header: Vec<&str> = lines.next().unwrap().split(',').collect();
        for c in FOCUS_COLUMNS {
            assert!(header.contains(&c), "{c} missing from the CSV header");
        }
        assert_eq!(lines.clone().count(), files.rows);
        assert!(lines.next().unwrap().contains(",EUR,2026-10-01T00:00:00Z,2026-11-01T00:00:00Z,"), "{csv}");

        // A second export replaces the files.
        let mut smaller = report.clone();
        smaller.usage.truncate(1);
        let ctx = fixture::session(&smaller).await;
        let again = write_focus(&ctx, &october(), "EUR", &FocusAccount::default(), &out, "focus-2026-10").await.unwrap();
        assert!(again.rows < files.rows);
        assert_eq!(fs::read_to_string(&again.csv).unwrap().lines().count(), again.rows + 1);
    }

    #[tokio::test]
    async fn a_month_without_data_exports_no_rows() {
        let ctx = fixture::session(&fixture::report()).await;
        let b = focus_batch(&ctx, &"2026-09".parse().unwrap(), "EUR", &FocusAccount::default()).await.unwrap();
        assert_eq!((b.num_rows(), b.schema()), (0, focus_schema()));
    }
}
