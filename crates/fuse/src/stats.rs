//! The mount's counters, read by `walkfs stats MOUNTPOINT` through an
//! ioctl of the mount's root directory ([`STATS_IOCTL`]: no side file, no
//! socket; any process that can see the mount can ask). An ioctl, not an
//! extended attribute: the mount answers GETXATTR with ENOSYS once, so
//! the kernel stops asking it for `security.capability` before each
//! write and chown.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Instant;

use serde::Serialize;
use walkfs_vfs::Vfs;

use crate::MountOptions;

/// Linux's `_IOC(dir, type, nr, size)`.
const fn ioc(dir: u32, ty: u8, nr: u8, size: usize) -> u32 {
    (dir << 30) | ((size as u32) << 16) | ((ty as u32) << 8) | nr as u32
}

/// The most [`STATS_IOCTL`] returns (the largest size an ioctl number
/// can carry).
pub const STATS_MAX: usize = (1 << 14) - 1;

/// `_IOR('W', 1, [u8; STATS_MAX])` on the mount's root directory: JSON of
/// [`MountStats`] into the buffer; the ioctl returns its length.
pub const STATS_IOCTL: u32 = ioc(2, b'W', 1, STATS_MAX);

/// `_IO('W', 2)` on the mount's root directory: drains the mount.
/// Everything gathered is sent and every change running behind its
/// caller carried out, then a failure any met since the last drain is
/// the ioctl's error (`walkfs sync MOUNTPOINT`; `sync(2)` never reaches
/// a FUSE daemon).
pub const SYNC_IOCTL: u32 = ioc(0, b'W', 2, 0);

/// `_IO('W', 3)` on the mount's root directory: returns once every change
/// made behind the mount's back before the call (on the host, through
/// another client of its server) is shown: applied to the caches, the
/// kernel's invalidated, and replayed to the mount's watchers. What the
/// fsmonitor daemon does before it makes its cookie.
pub const SETTLE_IOCTL: u32 = ioc(0, b'W', 3, 0);

/// The requests the kernel sends, as counted: one slot per FUSE opcode the
/// mount answers (`Op as usize`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Lookup,
    Forget,
    Getattr,
    Setattr,
    Readlink,
    Symlink,
    Mknod,
    Mkdir,
    Unlink,
    Rmdir,
    Rename,
    Link,
    Open,
    Read,
    Write,
    Statfs,
    Release,
    Fsync,
    Getxattr,
    Listxattr,
    Flush,
    Opendir,
    Readdir,
    Releasedir,
    Fsyncdir,
    Access,
    Create,
    Readdirplus,
    Ioctl,
    Getlk,
    Setlk,
    Setxattr,
    Removexattr,
    Fallocate,
    Lseek,
    Tmpfile,
}

/// The opcodes' names, in [`Op`] order (as the kernel's fuse.h spells
/// them, lower case).
pub const OP_NAMES: [&str; 36] = [
    "lookup",
    "forget",
    "getattr",
    "setattr",
    "readlink",
    "symlink",
    "mknod",
    "mkdir",
    "unlink",
    "rmdir",
    "rename",
    "link",
    "open",
    "read",
    "write",
    "statfs",
    "release",
    "fsync",
    "getxattr",
    "listxattr",
    "flush",
    "opendir",
    "readdir",
    "releasedir",
    "fsyncdir",
    "access",
    "create",
    "readdirplus",
    "ioctl",
    "getlk",
    "setlk",
    "setxattr",
    "removexattr",
    "fallocate",
    "lseek",
    "tmpfile",
];

// Every Op has a name: the last variant is the last name.
const _: () = assert!(Op::Tmpfile as usize + 1 == OP_NAMES.len());

/// What the kernel asked of the mount: requests by opcode and the time
/// spent answering each kind (from the request's dispatch to the return
/// of its handler, which has sent the reply).
#[derive(Debug)]
pub struct FuseCounters {
    count: [AtomicU64; OP_NAMES.len()],
    nanos: [AtomicU64; OP_NAMES.len()],
    /// Lookups answered "no such name" (with a negative entry the kernel
    /// keeps when `negtimeout` allows).
    pub negative_replies: AtomicU64,
    /// The session's own counts (which transport carried the requests).
    session: std::sync::OnceLock<std::sync::Arc<walkfs_fusewire::SessionInfo>>,
}

