//! hostfs: a host directory as a walkfs backend (passthrough).
//!
//! Nodes are files the vfs holds, found by name; a bounded cache keeps
//! `O_PATH` descriptors of the recently used ones and opens others again
//! by name (table.rs). A name is resolved with
//! `openat2(parent, name, O_PATH | O_NOFOLLOW, RESOLVE_BENEATH |
//! RESOLVE_NO_MAGICLINKS | RESOLVE_NO_SYMLINKS)`: one component, relative to
//! a descriptor we already hold, never following a link, so no name a client
//! sends can reach outside the exported directory (the vfs never hands `..`
//! down; `..` is resolved in the vfs from its own parent pointers).
//!
//! Opening for I/O re-opens the inode of an `O_PATH` descriptor through
//! `/proc/self/fd/N`, only after checking that it is a regular file or a
//! directory: the descriptor pins the inode while the call holds it, so the
//! check and the open see the same object,
//! and device nodes, fifos and sockets are never opened on anyone's behalf.
//!
//! Nodes are keyed by (device, inode number), so hard links share a
//! [`NodeId`], as the [`FileSystem`] contract asks.

mod behind;
mod export;
mod locks;
mod own;
mod space;
mod sys;
mod table;
mod watch;
mod xattr;

pub use table::FdStats;
pub use watch::WatchSource;

use table::{HostNode, Table, ROOT};

use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::sync::Arc;

use behind::Behind;
use own::Own;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use walkfs_fsapi::{
    caps, Attr, ChangeSink, Deferred, DirEntry, DirPlus, Done, Entry, Errno, FileHandle,
    FileSystem, FileType, NodeId, OpenFlags, Owner, Result, SetAttr, StatFs, TimeSet,
};

/// Default bound on cached `O_PATH` descriptors.
pub const DEFAULT_CACHED_FDS: usize = 2048;
const LOOKUP_FLAGS: i32 = libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC;
const RESOLVE: u64 =
    libc::RESOLVE_BENEATH | libc::RESOLVE_NO_MAGICLINKS | libc::RESOLVE_NO_SYMLINKS;

/// A host directory. Create with [`HostFs::new`].
pub struct HostFs {
    table: Arc<Table>,
    handles: Mutex<HashMap<u64, Arc<OwnedFd>>>,
    next_fh: Mutex<u64>,
    /// `/proc/self/fd`, to re-open held `O_PATH` descriptors.
    proc_fd: Arc<OwnedFd>,
    /// Set once changes are watched: every directory registered from then
    /// on is watched before it is returned.
    watcher: Mutex<Option<Arc<watch::Watcher>>>,
    /// Ask fanotify for a queue without a limit (see
    /// [`HostFs::set_watch_queue_unlimited`]).
    unlimited_queue: std::sync::atomic::AtomicBool,
    /// The process umask at start: modes are re-applied exactly after
    /// creation when it would have stripped bits.
    umask: u32,
    euid: u32,
    egid: u32,
    /// Changes the vfs lets run behind its caller, and whether it may
    /// (behind.rs).
    behind: Arc<Behind>,
    ordered: AtomicBool,
    /// Files are opened for I/O with `O_NOATIME` ([`HostFs::set_noatime`]).
    noatime: AtomicBool,
    /// Open handles whose host file the kernel writes directly (FUSE
    /// passthrough), and how many each node has: a change of times must
    /// not be overtaken by such a write, which never passes through us.
    direct: Mutex<Direct>,
    /// What our own changes left behind, so that their reports are marked
    /// (own.rs).
    own: Arc<Own>,
    /// File locks, taken on the host file for their owners (locks.rs).
    locks: locks::HostLocks,
    /// Where files are opened by their host handle, when they can be
    /// (export.rs).
    export_fd: std::sync::OnceLock<Option<OwnedFd>>,
}

#[derive(Default)]
struct Direct {
    handles: HashMap<u64, u64>,
    nodes: HashMap<u64, u32>,
}

impl HostFs {
    /// Export `dir`. Fails with the errno of opening it (ENOTDIR if it is
    /// not a directory).
    pub fn new(dir: &Path) -> Result<HostFs> {
        HostFs::with_cached_fds(dir, DEFAULT_CACHED_FDS)
    }

