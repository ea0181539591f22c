//! The nodes and open files the vfs holds, by the numbers it knows them by.
//!
//! A node is a CephFS inode, named by its inode number (64-bit,
//! cluster-wide and stable: the `NodeId` is the number). The table holds
//! exactly one libcephfs reference (`ll_ref`) per node, whatever the vfs's
//! lookup count: a lookup that finds a node already held gives its extra
//! reference back at once, and the last `forget` drops the one held. So a
//! count the vfs and libcephfs could disagree on never crosses the
//! boundary (libcephfs drops *all* references on a forget larger than it
//! holds, and only warns).

use std::collections::HashMap;

use parking_lot::Mutex;
use walkfs_fsapi::{Errno, FileHandle, NodeId, Result};

use crate::ffi::{Fh, Inode};

/// One node: its libcephfs inode, and the vfs's lookup count.
struct Held {
    inode: *mut Inode,
    lookups: u64,
}

/// The nodes the vfs holds. Raw pointers are libcephfs's own inodes, kept
/// alive by the one reference each entry holds.
#[derive(Default)]
pub struct Nodes {
    map: Mutex<HashMap<u64, Held>>,
}

// SAFETY: the pointers are libcephfs inodes, which the library lets any
// thread use (its client serialises on its own lock); the table only
// stores and hands them out.
unsafe impl Send for Nodes {}
// SAFETY: as above; every access goes through the mutex.
unsafe impl Sync for Nodes {}

/// What [`Nodes::add`] did with the reference it was handed.
pub enum Added {
    /// The node is new: the table keeps the reference.
    Kept,
    /// The node was held already: the caller gives this reference back.
    Spare(*mut Inode),
}

impl Nodes {
    /// The inode of `node`; `ESTALE` when the vfs forgot it (or never had
    /// it).
    pub fn get(&self, node: NodeId) -> Result<*mut Inode> {
        self.map
            .lock()
            .get(&node.0)
            .map(|h| h.inode)
            .ok_or(Errno::ESTALE)
    }

    /// One lookup of `ino`, whose inode came with one libcephfs reference.
    pub fn add(&self, ino: u64, inode: *mut Inode) -> Added {
        let mut map = self.map.lock();
        match map.get_mut(&ino) {
            Some(h) => {
                h.lookups += 1;
                Added::Spare(inode)
            }
            None => {
                map.insert(ino, Held { inode, lookups: 1 });
                Added::Kept
            }
        }
    }

    /// One more lookup of a node held already (a hard link's entry);
    /// `ESTALE` when it is not.
    pub fn again(&self, node: NodeId) -> Result<()> {
        let mut map = self.map.lock();
        let h = map.get_mut(&node.0).ok_or(Errno::ESTALE)?;
        h.lookups += 1;
        Ok(())
    }

    /// Drop `count` lookups of `node`; the inode whose reference the
    /// caller must give back when it was the last, `None` otherwise.
    pub fn forget(&self, node: NodeId, count: u64) -> Option<*mut Inode> {
        let mut map = self.map.lock();
        let h = map.get_mut(&node.0)?;
        h.lookups = h.lookups.saturating_sub(count);
        if h.lookups > 0 {
            return None;
        }
        map.remove(&node.0).map(|h| h.inode)
    }

    /// Every held inode, emptying the table (at unmount).
    pub fn drain(&self) -> Vec<*mut Inode> {
        self.map.lock().drain().map(|(_, h)| h.inode).collect()
    }

    pub(crate) fn len(&self) -> usize {
        self.map.lock().len()
    }
}

/// An open file: libcephfs's handle, and the descriptor of the path-level
/// open a `flock` lock is taken through (libcephfs 16.2 has `flock` only
/// for descriptors).
pub struct Open {
    pub fh: *mut Fh,
    pub flock_fd: Option<i32>,
    /// Written through since opened: its data is flushed at the close.
    pub written: bool,
}

/// The open files, by the handle number the vfs holds. Handle 0 is a
/// directory's (listings need no libcephfs handle).
#[derive(Default)]
pub struct Files {
    map: Mutex<HashMap<u64, Open>>,
    next: Mutex<u64>,
}

// SAFETY: as for `Nodes`: libcephfs handles usable from any thread.
unsafe impl Send for Files {}
// SAFETY: as above.
unsafe impl Sync for Files {}

/// The handle of an open directory.
pub const DIR_HANDLE: FileHandle = FileHandle(0);

impl Files {
    pub fn add(&self, fh: *mut Fh) -> FileHandle {
        let mut next = self.next.lock();
        *next += 1;
        let id = *next;
        self.map.lock().insert(
            id,
            Open {
                fh,
                flock_fd: None,
                written: false,
            },
        );
        FileHandle(id)
    }

    /// libcephfs's handle for `fh`; `EBADF` for one not open (or a
    /// directory's).
    pub fn get(&self, fh: FileHandle) -> Result<*mut Fh> {
        self.map.lock().get(&fh.0).map(|o| o.fh).ok_or(Errno::EBADF)
    }

    /// libcephfs's handle for `fh`, marked written.
    pub fn get_written(&self, fh: FileHandle) -> Result<*mut Fh> {
        let mut map = self.map.lock();
        let o = map.get_mut(&fh.0).ok_or(Errno::EBADF)?;
        o.written = true;
        Ok(o.fh)
    }

    pub fn take(&self, fh: FileHandle) -> Option<Open> {
        self.map.lock().remove(&fh.0)
    }

    /// The descriptor `flock` locks of `fh` go through, opened with
    /// `open` the first time.
    pub fn flock_fd(&self, fh: FileHandle, open: impl FnOnce() -> Result<i32>) -> Result<i32> {
        // Held across the open: rare (a file's first flock), and two
        // opens for one handle would leak one.
        let mut map = self.map.lock();
        let o = map.get_mut(&fh.0).ok_or(Errno::EBADF)?;
        if let Some(fd) = o.flock_fd {
            return Ok(fd);
        }
        let fd = open()?;
        o.flock_fd = Some(fd);
        Ok(fd)
    }

    pub fn drain(&self) -> Vec<Open> {
        self.map.lock().drain().map(|(_, o)| o).collect()
    }
}
