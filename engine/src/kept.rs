//! The tables a run keeps (intermediate results read by later steps), and what they hold
//! counted against the session's memory pool.
//!
//! A `--memory-limit` is a limit on the run, not only on DataFusion's operators: a day's kept
//! `pod_samples` and `sample_spans` are a few hundred MB at 256 GPUs, and held outside the pool
//! they let the process grow that far past the limit. Each kept table held in memory reserves
//! its size for as long as it is registered; operators that need memory beyond what is left
//! spill.
//!
//! Under a limit, kept tables hold at most a quarter of it in memory. A table that would take
//! them past that is written to a Parquet file in the spill directory and read from there: at
//! 1,024 GPUs a day's `pod_samples` and `sample_spans` are about 900 MB each, and in memory they
//! alone would fill a 2 GiB limit and leave the operators nothing.

use std::sync::Arc;

use arrow::array::{ArrayRef, AsArray, RecordBatch, RecordBatchOptions, UInt32Array};
use arrow::datatypes::{DataType, SchemaRef};
use async_trait::async_trait;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::{Constraints, Statistics};
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::listing::{ListingOptions, ListingTable, ListingTableConfig, ListingTableUrl};
use datafusion::datasource::{MemTable, TableType};
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::SpillFile;
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryLimit, MemoryReservation};
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::execution::SendableRecordBatchStream;
use datafusion::physical_plan::ExecutionPlan;
use futures::StreamExt;
use datafusion::prelude::SessionContext;

use crate::error::{Error, Result};

/// A kept table: its rows, and what keeps them (a reservation of their size in the pool, or the
/// spill file they were written to, removed when the table is dropped).
#[derive(Debug)]
pub struct KeptTable {
    rows: Arc<dyn TableProvider>,
    /// Held for its drop: the reservation is released, or the file removed, with the table.
    _held: Held,
}

enum Held {
    Memory(MemoryReservation),
    Disk(Arc<dyn SpillFile>),
}

impl std::fmt::Debug for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Held::Memory(r) => write!(f, "{} bytes in memory", r.size()),
            Held::Disk(file) => write!(f, "on disk at {:?}", file.path()),
        }
    }
}

/// `batches` as a table of `ctx` with the columns of `schema` (each batch's columns must fit
/// it): copied compact and counted in its memory pool under `kept table <name>`, or, under a
/// memory limit when kept tables would hold more than [`IN_MEMORY_SHARE`] of it, written to a
/// file of its spill directory.
pub fn table(ctx: &SessionContext, name: &str, schema: SchemaRef, batches: Vec<RecordBatch>) -> Result<Arc<dyn TableProvider>> {
    let mut keeping = Keeping::new(ctx, name, schema);
    for b in &batches {
        keeping.push(b)?;
    }
    keeping.finish()
}

/// The result of `stream` as a table of `ctx`, kept as [`table`] keeps batches. Under a memory
/// limit the batches go to the file as they come once they would pass the kept tables' share,
/// so a large result is never whole in memory.
pub async fn stream(ctx: &SessionContext, name: &str, schema: SchemaRef, mut rows: SendableRecordBatchStream) -> Result<Arc<dyn TableProvider>> {
    let mut keeping = Keeping::new(ctx, name, schema);
    while let Some(b) = rows.next().await {
        let b = b.map_err(|source| Error::Query { sql: format!("SELECT * FROM {name}"), source })?;
        keeping.push(&b)?;
    }
    keeping.finish()
}

/// A kept table being filled: in memory while it fits, then in its file.
struct Keeping<'a> {
    ctx: &'a SessionContext,
    name: &'a str,
    schema: SchemaRef,
    held: Vec<RecordBatch>,
    bytes: usize,
    /// What kept tables may still hold in memory (None: no limit).
    room: Option<usize>,
    file: Option<(Arc<dyn SpillFile>, ArrowWriter<std::fs::File>)>,
}

impl<'a> Keeping<'a> {
    fn new(ctx: &'a SessionContext, name: &'a str, schema: SchemaRef) -> Self {
        let pool = &ctx.runtime_env().memory_pool;
        // Between steps nothing but kept tables holds the pool.
        let room = match pool.memory_limit() {
            MemoryLimit::Finite(limit) => Some((limit / IN_MEMORY_SHARE).saturating_sub(pool.reserved())),
            _ => None,
        };
        Keeping { ctx, name, schema, held: Vec::new(), bytes: 0, room, file: None }
    }

    fn push(&mut self, batch: &RecordBatch) -> Result<()> {
        let batch = compact_batch(&crate::exec::conform(batch, &self.schema)?)?;
        if let Some((_, writer)) = &mut self.file {
            return writer.write(&batch).map_err(|e| self.failed(e.into()));
        }
        self.bytes += batch.get_array_memory_size();
        self.held.push(batch);
        if self.room.is_some_and(|room| self.bytes > room) {
            let mut writer = self.open()?;
            for b in std::mem::take(&mut self.held) {
                writer.1.write(&b).map_err(|e| self.failed(e.into()))?;
            }
            self.file = Some(writer);
        }
        Ok(())
    }

