//! The descriptor interface: each call on an open file, by a descriptor
//! of the context's table. What the C ABI and the CLI use, where a
//! descriptor is the interface; front ends that keep handles of their own
//! hold [`crate::OpenFile`]s instead, whose calls are the same bodies.

use super::prelude::*;

impl Ctx {
    /// `pread(fd, buf, off)`.
    pub fn pread(&self, fd: i32, buf: &mut [u8], off: u64) -> Result<usize> {
        self.pread_at(FileAt::Fd(fd), buf, off)
    }

    /// `read(fd, buf)` at the file position.
    pub fn read(&self, fd: i32, buf: &mut [u8]) -> Result<usize> {
        self.read_at(FileAt::Fd(fd), buf)
    }

    /// `pwrite(fd, data, off)` (appends under `O_APPEND`, as Linux does).
    pub fn pwrite(&self, fd: i32, data: &[u8], off: u64) -> Result<usize> {
        self.pwrite_at(FileAt::Fd(fd), data, off)
    }

    /// `write(fd, data)` at the file position.
    pub fn write(&self, fd: i32, data: &[u8]) -> Result<usize> {
        self.write_at(FileAt::Fd(fd), data)
    }

    /// `ftruncate(fd, len)`.
    pub fn ftruncate(&self, fd: i32, len: i64) -> Result<()> {
        self.ftruncate_at(FileAt::Fd(fd), len, super::io::WriteAs::Opener)
    }

    /// `fsync(fd)` (and `fdatasync`): every change of the file — or, for
    /// a directory, of its entries — that ran behind its caller has been
    /// carried out; a failure one of them met since this file last
    /// reported one is returned (writeback.rs).
    pub fn fsync(&self, fd: i32) -> Result<()> {
        self.fsync_at(FileAt::Fd(fd))
    }

    /// `syncfs(fd)`: everything of every backend carried out; a failure
    /// any change met since this file last looked is returned.
    pub fn syncfs(&self, fd: i32) -> Result<()> {
        self.syncfs_at(FileAt::Fd(fd))
    }

    /// What `close(2)` reports without closing (FUSE's flush): the file's
    /// gathered writes sent, and a failure a change of the file met that
    /// this file has not reported (with `cache=coherent`, after waiting
    /// for its changes: the next open, anywhere, sees them).
    pub fn flush(&self, fd: i32) -> Result<()> {
        self.flush_at(FileAt::Fd(fd))
    }

    /// `lseek(fd, off, whence)` for `SEEK_SET`, `SEEK_CUR`, `SEEK_END`.
    pub fn lseek(&self, fd: i32, off: i64, whence: i32) -> Result<u64> {
        self.lseek_at(FileAt::Fd(fd), off, whence)
    }

    /// `getdents64(fd)`: the entries not yet returned, `.` and `..`
    /// first; empty at the end.
    pub fn getdents(&self, fd: i32) -> Result<Vec<DirEntryOut>> {
        self.getdents_at(FileAt::Fd(fd))
    }

    /// [`getdents`](Self::getdents) for a caller that wants names, types
    /// and inode numbers only: the backend lists by name (a local
    /// directory: getdents64 alone, no stat per entry), and nothing is
    /// cached. For a FUSE listing the kernel is given without attributes.
    pub fn getdents_names(&self, fd: i32) -> Result<Vec<DirEntryOut>> {
        self.getdents_names_at(FileAt::Fd(fd))
    }

    /// `statx` of an open descriptor.
    pub fn fstatx(&self, fd: i32, mask: u32) -> Result<Statx> {
        self.fstatx_at(FileAt::Fd(fd), mask)
    }

    /// `statx(fd, "", AT_EMPTY_PATH, mask)` into the caller's buffer.
    #[inline(always)]
    pub fn fstatx_into(&self, fd: i32, mask: u32, out: &mut Statx) -> Result<()> {
        self.fstatx_into_at(FileAt::Fd(fd), mask, out)
    }

    /// The host file behind `fd`, for a kernel that does the file's I/O
    /// itself (FUSE passthrough); `None` when the backend's files are not
    /// host files. What was gathered for the file is sent first, so the
    /// host file holds everything written through `fd` so far.
    pub fn host_file(&self, fd: i32) -> Result<Option<std::sync::Arc<std::os::fd::OwnedFd>>> {
        self.host_file_at(FileAt::Fd(fd))
    }
}
