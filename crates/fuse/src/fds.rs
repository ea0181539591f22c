//! Bounded caches of vfs descriptors for the FUSE node table: the
//! kernel may hold millions of nodes, the vfs descriptor table is finite,
//! so nodes keep descriptors only while recently used (see the crate
//! comment).
//!
//! A cached descriptor is an `Arc<VFd>`: the cache may drop it at any
//! time, and the descriptor closes when the last request using it lets
//! go, never under a request.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use walkfs_fsapi::clock::{Clock, Visit};
use walkfs_vfs::Ctx;

/// Closes descriptors of the shared table.
pub(crate) struct Closer {
    pub ctx: Ctx,
}

impl Closer {
    /// Own `fd`: it closes when the returned value's last clone goes.
    pub fn own(self: &Arc<Self>, fd: i32) -> Arc<VFd> {
        Arc::new(VFd {
            fd,
            closer: self.clone(),
        })
    }
}

/// A vfs descriptor that closes with its last reference.
pub(crate) struct VFd {
    pub fd: i32,
    closer: Arc<Closer>,
}

impl Drop for VFd {
    fn drop(&mut self) {
        let _ = self.closer.ctx.close(self.fd);
    }
}

/// The descriptor a read or write goes through: the kernel's handle, or
/// the node's shared open file.
pub(crate) enum IoFd {
    Handle(i32),
    Shared(Arc<VFd>),
}

impl IoFd {
    pub fn fd(&self) -> i32 {
        match self {
            IoFd::Handle(fd) => *fd,
            IoFd::Shared(f) => f.fd,
        }
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