    /// Export `dir`, keeping at most `cached_fds` descriptors of files not
    /// in use (open files hold their own).
    pub fn with_cached_fds(dir: &Path, cached_fds: usize) -> Result<HostFs> {
        let path = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes())
            .map_err(|_| Errno::EINVAL)?;
        let cwd = libc::AT_FDCWD;
        // SAFETY: AT_FDCWD is always a valid directory handle for *at calls.
        let cwd = unsafe { BorrowedFd::borrow_raw(cwd) };
        let root = sys::openat(cwd, path.as_bytes(), libc::O_PATH | libc::O_DIRECTORY, 0)?;
        let proc_fd = sys::openat(cwd, b"/proc/self/fd", libc::O_PATH | libc::O_DIRECTORY, 0)?;
        let (_, key, born) = sys::identify(root.as_fd())?;
        Ok(HostFs {
            table: Arc::new(Table::new(root, key, born, cached_fds)),
            handles: Mutex::new(HashMap::new()),
            next_fh: Mutex::new(1),
            proc_fd: Arc::new(proc_fd),
            watcher: Mutex::new(None),
            unlimited_queue: std::sync::atomic::AtomicBool::new(false),
            umask: sys::umask(),
            euid: sys::geteuid(),
            egid: sys::getegid(),
            behind: Behind::new(),
            ordered: AtomicBool::new(false),
            noatime: AtomicBool::new(false),
            direct: Mutex::new(Direct::default()),
            own: Arc::new(Own::default()),
            locks: locks::HostLocks::default(),
            export_fd: std::sync::OnceLock::new(),
        })
    }

    /// Let the vfs's changes run behind the caller on a thread of ours
    /// (behind.rs), or carry every one out before answering (`false`, the
    /// default; set before the vfs is made).
    pub fn set_changes_behind(&self, on: bool) {
        self.ordered.store(on, Relaxed);
    }

    /// Open files for I/O with `O_NOATIME`, so that reads through walkfs
    /// leave the host files' access times as they were (for a mount with
    /// `noatime`). Where the host refuses it (a file of another owner,
    /// without `CAP_FOWNER`), the file is opened without.
    pub fn set_noatime(&self, on: bool) {
        self.noatime.store(on, Relaxed);
    }

    /// Hold the changes queued behind callers (`true`) until released
    /// (`false`): for tests, to show that a call waits for what it must.
    pub fn hold_changes_behind(&self, on: bool) {
        self.behind.hold(on);
    }

    /// Both ends of the host calls of a deferred change.
    fn core(&self) -> Core {
        Core {
            table: self.table.clone(),
            proc_fd: self.proc_fd.clone(),
            own: self.own.clone(),
        }
    }

    fn fd(&self, node: NodeId) -> Result<Arc<OwnedFd>> {
        Core::fd_of(&self.table, node)
    }

    /// Register a freshly opened `O_PATH` descriptor as a node (or count
    /// one more lookup of the node it already is).
    fn register(&self, fd: OwnedFd) -> Result<Entry> {
        let id = sys::identify(fd.as_fd())?;
        self.register_as(id, Some(fd))
    }

    /// [`HostFs::register`] of a node we just made as `name`: its reports
    /// are ours while it stays as made (own.rs).
    fn register_made(&self, parent: NodeId, name: &[u8], fd: OwnedFd) -> Result<Entry> {
        // (The caller made the node under `own.changing()`.)
        let (attr, key, born) = sys::identify(fd.as_fd())?;
        self.own.entry(parent.0, name, Some((key, born)));
        let entry = self.register_as((attr, key, born), Some(fd))?;
        self.own.inode(entry.node.0, &entry.attr);
        Ok(entry)
    }

    /// [`HostFs::register`] of a file known by its identity `(attr, key,
    /// born)`, with its descriptor when one is at hand (a node without
    /// one is opened by name when first used; a directory watched for
    /// changes needs one now).
    fn register_as(
        &self,
        (attr, key, born): (Attr, (u64, u64), i64),
        fd: Option<OwnedFd>,
    ) -> Result<Entry> {
        let mut nodes = self.table.nodes.write();
        // A node of the same key born at another time was a file since
        // removed whose inode number was reused: this is a new file.
        let existing = nodes
            .find(key)
            .filter(|id| nodes.by_id.get(id).is_some_and(|n| n.born == born));
        let id = match existing.and_then(|id| Some((id, nodes.by_id.get_mut(&id)?))) {
            Some((id, n)) => {
                n.lookups += 1;
                drop(nodes);
                if let Some(fd) = fd {
                    self.table.insert(id, fd);
                }
                return Ok(Entry {
                    node: NodeId(id),
                    attr,
                });
            }
            None => nodes.add(HostNode {
                key,
                born,
                lookups: 1,
                is_dir: attr.is_dir(),
            }),
        };
        drop(nodes);
        let Some(fd) = fd else {
            return Ok(Entry {
                node: NodeId(id),
                attr,
            });
        };
        // Watched before anyone above can cache a name in it.
        if attr.is_dir() {
            if let Some(w) = self.watcher.lock().clone() {
                w.add(&fd, key);
            }
        }
        self.table.insert(id, fd);
        Ok(Entry {
            node: NodeId(id),
            attr,
        })
    }

    /// Is `node` open with a handle whose host file the kernel writes
    /// directly?
    fn direct_node(&self, node: NodeId) -> bool {
        self.direct.lock().nodes.contains_key(&node.0)
    }

    /// Counters of the descriptor cache.
    pub fn fd_stats(&self) -> FdStats {
        self.table.stats()
    }

    /// Re-open a held node for I/O, refusing anything but regular files and
    /// directories.
    fn reopen(&self, fd: &OwnedFd, flags: i32) -> Result<OwnedFd> {
        if self.noatime.load(Relaxed) {
            match reopen(&self.proc_fd, fd, flags | libc::O_NOATIME) {
                Err(Errno::EPERM) => {}
                r => return r,
            }
        }
        reopen(&self.proc_fd, fd, flags)
    }

    fn new_handle(&self, fd: OwnedFd) -> FileHandle {
        let mut next = self.next_fh.lock();
        let fh = *next;
        *next += 1;
        self.handles.lock().insert(fh, Arc::new(fd));
        FileHandle(fh)
    }

    fn handle(&self, fh: FileHandle) -> Result<Arc<OwnedFd>> {
        self.handles.lock().get(&fh.0).cloned().ok_or(Errno::EBADF)
    }

    /// Give a new node its owner and exact mode. The kernel applied our
    /// umask and our own ids; the vfs decided others.
    /// An `O_PATH` descriptor of the file `file` has open (through its
    /// /proc link: the file may have no name).
    fn path_of(&self, file: &OwnedFd) -> Result<OwnedFd> {
        sys::openat(
            self.proc_fd.as_fd(),
            &sys::fd_name(file.as_raw_fd()),
            libc::O_PATH,
            0,
        )
    }

    fn settle_new(&self, fd: &OwnedFd, mode: Option<u32>, owner: Owner) -> Result<()> {
        if owner.uid != self.euid || owner.gid != self.egid {
            sys::fchownat_empty(fd.as_fd(), owner.uid, owner.gid)?;
        }
        // chown clears set-id bits, and the umask strips bits: put the mode
        // the vfs asked for back whenever either may have changed it.
        if let Some(mode) = mode {
            if mode & self.umask != 0
                || mode & 0o7000 != 0
                || owner.uid != self.euid
                || owner.gid != self.egid
            {
                sys::fchmodat(self.proc_fd.as_fd(), &sys::fd_name(fd.as_raw_fd()), mode)?;
            }
        }
        Ok(())
    }

    /// Watch with a fanotify queue without a limit (as root; set before
    /// watching starts). Nothing is then lost while the reader is slower
    /// than the host's writers, and the backlog waits in the kernel; it
    /// is for a reader that cannot pass a loss on (a FUSE mount replaying
    /// changes to inotify watchers). The backlog slows the host's writers
    /// while it lasts.
    pub fn set_watch_queue_unlimited(&self, on: bool) {
        self.unlimited_queue
            .store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// [`caps::Watch::watch_changes`] with a chosen source (fanotify is
    /// preferred where it can be used; see watch.rs). Reporting starts
    /// with [`caps::Watch::start`].
    pub fn watch_changes_with(&self, source: WatchSource, sink: Arc<dyn ChangeSink>) -> Result<()> {
        // Held across the scan of existing directories, so that one
        // registered meanwhile waits and is then covered too.
        let mut slot = self.watcher.lock();
        let unlimited = self
            .unlimited_queue
            .load(std::sync::atomic::Ordering::Relaxed);
        let w = watch::Watcher::new(
            source,
            unlimited,
            sink,
            self.table.clone(),
            self.proc_fd.clone(),
            self.own.clone(),
        )?;
        if let Some(key) = self.table.root_key() {
            tracing::info!("watching for changes with {}", w.source_of(key.0));
        }
        *slot = Some(w);
        Ok(())
    }

    /// What watches the export's root: "fanotify" or "inotify" (`None`
    /// before [`caps::Watch::watch_changes`]).
    pub fn watch_source(&self) -> Option<&'static str> {
        let dev = self.table.root_key()?.0;
        Some(self.watcher.lock().as_ref()?.source_of(dev))
    }
}

