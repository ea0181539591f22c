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
use crate::writeback::Cursor;

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
    /// The write-back failures this file has seen (writeback.rs).
    pub seen: Cursor,
}

impl File {
    /// Open on (dentry, inode): the caller holds this file BUSY (a table
    /// slot it claimed) or alone (an [`crate::OpenFile`] being made), and
    /// transfers one dentry reference to it. `wb_seen`: the write-back
    /// failures a new file has seen ([`crate::writeback::WriteBack::sample`]).
    pub fn fill(&self, dentry: DIdx, inode: IIdx, flags: i32, fh: u64, wb_seen: (u64, u64)) {
        *self.pos.lock() = 0;
        *self.dir.lock() = None;
        self.seen.reset(wb_seen);
        self.seq.write_begin();
        self.dentry.store(dentry.0, Relaxed);
        self.inode.store(inode.0, Relaxed);
        self.flags.store(flags as u32, Relaxed);
        self.fh.store(fh, Relaxed);
        self.seq.write_end();
        self.state.store(OPEN, crate::sync::Ordering::Release);
    }

    /// Still open? A call that waited for [`File::open_lock`] asks again:
    /// the file may have been closed meanwhile (and its slot reused).
    #[inline]
    pub fn is_open(&self) -> bool {
        self.state.load(Acquire) == OPEN
    }

    /// Close: returns (dentry, backend handle, inode) for the caller to
    /// release; `EBADF` when it was not open (closed already).
    pub fn empty(&self) -> Result<(DIdx, u64, IIdx)> {
        self.state
            .compare_exchange(OPEN, BUSY, AcqRel, Relaxed)
            .map_err(|_| Errno::EBADF)?;
        // A deferred backend open in progress finishes first, so its
        // handle is ours to release.
        let _g = self.open_lock.lock();
        self.seq.write_begin();
        let out = (
            DIdx(self.dentry.load(Relaxed)),
            self.fh.load(Relaxed),
            IIdx(self.inode.load(Relaxed)),
        );
        self.dentry.store(0, Relaxed);
        self.inode.store(0, Relaxed);
        self.fh.store(NO_HANDLE, Relaxed);
        self.seq.write_end();
        *self.dir.lock() = None;
        self.state.store(FREE, crate::sync::Ordering::Release);
        Ok(out)
    }
}

/// A context's descriptors.
pub(crate) struct FdTable {
    slots: Box<[File]>,
    /// Low 32 bits: no slot below this is free (a lower bound, so
    /// `install` still returns the lowest free descriptor without scanning
    /// the used ones: a file server keeps thousands open). High 32 bits:
    /// how many closes lowered it, so an `install` that scanned before a
    /// close cannot raise the bound over the slot that close freed.
    hint: AtomicU64,
}

impl FdTable {
    pub fn new(max: usize) -> FdTable {
        FdTable {
            slots: (0..max).map(|_| File::default()).collect(),
            hint: AtomicU64::new(0),
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
    /// `wb_seen`: the write-back failures a new file has seen
    /// ([`crate::writeback::WriteBack::sample`]).
    pub fn install(
        &self,
        dentry: DIdx,
        inode: IIdx,
        flags: i32,
        fh: u64,
        wb_seen: (u64, u64),
    ) -> Result<i32> {
        let from = self.hint.load(Acquire);
        for (i, f) in self.slots.iter().enumerate().skip(from as u32 as usize) {
            if f.state.load(Relaxed) != FREE
                || f.state
                    .compare_exchange(FREE, BUSY, AcqRel, Relaxed)
                    .is_err()
            {
                continue;
            }
            f.fill(dentry, inode, flags, fh, wb_seen);
            // Slots below i + 1 are taken now, unless a close happened
            // meanwhile (then the CAS fails and its lower value stands).
            let next = (from & !0xffff_ffff) | (i as u64 + 1);
            let _ = self.hint.compare_exchange(from, next, AcqRel, Relaxed);
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
        let out = f.empty()?;
        let _ = self.hint.fetch_update(AcqRel, Relaxed, |h| {
            let low = (h as u32).min(fd as u32) as u64;
            Some(((h >> 32).wrapping_add(1) << 32) | low)
        });
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
