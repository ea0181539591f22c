//! The space of a file's data: `fallocate(2)` and `lseek(2)`'s
//! `SEEK_DATA`/`SEEK_HOLE`, with the checks of Linux's `vfs_fallocate`
//! and `generic_file_llseek` before the backend's storage decides
//! ([`walkfs_fsapi::caps::Space`]).

use super::prelude::*;
use libc::{
    FALLOC_FL_COLLAPSE_RANGE as COLLAPSE, FALLOC_FL_INSERT_RANGE as INSERT,
    FALLOC_FL_KEEP_SIZE as KEEP_SIZE, FALLOC_FL_PUNCH_HOLE as PUNCH,
    FALLOC_FL_UNSHARE_RANGE as UNSHARE, FALLOC_FL_ZERO_RANGE as ZERO,
};

/// Every mode bit Linux knows.
const KNOWN: i32 = KEEP_SIZE | PUNCH | COLLAPSE | ZERO | INSERT | UNSHARE;

/// `vfs_fallocate`'s checks of the mode alone, in its order.
fn check_mode(mode: i32) -> Result<()> {
    if mode & !KNOWN != 0 {
        return Err(Errno::EOPNOTSUPP);
    }
    if mode & (PUNCH | ZERO) == PUNCH | ZERO {
        return Err(Errno::EOPNOTSUPP);
    }
    if mode & PUNCH != 0 && mode & KEEP_SIZE == 0 {
        return Err(Errno::EOPNOTSUPP);
    }
    if (mode & COLLAPSE != 0 && mode != COLLAPSE) || (mode & INSERT != 0 && mode != INSERT) {
        return Err(Errno::EINVAL);
    }
    if mode & UNSHARE != 0 && mode & !(UNSHARE | KEEP_SIZE) != 0 {
        return Err(Errno::EINVAL);
    }
    Ok(())
}

impl Ctx {
    /// `fallocate(fd, mode, off, len)`.
    pub fn fallocate(&self, fd: i32, mode: i32, off: i64, len: i64) -> Result<()> {
        self.fallocate_at(FileAt::Fd(fd), mode, off, len)
    }

    pub(crate) fn fallocate_at(&self, at: FileAt<'_>, mode: i32, off: i64, len: i64) -> Result<()> {
        let _later = crate::writeback::SettleLater::new();
        if off < 0 || len <= 0 {
            return Err(Errno::EINVAL);
        }
        check_mode(mode)?;
        let (file, s, flags) = self.io_file(at)?;
        if flags as i32 & O_ACCMODE == libc::O_RDONLY {
            return Err(Errno::EBADF);
        }
        match FileType::from_mode(s.mode) {
            Some(FileType::Regular) => {}
            Some(FileType::Fifo) => return Err(Errno::ESPIPE),
            Some(FileType::Directory) => return Err(Errno::EISDIR),
            _ => return Err(Errno::ENODEV),
        }
        if off.checked_add(len).is_none() {
            return Err(Errno::EFBIG);
        }
        if self.inner().sw.read_only.load(AtomicOrdering::Relaxed) {
            return Err(Errno::EROFS);
        }
        let inner = self.inner();
        let fs = inner.sb(s.sb())?;
        let space = fs.space().ok_or(Errno::EOPNOTSUPP)?;
        let ino = IIdx(file.inode.load(Relaxed));
        // A change of the file's data, as a write (`file_modified`).
        self.kill_privs(ino)?;
        // What was gathered goes first: the range is decided over it.
        inner.flush_file(s.sb(), s.node)?;
        let fh = FileHandle(file.fh.load(Relaxed));
        space.fallocate(NodeId(s.node), fh, mode, off as u64, len as u64)?;
        inner.writer().mark_stale(&inner.dc, ino);
        Ok(())
    }

    /// `SEEK_DATA`/`SEEK_HOLE` from `off` on the open file `at`: the
    /// backend's answer, or, for one that keeps no holes, data from
    /// start to end (`ENXIO` at or past it).
    pub(super) fn seek_data_at(&self, at: FileAt<'_>, off: i64, whence: i32) -> Result<u64> {
        let (file, s, _) = self.io_file(at)?;
        if !s.is_reg() && !s.is_dir() {
            return Err(Errno::ESPIPE);
        }
        let Ok(off) = u64::try_from(off) else {
            return Err(Errno::ENXIO);
        };
        let inner = self.inner();
        let fs = inner.sb(s.sb())?;
        if let (Some(space), true) = (fs.space(), s.is_reg()) {
            inner.flush_file(s.sb(), s.node)?;
            let fh = FileHandle(file.fh.load(Relaxed));
            match space.seek_data(NodeId(s.node), fh, off, whence) {
                Err(Errno::EOPNOTSUPP | Errno::EINVAL | Errno::ENOSYS) => {}
                r => return r,
            }
        }
        let size = self.fstatx_at(at, libc::STATX_SIZE)?.stx_size;
        if off >= size {
            return Err(Errno::ENXIO);
        }
        Ok(if whence == libc::SEEK_HOLE { size } else { off })
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use crate::tests_util::{mem_vfs, with_dirs};
    use crate::{Errno, AT_FDCWD};

    #[test]
    fn fallocate_checks_then_allocates_punches_and_zeroes() {
        let vfs = mem_vfs("");
        let ctx = with_dirs(&vfs, &["/d"]);
        let fd = ctx
            .openat(AT_FDCWD, b"/d/f", libc::O_CREAT | libc::O_RDWR, 0o644)
            .expect("create");
        ctx.write(fd, b"abcdefgh").expect("write");
        assert_eq!(ctx.fallocate(fd, 0, 0, 0), Err(Errno::EINVAL));
        assert_eq!(ctx.fallocate(fd, 0, -1, 4), Err(Errno::EINVAL));
        assert_eq!(ctx.fallocate(fd, 0x1000, 0, 4), Err(Errno::EOPNOTSUPP));
        assert_eq!(
            ctx.fallocate(fd, libc::FALLOC_FL_PUNCH_HOLE, 0, 4),
            Err(Errno::EOPNOTSUPP)
        );
        // Allocation grows the file; with KEEP_SIZE it does not.
        ctx.fallocate(fd, 0, 0, 16).expect("allocate");
        assert_eq!(ctx.fstat(fd).map(|s| s.st_size), Ok(16));
        ctx.fallocate(fd, libc::FALLOC_FL_KEEP_SIZE, 0, 64)
            .expect("keep size");
        assert_eq!(ctx.fstat(fd).map(|s| s.st_size), Ok(16));
        // A punched hole reads as zeroes; the size stays.
        ctx.fallocate(
            fd,
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            2,
            3,
        )
        .expect("punch");
        let mut buf = [0u8; 8];
        assert_eq!(ctx.pread(fd, &mut buf, 0), Ok(8));
        assert_eq!(&buf, b"ab\0\0\0fgh");
        // SEEK_DATA/SEEK_HOLE: data up to the end, ENXIO past it.
        assert_eq!(ctx.lseek(fd, 3, libc::SEEK_DATA), Ok(3));
        assert_eq!(ctx.lseek(fd, 3, libc::SEEK_HOLE), Ok(16));
        assert_eq!(ctx.lseek(fd, 16, libc::SEEK_DATA), Err(Errno::ENXIO));
        ctx.close(fd).expect("close");
        let ro = ctx
            .openat(AT_FDCWD, b"/d/f", libc::O_RDONLY, 0)
            .expect("open");
        assert_eq!(ctx.fallocate(ro, 0, 0, 4), Err(Errno::EBADF));
        ctx.close(ro).expect("close");
    }
}