impl Drop for HostFs {
    fn drop(&mut self) {
        // Everything queued reaches the host before the export goes.
        self.behind.close();
    }
}

/// What a change needs of the host when it runs on our worker: the node
/// table and `/proc/self/fd`. The calls of ordinary and deferred changes
/// are these same functions.
struct Core {
    table: Arc<Table>,
    proc_fd: Arc<OwnedFd>,
    own: Arc<Own>,
}

impl Core {
    fn fd(&self, node: NodeId) -> Result<Arc<OwnedFd>> {
        Core::fd_of(&self.table, node)
    }

    fn fd_of(table: &Table, node: NodeId) -> Result<Arc<OwnedFd>> {
        match table.fd(node) {
            // A rename through us may have moved a name of the chain
            // while it was being opened: once more, with the new names.
            Err(Errno::ESTALE) => table.fd(node),
            r => r,
        }
    }

    /// Change `node`'s attributes; its descriptor comes back (to stat).
    fn setattr(&self, node: NodeId, set: &SetAttr) -> Result<Arc<OwnedFd>> {
        let fd = self.fd(node)?;
        let name = sys::fd_name(fd.as_raw_fd());
        if set.uid.is_some() || set.gid.is_some() {
            sys::fchownat_empty(
                fd.as_fd(),
                set.uid.unwrap_or(u32::MAX),
                set.gid.unwrap_or(u32::MAX),
            )?;
        }
        if let Some(mode) = set.mode {
            if sys::statx(fd.as_fd())?.is_symlink() {
                return Err(Errno::EOPNOTSUPP);
            }
            sys::fchmodat(self.proc_fd.as_fd(), &name, mode & 0o7777)?;
        }
        if let Some(size) = set.size {
            let file = reopen(&self.proc_fd, &fd, libc::O_WRONLY)?;
            sys::ftruncate(file.as_fd(), size)?;
        }
        if set.atime.is_some() || set.mtime.is_some() {
            sys::utimensat(
                self.proc_fd.as_fd(),
                &name,
                &[timespec(set.atime), timespec(set.mtime)],
            )?;
        }
        Ok(fd)
    }

    fn unlink(&self, parent: NodeId, name: &[u8], flags: i32) -> Result<()> {
        let _changing = self.own.changing();
        sys::unlinkat(self.fd(parent)?.as_fd(), name, flags)?;
        self.own.entry(parent.0, name, None);
        Ok(())
    }

    fn rename(
        &self,
        parent: NodeId,
        name: &[u8],
        newparent: NodeId,
        newname: &[u8],
        flags: u32,
    ) -> Result<()> {
        let (od, nd) = (self.fd(parent)?, self.fd(newparent)?);
        let _changing = self.own.changing();
        sys::renameat2(od.as_fd(), name, nd.as_fd(), newname, flags)?;
        // The moved files, known by identity for their reports (the vfs
        // moves their names).
        let to = self.moved(&nd, newname);
        // The old name names the other file after an exchange, and the
        // whiteout after a whiteout rename.
        let from = if flags & (walkfs_fsapi::RENAME_EXCHANGE | walkfs_fsapi::RENAME_WHITEOUT) != 0 {
            self.moved(&od, name)
        } else {
            None
        };
        self.own.entry(newparent.0, newname, to);
        self.own.entry(parent.0, name, from);
        Ok(())
    }

