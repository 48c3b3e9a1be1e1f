//! Query results as Parquet files, and Parquet files as tables: how a run hands a result from
//! one step to the next without holding it in memory.
//!
//! In process, a result streams from its query into the file (through `object_store`, which
//! makes the file appear whole: a staged file renamed locally, one PUT or a completed multipart
//! upload in object storage). On a Ballista cluster the executors write it themselves
//! (`DataFrame::write_parquet`), so no row travels through the client.

use std::sync::Arc;

use arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::catalog::TableProvider;
use datafusion::dataframe::DataFrameWriteOptions;
use datafusion::datasource::MemTable;
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::listing::{ListingOptions, ListingTable, ListingTableConfig, ListingTableUrl};
use datafusion::prelude::{DataFrame, SessionContext};
use futures::StreamExt;
use gpuledger_store::StoreLocation;
use object_store::buffered::BufWriter;
use parquet::arrow::AsyncArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;

use crate::error::{Error, Result};
use crate::exec::Timer;

/// How a file is compressed: for a while (read back once, soon: fast to write) or for keeps
/// (read by later runs: small).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keeping {
    Scratch,
    Stored,
}

impl Keeping {
    /// The writer settings of a file kept so.
    pub fn properties(self) -> WriterProperties {
        let compression = match self {
            Keeping::Scratch => Compression::LZ4_RAW,
            Keeping::Stored => Compression::ZSTD(ZstdLevel::try_new(1).unwrap_or_default()),
        };
        WriterProperties::builder().set_compression(compression).build()
    }

    fn codec(self) -> &'static str {
        match self {
            Keeping::Scratch => "lz4_raw",
            Keeping::Stored => "zstd(1)",
        }
    }
}

/// What writing a result left: its schema (the plan's: every row fits it) and its rows.
#[derive(Debug, Clone)]
pub struct Written {
    pub schema: SchemaRef,
    pub rows: u64,
}

/// Writes the rows of `df` as the Parquet file `rel` of `location`, in this process.
pub async fn write_here(df: DataFrame, location: &StoreLocation, rel: &str, properties: WriterProperties) -> Result<Written> {
    let name = location.display(rel);
    let query_err = |source| Error::Query { sql: format!("writing {}", name.display()), source };
    let pq = |source| Error::Store(gpuledger_store::Error::Parquet { path: name.clone(), source });
    // The plan's schema, not the first batch's: a UNION's branches may differ in nullability,
    // and the file must take every row.
    let schema: SchemaRef = Arc::new(df.schema().as_arrow().clone());
    let mut rows_in = df.execute_stream().await.map_err(query_err)?;
    let (store, key) = location.object(rel).map_err(gpuledger_store::Error::from)?;
    let mut writer = AsyncArrowWriter::try_new(BufWriter::new(store, key), schema.clone(), Some(properties)).map_err(pq)?;
    let mut rows = 0u64;
    while let Some(batch) = rows_in.next().await {
        let batch = batch.map_err(query_err)?;
        rows += batch.num_rows() as u64;
        let batch = crate::exec::conform(&batch, &schema)?;
        writer.write(&batch).await.map_err(pq)?;
    }
    writer.close().await.map_err(pq)?;
    Ok(Written { schema, rows })
}

/// Writes the rows of `df` as the single Parquet file `url` on the engine that runs `df` (a
/// cluster's executors write it themselves). The file is written even when there are no rows.
pub async fn write_on_engine(ctx: &SessionContext, df: DataFrame, url: &str, keeping: Keeping) -> Result<Written> {
    let _timer = Timer::start(ctx, &format!("write {url}"));
    let err = |source| Error::Query { sql: format!("writing {url}"), source };
    let schema: SchemaRef = Arc::new(df.schema().as_arrow().clone());
    let mut options = datafusion::config::TableParquetOptions::default();
    options.global.compression = Some(keeping.codec().to_string());
    let counts = df.write_parquet(url, DataFrameWriteOptions::new().with_single_file_output(true), Some(options)).await.map_err(err)?;
    let rows = crate::exec::strings(&counts, 0).into_iter().flatten().filter_map(|n| n.parse::<u64>().ok()).sum();
    Ok(Written { schema, rows })
}

