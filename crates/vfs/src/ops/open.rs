//! `openat` (with `O_CREAT`'s walk of the last name, symlinks included),
//! reopening a descriptor, `close`, and pinning the dentry an open file
//! holds.

use std::sync::Arc;

use super::prelude::*;

/// The kernel's `__FMODE_EXEC` among open flags: the open of a program
/// for `execve` (FUSE passes the kernel's flags on).
pub const FMODE_EXEC: i32 = 0x20;
use crate::file::File;
use crate::OpenFile;

/// Where an open file goes: a descriptor of the context's table
/// ([`ToTable`]) or a file of its own, for an [`OpenFile`] ([`ToObject`]).
pub(super) trait Install {
    type Out;
    /// Open on (dentry, inode), taking over one dentry reference; on an
    /// error nothing was taken.
    fn install(
        ctx: &Ctx,
        d: DIdx,
        ino: IIdx,
        flags: i32,
        fh: u64,
        seen: (u64, u64),
    ) -> Result<Self::Out>;
}

pub(super) struct ToTable;

impl Install for ToTable {
    type Out = i32;
    fn install(
        ctx: &Ctx,
        d: DIdx,
        ino: IIdx,
        flags: i32,
        fh: u64,
        seen: (u64, u64),
    ) -> Result<i32> {
        ctx.fds.install(d, ino, flags, fh, seen)
    }
}

pub(super) struct ToObject;

impl Install for ToObject {
    type Out = File;
    fn install(_: &Ctx, d: DIdx, ino: IIdx, flags: i32, fh: u64, seen: (u64, u64)) -> Result<File> {
        let file = File::default();
        file.fill(d, ino, flags, fh, seen);
        Ok(file)
    }
}

/// The flag combinations `open` refuses before looking at anything.
fn check_open_flags(flags: i32) -> Result<()> {
    if flags & libc::O_CREAT != 0 && flags & libc::O_DIRECTORY != 0 {
        return Err(Errno::EINVAL);
    }
    if flags & libc::O_PATH == 0 && flags & O_ACCMODE == O_ACCMODE {
        return Err(Errno::EINVAL);
    }
    Ok(())
}

