//! The few declarations of `rados/librados.h` (Ceph's C client) that [`super`] calls.
//!
//! Owns: the raw signatures and constants, nothing else. Every handle here is an opaque
//! pointer owned by a wrapper in [`super`] that releases it exactly once. librados handles are
//! thread-safe (one cluster handle and one I/O context serve every thread), which is what the
//! wrappers' `Send`/`Sync` rest on.

use std::ffi::{c_char, c_int, c_void};

/// A cluster handle (`rados_t`).
pub type RadosT = *mut c_void;
/// An I/O context: one pool, one namespace (`rados_ioctx_t`).
pub type IoctxT = *mut c_void;
/// A compound write operation (`rados_write_op_t`).
pub type WriteOpT = *mut c_void;
/// An asynchronous completion (`rados_completion_t`).
pub type CompletionT = *mut c_void;
/// A compound read operation (`rados_read_op_t`).
pub type ReadOpT = *mut c_void;
/// An iterator over omap entries (`rados_omap_iter_t`).
pub type OmapIterT = *mut c_void;
/// `rados_list_ctx_t`.
pub type ListCtxT = *mut c_void;

/// `rados_watchcb2_t`: called on a librados thread for each notify of a watched object.
pub type WatchCb = unsafe extern "C" fn(
    arg: *mut c_void,
    notify_id: u64,
    handle: u64,
    notifier_id: u64,
    data: *mut c_void,
    data_len: usize,
);
/// `rados_watcherrcb_t`: called when a watch fails (notifies may have been missed).
pub type WatchErrCb = unsafe extern "C" fn(arg: *mut c_void, cookie: u64, err: c_int);

/// `rados_write_op_create`: fail with `EEXIST` when the object exists.
pub const CREATE_EXCLUSIVE: c_int = 1;
/// `rados_write_op_cmpxattr`: the given value is greater than or equal to the stored one (string
/// comparison; a missing attribute compares as the empty string).
pub const CMPXATTR_OP_GTE: u8 = 4;
/// `rados_write_op_cmpxattr`: the given value equals the stored one.
pub const CMPXATTR_OP_EQ: u8 = 1;
/// `rados_lock_exclusive` and the `lock` class's `lock` method: renew the lock this cookie
/// already holds, or take it when nobody holds it.
pub const LOCK_FLAG_MAY_RENEW: u8 = 1;
/// `rados_write_op_operate` flags: none.
pub const OPERATION_NOFLAG: c_int = 0;

