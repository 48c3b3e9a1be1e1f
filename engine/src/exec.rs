//! Running one statement in a session: collecting its rows, registering a table in place of a
//! view, and timing each step (with the process's memory beside it).

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{RecordBatch, StringArray};
use arrow::datatypes::{DataType, SchemaRef};
use datafusion::catalog::TableProvider;
use datafusion::execution::memory_pool::MemoryPool;
use datafusion::prelude::SessionContext;

use crate::error::{Error, Result};

/// The first line of a statement, shortened, to name it in an error.
pub fn first_line(sql: &str) -> String {
    let line = sql.trim().lines().next().unwrap_or_default();
    if line.len() > 80 { format!("{}...", &line[..line.floor_char_boundary(80)]) } else { line.to_string() }
}

/// Runs `sql` and collects its rows, with the schema the rows have (execution may settle
/// nullability differently from planning: the batches have the last word).
pub async fn collect(ctx: &SessionContext, sql: &str) -> Result<(SchemaRef, Vec<RecordBatch>)> {
    let _timer = Timer::start(ctx, &first_line(sql));
    let err = |source| Error::Query { sql: first_line(sql), source };
    let df = ctx.sql(sql).await.map_err(err)?;
    let planned: SchemaRef = Arc::new(df.schema().as_arrow().clone());
    let batches = df.collect().await.map_err(err)?;
    let schema = batches.first().map(|b| b.schema()).unwrap_or(planned);
    Ok((schema, batches))
}

/// Runs `sql` with its parameter `$1` bound to `month` (`YYYY-MM`, when given) and collects it.
pub async fn query_month(ctx: &SessionContext, sql: &str, month: Option<&str>) -> Result<Vec<RecordBatch>> {
    let err = |source| Error::Query { sql: first_line(sql), source };
    let df = ctx.sql(sql).await.map_err(err)?;
    let df = match month {
        Some(m) => df.with_param_values(vec![datafusion::scalar::ScalarValue::Utf8(Some(m.to_string()))]).map_err(err)?,
        None => df,
    };
    df.collect().await.map_err(err)
}

/// `batch` with the columns of `schema`: the plan's, which a batch may declare otherwise (a
/// UNION's branches differ in nullability, and execution may mark a column nullable that the
/// plan proved has no nulls). Fails only where a column the schema says has no nulls has some.
pub fn conform(batch: &RecordBatch, schema: &SchemaRef) -> Result<RecordBatch> {
    if batch.schema_ref() == schema {
        return Ok(batch.clone());
    }
    Ok(RecordBatch::try_new_with_options(schema.clone(), batch.columns().to_vec(), &arrow::array::RecordBatchOptions::new().with_row_count(Some(batch.num_rows())))?)
}

/// Registers `table` as `name`, replacing whatever had that name (a view, an older table).
pub fn replace_table(ctx: &SessionContext, name: &str, table: Arc<dyn TableProvider>) -> Result<()> {
    let err = |source| Error::Query { sql: format!("register {name}"), source };
    ctx.deregister_table(name).map_err(err)?;
    ctx.register_table(name, table).map_err(err)?;
    Ok(())
}

/// Drops the table or view `name` (a missing one is fine).
pub fn drop_table(ctx: &SessionContext, name: &str) -> Result<()> {
    ctx.deregister_table(name).map(|_| ()).map_err(|source| Error::Query { sql: format!("drop {name}"), source })
}

/// The log target of the step timings (`GPULEDGER_LOG=gpuledger_ledger::timings=debug`): the
/// name users know from before the engine had a crate of its own.
pub const TIMINGS: &str = "gpuledger_ledger::timings";

/// Each step's wall time, as a `debug` event of target [`TIMINGS`], with the process's
/// resident memory and the pool's reservation when it ended.
pub struct Timer {
    what: Option<(String, std::time::Instant, Arc<dyn MemoryPool>)>,
}

impl Timer {
    pub fn start(ctx: &SessionContext, what: &str) -> Timer {
        let on = tracing::enabled!(target: TIMINGS, tracing::Level::DEBUG);
        Timer { what: on.then(|| (what.to_string(), std::time::Instant::now(), Arc::clone(&ctx.runtime_env().memory_pool))) }
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        if let Some((what, started, pool)) = &self.what {
            let m = ProcessMemory::now();
            let pool_mib = pool.reserved() >> 20;
            tracing::debug!(target: TIMINGS, step = %what, seconds = started.elapsed().as_secs_f64(), rss_mib = m.rss >> 20, peak_rss_mib = m.peak >> 20, pool_mib, "step done");
        }
    }
}

/// The process's resident memory now and at its peak so far, in bytes (Linux's
/// `/proc/self/status`; zero elsewhere).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcessMemory {
    pub rss: u64,
    pub peak: u64,
}

impl ProcessMemory {
    pub fn now() -> ProcessMemory {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let kib = |key: &str| status.lines().find_map(|l| l.strip_prefix(key)?.split_whitespace().next()?.parse::<u64>().ok()).unwrap_or(0);
        ProcessMemory { rss: kib("VmRSS:") << 10, peak: kib("VmHWM:") << 10 }
    }
}

/// Column `i` of `batches` as strings (any string-like or numeric type, via a cast).
pub fn strings(batches: &[RecordBatch], i: usize) -> Vec<Option<String>> {
    let mut out = Vec::new();
    for b in batches {
        let Ok(a) = arrow::compute::cast(b.column(i), &DataType::Utf8) else { continue };
        if let Some(s) = a.as_any().downcast_ref::<StringArray>() {
            out.extend(s.iter().map(|v| v.map(str::to_string)));
        }
    }
    out
}

/// Rows of `batches` as maps from column name to JSON value (reports, the HTTP API).
pub fn rows(batches: &[RecordBatch]) -> Result<Vec<BTreeMap<String, serde_json::Value>>> {
    let mut buf = Vec::new();
    {
        let mut w = arrow::json::ArrayWriter::new(&mut buf);
        let refs: Vec<&RecordBatch> = batches.iter().collect();
        w.write_batches(&refs)?;
        w.finish()?;
    }
    if buf.is_empty() {
        return Ok(Vec::new());
    }
    serde_json::from_slice(&buf).map_err(|e| Error::Output(arrow::error::ArrowError::JsonError(e.to_string())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_line_names_a_statement() {
        assert_eq!(first_line("\n  SELECT 1\nFROM t"), "SELECT 1");
        let long = format!("SELECT {}", "x".repeat(100));
        assert_eq!(first_line(&long).len(), 83);
    }

    #[test]
    fn this_process_has_memory() {
        let m = ProcessMemory::now();
        if cfg!(target_os = "linux") {
            assert!(m.rss > 0 && m.peak >= m.rss, "{m:?}");
        }
    }
}
