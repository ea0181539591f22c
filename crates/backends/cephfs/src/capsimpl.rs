//! The capabilities a CephFS mount answers beyond the core calls.

use std::ffi::{c_char, c_void};
use std::sync::Arc;

use parking_lot::Mutex;
use walkfs_fsapi::{
    caps, Change, ChangeSink, DirPlus, Errno, FileHandle, FileLock, How, ListAhead, LockFlavor,
    LockKind, LockOwner, NodeId, Result, RpcStats, What, LOCK_EOF,
};

use crate::ffi::{self, CallbackArgs, VInodeNo};
use crate::{check, cname, CephFs};

impl caps::Listings for CephFs {
    fn readdir_plus(&self, node: NodeId) -> Option<Result<Vec<DirPlus>>> {
        let mut out = Vec::new();
        let r = self.list(node, true, |de, stx, inode| {
            if inode.is_null() {
                return Ok(());
            }
            // A snapshot's entry is skipped (its reference given back).
            if let Ok(entry) = self.entry_listed(inode, stx) {
                out.push(DirPlus {
                    name: crate::dirent_name(de).to_vec(),
                    entry,
                    link: None,
                });
            }
            Ok(())
        });
        Some(match r {
            Ok(()) => Ok(out),
            Err(e) => {
                // Entries listed before the failure were counted.
                for d in out {
                    walkfs_fsapi::FileSystem::forget(self, d.entry.node, 1);
                }
                Err(e)
            }
        })
    }

    /// A listing on a thread of its own: each costs the MDS a round trip,
    /// and a tree walk's next directories overlap theirs. Calls into
    /// libcephfs complete before they return, so a listing asked after a
    /// change returned reflects it (what the vfs's read-ahead needs).
    fn list_ahead(&self, node: NodeId) -> Option<Box<dyn ListAhead>> {
        let me = SendPtr(self as *const CephFs);
        let t = std::thread::Builder::new()
            .name("cephfs-list".into())
            .spawn(move || {
                let me = me;
                // SAFETY: the ticket joins this thread before it is
                // dropped, and the vfs drops its tickets before the file
                // system (it holds the file system while they exist).
                let fs = unsafe { &*me.0 };
                caps::Listings::readdir_plus(fs, node)
            })
            .ok()?;
        Some(Box::new(Ahead {
            fs: self as *const CephFs,
            thread: Some(t),
        }))
    }

    fn lists_ahead(&self) -> bool {
        true
    }
}

/// A pointer moved to a listing thread.
struct SendPtr(*const CephFs);
// SAFETY: CephFs is Sync; the pointer is only dereferenced while the
// ticket that joins the thread is alive.
unsafe impl Send for SendPtr {}

type Listed = Option<Result<Vec<DirPlus>>>;

/// A listing on its way.
struct Ahead {
    fs: *const CephFs,
    thread: Option<std::thread::JoinHandle<Listed>>,
}

// SAFETY: as for SendPtr.
unsafe impl Send for Ahead {}

impl ListAhead for Ahead {
    fn wait(mut self: Box<Self>) -> Option<Result<Vec<DirPlus>>> {
        let t = self.thread.take()?;
        t.join().ok().flatten()
    }
}

impl Drop for Ahead {
    /// Given up unused: the entries it counted as looked up are forgotten.
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            if let Ok(Some(Ok(list))) = t.join() {
                // SAFETY: the file system outlives its tickets.
                let fs = unsafe { &*self.fs };
                for d in list {
                    walkfs_fsapi::FileSystem::forget(fs, d.entry.node, 1);
                }
            }
        }
    }
}

/// What libcephfs's callbacks reach: where changes are reported. Boxed
/// at mount, so its address (the callbacks' handle) never moves; freed
/// only after `ceph_unmount`, which stops the callbacks.
#[derive(Default)]
pub struct Hooks {
    sink: Mutex<Option<Arc<dyn ChangeSink>>>,
    /// The change channel reports other clients' changes: libcephfs's
    /// dentry invalidations, which name no kind of change and come late (a
    /// dentry's after the name moved on, seen by watchers as a second
    /// delete), are then not passed on.
    pub(crate) channel_watching: std::sync::atomic::AtomicBool,
}

impl Hooks {
    /// Register the callbacks of the mount `cm` with `self` as handle.
    pub(crate) fn register(&self, api: &ffi::Api, cm: *mut ffi::MountInfo) {
        let mut args = CallbackArgs {
            handle: self as *const Hooks as *mut c_void,
            ino_cb: Some(ino_invalidated),
            dentry_cb: Some(dentry_invalidated),
            switch_intr_cb: None,
            remount_cb: None,
            umask_cb: Some(no_umask),
            ino_release_cb: Some(ino_release),
        };
        // SAFETY: `args` is read during the call; the handle outlives the
        // mount (see the type's comment).
        unsafe { (api.ceph_ll_register_callbacks)(cm, &mut args) };
    }

