//! References taken without the writer mutex: lock-free pins on dentries
//! (open, chdir), the pins a context parks after `close`, and their taking
//! back when a name is removed.

use std::sync::Arc;

use crate::dcache::*;
use crate::sync::Ordering::{AcqRel, Acquire, Relaxed, SeqCst};
use crate::Inner;

use super::{Writer, DYING};

impl Writer {
    /// Take back every pin a context parked on `idx`, which was just
    /// marked dead: a removed file must let its inode (and the backend's
    /// node) go at its last real close, or a new file that the host gives
    /// the same inode number would meet the old node.
    pub(super) fn unpark(&mut self, dc: &Dcache, idx: DIdx) {
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
}

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
