//! The C ABI of walkfs (`walkfs.h`, `libwalkfs.so`).
//!
//! Every call returns a negative errno on failure and never touches the
//! global `errno`. Descriptors are walkfs's own. A `walkfs_t` may be used
//! from many threads at once, except `walkfs_set_creds` and
//! `walkfs_set_option("beneath")`, which must not race other calls on the
//! same context.

#![allow(clippy::missing_safety_doc)]

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};

use walkfs_vfs::{Creds, Ctx, Errno, Statx};

/// The opaque context behind `walkfs_t *`.
pub struct WalkfsCtx {
    ctx: Ctx,
}

/// Puts the caller's `errno` back when a C ABI call returns: the header
/// promises that no call changes it, while the system calls a backend
/// makes on the way (a failed `openat2`, a `statx`) set it.
struct ErrnoGuard(c_int);

impl ErrnoGuard {
    fn save() -> ErrnoGuard {
        // SAFETY: __errno_location returns the calling thread's errno,
        // valid for the thread's life.
        ErrnoGuard(unsafe { *libc::__errno_location() })
    }
}

impl Drop for ErrnoGuard {
    fn drop(&mut self) {
        // SAFETY: as in save(); the guard never leaves its thread.
        unsafe { *libc::__errno_location() = self.0 };
    }
}

fn err(e: Errno) -> c_int {
    -e.0
}

fn ret(r: Result<(), Errno>) -> c_int {
    match r {
        Ok(()) => 0,
        Err(e) => err(e),
    }
}

/// The bytes of a C path; `None` for NULL.
///
/// # Safety
/// `p` is NULL or a valid NUL-terminated string that outlives the borrow.
unsafe fn bytes<'a>(p: *const c_char) -> Option<&'a [u8]> {
    if p.is_null() {
        None
    } else {
        // SAFETY: the caller promises a valid C string.
        Some(unsafe { CStr::from_ptr(p) }.to_bytes())
    }
}

/// The context behind a handle; `None` for NULL.
///
/// # Safety
/// `w` is NULL or a pointer returned by `walkfs_open` and not yet closed.
unsafe fn ctx<'a>(w: *const WalkfsCtx) -> Option<&'a Ctx> {
    // SAFETY: per the function contract.
    unsafe { w.as_ref() }.map(|w| &w.ctx)
}

macro_rules! try_ptr {
    ($e:expr) => {
        match $e {
            Some(v) => v,
            None => return -libc::EFAULT as _,
        }
    };
}

/// `walkfs_t *walkfs_open(const char *source, const char *options)`.
#[no_mangle]
pub unsafe extern "C" fn walkfs_open(
    source: *const c_char,
    options: *const c_char,
) -> *mut WalkfsCtx {
    let _errno = ErrnoGuard::save();
    // SAFETY: C strings from the caller (or NULL).
    let (Some(src), opts) = (unsafe { bytes(source) }, unsafe { bytes(options) }) else {
        return std::ptr::null_mut();
    };
    let (Ok(src), Ok(opts)) = (
        std::str::from_utf8(src),
        std::str::from_utf8(opts.unwrap_or(b"")),
    ) else {
        return std::ptr::null_mut();
    };
    // The vfs's options and the backend's, as one string.
    let Ok(opts) = walkfs_source::SourceOptions::parse(opts) else {
        return std::ptr::null_mut();
    };
    match walkfs_source::open(src, &opts) {
        Ok(vfs) => Box::into_raw(Box::new(WalkfsCtx {
            ctx: vfs.context(Creds::current()),
        })),
        Err(_) => std::ptr::null_mut(),
    }
}

/// `void walkfs_close_ctx(walkfs_t *)`: closes every descriptor.
#[no_mangle]
pub unsafe extern "C" fn walkfs_close_ctx(w: *mut WalkfsCtx) {
    let _errno = ErrnoGuard::save();
    if !w.is_null() {
        // SAFETY: `w` came from walkfs_open (Box::into_raw) and is closed once.
        drop(unsafe { Box::from_raw(w) });
    }
}

