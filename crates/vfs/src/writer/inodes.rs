//! The inode hash (after Linux's fs/inode.c), under the writer mutex:
//! the inode of a backend's entry found or made, attributes refreshed,
//! invalidated or marked stale, references taken and dropped, and an inode
//! freed with its backend node queued for `forget`.

use walkfs_fsapi::{Attr, Entry};

use crate::dcache::*;
use crate::sync::Ordering::{AcqRel, Relaxed};

use super::Writer;

impl Writer {
    pub fn inode_bucket_bytes(&self) -> usize {
        self.inode_buckets.len() * std::mem::size_of::<IIdx>()
    }

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
            // An attribute change reported may be one of ACL: what was
            // known of it goes (acl.rs), and with it the fast search.
            let gone = crate::dcache::I_COMPLETE | I_ACL_KNOWN | I_FASTEXEC | I_NOCAP;
            i.flags.store((f | I_STALE) & !gone, Relaxed);
            i.seq.write_end();
        }
    }

    /// Record what is known of an inode's ACLs (acl.rs): `Some((access,
    /// default))` which it has, `None` nothing known.
    pub fn set_acl_state(&mut self, dc: &Dcache, idx: IIdx, state: Option<(bool, bool)>) {
        self.set_acl_facts(dc, idx, state, false);
    }

    /// [`set_acl_state`](Self::set_acl_state), `assumed`: "none" is a
    /// guess ([`I_ACL_ASSUMED`]).
    pub fn set_acl_facts(
        &mut self,
        dc: &Dcache,
        idx: IIdx,
        state: Option<(bool, bool)>,
        assumed: bool,
    ) {
        let Some(i) = dc.inode(idx) else { return };
        let f = i.flags.load(Relaxed);
        let mut n = f & !(I_ACL_KNOWN | I_ACL | I_DEFACL | I_FASTEXEC | I_ACL_ASSUMED);
        if assumed && state.is_some() {
            n |= I_ACL_ASSUMED;
        }
        if let Some((access, default)) = state {
            n |= I_ACL_KNOWN;
            if access {
                n |= I_ACL;
            }
            if default {
                n |= I_DEFACL;
            }
        }
        if fast_exec(n, i.mode.load(Relaxed)) {
            n |= I_FASTEXEC;
        }
        // Learning or forgetting the facts changes no one's permission
        // (a change of ACL itself dirties the caches: acl.rs).
        if n != f {
            i.seq.write_begin();
            i.flags.store(n, Relaxed);
            i.seq.write_end();
        }
    }

    /// Set or clear [`I_NOCAP`].
    pub fn set_nocap(&mut self, dc: &Dcache, idx: IIdx, on: bool) {
        let Some(i) = dc.inode(idx) else { return };
        let f = i.flags.load(Relaxed);
        if (f & I_NOCAP != 0) == on {
            return;
        }
        i.seq.write_begin();
        i.flags
            .store(if on { f | I_NOCAP } else { f & !I_NOCAP }, Relaxed);
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
}
