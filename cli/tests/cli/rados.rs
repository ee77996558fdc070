//! The command on a RADOS pool (`CEPH_CONF`): `perf --storage rados` runs its whole workload
//! there and verifies it, `inspect` and `verify` read the namespace it kept, and `verify` finds
//! a byte flipped in a sealed ledger object.

#![cfg(feature = "rados")]

use crate::support;

use std::process::Command;

use ackstore::Storage;
use support::rados::{cluster, conf, fresh_namespace, pool};

fn ackstore(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_ackstore"))
        .args(args)
        .args([
            "--storage",
            "rados",
            "--ceph-conf",
            &conf(),
            "--pool",
            &pool(),
        ])
        .env("ACKSTORE_NO_PROGRESS", "1")
        .output()
        .expect("run ackstore")
}

fn text(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn perf_inspect_and_verify_work_on_a_pool_and_verify_finds_a_flipped_byte() {
    let namespace = fresh_namespace("cli");
    let out = ackstore(&[
        "perf",
        "--entries",
        "3000",
        "--entries-per-ledger",
        "1000",
        "--dir",
        &namespace,
        "--json",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["verified"], true);
    assert_eq!(report["dir"], format!("rados:{}/{namespace}", pool()));

    let out = ackstore(&["inspect", &namespace]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("\"perf\""), "{}", text(&out));
    let out = ackstore(&["verify", &namespace]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));

    // Flip one byte in the middle of the first (sealed) data ledger.
    let storage = cluster().storage(&pool(), &namespace).unwrap();
    let ledger = storage
        .list()
        .unwrap()
        .into_iter()
        .find(|n| ackstore::internals::log::parse_ledger_file_name(n) == Some(1))
        .expect("data ledger 1");
    let file = storage.open(&ledger).unwrap();
    let at = file.size().unwrap() / 2;
    let mut byte = [0u8; 1];
    file.read_exact_at(&mut byte, at).unwrap();
    file.write_all_at(&[byte[0] ^ 0x40], at).unwrap();
    file.sync_data().unwrap();
    let out = ackstore(&["verify", &namespace]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
}

#[test]
fn a_namespace_without_a_topic_is_refused_with_exit_code_2() {
    let out = ackstore(&["verify", &fresh_namespace("empty")]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("not an ackstore directory"),
        "{}",
        text(&out)
    );
}