    /// The identity of the file now at `name` in the directory whose
    /// descriptor is `dfd`, which got there by a rename (`None` when it
    /// cannot be told: then no report is taken for ours). Its new name is
    /// the vfs's to hold.
    fn moved(&self, dfd: &OwnedFd, name: &[u8]) -> own::Named {
        let (_, key, born) = sys::identify_name(dfd.as_fd(), name).ok()?;
        Some((key, born))
    }
}

/// Re-open a held node for I/O, refusing anything but regular files and
/// directories.
fn reopen(proc_fd: &OwnedFd, fd: &OwnedFd, flags: i32) -> Result<OwnedFd> {
    let attr = sys::statx(fd.as_fd())?;
    match attr.file_type() {
        Some(FileType::Regular) | Some(FileType::Directory) => {}
        Some(FileType::Symlink) => return Err(Errno::ELOOP),
        _ => return Err(Errno::EACCES),
    }
    let name = sys::fd_name(fd.as_raw_fd());
    sys::openat(
        proc_fd.as_fd(),
        &name,
        flags & !(libc::O_CREAT | libc::O_EXCL),
        0,
    )
}

impl HostFs {
    fn list_plus(&self, node: NodeId) -> Result<Vec<DirPlus>> {
        let fd = self.fd(node)?;
        self.own.forget_dir(node.0);
        let dir = self.reopen(&fd, libc::O_RDONLY | libc::O_DIRECTORY)?;
        let watched = self.watcher.lock().is_some();
        let mut out = Vec::new();
        for (name, _, _) in sys::getdents(dir.as_fd())? {
            if name == b"." || name == b".." || check_name(&name).is_err() {
                continue;
            }
            // A name gone since the directory was read is skipped, as a
            // listing taken a moment later would.
            let id = match sys::identify_name(dir.as_fd(), &name) {
                Ok(id) => id,
                Err(Errno::ENOENT) => continue,
                Err(e) => return Err(e),
            };
            let entry = if watched && id.0.is_dir() {
                match lookup_fd(dir.as_fd(), &name) {
                    Ok(fd) => self.register(fd)?,
                    Err(Errno::ENOENT) => continue,
                    Err(e) => return Err(e),
                }
            } else {
                self.register_as(id, None)?
            };
            let link = if entry.attr.is_symlink() {
                sys::readlinkat(dir.as_fd(), &sys::cstr(&name)?).ok()
            } else {
                None
            };
            out.push(DirPlus { name, entry, link });
        }
        Ok(out)
    }
}

/// Resolve one name in `dir`: never following a link, never leaving it.
pub(crate) fn lookup_fd(dir: BorrowedFd, name: &[u8]) -> Result<OwnedFd> {
    check_name(name)?;
    sys::openat2(dir, name, LOOKUP_FLAGS, 0, RESOLVE)
}

/// Names the vfs hands down are single components; refuse anything else
/// even so, since this is the layer that touches the host.
fn check_name(name: &[u8]) -> Result<()> {
    if name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') || name.contains(&0)
    {
        return Err(Errno::EINVAL);
    }
    if name.len() > walkfs_fsapi::NAME_MAX {
        return Err(Errno::ENAMETOOLONG);
    }
    Ok(())
}

fn timespec(t: Option<TimeSet>) -> libc::timespec {
    match t {
        None => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_OMIT,
        },
        Some(TimeSet::Now) => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_NOW,
        },
        Some(TimeSet::At(ts)) => libc::timespec {
            tv_sec: ts.sec,
            tv_nsec: ts.nsec as i64,
        },
    }
}

impl FileSystem for HostFs {
    fn root(&self) -> NodeId {
        NodeId(ROOT)
    }

