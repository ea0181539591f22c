//! Reports of our own changes: the host's watcher sees the calls hostfs
//! makes for the vfs, and reports them back a moment later. The vfs
//! already shows those changes; dropping what it knows for them (and the
//! FUSE kernel's copy, which makes the kernel forget and look up again the
//! files a program just made) is what made a coherent local mount slower
//! than a loose one.
//!
//! So each change hostfs makes records the state it left behind: a name
//! (directory node, name) now naming a file of identity (key, birth), or
//! nothing; a node's attributes. A report is taken for our own when a
//! record of its object is young (within [`OWN_FOR`]) and the host shows
//! that state *now*, checked when the report is read ([`Own::entry_is`],
//! [`Own::inode_is`]): then nothing changed that the vfs does not know,
//! whoever made the change. The report is still delivered, marked
//! [`How::own`](walkfs_fsapi::How), since watchers of a mount count on it
//! to pair with the kernel's own event (fuse replay.rs).
//!
//! Invariant: a record stands for what the vfs shows of its object, so it
//! lives only while the vfs can have learned nothing else of it: it goes
//! when a report of the object is not taken for ours (the cache then drops
//! what it had and learns the host's state anew) and when hostfs answers
//! a lookup or a listing of the name (the vfs learns what the host shows
//! then). A file that moved away and back, seen away in between, is so
//! never taken for untouched. A record is also only trusted against the
//! host's present state; one that is missing, old or contradicted leaves
//! the report as it was (the cache drops what it names): a wrong guess
//! costs time, never coherence.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use walkfs_fsapi::Attr;

/// How long a record answers reports: reports come within milliseconds.
pub(crate) const OWN_FOR: Duration = Duration::from_secs(2);
/// Records kept before the old ones are swept.
const SWEEP_AT: usize = 16 * 1024;

/// What a name names: a file's (key, birth), or nothing.
pub(crate) type Named = Option<((u64, u64), i64)>;

/// The attributes a report compares: any change the host makes to a
/// file's data or metadata moves its ctime.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Sig {
    mode: u32,
    uid: u32,
    gid: u32,
    nlink: u32,
    size: u64,
    mtime: (i64, u32),
    ctime: (i64, u32),
}

impl Sig {
    pub(crate) fn of(a: &Attr) -> Sig {
        Sig {
            mode: a.mode,
            uid: a.uid,
            gid: a.gid,
            nlink: a.nlink,
            size: a.size,
            mtime: (a.mtime.sec, a.mtime.nsec),
            ctime: (a.ctime.sec, a.ctime.nsec),
        }
    }
}

#[derive(Default)]
struct Records {
    entries: HashMap<(u64, Vec<u8>), (Named, Instant)>,
    inodes: HashMap<u64, (Sig, Instant)>,
}

#[derive(Default)]
pub(crate) struct Own {
    r: Mutex<Records>,
    /// Held shared by a change from its host call until its record is
    /// made, and exclusively while reports are checked: a report read
    /// between the two would find the host changed and no record yet.
    gate: RwLock<()>,
}

