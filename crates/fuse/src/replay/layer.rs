//! The replay as a layer around the request handler (see the module
//! comment of `replay`): the replay thread's requests answered from what
//! the host holds, the front end's own changes recorded around the
//! handler's work.

use std::ops::ControlFlow;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use walkfs_fusewire::abi;
use walkfs_fusewire::{Filesystem, Operation, Reply, Request};
use walkfs_vfs::{Errno, What};

use super::{Expect, Own, Replayer};
use crate::WalkFuse;

/// The replay as a layer around the request handler: it answers the
/// replay thread's own requests (module comment), records what the
/// front end's requests change before the handler makes the change
/// ([`Replayer::mine`]) and what the host holds after it, and hands
/// everything else to the handler, which knows nothing of the replay.
/// Served instead of the bare [`WalkFuse`] where changes are replayed
/// ([`Replaying::wanted`]).
pub(crate) struct Replaying {
    fs: WalkFuse,
    rp: Arc<Replayer>,
}

impl Replaying {
    /// Are other writers' changes replayed for watchers of a mount with
    /// options `opts`? (`cache=coherent` with `events=1`.)
    pub(crate) fn wanted(opts: &crate::MountOptions) -> bool {
        opts.cache == walkfs_vfs::CachePolicy::Coherent && opts.events
    }

    /// The replay around `fs`, listening to the vfs's changes. Call after
    /// [`WalkFuse::kernel_cache`]: listeners are told in the order they
    /// were added, and a replay must find the kernel's caches
    /// invalidated.
    pub(crate) fn new(fs: WalkFuse) -> Result<Replaying, Errno> {
        let rp = Arc::new(Replayer::new(&fs.vfs, Arc::clone(&fs.pt))?);
        fs.vfs.add_change_listener(rp.clone());
        Ok(Replaying { fs, rp })
    }

    /// The replayer of other writers' changes, to start once mounted.
    pub(crate) fn replayer(&self) -> Arc<Replayer> {
        Arc::clone(&self.rp)
    }

