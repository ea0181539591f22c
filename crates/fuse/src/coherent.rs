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
use std::sync::{mpsc, Arc, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};
use walkfs_fusewire::Notifier;
use walkfs_vfs::{Change, ChangeSink, Ctx};

use crate::Nodes;

/// Negative entries remembered for a full invalidation; past this many,
/// new ones are given short timeouts instead.
pub(crate) const MAX_NEGATIVES: usize = 1 << 16;

pub(crate) struct KernelCache {
    pub nodes: Arc<RwLock<Nodes>>,
    pub notifier: OnceLock<Notifier>,
    /// Root credentials, to find the names of the nodes in the dcache
    /// (their handles' dentries) for a full invalidation.
    base: Arc<Ctx>,
    /// Negative entries handed out with a long timeout.
    pub negatives: Mutex<HashSet<(u64, Vec<u8>)>>,
    /// Settled inodes the kernel did not have yet, to be told again
    /// (see [`KernelCache::attrs_settled`]): the thread that does it.
    again: Mutex<Option<mpsc::Sender<u64>>>,
}

/// The first wait before telling the kernel again of an inode it did
/// not have; doubled each time, [`AGAIN_TRIES`] times at most (about
/// 300 ms in all: a reply is long processed by then).
const AGAIN_STEP: Duration = Duration::from_millis(5);
const AGAIN_TRIES: u32 = 6;

impl KernelCache {
    pub fn new(nodes: Arc<RwLock<Nodes>>, base: Arc<Ctx>) -> KernelCache {
        KernelCache {
            nodes,
            notifier: OnceLock::new(),
            base,
            negatives: Mutex::new(HashSet::new()),
            again: Mutex::new(None),
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

    /// Remember that `parent`/`name` was handed out (positive when
    /// `found`, or negative). Returns whether a negative entry may get a
    /// long timeout. (A positive entry's name is its node's dentry's in
    /// the dcache: nothing is kept for it here.)
    pub fn handed_out(&self, parent: u64, name: &[u8], found: bool) -> bool {
        match found {
            true => {
                self.negatives.lock().remove(&(parent, name.to_vec()));
                true
            }
            false => {
                let mut n = self.negatives.lock();
                if n.len() >= MAX_NEGATIVES {
                    return false;
                }
                n.insert((parent, name.to_vec()));
                true
            }
        }
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

    /// Node `id`'s attributes changed by a call whose reply does not
    /// carry them (a fallocate that dropped set-id bits): the kernel's
    /// copy goes.
    pub fn node_attrs_changed(&self, id: u64) {
        if let Some(n) = self.notifier.get() {
            let _ = n.inval_inode(id, -1, 0);
        }
    }

    /// The vfs replaced the attributes of inode `ino` with its backend's:
    /// the kernel's copy of them goes (not the page cache: the data is
    /// what it was).
    ///
    /// A settle can come before the kernel made the inode at all: the
    /// reply that hands it out (a MKDIR's, a CREATE's) is written, and the
    /// kernel makes the inode from it in the caller's task afterwards. An
    /// invalidation then finds nothing (ENOENT), and the kernel would keep
    /// the reply's attributes, guessed before the server had them, for
    /// the whole attribute timeout; so it is sent again a little later.
    pub fn attrs_settled(&self, ino: u64) {
        let Some(n) = self.notifier.get() else { return };
        let Some(id) = self.node_of(ino) else { return };
        if let Ok(false) = n.inval_inode(id, -1, 0) {
            self.again(n, id);
        }
    }

    fn again(&self, n: &Notifier, id: u64) {
        let mut again = self.again.lock();
        if again.is_none() {
            let (tx, rx) = mpsc::channel();
            let n = n.clone();
            match std::thread::Builder::new()
                .name("fuse-settle-again".into())
                .spawn(move || tell_again(&n, &rx))
            {
                Ok(_) => *again = Some(tx),
                Err(e) => {
                    tracing::warn!("cannot start the thread that re-sends invalidations: {e}")
                }
            }
        }
        if let Some(tx) = &*again {
            let _ = tx.send(id);
        }
    }

    fn everything(&self, n: &Notifier) {
        let handles: Vec<(u64, walkfs_vfs::Handle)> = self
            .nodes
            .read()
            .by_id
            .iter()
            .map(|(id, node)| (*id, node.handle.clone()))
            .collect();
        // A directory has one dentry: its node's handle holds it.
        let by_dentry: HashMap<u64, u64> = handles.iter().map(|(id, h)| (h.key(), *id)).collect();
        for (id, h) in &handles {
            self.inode(n, *id);
            // Each node's name as the dcache has it (from the cache only,
            // never the backend: this is the backend's reporting thread).
            // The kernel's is the same: both follow every change made
            // through the mount, and a change made elsewhere that was
            // lost reached neither.
            let Ok((parent, name)) = self.base.parent_of(h) else {
                continue; // the root, or a file no name leads to
            };
            if let Some(p) = by_dentry.get(&parent.key()) {
                let _ = n.inval_entry(*p, &name);
            }
        }
        let negs: Vec<(u64, Vec<u8>)> = self.negatives.lock().drain().collect();
        for (parent, name) in negs {
            let _ = n.inval_entry(parent, &name);
        }
    }
}

/// Invalidate the attributes of each node id `rx` gives, once the kernel
/// has the inode: while it answers ENOENT, again after a wait that
/// doubles, [`AGAIN_TRIES`] times.
fn tell_again(n: &Notifier, rx: &mpsc::Receiver<u64>) {
    let mut due: Vec<(Instant, u64, u32)> = Vec::new();
    loop {
        let next = due.iter().map(|d| d.0).min();
        let got = match next {
            Some(t) => rx.recv_timeout(t.saturating_duration_since(Instant::now())),
            None => rx.recv().map_err(|_| mpsc::RecvTimeoutError::Disconnected),
        };
        match got {
            Ok(id) => due.push((Instant::now() + AGAIN_STEP, id, 1)),
            Err(mpsc::RecvTimeoutError::Disconnected) => return,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        let now = Instant::now();
        let (ready, wait): (Vec<_>, Vec<_>) = due.drain(..).partition(|d| d.0 <= now);
        due = wait;
        for (_, id, tries) in ready {
            if let (Ok(false), true) = (n.inval_inode(id, -1, 0), tries < AGAIN_TRIES) {
                due.push((now + AGAIN_STEP * (1 << tries), id, tries + 1));
            }
        }
    }
}

impl ChangeSink for KernelCache {
    fn changed(&self, changes: &[Change]) {
        let Some(n) = self.notifier.get() else { return };
        for c in changes {
            tracing::debug!("kernel cache: {c:?}");
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
