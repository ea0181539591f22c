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

/// A change [`LaterFs`] holds until its worker runs it.
struct Job {
    op: OwnedOp,
    done: walkfs_fsapi::Done,
}

enum OwnedOp {
    Write(NodeId, FileHandle, u64, Vec<u8>),
    SetAttr(NodeId, SetAttr),
    Unlink(NodeId, Vec<u8>),
    Rmdir(NodeId, Vec<u8>),
    Rename(NodeId, Vec<u8>, NodeId, Vec<u8>),
    Link(NodeId, NodeId, Vec<u8>),
}

/// memfs as a backend whose changes complete later
/// ([`caps::Ordered`]): submitted changes queue up, and one worker
/// carries them out in order, each after passing `gate` (so a test holds
/// them in flight); `fail` makes every change it runs fail with that
/// errno (a full disk, a refusal).
pub(crate) struct LaterFs {
    pub inner: walkfs_memfs::MemFs,
    /// Itself, for the tickets [`caps::Listings::list_ahead`] hands out.
    me: std::sync::Weak<LaterFs>,
    pub gate: Gate,
    pub fail: Mutex<Option<walkfs_fsapi::Errno>>,
    queue: Mutex<std::collections::VecDeque<Job>>,
    wake: Condvar,
    /// Changes submitted and not yet done.
    busy: Mutex<usize>,
    idle: Condvar,
}

impl LaterFs {
    pub fn new() -> Arc<LaterFs> {
        let fs = Arc::new_cyclic(|me| LaterFs {
            inner: walkfs_memfs::MemFs::new(),
            me: me.clone(),
            gate: Gate::default(),
            fail: Mutex::new(None),
            queue: Mutex::new(Default::default()),
            wake: Condvar::new(),
            busy: Mutex::new(0),
            idle: Condvar::new(),
        });
        let weak = Arc::downgrade(&fs);
        std::thread::spawn(move || loop {
            let Some(fs) = weak.upgrade() else { return };
            let job = {
                let mut q = fs.queue.lock().expect("queue");
                loop {
                    if let Some(j) = q.pop_front() {
                        break j;
                    }
                    let (g, _) = fs
                        .wake
                        .wait_timeout(q, std::time::Duration::from_millis(50))
                        .expect("queue");
                    q = g;
                    if q.is_empty() && Arc::strong_count(&fs) == 1 {
                        return;
                    }
                }
            };
            fs.gate.pass();
            let failing = *fs.fail.lock().expect("fail");
            let r = match failing {
                Some(e) => Err(e),
                None => match &job.op {
                    OwnedOp::Write(n, fh, off, data) => {
                        fs.inner.write(*n, *fh, *off, data).map(drop)
                    }
                    OwnedOp::SetAttr(n, set) => fs.inner.setattr(*n, set).map(drop),
                    OwnedOp::Unlink(p, name) => fs.inner.unlink(*p, name),
                    OwnedOp::Rmdir(p, name) => fs.inner.rmdir(*p, name),
                    OwnedOp::Rename(p, name, np, nn) => fs.inner.rename(*p, name, *np, nn, 0),
                    OwnedOp::Link(n, p, name) => fs.inner.link(*n, *p, name).map(drop),
                },
            };
            (job.done)(r);
            *fs.busy.lock().expect("busy") -= 1;
            fs.idle.notify_all();
        });
        fs
    }

    /// A listing with attributes as a remote backend gives it: every
    /// entry looked up (counted), symlink bodies along.
    fn plus(&self, dir: NodeId) -> Result<Vec<walkfs_fsapi::DirPlus>> {
        let mut out = Vec::new();
        for e in self.inner.readdir(dir)? {
            let entry = self.inner.lookup(dir, &e.name)?;
            let link = if entry.attr.is_symlink() {
                self.inner.readlink(entry.node).ok()
            } else {
                None
            };
            out.push(walkfs_fsapi::DirPlus {
                name: e.name,
                entry,
                link,
            });
        }
        Ok(out)
    }

    /// What `caps::Ordered` promises: a call sees every change
    /// submitted before it.
    fn settle(&self) {
        let mut b = self.busy.lock().expect("busy");
        while *b > 0 {
            b = self.idle.wait(b).expect("busy");
        }
    }
}

