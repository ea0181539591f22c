//! Pathname resolution (Linux's fs/namei.c), following path_resolution(7).
//!
//! [`Nameidata`] owns all walk state. The loop in [`Nameidata::walk`] reads
//! like the common case: for each component, check search permission on the
//! current directory and step into the child. The step is
//! [`Nameidata::step_fast`] — hash lookup with seqcount validation, loads
//! only: no lock, no reference count, no allocation, no atomic
//! read-modify-write — whenever the child is cached. Everything else is an
//! out-of-line function whose name says why it is slow: `lookup_slow` (a
//! miss: asks the backend), `follow_link`, `cross_mount`, `dotdot_slow`.
//!
//! Restart: when a validation fails in a way a step cannot repair (the
//! directory we stand in was renamed, removed or evicted under us), the
//! step returns [`Step::Restart`] and the whole call starts over under the
//! driver at its edge (step.rs). Nothing here loops.
//!
//! A miss (`lookup_slow`) first looks in the cache again, lock-free and
//! without the fast path's shortcuts; only a real miss takes the
//! directory's lock, shared (dirlock.rs), asks the backend, and takes the
//! writer mutex for the few stores that cache the answer.

use std::borrow::Cow;
use std::sync::atomic::Ordering as AtomicOrdering;

use walkfs_fsapi::{Errno, NodeId, NAME_MAX, PATH_MAX};

use crate::dcache::*;
use crate::perm::{self, Creds, MAY_EXEC};
use crate::step::{Res, Step};
use crate::sync::Ordering::Relaxed;
use crate::Inner;

/// Follow a trailing symlink.
pub(crate) const LOOKUP_FOLLOW: u32 = 1;
/// `RESOLVE_BENEATH`: `..` above the start, or an absolute path or
/// symlink, is `EXDEV` instead of being clamped at the root.
pub(crate) const LOOKUP_BENEATH: u32 = 2;
/// Stop on a mount point instead of stepping onto what is mounted there:
/// the last name of unlink, rmdir and rename is the mount point's own
/// dentry, as in Linux (permissions are those of the covered directory;
/// the operation then fails with `EBUSY`).
pub(crate) const LOOKUP_NO_CROSS: u32 = 4;

/// Linux's MAXSYMLINKS.
const MAX_SYMLINKS: u32 = 40;

thread_local! {
    /// Times this thread ran the general permission routine for a search
    /// check (what the MAY_EXEC fast path saves). Thread-local, so counting
    /// costs no shared cache line.
    static PERM_SLOW: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// How often the calling thread's walks ran the general permission check
/// (for tests and benchmarks of the `fastperm` switch).
pub fn slow_permission_checks() -> u64 {
    PERM_SLOW.with(|c| c.get())
}

/// Where a walk stands: a dentry and what was read of it under one
/// validated sequence count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Cur {
    pub d: DIdx,
    pub seq: u32,
    pub flags: u32,
    /// The inode (0 for a negative dentry, which a walk never stands on).
    pub ino: IIdx,
}

impl Cur {
    pub(crate) fn from_snap(s: DSnap) -> Cur {
        Cur {
            d: s.idx,
            seq: s.seq,
            flags: s.flags,
            ino: s.inode(),
        }
    }

    /// Where dentry `d` stands now (validated).
    pub(crate) fn of(dc: &Dcache, d: DIdx) -> Res<Cur> {
        Ok(Cur::from_snap(dc.snap(d).ok_or(Step::Restart)?))
    }
    pub fn is_dir(&self) -> bool {
        self.flags & D_DIR != 0
    }
    pub fn is_symlink(&self) -> bool {
        self.flags & D_SYMLINK != 0
    }
}

/// The last component of a path resolved for a create/remove/rename.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Last {
    Normal(Vec<u8>),
    Dot,
    DotDot,
    /// The path was `/` (or only slashes).
    Root,
}

/// What [`Nameidata::walk`] produced.
pub(crate) enum Walked {
    Found(Cur),
    Parent {
        dir: Cur,
        last: Last,
        trailing: bool,
    },
}

