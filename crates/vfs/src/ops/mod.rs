//! The calls a program makes (`faccessat`, `statx`, `openat`, `renameat2`,
//! ...), on a [`Ctx`]: one caller's credentials and descriptors over a
//! shared [`Vfs`]. Errors and their order follow Linux (fs/namei.c,
//! fs/open.c, fs/stat.c), so the same calls on a host directory give the
//! same answers directly and through walkfs.
//!
//! One file per concern: `lookup` (resolving paths, access, readlink),
//! `attr` (stat and attribute changes), `open`, `io`, `create`, `remove`,
//! `rename`. Who may do what is decided in policy.rs, beside perm.rs.
//!
//! Every public call runs its body under [`Ctx::run`], the one retry loop
//! (step.rs): a body returns [`Step::Restart`] when what it stood on moved
//! under it, and is run again from its path.

mod attr;
mod create;
mod export;
mod fds;
mod io;
mod lock;
pub use create::{with_umask, Made};
pub use io::WriteAs;
pub use lock::LockWait;
mod lookup;
mod open;
mod remove;
mod rename;
mod space;
mod xattr;

/// What every ops file uses.
mod prelude {
    pub(super) use std::sync::atomic::Ordering as AtomicOrdering;

    pub(super) use walkfs_fsapi::{
        DirEntry, Errno, FileHandle, FileType, NodeId, OpenFlags, Result, SetAttr, StatFs, TimeSet,
        RENAME_EXCHANGE, RENAME_NOREPLACE, RENAME_WHITEOUT,
    };

    pub(super) use super::{
        check_at_flags, Ctx, DirEntryOut, FileAt, NameStep, AT_FDCWD, O_ACCMODE,
    };
    pub(super) use crate::acl;
    pub(super) use crate::dcache::*;
    pub(super) use crate::file::NO_HANDLE;
    pub(super) use crate::handle::{At, Handle};
    pub(super) use crate::namei::{
        self, Cur, Last, Nameidata, Walked, LOOKUP_BENEATH, LOOKUP_FOLLOW, LOOKUP_NO_CROSS,
    };
    pub(super) use crate::pathcache::{self, Cached};
    pub(super) use crate::perm::{MAY_READ, MAY_WRITE};
    pub(super) use crate::policy;
    pub(super) use crate::stat::Statx;
    pub(super) use crate::step::{Res, Step};
    pub(super) use crate::sync::Ordering::Relaxed;
}

use std::sync::Arc;

use std::sync::atomic::Ordering as AtomicOrdering;

use walkfs_fsapi::{DirEntry, Errno, Result, Timespec};

use crate::file::{FdTable, File};
use crate::perm::Creds;
use crate::step::{self, Res};
use crate::writer::PinCache;
use crate::{Inner, Vfs};

/// "The current directory": for a [`Ctx`], its root.
pub const AT_FDCWD: i32 = libc::AT_FDCWD;

/// One directory entry as `getdents64` reports it.
pub type DirEntryOut = DirEntry;

/// Flags `openat` accepts (others are ignored, as Linux ignores them).
const O_ACCMODE: i32 = libc::O_ACCMODE;

/// One caller of a [`Vfs`]: credentials, descriptors, and the calls.
/// `/` is the vfs root and `..` never climbs above it.
pub struct Ctx {
    vfs: Vfs,
    creds: Creds,
    /// `creds` interned: the path cache keys on it.
    cred_id: u32,
    /// Shared with the contexts [`Ctx::with_creds`] made from this one.
    fds: Arc<FdTable>,
    /// Pins kept after close for the next open (writer.rs).
    pins: Arc<PinCache>,
    beneath: bool,
}

/// The open file a call works on: a descriptor of the context's table
/// (the C ABI's, the CLI's), or an [`crate::OpenFile`]'s own.
#[derive(Clone, Copy)]
pub(crate) enum FileAt<'a> {
    Fd(i32),
    Open(&'a File),
}

/// One name a [`Ctx::walk_names`] stepped onto.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NameStep {
    /// `st_ino`.
    pub ino: u64,
    /// `st_mode` (type and permission bits).
    pub mode: u32,
    /// Birth time in nanoseconds (0: unknown): with `ino`, the file's
    /// identity.
    pub born: i64,
}

fn check_at_flags(flags: i32, allowed: i32) -> Result<()> {
    if flags & !allowed != 0 {
        Err(Errno::EINVAL)
    } else {
        Ok(())
    }
}

