//! How much memory this process may use: the cgroup's limit (a Kubernetes pod's, a container's)
//! or, without one, the machine's. A run without `--memory-limit` takes a share of it, so that
//! it is never killed for using more than it was given.

/// Where a memory figure came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemorySource {
    /// `memory.max` of the process's cgroup (v2).
    CgroupV2,
    /// `memory.limit_in_bytes` of its memory cgroup (v1).
    CgroupV1,
    /// `MemTotal` of `/proc/meminfo`.
    Machine,
}

impl std::fmt::Display for MemorySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            MemorySource::CgroupV2 => "the cgroup's memory.max",
            MemorySource::CgroupV1 => "the cgroup's memory.limit_in_bytes",
            MemorySource::Machine => "the machine's memory",
        })
    }
}

/// The memory this process may use, and where that figure came from (`None`: not Linux, or
/// nothing readable).
pub fn available() -> Option<(u64, MemorySource)> {
    let read = |p: &str| std::fs::read_to_string(p).ok();
    let machine = read("/proc/meminfo").and_then(|m| mem_total(&m));
    let cgroup = read("/proc/self/cgroup").unwrap_or_default();
    let v2 = cgroup_v2_path(&cgroup).and_then(|p| read(&format!("/sys/fs/cgroup{p}/memory.max")).or_else(|| read("/sys/fs/cgroup/memory.max")));
    let v1 = || cgroup_v1_path(&cgroup).and_then(|p| read(&format!("/sys/fs/cgroup/memory{p}/memory.limit_in_bytes")).or_else(|| read("/sys/fs/cgroup/memory/memory.limit_in_bytes")));
    limit(v2.as_deref(), MemorySource::CgroupV2).or_else(|| limit(v1().as_deref(), MemorySource::CgroupV1)).filter(|(l, _)| machine.is_none_or(|m| *l < m)).or(machine.map(|m| (m, MemorySource::Machine)))
}

/// The share of [`available`] memory a run without a limit takes.
pub const DEFAULT_SHARE: (u64, u64) = (1, 2);

/// The limit of a run not given one: [`DEFAULT_SHARE`] of what the process may use.
pub fn default_limit() -> Option<(u64, MemorySource)> {
    available().map(|(m, s)| (m / DEFAULT_SHARE.1 * DEFAULT_SHARE.0, s))
}

/// A cgroup limit file's value: bytes, or none for `max` (no limit) or nonsense. v1 writes a
/// huge number (about 2^63) for no limit: anything past 2^60 counts as none.
fn limit(text: Option<&str>, source: MemorySource) -> Option<(u64, MemorySource)> {
    let v = text?.trim();
    if v == "max" {
        return None;
    }
    v.parse::<u64>().ok().filter(|b| *b > 0 && *b < (1 << 60)).map(|b| (b, source))
}

fn mem_total(meminfo: &str) -> Option<u64> {
    meminfo.lines().find_map(|l| l.strip_prefix("MemTotal:")).and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok()).map(|kib| kib << 10)
}

/// The process's cgroup v2 path (`0::/kubepods/...`).
fn cgroup_v2_path(cgroup: &str) -> Option<String> {
    cgroup.lines().find_map(|l| l.strip_prefix("0::")).map(str::to_string)
}

/// The process's memory cgroup v1 path (`5:memory:/docker/...`).
fn cgroup_v1_path(cgroup: &str) -> Option<String> {
    cgroup.lines().find_map(|l| {
        let mut parts = l.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        controllers.split(',').any(|c| c == "memory").then(|| path.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cgroup_files_are_read_as_limits_or_none() {
        assert_eq!(limit(Some("max\n"), MemorySource::CgroupV2), None);
        assert_eq!(limit(Some("4294967296\n"), MemorySource::CgroupV2), Some((4 << 30, MemorySource::CgroupV2)));
        assert_eq!(limit(Some("9223372036854771712"), MemorySource::CgroupV1), None, "v1's no limit");
        assert_eq!(limit(Some("lots"), MemorySource::CgroupV1), None);
        assert_eq!(mem_total("MemTotal:       24523372 kB\nMemFree: 1 kB\n"), Some(24_523_372 << 10));
        assert_eq!(cgroup_v2_path("0::/kubepods/burstable/pod1/abc\n").as_deref(), Some("/kubepods/burstable/pod1/abc"));
        assert_eq!(cgroup_v1_path("12:cpu,cpuacct:/x\n5:memory:/docker/abc\n").as_deref(), Some("/docker/abc"));
        assert_eq!(cgroup_v1_path("0::/\n"), None);
    }

    #[test]
    fn this_process_may_use_some_memory() {
        if cfg!(target_os = "linux") {
            let (bytes, _) = available().unwrap();
            assert!(bytes > 64 << 20, "{bytes}");
            assert_eq!(default_limit().unwrap().0, bytes / 2);
        }
    }
}
