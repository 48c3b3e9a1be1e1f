//! Retention: raw samples are removed once their month is old enough, while the ledger keeps
//! the figures it computed from them.
//!
//! Samples are nearly all of a store (a 256-GPU month at a 5-minute scrape is 3.3M GPU rows),
//! and finance needs a closed month's chargeback long after anyone needs its samples. So
//! [`expire`] removes the files of the sample tables ([`EXPIRING_TABLES`]) for whole months
//! before a horizon (one Delta commit per table; VACUUM frees the space later) and records the
//! horizon in the store (`.expired`). From then on, a ledger run takes each derived row that
//! belongs before the horizon from the derived table it replaces ([`carry_sql`]), instead of
//! recomputing it from samples that are gone; the rows after the horizon are computed as
//! always. Kubernetes objects, events and Kueue records are kept (they are small, and runs
//! and queue waits read them whole).
//!
//! Whole months, because the monthly tables (chargeback, budgets, energy) add a month up from
//! all of its days: half a month of samples would change its figures.
//!
//! Expiry refuses a month the ledger has not accounted as it stands now. Each run records how
//! many `gpu_samples` rows of each month it read (`ledger/.inputs.json`); a month whose count
//! in the store differs (samples arrived later, or the ledger never ran) keeps its samples until
//! the ledger has run again. Samples that arrive for a month already expired are not accounted
//! (the ledger keeps that month's figures) and are removed by the next expiry.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::{Datelike, NaiveDate};
use datafusion::prelude::SessionContext;
use gpuledger_schemas::derived::DerivedTable;
use gpuledger_store::layout::{EXPIRED_MARKER, LEDGER_INPUTS};
use gpuledger_store::{CommitKind, DataFile, Snapshot, StoreLocation};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use gpuledger_engine::snapshot::SnapshotTable;

/// The raw tables whose old months expire: the DCGM samples.
pub const EXPIRING_TABLES: [&str; 2] = ["gpu_samples", "metric_samples"];

/// The shortest retention: a shorter one would remove the month being collected.
pub const MIN_RETENTION: Duration = Duration::from_secs(31 * 86_400);

/// Parses a retention (`400d`), refusing one shorter than [`MIN_RETENTION`].
pub fn parse_retention(text: &str) -> std::result::Result<Duration, String> {
    use gpuledger_schemas::units::{format_duration, parse_duration};
    let d = parse_duration(text)?;
    if d < MIN_RETENTION {
        return Err(format!("{text}: at least {} (a shorter one would remove the month being collected)", format_duration(MIN_RETENTION)));
    }
    Ok(d)
}

/// The first day of the month in which `today - retention` falls: samples of the days before it
/// have been kept at least `retention`, and only whole months go.
pub fn horizon(today: NaiveDate, retention: Duration) -> NaiveDate {
    let days = (retention.as_secs() / 86_400).min(365 * 1000) as i64;
    let oldest_kept = today - chrono::Duration::days(days);
    oldest_kept.with_day(1).unwrap_or(oldest_kept)
}

/// What the store records once samples expired.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
struct Marker {
    /// Samples of the days before this one (YYYY-MM-DD, a month's first day) are gone.
    samples_before: NaiveDate,
}

/// The horizon of the store's last expiry: no samples are kept before it. `None`: none expired.
pub async fn expired_before(location: &StoreLocation) -> Result<Option<NaiveDate>> {
    let Some(read) = crate::record::read_json::<Marker>(location, EXPIRED_MARKER).await? else { return Ok(None) };
    let marker = read.map_err(|e| Error::refused(location.display(EXPIRED_MARKER), format!("not a retention marker ({e}); it says which months' samples were removed, restore it from a backup or write {{\"samples_before\":\"YYYY-MM-01\"}}")))?;
    Ok(Some(marker.samples_before))
}

/// What a ledger run read, recorded beside its derived tables.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct LedgerInputs {
    /// Rows of `gpu_samples` per month (YYYY-MM).
    pub gpu_sample_rows: BTreeMap<String, u64>,
}

/// Counts the `gpu_samples` rows per month that `ctx` reads (before the sample steps narrow
/// the table to a day).
pub async fn count_inputs(ctx: &SessionContext) -> Result<LedgerInputs> {
    let sql = "SELECT substr(date, 1, 7) AS month, COUNT(*) AS n FROM gpu_samples GROUP BY substr(date, 1, 7)";
    let (_, batches) = gpuledger_engine::exec::collect(ctx, sql).await?;
    let months = gpuledger_engine::exec::strings(&batches, 0);
    let counts = gpuledger_engine::exec::strings(&batches, 1);
    let mut out = BTreeMap::new();
    for (m, n) in months.into_iter().zip(counts) {
        if let (Some(m), Some(n)) = (m, n.and_then(|n| n.parse::<u64>().ok())) {
            out.insert(m, n);
        }
    }
    Ok(LedgerInputs { gpu_sample_rows: out })
}