    pub(crate) fn report(&self, changes: &[Change]) {
        let sink = self.sink.lock().clone();
        if let Some(s) = sink {
            s.changed(changes);
        }
    }
}

/// # Safety
/// `handle` is the `Hooks` registered, alive until `ceph_unmount`
/// returns, after which the library calls no callback.
unsafe fn hooks<'a>(handle: *mut c_void) -> &'a Hooks {
    // SAFETY: the caller's contract.
    unsafe { &*(handle as *const Hooks) }
}

/// The vfs applied the caller's umask before the call: the client, which
/// keeps ACLs, must not apply one of its own (its default took the group's
/// execute bit).
extern "C" fn no_umask(_handle: *mut c_void) -> libc::mode_t {
    0
}

/// libcephfs's inode invalidation: another client changed a file whose
/// data or attributes this client cached (its caps were recalled).
extern "C" fn ino_invalidated(handle: *mut c_void, ino: VInodeNo, _off: i64, _len: i64) {
    if ino.snapid != ffi::NOSNAP {
        return;
    }
    // SAFETY: the registered handle, called before unmount.
    let h = unsafe { hooks(handle) };
    if h.channel_watching
        .load(std::sync::atomic::Ordering::Acquire)
    {
        return;
    }
    h.report(&[Change::Inode {
        node: NodeId(ino.ino),
        ino: ino.ino,
        how: How::of(What::Unknown),
        at: None,
    }]);
}

/// libcephfs's dentry invalidation: a name this client cached in a
/// directory changed elsewhere (the MDS revoked its lease).
extern "C" fn dentry_invalidated(
    handle: *mut c_void,
    dir: VInodeNo,
    _ino: VInodeNo,
    name: *const c_char,
    len: usize,
) {
    if dir.snapid != ffi::NOSNAP || name.is_null() {
        return;
    }
    // SAFETY: the registered handle, called before unmount.
    let h = unsafe { hooks(handle) };
    if h.channel_watching
        .load(std::sync::atomic::Ordering::Acquire)
    {
        return;
    }
    // SAFETY: the library passes `len` readable bytes of the name.
    let name = unsafe { std::slice::from_raw_parts(name.cast::<u8>(), len) }.to_vec();
    h.report(&[Change::Entry {
        dir: NodeId(dir.ino),
        dir_ino: dir.ino,
        name,
        how: How::of(What::Unknown),
    }]);
}

/// The MDS asks the client to hold fewer inodes. The vfs's own cache
/// bound decides what it forgets; this is only logged.
extern "C" fn ino_release(_handle: *mut c_void, ino: VInodeNo) {
    tracing::trace!("cephfs: the MDS asks to release inode {:#x}", ino.ino);
}

impl caps::Watch for CephFs {
    fn watch_changes(&self, sink: Arc<dyn ChangeSink>) -> Result<()> {
        *self.hooks.sink.lock() = Some(sink);
        Ok(())
    }

    fn start(&self) -> Result<()> {
        // Other clients' changes reach no callback (libcephfs invalidates
        // only cached file data, and dentries under leases it rarely
        // holds). walkfs clients report theirs over the channel, which
        // gives watchers their events; the caches are kept right by
        // revalidating every answer with libcephfs (degraded: what
        // `cache=none` does), which answers from what its caps keep
        // current and asks the MDS otherwise. A report does not reach a
        // reader's cached pages before its next read (measured: 900 of
        // 1,100 reads right after another client's close showed old data
        // with the cache trusted), so the cache is not trusted.
        if let Some(ch) = &self.channel {
            match ch.watch(self.rctime_reader()) {
                Ok(()) => self
                    .hooks
                    .channel_watching
                    .store(true, std::sync::atomic::Ordering::Release),
                Err(e) => tracing::warn!("cephfs: {e}"),
            }
        }
        self.hooks.report(&[Change::Degraded]);
        Ok(())
    }
}

impl caps::Remote for CephFs {
    fn rpc_stats(&self) -> RpcStats {
        self.calls.stats()
    }

    fn reset_stats(&self) {
        self.calls.reset();
    }
}

fn flock64(lock: &FileLock) -> libc::flock64 {
    // SAFETY: all-zero is a valid flock64.
    let mut fl: libc::flock64 = unsafe { std::mem::zeroed() };
    fl.l_type = lock.kind.fcntl() as i16;
    fl.l_whence = libc::SEEK_SET as i16;
    fl.l_start = lock.start as i64;
    fl.l_len = lock.wire_len() as i64;
    fl.l_pid = lock.pid as i32;
    fl
}

