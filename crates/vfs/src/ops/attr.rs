//! Attributes: `statx`/`fstat` (built once from one inode snapshot,
//! seed 004), `statfs`, and the changes `fchmodat`, `fchownat`,
//! `utimensat` with Linux's ownership rules.

use super::prelude::*;

impl crate::Inner {
    /// Ask the backend for the attributes of `node` (at `ino`) and cache
    /// them, after sending what was gathered for it (the backend runs a
    /// connection's requests after the changes sent before them). Not over
    /// attributes a change of ours cached meanwhile: those are newer (a
    /// write gathered while the question was out grew the size past the
    /// answer), and stay until the next question.
    pub(crate) fn refetch_attrs(&self, sb: usize, ino: IIdx, node: u64) -> Result<()> {
        // Sending a piece moves the generation: read it after.
        self.flush_file(sb, node)?;
        let gen = self.attr_gen.load(AtomicOrdering::Acquire);
        let attr = self.sb(sb)?.getattr(NodeId(node))?;
        let mut w = self.writer();
        if self.dc.inode(ino).map(|i| i.node.load(Relaxed)) == Some(node)
            && self.attr_gen.load(AtomicOrdering::Acquire) == gen
        {
            w.refresh(&self.dc, ino, &attr);
        }
        Ok(())
    }
}

impl Ctx {
    /// Attributes of the inode of `c`, refreshed from the backend when a
    /// change made them stale.
    pub(super) fn attrs(&self, c: Cur) -> Res<InodeSnap> {
        let inner = self.inner();
        let s = inner.dc.inode_snap(c.ino).ok_or(Step::Restart)?;
        // A file with writes gathered (writeback.rs) sends them before
        // anyone looks, and is then asked about.
        let flushed = inner.flushed_file(s.sb(), s.node)?;
        if !flushed && s.flags & I_STALE == 0 && !inner.sw.revalidate.load(AtomicOrdering::Relaxed)
        {
            return Ok(s);
        }
        self.refresh_attrs(c.ino, s)
    }

    #[inline(never)]
    pub(super) fn refresh_attrs(&self, ino: IIdx, s: InodeSnap) -> Res<InodeSnap> {
        let inner = self.inner();
        match inner.refetch_attrs(s.sb(), ino, s.node) {
            Ok(()) => {}
            // The inode was retired under us (a concurrent unlink released
            // it): walk again rather than report the backend's ESTALE.
            Err(_)
                if inner.dc.inode(ino).map(|i| i.node.load(Relaxed)) != Some(s.node)
                    || inner
                        .dc
                        .inode(ino)
                        .map(|i| i.flags.load(Relaxed) & I_ALLOCATED)
                        == Some(0) =>
            {
                return Err(Step::Restart);
            }
            Err(e) => return Err(e.into()),
        }
        inner.dc.inode_snap(ino).ok_or(Step::Restart)
    }

    /// What `h` refers to was changed outside the vfs (under FUSE
    /// passthrough the kernel writes straight to the host file): its
    /// cached attributes are stale, and the next stat asks the backend.
    pub fn changed_outside(&self, h: &Handle) -> Result<()> {
        self.run(|| {
            let inner = self.inner();
            let c = Cur::of(&inner.dc, self.fd_dentry(At::Handle(h))?)?;
            inner.writer().mark_stale(&inner.dc, c.ino);
            Ok(())
        })
    }

