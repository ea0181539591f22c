//! The [`FileSystem`] implementation: one trait impl, so one block; the
//! work is done by the helpers of the concern modules.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use walkfs_fsapi::{
    caps, Attr, Deferred, DirEntry, Done, Entry, Errno, FileHandle, FileSystem, FileType, Granted,
    Make, NodeId, OpenFlags, Owner, Result, SetAttr, StatFs,
};
use walkfs_p9::{self as p9, Fcall, Str};

use crate::pipeline::one;
use crate::wire::{attr_of, err_of, kind_of_dtype, p9_setattr};
use crate::{ahead, notify, FidStats, P9Fs, Stats};

impl FileSystem for P9Fs {
    fn root(&self) -> NodeId {
        NodeId(self.root_ino)
    }

    fn lookup(&self, parent: NodeId, name: &[u8]) -> Result<Entry> {
        let dir = self.pin(parent)?;
        self.entry_of(dir.fid, name)
    }

    fn forget(&self, node: NodeId, count: u64) {
        let gone = self.nodes.lock().forget(node.0, count);
        if let Some(fid) = gone {
            self.clunk(fid);
        }
    }

    fn getattr(&self, node: NodeId) -> Result<Attr> {
        let pin = self.pin(node)?;
        self.rpc.call(
            Fcall::Tgetattr {
                fid: pin.fid,
                request_mask: p9::GETATTR_BASIC | p9::GETATTR_BTIME,
            },
            |r| match r {
                Fcall::Rgetattr { st } => Ok(attr_of(&st)),
                r => Err(err_of(&r)),
            },
        )
    }

    fn setattr(&self, node: NodeId, set: &SetAttr) -> Result<Attr> {
        let a = p9_setattr(set);
        let pin = self.pin(node)?;
        self.simple(Fcall::Tsetattr {
            fid: pin.fid,
            attr: a,
        })?;
        self.getattr(node)
    }

    fn readlink(&self, node: NodeId) -> Result<Vec<u8>> {
        let pin = self.pin(node)?;
        self.rpc
            .call(Fcall::Treadlink { fid: pin.fid }, |r| match r {
                Fcall::Rreadlink { target } => Ok(target.0.to_vec()),
                r => Err(err_of(&r)),
            })
    }

    /// The node keeps its fid while the file is open (an unlinked open
    /// file cannot be walked to again).
    fn open(&self, node: NodeId, flags: OpenFlags) -> Result<FileHandle> {
        let pin = self.pin(node)?;
        let f = self.open_fid(pin.fid, flags.0 as u32)?;
        pin.keep();
        self.opened(f, node.0, flags);
        Ok(FileHandle(f as u64))
    }

    fn create(
        &self,
        parent: NodeId,
        name: &[u8],
        mode: u32,
        owner: Owner,
        flags: OpenFlags,
    ) -> Result<(Entry, FileHandle)> {
        let pin = self.pin(parent)?;
        let (nf, pf, mut attr) = self.create_getattr(pin.fid, name, flags, mode, owner.gid)?;
        self.own(nf, owner, &mut attr);
        // Counted as open until `release`, as `open` pins.
        match pf {
            Some(pf) => {
                let surplus = {
                    let mut n = self.nodes.lock();
                    let s = n.adopt(attr.ino, attr.generation(), pf);
                    let _ = n.pin_held(attr.ino);
                    s
                };
                if let Some(f) = surplus {
                    self.clunk(f);
                }
                self.trim();
            }
            // No path fid (see `Nodes::adopt_open`).
            None => self.nodes.lock().adopt_open(attr.ino),
        }
        self.opened(nf, attr.ino, flags);
        Ok((
            Entry {
                node: NodeId(attr.ino),
                attr,
            },
            FileHandle(nf as u64),
        ))
    }

    fn read(&self, _node: NodeId, fh: FileHandle, off: u64, buf: &mut [u8]) -> Result<usize> {
        let fid = u32::try_from(fh.0).map_err(|_| Errno::EBADF)?;
        self.locks_held.check(fid)?;
        let mut done = 0;
        while done < buf.len() {
            let want = (buf.len() - done).min(self.iounit as usize) as u32;
            let n = self.rpc.call(
                Fcall::Tread {
                    fid,
                    offset: off + done as u64,
                    count: want,
                },
                |r| match r {
                    Fcall::Rread { data } => {
                        let n = data.0.len().min(buf.len() - done);
                        buf[done..done + n].copy_from_slice(&data.0[..n]);
                        Ok(n)
                    }
                    r => Err(err_of(&r)),
                },
            )?;
            done += n;
            if n < want as usize {
                break;
            }
        }
        Ok(done)
    }

