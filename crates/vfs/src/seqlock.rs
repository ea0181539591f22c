//! The sequence count every lock-free reader of walkfs relies on (Linux's
//! `seqcount_t`, the `d_seq` of a dentry).
//!
//! Protocol. Writers are serialised by the vfs writer lock and bracket every
//! change with [`SeqCount::write_begin`] / [`SeqCount::write_end`]; the count
//! is odd while a change is in progress. A reader samples the count with
//! [`SeqCount::read_begin`], loads the protected fields (all of them atomics,
//! loaded `Relaxed`), and accepts what it loaded only if
//! [`SeqCount::read_retry`] then says the count did not move. Readers take
//! no lock and do no read-modify-write; on x86 the whole protocol is plain
//! loads plus compiler fences.
//!
//! Invariant: a value that passed `read_retry` was written entirely by one
//! writer (no torn mixture of two updates), because every protected store
//! happens between a `write_begin` and a `write_end` that both move the count.

use crate::sync::{fence, AtomicU32, Ordering};

#[derive(Default)]
pub(crate) struct SeqCount(AtomicU32);

impl SeqCount {
    /// Sample the count; `None` while a writer is active (the caller treats
    /// that as a miss and takes its slow path).
    #[inline(always)]
    pub fn read_begin(&self) -> Option<u32> {
        let s = self.0.load(Ordering::Acquire);
        if s & 1 == 0 {
            Some(s)
        } else {
            None
        }
    }

    /// True if what was read since `read_begin` returned `start` may be torn
    /// or stale and must be discarded.
    #[inline(always)]
    pub fn read_retry(&self, start: u32) -> bool {
        // The acquire fence orders the protected loads before the re-load of
        // the count (the seqlock reader's half of the fence pairing).
        fence(Ordering::Acquire);
        self.0.load(Ordering::Relaxed) != start
    }

    /// Start a change. Caller holds the writer lock.
    pub fn write_begin(&self) {
        let s = self.0.load(Ordering::Relaxed);
        self.0.store(s.wrapping_add(1), Ordering::Relaxed);
        // Orders the odd count before the protected stores that follow.
        fence(Ordering::Release);
    }

    /// Start a change without a lock serialising writers: claim the count
    /// with one compare-and-swap; `None` if another writer holds it.
    pub fn try_write_begin(&self) -> Option<u32> {
        let s = self.0.load(Ordering::Relaxed);
        if s & 1 != 0 {
            return None;
        }
        self.0
            .compare_exchange(s, s.wrapping_add(1), Ordering::Acquire, Ordering::Relaxed)
            .ok()?;
        fence(Ordering::Release);
        Some(s)
    }

    /// End a change begun with `write_begin`.
    pub fn write_end(&self) {
        let s = self.0.load(Ordering::Relaxed);
        self.0.store(s.wrapping_add(1), Ordering::Release);
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    //! Run with `RUSTFLAGS="--cfg loom" cargo test -p walkfs-vfs --lib loom`.
    use super::*;
    use crate::sync::AtomicU64;
    use loom::sync::Arc;

    /// A reader never accepts a torn pair: both fields always come from the
    /// same write, or the reader is told to retry.
    #[test]
    fn reader_never_accepts_torn_pair() {
        loom::model(|| {
            let shared = Arc::new((SeqCount::default(), AtomicU64::new(0), AtomicU64::new(0)));
            let w = shared.clone();
            let writer = loom::thread::spawn(move || {
                for v in 1..=2u64 {
                    w.0.write_begin();
                    w.1.store(v, Ordering::Relaxed);
                    w.2.store(v, Ordering::Relaxed);
                    w.0.write_end();
                }
            });
            if let Some(s) = shared.0.read_begin() {
                let a = shared.1.load(Ordering::Relaxed);
                let b = shared.2.load(Ordering::Relaxed);
                if !shared.0.read_retry(s) {
                    assert_eq!(a, b, "accepted a torn read");
                }
            }
            writer.join().unwrap();
        });
    }
}
