//! Files on disk: the process's open file descriptors, by where they point (a test counts
//! those under its own directory, which no other test of the same binary opens), and the
//! temporary directory a test keeps its files in.

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
