//! The open files the kernel holds handles (`fh`) of, each an
//! [`OpenFile`] of the vfs. (The nodes' own open files, for I/O without a
//! handle, are in their node records: lib.rs.)
//!
//! An open file is counted: the table lets one go at the kernel's
//! release, and it closes when the last request using it lets go, never
//! under a request.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use parking_lot::Mutex;
use walkfs_vfs::OpenFile;

/// Shards of the handle table: requests on different handles rarely meet
/// on one lock.
const SHARDS: usize = 16;

/// The open files the kernel holds handles of: `fh` -> open file. Handle
/// 0 is never given (it means "no handle": the node's own file).
pub(crate) struct Handles {
    next: AtomicU64,
    shards: [Mutex<HashMap<u64, OpenFile>>; SHARDS],
}

impl Default for Handles {
    fn default() -> Handles {
        Handles {
            next: AtomicU64::new(1),
            shards: std::array::from_fn(|_| Mutex::new(HashMap::new())),
        }
    }
}

impl Handles {
    fn shard(&self, fh: u64) -> &Mutex<HashMap<u64, OpenFile>> {
        &self.shards[fh as usize % SHARDS]
    }

    /// A new handle for `file`.
    pub fn insert(&self, file: OpenFile) -> u64 {
        let fh = self.next.fetch_add(1, Relaxed);
        self.shard(fh).lock().insert(fh, file);
        fh
    }

    /// The open file of handle `fh` (a reference of the request's own).
    pub fn get(&self, fh: u64) -> Option<OpenFile> {
        self.shard(fh).lock().get(&fh).cloned()
    }

    /// Let handle `fh` go (the kernel's release): the file closes once no
    /// request uses it.
    pub fn remove(&self, fh: u64) -> Option<OpenFile> {
        self.shard(fh).lock().remove(&fh)
    }

    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }
}
