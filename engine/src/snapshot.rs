//! A raw store table as DataFusion reads it: the files of one version of its Delta log.
//!
//! A listing table would read whatever files a directory holds at scan time, so a reader
//! running while `compact` swaps 290 small files for one would count rows twice, and one
//! running while an ingest writes would see half a commit. [`SnapshotTable`] scans exactly the
//! files one log version lists, each with its day as the `date` column, as one sorted stream
//! per file (the order the writer sorted them in, so that window functions merge rather than
//! sort).
//!
//! On Ballista the client's logical plan travels to the scheduler: [`StoreCodec`] carries a
//! snapshot table across as its file list (Ballista's own codec does everything else).

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;

use arrow::array::{Array, BooleanArray, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::common::{DFSchema, Result as DfResult, ScalarValue, exec_err};
#[cfg(feature = "ballista")]
use datafusion::common::TableReference;
use datafusion::datasource::file_format::FileFormat;
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::physical_plan::{FileGroup, FileScanConfigBuilder};
use datafusion::datasource::table_schema::TableSchema;
use datafusion::datasource::{TableProvider, TableType};
#[cfg(feature = "ballista")]
use datafusion::execution::TaskContext;
use datafusion::execution::object_store::ObjectStoreUrl;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::physical_expr::{LexOrdering, PhysicalSortExpr};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::empty::EmptyExec;
use datafusion::physical_plan::expressions::col;
#[cfg(feature = "ballista")]
use datafusion_proto::logical_plan::LogicalExtensionCodec;
use gpuledger_schemas::{PARTITION_KEY, Table};
use gpuledger_store::{Snapshot, StoreLocation};
use serde::{Deserialize, Serialize};

/// Most files one scan reads as a stream each, in their sorted order (see `scan`).
const MAX_ORDERED_FILES: usize = 64;

/// One data file of the snapshot, as the object store names it.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct SnapshotFile {
    /// The object-store path (no scheme, no leading `/`).
    location: String,
    size: u64,
    date: String,
}

/// What a snapshot table is, and all a Ballista scheduler needs to rebuild it.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Definition {
    table: String,
    /// `file:///` or `s3://bucket/`: the object store the paths are in.
    store_url: String,
    version: Option<u64>,
    files: Vec<SnapshotFile>,
}

/// One version of a raw table's log, scanned as Parquet.
#[derive(Debug)]
pub struct SnapshotTable {
    table: &'static Table,
    def: Definition,
    /// The files' columns, then `date`.
    schema: SchemaRef,
    /// Whether a scan declares its files' sort order (see `scan`). Not on a cluster: the stages
    /// of a Ballista plan meet through shuffles, which do not keep an order the plan counts on
    /// (a merge of sorted streams instead of a sort), so there every ordered step sorts.
    ordered_files: bool,
}

impl SnapshotTable {
    /// The table `table` as the snapshot `snapshot` of the store at `location` lists it.
    pub fn new(location: &StoreLocation, table: &'static Table, snapshot: &Snapshot) -> SnapshotTable {
        let (store_url, prefix) = match location {
            StoreLocation::Local(root) => {
                let abs = std::path::absolute(root).unwrap_or_else(|_| root.clone());
                ("file:///".to_string(), abs.display().to_string().trim_start_matches('/').to_string())
            }
            StoreLocation::Remote(r) => (r.bucket_url().to_string(), r.prefix.as_ref().to_string()),
        };
        let dir = if prefix.is_empty() { table.name.to_string() } else { format!("{prefix}/{}", table.name) };
        let files = snapshot
            .files
            .iter()
            .map(|f| SnapshotFile { location: format!("{dir}/{}", f.path), size: f.size, date: f.date.clone().unwrap_or_default() })
            .collect();
        Self::from_definition(table, Definition { table: table.name.to_string(), store_url, version: snapshot.version, files }, true)
    }

    fn from_definition(table: &'static Table, def: Definition, ordered_files: bool) -> SnapshotTable {
        let mut fields: Vec<Field> = table.arrow_schema().fields().iter().map(|f| f.as_ref().clone()).collect();
        fields.push(Field::new(PARTITION_KEY, DataType::Utf8, false));
        SnapshotTable { table, def, schema: Arc::new(Schema::new(fields)), ordered_files }
    }

    /// The log version this table reads (`None`: the table has no log yet).
    pub fn version(&self) -> Option<u64> {
        self.def.version
    }

