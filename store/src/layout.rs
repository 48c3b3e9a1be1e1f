//! Where each thing lives inside a store (docs/accounting.md, "The store"): the names every reader and
//! writer uses, so that no crate spells a path of its own.
//!
//! ```text
//! <store>/.gpuledger-store                      the marker: this prefix is a store
//! <store>/<table>/_delta_log/                   each raw table's Delta log (`delta`)
//! <store>/<table>/date=YYYY-MM-DD/part-*.parquet  raw tables' files, one directory per UTC day
//! <store>/ledger/<table>.parquet                the ledger's derived tables
//! <store>/ledger/.inputs.json                   what the last ledger run read (retention)
//! <store>/ledger/.staged-<run>/<table>.parquet  a ledger run's tables before they are published
//! <store>/ledger/.publish.json                  the set of tables a run is publishing (its commit)
//! <store>/.expired                              samples before this month were removed
//! <store>/ledger/.work-<run>/                   a distributed run's intermediate tables
//! <store>/.backfill/<key>/<start>-<end>         ranges a Prometheus backfill has finished
//! <wal>/                                        the live collector's write-ahead log (local)
//! ```

use gpuledger_schemas::PARTITION_KEY;

/// The file (or object) at the root of every store that says it is one.
pub const MARKER: &str = ".gpuledger-store";

/// The lock file an older gpuledger kept for its one local writer (removed on sight: Delta
/// commits keep concurrent writers apart now).
pub const LOCK: &str = ".lock";

/// The directory of the ledger's derived tables.
pub const LEDGER_DIR: &str = "ledger";

/// What the last ledger run read: `gpu_samples` rows per month, so that retention removes
/// only months whose figures the derived tables hold.
pub const LEDGER_INPUTS: &str = "ledger/.inputs.json";

/// The month before which samples were removed by retention (`{"samples_before":"YYYY-MM-01"}`):
/// ledger runs keep the figures of the months before it.
pub const EXPIRED_MARKER: &str = ".expired";

/// The directory of backfill markers.
pub const BACKFILL_DIR: &str = ".backfill";

/// The live collector's write-ahead-log directory when the configuration names none (relative to
/// the working directory: a WAL is local even for a store in object storage).
pub const DEFAULT_WAL_DIR: &str = "wal";

/// What the marker file holds.
pub fn marker_contents() -> String {
    format!("{{\"schema_version\":{}}}\n", gpuledger_schemas::SCHEMA_VERSION)
}

/// `<table>/date=YYYY-MM-DD`: the store path of a day partition.
pub fn partition_rel(table: &str, date: &str) -> String {
    format!("{table}/{PARTITION_KEY}={date}")
}

/// The date of a partition directory's name (`date=2026-10-01` -> `2026-10-01`).
pub fn partition_date(dir_name: &str) -> Option<&str> {
    dir_name.strip_prefix(PARTITION_KEY)?.strip_prefix('=')
}

/// `ledger/<table>.parquet`: the store path of a derived table.
pub fn derived_rel(table: &str) -> String {
    format!("{LEDGER_DIR}/{table}.parquet")
}

/// A ledger run's record of the tables it is publishing: written once all of them are staged,
/// removed once all of them are in place (`gpuledger-ledger`'s `publish`).
pub const PUBLISH_RECORD: &str = "ledger/.publish.json";

/// The prefix of staging directories' names in [`LEDGER_DIR`].
pub const STAGED_PREFIX: &str = ".staged-";

/// `ledger/.staged-<run>`: where a ledger run writes its derived tables before publishing them.
pub fn staged_rel(run: &str) -> String {
    format!("{LEDGER_DIR}/{STAGED_PREFIX}{run}")
}

/// `ledger/.work-<run>`: the scratch directory of one distributed ledger run.
pub fn work_rel(run: &str) -> String {
    format!("{LEDGER_DIR}/.work-{run}")
}

/// `.backfill/<key>`: the markers of one backfill.
pub fn backfill_rel(key: &str) -> String {
    format!("{BACKFILL_DIR}/{key}")
}

/// A name for one run of a writer, unique on this machine and sorting by start time:
/// `YYYYMMDDTHHMMSSffffff-<pid>` (UTC). File names carry it so that two runs never collide.
pub fn run_id() -> String {
    format!("{}-{}", chrono::Utc::now().format("%Y%m%dT%H%M%S%6f"), std::process::id())
}

/// Whether a file name is one a reader should take as data: visible and ending in `.parquet`.
pub fn is_data_file(name: &str) -> bool {
    !name.starts_with('.') && name.ends_with(".parquet")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        assert_eq!(partition_rel("gpu_samples", "2026-10-01"), "gpu_samples/date=2026-10-01");
        assert_eq!(partition_date("date=2026-10-01"), Some("2026-10-01"));
        assert_eq!(partition_date("other=1"), None);
        assert_eq!(derived_rel("chargeback_monthly"), "ledger/chargeback_monthly.parquet");
        assert!(is_data_file("part-1.parquet") && !is_data_file(".part-1.parquet.7.tmp") && !is_data_file("x.csv"));
        let id = run_id();
        assert_eq!(id.split('-').count(), 2, "{id}");
        assert_eq!(id.find('T'), Some(8), "{id}");
    }
}
