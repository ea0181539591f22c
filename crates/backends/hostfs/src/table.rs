//! hostfs's node table: every host file the vfs holds, keyed by (device,
//! inode number), and a bounded cache of `O_PATH` descriptors for them.
//!
//! A node does not pin a descriptor: a tree of a million files must not
//! need a million. The descriptors of recently used nodes are kept (up
//! to `cap`, chosen by a clock, the second-chance approximation of LRU);
//! any other node is opened again from its nearest cached ancestor by the
//! names the vfs holds for it (its dentry cache, lent at mount: hostfs
//! keeps no names of its own), with the same `openat2(RESOLVE_BENEATH |
//! RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)` step a lookup uses, so a
//! reopen can never leave the export either. The file found must be the
//! node's (device, inode): a name renamed, replaced or removed on the host
//! meanwhile gives `ESTALE`, never another file.
//!
//! File handles (`open_by_handle_at`) would find a moved file too, but
//! they need `CAP_DAC_READ_SEARCH`, open a file wherever it now is (also
//! moved out of the export) and are refused by `walkfs serve`'s seccomp
//! filter for that reason; names keep the confinement by construction.
//!
//! Invariants: the root's descriptor is held for ever, outside the cache;
//! a descriptor handed out is an `Arc`, so evicting it from the cache
//! while a call uses it closes it only when that call is done.

use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use walkfs_fsapi::clock::{Clock, Visit};
use walkfs_fsapi::keyindex::KeyIndex;
use walkfs_fsapi::{Errno, Names, NodeId, Result};

use crate::sys;

pub(crate) const ROOT: u64 = 1;

pub(crate) struct HostNode {
    pub key: (u64, u64),
    /// Birth time (ns; 0 where not kept): with `key`, the file's identity.
    pub born: i64,
    pub lookups: u64,
    pub is_dir: bool,
}

#[derive(Default)]
pub(crate) struct Nodes {
    /// Node id (the inode number where it is free) -> node.
    pub by_id: HashMap<u64, HostNode>,
    keys: KeyIndex,
    /// Next id for a node that cannot take its inode number.
    next: u64,
}

/// Ids not taken from inode numbers start here.
const FIRST_SPARE_ID: u64 = 1 << 62;

impl Nodes {
    /// The node of (device, inode) `key`.
    pub fn find(&self, key: (u64, u64)) -> Option<u64> {
        self.keys.find(key, |id| self.by_id.get(&id).map(|n| n.key))
    }

    /// Add `node`: its id is its inode number when that is free.
    pub fn add(&mut self, node: HostNode) -> u64 {
        let ino = node.key.1;
        let id = if ino > ROOT && ino < FIRST_SPARE_ID && !self.by_id.contains_key(&ino) {
            ino
        } else {
            self.next += 1;
            self.next
        };
        self.keys.insert(node.key, id);
        self.by_id.insert(id, node);
        id
    }

    pub fn remove(&mut self, id: u64) {
        if let Some(n) = self.by_id.remove(&id) {
            self.keys.remove(n.key, id);
        }
    }
}

struct FdCache {
    fds: HashMap<u64, (Arc<OwnedFd>, bool)>,
    clock: Clock,
    cap: usize,
}

/// Counters of the descriptor cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FdStats {
    /// Nodes known, descriptors cached now, and the bound.
    pub nodes: u64,
    pub cached: u64,
    pub cap: u64,
    /// Descriptors closed to stay within the bound; reopens by name.
    pub evicted: u64,
    pub reopens: u64,
}

pub(crate) struct Table {
    pub nodes: RwLock<Nodes>,
    fds: Mutex<FdCache>,
    root: Arc<OwnedFd>,
    evicted: AtomicU64,
    reopens: AtomicU64,
    /// The names of the nodes: the vfs's, lent at mount.
    names: RwLock<Option<Arc<dyn Names>>>,
}

impl Table {
    pub fn new(root: OwnedFd, key: (u64, u64), born: i64, cap: usize) -> Table {
        let mut nodes = Nodes {
            next: FIRST_SPARE_ID,
            ..Nodes::default()
        };
        nodes.by_id.insert(
            ROOT,
            HostNode {
                key,
                born,
                lookups: 1,
                is_dir: true,
            },
        );
        nodes.keys.insert(key, ROOT);
        Table {
            nodes: RwLock::new(nodes),
            fds: Mutex::new(FdCache {
                fds: HashMap::new(),
                clock: Clock::default(),
                cap: cap.max(1),
            }),
            root: Arc::new(root),
            evicted: AtomicU64::new(0),
            reopens: AtomicU64::new(0),
            names: RwLock::new(None),
        }
    }