    /// The days that `filters` on `date` alone leave (all days if there are none).
    fn days(&self, state: &dyn Session, filters: &[Expr]) -> DfResult<Option<HashSet<String>>> {
        let on_date: Vec<&Expr> = filters.iter().filter(|f| only_date(f)).collect();
        if on_date.is_empty() {
            return Ok(None);
        }
        let days: Vec<String> = self.def.files.iter().map(|f| f.date.clone()).collect::<BTreeSet<_>>().into_iter().collect();
        let schema = Arc::new(Schema::new(vec![Field::new(PARTITION_KEY, DataType::Utf8, false)]));
        let batch = RecordBatch::try_new(Arc::clone(&schema), vec![Arc::new(StringArray::from(days.clone()))])?;
        let df_schema = DFSchema::try_from(Arc::clone(&schema))?;
        let mut keep = vec![true; days.len()];
        for f in on_date {
            let expr = state.create_physical_expr((*f).clone(), &df_schema)?;
            let values = expr.evaluate(&batch)?.into_array(days.len())?;
            let Some(mask) = values.as_any().downcast_ref::<BooleanArray>() else { return exec_err!("a filter on {PARTITION_KEY} is not a condition") };
            for (i, k) in keep.iter_mut().enumerate() {
                *k &= mask.is_valid(i) && mask.value(i);
            }
        }
        Ok(Some(days.into_iter().zip(keep).filter(|(_, k)| *k).map(|(d, _)| d).collect()))
    }
}

/// Whether `expr` reads no column but `date`.
fn only_date(expr: &Expr) -> bool {
    let cols = expr.column_refs();
    !cols.is_empty() && cols.iter().all(|c| c.name == PARTITION_KEY)
}

#[async_trait]
impl TableProvider for SnapshotTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(&self, filters: &[&Expr]) -> DfResult<Vec<TableProviderFilterPushDown>> {
        // A condition on the day is applied exactly, by choosing files; others are pushed into
        // the Parquet scan by DataFusion's optimizer and checked again above it.
        Ok(filters.iter().map(|f| if only_date(f) { TableProviderFilterPushDown::Exact } else { TableProviderFilterPushDown::Inexact }).collect())
    }

    async fn scan(&self, state: &dyn Session, projection: Option<&Vec<usize>>, filters: &[Expr], limit: Option<usize>) -> DfResult<Arc<dyn ExecutionPlan>> {
        let days = self.days(state, filters)?;
        let files: Vec<PartitionedFile> = self
            .def
            .files
            .iter()
            .filter(|f| days.as_ref().is_none_or(|d| d.contains(&f.date)))
            .map(|f| PartitionedFile::new(f.location.clone(), f.size).with_partition_values(vec![ScalarValue::Utf8(Some(f.date.clone()))]))
            .collect();
        // Each file is sorted, so a stream per file keeps the order and a merge (not a sort)
        // combines them. A merge holds a batch of every stream at once, though: past
        // MAX_ORDERED_FILES (an uncompacted stretch of days, ~290 files a day) the files are
        // read in a few sequential groups instead and sorted, which spills under a limit.
        let ordered = self.ordered_files && files.len() <= MAX_ORDERED_FILES;
        let groups: Vec<FileGroup> = if ordered {
            files.into_iter().map(|f| FileGroup::new(vec![f])).collect()
        } else {
            let n = state.config().target_partitions().max(1);
            let per = files.len().div_ceil(n);
            files.chunks(per).map(|c| FileGroup::new(c.to_vec())).collect()
        };
        if groups.is_empty() {
            let projected = match projection {
                Some(p) => Arc::new(self.schema.project(p)?),
                None => Arc::clone(&self.schema),
            };
            return Ok(Arc::new(EmptyExec::new(projected)));
        }
        let format = ParquetFormat::default().with_options(state.table_options().parquet.clone());
        let date = Arc::new(Field::new(PARTITION_KEY, DataType::Utf8, false));
        let source = format.file_source(TableSchema::builder(self.table.arrow_schema()).with_table_partition_cols(vec![date]).build());
        let mut ordering = Vec::new();
        for c in self.table.sort_by.iter().filter(|_| ordered) {
            ordering.push(PhysicalSortExpr::new(col(c, &self.schema)?, arrow::compute::SortOptions { descending: false, nulls_first: true }));
        }
        let config = FileScanConfigBuilder::new(ObjectStoreUrl::parse(&self.def.store_url)?, source)
            .with_file_groups(groups)
            .with_projection_indices(projection.cloned())?
            .with_limit(limit)
            .with_output_ordering(LexOrdering::new(ordering).into_iter().collect())
            .build();
        format.create_physical_plan(state, config).await
    }
}

