//! The kernel's FUSE structures (include/uapi/linux/fuse.h, ABI 7.42),
//! as far as the prototype speaks them. All are plain old data in the
//! machine's byte order; [`Pod`] turns them into bytes and back.

/// Requests the prototype answers (opcode numbers of fuse.h).
pub mod op {
    pub const LOOKUP: u32 = 1;
    pub const FORGET: u32 = 2;
    pub const GETATTR: u32 = 3;
    pub const STATFS: u32 = 17;
    pub const GETXATTR: u32 = 22;
    pub const INIT: u32 = 26;
    pub const OPENDIR: u32 = 27;
    pub const READDIR: u32 = 28;
    pub const RELEASEDIR: u32 = 29;
    pub const INTERRUPT: u32 = 36;
    pub const DESTROY: u32 = 38;
    pub const BATCH_FORGET: u32 = 42;
    pub const READDIRPLUS: u32 = 44;
}

/// `fuse_init_in.flags` / `fuse_init_out.flags` bits (the low word; the
/// high word travels in `flags2` once `INIT_EXT` is agreed).
pub mod init {
    pub const DO_READDIRPLUS: u64 = 1 << 13;
    pub const READDIRPLUS_AUTO: u64 = 1 << 14;
    pub const PARALLEL_DIROPS: u64 = 1 << 18;
    pub const NO_OPENDIR_SUPPORT: u64 = 1 << 24;
    pub const INIT_EXT: u64 = 1 << 30;
    /// FUSE over io_uring (kernel 6.14+, `enable_uring` set).
    pub const OVER_IO_URING: u64 = 1 << 41;
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
