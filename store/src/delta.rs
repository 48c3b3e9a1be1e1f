//! The store's tables as Delta Lake tables: which files make up a table is what its log
//! (`<table>/_delta_log/`) says, not what a directory listing finds.
//!
//! Why a log: a writer adds files, and a compaction replaces many small files by one, in one
//! commit; a reader takes the files of one version (a snapshot) and so sees each row exactly
//! once, whatever is being written meanwhile. Commits are put-if-absent writes of the next
//! version's log entry (delta-rs, `deltalake-core`), which object stores and local disks both
//! honour, so two writers cannot both take one version: the loser re-reads the log and retries
//! where the commits do not conflict.
//!
//! Files are still written by gpuledger (sorted, with our writer settings, see
//! `parquet_file`) at the same Hive-style paths as before; this module only records them. A file
//! written but never committed (a crash in between) is invisible to readers and removed by
//! VACUUM. Tables use no deletion vectors and no column mapping, so the Parquet files of a
//! vacuumed table are exactly its rows for any plain Parquet reader.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use arrow::datatypes::Schema;
use deltalake_core::kernel::engine::arrow_conversion::TryFromArrow;
use deltalake_core::kernel::transaction::{CommitBuilder, TableReference};
use deltalake_core::kernel::{Action, Add, Remove, StructType};
use deltalake_core::operations::create::CreateBuilder;
use deltalake_core::operations::vacuum::VacuumMode;
use deltalake_core::protocol::{DeltaOperation, SaveMode};
use deltalake_core::{DeltaTable, DeltaTableBuilder, DeltaTableError};
use gpuledger_schemas::PARTITION_KEY;
use url::Url;

use crate::error::{Error, Result};
use crate::layout;
use crate::location::StoreLocation;

/// The directory of a table's log, under the table's directory.
pub const LOG_DIR: &str = "_delta_log";

/// A data file of a table as its log lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataFile {
    /// Relative to the table's directory: `date=YYYY-MM-DD/part-….parquet`.
    pub path: String,
    /// The file's day partition, if the table has one.
    pub date: Option<String>,
    pub size: u64,
    /// Rows, where the commit recorded them.
    pub rows: Option<u64>,
}

/// The files of one version of a table.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// `None`: the table has no log (nothing was ever committed to it).
    pub version: Option<u64>,
    pub files: Vec<DataFile>,
}

impl Snapshot {
    pub fn rows(&self) -> Option<u64> {
        self.files.iter().map(|f| f.rows).sum()
    }

    pub fn bytes(&self) -> u64 {
        self.files.iter().map(|f| f.size).sum()
    }
}

/// What a commit does, as the log's history records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommitKind {
    /// New rows (ingest, a collector flush, a backfill).
    Append,
    /// The same rows in fewer files (compaction): no data change.
    Compact { target_size: u64 },
    /// The table's whole contents replaced (a derived table rewritten by the ledger).
    Replace,
    /// The files of the days before `before` (YYYY-MM-DD) removed: data past its retention.
    Expire { before: String },
}

/// What making sure a table is a Delta table did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ensured {
    /// The log was created now.
    pub created: bool,
    /// Files already in the table's directory (written before the store had logs) that the
    /// first commit took in.
    pub converted_files: usize,
    /// Columns of the current schema the table's log lacked, added now.
    pub added_columns: Vec<String>,
}

/// What a VACUUM removed.
#[derive(Debug, Clone, Default)]
pub struct Vacuumed {
    pub files_deleted: usize,
}

fn delta_err(location: &StoreLocation, table_rel: &str, source: DeltaTableError) -> Error {
    Error::Delta { path: location.display(table_rel), source: Box::new(source) }
}

impl StoreLocation {
    /// The URL delta-rs knows the table at `table_rel` by (a directory URL, ending in `/`).
    fn table_url(&self, table_rel: &str) -> Result<Url> {
        let rel = format!("{}/", table_rel.trim_end_matches('/'));
        match self {
            StoreLocation::Local(root) => {
                let abs = if root.is_absolute() { root.clone() } else { std::env::current_dir().map_err(|e| Error::io(root, e))?.join(root) };
                Url::from_directory_path(abs.join(table_rel)).map_err(|()| Error::Refused { path: abs.join(table_rel), reason: "not a path a URL can name".into() })
            }
            StoreLocation::Remote(r) => r.url.join(&rel).map_err(|e| Error::Refused { path: PathBuf::from(self.join(&rel)), reason: e.to_string() }),
        }
    }

