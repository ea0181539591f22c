//! The kernel's FUSE structures (include/uapi/linux/fuse.h, ABI 7.42),
//! as far as walkfs speaks them. All are plain old data in the
//! machine's byte order; [`Pod`] turns them into bytes and back.

/// Opcodes (fuse.h's `enum fuse_opcode`).
pub mod op {
    pub const LOOKUP: u32 = 1;
    pub const FORGET: u32 = 2;
    pub const GETATTR: u32 = 3;
    pub const SETATTR: u32 = 4;
    pub const READLINK: u32 = 5;
    pub const SYMLINK: u32 = 6;
    pub const MKNOD: u32 = 8;
    pub const MKDIR: u32 = 9;
    pub const UNLINK: u32 = 10;
    pub const RMDIR: u32 = 11;
    pub const RENAME: u32 = 12;
    pub const LINK: u32 = 13;
    pub const OPEN: u32 = 14;
    pub const READ: u32 = 15;
    pub const WRITE: u32 = 16;
    pub const STATFS: u32 = 17;
    pub const RELEASE: u32 = 18;
    pub const FSYNC: u32 = 20;
    pub const SETXATTR: u32 = 21;
    pub const GETXATTR: u32 = 22;
    pub const LISTXATTR: u32 = 23;
    pub const REMOVEXATTR: u32 = 24;
    pub const FLUSH: u32 = 25;
    pub const INIT: u32 = 26;
    pub const OPENDIR: u32 = 27;
    pub const READDIR: u32 = 28;
    pub const RELEASEDIR: u32 = 29;
    pub const FSYNCDIR: u32 = 30;
    pub const GETLK: u32 = 31;
    pub const SETLK: u32 = 32;
    pub const SETLKW: u32 = 33;
    pub const ACCESS: u32 = 34;
    pub const CREATE: u32 = 35;
    pub const INTERRUPT: u32 = 36;
    pub const DESTROY: u32 = 38;
    pub const IOCTL: u32 = 39;
    pub const BATCH_FORGET: u32 = 42;
    pub const FALLOCATE: u32 = 43;
    pub const READDIRPLUS: u32 = 44;
    pub const RENAME2: u32 = 45;
    pub const LSEEK: u32 = 46;
    pub const TMPFILE: u32 = 51;
}

/// `fuse_init_in.flags` / `fuse_init_out.flags` bits (the low word; the
/// high word travels in `flags2` once `INIT_EXT` is agreed).
pub mod init {
    pub const ASYNC_READ: u64 = 1 << 0;
    /// Record locks (fcntl) are the server's: GETLK, SETLK, SETLKW.
    pub const POSIX_LOCKS: u64 = 1 << 1;
    pub const ATOMIC_O_TRUNC: u64 = 1 << 3;
    /// The kernel leaves the umask to the server (MKNOD, MKDIR, CREATE
    /// carry it apart from the mode): a directory's default ACL, not the
    /// umask, decides then.
    /// LOOKUP of `.` and `..` for file handles of forgotten nodes.
    pub const EXPORT_SUPPORT: u64 = 1 << 4;
    pub const DONT_MASK: u64 = 1 << 6;
    pub const BIG_WRITES: u64 = 1 << 5;
    /// `flock` locks are the server's too (SETLK with `LK_FLOCK`).
    pub const FLOCK_LOCKS: u64 = 1 << 10;
    pub const HAS_IOCTL_DIR: u64 = 1 << 11;
    pub const DO_READDIRPLUS: u64 = 1 << 13;
    pub const READDIRPLUS_AUTO: u64 = 1 << 14;
    pub const WRITEBACK_CACHE: u64 = 1 << 16;
    pub const PARALLEL_DIROPS: u64 = 1 << 18;
    /// POSIX ACLs: the kernel checks permissions with them (under
    /// default_permissions) and caches them; the server stores them as
    /// `system.posix_acl_*` attributes and keeps mode and ACL in step.
    pub const POSIX_ACL: u64 = 1 << 20;
    pub const MAX_PAGES: u64 = 1 << 22;
    pub const CACHE_SYMLINKS: u64 = 1 << 23;
    pub const NO_OPENDIR_SUPPORT: u64 = 1 << 24;
    pub const HANDLE_KILLPRIV_V2: u64 = 1 << 28;
    pub const INIT_EXT: u64 = 1 << 30;
    /// File I/O straight to a backing file the server names (kernel
    /// 6.9+; the server needs CAP_SYS_ADMIN). The kernel refuses it
    /// together with `WRITEBACK_CACHE`.
    pub const PASSTHROUGH: u64 = 1 << 37;
    /// FUSE over io_uring (kernel 6.14+, `enable_uring` set).
    pub const OVER_IO_URING: u64 = 1 << 41;
}