pub(crate) struct Nameidata<'a> {
    pub vfs: &'a Inner,
    pub creds: &'a Creds,
    /// The walk's root: `/` and absolute symlinks start here, `..` stops
    /// here.
    pub root: DIdx,
    /// Where relative paths start.
    pub start: DIdx,
    pub flags: u32,
    pub depth: u32,
    pub cur: Cur,
}

impl<'a> Nameidata<'a> {
    pub fn new(vfs: &'a Inner, creds: &'a Creds, root: DIdx, start: DIdx, flags: u32) -> Self {
        let cur = Cur {
            d: start,
            seq: 0,
            flags: 0,
            ino: IIdx::NONE,
        };
        Nameidata {
            vfs,
            creds,
            root,
            start,
            flags,
            depth: 0,
            cur,
        }
    }

    /// Resolve `path` completely (`want_parent` false) or up to its last
    /// component.
    pub fn walk(&mut self, path: &[u8], want_parent: bool) -> Res<Walked> {
        self.depth = 0;
        self.walk_path(path, want_parent)
    }

    /// Resolve `path` and return the dentry it names.
    pub fn walk_full(&mut self, path: &[u8]) -> Res<Cur> {
        match self.walk(path, false)? {
            Walked::Found(c) => Ok(c),
            Walked::Parent { .. } => Err(Errno::EIO.into()),
        }
    }

    /// Stand on dentry `d` (validated now).
    fn set_cur(&mut self, d: DIdx) -> Res<()> {
        self.cur = Cur::of(&self.vfs.dc, d)?;
        Ok(())
    }

    fn jump_root(&mut self) -> Res<()> {
        if self.flags & LOOKUP_BENEATH != 0 {
            return Err(Errno::EXDEV.into());
        }
        self.set_cur(self.root)
    }

    fn walk_path(&mut self, path: &[u8], want_parent: bool) -> Res<Walked> {
        if path.is_empty() {
            return Err(Errno::ENOENT.into());
        }
        if path.len() >= PATH_MAX {
            return Err(Errno::ENAMETOOLONG.into());
        }
        self.set_cur(self.start)?;
        if path[0] == b'/' {
            self.jump_root()?;
        }
        let mut buf: Cow<'_, [u8]> = Cow::Borrowed(path);
        let mut pos = 0;
        loop {
            let p: &[u8] = &buf;
            while pos < p.len() && p[pos] == b'/' {
                pos += 1;
            }
            if pos == p.len() {
                // Nothing but slashes left: the path named a directory.
                return Ok(if want_parent {
                    Walked::Parent {
                        dir: self.cur,
                        last: Last::Root,
                        trailing: true,
                    }
                } else {
                    Walked::Found(self.cur)
                });
            }
            let start = pos;
            while pos < p.len() && p[pos] != b'/' {
                pos += 1;
            }
            let name = &p[start..pos];
            if name.len() > NAME_MAX {
                return Err(Errno::ENAMETOOLONG.into());
            }
            let mut q = pos;
            while q < p.len() && p[q] == b'/' {
                q += 1;
            }
            let is_last = q == p.len();
            let trailing = is_last && pos < p.len();

            self.may_lookup()?;
            if want_parent && is_last {
                let last = match name {
                    b"." => Last::Dot,
                    b".." => Last::DotDot,
                    _ => Last::Normal(name.to_vec()),
                };
                return Ok(Walked::Parent {
                    dir: self.cur,
                    last,
                    trailing,
                });
            }
            let child = match name {
                b"." => self.cur,
                b".." => self.dotdot()?,
                _ => self.step(name)?,
            };
            if child.is_symlink() && (!is_last || trailing || self.flags & LOOKUP_FOLLOW != 0) {
                let rest = &p[pos..];
                let next = self.follow_link(child, rest)?;
                buf = Cow::Owned(next);
                pos = 0;
                continue;
            }
            if (!is_last || trailing) && !child.is_dir() {
                return Err(Errno::ENOTDIR.into());
            }
            self.cur = child;
            if is_last {
                return Ok(Walked::Found(child));
            }
        }
    }