    fn table_builder(&self, table_rel: &str) -> Result<DeltaTableBuilder> {
        register_log_stores();
        let url = self.table_url(table_rel)?;
        let builder = DeltaTableBuilder::from_url(url.clone()).map_err(|e| delta_err(self, table_rel, e))?;
        Ok(match self {
            StoreLocation::Local(_) => builder,
            // Our own client: built from gpuledger's settings, rooted at the bucket.
            StoreLocation::Remote(r) => builder.with_storage_backend(Arc::clone(&r.store), url),
        })
    }

    /// Whether the table at `table_rel` has a log.
    pub async fn is_delta_table(&self, table_rel: &str) -> Result<bool> {
        Ok(!self.list_names(&format!("{table_rel}/{LOG_DIR}")).await?.is_empty())
    }

    /// The latest version of the table, or `None` where it has no log.
    async fn load(&self, table_rel: &str) -> Result<Option<DeltaTable>> {
        if !self.is_delta_table(table_rel).await? {
            return Ok(None);
        }
        let table = self.table_builder(table_rel)?.load().await.map_err(|e| delta_err(self, table_rel, e))?;
        Ok(Some(table))
    }

    /// The files of the latest version of the table at `table_rel`. A table with no log and no
    /// files is empty; one with files but no log was written before the store had logs and
    /// is refused until it is converted (`gpuledger store upgrade`, or any writer).
    pub async fn snapshot(&self, table_rel: &str) -> Result<Snapshot> {
        let Some(table) = self.load(table_rel).await? else {
            if !self.untracked_files(table_rel).await?.is_empty() {
                return Err(Error::Refused {
                    path: self.display(table_rel),
                    reason: format!("holds data files but no {LOG_DIR}: written by an older gpuledger; run `gpuledger store upgrade --store {self}` once"),
                });
            }
            return Ok(Snapshot::default());
        };
        snapshot_of(self, table_rel, &table)
    }

    /// Makes the table at `table_rel` a Delta table of the file schema `schema` (partitioned by
    /// day where `partitioned`), if it is not one yet: an empty table, or, where data files are
    /// already there, a table of those files. A table whose log lacks columns of `schema` (a
    /// newer gpuledger added them) gets them. Safe to race: the first commit is put-if-absent.
    pub async fn ensure_table(&self, table_rel: &str, schema: &Schema, partitioned: bool) -> Result<Ensured> {
        let err = |e| delta_err(self, table_rel, e);
        let mut ensured = Ensured::default();
        match self.load(table_rel).await? {
            Some(table) => {
                let have = table.snapshot().map_err(err)?.schema();
                let missing: Vec<_> = schema.fields().iter().filter(|f| have.field(f.name()).is_none()).cloned().collect();
                if !missing.is_empty() {
                    let fields = StructType::try_from_arrow(&Schema::new(missing)).map_err(|e| err(e.into()))?;
                    ensured.added_columns = fields.fields().map(|f| f.name().to_string()).collect();
                    table.add_columns().with_fields(fields.fields().cloned().collect::<Vec<_>>()).await.map_err(err)?;
                }
            }
            None => {
                let adds: Vec<Action> = self.untracked_files(table_rel).await?.into_iter().map(|f| Action::Add(add_action(&f.path, f.date.as_deref(), f.size, None, true))).collect();
                ensured.converted_files = adds.len();
                let mut fields: Vec<_> = StructType::try_from_arrow(schema).map_err(|e| err(e.into()))?.fields().cloned().collect();
                let mut create = CreateBuilder::new();
                if partitioned {
                    fields.push(deltalake_core::kernel::StructField::new(PARTITION_KEY, deltalake_core::kernel::DataType::STRING, true));
                    create = create.with_partition_columns([PARTITION_KEY]);
                }
                let log_store = self.table_builder(table_rel)?.build_storage().map_err(err)?;
                let created = create.with_log_store(log_store).with_columns(fields).with_actions(adds).with_save_mode(SaveMode::ErrorIfExists).await;
                match created {
                    Ok(_) => ensured.created = true,
                    // Another process created it first: its table is as good as ours.
                    Err(DeltaTableError::Transaction { .. } | DeltaTableError::VersionAlreadyExists(_)) => ensured.converted_files = 0,
                    Err(e) if e.to_string().contains("already exists") => ensured.converted_files = 0,
                    Err(e) => return Err(err(e)),
                }
            }
        }
        Ok(ensured)
    }

