//! Counters of what the cache did, for `walkfs stats` and the benchmarks.
//!
//! The slow path bumps them on every miss. One shared atomic would make
//! every miss on every thread write the same cache line, which is what
//! kept misses from scaling; so each counter is split into cache-line
//! sized shards and a thread always adds to its own (threads are dealt
//! shards round robin). Reading sums the shards: a reader racing the
//! adders may miss the latest few, which is all a statistic needs.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};

const SHARDS: usize = 16;

#[derive(Default)]
#[repr(align(64))]
struct Shard(AtomicU64);

/// One statistic, written by many threads without sharing a line.
#[derive(Default)]
pub(crate) struct Counter([Shard; SHARDS]);

static NEXT_SHARD: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static SHARD: usize = NEXT_SHARD.fetch_add(1, Relaxed) % SHARDS;
}

impl Counter {
    #[inline]
    pub fn add(&self, n: u64) {
        let i = SHARD.with(|s| *s);
        self.0[i].0.fetch_add(n, Relaxed);
    }

    #[inline]
    pub fn inc(&self) {
        self.add(1);
    }

    pub fn get(&self) -> u64 {
        self.0.iter().map(|s| s.0.load(Relaxed)).sum()
    }
}

/// What the cache did.
#[derive(Default)]
pub(crate) struct Counters {
    pub slow_lookups: Counter,
    pub backend_lookups: Counter,
    /// Directories listed with attributes (each entry cached).
    pub listings: Counter,
    /// Misses answered by a directory known complete (no backend).
    pub complete_misses: Counter,
    pub negative_created: Counter,
    /// Calls that started over (see step.rs).
    pub retries: Counter,
    /// Changes reported one by one (cache=coherent).
    pub changes: Counter,
    /// Times the backend lost changes and everything was dropped.
    pub changes_lost: Counter,
    /// Of `changes`, the backend's own for us, kept (hostfs own.rs).
    pub changes_own: Counter,
    /// Directory listings asked for ahead (readahead.rs), used, given up
    /// (stale, or never needed), and nanoseconds spent waiting for them.
    pub readahead_asked: Counter,
    pub readahead_used: Counter,
    pub readahead_wasted: Counter,
    pub readahead_wait_ns: Counter,
    /// Files whose open and first read were asked for ahead
    /// (fileahead.rs), used, given up.
    pub fileahead_asked: Counter,
    pub fileahead_used: Counter,
    pub fileahead_wasted: Counter,
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn sums_what_every_thread_added() {
        let c = std::sync::Arc::new(Counter::default());
        let hs: Vec<_> = (0..8)
            .map(|_| {
                let c = c.clone();
                std::thread::spawn(move || (0..1000).for_each(|_| c.inc()))
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        c.add(5);
        assert_eq!(c.get(), 8005);
    }
}
