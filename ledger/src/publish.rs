//! Publishing a run's derived tables as one set.
//!
//! Readers pair tables (a chargeback with its failure causes, the report views with all of
//! them), so a run's tables must replace the previous run's together. Files can only be
//! replaced one at a time, so a run
//!
//! 1. writes every table under `ledger/.staged-<run>/` (the published tables are untouched);
//! 2. writes `ledger/.publish.json`, naming the run and its tables: the commit point;
//! 3. moves each staged file over `ledger/<table>.parquet`, the path any Parquet reader uses;
//! 4. removes the record and the staging directory.
//!
//! A crash before step 2 leaves the previous run's tables as they were; one after it leaves a
//! record that the next run or `gpuledger vacuum` rolls forward ([`recover`]). Until then
//! gpuledger's own readers ([`crate::derived`]) take each table the record names from its
//! staged file while that is still there, so they read one run's tables, never a mix.

use gpuledger_store::{StoreLocation, layout};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The record of step 2.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Publish {
    pub run: String,
    pub tables: Vec<String>,
}

impl Publish {
    /// `ledger/.staged-<run>/<table>.parquet`.
    pub fn staged(&self, table: &str) -> String {
        staged_file(&self.run, table)
    }
}

/// Where run `run` stages `table`.
pub fn staged_file(run: &str, table: &str) -> String {
    format!("{}/{table}.parquet", layout::staged_rel(run))
}

/// The publish under way or interrupted, if any.
pub async fn pending(store: &StoreLocation) -> Result<Option<Publish>> {
    let read = match crate::record::read_json::<Publish>(store, layout::PUBLISH_RECORD).await {
        Ok(read) => read,
        // The publish finished between looking for the record and reading it.
        Err(_) if !store.has_file(layout::PUBLISH_RECORD).await? => None,
        Err(e) => return Err(e),
    };
    read.transpose().map_err(|e| Error::refused(store.display(layout::PUBLISH_RECORD), format!("not a publish record: {e}")))
}

/// Publishes the tables run `run` has staged (steps 2 to 4).
pub async fn publish(store: &StoreLocation, run: &str, tables: &[&str]) -> Result<()> {
    let record = Publish { run: run.to_owned(), tables: tables.iter().map(|t| (*t).to_owned()).collect() };
    let bytes = serde_json::to_vec_pretty(&record).map_err(|e| Error::internal(format!("writing the publish record: {e}")))?;
    store.write_whole(layout::PUBLISH_RECORD, bytes).await?;
    crash_point("published-record");
    finish(store, &record).await
}

/// Steps 3 and 4 of `record`; each step may have been done already.
async fn finish(store: &StoreLocation, record: &Publish) -> Result<()> {
    for (i, table) in record.tables.iter().enumerate() {
        let staged = record.staged(table);
        if store.has_file(&staged).await? {
            store.rename_file(&staged, &layout::derived_rel(table)).await?;
        }
        if i == 0 {
            crash_point("moved-one");
        }
    }
    store.remove_file(layout::PUBLISH_RECORD).await?;
    store.remove_dir(&layout::staged_rel(&record.run)).await?;
    Ok(())
}

/// What [`recover`] found.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Recovered {
    /// The run whose interrupted publish was finished.
    pub rolled_forward: Option<String>,
    /// Staging directories of runs that never reached their commit, removed.
    pub abandoned: Vec<String>,
}

/// Finishes an interrupted publish and removes the staging directories of runs that stopped
/// before theirs. Meant for a single ledger writer: a run going on at the same time would lose
/// its staged tables and fail.
pub async fn recover(store: &StoreLocation) -> Result<Recovered> {
    let mut out = Recovered::default();
    if let Some(record) = pending(store).await? {
        finish(store, &record).await?;
        out.rolled_forward = Some(record.run);
    }
    for dir in store.list_names(layout::LEDGER_DIR).await? {
        if let Some(run) = dir.strip_prefix(layout::STAGED_PREFIX) {
            store.remove_dir(&layout::staged_rel(run)).await?;
            out.abandoned.push(run.to_owned());
        }
    }
    Ok(out)
}

/// For crash tests: `GPULEDGER_CRASH_AT=<point>` ends the process at once there, as a kill -9
/// would (no destructors, no flush). Points: `staged-one` (one table staged),
/// `published-record` (the record written), `moved-one` (one table moved).
pub fn crash_point(point: &str) {
    if std::env::var("GPULEDGER_CRASH_AT").is_ok_and(|p| p == point) {
        std::process::abort();
    }
}
