//! Where the DCGM text goes: capture files ([`FileSink`], what `simulate --out` writes), or a
//! caller's [`DcgmSink`] that takes the text in memory (`simulate --store` hands it to the
//! collector's parser, so a month at fleet size never lands on disk as text).
//!
//! A sink sees each capture file as a run of [`DcgmSink::write`] calls for one path, then one
//! [`DcgmSink::close`]: the same bytes, in the same order, whichever sink it is.

use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex};

use crate::error::{Result, SimError};
use crate::out::{AtomicFile, create_dir};

/// Takes the DCGM text of one node's capture files.
pub trait DcgmSink: Send {
    /// The next lines of capture file `rel` (relative to the capture directory, e.g.
    /// `dcgm/gpu-h100-000/2026-11-01.prom`): one whole scrape (every line of it, and of the
    /// HA replica's copy of it where the window holds both, in one call), so a consumer may
    /// take rows after any call.
    fn write(&mut self, rel: &Path, text: &[u8]) -> Result<()>;
    /// `rel` is complete: no more lines of it follow.
    fn close(&mut self, rel: &Path) -> Result<()>;
    /// No more files follow from this sink's thread: hand on anything held back.
    fn finish(&mut self) -> Result<()> {
        Ok(())
    }
}

/// Writes capture files under a directory, each atomically (it appears whole at `close`).
pub struct FileSink {
    root: PathBuf,
    open: Option<(PathBuf, AtomicFile)>,
}

impl FileSink {
    pub fn new(root: &Path) -> Self {
        FileSink { root: root.to_path_buf(), open: None }
    }
}

impl DcgmSink for FileSink {
    fn write(&mut self, rel: &Path, text: &[u8]) -> Result<()> {
        if self.open.as_ref().is_none_or(|(p, _)| p != rel) {
            let path = self.root.join(rel);
            if let Some(dir) = path.parent() {
                create_dir(dir)?;
            }
            // A file left open by a caller that never closed it is dropped (not committed).
            self.open = Some((rel.to_path_buf(), AtomicFile::create(&path)?));
        }
        match self.open.as_mut() {
            Some((_, f)) => std::io::Write::write_all(f, text).map_err(|e| SimError::io(f.path(), e)),
            None => Err(SimError::internal("capture file not open")),
        }
    }

    fn close(&mut self, rel: &Path) -> Result<()> {
        match self.open.take() {
            Some((p, f)) if p == rel => f.commit().map(|_| ()).map_err(SimError::from),
            other => {
                self.open = other;
                Err(SimError::internal(format!("close of {} which is not open", rel.display())))
            }
        }
    }

    fn finish(&mut self) -> Result<()> {
        match &self.open {
            Some((p, _)) => Err(SimError::internal(format!("{} was never closed", p.display()))),
            None => Ok(()),
        }
    }
}

/// Keeps nodes written on their own threads within a day of each other, so that a consumer of
/// the text (the store writer, whose duplicate check holds a few days' keys at a time) sees the
/// days of every node in turn instead of a whole month of one node after another.
pub struct DayGate {
    /// The UTC day (days since the epoch) each node is writing; `i64::MAX` once it is done.
    days: Mutex<Vec<i64>>,
    moved: Condvar,
}

impl DayGate {
    pub fn new(nodes: usize, first_day: i64) -> Self {
        DayGate { days: Mutex::new(vec![first_day; nodes]), moved: Condvar::new() }
    }

    /// Node `node` is about to write day `day`: waits until no node is more than a day behind.
    /// The node furthest behind never waits, so every node gets through.
    pub fn enter(&self, node: usize, day: i64) {
        let mut days = self.days.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(d) = days.get_mut(node) {
            *d = day;
        }
        self.moved.notify_all();
        while days.iter().copied().min().is_some_and(|slowest| slowest < day - 1) {
            days = self.moved.wait(days).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Node `node` has written everything (or failed): it holds nobody back any more.
    pub fn leave(&self, node: usize) {
        let mut days = self.days.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(d) = days.get_mut(node) {
            *d = i64::MAX;
        }
        self.moved.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_appears_whole_on_close() {
        let dir = tempfile::tempdir().unwrap();
        let mut sink = FileSink::new(dir.path());
        let rel = Path::new("dcgm/n/2026-11-01.prom");
        sink.write(rel, b"a 1 1\n").unwrap();
        sink.write(rel, b"b 2 1\n").unwrap();
        assert!(!dir.path().join(rel).exists(), "not before close");
        sink.close(rel).unwrap();
        assert_eq!(std::fs::read(dir.path().join(rel)).unwrap(), b"a 1 1\nb 2 1\n");
        assert!(sink.close(rel).is_err(), "closed twice");
    }

    #[test]
    fn the_gate_keeps_nodes_within_a_day() {
        let gate = std::sync::Arc::new(DayGate::new(2, 10));
        let log = std::sync::Arc::new(Mutex::new(Vec::new()));
        let handles: Vec<_> = (0..2)
            .map(|node| {
                let (gate, log) = (gate.clone(), log.clone());
                std::thread::spawn(move || {
                    // Node 1 starts late: node 0 must wait for it after day 11.
                    if node == 1 {
                        std::thread::sleep(std::time::Duration::from_millis(50));
                    }
                    for day in 10..15 {
                        gate.enter(node, day);
                        log.lock().unwrap().push((node, day));
                    }
                    gate.leave(node);
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        let log = log.lock().unwrap();
        assert_eq!(log.len(), 10);
        // When a node starts day d, the other has entered day d - 1 (logged: d - 2, as it may
        // not have logged its entry yet). Without the gate node 0 is through day 14 first.
        let mut reached = [9i64, 9];
        for &(node, day) in log.iter() {
            reached[node] = day;
            assert!(reached[1 - node] >= day - 2, "{log:?}");
        }
    }
}
