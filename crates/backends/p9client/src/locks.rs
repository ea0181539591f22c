//! File locks at the server (`Tlock`/`Tgetlock`, p9::locks): the
//! server takes them where its host's programs and its other clients see
//! them. A lock goes through the open file's fid, and its owner travels
//! whole in the client id (9P's process id has 32 bits, a FUSE lock
//! owner 64).

use std::collections::HashMap;

use parking_lot::Mutex;
use walkfs_fsapi::locks::LockTable;
use walkfs_fsapi::{
    caps, Errno, FileHandle, FileLock, LockFlavor, LockKind, LockOwner, NodeId, Result,
};
use walkfs_p9::{locks, Fcall, Str};

use crate::rpc::Rpc;
use crate::wire::err_of;
use crate::P9Fs;

/// The locks this client holds at the server, by the open fid they were
/// taken through, and the fids whose locks were lost: what a reconnect
/// reclaims (a restarted server, or a connection that went, dropped
/// them), and what it could not.
///
/// Invariant: `held` is what the server granted and was not unlocked
/// since, as the server keeps it (POSIX ranges split and merge; a
/// `flock` is one whole-file lock per owner): replaying it with
/// `FLAG_RECLAIM` rebuilds the server's state for this client.
#[derive(Default)]
pub(crate) struct Ledger {
    held: LockTable,
    /// Fid -> node: its locks could not all be reclaimed. Every lock call
    /// and I/O through it fails with `EIO` until it is closed; nothing
    /// is silently unlocked.
    lost: Mutex<HashMap<u32, u64>>,
}

impl Ledger {
    fn took(&self, fid: u32, owner: LockOwner, lock: &FileLock) {
        // Only this client's own grants are here, so another owner's
        // entry in the way means the server let both have them: it is
        // the server's to arbitrate, and this one is granted.
        if self.held.set(NodeId(u64::from(fid)), owner, lock).is_err() {
            self.held
                .drop_owner(NodeId(u64::from(fid)), owner, Some(lock.flavor));
            let _ = self.held.set(NodeId(u64::from(fid)), owner, lock);
        }
    }

    /// `fid` is closed: its locks went with it.
    pub(crate) fn closed(&self, fid: u32) {
        self.held.drop_node(NodeId(u64::from(fid)));
        self.lost.lock().remove(&fid);
    }

    /// `EIO` if `fid`'s locks were lost.
    pub(crate) fn check(&self, fid: u32) -> Result<()> {
        if self.lost.lock().contains_key(&fid) {
            return Err(Errno::EIO);
        }
        Ok(())
    }

    /// After a reconnect (the open fids opened again): take every lock
    /// again with `FLAG_RECLAIM`. One the server refuses (another party
    /// took it meanwhile, or the fid could not be opened again) marks
    /// its fid lost, and the log names the file (`path_of` its node).
    /// Returns (reclaimed, lost).
    pub(crate) fn reclaim(
        &self,
        rpc: &Rpc,
        flock_ext: bool,
        node_of: impl Fn(u32) -> Option<u64>,
        path_of: impl Fn(u64) -> String,
    ) -> (usize, usize) {
        let (mut ok, mut lost) = (0, 0);
        for (fid, owner, lock) in self.held.all() {
            let fid = fid.0 as u32;
            let r = tlock(rpc, fid, owner, &lock, flock_ext, locks::FLAG_RECLAIM);
            if let Ok(locks::SUCCESS) = r {
                ok += 1;
                continue;
            }
            lost += 1;
            let node = node_of(fid).unwrap_or(0);
            tracing::error!(
                "9p: a lock on {} (bytes {}..={}) could not be reclaimed after the reconnect \
                 ({r:?}): its holder's next lock call or I/O on that file fails with EIO",
                path_of(node),
                lock.start,
                lock.end
            );
            self.lost.lock().insert(fid, node);
            self.held.drop_owner(NodeId(u64::from(fid)), owner, None);
        }
        (ok, lost)
    }
}

fn type_of(kind: LockKind) -> u8 {
    match kind {
        LockKind::Read => locks::TYPE_RDLCK,
        LockKind::Write => locks::TYPE_WRLCK,
        LockKind::Unlock => locks::TYPE_UNLCK,
    }
}

/// `Tlock` of `lock` for `owner` through open fid `fid` with `flags`:
/// the server's status. A flock lock is the server's flock where it
/// speaks the extension (`flock_ext`: walkfs serve), else a whole-file
/// record lock.
fn tlock(
    rpc: &Rpc,
    fid: u32,
    owner: LockOwner,
    lock: &FileLock,
    flock_ext: bool,
    flags: u32,
) -> Result<u8> {
    let flags = flags
        | match lock.flavor {
            LockFlavor::Flock if flock_ext => locks::FLAG_FLOCK,
            _ => 0,
        };
    let id = client_id(owner);
    rpc.call(
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
    )
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
        self.locks_held.check(fid)?;
        let status = tlock(&self.rpc, fid, owner, lock, self.ordered, 0)?;
        match status {
            locks::SUCCESS => {
                self.locks_held.took(fid, owner, lock);
                Ok(())
            }
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
        self.locks_held.check(fid)?;
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
