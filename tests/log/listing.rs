//! Real files: a directory's listing (`list`, `list_prefix`) against what the test put in the
//! directory. A listing answers every entry that is not a directory (a directory is a storage of
//! its own) whose name is UTF-8 and starts with the prefix, sorted: files, links to files, to
//! directories and to nothing, named with any bytes, in directories of thousands of entries and
//! names of every length (many reads of the directory). It answers the same on a file system
//! whose directory entries carry no type (ext4 without `filetype`, mounted from an image where
//! this process may mount one), where each entry's type is asked of the file system, and while
//! other threads remove and create files. A failed listing is an [`Error::Io`] of operation
//! `list` naming the directory, and no listing leaves a descriptor open.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};

use ackstore::internals::error::Error;
use ackstore::internals::storage::*;
use proptest::prelude::*;
use proptest::test_runner::TestRunner;

use crate::support;

/// What an entry of the directory is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    File,
    Dir,
    /// A symbolic link to a file of the directory.
    LinkToFile,
    /// A symbolic link to a directory.
    LinkToDir,
    /// A symbolic link to nothing.
    Dangling,
    Fifo,
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![
        6 => Just(Kind::File),
        2 => Just(Kind::Dir),
        1 => Just(Kind::LinkToFile),
        1 => Just(Kind::LinkToDir),
        1 => Just(Kind::Dangling),
        1 => Just(Kind::Fifo),
    ]
}

/// A name: any bytes but `/` and NUL, short (ASCII, UTF-8 or not) or up to the longest a
/// name may be (255 bytes).
fn name() -> impl Strategy<Value = Vec<u8>> {
    let byte = prop_oneof![
        4 => prop::sample::select(b"abcdefgh.-_0123456789".to_vec()),
        1 => (1u8..=255).prop_filter("not a separator", |b| *b != b'/'),
    ];
    prop_oneof![
        8 => prop::collection::vec(byte.clone(), 1..12),
        1 => prop::collection::vec(byte, 200..=255),
    ]
    .prop_filter("not . or .., nor a name of fill's own", |n| {
        ![&b"."[..], b"..", b"\x01target-dir", b"\x01target-file"].contains(&n.as_slice())
    })
}

/// A directory's entries (distinct names) and a prefix to list.
fn directory() -> impl Strategy<Value = (Vec<(Vec<u8>, Kind)>, String)> {
    let entries = prop_oneof![
        4 => prop::collection::vec((name(), kind()), 0..40),
        1 => prop::collection::vec((name(), kind()), 300..1500),
    ]
    .prop_map(|entries| {
        let mut seen = BTreeSet::new();
        entries
            .into_iter()
            .filter(|(n, _)| seen.insert(n.clone()))
            .collect::<Vec<_>>()
    });
    (entries, any::<prop::sample::Index>(), 0usize..4).prop_map(|(entries, pick, len)| {
        // A prefix of one of the names (cut to whole characters), or of none.
        let prefix = if entries.is_empty() || len == 0 {
            String::new()
        } else {
            let named = &entries[pick.index(entries.len())].0;
            let text = String::from_utf8_lossy(named);
            text.chars().take(len).collect()
        };
        (entries, prefix)
    })
}

/// Makes `entries` in the empty directory `dir`.
fn fill(dir: &Path, entries: &[(Vec<u8>, Kind)]) {
    let target = dir.join(OsStr::from_bytes(b"\x01target-dir"));
    std::fs::create_dir_all(&target).expect("the links' directory");
    for (name, kind) in entries {
        let path = dir.join(OsStr::from_bytes(name));
        match kind {
            Kind::File => drop(std::fs::File::create(&path).expect("file")),
            Kind::Dir => std::fs::create_dir(&path).expect("directory"),
            Kind::LinkToFile => {
                let file = dir.join(OsStr::from_bytes(b"\x01target-file"));
                drop(std::fs::File::create(&file).expect("the link's file"));
                std::os::unix::fs::symlink(&file, &path).expect("link to a file");
            }
            Kind::LinkToDir => std::os::unix::fs::symlink(&target, &path).expect("link"),
            Kind::Dangling => {
                std::os::unix::fs::symlink(dir.join("\x01nothing"), &path).expect("link");
            }
            Kind::Fifo => rustix::fs::mknodat(
                rustix::fs::CWD,
                &path,
                rustix::fs::FileType::Fifo,
                rustix::fs::Mode::RUSR | rustix::fs::Mode::WUSR,
                0,
            )
            .expect("fifo"),
        }
    }
}