/// What a released Linux kernel offers in INIT: its protocol minor
/// version and the `init` flags its `fuse_send_init` may set (those that
/// depend on its configuration, DAX, passthrough or io_uring, counted as
/// offered when the kernel has them at all). From the change log in
/// `include/uapi/linux/fuse.h`: flags are numbered in the order they were
/// added, so each kernel offers the bits below a mark.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelAbi {
    /// `5.15`, `6.1`, ...
    pub name: &'static str,
    pub minor: u32,
    pub flags: u64,
}

/// Every bit below `1 << n`.
const fn below(n: u32) -> u64 {
    (1u64 << n) - 1
}

/// The kernels of the distributions people run VMs with, oldest first:
/// Debian 11 (5.10), Ubuntu 22.04 (5.15), Debian 12 (6.1), Ubuntu 24.04
/// (6.8).
pub const KERNELS: [KernelAbi; 4] = [
    // 7.32: up to SUBMOUNTS (bit 27).
    KernelAbi {
        name: "5.10",
        minor: 32,
        flags: below(28),
    },
    // 7.34: + HANDLE_KILLPRIV_V2, SETXATTR_EXT.
    KernelAbi {
        name: "5.15",
        minor: 34,
        flags: below(30),
    },
    // 7.37: + INIT_EXT with flags2: SECURITY_CTX, HAS_INODE_DAX.
    KernelAbi {
        name: "6.1",
        minor: 37,
        flags: below(31) | 1 << 32 | 1 << 33,
    },
    // 7.39: + CREATE_SUPP_GROUP, HAS_EXPIRE_ONLY, DIRECT_IO_ALLOW_MMAP
    // (PASSTHROUGH came in 6.9, OVER_IO_URING in 6.14).
    KernelAbi {
        name: "6.8",
        minor: 39,
        flags: below(31) | 0x1f << 32,
    },
];

impl KernelAbi {
    /// The kernel called `name` in [`KERNELS`] (`6.1`, or `linux-6.1`).
    pub fn named(name: &str) -> Option<&'static KernelAbi> {
        let n = name.strip_prefix("linux-").unwrap_or(name);
        KERNELS.iter().find(|k| k.name == n)
    }
}

/// `fuse_setattr_in.valid` bits.
pub mod fattr {
    pub const MODE: u32 = 1 << 0;
    pub const UID: u32 = 1 << 1;
    pub const GID: u32 = 1 << 2;
    pub const SIZE: u32 = 1 << 3;
    pub const ATIME: u32 = 1 << 4;
    pub const MTIME: u32 = 1 << 5;
    pub const FH: u32 = 1 << 6;
    pub const ATIME_NOW: u32 = 1 << 7;
    pub const MTIME_NOW: u32 = 1 << 8;
    pub const KILL_SUIDGID: u32 = 1 << 11;
}

/// `fuse_open_out.open_flags` bits.
pub mod fopen {
    pub const KEEP_CACHE: u32 = 1 << 1;
    /// No FLUSH at this open file's closes (kernel 5.16+).
    pub const NOFLUSH: u32 = 1 << 5;
    /// Reads, writes and mmap of this open file go to the backing file
    /// `fuse_open_out.backing_id` names.
    pub const PASSTHROUGH: u32 = 1 << 7;
}

/// `/dev/fuse` ioctls (`_IOW(229, nr, size)`).
pub mod ioc {
    const fn iow(nr: u64, size: u64) -> u64 {
        (1 << 30) | (size << 16) | (229 << 8) | nr
    }
    /// Register a backing file (`fuse_backing_map`); returns its id.
    pub const BACKING_OPEN: u64 = iow(1, 16);
    /// Drop a backing id (`u32`); open files keep their backing file.
    pub const BACKING_CLOSE: u64 = iow(2, 4);
}

