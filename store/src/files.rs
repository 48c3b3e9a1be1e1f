//! Every read and write of store files, the same on a directory and in object storage.
//!
//! The async methods on [`StoreLocation`] serve async callers (the ledger, `serve`); [`BlockingStore`]
//! gives the same operations to the synchronous writers (ingest threads, the live collector's
//! flusher), running the object-store client on a small runtime of its own.

use std::path::{Path, PathBuf};

use bytes::Bytes;
use futures::TryStreamExt;

use crate::atomic;
use crate::error::{Error, Result};
use crate::layout::MARKER;
use crate::location::{RemoteStore, StoreLocation};

fn remote_err(r: &RemoteStore, rel: &str, source: object_store::Error) -> Error {
    Error::Remote { url: format!("{}{rel}", r.url), source }
}

impl StoreLocation {
    /// Fails unless a store is here (a directory, or a prefix holding the marker object).
    pub async fn check(&self) -> Result<()> {
        match self {
            StoreLocation::Local(root) if !root.is_dir() => {
                Err(Error::Refused { path: root.clone(), reason: "no such directory (run `gpuledger ingest` first)".into() })
            }
            StoreLocation::Local(_) => Ok(()),
            StoreLocation::Remote(r) => match self.has_file(MARKER).await? {
                true => Ok(()),
                false => Err(Error::Refused {
                    path: PathBuf::from(r.url.as_str()),
                    reason: format!("no gpuledger store here (no {MARKER} object; run `gpuledger ingest` first)"),
                }),
            },
        }
    }

    /// Names (files and directories) directly under the store directory `rel`, sorted; none if
    /// it does not exist.
    pub async fn list_names(&self, rel: &str) -> Result<Vec<String>> {
        match self {
            StoreLocation::Local(root) => list_local(&root.join(rel)),
            StoreLocation::Remote(r) => {
                let (mut dirs, files) = r.list(rel).await.map_err(|e| remote_err(r, rel, e))?;
                dirs.extend(files);
                dirs.sort();
                Ok(dirs)
            }
        }
    }

    /// Files directly under the directory `rel` with their sizes, sorted by name; none if it
    /// does not exist.
    pub async fn list_sizes(&self, rel: &str) -> Result<Vec<(String, u64)>> {
        match self {
            StoreLocation::Local(root) => {
                let dir = root.join(rel);
                let mut out = Vec::new();
                for name in list_local(&dir)? {
                    let meta = std::fs::metadata(dir.join(&name)).map_err(|e| Error::io(dir.join(&name), e))?;
                    if meta.is_file() {
                        out.push((name, meta.len()));
                    }
                }
                Ok(out)
            }
            StoreLocation::Remote(r) => {
                let prefix = r.key(rel);
                let listing = r.store.list_with_delimiter(Some(&prefix)).await.map_err(|e| remote_err(r, rel, e))?;
                let mut out: Vec<(String, u64)> = listing.objects.iter().filter_map(|o| o.location.filename().map(|n| (n.to_string(), o.size))).collect();
                out.sort();
                Ok(out)
            }
        }
    }

    /// Whether anything is under the directory `rel` (in object storage, where directories do
    /// not exist, whether any key starts with it).
    pub async fn has_dir(&self, rel: &str) -> Result<bool> {
        match self {
            StoreLocation::Local(root) => Ok(root.join(rel).is_dir()),
            StoreLocation::Remote(_) => Ok(!self.list_names(rel).await?.is_empty()),
        }
    }

    /// Whether the file `rel` is in the store.
    pub async fn has_file(&self, rel: &str) -> Result<bool> {
        match self {
            StoreLocation::Local(root) => Ok(root.join(rel).is_file()),
            StoreLocation::Remote(r) => r.exists(rel).await.map_err(|e| remote_err(r, rel, e)),
        }
    }

    /// The bytes of the file `rel`.
    pub async fn get(&self, rel: &str) -> Result<Bytes> {
        match self {
            StoreLocation::Local(root) => {
                let path = root.join(rel);
                std::fs::read(&path).map(Bytes::from).map_err(|e| Error::io(&path, e))
            }
            StoreLocation::Remote(r) => r.get(rel).await.map_err(|e| remote_err(r, rel, e)),
        }
    }

