//! Seeing changes made behind our back, and reporting them as [`Change`]s
//! to the sink the vfs gave [`caps::Watch::watch_changes`], from a thread
//! of our own.
//!
//! Two sources:
//! - **fanotify** (where we may: `CAP_SYS_ADMIN`, Linux 5.9): one mark on
//!   the whole file system of the export, reporting each event as the
//!   directory's file handle and the name. No per-directory watch, so no
//!   watch limit; a directory is known by its handle, recorded when hostfs
//!   registers it. Events of directories we never registered (the rest of
//!   the file system) are dropped on arrival.
//! - **inotify** otherwise (and for a file system fanotify cannot mark,
//!   e.g. one met after the sandbox dropped privileges): a watch on every
//!   directory as hostfs registers it. When the per-user watch limit is
//!   reached the sink is told [`Change::Degraded`].
//!
//! Either way, a directory is covered before any name in it can have been
//! cached above us, so no cached name goes unwatched; coverage outlives
//! the node (a remote client may still cache a directory the server has
//! forgotten). What a directory's events say: the entries of the directory
//! (create, delete, rename from/to: [`Change::Entry`]), and the attributes
//! and data of the files in it (write, truncate, chmod, chown:
//! [`Change::Inode`]). A queue overflow is [`Change::All`].
//!
//! [`caps::Watch::watch_changes`]: walkfs_fsapi::caps::Watch::watch_changes

use std::collections::{HashMap, HashSet};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use walkfs_fsapi::{Change, ChangeSink, Errno, How, NodeId, Result, Seen, What};

use crate::own::Own;
use crate::sys;
use crate::table::Table;

/// Which source to use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WatchSource {
    /// fanotify where it can mark the file system, inotify otherwise.
    Auto,
    /// inotify only.
    Inotify,
}

const IN_MASK: u32 = libc::IN_CREATE
    | libc::IN_DELETE
    | libc::IN_MOVED_FROM
    | libc::IN_MOVED_TO
    | libc::IN_MODIFY
    | libc::IN_ATTRIB
    | libc::IN_ONLYDIR
    | libc::IN_EXCL_UNLINK;
const IN_ENTRY: u32 = libc::IN_CREATE | libc::IN_DELETE | libc::IN_MOVED_FROM | libc::IN_MOVED_TO;
const IN_DATA: u32 = libc::IN_MODIFY | libc::IN_ATTRIB;

const FAN_MASK: u64 = libc::FAN_CREATE
    | libc::FAN_DELETE
    | libc::FAN_MOVED_FROM
    | libc::FAN_MOVED_TO
    | libc::FAN_MODIFY
    | libc::FAN_ATTRIB
    | libc::FAN_ONDIR;
const FAN_ENTRY: u64 =
    libc::FAN_CREATE | libc::FAN_DELETE | libc::FAN_MOVED_FROM | libc::FAN_MOVED_TO;
const FAN_DATA: u64 = libc::FAN_MODIFY | libc::FAN_ATTRIB;

/// How long the reading thread lets a burst of events gather in the
/// host's queue before it reads them. The host merges the events of one
/// object while they wait (a file's create, writes and attribute changes
/// become one or two), so each is checked once, after the burst: a file
/// this mount is making is then found as its last change left it, ours,
/// instead of halfway and foreign (which costs an invalidation and a
/// re-read in the cache above). Reports reach the cache this much later;
/// a caller that must see every change first (a lock grant, a settle) reads
/// the queue itself ([`Watcher::barrier`]) and does not wait for it.
const GATHER: std::time::Duration = std::time::Duration::from_millis(2);

/// Adding an inotify watch takes a path: `/proc/self/fd/N` relative to
/// the working directory, which is the process's ([`sys::CWD`]).
use sys::CWD;

/// What an event says about a name in a watched directory.
#[derive(Clone, Copy)]
enum Kind {
    /// The name appeared, went, or names another file.
    Entry,
    /// The data or attributes of what the name names changed.
    Data,
}

