//! The calls a program makes (`faccessat`, `statx`, `openat`, `renameat2`,
//! ...), on a [`Ctx`]: one caller's credentials and descriptors over a
//! shared [`Vfs`]. Errors and their order follow Linux (fs/namei.c,
//! fs/open.c, fs/stat.c), so the same calls on a host directory give the
//! same answers directly and through walkfs.

use std::sync::atomic::Ordering as AtomicOrdering;

use walkfs_fsapi::{
    DirEntry, Errno, FileHandle, FileType, NodeId, OpenFlags, Owner, Result, SetAttr, StatFs,
    TimeSet, Timespec, RENAME_EXCHANGE, RENAME_NOREPLACE,
};

use crate::dcache::*;
use crate::file::{FdTable, NO_HANDLE};
use crate::namei::{
    self, Cur, Last, Nameidata, Walked, LOOKUP_BENEATH, LOOKUP_FOLLOW, LOOKUP_NO_CROSS, RETRY,
};
use crate::pathcache::{self, Cached};
use crate::perm::{self, Creds, MAY_EXEC, MAY_READ, MAY_WRITE};
use crate::stat::Statx;
use crate::sync::Ordering::Relaxed;
use crate::{Inner, Vfs};
use std::sync::Arc;

/// "The current directory": for a [`Ctx`], its root.
pub const AT_FDCWD: i32 = libc::AT_FDCWD;

/// One directory entry as `getdents64` reports it.
pub type DirEntryOut = DirEntry;

/// Flags `openat` accepts (others are ignored, as Linux ignores them).
const O_ACCMODE: i32 = libc::O_ACCMODE;

/// One caller of a [`Vfs`]: credentials, descriptors, and the calls.
/// `/` is the vfs root and `..` never climbs above it.
pub struct Ctx {
    vfs: Vfs,
    creds: Creds,
    /// `creds` interned: the path cache keys on it.
    cred_id: u32,
    /// Shared with the contexts [`Ctx::with_creds`] made from this one.
    fds: Arc<FdTable>,
    beneath: bool,
}

/// One name a [`Ctx::walk_names`] stepped onto.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NameStep {
    /// `st_ino`.
    pub ino: u64,
    /// `st_mode` (type and permission bits).
    pub mode: u32,
}

/// Run `f` again while it asks for an internal retry.
fn retry<T>(mut f: impl FnMut() -> Result<T>) -> Result<T> {
    let mut b = crate::backoff::Backoff::new();
    loop {
        match f() {
            Err(RETRY) if b.snooze() => continue,
            Err(RETRY) => return Err(Errno::EAGAIN),
            r => return r,
        }
    }
}

fn check_at_flags(flags: i32, allowed: i32) -> Result<()> {
    if flags & !allowed != 0 {
        Err(Errno::EINVAL)
    } else {
        Ok(())
    }
}

impl Drop for Ctx {
    fn drop(&mut self) {
        // The last context sharing the table closes what is left open.
        let fds = std::mem::replace(&mut self.fds, Arc::new(FdTable::new(0)));
        if let Some(table) = Arc::into_inner(fds) {
            self.fds = Arc::new(table);
            for fd in self.fds.open_fds() {
                let _ = self.close(fd);
            }
        }
    }
}

impl Ctx {
    pub(crate) fn new(vfs: Vfs, creds: Creds, max_fds: usize) -> Ctx {
        let cred_id = vfs.inner.cred_ids.id(&creds);
        let fds = Arc::new(FdTable::new(max_fds));
        Ctx {
            vfs,
            creds,
            cred_id,
            fds,
            beneath: false,
        }
    }

    pub fn vfs(&self) -> &Vfs {
        &self.vfs
    }

    pub fn creds(&self) -> &Creds {
        &self.creds
    }

    /// Another context with `creds` that shares this one's descriptors, as
    /// threads of one process with different filesystem ids share their
    /// descriptor table (a file server acting for several users on one
    /// connection).
    pub fn with_creds(&self, creds: Creds) -> Ctx {
        Ctx {
            vfs: self.vfs.clone(),
            cred_id: self.vfs.inner.cred_ids.id(&creds),
            creds,
            fds: Arc::clone(&self.fds),
            beneath: self.beneath,
        }
    }

