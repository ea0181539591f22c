//! File ids: what `name_to_handle_at` puts in a handle and
//! `open_by_handle_at` finds again, for a front end that exports files by
//! id (FUSE's export support, an NFS re-export). The id is the backend's
//! ([`caps::Export`]); the vfs turns a found file into a handle:
//!
//! - a file it still caches is given by its cached name;
//! - a directory is connected to the tree by its path from the root
//!   (the backend tells it; a walk of it must reach the same node), so
//!   that `..` and names under it work as for any other;
//! - any other file gets a disconnected dentry (Linux's for a file
//!   handle of a file whose name is not cached): its own parent, no name,
//!   freed with its last reference. A later lookup by name gives the
//!   same inode under a real name.

use super::prelude::*;
use crate::dcache::D_MOUNTROOT;
use crate::handle::Handle;
use walkfs_fsapi::caps;

impl Ctx {
    /// The backend's export capability for the file system of dentry `d`,
    /// and the dentry's inode.
    fn export_of(
        &self,
        d: crate::dcache::DIdx,
    ) -> Res<(InodeSnap, std::sync::Arc<dyn walkfs_fsapi::FileSystem>)> {
        let c = Cur::of(&self.inner().dc, d)?;
        let s = self.attrs(c)?;
        let fs = self.inner().sb(s.sb())?;
        if fs.export().is_none() {
            return Err(Errno::EOPNOTSUPP.into());
        }
        Ok((s, fs))
    }

    /// Can files of `root`'s file system be found by id?
    pub fn can_export(&self, root: &Handle) -> bool {
        self.run(|| {
            let d = self.fd_dentry(root.into())?;
            self.export_of(d).map(drop)
        })
        .is_ok()
    }

    /// The id of the file `h` refers to (`EOPNOTSUPP` where its backend
    /// gives none).
    pub fn file_id(&self, h: &Handle) -> Result<Vec<u8>> {
        self.run(|| {
            let d = self.fd_dentry(h.into())?;
            let (s, fs) = self.export_of(d)?;
            let ex = fs.export().ok_or(Errno::EOPNOTSUPP)?;
            Ok(ex.file_id(NodeId(s.node))?)
        })
    }

    /// The file of id `id` on the file system whose root is `root`
    /// (`EINVAL` when `root` is not a file system's root); `ESTALE` when
    /// the file is gone.
    pub fn open_by_id(&self, root: &Handle, id: &[u8]) -> Result<Handle> {
        if id.len() > caps::MAX_FILE_ID {
            return Err(Errno::ESTALE);
        }
        let d = self.run(|| self.fd_dentry(root.into()))?;
        let inner = self.inner();
        let flags = inner.dc.snap(d).map_or(0, |s| s.flags);
        if d != inner.root && flags & D_MOUNTROOT == 0 {
            return Err(Errno::EINVAL);
        }
        let (s, fs) = self.run(|| self.export_of(d))?;
        let sb = s.sb();
        let ex = fs.export().ok_or(Errno::EOPNOTSUPP)?;
        let entry = ex.open_id(id)?;
        // The backend's lookup reference `open_id` took: kept by the inode
        // made for it, or given back (queued) when one already holds one.
        if entry.attr.is_dir() {
            let found = ex.path_of(entry.node).and_then(|path| {
                let names: Vec<&[u8]> = path.iter().map(Vec::as_slice).collect();
                let mut steps = Vec::new();
                self.walk_handle(root, &names, &mut steps)?
                    .ok_or(Errno::ESTALE)
            });
            inner.writer().forgets.push((sb, entry.node.0));
            let h = found.map_err(|_| Errno::ESTALE)?;
            let same = self
                .run(|| {
                    let c = Cur::of(&inner.dc, self.fd_dentry((&h).into())?)?;
                    let x = self.attrs(c)?;
                    Ok(x.sb() == sb && x.node == entry.node.0)
                })
                .unwrap_or(false);
            // Moved meanwhile: the path led elsewhere.
            return if same { Ok(h) } else { Err(Errno::ESTALE) };
        }
        let mut w = inner.writer();
        let ino = w.iget(&inner.dc, sb, &entry, true).ok_or(Errno::ENOMEM)?;
        let d = match w.alias_of(&inner.dc, ino) {
            Some(d) => {
                w.get_dentry(&inner.dc, d);
                w.put_inode(&inner.dc, ino);
                d
            }
            None => match w.d_disconnected(&inner.dc, ino) {
                Some(d) => d,
                None => {
                    w.put_inode(&inner.dc, ino);
                    return Err(Errno::ENOMEM);
                }
            },
        };
        drop(w);
        Ok(Handle::adopt(&self.vfs.inner, d))
    }
}
