//! A store on a mount whose files all show another owner than the process writing them, as an
//! NFS export with `all_squash`, an SMB share or a FAT volume mounted with `uid=`, or a FUSE
//! file system that maps owners (here `bindfs --force-user=root`) show them: the kernel creates
//! a file, then refuses `O_NOATIME` to a process that neither owns it nor has `CAP_FOWNER`. The
//! process (this binary re-run as `nobody`, 65534) creates files through a [`FileStorage`] and
//! runs a store's life there (a descriptor cache of two, so every access reopens a file it does
//! not own); every call succeeds, leaves no stray file, and the store reopened by root holds what
//! the child was answered `Ok` for.
//!
//! Needs root (to mount, and to run the child as another user) and `bindfs`; without them the
//! test says so and passes.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use ackstore::{FileStorage, Position, Storage, Store, StoreConfig};

use crate::support;

const DIR: &str = "ACKSTORE_FOREIGN_OWNER_DIR";
const NOBODY: u32 = 65534;
const TOPICS: [&str; 2] = ["persistent://t/ns/a", "persistent://t/ns/b"];

fn config() -> StoreConfig {
    StoreConfig {
        open_files: Some(2),
        ..support::config::store(2, 4096)
    }
}

/// The mount of `source` at `target` whose every file and directory shows root as its owner
/// and lets anyone read and write; unmounted when dropped.
struct ForeignOwnerMount {
    target: PathBuf,
}

impl ForeignOwnerMount {
    /// `None` when `bindfs` is missing or refuses (no FUSE here).
    fn new(source: &Path, target: &Path) -> Option<Self> {
        let status = Command::new("bindfs")
            .args([
                "-o",
                "allow_other",
                "--force-user=root",
                "--force-group=root",
                "--perms=a+rwX",
            ])
            .arg(source)
            .arg(target)
            .status()
            .ok()?;
        status.success().then(|| Self {
            target: target.to_path_buf(),
        })
    }
}

impl Drop for ForeignOwnerMount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.target).status();
    }
}

/// The child's part, as `nobody` on the mount: files created through a storage, then a store
/// written, flushed and closed.
fn child(dir: &Path) {
    let storage = FileStorage::open(dir.join("plain"), true).expect("storage");
    for name in ["a.log", "b.log"] {
        let file = storage
            .create(name)
            .unwrap_or_else(|e| panic!("create {name}: {e}"));
        file.write_all_at(name.as_bytes(), 0).expect("write");
        file.sync_data().expect("sync");
    }
    assert_eq!(storage.list().expect("list"), ["a.log", "b.log"]);

    let store = Store::open(dir.join("store"), config()).expect("open the store");
    for name in TOPICS {
        let topic = store.topic(name).unwrap_or_else(|e| panic!("{name}: {e}"));
        let positions: Vec<Position> = (0..5u32)
            .map(|i| topic.append(&i.to_le_bytes()).expect("append"))
            .collect();
        topic.sync().expect("sync");
        let cursor = topic
            .open_cursor("sub", support::topic::earliest())
            .expect("cursor");
        for p in positions.iter().step_by(2) {
            cursor.ack(*p).expect("ack");
        }
        cursor.flush().expect("flush");
    }
    store.close().expect("close");
}

/// What the child wrote, read as root from the directory under the mount.
fn check(dir: &Path) {
    let storage = FileStorage::open(dir.join("plain"), false).expect("storage");
    assert_eq!(storage.list().expect("list"), ["a.log", "b.log"]);
    for name in ["a.log", "b.log"] {
        let file = storage.open(name).expect("open");
        let mut bytes = vec![0; name.len()];
        file.read_exact_at(&mut bytes, 0).expect("read");
        assert_eq!(bytes, name.as_bytes());
    }
    let store = Store::open(dir.join("store"), config()).expect("reopen the store");
    assert_eq!(store.topic_names().len(), TOPICS.len());
    for name in TOPICS {
        let topic = store.topic(name).expect("topic");
        let cursor = topic
            .open_cursor("sub", support::topic::earliest())
            .expect("cursor");
        let read: Vec<Vec<u8>> = cursor
            .read_entries(10)
            .expect("read")
            .into_iter()
            .map(|e| e.payload)
            .collect();
        let unacked: Vec<Vec<u8>> = [1u32, 3].iter().map(|i| i.to_le_bytes().to_vec()).collect();
        assert_eq!(read, unacked, "{name}");
    }
    store.close().expect("close");
}

#[test]
fn a_store_on_a_mount_whose_files_show_another_owner_creates_and_writes_its_files() {
    if let Ok(dir) = std::env::var(DIR) {
        child(Path::new(&dir));
        return;
    }
    if !rustix::process::geteuid().is_root() {
        eprintln!("not root: cannot mount, nor run the child as another user");
        return;
    }
    let root = tempfile::tempdir().expect("temporary directory");
    let source = root.path().join("source");
    let target = root.path().join("mount");
    std::fs::create_dir(&source).expect("source");
    std::fs::create_dir(&target).expect("mount point");
    // `nobody` enters the temporary directory and runs its copy of this binary.
    for dir in [root.path(), &source] {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    }
    let Some(mount) = ForeignOwnerMount::new(&source, &target) else {
        eprintln!("no bindfs (or no FUSE): nothing to mount");
        return;
    };
    // The copy is written by another process (`install`), never through a descriptor of this
    // one: a child that another test forks meanwhile would inherit that descriptor until its
    // exec, and the copy's exec would fail with ETXTBSY while any process holds it open for
    // writing.
    let exe = root.path().join("test");
    let copied = Command::new("install")
        .arg("-m0755")
        .arg(std::env::current_exe().expect("this binary"))
        .arg(&exe)
        .status()
        .expect("run install");
    assert!(copied.success(), "install the binary's copy: {copied}");

    let test = support::harness::test_path(
        module_path!(),
        "a_store_on_a_mount_whose_files_show_another_owner_creates_and_writes_its_files",
    );
    let out = support::harness::child_quiet(&exe, &test)
        .env(DIR, &target)
        .uid(NOBODY)
        .gid(NOBODY)
        .output()
        .expect("run the child");
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("1 passed"),
        "the child, a user who owns no file it sees, failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    drop(mount);
    check(&source);
}
