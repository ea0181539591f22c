//! Resolving paths for the calls (where a walk starts, the whole-path
//! cache in front of it, a parent and its last name, one child), and the
//! calls that only look: `faccessat`, `readlinkat`, a 9P walk, the parent
//! of a descriptor.

use super::prelude::*;

impl Ctx {
    /// The dentry a descriptor or handle refers to (`EBADF` for a handle
    /// of another vfs).
    pub(super) fn fd_dentry(&self, at: At<'_>) -> Res<DIdx> {
        match at {
            At::Fd(fd) => {
                let file = self.fds.get(fd).ok_or(Errno::EBADF)?;
                Ok(DIdx(file.dentry.load(Relaxed)))
            }
            At::File(f) => {
                let file = f.file_in(&self.vfs).ok_or(Errno::EBADF)?;
                let file = self.file(FileAt::Open(file))?;
                Ok(DIdx(file.dentry.load(Relaxed)))
            }
            At::Handle(h) => Ok(h.dentry_in(&self.vfs).ok_or(Errno::EBADF)?),
        }
    }

    /// Where a walk of `path` relative to `dirfd` starts.
    pub(super) fn start_of(&self, dirfd: At<'_>, path: &[u8]) -> Res<DIdx> {
        if dirfd.is_cwd() || path.first() == Some(&b'/') && !self.beneath {
            return Ok(self.inner().root);
        }
        let d = self.fd_dentry(dirfd)?;
        if !path.is_empty() {
            let s = self.inner().dc.snap(d).ok_or(Step::Restart)?;
            if s.flags & D_DIR == 0 {
                return Err(Errno::ENOTDIR.into());
            }
        }
        Ok(d)
    }