    /// Writes `bytes` as the file `rel` so that readers see the old file or the new one, never
    /// part of one: an atomic local write, or one PUT (a multipart upload, listed only once
    /// complete, for a large object). Returns the size.
    pub async fn write_whole(&self, rel: &str, bytes: Vec<u8>) -> Result<u64> {
        let len = bytes.len() as u64;
        match self {
            StoreLocation::Local(root) => atomic::write_file(&root.join(rel), &bytes),
            StoreLocation::Remote(r) => r.put(rel, bytes).await.map(|()| len).map_err(|e| remote_err(r, rel, e)),
        }
    }

    /// Moves the file `from` to `to`, replacing what is there: an atomic rename made durable
    /// locally; a copy, then a delete, in object storage (where `to` changes in one PUT).
    pub async fn rename_file(&self, from: &str, to: &str) -> Result<()> {
        match self {
            StoreLocation::Local(root) => {
                let target = root.join(to);
                std::fs::rename(root.join(from), &target).map_err(|e| Error::io(root.join(from), e))?;
                atomic::sync_dir(target.parent().unwrap_or(root))
            }
            StoreLocation::Remote(r) => object_store::ObjectStoreExt::rename(r.store.as_ref(), &r.key(from), &r.key(to)).await.map_err(|e| remote_err(r, from, e)),
        }
    }

    /// Removes the file `rel` (a missing one is fine).
    pub async fn remove_file(&self, rel: &str) -> Result<()> {
        match self {
            StoreLocation::Local(root) => match std::fs::remove_file(root.join(rel)) {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(Error::io(root.join(rel), e)),
            },
            StoreLocation::Remote(r) => match object_store::ObjectStoreExt::delete(r.store.as_ref(), &r.key(rel)).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
                Err(e) => Err(remote_err(r, rel, e)),
            },
        }
    }

    /// Removes the directory `rel` and everything under it (a missing one is fine).
    pub async fn remove_dir(&self, rel: &str) -> Result<()> {
        match self {
            StoreLocation::Local(root) => match std::fs::remove_dir_all(root.join(rel)) {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(Error::io(root.join(rel), e)),
            },
            StoreLocation::Remote(r) => {
                let prefix = r.key(rel);
                let objects: Vec<_> = r.store.list(Some(&prefix)).map_ok(|o| o.location).try_collect().await.map_err(|e| remote_err(r, rel, e))?;
                for key in objects {
                    object_store::ObjectStoreExt::delete(r.store.as_ref(), &key).await.map_err(|e| remote_err(r, rel, e))?;
                }
                Ok(())
            }
        }
    }

    /// Whether nothing at all is stored here.
    pub async fn is_empty(&self) -> Result<bool> {
        match self {
            StoreLocation::Local(root) => match std::fs::read_dir(root) {
                Ok(mut entries) => Ok(entries.next().is_none()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(true),
                Err(e) => Err(Error::io(root, e)),
            },
            StoreLocation::Remote(r) => {
                let prefix = r.key("");
                let first = r.store.list(Some(&prefix)).try_next().await.map_err(|e| remote_err(r, "", e))?;
                Ok(first.is_none())
            }
        }
    }

    /// The name of `rel` in messages: a path, or a URL.
    pub fn display(&self, rel: &str) -> PathBuf {
        PathBuf::from(self.join(rel))
    }
}

/// Entry names of a local directory, sorted; a missing directory has none.
pub fn list_local(dir: &Path) -> Result<Vec<String>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io(dir, e)),
    };
    let mut names = Vec::new();
    for entry in entries {
        names.push(entry.map_err(|e| Error::io(dir, e))?.file_name().to_string_lossy().into_owned());
    }
    names.sort();
    Ok(names)
}

