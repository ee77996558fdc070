//! Real files: the directory lock, round trips and maps, and links.

use ackstore::internals::error::Error;
use ackstore::internals::storage::*;

use crate::support;

#[test]
fn second_lock_on_same_directory_is_refused_until_released() {
    let dir = tempfile::tempdir().unwrap();
    let a = FileStorage::open(dir.path(), false).unwrap();
    let b = FileStorage::open(dir.path(), false).unwrap();
    let guard = a.lock().unwrap();
    assert!(matches!(b.lock(), Err(Error::Locked { .. })));
    drop(guard);
    b.lock().unwrap();
}

#[test]
fn files_round_trip_and_map() {
    let dir = tempfile::tempdir().unwrap();
    let s = FileStorage::open(dir.path(), false).unwrap();
    let f = s.create("a.log").unwrap();
    f.write_all_at(b"hello", 0).unwrap();
    f.sync_data().unwrap();
    assert_eq!(f.size().unwrap(), 5);
    assert_eq!((*f.map().unwrap()).as_ref(), b"hello");
    assert!(s.create("a.log").is_err());
    s.rename("a.log", "b.log").unwrap();
    assert_eq!(s.list().unwrap(), vec!["b.log".to_string()]);
    assert!(s.open("../etc").is_err());
}

#[test]
fn link_gives_a_second_name_and_never_replaces_one() {
    let dir = tempfile::tempdir().unwrap();
    let s = FileStorage::open(dir.path(), false).unwrap();
    s.create("a").unwrap().write_all_at(b"one", 0).unwrap();
    s.create("b").unwrap().write_all_at(b"two", 0).unwrap();
    s.link("a", "c").unwrap();
    let mut buf = [0; 3];
    s.open("c").unwrap().read_exact_at(&mut buf, 0).unwrap();
    assert_eq!(&buf, b"one");
    let err = s.link("a", "b").unwrap_err();
    assert!(
        matches!(&err, Error::Io { source, .. } if source.kind() == std::io::ErrorKind::AlreadyExists),
        "{err:?}"
    );
    s.open("b").unwrap().read_exact_at(&mut buf, 0).unwrap();
    assert_eq!(&buf, b"two");
}

/// A storage of `dir` that keeps one descriptor open: each file used closes the one before.
fn one_descriptor(dir: &std::path::Path) -> FileStorage {
    FileStorage::open_limited(dir, false, 1).unwrap()
}

#[test]
fn a_file_whose_descriptor_the_cache_closed_reopens_with_its_bytes_and_its_map_lives_on() {
    let dir = tempfile::tempdir().unwrap();
    let s = one_descriptor(dir.path());
    let a = s.create("a").unwrap();
    a.write_all_at(b"sealed bytes", 0).unwrap();
    a.sync_data().unwrap();
    let map = a.map().unwrap();
    let b = s.create("b").unwrap();
    b.write_all_at(b"other", 0).unwrap();
    // `a`'s descriptor closed when `b` took the only place: the map keeps its own reference.
    assert_eq!((*map).as_ref(), b"sealed bytes");
    a.write_all_at(b"S", 0).unwrap();
    a.set_len(6).unwrap();
    assert_eq!(a.size().unwrap(), 6);
    let mut buf = [0; 6];
    a.read_exact_at(&mut buf, 0).unwrap();
    assert_eq!(&buf, b"Sealed");
    b.sync_data().unwrap();
    a.sync_data().unwrap();
    assert_eq!(std::fs::read(dir.path().join("a")).unwrap(), b"Sealed");
    assert_eq!(std::fs::read(dir.path().join("b")).unwrap(), b"other");
    assert_eq!(a.data_from(0).unwrap(), 0);
}

