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

use std::collections::HashMap;
use std::mem::ManuallyDrop;
use std::sync::{Arc, Weak};

use parking_lot::MutexGuard;

use walkfs_fsapi::{Attr, Entry, FileSystem};

use crate::dcache::*;
use crate::sync::Ordering::{AcqRel, Acquire, Relaxed, Release, SeqCst};
use crate::Inner;

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
    /// Directory inode -> its live dentry, for changes reported by inode
    /// (a directory has one name; the newest dentry wins).
    pub dir_alias: HashMap<IIdx, DIdx>,
    /// Every context's table of parked pins, so that a name's removal
    /// takes back the pins parked on its dentry (see [`PinCache`]).
    parked: Vec<Weak<PinCache>>,
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
            dir_alias: HashMap::new(),
            parked: Vec::new(),
            positive: HashMap::new(),
        }
    }

    /// Names in directory dentry `d` that lead somewhere, as far as the
    /// cache holds them (all of them when its inode is
    /// [`I_COMPLETE`](crate::dcache::I_COMPLETE)).
    pub fn positive_children(&self, d: DIdx) -> u32 {
        self.positive.get(&d).copied().unwrap_or(0)
    }

    fn count_child(&mut self, parent: DIdx, up: bool) {
        if up {
            *self.positive.entry(parent).or_insert(0) += 1;
        } else if let Some(n) = self.positive.get_mut(&parent) {
            *n -= 1;
            if *n == 0 {
                self.positive.remove(&parent);
            }
        }
    }

    pub fn inode_bucket_bytes(&self) -> usize {
        self.inode_buckets.len() * std::mem::size_of::<IIdx>()
    }

    // ---- chunks -------------------------------------------------------

    /// Store `bytes` in a new chunk chain; its head, or 0 if the arena is
    /// full.
    pub fn store_chunks(&mut self, dc: &Dcache, bytes: &[u8]) -> u32 {
        let mut head = 0;
        let mut prev: Option<&Chunk> = None;
        for part in bytes.chunks(CHUNK_BYTES) {
            let idx = if self.free_chunk != 0 {
                let i = self.free_chunk;
                self.free_chunk = dc.chunks.get(i).map_or(0, |c| c.next.load(Relaxed));
                i
            } else {
                let i = self.next_chunk;
                self.next_chunk += 1;
                i
            };
            let Some(c) = dc.chunks.get_or_alloc(idx) else {
                self.free_chunks(dc, head);
                return 0;
            };
            self.n_chunks += 1;
            for (i, w) in c.data.iter().enumerate() {
                let mut b = [0u8; 8];
                let lo = (i * 8).min(part.len());
                let hi = (i * 8 + 8).min(part.len());
                b[..hi - lo].copy_from_slice(&part[lo..hi]);
                w.store(u64::from_le_bytes(b), Relaxed);
            }
            c.next.store(0, Relaxed);
            c.len.store(bytes.len() as u32, Relaxed);
            match prev {
                Some(p) => p.next.store(idx, Relaxed),
                None => head = idx,
            }
            prev = Some(c);
        }
        head
    }

    pub fn free_chunks(&mut self, dc: &Dcache, mut head: u32) {
        while head != 0 {
            let Some(c) = dc.chunks.get(head) else { return };
            let next = c.next.load(Relaxed);
            c.next.store(self.free_chunk, Relaxed);
            self.free_chunk = head;
            self.n_chunks -= 1;
            head = next;
        }
    }

    // ---- dentries -----------------------------------------------------

    /// A fresh, unhashed dentry slot (evicting unused ones past the bound).
    fn alloc_dentry(&mut self, dc: &Dcache) -> Option<DIdx> {
        if self.n_dentries >= self.max_dentries {
            self.evict(dc, 64);
        }
        let idx = if self.free_dentry != 0 {
            let i = self.free_dentry;
            self.free_dentry = dc.dentry(DIdx(i))?.next.load(Relaxed);
            i
        } else {
            let i = self.next_dentry;
            dc.dentries.get_or_alloc(i)?;
            self.next_dentry += 1;
            i
        };
        self.n_dentries += 1;
        Some(DIdx(idx))
    }

    /// Create and hash a dentry `name` under `parent`: positive on `inode`,
    /// or negative with `expiry` when `inode` is none. Publishes it with a
    /// release store of the bucket head, after every field is written.
    pub fn d_add(
        &mut self,
        dc: &Dcache,
        parent: DIdx,
        name: &[u8],
        hash: u32,
        inode: IIdx,
        expiry: u32,
    ) -> Option<DIdx> {
        let long = if name.len() > INLINE_NAME {
            let c = self.store_chunks(dc, name);
            if c == 0 {
                return None;
            }
            c
        } else {
            0
        };
        // Pin the parent first: making room may evict unused dentries, and
        // the parent may be one (its children evicted before it). Freed
        // and reused, it would leave the new child pointing at whatever
        // took its slot.
        self.get_dentry(dc, parent);
        let Some(idx) = self.alloc_dentry(dc) else {
            self.free_chunks(dc, long);
            self.put_dentry(dc, parent);
            return None;
        };
        let d = dc.dentry(idx)?;
        d.seq.write_begin();
        let words = if long != 0 {
            [long, 0, 0, 0]
        } else {
            pack_name(name)
        };
        for (slot, w) in d.name.iter().zip(words) {
            slot.store(w, Relaxed);
        }
        d.parent.store(parent.0, Relaxed);
        d.hash.store(hash, Relaxed);
        d.refs.store(0, Release);
        let (kind, target) = if inode.is_none() {
            (D_NEGATIVE, expiry)
        } else {
            (self.type_flags(dc, inode), inode.0)
        };
        d.target.store(target, Relaxed);
        d.flags.store(
            D_ALLOCATED | D_HASHED | kind | ((name.len() as u32) << 24),
            Relaxed,
        );
        self.hash_insert(dc, idx, parent, hash);
        d.seq.write_end();
        if kind & D_DIR != 0 {
            self.dir_alias.insert(inode, idx);
        }
        Some(idx)
    }

    /// The dentry type bits for an inode.
    fn type_flags(&self, dc: &Dcache, inode: IIdx) -> u32 {
        let mode = dc.inode(inode).map_or(0, |i| i.mode.load(Relaxed));
        match mode & libc::S_IFMT {
            libc::S_IFDIR => D_DIR,
            libc::S_IFLNK => D_SYMLINK,
            _ => 0,
        }
    }

    /// The root dentry of a superblock: hashed nowhere, its own parent.
    pub fn d_make_root(&mut self, dc: &Dcache, inode: IIdx, extra: u32) -> Option<DIdx> {
        let idx = self.alloc_dentry(dc)?;
        let d = dc.dentry(idx)?;
        d.seq.write_begin();
        d.parent.store(idx.0, Relaxed);
        d.hash.store(0, Relaxed);
        d.target.store(inode.0, Relaxed);
        d.refs.store(1, Relaxed); // never evicted
        for w in &d.name {
            w.store(0, Relaxed);
        }
        d.flags.store(D_ALLOCATED | D_DIR | extra, Relaxed);
        d.seq.write_end();
        self.dir_alias.insert(inode, idx);
        Some(idx)
    }

    /// Hash `idx` (its flags already set) under `parent`.
    fn hash_insert(&mut self, dc: &Dcache, idx: DIdx, parent: DIdx, hash: u32) {
        let b = &dc.buckets[bucket_of(parent, hash, dc.mask)];
        if let Some(d) = dc.dentry(idx) {
            d.next.store(b.load(Relaxed), Relaxed);
            if d.flags.load(Relaxed) & D_NEGATIVE == 0 && parent != idx {
                self.count_child(parent, true);
            }
        }
        b.store(idx.0, Release);
    }

    /// Unhash `idx` (its flags and parent still as they were hashed).
    fn hash_remove(&mut self, dc: &Dcache, idx: DIdx) {
        let Some(d) = dc.dentry(idx) else { return };
        let parent = DIdx(d.parent.load(Relaxed));
        if d.flags.load(Relaxed) & D_NEGATIVE == 0 && parent != idx {
            self.count_child(parent, false);
        }
        let b = &dc.buckets[bucket_of(parent, d.hash.load(Relaxed), dc.mask)];
        let next = d.next.load(Relaxed);
        let mut cur = DIdx(b.load(Relaxed));
        if cur == idx {
            b.store(next, Release);
            return;
        }
        while !cur.is_none() {
            let Some(c) = dc.dentry(cur) else { return };
            let n = DIdx(c.next.load(Relaxed));
            if n == idx {
                c.next.store(next, Release);
                return;
            }
            cur = n;
        }
    }

    /// Find `name` under `parent` with the lock held (authoritative, no
    /// chain budget).
    pub fn d_find(&self, dc: &Dcache, parent: DIdx, name: &[u8], hash: u32) -> Option<DIdx> {
        let mut idx = DIdx(dc.buckets[bucket_of(parent, hash, dc.mask)].load(Relaxed));
        while !idx.is_none() {
            let d = dc.dentry(idx)?;
            let flags = d.flags.load(Relaxed);
            if flags & D_HASHED != 0
                && d.parent.load(Relaxed) == parent.0
                && d.hash.load(Relaxed) == hash
                && name_len(flags) == name.len()
                && dc.name_of(idx) == name
            {
                return Some(idx);
            }
            idx = DIdx(d.next.load(Relaxed));
        }
        None
    }

    pub fn get_dentry(&mut self, dc: &Dcache, idx: DIdx) {
        if let Some(d) = dc.dentry(idx) {
            d.refs.fetch_add(1, AcqRel);
        }
    }

    /// Drop a reference; a dead dentry is freed when it becomes unused.
    pub fn put_dentry(&mut self, dc: &Dcache, idx: DIdx) {
        let Some(d) = dc.dentry(idx) else { return };
        if d.refs.fetch_sub(1, AcqRel) == 1 {
            self.free_if_dead(dc, idx);
        }
    }

    /// Free `idx` if it is dead and unused, claiming it first.
    pub fn free_if_dead(&mut self, dc: &Dcache, idx: DIdx) {
        let Some(d) = dc.dentry(idx) else { return };
        if d.flags.load(Relaxed) & D_DEAD != 0
            && d.refs.compare_exchange(0, DYING, AcqRel, Relaxed).is_ok()
        {
            self.free_dentry(dc, idx);
        }
    }

    /// Free an unused dentry: unhash it, release its inode, name and
    /// parent, and put the slot on the free list. The seqcount bump makes
    /// every reader still holding the index retry.
    fn free_dentry(&mut self, dc: &Dcache, idx: DIdx) {
        let Some(d) = dc.dentry(idx) else { return };
        let flags = d.flags.load(Relaxed);
        if flags & D_ALLOCATED == 0 {
            return;
        }
        if flags & D_HASHED != 0 {
            self.hash_remove(dc, idx);
        }
        d.seq.write_begin();
        let parent = DIdx(d.parent.load(Relaxed));
        let target = IIdx(d.target.load(Relaxed));
        let long = (name_len(flags) > INLINE_NAME).then(|| d.name[0].load(Relaxed));
        d.flags.store(0, Relaxed);
        d.parent.store(0, Relaxed);
        d.target.store(0, Relaxed);
        d.seq.write_end();
        if let Some(c) = long {
            self.free_chunks(dc, c);
        }
        if flags & D_NEGATIVE == 0 && !target.is_none() {
            self.drop_alias(target, idx);
            self.put_inode(dc, target);
        }
        d.next.store(self.free_dentry, Relaxed);
        self.free_dentry = idx.0;
        self.n_dentries -= 1;
        if parent != idx && !parent.is_none() {
            self.put_dentry(dc, parent);
            // A parent left unused by its last child stays cached; the
            // clock will find it when memory is needed.
        }
    }

    /// Mark a dentry removed from the namespace: unhashed, dead, and freed
    /// once unused. Readers that had it see the seqcount move.
    pub fn d_kill(&mut self, dc: &Dcache, idx: DIdx) {
        let Some(d) = dc.dentry(idx) else { return };
        let flags = d.flags.load(Relaxed);
        if flags & D_HASHED != 0 {
            self.hash_remove(dc, idx);
        }
        d.seq.write_begin();
        d.flags.store((flags & !D_HASHED) | D_DEAD, Relaxed);
        d.seq.write_end();
        if flags & D_NEGATIVE == 0 {
            self.drop_alias(IIdx(d.target.load(Relaxed)), idx);
            self.unpark(dc, idx);
        }
        self.free_if_dead(dc, idx);
    }

    /// Take back every pin a context parked on `idx`, which was just
    /// marked dead: a removed file must let its inode (and the backend's
    /// node) go at its last real close, or a new file that the host gives
    /// the same inode number would meet the old node.
    fn unpark(&mut self, dc: &Dcache, idx: DIdx) {
        // Pairs with the fence in `PinCache::park`: either that park sees
        // D_DEAD (stored above) and takes its pin back, or this scan sees
        // the parked pin.
        crate::sync::fence(SeqCst);
        let mut taken = 0;
        for w in &self.parked {
            if w.upgrade().is_some_and(|pc| pc.unpark(idx)) {
                taken += 1;
            }
        }
        for _ in 0..taken {
            self.put_dentry(dc, idx);
        }
    }

    /// Register a context's parked pins (dropping the entries of
    /// contexts gone).
    pub fn register_pins(&mut self, pc: &Arc<PinCache>) {
        self.parked.retain(|w| w.strong_count() > 0);
        self.parked.push(Arc::downgrade(pc));
    }

    fn drop_alias(&mut self, inode: IIdx, idx: DIdx) {
        if self.dir_alias.get(&inode) == Some(&idx) {
            self.dir_alias.remove(&inode);
        }
    }

    /// Make the name of `idx` negative. A negative dentry is updated in
    /// place; a positive one is killed and a new negative one takes its
    /// name (positive dentries never change inode: open files rely on it).
    pub fn d_set_negative(&mut self, dc: &Dcache, idx: DIdx, expiry: u32) {
        let Some(d) = dc.dentry(idx) else { return };
        let flags = d.flags.load(Relaxed);
        if flags & D_NEGATIVE == 0 {
            let (parent, hash) = (DIdx(d.parent.load(Relaxed)), d.hash.load(Relaxed));
            let name = dc.name_of(idx);
            self.d_kill(dc, idx);
            let _ = self.d_add(dc, parent, &name, hash, IIdx::NONE, expiry);
            return;
        }
        let old = d.target.load(Relaxed);
        d.seq.write_begin();
        d.flags
            .store((flags & !(D_DIR | D_SYMLINK)) | D_NEGATIVE, Relaxed);
        d.target.store(expiry, Relaxed);
        d.seq.write_end();
        if flags & D_NEGATIVE == 0 && old != 0 {
            self.put_inode(dc, IIdx(old));
        }
    }

    /// Point the name of `idx` at `inode`, which gains a reference. A
    /// negative dentry turns positive in place; a positive one is replaced.
    /// Returns the dentry that now holds the name.
    pub fn d_set_inode(&mut self, dc: &Dcache, idx: DIdx, inode: IIdx) -> Option<DIdx> {
        let d = dc.dentry(idx)?;
        let flags = d.flags.load(Relaxed);
        if flags & D_NEGATIVE == 0 {
            let (parent, hash) = (DIdx(d.parent.load(Relaxed)), d.hash.load(Relaxed));
            let name = dc.name_of(idx);
            self.d_kill(dc, idx);
            self.get_inode(dc, inode);
            let new = self.d_add(dc, parent, &name, hash, inode, 0);
            if new.is_none() {
                self.put_inode(dc, inode);
            }
            return new;
        }
        let kind = self.type_flags(dc, inode);
        self.get_inode(dc, inode);
        if flags & D_HASHED != 0 {
            self.count_child(DIdx(d.parent.load(Relaxed)), true);
        }
        d.seq.write_begin();
        d.flags
            .store((flags & !(D_NEGATIVE | D_DIR | D_SYMLINK)) | kind, Relaxed);
        d.target.store(inode.0, Relaxed);
        d.seq.write_end();
        if kind & D_DIR != 0 {
            self.dir_alias.insert(inode, idx);
        }
        Some(idx)
    }

    /// Make the name (`parent`, `name`) mean `inode`: the dentry already
    /// holding the name (`existing`, found under the mutex) turns positive
    /// or is replaced, or a new one is added. Consumes the caller's
    /// reference on `inode`; the dentry that now holds the name, `None`
    /// when the cache is full.
    pub fn d_instantiate(
        &mut self,
        dc: &Dcache,
        parent: DIdx,
        name: &[u8],
        hash: u32,
        existing: Option<DIdx>,
        inode: IIdx,
    ) -> Option<DIdx> {
        let idx = match existing {
            Some(idx) => self.d_set_inode(dc, idx, inode),
            None => self.d_add(dc, parent, name, hash, inode, 0),
        };
        // d_set_inode took its own reference and d_add took ours: either
        // way the caller's is dropped unless d_add kept it.
        if existing.is_some() || idx.is_none() {
            self.put_inode(dc, inode);
        }
        idx
    }

    /// Move a dentry to a new (parent, name): rename.
    pub fn d_move(&mut self, dc: &Dcache, idx: DIdx, parent: DIdx, name: &[u8], hash: u32) {
        let Some(d) = dc.dentry(idx) else { return };
        let flags = d.flags.load(Relaxed);
        let old_parent = DIdx(d.parent.load(Relaxed));
        let old_long = (name_len(flags) > INLINE_NAME).then(|| d.name[0].load(Relaxed));
        let long = if name.len() > INLINE_NAME {
            self.store_chunks(dc, name)
        } else {
            0
        };
        if name.len() > INLINE_NAME && long == 0 {
            // No room for the name: forget the dentry instead of moving it.
            self.d_kill(dc, idx);
            return;
        }
        if flags & D_HASHED != 0 {
            self.hash_remove(dc, idx);
        }
        d.seq.write_begin();
        let words = if long != 0 {
            [long, 0, 0, 0]
        } else {
            pack_name(name)
        };
        for (slot, w) in d.name.iter().zip(words) {
            slot.store(w, Relaxed);
        }
        d.parent.store(parent.0, Relaxed);
        d.hash.store(hash, Relaxed);
        d.flags.store(
            (flags & 0x00ff_ffff) | D_HASHED | ((name.len() as u32) << 24),
            Relaxed,
        );
        self.hash_insert(dc, idx, parent, hash);
        d.seq.write_end();
        if let Some(c) = old_long {
            self.free_chunks(dc, c);
        }
        if old_parent != parent {
            self.get_dentry(dc, parent);
            self.put_dentry(dc, old_parent);
        }
    }

    /// Mark (or unmark) a dentry [`D_STALE`] without moving its sequence
    /// count: the mark only sends later walks to the slow path, and a
    /// caller holding the dentry (a create about to pin what it made) must
    /// not be made to start over by it. Walks that read the flags before
    /// the mark used the dentry as it was an instant before the change was
    /// reported, which they could have done anyway.
    pub fn d_mark_stale(&mut self, dc: &Dcache, idx: DIdx, stale: bool) {
        if let Some(d) = dc.dentry(idx) {
            if stale {
                d.flags.fetch_or(D_STALE, Relaxed);
            } else {
                let flags = d.flags.fetch_and(!D_STALE, Relaxed);
                // A directory has one name: the one just found current
                // is its name now (renamed away and back behind our
                // back, its alias may be the other name's dentry).
                if flags & D_DIR != 0 {
                    self.dir_alias.insert(IIdx(d.target.load(Relaxed)), idx);
                }
            }
        }
    }

    pub fn set_dentry_flag(&mut self, dc: &Dcache, idx: DIdx, set: u32, clear: u32) {
        if let Some(d) = dc.dentry(idx) {
            d.seq.write_begin();
            d.flags
                .store((d.flags.load(Relaxed) | set) & !clear, Relaxed);
            d.seq.write_end();
        }
    }

    /// Evict up to `want` unused dentries with a clock sweep over the
    /// slots: a referenced one gets a second chance.
    pub fn evict(&mut self, dc: &Dcache, want: u32) -> u32 {
        let mut freed = 0;
        let mut scanned = 0;
        let limit = self.next_dentry.saturating_mul(2);
        while freed < want && scanned < limit {
            scanned += 1;
            if self.clock >= self.next_dentry {
                self.clock = 1;
            }
            let idx = DIdx(self.clock);
            self.clock += 1;
            let Some(d) = dc.dentry(idx) else { continue };
            let flags = d.flags.load(Relaxed);
            if flags & D_ALLOCATED == 0
                || d.refs.load(Acquire) != 0
                || flags & (D_MOUNTPOINT | D_MOUNTROOT) != 0
            {
                continue;
            }
            if flags & D_REFERENCED != 0 {
                d.flags.store(flags & !D_REFERENCED, Relaxed);
                continue;
            }
            // Claim it: a concurrent lock-free pin either got in first (and
            // we skip it) or will see DYING and walk again.
            if d.refs.compare_exchange(0, DYING, AcqRel, Relaxed).is_err() {
                continue;
            }
            // A name leaves the cache while it still exists: its
            // directory's cached entries are no longer all of them.
            if flags & D_NEGATIVE == 0 {
                let parent = dc.dentry(DIdx(d.parent.load(Relaxed)));
                if let Some(p) = parent {
                    self.set_complete(dc, IIdx(p.target.load(Relaxed)), false);
                }
            }
            self.free_dentry(dc, idx);
            freed += 1;
        }
        freed
    }

    // ---- inodes -------------------------------------------------------

    fn inode_bucket(&self, sb: usize, node: u64) -> usize {
        let h = (node ^ ((sb as u64) << 48)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        (h >> 32) as usize & (self.inode_buckets.len() - 1)
    }

    /// The inode for backend entry `e` of superblock `sb`, created or
    /// refreshed. Returns it with one new reference for the caller. The
    /// backend's lookup reference is kept once per inode: a duplicate is
    /// queued for `forget`.
    ///
    /// `fresh` false: `e`'s attributes may be older than those cached (a
    /// change of ours came between the backend's answer and now), so an
    /// inode already cached keeps its own.
    pub fn iget(&mut self, dc: &Dcache, sb: usize, e: &Entry, fresh: bool) -> Option<IIdx> {
        let b = self.inode_bucket(sb, e.node.0);
        let mut idx = IIdx(self.inode_buckets[b]);
        while !idx.is_none() {
            let i = dc.inode(idx)?;
            if i.node.load(Relaxed) == e.node.0
                && (i.flags.load(Relaxed) >> SB_SHIFT) as usize == sb
            {
                let (was, born) = (i.btime.load(Relaxed), e.attr.btime.as_nanos());
                if was != 0 && born != 0 && was != born {
                    // The backend reused a node id (a host inode number
                    // after a delete) for a file born since: it is not
                    // the file this inode caches. It leaves the hash
                    // keeping the backend's reference it holds, and the
                    // new file gets an inode of its own (and its own
                    // reference: no forget is queued for this lookup).
                    self.unhash_inode(dc, idx, b);
                    break;
                }
                self.forgets.push((sb, e.node.0));
                if fresh {
                    self.refresh(dc, idx, &e.attr);
                }
                self.get_inode(dc, idx);
                return Some(idx);
            }
            idx = IIdx(i.next.load(Relaxed));
        }
        let idx = if self.free_inode != 0 {
            let i = self.free_inode;
            self.free_inode = dc.inode(IIdx(i))?.next.load(Relaxed);
            IIdx(i)
        } else {
            let i = self.next_inode;
            dc.inodes.get_or_alloc(i)?;
            self.next_inode += 1;
            IIdx(i)
        };
        self.n_inodes += 1;
        let i = dc.inode(idx)?;
        i.seq.write_begin();
        i.flags
            .store(I_ALLOCATED | ((sb as u32) << SB_SHIFT), Relaxed);
        i.node.store(e.node.0, Relaxed);
        i.refs.store(1, Relaxed);
        i.rdev.store(0, Relaxed);
        i.btime.store(0, Relaxed);
        store_attr(i, &e.attr);
        i.seq.write_end();
        i.next.store(self.inode_buckets[b], Relaxed);
        self.inode_buckets[b] = idx.0;
        Some(idx)
    }

    /// Take inode `idx` out of hash bucket `b`: lookups of its node no
    /// longer find it.
    fn unhash_inode(&mut self, dc: &Dcache, idx: IIdx, b: usize) {
        let Some(i) = dc.inode(idx) else { return };
        let next = i.next.load(Relaxed);
        if self.inode_buckets[b] == idx.0 {
            self.inode_buckets[b] = next;
        } else {
            let mut cur = IIdx(self.inode_buckets[b]);
            while !cur.is_none() {
                let Some(c) = dc.inode(cur) else { break };
                if c.next.load(Relaxed) == idx.0 {
                    c.next.store(next, Relaxed);
                    break;
                }
                cur = IIdx(c.next.load(Relaxed));
            }
        }
        i.seq.write_begin();
        i.flags.fetch_or(I_UNHASHED, Relaxed);
        i.seq.write_end();
        i.next.store(0, Relaxed);
    }

    /// Replace an inode's attributes with fresher ones from the backend.
    /// A changed symlink body (size or ctime moved) drops the cached body.
    pub fn refresh(&mut self, dc: &Dcache, idx: IIdx, attr: &Attr) {
        self.store_attrs(dc, idx, attr);
        // After the store (see `Dcache::refreshes`).
        dc.refreshes
            .fetch_add(1, std::sync::atomic::Ordering::Release);
    }

    /// [`Writer::refresh`] with attributes of a change made through this
    /// vfs (decided from the cache, or answered by a backend that had
    /// every gathered write first): not counted as a refresh that could
    /// set a size back.
    pub fn store_attrs(&mut self, dc: &Dcache, idx: IIdx, attr: &Attr) {
        let Some(i) = dc.inode(idx) else { return };
        let flags = i.flags.load(Relaxed);
        let link_changed = flags & I_CACHED_LINK != 0
            && (i.size.load(Relaxed) != attr.size
                || i.ctime.load(Relaxed) != attr.ctime.as_nanos());
        if i.mode.load(Relaxed) != attr.mode
            || i.uid.load(Relaxed) != attr.uid
            || i.gid.load(Relaxed) != attr.gid
            || link_changed
        {
            self.ns_dirty = true;
            self.perm_dirty = true;
        }
        i.seq.write_begin();
        if link_changed {
            self.drop_link_locked(dc, i);
        }
        store_attr(i, attr);
        i.seq.write_end();
    }

    /// The cached inode of backend node `node` of superblock `sb`.
    pub fn find_inode(&self, dc: &Dcache, sb: usize, node: u64) -> Option<IIdx> {
        let mut idx = IIdx(self.inode_buckets[self.inode_bucket(sb, node)]);
        while !idx.is_none() {
            let i = dc.inode(idx)?;
            if i.node.load(Relaxed) == node && (i.flags.load(Relaxed) >> SB_SHIFT) as usize == sb {
                return Some(idx);
            }
            idx = IIdx(i.next.load(Relaxed));
        }
        None
    }

    /// Forget that the attributes and symlink body of `idx` are current:
    /// the backend reported a change.
    pub fn invalidate_inode(&mut self, dc: &Dcache, idx: IIdx) {
        if let Some(i) = dc.inode(idx) {
            i.seq.write_begin();
            self.drop_link_locked(dc, i);
            let f = i.flags.load(Relaxed);
            i.flags
                .store((f | I_STALE) & !crate::dcache::I_COMPLETE, Relaxed);
            i.seq.write_end();
        }
    }

    /// A change went to a backend that does not wait for its server
    /// (asynchronous changes): what it does to the inode's attributes is
    /// known here — its times move to `now`, its link count by `nlink` (a
    /// name or subdirectory made or removed), its size grows to `end` (a
    /// write) — so they are kept rather than marked stale for a round
    /// trip the next stat would pay (as NFS's wcc data spares one). Stale
    /// attributes stay stale: the next stat asks the server, which has
    /// the change by then.
    /// Inode `idx` changed (renamed, a link gone) as of `now`: its ctime
    /// and link count move, its mtime does not. Nothing for attributes
    /// already stale (the backend will say).
    pub fn ctime_changed(
        &mut self,
        dc: &Dcache,
        idx: IIdx,
        now: walkfs_fsapi::Timespec,
        nlink: i32,
    ) {
        let Some(i) = dc.inode(idx) else { return };
        if i.flags.load(Relaxed) & I_STALE != 0 {
            return;
        }
        i.seq.write_begin();
        i.ctime.store(now.as_nanos(), Relaxed);
        let n = i.nlink.load(Relaxed);
        i.nlink.store(n.saturating_add_signed(nlink), Relaxed);
        i.seq.write_end();
    }

    pub fn touched(
        &mut self,
        dc: &Dcache,
        idx: IIdx,
        now: walkfs_fsapi::Timespec,
        nlink: i32,
        end: u64,
    ) {
        let Some(i) = dc.inode(idx) else { return };
        if i.flags.load(Relaxed) & I_STALE != 0 {
            return;
        }
        i.seq.write_begin();
        i.mtime.store(now.as_nanos(), Relaxed);
        i.ctime.store(now.as_nanos(), Relaxed);
        let n = i.nlink.load(Relaxed);
        i.nlink.store(n.saturating_add_signed(nlink), Relaxed);
        if i.size.load(Relaxed) < end {
            i.size.store(end, Relaxed);
            // What a 4 KiB-block file system allocates (ext4, xfs): du
            // of a tree just written reads as it will once refreshed.
            i.blocks.store(end.div_ceil(4096) * 8, Relaxed);
        }
        i.seq.write_end();
    }

    /// Set or clear [`I_COMPLETE`](crate::dcache::I_COMPLETE) on a
    /// directory's inode.
    pub fn set_complete(&mut self, dc: &Dcache, idx: IIdx, on: bool) {
        use crate::dcache::I_COMPLETE;
        let Some(i) = dc.inode(idx) else { return };
        let f = i.flags.load(Relaxed);
        if (f & I_COMPLETE != 0) == on {
            return;
        }
        i.seq.write_begin();
        i.flags
            .store(if on { f | I_COMPLETE } else { f & !I_COMPLETE }, Relaxed);
        i.seq.write_end();
    }

    /// Changes were lost: every negative dentry goes, every positive one
    /// (but the roots) must be revalidated, every inode refreshed.
    pub fn invalidate_all(&mut self, dc: &Dcache) {
        for idx in (1..self.next_dentry).map(DIdx) {
            let Some(d) = dc.dentry(idx) else { continue };
            let flags = d.flags.load(Relaxed);
            if flags & D_ALLOCATED == 0 || flags & D_HASHED == 0 {
                continue;
            }
            if flags & D_NEGATIVE != 0 {
                self.d_kill(dc, idx);
            } else {
                self.d_mark_stale(dc, idx, true);
            }
        }
        for idx in (1..self.next_inode).map(IIdx) {
            let Some(i) = dc.inode(idx) else { continue };
            if i.flags.load(Relaxed) & I_ALLOCATED != 0 {
                self.invalidate_inode(dc, idx);
            }
        }
    }

    /// Mark the attributes stale: the next stat refreshes them.
    pub fn mark_stale(&mut self, dc: &Dcache, idx: IIdx) {
        if let Some(i) = dc.inode(idx) {
            i.seq.write_begin();
            i.flags.store(i.flags.load(Relaxed) | I_STALE, Relaxed);
            i.seq.write_end();
        }
    }

    /// Cache a symlink body with its length.
    pub fn cache_link(&mut self, dc: &Dcache, idx: IIdx, body: &[u8]) {
        let Some(i) = dc.inode(idx) else { return };
        if i.flags.load(Relaxed) & I_CACHED_LINK != 0 {
            return;
        }
        let head = self.store_chunks(dc, body);
        if head == 0 {
            return;
        }
        i.seq.write_begin();
        i.rdev.store(head, Relaxed);
        i.flags
            .store(i.flags.load(Relaxed) | I_CACHED_LINK, Relaxed);
        i.seq.write_end();
    }

    /// Drop a cached symlink body (caller is inside the inode's write
    /// section).
    fn drop_link_locked(&mut self, dc: &Dcache, i: &Inode) {
        let flags = i.flags.load(Relaxed);
        if flags & I_CACHED_LINK != 0 {
            let head = i.rdev.load(Relaxed);
            i.flags.store(flags & !I_CACHED_LINK, Relaxed);
            i.rdev.store(0, Relaxed);
            self.free_chunks(dc, head);
        }
    }

    pub fn get_inode(&mut self, dc: &Dcache, idx: IIdx) {
        if let Some(i) = dc.inode(idx) {
            i.refs.fetch_add(1, AcqRel);
        }
    }

    /// Drop a reference; at zero the inode is freed and its backend node
    /// queued for `forget`.
    pub fn put_inode(&mut self, dc: &Dcache, idx: IIdx) {
        let Some(i) = dc.inode(idx) else { return };
        if i.refs.fetch_sub(1, AcqRel) != 1 {
            return;
        }
        let flags = i.flags.load(Relaxed);
        let sb = (flags >> SB_SHIFT) as usize;
        let node = i.node.load(Relaxed);
        if flags & I_UNHASHED == 0 {
            self.unhash_inode(dc, idx, self.inode_bucket(sb, node));
        }
        i.seq.write_begin();
        self.drop_link_locked(dc, i);
        i.flags.store(0, Relaxed);
        i.node.store(0, Relaxed);
        i.seq.write_end();
        i.next.store(self.free_inode, Relaxed);
        self.free_inode = idx.0;
        self.n_inodes -= 1;
        self.forgets.push((sb, node));
    }

    /// Send the queued `forget`s (call after dropping the lock).
    pub fn take_forgets(&mut self) -> Vec<(usize, u64)> {
        std::mem::take(&mut self.forgets)
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

impl Inner {
    /// A write ending at `end` was sent without waiting: grow the cached
    /// size and move the times ([`Writer::touched`]), if `ino` still
    /// holds backend node `node`.
    pub fn wrote(&self, ino: IIdx, node: u64, end: u64, now: walkfs_fsapi::Timespec) {
        let mut w = self.writer();
        if self
            .dc
            .inode(ino)
            .is_some_and(|i| i.node.load(Relaxed) == node)
        {
            w.touched(&self.dc, ino, now, 0, end);
            self.attr_gen.fetch_add(1, Release);
            self.log_attrs_of(ino, node);
        }
    }

    /// Log a change of ours to the attributes of backend node `node`,
    /// cached in inode `ino`, for the directory read-ahead: by the slot's
    /// superblock while the slot still holds the node, else as touching
    /// everything.
    pub fn log_attrs_of(&self, ino: IIdx, node: u64) {
        if !self.ra.on() {
            return;
        }
        match self.dc.inode(ino).map(|i| {
            (
                i.node.load(Relaxed),
                (i.flags.load(Relaxed) >> SB_SHIFT) as usize,
            )
        }) {
            Some((n, sb)) if n == node => self.attrs_changed(sb, node),
            _ => self.ra_log.everything(),
        }
    }

    /// Cache the attributes a change made through walkfs (chmod, chown,
    /// truncate, utimes) got back from the backend, if `ino` still holds
    /// backend node `node`. Moves the attribute generation in the same
    /// writer section: a miss that asked the backend before this change
    /// and caches its answer after it sees the move and keeps these.
    pub fn changed_attrs(&self, ino: IIdx, node: u64, attr: &Attr) {
        let mut w = self.writer();
        if self
            .dc
            .inode(ino)
            .is_some_and(|i| i.node.load(Relaxed) == node)
        {
            w.store_attrs(&self.dc, ino, attr);
        }
        w.changed();
        self.attr_gen.fetch_add(1, Release);
        self.log_attrs_of(ino, node);
    }
}

// ---- references taken without the mutex --------------------------------

impl Inner {
    /// Take a reference on dentry `d`, which a walk found under sequence
    /// count `seq`, without the writer mutex (open, chdir). False if it is
    /// being freed or is no longer what the walk found.
    ///
    /// Invariant: a count raised on a slot belongs to the dentry the walk
    /// found only if the slot's sequence count did not move (it was not
    /// freed and reused meanwhile); a freeing writer swaps the count from 0
    /// to [`DYING`] before touching the slot, so a pin that sees `DYING`
    /// backs off and one that got in first keeps the dentry alive.
    pub fn pin(&self, d: DIdx, seq: u32) -> bool {
        let Some(den) = self.dc.dentry(d) else {
            return false;
        };
        let mut r = den.refs.load(Relaxed);
        loop {
            if r == DYING {
                return false;
            }
            match den.refs.compare_exchange_weak(r, r + 1, AcqRel, Relaxed) {
                Ok(_) => break,
                Err(now) => r = now,
            }
        }
        if !self.dc.unchanged_at(d, seq) {
            self.unpin(d);
            return false;
        }
        true
    }

    /// One more reference to a dentry the caller holds one on (so it is
    /// not dying): a [`crate::Handle`]'s clone.
    pub fn repin(&self, d: DIdx) {
        if let Some(den) = self.dc.dentry(d) {
            den.refs.fetch_add(1, Relaxed);
        }
    }

    /// Drop a reference taken by [`Inner::pin`]. The writer mutex is taken
    /// only to free a removed dentry that just became unused.
    pub fn unpin(&self, d: DIdx) {
        let Some(den) = self.dc.dentry(d) else {
            return;
        };
        if den.refs.fetch_sub(1, AcqRel) == 1 && den.flags.load(Relaxed) & D_DEAD != 0 {
            let mut w = self.writer();
            w.free_if_dead(&self.dc, d);
        }
    }
}

/// Pins a context keeps for a while after `close`. Linux pays for its
/// dentry refcount with a `lockref` on a line other CPUs rarely share;
/// here two threads opening the same headers over and over would bounce
/// each dentry's line between cores on every open and close, and with it
/// the sequence count every walk through that dentry reads. So a close
/// parks its pin in its context's table instead of dropping it, and an
/// open of the same dentry, unchanged since, takes the parked pin back
/// without touching the shared count.
///
/// The table is direct-mapped by dentry index ([`PARKED`] slots): parking
/// over an occupied slot drops the pin that was there. A parked pin keeps
/// a dentry (and its inode) cached, as an open file would: at most
/// `PARKED` per context, never a removed one, all dropped when the
/// context goes. Slots are atomics: contexts may be shared by threads.
pub(crate) struct PinCache {
    /// dentry << 32 | its sequence count when parked; 0 is empty.
    slots: Box<[crate::sync::AtomicU64]>,
}

/// Pins parked per context at most (a compiler opens a few hundred
/// headers over and over).
pub(crate) const PARKED: usize = 256;

impl Default for PinCache {
    fn default() -> PinCache {
        PinCache {
            slots: (0..PARKED)
                .map(|_| crate::sync::AtomicU64::new(0))
                .collect(),
        }
    }
}

fn parked(d: DIdx, seq: u32) -> u64 {
    (u64::from(d.0) << 32) | u64::from(seq)
}

impl PinCache {
    /// A new table, registered with the writer so that removals find it.
    pub fn registered(inner: &Inner) -> Arc<PinCache> {
        let pc = Arc::new(PinCache::default());
        inner.writer().register_pins(&pc);
        pc
    }

    fn slot(&self, d: DIdx) -> &crate::sync::AtomicU64 {
        &self.slots[d.0 as usize % PARKED]
    }

    /// Take back a pin parked on `d` while its sequence count was `seq`.
    #[inline]
    pub fn take(&self, d: DIdx, seq: u32) -> bool {
        let v = parked(d, seq);
        let s = self.slot(d);
        s.load(Relaxed) == v && s.compare_exchange(v, 0, Acquire, Relaxed).is_ok()
    }

    /// Park the pin a closed file held on `d`, or drop it.
    pub fn park(&self, inner: &Inner, d: DIdx) {
        let Some(den) = inner.dc.dentry(d) else {
            return;
        };
        // A removed dentry is freed as soon as it is unused: never park it.
        let seq = match den.seq.read_begin() {
            Some(s) if den.flags.load(Relaxed) & D_DEAD == 0 => s,
            _ => return inner.unpin(d),
        };
        let v = parked(d, seq);
        let slot = self.slot(d);
        let old = slot.swap(v, AcqRel);
        if old != 0 {
            inner.unpin(DIdx((old >> 32) as u32));
        }
        // Removed meanwhile? Then `Writer::unpark` may have scanned
        // before the swap: take the pin back (unless it did, or an open
        // did). Pairs with the fence there.
        crate::sync::fence(SeqCst);
        if den.flags.load(Relaxed) & D_DEAD != 0
            && slot.compare_exchange(v, 0, AcqRel, Relaxed).is_ok()
        {
            inner.unpin(d);
        }
    }

    /// Take back the pin parked on `d`, if this table holds one (a name's
    /// removal, under the writer mutex).
    fn unpark(&self, d: DIdx) -> bool {
        let s = self.slot(d);
        let v = s.load(Acquire);
        v != 0 && (v >> 32) as u32 == d.0 && s.compare_exchange(v, 0, AcqRel, Relaxed).is_ok()
    }

    /// Drop every parked pin (the context is going).
    pub fn drain(&self, inner: &Inner) {
        for s in self.slots.iter() {
            let old = s.swap(0, AcqRel);
            if old != 0 {
                inner.unpin(DIdx((old >> 32) as u32));
            }
        }
    }
}

/// Deliver queued forgets to their backends.
pub(crate) fn send_forgets(sbs: &[Arc<dyn FileSystem>], forgets: Vec<(usize, u64)>) {
    for (sb, node) in forgets {
        if let Some(fs) = sbs.get(sb) {
            fs.forget(walkfs_fsapi::NodeId(node), 1);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
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
