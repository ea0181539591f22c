//! The requests: each FUSE operation on the vfs, its reply written into
//! the session's buffer through a typed [`Reply`] (one body per
//! request). Errors are the vfs's errnos, as Linux gives them. The
//! replay of other writers' changes is a layer around this handler
//! (replay.rs), not part of it.

use std::sync::atomic::Ordering::Relaxed;

use walkfs_fusewire::abi::{self, fopen, init};
use walkfs_fusewire::request::{DirRead, Lk};
use walkfs_fusewire::{Filesystem, Operation, Reply, Request, Setattr};
use walkfs_vfs::{
    with_umask, CachePolicy, Ctx, Errno, FileLock, LockFlavor, LockKind, LockOwner, LockWait,
    OpenFile, Statx, WriteAs, LOCK_EOF,
};

use crate::stats::{Op, SETTLE_IOCTL, STATS_IOCTL, SYNC_IOCTL};
use crate::{attr_of, stat_of, time_set, WalkFuse, DEGRADED_TTL, ROOT};

/// Would a write through open file `h` have to clear set-id bits (a
/// set-user-id file, or set-group-id with group execute, written by a
/// caller without `CAP_FSETID`)? Such an open is served without
/// passthrough: the kernel writes a backing file with the daemon's
/// credentials, which keep the bits, where the vfs clears them as Linux
/// would for the caller. (A file that gains the bits while open in
/// passthrough keeps them on its next write: the open cannot be moved.)
fn kills_priv_on_write(file: &OpenFile) -> bool {
    if file.ctx().creds().uid == 0 {
        return false;
    }
    file.statx(libc::STATX_MODE).is_ok_and(|x| {
        let m = u32::from(x.stx_mode);
        m & libc::S_ISUID != 0
            || m & (libc::S_ISGID | libc::S_IXGRP) == libc::S_ISGID | libc::S_IXGRP
    })
}

/// The counter of each operation (none for those the session answers
/// itself or that do nothing).
pub(crate) fn counted(op: &Operation<'_>) -> Option<Op> {
    Some(match op {
        Operation::Lookup { .. } => Op::Lookup,
        Operation::Forget { .. } | Operation::BatchForget { .. } => Op::Forget,
        Operation::Getattr { .. } => Op::Getattr,
        Operation::Setattr(_) => Op::Setattr,
        Operation::Readlink => Op::Readlink,
        Operation::Symlink { .. } => Op::Symlink,
        Operation::Mknod { .. } => Op::Mknod,
        Operation::Mkdir { .. } => Op::Mkdir,
        Operation::Unlink { .. } => Op::Unlink,
        Operation::Rmdir { .. } => Op::Rmdir,
        Operation::Rename { .. } => Op::Rename,
        Operation::Link { .. } => Op::Link,
        Operation::Open { .. } => Op::Open,
        Operation::Read { .. } => Op::Read,
        Operation::Write { .. } => Op::Write,
        Operation::Statfs => Op::Statfs,
        Operation::Release { .. } => Op::Release,
        Operation::Fsync { .. } => Op::Fsync,
        Operation::Getxattr { .. } => Op::Getxattr,
        Operation::Listxattr { .. } => Op::Listxattr,
        Operation::Flush { .. } => Op::Flush,
        Operation::Opendir { .. } => Op::Opendir,
        Operation::Readdir(_) => Op::Readdir,
        Operation::Readdirplus(_) => Op::Readdirplus,
        Operation::Releasedir { .. } => Op::Releasedir,
        Operation::Fsyncdir { .. } => Op::Fsyncdir,
        Operation::Access { .. } => Op::Access,
        Operation::Create { .. } => Op::Create,
        Operation::Tmpfile { .. } => Op::Tmpfile,
        Operation::Ioctl { .. } => Op::Ioctl,
        Operation::Getlk(_) => Op::Getlk,
        Operation::Setlk { .. } => Op::Setlk,
        Operation::Setxattr { .. } => Op::Setxattr,
        Operation::Removexattr { .. } => Op::Removexattr,
        Operation::Fallocate { .. } => Op::Fallocate,
        Operation::Lseek { .. } => Op::Lseek,
        Operation::Interrupt { .. } | Operation::Destroy | Operation::Other(_) => return None,
    })
}

/// The xattr calls act on the node a request names.
const XATTR_AT: i32 = libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW;

