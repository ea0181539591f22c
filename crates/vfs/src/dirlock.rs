//! Per-directory locks: Linux's `i_rwsem` of a directory inode.
//!
//! A change to the names of a directory (create, link, unlink, rmdir,
//! rename) holds its directory's lock exclusively across the backend call;
//! a cache miss holds the lock of the directory it looks in, shared, from
//! before it asks the backend until its answer is in the cache. So a
//! miss's answer can never predate a change walkfs made to that directory
//! (the change waits for the miss, or the miss for the change), and misses
//! and changes in different directories never wait for each other: no
//! global lock is held across a backend call.
//!
//! The locks live in a fixed table of stripes indexed by inode slot, not
//! in the inodes (an inode stays 96 bytes). Two directories sharing a
//! stripe only wait for each other needlessly; slots are handed out in
//! order, so directories created together land on different stripes.
//! A freed and reused inode slot maps to the same stripe, which is
//! harmless for the same reason.
//!
//! Lock order (deadlock freedom): the vfs rename lock (cross-directory
//! renames only), then directory stripes in ascending index (taken
//! together by [`DirLocks::exclusive`]), then the writer mutex. Nothing
//! that holds the writer mutex takes a directory lock, and nothing takes a
//! directory lock while holding another one taken separately: a shared
//! lock is never held while taking an exclusive one. (A directory
//! read-ahead only tries a second shared lock, and goes on without it.)

#[cfg(not(loom))]
use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};

#[cfg(loom)]
use loom::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::dcache::IIdx;

/// Directories one change locks at most (rename: two parents, the moved
/// directory and the one it replaces).
pub(crate) const MAX_LOCKED: usize = 4;

pub(crate) struct DirLocks {
    stripes: Box<[RwLock<()>]>,
    mask: usize,
}

/// A directory locked for a lookup.
pub(crate) struct Shared<'a> {
    _g: RwLockReadGuard<'a, ()>,
}

/// Directories locked for a change; released when dropped.
pub(crate) struct Exclusive<'a> {
    _g: [Option<RwLockWriteGuard<'a, ()>>; MAX_LOCKED],
}

impl DirLocks {
    /// A table of `n` stripes (rounded up to a power of two).
    pub fn new(n: usize) -> DirLocks {
        let n = n.next_power_of_two().max(1);
        DirLocks {
            stripes: (0..n).map(|_| RwLock::new(())).collect(),
            mask: n - 1,
        }
    }

    fn stripe(&self, dir: IIdx) -> usize {
        dir.0 as usize & self.mask
    }

    /// Lock `dir` for a lookup (other lookups may hold it too).
    pub fn shared(&self, dir: IIdx) -> Shared<'_> {
        Shared {
            _g: read(&self.stripes[self.stripe(dir)]),
        }
    }

    /// Lock `dir` for a lookup if that needs no wait (a read-ahead, which
    /// runs while its caller holds another directory's lock).
    pub fn try_shared(&self, dir: IIdx) -> Option<Shared<'_>> {
        try_read(&self.stripes[self.stripe(dir)]).map(|g| Shared { _g: g })
    }

    /// Lock every directory of `dirs` for a change, in stripe order; a
    /// stripe named twice (the same directory, or two sharing it) is
    /// taken once.
    pub fn exclusive(&self, dirs: &[IIdx]) -> Exclusive<'_> {
        let mut idx = [usize::MAX; MAX_LOCKED];
        let n = dirs.len().min(MAX_LOCKED);
        for (slot, d) in idx.iter_mut().zip(&dirs[..n]) {
            *slot = self.stripe(*d);
        }
        idx[..n].sort_unstable();
        let mut g: [Option<RwLockWriteGuard<'_, ()>>; MAX_LOCKED] = Default::default();
        let mut last = usize::MAX;
        for (slot, &i) in g.iter_mut().zip(&idx[..n]) {
            if i != last {
                *slot = Some(write(&self.stripes[i]));
                last = i;
            }
        }
        Exclusive { _g: g }
    }
}

#[cfg(not(loom))]
fn read(l: &RwLock<()>) -> RwLockReadGuard<'_, ()> {
    l.read()
}
#[cfg(not(loom))]
fn try_read(l: &RwLock<()>) -> Option<RwLockReadGuard<'_, ()>> {
    l.try_read()
}
#[cfg(not(loom))]
fn write(l: &RwLock<()>) -> RwLockWriteGuard<'_, ()> {
    l.write()
}
#[cfg(loom)]
fn read(l: &RwLock<()>) -> RwLockReadGuard<'_, ()> {
    l.read().unwrap_or_else(|e| e.into_inner())
}
#[cfg(loom)]
fn try_read(l: &RwLock<()>) -> Option<RwLockReadGuard<'_, ()>> {
    l.try_read().ok()
}
#[cfg(loom)]
fn write(l: &RwLock<()>) -> RwLockWriteGuard<'_, ()> {
    l.write().unwrap_or_else(|e| e.into_inner())
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn exclusive_excludes_shared_and_takes_a_stripe_once() {
        let l = DirLocks::new(8);
        {
            // The same directory twice, and 1 and 9 sharing a stripe:
            // no self-deadlock.
            let _g = l.exclusive(&[IIdx(1), IIdx(1), IIdx(9), IIdx(2)]);
            assert!(l.stripes[1].try_read().is_none());
            assert!(l.stripes[2].try_read().is_none());
            assert!(l.stripes[3].try_read().is_some());
        }
        let _a = l.shared(IIdx(1));
        let _b = l.shared(IIdx(1));
        assert!(l.stripes[1].try_write().is_none());
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    //! Run with `RUSTFLAGS="--cfg loom" cargo test -p walkfs-vfs --lib loom`.
    use super::*;
    use crate::sync::{AtomicU32, Ordering};
    use loom::sync::Arc;

    /// Two renames locking the same two directories named in opposite
    /// orders never deadlock (loom reports a deadlock as a failure).
    #[test]
    fn opposite_renames_do_not_deadlock() {
        loom::model(|| {
            let l = Arc::new(DirLocks::new(4));
            let l2 = l.clone();
            let t = loom::thread::spawn(move || {
                let _g = l2.exclusive(&[IIdx(1), IIdx(2)]);
            });
            {
                let _g = l.exclusive(&[IIdx(2), IIdx(1)]);
            }
            t.join().unwrap();
        });
    }

    /// The protocol the locks exist for. A miss reads the backend and then
    /// caches what it read, holding the directory shared; a create changes
    /// the backend and then the cache, holding it exclusively. Whatever
    /// the interleaving, the cache never ends up saying "absent" (a stale
    /// negative entry) once the create has returned.
    #[test]
    fn a_miss_never_caches_an_answer_older_than_a_create() {
        const UNKNOWN: u32 = 0;
        const ABSENT: u32 = 1;
        const PRESENT: u32 = 2;
        loom::model(|| {
            let l = Arc::new(DirLocks::new(4));
            // (the backend's answer, the cache's)
            let st = Arc::new((AtomicU32::new(ABSENT), AtomicU32::new(UNKNOWN)));
            let (l2, st2) = (l.clone(), st.clone());
            let miss = loom::thread::spawn(move || {
                let _g = l2.shared(IIdx(3));
                let seen = st2.0.load(Ordering::Acquire);
                st2.1.store(seen, Ordering::Release);
            });
            {
                let _g = l.exclusive(&[IIdx(3)]);
                st.0.store(PRESENT, Ordering::Release);
                st.1.store(PRESENT, Ordering::Release);
            }
            miss.join().unwrap();
            assert_eq!(st.1.load(Ordering::Acquire), PRESENT);
        });
    }
}