    /// Data files under the table's directory, committed or not, as the directory lists them.
    async fn untracked_files(&self, table_rel: &str) -> Result<Vec<DataFile>> {
        let mut out = Vec::new();
        for name in self.list_names(table_rel).await? {
            if let Some(date) = layout::partition_date(&name) {
                for (file, size) in self.list_sizes(&format!("{table_rel}/{name}")).await? {
                    if layout::is_data_file(&file) {
                        out.push(DataFile { path: format!("{name}/{file}"), date: Some(date.to_string()), size, rows: None });
                    }
                }
            } else if layout::is_data_file(&name) {
                for (file, size) in self.list_sizes(table_rel).await? {
                    if file == name {
                        out.push(DataFile { path: name.clone(), date: None, size, rows: None });
                    }
                }
            }
        }
        Ok(out)
    }

    /// Commits, in one new version of the table at `table_rel`, the files `adds` (written and
    /// complete) and the removal of `removes`, on top of `read_version` (the version the
    /// caller's decision was based on; `None`: the latest).
    ///
    /// An append is committed only on top of `read_version` itself: if another writer committed
    /// since, this returns [`Error::Conflict`] and the caller, who decided which rows are new
    /// from that version, takes the other writer's files into account and tries again. Other
    /// commits are retried by delta-rs's conflict checker: a compaction goes through over a
    /// concurrent append, not over a concurrent removal of a file it removes. Every commit
    /// writes a checkpoint when the table's interval (100 commits) comes round, so opening a
    /// table reads one Parquet checkpoint and a few JSON commits, not a month of them.
    /// Returns the new version.
    pub async fn commit(&self, table_rel: &str, read_version: Option<u64>, adds: &[DataFile], removes: &[DataFile], kind: CommitKind) -> Result<u64> {
        use deltalake_core::kernel::transaction::{CommitProperties, TransactionError};
        let err = |e| delta_err(self, table_rel, e);
        let mut table = self.table_builder(table_rel)?.build().map_err(err)?;
        match read_version {
            Some(v) => table.load_version(v).await.map_err(err)?,
            None => table.load().await.map_err(err)?,
        }
        let data_change = !matches!(kind, CommitKind::Compact { .. });
        let mut actions: Vec<Action> = adds.iter().map(|f| Action::Add(add_action(&f.path, f.date.as_deref(), f.size, f.rows, data_change))).collect();
        let now = chrono::Utc::now().timestamp_millis();
        actions.extend(removes.iter().map(|f| {
            Action::Remove(Remove {
                path: f.path.clone(),
                data_change,
                deletion_timestamp: Some(now),
                extended_file_metadata: Some(true),
                partition_values: Some(partition_values(f.date.as_deref())),
                size: Some(f.size as i64),
                tags: None,
                deletion_vector: None,
                base_row_id: None,
                default_row_commit_version: None,
            })
        }));
        let snapshot = table.snapshot().map_err(err)?;
        let partition_by = Some(snapshot.metadata().partition_columns().to_vec());
        let (operation, retries) = match &kind {
            CommitKind::Append => (DeltaOperation::Write { mode: SaveMode::Append, partition_by, predicate: None }, 0),
            CommitKind::Replace => (DeltaOperation::Write { mode: SaveMode::Overwrite, partition_by, predicate: None }, 15),
            CommitKind::Compact { target_size } => (DeltaOperation::Optimize { predicate: None, target_size: *target_size as i64 }, 15),
            // The predicate tells the conflict checker what was read: appends to later days
            // meanwhile (the collector's flushes) do not conflict with it.
            CommitKind::Expire { before } => (DeltaOperation::Delete { predicate: Some(format!("{PARTITION_KEY} < '{before}'")) }, 15),
        };
        let builder = CommitBuilder::from(CommitProperties::default().with_create_checkpoint(true).with_max_retries(retries));
        match builder.with_actions(actions).build(Some(snapshot as &dyn TableReference), table.log_store(), operation).await {
            Ok(done) => Ok(done.version()),
            Err(DeltaTableError::Transaction { source: TransactionError::MaxCommitAttempts(0) }) if retries == 0 => {
                Err(Error::Conflict { path: self.display(table_rel), read_version })
            }
            Err(e) => Err(err(e)),
        }
    }