/// The rows per month of `gpu_samples` as its log counts them (`None`: a file of the log has no
/// count, as in a store converted from an older layout: count the rows instead). Free where a
/// count over the table reads every day's files.
pub fn inputs_from_log(snapshot: &Snapshot) -> Option<LedgerInputs> {
    let mut out: BTreeMap<String, u64> = BTreeMap::new();
    for f in &snapshot.files {
        let month = f.date.as_deref().map(|d| d.get(..7).unwrap_or(d)).unwrap_or("");
        *out.entry(month.to_string()).or_default() += f.rows?;
    }
    out.retain(|_, n| *n > 0);
    Some(LedgerInputs { gpu_sample_rows: out })
}

/// Records what a run read, after its derived tables are written.
pub async fn record_inputs(location: &StoreLocation, inputs: &LedgerInputs) -> Result<()> {
    let bytes = serde_json::to_vec_pretty(inputs).map_err(|e| Error::internal(format!("encoding the ledger's inputs: {e}")))?;
    location.write_whole(LEDGER_INPUTS, bytes).await?;
    Ok(())
}

async fn read_inputs(location: &StoreLocation) -> Result<Option<LedgerInputs>> {
    // An unreadable record is no record: expiry waits for the next ledger run.
    Ok(crate::record::read_json(location, LEDGER_INPUTS).await?.and_then(|r| r.ok()))
}

/// One table's part of an expiry.
#[derive(Debug, Clone, Default)]
pub struct TableExpiry {
    pub table: &'static str,
    pub files: usize,
    pub bytes: u64,
    pub rows: u64,
    /// The log version that no longer lists the files (`None`: not committed, a dry run).
    pub version: Option<u64>,
}

/// What [`expire`] did (or, on a dry run, would do).
#[derive(Debug, Clone)]
pub struct Expiry {
    pub before: NaiveDate,
    /// Months whose samples go, oldest first.
    pub months: Vec<String>,
    pub tables: Vec<TableExpiry>,
}