/// The Parquet files `urls` as one table of `schema` (each file's columns are read as the
/// schema's). `all_nullable`: declare every column nullable (a cluster: Ballista 55 keeps a
/// column's non-null declaration on the inner side of an outer join, and the nulls the join adds
/// then fail its shuffle writer). No files: an empty table of that schema.
pub fn parquet_table(urls: &[String], schema: SchemaRef, all_nullable: bool) -> Result<Arc<dyn TableProvider>> {
    let schema = if all_nullable { nullable(&schema) } else { schema };
    let err = |source| Error::Query { sql: format!("reading {} Parquet file(s): {}", urls.len(), urls.first().map(String::as_str).unwrap_or("")), source };
    if urls.is_empty() {
        return Ok(Arc::new(MemTable::try_new(schema, vec![vec![]]).map_err(err)?));
    }
    let paths = urls.iter().map(|u| ListingTableUrl::parse(u).map_err(err)).collect::<Result<Vec<_>>>()?;
    // No extension filter: each URL names one file.
    let options = ListingOptions::new(Arc::new(ParquetFormat::default())).with_file_extension("");
    let config = ListingTableConfig::new_with_multi_paths(paths).with_listing_options(options).with_schema(schema);
    Ok(Arc::new(ListingTable::try_new(config).map_err(err)?))
}

/// The schema of the Parquet files `urls`, merged (a column is nullable where any file's is).
pub async fn files_schema(ctx: &SessionContext, urls: &[String]) -> Result<SchemaRef> {
    let err = |source| Error::Query { sql: format!("reading the schema of {}", urls.first().map(String::as_str).unwrap_or("no file")), source };
    let paths = urls.iter().map(|u| ListingTableUrl::parse(u).map_err(err)).collect::<Result<Vec<_>>>()?;
    let options = ListingOptions::new(Arc::new(ParquetFormat::default())).with_file_extension("");
    let mut merged: Option<Schema> = None;
    for path in paths {
        let config = ListingTableConfig::new(path).with_listing_options(options.clone()).infer_schema(&ctx.state()).await.map_err(err)?;
        let schema = config.file_schema.ok_or_else(|| Error::internal("a listing table without its schema after inferring it"))?;
        let schema = schema.as_ref().clone().with_metadata(Default::default());
        merged = Some(match merged {
            None => schema,
            Some(m) => merge(&m, &schema),
        });
    }
    Ok(Arc::new(merged.unwrap_or_else(Schema::empty)))
}

/// `a` with each column nullable where `a`'s or `b`'s is (the same columns in both).
pub fn merge(a: &Schema, b: &Schema) -> Schema {
    let fields: Vec<Field> = a
        .fields()
        .iter()
        .map(|f| {
            let other = b.field_with_name(f.name()).map(|g| g.is_nullable()).unwrap_or(true);
            f.as_ref().clone().with_nullable(f.is_nullable() || other)
        })
        .collect();
    Schema::new(fields)
}

fn nullable(schema: &Schema) -> SchemaRef {
    Arc::new(Schema::new(schema.fields().iter().map(|f| f.as_ref().clone().with_nullable(true)).collect::<Vec<Field>>()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, RecordBatch};
    use arrow::datatypes::DataType;

    #[tokio::test]
    async fn a_result_written_here_reads_back_as_a_table_even_when_empty() {
        let dir = tempfile::tempdir().unwrap();
        let location = StoreLocation::Local(dir.path().to_path_buf());
        let ctx = SessionContext::new();
        let df = ctx.sql("SELECT * FROM (VALUES (1), (2), (NULL)) AS t(n)").await.unwrap();
        let one = write_here(df, &location, "a/one.parquet", Keeping::Scratch.properties()).await.unwrap();
        assert_eq!(one.rows, 3);
        let df = ctx.sql("SELECT * FROM (VALUES (5)) AS t(n) WHERE n > 9").await.unwrap();
        let none = write_here(df, &location, "a/none.parquet", Keeping::Stored.properties()).await.unwrap();
        assert_eq!(none.rows, 0);
        let urls: Vec<String> = ["a/one.parquet", "a/none.parquet"].iter().map(|r| location.join(r)).collect();
        let schema = files_schema(&ctx, &urls).await.unwrap();
        assert!(schema.field(0).is_nullable(), "one file holds a null");
        ctx.register_table("both", parquet_table(&urls, schema, false).unwrap()).unwrap();
        let sum = ctx.sql("SELECT SUM(n), COUNT(*) FROM both").await.unwrap().collect().await.unwrap();
        assert_eq!(sum[0].column(0).as_any().downcast_ref::<Int64Array>().unwrap().value(0), 3);
        assert_eq!(sum[0].column(1).as_any().downcast_ref::<Int64Array>().unwrap().value(0), 3);
        let no_files = parquet_table(&[], Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, false)])), true).unwrap();
        assert!(no_files.schema().field(0).is_nullable());
        let _ = RecordBatch::new_empty(no_files.schema());
    }
}
