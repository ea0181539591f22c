//! Whole-path cache: what a full walk of (start, credentials, flags, path)
//! resolved to, remembered until anything that could change the answer
//! happens.
//!
//! Validity. Every entry carries the namespace generation (`Inner::ns_gen`)
//! read *before* the walk that filled it. Every change to names,
//! permissions, ownership, mounts or switches bumps the generation *after*
//! the dentry cache reflects it, so an entry is used only by a call that
//! started before any change the walk might have missed. A positive entry
//! also names its dentry with the dentry's sequence count, re-checked on
//! use, so an evicted or reused dentry is never returned.
//!
//! Concurrency. Readers use the slot's seqcount and loads only. Writers
//! (any thread, after a walk) claim a slot with one compare-and-swap on its
//! count; a writer that loses the race simply does not fill. Fills happen on
//! misses only, never on the hit path.

use crate::dcache::{DIdx, IIdx};
use crate::seqlock::SeqCount;
use crate::sync::{AtomicU32, AtomicU64, Ordering::Relaxed};

/// Paths longer than this are never cached.
pub(crate) const MAX_PATH: usize = 128;
const WORDS: usize = MAX_PATH / 8;
/// Slots of a cache in front of a full-sized dcache (fewer for a small one).
const MAX_SLOTS: usize = 4096;

/// An error result is stored with this in `res`.
const ERR_MARK: u64 = u64::MAX;

#[derive(Default)]
struct Slot {
    seq: SeqCount,
    len: AtomicU32,
    hash: AtomicU64,
    gen: AtomicU64,
    key: AtomicU64,
    /// Positive: dentry << 32 | its seqcount. Negative: [`ERR_MARK`].
    res: AtomicU64,
    /// Positive: inode << 32 | dentry flags. Negative: the errno.
    res2: AtomicU64,
    path: [AtomicU64; WORDS],
}

/// What a cached walk resolved to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cached {
    /// dentry, its seqcount, its flags, its inode.
    Found {
        d: DIdx,
        seq: u32,
        flags: u32,
        ino: IIdx,
    },
    Errno(i32),
}

pub(crate) struct PathCache {
    slots: Box<[Slot]>,
}

/// The last, partial word of a path (zero-padded), without a memcpy.
#[inline(always)]
fn tail(rem: &[u8]) -> u64 {
    let mut w = 0u64;
    for (i, &b) in rem.iter().enumerate() {
        w |= (b as u64) << (8 * i);
    }
    w
}

#[inline(always)]
fn le(c: &[u8]) -> u64 {
    u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]])
}

