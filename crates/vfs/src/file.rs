//! Open files and file descriptor tables.
//!
//! Open files live in type-stable slots shared by all contexts of a vfs;
//! a context's fd table maps small integers to slots. `fstat` reads
//! fd -> file -> inode with loads only: the file's sequence count moves
//! when it is closed, and an open file holds a reference on its inode, so
//! an inode read while the file's count is unchanged belongs to that file.

use parking_lot::Mutex;

use walkfs_fsapi::{DirEntry, Errno, Result};

use crate::arena::Arena;
use crate::dcache::{DIdx, IIdx};
use crate::seqlock::SeqCount;
use crate::sync::{AtomicU32, AtomicU64, Ordering::Relaxed};

#[derive(Default)]
pub(crate) struct File {
    pub seq: SeqCount,
    pub dentry: AtomicU32,
    pub inode: AtomicU32,
    /// The `open(2)` flags.
    pub flags: AtomicU32,
    /// The backend's handle; `u64::MAX` for `O_PATH` files.
    pub fh: AtomicU64,
    /// The file position, under its own lock (Linux's `f_pos_lock`).
    pub pos: Mutex<u64>,
    /// The directory listing a `getdents` sequence is reading.
    pub dir: Mutex<Option<Vec<DirEntry>>>,
}

pub(crate) const NO_HANDLE: u64 = u64::MAX;

/// The pool of open files of a vfs.
pub(crate) struct Files {
    pub slots: Arena<File>,
    free: Mutex<(Vec<u32>, u32)>,
}

impl Files {
    pub fn new(max: u32) -> Files {
        Files {
            slots: Arena::new(max.saturating_add(1)),
            free: Mutex::new((Vec::new(), 1)),
        }
    }

    pub fn capacity(&self) -> u32 {
        self.slots.capacity().saturating_sub(1)
    }

    /// A new open file on (dentry, inode); the caller already holds the
    /// references it transfers to the file.
    pub fn alloc(&self, dentry: DIdx, inode: IIdx, flags: i32, fh: u64) -> Result<u32> {
        let idx = {
            let mut f = self.free.lock();
            match f.0.pop() {
                Some(i) => i,
                None => {
                    let i = f.1;
                    self.slots.get_or_alloc(i).ok_or(Errno::ENFILE)?;
                    f.1 += 1;
                    i
                }
            }
        };
        let file = self.slots.get(idx).ok_or(Errno::ENFILE)?;
        file.seq.write_begin();
        file.dentry.store(dentry, Relaxed);
        file.inode.store(inode, Relaxed);
        file.flags.store(flags as u32, Relaxed);
        file.fh.store(fh, Relaxed);
        file.seq.write_end();
        *file.pos.lock() = 0;
        *file.dir.lock() = None;
        Ok(idx)
    }

    /// Retire a file slot (its references are dropped by the caller).
    pub fn free(&self, idx: u32) {
        if let Some(file) = self.slots.get(idx) {
            file.seq.write_begin();
            file.dentry.store(0, Relaxed);
            file.inode.store(0, Relaxed);
            file.fh.store(NO_HANDLE, Relaxed);
            file.seq.write_end();
            *file.dir.lock() = None;
            self.free.lock().0.push(idx);
        }
    }
}

/// A context's descriptors: slot `fd` holds a file index (0 = closed).
pub(crate) struct FdTable {
    pub slots: Box<[AtomicU32]>,
    lock: Mutex<()>,
}

impl FdTable {
    pub fn new(max: usize) -> FdTable {
        FdTable {
            slots: (0..max).map(|_| AtomicU32::new(0)).collect(),
            lock: Mutex::new(()),
        }
    }

    /// The file behind `fd`, lock-free.
    #[inline(always)]
    pub fn get(&self, fd: i32) -> Option<u32> {
        let f = self
            .slots
            .get(usize::try_from(fd).ok()?)?
            .load(crate::sync::Ordering::Acquire);
        (f != 0).then_some(f)
    }

    /// Install `file` at the lowest free descriptor.
    pub fn install(&self, file: u32) -> Result<i32> {
        let _g = self.lock.lock();
        for (i, s) in self.slots.iter().enumerate() {
            if s.load(Relaxed) == 0 {
                s.store(file, crate::sync::Ordering::Release);
                return Ok(i as i32);
            }
        }
        Err(Errno::EMFILE)
    }

    /// Empty slot `fd`, returning the file it held.
    pub fn remove(&self, fd: i32) -> Result<u32> {
        let _g = self.lock.lock();
        let s = self
            .slots
            .get(usize::try_from(fd).map_err(|_| Errno::EBADF)?)
            .ok_or(Errno::EBADF)?;
        let f = s.load(Relaxed);
        if f == 0 {
            return Err(Errno::EBADF);
        }
        s.store(0, crate::sync::Ordering::Release);
        Ok(f)
    }

    /// Every open file (for closing a context).
    pub fn drain(&self) -> Vec<u32> {
        let _g = self.lock.lock();
        self.slots
            .iter()
            .map(|s| s.swap(0, Relaxed))
            .filter(|&f| f != 0)
            .collect()
    }
}