    fn kind(&self) -> &'static str {
        "hostfs"
    }

    fn attach_names(&self, names: Arc<dyn walkfs_fsapi::Names>) {
        self.table.attach_names(names);
    }

    fn lookup(&self, parent: NodeId, name: &[u8]) -> Result<Entry> {
        self.behind.settle(&[parent.0]);
        let dir = self.fd(parent)?;
        // The vfs learns the name anew, found or not (own.rs).
        self.own.forget_entry(parent.0, name);
        let fd = lookup_fd(dir.as_fd(), name)?;
        let mut entry = self.register(fd)?;
        // Found by a name that had nothing queued, a file that has (it has
        // another name): its attributes once its changes landed.
        if self.behind.queued(entry.node.0) {
            self.behind.settle(&[entry.node.0]);
            entry.attr = self.getattr(entry.node)?;
        }
        Ok(entry)
    }

    fn forget(&self, node: NodeId, count: u64) {
        if node.0 == ROOT {
            return;
        }
        self.behind.settle(&[node.0]);
        let mut nodes = self.table.nodes.write();
        let gone = match nodes.by_id.get_mut(&node.0) {
            Some(n) => {
                n.lookups = n.lookups.saturating_sub(count);
                n.lookups == 0
            }
            None => false,
        };
        if gone {
            nodes.remove(node.0);
            drop(nodes);
            self.table.drop_fd(node.0);
        }
    }

    fn getattr(&self, node: NodeId) -> Result<Attr> {
        self.behind.settle(&[node.0]);
        sys::statx(self.fd(node)?.as_fd())
    }

    fn setattr(&self, node: NodeId, set: &SetAttr) -> Result<Attr> {
        self.behind.settle(&[node.0]);
        let _changing = self.own.changing();
        let fd = self.core().setattr(node, set)?;
        let attr = sys::statx(fd.as_fd())?;
        self.own.inode(node.0, &attr);
        Ok(attr)
    }

    fn readlink(&self, node: NodeId) -> Result<Vec<u8>> {
        let fd = self.fd(node)?;
        sys::readlinkat_empty(fd.as_fd()).map_err(|e| {
            if e == Errno::ENOENT {
                Errno::EINVAL
            } else {
                e
            }
        })
    }

    fn open(&self, node: NodeId, flags: OpenFlags) -> Result<FileHandle> {
        self.behind.settle(&[node.0]);
        let fd = self.fd(node)?;
        // O_APPEND as asked: an append-only host file (chattr +a) opens
        // for writing only with it, and its writes land at the host's end.
        let keep = libc::O_ACCMODE | libc::O_TRUNC | libc::O_DIRECTORY | libc::O_APPEND;
        let file = self.reopen(&fd, flags.0 & keep)?;
        Ok(self.new_handle(file))
    }

    fn create(
        &self,
        parent: NodeId,
        name: &[u8],
        mode: u32,
        owner: Owner,
        flags: OpenFlags,
    ) -> Result<(Entry, FileHandle)> {
        check_name(name)?;
        self.behind.settle(&[parent.0]);
        let dir = self.fd(parent)?;
        let _changing = self.own.changing();
        let how = libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | (flags.0 & libc::O_ACCMODE);
        let file = sys::openat2(dir.as_fd(), name, how, mode & 0o7777, RESOLVE)?;
        let path = self.path_of(&file)?;
        self.settle_new(&path, Some(mode & 0o7777), owner)?;
        let entry = self.register_made(parent, name, path)?;
        Ok((entry, self.new_handle(file)))
    }

    fn tmpfile(
        &self,
        dir: NodeId,
        mode: u32,
        owner: Owner,
        flags: OpenFlags,
    ) -> Result<(Entry, FileHandle)> {
        self.behind.settle(&[dir.0]);
        let parent = self.fd(dir)?;
        let _changing = self.own.changing();
        // O_EXCL as asked: such a file may never be linked.
        let how = libc::O_TMPFILE | (flags.0 & (libc::O_ACCMODE | libc::O_EXCL));
        let file = sys::openat(parent.as_fd(), b".", how, mode & 0o7777)?;
        let path = self.path_of(&file)?;
        self.settle_new(&path, Some(mode & 0o7777), owner)?;
        // No name to record: the node is known by its identity only.
        let entry = self.register_as(sys::identify(path.as_fd())?, Some(path))?;
        self.own.inode(entry.node.0, &entry.attr);
        Ok((entry, self.new_handle(file)))
    }

    fn read(&self, node: NodeId, fh: FileHandle, off: u64, buf: &mut [u8]) -> Result<usize> {
        self.behind.settle(&[node.0]);
        sys::pread(self.handle(fh)?.as_fd(), buf, off)
    }

    fn write(&self, node: NodeId, fh: FileHandle, off: u64, data: &[u8]) -> Result<usize> {
        self.behind.settle(&[node.0]);
        sys::pwrite(self.handle(fh)?.as_fd(), data, off)
    }

    fn release(&self, _node: NodeId, fh: FileHandle) {
        self.locks.released(fh);
        // A queued write holds the descriptor until it ran.
        self.handles.lock().remove(&fh.0);
        if !self.ordered.load(Relaxed) {
            return;
        }
        let mut d = self.direct.lock();
        if let Some(node) = d.handles.remove(&fh.0) {
            if let Some(n) = d.nodes.get_mut(&node) {
                *n -= 1;
                if *n == 0 {
                    d.nodes.remove(&node);
                }
            }
        }
    }

    fn mkdir(&self, parent: NodeId, name: &[u8], mode: u32, owner: Owner) -> Result<Entry> {
        check_name(name)?;
        self.behind.settle(&[parent.0]);
        let dir = self.fd(parent)?;
        let _changing = self.own.changing();
        sys::mkdirat(dir.as_fd(), name, mode & 0o7777)?;
        let fd = lookup_fd(dir.as_fd(), name)?;
        self.settle_new(&fd, Some(mode & 0o7777), owner)?;
        self.register_made(parent, name, fd)
    }

    fn symlink(&self, parent: NodeId, name: &[u8], target: &[u8], owner: Owner) -> Result<Entry> {
        check_name(name)?;
        self.behind.settle(&[parent.0]);
        let dir = self.fd(parent)?;
        let _changing = self.own.changing();
        sys::symlinkat(target, dir.as_fd(), name)?;
        let fd = lookup_fd(dir.as_fd(), name)?;
        self.settle_new(&fd, None, owner)?;
        self.register_made(parent, name, fd)
    }

    fn mknod(
        &self,
        parent: NodeId,
        name: &[u8],
        mode: u32,
        rdev: u64,
        owner: Owner,
    ) -> Result<Entry> {
        check_name(name)?;
        // Only special files: a regular file made here would skip
        // create's O_EXCL|O_NOFOLLOW open. The node is never opened for
        // a client (open() refuses non-regular files).
        match mode & libc::S_IFMT {
            libc::S_IFIFO | libc::S_IFSOCK | libc::S_IFCHR | libc::S_IFBLK => {}
            _ => return Err(Errno::EINVAL),
        }
        self.behind.settle(&[parent.0]);
        let dir = self.fd(parent)?;
        let _changing = self.own.changing();
        sys::mknodat(dir.as_fd(), name, mode, rdev)?;
        let fd = lookup_fd(dir.as_fd(), name)?;
        self.settle_new(&fd, Some(mode & 0o7777), owner)?;
        self.register_made(parent, name, fd)
    }

    fn link(&self, node: NodeId, newparent: NodeId, newname: &[u8]) -> Result<Entry> {
        check_name(newname)?;
        self.behind.settle(&[node.0, newparent.0]);
        let fd = self.fd(node)?;
        let dir = self.fd(newparent)?;
        let _changing = self.own.changing();
        // AT_EMPTY_PATH needs CAP_DAC_READ_SEARCH; without it, link through
        // the /proc magic link of our own descriptor (same inode either way).
        match sys::linkat(fd.as_fd(), b"", dir.as_fd(), newname, libc::AT_EMPTY_PATH) {
            Err(Errno::ENOENT) | Err(Errno::EPERM) if !sys::statx(fd.as_fd())?.is_symlink() => {
                let name = sys::fd_name(fd.as_raw_fd());
                sys::linkat(
                    self.proc_fd.as_fd(),
                    &name,
                    dir.as_fd(),
                    newname,
                    libc::AT_SYMLINK_FOLLOW,
                )?
            }
            r => r?,
        }
        let new = lookup_fd(dir.as_fd(), newname)?;
        self.register_made(newparent, newname, new)
    }

    fn unlink(&self, parent: NodeId, name: &[u8]) -> Result<()> {
        check_name(name)?;
        self.behind.settle(&[parent.0]);
        self.core().unlink(parent, name, 0)
    }

    fn rmdir(&self, parent: NodeId, name: &[u8]) -> Result<()> {
        check_name(name)?;
        // The directory must be empty: the unlinks queued in it (keyed by
        // a node we do not know here) first.
        self.behind.settle_all();
        self.core().unlink(parent, name, libc::AT_REMOVEDIR)
    }

    fn rename(
        &self,
        parent: NodeId,
        name: &[u8],
        newparent: NodeId,
        newname: &[u8],
        flags: u32,
    ) -> Result<()> {
        check_name(name)?;
        check_name(newname)?;
        // A directory replaced must be empty, as for rmdir.
        self.behind.settle_all();
        self.core().rename(parent, name, newparent, newname, flags)
    }

    fn readdir(&self, node: NodeId) -> Result<Vec<DirEntry>> {
        self.behind.settle(&[node.0]);
        let fd = self.fd(node)?;
        self.own.forget_dir(node.0);
        let dir = self.reopen(&fd, libc::O_RDONLY | libc::O_DIRECTORY)?;
        let mut out = Vec::new();
        for (name, ino, dtype) in sys::getdents(dir.as_fd())? {
            let kind = match dtype {
                libc::DT_DIR => FileType::Directory,
                libc::DT_LNK => FileType::Symlink,
                libc::DT_CHR => FileType::CharDevice,
                libc::DT_BLK => FileType::BlockDevice,
                libc::DT_FIFO => FileType::Fifo,
                libc::DT_SOCK => FileType::Socket,
                _ => FileType::Regular,
            };
            out.push(DirEntry { name, ino, kind });
        }
        Ok(out)
    }

    fn statfs(&self, node: NodeId) -> Result<StatFs> {
        self.behind.settle_all();
        let st = sys::fstatfs(self.fd(node)?.as_fd())?;
        Ok(StatFs {
            fs_type: st.f_type,
            bsize: st.f_bsize as u64,
            blocks: st.f_blocks,
            bfree: st.f_bfree,
            bavail: st.f_bavail,
            files: st.f_files,
            ffree: st.f_ffree,
            namelen: st.f_namelen as u64,
            frsize: st.f_frsize as u64,
        })
    }

    /// Changes run behind their callers (behind.rs) only while the vfs
    /// writes back; otherwise each is carried out in its call.
    fn ordered(&self) -> Option<&dyn caps::Ordered> {
        self.ordered
            .load(Relaxed)
            .then_some(self as &dyn caps::Ordered)
    }

    fn listings(&self) -> Option<&dyn caps::Listings> {
        Some(self)
    }

    fn host_files(&self) -> Option<&dyn caps::HostFiles> {
        Some(self)
    }

    fn xattrs(&self) -> Option<&dyn caps::Xattrs> {
        Some(self)
    }

    fn export(&self) -> Option<&dyn caps::Export> {
        self.export_fd().map(|_| self as &dyn caps::Export)
    }

    fn space(&self) -> Option<&dyn caps::Space> {
        Some(self)
    }

    fn locks(&self) -> Option<&dyn caps::Locks> {
        Some(self)
    }

    fn watch(&self) -> Option<&dyn caps::Watch> {
        Some(self)
    }
}

