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

use std::collections::HashMap;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use walkfs_vfs::{Errno, OpenFile};

use crate::WalkFuse;

/// Interrupts of requests not (yet) waiting are kept this long: the
/// kernel sends INTERRUPT only after the request was read, but the
/// handler may not have started waiting yet.
const EARLY_INTERRUPT: Duration = Duration::from_secs(5);

/// What a node's record keeps of its locks ([`crate::Node::locks`]),
/// once one was taken on it through the mount: its opens then get
/// FLUSH, for closes to drop record locks.
#[derive(Default)]
pub(crate) struct NodeLocks {
    /// Owners holding record locks on it, so that a FLUSH with nothing to
    /// drop does nothing.
    owners: Vec<u64>,
    /// The open file its locks go through when the kernel opens files
    /// without telling (no-open mode: handle 0), kept with the record:
    /// the node's own open files for I/O are evicted by a clock, and
    /// their locks would go with them.
    pub(crate) file: Option<OpenFile>,
}

/// Requests interrupted by the kernel, by unique, with when (the rest of
/// the lock state is in the node records).
#[derive(Default)]
pub(crate) struct Interrupts {
    interrupted: Mutex<HashMap<u64, Instant>>,
}

impl Interrupts {
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

impl WalkFuse {
    /// A lock was taken on node `ino` by `owner` (a record lock: `posix`).
    pub(crate) fn lock_taken(&self, ino: u64, owner: u64, posix: bool) {
        if let Some(n) = self.nodes.write().by_id.get_mut(&ino) {
            let l = n.locks.get_or_insert_with(Box::default);
            if posix && !l.owners.contains(&owner) {
                l.owners.push(owner);
            }
        }
    }

    /// Has a lock ever been taken on node `ino` through the mount?
    pub(crate) fn ever_locked(&self, ino: u64) -> bool {
        self.nodes
            .read()
            .by_id
            .get(&ino)
            .is_some_and(|n| n.locks.is_some())
    }

    /// Owner `owner` closes a descriptor of `ino`: whether it held record
    /// locks there (which then go).
    pub(crate) fn lock_owner_closing(&self, ino: u64, owner: u64) -> bool {
        if !self.ever_locked(ino) {
            return false;
        }
        let mut nodes = self.nodes.write();
        let Some(l) = nodes.by_id.get_mut(&ino).and_then(|n| n.locks.as_mut()) else {
            return false;
        };
        let before = l.owners.len();
        l.owners.retain(|o| *o != owner);
        l.owners.len() != before
    }

    /// The open file node `ino`'s handle-less locks go through, opened
    /// by `open` the first time (outside the table's lock: it may ask
    /// the backend).
    pub(crate) fn node_lock_file(
        &self,
        ino: u64,
        open: impl FnOnce() -> Result<OpenFile, Errno>,
    ) -> Result<OpenFile, Errno> {
        let held = self
            .nodes
            .read()
            .by_id
            .get(&ino)
            .and_then(|n| n.locks.as_ref().and_then(|l| l.file.clone()));
        if let Some(f) = held {
            return Ok(f);
        }
        let f = open()?;
        let mut nodes = self.nodes.write();
        let n = nodes.by_id.get_mut(&ino).ok_or(Errno::EBADF)?;
        let l = n.locks.get_or_insert_with(Box::default);
        // Two threads may both have opened one: the first kept wins.
        Ok(l.file.get_or_insert(f).clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interrupts_are_kept_for_the_waiter_until_it_is_done() {
        let s = Interrupts::default();
        s.interrupt(77);
        assert!(s.is_interrupted(77) && !s.is_interrupted(78));
        s.done(77);
        assert!(!s.is_interrupted(77));
    }

    #[test]
    fn record_lock_owners_are_dropped_once_and_flock_owners_not_at_close() {
        let dir = std::env::temp_dir().join(format!("walkfs-locks-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let vfs = walkfs_source::open(
            dir.to_str().expect("utf8"),
            &walkfs_source::SourceOptions::default(),
        )
        .expect("vfs");
        let opts = crate::MountOptions::parse("").expect("options");
        let w = WalkFuse::new(vfs, opts).expect("front end");
        let root = crate::ROOT;
        assert!(w.serves_locks, "a host directory's locks are served");
        assert!(!w.ever_locked(root));
        assert!(!w.lock_owner_closing(root, 9), "nothing locked yet");
        w.lock_taken(root, 9, true);
        w.lock_taken(root, 10, false);
        assert!(w.ever_locked(root));
        assert!(w.lock_owner_closing(root, 9));
        assert!(!w.lock_owner_closing(root, 9), "dropped once");
        assert!(
            !w.lock_owner_closing(root, 10),
            "flock owners do not go at close"
        );
        assert!(w.ever_locked(root), "its opens keep FLUSH");
        let _ = std::fs::remove_dir(&dir);
    }
}
