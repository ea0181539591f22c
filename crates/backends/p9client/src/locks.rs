//! File locks at the server (`Tlock`/`Tgetlock`, p9::locks): the
//! server takes them where its host's programs and its other clients see
//! them. A lock goes through the open file's fid, and its owner travels
//! whole in the client id (9P's process id has 32 bits, a FUSE lock
//! owner 64).

use walkfs_fsapi::{
    caps, Errno, FileHandle, FileLock, LockFlavor, LockKind, LockOwner, NodeId, Result,
};
use walkfs_p9::{locks, Fcall, Str};

use crate::wire::err_of;
use crate::P9Fs;

fn type_of(kind: LockKind) -> u8 {
    match kind {
        LockKind::Read => locks::TYPE_RDLCK,
        LockKind::Write => locks::TYPE_WRLCK,
        LockKind::Unlock => locks::TYPE_UNLCK,
    }
}

/// The client id that names `owner` at the server.
fn client_id(owner: LockOwner) -> String {
    format!("walkfs:{:016x}", owner.0)
}

impl P9Fs {
    fn lock_fid(fh: FileHandle) -> Result<u32> {
        u32::try_from(fh.0).map_err(|_| Errno::EBADF)
    }
}

impl caps::Locks for P9Fs {
    fn setlk(
        &self,
        _node: NodeId,
        fh: FileHandle,
        owner: LockOwner,
        lock: &FileLock,
    ) -> Result<()> {
        let fid = Self::lock_fid(fh)?;
        // A flock lock is the server's flock where it speaks the
        // extension (walkfs serve), else a whole-file record lock.
        let flags = match lock.flavor {
            LockFlavor::Flock if self.ordered => locks::FLAG_FLOCK,
            _ => 0,
        };
        let id = client_id(owner);
        let status = self.rpc.call(
            Fcall::Tlock {
                fid,
                ty: type_of(lock.kind),
                flags,
                start: lock.start,
                length: lock.wire_len(),
                proc_id: owner.0 as u32,
                client_id: Str(id.as_bytes()),
            },
            |r| match r {
                Fcall::Rlock { status } => Ok(status),
                r => Err(err_of(&r)),
            },
        )?;
        match status {
            locks::SUCCESS => Ok(()),
            // Held elsewhere, or the server is in its grace period after
            // a restart: both clear by themselves, so a waiter retries.
            locks::BLOCKED | locks::GRACE => Err(Errno::EAGAIN),
            _ => Err(Errno::ENOLCK),
        }
    }

    fn getlk(
        &self,
        _node: NodeId,
        fh: FileHandle,
        owner: LockOwner,
        lock: &FileLock,
    ) -> Result<Option<FileLock>> {
        if lock.flavor == LockFlavor::Flock || lock.kind == LockKind::Unlock {
            return Ok(None);
        }
        let fid = Self::lock_fid(fh)?;
        let id = client_id(owner);
        let (ty, start, length, pid) = self.rpc.call(
            Fcall::Tgetlock {
                fid,
                ty: type_of(lock.kind),
                start: lock.start,
                length: lock.wire_len(),
                proc_id: owner.0 as u32,
                client_id: Str(id.as_bytes()),
            },
            |r| match r {
                Fcall::Rgetlock {
                    ty,
                    start,
                    length,
                    proc_id,
                    ..
                } => Ok((ty, start, length, proc_id)),
                r => Err(err_of(&r)),
            },
        )?;
        let kind = match ty {
            locks::TYPE_RDLCK => LockKind::Read,
            locks::TYPE_WRLCK => LockKind::Write,
            locks::TYPE_UNLCK => return Ok(None),
            _ => return Err(Errno::EIO),
        };
        let mut found = FileLock::from_len(kind, start, length)?;
        found.pid = pid;
        Ok(Some(found))
    }

    fn unlock_owner(&self, node: NodeId, fh: FileHandle, owner: LockOwner) {
        let all = FileLock::whole(LockKind::Unlock, LockFlavor::Posix);
        if let Err(e) = self.setlk(node, fh, owner, &all) {
            tracing::warn!("unlocking a closed file's record locks at the server: {e}");
        }
    }
}