impl Filesystem for WalkFuse {
    fn init(&self, offered: u64) -> u64 {
        // Kill-priv v2: the kernel stops clearing set-id bits itself
        // (a GETXATTR of security.capability before writes and a
        // GETATTR before each chown, since FUSE clears SB_NOSEC without
        // it) and marks the writes and truncates whose writer lacks
        // CAP_FSETID; the vfs clears the bits as Linux does (policy.rs):
        // on write here, on truncate and chown by the caller's
        // credentials.
        // Ioctls on directories: `walkfs stats` and `walkfs sync` ask the
        // root.
        let mut want = init::PARALLEL_DIROPS | init::HANDLE_KILLPRIV_V2 | init::HAS_IOCTL_DIR;
        // POSIX ACLs: the kernel checks and caches them, the source keeps
        // them; with DONT_MASK the umask comes apart from the mode, and
        // a directory's default ACL decides instead of it.
        if self.opts.acl && self.opts.default_permissions && self.vfs.has_xattrs() {
            want |= init::POSIX_ACL | init::DONT_MASK;
        }
        if self.init_export() {
            // File handles of forgotten files open again (export.rs).
            want |= init::EXPORT_SUPPORT;
        }
        if self.serves_locks {
            // Locks are the backend's, where the host's programs and
            // other clients see them (locks.rs).
            want |= init::POSIX_LOCKS | init::FLOCK_LOCKS;
        }
        if self.keeps() {
            want |= init::CACHE_SYMLINKS | init::DO_READDIRPLUS | init::READDIRPLUS_AUTO;
            // Write-back caching: the kernel gathers a program's small
            // writes in the page cache and sends them in large chunks (a
            // build's assembler and linker write in small pieces; without
            // it each is one round trip to the server). Coherent mounts
            // cannot use it; the vfs gathers them (writeback.rs).
            // Passthrough, where asked for and offered, takes its place:
            // the kernel refuses the two together, and with it a file's
            // writes reach the host file with no message at all.
            let pt = self.pt.wanted() && offered & init::PASSTHROUGH != 0;
            self.pt.agreed(pt);
            if pt {
                want |= init::PASSTHROUGH;
            } else if self.opts.cache == CachePolicy::Loose && self.opts.writeback_cache {
                want |= init::WRITEBACK_CACHE;
            }
            self.wb_cache
                .store(want & init::WRITEBACK_CACHE != 0, Relaxed);
        }
        want
    }

    /// The session ends (unmount): every change the backend sent without
    /// waiting reaches the server before the mount is gone, as a umount
    /// of any write-back file system waits for its dirty state. A refusal
    /// no one can be told of any more is logged.
    fn destroy(&self) {
        if let Err(e) = self.vfs.sync() {
            tracing::warn!("unmount: a change sent without waiting failed: {e}");
        }
        self.save_handle_map();
    }

