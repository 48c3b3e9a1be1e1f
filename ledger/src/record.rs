//! The record a `gpuledger ledger` run leaves beside its derived tables (`ledger/run.json`):
//! what it read (each raw table's version), the digest of every setting that changes figures,
//! and the settings reports label figures with. With it a report, or a server, can tell whether
//! the stored tables answer for the configuration at hand and the store as it is now, and say
//! why not.

use std::collections::BTreeMap;

use gpuledger_store::StoreLocation;
use serde::{Deserialize, Serialize};

use crate::config::{Config, IdlePolicy};
use crate::error::{Error, Result};

/// Where the record is, relative to the store.
pub const RUN_RECORD: &str = "ledger/run.json";

/// Bumped when what the record holds changes: an older record is then no record.
const FORMAT: u32 = 1;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct RunRecord {
    pub format: u32,
    /// gpuledger's version that ran the ledger.
    pub gpuledger: String,
    /// The digest of each thing that changes figures (`crate::settings::digests`).
    pub settings: BTreeMap<String, String>,
    /// The idle policy and currency the figures were computed with.
    pub idle_policy: String,
    pub currency: String,
    /// Each raw table's Delta version the run read (`None`: a table never written).
    pub inputs: BTreeMap<String, Option<u64>>,
    /// The days of samples it accounted.
    pub days: usize,
}

/// Whether the stored derived tables answer for a configuration and the store as it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Freshness {
    /// They do: no step needs to run again.
    Current(RunRecord),
    /// No ledger run left a record (never run, or run by an older gpuledger).
    NoRecord,
    /// The record is of other settings: the names of those that differ.
    OtherSettings(Vec<String>),
    /// The store changed since: the raw tables with a newer version.
    NewData(Vec<String>),
}

impl Freshness {
    /// Why the stored tables cannot be used, in a phrase (`None`: they can).
    pub fn why_not(&self) -> Option<String> {
        match self {
            Freshness::Current(_) => None,
            Freshness::NoRecord => Some("no `gpuledger ledger` run has stored its tables (or an older version did)".into()),
            Freshness::OtherSettings(names) => Some(format!("the stored tables were computed with other settings ({})", names.join(", "))),
            Freshness::NewData(tables) => Some(format!("the store has new data since the last `gpuledger ledger` run ({})", tables.join(", "))),
        }
    }
}

/// The versions of the store's raw tables now.
pub async fn input_versions(store: &StoreLocation) -> Result<BTreeMap<String, Option<u64>>> {
    let mut out = BTreeMap::new();
    for t in gpuledger_schemas::TABLES {
        out.insert(t.name.to_string(), store.snapshot(t.name).await?.version);
    }
    Ok(out)
}

/// The record of a run over `inputs` with `config` (and the idle policy it ran with).
pub fn record(config: &Config, idle_policy: Option<IdlePolicy>, inputs: BTreeMap<String, Option<u64>>, days: usize) -> Result<RunRecord> {
    Ok(RunRecord {
        format: FORMAT,
        gpuledger: env!("CARGO_PKG_VERSION").to_string(),
        settings: crate::settings::digests(config, idle_policy)?,
        idle_policy: idle_policy.unwrap_or(config.accounting.idle_policy).as_str().to_string(),
        currency: config.accounting.currency.clone(),
        inputs,
        days,
    })
}

/// Writes the record (after the derived tables: a record that is there vouches for them).
pub async fn write(store: &StoreLocation, record: &RunRecord) -> Result<()> {
    let bytes = serde_json::to_vec_pretty(record).map_err(|e| Error::internal(format!("encoding the ledger's run record: {e}")))?;
    store.write_whole(RUN_RECORD, bytes).await?;
    Ok(())
}

/// The stored record, if there is a readable one of this format.
pub async fn read(store: &StoreLocation) -> Result<Option<RunRecord>> {
    Ok(read_json::<RunRecord>(store, RUN_RECORD).await?.and_then(|r| r.ok()).filter(|r| r.format == FORMAT))
}

/// One of the small JSON files the ledger keeps beside its tables (this record, what a run read,
/// a publish under way), parsed (`None`: there is none).
pub(crate) async fn read_json<T: serde::de::DeserializeOwned>(location: &StoreLocation, rel: &str) -> Result<Option<serde_json::Result<T>>> {
    if !location.has_file(rel).await? {
        return Ok(None);
    }
    Ok(Some(serde_json::from_slice(&location.get(rel).await?)))
}

/// Before a run writes its tables: the record of the previous run no longer vouches for them.
pub async fn remove(store: &StoreLocation) -> Result<()> {
    Ok(store.remove_file(RUN_RECORD).await?)
}

/// Whether the store's derived tables answer for `config` (with `idle_policy`) and the store now.
pub async fn freshness(store: &StoreLocation, config: &Config, idle_policy: Option<IdlePolicy>) -> Result<Freshness> {
    let Some(stored) = read(store).await? else { return Ok(Freshness::NoRecord) };
    let wanted = record(config, idle_policy, BTreeMap::new(), 0)?;
    let mut differ: Vec<String> = wanted.settings.iter().filter(|(k, v)| stored.settings.get(*k) != Some(*v)).map(|(k, _)| k.clone()).collect();
    if stored.gpuledger != wanted.gpuledger && !differ.iter().any(|d| d == "accounting SQL") {
        differ.push("accounting SQL".into());
    }
    if !differ.is_empty() {
        return Ok(Freshness::OtherSettings(differ));
    }
    let now = input_versions(store).await?;
    let newer: Vec<String> = now.iter().filter(|(t, v)| stored.inputs.get(*t) != Some(*v)).map(|(t, _)| t.clone()).collect();
    if !newer.is_empty() {
        return Ok(Freshness::NewData(newer));
    }
    Ok(Freshness::Current(stored))
}