#[test]
fn a_file_removed_or_replaced_under_the_store_is_an_error_never_a_new_file() {
    let dir = tempfile::tempdir().unwrap();
    let s = one_descriptor(dir.path());
    let a = s.create("a").unwrap();
    a.write_all_at(b"one", 0).unwrap();
    let b = s.create("b").unwrap();
    s.remove("a").unwrap();
    let err = a.read_exact_at(&mut [0; 3], 0).unwrap_err();
    assert!(
        matches!(&err, Error::Io { path, source, .. }
            if path.ends_with("a") && source.kind() == std::io::ErrorKind::NotFound),
        "{err:?}"
    );
    assert!(a.write_all_at(b"two", 0).is_err());
    assert!(!s.exists("a").unwrap(), "the reopen created no file");

    // Another file under `b`'s name: `b`'s handle refuses it.
    b.write_all_at(b"bee", 0).unwrap();
    let c = s.create("c").unwrap();
    c.write_all_at(b"sea", 0).unwrap();
    s.rename("c", "b").unwrap();
    let err = b.read_exact_at(&mut [0; 3], 0).unwrap_err();
    assert!(
        matches!(&err, Error::Io { path, .. } if path.ends_with("b")),
        "{err:?}"
    );
    assert!(b.sync_data().is_err());
    assert_eq!(std::fs::read(dir.path().join("b")).unwrap(), b"sea");
}

/// A file's identity (device, inode and birth time) is taken at its first `fstat` or, for a
/// file never asked its size, when the cache evicts its descriptor: a handle that only read
/// and wrote (no `size`, `map` or `data_from`) reopens its own file after an eviction, and
/// refuses another put under its name by someone else (a rename outside the storage, which
/// leaves no mark), whether it was created or opened, and wherever the stat came.
#[test]
fn a_handle_never_asked_its_size_reopens_its_own_file_and_refuses_another_under_its_name() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("opened"), b"opened bytes").unwrap();
    let s = one_descriptor(dir.path());
    let created = s.create("created").unwrap();
    created.write_all_at(b"created bytes", 0).unwrap();
    let opened = s.open("opened").unwrap();
    // `created`'s descriptor closed when `opened` took the only place, never stat'ed.
    let mut buf = [0; 12];
    opened.read_exact_at(&mut buf, 0).unwrap();
    assert_eq!(&buf, b"opened bytes");
    let mut buf = [0; 13];
    created.read_exact_at(&mut buf, 0).unwrap();
    assert_eq!(&buf, b"created bytes", "the reopen of a file never stat'ed");
    opened.read_exact_at(&mut [0; 12], 0).unwrap();
    assert_eq!(opened.size().unwrap(), 12);

    // Each name now holds another file, put there from outside the storage, while the
    // handles' descriptors are closed: every operation of either handle fails.
    let other = dir.path().join("other");
    for name in ["created", "opened"] {
        std::fs::write(&other, b"someone else's").unwrap();
        std::fs::rename(&other, dir.path().join(name)).unwrap();
    }
    let _third = s.create("third").unwrap();
    for (name, handle) in [("created", &created), ("opened", &opened)] {
        let err = handle.read_exact_at(&mut [0; 4], 0).unwrap_err();
        assert!(
            matches!(&err, Error::Io { path, .. } if path.ends_with(name)),
            "{name}: {err:?}"
        );
        assert!(handle.size().is_err(), "{name}");
        assert!(handle.write_all_at(b"x", 0).is_err(), "{name}");
        assert_eq!(
            std::fs::read(dir.path().join(name)).unwrap(),
            b"someone else's",
            "{name}"
        );
    }
}

