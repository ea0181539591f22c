//! File locks: POSIX record locks (`fcntl` `F_SETLK`, OFD locks, `lockf`)
//! and BSD `flock` locks, as a backend is asked to take them for an owner.
//!
//! A lock is taken where every party that could conflict sees it: a host
//! directory takes it on the host file (so the host's own programs are
//! excluded), a 9P client asks its server, memory keeps a [`LockTable`].
//! The two families never conflict with each other, as on Linux: a
//! `flock` lock and an `fcntl` lock on one file coexist.
//!
//! Backends never wait for a lock: a conflict is `EAGAIN`, and the vfs
//! retries a blocking request (docs/locks.md), so that a waiter can be
//! interrupted and holds no backend thread.

use std::collections::HashMap;

use std::sync::{Mutex, MutexGuard};

use crate::{Errno, FileHandle, NodeId, Result};

/// The last byte a lock can cover: "to the end of the file, however it
/// grows" (the kernel's `OFFSET_MAX`).
pub const LOCK_EOF: u64 = i64::MAX as u64;

/// Which family a lock belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LockFlavor {
    /// A byte range, held by an owner (a process for `fcntl`, an open
    /// file for OFD locks): released by the owner's close.
    Posix,
    /// The whole file, held by an open file (`flock`).
    Flock,
}

/// Shared, exclusive, or none (an unlock).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LockKind {
    Read,
    Write,
    Unlock,
}

impl LockKind {
    /// `F_RDLCK`, `F_WRLCK`, `F_UNLCK`.
    pub fn from_fcntl(t: u32) -> Option<LockKind> {
        match t as i32 {
            libc::F_RDLCK => Some(LockKind::Read),
            libc::F_WRLCK => Some(LockKind::Write),
            libc::F_UNLCK => Some(LockKind::Unlock),
            _ => None,
        }
    }

    pub fn fcntl(self) -> u32 {
        (match self {
            LockKind::Read => libc::F_RDLCK,
            LockKind::Write => libc::F_WRLCK,
            LockKind::Unlock => libc::F_UNLCK,
        }) as u32
    }
}

/// Who holds a lock: opaque to the backend, unique within one vfs (the
/// FUSE front end passes the kernel's lock owner; the 9P server one per
/// connection and client process).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LockOwner(pub u64);

/// A lock asked for, or one found in the way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileLock {
    pub kind: LockKind,
    pub flavor: LockFlavor,
    /// First and last byte covered (inclusive; [`LOCK_EOF`] for "to the
    /// end"). A `flock` lock covers `0..=LOCK_EOF`.
    pub start: u64,
    pub end: u64,
    /// The process that holds it, where known (0: none, or another
    /// machine's).
    pub pid: u32,
}

impl FileLock {
    /// A whole-file lock of `flavor`.
    pub fn whole(kind: LockKind, flavor: LockFlavor) -> FileLock {
        FileLock {
            kind,
            flavor,
            start: 0,
            end: LOCK_EOF,
            pid: 0,
        }
    }

    /// 9P's and `struct flock`'s form: a start and a length, 0 meaning
    /// "to the end". `EINVAL` for a range past the largest offset.
    pub fn from_len(kind: LockKind, start: u64, len: u64) -> Result<FileLock> {
        let end = if len == 0 {
            LOCK_EOF
        } else {
            start
                .checked_add(len - 1)
                .filter(|e| *e <= LOCK_EOF)
                .ok_or(Errno::EINVAL)?
        };
        if start > LOCK_EOF {
            return Err(Errno::EINVAL);
        }
        Ok(FileLock {
            kind,
            flavor: LockFlavor::Posix,
            start,
            end,
            pid: 0,
        })
    }

    /// The length 9P and `struct flock` give (0: to the end).
    pub fn wire_len(&self) -> u64 {
        if self.end >= LOCK_EOF {
            0
        } else {
            self.end - self.start + 1
        }
    }

