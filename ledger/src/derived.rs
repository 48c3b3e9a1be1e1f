//! The ledger's derived tables in the store: `<store>/ledger/<table>.parquet`.
//!
//! One file per table, so any Parquet reader finds them without gpuledger. A rerun replaces
//! each file atomically (a synced temporary file renamed over the old, or one PUT in object
//! storage), so a reader sees the old table or the new one, never half of one.

use std::path::PathBuf;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::listing::{ListingOptions, ListingTable, ListingTableConfig, ListingTableUrl};
use datafusion::prelude::SessionContext;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;

use crate::accounting::DERIVED_TABLES;
use crate::error::{Error, Result};
use crate::store;
use gpuledger_schemas::location::StoreLocation;

/// The directory of derived tables inside a store.
pub const DIR: &str = "ledger";

/// The store path of a derived table.
pub fn rel(table: &str) -> String {
    format!("{DIR}/{table}.parquet")
}

/// Writes one derived table; returns the bytes written.
pub async fn write(location: &StoreLocation, table: &str, schema: SchemaRef, batches: &[RecordBatch]) -> Result<u64> {
    write_parquet(location, &rel(table), schema, batches).await
}

/// Writes `batches` as the Parquet file `rel` of the store, whole; returns its size.
pub async fn write_parquet(location: &StoreLocation, rel: &str, schema: SchemaRef, batches: &[RecordBatch]) -> Result<u64> {
    let parquet_err = |e: parquet::errors::ParquetError| Error::Store { path: PathBuf::from(location.join(rel)), reason: e.to_string() };
    let props = WriterProperties::builder().set_compression(Compression::ZSTD(ZstdLevel::default())).build();
    let mut writer = ArrowWriter::try_new(Vec::new(), schema, Some(props)).map_err(parquet_err)?;
    for b in batches {
        writer.write(b).map_err(parquet_err)?;
    }
    let bytes = writer.into_inner().map_err(parquet_err)?;
    let len = bytes.len() as u64;
    store::write_whole(location, rel, bytes).await?;
    Ok(len)
}

/// Registers the derived tables present in the store under their names.
pub async fn register(ctx: &SessionContext, location: &StoreLocation) -> Result<()> {
    for table in DERIVED_TABLES {
        register_one(ctx, location, table).await?;
    }
    Ok(())
}

/// Registers the derived tables present in the store but not yet in `ctx` (written since it
/// was opened); returns how many. A table already registered keeps reading its file, which a
/// later `gpuledger ledger` run replaces in place.
pub async fn register_missing(ctx: &SessionContext, location: &StoreLocation) -> Result<usize> {
    let mut n = 0;
    for table in DERIVED_TABLES {
        if !ctx.table_exist(*table).unwrap_or(false) && register_one(ctx, location, table).await? {
            n += 1;
        }
    }
    Ok(n)
}

async fn register_one(ctx: &SessionContext, location: &StoreLocation, table: &'static str) -> Result<bool> {
    let rel = rel(table);
    if !store::has_file(location, &rel).await? {
        return Ok(false);
    }
    let err = |source| Error::Register { table, source };
    let url = ListingTableUrl::parse(location.join(&rel)).map_err(err)?;
    let options = ListingOptions::new(Arc::new(ParquetFormat::default())).with_file_extension(".parquet");
    let config = ListingTableConfig::new(url).with_listing_options(options).infer_schema(&ctx.state()).await.map_err(err)?;
    let listing = ListingTable::try_new(config).map_err(err)?;
    ctx.register_table(table, Arc::new(listing)).map_err(err)?;
    Ok(true)
}
