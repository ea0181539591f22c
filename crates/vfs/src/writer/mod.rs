//! Everything that changes the caches, done under the writer mutex
//! (`Mutex<Writer>`, held through a [`WriterGuard`]). Each change to a
//! dentry or inode a reader may see is bracketed by that object's seqcount
//! (see `seqlock.rs`).
//!
//! The mutex guards the allocator state (free lists, the inode hash, the
//! eviction clock) and the hash chains' shape. It is held only for the
//! stores of one cache update: never across a backend call (a change holds
//! its directory's lock for that, see dirlock.rs), never while probing the
//! cache (lock-free). Dropping the guard publishes: it moves the namespace
//! generation if the update changed names or permissions, and delivers the
//! backend `forget`s the update queued, after the mutex is released.
//!
//! Reference rules (what keeps a slot from being freed):
//! - a cached child holds one reference on its parent dentry;
//! - a positive dentry holds one reference on its inode;
//! - open files, working directories and mounts hold one reference each on
//!   their dentry and their inode;
//! - an inode holds exactly one backend lookup reference, returned with
//!   `forget` when the inode is freed.
//!
//! A dentry with no references is unused and may be evicted; a dead
//! (removed) one is freed as soon as it is unused.
//!
//! Dentry references are atomics so that `open` and `close` can pin and
//! unpin without the writer lock (Linux's lockref, simplified): whoever
//! frees a dentry first claims it by swapping its count from 0 to
//! [`DYING`]; a lock-free pin refuses a `DYING` count and re-validates the
//! dentry's sequence count after pinning. A positive dentry never changes
//! its inode in place (a change makes a new dentry), so a pinned dentry
//! keeps its inode: open files pin only their dentry.
//!
//! The writer's work is split by concern, after Linux's fs/dcache.c and
//! fs/inode.c: dentries (dentries.rs), the inode hash (inodes.rs), chunk
//! chains and cached symlink bodies (symlinks.rs), the `forget` queue
//! (forget.rs), what our own changes do to cached attributes
//! (changes.rs), and references taken without the mutex (pins.rs). This
//! file holds the allocator state ([`Writer`]) and the guard.

mod changes;
mod dentries;
mod forget;
mod inodes;
mod pins;
mod symlinks;

use std::collections::HashMap;
use std::mem::ManuallyDrop;
use std::sync::Weak;

use parking_lot::MutexGuard;

use crate::dcache::*;
use crate::sync::Ordering::{Relaxed, Release};
use crate::Inner;

use forget::send_forgets;
pub(crate) use pins::PinCache;

/// A dentry count that is being freed: no pin may take it.
pub(crate) const DYING: u32 = u32::MAX;

pub(crate) struct Writer {
    free_dentry: u32,
    next_dentry: u32,
    pub n_dentries: u32,
    pub max_dentries: u32,
    free_inode: u32,
    next_inode: u32,
    pub n_inodes: u32,
    free_chunk: u32,
    next_chunk: u32,
    pub n_chunks: u32,
    inode_buckets: Vec<u32>,
    clock: u32,
    /// Backend nodes to `forget` once the lock is dropped.
    pub forgets: Vec<(usize, u64)>,
    /// A refresh changed what permission checks or walks see (mode,
    /// owner): the namespace generation must move when the lock drops.
    pub ns_dirty: bool,
    /// A refresh changed a mode, an owner or a symlink body: every
    /// listing read ahead before may show it wrong (readahead.rs).
    pub perm_dirty: bool,
    /// Inode -> a live positive dentry of it (the newest wins; a
    /// directory has one name): for changes reported by inode, and for
    /// the names a backend asks of the vfs ([`walkfs_fsapi::Names`]). A
    /// file with hard links may lose its entry while another name lives:
    /// [`Writer::alias_of`] then looks for one.
    pub alias: HashMap<IIdx, DIdx>,
    /// Every context's table of parked pins, so that a name's removal
    /// takes back the pins parked on its dentry (see [`PinCache`]).
    pub(crate) parked: Vec<Weak<PinCache>>,
    /// Hashed positive children per dentry (no entry: none). Kept where
    /// dentries enter and leave the hash and turn positive in place, so
    /// that a directory known complete is known empty without a listing
    /// (an rmdir answered from the cache).
    positive: HashMap<DIdx, u32>,
}

