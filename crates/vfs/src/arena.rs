//! Type-stable slot storage: the memory of a slot, once handed out, stays a
//! valid `T` until the arena itself is dropped, even after the slot is freed
//! and reused. That is what lets a lock-free reader dereference an index it
//! read a moment ago: at worst it reads a reused slot, and the slot's
//! sequence count tells it so (Linux gets the same from SLAB_TYPESAFE_BY_RCU).
//!
//! Slots are addressed by `u32` index; index 0 is reserved as "none".
//! Segments are allocated on first use and never freed. A segment holds
//! about a sixteenth of the capacity, between 2^6 and 2^12 slots: a big
//! cache allocates in 4096-slot steps, a small one (a test, a fuzz input)
//! does not pay for thousands of slots it never uses.

use std::sync::OnceLock;

const MIN_SHIFT: u32 = 6;
const MAX_SHIFT: u32 = 12;

pub(crate) struct Arena<T> {
    segs: Box<[OnceLock<Box<[T]>>]>,
    capacity: u32,
    /// log2 of the slots per segment; fixed for the arena's life.
    shift: u32,
}

impl<T: Default> Arena<T> {
    /// An arena for at most `capacity` slots (index 0 included).
    pub fn new(capacity: u32) -> Arena<T> {
        let shift = (u32::BITS - capacity.leading_zeros())
            .saturating_sub(4)
            .clamp(MIN_SHIFT, MAX_SHIFT);
        let nseg = (capacity as usize).div_ceil(1 << shift).max(1);
        Arena {
            segs: (0..nseg).map(|_| OnceLock::new()).collect(),
            capacity,
            shift,
        }
    }

    /// The slot at `idx`, if its segment exists. Lock-free: two dependent
    /// loads and a bounds check.
    #[inline(always)]
    pub fn get(&self, idx: u32) -> Option<&T> {
        let seg = self.segs.get((idx >> self.shift) as usize)?.get()?;
        seg.get(idx as usize & ((1 << self.shift) - 1))
    }

    /// The slot at `idx`, allocating its segment if needed. `None` past the
    /// capacity.
    pub fn get_or_alloc(&self, idx: u32) -> Option<&T> {
        if idx >= self.capacity {
            return None;
        }
        let seg = self.segs.get((idx >> self.shift) as usize)?;
        let seg = seg.get_or_init(|| (0..1usize << self.shift).map(|_| T::default()).collect());
        seg.get(idx as usize & ((1 << self.shift) - 1))
    }

    /// Bytes of slot memory allocated so far.
    pub fn allocated_bytes(&self) -> usize {
        let segs = self.segs.iter().filter(|s| s.get().is_some()).count();
        (segs << self.shift) * std::mem::size_of::<T>()
            + self.segs.len() * std::mem::size_of::<OnceLock<Box<[T]>>>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[test]
    fn slots_are_stable_and_bounded() {
        let a: Arena<AtomicU32> = Arena::new(10_000);
        assert!(a.get(5).is_none());
        a.get_or_alloc(5).unwrap().store(7, Ordering::Relaxed);
        assert_eq!(a.get(5).unwrap().load(Ordering::Relaxed), 7);
        assert!(a.get_or_alloc(9_999).is_some());
        assert!(a.get_or_alloc(10_000).is_none());
        assert!(a.get(u32::MAX).is_none());
    }

    #[test]
    fn every_index_below_the_capacity_has_one_slot() {
        for cap in [1u32, 64, 65, 1000, 5376, 70_000, 1_254_096] {
            let a: Arena<AtomicU32> = Arena::new(cap);
            let n = cap.min(5000);
            for i in (0..n).chain(cap - n.min(cap)..cap) {
                a.get_or_alloc(i).unwrap().store(i, Ordering::Relaxed);
            }
            for i in (0..n).chain(cap - n.min(cap)..cap) {
                assert_eq!(a.get(i).unwrap().load(Ordering::Relaxed), i, "cap {cap}");
            }
            assert!(a.get_or_alloc(cap).is_none());
        }
    }
}
