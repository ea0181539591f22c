//! The client side of leases (p9::lease, docs/lease-protocol.md).
//!
//! The first file this client makes in a directory asks for a lease on
//! the directory, in the same write as the create and ahead of it, so the
//! server grants it before it carries out the create. Files made there
//! while the lease is held are *covered*: their closes need not wait for
//! their changes (`caps::Ordered::leased`), because nobody else can look at
//! them before the server has recalled the lease, and the recall is
//! answered only after everything pending was sent.
//!
//! A recall (a notification record) runs on the notification thread:
//! the lease stops covering anything first, so a close that starts now
//! waits as without a lease; then what the vfs still gathers is sent
//! (`ChangeSink::recall`), and last the lease fid is clunked, behind all
//! of it on the connection. A directory recalled is not asked for again
//! for [`COOL`]: a host program working in it would recall every lease.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use walkfs_fsapi::Errno;

/// How long a directory whose lease was recalled or refused goes without.
pub(crate) const COOL: Duration = Duration::from_secs(1);
/// How long a close waits for the answer to a lease asked for.
const SETTLE: Duration = Duration::from_millis(50);

enum Dir {
    /// Asked for with lease fid `fid`; `made` are the files made since.
    Asking {
        fid: u32,
        made: Vec<u64>,
    },
    Held {
        fid: u32,
        made: Vec<u64>,
    },
    /// Recalled or refused at this time.
    Cooling(Instant),
}

#[derive(Default)]
struct Table {
    dirs: HashMap<u64, Dir>,
    by_fid: HashMap<u32, u64>,
    /// Files covered by a held lease, and its fid.
    covered: HashMap<u64, u32>,
    /// Files made while their directory's lease was asked for, and the
    /// lease fid: covered once it is granted.
    pending: HashMap<u64, u32>,
}

/// What a client knows of its leases.
pub(crate) struct Leases {
    /// The server may grant leases: off for good once it shows it does
    /// not know them.
    on: AtomicBool,
    t: Mutex<Table>,
    /// Signalled when an ask is settled (granted, refused, recalled).
    settled: Condvar,
}

/// What a recall found.
pub(crate) struct Recalled {
    pub fid: u32,
    /// The directory, for logs.
    pub dir: u64,
}

impl Leases {
    pub fn new(on: bool) -> Leases {
        Leases {
            on: AtomicBool::new(on),
            t: Mutex::new(Table::default()),
            settled: Condvar::new(),
        }
    }

    /// File `node` is being made in `dir`: covered if a lease is held
    /// there. `Some(fid)` when a lease should be asked for now, with lease
    /// fid `alloc()` (the caller sends the ask ahead of the create).
    pub fn made(&self, dir: u64, node: u64, alloc: impl FnOnce() -> u32) -> Option<u32> {
        if !self.on.load(Relaxed) {
            return None;
        }
        let mut t = self.t.lock();
        let t = &mut *t;
        match t.dirs.get_mut(&dir) {
            Some(Dir::Held { fid, made }) => {
                made.push(node);
                t.covered.insert(node, *fid);
                None
            }
            Some(Dir::Asking { fid, made }) => {
                made.push(node);
                t.pending.insert(node, *fid);
                None
            }
            Some(Dir::Cooling(at)) if at.elapsed() < COOL => None,
            _ => {
                let fid = alloc();
                t.dirs.insert(
                    dir,
                    Dir::Asking {
                        fid,
                        made: vec![node],
                    },
                );
                t.by_fid.insert(fid, dir);
                t.pending.insert(node, fid);
                Some(fid)
            }
        }
    }

    /// The server granted lease `fid`.
    pub fn granted(&self, fid: u32) {
        let mut t = self.t.lock();
        let t = &mut *t;
        let Some(&dir) = t.by_fid.get(&fid) else {
            return;
        };
        if let Some(Dir::Asking { fid: f, made }) = t.dirs.remove(&dir) {
            for &n in &made {
                t.pending.remove(&n);
                t.covered.insert(n, f);
            }
            t.dirs.insert(dir, Dir::Held { fid: f, made });
        }
        self.settled.notify_all();
    }

    /// The server refused lease `fid` with `e` (`EAGAIN`: not now; else
    /// it does not grant leases at all).
    pub fn refused(&self, fid: u32, e: Errno) {
        if e != Errno::EAGAIN && e != Errno::ENOTCONN {
            self.on.store(false, Relaxed);
        }
        let mut t = self.t.lock();
        if let Some(dir) = t.by_fid.remove(&fid) {
            if let Some(Dir::Asking { made, .. }) = t.dirs.insert(dir, Dir::Cooling(Instant::now()))
            {
                for n in made {
                    t.pending.remove(&n);
                }
            }
        }
        self.settled.notify_all();
    }

    /// The server recalls lease `fid`: from now on it covers nothing.
    /// `None` if this client holds no such lease (already given back).
    pub fn recall(&self, fid: u32) -> Option<Recalled> {
        let mut t = self.t.lock();
        let t = &mut *t;
        let dir = t.by_fid.remove(&fid)?;
        if let Some(Dir::Held { made, .. } | Dir::Asking { made, .. }) = t.dirs.get(&dir) {
            for n in made {
                t.covered.remove(n);
                t.pending.remove(n);
            }
        }
        t.dirs.insert(dir, Dir::Cooling(Instant::now()));
        self.settled.notify_all();
        Some(Recalled { fid, dir })
    }