/// The event bits, in the order their events happen when merged into
/// one (a create before the write after it, a name's arrival before its
/// departure), with what each is.
const BITS: [(u32, u64, Kind, What); 6] = [
    (
        libc::IN_CREATE,
        libc::FAN_CREATE,
        Kind::Entry,
        What::Created,
    ),
    (
        libc::IN_MOVED_TO,
        libc::FAN_MOVED_TO,
        Kind::Entry,
        What::MovedTo,
    ),
    (
        libc::IN_MODIFY,
        libc::FAN_MODIFY,
        Kind::Data,
        What::Modified,
    ),
    (libc::IN_ATTRIB, libc::FAN_ATTRIB, Kind::Data, What::Attrib),
    (
        libc::IN_MOVED_FROM,
        libc::FAN_MOVED_FROM,
        Kind::Entry,
        What::MovedFrom,
    ),
    (
        libc::IN_DELETE,
        libc::FAN_DELETE,
        Kind::Entry,
        What::Deleted,
    ),
];

impl Kind {
    /// What an event mask says: one (kind, what) per event bit set.
    /// fanotify merges an unread event into a later one on the same name,
    /// masks or'ed (a create and the write after it arrive as one), and
    /// every half must be reported.
    fn of_inotify(mask: u32) -> impl Iterator<Item = (Kind, What)> {
        BITS.into_iter()
            .filter(move |b| mask & b.0 != 0)
            .map(|b| (b.2, b.3))
    }
    fn of_fanotify(mask: u64) -> impl Iterator<Item = (Kind, What)> {
        BITS.into_iter()
            .filter(move |b| mask & b.1 != 0)
            .map(|b| (b.2, b.3))
    }
}

struct Fan {
    fd: OwnedFd,
    /// Devices whose file system is marked, and those that could not be.
    marked: Mutex<HashSet<u64>>,
    refused: Mutex<HashSet<u64>>,
    /// File handle (as fanotify reports it) -> directory (dev, ino).
    handles: Mutex<HashMap<Vec<u8>, (u64, u64)>>,
}

pub(crate) struct Watcher {
    inotify: OwnedFd,
    fan: Option<Fan>,
    /// inotify watch descriptor -> the watched directory's (dev, ino).
    wds: Mutex<HashMap<i32, (u64, u64)>>,
    watched: Mutex<HashSet<(u64, u64)>>,
    degraded: AtomicBool,
    started: AtomicBool,
    sink: Arc<dyn ChangeSink>,
    table: Arc<Table>,
    proc_fd: Arc<OwnedFd>,
    /// What hostfs's own calls left behind: their reports are marked.
    own: Arc<Own>,
    /// Held from a read of the queues to the end of its report: a
    /// [`Watcher::barrier`] that takes it knows every event read before
    /// it was reported.
    reading: Mutex<()>,
}

impl Watcher {
    pub fn new(
        source: WatchSource,
        unlimited: bool,
        sink: Arc<dyn ChangeSink>,
        table: Arc<Table>,
        proc_fd: Arc<OwnedFd>,
        own: Arc<Own>,
    ) -> Result<Arc<Watcher>> {
        let fan = match source {
            WatchSource::Auto => sys::fanotify_init(unlimited).ok().map(|fd| Fan {
                fd,
                marked: Mutex::new(HashSet::new()),
                refused: Mutex::new(HashSet::new()),
                handles: Mutex::new(HashMap::new()),
            }),
            WatchSource::Inotify => None,
        };
        let w = Arc::new(Watcher {
            inotify: sys::inotify_init()?,
            fan,
            wds: Mutex::new(HashMap::new()),
            watched: Mutex::new(HashSet::new()),
            degraded: AtomicBool::new(false),
            started: AtomicBool::new(false),
            sink,
            table,
            proc_fd,
            own,
            reading: Mutex::new(()),
        });
        let dirs: Vec<(u64, (u64, u64))> = w
            .table
            .nodes
            .read()
            .by_id
            .iter()
            .filter(|(_, n)| n.is_dir)
            .map(|(&id, n)| (id, n.key))
            .collect();
        for (id, key) in dirs {
            // A directory that can no longer be opened by its name went:
            // nothing to watch there.
            if let Ok(fd) = w.table.fd(NodeId(id)) {
                w.add(&fd, key);
            }
        }
        Ok(w)
    }

    /// Start reading events, on a thread of our own (once).
    pub fn start(self: &Arc<Self>) -> Result<()> {
        if self.started.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let thread = self.clone();
        std::thread::Builder::new()
            .name("walkfs-watch".into())
            .spawn(move || thread.run())
            .map(drop)
            .map_err(Errno::from)
    }