    fn write(&self, _node: NodeId, fh: FileHandle, off: u64, data: &[u8]) -> Result<usize> {
        let fid = u32::try_from(fh.0).map_err(|_| Errno::EBADF)?;
        self.locks_held.check(fid)?;
        let mut done = 0;
        while done < data.len() {
            let chunk = &data[done..(done + self.iounit as usize).min(data.len())];
            let n = self.rpc.call(
                Fcall::Twrite {
                    fid,
                    offset: off + done as u64,
                    data: p9::Data(chunk),
                },
                |r| match r {
                    Fcall::Rwrite { count } => Ok(count as usize),
                    r => Err(err_of(&r)),
                },
            )?;
            done += n;
            if n < chunk.len() {
                break;
            }
        }
        Ok(done)
    }

    fn release(&self, node: NodeId, fh: FileHandle) {
        if let Ok(fid) = u32::try_from(fh.0) {
            self.opens.lock().remove(&fid);
            self.locks_held.closed(fid);
            self.clunk(fid);
        }
        // The pin `open` or `create` kept.
        let gone = self.nodes.lock().unpin(node.0);
        if let Some(fid) = gone {
            self.clunk(fid);
        }
        self.trim();
    }

    fn mkdir(&self, parent: NodeId, name: &[u8], mode: u32, owner: Owner) -> Result<Entry> {
        let dir = self.pin(parent)?;
        self.simple(Fcall::Tmkdir {
            dfid: dir.fid,
            name: Str(name),
            mode,
            gid: owner.gid,
        })?;
        let mut e = self.entry_of(dir.fid, name)?;
        self.own_node(e.node, owner, &mut e.attr);
        Ok(e)
    }

    fn symlink(&self, parent: NodeId, name: &[u8], target: &[u8], owner: Owner) -> Result<Entry> {
        let dir = self.pin(parent)?;
        self.simple(Fcall::Tsymlink {
            fid: dir.fid,
            name: Str(name),
            symtgt: Str(target),
            gid: owner.gid,
        })?;
        let mut e = self.entry_of(dir.fid, name)?;
        self.own_node(e.node, owner, &mut e.attr);
        Ok(e)
    }

    fn mknod(
        &self,
        parent: NodeId,
        name: &[u8],
        mode: u32,
        rdev: u64,
        owner: Owner,
    ) -> Result<Entry> {
        let dir = self.pin(parent)?;
        // Tmknod carries the type bits in mode, as Linux's v9fs sends it.
        self.simple(Fcall::Tmknod {
            dfid: dir.fid,
            name: Str(name),
            mode,
            major: libc::major(rdev as libc::dev_t),
            minor: libc::minor(rdev as libc::dev_t),
            gid: owner.gid,
        })?;
        let mut e = self.entry_of(dir.fid, name)?;
        self.own_node(e.node, owner, &mut e.attr);
        Ok(e)
    }

    fn link(&self, node: NodeId, newparent: NodeId, newname: &[u8]) -> Result<Entry> {
        let dir = self.pin(newparent)?;
        let file = self.pin(node)?;
        self.simple(Fcall::Tlink {
            dfid: dir.fid,
            fid: file.fid,
            name: Str(newname),
        })?;
        self.entry_of(dir.fid, newname)
    }

    fn unlink(&self, parent: NodeId, name: &[u8]) -> Result<()> {
        let dir = self.pin(parent)?;
        self.remove(dir.fid, name, 0)
    }

    fn rmdir(&self, parent: NodeId, name: &[u8]) -> Result<()> {
        self.remove(self.pin(parent)?.fid, name, p9::AT_REMOVEDIR)
    }

    fn rename(
        &self,
        parent: NodeId,
        name: &[u8],
        newparent: NodeId,
        newname: &[u8],
        flags: u32,
    ) -> Result<()> {
        let (dpin, npin) = (self.pin(parent)?, self.pin(newparent)?);
        let (dir, newdir) = (dpin.fid, npin.fid);
        match flags {
            0 => {}
            // 9P2000.L's renames take no flags. RENAME_NOREPLACE is asked
            // as a walk first: exact against this client's own changes,
            // a window against another client's create of the same name.
            walkfs_fsapi::RENAME_NOREPLACE => {
                if let Ok((f, _)) = self.walk_getattr(newdir, one(newname)) {
                    self.clunk(f);
                    return Err(Errno::EEXIST);
                }
            }
            // An exchange cannot be built from 9P calls atomically
            // (Linux's 9p client refuses it too).
            _ => return Err(Errno::EINVAL),
        }
        let r = match self.simple(Fcall::Trenameat {
            olddirfid: dir,
            oldname: Str(name),
            newdirfid: newdir,
            newname: Str(newname),
        }) {
            // Older servers (diod 1.0) know only Trename, on a fid of the
            // file itself.
            Err(Errno::EOPNOTSUPP) => {
                let (nf, _) = self.walk_getattr(dir, one(name))?;
                let r = self.simple(Fcall::Trename {
                    fid: nf,
                    dfid: newdir,
                    name: Str(newname),
                });
                self.clunk(nf);
                r
            }
            r => {
                if r.is_ok() {
                    self.renameat_ok.store(true, Relaxed);
                }
                r
            }
        };
        r?;
        // The moved file's node (if we hold one) keeps a fid walked to its
        // new name, so that its next call needs no walk (the name itself
        // is the vfs's to move).
        if let Ok((nf, attr)) = self.walk_getattr(newdir, one(newname)) {
            let (kept, gone) = {
                let mut n = self.nodes.lock();
                if n.by_id.contains_key(&attr.ino) {
                    let kept = matches!(n.install(attr.ino, nf), Some((_, false)));
                    // `install` pinned it for us; this call is done with it.
                    (kept, n.unpin(attr.ino))
                } else {
                    (false, None)
                }
            };
            if !kept {
                self.clunk(nf);
            }
            if let Some(f) = gone {
                self.clunk(f);
            }
            self.trim();
        }
        Ok(())
    }