impl caps::Ordered for HostFs {
    /// Queue the change for our worker (behind.rs), keyed by the nodes it
    /// touches. A truncation, and a change of times while the kernel may
    /// write the file directly, run now: a direct write must not be
    /// overtaken by them.
    fn submit(&self, op: Deferred<'_>, done: Done) -> Result<()> {
        if !self.ordered.load(Relaxed) {
            // Asked for while the vfs stopped writing back.
            walkfs_fsapi::run_inline(self, op, done);
            return Ok(());
        }
        let core = self.core();
        match op {
            Deferred::Write {
                node,
                fh,
                off,
                data,
            } => {
                let file = self.handle(fh)?;
                let data = data.to_vec();
                let run = move || match sys::pwrite(file.as_fd(), &data, off) {
                    Ok(n) if n < data.len() => Err(Errno::ENOSPC),
                    r => r.map(drop),
                };
                self.behind.push([node.0, 0, 0], Box::new(run), done)
            }
            Deferred::SetAttr { node, set }
                if set.size.is_none()
                    && (set.atime.is_none() && set.mtime.is_none() || !self.direct_node(node)) =>
            {
                let run = move || core.setattr(node, &set).map(drop);
                self.behind.push([node.0, 0, 0], Box::new(run), done)
            }
            Deferred::Unlink { parent, name, node } => {
                check_name(name)?;
                let name = name.to_vec();
                let run = move || core.unlink(parent, &name, 0);
                self.behind.push([parent.0, node.0, 0], Box::new(run), done)
            }
            Deferred::Rmdir { parent, name, node } => {
                check_name(name)?;
                let name = name.to_vec();
                let run = move || core.unlink(parent, &name, libc::AT_REMOVEDIR);
                self.behind.push([parent.0, node.0, 0], Box::new(run), done)
            }
            Deferred::Rename {
                parent,
                name,
                newparent,
                newname,
                node,
            } => {
                check_name(name)?;
                check_name(newname)?;
                let (name, newname) = (name.to_vec(), newname.to_vec());
                let run = move || core.rename(parent, &name, newparent, &newname, 0);
                self.behind
                    .push([parent.0, newparent.0, node.0], Box::new(run), done)
            }
            // The ordinary call waits for the node's queued changes.
            op => {
                walkfs_fsapi::run_inline(self, op, done);
                Ok(())
            }
        }
    }
}

