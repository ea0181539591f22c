//! The mount's counters, read by `walkfs stats MOUNTPOINT` as the extended
//! attribute [`STATS_XATTR`] of the mount's root (no side file, no
//! socket: any process that can see the mount can ask).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use serde::Serialize;
use walkfs_vfs::Vfs;

use crate::MountOptions;

/// The attribute `walkfs stats` reads: JSON of [`MountStats`].
pub const STATS_XATTR: &str = "user.walkfs.stats";

/// The extended attribute of the mount's root whose reading drains the
/// mount: everything gathered is sent and every change running behind
/// its caller carried out, then a failure any met since the last such
/// read is reported as the read's error (`walkfs sync MOUNTPOINT`;
/// `sync(2)` never reaches a FUSE daemon).
pub const SYNC_XATTR: &str = "user.walkfs.sync";

/// What the kernel asked of the mount.
#[derive(Default, Debug)]
pub struct FuseCounters {
    pub lookups: AtomicU64,
    /// Lookups answered "no such name" (with a negative entry the kernel
    /// keeps when `negtimeout` allows).
    pub negative_replies: AtomicU64,
    pub getattrs: AtomicU64,
    pub readlinks: AtomicU64,
    pub opens: AtomicU64,
    pub creates: AtomicU64,
    pub reads: AtomicU64,
    pub writes: AtomicU64,
    pub readdirs: AtomicU64,
    pub forgets: AtomicU64,
}

#[derive(Debug, Serialize, serde::Deserialize, Default)]
pub struct MountStats {
    pub options: String,
    /// Requests from the kernel (those it could not answer from its own
    /// caches).
    pub fuse: Vec<(String, u64)>,
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
        let fuse = [
            ("lookup", &c.lookups),
            ("lookup_negative", &c.negative_replies),
            ("getattr", &c.getattrs),
            ("readlink", &c.readlinks),
            ("open", &c.opens),
            ("create", &c.creates),
            ("read", &c.reads),
            ("write", &c.writes),
            ("opendir", &c.readdirs),
            ("forget", &c.forgets),
        ]
        .iter()
        .map(|(n, v)| (n.to_string(), v.load(Relaxed)))
        .collect();
        let cs = vfs.cache_stats();
        let wb = vfs.write_back_stats();
        let bc = vfs.backend_calls();
        let mut s = MountStats {
            backend_calls: bc.by_op.iter().map(|(n, c)| (n.to_string(), *c)).collect(),
            backend_total: bc.total,
            backend_waited: bc.waited,
            options: opts.text.clone(),
            fuse,
            vfs_slow_lookups: cs.slow_lookups,
            vfs_backend_lookups: cs.backend_lookups,
            vfs_complete_misses: cs.complete_misses,
            vfs_negative_created: cs.negative_created,
            vfs_restarts: cs.retries,
            vfs_dentries: cs.dentries,
            vfs_changes: cs.changes,
            vfs_changes_lost: cs.changes_lost,
            coherent: vfs.is_coherent(),
            writeback_submitted: wb.submitted,
            writeback_inflight: wb.inflight,
            writeback_failed: wb.failed,
            writeback_waits: wb.waits,
            writeback_gathered: wb.gathered,
            readahead_used: cs.readahead_used,
            readahead_wasted: cs.readahead_wasted,
            resources,
            ..Default::default()
        };
        if let Some(f) = vfs.p9_fid_stats() {
            s.resources.extend([
                ("9p_nodes".to_string(), f.nodes),
                ("9p_fids_held".to_string(), f.held),
                ("9p_fids_max".to_string(), f.cap),
                ("9p_fids_released".to_string(), f.released),
                ("9p_rewalks".to_string(), f.rewalks),
            ]);
        }
        if let Some(p) = vfs.p9_stats() {
            s.rpcs = p.rpcs.iter().map(|(n, c)| (n.to_string(), *c)).collect();
            s.total_rpcs = p.total_rpcs;
            s.bytes_sent = p.bytes_sent;
            s.bytes_received = p.bytes_received;
            s.wait_ms = p.wait_ns as f64 / 1e6;
        }
        s
    }
}