impl Drop for BlockingStore {
    fn drop(&mut self) {
        // A store may be dropped inside another runtime (an async caller's), where a runtime's
        // blocking shutdown panics; nothing of ours is still running by then.
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

/// The store operations for synchronous code.
pub struct BlockingStore {
    location: StoreLocation,
    /// The runtime the async operations run on (an `Option` only so that `drop` can take it).
    rt: Option<tokio::runtime::Runtime>,
}

impl BlockingStore {
    pub fn new(location: &StoreLocation) -> Result<BlockingStore> {
        // Also for a directory: delta-rs reads and commits a table's log through tokio.
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("store-io")
            .enable_all()
            .build()
            .map_err(|e| Error::Refused { path: location.display(""), reason: format!("starting the store's I/O runtime: {e}") })?;
        Ok(BlockingStore { location: location.clone(), rt: Some(rt) })
    }

    pub fn location(&self) -> &StoreLocation {
        &self.location
    }

    /// Runs one of the location's async operations to completion, also from inside another
    /// runtime (a runtime cannot block on its own thread, so a scoped thread waits instead).
    pub(crate) fn run<T: Send>(&self, f: impl std::future::Future<Output = Result<T>> + Send) -> Result<T> {
        let Some(rt) = &self.rt else { return Err(Error::internal("the store's runtime is gone")) };
        if tokio::runtime::Handle::try_current().is_ok() {
            std::thread::scope(|s| s.spawn(|| rt.block_on(f)).join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
        } else {
            rt.block_on(f)
        }
    }

    pub fn list_names(&self, rel: &str) -> Result<Vec<String>> {
        self.run(self.location.list_names(rel))
    }

    pub fn has_file(&self, rel: &str) -> Result<bool> {
        self.run(self.location.has_file(rel))
    }

    pub fn get(&self, rel: &str) -> Result<Bytes> {
        self.run(self.location.get(rel))
    }

    pub fn write_whole(&self, rel: &str, bytes: Vec<u8>) -> Result<u64> {
        self.run(self.location.write_whole(rel, bytes))
    }

    pub fn is_empty(&self) -> Result<bool> {
        self.run(self.location.is_empty())
    }

    pub fn snapshot(&self, table_rel: &str) -> Result<crate::Snapshot> {
        self.run(self.location.snapshot(table_rel))
    }

    pub fn ensure_table(&self, table_rel: &str, schema: &arrow::datatypes::Schema, partitioned: bool) -> Result<crate::Ensured> {
        self.run(self.location.ensure_table(table_rel, schema, partitioned))
    }

    pub fn commit(&self, table_rel: &str, read_version: Option<u64>, adds: &[crate::DataFile], removes: &[crate::DataFile], kind: crate::CommitKind) -> Result<u64> {
        self.run(self.location.commit(table_rel, read_version, adds, removes, kind))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn removes_a_directory_of_objects_and_only_it() {
        let location = StoreLocation::parse("memory://store-files-test/p").unwrap();
        for rel in ["ledger/.work-1/a.parquet", "ledger/.work-1/b.parquet", "ledger/chargeback_monthly.parquet"] {
            location.write_whole(rel, b"x".to_vec()).await.unwrap();
        }
        assert_eq!(location.list_names("ledger").await.unwrap(), vec![".work-1".to_string(), "chargeback_monthly.parquet".to_string()]);
        location.remove_dir("ledger/.work-1").await.unwrap();
        assert_eq!(location.list_names("ledger").await.unwrap(), vec!["chargeback_monthly.parquet".to_string()]);
        assert!(location.has_file("ledger/chargeback_monthly.parquet").await.unwrap());
        assert!(!location.has_file("ledger/.work-1/a.parquet").await.unwrap());
    }

    #[test]
    fn the_blocking_store_sees_what_the_async_one_wrote_on_a_directory_and_in_memory() {
        let dir = tempfile::tempdir().unwrap();
        for location in [StoreLocation::Local(dir.path().to_path_buf()), StoreLocation::parse("memory://store-files-test/blocking").unwrap()] {
            let store = BlockingStore::new(&location).unwrap();
            assert!(store.is_empty().unwrap());
            assert_eq!(store.write_whole("t/date=2026-10-01/part-a.parquet", b"abc".to_vec()).unwrap(), 3);
            assert_eq!(store.list_names("t").unwrap(), vec!["date=2026-10-01".to_string()]);
            assert_eq!(store.get("t/date=2026-10-01/part-a.parquet").unwrap().as_ref(), b"abc");
            assert!(store.has_file("t/date=2026-10-01/part-a.parquet").unwrap() && !store.is_empty().unwrap());
            assert!(store.list_names("absent").unwrap().is_empty());
        }
    }
}