/// A name removed and created again from outside the storage while its handle's descriptor is
/// closed (evicted), the new file taking the freed inode number (ext4 and xfs hand it to the
/// next file created): the handle refuses the new file, whether its identity came from a stat
/// or from the eviction, as it refuses any other file put under its name. On a file system that
/// hands out no freed number the new file has another inode, and the case cannot arise.
#[test]
fn a_handle_refuses_a_file_put_under_its_name_from_outside_with_its_freed_inode_number() {
    use std::os::unix::fs::MetadataExt;
    for stat_first in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let s = one_descriptor(dir.path());
        let ours = s.create("a").unwrap();
        ours.write_all_at(b"our bytes", 0).unwrap();
        ours.sync_data().unwrap();
        if stat_first {
            assert_eq!(ours.size().unwrap(), 9);
        }
        let ours_on_disk = std::fs::metadata(dir.path().join("a")).unwrap();
        let ino = ours_on_disk.ino();
        // Closes `a`'s descriptor, the inode's last reference once the name is gone.
        let _b = s.create("b").unwrap();
        // The replacement is born later than `a`, as any file put under a store's name from
        // outside is in practice (the number is still taken: no probe of the wait gets it).
        support::fds::until_born_after(dir.path(), ours_on_disk.created().ok());
        std::fs::remove_file(dir.path().join("a")).unwrap();
        let theirs = dir.path().join("theirs");
        std::fs::write(&theirs, b"their bytes").unwrap();
        if std::fs::metadata(&theirs).unwrap().ino() != ino {
            continue;
        }
        std::fs::rename(&theirs, dir.path().join("a")).unwrap();
        let mut buf = [0; 9];
        let read = ours.read_exact_at(&mut buf, 0);
        assert!(
            read.is_err(),
            "stat first: {stat_first}: the handle read another file: {:?}",
            String::from_utf8_lossy(&buf)
        );
        assert!(
            ours.write_all_at(b"ours", 0).is_err(),
            "stat first: {stat_first}"
        );
        assert_eq!(
            std::fs::read(dir.path().join("a")).unwrap(),
            b"their bytes",
            "stat first: {stat_first}"
        );
    }
}

/// A file of an overlay (a container's root file system) in its lower layer, which a handle
/// opened for reading only (the overlay was read-only then, as a file this process may not
/// write), then copied up to the upper layer by a `chmod` while the handle's descriptor is
/// closed: the same file, with its bytes and its device and inode numbers (overlayfs keeps
/// them), and a new birth time, the upper file's. The handle reads it and still names it; a
/// file put under the name afterwards is still refused, by device and inode.
#[test]
fn a_handle_of_an_overlays_file_reads_it_after_a_copy_up_gives_it_a_new_birth_time() {
    use std::os::unix::fs::PermissionsExt;
    let Some(overlay) = Overlay::mount(&[("a", b"lower bytes"), ("b", b"other")]) else {
        eprintln!("no overlay mounted (not root, or no overlayfs): nothing to check");
        return;
    };
    let dir = overlay.merged();
    let s = one_descriptor(&dir);
    let a = s.open("a").unwrap();
    assert_eq!(a.size().unwrap(), 11);
    let born_below = std::fs::metadata(dir.join("a")).unwrap().created().ok();
    // Closes `a`'s descriptor.
    let _b = s.open("b").unwrap();
    overlay.make_writable();
    // The copy-up creates the upper file: born later than the lower one, so that a comparison
    // of birth times would tell them apart.
    support::fds::until_born_after(&overlay.upper(), born_below);
    std::fs::set_permissions(dir.join("a"), std::fs::Permissions::from_mode(0o440)).unwrap();
    assert!(
        overlay.upper().join("a").exists(),
        "the chmod copied `a` up"
    );
    let mut buf = [0; 11];
    a.read_exact_at(&mut buf, 0)
        .expect("the handle reads its own file, copied up");
    assert_eq!(&buf, b"lower bytes");
    assert_eq!(s.names_file("a", &*a).unwrap(), Some(true));
    // Another file under the name: refused, as anywhere.
    let _b = s.open("b").unwrap();
    std::fs::remove_file(dir.join("a")).unwrap();
    std::fs::write(dir.join("a"), b"their bytes").unwrap();
    assert!(a.read_exact_at(&mut buf, 0).is_err());
}

/// An overlay mounted read-only for the life of the value over a lower layer of the given
/// files, with an upper layer it can be made writable with.
struct Overlay {
    dir: tempfile::TempDir,
}

