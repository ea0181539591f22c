//! The dentry and inode caches.
//!
//! # Concurrency
//! Readers (the walk's fast path, the slow path's first look, `fstat`,
//! `readlink`) take no lock: they read dentries and inodes through their
//! [`SeqCount`]s, and every field a reader looks at is an atomic loaded
//! `Relaxed`. Writers hold the writer mutex (writer.rs) for the few stores
//! of a cache update, never across a backend call, and bracket each change
//! of a dentry or inode with its sequence count. Memory is type-stable ([`Arena`]), so a
//! reader holding a stale index reads a valid, if reused, slot and its
//! sequence check fails.
//!
//! Lock order: see dirlock.rs. No vfs lock but directory locks is held
//! while calling a backend; backends take their own locks below them and
//! never call back up.
//!
//! # Layout
//! A dentry is 44 bytes: names of up to 16 bytes live inline, longer ones in
//! a chain of [`Chunk`]s. An inode is 96 bytes. Hash chains are intrusive
//! (`next` indices), bucket heads one `u32` each.

use crate::arena::Arena;
use crate::seqlock::SeqCount;
use crate::sync::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::atomic::AtomicI64;

use walkfs_fsapi::Attr;

/// Index of a dentry slot; 0 is none. Stored raw in the atomics a
/// lock-free reader loads (`parent`, a bucket head), typed everywhere else.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(transparent)]
pub(crate) struct DIdx(pub u32);

/// Index of an inode slot; 0 is none.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(transparent)]
pub(crate) struct IIdx(pub u32);

impl DIdx {
    pub fn is_none(self) -> bool {
        self.0 == 0
    }
}

impl IIdx {
    pub const NONE: IIdx = IIdx(0);
    pub fn is_none(self) -> bool {
        self.0 == 0
    }
}

// Dentry flag bits (low 24 bits; the name length lives in the top 8).
/// The slot holds a live dentry that can be found through its hash chain.
pub(crate) const D_HASHED: u32 = 1 << 0;
/// Known not to exist; `target` holds the expiry instead of an inode.
pub(crate) const D_NEGATIVE: u32 = 1 << 1;
pub(crate) const D_DIR: u32 = 1 << 2;
pub(crate) const D_SYMLINK: u32 = 1 << 3;
/// Something is mounted here: the fast path hands over to the slow path.
pub(crate) const D_MOUNTPOINT: u32 = 1 << 4;
/// Root of a mounted file system: `..` must cross to the mount point.
pub(crate) const D_MOUNTROOT: u32 = 1 << 5;
/// Seen since the eviction clock last passed (set by the slow path only).
pub(crate) const D_REFERENCED: u32 = 1 << 6;
/// Removed (rmdir, rename over it): lookups under it find nothing.
pub(crate) const D_DEAD: u32 = 1 << 7;
/// A slow-path-only marker: the dentry is in use (slot allocated).
pub(crate) const D_ALLOCATED: u32 = 1 << 8;
/// The backend reported that this name may now mean something else (a
/// change made behind the cache's back): the fast path treats it as a miss
/// and the slow path asks the backend before using it.
pub(crate) const D_STALE: u32 = 1 << 9;
const NAME_LEN_SHIFT: u32 = 24;

/// Negative-dentry expiry meaning "until evicted or invalidated".
pub(crate) const EXPIRY_FOREVER: u32 = u32::MAX;

/// Names up to this many bytes are stored inline in the dentry.
pub(crate) const INLINE_NAME: usize = 16;

#[derive(Default)]
pub(crate) struct Dentry {
    pub seq: SeqCount,
    /// `D_*` bits | name length << 24.
    pub flags: AtomicU32,
    pub parent: AtomicU32,
    /// Hash of the name (see [`hash_name`]).
    pub hash: AtomicU32,
    /// Next dentry in the hash chain, or in the free list.
    pub next: AtomicU32,
    /// The inode; for a negative dentry its expiry in ms since the vfs
    /// epoch ([`EXPIRY_FOREVER`] for never).
    pub target: AtomicU32,
    /// References: cached children, open files, working directories,
    /// mounts. Changed under the writer lock only.
    pub refs: AtomicU32,
    /// The name, packed little-endian and zero-padded when at most
    /// [`INLINE_NAME`] bytes; otherwise `name[0]` is the first [`Chunk`].
    pub name: [AtomicU32; 4],
}

