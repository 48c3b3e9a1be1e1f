//! Key hashes of stored rows: how the writer recognises a fact it already has.

use std::sync::Arc;

use arrow::array::{ArrayRef, BooleanArray, RecordBatch};
use arrow::row::{RowConverter, SortField};
use gpuledger_schemas::Table;
use rustc_hash::FxHashSet;

use super::ParquetSource;
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

    /// Keys held.
    pub fn held(&self) -> usize {
        self.hashes.len()
    }

    /// Adds the keys of the rows of one stored file.
    pub(crate) fn load(&mut self, table: &'static Table, source: ParquetSource) -> Result<()> {
        let name = source.name.clone();
        for batch in source.read_columns(table.key)? {
            let batch = batch.map_err(|source| Error::Arrow { table: table.name, source })?;
            // The projection keeps file order; pick the key columns in key order.
            let cols: Vec<ArrayRef> = table
                .key
                .iter()
                .map(|k| batch.column_by_name(k).cloned())
                .collect::<Option<_>>()
                .ok_or_else(|| Error::refused(name.clone(), "key column missing after projection"))?;
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
            .ok_or_else(|| Error::internal(format!("{}: key column not in schema", table.name)))?;
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
