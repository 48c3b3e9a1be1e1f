//! One ledger run from start to end, as `gpuledger ledger`, `report` and `demo` need it: open
//! the engine's session over the store, run the accounting, write the derived tables, pick a
//! month. The binary only parses flags and prints what these return.

use gpuledger_store::StoreLocation;

use crate::Ledger;
use crate::accounting::{Accounting, DayProgress, RunOptions, Workers};
use crate::config::Config;
use gpuledger_engine::session::{Engine, MemoryStats};
use crate::error::{Error, Result};
use crate::types::Month;

/// A derived table a run wrote.
#[derive(Debug, Clone)]
pub struct WrittenTable {
    pub name: &'static str,
    pub rows: usize,
    pub bytes: u64,
}

/// Runs the accounting over `store` on `engine`, telling `progress` about each day; also
/// returns what the in-process memory pool saw.
pub async fn account(store: &StoreLocation, config: &Config, options: &RunOptions, engine: &Engine, progress: DayProgress<'_>) -> Result<(Accounting, Option<MemoryStats>)> {
    let session = engine.session().await?;
    let ctx = Ledger::store_session(session.ctx.clone(), store).await?;
    let (workers, unit_rows) = match engine {
        Engine::InProcess { memory_limit, spill_dir } => (spill_dir.clone().map_or(Workers::InProcess, Workers::InProcessAt), memory_limit.map(unit_rows)),
        Engine::Ballista { .. } => (Workers::Cluster, None),
    };
    let options = RunOptions { workers, unit_rows: options.unit_rows.or(unit_rows), ..options.clone() };
    let accounting = Accounting::run(ctx, store, config, &options, progress).await?;
    Ok((accounting, session.memory()))
}

/// How many `gpu_samples` rows one unit of the day plan may read under a memory limit of
/// `limit` bytes: a unit's working set in DataFusion's pool, measured at its peak, is about
/// [`UNIT_ROW_BYTES`] a row, and a unit may fill the pool (`pool_size`).
pub fn unit_rows(limit: usize) -> u64 {
    (gpuledger_engine::session::pool_size(limit) as u64 / UNIT_ROW_BYTES).max(1)
}

/// The memory one `gpu_samples` row of a unit takes at the unit's peak (see [`unit_rows`]).
pub const UNIT_ROW_BYTES: u64 = 2048;

/// Writes every derived table of a finished run to the store and publishes them as one set
/// (`crate::publish`: a reader sees this run's tables or the previous run's, never a mix),
/// then the records of what the run read (`crate::record`, `crate::retention`). `config` and
/// `idle_policy` are what the run was given.
pub async fn write_derived(accounting: &Accounting, store: &StoreLocation, config: &Config, idle_policy: Option<crate::config::IdlePolicy>) -> Result<Vec<WrittenTable>> {
    let run = gpuledger_store::layout::run_id();
    // What an earlier run left half done goes first: its set is published, or its staging removed.
    let recovered = crate::publish::recover(store).await?;
    if let Some(r) = &recovered.rolled_forward {
        tracing::warn!(run = %r, "finished publishing the tables of a ledger run that stopped while publishing them");
    }
    // While the tables are being replaced, no record vouches for them.
    crate::record::remove(store).await?;
    let mut written = Vec::new();
    for name in crate::plan::DERIVED_TABLES {
        let rel = crate::publish::staged_file(&run, name);
        let w = accounting.write_derived(store, name, &rel).await?;
        written.push(WrittenTable { name, rows: w.rows as usize, bytes: 0 });
        crate::publish::crash_point("staged-one");
    }
    // One listing for every table's size.
    let sizes = store.list_sizes(&gpuledger_store::layout::staged_rel(&run)).await?;
    for t in &mut written {
        let file = format!("{}.parquet", t.name);
        t.bytes = sizes.iter().find(|(n, _)| *n == file).map_or(0, |(_, b)| *b);
    }
    crate::publish::publish(store, &run, crate::plan::DERIVED_TABLES).await?;
    // After the tables: a record that is there says they hold what it says was read.
    crate::retention::record_inputs(store, &accounting.inputs).await?;
    let record = crate::record::record(config, idle_policy, accounting.versions.clone(), accounting.days.len())?;
    crate::record::write(store, &record).await?;
    Ok(written)
}

/// Bad annotation values the run ignored (docs/accounting.md, "Accepted units"), one line each.
pub async fn bad_annotations(accounting: &Accounting) -> Result<Vec<String>> {
    lines(accounting, "SELECT kind || ' ' || namespace || '/' || name || ': ' || annotation || ' = \"' || value || '\" (' || reason || ')' FROM bad_annotations ORDER BY namespace, kind, name").await
}

/// ClusterQueues and ResourceFlavors that GPU Workloads waited for but the capture does not
/// hold (docs/accounting.md "Stranded capacity": they select no node), one line each.
pub async fn missing_queue_objects(accounting: &Accounting) -> Result<Vec<String>> {
    lines(accounting, "SELECT kind || ' ' || name FROM missing_queue_objects ORDER BY kind, name").await
}

/// Samples that name a pod and a ResourceClaim the claim was not reserved for at the time
/// (docs/accounting.md "DRA": the pod labels count), one line per GPU, pod and claim, naming the
/// GPU and the first and last such instant; the earliest first.
pub async fn dra_mismatches(accounting: &Accounting) -> Result<Vec<String>> {
    let utc = |t: &str| format!("to_char(to_timestamp_millis({t}), '%Y-%m-%dT%H:%M:%SZ')");
    let sql = format!(
        "SELECT 'GPU ' || uuid || COALESCE(' MIG instance ' || CAST(mig_instance AS VARCHAR), '') || ' on ' || hostname
                || ': ' || CAST(SUM(samples) AS VARCHAR) || ' sample(s) from ' || {first} || ' to ' || {last}
                || ' name pod ' || namespace || '/' || pod || ' and claim ' || claim_namespace || '/' || claim
                || ', which was not reserved for that pod then (the pod labels count)'
         FROM day_dra_mismatches
         GROUP BY hostname, uuid, mig_instance, namespace, pod, claim_namespace, claim
         ORDER BY MIN(first_t), hostname, uuid, mig_instance, namespace, pod, claim_namespace, claim",
        first = utc("MIN(first_t)"),
        last = utc("MAX(last_t)"),
    );
    lines(accounting, &sql).await
}

/// The first column of `sql`'s rows, as text lines.
async fn lines(accounting: &Accounting, sql: &str) -> Result<Vec<String>> {
    Ok(gpuledger_engine::exec::strings(&accounting.query(sql).await?, 0).into_iter().flatten().collect())
}

/// `month` if the ledger in `ctx` (a run's session, or the stored tables) has data for it, else
/// the busiest month when none is named.
pub async fn pick_month(ctx: &datafusion::prelude::SessionContext, store: &StoreLocation, month: Option<&Month>) -> Result<Month> {
    let (months, busiest) = crate::monthly::stored_months(ctx).await?;
    match month {
        Some(m) if months.contains(m) => Ok(m.clone()),
        Some(m) => {
            let have = if months.is_empty() { "none".to_string() } else { months.iter().map(Month::as_str).collect::<Vec<_>>().join(", ") };
            Err(Error::NoData(format!("no data for month {m} in {store} (months with data: {have})")))
        }
        None => busiest.ok_or_else(|| Error::NoData(format!("no GPU samples, overheads or units in {store}"))),
    }
}
