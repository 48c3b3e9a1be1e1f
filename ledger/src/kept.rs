//! The tables a run keeps in memory (intermediate results read by later steps), and what they
//! hold counted against the session's memory pool.
//!
//! A `--memory-limit` is a limit on the run, not only on DataFusion's operators: a day's kept
//! `pod_samples` and `sample_spans` are a few hundred MB at 256 GPUs, and held outside the pool
//! they let the process grow that far past the limit. Each kept table holds a reservation of
//! its size for as long as it is registered; operators that need memory beyond what is left
//! spill, and a run whose kept tables alone do not fit fails naming them.

use std::sync::Arc;

use arrow::array::{ArrayRef, AsArray, RecordBatch, RecordBatchOptions, UInt32Array};
use arrow::datatypes::{DataType, SchemaRef};
use async_trait::async_trait;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::{Constraints, Statistics};
use datafusion::datasource::{MemTable, TableType};
use datafusion::error::Result as DfResult;
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryReservation};
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::SessionContext;

use crate::error::{Error, Result};

/// An in-memory table whose bytes are reserved in the memory pool of the session it was made for.
#[derive(Debug)]
pub(crate) struct KeptTable {
    rows: MemTable,
    _reservation: MemoryReservation,
}

/// `batches` as a table of `ctx`, copied compact and counted in its memory pool under
/// `kept table <name>`.
pub(crate) fn table(ctx: &SessionContext, name: &str, schema: SchemaRef, batches: Vec<RecordBatch>) -> Result<Arc<dyn TableProvider>> {
    let batches = compact(batches)?;
    let bytes: usize = batches.iter().map(RecordBatch::get_array_memory_size).sum();
    let rows = MemTable::try_new(schema, vec![batches]).map_err(|source| Error::Query { sql: format!("keep {name} in memory"), source })?;
    let reservation = MemoryConsumer::new(format!("kept table {name}")).register(&ctx.runtime_env().memory_pool);
    // Held whatever the limit: the rows are already in memory. Operators see less room.
    reservation.grow(bytes);
    Ok(Arc::new(KeptTable { rows, _reservation: reservation }))
}

/// Copies each batch into buffers of its own. A query's batches are often slices of one larger
/// batch (an aggregate emits all its groups at once and hands them out in slices), and
/// DataFusion counts a slice's memory as the whole of the buffers it points into: a kept table
/// of n such slices counted n times over. A day's `pod_samples` of 225 MB counted as 24 GB, and
/// under a memory limit a repartition over it reserved gigabytes it did not hold.
///
/// String views (what DataFusion reads Parquet strings as) need more than a `take`: it copies
/// the views but shares the data buffers they point into, so each compacted batch still
/// carried, and was counted as, every string of the batch it was cut from. Those columns are
/// garbage-collected instead: only the strings the batch's own rows use are copied.
fn compact(batches: Vec<RecordBatch>) -> Result<Vec<RecordBatch>> {
    batches.iter().map(compact_batch).collect()
}

fn compact_batch(batch: &RecordBatch) -> Result<RecordBatch> {
    let rows = UInt32Array::from_iter_values(0..batch.num_rows() as u32);
    let columns = batch
        .columns()
        .iter()
        .map(|column| -> std::result::Result<ArrayRef, arrow::error::ArrowError> {
            Ok(match column.data_type() {
                DataType::Utf8View => Arc::new(column.as_string_view().gc()),
                DataType::BinaryView => Arc::new(column.as_binary_view().gc()),
                _ => arrow::compute::take(column, &rows, None)?,
            })
        })
        .collect::<std::result::Result<Vec<_>, _>>()?;
    Ok(RecordBatch::try_new_with_options(batch.schema(), columns, &RecordBatchOptions::new().with_row_count(Some(batch.num_rows())))?)
}