/// Ballista's logical codec, plus snapshot tables (as their JSON definition).
#[cfg(feature = "ballista")]
#[derive(Debug)]
pub struct StoreCodec {
    inner: Arc<dyn LogicalExtensionCodec>,
}

#[cfg(feature = "ballista")]
impl Default for StoreCodec {
    fn default() -> Self {
        StoreCodec { inner: Arc::new(ballista_core::serde::BallistaLogicalExtensionCodec::default()) }
    }
}

/// Marks an encoded snapshot table, so that anything else goes to Ballista's codec.
#[cfg(feature = "ballista")]
const SNAPSHOT_TAG: &[u8] = b"gpuledger-snapshot:";

#[cfg(feature = "ballista")]
impl LogicalExtensionCodec for StoreCodec {
    fn try_decode(&self, buf: &[u8], inputs: &[datafusion::logical_expr::LogicalPlan], ctx: &TaskContext) -> DfResult<datafusion::logical_expr::Extension> {
        self.inner.try_decode(buf, inputs, ctx)
    }

    fn try_encode(&self, node: &datafusion::logical_expr::Extension, buf: &mut Vec<u8>) -> DfResult<()> {
        self.inner.try_encode(node, buf)
    }

    fn try_decode_table_provider(&self, buf: &[u8], table_ref: &TableReference, schema: SchemaRef, ctx: &TaskContext) -> DfResult<Arc<dyn TableProvider>> {
        let Some(json) = buf.strip_prefix(SNAPSHOT_TAG) else { return self.inner.try_decode_table_provider(buf, table_ref, schema, ctx) };
        let def: Definition = serde_json::from_slice(json).map_err(|e| datafusion::error::DataFusionError::External(Box::new(e)))?;
        let Some(table) = gpuledger_schemas::TABLES.iter().find(|t| t.name == def.table) else {
            return exec_err!("a snapshot of unknown table {}", def.table);
        };
        // Decoded on the scheduler, which plans the cluster's stages: no declared file order.
        Ok(Arc::new(SnapshotTable::from_definition(table, def, false)))
    }

    fn try_encode_table_provider(&self, table_ref: &TableReference, node: Arc<dyn TableProvider>, buf: &mut Vec<u8>) -> DfResult<()> {
        match node.downcast_ref::<SnapshotTable>() {
            Some(t) => {
                buf.extend_from_slice(SNAPSHOT_TAG);
                serde_json::to_writer(buf, &t.def).map_err(|e| datafusion::error::DataFusionError::External(Box::new(e)))
            }
            None => self.inner.try_encode_table_provider(table_ref, node, buf),
        }
    }

    fn try_decode_file_format(&self, buf: &[u8], ctx: &TaskContext) -> DfResult<Arc<dyn datafusion::datasource::file_format::FileFormatFactory>> {
        self.inner.try_decode_file_format(buf, ctx)
    }

    fn try_encode_file_format(&self, buf: &mut Vec<u8>, node: Arc<dyn datafusion::datasource::file_format::FileFormatFactory>) -> DfResult<()> {
        self.inner.try_encode_file_format(buf, node)
    }

    fn try_decode_udf(&self, name: &str, buf: &[u8]) -> DfResult<Arc<datafusion::logical_expr::ScalarUDF>> {
        self.inner.try_decode_udf(name, buf)
    }

    fn try_encode_udf(&self, node: &datafusion::logical_expr::ScalarUDF, buf: &mut Vec<u8>) -> DfResult<()> {
        self.inner.try_encode_udf(node, buf)
    }

    fn try_decode_udaf(&self, name: &str, buf: &[u8]) -> DfResult<Arc<datafusion::logical_expr::AggregateUDF>> {
        self.inner.try_decode_udaf(name, buf)
    }

    fn try_encode_udaf(&self, node: &datafusion::logical_expr::AggregateUDF, buf: &mut Vec<u8>) -> DfResult<()> {
        self.inner.try_encode_udaf(node, buf)
    }

    fn try_decode_udwf(&self, name: &str, buf: &[u8]) -> DfResult<Arc<datafusion::logical_expr::WindowUDF>> {
        self.inner.try_decode_udwf(name, buf)
    }

    fn try_encode_udwf(&self, node: &datafusion::logical_expr::WindowUDF, buf: &mut Vec<u8>) -> DfResult<()> {
        self.inner.try_encode_udwf(node, buf)
    }
}