// Inode flag bits (low 16 bits; the superblock index lives in the top 16).
pub(crate) const I_ALLOCATED: u32 = 1 << 0;
/// Everyone may search this directory and nothing but the mode bits
/// decides (Linux's IOP_FASTPERM_MAY_EXEC): the walk skips the permission
/// routine.
pub(crate) const I_FASTEXEC: u32 = 1 << 1;
/// The symlink body is cached in `rdev` (first chunk) with its length.
pub(crate) const I_CACHED_LINK: u32 = 1 << 2;
/// The attributes may be out of date (a write, a link count change): the
/// next stat asks the backend.
pub(crate) const I_STALE: u32 = 1 << 3;
/// An access ACL decides access (the backend said so, or the vfs read
/// it: acl.rs): never take the fast permission path.
pub(crate) const I_ACL: u32 = 1 << 4;
/// A directory every entry of which is in the dcache (it was made empty
/// here, and no positive child has been evicted since): a name not found
/// in it does not exist, and a miss needs no backend lookup. Cleared by
/// an eviction of a child and by any change reported behind our back;
/// used to deny a name only while negative entries never expire
/// (`negtimeout=-1`, the same promise for every name) and not with
/// `cache=coherent`, where it only spares a miss another listing.
pub(crate) const I_COMPLETE: u32 = 1 << 5;
/// Out of the (superblock, node) hash: a later file was found under the
/// same backend node (another birth time), and took the node's place;
/// this inode lives on for the names and open files it still has.
pub(crate) const I_UNHASHED: u32 = 1 << 6;
/// The vfs knows this inode's ACLs (acl.rs): `I_ACL` and `I_DEFACL` say
/// which it has. Without it, "has no ACL" is not known, and `I_FASTEXEC`
/// is never set.
pub(crate) const I_ACL_KNOWN: u32 = 1 << 7;
/// A directory with a default ACL, which its new nodes inherit.
pub(crate) const I_DEFACL: u32 = 1 << 8;
/// Known to have no `security.capability`: the kernel asks before each
/// write and chown of a file it has not seen without one, and a file
/// made here, or asked about once, is answered without the backend.
/// Cleared by a change of its attributes, ours or reported.
pub(crate) const I_NOCAP: u32 = 1 << 9;
/// With `I_ACL_KNOWN`: "no ACL" assumed, not asked (a server's file,
/// where the server decides: acl.rs). A create in such a directory asks
/// first, since a default ACL decides the new node's mode and ACL.
pub(crate) const I_ACL_ASSUMED: u32 = 1 << 10;
pub(crate) const SB_SHIFT: u32 = 16;

#[derive(Default)]
pub(crate) struct Inode {
    pub seq: SeqCount,
    /// `I_*` bits | superblock index << 16.
    pub flags: AtomicU32,
    pub mode: AtomicU32,
    pub uid: AtomicU32,
    pub gid: AtomicU32,
    pub nlink: AtomicU32,
    /// Dentries and open files referring to this inode (writer lock only).
    pub refs: AtomicU32,
    /// Next inode in the (superblock, node) hash chain or the free list.
    pub next: AtomicU32,
    /// Device number (major << 20 | minor) of a device node; first chunk of
    /// the cached body of a symlink.
    pub rdev: AtomicU32,
    pub ino: AtomicU64,
    pub size: AtomicU64,
    pub blocks: AtomicU64,
    /// The backend's `NodeId`.
    pub node: AtomicU64,
    pub atime: AtomicI64,
    pub mtime: AtomicI64,
    pub ctime: AtomicI64,
    /// Birth time (ns; 0: unknown). Set once known and never changed:
    /// a file of the same backend node born at another time is another
    /// file, and gets another inode (`Writer::iget`).
    pub btime: AtomicI64,
}