impl caps::Listings for HostFs {
    /// The entries with their attributes, each stat'ed by name in the
    /// directory (no descriptor opened for it, unless it is a directory
    /// that must be watched): one call where a lookup of each would cost
    /// an open and a stat.
    fn readdir_plus(&self, node: NodeId) -> Option<Result<Vec<DirPlus>>> {
        // The entries' attributes too: everything queued first.
        self.behind.settle_all();
        Some(self.list_plus(node))
    }
}

impl caps::HostFiles for HostFs {
    fn host_file(&self, node: NodeId, fh: FileHandle) -> Option<Arc<OwnedFd>> {
        self.behind.settle(&[node.0]);
        let file = self.handle(fh).ok()?;
        // Only changes run behind need to know (submit): no lock otherwise.
        if self.ordered.load(Relaxed) {
            let mut d = self.direct.lock();
            if d.handles.insert(fh.0, node.0).is_none() {
                *d.nodes.entry(node.0).or_insert(0) += 1;
            }
        }
        Some(file)
    }

    fn node_fd(&self, node: NodeId) -> Option<Arc<OwnedFd>> {
        self.fd(node).ok()
    }
}

impl caps::Watch for HostFs {
    fn watch_changes(&self, sink: Arc<dyn ChangeSink>) -> Result<()> {
        self.watch_changes_with(WatchSource::Auto, sink)
    }

    fn start(&self) -> Result<()> {
        match self.watcher.lock().as_ref() {
            Some(w) => w.start(),
            None => Err(Errno::EINVAL),
        }
    }