    /// Which source covers the export's root (for logs and tests).
    pub fn source_of(&self, dev: u64) -> &'static str {
        match &self.fan {
            Some(f) if f.marked.lock().contains(&dev) => "fanotify",
            _ => "inotify",
        }
    }

    /// Cover the directory `fd` (an `O_PATH` descriptor) is.
    pub fn add(&self, fd: &OwnedFd, key: (u64, u64)) {
        if self.add_fan(fd, key) {
            return;
        }
        if !self.watched.lock().insert(key) {
            return;
        }
        let res = {
            let _cwd = CWD.lock();
            sys::fchdir(self.proc_fd.as_fd()).and_then(|()| {
                sys::inotify_add_watch(self.inotify.as_fd(), &sys::fd_name(fd.as_raw_fd()), IN_MASK)
            })
        };
        match res {
            Ok(wd) => {
                self.wds.lock().insert(wd, key);
            }
            Err(e) => {
                self.watched.lock().remove(&key);
                // ENOSPC: the per-user watch limit. Anything else (the
                // directory just went) needs no watch.
                if e == Errno::ENOSPC && !self.degraded.swap(true, Ordering::AcqRel) {
                    tracing::warn!(
                        "inotify watch limit reached (fs.inotify.max_user_watches): \
                         changes on the host may go unseen; clients revalidate"
                    );
                    self.own.clear();
                    self.sink.changed(&[Change::Degraded]);
                }
            }
        }
    }

    /// Cover a directory through fanotify: its file system marked (once),
    /// its handle recorded (every time: a new directory may reuse an old
    /// one's inode number, never its handle).
    fn add_fan(&self, fd: &OwnedFd, key: (u64, u64)) -> bool {
        let Some(fan) = &self.fan else { return false };
        let dev = key.0;
        if fan.refused.lock().contains(&dev) {
            return false;
        }
        if !fan.marked.lock().contains(&dev) {
            let r = sys::fanotify_mark_filesystem(
                fan.fd.as_fd(),
                FAN_MASK,
                self.proc_fd.as_fd(),
                &sys::fd_name(fd.as_raw_fd()),
            );
            if let Err(e) = r {
                tracing::info!("fanotify cannot mark device {dev:#x} ({e}): inotify there");
                fan.refused.lock().insert(dev);
                return false;
            }
            fan.marked.lock().insert(dev);
        }
        match sys::handle_of(fd.as_fd()) {
            Ok(h) => {
                fan.handles.lock().insert(h, key);
                true
            }
            Err(_) => false,
        }
    }

    fn run(self: Arc<Self>) {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            // The file system holds the other reference: when it is gone,
            // so is the reason to watch.
            if Arc::strong_count(&self) == 1 {
                return;
            }
            let mut fds: Vec<BorrowedFd> = vec![self.inotify.as_fd()];
            if let Some(f) = &self.fan {
                fds.push(f.fd.as_fd());
            }
            let ready = match sys::poll_in(&fds, 500) {
                Ok(r) => r,
                Err(e) => {
                    tracing::error!("watch poll: {e}");
                    return;
                }
            };
            if ready.iter().any(|&r| r) {
                std::thread::sleep(GATHER);
            }
            for (i, fd) in fds.iter().enumerate() {
                if !ready[i] {
                    continue;
                }
                let _reading = self.reading.lock();
                match self.read_one(i, *fd, &mut buf) {
                    Ok(_) | Err(Errno::EAGAIN) | Err(Errno::EINTR) => {}
                    Err(e) => {
                        tracing::error!("watch read: {e}");
                        return;
                    }
                }
            }
        }
    }

    /// Read queue `i` (0: inotify, 1: fanotify) once and report what it
    /// held; whether there was anything.
    fn read_one(&self, i: usize, fd: BorrowedFd, buf: &mut [u8]) -> Result<bool> {
        let n = sys::read(fd, buf)?;
        let changes = if i == 0 {
            self.inotify_changes(&buf[..n])
        } else {
            self.fanotify_changes(&buf[..n])
        };
        if !changes.is_empty() {
            self.sink.changed(&changes);
        }
        Ok(n > 0)
    }

    /// Report every event the host has queued now, on the caller's
    /// thread: once this returns, each change made before the call has
    /// been reported (the reporting thread's read in progress included:
    /// it holds `reading` until its report is done).
    pub fn barrier(&self) {
        let _reading = self.reading.lock();
        let mut buf = vec![0u8; 64 * 1024];
        let mut fds: Vec<BorrowedFd> = vec![self.inotify.as_fd()];
        if let Some(f) = &self.fan {
            fds.push(f.fd.as_fd());
        }
        for (i, fd) in fds.into_iter().enumerate() {
            // Bounded: a host writing without pause must not hold the
            // caller for ever.
            for _ in 0..64 {
                match self.read_one(i, fd, &mut buf) {
                    Ok(true) | Err(Errno::EINTR) => continue,
                    _ => break,
                }
            }
        }
    }

    /// One read's worth of inotify events, as changes, each once.
    fn inotify_changes(&self, mut buf: &[u8]) -> Vec<Change> {
        let mut out = Batch::default();
        const HEADER: usize = 16;
        while buf.len() >= HEADER {
            let wd = word(buf, 0) as i32;
            let mask = word(buf, 4);
            let cookie = word(buf, 8);
            let len = word(buf, 12) as usize;
            let Some(raw) = buf.get(HEADER..HEADER + len) else {
                break;
            };
            let name = &raw[..raw.iter().position(|&b| b == 0).unwrap_or(len)];
            buf = &buf[HEADER + len..];
            if mask & libc::IN_Q_OVERFLOW != 0 {
                self.own.clear();
                out.push(Change::All);
                continue;
            }
            if mask & libc::IN_IGNORED != 0 {
                if let Some(key) = self.wds.lock().remove(&wd) {
                    self.watched.lock().remove(&key);
                }
                continue;
            }
            let Some(key) = self.wds.lock().get(&wd).copied() else {
                continue;
            };
            let is_dir = mask & libc::IN_ISDIR != 0;
            for (kind, what) in Kind::of_inotify(mask & (IN_ENTRY | IN_DATA)) {
                let how = How {
                    what,
                    is_dir,
                    cookie,
                    own: false,
                };
                self.dir_event(key, kind, how, name, &mut out);
            }
        }
        out.changes
    }

    /// One read's worth of fanotify events (`FAN_REPORT_DFID_NAME`).
    fn fanotify_changes(&self, mut buf: &[u8]) -> Vec<Change> {
        let mut out = Batch::default();
        let Some(fan) = &self.fan else {
            return out.changes;
        };
        // struct fanotify_event_metadata: event_len u32, vers u8, reserved
        // u8, metadata_len u16, mask u64, fd i32, pid i32.
        while buf.len() >= 24 {
            let event_len = word(buf, 0) as usize;
            let meta_len = u16::from_ne_bytes([buf[6], buf[7]]) as usize;
            let mask = u64::from(word(buf, 8)) | u64::from(word(buf, 12)) << 32;
            let Some(event) = buf.get(..event_len).filter(|_| event_len >= meta_len) else {
                break;
            };
            buf = &buf[event_len..];
            if mask & libc::FAN_Q_OVERFLOW != 0 {
                self.own.clear();
                out.push(Change::All);
                continue;
            }
            let kinds: Vec<(Kind, What)> =
                Kind::of_fanotify(mask & (FAN_ENTRY | FAN_DATA)).collect();
            if kinds.is_empty() {
                continue;
            }
            let is_dir = mask & libc::FAN_ONDIR != 0;
            // Info records: type u8, pad u8, len u16; a DFID_NAME one then
            // has fsid[8], handle_bytes u32, handle_type i32, the handle,
            // and the name, NUL-terminated.
            let mut info = &event[meta_len..];
            while info.len() >= 4 {
                let ty = info[0];
                let len = u16::from_ne_bytes([info[2], info[3]]) as usize;
                let Some(rec) = info.get(..len).filter(|_| len >= 4) else {
                    break;
                };
                info = &info[len..];
                if ty != libc::FAN_EVENT_INFO_TYPE_DFID_NAME || rec.len() < 20 {
                    continue;
                }
                let hb = word(rec, 12) as usize;
                let kind_of_handle = word(rec, 16) as i32;
                let Some(handle) = rec.get(20..20 + hb) else {
                    continue;
                };
                let key = sys::handle_key(&rec[4..12], kind_of_handle, handle);
                let Some(dir) = fan.handles.lock().get(&key).copied() else {
                    continue;
                };
                let name = &rec[20 + hb..];
                let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
                // An event on the directory itself is named ".".
                let name: &[u8] = if name == b"." { b"" } else { name };
                for &(kind, what) in &kinds {
                    // fanotify pairs no renames: the halves come in order,
                    // unpaired (cookie 0).
                    let how = How {
                        what,
                        is_dir,
                        cookie: 0,
                        own: false,
                    };
                    self.dir_event(dir, kind, how, name, &mut out);
                }
            }
        }
        out.changes
    }

    /// An event on `name` in the directory `dir` (or on the directory
    /// itself when `name` is empty).
    fn dir_event(&self, dir: (u64, u64), kind: Kind, how: How, name: &[u8], out: &mut Batch) {
        // No change of ours is between its host call and its record while
        // this report is checked (own.rs); held for this event only, so a
        // change waits at most one check.
        let _gate = self.own.checking();
        let node = self.table.nodes.read().find(dir).unwrap_or(0);
        if name.is_empty() {
            if let Kind::Data = kind {
                // Ours when the directory still has the attributes our
                // last change of them left.
                let own = node != 0
                    && self.own.has_inode(node)
                    && self
                        .table
                        .fd(NodeId(node))
                        .and_then(|d| sys::statx(d.as_fd()))
                        .is_ok_and(|a| self.own.inode_is(node, &a));
                if !own {
                    self.own.forget_inode(node);
                }
                out.push(Change::Inode {
                    node: NodeId(node),
                    ino: dir.1,
                    how: How { own, ..how },
                    at: None,
                });
            }
            return;
        }
        let dfd = self.table.fd(NodeId(node)).ok();
        let entry = |own: bool| Change::Entry {
            dir: NodeId(node),
            dir_ino: dir.1,
            name: name.to_vec(),
            how: How { own, ..how },
        };
        if let Kind::Entry = kind {
            // Ours when the name still names what our last change of it
            // left there (own.rs).
            let own = node != 0
                && self.own.entry_was(node, name).is_some()
                && dfd
                    .as_ref()
                    .is_some_and(|d| match sys::identify_name(d.as_fd(), name) {
                        Ok((_, key, born)) => self.own.entry_is(node, name, Some((key, born))),
                        Err(Errno::ENOENT) => self.own.entry_is(node, name, None),
                        Err(_) => false,
                    });
            if !own {
                self.own.forget_entry(node, name);
            }
            out.push(entry(own));
            return;
        }
        // Data or attributes of a child: name the inode (a hard link
        // elsewhere shares it). When it cannot be found any more, the name
        // changed too and an entry event follows; drop the name now anyway.
        let child = dfd
            .as_ref()
            .and_then(|d| sys::identify_name(d.as_fd(), name).ok());
        match child {
            Some((attr, (dev, ino), _)) => {
                let child = self.table.nodes.read().find((dev, ino)).unwrap_or(0);
                let own = child != 0 && self.own.inode_is(child, &attr);
                if !own {
                    self.own.forget_inode(child);
                }
                out.push(Change::Inode {
                    node: NodeId(child),
                    ino,
                    how: How { own, ..how },
                    at: Some(Seen {
                        dir: NodeId(node),
                        dir_ino: dir.1,
                        name: name.to_vec(),
                    }),
                })
            }
            None => {
                // Gone since (read after a burst gathered, a file this
                // mount made and then moved or removed): the event of its
                // going is in the queue too. Ours when our last change of
                // the name left it absent.
                let own = node != 0 && dfd.is_some() && self.own.entry_is(node, name, None);
                if !own {
                    self.own.forget_entry(node, name);
                }
                out.push(entry(own))
            }
        }
    }
}

/// The changes of one read, each once, in order.
#[derive(Default)]
struct Batch {
    changes: Vec<Change>,
    seen: HashSet<Change>,
}

impl Batch {
    fn push(&mut self, c: Change) {
        if self.seen.insert(c.clone()) {
            self.changes.push(c);
        }
    }
}

fn word(b: &[u8], i: usize) -> u32 {
    u32::from_ne_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}
