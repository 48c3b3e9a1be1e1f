//! The ledger's derived tables in the store: `<store>/ledger/<table>.parquet`.
//!
//! One file per table, so any Parquet reader finds them without gpuledger. A rerun publishes
//! its tables as one set (`crate::publish`): each file is replaced atomically, and while a
//! publish is under way (or was interrupted) the tables here are read from its staged files,
//! so a gpuledger reader sees one run's tables, never a mix.

use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::listing::{ListingOptions, ListingTable, ListingTableConfig, ListingTableUrl};
use datafusion::catalog::TableProvider;
use datafusion::prelude::SessionContext;

use crate::plan::{DERIVED_TABLES, REPORTED_TABLES};
use crate::error::{Error, Result};
use gpuledger_store::{StoreLocation, layout};

/// Registers the derived tables present in the store under their names, and the report views
/// over them.
pub async fn register(ctx: &SessionContext, location: &StoreLocation) -> Result<()> {
    register_missing(ctx, location).await.map(|_| ())
}

/// Registers the derived tables present in the store but not yet in `ctx` (written since it
/// was opened); returns how many. A table already registered keeps reading its file, which a
/// later `gpuledger ledger` run replaces in place. Once the tables the report views read are all
/// there, the views (`queries/90_reports.sql`) are created, once: a view keeps the tables it was
/// planned over, and those keep reading their files.
pub async fn register_missing(ctx: &SessionContext, location: &StoreLocation) -> Result<usize> {
    let pending = crate::publish::pending(location).await?;
    let mut n = 0;
    for table in DERIVED_TABLES {
        if !ctx.table_exist(*table).unwrap_or(false) && register_from(ctx, location, table, table, pending.as_ref()).await?.is_some() {
            n += 1;
        }
    }
    let have = |t: &str| ctx.table_exist(t).unwrap_or(false);
    if !have(REPORT_VIEW) && REPORTED_TABLES.iter().all(|t| have(t)) {
        crate::steps::create_report_views(ctx).await?;
    }
    Ok(n)
}

/// A view of `queries/90_reports.sql` (which reads the derived tables of
/// [`REPORTED_TABLES`]).
const REPORT_VIEW: &str = "report_usage";

/// Registers every derived table and report view again, from the files that hold the
/// current set now (after a publish began or ended); returns how many tables.
pub async fn reregister(ctx: &SessionContext, location: &StoreLocation) -> Result<usize> {
    crate::steps::drop_views(ctx, "90_reports.sql")?;
    for table in DERIVED_TABLES {
        gpuledger_engine::exec::drop_table(ctx, table)?;
    }
    register_missing(ctx, location).await
}

/// Registers the stored derived table `table` under the name `name`; returns its schema, or
/// `None` when the store does not hold it.
pub async fn register_as(ctx: &SessionContext, location: &StoreLocation, table: &'static str, name: &str) -> Result<Option<SchemaRef>> {
    let pending = crate::publish::pending(location).await?;
    register_from(ctx, location, table, name, pending.as_ref()).await
}

/// [`register_as`], reading `table` from `pending`'s staged file while that is there.
async fn register_from(ctx: &SessionContext, location: &StoreLocation, table: &'static str, name: &str, pending: Option<&crate::publish::Publish>) -> Result<Option<SchemaRef>> {
    let staged = pending.filter(|p| p.tables.iter().any(|t| t == table)).map(|p| p.staged(table));
    let rel = match staged {
        Some(s) if location.has_file(&s).await? => s,
        _ => layout::derived_rel(table),
    };
    if !location.has_file(&rel).await? {
        return Ok(None);
    }
    let err = |source| Error::Register { table, source };
    let url = ListingTableUrl::parse(location.join(&rel)).map_err(err)?;
    let options = ListingOptions::new(Arc::new(ParquetFormat::default())).with_file_extension(".parquet");
    let config = ListingTableConfig::new(url).with_listing_options(options).infer_schema(&ctx.state()).await.map_err(err)?;
    let listing = ListingTable::try_new(config).map_err(err)?;
    let schema = listing.schema();
    ctx.register_table(name, Arc::new(listing)).map_err(err)?;
    Ok(Some(schema))
}
