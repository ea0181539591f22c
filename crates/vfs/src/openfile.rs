//! Open files as counted objects (Linux's `struct file` apart from the
//! fdtable; gVisor's `FileDescription`): what a front end that keeps
//! handles of its own holds (a FUSE `fh`, a 9P fid), where the C ABI and
//! the CLI keep descriptors of a [`Ctx`]'s table.
//!
//! An [`OpenFile`] holds its open state (the dentry pinned, the backend's
//! handle, the flags, the position, a directory listing being read) and
//! the context that opened it. Every call on it acts with the opener's
//! credentials: set-id bits a write must drop, `O_APPEND`, and the access
//! mode are decided once, in the vfs, for whoever opened it, whoever
//! sends the request that uses it. Clones share one open file; it is
//! released when the last goes, or at [`OpenFile::close`], which reports
//! what a close reports (a failure a change running behind met).

use std::sync::Arc;

use walkfs_fsapi::Result;

use crate::file::File;
use crate::handle::{At, Handle};
use crate::ops::{Ctx, DirEntryOut, FileAt, WriteAs};
use crate::stat::Statx;
use crate::Vfs;

/// An open file of one [`crate::Vfs`], counted: see the module comment.
#[derive(Clone)]
pub struct OpenFile(Arc<Opened>);

struct Opened {
    file: File,
    /// The opener: its credentials decide what the calls may do, and its
    /// pin cache takes the dentry back at the release.
    ctx: Arc<Ctx>,
}

impl Drop for Opened {
    fn drop(&mut self) {
        // EBADF: closed already, by `close`.
        let _ = self.ctx.release_file(&self.file);
    }
}

impl std::fmt::Debug for OpenFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "OpenFile({:p})", Arc::as_ptr(&self.0))
    }
}

impl OpenFile {
    /// Wrap a file just filled (open) for `ctx`.
    pub(crate) fn new(file: File, ctx: Arc<Ctx>) -> OpenFile {
        OpenFile(Arc::new(Opened { file, ctx }))
    }

    /// The file, if it belongs to `vfs` (a file of another vfs names
    /// nothing in this one).
    pub(crate) fn file_in(&self, vfs: &Vfs) -> Option<&File> {
        self.0.ctx.vfs().same(vfs).then_some(&self.0.file)
    }

