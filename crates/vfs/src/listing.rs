//! Directories listed with their attributes (a backend's
//! [`caps::Listings::readdir_plus`](walkfs_fsapi::caps::Listings::readdir_plus)):
//! every entry is cached as a lookup of it would be — the dentry, the
//! attributes, a symlink's body — and the directory becomes complete
//! (`I_COMPLETE`: a name not cached in it does not exist). `ls -l`,
//! `find`, `git status` and module resolution then cost one round trip
//! per directory, not one per name.
//!
//! Two callers: `getdents`, and a lookup miss in a small directory that
//! is not complete yet (the whole directory costs the round trip the one
//! name would have; see [`PREFETCH_MAX_SIZE`]).

use std::sync::atomic::Ordering::{Acquire, Relaxed};

use walkfs_fsapi::{DirEntry, FileType, NodeId, Result};

use crate::dcache::{hash_name, DIdx, IIdx, InodeSnap, D_DEAD, D_NEGATIVE};
use crate::Inner;

/// A miss lists its whole directory when the directory is at most this
/// large (its size attribute: on ext4 a few hundred names per 4 KiB
/// block), so one miss never drags in a huge listing.
pub(crate) const PREFETCH_MAX_SIZE: u64 = 32 * 1024;

impl Inner {
    /// List directory `s` (dentry `d`, inode `ino`) with attributes and
    /// cache what it holds; `None` when the backend cannot list that way.
    /// With the entries comes whether every one of them was cached (no
    /// change reported meanwhile): then a name the listing lacks was
    /// absent when the backend answered.
    /// The caller holds the directory shared (dirlock.rs), as a miss
    /// does: no change of ours to its names runs between the backend's
    /// answer and its caching.
    pub(crate) fn list_plus(
        &self,
        s: &InodeSnap,
        d: DIdx,
        ino: IIdx,
    ) -> Option<Result<(Vec<DirEntry>, bool)>> {
        let fs = match self.sb(s.sb()) {
            Ok(fs) => fs,
            Err(e) => return Some(Err(e)),
        };
        let sb = s.sb();
        // A listing read ahead is as fresh as the generations it was asked
        // under (readahead.rs); one asked for now, as these.
        let (plus, gen, seen) = match self.listed_ahead(sb, s.node) {
            Some((plus, g)) => (plus, g.attrs, g.seen),
            None => {
                let gen = self.attr_gen.load(Acquire);
                let seen = self.ext_seen.load(Acquire);
                match fs.listings()?.readdir_plus(NodeId(s.node))? {
                    Ok(p) => (p, gen, seen),
                    Err(e) => return Some(Err(e)),
                }
            }
        };
        self.counters.listings.inc();
        if self.lists_ahead(sb) {
            self.fa.listed((sb, s.node), &plus);
        }
        let dc = &self.dc;
        // Subdirectories to read ahead (readahead.rs), when that is on.
        let read_ahead = self.ra.on();
        let mut subdirs = Vec::new();
        let mut w = self.writer();
        // A change reported meanwhile may be newer than the listing: use
        // it for this call, cache none of it.
        let mut keep = self.ext_seen.load(Acquire) == seen
            && dc
                .dentry(d)
                .is_some_and(|x| x.flags.load(Relaxed) & D_DEAD == 0);
        let fresh = self.attr_gen.load(Acquire) == gen;

        let links = self.sw.cache_symlinks.load(Relaxed);
        let mut out = Vec::with_capacity(plus.len());
        for p in plus {
            out.push(DirEntry {
                name: p.name.clone(),
                ino: p.entry.attr.ino,
                kind: p.entry.attr.file_type().unwrap_or(FileType::Regular),
            });
            if !keep {
                w.forgets.push((sb, p.entry.node.0));
                continue;
            }
            let hash = hash_name(&p.name);
            let existing = w.d_find(dc, d, &p.name, hash);
            let Some(i) = w.iget(dc, sb, &p.entry, fresh) else {
                w.forgets.push((sb, p.entry.node.0));
                keep = false;
                continue;
            };
            // As a miss revalidates: the same file keeps its dentry (and
            // what is cached below it), now known current; another file
            // or none takes the name over.
            let same = existing.filter(|&e| {
                dc.snap(e)
                    .is_some_and(|s| s.flags & D_NEGATIVE == 0 && s.inode() == i)
            });
            if let Some(e) = same {
                w.d_mark_stale(dc, e, false);
                w.put_inode(dc, i);
            } else if w.d_instantiate(dc, d, &p.name, hash, existing, i).is_none() {
                keep = false;
                continue;
            }
            if let (true, Some(body)) = (links, &p.link) {
                w.cache_link(dc, i, body);
            }
            if read_ahead && p.entry.attr.is_dir() {
                subdirs.push((p.entry.node.0, i));
            }
        }
        // With cache=coherent the mark only says "listed": a miss does
        // not list the directory again, but still asks for its name.
        if keep && self.list_on_miss() && fs.listings_complete() {
            w.set_complete(dc, ino, true);
        }
        drop(w);
        if keep {
            self.read_ahead(sb, s.node, &subdirs);
        }
        Some(Ok((out, keep)))
    }
}