impl Overlay {
    /// `None` where this process may not mount one (not root, no overlayfs).
    fn mount(files: &[(&str, &[u8])]) -> Option<Self> {
        let dir = tempfile::tempdir().ok()?;
        for layer in ["lower", "upper", "work", "merged"] {
            std::fs::create_dir(dir.path().join(layer)).ok()?;
        }
        for (name, bytes) in files {
            std::fs::write(dir.path().join("lower").join(name), bytes).ok()?;
        }
        let at = |layer: &str| dir.path().join(layer).display().to_string();
        let options = format!(
            "ro,lowerdir={},upperdir={},workdir={}",
            at("lower"),
            at("upper"),
            at("work")
        );
        let mounted = std::process::Command::new("mount")
            .args(["-t", "overlay", "overlay", "-o", &options])
            .arg(dir.path().join("merged"))
            .output()
            .is_ok_and(|o| o.status.success());
        mounted.then_some(Self { dir })
    }

    fn merged(&self) -> std::path::PathBuf {
        self.dir.path().join("merged")
    }

    fn upper(&self) -> std::path::PathBuf {
        self.dir.path().join("upper")
    }

    fn make_writable(&self) {
        let remounted = std::process::Command::new("mount")
            .args(["-o", "remount,rw"])
            .arg(self.merged())
            .output()
            .is_ok_and(|o| o.status.success());
        assert!(remounted, "remounting the overlay read-write");
    }
}

impl Drop for Overlay {
    fn drop(&mut self) {
        // Lazily: the storage's descriptor cache may still hold a descriptor under it.
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(self.merged())
            .status();
    }
}

/// `a` written (not synced), then its descriptor closed by the cache as `b` is created, its
/// closing sync failing when `fail`: what `a`'s next syncs answer.
fn syncs_after_a_closing_sync(fail: bool) -> [bool; 2] {
    let dir = tempfile::tempdir().unwrap();
    let s = one_descriptor(dir.path());
    let a = s.create("a").unwrap();
    a.write_all_at(b"unsynced", 0).unwrap();
    s.fail_closing_syncs(fail);
    let b = s.create("b").unwrap();
    s.fail_closing_syncs(false);
    b.write_all_at(b"b", 0).unwrap();
    b.sync_data().unwrap();
    let mut buf = [0; 8];
    a.read_exact_at(&mut buf, 0).unwrap();
    assert_eq!(&buf, b"unsynced");
    [a.sync_data().is_ok(), a.sync_data().is_ok()]
}

#[test]
fn a_failed_sync_of_a_descriptor_the_cache_closed_fails_every_later_sync_of_its_file() {
    assert_eq!(syncs_after_a_closing_sync(false), [true, true]);
    assert_eq!(
        syncs_after_a_closing_sync(true),
        [false, false],
        "a sync after the failed one may not answer Ok for the same bytes"
    );
}

#[test]
fn the_default_limit_of_open_files_leaves_half_the_process_soft_limit_to_the_rest() {
    let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
    let limit = default_open_files();
    assert!((1..=65_536).contains(&limit), "{limit}");
    if let Some(soft) = soft.filter(|s| *s >= 2) {
        assert!(
            limit as u64 <= soft / 2 && limit as u64 >= (soft / 2).min(65_536),
            "{limit} of {soft}"
        );
    }
    // Every storage opened without a limit of its own shares the process's cache at it.
    assert_eq!(OpenFiles::process().limit(), limit);
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(
        FileStorage::open(dir.path(), false).unwrap().open_files(),
        limit
    );
    assert_eq!(
        FileStorage::open_limited(dir.path(), false, 0)
            .unwrap()
            .open_files(),
        1
    );
}