    fn at(&self) -> FileAt<'_> {
        FileAt::Open(&self.0.file)
    }

    /// The context that opened it.
    pub fn ctx(&self) -> &Arc<Ctx> {
        &self.0.ctx
    }

    /// Do `self` and `other` share one open file?
    pub fn same(&self, other: &OpenFile) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// The `open(2)` flags it was opened with.
    pub fn flags(&self) -> i32 {
        self.0.file.flags.load(crate::sync::Ordering::Relaxed) as i32
    }

    /// `pread(fd, buf, off)`.
    pub fn pread(&self, buf: &mut [u8], off: u64) -> Result<usize> {
        self.0.ctx.pread_at(self.at(), buf, off)
    }

    /// `read(fd, buf)` at the file position.
    pub fn read(&self, buf: &mut [u8]) -> Result<usize> {
        self.0.ctx.read_at(self.at(), buf)
    }

    /// `pwrite(fd, data, off)`: set-id bits dropped as a write by the
    /// opener drops them; appends under `O_APPEND`.
    pub fn pwrite(&self, data: &[u8], off: u64) -> Result<usize> {
        self.0.ctx.pwrite_at(self.at(), data, off)
    }

    /// [`pwrite`](Self::pwrite), the set-id bits dropped for the writer
    /// `w` names (a FUSE kernel says who writes, and whether the bits go).
    pub fn pwrite_by(&self, data: &[u8], off: u64, w: WriteAs<'_>) -> Result<usize> {
        self.0.ctx.pwrite_by(self.at(), data, off, w)
    }

    /// `write(fd, data)` at the file position.
    pub fn write(&self, data: &[u8]) -> Result<usize> {
        self.0.ctx.write_at(self.at(), data)
    }

    /// `ftruncate(fd, len)`: set-id bits dropped as a truncate by the
    /// opener drops them.
    pub fn ftruncate(&self, len: i64) -> Result<()> {
        self.0.ctx.ftruncate_at(self.at(), len, WriteAs::Opener)
    }

    /// [`ftruncate`](Self::ftruncate) by the writer `w` names.
    pub fn ftruncate_by(&self, len: i64, w: WriteAs<'_>) -> Result<()> {
        self.0.ctx.ftruncate_at(self.at(), len, w)
    }

    /// `fsync(fd)`: see [`Ctx::fsync`].
    pub fn fsync(&self) -> Result<()> {
        self.0.ctx.fsync_at(self.at())
    }

    /// `syncfs(fd)`: see [`Ctx::syncfs`].
    pub fn syncfs(&self) -> Result<()> {
        self.0.ctx.syncfs_at(self.at())
    }

    /// What a close reports, without closing (FUSE's flush): see
    /// [`Ctx::flush`].
    pub fn flush(&self) -> Result<()> {
        self.0.ctx.flush_at(self.at())
    }

    /// Take, convert or drop a lock for `owner` (`fcntl(F_SETLK[W])`,
    /// `flock`): see [`crate::LockWait`] and ops/lock.rs.
    pub fn setlk(
        &self,
        owner: walkfs_fsapi::LockOwner,
        lock: &walkfs_fsapi::FileLock,
        wait: crate::LockWait<'_>,
    ) -> Result<()> {
        self.0.ctx.setlk_at(self.at(), owner, lock, wait)
    }

    /// `fcntl(F_GETLK)`: another owner's lock in the way of `lock`.
    pub fn getlk(
        &self,
        owner: walkfs_fsapi::LockOwner,
        lock: &walkfs_fsapi::FileLock,
    ) -> Result<Option<walkfs_fsapi::FileLock>> {
        self.0.ctx.getlk_at(self.at(), owner, lock)
    }

    /// `owner` closed a descriptor of this file: its POSIX locks on the
    /// file go.
    pub fn unlock_owner(&self, owner: walkfs_fsapi::LockOwner) -> Result<()> {
        self.0.ctx.unlock_owner_at(self.at(), owner)
    }

    /// `lseek(fd, off, whence)`, `SEEK_DATA`/`SEEK_HOLE` included.
    pub fn lseek(&self, off: i64, whence: i32) -> Result<u64> {
        self.0.ctx.lseek_at(self.at(), off, whence)
    }

    /// `fallocate(fd, mode, off, len)`: see [`Ctx::fallocate`].
    pub fn fallocate(&self, mode: i32, off: i64, len: i64) -> Result<()> {
        self.0.ctx.fallocate_at(self.at(), mode, off, len)
    }

    /// `getdents64(fd)`: see [`Ctx::getdents`].
    pub fn getdents(&self) -> Result<Vec<DirEntryOut>> {
        self.0.ctx.getdents_at(self.at())
    }

    /// Names, types and inode numbers only: see [`Ctx::getdents_names`].
    pub fn getdents_names(&self) -> Result<Vec<DirEntryOut>> {
        self.0.ctx.getdents_names_at(self.at())
    }

    /// `statx(fd, "", AT_EMPTY_PATH, mask)`.
    pub fn statx(&self, mask: u32) -> Result<Statx> {
        self.0.ctx.fstatx_at(self.at(), mask)
    }

    /// The host file behind it: see [`Ctx::host_file`].
    pub fn host_file(&self) -> Result<Option<Arc<std::os::fd::OwnedFd>>> {
        self.0.ctx.host_file_at(self.at())
    }

    /// A handle on what it opened.
    pub fn handle(&self) -> Result<Handle> {
        self.0.ctx.handle_of(self)
    }

    /// Close now and report what `close(2)` reports; other clones of it
    /// then find it closed (`EBADF`).
    pub fn close(self) -> Result<()> {
        self.0.ctx.release_file(&self.0.file)
    }
}