impl Default for FuseCounters {
    fn default() -> Self {
        FuseCounters {
            count: std::array::from_fn(|_| AtomicU64::new(0)),
            nanos: std::array::from_fn(|_| AtomicU64::new(0)),
            negative_replies: AtomicU64::new(0),
            session: std::sync::OnceLock::new(),
        }
    }
}

impl FuseCounters {
    /// Report the transport counts of `info` with these.
    pub fn set_session(&self, info: std::sync::Arc<walkfs_fusewire::SessionInfo>) {
        let _ = self.session.set(info);
    }
}

/// One request being answered: counted, and its time added, when it
/// drops.
pub struct Timed<'a> {
    c: &'a FuseCounters,
    op: Op,
    since: Instant,
}

impl Drop for Timed<'_> {
    fn drop(&mut self) {
        let i = self.op as usize;
        self.c.count[i].fetch_add(1, Relaxed);
        let ns = u64::try_from(self.since.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.c.nanos[i].fetch_add(ns, Relaxed);
    }
}

impl FuseCounters {
    /// A request of kind `op` starts.
    pub fn start(&self, op: Op) -> Timed<'_> {
        Timed {
            c: self,
            op,
            since: Instant::now(),
        }
    }

    /// How many requests of kind `op` were answered.
    pub fn count(&self, op: Op) -> u64 {
        self.count[op as usize].load(Relaxed)
    }

    /// (name, requests, microseconds spent) for every opcode seen.
    pub fn snapshot(&self) -> Vec<(String, u64, u64)> {
        OP_NAMES
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let c = self.count[i].load(Relaxed);
                (n.to_string(), c, self.nanos[i].load(Relaxed) / 1000)
            })
            .filter(|(_, c, _)| *c > 0)
            .collect()
    }
}

#[derive(Debug, Serialize, serde::Deserialize, Default)]
pub struct MountStats {
    pub options: String,
    /// Requests from the kernel (those it could not answer from its own
    /// caches) by opcode, plus `lookup_negative`.
    pub fuse: Vec<(String, u64)>,
    /// Microseconds spent answering them, by opcode.
    #[serde(default)]
    pub fuse_us: Vec<(String, u64)>,
    #[serde(default)]
    pub fuse_total: u64,
    /// Requests that came over `/dev/fuse` and over io_uring, and the
    /// io_uring queues (0: `/dev/fuse` only).
    #[serde(default)]
    pub fuse_via_dev: u64,
    #[serde(default)]
    pub fuse_via_uring: u64,
    #[serde(default)]
    pub fuse_uring_queues: u64,
    /// What INIT agreed with the kernel: the protocol's minor version
    /// (7.x) and the flags.
    #[serde(default)]
    pub fuse_minor: u32,
    #[serde(default)]
    pub fuse_flags: u64,
    /// The vfs's dentry cache: lookups that missed the lock-free path,
    /// lookups that reached the backend, negative entries made.
    pub vfs_slow_lookups: u64,
    pub vfs_backend_lookups: u64,
    #[serde(default)]
    pub vfs_complete_misses: u64,
    pub vfs_negative_created: u64,
    /// Calls that started over because what they stood on changed under
    /// them (a rename, a removal, a busy writer): rare, or something is
    /// wrong.
    #[serde(default)]
    pub vfs_restarts: u64,
    pub vfs_dentries: u32,
    /// cache=coherent: changes the backend reported, times it lost some
    /// (everything was dropped), and whether every change is being seen.
    #[serde(default)]
    pub vfs_changes: u64,
    #[serde(default)]
    pub vfs_changes_lost: u64,
    #[serde(default)]
    pub vfs_changes_own: u64,
    #[serde(default)]
    pub coherent: bool,
    /// 9P RPCs by type (empty when the source is not 9P).
    pub rpcs: Vec<(String, u64)>,
    pub total_rpcs: u64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    /// Time spent waiting for the server's replies.
    pub wait_ms: f64,
    /// The vfs's write-back: changes run behind their callers, those
    /// still in flight, those refused (each also logged, and reported at
    /// fsync/close/syncfs), times a caller waited for them, and small
    /// writes gathered into larger ones.
    #[serde(default)]
    pub writeback_submitted: u64,
    #[serde(default)]
    pub writeback_inflight: u64,
    #[serde(default)]
    pub writeback_failed: u64,
    #[serde(default)]
    pub writeback_waits: u64,
    #[serde(default)]
    pub writeback_gathered: u64,
    /// Directory listings read ahead and used, and read ahead in vain.
    #[serde(default)]
    pub readahead_used: u64,
    #[serde(default)]
    pub readahead_wasted: u64,
    /// Listings asked for ahead, and the time callers spent waiting for
    /// one to arrive (ms).
    #[serde(default)]
    pub readahead_asked: u64,
    #[serde(default)]
    pub readahead_wait_ms: f64,
    /// Files' opens and first reads asked for ahead, used, given up.
    #[serde(default)]
    pub fileahead_asked: u64,
    #[serde(default)]
    pub fileahead_used: u64,
    #[serde(default)]
    pub fileahead_wasted: u64,
    /// Bounded resources and their use: the nodes the kernel holds, the
    /// vfs descriptors cached for them (and their bounds), the 9P
    /// client's fids (held, bound, released, walks to get one back).
    #[serde(default)]
    pub resources: Vec<(String, u64)>,
    /// Calls into the backends by operation, their total, and how many
    /// of them a caller waited for.
    #[serde(default)]
    pub backend_calls: Vec<(String, u64)>,
    #[serde(default)]
    pub backend_total: u64,
    #[serde(default)]
    pub backend_waited: u64,
}

