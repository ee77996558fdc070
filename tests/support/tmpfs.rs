//! A real small file system for full-disk tests: a tmpfs of a given size and number of inodes,
//! mounted for the life of a [`Tmpfs`] where this process may mount one (root), and the means
//! to fill it (bytes or inodes) and to free some of it again.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

/// `ENOSPC`.
pub const NO_SPACE: i32 = 28;

/// The error and every error it was caused by, each message after the one before.
pub fn chain(e: &ackstore::Error) -> String {
    let mut out = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        out.push_str(": ");
        out.push_str(&cause.to_string());
        source = cause.source();
    }
    out
}

/// Whether `e` or an error it was caused by is `ENOSPC`.
pub fn is_no_space(e: &ackstore::Error) -> bool {
    chain(e).contains(&format!("os error {NO_SPACE}"))
}

/// A tmpfs mounted for the test's life; unmounted when dropped, even when the test fails.
pub struct Tmpfs {
    dir: PathBuf,
}

impl Tmpfs {
    /// Mounts a tmpfs of `size` bytes and `inodes` inodes, or `None` when this process may not
    /// mount one.
    pub fn mount(size: u64, inodes: u64) -> Option<Self> {
        let dir = tempfile::tempdir().ok()?.keep();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o"])
            .arg(format!("size={size},nr_inodes={inodes}"))
            .arg("tmpfs")
            .arg(&dir)
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            Some(Self { dir })
        } else {
            let _ = fs::remove_dir(&dir);
            None
        }
    }

    /// Grows the file system to `size` bytes and `inodes` inodes, keeping its files.
    pub fn grow(&self, size: u64, inodes: u64) {
        let ok = Command::new("mount")
            .args(["-o"])
            .arg(format!("remount,size={size},nr_inodes={inodes}"))
            .arg(&self.dir)
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "remounting {} with {size} bytes", self.dir.display());
    }

    /// Where it is mounted.
    pub fn path(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // Lazily: a test that panicked may still hold descriptors under it (the process's
        // descriptor cache), and the mount must not outlive the test all the same.
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        let _ = fs::remove_dir(&self.dir);
    }
}

/// Grows `filler` until the file system holding it has no byte left (a write fails with
/// `ENOSPC`); nothing when the file cannot even be created (no inode left).
pub fn fill(filler: &Path) {
    let Ok(mut f) = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(filler)
    else {
        return;
    };
    let page = vec![0xa5u8; 4096];
    loop {
        match f.write_all(&page) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(NO_SPACE) => break,
            Err(e) => panic!("filling {}: {e}", filler.display()),
        }
    }
    // Whatever a last page still holds.
    while f.write_all(&[1]).is_ok() {}
}

/// Removes `filler` (if it exists) and frees its bytes at once. It is cut to nothing first: a
/// child process that another thread of this process is starting holds a copy of every
/// descriptor the process had open when it forked until it runs its program, so an unlink
/// alone may leave the filler's blocks taken for that long, and the next write on the file
/// system fail for want of space that the test has just freed.
pub fn remove_filler(filler: &Path) {
    free_bytes(filler, u64::MAX);
    let _ = fs::remove_file(filler);
}

/// Frees `bytes` of `filler` (cuts it shorter), if it exists.
pub fn free_bytes(filler: &Path, bytes: u64) {
    if let Ok(m) = fs::metadata(filler) {
        let f = fs::OpenOptions::new()
            .write(true)
            .open(filler)
            .expect("the filler opens");
        f.set_len(m.len().saturating_sub(bytes))
            .expect("the filler shrinks");
    }
}

/// Creates empty files in directory `dir` (created first) until the file system has no inode
/// left; returns how many.
pub fn fill_inodes(dir: &Path) -> usize {
    if fs::create_dir_all(dir).is_err() {
        return 0;
    }
    let mut n = 0;
    loop {
        match fs::File::create(dir.join(format!("i{n}"))) {
            Ok(_) => n += 1,
            Err(e) if e.raw_os_error() == Some(NO_SPACE) => return n,
            Err(e) => panic!("filling the inodes of {}: {e}", dir.display()),
        }
    }
}

/// Removes `n` of the files [`fill_inodes`] made in `dir`.
pub fn free_inodes(dir: &Path, n: usize) {
    if let Ok(entries) = fs::read_dir(dir) {
        for e in entries.flatten().take(n) {
            let _ = fs::remove_file(e.path());
        }
    }
}

/// Copies directory `from` into `to` (made if missing), recursively: what a process killed at
/// this point leaves (a tmpfs keeps every write the moment it returns).
pub fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).expect("the copy's directory");
    for e in fs::read_dir(from).expect("the directory lists").flatten() {
        let (p, t) = (e.path(), to.join(e.file_name()));
        if e.file_type().expect("a file type").is_dir() {
            copy_dir(&p, &t);
        } else {
            fs::copy(&p, &t).expect("the file copies");
        }
    }
}

/// Every file under `dir` (relative paths, directories with a trailing `/`), sorted.
pub fn files_under(dir: &Path) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        let Ok(entries) = fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            let rel = p.strip_prefix(root).expect("under the root").display();
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                out.push(format!("{rel}/"));
                walk(root, &p, out);
            } else {
                out.push(rel.to_string());
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}