    /// Walk `names` one component each from `dirfd`, never following a
    /// symlink (a 9P `Twalk`), in one vfs walk. `out` gets each name
    /// reached. When every name was reached the result is an `O_PATH`
    /// descriptor of the last one (of `dirfd` itself for no names);
    /// `None` for a partial walk. The first name's failure is the error.
    pub fn walk_names(
        &self,
        dirfd: i32,
        names: &[&[u8]],
        out: &mut Vec<NameStep>,
    ) -> Result<Option<i32>> {
        retry(|| {
            out.clear();
            let start = if dirfd == AT_FDCWD {
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
                });
            }
            if curs.len() < names.len() {
                return Ok(None);
            }
            let last = match curs.last() {
                Some(&c) => c,
                None => Cur::from_snap(self.inner().dc.snap(start).ok_or(RETRY)?),
            };
            self.open_cur(last, libc::O_PATH | libc::O_NOFOLLOW, None)
                .map(Some)
        })
    }

    /// Open what descriptor `fd` refers to again, with `flags` (what
    /// `open("/proc/self/fd/N")` does, with the permission checks of an
    /// open and without following a symlink `fd` names).
    pub fn reopen(&self, fd: i32, flags: i32) -> Result<i32> {
        if flags & libc::O_CREAT != 0 {
            return Err(Errno::EINVAL);
        }
        if flags & libc::O_PATH == 0 && flags & O_ACCMODE == O_ACCMODE {
            return Err(Errno::EINVAL);
        }
        retry(|| {
            let d = self.fd_dentry(fd)?;
            let c = Cur::from_snap(self.inner().dc.snap(d).ok_or(RETRY)?);
            self.open_cur(c, flags, None)
        })
    }

    /// The directory holding what `fd` refers to, as an `O_PATH`
    /// descriptor, and its name there: a 9P `Tremove` or `Trename` names a
    /// file by its fid alone. `EBUSY` for the root and for the root of a
    /// mount (which has no name in the tree it is mounted on here).
    pub fn parent_of(&self, fd: i32) -> Result<(i32, Vec<u8>)> {
        retry(|| {
            let d = self.fd_dentry(fd)?;
            let dc = &self.inner().dc;
            let s = dc.snap(d).ok_or(RETRY)?;
            if d == self.inner().root || s.flags & D_MOUNTROOT != 0 {
                return Err(Errno::EBUSY);
            }
            let name = dc.name_of(d);
            // A child pins its parent, so the parent index is live; the
            // name and parent belong together if no rename came between.
            let p = Cur::from_snap(dc.snap(s.parent).ok_or(RETRY)?);
            if dc.snap(d).map(|x| x.seq) != Some(s.seq) {
                return Err(RETRY);
            }
            let pfd = self.open_cur(p, libc::O_PATH | libc::O_DIRECTORY, None)?;
            Ok((pfd, name))
        })
    }

    /// Act with other credentials from now on (checks and new owners).
    pub fn set_creds(&mut self, creds: Creds) {
        self.cred_id = self.vfs.inner.cred_ids.id(&creds);
        self.creds = creds;
    }

    /// Confine every walk RESOLVE_BENEATH-style: `..` above the starting
    /// directory, absolute paths and absolute symlinks fail with `EXDEV`
    /// instead of being clamped at the root.
    pub fn set_beneath(&mut self, on: bool) {
        self.beneath = on;
    }

    fn inner(&self) -> &Inner {
        &self.vfs.inner
    }

    // ---- walking ------------------------------------------------------

    /// The dentry a descriptor refers to.
    fn fd_dentry(&self, fd: i32) -> Result<DIdx> {
        let file = self.fds.get(fd).ok_or(Errno::EBADF)?;
        Ok(file.dentry.load(Relaxed))
    }

    /// Where a walk of `path` relative to `dirfd` starts.
    fn start_of(&self, dirfd: i32, path: &[u8]) -> Result<DIdx> {
        if dirfd == AT_FDCWD || path.first() == Some(&b'/') && !self.beneath {
            return Ok(self.inner().root);
        }
        let d = self.fd_dentry(dirfd)?;
        if !path.is_empty() {
            let s = self.inner().dc.snap(d).ok_or(RETRY)?;
            if s.flags & D_DIR == 0 {
                return Err(Errno::ENOTDIR);
            }
        }
        Ok(d)
    }

    fn nd(&self, start: DIdx, flags: u32) -> Nameidata<'_> {
        let (root, flags) = if self.beneath {
            (start, flags | LOOKUP_BENEATH)
        } else {
            (self.inner().root, flags)
        };
        Nameidata::new(self.inner(), &self.creds, root, start, flags)
    }

    /// Resolve `path` from `dirfd`. `AT_EMPTY_PATH` with an empty path
    /// names `dirfd` itself.
    fn lookup_at(&self, dirfd: i32, path: &[u8], follow: bool, empty_ok: bool) -> Result<Cur> {
        if path.is_empty() {
            if !empty_ok {
                return Err(Errno::ENOENT);
            }
            let d = if dirfd == AT_FDCWD {
                self.inner().root
            } else {
                self.fd_dentry(dirfd)?
            };
            let s = self.inner().dc.snap(d).ok_or(RETRY)?;
            return Ok(Cur {
                d,
                seq: s.seq,
                flags: s.flags,
                ino: s.target,
            });
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
            Some(Cached::Found { d, seq, flags, ino })
                if inner.dc.dentry(d).map(|x| x.seq.raw()) == Some(seq) =>
            {
                return Ok(Cur { d, seq, flags, ino });
            }
            Some(Cached::Errno(e)) => return Err(Errno(e)),
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
    ) -> Result<Cur> {
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
            Err(Errno::ENOENT) => (inner.sw.negtimeout.load(AtomicOrdering::Relaxed) == -1)
                .then_some(Cached::Errno(libc::ENOENT)),
            Err(
                e @ (Errno::ENOTDIR
                | Errno::EACCES
                | Errno::ELOOP
                | Errno::ENAMETOOLONG
                | Errno::EXDEV),
            ) => Some(Cached::Errno(e.0)),
            Err(_) => None,
        };
        if let Some(what) = what {
            inner.pc.put(h, key, path, gen, what);
        }
        r
    }

    /// Resolve all but the last component.
    fn lookup_parent(&self, dirfd: i32, path: &[u8]) -> Result<(Cur, Last, bool)> {
        let start = self.start_of(dirfd, path)?;
        match self.nd(start, 0).walk(path, true)? {
            Walked::Parent {
                dir,
                last,
                trailing,
            } => Ok((dir, last, trailing)),
            Walked::Found(_) => Err(Errno::EIO),
        }
    }

    /// The child `name` of directory `dir`: `None` if it does not exist.
    fn lookup_child(&self, dir: Cur, name: &[u8]) -> Result<Option<Cur>> {
        self.lookup_child_flags(dir, name, 0)
    }

    /// The last name of unlink, rmdir or rename: a mount point stays the
    /// covered directory (whose permissions count), as in Linux.
    fn lookup_victim(&self, dir: Cur, name: &[u8]) -> Result<Option<Cur>> {
        self.lookup_child_flags(dir, name, LOOKUP_NO_CROSS)
    }

    fn lookup_child_flags(&self, dir: Cur, name: &[u8], flags: u32) -> Result<Option<Cur>> {
        let mut nd = self.nd(dir.d, flags);
        nd.cur = dir;
        // A one-component walk from `dir` (already permission-checked).
        match nd.walk_child(name) {
            Ok(c) => Ok(Some(c)),
            Err(Errno::ENOENT) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Resolve a directory for `mount`.
    pub(crate) fn resolve_dir(&self, dirfd: i32, path: &[u8]) -> Result<DIdx> {
        retry(|| {
            let c = self.lookup_at(dirfd, path, true, false)?;
            if !c.is_dir() {
                return Err(Errno::ENOTDIR);
            }
            Ok(c.d)
        })
    }

    /// Attributes of the inode of `c`, refreshed from the backend when a
    /// change made them stale.
    fn attrs(&self, c: Cur) -> Result<InodeSnap> {
        let inner = self.inner();
        let s = inner.dc.inode_snap(c.ino).ok_or(RETRY)?;
        if s.flags & I_STALE == 0 && !inner.sw.revalidate.load(AtomicOrdering::Relaxed) {
            return Ok(s);
        }
        self.refresh_attrs(c.ino, s)
    }

    #[inline(never)]
    fn refresh_attrs(&self, ino: IIdx, s: InodeSnap) -> Result<InodeSnap> {
        let inner = self.inner();
        let attr = match inner.sb(s.sb())?.getattr(NodeId(s.node)) {
            Ok(a) => a,
            // The inode was retired under us (a concurrent unlink released
            // it): walk again rather than report the backend's ESTALE.
            Err(e)
                if inner.dc.inode(ino).map(|i| i.node.load(Relaxed)) != Some(s.node)
                    || inner
                        .dc
                        .inode(ino)
                        .map(|i| i.flags.load(Relaxed) & I_ALLOCATED)
                        == Some(0) =>
            {
                let _ = e;
                return Err(RETRY);
            }
            Err(e) => return Err(e),
        };
        let mut w = inner.w.lock();
        if inner.dc.inode(ino).map(|i| i.node.load(Relaxed)) == Some(s.node) {
            w.refresh(&inner.dc, ino, &attr);
        }
        inner.unlock(w);
        inner.dc.inode_snap(ino).ok_or(RETRY)
    }

    fn check_writable(&self) -> Result<()> {
        if self.inner().sw.read_only.load(AtomicOrdering::Relaxed) {
            Err(Errno::EROFS)
        } else {
            Ok(())
        }
    }

    // ---- access, readlink, stat ---------------------------------------

    /// `faccessat2(dirfd, path, mode, flags)`; flags `AT_EACCESS`,
    /// `AT_SYMLINK_NOFOLLOW`, `AT_EMPTY_PATH`.
    pub fn faccessat(&self, dirfd: i32, path: &[u8], mode: i32, flags: i32) -> Result<()> {
        check_at_flags(
            flags,
            libc::AT_EACCESS | libc::AT_SYMLINK_NOFOLLOW | libc::AT_EMPTY_PATH,
        )?;
        if mode & !7 != 0 {
            return Err(Errno::EINVAL);
        }
        retry(|| {
            let follow = flags & libc::AT_SYMLINK_NOFOLLOW == 0;
            let c = self.lookup_at(dirfd, path, follow, flags & libc::AT_EMPTY_PATH != 0)?;
            if mode == libc::F_OK {
                return Ok(());
            }
            let s = self.inner().dc.inode_snap(c.ino).ok_or(RETRY)?;
            if mode & libc::W_OK != 0
                && matches!(
                    FileType::from_mode(s.mode),
                    Some(FileType::Regular | FileType::Directory | FileType::Symlink)
                )
            {
                self.check_writable()?;
            }
            perm::check(&self.creds, &s, mode as u32)
        })
    }

    /// `readlinkat` into `buf`: the number of bytes stored (truncated to
    /// the buffer, as readlink(2) does).
    pub fn readlinkat_into(&self, dirfd: i32, path: &[u8], buf: &mut [u8]) -> Result<usize> {
        if buf.is_empty() {
            return Err(Errno::EINVAL);
        }
        retry(|| {
            let c = self.lookup_at(dirfd, path, false, true)?;
            if !c.is_symlink() {
                // An empty path names dirfd itself, which is a symlink
                // only when opened O_PATH|O_NOFOLLOW: anything else has
                // no link to read there (Linux's do_readlinkat).
                return Err(if path.is_empty() {
                    Errno::ENOENT
                } else {
                    Errno::EINVAL
                });
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
    pub fn readlinkat(&self, dirfd: i32, path: &[u8]) -> Result<Vec<u8>> {
        let mut buf = vec![0u8; walkfs_fsapi::PATH_MAX];
        let n = self.readlinkat_into(dirfd, path, &mut buf)?;
        buf.truncate(n);
        Ok(buf)
    }

    /// `statx(dirfd, path, flags, mask)`.
    pub fn statx(&self, dirfd: i32, path: &[u8], flags: i32, mask: u32) -> Result<Statx> {
        let mut st = Statx::default();
        self.statx_into(dirfd, path, flags, mask, &mut st)?;
        Ok(st)
    }

    /// `statx` into the caller's buffer: the result is built once, in
    /// place, from one inode snapshot (seed 004: no second copy). The
    /// descriptor form (`""` with `AT_EMPTY_PATH`) is a short inline path;
    /// anything with a path walks out of line.
    #[inline(always)]
    pub fn statx_into(
        &self,
        dirfd: i32,
        path: &[u8],
        flags: i32,
        mask: u32,
        out: &mut Statx,
    ) -> Result<()> {
        const FD_FLAGS: i32 =
            libc::AT_EMPTY_PATH | libc::AT_NO_AUTOMOUNT | libc::AT_SYMLINK_NOFOLLOW;
        if path.is_empty()
            && dirfd >= 0
            && flags & libc::AT_EMPTY_PATH != 0
            && flags & !FD_FLAGS == 0
            && mask & (libc::STATX__RESERVED as u32) == 0
        {
            return self.fstatx_into(dirfd, mask, out);
        }
        self.statx_path(dirfd, path, flags, mask, out)
    }

    #[inline(never)]
    fn statx_path(
        &self,
        dirfd: i32,
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
        if path.is_empty() && flags & libc::AT_EMPTY_PATH != 0 && dirfd != AT_FDCWD {
            return self.fstatx_into(dirfd, mask, out);
        }
        retry(|| {
            let follow = flags & libc::AT_SYMLINK_NOFOLLOW == 0;
            let c = self.lookup_at(dirfd, path, follow, flags & libc::AT_EMPTY_PATH != 0)?;
            Statx::build_into(&self.attrs(c)?, mask, out);
            Ok(())
        })
    }

    /// `fstatat(dirfd, path, flags)` (`AT_SYMLINK_NOFOLLOW`, `AT_EMPTY_PATH`).
    pub fn fstatat(&self, dirfd: i32, path: &[u8], flags: i32) -> Result<libc::stat> {
        check_at_flags(
            flags,
            libc::AT_SYMLINK_NOFOLLOW | libc::AT_EMPTY_PATH | libc::AT_NO_AUTOMOUNT,
        )?;
        Ok(self
            .statx(dirfd, path, flags, libc::STATX_BASIC_STATS)?
            .to_stat())
    }

    /// `statx` of an open descriptor.
    pub fn fstatx(&self, fd: i32, mask: u32) -> Result<Statx> {
        let mut st = Statx::default();
        self.fstatx_into(fd, mask, &mut st)?;
        Ok(st)
    }

    /// The inode snapshot behind `fd`: fd -> file -> inode with loads only.
    #[inline(always)]
    fn fd_snap(&self, fd: i32) -> Result<InodeSnap> {
        match self.fd_snap_once(fd) {
            Err(RETRY) => self.fd_snap_slow(fd),
            r => r,
        }
    }

    /// A writer was busy with the file or its inode: wait it out.
    #[inline(never)]
    fn fd_snap_slow(&self, fd: i32) -> Result<InodeSnap> {
        let mut b = crate::backoff::Backoff::new();
        loop {
            match self.fd_snap_once(fd) {
                Err(RETRY) if b.snooze() => continue,
                Err(RETRY) => return Err(Errno::EAGAIN),
                r => return r,
            }
        }
    }

    #[inline(always)]
    fn fd_snap_once(&self, fd: i32) -> Result<InodeSnap> {
        let inner = self.inner();
        let file = self.fds.get(fd).ok_or(Errno::EBADF)?;
        let seq = file.seq.read_begin().ok_or(RETRY)?;
        let ino = file.inode.load(Relaxed);
        let s = inner.dc.inode_snap(ino).ok_or(RETRY)?;
        if file.seq.read_retry(seq) {
            return Err(RETRY);
        }
        if s.flags & I_STALE != 0 || inner.sw.revalidate.load(AtomicOrdering::Relaxed) {
            return self.refresh_attrs(ino, s);
        }
        Ok(s)
    }

    /// `statx(fd, "", AT_EMPTY_PATH, mask)` into the caller's buffer.
    #[inline(always)]
    pub fn fstatx_into(&self, fd: i32, mask: u32, out: &mut Statx) -> Result<()> {
        Statx::build_into(&self.fd_snap(fd)?, mask, out);
        Ok(())
    }

    /// `fstat(fd)` into the caller's buffer.
    #[inline(always)]
    pub fn fstat_into(&self, fd: i32, out: &mut libc::stat) -> Result<()> {
        crate::stat::stat_into(&self.fd_snap(fd)?, out);
        Ok(())
    }

    /// `fstat(fd)`.
    pub fn fstat(&self, fd: i32) -> Result<libc::stat> {
        // SAFETY: `struct stat` is plain old data; all-zero is valid.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        self.fstat_into(fd, &mut st)?;
        Ok(st)
    }

    /// `statfs` of the file system holding `path`.
    pub fn statfs(&self, dirfd: i32, path: &[u8]) -> Result<StatFs> {
        retry(|| {
            let c = self.lookup_at(dirfd, path, true, true)?;
            let s = self.inner().dc.inode_snap(c.ino).ok_or(RETRY)?;
            self.inner().sb(s.sb())?.statfs(NodeId(s.node))
        })
    }

    // ---- open, close, I/O ---------------------------------------------

    /// `openat(dirfd, path, flags, mode)`: a walkfs descriptor. Supports
    /// `O_CREAT`, `O_EXCL`, `O_TRUNC`, `O_DIRECTORY`, `O_NOFOLLOW`,
    /// `O_PATH`, `O_APPEND` and the access modes.
    pub fn openat(&self, dirfd: i32, path: &[u8], flags: i32, mode: u32) -> Result<i32> {
        if flags & libc::O_CREAT != 0 && flags & libc::O_DIRECTORY != 0 {
            return Err(Errno::EINVAL);
        }
        if flags & libc::O_PATH == 0 && flags & O_ACCMODE == O_ACCMODE {
            return Err(Errno::EINVAL);
        }
        retry(|| {
            let (cur, created) = self.open_lookup(dirfd, path, flags, mode)?;
            match self.open_cur(cur, flags, created) {
                // Never look up again after creating: O_EXCL would then fail.
                Err(RETRY) if created.is_some() => Err(Errno::EAGAIN),
                r => r,
            }
        })
    }

    /// Find (or create) what `openat` opens. Returns the dentry and, if it
    /// was created, the backend handle the create opened.
    fn open_lookup(
        &self,
        dirfd: i32,
        path: &[u8],
        flags: i32,
        mode: u32,
    ) -> Result<(Cur, Option<FileHandle>)> {
        let nofollow = flags & libc::O_NOFOLLOW != 0;
        if flags & libc::O_CREAT == 0 || flags & libc::O_PATH != 0 {
            let c = self.lookup_at(dirfd, path, !nofollow, false)?;
            return Ok((c, None));
        }
        // O_CREAT: the last component is ours to find or create; a
        // symlink there is followed (unless O_EXCL/O_NOFOLLOW), and may
        // lead to another last component to create.
        let mut dirfd_path: (i32, Vec<u8>) = (dirfd, path.to_vec());
        let mut start_dir: Option<Cur> = None;
        for _ in 0..=40 {
            let (dir, last, trailing) = match start_dir {
                None => self.lookup_parent(dirfd_path.0, &dirfd_path.1)?,
                Some(d) => self.lookup_parent_from(d, &dirfd_path.1)?,
            };
            // Linux: a trailing slash is EISDIR before anything is looked
            // up; `.`, `..` and `/` name the directory itself.
            if trailing && matches!(last, Last::Normal(_)) {
                return Err(Errno::EISDIR);
            }
            let name = match last {
                Last::Normal(n) => n,
                _ if flags & libc::O_EXCL != 0 => return Err(Errno::EEXIST),
                _ => return Err(Errno::EISDIR),
            };
            match self.lookup_child(dir, &name)? {
                Some(c) => {
                    if flags & libc::O_EXCL != 0 {
                        return Err(Errno::EEXIST);
                    }
                    if c.is_symlink() {
                        if nofollow {
                            return Err(Errno::ELOOP);
                        }
                        let body = namei::get_link(self.inner(), c)?;
                        if body.is_empty() {
                            return Err(Errno::ENOENT);
                        }
                        let mut p = body;
                        if trailing {
                            p.push(b'/');
                        }
                        start_dir = Some(dir);
                        dirfd_path.1 = p;
                        continue;
                    }
                    if c.is_dir() {
                        return Err(Errno::EISDIR);
                    }
                    return Ok((c, None));
                }
                None => {
                    let (c, fh) = self.create_file(dir, &name, mode, flags)?;
                    return Ok((c, Some(fh)));
                }
            }
        }
        Err(Errno::ELOOP)
    }

    /// `lookup_parent` starting at a dentry (a symlink's directory).
    fn lookup_parent_from(&self, dir: Cur, path: &[u8]) -> Result<(Cur, Last, bool)> {
        match self.nd(dir.d, 0).walk(path, true)? {
            Walked::Parent {
                dir,
                last,
                trailing,
            } => Ok((dir, last, trailing)),
            Walked::Found(_) => Err(Errno::EIO),
        }
    }

    /// The owner and mode of a node created in `dir` (setgid directories,
    /// umask).
    fn new_owner(&self, dir: &InodeSnap, mode: u32, is_dir: bool) -> (Owner, u32) {
        let umask = self.inner().sw.umask.load(AtomicOrdering::Relaxed);
        let setgid_dir = dir.mode & libc::S_ISGID != 0;
        let gid = if setgid_dir { dir.gid } else { self.creds.gid };
        let mut mode = if is_dir { mode & 0o1777 } else { mode & 0o7777 } & !umask;
        if is_dir && setgid_dir {
            mode |= libc::S_ISGID;
        }
        if !is_dir
            && mode & libc::S_ISGID != 0
            && mode & 0o010 != 0
            && !self.creds.in_group(gid)
            && !self.creds.is_root()
        {
            mode &= !libc::S_ISGID;
        }
        (
            Owner {
                uid: self.creds.uid,
                gid,
            },
            mode,
        )
    }

    /// Linux's `setattr_should_drop_suidgid`: a write or truncate by a
    /// caller without `CAP_FSETID` drops set-user-id, and set-group-id when
    /// group-executable or not the caller's group.
    fn kill_privs(&self, ino: IIdx) -> Result<()> {
        // CAP_FSETID is uid 0's only: `privileged` credentials (a client
        // that checked permissions itself) do not carry it, since the
        // writer behind them is not root, and Linux's 9p client leaves
        // dropping the bits on write to the server.
        if self.creds.uid == 0 {
            return Ok(());
        }
        let s = self.inner().dc.inode_snap(ino).ok_or(Errno::EAGAIN)?;
        if !s.is_reg() || s.mode & (libc::S_ISUID | libc::S_ISGID) == 0 {
            return Ok(());
        }
        let mut kill = s.mode & libc::S_ISUID;
        if s.mode & libc::S_ISGID != 0 && (s.mode & 0o010 != 0 || !self.creds.in_group(s.gid)) {
            kill |= libc::S_ISGID;
        }
        if kill == 0 {
            return Ok(());
        }
        let inner = self.inner();
        let set = SetAttr {
            mode: Some(s.mode & 0o7777 & !kill),
            ..SetAttr::default()
        };
        let attr = inner.sb(s.sb())?.setattr(NodeId(s.node), &set)?;
        let mut w = inner.w.lock();
        w.refresh(&inner.dc, ino, &attr);
        inner.unlock(w);
        Ok(())
    }

    /// `may_create`: write (and search) permission on a live directory.
    fn may_create(&self, dir: Cur) -> Result<InodeSnap> {
        let ds = self.inner().dc.inode_snap(dir.ino).ok_or(RETRY)?;
        if dir.flags & D_DEAD != 0 {
            return Err(Errno::ENOENT);
        }
        perm::check(&self.creds, &ds, MAY_WRITE | MAY_EXEC)?;
        Ok(ds)
    }

    fn create_file(
        &self,
        dir: Cur,
        name: &[u8],
        mode: u32,
        flags: i32,
    ) -> Result<(Cur, FileHandle)> {
        self.check_writable()?;
        let ds = self.may_create(dir)?;
        let (owner, mode) = self.new_owner(&ds, mode, false);
        let acc = OpenFlags(flags & O_ACCMODE);
        self.modify(dir, name, |fs| {
            let (e, fh) = fs.create(NodeId(ds.node), name, mode, owner, acc)?;
            Ok((Some(e), fh))
        })
    }

    /// Open the file at `c` for the descriptor table.
    fn open_cur(&self, c: Cur, flags: i32, created: Option<FileHandle>) -> Result<i32> {
        let inner = self.inner();
        let s = inner.dc.inode_snap(c.ino).ok_or(RETRY)?;
        let fh = if flags & libc::O_PATH != 0 {
            if flags & libc::O_DIRECTORY != 0 && !s.is_dir() {
                return Err(Errno::ENOTDIR);
            }
            NO_HANDLE
        } else if let Some(fh) = created {
            fh.0
        } else {
            if flags & libc::O_DIRECTORY != 0 && !s.is_dir() {
                return Err(Errno::ENOTDIR);
            }
            if s.is_symlink() {
                return Err(Errno::ELOOP);
            }
            let acc = flags & O_ACCMODE;
            let mut want = match acc {
                libc::O_RDONLY => MAY_READ,
                libc::O_WRONLY => MAY_WRITE,
                _ => MAY_READ | MAY_WRITE,
            };
            if flags & libc::O_TRUNC != 0 {
                want |= MAY_WRITE;
            }
            if s.is_dir() && want & MAY_WRITE != 0 {
                return Err(Errno::EISDIR);
            }
            match FileType::from_mode(s.mode) {
                Some(FileType::Socket) => return Err(Errno::ENXIO),
                Some(FileType::Regular | FileType::Directory) => {}
                // Device nodes and fifos are never opened for a caller.
                _ => return Err(Errno::EACCES),
            }
            perm::check(&self.creds, &s, want)?;
            if want & MAY_WRITE != 0 {
                self.check_writable()?;
            }
            let trunc = if flags & libc::O_TRUNC != 0 && s.is_reg() {
                libc::O_TRUNC
            } else {
                0
            };
            if acc == libc::O_RDONLY && trunc == 0 {
                // Opened on first I/O: a compiler opens far more files
                // than it reads.
                crate::file::LAZY
            } else {
                let fs = inner.sb(s.sb())?;
                let fh = fs.open(NodeId(s.node), OpenFlags(acc | trunc))?;
                if trunc != 0 {
                    let mut w = inner.w.lock();
                    w.mark_stale(&inner.dc, c.ino);
                    drop(w);
                    self.kill_privs(c.ino)?;
                }
                fh.0
            }
        };
        // Pin the dentry for the file's lifetime (it keeps the inode).
        let release = |fh: u64| {
            if fh != NO_HANDLE && fh != crate::file::LAZY {
                if let Ok(fs) = inner.sb(s.sb()) {
                    fs.release(NodeId(s.node), FileHandle(fh));
                }
            }
        };
        if !self.pin(c) {
            release(fh);
            return Err(RETRY);
        }
        match self.fds.install(c.d, c.ino, flags, fh) {
            Ok(fd) => Ok(fd),
            Err(e) => {
                release(fh);
                self.unpin(c.d);
                Err(e)
            }
        }
    }

    /// Take a reference on the dentry of `c` without the writer lock; false
    /// if it is being freed or is no longer what the walk found.
    fn pin(&self, c: Cur) -> bool {
        let Some(d) = self.inner().dc.dentry(c.d) else {
            return false;
        };
        let mut r = d.refs.load(Relaxed);
        loop {
            if r == crate::writer::DYING {
                return false;
            }
            match d
                .refs
                .compare_exchange_weak(r, r + 1, crate::sync::Ordering::AcqRel, Relaxed)
            {
                Ok(_) => break,
                Err(now) => r = now,
            }
        }
        // The count we raised belongs to the dentry the walk found only if
        // its sequence count has not moved (it was not freed and reused).
        if d.seq.raw() != c.seq {
            self.unpin(c.d);
            return false;
        }
        true
    }

    /// Drop a reference taken by [`Ctx::pin`]. The writer lock is taken
    /// only to free a removed dentry that just became unused.
    fn unpin(&self, idx: DIdx) {
        let inner = self.inner();
        let Some(d) = inner.dc.dentry(idx) else {
            return;
        };
        if d.refs.fetch_sub(1, crate::sync::Ordering::AcqRel) == 1
            && d.flags.load(Relaxed) & D_DEAD != 0
        {
            let mut w = inner.w.lock();
            w.free_if_dead(&inner.dc, idx);
            inner.unlock(w);
        }
    }

    /// `close(fd)`.
    pub fn close(&self, fd: i32) -> Result<()> {
        let (d, fh, ino) = self.fds.remove(fd)?;
        let inner = self.inner();
        if fh != NO_HANDLE && fh != crate::file::LAZY {
            if let Some(s) = inner.dc.inode_snap(ino) {
                if let Ok(fs) = inner.sb(s.sb()) {
                    fs.release(NodeId(s.node), FileHandle(fh));
                }
            }
        }
        self.unpin(d);
        Ok(())
    }

    /// The open file behind `fd` with what I/O needs, opening it in the
    /// backend if that was deferred.
    fn io_file(&self, fd: i32) -> Result<(&crate::file::File, InodeSnap, u32)> {
        let inner = self.inner();
        let file = self.fds.get(fd).ok_or(Errno::EBADF)?;
        let s = inner
            .dc
            .inode_snap(file.inode.load(Relaxed))
            .ok_or(Errno::EAGAIN)?;
        let flags = file.flags.load(Relaxed);
        match file.fh.load(Relaxed) {
            NO_HANDLE => return Err(Errno::EBADF),
            crate::file::LAZY => {
                let _g = file.open_lock.lock();
                // Closed meanwhile: the slot is no longer ours.
                let file = self.fds.get(fd).ok_or(Errno::EBADF)?;
                if file.fh.load(Relaxed) == crate::file::LAZY && !s.is_dir() {
                    let fs = inner.sb(s.sb())?;
                    let fh = fs.open(NodeId(s.node), OpenFlags(flags as i32 & O_ACCMODE))?;
                    file.fh.store(fh.0, Relaxed);
                }
            }
            _ => {}
        }
        Ok((file, s, flags))
    }

    /// `pread(fd, buf, off)`.
    pub fn pread(&self, fd: i32, buf: &mut [u8], off: u64) -> Result<usize> {
        let (file, s, flags) = self.io_file(fd)?;
        if flags as i32 & O_ACCMODE == libc::O_WRONLY {
            return Err(Errno::EBADF);
        }
        if s.is_dir() {
            return Err(Errno::EISDIR);
        }
        let fs = self.inner().sb(s.sb())?;
        fs.read(NodeId(s.node), FileHandle(file.fh.load(Relaxed)), off, buf)
    }

    /// `read(fd, buf)` at the file position.
    pub fn read(&self, fd: i32, buf: &mut [u8]) -> Result<usize> {
        let (file, _, _) = self.io_file(fd)?;
        let mut pos = file.pos.lock();
        let n = self.pread(fd, buf, *pos)?;
        *pos += n as u64;
        Ok(n)
    }

    /// `pwrite(fd, data, off)` (appends under `O_APPEND`, as Linux does).
    pub fn pwrite(&self, fd: i32, data: &[u8], off: u64) -> Result<usize> {
        self.write_at(fd, data, Some(off))
    }

    /// `write(fd, data)` at the file position.
    pub fn write(&self, fd: i32, data: &[u8]) -> Result<usize> {
        self.write_at(fd, data, None)
    }

    fn write_at(&self, fd: i32, data: &[u8], off: Option<u64>) -> Result<usize> {
        let (file, s, flags) = self.io_file(fd)?;
        if flags as i32 & O_ACCMODE == libc::O_RDONLY {
            return Err(Errno::EBADF);
        }
        let inner = self.inner();
        let fs = inner.sb(s.sb())?;
        let ino = file.inode.load(Relaxed);
        let fh = FileHandle(file.fh.load(Relaxed));
        let mut pos = file.pos.lock();
        let at = if flags as i32 & libc::O_APPEND != 0 {
            fs.getattr(NodeId(s.node))?.size
        } else {
            off.unwrap_or(*pos)
        };
        if !data.is_empty() {
            self.kill_privs(ino)?;
        }
        let n = fs.write(NodeId(s.node), fh, at, data)?;
        if off.is_none() || flags as i32 & libc::O_APPEND != 0 && off.is_none() {
            *pos = at + n as u64;
        }
        drop(pos);
        let mut w = inner.w.lock();
        w.mark_stale(&inner.dc, ino);
        drop(w);
        Ok(n)
    }

    /// `lseek(fd, off, whence)` for `SEEK_SET`, `SEEK_CUR`, `SEEK_END`.
    pub fn lseek(&self, fd: i32, off: i64, whence: i32) -> Result<u64> {
        let file = self.fds.get(fd).ok_or(Errno::EBADF)?;
        let mut pos = file.pos.lock();
        let base = match whence {
            libc::SEEK_SET => 0i64,
            libc::SEEK_CUR => *pos as i64,
            libc::SEEK_END => {
                drop(pos);
                let size = self.fstatx(fd, libc::STATX_SIZE)?.stx_size as i64;
                pos = file.pos.lock();
                size
            }
            _ => return Err(Errno::EINVAL),
        };
        let new = base
            .checked_add(off)
            .filter(|&p| p >= 0)
            .ok_or(Errno::EINVAL)?;
        *pos = new as u64;
        if whence == libc::SEEK_SET && new == 0 {
            *file.dir.lock() = None;
        }
        Ok(new as u64)
    }

    /// `getdents64(fd)`: the entries not yet returned, `.` and `..`
    /// first; empty at the end.
    pub fn getdents(&self, fd: i32) -> Result<Vec<DirEntryOut>> {
        let inner = self.inner();
        let file = self.fds.get(fd).ok_or(Errno::EBADF)?;
        if file.fh.load(Relaxed) == NO_HANDLE {
            return Err(Errno::EBADF);
        }
        let s = inner
            .dc
            .inode_snap(file.inode.load(Relaxed))
            .ok_or(Errno::EAGAIN)?;
        if !s.is_dir() {
            return Err(Errno::ENOTDIR);
        }
        let d = file.dentry.load(Relaxed);
        if inner
            .dc
            .dentry(d)
            .map(|x| x.flags.load(Relaxed) & D_DEAD != 0)
            .unwrap_or(true)
        {
            return Err(Errno::ENOENT);
        }
        let mut listing = file.dir.lock();
        if listing.is_none() {
            let mut all = vec![
                DirEntry {
                    name: b".".to_vec(),
                    ino: s.ino,
                    kind: FileType::Directory,
                },
                DirEntry {
                    name: b"..".to_vec(),
                    ino: s.ino,
                    kind: FileType::Directory,
                },
            ];
            all.extend(inner.sb(s.sb())?.readdir(NodeId(s.node))?);
            *listing = Some(all);
        }
        let all = listing.as_ref().map(Vec::as_slice).unwrap_or(&[]);
        let mut pos = file.pos.lock();
        let start = (*pos as usize).min(all.len());
        let out = all[start..].to_vec();
        *pos = all.len() as u64;
        Ok(out)
    }

    /// `ftruncate(fd, len)`.
    pub fn ftruncate(&self, fd: i32, len: i64) -> Result<()> {
        if len < 0 {
            return Err(Errno::EINVAL);
        }
        let (file, s, flags) =
            self.io_file(fd)
                .map_err(|e| if e == Errno::EBADF { Errno::EBADF } else { e })?;
        if flags as i32 & O_ACCMODE == libc::O_RDONLY || !s.is_reg() {
            return Err(Errno::EINVAL);
        }
        let inner = self.inner();
        self.kill_privs(file.inode.load(Relaxed))?;
        let attr = inner.sb(s.sb())?.setattr(
            NodeId(s.node),
            &SetAttr {
                size: Some(len as u64),
                ..SetAttr::default()
            },
        )?;
        let mut w = inner.w.lock();
        w.refresh(&inner.dc, file.inode.load(Relaxed), &attr);
        inner.unlock(w);
        Ok(())
    }

    // ---- namespace changes --------------------------------------------

    /// Run a backend change on name `name` in `dir` under the writer lock
    /// and bring the cache in line with its result: the name's dentry
    /// becomes positive on the entry returned (or stays as it was on
    /// error), the directory's attributes become stale.
    fn modify<T>(
        &self,
        dir: Cur,
        name: &[u8],
        op: impl FnOnce(&dyn walkfs_fsapi::FileSystem) -> Result<(Option<walkfs_fsapi::Entry>, T)>,
    ) -> Result<(Cur, T)> {
        let inner = self.inner();
        let dc = &inner.dc;
        let ds = dc.inode_snap(dir.ino).ok_or(RETRY)?;
        let fs = inner.sb(ds.sb())?;
        let mut w = inner.w.lock();
        if dc.dentry(dir.d).map(|d| d.seq.raw()) != Some(dir.seq) {
            return Err(RETRY);
        }
        let hash = hash_name(name);
        let res = op(&*fs);
        w.ns_dirty = true;
        let existing = w.d_find(dc, dir.d, name, hash);
        let out = match res {
            Ok((Some(entry), t)) => {
                let ino = w.iget(dc, ds.sb(), &entry).ok_or(Errno::ENOMEM)?;
                let idx = match existing {
                    Some(idx) => {
                        let now = w.d_set_inode(dc, idx, ino);
                        w.put_inode(dc, ino);
                        match now {
                            Some(n) => n,
                            None => {
                                inner.unlock(w);
                                return Err(Errno::ENOMEM);
                            }
                        }
                    }
                    None => match w.d_add(dc, dir.d, name, hash, ino, 0) {
                        Some(idx) => idx,
                        None => {
                            w.put_inode(dc, ino);
                            inner.unlock(w);
                            return Err(Errno::ENOMEM);
                        }
                    },
                };
                w.mark_stale(dc, dir.ino);
                let s = dc.snap(idx).ok_or(Errno::EAGAIN)?;
                Ok((
                    Cur {
                        d: idx,
                        seq: s.seq,
                        flags: s.flags,
                        ino: s.target,
                    },
                    t,
                ))
            }
            Ok((None, _)) => Err(Errno::EIO),
            Err(e) => {
                // The backend knows better than our cache: forget the name.
                if let (Some(idx), Errno::EEXIST | Errno::ENOENT) = (existing, e) {
                    w.d_kill(dc, idx);
                }
                Err(e)
            }
        };
        inner.unlock(w);
        out
    }

    /// `mkdirat(dirfd, path, mode)`.
    pub fn mkdirat(&self, dirfd: i32, path: &[u8], mode: u32) -> Result<()> {
        retry(|| {
            let (dir, last, _trailing) = self.lookup_parent(dirfd, path)?;
            let Last::Normal(name) = last else {
                return Err(Errno::EEXIST);
            };
            if self.lookup_child(dir, &name)?.is_some() {
                return Err(Errno::EEXIST);
            }
            self.check_writable()?;
            let ds = self.may_create(dir)?;
            let (owner, mode) = self.new_owner(&ds, mode, true);
            self.modify(dir, &name, |fs| {
                Ok((Some(fs.mkdir(NodeId(ds.node), &name, mode, owner)?), ()))
            })
            .map(drop)
        })
    }

    /// The checks common to creating a non-directory name (symlink, link):
    /// the parent, the new name, and `EEXIST`/`ENOENT` as Linux's
    /// `filename_create` gives them.
    fn create_target(&self, dirfd: i32, path: &[u8]) -> Result<(Cur, Vec<u8>)> {
        let (dir, last, trailing) = self.lookup_parent(dirfd, path)?;
        let Last::Normal(name) = last else {
            return Err(Errno::EEXIST);
        };
        if self.lookup_child(dir, &name)?.is_some() {
            return Err(Errno::EEXIST);
        }
        if trailing {
            return Err(Errno::ENOENT);
        }
        self.check_writable()?;
        Ok((dir, name))
    }

    /// `symlinkat(target, newdirfd, linkpath)`.
    pub fn symlinkat(&self, target: &[u8], newdirfd: i32, linkpath: &[u8]) -> Result<()> {
        if target.is_empty() {
            return Err(Errno::ENOENT);
        }
        if target.len() >= walkfs_fsapi::PATH_MAX {
            return Err(Errno::ENAMETOOLONG);
        }
        retry(|| {
            let (dir, name) = self.create_target(newdirfd, linkpath)?;
            let ds = self.may_create(dir)?;
            let (owner, _) = self.new_owner(&ds, 0o777, false);
            self.modify(dir, &name, |fs| {
                Ok((Some(fs.symlink(NodeId(ds.node), &name, target, owner)?), ()))
            })
            .map(drop)
        })
    }

    /// `mknodat(dirfd, path, mode, dev)`: a fifo, a socket, a device node
    /// or (type 0 or `S_IFREG`) an empty regular file. Checks in Linux's
    /// order: the type (`EPERM` for a directory, `EINVAL` for no known
    /// type) before the path, then `filename_create`'s, then permission
    /// on the parent, then `CAP_MKNOD` for devices. Special files are made,
    /// never opened: opening one through walkfs stays refused.
    pub fn mknodat(&self, dirfd: i32, path: &[u8], mode: u32, dev: u64) -> Result<()> {
        let kind = match mode & libc::S_IFMT {
            0 | libc::S_IFREG => libc::S_IFREG,
            t @ (libc::S_IFCHR | libc::S_IFBLK | libc::S_IFIFO | libc::S_IFSOCK) => t,
            libc::S_IFDIR => return Err(Errno::EPERM),
            _ => return Err(Errno::EINVAL),
        };
        retry(|| {
            let (dir, name) = self.create_target(dirfd, path)?;
            let ds = self.may_create(dir)?;
            let is_dev = kind == libc::S_IFCHR || kind == libc::S_IFBLK;
            if is_dev && !self.creds.is_root() {
                return Err(Errno::EPERM);
            }
            let (owner, perm) = self.new_owner(&ds, mode, false);
            let rdev = if is_dev { dev } else { 0 };
            self.modify(dir, &name, |fs| {
                let parent = NodeId(ds.node);
                if kind == libc::S_IFREG {
                    let (entry, fh) =
                        fs.create(parent, &name, perm, owner, OpenFlags(libc::O_RDONLY))?;
                    fs.release(entry.node, fh);
                    return Ok((Some(entry), ()));
                }
                Ok((Some(fs.mknod(parent, &name, kind | perm, rdev, owner)?), ()))
            })
            .map(drop)
        })
    }

    /// `linkat(olddirfd, oldpath, newdirfd, newpath, flags)`; flags
    /// `AT_SYMLINK_FOLLOW`, `AT_EMPTY_PATH`.
    pub fn linkat(
        &self,
        olddirfd: i32,
        oldpath: &[u8],
        newdirfd: i32,
        newpath: &[u8],
        flags: i32,
    ) -> Result<()> {
        check_at_flags(flags, libc::AT_SYMLINK_FOLLOW | libc::AT_EMPTY_PATH)?;
        retry(|| {
            let follow = flags & libc::AT_SYMLINK_FOLLOW != 0;
            let old =
                self.lookup_at(olddirfd, oldpath, follow, flags & libc::AT_EMPTY_PATH != 0)?;
            let (dir, name) = self.create_target(newdirfd, newpath)?;
            let inner = self.inner();
            let os = inner.dc.inode_snap(old.ino).ok_or(RETRY)?;
            let ds = inner.dc.inode_snap(dir.ino).ok_or(RETRY)?;
            if os.sb() != ds.sb() {
                return Err(Errno::EXDEV);
            }
            self.may_linkat(&os)?;
            self.may_create(dir)?;
            if os.is_dir() {
                return Err(Errno::EPERM);
            }
            let (_, ()) = self.modify(dir, &name, |fs| {
                Ok((Some(fs.link(NodeId(os.node), NodeId(ds.node), &name)?), ()))
            })?;
            let mut w = inner.w.lock();
            w.mark_stale(&inner.dc, old.ino);
            Ok(())
        })
    }

    /// `fs.protected_hardlinks` (on in Debian): only the owner, or someone
    /// who may read and write a plain file, may link to it.
    fn may_linkat(&self, s: &InodeSnap) -> Result<()> {
        if self.creds.owns(s.uid) {
            return Ok(());
        }
        let setid = s.mode & libc::S_ISUID != 0
            || s.mode & (libc::S_ISGID | 0o010) == libc::S_ISGID | 0o010;
        if !s.is_reg() || setid || perm::check(&self.creds, s, MAY_READ | MAY_WRITE).is_err() {
            return Err(Errno::EPERM);
        }
        Ok(())
    }

    /// `may_delete`: may the caller remove `victim` from `dir`?
    fn may_delete(&self, dir: Cur, victim: Cur, isdir: bool) -> Result<()> {
        let inner = self.inner();
        let ds = inner.dc.inode_snap(dir.ino).ok_or(RETRY)?;
        let vs = inner.dc.inode_snap(victim.ino).ok_or(RETRY)?;
        perm::check(&self.creds, &ds, MAY_WRITE | MAY_EXEC)?;
        // Sticky directory: only the owner of the file or of the directory.
        if ds.mode & libc::S_ISVTX != 0 && !self.creds.owns(vs.uid) && self.creds.uid != ds.uid {
            return Err(Errno::EPERM);
        }
        if isdir {
            if !victim.is_dir() {
                return Err(Errno::ENOTDIR);
            }
            // The root of a file system (IS_ROOT in Linux). A mount point
            // is checked by the callers, after every permission check.
            if victim.flags & D_MOUNTROOT != 0 || victim.d == inner.root {
                return Err(Errno::EBUSY);
            }
        } else if victim.is_dir() {
            return Err(Errno::EISDIR);
        }
        if dir.flags & D_DEAD != 0 {
            return Err(Errno::ENOENT);
        }
        Ok(())
    }

    /// Remove name `name` (dentry `victim`) from `dir` after the backend
    /// did: the dentry dies, a negative one takes its place.
    fn forget_name(&self, w: &mut crate::writer::Writer, dir: Cur, name: &[u8], victim: DIdx) {
        let inner = self.inner();
        let dc = &inner.dc;
        let hash = hash_name(name);
        let ino = dc
            .dentry(victim)
            .map(|d| d.target.load(Relaxed))
            .unwrap_or(0);
        if ino != 0 {
            w.mark_stale(dc, ino);
        }
        w.d_kill(dc, victim);
        if let Some(exp) = inner.neg_expiry() {
            let _ = w.d_add(dc, dir.d, name, hash, 0, exp);
        }
        w.mark_stale(dc, dir.ino);
    }

    /// `unlinkat(dirfd, path, flags)`; flag `AT_REMOVEDIR`.
    pub fn unlinkat(&self, dirfd: i32, path: &[u8], flags: i32) -> Result<()> {
        check_at_flags(flags, libc::AT_REMOVEDIR)?;
        let rmdir = flags & libc::AT_REMOVEDIR != 0;
        retry(|| {
            let (dir, last, trailing) = self.lookup_parent(dirfd, path)?;
            let name = match last {
                Last::Normal(n) => n,
                Last::Dot if rmdir => return Err(Errno::EINVAL),
                Last::DotDot if rmdir => return Err(Errno::ENOTEMPTY),
                Last::Root if rmdir => return Err(Errno::EBUSY),
                _ => return Err(Errno::EISDIR),
            };
            let victim = self.lookup_victim(dir, &name)?;
            if !rmdir && trailing {
                return Err(match victim {
                    None => Errno::ENOENT,
                    Some(v) if v.is_dir() => Errno::EISDIR,
                    Some(_) => Errno::ENOTDIR,
                });
            }
            self.check_writable()?;
            let victim = victim.ok_or(Errno::ENOENT)?;
            self.may_delete(dir, victim, rmdir)?;
            if victim.flags & D_MOUNTPOINT != 0 {
                return Err(Errno::EBUSY);
            }
            let inner = self.inner();
            let ds = inner.dc.inode_snap(dir.ino).ok_or(RETRY)?;
            let fs = inner.sb(ds.sb())?;
            let mut w = inner.w.lock();
            if inner.dc.dentry(victim.d).map(|d| d.seq.raw()) != Some(victim.seq) {
                return Err(RETRY);
            }
            let r = if rmdir {
                fs.rmdir(NodeId(ds.node), &name)
            } else {
                fs.unlink(NodeId(ds.node), &name)
            };
            w.ns_dirty = true;
            match r {
                Ok(()) | Err(Errno::ENOENT) => self.forget_name(&mut w, dir, &name, victim.d),
                Err(_) => {}
            }
            inner.unlock(w);
            r
        })
    }

    /// Is dentry `a` an ancestor of (or equal to) `b`?
    fn is_ancestor(&self, a: DIdx, mut b: DIdx) -> bool {
        let dc = &self.inner().dc;
        for _ in 0..4096 {
            if a == b {
                return true;
            }
            let Some(d) = dc.dentry(b) else { return false };
            let p = d.parent.load(Relaxed);
            if p == b || p == 0 {
                return false;
            }
            b = p;
        }
        false
    }

    /// `renameat2(olddirfd, oldpath, newdirfd, newpath, flags)`; flags
    /// `RENAME_NOREPLACE`, `RENAME_EXCHANGE`.
    pub fn renameat2(
        &self,
        olddirfd: i32,
        oldpath: &[u8],
        newdirfd: i32,
        newpath: &[u8],
        flags: u32,
    ) -> Result<()> {
        if flags & !(RENAME_NOREPLACE | RENAME_EXCHANGE) != 0
            || flags & RENAME_NOREPLACE != 0 && flags & RENAME_EXCHANGE != 0
        {
            return Err(Errno::EINVAL);
        }
        let exchange = flags & RENAME_EXCHANGE != 0;
        retry(|| {
            let (odir, olast, otrail) = self.lookup_parent(olddirfd, oldpath)?;
            let (ndir, nlast, ntrail) = self.lookup_parent(newdirfd, newpath)?;
            let inner = self.inner();
            let dc = &inner.dc;
            let ods = dc.inode_snap(odir.ino).ok_or(RETRY)?;
            let nds = dc.inode_snap(ndir.ino).ok_or(RETRY)?;
            if ods.sb() != nds.sb() {
                return Err(Errno::EXDEV);
            }
            let Last::Normal(oname) = olast else {
                return Err(Errno::EBUSY);
            };
            let nname = match nlast {
                Last::Normal(n) => n,
                _ if flags & RENAME_NOREPLACE != 0 => return Err(Errno::EEXIST),
                _ => return Err(Errno::EBUSY),
            };
            self.check_writable()?;
            let old = self.lookup_victim(odir, &oname)?.ok_or(Errno::ENOENT)?;
            let new = self.lookup_victim(ndir, &nname)?;
            if flags & RENAME_NOREPLACE != 0 && new.is_some() {
                return Err(Errno::EEXIST);
            }
            if exchange && new.is_none() {
                return Err(Errno::ENOENT);
            }
            if !old.is_dir() && (otrail || !exchange && ntrail) {
                return Err(Errno::ENOTDIR);
            }
            if exchange && ntrail && new.is_some_and(|n| !n.is_dir()) {
                return Err(Errno::ENOTDIR);
            }
            // Source an ancestor of the target's directory: EINVAL; target
            // an ancestor of the source's directory: ENOTEMPTY.
            if self.is_ancestor(old.d, ndir.d) {
                return Err(Errno::EINVAL);
            }
            if let Some(n) = new {
                if self.is_ancestor(n.d, odir.d) {
                    return Err(if exchange {
                        Errno::EINVAL
                    } else {
                        Errno::ENOTEMPTY
                    });
                }
                if n.ino == old.ino {
                    return Ok(()); // the same file: nothing to do
                }
            }
            let is_dir = old.is_dir();
            self.may_delete(odir, old, is_dir)?;
            match new {
                Some(n) => self.may_delete(ndir, n, if exchange { n.is_dir() } else { is_dir })?,
                None => {
                    self.may_create(ndir)?;
                }
            }
            if odir.d != ndir.d {
                let os = dc.inode_snap(old.ino).ok_or(RETRY)?;
                if is_dir {
                    perm::check(&self.creds, &os, MAY_WRITE)?;
                }
                if let (true, Some(n)) = (exchange, new) {
                    if n.is_dir() {
                        perm::check(&self.creds, &dc.inode_snap(n.ino).ok_or(RETRY)?, MAY_WRITE)?;
                    }
                }
            }
            if old.flags & (D_MOUNTPOINT | D_MOUNTROOT) != 0
                || new.is_some_and(|n| n.flags & (D_MOUNTPOINT | D_MOUNTROOT) != 0)
            {
                return Err(Errno::EBUSY);
            }
            let fs = inner.sb(ods.sb())?;
            let mut w = inner.w.lock();
            let moved = |c: &Cur| dc.dentry(c.d).map(|d| d.seq.raw()) != Some(c.seq);
            if moved(&old) || new.as_ref().is_some_and(moved) {
                return Err(RETRY);
            }
            let r = fs.rename(NodeId(ods.node), &oname, NodeId(nds.node), &nname, flags);
            w.ns_dirty = true;
            if r.is_ok() {
                let nhash = hash_name(&nname);
                let ohash = hash_name(&oname);
                w.mark_stale(dc, odir.ino);
                w.mark_stale(dc, ndir.ino);
                w.mark_stale(dc, old.ino);
                if exchange {
                    if let Some(n) = new {
                        w.mark_stale(dc, n.ino);
                        w.d_move(dc, n.d, odir.d, &oname, ohash);
                    }
                    w.d_move(dc, old.d, ndir.d, &nname, nhash);
                } else {
                    if let Some(n) = new {
                        w.mark_stale(dc, n.ino);
                        w.d_kill(dc, n.d);
                    }
                    w.d_move(dc, old.d, ndir.d, &nname, nhash);
                    if let Some(exp) = inner.neg_expiry() {
                        let _ = w.d_add(dc, odir.d, &oname, ohash, 0, exp);
                    }
                }
            } else if r == Err(Errno::ENOENT) {
                w.d_kill(dc, old.d);
            }
            inner.unlock(w);
            r
        })
    }

    // ---- attributes ---------------------------------------------------

    /// Apply `set` to the node at `c` and refresh the cache from the result.
    fn setattr(&self, c: Cur, set: &SetAttr) -> Result<()> {
        let inner = self.inner();
        let s = inner.dc.inode_snap(c.ino).ok_or(RETRY)?;
        let attr = inner.sb(s.sb())?.setattr(NodeId(s.node), set)?;
        let mut w = inner.w.lock();
        w.refresh(&inner.dc, c.ino, &attr);
        w.ns_dirty = true;
        inner.unlock(w);
        Ok(())
    }

    /// `fchmodat(dirfd, path, mode, flags)`; `AT_SYMLINK_NOFOLLOW` on a
    /// symlink is `EOPNOTSUPP`, as glibc and fchmodat2 give it.
    pub fn fchmodat(&self, dirfd: i32, path: &[u8], mode: u32, flags: i32) -> Result<()> {
        check_at_flags(flags, libc::AT_SYMLINK_NOFOLLOW | libc::AT_EMPTY_PATH)?;
        retry(|| {
            let follow = flags & libc::AT_SYMLINK_NOFOLLOW == 0;
            let c = self.lookup_at(dirfd, path, follow, flags & libc::AT_EMPTY_PATH != 0)?;
            let s = self.attrs(c)?;
            if s.is_symlink() {
                return Err(Errno::EOPNOTSUPP);
            }
            self.check_writable()?;
            if !self.creds.owns(s.uid) {
                return Err(Errno::EPERM);
            }
            let mut mode = mode & 0o7777;
            if !self.creds.is_root() && !self.creds.in_group(s.gid) {
                mode &= !libc::S_ISGID;
            }
            self.setattr(
                c,
                &SetAttr {
                    mode: Some(mode),
                    ..SetAttr::default()
                },
            )
        })
    }

    /// `fchownat(dirfd, path, uid, gid, flags)`; `u32::MAX` leaves an id.
    pub fn fchownat(&self, dirfd: i32, path: &[u8], uid: u32, gid: u32, flags: i32) -> Result<()> {
        check_at_flags(flags, libc::AT_SYMLINK_NOFOLLOW | libc::AT_EMPTY_PATH)?;
        retry(|| {
            let follow = flags & libc::AT_SYMLINK_NOFOLLOW == 0;
            let c = self.lookup_at(dirfd, path, follow, flags & libc::AT_EMPTY_PATH != 0)?;
            let s = self.attrs(c)?;
            self.check_writable()?;
            let cr = &self.creds;
            let uid_ok = uid == u32::MAX || uid == s.uid && cr.uid == s.uid || cr.is_root();
            let gid_ok = gid == u32::MAX
                || cr.is_root()
                || cr.uid == s.uid && (gid == s.gid || cr.in_group(gid));
            if !uid_ok || !gid_ok {
                return Err(Errno::EPERM);
            }
            let set = SetAttr {
                uid: (uid != u32::MAX).then_some(uid),
                gid: (gid != u32::MAX).then_some(gid),
                ..SetAttr::default()
            };
            self.setattr(c, &set)?;
            // Changing owners drops set-id bits of non-directories.
            let s = self.attrs(c)?;
            let kill = if s.is_dir() {
                0
            } else {
                (s.mode & libc::S_ISUID)
                    | if s.mode & (libc::S_ISGID | 0o010) == libc::S_ISGID | 0o010 {
                        libc::S_ISGID
                    } else {
                        0
                    }
            };
            if kill != 0 && (set.uid.is_some() || set.gid.is_some()) {
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
    pub fn utimensat(
        &self,
        dirfd: i32,
        path: &[u8],
        times: [Option<TimeSet>; 2],
        flags: i32,
    ) -> Result<()> {
        check_at_flags(flags, libc::AT_SYMLINK_NOFOLLOW | libc::AT_EMPTY_PATH)?;
        retry(|| {
            let follow = flags & libc::AT_SYMLINK_NOFOLLOW == 0;
            let c = self.lookup_at(dirfd, path, follow, flags & libc::AT_EMPTY_PATH != 0)?;
            let s = self.attrs(c)?;
            if times == [None, None] {
                return Ok(());
            }
            self.check_writable()?;
            let explicit = times.iter().any(|t| matches!(t, Some(TimeSet::At(_))));
            if !self.creds.owns(s.uid) {
                if explicit {
                    return Err(Errno::EPERM);
                }
                perm::check(&self.creds, &s, MAY_WRITE)?;
            }
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

    /// Current time, for callers building `utimensat` arguments.
    pub fn now() -> Timespec {
        Timespec::now()
    }
}

impl Nameidata<'_> {
    /// Look up one child of the directory `self.cur` stands on (no
    /// permission check: the caller's walk did it).
    pub(crate) fn walk_child(&mut self, name: &[u8]) -> Result<Cur> {
        if name.len() > walkfs_fsapi::NAME_MAX {
            return Err(Errno::ENAMETOOLONG);
        }
        let dir = self.cur;
        let start = self.start;
        self.start = dir.d;
        // A relative one-name walk without following: reuse the walk so
        // cache, fast path and mounts behave identically.
        let r = self.walk_nofollow_one(name);
        self.start = start;
        r
    }
}