/// 56 bytes of a long name or a symlink body; chains of these hold
/// anything longer. `len` is the total length, valid in a chain's head.
#[derive(Default)]
pub(crate) struct Chunk {
    pub next: AtomicU32,
    pub len: AtomicU32,
    pub data: [AtomicU64; 7],
}
pub(crate) const CHUNK_BYTES: usize = 56;

/// A name hash good enough for a hash table (not for an adversary choosing
/// names to collide: chains are bounded by the slow path's search anyway).
#[inline(always)]
pub(crate) fn hash_name(name: &[u8]) -> u32 {
    let mut h: u64 = 0x9E37_79B9_7F4A_7C15 ^ name.len() as u64;
    let mut chunks = name.chunks_exact(8);
    for c in &mut chunks {
        let w = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        h = (h ^ w).wrapping_mul(0x1000_0000_01B3).rotate_left(29);
    }
    let mut tail = 0u64;
    for (i, &b) in chunks.remainder().iter().enumerate() {
        tail |= (b as u64) << (8 * i);
    }
    h = (h ^ tail).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (h >> 32) as u32 ^ h as u32
}

/// Pack a short name into the four inline words.
#[inline(always)]
pub(crate) fn pack_name(name: &[u8]) -> [u32; 4] {
    let mut w = [0u32; 4];
    for (i, &b) in name.iter().enumerate().take(INLINE_NAME) {
        w[i / 4] |= (b as u32) << (8 * (i % 4));
    }
    w
}

#[inline(always)]
pub(crate) fn bucket_of(parent: DIdx, hash: u32, mask: u32) -> usize {
    (hash ^ parent.0.wrapping_mul(0x9E37_79B1)) as usize & mask as usize
}

pub(crate) fn name_len(flags: u32) -> usize {
    (flags >> NAME_LEN_SHIFT) as usize
}

/// A consistent copy of an inode's attributes.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct InodeSnap {
    pub flags: u32,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub nlink: u32,
    pub rdev: u32,
    pub ino: u64,
    pub size: u64,
    pub blocks: u64,
    pub node: u64,
    pub atime: i64,
    pub mtime: i64,
    pub ctime: i64,
    pub btime: i64,
}

impl InodeSnap {
    /// The cached attributes, as a backend reports them.
    pub fn attr(&self) -> Attr {
        Attr {
            ino: self.ino,
            mode: self.mode,
            nlink: self.nlink,
            uid: self.uid,
            gid: self.gid,
            rdev: u64::from(self.rdev),
            size: self.size,
            blocks: self.blocks,
            atime: walkfs_fsapi::Timespec::from_nanos(self.atime),
            mtime: walkfs_fsapi::Timespec::from_nanos(self.mtime),
            ctime: walkfs_fsapi::Timespec::from_nanos(self.ctime),
            btime: walkfs_fsapi::Timespec::from_nanos(self.btime),
            has_acl: self.flags & I_ACL != 0,
        }
    }
    /// The attributes were last known true (not marked stale by a write
    /// or a change report).
    pub fn fresh(&self) -> bool {
        self.flags & I_STALE == 0
    }
    pub fn sb(&self) -> usize {
        (self.flags >> SB_SHIFT) as usize
    }
    pub fn is_dir(&self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFDIR
    }
    pub fn is_symlink(&self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFLNK
    }
    pub fn is_reg(&self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFREG
    }
}

/// Encode a 64-bit `dev_t` in the 32 bits the inode keeps.
pub(crate) fn dev_to_u32(dev: u64) -> u32 {
    let (ma, mi) = (libc::major(dev), libc::minor(dev));
    ((ma & 0xfff) << 20) | (mi & 0xfffff)
}

pub(crate) fn dev_from_u32(v: u32) -> (u32, u32) {
    (v >> 20, v & 0xfffff)
}