    fn readdir(&self, node: NodeId) -> Result<Vec<DirEntry>> {
        let fid = self.open_fid(self.pin(node)?.fid, libc::O_RDONLY as u32)?;
        let mut out = Vec::new();
        let mut offset = 0u64;
        let r = loop {
            let got = self.rpc.call(
                Fcall::Treaddir {
                    fid,
                    offset,
                    count: self.iounit,
                },
                |r| match r {
                    Fcall::Rreaddir { data } => {
                        let mut n = 0;
                        for e in p9::dirents(data.0) {
                            let e = e.map_err(|_| Errno::EPROTO)?;
                            offset = e.offset;
                            n += 1;
                            if e.name == b"." || e.name == b".." {
                                continue;
                            }
                            out.push(DirEntry {
                                name: e.name.to_vec(),
                                ino: e.qid.path,
                                kind: kind_of_dtype(e.ty).unwrap_or(FileType::Regular),
                            });
                        }
                        Ok(n)
                    }
                    r => Err(err_of(&r)),
                },
            );
            match got {
                Ok(0) => break Ok(()),
                Ok(_) => {}
                Err(e) => break Err(e),
            }
        };
        self.clunk(fid);
        r.map(|()| out)
    }

    fn statfs(&self, node: NodeId) -> Result<StatFs> {
        self.rpc.call(
            Fcall::Tstatfs {
                fid: self.pin(node)?.fid,
            },
            |r| match r {
                Fcall::Rstatfs { st } => Ok(StatFs {
                    fs_type: st.ty as i64,
                    bsize: st.bsize as u64,
                    blocks: st.blocks,
                    bfree: st.bfree,
                    bavail: st.bavail,
                    files: st.files,
                    ffree: st.ffree,
                    namelen: st.namelen as u64,
                    frsize: st.bsize as u64,
                }),
                r => Err(err_of(&r)),
            },
        )
    }

    fn kind(&self) -> &'static str {
        "9p"
    }

    fn attach_names(&self, names: std::sync::Arc<dyn walkfs_fsapi::Names>) {
        self.nodes.lock().names = Some(names);
    }

    /// Over a server that keeps a connection's order (walkfs serve):
    /// changes are sent without waiting for their replies.
    fn ordered(&self) -> Option<&dyn caps::Ordered> {
        self.ordered.then_some(self as &dyn caps::Ordered)
    }

    fn listings(&self) -> Option<&dyn caps::Listings> {
        Some(self)
    }

    fn watch(&self) -> Option<&dyn caps::Watch> {
        Some(self)
    }

    /// The server's space extension, where it is `walkfs serve` (space.rs).
    fn space(&self) -> Option<&dyn caps::Space> {
        self.ordered.then_some(self as &dyn caps::Space)
    }

    fn remote(&self) -> Option<&dyn caps::Remote> {
        Some(self)
    }

    fn locks(&self) -> Option<&dyn caps::Locks> {
        Some(self)
    }

    /// Offered only where the server keeps them (probed at attach):
    /// elsewhere the vfs answers `EOPNOTSUPP` itself, and a FUSE mount
    /// asks its kernel for no ACLs it could not get.
    fn xattrs(&self) -> Option<&dyn caps::Xattrs> {
        self.xattrs.then_some(self as &dyn caps::Xattrs)
    }
}

impl caps::Ordered for P9Fs {
    /// Sent without waiting for the reply (the server runs them in
    /// order); the outcome goes to `done` from the reader thread.
    fn submit(&self, op: Deferred<'_>, done: Done) -> Result<()> {
        self.submit_op(op, done)
    }