/// `fuse_write_in.write_flags`: the writer lacks CAP_FSETID, clear set-id
/// bits (kill-priv v2).
pub const WRITE_KILL_SUIDGID: u32 = 1 << 2;
/// `fuse_lk_in.lk_flags`: a `flock` lock, not a record lock.
pub const LK_FLOCK: u32 = 1 << 0;
/// `fuse_release_in.release_flags`: the file held flock locks, which go
/// with it (`lock_owner` is theirs).
pub const RELEASE_FLOCK_UNLOCK: u32 = 1 << 1;
/// `fuse_getattr_in.getattr_flags`: `fh` is valid.
pub const GETATTR_FH: u32 = 1 << 0;

/// Notification codes (`enum fuse_notify_code`), sent with unique 0.
pub mod notify {
    pub const INVAL_INODE: i32 = 2;
    pub const INVAL_ENTRY: i32 = 3;
}

/// Types that are their bytes: `repr(C)`, no padding the kernel does not
/// also have, every bit pattern valid.
///
/// # Safety
/// Implement only for such types.
pub unsafe trait Pod: Copy + Default {
    fn as_bytes(&self) -> &[u8] {
        // SAFETY: Pod types are plain data of exactly this size.
        unsafe {
            std::slice::from_raw_parts((self as *const Self).cast(), std::mem::size_of::<Self>())
        }
    }