/// The file systems ackstore runs on (ext4, xfs) give a file created right after a removal the
/// inode number the removed one had: device and inode alone would take the new file for the old.
#[test]
fn a_handle_whose_name_was_removed_and_created_again_never_reaches_the_new_file() {
    let dir = tempfile::tempdir().unwrap();
    let s = one_descriptor(dir.path());
    let a = s.create("a").unwrap();
    a.write_all_at(b"first", 0).unwrap();
    a.sync_data().unwrap();
    let other = s.create("other").unwrap();
    s.remove("a").unwrap();
    let again = s.create("a").unwrap();
    again.write_all_at(b"SECOND", 0).unwrap();
    again.sync_data().unwrap();
    // `again`'s descriptor closes: `a`'s next use reopens by path.
    other.write_all_at(b"o", 0).unwrap();
    let mut buf = [0; 5];
    let read = a.read_exact_at(&mut buf, 0);
    assert!(
        read.is_err(),
        "a handle of the removed file read {:?} from the file created under its name",
        String::from_utf8_lossy(&buf)
    );
    assert!(a.write_all_at(b"xx", 0).is_err());
    assert!(a.set_len(1).is_err());
    assert!(a.sync_data().is_err());
    assert_eq!(std::fs::read(dir.path().join("a")).unwrap(), b"SECOND");

    // The same through a rename over the name.
    let b = s.create("b").unwrap();
    b.write_all_at(b"bee", 0).unwrap();
    other.write_all_at(b"o", 0).unwrap();
    s.remove("b").unwrap();
    let c = s.create("c").unwrap();
    c.write_all_at(b"sea", 0).unwrap();
    s.rename("c", "b").unwrap();
    other.write_all_at(b"o", 0).unwrap();
    assert!(b.read_exact_at(&mut [0; 3], 0).is_err());
    assert!(b.write_all_at(b"xx", 0).is_err());
    assert_eq!(std::fs::read(dir.path().join("b")).unwrap(), b"sea");
}

/// `names_file` answers from the handle's open descriptor: its own name and a second one
/// linked to it name it; a name removed, a name another file was renamed over from outside the
/// storage (the inode of the one it held cannot have been reused while its descriptor is open),
/// and a name of another file do not; once the cache closed the descriptor, or for a handle of
/// another kind of storage, it cannot tell (`None`).
#[test]
fn names_file_is_exact_while_the_descriptor_is_open_and_unknown_once_it_closed() {
    let dir = tempfile::tempdir().unwrap();
    let s = FileStorage::open(dir.path(), false).unwrap();
    let f = s.create("a").unwrap();
    f.write_all_at(b"one", 0).unwrap();
    s.create("b").unwrap().write_all_at(b"two", 0).unwrap();
    s.link("a", "c").unwrap();
    assert_eq!(s.names_file("a", &*f).unwrap(), Some(true));
    assert_eq!(s.names_file("c", &*f).unwrap(), Some(true));
    assert_eq!(s.names_file("b", &*f).unwrap(), Some(false));
    assert_eq!(s.names_file("none", &*f).unwrap(), Some(false));
    assert!(s.names_file("../a", &*f).is_err());
    // Another file put under `c` from outside the storage, and `a` removed from outside.
    std::fs::write(dir.path().join("other"), b"one").unwrap();
    std::fs::rename(dir.path().join("other"), dir.path().join("c")).unwrap();
    std::fs::remove_file(dir.path().join("a")).unwrap();
    assert_eq!(s.names_file("c", &*f).unwrap(), Some(false));
    assert_eq!(s.names_file("a", &*f).unwrap(), Some(false));
    // The same file under the name again: named.
    s.link("b", "d").unwrap();
    let g = s.open("d").unwrap();
    assert_eq!(s.names_file("b", &*g).unwrap(), Some(true));
    // A handle of the in-memory storage: no answer.
    let mem = MemStorage::new();
    mem.create("b").unwrap();
    assert_eq!(s.names_file("b", &*mem.open("b").unwrap()).unwrap(), None);

    // A cache of one descriptor: opening another file closes `h`'s, after which only a read
    // of the name can tell.
    let limited = FileStorage::open_limited(dir.path(), false, 1).unwrap();
    let h = limited.open("b").unwrap();
    assert_eq!(limited.names_file("d", &*h).unwrap(), Some(true));
    let _other = limited.open("c").unwrap();
    assert_eq!(limited.names_file("d", &*h).unwrap(), None);
}