/// What a listing of `prefix` answers for `entries` (with [`fill`]'s own two entries).
fn model(entries: &[(Vec<u8>, Kind)], prefix: &str) -> Vec<String> {
    let mut names: Vec<String> = entries
        .iter()
        .filter(|(_, kind)| *kind != Kind::Dir)
        .map(|(name, _)| name.clone())
        .chain(
            entries
                .iter()
                .any(|(_, k)| *k == Kind::LinkToFile)
                .then(|| b"\x01target-file".to_vec()),
        )
        .filter_map(|name| String::from_utf8(name).ok())
        .filter(|name| name.starts_with(prefix))
        .collect();
    names.sort_unstable();
    names
}

/// Random directories listed under `parent` (each in a fresh directory of its own) answer what
/// [`model`] says.
fn listings_match_the_model(parent: &Path, cases: u32) {
    let mut runner = TestRunner::new(support::harness::proptest_config(cases));
    let case = std::sync::atomic::AtomicUsize::new(0);
    runner
        .run(&directory(), |(entries, prefix)| {
            let dir = parent.join(format!("case-{}", case.fetch_add(1, Ordering::Relaxed)));
            std::fs::create_dir(&dir).expect("case directory");
            fill(&dir, &entries);
            let storage = FileStorage::open(&dir, false).expect("storage");
            let listed = storage.list_prefix(&prefix).expect("list_prefix");
            prop_assert_eq!(listed, model(&entries, &prefix), "prefix {:?}", prefix);
            let listed = storage.list().expect("list");
            prop_assert_eq!(listed, model(&entries, ""));
            std::fs::remove_dir_all(&dir).expect("clean");
            Ok(())
        })
        .unwrap();
}

/// An ext4 file system without the `filetype` feature, mounted from an image for the life of
/// the value: its directory entries carry no type (`DT_UNKNOWN`).
struct UntypedExt4 {
    dir: tempfile::TempDir,
}

impl UntypedExt4 {
    /// `None` where this process may not make or mount one (not root, no `mkfs.ext4`, no loop
    /// device).
    fn mount() -> Option<Self> {
        let dir = tempfile::tempdir().ok()?;
        let image = dir.path().join("image");
        let mount = dir.path().join("mount");
        std::fs::create_dir(&mount).ok()?;
        std::fs::File::create(&image)
            .and_then(|f| f.set_len(256 << 20))
            .ok()?;
        let made = Command::new("mkfs.ext4")
            .args(["-q", "-F", "-O", "^filetype,^has_journal", "-N", "65536"])
            .arg(&image)
            .output()
            .is_ok_and(|o| o.status.success());
        let mounted = made
            && Command::new("mount")
                .args(["-o", "loop"])
                .arg(&image)
                .arg(&mount)
                .output()
                .is_ok_and(|o| o.status.success());
        mounted.then_some(Self { dir })
    }

    fn path(&self) -> PathBuf {
        self.dir.path().join("mount")
    }
}

impl Drop for UntypedExt4 {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(self.path()).status();
    }
}

/// Whether every entry of `dir` comes without its type (the directory read says nothing of it).
fn entries_carry_no_type(dir: &Path) -> bool {
    let fd = rustix::fs::open(
        dir,
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY,
        rustix::fs::Mode::empty(),
    )
    .expect("open the directory");
    rustix::fs::Dir::new(fd)
        .expect("read the directory")
        .all(|e| e.expect("entry").file_type() == rustix::fs::FileType::Unknown)
}

#[test]
fn a_listing_answers_every_entry_but_directories_whose_name_is_utf8_and_has_the_prefix() {
    let parent = tempfile::tempdir().expect("dir");
    listings_match_the_model(parent.path(), 48);
}

#[test]
fn a_listing_on_a_file_system_whose_entries_carry_no_type_answers_the_same() {
    let Some(fs) = UntypedExt4::mount() else {
        eprintln!("cannot make and mount an ext4 image here (not root?): nothing to see");
        return;
    };
    fill(&fs.path(), &[(b"probe".to_vec(), Kind::File)]);
    assert!(
        entries_carry_no_type(&fs.path()),
        "the image's directory entries carry their type: the test would not ask for it"
    );
    std::fs::remove_file(fs.path().join("probe")).expect("remove the probe");
    listings_match_the_model(&fs.path(), 48);
}

