//! File locks on the host file, so that the host's own programs and
//! every client of this export exclude each other.
//!
//! Each owner gets an open file description of its own on the host file
//! and takes its locks there: OFD locks (`F_OFD_SETLK`) for the POSIX
//! family, `flock` for the other. The kernel then arbitrates between
//! owners exactly as between processes on the host: an OFD lock
//! conflicts with a host program's `fcntl` lock and with another OFD's,
//! never with its own. Closing an owner's description drops all its
//! locks at once, which is what a POSIX close does.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd};

use parking_lot::Mutex;
use walkfs_fsapi::{
    ByHandle, Errno, FileHandle, FileLock, LockFlavor, LockKind, LockOwner, NodeId, Result,
};

use crate::HostFs;

/// The owners' descriptions, by (node, owner, family).
#[derive(Default)]
pub(crate) struct HostLocks {
    held: Mutex<HashMap<(u64, LockOwner, LockFlavor), OwnedFd>>,
    fhs: ByHandle,
}

impl HostLocks {
    /// The handle goes: the locks taken through it go too (an OFD or
    /// flock lock belongs to its open file; a process's POSIX locks were
    /// dropped at its close).
    pub(crate) fn released(&self, fh: FileHandle) {
        let gone = self.fhs.released(fh);
        if gone.is_empty() {
            return;
        }
        let mut held = self.held.lock();
        for (node, owner) in gone {
            held.remove(&(node.0, owner, LockFlavor::Posix));
            held.remove(&(node.0, owner, LockFlavor::Flock));
        }
    }
}

fn errno() -> Errno {
    Errno(
        std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO),
    )
}

fn flock_struct(lock: &FileLock) -> libc::flock {
    // SAFETY: flock is plain data; all-zero is a valid value.
    let mut f: libc::flock = unsafe { std::mem::zeroed() };
    f.l_type = lock.kind.fcntl() as i16;
    f.l_whence = libc::SEEK_SET as i16;
    f.l_start = lock.start as i64;
    f.l_len = lock.wire_len() as i64;
    f
}

impl HostFs {
    /// A new description of `node`'s host file for an owner: read and
    /// write where the daemon may (a write lock needs a writable one),
    /// else what it may.
    fn lock_description(&self, node: NodeId) -> Result<OwnedFd> {
        let fd = self.fd(node)?;
        let mut last = Errno::EACCES;
        for how in [libc::O_RDWR, libc::O_RDONLY, libc::O_WRONLY] {
            match self.reopen(&fd, how | libc::O_CLOEXEC | libc::O_NOCTTY) {
                Ok(f) => return Ok(f),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// Apply `lock` to description `fd` without waiting.
    fn lock_on(fd: &OwnedFd, lock: &FileLock) -> Result<()> {
        let r = match lock.flavor {
            LockFlavor::Posix => {
                let f = flock_struct(lock);
                // SAFETY: fcntl reads a struct flock we own.
                unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_OFD_SETLK, &f) }
            }
            LockFlavor::Flock => {
                let op = match lock.kind {
                    LockKind::Read => libc::LOCK_SH,
                    LockKind::Write => libc::LOCK_EX,
                    LockKind::Unlock => libc::LOCK_UN,
                };
                // SAFETY: flock on a descriptor we own.
                unsafe { libc::flock(fd.as_raw_fd(), op | libc::LOCK_NB) }
            }
        };
        if r < 0 {
            // EWOULDBLOCK is EAGAIN on Linux; both say "held elsewhere".
            return Err(match errno() {
                Errno::EACCES => Errno::EAGAIN,
                e => e,
            });
        }
        Ok(())
    }
}

impl walkfs_fsapi::caps::Locks for HostFs {
    fn setlk(&self, node: NodeId, fh: FileHandle, owner: LockOwner, lock: &FileLock) -> Result<()> {
        let key = (node.0, owner, lock.flavor);
        let mut held = self.locks.held.lock();
        if lock.kind == LockKind::Unlock {
            if let Some(fd) = held.get(&key) {
                Self::lock_on(fd, lock)?;
            }
            return Ok(());
        }
        let fd = match held.entry(key) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => {
                let fd = e.insert(self.lock_description(node)?);
                self.locks.fhs.took(fh, node, owner);
                fd
            }
        };
        Self::lock_on(fd, lock)
    }

    fn getlk(
        &self,
        node: NodeId,
        _fh: FileHandle,
        owner: LockOwner,
        lock: &FileLock,
    ) -> Result<Option<FileLock>> {
        if lock.flavor == LockFlavor::Flock || lock.kind == LockKind::Unlock {
            return Ok(None);
        }
        let mine = self
            .locks
            .held
            .lock()
            .get(&(node.0, owner, LockFlavor::Posix))
            .map(|fd| fd.try_clone())
            .transpose()
            .map_err(|e| Errno(e.raw_os_error().unwrap_or(libc::EIO)))?;
        // The owner's own description, whose locks never conflict with
        // the asked one; a fresh one for an owner that holds none.
        let fd = match mine {
            Some(fd) => fd,
            None => self.lock_description(node)?,
        };
        let mut f = flock_struct(lock);
        // SAFETY: fcntl fills the struct flock we own.
        if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_OFD_GETLK, &mut f) } < 0 {
            return Err(errno());
        }
        let Some(kind) = LockKind::from_fcntl(f.l_type as u32) else {
            return Err(Errno::EIO);
        };
        if kind == LockKind::Unlock {
            return Ok(None);
        }
        let mut found = FileLock::from_len(kind, f.l_start as u64, f.l_len as u64)?;
        // -1: an OFD lock, which no process holds.
        found.pid = u32::try_from(f.l_pid).unwrap_or(0);
        Ok(Some(found))
    }

    fn unlock_owner(&self, node: NodeId, _fh: FileHandle, owner: LockOwner) {
        self.locks
            .held
            .lock()
            .remove(&(node.0, owner, LockFlavor::Posix));
    }
}