impl caps::Locks for CephFs {
    fn setlk(&self, node: NodeId, fh: FileHandle, owner: LockOwner, lock: &FileLock) -> Result<()> {
        match lock.flavor {
            LockFlavor::Posix => {
                let f = self.files.get(fh)?;
                let mut fl = flock64(lock);
                let _t = self.calls.time("ll_setlk");
                // SAFETY: `f` open; `fl` valid; sleep 0: a conflict is
                // EAGAIN (the vfs retries a blocking request).
                check(unsafe { (self.api.ceph_ll_setlk)(self.cm, f, &mut fl, owner.0, 0) })
                    .map(drop)
            }
            LockFlavor::Flock => {
                let fd = self.files.flock_fd(fh, || {
                    let path = self.path_of(node)?;
                    // SAFETY: NUL-terminated path from the mount's root.
                    check(unsafe {
                        (self.api.ceph_open)(self.cm, path.as_ptr(), libc::O_RDONLY, 0)
                    })
                })?;
                let op = match lock.kind {
                    LockKind::Read => libc::LOCK_SH,
                    LockKind::Write => libc::LOCK_EX,
                    LockKind::Unlock => libc::LOCK_UN,
                } | libc::LOCK_NB;
                let _t = self.calls.time("flock");
                // SAFETY: `fd` a descriptor of this mount's.
                check(unsafe { (self.api.ceph_flock)(self.cm, fd, op, owner.0) }).map(drop)
            }
        }
    }

    fn getlk(
        &self,
        _node: NodeId,
        fh: FileHandle,
        owner: LockOwner,
        lock: &FileLock,
    ) -> Result<Option<FileLock>> {
        if lock.flavor == LockFlavor::Flock {
            // flock has no query.
            return Ok(None);
        }
        let f = self.files.get(fh)?;
        let mut fl = flock64(lock);
        let _t = self.calls.time("ll_getlk");
        // SAFETY: `f` open; `fl` valid in and out.
        check(unsafe { (self.api.ceph_ll_getlk)(self.cm, f, &mut fl, owner.0) })?;
        let Some(kind) = LockKind::from_fcntl(fl.l_type as u32) else {
            return Err(Errno::EIO);
        };
        if kind == LockKind::Unlock {
            return Ok(None);
        }
        let mut found = FileLock::from_len(kind, fl.l_start as u64, fl.l_len as u64)?;
        found.pid = fl.l_pid as u32;
        Ok(Some(found))
    }

    fn unlock_owner(&self, _node: NodeId, fh: FileHandle, owner: LockOwner) {
        let Ok(f) = self.files.get(fh) else { return };
        let mut fl = flock64(&FileLock {
            kind: LockKind::Unlock,
            flavor: LockFlavor::Posix,
            start: 0,
            end: LOCK_EOF,
            pid: 0,
        });
        let _t = self.calls.time("ll_setlk");
        // SAFETY: `f` open; `fl` valid.
        unsafe { (self.api.ceph_ll_setlk)(self.cm, f, &mut fl, owner.0, 0) };
    }
}

impl caps::Xattrs for CephFs {
    fn getxattr(&self, node: NodeId, name: &[u8]) -> Result<Vec<u8>> {
        let i = self.nodes.get(node)?;
        let c = cname(name)?;
        let _t = self.calls.time("ll_getxattr");
        let mut size = 256usize;
        loop {
            let mut buf = vec![0u8; size];
            // SAFETY: `i` held; `buf` writable for `size` bytes.
            match check(unsafe {
                (self.api.ceph_ll_getxattr)(
                    self.cm,
                    i,
                    c.as_ptr(),
                    buf.as_mut_ptr().cast(),
                    size,
                    self.perm,
                )
            }) {
                Ok(n) => {
                    buf.truncate(n as usize);
                    return Ok(buf);
                }
                Err(Errno::ERANGE) if size < 1 << 20 => size *= 4,
                Err(e) => return Err(e),
            }
        }
    }

    fn listxattr(&self, node: NodeId) -> Result<Vec<u8>> {
        let i = self.nodes.get(node)?;
        let _t = self.calls.time("ll_listxattr");
        let mut size = 1024usize;
        loop {
            let mut buf = vec![0u8; size];
            let mut used = 0usize;
            // SAFETY: `i` held; `buf` writable for `size` bytes.
            match check(unsafe {
                (self.api.ceph_ll_listxattr)(
                    self.cm,
                    i,
                    buf.as_mut_ptr().cast(),
                    size,
                    &mut used,
                    self.perm,
                )
            }) {
                Ok(_) => {
                    buf.truncate(used.min(size));
                    return Ok(buf);
                }
                Err(Errno::ERANGE) if size < 1 << 20 => size *= 4,
                Err(e) => return Err(e),
            }
        }
    }