/// `int walkfs_set_option(walkfs_t *, const char *name, const char *value)`.
#[no_mangle]
pub unsafe extern "C" fn walkfs_set_option(
    w: *mut WalkfsCtx,
    name: *const c_char,
    value: *const c_char,
) -> c_int {
    let _errno = ErrnoGuard::save();
    // SAFETY: handle and strings from the caller.
    let (w, name, value) = unsafe {
        (
            try_ptr!(w.as_mut()),
            try_ptr!(bytes(name)),
            try_ptr!(bytes(value)),
        )
    };
    let (Ok(name), Ok(value)) = (std::str::from_utf8(name), std::str::from_utf8(value)) else {
        return -libc::EINVAL;
    };
    if name == "beneath" {
        // The context's, not the vfs's; a switch like the others.
        return match walkfs_vfs::opt::flag(name, value) {
            Ok(on) => {
                w.ctx.set_beneath(on);
                0
            }
            Err(e) => err(e.into()),
        };
    }
    ret(w.ctx.vfs().set_option(name, value).map_err(Errno::from))
}

/// `int walkfs_set_creds(walkfs_t *, uid_t, gid_t, int ngroups, const gid_t *groups)`.
#[no_mangle]
pub unsafe extern "C" fn walkfs_set_creds(
    w: *mut WalkfsCtx,
    uid: libc::uid_t,
    gid: libc::gid_t,
    ngroups: c_int,
    groups: *const libc::gid_t,
) -> c_int {
    let _errno = ErrnoGuard::save();
    // SAFETY: handle from the caller.
    let w = unsafe { try_ptr!(w.as_mut()) };
    let groups = match ngroups {
        n if n < 0 => return -libc::EINVAL,
        0 => Vec::new(),
        n => {
            if groups.is_null() {
                return -libc::EFAULT;
            }
            // SAFETY: the caller passes `ngroups` valid gids.
            unsafe { std::slice::from_raw_parts(groups, n as usize) }.to_vec()
        }
    };
    w.ctx.set_creds(Creds {
        uid,
        gid,
        groups,
        privileged: false,
    });
    0
}

/// `int walkfs_faccessat(walkfs_t *, int dirfd, const char *path, int mode, int flags)`.
#[no_mangle]
pub unsafe extern "C" fn walkfs_faccessat(
    w: *const WalkfsCtx,
    dirfd: c_int,
    path: *const c_char,
    mode: c_int,
    flags: c_int,
) -> c_int {
    let _errno = ErrnoGuard::save();
    // SAFETY: handle and path from the caller.
    let (c, p) = unsafe { (try_ptr!(ctx(w)), try_ptr!(bytes(path))) };
    ret(c.faccessat(dirfd, p, mode, flags))
}

/// `ssize_t walkfs_readlinkat(walkfs_t *, int dirfd, const char *path, char *buf, size_t len)`.
#[no_mangle]
pub unsafe extern "C" fn walkfs_readlinkat(
    w: *const WalkfsCtx,
    dirfd: c_int,
    path: *const c_char,
    buf: *mut c_char,
    len: usize,
) -> isize {
    let _errno = ErrnoGuard::save();
    // SAFETY: handle and path from the caller.
    let (c, p) = unsafe { (try_ptr!(ctx(w)), try_ptr!(bytes(path))) };
    if buf.is_null() && len > 0 {
        return -libc::EFAULT as isize;
    }
    let out: &mut [u8] = if len == 0 {
        &mut []
    } else {
        // SAFETY: the caller passes `len` writable bytes at `buf`.
        unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), len) }
    };
    match c.readlinkat_into(dirfd, p, out) {
        Ok(n) => n as isize,
        Err(e) => -(e.0 as isize),
    }
}

/// `int walkfs_statx(walkfs_t *, int dirfd, const char *path, int flags, unsigned mask, struct statx *out)`.
#[no_mangle]
pub unsafe extern "C" fn walkfs_statx(
    w: *const WalkfsCtx,
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mask: c_uint,
    out: *mut Statx,
) -> c_int {
    let _errno = ErrnoGuard::save();
    // SAFETY: handle and path from the caller.
    let (c, p) = unsafe { (try_ptr!(ctx(w)), try_ptr!(bytes(path))) };
    if out.is_null() {
        return -libc::EFAULT;
    }
    // SAFETY: `out` points at a caller's `struct statx`, whose layout
    // Statx reproduces exactly (checked at compile time): the result is
    // built in place, with no intermediate copy.
    let out = unsafe { &mut *out };
    ret(c.statx_into(dirfd, p, flags, mask, out))
}

