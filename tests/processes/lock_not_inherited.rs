//! A directory's lock is the process's, never a child's: a child process the application
//! spawns holds a copy of every descriptor from its fork until its `exec`, and a lock a child
//! inherited would refuse the directory to its own owner's next open, at random moments.
//! The child here is held between fork and exec (its `pre_exec` hook waits for a byte on a
//! pipe) while the parent closes a store and opens it again, which must succeed at once.

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

use ackstore::{Store, StoreConfig};

#[test]
fn a_child_between_fork_and_exec_does_not_hold_a_store_lock_its_parent_released() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), StoreConfig::default()).unwrap();
    store.topic("t").unwrap();
    let (reader, mut writer) = std::io::pipe().unwrap();
    let (ready_reader, ready_writer) = std::io::pipe().unwrap();
    let mut command = Command::new("true");
    command.stdin(Stdio::null());
    let gate = std::os::fd::OwnedFd::from(reader);
    let ready = std::os::fd::OwnedFd::from(ready_writer);
    // SAFETY: the hook only makes two system calls (async-signal-safe) on descriptors it owns.
    unsafe {
        command.pre_exec(move || {
            rustix::io::write(&ready, b"r")?;
            let mut byte = [0u8; 1];
            rustix::io::read(&gate, &mut byte)?;
            Ok(())
        });
    }
    // `Command::spawn` returns only once the child exec'd (it reports an exec failure), so it
    // runs on a thread of its own while the test talks to the child.
    let spawner = std::thread::spawn(move || command.spawn().unwrap());
    // The child has forked (it holds copies of the store's descriptors) and waits before exec.
    let mut byte = [0u8; 1];
    let mut ready_reader = ready_reader;
    std::io::Read::read_exact(&mut ready_reader, &mut byte).unwrap();
    store.close().unwrap();
    drop(store);
    let reopened = Store::open(dir.path(), StoreConfig::default());
    // Let the child go on to exec whatever the outcome, so it never outlives the test.
    writer.write_all(b"g").unwrap();
    let mut child = spawner.join().unwrap();
    assert!(child.wait().unwrap().success());
    let reopened = reopened.expect("the parent's reopen while a child sits between fork and exec");
    assert_eq!(reopened.topic_names(), vec!["t".to_owned()]);
}
