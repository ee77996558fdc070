//! The default metadata store: one file per record in a [`Storage`] directory.
//!
//! Owns: the files `{name}.meta` (the committed record) and `{name}.{nonce}.meta.tmp` (a write in
//! progress; the nonce is unique to the write, so two writers never share a temporary file).
//! Must never leave a committed record torn: a record is replaced by writing the whole new file
//! under a temporary name, `sync_data`, renaming it over the old one and syncing the directory,
//! so after a power cut at any step the directory holds the old record or the new one, whole.
//! A temporary file is never read. Leftovers of a crash (any `*.meta.tmp`, of any record) are
//! removed before a store's first `put` or `delete`: at the first write rather than in `new`, so a
//! store that only reads (an inspection tool) never changes the directory.
//!
//! The version check of `put` and `delete` reads the version stored on disk, never a cached one,
//! so a handle that lost ownership is refused as soon as a newer owner has written. The check and
//! the rename that follows it are two steps, not one atomic compare-and-set: calls through one
//! `FileMetaStore` are serialised, two stores over the same directory are not. The fence is
//! therefore exact only for writers serialised by the directory lock (design invariant 6: one
//! owner at a time), where it refuses a former owner's handle that has not noticed yet. Without
//! that lock, a stale writer that passed its check before the new owner's write could still
//! rename after it. A `MetaStore` shared between hosts or processes must provide a real
//! compare-and-set (a conditional write in the database or object store behind it).

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex, PoisonError};

use super::{MetaStore, validate_record_name};
use crate::error::{Error, Result};
use crate::format::meta::{MAX_RECORD_BYTES, STORED_OVERHEAD, decode_stored, encode_stored};
use crate::storage::Storage;

/// Suffix of a committed record's file.
const RECORD_SUFFIX: &str = ".meta";
/// Suffix of a record being written: `{name}.{nonce:016x}.meta.tmp`.
const TEMP_SUFFIX: &str = ".meta.tmp";

/// Metadata records as files `{name}.meta`, replaced atomically (temp file, `sync_data`,
/// rename, directory sync).
#[derive(Debug)]
pub struct FileMetaStore {
    storage: Arc<dyn Storage>,
    /// Serialises the read-check-write of `put` and `delete` within this store, and holds the
    /// state of its writes.
    writes: Mutex<Writes>,
    /// Randomly keyed, so the nonces of two stores (in one process or two) do not collide.
    nonces: RandomState,
}

/// What `put` and `delete` keep between calls.
#[derive(Debug, Default)]
struct Writes {
    /// Leftover temporary files have been removed.
    swept: bool,
    /// Writes started by this store: hashed into the temporary file's nonce.
    count: u64,
}

impl FileMetaStore {
    /// A store over `storage`; the directory may also hold other files (ledgers), which the
    /// store ignores.
    #[must_use]
    pub fn new(storage: Arc<dyn Storage>) -> Self {
        Self {
            storage,
            writes: Mutex::new(Writes::default()),
            nonces: RandomState::new(),
        }
    }

    /// Removes every leftover temporary file (`*.meta.tmp`) of a crashed write, once per store,
    /// before its first write. Syncs the directory if anything was removed.
    fn sweep(&self, writes: &mut Writes) -> Result<()> {
        if writes.swept {
            return Ok(());
        }
        let mut removed = false;
        for file in self.storage.list()? {
            if file.ends_with(TEMP_SUFFIX) {
                self.storage.remove(&file)?;
                removed = true;
            }
        }
        if removed {
            self.storage.sync_dir()?;
        }
        writes.swept = true;
        Ok(())
    }

    /// A temporary file name for a new write of `name`, unique to this write.
    fn temp_file(&self, writes: &mut Writes, name: &str) -> String {
        writes.count += 1;
        let nonce = self.nonces.hash_one(writes.count);
        format!("{name}.{nonce:016x}{TEMP_SUFFIX}")
    }

    /// The storage the records live in.
    #[must_use]
    pub fn storage(&self) -> &Arc<dyn Storage> {
        &self.storage
    }

    /// The committed version of `name`, read from the directory.
    fn current_version(&self, name: &str) -> Result<Option<u64>> {
        Ok(self.get(name)?.map(|(version, _)| version))
    }

    /// Refuses with [`Error::Fenced`] unless the stored version is `expected`.
    fn check_version(&self, name: &str, expected: Option<u64>, found: Option<u64>) -> Result<()> {
        if expected == found {
            return Ok(());
        }
        let describe = |v: Option<u64>| v.map_or_else(|| "none".to_string(), |v| v.to_string());
        Err(Error::Fenced(format!(
            "{}/{name}{RECORD_SUFFIX}: expected version {} but found {}",
            self.storage.location(),
            describe(expected),
            describe(found)
        )))
    }