/// `int walkfs_fstatat(walkfs_t *, int dirfd, const char *path, struct stat *out, int flags)`.
#[no_mangle]
pub unsafe extern "C" fn walkfs_fstatat(
    w: *const WalkfsCtx,
    dirfd: c_int,
    path: *const c_char,
    out: *mut libc::stat,
    flags: c_int,
) -> c_int {
    let _errno = ErrnoGuard::save();
    // SAFETY: handle and path from the caller.
    let (c, p) = unsafe { (try_ptr!(ctx(w)), try_ptr!(bytes(path))) };
    if out.is_null() {
        return -libc::EFAULT;
    }
    match c.fstatat(dirfd, p, flags) {
        Ok(st) => {
            // SAFETY: `out` points at a writable `struct stat`.
            unsafe { out.write(st) };
            0
        }
        Err(e) => err(e),
    }
}

/// `int walkfs_fstat(walkfs_t *, int fd, struct stat *out)`.
#[no_mangle]
pub unsafe extern "C" fn walkfs_fstat(
    w: *const WalkfsCtx,
    fd: c_int,
    out: *mut libc::stat,
) -> c_int {
    let _errno = ErrnoGuard::save();
    // SAFETY: handle from the caller.
    let c = unsafe { try_ptr!(ctx(w)) };
    if out.is_null() {
        return -libc::EFAULT;
    }
    // SAFETY: `out` points at a caller's writable `struct stat`.
    let out = unsafe { &mut *out };
    ret(c.fstat_into(fd, out))
}

/// `int walkfs_openat(walkfs_t *, int dirfd, const char *path, int flags, mode_t mode)`.
#[no_mangle]
pub unsafe extern "C" fn walkfs_openat(
    w: *const WalkfsCtx,
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: libc::mode_t,
) -> c_int {
    let _errno = ErrnoGuard::save();
    // SAFETY: handle and path from the caller.
    let (c, p) = unsafe { (try_ptr!(ctx(w)), try_ptr!(bytes(path))) };
    match c.openat(dirfd, p, flags, mode) {
        Ok(fd) => fd,
        Err(e) => err(e),
    }
}

/// `int walkfs_close(walkfs_t *, int fd)`.
#[no_mangle]
pub unsafe extern "C" fn walkfs_close(w: *const WalkfsCtx, fd: c_int) -> c_int {
    let _errno = ErrnoGuard::save();
    // SAFETY: handle from the caller.
    let c = unsafe { try_ptr!(ctx(w)) };
    ret(c.close(fd))
}

fn io(r: Result<usize, Errno>) -> isize {
    match r {
        Ok(n) => n as isize,
        Err(e) => -(e.0 as isize),
    }
}

/// A caller's buffer as a slice (empty for a zero length).
///
/// # Safety
/// `buf` is valid for `n` bytes (or `n` is 0).
unsafe fn buf_mut<'a>(buf: *mut c_void, n: usize) -> Option<&'a mut [u8]> {
    if n == 0 {
        return Some(&mut []);
    }
    // SAFETY: per the function contract.
    (!buf.is_null()).then(|| unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), n) })
}

/// # Safety
/// `buf` is valid for `n` bytes (or `n` is 0).
unsafe fn buf_ref<'a>(buf: *const c_void, n: usize) -> Option<&'a [u8]> {
    if n == 0 {
        return Some(&[]);
    }
    // SAFETY: per the function contract.
    (!buf.is_null()).then(|| unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), n) })
}