    /// The value at the start of `b`, if `b` is long enough.
    fn read(b: &[u8]) -> Option<Self> {
        if b.len() < std::mem::size_of::<Self>() {
            return None;
        }
        // SAFETY: long enough; any bit pattern is valid; read_unaligned
        // makes no assumption about the buffer's alignment.
        Some(unsafe { std::ptr::read_unaligned(b.as_ptr().cast::<Self>()) })
    }
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct InHeader {
    pub len: u32,
    pub opcode: u32,
    pub unique: u64,
    pub nodeid: u64,
    pub uid: u32,
    pub gid: u32,
    pub pid: u32,
    pub total_extlen: u16,
    pub padding: u16,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct OutHeader {
    pub len: u32,
    pub error: i32,
    pub unique: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct InitIn {
    pub major: u32,
    pub minor: u32,
    pub max_readahead: u32,
    pub flags: u32,
    pub flags2: u32,
    pub unused: [u32; 11],
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct InitOut {
    pub major: u32,
    pub minor: u32,
    pub max_readahead: u32,
    pub flags: u32,
    pub max_background: u16,
    pub congestion_threshold: u16,
    pub max_write: u32,
    pub time_gran: u32,
    pub max_pages: u16,
    pub map_alignment: u16,
    pub flags2: u32,
    pub max_stack_depth: u32,
    pub request_timeout: u16,
    pub unused: [u16; 11],
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct Attr {
    pub ino: u64,
    pub size: u64,
    pub blocks: u64,
    pub atime: u64,
    pub mtime: u64,
    pub ctime: u64,
    pub atimensec: u32,
    pub mtimensec: u32,
    pub ctimensec: u32,
    pub mode: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub rdev: u32,
    pub blksize: u32,
    pub flags: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct EntryOut {
    pub nodeid: u64,
    pub generation: u64,
    pub entry_valid: u64,
    pub attr_valid: u64,
    pub entry_valid_nsec: u32,
    pub attr_valid_nsec: u32,
    pub attr: Attr,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct AttrOut {
    pub attr_valid: u64,
    pub attr_valid_nsec: u32,
    pub dummy: u32,
    pub attr: Attr,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ReadIn {
    pub fh: u64,
    pub offset: u64,
    pub size: u32,
    pub read_flags: u32,
    pub lock_owner: u64,
    pub flags: u32,
    pub padding: u32,
}

/// A directory entry's fixed part; the name follows, padded to 8 bytes.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct Dirent {
    pub ino: u64,
    pub off: u64,
    pub namelen: u32,
    pub kind: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct Kstatfs {
    pub blocks: u64,
    pub bfree: u64,
    pub bavail: u64,
    pub files: u64,
    pub ffree: u64,
    pub bsize: u32,
    pub namelen: u32,
    pub frsize: u32,
    pub padding: u32,
    pub spare: [u32; 6],
}

/// A request's own header of eight bytes or more whose fields are all
/// `u64`/`u32` (the kernel's names, in order).
macro_rules! wire {
    ($($(#[$m:meta])* $name:ident { $($f:ident: $t:ty),* $(,)? })*) => {$(
        $(#[$m])*
        #[repr(C)]
        #[derive(Clone, Copy, Default, Debug)]
        pub struct $name { $(pub $f: $t),* }
        // SAFETY: repr(C), integer fields only, laid out as the kernel's
        // (sizes checked in the tests below).
        unsafe impl Pod for $name {}
    )*};
}

wire! {
    ForgetIn { nlookup: u64 }
    BatchForgetIn { count: u32, dummy: u32 }
    ForgetOne { nodeid: u64, nlookup: u64 }
    GetattrIn { getattr_flags: u32, dummy: u32, fh: u64 }
    SetattrIn {
        valid: u32, padding: u32, fh: u64, size: u64, lock_owner: u64,
        atime: u64, mtime: u64, ctime: u64,
        atimensec: u32, mtimensec: u32, ctimensec: u32, mode: u32,
        unused4: u32, uid: u32, gid: u32, unused5: u32,
    }
    MknodIn { mode: u32, rdev: u32, umask: u32, padding: u32 }
    MkdirIn { mode: u32, umask: u32 }
    RenameIn { newdir: u64 }
    Rename2In { newdir: u64, flags: u32, padding: u32 }
    LinkIn { oldnodeid: u64 }
    OpenIn { flags: u32, open_flags: u32 }
    OpenOut { fh: u64, open_flags: u32, backing_id: i32 }
    BackingMap { fd: i32, flags: u32, padding: u64 }
    CreateIn { flags: u32, mode: u32, umask: u32, open_flags: u32 }
    ReleaseIn { fh: u64, flags: u32, release_flags: u32, lock_owner: u64 }
    FlushIn { fh: u64, unused: u32, padding: u32, lock_owner: u64 }
    WriteIn {
        fh: u64, offset: u64, size: u32, write_flags: u32,
        lock_owner: u64, flags: u32, padding: u32,
    }
    WriteOut { size: u32, padding: u32 }
    FsyncIn { fh: u64, fsync_flags: u32, padding: u32 }
    GetxattrIn { size: u32, padding: u32 }
    /// GETXATTR, LISTXATTR with size 0: how large the answer is.
    GetxattrOut { size: u32, padding: u32 }
    /// SETXATTR (without `SETXATTR_EXT`): the value's size, `XATTR_*`.
    SetxattrIn { size: u32, flags: u32 }
    AccessIn { mask: u32, padding: u32 }
    IoctlIn { fh: u64, flags: u32, cmd: u32, arg: u64, in_size: u32, out_size: u32 }
    IoctlOut { result: i32, flags: u32, in_iovs: u32, out_iovs: u32 }
    InterruptIn { unique: u64 }
    FallocateIn { fh: u64, offset: u64, length: u64, mode: u32, padding: u32 }
    /// LSEEK: only SEEK_DATA and SEEK_HOLE reach the server.
    LseekIn { fh: u64, offset: u64, whence: u32, padding: u32 }
    LseekOut { offset: u64 }
    /// GETLK, SETLK, SETLKW: the file, the lock's owner, the lock
    /// (`fuse_file_lock`: first and last byte, F_RDLCK/F_WRLCK/F_UNLCK,
    /// the caller's pid) and `LK_FLOCK` for a flock.
    LkIn {
        fh: u64, owner: u64, start: u64, end: u64, ty: u32, pid: u32,
        lk_flags: u32, padding: u32,
    }
    /// GETLK's reply: the lock in the way (F_UNLCK: none).
    LkOut { start: u64, end: u64, ty: u32, pid: u32 }
    NotifyInvalInode { ino: u64, off: i64, len: i64 }
    NotifyInvalEntry { parent: u64, namelen: u32, flags: u32 }
}

/// The fixed part of an io_uring ring entry's header buffer: the request
/// or reply header, the operation's own header, and the entry's
/// bookkeeping (fuse_uring_req_header).
pub const URING_IN_OUT_SZ: usize = 128;
pub const URING_OP_SZ: usize = 128;

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct UringEntInOut {
    pub flags: u64,
    pub commit_id: u64,
    pub payload_sz: u32,
    pub padding: u32,
    pub reserved: u64,
}

/// `fuse_uring_cmd_req`, in an SQE's command area.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct UringCmdReq {
    pub flags: u64,
    pub commit_id: u64,
    pub qid: u16,
    pub padding: [u8; 6],
}

pub const URING_CMD_REGISTER: u32 = 1;
pub const URING_CMD_COMMIT_AND_FETCH: u32 = 2;

// SAFETY: each is repr(C) plain data matching the kernel's layout, with
// every field an integer (no invalid bit patterns).
unsafe impl Pod for InHeader {}
unsafe impl Pod for OutHeader {}
unsafe impl Pod for InitIn {}
unsafe impl Pod for InitOut {}
unsafe impl Pod for Attr {}
unsafe impl Pod for EntryOut {}
unsafe impl Pod for AttrOut {}
unsafe impl Pod for ReadIn {}
unsafe impl Pod for Dirent {}
unsafe impl Pod for Kstatfs {}
unsafe impl Pod for UringEntInOut {}
unsafe impl Pod for UringCmdReq {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::size_of;

    /// The sizes fuse.h gives (FUSE_COMPAT_*_SIZE and the structures).
    #[test]
    fn layouts_match_the_kernel() {
        assert_eq!(size_of::<InHeader>(), 40);
        assert_eq!(size_of::<OutHeader>(), 16);
        assert_eq!(size_of::<InitIn>(), 64);
        assert_eq!(size_of::<InitOut>(), 64);
        assert_eq!(size_of::<Attr>(), 88);
        assert_eq!(size_of::<EntryOut>(), 128);
        assert_eq!(size_of::<AttrOut>(), 104);
        assert_eq!(size_of::<ReadIn>(), 40);
        assert_eq!(size_of::<Dirent>(), 24);
        assert_eq!(size_of::<Kstatfs>(), 80);
        assert_eq!(size_of::<UringEntInOut>(), 32);
        assert_eq!(size_of::<UringCmdReq>(), 24);
        assert_eq!(size_of::<SetattrIn>(), 88);
        assert_eq!(size_of::<WriteIn>(), 40);
        assert_eq!(size_of::<CreateIn>(), 16);
        assert_eq!(size_of::<OpenOut>(), 16);
        assert_eq!(size_of::<BackingMap>(), 16);
        // The kernel's numbers for _IOW(229, 1, struct fuse_backing_map)
        // and _IOW(229, 2, uint32_t).
        assert_eq!(ioc::BACKING_OPEN, 0x4010_e501);
        assert_eq!(ioc::BACKING_CLOSE, 0x4004_e502);
        assert_eq!(size_of::<ReleaseIn>(), 24);
        assert_eq!(size_of::<FlushIn>(), 24);
        assert_eq!(size_of::<LkIn>(), 48);
        assert_eq!(size_of::<LkOut>(), 24);
        assert_eq!(size_of::<IoctlIn>(), 32);
        assert_eq!(size_of::<IoctlOut>(), 16);
        assert_eq!(size_of::<MknodIn>(), 16);
        assert_eq!(size_of::<Rename2In>(), 16);
        assert_eq!(size_of::<ForgetOne>(), 16);
        assert_eq!(size_of::<NotifyInvalInode>(), 24);
        assert_eq!(size_of::<NotifyInvalEntry>(), 16);
    }

    #[test]
    fn a_short_buffer_reads_as_nothing() {
        assert!(InHeader::read(&[0u8; 39]).is_none());
        let h = InHeader {
            len: 40,
            opcode: op::GETATTR,
            ..Default::default()
        };
        let back = InHeader::read(h.as_bytes()).expect("whole header");
        assert_eq!((back.len, back.opcode), (40, op::GETATTR));
    }
}
