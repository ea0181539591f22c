//! statx, built once and copied out once (seed 004): the result is filled
//! from one validated inode snapshot into a zeroed struct on the stack, and
//! `stat`/`fstat`/`lstat` are views of it.

use crate::dcache::{dev_from_u32, InodeSnap};

/// `struct statx_timestamp`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StatxTimestamp {
    pub tv_sec: i64,
    pub tv_nsec: u32,
    pub reserved: i32,
}

/// `struct statx`, laid out exactly as Linux's (256 bytes), so the C ABI
/// hands it out with a single copy.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Statx {
    pub stx_mask: u32,
    pub stx_blksize: u32,
    pub stx_attributes: u64,
    pub stx_nlink: u32,
    pub stx_uid: u32,
    pub stx_gid: u32,
    pub stx_mode: u16,
    pub spare0: u16,
    pub stx_ino: u64,
    pub stx_size: u64,
    pub stx_blocks: u64,
    pub stx_attributes_mask: u64,
    pub stx_atime: StatxTimestamp,
    pub stx_btime: StatxTimestamp,
    pub stx_ctime: StatxTimestamp,
    pub stx_mtime: StatxTimestamp,
    pub stx_rdev_major: u32,
    pub stx_rdev_minor: u32,
    pub stx_dev_major: u32,
    pub stx_dev_minor: u32,
    pub stx_mnt_id: u64,
    pub stx_dio_mem_align: u32,
    pub stx_dio_offset_align: u32,
    pub spare3: [u64; 12],
}

const _: () = assert!(std::mem::size_of::<Statx>() == 256);

/// Device major walkfs reports for its superblocks (an unnamed-device
/// major, as tmpfs and FUSE use).
const WALKFS_DEV_MAJOR: u32 = 0;
const WALKFS_DEV_MINOR_BASE: u32 = 0x700;

fn stamp(ns: i64) -> StatxTimestamp {
    StatxTimestamp {
        tv_sec: ns.div_euclid(1_000_000_000),
        tv_nsec: ns.rem_euclid(1_000_000_000) as u32,
        reserved: 0,
    }
}

impl Statx {
    /// Build the result from one inode snapshot, in place: one zeroing
    /// store of the whole struct, then the fields. Every basic field is
    /// filled whatever `_mask` asks (Linux allows more than requested);
    /// `stx_mask` says what is valid.
    #[inline(always)]
    pub(crate) fn build_into(s: &InodeSnap, _mask: u32, out: &mut Statx) {
        let (rmaj, rmin) = if s.is_symlink() {
            (0, 0)
        } else {
            dev_from_u32(s.rdev)
        };
        // One literal, so every byte is stored once (no zeroing pass
        // followed by the fields).
        let born = if s.btime != 0 { libc::STATX_BTIME } else { 0 };
        *out = Statx {
            stx_mask: libc::STATX_BASIC_STATS | born,
            stx_blksize: 4096,
            stx_attributes: 0,
            stx_nlink: s.nlink,
            stx_uid: s.uid,
            stx_gid: s.gid,
            stx_mode: s.mode as u16,
            spare0: 0,
            stx_ino: s.ino,
            stx_size: s.size,
            stx_blocks: s.blocks,
            stx_attributes_mask: 0,
            stx_atime: stamp(s.atime),
            stx_btime: stamp(s.btime),
            stx_ctime: stamp(s.ctime),
            stx_mtime: stamp(s.mtime),
            stx_rdev_major: rmaj,
            stx_rdev_minor: rmin,
            stx_dev_major: WALKFS_DEV_MAJOR,
            stx_dev_minor: WALKFS_DEV_MINOR_BASE + s.sb() as u32,
            stx_mnt_id: s.sb() as u64 + 1,
            stx_dio_mem_align: 0,
            stx_dio_offset_align: 0,
            spare3: [0; 12],
        };
    }

    /// The birth time in nanoseconds since the epoch; 0 when unknown
    /// (`STATX_BTIME` not in `stx_mask`). With the inode number it names
    /// the file's incarnation ([`crate::generation_of`]).
    pub fn born(&self) -> i64 {
        if self.stx_mask & libc::STATX_BTIME == 0 {
            return 0;
        }
        self.stx_btime.tv_sec * 1_000_000_000 + i64::from(self.stx_btime.tv_nsec)
    }

    /// The `struct stat` view.
    pub fn to_stat(&self) -> libc::stat {
        // SAFETY: `struct stat` is plain old data; all-zero is valid.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        st.st_dev = libc::makedev(self.stx_dev_major, self.stx_dev_minor);
        st.st_ino = self.stx_ino;
        st.st_nlink = self.stx_nlink as _;
        st.st_mode = self.stx_mode as u32;
        st.st_uid = self.stx_uid;
        st.st_gid = self.stx_gid;
        st.st_rdev = libc::makedev(self.stx_rdev_major, self.stx_rdev_minor);
        st.st_size = self.stx_size as i64;
        st.st_blksize = self.stx_blksize as _;
        st.st_blocks = self.stx_blocks as i64;
        st.st_atime = self.stx_atime.tv_sec;
        st.st_atime_nsec = self.stx_atime.tv_nsec as _;
        st.st_mtime = self.stx_mtime.tv_sec;
        st.st_mtime_nsec = self.stx_mtime.tv_nsec as _;
        st.st_ctime = self.stx_ctime.tv_sec;
        st.st_ctime_nsec = self.stx_ctime.tv_nsec as _;
        st
    }

    pub fn file_type(&self) -> Option<walkfs_fsapi::FileType> {
        walkfs_fsapi::FileType::from_mode(self.stx_mode as u32)
    }
}

/// `struct stat` straight from an inode snapshot (fstat's own path).
#[inline(always)]
pub(crate) fn stat_into(s: &InodeSnap, st: &mut libc::stat) {
    let (rmaj, rmin) = if s.is_symlink() {
        (0, 0)
    } else {
        dev_from_u32(s.rdev)
    };
    // SAFETY: `struct stat` is plain old data; all-zero is valid.
    *st = unsafe { std::mem::zeroed() };
    st.st_dev = libc::makedev(WALKFS_DEV_MAJOR, WALKFS_DEV_MINOR_BASE + s.sb() as u32);
    st.st_ino = s.ino;
    st.st_nlink = s.nlink as _;
    st.st_mode = s.mode;
    st.st_uid = s.uid;
    st.st_gid = s.gid;
    st.st_rdev = libc::makedev(rmaj, rmin);
    st.st_size = s.size as i64;
    st.st_blksize = 4096;
    st.st_blocks = s.blocks as i64;
    let t = |ns: i64| (ns.div_euclid(1_000_000_000), ns.rem_euclid(1_000_000_000));
    (st.st_atime, st.st_atime_nsec) = t(s.atime);
    (st.st_mtime, st.st_mtime_nsec) = t(s.mtime);
    (st.st_ctime, st.st_ctime_nsec) = t(s.ctime);
}
