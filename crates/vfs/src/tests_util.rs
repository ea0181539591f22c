//! What the unit tests beside each module share: a vfs over memfs, and a
//! memfs whose calls can be held at a gate or counted.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use walkfs_fsapi::{
    Attr, DirEntry, Entry, FileHandle, FileSystem, NodeId, OpenFlags, Owner, Result, SetAttr,
};

use crate::dcache::InodeSnap;
use crate::{Creds, Ctx, Options, Vfs, AT_FDCWD};

/// An inode snapshot with just a mode and owners (for permission rules).
pub(crate) fn snap(mode: u32, uid: u32, gid: u32) -> InodeSnap {
    InodeSnap {
        mode,
        uid,
        gid,
        ..InodeSnap::default()
    }
}

/// An unprivileged caller.
pub(crate) fn user(uid: u32, gid: u32, groups: &[u32]) -> Creds {
    Creds {
        uid,
        gid,
        groups: groups.to_vec(),
        privileged: false,
    }
}

/// A vfs over an empty memfs with the options `opts` (`name=value,...`).
pub(crate) fn mem_vfs(opts: &str) -> Vfs {
    let o = Options::parse(opts).expect("options");
    Vfs::new(Arc::new(walkfs_memfs::MemFs::new()), &o).expect("vfs")
}

/// Root's context, with directories `dirs` made.
pub(crate) fn with_dirs(vfs: &Vfs, dirs: &[&str]) -> Ctx {
    let ctx = vfs.context(Creds::root());
    for d in dirs {
        ctx.mkdirat(AT_FDCWD, d.as_bytes(), 0o755).expect("mkdir");
    }
    ctx
}

/// A gate calls wait at until it is opened.
#[derive(Default)]
pub(crate) struct Gate {
    state: Mutex<(bool, u32)>,
    cv: Condvar,
}

impl Gate {
    /// Block until opened (counting the callers that arrived).
    pub fn pass(&self) {
        let mut s = self.state.lock().expect("gate");
        s.1 += 1;
        self.cv.notify_all();
        while !s.0 {
            s = self.cv.wait(s).expect("gate");
        }
    }
    /// Wait until `n` callers are held (or passed).
    pub fn wait_for(&self, n: u32) {
        let mut s = self.state.lock().expect("gate");
        while s.1 < n {
            s = self.cv.wait(s).expect("gate");
        }
    }
    pub fn open(&self) {
        self.state.lock().expect("gate").0 = true;
        self.cv.notify_all();
    }
}

/// memfs whose `mkdir` of names starting with `slow` waits at a gate, and
/// which counts the lookups that reach it.
pub(crate) struct GatedFs {
    pub inner: walkfs_memfs::MemFs,
    pub gate: Gate,
    pub lookups: AtomicU64,
}

impl GatedFs {
    pub fn new() -> Arc<GatedFs> {
        Arc::new(GatedFs {
            inner: walkfs_memfs::MemFs::new(),
            gate: Gate::default(),
            lookups: AtomicU64::new(0),
        })
    }
}

impl FileSystem for GatedFs {
    fn root(&self) -> NodeId {
        self.inner.root()
    }
    fn lookup(&self, p: NodeId, n: &[u8]) -> Result<Entry> {
        self.lookups.fetch_add(1, Ordering::Relaxed);
        self.inner.lookup(p, n)
    }
    fn forget(&self, n: NodeId, c: u64) {
        self.inner.forget(n, c)
    }
    fn getattr(&self, n: NodeId) -> Result<Attr> {
        self.inner.getattr(n)
    }
    fn setattr(&self, n: NodeId, s: &SetAttr) -> Result<Attr> {
        self.inner.setattr(n, s)
    }
    fn mkdir(&self, p: NodeId, n: &[u8], m: u32, o: Owner) -> Result<Entry> {
        if n.starts_with(b"slow") {
            self.gate.pass();
        }
        self.inner.mkdir(p, n, m, o)
    }
    fn create(
        &self,
        p: NodeId,
        n: &[u8],
        m: u32,
        o: Owner,
        f: OpenFlags,
    ) -> Result<(Entry, FileHandle)> {
        self.inner.create(p, n, m, o, f)
    }
    fn open(&self, n: NodeId, f: OpenFlags) -> Result<FileHandle> {
        self.inner.open(n, f)
    }
    fn release(&self, n: NodeId, fh: FileHandle) {
        self.inner.release(n, fh)
    }
    fn unlink(&self, p: NodeId, n: &[u8]) -> Result<()> {
        self.inner.unlink(p, n)
    }
    fn rmdir(&self, p: NodeId, n: &[u8]) -> Result<()> {
        self.inner.rmdir(p, n)
    }
    fn rename(&self, p: NodeId, n: &[u8], np: NodeId, nn: &[u8], flags: u32) -> Result<()> {
        self.inner.rename(p, n, np, nn, flags)
    }
    fn readdir(&self, n: NodeId) -> Result<Vec<DirEntry>> {
        self.inner.readdir(n)
    }
}
