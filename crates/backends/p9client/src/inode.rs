//! Changes to names (after Linux's fs/9p/vfs_inode.c): a file just made
//! handed over to its owner, and a removal with its fallback for older
//! servers.

use std::sync::atomic::Ordering::Relaxed;

use walkfs_fsapi::{Attr, Errno, NodeId, Owner, Result};
use walkfs_p9::{Fcall, Str};

use crate::pipeline::one;
use crate::wire::handover;
use crate::P9Fs;

impl P9Fs {
    /// A file just made for `owner` belongs on the server to the user we
    /// attached as (9P2000.L's creates carry a gid, no uid): as root
    /// there, give it to its owner, as Linux's v9fs does for a client
    /// that checks permissions itself. Failing that, it stays ours.
    pub(crate) fn own(&self, fid: u32, owner: Owner, attr: &mut Attr) {
        if owner.uid == attr.uid || self.attach_uid != 0 {
            return;
        }
        let set = handover(owner, attr.mode);
        match self.simple(Fcall::Tsetattr { fid, attr: set }) {
            Ok(()) => attr.uid = owner.uid,
            Err(e) => tracing::debug!("chown of a new file to {}: {e}", owner.uid),
        }
    }

    /// [`P9Fs::own`] for a node just made (its fid pinned only when the
    /// owner must change).
    pub(crate) fn own_node(&self, node: NodeId, owner: Owner, attr: &mut Attr) {
        if owner.uid == attr.uid || self.attach_uid != 0 {
            return;
        }
        if let Ok(pin) = self.pin(node) {
            self.own(pin.fid, owner, attr);
        }
    }

    /// Tunlinkat, or on older servers (diod 1.0) a walk and Tremove (which
    /// clunks the fid, whatever the outcome).
    pub(crate) fn remove(&self, dir: u32, name: &[u8], flags: u32) -> Result<()> {
        match self.simple(Fcall::Tunlinkat {
            dirfid: dir,
            name: Str(name),
            flags,
        }) {
            Ok(()) => {
                self.unlinkat_ok.store(true, Relaxed);
                Ok(())
            }
            Err(Errno::EOPNOTSUPP) => {
                let (nf, _) = self.walk_getattr(dir, one(name))?;
                let r = self.simple(Fcall::Tremove { fid: nf });
                self.free_fid(nf);
                r
            }
            r => r,
        }
    }
}
