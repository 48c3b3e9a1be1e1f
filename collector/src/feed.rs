//! Exposition text handed over in memory, file by file, instead of read from disk: what a
//! producer that would otherwise write a capture (the simulator, for `simulate --store`) gives
//! to the store directly. The text is read by the same source ([`DcgmText`]) and table builder
//! as `ingest` reads capture files, so the store gets the rows an ingest of those files would
//! give it; only the disk is skipped.
//!
//! A [`Feed`] owns the store writer; each producer thread takes a [`TextFeed`] of its own
//! (a text source remembers label sets, as an ingest worker's does). Unlike a capture file,
//! whose rows can only be handed on at its end (`/federate` groups lines by metric, so a GPU's
//! row at one time gathers lines from anywhere in the file), the text comes a whole scrape at a
//! time, so rows are handed on every few thousand: memory holds a few scrapes per producer,
//! not a day of every node.

use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::diag::Diagnostics;
use crate::error::{Error, Result};
use crate::ingest::{Format, IngestSummary};
use crate::sources::{DcgmText, Origin, Source};
use crate::store::Store;
use crate::tables::samples::SampleTables;

/// Rows a [`TextFeed`] gathers before it hands them to the writer.
const HAND_OVER_ROWS: usize = 8 * 1024;

/// The store writer shared by the producer's threads, and what they read.
pub struct Feed {
    store: Mutex<Store>,
    read: Mutex<IngestSummary>,
}

impl Feed {
    pub fn new(store: Store) -> Arc<Feed> {
        Arc::new(Feed { store: Mutex::new(store), read: Mutex::new(IngestSummary::default()) })
    }

    /// A reader of text files for one producer thread.
    pub fn text(self: &Arc<Self>) -> TextFeed {
        TextFeed { feed: Arc::clone(self), source: DcgmText::file(), tables: SampleTables::new(), read: IngestSummary::default() }
    }

    /// The writer back, with what was read (files, bytes, samples, diagnostics; no store
    /// figures: the writer has not finished). Fails while a [`TextFeed`] is still alive.
    pub fn into_parts(self: Arc<Self>) -> Result<(Store, IngestSummary)> {
        let feed = Arc::try_unwrap(self).map_err(|_| Error::internal("a text feed is still open"))?;
        let store = feed.store.into_inner().unwrap_or_else(|p| p.into_inner());
        let read = feed.read.into_inner().unwrap_or_else(|p| p.into_inner());
        Ok((store, read))
    }

    fn store(&self) -> MutexGuard<'_, Store> {
        // A producer thread that panicked while writing leaves the writer as it was: a flush
        // either committed or did not.
        self.store.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// One producer thread's reader: [`TextFeed::write`] the lines of a file, then
/// [`TextFeed::close`] it; [`TextFeed::finish`] when the thread is done.
pub struct TextFeed {
    feed: Arc<Feed>,
    source: DcgmText,
    tables: SampleTables,
    read: IngestSummary,
}

impl TextFeed {
    /// Lines of the file named `path` (the name a capture would give it: samples without a
    /// time of their own take the one it names), holding whole rows: every line of one series
    /// at one time is in the same call (a whole scrape is). Rows are handed to the writer once
    /// enough have gathered; a row split between two calls would be stored half, the other
    /// half taken for a duplicate.
    pub fn write(&mut self, path: &Path, text: &[u8]) -> Result<()> {
        let mut diags = Diagnostics::new();
        let loaded = self.source.read(text, &Origin::file(path, None), &mut self.tables, &mut diags);
        self.read.bytes_read += text.len() as u64;
        self.read.samples += loaded.samples;
        self.read.blank_samples += loaded.blank;
        self.read.rejected += diags.errors.len() as u64;
        self.read.diagnostics.merge(diags);
        if self.tables.rows() >= HAND_OVER_ROWS { self.hand_over() } else { Ok(()) }
    }

    /// The file `path` is complete (counted as one file read).
    pub fn close(&mut self, _path: &Path) {
        *self.read.files.entry(Format::PrometheusText).or_default() += 1;
    }

    /// Hands everything gathered to the writer and adds this reader's counts to the feed's.
    pub fn finish(&mut self) -> Result<()> {
        self.hand_over()?;
        let read = std::mem::take(&mut self.read);
        self.feed.read.lock().unwrap_or_else(|p| p.into_inner()).merge(read);
        Ok(())
    }

    fn hand_over(&mut self) -> Result<()> {
        let batches = self.tables.take_batches()?;
        let mut store = self.feed.store();
        for b in batches {
            store.append(b)?;
        }
        Ok(())
    }
}