#[async_trait]
impl TableProvider for KeptTable {
    fn schema(&self) -> SchemaRef {
        self.rows.schema()
    }
    fn constraints(&self) -> Option<&Constraints> {
        self.rows.constraints()
    }
    fn table_type(&self) -> TableType {
        self.rows.table_type()
    }
    async fn scan(&self, state: &dyn Session, projection: Option<&Vec<usize>>, filters: &[Expr], limit: Option<usize>) -> DfResult<Arc<dyn ExecutionPlan>> {
        self.rows.scan(state, projection, filters, limit).await
    }
    fn supports_filters_pushdown(&self, filters: &[&Expr]) -> DfResult<Vec<TableProviderFilterPushDown>> {
        self.rows.supports_filters_pushdown(filters)
    }
    fn statistics(&self) -> Option<Statistics> {
        self.rows.statistics()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int64Array;
    use arrow::datatypes::{DataType, Field, Schema};
    use datafusion::execution::memory_pool::{GreedyMemoryPool, MemoryPool};
    use datafusion::execution::runtime_env::RuntimeEnvBuilder;
    use datafusion::prelude::SessionConfig;

    fn numbers(n: i64) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, false)]));
        RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from_iter_values(0..n))]).unwrap()
    }

    #[test]
    fn a_compacted_slice_counts_its_own_rows_not_the_batch_it_was_cut_from() {
        let whole = numbers(100_000);
        let slices: Vec<RecordBatch> = (0..10).map(|i| whole.slice(i * 10_000, 10_000)).collect();
        let counted: usize = slices.iter().map(RecordBatch::get_array_memory_size).sum();
        assert!(counted >= 10 * 800_000, "each slice counts the whole buffer: {counted}");
        let compacted = compact(slices.clone()).unwrap();
        let after: usize = compacted.iter().map(RecordBatch::get_array_memory_size).sum();
        assert!(after < 1_000_000, "ten slices of 80 KB each: {after}");
        assert_eq!(compacted, slices, "same rows");
    }

    #[test]
    fn compacted_string_views_keep_only_their_own_strings() {
        use arrow::array::StringViewArray;
        // Strings longer than 12 bytes live in the data buffers the views point into.
        let names: StringViewArray = (0..100_000).map(|i| Some(format!("gpu-node-{i:08}-a100-80gb"))).collect();
        let schema = Arc::new(Schema::new(vec![Field::new("name", DataType::Utf8View, true)]));
        let whole = RecordBatch::try_new(schema, vec![Arc::new(names)]).unwrap();
        let slices: Vec<RecordBatch> = (0..10).map(|i| whole.slice(i * 10_000, 10_000)).collect();
        let before: usize = slices.iter().map(RecordBatch::get_array_memory_size).sum();
        let compacted = compact(slices.clone()).unwrap();
        let after: usize = compacted.iter().map(RecordBatch::get_array_memory_size).sum();
        // 100,000 views of 16 bytes plus 100,000 strings of 26 bytes, once.
        assert!(before > 5 * whole.get_array_memory_size(), "each slice counts every string: {before}");
        assert!(after < 2 * whole.get_array_memory_size(), "each string once: {after} vs {}", whole.get_array_memory_size());
        assert_eq!(compacted, slices, "same rows");
    }

    #[tokio::test]
    async fn a_kept_table_holds_its_size_in_the_pool_until_it_is_dropped() {
        let pool: Arc<dyn MemoryPool> = Arc::new(GreedyMemoryPool::new(100 << 20));
        let runtime = RuntimeEnvBuilder::new().with_memory_pool(pool.clone()).build_arc().unwrap();
        let ctx = SessionContext::new_with_config_rt(SessionConfig::new(), runtime);
        let b = numbers(50_000);
        let size = b.get_array_memory_size();
        let t = table(&ctx, "numbers", b.schema(), vec![b]).unwrap();
        assert_eq!(pool.reserved(), size);
        ctx.register_table("numbers", t).unwrap();
        let n = ctx.sql("SELECT SUM(n) FROM numbers").await.unwrap().collect().await.unwrap();
        assert_eq!(n[0].column(0).as_any().downcast_ref::<Int64Array>().unwrap().value(0), (0..50_000i64).sum::<i64>());
        ctx.deregister_table("numbers").unwrap();
        assert_eq!(pool.reserved(), 0, "released with the table");
    }
}
