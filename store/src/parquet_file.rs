//! How a store table becomes a Parquet file: one set of writer settings per table, and one
//! function that writes the file whole, locally or in object storage.

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use gpuledger_schemas::{META_SCHEMA_VERSION, META_TABLE, Table};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, Encoding, ZstdLevel};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::schema::types::ColumnPath;

use crate::atomic::AtomicFile;
use crate::error::{Error, Result};
use crate::location::StoreLocation;

/// Writer settings for a raw table: zstd, dictionaries for the many repeated strings, delta
/// encoding for the sorted timestamps, page statistics for pruning, and the table's name and
/// schema version in the key-value metadata.
pub fn write_properties(table: &Table) -> WriterProperties {
    let ts = ColumnPath::from(table.partition_column);
    WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(3).unwrap_or_default()))
        .set_statistics_enabled(EnabledStatistics::Page)
        .set_max_row_group_row_count(Some(1 << 20))
        .set_key_value_metadata(Some(metadata(table.name)))
        .set_column_dictionary_enabled(ts.clone(), false)
        .set_column_encoding(ts, Encoding::DELTA_BINARY_PACKED)
        .build()
}

/// Writer settings for a table the ledger derives (small, read whole): zstd and the metadata.
pub fn derived_properties(table: &str) -> WriterProperties {
    WriterProperties::builder().set_compression(Compression::ZSTD(ZstdLevel::default())).set_key_value_metadata(Some(metadata(table))).build()
}

fn metadata(table: &str) -> Vec<KeyValue> {
    vec![
        KeyValue::new(META_SCHEMA_VERSION.to_string(), gpuledger_schemas::SCHEMA_VERSION.to_string()),
        KeyValue::new(META_TABLE.to_string(), table.to_string()),
    ]
}

/// Writes `batches` as the store file `rel`, whole; returns its size. Locally the encoder
/// streams into the temporary file; for object storage the file is encoded in memory and PUT.
pub async fn write_parquet(location: &StoreLocation, rel: &str, schema: SchemaRef, batches: &[RecordBatch], props: WriterProperties) -> Result<u64> {
    let name = location.display(rel);
    let pq = |source| Error::Parquet { path: name.clone(), source };
    match location {
        StoreLocation::Local(root) => {
            let mut file = AtomicFile::create(&root.join(rel))?;
            let mut w = ArrowWriter::try_new(&mut file, schema, Some(props)).map_err(pq)?;
            for b in batches {
                w.write(b).map_err(pq)?;
            }
            w.close().map_err(pq)?;
            file.commit()
        }
        StoreLocation::Remote(_) => {
            let mut w = ArrowWriter::try_new(Vec::new(), schema, Some(props)).map_err(pq)?;
            for b in batches {
                w.write(b).map_err(pq)?;
            }
            let bytes = w.into_inner().map_err(pq)?;
            location.write_whole(rel, bytes).await
        }
    }
}

/// Writes one batch of a raw table as the store file `rel` (synchronous callers); returns its size.
pub fn write_table_file(store: &crate::BlockingStore, table: &Table, rel: &str, batch: &RecordBatch) -> Result<u64> {
    store.run(write_parquet(store.location(), rel, batch.schema(), std::slice::from_ref(batch), write_properties(table)))
}
