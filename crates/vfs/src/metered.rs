//! Every call the vfs makes into a backend, counted by operation: what a
//! workload cost below the caches, whichever backend serves it. The vfs
//! wraps each file system it is given in a [`Metered`], so the count holds
//! for every front end and needs nothing from the backends.
//!
//! A call is "waited for" when its caller could not go on before the
//! backend answered: every call but a change submitted to a backend that
//! completes it later ([`caps::Ordered`]), and the listings asked
//! for ahead (their waits, if any, are timed by the read-ahead).

use std::sync::Arc;

use walkfs_fsapi::{
    caps, Attr, AttrThen, Deferred, DirEntry, DirPlus, Done, Entry, Errno, FidStats, FileHandle,
    FileSystem, Granted, ListAhead, Make, NodeId, OpenFlags, Owner, Result, RpcStats, SetAttr,
    StatFs,
};

use crate::counters::Counter;

/// The operations counted, in the order they are reported.
#[derive(Clone, Copy)]
#[repr(usize)]
enum Op {
    Lookup,
    Forget,
    Getattr,
    Setattr,
    Submit,
    Readlink,
    Open,
    Create,
    Tmpfile,
    Read,
    Write,
    Release,
    Mkdir,
    Symlink,
    Mknod,
    Link,
    Unlink,
    Rmdir,
    Rename,
    Readdir,
    ReaddirPlus,
    ListAhead,
    Statfs,
}

const NAMES: [&str; 23] = [
    "lookup",
    "forget",
    "getattr",
    "setattr",
    "submit",
    "readlink",
    "open",
    "create",
    "tmpfile",
    "read",
    "write",
    "release",
    "mkdir",
    "symlink",
    "mknod",
    "link",
    "unlink",
    "rmdir",
    "rename",
    "readdir",
    "readdir_plus",
    "list_ahead",
    "statfs",
];

/// The counts of every backend of one vfs.
#[derive(Default)]
pub(crate) struct Meter {
    calls: [Counter; NAMES.len()],
    /// Submits the caller did not wait for.
    behind: Counter,
}

/// What [`crate::Vfs::backend_calls`] reports of the backend calls.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BackendCalls {
    /// Calls by operation (only those made at least once).
    pub by_op: Vec<(&'static str, u64)>,
    pub total: u64,
    /// Of `total`, those whose caller waited for the answer.
    pub waited: u64,
}

impl Meter {
    fn count(&self, op: Op) {
        self.calls[op as usize].inc();
    }

    pub fn snapshot(&self) -> BackendCalls {
        let by_op: Vec<(&'static str, u64)> = NAMES
            .iter()
            .zip(&self.calls)
            .map(|(n, c)| (*n, c.get()))
            .filter(|(_, c)| *c > 0)
            .collect();
        let total: u64 = by_op.iter().map(|(_, c)| c).sum();
        let ahead = self.calls[Op::ListAhead as usize].get();
        BackendCalls {
            by_op,
            total,
            waited: total.saturating_sub(self.behind.get() + ahead),
        }
    }
}

/// A backend with its calls counted into a [`Meter`].
pub(crate) struct Metered {
    fs: Arc<dyn FileSystem>,
    meter: Arc<Meter>,
}

impl Metered {
    pub fn wrap(fs: Arc<dyn FileSystem>, meter: &Arc<Meter>) -> Arc<dyn FileSystem> {
        Arc::new(Metered {
            fs,
            meter: Arc::clone(meter),
        })
    }
}

impl FileSystem for Metered {
    fn root(&self) -> NodeId {
        self.fs.root()
    }

    fn attach_names(&self, names: Arc<dyn walkfs_fsapi::Names>) {
        self.fs.attach_names(names)
    }

    fn lookup(&self, parent: NodeId, name: &[u8]) -> Result<Entry> {
        self.meter.count(Op::Lookup);
        self.fs.lookup(parent, name)
    }

    fn forget(&self, node: NodeId, count: u64) {
        self.meter.count(Op::Forget);
        self.fs.forget(node, count)
    }

    fn getattr(&self, node: NodeId) -> Result<Attr> {
        self.meter.count(Op::Getattr);
        self.fs.getattr(node)
    }

    fn setattr(&self, node: NodeId, set: &SetAttr) -> Result<Attr> {
        self.meter.count(Op::Setattr);
        self.fs.setattr(node, set)
    }

    fn readlink(&self, node: NodeId) -> Result<Vec<u8>> {
        self.meter.count(Op::Readlink);
        self.fs.readlink(node)
    }

