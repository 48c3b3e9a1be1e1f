//! The computing half of gpuledger: a DataFusion session over the store.
//!
//! ```text
//! store (Parquet, Hive partitions) -> ledger::Ledger (DataFusion) -> query results, reports
//! ```
//!
//! The ledger reads the store only through the tables `gpuledger-schemas` defines; it never
//! reads capture files or calls into the collector. Every table is registered under its name
//! with the `date` partition column, so `WHERE date = '2026-10-01'` reads one directory.

// Tests may unwrap: a panic is how they fail.
#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod accounting;
pub mod calendar;
pub mod config;
pub mod days;
pub mod derived;
pub mod monthly;
pub mod output;
pub mod plan;
pub mod publish;
pub mod queries;
pub mod report;
pub mod retention;
pub mod record;
pub mod run;
pub mod settings;
pub mod steps;
pub mod types;

// One error vocabulary for the engine and the accounting above it.
pub use gpuledger_engine::error;

use std::sync::Arc;

use arrow::record_batch::RecordBatch;
use datafusion::prelude::SessionContext;
use gpuledger_store::StoreLocation;
use gpuledger_schemas::{TABLES, Table};

pub use error::{Error, Result};

/// A query session over one store.
pub struct Ledger {
    ctx: SessionContext,
    location: StoreLocation,
    /// The run whose publish was under way when the derived tables were registered (None: no
    /// publish was): when that changes, they are registered again as one set.
    publishing: std::sync::Mutex<Option<String>>,
}

impl Ledger {
    /// Opens the store at `location` and registers every table (an empty one for a table
    /// never written, so queries over it return no rows instead of failing).
    pub async fn open(location: &StoreLocation) -> Result<Ledger> {
        Self::open_in(SessionContext::new_with_config(gpuledger_engine::session::session_config(None)), location).await
    }

    /// Like [`Ledger::open`], in a session the caller configured (a server sets its memory pool
    /// and how long file listings are cached, so that new files show up).
    pub async fn open_in(ctx: SessionContext, location: &StoreLocation) -> Result<Ledger> {
        let ctx = Self::store_session(ctx, location).await?;
        let publishing = publish::pending(location).await?.map(|p| p.run);
        derived::register(&ctx, location).await?;
        warn_if_derived_tables_outdated(location).await?;
        Ok(Ledger { ctx, location: location.clone(), publishing: std::sync::Mutex::new(publishing) })
    }

    /// Registers the store's tables in `ctx` (and, for object storage, the store's client).
    pub async fn store_session(ctx: SessionContext, location: &StoreLocation) -> Result<SessionContext> {
        location.check().await?;
        gpuledger_engine::store::register_client(&ctx, location);
        gpuledger_engine::udf::register(&ctx);
        for table in TABLES {
            register(&ctx, location, table).await?;
        }
        Ok(ctx)
    }

    /// Registers what changed in the store since the session was opened: a raw table whose
    /// log has a newer version (new rows were committed, or a compaction swapped its files)
    /// and derived tables a `gpuledger ledger` run wrote since. Between two refreshes every
    /// query reads the same snapshot. Returns how many tables were (re)registered.
    pub async fn refresh(&self) -> Result<usize> {
        let mut registered = 0;
        for table in TABLES {
            let current = self.ctx.table_provider(table.name).await.ok().and_then(|p| p.downcast_ref::<gpuledger_engine::snapshot::SnapshotTable>().map(|t| t.version()));
            let snapshot = self.location.snapshot(table.name).await?;
            if current.flatten() != snapshot.version {
                register_snapshot(&self.ctx, &self.location, table, &snapshot)?;
                registered += 1;
            }
        }
        let publishing = publish::pending(&self.location).await?.map(|p| p.run);
        let changed = *self.publishing.lock().unwrap_or_else(std::sync::PoisonError::into_inner) != publishing;
        registered += if changed { derived::reregister(&self.ctx, &self.location).await? } else { derived::register_missing(&self.ctx, &self.location).await? };
        *self.publishing.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = publishing;
        Ok(registered)
    }

    /// The version of each raw table registered in `ctx` (the snapshot it reads).
    pub async fn versions(ctx: &SessionContext) -> std::collections::BTreeMap<String, Option<u64>> {
        let mut out = std::collections::BTreeMap::new();
        for table in TABLES {
            let version = ctx.table_provider(table.name).await.ok().and_then(|p| p.downcast_ref::<gpuledger_engine::snapshot::SnapshotTable>().map(|t| t.version()));
            out.insert(table.name.to_string(), version.flatten());
        }
        out
    }

    pub fn context(&self) -> &SessionContext {
        &self.ctx
    }

    pub fn location(&self) -> &StoreLocation {
        &self.location
    }

    /// Runs one SQL statement and collects its result.
    pub async fn query(&self, sql: &str) -> Result<Vec<RecordBatch>> {
        let df = self.ctx.sql(sql).await.map_err(|source| Error::Query { sql: first_line(sql), source })?;
        let schema = std::sync::Arc::new(df.schema().as_arrow().clone());
        let batches = df.collect().await.map_err(|source| Error::Query { sql: first_line(sql), source })?;
        // No rows still has columns: a CSV reader wants the header, a table its heading.
        if batches.is_empty() {
            return Ok(vec![RecordBatch::new_empty(schema)]);
        }
        Ok(batches)
    }
}

/// Logs a warning when the store's derived tables were written by a gpuledger that stored the
/// priced hours as `gpu_state_hours` (now `priced_state_hours`, its view's name): queries and
/// reports over them fail or find nothing until `gpuledger ledger` writes them again.
async fn warn_if_derived_tables_outdated(location: &StoreLocation) -> Result<()> {
    use gpuledger_store::layout::{LEDGER_DIR, derived_rel};
    if !location.has_file(&derived_rel("priced_state_hours")).await? && location.has_file(&derived_rel("gpu_state_hours")).await? {
        tracing::warn!(
            store = %location,
            "the derived tables in {LEDGER_DIR}/ are from an older gpuledger version (gpu_state_hours.parquet is now priced_state_hours.parquet); re-run `gpuledger ledger`"
        );
    }
    Ok(())
}

pub(crate) use gpuledger_engine::exec::first_line;

async fn register(ctx: &SessionContext, location: &StoreLocation, table: &'static Table) -> Result<()> {
    let snapshot = location.snapshot(table.name).await?;
    register_snapshot(ctx, location, table, &snapshot)
}

/// Registers `table` as the files of `snapshot` (no files: an empty table with the same
/// columns, so queries over a table never written return no rows instead of failing).
fn register_snapshot(ctx: &SessionContext, location: &StoreLocation, table: &'static Table, snapshot: &gpuledger_store::Snapshot) -> Result<()> {
    // A refresh replaces the table's provider: the session keeps the newer version from then on.
    ctx.deregister_table(table.name).map_err(|source| Error::Register { table: table.name, source })?;
    ctx.register_table(table.name, Arc::new(gpuledger_engine::snapshot::SnapshotTable::new(location, table, snapshot))).map(|_| ()).map_err(|source| Error::Register { table: table.name, source })
}