/// Removes the samples of the days before `before` (a month's first day) from every table of
/// [`EXPIRING_TABLES`] and records the horizon, so that ledger runs keep those months' figures.
/// Refuses, removing nothing, when a month to expire holds other `gpu_samples` than the last
/// ledger run read (see the module doc). `dry_run`: check and plan only.
pub async fn expire(location: &StoreLocation, before: NaiveDate, dry_run: bool) -> Result<Expiry> {
    if before.day() != 1 {
        return Err(Error::NoData(format!("samples expire in whole months: {before} is not a month's first day")));
    }
    let before_text = before.format("%Y-%m-%d").to_string();
    let already = expired_before(location).await?;
    let mut plans: Vec<(&'static str, Snapshot)> = Vec::new();
    for table in EXPIRING_TABLES {
        let snapshot = location.snapshot(table).await?;
        let files: Vec<DataFile> = snapshot.files.into_iter().filter(|f| f.date.as_deref().is_some_and(|d| d < before_text.as_str())).collect();
        plans.push((table, Snapshot { version: snapshot.version, files }));
    }

    // The months to expire, with the rows the store holds now.
    let samples = plans.iter().find(|(t, _)| *t == "gpu_samples").map(|(_, s)| s.clone()).unwrap_or_default();
    let now = count_files(location, &samples).await?;
    let months: std::collections::BTreeSet<String> = plans.iter().flat_map(|(_, s)| s.files.iter().filter_map(|f| f.date.as_deref().map(|d| d[..7].to_string()))).collect();
    let unaccounted = check_accounted(&now, read_inputs(location).await?.as_ref(), already);
    if !unaccounted.is_empty() {
        return Err(Error::NoData(format!(
            "samples of {} not expired: the ledger has not accounted them as the store holds them now ({}); run `gpuledger ledger --store {location}` first",
            unaccounted.iter().map(|(m, _)| m.as_str()).collect::<Vec<_>>().join(", "),
            unaccounted.iter().map(|(_, why)| why.as_str()).collect::<Vec<_>>().join("; "),
        )));
    }

    let mut tables = Vec::new();
    if !dry_run && plans.iter().any(|(_, s)| !s.files.is_empty()) && already.is_none_or(|a| a < before) {
        // The marker first: if the commits below fail, ledger runs keep figures that equal
        // what the samples still there would give (the check above saw to that).
        let bytes = serde_json::to_vec(&Marker { samples_before: before }).map_err(|e| Error::internal(format!("encoding the retention marker: {e}")))?;
        location.write_whole(EXPIRED_MARKER, bytes).await?;
    }
    for (table, plan) in plans {
        let mut done = TableExpiry {
            table,
            files: plan.files.len(),
            bytes: plan.files.iter().map(|f| f.size).sum(),
            rows: plan.files.iter().filter_map(|f| f.rows).sum(),
            version: None,
        };
        if !dry_run && !plan.files.is_empty() {
            done.version = Some(location.commit(table, plan.version, &[], &plan.files, CommitKind::Expire { before: before_text.clone() }).await?);
        }
        tables.push(done);
    }
    Ok(Expiry { before, months: months.into_iter().collect(), tables })
}

/// Rows per month of the `gpu_samples` files `snapshot` lists, counted from the files (a
/// converted store's log may not know its files' rows).
async fn count_files(location: &StoreLocation, snapshot: &Snapshot) -> Result<LedgerInputs> {
    let Some(table) = gpuledger_schemas::table("gpu_samples") else { return Err(Error::internal("no table gpu_samples in the schemas")) };
    if snapshot.files.is_empty() {
        return Ok(LedgerInputs::default());
    }
    let ctx = SessionContext::new_with_config(gpuledger_engine::session::session_config(None));
    gpuledger_engine::store::register_client(&ctx, location);
    ctx.register_table("gpu_samples", Arc::new(SnapshotTable::new(location, table, snapshot))).map_err(|source| Error::Register { table: "gpu_samples", source })?;
    count_inputs(&ctx).await
}

/// The months of `now` (rows the store holds) that the last ledger run (`recorded`) did not
/// read as they are, each with why. Months before `already` (expired earlier) are not checked:
/// their figures are kept whatever arrives later.
fn check_accounted(now: &LedgerInputs, recorded: Option<&LedgerInputs>, already: Option<NaiveDate>) -> Vec<(String, String)> {
    let already = already.map(|d| d.format("%Y-%m").to_string());
    let mut out = Vec::new();
    for (month, rows) in &now.gpu_sample_rows {
        if already.as_deref().is_some_and(|a| month.as_str() < a) {
            continue;
        }
        let why = match recorded.map(|r| r.gpu_sample_rows.get(month)) {
            None => format!("{month}: no ledger run has recorded what it read"),
            Some(None) => format!("{month}: the last ledger run read no samples of it, the store holds {rows}"),
            Some(Some(seen)) if seen != rows => format!("{month}: the last ledger run read {seen} samples, the store holds {rows}"),
            Some(Some(_)) => continue,
        };
        out.push((month.clone(), why));
    }
    out
}

/// The column that says which side of the horizon a derived row belongs to: `month` (the
/// monthly tables, and the hour tables' month), else `ended_at` (a run segment belongs to the
/// month it ended in, once ended). `None`: the table is computed from objects alone and is
/// recomputed whole.
pub fn carry_key(table: &DerivedTable) -> Option<&'static str> {
    ["month", "ended_at"].into_iter().find(|c| table.column(c).is_some())
}

/// The query that gives derived table `table` (its new rows registered under its name, its
/// previous file under `previous`, if there is one) with the rows before `before` taken from the
/// previous file. Columns are taken by name: a column the previous file lacks is null.
pub fn carry_sql(table: &DerivedTable, key: &str, previous: Option<(&str, &arrow::datatypes::Schema)>, before: NaiveDate) -> String {
    let quoted = |c: &str| format!("\"{c}\"");
    let columns: Vec<String> = table.columns.iter().map(|c| quoted(c.name)).collect();
    let (is_before, bound) = match key {
        "month" => ("<", format!("'{}'", before.format("%Y-%m"))),
        _ => ("<", format!("TIMESTAMP '{}T00:00:00Z'", before.format("%Y-%m-%d"))),
    };
    let k = quoted(key);
    let mut sql = format!("SELECT {} FROM {} WHERE {k} IS NULL OR NOT ({k} {is_before} {bound})", columns.join(", "), table.name);
    if let Some((name, schema)) = previous.filter(|(_, s)| s.field_with_name(key).is_ok()) {
        let old: Vec<String> = table
            .columns
            .iter()
            // A column the previous run wrote as another type (its Parquet strings read back as
            // views, say) is cast to the declared one: the union takes the wider type otherwise.
            .map(|c| match schema.field_with_name(c.name) {
                Ok(f) if *f.data_type() == c.ty.data_type() => quoted(c.name),
                Ok(_) => format!("arrow_cast({}, '{}') AS {}", quoted(c.name), c.ty.data_type(), quoted(c.name)),
                Err(_) => format!("arrow_cast(NULL, '{}') AS {}", c.ty.data_type(), quoted(c.name)),
            })
            .collect();
        sql.push_str(&format!(" UNION ALL SELECT {} FROM {name} WHERE {k} {is_before} {bound}", old.join(", ")));
    }
    sql
}