    fn handle(&self, req: &Request, op: Operation<'_>, reply: Reply<'_>) -> Result<(), i32> {
        let _t = counted(&op).map(|o| self.counters.start(o));
        let ino = req.nodeid;
        let r = match op {
            Operation::Lookup { name } => self.lookup(req, ino, name, reply),
            Operation::Forget { nlookup } => {
                self.forget_node(ino, nlookup);
                Ok(())
            }
            Operation::BatchForget { items } => {
                for (id, n) in items {
                    self.forget_node(id, n);
                }
                Ok(())
            }
            Operation::Getattr { .. } => self.attr(ino).map(|a| reply.attr(&self.attr_out(a))),
            Operation::Setattr(s) => self.setattr(req, ino, &s, reply),
            Operation::Readlink => self.readlink(req, ino, reply),
            Operation::Mkdir { name, mode, umask } => {
                let ctx = self.ctx(req);
                Self::name(name).and_then(|n| {
                    let dir = self.node(ino)?;
                    let m = with_umask(umask, || ctx.mkdirat(&dir, n, mode & 0o7777))?;
                    reply.entry(&self.entry_out(self.made(&ctx, m)?));
                    Ok(())
                })
            }
            Operation::Mknod {
                name,
                mode,
                rdev,
                umask,
            } => {
                // Fifos, sockets (bind(2) of a unix socket lands here) and
                // device nodes are made in the export but never opened
                // through it: the kernel opens its own fifo or socket, and
                // the mount is nodev.
                let ctx = self.ctx(req);
                Self::name(name).and_then(|n| {
                    let kind = mode & (libc::S_IFMT | 0o7777);
                    let dir = self.node(ino)?;
                    let m = with_umask(umask, || ctx.mknodat(&dir, n, kind, u64::from(rdev)))?;
                    reply.entry(&self.entry_out(self.made(&ctx, m)?));
                    Ok(())
                })
            }
            Operation::Symlink { name, target } => {
                let ctx = self.ctx(req);
                Self::name(name).and_then(|n| {
                    let m = ctx.symlinkat(target, &self.node(ino)?, n)?;
                    reply.entry(&self.entry_out(self.made(&ctx, m)?));
                    Ok(())
                })
            }
            Operation::Link { oldnodeid, newname } => {
                let ctx = self.ctx(req);
                Self::name(newname).and_then(|n| {
                    let from = self.node(oldnodeid)?;
                    let m = ctx.linkat(&from, b"", &self.node(ino)?, n, libc::AT_EMPTY_PATH)?;
                    reply.entry(&self.entry_out(self.made(&ctx, m)?));
                    Ok(())
                })
            }
            Operation::Unlink { name } => {
                let ctx = self.ctx(req);
                Self::name(name).and_then(|n| ctx.unlinkat(&self.node(ino)?, n, 0))
            }
            Operation::Rmdir { name } => {
                let ctx = self.ctx(req);
                Self::name(name).and_then(|n| ctx.unlinkat(&self.node(ino)?, n, libc::AT_REMOVEDIR))
            }
            Operation::Rename {
                newdir,
                name,
                newname,
                flags,
            } => {
                let ctx = self.ctx(req);
                // The moved file's node follows it: its handle's dentry
                // moved.
                (|| {
                    let (a, b) = (Self::name(name)?, Self::name(newname)?);
                    ctx.renameat2(&self.node(ino)?, a, &self.node(newdir)?, b, flags)
                })()
            }
            Operation::Open { flags } => self.open(req, ino, flags, reply),
            // The reply is the data: read straight into the buffer.
            Operation::Read { fh, offset, size } => reply.data(size as usize, |buf| {
                self.io_file(ino, fh, false)?.pread(buf, offset)
            }),
            Operation::Write {
                fh,
                offset,
                write_flags,
                data,
            } => (|| {
                // The kernel says who writes and whether set-id bits go
                // (HANDLE_KILLPRIV_V2): the vfs drops them for the writer,
                // whoever opened the file (the kernel writes back through
                // any open file of the node, or without one).
                let ctx;
                let who = if write_flags & abi::WRITE_KILL_SUIDGID != 0 {
                    ctx = self.ctx(req);
                    WriteAs::As(ctx.creds())
                } else {
                    WriteAs::Keep
                };
                let f = self.io_file(ino, fh, true)?;
                let n = f.pwrite_by(data, offset, who)?;
                reply.written(n as u32);
                Ok(())
            })(),
            Operation::Fallocate {
                fh,
                offset,
                length,
                mode,
            } => (|| {
                let f = self.io_file(ino, fh, true)?;
                let off = i64::try_from(offset).map_err(|_| Errno::EINVAL)?;
                let len = i64::try_from(length).map_err(|_| Errno::EINVAL)?;
                f.fallocate(mode, off, len)?;
                // Under passthrough the kernel keeps the size it saw.
                if self.pt.backed(ino) {
                    self.base.changed_outside(&self.node(ino)?)?;
                }
                // The vfs may have dropped set-id bits (a writer without
                // CAP_FSETID): the kernel keeps the mode it had, and no
                // report tells it (a server leaves a client's own changes
                // out of its reports).
                self.kc.node_attrs_changed(ino);
                Ok(())
            })(),
            Operation::Lseek { fh, offset, whence } => (|| {
                let f = self.io_file(ino, fh, false)?;
                let off = i64::try_from(offset).map_err(|_| Errno::ENXIO)?;
                reply.lseek(f.lseek(off, whence)?);
                Ok(())
            })(),
            Operation::Flush { fh, lock_owner } => self.flush(ino, fh, lock_owner),
            Operation::Getlk(lk) => self.getlk(ino, &lk, reply),
            Operation::Setlk { lk, sleep } => self.setlk(req, ino, &lk, sleep),
            Operation::Release { fh, flock_owner } => {
                // The file's flock locks go with it (and whatever else
                // was taken through it, when the vfs releases it).
                if let (true, Some(owner), true) = (self.serves_locks, flock_owner, fh != 0) {
                    if let Some(f) = self.handles.get(fh) {
                        let unlock = FileLock::whole(LockKind::Unlock, LockFlavor::Flock);
                        let _ = f.setlk(LockOwner(owner), &unlock, LockWait::No);
                    }
                }
                // A file the kernel wrote straight to the host: its cached
                // attributes go stale before its backing does. In the
                // other order a GETATTR in between (close(2) does not wait
                // for RELEASE) would find the node unbacked and answer
                // the attributes cached before the kernel's writes.
                if self.pt.backed(ino) {
                    if let Ok(h) = self.node(ino) {
                        let _ = self.base.changed_outside(&h);
                    }
                }
                self.pt.released(ino);
                // Closed once no request uses it; what a close reports
                // was reported at flush already, where a program could
                // see it.
                if fh != 0 {
                    drop(self.handles.remove(fh));
                }
                Ok(())
            }
            // The file's changes running behind are carried out; a failure
            // this open file has not seen is reported. With handle 0 the
            // node's own open file: its cursor has seen what a file the
            // kernel opened without telling us would have.
            Operation::Fsync { fh, .. } => self.io_file(ino, fh, false).and_then(|f| f.fsync()),
            Operation::Opendir { .. } if self.keeps() => {
                // The NO_OPENDIR way (listings.rs): the kernel stops
                // asking, keeps listings in its cache, and lists only at
                // READDIR.
                Err(Errno::ENOSYS)
            }
            Operation::Opendir { .. } => self.list(&self.ctx(req), ino, false).map(|entries| {
                let id = self.listings.add(ino, entries);
                reply.open(&abi::OpenOut {
                    fh: u64::from(id),
                    ..Default::default()
                });
            }),
            Operation::Readdir(d) => self.readdir(req, ino, &d, reply),
            Operation::Readdirplus(d) => self.readdirplus(req, ino, &d, reply),
            Operation::Releasedir { fh } => {
                if let Ok(id) = u32::try_from(fh) {
                    self.listings.remove(id);
                }
                Ok(())
            }
            // The directory's entries changed without waiting, their
            // errors.
            Operation::Fsyncdir { .. } => self.node(ino).and_then(|h| {
                self.base
                    .reopen_file(&h, libc::O_RDONLY | libc::O_DIRECTORY)?
                    .fsync()
            }),
            Operation::Statfs => self.node(ino).and_then(|h| {
                let s = self.base.statfs(&h, b"")?;
                reply.statfs(&abi::Kstatfs {
                    blocks: s.blocks,
                    bfree: s.bfree,
                    bavail: s.bavail,
                    files: s.files,
                    ffree: s.ffree,
                    bsize: s.bsize as u32,
                    namelen: s.namelen as u32,
                    frsize: s.frsize as u32,
                    ..Default::default()
                });
                Ok(())
            }),
            // Extended attributes are the source's (a 9P server without
            // them answers EOPNOTSUPP). The node itself, never what a
            // symlink points to: the kernel has resolved the path.
            Operation::Getxattr { name, size } => self.node(ino).and_then(|h| {
                let v = self.ctx(req).getxattrat(&h, b"", name, XATTR_AT)?;
                reply.xattr(&v, size).map_err(Errno)
            }),
            Operation::Listxattr { size } => self.node(ino).and_then(|h| {
                let v = self.ctx(req).listxattrat(&h, b"", XATTR_AT)?;
                reply.xattr(&v, size).map_err(Errno)
            }),
            Operation::Setxattr { name, value, flags } => self.node(ino).and_then(|h| {
                self.ctx(req)
                    .setxattrat(&h, b"", name, value, flags, XATTR_AT)
            }),
            Operation::Removexattr { name } => self.node(ino).and_then(|h| {
                // The kernel removes a file's capability itself when a
                // user without CAP_FSETID writes or allocates it
                // (`cap_inode_killpriv`, no permission asked), and refuses
                // anyone else's removal before it reaches us: this one is
                // made with the daemon's credentials.
                if name == b"security.capability" {
                    return self.base.removexattrat(&h, b"", name, XATTR_AT);
                }
                self.ctx(req).removexattrat(&h, b"", name, XATTR_AT)
            }),
            Operation::Ioctl {
                fh,
                cmd,
                in_data,
                out_size,
            } if crate::fileattr::is_fileattr(cmd) => {
                self.fileattr(ino, fh, cmd, in_data, out_size).map(|body| {
                    reply.ioctl(
                        &abi::IoctlOut {
                            result: 0,
                            ..Default::default()
                        },
                        &body,
                    );
                })
            }
            Operation::Ioctl { cmd, out_size, .. } => self.ioctl(ino, cmd, out_size, reply),
            Operation::Access { mask } => self.node(ino).and_then(|h| {
                self.ctx(req)
                    .faccessat(&h, b"", mask as i32, libc::AT_EMPTY_PATH)
            }),
            Operation::Create {
                name,
                flags,
                mode,
                umask,
            } => with_umask(umask, || {
                self.create(req, ino, name, flags, mode & 0o7777, reply)
            }),
            Operation::Tmpfile { flags, mode, umask } => with_umask(umask, || {
                self.tmpfile(req, ino, flags, mode & 0o7777, reply)
            }),
            Operation::Interrupt { unique } => {
                self.interrupts.interrupt(unique);
                Ok(())
            }
            Operation::Destroy => Ok(()),
            Operation::Other(_) => Err(Errno::ENOSYS),
        };
        r.map_err(|e| e.0)
    }
}

