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

use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::sync::OnceLock;

use parking_lot::Mutex;
use walkfs_fusewire::Backing;

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

/// A node's backing id and the opens that named it.
struct Id {
    id: i32,
    opens: u32,
}

/// The backing ids handed to the kernel.
pub(crate) struct Backings {
    wanted: bool,
    /// Agreed at INIT and not given up since (a refused registration:
    /// the daemon lacks CAP_SYS_ADMIN).
    on: AtomicBool,
    kernel: OnceLock<Backing>,
    ids: Mutex<HashMap<u64, Id>>,
    /// `ids.len()`, read without the lock on every attribute request.
    held: AtomicUsize,
    /// Nodes whose registration failed: opened cached from then on.
    refused: Mutex<std::collections::HashSet<u64>>,
}

impl Backings {
    /// Asked for (`wanted`) where the files are host files (a local
    /// directory).
    pub fn new(wanted: bool) -> Backings {
        Backings {
            wanted,
            on: AtomicBool::new(false),
            kernel: OnceLock::new(),
            ids: Mutex::new(HashMap::new()),
            held: AtomicUsize::new(0),
            refused: Mutex::new(Default::default()),
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
        let mut ids = self.ids.lock();
        if let Some(e) = ids.get_mut(&ino) {
            e.opens += 1;
            return Some(e.id);
        }
        let kernel = self.kernel.get()?;
        let file = file?;
        if self.refused.lock().contains(&ino) {
            return None;
        }
        match kernel.open(file.as_raw_fd()) {
            Ok(id) => {
                ids.insert(ino, Id { id, opens: 1 });
                self.held.store(ids.len(), Relaxed);
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
                self.refused.lock().insert(ino);
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
        let mut ids = self.ids.lock();
        let Some(e) = ids.get_mut(&ino) else {
            return false;
        };
        e.opens = e.opens.saturating_sub(1);
        if e.opens > 0 {
            return false;
        }
        let id = e.id;
        ids.remove(&ino);
        self.held.store(ids.len(), Relaxed);
        drop(ids);
        self.drop_id(id);
        true
    }

    /// The kernel forgot node `ino`: no open of it is left. True when it
    /// had an id (its cached attributes are stale).
    pub fn forgotten(&self, ino: u64) -> bool {
        if self.held.load(Relaxed) == 0 && !self.on() {
            return false;
        }
        self.refused.lock().remove(&ino);
        let mut ids = self.ids.lock();
        let e = ids.remove(&ino);
        self.held.store(ids.len(), Relaxed);
        drop(ids);
        e.map(|e| self.drop_id(e.id)).is_some()
    }

    /// Is node `ino` open with a backing file (written behind the vfs's
    /// back, so that its attributes are asked of the host each time)?
    #[inline]
    pub fn backed(&self, ino: u64) -> bool {
        self.held.load(Relaxed) != 0 && self.ids.lock().contains_key(&ino)
    }

    /// Backing ids held (for statistics and tests).
    pub fn held(&self) -> usize {
        self.held.load(Relaxed)
    }

    fn drop_id(&self, id: i32) {
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
        let b = Backings::new(true);
        assert!(b.wanted() && !b.on());
        // Not agreed at INIT: opens stay cached.
        assert_eq!(b.for_open(5, Some(&f)), None);
        b.agreed(true);
        assert!(b.on());
        // No session to register with: cached, and nothing held.
        assert_eq!(b.for_open(5, Some(&f)), None);
        assert_eq!(b.held(), 0);
        assert!(!b.backed(5) && !b.released(5) && !b.forgotten(5));
        let off = Backings::new(false);
        off.agreed(true);
        assert!(!off.on() && !off.wanted());
    }
}
