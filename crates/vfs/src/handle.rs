//! Handles: counted references to a place in the tree, for front ends
//! (Linux's `struct path`, gVisor's `VirtualDentry`).
//!
//! A [`Handle`] keeps one dentry, and through it its inode, alive for as
//! long as it lives, outside any descriptor table: a FUSE node and a 9P
//! fid each hold one, and walks, attributes, opens and listings start
//! from it ([`At::Handle`] wherever a call takes a directory descriptor).
//! A handle follows its file through renames (the dentry moves) and
//! outlives an unlink (the dentry is dead but its inode answers).
//!
//! Invariant: a handle holds one reference on its dentry's count from
//! creation to drop, so the slot is never freed or reused under it;
//! cloning adds a reference to a dentry already held, which can therefore
//! not be dying.

use std::sync::Arc;

use crate::dcache::DIdx;
use crate::namei::Cur;
use crate::{Inner, Vfs};

/// A counted reference to a dentry of one [`Vfs`].
pub struct Handle {
    inner: Arc<Inner>,
    d: DIdx,
}

impl Handle {
    /// Pin what the walk found at `c`; `None` when it moved or is being
    /// freed meanwhile (the caller starts over).
    pub(crate) fn pin(inner: &Arc<Inner>, c: Cur) -> Option<Handle> {
        inner.pin(c.d, c.seq).then(|| Handle {
            inner: Arc::clone(inner),
            d: c.d,
        })
    }

    /// Take over a reference the caller already holds on `d`.
    pub(crate) fn adopt(inner: &Arc<Inner>, d: DIdx) -> Handle {
        Handle {
            inner: Arc::clone(inner),
            d,
        }
    }

    /// The dentry, if this handle belongs to `vfs`.
    pub(crate) fn dentry_in(&self, vfs: &Vfs) -> Option<DIdx> {
        Arc::ptr_eq(&self.inner, &vfs.inner).then_some(self.d)
    }

    /// A number for the place (its dentry) while the handle lives: equal
    /// for two handles exactly when [`Handle::same`] is true of them, for
    /// a front end's maps.
    pub fn key(&self) -> u64 {
        u64::from(self.d.0)
    }

    /// The same place: two handles are equal when they hold one dentry.
    pub fn same(&self, other: &Handle) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner) && self.d == other.d
    }
}

impl Clone for Handle {
    fn clone(&self) -> Handle {
        self.inner.repin(self.d);
        Handle::adopt(&self.inner, self.d)
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.inner.unpin(self.d);
    }
}

impl std::fmt::Debug for Handle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Handle({})", self.d.0)
    }
}

/// Where a call's path starts: a descriptor of the context (or
/// [`crate::AT_FDCWD`]), a [`Handle`], or an open file.
#[derive(Clone, Copy, Debug)]
pub enum At<'a> {
    Fd(i32),
    Handle(&'a Handle),
    /// An open file ([`crate::OpenFile`]), as a descriptor names one.
    File(&'a crate::OpenFile),
}

impl At<'_> {
    /// The context's root ("current directory").
    pub(crate) fn is_cwd(self) -> bool {
        matches!(self, At::Fd(crate::AT_FDCWD))
    }
}

impl From<i32> for At<'_> {
    fn from(fd: i32) -> Self {
        At::Fd(fd)
    }
}

impl<'a> From<&'a Handle> for At<'a> {
    fn from(h: &'a Handle) -> Self {
        At::Handle(h)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use crate::tests_util::{mem_vfs, with_dirs};
    use crate::{At, Errno, AT_FDCWD};

    /// A handle starts walks, names its file for attributes and opens,
    /// follows it through a rename, and keeps an unlinked file's inode.
    #[test]
    fn a_handle_follows_its_file_and_outlives_its_name() {
        let vfs = mem_vfs("");
        let ctx = with_dirs(&vfs, &["/a", "/b"]);
        let fd = ctx
            .openat(AT_FDCWD, b"/a/f", libc::O_CREAT | libc::O_WRONLY, 0o644)
            .expect("create");
        assert_eq!(ctx.write(fd, b"data"), Ok(4));
        ctx.close(fd).expect("close");
        let a = ctx.handle(AT_FDCWD, b"/a").expect("handle");
        let mut steps = Vec::new();
        let f = ctx
            .walk_handle(&a, &[b"f"], &mut steps)
            .expect("walk")
            .expect("all names");
        let size = |h: &crate::Handle| {
            ctx.statx(At::Handle(h), b"", libc::AT_EMPTY_PATH, libc::STATX_SIZE)
                .map(|x| x.stx_size)
        };
        assert_eq!(size(&f), Ok(4));
        // Renamed across directories: the handle moved with it.
        ctx.renameat2(&a, b"f", AT_FDCWD, b"/b/g", 0)
            .expect("rename");
        let again = ctx.handle(AT_FDCWD, b"/b/g").expect("handle");
        assert!(again.same(&f));
        // A clone is one more reference; the file is read through it.
        let f2 = f.clone();
        drop(f);
        let r = ctx.reopen(&f2, libc::O_RDONLY).expect("reopen");
        let mut buf = [0u8; 8];
        assert_eq!(ctx.read(r, &mut buf), Ok(4));
        ctx.close(r).expect("close");
        // Unlinked: the name is gone, the inode still answers.
        ctx.unlinkat(AT_FDCWD, b"/b/g", 0).expect("unlink");
        assert_eq!(size(&f2), Ok(4));
        assert_eq!(ctx.handle(AT_FDCWD, b"/b/g").map(drop), Err(Errno::ENOENT));
        // Creates below a handle of a directory.
        ctx.mkdirat(&a, b"sub", 0o755).expect("mkdir");
        assert!(ctx.statx(AT_FDCWD, b"/a/sub", 0, libc::STATX_MODE).is_ok());
        // A handle of another vfs is refused.
        let other = mem_vfs("");
        let octx = other.context(crate::Creds::root());
        assert_eq!(
            octx.statx(&a, b"", libc::AT_EMPTY_PATH, libc::STATX_MODE)
                .map(drop),
            Err(Errno::EBADF)
        );
    }
}