/// `ssize_t walkfs_read(walkfs_t *, int fd, void *buf, size_t n)`.
#[no_mangle]
pub unsafe extern "C" fn walkfs_read(
    w: *const WalkfsCtx,
    fd: c_int,
    buf: *mut c_void,
    n: usize,
) -> isize {
    let _errno = ErrnoGuard::save();
    // SAFETY: handle and buffer from the caller.
    let (c, b) = unsafe { (try_ptr!(ctx(w)), try_ptr!(buf_mut(buf, n))) };
    io(c.read(fd, b))
}

/// `ssize_t walkfs_pread(walkfs_t *, int fd, void *buf, size_t n, off_t off)`.
#[no_mangle]
pub unsafe extern "C" fn walkfs_pread(
    w: *const WalkfsCtx,
    fd: c_int,
    buf: *mut c_void,
    n: usize,
    off: libc::off_t,
) -> isize {
    let _errno = ErrnoGuard::save();
    // SAFETY: handle and buffer from the caller.
    let (c, b) = unsafe { (try_ptr!(ctx(w)), try_ptr!(buf_mut(buf, n))) };
    if off < 0 {
        return -libc::EINVAL as isize;
    }
    io(c.pread(fd, b, off as u64))
}

/// `ssize_t walkfs_write(walkfs_t *, int fd, const void *buf, size_t n)`.
#[no_mangle]
pub unsafe extern "C" fn walkfs_write(
    w: *const WalkfsCtx,
    fd: c_int,
    buf: *const c_void,
    n: usize,
) -> isize {
    let _errno = ErrnoGuard::save();
    // SAFETY: handle and buffer from the caller.
    let (c, b) = unsafe { (try_ptr!(ctx(w)), try_ptr!(buf_ref(buf, n))) };
    io(c.write(fd, b))
}

/// `ssize_t walkfs_pwrite(walkfs_t *, int fd, const void *buf, size_t n, off_t off)`.
#[no_mangle]
pub unsafe extern "C" fn walkfs_pwrite(
    w: *const WalkfsCtx,
    fd: c_int,
    buf: *const c_void,
    n: usize,
    off: libc::off_t,
) -> isize {
    let _errno = ErrnoGuard::save();
    // SAFETY: handle and buffer from the caller.
    let (c, b) = unsafe { (try_ptr!(ctx(w)), try_ptr!(buf_ref(buf, n))) };
    if off < 0 {
        return -libc::EINVAL as isize;
    }
    io(c.pwrite(fd, b, off as u64))
}

/// `int walkfs_mkdirat(walkfs_t *, int dirfd, const char *path, mode_t mode)`.
#[no_mangle]
pub unsafe extern "C" fn walkfs_mkdirat(
    w: *const WalkfsCtx,
    dirfd: c_int,
    path: *const c_char,
    mode: libc::mode_t,
) -> c_int {
    let _errno = ErrnoGuard::save();
    // SAFETY: handle and path from the caller.
    let (c, p) = unsafe { (try_ptr!(ctx(w)), try_ptr!(bytes(path))) };
    ret(c.mkdirat(dirfd, p, mode).map(drop))
}

/// `int walkfs_unlinkat(walkfs_t *, int dirfd, const char *path, int flags)`.
#[no_mangle]
pub unsafe extern "C" fn walkfs_unlinkat(
    w: *const WalkfsCtx,
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
) -> c_int {
    let _errno = ErrnoGuard::save();
    // SAFETY: handle and path from the caller.
    let (c, p) = unsafe { (try_ptr!(ctx(w)), try_ptr!(bytes(path))) };
    ret(c.unlinkat(dirfd, p, flags))
}

/// `int walkfs_renameat2(walkfs_t *, int olddirfd, const char *oldpath, int newdirfd, const char *newpath, unsigned flags)`.
#[no_mangle]
pub unsafe extern "C" fn walkfs_renameat2(
    w: *const WalkfsCtx,
    olddirfd: c_int,
    oldpath: *const c_char,
    newdirfd: c_int,
    newpath: *const c_char,
    flags: c_uint,
) -> c_int {
    let _errno = ErrnoGuard::save();
    // SAFETY: handle and paths from the caller.
    let (c, o, n) = unsafe {
        (
            try_ptr!(ctx(w)),
            try_ptr!(bytes(oldpath)),
            try_ptr!(bytes(newpath)),
        )
    };
    ret(c.renameat2(olddirfd, o, newdirfd, n, flags))
}