#[link(name = "rados")]
unsafe extern "C" {
    pub fn rados_create2(
        cluster: *mut RadosT,
        clustername: *const c_char,
        name: *const c_char,
        flags: u64,
    ) -> c_int;
    pub fn rados_conf_read_file(cluster: RadosT, path: *const c_char) -> c_int;
    pub fn rados_conf_set(cluster: RadosT, option: *const c_char, value: *const c_char) -> c_int;
    pub fn rados_conf_get(
        cluster: RadosT,
        option: *const c_char,
        buf: *mut c_char,
        len: usize,
    ) -> c_int;
    pub fn rados_connect(cluster: RadosT) -> c_int;
    pub fn rados_shutdown(cluster: RadosT);

    pub fn rados_ioctx_create(cluster: RadosT, pool: *const c_char, io: *mut IoctxT) -> c_int;
    pub fn rados_ioctx_destroy(io: IoctxT);
    pub fn rados_ioctx_set_namespace(io: IoctxT, nspace: *const c_char);

    pub fn rados_read(
        io: IoctxT,
        oid: *const c_char,
        buf: *mut c_char,
        len: usize,
        off: u64,
    ) -> c_int;
    pub fn rados_stat(io: IoctxT, oid: *const c_char, size: *mut u64, mtime: *mut i64) -> c_int;
    pub fn rados_getxattr(
        io: IoctxT,
        oid: *const c_char,
        name: *const c_char,
        buf: *mut c_char,
        len: usize,
    ) -> c_int;

    pub fn rados_aio_stat(
        io: IoctxT,
        oid: *const c_char,
        completion: CompletionT,
        size: *mut u64,
        mtime: *mut i64,
    ) -> c_int;

    pub fn rados_write_op_omap_set(
        op: WriteOpT,
        keys: *const *const c_char,
        vals: *const *const c_char,
        lens: *const usize,
        num: usize,
    );
    pub fn rados_write_op_omap_rm_keys(op: WriteOpT, keys: *const *const c_char, num: usize);
    pub fn rados_create_read_op() -> ReadOpT;
    pub fn rados_release_read_op(op: ReadOpT);
    pub fn rados_read_op_stat(op: ReadOpT, psize: *mut u64, pmtime: *mut i64, prval: *mut c_int);
    pub fn rados_read_op_read(
        op: ReadOpT,
        offset: u64,
        len: usize,
        buffer: *mut c_char,
        bytes_read: *mut usize,
        prval: *mut c_int,
    );
    pub fn rados_read_op_omap_get_vals2(
        op: ReadOpT,
        start_after: *const c_char,
        filter_prefix: *const c_char,
        max_return: u64,
        iter: *mut OmapIterT,
        more: *mut u8,
        prval: *mut c_int,
    );
    pub fn rados_read_op_operate(
        op: ReadOpT,
        io: IoctxT,
        oid: *const c_char,
        flags: c_int,
    ) -> c_int;
    pub fn rados_omap_get_next(
        iter: OmapIterT,
        key: *mut *mut c_char,
        val: *mut *mut c_char,
        len: *mut usize,
    ) -> c_int;
    pub fn rados_omap_get_end(iter: OmapIterT);

    pub fn rados_nobjects_list_open(io: IoctxT, ctx: *mut ListCtxT) -> c_int;
    pub fn rados_nobjects_list_next(
        ctx: ListCtxT,
        entry: *mut *const c_char,
        key: *mut *const c_char,
        nspace: *mut *const c_char,
    ) -> c_int;
    pub fn rados_nobjects_list_close(ctx: ListCtxT);
    pub fn rados_write_op_assert_exists(op: WriteOpT);
    pub fn rados_create_write_op() -> WriteOpT;
    pub fn rados_release_write_op(op: WriteOpT);
    pub fn rados_write_op_create(op: WriteOpT, exclusive: c_int, category: *const c_char);
    pub fn rados_write_op_write(op: WriteOpT, buf: *const c_char, len: usize, offset: u64);
    pub fn rados_write_op_write_full(op: WriteOpT, buf: *const c_char, len: usize);
    pub fn rados_write_op_truncate(op: WriteOpT, offset: u64);
    pub fn rados_write_op_remove(op: WriteOpT);
    pub fn rados_write_op_cmpxattr(
        op: WriteOpT,
        name: *const c_char,
        comparison_operator: u8,
        value: *const c_char,
        value_len: usize,
    );
    pub fn rados_write_op_setxattr(
        op: WriteOpT,
        name: *const c_char,
        value: *const c_char,
        value_len: usize,
    );
    pub fn rados_write_op_exec(
        op: WriteOpT,
        cls: *const c_char,
        method: *const c_char,
        in_buf: *const c_char,
        in_len: usize,
        prval: *mut c_int,
    );
    pub fn rados_write_op_operate(
        op: WriteOpT,
        io: IoctxT,
        oid: *const c_char,
        mtime: *mut i64,
        flags: c_int,
    ) -> c_int;
    pub fn rados_aio_write_op_operate(
        op: WriteOpT,
        io: IoctxT,
        completion: CompletionT,
        oid: *const c_char,
        mtime: *mut i64,
        flags: c_int,
    ) -> c_int;

    pub fn rados_aio_create_completion(
        cb_arg: *mut c_void,
        cb_complete: *const c_void,
        cb_safe: *const c_void,
        completion: *mut CompletionT,
    ) -> c_int;
    pub fn rados_aio_wait_for_complete(completion: CompletionT) -> c_int;
    pub fn rados_aio_is_complete(completion: CompletionT) -> c_int;
    pub fn rados_aio_get_return_value(completion: CompletionT) -> c_int;
    pub fn rados_aio_release(completion: CompletionT);

    pub fn rados_unlock(
        io: IoctxT,
        oid: *const c_char,
        name: *const c_char,
        cookie: *const c_char,
    ) -> c_int;
    pub fn rados_list_lockers(
        io: IoctxT,
        oid: *const c_char,
        name: *const c_char,
        exclusive: *mut c_int,
        tag: *mut c_char,
        tag_len: *mut usize,
        clients: *mut c_char,
        clients_len: *mut usize,
        cookies: *mut c_char,
        cookies_len: *mut usize,
        addrs: *mut c_char,
        addrs_len: *mut usize,
    ) -> isize;
    pub fn rados_watch2(
        io: IoctxT,
        oid: *const c_char,
        cookie: *mut u64,
        watchcb: WatchCb,
        watcherrcb: WatchErrCb,
        arg: *mut c_void,
    ) -> c_int;
    pub fn rados_unwatch2(io: IoctxT, cookie: u64) -> c_int;
    pub fn rados_watch_flush(cluster: RadosT) -> c_int;
    pub fn rados_notify2(
        io: IoctxT,
        oid: *const c_char,
        buf: *const c_char,
        buf_len: c_int,
        timeout_ms: u64,
        reply_buffer: *mut *mut c_char,
        reply_buffer_len: *mut usize,
    ) -> c_int;
    pub fn rados_notify_ack(
        io: IoctxT,
        oid: *const c_char,
        notify_id: u64,
        cookie: u64,
        buf: *const c_char,
        buf_len: c_int,
    ) -> c_int;
    pub fn rados_break_lock(
        io: IoctxT,
        oid: *const c_char,
        name: *const c_char,
        client: *const c_char,
        cookie: *const c_char,
    ) -> c_int;
}