impl<'a> From<&'a OpenFile> for At<'a> {
    fn from(f: &'a OpenFile) -> Self {
        At::File(f)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::sync::Arc;

    use crate::tests_util::{mem_vfs, user, with_dirs};
    use crate::{Creds, Errno, WriteAs, AT_FDCWD};

    /// An open file is an object: its clones share it, a call on it
    /// needs no descriptor table, and it closes with its last reference
    /// or at `close` (then a clone finds it closed).
    #[test]
    fn an_open_file_is_counted_and_closes_once() {
        let vfs = mem_vfs("");
        with_dirs(&vfs, &["/d"]);
        let ctx = Arc::new(vfs.context_with_fds(Creds::root(), 0));
        let f = ctx
            .open_file(AT_FDCWD, b"/d/f", libc::O_CREAT | libc::O_RDWR, 0o644)
            .expect("create");
        assert_eq!(f.write(b"hello"), Ok(5));
        let g = f.clone();
        assert!(g.same(&f));
        let mut buf = [0u8; 8];
        assert_eq!(g.pread(&mut buf, 0), Ok(5));
        assert_eq!(&buf[..5], b"hello");
        assert_eq!(f.statx(libc::STATX_SIZE).map(|x| x.stx_size), Ok(5));
        // A directory opened as an object lists itself.
        let d = ctx
            .reopen_file(&f.handle().expect("handle"), libc::O_RDONLY)
            .expect("reopen");
        assert!(!d.same(&f));
        let dir = ctx
            .open_file(AT_FDCWD, b"/d", libc::O_RDONLY | libc::O_DIRECTORY, 0)
            .expect("opendir");
        let names: Vec<Vec<u8>> = dir
            .getdents()
            .expect("list")
            .into_iter()
            .map(|e| e.name)
            .collect();
        assert!(names.contains(&b"f".to_vec()));
        // Handles name what was opened.
        let h = f.handle().expect("handle");
        assert!(h.same(&ctx.handle(AT_FDCWD, b"/d/f").expect("handle")));
        f.close().expect("close");
        assert_eq!(g.pread(&mut buf, 0), Err(Errno::EBADF), "closed for all");
        assert_eq!(g.close(), Err(Errno::EBADF), "closed once");
        // An open file of one vfs names nothing in another.
        let other = mem_vfs("");
        let octx = other.context(Creds::root());
        assert_eq!(octx.handle_of(&d).map(drop), Err(Errno::EBADF));
    }

    /// Set-id bits a write drops are decided once, in the vfs, for the
    /// opener: whoever makes the call. A front end whose kernel names the
    /// writer says so (`WriteAs`).
    #[test]
    fn writes_drop_set_id_bits_for_the_opener_or_the_writer_named() {
        let vfs = mem_vfs("");
        let root = with_dirs(&vfs, &["/d"]);
        root.fchmodat(AT_FDCWD, b"/d", 0o777, 0).expect("chmod");
        let make = |name: &[u8]| {
            let mut p = b"/d/".to_vec();
            p.extend_from_slice(name);
            let fd = root
                .openat(AT_FDCWD, &p, libc::O_CREAT | libc::O_WRONLY, 0o666)
                .expect("create");
            root.close(fd).expect("close");
            root.fchmodat(AT_FDCWD, &p, 0o4666, 0).expect("setuid");
            p
        };
        let mode = |p: &[u8]| {
            root.statx(AT_FDCWD, p, 0, libc::STATX_MODE)
                .map(|x| u32::from(x.stx_mode) & 0o7777)
        };
        let alice = Arc::new(vfs.context(user(1000, 1000, &[])));
        // Opened by a user: the write through it, made by anyone, drops
        // set-user-id.
        let p = make(b"a");
        let f = alice
            .open_file(AT_FDCWD, &p, libc::O_WRONLY, 0)
            .expect("open");
        std::thread::spawn(move || f.pwrite(b"x", 0).expect("write"))
            .join()
            .expect("join");
        assert_eq!(mode(&p), Ok(0o666));
        // Opened by root: kept.
        let p = make(b"b");
        let rootf = Arc::new(vfs.context(Creds::root()));
        let f = rootf
            .open_file(AT_FDCWD, &p, libc::O_WRONLY, 0)
            .expect("open");
        f.pwrite(b"x", 0).expect("write");
        assert_eq!(mode(&p), Ok(0o4666));
        // The writer named: the kernel says a user writes through root's
        // open file, and the bits go; or it says they stay.
        let bob = user(1001, 1001, &[]);
        f.pwrite_by(b"y", 0, WriteAs::Keep).expect("write");
        assert_eq!(mode(&p), Ok(0o4666));
        f.pwrite_by(b"y", 0, WriteAs::As(&bob)).expect("write");
        assert_eq!(mode(&p), Ok(0o666));
        // A truncate by a user through root's open file.
        let p = make(b"c");
        let f = rootf
            .open_file(AT_FDCWD, &p, libc::O_WRONLY, 0)
            .expect("open");
        f.ftruncate_by(0, WriteAs::As(&bob)).expect("truncate");
        assert_eq!(mode(&p), Ok(0o666));
    }

    /// A make call returns what it made: a handle on it and its
    /// attributes, the same a walk of the name finds.
    #[test]
    fn makes_return_what_they_made() {
        let vfs = mem_vfs("");
        let ctx = with_dirs(&vfs, &["/d"]);
        let same = |m: &crate::Made, path: &[u8]| {
            let x = ctx
                .statx(
                    AT_FDCWD,
                    path,
                    libc::AT_SYMLINK_NOFOLLOW,
                    libc::STATX_BASIC_STATS,
                )
                .expect("stat");
            assert!(m.handle.same(&ctx.handle(AT_FDCWD, path).expect("handle")));
            assert_eq!((m.stat.stx_ino, m.stat.stx_mode), (x.stx_ino, x.stx_mode));
        };
        let m = ctx.mkdirat(AT_FDCWD, b"/d/sub", 0o750).expect("mkdir");
        same(&m, b"/d/sub");
        assert_eq!(u32::from(m.stat.stx_mode), libc::S_IFDIR | 0o750);
        let m = ctx.symlinkat(b"sub", AT_FDCWD, b"/d/l").expect("symlink");
        same(&m, b"/d/l");
        let m = ctx
            .mknodat(AT_FDCWD, b"/d/p", libc::S_IFIFO | 0o600, 0)
            .expect("fifo");
        same(&m, b"/d/p");
        let m = ctx
            .linkat(AT_FDCWD, b"/d/p", AT_FDCWD, b"/d/q", 0)
            .expect("link");
        same(&m, b"/d/q");
        assert_eq!(m.stat.stx_nlink, 2, "the link counted");
    }
}