    fn open(&self, node: NodeId, flags: OpenFlags) -> Result<FileHandle> {
        self.meter.count(Op::Open);
        self.fs.open(node, flags)
    }

    fn create(
        &self,
        parent: NodeId,
        name: &[u8],
        mode: u32,
        owner: Owner,
        flags: OpenFlags,
    ) -> Result<(Entry, FileHandle)> {
        self.meter.count(Op::Create);
        self.fs.create(parent, name, mode, owner, flags)
    }

    fn tmpfile(
        &self,
        dir: NodeId,
        mode: u32,
        owner: Owner,
        flags: OpenFlags,
    ) -> Result<(Entry, FileHandle)> {
        self.meter.count(Op::Tmpfile);
        self.fs.tmpfile(dir, mode, owner, flags)
    }

    fn read(&self, node: NodeId, fh: FileHandle, off: u64, buf: &mut [u8]) -> Result<usize> {
        self.meter.count(Op::Read);
        self.fs.read(node, fh, off, buf)
    }

    fn write(&self, node: NodeId, fh: FileHandle, off: u64, data: &[u8]) -> Result<usize> {
        self.meter.count(Op::Write);
        self.fs.write(node, fh, off, data)
    }

    fn release(&self, node: NodeId, fh: FileHandle) {
        self.meter.count(Op::Release);
        self.fs.release(node, fh)
    }

    fn mkdir(&self, parent: NodeId, name: &[u8], mode: u32, owner: Owner) -> Result<Entry> {
        self.meter.count(Op::Mkdir);
        self.fs.mkdir(parent, name, mode, owner)
    }

    fn symlink(&self, parent: NodeId, name: &[u8], target: &[u8], owner: Owner) -> Result<Entry> {
        self.meter.count(Op::Symlink);
        self.fs.symlink(parent, name, target, owner)
    }

    fn mknod(
        &self,
        parent: NodeId,
        name: &[u8],
        mode: u32,
        rdev: u64,
        owner: Owner,
    ) -> Result<Entry> {
        self.meter.count(Op::Mknod);
        self.fs.mknod(parent, name, mode, rdev, owner)
    }

    fn link(&self, node: NodeId, newparent: NodeId, newname: &[u8]) -> Result<Entry> {
        self.meter.count(Op::Link);
        self.fs.link(node, newparent, newname)
    }

    fn unlink(&self, parent: NodeId, name: &[u8]) -> Result<()> {
        self.meter.count(Op::Unlink);
        self.fs.unlink(parent, name)
    }

    fn rmdir(&self, parent: NodeId, name: &[u8]) -> Result<()> {
        self.meter.count(Op::Rmdir);
        self.fs.rmdir(parent, name)
    }

    fn rename(
        &self,
        parent: NodeId,
        name: &[u8],
        newparent: NodeId,
        newname: &[u8],
        flags: u32,
    ) -> Result<()> {
        self.meter.count(Op::Rename);
        self.fs.rename(parent, name, newparent, newname, flags)
    }

    fn readdir(&self, node: NodeId) -> Result<Vec<DirEntry>> {
        self.meter.count(Op::Readdir);
        self.fs.readdir(node)
    }

    fn statfs(&self, node: NodeId) -> Result<StatFs> {
        self.meter.count(Op::Statfs);
        self.fs.statfs(node)
    }

    fn kind(&self) -> &'static str {
        self.fs.kind()
    }

    /// Metered too: a change submitted is counted, and whether its caller
    /// waits for it.
    fn ordered(&self) -> Option<&dyn caps::Ordered> {
        self.fs.ordered().map(|_| self as &dyn caps::Ordered)
    }

    fn listings(&self) -> Option<&dyn caps::Listings> {
        self.fs.listings().map(|_| self as &dyn caps::Listings)
    }

    // Not metered: the kernel's own I/O and the backend's reports are no
    // calls of the vfs.
    fn host_files(&self) -> Option<&dyn caps::HostFiles> {
        self.fs.host_files()
    }

    fn watch(&self) -> Option<&dyn caps::Watch> {
        self.fs.watch()
    }

    fn locks(&self) -> Option<&dyn caps::Locks> {
        self.fs.locks()
    }

    fn xattrs(&self) -> Option<&dyn caps::Xattrs> {
        self.fs.xattrs()
    }

    fn space(&self) -> Option<&dyn caps::Space> {
        self.fs.space()
    }

    fn export(&self) -> Option<&dyn caps::Export> {
        self.fs.export()
    }

    /// Metered: an open with its first read is two calls.
    fn remote(&self) -> Option<&dyn caps::Remote> {
        self.fs.remote().map(|_| self as &dyn caps::Remote)
    }
}

