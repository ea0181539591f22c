//! File locks on an open file: `fcntl` record locks (POSIX and OFD) and
//! `flock`, taken by the backend where every party sees them
//! ([`walkfs_fsapi::caps::Locks`]).
//!
//! The vfs adds what a lock means to the data around it:
//! - before a lock is dropped or weakened, the file's changes that run
//!   behind their callers are carried out, so whoever takes the lock
//!   next, anywhere, sees what was written under it;
//! - once a lock is taken, the file's cached attributes are stale:
//!   another party may have changed it while it held the lock (NFS
//!   revalidates at lock time for the same reason).
//!
//! Backends never wait. A blocking request is retried here with a
//! growing pause (1 ms doubling to [`MAX_PAUSE`]), asking the caller's
//! `cancelled` between tries (a FUSE interrupt, a 9P flush): a waiter
//! holds no backend thread and is never stuck behind a signal it cannot
//! get.

use std::time::Duration;

use walkfs_fsapi::{FileLock, LockKind, LockOwner};

use super::prelude::*;

/// The longest pause between two tries of a blocking lock.
const MAX_PAUSE: Duration = Duration::from_millis(20);

/// How a lock request waits: not at all (`F_SETLK`, `LOCK_NB`), or until
/// it is granted or `cancelled` says the caller gave up (`F_SETLKW`).
#[derive(Clone, Copy)]
pub enum LockWait<'a> {
    No,
    Until(&'a (dyn Fn() -> bool + Sync)),
}

impl Ctx {
    /// The backend, node and handle an open file's locks go through (a
    /// directory opened without a backend handle gets one now).
    fn lock_target(
        &self,
        at: FileAt<'_>,
    ) -> Result<(
        std::sync::Arc<dyn walkfs_fsapi::FileSystem>,
        usize,
        u64,
        FileHandle,
    )> {
        let (file, s, _) = self.io_file(at)?;
        let fs = self.inner().sb(s.sb())?;
        if fs.locks().is_none() {
            return Err(Errno::ENOLCK);
        }
        let mut fh = file.fh.load(Relaxed);
        if fh == crate::file::LAZY {
            let _g = file.open_lock.lock();
            if !file.is_open() {
                return Err(Errno::EBADF);
            }
            fh = file.fh.load(Relaxed);
            if fh == crate::file::LAZY {
                fh = fs
                    .open(
                        NodeId(s.node),
                        OpenFlags(libc::O_RDONLY | libc::O_DIRECTORY),
                    )?
                    .0;
                file.fh.store(fh, Relaxed);
            }
        }
        Ok((fs, s.sb(), s.node, FileHandle(fh)))
    }

    /// Take, convert or drop `lock` for `owner` on the open file `at`.
    /// Without waiting, `EAGAIN` when another owner holds a conflicting
    /// lock; waiting, `EINTR` once `cancelled`.
    pub(crate) fn setlk_at(
        &self,
        at: FileAt<'_>,
        owner: LockOwner,
        lock: &FileLock,
        wait: LockWait<'_>,
    ) -> Result<()> {
        let (fs, sb, node, fh) = self.lock_target(at)?;
        let locks = fs.locks().ok_or(Errno::ENOLCK)?;
        let inner = self.inner();
        if lock.kind != LockKind::Write {
            // An unlock, or a write lock turned into a read lock: what
            // was written under it reaches the backend first.
            inner.flush_file(sb, node)?;
            inner.wb.wait_for(sb, &[node]);
        }
        let mut pause = Duration::from_millis(1);
        loop {
            match locks.setlk(NodeId(node), fh, owner, lock) {
                Err(Errno::EAGAIN) => match wait {
                    LockWait::No => return Err(Errno::EAGAIN),
                    LockWait::Until(cancelled) => {
                        if cancelled() {
                            return Err(Errno::EINTR);
                        }
                        std::thread::sleep(pause);
                        pause = (pause * 2).min(MAX_PAUSE);
                    }
                },
                Err(e) => return Err(e),
                Ok(()) => break,
            }
        }
        if lock.kind != LockKind::Unlock {
            // What the previous holder changed was reported before its
            // unlock: the caches show it before the holder goes on (SQLite
            // looks for a hot journal right after it locks).
            if let Some(w) = fs.watch() {
                w.barrier();
            }
            if let Some(d) = self.file(at).ok().map(|f| f.inode.load(Relaxed)) {
                inner.writer().mark_stale(&inner.dc, IIdx(d));
            }
        }
        Ok(())
    }