    /// A request of the replay thread, answered from what the host holds
    /// (see the module comment): `Break` with the answer; `Continue` with
    /// the reply, unwritten, for anyone else's, and for what the replay
    /// needs served as usual (the lookups of its parents).
    fn replayed<'r>(
        &self,
        req: &Request,
        op: &Operation<'_>,
        reply: Reply<'r>,
    ) -> ControlFlow<Result<(), Errno>, Reply<'r>> {
        let (fs, rp) = (&self.fs, &self.rp);
        let tid = rp.tid.load(Relaxed);
        if tid == 0 || req.pid != tid {
            return ControlFlow::Continue(reply);
        }
        let ino = req.nodeid;
        // Counted as the handler counts the requests it answers.
        let count = || crate::ops::counted(op).map(|o| fs.counters.start(o));
        let answer = match *op {
            Operation::Lookup { name } => {
                let Some(e) = rp.plan.lock().get(&(ino, name.to_vec())).cloned() else {
                    return ControlFlow::Continue(reply);
                };
                let _t = count();
                match e {
                    Expect::Absent => Err(Errno::ENOENT),
                    Expect::Gone { is_dir, was } => {
                        match was.and_then(|(ino, mode)| self.relookup(ino, mode)) {
                            Some(e) => reply.entry(&e),
                            None => reply.entry(&rp.ghost(is_dir)),
                        }
                        Ok(())
                    }
                    Expect::Is { parent, name } => fs
                        .lookup_node(&fs.base, parent, &name)
                        .map(|a| reply.entry(&fs.entry_out(a))),
                }
            }
            Operation::Mknod { name, .. }
            | Operation::Mkdir { name, .. }
            | Operation::Symlink { name, .. } => {
                let _t = count();
                match fs.lookup_node(&fs.base, ino, name) {
                    Ok(a) => {
                        reply.entry(&fs.entry_out(a));
                        Ok(())
                    }
                    // Gone again on the host (see Step::Create).
                    Err(Errno::ENOENT) => {
                        reply.entry(&rp.ghost(matches!(op, Operation::Mkdir { .. })));
                        Ok(())
                    }
                    Err(e) => Err(e),
                }
            }
            // Asked of the host now: an answer from attributes cached
            // before a change the host made meanwhile would be kept by the
            // kernel after that change's invalidation (already sent).
            Operation::Setattr(_) => {
                let _t = count();
                fs.node(ino)
                    .and_then(|h| fs.base.changed_outside(&h))
                    .and_then(|()| fs.attr(ino))
                    .map(|a| reply.attr(&fs.attr_out(a)))
            }
            Operation::Unlink { .. } | Operation::Rmdir { .. } | Operation::Rename { .. } => {
                let _t = count();
                Ok(())
            }
            _ => return ControlFlow::Continue(reply),
        };
        ControlFlow::Break(answer)
    }

    /// Record what `op` (a request on node `ino`) is about to change, so
    /// that the backend's report of it is not replayed.
    fn mine(&self, ino: u64, op: &Operation<'_>) {
        use walkfs_vfs::What::{Attrib, Created, Deleted, Modified, MovedFrom, MovedTo};
        match *op {
            Operation::Mkdir { name, .. }
            | Operation::Mknod { name, .. }
            | Operation::Symlink { name, .. }
            | Operation::Create { name, .. } => self.mine_entry(ino, name, Created),
            Operation::Unlink { name } | Operation::Rmdir { name } => {
                self.mine_entry(ino, name, Deleted)
            }
            Operation::Link {
                oldnodeid, newname, ..
            } => {
                self.mine_entry(ino, newname, Created);
                self.mine_inode(oldnodeid, Attrib);
            }
            Operation::Rename {
                newdir,
                name,
                newname,
                flags,
            } => {
                self.mine_entry(ino, name, MovedFrom);
                self.mine_entry(newdir, newname, MovedTo);
                // An exchange moves the other file the other way: the
                // host reports both halves.
                if flags & walkfs_vfs::RENAME_EXCHANGE != 0 {
                    self.mine_entry(newdir, newname, MovedFrom);
                    self.mine_entry(ino, name, MovedTo);
                }
                // A whiteout takes the old name: the host reports it made.
                if flags & walkfs_vfs::RENAME_WHITEOUT != 0 {
                    self.mine_entry(ino, name, Created);
                }
            }
            Operation::Write { .. } => self.mine_inode(ino, Modified),
            Operation::Setattr(ref a) => {
                if a.size.is_some() {
                    self.mine_inode(ino, Modified);
                }
                let attrib = a.mode.is_some() || a.uid.is_some() || a.gid.is_some();
                if attrib || a.atime.is_some() || a.mtime.is_some() {
                    self.mine_inode(ino, Attrib);
                }
            }
            // An open that truncates.
            Operation::Open { flags } if flags & libc::O_TRUNC != 0 => {
                self.mine_inode(ino, Modified)
            }
            _ => {}
        }
    }

    /// An ENTRY of the node the kernel may still hold for inode number
    /// `ino` (a name the host no longer has): its lookup count goes up,
    /// as for any entry; no timeouts, so nobody else uses the name
    /// before the kernel asks again. `None` if no such node is known.
    fn relookup(&self, ino: u64, mode: u32) -> Option<abi::EntryOut> {
        let mut nodes = self.fs.nodes.write();
        let n = nodes.by_id.get_mut(&ino).filter(|n| n.key.1 == ino)?;
        n.nlookup += 1;
        let is_dir = mode & libc::S_IFMT == libc::S_IFDIR;
        Some(abi::EntryOut {
            nodeid: ino,
            // The generation the kernel knows the node by: another would
            // be another file to it, and the inode its watchers are on
            // would be dropped as stale.
            generation: u64::from(n.sent),
            attr: abi::Attr {
                ino,
                mode,
                nlink: if is_dir { 2 } else { 1 },
                blksize: 4096,
                ..Default::default()
            },
            ..Default::default()
        })
    }

    /// The inode number the backend knows node `id` by (what change
    /// reports name).
    fn ino_of(&self, id: u64) -> Option<u64> {
        let nodes = self.fs.nodes.read();
        if id == crate::ROOT {
            return Some(nodes.root_ino);
        }
        nodes.by_id.get(&id).map(|n| n.key.1)
    }

    /// Record that this request changes `name` in `parent` (node ids) as
    /// `how` says.
    fn mine_entry(&self, parent: u64, name: &[u8], how: What) {
        if let Some(ino) = self.ino_of(parent) {
            self.rp.mine(Own::Entry(ino, name.to_vec()), how);
        }
    }

    /// The last open of node `id` written straight to the host closed;
    /// `a` its attributes as the host has them now.
    fn mine_closed(&self, id: u64, a: &abi::Attr) {
        if let Some(ino) = self.ino_of(id) {
            let mtime = a.mtime as i64 * 1_000_000_000 + i64::from(a.mtimensec);
            self.rp.closed(ino, (a.size, mtime));
        }
    }

    /// This request changed node `id`'s data: record the size and mtime
    /// the host now has, as at the close of a passthrough file, so that
    /// a report of the data is the mount's own echo only while the host
    /// still has them (another writer's change a moment later is
    /// replayed). Only where the backend is the host's own file.
    fn mine_written(&self, id: u64) {
        let Some(ino) = self.ino_of(id) else {
            return;
        };
        let fs = &self.fs;
        let Ok(Some(fd)) = fs.node(id).and_then(|h| fs.base.backend_fd(&h)) else {
            return;
        };
        // SAFETY: all-zero is a valid `stat`; fstat fills it from an open
        // descriptor (an O_PATH one too).
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `fd` is open for the call; `st` is valid for writes.
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } == 0 {
            self.rp.closed(
                ino,
                (
                    st.st_size as u64,
                    st.st_mtime * 1_000_000_000 + st.st_mtime_nsec,
                ),
            );
        }
    }

    /// Record that this request changes node `id`'s data (`Modified`) or
    /// attributes (`Attrib`).
    fn mine_inode(&self, id: u64, how: What) {
        if let Some(ino) = self.ino_of(id) {
            self.rp.mine(Own::Inode(ino), how);
        }
    }
}