    pub fn root_key(&self) -> Option<(u64, u64)> {
        self.nodes.read().by_id.get(&ROOT).map(|n| n.key)
    }

    /// An `O_PATH` descriptor of `node`: cached, or reopened by name from
    /// the nearest ancestor whose descriptor is at hand, along the path
    /// the vfs holds for it ([`Names`]).
    pub fn fd(&self, node: NodeId) -> Result<Arc<OwnedFd>> {
        if node.0 == ROOT {
            return Ok(self.root.clone());
        }
        if let Some(fd) = self.cached(node.0) {
            return Ok(fd);
        }
        let names = self.names.read().clone().ok_or(Errno::ESTALE)?;
        let path = names.path_of(node).ok_or(Errno::ESTALE)?;
        if path.first().map(|p| p.0) != Some(node) {
            return Err(Errno::ESTALE);
        }
        // `path` runs from the node up: the nearest ancestor with a
        // descriptor is where the reopening starts (the root at worst).
        let mut start = path.len();
        let mut dir = self.root.clone();
        for (i, (id, _)) in path.iter().enumerate().skip(1) {
            if let Some(fd) = self.cached(id.0) {
                (start, dir) = (i, fd);
                break;
            }
        }
        for (id, name) in path[..start].iter().rev() {
            // Each step must land on the file the node is: a name
            // renamed, replaced or removed on the host meanwhile is stale.
            let key = {
                let nodes = self.nodes.read();
                let n = nodes.by_id.get(&id.0).ok_or(Errno::ESTALE)?;
                (n.key, n.born)
            };
            self.reopens.fetch_add(1, Relaxed);
            let fd = crate::lookup_fd(dir.as_fd(), name).map_err(|e| match e {
                Errno::ENOENT | Errno::ENOTDIR | Errno::ELOOP => Errno::ESTALE,
                e => e,
            })?;
            let (_, found, born) = sys::identify(fd.as_fd())?;
            if (found, born) != key {
                return Err(Errno::ESTALE);
            }
            dir = self.insert(id.0, fd);
        }
        Ok(dir)
    }

    /// Where the vfs's names are (see [`walkfs_fsapi::FileSystem::attach_names`]).
    pub fn attach_names(&self, names: Arc<dyn Names>) {
        *self.names.write() = Some(names);
    }

    fn cached(&self, id: u64) -> Option<Arc<OwnedFd>> {
        let mut c = self.fds.lock();
        let e = c.fds.get_mut(&id)?;
        e.1 = true;
        Some(e.0.clone())
    }

    /// Cache `fd` as `id`'s descriptor (a freshly looked-up node's, or a
    /// reopened one's); returns the descriptor to use.
    pub fn insert(&self, id: u64, fd: OwnedFd) -> Arc<OwnedFd> {
        let fd = Arc::new(fd);
        if id == ROOT {
            return self.root.clone();
        }
        let mut c = self.fds.lock();
        let c = &mut *c;
        if c.fds.insert(id, (fd.clone(), true)).is_none() {
            c.clock.push(id);
        }
        let fds = &mut c.fds;
        let excess = fds.len().saturating_sub(c.cap);
        let evicted = c.clock.sweep(excess, |id| match fds.get_mut(&id) {
            None => Visit::Gone,
            Some(e) if e.1 => {
                e.1 = false;
                Visit::Spare
            }
            Some(_) => {
                fds.remove(&id);
                Visit::Evict
            }
        });
        self.evicted.fetch_add(evicted as u64, Relaxed);
        let fds = &c.fds;
        c.clock.compact(fds.len(), |id| fds.contains_key(&id));
        fd
    }

    /// The node went: its descriptor too.
    pub fn drop_fd(&self, id: u64) {
        self.fds.lock().fds.remove(&id);
    }

    pub fn stats(&self) -> FdStats {
        // Nodes before descriptors: `fd` takes them in that order.
        let nodes = self.nodes.read().by_id.len() as u64;
        let c = self.fds.lock();
        FdStats {
            nodes,
            cached: c.fds.len() as u64,
            cap: c.cap as u64,
            evicted: self.evicted.load(Relaxed),
            reopens: self.reopens.load(Relaxed),
        }
    }
}
