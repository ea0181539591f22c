//! Thin, checked wrappers over the host syscalls hostfs uses. Every unsafe
//! block of the crate lives here, each one a single libc call on valid
//! arguments.

use std::ffi::CString;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use walkfs_fsapi::{Attr, Errno, Result, Timespec};

pub fn cstr(bytes: &[u8]) -> Result<CString> {
    CString::new(bytes).map_err(|_| Errno::EINVAL)
}

fn owned(fd: libc::c_int) -> Result<OwnedFd> {
    let fd = Errno::result(fd)?;
    // SAFETY: `fd` was just returned by the kernel and belongs to nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `openat2(dir, name, flags, mode, resolve)`, falling back to `openat` on
/// kernels without openat2 (single names without `/` cannot leave `dir`
/// anyway; the resolve flags are a second fence).
pub fn openat2(
    dir: BorrowedFd,
    name: &[u8],
    flags: i32,
    mode: u32,
    resolve: u64,
) -> Result<OwnedFd> {
    let c = cstr(name)?;
    // SAFETY: open_how is a plain C struct for which all-zero is valid.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = flags as u64 | libc::O_CLOEXEC as u64;
    how.mode = mode as u64;
    how.resolve = resolve;
    // SAFETY: `c` is a valid NUL-terminated string, `how` a valid open_how
    // whose size we pass; the kernel writes nothing back.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir.as_raw_fd(),
            c.as_ptr(),
            &mut how as *mut libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    if ret == -1 && Errno::last() == Errno::ENOSYS {
        return openat(dir, name, flags, mode);
    }
    owned(if ret < 0 { -1 } else { ret as libc::c_int })
}

pub fn openat(dir: BorrowedFd, name: &[u8], flags: i32, mode: u32) -> Result<OwnedFd> {
    let c = cstr(name)?;
    // SAFETY: valid C string; the returned fd is owned by the caller.
    owned(unsafe { libc::openat(dir.as_raw_fd(), c.as_ptr(), flags | libc::O_CLOEXEC, mode) })
}

/// The decimal name of `fd` under `/proc/self/fd`.
pub fn fd_name(fd: RawFd) -> Vec<u8> {
    fd.to_string().into_bytes()
}

pub fn statx(fd: BorrowedFd) -> Result<Attr> {
    Ok(identify(fd)?.0)
}

/// Attributes, the (device, inode) key and the birth time in ns (0 when
/// the file system keeps none) of `fd`, in one call: the birth time tells
/// a file from a later one that reuses its inode number.
pub fn identify(fd: BorrowedFd) -> Result<(Attr, (u64, u64), i64)> {
    identify_at(fd, c"", libc::AT_EMPTY_PATH)
}

/// [`identify`] of `name` in directory `dir`, never following a link
/// (the caller checked `name` is one plain component).
pub fn identify_name(dir: BorrowedFd, name: &[u8]) -> Result<(Attr, (u64, u64), i64)> {
    identify_at(dir, &cstr(name)?, 0)
}

fn identify_at(
    fd: BorrowedFd,
    path: &std::ffi::CStr,
    flags: i32,
) -> Result<(Attr, (u64, u64), i64)> {
    // SAFETY: an all-zero statx is a valid value of this plain C struct.
    let mut st: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: the path is a valid C string, `st` is writable.
    let r = unsafe {
        libc::statx(
            fd.as_raw_fd(),
            path.as_ptr(),
            flags | libc::AT_SYMLINK_NOFOLLOW,
            libc::STATX_BASIC_STATS | libc::STATX_BTIME,
            &mut st,
        )
    };
    Errno::result(r)?;
    let ts = |t: libc::statx_timestamp| Timespec {
        sec: t.tv_sec,
        nsec: t.tv_nsec,
    };
    let attr = Attr {
        ino: st.stx_ino,
        mode: st.stx_mode as u32,
        nlink: st.stx_nlink,
        uid: st.stx_uid,
        gid: st.stx_gid,
        rdev: libc::makedev(st.stx_rdev_major, st.stx_rdev_minor),
        size: st.stx_size,
        blocks: st.stx_blocks,
        atime: ts(st.stx_atime),
        mtime: ts(st.stx_mtime),
        ctime: ts(st.stx_ctime),
        btime: if st.stx_mask & libc::STATX_BTIME != 0 {
            ts(st.stx_btime)
        } else {
            Timespec::default()
        },
        has_acl: false,
    };
    let dev = libc::makedev(st.stx_dev_major, st.stx_dev_minor);
    let born = attr.btime.as_nanos();
    Ok((attr, (dev, st.stx_ino), born))
}

pub fn readlinkat_empty(fd: BorrowedFd) -> Result<Vec<u8>> {
    readlinkat(fd, c"")
}

/// The body of symlink `name` in `dir` (empty: `dir` itself, an
/// `O_PATH` descriptor of the link).
pub fn readlinkat(dir: BorrowedFd, name: &std::ffi::CStr) -> Result<Vec<u8>> {
    let mut buf = vec![0u8; walkfs_fsapi::PATH_MAX];
    // SAFETY: `name` is a valid C string; `buf` is writable for its whole
    // length.
    let n = unsafe {
        libc::readlinkat(
            dir.as_raw_fd(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    let n = Errno::result(n)? as usize;
    buf.truncate(n);
    Ok(buf)
}

pub fn mkdirat(dir: BorrowedFd, name: &[u8], mode: u32) -> Result<()> {
    let c = cstr(name)?;
    // SAFETY: valid C string.
    Errno::result(unsafe { libc::mkdirat(dir.as_raw_fd(), c.as_ptr(), mode) }).map(drop)
}

pub fn mknodat(dir: BorrowedFd, name: &[u8], mode: u32, rdev: u64) -> Result<()> {
    let c = cstr(name)?;
    // SAFETY: valid C string.
    Errno::result(unsafe { libc::mknodat(dir.as_raw_fd(), c.as_ptr(), mode, rdev) }).map(drop)
}

pub fn symlinkat(target: &[u8], dir: BorrowedFd, name: &[u8]) -> Result<()> {
    let (t, c) = (cstr(target)?, cstr(name)?);
    // SAFETY: valid C strings.
    Errno::result(unsafe { libc::symlinkat(t.as_ptr(), dir.as_raw_fd(), c.as_ptr()) }).map(drop)
}

pub fn unlinkat(dir: BorrowedFd, name: &[u8], flags: i32) -> Result<()> {
    let c = cstr(name)?;
    // SAFETY: valid C string.
    Errno::result(unsafe { libc::unlinkat(dir.as_raw_fd(), c.as_ptr(), flags) }).map(drop)
}

pub fn renameat2(od: BorrowedFd, on: &[u8], nd: BorrowedFd, nn: &[u8], flags: u32) -> Result<()> {
    let (o, n) = (cstr(on)?, cstr(nn)?);
    // SAFETY: valid C strings and fds.
    let r = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            od.as_raw_fd(),
            o.as_ptr(),
            nd.as_raw_fd(),
            n.as_ptr(),
            flags,
        )
    };
    Errno::result(r).map(drop)
}

pub fn linkat(od: BorrowedFd, on: &[u8], nd: BorrowedFd, nn: &[u8], flags: i32) -> Result<()> {
    let (o, n) = (cstr(on)?, cstr(nn)?);
    // SAFETY: valid C strings and fds.
    let r = unsafe {
        libc::linkat(
            od.as_raw_fd(),
            o.as_ptr(),
            nd.as_raw_fd(),
            n.as_ptr(),
            flags,
        )
    };
    Errno::result(r).map(drop)
}

pub fn fchownat_empty(fd: BorrowedFd, uid: u32, gid: u32) -> Result<()> {
    // SAFETY: valid empty path; AT_EMPTY_PATH acts on `fd` itself.
    let r = unsafe {
        libc::fchownat(
            fd.as_raw_fd(),
            c"".as_ptr(),
            uid,
            gid,
            libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    Errno::result(r).map(drop)
}

pub fn fchmodat(dir: BorrowedFd, name: &[u8], mode: u32) -> Result<()> {
    let c = cstr(name)?;
    // SAFETY: valid C string.
    Errno::result(unsafe { libc::fchmodat(dir.as_raw_fd(), c.as_ptr(), mode, 0) }).map(drop)
}

pub fn utimensat(dir: BorrowedFd, name: &[u8], times: &[libc::timespec; 2]) -> Result<()> {
    let c = cstr(name)?;
    // SAFETY: valid C string, `times` points at two timespecs.
    Errno::result(unsafe { libc::utimensat(dir.as_raw_fd(), c.as_ptr(), times.as_ptr(), 0) })
        .map(drop)
}

pub fn ftruncate(fd: BorrowedFd, size: u64) -> Result<()> {
    let size = i64::try_from(size).map_err(|_| Errno::EFBIG)?;
    // SAFETY: plain syscall on a valid fd.
    Errno::result(unsafe { libc::ftruncate(fd.as_raw_fd(), size) }).map(drop)
}

pub fn pread(fd: BorrowedFd, buf: &mut [u8], off: u64) -> Result<usize> {
    let off = i64::try_from(off).map_err(|_| Errno::EINVAL)?;
    // SAFETY: `buf` is writable for its length.
    let n = unsafe { libc::pread(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), off) };
    Errno::result(n).map(|n| n as usize)
}

pub fn pwrite(fd: BorrowedFd, data: &[u8], off: u64) -> Result<usize> {
    let off = i64::try_from(off).map_err(|_| Errno::EFBIG)?;
    // SAFETY: `data` is readable for its length.
    let n = unsafe { libc::pwrite(fd.as_raw_fd(), data.as_ptr().cast(), data.len(), off) };
    Errno::result(n).map(|n| n as usize)
}

pub fn fstatfs(fd: BorrowedFd) -> Result<libc::statfs> {
    // SAFETY: an all-zero statfs is a valid value of this plain C struct.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is writable.
    Errno::result(unsafe { libc::fstatfs(fd.as_raw_fd(), &mut st) })?;
    Ok(st)
}

/// Every entry of the open directory `fd` as (name, ino, d_type), without
/// `.` and `..`.
pub fn getdents(fd: BorrowedFd) -> Result<Vec<(Vec<u8>, u64, u8)>> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        // SAFETY: `buf` is writable for its length.
        let n = unsafe {
            libc::syscall(
                libc::SYS_getdents64,
                fd.as_raw_fd(),
                buf.as_mut_ptr(),
                buf.len(),
            )
        };
        let n = Errno::result(n)? as usize;
        if n == 0 {
            return Ok(out);
        }
        let mut off = 0;
        // struct linux_dirent64 { u64 ino; i64 off; u16 reclen; u8 type; char name[]; }
        while off + 19 <= n {
            let ino = u64::from_ne_bytes(buf[off..off + 8].try_into().map_err(|_| Errno::EIO)?);
            let reclen = u16::from_ne_bytes([buf[off + 16], buf[off + 17]]) as usize;
            let dtype = buf[off + 18];
            if reclen == 0 || off + reclen > n {
                return Err(Errno::EIO);
            }
            let name = &buf[off + 19..off + reclen];
            let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
            if name != b"." && name != b".." {
                out.push((name.to_vec(), ino, dtype));
            }
            off += reclen;
        }
    }
}

pub fn umask() -> u32 {
    // SAFETY: umask has no failure mode; we restore the old value at once.
    unsafe {
        let old = libc::umask(0o022);
        libc::umask(old);
        old
    }
}

pub fn geteuid() -> u32 {
    // SAFETY: no failure mode.
    unsafe { libc::geteuid() }
}

pub fn getegid() -> u32 {
    // SAFETY: no failure mode.
    unsafe { libc::getegid() }
}

pub fn inotify_init() -> Result<OwnedFd> {
    // SAFETY: plain syscall; the fd returned is ours.
    owned(unsafe { libc::inotify_init1(libc::IN_CLOEXEC | libc::IN_NONBLOCK) })
}

/// Watch `path` (relative to the working directory) with `mask`.
pub fn inotify_add_watch(fd: BorrowedFd, path: &[u8], mask: u32) -> Result<i32> {
    let c = cstr(path)?;
    // SAFETY: valid fd and C string.
    Errno::result(unsafe { libc::inotify_add_watch(fd.as_raw_fd(), c.as_ptr(), mask) })
}

pub fn fchdir(fd: BorrowedFd) -> Result<()> {
    // SAFETY: plain syscall on a valid fd.
    Errno::result(unsafe { libc::fchdir(fd.as_raw_fd()) }).map(drop)
}

/// Wait up to `ms` for any of `fds` to be readable; which are.
pub fn poll_in(fds: &[BorrowedFd], ms: i32) -> Result<Vec<bool>> {
    let mut p: Vec<libc::pollfd> = fds
        .iter()
        .map(|fd| libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    // SAFETY: `p` holds `p.len()` valid pollfds.
    match Errno::result(unsafe { libc::poll(p.as_mut_ptr(), p.len() as libc::nfds_t, ms) }) {
        Ok(_) => Ok(p.iter().map(|p| p.revents & libc::POLLIN != 0).collect()),
        Err(Errno::EINTR) => Ok(vec![false; fds.len()]),
        Err(e) => Err(e),
    }
}

pub fn read(fd: BorrowedFd, buf: &mut [u8]) -> Result<usize> {
    // SAFETY: `buf` is writable for its length.
    let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
    Errno::result(n).map(|n| n as usize)
}

/// A notification-only fanotify group reporting directory fids and names
/// (needs CAP_SYS_ADMIN and Linux 5.9); its queue without a limit if
/// `unlimited` and allowed.
pub fn fanotify_init(unlimited: bool) -> Result<OwnedFd> {
    let flags =
        libc::FAN_CLASS_NOTIF | libc::FAN_REPORT_DFID_NAME | libc::FAN_CLOEXEC | libc::FAN_NONBLOCK;
    let init = |flags| {
        // SAFETY: plain syscall; the fd returned is ours.
        owned(unsafe { libc::fanotify_init(flags, libc::O_RDONLY as libc::c_uint) })
    };
    if unlimited {
        if let Ok(fd) = init(flags | libc::FAN_UNLIMITED_QUEUE) {
            return Ok(fd);
        }
    }
    init(flags)
}

/// Mark the whole file system holding `name` (relative to `dir`).
pub fn fanotify_mark_filesystem(
    fan: BorrowedFd,
    mask: u64,
    dir: BorrowedFd,
    name: &[u8],
) -> Result<()> {
    let c = cstr(name)?;
    // SAFETY: valid fds and C string.
    Errno::result(unsafe {
        libc::fanotify_mark(
            fan.as_raw_fd(),
            libc::FAN_MARK_ADD | libc::FAN_MARK_FILESYSTEM,
            mask,
            dir.as_raw_fd(),
            c.as_ptr(),
        )
    })
    .map(drop)
}

/// The longest host file handle asked for.
const MAX_HANDLE: usize = 128;

#[repr(C)]
struct RawHandle {
    bytes: u32,
    kind: i32,
    data: [u8; MAX_HANDLE],
}

/// The host file handle of `fd` (an `O_PATH` descriptor): its type and
/// bytes.
pub fn file_handle(fd: BorrowedFd) -> Result<(i32, Vec<u8>)> {
    let mut h = RawHandle {
        bytes: MAX_HANDLE as u32,
        kind: 0,
        data: [0; MAX_HANDLE],
    };
    let mut mount_id = 0;
    // SAFETY: `h` is a file_handle with room for MAX_HANDLE bytes, as its
    // `handle_bytes` says; the path is an empty C string.
    Errno::result(unsafe {
        libc::name_to_handle_at(
            fd.as_raw_fd(),
            c"".as_ptr(),
            (&mut h as *mut RawHandle).cast(),
            &mut mount_id,
            libc::AT_EMPTY_PATH,
        )
    })?;
    let n = (h.bytes as usize).min(MAX_HANDLE);
    Ok((h.kind, h.data[..n].to_vec()))
}

/// Open the file of host handle (`kind`, `data`) on the file system of
/// `mount_fd`, with `flags` (`CAP_DAC_READ_SEARCH` needed).
pub fn open_by_handle(mount_fd: BorrowedFd, kind: i32, data: &[u8], flags: i32) -> Result<OwnedFd> {
    if data.len() > MAX_HANDLE {
        return Err(Errno::ESTALE);
    }
    let mut h = RawHandle {
        bytes: data.len() as u32,
        kind,
        data: [0; MAX_HANDLE],
    };
    h.data[..data.len()].copy_from_slice(data);
    // SAFETY: `h` is a file_handle whose `handle_bytes` bytes are set; the
    // kernel only reads it.
    let fd = Errno::result(unsafe {
        libc::open_by_handle_at(
            mount_fd.as_raw_fd(),
            (&mut h as *mut RawHandle).cast(),
            flags | libc::O_CLOEXEC,
        )
    })?;
    // SAFETY: the call returned a new descriptor, ours alone.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The file handle of `fd` (an `O_PATH` descriptor) as fanotify reports
/// it: file system id, handle type, handle bytes.
pub fn handle_of(fd: BorrowedFd) -> Result<Vec<u8>> {
    let (kind, data) = file_handle(fd)?;
    let st = fstatfs(fd)?;
    // SAFETY: fsid_t is two C ints (8 bytes, no padding), as fanotify
    // reports it.
    let fsid: [u8; 8] = unsafe { std::mem::transmute(st.f_fsid) };
    Ok(handle_key(&fsid, kind, &data))
}

/// The key a directory's handle is known by.
pub fn handle_key(fsid: &[u8], kind: i32, data: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(12 + data.len());
    k.extend_from_slice(fsid);
    k.extend_from_slice(&kind.to_ne_bytes());
    k.extend_from_slice(data);
    k
}

/// The working directory is the process's: a call that takes a path
/// relative to it (`/proc/self/fd/N` as `N`, after an `fchdir` to that
/// directory) holds this. Nothing else in walkfs uses relative paths.
pub static CWD: parking_lot::Mutex<()> = parking_lot::Mutex::new(());

/// Run `call` with the name of `fd` in `/proc/self/fd` (`proc_fd`) as a
/// C path relative to the working directory, which is that directory
/// meanwhile. The xattr calls take a path, and this one reaches the very
/// inode an `O_PATH` descriptor holds (a symlink itself, not what it
/// points to), also where `/proc` is not in the process's root (a
/// confined server opened `proc_fd` before it confined itself).
fn at_proc_name<T>(
    proc_fd: BorrowedFd,
    fd: BorrowedFd,
    call: impl FnOnce(&std::ffi::CStr) -> Result<T>,
) -> Result<T> {
    let name = cstr(&fd_name(fd.as_raw_fd()))?;
    let _cwd = CWD.lock();
    fchdir(proc_fd)?;
    call(&name)
}

/// Read a value the kernel sizes for us (`getxattr`, `listxattr`): ask the
/// size, then fetch; a value that grew in between is asked again.
fn sized(mut call: impl FnMut(*mut libc::c_void, usize) -> isize) -> Result<Vec<u8>> {
    loop {
        let n = call(std::ptr::null_mut(), 0);
        let n = usize::try_from(n).map_err(|_| Errno::last())?;
        let mut buf = vec![0u8; n];
        if n == 0 {
            return Ok(buf);
        }
        let got = call(buf.as_mut_ptr().cast(), n);
        match usize::try_from(got) {
            Ok(got) => {
                buf.truncate(got);
                return Ok(buf);
            }
            Err(_) if Errno::last() == Errno::ERANGE => continue,
            Err(_) => return Err(Errno::last()),
        }
    }
}

pub fn getxattr(proc_fd: BorrowedFd, fd: BorrowedFd, name: &[u8]) -> Result<Vec<u8>> {
    let n = cstr(name)?;
    at_proc_name(proc_fd, fd, |p| {
        // SAFETY: valid C strings; the buffer pointer and size come from
        // `sized`, which owns the buffer.
        sized(|buf, size| unsafe { libc::getxattr(p.as_ptr(), n.as_ptr(), buf, size) })
    })
}

pub fn listxattr(proc_fd: BorrowedFd, fd: BorrowedFd) -> Result<Vec<u8>> {
    at_proc_name(proc_fd, fd, |p| {
        // SAFETY: as in `getxattr`.
        sized(|buf, size| unsafe { libc::listxattr(p.as_ptr(), buf.cast(), size) })
    })
}

pub fn setxattr(
    proc_fd: BorrowedFd,
    fd: BorrowedFd,
    name: &[u8],
    value: &[u8],
    flags: i32,
) -> Result<()> {
    let n = cstr(name)?;
    at_proc_name(proc_fd, fd, |p| {
        // SAFETY: valid C strings and a value slice with its length.
        let r = unsafe {
            libc::setxattr(
                p.as_ptr(),
                n.as_ptr(),
                value.as_ptr().cast(),
                value.len(),
                flags,
            )
        };
        Errno::result(r).map(drop)
    })
}

pub fn removexattr(proc_fd: BorrowedFd, fd: BorrowedFd, name: &[u8]) -> Result<()> {
    let n = cstr(name)?;
    at_proc_name(proc_fd, fd, |p| {
        // SAFETY: valid C strings.
        Errno::result(unsafe { libc::removexattr(p.as_ptr(), n.as_ptr()) }).map(drop)
    })
}

pub fn fallocate(fd: BorrowedFd, mode: i32, off: u64, len: u64) -> Result<()> {
    let off = i64::try_from(off).map_err(|_| Errno::EFBIG)?;
    let len = i64::try_from(len).map_err(|_| Errno::EFBIG)?;
    // SAFETY: plain syscall on a valid fd.
    Errno::result(unsafe { libc::fallocate(fd.as_raw_fd(), mode, off, len) }).map(drop)
}

/// `lseek(fd, off, SEEK_DATA | SEEK_HOLE)`. The descriptor's position
/// moves, which nothing of ours reads (all I/O is positioned).
pub fn seek_data(fd: BorrowedFd, off: u64, whence: i32) -> Result<u64> {
    let off = i64::try_from(off).map_err(|_| Errno::ENXIO)?;
    // SAFETY: plain syscall on a valid fd.
    let r = unsafe { libc::lseek(fd.as_raw_fd(), off, whence) };
    Errno::result(r).map(|p| p as u64)
}