impl Writer {
    pub fn new(max_dentries: u32) -> Writer {
        Writer {
            free_dentry: 0,
            next_dentry: 1,
            n_dentries: 0,
            max_dentries,
            free_inode: 0,
            next_inode: 1,
            n_inodes: 0,
            free_chunk: 0,
            next_chunk: 1,
            n_chunks: 0,
            // Load factor 2: the chains are walked only under the lock, on a
            // miss, and the table costs every cached inode.
            inode_buckets: vec![0; ((max_dentries as usize).next_power_of_two() / 2).max(1024)],
            clock: 1,
            forgets: Vec::new(),
            ns_dirty: false,
            perm_dirty: false,
            alias: HashMap::new(),
            parked: Vec::new(),
            positive: HashMap::new(),
        }
    }
}

/// The writer mutex, held. Dropping it is the only way to release the
/// mutex, and it publishes what the update did: the namespace generation
/// moves if names or permissions changed (after the dentry cache shows the
/// change, so a walk that reads the new generation sees the new state),
/// then the mutex is released, then the queued `forget`s go to the
/// backends (a backend call, so never under the mutex).
pub(crate) struct WriterGuard<'a> {
    inner: &'a Inner,
    w: ManuallyDrop<MutexGuard<'a, Writer>>,
}

impl Inner {
    /// Take the writer mutex for one short cache update.
    pub fn writer(&self) -> WriterGuard<'_> {
        WriterGuard {
            inner: self,
            w: ManuallyDrop::new(self.w.lock()),
        }
    }
}

impl WriterGuard<'_> {
    /// Record that this update changed names, modes or owners: remembered
    /// whole paths filed under the old generation stop being used.
    pub fn changed(&mut self) {
        self.w.ns_dirty = true;
    }

    /// [`Writer::mark_stale`], moving the attribute generation too: an
    /// answer the backend gave before this and cached after it would
    /// otherwise clear the mark with attributes older than the change
    /// that set it (a write that waited for its server, say).
    pub fn mark_stale(&mut self, dc: &Dcache, idx: IIdx) {
        self.w.mark_stale(dc, idx);
        self.inner.attr_gen.fetch_add(1, Release);
        if let Some(i) = dc.inode(idx) {
            self.inner.log_attrs_of(idx, i.node.load(Relaxed));
        }
    }
}

impl std::ops::Deref for WriterGuard<'_> {
    type Target = Writer;
    fn deref(&self) -> &Writer {
        &self.w
    }
}

impl std::ops::DerefMut for WriterGuard<'_> {
    fn deref_mut(&mut self) -> &mut Writer {
        &mut self.w
    }
}

