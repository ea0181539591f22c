//! The names the vfs holds, lent to its backends ([`walkfs_fsapi::Names`]):
//! a backend that must reach a node again by name (hostfs reopening a
//! descriptor it closed, the 9P client walking to a node whose fid it
//! released, or to every node after a reconnect) reads the path from the
//! dentry cache instead of keeping a table of names of its own.
//!
//! A node the vfs holds has a positive dentry: an inode lives while a
//! dentry holds it (open files pin their dentry), and the writer keeps an
//! alias of each inode (`Writer::alias`). The path is read under the
//! writer lock, which no backend call ever waits for while holding it,
//! so a backend may ask from inside any of its calls.

use std::sync::{Arc, Weak};

use walkfs_fsapi::{Name, NodeId};

use crate::dcache::{DIdx, IIdx};
use crate::sync::Ordering::Relaxed;
use crate::Inner;

/// Longest ancestry returned (a deeper tree is not walked again by name;
/// the backend answers `ESTALE`).
const MAX_DEPTH: usize = 4096;

/// The names of superblock `sb`'s nodes.
pub(crate) struct SbNames {
    pub inner: Weak<Inner>,
    pub sb: usize,
}

impl walkfs_fsapi::Names for SbNames {
    fn path_of(&self, node: NodeId) -> Option<Vec<(NodeId, Name)>> {
        self.inner.upgrade()?.path_of_node(self.sb, node.0)
    }
}

impl Inner {
    /// Lend superblock `sb`'s names to its backend.
    pub(crate) fn lend_names(self: &Arc<Self>, sb: usize) {
        if let Ok(fs) = self.sb(sb) {
            fs.attach_names(Arc::new(SbNames {
                inner: Arc::downgrade(self),
                sb,
            }));
        }
    }

    /// Backend node `node` of superblock `sb`, named from its superblock's
    /// root: `(node, name)` pairs, the node first (see
    /// [`walkfs_fsapi::Names::path_of`]).
    fn path_of_node(&self, sb: usize, node: u64) -> Option<Vec<(NodeId, Name)>> {
        let dc = &self.dc;
        let mut w = self.writer();
        let ino = w.find_inode(dc, sb, node)?;
        let mut d = w.alias_of(dc, ino)?;
        let mut out = Vec::new();
        loop {
            let den = dc.dentry(d)?;
            let parent = DIdx(den.parent.load(Relaxed));
            // A superblock's root dentry is its own parent.
            if parent == d {
                break;
            }
            if out.len() >= MAX_DEPTH {
                return None;
            }
            let i = dc.inode(IIdx(den.target.load(Relaxed)))?;
            out.push((NodeId(i.node.load(Relaxed)), Name::from(&dc.name_of(d)[..])));
            d = parent;
        }
        drop(w);
        Some(out)
    }
}