impl FileSystem for LaterFs {
    fn root(&self) -> NodeId {
        self.inner.root()
    }
    fn lookup(&self, p: NodeId, n: &[u8]) -> Result<Entry> {
        self.settle();
        self.inner.lookup(p, n)
    }
    fn forget(&self, n: NodeId, c: u64) {
        self.inner.forget(n, c)
    }
    fn getattr(&self, n: NodeId) -> Result<Attr> {
        self.settle();
        self.inner.getattr(n)
    }
    fn setattr(&self, n: NodeId, s: &SetAttr) -> Result<Attr> {
        self.settle();
        self.inner.setattr(n, s)
    }
    fn mkdir(&self, p: NodeId, n: &[u8], m: u32, o: Owner) -> Result<Entry> {
        self.settle();
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
        self.settle();
        self.inner.create(p, n, m, o, f)
    }
    fn open(&self, n: NodeId, f: OpenFlags) -> Result<FileHandle> {
        self.settle();
        self.inner.open(n, f)
    }
    fn read(&self, n: NodeId, fh: FileHandle, off: u64, buf: &mut [u8]) -> Result<usize> {
        self.settle();
        self.inner.read(n, fh, off, buf)
    }
    fn write(&self, n: NodeId, fh: FileHandle, off: u64, data: &[u8]) -> Result<usize> {
        self.settle();
        self.inner.write(n, fh, off, data)
    }
    fn release(&self, n: NodeId, fh: FileHandle) {
        self.inner.release(n, fh)
    }
    fn unlink(&self, p: NodeId, n: &[u8]) -> Result<()> {
        self.settle();
        self.inner.unlink(p, n)
    }
    fn rmdir(&self, p: NodeId, n: &[u8]) -> Result<()> {
        self.settle();
        self.inner.rmdir(p, n)
    }
    fn readdir(&self, n: NodeId) -> Result<Vec<DirEntry>> {
        self.settle();
        self.inner.readdir(n)
    }

    fn listings(&self) -> Option<&dyn walkfs_fsapi::caps::Listings> {
        Some(self)
    }

    fn ordered(&self) -> Option<&dyn walkfs_fsapi::caps::Ordered> {
        Some(self)
    }
}

impl walkfs_fsapi::caps::Listings for LaterFs {
    fn readdir_plus(&self, n: NodeId) -> Option<Result<Vec<walkfs_fsapi::DirPlus>>> {
        self.settle();
        Some(self.plus(n))
    }

    /// Answered as of the ask (as an ordered server would), handed over
    /// at the wait.
    fn list_ahead(&self, n: NodeId) -> Option<Box<dyn walkfs_fsapi::ListAhead>> {
        self.settle();
        Some(Box::new(Snapshot {
            fs: self.me.clone(),
            listing: Some(self.plus(n)),
        }))
    }
}

impl walkfs_fsapi::caps::Ordered for LaterFs {
    fn submit(&self, op: walkfs_fsapi::Deferred<'_>, done: walkfs_fsapi::Done) -> Result<()> {
        use walkfs_fsapi::Deferred;
        let op = match op {
            Deferred::Write {
                node,
                fh,
                off,
                data,
            } => OwnedOp::Write(node, fh, off, data.to_vec()),
            Deferred::SetAttr { node, set } => OwnedOp::SetAttr(node, set),
            Deferred::Unlink { parent, name, .. } => OwnedOp::Unlink(parent, name.to_vec()),
            Deferred::Rmdir { parent, name, .. } => OwnedOp::Rmdir(parent, name.to_vec()),
            Deferred::Rename {
                parent,
                name,
                newparent,
                newname,
                ..
            } => OwnedOp::Rename(parent, name.to_vec(), newparent, newname.to_vec()),
            Deferred::Link {
                node,
                newparent,
                newname,
            } => OwnedOp::Link(node, newparent, newname.to_vec()),
        };
        *self.busy.lock().expect("busy") += 1;
        self.queue
            .lock()
            .expect("queue")
            .push_back(Job { op, done });
        self.wake.notify_all();
        Ok(())
    }
}

/// A [`LaterFs`] listing asked for ahead.
struct Snapshot {
    fs: std::sync::Weak<LaterFs>,
    listing: Option<Result<Vec<walkfs_fsapi::DirPlus>>>,
}

impl walkfs_fsapi::ListAhead for Snapshot {
    fn wait(mut self: Box<Self>) -> Option<Result<Vec<walkfs_fsapi::DirPlus>>> {
        self.listing.take()
    }
}

impl Drop for Snapshot {
    /// Given up unused: the lookups it counted are forgotten.
    fn drop(&mut self) {
        if let (Some(Ok(l)), Some(fs)) = (self.listing.take(), self.fs.upgrade()) {
            for p in l {
                fs.inner.forget(p.entry.node, 1);
            }
        }
    }
}