impl Drop for WriterGuard<'_> {
    fn drop(&mut self) {
        if std::mem::take(&mut self.w.ns_dirty) {
            self.inner.changed();
        }
        if std::mem::take(&mut self.w.perm_dirty) {
            self.inner.ra_log.everything();
        }
        let forgets = self.w.take_forgets();
        // SAFETY: `self.w` is dropped exactly once, here, and not touched
        // again: `self` is being dropped.
        unsafe { ManuallyDrop::drop(&mut self.w) };
        if !forgets.is_empty() {
            send_forgets(&self.inner.sbs.read(), forgets);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::sync::Ordering::Acquire;
    use crate::tests_util::{mem_vfs, with_dirs};
    use crate::{Creds, AT_FDCWD};

    fn refs(inner: &Inner, d: DIdx) -> u32 {
        inner.dc.dentry(d).map_or(0, |x| x.refs.load(Relaxed))
    }

    fn dentry_of(vfs: &crate::Vfs, path: &[u8]) -> crate::namei::Cur {
        let inner = &vfs.inner;
        let creds = Creds::root();
        crate::namei::Nameidata::new(inner, &creds, inner.root, inner.root, 0)
            .walk_full(path)
            .expect("walk")
    }

    #[test]
    fn the_guard_moves_the_generation_only_after_a_change() {
        let vfs = mem_vfs("");
        let inner = &vfs.inner;
        let g0 = inner.ns_gen.load(Acquire);
        drop(inner.writer());
        assert_eq!(inner.ns_gen.load(Acquire), g0, "a read-only section");
        let mut w = inner.writer();
        w.changed();
        // Not before the mutex is let go: a walk reading the new
        // generation must find the new state.
        assert_eq!(inner.ns_gen.load(Acquire), g0);
        drop(w);
        assert_eq!(inner.ns_gen.load(Acquire), g0 + 1);
    }

    #[test]
    fn pins_check_the_walk_is_still_current() {
        let vfs = mem_vfs("");
        let ctx = with_dirs(&vfs, &["/a"]);
        let inner = &vfs.inner;
        let a = dentry_of(&vfs, b"/a");
        let base = refs(inner, a.d);
        assert!(inner.pin(a.d, a.seq));
        assert_eq!(refs(inner, a.d), base + 1);
        inner.unpin(a.d);
        // Renamed since the walk: the pin is refused and leaves no count.
        ctx.renameat2(AT_FDCWD, b"/a", AT_FDCWD, b"/b", 0)
            .expect("rename");
        assert!(!inner.pin(a.d, a.seq));
        assert_eq!(refs(inner, a.d), base);
    }

    #[test]
    fn a_closed_file_parks_its_pin_and_the_next_open_takes_it_back() {
        let vfs = mem_vfs("");
        let ctx = with_dirs(&vfs, &["/d"]);
        let fd = ctx
            .openat(AT_FDCWD, b"/d/f", libc::O_CREAT | libc::O_WRONLY, 0o644)
            .expect("create");
        ctx.close(fd).expect("close");
        let inner = &vfs.inner;
        let f = dentry_of(&vfs, b"/d/f");
        assert_eq!(refs(inner, f.d), 1, "parked");
        for _ in 0..3 {
            let fd = ctx
                .openat(AT_FDCWD, b"/d/f", libc::O_RDONLY, 0)
                .expect("open");
            assert_eq!(refs(inner, f.d), 1, "the parked pin, taken back");
            ctx.close(fd).expect("close");
        }
        // Another context has its own table.
        let other = vfs.context(Creds::root());
        let fd = other
            .openat(AT_FDCWD, b"/d/f", libc::O_RDONLY, 0)
            .expect("open");
        assert_eq!(refs(inner, f.d), 2);
        other.close(fd).expect("close");
        drop(other);
        drop(ctx);
        assert_eq!(refs(inner, f.d), 0, "a context takes its parked pins along");
    }

    #[test]
    fn removing_a_name_takes_back_the_pins_parked_on_it() {
        let vfs = mem_vfs("");
        let ctx = with_dirs(&vfs, &["/d"]);
        let other = vfs.context(Creds::root());
        for c in [&ctx, &other] {
            let fd = c
                .openat(AT_FDCWD, b"/d/f", libc::O_CREAT | libc::O_WRONLY, 0o644)
                .expect("create");
            c.close(fd).expect("close");
        }
        let f = dentry_of(&vfs, b"/d/f");
        let inner = &vfs.inner;
        assert_eq!(refs(inner, f.d), 2, "parked in both contexts");
        let inodes = vfs.cache_stats().inodes;
        ctx.unlinkat(AT_FDCWD, b"/d/f", 0).expect("unlink");
        // Freed at once (its slot may already hold the negative entry
        // that took the name), its inode and backend node with it: a new
        // file given the same inode number by the host must not meet them.
        assert!(!inner.dc.unchanged(&f));
        assert_eq!(vfs.cache_stats().inodes, inodes - 1);
        // And replaced by a rename: the same.
        for c in [&ctx, &other] {
            for p in [&b"/d/a"[..], b"/d/b"] {
                let fd = c
                    .openat(AT_FDCWD, p, libc::O_CREAT | libc::O_WRONLY, 0o644)
                    .expect("create");
                c.close(fd).expect("close");
            }
        }
        let inodes = vfs.cache_stats().inodes;
        ctx.renameat2(AT_FDCWD, b"/d/a", AT_FDCWD, b"/d/b", 0)
            .expect("rename");
        assert_eq!(vfs.cache_stats().inodes, inodes - 1);
    }

    #[test]
    fn a_removed_file_is_never_parked_and_is_freed_at_close() {
        let vfs = mem_vfs("");
        let ctx = with_dirs(&vfs, &["/d"]);
        let fd = ctx
            .openat(AT_FDCWD, b"/d/f", libc::O_CREAT | libc::O_RDWR, 0o644)
            .expect("create");
        let f = dentry_of(&vfs, b"/d/f");
        let inodes = vfs.cache_stats().inodes;
        ctx.unlinkat(AT_FDCWD, b"/d/f", 0).expect("unlink");
        assert_eq!(ctx.write(fd, b"still open"), Ok(10));
        ctx.close(fd).expect("close");
        let inner = &vfs.inner;
        let d = inner.dc.dentry(f.d).expect("slot");
        assert_eq!(d.flags.load(Relaxed) & D_ALLOCATED, 0, "freed, not parked");
        assert_eq!(vfs.cache_stats().inodes, inodes - 1);
    }

    #[test]
    fn names_are_added_found_and_killed_under_the_mutex() {
        let vfs = mem_vfs("");
        with_dirs(&vfs, &["/d"]);
        let inner = &vfs.inner;
        let dc = &inner.dc;
        let dir = dentry_of(&vfs, b"/d");
        let long = [b'x'; 40];
        let mut w = inner.writer();
        for name in [&b"short"[..], &long[..]] {
            let h = hash_name(name);
            assert_eq!(w.d_find(dc, dir.d, name, h), None);
            let neg = w
                .d_add(dc, dir.d, name, h, IIdx::NONE, EXPIRY_FOREVER)
                .expect("add");
            assert_eq!(w.d_find(dc, dir.d, name, h), Some(neg));
            assert_eq!(dc.name_of(neg), name);
            // Lock-free readers see it too.
            let s = dc.d_lookup(dir.d, name, h).expect("lock-free");
            assert_eq!(s.idx, neg);
            assert_ne!(s.flags & D_NEGATIVE, 0);
            w.d_kill(dc, neg);
            assert_eq!(w.d_find(dc, dir.d, name, h), None);
            assert_eq!(dc.d_lookup(dir.d, name, h), None);
        }
    }

    #[test]
    fn eviction_frees_unused_dentries_only() {
        let vfs = mem_vfs("");
        let keeper = with_dirs(&vfs, &["/d"]);
        {
            let maker = vfs.context(Creds::root());
            for i in 0..50 {
                let p = format!("/d/f{i}");
                let fd = maker
                    .openat(
                        AT_FDCWD,
                        p.as_bytes(),
                        libc::O_CREAT | libc::O_WRONLY,
                        0o644,
                    )
                    .expect("create");
                maker.close(fd).expect("close");
            }
        } // its parked pins go with it
        let _keep = keeper
            .openat(AT_FDCWD, b"/d/f7", libc::O_RDONLY, 0)
            .expect("open");
        let f7 = dentry_of(&vfs, b"/d/f7");
        vfs.drop_caches();
        assert!(vfs.inner.dc.unchanged(&f7), "an open file's dentry stays");
        // The root, /d (held by its child) and /d/f7.
        assert_eq!(vfs.cache_stats().dentries, 3);
    }
}
