//! The one way gpuledger writes a local file: whole or not at all.
//!
//! Bytes go to a hidden temporary file beside the target (`.<name>.<pid>.tmp`, never matched by
//! `*.parquet` or `*.csv` globs); [`AtomicFile::commit`] syncs it, renames it over the target and
//! syncs the directory, so a reader, or a machine that lost power, sees the old file or the new
//! one. A file dropped without `commit` (an error, a panic) removes its temporary file; one left by
//! a killed process is removed by [`remove_stale_temporaries`].

use std::fs::{self, File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Ends the name of every temporary file.
pub const TMP_SUFFIX: &str = ".tmp";

/// A file being written; it replaces `path` on [`commit`](AtomicFile::commit).
pub struct AtomicFile {
    path: PathBuf,
    tmp: PathBuf,
    /// `None` once committed.
    w: Option<BufWriter<File>>,
    bytes: u64,
}

impl AtomicFile {
    /// Starts writing `path`, creating its directory if needed.
    pub fn create(path: &Path) -> Result<AtomicFile> {
        let dir = parent(path);
        fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let tmp = temporary_name(path);
        let file = OpenOptions::new().write(true).create(true).truncate(true).open(&tmp).map_err(|e| Error::io(&tmp, e))?;
        Ok(AtomicFile { path: path.to_path_buf(), tmp, w: Some(BufWriter::with_capacity(1 << 20, file)), bytes: 0 })
    }

    /// The file this one will replace.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Syncs the data, renames it into place and makes the rename durable; returns the size.
    pub fn commit(mut self) -> Result<u64> {
        let Some(w) = self.w.take() else { return Err(Error::internal("an atomic file was committed twice")) };
        let result = (|| {
            let file = w.into_inner().map_err(|e| Error::io(&self.tmp, e.into_error()))?;
            file.sync_all().map_err(|e| Error::io(&self.tmp, e))?;
            drop(file);
            fs::rename(&self.tmp, &self.path).map_err(|e| Error::io(&self.path, e))?;
            sync_dir(parent(&self.path))
        })();
        if result.is_err() {
            // The error being returned matters more than a leftover temporary file.
            let _ = fs::remove_file(&self.tmp);
        }
        result.map(|()| self.bytes)
    }
}

impl Write for AtomicFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let w = self.w.as_mut().ok_or_else(|| std::io::Error::other("write after commit"))?;
        let n = w.write(buf)?;
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.w.as_mut().map_or(Ok(()), Write::flush)
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        if self.w.take().is_some() {
            let _ = fs::remove_file(&self.tmp);
        }
    }
}

/// Writes `bytes` to `path` atomically; returns the size.
pub fn write_file(path: &Path, bytes: &[u8]) -> Result<u64> {
    let mut f = AtomicFile::create(path)?;
    f.write_all(bytes).map_err(|e| Error::io(&f.tmp, e))?;
    f.commit()
}

/// Writes `path` atomically with `fill`, which may fail with the caller's own error; any
/// failure (fill's or the file system's) leaves the old file in place.
pub fn write_with<E: From<Error>>(path: &Path, fill: impl FnOnce(&mut AtomicFile) -> std::result::Result<(), E>) -> std::result::Result<u64, E> {
    let mut f = AtomicFile::create(path)?;
    fill(&mut f)?;
    Ok(f.commit()?)
}

/// Removes the temporary files a killed writer left in the partition directories under `root`
/// (`<root>/<table>/<partition>/`) and in `root` itself: those of processes that are gone.
/// Another writer may be running (Delta commits keep writers apart, not a lock), so a
/// temporary file of a live process is left alone. Returns how many were removed.
pub fn remove_stale_temporaries(root: &Path) -> Result<usize> {
    remove_stale_temporaries_to(root, 2)
}

/// As [`remove_stale_temporaries`], at every depth under `root` (`vacuum`: the ledger's day
/// tables lie three levels down, `ledger/days/<date>/`).
pub fn remove_all_stale_temporaries(root: &Path) -> Result<usize> {
    remove_stale_temporaries_to(root, usize::MAX)
}

fn remove_stale_temporaries_to(root: &Path, depth: usize) -> Result<usize> {
    let is_tmp = |n: &str| n.starts_with('.') && n.ends_with(TMP_SUFFIX) && writer_is_gone(n);
    let mut dirs = Vec::new();
    let mut level = vec![root.to_path_buf()];
    for _ in 0..=depth {
        if level.is_empty() {
            break;
        }
        let next: Vec<PathBuf> = level.iter().flat_map(|d| read_dirs(d)).collect();
        dirs.append(&mut level);
        level = next;
    }
    let mut removed = 0;
    for dir in dirs {
        let Ok(entries) = fs::read_dir(&dir) else { continue };
        for e in entries.flatten() {
            if is_tmp(&e.file_name().to_string_lossy()) && e.path().is_file() {
                fs::remove_file(e.path()).map_err(|err| Error::io(e.path(), err))?;
                removed += 1;
            }
        }
    }
    Ok(removed)
}

/// Whether the process that named the temporary file `.<name>.<pid>.tmp` has ended.
fn writer_is_gone(name: &str) -> bool {
    let pid = name.strip_suffix(TMP_SUFFIX).and_then(|n| n.rsplit('.').next()).and_then(|p| p.parse::<u32>().ok());
    pid.is_none_or(process_is_gone)
}

