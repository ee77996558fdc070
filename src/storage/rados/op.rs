//! RADOS operations: a compound write operation (one atomic operation on one object) and an
//! asynchronous completion, each released exactly once.
//!
//! Owns: the owner's guard added to a write ([`WriteOp::guard`]). Never: a retry.

use std::ffi::{CStr, CString, c_char};
use std::ptr;

use super::{EPOCH_XATTR, Ioctx, epoch_text, ffi};

/// A compound write operation, released when dropped.
pub(super) struct WriteOp {
    pub(super) raw: ffi::WriteOpT,
    /// Strings the operation points into until it has been sent.
    keep: Vec<CString>,
}

impl WriteOp {
    pub(super) fn new() -> Self {
        // SAFETY: no preconditions.
        let raw = unsafe { ffi::rados_create_write_op() };
        assert!(
            !raw.is_null(),
            "librados could not allocate a write operation"
        );
        Self {
            raw,
            keep: Vec::new(),
        }
    }

    pub(super) fn name(&mut self, s: &str) -> *const c_char {
        let c = CString::new(s).expect("xattr names are constants without NUL");
        let p = c.as_ptr();
        self.keep.push(c);
        p
    }

    pub(super) fn create_exclusive(&mut self) -> &mut Self {
        // SAFETY: live operation; a null category is allowed.
        unsafe { ffi::rados_write_op_create(self.raw, ffi::CREATE_EXCLUSIVE, ptr::null()) };
        self
    }

    /// Fails the operation with `ENOENT` unless the object exists (no step after it creates
    /// it).
    pub(super) fn assert_exists(&mut self) -> &mut Self {
        // SAFETY: live operation.
        unsafe { ffi::rados_write_op_assert_exists(self.raw) };
        self
    }

    pub(super) fn write(&mut self, buf: &[u8], offset: u64) -> &mut Self {
        // SAFETY: live operation; librados copies the buffer.
        unsafe { ffi::rados_write_op_write(self.raw, buf.as_ptr().cast(), buf.len(), offset) };
        self
    }

    pub(super) fn write_full(&mut self, buf: &[u8]) -> &mut Self {
        // SAFETY: live operation; librados copies the buffer.
        unsafe { ffi::rados_write_op_write_full(self.raw, buf.as_ptr().cast(), buf.len()) };
        self
    }

    pub(super) fn truncate(&mut self, len: u64) -> &mut Self {
        // SAFETY: live operation.
        unsafe { ffi::rados_write_op_truncate(self.raw, len) };
        self
    }

    pub(super) fn remove(&mut self) -> &mut Self {
        // SAFETY: live operation.
        unsafe { ffi::rados_write_op_remove(self.raw) };
        self
    }

    pub(super) fn cmpxattr(&mut self, name: &str, op: u8, value: &str) -> &mut Self {
        let name = self.name(name);
        // SAFETY: live operation; librados copies the value, `name` lives in `keep`.
        unsafe {
            ffi::rados_write_op_cmpxattr(self.raw, name, op, value.as_ptr().cast(), value.len());
        }
        self
    }

    pub(super) fn setxattr(&mut self, name: &str, value: &str) -> &mut Self {
        let name = self.name(name);
        // SAFETY: live operation; librados copies the value, `name` lives in `keep`.
        unsafe { ffi::rados_write_op_setxattr(self.raw, name, value.as_ptr().cast(), value.len()) };
        self
    }

    /// Calls the method `method` of the OSD object class `class` with `input`, as one step of
    /// the operation (its result code is the operation's when it fails).
    pub(super) fn exec(&mut self, class: &str, method: &str, input: &[u8]) -> &mut Self {
        let class = self.name(class);
        let method = self.name(method);
        // SAFETY: live operation; librados copies the input, `class` and `method` live in
        // `keep`; a null `prval` asks for no separate result.
        unsafe {
            ffi::rados_write_op_exec(
                self.raw,
                class,
                method,
                input.as_ptr().cast(),
                input.len(),
                ptr::null_mut(),
            );
        }
        self
    }

    /// The owner's guard: refused by the cluster when a newer owner stamped the object, and
    /// stamps the object with `epoch`. Nothing when this handle owns nothing (epoch 0).
    pub(super) fn guard(&mut self, epoch: u64) -> &mut Self {
        if epoch > 0 {
            let text = epoch_text(epoch);
            self.cmpxattr(EPOCH_XATTR, ffi::CMPXATTR_OP_GTE, &text)
                .setxattr(EPOCH_XATTR, &text);
        }
        self
    }

    /// Runs the operation and waits for the cluster's answer (a librados return code).
    pub(super) fn run(&self, io: &Ioctx, oid: &CStr) -> i32 {
        // SAFETY: live operation and context; a null mtime means "now".
        io.round_trip("write op", &oid.to_string_lossy(), || unsafe {
            ffi::rados_write_op_operate(
                self.raw,
                io.raw,
                oid.as_ptr(),
                ptr::null_mut(),
                ffi::OPERATION_NOFLAG,
            )
        })
    }

    /// Sends the operation; the completion reports the cluster's answer.
    pub(super) fn send(&self, io: &Ioctx, oid: &CStr) -> std::result::Result<Completion, i32> {
        let completion = Completion::new();
        // SAFETY: live operation, context and completion. The operation's contents are moved
        // into the request when it is sent, so it may be released before the completion fires.
        let ret = unsafe {
            ffi::rados_aio_write_op_operate(
                self.raw,
                io.raw,
                completion.0,
                oid.as_ptr(),
                ptr::null_mut(),
                ffi::OPERATION_NOFLAG,
            )
        };
        if ret < 0 { Err(ret) } else { Ok(completion) }
    }
}

impl Drop for WriteOp {
    fn drop(&mut self) {
        // SAFETY: created by `rados_create_write_op`, released only here.
        unsafe { ffi::rados_release_write_op(self.raw) }
    }
}

/// An asynchronous operation's completion, released when dropped (after waiting for it).
pub(super) struct Completion(pub(super) ffi::CompletionT);

// SAFETY: a completion may be waited on and released from any thread.
unsafe impl Send for Completion {}

impl Completion {
    pub(super) fn new() -> Self {
        let mut raw: ffi::CompletionT = ptr::null_mut();
        // SAFETY: valid out-pointer; no callbacks.
        let ret = unsafe {
            ffi::rados_aio_create_completion(
                ptr::null_mut(),
                ptr::null(),
                ptr::null(),
                &raw mut raw,
            )
        };
        assert!(ret >= 0, "librados could not allocate a completion");
        Self(raw)
    }

    /// Whether the operation has completed (then [`Completion::wait`] returns at once).
    pub(super) fn is_complete(&self) -> bool {
        // SAFETY: live completion of a sent operation.
        unsafe { ffi::rados_aio_is_complete(self.0) != 0 }
    }

    /// Waits for the operation; its return code.
    pub(super) fn wait(&self) -> i32 {
        // SAFETY: live completion of a sent operation.
        unsafe {
            ffi::rados_aio_wait_for_complete(self.0);
            ffi::rados_aio_get_return_value(self.0)
        }
    }
}

impl Drop for Completion {
    fn drop(&mut self) {
        // SAFETY: released once; waiting first means librados no longer refers to it.
        unsafe {
            ffi::rados_aio_wait_for_complete(self.0);
            ffi::rados_aio_release(self.0);
        }
    }
}