    /// A 9P-style walk: each of `names` is one component, stepped in turn
    /// without following symlinks (a symlink reached before the last name
    /// ends the walk with `ENOTDIR`, as stepping into any non-directory
    /// does). Each dentry reached is pushed to `out`; a failure after the
    /// first name just ends the walk there (the caller reports a partial
    /// walk); a failure of the first name is the error.
    pub fn walk_names(&mut self, names: &[&[u8]], out: &mut Vec<Cur>) -> Res<()> {
        out.clear();
        self.set_cur(self.start)?;
        for (i, name) in names.iter().enumerate() {
            match self.walk_one_name(name) {
                Ok(c) => {
                    self.cur = c;
                    out.push(c);
                }
                Err(Step::Restart) => return Err(Step::Restart),
                Err(e) if i == 0 => return Err(e),
                Err(_) => return Ok(()),
            }
        }
        Ok(())
    }

    fn walk_one_name(&mut self, name: &[u8]) -> Res<Cur> {
        if name.is_empty() || name.contains(&b'/') || name.contains(&0) {
            return Err(Errno::EINVAL.into());
        }
        if name.len() > NAME_MAX {
            return Err(Errno::ENAMETOOLONG.into());
        }
        if !self.cur.is_dir() {
            return Err(Errno::ENOTDIR.into());
        }
        self.may_lookup()?;
        match name {
            b"." => Ok(self.cur),
            b".." => self.dotdot(),
            _ => self.step(name),
        }
    }

    /// One name in the directory we stand on, without the search
    /// permission check (the caller's walk made it) and without following.
    pub(crate) fn walk_nofollow_one(&mut self, name: &[u8]) -> Res<Cur> {
        self.step(name)
    }

    /// Search permission on the directory we stand in (Linux's
    /// `may_lookup`), asked before every component.
    #[inline(always)]
    fn may_lookup(&self) -> Res<()> {
        let vfs = self.vfs;
        if vfs.sw.fastperm.load(AtomicOrdering::Relaxed) {
            if let Some(i) = vfs.dc.inode(self.cur.ino) {
                // One load: the flag is set only while the mode grants exec
                // to everyone and no ACL decides; chmod clears it.
                if i.flags.load(Relaxed) & I_FASTEXEC != 0 {
                    return Ok(());
                }
            }
        }
        self.may_lookup_slow()
    }

    #[inline(never)]
    fn may_lookup_slow(&self) -> Res<()> {
        PERM_SLOW.with(|c| c.set(c.get() + 1));
        let vfs = self.vfs;
        let mut snap = vfs.dc.inode_snap(self.cur.ino).ok_or(Step::Restart)?;
        // A directory everyone may search goes on the fast path once it
        // is known to have no ACL: learn that once (acl.rs).
        if snap.flags & I_ACL_KNOWN == 0
            && snap.is_dir()
            && snap.mode & 0o111 == 0o111
            && vfs.sw.fastperm.load(AtomicOrdering::Relaxed)
        {
            vfs.learn_acls(&snap);
            snap = vfs.dc.inode_snap(self.cur.ino).ok_or(Step::Restart)?;
        }
        let acl = if crate::acl::needs_acl(self.creds, &snap) {
            Some(vfs.acls(&snap)?)
        } else {
            None
        };
        Ok(perm::check(
            self.creds,
            &snap,
            crate::acl::access(&acl),
            MAY_EXEC,
        )?)
    }

    /// One normal component: the fast path when the child is cached and
    /// plain, the slow path otherwise.
    #[inline(always)]
    fn step(&mut self, name: &[u8]) -> Res<Cur> {
        let hash = hash_name(name);
        if self.vfs.sw.fastpath.load(AtomicOrdering::Relaxed) {
            if let Some(r) = self.step_fast(name, hash) {
                return r;
            }
        }
        self.lookup_slow(name, hash)
    }