    fn open(&self) -> Result<(Arc<dyn SpillFile>, ArrowWriter<std::fs::File>)> {
        let file = self.ctx.runtime_env().disk_manager.create_tmp_file(&format!("kept table {}", self.name)).map_err(|e| self.failed(e))?;
        let path = file.path().ok_or_else(|| Error::internal(format!("the spill file for {} has no local path", self.name)))?;
        let out = std::fs::File::create(path).map_err(|e| self.failed(DataFusionError::IoError(e)))?;
        // Fast to write and read back: no compression; dictionaries take the repeated strings.
        let props = WriterProperties::builder().set_compression(Compression::UNCOMPRESSED).build();
        let writer = ArrowWriter::try_new(out, self.schema.clone(), Some(props)).map_err(|e| self.failed(e.into()))?;
        Ok((file, writer))
    }

    fn failed(&self, source: DataFusionError) -> Error {
        disk_error(self.name, source)
    }

    fn finish(self) -> Result<Arc<dyn TableProvider>> {
        let Keeping { ctx, name, schema, held, bytes, file, .. } = self;
        let Some((file, writer)) = file else {
            let rows = MemTable::try_new(schema, vec![held]).map_err(|source| Error::Query { sql: format!("keep {name} in memory"), source })?;
            let reservation = MemoryConsumer::new(format!("kept table {name}")).register(&ctx.runtime_env().memory_pool);
            // Held whatever the limit: the rows are already in memory. Operators see less room.
            reservation.grow(bytes);
            return Ok(Arc::new(KeptTable { rows: Arc::new(rows), _held: Held::Memory(reservation) }));
        };
        let failed = |source| disk_error(name, source);
        let written = writer.close().map_err(|e| failed(e.into()))?;
        let path = file.path().map(|p| p.to_string_lossy().into_owned()).unwrap_or_default();
        tracing::debug!(target: "gpuledger_ledger::memory", table = name, rows = written.file_metadata().num_rows(), file = %path, "kept on disk");
        let url = ListingTableUrl::parse(&path).map_err(failed)?;
        let options = ListingOptions::new(Arc::new(ParquetFormat::default())).with_file_extension("");
        let rows = ListingTable::try_new(ListingTableConfig::new(url).with_listing_options(options).with_schema(schema)).map_err(failed)?;
        Ok(Arc::new(KeptTable { rows: Arc::new(rows), _held: Held::Disk(file) }))
    }
}

/// Why keeping `name` in its spill file failed.
fn disk_error(name: &str, source: DataFusionError) -> Error {
    Error::Query { sql: format!("keep {name} on disk (past the kept tables' share of the memory limit)"), source }
}

/// Kept tables may hold one part in this many of a memory limit in memory; the rest is left to
/// the operators (half of it to sorts, which spill past that: see `crate::pool`).
pub const IN_MEMORY_SHARE: usize = 4;

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
pub fn compact_batch(batch: &RecordBatch) -> Result<RecordBatch> {
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

    fn compact(batches: Vec<RecordBatch>) -> Result<Vec<RecordBatch>> {
        batches.iter().map(compact_batch).collect()
    }
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

    #[tokio::test]
    async fn past_a_quarter_of_the_limit_kept_tables_go_to_disk_and_read_the_same() {
        let spill = tempfile::tempdir().unwrap();
        let b = numbers(50_000); // 400 KB
        let size = b.get_array_memory_size();
        let pool: Arc<dyn MemoryPool> = Arc::new(GreedyMemoryPool::new(6 * size));
        let runtime = RuntimeEnvBuilder::new().with_memory_pool(pool.clone()).with_temp_file_path(spill.path()).build_arc().unwrap();
        let ctx = SessionContext::new_with_config_rt(SessionConfig::new(), runtime);
        let files = || walk(spill.path());
        // The first fits in a quarter of the limit (1.5 of them); the second would not.
        ctx.register_table("first", table(&ctx, "first", b.schema(), vec![b.clone()]).unwrap()).unwrap();
        assert_eq!((pool.reserved(), files().len()), (size, 0), "in memory");
        ctx.register_table("second", table(&ctx, "second", b.schema(), vec![b.slice(0, 20_000), b.slice(20_000, 30_000)]).unwrap()).unwrap();
        assert_eq!(pool.reserved(), size, "the second holds no memory");
        assert_eq!(files().len(), 1, "it is a file of the spill directory");
        let on_disk = |t: Arc<dyn TableProvider>| matches!(t.downcast_ref::<KeptTable>().unwrap()._held, Held::Disk(_));
        assert!(on_disk(ctx.table_provider("second").await.unwrap()));
        assert!(!on_disk(ctx.table_provider("first").await.unwrap()));
        let sum = |sql: &'static str| {
            let ctx = ctx.clone();
            async move { ctx.sql(sql).await.unwrap().collect().await.unwrap()[0].column(0).as_any().downcast_ref::<Int64Array>().unwrap().value(0) }
        };
        assert_eq!(sum("SELECT SUM(n) FROM second").await, (0..50_000i64).sum::<i64>());
        assert_eq!(sum("SELECT COUNT(*) FROM second WHERE n >= 49990").await, 10);
        ctx.deregister_table("second").unwrap();
        assert!(files().is_empty(), "removed with the table");
        let unlimited = SessionContext::new();
        let big = table(&unlimited, "big", b.schema(), vec![b.clone(); 100]).unwrap();
        assert!(matches!(big.downcast_ref::<KeptTable>().unwrap()._held, Held::Memory(_)), "without a limit, always in memory");
    }

    fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() { out.extend(walk(&p)) } else { out.push(p) }
        }
        out
    }
}
