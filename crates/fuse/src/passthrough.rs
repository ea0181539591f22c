//! FUSE passthrough (kernel 6.9+): the kernel reads, writes and maps a
//! file straight through the host file behind it, and no READ or WRITE
//! reaches us.
//!
//! The kernel takes a backing file by id: we register the host file
//! (`FUSE_DEV_IOC_BACKING_OPEN` on an open descriptor of it), name the
//! id in the OPEN or CREATE reply, and drop the id when no open needs it
//! any more. The kernel opens a backing file of its own on the same path
//! with the opener's flags, so one id serves every open of a node
//! whatever its access mode: an id is kept per node, counted by the
//! opens that named it, and dropped at the last RELEASE or when the
//! kernel forgets the node (a create's open under zero-message opens
//! gets no RELEASE).
//!
//! All opens of an inode must agree: the kernel refuses (ETXTBSY) a
//! cached open of an inode open in passthrough, and the reverse. So a
//! node that has an id gets it on every open; only a node whose
//! registration failed is opened cached.
//!
//! Passthrough needs real opens (an OPEN per open(2), a RELEASE per
//! close), where without it `cache=loose` opens cost no message at all:
//! a zero-message open of a file the mount created with a backing file,
//! while that open lasts, fails with EIO in the kernel (cached and
//! passthrough I/O on one inode), so there is no mixing the two. And it
//! excludes the write-back cache. It still wins where files are written
//! (no WRITE, no write-back of times, no SETATTR per unlink) and where
//! they are read once (no READ): on by default where the daemon may
//! register backing files (CAP_SYS_ADMIN) and the kernel offers it;
//! `-o passthrough=0` keeps the write-back cache instead. `walkfs bench
//! workloads` measures both (docs/fuse-transport.md).

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};

use parking_lot::RwLock;
use walkfs_fusewire::Backing;

use crate::Nodes;

/// May this process register backing files (CAP_SYS_ADMIN in its
/// effective set, which the kernel asks of FUSE_DEV_IOC_BACKING_OPEN)?
pub fn permitted() -> bool {
    const CAP_SYS_ADMIN: u32 = 21;
    std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("CapEff:"))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .is_some_and(|caps| caps & (1 << CAP_SYS_ADMIN) != 0)
    })
}

/// What a node's record says of passthrough (lib.rs `Node::backing`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Backed {
    /// Opened cached (so far).
    #[default]
    No,
    /// A backing id, and the opens that named it.
    Id { id: i32, opens: u32 },
    /// Its registration failed: opened cached from then on.
    Refused,
}

/// The backing ids handed to the kernel; each node's own is in its
/// record (`Node::backing`).
pub(crate) struct Backings {
    wanted: bool,
    /// Agreed at INIT and not given up since (a refused registration:
    /// the daemon lacks CAP_SYS_ADMIN).
    on: AtomicBool,
    kernel: OnceLock<Backing>,
    nodes: Arc<RwLock<Nodes>>,
    /// Nodes with an id, read without the lock on every attribute
    /// request.
    held: AtomicUsize,
}

impl Backings {
    /// Asked for (`wanted`) where the files are host files (a local
    /// directory).
    pub fn new(wanted: bool, nodes: Arc<RwLock<Nodes>>) -> Backings {
        Backings {
            wanted,
            on: AtomicBool::new(false),
            kernel: OnceLock::new(),
            nodes,
            held: AtomicUsize::new(0),
        }
    }

    /// Is passthrough to be asked for at INIT?
    pub fn wanted(&self) -> bool {
        self.wanted
    }

    /// INIT's outcome.
    pub fn agreed(&self, on: bool) {
        self.on.store(on && self.wanted(), Relaxed);
    }

    /// The session's ioctl handle, once it exists.
    pub fn set_kernel(&self, b: Backing) {
        let _ = self.kernel.set(b);
    }

    /// Passthrough in use (agreed, not given up).
    pub fn on(&self) -> bool {
        self.on.load(Relaxed)
    }