    /// `statx(dirfd, path, flags, mask)`.
    pub fn statx<'h>(
        &self,
        dirfd: impl Into<At<'h>>,
        path: &[u8],
        flags: i32,
        mask: u32,
    ) -> Result<Statx> {
        let mut st = Statx::default();
        self.statx_into(dirfd, path, flags, mask, &mut st)?;
        Ok(st)
    }

    /// `statx` into the caller's buffer: the result is built once, in
    /// place, from one inode snapshot (seed 004: no second copy). The
    /// descriptor form (`""` with `AT_EMPTY_PATH`) is a short inline path;
    /// anything with a path walks out of line.
    #[inline(always)]
    pub fn statx_into<'h>(
        &self,
        dirfd: impl Into<At<'h>>,
        path: &[u8],
        flags: i32,
        mask: u32,
        out: &mut Statx,
    ) -> Result<()> {
        const FD_FLAGS: i32 =
            libc::AT_EMPTY_PATH | libc::AT_NO_AUTOMOUNT | libc::AT_SYMLINK_NOFOLLOW;
        let dirfd = dirfd.into();
        if let At::Fd(fd) = dirfd {
            if path.is_empty()
                && fd >= 0
                && flags & libc::AT_EMPTY_PATH != 0
                && flags & !FD_FLAGS == 0
                && mask & (libc::STATX__RESERVED as u32) == 0
            {
                return self.fstatx_into_at(FileAt::Fd(fd), mask, out);
            }
        }
        self.statx_path(dirfd, path, flags, mask, out)
    }

    #[inline(never)]
    fn statx_path(
        &self,
        dirfd: At<'_>,
        path: &[u8],
        flags: i32,
        mask: u32,
        out: &mut Statx,
    ) -> Result<()> {
        const ALLOWED: i32 = libc::AT_SYMLINK_NOFOLLOW
            | libc::AT_EMPTY_PATH
            | libc::AT_NO_AUTOMOUNT
            | libc::AT_STATX_SYNC_TYPE;
        let bad = flags & !ALLOWED != 0
            || flags & libc::AT_STATX_SYNC_TYPE == libc::AT_STATX_SYNC_TYPE
            || mask & (libc::STATX__RESERVED as u32) != 0;
        if bad {
            return Err(Errno::EINVAL);
        }
        if let At::Fd(fd) = dirfd {
            if path.is_empty() && flags & libc::AT_EMPTY_PATH != 0 && fd != AT_FDCWD {
                return self.fstatx_into_at(FileAt::Fd(fd), mask, out);
            }
        }
        self.run(|| {
            let follow = flags & libc::AT_SYMLINK_NOFOLLOW == 0;
            let c = self.lookup_at(dirfd, path, follow, flags & libc::AT_EMPTY_PATH != 0)?;
            Statx::build_into(&self.attrs(c)?, mask, out);
            Ok(())
        })
    }

    /// `fstatat(dirfd, path, flags)` (`AT_SYMLINK_NOFOLLOW`, `AT_EMPTY_PATH`).
    pub fn fstatat<'h>(
        &self,
        dirfd: impl Into<At<'h>>,
        path: &[u8],
        flags: i32,
    ) -> Result<libc::stat> {
        check_at_flags(
            flags,
            libc::AT_SYMLINK_NOFOLLOW | libc::AT_EMPTY_PATH | libc::AT_NO_AUTOMOUNT,
        )?;
        Ok(self
            .statx(dirfd, path, flags, libc::STATX_BASIC_STATS)?
            .to_stat())
    }

    /// The inode snapshot behind a file: fd -> file -> inode with loads
    /// only (a writer busy with the file or its inode is waited out by
    /// the driver, out of line).
    #[inline(always)]
    fn fd_snap(&self, at: FileAt<'_>) -> Result<InodeSnap> {
        self.run(|| self.fd_snap_once(at))
    }

    #[inline(always)]
    fn fd_snap_once(&self, at: FileAt<'_>) -> Res<InodeSnap> {
        let inner = self.inner();
        let file = self.file(at)?;
        let seq = file.seq.read_begin().ok_or(Step::Restart)?;
        let ino = IIdx(file.inode.load(Relaxed));
        let s = inner.dc.inode_snap(ino).ok_or(Step::Restart)?;
        if file.seq.read_retry(seq) {
            return Err(Step::Restart);
        }
        let flushed = inner.flushed_file(s.sb(), s.node)?;
        if flushed || s.flags & I_STALE != 0 || inner.sw.revalidate.load(AtomicOrdering::Relaxed) {
            return self.refresh_attrs(ino, s);
        }
        Ok(s)
    }

    /// `statx(fd, "", AT_EMPTY_PATH, mask)` into the caller's buffer.
    #[inline(always)]
    pub(crate) fn fstatx_into_at(&self, at: FileAt<'_>, mask: u32, out: &mut Statx) -> Result<()> {
        Statx::build_into(&self.fd_snap(at)?, mask, out);
        Ok(())
    }

    /// `statx(fd, "", AT_EMPTY_PATH, mask)`.
    pub(crate) fn fstatx_at(&self, at: FileAt<'_>, mask: u32) -> Result<Statx> {
        let mut x = Statx::default();
        self.fstatx_into_at(at, mask, &mut x)?;
        Ok(x)
    }

    /// `fstat(fd)` into the caller's buffer.
    #[inline(always)]
    pub fn fstat_into(&self, fd: i32, out: &mut libc::stat) -> Result<()> {
        crate::stat::stat_into(&self.fd_snap(FileAt::Fd(fd))?, out);
        Ok(())
    }

    /// `fstat(fd)`.
    pub fn fstat(&self, fd: i32) -> Result<libc::stat> {
        // SAFETY: `struct stat` is plain old data; all-zero is valid.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        self.fstat_into(fd, &mut st)?;
        Ok(st)
    }

    /// The backend's own descriptor for the file `h` names (a host
    /// directory's `O_PATH` descriptor), for a server that asks the host
    /// kernel to hold others' access to it (lease.rs of the 9P server).
    /// `None` for a backend that has none (memory, a remote server).
    pub fn backend_fd(&self, h: &Handle) -> Result<Option<std::sync::Arc<std::os::fd::OwnedFd>>> {
        self.run(|| {
            let inner = self.inner();
            let c = Cur::of(&inner.dc, self.fd_dentry(At::Handle(h))?)?;
            let s = inner.dc.inode_snap(c.ino).ok_or(Step::Restart)?;
            let fs = inner.sb(s.sb())?;
            Ok(fs.host_files().and_then(|h| h.node_fd(NodeId(s.node))))
        })
    }

    /// `statfs` of the file system holding `path`.
    pub fn statfs<'h>(&self, dirfd: impl Into<At<'h>>, path: &[u8]) -> Result<StatFs> {
        let dirfd = dirfd.into();
        self.run(|| {
            let c = self.lookup_at(dirfd, path, true, true)?;
            let s = self.inner().dc.inode_snap(c.ino).ok_or(Step::Restart)?;
            Ok(self.inner().sb(s.sb())?.statfs(NodeId(s.node))?)
        })
    }

    /// Apply `set` to the node at `c` and refresh the cache from the result.
    pub(super) fn setattr(&self, c: Cur, set: &SetAttr) -> Res<()> {
        let _later = crate::writeback::SettleLater::new();
        let inner = self.inner();
        let s = inner.dc.inode_snap(c.ino).ok_or(Step::Restart)?;
        let fs = inner.sb(s.sb())?;
        if s.fresh() && inner.defers(&*fs) {
            if let Some((send, attr)) = crate::writeback::decide_setattr(set, &s.attr()) {
                if let Some(send) = send {
                    inner.setattr_behind(&*fs, s.sb(), s.node, send, c.d)?;
                }
                inner.changed_attrs(c.ino, s.node, &attr);
                return Ok(());
            }
        }
        // The backend decides: it must have what was gathered first.
        inner.flush_file(s.sb(), s.node)?;
        let attr = fs.setattr(NodeId(s.node), set)?;
        inner.changed_attrs(c.ino, s.node, &attr);
        Ok(())
    }

    /// `fchmodat(dirfd, path, mode, flags)`; `AT_SYMLINK_NOFOLLOW` on a
    /// symlink is `EOPNOTSUPP`, as glibc and fchmodat2 give it.
    pub fn fchmodat<'h>(
        &self,
        dirfd: impl Into<At<'h>>,
        path: &[u8],
        mode: u32,
        flags: i32,
    ) -> Result<()> {
        let dirfd = dirfd.into();
        check_at_flags(flags, libc::AT_SYMLINK_NOFOLLOW | libc::AT_EMPTY_PATH)?;
        self.run(|| {
            let follow = flags & libc::AT_SYMLINK_NOFOLLOW == 0;
            let c = self.lookup_at(dirfd, path, follow, flags & libc::AT_EMPTY_PATH != 0)?;
            let s = self.attrs(c)?;
            if s.is_symlink() {
                return Err(Errno::EOPNOTSUPP.into());
            }
            self.check_writable()?;
            let mode = policy::chmod_mode(&self.creds, &s, mode)?;
            self.setattr(
                c,
                &SetAttr {
                    mode: Some(mode),
                    ..SetAttr::default()
                },
            )
        })
    }

    /// What a write by these credentials does to the set-id bits of the
    /// file `at` refers to, done apart from the write: FUSE's
    /// `FUSE_WRITE_KILL_SUIDGID`, where the kernel writes for someone
    /// without `CAP_FSETID` through another's descriptor (or its own
    /// write-back). Set-user-id goes; set-group-id when group-executable
    /// or not the caller's group; nothing for root, as on a write.
    pub fn remove_privs<'h>(&self, at: impl Into<At<'h>>) -> Result<()> {
        let at = at.into();
        self.run(|| {
            let c = self.lookup_at(at, b"", false, true)?;
            Ok(self.kill_privs(c.ino)?)
        })
    }

    /// `fchownat(dirfd, path, uid, gid, flags)`; `u32::MAX` leaves an id.
    pub fn fchownat<'h>(
        &self,
        dirfd: impl Into<At<'h>>,
        path: &[u8],
        uid: u32,
        gid: u32,
        flags: i32,
    ) -> Result<()> {
        let dirfd = dirfd.into();
        check_at_flags(flags, libc::AT_SYMLINK_NOFOLLOW | libc::AT_EMPTY_PATH)?;
        self.run(|| {
            let follow = flags & libc::AT_SYMLINK_NOFOLLOW == 0;
            let c = self.lookup_at(dirfd, path, follow, flags & libc::AT_EMPTY_PATH != 0)?;
            let s = self.attrs(c)?;
            self.check_writable()?;
            policy::may_chown(&self.creds, &s, uid, gid)?;
            let set = SetAttr {
                uid: (uid != u32::MAX).then_some(uid),
                gid: (gid != u32::MAX).then_some(gid),
                ..SetAttr::default()
            };
            // A chown drops set-id bits of non-directories even when it
            // changes neither id (Linux's chown_common): that is a mode
            // change, which only the owner may make.
            let none = set.uid.is_none() && set.gid.is_none();
            if none && policy::chown_kills(&s) != 0 && !self.creds.owns(s.uid) {
                return Err(Errno::EPERM.into());
            }
            self.setattr(c, &set)?;
            let s = self.attrs(c)?;
            let kill = policy::chown_kills(&s);
            if kill != 0 {
                self.setattr(
                    c,
                    &SetAttr {
                        mode: Some(s.mode & 0o7777 & !kill),
                        ..SetAttr::default()
                    },
                )?;
            }
            Ok(())
        })
    }

    /// `utimensat(dirfd, path, [atime, mtime], flags)`; `None` is
    /// `UTIME_OMIT`.
    pub fn utimensat<'h>(
        &self,
        dirfd: impl Into<At<'h>>,
        path: &[u8],
        times: [Option<TimeSet>; 2],
        flags: i32,
    ) -> Result<()> {
        let dirfd = dirfd.into();
        check_at_flags(flags, libc::AT_SYMLINK_NOFOLLOW | libc::AT_EMPTY_PATH)?;
        self.run(|| {
            let follow = flags & libc::AT_SYMLINK_NOFOLLOW == 0;
            let c = self.lookup_at(dirfd, path, follow, flags & libc::AT_EMPTY_PATH != 0)?;
            let s = self.attrs(c)?;
            if times == [None, None] {
                return Ok(());
            }
            self.check_writable()?;
            let explicit = times.iter().any(|t| matches!(t, Some(TimeSet::At(_))));
            let acl = self.acl_for(&s)?;
            policy::may_set_times(&self.creds, &s, acl::access(&acl), explicit)?;
            self.setattr(
                c,
                &SetAttr {
                    atime: times[0],
                    mtime: times[1],
                    ..SetAttr::default()
                },
            )
        })
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use crate::tests_util::{mem_vfs, user, with_dirs};
    use crate::{Errno, AT_FDCWD};
    use std::sync::atomic::Ordering;

    #[test]
    fn a_change_of_attributes_is_cached_and_moves_the_generations() {
        let vfs = mem_vfs("");
        let ctx = with_dirs(&vfs, &["/d"]);
        let gens = || {
            (
                vfs.inner.ns_gen.load(Ordering::Acquire),
                vfs.inner.attr_gen.load(Ordering::Acquire),
            )
        };
        let (ns, attr) = gens();
        ctx.fchmodat(AT_FDCWD, b"/d", 0o700, 0).expect("chmod");
        let st = ctx
            .statx(AT_FDCWD, b"/d", 0, libc::STATX_MODE)
            .expect("stat");
        assert_eq!(st.stx_mode as u32 & 0o7777, 0o700);
        let (ns2, attr2) = gens();
        assert!(ns2 > ns && attr2 > attr);
        // A user who may no longer search it is told so from the cache.
        let user = vfs.context(user(1000, 1000, &[]));
        assert_eq!(user.faccessat(AT_FDCWD, b"/d/x", 0, 0), Err(Errno::EACCES));
        assert_eq!(user.fchmodat(AT_FDCWD, b"/d", 0o777, 0), Err(Errno::EPERM));
    }

    #[test]
    fn fstat_of_a_written_file_sees_the_new_size() {
        let vfs = mem_vfs("");
        let ctx = with_dirs(&vfs, &["/d"]);
        let fd = ctx
            .openat(AT_FDCWD, b"/d/f", libc::O_CREAT | libc::O_RDWR, 0o644)
            .expect("create");
        assert_eq!(ctx.fstat(fd).map(|s| s.st_size), Ok(0));
        ctx.write(fd, b"12345").expect("write");
        assert_eq!(ctx.fstat(fd).map(|s| s.st_size), Ok(5));
        ctx.ftruncate(fd, 2).expect("truncate");
        assert_eq!(ctx.fstatx(fd, libc::STATX_SIZE).map(|s| s.stx_size), Ok(2));
        ctx.close(fd).expect("close");
        assert_eq!(ctx.fstat(fd).map(|_| ()), Err(Errno::EBADF));
    }
}
