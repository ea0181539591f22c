//! File locks through the mount: the kernel sends `fcntl` record locks
//! (POSIX and OFD) and `flock` locks here (`POSIX_LOCKS`, `FLOCK_LOCKS`)
//! rather than keeping them itself, and the vfs takes them where every
//! party sees them (on a host directory, on the host file; over 9P, at
//! the server).
//!
//! When locks go:
//! - a record lock, when its owner (a process) closes a descriptor of
//!   the file: FLUSH carries the owner. A close costs FLUSH's round trip
//!   only on files some lock was taken on through this mount; the opens
//!   of every other file say `FOPEN_NOFLUSH`, and a lock taken later
//!   through such an open goes at the open file's release;
//! - a `flock` lock, with its open file (RELEASE says so), or unlocked;
//! - anything taken through an open file, when the kernel releases it.
//!
//! A SETLKW that must wait holds its request thread, retrying in the vfs,
//! until the lock is granted or the kernel interrupts it (a signal to the
//! waiter: INTERRUPT names the request, and the wait ends with EINTR). The
//! `/dev/fuse` session starts a spare thread for each waiter, so waiters
//! never starve other requests.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// Interrupts of requests not (yet) waiting are kept this long: the
/// kernel sends INTERRUPT only after the request was read, but the
/// handler may not have started waiting yet.
const EARLY_INTERRUPT: Duration = Duration::from_secs(5);

#[derive(Default)]
pub(crate) struct LockState {
    /// Nodes some lock was taken on through the mount: their opens get
    /// FLUSH, for closes to drop record locks.
    locked: Mutex<HashSet<u64>>,
    /// (node, owner) pairs holding record locks, so that a FLUSH with
    /// nothing to drop does nothing.
    owners: Mutex<HashSet<(u64, u64)>>,
    /// Requests interrupted by the kernel, by unique, with when.
    interrupted: Mutex<HashMap<u64, Instant>>,
    /// The open file each node's locks go through when the kernel opens
    /// files without telling (no-open mode: handle 0), kept until the
    /// node is forgotten: the node's own open files for I/O are evicted
    /// by a clock, and their locks would go with them.
    files: Mutex<HashMap<u64, walkfs_vfs::OpenFile>>,
}

impl LockState {
    /// A lock was taken on node `ino` by `owner` (a record lock: `posix`).
    pub fn took(&self, ino: u64, owner: u64, posix: bool) {
        self.locked.lock().insert(ino);
        if posix {
            self.owners.lock().insert((ino, owner));
        }
    }

    /// Has a lock ever been taken on node `ino` through the mount?
    pub fn ever_locked(&self, ino: u64) -> bool {
        self.locked.lock().contains(&ino)
    }

    /// Owner `owner` closes a descriptor of `ino`: whether it held record
    /// locks there (which then go).
    pub fn closing(&self, ino: u64, owner: u64) -> bool {
        self.owners.lock().remove(&(ino, owner))
    }

    /// The open file node `ino`'s handle-less locks go through, opened
    /// by `open` the first time.
    pub fn file_of(
        &self,
        ino: u64,
        open: impl FnOnce() -> Result<walkfs_vfs::OpenFile, walkfs_vfs::Errno>,
    ) -> Result<walkfs_vfs::OpenFile, walkfs_vfs::Errno> {
        let mut files = self.files.lock();
        if let Some(f) = files.get(&ino) {
            return Ok(f.clone());
        }
        let f = open()?;
        files.insert(ino, f.clone());
        Ok(f)
    }

    /// Node `ino` is forgotten by the kernel: nothing of it is open.
    pub fn forgotten(&self, ino: u64) {
        drop(self.files.lock().remove(&ino));
        self.locked.lock().remove(&ino);
        self.owners.lock().retain(|(i, _)| *i != ino);
    }

    /// INTERRUPT for request `unique`.
    pub fn interrupt(&self, unique: u64) {
        let now = Instant::now();
        let mut i = self.interrupted.lock();
        i.retain(|_, at| now.duration_since(*at) < EARLY_INTERRUPT);
        i.insert(unique, now);
    }

    /// Has request `unique` been interrupted?
    pub fn is_interrupted(&self, unique: u64) -> bool {
        self.interrupted.lock().contains_key(&unique)
    }

    /// Request `unique` is answered: its interrupt, if any, is done with.
    pub fn done(&self, unique: u64) {
        self.interrupted.lock().remove(&unique);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_are_dropped_once_and_interrupts_are_kept_for_the_waiter() {
        let s = LockState::default();
        s.took(5, 9, true);
        s.took(6, 9, false);
        assert!(s.ever_locked(5) && s.ever_locked(6) && !s.ever_locked(7));
        assert!(s.closing(5, 9));
        assert!(!s.closing(5, 9), "dropped once");
        assert!(!s.closing(6, 9), "flock owners do not go at close");
        s.interrupt(77);
        assert!(s.is_interrupted(77) && !s.is_interrupted(78));
        s.done(77);
        assert!(!s.is_interrupted(77));
        s.forgotten(5);
        assert!(!s.ever_locked(5));
    }
}