/// The shared, lock-free-readable part of the caches.
pub(crate) struct Dcache {
    pub dentries: Arena<Dentry>,
    pub inodes: Arena<Inode>,
    pub chunks: Arena<Chunk>,
    pub buckets: Box<[AtomicU32]>,
    pub mask: u32,
    /// Attribute refreshes from a backend so far, counted after each is
    /// stored (writer.rs): a file's gathered writes compare it with the
    /// count when they began, to know whether its cached size may have
    /// been set back under them (writeback.rs).
    pub refreshes: std::sync::atomic::AtomicU64,
}

/// What a successful lock-free dentry read gives: a validated snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DSnap {
    pub idx: DIdx,
    pub seq: u32,
    pub flags: u32,
    /// The inode, or a negative dentry's expiry (see [`Dentry::target`]).
    pub target: u32,
    pub parent: DIdx,
}

impl DSnap {
    /// The inode of a positive dentry ([`IIdx::NONE`] for a negative one).
    pub fn inode(&self) -> IIdx {
        if self.flags & D_NEGATIVE != 0 {
            IIdx::NONE
        } else {
            IIdx(self.target)
        }
    }
}

impl Dcache {
    pub fn new(max_dentries: u32) -> Dcache {
        let nb = (max_dentries as usize).next_power_of_two().max(1024);
        // Room for pinned dentries above the soft bound.
        let cap = max_dentries
            .saturating_add(max_dentries / 4)
            .saturating_add(4096);
        Dcache {
            dentries: Arena::new(cap),
            inodes: Arena::new(cap),
            chunks: Arena::new(cap),
            buckets: (0..nb).map(|_| AtomicU32::new(0)).collect(),
            mask: (nb - 1) as u32,
            refreshes: std::sync::atomic::AtomicU64::new(0),
        }
    }

    #[inline(always)]
    pub fn dentry(&self, idx: DIdx) -> Option<&Dentry> {
        self.dentries.get(idx.0)
    }

    #[inline(always)]
    pub fn inode(&self, idx: IIdx) -> Option<&Inode> {
        self.inodes.get(idx.0)
    }

    /// Is dentry `idx` still what a reader saw under sequence count `seq`
    /// (not changed, freed or reused since)? The reader's half of the
    /// seqlock protocol, fence included: every "is this still what I
    /// walked to" question goes through here.
    #[inline(always)]
    pub fn unchanged_at(&self, idx: DIdx, seq: u32) -> bool {
        self.dentry(idx).is_some_and(|d| !d.seq.read_retry(seq))
    }

    /// A validated snapshot of dentry `idx`; `None` while a writer is
    /// busy with it (the caller starts over, and the driver in step.rs
    /// decides how long to wait: one retry policy).
    #[inline(always)]
    pub fn snap(&self, idx: DIdx) -> Option<DSnap> {
        self.snap_once(idx)
    }

    #[inline(always)]
    fn snap_once(&self, idx: DIdx) -> Option<DSnap> {
        let d = self.dentry(idx)?;
        let seq = d.seq.read_begin()?;
        let flags = d.flags.load(Relaxed);
        let target = d.target.load(Relaxed);
        let parent = DIdx(d.parent.load(Relaxed));
        if d.seq.read_retry(seq) {
            return None;
        }
        Some(DSnap {
            idx,
            seq,
            flags,
            target,
            parent,
        })
    }