impl Filesystem for Replaying {
    fn init(&self, offered: u64) -> u64 {
        self.fs.init(offered)
    }

    fn destroy(&self) {
        self.fs.destroy()
    }

    fn handle(&self, req: &Request, op: Operation<'_>, reply: Reply<'_>) -> Result<(), i32> {
        if let Operation::Ioctl {
            cmd: crate::SETTLE_IOCTL,
            ..
        } = op
        {
            // Every report before now applied (and its replay queued),
            // then every replay queued before now carried out.
            self.fs.vfs.settle_reports();
            self.replayer().drain();
        }
        let reply = match self.replayed(req, &op, reply) {
            ControlFlow::Break(r) => return r.map_err(|e| e.0),
            ControlFlow::Continue(reply) => reply,
        };
        let ino = req.nodeid;
        self.mine(ino, &op);
        // A change of the file's data the host will report back: once
        // made, the host's size and mtime are recorded, so that its
        // report is told from another writer's change right after it.
        let stamp = match op {
            Operation::Write { .. } => true,
            Operation::Setattr(ref a) => a.size.is_some(),
            Operation::Open { flags } => flags & libc::O_TRUNC != 0,
            _ => false,
        };
        // A close of a file the kernel writes straight to the host: is it
        // the last open with the backing file (backed before, not after)?
        let backed = matches!(op, Operation::Release { .. }) && self.fs.pt.backed(ino);
        let r = self.fs.handle(req, op, reply);
        if stamp && r.is_ok() {
            self.mine_written(ino);
        }
        if backed && !self.fs.pt.backed(ino) {
            // The host's reports of the kernel's writes may come after
            // this close: they are the mount's own while the host keeps
            // the state it has now (the handler had the vfs ask the host
            // for the file's attributes again at this close).
            if let Ok(a) = self.fs.attr(ino) {
                self.mine_closed(ino, &a);
            }
        }
        r
    }
}
