//! The few things the ledger does to the store itself, the same on a directory and on object
//! storage: check it is one, list a table's partitions, write a derived table whole.
//!
//! Everything else (reading the Parquet) is DataFusion's, through listing tables over the
//! store's URL; for object storage the store's client is registered with the session.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use datafusion::prelude::SessionContext;
use gpuledger_schemas::location::{STORE_MARKER as MARKER, StoreLocation};

use crate::error::{Error, Result};


fn remote_err(location: &StoreLocation, rel: &str, e: impl std::fmt::Display) -> Error {
    Error::Store { path: PathBuf::from(location.join(rel)), reason: e.to_string() }
}

/// Fails unless `location` holds a store.
pub async fn check(location: &StoreLocation) -> Result<()> {
    match location {
        StoreLocation::Local(root) if !root.is_dir() => Err(Error::Store { path: root.clone(), reason: "no such directory (run `gpuledger ingest` first)".into() }),
        StoreLocation::Local(_) => Ok(()),
        StoreLocation::Remote(r) => match r.exists(MARKER).await {
            Ok(true) => Ok(()),
            Ok(false) => Err(remote_err(location, "", format!("no gpuledger store here (no {MARKER} object; run `gpuledger ingest` first)"))),
            Err(e) => Err(remote_err(location, "", e)),
        },
    }
}

/// Lets `ctx` read the store's URLs (a no-op for a directory).
pub fn register_client(ctx: &SessionContext, location: &StoreLocation) {
    if let StoreLocation::Remote(r) = location {
        ctx.register_object_store(&r.bucket_url(), Arc::clone(&r.store));
    }
}

/// Names under the store directory `rel` (files and directories), sorted; none if missing.
pub async fn list_names(location: &StoreLocation, rel: &str) -> Result<Vec<String>> {
    match location {
        StoreLocation::Local(root) => {
            let dir = root.join(rel);
            let entries = match std::fs::read_dir(&dir) {
                Ok(e) => e,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
                Err(e) => return Err(Error::Store { path: dir, reason: e.to_string() }),
            };
            let mut names = Vec::new();
            for entry in entries {
                let entry = entry.map_err(|e| Error::Store { path: dir.clone(), reason: e.to_string() })?;
                names.push(entry.file_name().to_string_lossy().into_owned());
            }
            names.sort();
            Ok(names)
        }
        StoreLocation::Remote(r) => {
            let (mut dirs, files) = r.list(rel).await.map_err(|e| remote_err(location, rel, e))?;
            dirs.extend(files);
            dirs.sort();
            Ok(dirs)
        }
    }
}

/// Whether the store has anything under the directory `rel` (for object storage, where
/// directories do not exist, whether any object's key starts with it).
pub async fn has_dir(location: &StoreLocation, rel: &str) -> Result<bool> {
    match location {
        StoreLocation::Local(root) => Ok(root.join(rel).is_dir()),
        StoreLocation::Remote(_) => Ok(!list_names(location, rel).await?.is_empty()),
    }
}

/// Whether the file `rel` is in the store.
pub async fn has_file(location: &StoreLocation, rel: &str) -> Result<bool> {
    match location {
        StoreLocation::Local(root) => Ok(root.join(rel).is_file()),
        StoreLocation::Remote(r) => r.exists(rel).await.map_err(|e| remote_err(location, rel, e)),
    }
}

/// Writes `bytes` to the store file `rel` so that readers see the old file or the new one,
/// never part of one: a synced temporary file renamed into place, or one PUT.
pub async fn write_whole(location: &StoreLocation, rel: &str, bytes: Vec<u8>) -> Result<()> {
    match location {
        StoreLocation::Local(root) => {
            let path = root.join(rel);
            let io = |p: &Path, e: std::io::Error| Error::Store { path: p.to_path_buf(), reason: e.to_string() };
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
            }
            crate::atomic::write_file(&path, |mut f| std::io::Write::write_all(&mut f, &bytes).map_err(|e| io(&path, e)), io)
        }
        StoreLocation::Remote(r) => r.put(rel, bytes).await.map_err(|e| remote_err(location, rel, e)),
    }
}

/// Removes the store directory `rel` and everything under it (a missing one is fine).
pub async fn remove_dir(location: &StoreLocation, rel: &str) -> Result<()> {
    match location {
        StoreLocation::Local(root) => match std::fs::remove_dir_all(root.join(rel)) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::Store { path: root.join(rel), reason: e.to_string() }),
        },
        StoreLocation::Remote(r) => {
            use futures::TryStreamExt;
            let prefix = r.key(rel);
            let objects: Vec<_> = r.store.list(Some(&prefix)).map_ok(|o| o.location).try_collect().await.map_err(|e| remote_err(location, rel, e))?;
            for key in objects {
                object_store::ObjectStoreExt::delete(r.store.as_ref(), &key).await.map_err(|e| remote_err(location, rel, e))?;
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn removes_a_directory_of_objects_and_only_it() {
        let location = StoreLocation::parse("memory://ledger-store-test/p").unwrap();
        for rel in ["ledger/.work-1/a.parquet", "ledger/.work-1/b.parquet", "ledger/chargeback_monthly.parquet"] {
            write_whole(&location, rel, b"x".to_vec()).await.unwrap();
        }
        assert_eq!(list_names(&location, "ledger").await.unwrap(), vec![".work-1".to_string(), "chargeback_monthly.parquet".to_string()]);
        remove_dir(&location, "ledger/.work-1").await.unwrap();
        assert_eq!(list_names(&location, "ledger").await.unwrap(), vec!["chargeback_monthly.parquet".to_string()]);
        assert!(has_file(&location, "ledger/chargeback_monthly.parquet").await.unwrap());
    }
}
