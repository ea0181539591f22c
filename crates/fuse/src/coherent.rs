//! `cache=coherent` through FUSE: the kernel's caches are told what the
//! vfs was told.
//!
//! The kernel keeps entries, negative entries, attributes, symlink bodies
//! and file pages for as long as `cache=loose` would (for ever); a change
//! reported by the backend (see the vfs's coherent.rs) becomes
//! `FUSE_NOTIFY_INVAL_ENTRY` for a name and `FUSE_NOTIFY_INVAL_INODE` for
//! an inode (attributes and page cache). A lost queue (`All`) invalidates
//! every node and every name and negative entry handed to the kernel;
//! once degraded (changes may go unseen) new replies carry one-second
//! timeouts.
//!
//! Notifications are sent from the backend's reporting thread, never from
//! a request handler (the kernel takes the directory's lock to process
//! one, which a handler in that directory may hold).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, OnceLock};

use parking_lot::{Mutex, RwLock};
use walkfs_fusewire::Notifier;
use walkfs_vfs::{Change, ChangeSink};

use crate::Nodes;

/// Negative entries remembered for a full invalidation; past this many,
/// new ones are given short timeouts instead.
pub(crate) const MAX_NEGATIVES: usize = 1 << 16;

pub(crate) struct KernelCache {
    pub nodes: Arc<RwLock<Nodes>>,
    pub notifier: OnceLock<Notifier>,
    /// Node id -> the (parent, name) it was last handed out under.
    pub names: Mutex<HashMap<u64, (u64, Vec<u8>)>>,
    /// Negative entries handed out with a long timeout.
    pub negatives: Mutex<HashSet<(u64, Vec<u8>)>>,
}

impl KernelCache {
    pub fn new(nodes: Arc<RwLock<Nodes>>) -> KernelCache {
        KernelCache {
            nodes,
            notifier: OnceLock::new(),
            names: Mutex::new(HashMap::new()),
            negatives: Mutex::new(HashSet::new()),
        }
    }

    /// The node id the kernel knows inode `ino` by (node ids are inode
    /// numbers where they can be).
    fn node_of(&self, ino: u64) -> Option<u64> {
        let nodes = self.nodes.read();
        if ino == nodes.root_ino {
            return Some(crate::ROOT);
        }
        match nodes.by_id.get(&ino) {
            Some(n) if n.key.1 == ino => Some(ino),
            _ => nodes.keys.exception_of_ino(ino),
        }
    }

    /// Remember that `parent`/`name` was handed out (positive with `id`,
    /// or negative when `id` is `None`). Returns whether a negative entry
    /// may get a long timeout.
    pub fn handed_out(&self, parent: u64, name: &[u8], id: Option<u64>) -> bool {
        match id {
            Some(id) => {
                self.negatives.lock().remove(&(parent, name.to_vec()));
                self.names.lock().insert(id, (parent, name.to_vec()));
                true
            }
            None => {
                let mut n = self.negatives.lock();
                if n.len() >= MAX_NEGATIVES {
                    return false;
                }
                n.insert((parent, name.to_vec()));
                true
            }
        }
    }

    pub fn forgotten(&self, id: u64) {
        self.names.lock().remove(&id);
    }

    fn entry(&self, n: &Notifier, parent: u64, name: &[u8]) {
        self.negatives.lock().remove(&(parent, name.to_vec()));
        // ENOENT: the kernel had nothing cached there; nothing to do.
        let _ = n.inval_entry(parent, name);
    }

    fn inode(&self, n: &Notifier, id: u64) {
        // Attributes, and the page cache from offset 0 to the end.
        let _ = n.inval_inode(id, 0, 0);
    }

    /// The vfs replaced the attributes of inode `ino` with its backend's:
    /// the kernel's copy of them goes (not the page cache: the data is
    /// what it was).
    pub fn attrs_settled(&self, ino: u64) {
        let Some(n) = self.notifier.get() else { return };
        if let Some(id) = self.node_of(ino) {
            let _ = n.inval_inode(id, -1, 0);
        }
    }

    fn everything(&self, n: &Notifier) {
        let ids: Vec<u64> = self.nodes.read().by_id.keys().copied().collect();
        for id in ids {
            self.inode(n, id);
        }
        let names: Vec<(u64, Vec<u8>)> = self.names.lock().values().cloned().collect();
        for (parent, name) in names {
            let _ = n.inval_entry(parent, &name);
        }
        let negs: Vec<(u64, Vec<u8>)> = self.negatives.lock().drain().collect();
        for (parent, name) in negs {
            let _ = n.inval_entry(parent, &name);
        }
    }
}

impl ChangeSink for KernelCache {
    fn changed(&self, changes: &[Change]) {
        let Some(n) = self.notifier.get() else { return };
        for c in changes {
            match c {
                // Made through this mount, as the kernel saw it made: its
                // caches are right.
                Change::Entry { how, .. } | Change::Inode { how, .. } if how.own => {}
                Change::Entry { dir_ino, name, .. } => {
                    if let Some(dir) = self.node_of(*dir_ino) {
                        self.entry(n, dir, name);
                        self.inode(n, dir);
                    }
                }
                Change::Inode { ino, .. } => {
                    if let Some(id) = self.node_of(*ino) {
                        self.inode(n, id);
                    }
                }
                Change::All | Change::Degraded => self.everything(n),
            }
        }
    }
}
