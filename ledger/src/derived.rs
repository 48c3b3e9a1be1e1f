//! The ledger's derived tables in the store: `<store>/ledger/<table>.parquet`.
//!
//! One file per table, so any Parquet reader finds them without gpuledger. A rerun replaces
//! each file atomically (a synced temporary file renamed over the old, or one PUT in object
//! storage), so a reader sees the old table or the new one, never half of one.

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
    let mut n = 0;
    for table in DERIVED_TABLES {
        if !ctx.table_exist(*table).unwrap_or(false) && register_one(ctx, location, table).await? {
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

async fn register_one(ctx: &SessionContext, location: &StoreLocation, table: &'static str) -> Result<bool> {
    Ok(register_as(ctx, location, table, table).await?.is_some())
}

/// Registers the stored derived table `table` under the name `name`; returns its schema, or
/// `None` when the store does not hold it.
pub async fn register_as(ctx: &SessionContext, location: &StoreLocation, table: &'static str, name: &str) -> Result<Option<SchemaRef>> {
    let rel = layout::derived_rel(table);
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