    /// Deletes the files of the table at `table_rel` that no version younger than `retain`
    /// needs: files removed by a commit (compaction, replacement) more than `retain` ago, and
    /// files never committed (a writer's crash) older than `retain`.
    pub async fn vacuum(&self, table_rel: &str, retain: std::time::Duration, dry_run: bool) -> Result<Vacuumed> {
        let err = |e| delta_err(self, table_rel, e);
        let Some(table) = self.load(table_rel).await? else { return Ok(Vacuumed::default()) };
        let retention = chrono::Duration::from_std(retain).map_err(|e| Error::internal(format!("retention {retain:?}: {e}")))?;
        let (_, metrics) = table
            .vacuum()
            .with_retention_period(retention)
            .with_enforce_retention_duration(false)
            .with_mode(VacuumMode::Full)
            .with_dry_run(dry_run)
            .await
            .map_err(err)?;
        Ok(Vacuumed { files_deleted: metrics.files_deleted.len() })
    }
}

/// delta-rs knows how to commit to `file://` and `memory://` tables; for object stores it
/// wants a log store registered per scheme (its `deltalake-aws` and friends bring their own
/// clients and settings). Ours is its default log store over gpuledger's own client: commits
/// are put-if-absent PUTs (`If-None-Match: *` on S3, generation preconditions on GCS, ETags on
/// Azure), which those stores honour natively, so no lock table is needed.
fn register_log_stores() {
    use deltalake_core::logstore::{LogStore, LogStoreFactory, StorageConfig, default_logstore, logstore_factories};
    struct ConditionalPut;
    impl LogStoreFactory for ConditionalPut {
        fn with_options(
            &self,
            prefixed: deltalake_core::logstore::ObjectStoreRef,
            root: deltalake_core::logstore::ObjectStoreRef,
            location: &Url,
            options: &StorageConfig,
        ) -> deltalake_core::DeltaResult<Arc<dyn LogStore>> {
            Ok(default_logstore(prefixed, root, location, options))
        }
    }
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let registry = logstore_factories();
        for scheme in ["s3", "s3a", "gs", "az", "abfs", "abfss", "azure"] {
            if let Ok(url) = Url::parse(&format!("{scheme}://")) {
                registry.insert(url, Arc::new(ConditionalPut));
            }
        }
    });
}

fn snapshot_of(location: &StoreLocation, table_rel: &str, table: &DeltaTable) -> Result<Snapshot> {
    let state = table.snapshot().map_err(|e| delta_err(location, table_rel, e))?;
    let mut files: Vec<DataFile> = state
        .log_data()
        .iter()
        .map(|f| {
            let date = f.partition_values_map().get(PARTITION_KEY).cloned().flatten();
            DataFile { path: f.path().into_owned(), date, size: f.size().max(0) as u64, rows: f.num_records().map(|n| n as u64) }
        })
        .collect();
    files.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(Snapshot { version: Some(state.version()), files })
}

fn partition_values(date: Option<&str>) -> HashMap<String, Option<String>> {
    date.map(|d| HashMap::from([(PARTITION_KEY.to_string(), Some(d.to_string()))])).unwrap_or_default()
}

fn add_action(path: &str, date: Option<&str>, size: u64, rows: Option<u64>, data_change: bool) -> Add {
    Add {
        path: path.to_string(),
        partition_values: partition_values(date),
        size: size as i64,
        modification_time: chrono::Utc::now().timestamp_millis(),
        data_change,
        // Only the row count: enough for readers to plan and for `compact` to report; pruning
        // uses the Parquet files' own statistics.
        stats: rows.map(|n| format!("{{\"numRecords\":{n}}}")),
        tags: None,
        deletion_vector: None,
        base_row_id: None,
        default_row_commit_version: None,
        clustering_provider: None,
    }
}

/// Makes every raw table of the store that holds anything a Delta table of the current schema:
/// the tables of a store an older gpuledger wrote (their files become each table's first
/// version, nothing is rewritten), and tables whose log lacks columns added since.
pub async fn upgrade(location: &StoreLocation) -> Result<Vec<(&'static str, Ensured)>> {
    let mut out = Vec::new();
    for table in gpuledger_schemas::TABLES {
        if location.has_dir(table.name).await? {
            out.push((table.name, location.ensure_table(table.name, &table.arrow_schema(), true).await?));
        }
    }
    Ok(out)
}