impl WalkFuse {
    fn lookup(
        &self,
        req: &Request,
        parent: u64,
        name: &[u8],
        reply: Reply<'_>,
    ) -> Result<(), Errno> {
        let ctx = self.ctx(req);
        if name == b"." || name == b".." {
            // Only the kernel's export operations ask these (a file handle
            // of a forgotten node, a directory's parent).
            return match self.lookup_export(&ctx, parent, name) {
                Ok(a) => {
                    reply.entry(&self.entry_out(a));
                    Ok(())
                }
                Err(e) => Err(e),
            };
        }
        let r = Self::name(name).and_then(|n| self.lookup_node(&ctx, parent, n));
        let coherent = self.opts.cache == CachePolicy::Coherent;
        if let (true, Ok(_)) = (coherent, &r) {
            self.kc.handed_out(parent, name, true);
        }
        if let Ok(a) = &r {
            self.bare.looked_up(parent, a.mode);
        }
        match r {
            Err(Errno::ENOENT) if !self.opts.neg_ttl.is_zero() => {
                // A negative entry: node id 0, kept for the entry timeout
                // (short when it could not be invalidated).
                self.counters.negative_replies.fetch_add(1, Relaxed);
                let ttl =
                    if coherent && (self.degraded() || !self.kc.handed_out(parent, name, false)) {
                        self.opts.neg_ttl.min(DEGRADED_TTL)
                    } else {
                        self.opts.neg_ttl
                    };
                let e = abi::EntryOut {
                    entry_valid: ttl.as_secs(),
                    entry_valid_nsec: ttl.subsec_nanos(),
                    ..Default::default()
                };
                reply.entry(&e);
                Ok(())
            }
            Err(e) => {
                if e == Errno::ENOENT {
                    self.counters.negative_replies.fetch_add(1, Relaxed);
                }
                Err(e)
            }
            Ok(a) => {
                reply.entry(&self.entry_out(a));
                Ok(())
            }
        }
    }

