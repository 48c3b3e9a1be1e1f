//! The Arrow schema of every table in the gpuledger store, defined in one place.
//!
//! Sources -> collector -> **store** -> ledger: the store is the only thing the collector and the
//! ledger share, and this crate is its contract. It depends on `arrow-schema` alone, so anything
//! that reads or writes the store (the collector, the ledger, a test, a peer tool) can link it
//! without pulling in a query engine or a Kubernetes client.
//!
//! Each [`Table`] names its columns (with a one-line meaning each), the timestamp column that
//! decides its `date=YYYY-MM-DD` partition, the sort order inside a file, and the key that
//! recognises the same fact ingested twice. Each [`DerivedTable`] (module [`derived`]) declares
//! the columns of a table the ledger computes and writes to `ledger/<name>.parquet`.
//!
//! ```
//! let t = gpuledger_schemas::table("gpu_samples").unwrap();
//! assert_eq!(t.partition_column, "ts");
//! assert!(t.arrow_schema().field_with_name("engine_active").is_ok());
//! ```

// Tests may unwrap: a panic is how they fail.
#![cfg_attr(test, allow(clippy::unwrap_used))]

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};

pub mod derived;
mod k8s;
pub mod units;
mod samples;

/// Bumped whenever a column changes meaning, type or is removed (adding a nullable column at the
/// end does not bump it). Written into every Parquet file's key-value metadata.
pub const SCHEMA_VERSION: u32 = 1;

/// Parquet key-value metadata key holding [`SCHEMA_VERSION`].
pub const META_SCHEMA_VERSION: &str = "gpuledger.schema_version";
/// Parquet key-value metadata key holding the table name.
pub const META_TABLE: &str = "gpuledger.table";

/// Name of the Hive partition directory level (`date=YYYY-MM-DD`).
pub const PARTITION_KEY: &str = "date";

/// Column types used in the store. Kept to a handful so every Parquet reader maps them the same way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnType {
    /// `Timestamp(Millisecond, "UTC")`.
    Timestamp,
    Utf8,
    Int32,
    Int64,
    Float64,
    Boolean,
}

impl ColumnType {
    pub fn data_type(self) -> DataType {
        match self {
            ColumnType::Timestamp => DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
            ColumnType::Utf8 => DataType::Utf8,
            ColumnType::Int32 => DataType::Int32,
            ColumnType::Int64 => DataType::Int64,
            ColumnType::Float64 => DataType::Float64,
            ColumnType::Boolean => DataType::Boolean,
        }
    }

    /// The SQL spelling shown by `gpuledger schema`.
    pub fn sql_name(self) -> &'static str {
        match self {
            ColumnType::Timestamp => "TIMESTAMP(ms, UTC)",
            ColumnType::Utf8 => "VARCHAR",
            ColumnType::Int32 => "INT",
            ColumnType::Int64 => "BIGINT",
            ColumnType::Float64 => "DOUBLE",
            ColumnType::Boolean => "BOOLEAN",
        }
    }
}

/// One column: name, type, whether it may be null, and what it means.
#[derive(Debug, Clone, Copy)]
pub struct Column {
    pub name: &'static str,
    pub ty: ColumnType,
    pub nullable: bool,
    pub doc: &'static str,
}

/// Shorthand used by the table definitions.
pub(crate) const fn col(name: &'static str, ty: ColumnType, nullable: bool, doc: &'static str) -> Column {
    Column { name, ty, nullable, doc }
}

/// Where duplicate detection looks when the same fact is ingested again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DedupScope {
    /// The key contains the partition timestamp, so a duplicate can only sit in the same partition.
    Partition,
    /// The key does not fix the partition (an object version seen in two files may carry two
    /// observation times): look across the whole table.
    Table,
}

