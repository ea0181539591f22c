//! POSIX ACLs in the permission check, as Linux's `generic_permission`
//! consults them: only for a caller who is neither the owner nor root,
//! and only while the mode's group bits (the ACL's mask) grant anything.
//!
//! The ACLs themselves live in the backend (`system.posix_acl_*`
//! attributes). The vfs learns them once per inode and remembers the
//! answer in the inode's flags: `I_ACL_KNOWN` with neither `I_ACL` nor
//! `I_DEFACL` is the "has no ACL" fact seed 002's fast path needs
//! (`I_FASTEXEC` is set only on it); an inode with an ACL keeps it here,
//! parsed, by (superblock, node). A change of ACL through the vfs, or one
//! reported by the backend, forgets what was known, and the next check
//! that needs it asks again.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;
use walkfs_fsapi::acl::{self, Acl};
use walkfs_fsapi::{caps, Errno, NodeId, Result};

use crate::dcache::{IIdx, InodeSnap, I_ACL, I_ACL_KNOWN, I_DEFACL};
use crate::perm::Creds;

/// An inode's ACLs: the access ACL that decides permissions, and a
/// directory's default ACL that its new nodes inherit.
#[derive(Debug, Default)]
pub(crate) struct Pair {
    pub access: Option<Acl>,
    pub default: Option<Acl>,
}

/// The ACLs known, of inodes that have one.
#[derive(Default)]
pub(crate) struct Acls {
    map: RwLock<HashMap<(usize, u64), Arc<Pair>>>,
    /// Bumped by every forget: an answer asked for before one is not
    /// remembered (it may predate the change).
    gen: AtomicU64,
}

/// Whether `creds` asking about `s` can be answered without its ACL
/// (`acl_permission_check`'s order): the owner and root never need it;
/// nor does anyone while the group bits are empty, or once the inode is
/// known to have none.
#[inline]
pub(crate) fn needs_acl(creds: &Creds, s: &InodeSnap) -> bool {
    creds.uid != s.uid
        && !creds.is_root()
        && s.mode & 0o070 != 0
        && (s.flags & I_ACL_KNOWN == 0 || s.flags & I_ACL != 0)
}

/// One ACL attribute of `node`: `None` when it has none (or the backend
/// keeps no attributes). One that does not parse decides nothing, as a
/// file system would refuse to have stored it.
fn read(x: &dyn caps::Xattrs, node: NodeId, name: &[u8]) -> Result<Option<Acl>> {
    match x.getxattr(node, name) {
        Ok(v) => Ok(Acl::parse(&v).unwrap_or_else(|e| {
            tracing::warn!(node = node.0, "ignoring an ACL that does not parse: {e}");
            None
        })),
        Err(Errno::ENODATA | Errno::EOPNOTSUPP | Errno::ENOSYS) => Ok(None),
        Err(e) => Err(e),
    }
}

impl crate::Inner {
    /// The ACLs of the inode `s` was taken of: remembered, or asked of the
    /// backend and remembered.
    pub(crate) fn acls(&self, s: &InodeSnap) -> Result<Arc<Pair>> {
        if s.flags & I_ACL_KNOWN != 0 {
            if s.flags & (I_ACL | I_DEFACL) == 0 {
                return Ok(Arc::default());
            }
            if let Some(p) = self.acls.map.read().get(&(s.sb(), s.node)) {
                return Ok(Arc::clone(p));
            }
        }
        self.acls_asked(s)
    }

    #[inline(never)]
    fn fetch_acls(&self, s: &InodeSnap) -> Result<Arc<Pair>> {
        let gen = self.acls.gen.load(Ordering::Acquire);
        let fs = self.sb(s.sb())?;
        let node = NodeId(s.node);
        let pair = match fs.xattrs() {
            None => Pair::default(),
            Some(x) => Pair {
                access: read(x, node, acl::ACCESS)?,
                default: if s.is_dir() {
                    read(x, node, acl::DEFAULT)?
                } else {
                    None
                },
            },
        };
        let pair = Arc::new(pair);
        let mut w = self.writer();
        if self.acls.gen.load(Ordering::Acquire) == gen {
            if let Some(ino) = w.find_inode(&self.dc, s.sb(), s.node) {
                let (a, d) = (pair.access.is_some(), pair.default.is_some());
                let mut map = self.acls.map.write();
                if a || d {
                    map.insert((s.sb(), s.node), Arc::clone(&pair));
                } else {
                    map.remove(&(s.sb(), s.node));
                }
                w.set_acl_state(&self.dc, ino, Some((a, d)));
            }
        }
        Ok(pair)
    }

    /// Learn the ACL facts of a directory the walk may pass without a
    /// permission check once they say it has none (slow path, once per
    /// directory).
    pub(crate) fn learn_acls(&self, s: &InodeSnap) {
        if s.flags & I_ACL_KNOWN != 0 {
            return;
        }
        if self.server_decides(s) {
            // Assumed, not asked: a round trip per directory would cost
            // more than the check saves, and the server checks anyway
            // (a refusal asks: `Ctx::permission`).
            let mut w = self.writer();
            if let Some(ino) = w.find_inode(&self.dc, s.sb(), s.node) {
                w.set_acl_facts(&self.dc, ino, Some((false, false)), true);
            }
            return;
        }
        // A backend that cannot answer leaves the fact unknown: the walk
        // keeps checking.
        let _ = self.fetch_acls(s);
    }

    /// Does a server decide every call on `s` with the caller's
    /// credentials (a 9P source), so that the vfs's own check only
    /// spares it calls it would refuse?
    pub(crate) fn server_decides(&self, s: &InodeSnap) -> bool {
        self.sb(s.sb()).is_ok_and(|fs| fs.remote().is_some())
    }

    /// The ACLs of `s` asked of the backend whatever is known (a
    /// refusal by the mode bits on a server's file, which an ACL may
    /// grant).
    pub(crate) fn acls_asked(&self, s: &InodeSnap) -> Result<Arc<Pair>> {
        match self.fetch_acls(s) {
            // The node went (unlinked and forgotten meanwhile): whatever
            // the caller does with it next fails on its own; the mode
            // bits decide this check, and nothing is remembered.
            Err(Errno::ESTALE) => Ok(Arc::default()),
            r => r,
        }
    }

    /// Forget what is known of the ACLs of `ino`: one was changed, so
    /// whole paths and answers remembered under the old one go too.
    pub(crate) fn forget_acls(&self, ino: IIdx) {
        self.acls.gen.fetch_add(1, Ordering::AcqRel);
        let mut w = self.writer();
        w.ns_dirty = true;
        w.perm_dirty = true;
        if let Some(s) = self.dc.inode_snap(ino) {
            self.acls.map.write().remove(&(s.sb(), s.node));
        }
        w.set_acl_state(&self.dc, ino, None);
    }
}

/// The access ACL in what [`crate::Inner::acls`] gave, if anything.
pub(crate) fn access(p: &Option<Arc<Pair>>) -> Option<&Acl> {
    p.as_deref().and_then(|p| p.access.as_ref())
}