    /// The lock of another owner in the way of `lock`; `None` when it
    /// could be taken now.
    pub(crate) fn getlk_at(
        &self,
        at: FileAt<'_>,
        owner: LockOwner,
        lock: &FileLock,
    ) -> Result<Option<FileLock>> {
        let (fs, _, node, fh) = self.lock_target(at)?;
        fs.locks()
            .ok_or(Errno::ENOLCK)?
            .getlk(NodeId(node), fh, owner, lock)
    }

    /// `owner` closed a descriptor of the file: its POSIX locks on it go,
    /// after the file's changes (as an unlock).
    pub(crate) fn unlock_owner_at(&self, at: FileAt<'_>, owner: LockOwner) -> Result<()> {
        let (fs, sb, node, fh) = self.lock_target(at)?;
        let inner = self.inner();
        let sent = inner.flush_file(sb, node);
        inner.wb.wait_for(sb, &[node]);
        if let Some(l) = fs.locks() {
            l.unlock_owner(NodeId(node), fh, owner);
        }
        sent
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use walkfs_fsapi::{FileLock, LockFlavor, LockKind, LockOwner};

    use super::LockWait;
    use crate::tests_util::{mem_vfs, with_dirs};
    use crate::Errno;

    fn range(kind: LockKind, start: u64, len: u64) -> FileLock {
        FileLock::from_len(kind, start, len).expect("a range")
    }

    #[test]
    fn owners_exclude_each_other_and_a_waiter_gets_the_lock_when_it_goes() {
        let vfs = mem_vfs("");
        let ctx = std::sync::Arc::new(with_dirs(&vfs, &["/d"]));
        let flags = libc::O_CREAT | libc::O_RDWR;
        let a = ctx
            .open_file(crate::AT_FDCWD, b"/d/f", flags, 0o644)
            .unwrap();
        let b = ctx
            .open_file(crate::AT_FDCWD, b"/d/f", flags, 0o644)
            .unwrap();
        let (oa, ob) = (LockOwner(1), LockOwner(2));
        a.setlk(oa, &range(LockKind::Write, 0, 0), LockWait::No)
            .unwrap();
        assert_eq!(
            b.setlk(ob, &range(LockKind::Read, 10, 1), LockWait::No),
            Err(Errno::EAGAIN)
        );
        let seen = b.getlk(ob, &range(LockKind::Read, 10, 1)).unwrap();
        assert_eq!(seen.map(|l| l.kind), Some(LockKind::Write));
        // flock is another family: no conflict with the fcntl lock.
        let whole = FileLock::whole(LockKind::Write, LockFlavor::Flock);
        b.setlk(ob, &whole, LockWait::No).unwrap();
        // A cancelled waiter gives up with EINTR.
        let never = || true;
        assert_eq!(
            b.setlk(ob, &range(LockKind::Write, 0, 0), LockWait::Until(&never)),
            Err(Errno::EINTR)
        );
        // A waiter is granted the lock once the holder's close drops it.
        let done = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                let no = || false;
                b.setlk(ob, &range(LockKind::Write, 0, 0), LockWait::Until(&no))
                    .unwrap();
                done.store(true, Ordering::SeqCst);
            });
            std::thread::sleep(std::time::Duration::from_millis(30));
            assert!(!done.load(Ordering::SeqCst), "granted while held");
            a.unlock_owner(oa).unwrap();
        });
        assert!(done.load(Ordering::SeqCst));
        // Releasing b's open file drops what was taken through it.
        drop(b);
        a.setlk(oa, &whole, LockWait::No).unwrap();
        a.setlk(oa, &range(LockKind::Write, 0, 0), LockWait::No)
            .unwrap();
    }
}
