//! Hostile and damaged namespaces on RADOS (`CEPH_CONF`).

#![cfg(feature = "rados")]

mod support;

use ackstore::{Error, Storage};
use support::rados::{cluster, fresh_namespace, pool};

/// The `rados` command line on the test cluster, in namespace `namespace`.
fn rados_cli(namespace: &str, args: &[&str]) -> String {
    let out = std::process::Command::new("rados")
        .args([
            "-c",
            &support::rados::conf(),
            "-p",
            &pool(),
            "-N",
            namespace,
        ])
        .args(args)
        .output()
        .expect("run the rados command");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn an_owner_epoch_at_its_limit_is_refused_not_wrapped_to_an_unfenced_owner() {
    let namespace = fresh_namespace("epoch-limit");
    let s = cluster().storage(&pool(), &namespace).unwrap();
    drop(s.lock().unwrap());
    rados_cli(
        &namespace,
        &[
            "setxattr",
            "LOCK",
            "ackstore.owner-epoch",
            &u64::MAX.to_string(),
        ],
    );
    let taken = std::panic::catch_unwind(|| s.lock().map(|guard| (guard, s.epoch())));
    match taken {
        Err(_) => panic!("an owner epoch at u64::MAX panicked the lock"),
        Ok(Ok((_guard, epoch))) => {
            panic!("lock taken with epoch {epoch}: writes of this owner are not fenced")
        }
        Ok(Err(e)) => assert!(!matches!(e, Error::Locked { .. }), "{e}"),
    }
}