/// The inner backend's [`caps::Ordered`], counted. Asked for only while
/// the inner one has it; should it have stopped since, a change is
/// carried out now and an identity is refused.
impl caps::Ordered for Metered {
    fn submit(&self, op: Deferred<'_>, done: Done) -> Result<()> {
        self.meter.count(Op::Submit);
        match self.fs.ordered() {
            Some(o) => {
                self.meter.behind.inc();
                o.submit(op, done)
            }
            None => {
                walkfs_fsapi::run_inline(&*self.fs, op, done);
                Ok(())
            }
        }
    }

    fn grant(&self, owner: Owner) -> Option<Granted> {
        self.fs.ordered()?.grant(owner)
    }

    fn make_behind(
        &self,
        parent: NodeId,
        name: &[u8],
        owner: Owner,
        node: Granted,
        what: Make<'_>,
        done: Done,
    ) -> Result<Option<FileHandle>> {
        let o = self.fs.ordered().ok_or(Errno::ENOSYS)?;
        self.meter.count(match what {
            Make::File { .. } => Op::Create,
            Make::Dir { .. } => Op::Mkdir,
            Make::Symlink { .. } => Op::Symlink,
            Make::Special { .. } => Op::Mknod,
        });
        self.meter.behind.inc();
        o.make_behind(parent, name, owner, node, what, done)
    }

    fn getattr_behind(&self, node: NodeId, then: AttrThen) -> bool {
        let asked = self
            .fs
            .ordered()
            .is_some_and(|o| o.getattr_behind(node, then));
        if asked {
            // Nobody waits for it.
            self.meter.count(Op::Getattr);
            self.meter.behind.inc();
        }
        asked
    }

    fn leased(&self, node: NodeId) -> bool {
        self.fs.leased(node)
    }
}

impl caps::Remote for Metered {
    fn open_read(
        &self,
        node: NodeId,
        flags: OpenFlags,
        off: u64,
        buf: &mut [u8],
    ) -> Option<Result<(FileHandle, usize)>> {
        let r = self.fs.remote()?.open_read(node, flags, off, buf)?;
        self.meter.count(Op::Open);
        self.meter.count(Op::Read);
        Some(r)
    }

    fn rpc_stats(&self) -> RpcStats {
        self.fs.remote().map(|r| r.rpc_stats()).unwrap_or_default()
    }

    fn fid_stats(&self) -> Option<FidStats> {
        self.fs.remote()?.fid_stats()
    }

    fn reset_stats(&self) {
        if let Some(r) = self.fs.remote() {
            r.reset_stats();
        }
    }
}

impl caps::Listings for Metered {
    fn readdir_plus(&self, node: NodeId) -> Option<Result<Vec<DirPlus>>> {
        self.meter.count(Op::ReaddirPlus);
        self.fs.listings()?.readdir_plus(node)
    }

    fn list_ahead(&self, node: NodeId) -> Option<Box<dyn ListAhead>> {
        self.meter.count(Op::ListAhead);
        self.fs.listings()?.list_ahead(node)
    }

    fn lists_ahead(&self) -> bool {
        self.fs.listings().is_some_and(|l| l.lists_ahead())
    }

    fn complete(&self) -> bool {
        self.fs.listings_complete()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use crate::tests_util::mem_vfs;
    use crate::AT_FDCWD;

    /// A stat of a name not cached is one backend lookup, waited for; the
    /// same stat again costs nothing below the cache.
    #[test]
    fn backend_calls_are_counted_by_operation() {
        let vfs = mem_vfs("");
        let ctx = vfs.context(crate::Creds::root());
        ctx.mkdirat(AT_FDCWD, b"/d", 0o755).expect("mkdir");
        let before = vfs.backend_calls();
        assert_eq!(
            before
                .by_op
                .iter()
                .find(|(n, _)| *n == "mkdir")
                .map(|p| p.1),
            Some(1)
        );
        vfs.drop_caches();
        let base = vfs.backend_calls();
        ctx.statx(AT_FDCWD, b"/d", 0, libc::STATX_BASIC_STATS)
            .expect("stat");
        let after = vfs.backend_calls();
        assert!(after.total > base.total, "{base:?} -> {after:?}");
        assert_eq!(after.total - base.total, after.waited - base.waited);
        ctx.statx(AT_FDCWD, b"/d", 0, libc::STATX_BASIC_STATS)
            .expect("stat");
        assert_eq!(vfs.backend_calls(), after, "answered from the cache");
    }
}
