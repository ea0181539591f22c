//! Seeing changes made behind our back: an inotify watch on every directory
//! hostfs has registered, read by a thread of its own that turns events
//! into [`Change`]s for the sink the vfs gave [`FileSystem::watch_changes`].
//!
//! Why inotify: it needs no privilege and reports names, which is what a
//! dentry cache must drop. (fanotify's directory-entry events need
//! `CAP_SYS_ADMIN` and give the same information for our purpose.)
//!
//! What a watch covers: the entries of one directory (create, delete,
//! rename from/to) and the attributes and data of the files in it (write,
//! truncate, chmod, chown). A directory is watched as soon as hostfs
//! registers it, before any name in it can have been cached above us, so
//! no cached name is ever unwatched. Watches outlive the node (a remote
//! client may still cache a directory the server has forgotten); they end
//! when the directory is removed (`IN_IGNORED`).
//!
//! When the kernel's watch limit is reached the sink is told
//! [`Change::Degraded`]: from then on some changes go unseen and the caches
//! above must revalidate. A queue overflow is [`Change::All`].
//!
//! [`FileSystem::watch_changes`]: walkfs_fsapi::FileSystem::watch_changes

use std::collections::{HashMap, HashSet};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use walkfs_fsapi::{Change, ChangeSink, NodeId, Result};

use crate::sys;
use crate::Nodes;

/// What a watch is interested in.
const MASK: u32 = libc::IN_CREATE
    | libc::IN_DELETE
    | libc::IN_MOVED_FROM
    | libc::IN_MOVED_TO
    | libc::IN_MODIFY
    | libc::IN_ATTRIB
    | libc::IN_ONLYDIR
    | libc::IN_EXCL_UNLINK;
const ENTRY_EVENTS: u32 =
    libc::IN_CREATE | libc::IN_DELETE | libc::IN_MOVED_FROM | libc::IN_MOVED_TO;
const INODE_EVENTS: u32 = libc::IN_MODIFY | libc::IN_ATTRIB;

/// Adding a watch takes a path: `/proc/self/fd/N` relative to the working
/// directory. The working directory is the process's, so additions are
/// serialized (nothing else in walkfs uses relative paths).
static CWD: Mutex<()> = Mutex::new(());

pub(crate) struct Watcher {
    inotify: OwnedFd,
    /// Watch descriptor -> the watched directory's (device, inode).
    wds: Mutex<HashMap<i32, (u64, u64)>>,
    watched: Mutex<HashSet<(u64, u64)>>,
    degraded: AtomicBool,
    sink: Arc<dyn ChangeSink>,
    nodes: Arc<RwLock<Nodes>>,
    proc_fd: Arc<OwnedFd>,
}

impl Watcher {
    pub fn new(
        sink: Arc<dyn ChangeSink>,
        nodes: Arc<RwLock<Nodes>>,
        proc_fd: Arc<OwnedFd>,
    ) -> Result<Arc<Watcher>> {
        let w = Arc::new(Watcher {
            inotify: sys::inotify_init()?,
            wds: Mutex::new(HashMap::new()),
            watched: Mutex::new(HashSet::new()),
            degraded: AtomicBool::new(false),
            sink,
            nodes,
            proc_fd,
        });
        let dirs: Vec<(Arc<OwnedFd>, (u64, u64))> = w
            .nodes
            .read()
            .by_id
            .values()
            .filter(|n| n.is_dir)
            .map(|n| (n.fd.clone(), n.key))
            .collect();
        for (fd, key) in dirs {
            w.add(&fd, key);
        }
        let thread = w.clone();
        std::thread::Builder::new()
            .name("walkfs-inotify".into())
            .spawn(move || thread.run())
            .map_err(walkfs_fsapi::Errno::from)?;
        Ok(w)
    }

    /// Watch the directory `fd` (an `O_PATH` descriptor) is, once.
    pub fn add(&self, fd: &OwnedFd, key: (u64, u64)) {
        if !self.watched.lock().insert(key) {
            return;
        }
        let res = {
            let _cwd = CWD.lock();
            sys::fchdir(self.proc_fd.as_fd()).and_then(|()| {
                sys::inotify_add_watch(self.inotify.as_fd(), &sys::fd_name(fd.as_raw_fd()), MASK)
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
                if e == walkfs_fsapi::Errno::ENOSPC && !self.degraded.swap(true, Ordering::AcqRel) {
                    tracing::warn!(
                        "inotify watch limit reached (fs.inotify.max_user_watches): \
                         changes on the host may go unseen; clients revalidate"
                    );
                    self.sink.changed(&[Change::Degraded]);
                }
            }
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
            match sys::poll_in(self.inotify.as_fd(), 500) {
                Ok(true) => {}
                Ok(false) => continue,
                Err(e) => {
                    tracing::error!("inotify poll: {e}");
                    return;
                }
            }
            let n = match sys::read(self.inotify.as_fd(), &mut buf) {
                Ok(n) => n,
                Err(walkfs_fsapi::Errno::EAGAIN) | Err(walkfs_fsapi::Errno::EINTR) => continue,
                Err(e) => {
                    tracing::error!("inotify read: {e}");
                    return;
                }
            };
            let changes = self.translate(&buf[..n]);
            if !changes.is_empty() {
                self.sink.changed(&changes);
            }
        }
    }

    /// One read's worth of events, as changes, each once.
    fn translate(&self, mut buf: &[u8]) -> Vec<Change> {
        let mut out = Vec::new();
        let mut seen = HashSet::new();
        let mut push = |c: Change| {
            if seen.insert(c.clone()) {
                out.push(c);
            }
        };
        const HEADER: usize = 16;
        while buf.len() >= HEADER {
            let word = |i: usize| u32::from_ne_bytes([buf[i], buf[i + 1], buf[i + 2], buf[i + 3]]);
            let wd = word(0) as i32;
            let mask = word(4);
            let len = word(12) as usize;
            let Some(raw) = buf.get(HEADER..HEADER + len) else {
                break;
            };
            let name = &raw[..raw.iter().position(|&b| b == 0).unwrap_or(len)];
            buf = &buf[HEADER + len..];
            if mask & libc::IN_Q_OVERFLOW != 0 {
                push(Change::All);
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
            let nodes = self.nodes.read();
            let dir = nodes.by_key.get(&key).copied().unwrap_or(0);
            if name.is_empty() {
                if mask & INODE_EVENTS != 0 {
                    push(Change::Inode {
                        node: NodeId(dir),
                        ino: key.1,
                    });
                }
                continue;
            }
            let entry = Change::Entry {
                dir: NodeId(dir),
                dir_ino: key.1,
                name: name.to_vec(),
            };
            if mask & ENTRY_EVENTS != 0 {
                push(entry);
                continue;
            }
            // Data or attributes of a child: name the inode (a hard link
            // elsewhere shares it). When it cannot be found any more, the
            // name changed too and an entry event follows; drop the name
            // now anyway.
            let child = nodes
                .by_id
                .get(&dir)
                .and_then(|d| sys::fstatat_nofollow(d.fd.as_fd(), name).ok());
            match child {
                Some((dev, ino)) => push(Change::Inode {
                    node: NodeId(nodes.by_key.get(&(dev, ino)).copied().unwrap_or(0)),
                    ino,
                }),
                None => push(entry),
            }
        }
        out
    }
}
