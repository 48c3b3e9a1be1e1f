//! Key hashes of stored rows: how the writer recognises a fact it already has.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{ArrayRef, BooleanArray, RecordBatch};
use arrow::row::{RowConverter, SortField};
use gpuledger_schemas::Table;
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use rustc_hash::FxHashSet;

use crate::error::{Error, Result};

/// 128-bit hashes of the keys of stored rows. At 128 bits an accidental collision (which would
/// drop a row) is out of reach even for billions of rows.
pub struct KeySet {
    hashes: FxHashSet<u128>,
}

impl KeySet {
    /// A set that knows no stored rows.
    pub fn empty() -> KeySet {
        KeySet { hashes: FxHashSet::default() }
    }

    /// Reads the key columns of every Parquet file under `dirs`.
    pub fn load(table: &'static Table, dirs: &[PathBuf]) -> Result<KeySet> {
        let mut set = KeySet { hashes: FxHashSet::default() };
        for dir in dirs {
            for file in parquet_files(dir)? {
                set.load_file(table, &file)?;
            }
        }
        Ok(set)
    }

    fn load_file(&mut self, table: &'static Table, path: &Path) -> Result<()> {
        let pq = |source| Error::Parquet { path: path.to_path_buf(), source };
        let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
        let builder = ParquetRecordBatchReaderBuilder::try_new(file).map_err(pq)?;
        let file_schema = Arc::clone(builder.schema());
        let mut roots = Vec::new();
        for k in table.key {
            let i = file_schema.index_of(k).map_err(|_| Error::Store {
                path: path.to_path_buf(),
                reason: format!("file lacks key column {k} of table {}", table.name),
            })?;
            roots.push(i);
        }
        let mask = ProjectionMask::roots(builder.parquet_schema(), roots.iter().copied());
        let reader = builder.with_projection(mask).build().map_err(pq)?;
        for batch in reader {
            let batch = batch.map_err(|source| Error::Arrow { table: table.name, source })?;
            // The projection keeps file order; pick the key columns in key order.
            let cols: Vec<ArrayRef> = table
                .key
                .iter()
                .map(|k| batch.column_by_name(k).cloned())
                .collect::<Option<_>>()
                .ok_or_else(|| Error::Store { path: path.to_path_buf(), reason: "key column missing after projection".into() })?;
            for h in hash_rows(table, &cols)? {
                self.hashes.insert(h);
            }
        }
        Ok(())
    }

    /// Marks which rows of `batch` are new, remembering their keys (so a key repeated within
    /// the batch counts once).
    pub fn insert_new(&mut self, table: &'static Table, batch: &RecordBatch) -> Result<BooleanArray> {
        let cols: Vec<ArrayRef> = table
            .key
            .iter()
            .map(|k| table.index_of(k).map(|i| Arc::clone(batch.column(i))))
            .collect::<Option<_>>()
            .ok_or_else(|| Error::Store { path: PathBuf::new(), reason: format!("{}: key column not in schema", table.name) })?;
        let fresh: Vec<bool> = hash_rows(table, &cols)?.into_iter().map(|h| self.hashes.insert(h)).collect();
        Ok(BooleanArray::from(fresh))
    }
}

fn hash_rows(table: &'static Table, cols: &[ArrayRef]) -> Result<Vec<u128>> {
    let fields = cols.iter().map(|c| SortField::new(c.data_type().clone())).collect();
    let conv = RowConverter::new(fields).map_err(|source| Error::Arrow { table: table.name, source })?;
    let rows = conv.convert_columns(cols).map_err(|source| Error::Arrow { table: table.name, source })?;
    Ok(rows.iter().map(|r| xxhash_rust::xxh3::xxh3_128(r.as_ref())).collect())
}

/// Visible `.parquet` files of a directory, sorted (missing directory: none).
pub fn parquet_files(dir: &Path) -> Result<Vec<PathBuf>> {
    super::entries_named(dir, |name| !name.starts_with('.') && name.ends_with(".parquet"))
}