    /// The backing id for an open of node `ino` whose host file is
    /// `file`, counted as one open; `None`: open it cached.
    pub fn for_open(&self, ino: u64, file: Option<&OwnedFd>) -> Option<i32> {
        if !self.on() {
            return None;
        }
        // The node's record is held across the registration, so that two
        // opens of one node register one id.
        let mut nodes = self.nodes.write();
        let n = nodes.by_id.get_mut(&ino)?;
        match &mut n.backing {
            Backed::Id { id, opens } => {
                *opens += 1;
                return Some(*id);
            }
            Backed::Refused => return None,
            Backed::No => {}
        }
        let kernel = self.kernel.get()?;
        let file = file?;
        match kernel.open(file.as_raw_fd()) {
            Ok(id) => {
                n.backing = Backed::Id { id, opens: 1 };
                self.held.fetch_add(1, Relaxed);
                Some(id)
            }
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
                // Not ours to give (no CAP_SYS_ADMIN): every open is
                // cached from now on; without the write-back cache, which
                // INIT left out, writes go through.
                tracing::warn!(
                    "passthrough refused by the kernel ({e}): the daemon needs CAP_SYS_ADMIN; \
                     files are opened cached from now on"
                );
                self.on.store(false, Relaxed);
                None
            }
            Err(e) => {
                // This file only (its file system stacks too deep, or has
                // no read_iter): it stays cached.
                tracing::debug!("passthrough of node {ino} refused: {e}");
                n.backing = Backed::Refused;
                None
            }
        }
    }

    /// An open of `ino` that named its backing id ended (RELEASE).
    /// True when it was the id's last: the file's attributes as the vfs
    /// cached them are stale (the caller drops them).
    pub fn released(&self, ino: u64) -> bool {
        if self.held.load(Relaxed) == 0 {
            return false;
        }
        let mut nodes = self.nodes.write();
        let Some(n) = nodes.by_id.get_mut(&ino) else {
            return false;
        };
        let Backed::Id { id, opens } = &mut n.backing else {
            return false;
        };
        *opens = opens.saturating_sub(1);
        if *opens > 0 {
            return false;
        }
        let id = *id;
        n.backing = Backed::No;
        drop(nodes);
        self.drop_id(id);
        true
    }

    /// The kernel forgot a node whose record said `b`: no open of it is
    /// left. True when it had an id (its cached attributes are stale).
    pub fn forgotten(&self, b: Backed) -> bool {
        match b {
            Backed::Id { id, .. } => {
                self.drop_id(id);
                true
            }
            _ => false,
        }
    }

    /// Is node `ino` open with a backing file (written behind the vfs's
    /// back, so that its attributes are asked of the host each time)?
    /// Not with the node records locked.
    #[inline]
    pub fn backed(&self, ino: u64) -> bool {
        self.held.load(Relaxed) != 0
            && self
                .nodes
                .read()
                .by_id
                .get(&ino)
                .is_some_and(|n| matches!(n.backing, Backed::Id { .. }))
    }

    /// Backing ids held (for statistics and tests).
    pub fn held(&self) -> usize {
        self.held.load(Relaxed)
    }

    /// Give id `id` back to the kernel.
    fn drop_id(&self, id: i32) {
        self.held.fetch_sub(1, Relaxed);
        if let Some(k) = self.kernel.get() {
            if let Err(e) = k.close(id) {
                tracing::debug!("backing id {id}: {e}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_handed_out_unless_agreed_and_registered() {
        let f: OwnedFd = std::fs::File::open("/dev/null").unwrap().into();
        let b = Backings::new(true, Arc::default());
        assert!(b.wanted() && !b.on());
        // Not agreed at INIT: opens stay cached.
        assert_eq!(b.for_open(5, Some(&f)), None);
        b.agreed(true);
        assert!(b.on());
        // No session to register with: cached, and nothing held.
        assert_eq!(b.for_open(5, Some(&f)), None);
        assert_eq!(b.held(), 0);
        assert!(!b.backed(5) && !b.released(5) && !b.forgotten(Backed::No));
        let off = Backings::new(false, Arc::default());
        off.agreed(true);
        assert!(!off.on() && !off.wanted());
    }
}
