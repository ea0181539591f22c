//! I/O on open descriptors: reads and writes (the backend open deferred to
//! the first one for read-only files), `lseek`, `getdents`, `ftruncate`,
//! and dropping set-id bits on a write (Linux's `file_remove_privs`).

use super::prelude::*;

/// Whose write (or truncate) decides which set-id bits it drops
/// (Linux's `file_remove_privs`).
#[derive(Clone, Copy, Debug)]
pub enum WriteAs<'a> {
    /// Whoever opened the file: what a write through a descriptor does.
    Opener,
    /// These credentials: a front end whose kernel names the writer, and
    /// has said the bits must go (FUSE's `WRITE_KILL_SUIDGID`; a truncate
    /// by a caller other than the opener).
    As(&'a crate::Creds),
    /// Nobody's: the kernel above has said the bits stay.
    Keep,
}

impl Ctx {
    /// The open file behind `fd` with what I/O needs, opening it in the
    /// backend if that was deferred.
    pub(super) fn io_file<'a>(
        &'a self,
        at: FileAt<'a>,
    ) -> Result<(&'a crate::file::File, InodeSnap, u32)> {
        let inner = self.inner();
        let file = self.file(at)?;
        let s = inner
            .dc
            .inode_snap(IIdx(file.inode.load(Relaxed)))
            .ok_or(Errno::EAGAIN)?;
        let flags = file.flags.load(Relaxed);
        match file.fh.load(Relaxed) {
            NO_HANDLE => return Err(Errno::EBADF),
            crate::file::LAZY => {
                let _g = file.open_lock.lock();
                // Closed meanwhile: the file is no longer ours.
                if !file.is_open() {
                    return Err(Errno::EBADF);
                }
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

    /// The first read of a file opened lazily (read-only) opens it too,
    /// in one backend call (`caps::Remote::open_read`: one round trip to a
    /// remote server). `None`: the file is open already, or is a
    /// directory (the usual path answers).
    fn open_and_read(&self, at: FileAt<'_>, buf: &mut [u8], off: u64) -> Result<Option<usize>> {
        let inner = self.inner();
        let file = self.file(at)?;
        if file.fh.load(Relaxed) != crate::file::LAZY {
            return Ok(None);
        }
        let s = inner
            .dc
            .inode_snap(IIdx(file.inode.load(Relaxed)))
            .ok_or(Errno::EAGAIN)?;
        let flags = file.flags.load(Relaxed) as i32;
        if s.is_dir() || flags & O_ACCMODE == libc::O_WRONLY {
            return Ok(None);
        }
        let _g = file.open_lock.lock();
        // Closed, or opened by another read, meanwhile.
        if !file.is_open() {
            return Err(Errno::EBADF);
        }
        if file.fh.load(Relaxed) != crate::file::LAZY {
            return Ok(None);
        }
        // What was gathered goes first: the backend reads what it has (and
        // a file read ahead before it is not used: fileahead.rs).
        inner.flush_file(s.sb(), s.node)?;
        let fs = inner.sb(s.sb())?;
        let ahead = if flags & O_ACCMODE == libc::O_RDONLY {
            inner.file_ahead(&*fs, (s.sb(), s.node))
        } else {
            None
        };
        let (n, hit) = match ahead {
            Some((fh, data)) => {
                file.fh.store(fh.0, Relaxed);
                let n = match crate::fileahead::serves(&data, off, buf.len()) {
                    Some(n) => {
                        let at = off as usize;
                        buf[..n].copy_from_slice(&data[at.min(data.len())..][..n]);
                        n
                    }
                    None => fs.read(NodeId(s.node), fh, off, buf)?,
                };
                (n, true)
            }
            None => {
                let (fh, n) =
                    fs.open_read(NodeId(s.node), OpenFlags(flags & O_ACCMODE), off, buf)?;
                file.fh.store(fh.0, Relaxed);
                (n, false)
            }
        };
        // The next files of its directory, for a reader going through
        // them in order.
        let parent = inner
            .dc
            .snap(DIdx(file.dentry.load(Relaxed)))
            .and_then(|d| inner.dc.snap(d.parent))
            .and_then(|p| inner.dc.inode_snap(p.inode()));
        if let Some(p) = parent.filter(|p| p.sb() == s.sb()) {
            inner.read_files_ahead(&fs, s.sb(), p.node, s.node, hit);
        }
        Ok(Some(n))
    }

    /// `pread(fd, buf, off)`.
    pub(crate) fn pread_at(&self, at: FileAt<'_>, buf: &mut [u8], off: u64) -> Result<usize> {
        if let Some(n) = self.open_and_read(at, buf, off)? {
            return Ok(n);
        }
        let (file, s, flags) = self.io_file(at)?;
        if flags as i32 & O_ACCMODE == libc::O_WRONLY {
            return Err(Errno::EBADF);
        }
        if s.is_dir() {
            return Err(Errno::EISDIR);
        }
        let inner = self.inner();
        // What was gathered goes first: the backend reads what it has.
        inner.flush_file(s.sb(), s.node)?;
        let fs = inner.sb(s.sb())?;
        fs.read(NodeId(s.node), FileHandle(file.fh.load(Relaxed)), off, buf)
    }

    /// The host file behind `fd`, for a kernel that does the file's I/O
    /// itself (FUSE passthrough); `None` when the backend's files are not
    /// host files. What was gathered for the file is sent first, so the
    /// host file holds everything written through `fd` so far.
    pub(crate) fn host_file_at(
        &self,
        at: FileAt<'_>,
    ) -> Result<Option<std::sync::Arc<std::os::fd::OwnedFd>>> {
        let (file, s, _) = self.io_file(at)?;
        if s.is_dir() {
            return Ok(None);
        }
        let inner = self.inner();
        inner.flush_file(s.sb(), s.node)?;
        let fs = inner.sb(s.sb())?;
        Ok(fs
            .host_files()
            .and_then(|h| h.host_file(NodeId(s.node), FileHandle(file.fh.load(Relaxed)))))
    }

    /// `read(fd, buf)` at the file position.
    pub(crate) fn read_at(&self, at: FileAt<'_>, buf: &mut [u8]) -> Result<usize> {
        // Not `io_file`: a lazily opened file is opened by the read.
        let file = self.file(at)?;
        let mut pos = file.pos.lock();
        let n = self.pread_at(at, buf, *pos)?;
        *pos += n as u64;
        Ok(n)
    }

    /// `pwrite(fd, data, off)` (appends under `O_APPEND`, as Linux does).
    pub(crate) fn pwrite_at(&self, at: FileAt<'_>, data: &[u8], off: u64) -> Result<usize> {
        self.write_to(at, data, Some(off), WriteAs::Opener)
    }

    /// [`pwrite_at`](Self::pwrite_at), set-id bits dropped as `w` says.
    pub(crate) fn pwrite_by(
        &self,
        at: FileAt<'_>,
        data: &[u8],
        off: u64,
        w: WriteAs<'_>,
    ) -> Result<usize> {
        self.write_to(at, data, Some(off), w)
    }

    /// `write(fd, data)` at the file position.
    pub(crate) fn write_at(&self, at: FileAt<'_>, data: &[u8]) -> Result<usize> {
        self.write_to(at, data, None, WriteAs::Opener)
    }

    fn write_to(
        &self,
        at: FileAt<'_>,
        data: &[u8],
        off: Option<u64>,
        w: WriteAs<'_>,
    ) -> Result<usize> {
        let _later = crate::writeback::SettleLater::new();
        let (file, s, flags) = self.io_file(at)?;
        if flags as i32 & O_ACCMODE == libc::O_RDONLY {
            return Err(Errno::EBADF);
        }
        let inner = self.inner();
        let fs = inner.sb(s.sb())?;
        let ino = IIdx(file.inode.load(Relaxed));
        let fh = FileHandle(file.fh.load(Relaxed));
        let mut behind = inner.defers(&*fs);
        let mut pos = file.pos.lock();
        let at = if flags as i32 & libc::O_APPEND == 0 {
            off.unwrap_or(*pos)
        } else if behind && s.fresh() {
            // The cache keeps the size of a file written behind.
            s.size
        } else {
            inner.flush_file(s.sb(), s.node)?;
            fs.getattr(NodeId(s.node))?.size
        };
        if !data.is_empty() {
            self.kill_privs_by(w, ino)?;
        }
        // Past the size every file system takes, the backend's EFBIG is
        // the caller's to hear.
        behind &= at.saturating_add(data.len() as u64) <= crate::writeback::BEHIND_MAX_SIZE;
        let n = if behind {
            let d = DIdx(file.dentry.load(Relaxed));
            inner.write_behind(&*fs, s.sb(), s.node, fh, at, data, d)?;
            data.len()
        } else {
            fs.write(NodeId(s.node), fh, at, data)?
        };
        if off.is_none() || flags as i32 & libc::O_APPEND != 0 && off.is_none() {
            *pos = at + n as u64;
        }
        drop(pos);
        if behind {
            // The backend has not seen the write yet: what it will make
            // of the size and times is known here (a file's changes are
            // carried out in order).
            inner.wrote(ino, s.node, at + n as u64, Ctx::now());
        } else {
            inner.writer().mark_stale(&inner.dc, ino);
        }
        Ok(n)
    }

    /// The open file behind `fd`, its superblock and node.
    fn sync_target<'a>(
        &'a self,
        at: FileAt<'a>,
    ) -> Result<(&'a crate::file::File, usize, u64, bool)> {
        let inner = self.inner();
        let file = self.file(at)?;
        let s = inner
            .dc
            .inode_snap(IIdx(file.inode.load(Relaxed)))
            .ok_or(Errno::EBADF)?;
        Ok((file, s.sb(), s.node, s.is_dir()))
    }

    /// `fsync(fd)` (and `fdatasync`): every change of the file — or, for
    /// a directory, of its entries — that ran behind its caller has been
    /// carried out; a failure one of them met since this file last
    /// reported one is returned (writeback.rs).
    pub(crate) fn fsync_at(&self, at: FileAt<'_>) -> Result<()> {
        let (file, sb, node, _) = self.sync_target(at)?;
        let inner = self.inner();
        let sent = inner.flush_file(sb, node);
        inner.wb.wait_for(sb, &[node]);
        sent.and(inner.wb.report(sb, node, &file.seen.file))
    }

    /// `syncfs(fd)`: everything of every backend carried out; a failure
    /// any change met since this file last looked is returned.
    pub(crate) fn syncfs_at(&self, at: FileAt<'_>) -> Result<()> {
        let (file, ..) = self.sync_target(at)?;
        let inner = self.inner();
        inner.flush_all();
        inner.wb.wait_all();
        inner.wb.report_any(&file.seen.sb)
    }

    /// What `close(2)` reports without closing (FUSE's flush): the file's
    /// gathered writes sent, and a failure a change of the file met that
    /// this file has not reported (with `cache=coherent`, after waiting
    /// for its changes: the next open, anywhere, sees them).
    pub(crate) fn flush_at(&self, at: FileAt<'_>) -> Result<()> {
        let (file, sb, node, _) = self.sync_target(at)?;
        self.inner().file_closing(&file.seen.file, sb, node)
    }

    /// `lseek(fd, off, whence)` for `SEEK_SET`, `SEEK_CUR`, `SEEK_END`.
    pub(crate) fn lseek_at(&self, at: FileAt<'_>, off: i64, whence: i32) -> Result<u64> {
        let file = self.file(at)?;
        let mut pos = file.pos.lock();
        let base = match whence {
            libc::SEEK_SET => 0i64,
            libc::SEEK_CUR => *pos as i64,
            libc::SEEK_END => {
                drop(pos);
                let size = self.fstatx_at(at, libc::STATX_SIZE)?.stx_size as i64;
                pos = file.pos.lock();
                size
            }
            libc::SEEK_DATA | libc::SEEK_HOLE => {
                drop(pos);
                let to = self.seek_data_at(at, off, whence)?;
                *file.pos.lock() = to;
                return Ok(to);
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
    pub(crate) fn getdents_at(&self, at: FileAt<'_>) -> Result<Vec<DirEntryOut>> {
        self.getdents_with(at, false)
    }

    /// [`getdents`](Self::getdents) for a caller that wants names, types
    /// and inode numbers only: the backend lists by name (a local
    /// directory: getdents64 alone, no stat per entry), and nothing is
    /// cached. For a FUSE listing the kernel is given without attributes.
    pub(crate) fn getdents_names_at(&self, at: FileAt<'_>) -> Result<Vec<DirEntryOut>> {
        self.getdents_with(at, true)
    }

    fn getdents_with(&self, at: FileAt<'_>, names_only: bool) -> Result<Vec<DirEntryOut>> {
        let inner = self.inner();
        let file = self.file(at)?;
        if file.fh.load(Relaxed) == NO_HANDLE {
            return Err(Errno::EBADF);
        }
        let s = inner
            .dc
            .inode_snap(IIdx(file.inode.load(Relaxed)))
            .ok_or(Errno::EAGAIN)?;
        if !s.is_dir() {
            return Err(Errno::ENOTDIR);
        }
        let d = DIdx(file.dentry.load(Relaxed));
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
            if names_only {
                all.extend(inner.sb(s.sb())?.readdir(NodeId(s.node))?);
            } else {
                all.extend(self.list_dir(&s, d, IIdx(file.inode.load(Relaxed)))?);
            }
            *listing = Some(all);
        }
        let all = listing.as_ref().map(Vec::as_slice).unwrap_or(&[]);
        let mut pos = file.pos.lock();
        let start = (*pos as usize).min(all.len());
        let out = all[start..].to_vec();
        *pos = all.len() as u64;
        Ok(out)
    }

    /// The entries of directory `s` (dentry `d`, inode `ino`) from its
    /// backend: listed with attributes and cached when the backend can
    /// (listing.rs), else by name.
    fn list_dir(&self, s: &InodeSnap, d: DIdx, ino: IIdx) -> Result<Vec<DirEntry>> {
        let inner = self.inner();
        let fs = inner.sb(s.sb())?;
        if inner.sw.revalidate.load(Relaxed) {
            return fs.readdir(NodeId(s.node));
        }
        let _dir = inner.dirs.shared(ino);
        match inner.list_plus(s, d, ino) {
            Some(r) => r.map(|(entries, _)| entries),
            None => fs.readdir(NodeId(s.node)),
        }
    }

    /// `ftruncate(fd, len)`.
    pub(crate) fn ftruncate_at(&self, at: FileAt<'_>, len: i64, w: WriteAs<'_>) -> Result<()> {
        let _later = crate::writeback::SettleLater::new();
        if len < 0 {
            return Err(Errno::EINVAL);
        }
        let (file, s, flags) = self.io_file(at)?;
        if flags as i32 & O_ACCMODE == libc::O_RDONLY || !s.is_reg() {
            return Err(Errno::EINVAL);
        }
        let inner = self.inner();
        let ino = IIdx(file.inode.load(Relaxed));
        self.kill_privs_by(w, ino)?;
        // What was gathered goes first: the size cuts what was written.
        inner.flush_file(s.sb(), s.node)?;
        let set = SetAttr {
            size: Some(len as u64),
            ..SetAttr::default()
        };
        let fs = inner.sb(s.sb())?;
        // Behind the caller where the write-back runs and the file's
        // attributes are cached (its set-id bits were dealt with above):
        // the outcome is the new size and the current time.
        let cur = inner.dc.inode_snap(ino).ok_or(Errno::EAGAIN)?;
        // (Not past the size every file system takes: the backend's EFBIG
        // is the caller's to hear, as Linux's ftruncate returns it.)
        if inner.defers(&*fs)
            && cur.fresh()
            && cur.node == s.node
            && len as u64 <= crate::writeback::BEHIND_MAX_SIZE
        {
            let d = DIdx(file.dentry.load(Relaxed));
            inner.setattr_behind(&*fs, s.sb(), s.node, set, d)?;
            let now = Ctx::now();
            let mut attr = cur.attr();
            attr.size = len as u64;
            attr.blocks = (len as u64).div_ceil(4096) * 8;
            attr.mtime = now;
            attr.ctime = now;
            inner.changed_attrs(ino, s.node, &attr);
            return Ok(());
        }
        let attr = fs.setattr(NodeId(s.node), &set)?;
        inner.changed_attrs(ino, s.node, &attr);
        Ok(())
    }

    /// Drop the set-id bits a write or truncate by this caller must drop
    /// (policy.rs), before the write.
    pub(super) fn kill_privs(&self, ino: IIdx) -> Result<()> {
        self.kill_privs_by(WriteAs::Opener, ino)
    }

    /// [`kill_privs`](Self::kill_privs) for the writer `w` names (this
    /// context for [`WriteAs::Opener`]).
    fn kill_privs_by(&self, w: WriteAs<'_>, ino: IIdx) -> Result<()> {
        let creds = match w {
            WriteAs::Opener => &self.creds,
            WriteAs::As(c) => c,
            WriteAs::Keep => return Ok(()),
        };
        let inner = self.inner();
        let s = inner.dc.inode_snap(ino).ok_or(Errno::EAGAIN)?;
        let kill = policy::privs_to_kill(creds, &s);
        if kill == 0 {
            return Ok(());
        }
        let set = SetAttr {
            mode: Some(s.mode & 0o7777 & !kill),
            ..SetAttr::default()
        };
        inner.flush_file(s.sb(), s.node)?;
        let attr = inner.sb(s.sb())?.setattr(NodeId(s.node), &set)?;
        inner.changed_attrs(ino, s.node, &attr);
        Ok(())
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use crate::tests_util::{mem_vfs, user, with_dirs};
    use crate::{Errno, AT_FDCWD};

    #[test]
    fn reads_writes_appends_and_seeks() {
        let vfs = mem_vfs("");
        let ctx = with_dirs(&vfs, &["/d"]);
        let fd = ctx
            .openat(AT_FDCWD, b"/d/f", libc::O_CREAT | libc::O_RDWR, 0o644)
            .expect("create");
        assert_eq!(ctx.write(fd, b"hello "), Ok(6));
        assert_eq!(ctx.pwrite(fd, b"world", 6), Ok(5));
        assert_eq!(ctx.lseek(fd, 0, libc::SEEK_SET), Ok(0));
        let mut buf = [0u8; 32];
        assert_eq!(ctx.read(fd, &mut buf), Ok(11));
        assert_eq!(&buf[..11], b"hello world");
        assert_eq!(ctx.lseek(fd, -5, libc::SEEK_END), Ok(6));
        ctx.close(fd).expect("close");
        let ro = ctx
            .openat(AT_FDCWD, b"/d/f", libc::O_RDONLY, 0)
            .expect("open");
        assert_eq!(ctx.write(ro, b"x"), Err(Errno::EBADF));
        assert_eq!(ctx.ftruncate(ro, 0), Err(Errno::EINVAL));
        let ap = ctx
            .openat(AT_FDCWD, b"/d/f", libc::O_WRONLY | libc::O_APPEND, 0)
            .expect("open");
        assert_eq!(ctx.pwrite(ap, b"!", 0), Ok(1), "O_APPEND appends, as Linux");
        assert_eq!(ctx.pread(ro, &mut buf, 0), Ok(12));
        assert_eq!(buf[11], b'!');
    }

    #[test]
    fn a_write_by_another_user_drops_set_id_bits() {
        let vfs = mem_vfs("");
        let ctx = with_dirs(&vfs, &["/d"]);
        let fd = ctx
            .openat(AT_FDCWD, b"/d/s", libc::O_CREAT | libc::O_WRONLY, 0o6777)
            .expect("create");
        ctx.close(fd).expect("close");
        ctx.fchmodat(AT_FDCWD, b"/d/s", 0o6777, 0).expect("chmod");
        let user = vfs.context(user(1000, 1000, &[]));
        let fd = user
            .openat(AT_FDCWD, b"/d/s", libc::O_WRONLY, 0)
            .expect("open");
        assert_eq!(user.write(fd, b"x"), Ok(1));
        let st = ctx
            .statx(AT_FDCWD, b"/d/s", 0, libc::STATX_MODE)
            .expect("stat");
        assert_eq!(st.stx_mode as u32 & 0o7777, 0o777);
    }
}