impl Own {
    /// Held around a change's host call and its record.
    pub(crate) fn changing(&self) -> RwLockReadGuard<'_, ()> {
        // Recursive: a change never waits for the checker, even while the
        // checker waits for the gate.
        self.gate.read_recursive()
    }

    /// Held while reports are checked against the records.
    pub(crate) fn checking(&self) -> RwLockWriteGuard<'_, ()> {
        self.gate.write()
    }

    /// We left `name` in directory node `dir` naming `now`.
    pub(crate) fn entry(&self, dir: u64, name: &[u8], now: Named) {
        let mut r = self.r.lock();
        if r.entries.len() >= SWEEP_AT {
            r.entries.retain(|_, (_, t)| t.elapsed() < OWN_FOR);
        }
        r.entries
            .insert((dir, name.to_vec()), (now, Instant::now()));
    }

    /// We left node `node` with attributes `a`.
    pub(crate) fn inode(&self, node: u64, a: &Attr) {
        let mut r = self.r.lock();
        if r.inodes.len() >= SWEEP_AT {
            r.inodes.retain(|_, (_, t)| t.elapsed() < OWN_FOR);
        }
        r.inodes.insert(node, (Sig::of(a), Instant::now()));
    }

    /// What we recently left `name` of `dir` naming, if we did.
    pub(crate) fn entry_was(&self, dir: u64, name: &[u8]) -> Option<Named> {
        let r = self.r.lock();
        let (named, t) = r.entries.get(&(dir, name.to_vec()))?;
        (t.elapsed() < OWN_FOR).then_some(*named)
    }

    /// Does the host show `name` of `dir` as we left it (`found`: what it
    /// names now)?
    pub(crate) fn entry_is(&self, dir: u64, name: &[u8], found: Named) -> bool {
        self.entry_was(dir, name) == Some(found)
    }

    /// The vfs learns what `name` of `dir` names now (a lookup, or a
    /// report not ours): our record of it no longer stands for the vfs.
    pub(crate) fn forget_entry(&self, dir: u64, name: &[u8]) {
        let mut r = self.r.lock();
        if !r.entries.is_empty() {
            r.entries.remove(&(dir, name.to_vec()));
        }
    }

    /// The vfs learns every name of `dir` (a listing).
    pub(crate) fn forget_dir(&self, dir: u64) {
        let mut r = self.r.lock();
        if !r.entries.is_empty() {
            r.entries.retain(|(d, _), _| *d != dir);
        }
    }

    /// A report of node `node` not ours: the vfs drops what it had.
    pub(crate) fn forget_inode(&self, node: u64) {
        self.r.lock().inodes.remove(&node);
    }

    /// Changes were lost: no record stands.
    pub(crate) fn clear(&self) {
        let mut r = self.r.lock();
        r.entries.clear();
        r.inodes.clear();
    }

    /// Is there a young record of node `node`?
    pub(crate) fn has_inode(&self, node: u64) -> bool {
        let r = self.r.lock();
        r.inodes
            .get(&node)
            .is_some_and(|(_, t)| t.elapsed() < OWN_FOR)
    }

    /// Does the host show node `node` with the attributes we left it with
    /// (`now`: its attributes read from the host just now)?
    pub(crate) fn inode_is(&self, node: u64, now: &Attr) -> bool {
        let r = self.r.lock();
        r.inodes
            .get(&node)
            .is_some_and(|(sig, t)| t.elapsed() < OWN_FOR && *sig == Sig::of(now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(ctime: i64) -> Attr {
        Attr {
            ino: 5,
            mode: libc::S_IFREG | 0o644,
            nlink: 1,
            uid: 0,
            gid: 0,
            rdev: 0,
            size: 3,
            blocks: 0,
            atime: Default::default(),
            mtime: Default::default(),
            ctime: walkfs_fsapi::Timespec {
                sec: ctime,
                nsec: 0,
            },
            btime: Default::default(),
            has_acl: false,
        }
    }

    #[test]
    fn a_report_is_ours_only_while_the_host_shows_what_we_left() {
        let own = Own::default();
        own.entry(1, b"f", Some(((7, 9), 100)));
        assert!(own.entry_is(1, b"f", Some(((7, 9), 100))));
        // Removed and made again with the same inode number: another file.
        assert!(!own.entry_is(1, b"f", Some(((7, 9), 101))));
        assert!(!own.entry_is(1, b"f", None));
        assert!(!own.entry_is(1, b"g", None));
        own.entry(1, b"f", None);
        assert!(own.entry_is(1, b"f", None));
        // Once the vfs learned the name anew, no report of it is ours.
        own.forget_entry(1, b"f");
        assert!(!own.entry_is(1, b"f", None));
        own.entry(1, b"f", None);
        own.forget_dir(1);
        assert!(!own.entry_is(1, b"f", None));
        own.inode(5, &attr(10));
        assert!(own.inode_is(5, &attr(10)));
        assert!(!own.inode_is(5, &attr(11)));
        assert!(!own.inode_is(6, &attr(10)));
        own.forget_inode(5);
        assert!(!own.inode_is(5, &attr(10)));
    }
}