    /// The host's queued events are read and reported now (watch.rs).
    fn barrier(&self) {
        let w = self.watcher.lock().clone();
        if let Some(w) = w {
            w.barrier();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use walkfs_fsapi::caps::{Listings, Watch};
    use walkfs_fsapi::Change;
    use walkfs_fsapi::Name;

    #[test]
    fn lookup_never_follows_or_escapes() {
        let tmp = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink("/etc", tmp.path().join("out")).unwrap();
        std::fs::write(tmp.path().join("f"), b"x").unwrap();
        let fs = HostFs::new(tmp.path()).unwrap();
        let root = fs.root();
        // The link itself is found, not what it points to.
        assert!(fs.lookup(root, b"out").unwrap().attr.is_symlink());
        assert_eq!(
            fs.readlink(fs.lookup(root, b"out").unwrap().node).unwrap(),
            b"/etc"
        );
        assert_eq!(fs.lookup(root, b".."), Err(Errno::EINVAL));
        assert_eq!(fs.lookup(root, b"a/b"), Err(Errno::EINVAL));
        // Hard links share a node.
        let f = fs.lookup(root, b"f").unwrap();
        let l = fs.link(f.node, root, b"g").unwrap();
        assert_eq!(f.node, l.node);
        assert_eq!(l.attr.nlink, 2);
    }

    /// A listing with attributes matches what the host says of each entry
    /// (lstat), carries symlink bodies, opens no descriptor per entry, and
    /// gives nodes that work afterwards (opened by name when used).
    #[test]
    fn listing_with_attributes_matches_the_host() {
        use std::os::unix::fs::MetadataExt;
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("f"), b"abc").unwrap();
        std::fs::create_dir(tmp.path().join("d")).unwrap();
        std::fs::write(tmp.path().join("d/inner"), b"in").unwrap();
        std::os::unix::fs::symlink("/etc", tmp.path().join("l")).unwrap();
        let fs = HostFs::new(tmp.path()).unwrap();
        let root = fs.root();
        let fds_before = fs.table.stats().cached;
        let mut got = fs.readdir_plus(root).unwrap().unwrap();
        got.sort_by(|a, b| a.name.cmp(&b.name));
        let names: Vec<&[u8]> = got.iter().map(|p| &p.name[..]).collect();
        assert_eq!(names, [&b"d"[..], b"f", b"l"]);
        assert_eq!(
            fs.table.stats().cached,
            fds_before,
            "a descriptor per entry"
        );
        for p in &got {
            let md =
                std::fs::symlink_metadata(tmp.path().join(std::str::from_utf8(&p.name).unwrap()))
                    .unwrap();
            let a = &p.entry.attr;
            assert_eq!((a.ino, a.mode, a.size), (md.ino(), md.mode(), md.size()));
            assert_eq!(p.link.as_deref(), a.is_symlink().then_some(&b"/etc"[..]));
        }
        // The listed directory's node is usable: a lookup in it opens it
        // by the name the vfs would hold for it (here: the listing's, as
        // the vfs caches it); the listed file's node is the one a lookup
        // finds.
        let held: HashMap<u64, Name> = got
            .iter()
            .map(|p| (p.entry.node.0, Name::from(&p.name[..])))
            .collect();
        fs.attach_names(Arc::new(InRoot(held)));
        let d = got[0].entry.node;
        assert_eq!(fs.lookup(d, b"inner").unwrap().attr.size, 2);
        assert_eq!(fs.lookup(root, b"f").unwrap().node, got[1].entry.node);
        assert_eq!(fs.getattr(got[1].entry.node).unwrap().size, 3);
    }

    /// Names of nodes right under the root, as a vfs holding them would
    /// give them.
    struct InRoot(HashMap<u64, Name>);
    impl walkfs_fsapi::Names for InRoot {
        fn path_of(&self, node: NodeId) -> Option<Vec<(NodeId, Name)>> {
            Some(vec![(node, self.0.get(&node.0)?.clone())])
        }
    }

    struct Collect(std::sync::mpsc::Sender<Change>);
    impl ChangeSink for Collect {
        fn changed(&self, changes: &[Change]) {
            for c in changes {
                let _ = self.0.send(c.clone());
            }
        }
    }

    /// Wait (up to 5 s) for a change matching `want`.
    fn expect(rx: &std::sync::mpsc::Receiver<Change>, want: impl Fn(&Change) -> bool) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
            match rx.recv_timeout(left) {
                Ok(c) if want(&c) => return,
                Ok(_) => {}
                Err(_) => break,
            }
        }
        panic!("change not reported");
    }

    #[test]
    fn host_changes_are_reported_by_name_and_inode() {
        host_changes_reported(WatchSource::Inotify);
        // fanotify needs CAP_SYS_ADMIN: as root it is what Auto picks.
        host_changes_reported(WatchSource::Auto);
    }

    fn host_changes_reported(source: WatchSource) {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir(tmp.path().join("d")).unwrap();
        std::fs::write(tmp.path().join("d/f"), b"x").unwrap();
        let fs = HostFs::new(tmp.path()).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        // A directory known before watching starts, and one after.
        let d = fs.lookup(fs.root(), b"d").unwrap();
        fs.watch_changes_with(source, Arc::new(Collect(tx)))
            .unwrap();
        fs.start().unwrap();
        let want = match source {
            WatchSource::Inotify => "inotify",
            WatchSource::Auto if sys::geteuid() == 0 => "fanotify",
            WatchSource::Auto => "inotify",
        };
        assert_eq!(fs.watch_source(), Some(want));
        std::fs::create_dir(tmp.path().join("e")).unwrap();
        let e = fs.lookup(fs.root(), b"e").unwrap();
        let f = fs.lookup(d.node, b"f").unwrap();
        let entry = |dir: NodeId, n: &'static [u8]| move |c: &Change| matches!(c, Change::Entry { dir: d, name, .. } if *d == dir && name == n);
        std::fs::write(tmp.path().join("e/new"), b"").unwrap();
        expect(&rx, entry(e.node, b"new"));
        std::fs::rename(tmp.path().join("e/new"), tmp.path().join("d/moved")).unwrap();
        expect(&rx, entry(e.node, b"new"));
        expect(&rx, entry(d.node, b"moved"));
        std::fs::write(tmp.path().join("d/f"), b"longer").unwrap();
        let inode = |node: NodeId, ino: u64| move |c: &Change| matches!(c, Change::Inode { node: n, ino: i, .. } if *n == node && *i == ino);
        expect(&rx, inode(f.node, f.attr.ino));
        std::os::unix::fs::symlink("t", tmp.path().join("d/l")).unwrap();
        expect(&rx, entry(d.node, b"l"));
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(tmp.path().join("e"), std::fs::Permissions::from_mode(0o700))
            .unwrap();
        expect(
            &rx,
            |c| matches!(c, Change::Inode { ino, .. } if *ino == e.attr.ino),
        );
        std::fs::remove_file(tmp.path().join("d/f")).unwrap();
        expect(&rx, entry(d.node, b"f"));
    }

    #[test]
    fn special_files_are_never_opened() {
        let tmp = tempfile::tempdir().unwrap();
        let fifo =
            std::ffi::CString::new(tmp.path().join("p").as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: valid C string.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o666) }, 0);
        let fs = HostFs::new(tmp.path()).unwrap();
        let p = fs.lookup(fs.root(), b"p").unwrap();
        // Opening a fifo for reading would block forever; we refuse instead.
        assert_eq!(
            fs.open(p.node, OpenFlags(libc::O_RDONLY)),
            Err(Errno::EACCES)
        );
    }

    #[test]
    fn create_sets_exact_mode_and_owner() {
        let tmp = tempfile::tempdir().unwrap();
        let fs = HostFs::new(tmp.path()).unwrap();
        let owner = Owner {
            uid: sys::geteuid(),
            gid: sys::getegid(),
        };
        let (e, fh) = fs
            .create(fs.root(), b"n", 0o666, owner, OpenFlags(libc::O_RDWR))
            .unwrap();
        assert_eq!(e.attr.mode & 0o7777, 0o666);
        assert_eq!(fs.write(e.node, fh, 0, b"abc").unwrap(), 3);
        let mut buf = [0u8; 3];
        assert_eq!(fs.read(e.node, fh, 0, &mut buf).unwrap(), 3);
        assert_eq!(&buf, b"abc");
        fs.release(e.node, fh);
    }
}