    fn setxattr(&self, node: NodeId, name: &[u8], value: &[u8], flags: i32) -> Result<()> {
        let i = self.nodes.get(node)?;
        let c = cname(name)?;
        let _t = self.calls.time("ll_setxattr");
        // SAFETY: `i` held; `value` readable for its length.
        check(unsafe {
            (self.api.ceph_ll_setxattr)(
                self.cm,
                i,
                c.as_ptr(),
                value.as_ptr().cast(),
                value.len(),
                flags,
                self.perm,
            )
        })?;
        self.tell_inode(node, What::Attrib);
        Ok(())
    }

    fn removexattr(&self, node: NodeId, name: &[u8]) -> Result<()> {
        let i = self.nodes.get(node)?;
        let c = cname(name)?;
        let _t = self.calls.time("ll_removexattr");
        // SAFETY: `i` held.
        check(unsafe { (self.api.ceph_ll_removexattr)(self.cm, i, c.as_ptr(), self.perm) })?;
        self.tell_inode(node, What::Attrib);
        Ok(())
    }
}

impl caps::Space for CephFs {
    fn fallocate(
        &self,
        _node: NodeId,
        fh: FileHandle,
        mode: i32,
        off: u64,
        len: u64,
    ) -> Result<()> {
        let f = self.files.get(fh)?;
        let _t = self.calls.time("ll_fallocate");
        // SAFETY: `f` open.
        check(unsafe { (self.api.ceph_ll_fallocate)(self.cm, f, mode, off as i64, len as i64) })
            .map(drop)
    }

    fn seek_data(&self, _node: NodeId, fh: FileHandle, off: u64, whence: i32) -> Result<u64> {
        let f = self.files.get(fh)?;
        let _t = self.calls.time("ll_lseek");
        // SAFETY: `f` open.
        let r = unsafe { (self.api.ceph_ll_lseek)(self.cm, f, off as i64, whence) };
        if r < 0 {
            Err(Errno(-r as i32))
        } else {
            Ok(r as u64)
        }
    }
}

/// A file's id: its inode number (cluster-wide, stable) and birth time
/// (which tells a reused number's new file from the old one).
impl caps::Export for CephFs {
    fn file_id(&self, node: NodeId) -> Result<Vec<u8>> {
        let a = walkfs_fsapi::FileSystem::getattr(self, node)?;
        let mut id = node.0.to_le_bytes().to_vec();
        id.extend_from_slice(&a.btime.as_nanos().to_le_bytes());
        Ok(id)
    }

    fn open_id(&self, id: &[u8]) -> Result<walkfs_fsapi::Entry> {
        let (Ok(ino), Ok(born)) = (
            id.get(..8)
                .unwrap_or_default()
                .try_into()
                .map(u64::from_le_bytes),
            id.get(8..16)
                .unwrap_or_default()
                .try_into()
                .map(i64::from_le_bytes),
        ) else {
            return Err(Errno::ESTALE);
        };
        if id.len() != 16 {
            return Err(Errno::ESTALE);
        }
        let mut inode = std::ptr::null_mut();
        let _t = self.calls.time("ll_lookup_inode");
        // SAFETY: `inode` written with a reference on success.
        let r = unsafe {
            (self.api.ceph_ll_lookup_inode)(self.cm, ffi::InodeNo { val: ino }, &mut inode)
        };
        if r < 0 {
            return Err(Errno::ESTALE);
        }
        let mut stx = ffi::Statx::default();
        // SAFETY: a referenced inode.
        let r = unsafe {
            (self.api.ceph_ll_getattr)(
                self.cm,
                inode,
                &mut stx,
                ffi::STATX_WANT,
                libc::AT_SYMLINK_NOFOLLOW as u32,
                self.perm,
            )
        };
        if r < 0 || stx.stx_nlink == 0 || crate::attr_of(&stx).btime.as_nanos() != born {
            self.put(inode);
            return Err(Errno::ESTALE);
        }
        self.entry_listed(inode, &stx)
    }

    fn path_of(&self, node: NodeId) -> Result<Vec<Vec<u8>>> {
        use walkfs_fsapi::FileSystem;
        let mut names = Vec::new();
        let mut at = node;
        // Up through "..", each name found in its parent's listing.
        while at != self.root {
            if names.len() > 4096 {
                return Err(Errno::ESTALE);
            }
            let parent = self.lookup(at, b"..").map_err(|_| Errno::ESTALE)?;
            if parent.node == at {
                // The file system's root, and `node` not under the mount's.
                self.forget(at, 1);
                return Err(Errno::ESTALE);
            }
            let found = self
                .readdir(parent.node)
                .map(|v| v.into_iter().find(|e| e.ino == at.0));
            let up = parent.node;
            self.forget(up, 1);
            match found {
                Ok(Some(e)) => names.push(e.name),
                _ => return Err(Errno::ESTALE),
            }
            at = up;
        }
        names.reverse();
        Ok(names)
    }
}