    fn overlaps(&self, o: &FileLock) -> bool {
        self.start <= o.end && o.start <= self.end
    }

    fn conflicts(&self, o: &FileLock) -> bool {
        self.flavor == o.flavor
            && self.overlaps(o)
            && (self.kind == LockKind::Write || o.kind == LockKind::Write)
    }
}

/// Locks kept in memory, by node: what a backend with no other party to
/// tell keeps (memfs), and the model the tests check a host's against.
/// POSIX ranges of one owner merge and split as Linux's do; `flock` locks
/// are whole-file, one per owner.
#[derive(Default)]
pub struct LockTable {
    held: Mutex<HashMap<NodeId, Vec<(LockOwner, FileLock)>>>,
}

impl LockTable {
    pub fn new() -> LockTable {
        LockTable::default()
    }

    /// The table (a panic elsewhere leaves it whole: every change is one
    /// assignment).
    fn held(&self) -> MutexGuard<'_, HashMap<NodeId, Vec<(LockOwner, FileLock)>>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The first lock of another owner in the way of `want`.
    pub fn conflict(&self, node: NodeId, owner: LockOwner, want: &FileLock) -> Option<FileLock> {
        let held = self.held();
        held.get(&node)?
            .iter()
            .find(|(o, l)| *o != owner && l.conflicts(want))
            .map(|(_, l)| *l)
    }

    /// Take, convert or drop (`Unlock`) `lock` for `owner`; `EAGAIN`
    /// when another owner holds a conflicting one (nothing changes then).
    pub fn set(&self, node: NodeId, owner: LockOwner, lock: &FileLock) -> Result<()> {
        let mut held = self.held();
        let list = held.entry(node).or_default();
        if lock.kind != LockKind::Unlock
            && list.iter().any(|(o, l)| *o != owner && l.conflicts(lock))
        {
            return Err(Errno::EAGAIN);
        }
        // Cut the owner's own locks of this flavor out of the range, then
        // add the new one: a conversion or a split, as Linux does.
        let mut kept = Vec::with_capacity(list.len() + 2);
        for (o, l) in list.drain(..) {
            if o != owner || l.flavor != lock.flavor || !l.overlaps(lock) {
                kept.push((o, l));
                continue;
            }
            if l.start < lock.start {
                kept.push((
                    o,
                    FileLock {
                        end: lock.start - 1,
                        ..l
                    },
                ));
            }
            if l.end > lock.end {
                kept.push((
                    o,
                    FileLock {
                        start: lock.end + 1,
                        ..l
                    },
                ));
            }
        }
        if lock.kind != LockKind::Unlock {
            kept.push((owner, *lock));
        }
        if kept.is_empty() {
            held.remove(&node);
        } else {
            *list = kept;
        }
        Ok(())
    }

    /// Drop every lock of `owner` on `node` (of `flavor`, or both).
    pub fn drop_owner(&self, node: NodeId, owner: LockOwner, flavor: Option<LockFlavor>) {
        let mut held = self.held();
        if let Some(list) = held.get_mut(&node) {
            list.retain(|(o, l)| *o != owner || flavor.is_some_and(|f| f != l.flavor));
            if list.is_empty() {
                held.remove(&node);
            }
        }
    }

    /// Drop every lock on `node` (its last name and open file are gone).
    pub fn drop_node(&self, node: NodeId) {
        self.held().remove(&node);
    }

    /// Every lock held: (node, owner, lock).
    pub fn all(&self) -> Vec<(NodeId, LockOwner, FileLock)> {
        self.held()
            .iter()
            .flat_map(|(n, v)| v.iter().map(move |(o, l)| (*n, *o, *l)))
            .collect()
    }

    /// How many locks `node` has (tests).
    pub fn count(&self, node: NodeId) -> usize {
        self.held().get(&node).map_or(0, Vec::len)
    }
}

