//! One ledger run from start to end, as `gpuledger ledger`, `report` and `demo` need it: open
//! the engine's session over the store, run the accounting, write the derived tables, pick a
//! month. The binary only parses flags and prints what these return.

use gpuledger_store::StoreLocation;

use crate::Ledger;
use crate::accounting::{Accounting, DayProgress, RunOptions};
use crate::config::Config;
use crate::engine::{Engine, MemoryStats};
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
    let options = RunOptions { intermediates: engine.intermediates(store), ..options.clone() };
    let accounting = Accounting::run(ctx, store, config, &options, progress).await?;
    Ok((accounting, session.memory()))
}

/// Writes every derived table of a finished run to the store, each replaced whole.
pub async fn write_derived(accounting: &Accounting, store: &StoreLocation) -> Result<Vec<WrittenTable>> {
    let mut written = Vec::new();
    for (name, schema, batches) in accounting.derived_tables().await? {
        let rows = batches.iter().map(|b| b.num_rows()).sum();
        let bytes = crate::derived::write(store, name, schema, &batches).await?;
        written.push(WrittenTable { name, rows, bytes });
    }
    // After the tables: a record that is there says they hold what it says was read.
    crate::retention::record_inputs(store, &accounting.inputs).await?;
    Ok(written)
}

/// Bad annotation values the run ignored (DESIGN.md, "Accepted units"), one line each.
pub async fn bad_annotations(accounting: &Accounting) -> Result<Vec<String>> {
    lines(accounting, "SELECT kind || ' ' || namespace || '/' || name || ': ' || annotation || ' = \"' || value || '\" (' || reason || ')' FROM bad_annotations ORDER BY namespace, kind, name").await
}

/// ClusterQueues and ResourceFlavors that GPU Workloads waited for but the capture does not
/// hold (DESIGN.md "Stranded capacity": they select no node), one line each.
pub async fn missing_queue_objects(accounting: &Accounting) -> Result<Vec<String>> {
    lines(accounting, "SELECT kind || ' ' || name FROM missing_queue_objects ORDER BY kind, name").await
}

/// The first column of `sql`'s rows, as text lines.
async fn lines(accounting: &Accounting, sql: &str) -> Result<Vec<String>> {
    Ok(crate::accounting::strings(&accounting.query(sql).await?, 0).into_iter().flatten().collect())
}

/// `month` if the run has data for it, else the busiest month when none is named.
pub async fn pick_month(accounting: &Accounting, store: &StoreLocation, month: Option<&Month>) -> Result<Month> {
    let months = accounting.months().await?;
    match month {
        Some(m) if months.contains(m) => Ok(m.clone()),
        Some(m) => {
            let have = if months.is_empty() { "none".to_string() } else { months.iter().map(Month::as_str).collect::<Vec<_>>().join(", ") };
            Err(Error::NoData(format!("no data for month {m} in {store} (months with data: {have})")))
        }
        None => accounting.busiest_month().await?.ok_or_else(|| Error::NoData(format!("no GPU samples, overheads or units in {store}"))),
    }
}
