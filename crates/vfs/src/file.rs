//! Open files: each context's descriptor table, with the open-file objects
//! inline in its slots.
//!
//! Opening claims a free slot with one compare-and-swap and pins the
//! dentry without the vfs writer lock (see writer.rs), so `open`/`close`
//! scale with threads. `fstat` reads fd -> file -> inode with loads only:
//! the slot's sequence count moves whenever the slot is (re)filled or
//! emptied, and an open file's pinned dentry keeps its inode, so an inode
//! read while the count is unchanged belongs to that file.

use parking_lot::Mutex;

use walkfs_fsapi::{DirEntry, Errno, Result};

use crate::dcache::{DIdx, IIdx};
use crate::seqlock::SeqCount;
use crate::sync::{
    AtomicU32, AtomicU64,
    Ordering::{AcqRel, Acquire, Relaxed},
};

/// `fh` of an `O_PATH` file: no backend handle, no I/O.
pub(crate) const NO_HANDLE: u64 = u64::MAX;
/// `fh` of a read-only file the backend has not opened yet: it is opened
/// on first I/O (most opens of a compiler only stat and close).
pub(crate) const LAZY: u64 = u64::MAX - 1;

const FREE: u32 = 0;
const BUSY: u32 = 1;
const OPEN: u32 = 2;

#[derive(Default)]
pub(crate) struct File {
    /// FREE, BUSY (being filled or emptied) or OPEN.
    state: AtomicU32,
    pub seq: SeqCount,
    pub dentry: AtomicU32,
    pub inode: AtomicU32,
    /// The `open(2)` flags.
    pub flags: AtomicU32,
    /// The backend's handle, [`NO_HANDLE`] or [`LAZY`].
    pub fh: AtomicU64,
    /// The file position, under its own lock (Linux's `f_pos_lock`).
    pub pos: Mutex<u64>,
    /// Serialises the deferred backend open.
    pub open_lock: Mutex<()>,
    /// The directory listing a `getdents` sequence is reading.
    pub dir: Mutex<Option<Vec<DirEntry>>>,
}

/// A context's descriptors.
pub(crate) struct FdTable {
    slots: Box<[File]>,
}

impl FdTable {
    pub fn new(max: usize) -> FdTable {
        FdTable {
            slots: (0..max.max(1)).map(|_| File::default()).collect(),
        }
    }

    /// The open file behind `fd`.
    #[inline(always)]
    pub fn get(&self, fd: i32) -> Option<&File> {
        let f = self.slots.get(usize::try_from(fd).ok()?)?;
        (f.state.load(Acquire) == OPEN).then_some(f)
    }

    /// Install an open file on (dentry, inode) at the lowest free
    /// descriptor. The caller transfers one dentry reference to it.
    pub fn install(&self, dentry: DIdx, inode: IIdx, flags: i32, fh: u64) -> Result<i32> {
        for (i, f) in self.slots.iter().enumerate() {
            if f.state.load(Relaxed) != FREE
                || f.state
                    .compare_exchange(FREE, BUSY, AcqRel, Relaxed)
                    .is_err()
            {
                continue;
            }
            *f.pos.lock() = 0;
            *f.dir.lock() = None;
            f.seq.write_begin();
            f.dentry.store(dentry, Relaxed);
            f.inode.store(inode, Relaxed);
            f.flags.store(flags as u32, Relaxed);
            f.fh.store(fh, Relaxed);
            f.seq.write_end();
            f.state.store(OPEN, crate::sync::Ordering::Release);
            return Ok(i as i32);
        }
        Err(Errno::EMFILE)
    }

    /// Close `fd`: returns (dentry, backend handle) for the caller to
    /// release.
    pub fn remove(&self, fd: i32) -> Result<(DIdx, u64, IIdx)> {
        let f = self
            .slots
            .get(usize::try_from(fd).map_err(|_| Errno::EBADF)?)
            .ok_or(Errno::EBADF)?;
        f.state
            .compare_exchange(OPEN, BUSY, AcqRel, Relaxed)
            .map_err(|_| Errno::EBADF)?;
        // A deferred backend open in progress finishes first, so its
        // handle is ours to release.
        let _g = f.open_lock.lock();
        f.seq.write_begin();
        let out = (
            f.dentry.load(Relaxed),
            f.fh.load(Relaxed),
            f.inode.load(Relaxed),
        );
        f.dentry.store(0, Relaxed);
        f.inode.store(0, Relaxed);
        f.fh.store(NO_HANDLE, Relaxed);
        f.seq.write_end();
        *f.dir.lock() = None;
        f.state.store(FREE, crate::sync::Ordering::Release);
        Ok(out)
    }

    /// Every open descriptor (for closing a context).
    pub fn open_fds(&self) -> Vec<i32> {
        (0..self.slots.len())
            .filter(|&i| self.slots[i].state.load(Relaxed) == OPEN)
            .map(|i| i as i32)
            .collect()
    }
}