/// A store table.
#[derive(Debug, Clone, Copy)]
pub struct Table {
    pub name: &'static str,
    pub doc: &'static str,
    pub columns: &'static [Column],
    /// Timestamp column whose UTC date names the partition directory.
    pub partition_column: &'static str,
    /// Sort order of rows inside each file (the ledger reads per GPU / per object, in time order).
    pub sort_by: &'static [&'static str],
    /// Columns that together identify one fact; a row whose key is already stored is skipped.
    pub key: &'static [&'static str],
    pub dedup: DedupScope,
}

impl Table {
    /// The Arrow schema of the files (the `date` partition column is in the path, not the file).
    pub fn arrow_schema(&self) -> SchemaRef {
        let fields: Vec<Field> = self
            .columns
            .iter()
            .map(|c| Field::new(c.name, c.ty.data_type(), c.nullable))
            .collect();
        Arc::new(Schema::new(fields))
    }

    pub fn column(&self, name: &str) -> Option<&'static Column> {
        self.columns.iter().find(|c| c.name == name)
    }

    /// Position of a column in [`Table::arrow_schema`].
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c.name == name)
    }
}

/// Every table, in the order `gpuledger schema` prints them.
pub const TABLES: &[Table] = &[
    samples::GPU_SAMPLES,
    samples::METRIC_SAMPLES,
    k8s::K8S_OBJECTS,
    k8s::PODS,
    k8s::NODES,
    k8s::NAMESPACES,
    k8s::JOBS,
    k8s::WORKLOADS,
    k8s::WORKLOAD_CONDITIONS,
    k8s::K8S_EVENTS,
    k8s::KUEUE_QUEUES,
    k8s::RESOURCE_CLAIMS,
    k8s::RESOURCE_CLAIM_TEMPLATES,
    k8s::RESOURCE_SLICES,
    k8s::DEVICE_CLASSES,
];

/// Looks a table up by name.
pub fn table(name: &str) -> Option<&'static Table> {
    TABLES.iter().find(|t| t.name == name)
}

pub use derived::{DERIVED_TABLES, DerivedTable, REPORT_VIEWS, declared, derived_table};
pub use k8s::EventType;
pub use k8s::{
    DEVICE_CLASSES, JOBS, K8S_EVENTS, K8S_OBJECTS, KUEUE_QUEUES, NAMESPACES, NODES, PODS, RESOURCE_CLAIM_TEMPLATES, RESOURCE_CLAIMS, RESOURCE_SLICES, WORKLOAD_CONDITIONS, WORKLOADS,
};
pub use samples::{GPU_METRICS, GPU_SAMPLES, GpuMetric, METRIC_SAMPLES};

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn every_table_is_consistent() {
        let mut names = HashSet::new();
        for t in TABLES {
            assert!(names.insert(t.name), "duplicate table {}", t.name);
            let mut cols = HashSet::new();
            for c in t.columns {
                assert!(cols.insert(c.name), "{}.{} defined twice", t.name, c.name);
                assert!(!c.doc.is_empty(), "{}.{} has no doc", t.name, c.name);
                assert_ne!(c.name, PARTITION_KEY, "{}: `date` is the partition key", t.name);
            }
            let p = t.column(t.partition_column).expect("partition column exists");
            assert_eq!(p.ty, ColumnType::Timestamp, "{}", t.name);
            assert!(!p.nullable, "{}: partition column must be non-null", t.name);
            for k in t.sort_by.iter().chain(t.key.iter()) {
                assert!(t.column(k).is_some(), "{}: unknown column {k}", t.name);
            }
            if t.dedup == DedupScope::Partition {
                assert!(t.key.contains(&t.partition_column), "{}: partition-scoped key needs the partition column", t.name);
            }
        }
    }

    #[test]
    fn gpu_metric_columns_exist_and_are_numeric() {
        let t = table("gpu_samples").unwrap();
        for m in GPU_METRICS {
            let c = t.column(m.column).unwrap_or_else(|| panic!("{} missing", m.column));
            assert!(matches!(c.ty, ColumnType::Float64 | ColumnType::Int64), "{}", m.column);
        }
    }
}