    fn setattr(&self, req: &Request, ino: u64, s: &Setattr, reply: Reply<'_>) -> Result<(), Errno> {
        let ctx = self.ctx(req);
        let node = self.node(ino)?;
        let fd = &node;
        // The kernel writing back the times it keeps (write-back cache)
        // of a file removed meanwhile: nothing to change that anyone
        // could see, and no name left to reach it by.
        if self.writeback()
            && s.mode.is_none()
            && s.uid.is_none()
            && s.gid.is_none()
            && s.size.is_none()
        {
            let x = stat_of(&self.base, fd)?;
            if x.stx_nlink == 0 {
                // (Every unlink in cache=loose ends here: the kernel
                // writes back the ctime it set. One stat answers.)
                reply.attr(&self.attr_out(attr_of(ino, &x)));
                return Ok(());
            }
        }
        let e = libc::AT_EMPTY_PATH;
        // A truncate's FATTR_KILL_SUIDGID needs nothing more: the vfs's
        // truncate clears set-id bits by the caller's credentials, as
        // Linux does.
        if let Some(m) = s.mode {
            if self.only_kills_privs(&ctx, fd, m)? {
                self.base.fchmodat(fd, b"", m & 0o7777, e)?;
            } else {
                ctx.fchmodat(fd, b"", m & 0o7777, e)?;
            }
        }
        if s.uid.is_some() || s.gid.is_some() {
            ctx.fchownat(
                fd,
                b"",
                s.uid.unwrap_or(u32::MAX),
                s.gid.unwrap_or(u32::MAX),
                e | libc::AT_SYMLINK_NOFOLLOW,
            )?;
        }
        if let Some(len) = s.size {
            let len = i64::try_from(len).map_err(|_| Errno::EFBIG)?;
            // Set-id bits go as for a truncate by the caller.
            let by = WriteAs::As(ctx.creds());
            match s.fh.filter(|h| *h != 0) {
                Some(h) => self
                    .handles
                    .get(h)
                    .ok_or(Errno::EBADF)?
                    .ftruncate_by(len, by)?,
                None => {
                    // FATTR_FH with handle 0: the caller truncates a file
                    // it has open (zero-message open), and the kernel has
                    // checked the descriptor is writable. As with
                    // ftruncate(2), the file's mode is not asked again (a
                    // file created with mode 0 and truncated through its
                    // descriptor).
                    let who = if s.fh.is_some() { &self.base } else { &ctx };
                    who.reopen_file(fd, libc::O_WRONLY)?.ftruncate_by(len, by)?
                }
            }
        }
        let times = [time_set(s.atime), time_set(s.mtime)];
        if times != [None, None] {
            // With write-back caching the kernel keeps a file's times and
            // sends them as explicit times, as the caller: when it writes
            // them back, with a truncate, and for a utimensat(UTIME_NOW),
            // which a writer who does not own the file may do. Explicit
            // times are the owner's only in utimensat, so a caller who may
            // write the file gets them set with the daemon's credentials.
            // Under default_permissions the kernel has already refused a
            // non-owner's explicit times; without it, a writer's explicit
            // utimensat goes through in cache=loose (the kernel has turned
            // NOW into a time: the two cannot be told apart).
            let kernel_times = self.writeback()
                && !ctx.creds().is_root()
                && ctx
                    .faccessat(fd, b"", libc::W_OK, libc::AT_EMPTY_PATH)
                    .is_ok();
            let who: &Ctx = if kernel_times { &self.base } else { &ctx };
            who.utimensat(fd, b"", times, e | libc::AT_SYMLINK_NOFOLLOW)?;
        }
        reply.attr(&self.attr_out(self.attr(ino)?));
        Ok(())
    }