    /// The next number of the server's grant (a new grant when it is
    /// spent). A node made for someone else than who we attached as is
    /// theirs on the server only when we are root there (see `own`).
    fn grant(&self, owner: Owner) -> Option<Granted> {
        self.next_grant(owner)
    }

    /// The make (`Tlcreatei` on a clone of the directory's fid for a
    /// file, `Tmkdiri`, `Tsymlinki`, `Tmknodi`), a walk to the new name
    /// for the node's fid, and, attached as root for someone else, the
    /// chown `own` would send: back to back in one write, none waited
    /// for. The server runs them in order before anything sent later, so
    /// the node and its fid exist for every later request; `done` hears
    /// the first failure among them.
    fn make_behind(
        &self,
        parent: NodeId,
        name: &[u8],
        owner: Owner,
        node: Granted,
        what: Make<'_>,
        done: Done,
    ) -> Result<Option<FileHandle>> {
        self.send_make_behind(parent, name, owner, node, what, done)
    }

    fn getattr_behind(&self, node: NodeId, then: walkfs_fsapi::AttrThen) -> bool {
        self.send_getattr_behind(node, then)
    }

    fn leased(&self, node: NodeId) -> bool {
        self.leases.covers(node.0)
    }
}

impl caps::Listings for P9Fs {
    fn readdir_plus(&self, node: NodeId) -> Option<Result<Vec<walkfs_fsapi::DirPlus>>> {
        if !self.dirplus.load(Relaxed) {
            return None;
        }
        match self.listing(node) {
            Ok(l) => Some(Ok(l)),
            // A server without the extension (diod: ENODATA or
            // EOPNOTSUPP; others may say it otherwise).
            Err(
                e @ (Errno::EOPNOTSUPP
                | Errno::ENODATA
                | Errno::EINVAL
                | Errno::ENOSYS
                | Errno::ENOENT
                | Errno::EPROTO),
            ) => {
                tracing::info!("9p server lists no attributes with entries ({e}): using Treaddir");
                self.dirplus.store(false, Relaxed);
                None
            }
            // Too large a listing, or one refused (EACCES): Treaddir says
            // what it says, this once.
            Err(_) => None,
        }
    }

    /// Only over a server that keeps a connection's order: then the
    /// listing reflects every change submitted before it.
    fn list_ahead(&self, node: NodeId) -> Option<Box<dyn walkfs_fsapi::ListAhead>> {
        if !self.ordered || !self.can_batch_listing() {
            return None;
        }
        let need = self.need(node.0)?;
        let listing = self.ask_listing(node.0, need).ok()??;
        Some(Box::new(ahead::Ahead {
            listing: Some(listing),
            dir: node,
            rpc: Arc::clone(&self.rpc),
            fids: Arc::clone(&self.fids),
            nodes: Arc::clone(&self.nodes),
        }))
    }

    fn complete(&self) -> bool {
        true
    }
}

impl caps::Watch for P9Fs {
    /// Changes come from the server (walkfs serve's notification
    /// extension), when it offered them at attach.
    fn watch_changes(&self, sink: Arc<dyn walkfs_fsapi::ChangeSink>) -> Result<()> {
        let Some(version) = self.notify else {
            return Err(Errno::EOPNOTSUPP);
        };
        *self.sink.lock() = Some(Arc::clone(&sink));
        let n = notify::start(
            version,
            Arc::downgrade(&self.rpc),
            self.nodes.clone(),
            self.root_ino,
            sink,
            notify::Recaller {
                leases: Arc::clone(&self.leases),
                fids: Arc::clone(&self.fids),
            },
        )?;
        *self.notifier.lock() = Some(n);
        Ok(())
    }

    /// Every report the server queued before now is applied (a poll of
    /// the notification fid: notify.rs).
    fn barrier(&self) {
        let n = self.notifier.lock().clone();
        if let Some(n) = n {
            n.barrier();
        }
    }
}

impl caps::Remote for P9Fs {
    /// The walk to an open fid, the open and the first read back to back:
    /// one round trip where `open` and `read` took two (three when the
    /// node held no fid). The open fid is cloned from the node's own fid;
    /// a node that holds none gets one in the same write, walked from the
    /// nearest ancestor that does (by the names cached, checked against
    /// the qids remembered). A server that does not keep a fid's requests
    /// in order gets them one at a time.
    fn open_read(
        &self,
        node: NodeId,
        flags: OpenFlags,
        off: u64,
        buf: &mut [u8],
    ) -> Option<Result<(FileHandle, usize)>> {
        Some(self.open_read_batched(node, flags, off, buf))
    }

    fn rpc_stats(&self) -> Stats {
        self.stats()
    }

    fn fid_stats(&self) -> Option<FidStats> {
        Some(P9Fs::fid_stats(self))
    }

    fn reset_stats(&self) {
        P9Fs::reset_stats(self)
    }
}
