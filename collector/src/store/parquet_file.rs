//! Writing one Parquet file so that it appears whole or not at all.

use std::fs::{self, File};
use std::io::BufWriter;
use std::path::Path;

use arrow::array::RecordBatch;
use gpuledger_schemas::{META_SCHEMA_VERSION, META_TABLE, Table};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, Encoding, ZstdLevel};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::schema::types::ColumnPath;

use crate::error::{Error, Result};

/// Suffix of files being written; never matched by `*.parquet` globs.
const TMP_SUFFIX: &str = ".tmp";

/// Writer settings for a table: zstd, dictionaries for the many repeated strings, delta
/// encoding for the sorted timestamps, page statistics for pruning.
pub fn write_properties(table: &Table) -> WriterProperties {
    let mut b = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(3).unwrap_or_default()))
        .set_statistics_enabled(EnabledStatistics::Page)
        .set_max_row_group_row_count(Some(1 << 20))
        .set_key_value_metadata(Some(vec![
            KeyValue::new(META_SCHEMA_VERSION.to_string(), gpuledger_schemas::SCHEMA_VERSION.to_string()),
            KeyValue::new(META_TABLE.to_string(), table.name.to_string()),
        ]));
    let ts = ColumnPath::from(table.partition_column);
    b = b.set_column_dictionary_enabled(ts.clone(), false).set_column_encoding(ts, Encoding::DELTA_BINARY_PACKED);
    b.build()
}

/// `batch` as the bytes of one Parquet file (for object storage, where the PUT is atomic).
pub fn encode(table: &Table, batch: &RecordBatch) -> std::result::Result<Vec<u8>, parquet::errors::ParquetError> {
    let mut w = ArrowWriter::try_new(Vec::new(), batch.schema(), Some(write_properties(table)))?;
    w.write(batch)?;
    w.into_inner()
}

/// Writes `batch` to `path` through a temporary file, fsyncs it and renames it into place.
/// Returns the file's size.
pub fn write_atomically(table: &Table, path: &Path, batch: &RecordBatch) -> Result<u64> {
    let dir = path.parent().ok_or_else(|| Error::Store { path: path.to_path_buf(), reason: "no parent directory".into() })?;
    fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = dir.join(format!(".{name}{TMP_SUFFIX}"));
    let result = (|| {
        let file = File::create(&tmp).map_err(|e| Error::io(&tmp, e))?;
        let pq = |source| Error::Parquet { path: tmp.clone(), source };
        let mut w = ArrowWriter::try_new(BufWriter::with_capacity(1 << 20, file), batch.schema(), Some(write_properties(table))).map_err(pq)?;
        w.write(batch).map_err(pq)?;
        let file = w.into_inner().map_err(pq)?.into_inner().map_err(|e| Error::io(&tmp, e.into_error()))?;
        file.sync_all().map_err(|e| Error::io(&tmp, e))?;
        let len = file.metadata().map_err(|e| Error::io(&tmp, e))?.len();
        fs::rename(&tmp, path).map_err(|e| Error::io(path, e))?;
        // Make the rename itself durable.
        File::open(dir).and_then(|d| d.sync_all()).map_err(|e| Error::io(dir, e))?;
        Ok(len)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Removes `.<name>.tmp` files a crashed writer left behind (callers hold the store lock).
pub fn remove_stale_temporaries(root: &Path) -> Result<()> {
    let Ok(tables) = fs::read_dir(root) else { return Ok(()) };
    for t in tables.flatten() {
        if !t.path().is_dir() {
            continue;
        }
        let Ok(parts) = fs::read_dir(t.path()) else { continue };
        for p in parts.flatten() {
            let Ok(files) = fs::read_dir(p.path()) else { continue };
            for f in files.flatten() {
                let n = f.file_name();
                let n = n.to_string_lossy();
                if n.starts_with('.') && n.ends_with(TMP_SUFFIX) {
                    fs::remove_file(f.path()).map_err(|e| Error::io(f.path(), e))?;
                }
            }
        }
    }
    Ok(())
}