    /// Writes `encoded` to the new file `temp`, syncs it and renames it to `name`'s record.
    fn replace(&self, temp: &str, name: &str, encoded: &[u8]) -> Result<()> {
        let file = self.storage.create(temp)?;
        file.write_all_at(encoded, 0)?;
        file.sync_data()?;
        drop(file);
        self.storage.rename(temp, &record_file(name))?;
        self.storage.sync_dir()
    }
}

fn record_file(name: &str) -> String {
    format!("{name}{RECORD_SUFFIX}")
}

impl MetaStore for FileMetaStore {
    fn get(&self, name: &str) -> Result<Option<(u64, Vec<u8>)>> {
        validate_record_name(name)?;
        let file = match self.storage.open(&record_file(name)) {
            Ok(file) => file,
            Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                return Ok(None);
            }
            Err(e) => return Err(e),
        };
        let corrupted = |kind| Error::CorruptedMeta {
            record: name.to_string(),
            kind,
        };
        let size = usize::try_from(file.size()?)
            .ok()
            .filter(|&size| size <= MAX_RECORD_BYTES)
            .ok_or_else(|| corrupted(crate::error::CorruptionKind::BadLength))?;
        let mut bytes = vec![0; size];
        file.read_exact_at(&mut bytes, 0)?;
        decode_stored(&bytes).map(Some).map_err(|e| match e {
            Error::CorruptedMeta { kind, .. } => corrupted(kind),
            other => other,
        })
    }

    fn put(&self, name: &str, expected: Option<u64>, bytes: &[u8]) -> Result<u64> {
        validate_record_name(name)?;
        let mut writes = self.writes.lock().unwrap_or_else(PoisonError::into_inner);
        self.sweep(&mut writes)?;
        let found = self.current_version(name)?;
        self.check_version(name, expected, found)?;
        let version = found.map_or(Some(1), |v| v.checked_add(1)).ok_or_else(|| {
            Error::LimitExceeded(format!("metadata record `{name}` has run out of versions"))
        })?;
        let size = bytes.len().saturating_add(STORED_OVERHEAD);
        if size > MAX_RECORD_BYTES {
            return Err(Error::EntryTooLarge {
                size: size as u64,
                max: MAX_RECORD_BYTES as u64,
            });
        }
        let encoded = encode_stored(version, bytes);
        // Power-cut analysis of each step: docs/format.md, "Metadata records".
        let temp = self.temp_file(&mut writes, name);
        if let Err(e) = self.replace(&temp, name, &encoded) {
            // Best effort: a temporary file left behind is never read, and the next store's
            // first write removes it. The write's own error is the one to report.
            if self.storage.exists(&temp).unwrap_or(false) {
                let _ = self.storage.remove(&temp);
            }
            return Err(e);
        }
        Ok(version)
    }

    fn delete(&self, name: &str, expected: u64) -> Result<()> {
        validate_record_name(name)?;
        let mut writes = self.writes.lock().unwrap_or_else(PoisonError::into_inner);
        self.sweep(&mut writes)?;
        let found = self.current_version(name)?;
        self.check_version(name, Some(expected), found)?;
        self.storage.remove(&record_file(name))?;
        self.storage.sync_dir()
    }

    fn list(&self) -> Result<Vec<String>> {
        Ok(self
            .storage
            .list()?
            .into_iter()
            .filter_map(|file| {
                let name = file.strip_suffix(RECORD_SUFFIX)?;
                validate_record_name(name).ok()?;
                Some(name.to_string())
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::CorruptionKind;
    use crate::storage::{FileStorage, MemStorage};

    fn mem_store() -> (MemStorage, FileMetaStore) {
        let disk = MemStorage::new();
        let store = FileMetaStore::new(Arc::new(disk.clone()));
        (disk, store)
    }

    /// Runs `check` against a store on the in-memory disk and on real files.
    fn on_both_backends(check: impl Fn(Arc<dyn Storage>)) {
        check(Arc::new(MemStorage::new()));
        let dir = tempfile::tempdir().unwrap();
        check(Arc::new(FileStorage::open(dir.path(), false).unwrap()));
    }

    fn is_fenced<T>(r: &Result<T>) -> bool {
        matches!(r, Err(Error::Fenced(_)))
    }

    #[test]
    fn versions_start_at_one_and_increase_with_every_put() {
        on_both_backends(|storage| {
            let store = FileMetaStore::new(storage);
            assert_eq!(store.get("topic").unwrap(), None);
            assert_eq!(store.put("topic", None, b"one").unwrap(), 1);
            assert_eq!(store.put("topic", Some(1), b"two").unwrap(), 2);
            assert_eq!(store.put("topic", Some(2), b"").unwrap(), 3);
            assert_eq!(store.get("topic").unwrap(), Some((3, Vec::new())));
        });
    }

    #[test]
    fn a_stale_version_is_refused_and_changes_nothing() {
        on_both_backends(|storage| {
            let store = FileMetaStore::new(storage.clone());
            store.put("topic", None, b"one").unwrap();
            store.put("topic", Some(1), b"two").unwrap();
            let files = storage.list().unwrap();
            assert!(is_fenced(&store.put("topic", Some(1), b"stale")));
            assert!(is_fenced(&store.put("topic", Some(3), b"future")));
            assert!(is_fenced(&store.put("topic", None, b"again")));
            assert!(is_fenced(&store.delete("topic", 1)));
            assert!(is_fenced(&store.put("cursor-1", Some(1), b"missing")));
            assert!(is_fenced(&store.delete("cursor-1", 1)));
            assert_eq!(store.get("topic").unwrap(), Some((2, b"two".to_vec())));
            assert_eq!(storage.list().unwrap(), files);
        });
    }

    #[test]
    fn a_second_store_holding_a_stale_version_is_fenced() {
        on_both_backends(|storage| {
            let old_owner = FileMetaStore::new(storage.clone());
            let new_owner = FileMetaStore::new(storage);
            let v1 = old_owner.put("cursor-3", None, b"A").unwrap();
            let (seen, _) = new_owner.get("cursor-3").unwrap().unwrap();
            let v2 = new_owner.put("cursor-3", Some(seen), b"B").unwrap();
            let err = old_owner.put("cursor-3", Some(v1), b"A again").unwrap_err();
            assert!(err.to_string().contains("cursor-3.meta"), "{err}");
            assert!(is_fenced(&Err::<(), _>(err)));
            assert!(is_fenced(&old_owner.delete("cursor-3", v1)));
            assert_eq!(
                old_owner.get("cursor-3").unwrap(),
                Some((v2, b"B".to_vec()))
            );
        });
    }

    #[test]
    fn delete_removes_the_record_and_list_names_only_records() {
        on_both_backends(|storage| {
            let store = FileMetaStore::new(storage.clone());
            store.put("topic", None, b"t").unwrap();
            store.put("cursor-2", None, b"c").unwrap();
            store.put("cursor-10", None, b"c").unwrap();
            // Other files share the directory: ledgers, and names that are not records.
            storage.create("ledger-00000000000000000001.log").unwrap();
            storage.create("Upper.meta").unwrap();
            storage.create("cursor-2.meta.tmp").unwrap();
            assert_eq!(store.list().unwrap(), ["cursor-10", "cursor-2", "topic"]);
            store.delete("cursor-2", 1).unwrap();
            assert_eq!(store.get("cursor-2").unwrap(), None);
            assert_eq!(store.list().unwrap(), ["cursor-10", "topic"]);
            assert_eq!(store.put("cursor-2", None, b"new").unwrap(), 1);
        });
    }

    #[test]
    fn names_ackstore_does_not_generate_are_refused() {
        let (_, store) = mem_store();
        for bad in ["../topic", "a/b", "My Cursor", "", "topic.meta"] {
            assert!(matches!(store.get(bad), Err(Error::InvalidArgument(_))));
            assert!(matches!(
                store.put(bad, None, b""),
                Err(Error::InvalidArgument(_))
            ));
            assert!(matches!(
                store.delete(bad, 1),
                Err(Error::InvalidArgument(_))
            ));
        }
    }

    fn temp_files(storage: &Arc<dyn Storage>) -> Vec<String> {
        let mut files = storage.list().unwrap();
        files.retain(|f| f.ends_with(TEMP_SUFFIX));
        files
    }

    #[test]
    fn leftover_temp_files_are_ignored_then_swept_before_the_first_write() {
        on_both_backends(|storage| {
            FileMetaStore::new(storage.clone())
                .put("topic", None, b"old")
                .unwrap();
            // A crashed writer's torn temporary file, one of a record never written again, and
            // one under the name older versions used.
            for temp in [
                "topic.00000000000000a1.meta.tmp",
                "cursor-9.00000000000000b2.meta.tmp",
                "topic.meta.tmp",
            ] {
                let torn = storage.create(temp).unwrap();
                torn.write_all_at(&encode_stored(2, b"new")[..10], 0)
                    .unwrap();
                torn.sync_data().unwrap();
            }
            storage.create("ledger-00000000000000000001.log").unwrap();
            storage.sync_dir().unwrap();
            let store = FileMetaStore::new(storage.clone());
            assert_eq!(store.get("topic").unwrap(), Some((1, b"old".to_vec())));
            assert_eq!(store.list().unwrap(), ["topic"]);
            assert_eq!(temp_files(&storage).len(), 3, "reads change nothing");
            assert_eq!(store.put("cursor-1", None, b"c").unwrap(), 1);
            assert!(temp_files(&storage).is_empty());
            assert!(storage.exists("ledger-00000000000000000001.log").unwrap());
            assert_eq!(store.get("topic").unwrap(), Some((1, b"old".to_vec())));
        });
    }

    #[test]
    fn every_write_uses_its_own_valid_temp_name() {
        let (_, a) = mem_store();
        let (_, b) = mem_store();
        let mut names = std::collections::BTreeSet::new();
        for store in [&a, &b] {
            let mut writes = store.writes.lock().unwrap();
            for _ in 0..50 {
                let temp = store.temp_file(&mut writes, &"c".repeat(64));
                crate::storage::validate_name(&temp).unwrap();
                assert!(temp.ends_with(TEMP_SUFFIX) && !temp.ends_with(RECORD_SUFFIX));
                assert!(names.insert(temp));
            }
        }
    }

    #[test]
    fn a_stale_writer_whose_write_failed_midway_is_fenced_and_disturbs_nothing() {
        let disk = MemStorage::new();
        let old_owner = FileMetaStore::new(Arc::new(disk.clone()));
        let v1 = old_owner.put("cursor-4", None, b"A").unwrap();
        // The old owner's next write stops after creating its temporary file.
        disk.fail_after(Some(1));
        assert!(old_owner.put("cursor-4", Some(v1), b"A2").is_err());
        disk.fail_after(None);
        let storage: Arc<dyn Storage> = Arc::new(disk.clone());
        assert_eq!(temp_files(&storage).len(), 1);
        let new_owner = FileMetaStore::new(Arc::new(disk.clone()));
        let v2 = new_owner.put("cursor-4", Some(v1), b"B").unwrap();
        assert!(is_fenced(&old_owner.put("cursor-4", Some(v1), b"A3")));
        assert!(is_fenced(&old_owner.delete("cursor-4", v1)));
        assert_eq!(
            new_owner.get("cursor-4").unwrap(),
            Some((v2, b"B".to_vec()))
        );
        assert_eq!(new_owner.put("cursor-4", Some(v2), b"C").unwrap(), v2 + 1);
        assert!(temp_files(&storage).is_empty(), "swept by the new owner");
    }

    #[test]
    fn a_corrupted_record_file_is_reported_by_name() {
        on_both_backends(|storage| {
            let store = FileMetaStore::new(storage.clone());
            store.put("cursor-5", None, b"state").unwrap();
            let file = storage.open("cursor-5.meta").unwrap();
            file.write_all_at(b"X", 20).unwrap();
            let err = store.get("cursor-5").unwrap_err();
            assert!(
                matches!(&err, Error::CorruptedMeta { record, kind: CorruptionKind::ChecksumMismatch }
                    if record == "cursor-5"),
                "{err:?}"
            );
            // A record that cannot be verified cannot be compared, so it is not overwritten.
            assert!(matches!(
                store.put("cursor-5", Some(1), b"x"),
                Err(Error::CorruptedMeta { .. })
            ));
            file.set_len(3).unwrap();
            assert!(matches!(
                store.get("cursor-5"),
                Err(Error::CorruptedMeta {
                    kind: CorruptionKind::Truncated,
                    ..
                })
            ));
        });
    }

    #[test]
    fn a_record_above_the_maximum_is_refused_and_one_at_it_is_kept() {
        let (disk, store) = mem_store();
        let before = disk.mutations();
        let err = store
            .put(
                "topic",
                None,
                &vec![0; MAX_RECORD_BYTES - STORED_OVERHEAD + 1],
            )
            .unwrap_err();
        assert!(matches!(err, Error::EntryTooLarge { .. }), "{err:?}");
        assert_eq!(disk.mutations(), before);
        assert_eq!(store.get("topic").unwrap(), None);
        let largest = vec![7; MAX_RECORD_BYTES - STORED_OVERHEAD];
        assert_eq!(store.put("topic", None, &largest).unwrap(), 1);
        assert_eq!(store.get("topic").unwrap(), Some((1, largest)));
    }

    /// One step of the crash workload, with the record state it leads to.
    #[derive(Clone, Copy, Debug)]
    enum Step {
        Put(&'static str, &'static [u8]),
        Delete(&'static str),
    }

    const WORKLOAD: &[Step] = &[
        Step::Put("topic", b"v1"),
        Step::Put("cursor-1", b"c1"),
        Step::Put("topic", b"v2 longer than the first"),
        Step::Put("cursor-1", b"c2"),
        Step::Delete("cursor-1"),
        Step::Put("topic", b""),
        Step::Put("cursor-1", b"c3"),
    ];

    type Model = std::collections::BTreeMap<&'static str, (u64, &'static [u8])>;

    /// The records after `step` succeeds on `model`.
    fn predict(model: &Model, step: Step) -> Model {
        let mut next = model.clone();
        match step {
            Step::Put(name, bytes) => {
                let version = model.get(name).map_or(1, |(v, _)| v + 1);
                next.insert(name, (version, bytes));
            }
            Step::Delete(name) => {
                next.remove(name);
            }
        }
        next
    }

    fn apply(store: &FileMetaStore, model: &Model, step: Step) -> Result<()> {
        match step {
            Step::Put(name, bytes) => {
                let expected = model.get(name).map(|(v, _)| *v);
                store.put(name, expected, bytes).map(drop)
            }
            Step::Delete(name) => store.delete(name, model[name].0),
        }
    }

    const NAMES: [&str; 2] = ["topic", "cursor-1"];

    /// What `store` holds for every record name of the workload.
    fn observed(store: &FileMetaStore) -> Vec<Option<(u64, Vec<u8>)>> {
        NAMES.iter().map(|name| store.get(name).unwrap()).collect()
    }

    fn expected_from(model: &Model) -> Vec<Option<(u64, Vec<u8>)>> {
        NAMES
            .iter()
            .map(|name| model.get(name).map(|(v, b)| (*v, b.to_vec())))
            .collect()
    }

    /// Keeps the durable bytes and half of whatever was written but not synced.
    fn torn(_: &str, durable: &[u8], live: &[u8]) -> Vec<u8> {
        let keep = durable.len() + live.len().saturating_sub(durable.len()) / 2;
        live.get(..keep).unwrap_or(durable).to_vec()
    }

    #[test]
    fn a_power_cut_at_any_operation_leaves_the_old_or_the_new_record_whole() {
        let total = {
            let (disk, store) = mem_store();
            let mut model = Model::new();
            for step in WORKLOAD {
                apply(&store, &model, *step).unwrap();
                model = predict(&model, *step);
            }
            assert_eq!(observed(&store), expected_from(&model));
            disk.mutations()
        };
        for n in 0..=total {
            let (disk, store) = mem_store();
            disk.fail_after(Some(n));
            let mut model = Model::new();
            // The states a power cut may leave: before and after the step in flight.
            let (mut before, mut after) = (model.clone(), model.clone());
            for step in WORKLOAD {
                let next = predict(&model, *step);
                (before, after) = (model.clone(), next.clone());
                if apply(&store, &model, *step).is_err() {
                    break;
                }
                model = next;
                before.clone_from(&model);
            }
            let (before, after) = (expected_from(&before), expected_from(&after));
            disk.fail_after(None);
            for image in [
                disk.durable_image(),
                disk.crash_image(torn),
                disk.crash_image(|_, _, live| live.to_vec()),
            ] {
                let store = FileMetaStore::new(Arc::new(image.clone()));
                let seen = observed(&store);
                assert!(
                    seen == before || seen == after,
                    "cut after {n} operations: {seen:?} is neither {before:?} nor {after:?}"
                );
                // The recovered store takes further writes at the version it holds.
                let version = seen[0].as_ref().map(|(v, _)| *v);
                let next = store.put("topic", version, b"after the crash").unwrap();
                assert_eq!(
                    store.get("topic").unwrap(),
                    Some((next, b"after the crash".to_vec()))
                );
                assert!(
                    image
                        .list()
                        .unwrap()
                        .iter()
                        .all(|f| !f.ends_with(TEMP_SUFFIX)),
                    "cut after {n}: a temporary file survived a later put"
                );
            }
        }
    }
}
