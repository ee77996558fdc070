//! The client's operation timeouts: how long librados waits for an OSD or a monitor before an
//! operation fails with `ETIMEDOUT`.
//!
//! Owns: [`RadosOptions`] and the values a connection applies before it connects. Ceph's own
//! default is 0, wait for ever: a flush during a placement-group outage would block for the whole
//! outage, and its topic could not move. Invariant: a connection ackstore opens never waits for
//! ever unless its caller asked for it explicitly (a timeout of zero).

use std::ffi::CStr;
use std::time::Duration;

use super::{cstring, ffi, os_error};
use crate::error::{Error, Result};

/// Ceph's option: how long an operation waits for its OSD.
const OSD_OP_TIMEOUT: &CStr = c"rados_osd_op_timeout";
/// Ceph's option: how long an operation waits for a monitor.
const MON_OP_TIMEOUT: &CStr = c"rados_mon_op_timeout";
/// Client settings of a [`RadosCluster`](super::RadosCluster) connection.
///
/// Each timeout is `None` (the default) to keep the value the Ceph configuration file sets, or
/// [`RadosOptions::DEFAULT_OP_TIMEOUT`] when it sets none (Ceph's own default, 0, waits for ever); `Some(t)`
/// sets it to `t`, rounded up to whole seconds (`Some(Duration::ZERO)` waits for ever).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RadosOptions {
    /// How long an operation on an object (a write, a read, a lock renewal) waits for its OSD
    /// before it fails (`rados_osd_op_timeout`): a flush then fails with [`Error::Io`] of kind
    /// [`std::io::ErrorKind::TimedOut`], latched like any failed write.
    pub osd_op_timeout: Option<Duration>,
    /// How long an operation waits for a monitor (`rados_mon_op_timeout`).
    pub mon_op_timeout: Option<Duration>,
}

impl RadosOptions {
    /// The timeout ackstore applies when neither its caller nor the Ceph configuration sets
    /// one: above the 20 s an OSD that stops answering takes to be marked down (Ceph's
    /// `osd_heartbeat_grace`), so that losing one OSD of a replicated pool delays a flush
    /// instead of failing it, yet finite.
    pub const DEFAULT_OP_TIMEOUT: Duration = Duration::from_secs(30);
}

/// The timeouts a connection applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RadosTimeouts {
    /// `rados_osd_op_timeout` (zero: waits for ever).
    pub osd_op: Duration,
    /// `rados_mon_op_timeout` (zero: waits for ever).
    pub mon_op: Duration,
}

/// Sets the timeouts of `options` on the configured, not yet connected handle `raw`; what was
/// applied. `conf` names the configuration for errors.
pub(super) fn apply(
    raw: ffi::RadosT,
    options: &RadosOptions,
    conf: &std::path::Path,
) -> Result<RadosTimeouts> {
    let one = |option: &CStr, wanted: Option<Duration>| -> Result<Duration> {
        let secs = match wanted {
            Some(t) => t.as_secs() + u64::from(t.subsec_nanos() > 0),
            None => match configured(raw, option, conf)? {
                0 => RadosOptions::DEFAULT_OP_TIMEOUT.as_secs(),
                secs => secs,
            },
        };
        let value = cstring(&secs.to_string())?;
        // SAFETY: `raw` is a live, not yet connected handle; both strings are NUL-terminated.
        let ret = unsafe { ffi::rados_conf_set(raw, option.as_ptr(), value.as_ptr()) };
        if ret < 0 {
            return Err(Error::io(
                "set the Ceph client option",
                conf.join(option.to_string_lossy().as_ref()),
                os_error(ret),
            ));
        }
        Ok(Duration::from_secs(secs))
    };
    Ok(RadosTimeouts {
        osd_op: one(OSD_OP_TIMEOUT, options.osd_op_timeout)?,
        mon_op: one(MON_OP_TIMEOUT, options.mon_op_timeout)?,
    })
}

/// The value of the timeout `option` in the configuration read so far, in whole seconds
/// (rounded up).
fn configured(raw: ffi::RadosT, option: &CStr, conf: &std::path::Path) -> Result<u64> {
    let mut buf = [0u8; 64];
    // SAFETY: `raw` is a live handle; `buf` is writable for its length.
    let ret =
        unsafe { ffi::rados_conf_get(raw, option.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    let fail = |reason: String| Error::InvalidArgument {
        reason: format!(
            "the Ceph option {} of {}: {reason}",
            option.to_string_lossy(),
            conf.display()
        ),
    };
    if ret < 0 {
        return Err(fail(os_error(ret).to_string()));
    }
    let text = CStr::from_bytes_until_nul(&buf)
        .map_err(|_| fail("its value is too long".into()))?
        .to_string_lossy();
    let secs: f64 = text
        .trim()
        .parse()
        .map_err(|_| fail(format!("`{text}` is not a number of seconds")))?;
    if !secs.is_finite() || secs < 0.0 {
        return Err(fail(format!("`{text}` is not a number of seconds")));
    }
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "a finite, non-negative number of seconds, rounded up"
    )]
    Ok(secs.ceil() as u64)
}