    pub(super) fn nd(&self, start: DIdx, flags: u32) -> Nameidata<'_> {
        let (root, flags) = if self.beneath {
            (start, flags | LOOKUP_BENEATH)
        } else {
            (self.inner().root, flags)
        };
        Nameidata::new(self.inner(), &self.creds, root, start, flags)
    }

    /// Resolve `path` from `dirfd`. `AT_EMPTY_PATH` with an empty path
    /// names `dirfd` itself.
    pub(super) fn lookup_at(
        &self,
        dirfd: At<'_>,
        path: &[u8],
        follow: bool,
        empty_ok: bool,
    ) -> Res<Cur> {
        if path.is_empty() {
            if !empty_ok {
                return Err(Errno::ENOENT.into());
            }
            let d = if dirfd.is_cwd() {
                self.inner().root
            } else {
                self.fd_dentry(dirfd)?
            };
            return Cur::of(&self.inner().dc, d);
        }
        let start = self.start_of(dirfd, path)?;
        let flags = if follow { LOOKUP_FOLLOW } else { 0 };
        let inner = self.inner();
        let sw = &inner.sw;
        let usable = sw.pathcache.load(AtomicOrdering::Relaxed)
            && sw.fastpath.load(AtomicOrdering::Relaxed)
            && sw.fastperm.load(AtomicOrdering::Relaxed)
            && sw.cache_symlinks.load(AtomicOrdering::Relaxed)
            && path.len() <= pathcache::MAX_PATH;
        if !usable {
            return self.nd(start, flags).walk_full(path);
        }
        // The generation is read before the walk: an answer is filed under
        // the generation it may predate, never a later one.
        let gen = inner.pc_gen();
        let beneath = if self.beneath { LOOKUP_BENEATH } else { 0 };
        let key = pathcache::key(start, self.cred_id, flags | beneath);
        let h = pathcache::hash(key, path);
        match inner.pc.get(h, key, path, gen) {
            Some(Cached::Found { d, seq, flags, ino }) if inner.dc.unchanged_at(d, seq) => {
                return Ok(Cur { d, seq, flags, ino });
            }
            Some(Cached::Errno(e)) => return Err(Errno(e).into()),
            _ => {}
        }
        self.lookup_at_fill(start, flags, path, (gen, key, h))
    }

    /// A path-cache miss: walk, and remember the answer.
    #[inline(never)]
    fn lookup_at_fill(
        &self,
        start: DIdx,
        flags: u32,
        path: &[u8],
        slot: (u64, u64, u64),
    ) -> Res<Cur> {
        let (gen, key, h) = slot;
        let inner = self.inner();
        let r = self.nd(start, flags).walk_full(path);
        let what = match r {
            Ok(c) => Some(Cached::Found {
                d: c.d,
                seq: c.seq,
                flags: c.flags,
                ino: c.ino,
            }),
            // A cached ENOENT is a negative entry: only when those are kept
            // until invalidated.
            Err(Step::Err(Errno::ENOENT)) => (inner.sw.negtimeout.load(AtomicOrdering::Relaxed)
                == -1)
                .then_some(Cached::Errno(libc::ENOENT)),
            Err(Step::Err(
                e @ (Errno::ENOTDIR
                | Errno::EACCES
                | Errno::ELOOP
                | Errno::ENAMETOOLONG
                | Errno::EXDEV),
            )) => Some(Cached::Errno(e.0)),
            Err(_) => None,
        };
        if let Some(what) = what {
            inner.pc.put(h, key, path, gen, what);
        }
        r
    }

    /// Resolve all but the last component.
    pub(super) fn lookup_parent(&self, dirfd: At<'_>, path: &[u8]) -> Res<(Cur, Last, bool)> {
        let start = self.start_of(dirfd, path)?;
        self.lookup_parent_from(start, path)
    }

    /// `lookup_parent` starting at a dentry (a symlink's directory).
    pub(super) fn lookup_parent_from(&self, start: DIdx, path: &[u8]) -> Res<(Cur, Last, bool)> {
        match self.nd(start, 0).walk(path, true)? {
            Walked::Parent {
                dir,
                last,
                trailing,
            } => Ok((dir, last, trailing)),
            Walked::Found(_) => Err(Errno::EIO.into()),
        }
    }

    /// The child `name` of directory `dir`: `None` if it does not exist.
    pub(super) fn lookup_child(&self, dir: Cur, name: &[u8]) -> Res<Option<Cur>> {
        self.lookup_child_flags(dir, name, 0)
    }

    /// The last name of unlink, rmdir or rename: a mount point stays the
    /// covered directory (whose permissions count), as in Linux.
    pub(super) fn lookup_victim(&self, dir: Cur, name: &[u8]) -> Res<Option<Cur>> {
        self.lookup_child_flags(dir, name, LOOKUP_NO_CROSS)
    }

    pub(super) fn lookup_child_flags(&self, dir: Cur, name: &[u8], flags: u32) -> Res<Option<Cur>> {
        let mut nd = self.nd(dir.d, flags);
        nd.cur = dir;
        // A one-component walk from `dir` (already permission-checked).
        match nd.walk_child(name) {
            Ok(c) => Ok(Some(c)),
            Err(Step::Err(Errno::ENOENT)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Resolve a directory for `mount`.
    pub(crate) fn resolve_dir(&self, dirfd: At<'_>, path: &[u8]) -> Result<DIdx> {
        self.run(|| {
            let c = self.lookup_at(dirfd, path, true, false)?;
            if !c.is_dir() {
                return Err(Errno::ENOTDIR.into());
            }
            Ok(c.d)
        })
    }

    /// Walk `names` one component each from `dirfd`, never following a
    /// symlink (a 9P `Twalk`), in one vfs walk. `out` gets each name
    /// reached. When every name was reached the result is an `O_PATH`
    /// descriptor of the last one (of `dirfd` itself for no names);
    /// `None` for a partial walk. The first name's failure is the error.
    pub fn walk_names<'h>(
        &self,
        dirfd: impl Into<At<'h>>,
        names: &[&[u8]],
        out: &mut Vec<NameStep>,
    ) -> Result<Option<i32>> {
        let dirfd = dirfd.into();
        self.run(|| {
            let Some(last) = self.walk_steps(dirfd, names, out)? else {
                return Ok(None);
            };
            self.open_cur::<super::open::ToTable>(last, libc::O_PATH | libc::O_NOFOLLOW, None)
                .map(Some)
        })
    }

    /// [`Ctx::walk_names`], ending in a [`Handle`] of the last name
    /// rather than a descriptor (a 9P fid, a FUSE node).
    pub fn walk_handle<'h>(
        &self,
        dirfd: impl Into<At<'h>>,
        names: &[&[u8]],
        out: &mut Vec<NameStep>,
    ) -> Result<Option<Handle>> {
        let dirfd = dirfd.into();
        self.run(|| {
            let Some(last) = self.walk_steps(dirfd, names, out)? else {
                return Ok(None);
            };
            Handle::pin(&self.vfs.inner, last)
                .map(Some)
                .ok_or(Step::Restart)
        })
    }

    /// A handle of what `path` names from `dirfd`, without following a
    /// symlink in the last component (what an `O_PATH | O_NOFOLLOW` open
    /// would refer to).
    pub fn handle<'h>(&self, dirfd: impl Into<At<'h>>, path: &[u8]) -> Result<Handle> {
        let dirfd = dirfd.into();
        self.run(|| {
            let c = self.lookup_at(dirfd, path, false, false)?;
            Handle::pin(&self.vfs.inner, c).ok_or(Step::Restart)
        })
    }

    /// A handle of what descriptor `fd` (or an open file) refers to.
    pub fn handle_of<'h>(&self, fd: impl Into<At<'h>>) -> Result<Handle> {
        let fd = fd.into();
        self.run(|| {
            let c = Cur::of(&self.inner().dc, self.fd_dentry(fd)?)?;
            Handle::pin(&self.vfs.inner, c).ok_or(Step::Restart)
        })
    }

    /// The walk of [`Ctx::walk_names`]: `out` filled, and the last name
    /// reached when all were.
    fn walk_steps(
        &self,
        dirfd: At<'_>,
        names: &[&[u8]],
        out: &mut Vec<NameStep>,
    ) -> Res<Option<Cur>> {
        {
            out.clear();
            let start = if dirfd.is_cwd() {
                self.inner().root
            } else {
                self.fd_dentry(dirfd)?
            };
            let mut curs = Vec::with_capacity(names.len());
            let mut nd = self.nd(start, 0);
            nd.walk_names(names, &mut curs)?;
            for &c in &curs {
                let s = self.attrs(c)?;
                out.push(NameStep {
                    ino: s.ino,
                    mode: s.mode,
                    born: s.btime,
                });
            }
            if curs.len() < names.len() {
                return Ok(None);
            }
            match curs.last() {
                Some(&c) => Ok(Some(c)),
                None => Cur::of(&self.inner().dc, start).map(Some),
            }
        }
    }

    /// The directory holding what `fd` refers to, as a handle, and its
    /// name there: a 9P `Tremove` or `Trename` names a
    /// file by its fid alone. `EBUSY` for the root and for the root of a
    /// mount (which has no name in the tree it is mounted on here).
    pub fn parent_of<'h>(&self, fd: impl Into<At<'h>>) -> Result<(Handle, Vec<u8>)> {
        let fd = fd.into();
        self.run(|| {
            let d = self.fd_dentry(fd)?;
            let dc = &self.inner().dc;
            let s = dc.snap(d).ok_or(Step::Restart)?;
            if d == self.inner().root || s.flags & D_MOUNTROOT != 0 {
                return Err(Errno::EBUSY.into());
            }
            if s.parent == d {
                // Disconnected (found by file id): no name known here.
                return Err(Errno::ESTALE.into());
            }
            let name = dc.name_of(d);
            // A child pins its parent, so the parent index is live; the
            // name and parent belong together if no rename came between.
            let p = Cur::of(dc, s.parent)?;
            if !dc.unchanged_at(d, s.seq) {
                return Err(Step::Restart);
            }
            let parent = Handle::pin(&self.vfs.inner, p).ok_or(Step::Restart)?;
            Ok((parent, name))
        })
    }

    /// `faccessat2(dirfd, path, mode, flags)`; flags `AT_EACCESS`,
    /// `AT_SYMLINK_NOFOLLOW`, `AT_EMPTY_PATH`.
    pub fn faccessat<'h>(
        &self,
        dirfd: impl Into<At<'h>>,
        path: &[u8],
        mode: i32,
        flags: i32,
    ) -> Result<()> {
        let dirfd = dirfd.into();
        check_at_flags(
            flags,
            libc::AT_EACCESS | libc::AT_SYMLINK_NOFOLLOW | libc::AT_EMPTY_PATH,
        )?;
        if mode & !7 != 0 {
            return Err(Errno::EINVAL);
        }
        self.run(|| {
            let follow = flags & libc::AT_SYMLINK_NOFOLLOW == 0;
            let c = self.lookup_at(dirfd, path, follow, flags & libc::AT_EMPTY_PATH != 0)?;
            if mode == libc::F_OK {
                return Ok(());
            }
            let s = self.inner().dc.inode_snap(c.ino).ok_or(Step::Restart)?;
            if mode & libc::W_OK != 0
                && matches!(
                    FileType::from_mode(s.mode),
                    Some(FileType::Regular | FileType::Directory | FileType::Symlink)
                )
            {
                self.check_writable()?;
            }
            self.permission(&s, mode as u32)
        })
    }

    /// `readlinkat` into `buf`: the number of bytes stored (truncated to
    /// the buffer, as readlink(2) does).
    pub fn readlinkat_into<'h>(
        &self,
        dirfd: impl Into<At<'h>>,
        path: &[u8],
        buf: &mut [u8],
    ) -> Result<usize> {
        let dirfd = dirfd.into();
        if buf.is_empty() {
            return Err(Errno::EINVAL);
        }
        self.run(|| {
            let c = self.lookup_at(dirfd, path, false, true)?;
            if !c.is_symlink() {
                // An empty path names dirfd itself, which is a symlink
                // only when opened O_PATH|O_NOFOLLOW: anything else has
                // no link to read there (Linux's do_readlinkat).
                return Err(if path.is_empty() {
                    Errno::ENOENT
                } else {
                    Errno::EINVAL
                }
                .into());
            }
            let inner = self.inner();
            if inner.sw.cache_symlinks.load(AtomicOrdering::Relaxed) {
                if let Some((n, _)) = namei::read_cached_link(inner, c.ino, buf) {
                    return Ok(n);
                }
            }
            let body = namei::get_link(inner, c)?;
            let n = body.len().min(buf.len());
            buf[..n].copy_from_slice(&body[..n]);
            Ok(n)
        })
    }

    /// `readlinkat`, returning the whole body.
    pub fn readlinkat<'h>(&self, dirfd: impl Into<At<'h>>, path: &[u8]) -> Result<Vec<u8>> {
        let mut buf = vec![0u8; walkfs_fsapi::PATH_MAX];
        let n = self.readlinkat_into(dirfd, path, &mut buf)?;
        buf.truncate(n);
        Ok(buf)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use crate::tests_util::{mem_vfs, with_dirs};
    use crate::{Errno, AT_FDCWD};

    #[test]
    fn remembered_paths_follow_renames() {
        let vfs = mem_vfs("");
        let ctx = with_dirs(&vfs, &["/a", "/a/b"]);
        for _ in 0..3 {
            assert_eq!(ctx.faccessat(AT_FDCWD, b"/a/b", 0, 0), Ok(()));
            assert_eq!(ctx.faccessat(AT_FDCWD, b"/z/b", 0, 0), Err(Errno::ENOENT));
        }
        ctx.renameat2(AT_FDCWD, b"/a", AT_FDCWD, b"/z", 0)
            .expect("rename");
        assert_eq!(ctx.faccessat(AT_FDCWD, b"/a/b", 0, 0), Err(Errno::ENOENT));
        assert_eq!(ctx.faccessat(AT_FDCWD, b"/z/b", 0, 0), Ok(()));
    }

    #[test]
    fn nine_p_walks_stop_at_the_first_missing_name() {
        let vfs = mem_vfs("");
        let ctx = with_dirs(&vfs, &["/a", "/a/b"]);
        let mut out = Vec::new();
        let fd = ctx
            .walk_names(AT_FDCWD, &[b"a", b"b"], &mut out)
            .expect("walk");
        assert!(fd.is_some());
        assert_eq!(out.len(), 2);
        assert!(out.iter().all(|s| s.mode & libc::S_IFMT == libc::S_IFDIR));
        assert_eq!(
            ctx.walk_names(AT_FDCWD, &[b"a", b"nope"], &mut out),
            Ok(None)
        );
        assert_eq!(out.len(), 1);
        let (pfd, name) = ctx.parent_of(fd.expect("fd")).expect("parent");
        assert_eq!(name, b"b");
        assert_eq!(ctx.parent_of(&pfd).map(|p| p.1), Ok(b"a".to_vec()));
    }
}