    fn readlink(&self, req: &Request, ino: u64, reply: Reply<'_>) -> Result<(), Errno> {
        let h = self.node(ino)?;
        let ctx = self.ctx(req);
        reply.data(libc::PATH_MAX as usize, |buf| {
            ctx.readlinkat_into(&h, b"", buf)
        })
    }

    fn open(&self, req: &Request, ino: u64, flags: i32, reply: Reply<'_>) -> Result<(), Errno> {
        if self.no_open() {
            return Err(Errno::ENOSYS);
        }
        let ctx = self.ctx(req);
        let node = self.node(ino)?;
        let f = self.open_flags(flags);
        let file = match ctx.reopen_file(&node, f) {
            // Write-only by permission: the kernel then writes whole pages
            // only where it has them.
            Err(Errno::EACCES) if flags & libc::O_ACCMODE == libc::O_WRONLY => {
                ctx.reopen_file(&node, (f & !libc::O_ACCMODE) | libc::O_WRONLY)
            }
            r => r,
        }?;
        let (open_flags, backing_id) = self.passthrough(ino, &file);
        reply.open(&abi::OpenOut {
            fh: self.handles.insert(file),
            open_flags,
            backing_id,
        });
        Ok(())
    }

    /// The open flags and backing id for open file `h` of node `ino`: a
    /// backing file where passthrough takes this open (passthrough.rs),
    /// else the cache flags.
    fn passthrough(&self, ino: u64, f: &OpenFile) -> (u32, i32) {
        if !self.pt.on() || kills_priv_on_write(f) {
            return (self.fopen_flags(ino), 0);
        }
        let file = f.host_file().ok().flatten();
        match self.pt.for_open(ino, file.as_deref()) {
            Some(id) => {
                // From now on the kernel writes the host file itself, a
                // shared mapping's writes included, which move its times
                // unseen: what the kernel holds of them goes, and while
                // it is backed each stat asks (attr_ttl_of).
                if f.flags() & libc::O_ACCMODE != libc::O_RDONLY {
                    if let Some(n) = self.kc.notifier.get() {
                        let _ = n.inval_inode(ino, -1, 0);
                    }
                }
                (fopen::PASSTHROUGH | self.noflush(ino), id)
            }
            None => (self.fopen_flags(ino), 0),
        }
    }

    fn flush(&self, ino: u64, fh: u64, lock_owner: u64) -> Result<(), Errno> {
        // A close drops its process's record locks on the file (after
        // the file's changes: the vfs carries them out first).
        if self.serves_locks && self.lock_owner_closing(ino, lock_owner) {
            self.lock_file(ino, fh)?
                .unlock_owner(LockOwner(lock_owner))?;
        }
        if !self.writes_behind || self.writeback() {
            if self.serves_locks {
                // Opens say NOFLUSH instead (locks.rs): ENOSYS would stop
                // every FLUSH, and with them the closes' unlocks.
                return Ok(());
            }
            // ENOSYS once makes the kernel stop asking, so a close costs
            // no round trip. Nothing is lost by it:
            // - a backend that completes every change before answering
            //   (a local directory) has nothing pending at close;
            // - with the write-back cache (cache=loose) the kernel still
            //   writes its dirty pages back at close and reports their
            //   WRITE errors there, and a failure met behind the caller
            //   reaches fsync, as on a local file system, whose close(2)
            //   reports nothing either.
            // A 9P source in cache=coherent or none keeps FLUSH: its
            // gathered writes reach the server at close, so whoever opens
            // the file next, anywhere, sees them (close-to-open, as NFS).
            return Err(Errno::ENOSYS);
        }
        // close(2): the file's gathered writes go out, and a failure one
        // of its changes met is reported (with cache=coherent after
        // waiting for them: close-to-open consistency as NFS keeps it).
        self.io_file(ino, fh, false)?.flush()
    }

    /// The lock a GETLK or SETLK asks about.
    fn lock_of(lk: &Lk) -> Result<FileLock, Errno> {
        Ok(FileLock {
            kind: LockKind::from_fcntl(lk.ty).ok_or(Errno::EINVAL)?,
            flavor: if lk.flock {
                LockFlavor::Flock
            } else {
                LockFlavor::Posix
            },
            start: lk.start.min(LOCK_EOF),
            end: lk.end.min(LOCK_EOF),
            pid: lk.pid,
        })
    }