impl Drop for Ctx {
    fn drop(&mut self) {
        self.pins.drain(&self.vfs.inner);
        // The last context sharing the table closes what is left open.
        let fds = std::mem::replace(&mut self.fds, Arc::new(FdTable::new(0)));
        if let Some(table) = Arc::into_inner(fds) {
            self.fds = Arc::new(table);
            for fd in self.fds.open_fds() {
                let _ = self.close(fd);
            }
        }
    }
}

impl Ctx {
    /// Run a call's body until it stops asking to start over (step.rs).
    #[inline(always)]
    fn run<T>(&self, body: impl FnMut() -> Res<T>) -> Result<T> {
        step::drive(&self.inner().counters.retries, body)
    }

    pub(crate) fn new(vfs: Vfs, creds: Creds, max_fds: usize) -> Ctx {
        let cred_id = vfs.inner.cred_ids.id(&creds);
        let fds = Arc::new(FdTable::new(max_fds));
        let pins = PinCache::registered(&vfs.inner);
        Ctx {
            vfs,
            creds,
            cred_id,
            fds,
            pins,
            beneath: false,
        }
    }

    pub fn vfs(&self) -> &Vfs {
        &self.vfs
    }

    pub fn creds(&self) -> &Creds {
        &self.creds
    }

    /// Another context with `creds` that shares this one's descriptors, as
    /// threads of one process with different filesystem ids share their
    /// descriptor table (a file server acting for several users on one
    /// connection).
    pub fn with_creds(&self, creds: Creds) -> Ctx {
        Ctx {
            vfs: self.vfs.clone(),
            cred_id: self.vfs.inner.cred_ids.id(&creds),
            creds,
            fds: Arc::clone(&self.fds),
            pins: PinCache::registered(&self.vfs.inner),
            beneath: self.beneath,
        }
    }

    /// Act with other credentials from now on (checks and new owners).
    pub fn set_creds(&mut self, creds: Creds) {
        self.cred_id = self.vfs.inner.cred_ids.id(&creds);
        self.creds = creds;
    }

    /// Confine every walk RESOLVE_BENEATH-style: `..` above the starting
    /// directory, absolute paths and absolute symlinks fail with `EXDEV`
    /// instead of being clamped at the root.
    pub fn set_beneath(&mut self, on: bool) {
        self.beneath = on;
    }

    fn inner(&self) -> &Inner {
        &self.vfs.inner
    }

    /// The open file `at` names; `EBADF` for a descriptor not open, or an
    /// open file closed already.
    #[inline(always)]
    pub(crate) fn file<'a>(&'a self, at: FileAt<'a>) -> Result<&'a File> {
        match at {
            FileAt::Fd(fd) => self.fds.get(fd).ok_or(Errno::EBADF),
            FileAt::Open(f) if f.is_open() => Ok(f),
            FileAt::Open(_) => Err(Errno::EBADF),
        }
    }

    fn check_writable(&self) -> Res<()> {
        if self.inner().sw.read_only.load(AtomicOrdering::Relaxed) {
            Err(Errno::EROFS.into())
        } else {
            Ok(())
        }
    }

    /// Current time, for callers building `utimensat` arguments.
    pub fn now() -> Timespec {
        Timespec::now()
    }
}

impl Ctx {
    /// What the permission check of `s` needs of its ACLs: `None` when
    /// the mode bits decide (acl.rs says when), else the inode's ACLs,
    /// asked of the backend the first time.
    pub(crate) fn acl_for(
        &self,
        s: &crate::dcache::InodeSnap,
    ) -> Res<Option<Arc<crate::acl::Pair>>> {
        if !crate::acl::needs_acl(&self.creds, s) {
            return Ok(None);
        }
        // A server's file is not asked about until the mode bits refuse
        // (`permission`): the server checks every call itself.
        if s.flags & crate::dcache::I_ACL_KNOWN == 0 && self.inner().server_decides(s) {
            return Ok(None);
        }
        Ok(Some(self.inner().acls(s)?))
    }

    /// `inode_permission` of `s` for `mask` (MAY_*), ACLs included. On
    /// a server's file the ACL is assumed absent until the mode bits
    /// refuse (acl.rs `learn_acls`): then it is asked for.
    pub(crate) fn permission(&self, s: &crate::dcache::InodeSnap, mask: u32) -> Res<()> {
        let p = self.acl_for(s)?;
        match crate::perm::check(&self.creds, s, crate::acl::access(&p), mask) {
            Err(Errno::EACCES) if p.is_none() && self.inner().server_decides(s) => {
                let p = Some(self.inner().acls_asked(s)?);
                Ok(crate::perm::check(
                    &self.creds,
                    s,
                    crate::acl::access(&p),
                    mask,
                )?)
            }
            r => Ok(r?),
        }
    }
}