/// Whether process `pid` has ended. Where processes cannot be looked up (no `/proc`), only
/// this process is known to be alive, and no other is taken for gone.
fn process_is_gone(pid: u32) -> bool {
    pid != std::process::id() && Path::new("/proc").is_dir() && !Path::new("/proc").join(pid.to_string()).exists()
}

/// Removes the directories `<prefix><pid>-*` in `dir` whose process has ended: the scratch
/// directories of runs that were killed (a finished run removes its own). Returns how many.
pub fn remove_dead_scratch(dir: &Path, prefix: &str) -> Result<usize> {
    let Ok(entries) = fs::read_dir(dir) else { return Ok(0) };
    let mut removed = 0;
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let pid = name.strip_prefix(prefix).and_then(|rest| rest.split('-').next()).and_then(|p| p.parse::<u32>().ok());
        if pid.is_some_and(process_is_gone) && e.path().is_dir() {
            fs::remove_dir_all(e.path()).map_err(|err| Error::io(e.path(), err))?;
            removed += 1;
        }
    }
    Ok(removed)
}

fn read_dirs(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(dir) else { return Vec::new() };
    entries.flatten().map(|e| e.path()).filter(|p| p.is_dir()).collect()
}

/// `.<name>.<pid>.tmp` beside `path`: the pid keeps two processes (a report and a ledger run,
/// say) from writing one temporary file.
fn temporary_name(path: &Path) -> PathBuf {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    parent(path).join(format!(".{name}.{}{TMP_SUFFIX}", std::process::id()))
}

fn parent(path: &Path) -> &Path {
    path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."))
}

/// Makes a rename in `dir` durable. Directories cannot be opened for syncing on Windows.
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    #[cfg(unix)]
    File::open(dir).and_then(|d| d.sync_all()).map_err(|e| Error::io(dir, e))?;
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        v.sort();
        v
    }

    #[test]
    fn replaces_whole_and_leaves_nothing_behind_on_failure() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/a.txt");
        assert_eq!(write_file(&path, b"one").unwrap(), 3);
        write_file(&path, b"two").unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "two");
        let failed: std::result::Result<u64, Error> = write_with(&path, |f| {
            f.write_all(b"half").unwrap();
            Err(Error::internal("disk full"))
        });
        assert!(failed.is_err());
        assert_eq!(fs::read_to_string(&path).unwrap(), "two", "a failed write keeps the old file");
        assert_eq!(names(&dir.path().join("sub")), vec!["a.txt"], "no temporary file is left");
    }

    #[test]
    fn a_file_never_committed_is_not_seen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("b.parquet");
        let mut f = AtomicFile::create(&path).unwrap();
        f.write_all(b"partial").unwrap();
        assert!(!path.exists(), "nothing at the target while writing");
        drop(f);
        assert!(names(dir.path()).is_empty());
    }

    #[test]
    fn stale_temporaries_of_a_killed_writer_are_removed_and_a_live_ones_kept() {
        let dir = tempfile::tempdir().unwrap();
        let part = dir.path().join("gpu_samples/date=2026-10-01");
        fs::create_dir_all(&part).unwrap();
        // Process ids above Linux's largest (2^22) belong to no process.
        fs::write(part.join(".part-1.parquet.4000000000.tmp"), b"x").unwrap();
        fs::write(part.join("part-0.parquet"), b"y").unwrap();
        fs::write(dir.path().join(".gpuledger-store.4000000001.tmp"), b"z").unwrap();
        // A writer still running (this process) keeps its temporary file.
        let live = format!(".part-2.parquet.{}.tmp", std::process::id());
        fs::write(part.join(&live), b"w").unwrap();
        // Three levels down (a ledger day table's): only the walk of every depth finds it.
        let day = dir.path().join("ledger/days/2026-10-01");
        fs::create_dir_all(&day).unwrap();
        fs::write(day.join(".gpu_state_hours.0.parquet.4000000002.tmp"), b"").unwrap();
        assert_eq!(remove_stale_temporaries(dir.path()).unwrap(), 2);
        assert_eq!(names(&part), vec![live.clone(), "part-0.parquet".to_string()]);
        assert_eq!(names(dir.path()), vec!["gpu_samples", "ledger"]);
        assert_eq!(names(&day).len(), 1);
        assert_eq!(remove_all_stale_temporaries(dir.path()).unwrap(), 1);
        assert!(names(&day).is_empty());
    }

    #[test]
    fn scratch_of_dead_processes_goes_and_the_rest_stays() {
        let dir = tempfile::tempdir().unwrap();
        // No process has pid 999999999 (above any pid_max).
        let dead = dir.path().join("gpuledger-run-999999999-abc");
        let ours = dir.path().join(format!("gpuledger-run-{}-def", std::process::id()));
        let other = dir.path().join("gpuledger-run-xyz");
        let unrelated = dir.path().join("something-999999999-else");
        for d in [&dead, &ours, &other, &unrelated] {
            fs::create_dir_all(d.join("carried")).unwrap();
        }
        assert_eq!(remove_dead_scratch(dir.path(), "gpuledger-run-").unwrap(), 1);
        assert!(!dead.exists() && ours.exists() && other.exists() && unrelated.exists());
    }
}
