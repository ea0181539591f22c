//! `cache=coherent`: loose caching, kept true by the backend's reports of
//! changes made behind the cache's back.
//!
//! The backend (hostfs watching the host with inotify, the 9P client told
//! by `walkfs serve`) calls [`Invalidator::changed`] from a thread of its
//! own. Each change drops exactly what it names:
//!
//! * a name in a directory: a negative dentry goes, a positive one is
//!   marked `D_STALE` (the walk's fast path treats it as a miss, the slow
//!   path asks the backend and keeps the dentry, and everything cached
//!   under it, when the answer is the same inode); the directory's
//!   attributes are marked stale;
//! * an inode: its attributes and cached symlink body go, and the
//!   attributes are fetched again at once, so that a permission change is
//!   seen by the next walk (walks read the cached mode without asking);
//! * everything (a lost queue): all of the above for every entry;
//! * degraded (some changes will go unseen): all of the above, and from
//!   then on the cache revalidates with the backend on every use, negative
//!   entries living a second;
//! * a change the backend made itself for this vfs, the object still as
//!   it left it (`How::own`, hostfs own.rs): nothing; the cache shows it.
//!
//! A batch that dropped a cached name moves the generation of remembered
//! whole paths (they may run through it), and each batch is passed on to
//! the listeners (the FUSE front end, the 9P server) only after the cache
//! shows it: a client told of a change and asking again must get the new
//! answer.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use parking_lot::RwLock;
use walkfs_fsapi::{Change, ChangeSink};

use crate::dcache::{hash_name, IIdx, D_NEGATIVE};
use crate::Inner;

/// How long negative entries live once changes may go unseen (at most:
/// a shorter `negtimeout`, or none, stays).
pub(crate) const DEGRADED_NEGTIMEOUT_MS: i64 = 1000;

/// Whoever is told of changes once the cache has dropped them.
pub(crate) type Listeners = RwLock<Vec<Arc<dyn ChangeSink>>>;

/// The sink a watched backend reports to: superblock `sb` of a vfs.
pub(crate) struct Invalidator {
    pub inner: Weak<Inner>,
    pub sb: usize,
}

impl ChangeSink for Invalidator {
    fn changed(&self, changes: &[Change]) {
        let Some(inner) = self.inner.upgrade() else {
            return;
        };
        inner.apply_changes(self.sb, changes);
        for l in inner.listeners.read().iter() {
            l.changed(changes);
        }
    }

    fn recall(&self) {
        if let Some(inner) = self.inner.upgrade() {
            inner.flush_all();
        }
    }
}

impl Inner {
    fn apply_changes(&self, sb: usize, changes: &[Change]) {
        let dc = &self.dc;
        let mut refetch = Vec::new();
        self.counters.changes.add(changes.len() as u64);
        let mut touched = false;
        let mut w = self.writer();
        // A slow lookup that asked the backend before this batch caches
        // its answer only as stale (see namei.rs).
        self.ext_seen.fetch_add(1, Ordering::Release);
        for c in changes {
            match c {
                // The backend's own change for us, the object as it left
                // it: the cache shows it already.
                Change::Entry { how, .. } | Change::Inode { how, .. } if how.own => {
                    self.counters.changes_own.inc();
                }
                Change::Entry { dir, name, .. } => {
                    let Some(ino) = w.find_inode(dc, sb, dir.0) else {
                        continue;
                    };
                    w.mark_stale(dc, ino);
                    w.set_complete(dc, ino, false);
                    let Some(&d) = w.alias.get(&ino) else {
                        continue;
                    };
                    let Some(child) = w.d_find(dc, d, name, hash_name(name)) else {
                        continue;
                    };
                    touched = true;
                    let flags = dc
                        .dentry(child)
                        .map_or(0, |c| c.flags.load(Ordering::Relaxed));
                    if flags & D_NEGATIVE != 0 {
                        w.d_kill(dc, child);
                    } else {
                        w.d_mark_stale(dc, child, true);
                        // Its link count may have changed (unlink of one
                        // of several names).
                        if let Some(t) = dc.dentry(child) {
                            w.mark_stale(dc, IIdx(t.target.load(Ordering::Relaxed)));
                        }
                    }
                }
                Change::Inode { node, .. } => {
                    if let Some(ino) = w.find_inode(dc, sb, node.0) {
                        w.invalidate_inode(dc, ino);
                        refetch.push((ino, *node));
                    }
                }
                Change::All => {
                    self.counters.changes_lost.inc();
                    w.invalidate_all(dc);
                    touched = true;
                }
                Change::Degraded => {
                    w.invalidate_all(dc);
                    self.degrade();
                    touched = true;
                }
            }
        }
        // Remembered whole paths may run through what was dropped. (The
        // namespace generation, which every slow lookup checks, is left
        // alone: a busy tree would keep lookups elsewhere retrying.)
        if touched {
            self.ext_gen.fetch_add(1, Ordering::Release);
        }
        drop(w);
        if refetch.is_empty() {
            return;
        }
        for (ino, node) in refetch {
            // A failure leaves the attributes stale: the next use asks.
            let _ = self.refetch_attrs(sb, ino, node.0);
        }
    }

    /// Changes may go unseen from now on: answer nothing from the cache
    /// unchecked (as `cache=none` does), negative entries for a second.
    /// The user's options stay as given (`Vfs::options` reports them);
    /// the live switches are derived from them and this state.
    pub(crate) fn degrade(&self) {
        // Under the options' lock: a `set_option` either ran before (and
        // its options are the ones applied here) or runs after and sees
        // the state set here.
        let opts = self.opts.lock();
        self.degraded.store(true, Ordering::Release);
        self.sw.apply(&opts, true);
        drop(opts);
        self.changed();
    }
}
