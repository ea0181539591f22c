//! The front end's open files: the kernel's handles (`fh`), each an
//! [`OpenFile`] of the vfs, and bounded caches of the nodes' own open
//! files for I/O the kernel sends without a handle (the kernel may hold
//! millions of nodes; nodes keep open files only while recently used, see
//! the crate comment).
//!
//! An open file is counted: the cache or the handle table may let one go
//! at any time, and it closes when the last request using it lets go,
//! never under a request.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use parking_lot::Mutex;
use walkfs_fsapi::clock::{Clock, Visit};
use walkfs_vfs::OpenFile;

/// Shards of the handle table: requests on different handles rarely meet
/// on one lock.
const SHARDS: usize = 16;

/// The open files the kernel holds handles of: `fh` -> open file. Handle
/// 0 is never given (it means "no handle": the node's own file).
pub(crate) struct Handles {
    next: AtomicU64,
    shards: [Mutex<HashMap<u64, OpenFile>>; SHARDS],
}

impl Default for Handles {
    fn default() -> Handles {
        Handles {
            next: AtomicU64::new(1),
            shards: std::array::from_fn(|_| Mutex::new(HashMap::new())),
        }
    }
}

impl Handles {
    fn shard(&self, fh: u64) -> &Mutex<HashMap<u64, OpenFile>> {
        &self.shards[fh as usize % SHARDS]
    }

    /// A new handle for `file`.
    pub fn insert(&self, file: OpenFile) -> u64 {
        let fh = self.next.fetch_add(1, Relaxed);
        self.shard(fh).lock().insert(fh, file);
        fh
    }

    /// The open file of handle `fh` (a reference of the request's own).
    pub fn get(&self, fh: u64) -> Option<OpenFile> {
        self.shard(fh).lock().get(&fh).cloned()
    }

    /// Let handle `fh` go (the kernel's release): the file closes once no
    /// request uses it.
    pub fn remove(&self, fh: u64) -> Option<OpenFile> {
        self.shard(fh).lock().remove(&fh)
    }

    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }
}

struct Inner<V> {
    /// Node id -> (value, referenced since the hand last passed).
    map: HashMap<u64, (V, bool)>,
    clock: Clock,
    cap: usize,
}

/// At most `cap` values by node id; the least recently used go first.
pub(crate) struct Cache<V> {
    inner: Mutex<Inner<V>>,
}

impl<V: Clone> Cache<V> {
    pub fn new(cap: usize) -> Cache<V> {
        Cache {
            inner: Mutex::new(Inner {
                map: HashMap::new(),
                clock: Clock::default(),
                cap: cap.max(1),
            }),
        }
    }

    pub fn get(&self, id: u64) -> Option<V> {
        let mut c = self.inner.lock();
        let e = c.map.get_mut(&id)?;
        e.1 = true;
        Some(e.0.clone())
    }

    /// Cache `v` for `id` (replacing what was there); values pushed out
    /// are dropped after the lock is released.
    pub fn insert(&self, id: u64, v: V) {
        let mut out = Vec::new();
        {
            let mut c = self.inner.lock();
            let c = &mut *c;
            match c.map.insert(id, (v, true)) {
                Some(old) => out.push(old.0),
                None => c.clock.push(id),
            }
            let map = &mut c.map;
            let excess = map.len().saturating_sub(c.cap);
            c.clock.sweep(excess, |id| match map.get_mut(&id) {
                None => Visit::Gone,
                Some(e) if e.1 => {
                    e.1 = false;
                    Visit::Spare
                }
                Some(_) => {
                    if let Some((v, _)) = map.remove(&id) {
                        out.push(v);
                    }
                    Visit::Evict
                }
            });
            let map = &c.map;
            c.clock.compact(map.len(), |id| map.contains_key(&id));
        }
        drop(out);
    }

    pub fn remove(&self, id: u64) {
        let v = self.inner.lock().map.remove(&id);
        drop(v);
    }

    pub fn len(&self) -> usize {
        self.inner.lock().map.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn the_cache_keeps_at_most_cap_and_prefers_recent_values() {
        let c: Cache<Arc<u64>> = Cache::new(3);
        for id in 0..3 {
            c.insert(id, Arc::new(id));
        }
        // Everything is new (referenced): one full turn clears the bits,
        // then the oldest goes.
        let held = c.get(0);
        c.insert(3, Arc::new(3));
        assert_eq!(c.len(), 3);
        assert!(c.get(0).is_none());
        // Used since the last turn: 1 stays, 2 (not used) goes.
        c.get(1);
        c.insert(4, Arc::new(4));
        assert_eq!(c.len(), 3);
        assert!(c.get(1).is_some());
        assert!(c.get(2).is_none());
        // A value pushed out stays alive while someone holds it.
        assert_eq!(held.as_deref(), Some(&0));
        c.remove(1);
        assert!(c.get(1).is_none());
    }
}