impl Ctx {
    /// `openat(dirfd, path, flags, mode)`: a walkfs descriptor. Supports
    /// `O_CREAT`, `O_EXCL`, `O_TRUNC`, `O_DIRECTORY`, `O_NOFOLLOW`,
    /// `O_PATH`, `O_APPEND` and the access modes.
    pub fn openat<'h>(
        &self,
        dirfd: impl Into<At<'h>>,
        path: &[u8],
        flags: i32,
        mode: u32,
    ) -> Result<i32> {
        let dirfd = dirfd.into();
        check_open_flags(flags)?;
        if flags & libc::O_TMPFILE == libc::O_TMPFILE {
            let (c, fh) = self.make_tmpfile(dirfd, path, flags, mode)?;
            return self.open_made::<ToTable>(c, flags, fh);
        }
        self.run(|| {
            let (cur, created) = self.open_lookup(dirfd, path, flags, mode)?;
            self.open_cur::<ToTable>(cur, flags, created)
        })
    }

    /// [`openat`](Ctx::openat), the file an [`OpenFile`] of its own: for
    /// a front end that keeps handles of its own (a FUSE `fh`, a 9P fid).
    /// Every call on it acts as this context.
    pub fn open_file<'h>(
        self: &Arc<Self>,
        dirfd: impl Into<At<'h>>,
        path: &[u8],
        flags: i32,
        mode: u32,
    ) -> Result<OpenFile> {
        let dirfd = dirfd.into();
        check_open_flags(flags)?;
        let file = if flags & libc::O_TMPFILE == libc::O_TMPFILE {
            let (c, fh) = self.make_tmpfile(dirfd, path, flags, mode)?;
            self.open_made::<ToObject>(c, flags, fh)?
        } else {
            self.run(|| {
                let (cur, created) = self.open_lookup(dirfd, path, flags, mode)?;
                self.open_cur::<ToObject>(cur, flags, created)
            })?
        };
        Ok(OpenFile::new(file, Arc::clone(self)))
    }

    /// `O_TMPFILE`: a regular file with no name in the directory `path`
    /// names, made by the backend and held by a disconnected dentry (the
    /// reference returned, for the descriptor to take). `linkat` of the
    /// descriptor may name it later (not with `O_EXCL`); its last close
    /// lets it go.
    fn make_tmpfile(
        &self,
        dirfd: At<'_>,
        path: &[u8],
        flags: i32,
        mode: u32,
    ) -> Result<(Cur, FileHandle)> {
        let acc = flags & O_ACCMODE;
        if acc != libc::O_WRONLY && acc != libc::O_RDWR {
            return Err(Errno::EINVAL);
        }
        let (ds, owner, mode) = self.run(|| {
            let dir = self.lookup_at(dirfd, path, flags & libc::O_NOFOLLOW == 0, false)?;
            let ds = self.inner().dc.inode_snap(dir.ino).ok_or(Step::Restart)?;
            if !ds.is_dir() {
                return Err(Errno::ENOTDIR.into());
            }
            self.check_writable()?;
            let ds = self.may_create(dir)?;
            let (owner, mode) = self.new_owner(&ds, mode, false)?;
            Ok((ds, owner, mode))
        })?;
        let inner = self.inner();
        let fs = inner.sb(ds.sb())?;
        let asked = OpenFlags(flags & (O_ACCMODE | libc::O_EXCL));
        let (entry, fh) = fs.tmpfile(NodeId(ds.node), mode, owner, asked)?;
        let undo = |e: Errno| {
            fs.release(entry.node, fh);
            inner.writer().forgets.push((ds.sb(), entry.node.0));
            e
        };
        let mut w = inner.writer();
        let Some(ino) = w.iget(&inner.dc, ds.sb(), &entry, true) else {
            drop(w);
            return Err(undo(Errno::ENOMEM));
        };
        let Some(d) = w.d_disconnected(&inner.dc, ino) else {
            w.put_inode(&inner.dc, ino);
            drop(w);
            fs.release(entry.node, fh);
            return Err(Errno::ENOMEM);
        };
        drop(w);
        let Ok(c) = Cur::of(&inner.dc, d) else {
            inner.unpin(d);
            fs.release(entry.node, fh);
            return Err(Errno::EAGAIN);
        };
        self.born(&ds, c);
        Ok((c, fh))
    }

    /// Open what a make returned (`c`, its reference and the backend's
    /// handle `fh`), once: a failure gives both back.
    fn open_made<I: Install>(&self, c: Cur, flags: i32, fh: FileHandle) -> Result<I::Out> {
        let mut once = Some(fh);
        self.run(|| match once.take() {
            Some(fh) => self.open_cur::<I>(c, flags, Some(fh)),
            None => Err(Errno::EAGAIN.into()),
        })
    }

    /// Find (or create) what `openat` opens. Returns the dentry and, if it
    /// was created, the backend handle the create opened.
    fn open_lookup(
        &self,
        dirfd: At<'_>,
        path: &[u8],
        flags: i32,
        mode: u32,
    ) -> Res<(Cur, Option<FileHandle>)> {
        let nofollow = flags & libc::O_NOFOLLOW != 0;
        if flags & libc::O_CREAT == 0 || flags & libc::O_PATH != 0 {
            let c = self.lookup_at(dirfd, path, !nofollow, false)?;
            return Ok((c, None));
        }
        // O_CREAT: the last component is ours to find or create; a
        // symlink there is followed (unless O_EXCL/O_NOFOLLOW), and may
        // lead to another last component to create.
        let mut dirfd_path: (At<'_>, Vec<u8>) = (dirfd, path.to_vec());
        let mut start_dir: Option<Cur> = None;
        for _ in 0..=40 {
            let (dir, last, trailing) = match start_dir {
                None => self.lookup_parent(dirfd_path.0, &dirfd_path.1)?,
                Some(d) => self.lookup_parent_from(d.d, &dirfd_path.1)?,
            };
            // Linux: a trailing slash is EISDIR before anything is looked
            // up; `.`, `..` and `/` name the directory itself.
            if trailing && matches!(last, Last::Normal(_)) {
                return Err(Errno::EISDIR.into());
            }
            let name = match last {
                Last::Normal(n) => n,
                _ if flags & libc::O_EXCL != 0 => return Err(Errno::EEXIST.into()),
                _ => return Err(Errno::EISDIR.into()),
            };
            if flags & libc::O_EXCL != 0 && self.may_create_unseen(dir, &name) {
                // Linux's atomic_open: a name the cache knows nothing of
                // is created without asking first whether it exists (one
                // round trip fewer on a share): the backend's EEXIST is
                // the answer when it does, as it is for O_EXCL anyway.
                let (c, fh) = self.create_file(dir, &name, mode, flags)?;
                return Ok((c, Some(fh)));
            }
            match self.lookup_child(dir, &name)? {
                Some(c) => {
                    if flags & libc::O_EXCL != 0 {
                        return Err(Errno::EEXIST.into());
                    }
                    if c.is_symlink() {
                        if nofollow {
                            return Err(Errno::ELOOP.into());
                        }
                        let body = namei::get_link(self.inner(), c)?;
                        if body.is_empty() {
                            return Err(Errno::ENOENT.into());
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
                        return Err(Errno::EISDIR.into());
                    }
                    return Ok((c, None));
                }
                None => {
                    let (c, fh) = self.create_file(dir, &name, mode, flags)?;
                    return Ok((c, Some(fh)));
                }
            }
        }
        Err(Errno::ELOOP.into())
    }

    /// Open the file at `c`: into the descriptor table, or as a file of
    /// its own (`I`). `created` is the handle of a file `openat` just
    /// made, whose dentry came back pinned (see `modify`): past that
    /// point nothing may start over, or `O_EXCL` would then fail on the
    /// file it made.
    pub(super) fn open_cur<I: Install>(
        &self,
        c: Cur,
        flags: i32,
        created: Option<FileHandle>,
    ) -> Res<I::Out> {
        let inner = self.inner();
        let Some(s) = inner.dc.inode_snap(c.ino) else {
            if let Some(fh) = created {
                self.release_created(c, fh);
                return Err(Errno::EAGAIN.into());
            }
            return Err(Step::Restart);
        };
        let fh = if flags & libc::O_PATH != 0 {
            if flags & libc::O_DIRECTORY != 0 && !s.is_dir() {
                return Err(Errno::ENOTDIR.into());
            }
            NO_HANDLE
        } else if let Some(fh) = created {
            fh.0
        } else {
            if flags & libc::O_DIRECTORY != 0 && !s.is_dir() {
                return Err(Errno::ENOTDIR.into());
            }
            if s.is_symlink() {
                return Err(Errno::ELOOP.into());
            }
            let acc = flags & O_ACCMODE;
            let mut want = match acc {
                // An exec's open of the program (`do_open_execat`): the
                // right to execute it, not to read it.
                libc::O_RDONLY if flags & FMODE_EXEC != 0 => {
                    if !s.is_reg() {
                        return Err(Errno::EACCES.into());
                    }
                    crate::perm::MAY_EXEC
                }
                libc::O_RDONLY => MAY_READ,
                libc::O_WRONLY => MAY_WRITE,
                _ => MAY_READ | MAY_WRITE,
            };
            if flags & libc::O_TRUNC != 0 {
                want |= MAY_WRITE;
            }
            if s.is_dir() && want & MAY_WRITE != 0 {
                return Err(Errno::EISDIR.into());
            }
            match FileType::from_mode(s.mode) {
                Some(FileType::Socket) => return Err(Errno::ENXIO.into()),
                Some(FileType::Regular | FileType::Directory) => {}
                // Device nodes and fifos are never opened for a caller.
                _ => return Err(Errno::EACCES.into()),
            }
            self.permission(&s, want)?;
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
                if trunc != 0 {
                    // Gathered writes of another descriptor land first.
                    inner.flush_file(s.sb(), s.node)?;
                }
                // O_APPEND goes to the backend too: a host file marked
                // append-only (chattr +a) opens for writing only with it.
                let append = flags & libc::O_APPEND;
                let fh = fs.open(NodeId(s.node), OpenFlags(acc | trunc | append))?;
                if trunc != 0 {
                    let mut w = inner.writer();
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
        if created.is_none() && !self.pin(c) {
            release(fh);
            return Err(Step::Restart);
        }
        let seen = inner.wb.sample(s.sb(), s.node);
        match I::install(self, c.d, c.ino, flags, fh, seen) {
            Ok(out) => Ok(out),
            Err(e) => {
                release(fh);
                inner.unpin(c.d);
                Err(e.into())
            }
        }
    }

    /// May `name` be created in `dir` without looking it up first? Only
    /// when nothing is cached under it (a cached name, positive or
    /// negative, a mount point, takes the usual way) and the caller may
    /// create there: otherwise Linux's error order (EEXIST over EACCES
    /// for a name that exists) needs the lookup.
    fn may_create_unseen(&self, dir: Cur, name: &[u8]) -> bool {
        let inner = self.inner();
        inner.dc.d_lookup(dir.d, name, hash_name(name)).is_none()
            && self.check_writable().is_ok()
            && self.may_create(dir).is_ok()
    }

    /// Pin the dentry of `c` for a descriptor: a pin this context parked
    /// at a close if there is one for it (no shared write), else a new one.
    fn pin(&self, c: Cur) -> bool {
        let inner = self.inner();
        if self.pins.take(c.d, c.seq) {
            // Held since it was parked, so not freed; but the walk's view
            // must still be current.
            if inner.dc.unchanged(&c) {
                return true;
            }
            inner.unpin(c.d);
            return false;
        }
        inner.pin(c.d, c.seq)
    }

    /// Undo a create's pin and handle when its open cannot finish.
    fn release_created(&self, c: Cur, fh: FileHandle) {
        let inner = self.inner();
        if let Some(s) = inner.dc.inode_snap(c.ino) {
            if let Ok(fs) = inner.sb(s.sb()) {
                fs.release(NodeId(s.node), fh);
            }
        }
        inner.unpin(c.d);
    }

    /// Open what descriptor `fd` refers to again, with `flags` (what
    /// `open("/proc/self/fd/N")` does, with the permission checks of an
    /// open and without following a symlink `fd` names).
    pub fn reopen<'h>(&self, fd: impl Into<At<'h>>, flags: i32) -> Result<i32> {
        self.reopen_into::<ToTable>(fd.into(), flags)
    }

    /// The body of both reopens: into the table or as an object (`I`).
    fn reopen_into<I: Install>(&self, at: At<'_>, flags: i32) -> Result<I::Out> {
        if flags & libc::O_CREAT != 0 {
            return Err(Errno::EINVAL);
        }
        if flags & libc::O_PATH == 0 && flags & O_ACCMODE == O_ACCMODE {
            return Err(Errno::EINVAL);
        }
        self.run(|| {
            let d = self.fd_dentry(at)?;
            let c = Cur::of(&self.inner().dc, d)?;
            self.open_cur::<I>(c, flags, None)
        })
    }

    /// [`reopen`](Ctx::reopen), the file an [`OpenFile`] of its own (see
    /// [`open_file`](Ctx::open_file)).
    pub fn reopen_file<'h>(
        self: &Arc<Self>,
        at: impl Into<At<'h>>,
        flags: i32,
    ) -> Result<OpenFile> {
        self.reopen_into::<ToObject>(at.into(), flags)
            .map(|file| OpenFile::new(file, Arc::clone(self)))
    }

    /// `close(fd)`.
    /// `close(fd)`. The descriptor is closed whatever the result; an
    /// error is one a change of the file sent without waiting has met
    /// (as close(2) reports a write-back error on NFS).
    pub fn close(&self, fd: i32) -> Result<()> {
        // What the file has reported, read while the slot is still ours.
        let seen = self.fds.get(fd).map_or(0, |f| f.seen.file.load(Relaxed));
        let (d, fh, ino) = self.fds.remove(fd)?;
        self.release(d, fh, ino, seen)
    }

    /// Close an [`OpenFile`]'s file (at its last reference, or its
    /// `close`); `EBADF` when closed already.
    pub(crate) fn release_file(&self, file: &File) -> Result<()> {
        let seen = file.seen.file.load(Relaxed);
        let (d, fh, ino) = file.empty()?;
        self.release(d, fh, ino, seen)
    }

    /// What a close does once the file is emptied: its changes' failure
    /// not yet seen (`seen`) reported, the backend handle released, the
    /// dentry's pin parked for the next open.
    fn release(&self, d: DIdx, fh: u64, ino: IIdx, seen: u64) -> Result<()> {
        let inner = self.inner();
        let mut r = Ok(());
        if fh != NO_HANDLE && fh != crate::file::LAZY {
            if let Some(s) = inner.dc.inode_snap(ino) {
                if let Ok(fs) = inner.sb(s.sb()) {
                    let seen = std::sync::atomic::AtomicU64::new(seen);
                    r = inner.file_closing(&seen, s.sb(), s.node);
                    // The handle goes only once the changes sent through
                    // it behind their callers are answered: a server
                    // restarted meanwhile is sent them again through it,
                    // and the client opens again only the handles it
                    // still holds (a close under a lease does not wait
                    // for them; this release is the kernel's, after it).
                    if fs.ordered().is_some() {
                        inner.wb.wait_unseen(s.sb(), &[s.node]);
                    }
                    fs.release(NodeId(s.node), FileHandle(fh));
                }
            }
        }
        self.pins.park(inner, d);
        r
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use crate::tests_util::{mem_vfs, with_dirs};
    use crate::{Errno, AT_FDCWD};

    #[test]
    fn o_excl_creates_once_and_o_creat_follows_a_dangling_symlink() {
        let vfs = mem_vfs("");
        let ctx = with_dirs(&vfs, &["/d"]);
        let excl = libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY;
        let fd = ctx.openat(AT_FDCWD, b"/d/f", excl, 0o600).expect("create");
        ctx.close(fd).expect("close");
        assert_eq!(
            ctx.openat(AT_FDCWD, b"/d/f", excl, 0o600),
            Err(Errno::EEXIST)
        );
        ctx.symlinkat(b"made", AT_FDCWD, b"/d/link")
            .expect("symlink");
        let fd = ctx
            .openat(AT_FDCWD, b"/d/link", libc::O_CREAT | libc::O_WRONLY, 0o600)
            .expect("create through the link");
        ctx.close(fd).expect("close");
        assert_eq!(ctx.faccessat(AT_FDCWD, b"/d/made", 0, 0), Ok(()));
        assert_eq!(
            ctx.openat(AT_FDCWD, b"/d/link", excl, 0o600),
            Err(Errno::EEXIST)
        );
        assert_eq!(
            ctx.openat(AT_FDCWD, b"/d/link", libc::O_RDONLY | libc::O_NOFOLLOW, 0),
            Err(Errno::ELOOP)
        );
    }

    #[test]
    fn special_files_and_directories_open_as_linux_allows() {
        let vfs = mem_vfs("");
        let ctx = with_dirs(&vfs, &["/d"]);
        assert_eq!(
            ctx.openat(AT_FDCWD, b"/d", libc::O_WRONLY, 0),
            Err(Errno::EISDIR)
        );
        assert_eq!(
            ctx.openat(AT_FDCWD, b"/d", libc::O_CREAT | libc::O_DIRECTORY, 0),
            Err(Errno::EINVAL)
        );
        let fd = ctx
            .openat(AT_FDCWD, b"/d", libc::O_RDONLY | libc::O_DIRECTORY, 0)
            .expect("open dir");
        let names: Vec<Vec<u8>> = ctx
            .getdents(fd)
            .expect("getdents")
            .into_iter()
            .map(|e| e.name)
            .collect();
        assert_eq!(names, vec![b".".to_vec(), b"..".to_vec()]);
        ctx.close(fd).expect("close");
        let p = ctx
            .openat(AT_FDCWD, b"/d", libc::O_PATH, 0)
            .expect("O_PATH");
        assert_eq!(ctx.pread(p, &mut [0u8; 4], 0), Err(Errno::EBADF));
    }
}