/// The `[store]` section of the configuration file: `retention = "400d"` keeps samples at least
/// that long (whole months; see [`horizon`]); absent or `"off"`, every sample is kept.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreSettings {
    pub retention: Option<Duration>,
}

impl StoreSettings {
    /// Checks `[store]` of `doc`, reporting each problem to it.
    pub fn check(doc: &gpuledger_config::Document<'_>) -> StoreSettings {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Raw {
            retention: Option<toml::Spanned<String>>,
        }
        let mut out = StoreSettings::default();
        let Some(raw) = doc.section::<Raw>("store") else { return out };
        if let Some(v) = raw.retention {
            let text = v.get_ref().trim();
            if text != "off" {
                match parse_retention(text) {
                    Ok(d) => out.retention = Some(d),
                    Err(reason) => doc.report(v.span(), "store.retention", reason),
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> NaiveDate {
        NaiveDate::parse_from_str(s, "%Y-%m-%d").unwrap()
    }

    #[test]
    fn the_horizon_is_the_first_day_of_the_month_of_the_oldest_day_kept() {
        let day = Duration::from_secs(86_400);
        // 90 days before 2026-12-04 is 2026-09-05: September is partly within retention.
        assert_eq!(horizon(d("2026-12-04"), day * 90), d("2026-09-01"));
        assert_eq!(horizon(d("2026-12-01"), day * 30), d("2026-11-01"));
        assert_eq!(horizon(d("2026-12-01"), day * 31), d("2026-10-01"));
        assert_eq!(horizon(d("2026-03-01"), day * 365), d("2025-03-01"));
        // Less than a day keeps today's month.
        assert_eq!(horizon(d("2026-12-04"), Duration::from_secs(3600)), d("2026-12-01"));
    }

    #[test]
    fn a_month_is_accounted_when_the_last_run_read_its_rows_as_they_are() {
        let inputs = |pairs: &[(&str, u64)]| LedgerInputs { gpu_sample_rows: pairs.iter().map(|(m, n)| (m.to_string(), *n)).collect() };
        let now = inputs(&[("2026-09", 5), ("2026-10", 7)]);
        assert!(check_accounted(&now, Some(&inputs(&[("2026-09", 5), ("2026-10", 7), ("2026-11", 1)])), None).is_empty());
        let late = check_accounted(&now, Some(&inputs(&[("2026-09", 5), ("2026-10", 6)])), None);
        assert_eq!(late, vec![("2026-10".to_string(), "2026-10: the last ledger run read 6 samples, the store holds 7".to_string())]);
        assert_eq!(check_accounted(&now, None, None).len(), 2);
        assert_eq!(check_accounted(&now, Some(&inputs(&[("2026-10", 7)])), None)[0].1, "2026-09: the last ledger run read no samples of it, the store holds 5");
        // Late samples of a month expired before are not checked: they are removed again.
        assert!(check_accounted(&now, Some(&inputs(&[("2026-10", 7)])), Some(d("2026-10-01"))).is_empty());
    }

    #[test]
    fn store_section() {
        let parse = |text: &str| {
            let doc = gpuledger_config::Document::parse(text, std::path::Path::new("g.toml"));
            let s = StoreSettings::check(&doc);
            doc.finish().map(|()| s).map_err(|e| e.to_string())
        };
        assert_eq!(parse("").unwrap().retention, None);
        assert_eq!(parse("[store]\nretention = \"400d\"\n").unwrap().retention, Some(Duration::from_secs(400 * 86_400)));
        assert_eq!(parse("[store]\nretention = \"off\"\n").unwrap().retention, None);
        let short = parse("[store]\nretention = \"7d\"\n").unwrap_err();
        assert!(short.contains("g.toml:2: store.retention") && short.contains("31d"), "{short}");
        let unknown = parse("[store]\nretain = \"400d\"\n").unwrap_err();
        assert!(unknown.contains("retain"), "{unknown}");
    }

    #[test]
    fn carried_tables_are_the_month_and_segment_tables() {
        use gpuledger_schemas::derived::derived_table;
        let key = |t: &str| carry_key(derived_table(t).unwrap());
        assert_eq!(key("chargeback_monthly"), Some("month"));
        assert_eq!(key("priced_state_hours"), Some("month"));
        assert_eq!(key("run_segments"), Some("ended_at"));
        assert_eq!(key("pod_runs"), None);
        assert_eq!(key("queue_waits"), None);
    }
}