/// A 64-bit hash of the key and the path, a word at a time.
#[inline(always)]
pub(crate) fn hash(key: u64, path: &[u8]) -> u64 {
    let mut h = key ^ (path.len() as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let mut chunks = path.chunks_exact(8);
    for c in &mut chunks {
        h = (h ^ le(c))
            .wrapping_mul(0x5851_F42D_4C95_7F2D)
            .rotate_left(31);
    }
    let rem = chunks.remainder();
    if !rem.is_empty() {
        h = (h ^ tail(rem))
            .wrapping_mul(0x5851_F42D_4C95_7F2D)
            .rotate_left(31);
    }
    h ^ (h >> 29)
}

/// The key of a walk: where it starts, who walks, how.
#[inline(always)]
pub(crate) fn key(start: DIdx, cred: u32, flags: u32) -> u64 {
    ((start.0 as u64) << 32) | ((cred as u64 & 0xff_ffff) << 8) | (flags as u64 & 0xff)
}

impl PathCache {
    /// A cache sized for a dcache of `max_dentries`: a slot per 64
    /// dentries, 64 to 4096 slots (a power of two, indexed by mask).
    pub fn new(max_dentries: u32) -> PathCache {
        let n = (max_dentries as usize / 64)
            .next_power_of_two()
            .clamp(64, MAX_SLOTS);
        PathCache {
            slots: (0..n).map(|_| Slot::default()).collect(),
        }
    }

    /// The two slots a hash may live in (2-way set associative: the
    /// paths of one build collide in a direct-mapped table often enough
    /// that two threads replaying them would refill each other's slots,
    /// and every refill writes a line the other thread reads).
    #[inline(always)]
    fn ways(&self, h: u64) -> (&Slot, &Slot) {
        // In bounds: the length is a power of two, at least 64.
        let i = h as usize & (self.slots.len() - 1);
        (&self.slots[i], &self.slots[i ^ 1])
    }

    /// The cached answer for this walk at generation `gen`, if any.
    #[inline(always)]
    pub fn get(&self, h: u64, key: u64, path: &[u8], gen: u64) -> Option<Cached> {
        let (a, b) = self.ways(h);
        match Self::get_in(a, h, key, path, gen) {
            None => Self::get_in(b, h, key, path, gen),
            hit => hit,
        }
    }

    #[inline(always)]
    fn get_in(s: &Slot, h: u64, key: u64, path: &[u8], gen: u64) -> Option<Cached> {
        let seq = s.seq.read_begin()?;
        if s.hash.load(Relaxed) != h
            || s.key.load(Relaxed) != key
            || s.gen.load(Relaxed) != gen
            || s.len.load(Relaxed) as usize != path.len()
        {
            return None;
        }
        let mut chunks = path.chunks_exact(8);
        for (c, w) in (&mut chunks).zip(s.path.iter()) {
            if w.load(Relaxed) != le(c) {
                return None;
            }
        }
        let rem = chunks.remainder();
        if !rem.is_empty() && s.path[path.len() / 8].load(Relaxed) != tail(rem) {
            return None;
        }
        let (r1, r2) = (s.res.load(Relaxed), s.res2.load(Relaxed));
        if s.seq.read_retry(seq) {
            return None;
        }
        Some(if r1 == ERR_MARK {
            Cached::Errno(r2 as i32)
        } else {
            Cached::Found {
                d: DIdx((r1 >> 32) as u32),
                seq: r1 as u32,
                ino: IIdx((r2 >> 32) as u32),
                flags: r2 as u32,
            }
        })
    }

    /// Remember an answer (best effort: skipped if another writer holds the
    /// slot).
    pub fn put(&self, h: u64, key: u64, path: &[u8], gen: u64, what: Cached) {
        if path.len() > MAX_PATH {
            return;
        }
        // The way holding this path already, else one holding an answer of
        // an older generation, else one picked by the hash.
        let (a, b) = self.ways(h);
        let holds = |s: &Slot| s.hash.load(Relaxed) == h && s.key.load(Relaxed) == key;
        let s = if holds(a) {
            a
        } else if holds(b) {
            b
        } else if a.gen.load(Relaxed) != gen {
            a
        } else if b.gen.load(Relaxed) != gen || h & (1 << 40) != 0 {
            b
        } else {
            a
        };
        let Some(seq) = s.seq.try_write_begin() else {
            return;
        };
        let _ = seq;
        s.hash.store(h, Relaxed);
        s.key.store(key, Relaxed);
        s.gen.store(gen, Relaxed);
        s.len.store(path.len() as u32, Relaxed);
        let mut chunks = path.chunks_exact(8);
        for (c, w) in (&mut chunks).zip(s.path.iter()) {
            w.store(le(c), Relaxed);
        }
        let rem = chunks.remainder();
        if !rem.is_empty() {
            s.path[path.len() / 8].store(tail(rem), Relaxed);
        }
        let (r1, r2) = match what {
            Cached::Found { d, seq, flags, ino } => (
                ((d.0 as u64) << 32) | seq as u64,
                ((ino.0 as u64) << 32) | flags as u64,
            ),
            Cached::Errno(e) => (ERR_MARK, e as u32 as u64),
        };
        s.res.store(r1, Relaxed);
        s.res2.store(r2, Relaxed);
        s.seq.write_end();
    }

    pub fn bytes(&self) -> usize {
        self.slots.len() * std::mem::size_of::<Slot>()
    }
}

/// Interned credentials: equal credentials get the same small id, so the
/// path cache keys on 24 bits instead of a whole group list.
#[derive(Default)]
pub(crate) struct CredIds {
    ids: parking_lot::Mutex<std::collections::HashMap<crate::perm::Creds, u32>>,
}

impl CredIds {
    pub fn id(&self, c: &crate::perm::Creds) -> u32 {
        let mut m = self.ids.lock();
        let n = m.len() as u32;
        *m.entry(c.clone()).or_insert(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn put_get_and_generation() {
        let pc = PathCache::new(1_000_000);
        let p = b"/usr/lib/gcc/x86_64-linux-gnu/12/crtendS.o";
        let k = key(DIdx(1), 0, 1);
        let h = hash(k, p);
        assert_eq!(pc.get(h, k, p, 5), None);
        pc.put(
            h,
            k,
            p,
            5,
            Cached::Found {
                d: DIdx(9),
                seq: 4,
                flags: 0,
                ino: IIdx(3),
            },
        );
        assert_eq!(
            pc.get(h, k, p, 5),
            Some(Cached::Found {
                d: DIdx(9),
                seq: 4,
                flags: 0,
                ino: IIdx(3)
            })
        );
        assert_eq!(pc.get(h, k, p, 6), None, "a newer generation never sees it");
        let k2 = key(DIdx(1), 1, 1);
        assert_eq!(
            pc.get(hash(k2, p), k2, p, 5),
            None,
            "other credentials never see it"
        );
        pc.put(h, k, p, 6, Cached::Errno(2));
        assert_eq!(pc.get(h, k, p, 6), Some(Cached::Errno(2)));
        let long = vec![b'a'; MAX_PATH + 1];
        pc.put(hash(k, &long), k, &long, 6, Cached::Errno(2));
        assert_eq!(pc.get(hash(k, &long), k, &long, 6), None);
    }
}