    /// The fast step: `Some` when answered from the cache with loads only.
    ///
    /// Invariant: the child was found while `self.cur` was still what its
    /// sequence count had been sampled from (re-checked after the lookup),
    /// so the child really was `name` in `cur` at one instant.
    #[inline(always)]
    fn step_fast(&self, name: &[u8], hash: u32) -> Option<Res<Cur>> {
        let dc = &self.vfs.dc;
        if self.cur.flags & D_DEAD != 0 {
            return None;
        }
        let c = dc.d_lookup(self.cur.d, name, hash)?;
        if !dc.unchanged(&self.cur) {
            return None;
        }
        if c.flags & D_NEGATIVE != 0 {
            return if self.vfs.neg_valid(c.target) {
                Some(Err(Errno::ENOENT.into()))
            } else {
                None
            };
        }
        if c.flags & (D_MOUNTPOINT | D_STALE) != 0 {
            return None;
        }
        Some(Ok(Cur::from_snap(c)))
    }

    /// A miss (or a mount point, an expired negative entry, a busy writer,
    /// a stale entry, or the fast path switched off): look in the cache
    /// again, then ask the backend and cache its answer.
    #[inline(never)]
    fn lookup_slow(&mut self, name: &[u8], hash: u32) -> Res<Cur> {
        let vfs = self.vfs;
        let dc = &vfs.dc;
        vfs.counters.slow_lookups.inc();
        let parent = self.cur;
        if !dc.unchanged(&parent) {
            return Err(Step::Restart);
        }
        if parent.flags & D_DEAD != 0 {
            return Err(Errno::ENOENT.into());
        }
        if let Some(r) = self.lookup_cached(parent, name, hash) {
            return r;
        }
        // A real miss. Hold the directory shared: a change of ours to its
        // names waits until the answer is cached, so the answer cannot
        // predate one (dirlock.rs). Another miss may have filled the name
        // while we waited for the lock: look once more.
        let _dir = vfs.dirs.shared(parent.ino);
        if let Some(r) = self.lookup_cached(parent, name, hash) {
            return r;
        }
        let gen = vfs.attr_gen.load(AtomicOrdering::Acquire);
        let seen = vfs.ext_seen.load(AtomicOrdering::Acquire);
        let snap = dc.inode_snap(parent.ino).ok_or(Step::Restart)?;
        let fs = vfs.sb(snap.sb())?;
        let mut complete = snap.flags & crate::dcache::I_COMPLETE != 0;
        // The directory was listed for this very miss, and the listing
        // cached (no change reported meanwhile): its word that the name
        // is absent is as fresh as a lookup's would be, in any mode.
        let mut listed_now = false;
        if !complete
            && vfs.list_on_miss()
            && snap.size <= crate::listing::PREFETCH_MAX_SIZE
            && fs.listings_complete()
        {
            if let Some(Ok((_, whole))) = vfs.list_plus(&snap, parent.d, parent.ino) {
                // The whole (small) directory for the price of this name.
                if let Some(r) = self.lookup_cached(parent, name, hash) {
                    return r;
                }
                complete = dc
                    .inode_snap(parent.ino)
                    .is_some_and(|s| s.flags & crate::dcache::I_COMPLETE != 0);
                listed_now = whole;
            }
        }
        let res = if listed_now || (complete && vfs.complete_dirs_of(&*fs, snap.node)) {
            // Every entry of the directory is cached and this is not one.
            vfs.counters.complete_misses.inc();
            Err(Errno::ENOENT)
        } else {
            vfs.counters.backend_lookups.inc();
            fs.lookup(NodeId(snap.node), name)
        };
        let mut w = vfs.writer();
        if !dc.unchanged(&parent) {
            // The directory was removed or moved meanwhile.
            if let Ok(e) = &res {
                w.forgets.push((snap.sb(), e.node.0));
            }
            return Err(Step::Restart);
        }
        let existing = w.d_find(dc, parent.d, name, hash);
        // A change reported meanwhile (cache=coherent) may be newer than
        // the answer: use it for this call, but cache it only as stale
        // (a negative not at all), so the next lookup asks again. Never a
        // restart: on a busy tree that could go on for ever.
        let raced = vfs.ext_seen.load(AtomicOrdering::Acquire) != seen;
        // Attributes changed through walkfs meanwhile are newer than the
        // ones this answer carries: an inode already cached keeps its own.
        let keep_attrs = vfs.attr_gen.load(AtomicOrdering::Acquire) != gen;
        match res {
            Ok(entry) => {
                let ino = w
                    .iget(dc, snap.sb(), &entry, !keep_attrs)
                    .ok_or(Errno::ENOMEM)?;
                // Revalidated and unchanged: keep the dentry (and the
                // subtree cached under it).
                let same = |idx: DIdx| {
                    dc.snap(idx)
                        .is_some_and(|s| s.flags & D_NEGATIVE == 0 && s.inode() == ino)
                };
                let idx = match existing {
                    Some(idx) if same(idx) => {
                        w.d_mark_stale(dc, idx, false);
                        w.put_inode(dc, ino);
                        Some(idx)
                    }
                    e => w.d_instantiate(dc, parent.d, name, hash, e, ino),
                };
                let idx = idx.ok_or(Errno::ENOMEM)?;
                let c = Cur::of(dc, idx)?;
                if raced {
                    w.d_mark_stale(dc, idx, true);
                }
                Ok(c)
            }
            Err(Errno::ENOENT) => {
                let expiry = if raced { None } else { vfs.neg_expiry() };
                match (expiry, existing) {
                    (Some(exp), Some(idx)) => w.d_set_negative(dc, idx, exp),
                    (Some(exp), None) => {
                        vfs.counters.negative_created.inc();
                        let _ = w.d_add(dc, parent.d, name, hash, IIdx::NONE, exp);
                    }
                    (None, Some(idx)) => w.d_kill(dc, idx),
                    (None, None) => {}
                }
                Err(Errno::ENOENT.into())
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The slow path's look at the cache: lock-free like the fast step,
    /// but it also crosses mount points and honours `cache=none` and
    /// stale marks. `None` when the backend must be asked.
    fn lookup_cached(&self, parent: Cur, name: &[u8], hash: u32) -> Option<Res<Cur>> {
        let vfs = self.vfs;
        let dc = &vfs.dc;
        let s = dc.d_lookup(parent.d, name, hash)?;
        if !dc.unchanged(&parent) {
            return Some(Err(Step::Restart));
        }
        if s.flags & D_NEGATIVE != 0 {
            if !vfs.neg_valid(s.target) {
                return None;
            }
            dc.touch(s.idx);
            return Some(Err(Errno::ENOENT.into()));
        }
        if vfs.sw.revalidate.load(AtomicOrdering::Relaxed) || s.flags & D_STALE != 0 {
            return None;
        }
        dc.touch(s.idx);
        if s.flags & D_MOUNTPOINT != 0 && self.flags & LOOKUP_NO_CROSS == 0 {
            return Some(self.cross_mount(s.idx));
        }
        Some(Ok(Cur::from_snap(s)))
    }

    /// Step from a mount point onto the root of what is mounted there
    /// (repeatedly, for stacked mounts).
    #[inline(never)]
    fn cross_mount(&self, mut d: DIdx) -> Res<Cur> {
        let mounts = self.vfs.mounts.read();
        while let Some(&root) = mounts.on.get(&d) {
            d = root;
        }
        Cur::of(&self.vfs.dc, d)
    }

    /// `..`: the parent, clamped at the walk's root, crossing mount roots.
    #[inline(always)]
    fn dotdot(&mut self) -> Res<Cur> {
        let cur = self.cur;
        if cur.d == self.root {
            if self.flags & LOOKUP_BENEATH != 0 {
                return Err(Errno::EXDEV.into());
            }
            return Ok(cur);
        }
        if cur.flags & D_MOUNTROOT == 0 && self.vfs.sw.fastpath.load(AtomicOrdering::Relaxed) {
            let dc = &self.vfs.dc;
            if let Some(s) = dc.snap(cur.d) {
                if s.seq == cur.seq {
                    // A child pins its parent, but nothing pins the child
                    // (the walk holds no reference): it may be evicted,
                    // its parent with it, and the slot reused, while we
                    // read. So the parent read counts only if the child
                    // is still what it was after the read (as Linux's
                    // follow_dotdot_rcu re-checks the old d_seq).
                    if let Some(p) = dc.snap(s.parent) {
                        if dc.unchanged(&cur) {
                            return Ok(Cur::from_snap(p));
                        }
                    }
                }
            }
        }
        self.dotdot_slow()
    }

    #[inline(never)]
    fn dotdot_slow(&mut self) -> Res<Cur> {
        let dc = &self.vfs.dc;
        let mut d = self.cur.d;
        {
            let mounts = self.vfs.mounts.read();
            loop {
                if d == self.root {
                    if self.flags & LOOKUP_BENEATH != 0 {
                        return Err(Errno::EXDEV.into());
                    }
                    return Cur::of(dc, d);
                }
                match mounts.under.get(&d) {
                    Some(&mp) => d = mp,
                    None => break,
                }
            }
        }
        let s = dc.snap(d).ok_or(Step::Restart)?;
        let p = Cur::of(dc, s.parent)?;
        // As in the fast case: the parent counts only if the child (and
        // so its parent link) did not change while we read it.
        if !dc.unchanged(&self.cur) || !dc.unchanged_at(d, s.seq) {
            return Err(Step::Restart);
        }
        Ok(p)
    }

    /// Follow symlink `link` met with `rest` of the path still to walk:
    /// returns the new path (body + rest) and moves to where it starts.
    #[inline(never)]
    fn follow_link(&mut self, link: Cur, rest: &[u8]) -> Res<Vec<u8>> {
        self.depth += 1;
        if self.depth > MAX_SYMLINKS {
            return Err(Errno::ELOOP.into());
        }
        let body = get_link(self.vfs, link)?;
        if body.is_empty() {
            return Err(Errno::ENOENT.into());
        }
        if body[0] == b'/' {
            self.jump_root()?;
        }
        let mut next = Vec::with_capacity(body.len() + rest.len());
        next.extend_from_slice(&body);
        next.extend_from_slice(rest);
        Ok(next)
    }
}

impl Dcache {
    /// Is the dentry a walk stands on still what it read? (The one check
    /// of it, with the reader's fence: see [`Dcache::unchanged_at`].)
    #[inline(always)]
    pub(crate) fn unchanged(&self, c: &Cur) -> bool {
        self.unchanged_at(c.d, c.seq)
    }

    /// Note that a dentry was used (the eviction clock's second chance),
    /// without a lock. Not covered by the seqcount: readers never look at
    /// this bit. An atomic OR, so it never undoes a writer's store of the
    /// other bits (a writer's plain store may drop it, which only costs
    /// the second chance); skipped when already set, so a hot dentry's
    /// line is not written by every thread that uses it.
    #[inline]
    pub(crate) fn touch(&self, idx: DIdx) {
        if let Some(d) = self.dentry(idx) {
            if d.flags.load(Relaxed) & D_REFERENCED == 0 {
                d.flags.fetch_or(D_REFERENCED, Relaxed);
            }
        }
    }
}

/// Copy a cached symlink body lock-free into `out`; `None` if it is not
/// cached or a writer is busy with the inode.
#[inline]
pub(crate) fn read_cached_link(vfs: &Inner, ino: IIdx, out: &mut [u8]) -> Option<(usize, usize)> {
    let i = vfs.dc.inode(ino)?;
    let seq = i.seq.read_begin()?;
    if i.flags.load(Relaxed) & I_CACHED_LINK == 0 {
        return None;
    }
    let head = i.rdev.load(Relaxed);
    let len = vfs.dc.chunks.get(head)?.len.load(Relaxed) as usize;
    let n = vfs.dc.read_chunks(head, len, out)?;
    if i.seq.read_retry(seq) {
        return None;
    }
    Some((n, len))
}

/// The body of symlink `link`: from the inode cache when cached (and
/// caching is on), else from the backend (and then cached).
pub(crate) fn get_link(vfs: &Inner, link: Cur) -> Res<Vec<u8>> {
    let cache = vfs.sw.cache_symlinks.load(AtomicOrdering::Relaxed);
    if cache {
        let mut buf = [0u8; PATH_MAX];
        if let Some((n, len)) = read_cached_link(vfs, link.ino, &mut buf) {
            if n == len {
                return Ok(buf[..n].to_vec());
            }
        }
    }
    let snap = vfs.dc.inode_snap(link.ino).ok_or(Step::Restart)?;
    let body = vfs.sb(snap.sb())?.readlink(NodeId(snap.node))?;
    if cache {
        let mut w = vfs.writer();
        // Only cache what belongs to the inode we read it for.
        if vfs.dc.inode(link.ino).map(|i| i.node.load(Relaxed)) == Some(snap.node) {
            w.cache_link(&vfs.dc, link.ino, &body);
        }
    }
    Ok(body)
}

impl Nameidata<'_> {
    /// Look up one child of the directory `self.cur` stands on (no
    /// permission check: the caller's walk did it).
    pub(crate) fn walk_child(&mut self, name: &[u8]) -> Res<Cur> {
        if name.len() > NAME_MAX {
            return Err(Errno::ENAMETOOLONG.into());
        }
        let dir = self.cur;
        let start = self.start;
        self.start = dir.d;
        // A relative one-name walk without following: reuse the walk so
        // cache, fast path and mounts behave identically.
        let r = self.walk_nofollow_one(name);
        self.start = start;
        r
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::tests_util::{mem_vfs, user, with_dirs};
    use crate::AT_FDCWD;

    /// Where `path` leads, walked as root from the vfs root.
    fn walk(vfs: &crate::Vfs, creds: &Creds, path: &[u8], flags: u32) -> Res<Cur> {
        let inner = &vfs.inner;
        Nameidata::new(inner, creds, inner.root, inner.root, flags).walk_full(path)
    }

    #[test]
    fn a_step_from_a_directory_moved_meanwhile_starts_over() {
        for opts in ["", "fastpath=0"] {
            let vfs = mem_vfs(opts);
            let ctx = with_dirs(&vfs, &["/a", "/a/b"]);
            let root = Creds::root();
            let a = walk(&vfs, &root, b"/a", 0).expect("walk");
            ctx.renameat2(AT_FDCWD, b"/a", AT_FDCWD, b"/c", 0)
                .expect("rename");
            // A walk standing on /a as it was must not step on: its view
            // of the directory is stale.
            let inner = &vfs.inner;
            let mut nd = Nameidata::new(inner, &root, inner.root, a.d, 0);
            nd.cur = a;
            assert_eq!(nd.walk_child(b"b"), Err(Step::Restart), "{opts}");
            // From the path, the driver's next attempt gets the answer.
            assert!(walk(&vfs, &root, b"/c/b", 0).is_ok());
        }
    }

    #[test]
    fn misses_ask_the_backend_once_then_the_cache_answers_lock_free() {
        let vfs = mem_vfs("fastpath=0");
        let ctx = with_dirs(&vfs, &["/d"]);
        let root = Creds::root();
        let before = vfs.cache_stats();
        for _ in 0..5 {
            assert_eq!(
                walk(&vfs, &root, b"/d/missing", 0),
                Err(Step::Err(Errno::ENOENT))
            );
            assert!(walk(&vfs, &root, b"/d", 0).is_ok());
        }
        let after = vfs.cache_stats();
        // One answer for the miss: the backend's, or (/d was made here,
        // so its entries are all known) the complete directory's.
        assert_eq!(
            after.backend_lookups - before.backend_lookups + after.complete_misses
                - before.complete_misses,
            1
        );
        assert_eq!(after.negative_created - before.negative_created, 1);
        assert!(after.slow_lookups - before.slow_lookups >= 10);
        // The negative entry turns positive when the name is made.
        ctx.mkdirat(AT_FDCWD, b"/d/missing", 0o700).expect("mkdir");
        assert!(walk(&vfs, &root, b"/d/missing", 0).is_ok());
    }

    #[test]
    fn dotdot_stops_at_the_root_and_beneath_refuses_to_climb() {
        let vfs = mem_vfs("");
        with_dirs(&vfs, &["/a"]);
        let root = Creds::root();
        let top = walk(&vfs, &root, b"/", 0).expect("root");
        assert_eq!(walk(&vfs, &root, b"/a/../..", 0).map(|c| c.d), Ok(top.d));
        let inner = &vfs.inner;
        let a = walk(&vfs, &root, b"/a", 0).expect("a");
        let mut nd = Nameidata::new(inner, &root, a.d, a.d, LOOKUP_BENEATH);
        assert!(matches!(
            nd.walk(b"..", false),
            Err(Step::Err(Errno::EXDEV))
        ));
        let mut nd = Nameidata::new(inner, &root, a.d, a.d, LOOKUP_BENEATH);
        assert!(matches!(
            nd.walk(b"/a", false),
            Err(Step::Err(Errno::EXDEV))
        ));
    }

    #[test]
    fn symlinks_are_followed_up_to_forty_deep() {
        let vfs = mem_vfs("");
        let ctx = with_dirs(&vfs, &["/t"]);
        ctx.symlinkat(b"l0", AT_FDCWD, b"/loop").expect("symlink");
        ctx.symlinkat(b"loop", AT_FDCWD, b"/l0").expect("symlink");
        let root = Creds::root();
        assert_eq!(
            walk(&vfs, &root, b"/loop", LOOKUP_FOLLOW),
            Err(Step::Err(Errno::ELOOP))
        );
        // A chain of 40 resolves; 41 does not.
        let mut prev = b"t".to_vec();
        for i in 0..41 {
            let name = format!("/c{i}");
            ctx.symlinkat(&prev, AT_FDCWD, name.as_bytes())
                .expect("symlink");
            prev = name.into_bytes();
        }
        assert!(walk(&vfs, &root, b"/c39", LOOKUP_FOLLOW).is_ok_and(|c| c.is_dir()));
        assert_eq!(
            walk(&vfs, &root, b"/c40", LOOKUP_FOLLOW),
            Err(Step::Err(Errno::ELOOP))
        );
    }

    #[test]
    fn walk_names_reports_a_partial_walk_and_the_first_error() {
        let vfs = mem_vfs("");
        with_dirs(&vfs, &["/a", "/a/b"]);
        let root = Creds::root();
        let inner = &vfs.inner;
        let mut out = Vec::new();
        let mut nd = Nameidata::new(inner, &root, inner.root, inner.root, 0);
        assert_eq!(nd.walk_names(&[b"a", b"b", b"nope"], &mut out), Ok(()));
        assert_eq!(out.len(), 2);
        let mut nd = Nameidata::new(inner, &root, inner.root, inner.root, 0);
        assert_eq!(
            nd.walk_names(&[b"nope", b"b"], &mut out),
            Err(Step::Err(Errno::ENOENT))
        );
        let mut nd = Nameidata::new(inner, &root, inner.root, inner.root, 0);
        assert_eq!(
            nd.walk_names(&[b"a/b"], &mut out),
            Err(Step::Err(Errno::EINVAL))
        );
    }

    #[test]
    fn search_permission_is_checked_on_every_directory() {
        let vfs = mem_vfs("");
        let ctx = with_dirs(&vfs, &["/open", "/open/shut", "/open/shut/in"]);
        ctx.fchmodat(AT_FDCWD, b"/open/shut", 0o700, 0)
            .expect("chmod");
        let user = user(1000, 1000, &[]);
        assert!(walk(&vfs, &user, b"/open", 0).is_ok());
        assert_eq!(
            walk(&vfs, &user, b"/open/shut/in", 0),
            Err(Step::Err(Errno::EACCES))
        );
    }
}
