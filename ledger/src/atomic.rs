//! Files that appear whole or not at all: derived tables, reports, FOCUS exports.

use std::fs::{self, File, OpenOptions};
use std::path::Path;

/// Writes `path` through a hidden temporary file in the same directory: `fill` writes it,
/// then it is synced and renamed over `path`, and the directory is synced, so a reader sees
/// the old file or the new one, never half of one. `io` turns an I/O error on a path into
/// the caller's error type. On failure the temporary file is removed.
pub fn write_file<E>(path: &Path, fill: impl FnOnce(&File) -> Result<(), E>, io: impl Fn(&Path, std::io::Error) -> E) -> Result<(), E> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));

    let result = (|| {
        let file = OpenOptions::new().write(true).create(true).truncate(true).open(&tmp).map_err(|e| io(&tmp, e))?;
        fill(&file)?;
        file.sync_all().map_err(|e| io(&tmp, e))?;
        fs::rename(&tmp, path).map_err(|e| io(path, e))
    })();
    if result.is_err() {
        // Best effort: the error being returned matters more than a leftover temporary file.
        let _ = fs::remove_file(&tmp);
        return result;
    }
    // The rename is durable only once the directory entry is on disk.
    #[cfg(unix)]
    File::open(dir).and_then(|d| d.sync_all()).map_err(|e| io(dir, e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    #[test]
    fn replaces_whole_and_leaves_nothing_behind_on_failure() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.txt");
        let io = |_: &Path, e: std::io::Error| e;
        write_file(&path, |mut f| f.write_all(b"one"), io).unwrap();
        write_file(&path, |mut f| f.write_all(b"two"), io).unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "two");
        let failed = write_file(&path, |mut f| f.write_all(b"half").and(Err(std::io::Error::other("disk full"))), io);
        assert!(failed.is_err());
        assert_eq!(fs::read_to_string(&path).unwrap(), "two", "a failed write keeps the old file");
        let names: Vec<_> = fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, vec![std::ffi::OsString::from("a.txt")], "no temporary file is left");
    }
}