    /// The open file a lock request with handle `fh` goes through: the
    /// handle's, or without one (no-open mode) the node's lock file,
    /// read-write where the daemon may (a write lock needs it).
    fn lock_file(&self, ino: u64, fh: u64) -> Result<OpenFile, Errno> {
        if fh != 0 {
            return self.handles.get(fh).ok_or(Errno::EBADF);
        }
        self.node_lock_file(ino, || {
            let node = self.node(ino)?;
            self.base
                .reopen_file(&node, libc::O_RDWR)
                .or_else(|_| self.base.reopen_file(&node, libc::O_RDONLY))
        })
    }

    /// SETLK, SETLKW: take, convert or drop a lock (locks.rs). A waiter
    /// gives up with EINTR when the kernel interrupts its request.
    fn setlk(&self, req: &Request, ino: u64, lk: &Lk, sleep: bool) -> Result<(), Errno> {
        if !self.serves_locks {
            return Err(Errno::ENOSYS);
        }
        let lock = Self::lock_of(lk)?;
        let f = self.lock_file(ino, lk.fh)?;
        let unique = req.unique;
        let cancelled = || self.interrupts.is_interrupted(unique);
        let wait = if sleep {
            LockWait::Until(&cancelled)
        } else {
            LockWait::No
        };
        let r = f.setlk(LockOwner(lk.owner), &lock, wait);
        self.interrupts.done(unique);
        r?;
        if lock.kind != LockKind::Unlock {
            self.lock_taken(ino, lk.owner, !lk.flock);
            // Another party may have changed the file while it held the
            // lock, and its report may not be here yet: the kernel's
            // attributes go (the size a program reads next), and its
            // pages (a passthrough file's pages are the host's own).
            if let Some(n) = self.kc.notifier.get() {
                let pages = if self.pt.backed(ino) { -1 } else { 0 };
                let _ = n.inval_inode(ino, pages, 0);
            }
        }
        Ok(())
    }

    /// GETLK: the lock of another owner in the way, or F_UNLCK.
    fn getlk(&self, ino: u64, lk: &Lk, reply: Reply<'_>) -> Result<(), Errno> {
        if !self.serves_locks {
            return Err(Errno::ENOSYS);
        }
        let lock = Self::lock_of(lk)?;
        let f = self.lock_file(ino, lk.fh)?;
        let out = match f.getlk(LockOwner(lk.owner), &lock)? {
            Some(l) => abi::LkOut {
                start: l.start,
                end: l.end,
                ty: l.kind.fcntl(),
                pid: l.pid,
            },
            None => abi::LkOut {
                start: lk.start,
                end: lk.end,
                ty: libc::F_UNLCK as u32,
                pid: 0,
            },
        };
        reply.lock(&out);
        Ok(())
    }

    fn readdir(&self, req: &Request, ino: u64, d: &DirRead, reply: Reply<'_>) -> Result<(), Errno> {
        let s = self.dir_slice(req, ino, d.fh, d.offset, true)?;
        let mut buf = reply.dir(d.size);
        for (i, e) in s.entries.iter().enumerate().skip(s.start) {
            // The inode number keeps `ls -i` and `find` consistent (a
            // readdir makes no lookup).
            if !buf.add(e.ino.max(1), s.offset(i), e.kind.mode_bits(), &e.name) {
                break;
            }
        }
        // The kernel asks until a reply is empty: that one ends the
        // listing (dropping it at the last full reply would list the
        // directory again for the empty one).
        if s.start >= s.entries.len() {
            self.listings.finished(&s);
        }
        Ok(())
    }

    fn readdirplus(
        &self,
        req: &Request,
        ino: u64,
        d: &DirRead,
        reply: Reply<'_>,
    ) -> Result<(), Errno> {
        let ctx = self.ctx(req);
        let bare = self.bare.bare_now();
        let s = self.dir_slice(req, ino, d.fh, d.offset, bare)?;
        let mut buf = reply.dir(d.size);
        let mut bare_files = 0;
        for (i, e) in s.entries.iter().enumerate().skip(s.start) {
            let name = &e.name[..];
            let dots = name == b"." || name == b"..";
            if bare && !dots {
                // Name, type and inode number; no node (bare.rs).
                let mode = e.kind.mode_bits();
                let none = abi::EntryOut::default();
                if !buf.add_plus(&none, e.ino.max(1), s.offset(i), mode, name) {
                    break;
                }
                bare_files += u64::from(mode & libc::S_IFMT != libc::S_IFDIR);
                continue;
            }
            let attr = if name == b"." {
                self.attr(ino)
            } else if name == b".." {
                // The kernel links no node for `..` (no lookup count): its
                // attributes only, with its inode number (readdir skips
                // entries whose d_ino is 0).
                self.node(ino).and_then(|h| {
                    let x: Statx = ctx.statx(
                        &h,
                        b"..",
                        libc::AT_SYMLINK_NOFOLLOW,
                        libc::STATX_BASIC_STATS,
                    )?;
                    Ok(attr_of(x.stx_ino.max(1), &x))
                })
            } else {
                self.lookup_node(&ctx, ino, name)
            };
            let Ok(a) = attr else { continue };
            let entry = self.entry_out(a);
            if !buf.add_plus(&entry, a.ino, s.offset(i), a.mode, name) {
                // The kernel did not take this entry: give back its count.
                if !dots {
                    self.forget_node(a.ino, 1);
                }
                break;
            }
        }
        if bare {
            self.bare.listed(ino, bare_files);
        }
        if s.start >= s.entries.len() {
            self.listings.finished(&s);
        }
        Ok(())
    }