/// `int walkfs_symlinkat(walkfs_t *, const char *target, int newdirfd, const char *linkpath)`.
#[no_mangle]
pub unsafe extern "C" fn walkfs_symlinkat(
    w: *const WalkfsCtx,
    target: *const c_char,
    newdirfd: c_int,
    linkpath: *const c_char,
) -> c_int {
    let _errno = ErrnoGuard::save();
    // SAFETY: handle and strings from the caller.
    let (c, t, l) = unsafe {
        (
            try_ptr!(ctx(w)),
            try_ptr!(bytes(target)),
            try_ptr!(bytes(linkpath)),
        )
    };
    ret(c.symlinkat(t, newdirfd, l).map(drop))
}

/// `int walkfs_mknodat(walkfs_t *, int dirfd, const char *path, mode_t mode, dev_t dev)`.
#[no_mangle]
pub unsafe extern "C" fn walkfs_mknodat(
    w: *const WalkfsCtx,
    dirfd: c_int,
    path: *const c_char,
    mode: libc::mode_t,
    dev: libc::dev_t,
) -> c_int {
    let _errno = ErrnoGuard::save();
    // SAFETY: handle and path from the caller.
    let (c, p) = unsafe { (try_ptr!(ctx(w)), try_ptr!(bytes(path))) };
    ret(c.mknodat(dirfd, p, mode, dev).map(drop))
}

/// `int walkfs_linkat(walkfs_t *, int olddirfd, const char *oldpath, int newdirfd, const char *newpath, int flags)`.
#[no_mangle]
pub unsafe extern "C" fn walkfs_linkat(
    w: *const WalkfsCtx,
    olddirfd: c_int,
    oldpath: *const c_char,
    newdirfd: c_int,
    newpath: *const c_char,
    flags: c_int,
) -> c_int {
    let _errno = ErrnoGuard::save();
    // SAFETY: handle and paths from the caller.
    let (c, o, n) = unsafe {
        (
            try_ptr!(ctx(w)),
            try_ptr!(bytes(oldpath)),
            try_ptr!(bytes(newpath)),
        )
    };
    ret(c.linkat(olddirfd, o, newdirfd, n, flags).map(drop))
}

/// `int walkfs_fchmodat(walkfs_t *, int dirfd, const char *path, mode_t mode, int flags)`.
#[no_mangle]
pub unsafe extern "C" fn walkfs_fchmodat(
    w: *const WalkfsCtx,
    dirfd: c_int,
    path: *const c_char,
    mode: libc::mode_t,
    flags: c_int,
) -> c_int {
    let _errno = ErrnoGuard::save();
    // SAFETY: handle and path from the caller.
    let (c, p) = unsafe { (try_ptr!(ctx(w)), try_ptr!(bytes(path))) };
    ret(c.fchmodat(dirfd, p, mode, flags))
}

/// `int walkfs_fchownat(walkfs_t *, int dirfd, const char *path, uid_t, gid_t, int flags)`.
#[no_mangle]
pub unsafe extern "C" fn walkfs_fchownat(
    w: *const WalkfsCtx,
    dirfd: c_int,
    path: *const c_char,
    uid: libc::uid_t,
    gid: libc::gid_t,
    flags: c_int,
) -> c_int {
    let _errno = ErrnoGuard::save();
    // SAFETY: handle and path from the caller.
    let (c, p) = unsafe { (try_ptr!(ctx(w)), try_ptr!(bytes(path))) };
    ret(c.fchownat(dirfd, p, uid, gid, flags))
}

/// `int walkfs_ftruncate(walkfs_t *, int fd, off_t len)`.
#[no_mangle]
pub unsafe extern "C" fn walkfs_ftruncate(
    w: *const WalkfsCtx,
    fd: c_int,
    len: libc::off_t,
) -> c_int {
    let _errno = ErrnoGuard::save();
    // SAFETY: handle from the caller.
    let c = unsafe { try_ptr!(ctx(w)) };
    ret(c.ftruncate(fd, len))
}