#[test]
fn a_listing_of_thousands_of_long_names_answers_every_one() {
    let dir = tempfile::tempdir().expect("dir");
    // Names of 1 to 255 bytes: the directory takes many reads, whose ends fall everywhere.
    let entries: Vec<(Vec<u8>, Kind)> = (0..5000usize)
        .map(|i| {
            let mut name = format!("{i:05}-").into_bytes();
            name.resize(6 + (i * 37) % 250, b'x');
            (name, if i % 97 == 0 { Kind::Dir } else { Kind::File })
        })
        .collect();
    fill(dir.path(), &entries);
    let storage = FileStorage::open(dir.path(), false).expect("storage");
    assert_eq!(storage.list().expect("list"), model(&entries, ""));
    assert_eq!(
        storage.list_prefix("0042").expect("list_prefix"),
        model(&entries, "0042")
    );
}

/// Lists `dir` over and over while two threads remove and create again files of their own:
/// every listing succeeds, answers every file no thread touches, and no name that never
/// existed.
fn listings_while_files_come_and_go(dir: &Path) {
    const STAYING: usize = 300;
    const CHURNING: usize = 300;
    let storage = FileStorage::open(dir, false).expect("storage");
    let staying: Vec<String> = (0..STAYING).map(|i| format!("stay-{i:04}")).collect();
    let churning: Vec<Vec<String>> = (0..2)
        .map(|t| (0..CHURNING).map(|i| format!("churn-{t}-{i:04}")).collect())
        .collect();
    for name in staying.iter().chain(churning.iter().flatten()) {
        drop(storage.create(name).expect("create"));
    }
    let staying_set: BTreeSet<&str> = staying.iter().map(String::as_str).collect();
    let every: BTreeSet<&str> = staying
        .iter()
        .chain(churning.iter().flatten())
        .map(String::as_str)
        .collect();
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        for names in &churning {
            let storage = storage.clone();
            let done = &done;
            s.spawn(move || {
                while !done.load(Ordering::Relaxed) {
                    for name in names {
                        storage.remove(name).expect("remove");
                    }
                    for name in names {
                        drop(storage.create(name).expect("create"));
                    }
                }
            });
        }
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            for round in 0..300 {
                let listed = storage.list().expect("a listing while files come and go");
                let listed: BTreeSet<&str> = listed.iter().map(String::as_str).collect();
                assert!(listed.is_superset(&staying_set), "round {round}");
                assert!(listed.is_subset(&every), "round {round}: {listed:?}");
                let prefixed = storage.list_prefix("stay-").expect("list_prefix");
                assert_eq!(prefixed, staying, "round {round}");
            }
        }));
        done.store(true, Ordering::Relaxed);
        if let Err(panic) = result {
            std::panic::resume_unwind(panic);
        }
    });
}

#[test]
fn a_listing_while_other_threads_remove_and_create_files_answers_every_file_that_stayed() {
    let dir = tempfile::tempdir().expect("dir");
    listings_while_files_come_and_go(dir.path());
}

#[test]
fn a_listing_on_a_file_system_whose_entries_carry_no_type_while_files_come_and_go_too() {
    let Some(fs) = UntypedExt4::mount() else {
        eprintln!("cannot make and mount an ext4 image here (not root?): nothing to see");
        return;
    };
    listings_while_files_come_and_go(&fs.path());
}

#[test]
fn a_failed_listing_is_an_io_error_of_list_naming_the_directory_and_no_listing_keeps_a_descriptor()
{
    let root = tempfile::tempdir().expect("dir");
    let dir = root.path().join("store");
    std::fs::create_dir(&dir).expect("directory");
    let storage = FileStorage::open(&dir, false).expect("storage");
    for i in 0..50 {
        drop(storage.create(&format!("f{i}")).expect("create"));
    }
    let sub_path = dir.join("sub");
    std::fs::create_dir(&sub_path).expect("subdirectory");
    let sub = storage
        .subdirectory("sub", false)
        .expect("subdirectory")
        .expect("a local one");
    let fails = |kind: std::io::ErrorKind| {
        let e = sub
            .list()
            .expect_err("a listing of a directory that is not there");
        assert!(
            matches!(&e, Error::Io { op: "list", path, source }
                if path == &sub_path && source.kind() == kind),
            "{e:?}"
        );
    };
    std::fs::remove_dir(&sub_path).expect("remove it");
    fails(std::io::ErrorKind::NotFound);
    std::fs::write(&sub_path, b"").expect("a file in its place");
    fails(std::io::ErrorKind::NotADirectory);
    for _ in 0..1000 {
        assert_eq!(storage.list().expect("list").len(), 51);
        assert_eq!(storage.list_prefix("f4").expect("list_prefix").len(), 11);
        assert!(sub.list_prefix("f").is_err());
    }
    assert_eq!(support::fds::open_under(root.path()), 0);
}
