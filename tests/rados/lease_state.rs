//! The RADOS lease's lock-step input (cls_lock version 1) and which renewal failures lose the lease.

use std::time::Duration;

use ackstore::internals::rados_lease::{Renewal, lock_op_input};

#[test]
fn the_lock_step_input_is_cls_lock_version_one() {
    let input = lock_op_input(b"c0ffee", Duration::from_millis(2_500), 1);
    let mut body = Vec::new();
    body.extend_from_slice(&14u32.to_le_bytes());
    body.extend_from_slice(b"ackstore-owner");
    body.push(1);
    body.extend_from_slice(&6u32.to_le_bytes());
    body.extend_from_slice(b"c0ffee");
    body.extend_from_slice(&0u32.to_le_bytes());
    body.extend_from_slice(&14u32.to_le_bytes());
    body.extend_from_slice(b"ackstore owner");
    body.extend_from_slice(&2u32.to_le_bytes());
    body.extend_from_slice(&500_000_000u32.to_le_bytes());
    body.push(1);
    let mut want = vec![1, 1];
    want.extend_from_slice(&u32::try_from(body.len()).unwrap().to_le_bytes());
    want.extend_from_slice(&body);
    assert_eq!(input, want);
}

#[test]
fn only_another_owner_or_a_moved_epoch_loses_the_lease() {
    use rustix::io::Errno;
    let code = |e: Errno| -e.raw_os_error();
    assert_eq!(Renewal::of(0), Renewal::Renewed);
    for lost in [Errno::CANCELED, Errno::BUSY, Errno::EXIST, Errno::NOENT] {
        assert!(
            matches!(Renewal::of(code(lost)), Renewal::Lost(_)),
            "{lost}"
        );
    }
    for transient in [Errno::TIMEDOUT, Errno::IO, Errno::AGAIN, Errno::CONNREFUSED] {
        assert_eq!(Renewal::of(code(transient)), Renewal::Failed, "{transient}");
    }
}