    /// Is `node` covered by a lease: a file made under one, or a
    /// directory leased or being asked for (this client is the one
    /// filling it)? A file whose directory's lease is on its way waits
    /// for the answer (at most [`SETTLE`]): a grant comes a round trip
    /// after the ask, sooner than the file's own changes, which queue
    /// behind everything sent before them.
    /// The connection went, and every lease with it (recover.rs): each
    /// is recalled; returns their fids, which name nothing any more.
    pub fn lose_all(&self) -> Vec<u32> {
        let fids: Vec<u32> = self.t.lock().by_fid.keys().copied().collect();
        fids.into_iter()
            .filter_map(|f| self.recall(f).map(|r| r.fid))
            .collect()
    }

    pub fn covers(&self, node: u64) -> bool {
        let deadline = Instant::now() + SETTLE;
        let mut t = self.t.lock();
        if matches!(
            t.dirs.get(&node),
            Some(Dir::Held { .. } | Dir::Asking { .. })
        ) {
            return true;
        }
        loop {
            if t.covered.contains_key(&node) {
                return true;
            }
            if !t.pending.contains_key(&node) {
                return false;
            }
            if self.settled.wait_until(&mut t, deadline).timed_out() {
                return t.covered.contains_key(&node);
            }
        }
    }

    /// Directory `dir` was just made here: `Some(fid)` to ask for a lease
    /// on it at once, with lease fid `alloc()`.
    pub fn made_dir(&self, dir: u64, alloc: impl FnOnce() -> u32) -> Option<u32> {
        self.ask_for(dir, true, alloc)
    }

    /// This client is emptying directory `dir` (an unlink in it): as
    /// [`made_dir`](Leases::made_dir), unless it was recalled lately.
    pub fn emptying(&self, dir: u64, alloc: impl FnOnce() -> u32) -> Option<u32> {
        self.ask_for(dir, false, alloc)
    }

    fn ask_for(&self, dir: u64, new: bool, alloc: impl FnOnce() -> u32) -> Option<u32> {
        if !self.on.load(Relaxed) {
            return None;
        }
        let mut t = self.t.lock();
        match t.dirs.get(&dir) {
            Some(Dir::Cooling(at)) if new || at.elapsed() >= COOL => {}
            Some(_) => return None,
            None => {}
        }
        let fid = alloc();
        t.dirs.insert(
            dir,
            Dir::Asking {
                fid,
                made: Vec::new(),
            },
        );
        t.by_fid.insert(fid, dir);
        Some(fid)
    }

    /// Leases held now.
    #[cfg(test)]
    fn held(&self) -> usize {
        let t = self.t.lock();
        t.dirs
            .values()
            .filter(|d| matches!(d, Dir::Held { .. }))
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_covered_from_the_grant_to_the_recall() {
        let l = Leases::new(true);
        assert_eq!(l.made(1, 10, || 100), Some(100));
        assert!(!l.covers(10), "not before the grant");
        assert_eq!(l.made(1, 11, || unreachable!()), None);
        assert!(l.covers(1), "the directory is being filled here");
        l.granted(100);
        assert!(l.covers(10) && l.covers(11) && l.covers(1));
        assert_eq!(l.made(1, 12, || unreachable!()), None);
        assert!(l.covers(12));
        assert_eq!(l.held(), 1);
        let r = l.recall(100).expect("held");
        assert_eq!((r.fid, r.dir), (100, 1));
        assert!(!l.covers(10) && !l.covers(12) && !l.covers(1));
        // Cooling: no new ask at once, and a second recall finds nothing.
        assert_eq!(l.made(1, 13, || 101), None);
        assert!(l.recall(100).is_none());
        assert_eq!(l.held(), 0);
    }

    #[test]
    fn a_directory_made_here_is_asked_for_at_once() {
        let l = Leases::new(true);
        assert_eq!(l.made_dir(5, || 200), Some(200));
        assert_eq!(l.made_dir(5, || 201), None);
        assert_eq!(l.made(5, 50, || 202), None, "already asked");
        l.granted(200);
        assert!(l.covers(50) && l.covers(5));
    }

    #[test]
    fn emptying_a_directory_asks_unless_it_cools() {
        let l = Leases::new(true);
        assert_eq!(l.emptying(7, || 300), Some(300));
        assert_eq!(l.emptying(7, || 301), None, "asked already");
        l.granted(300);
        assert!(l.covers(7));
        assert!(l.recall(300).is_some());
        assert_eq!(l.emptying(7, || 302), None, "recalled a moment ago");
    }

    #[test]
    fn a_refusal_other_than_eagain_ends_asking() {
        let l = Leases::new(true);
        assert_eq!(l.made(1, 10, || 100), Some(100));
        l.refused(100, Errno::EOPNOTSUPP);
        assert!(!l.covers(10));
        assert_eq!(l.made(2, 11, || 101), None, "the server grants none");
    }

    #[test]
    fn eagain_cools_only_that_directory() {
        let l = Leases::new(true);
        assert_eq!(l.made(1, 10, || 100), Some(100));
        l.refused(100, Errno::EAGAIN);
        assert_eq!(l.made(1, 11, || 101), None);
        assert_eq!(l.made(2, 12, || 102), Some(102));
    }
}