/// Which owners took locks through which open handle: a backend drops
/// them when the handle is released (an OFD or `flock` lock belongs to
/// its open file; a process's POSIX locks went at its close already).
#[derive(Default)]
pub struct ByHandle {
    by_fh: Mutex<HashMap<u64, Vec<(NodeId, LockOwner)>>>,
}

impl ByHandle {
    fn map(&self) -> MutexGuard<'_, HashMap<u64, Vec<(NodeId, LockOwner)>>> {
        self.by_fh.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `owner` took a lock on `node` through `fh`.
    pub fn took(&self, fh: FileHandle, node: NodeId, owner: LockOwner) {
        let mut m = self.map();
        let v = m.entry(fh.0).or_default();
        if !v.contains(&(node, owner)) {
            v.push((node, owner));
        }
    }

    /// The handle goes: who took locks through it.
    pub fn released(&self, fh: FileHandle) -> Vec<(NodeId, LockOwner)> {
        self.map().remove(&fh.0).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(kind: LockKind, start: u64, end: u64) -> FileLock {
        FileLock {
            kind,
            flavor: LockFlavor::Posix,
            start,
            end,
            pid: 0,
        }
    }

    #[test]
    fn writers_exclude_readers_share_and_families_do_not_meet() {
        let t = LockTable::new();
        let (n, a, b) = (NodeId(7), LockOwner(1), LockOwner(2));
        t.set(n, a, &range(LockKind::Read, 0, 9)).unwrap();
        t.set(n, b, &range(LockKind::Read, 5, 20)).unwrap();
        assert_eq!(
            t.set(n, b, &range(LockKind::Write, 0, 0)),
            Err(Errno::EAGAIN)
        );
        // Past a's range, b may write.
        t.set(n, b, &range(LockKind::Write, 10, 20)).unwrap();
        // flock and fcntl locks never conflict.
        t.set(n, a, &FileLock::whole(LockKind::Write, LockFlavor::Flock))
            .unwrap();
        assert_eq!(
            t.set(n, b, &FileLock::whole(LockKind::Read, LockFlavor::Flock)),
            Err(Errno::EAGAIN)
        );
        assert_eq!(
            t.conflict(n, b, &range(LockKind::Write, 3, 3)),
            Some(range(LockKind::Read, 0, 9))
        );
    }

    #[test]
    fn an_unlock_in_the_middle_splits_and_a_close_drops_all() {
        let t = LockTable::new();
        let (n, a, b) = (NodeId(1), LockOwner(1), LockOwner(2));
        t.set(n, a, &range(LockKind::Write, 0, 99)).unwrap();
        t.set(n, a, &range(LockKind::Unlock, 40, 59)).unwrap();
        assert_eq!(t.count(n), 2);
        t.set(n, b, &range(LockKind::Write, 40, 59)).unwrap();
        assert_eq!(
            t.set(n, b, &range(LockKind::Write, 39, 39)),
            Err(Errno::EAGAIN)
        );
        // Converting a part to a read lock lets readers in there only.
        t.set(n, a, &range(LockKind::Read, 0, 9)).unwrap();
        assert_eq!(t.set(n, b, &range(LockKind::Read, 0, 9)), Ok(()));
        assert_eq!(
            t.set(n, b, &range(LockKind::Read, 10, 10)),
            Err(Errno::EAGAIN)
        );
        t.drop_owner(n, a, None);
        t.set(n, b, &range(LockKind::Write, 0, LOCK_EOF)).unwrap();
    }

    #[test]
    fn lengths_convert_both_ways() {
        let l = FileLock::from_len(LockKind::Read, 10, 5).unwrap();
        assert_eq!((l.start, l.end, l.wire_len()), (10, 14, 5));
        let e = FileLock::from_len(LockKind::Read, 10, 0).unwrap();
        assert_eq!((e.end, e.wire_len()), (LOCK_EOF, 0));
        assert_eq!(
            FileLock::from_len(LockKind::Read, u64::MAX, 2),
            Err(Errno::EINVAL)
        );
    }
}
