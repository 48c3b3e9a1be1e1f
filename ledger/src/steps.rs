//! Running a step of the accounting: the statements of one SQL file, each creating a view, some
//! views kept as tables as soon as they are created (see `crate::plan`), where the run keeps
//! its tables.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use datafusion::execution::memory_pool::MemoryLimit;
use datafusion::prelude::SessionContext;
use gpuledger_engine::exec::{Timer, drop_table, first_line, replace_table};
use gpuledger_engine::files::{Keeping, parquet_table, write_on_engine};
use gpuledger_engine::kept;

use crate::days::Scratch;
use crate::error::{Error, Result};
use crate::queries::{created_view, query_file, split_statements};

/// Where a run keeps the tables it computes once and reads many times.
#[derive(Debug)]
pub enum Keeper {
    /// In this process: in memory, counted in the pool (past a share of a memory limit, in a
    /// file of the spill directory).
    Memory,
    /// As Parquet files in the run's scratch directory of the store, written by the engine: a
    /// cluster's executors do not share the client's memory.
    Files { scratch: Scratch, written: AtomicUsize },
}

impl Keeper {
    pub fn files(scratch: Scratch) -> Keeper {
        Keeper::Files { scratch, written: AtomicUsize::new(0) }
    }

    /// Whether tables are kept where a cluster's executors read them.
    pub fn on_cluster(&self) -> bool {
        matches!(self, Keeper::Files { .. })
    }

    /// Replaces the view `name` with a table holding the result of `sql`.
    pub async fn keep(&self, ctx: &SessionContext, name: &str, sql: &str) -> Result<()> {
        match self {
            Keeper::Memory => keep_in_memory(ctx, name, sql).await,
            Keeper::Files { scratch, written } => {
                let n = written.fetch_add(1, Ordering::Relaxed);
                let url = scratch.url(&format!("kept/{name}-{n}.parquet"));
                let err = |source| Error::Query { sql: first_line(sql), source };
                let df = ctx.sql(sql).await.map_err(err)?;
                let w = write_on_engine(ctx, df, &url, Keeping::Scratch).await?;
                replace_table(ctx, name, parquet_table(&[url], w.schema, true)?)
            }
        }
    }

    /// Keeps `batches` (a small table built here, the configuration) as `name`.
    pub async fn keep_batches(&self, ctx: &SessionContext, name: &str, batch: arrow::array::RecordBatch) -> Result<()> {
        match self {
            Keeper::Memory => replace_table(ctx, name, kept::table(ctx, name, batch.schema(), vec![batch])?),
            Keeper::Files { scratch, .. } => {
                let rel = scratch.rel(&format!("kept/{name}.parquet"));
                let schema = batch.schema();
                gpuledger_store::write_parquet(&scratch.location, &rel, schema.clone(), &[batch], gpuledger_store::derived_properties(name)).await?;
                replace_table(ctx, name, parquet_table(&[scratch.location.join(&rel)], schema, true)?)
            }
        }
    }
}

/// Keeps the result of `sql` in this process as `name`. Its columns are the plan's (a UNION's
/// branches may differ in nullability, and the first batch would otherwise decide).
async fn keep_in_memory(ctx: &SessionContext, name: &str, sql: &str) -> Result<()> {
    let limited = matches!(ctx.runtime_env().memory_pool.memory_limit(), MemoryLimit::Finite(_));
    let _timer = Timer::start(ctx, &first_line(sql));
    let err = |source| Error::Query { sql: first_line(sql), source };
    explain_if_asked(ctx, name, sql).await?;
    let df = ctx.sql(sql).await.map_err(err)?;
    let schema: arrow::datatypes::SchemaRef = Arc::new(df.schema().as_arrow().clone());
    if !limited {
        let batches = df.collect().await.map_err(err)?;
        let batches = batches.iter().map(|b| gpuledger_engine::exec::conform(b, &schema)).collect::<Result<Vec<_>>>()?;
        return replace_table(ctx, name, kept::table(ctx, name, schema, batches)?);
    }
    // Under a memory limit, streamed into the kept table: a large result goes to disk as it
    // comes, rather than being whole in memory first.
    let rows = df.execute_stream().await.map_err(err)?;
    replace_table(ctx, name, kept::stream(ctx, name, schema, rows).await?)
}

/// A profiling aid (docs/ledger-runs.md): where `GPULEDGER_EXPLAIN` names the view `name`,
/// prints the `EXPLAIN ANALYZE` of `sql` (the view is computed once more for it).
pub async fn explain_if_asked(ctx: &SessionContext, name: &str, sql: &str) -> Result<()> {
    // A comma-separated list of views, or `*` for every one.
    if !std::env::var("GPULEDGER_EXPLAIN").is_ok_and(|v| v == "*" || v.split(',').any(|v| v.trim() == name)) {
        return Ok(());
    }
    let err = |source| Error::Query { sql: first_line(sql), source };
    let plan = ctx.sql(&format!("EXPLAIN ANALYZE {sql}")).await.map_err(err)?.collect().await.map_err(err)?;
    eprintln!("EXPLAIN ANALYZE {name}\n{}", arrow::util::pretty::pretty_format_batches(&plan).map_err(|e| Error::internal(e.to_string()))?);
    Ok(())
}

/// Runs every statement of the SQL file `file` (each creates a view). Views named in `keeps`
/// are kept as tables as soon as created (with the filter that goes with them); views named in
/// `provided` are already there as tables and are not created again.
pub async fn exec_file(ctx: &SessionContext, file: &str, keeps: &[(&str, String)], provided: &[&str], keeper: &Keeper) -> Result<()> {
    let _timer = Timer::start(ctx, file);
    for statement in split_statements(query_file(file)?) {
        let view = created_view(&statement);
        if view.as_deref().is_some_and(|v| provided.contains(&v)) {
            continue;
        }
        // A view of the same name may exist as a table from an earlier unit: drop it first.
        if let Some(v) = &view {
            drop_table(ctx, v)?;
        }
        ctx.sql(&statement).await.map_err(|source| Error::Query { sql: format!("{file}: {}", first_line(&statement)), source })?;
        if let Some((name, filter)) = view.as_deref().and_then(|v| keeps.iter().find(|(k, _)| *k == v)) {
            keeper.keep(ctx, name, &format!("SELECT * FROM {name}{filter}")).await?;
        }
    }
    Ok(())
}

/// Runs the one statement of `file` that creates `view` (a view over tables already there).
pub async fn exec_view(ctx: &SessionContext, file: &str, view: &str) -> Result<()> {
    let statement = crate::queries::view_statement(file, view)?;
    drop_table(ctx, view)?;
    ctx.sql(&statement).await.map_err(|source| Error::Query { sql: format!("{file}: {}", first_line(&statement)), source })?;
    Ok(())
}

/// Creates the report views of `queries/90_reports.sql` in a session holding the derived tables.
pub async fn create_report_views(ctx: &SessionContext) -> Result<()> {
    exec_file(ctx, "90_reports.sql", &[], &[], &Keeper::Memory).await
}

/// Drops every view (and table kept in its place) that the SQL file `file` creates.
pub fn drop_views(ctx: &SessionContext, file: &str) -> Result<()> {
    for view in crate::queries::created_views(query_file(file)?) {
        drop_table(ctx, &view)?;
    }
    Ok(())
}
