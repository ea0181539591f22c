//! `Tlock` and `Tgetlock`: a client's locks taken by the vfs where every
//! party sees them (on a host export, on the host file: the host's own
//! programs and every other client are excluded; p9::locks).
//!
//! The server never waits for a lock: one held elsewhere is answered
//! `BLOCKED`, and a client that wants to wait asks again (as Linux's
//! v9fs does), so a waiter holds no worker. A lock is taken through the
//! fid's open file and goes with it: at the client's unlock, at its
//! clunk, or when the connection goes.

use std::hash::{Hash, Hasher};

use walkfs_p9::{locks, Fcall, Str};
use walkfs_vfs::{Errno, FileLock, LockFlavor, LockKind, LockOwner, LockWait, OpenFile, Result};

use super::Req;

/// A lock's kind from its 9P type.
fn kind_of(ty: u8) -> Result<LockKind> {
    match ty {
        locks::TYPE_RDLCK => Ok(LockKind::Read),
        locks::TYPE_WRLCK => Ok(LockKind::Write),
        locks::TYPE_UNLCK => Ok(LockKind::Unlock),
        _ => Err(Errno::EINVAL),
    }
}

fn type_of(kind: LockKind) -> u8 {
    match kind {
        LockKind::Read => locks::TYPE_RDLCK,
        LockKind::Write => locks::TYPE_WRLCK,
        LockKind::Unlock => locks::TYPE_UNLCK,
    }
}

/// What `Tlock` and `Tgetlock` both carry: the lock's type and range,
/// and who asks (process id, client id).
struct Asked<'a> {
    ty: u8,
    start: u64,
    length: u64,
    proc_id: u32,
    client_id: Str<'a>,
}

impl<'a> Asked<'a> {
    fn of(f: &Fcall<'a>) -> Result<Asked<'a>> {
        match *f {
            Fcall::Tlock {
                ty,
                start,
                length,
                proc_id,
                client_id,
                ..
            }
            | Fcall::Tgetlock {
                ty,
                start,
                length,
                proc_id,
                client_id,
                ..
            } => Ok(Asked {
                ty,
                start,
                length,
                proc_id,
                client_id,
            }),
            _ => Err(Errno::EINVAL),
        }
    }
}

impl Req<'_> {
    /// The owner 9P names by (process id, client id), unique to this
    /// connection: two connections' owners never share a lock.
    fn lock_owner(&self, proc_id: u32, client_id: &[u8]) -> LockOwner {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (self.s.lock_space, proc_id, client_id).hash(&mut h);
        LockOwner(h.finish())
    }

    /// The fid's open file, the lock asked about and its owner.
    fn lock_asked(&self, a: &Asked<'_>) -> Result<(OpenFile, FileLock, LockOwner)> {
        let st = self.fid(0)?;
        let file = st.open.clone().ok_or(Errno::EBADF)?;
        let lock = FileLock::from_len(kind_of(a.ty)?, a.start, a.length)?;
        Ok((file, lock, self.lock_owner(a.proc_id, a.client_id.0)))
    }

    /// `Tlock`.
    pub(super) fn lock(&self, f: &Fcall<'_>, flags: u32, out: &mut Vec<u8>) -> Result<()> {
        let (file, mut lock, owner) = self.lock_asked(&Asked::of(f)?)?;
        // fcntl's rule: a read lock needs a file open for reading, a
        // write lock one open for writing.
        let mode = file.flags() & libc::O_ACCMODE;
        let refused = match lock.kind {
            LockKind::Read => mode == libc::O_WRONLY,
            LockKind::Write => mode == libc::O_RDONLY,
            LockKind::Unlock => false,
        };
        if refused {
            return Err(Errno::EBADF);
        }
        if flags & locks::FLAG_FLOCK != 0 {
            lock = FileLock::whole(lock.kind, LockFlavor::Flock);
        }
        // The grace time after a restart: the locks the previous server
        // granted go back to their holders first.
        if lock.kind != LockKind::Unlock && flags & locks::FLAG_RECLAIM == 0 && self.in_grace() {
            return self.reply(
                Fcall::Rlock {
                    status: locks::GRACE,
                },
                out,
            );
        }
        let status = match file.setlk(owner, &lock, LockWait::No) {
            Ok(()) => locks::SUCCESS,
            Err(Errno::EAGAIN) => locks::BLOCKED,
            Err(e) => return Err(e),
        };
        if status == locks::SUCCESS && lock.kind != LockKind::Unlock {
            self.inos().note_locks();
        }
        self.reply(Fcall::Rlock { status }, out)
    }

    /// `Tgetlock`: the lock in the way, or type UNLCK.
    pub(super) fn getlock(&self, f: &Fcall<'_>, out: &mut Vec<u8>) -> Result<()> {
        let a = Asked::of(f)?;
        let (file, lock, owner) = self.lock_asked(&a)?;
        let (start, length, proc_id, client_id) = (a.start, a.length, a.proc_id, a.client_id);
        let reply = match file.getlk(owner, &lock)? {
            None => Fcall::Rgetlock {
                ty: locks::TYPE_UNLCK,
                start,
                length,
                proc_id,
                client_id,
            },
            // Held by someone this client cannot name: proc_id is the
            // holder's pid on the server's host (0 for none), and the
            // client id is empty.
            Some(l) => Fcall::Rgetlock {
                ty: type_of(l.kind),
                start: l.start,
                length: l.wire_len(),
                proc_id: l.pid,
                client_id: Str(b""),
            },
        };
        self.reply(reply, out)
    }
}
