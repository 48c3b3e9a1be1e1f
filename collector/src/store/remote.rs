//! The store's file operations on object storage, for the synchronous writer.
//!
//! Object stores have no rename, and need none: a PUT (or a multipart upload, which becomes
//! visible only when completed) makes an object appear whole or not at all, so files are
//! written straight to their final key. A writer that dies mid-upload leaves no listed
//! object; the parts of an unfinished multipart upload are the bucket's lifecycle rule's to
//! expire (see README, "Object storage").
//!
//! The writer is synchronous (ingest runs on plain threads, the live collector's flusher on its
//! own thread), so each call runs the async client on a small runtime of its own.

use std::path::PathBuf;

use bytes::Bytes;
use futures::TryStreamExt;
use gpuledger_schemas::location::RemoteStore;

use crate::error::{Error, Result};

pub(crate) struct Remote {
    pub(crate) store: RemoteStore,
    rt: tokio::runtime::Runtime,
}

impl Remote {
    pub(crate) fn new(store: RemoteStore) -> Result<Remote> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("store-io")
            .enable_all()
            .build()
            .map_err(|e| Error::Store { path: PathBuf::from(store.url.as_str()), reason: format!("starting the object-store client: {e}") })?;
        Ok(Remote { store, rt })
    }

    /// The URL of `rel`, to name it in errors.
    pub(crate) fn name(&self, rel: &str) -> PathBuf {
        PathBuf::from(format!("{}{rel}", self.store.url))
    }

    fn err(&self, rel: &str, e: impl std::fmt::Display) -> Error {
        Error::Store { path: self.name(rel), reason: e.to_string() }
    }

    /// Runs `f` to completion on the client's runtime, also from inside another runtime.
    fn block_on<F>(&self, f: F) -> F::Output
    where
        F: std::future::Future + Send,
        F::Output: Send,
    {
        if tokio::runtime::Handle::try_current().is_ok() {
            std::thread::scope(|s| s.spawn(|| self.rt.block_on(f)).join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
        } else {
            self.rt.block_on(f)
        }
    }

    /// Names of the "directories" and of the objects directly under `rel_dir`, each sorted.
    pub(crate) fn list(&self, rel_dir: &str) -> Result<(Vec<String>, Vec<String>)> {
        self.block_on(self.store.list(rel_dir)).map_err(|e| self.err(rel_dir, e))
    }

    /// Whether anything at all is stored under the store's prefix.
    pub(crate) fn is_empty(&self) -> Result<bool> {
        let prefix = self.store.key("");
        let first = self.block_on(async { self.store.store.list(Some(&prefix)).try_next().await }).map_err(|e| self.err("", e))?;
        Ok(first.is_none())
    }

    pub(crate) fn exists(&self, rel: &str) -> Result<bool> {
        self.block_on(self.store.exists(rel)).map_err(|e| self.err(rel, e))
    }

    pub(crate) fn get(&self, rel: &str) -> Result<Bytes> {
        self.block_on(self.store.get(rel)).map_err(|e| self.err(rel, e))
    }

    /// Stores `bytes` at `rel` so that the object appears whole (see `RemoteStore::put`).
    pub(crate) fn put(&self, rel: &str, bytes: Vec<u8>) -> Result<()> {
        self.block_on(self.store.put(rel, bytes)).map_err(|e| self.err(rel, e))
    }
}