    /// Find the child `name` of `parent` in the hash table, lock-free.
    /// `None` means "not found here" (a miss, or a writer in the way): the
    /// caller asks the slow path, which is authoritative.
    ///
    /// Invariant relied on: a dentry's (parent, hash, name) only change
    /// inside its seqcount write section, so a snapshot that validates
    /// matched the name at one instant.
    #[inline(always)]
    pub fn d_lookup(&self, parent: DIdx, name: &[u8], hash: u32) -> Option<DSnap> {
        let packed = if name.len() <= INLINE_NAME {
            Some(pack_name(name))
        } else {
            None
        };
        let mut idx = DIdx(
            self.buckets[bucket_of(parent, hash, self.mask)].load(crate::sync::Ordering::Acquire),
        );
        // Chains are short; a chain longer than this is being rewritten
        // under us (or is pathological): let the slow path decide.
        let mut budget = 32;
        while !idx.is_none() && budget > 0 {
            budget -= 1;
            let d = self.dentry(idx)?;
            let next = DIdx(d.next.load(Relaxed));
            if d.hash.load(Relaxed) == hash && d.parent.load(Relaxed) == parent.0 {
                let seq = d.seq.read_begin()?;
                let flags = d.flags.load(Relaxed);
                let target = d.target.load(Relaxed);
                let ok = flags & D_HASHED != 0
                    && d.parent.load(Relaxed) == parent.0
                    && d.hash.load(Relaxed) == hash
                    && name_len(flags) == name.len()
                    && match &packed {
                        Some(w) => {
                            d.name[0].load(Relaxed) == w[0]
                                && d.name[1].load(Relaxed) == w[1]
                                && d.name[2].load(Relaxed) == w[2]
                                && d.name[3].load(Relaxed) == w[3]
                        }
                        None => self.chunks_equal(d.name[0].load(Relaxed), name),
                    };
                if d.seq.read_retry(seq) {
                    return None;
                }
                if ok {
                    return Some(DSnap {
                        idx,
                        seq,
                        flags,
                        target,
                        parent,
                    });
                }
            }
            idx = next;
        }
        None
    }

    /// Compare a chunk chain with `name` (lock-free; the caller validates).
    fn chunks_equal(&self, mut c: u32, name: &[u8]) -> bool {
        for part in name.chunks(CHUNK_BYTES) {
            let Some(ch) = self.chunks.get(c) else {
                return false;
            };
            for (i, w) in part.chunks(8).enumerate() {
                let mut b = [0u8; 8];
                b[..w.len()].copy_from_slice(w);
                if ch.data[i].load(Relaxed) != u64::from_le_bytes(b) {
                    return false;
                }
            }
            c = ch.next.load(Relaxed);
        }
        true
    }

    /// Copy a chunk chain of `len` bytes into `out` (at most `out.len()`
    /// bytes). Lock-free; the caller validates the owner's seqcount.
    #[inline]
    pub fn read_chunks(&self, mut c: u32, len: usize, out: &mut [u8]) -> Option<usize> {
        let n = len.min(out.len());
        let mut off = 0;
        while off < n {
            let ch = self.chunks.get(c)?;
            for w in &ch.data {
                if off >= n {
                    break;
                }
                let bytes = w.load(Relaxed).to_le_bytes();
                let k = (n - off).min(8);
                out[off..off + k].copy_from_slice(&bytes[..k]);
                off += k;
            }
            c = ch.next.load(Relaxed);
        }
        Some(n)
    }

    /// A consistent copy of inode `idx`'s attributes, waiting out a writer
    /// for a bounded time; `None` if one stayed busy with it (or `idx` is
    /// out of range).
    #[inline(always)]
    pub fn inode_snap(&self, idx: IIdx) -> Option<InodeSnap> {
        if let Some(s) = self.inode_snap_once(idx) {
            return Some(s);
        }
        self.inode_snap_spin(idx)
    }

    /// A writer is busy with the inode (its critical section is a few
    /// stores, but it may have been preempted in it): wait it out rather
    /// than fail the caller's system call.
    #[inline(never)]
    fn inode_snap_spin(&self, idx: IIdx) -> Option<InodeSnap> {
        self.inode(idx)?;
        let mut b = crate::step::Backoff::new();
        while b.snooze() {
            if let Some(s) = self.inode_snap_once(idx) {
                return Some(s);
            }
        }
        None
    }

    #[inline(always)]
    fn inode_snap_once(&self, idx: IIdx) -> Option<InodeSnap> {
        let i = self.inode(idx)?;
        let seq = i.seq.read_begin()?;
        let s = InodeSnap {
            flags: i.flags.load(Relaxed),
            mode: i.mode.load(Relaxed),
            uid: i.uid.load(Relaxed),
            gid: i.gid.load(Relaxed),
            nlink: i.nlink.load(Relaxed),
            rdev: i.rdev.load(Relaxed),
            ino: i.ino.load(Relaxed),
            size: i.size.load(Relaxed),
            blocks: i.blocks.load(Relaxed),
            node: i.node.load(Relaxed),
            atime: i.atime.load(Relaxed),
            mtime: i.mtime.load(Relaxed),
            ctime: i.ctime.load(Relaxed),
            btime: i.btime.load(Relaxed),
        };
        if i.seq.read_retry(seq) {
            return None;
        }
        Some(s)
    }

