//! Dentries (after Linux's fs/dcache.c), under the writer mutex: made,
//! hashed and unhashed, found, turned negative or positive, moved, killed,
//! freed and evicted; and each directory's count of positive children.

use crate::dcache::*;
use crate::sync::Ordering::{AcqRel, Acquire, Relaxed, Release};

use super::{Writer, DYING};

impl Writer {
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
        if kind & D_NEGATIVE == 0 {
            self.alias.insert(inode, idx);
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
        // One reference, never dropped: never evicted.
        let idx = self.d_alone(dc, inode, D_ALLOCATED | D_DIR | extra)?;
        self.alias.insert(inode, idx);
        Some(idx)
    }

    /// A dentry for `inode` found by its file id with no name known here
    /// (Linux's disconnected dentry, for a non-directory only): its own
    /// parent, hashed nowhere, no one's alias, and dead, so that it is
    /// freed with the caller's reference (which it starts with) and no
    /// name is ever made under it. Takes over the caller's inode
    /// reference.
    pub fn d_disconnected(&mut self, dc: &Dcache, inode: IIdx) -> Option<DIdx> {
        let kind = self.type_flags(dc, inode);
        self.d_alone(dc, inode, D_ALLOCATED | D_DEAD | kind)
    }

    /// A new dentry of `inode` with `flags`, its own parent, nameless and
    /// hashed nowhere, with one reference for the caller.
    fn d_alone(&mut self, dc: &Dcache, inode: IIdx, flags: u32) -> Option<DIdx> {
        let idx = self.alloc_dentry(dc)?;
        let d = dc.dentry(idx)?;
        d.seq.write_begin();
        d.parent.store(idx.0, Relaxed);
        d.hash.store(0, Relaxed);
        d.target.store(inode.0, Relaxed);
        d.refs.store(1, Relaxed);
        for w in &d.name {
            w.store(0, Relaxed);
        }
        d.flags.store(flags, Relaxed);
        d.seq.write_end();
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

    /// A live positive dentry of `inode`: its alias, or else (a file with
    /// hard links whose aliased name went) one found by a scan of the
    /// dentries, which then becomes the alias. The scan is the rare path:
    /// only a backend walking again to such a file takes it.
    pub fn alias_of(&mut self, dc: &Dcache, inode: IIdx) -> Option<DIdx> {
        if let Some(&d) = self.alias.get(&inode) {
            return Some(d);
        }
        let found = (1..self.next_dentry).map(DIdx).find(|&idx| {
            dc.dentry(idx).is_some_and(|d| {
                let f = d.flags.load(Relaxed);
                f & (D_ALLOCATED | D_HASHED | D_NEGATIVE | D_DEAD) == D_ALLOCATED | D_HASHED
                    && d.target.load(Relaxed) == inode.0
            })
        })?;
        self.alias.insert(inode, found);
        Some(found)
    }

    fn drop_alias(&mut self, inode: IIdx, idx: DIdx) {
        if self.alias.get(&inode) == Some(&idx) {
            self.alias.remove(&inode);
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
        self.alias.insert(inode, idx);
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
                // The name just found current is the node's name now (a
                // directory has one; renamed away and back behind our
                // back, its alias may be the other name's dentry).
                if flags & D_NEGATIVE == 0 {
                    self.alias.insert(IIdx(d.target.load(Relaxed)), idx);
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
}
