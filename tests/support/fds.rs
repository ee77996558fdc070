//! Files on disk: the process's open file descriptors, by where they point (a test counts
//! those under its own directory, which no other test of the same binary opens), the
//! temporary directory a test keeps its files in, and a wait for the file system's clock of
//! birth times to pass a file's.

use std::path::Path;

/// How many of this process's descriptors (`/proc/self/fd`) point at `dir` or a file under it.
pub fn open_under(dir: &Path) -> usize {
    let dir = dir.canonicalize().expect("the directory exists");
    std::fs::read_dir("/proc/self/fd")
        .expect("list /proc/self/fd")
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|target| target.starts_with(&dir))
        .count()
}

/// A temporary directory on a memory-backed file system where there is one (its fsyncs cost
/// nothing, and the files backend runs the same code), else in the default place.
pub fn files_dir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    shm.is_dir()
        .then(|| tempfile::tempdir_in(shm).ok())
        .flatten()
        .unwrap_or_else(|| tempfile::tempdir().expect("temporary directory"))
}

/// Returns once a file created on the file system of `dir` is born (its `statx` birth time)
/// later than `born`, the birth time of a file there; at once without one. A file system may
/// stamp birth times from a clock that ticks every few milliseconds (a kernel's coarse clock),
/// so two files created within a tick share one: a test of a file put under another's name
/// waits for this (a condition on the clock, not a sleep) before it creates the new file.
/// Probes in a directory of its own beside `dir`, created and removed each turn.
pub fn until_born_after(dir: &Path, born: Option<std::time::SystemTime>) {
    let Some(born) = born else { return };
    let probes = tempfile::tempdir_in(dir.parent().unwrap_or(dir)).unwrap();
    let probe = probes.path().join("probe");
    loop {
        std::fs::write(&probe, b"").unwrap();
        let probe_born = std::fs::metadata(&probe).unwrap().created();
        std::fs::remove_file(&probe).unwrap();
        match probe_born {
            Ok(at) if at <= born => std::thread::yield_now(),
            _ => return,
        }
    }
}