    fn ioctl(&self, ino: u64, cmd: u32, out_size: u32, reply: Reply<'_>) -> Result<(), Errno> {
        if ino != ROOT {
            return Err(Errno::ENOTTY);
        }
        let body = match cmd {
            SYNC_IOCTL => {
                self.vfs.sync()?;
                Vec::new()
            }
            SETTLE_IOCTL => {
                // (The replay layer, where there is one, waits for its
                // replays before this.)
                self.vfs.settle_reports();
                Vec::new()
            }
            STATS_IOCTL => {
                let body = serde_json::to_vec(&self.stats()).unwrap_or_default();
                if body.len() > out_size as usize {
                    return Err(Errno::E2BIG);
                }
                body
            }
            _ => return Err(Errno::ENOTTY),
        };
        reply.ioctl(
            &abi::IoctlOut {
                result: body.len() as i32,
                ..Default::default()
            },
            &body,
        );
        Ok(())
    }

    fn create(
        &self,
        req: &Request,
        parent: u64,
        name: &[u8],
        flags: i32,
        mode: u32,
        reply: Reply<'_>,
    ) -> Result<(), Errno> {
        let ctx = self.ctx(req);
        let n = Self::name(name)?;
        let dir = self.node(parent)?;
        let asked = (flags | libc::O_CREAT) & !libc::O_NOCTTY;
        let mut f = asked;
        // Without opens (no_open), the descriptor a create opens becomes
        // the node's shared one for I/O at the kernel's offsets, which
        // needs it read-write and without O_APPEND; else the first write
        // would open the file again on the backend (a round trip).
        if self.writeback() || self.no_open() {
            // As in open_flags (a new file may be opened read-write
            // whatever its mode; an existing one may refuse it).
            f &= !libc::O_APPEND;
            if f & libc::O_ACCMODE == libc::O_WRONLY {
                f = (f & !libc::O_ACCMODE) | libc::O_RDWR;
            }
        }
        let (file, used) = match ctx.open_file(&dir, n, f, mode) {
            Err(Errno::EACCES) if f != asked => {
                let used = asked & !libc::O_APPEND;
                (ctx.open_file(&dir, n, used, mode)?, used)
            }
            r => (r?, f),
        };
        self.created(file, used, reply)
    }

    /// `O_TMPFILE` in directory `parent`: opened as `flags` asks (the
    /// kernel keeps the access mode and `O_EXCL`), answered as a create.
    fn tmpfile(
        &self,
        req: &Request,
        parent: u64,
        flags: i32,
        mode: u32,
        reply: Reply<'_>,
    ) -> Result<(), Errno> {
        let ctx = self.ctx(req);
        let dir = self.node(parent)?;
        let used = (flags & (libc::O_ACCMODE | libc::O_EXCL)) | libc::O_TMPFILE;
        let file = ctx.open_file(&dir, b".", used, mode)?;
        self.created(file, used, reply)
    }

    /// The answer to a CREATE (or TMPFILE) that opened `file` with the
    /// open flags `used`: its entry and its open.
    fn created(&self, file: OpenFile, used: i32, reply: Reply<'_>) -> Result<(), Errno> {
        // The node comes from what the create opened, not from a second
        // walk of the name.
        let node = file.handle()?;
        let x = file.statx(libc::STATX_BASIC_STATS)?;
        let a = attr_of(self.remember(node, &x), &x);
        let (open_flags, backing_id) = self.passthrough(a.ino, &file);
        let fh = if self.no_open() {
            // With zero-message opens the kernel never sends a release,
            // not even for a handle `create` gave it (it drops handles
            // silently once opens are off): a handle here would stay open
            // for ever. The new file's descriptor becomes the node's
            // shared one instead (bounded, closed when pushed out or
            // forgotten) and the kernel gets handle 0, as for opens.
            if used & libc::O_ACCMODE == libc::O_RDWR && used & libc::O_APPEND == 0 {
                self.set_io(a.ino, (None, Some(file)));
            }
            0
        } else {
            self.handles.insert(file)
        };
        reply.created(
            &self.entry_out(a),
            &abi::OpenOut {
                fh,
                open_flags,
                backing_id,
            },
        );
        Ok(())
    }
}
