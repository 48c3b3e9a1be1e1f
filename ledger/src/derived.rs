//! The ledger's derived tables in the store: `<store>/ledger/<table>.parquet`.
//!
//! One file per table, so any Parquet reader finds them without gpuledger. A rerun replaces
//! each file atomically: the new one is written under a hidden temporary name, fsynced and
//! renamed over the old, so a reader sees the old table or the new one, never half of one.

use std::fs;
use std::path::{Path, PathBuf};
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

/// The directory of derived tables inside a store.
pub const DIR: &str = "ledger";

pub fn path(store: &Path, table: &str) -> PathBuf {
    store.join(DIR).join(format!("{table}.parquet"))
}

/// Writes one derived table; returns the bytes written.
pub fn write(store: &Path, table: &str, schema: SchemaRef, batches: &[RecordBatch]) -> Result<u64> {
    let dir = store.join(DIR);
    let io = |p: &Path, e: std::io::Error| Error::Store { path: p.to_path_buf(), reason: e.to_string() };
    fs::create_dir_all(&dir).map_err(|e| io(&dir, e))?;
    let target = path(store, table);
    crate::atomic::write_file(
        &target,
        |file| {
            let props = WriterProperties::builder().set_compression(Compression::ZSTD(ZstdLevel::default())).build();
            let parquet_err = |e: parquet::errors::ParquetError| Error::Store { path: target.clone(), reason: e.to_string() };
            let mut writer = ArrowWriter::try_new(file, schema, Some(props)).map_err(parquet_err)?;
            for b in batches {
                writer.write(b).map_err(parquet_err)?;
            }
            writer.close().map_err(parquet_err)?;
            Ok(())
        },
        io,
    )?;
    Ok(fs::metadata(&target).map_err(|e| io(&target, e))?.len())
}

/// Registers the derived tables present in the store under their names.
pub async fn register(ctx: &SessionContext, store: &Path) -> Result<()> {
    for (table, _) in DERIVED_TABLES {
        register_one(ctx, store, table).await?;
    }
    Ok(())
}

/// Registers the derived tables present in the store but not yet in `ctx` (written since it
/// was opened); returns how many. A table already registered keeps reading its file, which a
/// later `gpuledger ledger` run replaces in place.
pub async fn register_missing(ctx: &SessionContext, store: &Path) -> Result<usize> {
    let mut n = 0;
    for (table, _) in DERIVED_TABLES {
        if !ctx.table_exist(*table).unwrap_or(false) && register_one(ctx, store, table).await? {
            n += 1;
        }
    }
    Ok(n)
}

async fn register_one(ctx: &SessionContext, store: &Path, table: &'static str) -> Result<bool> {
    let file = path(store, table);
    if !file.is_file() {
        return Ok(false);
    }
    let err = |source| Error::Register { table, source };
    let url = ListingTableUrl::parse(file.to_string_lossy().as_ref()).map_err(err)?;
    let options = ListingOptions::new(Arc::new(ParquetFormat::default())).with_file_extension(".parquet");
    let config = ListingTableConfig::new(url).with_listing_options(options).infer_schema(&ctx.state()).await.map_err(err)?;
    let listing = ListingTable::try_new(config).map_err(err)?;
    ctx.register_table(table, Arc::new(listing)).map_err(err)?;
    Ok(true)
}