impl MountStats {
    pub(crate) fn collect(
        c: &FuseCounters,
        vfs: &Vfs,
        opts: &MountOptions,
        resources: Vec<(String, u64)>,
    ) -> MountStats {
        let snap = c.snapshot();
        let fuse_total = snap.iter().map(|(_, n, _)| n).sum();
        let fuse_us = snap.iter().map(|(n, _, us)| (n.clone(), *us)).collect();
        let mut fuse: Vec<(String, u64)> = snap.into_iter().map(|(n, c, _)| (n, c)).collect();
        fuse.push((
            "lookup_negative".to_string(),
            c.negative_replies.load(Relaxed),
        ));
        let cs = vfs.cache_stats();
        let wb = vfs.write_back_stats();
        let bc = vfs.backend_calls();
        let mut s = MountStats {
            backend_calls: bc.by_op.iter().map(|(n, c)| (n.to_string(), *c)).collect(),
            backend_total: bc.total,
            backend_waited: bc.waited,
            options: opts.text.clone(),
            fuse,
            fuse_us,
            fuse_total,
            vfs_slow_lookups: cs.slow_lookups,
            vfs_backend_lookups: cs.backend_lookups,
            vfs_complete_misses: cs.complete_misses,
            vfs_negative_created: cs.negative_created,
            vfs_restarts: cs.retries,
            vfs_dentries: cs.dentries,
            vfs_changes: cs.changes,
            vfs_changes_lost: cs.changes_lost,
            vfs_changes_own: cs.changes_own,
            coherent: vfs.is_coherent(),
            writeback_submitted: wb.submitted,
            writeback_inflight: wb.inflight,
            writeback_failed: wb.failed,
            writeback_waits: wb.waits,
            writeback_gathered: wb.gathered,
            readahead_used: cs.readahead_used,
            readahead_wasted: cs.readahead_wasted,
            readahead_asked: cs.readahead_asked,
            readahead_wait_ms: cs.readahead_wait_ns as f64 / 1e6,
            fileahead_asked: cs.fileahead_asked,
            fileahead_used: cs.fileahead_used,
            fileahead_wasted: cs.fileahead_wasted,
            resources,
            ..Default::default()
        };
        if let Some(i) = c.session.get() {
            s.fuse_via_dev = i.dev_requests.load(Relaxed);
            s.fuse_via_uring = i.uring_requests.load(Relaxed);
            s.fuse_uring_queues = i.uring_queues.load(Relaxed) as u64;
            s.fuse_minor = i.minor.load(Relaxed);
            s.fuse_flags = i.flags.load(Relaxed);
        }
        if let Some(f) = vfs.remote_handles() {
            s.resources.extend([
                ("9p_nodes".to_string(), f.nodes),
                ("9p_fids_held".to_string(), f.held),
                ("9p_fids_max".to_string(), f.cap),
                ("9p_fids_released".to_string(), f.released),
                ("9p_rewalks".to_string(), f.rewalks),
            ]);
        }
        if let Some(p) = vfs.rpc_stats() {
            s.rpcs = p.rpcs.iter().map(|(n, c)| (n.to_string(), *c)).collect();
            s.total_rpcs = p.total_rpcs;
            s.bytes_sent = p.bytes_sent;
            s.bytes_received = p.bytes_received;
            s.wait_ms = p.wait_ns as f64 / 1e6;
        }
        s
    }
}
