//! `chattr`/`lsattr` through the mount: the inode flags of a host file
//! (`FS_IOC_GETFLAGS`/`SETFLAGS`, and the `fsxattr` form
//! `FS_IOC_FSGETXATTR`/`FSSETXATTR` the kernel may ask instead), read and
//! set on the host file itself. The kernel checked the caller before it
//! sent them (`vfs_fileattr_set`: the owner or `CAP_FOWNER`, and
//! `CAP_LINUX_IMMUTABLE` for the append-only and immutable flags); the
//! host then enforces the flags on every party, the mount's writes
//! included. A source without host files (9P, memory) answers `ENOTTY`,
//! as a file system without flags does.

use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;

use walkfs_vfs::Errno;

use crate::WalkFuse;

const fn ioc(dir: u32, ty: u8, nr: u8, size: usize) -> u32 {
    (dir << 30) | ((size as u32) << 16) | ((ty as u32) << 8) | nr as u32
}

/// The size of `struct fsxattr`.
const FSXATTR: usize = 28;
pub(crate) const GETFLAGS: u32 = ioc(2, b'f', 1, 8);
pub(crate) const SETFLAGS: u32 = ioc(1, b'f', 2, 8);
pub(crate) const FSGETXATTR: u32 = ioc(2, b'X', 31, FSXATTR);
pub(crate) const FSSETXATTR: u32 = ioc(1, b'X', 32, FSXATTR);

/// Is `cmd` one of the flag calls?
pub(crate) fn is_fileattr(cmd: u32) -> bool {
    matches!(cmd, GETFLAGS | SETFLAGS | FSGETXATTR | FSSETXATTR)
}

impl WalkFuse {
    /// Flag call `cmd` on node `ino` (the kernel's own open of it, `fh`,
    /// is not needed: the host file is opened here): what the ioctl's
    /// caller gets back (`out_size` bytes at most).
    pub(crate) fn fileattr(
        &self,
        ino: u64,
        _fh: u64,
        cmd: u32,
        input: &[u8],
        out_size: u32,
    ) -> Result<Vec<u8>, Errno> {
        let node = self.node(ino)?;
        let x = crate::stat_of(&self.base, &node)?;
        let dir = match u32::from(x.stx_mode) & libc::S_IFMT {
            libc::S_IFDIR => true,
            libc::S_IFREG => false,
            _ => return Err(Errno::ENOTTY),
        };
        // The host file itself, opened anew from the backend's own
        // descriptor (an `O_PATH` one, which takes no ioctl).
        let path = self.base.backend_fd(&node)?.ok_or(Errno::ENOTTY)?;
        let name = format!("/proc/self/fd/{}", path.as_raw_fd());
        // (The magic link leads to the very inode: no O_NOFOLLOW, which
        // it would refuse; the type was checked above.)
        let flags = libc::O_RDONLY | libc::O_NONBLOCK | if dir { libc::O_DIRECTORY } else { 0 };
        let host = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(flags)
            .open(&name)
            .map_err(|e| Errno(e.raw_os_error().unwrap_or(libc::EIO)))?;
        let fd = host.as_raw_fd();
        let out = match cmd {
            GETFLAGS => {
                let mut v: libc::c_int = 0;
                // SAFETY: the host's FS_IOC_GETFLAGS writes one int
                // through the pointer, which points at one.
                Errno::result(unsafe {
                    libc::ioctl(fd, libc::FS_IOC_GETFLAGS as _, &mut v as *mut libc::c_int)
                })?;
                v.to_ne_bytes().to_vec()
            }
            SETFLAGS => {
                let b: [u8; 4] = input
                    .get(..4)
                    .and_then(|b| b.try_into().ok())
                    .ok_or(Errno::EINVAL)?;
                let v = libc::c_int::from_ne_bytes(b);
                // SAFETY: FS_IOC_SETFLAGS reads one int through the
                // pointer, which points at one.
                Errno::result(unsafe {
                    libc::ioctl(fd, libc::FS_IOC_SETFLAGS as _, &v as *const libc::c_int)
                })?;
                Vec::new()
            }
            FSGETXATTR => {
                let mut b = [0u8; FSXATTR];
                // SAFETY: FS_IOC_FSGETXATTR writes one struct fsxattr
                // (FSXATTR bytes) through the pointer, which has room.
                Errno::result(unsafe { libc::ioctl(fd, FSGETXATTR as _, b.as_mut_ptr()) })?;
                b.to_vec()
            }
            FSSETXATTR => {
                let b: [u8; FSXATTR] = input
                    .get(..FSXATTR)
                    .and_then(|b| b.try_into().ok())
                    .ok_or(Errno::EINVAL)?;
                // SAFETY: FS_IOC_FSSETXATTR reads one struct fsxattr
                // (FSXATTR bytes) through the pointer.
                Errno::result(unsafe { libc::ioctl(fd, FSSETXATTR as _, b.as_ptr()) })?;
                Vec::new()
            }
            _ => return Err(Errno::ENOTTY),
        };
        if matches!(cmd, SETFLAGS | FSSETXATTR) {
            // The flags moved the host file's ctime.
            let _ = self.base.changed_outside(&node);
        }
        let n = out.len().min(out_size as usize);
        Ok(out[..n].to_vec())
    }
}