    /// The name of dentry `idx` (slow path; caller holds the writer lock or
    /// tolerates a stale answer).
    pub fn name_of(&self, idx: DIdx) -> Vec<u8> {
        let Some(d) = self.dentry(idx) else {
            return Vec::new();
        };
        let len = name_len(d.flags.load(Relaxed));
        if len <= INLINE_NAME {
            let mut out = Vec::with_capacity(len);
            for i in 0..len {
                out.push((d.name[i / 4].load(Relaxed) >> (8 * (i % 4))) as u8);
            }
            out
        } else {
            let mut out = vec![0u8; len];
            let n = self
                .read_chunks(d.name[0].load(Relaxed), len, &mut out)
                .unwrap_or(0);
            out.truncate(n);
            out
        }
    }
}

/// Fill the attribute fields of `ino` from `attr` (writer lock held, inside
/// the inode's write section).
/// `I_FASTEXEC`'s condition: a directory everyone may search, known to
/// have no access ACL.
pub(crate) fn fast_exec(flags: u32, mode: u32) -> bool {
    flags & (I_ACL_KNOWN | I_ACL) == I_ACL_KNOWN
        && mode & libc::S_IFMT == libc::S_IFDIR
        && mode & 0o111 == 0o111
}

pub(crate) fn store_attr(ino: &Inode, attr: &Attr) {
    ino.mode.store(attr.mode, Relaxed);
    ino.uid.store(attr.uid, Relaxed);
    ino.gid.store(attr.gid, Relaxed);
    ino.nlink.store(attr.nlink, Relaxed);
    ino.ino.store(attr.ino, Relaxed);
    ino.size.store(attr.size, Relaxed);
    ino.blocks.store(attr.blocks, Relaxed);
    ino.atime.store(attr.atime.as_nanos(), Relaxed);
    ino.mtime.store(attr.mtime.as_nanos(), Relaxed);
    ino.ctime.store(attr.ctime.as_nanos(), Relaxed);
    // A backend that could not tell this time (a listing without it)
    // leaves the birth time known.
    let born = attr.btime.as_nanos();
    if born != 0 {
        ino.btime.store(born, Relaxed);
    }
    let mut flags = ino.flags.load(Relaxed) & !(I_FASTEXEC | I_STALE);
    // A backend that tells of an access ACL the vfs did not know of
    // makes what it knew void; one that tells of none proves nothing
    // (most cannot tell: acl.rs asks).
    if attr.has_acl && flags & I_ACL == 0 {
        flags = (flags & !I_ACL_KNOWN) | I_ACL;
    }
    if fast_exec(flags, attr.mode) {
        flags |= I_FASTEXEC;
    }
    if !attr.is_symlink() && flags & I_CACHED_LINK == 0 {
        ino.rdev.store(dev_to_u32(attr.rdev), Relaxed);
    }
    ino.flags.store(flags, Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_fit_the_memory_budget() {
        assert_eq!(std::mem::size_of::<Dentry>(), 44);
        assert_eq!(std::mem::size_of::<Inode>(), 104);
        assert_eq!(std::mem::size_of::<Chunk>(), 64);
    }

    #[test]
    fn packing_and_hashing() {
        assert_eq!(pack_name(b"ab"), [0x6261, 0, 0, 0]);
        assert_ne!(hash_name(b"usr"), hash_name(b"lib"));
        assert_eq!(
            hash_name(b"x86_64-linux-gnu"),
            hash_name(b"x86_64-linux-gnu")
        );
        assert_eq!(dev_from_u32(dev_to_u32(libc::makedev(8, 1))), (8, 1));
    }
}
